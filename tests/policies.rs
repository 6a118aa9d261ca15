//! Envelope policies end to end: `replay --policies` and `policy check` as the binary runs
//! them, and `serve` reloading policies (SIGHUP's path), with the Parquet read back.

mod common;

use std::path::Path;

use common::child::{binary, stderr, succeeded};
use common::collector::{config, example_requests, started, stop, PRICING};
use common::otel::{by_service, export_grpc};
use common::replay::{Replay, Replayed};
use common::Row;
use retry_spend_collector::service::start;

const VERSION: &str = "a42d372ccf0b5dd13ecf71203521f9d2";
const EXAMPLE_POLICY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/config/policy-examples/support-summaries.toml"
);

/// Matches the example's `req-no-envelope` (service legacy-worker, task classification, its
/// attempts carry `gen_ai.operation.name = chat`), pinning the newest snapshot.
const LEGACY: &str = r#"
[[policy]]
name = "legacy-classification"
match.service = "legacy-*"
match.task_type = "classif*"
match.model = "qwen*"
match.attributes = { "gen_ai.operation.name" = "chat" }
[policy.envelope]
pricing_version = "latest"
billing_group = "vip"
max_incremental_usd = "0.015"
max_attempts_after_first = 1
"#;

/// Matches every request: the example's lone GenAI span of service `notebook` takes it.
const CATCH_ALL: &str = r#"
[[policy]]
name = "catch-all"
[policy.envelope]
pricing_version = "a42d372ccf0b5dd13ecf71203521f9d2"
pricing_checked_at = "2026-08-22"
pricing_source = "https://aiwave.live/api/pricing"
billing_group = "default"
max_incremental_usd = "0.01"
max_attempts_after_first = 0
task_type = "unlabelled"
"#;

fn policies_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

/// `replay` of the example with the policies of `dir`.
fn replay(dir: &Path) -> Replayed {
    Replay::example().policies(dir).run()
}

fn rows_of<'a>(rows: &'a [Row], request: &str) -> Vec<&'a Row> {
    let mut found: Vec<&Row> = rows.iter().filter(|r| r["request_id"] == request).collect();
    found.sort_by(|a, b| a["attempt_index"].cmp(&b["attempt_index"]));
    found
}

#[test]
fn replay_with_policies_gives_requests_without_an_envelope_the_first_matching_one() {
    let policies = policies_dir(&[("10-legacy.toml", LEGACY), ("zz-default.toml", CATCH_ALL)]);
    let rows = replay(policies.path()).ok().rows();

    let legacy = rows_of(&rows, "req-no-envelope");
    assert_eq!(legacy.len(), 2);
    let retry = legacy[1];
    let expect = [
        ("envelope_source", "policy:legacy-classification"),
        ("attempt_source", "declared"),
        ("task_type", "classification"),
        ("decision", "within_envelope"),
        ("audited", "true"),
        ("unaudited_reason", "NULL"),
        ("spend_class", "retry"),
        // `latest` resolves to the shipped snapshot (checked 2026-08-22, spans of 2026-08-25).
        ("pricing_version", VERSION),
        ("pricing_checked_at", "2026-08-22"),
        ("pricing_source", "https://aiwave.live/api/pricing"),
        // 4000 * 0.246575 + 1000 * 1.862 = 2848.3 per million
        ("cumulative_incremental_usd", "0.002848300000000000"),
        ("max_incremental_usd", "0.015000000000000000"),
        ("billing_group", "vip"),
    ];
    for (column, value) in expect {
        assert_eq!(retry[column], value, "{column}");
    }
    assert_eq!(retry["pricing_digest"].len(), 64);
    assert_eq!(legacy[0]["envelope_source"], "policy:legacy-classification");

    let single = rows_of(&rows, "c49fea7425fa7f86");
    assert_eq!(single[0]["envelope_source"], "policy:catch-all");
    assert_eq!(single[0]["attempt_source"], "single");
    assert_eq!(single[0]["task_type"], "unlabelled");
    assert_eq!(single[0]["billing_group"], "default");

    // Requests with envelopes of their own keep them.
    let own = rows_of(&rows, "req-glm-retry");
    assert!(own.iter().all(|r| r["envelope_source"] == "span"));
    assert_eq!(own[1]["decision"], "within_envelope");
}

#[test]
fn replay_without_policies_leaves_requests_without_an_envelope_unaudited() {
    let policies = policies_dir(&[]);
    let rows = replay(policies.path()).ok().rows();
    let legacy = rows_of(&rows, "req-no-envelope");
    assert_eq!(legacy[1]["unaudited_reason"], "no_envelope");
    assert_eq!(legacy[1]["envelope_source"], "NULL");
}

#[test]
fn replay_refuses_a_bad_policy_file_naming_file_and_key() {
    let policies = policies_dir(&[(
        "bad.toml",
        "[[policy]]\nname = \"x\"\nmatch.servce = \"a\"\n[policy.envelope]\n",
    )]);
    let result = replay(policies.path());
    assert!(!result.success());
    let stderr = result.stderr();
    assert!(
        stderr.contains("bad.toml: policy[0].match.servce: unknown field"),
        "{stderr}"
    );
    assert!(result.rows().is_empty(), "nothing is written");
}

#[test]
fn replay_refuses_a_named_policies_directory_that_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let result = replay(&missing);
    assert!(!result.success());
    let stderr = result.stderr();
    assert!(stderr.contains("nope"), "{stderr}");
}

#[test]
fn policy_check_lists_policies_in_matching_order_and_fails_on_errors() {
    let policies = policies_dir(&[("zz-default.toml", CATCH_ALL), ("10-legacy.toml", LEGACY)]);
    let result = binary()
        .args(["policy", "check"])
        .arg(policies.path())
        .args(["--pricing", PRICING])
        .output()
        .unwrap();
    let stdout = succeeded("policy check", &result);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(
        lines[0].starts_with("legacy-classification  file 10-legacy.toml  match service=legacy-*"),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with(
            "catch-all  file zz-default.toml  match every request  envelope pricing_version=a42d"
        ),
        "{stdout}"
    );

    let example = binary()
        .args(["policy", "check"])
        .arg(Path::new(EXAMPLE_POLICY).parent().unwrap())
        .output()
        .unwrap();
    succeeded("policy check of the examples", &example);

    let broken = policies_dir(&[(
        "bad.toml",
        "[[policy]]\nname = \"x\"\nmatch.model = \"[\"\n[policy.envelope]\n",
    )]);
    let result = binary()
        .args(["policy", "check"])
        .arg(broken.path())
        .output()
        .unwrap();
    assert!(!result.status.success());
    let stderr = stderr(&result);
    assert!(
        stderr.contains("bad.toml: policy[0].match.model: "),
        "{stderr}"
    );
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

/// A policy like LEGACY under another name.
fn legacy_named(name: &str) -> String {
    LEGACY.replace("legacy-classification", name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_swaps_policies_and_a_broken_file_keeps_the_ones_in_use() {
    let policies = tempfile::tempdir().unwrap();
    write(policies.path(), "a.toml", &legacy_named("before"));
    let (collector, out) =
        started(|c| c.processors.retry_spend.policies_dir = Some(policies.path().to_path_buf()))
            .await;

    write(
        policies.path(),
        "a.toml",
        "[[policy]]\nname = \"x\"\nbogus = 1\n",
    );
    let refused = collector.reload().await.unwrap_err();
    assert!(
        format!("{refused:#}").contains("a.toml: policy[0].bogus"),
        "{refused:#}"
    );

    export_grpc(collector.grpc_addr, by_service(&example_requests())).await;
    collector.sync().await.unwrap();
    write(policies.path(), "a.toml", &legacy_named("after"));
    let reloaded = collector.reload().await.unwrap();
    assert_eq!((reloaded.snapshots, reloaded.policies), (1, 1));
    let rows = stop(collector, out.path()).await;
    // req-no-envelope names its attempt count, so it was evaluated before the second reload.
    let legacy = rows_of(&rows, "req-no-envelope");
    assert!(
        legacy
            .iter()
            .all(|r| r["envelope_source"] == "policy:before"),
        "{legacy:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_evaluated_after_a_reload_use_the_new_policies() {
    let policies = tempfile::tempdir().unwrap();
    write(policies.path(), "a.toml", &legacy_named("before"));
    let (collector, out) =
        started(|c| c.processors.retry_spend.policies_dir = Some(policies.path().to_path_buf()))
            .await;
    write(policies.path(), "a.toml", &legacy_named("after"));
    let reloaded = collector.reload().await.unwrap();
    assert_eq!((reloaded.snapshots, reloaded.policies), (1, 1));
    export_grpc(collector.grpc_addr, by_service(&example_requests())).await;
    let rows = stop(collector, out.path()).await;
    let legacy = rows_of(&rows, "req-no-envelope");
    assert_eq!(legacy.len(), 2);
    assert!(
        legacy
            .iter()
            .all(|r| r["envelope_source"] == "policy:after"),
        "{legacy:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_to_start_with_a_bad_policy_file() {
    let policies = tempfile::tempdir().unwrap();
    write(
        policies.path(),
        "a.toml",
        "[[policy]]\nname = \"x\"\nmatch.service = \"{a}\"\n[policy.envelope]\n",
    );
    let out = tempfile::tempdir().unwrap();
    let mut cfg = config(out.path());
    cfg.processors.retry_spend.policies_dir = Some(policies.path().to_path_buf());
    let error = match start(cfg).await {
        Ok(_) => panic!("started with a bad policy file"),
        Err(e) => format!("{e:#}"),
    };
    assert!(error.contains("a.toml: policy[0].match.service"), "{error}");
}

//! The whole path for a team that changes no application code (issue 9): today's
//! instrumentation (a recording of openai-python with OpenLLMetry and the httpx
//! instrumentation), an envelope policy file, and a rate card fetched from a new-api-style
//! feed — and nothing of `retry_spend.*` on any span.

mod common;

use std::path::Path;

use common::child::{run, succeeded};
use common::collector::{EXAMPLE, PRICING as SHIPPED_PRICING};
use common::feed;
use common::replay::Replay;
use common::{usd, Row};

const FEED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/feeds/new-api.json"
);
const RECORDING: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/instrumented/openllmetry-sdk-retries.jsonl"
);
const FEED_VERSION: &str = "a42d372ccf0b5dd13ecf71203521f9d2";

/// The reviewed policy a platform team would commit: support services get the seed's envelope
/// at 0.005 USD, pinned to the newest rate card checked by the request's date.
const POLICY: &str = r#"
[[policy]]
name = "support-retries"
match.service = "support-*"
[policy.envelope]
pricing_version = "latest"
billing_group = "vip"
max_incremental_usd = "0.005"
max_attempts_after_first = 2
allow_family_fallback = true
allowed_fallback_families = ["glm", "qwen"]
task_type = "support_summary"
"#;

fn fetch_rate_card(pricing: &Path) {
    let addr = feed::serve(std::fs::read(FEED).unwrap());
    let out = run([
        "pricing",
        "fetch",
        "--format",
        "new-api",
        "--checked-at",
        "2026-08-22",
        "--source",
        "https://aiwave.live/api/pricing",
        "--out",
        pricing.to_str().unwrap(),
        format!("http://{addr}/api/pricing").as_str(),
    ]);
    let printed = succeeded("pricing fetch", &out);
    assert!(printed.contains(FEED_VERSION), "{printed}");
}

fn replay(pricing: &Path, policies: Option<&Path>, input: &str) -> Vec<Row> {
    let mut replay = Replay::new().pricing(pricing).input(input);
    if let Some(policies) = policies {
        replay = replay.policies(policies);
    }
    let mut rows = replay.rows();
    rows.sort_by(|a, b| {
        (&a["request_id"], &a["attempt_index"]).cmp(&(&b["request_id"], &b["attempt_index"]))
    });
    rows
}

#[test]
fn instrumentation_plus_a_policy_plus_a_fetched_rate_card_audit_the_sdk_retries() {
    let dir = tempfile::tempdir().unwrap();
    let (pricing, policies) = (dir.path().join("pricing"), dir.path().join("policies"));
    fetch_rate_card(&pricing);
    std::fs::create_dir_all(&policies).unwrap();
    std::fs::write(policies.join("support.toml"), POLICY).unwrap();

    let rows = replay(&pricing, Some(&policies), RECORDING);
    assert_eq!(
        rows.len(),
        3,
        "three HTTP tries of one chat call: {rows:#?}"
    );
    let column = |name: &str| rows.iter().map(|r| r[name].as_str()).collect::<Vec<_>>();
    let money = |name: &str| rows.iter().map(|r| usd(&r[name])).collect::<Vec<_>>();
    assert_eq!(column("attempt_source"), ["http_retry"; 3]);
    assert_eq!(column("envelope_source"), ["policy:support-retries"; 3]);
    assert_eq!(column("task_type"), ["support_summary"; 3]);
    assert_eq!(column("pricing_version"), [FEED_VERSION; 3]);
    assert_eq!(column("pricing_checked_at"), ["2026-08-22"; 3]);
    assert_eq!(column("audited"), ["true"; 3]);
    assert_eq!(
        column("decision"),
        ["first_attempt", "within_envelope", "over_envelope"]
    );
    // (1200 × 0.775 + 800 × 2.48) / 1e6 per glm-5 try at vip, from the fetched card.
    assert_eq!(
        money("cumulative_incremental_usd"),
        ["0", "0.002707226", "0.005414452"]
    );
    assert_eq!(
        money("remaining_envelope_usd"),
        ["0.005", "0.002292774", "-0.000414452"]
    );
}

#[test]
fn a_fetched_rate_card_prices_the_worked_example_as_the_shipped_one_does() {
    let dir = tempfile::tempdir().unwrap();
    let pricing = dir.path().join("pricing");
    fetch_rate_card(&pricing);
    let fetched = replay(&pricing, None, EXAMPLE);
    let shipped = replay(Path::new(SHIPPED_PRICING), None, EXAMPLE);
    assert_eq!(fetched.len(), shipped.len());
    let without_digest = |rows: Vec<Row>| -> Vec<Row> {
        rows.into_iter()
            .map(|mut r| {
                r.remove("pricing_digest");
                r
            })
            .collect()
    };
    assert_eq!(without_digest(fetched.clone()), without_digest(shipped));
    assert!(
        fetched
            .iter()
            .any(|r| r["retry_model"] == "deepseek-v4-flash"
                && r["billing_group"] == "vip"
                && usd(&r["planned_attempt_usd"]) == "0.0028068"),
        "the seed's first attempt at vip costs 0.0028068 USD"
    );
}

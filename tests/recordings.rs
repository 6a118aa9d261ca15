//! The recordings of real instrumentation libraries (tests/fixtures/instrumented/, made by
//! examples/record_instrumentations.py and examples/vercel/record_vercel.mjs against a fake
//! provider), replayed under a catch-all policy and compared with the provider's request log,
//! which is the truth: one request whose attempts are the provider's tries, in order, with their
//! models and failures, every one audited.

mod common;

use std::path::{Path, PathBuf};

use common::replay::Replay;
use common::Row;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/instrumented");

/// What the provider received, in order: (model, HTTP status).
struct Truth {
    requests: Vec<(String, u16)>,
    shows_tries: bool,
}

fn truth(path: &Path) -> Truth {
    let value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    Truth {
        requests: value["requests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["model"].as_str().unwrap().to_owned(),
                    u16::try_from(r["status"].as_u64().unwrap()).unwrap(),
                )
            })
            .collect(),
        shows_tries: value["shows_tries"].as_bool().unwrap(),
    }
}

/// Every recording that has a provider log, by name.
fn recordings() -> Vec<(String, PathBuf, Truth)> {
    let mut found: Vec<(String, PathBuf, Truth)> = std::fs::read_dir(FIXTURES)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|path| {
            let name = path
                .file_name()?
                .to_str()?
                .strip_suffix(".truth.json")?
                .to_owned();
            let spans = path.with_file_name(format!("{name}.jsonl"));
            Some((name, spans, truth(&path)))
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// The rows `replay` writes for one recording under the catch-all policy, by request id and
/// attempt index.
fn replayed(spans: &Path) -> Vec<Row> {
    let mut rows = Replay::new()
        .policies(Path::new(FIXTURES).join("policies"))
        .input(spans)
        .rows();
    rows.sort_by_key(|r| {
        (
            r["request_id"].clone(),
            r["attempt_index"].parse::<i32>().unwrap(),
        )
    });
    rows
}

/// Recordings whose spans cannot give the provider's tries, and what they give instead.
const NOT_AUDITABLE: &[(&str, &str)] = &[
    // Only the SDK's own tracing counts its resends; OpenLLMetry's span covers three tries.
    ("openllmetry-anthropic-sdk-retries", "glm-5"),
    // pydantic-ai's attempt span of the failed model covers both of its tries, with no HTTP
    // spans to count them, and the serving model has no attempt span: one call, named after it.
    ("pydantic-ai-fallback-no-httpx", "glm-5"),
    // LiteLLM without its request span writes both deployments' attributes onto the
    // application's span: the HTTP tries show, but not which model each asked for.
    ("litellm-router-fallback-shallow", "glm-5 glm-5"),
];

#[test]
fn every_recording_that_shows_its_tries_is_audited_as_the_provider_saw_it() {
    let all = recordings();
    assert!(all.len() >= 25, "{} recordings", all.len());
    let mut audited = 0;
    for (name, spans, truth) in &all {
        let rows = replayed(spans);
        let models: Vec<&str> = rows.iter().map(|r| r["retry_model"].as_str()).collect();
        if let Some((_, pinned)) = NOT_AUDITABLE.iter().find(|(n, _)| n == name) {
            assert_eq!(models.join(" "), *pinned, "{name}: what is written today");
            continue;
        }
        assert!(
            truth.shows_tries,
            "{name}: its log says its spans show no tries"
        );
        let requests: std::collections::BTreeSet<&str> =
            rows.iter().map(|r| r["request_id"].as_str()).collect();
        assert_eq!(requests.len(), 1, "{name}: one request, got {rows:#?}");
        let want: Vec<&str> = truth.requests.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(models, want, "{name}: the provider's tries in order");
        for (k, (row, (_, status))) in rows.iter().zip(&truth.requests).enumerate() {
            assert_eq!(row["attempt_index"], k.to_string(), "{name}");
            assert_eq!(
                row["error_type"] == "NULL",
                *status < 400,
                "{name}: attempt {k} failed as the provider answered {status}: {row:#?}"
            );
            assert_eq!(row["audited"], "true", "{name}: attempt {k}: {row:#?}");
            assert_ne!(row["input_tokens"], "NULL", "{name}: attempt {k}");
            assert_ne!(row["planned_attempt_usd"], "NULL", "{name}: attempt {k}");
        }
        let last = rows.last().unwrap();
        assert_ne!(last["output_tokens"], "NULL", "{name}: the answer's usage");
        audited += 1;
    }
    assert_eq!(audited, all.len() - NOT_AUDITABLE.len());
}

/// Exact money on a borrowed and an assumed row: the Anthropic SDK's fallback, whose failed
/// deepseek-v4-pro call reports no usage and borrows glm-5's (600 uncached + 400 cached + 200
/// cache-write = 1200 input; the snapshot lists no cache-write price, so those bill at the
/// input price), its cap the request's 800.
#[test]
fn a_failed_call_borrows_the_fallbacks_counts_and_is_priced_to_the_last_digit() {
    let rows = replayed(&Path::new(FIXTURES).join("anthropic-sdk-fallback.jsonl"));
    let first = &rows[0];
    assert_eq!(first["retry_model"], "deepseek-v4-pro");
    assert_eq!(first["usage_source"], "borrowed");
    assert_eq!(
        (
            first["input_tokens"].as_str(),
            first["cached_input_tokens"].as_str()
        ),
        ("1200", "400")
    );
    // (800 × 0.957 + 400 × 0.0333 + 800 × 2.871) / 1e6 with 600 + 200 uncached at 0.957.
    assert_eq!(common::usd(&first["planned_attempt_usd"]), "0.00307572");
    let second = &rows[1];
    assert_eq!(second["usage_source"], "span");
    assert_eq!(second["output_cap_source"], "request");
}

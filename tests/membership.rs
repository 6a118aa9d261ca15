//! Membership changes behind the real OpenTelemetry Collector, observed: requests whose
//! attempts end (and so are exported) across a rollout. The shipped
//! `config/otelcol-load-balancing.yaml` (static resolver, `load_balancing` exporter, trace id
//! routing) runs in front of retry-spend-collector instances on one S3 prefix (moto's server):
//!
//! 1. instances A, B, C: every request's attempt 0 ends and is exported;
//! 2. C is removed: the Collector restarts with A, B (the static resolver reads its list at
//!    start), then C stops with SIGTERM; every attempt 1 ends;
//! 3. C comes back (same instance id and write-ahead log) and D is added: the Collector
//!    restarts with A, B, C, D; every attempt 2 and the logical span end.
//!
//! What each row says is checked against where its request's spans went, which the test reads
//! back from the instance ids in the objects' names, and against docs/operations.md ("When
//! membership changes while a request is in flight"); the counts by attempt and reason are
//! printed (`cargo test --test membership -- --include-ignored --nocapture`).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::otel::{export_grpc, span_count, span_data, ServiceBatch};
use common::otelcol::{
    otelcol_binary, rows_with_instance, wait_received, Instance, Otelcol, BUCKET, PREFIX,
};
use common::s3::S3Server;
use common::spans::{kv, kv_int, kv_text, SECOND};
use common::Row;
use opentelemetry::InstrumentationScope;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue};
use opentelemetry_proto::tonic::trace::v1::Span;

/// Requests in flight across both changes: enough that, whatever ports the ring hashes, some
/// stay put, some move at each change and some go away and come back (about one in twelve).
const REQUESTS: usize = 120;
/// Longer than the test: a request is evaluated when its three attempts are in, or when its
/// instance stops, never by its timer, so what each row says depends on routing alone.
const GROUP_WAIT: &str = "10m";
/// 2026-08-25T12:00:00Z, within 30 days of the shipped pricing snapshot.
const T0: u64 = 1_787_659_200_000_000_000;

// ---------------------------------------------------------------------------------------------
// The instances (the Collector and the rest of both tiers: tests/common/otelcol.rs).

/// Instance `id` on the shared prefix, its write-ahead log (and so its finished-request
/// summaries) under `state/<id>`.
fn start_instance(id: &str, server: &S3Server, state: &Path) -> Instance {
    let env = server.env();
    let envs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let wal = state.join(id).to_string_lossy().into_owned();
    let output = format!("s3://{BUCKET}/{PREFIX}");
    Instance::start(
        id,
        Path::new(&output),
        &[
            "--instance-id",
            id,
            "--wal-dir",
            &wal,
            "--group-wait",
            GROUP_WAIT,
        ],
        &envs,
    )
}

// ---------------------------------------------------------------------------------------------
// The requests.

/// Request `n` as the SDK records it (the example's `req-glm-retry` with a third attempt): a
/// logical span with its envelope and pricing, and attempts 0 and 1 that hit a rate limit and
/// attempt 2 that succeeds, all in one trace. Returned in the order their spans end: attempt 0,
/// attempt 1, attempt 2, the logical span.
fn request(n: usize) -> [Span; 4] {
    let mut trace_id = vec![0x3e; 16];
    trace_id[..8].copy_from_slice(&(n as u64).to_be_bytes());
    let logical_id = vec![0x10, 0, 0, 0, 0, 0, 0, 1];
    let request_id = format!("member-{n}");
    let start = T0 + n as u64 * SECOND;
    let attempt = |index: u8| {
        let mut attributes = vec![
            kv_text("retry_spend.span.role", "attempt"),
            kv_text("retry_spend.request.id", &request_id),
            kv_int("retry_spend.attempt.index", i64::from(index)),
            kv_text("gen_ai.operation.name", "chat"),
            kv_text("gen_ai.provider.name", "aiwave"),
            kv_text("gen_ai.request.model", "glm-5"),
            kv_text("gen_ai.response.model", "glm-5"),
            kv_int("gen_ai.request.max_tokens", 800),
            kv_int("gen_ai.usage.input_tokens", 10_000),
            kv_int("gen_ai.usage.cache_read.input_tokens", 4_000),
        ];
        if index < 2 {
            attributes.push(kv_text("error.type", "rate_limited"));
        } else {
            attributes.push(kv_int("gen_ai.usage.output_tokens", 612));
        }
        let begins = start + 100_000_000 + u64::from(index) * 3 * SECOND;
        Span {
            trace_id: trace_id.clone(),
            span_id: vec![0x20, 0, 0, 0, 0, 0, 0, index + 1],
            parent_span_id: logical_id.clone(),
            name: "chat glm-5".into(),
            start_time_unix_nano: begins,
            end_time_unix_nano: begins + 2 * SECOND,
            attributes,
            ..Default::default()
        }
    };
    let families = ["deepseek", "qwen", "glm"]
        .into_iter()
        .map(|f| AnyValue {
            value: Some(Value::StringValue(f.into())),
        })
        .collect();
    let logical = Span {
        trace_id: trace_id.clone(),
        span_id: logical_id.clone(),
        name: "llm.request".into(),
        start_time_unix_nano: start,
        end_time_unix_nano: start + 9 * SECOND,
        attributes: vec![
            kv_text("retry_spend.span.role", "logical_request"),
            kv_text("retry_spend.request.id", &request_id),
            kv_int("retry_spend.attempt_count", 3),
            kv_text(
                "retry_spend.pricing.source",
                "https://aiwave.live/api/pricing",
            ),
            kv_text("retry_spend.pricing.checked_at", "2026-08-22"),
            kv_text(
                "retry_spend.pricing.version",
                "a42d372ccf0b5dd13ecf71203521f9d2",
            ),
            kv_text("retry_spend.billing_group", "vip"),
            kv_text("retry_spend.envelope.max_incremental_usd", "0.03"),
            kv_int("retry_spend.envelope.max_attempts_after_first", 2),
            kv(
                "retry_spend.envelope.allowed_fallback_families",
                Value::ArrayValue(ArrayValue { values: families }),
            ),
            kv_text("retry_spend.task.type", "support_summary"),
        ],
        ..Default::default()
    };
    [attempt(0), attempt(1), attempt(2), logical]
}

/// The spans of every request that end in `phase` (0: attempt 0; 1: attempt 1; 2: attempt 2
/// and the logical span), one export per request as an SDK's span processor sends them.
fn phase(requests: &[[Span; 4]], phase: usize) -> Vec<ServiceBatch> {
    let scope = InstrumentationScope::builder("retry-spend-sdk").build();
    requests
        .iter()
        .map(|spans| {
            let ending: &[Span] = match phase {
                0 => &spans[0..1],
                1 => &spans[1..2],
                _ => &spans[2..4],
            };
            (
                "support-bot".to_owned(),
                ending.iter().map(|s| span_data(s, &scope)).collect(),
            )
        })
        .collect()
}

/// What a row says: decision, audited, unaudited reason.
fn verdict(row: &Row) -> String {
    format!(
        "{} audited={} reason={}",
        row["decision"], row["audited"], row["unaudited_reason"]
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the OpenTelemetry Collector (tools/otelcol/build.sh, Go) and moto's S3 server (run by .ci/run)"]
async fn removing_and_adding_an_instance_mid_request_moves_retries_as_the_docs_say() {
    otelcol_binary();
    let server = S3Server::start();
    server.create_bucket(BUCKET);
    let state = tempfile::tempdir().unwrap();
    let requests: Vec<[Span; 4]> = (0..REQUESTS).map(request).collect();
    let (a, b, c) = (
        start_instance("a", &server, state.path()),
        start_instance("b", &server, state.path()),
        start_instance("c", &server, state.path()),
    );

    // 1. A, B, C: every attempt 0.
    let otelcol = Otelcol::start(&[a.addr(), b.addr(), c.addr()], state.path());
    let first = phase(&requests, 0);
    let sent_0 = span_count(&first);
    export_grpc(otelcol.grpc_addr, first).await;
    wait_received(&[&a, &b, &c], sent_0);
    let c_first = c.spans_received();

    // 2. C removed: out of the ring first, then stopped (it evaluates what it holds).
    otelcol.stop();
    let otelcol = Otelcol::start(&[a.addr(), b.addr()], state.path());
    c.stop();
    let second = phase(&requests, 1);
    let sent_1 = span_count(&second);
    export_grpc(otelcol.grpc_addr, second).await;
    wait_received(&[&a, &b], sent_0 - c_first + sent_1);

    // 3. C back (its log and summaries kept), D new.
    otelcol.stop();
    let c = start_instance("c", &server, state.path());
    let d = start_instance("d", &server, state.path());
    let otelcol = Otelcol::start(&[a.addr(), b.addr(), c.addr(), d.addr()], state.path());
    let third = phase(&requests, 2);
    let sent_2 = span_count(&third);
    export_grpc(otelcol.grpc_addr, third).await;
    let before = a.spans_received() + b.spans_received();
    wait_received(&[&a, &b, &c, &d], before + sent_2);
    otelcol.stop();
    for instance in [a, b, c, d] {
        instance.stop();
    }

    // Nothing lost or written twice: every attempt is one row.
    let rows = rows_with_instance(&server, &["a", "b", "c", "d"]);
    assert_eq!(rows.len(), 3 * REQUESTS, "one row per attempt");
    let spans: BTreeSet<(&str, &str)> = rows
        .iter()
        .map(|(_, r)| (r["trace_id"].as_str(), r["span_id"].as_str()))
        .collect();
    assert_eq!(spans.len(), rows.len(), "no attempt is two rows");

    // Where each request's attempts went, from the rows.
    let mut owners: BTreeMap<&str, [&str; 3]> = BTreeMap::new();
    for (instance, row) in &rows {
        let index: usize = row["attempt_index"].parse().expect("attempt index");
        owners.entry(row["request_id"].as_str()).or_default()[index] = instance;
    }
    for (request, [o0, o1, o2]) in &owners {
        assert!(["a", "b", "c"].contains(o0), "{request}: attempt 0 on {o0}");
        assert!(["a", "b"].contains(o1), "{request}: attempt 1 on {o1}");
        assert!(!o2.is_empty(), "{request}: attempt 2 has a row");
    }

    // What each row says, by attempt index and where its request's spans went.
    let mut table: BTreeMap<(String, &str, String), usize> = BTreeMap::new();
    let mut wrong = Vec::new();
    for (instance, row) in &rows {
        let o = owners[row["request_id"].as_str()];
        let index: usize = row["attempt_index"].parse().expect("attempt index");
        let moves = match (o[0] == o[1], o[1] == o[2], o[0] == o[2]) {
            (true, true, _) => "stayed",
            (false, true, _) => "moved at 2",
            (true, false, _) => "moved at 3",
            (false, false, true) => "away and back",
            (false, false, false) => "moved at 2 and 3",
        };
        let expected = expected_verdict(instance, index, o);
        if verdict(row) != expected {
            wrong.push(format!(
                "{} attempt {index} on {instance} (attempts on {o:?}): {} instead of {expected}",
                row["request_id"],
                verdict(row)
            ));
        }
        *table
            .entry((format!("attempt {index}"), moves, verdict(row)))
            .or_default() += 1;
    }
    eprintln!("rows by attempt, what happened to the request, and what the row says:");
    for ((index, moves, verdict), n) in &table {
        eprintln!("  {index:9}  {moves:16}  {verdict}: {n}");
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Every case happened (the ring decides which requests move; 120 make each near certain).
    for case in ["stayed", "moved at 2", "moved at 3", "away and back"] {
        assert!(
            table.keys().any(|(_, moves, _)| *moves == case),
            "no request {case}: {table:?}"
        );
    }
}

/// What the row of attempt `index`, written by `instance`, says when the request's attempts
/// went to `owners` (attempt 2 with the logical span, which ends last), by docs/operations.md:
/// - the envelope and pricing are on the logical span, so only the instance that got it can
///   audit: every other row of the request is `no_envelope`. So is attempt 0 on C when C
///   stopped before the logical span came (it was evaluated at the stop, as pending requests
///   are);
/// - with the envelope, a retry whose attempt 0 is elsewhere is `first_attempt_missing`; one
///   that has attempt 0 (held, or summarised before a restart) but not every attempt between is
///   `earlier_attempt_missing`;
/// - a request that stayed on one instance is audited as without any change.
fn expected_verdict(instance: &str, index: usize, owners: [&str; 3]) -> String {
    let evaluated_at_c_stop = instance == "c" && index == 0;
    let envelope = instance == owners[2] && !evaluated_at_c_stop;
    let reason = if !envelope {
        "no_envelope"
    } else if index > 0 && owners[0] != instance {
        "first_attempt_missing"
    } else if (1..index).any(|j| owners[j] != instance) {
        "earlier_attempt_missing"
    } else {
        "NULL"
    };
    let decision = match (index, reason) {
        (0, _) => "first_attempt",
        (_, "NULL") => "within_envelope",
        _ => "unaudited",
    };
    format!("{decision} audited={} reason={reason}", reason == "NULL")
}

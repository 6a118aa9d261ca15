//! The decision service (SPEC §7) end to end against `serve` on loopback: over gRPC with a
//! tonic client generated from the same proto, over HTTP JSON, with TLS and bearer tokens, and
//! against the rows the audit later writes for the same attempts.

mod common;

use std::net::SocketAddr;
use std::path::Path;

use bytes::Bytes;
use common::collector::{started, stop, PRICING};
use common::secure::{
    export_raw_grpc, grpc_endpoint, https_client, self_signed, tokens_file, Client,
};
use common::spans::{export_of, kv_int, kv_text};
use common::usd;
use opentelemetry_http::HttpClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use retry_spend_collector::contract::attr;
use retry_spend_collector::decisions::proto::retry_decisions_client::RetryDecisionsClient;
use retry_spend_collector::decisions::proto::{
    Attempt, DecideRequest, DecideResponse, Envelope, ProposedAttempt,
};
use retry_spend_collector::service::Collector;
use tonic::transport::Channel;

const TOKEN: &str = "rsc-decide-51c0de";
const VERSION: &str = "a42d372ccf0b5dd13ecf71203521f9d2";
const SOURCE: &str = "https://aiwave.live/api/pricing";
/// 2026-08-25T12:00:00Z: three days after the shipped snapshot was checked.
const AT: &str = "2026-08-25T12:00:00Z";
const AT_NANOS: u64 = 1_787_659_200_000_000_000;

/// The worked example as a question: the seed's envelope, attempt 0 on deepseek-v4-flash, a
/// proposed fallback to glm-5, each with 10,000 input tokens (4,000 cached) and an 800 cap.
fn worked_example() -> DecideRequest {
    DecideRequest {
        envelope: Some(Envelope {
            pricing_source: SOURCE.into(),
            pricing_checked_at: "2026-08-22".into(),
            pricing_version: VERSION.into(),
            billing_group: "vip".into(),
            max_incremental_usd: "0.015".into(),
            max_attempts_after_first: Some(1),
            allow_family_fallback: Some(true),
            allowed_fallback_families: vec!["deepseek".into(), "qwen".into(), "glm".into()],
            replay_safe: None,
            task_type: "support_summary".into(),
            ..Default::default()
        }),
        service: "checkout".into(),
        task_type: String::new(),
        attempts: vec![Attempt {
            model: "deepseek-v4-flash".into(),
            input_tokens: Some(10_000),
            cached_input_tokens: Some(4_000),
            output_cap: Some(800),
            output_reached_client: Some(false),
            error_type: "timeout".into(),
            ..Default::default()
        }],
        next: Some(ProposedAttempt {
            model: "glm-5".into(),
            input_tokens: Some(10_000),
            cached_input_tokens: Some(4_000),
            output_cap: Some(800),
            ..Default::default()
        }),
        at: AT.into(),
    }
}

/// The same question in the proto3 JSON mapping, numbers and strings mixed as clients send them.
const WORKED_EXAMPLE_JSON: &str = r#"{
  "envelope": {
    "pricing_source": "https://aiwave.live/api/pricing",
    "pricing_checked_at": "2026-08-22",
    "pricing_version": "a42d372ccf0b5dd13ecf71203521f9d2",
    "billing_group": "vip",
    "max_incremental_usd": "0.015",
    "max_attempts_after_first": 1,
    "allow_family_fallback": true,
    "allowed_fallback_families": ["deepseek", "qwen", "glm"],
    "task_type": "support_summary"
  },
  "service": "checkout",
  "attempts": [{"model": "deepseek-v4-flash", "input_tokens": 10000, "cached_input_tokens": "4000",
                "output_cap": 800, "output_reached_client": false, "error_type": "timeout"}],
  "next": {"model": "glm-5", "input_tokens": "10000", "cached_input_tokens": 4000, "output_cap": 800},
  "at": "2026-08-25T12:00:00Z"
}"#;

fn snapshot_digest() -> String {
    let path = Path::new(PRICING).join("2026-08-22-aiwave.json");
    let bytes = std::fs::read(path).unwrap();
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// What the rule tests give the worked example (src/rules/tests.rs).
fn worked_example_answer() -> DecideResponse {
    DecideResponse {
        allow: true,
        decision: "within_envelope".into(),
        violations: vec![],
        unaudited_reason: None,
        attempt_index: 1,
        estimated_incremental_usd: Some("0.00766626".into()),
        cumulative_incremental_usd: Some("0.00766626".into()),
        remaining_envelope_usd: Some("0.00733374".into()),
        pricing_version: Some(VERSION.into()),
        pricing_checked_at: Some("2026-08-22".into()),
        pricing_digest: Some(snapshot_digest()),
        envelope_source: Some("request".into()),
        decision_reason: "retry 1 of glm-5 brings incremental spend to 0.00766626 USD, within \
                          the 0.015 envelope (0.00733374 USD left)"
            .into(),
    }
}

fn worked_example_json_answer() -> serde_json::Value {
    serde_json::json!({
        "allow": true,
        "decision": "within_envelope",
        "violations": [],
        "unaudited_reason": null,
        "attempt_index": 1,
        "estimated_incremental_usd": "0.00766626",
        "cumulative_incremental_usd": "0.00766626",
        "remaining_envelope_usd": "0.00733374",
        "pricing_version": VERSION,
        "pricing_checked_at": "2026-08-22",
        "pricing_digest": snapshot_digest(),
        "envelope_source": "request",
        "decision_reason": "retry 1 of glm-5 brings incremental spend to 0.00766626 USD, within \
                            the 0.015 envelope (0.00733374 USD left)",
    })
}

async fn grpc_client(addr: SocketAddr, ca: Option<&str>) -> RetryDecisionsClient<Channel> {
    RetryDecisionsClient::new(
        grpc_endpoint(addr, ca)
            .connect()
            .await
            .expect("gRPC connection"),
    )
}

async fn decide_grpc(
    client: &mut RetryDecisionsClient<Channel>,
    token: Option<&str>,
    question: DecideRequest,
) -> Result<DecideResponse, tonic::Status> {
    let mut request = tonic::Request::new(question);
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    client.decide(request).await.map(|r| r.into_inner())
}

/// POSTs a JSON body to `/v1/retry-decision` over plain HTTP; returns status and body.
async fn decide_http(addr: SocketAddr, body: &str) -> (u16, serde_json::Value) {
    let response = reqwest::Client::new()
        .post(format!("http://{addr}/v1/retry-decision"))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .expect("HTTP answer");
    let status = response.status().as_u16();
    let body = response.bytes().await.unwrap();
    (status, serde_json::from_slice(&body).expect("a JSON body"))
}

/// POSTs over HTTPS trusting `ca`, with an optional token.
async fn decide_https(
    addr: SocketAddr,
    ca: &str,
    token: Option<&str>,
    body: &str,
) -> http::Response<Bytes> {
    let mut builder = http::Request::post(format!("https://{addr}/v1/retry-decision"))
        .header("content-type", "application/json");
    if let Some(token) = token {
        builder = builder.header("authorization", format!("Bearer {token}"));
    }
    https_client(ca)
        .send_bytes(builder.body(Bytes::from(body.to_owned())).unwrap())
        .await
        .expect("HTTPS answer")
}

fn metrics_line(collector: &Collector, prefix: &str) -> String {
    collector
        .metrics
        .render()
        .lines()
        .find(|l| l.starts_with(prefix))
        .map(str::to_owned)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_and_http_answer_the_worked_example_with_the_rule_tests_money() {
    let (collector, out) = started(|_| {}).await;
    let mut client = grpc_client(collector.grpc_addr, None).await;
    let answer = decide_grpc(&mut client, None, worked_example())
        .await
        .unwrap();
    assert_eq!(answer, worked_example_answer());
    let (status, json) = decide_http(collector.http_addr, WORKED_EXAMPLE_JSON).await;
    assert_eq!(status, 200, "{json}");
    assert_eq!(json, worked_example_json_answer());
    assert_eq!(
        metrics_line(&collector, "retry_spend_decisions_total{"),
        r#"retry_spend_decisions_total{decision="within_envelope",allowed="true"} 2"#
    );
    // A question is no span: nothing is written.
    assert!(stop(collector, out.path()).await.is_empty());
}

/// The worked example's attempts, made, as the SDK then sends them: a logical request span with
/// the same envelope, attempt 0 and, as attempt 1, the fallback the service allowed.
fn worked_example_spans() -> ExportTraceServiceRequest {
    let envelope = serde_json::json!({ "retry_spend_envelope": {
        "pricing_source": SOURCE, "pricing_checked_at": "2026-08-22", "pricing_version": VERSION,
        "billing_group": "vip", "max_incremental_usd": "0.015", "max_attempts_after_first": 1,
        "allow_family_fallback": true, "allowed_fallback_families": ["deepseek", "qwen", "glm"],
        "task_type": "support_summary",
    }});
    let span = |id: u8, mut attributes: Vec<_>| {
        attributes.push(kv_text(attr::REQUEST_ID, "req-7"));
        Span {
            trace_id: vec![7; 16],
            span_id: vec![id; 8],
            name: "chat".into(),
            start_time_unix_nano: AT_NANOS + u64::from(id),
            end_time_unix_nano: AT_NANOS + 1_000_000_000,
            attributes,
            ..Default::default()
        }
    };
    let attempt = |index: i64, model: &str| {
        vec![
            kv_text(attr::SPAN_ROLE, attr::ROLE_ATTEMPT),
            kv_int(attr::ATTEMPT_INDEX, index),
            kv_text(attr::REQUEST_MODEL, model),
            kv_int(attr::INPUT_TOKENS, 10_000),
            kv_int(attr::CACHE_READ_INPUT_TOKENS, 4_000),
            kv_int(attr::REQUEST_MAX_TOKENS, 800),
        ]
    };
    let spans = vec![
        span(
            9,
            vec![
                kv_text(attr::SPAN_ROLE, attr::ROLE_LOGICAL_REQUEST),
                kv_text(attr::ENVELOPE_JSON, &envelope.to_string()),
                kv_int(attr::ATTEMPT_COUNT, 2),
            ],
        ),
        span(1, attempt(0, "deepseek-v4-flash")),
        span(2, attempt(1, "glm-5")),
    ];
    export_of("checkout", spans)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_service_allowed_is_what_the_audit_writes() {
    let (collector, out) = started(|_| {}).await;
    let (status, allowed) = decide_http(collector.http_addr, WORKED_EXAMPLE_JSON).await;
    assert_eq!(status, 200);
    let plain = Client {
        ca: None,
        token: None,
    };
    export_raw_grpc(collector.grpc_addr, plain, None, worked_example_spans())
        .await
        .expect("spans accepted");
    let rows = stop(collector, out.path()).await;
    let row = rows
        .iter()
        .find(|r| r["attempt_index"] == "1")
        .expect("attempt 1's row");
    assert_eq!(row["decision"], allowed["decision"].as_str().unwrap());
    assert_eq!(row["violations"], "[]");
    assert_eq!(row["unaudited_reason"], "NULL");
    for money in [
        "estimated_incremental_usd",
        "cumulative_incremental_usd",
        "remaining_envelope_usd",
    ] {
        assert_eq!(
            usd(&row[money]),
            allowed[money].as_str().unwrap(),
            "{money}"
        );
    }
    assert_eq!(
        row["pricing_digest"],
        allowed["pricing_digest"].as_str().unwrap()
    );
    assert_eq!(
        row["decision_reason"],
        allowed["decision_reason"].as_str().unwrap()
    );
    assert_eq!(row["envelope_source"], "span");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_questions_are_invalid_argument_and_400_naming_the_field() {
    let (collector, out) = started(|_| {}).await;
    let mut client = grpc_client(collector.grpc_addr, None).await;
    let mut no_attempts = worked_example();
    no_attempts.attempts.clear();
    let mut no_model = worked_example();
    no_model.next = None;
    let mut bad_money = worked_example();
    if let Some(envelope) = bad_money.envelope.as_mut() {
        envelope.max_incremental_usd = "1.5 cents".into();
    }
    for (question, field) in [
        (no_attempts, "attempts: "),
        (no_model, "next.model: "),
        (bad_money, "envelope.max_incremental_usd: "),
    ] {
        let status = decide_grpc(&mut client, None, question).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().starts_with(field), "{status:?}");
    }
    for (body, field) in [
        (r#"{"next": {"model": "glm-5"}}"#, "attempts: "),
        (r#"{"attempts": [{"model": "glm-5"}]}"#, "next.model: "),
        (
            r#"{"attempts": [{"model": "glm-5", "input_tokens": "ten"}], "next": {"model": "glm-5"}}"#,
            "attempts[0].input_tokens: ",
        ),
        (
            r#"{"attempts": [{"model": "glm-5"}], "next": {"model": "glm-5"}, "at": "soon"}"#,
            "at: ",
        ),
        ("not json", "request: "),
    ] {
        let (status, json) = decide_http(collector.http_addr, body).await;
        assert_eq!(status, 400, "{body}: {json}");
        assert_eq!(json["code"], 3);
        let message = json["message"].as_str().unwrap();
        assert!(message.starts_with(field), "{body}: {message}");
    }
    assert_eq!(metrics_line(&collector, "retry_spend_decisions_total{"), "");
    stop(collector, out.path()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unaudited_is_refused_unless_the_collector_fails_open() {
    let no_envelope = r#"{"service": "checkout", "attempts": [{"model": "glm-5"}],
                          "next": {"model": "glm-5"}}"#;
    let (closed, out) = started(|_| {}).await;
    let (status, json) = decide_http(closed.http_addr, no_envelope).await;
    assert_eq!(status, 200);
    assert_eq!(json["allow"], false);
    assert_eq!(json["decision"], "unaudited");
    assert_eq!(json["unaudited_reason"], "no_envelope");
    assert_eq!(json["envelope_source"], serde_json::Value::Null);
    assert_eq!(
        metrics_line(&closed, "retry_spend_decisions_total{"),
        r#"retry_spend_decisions_total{decision="unaudited",allowed="false"} 1"#
    );
    stop(closed, out.path()).await;

    let (open, out) = started(|c| c.decisions.allow_unaudited = true).await;
    let (_, json) = decide_http(open.http_addr, no_envelope).await;
    assert_eq!(json["allow"], true);
    assert_eq!(json["decision"], "unaudited");
    stop(open, out.path()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_are_answered_while_the_trace_pipeline_is_stalled() {
    // Room for one export: while the pipeline holds it, the next is refused.
    let one_export = worked_example_spans().encoded_len() as u64;
    let (collector, out) = started(|c| {
        c.receivers.otlp.max_request_bytes = one_export;
        c.receivers.otlp.max_in_flight_bytes = Some(one_export);
    })
    .await;
    let resume = collector.pause_pipeline().await.unwrap();
    let plain = Client {
        ca: None,
        token: None,
    };
    let addr = collector.grpc_addr;
    export_raw_grpc(addr, plain, None, worked_example_spans())
        .await
        .expect("the first export is accepted");
    let refused = export_raw_grpc(addr, plain, None, worked_example_spans())
        .await
        .expect_err("the pipeline holds the first");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");

    let mut client = grpc_client(addr, None).await;
    let answer = decide_grpc(&mut client, None, worked_example()).await;
    assert_eq!(answer.unwrap(), worked_example_answer());
    let (status, json) = decide_http(collector.http_addr, WORKED_EXAMPLE_JSON).await;
    assert_eq!((status, json), (200, worked_example_json_answer()));
    resume.resume();
    assert_eq!(stop(collector, out.path()).await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloaded_snapshots_answer_the_next_question() {
    let pricing = tempfile::tempdir().unwrap();
    let (collector, out) = started(|c| {
        c.processors.retry_spend.pricing_dir = pricing.path().to_path_buf();
    })
    .await;
    let mut client = grpc_client(collector.grpc_addr, None).await;
    let before = decide_grpc(&mut client, None, worked_example())
        .await
        .unwrap();
    assert_eq!(
        before.unaudited_reason.as_deref(),
        Some("unknown_pricing_version")
    );
    std::fs::copy(
        Path::new(PRICING).join("2026-08-22-aiwave.json"),
        pricing.path().join("2026-08-22-aiwave.json"),
    )
    .unwrap();
    collector.reload().await.unwrap();
    let after = decide_grpc(&mut client, None, worked_example())
        .await
        .unwrap();
    assert_eq!(after, worked_example_answer());
    stop(collector, out.path()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_only_callers_with_an_accepted_token_get_answers() {
    let cert = self_signed();
    let tokens = tempfile::tempdir().unwrap();
    let auth = tokens_file(tokens.path(), &[TOKEN]);
    let (collector, out) = started(|c| {
        c.receivers.otlp.tls = cert.tls.clone();
        c.receivers.otlp.auth = auth;
    })
    .await;
    let ca = cert.cert_pem.as_str();

    let mut client = grpc_client(collector.grpc_addr, Some(ca)).await;
    for token in [None, Some("rsc-decide-51c0df")] {
        let status = decide_grpc(&mut client, token, worked_example())
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
        assert_eq!(status.message(), "missing or invalid bearer token");
    }
    let answer = decide_grpc(&mut client, Some(TOKEN), worked_example()).await;
    assert_eq!(answer.unwrap(), worked_example_answer());

    let addr = collector.http_addr;
    for token in [None, Some("rsc-decide-51c0df")] {
        let response = decide_https(addr, ca, token, WORKED_EXAMPLE_JSON).await;
        assert_eq!(response.status(), 401);
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
    }
    let response = decide_https(addr, ca, Some(TOKEN), WORKED_EXAMPLE_JSON).await;
    assert_eq!(response.status(), 200);
    let json: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
    assert_eq!(json, worked_example_json_answer());

    // Plaintext reaches neither listener.
    let plaintext = reqwest::Client::new()
        .post(format!("http://{addr}/v1/retry-decision"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(WORKED_EXAMPLE_JSON)
        .send()
        .await;
    assert!(
        plaintext.is_err(),
        "plain HTTP got an answer: {plaintext:?}"
    );
    let plain_grpc = Channel::from_shared(format!("http://{}", collector.grpc_addr))
        .unwrap()
        .connect()
        .await;
    if let Ok(channel) = plain_grpc {
        let mut client = RetryDecisionsClient::new(channel);
        assert!(decide_grpc(&mut client, Some(TOKEN), worked_example())
            .await
            .is_err());
    }
    assert_eq!(
        metrics_line(&collector, "retry_spend_decisions_total{"),
        r#"retry_spend_decisions_total{decision="within_envelope",allowed="true"} 2"#
    );
    stop(collector, out.path()).await;
}

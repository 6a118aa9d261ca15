use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use rust_decimal::Decimal;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Semaphore};
use tonic::codec::CompressionEncoding;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;
use tonic::{Code, Request, Response, Status};

use super::{attr, enrich, start, ForwardError, ForwardObserver, OtlpForwardConfig};
use crate::contract::{self, kv};
use crate::record::{AttemptRow, AttemptSource, Decision, SpendClass, UnauditedReason, Violation};

fn usd(text: &str) -> Decimal {
    Decimal::from_str(text).expect("test decimal parses")
}

/// An audited retry that went over its envelope.
fn over_envelope_retry() -> AttemptRow {
    AttemptRow {
        event_time: 1_741_953_600_000_000_000,
        end_time: 1_741_953_602_000_000_000,
        trace_id: [7; 16],
        span_id: [0, 0, 0, 0, 0, 0, 0, 0xaa],
        request_id: "req-1".into(),
        service_name: "checkout".into(),
        task_type: Some("chat".into()),
        billing_group: Some("team-a".into()),
        provider: Some("zai".into()),
        attempt_index: 1,
        original_model: Some("glm-5".into()),
        retry_model: Some("glm-5".into()),
        response_model: Some("glm-5".into()),
        original_family: Some("glm".into()),
        retry_family: Some("glm".into()),
        input_tokens: Some(1000),
        cached_input_tokens: Some(0),
        output_tokens: Some(200),
        output_cap: Some(512),
        planned_attempt_usd: Some(usd("0.0030")),
        actual_attempt_usd: Some(usd("0.0021")),
        estimated_incremental_usd: Some(usd("0.01500")),
        cumulative_incremental_usd: Some(usd("0.015")),
        remaining_envelope_usd: Some(usd("-0.0050")),
        max_incremental_usd: Some(usd("0.01")),
        group_ratio: Some(usd("1")),
        sdk_estimated_incremental_usd: None,
        sdk_remaining_envelope_usd: None,
        max_attempts_after_first: Some(2),
        pricing_version: Some("2025-03-01".into()),
        pricing_source: Some("vendor".into()),
        pricing_digest: Some("abc".into()),
        pricing_checked_at: None,
        spend_class: SpendClass::Retry,
        decision: Decision::OverEnvelope,
        decision_reason: "over the envelope".into(),
        audited: true,
        unaudited_reason: None,
        error_type: None,
        sdk_decision_reason: None,
        violations: vec![Violation::ReplayUnsafe, Violation::OverEnvelope],
        output_reached_client: Some(false),
        attempt_source: AttemptSource::Declared,
        envelope_source: Some("span".into()),
        cache_write_input_tokens: None,
        usage_source: None,
        output_cap_source: None,
        price_tier_above_input_tokens: None,
    }
}

fn unaudited_retry() -> AttemptRow {
    AttemptRow {
        estimated_incremental_usd: None,
        remaining_envelope_usd: None,
        spend_class: SpendClass::Unknown,
        decision: Decision::Unaudited,
        audited: false,
        unaudited_reason: Some(UnauditedReason::NoEnvelope),
        violations: Vec::new(),
        ..over_envelope_retry()
    }
}

fn attribute<'a>(span: &'a Span, key: &str) -> Option<&'a Value> {
    let mut values = span.attributes.iter().filter(|kv| kv.key == key);
    let value = values.next()?.value.as_ref()?.value.as_ref();
    assert!(values.next().is_none(), "{key} appears more than once");
    value
}

fn string(s: &str) -> Value {
    Value::StringValue(s.to_owned())
}

fn strings(values: &[&str]) -> Value {
    Value::ArrayValue(opentelemetry_proto::tonic::common::v1::ArrayValue {
        values: values
            .iter()
            .map(|s| AnyValue {
                value: Some(string(s)),
            })
            .collect(),
    })
}

fn attempt_span(id: u8) -> Span {
    Span {
        trace_id: vec![7; 16],
        span_id: vec![0, 0, 0, 0, 0, 0, 0, id],
        name: "chat glm-5".into(),
        attributes: vec![kv(contract::attr::REQUEST_MODEL, string("glm-5"))],
        ..Default::default()
    }
}

#[test]
fn enrichment_carries_the_evaluation() {
    let mut span = attempt_span(1);
    enrich(&mut span, &over_envelope_retry());
    assert_eq!(
        attribute(&span, attr::DECISION),
        Some(&string("over_envelope"))
    );
    assert_eq!(
        attribute(&span, attr::AUDITED),
        Some(&Value::BoolValue(true))
    );
    assert_eq!(
        attribute(&span, attr::ESTIMATED_INCREMENTAL_USD),
        Some(&string("0.015"))
    );
    assert_eq!(
        attribute(&span, attr::REMAINING_ENVELOPE_USD),
        Some(&string("-0.005"))
    );
    assert_eq!(attribute(&span, attr::SPEND_CLASS), Some(&string("retry")));
    assert_eq!(
        attribute(&span, attr::VIOLATIONS),
        Some(&strings(&["replay_unsafe", "over_envelope"]))
    );
    assert_eq!(
        attribute(&span, contract::attr::REQUEST_MODEL),
        Some(&string("glm-5")),
        "the span's own attributes stay"
    );
}

#[test]
fn enrichment_leaves_unknown_amounts_absent() {
    let mut span = attempt_span(1);
    enrich(&mut span, &unaudited_retry());
    assert_eq!(attribute(&span, attr::DECISION), Some(&string("unaudited")));
    assert_eq!(
        attribute(&span, attr::AUDITED),
        Some(&Value::BoolValue(false))
    );
    assert_eq!(attribute(&span, attr::ESTIMATED_INCREMENTAL_USD), None);
    assert_eq!(attribute(&span, attr::REMAINING_ENVELOPE_USD), None);
    assert_eq!(
        attribute(&span, attr::SPEND_CLASS),
        Some(&string("unknown"))
    );
    assert_eq!(attribute(&span, attr::VIOLATIONS), Some(&strings(&[])));
}

#[test]
fn enrichment_replaces_values_the_client_sent() {
    let mut span = attempt_span(1);
    for key in attr::ALL {
        span.attributes.push(kv(key, string("forged")));
    }
    span.attributes
        .push(kv(attr::DECISION, string("forged again")));
    enrich(&mut span, &unaudited_retry());
    assert_eq!(attribute(&span, attr::DECISION), Some(&string("unaudited")));
    assert_eq!(
        attribute(&span, attr::ESTIMATED_INCREMENTAL_USD),
        None,
        "a client's amount must not survive a row without one"
    );
    assert_eq!(attribute(&span, attr::REMAINING_ENVELOPE_USD), None);
    assert_eq!(span.attributes.len(), 1 + 4);
}

#[test]
fn enriching_twice_is_the_same_as_once() {
    let mut once = attempt_span(1);
    enrich(&mut once, &over_envelope_retry());
    let mut twice = once.clone();
    enrich(&mut twice, &over_envelope_retry());
    assert_eq!(once, twice);
}

#[test]
fn options_that_could_never_send_are_rejected() {
    let valid = OtlpForwardConfig {
        endpoint: Some("http://127.0.0.1:4317".into()),
        ..Default::default()
    };
    assert!(valid.validate().is_ok());
    assert!(matches!(
        start(&OtlpForwardConfig::default(), Arc::new(())),
        Err(ForwardError::InvalidConfig(_))
    ));
    for invalid in [
        OtlpForwardConfig {
            max_batch_spans: 0,
            ..valid.clone()
        },
        OtlpForwardConfig {
            max_batch_bytes: 0,
            ..valid.clone()
        },
        OtlpForwardConfig {
            queue_capacity_spans: 0,
            ..valid.clone()
        },
        OtlpForwardConfig {
            timeout: Duration::ZERO,
            ..valid.clone()
        },
    ] {
        assert!(invalid.validate().is_err());
        assert!(matches!(
            start(&invalid, Arc::new(())),
            Err(ForwardError::InvalidConfig(_))
        ));
    }
}

#[test]
fn a_tls_endpoint_is_refused_at_start() {
    let options = OtlpForwardConfig {
        endpoint: Some("https://collector.example:4317".into()),
        ..Default::default()
    };
    assert!(matches!(
        start(&options, Arc::new(())),
        Err(ForwardError::UnsupportedScheme(_))
    ));
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Totals {
    sent: u64,
    failed: u64,
    dropped: u64,
}

/// Counts what the forward reports, and lets a test wait for a count instead of a time.
struct Counts(watch::Sender<Totals>);

impl Counts {
    fn new() -> Arc<Counts> {
        Arc::new(Counts(watch::Sender::new(Totals::default())))
    }

    fn now(&self) -> Totals {
        *self.0.borrow()
    }

    async fn until(&self, reached: impl Fn(&Totals) -> bool) -> Totals {
        *self
            .0
            .subscribe()
            .wait_for(reached)
            .await
            .expect("the sender lives in self")
    }
}

impl ForwardObserver for Counts {
    fn sent(&self, spans: u64) {
        self.0.send_modify(|t| t.sent += spans);
    }
    fn failed(&self, spans: u64) {
        self.0.send_modify(|t| t.failed += spans);
    }
    fn dropped(&self, spans: u64) {
        self.0.send_modify(|t| t.dropped += spans);
    }
}

/// How the fake downstream answers its next call; once the script is used up it accepts all.
enum Answer {
    Fail(Code),
    RejectSpans(i64),
}

/// An accepted export call.
struct Call {
    request: ExportTraceServiceRequest,
    encoding: Option<String>,
}

struct Downstream {
    script: Mutex<VecDeque<Answer>>,
    /// When set, every call waits for one permit before answering.
    gate: Option<Arc<Semaphore>>,
    arrived: mpsc::UnboundedSender<()>,
    accepted: mpsc::UnboundedSender<Call>,
}

#[tonic::async_trait]
impl TraceService for Downstream {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let _ = self.arrived.send(());
        if let Some(gate) = &self.gate {
            gate.acquire().await.expect("gate is never closed").forget();
        }
        let answer = self.script.lock().expect("script lock").pop_front();
        let rejected = match answer {
            Some(Answer::Fail(code)) => return Err(Status::new(code, "scripted failure")),
            Some(Answer::RejectSpans(n)) => n,
            None => 0,
        };
        let encoding = request
            .metadata()
            .get("grpc-encoding")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let _ = self.accepted.send(Call {
            request: request.into_inner(),
            encoding,
        });
        Ok(Response::new(ExportTraceServiceResponse {
            partial_success: (rejected > 0).then(|| ExportTracePartialSuccess {
                rejected_spans: rejected,
                error_message: "scripted rejection".into(),
            }),
        }))
    }
}

struct Fake {
    endpoint: String,
    /// One message per call, as it arrives and before it is answered.
    arrived: mpsc::UnboundedReceiver<()>,
    accepted: mpsc::UnboundedReceiver<Call>,
}

impl Fake {
    fn calls(&mut self) -> usize {
        drain(&mut self.arrived).len()
    }

    fn accepted(&mut self) -> Vec<Call> {
        drain(&mut self.accepted)
    }
}

fn drain<T>(rx: &mut mpsc::UnboundedReceiver<T>) -> Vec<T> {
    std::iter::from_fn(|| rx.try_recv().ok()).collect()
}

/// Serves a fake downstream OTLP receiver on an ephemeral port of this runtime.
async fn downstream(script: Vec<Answer>, gate: Option<Arc<Semaphore>>) -> Fake {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let (arrived_tx, arrived) = mpsc::unbounded_channel();
    let (accepted_tx, accepted) = mpsc::unbounded_channel();
    let service = TraceServiceServer::new(Downstream {
        script: Mutex::new(script.into()),
        gate,
        arrived: arrived_tx,
        accepted: accepted_tx,
    })
    .accept_compressed(CompressionEncoding::Gzip);
    tokio::spawn(
        Server::builder()
            .add_service(service)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    Fake {
        endpoint: format!("http://{addr}"),
        arrived,
        accepted,
    }
}

/// Options for tests: retries back off for a millisecond only, and a call that waits on a gate
/// never times out first.
fn options(fake: &Fake) -> OtlpForwardConfig {
    OtlpForwardConfig {
        endpoint: Some(fake.endpoint.clone()),
        timeout: Duration::from_secs(3600),
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(1),
        ..Default::default()
    }
}

const NO_DEADLINE: Duration = Duration::from_secs(3600);

fn resource_spans(ids: impl IntoIterator<Item = u8>) -> ResourceSpans {
    ResourceSpans {
        resource: Some(Resource {
            attributes: vec![kv(contract::attr::SERVICE_NAME, string("checkout"))],
            ..Default::default()
        }),
        scope_spans: vec![ScopeSpans {
            spans: ids.into_iter().map(attempt_span).collect(),
            ..Default::default()
        }],
        schema_url: String::new(),
    }
}

fn spans_of(calls: &[Call]) -> Vec<Span> {
    calls
        .iter()
        .flat_map(|call| &call.request.resource_spans)
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|scope| scope.spans.clone())
        .collect()
}

fn ids_of(calls: &[Call]) -> Vec<u8> {
    spans_of(calls).iter().map(|s| s.span_id[7]).collect()
}

fn span_counts(calls: &[Call]) -> Vec<usize> {
    calls
        .iter()
        .map(|call| ids_of(std::slice::from_ref(call)).len())
        .collect()
}

#[tokio::test]
async fn every_span_arrives_once_with_its_attributes() {
    let mut fake = downstream(Vec::new(), None).await;
    let counts = Counts::new();
    let (handle, forwarder) = start(&options(&fake), counts.clone()).expect("start");

    let mut expected = HashMap::new();
    for first in [0u8, 10, 20] {
        let mut item = resource_spans(first..first + 10);
        for span in &mut item.scope_spans[0].spans {
            if span.span_id[7] % 2 == 0 {
                enrich(span, &over_envelope_retry());
            }
            expected.insert(span.span_id.clone(), span.clone());
        }
        handle.send(vec![item]);
    }
    counts.until(|t| t.sent == 30).await;
    forwarder.shutdown(NO_DEADLINE).await;

    let calls = fake.accepted();
    assert!(calls
        .iter()
        .all(|call| call.encoding.as_deref() == Some("gzip")));
    assert!(calls
        .iter()
        .flat_map(|call| &call.request.resource_spans)
        .all(|rs| rs.resource == resource_spans([]).resource));
    let received = spans_of(&calls);
    assert_eq!(received.len(), 30);
    for span in received {
        let sent = expected
            .remove(&span.span_id)
            .expect("sent once, received once");
        assert_eq!(span, sent);
    }
    assert_eq!(
        counts.now(),
        Totals {
            sent: 30,
            ..Default::default()
        }
    );
}

#[tokio::test]
async fn requests_hold_at_most_max_batch_spans() {
    let mut fake = downstream(Vec::new(), None).await;
    let counts = Counts::new();
    let options = OtlpForwardConfig {
        max_batch_spans: 4,
        ..options(&fake)
    };
    let (handle, forwarder) = start(&options, counts.clone()).expect("start");

    handle.send(vec![resource_spans(1..=10)]);
    counts.until(|t| t.sent == 10).await;
    forwarder.shutdown(NO_DEADLINE).await;

    let calls = fake.accepted();
    assert_eq!(span_counts(&calls), [4, 4, 2]);
    assert_eq!(ids_of(&calls), (1..=10).collect::<Vec<_>>());
}

#[tokio::test]
async fn unavailable_twice_then_ok_is_delivered() {
    let script = vec![
        Answer::Fail(Code::Unavailable),
        Answer::Fail(Code::Unavailable),
    ];
    let mut fake = downstream(script, None).await;
    let counts = Counts::new();
    let (handle, forwarder) = start(&options(&fake), counts.clone()).expect("start");

    handle.send(vec![resource_spans(1..=5)]);
    counts.until(|t| t.sent == 5).await;
    forwarder.shutdown(NO_DEADLINE).await;

    assert_eq!(fake.calls(), 3, "two retries");
    assert_eq!(ids_of(&fake.accepted()), [1, 2, 3, 4, 5]);
    assert_eq!(counts.now().failed, 0);
}

#[tokio::test]
async fn retries_stop_at_max_retries() {
    let script = (0..10).map(|_| Answer::Fail(Code::Unavailable)).collect();
    let mut fake = downstream(script, None).await;
    let counts = Counts::new();
    let options = OtlpForwardConfig {
        max_retries: 2,
        ..options(&fake)
    };
    let (handle, forwarder) = start(&options, counts.clone()).expect("start");

    handle.send(vec![resource_spans(1..=5)]);
    counts.until(|t| t.failed == 5).await;
    forwarder.shutdown(NO_DEADLINE).await;

    assert_eq!(fake.calls(), 1 + 2);
    assert_eq!(counts.now().sent, 0);
}

#[tokio::test]
async fn a_non_retryable_error_fails_at_once() {
    let mut fake = downstream(vec![Answer::Fail(Code::InvalidArgument)], None).await;
    let counts = Counts::new();
    let (handle, forwarder) = start(&options(&fake), counts.clone()).expect("start");

    handle.send(vec![resource_spans(1..=5)]);
    counts.until(|t| t.failed == 5).await;
    handle.send(vec![resource_spans(6..=7)]);
    counts.until(|t| t.sent == 2).await;
    forwarder.shutdown(NO_DEADLINE).await;

    assert_eq!(fake.calls(), 2, "one call per batch, no retry");
    assert_eq!(ids_of(&fake.accepted()), [6, 7]);
}

#[tokio::test]
async fn spans_the_downstream_rejects_count_as_failed() {
    let mut fake = downstream(vec![Answer::RejectSpans(2)], None).await;
    let counts = Counts::new();
    let (handle, forwarder) = start(&options(&fake), counts.clone()).expect("start");

    handle.send(vec![resource_spans(1..=5)]);
    counts.until(|t| t.sent + t.failed == 5).await;
    forwarder.shutdown(NO_DEADLINE).await;

    assert_eq!(fake.calls(), 1, "a partial success is not retried");
    assert_eq!(
        counts.now(),
        Totals {
            sent: 3,
            failed: 2,
            dropped: 0
        }
    );
}

#[tokio::test]
async fn a_full_queue_drops_and_counts_without_waiting() {
    let gate = Arc::new(Semaphore::new(0));
    let mut fake = downstream(Vec::new(), Some(Arc::clone(&gate))).await;
    let counts = Counts::new();
    let options = OtlpForwardConfig {
        queue_capacity_spans: 5,
        ..options(&fake)
    };
    let (handle, forwarder) = start(&options, counts.clone()).expect("start");

    // The task takes span 1 and is held in its export, so the queue fills from here on.
    handle.send(vec![resource_spans([1])]);
    fake.arrived.recv().await.expect("first export arrives");
    handle.send(vec![resource_spans(2..=4), resource_spans(5..=6)]);
    assert_eq!(counts.now().dropped, 0, "exactly at capacity");
    handle.send(vec![resource_spans(7..=8)]);
    assert_eq!(counts.now().dropped, 2);

    gate.add_permits(Semaphore::MAX_PERMITS / 2);
    counts.until(|t| t.sent == 6).await;
    forwarder.shutdown(NO_DEADLINE).await;

    assert_eq!(ids_of(&fake.accepted()), [1, 2, 3, 4, 5, 6]);
    assert_eq!(
        counts.now(),
        Totals {
            sent: 6,
            failed: 0,
            dropped: 2
        }
    );
}

#[tokio::test]
async fn shutdown_sends_what_is_queued() {
    let gate = Arc::new(Semaphore::new(0));
    let mut fake = downstream(Vec::new(), Some(Arc::clone(&gate))).await;
    let counts = Counts::new();
    let options = OtlpForwardConfig {
        max_batch_spans: 3,
        ..options(&fake)
    };
    let (handle, forwarder) = start(&options, counts.clone()).expect("start");

    handle.send(vec![resource_spans([1])]);
    fake.arrived.recv().await.expect("first export arrives");
    for first in [2u8, 7, 12, 17] {
        handle.send(vec![resource_spans(first..first + 5)]);
    }
    let shutdown = forwarder.shutdown(NO_DEADLINE);
    tokio::pin!(shutdown);
    let first_poll = std::future::poll_fn(|cx| Poll::Ready(shutdown.as_mut().poll(cx))).await;
    assert!(first_poll.is_pending(), "span 1 is still held downstream");
    handle.send(vec![resource_spans([98])]);
    assert_eq!(counts.now().dropped, 1, "shutdown stopped accepting");
    gate.add_permits(Semaphore::MAX_PERMITS / 2);
    shutdown.await;

    assert_eq!(ids_of(&fake.accepted()), (1..=21).collect::<Vec<_>>());
    assert_eq!(counts.now().sent, 21);

    handle.send(vec![resource_spans([99])]);
    assert_eq!(
        counts.now(),
        Totals {
            sent: 21,
            failed: 0,
            dropped: 2
        },
        "a handle that outlives its forwarder drops what it sends"
    );
}

#[tokio::test]
async fn shutdown_counts_what_the_deadline_cuts_off_as_failed() {
    let gate = Arc::new(Semaphore::new(0));
    let mut fake = downstream(Vec::new(), Some(gate)).await;
    let counts = Counts::new();
    let (handle, forwarder) = start(&options(&fake), counts.clone()).expect("start");

    handle.send(vec![resource_spans([1])]);
    fake.arrived.recv().await.expect("first export arrives");
    handle.send(vec![resource_spans(2..=5)]);
    // The downstream never answers, so no deadline is long enough; zero keeps the test quick.
    forwarder.shutdown(Duration::ZERO).await;

    assert_eq!(
        counts.now(),
        Totals {
            sent: 0,
            failed: 5,
            dropped: 0
        }
    );
    handle.send(vec![resource_spans([6])]);
    assert_eq!(counts.now().dropped, 1);
}

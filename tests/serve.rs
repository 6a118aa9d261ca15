//! The live collector on 127.0.0.1, fed by the real OpenTelemetry SDK exporter over gRPC and
//! HTTP and by raw HTTP, with the Parquet read back.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use common::collector::{
    example_requests, get, replayed_rows, started, stop, EXAMPLE_ROWS, EXAMPLE_SPANS,
};
use common::otel::{by_service, export_grpc, export_http, ServiceBatch};
use common::usd;
use opentelemetry_otlp::Protocol;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;

/// One span per batch, in a fixed scrambled order.
fn one_span_per_call_shuffled(batches: Vec<ServiceBatch>) -> Vec<ServiceBatch> {
    let mut singles: Vec<ServiceBatch> = batches
        .into_iter()
        .flat_map(|(service, spans)| spans.into_iter().map(move |s| (service.clone(), vec![s])))
        .collect();
    let n = singles.len();
    let mut shuffled = Vec::with_capacity(n);
    // 17 is coprime with the 37 example spans: visits every index once, far from file order.
    for i in 0..n {
        shuffled.push(std::mem::take(&mut singles[(i * 17) % n]));
    }
    shuffled
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_export_in_one_call_gives_the_replay_rows() {
    let (collector, out) = started(|_| {}).await;
    export_grpc(collector.grpc_addr, by_service(&example_requests())).await;
    let rows = stop(collector, out.path()).await;
    assert_eq!(rows.len(), EXAMPLE_ROWS);
    assert_eq!(rows, replayed_rows());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_one_span_per_call_in_shuffled_order_gives_the_replay_rows() {
    let (collector, out) = started(|_| {}).await;
    let batches = one_span_per_call_shuffled(by_service(&example_requests()));
    assert_eq!(batches.len(), EXAMPLE_SPANS);
    export_grpc(collector.grpc_addr, batches).await;
    assert_eq!(stop(collector, out.path()).await, replayed_rows());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_protobuf_one_span_per_call_gives_the_replay_rows() {
    let (collector, out) = started(|_| {}).await;
    let batches = one_span_per_call_shuffled(by_service(&example_requests()));
    let addr = collector.http_addr;
    tokio::task::spawn_blocking(move || export_http(addr, Protocol::HttpBinary, batches))
        .await
        .unwrap();
    assert_eq!(stop(collector, out.path()).await, replayed_rows());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_json_export_gives_the_replay_rows() {
    let (collector, out) = started(|_| {}).await;
    let batches = by_service(&example_requests());
    let addr = collector.http_addr;
    tokio::task::spawn_blocking(move || export_http(addr, Protocol::HttpJson, batches))
        .await
        .unwrap();
    assert_eq!(stop(collector, out.path()).await, replayed_rows());
}

/// JavaScript, Python and Go exporters print a double in its shortest round-trip form, often 17
/// digits: the same envelope amount is the same money whether it came as OTLP/JSON or protobuf
/// (serde_json's default parser read `19.900000000000002` as `19.9`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_double_amount_is_the_same_money_over_json_and_protobuf() {
    const AMOUNT: f64 = 19.900000000000002;
    let mut requests = example_requests();
    let mut amounts = 0;
    let spans = requests
        .iter_mut()
        .flat_map(|r| &mut r.resource_spans)
        .flat_map(|r| &mut r.scope_spans)
        .flat_map(|s| &mut s.spans);
    for span in spans {
        for attribute in &mut span.attributes {
            if attribute.key == "retry_spend.envelope.max_incremental_usd" {
                if let Some(value) = attribute.value.as_mut() {
                    value.value = Some(Value::DoubleValue(AMOUNT));
                    amounts += 1;
                }
            }
        }
    }
    assert!(amounts > 0, "the example has flat envelope amounts");
    let mut rows = Vec::new();
    for protocol in [Protocol::HttpJson, Protocol::HttpBinary] {
        let (collector, out) = started(|_| {}).await;
        let batches = by_service(&requests);
        let addr = collector.http_addr;
        tokio::task::spawn_blocking(move || export_http(addr, protocol, batches))
            .await
            .unwrap();
        rows.push(stop(collector, out.path()).await);
    }
    assert_eq!(rows[0].len(), EXAMPLE_ROWS);
    assert_eq!(rows[0], rows[1], "JSON and protobuf give the same rows");
    let exact = rows[0]
        .iter()
        .filter(|row| usd(&row["max_incremental_usd"]) == "19.900000000000002")
        .count();
    assert!(
        exact > 0,
        "the amount is the exporter's double, not a neighbour"
    );
}

/// The first two attempts of req-kimi-patch (whose logical span says 3 attempts are coming)
/// are evaluated; the third arrives after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_retry_gets_the_right_cumulative_and_decision() {
    let (collector, out) = started(|_| {}).await;
    let requests = example_requests();
    let (service, spans) = by_service(&requests)
        .into_iter()
        .find(|(service, _)| service == "code-agent")
        .unwrap();
    let is_late = |s: &opentelemetry_sdk::trace::SpanData| {
        s.attributes
            .iter()
            .any(|kv| kv.key.as_str() == "retry_spend.attempt.index" && kv.value.as_str() == "2")
    };
    let (late, mut early): (Vec<_>, Vec<_>) = spans.into_iter().partition(is_late);
    // Without the count the early attempts would wait; with 2 they are complete now.
    for span in &mut early {
        for kv in &mut span.attributes {
            if kv.key.as_str() == "retry_spend.attempt_count" {
                kv.value = opentelemetry::Value::I64(2);
            }
        }
    }
    export_grpc(collector.grpc_addr, vec![(service.clone(), early)]).await;
    collector.sync().await.unwrap();
    assert_eq!(
        collector
            .metrics
            .render()
            .lines()
            .find(|l| l.starts_with("retry_spend_late_attempts_total ")),
        Some("retry_spend_late_attempts_total 0")
    );
    export_grpc(collector.grpc_addr, vec![(service, late)]).await;
    let metrics = Arc::clone(&collector.metrics);
    let rows = stop(collector, out.path()).await;
    let metrics = metrics.render();
    assert!(
        metrics.contains("retry_spend_late_attempts_total 1"),
        "{metrics}"
    );
    assert_eq!(rows.len(), 3);
    let late_row = rows.iter().find(|r| r["attempt_index"] == "2").unwrap();
    assert_eq!(usd(&late_row["cumulative_incremental_usd"]), "0.0807");
    assert_eq!(late_row["decision"], "over_envelope");
    assert_eq!(late_row["original_model"], "kimi-k2.7-code");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resent_batches_never_become_second_rows() {
    let (collector, out) = started(|_| {}).await;
    let batches = by_service(&example_requests());
    export_grpc(collector.grpc_addr, batches.clone()).await;
    collector.sync().await.unwrap();
    export_grpc(collector.grpc_addr, batches).await;
    assert_eq!(stop(collector, out.path()).await, replayed_rows());
}

#[derive(Default, Clone)]
struct Downstream {
    received: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
}

#[tonic::async_trait]
impl TraceService for Downstream {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.received.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_span_is_forwarded_and_attempts_are_enriched() {
    let downstream = Downstream::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let downstream_addr = listener.local_addr().unwrap();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(
                TraceServiceServer::new(downstream.clone())
                    .accept_compressed(tonic::codec::CompressionEncoding::Gzip),
            )
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );

    let (collector, out) =
        started(|c| c.exporters.otlp_forward.endpoint = Some(format!("http://{downstream_addr}")))
            .await;
    export_grpc(collector.grpc_addr, by_service(&example_requests())).await;
    let metrics = Arc::clone(&collector.metrics);
    let rows = stop(collector, out.path()).await;
    server.abort();
    let metrics = metrics.render();
    assert!(
        metrics.contains("retry_spend_forward_spans_total 37"),
        "{metrics}"
    );

    let received = downstream.received.lock().unwrap();
    let spans: Vec<_> = received
        .iter()
        .flat_map(|r| &r.resource_spans)
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
        .collect();
    assert_eq!(
        spans.len(),
        EXAMPLE_SPANS,
        "every span, GenAI or not, exactly once"
    );
    let mut ids: Vec<_> = spans.iter().map(|s| s.span_id.clone()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), EXAMPLE_SPANS);
    let attr = |s: &opentelemetry_proto::tonic::trace::v1::Span, key: &str| {
        s.attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.clone()?.value)
    };
    let enriched: Vec<_> = spans
        .iter()
        .filter(|s| attr(s, "retry_spend.decision").is_some())
        .collect();
    assert_eq!(
        enriched.len(),
        rows.len(),
        "one enriched span per attempt row"
    );
    for span in enriched {
        let row = rows
            .iter()
            .find(|r| r["span_id"] == hex::encode(&span.span_id))
            .unwrap();
        assert_eq!(
            attr(span, "retry_spend.decision"),
            Some(Value::StringValue(row["decision"].clone()))
        );
        assert_eq!(
            attr(span, "retry_spend.spend_class"),
            Some(Value::StringValue(row["spend_class"].clone()))
        );
        assert_eq!(
            attr(span, "retry_spend.audited"),
            Some(Value::BoolValue(row["audited"] == "true"))
        );
        let remaining = attr(span, "retry_spend.remaining_envelope_usd");
        match row["remaining_envelope_usd"].as_str() {
            "NULL" => assert_eq!(remaining, None),
            value => assert_eq!(remaining, Some(Value::StringValue(usd(value)))),
        }
    }
}

fn metric(text: &str, series: &str) -> Option<String> {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_was_sent_and_health_answers() {
    let (collector, out) = started(|_| {}).await;
    export_grpc(collector.grpc_addr, by_service(&example_requests())).await;
    collector.sync().await.unwrap();

    let (status, body) = get(collector.metrics_addr, "/healthz").await;
    assert_eq!((status, body.trim()), (200, "ok"));
    let (status, text) = get(collector.metrics_addr, "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(
        metric(
            &text,
            r#"retry_spend_spans_received_total{transport="grpc"}"#
        )
        .as_deref(),
        Some("37")
    );
    // The plain GenAI span of the example waits group_wait for siblings (SPEC §2): its row is
    // counted once the collector has stopped, which evaluates everything pending.
    let metrics = Arc::clone(&collector.metrics);
    let rows = stop(collector, out.path()).await;
    assert_eq!(rows.len(), EXAMPLE_ROWS);
    let text = metrics.render();
    assert_eq!(
        metric(&text, r#"retry_spend_attempts_total{decision="over_envelope",spend_class="retry",task_type="code_patch",billing_group="vip"}"#).as_deref(),
        Some("1"),
        "{text}"
    );
    assert_eq!(
        metric(&text, r#"retry_spend_attempts_total{decision="first_attempt",spend_class="base",task_type="",billing_group=""}"#).as_deref(),
        Some("1"),
        "the legacy span has no task type or group: empty labels"
    );
    assert_eq!(
        metric(
            &text,
            r#"retry_spend_incremental_usd_total{spend_class="drift"}"#
        )
        .as_deref(),
        Some("0.0097512")
    );
    assert_eq!(
        metric(&text, "retry_spend_requests_pending").as_deref(),
        Some("0")
    );
}

fn post(
    addr: SocketAddr,
    content_type: &str,
    encoding: Option<&str>,
    body: Vec<u8>,
) -> (u16, String) {
    let client = reqwest::blocking::Client::new();
    let mut request = client
        .post(format!("http://{addr}/v1/traces"))
        .header("content-type", content_type)
        .body(body);
    if let Some(encoding) = encoding {
        request = request.header("content-encoding", encoding);
    }
    let response = request.send().unwrap();
    (
        response.status().as_u16(),
        String::from_utf8_lossy(&response.bytes().unwrap()).into_owned(),
    )
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_http_input_gets_the_right_status_and_loses_nothing() {
    use prost::Message;
    let (collector, out) = started(|c| c.receivers.otlp.max_request_bytes = 64 * 1024).await;
    let addr = collector.http_addr;
    let requests = example_requests();
    let (first, rest) = requests.split_at(1);
    let first = first[0].clone();
    let rest: Vec<ExportTraceServiceRequest> = rest.to_vec();

    tokio::task::spawn_blocking(move || {
        assert_eq!(
            post(addr, "application/x-protobuf", None, first.encode_to_vec()).0,
            200
        );

        let (status, body) = post(
            addr,
            "application/x-protobuf",
            None,
            b"\xff\xff\xff garbage".to_vec(),
        );
        assert_eq!(status, 400);
        assert!(body.contains("invalid OTLP protobuf"), "{body}");
        let (status, body) = post(
            addr,
            "application/json",
            None,
            b"{\"resourceSpans\": [".to_vec(),
        );
        assert_eq!(status, 400);
        assert!(body.contains("invalid OTLP JSON"), "{body}");
        let (status, body) = post(addr, "text/plain", None, b"hello".to_vec());
        assert_eq!(status, 415);
        assert!(body.contains("application/x-protobuf"), "{body}");
        assert_eq!(
            post(addr, "application/x-protobuf", None, vec![0; 100 * 1024]).0,
            413
        );
        assert_eq!(
            post(
                addr,
                "application/x-protobuf",
                Some("gzip"),
                gzip(&vec![0; 100 * 1024])
            )
            .0,
            413
        );
        assert_eq!(
            post(
                addr,
                "application/x-protobuf",
                Some("gzip"),
                b"not gzip".to_vec()
            )
            .0,
            400
        );

        for request in rest {
            let json = serde_json::to_vec(&request).unwrap();
            let (status, body) = post(addr, "application/json", Some("gzip"), gzip(&json));
            assert_eq!((status, body.as_str()), (200, "{}"));
        }
    })
    .await
    .unwrap();
    assert_eq!(stop(collector, out.path()).await, replayed_rows());
}

#[derive(Clone, Default)]
struct RawCodec;

struct RawEncoder;
struct RawDecoder;

impl tonic::codec::Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawDecoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        use bytes::Buf;
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

async fn raw_grpc_export(addr: SocketAddr, body: Vec<u8>) -> Result<Vec<u8>, tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel).max_encoding_message_size(64 * 1024 * 1024);
    grpc.ready().await.unwrap();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    );
    grpc.unary(tonic::Request::new(body), path, RawCodec)
        .await
        .map(|r| r.into_inner())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_grpc_input_is_refused_and_the_server_keeps_serving() {
    let (collector, out) = started(|c| c.receivers.otlp.max_request_bytes = 64 * 1024).await;
    let addr = collector.grpc_addr;
    let batches = by_service(&example_requests());
    let (first, rest) = batches.split_at(1);
    export_grpc(addr, first.to_vec()).await;

    let garbage = raw_grpc_export(addr, b"\xff\xff\xff garbage".to_vec())
        .await
        .unwrap_err();
    assert_eq!(garbage.code(), tonic::Code::InvalidArgument, "{garbage:?}");
    assert!(
        garbage.message().contains("invalid OTLP protobuf"),
        "{garbage:?}"
    );
    let oversize = raw_grpc_export(addr, vec![0; 100 * 1024])
        .await
        .unwrap_err();
    assert_eq!(oversize.code(), tonic::Code::OutOfRange, "{oversize:?}");

    export_grpc(addr, rest.to_vec()).await;
    assert_eq!(stop(collector, out.path()).await, replayed_rows());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_write_ahead_log_rows_are_the_same() {
    let (collector, out) = started(|c| c.wal.enabled = false).await;
    export_grpc(collector.grpc_addr, by_service(&example_requests())).await;
    assert_eq!(stop(collector, out.path()).await, replayed_rows());
    let wal = out.path().join("wal");
    assert!(!wal.exists() || std::fs::read_dir(wal).unwrap().count() == 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sink_none_acknowledges_and_discards() {
    let (collector, out) = started(|c| c.exporters.parquet.enabled = false).await;
    export_grpc(collector.grpc_addr, by_service(&example_requests())).await;
    let metrics = Arc::clone(&collector.metrics);
    assert!(stop(collector, out.path()).await.is_empty());
    let text = metrics.render();
    assert_eq!(
        metric(
            &text,
            r#"retry_spend_spans_received_total{transport="grpc"}"#
        )
        .as_deref(),
        Some("37")
    );
}

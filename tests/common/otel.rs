//! Sending spans with the real OpenTelemetry Rust SDK exporter (`opentelemetry-otlp`).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{Array, InstrumentationScope, KeyValue, StringValue, Value};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use opentelemetry_sdk::Resource;

/// Spans of one service: the SDK exporter carries one resource.
pub type ServiceBatch = (String, Vec<SpanData>);

/// The spans in `batches`, all services together.
pub fn span_count(batches: &[ServiceBatch]) -> u64 {
    batches.iter().map(|(_, spans)| spans.len() as u64).sum()
}

fn value(v: &any_value::Value) -> Option<Value> {
    Some(match v {
        any_value::Value::StringValue(s) => Value::String(s.clone().into()),
        any_value::Value::BoolValue(b) => Value::Bool(*b),
        any_value::Value::IntValue(i) => Value::I64(*i),
        any_value::Value::DoubleValue(d) => Value::F64(*d),
        any_value::Value::ArrayValue(a) => Value::Array(Array::String(
            a.values
                .iter()
                .filter_map(|v| match &v.value {
                    Some(any_value::Value::StringValue(s)) => Some(StringValue::from(s.clone())),
                    _ => None,
                })
                .collect(),
        )),
        _ => return None,
    })
}

fn id<const N: usize>(bytes: &[u8]) -> [u8; N] {
    <[u8; N]>::try_from(bytes).unwrap_or([0; N])
}

pub fn span_data(span: &Span, scope: &InstrumentationScope) -> SpanData {
    let nanos = |n: u64| SystemTime::UNIX_EPOCH + Duration::from_nanos(n);
    let status = match span.status.as_ref().map(|s| (s.code, s.message.clone())) {
        Some((2, message)) => Status::error(message),
        Some((1, _)) => Status::Ok,
        _ => Status::Unset,
    };
    SpanData {
        span_context: SpanContext::new(
            TraceId::from_bytes(id(&span.trace_id)),
            SpanId::from_bytes(id(&span.span_id)),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        parent_span_id: if span.parent_span_id.is_empty() {
            SpanId::INVALID
        } else {
            SpanId::from_bytes(id(&span.parent_span_id))
        },
        parent_span_is_remote: false,
        span_kind: match span.kind {
            2 => SpanKind::Server,
            3 => SpanKind::Client,
            4 => SpanKind::Producer,
            5 => SpanKind::Consumer,
            _ => SpanKind::Internal,
        },
        name: Cow::Owned(span.name.clone()),
        start_time: nanos(span.start_time_unix_nano),
        end_time: nanos(span.end_time_unix_nano),
        attributes: span
            .attributes
            .iter()
            .filter_map(|kv| {
                Some(KeyValue::new(
                    kv.key.clone(),
                    value(kv.value.as_ref()?.value.as_ref()?)?,
                ))
            })
            .collect(),
        dropped_attributes_count: 0,
        events: Default::default(),
        links: Default::default(),
        status,
        instrumentation_scope: scope.clone(),
    }
}

/// Every span of some OTLP requests as SDK span data, grouped by service name.
pub fn by_service(requests: &[ExportTraceServiceRequest]) -> Vec<ServiceBatch> {
    let mut batches: BTreeMap<String, Vec<SpanData>> = BTreeMap::new();
    for request in requests {
        for rs in &request.resource_spans {
            let service = rs
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                    any_value::Value::StringValue(s) => Some(s.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            for ss in &rs.scope_spans {
                let scope_name = ss
                    .scope
                    .as_ref()
                    .map(|s| s.name.clone())
                    .unwrap_or_default();
                let scope = InstrumentationScope::builder(scope_name).build();
                for span in &ss.spans {
                    batches
                        .entry(service.clone())
                        .or_default()
                        .push(span_data(span, &scope));
                }
            }
        }
    }
    batches.into_iter().collect()
}

fn resource(service: &str) -> Resource {
    Resource::builder_empty()
        .with_service_name(service.to_owned())
        .build()
}

/// Exports each batch in one call over OTLP/gRPC; panics if the collector refuses one.
pub async fn export_grpc(addr: SocketAddr, batches: Vec<ServiceBatch>) {
    for (service, spans) in batches {
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(format!("http://{addr}"))
            .build()
            .expect("grpc exporter");
        exporter.set_resource(&resource(&service));
        exporter.export(spans).await.expect("grpc export accepted");
    }
}

/// Exports each batch in one call over OTLP/HTTP (protobuf or JSON). The SDK's HTTP exporter
/// uses a blocking client, so it runs on a thread of its own, outside any async runtime.
pub fn export_http(addr: SocketAddr, protocol: Protocol, batches: Vec<ServiceBatch>) {
    std::thread::spawn(move || {
        for (service, spans) in batches {
            let mut exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(protocol)
                .with_endpoint(format!("http://{addr}/v1/traces"))
                .build()
                .expect("http exporter");
            exporter.set_resource(&resource(&service));
            futures_executor::block_on(exporter.export(spans)).expect("http export accepted");
        }
    })
    .join()
    .expect("http export thread");
}

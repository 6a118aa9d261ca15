//! OTLP/HTTP receiver: `POST /v1/traces` with protobuf or JSON bodies, gzip accepted.

use std::future::Future;
use std::io::Read;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::serve::ListenerExt;
use axum::Router;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message;
use tokio::net::TcpListener;

use super::{Refusal as ConsumerRefusal, TracesConsumer, Transport};
use crate::server::auth::{self, Authenticator};
use crate::server::tls::TlsIdentity;

pub const TRACES_PATH: &str = "/v1/traces";
const PROTOBUF: &str = "application/x-protobuf";
const JSON: &str = "application/json";
/// Seconds a refused client is asked to wait before retrying.
const RETRY_AFTER_SECONDS: &str = "5";

#[derive(Clone)]
struct HttpState<C> {
    consumer: C,
    max_request_bytes: usize,
    auth: Option<Arc<Authenticator>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Protobuf,
    Json,
}

/// `google.rpc.Status`, the body OTLP/HTTP servers answer errors with.
#[derive(Clone, PartialEq, Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

/// A refused export: the status, a metrics outcome label, and a message for the client.
struct Refusal {
    status: StatusCode,
    outcome: &'static str,
    message: String,
}

impl Refusal {
    fn new(status: StatusCode, outcome: &'static str, message: impl Into<String>) -> Refusal {
        Refusal {
            status,
            outcome,
            message: message.into(),
        }
    }

    fn into_response(self, encoding: Option<Encoding>) -> Response {
        // gRPC codes for the Status body: INVALID_ARGUMENT, UNAVAILABLE, RESOURCE_EXHAUSTED,
        // UNAUTHENTICATED.
        let code = match self.status {
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS => 14,
            StatusCode::PAYLOAD_TOO_LARGE => 8,
            StatusCode::UNAUTHORIZED => 16,
            _ => 3,
        };
        let status = RpcStatus {
            code,
            message: self.message,
        };
        let mut response = match encoding {
            Some(Encoding::Protobuf) => {
                ([(header::CONTENT_TYPE, PROTOBUF)], status.encode_to_vec()).into_response()
            }
            Some(Encoding::Json) => {
                let body = serde_json::json!({ "code": status.code, "message": status.message });
                ([(header::CONTENT_TYPE, JSON)], body.to_string()).into_response()
            }
            None => status.message.into_response(),
        };
        *response.status_mut() = self.status;
        if matches!(
            self.status,
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS
        ) {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(RETRY_AFTER_SECONDS),
            );
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// The receiver's routes, handing exports to `consumer`; with `auth`, every export must carry
/// an accepted bearer token.
pub fn router<C: TracesConsumer>(
    consumer: C,
    max_request_bytes: usize,
    auth: Option<Arc<Authenticator>>,
) -> Router {
    Router::new()
        .route(TRACES_PATH, post(export::<C>))
        // The limit is enforced below, on the decoded size too; axum's own default is lower.
        .layer(DefaultBodyLimit::disable())
        .with_state(HttpState {
            consumer,
            max_request_bytes,
            auth,
        })
}

/// Serves the OTLP/HTTP receiver until `shutdown` resolves, then finishes requests in flight.
/// With `tls`, only TLS connections are served.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<TlsIdentity>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if let Some(tls) = tls {
        return axum::serve(tls.http_listener(listener), router)
            .with_graceful_shutdown(shutdown)
            .await;
    }
    // SDKs export one request at a time; Nagle's algorithm would stall each small answer.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn export<C: TracesConsumer>(
    State(state): State<HttpState<C>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let metrics = state.consumer.metrics();
    // Before the body is read or decoded: an unauthenticated caller costs nothing more.
    if let Some(auth) = &state.auth {
        if !auth.accepts(headers.get(header::AUTHORIZATION)) {
            metrics.export_request("http", auth::OUTCOME);
            let refusal = Refusal::new(
                StatusCode::UNAUTHORIZED,
                auth::OUTCOME,
                auth::REFUSAL_MESSAGE,
            );
            return refusal.into_response(content_encoding_of(&headers).ok());
        }
    }
    let encoding = match content_encoding_of(&headers) {
        Ok(encoding) => encoding,
        Err(refusal) => {
            metrics.export_request("http", refusal.outcome);
            return refusal.into_response(None);
        }
    };
    if let Some(early) = state.consumer.refuse_early() {
        metrics.export_request("http", early.outcome());
        return refusal_of(early).into_response(Some(encoding));
    }
    match accept(&state, &headers, body, encoding).await {
        Ok(()) => {
            metrics.export_request("http", "ok");
            let response = ExportTraceServiceResponse {
                partial_success: None,
            };
            match encoding {
                Encoding::Protobuf => {
                    ([(header::CONTENT_TYPE, PROTOBUF)], response.encode_to_vec()).into_response()
                }
                Encoding::Json => ([(header::CONTENT_TYPE, JSON)], "{}").into_response(),
            }
        }
        Err(refusal) => {
            metrics.export_request("http", refusal.outcome);
            refusal.into_response(Some(encoding))
        }
    }
}

fn content_encoding_of(headers: &HeaderMap) -> Result<Encoding, Refusal> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let media_type = content_type.split(';').next().unwrap_or("").trim();
    if media_type.eq_ignore_ascii_case(PROTOBUF) {
        Ok(Encoding::Protobuf)
    } else if media_type.eq_ignore_ascii_case(JSON) {
        Ok(Encoding::Json)
    } else {
        Err(Refusal::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!("unsupported content type {content_type:?}: send {PROTOBUF} or {JSON}"),
        ))
    }
}

async fn accept<C: TracesConsumer>(
    state: &HttpState<C>,
    headers: &HeaderMap,
    body: Body,
    encoding: Encoding,
) -> Result<(), Refusal> {
    let limit = state.max_request_bytes;
    let too_large = || {
        Refusal::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("request body is larger than the {limit}-byte limit"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let raw = axum::body::to_bytes(body, limit).await.map_err(|e| {
        if std::error::Error::source(&e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>())
        {
            too_large()
        } else {
            Refusal::new(
                StatusCode::BAD_REQUEST,
                "invalid",
                format!("cannot read request body: {e}"),
            )
        }
    })?;
    let bytes = decompress(headers, raw, limit)?;
    let bytes = match encoding {
        Encoding::Protobuf => bytes,
        Encoding::Json => {
            let request = crate::contract::otlp_json::parse_request(&bytes).map_err(|e| {
                Refusal::new(
                    StatusCode::BAD_REQUEST,
                    "invalid",
                    format!("invalid OTLP JSON: {e}"),
                )
            })?;
            // The write-ahead log keeps protobuf, whatever the wire format was.
            Bytes::from(request.encode_to_vec())
        }
    };
    let export = state
        .consumer
        .read(&bytes)
        .map_err(|e| Refusal::new(StatusCode::BAD_REQUEST, "invalid", e.to_string()))?;
    state
        .consumer
        .consume(bytes, export, Transport::Http)
        .await
        .map_err(refusal_of)
}

/// The HTTP answer to a refused export: 429 when busy, 503 when over the memory limit or when
/// storage or the collector is unavailable; both with `Retry-After`, both retried by OTLP
/// clients.
fn refusal_of(refusal: ConsumerRefusal) -> Refusal {
    let status = match refusal {
        ConsumerRefusal::Busy => StatusCode::TOO_MANY_REQUESTS,
        ConsumerRefusal::MemoryLimit | ConsumerRefusal::Storage(_) | ConsumerRefusal::Closed => {
            StatusCode::SERVICE_UNAVAILABLE
        }
    };
    Refusal::new(status, refusal.outcome(), refusal.to_string())
}

/// Undoes `Content-Encoding: gzip`, refusing bodies that inflate past the limit.
fn decompress(headers: &HeaderMap, raw: Bytes, limit: usize) -> Result<Bytes, Refusal> {
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("identity")
        .trim();
    if encoding.eq_ignore_ascii_case("identity") || encoding.is_empty() {
        return Ok(raw);
    }
    if !encoding.eq_ignore_ascii_case("gzip") {
        return Err(Refusal::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!("unsupported content encoding {encoding:?}: send gzip or identity"),
        ));
    }
    let mut inflated = Vec::with_capacity(raw.len().saturating_mul(4).min(limit));
    flate2::read::GzDecoder::new(raw.as_ref())
        .take(limit as u64 + 1)
        .read_to_end(&mut inflated)
        .map_err(|e| {
            Refusal::new(
                StatusCode::BAD_REQUEST,
                "invalid",
                format!("invalid gzip body: {e}"),
            )
        })?;
    if inflated.len() > limit {
        return Err(Refusal::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("decompressed request body is larger than the {limit}-byte limit"),
        ));
    }
    Ok(Bytes::from(inflated))
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{header, Request, StatusCode};
    use tower_service::Service;

    use super::*;
    use crate::receivers::consumer::tests::{export_of, Scripted};

    const LIMIT: usize = 1 << 20;

    async fn post_export(consumer: Scripted, body: Bytes) -> Response {
        let mut router = router(consumer, LIMIT, None);
        let request = Request::post(TRACES_PATH)
            .header(header::CONTENT_TYPE, PROTOBUF)
            .body(Body::from(body))
            .unwrap();
        router.call(request).await.unwrap()
    }

    fn retry_after(response: &Response) -> Option<&str> {
        response
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
    }

    #[tokio::test]
    async fn an_accepted_export_is_200_once_the_consumer_took_its_spans() {
        let consumer = Scripted::answering(Ok(()));
        let response = post_export(consumer.clone(), export_of(2)).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(consumer.consumed(), 2);
    }

    #[tokio::test]
    async fn a_busy_consumer_is_429_with_retry_after() {
        let consumer = Scripted::answering(Err(ConsumerRefusal::Busy));
        let response = post_export(consumer.clone(), export_of(1)).await;
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(retry_after(&response), Some(RETRY_AFTER_SECONDS));
        assert!(consumer
            .metrics
            .render()
            .contains(r#"transport="http",outcome="busy"} 1"#));
    }

    #[tokio::test]
    async fn storage_trouble_or_shutdown_is_503_with_retry_after() {
        for refusal in [
            ConsumerRefusal::Storage("disk full".into()),
            ConsumerRefusal::Closed,
        ] {
            let consumer = Scripted::answering(Err(refusal.clone()));
            let response = post_export(consumer, export_of(1)).await;
            assert_eq!(
                response.status(),
                StatusCode::SERVICE_UNAVAILABLE,
                "{refusal:?}"
            );
            assert_eq!(retry_after(&response), Some(RETRY_AFTER_SECONDS));
        }
    }

    #[tokio::test]
    async fn an_early_refusal_is_answered_before_the_body_is_read() {
        let consumer = Scripted {
            early: Some(ConsumerRefusal::Busy),
            ..Scripted::answering(Ok(()))
        };
        // Not protobuf at all: had it been read, the answer would be 400.
        let response = post_export(consumer.clone(), Bytes::from_static(&[0x0a, 0xff])).await;
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(consumer.consumed(), 0);
    }

    #[tokio::test]
    async fn malformed_protobuf_is_400_and_never_reaches_the_consumer() {
        let consumer = Scripted::answering(Ok(()));
        let response = post_export(consumer.clone(), Bytes::from_static(&[0x0a, 0xff])).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(consumer.consumed(), 0);
    }
}

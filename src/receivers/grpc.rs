//! OTLP/gRPC receiver (tonic), gzip accepted.
//!
//! The `TraceService/Export` method is served by hand rather than through the generated server
//! so that its codec keeps the request's bytes (the write-ahead log stores them as received, no
//! re-encoding) and answers malformed protobuf with `INVALID_ARGUMENT` rather than tonic's
//! generic `INTERNAL`.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use tokio::net::TcpListener;
use tonic::codec::{Codec, CompressionEncoding, DecodeBuf, Decoder};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

use super::{Refusal, TracesConsumer, Transport};
use crate::server::auth::{self, Authenticator};
use crate::server::tls::TlsIdentity;
use crate::server::ResponseEncoder;

const EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// An export request's bytes, read into span facts by the method (which knows whether spans
/// are forwarded).
pub struct RawExport {
    bytes: Bytes,
}

#[derive(Clone, Copy, Default)]
struct ExportCodec;
struct ExportDecoder;

impl Codec for ExportCodec {
    type Encode = ExportTraceServiceResponse;
    type Decode = RawExport;
    type Encoder = ResponseEncoder<ExportTraceServiceResponse>;
    type Decoder = ExportDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        ResponseEncoder::default()
    }

    fn decoder(&mut self) -> ExportDecoder {
        ExportDecoder
    }
}

impl Decoder for ExportDecoder {
    type Item = RawExport;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<RawExport>, Status> {
        // Read into span facts by the method, which knows whether spans are forwarded.
        Ok(Some(RawExport {
            bytes: src.copy_to_bytes(src.remaining()),
        }))
    }
}

#[derive(Clone)]
struct ExportMethod<C> {
    consumer: C,
}

impl<C: TracesConsumer> UnaryService<RawExport> for ExportMethod<C> {
    type Response = ExportTraceServiceResponse;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Self::Response>, Status>> + Send>>;

    fn call(&mut self, request: Request<RawExport>) -> Self::Future {
        let consumer = self.consumer.clone();
        Box::pin(async move {
            let RawExport { bytes } = request.into_inner();
            let export = match consumer.read(&bytes) {
                Ok(export) => export,
                Err(e) => {
                    consumer.metrics().export_request("grpc", "invalid");
                    return Err(Status::invalid_argument(e.to_string()));
                }
            };
            match consumer.consume(bytes, export, Transport::Grpc).await {
                Ok(()) => {
                    consumer.metrics().export_request("grpc", "ok");
                    Ok(Response::new(ExportTraceServiceResponse {
                        partial_success: None,
                    }))
                }
                Err(refusal) => {
                    consumer.metrics().export_request("grpc", refusal.outcome());
                    Err(status_of(&refusal))
                }
            }
        })
    }
}

/// Every refusal is retryable, so clients back off and send again: `UNAVAILABLE`.
fn status_of(refusal: &Refusal) -> Status {
    Status::unavailable(refusal.to_string())
}

/// The `TraceService` as a tower service for tonic's router.
#[derive(Clone)]
struct TraceServer<C> {
    method: ExportMethod<C>,
    max_request_bytes: usize,
    auth: Option<Arc<Authenticator>>,
}

impl<C> NamedService for TraceServer<C> {
    const NAME: &'static str = "opentelemetry.proto.collector.trace.v1.TraceService";
}

impl<C, B> tower_service::Service<http::Request<B>> for TraceServer<C>
where
    C: TracesConsumer,
    B: http_body::Body + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // Before anything else, so an unauthenticated caller learns nothing, not even which
        // methods exist, and costs no decoding.
        if let Some(auth) = &self.auth {
            if !auth.accepts(request.headers().get(http::header::AUTHORIZATION)) {
                self.method
                    .consumer
                    .metrics()
                    .export_request("grpc", auth::OUTCOME);
                let status = Status::unauthenticated(auth::REFUSAL_MESSAGE);
                return Box::pin(async move { Ok(status.into_http()) });
            }
        }
        if request.uri().path() != EXPORT_PATH {
            return Box::pin(async { Ok(Status::unimplemented("unknown method").into_http()) });
        }
        if let Some(refusal) = self.method.consumer.refuse_early() {
            self.method
                .consumer
                .metrics()
                .export_request("grpc", refusal.outcome());
            let status = status_of(&refusal);
            return Box::pin(async move { Ok(status.into_http()) });
        }
        let method = self.method.clone();
        let limit = self.max_request_bytes;
        Box::pin(async move {
            let mut grpc = Grpc::new(ExportCodec)
                .accept_compressed(CompressionEncoding::Gzip)
                .send_compressed(CompressionEncoding::Gzip)
                .max_decoding_message_size(limit);
            Ok(grpc.unary(method, request).await)
        })
    }
}

/// Serves `TraceService/Export`, handing exports to `consumer`, and the services of `beside`
/// (the decision service), on `listener` until `shutdown` resolves, then finishes the requests
/// in flight. With `tls`, only TLS connections are served; with `auth`, only exports carrying
/// an accepted bearer token.
pub async fn serve<C: TracesConsumer>(
    listener: TcpListener,
    consumer: C,
    max_request_bytes: usize,
    tls: Option<TlsIdentity>,
    auth: Option<Arc<Authenticator>>,
    beside: tonic::service::Routes,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let service = TraceServer {
        method: ExportMethod { consumer },
        max_request_bytes,
        auth,
    };
    let mut server = tonic::transport::Server::builder();
    let routes = server.add_routes(beside.add_service(service));
    // Our own handshakes rather than tonic's, whose certificate is fixed when it starts: ours
    // read the one in use at each handshake, so a reload reaches new connections.
    if let Some(tls) = tls {
        let incoming = tls.grpc_listener(listener).into_incoming();
        return routes
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await;
    }
    // SDKs export one request at a time; Nagle's algorithm would stall each small answer.
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    routes
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}

//! OTLP/gRPC receiver (tonic), gzip accepted.

use std::future::Future;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use tokio::net::TcpListener;
use tonic::codec::CompressionEncoding;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

use super::{Intake, Transport};

struct Receiver {
    intake: Intake,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        match self
            .intake
            .submit(request.into_inner(), Transport::Grpc)
            .await
        {
            Ok(()) => {
                self.intake.metrics().export_request("grpc", "ok");
                Ok(Response::new(ExportTraceServiceResponse {
                    partial_success: None,
                }))
            }
            Err(_closed) => {
                self.intake.metrics().export_request("grpc", "unavailable");
                Err(Status::unavailable(
                    "the collector is shutting down; retry later",
                ))
            }
        }
    }
}

/// Serves `TraceService/Export` on `listener` until `shutdown` resolves, then finishes the
/// requests in flight.
pub async fn serve(
    listener: TcpListener,
    intake: Intake,
    max_request_bytes: usize,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let service = TraceServiceServer::new(Receiver { intake })
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip)
        .max_decoding_message_size(max_request_bytes);
    // SDKs export one request at a time; Nagle's algorithm would stall each small answer.
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .add_service(service)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}

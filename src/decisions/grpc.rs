//! `retry_spend.v1.RetryDecisions/Decide` over gRPC, beside the OTLP trace service on the gRPC
//! address.
//!
//! Served by hand, like the trace service, so that it checks the receivers' bearer tokens before
//! decoding anything and answers malformed protobuf with `INVALID_ARGUMENT` rather than tonic's
//! generic `INTERNAL`. The decision is made on the task serving the call.

use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use prost::Message;
use tonic::codec::{Codec, CompressionEncoding, DecodeBuf, Decoder};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Request, Response, Status};

use super::proto::{DecideRequest, DecideResponse};
use super::{DecideError, Decider, DECIDE_PATH, GRPC_SERVICE};
use crate::server::auth::{self, Authenticator};
use crate::server::ResponseEncoder;

/// The `RetryDecisions` service as a tower service for tonic's router.
#[derive(Debug, Clone)]
pub struct DecisionsServer {
    method: DecideMethod,
    max_request_bytes: usize,
    auth: Option<Arc<Authenticator>>,
}

impl DecisionsServer {
    /// With `auth`, every call must carry an accepted bearer token, as exports must.
    pub fn new(
        decider: Decider,
        max_request_bytes: usize,
        auth: Option<Arc<Authenticator>>,
    ) -> DecisionsServer {
        DecisionsServer {
            method: DecideMethod { decider },
            max_request_bytes,
            auth,
        }
    }
}

impl NamedService for DecisionsServer {
    const NAME: &'static str = GRPC_SERVICE;
}

impl<B> tower_service::Service<http::Request<B>> for DecisionsServer
where
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
        // Before anything else, as for exports: an unauthenticated caller learns nothing.
        if let Some(auth) = &self.auth {
            if !auth.accepts(request.headers().get(http::header::AUTHORIZATION)) {
                let status = Status::unauthenticated(auth::REFUSAL_MESSAGE);
                return Box::pin(async move { Ok(status.into_http()) });
            }
        }
        if request.uri().path() != DECIDE_PATH {
            return Box::pin(async { Ok(Status::unimplemented("unknown method").into_http()) });
        }
        let method = self.method.clone();
        let limit = self.max_request_bytes;
        Box::pin(async move {
            let mut grpc = Grpc::new(DecideCodec)
                .accept_compressed(CompressionEncoding::Gzip)
                .send_compressed(CompressionEncoding::Gzip)
                .max_decoding_message_size(limit);
            Ok(grpc.unary(method, request).await)
        })
    }
}

#[derive(Debug, Clone)]
struct DecideMethod {
    decider: Decider,
}

impl UnaryService<DecideRequest> for DecideMethod {
    type Response = DecideResponse;
    type Future = Ready<Result<Response<DecideResponse>, Status>>;

    fn call(&mut self, request: Request<DecideRequest>) -> Self::Future {
        ready(
            self.decider
                .decide(request.into_inner())
                .map(Response::new)
                .map_err(|e| status_of(&e)),
        )
    }
}

fn status_of(error: &DecideError) -> Status {
    match error {
        DecideError::Malformed(malformed) => Status::invalid_argument(malformed.to_string()),
        DecideError::NoDecision => Status::internal(error.to_string()),
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct DecideCodec;
struct DecideDecoder;

impl Codec for DecideCodec {
    type Encode = DecideResponse;
    type Decode = DecideRequest;
    type Encoder = ResponseEncoder<DecideResponse>;
    type Decoder = DecideDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        ResponseEncoder::default()
    }

    fn decoder(&mut self) -> DecideDecoder {
        DecideDecoder
    }
}

impl Decoder for DecideDecoder {
    type Item = DecideRequest;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<DecideRequest>, Status> {
        DecideRequest::decode(src)
            .map(Some)
            .map_err(|e| Status::invalid_argument(format!("malformed DecideRequest: {e}")))
    }
}

//! OTLP receivers: gRPC `TraceService/Export` and HTTP `POST /v1/traces`.
//!
//! Both decode and hand each export request, with its protobuf bytes, to a [`TracesConsumer`]:
//! the pipeline's intake, which answers only once the request is durably in the write-ahead log,
//! or under `--sink none` a consumer that drops it. A consumer that cannot take more answers
//! with a retryable [`Refusal`], which each receiver maps to its protocol's status.
//! Optionally both serve TLS and require a bearer token ([`crate::server`]), checked before
//! anything is decoded.

pub mod config;
mod consumer;
pub mod grpc;
pub mod http;

pub use config::{AuthConfig, OtlpReceiverConfig, ReceiversConfig, TlsConfig};
pub use consumer::{DiscardConsumer, TracesConsumer};

use std::fmt;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

/// Which receiver a request came through, as metrics label it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Grpc,
    Http,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Grpc => "grpc",
            Transport::Http => "http",
        }
    }
}

/// Why an export was not accepted. Every case is worth retrying later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Over the in-flight memory bound or the queue is full: back off and retry.
    Busy,
    /// Over `service.memory_limit`: back off and retry.
    MemoryLimit,
    /// The write-ahead log or a sink cannot write (e.g. disk full); nothing was accepted.
    Storage(String),
    /// The collector is shutting down.
    Closed,
}

impl Refusal {
    /// The metrics outcome label.
    pub fn outcome(&self) -> &'static str {
        match self {
            Refusal::Busy => "busy",
            Refusal::MemoryLimit => "memory_limit",
            Refusal::Storage(_) => "storage_unavailable",
            Refusal::Closed => "unavailable",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Busy => {
                f.write_str("the collector is at its memory or queue limit; retry later")
            }
            Refusal::MemoryLimit => f.write_str(
                "the collector is at its memory limit (service.memory_limit); retry later",
            ),
            Refusal::Storage(problem) => {
                write!(
                    f,
                    "the collector cannot store data right now ({problem}); retry later"
                )
            }
            Refusal::Closed => f.write_str("the collector is shutting down; retry later"),
        }
    }
}

pub fn span_count(request: &ExportTraceServiceRequest) -> u64 {
    request
        .resource_spans
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .map(|ss| ss.spans.len() as u64)
        .sum()
}

//! OTLP receivers: gRPC `TraceService/Export` and HTTP `POST /v1/traces`.
//!
//! Both decode and hand each export request, with its protobuf bytes, to [`Intake`], which
//! answers only once the request is durably in the write-ahead log and queued for the pipeline.
//! When memory, the log or a sink cannot take more, the answer is a retryable refusal.
//! Optionally both serve TLS ([`tls`]) and require a bearer token ([`auth`]), checked before
//! anything is decoded.

pub mod auth;
pub mod config;
pub mod grpc;
pub mod http;
pub mod tls;

pub use config::{AuthConfig, OtlpReceiverConfig, ReceiversConfig, TlsConfig};

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use tokio::sync::{mpsc, oneshot};

use crate::contract::wire::{read_export, WireError};
use crate::contract::SharedAttributeKeys;

use crate::pipeline::{partition, Append, InFlight, LogMessage};
use crate::sinks::metrics::{Health, Metrics};

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

/// The receivers' way into the pipeline.
#[derive(Clone)]
pub struct Intake {
    log: mpsc::Sender<LogMessage>,
    in_flight: Arc<InFlight>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    shards: usize,
    /// Spans are forwarded downstream: keep where each lies in the export's bytes.
    keep_raw: bool,
    /// Attribute keys the envelope policies match on, captured as spans are read.
    policy_keys: Arc<SharedAttributeKeys>,
    discard: bool,
}

impl Intake {
    pub fn new(
        log: mpsc::Sender<LogMessage>,
        in_flight: Arc<InFlight>,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
        shards: usize,
    ) -> Intake {
        Intake {
            log,
            in_flight,
            metrics,
            health,
            shards,
            keep_raw: false,
            policy_keys: Arc::default(),
            discard: false,
        }
    }

    /// The attribute keys of the policies in use (replaced on reload).
    pub fn policy_keys(mut self, keys: Arc<SharedAttributeKeys>) -> Intake {
        self.policy_keys = keys;
        self
    }

    /// Spans will be forwarded: parts carry their bytes.
    pub fn forwarding(mut self, on: bool) -> Intake {
        self.keep_raw = on;
        self
    }

    /// Acknowledges and drops every export after decoding (`--sink none`): the floor a real
    /// pipeline is measured against.
    pub fn discarding(mut self) -> Intake {
        self.discard = true;
        self
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// A refusal known before the request is even read: the memory bound is already reached,
    /// or a sink cannot write. Checked first so an overloaded collector does not spend CPU
    /// decoding requests it will refuse.
    pub fn refuse_early(&self) -> Option<Refusal> {
        if self.discard {
            return None;
        }
        if let Some(problem) = self.storage_problem() {
            return Some(Refusal::Storage(problem));
        }
        self.in_flight.is_full().then_some(Refusal::Busy)
    }

    /// A sink that cannot write, or an object store output whose uploads are so far behind
    /// that the files waiting for them are over their budget.
    fn storage_problem(&self) -> Option<String> {
        [
            crate::pipeline::PARQUET_COMPONENT,
            crate::sinks::parquet::remote::BACKLOG_COMPONENT,
        ]
        .into_iter()
        .find_map(|component| self.health.problem(component))
    }

    /// Reads an encoded export request into span facts: what the receivers call before
    /// [`Intake::submit`]. An error is the client's (invalid argument / 400).
    pub fn read(&self, bytes: &Bytes) -> Result<crate::contract::wire::WireExport, WireError> {
        read_export(
            bytes,
            self.keep_raw && !self.discard,
            &self.policy_keys.get(),
        )
    }

    /// Logs one export request (`bytes` is its protobuf encoding, `export` what [`Intake::read`]
    /// made of it) and queues it for the pipeline. `Ok` means it is durable: it will be a row
    /// even after a crash.
    pub async fn submit(
        &self,
        bytes: Bytes,
        export: crate::contract::wire::WireExport,
        transport: Transport,
    ) -> Result<(), Refusal> {
        let spans = export.spans.len() as u64;
        if self.discard {
            self.metrics.spans_received(transport.as_str(), spans);
            return Ok(());
        }
        // A sink that cannot write would pile rows up in memory: refuse until it recovers. (The
        // log's own trouble shows on the append itself, which is also how its recovery shows.)
        if let Some(problem) = self.storage_problem() {
            return Err(Refusal::Storage(problem));
        }
        let Some(permit) = self.in_flight.permit(bytes.len() as u64) else {
            return Err(Refusal::Busy);
        };
        let (done, accepted) = oneshot::channel();
        // Split here, on the receivers' threads, so the log stage stays a thin serial step.
        let parts = partition(export, &bytes, self.shards);
        let message = LogMessage::Append(Append {
            bytes,
            parts,
            transport,
            permit,
            done,
        });
        if let Err(error) = self.log.try_send(message) {
            return Err(match error {
                mpsc::error::TrySendError::Full(_) => Refusal::Busy,
                mpsc::error::TrySendError::Closed(_) => Refusal::Closed,
            });
        }
        accepted.await.map_err(|_| Refusal::Closed)??;
        self.metrics.spans_received(transport.as_str(), spans);
        Ok(())
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

//! The pipeline's side of the receivers: each export goes to the log stage with its share of
//! the in-flight budget, and is acknowledged once it is durable.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::{partition, Append, InFlight, LogMessage, MemoryLimit, SpanBuffers};
use crate::contract::wire::{read_export_into, WireError, WireExport};
use crate::contract::SharedAttributeKeys;
use crate::receivers::{Refusal, TracesConsumer, Transport};
use crate::telemetry::{Health, Metrics};

/// The receivers' way into the pipeline: answers only once an export is durably in the
/// write-ahead log and queued for the shards. When memory, the log or a sink cannot take more,
/// the answer is a retryable refusal.
#[derive(Clone)]
pub struct Intake {
    log: mpsc::Sender<LogMessage>,
    in_flight: Arc<InFlight>,
    memory: Arc<MemoryLimit>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    shards: usize,
    /// Spans are forwarded downstream: keep where each lies in the export's bytes.
    keep_raw: bool,
    /// Attribute keys the envelope policies match on, captured as spans are read.
    policy_keys: Arc<SharedAttributeKeys>,
    /// Emptied span vectors the shards give back.
    buffers: Arc<SpanBuffers>,
}

impl Intake {
    pub fn new(
        log: mpsc::Sender<LogMessage>,
        in_flight: Arc<InFlight>,
        memory: Arc<MemoryLimit>,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
        shards: usize,
    ) -> Intake {
        Intake {
            log,
            in_flight,
            memory,
            metrics,
            health,
            shards,
            keep_raw: false,
            policy_keys: Arc::default(),
            buffers: Arc::default(),
        }
    }

    /// The attribute keys of the policies in use (replaced on reload).
    pub fn policy_keys(mut self, keys: Arc<SharedAttributeKeys>) -> Intake {
        self.policy_keys = keys;
        self
    }

    /// Reads exports into the buffers the shards give back.
    pub fn span_buffers(mut self, buffers: Arc<SpanBuffers>) -> Intake {
        self.buffers = buffers;
        self
    }

    /// Spans will be forwarded: parts carry their bytes.
    pub fn forwarding(mut self, on: bool) -> Intake {
        self.keep_raw = on;
        self
    }

    /// A sink that cannot write, or an object store output whose uploads are so far behind
    /// that the files waiting for them are over their budget.
    fn storage_problem(&self) -> Option<String> {
        [
            super::PARQUET_COMPONENT,
            crate::sinks::parquet::remote::BACKLOG_COMPONENT,
        ]
        .into_iter()
        .find_map(|component| self.health.problem(component))
    }
}

impl TracesConsumer for Intake {
    /// The memory bound is already reached, or a sink cannot write.
    fn refuse_early(&self) -> Option<Refusal> {
        if let Some(problem) = self.storage_problem() {
            return Some(Refusal::Storage(problem));
        }
        if !self.memory.admits(0) {
            return Some(Refusal::MemoryLimit);
        }
        self.in_flight.is_full().then_some(Refusal::Busy)
    }

    fn read(&self, bytes: &Bytes) -> Result<WireExport, WireError> {
        read_export_into(
            bytes,
            self.keep_raw,
            &self.policy_keys.get(),
            self.buffers.take(),
        )
    }

    /// Logs the export and queues it for the shards. `Ok` means it is durable: it will be a
    /// row even after a crash.
    async fn consume(
        &self,
        bytes: Bytes,
        export: WireExport,
        transport: Transport,
    ) -> Result<(), Refusal> {
        let spans = export.spans.len() as u64;
        // A sink that cannot write would pile rows up in memory: refuse until it recovers. (The
        // log's own trouble shows on the append itself, which is also how its recovery shows.)
        if let Some(problem) = self.storage_problem() {
            return Err(Refusal::Storage(problem));
        }
        if !self.memory.admits(bytes.len() as u64) {
            return Err(Refusal::MemoryLimit);
        }
        // The export's share of the budget travels with it and is given back when the last
        // part is dropped.
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

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

//! The log stage of `serve`: receivers → write-ahead log → pipeline shards.
//!
//! One thread owns the [`WalWriter`]. It takes every append waiting in its queue, writes them as
//! one batch with one fsync (group commit), hands each request's parts to their shards in log
//! order and only then answers the receivers. A failed append answers every export of the batch
//! with a retryable refusal; the next batch tries again, which is how a recovered disk is
//! noticed. On every tick it deletes the segments that the [`Watermark`] says no shard needs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::{PipelineMessage, Watermark};
use crate::receivers::{Refusal, Transport};
use crate::telemetry::{Health, Metrics};
use crate::wal::WalWriter;

pub const WAL_COMPONENT: &str = "wal";
/// Appends written as one batch at most; more wait for the next fsync.
const MAX_BATCH: usize = 1024;
const MAX_BATCH_BYTES: usize = 32 * 1024 * 1024;

/// Bytes of accepted requests not yet taken by the pipeline: the memory bound under overload.
#[derive(Debug)]
pub struct InFlight {
    used: AtomicU64,
    limit: u64,
}

impl InFlight {
    pub fn new(limit: u64) -> Arc<InFlight> {
        Arc::new(InFlight {
            used: AtomicU64::new(0),
            limit,
        })
    }

    /// Reserves `bytes`, or refuses when that would pass the limit.
    pub fn try_acquire(&self, bytes: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|total| *total <= self.limit)
            })
            .is_ok()
    }

    pub fn release(&self, bytes: u64) {
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(bytes))
            });
    }

    /// No request of any size fits any more.
    pub fn is_full(&self) -> bool {
        self.used() >= self.limit
    }

    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// Reserves `bytes` as a [`Permit`] that gives them back when dropped, or refuses.
    pub fn permit(self: &Arc<Self>, bytes: u64) -> Option<Permit> {
        self.try_acquire(bytes).then(|| Permit {
            in_flight: Arc::clone(self),
            bytes,
        })
    }
}

/// A share of the in-flight budget that travels with an export through the pipeline and is
/// given back when the last part of the export has been ingested (or refused): whoever drops
/// it releases it, so no stage has to remember to.
#[derive(Debug)]
pub struct Permit {
    in_flight: Arc<InFlight>,
    bytes: u64,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.in_flight.release(self.bytes);
    }
}

pub enum LogMessage {
    Append(Append),
    /// Time for an `interval` fsync and for deleting segments no shard needs.
    Tick,
}

/// One export to log: its protobuf bytes, and its decoded spans split by shard.
pub struct Append {
    pub bytes: Bytes,
    pub parts: Vec<(usize, super::ExportPart)>,
    pub transport: Transport,
    pub permit: Permit,
    pub done: oneshot::Sender<Result<(), Refusal>>,
}

/// Runs the log stage until every receiver is gone; returns the writer for a final cleanup.
/// Without a writer (`--wal off`) requests are numbered and passed on unlogged.
pub fn run(
    mut writer: Option<WalWriter>,
    mut messages: mpsc::Receiver<LogMessage>,
    shards: Vec<mpsc::Sender<PipelineMessage>>,
    watermark: Arc<Watermark>,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
) -> Option<WalWriter> {
    let mut batch: Vec<Append> = Vec::with_capacity(MAX_BATCH);
    let mut unlogged = Unlogged { next_lsn: 1 };
    while let Some(first) = messages.blocking_recv() {
        let mut batch_bytes = 0;
        let mut next = Some(first);
        while let Some(message) = next.take() {
            match message {
                LogMessage::Append(append) => {
                    batch_bytes += append.bytes.len();
                    batch.push(append);
                }
                LogMessage::Tick => {
                    if let Some(writer) = &mut writer {
                        let below = watermark.release_below(writer.next_lsn());
                        writer.release_below(below);
                    }
                    let synced = writer
                        .as_mut()
                        .map_or(Ok(()), |w| w.sync_if_due(Instant::now()));
                    if let Err(e) = synced {
                        tracing::error!(error = %e, "write-ahead log fsync failed");
                        health.set_problem(WAL_COMPONENT, e.to_string());
                    }
                }
            }
            if batch.len() < MAX_BATCH && batch_bytes < MAX_BATCH_BYTES {
                next = messages.try_recv().ok();
            }
        }
        if batch.is_empty() {
            continue;
        }
        let payloads: Vec<&[u8]> = batch.iter().map(|p| p.bytes.as_ref()).collect();
        let appended = append(&mut writer, &mut unlogged, &payloads);
        drop(payloads);
        match appended {
            Ok(first_lsn) => {
                health.clear_problem(WAL_COMPONENT);
                for (i, append) in batch.drain(..).enumerate() {
                    let lsn = first_lsn + i as u64;
                    let permit = Arc::new(append.permit);
                    let mut answer = Ok(());
                    for (shard, part) in append.parts {
                        watermark.dispatched(shard, lsn);
                        let message = PipelineMessage::Export {
                            part,
                            lsn,
                            permit: Arc::clone(&permit),
                        };
                        // Durable now; shards only go away at shutdown, after the receivers.
                        if shards[shard % shards.len()].blocking_send(message).is_err() {
                            answer = Err(Refusal::Closed);
                        }
                    }
                    let _ = append.done.send(answer);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "write-ahead log append failed; refusing exports");
                health.set_problem(WAL_COMPONENT, e.to_string());
                metrics.sink_errors(1);
                let refusal = Refusal::Storage(e.to_string());
                for append in batch.drain(..) {
                    let _ = append.done.send(Err(refusal.clone()));
                }
            }
        }
    }
    writer
}

/// LSNs for a run without a log: the pipeline's bookkeeping stays the same.
struct Unlogged {
    next_lsn: u64,
}

fn append(
    writer: &mut Option<WalWriter>,
    unlogged: &mut Unlogged,
    payloads: &[&[u8]],
) -> Result<u64, crate::wal::WalError> {
    match writer {
        Some(writer) => writer.append(payloads),
        None => {
            let first = unlogged.next_lsn;
            unlogged.next_lsn += payloads.len() as u64;
            Ok(first)
        }
    }
}

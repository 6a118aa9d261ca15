//! `serve`'s pipeline: the write-ahead-log stage, the shards that assemble and evaluate
//! requests with the core's [`Engine`], and the watermark that releases the log.

mod buffers;
pub mod config;
mod intake;
mod memory;
mod partition;
mod shard;
mod summaries;
mod wal_stage;
mod watermark;

pub use buffers::SpanBuffers;
pub use config::{ProcessorsConfig, RetrySpendConfig};
pub use intake::Intake;
pub use memory::MemoryLimit;
pub use partition::{partition, regroup, shard_of, ExportPart, RawSpan, RawSpans};
pub use shard::{Shard, ShardSummary, PARQUET_COMPONENT};
pub use summaries::SummaryStore;
pub use wal_stage::{run as run_wal_stage, Append, InFlight, LogMessage, Permit, WAL_COMPONENT};
pub use watermark::Watermark;

use crate::engine::Engine;

/// What the log stage and the clock send a pipeline shard.
#[derive(Debug)]
pub enum PipelineMessage {
    /// This shard's part of an export request, durable in the write-ahead log as record `lsn`.
    /// The export's share of the in-flight budget is given back once every part is ingested.
    Export {
        part: ExportPart,
        lsn: u64,
        permit: std::sync::Arc<Permit>,
    },
    /// Answered once everything sent before it has been ingested and every ready request
    /// evaluated: lets tests and tools wait for the pipeline without guessing.
    Barrier(tokio::sync::oneshot::Sender<()>),
    /// New pricing snapshots and policies (SIGHUP): requests evaluated from now on use them.
    Reload(Box<Engine>),
    /// Holds the worker until the sender side is used or dropped: a stalled sink on demand,
    /// for overload tests and diagnostics.
    Pause(tokio::sync::oneshot::Receiver<()>),
}

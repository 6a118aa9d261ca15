//! The one place that wires decoded OTLP → grouping → rules → rows.
//!
//! `replay` and `serve` both go through [`Engine`], so a request gives the same rows whichever
//! way its spans arrived.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

mod log;
mod shard;
mod watermark;
mod worker;

pub use log::{run as run_log, Append, InFlight, LogMessage, Permit, WAL_COMPONENT};
pub use shard::{partition, regroup, shard_of, ExportPart, RawSpan, RawSpans};
pub use watermark::Watermark;
pub use worker::{Worker, WorkerSummary, PARQUET_COMPONENT};

use crate::assemble::{Grouper, Offer, Request};
use crate::contract::{service_name, SpanFacts};
use crate::pricing::PricingBook;
use crate::record::AttemptRow;
use crate::rules::{evaluate, RulesConfig};

/// Pricing and policy: everything the rules need besides the spans.
#[derive(Debug, Clone)]
pub struct Engine {
    pub book: PricingBook,
    pub rules: RulesConfig,
}

/// What one export request contained.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IngestStats {
    pub spans: u64,
    pub attempts: u64,
    pub logical: u64,
    pub duplicates: u64,
    pub passthrough: u64,
}

impl IngestStats {
    pub fn add(&mut self, other: IngestStats) {
        self.spans += other.spans;
        self.attempts += other.attempts;
        self.logical += other.logical;
        self.duplicates += other.duplicates;
        self.passthrough += other.passthrough;
    }
}

/// Every span of an export request with its resource's service name, read into facts.
pub fn span_facts(request: &ExportTraceServiceRequest) -> impl Iterator<Item = SpanFacts> + '_ {
    request.resource_spans.iter().flat_map(|resource_spans| {
        let service = service_name(
            resource_spans
                .resource
                .as_ref()
                .map_or(&[][..], |r| r.attributes.as_slice()),
        );
        resource_spans
            .scope_spans
            .iter()
            .flat_map(|scope| scope.spans.iter())
            .map(move |span| SpanFacts::from_span(span, &service))
    })
}

/// Offers every span of `request` to `grouper`, calling `on_attempt` with each new attempt's
/// group so the caller can track timing.
pub fn ingest(
    grouper: &mut Grouper,
    request: &ExportTraceServiceRequest,
    mut on_attempt: impl FnMut(&crate::assemble::GroupKey),
) -> IngestStats {
    let mut stats = IngestStats::default();
    for facts in span_facts(request) {
        stats.spans += 1;
        match grouper.offer(facts) {
            Offer::Attempt(key) => {
                stats.attempts += 1;
                on_attempt(&key);
            }
            Offer::Logical => stats.logical += 1,
            Offer::Duplicate => stats.duplicates += 1,
            Offer::Passthrough => stats.passthrough += 1,
        }
    }
    stats
}

impl Engine {
    pub fn evaluate(&self, request: &Request) -> Vec<AttemptRow> {
        evaluate(request, &self.book, &self.rules)
    }
}

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
    /// Time to evaluate groups whose wait has passed and to rotate files that are old enough.
    Tick,
    /// Answered once everything sent before it has been ingested and every ready request
    /// evaluated: lets tests and tools wait for the pipeline without guessing.
    Barrier(tokio::sync::oneshot::Sender<()>),
    /// New pricing snapshots (SIGHUP): requests evaluated from now on use them.
    ReloadPricing(Box<PricingBook>),
    /// Holds the worker until the sender side is used or dropped: a stalled sink on demand,
    /// for overload tests and diagnostics.
    Pause(tokio::sync::oneshot::Receiver<()>),
}

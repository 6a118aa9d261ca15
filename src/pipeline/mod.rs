//! The one place that wires decoded OTLP → grouping → rules → rows.
//!
//! `replay` and `serve` both go through [`Engine`], so a request gives the same rows whichever
//! way its spans arrived.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

pub mod config;
mod intake;
mod log;
mod shard;
mod summaries;
mod watermark;
mod worker;

pub use config::{ProcessorsConfig, RetrySpendConfig};
pub use intake::Intake;
pub use log::{run as run_log, Append, InFlight, LogMessage, Permit, WAL_COMPONENT};
pub use shard::{partition, regroup, shard_of, ExportPart, RawSpan, RawSpans};
pub use summaries::SummaryStore;
pub use watermark::Watermark;
pub use worker::{Worker, WorkerSummary, PARQUET_COMPONENT};

use crate::assemble::{Grouper, Offer, Request};
use std::sync::Arc;

use crate::contract::{scope_name, service_name, AttributeKeys, SpanFacts};
use crate::policy::PolicySet;
use crate::pricing::PricingBook;
use crate::record::AttemptRow;
use crate::rules::{evaluate_with, RulesConfig};

/// Pricing and policy: everything the rules need besides the spans.
#[derive(Debug, Clone, Default)]
pub struct Engine {
    pub book: PricingBook,
    pub rules: RulesConfig,
    /// Envelopes for requests whose spans carry none. Spans must be read with its
    /// [`PolicySet::attribute_keys`] ([`span_facts_with`], [`ingest_with`]) for policies with
    /// `match.attributes` to match.
    pub policies: PolicySet,
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

/// Spans read for no policy keep no attributes.
static NO_KEYS: AttributeKeys = AttributeKeys::NONE;

/// Every span of an export request with its resource's service name, read into facts.
pub fn span_facts(request: &ExportTraceServiceRequest) -> impl Iterator<Item = SpanFacts> + '_ {
    span_facts_with(request, &NO_KEYS)
}

/// [`span_facts`], keeping the values of `keys` for envelope policies.
pub fn span_facts_with<'a>(
    request: &'a ExportTraceServiceRequest,
    keys: &'a AttributeKeys,
) -> impl Iterator<Item = SpanFacts> + 'a {
    request
        .resource_spans
        .iter()
        .flat_map(move |resource_spans| {
            let resource = resource_spans
                .resource
                .as_ref()
                .map_or(&[][..], |r| r.attributes.as_slice());
            let service = service_name(resource);
            resource_spans
                .scope_spans
                .iter()
                .flat_map(move |scope_spans| {
                    let scope = scope_name(scope_spans.scope.as_ref().map(|s| s.name.as_str()));
                    let service = Arc::clone(&service);
                    scope_spans.spans.iter().map(move |span| {
                        let mut facts = SpanFacts::from_span_with(span, &service, resource, keys);
                        facts.scope = scope.clone();
                        facts
                    })
                })
        })
}

/// Offers every span of `request` to `grouper`.
pub fn ingest(grouper: &mut Grouper, request: &ExportTraceServiceRequest) -> IngestStats {
    ingest_with(grouper, request, &NO_KEYS)
}

/// [`ingest`], keeping the values of `keys` for envelope policies.
pub fn ingest_with(
    grouper: &mut Grouper,
    request: &ExportTraceServiceRequest,
    keys: &AttributeKeys,
) -> IngestStats {
    let mut stats = IngestStats::default();
    for facts in span_facts_with(request, keys) {
        stats.spans += 1;
        match grouper.offer(facts) {
            Offer::Attempt(_) | Offer::Plain => stats.attempts += 1,
            Offer::Logical => stats.logical += 1,
            Offer::Duplicate => stats.duplicates += 1,
            Offer::Passthrough | Offer::HeldTry => stats.passthrough += 1,
        }
    }
    stats
}

impl Engine {
    pub fn evaluate(&self, request: &Request) -> Vec<AttemptRow> {
        evaluate_with(request, &self.book, &self.policies, &self.rules)
    }

    /// [`Engine::evaluate`] appending to `rows`.
    pub fn evaluate_into(&self, request: &Request, rows: &mut Vec<AttemptRow>) {
        crate::rules::evaluate_into(request, &self.book, &self.policies, &self.rules, rows);
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
    /// Answered once everything sent before it has been ingested and every ready request
    /// evaluated: lets tests and tools wait for the pipeline without guessing.
    Barrier(tokio::sync::oneshot::Sender<()>),
    /// New pricing snapshots and policies (SIGHUP): requests evaluated from now on use them.
    Reload(Box<Engine>),
    /// Holds the worker until the sender side is used or dropped: a stalled sink on demand,
    /// for overload tests and diagnostics.
    Pause(tokio::sync::oneshot::Receiver<()>),
}

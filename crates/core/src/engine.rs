//! The one place that wires decoded OTLP → grouping → rules → rows.
//!
//! `replay`, `serve` and the decision service all go through [`Engine`], so a request gives the
//! same rows whichever way its spans arrived.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use crate::assemble::{Grouper, Offer, Request};
pub use crate::contract::{span_facts, span_facts_with};
use crate::contract::{AttributeKeys, NO_KEYS};
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

//! Pricing, rules and policies: what turns an assembled request into rows. The
//! [`Processor`](crate::processor::Processor) runs it for every driver.

use crate::assemble::Request;
pub use crate::contract::{span_facts, span_facts_with};
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
    /// [`PolicySet::attribute_keys`] ([`span_facts_with`]) for policies with
    /// `match.attributes` to match.
    pub policies: PolicySet,
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

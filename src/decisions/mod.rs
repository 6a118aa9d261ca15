//! The decision service (SPEC §7): before a retry or fallback, an SDK or gateway asks whether
//! the envelope allows it, and gets a structured answer instead of quietly escalating cost.
//!
//! A question is read into the very [`Request`](crate::assemble::Request) the audit builds when
//! the same attempts arrive later as spans: attempts 0..k−1 as already evaluated context, the
//! proposed attempt as attempt k, the envelope on attempt 0, every span dated `at`. It is judged
//! by [`Engine::evaluate`], the function `serve` and `replay` audit with, and the answer is the
//! row it gives attempt k. So what the service allowed is what the audit writes as
//! `within_envelope`.
//!
//! Served on the receivers' listeners, with their TLS and bearer tokens: gRPC [`grpc`] and HTTP
//! JSON [`http`]. A decision is evaluated on the task that received it, never through the trace
//! pipeline's queues, so a burst of exports cannot hold it up.

pub mod config;
pub mod grpc;
pub mod http;
mod json;
mod read;

pub use read::{read, Malformed, Question};

use std::sync::{Arc, RwLock};

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;

use crate::engine::Engine;
use crate::record::{envelope_source, AttemptRow, Decision};
use crate::telemetry::Metrics;
pub use config::DecisionsConfig;

/// The generated messages and client of `proto/retry_spend/v1/decisions.proto`.
pub mod proto {
    tonic::include_proto!("retry_spend.v1");
}

use proto::{DecideRequest, DecideResponse};

/// The gRPC service name, as `proto/retry_spend/v1/decisions.proto` declares it.
pub const GRPC_SERVICE: &str = "retry_spend.v1.RetryDecisions";
/// The gRPC method path of `Decide`.
pub const DECIDE_PATH: &str = "/retry_spend.v1.RetryDecisions/Decide";
/// The HTTP route: the same messages in the proto3 JSON mapping.
pub const HTTP_PATH: &str = "/v1/retry-decision";

/// Why a question got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecideError {
    /// The caller's fault, naming the field: gRPC `INVALID_ARGUMENT`, HTTP 400.
    #[error(transparent)]
    Malformed(#[from] Malformed),
    /// The rules gave no row for the proposed attempt. Never expected; answered as an internal
    /// error rather than a guess.
    #[error("the rules gave no decision for the proposed attempt")]
    NoDecision,
}

/// The engine `serve` audits with, shared with the decision service and replaced on reload, so
/// a decision always uses the snapshots and policies the audit of the same attempts will.
#[derive(Debug, Default)]
pub struct SharedEngine(RwLock<Arc<Engine>>);

impl SharedEngine {
    pub fn new(engine: Engine) -> Arc<SharedEngine> {
        Arc::new(SharedEngine(RwLock::new(Arc::new(engine))))
    }

    pub fn get(&self) -> Arc<Engine> {
        // A poisoned lock still holds the last engine set, which is valid.
        Arc::clone(&self.0.read().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn set(&self, engine: Engine) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(engine);
    }
}

/// Answers questions with the shared engine and counts the answers.
#[derive(Debug, Clone)]
pub struct Decider {
    engine: Arc<SharedEngine>,
    allow_unaudited: bool,
    metrics: Arc<Metrics>,
}

impl Decider {
    pub fn new(engine: Arc<SharedEngine>, config: &DecisionsConfig, metrics: Arc<Metrics>) -> Self {
        Decider {
            engine,
            allow_unaudited: config.allow_unaudited,
            metrics,
        }
    }

    /// Answers one question as of now (the default `at`).
    pub fn decide(&self, question: DecideRequest) -> Result<DecideResponse, DecideError> {
        let engine = self.engine.get();
        let (row, question) = judge(&engine, question, Utc::now())?;
        let allow = allowed(row.decision, self.allow_unaudited);
        self.metrics.decision(row.decision, allow);
        Ok(respond(row, &question, allow))
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// The row the audit would write for the proposed attempt, and what the question said about
/// itself. Pure: `now` is the time of a question without `at`.
pub fn judge(
    engine: &Engine,
    question: DecideRequest,
    now: DateTime<Utc>,
) -> Result<(AttemptRow, Question), DecideError> {
    let question = read(question, now)?;
    let row = engine
        .evaluate(question.request())
        .pop()
        .ok_or(DecideError::NoDecision)?;
    Ok((row, question))
}

/// Whether the caller may go ahead: only `within_envelope`, and `unaudited` when the collector
/// is configured to fail open.
pub fn allowed(decision: Decision, allow_unaudited: bool) -> bool {
    match decision {
        Decision::WithinEnvelope => true,
        Decision::Unaudited => allow_unaudited,
        _ => false,
    }
}

/// The answer for `row`, the proposed attempt's row.
pub fn respond(row: AttemptRow, question: &Question, allow: bool) -> DecideResponse {
    let envelope_source = if question.envelope_in_request() {
        // The request's envelope is what the row calls the spans' own.
        row.envelope_source
            .map(|_| envelope_source::REQUEST.to_owned())
    } else {
        row.envelope_source.as_deref().map(str::to_owned)
    };
    DecideResponse {
        allow,
        decision: row.decision.as_str().to_owned(),
        violations: row
            .violations
            .iter()
            .map(|v| v.as_str().to_owned())
            .collect(),
        unaudited_reason: row.unaudited_reason.map(|r| r.as_str().to_owned()),
        attempt_index: row.attempt_index,
        estimated_incremental_usd: row.estimated_incremental_usd.map(usd),
        cumulative_incremental_usd: row.cumulative_incremental_usd.map(usd),
        remaining_envelope_usd: row.remaining_envelope_usd.map(usd),
        pricing_version: row.pricing_version.as_deref().map(str::to_owned),
        pricing_checked_at: row.pricing_checked_at.map(|d| d.to_string()),
        pricing_digest: row.pricing_digest.as_deref().map(str::to_owned),
        envelope_source,
        decision_reason: row.decision_reason,
    }
}

/// Money on the wire: the exact decimal, without the trailing zeros of its scale.
fn usd(value: Decimal) -> String {
    value.normalize().to_string()
}

#[cfg(test)]
mod tests;

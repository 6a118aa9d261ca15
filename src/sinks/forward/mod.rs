//! OTLP forward sink (SPEC §6): every received span goes on to a downstream OTLP gRPC endpoint,
//! attempt spans carrying their evaluation as `retry_spend.*` attributes.
//!
//! [`enrich`] writes those attributes onto a span; [`start`] (or [`OtlpForwardConfig::build`])
//! spawns the task that batches queued
//! spans into export requests and sends them with retries. The forward is best effort by design:
//! the Parquet table is the record finance reads, so a slow or absent downstream must never stall
//! intake. The queue is therefore bounded, and whatever cannot be queued or delivered is counted
//! through a [`ForwardObserver`] instead of being waited on.

mod batch;
pub mod config;
mod enrich;
mod sink;
#[cfg(test)]
mod tests;

pub use config::OtlpForwardConfig;
pub use enrich::{attr, enrich};
pub use sink::{start, ForwardHandle, Forwarder};

/// What happens to forwarded spans, for the collector's own metrics. Called from the forward's
/// task and from [`ForwardHandle::send`], so implementations must be cheap and never block.
pub trait ForwardObserver: Send + Sync + 'static {
    /// The downstream accepted these spans.
    fn sent(&self, spans: u64);
    /// These spans were given up on: a non-retryable error, retries exhausted, rejected by the
    /// downstream, or still unsent at the shutdown deadline.
    fn failed(&self, spans: u64);
    /// These spans never entered the queue: it was full, or the forwarder had shut down.
    fn dropped(&self, spans: u64);
}

/// Observes nothing, for callers without metrics.
impl ForwardObserver for () {
    fn sent(&self, _spans: u64) {}
    fn failed(&self, _spans: u64) {}
    fn dropped(&self, _spans: u64) {}
}

/// Why the forward could not start.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// The config would make a forward that could never send anything; the problems, as
    /// `key: problem`, `; `-separated.
    #[error("invalid forward config: {0}")]
    InvalidConfig(String),
    #[error("forward endpoint {endpoint:?} is not a valid URI (expected e.g. http://host:4317): {source}")]
    Endpoint {
        endpoint: String,
        source: tonic::transport::Error,
    },
    #[error("forward endpoint {0:?}: only http:// is supported; TLS is not built in, so put a TLS-terminating proxy or a local collector in between")]
    UnsupportedScheme(String),
}

//! OTLP forward sink (SPEC §6): every received span goes on to a downstream OTLP gRPC endpoint,
//! attempt spans carrying their evaluation as `retry_spend.*` attributes.
//!
//! [`enrich`] writes those attributes onto a span; [`start`] spawns the task that batches queued
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

use std::time::Duration;

pub use config::OtlpForwardConfig;
pub use enrich::{attr, enrich};
pub use sink::{start, ForwardHandle, Forwarder};

/// How the forward batches, queues and retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardOptions {
    /// Downstream OTLP gRPC endpoint, e.g. `http://otel-collector:4317`; a bare `host:port` means
    /// `http://host:port`.
    pub endpoint: String,
    /// Spans per export request at most.
    pub max_batch_spans: usize,
    /// Encoded (uncompressed) bytes per export request at most, kept below the downstream's
    /// message size limit (4 MiB by default in gRPC servers). A single span larger than this is
    /// sent alone.
    pub max_batch_bytes: usize,
    /// Spans waiting to be sent at most; beyond it new spans are dropped and counted.
    pub queue_capacity_spans: usize,
    /// Deadline of one export call, connecting included.
    pub timeout: Duration,
    /// Retries of one export request after a retryable failure.
    pub max_retries: u32,
    /// Wait before the first retry; it doubles with each retry up to `max_backoff`.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for ForwardOptions {
    fn default() -> Self {
        Self {
            endpoint: String::new(),
            max_batch_spans: 512,
            max_batch_bytes: 1024 * 1024,
            queue_capacity_spans: 100_000,
            timeout: Duration::from_secs(5),
            max_retries: 5,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        }
    }
}

impl ForwardOptions {
    /// Rejects options under which the forward could never send anything.
    pub fn validate(&self) -> Result<(), ForwardError> {
        if self.endpoint.trim().is_empty() {
            return Err(ForwardError::InvalidOptions("endpoint must not be empty"));
        }
        if self.max_batch_spans == 0 {
            return Err(ForwardError::InvalidOptions(
                "max_batch_spans must be at least 1",
            ));
        }
        if self.max_batch_bytes == 0 {
            return Err(ForwardError::InvalidOptions(
                "max_batch_bytes must be at least 1",
            ));
        }
        if self.queue_capacity_spans == 0 {
            return Err(ForwardError::InvalidOptions(
                "queue_capacity_spans must be at least 1",
            ));
        }
        if self.timeout.is_zero() {
            return Err(ForwardError::InvalidOptions("timeout must be above zero"));
        }
        Ok(())
    }
}

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
    #[error("invalid forward options: {0}")]
    InvalidOptions(&'static str),
    #[error("forward endpoint {endpoint:?} is not a valid URI (expected e.g. http://host:4317): {source}")]
    Endpoint {
        endpoint: String,
        source: tonic::transport::Error,
    },
    #[error("forward endpoint {0:?}: only http:// is supported; TLS is not built in, so put a TLS-terminating proxy or a local collector in between")]
    UnsupportedScheme(String),
}

//! `[exporters.otlp_forward]`: the forward's section of the config.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::{start, ForwardError, ForwardHandle, ForwardObserver, Forwarder};
use crate::config_kernel::OTLP_RECEIVE_LIMIT_BYTES;
use crate::config_kernel::{
    deserialize_endpoint, duration, ConfigProblem, Problems, ABOVE_ZERO, MIB,
};

/// `[exporters.otlp_forward]`: sending the enriched spans on to a downstream OTLP gRPC endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OtlpForwardConfig {
    /// Downstream OTLP gRPC endpoint; `None` turns forwarding off. An empty string in the file
    /// also means off, so the shipped file can list the key with its default.
    #[serde(deserialize_with = "deserialize_endpoint")]
    pub endpoint: Option<String>,
    /// Spans per export request at most.
    pub max_batch_spans: usize,
    /// Encoded (uncompressed) bytes per export request at most, kept below the downstream's
    /// message size limit. A single span larger than this is sent alone.
    pub max_batch_bytes: u64,
    /// Spans buffered for forwarding; beyond it new spans are dropped and counted.
    pub queue_capacity_spans: usize,
    /// Deadline of one export call, connecting included.
    #[serde(deserialize_with = "duration::deserialize")]
    pub timeout: Duration,
    /// Retries of one export request after a retryable failure.
    pub max_retries: u32,
    /// Wait before the first retry; it doubles with each retry up to `max_backoff`.
    #[serde(deserialize_with = "duration::deserialize")]
    pub initial_backoff: Duration,
    #[serde(deserialize_with = "duration::deserialize")]
    pub max_backoff: Duration,
}

impl Default for OtlpForwardConfig {
    fn default() -> Self {
        OtlpForwardConfig {
            endpoint: None,
            max_batch_spans: 512,
            max_batch_bytes: MIB,
            queue_capacity_spans: 100_000,
            timeout: Duration::from_secs(5),
            max_retries: 5,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        }
    }
}

impl OtlpForwardConfig {
    /// Starts the forward (see [`start`]), or nothing when no endpoint is configured.
    pub fn build(
        &self,
        observer: Arc<dyn ForwardObserver>,
    ) -> Result<Option<(ForwardHandle, Forwarder)>, ForwardError> {
        match &self.endpoint {
            None => Ok(None),
            Some(_) => start(self, observer).map(Some),
        }
    }

    pub fn validate(&self) -> Result<(), Vec<ConfigProblem>> {
        let mut problems = Problems::default();
        if let Some(endpoint) = &self.endpoint {
            problems.check(
                endpoint.to_ascii_lowercase().starts_with("http://"),
                "exporters.otlp_forward.endpoint",
                "must start with http:// (TLS to the downstream is not built in: put a TLS-terminating proxy or a local collector in between; leave it empty to turn forwarding off)",
            );
        }
        problems.check(
            self.max_batch_spans > 0,
            "exporters.otlp_forward.max_batch_spans",
            ABOVE_ZERO,
        );
        problems.check(
            self.max_batch_bytes > 0,
            "exporters.otlp_forward.max_batch_bytes",
            ABOVE_ZERO,
        );
        problems.check(
            self.max_batch_bytes < OTLP_RECEIVE_LIMIT_BYTES,
            "exporters.otlp_forward.max_batch_bytes",
            "must be below 4 MiB (the common OTLP receive limit)",
        );
        problems.check(
            self.queue_capacity_spans > 0,
            "exporters.otlp_forward.queue_capacity_spans",
            ABOVE_ZERO,
        );
        problems.check(
            !self.timeout.is_zero(),
            "exporters.otlp_forward.timeout",
            ABOVE_ZERO,
        );
        problems.check(
            self.max_backoff >= self.initial_backoff,
            "exporters.otlp_forward.max_backoff",
            "must not be below exporters.otlp_forward.initial_backoff",
        );
        problems.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::{invalid, parse, parse_err};
    use crate::config::Config;

    #[test]
    fn forward_endpoint_must_be_an_http_url() {
        let msg = parse_err("[exporters.otlp_forward]\nendpoint = \"https://collector:4317\"\n");
        assert!(msg.contains("must start with http://"), "{msg}");
        let msg = parse_err("[exporters.otlp_forward]\nendpoint = \"collector:4317\"\n");
        assert!(
            msg.starts_with("test.toml: exporters.otlp_forward.endpoint: must start with http://"),
            "{msg}"
        );
        for ok in ["http://collector:4317", "HTTP://collector:4317"] {
            let c = parse(&format!("[exporters.otlp_forward]\nendpoint = {ok:?}\n")).unwrap();
            assert_eq!(c.exporters.otlp_forward.endpoint.as_deref(), Some(ok));
        }
    }

    #[test]
    fn empty_forward_endpoint_in_file_is_off() {
        let c = parse("[exporters.otlp_forward]\nendpoint = \"\"\n").unwrap();
        assert_eq!(c.exporters.otlp_forward.endpoint, None);
    }

    #[test]
    fn forward_batch_must_stay_below_otlp_receive_limit() {
        let msg = invalid(|c| c.exporters.otlp_forward.max_batch_bytes = 4 * MIB);
        assert!(
            msg.contains(
                "exporters.otlp_forward.max_batch_bytes: \
                 must be below 4 MiB (the common OTLP receive limit)"
            ),
            "{msg}"
        );
        let mut c = Config::default();
        c.exporters.otlp_forward.max_batch_bytes = 4 * MIB - 1;
        c.validate("test.toml").unwrap();
    }

    #[test]
    fn forward_bounds_must_be_above_zero() {
        let msg = invalid(|c| c.exporters.otlp_forward.max_batch_spans = 0);
        assert!(msg.contains("exporters.otlp_forward.max_batch_spans: must be above zero"));
        let msg = invalid(|c| c.exporters.otlp_forward.max_batch_bytes = 0);
        assert!(msg.contains("exporters.otlp_forward.max_batch_bytes: must be above zero"));
        let msg = invalid(|c| c.exporters.otlp_forward.queue_capacity_spans = 0);
        assert!(msg.contains("exporters.otlp_forward.queue_capacity_spans: must be above zero"));
        let msg = invalid(|c| c.exporters.otlp_forward.timeout = Duration::ZERO);
        assert!(msg.contains("exporters.otlp_forward.timeout: must be above zero"));
    }

    #[test]
    fn max_backoff_must_not_be_below_initial_backoff() {
        let msg = invalid(|c| {
            c.exporters.otlp_forward.initial_backoff = Duration::from_secs(2);
            c.exporters.otlp_forward.max_backoff = Duration::from_secs(1);
        });
        assert!(
            msg.contains("exporters.otlp_forward.max_backoff: must not be below"),
            "{msg}"
        );
        let mut c = Config::default();
        c.exporters.otlp_forward.max_backoff = c.exporters.otlp_forward.initial_backoff;
        c.validate("test.toml").unwrap();
    }
}

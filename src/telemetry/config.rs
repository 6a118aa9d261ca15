//! `[telemetry]`: the collector's own metrics endpoint.

use std::net::SocketAddr;

use serde::Deserialize;

use super::DEFAULT_LABEL_VALUES;
use crate::config_kernel::{ConfigProblem, Problems, ABOVE_ZERO};

/// `[telemetry]`: the collector's own metrics.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Serves Prometheus text at `/metrics` and liveness at `/healthz`.
    pub metrics_addr: SocketAddr,
    /// Distinct `task_type` and `billing_group` label values each; the rest count as `_other`.
    pub max_label_values: usize,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            metrics_addr: SocketAddr::from(([127, 0, 0, 1], 9464)),
            max_label_values: DEFAULT_LABEL_VALUES,
        }
    }
}

impl TelemetryConfig {
    pub fn validate(&self) -> Result<(), Vec<ConfigProblem>> {
        let mut problems = Problems::default();
        problems.check(
            self.max_label_values > 0,
            "telemetry.max_label_values",
            ABOVE_ZERO,
        );
        problems.finish()
    }
}

//! Metrics and health (SPEC §6, "Alerting"): the counters behind `config/alerts.yml`, served as
//! Prometheus text on `GET /metrics`, and `GET /healthz`.
//!
//! [`names`] lists every metric family, [`Metrics`] holds the values, [`Health`] the problems
//! components report, and [`router`] / [`serve`] put both on HTTP.

pub mod config;
mod exposition;
mod health;
mod http;
pub mod names;
mod registry;
#[cfg(test)]
mod tests;

pub use config::TelemetryConfig;
pub use health::Health;
pub use http::{router, serve, EXPOSITION_CONTENT_TYPE, HEALTH_PATH, METRICS_PATH};
pub use registry::{Metrics, DEFAULT_LABEL_VALUES, OTHER_LABEL_VALUE};

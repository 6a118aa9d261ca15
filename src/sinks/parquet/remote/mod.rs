//! Object storage output: files are written to local staging as for a local output, then
//! uploaded whole to `<prefix>/attempts/date=…/`, and recorded for crash recovery.

pub mod journal;
pub mod store;
#[cfg(test)]
mod tests;
pub mod upload;

pub use super::config::MIN_PART_BYTES;
pub use journal::JOURNAL_FILE;
pub use store::{build as build_store, StoreError};
pub use upload::{
    LogObserver, Staged, StagedCounts, UploadError, UploadObserver, UploadRetries, Uploader,
};

/// Directory under the write-ahead log directory where Parquet files are written before upload.
pub const STAGING_DIR: &str = "staging";

/// `/healthz` component while uploads fail (exports are still accepted).
pub const UPLOAD_COMPONENT: &str = "object_store";
/// `/healthz` component while the files waiting for upload are over their budget: the receivers
/// refuse exports until uploads catch up.
pub const BACKLOG_COMPONENT: &str = "object_store_backlog";

/// Upload trouble as `/healthz` problems, and upload failures in the sink error counter.
pub struct HealthObserver {
    pub health: std::sync::Arc<crate::telemetry::Health>,
    pub metrics: std::sync::Arc<crate::telemetry::Metrics>,
}

impl UploadObserver for HealthObserver {
    fn uploaded(&self, url: &str, rows: u64, bytes: u64) {
        tracing::debug!(url, rows, bytes, "uploaded");
        if self.health.problem(UPLOAD_COMPONENT).is_some() {
            tracing::info!("object store uploads succeed again");
            self.health.clear_problem(UPLOAD_COMPONENT);
        }
    }

    fn failed(&self, problem: &str) {
        tracing::warn!("{problem}");
        self.metrics.sink_errors(1);
        self.health
            .set_problem(UPLOAD_COMPONENT, problem.to_owned());
    }

    fn backlog(&self, full: bool, problem: &str) {
        if full {
            tracing::error!("{problem}; refusing exports until uploads catch up");
            self.health
                .set_problem(BACKLOG_COMPONENT, problem.to_owned());
        } else {
            tracing::info!(
                "files waiting for upload are back under their budget; accepting exports"
            );
            self.health.clear_problem(BACKLOG_COMPONENT);
        }
    }
}

//! `[exporters.parquet]`: the `attempts` table files, when to rotate them, and the object store
//! they may be uploaded to.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::instance;
use super::Output;
use crate::config_kernel::{
    deserialize_endpoint, duration, ConfigProblem, Problems, ABOVE_ZERO, MIB,
};

/// S3's smallest part (but the last).
pub const MIN_PART_BYTES: usize = 5 * 1024 * 1024;

/// `[exporters.parquet]`: the `attempts` table files and when to rotate them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ParquetExporterConfig {
    /// `false` (`--sink none`) acknowledges and discards every export right after decoding it:
    /// a benchmark baseline, never a production setting.
    pub enabled: bool,
    /// Root of everything the collector keeps on disk; or an object store URL
    /// (`s3://bucket/prefix`, `gs://…`, `az://…`), with local state under `wal.dir`.
    pub output_dir: PathBuf,
    /// Rows per file; a file is completed as soon as it holds this many.
    pub max_rows_per_file: usize,
    /// Approximate bytes per file, judged by the writer's estimate of what it has encoded so far.
    pub max_bytes_per_file: u64,
    /// How long a file may stay open, so quiet partitions still reach finance promptly.
    #[serde(deserialize_with = "duration::deserialize")]
    pub max_file_age: Duration,
    /// Rows per row group: the unit a reader skips by statistics and the writer holds in memory.
    pub row_group_rows: usize,
    /// Part of every file name, so that collectors can share one output. Empty: for an object
    /// store, a random id generated once and kept in `<wal dir>/instance-id`; for a directory,
    /// the host name and process id.
    pub instance_id: String,
    pub object_store: ObjectStoreConfig,
}

impl Default for ParquetExporterConfig {
    fn default() -> Self {
        ParquetExporterConfig {
            enabled: true,
            output_dir: PathBuf::from("data"),
            max_rows_per_file: 262_144,
            max_bytes_per_file: 128 * MIB,
            max_file_age: Duration::from_secs(60),
            // 16,384 rather than 65,536: the open files' writers held ~12 MiB more at the larger
            // size, which kept the default process over 150 MiB (BENCHMARKS.md).
            row_group_rows: 16_384,
            instance_id: String::new(),
            object_store: ObjectStoreConfig::default(),
        }
    }
}

impl ParquetExporterConfig {
    pub fn validate(&self) -> Result<(), Vec<ConfigProblem>> {
        let mut problems = Problems::default();
        problems.check(
            !self.output_dir.as_os_str().is_empty(),
            "exporters.parquet.output_dir",
            "must not be empty",
        );
        if let Err(e) = Output::parse(&self.output_dir) {
            problems.check(false, "exporters.parquet.output_dir", &e.to_string());
        }
        problems.check(
            self.instance_id.is_empty() || instance::validate(&self.instance_id).is_ok(),
            "exporters.parquet.instance_id",
            "must be 1 to 64 ASCII letters, digits, '-' or '_' (or empty for a generated one)",
        );
        problems.add(self.object_store.validate());
        problems.check(
            self.max_rows_per_file > 0,
            "exporters.parquet.max_rows_per_file",
            ABOVE_ZERO,
        );
        problems.check(
            self.max_bytes_per_file > 0,
            "exporters.parquet.max_bytes_per_file",
            ABOVE_ZERO,
        );
        problems.check(
            !self.max_file_age.is_zero(),
            "exporters.parquet.max_file_age",
            ABOVE_ZERO,
        );
        problems.check(
            self.row_group_rows > 0,
            "exporters.parquet.row_group_rows",
            ABOVE_ZERO,
        );
        problems.finish()
    }
}

/// `[exporters.parquet.object_store]`: uploading to an `s3://`, `gs://` or `az://` output.
/// Credentials and region come from each cloud's standard environment.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ObjectStoreConfig {
    /// An S3-compatible endpoint such as `http://127.0.0.1:9000`; empty: `AWS_ENDPOINT_URL` or
    /// the cloud's own.
    #[serde(deserialize_with = "deserialize_endpoint")]
    pub endpoint: Option<String>,
    /// Allows an `http://` endpoint; absent: `AWS_ALLOW_HTTP`.
    pub allow_http: Option<bool>,
    /// Parquet bytes completed and not yet uploaded above which exports are refused (the
    /// store is down or slower than intake) until uploads catch up.
    pub max_staged_bytes: u64,
    /// Files up to this size are uploaded in one request, larger ones in parts of this size.
    pub part_bytes: u64,
    /// Backoff between retries of a failed upload, doubling up to `max_backoff`.
    #[serde(deserialize_with = "duration::deserialize")]
    pub initial_backoff: Duration,
    #[serde(deserialize_with = "duration::deserialize")]
    pub max_backoff: Duration,
    /// Further client settings by their `object_store` names (`aws_virtual_hosted_style_request`,
    /// `google_service_account`…), over the environment's. Keep secrets in the environment.
    pub options: BTreeMap<String, String>,
}

impl Default for ObjectStoreConfig {
    fn default() -> Self {
        ObjectStoreConfig {
            endpoint: None,
            allow_http: None,
            max_staged_bytes: 1024 * MIB,
            part_bytes: 16 * MIB,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(30),
            options: BTreeMap::new(),
        }
    }
}

impl ObjectStoreConfig {
    pub fn validate(&self) -> Result<(), Vec<ConfigProblem>> {
        let mut problems = Problems::default();
        problems.check(
            self.max_staged_bytes > 0,
            "exporters.parquet.object_store.max_staged_bytes",
            ABOVE_ZERO,
        );
        problems.check(
            self.part_bytes >= MIN_PART_BYTES as u64,
            "exporters.parquet.object_store.part_bytes",
            "must be at least 5 MiB (5242880), the smallest part S3 accepts",
        );
        problems.check(
            !self.initial_backoff.is_zero(),
            "exporters.parquet.object_store.initial_backoff",
            ABOVE_ZERO,
        );
        problems.check(
            self.max_backoff >= self.initial_backoff,
            "exporters.parquet.object_store.max_backoff",
            "must not be below exporters.parquet.object_store.initial_backoff",
        );
        problems.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::invalid;

    #[test]
    fn parquet_rotation_bounds_must_be_above_zero() {
        let msg = invalid(|c| c.exporters.parquet.max_rows_per_file = 0);
        assert!(msg.contains("exporters.parquet.max_rows_per_file: must be above zero"));
        let msg = invalid(|c| c.exporters.parquet.max_bytes_per_file = 0);
        assert!(msg.contains("exporters.parquet.max_bytes_per_file: must be above zero"));
        let msg = invalid(|c| c.exporters.parquet.max_file_age = Duration::ZERO);
        assert!(msg.contains("exporters.parquet.max_file_age: must be above zero"));
        let msg = invalid(|c| c.exporters.parquet.row_group_rows = 0);
        assert!(msg.contains("exporters.parquet.row_group_rows: must be above zero"));
    }

    #[test]
    fn an_output_with_an_unknown_scheme_is_refused_not_taken_for_a_path() {
        for output in ["ftp://x/y", "s3:bucket/prefix", "s3:"] {
            let msg = invalid(|c| c.exporters.parquet.output_dir = PathBuf::from(output));
            assert!(msg.contains("exporters.parquet.output_dir: "), "{msg}");
            assert!(msg.contains(output), "{msg}");
        }
    }

    #[test]
    fn object_store_bounds_are_checked() {
        let msg = invalid(|c| c.exporters.parquet.object_store.part_bytes = MIB);
        assert!(
            msg.contains("exporters.parquet.object_store.part_bytes: must be at least 5 MiB"),
            "{msg}"
        );
        let msg = invalid(|c| c.exporters.parquet.instance_id = "a/b".into());
        assert!(msg.contains("exporters.parquet.instance_id: "), "{msg}");
        let msg = invalid(|c| c.exporters.parquet.object_store.max_staged_bytes = 0);
        assert!(
            msg.contains("exporters.parquet.object_store.max_staged_bytes: must be above zero"),
            "{msg}"
        );
    }
}

//! Parquet sink (SPEC §5): one row per attempt in the `attempts` table, partitioned by the UTC
//! date of the span start.
//!
//! [`schema`] names the columns, [`rows_to_batch`] turns rows into Arrow, and [`ParquetSink`]
//! owns the files: written under a hidden temporary name and renamed only once complete, so a
//! reader listing a partition never sees a half file.

mod batch;
pub mod config;
pub mod instance;
mod layout;
pub mod output;
pub mod remote;
pub mod schema;
mod sink;
#[cfg(test)]
mod tests;

use std::io;
use std::path::PathBuf;

pub use batch::{decimal_to_scaled_i128, rows_to_batch, scaled_i128_to_decimal};
mod written;

pub use config::{ObjectStoreConfig, ParquetExporterConfig};
pub use layout::{TABLE_DIR, WAL_LSN_KEY};
pub use output::{Output, OutputError, RemoteOutput};
pub use sink::{DatedBatches, ParquetSink, SinkStats};
pub use written::{remove_temporary_files, written_spans, RowKey, WrittenRows};

/// Everything that can go wrong writing the `attempts` table. Each I/O case names the path, so
/// the operator knows which directory or disk to look at.
#[derive(Debug, thiserror::Error)]
pub enum ParquetSinkError {
    /// `key: problem`, `; `-separated.
    #[error("invalid parquet sink config: {0}")]
    InvalidConfig(String),
    #[error("cannot create {}: {source}", path.display())]
    Create { path: PathBuf, source: io::Error },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: parquet::errors::ParquetError,
    },
    #[error("cannot sync {}: {source}", path.display())]
    Sync { path: PathBuf, source: io::Error },
    #[error("cannot rename {} to {}: {source}", from.display(), to.display())]
    Rename {
        from: PathBuf,
        to: PathBuf,
        source: io::Error,
    },
    #[error("cannot build an attempts batch: {0}")]
    Batch(#[from] arrow_schema::ArrowError),
    #[error("cannot queue {} for upload: {source}", path.display())]
    Stage {
        path: PathBuf,
        source: remote::UploadError,
    },
    #[error("{files} files not uploaded to {output}{}; they stay staged and are uploaded at the next start", problem.as_ref().map(|p| format!(" (last failure: {p})")).unwrap_or_default())]
    NotUploaded {
        files: usize,
        output: String,
        problem: Option<String>,
    },
    /// The uploads ended: a permanent store error or the retry budget (`replay`).
    #[error("{0}")]
    UploadsEnded(String),
    /// A staged file that cannot be handed to the uploader (listed, read or named).
    #[error("staging: {0}")]
    Staging(String),
}

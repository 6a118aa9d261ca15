//! The write-ahead log: an export is answered OK only once its bytes are here.
//!
//! Append-only segment files `<dir>/<first lsn>.wal` of length-prefixed, CRC-checked records,
//! one per accepted export request. Every record gets a log sequence number (LSN). Records are
//! appended in batches so that concurrent exports share one fsync (group commit). A segment is
//! deleted once every row from its records is in a completed Parquet file; on start, the live
//! segments are replayed through the engine. A torn or corrupt tail record (a crash mid-append)
//! is detected by its CRC, reported and truncated; the records before it survive. Written
//! directly, a segment starts as zeros written ahead of time (`spare.rs`), so an append writes over
//! blocks already on disk.

pub mod config;
mod direct;
mod segment;
mod spare;
mod writer;

pub use segment::{read_segment, SegmentRead, RECORD_HEADER_BYTES};
pub use writer::WalWriter;

pub use config::{FsyncMode, WalConfig};

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;

/// When appended records are forced to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// Before an export is answered OK; concurrent exports share one fsync.
    Always,
    /// At most this long after an append: an OS crash can lose acknowledged exports of that
    /// window (a process crash cannot: the bytes are in the page cache).
    Interval(Duration),
    /// Never explicitly: the OS decides. Fastest; an OS crash can lose much more.
    Off,
}

/// One accepted export request, as logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub lsn: u64,
    /// The request, protobuf-encoded.
    pub payload: Bytes,
}

#[derive(Debug, thiserror::Error)]
pub enum WalError {
    #[error("write-ahead log {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl WalError {
    fn io(path: &Path, source: std::io::Error) -> WalError {
        WalError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A segment found on start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    pub path: PathBuf,
    pub first_lsn: u64,
    /// The last LSN it holds; `None` when it holds no record.
    pub last_lsn: Option<u64>,
}

/// What the log held at start.
#[derive(Debug, Default)]
pub struct Recovery {
    pub records: Vec<Record>,
    pub segments: Vec<SegmentInfo>,
    /// The LSN the next appended record gets.
    pub next_lsn: u64,
    /// Torn or corrupt records found (and truncated or skipped), for the log.
    pub problems: Vec<String>,
}

const SEGMENT_EXTENSION: &str = "wal";

fn segment_path(dir: &Path, first_lsn: u64) -> PathBuf {
    dir.join(format!("{first_lsn:020}.{SEGMENT_EXTENSION}"))
}

/// Reads every segment of `dir` (creating it if missing). A bad record in the last segment is
/// truncated away; in an earlier segment (which a crash cannot tear) the rest of that segment
/// is skipped and reported.
pub fn recover(dir: &Path) -> Result<Recovery, WalError> {
    std::fs::create_dir_all(dir).map_err(|e| WalError::io(dir, e))?;
    let mut found: Vec<(u64, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| WalError::io(dir, e))? {
        let path = entry.map_err(|e| WalError::io(dir, e))?.path();
        let first = path
            .extension()
            .filter(|e| *e == SEGMENT_EXTENSION)
            .and_then(|_| path.file_stem())
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<u64>().ok());
        if let Some(first) = first {
            found.push((first, path));
        }
    }
    found.sort();

    let mut recovery = Recovery {
        next_lsn: 1,
        ..Recovery::default()
    };
    let last_index = found.len().saturating_sub(1);
    for (i, (first_lsn, path)) in found.into_iter().enumerate() {
        let read = read_segment(&path).map_err(|e| WalError::io(&path, e))?;
        if let Some(problem) = &read.problem {
            if i == last_index {
                truncate(&path, read.valid_bytes)?;
                recovery.problems.push(format!(
                    "{}: {problem} at byte {}; truncated there, {} earlier records kept",
                    path.display(),
                    read.valid_bytes,
                    read.records.len()
                ));
            } else {
                recovery.problems.push(format!(
                    "{}: {problem} at byte {}; the rest of this segment is skipped",
                    path.display(),
                    read.valid_bytes
                ));
            }
        }
        let last_lsn = read.records.last().map(|r| r.lsn);
        if let Some(last) = last_lsn {
            recovery.next_lsn = recovery.next_lsn.max(last + 1);
        }
        recovery.next_lsn = recovery.next_lsn.max(first_lsn);
        recovery.records.extend(read.records);
        recovery.segments.push(SegmentInfo {
            path,
            first_lsn,
            last_lsn,
        });
    }
    Ok(recovery)
}

fn truncate(path: &Path, len: u64) -> Result<(), WalError> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| WalError::io(path, e))?;
    file.set_len(len).map_err(|e| WalError::io(path, e))?;
    file.sync_all().map_err(|e| WalError::io(path, e))
}

/// Write-ahead log sequence numbers of the records a file's rows came from (inclusive): the
/// processor's [`Origins`](crate::assemble::Origins), which the shard offers spans with.
pub use crate::assemble::Origins as LsnRange;

#[cfg(test)]
mod tests;

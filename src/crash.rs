//! Deliberate crash points, for the crash tests only.
//!
//! `RETRY_SPEND_CRASH_AT=<point>:<n>` (points: `wal_append`, `parquet_write`, `parquet_rename`,
//! `uploaded`)
//! aborts the process, like a SIGKILL or a power cut would stop it, the n-th time execution
//! reaches that point. Unset — always, outside those tests — a point costs one atomic load.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

pub const ENV: &str = "RETRY_SPEND_CRASH_AT";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// Half of a write-ahead log batch is written, the rest not.
    WalAppend,
    /// Rows are in a Parquet temporary file that is not complete.
    ParquetWrite,
    /// A completed Parquet file was just renamed into place; the log still holds its rows.
    ParquetRename,
    /// A staged file was uploaded, recorded and deleted; the log still holds its rows.
    Uploaded,
}

impl Point {
    fn parse(name: &str) -> Option<Point> {
        match name {
            "wal_append" => Some(Point::WalAppend),
            "parquet_write" => Some(Point::ParquetWrite),
            "parquet_rename" => Some(Point::ParquetRename),
            "uploaded" => Some(Point::Uploaded),
            _ => None,
        }
    }
}

fn armed_at() -> Option<(Point, u64)> {
    static ARMED: OnceLock<Option<(Point, u64)>> = OnceLock::new();
    *ARMED.get_or_init(|| {
        let value = std::env::var(ENV).ok()?;
        let (point, n) = value.split_once(':')?;
        Some((Point::parse(point)?, n.parse().ok()?))
    })
}

/// Whether a crash at `point` is configured (so the caller can set up a torn state first).
pub fn armed(point: Point) -> bool {
    armed_at().is_some_and(|(p, _)| p == point)
}

/// Aborts the process if this is the configured point's n-th visit.
pub fn reached(point: Point) {
    static VISITS: AtomicU64 = AtomicU64::new(0);
    if let Some((armed, n)) = armed_at() {
        if armed == point && VISITS.fetch_add(1, Ordering::SeqCst) + 1 == n {
            eprintln!("{ENV}: crashing at {point:?} (visit {n})");
            std::process::abort();
        }
    }
}

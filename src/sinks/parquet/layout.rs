//! Names in the output that readers and recovery rely on.

/// The table's directory under the output directory.
pub const TABLE_DIR: &str = "attempts";

/// Footer key holding a file's [`crate::wal::LsnRange`] as `min-max`.
pub const WAL_LSN_KEY: &str = "retry_spend.wal_lsn";

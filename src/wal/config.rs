//! `[wal]`: the write-ahead log's section of the config.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::FsyncPolicy;
use crate::config_kernel::{duration, ConfigProblem, Problems, ABOVE_ZERO, MIB};

/// `[wal]`: the write-ahead log that makes an acknowledged export survive a crash.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WalConfig {
    /// `false` (`--wal off`) answers exports once they are queued in memory: a crash then loses
    /// what was accepted but not yet in a completed Parquet file.
    pub enabled: bool,
    /// Empty: `<output_dir>/wal`, so one output directory holds a collector's whole state.
    /// Required with an object store output: the log and the staging of Parquet files before
    /// upload live here.
    pub dir: PathBuf,
    /// A segment is sealed and a new one started once it reaches this size.
    pub segment_bytes: u64,
    pub fsync: FsyncMode,
    /// For `fsync = "interval"`: the longest an acknowledged export may stay unsynced.
    #[serde(deserialize_with = "duration::deserialize")]
    pub fsync_interval: Duration,
}

impl Default for WalConfig {
    fn default() -> Self {
        WalConfig {
            enabled: true,
            dir: PathBuf::new(),
            segment_bytes: 64 * MIB,
            fsync: FsyncMode::Always,
            fsync_interval: Duration::from_secs(1),
        }
    }
}

impl WalConfig {
    pub fn validate(&self) -> Result<(), Vec<ConfigProblem>> {
        let mut problems = Problems::default();
        problems.check(self.segment_bytes > 0, "wal.segment_bytes", ABOVE_ZERO);
        problems.check(
            self.fsync != FsyncMode::Interval || !self.fsync_interval.is_zero(),
            "wal.fsync_interval",
            "must be above zero when fsync = \"interval\"",
        );
        problems.finish()
    }

    /// Where the log lives for a given output directory.
    pub fn dir_for(&self, output_dir: &Path) -> PathBuf {
        if self.dir.as_os_str().is_empty() {
            output_dir.join("wal")
        } else {
            self.dir.clone()
        }
    }

    /// When appends are forced to disk.
    pub fn fsync_policy(&self) -> FsyncPolicy {
        match self.fsync {
            FsyncMode::Always => FsyncPolicy::Always,
            FsyncMode::Interval => FsyncPolicy::Interval(self.fsync_interval),
            FsyncMode::Off => FsyncPolicy::Off,
        }
    }
}

/// When the write-ahead log is forced to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FsyncMode {
    /// Before each export is answered (concurrent exports share one fsync). Survives power loss.
    Always,
    /// Every `fsync_interval`: a power loss can lose that window's acknowledged exports.
    Interval,
    /// Left to the OS: fastest, survives a process crash but not a power loss.
    Off,
}

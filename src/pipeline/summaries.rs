//! The finished-request summaries each shard keeps beside the write-ahead log, so that a late
//! retry after a restart is judged against its earlier attempts.
//!
//! One file per shard, `<wal dir>/finished/shard-<i>.rsfc`, replaced whole (a temporary name,
//! fsync, rename, fsync of the directory) at the shard's checkpoint and at shutdown. At start
//! every file is read, whatever the shard count was, and each request goes to the shard its
//! trace hashes to now: shards are chosen by trace, so `--workers` may change between runs.
//! A file that cannot be read is reported and left out; it never stops a start.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::shard_of;
use crate::assemble::{summary, Summary};

const DIR: &str = "finished";
const PREFIX: &str = "shard-";
const EXTENSION: &str = "rsfc";
const TEMPORARY_SUFFIX: &str = ".tmp";

/// Where the shards' summaries live, shared by the shards.
#[derive(Debug)]
pub struct SummaryStore {
    dir: PathBuf,
    fsync: bool,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Shards that have saved since the start.
    saved: Vec<bool>,
    /// Files of shards that no longer exist: deleted once every shard has saved what it took
    /// from them.
    stale: Vec<PathBuf>,
}

impl SummaryStore {
    /// Reads every summaries file under `wal_dir` and hands each request to the shard (of
    /// `shards`) that now owns its trace, oldest first. `fsync`: whether saves are synced.
    pub fn open(
        wal_dir: &Path,
        shards: usize,
        fsync: bool,
    ) -> (Arc<SummaryStore>, Vec<Vec<Summary>>) {
        let shards = shards.max(1);
        let dir = wal_dir.join(DIR);
        let mut routed: Vec<Vec<Summary>> = (0..shards).map(|_| Vec::new()).collect();
        let mut stale = Vec::new();
        let mut files = Vec::new();
        match std::fs::read_dir(&dir) {
            Ok(entries) => {
                for path in entries.flatten().map(|e| e.path()) {
                    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                    if name.ends_with(TEMPORARY_SUFFIX) {
                        // A save cut short by a crash: the file it was to replace is intact.
                        let _ = std::fs::remove_file(&path);
                        continue;
                    }
                    if let Some(shard) = shard_of_file(name) {
                        if shard >= shards {
                            stale.push(path.clone());
                        }
                        files.push((shard, path));
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot read the finished-request summaries; starting without them (late retries of requests finished before the restart are judged without their earlier attempts)");
            }
        }
        files.sort();
        let mut loaded: Vec<std::vec::IntoIter<Summary>> = Vec::new();
        for (_, path) in &files {
            match read(path) {
                Ok(summaries) => loaded.push(summaries.into_iter()),
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "finished-request summaries file skipped; starting without it (late retries of its requests are judged without their earlier attempts)");
                }
            }
        }
        let mut count = 0usize;
        // Files are oldest first each: taking one from each in turn keeps the order roughly
        // by age when several files feed one shard.
        loop {
            let mut any = false;
            for file in &mut loaded {
                if let Some(summary) = file.next() {
                    any = true;
                    count += 1;
                    let shard = shard_of(summary.key.trace_id(), shards);
                    routed[shard].push(summary);
                }
            }
            if !any {
                break;
            }
        }
        if count > 0 {
            tracing::info!(
                requests = count,
                files = files.len(),
                "finished-request summaries restored"
            );
        }
        let store = SummaryStore {
            dir,
            fsync,
            state: Mutex::new(State {
                saved: vec![false; shards],
                stale,
            }),
        };
        (Arc::new(store), routed)
    }

    /// The file of `shard`.
    pub fn path(&self, shard: usize) -> PathBuf {
        self.dir.join(format!("{PREFIX}{shard}.{EXTENSION}"))
    }

    /// Replaces `shard`'s file with `parts` one after the other, atomically: a crash leaves
    /// the old file or the new one, never a mix.
    pub fn save(&self, shard: usize, parts: &[&[u8]]) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let path = self.path(shard);
        let temporary = self
            .dir
            .join(format!("{PREFIX}{shard}.{EXTENSION}{TEMPORARY_SUFFIX}"));
        let mut file = std::fs::File::create(&temporary)?;
        for part in parts {
            file.write_all(part)?;
        }
        if self.fsync {
            file.sync_data()?;
        }
        drop(file);
        std::fs::rename(&temporary, &path)?;
        if self.fsync {
            std::fs::File::open(&self.dir)?.sync_all()?;
        }
        self.saved(shard);
        Ok(())
    }

    /// Once every shard has saved, the files of shards that no longer exist hold nothing that
    /// is not in the others.
    fn saved(&self, shard: usize) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = state.saved.get_mut(shard) {
            *slot = true;
        }
        if state.stale.is_empty() || !state.saved.iter().all(|s| *s) {
            return;
        }
        for path in std::mem::take(&mut state.stale) {
            if let Err(e) = std::fs::remove_file(&path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(file = %path.display(), error = %e, "cannot delete the summaries file of a shard that no longer exists");
                }
            }
        }
    }
}

/// `shard-<i>.rsfc` → `i`.
fn shard_of_file(name: &str) -> Option<usize> {
    name.strip_prefix(PREFIX)?
        .strip_suffix(EXTENSION)?
        .strip_suffix('.')?
        .parse()
        .ok()
}

/// Why a file was left out.
#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Format(#[from] summary::SummaryError),
}

fn read(path: &Path) -> Result<Vec<Summary>, ReadError> {
    let bytes = std::fs::read(path)?;
    Ok(summary::decode(&bytes)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_file_names_round_trip() {
        let (store, _) = SummaryStore::open(Path::new("/nonexistent-wal"), 2, false);
        let path = store.path(7);
        let name = path.file_name().and_then(|n| n.to_str()).unwrap();
        assert_eq!(shard_of_file(name), Some(7));
        assert_eq!(shard_of_file("shard-7.rsfc.tmp"), None);
        assert_eq!(shard_of_file("00000000000000000001.wal"), None);
    }
}

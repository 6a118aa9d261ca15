//! The local record of uploaded objects, `<wal dir>/uploaded`: one line `MIN-MAX KEY` per
//! object, naming the write-ahead log records its rows came from.
//!
//! Crash recovery must know which spans already have a row. For local output it reads the
//! footers of the completed files; an uploaded file is gone from local disk, so recovery reads
//! back from the store only the objects this record lists as covering records the log still
//! holds — never a listing of a prefix that other collectors share. A line is appended (and
//! synced) after the upload succeeded and before the staged file is deleted, so every object is
//! either still staged or recorded here.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::wal::LsnRange;

/// File name of the record under the write-ahead log directory.
pub const JOURNAL_FILE: &str = "uploaded";

/// One uploaded object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub wal: LsnRange,
    /// The object's key in its bucket.
    pub key: String,
}

/// The record file; appended to by the uploader only.
#[derive(Debug, Clone)]
pub struct Journal {
    path: PathBuf,
}

impl Journal {
    pub fn new(path: PathBuf) -> Journal {
        Journal { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one entry and syncs it: once this returns, a crash cannot forget the object.
    pub fn append(&self, entry: &Entry) -> io::Result<()> {
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        file.write_all(format!("{}-{} {}\n", entry.wal.min, entry.wal.max, entry.key).as_bytes())?;
        file.sync_data()
    }

    /// Every entry; a missing file holds none. A torn last line (a crash mid-append) is skipped:
    /// its object was not yet counted as uploaded, so its staged file is still there.
    pub fn read(&self) -> io::Result<Vec<Entry>> {
        let text = match fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        Ok(text
            .split_inclusive('\n')
            .filter_map(|line| line.strip_suffix('\n'))
            .filter_map(parse_line)
            .collect())
    }

    /// Replaces the record with `entries` (written aside, synced, renamed over).
    pub fn rewrite(&self, entries: &[Entry]) -> io::Result<()> {
        let temp = self.path.with_extension("tmp");
        let mut file = File::create(&temp)?;
        for entry in entries {
            file.write_all(
                format!("{}-{} {}\n", entry.wal.min, entry.wal.max, entry.key).as_bytes(),
            )?;
        }
        file.sync_all()?;
        drop(file);
        fs::rename(&temp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

fn parse_line(line: &str) -> Option<Entry> {
    let (range, key) = line.split_once(' ')?;
    let (min, max) = range.split_once('-')?;
    if key.is_empty() {
        return None;
    }
    Some(Entry {
        wal: LsnRange {
            min: min.parse().ok()?,
            max: max.parse().ok()?,
        },
        key: key.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(min: u64, max: u64, key: &str) -> Entry {
        Entry {
            wal: LsnRange { min, max },
            key: key.into(),
        }
    }

    #[test]
    fn entries_survive_append_read_and_rewrite() {
        let dir = tempfile::tempdir().expect("tempdir");
        let journal = Journal::new(dir.path().join(JOURNAL_FILE));
        assert_eq!(journal.read().expect("empty"), vec![]);
        let a = entry(1, 4, "p/attempts/date=2026-08-25/part-a.parquet");
        let b = entry(5, 9, "p/attempts/date=2026-08-25/part-b.parquet");
        journal.append(&a).expect("append a");
        journal.append(&b).expect("append b");
        assert_eq!(journal.read().expect("read"), vec![a, b.clone()]);
        journal.rewrite(std::slice::from_ref(&b)).expect("rewrite");
        assert_eq!(journal.read().expect("read"), vec![b]);
    }

    #[test]
    fn a_torn_last_line_is_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(JOURNAL_FILE);
        fs::write(&path, "1-4 p/a.parquet\n5-9 p/b.parq").expect("write");
        assert_eq!(
            Journal::new(path).read().expect("read"),
            vec![entry(1, 4, "p/a.parquet")]
        );
    }
}

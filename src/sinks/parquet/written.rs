//! What completed files already hold, for crash recovery: which spans have a row, and the
//! temporaries a crash left behind.

use std::collections::HashSet;
use std::fs::{self, File};
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::Array;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use parquet::file::reader::ChunkReader;

use super::layout::{TABLE_DIR, WAL_LSN_KEY};
use super::schema::{ATTEMPT_INDEX, SPAN_ID, TRACE_ID};
use crate::contract::{SpanId, TraceId};
use crate::wal::LsnRange;

/// A row's key: trace id, span id and attempt index (the spanless tries of a resend count share
/// their call's span id, SPEC §2).
pub type RowKey = (TraceId, SpanId, i32);

/// The keys of the rows completed files hold.
pub type WrittenRows = HashSet<RowKey>;

/// Every file in the partitions of `<output_dir>/attempts/`, with its name.
fn partition_files(output_dir: &Path) -> std::io::Result<Vec<(PathBuf, String)>> {
    let mut files = Vec::new();
    let partitions = match fs::read_dir(output_dir.join(TABLE_DIR)) {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(files),
        Err(e) => return Err(e),
    };
    for partition in partitions {
        let partition = partition?.path();
        if !partition.is_dir() {
            continue;
        }
        for entry in fs::read_dir(&partition)? {
            let path = entry?.path();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            files.push((path, name));
        }
    }
    files.sort();
    Ok(files)
}

/// Whether `name` (`part-<instance id>-<unix ms>-<sequence>.parquet`, the sink's names) was
/// written by `instance_id`. Ids may contain '-', so the rest must be exactly the two numbers:
/// `collector-1` does not own the files of `collector-1-b`.
fn named_by(name: &str, instance_id: &str) -> bool {
    let rest = name
        .strip_prefix("part-")
        .and_then(|n| n.strip_prefix(instance_id))
        .and_then(|n| n.strip_prefix('-'))
        .and_then(|n| n.strip_suffix(".parquet"));
    let numbers = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    rest.and_then(|r| r.split_once('-'))
        .is_some_and(|(ms, sequence)| numbers(ms) && numbers(sequence))
}

/// Every completed file under `<output_dir>/attempts/`.
pub(super) fn completed_files(output_dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    Ok(partition_files(output_dir)?
        .into_iter()
        .filter(|(_, name)| !name.starts_with('.') && name.ends_with(".parquet"))
        .map(|(path, _)| path)
        .collect())
}

/// The key of every row in completed files that cover write-ahead log records
/// at or after `from_lsn`. Only footers are read for the other files. With `owner`, only the
/// files that instance named are read: another collector sharing the directory numbers its own
/// log records, so its files say nothing about this log.
pub fn written_spans(
    output_dir: &Path,
    from_lsn: u64,
    owner: Option<&str>,
) -> Result<WrittenRows, String> {
    let mut written = HashSet::new();
    let files = completed_files(output_dir)
        .map_err(|e| format!("cannot list {}: {e}", output_dir.join(TABLE_DIR).display()))?;
    for path in files {
        let name = path.file_name().map(|n| n.to_string_lossy());
        if owner.is_some_and(|id| !name.is_some_and(|n| named_by(&n, id))) {
            continue;
        }
        let file = File::open(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        spans_in(file, from_lsn, &mut written)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    }
    Ok(written)
}

/// The write-ahead log records a file's rows came from, from its footer.
fn lsn_range(metadata: &ParquetMetaData) -> Option<LsnRange> {
    let value = metadata
        .file_metadata()
        .key_value_metadata()
        .into_iter()
        .flatten()
        .find(|kv| kv.key == WAL_LSN_KEY)?
        .value
        .as_deref()?;
    let (min, max) = value.split_once('-')?;
    Some(LsnRange {
        min: min.parse().ok()?,
        max: max.parse().ok()?,
    })
}

/// A completed file's log records and row count, from its footer.
pub(super) fn footer_summary(path: &Path) -> Result<(Option<LsnRange>, u64), String> {
    let what = |e: &dyn std::fmt::Display| format!("cannot read {}: {e}", path.display());
    let file = File::open(path).map_err(|e| what(&e))?;
    let metadata = ParquetMetaDataReader::new()
        .parse_and_finish(&file)
        .map_err(|e| what(&e))?;
    let rows = u64::try_from(metadata.file_metadata().num_rows()).unwrap_or_default();
    Ok((lsn_range(&metadata), rows))
}

/// Adds to `written` the key of every row of one file (a local file or an object's bytes) when
/// its footer says it covers log records at or after `from_lsn`.
pub fn spans_in<R: ChunkReader + 'static>(
    reader: R,
    from_lsn: u64,
    written: &mut WrittenRows,
) -> Result<(), parquet::errors::ParquetError> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(reader)?;
    if lsn_range(builder.metadata()).is_none_or(|range| range.max < from_lsn) {
        return Ok(());
    }
    let schema = builder.parquet_schema();
    let columns = [TRACE_ID, SPAN_ID, ATTEMPT_INDEX].map(|name| {
        schema
            .columns()
            .iter()
            .position(|c| c.name() == name)
            .unwrap_or(usize::MAX)
    });
    let mask = ProjectionMask::leaves(schema, columns.into_iter().filter(|i| *i != usize::MAX));
    let reader = builder.with_projection(mask).build()?;
    for batch in reader {
        let batch = batch?;
        let (Some(traces), Some(spans), Some(indices)) = (
            batch.column_by_name(TRACE_ID),
            batch.column_by_name(SPAN_ID),
            batch.column_by_name(ATTEMPT_INDEX),
        ) else {
            continue;
        };
        let (Some(traces), Some(spans), Some(indices)) = (
            traces.as_string_opt::<i32>(),
            spans.as_string_opt::<i32>(),
            indices.as_primitive_opt::<arrow_array::types::Int32Type>(),
        ) else {
            continue;
        };
        for i in 0..batch.num_rows() {
            if traces.is_null(i) || spans.is_null(i) || indices.is_null(i) {
                continue;
            }
            let ids = crate::contract::id_from_hex(traces.value(i))
                .zip(crate::contract::id_from_hex(spans.value(i)));
            if let Some((trace, span)) = ids {
                written.insert((trace, span, indices.value(i)));
            }
        }
    }
    Ok(())
}

/// Removes the hidden temporaries of files a crash left unfinished; their rows are recovered
/// from the write-ahead log. With `owner`, only that instance's: the others are files that
/// collectors sharing the directory are writing right now. Returns how many were removed.
pub fn remove_temporary_files(output_dir: &Path, owner: Option<&str>) -> std::io::Result<usize> {
    let mut removed = 0;
    for (path, name) in partition_files(output_dir)? {
        let Some(file) = name
            .strip_prefix('.')
            .and_then(|n| n.strip_suffix(".tmp"))
            .filter(|n| n.starts_with("part-"))
        else {
            continue;
        };
        if owner.is_none_or(|id| named_by(file, id)) {
            fs::remove_file(&path)?;
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::named_by;

    #[test]
    fn a_file_belongs_to_the_instance_its_name_carries_exactly() {
        assert!(named_by(
            "part-collector-1-1787659200000-000003.parquet",
            "collector-1"
        ));
        assert!(!named_by(
            "part-collector-1-b-1787659200000-000003.parquet",
            "collector-1"
        ));
        assert!(!named_by(
            "part-collector-10-1787659200000-000003.parquet",
            "collector-1"
        ));
        assert!(!named_by(
            "part-collector-1-1787659200000.parquet",
            "collector-1"
        ));
        assert!(!named_by(
            "collector-1-1787659200000-000003.parquet",
            "collector-1"
        ));
    }
}

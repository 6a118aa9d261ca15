//! What completed files already hold, for crash recovery: which spans have a row, and the
//! temporaries a crash left behind.

use std::collections::HashSet;
use std::fs::{self, File};
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::Array;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;

use super::schema::{SPAN_ID, TRACE_ID};
use super::sink::{TABLE_DIR, WAL_LSN_KEY};
use crate::contract::{SpanId, TraceId};

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

/// Every completed file under `<output_dir>/attempts/`.
fn completed_files(output_dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    Ok(partition_files(output_dir)?
        .into_iter()
        .filter(|(_, name)| !name.starts_with('.') && name.ends_with(".parquet"))
        .map(|(path, _)| path)
        .collect())
}

/// The (trace id, span id) of every row in completed files that cover write-ahead log records
/// at or after `from_lsn`. Only footers are read for the other files.
pub fn written_spans(
    output_dir: &Path,
    from_lsn: u64,
) -> Result<HashSet<(TraceId, SpanId)>, String> {
    let mut written = HashSet::new();
    let files = completed_files(output_dir)
        .map_err(|e| format!("cannot list {}: {e}", output_dir.join(TABLE_DIR).display()))?;
    for path in files {
        let what = |e: &dyn std::fmt::Display| format!("cannot read {}: {e}", path.display());
        let file = File::open(&path).map_err(|e| what(&e))?;
        let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| what(&e))?;
        let covers = builder
            .metadata()
            .file_metadata()
            .key_value_metadata()
            .into_iter()
            .flatten()
            .find(|kv| kv.key == WAL_LSN_KEY)
            .and_then(|kv| kv.value.as_deref())
            .and_then(|v| v.split_once('-'))
            .and_then(|(_, max)| max.parse::<u64>().ok())
            .is_some_and(|max| max >= from_lsn);
        if !covers {
            continue;
        }
        let schema = builder.parquet_schema();
        let columns = [TRACE_ID, SPAN_ID].map(|name| {
            schema
                .columns()
                .iter()
                .position(|c| c.name() == name)
                .unwrap_or(usize::MAX)
        });
        let mask = ProjectionMask::leaves(schema, columns.into_iter().filter(|i| *i != usize::MAX));
        let reader = builder
            .with_projection(mask)
            .build()
            .map_err(|e| what(&e))?;
        for batch in reader {
            let batch = batch.map_err(|e| what(&e))?;
            let (Some(traces), Some(spans)) = (
                batch.column_by_name(TRACE_ID),
                batch.column_by_name(SPAN_ID),
            ) else {
                continue;
            };
            let (traces, spans) = (traces.as_string::<i32>(), spans.as_string::<i32>());
            for i in 0..batch.num_rows() {
                if traces.is_null(i) || spans.is_null(i) {
                    continue;
                }
                if let Some(ids) = crate::contract::ids_from_hex(traces.value(i), spans.value(i)) {
                    written.insert(ids);
                }
            }
        }
    }
    Ok(written)
}

/// Removes the hidden temporaries of files a crash left unfinished; their rows are recovered
/// from the write-ahead log. Returns how many were removed.
pub fn remove_temporary_files(output_dir: &Path) -> std::io::Result<usize> {
    let mut removed = 0;
    for (path, name) in partition_files(output_dir)? {
        if name.starts_with(".part-") && name.ends_with(".tmp") {
            fs::remove_file(&path)?;
            removed += 1;
        }
    }
    Ok(removed)
}

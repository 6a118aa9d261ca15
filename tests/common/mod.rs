//! The harness the integration tests share, so that each says only what it checks:
//!
//! - [`replay::Replay`]: `replay` of the binary over files, JSON text or exports, with pricing,
//!   policies, an output and extra arguments; its exit status, printout and rows.
//! - [`child`]: the binary with a clean environment ([`child::binary`], [`child::run`]) and
//!   `serve` as a child process ([`child::Serve`], [`child::start`]).
//! - [`collector`]: the collector in-process ([`collector::started`], [`collector::served_rows`]).
//! - [`spans`], [`plain`], [`otel`]: spans built in code, generated, or sent with the SDK.
//! - [`otelcol`]: the real OpenTelemetry Collector in front of `serve` instances on one S3
//!   prefix, and the rows each instance wrote.
//! - [`feed`], [`s3`], [`secure`], [`python`]: a pricing feed, an S3 server, TLS material and
//!   the Python of the tests that need outside tools.
//! - Here: reading the `attempts` table back as [`Row`]s.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Decimal128Type, Int32Type, Int64Type, TimestampMicrosecondType,
};
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, SchemaRef, TimeUnit};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// One row as column name → rendered value ("NULL" for nulls), easy to compare and print.
pub type Row = BTreeMap<String, String>;

/// Every completed Parquet file under `<output>/attempts/`, sorted.
pub fn parquet_files(output: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let table = output.join("attempts");
    let Ok(partitions) = std::fs::read_dir(&table) else {
        return files;
    };
    for partition in partitions.flatten() {
        for file in std::fs::read_dir(partition.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            files.push(file.path());
        }
    }
    files.sort();
    files
}

/// Files whose names mark them as unfinished (hidden temporaries).
pub fn temporary_files(output: &Path) -> Vec<PathBuf> {
    parquet_files(output)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect()
}

/// The write-ahead log's segment files in `wal` (none when it does not exist). Other files
/// there, such as the finished-request summaries under `finished/`, are not the log.
pub fn wal_segments(wal: &Path) -> usize {
    std::fs::read_dir(wal)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "wal"))
                .count()
        })
        .unwrap_or(0)
}

/// Reads every completed file back: the schema of the first and all rows, sorted by
/// (trace_id, span_id) so that runs can be compared whatever file order they wrote.
pub fn read_table(output: &Path) -> (Option<SchemaRef>, Vec<Row>) {
    let mut schema = None;
    let mut rows = Vec::new();
    for path in parquet_files(output) {
        if path.extension().is_none_or(|e| e != "parquet")
            || path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        {
            continue;
        }
        let partition = path
            .parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned());
        read_file(
            File::open(&path).unwrap(),
            partition,
            &mut schema,
            &mut rows,
        );
    }
    sort_rows(&mut rows);
    (schema, rows)
}

/// Appends the rows of one Parquet file (a local file or an object's bytes), each with its
/// `_partition`, and notes the file's schema.
pub fn read_file<R: parquet::file::reader::ChunkReader + 'static>(
    file: R,
    partition: Option<String>,
    schema: &mut Option<SchemaRef>,
    rows: &mut Vec<Row>,
) {
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    for batch in reader {
        let batch = batch.unwrap();
        schema.get_or_insert_with(|| batch.schema());
        for i in 0..batch.num_rows() {
            let mut row = render_row(&batch, i);
            row.insert("_partition".into(), partition.clone().unwrap_or_default());
            rows.push(row);
        }
    }
}

/// Sorts rows by (trace_id, span_id), so that runs can be compared whatever file order they wrote.
pub fn sort_rows(rows: &mut [Row]) {
    rows.sort_by(|a, b| (&a["trace_id"], &a["span_id"]).cmp(&(&b["trace_id"], &b["span_id"])));
}

fn render_row(batch: &RecordBatch, i: usize) -> Row {
    batch
        .schema()
        .fields()
        .iter()
        .zip(batch.columns())
        .map(|(field, column)| (field.name().clone(), render(column.as_ref(), i)))
        .collect()
}

fn render(column: &dyn Array, i: usize) -> String {
    if column.is_null(i) {
        return "NULL".into();
    }
    match column.data_type() {
        DataType::Utf8 => column.as_string::<i32>().value(i).to_owned(),
        DataType::Int32 => column.as_primitive::<Int32Type>().value(i).to_string(),
        DataType::Int64 => column.as_primitive::<Int64Type>().value(i).to_string(),
        DataType::Boolean => column.as_boolean().value(i).to_string(),
        DataType::Decimal128(_, _) => column.as_primitive::<Decimal128Type>().value_as_string(i),
        // The stored microseconds.
        DataType::Timestamp(TimeUnit::Microsecond, _) => column
            .as_primitive::<TimestampMicrosecondType>()
            .value(i)
            .to_string(),
        DataType::Date32 => {
            let days = column.as_primitive::<Date32Type>().value(i);
            let date = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap()
                + chrono::Days::new(days as u64);
            date.to_string()
        }
        DataType::List(_) => {
            let list = column.as_list::<i32>().value(i);
            let items: Vec<String> = (0..list.len()).map(|j| render(list.as_ref(), j)).collect();
            format!("[{}]", items.join(","))
        }
        other => panic!("unexpected column type {other}"),
    }
}

/// Trims a scale-18 decimal's trailing zeros: "0.002806800000000000" → "0.0028068".
pub fn usd(rendered: &str) -> String {
    if rendered == "NULL" || !rendered.contains('.') {
        return rendered.to_owned();
    }
    rendered
        .trim_end_matches('0')
        .trim_end_matches('.')
        .to_owned()
}
pub mod child;
pub mod collector;
pub mod feed;
pub mod otel;
pub mod otelcol;
pub mod plain;
pub mod python;
pub mod replay;
pub mod s3;
pub mod secure;
pub mod spans;

/// SHA-256 of rows as canonical text: every column `name=value`, rows sorted, so a digest
/// changes exactly when some row's content does, whatever order the files held them in.
pub fn rows_digest(rows: &[Row]) -> String {
    use sha2::{Digest, Sha256};
    let mut lines: Vec<String> = rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|(name, value)| format!("{name}={value}"))
                .collect::<Vec<_>>()
                .join("\u{1f}")
        })
        .collect();
    lines.sort();
    hex::encode(Sha256::digest(lines.join("\n").as_bytes()))
}

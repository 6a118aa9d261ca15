//! Finding and decoding the `attempts` files of a local output or an object store prefix.
//!
//! A location is what `--output` took (its `attempts/` table is read), or any directory or
//! prefix below it. Every `*.parquet` under it is read, however deep (Hive partitions, or
//! anything else a copy tool made). Names starting with `.` or `_` are skipped, files and
//! directories alike: the sink's in-progress temporaries are `.part-….parquet.tmp`, and Spark,
//! Hive and copy tools keep their markers and temporaries under such names.
//!
//! Files are read newest first: by modification time (an object's `last_modified`), then by
//! name (the path, or the object's key), greatest first. The [`Report`] keeps each attempt's
//! rows from the first file that has it and leaves out the copies older files hold.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, Int32Type, TimestampMicrosecondType};
use arrow_array::{Array, RecordBatch};
use arrow_schema::Schema;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;
use parquet::file::reader::ChunkReader;

use super::{Report, ReportRow};
use crate::sinks::parquet::remote;
use crate::sinks::parquet::schema::{self, attempts_schema};
use crate::sinks::parquet::ObjectStoreConfig;
use crate::sinks::parquet::{scaled_i128_to_decimal, Output, RemoteOutput, TABLE_DIR};

const PARQUET_SUFFIX: &str = ".parquet";

/// The columns the report reads; a file must have each with the table's type.
const COLUMNS: [&str; 11] = [
    schema::EVENT_TIME,
    schema::TRACE_ID,
    schema::SPAN_ID,
    schema::REQUEST_ID,
    schema::SERVICE_NAME,
    schema::TASK_TYPE,
    schema::ATTEMPT_INDEX,
    schema::SPEND_CLASS,
    schema::DECISION,
    schema::AUDITED,
    schema::ESTIMATED_INCREMENTAL_USD,
];

/// Of [`COLUMNS`], those that may hold nulls.
const NULLABLE: [&str; 2] = [schema::TASK_TYPE, schema::ESTIMATED_INCREMENTAL_USD];

/// Why a report could not be made. Each names the file, object or location concerned.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot list {location}: {problem}")]
    List { location: String, problem: String },
    #[error("no Parquet files (*.parquet) under {location}; give the --output of serve or replay, or a directory below it")]
    NoFiles { location: String },
    #[error("cannot read {file}: {problem}")]
    Read { file: String, problem: String },
    #[error("{file}: not an attempts table: {problem}")]
    Schema { file: String, problem: String },
    #[error("{file}: {problem}")]
    Value { file: String, problem: String },
    #[error("{0}")]
    Store(String),
    #[error("incremental USD sums past what an exact decimal holds (about 79 billion USD)")]
    Overflow,
}

/// Reads every attempts file under `location` into a [`Report`], newest first.
pub fn read(location: &Output, store: &ObjectStoreConfig) -> Result<Report, ReportError> {
    let mut report = Report::default();
    match location {
        Output::Local(dir) => {
            let files = local_files(dir)?;
            for (file, _) in &files {
                let name = file.display().to_string();
                let opened = std::fs::File::open(file).map_err(|e| ReportError::Read {
                    file: name.clone(),
                    problem: e.to_string(),
                })?;
                add_file(&mut report, opened, &name)?;
            }
        }
        Output::Remote(remote) => read_remote(remote, store, &mut report)?,
    }
    Ok(report)
}

/// Whether a file or directory name is one that readers of the table skip.
pub fn is_hidden(name: &str) -> bool {
    name.starts_with('.') || name.starts_with('_')
}

/// Newest first: by modification time, then by name, greatest first.
fn sort_newest_first<N: Ord>(files: &mut [(N, SystemTime)]) {
    files.sort_by(|(a, a_time), (b, b_time)| (b_time, b).cmp(&(a_time, a)));
}

/// The table files under a local location: `<dir>/attempts/` when there is one, else `dir`
/// itself (a table or partition directory, or a single file), newest first, each with its
/// modification time.
fn local_files(location: &Path) -> Result<Vec<(PathBuf, SystemTime)>, ReportError> {
    let table = location.join(TABLE_DIR);
    let root = if table.is_dir() {
        table
    } else {
        location.to_path_buf()
    };
    let list_err = |path: &Path, e: std::io::Error| ReportError::List {
        location: path.display().to_string(),
        problem: e.to_string(),
    };
    let mut files = Vec::new();
    let modified = |path: &Path, metadata: &std::fs::Metadata| {
        metadata.modified().map_err(|e| list_err(path, e))
    };
    let metadata = std::fs::metadata(&root).map_err(|e| list_err(&root, e))?;
    if metadata.is_file() {
        files.push((root.clone(), modified(&root, &metadata)?));
    } else {
        let mut pending = vec![root.clone()];
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(&dir).map_err(|e| list_err(&dir, e))? {
                let path = entry.map_err(|e| list_err(&dir, e))?.path();
                let name = path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if is_hidden(&name) {
                    continue;
                }
                // Follows symbolic links, as `ls -L` would: a partition may be linked in.
                let metadata = std::fs::metadata(&path).map_err(|e| list_err(&path, e))?;
                if metadata.is_dir() {
                    pending.push(path);
                } else if name.ends_with(PARQUET_SUFFIX) {
                    let time = modified(&path, &metadata)?;
                    files.push((path, time));
                }
            }
        }
    }
    if files.is_empty() {
        return Err(ReportError::NoFiles {
            location: root.display().to_string(),
        });
    }
    sort_newest_first(&mut files);
    Ok(files)
}

fn read_remote(
    remote: &RemoteOutput,
    options: &ObjectStoreConfig,
    report: &mut Report,
) -> Result<(), ReportError> {
    let store =
        remote::build_store(remote, options).map_err(|e| ReportError::Store(e.to_string()))?;
    // One request at a time is plenty for a report; a current-thread runtime is enough.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ReportError::Store(format!("cannot start the async runtime: {e}")))?;
    let table = remote.key(TABLE_DIR);
    let mut keys = runtime
        .block_on(list_keys(&store, &table))
        .map_err(|e| ReportError::List {
            location: remote.url_of(&table),
            problem: format!(
                "{e}; check the credentials, region, endpoint and that the bucket exists"
            ),
        })?;
    if keys.is_empty() && !remote.prefix.as_ref().is_empty() {
        keys = runtime
            .block_on(list_keys(&store, &remote.prefix))
            .map_err(|e| ReportError::List {
                location: remote.to_string(),
                problem: e.to_string(),
            })?;
    }
    if keys.is_empty() {
        return Err(ReportError::NoFiles {
            location: remote.to_string(),
        });
    }
    for (key, _) in keys {
        let url = remote.url_of(&key);
        let bytes = runtime
            .block_on(async { store.get(&key).await?.bytes().await })
            .map_err(|e| ReportError::Read {
                file: url.clone(),
                problem: e.to_string(),
            })?;
        add_file(report, bytes, &url)?;
    }
    Ok(())
}

/// Every table object under `prefix` with its `last_modified`, newest first, walking the listing
/// one level at a time so that hidden directories are never descended into.
async fn list_keys(
    store: &Arc<dyn ObjectStore>,
    prefix: &ObjectPath,
) -> Result<Vec<(ObjectPath, SystemTime)>, object_store::Error> {
    let mut keys = Vec::new();
    let mut pending = vec![prefix.clone()];
    while let Some(dir) = pending.pop() {
        let listed = store.list_with_delimiter(Some(&dir)).await?;
        let visible = |path: &ObjectPath| path.filename().is_some_and(|n| !is_hidden(n));
        keys.extend(
            listed
                .objects
                .into_iter()
                .filter(|o| visible(&o.location) && o.location.as_ref().ends_with(PARQUET_SUFFIX))
                .map(|o| (o.location, o.last_modified.into())),
        );
        pending.extend(listed.common_prefixes.into_iter().filter(|p| visible(p)));
    }
    sort_newest_first(&mut keys);
    Ok(keys)
}

/// Adds every row of one file, read through the report's columns only.
fn add_file<R: ChunkReader + 'static>(
    report: &mut Report,
    reader: R,
    name: &str,
) -> Result<(), ReportError> {
    let read_err = |e: &dyn std::fmt::Display| ReportError::Read {
        file: name.to_owned(),
        problem: e.to_string(),
    };
    let builder = ParquetRecordBatchReaderBuilder::try_new(reader).map_err(|e| read_err(&e))?;
    report.begin_file();
    let roots = check_schema(builder.schema()).map_err(|problem| ReportError::Schema {
        file: name.to_owned(),
        problem,
    })?;
    let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
    let batches = builder
        .with_projection(mask)
        .build()
        .map_err(|e| read_err(&e))?;
    for batch in batches {
        let batch = batch.map_err(|e| read_err(&e))?;
        decode(&batch, report).map_err(|problem| match problem {
            Problem::Overflow => ReportError::Overflow,
            Problem::Value(problem) => ReportError::Value {
                file: name.to_owned(),
                problem,
            },
        })?;
    }
    Ok(())
}

/// The root column index of each of [`COLUMNS`] in a file, once each has the table's type.
fn check_schema(file: &Schema) -> Result<Vec<usize>, String> {
    let table = attempts_schema();
    COLUMNS
        .iter()
        .map(|name| {
            let (index, field) = file
                .column_with_name(name)
                .ok_or_else(|| format!("it has no column {name}"))?;
            let expected = table
                .field_with_name(name)
                .map_err(|e| e.to_string())?
                .data_type();
            if field.data_type() != expected {
                return Err(format!(
                    "column {name} is {}, the attempts table has {expected}",
                    field.data_type()
                ));
            }
            Ok(index)
        })
        .collect()
}

enum Problem {
    Value(String),
    Overflow,
}

/// Turns one projected batch (types checked by [`check_schema`]) into rows.
fn decode(batch: &RecordBatch, report: &mut Report) -> Result<(), Problem> {
    let column = |name: &str| {
        let array = batch
            .column_by_name(name)
            .ok_or_else(|| Problem::Value(format!("column {name} is missing from a row group")))?;
        // Columns the table declares non-null: a null there is a file some other writer made.
        if !NULLABLE.contains(&name) && array.null_count() > 0 {
            return Err(Problem::Value(format!(
                "column {name} has nulls, which the attempts table never writes"
            )));
        }
        Ok(array.as_ref())
    };
    let event_micros = column(schema::EVENT_TIME)?.as_primitive::<TimestampMicrosecondType>();
    let trace_id = column(schema::TRACE_ID)?.as_string::<i32>();
    let span_id = column(schema::SPAN_ID)?.as_string::<i32>();
    let request_id = column(schema::REQUEST_ID)?.as_string::<i32>();
    let service_name = column(schema::SERVICE_NAME)?.as_string::<i32>();
    let task_type = column(schema::TASK_TYPE)?.as_string::<i32>();
    let attempt_index = column(schema::ATTEMPT_INDEX)?.as_primitive::<Int32Type>();
    let spend_class = column(schema::SPEND_CLASS)?.as_string::<i32>();
    let decision = column(schema::DECISION)?.as_string::<i32>();
    let audited = column(schema::AUDITED)?.as_boolean();
    let usd = column(schema::ESTIMATED_INCREMENTAL_USD)?.as_primitive::<Decimal128Type>();

    for i in 0..batch.num_rows() {
        let estimated_incremental_usd = if usd.is_null(i) {
            None
        } else {
            Some(scaled_i128_to_decimal(usd.value(i)).ok_or_else(|| {
                Problem::Value(format!(
                    "{} {} is too large for an exact decimal",
                    schema::ESTIMATED_INCREMENTAL_USD,
                    usd.value_as_string(i)
                ))
            })?)
        };
        // The report keeps the rows' nanoseconds, like the sink's rows before they were written.
        let micros = event_micros.value(i);
        let event_time = micros.checked_mul(schema::NANOS_PER_MICRO).ok_or_else(|| {
            Problem::Value(format!(
                "{} {micros} µs is past what nanoseconds since 1970 hold (year 2262)",
                schema::EVENT_TIME
            ))
        })?;
        let row = ReportRow {
            event_time,
            trace_id: trace_id.value(i).to_owned(),
            span_id: span_id.value(i).to_owned(),
            request_id: request_id.value(i).to_owned(),
            service_name: service_name.value(i).to_owned(),
            task_type: (!task_type.is_null(i)).then(|| task_type.value(i).to_owned()),
            attempt_index: attempt_index.value(i),
            spend_class: spend_class.value(i).to_owned(),
            decision: decision.value(i).to_owned(),
            audited: audited.value(i),
            estimated_incremental_usd,
        };
        report.add(&row).map_err(|_| Problem::Overflow)?;
    }
    Ok(())
}

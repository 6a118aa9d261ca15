//! The file side of the sink: one open Parquet file per partition date, rotated by rows, bytes
//! and age, and published by an atomic rename once its footer is on disk. For an object store
//! output the same files are written to local staging and published by their upload.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use arrow_array::RecordBatch;
use chrono::NaiveDate;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use super::batch::batch_from_refs;
use super::config::ParquetExporterConfig;
use super::instance;
use super::layout::{TABLE_DIR, WAL_LSN_KEY};
use super::remote::upload::relative_key;
use super::remote::{Staged, UploadError, Uploader};
use super::schema::{attempts_schema, HIGH_CARDINALITY_COLUMNS, UNIQUE_TIME_COLUMNS};
use super::ParquetSinkError;
use crate::config_kernel::join_problems;
use crate::record::AttemptRow;
use crate::wal::LsnRange;

/// Prefix of the hive partition directory name; the date follows as `YYYY-MM-DD`.
const PARTITION_PREFIX: &str = "date=";

/// Extension of completed files; the temporary name is `.<name>.tmp`, which query engines skip
/// because it starts with a dot.
const PARQUET_EXTENSION: &str = "parquet";

/// How many names to try when a generated file name is already taken (only possible when a
/// restart keeps its instance id and the clock went backwards).
const NAME_ATTEMPTS: u32 = 64;

/// Bytes of one column's data (or dictionary) page before it is compressed and set aside.
const DATA_PAGE_BYTES: usize = 64 * 1024;

/// Counters for the metrics layer. Rows count as written only once their file is renamed into
/// place (or, for an object store, uploaded): that is the moment finance can read them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkStats {
    /// Rows in completed files.
    pub rows_written: u64,
    /// Files renamed into place.
    pub files_completed: u64,
    /// Rows accepted into files that are still open.
    pub rows_open: u64,
    /// Rows in files abandoned after a write, sync or rename error.
    pub rows_lost: u64,
}

/// Writes attempt rows to `<output_dir>/attempts/date=YYYY-MM-DD/part-….parquet`.
///
/// Delivery is at least once from the caller's side: rows count as durable only once the file
/// holding them is completed (see the paths returned by each method). Dropping the sink without
/// [`close`](Self::close) removes the open temporary files; nothing half-written becomes visible.
///
/// Made with [`staging`](Self::staging), a file is complete once uploaded: every method returns
/// the URLs of the objects uploaded since the last call, and until its upload succeeded a file's
/// rows count as open and its log records in [`oldest_open_lsn`](Self::oldest_open_lsn).
pub struct ParquetSink {
    table_dir: PathBuf,
    /// When a file is complete: whichever of its bounds is reached first.
    config: ParquetExporterConfig,
    /// Part of every file name, so that collectors sharing an output never pick the same name.
    instance_id: String,
    properties: WriterProperties,
    open: BTreeMap<NaiveDate, OpenFile>,
    stats: SinkStats,
    upload: Option<SinkUpload>,
    /// The directories [`new`](Self::new) created, deepest first. A sink dropped without
    /// [`close`](Self::close) (a run that failed, say on a port in use or a missing input)
    /// removes those still empty: a failed run leaves no empty `attempts/` behind.
    created_dirs: Vec<PathBuf>,
}

/// Where a staging sink's completed files go.
struct SinkUpload {
    uploader: Arc<Uploader>,
    staged: Arc<Staged>,
    /// The staging root: file paths below it are keys below the output prefix.
    root: PathBuf,
}

struct OpenFile {
    temp_path: PathBuf,
    final_path: PathBuf,
    writer: ArrowWriter<File>,
    rows: usize,
    opened_at: Instant,
    /// The write-ahead log records its rows came from; recorded in the footer on completion.
    wal: Option<LsnRange>,
}

impl OpenFile {
    fn estimated_bytes(&self) -> u64 {
        let bytes = self.writer.bytes_written() + self.writer.in_progress_size();
        u64::try_from(bytes).unwrap_or(u64::MAX)
    }
}

/// Rows made into one Arrow batch per partition date, for [`ParquetSink::write_batches`].
/// Building them is a third of a write's CPU and needs no file, so a caller with several
/// threads (`replay`) builds them on its own threads and leaves only the encoding to the sink.
pub struct DatedBatches(Vec<(NaiveDate, RecordBatch)>);

impl DatedBatches {
    /// Every batch is built before any file is touched, so a bad batch leaves no partition
    /// half fed.
    pub fn new(rows: &[AttemptRow]) -> Result<DatedBatches, ParquetSinkError> {
        let mut by_date: BTreeMap<NaiveDate, Vec<&AttemptRow>> = BTreeMap::new();
        for row in rows {
            by_date.entry(row.partition_date()).or_default().push(row);
        }
        by_date
            .into_iter()
            .map(|(date, rows)| Ok((date, batch_from_refs(&rows)?)))
            .collect::<Result<Vec<_>, ParquetSinkError>>()
            .map(DatedBatches)
    }
}

impl ParquetSink {
    /// Prepares `<output_dir>/attempts`, creating it if needed. No file is opened until rows
    /// arrive. `output_dir` is where files go, not `config.output_dir`: `serve` resolves that
    /// to a directory (for an object store, its staging directory). An empty
    /// `config.instance_id` names files after this host and process.
    pub fn new(
        output_dir: impl Into<PathBuf>,
        config: ParquetExporterConfig,
    ) -> Result<Self, ParquetSinkError> {
        config
            .validate()
            .map_err(|problems| ParquetSinkError::InvalidConfig(join_problems(&problems)))?;
        let instance_id = match config.instance_id.as_str() {
            "" => instance::process_instance_id().to_owned(),
            configured => configured.to_owned(),
        };
        let table_dir = output_dir.into().join(TABLE_DIR);
        let created_dirs = table_dir
            .ancestors()
            .take_while(|dir| !dir.as_os_str().is_empty() && !dir.exists())
            .map(Path::to_path_buf)
            .collect();
        create_dir(&table_dir)?;
        Ok(Self {
            properties: writer_properties(&config),
            table_dir,
            config,
            instance_id,
            open: BTreeMap::new(),
            stats: SinkStats::default(),
            upload: None,
            created_dirs,
        })
    }

    /// A sink for an object store output: files are written under `<staging_dir>/attempts/`
    /// exactly as [`new`](Self::new) writes them, and each completed file is handed to
    /// `uploader`, which puts it at the same path below the output's prefix.
    pub fn staging(
        staging_dir: impl Into<PathBuf>,
        config: ParquetExporterConfig,
        uploader: Arc<Uploader>,
    ) -> Result<Self, ParquetSinkError> {
        let root = staging_dir.into();
        let mut sink = Self::new(&root, config)?;
        sink.upload = Some(SinkUpload {
            uploader,
            staged: Arc::default(),
            root,
        });
        Ok(sink)
    }

    /// Queues for upload the completed files an earlier run left in staging (a crash, or a store
    /// that was down at shutdown); their log records stay pinned by this sink until uploaded.
    /// Returns how many.
    pub fn adopt_staged(&mut self) -> Result<usize, ParquetSinkError> {
        let Some(upload) = &self.upload else {
            return Ok(0);
        };
        let files = super::written::completed_files(&upload.root).map_err(|e| {
            ParquetSinkError::Staging(format!(
                "cannot list the files an earlier run left in {}: {e}",
                upload.root.display()
            ))
        })?;
        for path in &files {
            let (wal, rows) =
                super::written::footer_summary(path).map_err(ParquetSinkError::Staging)?;
            stage(upload, path.clone(), rows, wal)?;
        }
        Ok(files.len())
    }

    /// The `attempts` directory the partitions live in.
    pub fn table_dir(&self) -> &Path {
        &self.table_dir
    }

    pub fn stats(&self) -> SinkStats {
        let mut stats = self.stats;
        if let Some(upload) = &self.upload {
            let staged = upload.staged.counts();
            stats.rows_open += staged.pending_rows;
            stats.rows_written = staged.uploaded_rows;
            stats.files_completed = staged.uploaded_files;
        }
        stats
    }

    /// Number of files currently open (at most one per partition date).
    /// Bytes the open files hold in memory: their row groups being built (Arrow's column
    /// buffers and pages not yet written).
    pub fn buffered_bytes(&self) -> u64 {
        self.open
            .values()
            .map(|file| u64::try_from(file.writer.in_progress_size()).unwrap_or(u64::MAX))
            .sum()
    }

    pub fn open_files(&self) -> usize {
        self.open.len()
    }

    /// Appends `rows` to the open file of each row's partition date, completing files that
    /// reach the row or byte bound. Returns the files completed by this call.
    ///
    /// Rows of one date are written in their input order. On an I/O error the affected file is
    /// abandoned (its rows are counted in [`SinkStats::rows_lost`]) and the error returned;
    /// partitions written before it keep their rows.
    pub fn write(&mut self, rows: &[AttemptRow]) -> Result<Vec<PathBuf>, ParquetSinkError> {
        self.write_from_wal(rows, None)
    }

    /// [`write`](Self::write) for rows evaluated from write-ahead log records `wal`: each file
    /// records in its footer which records it covers, so recovery never writes a row twice.
    pub fn write_from_wal(
        &mut self,
        rows: &[AttemptRow],
        wal: Option<LsnRange>,
    ) -> Result<Vec<PathBuf>, ParquetSinkError> {
        let batches = DatedBatches::new(rows)?;
        self.write_batches(&batches, wal)
    }

    /// [`write_from_wal`](Self::write_from_wal) for rows already made into batches, perhaps on
    /// another thread.
    pub fn write_batches(
        &mut self,
        batches: &DatedBatches,
        wal: Option<LsnRange>,
    ) -> Result<Vec<PathBuf>, ParquetSinkError> {
        let mut completed = Vec::new();
        for (date, batch) in &batches.0 {
            self.append(*date, batch, wal, &mut completed)?;
        }
        self.with_uploaded(completed)
    }

    /// [`write_from_wal`](Self::write_from_wal) for rows the caller has already partitioned:
    /// every row of `rows` has the partition date `date`.
    pub fn write_partition(
        &mut self,
        date: NaiveDate,
        rows: &[&AttemptRow],
        wal: Option<LsnRange>,
    ) -> Result<Vec<PathBuf>, ParquetSinkError> {
        debug_assert!(rows.iter().all(|r| r.partition_date() == date));
        let batch = batch_from_refs(rows)?;
        let mut completed = Vec::new();
        self.append(date, &batch, wal, &mut completed)?;
        self.with_uploaded(completed)
    }

    /// Adds the objects uploaded since the last call to a call's completed files; an error once
    /// the uploads ended ([`UploadRetries::Limited`](super::remote::UploadRetries)).
    fn with_uploaded(&self, mut completed: Vec<PathBuf>) -> Result<Vec<PathBuf>, ParquetSinkError> {
        if let Some(upload) = &self.upload {
            if let Some(problem) = upload.staged.failure() {
                return Err(ParquetSinkError::UploadsEnded(problem));
            }
            completed.extend(upload.staged.take_uploaded());
        }
        Ok(completed)
    }

    /// The oldest write-ahead log record with rows in a file not yet complete: the log must be
    /// kept from there on.
    pub fn oldest_open_lsn(&self) -> Option<u64> {
        let staged = self.upload.as_ref().and_then(|u| u.staged.oldest_lsn());
        self.open
            .values()
            .filter_map(|f| f.wal.map(|w| w.min))
            .chain(staged)
            .min()
    }

    /// Completes every file opened at least `max_file_age` before `now`. The caller owns the
    /// clock, which keeps this testable and lets it run on the pipeline's own tick.
    pub fn rotate_expired(&mut self, now: Instant) -> Result<Vec<PathBuf>, ParquetSinkError> {
        let max_age = self.config.max_file_age;
        let expired: Vec<NaiveDate> = self
            .open
            .iter()
            .filter(|(_, file)| now.saturating_duration_since(file.opened_at) >= max_age)
            .map(|(date, _)| *date)
            .collect();
        let completed = self.complete_all(expired)?;
        self.with_uploaded(completed)
    }

    /// Completes every open file. If one fails the others are still completed, and the first
    /// error is returned.
    pub fn flush_all(&mut self) -> Result<Vec<PathBuf>, ParquetSinkError> {
        let dates: Vec<NaiveDate> = self.open.keys().copied().collect();
        let completed = self.complete_all(dates)?;
        self.with_uploaded(completed)
    }

    /// Completes every open file and returns their paths; the shutdown path. A staging sink
    /// also waits, up to its uploader's close timeout, until each of its files is uploaded.
    pub fn close(mut self) -> Result<Vec<PathBuf>, ParquetSinkError> {
        self.created_dirs.clear();
        let mut completed = self.flush_all()?;
        if let Some(upload) = &self.upload {
            let deadline = Instant::now() + upload.uploader.close_timeout();
            if !upload.staged.wait_uploaded(deadline) {
                if let Some(problem) = upload.staged.failure() {
                    return Err(ParquetSinkError::UploadsEnded(problem));
                }
                return Err(ParquetSinkError::NotUploaded {
                    files: upload.staged.counts().pending_files,
                    output: upload.uploader.remote().to_string(),
                    problem: upload.uploader.last_problem(),
                });
            }
            completed.extend(upload.staged.take_uploaded());
        }
        Ok(completed)
    }

    fn append(
        &mut self,
        date: NaiveDate,
        batch: &RecordBatch,
        wal: Option<LsnRange>,
        completed: &mut Vec<PathBuf>,
    ) -> Result<(), ParquetSinkError> {
        let max_rows = self.config.max_rows_per_file;
        let max_bytes = self.config.max_bytes_per_file;
        let mut offset = 0;
        while offset < batch.num_rows() {
            let file = match self.open.entry(date) {
                Entry::Occupied(entry) => entry.into_mut(),
                Entry::Vacant(entry) => entry.insert(create_file(
                    &self.table_dir,
                    &self.properties,
                    &self.instance_id,
                    date,
                )?),
            };
            if let Some(range) = wal {
                file.wal = Some(file.wal.map_or(range, |known| known.widen(range)));
            }
            let take = (max_rows - file.rows).min(batch.num_rows() - offset);
            let full = match file.writer.write(&batch.slice(offset, take)) {
                Ok(()) => {
                    file.rows += take;
                    file.rows >= max_rows || file.estimated_bytes() >= max_bytes
                }
                Err(source) => {
                    let path = file.temp_path.clone();
                    self.abandon(date);
                    return Err(ParquetSinkError::Write { path, source });
                }
            };
            self.stats.rows_open += take as u64;
            offset += take;
            crate::crash::reached(crate::crash::Point::ParquetWrite);
            if full {
                if let Some(file) = self.open.remove(&date) {
                    completed.extend(self.complete(file)?);
                }
            }
        }
        Ok(())
    }

    fn complete_all(&mut self, dates: Vec<NaiveDate>) -> Result<Vec<PathBuf>, ParquetSinkError> {
        let mut completed = Vec::with_capacity(dates.len());
        let mut first_error = None;
        for date in dates {
            let Some(file) = self.open.remove(&date) else {
                continue;
            };
            match self.complete(file) {
                Ok(path) => completed.extend(path),
                Err(error) => {
                    tracing::error!(%error, "cannot complete parquet file");
                    first_error.get_or_insert(error);
                }
            }
        }
        match first_error {
            Some(error) => Err(error),
            None => Ok(completed),
        }
    }

    /// Writes the footer, fsyncs, renames the file into place and fsyncs the directory, so the
    /// file is durable before anyone is told it exists. A failed directory sync still returns the
    /// error, but the file is already visible and counts as written. A staging sink hands the
    /// file to its uploader instead and returns no path: it is complete once uploaded.
    fn complete(&mut self, file: OpenFile) -> Result<Option<PathBuf>, ParquetSinkError> {
        let rows = file.rows as u64;
        let wal = file.wal;
        let final_path = file.final_path.clone();
        self.stats.rows_open -= rows;
        let published = publish(file);
        if let Some(upload) = &self.upload {
            // A renamed file is complete on disk whatever its directory sync said: upload it.
            let staged = match published {
                Ok(path) => stage(upload, path, rows, wal).map(|()| None),
                Err(PublishError::Visible(error)) => {
                    stage(upload, final_path, rows, wal).and(Err(error))
                }
                Err(PublishError::Hidden(error)) => Err(error),
            };
            if staged.is_err() {
                // Not uploaded in this run: the log keeps the rows, the next start the file.
                self.stats.rows_lost += rows;
            }
            return staged;
        }
        match published {
            Ok(path) => {
                self.stats.rows_written += rows;
                self.stats.files_completed += 1;
                Ok(Some(path))
            }
            Err(PublishError::Visible(error)) => {
                self.stats.rows_written += rows;
                self.stats.files_completed += 1;
                Err(error)
            }
            Err(PublishError::Hidden(error)) => {
                self.stats.rows_lost += rows;
                Err(error)
            }
        }
    }

    fn abandon(&mut self, date: NaiveDate) {
        if let Some(file) = self.open.remove(&date) {
            let rows = file.rows as u64;
            self.stats.rows_open -= rows;
            self.stats.rows_lost += rows;
            discard(file);
        }
    }
}

impl Drop for ParquetSink {
    fn drop(&mut self) {
        for (_, file) in std::mem::take(&mut self.open) {
            tracing::warn!(
                path = %file.temp_path.display(),
                rows = file.rows,
                "parquet sink dropped without close; discarding the open file"
            );
            discard(file);
        }
        for dir in &self.created_dirs {
            // Fails, and keeps the directory, once anything (a partition, a file) is in it.
            if fs::remove_dir(dir).is_err() {
                break;
            }
        }
    }
}

/// Hands a completed staging file to the uploader.
fn stage(
    upload: &SinkUpload,
    path: PathBuf,
    rows: u64,
    wal: Option<LsnRange>,
) -> Result<(), ParquetSinkError> {
    let Some(relative) = relative_key(&upload.root, &path) else {
        return Err(ParquetSinkError::Staging(format!(
            "{} is not below the staging directory {}",
            path.display(),
            upload.root.display()
        )));
    };
    upload
        .uploader
        .stage(&upload.staged, path.clone(), &relative, rows, wal)
        .map_err(|source| match source {
            UploadError::GaveUp(problem) => ParquetSinkError::UploadsEnded(problem),
            source => ParquetSinkError::Stage { path, source },
        })
}

fn create_file(
    table_dir: &Path,
    properties: &WriterProperties,
    instance_id: &str,
    date: NaiveDate,
) -> Result<OpenFile, ParquetSinkError> {
    let dir = table_dir.join(format!("{PARTITION_PREFIX}{}", date.format("%Y-%m-%d")));
    if !dir.is_dir() {
        create_dir(&dir)?;
        // The new partition's entry in the table directory must survive a crash too.
        sync_dir(table_dir)?;
    }

    let mut last_error = None;
    for _ in 0..NAME_ATTEMPTS {
        let name = unique_file_name(instance_id);
        let final_path = dir.join(&name);
        let temp_path = dir.join(format!(".{name}.tmp"));
        if final_path.exists() {
            continue;
        }
        let file = match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp_path)
        {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                last_error = Some(error);
                continue;
            }
            Err(source) => {
                return Err(ParquetSinkError::Create {
                    path: temp_path,
                    source,
                })
            }
        };
        let writer = ArrowWriter::try_new(file, attempts_schema(), Some(properties.clone()))
            .map_err(|source| ParquetSinkError::Write {
                path: temp_path.clone(),
                source,
            })?;
        return Ok(OpenFile {
            temp_path,
            final_path,
            writer,
            rows: 0,
            opened_at: Instant::now(),
            wal: None,
        });
    }
    Err(ParquetSinkError::Create {
        path: dir,
        source: last_error
            .unwrap_or_else(|| io::Error::new(io::ErrorKind::AlreadyExists, "no free file name")),
    })
}

/// How far [`publish`] got before an error: once the rename is done the file is visible and
/// complete, and its rows must not be reported as lost.
enum PublishError {
    Hidden(ParquetSinkError),
    Visible(ParquetSinkError),
}

fn publish(file: OpenFile) -> Result<PathBuf, PublishError> {
    let OpenFile {
        temp_path,
        final_path,
        mut writer,
        wal,
        ..
    } = file;
    if let Some(range) = wal {
        writer.append_key_value_metadata(parquet::file::metadata::KeyValue::new(
            WAL_LSN_KEY.to_owned(),
            format!("{}-{}", range.min, range.max),
        ));
    }
    if let Err(error) = finish_temp(writer, &temp_path, &final_path) {
        remove_temp(&temp_path);
        return Err(PublishError::Hidden(error));
    }
    crate::crash::reached(crate::crash::Point::ParquetRename);
    if let Some(dir) = final_path.parent() {
        sync_dir(dir).map_err(PublishError::Visible)?;
    }
    Ok(final_path)
}

fn finish_temp(
    writer: ArrowWriter<File>,
    temp_path: &Path,
    final_path: &Path,
) -> Result<(), ParquetSinkError> {
    let handle = writer
        .into_inner()
        .map_err(|source| ParquetSinkError::Write {
            path: temp_path.to_path_buf(),
            source,
        })?;
    handle.sync_all().map_err(|source| ParquetSinkError::Sync {
        path: temp_path.to_path_buf(),
        source,
    })?;
    drop(handle);
    fs::rename(temp_path, final_path).map_err(|source| ParquetSinkError::Rename {
        from: temp_path.to_path_buf(),
        to: final_path.to_path_buf(),
        source,
    })
}

fn discard(file: OpenFile) {
    let OpenFile {
        temp_path, writer, ..
    } = file;
    drop(writer);
    remove_temp(&temp_path);
}

fn remove_temp(path: &Path) {
    if let Err(error) = fs::remove_file(path) {
        if error.kind() != io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), %error, "cannot remove temporary parquet file");
        }
    }
}

fn create_dir(path: &Path) -> Result<(), ParquetSinkError> {
    fs::create_dir_all(path).map_err(|source| ParquetSinkError::Create {
        path: path.to_path_buf(),
        source,
    })
}

/// A rename is only durable once the directory holding the new entry is synced.
#[cfg(unix)]
fn sync_dir(path: &Path) -> Result<(), ParquetSinkError> {
    File::open(path)
        .and_then(|dir| dir.sync_all())
        .map_err(|source| ParquetSinkError::Sync {
            path: path.to_path_buf(),
            source,
        })
}

#[cfg(not(unix))]
fn sync_dir(_path: &Path) -> Result<(), ParquetSinkError> {
    Ok(())
}

/// `part-<instance id>-<unix ms>-<sequence>.parquet`: the instance id separates collectors
/// sharing an output, the milliseconds separate restarts, and the process-wide sequence
/// separates files (and sinks) within one process.
fn unique_file_name(instance_id: &str) -> String {
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let sequence = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    let unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis())
        .unwrap_or_default();
    format!("part-{instance_id}-{unix_ms}-{sequence:06}.{PARQUET_EXTENSION}")
}

fn writer_properties(config: &ParquetExporterConfig) -> WriterProperties {
    // Dictionary encoding is on by default, which suits the low-cardinality columns (models,
    // decision, spend_class, billing_group…); ids are unique per row, so it is switched off there.
    let mut builder = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_dictionary_enabled(true)
        .set_max_row_group_row_count(Some(config.row_group_rows))
        // Each column buffers its current page uncompressed: 45 columns of 1 MiB pages (the
        // default) would hold tens of MiB per open file.
        .set_data_page_size_limit(DATA_PAGE_BYTES)
        .set_dictionary_page_size_limit(DATA_PAGE_BYTES);
    // Nor do min/max statistics of random ids prune anything; computing them was a visible
    // share of encoding.
    for column in HIGH_CARDINALITY_COLUMNS {
        builder = builder
            .set_column_dictionary_enabled(ColumnPath::from(*column), false)
            .set_column_statistics_enabled(ColumnPath::from(*column), EnabledStatistics::None);
    }
    for column in UNIQUE_TIME_COLUMNS {
        builder = builder.set_column_dictionary_enabled(ColumnPath::from(*column), false);
    }
    builder.build()
}

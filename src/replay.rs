//! `replay`: OTLP JSON lines (the OpenTelemetry Collector file exporter's format) → Parquet.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rust_decimal::Decimal;

use crate::assemble::{Assembler, AssemblyBounds};
use crate::contract::otlp_json::read_facts;
use crate::contract::{AttributeKeys, SpanFacts};
use crate::engine::Engine;
use crate::pipeline::shard_of;
use crate::processor::{Arrival, Counts, Processor};
use crate::record::{AttemptRow, Decision, SpendClass};
use crate::sinks::parquet::remote::{self, LogObserver, UploadRetries, Uploader};
use crate::sinks::parquet::{
    DatedBatches, ObjectStoreConfig, ParquetExporterConfig, ParquetSink, ParquetSinkError,
    RemoteOutput,
};

const WRITE_BATCH_ROWS: usize = 8192;
/// How long a replay to an object store waits for its last uploads: as long as they make
/// progress, since the retry budget ([`ReplayOptions::upload_retries`]) ends a failing one.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// A line that could not be read, reported as `FILE:LINE: reason`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine {
    pub file: String,
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for BadLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.reason)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("cannot read {file}: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Sink(#[from] ParquetSinkError),
    #[error("{0}")]
    Store(String),
}

/// What a replay did, for the summary it prints.
#[derive(Debug, Default)]
pub struct ReplaySummary {
    pub lines: usize,
    /// What the spans were; its request and row counts are the fields below.
    pub ingest: Counts,
    pub requests: usize,
    pub rows: usize,
    pub rows_by_decision: BTreeMap<Decision, usize>,
    pub incremental_usd_by_spend_class: BTreeMap<SpendClass, Decimal>,
    pub unaudited: usize,
    pub files_written: Vec<PathBuf>,
    pub bad_lines: Vec<BadLine>,
    /// Requests evaluated before the input ended because the held requests reached
    /// `max_pending_bytes`: a later span of one of them is judged as a late one (SPEC §2).
    pub evaluated_early: u64,
}

impl ReplaySummary {
    /// Adds what one stream did.
    fn absorb(&mut self, other: ReplaySummary) {
        self.lines += other.lines;
        self.ingest.add(other.ingest);
        self.requests += other.requests;
        self.rows += other.rows;
        for (decision, n) in other.rows_by_decision {
            *self.rows_by_decision.entry(decision).or_default() += n;
        }
        for (class, usd) in other.incremental_usd_by_spend_class {
            let total = self
                .incremental_usd_by_spend_class
                .entry(class)
                .or_default();
            *total = total.checked_add(usd).unwrap_or(*total);
        }
        self.unaudited += other.unaudited;
        self.files_written.extend(other.files_written);
        self.bad_lines.extend(other.bad_lines);
        self.evaluated_early += other.evaluated_early;
    }

    fn count(&mut self, row: &AttemptRow) {
        self.rows += 1;
        *self.rows_by_decision.entry(row.decision).or_default() += 1;
        if !row.audited {
            self.unaudited += 1;
        }
        if row.attempt_index > 0 {
            if let Some(usd) = row.estimated_incremental_usd {
                let total = self
                    .incremental_usd_by_spend_class
                    .entry(row.spend_class)
                    .or_default();
                *total = total.checked_add(usd).unwrap_or(*total);
            }
        }
    }
}

impl fmt::Display for ReplaySummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "read {} lines: {} spans ({} attempts, {} logical requests, {} duplicates, {} other)",
            self.lines,
            self.ingest.spans,
            self.ingest.attempts,
            self.ingest.logical,
            self.ingest.duplicates,
            self.ingest.passthrough
        )?;
        writeln!(
            f,
            "evaluated {} requests into {} rows",
            self.requests, self.rows
        )?;
        writeln!(f, "rows by decision:")?;
        for (decision, n) in &self.rows_by_decision {
            writeln!(f, "  {:<16} {n}", decision.as_str())?;
        }
        writeln!(f, "incremental USD by spend class (retries and fallbacks):")?;
        for (class, usd) in &self.incremental_usd_by_spend_class {
            writeln!(f, "  {:<16} {}", class.as_str(), usd.normalize())?;
        }
        writeln!(f, "unaudited rows: {}", self.unaudited)?;
        if self.evaluated_early > 0 {
            writeln!(
                f,
                "evaluated {} requests before the input ended, to stay within max_pending_bytes",
                self.evaluated_early
            )?;
        }
        for file in &self.files_written {
            writeln!(f, "wrote {}", file.display())?;
        }
        if !self.bad_lines.is_empty() {
            writeln!(f, "skipped {} malformed lines", self.bad_lines.len())?;
        }
        Ok(())
    }
}

/// How `replay` bounds its memory, and where rows go.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// File rotation and naming; its `output_dir` is unused (the output is an argument).
    pub sink: ParquetExporterConfig,
    /// Estimated bytes of requests held while their spans are read (as serve's
    /// `processors.retry_spend.max_pending_bytes`). Over it the oldest pending requests are
    /// evaluated early, counted in [`ReplaySummary::evaluated_early`].
    pub max_pending_bytes: u64,
    /// With an object store output: retries of a failed upload before the replay ends with an
    /// error (a permanent error, an HTTP 4xx other than 408 and 429, ends it at once).
    pub upload_retries: u32,
    /// Streams the spans are sharded into by trace, each on its own thread with its share of
    /// `max_pending_bytes`; 0: one per core the process may use. Rows do not depend on it.
    pub workers: usize,
}

/// `replay`'s default budget: larger than `serve`'s, since a batch job's rows should be those of
/// grouping the whole input for any file a machine reads comfortably, and nothing else shares
/// its memory.
pub const DEFAULT_MAX_PENDING_BYTES: u64 = 256 * 1024 * 1024;

/// `replay`'s default upload retries: with the default backoff (200 ms doubling to 30 s), a
/// store that fails for about two minutes ends the replay.
pub const DEFAULT_UPLOAD_RETRIES: u32 = 10;

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            sink: ParquetExporterConfig::default(),
            max_pending_bytes: DEFAULT_MAX_PENDING_BYTES,
            upload_retries: DEFAULT_UPLOAD_RETRIES,
            workers: 0,
        }
    }
}

/// Where a replay to an object store writes its files before their upload, and what is left of
/// it when the replay does not complete (an error, SIGTERM or SIGINT): nothing, so that only the
/// objects already uploaded remain.
#[derive(Debug)]
pub struct Staging {
    dir: PathBuf,
    /// The default directory, made for this replay: removed however it ends.
    temporary: bool,
    /// Not there before this replay: removed whole when the replay does not complete. A
    /// directory that was keeps everything but this replay's files.
    created: bool,
    /// Names of this replay's files start with this (its instance id in the sink's names).
    file_prefix: String,
    /// Held while the replay writes into `dir`, and by [`abandon`](Self::abandon), which then
    /// never races a file being written.
    writing: Mutex<()>,
}

impl Staging {
    /// `dir` (`--staging`), else a new directory under `parent` (`--wal-dir`), else under the
    /// system's temporary directory. Files are named after `instance_id` (empty: the
    /// process's, as the sink does).
    pub fn new(dir: Option<&Path>, parent: Option<&Path>, instance_id: &str) -> Staging {
        let instance_id = match instance_id {
            "" => crate::sinks::parquet::instance::process_instance_id(),
            id => id,
        };
        let (dir, temporary) = match dir {
            Some(dir) => (dir.to_path_buf(), false),
            None => (
                parent
                    .map_or_else(std::env::temp_dir, Path::to_path_buf)
                    .join(format!("retry-spend-replay-{instance_id}")),
                true,
            ),
        };
        Staging {
            created: temporary || !dir.exists(),
            temporary,
            file_prefix: format!("part-{instance_id}-"),
            writing: Mutex::new(()),
            dir,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn writing(&self) -> MutexGuard<'_, ()> {
        self.writing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Removes what this replay staged, waiting for a file being written to be complete; the
    /// caller then ends the process (the replay writes nothing after this returns only because
    /// the process ends: the lock stays held until then).
    pub fn abandon(&self) {
        let writing = self.writing();
        self.remove_unfinished();
        std::mem::forget(writing);
    }

    /// After a replay that did not complete: its staged files, or the directory it made.
    fn remove_unfinished(&self) {
        let removed = match self.created {
            true => remove_dir_all(&self.dir),
            false => self.remove_own_files(&self.dir.join(crate::sinks::parquet::TABLE_DIR)),
        };
        if let Err(e) = removed {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot remove the staged files");
        }
    }

    /// This replay's files (and their temporaries) under `dir`, then the directories they leave
    /// empty.
    fn remove_own_files(&self, dir: &Path) -> std::io::Result<()> {
        let entries = match std::fs::read_dir(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            entries => entries?,
        };
        for entry in entries {
            let entry = entry?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.file_type()?.is_dir() {
                self.remove_own_files(&path)?;
                // Left when something else is in it.
                let _ = std::fs::remove_dir(&path);
            } else if name.trim_start_matches('.').starts_with(&self.file_prefix) {
                match std::fs::remove_file(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

/// `remove_dir_all`, where a directory already gone is no error.
fn remove_dir_all(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        result => result,
    }
}

/// Reads every input (`-` is stdin) in order and streams its spans through the assembler
/// `serve` uses: a request is evaluated and written as soon as its `attempt_count` attempts are
/// in, the rest when the input ends (all lines and files are one window, SPEC §2), or earlier
/// when the byte budget is reached. Writes Parquet.
/// Malformed lines are collected in the summary (and passed to `on_bad_line` as they are found);
/// the rest is processed.
pub fn replay(
    inputs: &[PathBuf],
    engine: &Engine,
    output_dir: &Path,
    options: ReplayOptions,
    on_bad_line: impl FnMut(&BadLine),
) -> Result<ReplaySummary, ReplayError> {
    let ReplayOptions {
        sink,
        max_pending_bytes,
        workers,
        ..
    } = options;
    replay_with(
        inputs,
        engine,
        max_pending_bytes,
        workers,
        || ParquetSink::new(output_dir, sink.clone()),
        &Mutex::new(()),
        on_bad_line,
    )
}

/// [`replay`] to an object store: files are written under `staging` and uploaded whole as each
/// is completed; it returns once every one is uploaded (`files_written` lists their URLs). The
/// store is asked first, so bad credentials fail before any input is read. A permanent store
/// error, or a file still failing after `upload_retries` retries, ends it with an error naming
/// the object. Unless it succeeds, what it staged is removed: only uploaded objects remain.
pub fn replay_to_store(
    inputs: &[PathBuf],
    engine: &Engine,
    output: &RemoteOutput,
    store: &ObjectStoreConfig,
    staging: &Staging,
    options: ReplayOptions,
    on_bad_line: impl FnMut(&BadLine),
) -> Result<ReplaySummary, ReplayError> {
    let result = upload_replay(inputs, engine, output, store, staging, options, on_bad_line);
    match &result {
        Ok(_) if staging.temporary => {
            if let Err(e) = remove_dir_all(&staging.dir) {
                tracing::warn!(dir = %staging.dir.display(), error = %e, "cannot remove the staging directory");
            }
        }
        Ok(_) => {}
        Err(_) => staging.remove_unfinished(),
    }
    result
}

fn upload_replay(
    inputs: &[PathBuf],
    engine: &Engine,
    output: &RemoteOutput,
    store: &ObjectStoreConfig,
    staging: &Staging,
    options: ReplayOptions,
    on_bad_line: impl FnMut(&BadLine),
) -> Result<ReplaySummary, ReplayError> {
    let client =
        remote::build_store(output, store).map_err(|e| ReplayError::Store(e.to_string()))?;
    let ReplayOptions {
        sink,
        max_pending_bytes,
        upload_retries,
        workers,
    } = options;
    let uploader = Uploader::start(
        client,
        output.clone(),
        store,
        UploadRetries::Limited(upload_retries),
        UPLOAD_TIMEOUT,
        None,
        Arc::new(LogObserver),
    )
    .map_err(|e| ReplayError::Store(e.to_string()))?;
    uploader.probe().map_err(|e| {
        ReplayError::Store(format!("cannot use the object store output {output}: {e}; check its credentials, region, endpoint and that the bucket exists"))
    })?;
    replay_with(
        inputs,
        engine,
        max_pending_bytes,
        workers,
        || ParquetSink::staging(&staging.dir, sink.clone(), Arc::clone(&uploader)),
        &staging.writing,
        on_bad_line,
    )
}

/// `writing` is held whenever the sink writes files (not while it waits for their upload).
///
/// The spans go to `shards` streams by trace, as `serve` shards them: each owns an assembler
/// with its share of `max_pending_bytes` and runs on its own thread, while this thread reads,
/// routes and counts lines. They make their rows into Arrow batches and hand them to one writer
/// thread, which owns the sink, so a replay writes one file per date and rotation whatever the
/// number of streams, and a stream never waits while another's batch is encoded. A trace's
/// spans all reach one stream in input order, line by line, so every request is judged exactly
/// as one stream would judge it.
fn replay_with(
    inputs: &[PathBuf],
    engine: &Engine,
    max_pending_bytes: u64,
    workers: usize,
    open_sink: impl FnOnce() -> Result<ParquetSink, ParquetSinkError>,
    writing: &Mutex<()>,
    mut on_bad_line: impl FnMut(&BadLine),
) -> Result<ReplaySummary, ReplayError> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let shards = match workers {
        0 => cores,
        n => n,
    };
    let bounds = AssemblyBounds {
        // Only the byte budget bounds a replay: no count cap, and no time passes (`now` stays
        // put), so nothing is evaluated because of a wait.
        max_pending_requests: usize::MAX,
        max_pending_bytes,
        ..AssemblyBounds::default()
    };
    let keys = engine.policies.attribute_keys();
    let mut summary = ReplaySummary::default();
    // Set when reading failed: the streams stop instead of evaluating what they hold, and the
    // sink is dropped unfinished (removing what it created).
    let aborted = std::sync::atomic::AtomicBool::new(false);
    let sink = {
        let _writing = lock(writing);
        open_sink()?
    };
    let sink = std::thread::scope(|scope| -> Result<ParquetSink, ReplayError> {
        // The streams make their rows into Arrow batches and one thread encodes them into the
        // files: a stream never waits for another's encoding, and a few batches in flight
        // bound what waits for the writer.
        let (batches, written) = std::sync::mpsc::sync_channel::<DatedBatches>(shards);
        let writer = std::thread::Builder::new()
            .name("replay-writer".to_owned())
            .spawn_scoped(scope, move || {
                let mut sink = sink;
                let mut files = Vec::new();
                for batch in written {
                    let _writing = lock(writing);
                    files.extend(sink.write_batches(&batch, None)?);
                }
                Ok::<_, ParquetSinkError>((sink, files))
            })
            .map_err(|e| ReplayError::Read {
                file: "replay writer thread".to_owned(),
                source: e,
            })?;
        let mut senders = Vec::with_capacity(shards);
        let mut streams = Vec::with_capacity(shards);
        for shard in 0..shards {
            // A few chunks per stream in flight bound what waits between reading and assembly.
            let (sender, lines) = std::sync::mpsc::sync_channel::<Vec<Vec<SpanFacts>>>(4);
            senders.push(sender);
            let (bounds, aborted, batches) = (&bounds, &aborted, batches.clone());
            let thread = std::thread::Builder::new()
                .name(format!("replay-{shard}"))
                .spawn_scoped(scope, move || {
                    let mut stream = Stream {
                        processor: Processor::new(engine.clone(), Assembler::new(bounds, shards)),
                        now: Instant::now(),
                        batches,
                        rows: Vec::with_capacity(WRITE_BATCH_ROWS),
                        summary: ReplaySummary::default(),
                    };
                    for chunk in lines {
                        for spans in chunk {
                            stream.offer(spans);
                            if !stream.write_ready()? {
                                // The writer stopped; its error is the replay's.
                                return Ok(stream.into_summary());
                            }
                        }
                    }
                    if aborted.load(std::sync::atomic::Ordering::Acquire) {
                        return Ok(stream.into_summary());
                    }
                    stream.finish()
                })
                .map_err(|e| ReplayError::Read {
                    file: "replay stream thread".to_owned(),
                    source: e,
                })?;
            streams.push(thread);
        }
        drop(batches);

        let read = read_inputs(
            inputs,
            keys,
            cores,
            &senders,
            &mut summary,
            &mut on_bad_line,
        );
        if read.is_err() {
            aborted.store(true, std::sync::atomic::Ordering::Release);
        }
        // The streams end once their input does, and the writer once the streams do.
        drop(senders);
        let mut failed = read.err();
        for thread in streams {
            match thread.join() {
                Ok(Ok(part)) => summary.absorb(part),
                Ok(Err(e)) => failed = failed.or(Some(e)),
                Err(_) => {
                    failed = failed.or(Some(ReplayError::Store(
                        "a replay stream panicked".to_owned(),
                    )))
                }
            }
        }
        let sink = match writer.join() {
            Ok(Ok((sink, files))) => {
                summary.files_written.extend(files);
                Some(sink)
            }
            Ok(Err(e)) => {
                failed = failed.or(Some(e.into()));
                None
            }
            Err(_) => {
                failed = failed.or(Some(ReplayError::Store(
                    "the replay writer panicked".to_owned(),
                )));
                None
            }
        };
        match (failed, sink) {
            (None, Some(sink)) => Ok(sink),
            (Some(e), _) => Err(e),
            (None, None) => Err(ReplayError::Store("the replay writer stopped".to_owned())),
        }
    })?;
    let mut sink = sink;
    {
        let _writing = lock(writing);
        summary.files_written.extend(sink.flush_all()?);
    }
    // Every file is complete: what is left is waiting for their upload.
    summary.files_written.extend(sink.close()?);
    // The streams' files were absorbed in the order the streams ended; names sort by time.
    summary.files_written.sort();
    Ok(summary)
}

/// Reads every input (`-` is stdin) in order on `parsers` threads and routes each line's spans
/// to the stream of their trace. Stops early when a stream has stopped (its error is the
/// replay's).
fn read_inputs(
    inputs: &[PathBuf],
    keys: &AttributeKeys,
    parsers: usize,
    streams: &[std::sync::mpsc::SyncSender<Vec<Vec<SpanFacts>>>],
    summary: &mut ReplaySummary,
    on_bad_line: &mut impl FnMut(&BadLine),
) -> Result<(), ReplayError> {
    let shards = streams.len();
    for input in inputs {
        let name = input.display().to_string();
        let read_err = |source| ReplayError::Read {
            file: name.clone(),
            source,
        };
        // Unbuffered: `parse_lines` reads blocks of its own.
        let reader: Box<dyn Read + Send> = if input.as_os_str() == "-" {
            Box::new(std::io::stdin())
        } else {
            Box::new(std::fs::File::open(input).map_err(read_err)?)
        };
        let mut stopped = false;
        let mut offer = |chunk: Parsed| {
            if stopped {
                return;
            }
            let mut routed: Vec<Vec<Vec<SpanFacts>>> = vec![Vec::new(); shards];
            for line in chunk {
                summary.lines += 1;
                match line {
                    Ok(spans) if shards == 1 => routed[0].push(spans),
                    Ok(spans) => {
                        // Sized first: a line's spans are hundreds of facts, and growing a
                        // vector of them step by step copied each several times.
                        let of: Vec<usize> = spans
                            .iter()
                            .map(|facts| shard_of(&facts.trace_id, shards))
                            .collect();
                        let mut counts = vec![0; shards];
                        of.iter().for_each(|&shard| counts[shard] += 1);
                        let mut by_shard: Vec<Vec<SpanFacts>> =
                            counts.into_iter().map(Vec::with_capacity).collect();
                        for (facts, shard) in spans.into_iter().zip(of) {
                            by_shard[shard].push(facts);
                        }
                        for (shard, spans) in by_shard.into_iter().enumerate() {
                            if !spans.is_empty() {
                                routed[shard].push(spans);
                            }
                        }
                    }
                    Err((number, reason)) => {
                        let bad = BadLine {
                            file: name.clone(),
                            line: number,
                            reason,
                        };
                        on_bad_line(&bad);
                        summary.bad_lines.push(bad);
                    }
                }
            }
            for (stream, lines) in streams.iter().zip(routed) {
                if !lines.is_empty() && stream.send(lines).is_err() {
                    stopped = true;
                    return;
                }
            }
        };
        parse_lines(reader, keys, parsers, &mut offer).map_err(read_err)?;
        if stopped {
            return Ok(());
        }
    }
    Ok(())
}

fn lock(mutex: &Mutex<()>) -> MutexGuard<'_, ()> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One stream of spans on their way to rows: its processor, the batch of rows not yet
/// written, and what it did.
struct Stream {
    processor: Processor,
    /// Time stands still in a replay: requests are evaluated when complete, at their budget,
    /// or at the end of the input, never because of a wait.
    now: Instant,
    /// To the replay's one writer.
    batches: std::sync::mpsc::SyncSender<DatedBatches>,
    rows: Vec<AttemptRow>,
    summary: ReplaySummary,
}

impl Stream {
    /// Offers every span of one line.
    fn offer(&mut self, spans: Vec<SpanFacts>) {
        for facts in spans {
            self.processor.offer(facts, self.now, Arrival::Live);
        }
    }

    /// Evaluates the requests made ready, and hands rows to the writer once a batch is full: a
    /// batch per request would pay the Arrow and Parquet per-batch costs for every one to three
    /// rows. False once the writer has stopped.
    fn write_ready(&mut self) -> Result<bool, ParquetSinkError> {
        loop {
            let start = self.rows.len();
            // Spans inference let go made no row; in `replay` nothing is forwarded.
            let done = self
                .processor
                .evaluate(&mut self.rows, WRITE_BATCH_ROWS, |_, _, _| {});
            let summary = &mut self.summary;
            self.rows[start..].iter().for_each(|row| summary.count(row));
            if (self.rows.len() >= WRITE_BATCH_ROWS || done.more) && !self.write_rows()? {
                return Ok(false);
            }
            if !done.more {
                return Ok(true);
            }
        }
    }

    fn write_rows(&mut self) -> Result<bool, ParquetSinkError> {
        if self.rows.is_empty() {
            return Ok(true);
        }
        let batches = DatedBatches::new(&self.rows)?;
        self.rows.clear();
        Ok(self.batches.send(batches).is_ok())
    }

    /// At the end of the input: evaluates what is still held and hands its rows to the writer
    /// (the files are completed once every stream is done).
    fn finish(mut self) -> Result<ReplaySummary, ReplayError> {
        self.processor.drain_all();
        if self.write_ready()? {
            self.write_rows()?;
        }
        Ok(self.into_summary())
    }

    /// What the stream did: its own counts of rows, and the processor's of the rest.
    fn into_summary(mut self) -> ReplaySummary {
        let counts = self.processor.counts();
        self.summary.ingest = counts;
        self.summary.requests = usize::try_from(counts.requests).unwrap_or(usize::MAX);
        self.summary.evaluated_early = counts.evicted;
        self.summary
    }
}

/// Each non-blank line of a chunk: its spans read into facts, or (line number, reason).
type Parsed = Vec<Result<Vec<SpanFacts>, (usize, String)>>;

/// The least a block of input holds, and how many of the longest line so far it holds at
/// least. A line cut by the block's end is copied to the start of the next (half a line per
/// block on average); blocks of four lines copied less but held 25 MiB more in flight for no
/// measurable gain (BENCHMARKS.md, issue 18, fifteenth pass).
const BLOCK_BYTES: usize = 1 << 20;
const BLOCK_LINES: usize = 2;

/// Whole lines read from an input in one block, as the reader hands them to a parser.
struct Block {
    /// Its place in the input: parsed blocks are offered in this order.
    index: usize,
    bytes: Vec<u8>,
    lines: Lines,
}

/// Each non-blank line of a block: its number in the input and its bytes in the block, without
/// `\n` or `\r\n`.
type Lines = Vec<(usize, Range<usize>)>;

/// Reads `reader` in blocks of whole lines and parses the lines on `parsers` threads (JSON is
/// most of replay's cost), handing each block's facts to `offer` in input order, so grouping
/// sees the spans exactly as a sequential read would. The kernel copies the input into the
/// block a parser reads: read line by line through a buffer, every byte was copied once more.
fn parse_lines(
    reader: Box<dyn Read + Send>,
    keys: &AttributeKeys,
    parsers: usize,
    offer: &mut dyn FnMut(Parsed),
) -> std::io::Result<()> {
    use std::sync::mpsc::{sync_channel, Receiver};
    use std::sync::Mutex;

    let (work_tx, work_rx) = sync_channel::<Block>(parsers * 2);
    let (done_tx, done_rx) = sync_channel::<(usize, Parsed)>(parsers * 2);
    // One slot per block read and not yet offered: parsed blocks waiting for an earlier, slower
    // one cannot pile up without bound.
    let (slot_tx, slot_rx) = sync_channel::<()>(parsers * 4);
    // Parsed blocks go back to the reader: fresh memory is memory the kernel zeroes, and the
    // parser that frees a block is not the reader that allocates the next.
    let (spare_tx, spare_rx) = sync_channel::<Vec<u8>>(parsers * 4);
    let work_rx: Mutex<Receiver<Block>> = Mutex::new(work_rx);
    std::thread::scope(|scope| {
        for _ in 0..parsers.max(1) {
            let (work_rx, done_tx, spare_tx) = (&work_rx, done_tx.clone(), spare_tx.clone());
            scope.spawn(move || loop {
                // A poisoned lock means another parser panicked; stop taking work.
                let next = match work_rx.lock() {
                    Ok(rx) => rx.recv(),
                    Err(_) => return,
                };
                let Ok(block) = next else { return };
                let parsed = block
                    .lines
                    .iter()
                    .map(|(number, range)| {
                        read_facts(&block.bytes[range.clone()], keys)
                            .map_err(|e| (*number, e.to_string()))
                    })
                    .collect();
                let _ = spare_tx.try_send(block.bytes);
                if done_tx.send((block.index, parsed)).is_err() {
                    return;
                }
            });
        }
        drop((done_tx, spare_tx));
        let reading = scope.spawn(move || -> std::io::Result<()> {
            let mut reader = reader;
            let mut blocks = Blocks::default();
            let mut index = 0;
            loop {
                let spare = spare_rx.try_recv().unwrap_or_default();
                let Some((bytes, lines)) = blocks.next(&mut reader, spare)? else {
                    return Ok(());
                };
                if lines.is_empty() {
                    continue;
                }
                let block = Block {
                    index,
                    bytes,
                    lines,
                };
                if slot_tx.send(()).is_err() || work_tx.send(block).is_err() {
                    return Ok(());
                }
                index += 1;
            }
        });
        // Blocks finish out of order; hold the early ones until their turn.
        let mut waiting = BTreeMap::new();
        let mut next = 0;
        for (index, parsed) in done_rx {
            waiting.insert(index, parsed);
            while let Some(parsed) = waiting.remove(&next) {
                let _ = slot_rx.recv();
                offer(parsed);
                next += 1;
            }
        }
        reading
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the replay reader panicked")))
    })
}

/// Cuts an input into blocks of whole lines.
#[derive(Default)]
struct Blocks {
    /// The start of a line the last block cut, to begin the next one.
    carry: Vec<u8>,
    /// Lines so far, blank ones included: the number of the next line is one more.
    lines: usize,
    longest: usize,
    ended: bool,
}

impl Blocks {
    /// The next block of whole lines, read into `bytes` (cleared first), with its non-blank
    /// lines; `None` at the end of the input. A line with no `\n` after it ends the input.
    /// From a pipe a block waits until it is full or the input ends, which a batch job that
    /// judges what is still held at the end of its input loses nothing by.
    fn next(
        &mut self,
        reader: &mut dyn Read,
        mut bytes: Vec<u8>,
    ) -> std::io::Result<Option<(Vec<u8>, Lines)>> {
        if self.ended {
            return Ok(None);
        }
        bytes.clear();
        bytes.append(&mut self.carry);
        let target = BLOCK_BYTES.max(self.longest.saturating_mul(BLOCK_LINES));
        bytes.reserve(target.saturating_sub(bytes.len()).max(1));
        // Fill the block (`read_to_end` reads into its spare capacity without zeroing it first);
        // a full block without a line end grows until the line fits.
        let whole = loop {
            let spare = bytes.capacity() - bytes.len();
            let read = Read::take(&mut *reader, spare as u64).read_to_end(&mut bytes)?;
            if read < spare {
                self.ended = true;
                break bytes.len();
            }
            match memchr::memrchr(b'\n', &bytes) {
                Some(last) => break last + 1,
                None => bytes.reserve(bytes.len()),
            }
        };
        self.carry.extend_from_slice(&bytes[whole..]);
        bytes.truncate(whole);
        let mut lines = Vec::new();
        let mut start = 0;
        while start < bytes.len() {
            let end = memchr::memchr(b'\n', &bytes[start..]).map_or(bytes.len(), |at| start + at);
            self.lines += 1;
            self.longest = self.longest.max(end - start);
            // As `lines()` would: without its `\n` or `\r\n`, so errors name the line's own
            // columns.
            let mut line = start..end;
            if bytes[line.clone()].ends_with(b"\r") {
                line.end -= 1;
            }
            if !bytes[line.clone()].trim_ascii().is_empty() {
                lines.push((self.lines, line));
            }
            start = end + 1;
        }
        if self.ended && bytes.is_empty() {
            return Ok(None);
        }
        Ok(Some((bytes, lines)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hands out at most `step` bytes per read, as a pipe does.
    struct Trickle<'a> {
        bytes: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = buf.len().min(self.step).min(self.bytes.len());
            buf[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    /// Every line `Blocks` cuts from `input` read `step` bytes at a time: (number, text).
    fn lines_of(input: &[u8], step: usize) -> Vec<(usize, Vec<u8>)> {
        let mut reader = Trickle { bytes: input, step };
        let mut blocks = Blocks::default();
        let mut lines = Vec::new();
        while let Some((bytes, ranges)) = blocks
            .next(&mut reader, Vec::new())
            .expect("reading from memory")
        {
            lines.extend(
                ranges
                    .into_iter()
                    .map(|(number, range)| (number, bytes[range].to_vec())),
            );
        }
        lines
    }

    #[test]
    fn lines_are_numbered_as_the_input_has_them_blank_ones_counted_and_skipped() {
        let input = b"a\n\n  \r\nb\r\nc";
        let expected = vec![(1, b"a".to_vec()), (4, b"b".to_vec()), (5, b"c".to_vec())];
        for step in [1, 3, usize::MAX] {
            assert_eq!(lines_of(input, step), expected, "step {step}");
        }
        assert_eq!(lines_of(b"a\n", 1), vec![(1, b"a".to_vec())]);
        assert!(lines_of(b"", 1).is_empty());
        assert!(lines_of(b"\n\n", 1).is_empty());
    }

    #[test]
    fn lines_longer_than_a_block_and_lines_cut_by_one_arrive_whole() {
        // A line past the block's size, then enough lines that some are cut by a block's end
        // and carried into the next.
        let long = vec![b'x'; BLOCK_BYTES * 2 + 17];
        let mut input = long.clone();
        input.push(b'\n');
        let short: Vec<Vec<u8>> = (0..5_000)
            .map(|i| format!("line {i} {}", "y".repeat(i % 997)).into_bytes())
            .collect();
        for line in &short {
            input.extend_from_slice(line);
            input.push(b'\n');
        }
        let lines = lines_of(&input, 64 * 1024);
        assert_eq!(lines.len(), 1 + short.len());
        assert_eq!(lines[0], (1, long));
        for (i, line) in short.iter().enumerate() {
            assert_eq!(lines[i + 1], (i + 2, line.clone()));
        }
    }
}

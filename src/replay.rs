//! `replay`: OTLP JSON lines (the OpenTelemetry Collector file exporter's format) → Parquet.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rust_decimal::Decimal;

use crate::assemble::{Grouper, Offer, PlainSpans};
use crate::contract::otlp_json::read_facts;
use crate::contract::{AttributeKeys, HttpTry, SpanFacts, SpanKind};
use crate::pipeline::{Engine, IngestStats};
use crate::record::{AttemptRow, Decision, SpendClass};
use crate::sinks::parquet::remote::{self, LogObserver, StoreOptions, UploadOptions, Uploader};
use crate::sinks::parquet::{ParquetSink, ParquetSinkError, RemoteOutput, SinkOptions};

const WRITE_BATCH_ROWS: usize = 8192;
/// How long a replay to an object store waits for its last uploads before giving up.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(300);

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
    pub ingest: IngestStats,
    pub requests: usize,
    pub rows: usize,
    pub rows_by_decision: BTreeMap<Decision, usize>,
    pub incremental_usd_by_spend_class: BTreeMap<SpendClass, Decimal>,
    pub unaudited: usize,
    pub files_written: Vec<PathBuf>,
    pub bad_lines: Vec<BadLine>,
}

impl ReplaySummary {
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
        for file in &self.files_written {
            writeln!(f, "wrote {}", file.display())?;
        }
        if !self.bad_lines.is_empty() {
            writeln!(f, "skipped {} malformed lines", self.bad_lines.len())?;
        }
        Ok(())
    }
}

/// Reads every input (`-` is stdin), groups across all of them (inferring the attempts of plain
/// instrumentation over the whole input), evaluates and writes Parquet.
/// Malformed lines are collected in the summary (and passed to `on_bad_line` as they are found);
/// the rest is processed.
pub fn replay(
    inputs: &[PathBuf],
    engine: &Engine,
    output_dir: &Path,
    sink_options: SinkOptions,
    on_bad_line: impl FnMut(&BadLine),
) -> Result<ReplaySummary, ReplayError> {
    replay_with(
        inputs,
        engine,
        || ParquetSink::new(output_dir, sink_options),
        on_bad_line,
    )
}

/// [`replay`] to an object store: files are written under `staging` and uploaded whole as each
/// is completed; it returns once every one is uploaded (`files_written` lists their URLs). The
/// store is asked first, so bad credentials fail before any input is read.
pub fn replay_to_store(
    inputs: &[PathBuf],
    engine: &Engine,
    output: &RemoteOutput,
    store: &StoreOptions,
    staging: &Path,
    sink_options: SinkOptions,
    on_bad_line: impl FnMut(&BadLine),
) -> Result<ReplaySummary, ReplayError> {
    let client =
        remote::build_store(output, store).map_err(|e| ReplayError::Store(e.to_string()))?;
    let uploader = Uploader::start(
        client,
        output.clone(),
        UploadOptions {
            close_timeout: UPLOAD_TIMEOUT,
            ..UploadOptions::default()
        },
        Arc::new(LogObserver),
    )
    .map_err(|e| ReplayError::Store(e.to_string()))?;
    uploader.probe().map_err(|e| {
        ReplayError::Store(format!("cannot use the object store output {output}: {e}; check its credentials, region, endpoint and that the bucket exists"))
    })?;
    replay_with(
        inputs,
        engine,
        || ParquetSink::staging(staging, sink_options, uploader),
        on_bad_line,
    )
}

fn replay_with(
    inputs: &[PathBuf],
    engine: &Engine,
    open_sink: impl FnOnce() -> Result<ParquetSink, ParquetSinkError>,
    mut on_bad_line: impl FnMut(&BadLine),
) -> Result<ReplaySummary, ReplayError> {
    let mut summary = ReplaySummary::default();
    let mut grouper = Grouper::default();
    let mut plain = PlainSpans::default();

    let keys = engine.policies.attribute_keys();
    let parsers = std::thread::available_parallelism().map_or(1, |n| n.get());
    for input in inputs {
        let name = input.display().to_string();
        let read_err = |source| ReplayError::Read {
            file: name.clone(),
            source,
        };
        let reader: Box<dyn BufRead + Send> = if input.as_os_str() == "-" {
            Box::new(BufReader::new(std::io::stdin()))
        } else {
            Box::new(BufReader::new(
                std::fs::File::open(input).map_err(read_err)?,
            ))
        };
        let mut offer = |chunk: Parsed| {
            for line in chunk {
                match line {
                    Ok(spans) => {
                        summary.lines += 1;
                        summary
                            .ingest
                            .add(take_facts(&mut grouper, &mut plain, spans));
                    }
                    Err((number, reason)) => {
                        summary.lines += 1;
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
        };
        parse_lines(reader, keys, parsers, &mut offer).map_err(read_err)?;
    }

    let mut sink = open_sink()?;
    // Rows go to the sink in large batches: a batch per request would pay the Arrow and Parquet
    // per-batch costs for every one to three rows.
    let mut rows = Vec::with_capacity(WRITE_BATCH_ROWS);
    for request in grouper.drain_all().into_iter().chain(plain.infer()) {
        summary.requests += 1;
        let start = rows.len();
        rows.extend(engine.evaluate(&request));
        rows[start..].iter().for_each(|row| summary.count(row));
        if rows.len() >= WRITE_BATCH_ROWS {
            summary.files_written.extend(sink.write(&rows)?);
            rows.clear();
        }
    }
    summary.files_written.extend(sink.write(&rows)?);
    summary.files_written.extend(sink.close()?);
    Ok(summary)
}

/// Each non-blank line of a chunk: its spans read into facts, or (line number, reason).
type Parsed = Vec<Result<Vec<SpanFacts>, (usize, String)>>;

/// Lines per chunk handed to a parser thread: enough to amortise the hand-over.
const CHUNK_LINES: usize = 64;

/// Reads `reader` line by line and parses the lines on `parsers` threads (JSON is most of
/// replay's cost), handing each chunk's facts to `offer` in input order, so grouping sees the
/// spans exactly as a sequential read would.
fn parse_lines(
    reader: Box<dyn BufRead + Send>,
    keys: &AttributeKeys,
    parsers: usize,
    offer: &mut dyn FnMut(Parsed),
) -> std::io::Result<()> {
    use std::sync::mpsc::{sync_channel, Receiver};
    use std::sync::Mutex;

    type Chunk = (usize, Vec<(usize, String)>);
    let (work_tx, work_rx) = sync_channel::<Chunk>(parsers * 2);
    let (done_tx, done_rx) = sync_channel::<(usize, Parsed)>(parsers * 2);
    let work_rx: Mutex<Receiver<Chunk>> = Mutex::new(work_rx);
    std::thread::scope(|scope| {
        for _ in 0..parsers.max(1) {
            let (work_rx, done_tx) = (&work_rx, done_tx.clone());
            scope.spawn(move || loop {
                // A poisoned lock means another parser panicked; stop taking work.
                let next = match work_rx.lock() {
                    Ok(rx) => rx.recv(),
                    Err(_) => return,
                };
                let Ok((index, lines)) = next else { return };
                let parsed = lines
                    .into_iter()
                    .map(|(number, line)| {
                        read_facts(line.as_bytes(), keys).map_err(|e| (number, e.to_string()))
                    })
                    .collect();
                if done_tx.send((index, parsed)).is_err() {
                    return;
                }
            });
        }
        drop(done_tx);
        let reading = scope.spawn(move || -> std::io::Result<()> {
            let mut chunk = Vec::with_capacity(CHUNK_LINES);
            let mut index = 0;
            for (number, line) in reader.lines().enumerate() {
                let line = line?;
                if line.trim().is_empty() {
                    continue;
                }
                chunk.push((number + 1, line));
                if chunk.len() == CHUNK_LINES {
                    let full = std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK_LINES));
                    if work_tx.send((index, full)).is_err() {
                        return Ok(());
                    }
                    index += 1;
                }
            }
            if !chunk.is_empty() {
                let _ = work_tx.send((index, chunk));
            }
            Ok(())
        });
        // Chunks finish out of order; hold the early ones until their turn.
        let mut waiting = BTreeMap::new();
        let mut next = 0;
        for (index, parsed) in done_rx {
            waiting.insert(index, parsed);
            while let Some(parsed) = waiting.remove(&next) {
                offer(parsed);
                next += 1;
            }
        }
        reading
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the replay reader panicked")))
    })
}

/// Offers every span of one line: plain GenAI spans and HTTP tries are held for inference,
/// everything else goes to the grouper.
fn take_facts(grouper: &mut Grouper, plain: &mut PlainSpans, spans: Vec<SpanFacts>) -> IngestStats {
    let mut stats = IngestStats::default();
    for facts in spans {
        stats.spans += 1;
        let counter = match facts.kind {
            SpanKind::SingleAttempt => match plain.offer_genai(facts) {
                true => &mut stats.attempts,
                false => &mut stats.duplicates,
            },
            // HTTP tries count as other spans: most are no retries of anything.
            SpanKind::HttpTry => match HttpTry::of(&facts).map(|t| plain.offer_try(t)) {
                Some(false) => &mut stats.duplicates,
                _ => &mut stats.passthrough,
            },
            _ => match grouper.offer(facts) {
                Offer::Attempt(_) | Offer::Plain => &mut stats.attempts,
                Offer::Logical => &mut stats.logical,
                Offer::Duplicate => &mut stats.duplicates,
                Offer::Passthrough | Offer::HeldTry => &mut stats.passthrough,
            },
        };
        *counter += 1;
    }
    stats
}

//! `replay`: OTLP JSON lines (the OpenTelemetry Collector file exporter's format) → Parquet.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rust_decimal::Decimal;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use crate::assemble::{Grouper, Offer, PlainSpans};
use crate::contract::{service_name, AttributeKeys, HttpTry, SpanFacts, SpanKind};
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

    for input in inputs {
        let name = input.display().to_string();
        let read_err = |source| ReplayError::Read {
            file: name.clone(),
            source,
        };
        let reader: Box<dyn BufRead> = if input.as_os_str() == "-" {
            Box::new(std::io::stdin().lock())
        } else {
            Box::new(BufReader::new(
                std::fs::File::open(input).map_err(read_err)?,
            ))
        };
        for (number, line) in reader.lines().enumerate() {
            let line = line.map_err(read_err)?;
            if line.trim().is_empty() {
                continue;
            }
            summary.lines += 1;
            match crate::contract::otlp_json::parse_request(line.as_bytes()) {
                Ok(request) => summary.ingest.add(take_spans(
                    &mut grouper,
                    &mut plain,
                    &request,
                    engine.policies.attribute_keys(),
                )),
                Err(e) => {
                    let bad = BadLine {
                        file: name.clone(),
                        line: number + 1,
                        reason: e.to_string(),
                    };
                    on_bad_line(&bad);
                    summary.bad_lines.push(bad);
                }
            }
        }
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

/// Offers every span of `request`: plain GenAI spans and HTTP tries are held for inference,
/// everything else goes to the grouper.
fn take_spans(
    grouper: &mut Grouper,
    plain: &mut PlainSpans,
    request: &ExportTraceServiceRequest,
    keys: &AttributeKeys,
) -> IngestStats {
    let mut stats = IngestStats::default();
    for resource_spans in &request.resource_spans {
        let resource = resource_spans
            .resource
            .as_ref()
            .map_or(&[][..], |r| r.attributes.as_slice());
        let service = service_name(resource);
        for span in resource_spans.scope_spans.iter().flat_map(|s| &s.spans) {
            stats.spans += 1;
            let facts = SpanFacts::from_span_with(span, &service, resource, keys);
            let counter = match facts.kind {
                SpanKind::SingleAttempt => match plain.offer_genai(facts) {
                    true => &mut stats.attempts,
                    false => &mut stats.duplicates,
                },
                // HTTP tries count as other spans: most are no retries of anything.
                SpanKind::HttpTry => {
                    match HttpTry::read(span, &facts).map(|t| plain.offer_try(t)) {
                        Some(false) => &mut stats.duplicates,
                        _ => &mut stats.passthrough,
                    }
                }
                _ => match grouper.offer(facts) {
                    Offer::Attempt(_) | Offer::Plain => &mut stats.attempts,
                    Offer::Logical => &mut stats.logical,
                    Offer::Duplicate => &mut stats.duplicates,
                    Offer::Passthrough => &mut stats.passthrough,
                },
            };
            *counter += 1;
        }
    }
    stats
}

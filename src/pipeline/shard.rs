//! A pipeline shard of `serve`: one thread that owns the assembler, the rules and a Parquet
//! sink for the traces of its shard, fed by the log stage through a bounded channel.
//!
//! One owner means no locks on the hot path, and a clean end: when every sender is gone the
//! worker evaluates what is pending, completes every file and returns. It reports to the
//! [`Watermark`] how much of the write-ahead log it still needs: everything from the oldest
//! record that still has a span pending or a row in a file not yet complete.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::{
    regroup, Engine, ExportPart, MemoryLimit, PipelineMessage, RawSpan, SpanBuffers, SummaryStore,
    Watermark,
};
use crate::assemble::{Assembler, FastMap, Offer, Summary};
use crate::contract::{SpanId, TraceId};
use crate::processor::{Arrival, Processor};
use crate::record::{AttemptRow, AttemptSource};
use crate::sinks::forward::{enrich, ForwardHandle};
use crate::sinks::parquet::{ParquetSink, ParquetSinkError, WrittenRows};
use crate::telemetry::{Health, Metrics};
use crate::wal::LsnRange;

pub const PARQUET_COMPONENT: &str = "parquet";
/// How often the worker tells the log which segments it no longer needs.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
/// How long evaluated rows wait in the batch for more before they go to the sink.
const FLUSH_EVERY: Duration = Duration::from_millis(200);
/// How often, at most, a changed finished-request cache is saved: the whole file is rewritten
/// each time, and until then the log keeps the records that would rebuild it.
const SUMMARIES_EVERY: Duration = Duration::from_secs(5);

/// What the worker did, returned when it ends.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ShardSummary {
    pub requests: u64,
    pub rows: u64,
    pub rows_lost: u64,
    /// Every row is in a completed file: the write-ahead log holds nothing more of value.
    pub all_written: bool,
}

impl ShardSummary {
    /// Two shards' summaries as one.
    pub fn merge(self, other: ShardSummary) -> ShardSummary {
        ShardSummary {
            requests: self.requests + other.requests,
            rows: self.rows + other.rows,
            rows_lost: self.rows_lost + other.rows_lost,
            all_written: self.all_written && other.all_written,
        }
    }
}

pub struct Shard {
    processor: Processor,
    sink: Option<ParquetSink>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    forward: Option<ForwardHandle>,
    /// Attempt spans kept to be forwarded, enriched, once their row is known.
    held: FastMap<(TraceId, SpanId), RawSpan>,
    rows_reported: u64,
    summary: ShardSummary,
    shard: usize,
    watermark: Option<Arc<Watermark>>,
    pending_reported: u64,
    /// The LSN the next export will have: everything below it has reached the worker.
    next_lsn: u64,
    /// Rows of files a sink error abandoned: kept in the log until a restart recovers them.
    pinned_lsn: Option<u64>,
    last_checkpoint: Instant,
    last_tick: Instant,
    /// Rows whose write failed, retried on every tick: the probe that notices recovery.
    unwritten: Vec<(Vec<AttemptRow>, Option<LsnRange>)>,
    /// Rows evaluated but not yet handed to the sink: Arrow and Parquet pay per batch, so
    /// rows of many exports go together.
    batch: Vec<AttemptRow>,
    batch_lsns: Option<LsnRange>,
    summaries: Option<Saved>,
    /// Spans whose rows completed files held at start-up: inference, which runs on whole traces
    /// after recovery, makes their rows again, and they are dropped then.
    recovered: WrittenRows,
    /// Where this shard reports what it holds, for `service.memory_limit`.
    memory: Option<Arc<MemoryLimit>>,
    /// Where emptied span vectors go back to the receivers.
    buffers: Option<Arc<SpanBuffers>>,
}

/// Where the finished-request cache is saved, and how current the saved copy is.
struct Saved {
    store: Arc<SummaryStore>,
    /// The cache's change count when last saved (`None`: not yet saved since the start).
    changes: Option<u64>,
    at: Instant,
    /// Every log record below this had been ingested when the saved copy was current: the
    /// cache's part of what the log must keep.
    covers_below: u64,
}

/// Rows handed to the sink at once (also on every tick, barrier and at shutdown). Encoding a
/// batch stalls the shard, and with its queue full an export's answer waits for it: 4,096 rows
/// were 8 ms of stall and a 16 ms p99 for one export in flight; 1,024 rows keep it under 10 ms
/// for the same throughput (BENCHMARKS.md).
const WRITE_BATCH_ROWS: usize = 1024;
/// A row waiting in a batch, with its strings, as the memory limit counts it.
const BATCH_ROW_BYTES: u64 = 1024;

impl Shard {
    pub fn new(
        engine: Engine,
        assembler: Assembler,
        sink: ParquetSink,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
        forward: Option<ForwardHandle>,
    ) -> Shard {
        Shard {
            processor: Processor::new(engine, assembler),
            sink: Some(sink),
            metrics,
            health,
            forward,
            held: FastMap::default(),
            rows_reported: 0,
            summary: ShardSummary::default(),
            shard: 0,
            watermark: None,
            pending_reported: 0,
            next_lsn: 1,
            pinned_lsn: None,
            last_checkpoint: Instant::now(),
            last_tick: Instant::now(),
            unwritten: Vec::new(),
            recovered: HashSet::new(),
            batch: Vec::with_capacity(WRITE_BATCH_ROWS),
            batch_lsns: None,
            summaries: None,
            memory: None,
            buffers: None,
        }
    }

    /// Reports what this shard holds to `memory` as it runs.
    pub fn with_memory_limit(mut self, memory: Arc<MemoryLimit>) -> Self {
        self.memory = Some(memory);
        self
    }

    /// Gives each export's emptied span vector back to the receivers.
    pub fn with_span_buffers(mut self, buffers: Arc<SpanBuffers>) -> Self {
        self.buffers = Some(buffers);
        self
    }

    /// Requests, the finished cache, rows waiting for the sink and the open files' buffers.
    fn report_memory(&self) {
        if let Some(memory) = &self.memory {
            let rows = (self.batch.len()
                + self.unwritten.iter().map(|(r, _)| r.len()).sum::<usize>())
                as u64
                * BATCH_ROW_BYTES;
            let files = self.sink.as_ref().map_or(0, ParquetSink::buffered_bytes);
            let held = u64::try_from(self.processor.assembler().held_bytes()).unwrap_or(u64::MAX);
            memory.report(self.shard, held.saturating_add(rows).saturating_add(files));
        }
    }

    /// Saves this shard's finished-request cache in `store` at checkpoints and at the end.
    pub fn with_summaries(mut self, store: Arc<SummaryStore>) -> Self {
        self.summaries = Some(Saved {
            store,
            changes: None,
            at: Instant::now(),
            covers_below: 0,
        });
        self
    }

    /// Makes this worker shard `shard`, reporting what it needs of the log to `watermark`.
    pub fn with_watermark(mut self, shard: usize, watermark: Arc<Watermark>) -> Self {
        self.shard = shard;
        self.watermark = Some(watermark);
        self
    }

    /// Restores the finished requests saved before a restart (`restored`, oldest first), then
    /// replays this shard's parts of the write-ahead log. Attempts in `written` already have
    /// their row in a completed file: they count as earlier attempts, never as rows again.
    pub fn recover(
        &mut self,
        restored: Vec<Summary>,
        records: Vec<(u64, ExportPart)>,
        written: &WrittenRows,
    ) {
        let now = Instant::now();
        let written_spans: HashSet<(TraceId, SpanId)> = written
            .iter()
            .map(|&(trace, span, _)| (trace, span))
            .collect();
        self.processor.assembler_mut().restore(restored);
        for (lsn, part) in records {
            self.ingest(part, now, Some(lsn), &written_spans, true);
            self.next_lsn = self.next_lsn.max(lsn + 1);
        }
        self.processor.assembler_mut().end_recovery();
        if self.processor.assembler().pending_requests() > 0 {
            self.recovered = written.clone();
        }
        self.checkpoint(now, true);
    }

    /// Runs until every sender is dropped, then evaluates everything pending and completes
    /// every file. Call on a thread of its own: it blocks. The worker owns its timer: it waits
    /// for the next message or its next deadline (`Shard::next_wake`), whichever comes first;
    /// `clock` is the runtime whose timers it waits on.
    pub fn run(
        mut self,
        mut messages: mpsc::Receiver<PipelineMessage>,
        clock: tokio::runtime::Handle,
    ) -> ShardSummary {
        let nothing_written = HashSet::new();
        loop {
            self.report_memory();
            let now = Instant::now();
            let wake = self.next_wake();
            if wake <= now {
                self.tick(now);
                continue;
            }
            let deadline = tokio::time::Instant::from_std(wake);
            // The timer is made inside the runtime's context, which `block_on` enters.
            let next =
                clock.block_on(async { tokio::time::timeout_at(deadline, messages.recv()).await });
            let message = match next {
                Ok(Some(message)) => message,
                Ok(None) => break,
                Err(_) => continue,
            };
            let now = Instant::now();
            match message {
                PipelineMessage::Export { part, lsn, permit } => {
                    self.ingest(part, now, Some(lsn), &nothing_written, false);
                    self.next_lsn = self.next_lsn.max(lsn + 1);
                    drop(permit);
                }
                PipelineMessage::Barrier(done) => {
                    // A barrier is also the moment to notice a sink that can write again.
                    self.flush_batch();
                    self.retry_unwritten();
                    let _ = done.send(());
                }
                PipelineMessage::Reload(engine) => self.processor.set_engine(*engine),
                PipelineMessage::Pause(resume) => {
                    let _ = resume.blocking_recv();
                }
            }
        }
        self.processor.drain_all();
        self.evaluate();
        self.report_pending();
        self.flush_batch();
        self.close_sink();
        self.summary.all_written = self.summary.rows_lost == 0 && self.pinned_lsn.is_none();
        self.checkpoint(Instant::now(), true);
        self.report_memory();
        self.summary
    }

    /// `replayed`: the part comes from the write-ahead log at start-up.
    fn ingest(
        &mut self,
        part: ExportPart,
        now: Instant,
        lsn: Option<u64>,
        written: &HashSet<(TraceId, SpanId)>,
        replayed: bool,
    ) {
        let mut duplicates = 0;
        let mut passthrough = Vec::new();
        let raw = part.raw.filter(|_| self.forward.is_some());
        let mut spans = part.spans;
        for (i, facts) in spans.drain(..).enumerate() {
            let id = (facts.trace_id, facts.span_id);
            let arrival = if written.contains(&id) {
                Arrival::Written
            } else if replayed {
                Arrival::Replayed
            } else {
                Arrival::Live
            };
            // The processor keeps each held span's log record with it (`Origins`).
            let offer = self.processor.offer_from(facts, now, arrival, lsn);
            let raw_span = || raw.as_ref().and_then(|r| r.span(i));
            match offer {
                Offer::Attempt(_) => {
                    // An attempt already written before a restart makes no row again, so
                    // holding it for its enriched copy would hold it forever.
                    if !written.contains(&id) {
                        if let Some(span) = raw_span() {
                            self.held.insert(id, span);
                        }
                    }
                }
                Offer::Plain => {
                    if let Some(span) = raw_span() {
                        self.held.insert(id, span);
                    }
                }
                Offer::Duplicate => duplicates += 1,
                Offer::Logical | Offer::Passthrough | Offer::HeldTry => {
                    if let Some(span) = raw_span().and_then(|s| s.decode()) {
                        passthrough.push(span);
                    }
                }
            }
        }
        if let Some(buffers) = &self.buffers {
            buffers.give(spans);
        }
        // Replayed copies of spans restored as finished context were counted when they came.
        if duplicates > 0 && !replayed {
            self.metrics.duplicate_spans(duplicates);
        }
        if let Some(forward) = &self.forward {
            if !passthrough.is_empty() {
                forward.send(regroup(passthrough));
            }
        }
        self.evaluate();
        self.report_pending();
    }

    /// When the worker must act without a message: the assembler's next group deadline, the
    /// next flush of rows waiting in the batch (or retry of rows a sink refused), and the next
    /// checkpoint, which also lets go of logical spans and HTTP tries that waited in vain and
    /// completes files that are old enough.
    fn next_wake(&self) -> Instant {
        let mut wake = self.last_checkpoint + CHECKPOINT_EVERY;
        if let Some(deadline) = self.processor.assembler().next_deadline() {
            wake = wake.min(deadline);
        }
        if !self.batch.is_empty() || !self.unwritten.is_empty() {
            wake = wake.min(self.last_tick + FLUSH_EVERY);
        }
        wake
    }

    fn tick(&mut self, now: Instant) {
        self.last_tick = now;
        self.processor.expire(now);
        self.evaluate();
        self.flush_batch();
        self.retry_unwritten();
        if let Some(sink) = &mut self.sink {
            let result = sink.rotate_expired(now);
            self.after_sink(result.map(|files| files.len()), None);
        }
        self.report_pending();
        if now.duration_since(self.last_checkpoint) >= CHECKPOINT_EVERY {
            self.last_checkpoint = now;
            self.checkpoint(now, false);
        }
    }

    /// Shards share one gauge: each adds the change in its own count.
    fn report_pending(&mut self) {
        let now = self.processor.assembler().pending_requests() as u64;
        self.metrics
            .adjust_requests_pending(self.pending_reported, now);
        self.pending_reported = now;
    }

    /// Saves the finished-request cache when it changed (at most every [`SUMMARIES_EVERY`]
    /// unless `force`d), then tells the watermark which records of the log this shard still
    /// needs. In that order: a record is released only once the saved cache reflects it.
    fn checkpoint(&mut self, now: Instant, force: bool) {
        let summaries_need = self.save_summaries(now, force);
        let Some(watermark) = self.watermark.clone() else {
            return;
        };
        let oldest_needed = [
            // Pending groups, waiting logical spans, spans held for inference.
            self.processor.assembler().oldest_origin(),
            self.sink.as_ref().and_then(ParquetSink::oldest_open_lsn),
            self.batch_lsns.map(|r| r.min),
            self.pinned_lsn,
            summaries_need,
        ]
        .into_iter()
        .flatten()
        .min();
        watermark.report(self.shard, self.next_lsn.saturating_sub(1), oldest_needed);
    }

    /// Saves the finished cache if it changed and it is time; returns the oldest log record the
    /// saved copy does not reflect yet, if any (the log keeps it: after a crash its replay
    /// rebuilds what the saved copy lacks).
    fn save_summaries(&mut self, now: Instant, force: bool) -> Option<u64> {
        let saved = self.summaries.as_mut()?;
        let changes = self.processor.assembler().finished_changes();
        let due =
            force || saved.changes.is_none() || now.duration_since(saved.at) >= SUMMARIES_EVERY;
        if saved.changes != Some(changes) && due {
            saved.at = now;
            let encoded = self.processor.assembler().encode_finished();
            match saved.store.save(self.shard, &encoded.parts()) {
                Ok(()) => saved.changes = Some(changes),
                Err(e) => {
                    // Only context is at stake, never rows: the log is not held for it.
                    tracing::warn!(file = %saved.store.path(self.shard).display(), error = %e, "cannot save the finished-request summaries; after a restart, late retries of requests finished since the last save are judged without their earlier attempts");
                    saved.changes = Some(changes);
                }
            }
        }
        if saved.changes == Some(changes) {
            saved.covers_below = self.next_lsn;
            None
        } else {
            Some(saved.covers_below)
        }
    }

    /// Writes again the rows whose write failed; once that works, the sink is healthy again.
    fn retry_unwritten(&mut self) {
        if self.unwritten.is_empty() {
            return;
        }
        for (rows, lsns) in std::mem::take(&mut self.unwritten) {
            self.write_rows(rows, lsns);
        }
        if self.unwritten.is_empty() {
            tracing::info!("parquet output is writable again; accepting exports");
            self.health.clear_problem(PARQUET_COMPONENT);
        }
    }

    /// Writes rows one partition at a time, so a failure keeps exactly the rows that did not
    /// reach a file for the next retry.
    fn write_rows(&mut self, mut rows: Vec<AttemptRow>, lsns: Option<LsnRange>) {
        self.write_rows_from(&mut rows, lsns);
    }

    /// [`Shard::write_rows`] without giving up the vector, so the batch keeps its capacity.
    fn write_rows_from(&mut self, rows: &mut Vec<AttemptRow>, lsns: Option<LsnRange>) {
        // Partitioned once, by reference: sorting the rows themselves moved every ~700-byte
        // row, and the sink grouped them by date again.
        let mut by_date: Vec<(chrono::NaiveDate, Vec<&AttemptRow>)> = Vec::new();
        for row in rows.iter() {
            let date = row.partition_date();
            match by_date.iter_mut().find(|(d, _)| *d == date) {
                Some((_, refs)) => refs.push(row),
                None => by_date.push((date, vec![row])),
            }
        }
        by_date.sort_unstable_by_key(|(date, _)| *date);
        for (date, refs) in by_date {
            let Some(sink) = &mut self.sink else { return };
            let result = sink.write_partition(date, &refs, lsns);
            let failed = result.is_err();
            self.after_sink(result.map(|files| files.len()), lsns);
            if failed {
                self.unwritten
                    .push((refs.into_iter().cloned().collect(), lsns));
            }
        }
        rows.clear();
    }

    /// Evaluates every ready request into the write batch, writing full batches as they fill.
    fn evaluate(&mut self) {
        loop {
            // Rows go straight into the write batch (taken out while `self` is borrowed below).
            let mut batch = std::mem::take(&mut self.batch);
            let start = batch.len();
            let recovered = &self.recovered;
            let mut lsns: Option<LsnRange> = None;
            let done =
                self.processor
                    .evaluate(&mut batch, WRITE_BATCH_ROWS, |request, rows, before| {
                        lsns = LsnRange::widen_optional(lsns, request.origins);
                        if !recovered.is_empty()
                            && request.attempt_source != AttemptSource::Declared
                        {
                            drop_recovered(recovered, rows, before);
                        }
                    });
            lsns = LsnRange::widen_optional(lsns, done.consumed_origins);
            if done.evicted > 0 {
                self.metrics.requests_evicted(done.evicted);
            }
            if done.inferred_duplicates > 0 {
                self.metrics.duplicate_spans(done.inferred_duplicates);
            }
            if done.late_attempts > 0 {
                self.metrics.late_attempts(done.late_attempts);
            }
            if !self.recovered.is_empty() && self.processor.assembler().pending_requests() == 0 {
                self.recovered = HashSet::new();
            }
            self.summary.requests += done.requests;
            let rows = &batch[start..];
            self.forward_enriched(rows);
            // Plain spans that made no row of their own (the GenAI span of an SDK retry loop)
            // go on as they came.
            self.forward_unenriched(&done.consumed);
            if !rows.is_empty() {
                self.summary.rows += rows.len() as u64;
                self.metrics.record_rows(rows);
                self.batch_lsns = LsnRange::widen_optional(self.batch_lsns, lsns);
            }
            self.batch = batch;
            if self.batch.len() >= WRITE_BATCH_ROWS || done.more {
                self.flush_batch();
            }
            if !done.more {
                break;
            }
        }
    }

    fn flush_batch(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let mut rows = std::mem::take(&mut self.batch);
        let lsns = self.batch_lsns.take();
        self.write_rows_from(&mut rows, lsns);
        self.batch = rows;
    }

    fn forward_unenriched(&mut self, ids: &[(TraceId, SpanId)]) {
        let Some(forward) = &self.forward else { return };
        let spans: Vec<_> = ids
            .iter()
            .filter_map(|id| self.held.remove(id))
            .filter_map(|span| span.decode())
            .collect();
        if !spans.is_empty() {
            forward.send(regroup(spans));
        }
    }

    fn forward_enriched(&mut self, rows: &[AttemptRow]) {
        if rows.is_empty() {
            return;
        }
        let Some(forward) = &self.forward else { return };
        let mut batch = Vec::with_capacity(rows.len());
        // Last first: a span that made several rows (a call's spanless tries share its id) is
        // enriched with its last attempt's values.
        for row in rows.iter().rev() {
            let id = (row.trace_id, row.span_id);
            let Some((origin, mut resource_spans)) = self.held.remove(&id).and_then(|s| s.decode())
            else {
                continue;
            };
            if let Some(span) = RawSpan::span_mut(&mut resource_spans) {
                enrich(span, row);
            }
            batch.push((origin, resource_spans));
        }
        if !batch.is_empty() {
            forward.send(regroup(batch));
        }
    }

    /// Reports completed files and sink health after any sink call. `lsns` are the records of
    /// the rows the call was given: on an error they (and every open file's) stay in the log.
    fn after_sink(&mut self, result: Result<usize, ParquetSinkError>, lsns: Option<LsnRange>) {
        let oldest_open = self.sink.as_ref().and_then(ParquetSink::oldest_open_lsn);
        match result {
            Ok(files) => {
                for _ in 0..files {
                    self.metrics.parquet_file_completed();
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "parquet sink failed; refusing exports until it can write again, and keeping the write-ahead log for recovery at the next start");
                self.metrics.sink_errors(1);
                self.health.set_problem(PARQUET_COMPONENT, e.to_string());
                let lost_from = [lsns.map(|r| r.min), oldest_open, self.pinned_lsn]
                    .into_iter()
                    .flatten()
                    .min();
                self.pinned_lsn = lost_from.or(Some(0));
            }
        }
        if let Some(sink) = &self.sink {
            let stats = sink.stats();
            let newly_written = stats.rows_written.saturating_sub(self.rows_reported);
            if newly_written > 0 {
                self.metrics.rows_written(newly_written);
                self.rows_reported = stats.rows_written;
            }
            self.summary.rows_lost = stats.rows_lost;
        }
    }

    fn close_sink(&mut self) {
        let Some(sink) = self.sink.take() else { return };
        let before = sink.stats();
        match sink.close() {
            Ok(files) => {
                for _ in &files {
                    self.metrics.parquet_file_completed();
                }
                // Rows in files completed by close: everything still open before it.
                let newly_written =
                    before.rows_written.saturating_sub(self.rows_reported) + before.rows_open;
                if newly_written > 0 {
                    self.metrics.rows_written(newly_written);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "completing parquet files at shutdown failed; the write-ahead log keeps their rows for the next start");
                self.metrics.sink_errors(1);
                self.summary.rows_lost += before.rows_open;
            }
        }
    }
}

/// Drops the rows from `start` on that a completed file held before the restart.
fn drop_recovered(recovered: &WrittenRows, batch: &mut Vec<AttemptRow>, start: usize) {
    let new = batch.split_off(start);
    batch.extend(
        new.into_iter()
            .filter(|row| !recovered.contains(&(row.trace_id, row.span_id, row.attempt_index))),
    );
}

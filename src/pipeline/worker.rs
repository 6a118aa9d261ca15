//! The pipeline worker of `serve`: one thread that owns the assembler, the rules and the
//! Parquet sink, fed by the receivers through a bounded channel.
//!
//! One owner means no locks on the hot path, and a clean end: when every sender is gone the
//! worker evaluates what is pending, completes every file and returns.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use tokio::sync::mpsc;

use super::{Engine, PipelineMessage};
use crate::assemble::{Assembler, Offer, Ready};
use crate::contract::{service_name, SpanFacts, SpanId, TraceId};
use crate::record::AttemptRow;
use crate::sinks::forward::{enrich, ForwardHandle};
use crate::sinks::metrics::{Health, Metrics};
use crate::sinks::parquet::ParquetSink;

const PARQUET_COMPONENT: &str = "parquet";

/// Where an attempt span came from, so it can be forwarded under its resource and scope once
/// its decision is known.
struct Origin {
    resource: Option<Resource>,
    resource_schema_url: String,
    scope: Option<InstrumentationScope>,
    scope_schema_url: String,
}

struct HeldSpan {
    origin: Arc<Origin>,
    span: Span,
}

/// What the worker did, returned when it ends.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WorkerSummary {
    pub requests: u64,
    pub rows: u64,
    pub rows_lost: u64,
}

pub struct Worker {
    engine: Engine,
    assembler: Assembler,
    sink: Option<ParquetSink>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    forward: Option<ForwardHandle>,
    held: HashMap<(TraceId, SpanId), HeldSpan>,
    rows_reported: u64,
    summary: WorkerSummary,
}

impl Worker {
    pub fn new(
        engine: Engine,
        assembler: Assembler,
        sink: ParquetSink,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
        forward: Option<ForwardHandle>,
    ) -> Worker {
        Worker {
            engine,
            assembler,
            sink: Some(sink),
            metrics,
            health,
            forward,
            held: HashMap::new(),
            rows_reported: 0,
            summary: WorkerSummary::default(),
        }
    }

    /// Runs until every sender is dropped, then evaluates everything pending and completes
    /// every file. Call on a thread of its own: it blocks.
    pub fn run(mut self, mut messages: mpsc::Receiver<PipelineMessage>) -> WorkerSummary {
        while let Some(message) = messages.blocking_recv() {
            let now = Instant::now();
            match message {
                PipelineMessage::Export { request, .. } => self.ingest(request, now),
                PipelineMessage::Tick => self.tick(now),
                PipelineMessage::Barrier(done) => {
                    let _ = done.send(());
                }
                PipelineMessage::ReloadPricing(book) => self.engine.book = *book,
            }
        }
        let pending = self.assembler.drain_all();
        self.evaluate(Ready {
            requests: pending,
            evicted: 0,
        });
        self.close_sink();
        self.summary
    }

    fn ingest(&mut self, request: ExportTraceServiceRequest, now: Instant) {
        let forwarding = self.forward.is_some();
        let mut ready = Ready::default();
        let mut duplicates = 0;
        let mut passthrough = Vec::new();
        for resource_spans in request.resource_spans {
            let service = service_name(
                resource_spans
                    .resource
                    .as_ref()
                    .map_or(&[][..], |r| r.attributes.as_slice()),
            );
            let mut forwarded_scopes = Vec::new();
            for scope_spans in resource_spans.scope_spans {
                let origin = forwarding.then(|| {
                    Arc::new(Origin {
                        resource: resource_spans.resource.clone(),
                        resource_schema_url: resource_spans.schema_url.clone(),
                        scope: scope_spans.scope.clone(),
                        scope_schema_url: scope_spans.schema_url.clone(),
                    })
                });
                let mut forwarded_spans = Vec::new();
                for span in scope_spans.spans {
                    let facts = SpanFacts::from_span(&span, &service);
                    let id = (facts.trace_id, facts.span_id);
                    match self.assembler.offer(facts, now, &mut ready) {
                        Offer::Attempt(_) => {
                            if let Some(origin) = &origin {
                                self.held.insert(
                                    id,
                                    HeldSpan {
                                        origin: Arc::clone(origin),
                                        span,
                                    },
                                );
                            }
                        }
                        Offer::Duplicate => duplicates += 1,
                        Offer::Logical | Offer::Passthrough => {
                            if forwarding {
                                forwarded_spans.push(span);
                            }
                        }
                    }
                }
                if !forwarded_spans.is_empty() {
                    forwarded_scopes.push(ScopeSpans {
                        scope: scope_spans.scope,
                        spans: forwarded_spans,
                        schema_url: scope_spans.schema_url,
                    });
                }
            }
            if !forwarded_scopes.is_empty() {
                passthrough.push(ResourceSpans {
                    resource: resource_spans.resource,
                    scope_spans: forwarded_scopes,
                    schema_url: resource_spans.schema_url,
                });
            }
        }
        if duplicates > 0 {
            self.metrics.duplicate_spans(duplicates);
        }
        if let Some(forward) = &self.forward {
            if !passthrough.is_empty() {
                forward.send(passthrough);
            }
        }
        self.evaluate(ready);
        self.metrics
            .set_requests_pending(self.assembler.pending_requests() as u64);
    }

    fn tick(&mut self, now: Instant) {
        let mut ready = Ready::default();
        self.assembler.expire(now, &mut ready);
        self.evaluate(ready);
        if let Some(sink) = &mut self.sink {
            let result = sink.rotate_expired(now);
            self.after_sink(result.map(|files| files.len()));
        }
        self.metrics
            .set_requests_pending(self.assembler.pending_requests() as u64);
    }

    fn evaluate(&mut self, ready: Ready) {
        if ready.evicted > 0 {
            self.metrics.requests_evicted(ready.evicted);
        }
        let mut rows: Vec<AttemptRow> = Vec::new();
        for request in &ready.requests {
            if !request.evaluated.is_empty() {
                self.metrics.late_attempts(request.attempts.len() as u64);
            }
            rows.extend(self.engine.evaluate(request));
        }
        self.summary.requests += ready.requests.len() as u64;
        if rows.is_empty() {
            return;
        }
        self.summary.rows += rows.len() as u64;
        self.metrics.record_rows(&rows);
        if let Some(sink) = &mut self.sink {
            let result = sink.write(&rows);
            self.after_sink(result.map(|files| files.len()));
        }
        self.forward_enriched(&rows);
    }

    fn forward_enriched(&mut self, rows: &[AttemptRow]) {
        let Some(forward) = &self.forward else { return };
        let mut batch = Vec::with_capacity(rows.len());
        for row in rows {
            let Some(id) = ids_of(row) else { continue };
            let Some(HeldSpan { origin, mut span }) = self.held.remove(&id) else {
                continue;
            };
            enrich(&mut span, row);
            batch.push(ResourceSpans {
                resource: origin.resource.clone(),
                scope_spans: vec![ScopeSpans {
                    scope: origin.scope.clone(),
                    spans: vec![span],
                    schema_url: origin.scope_schema_url.clone(),
                }],
                schema_url: origin.resource_schema_url.clone(),
            });
        }
        if !batch.is_empty() {
            forward.send(batch);
        }
    }

    /// Reports completed files and sink health after any sink call.
    fn after_sink(&mut self, result: Result<usize, crate::sinks::parquet::ParquetSinkError>) {
        match result {
            Ok(files) => {
                for _ in 0..files {
                    self.metrics.parquet_file_completed();
                }
                self.health.clear_problem(PARQUET_COMPONENT);
            }
            Err(e) => {
                tracing::error!(error = %e, "parquet sink failed");
                self.metrics.sink_errors(1);
                self.health.set_problem(PARQUET_COMPONENT, e.to_string());
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
                tracing::error!(error = %e, "completing parquet files at shutdown failed");
                self.metrics.sink_errors(1);
                self.summary.rows_lost += before.rows_open;
            }
        }
    }
}

fn ids_of(row: &AttemptRow) -> Option<(TraceId, SpanId)> {
    let mut trace = [0u8; 16];
    let mut span = [0u8; 8];
    hex::decode_to_slice(&row.trace_id, &mut trace).ok()?;
    hex::decode_to_slice(&row.span_id, &mut span).ok()?;
    Some((trace, span))
}

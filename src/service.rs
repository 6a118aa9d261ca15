//! `serve`: recovers what an earlier run left, then starts the receivers, the pipeline, the
//! forwarder and the metrics endpoint as components, and stops them in the order that loses
//! nothing, derived from their links (`GRAPH`, `topology`).
//!
//! Shutdown order: stop accepting and finish the exports in flight (each is in the pipeline
//! before it is answered OK) → the ticker stops → the log stage and the shards evaluate every
//! pending request and complete every Parquet file, and the log is released → the forward
//! queue drains within the deadline → the metrics endpoint stops.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::assemble::{Assembler, Summary};
use crate::config::Config;
use crate::decisions::{self, Decider, SharedEngine};
use crate::engine::Engine;
use crate::load::DEFAULT_POLICIES_DIR;
use crate::pipeline::{
    partition, run_wal_stage, ExportPart, InFlight, Intake, LogMessage, MemoryLimit,
    PipelineMessage, Shard, ShardSummary, SpanBuffers, SummaryStore, Watermark,
};
use crate::policy::PolicySet;
use crate::pricing::{age, PricingBook};
use crate::receivers::{grpc, http, DiscardConsumer, TracesConsumer};
use crate::rules::RulesConfig;
use crate::server::auth::{Authenticator, Tokens};
use crate::server::tls::TlsIdentity;
use crate::sinks::forward::ForwardObserver;
use crate::sinks::parquet::remote::{self, HealthObserver, Uploader};
use crate::sinks::parquet::{instance, remove_temporary_files, written_spans, Output};
use crate::sinks::parquet::{ParquetExporterConfig, ParquetSink};
use crate::telemetry::{self, Health, Metrics};
use crate::wal::config::FsyncMode;
use crate::wal::{self, WalWriter};
use std::collections::HashSet;

use crate::contract::wire::read_export;
use crate::contract::SharedAttributeKeys;

mod topology;

use topology::{Links, Stop, Topology};

/// Logged export requests queued ahead of the worker before the log stage waits. Each holds a
/// decoded request (about 1 MB for 512 spans), so a short queue is what bounds memory; a full
/// one holds the answers back, which in turn fills the in-flight budget and refuses.
const PIPELINE_QUEUE: usize = 16;
/// Export requests waiting for the log; beyond it receivers refuse with a retryable answer.
const LOG_QUEUE: usize = 4096;
/// How often pending groups are checked against their wait and files against their age.
const TICK: Duration = Duration::from_millis(200);

/// A running collector.
pub struct Collector {
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    pub metrics: Arc<Metrics>,
    shards: Vec<mpsc::WeakSender<PipelineMessage>>,
    in_flight: Arc<InFlight>,
    memory: Arc<MemoryLimit>,
    pricing_dir: std::path::PathBuf,
    policies_dir: Option<std::path::PathBuf>,
    rules: RulesConfig,
    policy_keys: Arc<SharedAttributeKeys>,
    /// The engine the decision service answers with: replaced with the shards' on reload.
    decisions_engine: Arc<SharedEngine>,
    /// The receivers' certificate and bearer tokens, shared with them and replaced on reload.
    tls: Option<TlsIdentity>,
    auth: Option<Arc<Authenticator>>,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<anyhow::Result<ShardSummary>>,
}

impl Collector {
    /// Asks the collector to stop; [`Collector::wait`] returns once it has.
    pub fn shutdown(&self) {
        let _ = self.shutdown.send(true);
    }

    /// Waits until every export answered so far has been ingested and every request that is
    /// ready has been evaluated (requests still inside their group wait stay pending).
    pub async fn sync(&self) -> anyhow::Result<()> {
        let mut waits = Vec::with_capacity(self.shards.len());
        for shard in &self.shards {
            let (done, wait) = tokio::sync::oneshot::channel();
            send(shard, PipelineMessage::Barrier(done)).await?;
            waits.push(wait);
        }
        for wait in waits {
            wait.await.map_err(|_| stopped())?;
        }
        Ok(())
    }

    /// Holds every pipeline shard (as a stalled sink would) until the returned [`Resume`] is
    /// used or dropped. For overload tests and diagnostics.
    pub async fn pause_pipeline(&self) -> anyhow::Result<Resume> {
        let mut resume = Resume(Vec::with_capacity(self.shards.len()));
        for shard in &self.shards {
            let (go, paused) = tokio::sync::oneshot::channel();
            send(shard, PipelineMessage::Pause(paused)).await?;
            resume.0.push(go);
        }
        Ok(resume)
    }

    /// Bytes of accepted exports the pipeline has not taken yet (bounded by
    /// `receivers.otlp.max_in_flight_bytes`).
    pub fn in_flight_bytes(&self) -> u64 {
        self.in_flight.used()
    }

    /// Bytes counted against `service.memory_limit`: in flight, and what the shards last
    /// reported holding.
    pub fn memory_used(&self) -> u64 {
        self.memory.used()
    }

    /// Reloads every pricing snapshot and envelope policy, and the receivers' certificate and
    /// bearer tokens when configured (what SIGHUP does). Everything is read and checked before
    /// anything is replaced, and any error refuses the whole reload, naming every bad file:
    /// the ones in use all stay. (A policy may name a snapshot the same change adds; a
    /// certificate and a token file are often rotated together.) Connections already open keep
    /// the certificate they were made with.
    pub async fn reload(&self) -> anyhow::Result<Reloaded> {
        let book = load_pricing(&self.pricing_dir, "reload");
        let policies = load_policies(self.policies_dir.as_deref(), "reload");
        let certificate = self.tls.as_ref().map(TlsIdentity::read).transpose();
        let tokens = self.auth.as_ref().map(|auth| auth.read()).transpose();
        let (book, policies, certificate, tokens) = match (book, policies, certificate, tokens) {
            (Ok(book), Ok(policies), Ok(certificate), Ok(tokens)) => {
                (book, policies, certificate, tokens)
            }
            (book, policies, certificate, tokens) => {
                let problems: Vec<String> = [
                    book.err(),
                    policies.err(),
                    certificate.err().map(anyhow::Error::from),
                    tokens.err().map(anyhow::Error::from),
                ]
                .into_iter()
                .flatten()
                .map(|e| crate::error_chain::one_line(&e))
                .collect();
                anyhow::bail!("{}", problems.join("; "));
            }
        };
        let engine = Engine {
            book,
            rules: self.rules,
            policies,
        };
        let reloaded = Reloaded {
            snapshots: engine.book.len(),
            policies: engine.policies.len(),
            certificate: certificate.is_some(),
            tokens: tokens.as_ref().map(Tokens::len),
        };
        self.policy_keys
            .set(engine.policies.attribute_keys().clone());
        for shard in &self.shards {
            send(shard, PipelineMessage::Reload(Box::new(engine.clone()))).await?;
        }
        self.decisions_engine.set(engine);
        if let (Some(tls), Some(certificate)) = (&self.tls, certificate) {
            tls.install(certificate);
        }
        if let (Some(auth), Some(tokens)) = (&self.auth, tokens) {
            auth.install(tokens);
        }
        Ok(reloaded)
    }

    /// Waits for the collector to stop (after [`Collector::shutdown`]).
    pub async fn wait(self) -> anyhow::Result<ShardSummary> {
        self.task.await.context("collector task failed")?
    }
}

/// What a reload put in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reloaded {
    pub snapshots: usize,
    pub policies: usize,
    /// The receivers' certificate and key were read again (TLS is on).
    pub certificate: bool,
    /// The bearer tokens now accepted (authentication is on).
    pub tokens: Option<usize>,
}

/// Lets paused shards go on (see [`Collector::pause_pipeline`]); dropping it does too.
pub struct Resume(Vec<tokio::sync::oneshot::Sender<()>>);

impl Resume {
    pub fn resume(self) {
        for go in self.0 {
            let _ = go.send(());
        }
    }
}

fn stopped() -> anyhow::Error {
    anyhow::anyhow!("the pipeline has stopped")
}

async fn send(
    shard: &mpsc::WeakSender<PipelineMessage>,
    message: PipelineMessage,
) -> anyhow::Result<()> {
    shard
        .upgrade()
        .ok_or_else(stopped)?
        .send(message)
        .await
        .map_err(|_| stopped())
}

struct MetricsObserver(Arc<Metrics>);

impl ForwardObserver for MetricsObserver {
    fn sent(&self, spans: u64) {
        self.0.spans_forwarded(spans);
    }
    fn failed(&self, spans: u64) {
        self.0.forward_failures(spans);
    }
    fn dropped(&self, spans: u64) {
        self.0.forward_spans_dropped(spans);
    }
}

async fn bind(addr: SocketAddr, what: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen for {what} on {addr}"))
}

/// Starts every component; returns once all listeners are bound.
pub async fn start(config: Config) -> anyhow::Result<Collector> {
    let processor = &config.processors.retry_spend;
    let book = load_pricing(&processor.pricing_dir, "load")?;
    if book.is_empty() {
        tracing::warn!(dir = %processor.pricing_dir.display(), "no pricing snapshots found: every envelope will be unknown_pricing_version");
    }
    if let Some(stale) = age::stale_newest(
        &book,
        std::time::SystemTime::now(),
        processor.max_pricing_age_days,
    ) {
        tracing::warn!("{stale}");
    }
    let rules = processor.rules();
    let policies = load_policies(processor.policies_dir.as_deref(), "load")?;
    tracing::info!(policies = policies.len(), "envelope policies loaded");
    let engine = Engine {
        book,
        rules,
        policies,
    };
    let shards = processor.worker_count();
    let parquet = &config.exporters.parquet;
    let output = Output::parse(&parquet.output_dir)?;
    // Local state: the log, and for an object store the files waiting for upload.
    let wal_dir = match &output {
        Output::Local(dir) => config.wal.dir_for(dir),
        Output::Remote(_) => config.wal.dir.clone(),
    };
    // Collectors sharing a prefix must never pick the same name: a random id, kept. (For a
    // directory, the sink names an empty id after the host and process.)
    let sink_config = match &output {
        Output::Remote(_) => ParquetExporterConfig {
            instance_id: instance::resolve(&parquet.instance_id, &wal_dir)?,
            ..parquet.clone()
        },
        Output::Local(_) => parquet.clone(),
    };
    let metrics = Metrics::new();
    metrics.set_label_values_cap(config.telemetry.max_label_values);
    let health = Health::new();
    let (table_root, uploader) = match &output {
        Output::Local(dir) => (dir.clone(), None),
        Output::Remote(remote) => {
            let observer = HealthObserver {
                health: Arc::clone(&health),
                metrics: Arc::clone(&metrics),
            };
            let uploader = start_uploader(&config, remote, &wal_dir, observer).await?;
            (wal_dir.join(remote::STAGING_DIR), Some(uploader))
        }
    };
    let mut sinks = (0..shards)
        .map(|_| match &uploader {
            None => ParquetSink::new(&table_root, sink_config.clone()),
            Some(uploader) => {
                ParquetSink::staging(&table_root, sink_config.clone(), Arc::clone(uploader))
            }
        })
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("cannot write Parquet under {}", table_root.display()))?;

    let otlp = &config.receivers.otlp;
    let tls = TlsIdentity::load(&otlp.tls)?;
    let auth = Authenticator::load(&otlp.auth)?.map(Arc::new);
    let grpc_listener = bind(otlp.grpc_addr, "OTLP/gRPC").await?;
    let http_listener = bind(otlp.http_addr, "OTLP/HTTP").await?;
    let metrics_listener = bind(config.telemetry.metrics_addr, "metrics").await?;
    let grpc_addr = grpc_listener.local_addr()?;
    let http_addr = http_listener.local_addr()?;
    let metrics_addr = metrics_listener.local_addr()?;

    metrics.set_requests_pending_limit(processor.max_pending_requests as u64);
    let forward = &config.exporters.otlp_forward;
    let forwarder = forward
        .build(Arc::new(MetricsObserver(Arc::clone(&metrics))))
        .with_context(|| {
            format!(
                "cannot forward to {}",
                forward.endpoint.as_deref().unwrap_or_default()
            )
        })?;
    let (forward_handle, forwarder) = match forwarder {
        Some((handle, forwarder)) => (Some(handle), Some(forwarder)),
        None => (None, None),
    };

    // The write-ahead log: what a crash left unfinished is replayed before anything new.
    // Collectors may share a directory, each with its own configured id and log: a start then
    // cleans up and recovers only its own files, never the ones the others are writing. (A
    // store's staging directory is private to its log, so everything there is ours.)
    let owner = match (&output, parquet.instance_id.as_str()) {
        (Output::Local(_), configured) if !configured.is_empty() => Some(configured),
        _ => None,
    };
    let removed = remove_temporary_files(&table_root, owner).with_context(|| {
        format!(
            "cannot clean up unfinished files under {}",
            table_root.display()
        )
    })?;
    if removed > 0 {
        tracing::warn!(removed, "removed unfinished Parquet files of an earlier run; their rows are recovered from the write-ahead log");
    }
    let recovery = wal::recover(&wal_dir)
        .with_context(|| format!("cannot read the write-ahead log in {}", wal_dir.display()))?;
    for problem in &recovery.problems {
        tracing::warn!("write-ahead log: {problem}");
    }
    let first_lsn = recovery.records.first().map(|r| r.lsn);
    let mut written = match first_lsn {
        Some(first) => written_spans(&table_root, first, owner).map_err(anyhow::Error::msg)?,
        None => HashSet::new(),
    };
    if let Some(uploader) = &uploader {
        // Uploaded files are no longer staged: their rows are read back from the store.
        let uploader = Arc::clone(uploader);
        let uploaded = tokio::task::spawn_blocking(move || uploader.recorded_spans(first_lsn))
            .await?
            .map_err(anyhow::Error::msg)?;
        written.extend(uploaded);
    }
    if let Some(sink) = sinks.first_mut() {
        let adopted = sink.adopt_staged()?;
        if adopted > 0 {
            tracing::info!(
                files = adopted,
                "uploading Parquet files an earlier run left staged"
            );
        }
    }
    if !recovery.records.is_empty() {
        tracing::info!(
            records = recovery.records.len(),
            already_written = written.len(),
            "replaying the write-ahead log"
        );
    }
    let mut wal_writer = WalWriter::open(wal_dir.clone(), &config.wal, &recovery);
    let recovered_from = recovery.records.first().map(|r| r.lsn);
    // Finished requests saved at the last checkpoint, each for the shard its trace hashes to
    // now; restored before the log is replayed. Kept with the log: off without it.
    let (summaries, mut restored) = if config.wal.enabled {
        let (store, restored) = SummaryStore::open(
            &wal_dir,
            shards,
            !matches!(config.wal.fsync, FsyncMode::Off),
        );
        (Some(store), restored)
    } else {
        (None, (0..shards).map(|_| Vec::new()).collect())
    };
    let mut recovered: Vec<Vec<_>> = (0..shards).map(|_| Vec::new()).collect();
    let forwarding = config.exporters.otlp_forward.endpoint.is_some();
    for record in recovery.records {
        let payload = record.payload;
        match read_export(&payload, forwarding, engine.policies.attribute_keys()) {
            Ok(export) => {
                for (shard, part) in partition(export, &payload, shards) {
                    recovered[shard].push((record.lsn, part));
                }
            }
            Err(e) => {
                tracing::error!(lsn = record.lsn, error = %e, "write-ahead log record does not decode; skipped")
            }
        }
    }
    // Without the log, the old segments are still replayed (above) and cleaned up at the end.
    let mut unused_wal = None;
    let wal_writer = if config.wal.enabled {
        Some(wal_writer)
    } else {
        tracing::warn!("the write-ahead log is off: a crash loses accepted exports not yet in a completed Parquet file");
        wal_writer.retire();
        unused_wal = Some(wal_writer);
        None
    };

    let in_flight = InFlight::new(config.in_flight_limit());
    let memory = MemoryLimit::new(config.service.memory_limit, Arc::clone(&in_flight), shards);
    let watermark = Arc::new(Watermark::new(shards, recovered_from));
    let span_buffers = Arc::new(SpanBuffers::default());
    let (log_sender, log_receiver) = mpsc::channel(LOG_QUEUE);
    let mut senders = Vec::with_capacity(shards);
    let mut pending = Vec::with_capacity(shards);
    for (shard, (sink, records)) in sinks.into_iter().zip(recovered).enumerate() {
        let (sender, receiver) = mpsc::channel(PIPELINE_QUEUE);
        let mut worker = Shard::new(
            engine.clone(),
            Assembler::new(&processor.assembly(config.service.memory_limit), shards),
            sink,
            Arc::clone(&metrics),
            Arc::clone(&health),
            forward_handle.clone(),
        )
        .with_watermark(shard, Arc::clone(&watermark))
        .with_memory_limit(Arc::clone(&memory))
        .with_span_buffers(Arc::clone(&span_buffers));
        if let Some(store) = &summaries {
            worker = worker.with_summaries(Arc::clone(store));
        }
        senders.push(sender);
        pending.push(PendingShard {
            worker,
            receiver,
            restored: std::mem::take(&mut restored[shard]),
            records,
        });
    }
    // Weak handles: the stages must end when the receivers are done, not when this is dropped.
    let shard_handles: Vec<_> = senders.iter().map(mpsc::Sender::downgrade).collect();
    let pipeline = Pipeline {
        shards: pending,
        written: Arc::new(written),
        senders,
        log_receiver,
        wal_writer,
        unused_wal,
        watermark,
        health: Arc::clone(&health),
        metrics: Arc::clone(&metrics),
    };

    let (shutdown, shutdown_rx) = watch::channel(false);
    let mut task_shutdown = shutdown_rx.clone();
    let policy_keys = SharedAttributeKeys::new(engine.policies.attribute_keys().clone());
    let (tls_on, tokens) = (tls.is_some(), auth.as_ref().map_or(0, |a| a.tokens()));
    // Decisions are answered on the receivers' tasks with their own engine, never through the
    // pipeline's queues.
    let decisions_engine = SharedEngine::new(engine.clone());
    let decider = Decider::new(
        Arc::clone(&decisions_engine),
        &config.decisions,
        Arc::clone(&metrics),
    );
    let receivers = Receivers {
        grpc: grpc_listener,
        http: http_listener,
        max_request_bytes: otlp.request_limit(),
        tls: tls.clone(),
        auth: auth.clone(),
        decider,
        shutdown: shutdown_rx,
    };

    let shutdown_timeout = config.service.shutdown_timeout;
    let mut topology = Topology::new(&GRAPH).expect("the service graph is valid");
    let (summary_sender, summary) = oneshot::channel();
    topology.provide(PIPELINE, move || pipeline.start(summary_sender));
    topology.provide(TICKER, ticker(log_sender.clone()));
    if config.exporters.parquet.enabled {
        let intake = Intake::new(
            log_sender,
            Arc::clone(&in_flight),
            Arc::clone(&memory),
            Arc::clone(&metrics),
            Arc::clone(&health),
            shards,
        )
        .forwarding(forwarding)
        .policy_keys(Arc::clone(&policy_keys))
        .span_buffers(span_buffers);
        receivers.provide(&mut topology, intake);
    } else {
        tracing::warn!("sink none: every export is acknowledged and discarded after decoding");
        // The ticker's sender keeps the log stage running until shutdown, as before.
        drop(log_sender);
        let discard = DiscardConsumer::new(Arc::clone(&metrics), Arc::clone(&policy_keys));
        receivers.provide(&mut topology, discard);
    }
    topology.provide(FORWARDER, move || {
        Ok(Box::pin(async move {
            if let Some(forwarder) = forwarder {
                forwarder.shutdown(shutdown_timeout).await;
            }
            Ok(())
        }) as Stop)
    });
    let router = telemetry::router(Arc::clone(&metrics), Arc::clone(&health));
    topology.provide(METRICS, move || {
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(telemetry::serve(metrics_listener, router, async move {
            let _ = stopped.await;
        }));
        Ok(Box::pin(async move {
            let _ = stop.send(());
            server.await??;
            Ok(())
        }) as Stop)
    });
    let running = topology.start_all()?;
    tracing::info!(%grpc_addr, %http_addr, %metrics_addr, tls = tls_on, bearer_tokens = tokens, %output, "collector listening");

    let pricing_dir = config.processors.retry_spend.pricing_dir.clone();
    let policies_dir = config.processors.retry_spend.policies_dir.clone();
    let task = tokio::spawn(async move {
        let _ = task_shutdown.wait_for(|stop| *stop).await;
        tracing::info!("shutting down: finishing exports in flight");
        running.stop_all().await?;
        let summary = summary.await.map_err(|_| stopped())?;
        tracing::info!(
            requests = summary.requests,
            rows = summary.rows,
            "collector stopped"
        );
        Ok(summary)
    });
    Ok(Collector {
        grpc_addr,
        http_addr,
        metrics_addr,
        metrics,
        shards: shard_handles,
        in_flight,
        memory,
        pricing_dir,
        policies_dir,
        policy_keys,
        rules,
        decisions_engine,
        tls,
        auth,
        shutdown,
        task,
    })
}

const OTLP_GRPC: &str = "otlp-grpc";
const OTLP_HTTP: &str = "otlp-http";
const TICKER: &str = "ticker";
const PIPELINE: &str = "pipeline";
const FORWARDER: &str = "forwarder";
const METRICS: &str = "metrics";

/// Every component of `serve` and the components it sends data to; they stop in the order
/// these links give (sources first) and start in the reverse one. Everything reports to the
/// metrics endpoint, so it stops last.
const GRAPH: [Links; 6] = [
    (OTLP_GRPC, &[PIPELINE, METRICS]),
    (OTLP_HTTP, &[PIPELINE, METRICS]),
    // Declared after the receivers, so it stops after them: while they finish the exports in
    // flight, its ticks keep the log stage's interval fsyncs and segment releases going.
    (TICKER, &[PIPELINE]),
    (PIPELINE, &[FORWARDER, METRICS]),
    (FORWARDER, &[METRICS]),
    (METRICS, &[]),
];

/// Tells the log stage when an `interval` fsync and a segment release are due (the shards
/// keep their own time). Stopping it ends its sender of the log stage's input.
fn ticker(log_sender: mpsc::Sender<LogMessage>) -> impl FnOnce() -> anyhow::Result<Stop> {
    move || {
        let ticker = tokio::spawn(async move {
            let mut interval = tokio::time::interval(TICK);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                interval.tick().await;
                // A full queue means that stage is busy and will tick soon enough.
                if let Err(mpsc::error::TrySendError::Closed(_)) =
                    log_sender.try_send(LogMessage::Tick)
                {
                    break;
                }
            }
        });
        Ok(Box::pin(async move {
            ticker.abort();
            let _ = ticker.await;
            Ok(())
        }) as Stop)
    }
}

/// A shard built and recovered into at start, before its thread runs.
struct PendingShard {
    worker: Shard,
    receiver: mpsc::Receiver<PipelineMessage>,
    restored: Vec<Summary>,
    records: Vec<(u64, ExportPart)>,
}

/// The log stage and the pipeline shards, one component: the shards' summary decides whether
/// the log is released once both have stopped.
struct Pipeline {
    shards: Vec<PendingShard>,
    /// Spans a completed file already holds: replayed as context, never as rows again.
    written: Arc<crate::sinks::parquet::WrittenRows>,
    senders: Vec<mpsc::Sender<PipelineMessage>>,
    log_receiver: mpsc::Receiver<LogMessage>,
    wal_writer: Option<WalWriter>,
    /// The log of an earlier run when the log is now off: deleted like ours once every row
    /// is written.
    unused_wal: Option<WalWriter>,
    watermark: Arc<Watermark>,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
}

impl Pipeline {
    /// Starts a thread per shard (each first recovers what the log and its summaries hold)
    /// and the log stage's. It stops once the receivers and the ticker, its only senders, are
    /// gone: the log stage ends and with it the shards' input, each shard evaluates everything
    /// pending and completes every file, and `summary` gets what they did.
    fn start(self, summary: oneshot::Sender<ShardSummary>) -> anyhow::Result<Stop> {
        let Pipeline {
            shards,
            written,
            senders,
            log_receiver,
            wal_writer,
            unused_wal,
            watermark,
            health,
            metrics,
        } = self;
        let mut workers = Vec::with_capacity(shards.len());
        for (shard, pending) in shards.into_iter().enumerate() {
            let PendingShard {
                mut worker,
                receiver,
                restored,
                records,
            } = pending;
            let written = Arc::clone(&written);
            let clock = tokio::runtime::Handle::current();
            let thread = std::thread::Builder::new()
                .name(format!("shard-{shard}"))
                .spawn(move || {
                    yield_to_receivers();
                    worker.recover(restored, records, &written);
                    drop(written);
                    worker.run(receiver, clock)
                })
                .context("cannot start a pipeline thread")?;
            workers.push(thread);
        }
        let log_stage = std::thread::Builder::new()
            .name("wal".into())
            .spawn(move || {
                run_wal_stage(
                    wal_writer,
                    log_receiver,
                    senders,
                    watermark,
                    health,
                    metrics,
                )
            })
            .context("cannot start the write-ahead log thread")?;
        Ok(Box::pin(async move {
            let wal_writer = tokio::task::spawn_blocking(move || log_stage.join())
                .await?
                .map_err(|_| anyhow::anyhow!("the write-ahead log thread panicked"))?;
            let total = tokio::task::spawn_blocking(move || {
                let mut total: Option<ShardSummary> = None;
                for worker in workers {
                    let shard = worker
                        .join()
                        .map_err(|_| anyhow::anyhow!("a pipeline thread panicked"))?;
                    total = Some(total.map_or(shard, |t| t.merge(shard)));
                }
                Ok::<_, anyhow::Error>(total.unwrap_or_default())
            })
            .await??;
            if total.all_written {
                // Every row is in a completed file: nothing in the log is needed any more.
                for mut writer in wal_writer.into_iter().chain(unused_wal) {
                    writer.retire();
                    writer.release_below(u64::MAX);
                }
            } else {
                tracing::warn!(
                    "keeping the write-ahead log: rows it holds are recovered at the next start"
                );
            }
            let _ = summary.send(total);
            Ok(())
        }) as Stop)
    }
}

/// What both receivers are started with besides their consumer.
struct Receivers {
    grpc: TcpListener,
    http: TcpListener,
    max_request_bytes: usize,
    tls: Option<TlsIdentity>,
    auth: Option<Arc<Authenticator>>,
    /// The decision service shares the receivers' listeners.
    decider: Decider,
    /// Both stop accepting together when shutdown is asked; stopping each then waits for the
    /// exports it has in flight.
    shutdown: watch::Receiver<bool>,
}

impl Receivers {
    /// Provides the gRPC and HTTP receivers, handing exports to `consumer`.
    fn provide<C: TracesConsumer>(self, topology: &mut Topology, consumer: C) {
        let Receivers {
            grpc: grpc_listener,
            http: http_listener,
            max_request_bytes,
            tls,
            auth,
            decider,
            shutdown,
        } = self;
        let stopped = move || {
            let mut rx = shutdown.clone();
            async move {
                let _ = rx.wait_for(|stop| *stop).await;
            }
        };
        let grpc_stop = stopped();
        let http_stop = stopped();
        {
            let (consumer, tls, auth, decider) =
                (consumer.clone(), tls.clone(), auth.clone(), decider.clone());
            topology.provide(OTLP_GRPC, move || {
                let server = tokio::spawn(grpc::serve(
                    grpc_listener,
                    consumer,
                    max_request_bytes,
                    tls,
                    auth.clone(),
                    tonic::service::Routes::new(decisions::grpc::DecisionsServer::new(
                        decider,
                        max_request_bytes,
                        auth,
                    )),
                    grpc_stop,
                ));
                Ok(Box::pin(async move {
                    if let Err(e) = server.await? {
                        tracing::error!(error = %e, "OTLP/gRPC receiver failed");
                    }
                    Ok(())
                }) as Stop)
            });
        }
        topology.provide(OTLP_HTTP, move || {
            let routes = http::router(consumer, max_request_bytes, auth.clone())
                .merge(decisions::http::router(decider, max_request_bytes, auth));
            let server = tokio::spawn(http::serve(http_listener, routes, tls, http_stop));
            Ok(Box::pin(async move {
                if let Err(e) = server.await? {
                    tracing::error!(error = %e, "OTLP/HTTP receiver failed");
                }
                Ok(())
            }) as Stop)
        });
    }
}

/// The uploader of an object store output, once the store has answered: bad credentials, a
/// missing bucket or an unreachable endpoint stop the start, before anything is accepted.
async fn start_uploader(
    config: &Config,
    remote: &crate::sinks::parquet::RemoteOutput,
    wal_dir: &std::path::Path,
    observer: HealthObserver,
) -> anyhow::Result<Arc<Uploader>> {
    let settings = &config.exporters.parquet.object_store;
    let store = remote::build_store(remote, settings)?;
    let uploader = Uploader::start(
        store,
        remote.clone(),
        settings,
        remote::UploadRetries::Unlimited,
        config.service.shutdown_timeout,
        Some(wal_dir.join(remote::JOURNAL_FILE)),
        Arc::new(observer),
    )?;
    let probe = Arc::clone(&uploader);
    tokio::task::spawn_blocking(move || probe.probe())
        .await?
        .map_err(|e| anyhow::anyhow!("cannot use the object store output {remote}: {e}; check its credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE), region, endpoint and that the bucket exists: the collector lists, reads and writes under the prefix"))?;
    Ok(uploader)
}

/// How much lower than the receivers' threads the pipeline shards run (a nice increment).
const PIPELINE_NICENESS: i32 = 10;

/// Lowers the calling pipeline thread's scheduling priority, so that on a busy core the
/// receivers' threads, which acknowledge exports and answer decisions (SPEC §7) on the retry
/// path of a user's request, run before a Parquet batch is finished: the pipeline only falls
/// behind, and the in-flight budget turns that into back-pressure. Best effort: a process may
/// always lower a priority, and if even that is refused nothing else changes.
fn yield_to_receivers() {
    let thread = rustix::thread::gettid();
    let nice = rustix::process::getpriority_process(Some(thread)).unwrap_or(0);
    if let Err(e) =
        rustix::process::setpriority_process(Some(thread), nice.saturating_add(PIPELINE_NICENESS))
    {
        tracing::debug!(error = %e, "cannot lower the pipeline thread's priority");
    }
}

/// `verb`: "load" at start, "reload" on SIGHUP.
fn load_pricing(dir: &std::path::Path, verb: &str) -> anyhow::Result<PricingBook> {
    if !dir.exists() {
        anyhow::bail!(
            "cannot {verb} pricing snapshots: there is no directory {}; point at one with --pricing DIR, RETRY_SPEND_PRICING_DIR or processors.retry_spend.pricing_dir in the --config file (the default, config/pricing, is relative to the current directory)",
            std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf()).display()
        );
    }
    crate::load::pricing_dir(dir)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("cannot {verb} pricing snapshots from {}", dir.display()))
}

fn load_policies(dir: Option<&std::path::Path>, verb: &str) -> anyhow::Result<PolicySet> {
    if let Some(dir) = dir.filter(|dir| !dir.exists()) {
        anyhow::bail!(
            "cannot {verb} envelope policies: there is no directory {}; point at one with --policies DIR, RETRY_SPEND_POLICIES_DIR or processors.retry_spend.policies_dir, or leave them out to run without policies",
            std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf()).display()
        );
    }
    crate::load::policies(dir)
        .map_err(anyhow::Error::msg)
        .with_context(|| {
            let dir = dir.unwrap_or(std::path::Path::new(DEFAULT_POLICIES_DIR));
            format!("cannot {verb} envelope policies from {}", dir.display())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_stop_from_the_receivers_to_the_metrics_endpoint() {
        assert_eq!(
            topology::stop_order(&GRAPH),
            Ok(vec![
                OTLP_GRPC, OTLP_HTTP, TICKER, PIPELINE, FORWARDER, METRICS
            ])
        );
    }
}

//! Load generator for the decision service (SPEC §7) over gRPC: the figures in BENCHMARKS.md,
//! "Decision service".
//!
//! ```text
//! taskset -c 0 target/release/retry-spend-collector serve --output /tmp/decide-bench &
//! taskset -c 1 target/release/examples/decide_load --addr 127.0.0.1:4317 --pid $!
//! ```
//!
//! Three phases against a running `serve`, each asking the worked example's question (the seed's
//! envelope, attempt 0 on deepseek-v4-flash, a proposed fallback to glm-5; `within_envelope`):
//! 1. throughput: `--in-flight` questions (default 8) in flight on one HTTP/2 connection for
//!    `--seconds`; decisions per collector CPU-second from /proc/<pid>/stat;
//! 2. latency: one question in flight, `--probes` times; p50, p99, p99.9;
//! 3. latency again while `--export-in-flight` OTLP exports of 512 spans (170 three-span
//!    requests, every trace new) are sent continuously on their own connection and thread.
//!
//! Not run by CI: it measures, it asserts nothing.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use retry_spend_collector::contract::{attr, kv};
use retry_spend_collector::decisions::proto::retry_decisions_client::RetryDecisionsClient;
use retry_spend_collector::decisions::proto::{Attempt, DecideRequest, Envelope, ProposedAttempt};
use tonic::transport::Channel;

const VERSION: &str = "a42d372ccf0b5dd13ecf71203521f9d2";
const SOURCE: &str = "https://aiwave.live/api/pricing";
const AT: &str = "2026-08-25T12:00:00Z";
const AT_NANOS: u64 = 1_787_659_200_000_000_000;
const REQUESTS_PER_EXPORT: usize = 170;

#[derive(Parser)]
#[command(about = "Decision service load: throughput per collector CPU-second and latency")]
struct Args {
    /// The collector's gRPC address.
    #[arg(long, default_value = "127.0.0.1:4317")]
    addr: String,
    /// The collector's pid, for its CPU time.
    #[arg(long)]
    pid: u32,
    #[arg(long, default_value_t = 8)]
    in_flight: usize,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    #[arg(long, default_value_t = 20_000)]
    probes: usize,
    #[arg(long, default_value_t = 4)]
    export_in_flight: usize,
}

fn question() -> DecideRequest {
    let counts = (Some(10_000), Some(4_000), Some(800));
    DecideRequest {
        envelope: Some(Envelope {
            pricing_source: SOURCE.into(),
            pricing_checked_at: "2026-08-22".into(),
            pricing_version: VERSION.into(),
            billing_group: "vip".into(),
            max_incremental_usd: "0.015".into(),
            max_attempts_after_first: Some(1),
            allow_family_fallback: Some(true),
            allowed_fallback_families: vec!["deepseek".into(), "qwen".into(), "glm".into()],
            replay_safe: None,
            task_type: "support_summary".into(),
            ..Default::default()
        }),
        service: "support-bot".into(),
        task_type: String::new(),
        attempts: vec![Attempt {
            model: "deepseek-v4-flash".into(),
            input_tokens: counts.0,
            cached_input_tokens: counts.1,
            output_cap: counts.2,
            output_reached_client: Some(false),
            error_type: "timeout".into(),
            ..Default::default()
        }],
        next: Some(ProposedAttempt {
            model: "glm-5".into(),
            input_tokens: counts.0,
            cached_input_tokens: counts.1,
            output_cap: counts.2,
            ..Default::default()
        }),
        at: AT.into(),
    }
}

/// utime + stime of `pid`, in seconds (clock ticks of 1/100 s on Linux).
fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("cannot read /proc/{pid}/stat"))?;
    let rest = &stat[stat.rfind(')').context("malformed stat")? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11).context("no utime")?.parse::<u64>()?
        + fields.get(12).context("no stime")?.parse::<u64>()?;
    Ok(ticks as f64 / 100.0)
}

async fn connect(addr: &str) -> anyhow::Result<Channel> {
    Ok(Channel::from_shared(format!("http://{addr}"))?
        .tcp_nodelay(true)
        .connect()
        .await?)
}

async fn throughput(args: &Args, channel: Channel) -> anyhow::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..args.in_flight {
        let (mut client, stop, done) = (
            RetryDecisionsClient::new(channel.clone()),
            Arc::clone(&stop),
            Arc::clone(&done),
        );
        tasks.push(tokio::spawn(async move {
            let question = question();
            while !stop.load(Ordering::Relaxed) {
                let answer = client.decide(question.clone()).await?.into_inner();
                anyhow::ensure!(answer.allow, "unexpected answer {answer:?}");
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    // Warm-up: connections, allocator, caches.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (cpu0, n0, t0) = (
        cpu_seconds(args.pid)?,
        done.load(Ordering::Relaxed),
        Instant::now(),
    );
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    let (cpu1, n1, wall) = (
        cpu_seconds(args.pid)?,
        done.load(Ordering::Relaxed),
        t0.elapsed(),
    );
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await??;
    }
    let n = (n1 - n0) as f64;
    println!(
        "throughput, {} in flight: {n} decisions in {:.1} s wall, {:.0}/s; collector {:.2} CPU-s: {:.0} decisions per collector CPU-second",
        args.in_flight,
        wall.as_secs_f64(),
        n / wall.as_secs_f64(),
        cpu1 - cpu0,
        n / (cpu1 - cpu0)
    );
    Ok(())
}

async fn latency(label: &str, probes: usize, channel: Channel) -> anyhow::Result<()> {
    let mut client = RetryDecisionsClient::new(channel);
    let question = question();
    for _ in 0..probes / 10 {
        client.decide(question.clone()).await?;
    }
    let mut micros = Vec::with_capacity(probes);
    for _ in 0..probes {
        let start = Instant::now();
        let answer = client.decide(question.clone()).await?.into_inner();
        micros.push(start.elapsed().as_secs_f64() * 1e6);
        anyhow::ensure!(answer.allow, "unexpected answer {answer:?}");
    }
    micros.sort_by(f64::total_cmp);
    let at = |q: f64| micros[((micros.len() as f64 * q) as usize).min(micros.len() - 1)];
    println!(
        "latency, one in flight{label}: {probes} decisions, p50 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms, max {:.3} ms",
        at(0.50) / 1e3,
        at(0.99) / 1e3,
        at(0.999) / 1e3,
        micros[micros.len() - 1] / 1e3
    );
    Ok(())
}

/// An export of 512 spans: 170 requests of a logical span and two attempts, traces from `seq`.
fn export(seq: u64) -> ExportTraceServiceRequest {
    let envelope = serde_json::json!({ "retry_spend_envelope": {
        "pricing_source": SOURCE, "pricing_checked_at": "2026-08-22", "pricing_version": VERSION,
        "billing_group": "vip", "max_incremental_usd": "0.015", "max_attempts_after_first": 1,
        "allow_family_fallback": true, "allowed_fallback_families": ["deepseek", "qwen", "glm"],
    }})
    .to_string();
    let mut spans = Vec::with_capacity(REQUESTS_PER_EXPORT * 3 + 2);
    for r in 0..REQUESTS_PER_EXPORT as u64 {
        let mut trace_id = vec![0u8; 16];
        trace_id[..8].copy_from_slice(&seq.to_be_bytes());
        trace_id[8..].copy_from_slice(&r.to_be_bytes());
        let span = |id: u8, attributes| Span {
            trace_id: trace_id.clone(),
            span_id: vec![id; 8],
            parent_span_id: if id == 9 { vec![] } else { vec![9; 8] },
            name: "chat".into(),
            start_time_unix_nano: AT_NANOS + u64::from(id),
            end_time_unix_nano: AT_NANOS + 1_000_000_000,
            attributes,
            ..Default::default()
        };
        spans.push(span(
            9,
            vec![
                kv(
                    attr::SPAN_ROLE,
                    Value::StringValue(attr::ROLE_LOGICAL_REQUEST.into()),
                ),
                kv(attr::ENVELOPE_JSON, Value::StringValue(envelope.clone())),
                kv(attr::ATTEMPT_COUNT, Value::IntValue(2)),
            ],
        ));
        for (index, model) in [(0, "deepseek-v4-flash"), (1, "glm-5")] {
            spans.push(span(
                index as u8 + 1,
                vec![
                    kv(
                        attr::SPAN_ROLE,
                        Value::StringValue(attr::ROLE_ATTEMPT.into()),
                    ),
                    kv(attr::ATTEMPT_INDEX, Value::IntValue(index)),
                    kv(attr::REQUEST_MODEL, Value::StringValue(model.into())),
                    kv(attr::INPUT_TOKENS, Value::IntValue(10_000)),
                    kv(attr::CACHE_READ_INPUT_TOKENS, Value::IntValue(4_000)),
                    kv(attr::REQUEST_MAX_TOKENS, Value::IntValue(800)),
                ],
            ));
        }
    }
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv(
                    attr::SERVICE_NAME,
                    Value::StringValue("support-bot".into()),
                )],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Sends exports on their own connection and thread until `stop`; returns (accepted, refused).
fn export_burst(
    addr: String,
    in_flight: usize,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<anyhow::Result<(u64, u64)>> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async move {
            let channel = connect(&addr).await?;
            let seq = Arc::new(AtomicU64::new(1));
            let (accepted, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
            let mut tasks = Vec::new();
            for _ in 0..in_flight {
                let mut client = TraceServiceClient::new(channel.clone());
                let (stop, seq) = (Arc::clone(&stop), Arc::clone(&seq));
                let (accepted, refused) = (Arc::clone(&accepted), Arc::clone(&refused));
                tasks.push(tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let request = export(seq.fetch_add(1, Ordering::Relaxed));
                        match client.export(request).await {
                            Ok(_) => accepted.fetch_add(1, Ordering::Relaxed),
                            Err(_) => refused.fetch_add(1, Ordering::Relaxed),
                        };
                    }
                }));
            }
            for task in tasks {
                task.await?;
            }
            Ok((
                accepted.load(Ordering::Relaxed),
                refused.load(Ordering::Relaxed),
            ))
        })
    })
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let channel = connect(&args.addr).await?;
        throughput(&args, channel.clone()).await?;
        latency("", args.probes, channel.clone()).await?;

        let stop = Arc::new(AtomicBool::new(false));
        let burst = export_burst(args.addr.clone(), args.export_in_flight, Arc::clone(&stop));
        // Let the exports reach the pipeline before probing.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let label = format!(
            " during exports of 512 spans, {} in flight",
            args.export_in_flight
        );
        let probed = latency(&label, args.probes, channel).await;
        stop.store(true, Ordering::Relaxed);
        let (accepted, refused) = burst
            .join()
            .map_err(|_| anyhow::anyhow!("export thread panicked"))??;
        println!("  exports meanwhile: {accepted} accepted, {refused} refused (retryable)");
        probed
    })
}

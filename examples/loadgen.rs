//! Load generator and benchmark driver for retry-spend-collector.
//!
//! ```text
//! cargo run --release --example loadgen -- run --addr 127.0.0.1:4317 --total-spans 2000000 --pid PID
//! cargo run --release --example loadgen -- gen-jsonl --spans 262144 --out spans.jsonl
//! cargo run --release --example loadgen -- bench-all --collector target/release/retry-spend-collector
//! ```
//!
//! Requests are realistic GenAI traffic: each logical request is one logical span plus one to
//! three attempt spans (retries, fallbacks, replays after partial output, routing drift, no
//! envelope), with the attributes of `examples/retries.jsonl` and `retry_spend.attempt_count`
//! set, so the collector evaluates each request as soon as its export arrives. A small pool of
//! export requests is encoded once; every send copies one and patches its trace ids at
//! precomputed offsets, so ids are unique and the generator does no protobuf encoding.
//!
//! `bench-all` starts every collector configuration itself (pinned to core 0 with `taskset`, the
//! generator on core 1), loads it, stops it with SIGTERM, and prints the BENCHMARKS.md table.
//! Its peers are Rotel and the OpenTelemetry Collector (the distribution of
//! `tools/otelcol/builder-config.yaml`: `--otelcol "$(tools/otelcol/build.sh)"`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::io::{BufWriter, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use bytes::{Buf, BufMut, Bytes};
use clap::{Parser, Subcommand, ValueEnum};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, InstrumentationScope, KeyValue,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    span, status, ResourceSpans, ScopeSpans, Span, Status,
};
use prost::Message;

const EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
/// 2026-08-25T12:00:00Z: within 30 days of the shipped 2026-08-22 pricing snapshot.
const BASE_NANOS: u64 = 1_787_659_200_000_000_000;
const SECOND: u64 = 1_000_000_000;
const PRICING_VERSION: &str = "a42d372ccf0b5dd13ecf71203521f9d2";
const PRICING_SOURCE: &str = "https://aiwave.live/api/pricing";
/// The first 8 bytes of every placeholder trace id; the group number follows.
const MARKER: [u8; 8] = [0xfe, 0xed, 0xfa, 0xce, 0x5e, 0xed, 0xb1, 0x7e];

#[derive(Parser)]
#[command(about = "Load generator and benchmark driver for retry-spend-collector")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Send export requests to a running collector and report throughput, latency, CPU and RSS.
    Run(RunArgs),
    /// Write OTLP JSON lines (one export request per line) for `retry-spend-collector replay`.
    GenJsonl(GenArgs),
    /// Start each collector configuration, load it, and print the benchmark table.
    BenchAll(BenchArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Protocol {
    Grpc,
    Http,
}

impl Protocol {
    fn as_str(self) -> &'static str {
        match self {
            Protocol::Grpc => "grpc",
            Protocol::Http => "http",
        }
    }
}

#[derive(clap::Args, Clone)]
struct LoadArgs {
    /// Spans per export request.
    #[arg(long, default_value_t = 512)]
    spans_per_request: usize,
    /// Distinct pre-encoded requests the sends cycle through.
    #[arg(long, default_value_t = 16)]
    pool: usize,
    /// Export requests in flight at once.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Connections the requests are spread over (gRPC multiplexes; HTTP uses one per sender).
    #[arg(long, default_value_t = 2)]
    connections: usize,
    /// Leave `retry_spend.attempt_count` off the logical spans, as SDKs do: the collector then
    /// holds every request for `group_wait`.
    #[arg(long)]
    no_attempt_count: bool,
    /// Every request one logical span and three attempts (two failures, then the answer), the
    /// shape of the issue 18 acceptance load, instead of the mix of one to three.
    #[arg(long)]
    three_attempts: bool,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Collector address: the OTLP/gRPC port, or the OTLP/HTTP port with `--protocol http`.
    #[arg(long, default_value = "127.0.0.1:4317")]
    addr: SocketAddr,
    #[arg(long, value_enum, default_value = "grpc")]
    protocol: Protocol,
    #[command(flatten)]
    load: LoadArgs,
    /// Stop after this many spans (rounded up to whole requests).
    #[arg(long)]
    total_spans: Option<u64>,
    /// Stop after this long, e.g. "30s" (whichever of the two comes first).
    #[arg(long, value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
    /// The collector's pid: report its CPU-seconds and peak RSS from /proc.
    #[arg(long)]
    pid: Option<u32>,
    /// Print only the machine-readable summary line.
    #[arg(long)]
    quiet: bool,
    /// Write every export's latency in microseconds, one a line, in the order each sender sent
    /// them (with `--concurrency 1`, the order of the exports): where in a run the tail is.
    #[arg(long)]
    latencies: Option<PathBuf>,
}

#[derive(clap::Args)]
struct GenArgs {
    /// Spans to write (rounded up to whole requests).
    #[arg(long, default_value_t = 262_144)]
    spans: u64,
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value_t = 512)]
    spans_per_request: usize,
}

#[derive(clap::Args)]
struct BenchArgs {
    /// The collector binary (build it with `cargo build --release`).
    #[arg(long)]
    collector: PathBuf,
    /// Rotel's `rotel-agent` binary; found in Python's site-packages (`pip install rotel`) when
    /// not given. Without it the Rotel rows are skipped.
    #[arg(long)]
    rotel: Option<PathBuf>,
    /// The OpenTelemetry Collector (`tools/otelcol/build.sh` prints its path), else
    /// `$RETRY_SPEND_OTELCOL`. Without it the Collector rows are skipped.
    #[arg(long)]
    otelcol: Option<PathBuf>,
    /// Pricing snapshots directory.
    #[arg(long, default_value = "config/pricing")]
    pricing: PathBuf,
    /// Rounds; every configuration is measured once per round, rounds interleave them.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Spans per throughput run.
    #[arg(long, default_value_t = 2_000_000)]
    total_spans: u64,
    #[command(flatten)]
    load: LoadArgs,
    /// Export requests of the single-request-in-flight latency runs.
    #[arg(long, default_value_t = 500)]
    latency_requests: u64,
    /// Spans in the file the replay runs read.
    #[arg(long, default_value_t = 262_144)]
    replay_spans: u64,
    /// Configurations to measure (comma separated): rotel, otelcol-nop, otelcol-groupbytrace,
    /// otelcol-file, discard, wal-off, wal, wal-interval, wal-fsync-off, http-discard, http-wal;
    /// a `-nac` suffix sends the load without `retry_spend.attempt_count` and runs ours at
    /// `--group-wait 1s`.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "rotel,otelcol-nop,otelcol-groupbytrace,otelcol-file,discard,wal-off,wal,wal-nac,wal-interval,wal-fsync-off,http-discard,http-wal"
    )]
    configs: Vec<String>,
    /// CPU core of the collector; the generator runs on the next one.
    #[arg(long, default_value_t = 0)]
    collector_core: usize,
    /// Working directory for outputs and logs [default: a new directory under the temp dir].
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Keep the working directory (Parquet files, logs) afterwards.
    #[arg(long)]
    keep: bool,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Cmd::Run(args) => run_command(args),
        Cmd::GenJsonl(args) => gen_jsonl(&args.out, args.spans, args.spans_per_request),
        Cmd::BenchAll(args) => bench_all(args),
    }
}

// ---------------------------------------------------------------------------------------------
// Requests

/// One pre-encoded export request and where its ids are.
struct Template {
    bytes: Vec<u8>,
    patches: Vec<Patch>,
    spans: u64,
    /// Attempt spans: the rows the request becomes.
    attempts: u64,
}

/// An id in the encoded request to rewrite on every send.
#[derive(Clone, Copy)]
struct Patch {
    offset: usize,
    /// The logical request (group) the id belongs to.
    group: u32,
    kind: PatchKind,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PatchKind {
    /// 16 bytes.
    Trace,
    /// 8 bytes: span or parent span id of span `index` of its group.
    Span(u8),
    /// 16 lowercase hex digits inside `retry_spend.request.id`.
    Request,
}

/// splitmix64: ids that look random (so Parquet compresses them like real ones) but are
/// unique per input.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Template {
    /// A copy with ids unique to (`nonce`, `seq`, logical request).
    fn patched(&self, nonce: u32, seq: u64) -> Vec<u8> {
        let mut bytes = self.bytes.clone();
        let base = mix((u64::from(nonce) << 40) ^ seq);
        for patch in &self.patches {
            let group = mix(base ^ u64::from(patch.group));
            let at = patch.offset;
            match patch.kind {
                PatchKind::Trace => {
                    bytes[at..at + 8].copy_from_slice(&group.to_be_bytes());
                    bytes[at + 8..at + 16].copy_from_slice(&mix(group).to_be_bytes());
                }
                PatchKind::Span(index) => {
                    let id = mix(group ^ ((u64::from(index) + 1) << 56));
                    bytes[at..at + 8].copy_from_slice(&id.to_be_bytes());
                }
                PatchKind::Request => {
                    let hex = format!("{:016x}", mix(group ^ 0x5eed));
                    bytes[at..at + 16].copy_from_slice(hex.as_bytes());
                }
            }
        }
        bytes
    }
}

/// A tiny deterministic PRNG (xorshift64*), so every run sends the same traffic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}
fn s(key: &str, value: &str) -> KeyValue {
    kv(key, any_value::Value::StringValue(value.to_owned()))
}
fn int(key: &str, value: i64) -> KeyValue {
    kv(key, any_value::Value::IntValue(value))
}
fn boolean(key: &str, value: bool) -> KeyValue {
    kv(key, any_value::Value::BoolValue(value))
}
fn double(key: &str, value: f64) -> KeyValue {
    kv(key, any_value::Value::DoubleValue(value))
}

/// One attempt of a scenario.
struct Attempt {
    model: &'static str,
    served: &'static str,
    input: i64,
    cached: i64,
    cap: i64,
    output: i64,
    error: Option<&'static str>,
    reached_client: bool,
}

fn attempt(model: &'static str, input: i64, cached: i64, cap: i64, output: i64) -> Attempt {
    Attempt {
        model,
        served: model,
        input,
        cached,
        cap,
        output,
        error: None,
        reached_client: false,
    }
}

impl Attempt {
    fn failed(mut self, error: &'static str) -> Attempt {
        self.error = Some(error);
        self
    }
}

struct EnvelopeSpec {
    group: &'static str,
    max_usd: f64,
    max_after: i64,
    allow_fallback: bool,
    families: &'static [&'static str],
    task: &'static str,
    replay_safe: bool,
}

const SUPPORT: EnvelopeSpec = EnvelopeSpec {
    group: "vip",
    max_usd: 0.015,
    max_after: 1,
    allow_fallback: true,
    families: &["deepseek", "qwen", "glm"],
    task: "support_summary",
    replay_safe: false,
};

const MODELS: [&str; 6] = [
    "deepseek-v4-flash",
    "deepseek-v4-pro",
    "kimi-k2.7-code",
    "kimi-k2.6",
    "glm-5",
    "qwen3.5-122b-a10b",
];

/// A logical request: its envelope (none: unaudited) and attempts. The mix, by weight out of
/// 16: 6 first attempts, 3 retries within the envelope, 2 fallbacks, and one each of
/// over_attempts, over_envelope, replay_unsafe, routing drift and a retry without envelope.
fn scenario(rng: &mut Rng) -> (Option<EnvelopeSpec>, Vec<Attempt>) {
    let input = 4_000 + 1_000 * rng.below(12) as i64;
    let cached = 500 * rng.below(5) as i64;
    let out = 200 + rng.below(600) as i64;
    match rng.below(16) {
        0..=5 => {
            let model = MODELS[rng.below(MODELS.len() as u64) as usize];
            (Some(SUPPORT), vec![attempt(model, input, cached, 800, out)])
        }
        6..=8 => (
            Some(SUPPORT),
            vec![
                attempt("glm-5", input, cached, 800, 0).failed("rate_limited"),
                attempt("glm-5", input, cached, 800, out),
            ],
        ),
        9 | 10 => (
            Some(SUPPORT),
            vec![
                attempt("deepseek-v4-pro", input, cached, 800, 0).failed("timeout"),
                attempt("deepseek-v4-flash", input, cached, 800, out),
            ],
        ),
        11 => (
            Some(SUPPORT),
            vec![
                attempt("deepseek-v4-flash", input, 0, 600, 0).failed("rate_limited"),
                attempt("deepseek-v4-flash", input, 0, 600, 0).failed("rate_limited"),
                attempt("deepseek-v4-flash", input, 0, 600, out),
            ],
        ),
        12 => (
            Some(EnvelopeSpec {
                max_usd: 0.05,
                max_after: 2,
                allow_fallback: false,
                families: &[],
                task: "code_patch",
                ..SUPPORT
            }),
            vec![
                attempt("kimi-k2.7-code", 30_000, 0, 4_000, 0).failed("server_error"),
                attempt("kimi-k2.7-code", 30_000, 0, 4_000, 0).failed("server_error"),
                attempt("kimi-k2.7-code", 30_000, 0, 4_000, 3_120),
            ],
        ),
        13 => {
            let mut broken = attempt("glm-5", input, cached, 1_200, 300).failed("connection_reset");
            broken.reached_client = true;
            (
                Some(EnvelopeSpec {
                    task: "chat",
                    replay_safe: rng.below(2) == 0,
                    ..SUPPORT
                }),
                vec![broken, attempt("glm-5", input, cached, 1_200, out)],
            )
        }
        14 => {
            let mut swapped = attempt("deepseek-v4-flash", input, 0, 800, out);
            swapped.served = "qwen3.5-122b-a10b";
            let fallback = if rng.below(2) == 0 {
                attempt("kimi-k2.6", input, cached, 800, out)
            } else {
                swapped
            };
            (
                Some(SUPPORT),
                vec![
                    attempt("glm-5", input, cached, 800, 0).failed("overloaded"),
                    fallback,
                ],
            )
        }
        _ => (
            None,
            vec![
                attempt("deepseek-v4-flash", input, cached, 800, 0).failed("timeout"),
                attempt("deepseek-v4-flash", input, cached, 800, out),
            ],
        ),
    }
}

/// A request of three attempts: two failures and the answer, on one model or falling back.
fn three_attempt_scenario(rng: &mut Rng) -> (Option<EnvelopeSpec>, Vec<Attempt>) {
    let input = 4_000 + 1_000 * rng.below(12) as i64;
    let cached = 500 * rng.below(5) as i64;
    let out = 200 + rng.below(600) as i64;
    let last = if rng.below(4) == 0 {
        "deepseek-v4-flash"
    } else {
        "glm-5"
    };
    (
        Some(SUPPORT),
        vec![
            attempt("glm-5", input, cached, 800, 0).failed("rate_limited"),
            attempt("glm-5", input, cached, 800, 0).failed("timeout"),
            attempt(last, input, cached, 800, out),
        ],
    )
}

fn envelope_attributes(env: &EnvelopeSpec) -> Vec<KeyValue> {
    let families = env
        .families
        .iter()
        .map(|f| AnyValue {
            value: Some(any_value::Value::StringValue((*f).to_owned())),
        })
        .collect();
    let mut attributes = vec![
        s("retry_spend.pricing.source", PRICING_SOURCE),
        s("retry_spend.pricing.checked_at", "2026-08-22"),
        s("retry_spend.pricing.version", PRICING_VERSION),
        s("retry_spend.billing_group", env.group),
        double("retry_spend.envelope.max_incremental_usd", env.max_usd),
        int(
            "retry_spend.envelope.max_attempts_after_first",
            env.max_after,
        ),
        boolean(
            "retry_spend.envelope.allow_family_fallback",
            env.allow_fallback,
        ),
        kv(
            "retry_spend.envelope.allowed_fallback_families",
            any_value::Value::ArrayValue(ArrayValue { values: families }),
        ),
        s("retry_spend.task.type", env.task),
    ];
    if env.replay_safe {
        attributes.push(boolean("retry_spend.envelope.replay_safe", true));
    }
    attributes
}

fn placeholder(group: u32) -> Vec<u8> {
    let mut id = MARKER.to_vec();
    id.extend_from_slice(&group.to_be_bytes());
    id.extend_from_slice(&[0; 4]);
    id
}

/// Span ids are `SPAN_MARKER[0..2]`, the index, the group, `SPAN_MARKER[2]`.
const SPAN_MARKER: [u8; 3] = [0xd1, 0xce, 0xd7];
/// Request ids are `req-` + 8 hex digits of the group + this; all 16 are patched.
const REQUEST_MARKER: &[u8] = b"zqzqzqzq";

fn span_id(group: u32, index: u8) -> Vec<u8> {
    let mut id = vec![SPAN_MARKER[0], SPAN_MARKER[1], index];
    id.extend_from_slice(&group.to_be_bytes());
    id.push(SPAN_MARKER[2]);
    id
}

/// Builds export request number `number` of the pool: `spans` spans of one service.
fn build_request(
    number: usize,
    spans: usize,
    with_attempt_count: bool,
    three_attempts: bool,
) -> (ExportTraceServiceRequest, u64) {
    const SERVICES: [&str; 4] = [
        "support-bot",
        "code-agent",
        "chat-frontend",
        "batch-extract",
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (number as u64 + 1).wrapping_mul(0x1234_5679));
    let mut out = Vec::with_capacity(spans);
    let mut attempts_total = 0;
    let mut group: u32 = 0;
    while out.len() < spans {
        let (envelope, attempts) = if three_attempts {
            three_attempt_scenario(&mut rng)
        } else {
            scenario(&mut rng)
        };
        let trace_id = placeholder(group);
        let start = BASE_NANOS + u64::from(group) * 7 * SECOND + number as u64 * 3_600 * SECOND;
        if out.len() + attempts.len() + 1 > spans {
            // The last few slots: plain GenAI spans without contract attributes.
            let a = attempt("deepseek-v4-flash", 5_000, 0, 800, 300);
            out.push(Span {
                trace_id,
                span_id: span_id(group, 0),
                name: "chat deepseek-v4-flash".into(),
                kind: span::SpanKind::Client as i32,
                start_time_unix_nano: start,
                end_time_unix_nano: start + 2 * SECOND,
                attributes: gen_ai_attributes(&a),
                ..Default::default()
            });
            attempts_total += 1;
            group += 1;
            continue;
        }
        let logical_id = span_id(group, 0xff);
        let request_id = format!(
            "req-{group:08x}{}",
            std::str::from_utf8(REQUEST_MARKER).unwrap_or_default()
        );
        let mut t = start + SECOND / 10;
        for (i, a) in attempts.iter().enumerate() {
            let mut attributes = vec![
                s("retry_spend.span.role", "attempt"),
                s("retry_spend.request.id", &request_id),
                int("retry_spend.attempt.index", i as i64),
            ];
            attributes.extend(gen_ai_attributes(a));
            out.push(Span {
                trace_id: trace_id.clone(),
                span_id: span_id(group, i as u8),
                parent_span_id: logical_id.clone(),
                name: format!("chat {}", a.model),
                kind: span::SpanKind::Client as i32,
                start_time_unix_nano: t,
                end_time_unix_nano: t + 2 * SECOND,
                attributes,
                status: a.error.map(|_| Status {
                    code: status::StatusCode::Error as i32,
                    message: "upstream error".into(),
                }),
                ..Default::default()
            });
            t += 3 * SECOND;
        }
        let mut attributes = vec![
            s("retry_spend.span.role", "logical_request"),
            s("retry_spend.request.id", &request_id),
        ];
        if with_attempt_count {
            attributes.push(int("retry_spend.attempt_count", attempts.len() as i64));
        }
        if let Some(env) = &envelope {
            attributes.extend(envelope_attributes(env));
        }
        out.push(Span {
            trace_id,
            span_id: logical_id,
            name: "llm.request".into(),
            kind: span::SpanKind::Internal as i32,
            start_time_unix_nano: start,
            end_time_unix_nano: t,
            attributes,
            ..Default::default()
        });
        attempts_total += attempts.len() as u64;
        group += 1;
    }
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    s("service.name", SERVICES[number % SERVICES.len()]),
                    s("deployment.environment", "prod"),
                ],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "retry-spend-sdk".into(),
                    version: "0.4.0".into(),
                    ..Default::default()
                }),
                spans: out,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    };
    (request, attempts_total)
}

fn gen_ai_attributes(a: &Attempt) -> Vec<KeyValue> {
    let mut attributes = vec![
        s("gen_ai.operation.name", "chat"),
        s("gen_ai.provider.name", "aiwave"),
        s("gen_ai.request.model", a.model),
        s("gen_ai.response.model", a.served),
        int("gen_ai.request.max_tokens", a.cap),
        int("gen_ai.usage.input_tokens", a.input),
        int("gen_ai.usage.cache_read.input_tokens", a.cached),
    ];
    if a.output > 0 {
        attributes.push(int("gen_ai.usage.output_tokens", a.output));
    }
    if let Some(error) = a.error {
        attributes.push(s("error.type", error));
    }
    if a.reached_client {
        attributes.push(boolean("retry_spend.attempt.output_reached_client", true));
    }
    attributes
}

/// Encodes the pool and finds every trace id in the encoding.
fn build_pool(
    size: usize,
    spans_per_request: usize,
    with_attempt_count: bool,
    three_attempts: bool,
) -> anyhow::Result<Vec<Template>> {
    (0..size.max(1))
        .map(|number| {
            let (request, attempts) = build_request(
                number,
                spans_per_request,
                with_attempt_count,
                three_attempts,
            );
            let bytes = request.encode_to_vec();
            let spans = spans_per_request as u64;
            let patches = find_patches(&bytes);
            let count = |kind: fn(&PatchKind) -> bool| {
                patches.iter().filter(|p| kind(&p.kind)).count() as u64
            };
            if count(|k| *k == PatchKind::Trace) != spans
                || count(|k| matches!(k, PatchKind::Span(_))) < spans
            {
                bail!("could not find every id in a request of {spans} spans");
            }
            Ok(Template {
                bytes,
                patches,
                spans,
                attempts,
            })
        })
        .collect()
}

/// Every placeholder id of an encoded request. Ids are bytes fields: a trace id is field 1 of
/// a span (tag 0x0a, length 16), a span id field 2 (0x12, 8), a parent span id field 4 (0x22, 8).
fn find_patches(bytes: &[u8]) -> Vec<Patch> {
    let mut patches = Vec::new();
    for at in 2..bytes.len() {
        let tag = &bytes[at - 2..at];
        let rest = &bytes[at..];
        if tag == [0x0a, 0x10] && rest.starts_with(&MARKER) && rest.len() >= 16 {
            let group = u32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]);
            patches.push(Patch {
                offset: at,
                group,
                kind: PatchKind::Trace,
            });
        } else if (tag == [0x12, 0x08] || tag == [0x22, 0x08])
            && rest.len() >= 8
            && rest[..2] == SPAN_MARKER[..2]
            && rest[7] == SPAN_MARKER[2]
        {
            let group = u32::from_be_bytes([rest[3], rest[4], rest[5], rest[6]]);
            patches.push(Patch {
                offset: at,
                group,
                kind: PatchKind::Span(rest[2]),
            });
        } else if tag == *b"q-" && rest.len() >= 16 && rest[8..16] == *REQUEST_MARKER {
            let group = std::str::from_utf8(&rest[..8])
                .ok()
                .and_then(|h| u32::from_str_radix(h, 16).ok());
            if let Some(group) = group {
                patches.push(Patch {
                    offset: at,
                    group,
                    kind: PatchKind::Request,
                });
            }
        }
    }
    patches
}

/// A per-process nonce so two runs against one collector never share a trace id.
fn nonce() -> u32 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() ^ d.as_secs() as u32);
    nanos ^ std::process::id().rotate_left(16)
}

fn gen_jsonl(out: &Path, spans: u64, spans_per_request: usize) -> anyhow::Result<()> {
    let pool = build_pool(16, spans_per_request, true, false)?;
    let nonce = nonce();
    let file = fs::File::create(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut file = BufWriter::new(file);
    let mut written = 0;
    let mut seq = 0;
    while written < spans {
        let template = &pool[seq as usize % pool.len()];
        let request = ExportTraceServiceRequest::decode(&template.patched(nonce, seq)[..])?;
        serde_json::to_writer(&mut file, &request)?;
        file.write_all(b"\n")?;
        written += template.spans;
        seq += 1;
    }
    file.flush()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Sending

/// Sends `Bytes` as they are and ignores the answer's content.
#[derive(Clone, Copy, Default)]
struct BytesCodec;
struct BytesEncoder;
struct BytesDecoder;

impl tonic::codec::Codec for BytesCodec {
    type Encode = Bytes;
    type Decode = ();
    type Encoder = BytesEncoder;
    type Decoder = BytesDecoder;
    fn encoder(&mut self) -> BytesEncoder {
        BytesEncoder
    }
    fn decoder(&mut self) -> BytesDecoder {
        BytesDecoder
    }
}

impl tonic::codec::Encoder for BytesEncoder {
    type Item = Bytes;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Bytes,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for BytesDecoder {
    type Item = ();
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<()>, tonic::Status> {
        src.advance(src.remaining());
        Ok(Some(()))
    }
}

/// Shared by every sender: which request is next, and when to stop.
struct Control {
    next: AtomicU64,
    max_requests: u64,
    deadline: Option<Instant>,
    nonce: u32,
    pool: Vec<Template>,
}

impl Control {
    /// The next request to send, or `None` once the run is over.
    fn take(&self) -> Option<(u64, &Template)> {
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return None;
        }
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        (seq < self.max_requests).then(|| (seq, &self.pool[seq as usize % self.pool.len()]))
    }
}

#[derive(Default)]
struct SenderStats {
    latencies_us: Vec<u32>,
    requests: u64,
    spans: u64,
    attempts: u64,
    refused: u64,
    errors: u64,
    first_error: Option<String>,
}

impl SenderStats {
    fn merge(&mut self, other: SenderStats) {
        self.latencies_us.extend(other.latencies_us);
        self.requests += other.requests;
        self.spans += other.spans;
        self.attempts += other.attempts;
        self.refused += other.refused;
        self.errors += other.errors;
        self.first_error = self.first_error.take().or(other.first_error);
    }

    fn ok(&mut self, template: &Template, started: Instant) {
        let micros = started.elapsed().as_micros();
        self.latencies_us
            .push(u32::try_from(micros).unwrap_or(u32::MAX));
        self.requests += 1;
        self.spans += template.spans;
        self.attempts += template.attempts;
    }

    fn error(&mut self, message: String) {
        self.errors += 1;
        self.first_error.get_or_insert(message);
    }
}

/// Refusals (the collector's backpressure) are retried like an SDK would, this many times.
const MAX_TRIES: u32 = 1_000;
const BACKOFF: Duration = Duration::from_millis(5);

async fn grpc_sender(channel: tonic::transport::Channel, control: Arc<Control>) -> SenderStats {
    let mut stats = SenderStats::default();
    let mut grpc = tonic::client::Grpc::new(channel);
    let path = http::uri::PathAndQuery::from_static(EXPORT_PATH);
    while let Some((seq, template)) = control.take() {
        let body = Bytes::from(template.patched(control.nonce, seq));
        for _ in 0..MAX_TRIES {
            if let Err(e) = grpc.ready().await {
                stats.error(format!("connection: {e}"));
                return stats;
            }
            let started = Instant::now();
            match grpc
                .unary(tonic::Request::new(body.clone()), path.clone(), BytesCodec)
                .await
            {
                Ok(_) => {
                    stats.ok(template, started);
                    break;
                }
                Err(status)
                    if matches!(
                        status.code(),
                        tonic::Code::Unavailable | tonic::Code::ResourceExhausted
                    ) =>
                {
                    stats.refused += 1;
                    tokio::time::sleep(BACKOFF).await;
                }
                Err(status) => {
                    stats.error(format!("{status:?}"));
                    break;
                }
            }
        }
    }
    stats
}

fn http_sender(url: String, control: Arc<Control>) -> SenderStats {
    let mut stats = SenderStats::default();
    let client = match reqwest::blocking::Client::builder()
        .tcp_nodelay(true)
        .timeout(Duration::from_secs(60))
        .build()
    {
        Ok(client) => client,
        Err(e) => {
            stats.error(format!("http client: {e}"));
            return stats;
        }
    };
    while let Some((seq, template)) = control.take() {
        let body = Bytes::from(template.patched(control.nonce, seq));
        for _ in 0..MAX_TRIES {
            let started = Instant::now();
            let answer = client
                .post(&url)
                .header("content-type", "application/x-protobuf")
                .body(body.clone())
                .send()
                .and_then(|r| {
                    let status = r.status();
                    r.bytes().map(|_| status)
                });
            match answer {
                Ok(status) if status.is_success() => {
                    stats.ok(template, started);
                    break;
                }
                Ok(status) if status.as_u16() == 429 || status.as_u16() == 503 => {
                    stats.refused += 1;
                    std::thread::sleep(BACKOFF);
                }
                Ok(status) => {
                    stats.error(format!("HTTP {status}"));
                    break;
                }
                Err(e) => {
                    stats.error(format!("{e}"));
                    break;
                }
            }
        }
    }
    stats
}

/// What one load run measured.
struct LoadReport {
    protocol: Protocol,
    stats: SenderStats,
    wall: Duration,
    p50_ms: f64,
    p99_ms: f64,
    /// Collector CPU-seconds from the first send until it was idle again, with `--pid`.
    cpu_s: Option<f64>,
    peak_rss_mib: Option<f64>,
}

impl LoadReport {
    fn spans_per_s(&self) -> f64 {
        self.stats.spans as f64 / self.wall.as_secs_f64()
    }

    fn summary_line(&self) -> String {
        let mut line = format!(
            "loadgen: protocol={} requests={} spans={} attempts={} refused={} errors={} wall_s={:.3} spans_per_s={:.0} p50_ms={:.3} p99_ms={:.3}",
            self.protocol.as_str(),
            self.stats.requests,
            self.stats.spans,
            self.stats.attempts,
            self.stats.refused,
            self.stats.errors,
            self.wall.as_secs_f64(),
            self.spans_per_s(),
            self.p50_ms,
            self.p99_ms,
        );
        if let Some(cpu) = self.cpu_s {
            line += &format!(
                " cpu_s={cpu:.3} spans_per_cpu_s={:.0}",
                self.stats.spans as f64 / cpu.max(1e-9)
            );
        }
        if let Some(rss) = self.peak_rss_mib {
            line += &format!(" peak_rss_mib={rss:.1}");
        }
        line
    }
}

fn percentile_ms(sorted_us: &[u32], pct: usize) -> f64 {
    if sorted_us.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted_us.len() - 1) * pct).div_ceil(100);
    f64::from(sorted_us[index]) / 1000.0
}

fn load(
    addr: SocketAddr,
    protocol: Protocol,
    args: &LoadArgs,
    total_spans: Option<u64>,
    duration: Option<Duration>,
    pid: Option<u32>,
    latency_log: Option<&Path>,
) -> anyhow::Result<LoadReport> {
    let pool = build_pool(
        args.pool,
        args.spans_per_request,
        !args.no_attempt_count,
        args.three_attempts,
    )?;
    let per_request = args.spans_per_request.max(1) as u64;
    let max_requests = match (total_spans, duration) {
        (Some(spans), _) => spans.div_ceil(per_request),
        (None, Some(_)) => u64::MAX,
        (None, None) => 1_000_000u64.div_ceil(per_request),
    };
    let concurrency = args.concurrency.max(1);
    let connections = args.connections.clamp(1, concurrency);
    let before = pid.map(cpu_ticks).transpose()?;
    let started = Instant::now();
    let control = Arc::new(Control {
        next: AtomicU64::new(0),
        max_requests,
        deadline: duration.map(|d| started + d),
        nonce: nonce(),
        pool,
    });
    let mut stats = SenderStats::default();
    match protocol {
        Protocol::Grpc => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let all = runtime.block_on(async {
                let mut channels = Vec::new();
                for _ in 0..connections {
                    let channel =
                        tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
                            .tcp_nodelay(true)
                            .timeout(Duration::from_secs(60))
                            .connect()
                            .await
                            .with_context(|| format!("cannot connect to {addr}"))?;
                    channels.push(channel);
                }
                let tasks: Vec<_> = (0..concurrency)
                    .map(|i| {
                        tokio::spawn(grpc_sender(
                            channels[i % connections].clone(),
                            Arc::clone(&control),
                        ))
                    })
                    .collect();
                let mut all = Vec::new();
                for task in tasks {
                    all.push(task.await?);
                }
                anyhow::Ok(all)
            })?;
            all.into_iter().for_each(|s| stats.merge(s));
        }
        Protocol::Http => {
            let url = format!("http://{addr}/v1/traces");
            let threads: Vec<_> = (0..concurrency)
                .map(|_| {
                    let (url, control) = (url.clone(), Arc::clone(&control));
                    std::thread::spawn(move || http_sender(url, control))
                })
                .collect();
            for thread in threads {
                let sender = thread
                    .join()
                    .map_err(|_| anyhow::anyhow!("a sender thread panicked"))?;
                stats.merge(sender);
            }
        }
    }
    let wall = started.elapsed();
    let cpu_s = match (pid, before) {
        (Some(pid), Some(before)) => Some(ticks_to_s(settled_ticks(pid)? - before)),
        _ => None,
    };
    let peak_rss_mib = pid.and_then(peak_rss_kib).map(|kib| kib as f64 / 1024.0);
    if let Some(path) = latency_log {
        let lines: String = stats
            .latencies_us
            .iter()
            .map(|us| format!("{us}\n"))
            .collect();
        fs::write(path, lines).with_context(|| format!("cannot write {}", path.display()))?;
    }
    stats.latencies_us.sort_unstable();
    Ok(LoadReport {
        protocol,
        p50_ms: percentile_ms(&stats.latencies_us, 50),
        p99_ms: percentile_ms(&stats.latencies_us, 99),
        stats,
        wall,
        cpu_s,
        peak_rss_mib,
    })
}

fn run_command(args: RunArgs) -> anyhow::Result<()> {
    let report = load(
        args.addr,
        args.protocol,
        &args.load,
        args.total_spans,
        args.duration,
        args.pid,
        args.latencies.as_deref(),
    )?;
    if !args.quiet {
        eprintln!(
            "{} {} requests ({} spans) in {:.2} s: {:.0} spans/s, export latency p50 {:.2} ms, p99 {:.2} ms, {} refused, {} errors",
            report.protocol.as_str(),
            report.stats.requests,
            report.stats.spans,
            report.wall.as_secs_f64(),
            report.spans_per_s(),
            report.p50_ms,
            report.p99_ms,
            report.stats.refused,
            report.stats.errors,
        );
        if let (Some(cpu), Some(rss)) = (report.cpu_s, report.peak_rss_mib) {
            eprintln!(
                "collector: {cpu:.2} CPU-s ({:.0} spans per CPU-second), peak RSS {rss:.1} MiB",
                report.stats.spans as f64 / cpu.max(1e-9)
            );
        }
        if let Some(error) = &report.stats.first_error {
            eprintln!("first error: {error}");
        }
    }
    println!("{}", report.summary_line());
    if report.stats.errors > 0 {
        bail!(
            "{} exports failed (first: {})",
            report.stats.errors,
            report.stats.first_error.unwrap_or_default()
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// /proc

/// Clock ticks per second of /proc/<pid>/stat (`getconf CLK_TCK`; 100 on Linux everywhere).
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

fn ticks_to_s(ticks: u64) -> f64 {
    ticks as f64 / clock_ticks()
}

/// State and utime + stime (fields 3, 14 and 15) of /proc/<pid>/stat.
fn proc_stat(pid: u32) -> anyhow::Result<(char, u64)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("cannot read /proc/{pid}/stat"))?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')').context("malformed stat")? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first().and_then(|f| f.chars().next()).unwrap_or('?');
    let utime: u64 = fields.get(11).context("no utime")?.parse()?;
    let stime: u64 = fields.get(12).context("no stime")?.parse()?;
    Ok((state, utime + stime))
}

fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    proc_stat(pid).map(|(_, ticks)| ticks)
}

/// CPU ticks once the process has been idle (less than 2 ticks in 300 ms) or 30 s have passed:
/// a collector acknowledges before its pipeline has caught up.
fn settled_ticks(pid: u32) -> anyhow::Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = cpu_ticks(pid)?;
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = cpu_ticks(pid)?;
        if now.saturating_sub(last) < 2 || Instant::now() >= deadline {
            return Ok(now);
        }
        last = now;
    }
}

/// VmHWM of /proc/<pid>/status, in KiB.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

// ---------------------------------------------------------------------------------------------
// bench-all

/// A process this driver started, pinned to one core.
struct Pinned {
    child: Child,
    name: String,
}

impl Pinned {
    fn spawn(
        cores: &str,
        program: &Path,
        args: &[OsString],
        cwd: &Path,
        log: &Path,
    ) -> anyhow::Result<Pinned> {
        let log_file = fs::File::create(log)?;
        let child = Command::new("taskset")
            .arg("-c")
            .arg(cores)
            .arg(program)
            .args(args)
            .current_dir(cwd)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .spawn()
            .with_context(|| format!("cannot start taskset {}", program.display()))?;
        Ok(Pinned {
            child,
            name: program.display().to_string(),
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits for the exit. Returns the process's whole CPU time (read from
    /// /proc while it is a zombie, before it is reaped) and its peak RSS.
    fn stop(mut self, timeout: Duration) -> anyhow::Result<(f64, f64)> {
        let pid = self.pid();
        let mut peak_kib = peak_rss_kib(pid).unwrap_or(0);
        Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()?;
        let deadline = Instant::now() + timeout;
        let mut last_ticks = 0;
        loop {
            if let Some(kib) = peak_rss_kib(pid) {
                peak_kib = peak_kib.max(kib);
            }
            match proc_stat(pid) {
                Ok(('Z', ticks)) => {
                    last_ticks = ticks;
                    break;
                }
                Ok((_, ticks)) => last_ticks = ticks,
                Err(_) => break,
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                bail!("{} did not stop within {timeout:?}", self.name);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let status = self.child.wait()?;
        if !status.success() {
            bail!("{} exited with {status}", self.name);
        }
        Ok((ticks_to_s(last_ticks), peak_kib as f64 / 1024.0))
    }
}

/// A server that stopped before it listened: most often a port [`free_port`] handed out was
/// taken by another socket before the server bound it, so the run is started again.
#[derive(Debug, thiserror::Error)]
#[error("the collector exited with {status} before listening on {addr}")]
struct ExitedBeforeListening {
    status: std::process::ExitStatus,
    addr: SocketAddr,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn wait_for_port(addr: SocketAddr, child: &mut Child) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            return Err(ExitedBeforeListening { status, addr }.into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("nothing listens on {addr} after 30 s")
}

/// Finds `rotel-agent` in the Python package `rotel` (`pip install rotel`).
fn find_rotel() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import rotel, os; print(os.path.dirname(rotel.__file__))",
        ])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let dir = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    let agent = dir.join("rotel-agent");
    agent.is_file().then_some(agent)
}

/// Where tests and benchmarks find the OpenTelemetry Collector (`.ci/run` sets it).
const OTELCOL_ENV: &str = "RETRY_SPEND_OTELCOL";

/// The OpenTelemetry Collector's config for one of its setups: its OTLP receiver on the
/// benchmark's ports, its own metrics off, logs at warn like ours.
fn otelcol_config(setup: Setup, grpc: SocketAddr, http: SocketAddr, dir: &Path) -> String {
    let (processors, exporter) = match setup {
        Setup::OtelGroupByTrace => ("[groupbytrace]", "nop"),
        Setup::OtelFile => ("[]", "file"),
        _ => ("[]", "nop"),
    };
    format!(
        "receivers:
  otlp:
    protocols:
      grpc:
        endpoint: {grpc}
      http:
        endpoint: {http}
processors:
  groupbytrace:
    wait_duration: 1s
exporters:
  nop:
  file:
    path: {out}
service:
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
  pipelines:
    traces:
      receivers: [otlp]
      processors: {processors}
      exporters: [{exporter}]
",
        out = dir.join("otelcol-spans.jsonl").display()
    )
}

/// A collector configuration of the benchmark.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Setup {
    Rotel,
    /// The OpenTelemetry Collector: OTLP receiver → nop exporter (decode + discard).
    OtelNop,
    /// OTLP receiver → groupbytrace processor (1 s) → nop exporter: holds whole traces as ours
    /// holds requests.
    OtelGroupByTrace,
    /// OTLP receiver → file exporter (OTLP JSON lines, what `replay` reads): persists spans.
    OtelFile,
    Discard,
    WalOff,
    Wal,
    WalInterval,
    WalFsyncOff,
}

impl Setup {
    fn is_otelcol(self) -> bool {
        matches!(
            self,
            Setup::OtelNop | Setup::OtelGroupByTrace | Setup::OtelFile
        )
    }
}

struct Config {
    name: String,
    setup: Setup,
    protocol: Protocol,
    label: &'static str,
    /// The load without `retry_spend.attempt_count` (suffix `-nac`), our collector at
    /// `--group-wait 1s`.
    no_attempt_count: bool,
}

fn parse_config(name: &str) -> anyhow::Result<Config> {
    let (protocol, base) = match name.strip_prefix("http-") {
        Some(base) => (Protocol::Http, base),
        None => (Protocol::Grpc, name),
    };
    let (base, no_attempt_count) = match base.strip_suffix("-nac") {
        Some(base) => (base, true),
        None => (base, false),
    };
    let (setup, label) = match base {
        "rotel" => (Setup::Rotel, "Rotel, blackhole exporter (decode + discard)"),
        "otelcol-nop" => (
            Setup::OtelNop,
            "OpenTelemetry Collector, otlp → nop (decode + discard)",
        ),
        "otelcol-groupbytrace" => (
            Setup::OtelGroupByTrace,
            "OpenTelemetry Collector, otlp → groupbytrace (1 s) → nop",
        ),
        "otelcol-file" => (
            Setup::OtelFile,
            "OpenTelemetry Collector, otlp → file (OTLP JSON)",
        ),
        "discard" => (Setup::Discard, "ours, `--sink none` (decode + discard)"),
        "wal-off" => (Setup::WalOff, "ours, Parquet, `--wal off`"),
        "wal" => (
            Setup::Wal,
            "ours, Parquet + WAL, fsync always (group commit)",
        ),
        "wal-interval" => (
            Setup::WalInterval,
            "ours, Parquet + WAL, fsync interval 1 s",
        ),
        "wal-fsync-off" => (Setup::WalFsyncOff, "ours, Parquet + WAL, fsync off"),
        other => bail!("unknown configuration {other:?}"),
    };
    let label = match (no_attempt_count, setup) {
        (false, _) => label,
        (true, Setup::Rotel) => "Rotel, blackhole, load without attempt_count",
        (true, Setup::OtelNop) => "OpenTelemetry Collector, nop, load without attempt_count",
        (true, Setup::OtelGroupByTrace) => {
            "OpenTelemetry Collector, groupbytrace (1 s), load without attempt_count"
        }
        (true, Setup::OtelFile) => "OpenTelemetry Collector, file, load without attempt_count",
        (true, Setup::Discard) => "ours, `--sink none`, load without attempt_count",
        (true, Setup::Wal) => {
            "ours, Parquet + WAL, fsync always, no attempt_count, `--group-wait 1s`"
        }
        (true, _) => "ours, load without attempt_count, `--group-wait 1s`",
    };
    Ok(Config {
        name: name.to_owned(),
        setup,
        protocol,
        label,
        no_attempt_count,
    })
}

/// One measured run of one configuration.
#[derive(Clone, Debug, Default)]
struct Sample {
    spans: f64,
    spans_per_s: f64,
    cpu_s: f64,
    spans_per_cpu_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    peak_rss_mib: f64,
    parquet_bytes: f64,
    parquet_rows: f64,
}

struct Bench {
    args: BenchArgs,
    work: PathBuf,
    rotel: Option<PathBuf>,
    otelcol: Option<PathBuf>,
    pricing: PathBuf,
    collector: PathBuf,
    generator: PathBuf,
    run_number: usize,
}

impl Bench {
    fn collector_core(&self) -> usize {
        self.args.collector_core
    }

    fn generator_core(&self) -> usize {
        self.args.collector_core + 1
    }

    /// Starts `setup`, sends `spans` with `load`, stops it; returns the sample. A server that
    /// exits before it listens is started again on fresh ports, twice at most.
    fn measure(&mut self, config: &Config, load: &LoadArgs, spans: u64) -> anyhow::Result<Sample> {
        let mut tries = 0;
        loop {
            tries += 1;
            match self.measure_once(config, load, spans) {
                Err(e) if tries < 3 && e.is::<ExitedBeforeListening>() => {
                    eprintln!("  {e}; starting it again on other ports");
                }
                result => return result,
            }
        }
    }

    fn measure_once(
        &mut self,
        config: &Config,
        load: &LoadArgs,
        spans: u64,
    ) -> anyhow::Result<Sample> {
        self.run_number += 1;
        let dir = self
            .work
            .join(format!("{:03}-{}", self.run_number, config.name));
        fs::create_dir_all(&dir)?;
        let (grpc, http, metrics) = (free_port()?, free_port()?, free_port()?);
        let grpc_addr: SocketAddr = format!("127.0.0.1:{grpc}").parse()?;
        let http_addr: SocketAddr = format!("127.0.0.1:{http}").parse()?;
        let mut args: Vec<OsString> = Vec::new();
        let program = if config.setup == Setup::Rotel {
            let rotel = self.rotel.clone().context("no rotel-agent")?;
            for arg in [
                "start".to_owned(),
                "--otlp-grpc-endpoint".into(),
                grpc_addr.to_string(),
                "--otlp-http-endpoint".into(),
                http_addr.to_string(),
                "--exporter".into(),
                "blackhole".into(),
                "--pid-file".into(),
            ] {
                args.push(arg.into());
            }
            args.push(dir.join("rotel.pid").into());
            rotel
        } else if config.setup.is_otelcol() {
            let otelcol = self.otelcol.clone().context("no otelcol")?;
            let config_file = dir.join("otelcol.yaml");
            fs::write(
                &config_file,
                otelcol_config(config.setup, grpc_addr, http_addr, &dir),
            )?;
            args.push("--config".into());
            args.push(config_file.into());
            otelcol
        } else {
            let config_file = dir.join("collector.toml");
            let fsync = match config.setup {
                Setup::WalInterval => "[wal]\nfsync = \"interval\"\n",
                Setup::WalFsyncOff => "[wal]\nfsync = \"off\"\n",
                _ => "",
            };
            fs::write(&config_file, fsync)?;
            args.push("serve".into());
            args.push("--config".into());
            args.push(config_file.into());
            for (flag, value) in [
                ("--grpc-addr", grpc_addr.to_string()),
                ("--http-addr", http_addr.to_string()),
                ("--metrics-addr", format!("127.0.0.1:{metrics}")),
            ] {
                args.push(flag.into());
                args.push(value.into());
            }
            args.push("--pricing".into());
            args.push(self.pricing.clone().into());
            args.push("--output".into());
            args.push(dir.join("out").into());
            match config.setup {
                Setup::Discard => args.extend(["--sink".into(), "none".into()]),
                Setup::WalOff => args.extend(["--wal".into(), "off".into()]),
                _ => {}
            }
            if config.no_attempt_count {
                args.extend(["--group-wait".into(), "1s".into()]);
            }
            self.collector.clone()
        };
        let mut server = Pinned::spawn(
            &self.collector_core().to_string(),
            &program,
            &args,
            &dir,
            &dir.join("collector.log"),
        )?;
        let addr = match config.protocol {
            Protocol::Grpc => grpc_addr,
            Protocol::Http => http_addr,
        };
        if let Err(e) = wait_for_port(addr, &mut server.child) {
            let _ = server.child.kill();
            let _ = server.child.wait();
            return Err(e);
        }
        let load = LoadArgs {
            no_attempt_count: load.no_attempt_count || config.no_attempt_count,
            ..load.clone()
        };
        let report = self.generate(addr, config.protocol, &load, spans, server.pid());
        let stopped = server.stop(Duration::from_secs(120));
        let report = report?;
        let (cpu_s, peak_rss_mib) = stopped?;
        let mut sample = Sample {
            spans: report.get("spans")?,
            spans_per_s: report.get("spans_per_s")?,
            cpu_s,
            p50_ms: report.get("p50_ms")?,
            p99_ms: report.get("p99_ms")?,
            peak_rss_mib,
            ..Sample::default()
        };
        sample.spans_per_cpu_s = sample.spans / cpu_s.max(1e-9);
        if !matches!(config.setup, Setup::Rotel | Setup::Discard) && !config.setup.is_otelcol() {
            let (bytes, rows) = parquet_size(&dir.join("out").join("attempts"))?;
            let attempts = report.get("attempts")?;
            if rows != attempts {
                bail!(
                    "{}: {rows} Parquet rows for {attempts} attempts sent (see {})",
                    config.name,
                    dir.display()
                );
            }
            sample.parquet_bytes = bytes;
            sample.parquet_rows = rows;
        }
        if !self.args.keep {
            let _ = fs::remove_dir_all(&dir);
        }
        Ok(sample)
    }

    /// Runs the generator as a child pinned to the other core and parses its summary line.
    fn generate(
        &self,
        addr: SocketAddr,
        protocol: Protocol,
        load: &LoadArgs,
        spans: u64,
        pid: u32,
    ) -> anyhow::Result<Summary> {
        let output = Command::new("taskset")
            .arg("-c")
            .arg(self.generator_core().to_string())
            .arg(&self.generator)
            .args([
                "run".to_owned(),
                "--quiet".into(),
                "--addr".into(),
                addr.to_string(),
                "--protocol".into(),
                protocol.as_str().into(),
                "--total-spans".into(),
                spans.to_string(),
                "--spans-per-request".into(),
                load.spans_per_request.to_string(),
                "--pool".into(),
                load.pool.to_string(),
                "--concurrency".into(),
                load.concurrency.to_string(),
                "--connections".into(),
                load.connections.to_string(),
                "--pid".into(),
                pid.to_string(),
            ])
            .args(load.no_attempt_count.then_some("--no-attempt-count"))
            .stdin(Stdio::null())
            .output()
            .context("cannot run the generator")?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let line = stdout
            .lines()
            .find(|l| l.starts_with("loadgen:"))
            .with_context(|| {
                format!(
                    "the generator printed no summary: {}",
                    String::from_utf8_lossy(&output.stderr)
                )
            })?;
        if !output.status.success() {
            bail!(
                "the generator failed: {line} {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Summary::parse(line)
    }
}

/// The generator's `loadgen: key=value ...` line.
struct Summary(BTreeMap<String, String>);

impl Summary {
    fn parse(line: &str) -> anyhow::Result<Summary> {
        let fields = line
            .trim_start_matches("loadgen:")
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        Ok(Summary(fields))
    }

    fn get(&self, key: &str) -> anyhow::Result<f64> {
        self.0
            .get(key)
            .with_context(|| format!("no {key} in the generator's summary"))?
            .parse()
            .with_context(|| format!("bad {key} in the generator's summary"))
    }
}

/// Total bytes and rows of every completed Parquet file under `dir`.
fn parquet_size(dir: &Path) -> anyhow::Result<(f64, f64)> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let (mut bytes, mut rows) = (0u64, 0i64);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "parquet") {
                bytes += fs::metadata(&path)?.len();
                let reader = SerializedFileReader::new(fs::File::open(&path)?)?;
                rows += reader.metadata().file_metadata().num_rows();
            }
        }
    }
    Ok((bytes as f64, rows as f64))
}

/// Median, min and max.
fn stats(values: &[f64]) -> (f64, f64, f64) {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    (median, v[0], v[n - 1])
}

fn fmt_k(x: f64) -> String {
    if !x.is_finite() {
        return "–".into();
    }
    format!("{:.0}k", x / 1000.0)
}

fn fmt_range_k(values: &[f64]) -> String {
    let (m, lo, hi) = stats(values);
    if values.len() > 1 {
        format!("{} ({}–{})", fmt_k(m), fmt_k(lo), fmt_k(hi))
    } else {
        fmt_k(m)
    }
}

fn fmt_range(values: &[f64], digits: usize) -> String {
    let (m, lo, hi) = stats(values);
    if !m.is_finite() {
        return "–".into();
    }
    if values.len() > 1 {
        format!("{m:.digits$} ({lo:.digits$}–{hi:.digits$})")
    } else {
        format!("{m:.digits$}")
    }
}

fn machine_description() -> String {
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| k.trim().to_owned())
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory = fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(String::new(), |kib| {
            format!(", {:.0} GiB RAM", kib as f64 / 1024.0 / 1024.0)
        });
    format!(
        "{cores} cores ({cpu}){memory}, Linux {kernel}, {}",
        humantime::format_rfc3339_seconds(SystemTime::now())
    )
}

fn bench_all(args: BenchArgs) -> anyhow::Result<()> {
    if Command::new("taskset").arg("-V").output().is_err() {
        bail!("bench-all needs `taskset` (util-linux) to pin the collector and the generator");
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if args.collector_core + 1 >= cores {
        bail!(
            "bench-all needs cores {} and {}: this machine has {cores}",
            args.collector_core,
            args.collector_core + 1
        );
    }
    let collector = fs::canonicalize(&args.collector)
        .with_context(|| format!("no collector binary at {}", args.collector.display()))?;
    let pricing = fs::canonicalize(&args.pricing)
        .with_context(|| format!("no pricing directory at {}", args.pricing.display()))?;
    let rotel = args.rotel.clone().or_else(find_rotel);
    let otelcol = args
        .otelcol
        .clone()
        .or_else(|| std::env::var_os(OTELCOL_ENV).map(PathBuf::from))
        .map(|p| {
            fs::canonicalize(&p)
                .with_context(|| format!("no OpenTelemetry Collector at {}", p.display()))
        })
        .transpose()?;
    let configs = args
        .configs
        .iter()
        .map(|c| parse_config(c))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let configs: Vec<Config> = configs
        .into_iter()
        .filter(|c| {
            if c.setup == Setup::Rotel && rotel.is_none() {
                eprintln!(
                    "skipping {}: no rotel-agent (pip install rotel, or --rotel PATH)",
                    c.name
                );
                return false;
            }
            if c.setup.is_otelcol() && otelcol.is_none() {
                eprintln!(
                    "skipping {}: no OpenTelemetry Collector (--otelcol \"$(tools/otelcol/build.sh)\", or {OTELCOL_ENV})",
                    c.name
                );
                return false;
            }
            true
        })
        .collect();
    let work = match &args.work_dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("loadgen-bench-{}", std::process::id())),
    };
    fs::create_dir_all(&work)?;
    let mut bench = Bench {
        work: work.clone(),
        rotel: rotel.clone(),
        otelcol,
        pricing,
        collector: collector.clone(),
        generator: std::env::current_exe()?,
        run_number: 0,
        args,
    };
    let result = bench_rounds(&mut bench, &configs);
    if !bench.args.keep {
        let _ = fs::remove_dir_all(&work);
    }
    let output = result?;
    println!("{output}");
    Ok(())
}

fn bench_rounds(bench: &mut Bench, configs: &[Config]) -> anyhow::Result<String> {
    let runs = bench.args.runs.max(1);
    let load = bench.args.load.clone();
    let mut samples: BTreeMap<String, Vec<Sample>> = BTreeMap::new();
    // Throughput: every configuration once per round, so drift hits them alike.
    for round in 1..=runs {
        for config in configs {
            eprintln!("round {round}/{runs}: {} ...", config.name);
            let sample = bench.measure(config, &load, bench.args.total_spans)?;
            eprintln!(
                "  {:.0} spans/s, {:.2} CPU-s, {:.0} spans per CPU-s, p50 {:.2} ms, p99 {:.2} ms, peak RSS {:.1} MiB",
                sample.spans_per_s, sample.cpu_s, sample.spans_per_cpu_s, sample.p50_ms, sample.p99_ms, sample.peak_rss_mib
            );
            samples.entry(config.name.clone()).or_default().push(sample);
        }
    }
    // Latency: one request of 512 spans in flight at a time.
    let single = LoadArgs {
        concurrency: 1,
        connections: 1,
        ..load.clone()
    };
    let latency_configs: Vec<&Config> = configs
        .iter()
        .filter(|c| {
            c.protocol == Protocol::Grpc
                && matches!(c.setup, Setup::Rotel | Setup::Discard | Setup::Wal)
        })
        .collect();
    let mut latency: BTreeMap<String, Vec<Sample>> = BTreeMap::new();
    for round in 1..=runs {
        for config in &latency_configs {
            eprintln!("round {round}/{runs}: latency, {} ...", config.name);
            let spans = bench.args.latency_requests * load.spans_per_request as u64;
            let sample = bench.measure(config, &single, spans)?;
            eprintln!("  p50 {:.3} ms, p99 {:.3} ms", sample.p50_ms, sample.p99_ms);
            latency.entry(config.name.clone()).or_default().push(sample);
        }
    }
    // Replay over a file, on the collector's core.
    let file = bench.work.join("replay.jsonl");
    eprintln!(
        "writing {} spans of OTLP JSON to {} ...",
        bench.args.replay_spans,
        file.display()
    );
    gen_jsonl(&file, bench.args.replay_spans, load.spans_per_request)?;
    let file_mib = fs::metadata(&file)?.len() as f64 / 1024.0 / 1024.0;
    let replay_spans = bench
        .args
        .replay_spans
        .div_ceil(load.spans_per_request as u64)
        * load.spans_per_request as u64;
    let mut replay: Vec<(f64, f64)> = Vec::new();
    for round in 1..=runs {
        eprintln!("round {round}/{runs}: replay ...");
        let out = bench.work.join(format!("replay-out-{round}"));
        let args: Vec<OsString> = vec![
            "replay".into(),
            "--pricing".into(),
            bench.pricing.clone().into(),
            "--output".into(),
            out.clone().into(),
            file.clone().into(),
        ];
        let started = Instant::now();
        // replay parses on every core it may use: give it both.
        let process = Pinned::spawn(
            &format!("{},{}", bench.collector_core(), bench.generator_core()),
            &bench.collector,
            &args,
            &bench.work,
            &bench.work.join(format!("replay-{round}.log")),
        )?;
        let (cpu_s, rss) = wait_exit(process)?;
        let wall = started.elapsed().as_secs_f64();
        eprintln!(
            "  {:.0} spans/s, {cpu_s:.2} CPU-s, peak RSS {rss:.0} MiB",
            replay_spans as f64 / wall
        );
        replay.push((
            replay_spans as f64 / wall,
            replay_spans as f64 / cpu_s.max(1e-9),
        ));
        let _ = fs::remove_dir_all(&out);
    }
    let _ = fs::remove_file(&file);
    Ok(render(
        bench, configs, &samples, &latency, &replay, file_mib,
    ))
}

/// Waits for a process that ends by itself; CPU time and peak RSS as [`Pinned::stop`] reads
/// them.
fn wait_exit(mut process: Pinned) -> anyhow::Result<(f64, f64)> {
    let pid = process.pid();
    let mut peak_kib = 0;
    let ticks = loop {
        if let Some(kib) = peak_rss_kib(pid) {
            peak_kib = peak_kib.max(kib);
        }
        match proc_stat(pid) {
            Ok(('Z', ticks)) => break ticks,
            Ok(_) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => break 0,
        }
    };
    let status = process.child.wait()?;
    if !status.success() {
        bail!("{} exited with {status}", process.name);
    }
    Ok((ticks_to_s(ticks), peak_kib as f64 / 1024.0))
}

/// Per-round ratio of `config` to `baseline` for one figure.
fn ratios(
    samples: &BTreeMap<String, Vec<Sample>>,
    config: &str,
    baseline: &str,
    figure: impl Fn(&Sample) -> f64,
) -> Vec<f64> {
    match (samples.get(config), samples.get(baseline)) {
        (Some(a), Some(b)) => a
            .iter()
            .zip(b)
            .map(|(a, b)| figure(a) / figure(b))
            .collect(),
        _ => Vec::new(),
    }
}

fn render(
    bench: &Bench,
    configs: &[Config],
    samples: &BTreeMap<String, Vec<Sample>>,
    latency: &BTreeMap<String, Vec<Sample>>,
    replay: &[(f64, f64)],
    replay_file_mib: f64,
) -> String {
    let args = &bench.args;
    let load = &args.load;
    let cpu = |s: &Sample| s.spans_per_cpu_s;
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line(format!("Machine: {}", machine_description()));
    line(format!(
        "Load: {} spans per run in requests of {} spans (~{:.0} KiB each), {} in flight over {} connection(s); collector on core {}, generator on core {}; medians of {} runs (min–max).",
        args.total_spans,
        load.spans_per_request,
        build_pool(1, load.spans_per_request, true, load.three_attempts).map_or(0.0, |p| p[0].bytes.len() as f64 / 1024.0),
        load.concurrency,
        load.connections,
        args.collector_core,
        args.collector_core + 1,
        args.runs,
    ));
    if let Some(rotel) = &bench.rotel {
        let version = Command::new(rotel)
            .arg("--version")
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default();
        line(format!("Rotel: {version}"));
    }
    if let Some(otelcol) = &bench.otelcol {
        let version = Command::new(otelcol)
            .arg("--version")
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default();
        line(format!(
            "OpenTelemetry Collector: {version} (tools/otelcol/builder-config.yaml)"
        ));
    }
    line(String::new());
    line("| configuration | protocol | spans per collector CPU-s | × discard (same run) | × Rotel (same run) | spans/s (wall) | export p50 / p99 ms | collector CPU-s | peak RSS MiB |".into());
    line("|---|---|---|---|---|---|---|---|---|".into());
    let has = |name: &str| samples.contains_key(name);
    for config in configs {
        let Some(runs) = samples.get(&config.name) else {
            continue;
        };
        let discard = if config.protocol == Protocol::Http && has("http-discard") {
            "http-discard"
        } else {
            "discard"
        };
        let vs_discard = if config.name == discard || !has(discard) {
            "–".to_owned()
        } else {
            fmt_range(&ratios(samples, &config.name, discard, cpu), 2)
        };
        let vs_rotel = if config.setup == Setup::Rotel || !has("rotel") {
            "–".to_owned()
        } else {
            fmt_range(&ratios(samples, &config.name, "rotel", cpu), 2)
        };
        let figure = |f: fn(&Sample) -> f64| runs.iter().map(f).collect::<Vec<_>>();
        line(format!(
            "| {} | {} | {} | {} | {} | {} | {} / {} | {} | {} |",
            config.label,
            config.protocol.as_str(),
            fmt_range_k(&figure(|s| s.spans_per_cpu_s)),
            vs_discard,
            vs_rotel,
            fmt_range_k(&figure(|s| s.spans_per_s)),
            fmt_range(&figure(|s| s.p50_ms), 2),
            fmt_range(&figure(|s| s.p99_ms), 2),
            fmt_range(&figure(|s| s.cpu_s), 2),
            fmt_range(&figure(|s| s.peak_rss_mib), 0),
        ));
    }
    line(String::new());
    // Ours against each OpenTelemetry Collector configuration, round by round.
    let peers: Vec<&Config> = configs
        .iter()
        .filter(|c| c.setup.is_otelcol() && has(&c.name))
        .collect();
    let ours: Vec<&Config> = configs
        .iter()
        .filter(|c| !c.setup.is_otelcol() && c.setup != Setup::Rotel && has(&c.name))
        .collect();
    if !peers.is_empty() && !ours.is_empty() {
        let median_rss = |name: &str| {
            stats(
                &samples[name]
                    .iter()
                    .map(|s| s.peak_rss_mib)
                    .collect::<Vec<_>>(),
            )
            .0
        };
        line("Ours against the OpenTelemetry Collector (same rounds): spans per collector CPU-s, ours ÷ the Collector's, median (min–max) of the rounds' ratios; then peak RSS MiB, ours / the Collector's (medians).".into());
        line(String::new());
        let mut header = "| ours |".to_owned();
        let mut rule = "|---|".to_owned();
        for peer in &peers {
            header.push_str(&format!(" {} |", peer.label));
            rule.push_str("---|");
        }
        line(header);
        line(rule);
        for config in &ours {
            let mut row = format!("| {} ({}) |", config.label, config.protocol.as_str());
            for peer in &peers {
                row.push_str(&format!(
                    " {}×; {:.0} / {:.0} MiB |",
                    fmt_range(&ratios(samples, &config.name, &peer.name, cpu), 2),
                    median_rss(&config.name),
                    median_rss(&peer.name),
                ));
            }
            line(row);
        }
        line(String::new());
    }
    if !latency.is_empty() {
        line(format!(
            "Single export in flight ({} requests of {} spans, one connection):",
            args.latency_requests, load.spans_per_request
        ));
        line(String::new());
        line("| configuration | export p50 ms | export p99 ms |".into());
        line("|---|---|---|".into());
        for config in configs {
            let Some(runs) = latency.get(&config.name) else {
                continue;
            };
            let figure = |f: fn(&Sample) -> f64| runs.iter().map(f).collect::<Vec<_>>();
            line(format!(
                "| {} | {} | {} |",
                config.label,
                fmt_range(&figure(|s| s.p50_ms), 3),
                fmt_range(&figure(|s| s.p99_ms), 3)
            ));
        }
        line(String::new());
    }
    let replay_wall: Vec<f64> = replay.iter().map(|r| r.0).collect();
    let replay_cpu: Vec<f64> = replay.iter().map(|r| r.1).collect();
    line(format!(
        "Replay of {} spans ({replay_file_mib:.0} MiB of OTLP JSON lines) on 2 cores: {} spans/s wall, {} spans per CPU-s.",
        args.replay_spans.div_ceil(load.spans_per_request as u64) * load.spans_per_request as u64,
        fmt_range_k(&replay_wall),
        fmt_range_k(&replay_cpu)
    ));
    let bytes_per_row: Vec<f64> = samples
        .get("wal")
        .or_else(|| samples.get("wal-off"))
        .map(|runs| {
            runs.iter()
                .filter(|s| s.parquet_rows > 0.0)
                .map(|s| s.parquet_bytes / s.parquet_rows)
                .collect()
        })
        .unwrap_or_default();
    line(format!(
        "Parquet (zstd): {} bytes per row.",
        fmt_range(&bytes_per_row, 1)
    ));
    line(String::new());

    // Targets.
    let median = |v: Vec<f64>| stats(&v).0;
    let verdict = |ok: bool| if ok { "met" } else { "missed" };
    // The memory target is set at 2,000,000 spans: a shorter run within it says so, not "missed".
    let rss_verdict = |peak: f64| match (peak <= 150.0, args.total_spans >= 2_000_000) {
        (false, _) => "missed",
        (true, true) => "met",
        (true, false) => "within it at this size (the target is at 2000000 spans)",
    };
    line("| target | measured | verdict |".into());
    line("|---|---|---|".into());
    if has("wal") && has("rotel") {
        let r = median(ratios(samples, "wal", "rotel", cpu));
        line(format!(
            "| Parquet + WAL spans per CPU-s ≥ 0.5 × Rotel discard (same run; 0.8× the goal after it) | {r:.2}× | {} |",
            verdict(r >= 0.5)
        ));
    }
    if has("wal-nac") && has("rotel") {
        let r = median(ratios(samples, "wal-nac", "rotel", cpu));
        let abs = median(samples["wal-nac"].iter().map(cpu).collect());
        line(format!(
            "| no attempt_count, group_wait 1 s: Parquet + WAL ≥ 0.5 × Rotel (same run; 0.8× the goal after it) | {r:.2}×, {} | {} |",
            fmt_k(abs),
            verdict(r >= 0.5)
        ));
    }
    if let Some(runs) = samples.get("wal-nac") {
        let peak = runs.iter().map(|s| s.peak_rss_mib).fold(0.0, f64::max);
        line(format!(
            "| peak RSS, no attempt_count, group_wait 1 s, {}-span run (worst run) ≤ 150 MiB | {peak:.0} MiB | {} |",
            args.total_spans,
            rss_verdict(peak)
        ));
    }
    if has("wal") && has("discard") {
        let r = median(ratios(samples, "wal", "discard", cpu));
        let abs = median(samples["wal"].iter().map(cpu).collect());
        line(format!(
            "| Parquet + WAL ≥ 80% of discard (same run) and ≥ 300k spans per CPU-s | {:.0}%, {} | {} |",
            r * 100.0,
            fmt_k(abs),
            verdict(r >= 0.8 && abs >= 300_000.0)
        ));
    }
    if has("wal-off") && has("discard") {
        let r = median(ratios(samples, "wal-off", "discard", cpu));
        line(format!(
            "| WAL off ≥ 90% of discard (same run) | {:.0}% | {} |",
            r * 100.0,
            verdict(r >= 0.9)
        ));
    }
    if let Some(runs) = samples.get("wal") {
        let peak = runs.iter().map(|s| s.peak_rss_mib).fold(0.0, f64::max);
        line(format!(
            "| peak RSS during a {}-span run (Parquet + WAL, worst run) ≤ 150 MiB | {peak:.0} MiB | {} |",
            args.total_spans,
            rss_verdict(peak)
        ));
    }
    if let Some(runs) = latency.get("wal") {
        let p50 = median(runs.iter().map(|s| s.p50_ms).collect());
        line(format!(
            "| p50 of one {}-span export, single request in flight (Parquet + WAL) ≤ 2 ms | {p50:.2} ms | {} |",
            load.spans_per_request,
            verdict(p50 <= 2.0)
        ));
    }
    if !replay_wall.is_empty() {
        let r = median(replay_wall.clone());
        line(format!(
            "| replay ≥ 400k spans/s (wall) on 2 cores | {} | {} |",
            fmt_k(r),
            verdict(r >= 400_000.0)
        ));
    }
    if !bytes_per_row.is_empty() {
        line(format!(
            "| Parquet size (zstd) | {:.1} bytes per row | reported |",
            median(bytes_per_row)
        ));
    }
    out
}

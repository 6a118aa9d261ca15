//! The collector binary as a child process, and requests to load it with.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;

use opentelemetry::InstrumentationScope;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_sdk::trace::SpanData;

use super::otel::span_data;

pub const PRICING: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/pricing");
/// 2026-08-25T12:00:00Z.
const T0: u64 = 1_787_659_200_000_000_000;

fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// Request `n`: a logical span and two attempts, `burst-<n>` attempts 0 and 1. With
/// `announce_count` the logical span says 2 attempts, so the request is evaluated on arrival;
/// without, it waits for its group wait (or shutdown).
pub fn request(n: usize, announce_count: bool) -> Vec<SpanData> {
    let scope = InstrumentationScope::builder("burst").build();
    request_spans(n, announce_count)
        .iter()
        .map(|s| span_data(s, &scope))
        .collect()
}

/// [`request`] as OTLP protobuf spans.
pub fn request_spans(n: usize, announce_count: bool) -> Vec<Span> {
    let mut trace_id = vec![0xab; 16];
    trace_id[..8].copy_from_slice(&(n as u64).to_be_bytes());
    let logical_id = vec![1, 0, 0, 0, 0, 0, 0, 1];
    let mut logical_attributes = vec![
        kv(
            "retry_spend.span.role",
            Value::StringValue("logical_request".into()),
        ),
        kv(
            "retry_spend.request.id",
            Value::StringValue(format!("burst-{n}")),
        ),
        kv(
            "retry_spend.envelope.max_incremental_usd",
            Value::StringValue("0.015".into()),
        ),
    ];
    if announce_count {
        logical_attributes.push(kv("retry_spend.attempt_count", Value::IntValue(2)));
    }
    let mut spans = vec![Span {
        trace_id: trace_id.clone(),
        span_id: logical_id.clone(),
        start_time_unix_nano: T0,
        end_time_unix_nano: T0 + 10,
        attributes: logical_attributes,
        ..Default::default()
    }];
    for index in 0..2u8 {
        spans.push(Span {
            trace_id: trace_id.clone(),
            span_id: vec![2, 0, 0, 0, 0, 0, 0, index + 1],
            parent_span_id: logical_id.clone(),
            start_time_unix_nano: T0 + u64::from(index),
            end_time_unix_nano: T0 + 5,
            attributes: vec![
                kv(
                    "retry_spend.span.role",
                    Value::StringValue("attempt".into()),
                ),
                kv(
                    "retry_spend.request.id",
                    Value::StringValue(format!("burst-{n}")),
                ),
                kv(
                    "retry_spend.attempt.index",
                    Value::IntValue(i64::from(index)),
                ),
                kv("gen_ai.request.model", Value::StringValue("glm-5".into())),
                kv("gen_ai.usage.input_tokens", Value::IntValue(1000)),
                kv("gen_ai.request.max_tokens", Value::IntValue(100)),
            ],
            ..Default::default()
        });
    }
    spans
}

/// A running collector binary and what its log says.
pub struct Collector {
    pub child: Child,
    pub grpc_addr: SocketAddr,
    pub log: Receiver<String>,
}

/// Starts `retry-spend-collector serve` on ephemeral ports writing to `output`, with `args`
/// and `envs` added, and reads the gRPC address from its start-up log.
pub fn start(output: &Path, args: &[&str], envs: &[(&str, &str)]) -> Collector {
    let mut child = Command::new(env!("CARGO_BIN_EXE_retry-spend-collector"))
        .args([
            "serve",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
        ])
        .args([
            "--metrics-addr",
            "127.0.0.1:0",
            "--pricing",
            PRICING,
            "--output",
        ])
        .arg(output)
        .args(args)
        .env("RUST_LOG", "info")
        .envs(envs.iter().copied())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start collector");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let mut early = Vec::new();
    let grpc_addr = loop {
        let line = lines
            .next()
            .expect("collector exited before listening")
            .expect("log line");
        early.push(line.clone());
        if let Some(rest) = line.split("grpc_addr=").nth(1) {
            break rest
                .split_whitespace()
                .next()
                .expect("address")
                .parse()
                .expect("socket address");
        }
    };
    // Keep draining the log so the child never blocks on a full pipe.
    let (log, log_lines) = std::sync::mpsc::channel();
    for line in early {
        let _ = log.send(line);
    }
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let _ = log.send(line);
        }
    });
    Collector {
        child,
        grpc_addr,
        log: log_lines,
    }
}

/// Sends SIGTERM (or another signal) to the child.
pub fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(child.id().to_string())
        .status();
    assert!(status.expect("kill").success());
}

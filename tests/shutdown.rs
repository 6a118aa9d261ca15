//! SIGTERM right after (and during) a burst: every acknowledged span is a row, exactly once,
//! and no temporary file remains. Runs the real binary as a child process.

mod common;

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::otel::span_data;
use common::{read_table, temporary_files};
use opentelemetry::InstrumentationScope;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};

const PRICING: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/pricing");
const REQUESTS: usize = 300;
const SENDERS: usize = 6;
/// 2026-08-25T12:00:00Z.
const T0: u64 = 1_787_659_200_000_000_000;

fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// A logical request span and two attempts (no attempt count: they wait for shutdown).
fn request(n: usize) -> Vec<SpanData> {
    let mut trace_id = vec![0xab; 16];
    trace_id[..8].copy_from_slice(&(n as u64).to_be_bytes());
    let logical_id = vec![1, 0, 0, 0, 0, 0, 0, 1];
    let scope = InstrumentationScope::builder("burst").build();
    let mut spans = vec![Span {
        trace_id: trace_id.clone(),
        span_id: logical_id.clone(),
        start_time_unix_nano: T0,
        end_time_unix_nano: T0 + 10,
        attributes: vec![
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
        ],
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
    spans.iter().map(|s| span_data(s, &scope)).collect()
}

/// Starts the binary on ephemeral ports and reads the gRPC address from its start-up log.
fn start(output: &std::path::Path) -> (Child, SocketAddr) {
    let (child, addrs, _log) = start_with_log(output);
    (child, addrs)
}

/// Like [`start`], also handing over the rest of the log, one line per message.
fn start_with_log(
    output: &std::path::Path,
) -> (Child, SocketAddr, std::sync::mpsc::Receiver<String>) {
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
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .expect("start collector");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("collector exited before listening")
            .expect("log line");
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
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let _ = log.send(line);
        }
    });
    (child, addr, log_lines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_pricing_and_keeps_serving() {
    let out = tempfile::tempdir().unwrap();
    let (mut child, addr, log) = start_with_log(out.path());
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap()
        .success());
    let reloaded = tokio::task::spawn_blocking(move || {
        log.iter()
            .find(|line| line.contains("pricing snapshots reloaded"))
            .is_some()
    });
    assert!(reloaded.await.unwrap(), "the reload is logged");

    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(format!("http://{addr}"))
        .build()
        .unwrap();
    exporter
        .export(request(1))
        .await
        .expect("still serving after SIGHUP");
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
    assert_eq!(read_table(out.path()).1.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_burst_keeps_every_acknowledged_span() {
    let out = tempfile::tempdir().unwrap();
    let (mut child, addr) = start(out.path());
    let pid = child.id().to_string();

    let next = Arc::new(AtomicUsize::new(0));
    let (halfway, halfway_reached) = tokio::sync::oneshot::channel::<()>();
    let halfway = Arc::new(std::sync::Mutex::new(Some(halfway)));
    let mut senders = Vec::new();
    for _ in 0..SENDERS {
        let next = Arc::clone(&next);
        let halfway = Arc::clone(&halfway);
        senders.push(tokio::spawn(async move {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(format!("http://{addr}"))
                .build()
                .expect("exporter");
            let mut acknowledged = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::SeqCst);
                if n >= REQUESTS {
                    break;
                }
                if n == REQUESTS / 2 {
                    if let Some(signal) = halfway.lock().unwrap().take() {
                        let _ = signal.send(());
                    }
                }
                match exporter.export(request(n)).await {
                    Ok(()) => acknowledged.push(n),
                    // Refused: the collector is going away; nothing more to send.
                    Err(_) => break,
                }
            }
            acknowledged
        }));
    }
    halfway_reached.await.unwrap();
    let kill = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(kill.success());

    let mut acknowledged = Vec::new();
    for sender in senders {
        acknowledged.extend(sender.await.unwrap());
    }
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "collector exit status {status}");
    assert!(
        acknowledged.len() >= REQUESTS / 2,
        "the first half was acknowledged before SIGTERM"
    );

    assert!(
        temporary_files(out.path()).is_empty(),
        "no temporary file remains"
    );
    let (_, rows) = read_table(out.path());
    let keys: Vec<(String, String)> = rows
        .iter()
        .map(|r| (r["request_id"].clone(), r["attempt_index"].clone()))
        .collect();
    let unique: HashSet<_> = keys.iter().cloned().collect();
    assert_eq!(unique.len(), keys.len(), "no attempt written twice");
    for n in acknowledged {
        for index in ["0", "1"] {
            assert!(
                unique.contains(&(format!("burst-{n}"), index.to_owned())),
                "acknowledged attempt {index} of burst-{n} is missing"
            );
        }
    }
}

//! A restart between a request's attempts keeps the late retry's decision: the finished
//! requests saved beside the write-ahead log are restored before anything new arrives, so the
//! retry is judged against its earlier attempts and envelope exactly as without the restart —
//! not `first_attempt_missing` — after a clean stop, after SIGKILL, and when `--workers`
//! changes between the runs.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::child::start as start_child;
use common::collector::{config, stop};
use common::otel::{export_grpc, span_data};
use common::spans::{kv, kv_int, kv_text};
use common::{read_table, wal_segments, Row};
use opentelemetry::InstrumentationScope;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use retry_spend_collector::pipeline::shard_of;
use retry_spend_collector::service::start;

/// Requests per run: enough that some traces change shard when `--workers` does.
const REQUESTS: u8 = 8;
/// 2026-08-25T12:00:00Z, three days after the shipped snapshot: fresh pricing.
const T0: u64 = 1_787_659_200_000_000_000;
const SERVICE: &str = "support-bot";

fn trace_id(n: u8) -> Vec<u8> {
    let mut id = vec![0x5e; 16];
    id[0] = n;
    id
}

/// Request `n`'s logical span (with the whole envelope; it announces one attempt, so the
/// request is evaluated as soon as attempt 0 is in) and attempt 0, a DeepSeek call that
/// timed out.
fn first_attempt(n: u8) -> Vec<Span> {
    let logical = Span {
        trace_id: trace_id(n),
        span_id: vec![n, 0, 0, 0, 0, 0, 0, 1],
        start_time_unix_nano: T0,
        end_time_unix_nano: T0 + 4_000_000_000,
        attributes: vec![
            kv_text("retry_spend.span.role", "logical_request"),
            kv_text("retry_spend.request.id", &format!("restart-{n}")),
            kv_text(
                "retry_spend.pricing.source",
                "https://aiwave.live/api/pricing",
            ),
            kv_text("retry_spend.pricing.checked_at", "2026-08-22"),
            kv_text(
                "retry_spend.pricing.version",
                "a42d372ccf0b5dd13ecf71203521f9d2",
            ),
            kv_text("retry_spend.billing_group", "vip"),
            kv_text("retry_spend.envelope.max_incremental_usd", "0.015"),
            kv_int("retry_spend.envelope.max_attempts_after_first", 1),
            kv(
                "retry_spend.envelope.allow_family_fallback",
                Value::BoolValue(true),
            ),
            kv(
                "retry_spend.envelope.allowed_fallback_families",
                Value::ArrayValue(opentelemetry_proto::tonic::common::v1::ArrayValue {
                    values: ["deepseek", "qwen", "glm"]
                        .iter()
                        .map(|f| AnyValue {
                            value: Some(Value::StringValue((*f).into())),
                        })
                        .collect(),
                }),
            ),
            kv_int("retry_spend.attempt_count", 1),
        ],
        ..Default::default()
    };
    vec![logical, attempt(n, 0, "deepseek-v4-flash")]
}

/// The late retry: attempt 1 falls back to GLM.
fn late_retry(n: u8) -> Vec<Span> {
    vec![attempt(n, 1, "glm-5")]
}

fn attempt(n: u8, index: u8, model: &str) -> Span {
    let mut attributes = vec![
        kv_text("retry_spend.span.role", "attempt"),
        kv_text("retry_spend.request.id", &format!("restart-{n}")),
        kv_int("retry_spend.attempt.index", index.into()),
        kv_text("gen_ai.request.model", model),
        kv_int("gen_ai.usage.input_tokens", 10_000),
        kv_int("gen_ai.usage.cache_read.input_tokens", 4_000),
        kv_int("gen_ai.request.max_tokens", 800),
    ];
    if index == 0 {
        attributes.push(kv_text("error.type", "timeout"));
    } else {
        attributes.push(kv_int("gen_ai.usage.output_tokens", 500));
    }
    let start = T0 + u64::from(index) * 2_000_000_000;
    Span {
        trace_id: trace_id(n),
        span_id: vec![n, 0, 0, 0, 0, 0, 1, index + 1],
        parent_span_id: vec![n, 0, 0, 0, 0, 0, 0, 1],
        start_time_unix_nano: start,
        end_time_unix_nano: start + 1_000_000_000,
        attributes,
        ..Default::default()
    }
}

async fn send(addr: std::net::SocketAddr, spans: Vec<Span>) {
    let scope = InstrumentationScope::builder("restart-test").build();
    let data = spans.iter().map(|s| span_data(s, &scope)).collect();
    export_grpc(addr, vec![(SERVICE.to_owned(), data)]).await;
}

fn first_attempts() -> Vec<Span> {
    (0..REQUESTS).flat_map(first_attempt).collect()
}

fn late_retries() -> Vec<Span> {
    (0..REQUESTS).flat_map(late_retry).collect()
}

fn retries(rows: &[Row]) -> Vec<Row> {
    rows.iter()
        .filter(|r| r["attempt_index"] == "1")
        .cloned()
        .collect()
}

fn workers(output: &Path, n: usize) -> retry_spend_collector::config::Config {
    let mut config = config(output);
    config.processors.retry_spend.workers = n;
    config
}

/// The rows of one run without a restart: attempt 0 evaluated and then the late retry.
async fn without_restart() -> Vec<Row> {
    let out = tempfile::tempdir().unwrap();
    let collector = start(workers(out.path(), 2)).await.unwrap();
    send(collector.grpc_addr, first_attempts()).await;
    collector.sync().await.unwrap();
    send(collector.grpc_addr, late_retries()).await;
    let rows = stop(collector, out.path()).await;
    let retries = retries(&rows);
    assert_eq!(retries.len(), usize::from(REQUESTS));
    for row in &retries {
        assert_eq!(row["decision"], "within_envelope", "{row:?}");
        assert_eq!(row["spend_class"], "fallback", "{row:?}");
    }
    rows
}

/// Attempt 0 in one run (stopped cleanly), the late retry in the next, on the same output.
async fn restart_between_attempts(workers_before: usize, workers_after: usize) -> Vec<Row> {
    let out = tempfile::tempdir().unwrap();
    let collector = start(workers(out.path(), workers_before)).await.unwrap();
    send(collector.grpc_addr, first_attempts()).await;
    collector.sync().await.unwrap();
    let before = stop(collector, out.path()).await;
    assert_eq!(before.len(), usize::from(REQUESTS), "attempt 0 of each");

    let collector = start(workers(out.path(), workers_after)).await.unwrap();
    send(collector.grpc_addr, late_retries()).await;
    stop(collector, out.path()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_between_a_requests_attempts_keeps_the_late_retrys_decision() {
    let expected = without_restart().await;
    let rows = restart_between_attempts(2, 2).await;
    assert_eq!(rows.len(), usize::from(REQUESTS) * 2, "every attempt once");
    assert_eq!(retries(&rows), retries(&expected));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_another_worker_count_keeps_the_late_retrys_decision() {
    // The test means something only if some trace changes shard.
    assert!((0..REQUESTS).any(|n| {
        let id: [u8; 16] = trace_id(n).try_into().unwrap();
        shard_of(&id, 3) != shard_of(&id, 1) || shard_of(&id, 3) != shard_of(&id, 2)
    }));
    let expected = retries(&without_restart().await);
    for (before, after) in [(3, 1), (1, 3), (2, 3)] {
        let rows = restart_between_attempts(before, after).await;
        assert_eq!(retries(&rows), expected, "{before} workers, then {after}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_summaries_file_is_skipped_and_the_collector_starts() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("wal").join("finished");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("shard-0.rsfc"), b"RSFC\x01\x00\x00\x00garbage").unwrap();
    std::fs::write(
        dir.join("shard-1.rsfc"),
        b"RSFC\x09\x00\x00\x00from the future",
    )
    .unwrap();
    let collector = start(workers(out.path(), 2)).await.unwrap();
    send(collector.grpc_addr, late_retries()).await;
    let rows = stop(collector, out.path()).await;
    // Without its earlier attempts (and the logical span's envelope) the retry is unaudited.
    for row in &rows {
        assert_eq!(row["decision"], "unaudited", "{row:?}");
    }
    assert_eq!(rows.len(), usize::from(REQUESTS));
}

/// Polls `done` until it holds or the deadline passes.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The real binary, killed with SIGKILL once attempt 0's rows are in completed files and its
/// log records released: only the saved summaries can give the late retry its context.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_between_a_requests_attempts_keeps_the_late_retrys_decision() {
    let expected = retries(&without_restart().await);
    let dir = tempfile::tempdir().unwrap();
    let config_file = dir.path().join("collector.toml");
    // Files complete quickly, and every log record gets a segment of its own, so segments
    // are released as soon as their rows are written and the summaries saved.
    std::fs::write(
        &config_file,
        "[exporters.parquet]\nmax_file_age = \"200ms\"\n[wal]\nsegment_bytes = 1\n",
    )
    .unwrap();
    let output = dir.path().join("out");
    let args = ["--config", config_file.to_str().unwrap()];
    let collector = start_child(&output, &args, &[]);
    send(collector.grpc_addr, first_attempts()).await;
    let (out, wal) = (output.clone(), output.join("wal"));
    tokio::task::spawn_blocking(move || {
        wait_until("attempt 0's rows in completed files", || {
            read_table(&out).1.len() == usize::from(REQUESTS)
        });
        wait_until("the log to release attempt 0's records", || {
            wal_segments(&wal) == 0
        });
    })
    .await
    .unwrap();
    collector.kill().await;

    let collector = start_child(&output, &args, &[]);
    send(collector.grpc_addr, late_retries()).await;
    let status = collector.terminate().await;
    assert!(status.success(), "restarted collector exit status {status}");
    let rows = read_table(&output).1;
    assert_eq!(rows.len(), usize::from(REQUESTS) * 2, "every attempt once");
    assert_eq!(retries(&rows), expected);
}

fn summaries_bytes(wal: &Path) -> u64 {
    std::fs::read_dir(wal.join("finished"))
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "rsfc"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Killed after the summaries were saved but before attempt 0's rows reached a completed
/// file: the saved summaries are newer than the files. The log, replayed, still writes those
/// rows, once, and the late retry is judged as without the crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_with_summaries_newer_than_the_files_writes_every_row_once() {
    let expected = retries(&without_restart().await);
    let dir = tempfile::tempdir().unwrap();
    let config_file = dir.path().join("collector.toml");
    // No file completes before the kill.
    std::fs::write(&config_file, "[exporters.parquet]\nmax_file_age = \"1h\"\n").unwrap();
    let output = dir.path().join("out");
    let args = ["--config", config_file.to_str().unwrap()];
    let collector = start_child(&output, &args, &[]);
    let empty = {
        let wal = output.join("wal");
        tokio::task::spawn_blocking(move || {
            wait_until("the first (empty) summaries", || summaries_bytes(&wal) > 0);
            summaries_bytes(&wal)
        })
        .await
        .unwrap()
    };
    send(collector.grpc_addr, first_attempts()).await;
    let wal = output.join("wal");
    tokio::task::spawn_blocking(move || {
        wait_until("the summaries of attempt 0's requests", || {
            summaries_bytes(&wal) > empty + 400
        });
    })
    .await
    .unwrap();
    collector.kill().await;
    assert!(read_table(&output).1.is_empty(), "no file was complete");

    let collector = start_child(&output, &args, &[]);
    send(collector.grpc_addr, late_retries()).await;
    let status = collector.terminate().await;
    assert!(status.success(), "restarted collector exit status {status}");
    let rows = read_table(&output).1;
    assert_eq!(rows.len(), usize::from(REQUESTS) * 2, "every attempt once");
    assert_eq!(retries(&rows), expected);
}

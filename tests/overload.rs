//! Overload and disk trouble: refusals clients retry on, a bounded memory, nothing accepted
//! lost, and recovery once the trouble is gone.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;

use common::collector::{config, get, EXAMPLE};
use common::read_table;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use retry_spend_collector::service::{start, Collector};

/// The example's requests, each made unique by `round` (trace ids rewritten), as protobuf.
fn requests(round: u8) -> Vec<Vec<u8>> {
    std::fs::read_to_string(EXAMPLE)
        .unwrap()
        .lines()
        .map(|line| {
            let mut request: ExportTraceServiceRequest = serde_json::from_str(line).unwrap();
            for span in request
                .resource_spans
                .iter_mut()
                .flat_map(|rs| &mut rs.scope_spans)
                .flat_map(|ss| &mut ss.spans)
            {
                span.trace_id[0] = round;
            }
            request.encode_to_vec()
        })
        .collect()
}

/// POSTs protobuf bodies in order; returns each status and Retry-After header.
async fn post_all(addr: SocketAddr, bodies: Vec<Vec<u8>>) -> Vec<(u16, Option<String>)> {
    tokio::task::spawn_blocking(move || {
        let client = reqwest::blocking::Client::new();
        bodies
            .into_iter()
            .map(|body| {
                let response = client
                    .post(format!("http://{addr}/v1/traces"))
                    .header("content-type", "application/x-protobuf")
                    .body(body)
                    .send()
                    .unwrap();
                let retry_after = response
                    .headers()
                    .get("retry-after")
                    .map(|v| v.to_str().unwrap().to_owned());
                (response.status().as_u16(), retry_after)
            })
            .collect()
    })
    .await
    .unwrap()
}

async fn stop(collector: Collector) {
    collector.shutdown();
    collector.wait().await.expect("clean shutdown");
}

/// Attempt rows per (trace id, span id): each must be exactly 1.
fn row_counts(output: &Path) -> HashMap<(String, String), usize> {
    let mut counts = HashMap::new();
    for row in read_table(output).1 {
        *counts
            .entry((row["trace_id"].clone(), row["span_id"].clone()))
            .or_default() += 1;
    }
    counts
}

/// Rows the example gives per request line: its attempt spans.
fn rows_of_line(line: usize) -> usize {
    use retry_spend_collector::contract::{SpanFacts, SpanKind};
    let text = std::fs::read_to_string(EXAMPLE).unwrap();
    let request: ExportTraceServiceRequest =
        serde_json::from_str(text.lines().nth(line).unwrap()).unwrap();
    retry_spend_collector::engine::span_facts(&request)
        .filter(|f: &SpanFacts| matches!(f.kind, SpanKind::Attempt | SpanKind::SingleAttempt))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_sink_gets_retryable_refusals_and_a_bounded_memory() {
    let out = tempfile::tempdir().unwrap();
    let mut config = config(out.path());
    let limit = 8 * 1024;
    config.receivers.otlp.max_request_bytes = limit;
    config.receivers.otlp.max_in_flight_bytes = Some(limit);
    let collector = start(config).await.unwrap();
    let resume = collector.pause_pipeline().await.unwrap();

    let mut bodies = Vec::new();
    for round in 1..=4 {
        bodies.extend(requests(round));
    }
    let answers = post_all(collector.http_addr, bodies).await;
    let accepted: Vec<usize> = (0..answers.len())
        .filter(|i| answers[*i].0 == 200)
        .collect();
    let refused: Vec<&(u16, Option<String>)> = answers.iter().filter(|a| a.0 != 200).collect();
    assert!(!accepted.is_empty(), "{answers:?}");
    assert!(
        !refused.is_empty(),
        "a stalled sink must push back: {answers:?}"
    );
    for (status, retry_after) in refused {
        assert_eq!(*status, 429);
        assert_eq!(retry_after.as_deref(), Some("5"));
    }
    assert!(
        collector.in_flight_bytes() <= limit,
        "memory stays under the configured limit"
    );

    // gRPC clients get UNAVAILABLE, which the OTLP exporters retry.
    let spans = common::otel::by_service(&[serde_json::from_str(
        std::fs::read_to_string(EXAMPLE)
            .unwrap()
            .lines()
            .nth(4)
            .unwrap(),
    )
    .unwrap()]);
    let exporter = {
        use opentelemetry_otlp::WithExportConfig;
        opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(format!("http://{}", collector.grpc_addr))
            .build()
            .unwrap()
    };
    let refused = {
        use opentelemetry_sdk::trace::SpanExporter as _;
        exporter.export(spans[0].1.clone()).await
    };
    let message = format!("{refused:?}");
    assert!(
        message.contains("Unavailable") || message.contains("UNAVAILABLE"),
        "{message}"
    );

    resume.resume();
    let metrics = std::sync::Arc::clone(&collector.metrics);
    stop(collector).await;
    assert!(metrics
        .render()
        .contains(r#"retry_spend_export_requests_total{transport="http",outcome="busy"}"#));
    let expected: usize = accepted.iter().map(|i| rows_of_line(i % 14)).sum();
    let counts = row_counts(out.path());
    assert!(counts.values().all(|n| *n == 1), "no row twice");
    assert!(
        counts.len() >= expected,
        "every accepted export is in the Parquet files"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_memory_limit_exports_are_refused_retryably_and_nothing_accepted_is_lost() {
    let out = tempfile::tempdir().unwrap();
    let mut config = config(out.path());
    let limit = 1024 * 1024;
    config.service.memory_limit = limit;
    // Requests wait (an hour) and may take the whole limit: what the shard holds fills it.
    config.processors.retry_spend.group_wait = std::time::Duration::from_secs(3600);
    config.processors.retry_spend.max_pending_bytes = Some(limit);
    config.receivers.otlp.max_request_bytes = 64 * 1024;
    let collector = start(config).await.unwrap();

    let bodies: Vec<Vec<u8>> = (1..=100).flat_map(requests).collect();
    let sent = bodies.len();
    let answers = post_all(collector.http_addr, bodies).await;
    let accepted: Vec<usize> = (0..sent).filter(|i| answers[*i].0 == 200).collect();
    let refused: Vec<&(u16, Option<String>)> = answers.iter().filter(|a| a.0 != 200).collect();
    assert!(!accepted.is_empty(), "{answers:?}");
    assert!(
        !refused.is_empty(),
        "1 MiB cannot hold {sent} waiting exports"
    );
    for (status, retry_after) in &refused {
        assert_eq!(
            *status, 503,
            "over the memory limit is 503, retried by OTLP clients"
        );
        assert_eq!(retry_after.as_deref(), Some("5"));
    }
    let metrics = std::sync::Arc::clone(&collector.metrics);
    let counted = format!(
        r#"retry_spend_export_requests_total{{transport="http",outcome="memory_limit"}} {}"#,
        refused.len()
    );
    assert!(metrics.render().contains(&counted), "{counted}");

    stop(collector).await;
    let expected: usize = accepted.iter().map(|i| rows_of_line(i % 14)).sum();
    let counts = row_counts(out.path());
    assert!(counts.values().all(|n| *n == 1), "no row twice");
    assert_eq!(
        counts.len(),
        expected,
        "every accepted export, and no refused one, is in the Parquet files"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unwritable_output_refuses_then_recovers_and_loses_nothing() {
    let out = tempfile::tempdir().unwrap();
    // The partition directory the example's rows need is a file: every Parquet write fails.
    let blocker = out.path().join("attempts").join("date=2026-08-25");
    std::fs::create_dir_all(blocker.parent().unwrap()).unwrap();
    std::fs::write(&blocker, b"not a directory").unwrap();

    let collector = start(config(out.path())).await.unwrap();
    let first = requests(1);
    // Line 2 is a whole request whose logical span says 2 attempts: it is written on arrival.
    let answers = post_all(collector.http_addr, vec![first[2].clone()]).await;
    assert_eq!(answers[0].0, 200, "accepted into the write-ahead log");
    collector.sync().await.unwrap();

    let health = get(collector.metrics_addr, "/healthz").await;
    assert_eq!(health.0, 503);
    assert!(health.1.contains("parquet"), "{}", health.1);
    let refused = post_all(collector.http_addr, vec![first[5].clone()]).await;
    assert_eq!(refused[0].0, 503, "no new data while the sink cannot write");
    assert_eq!(refused[0].1.as_deref(), Some("5"));

    std::fs::remove_file(&blocker).unwrap();
    collector.sync().await.unwrap();
    assert_eq!(get(collector.metrics_addr, "/healthz").await.0, 200);
    let resumed = post_all(collector.http_addr, first[6..8].to_vec()).await;
    assert!(resumed.iter().all(|a| a.0 == 200), "{resumed:?}");
    stop(collector).await;
    assert!(
        std::fs::read_dir(out.path().join("wal")).unwrap().count() > 0,
        "the log keeps the rows the failed write lost"
    );

    // The next start recovers them; nothing is written twice.
    let collector = start(config(out.path())).await.unwrap();
    stop(collector).await;
    let counts = row_counts(out.path());
    assert!(counts.values().all(|n| *n == 1), "no row twice: {counts:?}");
    assert_eq!(
        counts.len(),
        rows_of_line(2) + rows_of_line(6) + rows_of_line(7)
    );
}

/// Whether this process runs as root (uid 0), read from /proc.
fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|uids| uids.split_whitespace().next().map(|uid| uid == "0"))
        })
        .unwrap_or(false)
}

/// A tmpfs of its own, unmounted on drop.
struct TinyDisk {
    path: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl TinyDisk {
    /// Mounts it, or fails saying why: mounting needs root.
    fn mount(bytes: u64) -> TinyDisk {
        assert!(
            running_as_root(),
            "this test mounts a tmpfs, which needs root: run it as root (as .ci/run is), or leave \
             it ignored"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disk");
        std::fs::create_dir(&path).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(&path)
            .output()
            .unwrap_or_else(|e| panic!("cannot run mount: {e}"));
        assert!(
            mounted.status.success(),
            "running as root, yet a tmpfs could not be mounted ({}): {}",
            mounted.status,
            String::from_utf8_lossy(&mounted.stderr)
        );
        TinyDisk { path, _dir: dir }
    }
}

impl Drop for TinyDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(&self.path)
            .status();
    }
}

/// Fills the disk up to the last byte with one file.
fn fill(dir: &Path) -> std::path::PathBuf {
    use std::io::Write;
    let path = dir.join("junk");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 4096];
    while file.write_all(&chunk).is_ok() {}
    while file.write_all(&[0]).is_ok() {}
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root to mount a tmpfs (run by .ci/run)"]
async fn full_disk_refuses_then_recovers_when_space_returns() {
    let disk = TinyDisk::mount(4 * 1024 * 1024);
    let output = disk.path.join("out");
    let collector = start(config(&output)).await.unwrap();
    let lines = requests(1);
    assert_eq!(
        post_all(collector.http_addr, vec![lines[2].clone()]).await[0].0,
        200
    );
    collector.sync().await.unwrap();

    let junk = fill(&disk.path);
    let refused = post_all(collector.http_addr, vec![lines[5].clone()]).await;
    assert_eq!(refused[0].0, 503, "a full disk refuses new data");
    assert_eq!(refused[0].1.as_deref(), Some("5"));
    let health = get(collector.metrics_addr, "/healthz").await;
    assert_eq!(health.0, 503);
    assert!(health.1.contains("wal"), "{}", health.1);

    std::fs::remove_file(junk).unwrap();
    let resumed = post_all(collector.http_addr, vec![lines[6].clone()]).await;
    assert_eq!(resumed[0].0, 200, "accepted again once there is space");
    assert_eq!(get(collector.metrics_addr, "/healthz").await.0, 200);
    stop(collector).await;

    let counts = row_counts(&output);
    assert!(counts.values().all(|n| *n == 1));
    assert_eq!(
        counts.len(),
        rows_of_line(2) + rows_of_line(6),
        "the refused export has no rows"
    );
}

//! The in-process collector on ephemeral loopback ports, and the example spans it is fed.

use std::net::SocketAddr;
use std::path::Path;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use retry_spend_collector::config::Config;
use retry_spend_collector::service::{start, Collector};

use super::{read_table, temporary_files, Row};

pub const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/retries.jsonl");
pub use super::child::PRICING;
/// Spans in the example file, and the attempt rows they make.
pub const EXAMPLE_SPANS: usize = 37;
pub const EXAMPLE_ROWS: usize = 25;

/// Defaults, with every listener on an ephemeral loopback port and output under `output`.
pub fn config(output: &Path) -> Config {
    let mut config = Config::default();
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    config.receivers.otlp.grpc_addr = loopback;
    config.receivers.otlp.http_addr = loopback;
    config.telemetry.metrics_addr = loopback;
    config.processors.retry_spend.pricing_dir = PRICING.into();
    config.exporters.parquet.output_dir = output.to_path_buf();
    config
}

pub fn example_requests() -> Vec<ExportTraceServiceRequest> {
    std::fs::read_to_string(EXAMPLE)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// What `replay` writes for the example: the rows every transport must reproduce.
pub fn replayed_rows() -> Vec<Row> {
    super::replay::Replay::example().rows()
}

/// A collector started in-process with [`config`] as `edit` changes it, writing to a fresh
/// directory (kept as long as the returned one).
pub async fn started(edit: impl FnOnce(&mut Config)) -> (Collector, tempfile::TempDir) {
    let out = tempfile::tempdir().unwrap();
    let mut config = config(out.path());
    edit(&mut config);
    (start(config).await.unwrap(), out)
}

/// Stops the collector cleanly and reads back what it wrote.
pub async fn stop(collector: Collector, output: &Path) -> Vec<Row> {
    collector.shutdown();
    collector.wait().await.expect("clean shutdown");
    assert!(
        temporary_files(output).is_empty(),
        "no temporary file remains"
    );
    read_table(output).1
}

/// `GET http://{addr}{path}` (the metrics listener's `/healthz`, `/metrics`): status and body.
pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let response = reqwest::get(format!("http://{addr}{path}"))
        .await
        .expect("GET");
    let status = response.status().as_u16();
    (status, response.text().await.expect("the body"))
}

/// Sends each request in one OTLP/gRPC export call, in order, each acknowledged before the next.
pub async fn export(addr: SocketAddr, requests: Vec<ExportTraceServiceRequest>) {
    let mut client = TraceServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    for request in requests {
        client.export(request).await.unwrap();
    }
}

/// The rows `serve` writes for `requests` with `workers` shards and otherwise [`config`].
pub async fn rows_with_workers(
    workers: usize,
    requests: Vec<ExportTraceServiceRequest>,
) -> Vec<Row> {
    let out = tempfile::tempdir().unwrap();
    let mut config = config(out.path());
    config.processors.retry_spend.workers = workers;
    served_rows(config, requests).await
}

/// The rows a collector started with `config` writes for `requests`, sent in order: stopping
/// it after the last acknowledgement evaluates whatever it still holds, so what is held for
/// `group_wait` is judged whole.
pub async fn served_rows(config: Config, requests: Vec<ExportTraceServiceRequest>) -> Vec<Row> {
    served_rows_and_metrics(config, requests).await.0
}

/// As [`served_rows`], with the collector's metrics as scraped once it stopped.
pub async fn served_rows_and_metrics(
    config: Config,
    requests: Vec<ExportTraceServiceRequest>,
) -> (Vec<Row>, String) {
    let output = config.exporters.parquet.output_dir.clone();
    let collector = start(config).await.unwrap();
    let metrics = std::sync::Arc::clone(&collector.metrics);
    export(collector.grpc_addr, requests).await;
    let rows = stop(collector, &output).await;
    (rows, metrics.render())
}

//! The in-process collector on ephemeral loopback ports, and the example spans it is fed.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use retry_spend_collector::config::Config;
use retry_spend_collector::pipeline::Engine;
use retry_spend_collector::pricing::PricingBook;
use retry_spend_collector::replay::{replay, ReplayOptions};
use retry_spend_collector::rules::RulesConfig;
use retry_spend_collector::service::Collector;

use super::{read_table, temporary_files, Row};

pub const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/retries.jsonl");
pub const PRICING: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/pricing");
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
    let out = tempfile::tempdir().unwrap();
    let engine = Engine {
        book: PricingBook::load_dir(Path::new(PRICING)).unwrap(),
        rules: RulesConfig::default(),
        policies: Default::default(),
    };
    replay(
        &[PathBuf::from(EXAMPLE)],
        &engine,
        out.path(),
        ReplayOptions::default(),
        |_| {},
    )
    .unwrap();
    read_table(out.path()).1
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

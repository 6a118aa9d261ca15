//! Pipeline shards: the rows do not depend on how many there are.

mod common;

use std::net::SocketAddr;

use common::collector::{config, example_requests, replayed_rows, stop, EXAMPLE_ROWS};
use common::Row;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use retry_spend_collector::service::start;

/// The example's requests copied `copies` times, each copy in traces of its own, one export per
/// example line so a request's spans arrive in several calls.
fn many_traces(copies: u8) -> Vec<ExportTraceServiceRequest> {
    let mut out = Vec::new();
    for copy in 0..copies {
        for mut request in example_requests() {
            for span in request
                .resource_spans
                .iter_mut()
                .flat_map(|rs| &mut rs.scope_spans)
                .flat_map(|ss| &mut ss.spans)
            {
                if let Some(byte) = span.trace_id.get_mut(0) {
                    *byte ^= copy;
                }
            }
            out.push(request);
        }
    }
    out
}

async fn export(addr: SocketAddr, requests: Vec<ExportTraceServiceRequest>) {
    let mut client = TraceServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    for request in requests {
        client.export(request).await.unwrap();
    }
}

async fn rows_with_workers(workers: usize, requests: Vec<ExportTraceServiceRequest>) -> Vec<Row> {
    let out = tempfile::tempdir().unwrap();
    let mut config = config(out.path());
    config.processors.retry_spend.workers = workers;
    let collector = start(config).await.unwrap();
    export(collector.grpc_addr, requests).await;
    stop(collector, out.path()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_rows_are_the_same_for_any_shard_count() {
    let expected = replayed_rows();
    assert_eq!(expected.len(), EXAMPLE_ROWS);
    for workers in [1, 2, 3, 8] {
        let rows = rows_with_workers(workers, example_requests()).await;
        assert_eq!(rows, expected, "{workers} shards");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_traces_give_the_same_rows_on_one_shard_and_on_four() {
    let one = rows_with_workers(1, many_traces(64)).await;
    assert_eq!(one.len(), EXAMPLE_ROWS * 64);
    let four = rows_with_workers(4, many_traces(64)).await;
    assert_eq!(one, four);
}

/// The recordings of today's plain instrumentations, served one export per line and in reverse
/// line order: `serve` infers the same attempts `replay` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_instrumentation_gives_the_replay_rows_in_serve() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/instrumented");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 3, "the recordings are there");
    for file in files {
        let replayed = tempfile::tempdir().unwrap();
        retry_spend_collector::replay::replay(
            std::slice::from_ref(&file),
            &retry_spend_collector::pipeline::Engine {
                book: retry_spend_collector::pricing::PricingBook::load_dir(std::path::Path::new(
                    common::collector::PRICING,
                ))
                .unwrap(),
                ..Default::default()
            },
            replayed.path(),
            retry_spend_collector::replay::ReplayOptions::default(),
            |_| {},
        )
        .unwrap();
        let expected = common::read_table(replayed.path()).1;
        assert!(
            expected
                .iter()
                .any(|r| r["attempt_source"] != "single" && r["attempt_source"] != "declared"),
            "{} has inferred attempts",
            file.display()
        );
        let mut requests: Vec<ExportTraceServiceRequest> = std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .map(|l| {
                retry_spend_collector::contract::otlp_json::parse_request(l.as_bytes()).unwrap()
            })
            .collect();
        requests.reverse();
        for workers in [1, 2] {
            let rows = rows_with_workers(workers, requests.clone()).await;
            assert_eq!(rows, expected, "{} on {workers} shards", file.display());
        }
    }
}

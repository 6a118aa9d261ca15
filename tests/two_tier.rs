//! Two tiers, end to end: the OpenTelemetry SDK's OTLP exporter sends to a real OpenTelemetry
//! Collector running the shipped `config/otelcol-load-balancing.yaml` (its `load_balancing`
//! exporter with the static resolver), which spreads the spans over three retry-spend-collector
//! processes writing to one S3 prefix (moto's server). Together they write exactly the rows one
//! instance writes for the same spans, and every request's attempts are rows of one instance.
//!
//! The Collector is the distribution of `tools/otelcol/builder-config.yaml`, found through
//! `RETRY_SPEND_OTELCOL` (`.ci/run` sets it to what `tools/otelcol/build.sh` prints).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;

use common::child::request;
use common::collector::example_requests;
use common::otel::{by_service, export_grpc, span_count, ServiceBatch};
use common::otelcol::{
    otelcol_binary, rows_with_instance, wait_received, Instance, Otelcol, BUCKET, PREFIX,
};
use common::s3::S3Server;
use common::Row;

const INSTANCES: usize = 3;
/// Requests of the generated load beside the example's: enough traces that every instance gets
/// some whatever ports the ring hashes.
const REQUESTS: usize = 60;

/// The load: the example file's spans (contract and plain instrumentation, one export per
/// service), then `REQUESTS` requests of a logical span and two attempts, the logical spans in
/// one export and each attempt in an export of its own, so a request's spans reach the
/// Collector in three calls and leave it in different batches.
fn load() -> Vec<ServiceBatch> {
    let mut batches = by_service(&example_requests());
    let requests: Vec<_> = (0..REQUESTS).map(|n| request(n, n % 2 == 0)).collect();
    batches.push((
        "two-tier".into(),
        requests.iter().map(|spans| spans[0].clone()).collect(),
    ));
    for attempt in 1..=2 {
        for spans in &requests {
            batches.push(("two-tier".into(), vec![spans[attempt].clone()]));
        }
    }
    batches
}

/// Rows of one instance, by the instance id in their objects' names.
fn rows_by_instance(server: &S3Server) -> BTreeMap<String, Vec<Row>> {
    let ids: Vec<String> = (0..INSTANCES).map(|i| format!("collector-{i}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut by_instance: BTreeMap<String, Vec<Row>> = BTreeMap::new();
    for (instance, row) in rows_with_instance(server, &ids) {
        by_instance.entry(instance).or_default().push(row);
    }
    by_instance
}

/// What one instance writes for the same export calls sent to it directly.
async fn one_instance_rows(batches: Vec<ServiceBatch>) -> Vec<Row> {
    let out = tempfile::tempdir().unwrap();
    let wal = tempfile::tempdir().unwrap();
    let wal_dir = wal.path().to_string_lossy().into_owned();
    let single = Instance::start(
        "retry-spend-collector",
        out.path(),
        &["--wal-dir", &wal_dir],
        &[],
    );
    let spans = span_count(&batches);
    export_grpc(single.addr(), batches).await;
    wait_received(std::slice::from_ref(&single), spans);
    single.stop();
    common::read_table(out.path()).1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the OpenTelemetry Collector (tools/otelcol/build.sh, Go) and moto's S3 server (run by .ci/run)"]
async fn the_collector_spreads_requests_over_three_instances_that_write_one_instances_rows() {
    // Fails here, saying what to build, when the Collector is not there.
    otelcol_binary();
    let batches = load();
    let spans = span_count(&batches);
    let expected = one_instance_rows(batches.clone()).await;
    assert!(
        expected.len() > 2 * REQUESTS,
        "{} rows for one instance",
        expected.len()
    );

    let server = S3Server::start();
    server.create_bucket(BUCKET);
    let state = tempfile::tempdir().unwrap();
    let env = server.env();
    let envs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let output = format!("s3://{BUCKET}/{PREFIX}");
    let instances: Vec<Instance> = (0..INSTANCES)
        .map(|i| {
            let id = format!("collector-{i}");
            let wal = state.path().join(&id).to_string_lossy().into_owned();
            Instance::start(
                "retry-spend-collector",
                Path::new(&output),
                &["--instance-id", &id, "--wal-dir", &wal],
                &envs,
            )
        })
        .collect();
    let addrs: Vec<SocketAddr> = instances.iter().map(Instance::addr).collect();
    let otelcol = Otelcol::start(&addrs, state.path());

    export_grpc(otelcol.grpc_addr, batches).await;
    // Every span reached an instance: the Collector has nothing left to send.
    wait_received(&instances, spans);
    otelcol.stop();
    let received: Vec<u64> = instances.iter().map(Instance::spans_received).collect();
    for instance in instances {
        instance.stop();
    }
    assert!(
        received.iter().all(|&n| n > 0),
        "the ring gave every instance spans: {received:?}"
    );

    let by_instance = rows_by_instance(&server);
    assert_eq!(by_instance.len(), INSTANCES, "every instance wrote rows");
    // Every trace, and so every request (trace id, request id), is rows of one instance only.
    let mut homes: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (instance, rows) in &by_instance {
        for row in rows {
            homes
                .entry(row["trace_id"].as_str())
                .or_default()
                .insert(instance);
        }
    }
    let split: Vec<_> = homes.iter().filter(|(_, set)| set.len() > 1).collect();
    assert!(split.is_empty(), "traces split over instances: {split:?}");
    // The union is one instance's rows, every column.
    let mut union: Vec<Row> = by_instance.into_values().flatten().collect();
    common::sort_rows(&mut union);
    assert_eq!(union.len(), expected.len());
    assert_eq!(union, expected);
}

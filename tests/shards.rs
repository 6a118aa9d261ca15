//! Pipeline shards, and collector instances sharing one output: the rows do not depend on how
//! many there are.

mod common;

use common::collector::{
    config, example_requests, export, replayed_rows, rows_with_workers, EXAMPLE_ROWS,
};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use retry_spend_collector::config::Config;
use retry_spend_collector::contract::attr;
use retry_spend_collector::service::{start, Collector};

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
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    assert!(files.len() >= 20, "the recordings are there");
    for file in files {
        let expected = common::replay::Replay::new().input(&file).rows();
        // A recording whose spans do not show the tries (its truth file says so) has none.
        let truth = file.with_extension("truth.json");
        let shows_tries = std::fs::read_to_string(&truth).map_or(true, |text| {
            serde_json::from_str::<serde_json::Value>(&text).unwrap()["shows_tries"] == true
        });
        if shows_tries {
            assert!(
                expected
                    .iter()
                    .any(|r| r["attempt_source"] != "single" && r["attempt_source"] != "declared"),
                "{} has inferred attempts",
                file.display()
            );
        }
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

const INSTANCES: usize = 3;

/// A load balancer that keys each span by its `retry_spend.request.id` (its trace id when it has
/// none) and lets the key's hash pick the instance, so that a request whose attempts are in
/// several traces ([`spread_requests`]) still reaches one instance. This is not what the shipped
/// `config/otelcol-load-balancing.yaml` does: its `load_balancing` exporter routes by
/// `routing_key: traceID`, every span of a trace to one instance whatever its attributes, which
/// would split such requests over instances (tests/two_tier.rs and tests/membership.rs run the
/// real exporter).
fn instance_of(span: &Span) -> usize {
    use std::hash::{Hash, Hasher};
    let request_id = span.attributes.iter().find_map(|kv| {
        match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(Value::StringValue(id)) if kv.key == attr::REQUEST_ID => Some(id.as_bytes()),
            _ => None,
        }
    });
    // A fixed-key hasher: the same key goes to the same instance in every run.
    let mut hasher = std::hash::DefaultHasher::new();
    request_id.unwrap_or(&span.trace_id).hash(&mut hasher);
    (hasher.finish() % INSTANCES as u64) as usize
}

/// One export's spans split by instance, each part keeping its resource and scope.
fn route(request: &ExportTraceServiceRequest) -> [ExportTraceServiceRequest; INSTANCES] {
    std::array::from_fn(|instance| {
        let mut part = request.clone();
        for resource in &mut part.resource_spans {
            for scope in &mut resource.scope_spans {
                scope.spans.retain(|span| instance_of(span) == instance);
            }
            resource.scope_spans.retain(|scope| !scope.spans.is_empty());
        }
        part.resource_spans
            .retain(|resource| !resource.scope_spans.is_empty());
        part
    })
}

fn spans_of(request: &mut ExportTraceServiceRequest) -> impl Iterator<Item = &mut Span> {
    request
        .resource_spans
        .iter_mut()
        .flat_map(|rs| &mut rs.scope_spans)
        .flat_map(|ss| &mut ss.spans)
}

/// Requests `spread-<n>` whose attempts are in several traces (a gateway that starts a trace
/// per try): in each trace of `traces` a copy of the example's `req-pro-to-flash` (a logical span
/// and two attempts, renamed) beside a copy of its plain GenAI call and HTTP try (no request
/// id), one export per span, the requests interleaved.
fn spread_requests(requests: u8, traces: std::ops::Range<u8>) -> Vec<ExportTraceServiceRequest> {
    let examples = example_requests();
    let (declared, plain) = (&examples[2], &examples[13]);
    let mut exports = Vec::new();
    for trace in traces {
        for n in 0..requests {
            for template in [declared, plain] {
                let mut copy = template.clone();
                for span in spans_of(&mut copy) {
                    span.trace_id = [0x5e, n, trace].into_iter().chain([0; 13]).collect();
                    for kv in &mut span.attributes {
                        if kv.key == attr::REQUEST_ID {
                            kv.value = Some(AnyValue {
                                value: Some(Value::StringValue(format!("spread-{n}"))),
                            });
                        }
                    }
                }
                // One export per span: a request's spans reach its instance in several calls.
                let spans: Vec<Span> = spans_of(&mut copy).map(|s| s.clone()).collect();
                for span in spans {
                    let mut export = copy.clone();
                    for scope in export
                        .resource_spans
                        .iter_mut()
                        .flat_map(|rs| &mut rs.scope_spans)
                    {
                        scope.spans.retain(|s| s == &span);
                    }
                    exports.push(export);
                }
            }
        }
    }
    exports
}

/// Stops a collector; returns the files it completed.
async fn stop_counting_files(collector: Collector) -> u64 {
    let metrics = std::sync::Arc::clone(&collector.metrics);
    collector.shutdown();
    let summary = collector.wait().await.expect("clean shutdown");
    assert_eq!(summary.rows_lost, 0);
    let prefix = "retry_spend_parquet_files_total ";
    metrics
        .render()
        .lines()
        .find_map(|l| l.strip_prefix(prefix)?.parse().ok())
        .unwrap_or_default()
}

/// Instance `i` of a group sharing `output`: its own id and write-ahead log.
fn instance_config(output: &std::path::Path, wal: &std::path::Path, i: usize) -> Config {
    let mut config = config(output);
    config.exporters.parquet.instance_id = format!("collector-{i}");
    config.wal.dir = wal.join(format!("collector-{i}"));
    config
}

async fn send_routed(instances: &[Collector], requests: &[ExportTraceServiceRequest]) {
    let mut parts: [Vec<ExportTraceServiceRequest>; INSTANCES] = Default::default();
    for request in requests {
        for (instance, part) in route(request).into_iter().enumerate() {
            if !part.resource_spans.is_empty() {
                parts[instance].push(part);
            }
        }
    }
    for (collector, parts) in instances.iter().zip(parts) {
        export(collector.grpc_addr, parts).await;
    }
}

/// Three collectors behind a load balancer that routes by request id, writing into one
/// directory, one of them restarted between two halves of the input (a rolling deploy): their
/// rows together are exactly one collector's, and no file name is taken twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_sharing_one_output_write_one_instances_rows() {
    // Whole requests on each side of the restart: a request cut in two by a restart is judged
    // without its earlier attempts, by one collector as by three.
    let mut first = example_requests();
    let mut second = first.split_off(6);
    first.extend(spread_requests(6, 0..2));
    second.extend(spread_requests(6, 2..4));
    let all: Vec<_> = first.iter().chain(&second).cloned().collect();
    let single = rows_with_workers(2, all).await;
    assert!(single.len() > EXAMPLE_ROWS + 6 * 4 * 2, "{}", single.len());
    let routed: std::collections::BTreeSet<usize> = first
        .iter()
        .chain(&second)
        .flat_map(|r| r.resource_spans.iter().flat_map(|rs| &rs.scope_spans))
        .flat_map(|ss| ss.spans.iter().map(instance_of))
        .collect();
    assert_eq!(routed.len(), INSTANCES, "the input reaches every instance");

    let out = tempfile::tempdir().unwrap();
    let wal = tempfile::tempdir().unwrap();
    let mut instances = Vec::new();
    for i in 0..INSTANCES {
        instances.push(
            start(instance_config(out.path(), wal.path(), i))
                .await
                .unwrap(),
        );
    }
    send_routed(&instances, &first).await;
    // Every instance now holds rows in an open file.
    for collector in &instances {
        collector.sync().await.unwrap();
    }
    let mut files = stop_counting_files(instances.remove(1)).await;
    let restarted = start(instance_config(out.path(), wal.path(), 1))
        .await
        .unwrap();
    instances.insert(1, restarted);
    send_routed(&instances, &second).await;
    for collector in instances {
        files += stop_counting_files(collector).await;
    }

    let names: Vec<String> = common::parquet_files(out.path())
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    assert!(common::temporary_files(out.path()).is_empty(), "{names:?}");
    assert_eq!(
        names.len() as u64,
        files,
        "one file per file written: {names:?}"
    );
    for i in 0..INSTANCES {
        let prefix = format!("part-collector-{i}-");
        assert!(names.iter().any(|n| n.starts_with(&prefix)), "{names:?}");
    }
    assert!(
        names
            .iter()
            .all(|n| (0..INSTANCES).any(|i| n.starts_with(&format!("part-collector-{i}-")))),
        "{names:?}"
    );
    assert_eq!(common::read_table(out.path()).1, single);
}

/// The same three collectors writing to one S3 prefix (moto's server): each stages and uploads
/// its own files, and together they upload exactly one collector's rows under distinct keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto's S3 server (run by .ci/run)"]
async fn three_instances_sharing_one_s3_prefix_upload_one_instances_rows() {
    let server = common::s3::S3Server::start();
    server.create_bucket("lake");
    let mut requests = example_requests();
    requests.extend(spread_requests(6, 0..3));
    let single = rows_with_workers(2, requests.clone()).await;

    let state = tempfile::tempdir().unwrap();
    let s3_config = |i: usize| {
        let mut config = instance_config(std::path::Path::new("s3://lake/shared"), state.path(), i);
        let store = &mut config.exporters.parquet.object_store;
        store.endpoint = Some(server.endpoint());
        store.allow_http = Some(true);
        store.options = server.options();
        config
    };
    let mut instances = Vec::new();
    for i in 0..INSTANCES {
        instances.push(start(s3_config(i)).await.expect("start"));
    }
    send_routed(&instances, &requests).await;
    let mut files = 0;
    for collector in instances {
        files += stop_counting_files(collector).await;
    }

    let bucket = server.client("lake");
    let keys = bucket.keys("shared");
    assert_eq!(keys.len() as u64, files, "one object per file: {keys:?}");
    for i in 0..INSTANCES {
        let name = format!("/part-collector-{i}-");
        assert!(keys.iter().any(|k| k.contains(&name)), "{keys:?}");
    }
    assert_eq!(bucket.read_table("shared").1, single);
}

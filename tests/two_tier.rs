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
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::child::{self, request};
use common::collector::example_requests;
use common::otel::{by_service, export_grpc, ServiceBatch};
use common::s3::S3Server;
use common::Row;

const OTELCOL_ENV: &str = "RETRY_SPEND_OTELCOL";
const SHIPPED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/config/otelcol-load-balancing.yaml"
);
const BUCKET: &str = "lake";
const PREFIX: &str = "shared";
const INSTANCES: usize = 3;
/// Requests of the generated load beside the example's: enough traces that every instance gets
/// some whatever ports the ring hashes.
const REQUESTS: usize = 60;
const DEADLINE: Duration = Duration::from_secs(60);

/// The Collector binary: `$RETRY_SPEND_OTELCOL`, or a failure saying how to build it.
fn otelcol_binary() -> PathBuf {
    let path = std::env::var_os(OTELCOL_ENV).unwrap_or_else(|| {
        panic!(
            "{OTELCOL_ENV} is not set: this test runs the OpenTelemetry Collector that \
             tools/otelcol/build.sh builds (needs Go 1.26 and the Go module proxy). Run \
             `export {OTELCOL_ENV}=\"$(tools/otelcol/build.sh)\"` first, as .ci/run does."
        )
    });
    let path = PathBuf::from(path);
    assert!(
        path.is_file(),
        "{OTELCOL_ENV}={} is not a file: run tools/otelcol/build.sh",
        path.display()
    );
    path
}

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
}

/// The Collector running the shipped config, and everything it logged so far.
struct Otelcol {
    child: Child,
    grpc_addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

impl Otelcol {
    /// Starts the shipped config with the static resolver over `instances`, its receivers on
    /// free loopback ports (the file's `${env:...}` values), and an overlay that turns off its
    /// own metrics (port 8888 would be shared by every Collector on the machine). Returns once
    /// the Collector says it is ready.
    fn start(instances: &[SocketAddr], dir: &Path) -> Otelcol {
        let overlay = dir.join("otelcol-overlay.yaml");
        std::fs::write(
            &overlay,
            "service:\n  telemetry:\n    metrics:\n      level: none\n",
        )
        .expect("overlay");
        let (grpc_addr, http_addr) = (free_addr(), free_addr());
        let hostnames: Vec<String> = instances.iter().map(SocketAddr::to_string).collect();
        let mut child = Command::new(otelcol_binary())
            .arg("--config")
            .arg(SHIPPED)
            .arg("--config")
            .arg(&overlay)
            .env("OTELCOL_GRPC_ENDPOINT", grpc_addr.to_string())
            .env("OTELCOL_HTTP_ENDPOINT", http_addr.to_string())
            .env(
                "RETRY_SPEND_INSTANCES",
                format!("[{}]", hostnames.join(", ")),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the OpenTelemetry Collector");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let kept = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if line.contains("Everything is ready") {
                    let _ = ready_tx.send(());
                }
                kept.lock().unwrap().push(line);
            }
        });
        if ready_rx.recv_timeout(DEADLINE).is_err() {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the Collector did not get ready on {grpc_addr}:\n{}",
                log.lock().unwrap().join("\n")
            );
        }
        Otelcol {
            child,
            grpc_addr,
            log,
        }
    }

    /// SIGTERM: the Collector flushes its batch processor and sending queues, then exits.
    fn stop(mut self) {
        child::signal(&self.child, "TERM");
        let status = wait_exit(&mut self.child, "the Collector");
        let log = self.log.lock().unwrap().join("\n");
        assert!(
            status.success(),
            "the Collector exited with {status}:\n{log}"
        );
        // A span it could not deliver is logged as dropped; none may be.
        assert!(
            !log.contains("Exporting failed. Dropping data"),
            "the Collector dropped data:\n{log}"
        );
    }
}

/// Waits (bounded) for a child that was told to stop.
fn wait_exit(child: &mut Child, what: &str) -> ExitStatus {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("{what} did not exit within {DEADLINE:?} of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A retry-spend-collector process and its metrics address.
struct Instance {
    collector: child::Collector,
    metrics_addr: SocketAddr,
}

impl Instance {
    fn start(output: &Path, args: &[&str], envs: &[(&str, &str)]) -> Instance {
        let collector = child::start(output, args, envs);
        let deadline = Instant::now() + DEADLINE;
        let metrics_addr = loop {
            let line = collector
                .log
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("the start-up log names the metrics address");
            if let Some(rest) = line.split("metrics_addr=").nth(1) {
                break rest
                    .split_whitespace()
                    .next()
                    .and_then(|a| a.parse().ok())
                    .expect("metrics address");
            }
        };
        Instance {
            collector,
            metrics_addr,
        }
    }

    /// `retry_spend_spans_received_total` over all transports.
    fn spans_received(&self) -> u64 {
        let mut stream = TcpStream::connect(self.metrics_addr).expect("connect to /metrics");
        write!(
            stream,
            "GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.metrics_addr
        )
        .expect("send");
        let mut body = String::new();
        stream.read_to_string(&mut body).expect("metrics");
        body.lines()
            .filter(|l| l.starts_with("retry_spend_spans_received_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// SIGTERM: evaluates what is pending, completes and uploads its files, exits 0.
    fn stop(mut self) {
        child::signal(&self.collector.child, "TERM");
        let status = wait_exit(&mut self.collector.child, "retry-spend-collector");
        let log: Vec<String> = self.collector.log.try_iter().collect();
        assert!(
            status.success(),
            "retry-spend-collector exited with {status}:\n{}",
            log.join("\n")
        );
    }
}

/// Polls (bounded) until the instances together have received `spans`.
fn wait_received(instances: &[Instance], spans: u64) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let received: u64 = instances.iter().map(Instance::spans_received).sum();
        assert!(received <= spans, "{received} spans received, {spans} sent");
        if received == spans {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{received} of {spans} spans reached the instances within {DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

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

fn span_count(batches: &[ServiceBatch]) -> u64 {
    batches.iter().map(|(_, spans)| spans.len() as u64).sum()
}

/// Rows of one instance, by the instance id in their objects' names.
fn rows_by_instance(server: &S3Server) -> BTreeMap<String, Vec<Row>> {
    let bucket = server.client(BUCKET);
    let mut by_instance: BTreeMap<String, Vec<Row>> = BTreeMap::new();
    let mut schema = None;
    for key in bucket.keys(&format!("{PREFIX}/attempts")) {
        let name = key.rsplit('/').next().unwrap_or_default();
        let instance = (0..INSTANCES)
            .map(|i| format!("collector-{i}"))
            .find(|id| name.starts_with(&format!("part-{id}-")))
            .unwrap_or_else(|| panic!("{key} is no instance's file"));
        let partition = key.rsplit('/').nth(1).map(str::to_owned);
        common::read_file(
            bucket.get(&key),
            partition,
            &mut schema,
            by_instance.entry(instance).or_default(),
        );
    }
    by_instance
}

/// What one instance writes for the same export calls sent to it directly.
async fn one_instance_rows(batches: Vec<ServiceBatch>) -> Vec<Row> {
    let out = tempfile::tempdir().unwrap();
    let wal = tempfile::tempdir().unwrap();
    let wal_dir = wal.path().to_string_lossy().into_owned();
    let single = Instance::start(out.path(), &["--wal-dir", &wal_dir], &[]);
    let spans = span_count(&batches);
    export_grpc(single.collector.grpc_addr, batches).await;
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
                Path::new(&output),
                &["--instance-id", &id, "--wal-dir", &wal],
                &envs,
            )
        })
        .collect();
    let addrs: Vec<SocketAddr> = instances.iter().map(|i| i.collector.grpc_addr).collect();
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

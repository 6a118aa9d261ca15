//! The real OpenTelemetry Collector in front of retry-spend-collector processes on one S3
//! prefix, for tests/two_tier.rs and tests/membership.rs: the Collector running the shipped
//! `config/otelcol-load-balancing.yaml` ([`Otelcol`]), the instances behind it ([`Instance`]),
//! and the rows they wrote, by instance ([`rows_with_instance`]).
//!
//! The Collector is the distribution of `tools/otelcol/builder-config.yaml`, found through
//! `RETRY_SPEND_OTELCOL` (`.ci/run` sets it to what `tools/otelcol/build.sh` prints).

use std::borrow::Borrow;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::child;
use super::s3::S3Server;
use super::Row;

pub const OTELCOL_ENV: &str = "RETRY_SPEND_OTELCOL";
pub const SHIPPED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/config/otelcol-load-balancing.yaml"
);
/// The bucket and prefix the instances share: `s3://lake/shared`.
pub const BUCKET: &str = "lake";
pub const PREFIX: &str = "shared";
pub const DEADLINE: Duration = Duration::from_secs(60);

/// The Collector binary: `$RETRY_SPEND_OTELCOL`, or a failure saying how to build it.
pub fn otelcol_binary() -> PathBuf {
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

/// The Collector running the shipped config, and everything it logged so far.
pub struct Otelcol {
    child: Child,
    pub grpc_addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

impl Otelcol {
    /// Starts the shipped config with the static resolver over `instances`, its receivers on
    /// free loopback ports (the file's `${env:...}` values), and an overlay that turns off its
    /// own metrics (port 8888 would be shared by every Collector on the machine). Returns once
    /// the Collector says it is ready.
    pub fn start(instances: &[SocketAddr], dir: &Path) -> Otelcol {
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
    pub fn stop(mut self) {
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

/// A retry-spend-collector process and its metrics address.
pub struct Instance {
    /// What failures call it.
    name: String,
    pub collector: child::Collector,
    metrics_addr: SocketAddr,
}

impl Instance {
    /// `serve` writing to `output` with `args` and `envs` added (as [`child::start`]), once its
    /// start-up log names its metrics address; `name` is what failures call it.
    pub fn start(name: &str, output: &Path, args: &[&str], envs: &[(&str, &str)]) -> Instance {
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
            name: name.to_owned(),
            collector,
            metrics_addr,
        }
    }

    /// Its OTLP/gRPC address.
    pub fn addr(&self) -> SocketAddr {
        self.collector.grpc_addr
    }

    /// `retry_spend_spans_received_total` over all transports.
    pub fn spans_received(&self) -> u64 {
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
    pub fn stop(mut self) {
        child::signal(&self.collector.child, "TERM");
        let status = wait_exit(&mut self.collector.child, &self.name);
        let log: Vec<String> = self.collector.log.try_iter().collect();
        assert!(
            status.success(),
            "{} exited with {status}:\n{}",
            self.name,
            log.join("\n")
        );
    }
}

/// Polls (bounded) until `instances` together have received `spans` in all since they started
/// (a slice of instances or of references to them).
pub fn wait_received<I: Borrow<Instance>>(instances: &[I], spans: u64) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let received: u64 = instances.iter().map(|i| i.borrow().spans_received()).sum();
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

/// Every row under `s3://BUCKET/PREFIX` with the instance of `ids` that wrote it (from its
/// object's name, `part-<id>-...`), in key order.
pub fn rows_with_instance(server: &S3Server, ids: &[&str]) -> Vec<(String, Row)> {
    let bucket = server.client(BUCKET);
    let mut out = Vec::new();
    let mut schema = None;
    for key in bucket.keys(&format!("{PREFIX}/attempts")) {
        let name = key.rsplit('/').next().unwrap_or_default();
        let id = ids
            .iter()
            .find(|id| name.starts_with(&format!("part-{id}-")))
            .unwrap_or_else(|| panic!("{key} is no instance's file"));
        let mut rows = Vec::new();
        let partition = key.rsplit('/').nth(1).map(str::to_owned);
        super::read_file(bucket.get(&key), partition, &mut schema, &mut rows);
        out.extend(rows.into_iter().map(|r| (id.to_string(), r)));
    }
    out
}

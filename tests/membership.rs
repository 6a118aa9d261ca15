//! Membership changes behind the real OpenTelemetry Collector, observed: requests whose
//! attempts end (and so are exported) across a rollout. The shipped
//! `config/otelcol-load-balancing.yaml` (static resolver, `load_balancing` exporter, trace id
//! routing) runs in front of retry-spend-collector instances on one S3 prefix (moto's server):
//!
//! 1. instances A, B, C: every request's attempt 0 ends and is exported;
//! 2. C is removed: the Collector restarts with A, B (the static resolver reads its list at
//!    start), then C stops with SIGTERM; every attempt 1 ends;
//! 3. C comes back (same instance id and write-ahead log) and D is added: the Collector
//!    restarts with A, B, C, D; every attempt 2 and the logical span end.
//!
//! What each row says is checked against where its request's spans went, which the test reads
//! back from the instance ids in the objects' names, and against docs/operations.md ("When
//! membership changes while a request is in flight"); the counts by attempt and reason are
//! printed (`cargo test --test membership -- --include-ignored --nocapture`).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::child;
use common::otel::{export_grpc, span_data, ServiceBatch};
use common::s3::S3Server;
use common::Row;
use opentelemetry::InstrumentationScope;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;

const OTELCOL_ENV: &str = "RETRY_SPEND_OTELCOL";
const SHIPPED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/config/otelcol-load-balancing.yaml"
);
const BUCKET: &str = "lake";
const PREFIX: &str = "shared";
/// Requests in flight across both changes: enough that, whatever ports the ring hashes, some
/// stay put, some move at each change and some go away and come back (about one in twelve).
const REQUESTS: usize = 120;
const DEADLINE: Duration = Duration::from_secs(60);
/// Longer than the test: a request is evaluated when its three attempts are in, or when its
/// instance stops, never by its timer, so what each row says depends on routing alone.
const GROUP_WAIT: &str = "10m";
/// 2026-08-25T12:00:00Z, within 30 days of the shipped pricing snapshot.
const T0: u64 = 1_787_659_200_000_000_000;
const SECOND: u64 = 1_000_000_000;

// ---------------------------------------------------------------------------------------------
// The Collector and the instances (as in tests/two_tier.rs).

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

struct Otelcol {
    child: Child,
    grpc_addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

impl Otelcol {
    /// The shipped config, its `${env:...}` values set, its own metrics off (overlay).
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
                "the Collector did not get ready:\n{}",
                log.lock().unwrap().join("\n")
            );
        }
        Otelcol {
            child,
            grpc_addr,
            log,
        }
    }

    fn stop(mut self) {
        child::signal(&self.child, "TERM");
        let status = wait_exit(&mut self.child, "the Collector");
        let log = self.log.lock().unwrap().join("\n");
        assert!(
            status.success(),
            "the Collector exited with {status}:\n{log}"
        );
        assert!(
            !log.contains("Exporting failed. Dropping data"),
            "the Collector dropped data:\n{log}"
        );
    }
}

struct Instance {
    id: String,
    collector: child::Collector,
    metrics_addr: SocketAddr,
}

impl Instance {
    /// Instance `id` on the shared prefix, its write-ahead log (and so its finished-request
    /// summaries) under `state/<id>`.
    fn start(id: &str, server: &S3Server, state: &Path) -> Instance {
        let env = server.env();
        let envs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let wal = state.join(id).to_string_lossy().into_owned();
        let output = format!("s3://{BUCKET}/{PREFIX}");
        let collector = child::start(
            Path::new(&output),
            &[
                "--instance-id",
                id,
                "--wal-dir",
                &wal,
                "--group-wait",
                GROUP_WAIT,
            ],
            &envs,
        );
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
            id: id.to_owned(),
            collector,
            metrics_addr,
        }
    }

    fn addr(&self) -> SocketAddr {
        self.collector.grpc_addr
    }

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

    fn stop(mut self) {
        child::signal(&self.collector.child, "TERM");
        let status = wait_exit(&mut self.collector.child, &self.id);
        let log: Vec<String> = self.collector.log.try_iter().collect();
        assert!(
            status.success(),
            "{} exited with {status}:\n{}",
            self.id,
            log.join("\n")
        );
    }
}

/// Polls (bounded) until `instances` have received `spans` in all since they started.
fn wait_received(instances: &[&Instance], spans: u64) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let received: u64 = instances.iter().map(|i| i.spans_received()).sum();
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

// ---------------------------------------------------------------------------------------------
// The requests.

fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

fn string(key: &str, value: &str) -> KeyValue {
    kv(key, Value::StringValue(value.into()))
}

fn int(key: &str, value: i64) -> KeyValue {
    kv(key, Value::IntValue(value))
}

/// Request `n` as the SDK records it (the example's `req-glm-retry` with a third attempt): a
/// logical span with its envelope and pricing, and attempts 0 and 1 that hit a rate limit and
/// attempt 2 that succeeds, all in one trace. Returned in the order their spans end: attempt 0,
/// attempt 1, attempt 2, the logical span.
fn request(n: usize) -> [Span; 4] {
    let mut trace_id = vec![0x3e; 16];
    trace_id[..8].copy_from_slice(&(n as u64).to_be_bytes());
    let logical_id = vec![0x10, 0, 0, 0, 0, 0, 0, 1];
    let request_id = format!("member-{n}");
    let start = T0 + n as u64 * SECOND;
    let attempt = |index: u8| {
        let mut attributes = vec![
            string("retry_spend.span.role", "attempt"),
            string("retry_spend.request.id", &request_id),
            int("retry_spend.attempt.index", i64::from(index)),
            string("gen_ai.operation.name", "chat"),
            string("gen_ai.provider.name", "aiwave"),
            string("gen_ai.request.model", "glm-5"),
            string("gen_ai.response.model", "glm-5"),
            int("gen_ai.request.max_tokens", 800),
            int("gen_ai.usage.input_tokens", 10_000),
            int("gen_ai.usage.cache_read.input_tokens", 4_000),
        ];
        if index < 2 {
            attributes.push(string("error.type", "rate_limited"));
        } else {
            attributes.push(int("gen_ai.usage.output_tokens", 612));
        }
        let begins = start + 100_000_000 + u64::from(index) * 3 * SECOND;
        Span {
            trace_id: trace_id.clone(),
            span_id: vec![0x20, 0, 0, 0, 0, 0, 0, index + 1],
            parent_span_id: logical_id.clone(),
            name: "chat glm-5".into(),
            start_time_unix_nano: begins,
            end_time_unix_nano: begins + 2 * SECOND,
            attributes,
            ..Default::default()
        }
    };
    let families = ["deepseek", "qwen", "glm"]
        .into_iter()
        .map(|f| AnyValue {
            value: Some(Value::StringValue(f.into())),
        })
        .collect();
    let logical = Span {
        trace_id: trace_id.clone(),
        span_id: logical_id.clone(),
        name: "llm.request".into(),
        start_time_unix_nano: start,
        end_time_unix_nano: start + 9 * SECOND,
        attributes: vec![
            string("retry_spend.span.role", "logical_request"),
            string("retry_spend.request.id", &request_id),
            int("retry_spend.attempt_count", 3),
            string(
                "retry_spend.pricing.source",
                "https://aiwave.live/api/pricing",
            ),
            string("retry_spend.pricing.checked_at", "2026-08-22"),
            string(
                "retry_spend.pricing.version",
                "a42d372ccf0b5dd13ecf71203521f9d2",
            ),
            string("retry_spend.billing_group", "vip"),
            string("retry_spend.envelope.max_incremental_usd", "0.03"),
            int("retry_spend.envelope.max_attempts_after_first", 2),
            kv(
                "retry_spend.envelope.allowed_fallback_families",
                Value::ArrayValue(ArrayValue { values: families }),
            ),
            string("retry_spend.task.type", "support_summary"),
        ],
        ..Default::default()
    };
    [attempt(0), attempt(1), attempt(2), logical]
}

/// The spans of every request that end in `phase` (0: attempt 0; 1: attempt 1; 2: attempt 2
/// and the logical span), one export per request as an SDK's span processor sends them.
fn phase(requests: &[[Span; 4]], phase: usize) -> Vec<ServiceBatch> {
    let scope = InstrumentationScope::builder("retry-spend-sdk").build();
    requests
        .iter()
        .map(|spans| {
            let ending: &[Span] = match phase {
                0 => &spans[0..1],
                1 => &spans[1..2],
                _ => &spans[2..4],
            };
            (
                "support-bot".to_owned(),
                ending.iter().map(|s| span_data(s, &scope)).collect(),
            )
        })
        .collect()
}

fn span_count(batches: &[ServiceBatch]) -> u64 {
    batches.iter().map(|(_, spans)| spans.len() as u64).sum()
}

/// Every row with the instance that wrote it (from its object's name).
fn rows_with_instance(server: &S3Server, ids: &[&str]) -> Vec<(String, Row)> {
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
        common::read_file(bucket.get(&key), partition, &mut schema, &mut rows);
        out.extend(rows.into_iter().map(|r| (id.to_string(), r)));
    }
    out
}

/// What a row says: decision, audited, unaudited reason.
fn verdict(row: &Row) -> String {
    format!(
        "{} audited={} reason={}",
        row["decision"], row["audited"], row["unaudited_reason"]
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the OpenTelemetry Collector (tools/otelcol/build.sh, Go) and moto's S3 server (run by .ci/run)"]
async fn removing_and_adding_an_instance_mid_request_moves_retries_as_the_docs_say() {
    otelcol_binary();
    let server = S3Server::start();
    server.create_bucket(BUCKET);
    let state = tempfile::tempdir().unwrap();
    let requests: Vec<[Span; 4]> = (0..REQUESTS).map(request).collect();
    let (a, b, c) = (
        Instance::start("a", &server, state.path()),
        Instance::start("b", &server, state.path()),
        Instance::start("c", &server, state.path()),
    );

    // 1. A, B, C: every attempt 0.
    let otelcol = Otelcol::start(&[a.addr(), b.addr(), c.addr()], state.path());
    let first = phase(&requests, 0);
    let sent_0 = span_count(&first);
    export_grpc(otelcol.grpc_addr, first).await;
    wait_received(&[&a, &b, &c], sent_0);
    let c_first = c.spans_received();

    // 2. C removed: out of the ring first, then stopped (it evaluates what it holds).
    otelcol.stop();
    let otelcol = Otelcol::start(&[a.addr(), b.addr()], state.path());
    c.stop();
    let second = phase(&requests, 1);
    let sent_1 = span_count(&second);
    export_grpc(otelcol.grpc_addr, second).await;
    wait_received(&[&a, &b], sent_0 - c_first + sent_1);

    // 3. C back (its log and summaries kept), D new.
    otelcol.stop();
    let c = Instance::start("c", &server, state.path());
    let d = Instance::start("d", &server, state.path());
    let otelcol = Otelcol::start(&[a.addr(), b.addr(), c.addr(), d.addr()], state.path());
    let third = phase(&requests, 2);
    let sent_2 = span_count(&third);
    export_grpc(otelcol.grpc_addr, third).await;
    let before = a.spans_received() + b.spans_received();
    wait_received(&[&a, &b, &c, &d], before + sent_2);
    otelcol.stop();
    for instance in [a, b, c, d] {
        instance.stop();
    }

    // Nothing lost or written twice: every attempt is one row.
    let rows = rows_with_instance(&server, &["a", "b", "c", "d"]);
    assert_eq!(rows.len(), 3 * REQUESTS, "one row per attempt");
    let spans: BTreeSet<(&str, &str)> = rows
        .iter()
        .map(|(_, r)| (r["trace_id"].as_str(), r["span_id"].as_str()))
        .collect();
    assert_eq!(spans.len(), rows.len(), "no attempt is two rows");

    // Where each request's attempts went, from the rows.
    let mut owners: BTreeMap<&str, [&str; 3]> = BTreeMap::new();
    for (instance, row) in &rows {
        let index: usize = row["attempt_index"].parse().expect("attempt index");
        owners.entry(row["request_id"].as_str()).or_default()[index] = instance;
    }
    for (request, [o0, o1, o2]) in &owners {
        assert!(["a", "b", "c"].contains(o0), "{request}: attempt 0 on {o0}");
        assert!(["a", "b"].contains(o1), "{request}: attempt 1 on {o1}");
        assert!(!o2.is_empty(), "{request}: attempt 2 has a row");
    }

    // What each row says, by attempt index and where its request's spans went.
    let mut table: BTreeMap<(String, &str, String), usize> = BTreeMap::new();
    let mut wrong = Vec::new();
    for (instance, row) in &rows {
        let o = owners[row["request_id"].as_str()];
        let index: usize = row["attempt_index"].parse().expect("attempt index");
        let moves = match (o[0] == o[1], o[1] == o[2], o[0] == o[2]) {
            (true, true, _) => "stayed",
            (false, true, _) => "moved at 2",
            (true, false, _) => "moved at 3",
            (false, false, true) => "away and back",
            (false, false, false) => "moved at 2 and 3",
        };
        let expected = expected_verdict(instance, index, o);
        if verdict(row) != expected {
            wrong.push(format!(
                "{} attempt {index} on {instance} (attempts on {o:?}): {} instead of {expected}",
                row["request_id"],
                verdict(row)
            ));
        }
        *table
            .entry((format!("attempt {index}"), moves, verdict(row)))
            .or_default() += 1;
    }
    eprintln!("rows by attempt, what happened to the request, and what the row says:");
    for ((index, moves, verdict), n) in &table {
        eprintln!("  {index:9}  {moves:16}  {verdict}: {n}");
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Every case happened (the ring decides which requests move; 120 make each near certain).
    for case in ["stayed", "moved at 2", "moved at 3", "away and back"] {
        assert!(
            table.keys().any(|(_, moves, _)| *moves == case),
            "no request {case}: {table:?}"
        );
    }
}

/// What the row of attempt `index`, written by `instance`, says when the request's attempts
/// went to `owners` (attempt 2 with the logical span, which ends last), by docs/operations.md:
/// - the envelope and pricing are on the logical span, so only the instance that got it can
///   audit: every other row of the request is `no_envelope`. So is attempt 0 on C when C
///   stopped before the logical span came (it was evaluated at the stop, as pending requests
///   are);
/// - with the envelope, a retry whose attempt 0 is elsewhere is `first_attempt_missing`; one
///   that has attempt 0 (held, or summarised before a restart) but not every attempt between is
///   `earlier_attempt_missing`;
/// - a request that stayed on one instance is audited as without any change.
fn expected_verdict(instance: &str, index: usize, owners: [&str; 3]) -> String {
    let evaluated_at_c_stop = instance == "c" && index == 0;
    let envelope = instance == owners[2] && !evaluated_at_c_stop;
    let reason = if !envelope {
        "no_envelope"
    } else if index > 0 && owners[0] != instance {
        "first_attempt_missing"
    } else if (1..index).any(|j| owners[j] != instance) {
        "earlier_attempt_missing"
    } else {
        "NULL"
    };
    let decision = match (index, reason) {
        (0, _) => "first_attempt",
        (_, "NULL") => "within_envelope",
        _ => "unaudited",
    };
    format!("{decision} audited={} reason={reason}", reason == "NULL")
}

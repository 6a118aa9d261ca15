//! `--output s3://…` against a real S3-compatible server (moto, started by each test): uploads
//! read back row for row, multipart for large files, a store that goes down and comes back, a
//! crash right after an upload, bad credentials, and output URLs that are refused.
//!
//! The server must be installed (`pip install 'moto[s3]' flask flask-cors`, as `.ci/run` does):
//! without it these tests fail and say how to install it, rather than skip.

mod common;

use std::collections::{BTreeSet, HashSet};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use retry_spend_collector::record::{AttemptRow, AttemptSource};
use retry_spend_collector::service::start;
use retry_spend_collector::sinks::parquet::remote::{
    self, LogObserver, UploadRetries, Uploader, MIN_PART_BYTES,
};
use retry_spend_collector::sinks::parquet::schema::attempts_schema;
use retry_spend_collector::sinks::parquet::{
    ObjectStoreConfig, Output, ParquetExporterConfig, ParquetSink,
};

use common::child::{binary, request_spans, signal, Serve, PRICING};
use common::collector::{config, example_requests, get, replayed_rows, EXAMPLE};
use common::otel::{by_service, export_grpc};
use common::replay::Replay;
use common::s3::S3Server;
use common::spans::export_of;
use common::Row;

const BUCKET: &str = "lake";
/// Long enough for a loaded CI machine; a healthy run takes a few seconds.
const DEADLINE: Duration = Duration::from_secs(60);

/// Waits until `done` holds, checking it again every few milliseconds: for conditions only a
/// store or another process can make true, which send no signal.
async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Request `n` of [`common::child::request`] as one export of service `burst`.
fn export_request(n: usize) -> ExportTraceServiceRequest {
    export_of("burst", request_spans(n, true))
}

/// A refused connection is an error like a refused export: a collector told to crash may be
/// gone between two exports.
async fn export(addr: SocketAddr, requests: &[usize]) -> Result<(), tonic::Status> {
    let mut client = TraceServiceClient::connect(format!("http://{addr}"))
        .await
        .map_err(|e| tonic::Status::unavailable(format!("connect: {e}")))?;
    let mut export = ExportTraceServiceRequest::default();
    for n in requests {
        export
            .resource_spans
            .extend(export_request(*n).resource_spans);
    }
    client.export(export).await.map(|_| ())
}

/// `/healthz` once `done` holds for its (status, body).
async fn health_when(addr: SocketAddr, done: impl Fn(&(u16, String)) -> bool) -> (u16, String) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let health = get(addr, "/healthz").await;
        if done(&health) {
            return health;
        }
        assert!(
            Instant::now() < deadline,
            "/healthz never got there: {health:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// (request id, attempt index) of every row, and whether one came twice.
fn attempts(rows: &[Row]) -> (BTreeSet<(String, String)>, bool) {
    let keys: Vec<_> = rows
        .iter()
        .map(|r| (r["request_id"].clone(), r["attempt_index"].clone()))
        .collect();
    let unique: BTreeSet<_> = keys.iter().cloned().collect();
    let duplicated = unique.len() != keys.len();
    (unique, duplicated)
}

fn expected_attempts(requests: impl IntoIterator<Item = usize>) -> BTreeSet<(String, String)> {
    requests
        .into_iter()
        .flat_map(|n| ["0", "1"].map(|i| (format!("burst-{n}"), i.to_owned())))
        .collect()
}

/// Every key is a table file under the prefix: nothing else is ever written there.
fn assert_only_table_files(keys: &[String], prefix: &str) {
    assert!(!keys.is_empty(), "nothing was uploaded under {prefix}");
    for key in keys {
        let rest = key
            .strip_prefix(&format!("{prefix}/attempts/date="))
            .unwrap_or_else(|| panic!("{key} is not a table file of {prefix}"));
        let (date, name) = rest.split_once('/').expect("partition/name");
        assert!(
            chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d").is_ok(),
            "{key}"
        );
        assert!(
            name.starts_with("part-") && name.ends_with(".parquet") && !name.contains('/'),
            "{key}"
        );
    }
}

#[test]
#[ignore = "needs moto's S3 server (run by .ci/run)"]
fn replay_uploads_every_row_with_the_exact_schema() {
    let server = S3Server::start();
    server.create_bucket(BUCKET);
    let staging = tempfile::tempdir().unwrap();
    let stdout = Replay::example()
        .output("s3://lake/llm/retries")
        .arg("--staging")
        .arg(staging.path())
        .envs(server.env())
        .run()
        .ok()
        .stdout();

    let bucket = server.client(BUCKET);
    let keys = bucket.keys("llm/retries");
    assert_only_table_files(&keys, "llm/retries");
    for key in &keys {
        assert!(
            stdout.contains(&format!("wrote s3://lake/{key}")),
            "{stdout}"
        );
    }
    let (schema, rows) = bucket.read_table("llm/retries");
    assert_eq!(schema.expect("a file").as_ref(), attempts_schema().as_ref());
    assert_eq!(rows, replayed_rows());
    assert!(
        common::parquet_files(staging.path()).is_empty(),
        "uploaded files leave staging"
    );
}

fn serve_config(
    server: &S3Server,
    url: &str,
    state: &Path,
) -> retry_spend_collector::config::Config {
    let mut config = config(Path::new(url));
    config.wal.dir = state.to_path_buf();
    let store = &mut config.exporters.parquet.object_store;
    store.endpoint = Some(server.endpoint());
    store.allow_http = Some(true);
    store.options = server.options();
    store.initial_backoff = Duration::from_millis(50);
    store.max_backoff = Duration::from_millis(200);
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto's S3 server (run by .ci/run)"]
async fn serve_uploads_the_rows_replay_writes_and_records_each_object() {
    let server = S3Server::start();
    server.create_bucket(BUCKET);
    let state = tempfile::tempdir().unwrap();
    let collector = start(serve_config(&server, "s3://lake/serve", state.path()))
        .await
        .expect("start");
    export_grpc(collector.grpc_addr, by_service(&example_requests())).await;
    collector.shutdown();
    collector.wait().await.expect("clean shutdown");

    let bucket = server.client(BUCKET);
    let keys = bucket.keys("serve");
    assert_only_table_files(&keys, "serve");
    let (schema, rows) = bucket.read_table("serve");
    assert_eq!(schema.expect("a file").as_ref(), attempts_schema().as_ref());
    assert_eq!(rows, replayed_rows());
    let staging = state.path().join(remote::STAGING_DIR);
    assert!(
        common::parquet_files(&staging).is_empty(),
        "nothing left staged"
    );
    let instance = std::fs::read_to_string(state.path().join("instance-id")).expect("instance id");
    for key in &keys {
        assert!(
            key.contains(&format!("/part-{}-", instance.trim())),
            "{key}"
        );
    }
}

/// A row whose decision reason is `reason_bytes` of hex noise: files that do not compress.
fn bulky_row(n: usize, reason_bytes: usize) -> AttemptRow {
    use sha2::{Digest, Sha256};
    let mut reason = String::with_capacity(reason_bytes);
    let mut block = Sha256::digest(n.to_le_bytes());
    while reason.len() < reason_bytes {
        reason.push_str(&hex::encode(block));
        block = Sha256::digest(block);
    }
    AttemptRow {
        event_time: 1_787_659_200_000_000_000 + n as i64,
        end_time: 1_787_659_200_000_000_000 + n as i64 + 5,
        trace_id: (n as u128 + 1).to_be_bytes(),
        span_id: (n as u64 + 1).to_be_bytes(),
        request_id: format!("bulk-{n}").into(),
        service_name: "bulk".into(),
        original_model: Some("glm-5".into()),
        decision_reason: reason,
        audited: false,
        attempt_source: AttemptSource::Single,
        ..AttemptRow::blank()
    }
}

#[test]
#[ignore = "needs moto's S3 server (run by .ci/run)"]
fn a_file_larger_than_a_part_is_uploaded_in_parts() {
    let server = S3Server::start();
    server.create_bucket(BUCKET);
    let Ok(Output::Remote(output)) = Output::parse(Path::new("s3://lake/big")) else {
        panic!("an s3 URL");
    };
    let store = remote::build_store(
        &output,
        &ObjectStoreConfig {
            endpoint: Some(server.endpoint()),
            allow_http: Some(true),
            options: server.options(),
            ..ObjectStoreConfig::default()
        },
    )
    .expect("store");
    let uploader = Uploader::start(
        store,
        output,
        &ObjectStoreConfig {
            part_bytes: MIN_PART_BYTES as u64,
            ..ObjectStoreConfig::default()
        },
        UploadRetries::Unlimited,
        Duration::from_secs(30),
        None,
        Arc::new(LogObserver),
    )
    .expect("uploader");
    uploader.probe().expect("the store answers");
    let staging = tempfile::tempdir().unwrap();
    let mut sink = ParquetSink::staging(staging.path(), ParquetExporterConfig::default(), uploader)
        .expect("sink");
    // About 12 MiB after compression: three parts of 5 MiB at most.
    let rows: Vec<AttemptRow> = (0..1500).map(|n| bulky_row(n, 16 * 1024)).collect();
    sink.write(&rows).expect("write");
    let uploaded = sink.close().expect("every file uploaded");
    assert_eq!(uploaded.len(), 1, "{uploaded:?}");

    let bucket = server.client(BUCKET);
    let keys = bucket.keys("big");
    assert_only_table_files(&keys, "big");
    let size = bucket.get(&keys[0]).len();
    assert!(
        size > 2 * MIN_PART_BYTES,
        "a {size}-byte file is no test of parts"
    );
    let e_tag = bucket.e_tag(&keys[0]).expect("an entity tag");
    let parts: usize = e_tag
        .trim_matches('"')
        .rsplit_once('-')
        .and_then(|(_, parts)| parts.parse().ok())
        .unwrap_or_else(|| panic!("{e_tag:?} is not the tag of a multipart upload"));
    assert_eq!(parts, size.div_ceil(MIN_PART_BYTES), "{e_tag}");
    let (_, read) = bucket.read_table("big");
    assert_eq!(read.len(), rows.len());
    let reasons: HashSet<_> = read.iter().map(|r| r["decision_reason"].clone()).collect();
    assert!(rows.iter().all(|r| reasons.contains(&r.decision_reason)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto's S3 server (run by .ci/run)"]
async fn a_store_that_goes_down_refuses_once_the_backlog_is_full_and_loses_nothing() {
    let mut server = S3Server::start();
    server.create_bucket(BUCKET);
    let state = tempfile::tempdir().unwrap();
    let mut config = serve_config(&server, "s3://lake/outage", state.path());
    // Any file waiting for upload fills the budget: refusals start with the first one.
    config.exporters.parquet.object_store.max_staged_bytes = 1;
    config.exporters.parquet.max_file_age = Duration::from_millis(100);
    let collector = start(config).await.expect("start");
    let (grpc, metrics, http) = (
        collector.grpc_addr,
        collector.metrics_addr,
        collector.http_addr,
    );
    let bucket = server.client(BUCKET);

    // Store up: one export, uploaded once its file is old enough.
    export(grpc, &[0, 1, 2, 3]).await.expect("accepted");
    wait_until("the first rows are uploaded", || {
        bucket.read_table("outage").1.len() == 8
    })
    .await;
    // The server forgets everything when it stops: keep what it holds now.
    let before = bucket.read_table("outage").1;
    assert_eq!(get(metrics, "/healthz").await.0, 200);

    // Store down: accepted until a file waits for upload, refused from then on.
    server.stop();
    export(grpc, &[4])
        .await
        .expect("accepted while nothing waits");
    // The file of request 4 waits for upload (the backlog) and its upload fails (the store).
    let health = health_when(metrics, |(_, body)| {
        body.contains("object_store_backlog: ") && body.contains("object_store: ")
    })
    .await;
    assert_eq!(health.0, 503, "{health:?}");
    let refused = export(grpc, &[5])
        .await
        .expect_err("refused while the backlog is full");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    let response = reqwest::Client::new()
        .post(format!("http://{http}/v1/traces"))
        .header("content-type", "application/x-protobuf")
        .body(prost::Message::encode_to_vec(&export_request(5)))
        .send()
        .await
        .expect("POST");
    assert_eq!(response.status().as_u16(), 503);
    assert!(response.headers().contains_key("retry-after"));

    // Store back (empty, like a new bucket): uploads resume, refusals end.
    server.restart();
    server.create_bucket(BUCKET);
    health_when(metrics, |(status, _)| *status == 200).await;
    export(grpc, &[5, 6]).await.expect("accepted again");
    collector.shutdown();
    collector.wait().await.expect("clean shutdown");

    let after = bucket.read_table("outage").1;
    let all: Vec<Row> = before.into_iter().chain(after).collect();
    let (written, duplicated) = attempts(&all);
    assert!(!duplicated, "an attempt was written twice: {written:?}");
    assert_eq!(written, expected_attempts(0..7));
}

/// What `serve` logged until it listened (with its gRPC address), or until it exited.
type Started = Result<(SocketAddr, Vec<String>), Vec<String>>;

/// Starts `serve` with `args`, and reads its log until it listens or exits.
fn spawn_serve(args: &[&str], envs: &[(&'static str, String)]) -> (std::process::Child, Started) {
    let (child, grpc_addr, log) = Serve::new()
        .args(args)
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .spawn()
        .discard_log();
    (child, grpc_addr.map(|addr| (addr, log.clone())).ok_or(log))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto's S3 server (run by .ci/run)"]
async fn a_crash_right_after_an_upload_neither_loses_nor_duplicates() {
    let server = S3Server::start();
    server.create_bucket(BUCKET);
    let state = tempfile::tempdir().unwrap();
    let config_file = state.path().join("collector.toml");
    std::fs::write(
        &config_file,
        format!(
            "[exporters.parquet]\nmax_file_age = \"100ms\"\n[wal]\ndir = {:?}\n",
            state.path().join("state")
        ),
    )
    .unwrap();
    let args = [
        "--output",
        "s3://lake/crash",
        "--config",
        config_file.to_str().expect("utf-8 path"),
    ];
    let mut crashing = server.env();
    crashing.push(("RETRY_SPEND_CRASH_AT", "uploaded:1".to_owned()));
    let (mut child, listening) = spawn_serve(&args, &crashing);
    let (grpc, _) = listening.expect("listening");
    let mut acknowledged = Vec::new();
    for n in 0..200 {
        match export(grpc, &[n]).await {
            Ok(()) => acknowledged.push(n),
            Err(_) => break,
        }
    }
    let crashed = child.wait().expect("wait");
    assert!(
        !crashed.success(),
        "the collector was to abort after its first upload"
    );
    assert!(!acknowledged.is_empty());

    let (mut child, listening) = spawn_serve(&args, &server.env());
    let (_, log) = listening.expect("restarted");
    signal(&child, "TERM");
    assert!(child.wait().expect("wait").success());
    // The uploaded file's records were still in the log, its staged copy gone: its rows were
    // read back from the store.
    let already_written: usize = log
        .iter()
        .find(|line| line.contains("replaying the write-ahead log"))
        .and_then(|line| line.split("already_written=").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no replay after the crash: {log:?}"));
    assert!(already_written >= 2, "{log:?}");
    let bucket = server.client(BUCKET);
    let (written, duplicated) = attempts(&bucket.read_table("crash").1);
    assert!(!duplicated, "an attempt was written twice");
    let acknowledged = expected_attempts(acknowledged.iter().copied());
    assert!(
        acknowledged.is_subset(&written),
        "acknowledged attempts are missing: {:?}",
        acknowledged.difference(&written).collect::<Vec<_>>()
    );
    // The export in flight at the crash may be logged without its answer having arrived.
    let sent = expected_attempts(0..=acknowledged.len() / 2);
    assert!(written.is_subset(&sent), "{written:?}");
}

#[test]
#[ignore = "needs moto's S3 server (run by .ci/run)"]
fn bad_credentials_fail_at_start_and_nothing_is_accepted() {
    // The bucket is made by the one unauthenticated request; every later one needs known keys.
    let server = S3Server::start_with_auth(Some(1));
    server.create_bucket(BUCKET);
    let state = tempfile::tempdir().unwrap();
    let mut env = server.env();
    for (key, value) in &mut env {
        if *key == "AWS_SECRET_ACCESS_KEY" || *key == "AWS_ACCESS_KEY_ID" {
            *value = "not-a-known-key".into();
        }
    }
    let config_file = state.path().join("collector.toml");
    std::fs::write(
        &config_file,
        format!("[wal]\ndir = {:?}\n", state.path().join("state")),
    )
    .unwrap();
    let (mut child, listening) = spawn_serve(
        &[
            "--output",
            "s3://lake/creds",
            "--config",
            config_file.to_str().expect("utf-8 path"),
        ],
        &env,
    );
    let Err(log) = listening else {
        let _ = child.kill();
        panic!("the collector listened with keys the store refuses");
    };
    let status = child.wait().expect("wait");
    let log = log.join("\n");
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(
        log.contains("cannot use the object store output s3://lake/creds")
            && log.contains("InvalidAccessKeyId")
            && log.contains("credentials"),
        "{log}"
    );

    let replay = Replay::example()
        .output("s3://lake/creds")
        .arg("--staging")
        .arg(state.path().join("replay"))
        .envs(env)
        .run();
    let stderr = replay.stderr();
    assert_eq!(replay.code(), Some(2), "{stderr}");
    assert!(stderr.contains("InvalidAccessKeyId"), "{stderr}");
    assert!(
        common::parquet_files(&state.path().join("replay")).is_empty(),
        "nothing is evaluated before the store answers"
    );
}

#[test]
fn an_output_with_an_unknown_scheme_or_no_wal_dir_is_refused_at_start() {
    let cwd = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let output = binary()
            .current_dir(cwd.path())
            .args(args)
            .env_remove("RETRY_SPEND_OUTPUT_DIR")
            .output()
            .expect("run");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    for output in ["ftp://x/y", "s3:bucket/prefix", "s3:"] {
        for command in ["serve", "replay"] {
            let mut args = vec![command, "--pricing", PRICING, "--output", output];
            if command == "replay" {
                args.push(EXAMPLE);
            }
            let (code, stderr) = run(&args);
            assert_eq!(code, Some(2), "{command} --output {output}: {stderr}");
            assert!(stderr.contains(&format!("{output:?}")), "{stderr}");
            assert!(stderr.contains("s3://bucket/prefix"), "{stderr}");
        }
    }
    let (code, stderr) = run(&["serve", "--pricing", PRICING, "--output", "s3://lake/x"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("wal.dir: must be set"), "{stderr}");
    let left: Vec<PathBuf> = std::fs::read_dir(cwd.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "a refused output left {left:?}");
}

/// How [`StubStore`] answers uploads.
#[derive(Clone, Copy)]
enum PutAnswer {
    /// This status, with an S3 error body.
    Status(u16, &'static str),
    /// No answer: the request is held open, and the test told that it arrived.
    Hang,
}

/// An S3 endpoint that lists an empty bucket (so `replay`'s start-up check passes) and answers
/// every upload as told: the failures moto cannot be made to give on demand.
struct StubStore {
    port: u16,
    puts: std::sync::mpsc::Receiver<String>,
}

impl StubStore {
    fn start(answer: PutAnswer) -> StubStore {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("address").port();
        let (told, puts) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut request_line = String::new();
                if reader.read_line(&mut request_line).is_err() {
                    continue;
                }
                let mut length = 0;
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).is_err() || header.trim().is_empty() {
                        break;
                    }
                    if let Some((name, value)) = header.split_once(':') {
                        if name.eq_ignore_ascii_case("content-length") {
                            length = value.trim().parse().unwrap_or(0);
                        }
                    }
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                let (status, reason, body) = match (request_line.starts_with("PUT "), answer) {
                    (false, _) => (200, "OK", "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>lake</Name><KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated></ListBucketResult>".to_owned()),
                    (true, PutAnswer::Status(status, code)) => (status, code, format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>stub</Message></Error>")),
                    (true, PutAnswer::Hang) => {
                        let _ = told.send(request_line);
                        held.push(stream);
                        continue;
                    }
                };
                if request_line.starts_with("PUT ") {
                    let _ = told.send(request_line);
                }
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        StubStore { port, puts }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", "stub".to_owned()),
            ("AWS_SECRET_ACCESS_KEY", "stub".to_owned()),
            ("AWS_REGION", "us-east-1".to_owned()),
            (
                "AWS_ENDPOINT_URL",
                format!("http://127.0.0.1:{}", self.port),
            ),
            ("AWS_ALLOW_HTTP", "true".to_owned()),
        ]
    }
}

/// `replay` of the example to `output` with `args` added, staging under `staging`.
fn replay_to(
    output: &str,
    staging: &Path,
    args: &[&str],
    envs: Vec<(&'static str, String)>,
) -> Replay {
    Replay::example()
        .output(output)
        .arg("--staging")
        .arg(staging)
        .args(args)
        .envs(envs)
}

/// Runs `replay` to its end: its exit code and standard error.
fn ended(replay: Replay) -> (Option<i32>, String) {
    let replayed = replay.run();
    (replayed.code(), replayed.stderr())
}

#[test]
#[ignore = "needs moto's S3 server (run by .ci/run)"]
fn a_missing_bucket_ends_replay_with_exit_code_2_and_the_stores_answer() {
    let server = S3Server::start();
    let state = tempfile::tempdir().unwrap();
    let staging = state.path().join("staging");
    let (code, stderr) = ended(replay_to(
        "s3://no-such-bucket/llm",
        &staging,
        &[],
        server.env(),
    ));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot use the object store output s3://no-such-bucket/llm")
            && stderr.contains("404")
            && stderr.contains("NoSuchBucket"),
        "{stderr}"
    );
    assert!(!staging.exists(), "the staging directory it made is gone");
}

#[test]
#[ignore = "needs moto's S3 server (run by .ci/run)"]
fn an_upload_the_store_refuses_ends_replay_at_once_naming_the_object_and_status() {
    // Two requests pass unauthenticated (the bucket's creation and the start-up check); the
    // upload that follows, with keys the store does not know, is refused: 403.
    let server = S3Server::start_with_auth(Some(2));
    server.create_bucket(BUCKET);
    let mut env = server.env();
    for (key, value) in &mut env {
        if *key == "AWS_ACCESS_KEY_ID" {
            *value = "not-a-known-key".into();
        }
    }
    let state = tempfile::tempdir().unwrap();
    let staging = state.path().join("staging");
    let (code, stderr) = ended(replay_to("s3://lake/refused", &staging, &[], env));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("to s3://lake/refused/attempts/date=2026-08-25/part-")
            && stderr.contains("HTTP 403, which retrying cannot change"),
        "{stderr}"
    );
    assert!(!stderr.contains("retrying in"), "no retry: {stderr}");
    assert!(!staging.exists(), "the staging directory it made is gone");
}

#[test]
fn a_bad_request_ends_replay_at_once_and_leaves_an_existing_staging_dir_as_it_was() {
    let store = StubStore::start(PutAnswer::Status(400, "InvalidRequest"));
    let staging = tempfile::tempdir().unwrap();
    let theirs = staging
        .path()
        .join("attempts/date=2026-08-25/part-other-1-000000.parquet");
    std::fs::create_dir_all(theirs.parent().unwrap()).unwrap();
    std::fs::write(&theirs, b"another run's file").unwrap();
    let (code, stderr) = ended(replay_to("s3://lake/bad", staging.path(), &[], store.env()));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("to s3://lake/bad/attempts/date=2026-08-25/part-")
            && stderr.contains("HTTP 400, which retrying cannot change")
            && stderr.contains("InvalidRequest"),
        "{stderr}"
    );
    assert_eq!(store.puts.try_iter().count(), 1, "one try");
    let left: Vec<PathBuf> = common::parquet_files(staging.path());
    assert_eq!(left, vec![theirs], "only this replay's files are removed");
}

#[test]
fn a_store_that_answers_503_forever_ends_replay_once_its_retries_are_spent() {
    let store = StubStore::start(PutAnswer::Status(503, "ServiceUnavailable"));
    let state = tempfile::tempdir().unwrap();
    let staging = state.path().join("staging");
    let (code, stderr) = ended(replay_to(
        "s3://lake/down",
        &staging,
        &["--upload-retries", "1"],
        store.env(),
    ));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("to s3://lake/down/attempts/date=2026-08-25/part-")
            && stderr.contains("HTTP 503, still failing after 1 retry (the retry budget)"),
        "{stderr}"
    );
    assert_eq!(stderr.matches("retrying in").count(), 1, "{stderr}");
    assert!(!staging.exists(), "the staging directory it made is gone");
}

#[test]
fn sigterm_during_an_upload_removes_the_staging_dir_and_exits_143() {
    let store = StubStore::start(PutAnswer::Hang);
    let state = tempfile::tempdir().unwrap();
    let staging = state.path().join("staging");
    let running = replay_to("s3://lake/stopped", &staging, &[], store.env()).spawn();
    // The upload has begun: its request reached the store, which never answers.
    let put = store.puts.recv_timeout(DEADLINE).expect("an upload");
    assert!(put.starts_with("PUT /lake/stopped/attempts/"), "{put}");
    assert!(
        !common::parquet_files(&staging).is_empty(),
        "the file being uploaded is staged"
    );
    signal(&running.child, "TERM");
    let replayed = running.wait();
    let stderr = replayed.stderr();
    assert_eq!(replayed.code(), Some(143), "{stderr}");
    assert!(stderr.contains("replay stopped by SIGTERM"), "{stderr}");
    assert!(!staging.exists(), "the staging directory is gone");
}

//! `pricing import` and `pricing fetch` as a user runs them: the real binary, a feed on disk or
//! served on 127.0.0.1, and `pricing check` on what they wrote.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output};

use sha2::{Digest, Sha256};

const FEEDS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/feeds");
const AIWAVE_FILE: &str = "2026-08-22-a42d372ccf0b5dd13ecf71203521f9d2.json";

fn run(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_retry-spend-collector"));
    command.args(args).env_remove("RETRY_SPEND_PRICING_DIR");
    // The fetch goes to 127.0.0.1 directly, whatever proxy the machine sets.
    for proxy in [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        command.env_remove(proxy);
    }
    command.output().expect("run retry-spend-collector")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn feed(name: &str) -> String {
    format!("{FEEDS}/{name}")
}

fn sha256_hex(path: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(path).unwrap()))
}

/// `pricing import --format FORMAT --checked-at 2026-08-22 --out OUT FILE`.
fn import(format: &str, out: &Path, file: &str) -> Output {
    let out = out.to_str().unwrap();
    run(&[
        "pricing",
        "import",
        "--format",
        format,
        "--checked-at",
        "2026-08-22",
        "--out",
        out,
        file,
    ])
}

fn pricing_check(dir: &Path) -> Output {
    run(&["pricing", "check", dir.to_str().unwrap()])
}

#[test]
fn import_writes_a_snapshot_that_pricing_check_accepts() {
    let out = tempfile::tempdir().unwrap();
    let file = feed("new-api.json");
    let result = import("new-api", out.path(), &file);
    assert!(result.status.success(), "{}", stderr(&result));
    let path = out.path().join(AIWAVE_FILE);
    let printed = stdout(&result);
    assert!(
        printed.starts_with(&format!("wrote {}", path.display())),
        "{printed}"
    );
    for expected in [
        "version a42d372ccf0b5dd13ecf71203521f9d2".to_owned(),
        "checked 2026-08-22".to_owned(),
        format!("source {file}"),
        "7 models".to_owned(),
        format!("sha256 {}", sha256_hex(&path)),
        "rounded to 10 decimal places: deepseek-v4-flash (cached_input)".to_owned(),
        "left out: mj_imagine: priced per call".to_owned(),
    ] {
        assert!(printed.contains(&expected), "{expected:?} in {printed}");
    }

    let check = pricing_check(out.path());
    assert!(check.status.success(), "{}", stderr(&check));
    assert!(stdout(&check).contains(
        "deepseek-v4-flash  family deepseek  input 0.319  output 0.957  cached_input 0.0318"
    ));

    // The same feed again: nothing to do, and that is success.
    let again = import("new-api", out.path(), &file);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(
        stdout(&again).starts_with("unchanged"),
        "{}",
        stdout(&again)
    );
}

#[test]
fn import_refuses_to_replace_a_different_snapshot_of_the_same_version_and_date() {
    let out = tempfile::tempdir().unwrap();
    let first = import("new-api", out.path(), &feed("new-api.json"));
    assert!(first.status.success(), "{}", stderr(&first));
    let before = std::fs::read(out.path().join(AIWAVE_FILE)).unwrap();

    // The gateway changed a price but not its pricing_version.
    let changed = out.path().join("changed-feed.txt");
    let text = std::fs::read_to_string(feed("new-api.json")).unwrap();
    std::fs::write(&changed, text.replace("0.1595", "0.16")).unwrap();
    let second = import("new-api", out.path(), changed.to_str().unwrap());
    assert!(!second.status.success());
    assert!(
        stderr(&second).contains("refusing to write"),
        "{}",
        stderr(&second)
    );
    assert_eq!(std::fs::read(out.path().join(AIWAVE_FILE)).unwrap(), before);
}

#[test]
fn import_writes_into_the_pricing_directory_by_default() {
    let out = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_retry-spend-collector"));
    let result = command
        .args([
            "pricing",
            "import",
            "--format",
            "litellm",
            "--version",
            "litellm-1",
        ])
        .args(["--checked-at", "2026-08-22", "--source", "litellm main"])
        .arg(feed("litellm.json"))
        .env("RETRY_SPEND_PRICING_DIR", out.path())
        .output()
        .unwrap();
    assert!(result.status.success(), "{}", stderr(&result));
    let path = out.path().join("2026-08-22-litellm-1.json");
    let snapshot: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(snapshot["pricing_source"], "litellm main");
    assert_eq!(snapshot["models"]["gpt-4o"]["input"], "2.5");
    assert!(stdout(&result).contains("left out: perplexity/pplx-online-preview: priced per call"));
}

/// Serves `body` at `/api/pricing` and a 503 at `/down` on 127.0.0.1, for the test's lifetime.
fn serve(body: Vec<u8>) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let app = axum::Router::new()
                .route(
                    "/api/pricing",
                    axum::routing::get(move || async move { body }),
                )
                .route(
                    "/down",
                    axum::routing::get(|| async {
                        (
                            http::StatusCode::SERVICE_UNAVAILABLE,
                            "upstream unavailable",
                        )
                    }),
                );
            axum::serve(listener, app).await.unwrap();
        });
    });
    addr
}

#[test]
fn fetch_downloads_a_feed_into_a_snapshot() {
    let body = std::fs::read(feed("openrouter.json")).unwrap();
    let addr = serve(body.clone());
    let url = format!("http://{addr}/api/pricing");
    let out = tempfile::tempdir().unwrap();
    let result = run(&[
        "pricing",
        "fetch",
        "--format",
        "openrouter",
        "--checked-at",
        "2026-08-22",
        "--timeout",
        "30s",
        "--out",
        out.path().to_str().unwrap(),
        &url,
    ]);
    assert!(result.status.success(), "{}", stderr(&result));

    // No version in an OpenRouter feed: the downloaded bytes' digest names it.
    let version = &hex::encode(Sha256::digest(&body))[..32];
    let path = out.path().join(format!("2026-08-22-{version}.json"));
    let printed = stdout(&result);
    assert!(printed.contains(&format!("source {url}")), "{printed}");
    assert!(
        printed.contains(&format!("sha256 {}", sha256_hex(&path))),
        "{printed}"
    );
    assert!(
        printed.contains("left out: perplexity/sonar: priced per call"),
        "{printed}"
    );
    let check = pricing_check(out.path());
    assert!(check.status.success(), "{}", stderr(&check));
    assert!(stdout(&check).contains(&format!("source {url}")));
}

#[test]
fn fetch_of_a_non_2xx_answer_is_a_clear_error_and_writes_nothing() {
    let addr = serve(Vec::new());
    let url = format!("http://{addr}/down");
    let out = tempfile::tempdir().unwrap();
    let result = run(&[
        "pricing",
        "fetch",
        "--format",
        "new-api",
        "--out",
        out.path().to_str().unwrap(),
        &url,
    ]);
    assert!(!result.status.success());
    let message = stderr(&result);
    assert!(
        message.contains(&format!(
            "{url}: the server answered HTTP 503 Service Unavailable"
        )),
        "{message}"
    );
    assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);
}

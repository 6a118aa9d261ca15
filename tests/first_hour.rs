//! A new user's first hour (issue 17): what start-up says about the rate card, defaults that
//! are relative to the current directory, errors said once, nothing left behind by a failed run.

mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::child::{signal, PRICING};

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/retries.jsonl");
const SHIPPED_SNAPSHOT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/config/pricing/2026-08-22-aiwave.json"
);
const SHIPPED_VERSION: &str = "a42d372ccf0b5dd13ecf71203521f9d2";

/// The binary with none of our environment variables, so a developer's shell cannot change
/// what a test sees.
fn binary() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_retry-spend-collector"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("RETRY_SPEND_") {
            command.env_remove(key);
        }
    }
    command.env("RUST_LOG", "info");
    command
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn today() -> chrono::NaiveDate {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    chrono::DateTime::from_timestamp(secs as i64, 0)
        .unwrap()
        .date_naive()
}

/// A pricing directory holding the shipped snapshot checked on `checked_at` instead.
fn pricing_checked_at(checked_at: chrono::NaiveDate) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(SHIPPED_SNAPSHOT).unwrap();
    let text = text.replace(
        "\"pricing_checked_at\": \"2026-08-22\"",
        &format!("\"pricing_checked_at\": \"{checked_at}\""),
    );
    assert!(text.contains(&checked_at.to_string()));
    std::fs::write(dir.path().join("snapshot.json"), text).unwrap();
    dir
}

/// What `serve` on ephemeral ports, writing to `output`, logged until it listened; then it is
/// stopped.
fn serve_log(output: &Path, args: &[&str], envs: &[(&str, &str)]) -> String {
    let mut child = binary()
        .args([
            "serve",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
        ])
        .args(["--metrics-addr", "127.0.0.1:0", "--output"])
        .arg(output)
        .args(args)
        .envs(envs.iter().copied())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = Vec::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        let listening = line.contains("grpc_addr=");
        log.push(line);
        if listening {
            signal(&child, "TERM");
        }
    }
    let log = log.join("\n");
    assert!(child.wait().unwrap().success(), "{log}");
    log
}

fn assert_stale_warning(log: &str, checked_at: chrono::NaiveDate) {
    let age = (today() - checked_at).num_days();
    for part in [
        format!("version {SHIPPED_VERSION} checked {checked_at}"),
        format!("is {age} days old"),
        "max_pricing_age_days = 30".to_owned(),
        "pricing fetch".to_owned(),
        "pricing import".to_owned(),
    ] {
        assert!(log.contains(&part), "{part:?} missing from:\n{log}");
    }
}

#[test]
fn serve_warns_at_start_when_the_newest_snapshot_is_older_than_max_pricing_age_days() {
    let old = today() - chrono::Days::new(45);
    let pricing = pricing_checked_at(old);
    let out = tempfile::tempdir().unwrap();
    let pricing_arg = pricing.path().to_str().unwrap();
    let log = serve_log(out.path(), &["--pricing", pricing_arg], &[]);
    assert_stale_warning(&log, old);

    let fresh = pricing_checked_at(today() - chrono::Days::new(3));
    let out = tempfile::tempdir().unwrap();
    let log = serve_log(
        out.path(),
        &["--pricing", fresh.path().to_str().unwrap()],
        &[],
    );
    assert!(!log.contains("days old"), "{log}");
}

#[test]
fn replay_warns_at_start_when_the_newest_snapshot_is_older_than_max_pricing_age_days() {
    let old = today() - chrono::Days::new(45);
    let pricing = pricing_checked_at(old);
    let out = tempfile::tempdir().unwrap();
    let replay = |max_age: &str| {
        binary()
            .arg("replay")
            .arg("--pricing")
            .arg(pricing.path())
            .args(["--max-pricing-age-days", max_age, "--output"])
            .arg(out.path())
            .arg(EXAMPLE)
            .output()
            .unwrap()
    };
    let result = replay("30");
    assert!(result.status.success(), "{}", stderr(&result));
    assert_stale_warning(&stderr(&result), old);

    let result = replay("60");
    assert!(result.status.success(), "{}", stderr(&result));
    assert!(!stderr(&result).contains("days old"), "{}", stderr(&result));
}

#[test]
fn policy_check_without_a_directory_on_a_fresh_clone_says_there_are_no_policies() {
    let cwd = tempfile::tempdir().unwrap();
    let result = binary()
        .args(["policy", "check"])
        .current_dir(cwd.path())
        .output()
        .unwrap();
    assert!(result.status.success(), "{}", stderr(&result));
    let out = stdout(&result);
    assert!(out.contains("no envelope policies"), "{out}");
    assert!(
        out.contains(&cwd.path().join("config/policies").display().to_string()),
        "{out}"
    );

    let named = binary()
        .args(["policy", "check", "config/policies"])
        .current_dir(cwd.path())
        .output()
        .unwrap();
    assert!(!named.status.success(), "a named directory must exist");
    assert!(
        stderr(&named).contains("config/policies"),
        "{}",
        stderr(&named)
    );
}

#[test]
fn an_object_store_output_without_a_wal_dir_names_the_flag_the_variable_and_the_key() {
    let out = tempfile::tempdir().unwrap();
    let result = binary()
        .args([
            "serve",
            "--output",
            "s3://bucket/prefix",
            "--pricing",
            PRICING,
        ])
        .current_dir(out.path())
        .output()
        .unwrap();
    assert!(!result.status.success());
    let err = stderr(&result);
    for part in [
        "wal.dir",
        "--wal-dir DIR",
        "RETRY_SPEND_WAL_DIR",
        "[wal] dir",
    ] {
        assert!(err.contains(part), "{part:?} missing from {err}");
    }
}

#[test]
fn wal_dir_flag_and_variable_move_the_write_ahead_log() {
    for by_variable in [false, true] {
        let out = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let wal = state.path().join("wal");
        let wal_text = wal.to_str().unwrap();
        let pricing = ["--pricing", PRICING];
        let log = if by_variable {
            serve_log(out.path(), &pricing, &[("RETRY_SPEND_WAL_DIR", wal_text)])
        } else {
            serve_log(
                out.path(),
                &[&pricing[..], &["--wal-dir", wal_text]].concat(),
                &[],
            )
        };
        assert!(wal.is_dir(), "no log in {wal_text}:\n{log}");
        assert!(!out.path().join("wal").exists(), "{log}");
    }
}

#[test]
fn a_missing_default_directory_is_named_absolute_with_how_to_point_elsewhere() {
    let cwd = tempfile::tempdir().unwrap();
    let looked_for = cwd.path().join("config/pricing").display().to_string();

    let replay = binary()
        .args(["replay", EXAMPLE])
        .current_dir(cwd.path())
        .output()
        .unwrap();
    assert!(!replay.status.success());
    let err = stderr(&replay);
    for part in [
        looked_for.as_str(),
        "--pricing DIR",
        "RETRY_SPEND_PRICING_DIR",
    ] {
        assert!(err.contains(part), "{part:?} missing from {err}");
    }

    let serve = binary()
        .args([
            "serve",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
        ])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .current_dir(cwd.path())
        .output()
        .unwrap();
    assert!(!serve.status.success());
    let err = stderr(&serve);
    for part in [
        looked_for.as_str(),
        "--pricing DIR",
        "RETRY_SPEND_PRICING_DIR",
        "processors.retry_spend.pricing_dir",
        // The config file is a default too: its absence is said, not an error.
        &cwd.path()
            .join("config/collector.toml")
            .display()
            .to_string(),
        "--config FILE",
    ] {
        assert!(err.contains(part), "{part:?} missing from {err}");
    }

    let check = binary()
        .args(["pricing", "check"])
        .current_dir(cwd.path())
        .output()
        .unwrap();
    assert!(!check.status.success());
    assert!(stderr(&check).contains(&looked_for), "{}", stderr(&check));
}

/// The text the OS gives for `kind`, as Rust prints it.
fn os_error(code: i32) -> String {
    std::io::Error::from_raw_os_error(code).to_string()
}

fn assert_once(err: &str, what: &str) {
    assert_eq!(
        err.matches(what).count(),
        1,
        "{what:?} not said once in {err}"
    );
}

#[test]
fn an_os_error_is_said_once() {
    const ENOENT: i32 = 2;
    const ENOTDIR: i32 = 20;
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.jsonl");
    let replay = binary()
        .args(["replay", "--pricing", PRICING, "--output"])
        .arg(dir.path().join("out"))
        .arg(&missing)
        .output()
        .unwrap();
    assert!(!replay.status.success());
    let err = stderr(&replay);
    assert!(err.contains("nope.jsonl"), "{err}");
    assert_once(&err, &os_error(ENOENT));

    let config = binary()
        .args(["serve", "--config"])
        .arg(dir.path().join("nope.toml"))
        .output()
        .unwrap();
    assert!(!config.status.success());
    let err = stderr(&config);
    assert!(err.contains("nope.toml"), "{err}");
    assert_once(&err, &os_error(ENOENT));

    // An output that is a plain file: its attempts/ cannot be made.
    let file = dir.path().join("plain-file");
    std::fs::write(&file, b"").unwrap();
    let output = binary()
        .args(["replay", "--pricing", PRICING, "--output"])
        .arg(&file)
        .arg(EXAMPLE)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let err = stderr(&output);
    assert!(err.contains("plain-file"), "{err}");
    assert_once(&err, &os_error(ENOTDIR));
}

#[test]
fn a_replay_of_a_missing_input_leaves_no_output_behind() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("data");
    let result = binary()
        .args(["replay", "--pricing", PRICING, "--output"])
        .arg(&out)
        .arg(dir.path().join("nope.jsonl"))
        .output()
        .unwrap();
    assert!(!result.status.success());
    assert!(!out.exists(), "{} was left behind", out.display());
}

#[test]
fn a_serve_that_cannot_listen_leaves_no_output_behind() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out: PathBuf = dir.path().join("data");
    let result = binary()
        .args(["serve", "--grpc-addr", &port, "--http-addr", "127.0.0.1:0"])
        .args(["--metrics-addr", "127.0.0.1:0", "--pricing", PRICING])
        .arg("--output")
        .arg(&out)
        .output()
        .unwrap();
    assert!(!result.status.success());
    assert!(stderr(&result).contains(&port), "{}", stderr(&result));
    assert!(
        !out.join("attempts").exists(),
        "an empty attempts/ was left behind"
    );
    assert!(!out.exists(), "{} was left behind", out.display());
}

//! A new user's first hour (issue 17): what start-up says about the rate card, defaults that
//! are relative to the current directory, errors said once, nothing left behind by a failed run.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};

use common::child::{binary, stderr, stdout, Serve, PRICING};
use common::collector::EXAMPLE;
use common::replay::Replay;

const SHIPPED_SNAPSHOT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/config/pricing/2026-08-22-aiwave.json"
);
const SHIPPED_VERSION: &str = "a42d372ccf0b5dd13ecf71203521f9d2";

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

/// What `serve` on ephemeral ports, writing to `output` with the snapshots of `pricing`, logged
/// until it listened; then it is stopped.
fn serve_log(output: &Path, pricing: &Path) -> String {
    Serve::new()
        .output(output)
        .pricing(pricing)
        .spawn()
        .terminate()
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
    let log = serve_log(out.path(), pricing.path());
    assert_stale_warning(&log, old);

    let fresh = pricing_checked_at(today() - chrono::Days::new(3));
    let out = tempfile::tempdir().unwrap();
    let log = serve_log(out.path(), fresh.path());
    assert!(!log.contains("days old"), "{log}");
}

#[test]
fn replay_warns_at_start_when_the_newest_snapshot_is_older_than_max_pricing_age_days() {
    let old = today() - chrono::Days::new(45);
    let pricing = pricing_checked_at(old);
    let replay = |max_age: &str| {
        Replay::example()
            .pricing(pricing.path())
            .args(["--max-pricing-age-days", max_age])
            .run()
            .ok()
            .stderr()
    };
    assert_stale_warning(&replay("30"), old);
    let log = replay("60");
    assert!(!log.contains("days old"), "{log}");
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
        let serve = Serve::new().output(out.path());
        let serve = if by_variable {
            serve.envs([("RETRY_SPEND_WAL_DIR", wal_text)])
        } else {
            serve.args(["--wal-dir", wal_text])
        };
        let log = serve.spawn().terminate();
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
    let replay = Replay::new()
        .input(&missing)
        .output(dir.path().join("out"))
        .run();
    assert!(!replay.success());
    let err = replay.stderr();
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
    let output = Replay::example().output(&file).run();
    assert!(!output.success());
    let err = output.stderr();
    assert!(err.contains("plain-file"), "{err}");
    assert_once(&err, &os_error(ENOTDIR));
}

#[test]
fn a_replay_of_a_missing_input_leaves_no_output_behind() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("data");
    let result = Replay::new()
        .input(dir.path().join("nope.jsonl"))
        .output(&out)
        .run();
    assert!(!result.success());
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

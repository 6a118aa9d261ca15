//! End to end: `replay` writes Parquet, `report` adds it up, and DuckDB (the Python package,
//! which `.ci/run` installs) computes the same figures from the same files with SQL written from
//! the definitions in README.md. Also: the report over moto's S3 server, and a closed stdout.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::child::{binary, succeeded};
use common::collector::EXAMPLE;
use common::replay::Replay;
use common::s3::S3Server;
use rust_decimal::Decimal;
use serde_json::Value;

const BUCKET: &str = "lake";

fn report(location: &str, args: &[&str], envs: &[(&str, String)]) -> String {
    let result = binary()
        .arg("report")
        .arg(location)
        .args(args)
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("run report");
    succeeded("report", &result)
}

fn report_json(location: &str, top: usize) -> Value {
    let text = report(
        location,
        &["--format", "json", "--top", &top.to_string()],
        &[],
    );
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("report JSON: {e}: {text}"))
}

/// Runs `sql` in DuckDB and returns its rows as JSON objects (decimals as strings). Fails, never
/// skips, when DuckDB is missing: these tests are the check that the report's numbers are right.
fn duckdb(sql: &str) -> Vec<serde_json::Map<String, Value>> {
    const SCRIPT: &str = r#"
import decimal, json, sys
try:
    import duckdb
except ImportError as e:
    sys.stderr.write(f"{e}\n")
    sys.exit(3)
relation = duckdb.sql(sys.argv[1])
rows = [
    dict(zip(relation.columns, [str(v) if isinstance(v, decimal.Decimal) else v for v in row]))
    for row in relation.fetchall()
]
print(json.dumps(rows))
"#;
    let python = common::python::program();
    let result = common::python::python()
        .args(["-c", SCRIPT, sql])
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {python} ({e}): the report tests check their numbers with DuckDB's Python package")
        });
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_ne!(
        result.status.code(),
        Some(3),
        "the report tests need DuckDB to check the report's numbers: {python} lacks it: {stderr}\
         Install it, or set {} to a python that has it (.ci/run makes a virtual environment \
         with it).",
        common::python::PYTHON_ENV
    );
    assert!(
        result.status.success(),
        "DuckDB query failed: {stderr}\n{sql}"
    );
    serde_json::from_slice(&result.stdout).expect("DuckDB rows as JSON")
}

/// The rows of every Parquet file under `table`, as the report counts them: of the rows with
/// one (trace_id, span_id), those of the file modified last (then: the greatest name) only.
fn table_sql(table: &Path) -> String {
    let files = format!("'{}/**/*.parquet'", table.display());
    format!(
        "(WITH files AS (
             SELECT filename, row_number() OVER (ORDER BY last_modified DESC, filename DESC) AS file_rank
             FROM read_blob({files})),
         all_rows AS (
             SELECT * FROM read_parquet({files}, hive_partitioning = false, filename = true)
             JOIN files USING (filename)),
         keeper AS (
             SELECT trace_id, span_id, min(file_rank) AS file_rank FROM all_rows GROUP BY trace_id, span_id)
         SELECT * FROM all_rows SEMI JOIN keeper USING (trace_id, span_id, file_rank))"
    )
}

/// Rows of every file under `table` that [`table_sql`] leaves out.
fn left_out_sql(table: &Path) -> String {
    format!(
        "SELECT (SELECT count(*) FROM read_parquet('{}/**/*.parquet')) - (SELECT count(*) FROM {}) AS left_out",
        table.display(),
        table_sql(table)
    )
}

/// The report's figures, written once for a group of rows; shares in basis points, rounded half
/// up with integer arithmetic (counts are never negative), so no float is involved.
const FIGURES: &str = "
    count(*) AS attempts,
    coalesce(sum(estimated_incremental_usd) FILTER (WHERE attempt_index > 0), 0) AS incremental_usd,
    coalesce(sum(estimated_incremental_usd) FILTER (WHERE attempt_index > 0 AND decision = 'over_envelope'), 0) AS over_envelope_usd,
    count(*) FILTER (WHERE attempt_index > 0 AND estimated_incremental_usd IS NULL) AS unpriced_retries,
    count(*) FILTER (WHERE NOT audited) AS unaudited,
    (count(*) FILTER (WHERE NOT audited) * 20000 + count(*)) // (2 * count(*)) AS unaudited_share";

fn groups_sql(table: &Path) -> String {
    format!(
        "SELECT strftime(event_time AT TIME ZONE 'UTC', '%Y-%m') AS month, task_type, spend_class, {FIGURES}
         FROM {} GROUP BY month, task_type, spend_class
         ORDER BY month, task_type NULLS FIRST,
             list_position(['base', 'retry', 'fallback', 'drift', 'unknown'], spend_class)",
        table_sql(table)
    )
}

fn total_sql(table: &Path) -> String {
    format!("SELECT {FIGURES} FROM {}", table_sql(table))
}

fn top_sql(table: &Path, top: usize) -> String {
    let first = "(attempt_index, event_time, span_id)";
    format!(
        "SELECT request_id, trace_id,
             arg_min_null(service_name, {first}) AS service_name,
             arg_min_null(task_type, {first}) AS task_type,
             strftime(min(event_time) AT TIME ZONE 'UTC', '%Y-%m-%dT%H:%M:%SZ') AS started,
             count(*) AS attempts,
             count(*) FILTER (WHERE attempt_index > 0) AS retries,
             {FIGURES}
         FROM {} GROUP BY trace_id, request_id
         HAVING count(*) FILTER (WHERE attempt_index > 0) > 0
         ORDER BY incremental_usd DESC, trace_id, request_id",
        table_sql(table)
    ) + &format!(" LIMIT {top}")
}

/// A value as both sides can compare it: money normalised, basis points as a 4-place share.
fn cell(name: &str, value: &Value) -> String {
    match value {
        Value::Null => "NULL".to_owned(),
        Value::String(s) if name.ends_with("_usd") => s
            .parse::<Decimal>()
            .map(|d| d.normalize().to_string())
            .unwrap_or_else(|e| panic!("{name} = {s:?}: {e}")),
        Value::Number(n) if name == "unaudited_share" => {
            let bp = n.as_u64().expect("basis points");
            format!("{}.{:04}", bp / 10_000, bp % 10_000)
        }
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `columns` of each object, rendered by [`cell`].
fn cells(objects: &[&serde_json::Map<String, Value>], columns: &[&str]) -> Vec<Vec<String>> {
    objects
        .iter()
        .map(|o| {
            columns
                .iter()
                .map(|c| cell(c, o.get(*c).unwrap_or(&Value::Null)))
                .collect()
        })
        .collect()
}

fn objects(value: &Value) -> Vec<&serde_json::Map<String, Value>> {
    value
        .as_array()
        .expect("an array")
        .iter()
        .map(|v| v.as_object().expect("an object"))
        .collect()
}

const GROUP_COLUMNS: &[&str] = &[
    "month",
    "task_type",
    "spend_class",
    "attempts",
    "incremental_usd",
    "over_envelope_usd",
    "unpriced_retries",
    "unaudited",
    "unaudited_share",
];

const TOTAL_COLUMNS: &[&str] = &[
    "attempts",
    "incremental_usd",
    "over_envelope_usd",
    "unpriced_retries",
    "unaudited",
    "unaudited_share",
];

const REQUEST_COLUMNS: &[&str] = &[
    "request_id",
    "trace_id",
    "service_name",
    "task_type",
    "started",
    "attempts",
    "retries",
    "incremental_usd",
    "over_envelope_usd",
    "unpriced_retries",
    "unaudited",
];

/// The report of `output` equals DuckDB's figures over the same files, line for line.
fn assert_report_matches_duckdb(output: &Path, top: usize) -> Value {
    let json = report_json(&output.display().to_string(), top);
    let table = output.join("attempts");

    let expected = duckdb(&groups_sql(&table));
    assert!(!expected.is_empty(), "DuckDB found rows");
    assert_eq!(
        cells(&objects(&json["by_month"]), GROUP_COLUMNS),
        cells(&expected.iter().collect::<Vec<_>>(), GROUP_COLUMNS),
        "by month, task type and spend class"
    );

    let total = duckdb(&total_sql(&table));
    let report_total = json["total"].as_object().expect("total");
    assert_eq!(
        cells(&[report_total], TOTAL_COLUMNS),
        cells(&total.iter().collect::<Vec<_>>(), TOTAL_COLUMNS),
        "total"
    );

    let all_top = duckdb(&top_sql(&table, usize::MAX >> 1));
    assert_eq!(
        json["requests_with_retries"].as_u64(),
        Some(all_top.len() as u64),
        "requests with retries"
    );
    let top_rows: Vec<_> = all_top.iter().take(top).collect();
    assert_eq!(
        cells(&objects(&json["top_requests"]), REQUEST_COLUMNS),
        cells(&top_rows, REQUEST_COLUMNS),
        "top {top} requests"
    );

    let left_out = duckdb(&left_out_sql(&table));
    assert_eq!(
        json["duplicate_rows_left_out"].as_u64(),
        left_out[0]["left_out"].as_u64(),
        "duplicate rows left out"
    );
    json
}

/// The files of the table under `output`, any depth.
fn table_files(output: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![output.join("attempts")];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The report's JSON without what tells files apart: their count and the rows left out.
fn figures(mut json: Value) -> Value {
    let object = json.as_object_mut().expect("a JSON object");
    object.remove("files");
    object.remove("duplicate_rows_left_out");
    json
}

#[test]
#[ignore = "needs Python's duckdb (run by .ci/run)"]
fn the_example_replayed_twice_into_one_output_is_reported_once_with_the_copies_left_out() {
    let once = tempfile::tempdir().unwrap();
    Replay::example().output(once.path()).run().ok();
    let twice = tempfile::tempdir().unwrap();
    let location = twice.path().display().to_string();
    Replay::example().output(&location).run().ok();
    Replay::example().output(&location).run().ok();
    assert_eq!(table_files(twice.path()).len(), 2);

    let json = assert_report_matches_duckdb(twice.path(), 100);
    assert_eq!(json["files"], 2);
    assert_eq!(json["duplicate_rows_left_out"], 25);
    assert_eq!(json["total"]["attempts"], 25);
    assert_eq!(json["total"]["incremental_usd"], "0.124486715");
    let single = assert_report_matches_duckdb(once.path(), 100);
    assert_eq!(single["duplicate_rows_left_out"], 0);
    assert_eq!(figures(json), figures(single));

    let table = report(&location, &[], &[]);
    assert!(
        table.contains(
            "\nLeft out 25 duplicate rows: attempts (trace_id, span_id) a newer file also holds"
        ),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().take(2).eq(["total", "25"])),
        "{table}"
    );
}

/// Sets the modification time of `file` to `seconds` after the epoch.
fn set_modified(file: &Path, seconds: u64) {
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_secs(seconds);
    std::fs::File::options()
        .write(true)
        .open(file)
        .and_then(|f| f.set_modified(time))
        .unwrap_or_else(|e| panic!("set the modification time of {}: {e}", file.display()));
}

#[test]
#[ignore = "needs Python's duckdb (run by .ci/run)"]
fn of_two_replays_that_disagree_the_file_modified_last_is_reported() {
    let stale = tempfile::tempdir().unwrap();
    let fresh = tempfile::tempdir().unwrap();
    let both = tempfile::tempdir().unwrap();
    let run = |output: &Path, args: &[&str]| {
        Replay::example().output(output).args(args).run().ok();
    };
    // Pricing checked any day before the spans is stale: every retry is unaudited.
    run(stale.path(), &["--max-pricing-age-days", "0"]);
    run(fresh.path(), &[]);
    run(both.path(), &["--max-pricing-age-days", "0"]);
    run(both.path(), &[]);
    let stale_report = figures(assert_report_matches_duckdb(stale.path(), 100));
    let fresh_report = figures(assert_report_matches_duckdb(fresh.path(), 100));
    assert_ne!(stale_report, fresh_report, "the two replays disagree");

    let files = table_files(both.path());
    let [first, second] = files.as_slice() else {
        panic!("two files: {files:?}")
    };
    let (stale_file, fresh_file) = match std::fs::metadata(first).unwrap().modified().unwrap()
        < std::fs::metadata(second).unwrap().modified().unwrap()
    {
        true => (first, second),
        false => (second, first),
    };
    let json = assert_report_matches_duckdb(both.path(), 100);
    assert_eq!(json["duplicate_rows_left_out"], 25);
    assert_eq!(figures(json), fresh_report, "the later replay");

    set_modified(fresh_file, 1_800_000_000);
    set_modified(stale_file, 1_800_000_001);
    let json = assert_report_matches_duckdb(both.path(), 100);
    assert_eq!(figures(json), stale_report, "the file modified last");
}

#[test]
#[ignore = "needs Python's duckdb (run by .ci/run)"]
fn the_example_report_matches_duckdb_over_the_same_files() {
    let out = tempfile::tempdir().unwrap();
    Replay::example().output(out.path()).run().ok();
    let json = assert_report_matches_duckdb(out.path(), 100);
    // The figures README.md shows for this example.
    assert_eq!(json["total"]["attempts"], 25);
    assert_eq!(json["total"]["incremental_usd"], "0.124486715");
    assert_eq!(json["total"]["over_envelope_usd"], "0.04035");
    assert_eq!(json["total"]["unaudited_share"], "0.2000");
    assert_eq!(json["top_requests"][0]["request_id"], "req-kimi-patch");
}

/// `copies` copies of the example, each in traces of its own and started 9 days and 7 hours
/// after the previous one, so the rows spread over a year of months (and later copies meet
/// stale pricing, which makes them unaudited).
fn many_months_of_requests(dir: &Path, copies: u64) -> PathBuf {
    const STEP_NS: u64 = (9 * 24 + 7) * 3600 * 1_000_000_000;
    fn shift(value: &mut Value, copy: u64) {
        match value {
            Value::Object(map) => {
                for (key, v) in map.iter_mut() {
                    match (key.as_str(), v.as_str()) {
                        ("traceId", Some(id)) => {
                            *v = Value::String(format!("{copy:08x}{}", &id[8..]))
                        }
                        ("startTimeUnixNano" | "endTimeUnixNano", Some(ns)) => {
                            let ns: u64 = ns.parse().expect("nanoseconds");
                            *v = Value::String((ns + copy * STEP_NS).to_string());
                        }
                        _ => shift(v, copy),
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| shift(v, copy)),
            _ => {}
        }
    }
    let example = std::fs::read_to_string(EXAMPLE).unwrap();
    let mut lines = Vec::new();
    for copy in 0..copies {
        for line in example.lines().filter(|l| !l.trim().is_empty()) {
            let mut value: Value = serde_json::from_str(line).unwrap();
            shift(&mut value, copy);
            lines.push(value.to_string());
        }
    }
    let path = dir.join("many.jsonl");
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

#[test]
#[ignore = "needs Python's duckdb (run by .ci/run)"]
fn a_year_of_generated_requests_reports_what_duckdb_computes() {
    let dir = tempfile::tempdir().unwrap();
    let input = many_months_of_requests(dir.path(), 40);
    let out = tempfile::tempdir().unwrap();
    Replay::new().input(&input).output(out.path()).run().ok();
    let json = assert_report_matches_duckdb(out.path(), 25);
    assert_eq!(json["total"]["attempts"], 25 * 40);
    let months: std::collections::BTreeSet<&str> = json["by_month"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g["month"].as_str())
        .collect();
    assert!(months.len() >= 12, "{months:?}");
    assert_eq!(json["top_requests"].as_array().map(Vec::len), Some(25));
}

#[test]
fn every_format_reports_the_same_total() {
    let out = tempfile::tempdir().unwrap();
    let location = out.path().display().to_string();
    Replay::example().output(&location).run().ok();

    let table = report(&location, &[], &[]);
    let total = table
        .lines()
        .find(|l| l.starts_with("total "))
        .expect("a total line");
    let figures: Vec<&str> = total.split_whitespace().collect();
    assert_eq!(
        figures,
        ["total", "25", "0.124486715", "0.04035", "2", "5", "0.2000"]
    );
    assert_eq!(
        table.lines().filter(|l| l.starts_with("req-")).count(),
        10,
        "ten requests by default: {table}"
    );

    let csv = report(&location, &["--format", "csv", "--top", "3"], &[]);
    let (summary, top) = csv.split_once("\r\n\r\n").expect("two CSV tables");
    assert_eq!(summary.lines().count(), 1 + 15, "{summary}");
    assert_eq!(top.lines().count(), 1 + 3, "{top}");
    assert!(
        top.lines().nth(1).unwrap().starts_with("req-kimi-patch,"),
        "{top}"
    );

    let markdown = report(&location, &["--format", "markdown", "--top", "0"], &[]);
    assert!(
        markdown.contains("| **total** |  |  | 25 | 0.124486715 | 0.04035 | 2 | 5 | 0.2000 |"),
        "{markdown}"
    );
}

#[test]
fn a_foreign_file_or_an_empty_location_fails_naming_it() {
    let out = tempfile::tempdir().unwrap();
    let empty = binary().arg("report").arg(out.path()).output().unwrap();
    assert_eq!(empty.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&empty.stderr);
    assert!(stderr.contains("no Parquet files"), "{stderr}");

    let partition = out.path().join("attempts/date=2026-08-25");
    std::fs::create_dir_all(&partition).unwrap();
    let foreign = partition.join("part-other.parquet");
    std::fs::write(&foreign, b"PAR1 but not really").unwrap();
    let bad = binary().arg("report").arg(out.path()).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains(&format!("cannot read {}", foreign.display())),
        "{stderr}"
    );
}

/// A reader that has gone away (`| head`) ends the output quietly: no panic, exit 0. The pipe's
/// read end is closed before the child starts, so its first write fails, every time.
#[test]
fn a_closed_stdout_ends_replay_and_report_quietly() {
    let out = tempfile::tempdir().unwrap();
    let location = out.path().display().to_string();
    Replay::example().output(&location).run().ok();
    let closed = || {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        Stdio::from(writer)
    };
    let report = binary()
        .args(["report", &location])
        .stdout(closed())
        .stderr(Stdio::piped())
        .output()
        .expect("run report");
    let replay = Replay::example().with(move |c| {
        c.stdout(closed());
    });
    for run in [report, replay.run().output] {
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(run.status.success(), "{}: {stderr}", run.status);
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
#[ignore = "needs moto's S3 server (run by .ci/run)"]
fn report_reads_an_object_store_prefix_like_a_directory() {
    let server = S3Server::start();
    server.create_bucket(BUCKET);
    let env = server.env();
    let staging = tempfile::tempdir().unwrap();
    let replay_to_s3 = |prefix: &str| {
        Replay::example()
            .output(prefix)
            .arg("--staging")
            .arg(staging.path())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .run()
            .ok();
    };
    replay_to_s3("s3://lake/llm/retries");

    let local = tempfile::tempdir().unwrap();
    Replay::example().output(local.path()).run().ok();
    let args = ["--format", "json", "--top", "100"];
    let expected = report(&local.path().display().to_string(), &args, &[]);
    assert_eq!(report("s3://lake/llm/retries", &args, &env), expected);
    assert_eq!(
        report("s3://lake/llm/retries/attempts", &args, &env),
        expected,
        "the table prefix itself"
    );

    // The same spans replayed again into the prefix: their copies are left out.
    replay_to_s3("s3://lake/llm/retries");
    let json = |text: String| -> Value { serde_json::from_str(&text).expect("report JSON") };
    let doubled = json(report("s3://lake/llm/retries", &args, &env));
    assert_eq!(doubled["files"], 2);
    assert_eq!(doubled["duplicate_rows_left_out"], 25);
    assert_eq!(figures(doubled), figures(json(expected)));

    let missing = binary()
        .args(["report", "s3://lake/nothing-here"])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        stderr.contains("no Parquet files (*.parquet) under s3://lake/nothing-here"),
        "{stderr}"
    );
}

//! End to end: `replay` over OTLP JSON lines → Parquet read back with the parquet crate.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use arrow_schema::{DataType, TimeUnit};
use common::child::{run, succeeded};
use common::collector::{EXAMPLE, PRICING};
use common::replay::Replay;
use common::{parquet_files, temporary_files, usd};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans};

/// (request, attempt, decision, spend class, unaudited reason, cumulative USD, violations)
const EXPECTED: &[(&str, &str, &str, &str, &str, &str, &str)] = &[
    (
        "req-glm-retry",
        "0",
        "first_attempt",
        "base",
        "NULL",
        "0",
        "[]",
    ),
    (
        "req-glm-retry",
        "1",
        "within_envelope",
        "retry",
        "NULL",
        "0.00766626",
        "[]",
    ),
    (
        "req-pro-to-flash",
        "0",
        "first_attempt",
        "base",
        "NULL",
        "0",
        "[]",
    ),
    (
        "req-pro-to-flash",
        "1",
        "within_envelope",
        "fallback",
        "NULL",
        "0.0028068",
        "[]",
    ),
    (
        "req-kimi-patch",
        "0",
        "first_attempt",
        "base",
        "NULL",
        "0",
        "[]",
    ),
    (
        "req-kimi-patch",
        "1",
        "within_envelope",
        "retry",
        "NULL",
        "0.04035",
        "[]",
    ),
    (
        "req-kimi-patch",
        "2",
        "over_envelope",
        "retry",
        "NULL",
        "0.0807",
        "[over_envelope]",
    ),
    (
        "req-flash-hammer",
        "0",
        "first_attempt",
        "base",
        "NULL",
        "0",
        "[]",
    ),
    (
        "req-flash-hammer",
        "1",
        "within_envelope",
        "retry",
        "NULL",
        "0.0031262",
        "[]",
    ),
    (
        "req-flash-hammer",
        "2",
        "over_attempts",
        "retry",
        "NULL",
        "0.0062524",
        "[over_attempts]",
    ),
    (
        "req-stream-replay",
        "0",
        "first_attempt",
        "base",
        "NULL",
        "0",
        "[]",
    ),
    (
        "req-stream-replay",
        "1",
        "replay_unsafe",
        "retry",
        "NULL",
        "0.00659213",
        "[replay_unsafe]",
    ),
    (
        "req-safe-replay",
        "0",
        "first_attempt",
        "base",
        "NULL",
        "0",
        "[]",
    ),
    (
        "req-safe-replay",
        "1",
        "within_envelope",
        "retry",
        "NULL",
        "0.0025505",
        "[]",
    ),
    (
        "req-glm-to-kimi",
        "0",
        "first_attempt",
        "base",
        "NULL",
        "0",
        "[]",
    ),
    (
        "req-glm-to-kimi",
        "1",
        "routing_drift",
        "drift",
        "NULL",
        "0.0057956",
        "[routing_drift]",
    ),
    (
        "req-gateway-swap",
        "0",
        "first_attempt",
        "base",
        "NULL",
        "0",
        "[]",
    ),
    (
        "req-gateway-swap",
        "1",
        "routing_drift",
        "drift",
        "NULL",
        "0.0039556",
        "[routing_drift]",
    ),
    (
        "req-no-envelope",
        "0",
        "first_attempt",
        "base",
        "no_envelope",
        "0",
        "[]",
    ),
    (
        "req-no-envelope",
        "1",
        "unaudited",
        "retry",
        "no_envelope",
        "NULL",
        "[]",
    ),
    (
        "req-unknown-version",
        "0",
        "first_attempt",
        "base",
        "unknown_pricing_version",
        "0",
        "[]",
    ),
    (
        "req-unknown-version",
        "1",
        "unaudited",
        "retry",
        "unknown_pricing_version",
        "NULL",
        "[]",
    ),
    (
        "req-json-envelope",
        "0",
        "first_attempt",
        "base",
        "NULL",
        "0",
        "[]",
    ),
    (
        "req-json-envelope",
        "1",
        "within_envelope",
        "fallback",
        "NULL",
        "0.008167425",
        "[]",
    ),
    (
        "c49fea7425fa7f86",
        "0",
        "first_attempt",
        "base",
        "no_envelope",
        "0",
        "[]",
    ),
];

#[test]
fn example_spans_give_the_rows_the_spec_predicts() {
    let replayed = Replay::example().run().ok();
    let rows = replayed.rows();
    assert_eq!(rows.len(), EXPECTED.len());
    for &(request, index, decision, class, reason, cumulative, violations) in EXPECTED {
        let row = rows
            .iter()
            .find(|r| r["request_id"] == request && r["attempt_index"] == index)
            .unwrap_or_else(|| panic!("no row for {request} attempt {index}"));
        let got = (
            row["decision"].as_str(),
            row["spend_class"].as_str(),
            row["unaudited_reason"].as_str(),
            usd(&row["cumulative_incremental_usd"]),
            row["violations"].as_str(),
        );
        assert_eq!(
            got,
            (decision, class, reason, cumulative.to_owned(), violations),
            "{request}/{index}"
        );
        assert_eq!(
            row["audited"],
            (reason == "NULL").to_string(),
            "{request}/{index}"
        );
        assert_eq!(row["_partition"], "date=2026-08-25");
    }
    assert!(temporary_files(replayed.out()).is_empty());
}

#[test]
fn a_retry_row_carries_every_figure() {
    let rows = Replay::example().rows();
    let row = rows
        .iter()
        .find(|r| r["request_id"] == "req-glm-retry" && r["attempt_index"] == "1")
        .unwrap();
    let expect = [
        ("service_name", "support-bot"),
        ("task_type", "support_summary"),
        ("billing_group", "vip"),
        ("provider", "aiwave"),
        ("original_model", "glm-5"),
        ("retry_model", "glm-5"),
        ("response_model", "glm-5"),
        ("original_family", "glm"),
        ("retry_family", "glm"),
        ("input_tokens", "10000"),
        ("cached_input_tokens", "4000"),
        ("output_tokens", "612"),
        ("output_cap", "800"),
        ("planned_attempt_usd", "0.007666260000000000"),
        // 6000 * 0.775 + 4000 * 0.258065 + 612 * 2.48 = 7200.02 per million
        ("actual_attempt_usd", "0.007200020000000000"),
        ("estimated_incremental_usd", "0.007666260000000000"),
        ("remaining_envelope_usd", "0.007333740000000000"),
        ("max_incremental_usd", "0.015000000000000000"),
        ("group_ratio", "1.000000000000000000"),
        ("sdk_estimated_incremental_usd", "0.007666260000000000"),
        ("sdk_remaining_envelope_usd", "0.007333740000000000"),
        ("sdk_decision_reason", "retry after 429 within envelope"),
        ("max_attempts_after_first", "1"),
        ("pricing_version", "a42d372ccf0b5dd13ecf71203521f9d2"),
        ("pricing_source", "https://aiwave.live/api/pricing"),
        ("pricing_checked_at", "2026-08-22"),
        ("error_type", "NULL"),
        ("output_reached_client", "NULL"),
        ("attempt_source", "declared"),
        ("envelope_source", "span"),
        ("event_time", "1787659263100000"),
        ("end_time", "1787659265100000"),
        ("trace_id", "bd2567959eb54292dd4fea3a6240526a"),
        (
            "decision_reason",
            "retry 1 of glm-5 brings incremental spend to 0.00766626 USD, within the 0.015 envelope (0.00733374 USD left)",
        ),
    ];
    for (column, value) in expect {
        assert_eq!(row[column], value, "{column}");
    }
    assert_eq!(row["pricing_digest"].len(), 64);
    let first = rows
        .iter()
        .find(|r| r["request_id"] == "req-glm-retry" && r["attempt_index"] == "0")
        .unwrap();
    assert_eq!(first["error_type"], "rate_limited");
    assert_eq!(first["remaining_envelope_usd"], "0.015000000000000000");
}

#[test]
fn schema_has_the_spec_columns_and_types() {
    let (schema, _) = Replay::example().run().ok().table();
    let schema = schema.expect("a parquet file");
    let utf8 = DataType::Utf8;
    let money = DataType::Decimal128(38, 18);
    let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    let mut expected: Vec<(&str, DataType)> = vec![("event_time", ts.clone()), ("end_time", ts)];
    for c in [
        "trace_id",
        "span_id",
        "request_id",
        "service_name",
        "task_type",
        "billing_group",
        "provider",
    ] {
        expected.push((c, utf8.clone()));
    }
    expected.push(("attempt_index", DataType::Int32));
    for c in [
        "original_model",
        "retry_model",
        "response_model",
        "original_family",
        "retry_family",
    ] {
        expected.push((c, utf8.clone()));
    }
    for c in [
        "input_tokens",
        "cached_input_tokens",
        "cache_write_input_tokens",
        "output_tokens",
        "output_cap",
    ] {
        expected.push((c, DataType::Int64));
    }
    for c in [
        "planned_attempt_usd",
        "actual_attempt_usd",
        "estimated_incremental_usd",
        "cumulative_incremental_usd",
        "remaining_envelope_usd",
        "max_incremental_usd",
        "group_ratio",
        "sdk_estimated_incremental_usd",
        "sdk_remaining_envelope_usd",
    ] {
        expected.push((c, money.clone()));
    }
    expected.push(("max_attempts_after_first", DataType::Int32));
    for c in ["pricing_version", "pricing_source", "pricing_digest"] {
        expected.push((c, utf8.clone()));
    }
    expected.push(("pricing_checked_at", DataType::Date32));
    for c in ["spend_class", "decision", "decision_reason"] {
        expected.push((c, utf8.clone()));
    }
    expected.push(("audited", DataType::Boolean));
    for c in ["unaudited_reason", "error_type", "sdk_decision_reason"] {
        expected.push((c, utf8.clone()));
    }
    let got: Vec<(&str, DataType)> = schema
        .fields()
        .iter()
        .map(|f| (f.name().as_str(), f.data_type().clone()))
        .collect();
    assert_eq!(&got[..expected.len()], &expected[..]);
    let violations = schema.field_with_name("violations").unwrap();
    assert!(
        matches!(violations.data_type(), DataType::List(item) if item.data_type() == &DataType::Utf8)
    );
    assert_eq!(
        schema
            .field_with_name("output_reached_client")
            .unwrap()
            .data_type(),
        &DataType::Boolean
    );
    for (column, nullable) in [
        ("attempt_source", false),
        ("usage_source", true),
        ("output_cap_source", true),
        ("envelope_source", true),
    ] {
        let field = schema.field_with_name(column).unwrap();
        assert_eq!(field.data_type(), &DataType::Utf8, "{column}");
        assert_eq!(field.is_nullable(), nullable, "{column}");
    }
    assert_eq!(
        schema
            .field_with_name("price_tier_above_input_tokens")
            .unwrap()
            .data_type(),
        &DataType::Int64
    );
    assert_eq!(schema.fields().len(), expected.len() + 7);
}

#[test]
fn attempt_and_envelope_sources_name_how_each_row_was_found() {
    let rows = Replay::example().rows();
    for row in &rows {
        let request = row["request_id"].as_str();
        let expected = match request {
            "c49fea7425fa7f86" => ("single", "NULL"),
            "req-no-envelope" => ("declared", "NULL"),
            _ => ("declared", "span"),
        };
        assert_eq!(
            (
                row["attempt_source"].as_str(),
                row["envelope_source"].as_str()
            ),
            expected,
            "{request}"
        );
    }
}

/// Every span of the example in its own export request, in a scrambled order.
fn one_span_per_line_shuffled(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(EXAMPLE).unwrap();
    let mut lines = Vec::new();
    for line in text.lines() {
        let request: ExportTraceServiceRequest = serde_json::from_str(line).unwrap();
        for rs in &request.resource_spans {
            for ss in &rs.scope_spans {
                for span in &ss.spans {
                    let single = ExportTraceServiceRequest {
                        resource_spans: vec![ResourceSpans {
                            resource: rs.resource.clone(),
                            scope_spans: vec![ScopeSpans {
                                spans: vec![span.clone()],
                                ..ss.clone()
                            }],
                            ..rs.clone()
                        }],
                    };
                    lines.push(serde_json::to_string(&single).unwrap());
                }
            }
        }
    }
    // A fixed permutation (multiplicative stride) so the test is deterministic.
    let n = lines.len();
    let stride = (1..n)
        .rev()
        .find(|s| gcd(*s, n) == 1 && *s > n / 2)
        .unwrap_or(1);
    let shuffled: Vec<&String> = (0..n).map(|i| &lines[(i * stride) % n]).collect();
    let path = dir.join("shuffled.jsonl");
    std::fs::write(
        &path,
        shuffled
            .iter()
            .map(|l| format!("{l}\n"))
            .collect::<String>(),
    )
    .unwrap();
    path
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[test]
fn split_and_shuffled_spans_give_the_same_rows() {
    let whole = Replay::example().rows();
    let input = tempfile::tempdir().unwrap();
    let shuffled = one_span_per_line_shuffled(input.path());
    let split = Replay::new().input(&shuffled).rows();
    assert_eq!(whole, split);
}

/// The rows of `replay --workers N` over `input`, in a fixed order (streams write files of
/// their own, so file order says nothing).
fn rows_with_workers(input: &Path, policies: Option<&Path>, workers: &str) -> Vec<common::Row> {
    let mut replay = Replay::new().input(input).args(["--workers", workers]);
    if let Some(dir) = policies {
        replay = replay.policies(dir);
    }
    let mut rows = replay.rows();
    rows.sort_by(|a, b| {
        let key = |r: &common::Row| {
            (
                r["trace_id"].clone(),
                r["span_id"].clone(),
                r["attempt_index"].clone(),
            )
        };
        key(a).cmp(&key(b))
    });
    rows
}

/// The recordings of real instrumentation libraries, in name order, and their policies.
const RECORDINGS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/instrumented");

fn recordings() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(RECORDINGS)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    found.sort();
    assert!(found.len() > 20, "the recordings are there");
    found
}

#[test]
fn the_rows_do_not_depend_on_the_number_of_streams() {
    let policies = Path::new(RECORDINGS).join("policies");
    let mut inputs = vec![(PathBuf::from(EXAMPLE), None)];
    inputs.extend(
        recordings()
            .into_iter()
            .map(|path| (path, Some(policies.as_path()))),
    );
    for (input, policies) in inputs {
        let one = rows_with_workers(&input, policies, "1");
        assert!(!one.is_empty(), "{}", input.display());
        assert_eq!(
            one,
            rows_with_workers(&input, policies, "3"),
            "{}",
            input.display()
        );
    }
}

/// The streams share one sink: a replay writes one complete file per date whatever the number
/// of streams, so two replays into one output are two files per date (SPEC §6's duplicates).
#[test]
fn a_replay_writes_one_complete_file_per_date_whatever_the_streams() {
    for workers in ["1", "3"] {
        let replayed = Replay::example().args(["--workers", workers]).run().ok();
        let files = parquet_files(replayed.out());
        assert!(temporary_files(replayed.out()).is_empty(), "{files:?}");
        let mut per_date = BTreeMap::<PathBuf, usize>::new();
        for file in &files {
            *per_date
                .entry(file.parent().unwrap().to_path_buf())
                .or_default() += 1;
        }
        assert!(!per_date.is_empty(), "--workers {workers}: no files");
        for (date, count) in per_date {
            assert_eq!(count, 1, "--workers {workers}: {}", date.display());
        }
    }
}

#[test]
fn spans_resent_by_an_exporter_retry_are_counted_once() {
    let once = Replay::example().rows();
    let twice = Replay::example().input(EXAMPLE).rows();
    assert_eq!(once, twice);
}

/// Replays `input`, whose second line is bad and whose others are the example's: exit code 1,
/// the bad line named, every row of the example written.
fn line_2_is_reported_and_the_rest_processed(input: &Path) {
    let result = Replay::new().input(input).run();
    assert_eq!(result.code(), Some(1));
    let stderr = result.stderr();
    assert!(
        stderr.contains(&format!("{}:2: ", input.display())),
        "{stderr}"
    );
    assert_eq!(result.rows().len(), EXPECTED.len());
}

#[test]
fn malformed_line_is_reported_and_the_rest_processed() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(EXAMPLE).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(1, "{\"resourceSpans\": [ this is not json");
    let input = dir.path().join("broken.jsonl");
    std::fs::write(&input, lines.join("\n")).unwrap();

    line_2_is_reported_and_the_rest_processed(&input);
}

#[test]
fn a_line_that_is_not_utf8_is_a_bad_line_and_the_rest_processed() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = std::fs::read(EXAMPLE).unwrap();
    let first_newline = bytes.iter().position(|&b| b == b'\n').unwrap();
    // A copy of the first line with a Latin-1 "é" in its first string value: invalid UTF-8
    // where the span is read. (Its spans, read, would be duplicates of the first line's.)
    let mut copy = bytes[..=first_newline].to_vec();
    let value = copy
        .windows(15)
        .position(|w| w == b"\"stringValue\":\"")
        .expect("a string attribute in the first line")
        + 15;
    copy.insert(value, 0xe9);
    bytes.splice(first_newline + 1..first_newline + 1, copy);
    let input = dir.path().join("latin1.jsonl");
    std::fs::write(&input, bytes).unwrap();

    line_2_is_reported_and_the_rest_processed(&input);
}

#[test]
fn stdin_is_read_with_a_dash() {
    let result = Replay::new()
        .stdin(std::fs::read(EXAMPLE).unwrap())
        .run()
        .ok();
    let stdout = result.stdout();
    assert!(
        stdout.contains("evaluated 12 requests into 25 rows"),
        "{stdout}"
    );
    assert!(stdout.contains("over_envelope    1"), "{stdout}");
    assert_eq!(result.rows().len(), EXPECTED.len());
}

#[test]
fn crlf_blank_lines_and_a_last_line_without_newline_read_as_the_plain_file() {
    let text = std::fs::read_to_string(EXAMPLE).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // Line 1, two blank lines, a broken line 4, then the rest, all ended by `\r\n` but the
    // last, which has no line end at all.
    let mut input = format!("{}\r\n\r\n   \n{{\"resourceSpans\": [\r\n", lines[0]);
    input.push_str(&lines[1..].join("\r\n"));
    let result = Replay::new().stdin(input.into_bytes()).run();
    assert_eq!(result.code(), Some(1));
    let stderr = result.stderr();
    assert!(stderr.contains("-:4: "), "{stderr}");

    let mut read = result.rows();
    let mut plain = Replay::new().input(Path::new(EXAMPLE)).rows();
    assert_eq!(plain.len(), EXPECTED.len());
    common::sort_rows(&mut read);
    common::sort_rows(&mut plain);
    assert_eq!(read, plain);
}

#[test]
fn pricing_check_lists_the_shipped_snapshot() {
    let stdout = succeeded("pricing check", &run(["pricing", "check", PRICING]));
    assert!(
        stdout.contains("a42d372ccf0b5dd13ecf71203521f9d2  checked 2026-08-22"),
        "{stdout}"
    );
    assert!(stdout.contains("6 models"), "{stdout}");
}

#[test]
fn pricing_check_fails_naming_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(Path::new(PRICING).join("2026-08-22-aiwave.json")).unwrap();
    std::fs::write(
        dir.path().join("bad.json"),
        good.replace("\"0.775\"", "\"0.77.5\""),
    )
    .unwrap();
    let result = run([Path::new("pricing"), Path::new("check"), dir.path()]);
    assert!(!result.status.success());
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(
        stderr.contains("bad.json: models.glm-5.input: \"0.77.5\" is not a decimal"),
        "{stderr}"
    );
}

#[test]
fn nan_and_infinite_doubles_in_json_count_as_missing_not_as_a_bad_line() {
    let text = std::fs::read_to_string(EXAMPLE).unwrap();
    let mut lines = text.lines();
    let (first, logical) = (lines.next().unwrap(), lines.next().unwrap());
    // The SDK's own estimate on req-glm-retry's retry becomes NaN, its remaining "Infinity".
    let line = first
        .replace(
            r#"{"stringValue":"0.00766626"}"#,
            r#"{"doubleValue":"NaN"}"#,
        )
        .replace(
            r#"{"stringValue":"0.00733374"}"#,
            r#"{"doubleValue":"Infinity"}"#,
        );
    assert_ne!(line, first);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("nan.jsonl");
    std::fs::write(&input, format!("{line}\n{logical}\n")).unwrap();
    let rows = Replay::new().input(&input).rows();
    let retry = rows.iter().find(|r| r["attempt_index"] == "1").unwrap();
    assert_eq!(retry["sdk_estimated_incremental_usd"], "NULL");
    assert_eq!(retry["sdk_remaining_envelope_usd"], "NULL");
    assert_eq!(retry["decision"], "within_envelope");
}

/// Many chunks of lines, parsed on several threads and finishing out of order, group exactly as
/// one file read in order: the spans of every example request are spread far apart, and bad
/// lines are reported with their own line numbers.
#[test]
fn long_inputs_parsed_in_parallel_give_the_rows_of_the_short_one() {
    let dir = tempfile::tempdir().unwrap();
    let split = one_span_per_line_shuffled(dir.path());
    let spans = std::fs::read_to_string(&split).unwrap();
    let mut lines: Vec<String> = Vec::new();
    // Blank and broken lines between the spans push them into many chunks.
    for (i, line) in spans.lines().enumerate() {
        for _ in 0..7 {
            lines.push(String::new());
        }
        lines.push(line.to_owned());
        if i % 10 == 0 {
            lines.push("{not json".to_owned());
        }
    }
    let input = dir.path().join("long.jsonl");
    std::fs::write(&input, lines.join("\n")).unwrap();

    let result = Replay::new().input(&input).run();
    assert_eq!(result.code(), Some(1), "bad lines were reported");
    let stderr = result.stderr();
    for (number, line) in lines.iter().enumerate() {
        if line == "{not json" {
            assert!(
                stderr.contains(&format!("{}:{}: ", input.display(), number + 1)),
                "line {} reported: {stderr}",
                number + 1
            );
        }
    }
    assert_eq!(result.rows(), Replay::example().rows());
}

/// The rows of the example and of a large generated input, pinned as digests of every column
/// of every row: a change to how replay reads, groups or streams its input must not change one
/// value. (Digests taken with replay as it was before it streamed; update them only for an
/// intended change of the rows, and say so in the commit.)
const EXAMPLE_ROWS_DIGEST: &str =
    "7a2b9dc2a68d4f648bf83a19a8a8fb2d086048234cea6f7281be3087a0543e2d";
const GENERATED_ROWS_DIGEST: &str =
    "2d6549b2363b6e1b78006fb0122c21b1f59a167b59a8f2e8e2015273278d5c21";
const GENERATED_SPANS: usize = 30_000;
const GENERATED_ROWS: usize = 19_175;

#[test]
fn rows_are_those_of_the_pinned_digests() {
    let example = Replay::example().rows();
    let generated = Replay::new()
        .jsonl(&common::spans::jsonl(8, GENERATED_SPANS))
        .rows();
    assert!(
        generated.len() > GENERATED_SPANS / 2,
        "{} rows",
        generated.len()
    );
    for source in ["declared", "single", "http_retry", "sibling_retry"] {
        assert!(
            generated.iter().any(|r| r["attempt_source"] == source),
            "the generated input has {source} attempts"
        );
    }
    assert_eq!(
        (
            common::rows_digest(&example).as_str(),
            common::rows_digest(&generated).as_str()
        ),
        (EXAMPLE_ROWS_DIGEST, GENERATED_ROWS_DIGEST),
        "{} example rows, {} generated rows",
        example.len(),
        generated.len()
    );
}

/// A budget far below what the input holds: the oldest requests are evaluated early and the
/// summary says how many; every attempt still gets its row (a span arriving after its request
/// was evaluated is judged as a late one, never dropped).
#[test]
fn a_small_budget_evaluates_early_and_says_so() {
    let result = Replay::new()
        .jsonl(&common::spans::jsonl(8, GENERATED_SPANS))
        .args(["--max-pending-bytes", "1048576"])
        .run()
        .ok();
    let stdout = result.stdout();
    let early: u64 = stdout
        .lines()
        .filter(|l| l.contains("before the input ended"))
        .find_map(|l| {
            l.strip_prefix("evaluated ")?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(early > 0, "{stdout}");
    let rows = result.rows();
    assert!(rows.len() >= GENERATED_ROWS, "{} rows", rows.len());
}

/// A file the output cannot take, met while the streams are still handing rows on (the
/// generated input makes several batches): replay ends with exit code 2 and the error, and
/// leaves neither complete nor temporary Parquet files behind.
#[test]
fn a_write_that_fails_mid_replay_ends_it_with_the_error_and_no_files() {
    let input = common::spans::jsonl(8, GENERATED_SPANS);
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first");
    let rows = Replay::new().jsonl(&input).output(&first).rows();
    assert_eq!(rows.len(), GENERATED_ROWS);

    // Every partition directory the input needs is a plain file in the second output.
    let blocked = dir.path().join("blocked");
    let table = blocked.join("attempts");
    std::fs::create_dir_all(&table).unwrap();
    let mut partitions = 0;
    for entry in std::fs::read_dir(first.join("attempts")).unwrap() {
        std::fs::write(table.join(entry.unwrap().file_name()), b"not a directory").unwrap();
        partitions += 1;
    }
    assert!(partitions > 0);

    let result = Replay::new().jsonl(&input).output(&blocked).run();
    assert_eq!(result.code(), Some(2));
    let stderr = result.stderr();
    assert!(
        stderr.contains("cannot create") && stderr.contains("attempts/date="),
        "{stderr}"
    );
    assert!(parquet_files(&blocked).is_empty());
    assert!(temporary_files(&blocked).is_empty());
}

/// tools/replicate_jsonl.py makes BENCHMARKS.md's replay load of SDK spans: every copy of the
/// recordings must give their own rows, under trace ids no other copy has.
#[test]
#[ignore = "needs Python 3 (run by .ci/run)"]
fn copies_of_the_recordings_give_the_recordings_rows_once_a_copy() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let inputs = recordings();
    let dir = tempfile::tempdir().unwrap();
    let copies = dir.path().join("copies.jsonl");
    let status = common::python::python()
        .arg(root.join("tools/replicate_jsonl.py"))
        .args(["--copies", "3", "--out"])
        .arg(&copies)
        .args(&inputs)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", common::python::program()));
    assert!(status.success(), "replicate_jsonl.py: {status}");

    let policies = Path::new(RECORDINGS).join("policies");
    let mut once = Replay::new().policies(&policies);
    for input in &inputs {
        once = once.input(input);
    }
    let once = once.rows();
    let thrice = Replay::new().policies(&policies).input(&copies).rows();
    assert!(!once.is_empty());
    assert_eq!(thrice.len(), 3 * once.len());

    let traces = |rows: &[common::Row]| {
        rows.iter()
            .map(|r| r["trace_id"].clone())
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    };
    assert_eq!(traces(&thrice), 3 * traces(&once), "a copy shares no trace");
    // Apart from the trace id, each row of the recordings comes back once a copy.
    let without_trace = |rows: &[common::Row]| {
        let mut rows: Vec<common::Row> = rows
            .iter()
            .cloned()
            .map(|mut r| {
                r.remove("trace_id");
                r
            })
            .collect();
        rows.sort();
        rows
    };
    let expected: Vec<common::Row> = (0..3).flat_map(|_| once.clone()).collect();
    assert_eq!(without_trace(&thrice), without_trace(&expected));
}

use std::str::FromStr;
use std::sync::Arc;

use arrow_array::{Float64Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use rust_decimal::Decimal;

use super::format::{write, ReportFormat};
use super::*;
use crate::record::AttemptRow;
use crate::sinks::parquet::{ObjectStoreConfig, Output, ParquetExporterConfig, ParquetSink};

/// 2026-08-25T12:00:00Z.
const AUG_25: i64 = 1_787_659_200_000_000_000;
/// 2026-08-31T23:59:59.999999999Z and a nanosecond later.
const AUG_LAST_NS: i64 = 1_788_220_799_999_999_999;
const SEP_FIRST: i64 = AUG_LAST_NS + 1;

fn usd(text: &str) -> Decimal {
    Decimal::from_str(text).expect("test decimal parses")
}

/// Attempt `index` of `request` (trace "t"), as the report reads it.
fn row(
    request: &str,
    index: i32,
    class: &str,
    decision: &str,
    audited: bool,
    estimate: Option<&str>,
) -> ReportRow {
    ReportRow {
        event_time: AUG_25 + i64::from(index),
        trace_id: "t".into(),
        span_id: format!("{request}-{index}"),
        request_id: request.into(),
        service_name: "support-bot".into(),
        task_type: Some("support_summary".into()),
        attempt_index: index,
        spend_class: class.into(),
        decision: decision.into(),
        audited,
        estimated_incremental_usd: estimate.map(usd),
    }
}

fn first(request: &str) -> ReportRow {
    row(request, 0, "base", "first_attempt", true, Some("0"))
}

fn retry(request: &str, index: i32, decision: &str, estimate: &str) -> ReportRow {
    row(request, index, "retry", decision, true, Some(estimate))
}

fn report_of(rows: &[ReportRow]) -> Report {
    let mut report = Report::default();
    for row in rows {
        report.add(row).expect("no overflow");
    }
    report
}

/// (attempts, incremental, over envelope, unpriced retries, unaudited, share)
type Expected = (u64, &'static str, &'static str, u64, u64, &'static str);

fn summary(totals: &Totals) -> (u64, String, String, u64, u64, String) {
    (
        totals.attempts,
        totals.incremental_usd.normalize().to_string(),
        totals.over_envelope_usd.normalize().to_string(),
        totals.unpriced_retries,
        totals.unaudited,
        totals.unaudited_share().to_string(),
    )
}

fn expected((a, i, o, p, u, s): Expected) -> (u64, String, String, u64, u64, String) {
    (a, i.into(), o.into(), p, u, s.into())
}

#[test]
fn totals_follow_the_definitions() {
    let cases: Vec<(&str, Vec<ReportRow>, Expected)> = vec![
        (
            "a first attempt is an attempt and never incremental spend",
            vec![row("a", 0, "base", "first_attempt", true, Some("0.5"))],
            (1, "0", "0", 0, 0, "0.0000"),
        ),
        (
            "retries add up exactly",
            vec![
                first("a"),
                retry("a", 1, "within_envelope", "0.1"),
                retry("a", 2, "within_envelope", "0.2"),
            ],
            (3, "0.3", "0", 0, 0, "0.0000"),
        ),
        (
            "over envelope USD is the incremental USD of over_envelope rows only",
            vec![
                first("a"),
                retry("a", 1, "within_envelope", "0.0028068"),
                retry("a", 2, "over_envelope", "0.0134"),
                retry("a", 3, "replay_unsafe", "0.5"),
            ],
            (4, "0.5162068", "0.0134", 0, 0, "0.0000"),
        ),
        (
            "a retry without an estimate is counted as unpriced, not as zero spend",
            vec![first("a"), row("a", 1, "unknown", "unaudited", false, None)],
            (2, "0", "0", 1, 1, "0.5000"),
        ),
        (
            "unaudited share is unaudited rows over attempts, first attempts included",
            vec![
                row("a", 0, "base", "first_attempt", false, Some("0")),
                retry("a", 1, "within_envelope", "0.01"),
                retry("a", 2, "within_envelope", "0.01"),
            ],
            (3, "0.02", "0", 0, 1, "0.3333"),
        ),
        (
            "the share rounds half away from zero",
            (0..32)
                .map(|i| row("a", i, "retry", "within_envelope", i != 0, Some("0")))
                .collect(),
            (32, "0", "0", 0, 1, "0.0313"),
        ),
        (
            "two thirds",
            vec![
                row("a", 0, "base", "first_attempt", false, None),
                row("a", 1, "retry", "unaudited", false, None),
                retry("a", 2, "within_envelope", "0"),
            ],
            (3, "0", "0", 1, 2, "0.6667"),
        ),
    ];
    for (name, rows, want) in cases {
        let report = report_of(&rows);
        assert_eq!(summary(report.total()), expected(want), "{name}");
    }
}

#[test]
fn an_empty_report_has_a_zero_share() {
    assert_eq!(Totals::default().unaudited_share().to_string(), "0.0000");
}

#[test]
fn rows_group_by_utc_month_task_type_and_spend_class() {
    let mut late = retry("a", 1, "within_envelope", "0.25");
    late.event_time = AUG_LAST_NS;
    let mut next_month = retry("b", 1, "within_envelope", "0.5");
    next_month.event_time = SEP_FIRST;
    let mut untyped = retry("c", 1, "over_envelope", "0.75");
    untyped.task_type = None;
    let mut fallback = retry("d", 1, "within_envelope", "1");
    fallback.spend_class = "fallback".into();
    let mut odd = retry("e", 1, "within_envelope", "2");
    odd.spend_class = "a_class_from_the_future".into();
    let report = report_of(&[
        odd,
        next_month,
        fallback,
        late,
        untyped,
        first("a"),
        row("f", 1, "drift", "routing_drift", true, Some("3")),
        row("g", 1, "unknown", "unaudited", false, None),
    ]);
    let lines: Vec<(String, Option<&str>, &str, u64, String)> = report
        .groups()
        .map(|(key, totals)| {
            (
                key.month.to_string(),
                key.task_type.as_deref(),
                key.spend_class.0.as_str(),
                totals.attempts,
                totals.incremental_usd.to_string(),
            )
        })
        .collect();
    let s = Some("support_summary");
    let want: Vec<(String, Option<&str>, &str, u64, String)> = vec![
        ("2026-08".into(), None, "retry", 1, "0.75".into()),
        ("2026-08".into(), s, "base", 1, "0".into()),
        ("2026-08".into(), s, "retry", 1, "0.25".into()),
        ("2026-08".into(), s, "fallback", 1, "1".into()),
        ("2026-08".into(), s, "drift", 1, "3".into()),
        ("2026-08".into(), s, "unknown", 1, "0".into()),
        (
            "2026-08".into(),
            s,
            "a_class_from_the_future",
            1,
            "2".into(),
        ),
        ("2026-09".into(), s, "retry", 1, "0.5".into()),
    ];
    assert_eq!(lines, want);
}

#[test]
fn top_requests_rank_by_incremental_usd_then_by_trace_and_request() {
    let report = report_of(&[
        first("small"),
        retry("small", 1, "within_envelope", "0.01"),
        first("big"),
        retry("big", 1, "within_envelope", "0.5"),
        retry("big", 2, "over_envelope", "0.7"),
        first("tie-b"),
        retry("tie-b", 1, "within_envelope", "0.2"),
        first("tie-a"),
        retry("tie-a", 1, "within_envelope", "0.2"),
        first("no-retry"),
        row("unpriced", 1, "unknown", "unaudited", false, None),
    ]);
    assert_eq!(report.requests_with_retries(), 5);
    let ranked: Vec<(&str, String, String, u64)> = report
        .top_requests(10)
        .iter()
        .map(|l| {
            (
                l.request_id.as_str(),
                l.totals.incremental_usd.to_string(),
                l.totals.over_envelope_usd.to_string(),
                l.retries,
            )
        })
        .collect();
    assert_eq!(
        ranked,
        vec![
            ("big", "1.2".into(), "0.7".into(), 2),
            ("tie-a", "0.2".into(), "0".into(), 1),
            ("tie-b", "0.2".into(), "0".into(), 1),
            ("small", "0.01".into(), "0".into(), 1),
            ("unpriced", "0".into(), "0".into(), 1),
        ]
    );
    assert_eq!(report.top_requests(2).len(), 2);
    assert!(report.top_requests(0).is_empty());
}

#[test]
fn a_request_is_described_by_its_first_attempt_whatever_the_row_order() {
    let mut retry_row = retry("a", 1, "within_envelope", "0.1");
    retry_row.service_name = "gateway".into();
    retry_row.task_type = Some("other".into());
    retry_row.event_time = AUG_25 - 5;
    let report = report_of(&[retry_row, first("a")]);
    let top = report.top_requests(1);
    let line = top.first().expect("one request");
    assert_eq!(line.service_name, "support-bot");
    assert_eq!(line.task_type.as_deref(), Some("support_summary"));
    assert_eq!(line.started, AUG_25 - 5, "the earliest start of any row");
    assert_eq!(line.totals.attempts, 2);
}

#[test]
fn the_same_request_id_in_two_traces_is_two_requests() {
    let mut other = retry("a", 1, "within_envelope", "0.1");
    other.trace_id = "u".into();
    let report = report_of(&[retry("a", 1, "within_envelope", "0.1"), other]);
    assert_eq!(report.requests_with_retries(), 2);
}

fn sample_report() -> Report {
    let mut untyped = row("x,\"y\"", 0, "base", "first_attempt", false, None);
    untyped.task_type = None;
    untyped.service_name = "=cmd|pipe".into();
    let mut report = report_of(&[
        first("req-1"),
        retry("req-1", 1, "over_envelope", "0.0162"),
        untyped,
    ]);
    report.files = 1;
    report
}

fn render(format: ReportFormat, top: usize) -> String {
    let mut out = Vec::new();
    write(&sample_report(), top, format, &mut out).expect("written");
    String::from_utf8(out).expect("utf-8")
}

#[test]
fn table_format_aligns_columns_and_ends_the_summary_with_a_total() {
    let want = "\
Attempts by month, task type and spend class (1 Parquet file)
month    task_type        spend_class  attempts  incremental_usd  over_envelope_usd  unpriced_retries  unaudited  unaudited_share
2026-08  -                base                1                0                  0                 0          1           1.0000
2026-08  support_summary  base                1                0                  0                 0          0           0.0000
2026-08  support_summary  retry               1           0.0162             0.0162                 0          0           0.0000
total                                         3           0.0162             0.0162                 0          1           0.3333

Top 1 requests by incremental USD (of 1 with retries or fallbacks)
request_id  trace_id  service_name  task_type        started               attempts  retries  incremental_usd  over_envelope_usd  unpriced_retries  unaudited
req-1       t         support-bot   support_summary  2026-08-25T12:00:00Z         2        1           0.0162             0.0162                 0          0
";
    assert_eq!(render(ReportFormat::Table, 10), want);
}

#[test]
fn csv_format_is_two_tables_quoted_and_guarded_against_formulas() {
    let want = "\
month,task_type,spend_class,attempts,incremental_usd,over_envelope_usd,unpriced_retries,unaudited,unaudited_share\r
2026-08,,base,1,0,0,0,1,1.0000\r
2026-08,support_summary,base,1,0,0,0,0,0.0000\r
2026-08,support_summary,retry,1,0.0162,0.0162,0,0,0.0000\r
\r
request_id,trace_id,service_name,task_type,started,attempts,retries,incremental_usd,over_envelope_usd,unpriced_retries,unaudited\r
req-1,t,support-bot,support_summary,2026-08-25T12:00:00Z,2,1,0.0162,0.0162,0,0\r
";
    assert_eq!(render(ReportFormat::Csv, 10), want);
    assert!(
        !render(ReportFormat::Csv, 0).contains("request_id"),
        "--top 0 leaves one table"
    );

    let mut out = Vec::new();
    let mut report = report_of(&[row("x,\"y\"", 1, "retry", "unaudited", false, None)]);
    report.requests.values_mut().for_each(|s| {
        s.line.service_name = "=HYPERLINK(1)".into();
    });
    write(&report, 1, ReportFormat::Csv, &mut out).expect("written");
    let text = String::from_utf8(out).expect("utf-8");
    assert!(text.contains("\"x,\"\"y\"\"\",t,'=HYPERLINK(1),"), "{text}");
}

#[test]
fn markdown_format_has_two_tables_with_numbers_right_aligned() {
    let text = render(ReportFormat::Markdown, 10);
    let want_start = "\
### Attempts by month, task type and spend class

| month | task_type | spend_class | attempts | incremental_usd | over_envelope_usd | unpriced_retries | unaudited | unaudited_share |
|---|---|---|---:|---:|---:|---:|---:|---:|
| 2026-08 | - | base | 1 | 0 | 0 | 0 | 1 | 1.0000 |
";
    assert!(text.starts_with(want_start), "{text}");
    assert!(
        text.contains("| **total** |  |  | 3 | 0.0162 | 0.0162 | 0 | 1 | 0.3333 |\n"),
        "{text}"
    );
    assert!(
        text.contains("| req-1 | t | support-bot | support_summary | 2026-08-25T12:00:00Z | 2 | 1 | 0.0162 | 0.0162 | 0 | 0 |\n"),
        "{text}"
    );

    let mut piped = report_of(&[retry("a|b", 1, "within_envelope", "1")]);
    piped.files = 1;
    let mut out = Vec::new();
    write(&piped, 1, ReportFormat::Markdown, &mut out).expect("written");
    assert!(String::from_utf8_lossy(&out).contains("| a\\|b |"));
}

#[test]
fn json_format_keeps_money_as_exact_strings() {
    let json: serde_json::Value =
        serde_json::from_str(&render(ReportFormat::Json, 10)).expect("valid JSON");
    assert_eq!(json["files"], 1);
    assert_eq!(json["by_month"].as_array().map(Vec::len), Some(3));
    assert_eq!(json["by_month"][0]["task_type"], serde_json::Value::Null);
    assert_eq!(json["by_month"][2]["spend_class"], "retry");
    assert_eq!(json["by_month"][2]["incremental_usd"], "0.0162");
    assert_eq!(json["by_month"][2]["over_envelope_usd"], "0.0162");
    assert_eq!(json["total"]["attempts"], 3);
    assert_eq!(json["total"]["unaudited_share"], "0.3333");
    assert_eq!(json["requests_with_retries"], 1);
    assert_eq!(json["top_requests"][0]["request_id"], "req-1");
    assert_eq!(json["top_requests"][0]["retries"], 1);
    assert_eq!(json["top_requests"][0]["started"], "2026-08-25T12:00:00Z");
}

#[test]
fn every_format_says_how_many_duplicate_rows_were_left_out() {
    let note = "Left out 2 duplicate rows: attempts (trace_id, span_id) a newer file also holds, each counted once, from the newest file";
    let json: serde_json::Value =
        serde_json::from_str(&render(ReportFormat::Json, 10)).expect("valid JSON");
    assert_eq!(json["duplicate_rows_left_out"], 0);
    for format in [
        ReportFormat::Table,
        ReportFormat::Markdown,
        ReportFormat::Csv,
    ] {
        assert!(!render(format, 10).contains("Left out"), "{format:?}");
    }

    let mut report = sample_report();
    report.duplicates = 2;
    let rendered = |format, top| {
        let mut out = Vec::new();
        write(&report, top, format, &mut out).expect("written");
        String::from_utf8(out).expect("utf-8")
    };
    let table = rendered(ReportFormat::Table, 10);
    assert_eq!(table.lines().nth(1), Some(note), "{table}");
    let markdown = rendered(ReportFormat::Markdown, 10);
    assert!(
        markdown.starts_with(&format!(
            "### Attempts by month, task type and spend class\n\n{note}.\n\n| month |"
        )),
        "{markdown}"
    );
    for top in [0, 10] {
        let csv = rendered(ReportFormat::Csv, top);
        assert!(csv.ends_with(&format!("\r\n# {note}\r\n")), "{csv}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&rendered(ReportFormat::Json, 10)).expect("valid JSON");
    assert_eq!(json["duplicate_rows_left_out"], 2);
}

#[test]
fn format_names_parse_and_others_are_refused() {
    for name in ReportFormat::NAMES {
        assert!(name.parse::<ReportFormat>().is_ok(), "{name}");
    }
    let refused = "xml".parse::<ReportFormat>().expect_err("not a format");
    assert!(refused.contains("table, csv, json, markdown"), "{refused}");
}

/// A retry row with every column the writer needs.
fn attempt_row(request: &str, index: i32, event_time: i64, estimate: &str) -> AttemptRow {
    let row = retry(request, index, "over_envelope", estimate);
    // Each request a trace of its own: the request name's bytes in hex, zero-padded.
    let name: String = request.bytes().map(|b| format!("{b:02x}")).collect();
    AttemptRow {
        event_time,
        end_time: event_time + 1,
        trace_id: crate::contract::id_from_hex(&format!("{name:0>32}")).expect("hex"),
        span_id: crate::contract::id_from_hex(&format!("b7ad6b71692033{index:02}")).expect("hex"),
        request_id: row.request_id.into(),
        service_name: row.service_name.into(),
        task_type: row.task_type.map(Into::into),
        attempt_index: index,
        estimated_incremental_usd: row.estimated_incremental_usd,
        spend_class: SpendClass::Retry,
        decision: Decision::OverEnvelope,
        ..AttemptRow::blank()
    }
}

fn write_rows(output: &std::path::Path, rows: &[AttemptRow]) {
    let mut sink = ParquetSink::new(output, ParquetExporterConfig::default()).expect("sink");
    sink.write(rows).expect("write");
    sink.close().expect("close");
}

fn read_local(location: &std::path::Path) -> Result<Report, ReportError> {
    read(
        &Output::Local(location.to_path_buf()),
        &ObjectStoreConfig::default(),
    )
}

type Lines = Vec<(GroupKey, Totals)>;

fn lines(report: &Report) -> Lines {
    report
        .groups()
        .map(|(k, t)| (k.clone(), t.clone()))
        .collect()
}

#[test]
fn reading_partitions_recursively_skips_temporaries_and_other_files() {
    let out = tempfile::tempdir().expect("tempdir");
    let rows = [
        attempt_row("a", 1, AUG_25, "0.0028068"),
        attempt_row("b", 1, SEP_FIRST, "0.1"),
    ];
    write_rows(out.path(), &rows);
    let table = out.path().join("attempts");
    // What a crash, a copy tool or an operator leaves next to the files.
    let partition = table.join("date=2026-08-25");
    std::fs::write(partition.join(".part-x-1-000001.parquet.tmp"), b"half").expect("tmp");
    std::fs::write(partition.join("notes.txt"), b"not parquet").expect("txt");
    std::fs::write(table.join("_SUCCESS"), b"").expect("marker");
    std::fs::create_dir_all(table.join("_temporary/0")).expect("dir");
    std::fs::write(table.join("_temporary/0/x.parquet"), b"partial").expect("partial");
    // A copy one level deeper (e.g. another instance's subdirectory) is read too.
    let nested = table.join("region=eu/date=2026-08-25");
    std::fs::create_dir_all(&nested).expect("nested");
    let source = std::fs::read_dir(&partition)
        .expect("partition")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "parquet"))
        .expect("a completed file");
    std::fs::copy(&source, nested.join("copy.parquet")).expect("copy");

    // The copy holds the same attempts: read, and left out.
    let expected = report_of(&[&rows[0], &rows[1]].map(ReportRow::from));
    for location in [out.path().to_path_buf(), table.clone()] {
        let report = read_local(&location).expect("report");
        assert_eq!(report.files, 3, "{}", location.display());
        assert_eq!(report.duplicates, 1, "{}", location.display());
        assert_eq!(lines(&report), lines(&expected), "{}", location.display());
    }
    let partition_only = read_local(&partition).expect("one partition");
    assert_eq!(partition_only.total().attempts, 1);
}

#[test]
fn an_attempt_in_two_files_counts_once_with_every_row_the_newest_file_has_of_it() {
    // Two tries inferred from one call share its span; the older file has a copy of each row.
    let mut tries = [first("a"), retry("a", 1, "within_envelope", "0.1")];
    tries[1].span_id = tries[0].span_id.clone();
    let mut older_copy = tries[1].clone();
    older_copy.estimated_incremental_usd = Some(usd("0.7"));
    let mut report = Report::default();
    report.begin_file();
    for row in &tries {
        report.add(row).expect("no overflow");
    }
    report.begin_file();
    for row in [&tries[0], &older_copy, &first("b")] {
        report.add(row).expect("no overflow");
    }
    assert_eq!(report.files, 2);
    assert_eq!(report.duplicates, 2);
    assert_eq!(
        summary(report.total()),
        expected((3, "0.1", "0", 0, 0, "0.0000"))
    );
}

/// The one completed file of `partition` not in `known`.
fn new_file(partition: &std::path::Path, known: &[std::path::PathBuf]) -> std::path::PathBuf {
    std::fs::read_dir(partition)
        .expect("partition")
        .map(|e| e.expect("entry").path())
        .find(|p| !known.contains(p) && p.extension().is_some_and(|e| e == "parquet"))
        .expect("a new file")
}

fn set_modified(path: &std::path::Path, seconds: u64) {
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_secs(seconds);
    std::fs::File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(time))
        .expect("set the modification time");
}

#[test]
fn a_duplicated_attempt_counts_from_the_file_modified_last_then_the_greatest_name() {
    let out = tempfile::tempdir().expect("tempdir");
    let partition = out.path().join("attempts/date=2026-08-25");
    write_rows(out.path(), &[attempt_row("a", 1, AUG_25, "0.1")]);
    let cheap = new_file(&partition, &[]);
    write_rows(out.path(), &[attempt_row("a", 1, AUG_25, "0.2")]);
    let dear = new_file(&partition, std::slice::from_ref(&cheap));
    let incremental = || {
        let report = read_local(out.path()).expect("report");
        assert_eq!((report.files, report.duplicates), (2, 1));
        report.total().incremental_usd.normalize().to_string()
    };

    set_modified(&cheap, 2_000_000_000);
    set_modified(&dear, 1_000_000_000);
    assert_eq!(incremental(), "0.1", "the later modified");
    set_modified(&dear, 2_000_000_001);
    assert_eq!(incremental(), "0.2", "the later modified");
    set_modified(&dear, 2_000_000_000);
    let greatest = if cheap > dear { "0.1" } else { "0.2" };
    assert_eq!(incremental(), greatest, "a tie: the greatest name");
}

#[test]
fn a_file_with_another_schema_is_an_error_naming_the_file_and_column() {
    let out = tempfile::tempdir().expect("tempdir");
    write_rows(out.path(), &[attempt_row("a", 1, AUG_25, "0.1")]);
    let partition = out.path().join("attempts/date=2026-08-25");
    let schema = Arc::new(Schema::new(vec![
        Field::new("event_time", DataType::Int64, false),
        Field::new("estimated_incremental_usd", DataType::Float64, true),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from(vec![AUG_25])),
            Arc::new(Float64Array::from(vec![0.1])),
        ],
    )
    .expect("batch");
    let foreign = partition.join("zz-foreign.parquet");
    let mut writer = ArrowWriter::try_new(
        std::fs::File::create(&foreign).expect("create"),
        schema,
        None,
    )
    .expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");

    let message = read_local(out.path()).expect_err("refused").to_string();
    assert!(
        message.contains(&foreign.display().to_string()),
        "{message}"
    );
    assert!(message.contains("not an attempts table"), "{message}");
    assert!(message.contains("column event_time is Int64"), "{message}");

    std::fs::write(&foreign, b"not parquet at all").expect("overwrite");
    let message = read_local(out.path()).expect_err("refused").to_string();
    assert!(
        message.starts_with(&format!("cannot read {}", foreign.display())),
        "{message}"
    );
}

#[test]
fn a_location_without_parquet_files_is_an_error_not_an_empty_report() {
    let out = tempfile::tempdir().expect("tempdir");
    let message = read_local(out.path()).expect_err("empty").to_string();
    assert!(message.starts_with("no Parquet files"), "{message}");
    let missing = out.path().join("nope");
    let message = read_local(&missing).expect_err("missing").to_string();
    assert!(message.contains("cannot list"), "{message}");
}

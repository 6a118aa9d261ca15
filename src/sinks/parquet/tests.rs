use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Decimal128Type, Int32Type, Int64Type, TimestampMicrosecondType,
};
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, Field, TimeUnit};
use chrono::NaiveDate;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{CompressionCodec, Encoding};
use parquet::file::metadata::ParquetMetaData;
use rust_decimal::Decimal;

use super::schema::{self, attempts_schema};
use super::{rows_to_batch, ParquetExporterConfig, ParquetSink, ParquetSinkError};
use crate::contract::id_from_hex;
use crate::record::{AttemptRow, AttemptSource, Decision, SpendClass, UnauditedReason, Violation};

const NANOS_PER_SECOND: i64 = 1_000_000_000;
/// 2025-03-14T12:00:00Z.
const MARCH_14_NOON: i64 = 1_741_953_600 * NANOS_PER_SECOND;
const ONE_DAY: i64 = 86_400 * NANOS_PER_SECOND;

fn usd(text: &str) -> Decimal {
    Decimal::from_str(text).expect("test decimal parses")
}

fn date(y: i32, m: u32, d: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(y, m, d).expect("test date is valid")
}

/// A priced retry of glm-5 that went over its envelope, every optional field filled.
pub(super) fn retry_at(event_time: i64, attempt_index: i32) -> AttemptRow {
    AttemptRow {
        event_time,
        end_time: event_time + 2 * NANOS_PER_SECOND,
        trace_id: id_from_hex("0af7651916cd43dd8448eb211c80319c").unwrap(),
        span_id: id_from_hex(&format!("b7ad6b71692033{attempt_index:02}")).unwrap(),
        request_id: "req-42".into(),
        service_name: "checkout-assistant".into(),
        task_type: Some("summarize".into()),
        billing_group: Some("team-a".into()),
        provider: Some("zhipu".into()),
        attempt_index,
        original_model: Some("glm-5".into()),
        retry_model: Some("glm-5".into()),
        response_model: Some("glm-5-0314".into()),
        original_family: Some("glm".into()),
        retry_family: Some("glm".into()),
        input_tokens: Some(1200),
        cached_input_tokens: Some(200),
        output_tokens: Some(350),
        output_cap: Some(1024),
        planned_attempt_usd: Some(usd("0.0031")),
        actual_attempt_usd: Some(usd("0.0028068")),
        estimated_incremental_usd: Some(usd("0.0028068")),
        cumulative_incremental_usd: Some(usd("0.0162")),
        remaining_envelope_usd: Some(usd("-0.0012")),
        max_incremental_usd: Some(usd("0.015")),
        group_ratio: Some(usd("1.5")),
        sdk_estimated_incremental_usd: Some(usd("0.0028")),
        sdk_remaining_envelope_usd: Some(usd("-0.0011")),
        max_attempts_after_first: Some(3),
        pricing_version: Some("2025-03-01".into()),
        pricing_source: Some("https://open.bigmodel.cn/pricing".into()),
        pricing_digest: Some("sha256:abc".into()),
        pricing_checked_at: Some(date(2025, 3, 1)),
        spend_class: SpendClass::Retry,
        decision: Decision::OverEnvelope,
        decision_reason: "retry 2 of glm-5 would bring incremental spend to 0.0162 USD".into(),
        audited: true,
        unaudited_reason: None,
        error_type: Some("rate_limited".into()),
        sdk_decision_reason: Some("within budget".into()),
        violations: vec![Violation::OverEnvelope, Violation::SdkEstimateMismatch],
        output_reached_client: Some(false),
        attempt_source: AttemptSource::Declared,
        envelope_source: Some("policy:support-summaries".into()),
        cache_write_input_tokens: None,
        usage_source: None,
        output_cap_source: None,
        price_tier_above_input_tokens: None,
    }
}

/// A first attempt the collector could not audit: every nullable field null.
fn unaudited_first_at(event_time: i64) -> AttemptRow {
    AttemptRow {
        event_time,
        end_time: event_time + NANOS_PER_SECOND,
        trace_id: id_from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
        span_id: id_from_hex("00f067aa0ba902b7").unwrap(),
        request_id: "00f067aa0ba90200".into(),
        service_name: "unknown_service".into(),
        decision_reason: "first attempt".into(),
        audited: false,
        unaudited_reason: Some(UnauditedReason::NoEnvelope),
        attempt_source: AttemptSource::Single,
        ..AttemptRow::blank()
    }
}

fn small_files(max_rows_per_file: usize) -> ParquetExporterConfig {
    ParquetExporterConfig {
        max_rows_per_file,
        row_group_rows: 2,
        ..ParquetExporterConfig::default()
    }
}

/// Every file under `dir`, hidden ones included, sorted.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        for entry in fs::read_dir(&current).expect("test dir is readable") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                pending.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

fn is_temp(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext == "tmp")
}

fn read_file(path: &Path) -> (Arc<ParquetMetaData>, RecordBatch) {
    let file = File::open(path).expect("completed file opens");
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).expect("valid parquet");
    let metadata = Arc::clone(builder.metadata());
    let schema = Arc::clone(builder.schema());
    let batches: Vec<RecordBatch> = builder
        .build()
        .expect("reader builds")
        .collect::<Result<_, _>>()
        .expect("batches decode");
    // Test files stay far below the reader's batch size, so one batch holds the whole file.
    let batch = match batches.as_slice() {
        [single] => single.clone(),
        [] => RecordBatch::new_empty(schema),
        _ => panic!("expected one batch per test file, got {}", batches.len()),
    };
    (metadata, batch)
}

fn total_rows(paths: &[PathBuf]) -> usize {
    paths.iter().map(|p| read_file(p).1.num_rows()).sum()
}

#[test]
fn schema_has_every_spec_column_in_row_order() {
    let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    let money = DataType::Decimal128(38, 18);
    let list = DataType::List(Arc::new(Field::new("item", DataType::Utf8, false)));
    let expected: Vec<(&str, DataType, bool)> = vec![
        ("event_time", ts.clone(), false),
        ("end_time", ts, false),
        ("trace_id", DataType::Utf8, false),
        ("span_id", DataType::Utf8, false),
        ("request_id", DataType::Utf8, false),
        ("service_name", DataType::Utf8, false),
        ("task_type", DataType::Utf8, true),
        ("billing_group", DataType::Utf8, true),
        ("provider", DataType::Utf8, true),
        ("attempt_index", DataType::Int32, false),
        ("original_model", DataType::Utf8, true),
        ("retry_model", DataType::Utf8, true),
        ("response_model", DataType::Utf8, true),
        ("original_family", DataType::Utf8, true),
        ("retry_family", DataType::Utf8, true),
        ("input_tokens", DataType::Int64, true),
        ("cached_input_tokens", DataType::Int64, true),
        ("cache_write_input_tokens", DataType::Int64, true),
        ("output_tokens", DataType::Int64, true),
        ("output_cap", DataType::Int64, true),
        ("planned_attempt_usd", money.clone(), true),
        ("actual_attempt_usd", money.clone(), true),
        ("estimated_incremental_usd", money.clone(), true),
        ("cumulative_incremental_usd", money.clone(), true),
        ("remaining_envelope_usd", money.clone(), true),
        ("max_incremental_usd", money.clone(), true),
        ("group_ratio", money.clone(), true),
        ("sdk_estimated_incremental_usd", money.clone(), true),
        ("sdk_remaining_envelope_usd", money, true),
        ("max_attempts_after_first", DataType::Int32, true),
        ("pricing_version", DataType::Utf8, true),
        ("pricing_source", DataType::Utf8, true),
        ("pricing_digest", DataType::Utf8, true),
        ("pricing_checked_at", DataType::Date32, true),
        ("spend_class", DataType::Utf8, false),
        ("decision", DataType::Utf8, false),
        ("decision_reason", DataType::Utf8, false),
        ("audited", DataType::Boolean, false),
        ("unaudited_reason", DataType::Utf8, true),
        ("error_type", DataType::Utf8, true),
        ("sdk_decision_reason", DataType::Utf8, true),
        ("violations", list, false),
        ("output_reached_client", DataType::Boolean, true),
        ("attempt_source", DataType::Utf8, false),
        ("usage_source", DataType::Utf8, true),
        ("output_cap_source", DataType::Utf8, true),
        ("price_tier_above_input_tokens", DataType::Int64, true),
        ("envelope_source", DataType::Utf8, true),
    ];

    let schema = attempts_schema();
    let actual: Vec<(&str, DataType, bool)> = schema
        .fields()
        .iter()
        .map(|f| (f.name().as_str(), f.data_type().clone(), f.is_nullable()))
        .collect();
    assert_eq!(actual, expected);
}

#[test]
fn every_value_round_trips_through_a_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sink = ParquetSink::new(dir.path(), ParquetExporterConfig::default()).expect("sink");
    let rows = [
        unaudited_first_at(MARCH_14_NOON),
        retry_at(MARCH_14_NOON + 5 * NANOS_PER_SECOND, 2),
    ];
    sink.write(&rows).expect("write");
    let files = sink.close().expect("close");
    assert_eq!(files.len(), 1);

    let (_, batch) = read_file(&files[0]);
    assert_eq!(batch.schema().fields(), attempts_schema().fields());
    assert_eq!(batch.num_rows(), 2);
    let col = |name: &str| {
        batch
            .column_by_name(name)
            .unwrap_or_else(|| panic!("column {name} present"))
            .clone()
    };
    let strings = |name: &str| {
        let array = col(name);
        let array = array.as_string::<i32>();
        (0..2)
            .map(|i| array.is_valid(i).then(|| array.value(i).to_owned()))
            .collect::<Vec<_>>()
    };
    let money = |name: &str| {
        let array = col(name);
        let array = array.as_primitive::<Decimal128Type>();
        (0..2)
            .map(|i| array.is_valid(i).then(|| array.value(i)))
            .collect::<Vec<_>>()
    };
    let int64s = |name: &str| {
        let array = col(name);
        let array = array.as_primitive::<Int64Type>();
        (0..2)
            .map(|i| array.is_valid(i).then(|| array.value(i)))
            .collect::<Vec<_>>()
    };

    let event_time = col(schema::EVENT_TIME);
    let event_time = event_time.as_primitive::<TimestampMicrosecondType>();
    assert_eq!(
        event_time.values(),
        &[
            MARCH_14_NOON / 1000,
            (MARCH_14_NOON + 5 * NANOS_PER_SECOND) / 1000
        ]
    );
    let end_time = col(schema::END_TIME);
    assert_eq!(
        end_time.as_primitive::<TimestampMicrosecondType>().values(),
        &[
            (MARCH_14_NOON + NANOS_PER_SECOND) / 1000,
            (MARCH_14_NOON + 7 * NANOS_PER_SECOND) / 1000
        ]
    );

    for (row_index, row) in rows.iter().enumerate() {
        let expect_string = |name: &str, value: Option<&str>| {
            assert_eq!(
                strings(name)[row_index].as_deref(),
                value,
                "column {name}, row {row_index}"
            );
        };
        expect_string(
            schema::TRACE_ID,
            Some(&crate::contract::id_hex(&row.trace_id)),
        );
        expect_string(
            schema::SPAN_ID,
            Some(&crate::contract::id_hex(&row.span_id)),
        );
        expect_string(schema::REQUEST_ID, Some(&row.request_id));
        expect_string(schema::SERVICE_NAME, Some(&row.service_name));
        expect_string(schema::TASK_TYPE, row.task_type.as_deref());
        expect_string(schema::BILLING_GROUP, row.billing_group.as_deref());
        expect_string(schema::PROVIDER, row.provider.as_deref());
        expect_string(schema::ORIGINAL_MODEL, row.original_model.as_deref());
        expect_string(schema::RETRY_MODEL, row.retry_model.as_deref());
        expect_string(schema::RESPONSE_MODEL, row.response_model.as_deref());
        expect_string(schema::ORIGINAL_FAMILY, row.original_family.as_deref());
        expect_string(schema::RETRY_FAMILY, row.retry_family.as_deref());
        expect_string(schema::PRICING_VERSION, row.pricing_version.as_deref());
        expect_string(schema::PRICING_SOURCE, row.pricing_source.as_deref());
        expect_string(schema::PRICING_DIGEST, row.pricing_digest.as_deref());
        expect_string(schema::SPEND_CLASS, Some(row.spend_class.as_str()));
        expect_string(schema::DECISION, Some(row.decision.as_str()));
        expect_string(schema::DECISION_REASON, Some(&row.decision_reason));
        expect_string(
            schema::UNAUDITED_REASON,
            row.unaudited_reason.map(|r| r.as_str()),
        );
        expect_string(schema::ERROR_TYPE, row.error_type.as_deref());
        expect_string(
            schema::SDK_DECISION_REASON,
            row.sdk_decision_reason.as_deref(),
        );
        expect_string(schema::ATTEMPT_SOURCE, Some(row.attempt_source.as_str()));
        expect_string(schema::ENVELOPE_SOURCE, row.envelope_source.as_deref());
    }
    assert_eq!(
        strings(schema::ATTEMPT_SOURCE),
        [Some("single".to_owned()), Some("declared".to_owned())]
    );
    assert_eq!(
        strings(schema::ENVELOPE_SOURCE),
        [None, Some("policy:support-summaries".to_owned())]
    );

    assert_eq!(int64s(schema::INPUT_TOKENS), [None, Some(1200)]);
    assert_eq!(int64s(schema::CACHED_INPUT_TOKENS), [None, Some(200)]);
    assert_eq!(int64s(schema::OUTPUT_TOKENS), [None, Some(350)]);
    assert_eq!(int64s(schema::OUTPUT_CAP), [None, Some(1024)]);

    let attempt_index = col(schema::ATTEMPT_INDEX);
    assert_eq!(attempt_index.as_primitive::<Int32Type>().values(), &[0, 2]);
    let max_attempts = col(schema::MAX_ATTEMPTS_AFTER_FIRST);
    let max_attempts = max_attempts.as_primitive::<Int32Type>();
    assert!(max_attempts.is_null(0));
    assert_eq!(max_attempts.value(1), 3);

    // Whole ten-thousandths of a dollar, at scale 18.
    let bp = |ten_thousandths: i128| Some(ten_thousandths * 100_000_000_000_000);
    let exact = Some(2_806_800_000_000_000);
    assert_eq!(money(schema::PLANNED_ATTEMPT_USD), [None, bp(31)]);
    assert_eq!(money(schema::ACTUAL_ATTEMPT_USD), [None, exact]);
    assert_eq!(money(schema::ESTIMATED_INCREMENTAL_USD), [None, exact]);
    assert_eq!(money(schema::CUMULATIVE_INCREMENTAL_USD), [None, bp(162)]);
    assert_eq!(money(schema::REMAINING_ENVELOPE_USD), [None, bp(-12)]);
    assert_eq!(money(schema::MAX_INCREMENTAL_USD), [None, bp(150)]);
    assert_eq!(money(schema::GROUP_RATIO), [None, bp(15_000)]);
    assert_eq!(money(schema::SDK_ESTIMATED_INCREMENTAL_USD), [None, bp(28)]);
    assert_eq!(money(schema::SDK_REMAINING_ENVELOPE_USD), [None, bp(-11)]);

    let checked_at = col(schema::PRICING_CHECKED_AT);
    let checked_at = checked_at.as_primitive::<Date32Type>();
    assert!(checked_at.is_null(0));
    assert_eq!(checked_at.value(1), 20_148, "2025-03-01 is day 20148");

    let audited = col(schema::AUDITED);
    let audited = audited.as_boolean();
    assert!(!audited.value(0));
    assert!(audited.value(1));
    let reached = col(schema::OUTPUT_REACHED_CLIENT);
    let reached = reached.as_boolean();
    assert!(reached.is_null(0));
    assert!(reached.is_valid(1) && !reached.value(1));

    let violations = col(schema::VIOLATIONS);
    let violations = violations.as_list::<i32>();
    assert!(violations.is_valid(0));
    assert_eq!(violations.value(0).len(), 0);
    let second = violations.value(1);
    let second = second.as_string::<i32>();
    let second: Vec<&str> = second.iter().map(|v| v.expect("item not null")).collect();
    assert_eq!(second, ["over_envelope", "sdk_estimate_mismatch"]);
}

#[test]
fn money_too_large_for_the_column_is_written_as_null() {
    let mut row = retry_at(MARCH_14_NOON, 1);
    row.cumulative_incremental_usd = Some(Decimal::MAX);
    let batch = rows_to_batch(&[row]).expect("batch builds despite the overflow");
    let column = batch
        .column_by_name(schema::CUMULATIVE_INCREMENTAL_USD)
        .expect("column present");
    assert!(column.is_null(0));
    let actual = batch
        .column_by_name(schema::ACTUAL_ATTEMPT_USD)
        .expect("column present");
    assert!(actual.is_valid(0));
}

#[test]
fn times_are_truncated_to_microseconds_and_partitioned_by_the_untruncated_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sink = ParquetSink::new(dir.path(), ParquetExporterConfig::default()).expect("sink");
    // The last nanosecond of 2025-03-14, and a start 999 ns past a microsecond.
    let midnight = MARCH_14_NOON + ONE_DAY / 2;
    let mut last = retry_at(midnight - 1, 1);
    last.end_time = midnight + 1_999;
    sink.write(&[last, retry_at(MARCH_14_NOON + 1_999, 2)])
        .expect("write");
    let files = sink.close().expect("close");

    let partition = |f: &PathBuf| f.parent().and_then(Path::file_name).map(|n| n.to_owned());
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(
        partition(&files[0]).as_deref(),
        Some("date=2025-03-14".as_ref())
    );
    let (_, batch) = read_file(&files[0]);
    let micros = |name: &str| {
        let column = batch.column_by_name(name).expect("column");
        column
            .as_primitive::<TimestampMicrosecondType>()
            .values()
            .to_vec()
    };
    assert_eq!(
        micros(schema::EVENT_TIME),
        [midnight / 1000 - 1, MARCH_14_NOON / 1000 + 1]
    );
    assert_eq!(
        micros(schema::END_TIME),
        [
            midnight / 1000 + 1,
            (MARCH_14_NOON + 2 * NANOS_PER_SECOND) / 1000 + 1
        ]
    );
}

#[test]
fn rows_of_two_dates_land_in_two_partitions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sink = ParquetSink::new(dir.path(), ParquetExporterConfig::default()).expect("sink");
    sink.write(&[
        retry_at(MARCH_14_NOON, 1),
        retry_at(MARCH_14_NOON + ONE_DAY, 1),
        retry_at(MARCH_14_NOON + 3_600 * NANOS_PER_SECOND, 2),
    ])
    .expect("write");
    assert_eq!(sink.open_files(), 2);
    let table = sink.table_dir().to_path_buf();
    let files = sink.close().expect("close");

    let partitions: Vec<String> = files
        .iter()
        .map(|f| {
            let dir = f.parent().expect("file has a partition dir");
            assert_eq!(dir.parent(), Some(table.as_path()));
            dir.file_name()
                .expect("named")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(partitions, ["date=2025-03-14", "date=2025-03-15"]);
    assert_eq!(table, dir.path().join("attempts"));
    assert_eq!(read_file(&files[0]).1.num_rows(), 2);
    assert_eq!(read_file(&files[1]).1.num_rows(), 1);
    for file in &files {
        let name = file.file_name().expect("named").to_string_lossy();
        assert!(
            name.starts_with("part-") && name.ends_with(".parquet"),
            "{name}"
        );
    }
}

#[test]
fn rotation_by_rows_splits_files_and_keeps_every_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sink = ParquetSink::new(dir.path(), small_files(3)).expect("sink");
    let rows: Vec<AttemptRow> = (0..10).map(|i| retry_at(MARCH_14_NOON, i)).collect();

    let mut files = sink.write(&rows[..4]).expect("first write");
    assert_eq!(files.len(), 1, "the fourth row opens a second file");
    files.extend(sink.write(&rows[4..]).expect("second write"));
    assert_eq!(files.len(), 3);
    let stats = sink.stats();
    assert_eq!((stats.rows_written, stats.rows_open), (9, 1));
    files.extend(sink.close().expect("close"));

    assert_eq!(files.len(), 4);
    let sizes: Vec<usize> = files.iter().map(|f| read_file(f).1.num_rows()).collect();
    assert_eq!(sizes, [3, 3, 3, 1]);
    let indexes: Vec<i32> = files
        .iter()
        .flat_map(|f| {
            let batch = read_file(f).1;
            let column = batch
                .column_by_name(schema::ATTEMPT_INDEX)
                .expect("column present")
                .clone();
            column.as_primitive::<Int32Type>().values().to_vec()
        })
        .collect();
    assert_eq!(
        indexes,
        (0..10).collect::<Vec<_>>(),
        "rows keep their order"
    );
}

#[test]
fn rotation_by_bytes_completes_a_file_per_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = ParquetExporterConfig {
        max_bytes_per_file: 1,
        ..ParquetExporterConfig::default()
    };
    let mut sink = ParquetSink::new(dir.path(), options).expect("sink");
    let first = sink.write(&[retry_at(MARCH_14_NOON, 1)]).expect("write");
    let second = sink.write(&[retry_at(MARCH_14_NOON, 2)]).expect("write");
    assert_eq!((first.len(), second.len()), (1, 1));
    assert_eq!(sink.open_files(), 0);
    assert_eq!(total_rows(&[first, second].concat()), 2);
}

#[test]
fn files_older_than_max_age_are_completed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sink = ParquetSink::new(dir.path(), ParquetExporterConfig::default()).expect("sink");
    sink.write(&[retry_at(MARCH_14_NOON, 1)]).expect("write");

    let now = Instant::now();
    assert!(sink.rotate_expired(now).expect("rotate").is_empty());
    let files = sink
        .rotate_expired(now + Duration::from_secs(61))
        .expect("rotate");
    assert_eq!(files.len(), 1);
    assert_eq!(sink.open_files(), 0);
    let stats = sink.stats();
    assert_eq!((stats.rows_written, stats.files_completed), (1, 1));
}

#[test]
fn files_are_zstd_with_dictionaries_for_repeated_values() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sink = ParquetSink::new(dir.path(), ParquetExporterConfig::default()).expect("sink");
    sink.write(&[retry_at(MARCH_14_NOON, 1), retry_at(MARCH_14_NOON, 2)])
        .expect("write");
    let files = sink.close().expect("close");
    let (metadata, _) = read_file(&files[0]);

    let row_group = metadata.row_group(0);
    for column in row_group.columns() {
        assert_eq!(
            column.compression_codec(),
            CompressionCodec::ZSTD,
            "{}",
            column.column_path()
        );
    }
    let encodings = |name: &str| -> Vec<Encoding> {
        row_group
            .columns()
            .iter()
            .find(|c| c.column_path().string() == name)
            .unwrap_or_else(|| panic!("column {name} present"))
            .encodings()
            .collect()
    };
    assert!(encodings(schema::DECISION).contains(&Encoding::RLE_DICTIONARY));
    assert!(encodings(schema::RETRY_MODEL).contains(&Encoding::RLE_DICTIONARY));
    assert!(!encodings(schema::SPAN_ID).contains(&Encoding::RLE_DICTIONARY));
    assert!(!encodings(schema::EVENT_TIME).contains(&Encoding::RLE_DICTIONARY));
    assert!(!encodings(schema::END_TIME).contains(&Encoding::RLE_DICTIONARY));
}

#[test]
fn open_files_stay_hidden_until_close_and_no_temp_remains() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sink = ParquetSink::new(dir.path(), ParquetExporterConfig::default()).expect("sink");
    sink.write(&[retry_at(MARCH_14_NOON, 1)]).expect("write");

    let while_open = files_under(dir.path());
    assert_eq!(while_open.len(), 1);
    assert!(is_temp(&while_open[0]));
    let name = while_open[0].file_name().expect("named").to_string_lossy();
    assert!(name.starts_with('.'), "temporary file is hidden: {name}");

    let files = sink.close().expect("close");
    assert_eq!(files_under(dir.path()), files);
}

#[test]
fn dropping_without_close_leaves_no_visible_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sink = ParquetSink::new(dir.path(), ParquetExporterConfig::default()).expect("sink");
    sink.write(&[retry_at(MARCH_14_NOON, 1)]).expect("write");
    drop(sink);
    assert!(files_under(dir.path()).iter().all(|f| is_temp(f)));
}

#[test]
fn unwritable_output_dir_is_named_in_the_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let not_a_dir = dir.path().join("plain-file");
    fs::write(&not_a_dir, b"").expect("create plain file");

    let Err(error) = ParquetSink::new(&not_a_dir, ParquetExporterConfig::default()) else {
        panic!("a file cannot hold the attempts table");
    };
    assert!(matches!(error, ParquetSinkError::Create { .. }));
    let message = error.to_string();
    let expected = format!("cannot create {}", not_a_dir.join("attempts").display());
    assert!(message.starts_with(&expected), "{message}");
}

#[test]
fn zero_bounds_are_rejected() {
    let dir = tempfile::tempdir().expect("tempdir");
    for options in [
        small_files(0),
        ParquetExporterConfig {
            row_group_rows: 0,
            ..ParquetExporterConfig::default()
        },
        ParquetExporterConfig {
            max_bytes_per_file: 0,
            ..ParquetExporterConfig::default()
        },
    ] {
        assert!(matches!(
            ParquetSink::new(dir.path(), options),
            Err(ParquetSinkError::InvalidConfig(_))
        ));
    }
}

#[test]
fn a_sink_dropped_without_writing_leaves_no_directory_it_created() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = dir.path().join("data").join("nested");
    drop(ParquetSink::new(&output, ParquetExporterConfig::default()).expect("sink"));
    assert!(
        !dir.path().join("data").exists(),
        "a failed run's dirs stay"
    );

    // An output that was there stays, and so does one a closed sink made.
    drop(ParquetSink::new(dir.path(), ParquetExporterConfig::default()).expect("sink"));
    assert!(dir.path().exists());
    let sink = ParquetSink::new(&output, ParquetExporterConfig::default()).expect("sink");
    sink.close().expect("close");
    assert!(output.join("attempts").is_dir());
}

#[test]
fn a_sink_dropped_after_writing_keeps_its_directories() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = dir.path().join("data");
    let mut sink = ParquetSink::new(&output, ParquetExporterConfig::default()).expect("sink");
    sink.write(&[retry_at(MARCH_14_NOON, 1)]).expect("write");
    sink.flush_all().expect("flush");
    drop(sink);
    assert_eq!(files_under(&output).len(), 1);
}

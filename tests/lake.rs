//! The `attempts` table read the way a data lake reads it: Spark (local, default settings),
//! DuckDB and polars over what `replay` wrote for the example and for a generated input
//! (tests/lake/engines.py). Each engine must see every row, `date` as a date partition,
//! `event_time` as a timestamp and the money as decimal(38, 18), and add the money up to the
//! same digits as the collector's rows and its `report`.
//!
//! Needs Java 17 and the Python packages pyspark, duckdb and polars (`.ci/run` installs them in
//! its virtual environment and runs this test): it is ignored by a plain `cargo test`, and fails,
//! never skips, when run without them.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use rust_decimal::Decimal;
use serde_json::Value;

use common::child::{binary, succeeded};
use common::replay::Replay;
use common::{read_table, Row};

const ENGINES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/lake/engines.py");
const GENERATED_SPANS: usize = 40_000;
const MONEY: [&str; 3] = [
    "estimated_incremental_usd",
    "planned_attempt_usd",
    "actual_attempt_usd",
];
/// The column types each engine must read, as it names them.
const TYPES: [(&str, [(&str, &str); 3]); 3] = [
    (
        "spark",
        [
            ("date", "date"),
            ("event_time", "timestamp"),
            ("money", "decimal(38,18)"),
        ],
    ),
    (
        "duckdb",
        [
            ("date", "DATE"),
            ("event_time", "TIMESTAMP WITH TIME ZONE"),
            ("money", "DECIMAL(38,18)"),
        ],
    ),
    (
        "polars",
        [
            ("date", "Date"),
            ("event_time", "Datetime(time_unit='us', time_zone='UTC')"),
            ("money", "Decimal(precision=38, scale=18)"),
        ],
    ),
];

/// `report --format json` over `output`.
fn report(output: &Path) -> Value {
    let mut command = binary();
    command
        .arg("report")
        .arg(output)
        .args(["--format", "json", "--top", "1"]);
    let text = succeeded("report", &command.output().expect("run report"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("report JSON: {e}: {text}"))
}

/// What every engine must find in one output: taken from the collector's own rows.
#[derive(Debug)]
struct Expected {
    keys: Vec<(String, String, i64)>,
    /// Exact sums of [`MONEY`] (`None`: every value null), then of the retries' incremental USD.
    sums: BTreeMap<String, Option<Decimal>>,
    event_micros: (i64, i64),
}

fn decimal(text: &str) -> Decimal {
    text.parse::<Decimal>()
        .unwrap_or_else(|e| panic!("{text:?} is not a decimal: {e}"))
        .normalize()
}

fn sum<'a>(values: impl Iterator<Item = &'a String>) -> Option<Decimal> {
    values
        .filter(|v| *v != "NULL")
        .map(|v| decimal(v))
        .reduce(|a, b| a.checked_add(b).expect("sum fits a decimal"))
}

fn expected(rows: &[Row]) -> Expected {
    let mut keys: Vec<(String, String, i64)> = rows
        .iter()
        .map(|r| {
            (
                r["trace_id"].clone(),
                r["span_id"].clone(),
                r["attempt_index"].parse().expect("attempt_index"),
            )
        })
        .collect();
    keys.sort();
    let mut sums: BTreeMap<String, Option<Decimal>> = MONEY
        .iter()
        .map(|&c| (c.to_owned(), sum(rows.iter().map(|r| &r[c]))))
        .collect();
    let retries = rows
        .iter()
        .filter(|r| r["attempt_index"] != "0")
        .map(|r| &r["estimated_incremental_usd"]);
    sums.insert("retry_incremental_usd".to_owned(), sum(retries));
    let micros: Vec<i64> = rows
        .iter()
        .map(|r| r["event_time"].parse().expect("event_time micros"))
        .collect();
    Expected {
        keys,
        sums,
        event_micros: (
            *micros.iter().min().expect("rows"),
            *micros.iter().max().expect("rows"),
        ),
    }
}

/// Runs tests/lake/engines.py over `outputs` (one Spark session for all).
fn read_with_engines(outputs: &[&Path]) -> Vec<Value> {
    let python = common::python::program();
    let mut command = common::python::python();
    command.arg(ENGINES).args(outputs);
    let output = command.output().unwrap_or_else(|e| {
        panic!(
            "cannot run {python} ({e}): this test reads the table with pyspark, duckdb and polars"
        )
    });
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_ne!(
        output.status.code(),
        Some(3),
        "{python} lacks a lake engine: {stderr}Install pyspark, duckdb and polars (bash .ci/run \
         makes a virtual environment with them) and set {} to its python.",
        common::python::PYTHON_ENV
    );
    assert!(output.status.success(), "{ENGINES} failed: {stderr}");
    serde_json::from_slice(&output.stdout).expect("engines.py prints JSON")
}

fn assert_engine_read(name: &str, engine: &Value, expected: &Expected, report: &Value) {
    let types = &engine["types"];
    let (_, want) = TYPES
        .iter()
        .find(|(e, _)| *e == name)
        .expect("known engine");
    for (column, data_type) in want {
        let columns: Vec<&str> = if *column == "money" {
            MONEY.to_vec()
        } else {
            vec![column]
        };
        for c in columns {
            assert_eq!(types[c].as_str(), Some(*data_type), "{name}: type of {c}");
        }
    }

    assert_eq!(engine["rows"], expected.keys.len(), "{name}: row count");
    let keys: Vec<(String, String, i64)> =
        serde_json::from_value(engine["keys"].clone()).expect("keys");
    assert!(
        keys == expected.keys,
        "{name}: the (trace_id, span_id, attempt_index) of its rows differ from the files'"
    );

    for (column, want) in &expected.sums {
        let got = engine["sums"][column].as_str().map(decimal);
        assert_eq!(got, *want, "{name}: sum of {column}");
    }
    let reported = decimal(report["total"]["incremental_usd"].as_str().expect("total"));
    assert_eq!(
        expected.sums["retry_incremental_usd"].unwrap_or_default(),
        reported,
        "{name}: the report's incremental USD"
    );

    let range = (
        engine["min_micros"].as_i64().expect("min"),
        engine["max_micros"].as_i64().expect("max"),
    );
    assert_eq!(range, expected.event_micros, "{name}: event_time range");
    assert_eq!(
        engine["outside_partition"], 0,
        "{name}: rows whose event_time is not in their date partition"
    );
}

#[test]
#[ignore = "needs Java 17 and Python's pyspark, duckdb and polars (run by .ci/run)"]
fn spark_duckdb_and_polars_read_every_row_and_the_same_money() {
    let example = Replay::example().run().ok();
    let generated = Replay::new()
        .jsonl(&common::spans::jsonl(16, GENERATED_SPANS))
        .run()
        .ok();
    // (output, partitions it must have): the generated requests run past midnight, so the
    // engines meet more than one value of `date`.
    let outputs = [(example.out(), 1), (generated.out(), 2)];

    let paths: Vec<&Path> = outputs.iter().map(|(p, _)| *p).collect();
    let engines = read_with_engines(&paths);
    assert_eq!(engines.len(), outputs.len());
    for ((output, partitions), read) in outputs.iter().zip(&engines) {
        let (_, rows) = read_table(output);
        let found: BTreeSet<&str> = rows.iter().map(|r| r["_partition"].as_str()).collect();
        assert_eq!(found.len(), *partitions, "{}: {found:?}", output.display());
        assert!(rows.iter().any(|r| r["attempt_index"] != "0"), "retries");
        let expected = expected(&rows);
        let report = report(output);
        assert_eq!(report["total"]["attempts"], rows.len(), "report attempts");
        for name in ["spark", "duckdb", "polars"] {
            assert_engine_read(name, &read[name], &expected, &report);
        }
    }
}

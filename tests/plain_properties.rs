//! Attempts inferred from plain instrumentation (SPEC §2) do not depend on how spans reach the
//! collector: random traces of every plain shape give the same rows in `replay`, and in
//! `serve` on one shard or two with the spans shuffled, one per export or split at random.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::collector::{config, served_rows_and_metrics};
use common::plain::{self, PlainSpan};
use common::replay::Replay;
use common::spans::Rng;
use common::Row;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

const SEEDS: std::ops::Range<u64> = 1..11;
const TRACES_PER_SEED: u64 = 40;

fn sorted(mut rows: Vec<Row>) -> Vec<Row> {
    rows.sort();
    rows
}

/// The rows `replay` writes for the spans in lines cut at random.
fn replayed(spans: &[PlainSpan], rng: &mut Rng) -> Vec<Row> {
    sorted(Replay::new().jsonl(&plain::jsonl(spans, rng)).rows())
}

/// The rows `serve` writes with `workers` shards, and the spans it counted as duplicates. Every
/// span is sent before the collector stops, and stopping judges what it holds, so a trace is
/// inferred whole as long as its spans all arrive within `group_wait` of each other: the wait
/// is far longer than the sending.
async fn served(workers: usize, exports: Vec<ExportTraceServiceRequest>) -> (Vec<Row>, u64) {
    let out = tempfile::tempdir().unwrap();
    let mut config = config(out.path());
    config.processors.retry_spend.workers = workers;
    config.processors.retry_spend.group_wait = Duration::from_secs(120);
    let (rows, metrics) = served_rows_and_metrics(config, exports).await;
    let duplicates = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("retry_spend_duplicate_spans_total ")?
                .parse()
                .ok()
        })
        .unwrap_or_default();
    (sorted(rows), duplicates)
}

/// The rows of one side missing from the other, for a failure message.
fn difference<'a>(a: &'a [Row], b: &[Row]) -> Vec<&'a Row> {
    a.iter().filter(|row| !b.contains(row)).collect()
}

fn assert_same(expected: &[Row], rows: &[Row], what: &str) {
    assert!(
        rows == expected,
        "{what}: {} rows served, {} replayed\nonly replayed: {:#?}\nonly served: {:#?}",
        rows.len(),
        expected.len(),
        difference(expected, rows),
        difference(rows, expected),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_shapes_give_the_replay_rows_in_serve_whatever_the_arrival() {
    let mut sources: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut duplicate_calls = 0;
    for seed in SEEDS {
        let spans = plain::spans(seed, TRACES_PER_SEED);
        // `Rng` sets the seed's lowest bit: distinct odd seeds give distinct orders.
        let mut rng = Rng::new(2 * seed + 1);
        let expected = replayed(&spans, &mut rng);
        for row in &expected {
            for column in ["attempt_source", "usage_source"] {
                *sources
                    .entry((column.to_owned(), row[column].clone()))
                    .or_default() += 1;
            }
        }
        // Each seed on one shard and on two, each arrival on both across the seeds.
        let arrivals = [plain::one_per_export, plain::random_exports];
        for (workers, arrival) in [(1, seed % 2), (2, 1 - seed % 2)] {
            let exports = arrivals[arrival as usize](&spans, &mut rng);
            let (rows, duplicates) = served(workers, exports).await;
            // One span per export re-sends none: its duplicates are calls instrumented twice.
            if arrival == 0 {
                duplicate_calls += duplicates;
            }
            let how = ["one span per export", "random exports"][arrival as usize];
            assert_same(
                &expected,
                &rows,
                &format!("seed {seed}, {workers} shards, {how}"),
            );
        }
    }
    assert!(duplicate_calls > 0, "some calls are instrumented twice");
    for (column, value) in [
        ("attempt_source", "http_retry"),
        ("attempt_source", "resend_count"),
        ("attempt_source", "sibling_retry"),
        ("attempt_source", "single"),
        ("attempt_source", "declared"),
        ("usage_source", "borrowed"),
        ("usage_source", "call"),
        ("usage_source", "span"),
    ] {
        assert!(
            sources.contains_key(&(column.to_owned(), value.to_owned())),
            "no row has {column} {value}: {sources:?}"
        );
    }
}

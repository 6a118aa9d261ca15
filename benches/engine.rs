//! Micro-benchmarks of the engine's hot path, per span or per row.
//!
//! `cargo bench --bench engine` (a few minutes). Inputs come from `examples/retries.jsonl`,
//! the bundled example spans, copied with fresh trace ids up to a 512-span export request.

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;
use prost::Message;

use retry_spend_collector::assemble::{Assembler, AssemblyBounds, Request};
use retry_spend_collector::contract::otlp_json::parse_request;
use retry_spend_collector::contract::wire::read_export;
use retry_spend_collector::contract::{service_name, AttributeKeys, SpanFacts};
use retry_spend_collector::engine::{span_facts, Engine};
use retry_spend_collector::pricing::PricingBook;
use retry_spend_collector::processor::{Arrival, Processor};
use retry_spend_collector::record::AttemptRow;
use retry_spend_collector::rules::{evaluate, RulesConfig};
use retry_spend_collector::sinks::parquet::rows_to_batch;
use retry_spend_collector::sinks::parquet::schema::HIGH_CARDINALITY_COLUMNS;

const SPANS_PER_REQUEST: usize = 512;
const ROWS_PER_BATCH: usize = 4096;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The export requests of `examples/retries.jsonl`.
fn example_requests() -> Vec<ExportTraceServiceRequest> {
    let text = std::fs::read_to_string(root().join("examples/retries.jsonl"))
        .expect("examples/retries.jsonl");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| parse_request(l.as_bytes()).expect("example line parses"))
        .collect()
}

fn book() -> PricingBook {
    retry_spend_collector::load::pricing_dir(&root().join("config/pricing"))
        .expect("pricing snapshots load")
}

/// One export request of `SPANS_PER_REQUEST` spans: the example spans copied, each copy with
/// its own trace ids (so no copy is a duplicate of another), under one resource.
fn request_512() -> ExportTraceServiceRequest {
    let examples = example_requests();
    let resource: Option<Resource> = examples[0].resource_spans[0].resource.clone();
    let scope = examples[0].resource_spans[0].scope_spans[0].scope.clone();
    let mut spans = Vec::with_capacity(SPANS_PER_REQUEST);
    'fill: for copy in 0u32.. {
        for request in &examples {
            for span in request
                .resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .flat_map(|s| &s.spans)
            {
                if spans.len() == SPANS_PER_REQUEST {
                    break 'fill;
                }
                let mut span = span.clone();
                span.trace_id[..4].copy_from_slice(&copy.to_be_bytes());
                spans.push(span);
            }
        }
    }
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource,
            scope_spans: vec![ScopeSpans {
                scope,
                spans,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

fn engine() -> Engine {
    Engine {
        book: book(),
        ..Engine::default()
    }
}

/// Every logical request of the examples, as the processor assembles them.
fn example_logical_requests() -> Vec<Request> {
    let mut requests = Vec::new();
    let spans = example_requests();
    Processor::rows_of(
        engine(),
        spans.iter().flat_map(span_facts),
        std::time::Instant::now(),
        |request, _, _| requests.push(request.clone()),
    );
    requests
}

/// `ROWS_PER_BATCH` rows: the examples' rows repeated, with unique trace and span ids so the
/// id columns compress like real ones.
fn rows() -> Vec<AttemptRow> {
    let book = book();
    let config = RulesConfig::default();
    let base: Vec<AttemptRow> = example_logical_requests()
        .iter()
        .flat_map(|r| evaluate(r, &book, &config))
        .collect();
    (0..ROWS_PER_BATCH)
        .map(|i| {
            let mut row = base[i % base.len()].clone();
            let n = i as u64;
            row.trace_id = u128::from(n.wrapping_mul(0x9e37_79b9_7f4a_7c15)).to_be_bytes();
            row.span_id = n.wrapping_mul(0xc2b2_ae3d_27d4_eb4f).to_be_bytes();
            row.event_time += i as i64 * 1_000_000_000;
            row.end_time += i as i64 * 1_000_000_000;
            row
        })
        .collect()
}

/// The sink's writer settings (`src/sinks/parquet/sink.rs`).
fn writer_properties() -> WriterProperties {
    let mut builder = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_dictionary_enabled(true)
        .set_max_row_group_row_count(Some(65_536));
    for column in HIGH_CARDINALITY_COLUMNS {
        builder = builder.set_column_dictionary_enabled(ColumnPath::from(*column), false);
    }
    builder.build()
}

fn contract(c: &mut Criterion) {
    let request = request_512();
    let encoded = request.encode_to_vec();
    let mut group = c.benchmark_group("contract");
    group.throughput(Throughput::Elements(SPANS_PER_REQUEST as u64));
    group.bench_function("protobuf_decode_512_spans", |b| {
        b.iter(|| ExportTraceServiceRequest::decode(black_box(&encoded[..])).unwrap())
    });
    // What `serve`'s receivers run on every export: the protobuf bytes read straight into facts.
    let bytes = bytes::Bytes::from(encoded.clone());
    group.bench_function("wire_read_512_spans", |b| {
        b.iter(|| {
            read_export(black_box(&bytes), false, &AttributeKeys::NONE)
                .unwrap()
                .spans
                .len()
        })
    });
    group.bench_function("span_facts_512_spans", |b| {
        b.iter(|| span_facts(black_box(&request)).count())
    });
    let service = service_name(
        request.resource_spans[0]
            .resource
            .as_ref()
            .map_or(&[][..], |r| r.attributes.as_slice()),
    );
    let spans = &request.resource_spans[0].scope_spans[0].spans;
    group.bench_function("from_span_512_spans_collect", |b| {
        b.iter(|| {
            spans
                .iter()
                .map(|s| SpanFacts::from_span(black_box(s), &service.clone()))
                .collect::<Vec<_>>()
        })
    });
    // What a `serve` shard does with one export: the processor every driver runs.
    group.bench_function("decode_process_512_spans", |b| {
        let engine = engine();
        let now = std::time::Instant::now();
        b.iter_batched(
            || {
                Processor::new(
                    engine.clone(),
                    Assembler::new(&AssemblyBounds::default(), 1),
                )
            },
            |mut processor| {
                let request = ExportTraceServiceRequest::decode(black_box(&encoded[..])).unwrap();
                for facts in span_facts(&request) {
                    processor.offer(facts, now, Arrival::Live);
                }
                processor.drain_all();
                let mut rows = Vec::with_capacity(SPANS_PER_REQUEST);
                processor.evaluate(&mut rows, usize::MAX, |_, _, _| {});
                rows.len()
            },
            BatchSize::SmallInput,
        )
    });
    // The same once the shard's memory is in steady state: every export's requests wait out
    // `group_wait` (as SDKs that set no `attempt_count` make them), and the finished-request
    // cache is full, so each evaluated request forgets the oldest.
    group.bench_function("steady_state_512_spans", |b| {
        let facts: Vec<SpanFacts> = span_facts(&request).collect();
        let bounds = AssemblyBounds::default();
        let mut processor = Processor::new(engine(), Assembler::new(&bounds, 1));
        let mut now = std::time::Instant::now();
        let mut round = 0u64;
        let mut rows = Vec::with_capacity(SPANS_PER_REQUEST);
        b.iter(|| {
            round += 1;
            for span in &facts {
                let mut span = span.clone();
                span.trace_id[8..].copy_from_slice(&round.to_be_bytes());
                processor.offer(span, now, Arrival::Live);
            }
            now += bounds.group_wait + Duration::from_millis(1);
            processor.expire(now);
            rows.clear();
            processor.evaluate(&mut rows, usize::MAX, |_, _, _| {});
            rows.len()
        })
    });
    group.finish();
}

fn rules(c: &mut Criterion) {
    let book = book();
    let config = RulesConfig::default();
    let requests = example_logical_requests();
    let three = requests
        .iter()
        .find(|r| r.attempts.len() == 3 && r.logical.is_some())
        .expect("an example request with 3 attempts");
    let mut group = c.benchmark_group("rules");
    group.throughput(Throughput::Elements(3));
    group.bench_function("evaluate_3_attempts", |b| {
        b.iter(|| evaluate(black_box(three), &book, &config))
    });
    let attempts: u64 = requests.iter().map(|r| r.attempts.len() as u64).sum();
    group.throughput(Throughput::Elements(attempts));
    group.bench_function("evaluate_all_examples", |b| {
        b.iter(|| {
            requests
                .iter()
                .map(|r| evaluate(black_box(r), &book, &config).len())
                .sum::<usize>()
        })
    });
    group.finish();
}

fn parquet(c: &mut Criterion) {
    let rows = rows();
    let properties = writer_properties();
    let mut group = c.benchmark_group("parquet");
    group.throughput(Throughput::Elements(rows.len() as u64));
    group.bench_function("rows_to_batch_4096_rows", |b| {
        b.iter(|| rows_to_batch(black_box(&rows)).unwrap())
    });
    let batch = rows_to_batch(&rows).unwrap();
    group.bench_function("write_zstd_4096_rows", |b| {
        b.iter_batched(
            || Vec::with_capacity(1 << 20),
            |buffer| {
                let mut writer =
                    ArrowWriter::try_new(buffer, batch.schema(), Some(properties.clone())).unwrap();
                writer.write(black_box(&batch)).unwrap();
                writer.into_inner().unwrap().len()
            },
            BatchSize::SmallInput,
        )
    });
    group.bench_function("rows_to_batch_and_write_4096_rows", |b| {
        b.iter(|| {
            let batch = rows_to_batch(black_box(&rows)).unwrap();
            let mut writer =
                ArrowWriter::try_new(Vec::new(), batch.schema(), Some(properties.clone())).unwrap();
            writer.write(&batch).unwrap();
            writer.into_inner().unwrap().len()
        })
    });
    group.finish();
    let bytes = {
        let mut writer =
            ArrowWriter::try_new(Vec::new(), batch.schema(), Some(properties.clone())).unwrap();
        writer.write(&batch).unwrap();
        writer.into_inner().unwrap().len()
    };
    println!(
        "parquet: {} rows → {bytes} bytes, {:.1} bytes per row (zstd, one row group)",
        rows.len(),
        bytes as f64 / rows.len() as f64
    );
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = contract, rules, parquet
}
criterion_main!(benches);

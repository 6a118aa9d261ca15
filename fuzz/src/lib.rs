//! What every OTLP fuzz target checks once its input has decoded into a request.
//!
//! The decoders are allowed to reject anything; once a request decodes, the rest of the engine
//! must take it without panicking and keep the contract's invariants (SPEC §4, §5), whatever the
//! attribute values are.

use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use retry_spend_collector::assemble::{Assembler, Grouper, Ready, Request};
use retry_spend_collector::engine::span_facts;
use retry_spend_collector::assemble::AssemblyBounds;
use retry_spend_collector::pricing::{PricingBook, Snapshot};
use retry_spend_collector::record::{AttemptRow, Decision, SpendClass};
use retry_spend_collector::rules::{evaluate, RulesConfig};
use retry_spend_collector::sinks::parquet::rows_to_batch;
use rust_decimal::Decimal;

/// The snapshot the product ships, so fuzzed envelopes that name it are priced for real.
pub const SHIPPED_SNAPSHOT: &[u8] = include_bytes!("../../config/pricing/2026-08-22-aiwave.json");

pub fn shipped_book() -> &'static PricingBook {
    static BOOK: OnceLock<PricingBook> = OnceLock::new();
    BOOK.get_or_init(|| {
        let snapshot = Snapshot::from_bytes(Path::new("2026-08-22-aiwave.json"), SHIPPED_SNAPSHOT)
            .expect("the shipped snapshot parses");
        let mut book = PricingBook::default();
        book.insert(snapshot).expect("one snapshot always inserts");
        book
    })
}

/// Runs a decoded request through both ways the product groups spans, `replay`'s and `serve`'s,
/// and checks every row and batch.
pub fn check_request(request: &ExportTraceServiceRequest) {
    let book = shipped_book();
    let config = RulesConfig::default();

    let mut grouper = Grouper::default();
    for facts in span_facts(request) {
        grouper.offer(facts);
    }
    let mut all_rows = Vec::new();
    for request in grouper.drain_all() {
        all_rows.extend(check_evaluation(&request, book, &config));
    }
    check_batch(&all_rows);

    // A small pending cap and finished cache exercise eviction and late-retry context too.
    let mut assembler = Assembler::new(
        &AssemblyBounds {
            group_wait: Duration::from_secs(10),
            max_pending_requests: 3,
            finished_cache_requests: 4,
            max_pending_bytes: 64 * 1024,
            ..AssemblyBounds::default()
        },
        1,
    );
    let now = Instant::now();
    let mut ready = Ready::default();
    for facts in span_facts(request) {
        assembler.offer(facts, now, &mut ready);
    }
    assembler.expire(now + Duration::from_secs(5), &mut ready);
    let mut live_rows = Vec::new();
    for request in ready.requests.iter().chain(&assembler.drain_all().requests) {
        live_rows.extend(check_evaluation(request, book, &config));
    }
    check_batch(&live_rows);
}

fn check_evaluation(
    request: &Request,
    book: &PricingBook,
    config: &RulesConfig,
) -> Vec<AttemptRow> {
    let rows = evaluate(request, book, config);
    assert_eq!(
        rows.len(),
        request.attempts.len(),
        "one row per new attempt"
    );
    let mut running = Some(Decimal::ZERO);
    let mut gap_or_unknown = false;
    for row in &rows {
        assert!(row.attempt_index >= 0);
        assert_eq!(
            row.attempt_index == 0,
            row.decision == Decision::FirstAttempt,
            "first_attempt is the decision of index 0 and only of it"
        );
        assert_eq!(row.attempt_index == 0, row.spend_class == SpendClass::Base);
        assert!(
            row.violations.windows(2).all(|w| w[0] < w[1]),
            "violations in SPEC order without duplicates: {:?}",
            row.violations
        );
        assert!(!row.decision_reason.is_empty());
        if row.attempt_index == 0 {
            assert_eq!(row.estimated_incremental_usd, Some(Decimal::ZERO));
            assert_eq!(row.cumulative_incremental_usd, Some(Decimal::ZERO));
        }
        if let (Some(max), Some(cum), Some(rem)) = (
            row.max_incremental_usd,
            row.cumulative_incremental_usd,
            row.remaining_envelope_usd,
        ) {
            assert_eq!(max.checked_sub(cum), Some(rem));
        }
        if row.audited && row.attempt_index > 0 {
            assert!(
                row.cumulative_incremental_usd.is_some(),
                "an audited retry has a known cumulative: {row:?}"
            );
        }
        // Without earlier context (a fresh grouper), the cumulative is the running sum.
        if request.evaluated.is_empty() && row.attempt_index > 0 {
            running = running
                .zip(row.estimated_incremental_usd)
                .and_then(|(a, b)| a.checked_add(b));
            if row.cumulative_incremental_usd.is_none() {
                gap_or_unknown = true;
            }
            if !gap_or_unknown {
                assert_eq!(row.cumulative_incremental_usd, running, "{row:?}");
            }
        }
    }
    rows
}

fn check_batch(rows: &[AttemptRow]) {
    let batch = rows_to_batch(rows).expect("every evaluated row fits the attempts schema");
    assert_eq!(batch.num_rows(), rows.len());
}

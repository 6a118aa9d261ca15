use std::time::Instant;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

use super::*;
use crate::contract::span_facts;
use crate::contract::{attr, kv};

/// A hostile exporter's request: far more attempts than any retry policy makes.
const HOSTILE_ATTEMPTS: usize = 200_000;

/// One export of `n` tiny attempt spans of the same request: same trace, same request id.
fn one_request_of(n: usize) -> ExportTraceServiceRequest {
    let spans = (0..n)
        .map(|i| Span {
            trace_id: vec![7; 16],
            span_id: (i as u64 + 1).to_be_bytes().to_vec(),
            start_time_unix_nano: i as u64,
            attributes: vec![
                kv(attr::REQUEST_ID, Value::StringValue("req-1".into())),
                kv(attr::ATTEMPT_INDEX, Value::IntValue(i as i64)),
            ],
            ..Default::default()
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

#[test]
fn two_hundred_thousand_attempts_of_one_request_are_grouped_in_linear_time() {
    let export = one_request_of(HOSTILE_ATTEMPTS);
    let mut grouper = Grouper::with_finished_capacity(1);
    for facts in span_facts(&export) {
        assert!(matches!(grouper.offer(facts), Offer::Attempt(_)));
    }
    let requests = grouper.drain_all();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].attempts.len(), HOSTILE_ATTEMPTS);
    for facts in span_facts(&export) {
        assert_eq!(grouper.offer(facts), Offer::Duplicate);
    }
}

#[test]
fn two_hundred_thousand_attempts_of_one_request_are_assembled_live_in_linear_time() {
    let export = one_request_of(HOSTILE_ATTEMPTS);
    let mut assembler = Assembler::new(&crate::assemble::AssemblyBounds::default(), 1);
    let mut ready = Ready::default();
    let now = Instant::now();
    for facts in span_facts(&export) {
        assembler.offer(facts, now, &mut ready);
    }
    let mut requests = ready.requests;
    requests.extend(assembler.drain_all().requests);
    // Memory stays bounded: the request is evaluated in parts of at most the cap.
    assert_eq!(
        requests.len(),
        HOSTILE_ATTEMPTS.div_ceil(MAX_ATTEMPTS_PER_REQUEST)
    );
    assert!(requests
        .iter()
        .all(|r| r.attempts.len() <= MAX_ATTEMPTS_PER_REQUEST));
    let total: usize = requests.iter().map(|r| r.attempts.len()).sum();
    assert_eq!(total, HOSTILE_ATTEMPTS, "every attempt is evaluated once");
}

#[test]
fn a_span_sent_again_is_a_duplicate_while_pending_and_once_evaluated() {
    let export = one_request_of(3);
    let mut grouper = Grouper::with_finished_capacity(10);
    for facts in span_facts(&export) {
        assert!(matches!(grouper.offer(facts), Offer::Attempt(_)));
    }
    for facts in span_facts(&export) {
        assert_eq!(grouper.offer(facts), Offer::Duplicate);
    }
    assert_eq!(grouper.drain_all()[0].attempts.len(), 3);
    for facts in span_facts(&export) {
        assert_eq!(grouper.offer(facts), Offer::Duplicate);
    }
    assert_eq!(grouper.pending_groups(), 0);
}

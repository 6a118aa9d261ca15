use super::*;
use crate::contract::{Count, EnvelopeFields, SpanKind};
use crate::record::AttemptSource;

const WAIT: Duration = Duration::from_secs(10);

fn options(max_pending: usize) -> AssemblyBounds {
    AssemblyBounds {
        group_wait: WAIT,
        max_pending_requests: max_pending,
        finished_cache_requests: 100,
        max_pending_bytes: u64::MAX,
    }
}

fn budget(bytes: usize) -> AssemblyBounds {
    AssemblyBounds {
        max_pending_bytes: bytes as u64,
        ..options(1_000)
    }
}

fn span(trace: u8, span_id: u8, kind: SpanKind, request: &str) -> SpanFacts {
    SpanFacts {
        trace_id: [trace; 16],
        span_id: [span_id; 8],
        parent_span_id: Some([trace; 8]),
        service_name: "svc".into(),
        start_time_unix_nano: u64::from(span_id),
        end_time_unix_nano: u64::from(span_id) + 1,
        kind,
        request_id: Some(request.into()),
        attempt_index: (kind == SpanKind::Attempt).then_some(i32::from(span_id) - 1),
        attempt_count: None,
        envelope: EnvelopeFields::default().into(),
        envelope_json: None,
        request_model: Some("glm-5".into()),
        response_model: None,
        provider: None,
        model_family: None,
        input_tokens: Count::Value(1),
        cached_input_tokens: Count::Missing,
        output_tokens: Count::Missing,
        output_cap: Count::Value(1),
        output_reached_client: None,
        error_type: None,
        sdk: None,
        captured: Default::default(),
        http: None,
        ..Default::default()
    }
}

fn attempt(trace: u8, n: u8) -> SpanFacts {
    span(trace, n, SpanKind::Attempt, "r")
}

fn logical(trace: u8, count: u32) -> SpanFacts {
    let mut l = span(trace, 100, SpanKind::LogicalRequest, "r");
    l.attempt_count = Some(count);
    l.parent_span_id = None;
    l
}

#[test]
fn group_is_ready_as_soon_as_attempt_count_attempts_arrived() {
    let mut a = Assembler::new(&options(10), 1);
    let t = Instant::now();
    let mut ready = Ready::default();
    a.offer(logical(1, 2), t, &mut ready);
    a.offer(attempt(1, 1), t, &mut ready);
    assert!(ready.requests.is_empty());
    a.offer(attempt(1, 2), t, &mut ready);
    assert_eq!(ready.requests.len(), 1);
    assert_eq!(ready.requests[0].attempts.len(), 2);
    assert!(ready.requests[0].logical.is_some());
    assert_eq!(a.pending_requests(), 0);
}

#[test]
fn logical_span_arriving_last_completes_the_group() {
    let mut a = Assembler::new(&options(10), 1);
    let t = Instant::now();
    let mut ready = Ready::default();
    a.offer(attempt(1, 1), t, &mut ready);
    a.offer(attempt(1, 2), t, &mut ready);
    a.offer(logical(1, 2), t, &mut ready);
    assert_eq!(ready.requests.len(), 1);
}

#[test]
fn a_newer_logical_span_of_the_request_id_is_the_one_the_group_counts_and_takes() {
    let mut a = Assembler::new(&options(10), 1);
    let t = Instant::now();
    let mut ready = Ready::default();
    a.offer(logical(1, 3), t, &mut ready);
    a.offer(attempt(1, 1), t, &mut ready);
    // A second logical span of the same request id, asking for one attempt, now names the
    // request and completes it; the first still waits.
    let mut newer = logical(1, 1);
    newer.span_id = [101; 8];
    a.offer(newer, t, &mut ready);
    assert_eq!(ready.requests.len(), 1);
    let logical = ready.requests[0].logical.as_ref().map(|l| l.span_id);
    assert_eq!(logical, Some([101; 8]));
    assert!(a.holds_logical([1; 16], [100; 8]));
}

#[test]
fn group_waits_group_wait_since_its_latest_span() {
    let mut a = Assembler::new(&options(10), 1);
    let t = Instant::now();
    let mut ready = Ready::default();
    a.offer(attempt(1, 1), t, &mut ready);
    a.offer(attempt(1, 2), t + Duration::from_secs(5), &mut ready);
    a.expire(t + WAIT, &mut ready);
    assert!(
        ready.requests.is_empty(),
        "the second span restarted the wait"
    );
    assert_eq!(a.next_deadline(), Some(t + Duration::from_secs(5) + WAIT));
    a.expire(t + Duration::from_secs(5) + WAIT, &mut ready);
    assert_eq!(ready.requests.len(), 1);
    assert_eq!(ready.requests[0].logical, None);
}

#[test]
fn a_deadline_left_by_a_taken_group_does_not_take_the_group_made_in_its_place() {
    let mut a = Assembler::new(&options(10), 1);
    let t = Instant::now();
    let mut ready = Ready::default();
    a.offer(logical(1, 1), t, &mut ready);
    a.offer(attempt(1, 1), t, &mut ready);
    assert_eq!(ready.requests.len(), 1, "complete on arrival");
    // Trace 2 waits; trace 3 takes the place trace 2's first group would have left.
    a.offer(attempt(2, 1), t, &mut ready);
    a.offer(logical(2, 1), t, &mut ready);
    assert_eq!(ready.requests.len(), 2, "the logical span completed it");
    let later = t + Duration::from_secs(5);
    a.offer(attempt(3, 1), later, &mut ready);
    a.expire(t + WAIT, &mut ready);
    assert_eq!(
        ready.requests.len(),
        2,
        "trace 2's deadline is stale: trace 3 waits its own"
    );
    assert_eq!(a.pending_requests(), 1);
    a.expire(later + WAIT, &mut ready);
    assert_eq!(ready.requests.len(), 3);
    assert_eq!(ready.requests[2].key.trace_id(), &[3; 16]);
}

#[test]
fn pending_cap_evaluates_the_oldest_early() {
    let mut a = Assembler::new(&options(2), 1);
    let t = Instant::now();
    let mut ready = Ready::default();
    for trace in 1..=3u8 {
        a.offer(
            attempt(trace, 1),
            t + Duration::from_secs(u64::from(trace)),
            &mut ready,
        );
    }
    assert_eq!(ready.evicted, 1);
    assert_eq!(ready.requests.len(), 1);
    assert_eq!(ready.requests[0].key.trace_id(), &[1; 16]);
    assert_eq!(a.pending_requests(), 2);
}

#[test]
fn byte_budget_evaluates_the_oldest_early_and_keeps_within_it() {
    let one = attempt(1, 1).retained_bytes();
    // Room for a few groups, not for ten.
    let mut a = Assembler::new(&budget(one * 6), 1);
    let t = Instant::now();
    let mut ready = Ready::default();
    for trace in 1..=10u8 {
        a.offer(
            attempt(trace, 1),
            t + Duration::from_secs(u64::from(trace)),
            &mut ready,
        );
        assert!(a.grouper.pending_bytes() + a.grouper.finished_bytes() <= one * 6);
    }
    assert!(ready.evicted > 0);
    assert_eq!(ready.requests.len() as u64, ready.evicted);
    assert_eq!(ready.requests[0].key.trace_id(), &[1; 16], "oldest first");
    assert_eq!(ready.requests.len() + a.pending_requests(), 10, "none lost");
}

#[test]
fn requests_evaluated_early_make_room_one_for_one_while_the_finished_cache_fills() {
    let mut probe = Assembler::new(&options(1_000), 1);
    probe.offer(attempt(1, 1), Instant::now(), &mut Ready::default());
    let one = probe.held_bytes();
    let room = one * 40;
    let mut a = Assembler::new(&budget(room), 1);
    let t = Instant::now();
    let mut most = 0;
    for trace in 1..=250u8 {
        let mut ready = Ready::default();
        a.offer(attempt(trace, 1), t, &mut ready);
        assert!(a.held_bytes() <= room, "request {trace}: over the budget");
        most = most.max(ready.evicted);
        // Evaluated at once, as a shard does: its finished entry is about as large as the
        // pending request was.
        for request in ready.requests {
            a.finish(request);
        }
    }
    assert!(a.pending_requests() > 0);
    assert!(a.grouper.finished_bytes() > 0);
    // Two now and then: a trace's links stay in the plain hold until its wait ends. Measured
    // against the budget left beside the finished cache, it was ten here.
    assert!(
        most <= 2,
        "{most} requests evaluated early for one that arrived"
    );
}

#[test]
fn byte_budget_forgets_finished_requests_before_evaluating_pending_ones_early() {
    let one = attempt(1, 1).retained_bytes();
    let mut a = Assembler::new(&budget(one * 8), 1);
    let t = Instant::now();
    let mut ready = Ready::default();
    for trace in 1..=6u8 {
        a.offer(logical(trace, 1), t, &mut ready);
        a.offer(attempt(trace, 1), t, &mut ready);
    }
    let finished = ready.requests.len();
    assert_eq!(finished, 6, "complete requests are ready at once");
    for request in std::mem::take(&mut ready.requests) {
        a.finish(request);
    }
    a.offer(attempt(7, 1), t, &mut ready);
    assert_eq!(ready.evicted, 0, "the pending request waits");
    assert_eq!(a.pending_requests(), 1);
    assert!(a.grouper.pending_bytes() + a.grouper.finished_bytes() <= one * 8);
}

#[test]
fn late_retry_comes_with_the_attempts_already_evaluated() {
    let mut a = Assembler::new(&options(10), 1);
    let t = Instant::now();
    let mut ready = Ready::default();
    a.offer(logical(1, 2), t, &mut ready);
    a.offer(attempt(1, 1), t, &mut ready);
    a.offer(attempt(1, 2), t, &mut ready);
    assert_eq!(ready.requests.len(), 1);
    for request in ready.requests {
        a.finish(request);
    }

    let mut late = Ready::default();
    assert!(matches!(
        a.offer(attempt(1, 3), t, &mut late),
        Offer::Attempt(_)
    ));
    a.expire(t + WAIT, &mut late);
    assert_eq!(late.requests.len(), 1);
    let request = &late.requests[0];
    assert_eq!(request.attempts.len(), 1);
    assert_eq!(request.evaluated.len(), 2);
    assert!(
        request.logical.is_some(),
        "the envelope of the finished request is kept"
    );
}

#[test]
fn resent_spans_are_duplicates_before_and_after_evaluation() {
    let mut a = Assembler::new(&options(10), 1);
    let t = Instant::now();
    let mut ready = Ready::default();
    a.offer(attempt(1, 1), t, &mut ready);
    assert_eq!(a.offer(attempt(1, 1), t, &mut ready), Offer::Duplicate);
    a.offer(logical(1, 1), t, &mut ready);
    assert_eq!(ready.requests.len(), 1);
    assert_eq!(a.offer(attempt(1, 1), t, &mut ready), Offer::Duplicate);
    assert_eq!(a.offer(logical(1, 1), t, &mut ready), Offer::Duplicate);
    a.expire(t + WAIT * 2, &mut ready);
    assert_eq!(ready.requests.len(), 1);
}

#[test]
fn logical_span_without_attempts_is_let_go_after_the_wait() {
    let mut a = Assembler::new(&options(10), 1);
    let t = Instant::now();
    let mut ready = Ready::default();
    a.offer(logical(1, 2), t, &mut ready);
    a.expire(t + WAIT, &mut ready);
    assert!(ready.requests.is_empty());
    assert_eq!(a.grouper.pending_logical(), 0);
}

#[test]
fn drain_all_returns_every_pending_group() {
    let mut a = Assembler::new(&options(10), 1);
    let t = Instant::now();
    let mut ready = Ready::default();
    a.offer(attempt(1, 1), t, &mut ready);
    a.offer(attempt(2, 1), t, &mut ready);
    assert_eq!(a.drain_all().requests.len(), 2);
    assert_eq!(a.pending_requests(), 0);
    assert_eq!(a.next_deadline(), None);
}

fn plain(trace: u8, span_id: u8, error: bool) -> SpanFacts {
    let mut s = span(trace, span_id, SpanKind::SingleAttempt, "");
    s.request_id = None;
    s.attempt_index = None;
    s.error_type = error.then(|| "429".into());
    s.failed = error;
    s.parent_span_id = Some([0xa0; 8]);
    s
}

fn http_try(trace: u8, span_id: u8, parent: u8) -> SpanFacts {
    let mut s = span(trace, span_id, SpanKind::HttpTry, "");
    s.request_id = None;
    s.request_model = None;
    s.attempt_index = None;
    s.parent_span_id = Some([parent; 8]);
    s.http = Some(Box::default());
    s
}

#[test]
fn failed_siblings_wait_group_wait_then_become_one_sibling_retry_request() {
    let mut a = Assembler::new(&options(10), 1);
    let t = Instant::now();
    let mut ready = Ready::default();
    assert_eq!(a.offer(plain(1, 1, true), t, &mut ready), Offer::Plain);
    assert_eq!(a.offer(plain(1, 2, false), t, &mut ready), Offer::Plain);
    assert_eq!(a.offer(plain(1, 2, false), t, &mut ready), Offer::Duplicate);
    a.expire(t + WAIT - Duration::from_millis(1), &mut ready);
    assert!(ready.requests.is_empty(), "still inside the wait");
    a.expire(t + WAIT, &mut ready);
    assert_eq!(ready.requests.len(), 1);
    assert_eq!(
        ready.requests[0].attempt_source,
        AttemptSource::SiblingRetry
    );
    assert_eq!(ready.requests[0].attempts.len(), 2);
    assert_eq!(ready.consumed.len(), 2);
    assert_eq!(a.pending_requests(), 0);
}

#[test]
fn http_tries_keep_their_genai_span_waiting_and_become_its_attempts() {
    let mut a = Assembler::new(&options(10), 1);
    let t = Instant::now();
    let mut ready = Ready::default();
    a.offer(plain(1, 1, false), t, &mut ready);
    let later = t + Duration::from_secs(5);
    assert_eq!(
        a.offer(http_try(1, 10, 1), later, &mut ready),
        Offer::HeldTry
    );
    a.offer(http_try(1, 11, 1), later, &mut ready);
    a.expire(t + WAIT, &mut ready);
    assert!(ready.requests.is_empty(), "a try arrived since");
    a.expire(later + WAIT, &mut ready);
    assert_eq!(ready.requests.len(), 1);
    assert_eq!(ready.requests[0].attempt_source, AttemptSource::HttpRetry);
    assert_eq!(ready.requests[0].attempts.len(), 2);
    assert_eq!(ready.consumed.len(), 3, "the GenAI span and both tries");
}

/// The worker keeps an HTTP try's log record only while the assembler holds the try: a try with
/// no parent, or one seen before, is held by nobody and must not pin the log.
#[test]
fn only_http_tries_held_for_a_parent_are_held() {
    let mut a = Assembler::new(&options(10), 1);
    let t = Instant::now();
    let mut ready = Ready::default();
    let mut orphan = http_try(1, 10, 1);
    orphan.parent_span_id = None;
    assert_eq!(a.offer(orphan, t, &mut ready), Offer::Passthrough);
    assert_eq!(a.offer(http_try(1, 11, 1), t, &mut ready), Offer::HeldTry);
    assert_eq!(
        a.offer(http_try(1, 11, 1), t, &mut ready),
        Offer::Duplicate,
        "a re-sent try is not held twice"
    );
    a.expire(t + WAIT, &mut ready);
    assert_eq!(
        ready.consumed,
        [([1; 16], [11; 8])],
        "the held try is let go once"
    );
}

/// The finished cache of `a`, saved and read back into a new assembler (a restart).
fn restarted(a: &Assembler, options: AssemblyBounds) -> Assembler {
    let saved = crate::assemble::summary::decode(&a.encode_finished().to_vec()).unwrap();
    let mut b = Assembler::new(&options, 1);
    b.restore(saved);
    b
}

fn two_attempts_finished(a: &mut Assembler, trace: u8, t: Instant) {
    let mut ready = Ready::default();
    a.offer(logical(trace, 2), t, &mut ready);
    a.offer(attempt(trace, 1), t, &mut ready);
    a.offer(attempt(trace, 2), t, &mut ready);
    assert_eq!(ready.requests.len(), 1);
    for request in ready.requests {
        a.finish(request);
    }
}

fn late_retry(a: &mut Assembler, trace: u8, t: Instant) -> Request {
    let mut late = Ready::default();
    assert!(matches!(
        a.offer(attempt(trace, 3), t, &mut late),
        Offer::Attempt(_)
    ));
    a.expire(t + WAIT, &mut late);
    assert_eq!(late.requests.len(), 1);
    late.requests.remove(0)
}

#[test]
fn late_retry_after_a_restart_comes_with_the_same_earlier_attempts() {
    let t = Instant::now();
    let mut a = Assembler::new(&options(10), 1);
    two_attempts_finished(&mut a, 1, t);
    let mut b = restarted(&a, options(10));
    let after = late_retry(&mut b, 1, t);
    assert_eq!(after.evaluated.len(), 2);
    assert!(after.logical.is_some());
    assert_eq!(after, late_retry(&mut a, 1, t), "as without the restart");
}

#[test]
fn restored_attempts_are_duplicates_unless_the_log_replays_them_unwritten() {
    let t = Instant::now();
    let mut a = Assembler::new(&options(10), 1);
    two_attempts_finished(&mut a, 1, t);
    let mut b = restarted(&a, options(10));
    let mut ready = Ready::default();
    assert_eq!(b.offer(attempt(1, 1), t, &mut ready), Offer::Duplicate);
    assert_eq!(b.offer(logical(1, 2), t, &mut ready), Offer::Duplicate);
    // Its row never reached a completed file: it is an attempt again, judged after attempt 0.
    assert!(matches!(
        b.offer_replayed(attempt(1, 2), t, &mut ready, None),
        Offer::Attempt(_)
    ));
    b.end_recovery();
    b.expire(t + WAIT, &mut ready);
    assert_eq!(ready.requests.len(), 1);
    let request = &ready.requests[0];
    assert_eq!(request.attempts.len(), 1);
    assert_eq!(request.attempts[0].span_id, [2; 8]);
    assert_eq!(request.evaluated.len(), 1);
    assert_eq!(request.evaluated[0].span_id, [1; 8]);
}

#[test]
fn restoring_keeps_within_the_byte_budget_forgetting_the_oldest() {
    let t = Instant::now();
    let mut a = Assembler::new(&options(10), 1);
    for trace in 1..=4u8 {
        two_attempts_finished(&mut a, trace, t);
    }
    let per_request = a.grouper.finished_bytes() / 4;
    let mut b = restarted(&a, budget(per_request * 2 + per_request / 2));
    assert!(b.grouper.finished_bytes() <= per_request * 2 + per_request / 2);
    let mut ready = Ready::default();
    assert!(
        matches!(b.offer(attempt(1, 1), t, &mut ready), Offer::Attempt(_)),
        "the oldest request was forgotten"
    );
    assert_eq!(
        b.offer(attempt(4, 1), t, &mut ready),
        Offer::Duplicate,
        "the newest is kept"
    );
}

#[test]
fn finished_cache_keeps_at_most_half_the_budget_when_nothing_waits() {
    let one = attempt(1, 1).retained_bytes();
    let limit = one * 20;
    let mut a = Assembler::new(&budget(limit), 1);
    let t = Instant::now();
    let mut ready = Ready::default();
    for trace in 1..=40u8 {
        a.offer(logical(trace, 1), t, &mut ready);
        a.offer(attempt(trace, 1), t, &mut ready);
        for request in std::mem::take(&mut ready.requests) {
            a.finish(request);
        }
        assert!(
            a.grouper.finished_bytes() <= limit / 2,
            "after request {trace}: {} of {limit}",
            a.grouper.finished_bytes()
        );
    }
    assert_eq!(ready.evicted, 0, "nothing was evaluated early");
    // The newest request is still remembered: its re-sent attempt is a duplicate.
    assert!(matches!(
        a.offer(attempt(40, 1), t, &mut ready),
        Offer::Duplicate
    ));
}

#[test]
fn touches_of_one_group_at_one_time_queue_one_deadline_and_it_still_moves_with_later_spans() {
    let mut a = Assembler::new(&options(10), 1);
    let t = Instant::now();
    let mut ready = Ready::default();
    let mut no_count = logical(1, 3);
    no_count.attempt_count = None;
    for n in 1..=3 {
        a.offer(attempt(1, n), t, &mut ready);
    }
    a.offer(no_count, t, &mut ready);
    a.offer(attempt(2, 1), t, &mut ready);
    // One entry per group, not one per span.
    assert_eq!(a.deadlines.len(), 2);
    assert_eq!(a.next_deadline(), Some(t + WAIT));
    // A later span of the first group queues a new deadline; the old one is stale.
    let later = t + Duration::from_secs(3);
    a.offer(attempt(1, 4), later, &mut ready);
    assert_eq!(a.deadlines.len(), 3);
    a.expire(t + WAIT, &mut ready);
    let taken: Vec<u8> = ready.requests.iter().map(|r| r.key.trace_id()[0]).collect();
    assert_eq!(taken, [2]);
    a.expire(later + WAIT, &mut ready);
    assert_eq!(ready.requests.len(), 2);
    assert_eq!(ready.requests[1].attempts.len(), 4);
    assert!(ready.requests[1].logical.is_some());
    assert_eq!(a.pending_requests(), 0);
}

use std::sync::Arc;

use chrono::NaiveDate;
use rust_decimal::Decimal;

use super::*;
use crate::assemble::Grouper;

fn full_envelope() -> EnvelopeFields {
    EnvelopeFields {
        present: true,
        json_invalid: false,
        pricing_source: Some("https://aiwave.live/api/pricing".into()),
        pricing_checked_at: NaiveDate::from_ymd_opt(2026, 8, 22),
        pricing_version: Some("a42d372ccf0b5dd13ecf71203521f9d2".into()),
        billing_group: Some("vip".into()),
        max_incremental_usd: Some(Decimal::new(150, 4)),
        max_attempts_after_first: Some(1),
        allow_family_fallback: Some(true),
        allowed_fallback_families: Some(vec!["deepseek".into(), "qwen".into(), "glm".into()]),
        replay_safe: Some(false),
        task_type: Some("support".into()),
        ..Default::default()
    }
}

fn context(id: u8, index: Option<i32>) -> ContextSpan {
    ContextSpan {
        span_id: [id; 8],
        start_time_unix_nano: 1_787_659_200_000_000_000 + u64::from(id),
        attempt_index: index,
        attempt_count: None,
        service_name: "support-bot".into(),
        request_id: None,
        envelope: EnvelopeFields::empty(),
        envelope_json: None,
        request_model: Some("deepseek-v4-flash".into()),
        model_family: None,
        counts: PackedCounts::new([
            Count::Value(10_000),
            Count::Value(4_000),
            Count::Missing,
            Count::Value(800),
        ]),
        output_reached_client: None,
        captured: CapturedAttributes::default(),
    }
}

/// Requests exercising every field and key kind.
fn summaries() -> Vec<Summary> {
    let envelope = Arc::new(full_envelope());
    let mut logical = context(1, None);
    logical.request_id = Some("req-1".into());
    logical.attempt_count = Some(2);
    logical.envelope = Arc::clone(&envelope);
    logical.request_model = None;
    logical
        .counts
        .set(ContextSpan::INPUT_TOKENS, Count::Missing);
    logical
        .counts
        .set(ContextSpan::CACHED_INPUT_TOKENS, Count::Missing);
    logical.counts.set(ContextSpan::OUTPUT_CAP, Count::Missing);
    let mut odd = context(3, Some(-7));
    odd.envelope_json = Some(Arc::new(EnvelopeFields {
        present: true,
        json_invalid: true,
        ..EnvelopeFields::default()
    }));
    odd.model_family = Some("glm".into());
    odd.counts.set(ContextSpan::INPUT_TOKENS, Count::Value(-5));
    odd.counts
        .set(ContextSpan::OUTPUT_TOKENS, Count::OutOfRange);
    odd.counts
        .set(ContextSpan::OUTPUT_CAP, Count::Value(i64::MIN));
    odd.output_reached_client = Some(true);
    odd.captured = CapturedAttributes::from_pairs(vec![
        ("tenant".into(), "acme".into()),
        ("deployment.environment".into(), "prod".into()),
    ]);
    let mut quiet = context(4, Some(0));
    quiet.output_reached_client = Some(false);
    quiet.envelope = envelope;
    vec![
        Summary {
            key: GroupKey::RequestId {
                trace_id: [1; 16],
                request_id: Arc::from("req-1"),
            },
            logical: Some(logical),
            attempts: vec![context(2, Some(0)), odd],
            other_span_ids: vec![[9; 8]],
        },
        Summary {
            key: GroupKey::Parent {
                trace_id: [2; 16],
                parent_span_id: Some([5; 8]),
            },
            logical: None,
            attempts: vec![quiet],
            other_span_ids: Vec::new(),
        },
        Summary {
            key: GroupKey::Parent {
                trace_id: [3; 16],
                parent_span_id: None,
            },
            logical: None,
            attempts: vec![context(6, None)],
            other_span_ids: Vec::new(),
        },
    ]
}

fn encode(summaries: &[Summary]) -> Vec<u8> {
    let mut encoder = Encoder::default();
    for s in summaries {
        encoder.push(&s.key, s.logical.as_ref(), &s.attempts, &s.other_span_ids);
    }
    encoder.finish().to_vec()
}

#[test]
fn summaries_round_trip_every_field() {
    let original = summaries();
    let decoded = decode(&encode(&original)).unwrap();
    assert_eq!(decoded, original);
}

#[test]
fn an_empty_cache_round_trips() {
    assert_eq!(decode(&encode(&[])).unwrap(), Vec::new());
}

#[test]
fn restored_envelopes_are_shared_not_copied_per_request() {
    let decoded = decode(&encode(&summaries())).unwrap();
    let logical = decoded[0].logical.as_ref().unwrap();
    assert!(Arc::ptr_eq(
        &logical.envelope,
        &decoded[1].attempts[0].envelope
    ));
    assert!(Arc::ptr_eq(
        &decoded[0].attempts[0].envelope,
        &EnvelopeFields::empty()
    ));
}

#[test]
fn a_flipped_byte_fails_the_checksum() {
    let bytes = encode(&summaries());
    for i in HEADER_BYTES..bytes.len() {
        let mut bad = bytes.clone();
        bad[i] ^= 0x10;
        assert_eq!(decode(&bad), Err(SummaryError::Checksum), "byte {i}");
    }
}

#[test]
fn a_file_cut_short_is_refused_at_every_length() {
    let bytes = encode(&summaries());
    for len in 0..bytes.len() {
        assert!(decode(&bytes[..len]).is_err(), "cut at {len}");
    }
}

#[test]
fn another_version_or_another_file_is_named_as_such() {
    let mut bytes = encode(&summaries());
    bytes[4..6].copy_from_slice(&2u16.to_le_bytes());
    assert_eq!(decode(&bytes), Err(SummaryError::UnknownVersion(2)));
    assert_eq!(
        decode(b"PAR1 not ours at all"),
        Err(SummaryError::NotSummaries)
    );
}

/// Bodies that pass the checksum but are nonsense (a bug in another build) are errors, not
/// panics or huge allocations.
#[test]
fn nonsense_under_a_valid_checksum_is_an_error() {
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..2_000 {
        let mut body = b"RSFC\x01\x00\x00\x00".to_vec();
        let len = (rng % 64) as usize;
        for _ in 0..len {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            body.push(rng as u8);
        }
        let crc = crc32fast::hash(&body);
        body.extend_from_slice(&crc.to_le_bytes());
        let _ = decode(&body);
    }
    let mut huge = b"RSFC\x01\x00\x00\x00".to_vec();
    huge.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]);
    let crc = crc32fast::hash(&huge);
    huge.extend_from_slice(&crc.to_le_bytes());
    assert!(decode(&huge).is_err());
}

/// Issue 8's "compact summaries": what one finished request of a logical span and two attempts
/// costs, in the cache and in the file, against the whole spans the cache used to keep.
#[test]
fn a_finished_request_costs_a_fraction_of_its_spans() {
    const REQUESTS: usize = 1_000;
    let envelope = Arc::new(full_envelope());
    let mut grouper = Grouper::with_finished_capacity(REQUESTS);
    let mut whole_spans = 0;
    for n in 0..REQUESTS {
        let trace_id = {
            let mut t = [0xab; 16];
            t[..8].copy_from_slice(&(n as u64).to_be_bytes());
            t
        };
        let request_id = format!("req-{n:08}");
        let span = |id: u8, kind: SpanKind, index: Option<i32>| {
            let mut facts = context(id, index).to_facts(trace_id, kind);
            facts.request_id = Some(request_id.as_str().into());
            facts.parent_span_id = Some([1; 8]);
            facts.response_model = facts.request_model.clone();
            facts.provider = Some("deepseek".into());
            facts.output_tokens = Count::Value(500);
            facts.error_type = (index == Some(0)).then(|| "timeout".into());
            facts
        };
        let mut logical = span(1, SpanKind::LogicalRequest, None);
        logical.envelope = Arc::clone(&envelope);
        logical.request_model = None;
        let spans = [
            logical,
            span(2, SpanKind::Attempt, Some(0)),
            span(3, SpanKind::Attempt, Some(1)),
        ];
        whole_spans += spans.iter().map(SpanFacts::retained_bytes).sum::<usize>();
        for facts in spans {
            grouper.offer(facts);
        }
        for request in grouper.drain_all() {
            grouper.finish(request);
        }
    }
    let cache = grouper.finished_bytes() / REQUESTS;
    let file = grouper.encode_finished().to_vec().len() / REQUESTS;
    let before = whole_spans / REQUESTS + 512 + 2 * 16;
    eprintln!(
        "bytes per finished request: cache {cache} (as whole spans: {before}), file {file}; \
         per span: {} (whole: {})",
        std::mem::size_of::<ContextSpan>(),
        std::mem::size_of::<SpanFacts>()
    );
    // Both carry the same per-request overhead (512 bytes of map slots and keys); since whole
    // spans shrank to 344 bytes (the SDK's facts and captured attributes boxed), the context
    // saves a quarter of the whole, not a third.
    assert!(cache * 4 < before * 3, "cache {cache} vs {before}");
    assert!(file <= 160, "file {file}");
    let restored = decode(&grouper.encode_finished().to_vec()).unwrap();
    assert_eq!(restored.len(), REQUESTS);
}

/// What a context does not keep comes back as a freshly read span has it.
#[test]
fn a_context_read_back_has_the_defaults_of_a_fresh_span() {
    let span = SpanFacts {
        trace_id: [7; 16],
        span_id: [3; 8],
        start_time_unix_nano: 5,
        end_time_unix_nano: 5,
        kind: SpanKind::Attempt,
        attempt_index: Some(2),
        ..SpanFacts::default()
    };
    let back = ContextSpan::of_attempt(span.clone()).to_facts([7; 16], SpanKind::Attempt);
    assert_eq!(back, span);
}

/// The encoder finds envelopes by address first: spans alternating between
/// envelopes, and equal envelopes in different allocations, still get the right entries (one
/// per distinct value).
#[test]
fn alternating_and_equal_but_separate_envelopes_are_written_by_value() {
    let full = Arc::new(full_envelope());
    let same_value = Arc::new(full_envelope());
    let other = Arc::new(EnvelopeFields {
        task_type: Some("triage".into()),
        ..full_envelope()
    });
    let attempts: Vec<ContextSpan> = [&full, &other, &full, &same_value, &other]
        .into_iter()
        .zip(1u8..)
        .map(|(envelope, id)| ContextSpan {
            envelope: Arc::clone(envelope),
            ..context(id, Some(i32::from(id) - 1))
        })
        .collect();
    let original = vec![Summary {
        key: GroupKey::Parent {
            trace_id: [7; 16],
            parent_span_id: Some([8; 8]),
        },
        logical: None,
        attempts,
        other_span_ids: Vec::new(),
    }];
    let mut encoder = Encoder::default();
    for s in &original {
        encoder.push(&s.key, s.logical.as_ref(), &s.attempts, &s.other_span_ids);
    }
    assert_eq!(
        encoder.envelopes.len(),
        2,
        "one entry per distinct envelope"
    );
    let decoded = decode(&encoder.finish().to_vec()).unwrap();
    assert_eq!(decoded, original);
    let envelopes: Vec<&Arc<EnvelopeFields>> =
        decoded[0].attempts.iter().map(|a| &a.envelope).collect();
    assert!(Arc::ptr_eq(envelopes[0], envelopes[3]));
    assert!(Arc::ptr_eq(envelopes[1], envelopes[4]));
    assert!(!Arc::ptr_eq(envelopes[0], envelopes[1]));
}

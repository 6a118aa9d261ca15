//! Reading a question into the request the audit would build from the same attempts' spans.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;

use super::proto::{self, DecideRequest};
use crate::assemble::{GroupKey, Request, MAX_ATTEMPTS_PER_REQUEST};
use crate::contract::{
    money, unknown_service, Count, EnvelopeFields, SpanFacts, SpanKind, Symbol, ValueRef,
};
use crate::pricing::parse_date;
use crate::record::AttemptSource;

/// A question the service cannot answer: the field at fault (as the proto names it, e.g.
/// `attempts[1].model`) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct Malformed {
    pub field: String,
    pub problem: String,
}

impl Malformed {
    pub fn new(field: impl Into<String>, problem: impl Into<String>) -> Malformed {
        Malformed {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

/// A question read into the request the audit would evaluate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    request: Request,
    envelope_in_request: bool,
}

impl Question {
    /// Attempts 0..k−1 as already evaluated context, the proposed attempt k as the one attempt
    /// to judge.
    pub fn request(&self) -> &Request {
        &self.request
    }

    /// The question carried its own envelope (`envelope_source` `request`).
    pub fn envelope_in_request(&self) -> bool {
        self.envelope_in_request
    }
}

/// Every span of a question shares one trace; span ids are the attempt index + 1.
const TRACE_ID: [u8; 16] = [0; 16];

/// Reads `question`, dated `now` when it names no `at`. Absent values stay absent, to be judged
/// by SPEC §4 as the audit would judge spans without them; only what makes no question at all
/// (no attempts, no proposed model) or cannot be read (money, dates) is malformed.
pub fn read(question: DecideRequest, now: DateTime<Utc>) -> Result<Question, Malformed> {
    let DecideRequest {
        envelope,
        service,
        task_type,
        attempts,
        next,
        at,
    } = question;
    if attempts.is_empty() {
        return Err(Malformed::new(
            "attempts",
            "required: the attempts made so far, attempt 0 first",
        ));
    }
    // The audit judges a request of more attempts in parts, without all of the earlier ones.
    if attempts.len() >= MAX_ATTEMPTS_PER_REQUEST {
        return Err(Malformed::new(
            "attempts",
            format!("more than {} attempts", MAX_ATTEMPTS_PER_REQUEST - 1),
        ));
    }
    let next = match next {
        Some(next) if !next.model.is_empty() => next,
        _ => {
            return Err(Malformed::new(
                "next.model",
                "required: the model of the proposed attempt",
            ))
        }
    };
    let start = start_time(&at, now)?;
    let envelope_in_request = envelope.is_some();
    let envelope_json = envelope.map(read_envelope).transpose()?.map(Arc::new);
    let flat = match non_empty(task_type) {
        Some(task_type) => Arc::new(EnvelopeFields {
            task_type: Some(task_type),
            ..EnvelopeFields::default()
        }),
        None => EnvelopeFields::empty(),
    };
    let service_name = non_empty(service).unwrap_or_else(unknown_service);

    let k = attempts.len();
    let mut evaluated = Vec::with_capacity(k);
    for (index, attempt) in attempts.into_iter().enumerate() {
        let mut span = attempt_span(
            index,
            &service_name,
            start,
            attempt.model,
            [
                attempt.input_tokens,
                attempt.cached_input_tokens,
                attempt.output_cap,
                attempt.cache_write_input_tokens,
            ],
        );
        span.output_reached_client = attempt.output_reached_client;
        span.error_type = non_empty(attempt.error_type);
        if index == 0 {
            // As an SDK writes `retry_spend.task.type` and `retry_spend.envelope` on its spans:
            // the audit merges every span's, so attempt 0 alone is enough.
            span.envelope = Arc::clone(&flat);
            span.envelope_json = envelope_json.clone();
        }
        evaluated.push(span);
    }
    let proposed = attempt_span(
        k,
        &service_name,
        start,
        next.model,
        [
            next.input_tokens,
            next.cached_input_tokens,
            next.output_cap,
            next.cache_write_input_tokens,
        ],
    );
    Ok(Question {
        request: Request {
            key: GroupKey::RequestId {
                trace_id: TRACE_ID,
                request_id: "".into(),
            },
            logical: None,
            attempts: vec![proposed],
            evaluated,
            attempt_source: AttemptSource::Declared,
            sources: Vec::new(),
            origins: None,
        },
        envelope_in_request,
    })
}

/// The span an SDK would write for attempt `index`: its model, input, cached input, output cap
/// and cache-write tokens, started at `start`.
fn attempt_span(
    index: usize,
    service_name: &Symbol,
    start: u64,
    model: String,
    [input, cached, cap, cache_write]: [Option<i64>; 4],
) -> SpanFacts {
    let count = |value: Option<i64>| value.map_or(Count::Missing, Count::Value);
    SpanFacts {
        trace_id: TRACE_ID,
        span_id: (index as u64 + 1).to_be_bytes(),
        parent_span_id: None,
        service_name: service_name.clone(),
        start_time_unix_nano: start,
        end_time_unix_nano: start,
        kind: SpanKind::Attempt,
        request_id: None,
        // Bounded by MAX_ATTEMPTS_PER_REQUEST above.
        attempt_index: Some(i32::try_from(index).unwrap_or(i32::MAX)),
        attempt_count: None,
        envelope: EnvelopeFields::empty(),
        envelope_json: None,
        request_model: non_empty(model),
        response_model: None,
        provider: None,
        model_family: None,
        input_tokens: count(input),
        cached_input_tokens: count(cached),
        cache_write_input_tokens: count(cache_write),
        output_tokens: Count::Missing,
        output_cap: count(cap),
        declared: true,
        ..SpanFacts::default()
    }
}

/// The envelope as the JSON form of SPEC §2 gives it: present, whatever fields it has.
fn read_envelope(envelope: proto::Envelope) -> Result<EnvelopeFields, Malformed> {
    let proto::Envelope {
        pricing_source,
        pricing_checked_at,
        pricing_version,
        billing_group,
        max_incremental_usd,
        max_attempts_after_first,
        allow_family_fallback,
        mut allowed_fallback_families,
        replay_safe,
        task_type,
        assumed_output_cap,
    } = envelope;
    // A set, as the span reader keeps it: `["qwen","glm"]` and `["glm","qwen"]` are one policy.
    allowed_fallback_families.sort();
    allowed_fallback_families.dedup();
    Ok(EnvelopeFields {
        present: true,
        json_invalid: false,
        pricing_source: non_empty(pricing_source),
        pricing_checked_at: date("envelope.pricing_checked_at", &pricing_checked_at)?,
        pricing_version: non_empty(pricing_version),
        billing_group: non_empty(billing_group),
        max_incremental_usd: usd("envelope.max_incremental_usd", &max_incremental_usd)?,
        // As SPEC §2 reads an int attribute: one beyond 32 bits is not a limit (incomplete).
        max_attempts_after_first: max_attempts_after_first.and_then(|n| i32::try_from(n).ok()),
        allow_family_fallback,
        allowed_fallback_families: (!allowed_fallback_families.is_empty())
            .then_some(allowed_fallback_families),
        replay_safe,
        assumed_output_cap,
        task_type: non_empty(task_type),
    })
}

/// `at` in Unix nanoseconds, as a span start; `now` when empty.
fn start_time(at: &str, now: DateTime<Utc>) -> Result<u64, Malformed> {
    let time = if at.is_empty() {
        now
    } else {
        DateTime::parse_from_rfc3339(at.trim())
            .map_err(|e| Malformed::new("at", format!("not an RFC 3339 time ({e}): {at:?}")))?
            .with_timezone(&Utc)
    };
    time.timestamp_nanos_opt()
        .and_then(|nanos| u64::try_from(nanos).ok())
        .ok_or_else(|| {
            Malformed::new(
                "at",
                format!("{at:?} is outside the span times OTLP can carry (1970 to 2262)"),
            )
        })
}

/// Money as SPEC §2 reads a decimal string, rounded half-even to 18 places; empty is absent.
fn usd(field: &str, text: &str) -> Result<Option<Decimal>, Malformed> {
    if text.is_empty() {
        return Ok(None);
    }
    money(ValueRef::Str(text))
        .map(Some)
        .ok_or_else(|| Malformed::new(field, format!("not a decimal number: {text:?}")))
}

/// `YYYY-MM-DD` or an RFC 3339 timestamp's UTC date; empty is absent.
fn date(field: &str, text: &str) -> Result<Option<chrono::NaiveDate>, Malformed> {
    if text.is_empty() {
        return Ok(None);
    }
    parse_date(text).map(Some).ok_or_else(|| {
        Malformed::new(
            field,
            format!("not a YYYY-MM-DD date or RFC 3339 time: {text:?}"),
        )
    })
}

/// An empty string is an absent value, as an empty span attribute is.
fn non_empty(text: String) -> Option<Symbol> {
    (!text.is_empty()).then(|| Symbol::from(text))
}

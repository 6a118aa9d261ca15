//! The proto3 JSON mapping of the decision messages, as SPEC §7 words it for HTTP.
//!
//! Requests: proto field names (snake_case, or the lowerCamelCase JSON names), `null` for an
//! absent value, money and counts as JSON strings or numbers (numbers read from their literal
//! text, so exactly). Unknown fields are refused, so a typo is a 400 naming it rather than a
//! silently absent value. Responses: every field, defaults included, under the snake_case names;
//! an absent optional value is `null`.
//!
//! Each level is read as raw values first and then field by field, so an error names the field
//! at fault (`attempts[1].input_tokens: …`).

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::proto::{Attempt, DecideRequest, DecideResponse, Envelope, ProposedAttempt};
use super::Malformed;
use crate::contract::{int, Count, ValueRef};

type Raw<'a> = Option<&'a RawValue>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "DecideRequest")]
struct RawRequest<'a> {
    #[serde(borrow, default)]
    envelope: Raw<'a>,
    #[serde(borrow, default)]
    service: Raw<'a>,
    #[serde(borrow, default, alias = "taskType")]
    task_type: Raw<'a>,
    #[serde(borrow, default)]
    attempts: Raw<'a>,
    #[serde(borrow, default)]
    next: Raw<'a>,
    #[serde(borrow, default)]
    at: Raw<'a>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "Envelope")]
struct RawEnvelope<'a> {
    #[serde(borrow, default, alias = "pricingSource")]
    pricing_source: Raw<'a>,
    #[serde(borrow, default, alias = "pricingCheckedAt")]
    pricing_checked_at: Raw<'a>,
    #[serde(borrow, default, alias = "pricingVersion")]
    pricing_version: Raw<'a>,
    #[serde(borrow, default, alias = "billingGroup")]
    billing_group: Raw<'a>,
    #[serde(borrow, default, alias = "maxIncrementalUsd")]
    max_incremental_usd: Raw<'a>,
    #[serde(borrow, default, alias = "maxAttemptsAfterFirst")]
    max_attempts_after_first: Raw<'a>,
    #[serde(borrow, default, alias = "allowFamilyFallback")]
    allow_family_fallback: Raw<'a>,
    #[serde(borrow, default, alias = "allowedFallbackFamilies")]
    allowed_fallback_families: Raw<'a>,
    #[serde(borrow, default, alias = "replaySafe")]
    replay_safe: Raw<'a>,
    #[serde(borrow, default, alias = "taskType")]
    task_type: Raw<'a>,
    #[serde(borrow, default, alias = "assumedOutputCap")]
    assumed_output_cap: Raw<'a>,
}

/// An attempt made, or the proposed one (whose last two fields mean nothing yet).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "Attempt")]
struct RawAttempt<'a> {
    #[serde(borrow, default)]
    model: Raw<'a>,
    #[serde(borrow, default, alias = "inputTokens")]
    input_tokens: Raw<'a>,
    #[serde(borrow, default, alias = "cachedInputTokens")]
    cached_input_tokens: Raw<'a>,
    #[serde(borrow, default, alias = "outputCap")]
    output_cap: Raw<'a>,
    #[serde(borrow, default, alias = "outputReachedClient")]
    output_reached_client: Raw<'a>,
    #[serde(borrow, default, alias = "errorType")]
    error_type: Raw<'a>,
    #[serde(borrow, default, alias = "cacheWriteInputTokens")]
    cache_write_input_tokens: Raw<'a>,
}

/// Reads a request body. Every problem is the caller's and names its field.
pub fn request_from_json(body: &[u8]) -> Result<DecideRequest, Malformed> {
    let body = std::str::from_utf8(body)
        .map_err(|e| Malformed::new("request", format!("not UTF-8 JSON: {e}")))?;
    let raw: RawRequest<'_> = object("request", body)?;
    let attempts = match raw.attempts {
        Some(list) => {
            let items: Vec<&RawValue> = parse("attempts", list, "a list of attempts")?;
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| attempt(&format!("attempts[{i}]"), item))
                .collect::<Result<_, _>>()?
        }
        None => Vec::new(),
    };
    Ok(DecideRequest {
        envelope: raw.envelope.map(envelope).transpose()?.flatten(),
        service: string("service", raw.service)?,
        task_type: string("task_type", raw.task_type)?,
        attempts,
        next: raw.next.map(proposed).transpose()?.flatten(),
        at: string("at", raw.at)?,
    })
}

fn envelope(raw: &RawValue) -> Result<Option<Envelope>, Malformed> {
    if is_null(raw) {
        return Ok(None);
    }
    let e: RawEnvelope<'_> = object("envelope", raw.get())?;
    let field = |name: &str| format!("envelope.{name}");
    Ok(Some(Envelope {
        pricing_source: string(&field("pricing_source"), e.pricing_source)?,
        pricing_checked_at: string(&field("pricing_checked_at"), e.pricing_checked_at)?,
        pricing_version: string(&field("pricing_version"), e.pricing_version)?,
        billing_group: string(&field("billing_group"), e.billing_group)?,
        max_incremental_usd: money(&field("max_incremental_usd"), e.max_incremental_usd)?,
        max_attempts_after_first: count(
            &field("max_attempts_after_first"),
            e.max_attempts_after_first,
        )?,
        allow_family_fallback: flag(&field("allow_family_fallback"), e.allow_family_fallback)?,
        allowed_fallback_families: strings(
            &field("allowed_fallback_families"),
            e.allowed_fallback_families,
        )?,
        replay_safe: flag(&field("replay_safe"), e.replay_safe)?,
        task_type: string(&field("task_type"), e.task_type)?,
        assumed_output_cap: count(&field("assumed_output_cap"), e.assumed_output_cap)?,
    }))
}

fn attempt(path: &str, raw: &RawValue) -> Result<Attempt, Malformed> {
    let a: RawAttempt<'_> = object(path, raw.get())?;
    let field = |name: &str| format!("{path}.{name}");
    Ok(Attempt {
        model: string(&field("model"), a.model)?,
        input_tokens: count(&field("input_tokens"), a.input_tokens)?,
        cached_input_tokens: count(&field("cached_input_tokens"), a.cached_input_tokens)?,
        output_cap: count(&field("output_cap"), a.output_cap)?,
        output_reached_client: flag(&field("output_reached_client"), a.output_reached_client)?,
        error_type: string(&field("error_type"), a.error_type)?,
        cache_write_input_tokens: count(
            &field("cache_write_input_tokens"),
            a.cache_write_input_tokens,
        )?,
    })
}

fn proposed(raw: &RawValue) -> Result<Option<ProposedAttempt>, Malformed> {
    if is_null(raw) {
        return Ok(None);
    }
    // The fields only an attempt made has (`output_reached_client`, `error_type`) are read
    // and ignored: nothing of the proposed attempt has happened yet.
    let a: RawAttempt<'_> = object("next", raw.get())?;
    flag("next.output_reached_client", a.output_reached_client)?;
    string("next.error_type", a.error_type)?;
    Ok(Some(ProposedAttempt {
        model: string("next.model", a.model)?,
        input_tokens: count("next.input_tokens", a.input_tokens)?,
        cached_input_tokens: count("next.cached_input_tokens", a.cached_input_tokens)?,
        output_cap: count("next.output_cap", a.output_cap)?,
        cache_write_input_tokens: count(
            "next.cache_write_input_tokens",
            a.cache_write_input_tokens,
        )?,
    }))
}

/// An object of known fields; serde's message names an unknown one. (Serde would also take a
/// list of the fields' values in order, which the proto3 JSON mapping does not.)
fn object<'a, T: Deserialize<'a>>(path: &str, text: &'a str) -> Result<T, Malformed> {
    if !text.trim_start().starts_with('{') {
        return Err(Malformed::new(
            path,
            format!("expected a JSON object, got {}", excerpt(text)),
        ));
    }
    serde_json::from_str(text)
        .map_err(|e| Malformed::new(path, format!("not a valid JSON object: {e}")))
}

fn parse<'a, T: Deserialize<'a>>(
    path: &str,
    raw: &'a RawValue,
    expected: &str,
) -> Result<T, Malformed> {
    serde_json::from_str(raw.get()).map_err(|_| {
        Malformed::new(
            path,
            format!("expected {expected}, got {}", excerpt(raw.get())),
        )
    })
}

/// The start of a value a caller sent, to quote in an error without echoing a large body.
fn excerpt(text: &str) -> String {
    const QUOTED_CHARS: usize = 40;
    match text.char_indices().nth(QUOTED_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

fn is_null(raw: &RawValue) -> bool {
    raw.get() == "null"
}

fn string(path: &str, raw: Raw<'_>) -> Result<String, Malformed> {
    match raw.filter(|r| !is_null(r)) {
        Some(raw) => parse(path, raw, "a string"),
        None => Ok(String::new()),
    }
}

fn flag(path: &str, raw: Raw<'_>) -> Result<Option<bool>, Malformed> {
    match raw.filter(|r| !is_null(r)) {
        Some(raw) => parse(path, raw, "true or false").map(Some),
        None => Ok(None),
    }
}

fn strings(path: &str, raw: Raw<'_>) -> Result<Vec<String>, Malformed> {
    match raw.filter(|r| !is_null(r)) {
        Some(raw) => parse(path, raw, "a list of strings"),
        None => Ok(Vec::new()),
    }
}

/// The text of a number given as a JSON number or string; `None` for `null`.
fn number_text<'a>(
    path: &str,
    raw: Raw<'a>,
) -> Result<Option<std::borrow::Cow<'a, str>>, Malformed> {
    let Some(raw) = raw.filter(|r| !is_null(r)) else {
        return Ok(None);
    };
    let text = raw.get();
    if text.starts_with('"') {
        parse::<std::borrow::Cow<'a, str>>(path, raw, "a number or a string holding one").map(Some)
    } else if text.starts_with(['-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9']) {
        Ok(Some(std::borrow::Cow::Borrowed(text)))
    } else {
        Err(Malformed::new(
            path,
            format!(
                "expected a number or a string holding one, got {}",
                excerpt(text)
            ),
        ))
    }
}

/// Money stays text until it is read exactly (SPEC §2); a JSON number's literal is that text.
fn money(path: &str, raw: Raw<'_>) -> Result<String, Malformed> {
    Ok(number_text(path, raw)?
        .map(|t| t.into_owned())
        .unwrap_or_default())
}

/// A count: an integer as a JSON number or string, also written `1e4` or `10000.0` (SPEC §2).
fn count(path: &str, raw: Raw<'_>) -> Result<Option<i64>, Malformed> {
    let Some(text) = number_text(path, raw)? else {
        return Ok(None);
    };
    match int(ValueRef::Str(&text)) {
        Count::Value(n) => Ok(Some(n)),
        Count::OutOfRange => Err(Malformed::new(
            path,
            format!("{text} does not fit a 64-bit integer"),
        )),
        Count::Missing => Err(Malformed::new(path, format!("not an integer: {text}"))),
    }
}

/// The response under the proto field names, every field present.
#[derive(Serialize)]
struct JsonResponse<'a> {
    allow: bool,
    decision: &'a str,
    violations: &'a [String],
    unaudited_reason: Option<&'a str>,
    attempt_index: i32,
    estimated_incremental_usd: Option<&'a str>,
    cumulative_incremental_usd: Option<&'a str>,
    remaining_envelope_usd: Option<&'a str>,
    pricing_version: Option<&'a str>,
    pricing_checked_at: Option<&'a str>,
    pricing_digest: Option<&'a str>,
    envelope_source: Option<&'a str>,
    decision_reason: &'a str,
}

pub fn response_to_json(response: &DecideResponse) -> Vec<u8> {
    let json = JsonResponse {
        allow: response.allow,
        decision: &response.decision,
        violations: &response.violations,
        unaudited_reason: response.unaudited_reason.as_deref(),
        attempt_index: response.attempt_index,
        estimated_incremental_usd: response.estimated_incremental_usd.as_deref(),
        cumulative_incremental_usd: response.cumulative_incremental_usd.as_deref(),
        remaining_envelope_usd: response.remaining_envelope_usd.as_deref(),
        pricing_version: response.pricing_version.as_deref(),
        pricing_checked_at: response.pricing_checked_at.as_deref(),
        pricing_digest: response.pricing_digest.as_deref(),
        envelope_source: response.envelope_source.as_deref(),
        decision_reason: &response.decision_reason,
    };
    // Strings, bools and an integer: serialising them cannot fail.
    serde_json::to_vec(&json).unwrap_or_default()
}

//! Properties of the rules (SPEC §4) over random requests: any attempts, indices with gaps,
//! duplicates or none, known and unknown models, absurd token counts, partial or conflicting
//! envelopes. The rules must never panic and must keep their arithmetic and ordering promises.

use std::path::Path;
use std::str::FromStr;
use std::sync::OnceLock;

use chrono::NaiveDate;
use proptest::prelude::*;
use retry_spend_collector::assemble::{GroupKey, Grouper, Request};
use retry_spend_collector::contract::{
    Count, EnvelopeFields, SdkFacts, SpanFacts, SpanKind, MAX_TOKEN_COUNT,
};
use retry_spend_collector::pricing::{PricingBook, Snapshot};
use retry_spend_collector::record::{AttemptRow, Decision, SpendClass};
use retry_spend_collector::rules::{evaluate, RulesConfig};
use rust_decimal::Decimal;

const SNAPSHOT: &[u8] = include_bytes!("../config/pricing/2026-08-22-aiwave.json");
const VERSION: &str = "a42d372ccf0b5dd13ecf71203521f9d2";
const SOURCE: &str = "https://aiwave.live/api/pricing";
const MODELS: &[&str] = &[
    "deepseek-v4-flash",
    "deepseek-v4-pro",
    "kimi-k2.7-code",
    "kimi-k2.6",
    "glm-5",
    "qwen3.5-122b-a10b",
    "gpt-unknown",
];
const FAMILIES: &[&str] = &["deepseek", "kimi", "glm", "qwen", "openai"];
const FALLBACK_CHOICES: &[&[&str]] = &[&["deepseek", "qwen"], &[], &["kimi"]];
/// 2026-08-25T12:00:00Z, three days after the snapshot was checked.
const T0: u64 = 1_787_659_200_000_000_000;
const TRACE: [u8; 16] = [7; 16];
const LOGICAL_SPAN: [u8; 8] = [0xff; 8];
const REQUEST_ID: &str = "req-1";

fn book() -> &'static PricingBook {
    static BOOK: OnceLock<PricingBook> = OnceLock::new();
    BOOK.get_or_init(|| {
        let mut book = PricingBook::default();
        book.insert(Snapshot::from_bytes(Path::new("aiwave.json"), SNAPSHOT).unwrap())
            .unwrap();
        book
    })
}

/// `a + b` (`subtract`: `a - b`) at the places the operands bring (none for a zero), or `None`
/// when no decimal holds it there: worked out in i128 here, not with the crate's own
/// arithmetic, so that a test of that arithmetic does not check it with itself.
fn exact(a: Decimal, b: Decimal, subtract: bool) -> Option<Decimal> {
    let places = |d: Decimal| if d.is_zero() { 0 } else { d.scale() };
    let scale = places(a).max(places(b));
    let at_scale = |d: Decimal| -> Option<i128> {
        if d.is_zero() {
            return Some(0);
        }
        d.mantissa()
            .checked_mul(10_i128.checked_pow(scale - d.scale())?)
    };
    let (a, b) = (at_scale(a)?, at_scale(b)?);
    let sum = if subtract {
        a.checked_sub(b)?
    } else {
        a.checked_add(b)?
    };
    Decimal::try_from_i128_with_scale(sum, scale).ok()
}

fn d(s: &str) -> Decimal {
    Decimal::from_str(s).unwrap()
}

fn count() -> impl Strategy<Value = Count> {
    count_below(5_000)
}

/// Mostly plausible counts below `typical`; sometimes missing, negative, huge or out of range.
fn count_below(typical: i64) -> impl Strategy<Value = Count> {
    prop_oneof![
        120 => (0..typical).prop_map(Count::Value),
        10 => (0_i64..200_000).prop_map(Count::Value),
        1 => Just(Count::Missing),
        1 => (i64::MIN..0).prop_map(Count::Value),
        1 => (MAX_TOKEN_COUNT - 2..=MAX_TOKEN_COUNT + 2).prop_map(Count::Value),
        1 => Just(Count::Value(i64::MAX)),
        1 => Just(Count::OutOfRange),
    ]
}

fn money() -> impl Strategy<Value = Option<Decimal>> {
    prop_oneof![
        Just(None),
        Just(Some(d("0.015"))),
        Just(Some(Decimal::ZERO)),
        Just(Some(d("-1"))),
        Just(Some(Decimal::MAX)),
        Just(Some(Decimal::MIN)),
        (0_i64..100_000_000).prop_map(|m| Some(Decimal::new(m, 9))),
    ]
}

fn option_of<T: Clone + std::fmt::Debug + 'static>(
    values: &'static [T],
) -> impl Strategy<Value = Option<T>> {
    prop_oneof![
        1 => Just(None),
        6 => proptest::sample::select(values).prop_map(Some),
    ]
}

fn good_envelope() -> EnvelopeFields {
    EnvelopeFields {
        present: true,
        pricing_source: Some(SOURCE.into()),
        pricing_checked_at: NaiveDate::from_ymd_opt(2026, 8, 22),
        pricing_version: Some(VERSION.into()),
        billing_group: Some("vip".into()),
        max_incremental_usd: Some(d("0.015")),
        max_attempts_after_first: Some(2),
        allow_family_fallback: Some(true),
        allowed_fallback_families: Some(vec!["deepseek".into(), "qwen".into(), "glm".into()]),
        replay_safe: None,
        task_type: Some("support_summary".into()),
        json_invalid: false,
        ..Default::default()
    }
}

fn random_envelope() -> impl Strategy<Value = EnvelopeFields> {
    let texts = (
        option_of(&[SOURCE, "https://elsewhere.example/pricing"]),
        option_of(&[(2026, 8, 22), (2026, 1, 1), (1970, 1, 1)]),
        option_of(&[VERSION, "unknown-version"]),
        option_of(&["vip", "default", "platinum"]),
        option_of(&["support_summary", "code_patch"]),
    );
    let policy = (
        money(),
        option_of(&[0, 1, 2, 5, -1, i32::MAX]),
        proptest::option::of(any::<bool>()),
        option_of(FALLBACK_CHOICES),
        proptest::option::of(any::<bool>()),
        any::<bool>(),
        proptest::bool::weighted(0.05),
    );
    (texts, policy).prop_map(
        |(
            (source, date, version, group, task),
            (max, attempts, allow, families, safe, present, json_invalid),
        )| {
            EnvelopeFields {
                present,
                json_invalid,
                pricing_source: source.map(Into::into),
                pricing_checked_at: date.and_then(|(y, m, d)| NaiveDate::from_ymd_opt(y, m, d)),
                pricing_version: version.map(Into::into),
                billing_group: group.map(Into::into),
                max_incremental_usd: max,
                max_attempts_after_first: attempts,
                allow_family_fallback: allow,
                allowed_fallback_families: families
                    .map(|f| f.iter().map(|s| (*s).to_owned()).collect()),
                replay_safe: safe,
                task_type: task.map(Into::into),
                ..Default::default()
            }
        },
    )
}

fn envelope() -> BoxedStrategy<EnvelopeFields> {
    prop_oneof![
        6 => Just(good_envelope()),
        2 => random_envelope(),
        1 => Just(EnvelopeFields::default()),
    ]
    .boxed()
}

fn response_model(request: Option<String>) -> impl Strategy<Value = Option<String>> {
    let same = request.clone();
    let dated = request.as_ref().map(|m| format!("{m}-2026-08-01"));
    let prefixed = request.as_ref().map(|m| format!("openai/{m}"));
    prop_oneof![
        3 => Just(None),
        2 => Just(same),
        1 => Just(dated),
        1 => Just(prefixed),
        1 => option_of(MODELS).prop_map(|m| m.map(str::to_owned)),
    ]
}

/// One attempt span; `n` keeps span ids distinct however the attempts are shuffled.
fn attempt(n: usize) -> BoxedStrategy<SpanFacts> {
    let index = prop_oneof![
        6 => Just(Some(n as i32)),
        1 => Just(None),
        2 => option_of(&[0, 1, 2, 3, 5, 300, i32::MAX]),
    ];
    let ids = (any::<u32>(), index);
    let times = prop_oneof![
        40 => (0_u64..20).prop_map(|s| T0 + s * 1_000_000_000),
        1 => Just(0_u64),
        1 => Just(u64::MAX),
        1 => Just(T0 + 400 * 86_400 * 1_000_000_000),
    ];
    let usage = (count(), count_below(1_000), count(), count());
    let extras = (
        proptest::option::of(any::<bool>()),
        option_of(FAMILIES),
        money(),
        envelope(),
        proptest::bool::weighted(0.2),
        proptest::option::of(any::<bool>()),
    );
    let model = option_of(MODELS);
    (ids, times, usage, extras, model)
        .prop_flat_map(move |(ids, start, usage, extras, model)| {
            let model = model.map(str::to_owned);
            (
                Just((ids, start, usage, extras, model.clone())),
                response_model(model),
            )
        })
        .prop_map(
            move |(((salt, index), start, usage, extras, model), response)| {
                let (reached, family, sdk, env, carries_envelope, is_error) = extras;
                let mut span_id = [0u8; 8];
                span_id[..4].copy_from_slice(&salt.to_be_bytes());
                span_id[4..].copy_from_slice(&(n as u32).to_be_bytes());
                SpanFacts {
                    span_id,
                    parent_span_id: Some(LOGICAL_SPAN),
                    start_time_unix_nano: start,
                    end_time_unix_nano: start.saturating_add(1),
                    attempt_index: index,
                    envelope: if carries_envelope {
                        env.into()
                    } else {
                        EnvelopeFields::empty()
                    },
                    request_model: model.map(Into::into),
                    response_model: response.map(Into::into),
                    provider: Some("aiwave".into()),
                    model_family: family.map(Into::into),
                    input_tokens: usage.0,
                    cached_input_tokens: usage.1,
                    output_tokens: usage.2,
                    output_cap: usage.3,
                    output_reached_client: reached,
                    error_type: is_error.filter(|e| *e).map(|_| "rate_limited".into()),
                    sdk: sdk.map(|usd| {
                        Box::new(SdkFacts {
                            estimated_incremental_usd: Some(usd),
                            ..SdkFacts::default()
                        })
                    }),
                    ..span(SpanKind::Attempt)
                }
            },
        )
        .boxed()
}

/// A span of request [`REQUEST_ID`] of service `checkout` in [`TRACE`], nothing else read.
fn span(kind: SpanKind) -> SpanFacts {
    SpanFacts {
        trace_id: TRACE,
        service_name: "checkout".into(),
        kind,
        request_id: Some(REQUEST_ID.into()),
        ..Default::default()
    }
}

fn logical(env: EnvelopeFields) -> SpanFacts {
    SpanFacts {
        span_id: LOGICAL_SPAN,
        start_time_unix_nano: T0,
        end_time_unix_nano: T0 + 60_000_000_000,
        envelope: env.into(),
        ..span(SpanKind::LogicalRequest)
    }
}

/// A request of up to eight attempts, with or without its logical span, plus a shuffled copy of
/// its attempts.
fn request() -> BoxedStrategy<(Request, Vec<SpanFacts>)> {
    let attempts = (0_usize..=8).prop_flat_map(|len| (0..len).map(attempt).collect::<Vec<_>>());
    let logical_envelope = prop_oneof![1 => Just(None), 4 => envelope().prop_map(Some)];
    (attempts, logical_envelope)
        .prop_flat_map(|(attempts, env)| {
            let shuffled = Just(attempts.clone()).prop_shuffle();
            (Just((attempts, env)), shuffled)
        })
        .prop_map(|((attempts, env), shuffled)| {
            let request = Request {
                key: GroupKey::RequestId {
                    trace_id: TRACE,
                    request_id: REQUEST_ID.into(),
                },
                logical: env.map(logical),
                attempts,
                evaluated: Vec::new(),
                attempt_source: retry_spend_collector::record::AttemptSource::Declared,
                sources: Vec::new(),
                origins: None,
            };
            (request, shuffled)
        })
        .boxed()
}

fn by_span_id(mut rows: Vec<AttemptRow>) -> Vec<AttemptRow> {
    rows.sort_by_key(|r| r.span_id);
    rows
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_attempt_gets_exactly_one_row((request, _) in request()) {
        let rows = evaluate(&request, book(), &RulesConfig::default());
        prop_assert_eq!(rows.len(), request.attempts.len());
        let mut ids: Vec<[u8; 8]> = rows.iter().map(|r| r.span_id).collect();
        ids.sort_unstable();
        ids.dedup();
        prop_assert_eq!(ids.len(), request.attempts.len());
    }

    #[test]
    fn cumulative_is_the_running_sum_of_retry_estimates((request, _) in request()) {
        let rows = evaluate(&request, book(), &RulesConfig::default());
        prop_assert!(rows.windows(2).all(|w| w[0].attempt_index <= w[1].attempt_index));
        let mut running = Some(Decimal::ZERO);
        for row in rows.iter().filter(|r| r.attempt_index > 0) {
            running = running
                .zip(row.estimated_incremental_usd)
                .and_then(|(a, b)| exact(a, b, false));
            if row.audited {
                prop_assert!(row.cumulative_incremental_usd.is_some(), "{:?}", row);
            }
            if row.audited || row.cumulative_incremental_usd.is_some() {
                prop_assert_eq!(row.cumulative_incremental_usd, running, "{:?}", row);
            }
        }
    }

    #[test]
    fn remaining_is_the_envelope_minus_the_cumulative((request, _) in request()) {
        for row in evaluate(&request, book(), &RulesConfig::default()) {
            if let (Some(max), Some(cum)) = (row.max_incremental_usd, row.cumulative_incremental_usd) {
                // Null only where no decimal holds the difference exactly: money is never rounded.
                prop_assert_eq!(row.remaining_envelope_usd, exact(max, cum, true));
            } else {
                prop_assert_eq!(row.remaining_envelope_usd, None);
            }
        }
    }

    #[test]
    fn rows_do_not_depend_on_the_order_attempts_arrive_in((request, shuffled) in request()) {
        let rows = by_span_id(evaluate(&request, book(), &RulesConfig::default()));
        let reordered = Request { attempts: shuffled.clone(), ..request.clone() };
        prop_assert_eq!(
            &by_span_id(evaluate(&reordered, book(), &RulesConfig::default())),
            &rows
        );

        // The same spans through the grouper, logical span last, give the same rows too.
        let mut grouper = Grouper::default();
        for span in shuffled.into_iter().chain(request.logical.clone()) {
            grouper.offer(span);
        }
        let grouped: Vec<AttemptRow> = grouper
            .drain_all()
            .iter()
            .flat_map(|r| evaluate(r, book(), &RulesConfig::default()))
            .collect();
        prop_assert_eq!(&by_span_id(grouped), &rows);
    }

    #[test]
    fn first_attempt_is_always_first_attempt_and_base((request, _) in request()) {
        for row in evaluate(&request, book(), &RulesConfig::default()) {
            prop_assert_eq!(row.attempt_index == 0, row.decision == Decision::FirstAttempt);
            prop_assert_eq!(row.attempt_index == 0, row.spend_class == SpendClass::Base);
            if row.attempt_index == 0 {
                prop_assert_eq!(row.estimated_incremental_usd, Some(Decimal::ZERO));
                prop_assert_eq!(row.cumulative_incremental_usd, Some(Decimal::ZERO));
            }
        }
    }

    #[test]
    fn violations_are_unique_and_in_spec_order((request, _) in request()) {
        for row in evaluate(&request, book(), &RulesConfig::default()) {
            // `Violation` is declared in SPEC order, so strictly increasing means both.
            prop_assert!(
                row.violations.windows(2).all(|w| w[0] < w[1]),
                "{:?}",
                row.violations
            );
        }
    }
}

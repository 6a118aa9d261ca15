use std::str::FromStr;
use std::sync::Arc;

use chrono::NaiveDate;
use rust_decimal::Decimal;

use super::*;
use crate::assemble::GroupKey;
use crate::contract::{parse_envelope_json, Count, EnvelopeFields, SdkFacts, SpanKind};
use crate::policy::PolicySet;
use crate::pricing::Snapshot;
use crate::record::UnauditedReason as R;

const SNAPSHOT: &str = include_str!("../../../../config/pricing/2026-08-22-aiwave.json");
const VERSION: &str = "a42d372ccf0b5dd13ecf71203521f9d2";
const SOURCE: &str = "https://aiwave.live/api/pricing";
/// 2026-08-25T12:00:00Z, three days after the snapshot was checked.
const T0: u64 = 1_787_659_200_000_000_000;
const SECOND: u64 = 1_000_000_000;
const DAY: u64 = 86_400 * SECOND;

fn d(s: &str) -> Decimal {
    Decimal::from_str(s).unwrap()
}

fn book() -> PricingBook {
    let mut book = PricingBook::default();
    book.insert(Snapshot::from_bytes("aiwave.json".as_ref(), SNAPSHOT.as_bytes()).unwrap())
        .unwrap();
    book
}

/// The seed's policy, with room for two retries.
fn envelope() -> EnvelopeFields {
    EnvelopeFields {
        present: true,
        pricing_source: Some(SOURCE.into()),
        pricing_checked_at: NaiveDate::from_ymd_opt(2026, 8, 22),
        pricing_version: Some(VERSION.into()),
        billing_group: Some("vip".into()),
        max_incremental_usd: Some(d("0.015")),
        max_attempts_after_first: Some(2),
        allow_family_fallback: Some(true),
        allowed_fallback_families: Some(vec!["deepseek".into(), "glm".into(), "qwen".into()]),
        task_type: Some("support_summary".into()),
        ..Default::default()
    }
}

/// An attempt with the worked example's usage: 10,000 input (4,000 cached), cap 800, 300 out.
fn attempt(index: i32, model: &str) -> SpanFacts {
    SpanFacts {
        trace_id: [7; 16],
        span_id: [index as u8 + 1; 8],
        parent_span_id: Some([99; 8]),
        service_name: "checkout".into(),
        start_time_unix_nano: T0 + index as u64 * SECOND,
        end_time_unix_nano: T0 + index as u64 * SECOND + 500_000_000,
        kind: SpanKind::Attempt,
        request_id: Some("req-1".into()),
        attempt_index: Some(index),
        attempt_count: None,
        envelope: EnvelopeFields::default().into(),
        envelope_json: None,
        request_model: Some(model.into()),
        response_model: None,
        provider: Some("aiwave".into()),
        model_family: None,
        input_tokens: Count::Value(10_000),
        cached_input_tokens: Count::Value(4_000),
        output_tokens: Count::Value(300),
        output_cap: Count::Value(800),
        output_reached_client: None,
        error_type: None,
        sdk: None,
        captured: Default::default(),
        http: None,
        ..Default::default()
    }
}

fn logical(env: EnvelopeFields) -> SpanFacts {
    SpanFacts {
        span_id: [99; 8],
        parent_span_id: None,
        kind: SpanKind::LogicalRequest,
        attempt_index: None,
        request_model: None,
        input_tokens: Count::Missing,
        cached_input_tokens: Count::Missing,
        output_tokens: Count::Missing,
        output_cap: Count::Missing,
        envelope: env.into(),
        ..attempt(0, "")
    }
}

fn request_with(env: EnvelopeFields, attempts: Vec<SpanFacts>) -> Request {
    let key = GroupKey::RequestId {
        trace_id: [7; 16],
        request_id: "req-1".into(),
    };
    Request {
        key,
        logical: Some(logical(env)),
        attempts,
        evaluated: vec![],
        attempt_source: crate::record::AttemptSource::Declared,
        sources: Vec::new(),
        origins: None,
    }
}

fn eval_with(env: EnvelopeFields, attempts: Vec<SpanFacts>) -> Vec<AttemptRow> {
    evaluate(
        &request_with(env, attempts),
        &book(),
        &RulesConfig::default(),
    )
}

fn eval(attempts: Vec<SpanFacts>) -> Vec<AttemptRow> {
    eval_with(envelope(), attempts)
}

fn reason_of(env: EnvelopeFields, attempts: Vec<SpanFacts>) -> Option<R> {
    eval_with(env, attempts).last().unwrap().unaudited_reason
}

fn with(mut a: SpanFacts, f: impl FnOnce(&mut SpanFacts)) -> SpanFacts {
    f(&mut a);
    a
}

fn env_with(f: impl FnOnce(&mut EnvelopeFields)) -> EnvelopeFields {
    let mut e = envelope();
    f(&mut e);
    e
}

#[test]
fn worked_example_prices_planned_cost_exactly() {
    let rows = eval(vec![
        attempt(0, "deepseek-v4-flash"),
        attempt(1, "deepseek-v4-flash"),
    ]);
    assert_eq!(rows[0].planned_attempt_usd, Some(d("0.0028068")));
    assert_eq!(rows[1].planned_attempt_usd, Some(d("0.0028068")));
    // actual: 6000 * 0.319 + 4000 * 0.0318 + 300 * 0.957 = 2328.3 per million
    assert_eq!(rows[1].actual_attempt_usd, Some(d("0.0023283")));
    assert_eq!(rows[1].group_ratio, Some(d("1")));
}

#[test]
fn default_billing_group_triples_the_price() {
    let env = env_with(|e| e.billing_group = Some("default".into()));
    let rows = eval_with(
        env,
        vec![
            attempt(0, "deepseek-v4-flash"),
            attempt(1, "deepseek-v4-flash"),
        ],
    );
    assert_eq!(rows[1].planned_attempt_usd, Some(d("0.0084204")));
    assert_eq!(rows[1].group_ratio, Some(d("3")));
}

#[test]
fn first_attempt_is_base_with_zero_incremental_and_whole_envelope() {
    let rows = eval(vec![attempt(0, "glm-5")]);
    let first = &rows[0];
    assert_eq!(first.decision, Decision::FirstAttempt);
    assert_eq!(first.spend_class, SpendClass::Base);
    assert!(first.audited);
    assert_eq!(first.estimated_incremental_usd, Some(Decimal::ZERO));
    assert_eq!(first.cumulative_incremental_usd, Some(Decimal::ZERO));
    assert_eq!(first.remaining_envelope_usd, Some(d("0.015")));
    assert_eq!(first.violations, vec![]);
}

#[test]
fn retry_within_envelope_accumulates_incremental_spend() {
    let rows = eval(vec![attempt(0, "glm-5"), attempt(1, "glm-5")]);
    let retry = &rows[1];
    // 6000 * 0.775 + 4000 * 0.258065 + 800 * 2.48 = 7666.26 per million
    assert_eq!(retry.estimated_incremental_usd, Some(d("0.00766626")));
    assert_eq!(retry.cumulative_incremental_usd, Some(d("0.00766626")));
    assert_eq!(retry.remaining_envelope_usd, Some(d("0.00733374")));
    assert_eq!(retry.decision, Decision::WithinEnvelope);
    assert_eq!(retry.spend_class, SpendClass::Retry);
    assert_eq!(retry.original_model.as_deref(), Some("glm-5"));
    assert_eq!(retry.original_family.as_deref(), Some("glm"));
    assert!(retry.audited);
}

#[test]
fn second_retry_over_budget_is_over_envelope() {
    let rows = eval(vec![
        attempt(0, "glm-5"),
        attempt(1, "glm-5"),
        attempt(2, "glm-5"),
    ]);
    let second = &rows[2];
    assert_eq!(second.cumulative_incremental_usd, Some(d("0.01533252")));
    assert_eq!(second.remaining_envelope_usd, Some(d("-0.00033252")));
    assert_eq!(second.violations, vec![Violation::OverEnvelope]);
    assert_eq!(second.decision, Decision::OverEnvelope);
    assert_eq!(
        second.decision_reason,
        "retry 2 of glm-5 would bring incremental spend to 0.01533252 USD, over the 0.015 envelope"
    );
}

#[test]
fn cumulative_is_the_sum_of_incrementals_across_models() {
    let rows = eval(vec![
        attempt(0, "glm-5"),
        attempt(1, "deepseek-v4-flash"),
        attempt(2, "qwen3.5-122b-a10b"),
    ]);
    // qwen has no cached price: 10000 * 0.246575 + 800 * 1.862 = 3955.35 per million
    assert_eq!(rows[2].estimated_incremental_usd, Some(d("0.00395535")));
    assert_eq!(
        rows[2].cumulative_incremental_usd,
        Some(d("0.0028068") + d("0.00395535"))
    );
}

#[test]
fn retry_after_partial_stream_is_replay_unsafe() {
    let first = with(attempt(0, "glm-5"), |a| {
        a.output_reached_client = Some(true)
    });
    let rows = eval(vec![first, attempt(1, "glm-5")]);
    assert_eq!(rows[1].violations, vec![Violation::ReplayUnsafe]);
    assert_eq!(rows[1].decision, Decision::ReplayUnsafe);
}

#[test]
fn replay_safe_envelope_allows_retry_after_partial_stream() {
    let first = with(attempt(0, "glm-5"), |a| {
        a.output_reached_client = Some(true)
    });
    let env = env_with(|e| e.replay_safe = Some(true));
    let rows = eval_with(env, vec![first, attempt(1, "glm-5")]);
    assert_eq!(rows[1].decision, Decision::WithinEnvelope);
}

#[test]
fn partial_output_of_the_retry_itself_does_not_make_it_unsafe() {
    let retry = with(attempt(1, "glm-5"), |a| {
        a.output_reached_client = Some(true)
    });
    let rows = eval(vec![attempt(0, "glm-5"), retry]);
    assert_eq!(rows[1].decision, Decision::WithinEnvelope);
}

#[test]
fn retry_beyond_attempt_limit_is_over_attempts() {
    let env = env_with(|e| e.max_attempts_after_first = Some(1));
    let rows = eval_with(
        env,
        vec![
            attempt(0, "deepseek-v4-flash"),
            attempt(1, "deepseek-v4-flash"),
            attempt(2, "deepseek-v4-flash"),
        ],
    );
    assert_eq!(rows[1].decision, Decision::WithinEnvelope);
    assert_eq!(rows[2].violations, vec![Violation::OverAttempts]);
    assert_eq!(rows[2].decision, Decision::OverAttempts);
}

#[test]
fn fallback_to_an_allowed_family_is_a_fallback() {
    let rows = eval(vec![attempt(0, "glm-5"), attempt(1, "deepseek-v4-flash")]);
    assert_eq!(rows[1].violations, vec![]);
    assert_eq!(rows[1].spend_class, SpendClass::Fallback);
    assert_eq!(rows[1].retry_family.as_deref(), Some("deepseek"));
}

#[test]
fn fallback_to_a_family_not_allowed_is_routing_drift() {
    let rows = eval(vec![attempt(0, "glm-5"), attempt(1, "kimi-k2.6")]);
    assert_eq!(rows[1].violations, vec![Violation::RoutingDrift]);
    assert_eq!(rows[1].decision, Decision::RoutingDrift);
    assert_eq!(rows[1].spend_class, SpendClass::Drift);
}

#[test]
fn family_change_without_allow_family_fallback_is_routing_drift() {
    let env = env_with(|e| e.allow_family_fallback = None);
    let rows = eval_with(
        env,
        vec![attempt(0, "glm-5"), attempt(1, "deepseek-v4-flash")],
    );
    assert_eq!(rows[1].decision, Decision::RoutingDrift);
}

#[test]
fn family_attribute_overrides_the_snapshot_family() {
    let retry = with(attempt(1, "deepseek-v4-flash"), |a| {
        a.model_family = Some("glm".into())
    });
    let env = env_with(|e| e.allow_family_fallback = Some(false));
    let rows = eval_with(env, vec![attempt(0, "glm-5"), retry]);
    assert_eq!(rows[1].decision, Decision::WithinEnvelope);
    assert_eq!(rows[1].spend_class, SpendClass::Fallback);
}

#[test]
fn gateway_serving_another_model_is_routing_drift_even_on_the_first_attempt() {
    let first = with(attempt(0, "gpt-4o"), |a| {
        a.response_model = Some("openai/gpt-4o".into())
    });
    let rows = eval_with(EnvelopeFields::default(), vec![first]);
    assert_eq!(rows[0].violations, vec![Violation::RoutingDrift]);
    assert_eq!(rows[0].decision, Decision::FirstAttempt);
}

#[test]
fn dated_variant_of_the_requested_model_is_not_drift() {
    for served in ["gpt-4o-2024-08-06", "gpt-4o-mini", "gpt-4o"] {
        let first = with(attempt(0, "gpt-4o"), |a| {
            a.response_model = Some(served.into())
        });
        assert_eq!(eval(vec![first])[0].violations, vec![], "{served}");
    }
    let first = with(attempt(0, "gpt-4o"), |a| {
        a.response_model = Some("GPT-4o".into())
    });
    assert_eq!(
        eval(vec![first])[0].violations,
        vec![Violation::RoutingDrift]
    );
}

#[test]
fn without_an_envelope_only_served_model_drift_applies() {
    let first = with(attempt(0, "glm-5"), |a| {
        a.output_reached_client = Some(true)
    });
    let rows = eval_with(
        EnvelopeFields::default(),
        vec![first, attempt(1, "kimi-k2.6"), attempt(2, "glm-5")],
    );
    assert_eq!(rows[1].violations, vec![]);
    assert_eq!(rows[1].decision, Decision::Unaudited);
    assert_eq!(rows[1].unaudited_reason, Some(R::NoEnvelope));
    let served = with(attempt(1, "glm-5"), |a| {
        a.response_model = Some("kimi-k2.6".into())
    });
    let rows = eval_with(EnvelopeFields::default(), vec![attempt(0, "glm-5"), served]);
    assert_eq!(rows[1].decision, Decision::RoutingDrift);
}

fn sdk_estimate(usd: &str) -> SdkFacts {
    SdkFacts {
        estimated_incremental_usd: Some(d(usd)),
        ..SdkFacts::default()
    }
}

#[test]
fn sdk_estimate_far_from_ours_is_flagged_not_decided() {
    let retry = with(attempt(1, "deepseek-v4-flash"), |a| {
        a.sdk = Some(Box::new(sdk_estimate("0.0028080")))
    });
    let rows = eval(vec![attempt(0, "deepseek-v4-flash"), retry]);
    assert_eq!(rows[1].violations, vec![Violation::SdkEstimateMismatch]);
    assert_eq!(rows[1].decision, Decision::WithinEnvelope);
}

#[test]
fn sdk_estimate_within_a_micro_dollar_is_not_flagged() {
    let retry = with(attempt(1, "deepseek-v4-flash"), |a| {
        a.sdk = Some(Box::new(sdk_estimate("0.0028078")))
    });
    assert_eq!(
        eval(vec![attempt(0, "deepseek-v4-flash"), retry])[1].violations,
        vec![]
    );
}

#[test]
fn no_envelope() {
    assert_eq!(
        reason_of(EnvelopeFields::default(), vec![attempt(0, "glm-5")]),
        Some(R::NoEnvelope)
    );
}

#[test]
fn envelope_incomplete_without_budget_or_attempt_limit() {
    let env = env_with(|e| e.max_incremental_usd = None);
    assert_eq!(
        reason_of(env, vec![attempt(0, "glm-5")]),
        Some(R::EnvelopeIncomplete)
    );
    let env = env_with(|e| e.max_attempts_after_first = None);
    assert_eq!(
        reason_of(env, vec![attempt(0, "glm-5")]),
        Some(R::EnvelopeIncomplete)
    );
}

#[test]
fn envelope_incomplete_when_the_json_policy_does_not_parse() {
    let mut first = attempt(0, "glm-5");
    first.envelope_json = Some(parse_envelope_json("{not json").into());
    assert_eq!(
        reason_of(EnvelopeFields::default(), vec![first]),
        Some(R::EnvelopeIncomplete)
    );
}

#[test]
fn pricing_version_missing() {
    let env = env_with(|e| e.pricing_version = None);
    assert_eq!(
        reason_of(env, vec![attempt(0, "glm-5")]),
        Some(R::PricingVersionMissing)
    );
}

#[test]
fn pricing_source_missing() {
    let env = env_with(|e| e.pricing_source = None);
    assert_eq!(
        reason_of(env, vec![attempt(0, "glm-5")]),
        Some(R::PricingSourceMissing)
    );
}

#[test]
fn pricing_checked_at_missing() {
    let env = env_with(|e| e.pricing_checked_at = None);
    assert_eq!(
        reason_of(env, vec![attempt(0, "glm-5")]),
        Some(R::PricingCheckedAtMissing)
    );
}

#[test]
fn unknown_pricing_version_leaves_money_null() {
    let env = env_with(|e| e.pricing_version = Some("nope".into()));
    let rows = eval_with(env, vec![attempt(0, "glm-5"), attempt(1, "glm-5")]);
    assert_eq!(rows[1].unaudited_reason, Some(R::UnknownPricingVersion));
    assert_eq!(rows[1].decision, Decision::Unaudited);
    assert_eq!(rows[1].planned_attempt_usd, None);
    assert_eq!(rows[1].pricing_digest, None);
}

#[test]
fn pricing_metadata_mismatch_on_source_or_date() {
    let env = env_with(|e| e.pricing_source = Some("https://example.com/prices".into()));
    assert_eq!(
        reason_of(env, vec![attempt(0, "glm-5")]),
        Some(R::PricingMetadataMismatch)
    );
    let env = env_with(|e| e.pricing_checked_at = NaiveDate::from_ymd_opt(2026, 8, 21));
    let rows = eval_with(env, vec![attempt(0, "glm-5"), attempt(1, "glm-5")]);
    assert_eq!(rows[1].unaudited_reason, Some(R::PricingMetadataMismatch));
    // Figures are filled in whenever their inputs are known, audited or not.
    assert_eq!(rows[1].planned_attempt_usd, Some(d("0.00766626")));
}

#[test]
fn pricing_stale_after_max_age_whole_days() {
    let at_limit = with(attempt(0, "glm-5"), |a| {
        a.start_time_unix_nano = T0 + 27 * DAY
    });
    assert_eq!(reason_of(envelope(), vec![at_limit]), None);
    let past_limit = with(attempt(0, "glm-5"), |a| {
        a.start_time_unix_nano = T0 + 28 * DAY
    });
    assert_eq!(
        reason_of(envelope(), vec![past_limit]),
        Some(R::PricingStale)
    );
}

#[test]
fn unknown_billing_group_leaves_money_null() {
    let env = env_with(|e| e.billing_group = Some("platinum".into()));
    let rows = eval_with(env, vec![attempt(0, "glm-5"), attempt(1, "glm-5")]);
    assert_eq!(rows[1].unaudited_reason, Some(R::UnknownBillingGroup));
    assert_eq!(rows[1].planned_attempt_usd, None);
    assert_eq!(rows[1].cumulative_incremental_usd, None);
    let env = env_with(|e| e.billing_group = None);
    assert_eq!(
        reason_of(env, vec![attempt(0, "glm-5")]),
        Some(R::UnknownBillingGroup)
    );
}

#[test]
fn model_not_in_pricing() {
    assert_eq!(
        reason_of(envelope(), vec![attempt(0, "gpt-9")]),
        Some(R::ModelNotInPricing)
    );
    let nameless = with(attempt(0, "glm-5"), |a| a.request_model = None);
    assert_eq!(
        reason_of(envelope(), vec![nameless]),
        Some(R::ModelNotInPricing)
    );
}

#[test]
fn output_cap_missing() {
    let a = with(attempt(0, "glm-5"), |a| a.output_cap = Count::Missing);
    assert_eq!(reason_of(envelope(), vec![a]), Some(R::OutputCapMissing));
}

#[test]
fn input_tokens_missing() {
    let a = with(attempt(0, "glm-5"), |a| a.input_tokens = Count::Missing);
    assert_eq!(reason_of(envelope(), vec![a]), Some(R::InputTokensMissing));
}

#[test]
fn absent_cached_tokens_count_as_zero() {
    let a = with(attempt(1, "deepseek-v4-flash"), |a| {
        a.cached_input_tokens = Count::Missing
    });
    let rows = eval(vec![attempt(0, "glm-5"), a]);
    // 10000 * 0.319 + 800 * 0.957 = 3955.6 per million
    assert_eq!(rows[1].planned_attempt_usd, Some(d("0.0039556")));
    assert!(rows[1].audited);
}

#[test]
fn invalid_usage_for_negative_absurd_or_inconsistent_counts() {
    for broken in [
        with(attempt(0, "glm-5"), |a| a.input_tokens = Count::Value(-1)),
        with(attempt(0, "glm-5"), |a| a.output_tokens = Count::Value(-5)),
        with(attempt(0, "glm-5"), |a| {
            a.cached_input_tokens = Count::Value(10_001)
        }),
        with(attempt(0, "glm-5"), |a| {
            a.input_tokens = Count::Value(crate::contract::MAX_TOKEN_COUNT + 1)
        }),
        with(attempt(0, "glm-5"), |a| a.output_cap = Count::OutOfRange),
    ] {
        let rows = eval(vec![broken]);
        assert_eq!(rows[0].unaudited_reason, Some(R::InvalidUsage));
        assert_eq!(rows[0].planned_attempt_usd, None);
    }
}

#[test]
fn first_attempt_missing() {
    let rows = eval(vec![attempt(1, "glm-5")]);
    assert_eq!(rows[0].unaudited_reason, Some(R::FirstAttemptMissing));
    assert_eq!(rows[0].decision, Decision::Unaudited);
    assert_eq!(rows[0].spend_class, SpendClass::Unknown);
    assert_eq!(rows[0].original_model, None);
    // Its own cost is still known.
    assert_eq!(rows[0].cumulative_incremental_usd, Some(d("0.00766626")));
}

#[test]
fn earlier_attempt_missing() {
    let rows = eval(vec![attempt(0, "glm-5"), attempt(2, "glm-5")]);
    assert_eq!(rows[1].unaudited_reason, Some(R::EarlierAttemptMissing));
    assert_eq!(rows[1].cumulative_incremental_usd, None);
    assert_eq!(rows[1].remaining_envelope_usd, None);
}

#[test]
fn earlier_attempt_unpriced() {
    let unpriced = with(attempt(1, "glm-5"), |a| a.output_cap = Count::Missing);
    let rows = eval(vec![attempt(0, "glm-5"), unpriced, attempt(2, "glm-5")]);
    assert_eq!(rows[1].unaudited_reason, Some(R::OutputCapMissing));
    assert_eq!(rows[2].unaudited_reason, Some(R::EarlierAttemptUnpriced));
    assert_eq!(rows[2].cumulative_incremental_usd, None);
    assert_eq!(rows[2].planned_attempt_usd, Some(d("0.00766626")));
}

#[test]
fn envelope_conflict_takes_figures_from_the_logical_span() {
    let retry = with(attempt(1, "glm-5"), |a| {
        a.envelope = EnvelopeFields {
            present: true,
            max_incremental_usd: Some(d("0.5")),
            ..Default::default()
        }
        .into();
    });
    let rows = eval(vec![attempt(0, "glm-5"), retry]);
    assert!(rows
        .iter()
        .all(|r| r.unaudited_reason == Some(R::EnvelopeConflict)));
    assert_eq!(rows[1].max_incremental_usd, Some(d("0.015")));
    assert_eq!(rows[1].decision, Decision::Unaudited);
}

#[test]
fn equal_values_written_differently_do_not_conflict() {
    let retry = with(attempt(1, "glm-5"), |a| {
        a.envelope = EnvelopeFields {
            present: true,
            max_incremental_usd: Some(d("0.0150")),
            ..Default::default()
        }
        .into();
    });
    assert!(eval(vec![attempt(0, "glm-5"), retry])[1].audited);
}

#[test]
fn decision_precedence_follows_the_spec_order() {
    // Every violation at once: replay_unsafe wins, then over_attempts, then routing_drift.
    let env = env_with(|e| {
        e.max_attempts_after_first = Some(0);
        e.max_incremental_usd = Some(d("0.001"));
    });
    let first = with(attempt(0, "glm-5"), |a| {
        a.output_reached_client = Some(true)
    });
    let rows = eval_with(env.clone(), vec![first, attempt(1, "kimi-k2.6")]);
    assert_eq!(
        rows[1].violations,
        vec![
            Violation::ReplayUnsafe,
            Violation::OverAttempts,
            Violation::RoutingDrift,
            Violation::OverEnvelope
        ]
    );
    assert_eq!(rows[1].decision, Decision::ReplayUnsafe);

    let rows = eval_with(
        env.clone(),
        vec![attempt(0, "glm-5"), attempt(1, "kimi-k2.6")],
    );
    assert_eq!(rows[1].decision, Decision::OverAttempts);

    let env = env_with(|e| e.max_incremental_usd = Some(d("0.001")));
    let rows = eval_with(
        env.clone(),
        vec![attempt(0, "glm-5"), attempt(1, "kimi-k2.6")],
    );
    assert_eq!(rows[1].decision, Decision::RoutingDrift);

    // Unaudited beats over_envelope, which is only judged when audited.
    let unaudited = with(attempt(1, "glm-5"), |a| a.output_cap = Count::Missing);
    let rows = eval_with(env.clone(), vec![attempt(0, "glm-5"), unaudited]);
    assert_eq!(rows[1].decision, Decision::Unaudited);
    assert_eq!(rows[1].violations, vec![]);

    let rows = eval_with(env, vec![attempt(0, "glm-5"), attempt(1, "glm-5")]);
    assert_eq!(rows[1].decision, Decision::OverEnvelope);
}

#[test]
fn missing_indices_are_assigned_by_start_time() {
    let late = with(attempt(0, "deepseek-v4-flash"), |a| {
        a.attempt_index = None;
        a.start_time_unix_nano = T0 + 10 * SECOND;
    });
    let early = with(attempt(5, "glm-5"), |a| a.start_time_unix_nano = T0);
    let rows = eval(vec![late, early]);
    assert_eq!(rows[0].attempt_index, 0);
    assert_eq!(rows[0].retry_model.as_deref(), Some("glm-5"));
    assert_eq!(rows[1].attempt_index, 1);
    assert_eq!(rows[1].spend_class, SpendClass::Fallback);
}

#[test]
fn order_of_attempts_in_the_request_does_not_matter() {
    let attempts = vec![
        attempt(0, "glm-5"),
        attempt(1, "deepseek-v4-flash"),
        attempt(2, "glm-5"),
    ];
    let mut reversed = attempts.clone();
    reversed.reverse();
    assert_eq!(eval(attempts), eval(reversed));
}

#[test]
fn decision_reason_of_within_envelope_names_the_figures() {
    let rows = eval(vec![attempt(0, "glm-5"), attempt(1, "glm-5")]);
    assert_eq!(
        rows[1].decision_reason,
        "retry 1 of glm-5 brings incremental spend to 0.00766626 USD, within the 0.015 envelope (0.00733374 USD left)"
    );
}

#[test]
fn late_retry_is_judged_with_the_attempts_already_written() {
    let mut late = request_with(envelope(), vec![attempt(2, "glm-5")]);
    late.evaluated = vec![attempt(0, "glm-5"), attempt(1, "glm-5")];
    let rows = evaluate(&late, &book(), &RulesConfig::default());
    assert_eq!(rows.len(), 1, "only the late attempt gets a row");
    assert_eq!(rows[0].attempt_index, 2);
    assert_eq!(rows[0].cumulative_incremental_usd, Some(d("0.01533252")));
    assert_eq!(rows[0].decision, Decision::OverEnvelope);
}

#[test]
fn envelope_conflict_takes_each_figure_from_the_logical_span_else_the_lowest_index() {
    let partial = EnvelopeFields {
        present: true,
        billing_group: Some("default".into()),
        ..Default::default()
    };
    let full = |a: SpanFacts| with(a, |a| a.envelope = envelope().into());
    let rows = eval_with(
        partial,
        vec![full(attempt(0, "glm-5")), full(attempt(1, "glm-5"))],
    );
    assert_eq!(rows[1].unaudited_reason, Some(R::EnvelopeConflict));
    assert_eq!(rows[1].billing_group.as_deref(), Some("default"));
    assert_eq!(rows[1].max_incremental_usd, Some(d("0.015")));
    assert_eq!(rows[1].planned_attempt_usd, Some(d("0.02299878")));
}

#[test]
fn family_lists_in_another_order_do_not_conflict() {
    let retry = with(attempt(1, "glm-5"), |a| {
        a.envelope = EnvelopeFields {
            present: true,
            allowed_fallback_families: Some(vec!["deepseek".into(), "glm".into(), "qwen".into()]),
            ..Default::default()
        }
        .into();
    });
    assert!(eval(vec![attempt(0, "glm-5"), retry])[1].audited);
}

#[test]
fn parent_grouped_attempts_take_the_request_id_of_their_logical_span() {
    let mut request = request_with(envelope(), vec![attempt(0, "glm-5")]);
    request.key = GroupKey::Parent {
        trace_id: [7; 16],
        parent_span_id: Some([99; 8]),
    };
    request.attempts[0].request_id = None;
    if let Some(l) = request.logical.as_mut() {
        l.request_id = Some("req-from-logical".into());
    }
    let rows = evaluate(&request, &book(), &RulesConfig::default());
    assert_eq!(&*rows[0].request_id, "req-from-logical");
}

#[test]
fn a_request_of_a_hundred_thousand_attempts_is_evaluated_in_linear_time() {
    const ATTEMPTS: i32 = 100_000;
    let numbered = |i: i32| {
        with(attempt(0, "glm-5"), |a| {
            a.attempt_index = Some(i);
            a.span_id = (u64::from(i.unsigned_abs()) + 1).to_be_bytes();
        })
    };
    let mut request = request_with(envelope(), (ATTEMPTS / 2..ATTEMPTS).map(numbered).collect());
    request.evaluated = (0..ATTEMPTS / 2).map(numbered).collect();
    // A scan per attempt made this take minutes; linear, it takes about a second in debug.
    let rows = evaluate(&request, &book(), &RulesConfig::default());
    assert_eq!(rows.len(), (ATTEMPTS / 2) as usize);
    assert_eq!(rows[0].attempt_index, ATTEMPTS / 2);
    assert_eq!(rows[0].decision, Decision::OverAttempts);
}

/// The shipped snapshot under another version, with `glm-5` priced at `input` per million.
fn book_pricing_glm_input_at(input: &str) -> (PricingBook, EnvelopeFields) {
    let text = SNAPSHOT.replace(VERSION, "dear").replace(
        r#""input": "0.775", "output": "2.480""#,
        &format!(r#""input": "{input}", "output": "0""#),
    );
    let mut book = book();
    book.insert(Snapshot::from_bytes("dear.json".as_ref(), text.as_bytes()).unwrap())
        .unwrap();
    (book, env_with(|e| e.pricing_version = Some("dear".into())))
}

#[test]
fn usage_too_large_to_price_exactly_is_invalid_usage() {
    let (book, env) = book_pricing_glm_input_at("79228162514264337593543950335");
    let request = request_with(env, vec![attempt(0, "glm-5"), attempt(1, "glm-5")]);
    let rows = evaluate(&request, &book, &RulesConfig::default());
    for row in &rows {
        assert_eq!(row.unaudited_reason, Some(R::InvalidUsage));
        assert_eq!(row.planned_attempt_usd, None);
    }
    assert_eq!(rows[1].decision, Decision::Unaudited);
}

#[test]
fn a_cumulative_too_large_to_hold_exactly_leaves_the_retries_unaudited() {
    // Each retry plans 5e15 * 1000.0000000001 / 1e6 = 5000000000000.5 USD: a decimal holds
    // one exactly at 16 places, but not the sum of two.
    let (book, env) = book_pricing_glm_input_at("1000.0000000001");
    let huge = |index| {
        with(attempt(index, "glm-5"), |a| {
            a.input_tokens = Count::Value(5_000_000_000_000_000);
            a.cached_input_tokens = Count::Value(0);
            a.output_cap = Count::Value(0);
        })
    };
    let request = request_with(env, vec![huge(0), huge(1), huge(2), huge(3)]);
    let rows = evaluate(&request, &book, &RulesConfig::default());
    assert_eq!(rows[1].planned_attempt_usd, Some(d("5000000000000.5")));
    assert!(rows[1].audited);
    assert_eq!(rows[1].decision, Decision::OverEnvelope);
    assert_eq!(rows[2].planned_attempt_usd, Some(d("5000000000000.5")));
    assert_eq!(rows[2].cumulative_incremental_usd, None);
    assert_eq!(rows[2].unaudited_reason, Some(R::InvalidUsage));
    assert_eq!(rows[2].decision, Decision::Unaudited);
    assert_eq!(rows[3].cumulative_incremental_usd, None);
    assert_eq!(rows[3].unaudited_reason, Some(R::EarlierAttemptUnpriced));
}

/// The shipped snapshot checked on another date, with `glm-5`'s output priced at `output`.
fn snapshot_checked(checked_at: &str, output: &str) -> Snapshot {
    let text = SNAPSHOT
        .replace("2026-08-22", checked_at)
        .replace(r#""output": "2.480""#, &format!(r#""output": "{output}""#));
    Snapshot::from_bytes(format!("{checked_at}.json").as_ref(), text.as_bytes()).unwrap()
}

fn date(text: &str) -> Option<NaiveDate> {
    NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()
}

#[test]
fn pricing_metadata_mismatch_prices_by_the_dated_snapshot_else_the_newest_of_the_version() {
    // Three snapshots of one version: 08-22 (shipped), 08-10 (output 0) and 08-24 (output 1).
    let mut book = book();
    book.insert(snapshot_checked("2026-08-10", "0")).unwrap();
    book.insert(snapshot_checked("2026-08-24", "1")).unwrap();
    let digest_of = |checked_at: &str| {
        book.get_dated(VERSION, date(checked_at).unwrap())
            .unwrap()
            .digest
            .clone()
    };
    // (envelope date, envelope source, reason, planned retry USD, digest of)
    let cases = [
        ("2026-08-22", SOURCE, None, "0.00766626", "2026-08-22"),
        ("2026-08-10", SOURCE, None, "0.00568226", "2026-08-10"),
        (
            "2026-08-23",
            SOURCE,
            Some(R::PricingMetadataMismatch),
            "0.00648226",
            "2026-08-24",
        ),
        (
            "2026-08-10",
            "https://example.com/prices",
            Some(R::PricingMetadataMismatch),
            "0.00568226",
            "2026-08-10",
        ),
    ];
    for (checked_at, source, reason, planned, digest) in cases {
        let env = env_with(|e| {
            e.pricing_checked_at = date(checked_at);
            e.pricing_source = Some(source.into());
        });
        let request = request_with(env, vec![attempt(0, "glm-5"), attempt(1, "glm-5")]);
        let rows = evaluate(&request, &book, &RulesConfig::default());
        let case = format!("{checked_at} {source}");
        assert_eq!(rows[1].unaudited_reason, reason, "{case}");
        assert_eq!(rows[1].planned_attempt_usd, Some(d(planned)), "{case}");
        assert_eq!(rows[1].pricing_digest, Some(digest_of(digest)), "{case}");
        // The row records the envelope's metadata as written, not the snapshot's.
        assert_eq!(rows[1].pricing_checked_at, date(checked_at), "{case}");
        assert_eq!(rows[1].pricing_source.as_deref(), Some(source), "{case}");
    }
}

#[test]
fn a_snapshot_only_of_other_versions_is_unknown_pricing_version_not_a_mismatch() {
    let env = env_with(|e| e.pricing_version = Some("a42d372c".into()));
    let rows = eval_with(env, vec![attempt(0, "glm-5"), attempt(1, "glm-5")]);
    assert_eq!(rows[1].unaudited_reason, Some(R::UnknownPricingVersion));
    assert_eq!(rows[1].pricing_digest, None);
}

#[test]
fn audit_reasons_come_in_spec_order() {
    // Each case breaks two things; the reason named is the earlier of the two in SPEC §4.
    let no_cap = |a: SpanFacts| with(a, |a| a.output_cap = Count::Missing);
    let no_input = |a: SpanFacts| with(a, |a| a.input_tokens = Count::Missing);
    let stale = |a: SpanFacts| with(a, |a| a.start_time_unix_nano = T0 + 40 * DAY);
    let cases: Vec<(&str, EnvelopeFields, SpanFacts, R)> = vec![
        (
            "incomplete before version missing",
            env_with(|e| {
                e.max_incremental_usd = None;
                e.pricing_version = None;
            }),
            attempt(1, "glm-5"),
            R::EnvelopeIncomplete,
        ),
        (
            "version missing before source missing",
            env_with(|e| {
                e.pricing_version = None;
                e.pricing_source = None;
            }),
            attempt(1, "glm-5"),
            R::PricingVersionMissing,
        ),
        (
            "source missing before checked_at missing",
            env_with(|e| {
                e.pricing_source = None;
                e.pricing_checked_at = None;
            }),
            attempt(1, "glm-5"),
            R::PricingSourceMissing,
        ),
        (
            "checked_at missing before unknown version",
            env_with(|e| {
                e.pricing_checked_at = None;
                e.pricing_version = Some("nope".into());
            }),
            attempt(1, "glm-5"),
            R::PricingCheckedAtMissing,
        ),
        (
            "unknown version before unknown billing group",
            env_with(|e| {
                e.pricing_version = Some("nope".into());
                e.billing_group = Some("platinum".into());
            }),
            attempt(1, "glm-5"),
            R::UnknownPricingVersion,
        ),
        (
            "mismatch before stale",
            env_with(|e| e.pricing_source = Some("elsewhere".into())),
            stale(attempt(1, "glm-5")),
            R::PricingMetadataMismatch,
        ),
        (
            "stale before unknown billing group",
            env_with(|e| e.billing_group = Some("platinum".into())),
            stale(attempt(1, "glm-5")),
            R::PricingStale,
        ),
        (
            "unknown billing group before model not in pricing",
            env_with(|e| e.billing_group = None),
            attempt(1, "gpt-9"),
            R::UnknownBillingGroup,
        ),
        (
            "model not in pricing before output cap missing",
            envelope(),
            no_cap(attempt(1, "gpt-9")),
            R::ModelNotInPricing,
        ),
        (
            "output cap missing before input tokens missing",
            envelope(),
            no_input(no_cap(attempt(1, "glm-5"))),
            R::OutputCapMissing,
        ),
        (
            "input tokens missing before invalid usage",
            envelope(),
            with(no_input(attempt(1, "glm-5")), |a| {
                a.output_tokens = Count::Value(-1)
            }),
            R::InputTokensMissing,
        ),
        (
            "invalid usage before first attempt missing",
            envelope(),
            with(attempt(1, "glm-5"), |a| a.output_tokens = Count::Value(-1)),
            R::InvalidUsage,
        ),
    ];
    for (case, env, retry, reason) in cases {
        // Only the retry is sent where the case is about first_attempt_missing's place.
        let attempts = if reason == R::InvalidUsage {
            vec![retry]
        } else {
            vec![attempt(0, "glm-5"), retry]
        };
        assert_eq!(reason_of(env, attempts), Some(reason), "{case}");
    }
}

#[test]
fn model_family_comes_from_the_attribute_else_the_pinned_snapshot_else_the_newest_listing() {
    // A newer snapshot of another version renames glm-5's family and lists a model of its own.
    let newer = SNAPSHOT
        .replace(VERSION, "zz-newer")
        .replace("2026-08-22", "2026-09-30")
        .replace(r#""family": "glm""#, r#""family": "zhipu""#)
        .replace(
            r#""glm-5": {"#,
            r#""minimax-m2": {"family": "minimax", "input": "1", "output": "1"}, "glm-5": {"#,
        );
    let mut book = book();
    book.insert(Snapshot::from_bytes("newer.json".as_ref(), newer.as_bytes()).unwrap())
        .unwrap();
    let unknown_version = env_with(|e| e.pricing_version = Some("nope".into()));
    let attribute = |family: &str| {
        let family = family.to_owned();
        move |a: &mut SpanFacts| a.model_family = Some(family.into())
    };
    /// (case, envelope, model, attribute, family)
    type Case<'a> = (
        &'a str,
        EnvelopeFields,
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
    );
    let cases: Vec<Case<'_>> = vec![
        (
            "attribute wins",
            envelope(),
            "glm-5",
            Some("custom"),
            Some("custom"),
        ),
        ("pinned snapshot", envelope(), "glm-5", None, Some("glm")),
        (
            "pinned lacks the model",
            envelope(),
            "minimax-m2",
            None,
            Some("minimax"),
        ),
        (
            "unknown version",
            unknown_version,
            "glm-5",
            None,
            Some("zhipu"),
        ),
        (
            "no envelope",
            EnvelopeFields::default(),
            "glm-5",
            None,
            Some("zhipu"),
        ),
        ("listed nowhere", envelope(), "gpt-9", None, None),
    ];
    for (case, env, model, family_attribute, expected) in cases {
        let mut retry = attempt(1, model);
        if let Some(family) = family_attribute {
            attribute(family)(&mut retry);
        }
        let request = request_with(env, vec![attempt(0, "glm-5"), retry]);
        let rows = evaluate(&request, &book, &RulesConfig::default());
        assert_eq!(rows[1].retry_family.as_deref(), expected, "{case}");
    }
}

#[test]
fn family_change_with_unknown_pricing_version_is_still_routing_drift() {
    let env = env_with(|e| e.pricing_version = Some("nope".into()));
    let rows = eval_with(
        env,
        vec![attempt(0, "qwen3.5-122b-a10b"), attempt(1, "kimi-k2.6")],
    );
    assert_eq!(rows[1].original_family.as_deref(), Some("qwen"));
    assert_eq!(rows[1].retry_family.as_deref(), Some("kimi"));
    assert_eq!(rows[1].violations, vec![Violation::RoutingDrift]);
    assert_eq!(rows[1].decision, Decision::RoutingDrift);
    assert_eq!(rows[1].spend_class, SpendClass::Drift);
    assert_eq!(rows[1].unaudited_reason, Some(R::UnknownPricingVersion));
    assert_eq!(rows[1].planned_attempt_usd, None);
}

#[test]
fn attempt_source_is_the_requests() {
    for source in AttemptSource::ALL {
        let mut request = request_with(envelope(), vec![attempt(0, "glm-5")]);
        request.attempt_source = *source;
        let rows = evaluate(&request, &book(), &RulesConfig::default());
        assert_eq!(rows[0].attempt_source, *source);
    }
}

#[test]
fn envelope_source_is_span_with_an_envelope_and_null_without() {
    let cases = [
        (envelope(), Some("span")),
        (EnvelopeFields::default(), None),
        (
            EnvelopeFields {
                task_type: Some("support_summary".into()),
                ..Default::default()
            },
            None,
        ),
        (env_with(|e| e.max_incremental_usd = None), Some("span")),
    ];
    for (env, expected) in cases {
        let rows = eval_with(env.clone(), vec![attempt(0, "glm-5")]);
        assert_eq!(rows[0].envelope_source.as_deref(), expected, "{env:?}");
    }
}

fn policies(text: &str) -> PolicySet {
    PolicySet::parse([(std::path::PathBuf::from("p.toml"), text.to_owned())]).unwrap()
}

/// The seed's envelope as a policy for service `checkout`, with room for two retries.
const CHECKOUT_POLICY: &str = r#"
[[policy]]
name = "checkout-summaries"
match.service = "check*"
match.model = "glm-*"
[policy.envelope]
pricing_version = "a42d372ccf0b5dd13ecf71203521f9d2"
pricing_checked_at = "2026-08-22"
pricing_source = "https://aiwave.live/api/pricing"
billing_group = "vip"
max_incremental_usd = "0.015"
max_attempts_after_first = 2
task_type = "from_policy"
"#;

fn eval_policies(
    policy_text: &str,
    env: EnvelopeFields,
    attempts: Vec<SpanFacts>,
) -> Vec<AttemptRow> {
    evaluate_with(
        &request_with(env, attempts),
        &book(),
        &policies(policy_text),
        &RulesConfig::default(),
    )
}

#[test]
fn a_request_without_an_envelope_takes_the_first_matching_policy() {
    let rows = eval_policies(
        CHECKOUT_POLICY,
        EnvelopeFields::default(),
        vec![attempt(0, "glm-5"), attempt(1, "glm-5")],
    );
    let retry = &rows[1];
    assert_eq!(
        retry.envelope_source.as_deref(),
        Some("policy:checkout-summaries")
    );
    assert!(retry.audited, "{:?}", retry.unaudited_reason);
    assert_eq!(retry.decision, Decision::WithinEnvelope);
    assert_eq!(retry.cumulative_incremental_usd, Some(d("0.00766626")));
    assert_eq!(retry.max_incremental_usd, Some(d("0.015")));
    assert_eq!(retry.billing_group.as_deref(), Some("vip"));
    assert_eq!(retry.task_type.as_deref(), Some("from_policy"));
    assert_eq!(retry.pricing_digest.as_deref().map(str::len), Some(64));
    assert_eq!(rows[0].envelope_source, retry.envelope_source);
}

#[test]
fn a_request_with_an_envelope_of_its_own_never_takes_a_policy() {
    let env = env_with(|e| e.max_incremental_usd = None);
    let rows = eval_policies(CHECKOUT_POLICY, env, vec![attempt(0, "glm-5")]);
    assert_eq!(rows[0].envelope_source.as_deref(), Some("span"));
    assert_eq!(rows[0].unaudited_reason, Some(R::EnvelopeIncomplete));
}

#[test]
fn policy_task_type_only_fills_in_for_spans_that_name_none() {
    let task_only = EnvelopeFields {
        task_type: Some("support_summary".into()),
        ..Default::default()
    };
    let cases = [
        (task_only, Some("support_summary")),
        (EnvelopeFields::default(), Some("from_policy")),
    ];
    for (env, expected) in cases {
        let rows = eval_policies(CHECKOUT_POLICY, env, vec![attempt(0, "glm-5")]);
        // A task type alone is no envelope: the policy still applies.
        assert_eq!(
            rows[0].envelope_source.as_deref(),
            Some("policy:checkout-summaries")
        );
        assert_eq!(rows[0].task_type.as_deref(), expected);
    }
}

#[test]
fn policies_match_on_attempt_zero_service_and_model() {
    // (case, attempts, policy applies)
    let cases = [
        (
            "attempt 0 is glm",
            vec![attempt(0, "glm-5"), attempt(1, "kimi-k2.6")],
            true,
        ),
        (
            "attempt 0 is kimi",
            vec![attempt(0, "kimi-k2.6"), attempt(1, "glm-5")],
            false,
        ),
        (
            "other service",
            vec![with(attempt(0, "glm-5"), |a| {
                a.service_name = "billing".into()
            })],
            false,
        ),
    ];
    for (case, attempts, applies) in cases {
        let rows = eval_policies(CHECKOUT_POLICY, EnvelopeFields::default(), attempts);
        let expected = applies.then_some("policy:checkout-summaries");
        assert_eq!(rows[0].envelope_source.as_deref(), expected, "{case}");
        if !applies {
            assert_eq!(rows[0].unaudited_reason, Some(R::NoEnvelope), "{case}");
        }
    }
}

#[test]
fn policy_attributes_match_any_span_of_the_request() {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    use opentelemetry_proto::tonic::trace::v1::Span;
    let text = r#"
[[policy]]
name = "prod-only"
match.attributes = { "deployment.environment.name" = "prod" }
[policy.envelope]
max_incremental_usd = "1"
"#;
    let set = policies(text);
    let read = |value: &str| {
        let otlp = Span {
            attributes: vec![crate::contract::kv(
                "deployment.environment.name",
                Value::StringValue(value.into()),
            )],
            ..Default::default()
        };
        SpanFacts::from_span_with(&otlp, &"checkout".into(), &[], set.attribute_keys()).captured
    };
    for (env_name, on_logical, applies) in [
        ("prod", false, true),
        ("prod", true, true),
        ("staging", false, false),
    ] {
        let mut request = request_with(
            EnvelopeFields::default(),
            vec![attempt(0, "glm-5"), attempt(1, "glm-5")],
        );
        match (on_logical, request.logical.as_mut()) {
            (true, Some(logical)) => logical.captured = read(env_name),
            _ => request.attempts[1].captured = read(env_name),
        }
        let rows = evaluate_with(&request, &book(), &set, &RulesConfig::default());
        let expected = applies.then_some("policy:prod-only");
        assert_eq!(
            rows[0].envelope_source.as_deref(),
            expected,
            "{env_name} on logical: {on_logical}"
        );
    }
}

const LATEST_POLICY: &str = r#"
[[policy]]
name = "newest"
[policy.envelope]
pricing_version = "latest"
billing_group = "vip"
max_incremental_usd = "0.015"
max_attempts_after_first = 2
"#;

#[test]
fn latest_pins_the_newest_snapshot_checked_on_or_before_attempt_zero() {
    // Snapshots: the shipped one of 2026-08-22, one of 08-24 (output 1) and one of 08-30.
    let mut book = book();
    book.insert(snapshot_checked("2026-08-24", "1")).unwrap();
    book.insert(snapshot_checked("2026-08-30", "0")).unwrap();
    let set = policies(LATEST_POLICY);
    let starting = |day: u64| {
        // T0 is 2026-08-25; attempt 0 starts `day` days later, its retry a second after.
        vec![
            with(attempt(0, "glm-5"), |a| {
                a.start_time_unix_nano = T0 + day * DAY
            }),
            with(attempt(1, "glm-5"), |a| {
                a.start_time_unix_nano = T0 + day * DAY + SECOND
            }),
        ]
    };
    // (attempt 0's day after T0, resolved date, planned retry USD)
    let cases = [
        (0, "2026-08-24", "0.00648226"),
        (4, "2026-08-24", "0.00648226"),
        (5, "2026-08-30", "0.00568226"),
    ];
    for (day, resolved, planned) in cases {
        let request = request_with(EnvelopeFields::default(), starting(day));
        let rows = evaluate_with(&request, &book, &set, &RulesConfig::default());
        let retry = &rows[1];
        let snapshot = book.get_dated(VERSION, date(resolved).unwrap()).unwrap();
        assert_eq!(retry.pricing_version.as_deref(), Some(VERSION), "{day}");
        assert_eq!(retry.pricing_checked_at, date(resolved), "{day}");
        assert_eq!(retry.pricing_source.as_deref(), Some(SOURCE), "{day}");
        assert_eq!(
            retry.pricing_digest.as_ref(),
            Some(&snapshot.digest),
            "{day}"
        );
        assert_eq!(retry.planned_attempt_usd, Some(d(planned)), "{day}");
        assert!(retry.audited, "{day}: {:?}", retry.unaudited_reason);
        assert_eq!(retry.envelope_source.as_deref(), Some("policy:newest"));
    }
}

#[test]
fn latest_takes_the_greatest_version_among_snapshots_of_one_date() {
    let mut book = book();
    let other = SNAPSHOT
        .replace(VERSION, "b-version")
        .replace(r#""output": "2.480""#, r#""output": "0""#);
    book.insert(Snapshot::from_bytes("b.json".as_ref(), other.as_bytes()).unwrap())
        .unwrap();
    let request = request_with(
        EnvelopeFields::default(),
        vec![attempt(0, "glm-5"), attempt(1, "glm-5")],
    );
    let rows = evaluate_with(
        &request,
        &book,
        &policies(LATEST_POLICY),
        &RulesConfig::default(),
    );
    assert_eq!(rows[1].pricing_version.as_deref(), Some("b-version"));
    assert_eq!(rows[1].planned_attempt_usd, Some(d("0.00568226")));
}

#[test]
fn latest_with_no_snapshot_old_enough_is_unknown_pricing_version() {
    let before_any = |a: SpanFacts| with(a, |a| a.start_time_unix_nano = T0 - 10 * DAY);
    let rows = eval_policies(
        LATEST_POLICY,
        EnvelopeFields::default(),
        vec![
            before_any(attempt(0, "glm-5")),
            before_any(attempt(1, "glm-5")),
        ],
    );
    for row in &rows {
        assert_eq!(row.pricing_version.as_deref(), Some("latest"));
        assert_eq!(row.unaudited_reason, Some(R::UnknownPricingVersion));
        assert_eq!(row.pricing_source, None);
        assert_eq!(row.pricing_checked_at, None);
        assert_eq!(row.pricing_digest, None);
        assert_eq!(row.planned_attempt_usd, None);
        assert_eq!(row.group_ratio, None);
    }
    assert_eq!(rows[1].decision, Decision::Unaudited);
    assert_eq!(rows[1].cumulative_incremental_usd, None);
}

#[test]
fn latest_resolution_still_ages_into_pricing_stale() {
    let late = |a: SpanFacts| with(a, |a| a.start_time_unix_nano = T0 + 40 * DAY);
    let rows = eval_policies(
        LATEST_POLICY,
        EnvelopeFields::default(),
        vec![late(attempt(0, "glm-5")), late(attempt(1, "glm-5"))],
    );
    assert_eq!(rows[1].pricing_checked_at, date("2026-08-22"));
    assert_eq!(rows[1].unaudited_reason, Some(R::PricingStale));
    assert_eq!(rows[1].planned_attempt_usd, Some(d("0.00766626")));
}

#[test]
fn decision_takes_the_first_that_applies_in_spec_order() {
    use Violation as V;
    // (k, violations, audited, decision)
    let cases = [
        (
            0,
            vec![V::ReplayUnsafe, V::RoutingDrift],
            false,
            Decision::FirstAttempt,
        ),
        (
            1,
            vec![V::ReplayUnsafe, V::OverAttempts],
            true,
            Decision::ReplayUnsafe,
        ),
        (
            1,
            vec![V::OverAttempts, V::RoutingDrift],
            false,
            Decision::OverAttempts,
        ),
        (
            1,
            vec![V::RoutingDrift, V::OverEnvelope],
            true,
            Decision::RoutingDrift,
        ),
        (1, vec![V::RoutingDrift], false, Decision::RoutingDrift),
        (2, vec![V::SdkEstimateMismatch], false, Decision::Unaudited),
        (2, vec![V::OverEnvelope], true, Decision::OverEnvelope),
        (
            2,
            vec![V::SdkEstimateMismatch],
            true,
            Decision::WithinEnvelope,
        ),
        (3, vec![], true, Decision::WithinEnvelope),
    ];
    for (k, violations, audited, expected) in cases {
        assert_eq!(
            decision(k, &violations, audited),
            expected,
            "{k} {violations:?} {audited}"
        );
    }
}

#[test]
fn spend_class_is_base_drift_unknown_retry_or_fallback() {
    let drift = [Violation::RoutingDrift];
    /// (k, violations, attempt 0's model (outer None: never arrived), model, class)
    type Case<'a> = (
        i32,
        &'a [Violation],
        Option<Option<&'a str>>,
        Option<&'a str>,
        SpendClass,
    );
    let cases: [Case<'_>; 7] = [
        (0, &drift, Some(Some("a")), Some("b"), SpendClass::Base),
        (1, &drift, Some(Some("a")), Some("a"), SpendClass::Drift),
        (1, &[], None, Some("a"), SpendClass::Unknown),
        (1, &[], Some(Some("a")), Some("a"), SpendClass::Retry),
        (1, &[], Some(Some("a")), Some("b"), SpendClass::Fallback),
        (1, &[], Some(None), None, SpendClass::Retry),
        (
            1,
            &[Violation::OverEnvelope],
            Some(None),
            Some("a"),
            SpendClass::Fallback,
        ),
    ];
    for (k, violations, original, model, expected) in cases {
        assert_eq!(
            spend_class(k, violations, original, model),
            expected,
            "{k} {violations:?} {original:?} {model:?}"
        );
    }
}

#[test]
fn family_drift_needs_two_known_families_that_the_envelope_does_not_allow() {
    let allowing = |allow: Option<bool>, families: Option<&[&str]>| EnvelopeFields {
        allow_family_fallback: allow,
        allowed_fallback_families: families.map(|f| f.iter().map(|s| s.to_string()).collect()),
        ..envelope()
    };
    // (envelope, original family, family, drift)
    let cases = [
        (envelope(), Some("glm"), Some("qwen"), false),
        (envelope(), Some("glm"), Some("kimi"), true),
        (envelope(), Some("glm"), Some("glm"), false),
        (envelope(), None, Some("kimi"), false),
        (envelope(), Some("glm"), None, false),
        (
            allowing(None, Some(&["kimi"])),
            Some("glm"),
            Some("kimi"),
            true,
        ),
        (
            allowing(Some(false), Some(&["kimi"])),
            Some("glm"),
            Some("kimi"),
            true,
        ),
        (allowing(Some(true), None), Some("glm"), Some("kimi"), true),
        (
            allowing(Some(true), Some(&["kimi"])),
            Some("glm"),
            Some("kimi"),
            false,
        ),
    ];
    for (env, original, family, expected) in cases {
        assert_eq!(
            family_drift(&env, original, family),
            expected,
            "{original:?} → {family:?} allow {:?} {:?}",
            env.allow_family_fallback,
            env.allowed_fallback_families
        );
    }
}

#[test]
fn served_model_drift_is_literal_and_allows_dated_variants() {
    // (requested, served, drift)
    let cases = [
        (Some("gpt-4o"), Some("gpt-4o"), false),
        (Some("gpt-4o"), Some("gpt-4o-2024-08-06"), false),
        (Some("gpt-4o"), Some("gpt-4o-mini"), false),
        (Some("gpt-4o"), Some("openai/gpt-4o"), true),
        (Some("gpt-4o"), Some("GPT-4o"), true),
        (Some("gpt-4o"), Some("gpt-4o2"), true),
        (Some("gpt-4o"), None, false),
        (None, Some("gpt-4o"), false),
    ];
    for (requested, served, expected) in cases {
        let span = with(attempt(0, "x"), |a| {
            a.request_model = requested.map(Into::into);
            a.response_model = served.map(Into::into);
        });
        assert_eq!(
            served_model_drift(&span),
            expected,
            "{requested:?} served as {served:?}"
        );
    }
}

#[test]
fn violations_are_listed_in_spec_order_and_only_served_drift_without_an_envelope() {
    use Violation as V;
    let base = ViolationInput {
        envelope: &EnvelopeFields::default(),
        k: 1,
        earlier_output_reached_client: false,
        original_family: Some("glm"),
        family: Some("glm"),
        served_drift: false,
        audited: true,
        cumulative: Some(d("0.01")),
        estimated: Some(d("0.01")),
        sdk_estimated: None,
    };
    let env = env_with(|e| {
        e.max_attempts_after_first = Some(1);
        e.max_incremental_usd = Some(d("0.015"));
    });
    let no_env = EnvelopeFields::default();
    let everything = ViolationInput {
        envelope: &env,
        k: 2,
        earlier_output_reached_client: true,
        family: Some("kimi"),
        cumulative: Some(d("0.02")),
        sdk_estimated: Some(d("0.5")),
        ..base
    };
    // (case, input, violations)
    let cases = [
        (
            "nothing",
            ViolationInput {
                envelope: &env,
                ..base
            },
            vec![],
        ),
        (
            "every one, in order",
            everything,
            vec![
                V::ReplayUnsafe,
                V::OverAttempts,
                V::RoutingDrift,
                V::OverEnvelope,
                V::SdkEstimateMismatch,
            ],
        ),
        (
            "no envelope: only served drift",
            ViolationInput {
                envelope: &no_env,
                served_drift: true,
                ..everything
            },
            vec![V::RoutingDrift],
        ),
        (
            "no envelope, no served drift",
            ViolationInput {
                envelope: &no_env,
                ..everything
            },
            vec![],
        ),
        (
            "replay safe",
            ViolationInput {
                envelope: &env_with(|e| e.replay_safe = Some(true)),
                earlier_output_reached_client: true,
                ..base
            },
            vec![],
        ),
        (
            "over the budget but unaudited",
            ViolationInput {
                envelope: &env,
                audited: false,
                cumulative: Some(d("0.02")),
                ..base
            },
            vec![],
        ),
        (
            "at the budget",
            ViolationInput {
                envelope: &env,
                cumulative: Some(d("0.015")),
                ..base
            },
            vec![],
        ),
        (
            "sdk estimate within a micro-dollar",
            ViolationInput {
                envelope: &env,
                sdk_estimated: Some(d("0.010001")),
                ..base
            },
            vec![],
        ),
        (
            "sdk estimate on the first attempt",
            ViolationInput {
                envelope: &env,
                k: 0,
                sdk_estimated: Some(d("0.5")),
                ..base
            },
            vec![],
        ),
    ];
    for (case, input, expected) in cases {
        assert_eq!(violations(&input), expected, "{case}");
    }
}

#[test]
fn first_missing_retry_is_the_smallest_absent_index_from_one() {
    let cases: &[(&[i32], i32)] = &[
        (&[], 1),
        (&[0], 1),
        (&[0, 1, 2], 3),
        (&[0, 2, 3], 1),
        (&[3, 1, 0, 1], 2),
        (&[-1, 1], 2),
        (&[i32::MAX - 1, i32::MAX], 1),
    ];
    for (indices, expected) in cases {
        assert_eq!(
            super::first_missing_retry(indices.iter().copied()),
            *expected,
            "{indices:?}"
        );
    }
}

/// A snapshot with the optional fields of SPEC §3: a cache-write price, an output limit and a
/// long-context tier above 200k input tokens that omits the cached price.
const TIERED: &str = r#"{
  "pricing_source": "test://tiered",
  "pricing_checked_at": "2026-08-22",
  "pricing_version": "tiered-v1",
  "currency": "USD",
  "unit": "per_million_tokens",
  "group_ratio": {"default": "1", "vip": "0.5"},
  "models": {
    "long": {"family": "x", "input": "1", "output": "2", "cached_input": "0.1",
             "cache_write": "1.25", "max_output_tokens": 4000,
             "tiers": [{"above_input_tokens": 200000, "input": "2", "output": "4"}]},
    "plain": {"family": "x", "input": "1", "output": "2"}
  }
}"#;

fn tiered_book() -> PricingBook {
    let mut book = book();
    book.insert(Snapshot::from_bytes("tiered.json".as_ref(), TIERED.as_bytes()).unwrap())
        .unwrap();
    book
}

fn tiered_envelope() -> EnvelopeFields {
    env_with(|e| {
        e.pricing_source = Some("test://tiered".into());
        e.pricing_version = Some("tiered-v1".into());
        e.billing_group = Some("default".into());
        e.max_incremental_usd = Some(d("10"));
        e.allowed_fallback_families = Some(vec!["x".into()]);
    })
}

/// The rows of a first attempt and one retry of `model`, the retry shaped by `retry`.
fn tiered_rows(
    env: EnvelopeFields,
    model: &str,
    retry: impl FnOnce(&mut SpanFacts),
) -> Vec<AttemptRow> {
    let attempts = vec![attempt(0, model), with(attempt(1, model), retry)];
    evaluate(
        &request_with(env, attempts),
        &tiered_book(),
        &RulesConfig::default(),
    )
}

#[test]
fn cache_write_tokens_are_priced_at_the_cache_write_price() {
    let rows = tiered_rows(tiered_envelope(), "long", |a| {
        a.cache_write_input_tokens = Count::Value(2_000);
    });
    let retry = &rows[1];
    // (4,000 uncached × 1 + 4,000 cached × 0.1 + 2,000 cache-write × 1.25 + 800 × 2) / 1e6
    assert_eq!(retry.planned_attempt_usd, Some(d("0.0085")));
    assert_eq!(retry.cache_write_input_tokens, Some(2_000));
    assert_eq!(retry.price_tier_above_input_tokens, None);
    assert!(retry.audited);
}

#[test]
fn without_a_cache_write_price_cache_writes_bill_at_the_input_price() {
    let rows = tiered_rows(tiered_envelope(), "plain", |a| {
        a.cache_write_input_tokens = Count::Value(2_000);
        a.cached_input_tokens = Count::Missing;
    });
    // (8,000 uncached + 2,000 cache-write, both × 1, + 800 × 2) / 1e6
    assert_eq!(rows[1].planned_attempt_usd, Some(d("0.0116")));
}

#[test]
fn a_long_context_attempt_is_priced_at_its_tier_and_names_the_threshold() {
    let rows = tiered_rows(tiered_envelope(), "long", |a| {
        a.input_tokens = Count::Value(300_000);
    });
    let retry = &rows[1];
    // The tier omits the cached price: 4,000 cached stay at the base 0.1.
    // (296,000 × 2 + 4,000 × 0.1 + 800 × 4) / 1e6; actual with 300 out.
    assert_eq!(retry.planned_attempt_usd, Some(d("0.5956")));
    assert_eq!(retry.actual_attempt_usd, Some(d("0.5936")));
    assert_eq!(retry.price_tier_above_input_tokens, Some(200_000));
    assert_eq!(rows[0].price_tier_above_input_tokens, None);
}

#[test]
fn exactly_at_a_tier_threshold_is_not_above_it() {
    let rows = tiered_rows(tiered_envelope(), "long", |a| {
        a.input_tokens = Count::Value(200_000);
    });
    // (196,000 × 1 + 4,000 × 0.1 + 800 × 2) / 1e6
    assert_eq!(rows[1].planned_attempt_usd, Some(d("0.198")));
    assert_eq!(rows[1].price_tier_above_input_tokens, None);
}

#[test]
fn tier_prices_follow_the_group_ratio() {
    let env = env_with(|e| {
        *e = tiered_envelope();
        e.billing_group = Some("vip".into());
    });
    let rows = tiered_rows(env, "long", |a| a.input_tokens = Count::Value(300_000));
    assert_eq!(rows[1].planned_attempt_usd, Some(d("0.2978")));
    assert_eq!(rows[1].group_ratio, Some(d("0.5")));
}

#[test]
fn more_cached_and_cache_write_tokens_than_input_is_invalid_usage() {
    let rows = tiered_rows(tiered_envelope(), "long", |a| {
        a.input_tokens = Count::Value(5_000);
        a.cache_write_input_tokens = Count::Value(1_001);
    });
    assert_eq!(rows[1].unaudited_reason, Some(R::InvalidUsage));
    assert_eq!(rows[1].planned_attempt_usd, None);
}

#[test]
fn an_attempt_without_max_tokens_plans_with_the_envelopes_assumed_cap() {
    let env = env_with(|e| {
        *e = tiered_envelope();
        e.assumed_output_cap = Some(1_000);
    });
    let rows = tiered_rows(env, "long", |a| a.output_cap = Count::Missing);
    assert_eq!(rows[1].output_cap, Some(1_000));
    assert_eq!(rows[1].output_cap_source, Some(OutputCapSource::Envelope));
    assert_eq!(rows[0].output_cap_source, Some(OutputCapSource::Request));
    // (6,000 × 1 + 4,000 × 0.1 + 1,000 × 2) / 1e6
    assert_eq!(rows[1].planned_attempt_usd, Some(d("0.0084")));
    assert!(rows[1].audited);
}

#[test]
fn without_an_assumed_cap_the_snapshots_max_output_tokens_is_the_cap() {
    let rows = tiered_rows(tiered_envelope(), "long", |a| a.output_cap = Count::Missing);
    assert_eq!(rows[1].output_cap, Some(4_000));
    assert_eq!(rows[1].output_cap_source, Some(OutputCapSource::Pricing));
    let rows = tiered_rows(tiered_envelope(), "plain", |a| {
        a.output_cap = Count::Missing
    });
    assert_eq!(rows[1].output_cap, None);
    assert_eq!(rows[1].output_cap_source, None);
    assert_eq!(rows[1].unaudited_reason, Some(R::OutputCapMissing));
}

#[test]
fn a_policys_assumed_cap_applies_and_the_spans_own_comes_first() {
    let policies = PolicySet::parse([(
        std::path::PathBuf::from("p.toml"),
        r#"
[[policy]]
name = "all"
[policy.envelope]
pricing_version = "tiered-v1"
pricing_checked_at = "2026-08-22"
pricing_source = "test://tiered"
billing_group = "default"
max_incremental_usd = "10"
max_attempts_after_first = 2
assumed_output_cap = 1000
"#
        .to_owned(),
    )])
    .unwrap();
    let plain = |cap: Option<i64>| {
        let mut a = with(attempt(1, "long"), |a| a.output_cap = Count::Missing);
        if let Some(cap) = cap {
            a.envelope = Arc::new(EnvelopeFields {
                assumed_output_cap: Some(cap),
                ..Default::default()
            });
        }
        let mut request = request_with(EnvelopeFields::default(), vec![attempt(0, "long"), a]);
        request.logical = None;
        evaluate_with(&request, &tiered_book(), &policies, &RulesConfig::default())
    };
    let rows = plain(None);
    assert_eq!(rows[1].envelope_source.as_deref(), Some("policy:all"));
    assert_eq!(rows[1].output_cap, Some(1_000));
    let rows = plain(Some(2_000));
    assert_eq!(rows[1].envelope_source.as_deref(), Some("policy:all"));
    assert_eq!(
        rows[1].output_cap,
        Some(2_000),
        "the span's own assumed cap first"
    );
}

#[test]
fn usage_source_is_span_for_a_declared_attempt_with_input_and_null_without() {
    let rows = eval(vec![
        attempt(0, "glm-5"),
        with(attempt(1, "glm-5"), |a| a.input_tokens = Count::Missing),
    ]);
    assert_eq!(rows[0].usage_source, Some(UsageSource::Span));
    assert_eq!(rows[1].usage_source, None);
}

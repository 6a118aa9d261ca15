//! One evaluated attempt: the row finance reads (SPEC §5) and the enrichment forwarded spans carry.

use std::sync::Arc;

use chrono::NaiveDate;
use rust_decimal::Decimal;

use crate::contract::{SpanId, Symbol, TraceId};

/// Everything the `attempts` table holds for one attempt span.
///
/// Field names match the Parquet column names one to one; the column names themselves live in
/// the collector's `sinks::parquet::schema`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRow {
    /// Span start, nanoseconds since the Unix epoch (UTC).
    pub event_time: i64,
    /// Span end, nanoseconds since the Unix epoch (UTC).
    pub end_time: i64,
    /// The ids as they are: the Parquet sink writes their hex straight into its column, the
    /// shard finds held spans by them, and a row owns no text for them.
    pub trace_id: TraceId,
    pub span_id: SpanId,
    /// Shared by the rows of a request; the text columns taken from span facts share their
    /// [`Symbol`]s, so a row costs no copy of them.
    pub request_id: Arc<str>,
    pub service_name: Symbol,
    pub task_type: Option<Symbol>,
    pub billing_group: Option<Symbol>,
    pub provider: Option<Symbol>,
    pub attempt_index: i32,
    pub original_model: Option<Symbol>,
    pub retry_model: Option<Symbol>,
    pub response_model: Option<Symbol>,
    pub original_family: Option<Symbol>,
    pub retry_family: Option<Symbol>,
    pub input_tokens: Option<i64>,
    pub cached_input_tokens: Option<i64>,
    pub cache_write_input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub output_cap: Option<i64>,
    pub planned_attempt_usd: Option<Decimal>,
    pub actual_attempt_usd: Option<Decimal>,
    pub estimated_incremental_usd: Option<Decimal>,
    pub cumulative_incremental_usd: Option<Decimal>,
    pub remaining_envelope_usd: Option<Decimal>,
    pub max_incremental_usd: Option<Decimal>,
    pub group_ratio: Option<Decimal>,
    pub sdk_estimated_incremental_usd: Option<Decimal>,
    pub sdk_remaining_envelope_usd: Option<Decimal>,
    pub max_attempts_after_first: Option<i32>,
    pub pricing_version: Option<Symbol>,
    pub pricing_source: Option<Symbol>,
    pub pricing_digest: Option<Symbol>,
    pub pricing_checked_at: Option<NaiveDate>,
    pub spend_class: SpendClass,
    pub decision: Decision,
    pub decision_reason: String,
    pub audited: bool,
    pub unaudited_reason: Option<UnauditedReason>,
    pub error_type: Option<Symbol>,
    pub sdk_decision_reason: Option<String>,
    pub violations: Vec<Violation>,
    pub output_reached_client: Option<bool>,
    /// How the attempt was recognised (SPEC §2).
    pub attempt_source: AttemptSource,
    /// Where `input_tokens` came from (SPEC §2); `None` when there are none.
    pub usage_source: Option<UsageSource>,
    /// Where `output_cap` came from (SPEC §4); `None` when there is none.
    pub output_cap_source: Option<OutputCapSource>,
    /// The threshold of the long-context tier that priced the attempt (SPEC §3); `None` for
    /// base prices.
    pub price_tier_above_input_tokens: Option<i64>,
    /// Where the envelope came from: [`envelope_source::SPAN`], `policy:<name>`
    /// ([`envelope_source::policy`]), or `None` when the request has none.
    pub envelope_source: Option<Symbol>,
}

impl AttemptRow {
    /// An audited first attempt with every nullable column null: tests set what they look at
    /// (`AttemptRow { decision, ..AttemptRow::blank() }`).
    #[doc(hidden)]
    pub fn blank() -> AttemptRow {
        AttemptRow {
            event_time: 0,
            end_time: 0,
            trace_id: [
                0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80,
                0x31, 0x9c,
            ],
            span_id: [0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x00],
            request_id: "req-42".into(),
            service_name: "checkout-assistant".into(),
            task_type: None,
            billing_group: None,
            provider: None,
            attempt_index: 0,
            original_model: None,
            retry_model: None,
            response_model: None,
            original_family: None,
            retry_family: None,
            input_tokens: None,
            cached_input_tokens: None,
            cache_write_input_tokens: None,
            output_tokens: None,
            output_cap: None,
            planned_attempt_usd: None,
            actual_attempt_usd: None,
            estimated_incremental_usd: None,
            cumulative_incremental_usd: None,
            remaining_envelope_usd: None,
            max_incremental_usd: None,
            group_ratio: None,
            sdk_estimated_incremental_usd: None,
            sdk_remaining_envelope_usd: None,
            max_attempts_after_first: None,
            pricing_version: None,
            pricing_source: None,
            pricing_digest: None,
            pricing_checked_at: None,
            spend_class: SpendClass::Base,
            decision: Decision::FirstAttempt,
            decision_reason: String::new(),
            audited: true,
            unaudited_reason: None,
            error_type: None,
            sdk_decision_reason: None,
            violations: Vec::new(),
            output_reached_client: None,
            attempt_source: AttemptSource::Declared,
            usage_source: None,
            output_cap_source: None,
            price_tier_above_input_tokens: None,
            envelope_source: None,
        }
    }
}

/// The values of the `envelope_source` column.
pub mod envelope_source {
    /// The request's own spans carry the envelope.
    pub const SPAN: &str = "span";
    /// The decision service's answer about an envelope sent in its request (SPEC §7); the
    /// row the audit writes for the same spans says [`SPAN`].
    pub const REQUEST: &str = "request";
    /// Prefix of the value naming the policy file entry that gave the envelope.
    pub const POLICY_PREFIX: &str = "policy:";

    /// `policy:<name>`.
    pub fn policy(name: &str) -> String {
        format!("{POLICY_PREFIX}{name}")
    }
}

impl AttemptRow {
    /// UTC date of the span start: the Hive partition the row belongs to.
    pub fn partition_date(&self) -> NaiveDate {
        chrono::DateTime::from_timestamp_nanos(self.event_time).date_naive()
    }
}

macro_rules! wire_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The exact string written to Parquet, metrics and forwarded spans.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

wire_enum! {
    /// One decision per attempt, in precedence order after `FirstAttempt`.
    Decision {
        FirstAttempt => "first_attempt",
        ReplayUnsafe => "replay_unsafe",
        OverAttempts => "over_attempts",
        RoutingDrift => "routing_drift",
        Unaudited => "unaudited",
        OverEnvelope => "over_envelope",
        WithinEnvelope => "within_envelope",
    }
}

wire_enum! {
    /// Violations in the order SPEC §4 lists them (and `violations` is written in).
    Violation {
        ReplayUnsafe => "replay_unsafe",
        OverAttempts => "over_attempts",
        RoutingDrift => "routing_drift",
        OverEnvelope => "over_envelope",
        SdkEstimateMismatch => "sdk_estimate_mismatch",
    }
}

wire_enum! {
    /// How an attempt was recognised as one (SPEC §2): declared by `retry_spend.*` attributes, a
    /// lone GenAI span, an HTTP try under one GenAI span, or a failed sibling call.
    AttemptSource {
        Declared => "declared",
        Single => "single",
        HttpRetry => "http_retry",
        ResendCount => "resend_count",
        SiblingRetry => "sibling_retry",
    }
}

wire_enum! {
    /// Where an attempt's input tokens came from (SPEC §2): its own span, its call's nest, or
    /// another attempt of its request.
    UsageSource {
        Span => "span",
        Call => "call",
        Borrowed => "borrowed",
    }
}

wire_enum! {
    /// Where an attempt's output cap came from (SPEC §4): stated by the request (its span, or
    /// inherited within its nest), assumed by the envelope, or the model's maximum in the
    /// pricing snapshot.
    OutputCapSource {
        Request => "request",
        Envelope => "envelope",
        Pricing => "pricing",
    }
}

wire_enum! {
    /// How finance books an attempt's spend.
    SpendClass {
        Base => "base",
        Retry => "retry",
        Fallback => "fallback",
        Drift => "drift",
        Unknown => "unknown",
    }
}

wire_enum! {
    /// Why an attempt is unaudited; the declaration order is the order SPEC §4 checks them in.
    UnauditedReason {
        NoEnvelope => "no_envelope",
        EnvelopeIncomplete => "envelope_incomplete",
        PricingVersionMissing => "pricing_version_missing",
        PricingSourceMissing => "pricing_source_missing",
        PricingCheckedAtMissing => "pricing_checked_at_missing",
        UnknownPricingVersion => "unknown_pricing_version",
        PricingMetadataMismatch => "pricing_metadata_mismatch",
        PricingStale => "pricing_stale",
        UnknownBillingGroup => "unknown_billing_group",
        ModelNotInPricing => "model_not_in_pricing",
        OutputCapMissing => "output_cap_missing",
        InputTokensMissing => "input_tokens_missing",
        InvalidUsage => "invalid_usage",
        FirstAttemptMissing => "first_attempt_missing",
        EarlierAttemptMissing => "earlier_attempt_missing",
        EarlierAttemptUnpriced => "earlier_attempt_unpriced",
        EnvelopeConflict => "envelope_conflict",
    }
}

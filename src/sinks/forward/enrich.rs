//! The attributes a forwarded attempt span gains (SPEC §6 "Enrichment"): the decision and spend
//! class the rules reached, so tracing backends can filter on them without joining Parquet.

use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, ArrayValue};
use opentelemetry_proto::tonic::trace::v1::Span;
use rust_decimal::Decimal;

use crate::contract::kv;
use crate::record::AttemptRow;

/// Enrichment attribute names, one constant each.
pub mod attr {
    pub const DECISION: &str = "retry_spend.decision";
    pub const AUDITED: &str = "retry_spend.audited";
    pub const ESTIMATED_INCREMENTAL_USD: &str = "retry_spend.estimated_incremental_usd";
    pub const REMAINING_ENVELOPE_USD: &str = "retry_spend.remaining_envelope_usd";
    pub const SPEND_CLASS: &str = "retry_spend.spend_class";
    pub const VIOLATIONS: &str = "retry_spend.violations";

    /// Every name above: the keys [`super::enrich`] owns on a span.
    pub const ALL: [&str; 6] = [
        DECISION,
        AUDITED,
        ESTIMATED_INCREMENTAL_USD,
        REMAINING_ENVELOPE_USD,
        SPEND_CLASS,
        VIOLATIONS,
    ];
}

/// Writes the evaluation of `row` onto its span.
///
/// Any attribute the span already had under one of these keys is removed first, even when the
/// row leaves that key absent: downstream must see the collector's verdict, never a stale or
/// forged value sent by the client.
pub fn enrich(span: &mut Span, row: &AttemptRow) {
    span.attributes
        .retain(|attribute| !attr::ALL.contains(&attribute.key.as_str()));
    let attributes = &mut span.attributes;
    attributes.push(kv(attr::DECISION, text(row.decision.as_str())));
    attributes.push(kv(attr::AUDITED, Value::BoolValue(row.audited)));
    if let Some(usd) = row.estimated_incremental_usd {
        attributes.push(kv(attr::ESTIMATED_INCREMENTAL_USD, decimal(usd)));
    }
    if let Some(usd) = row.remaining_envelope_usd {
        attributes.push(kv(attr::REMAINING_ENVELOPE_USD, decimal(usd)));
    }
    attributes.push(kv(attr::SPEND_CLASS, text(row.spend_class.as_str())));
    let violations = row
        .violations
        .iter()
        .map(|violation| AnyValue {
            value: Some(text(violation.as_str())),
        })
        .collect();
    attributes.push(kv(
        attr::VIOLATIONS,
        Value::ArrayValue(ArrayValue { values: violations }),
    ));
}

fn text(s: &str) -> Value {
    Value::StringValue(s.to_owned())
}

/// Money travels as a decimal string, not a double, so cents never drift; normalised so the same
/// amount always reads the same (`0.015`, not `0.015000`).
fn decimal(d: Decimal) -> Value {
    Value::StringValue(d.normalize().to_string())
}

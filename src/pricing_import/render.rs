//! The snapshot file's text: deterministic, so re-importing an unchanged feed gives the same
//! bytes (and digest), and readable in a diff.
//!
//! Layout: the shipped snapshot's, one model per line; keys in a fixed order, groups and models
//! sorted by name (byte order); every amount a decimal string in its shortest form (`"0.319"`,
//! `"3"`, `"0"`), never an exponent.

use std::collections::BTreeMap;
use std::fmt::Write;

use chrono::NaiveDate;
use rust_decimal::Decimal;

use super::{ListedModel, ListedTier};

pub(super) fn snapshot_json(
    source: &str,
    checked_at: NaiveDate,
    version: &str,
    group_ratio: &BTreeMap<String, Decimal>,
    models: &BTreeMap<String, ListedModel>,
) -> Vec<u8> {
    let groups: Vec<String> = group_ratio
        .iter()
        .map(|(group, ratio)| format!("{}: {}", string(group), amount(*ratio)))
        .collect();
    let mut out = String::from("{\n");
    // Writing to a String cannot fail.
    let _ = writeln!(out, "  \"pricing_source\": {},", string(source));
    let _ = writeln!(out, "  \"pricing_checked_at\": \"{checked_at}\",");
    let _ = writeln!(out, "  \"pricing_version\": {},", string(version));
    out.push_str("  \"currency\": \"USD\",\n");
    out.push_str("  \"unit\": \"per_million_tokens\",\n");
    let _ = writeln!(out, "  \"group_ratio\": {{{}}},", groups.join(", "));
    out.push_str("  \"models\": {\n");
    let lines: Vec<String> = models
        .iter()
        .map(|(name, model)| format!("    {}: {}", string(name), model_object(model)))
        .collect();
    out.push_str(&lines.join(",\n"));
    out.push_str("\n  }\n}\n");
    out.into_bytes()
}

fn model_object(model: &ListedModel) -> String {
    let mut fields = Vec::with_capacity(7);
    if let Some(family) = &model.family {
        fields.push(format!("\"family\": {}", string(family)));
    }
    fields.push(format!("\"input\": {}", amount(model.input)));
    fields.push(format!("\"output\": {}", amount(model.output)));
    push_price(&mut fields, "cached_input", model.cached_input);
    push_price(&mut fields, "cache_write", model.cache_write);
    if let Some(max) = model.max_output_tokens {
        fields.push(format!("\"max_output_tokens\": {max}"));
    }
    if !model.tiers.is_empty() {
        let tiers: Vec<String> = model.tiers.iter().map(tier_object).collect();
        fields.push(format!("\"tiers\": [{}]", tiers.join(", ")));
    }
    format!("{{{}}}", fields.join(", "))
}

fn tier_object(tier: &ListedTier) -> String {
    let mut fields = vec![format!(
        "\"above_input_tokens\": {}",
        tier.above_input_tokens
    )];
    push_price(&mut fields, "input", tier.input);
    push_price(&mut fields, "output", tier.output);
    push_price(&mut fields, "cached_input", tier.cached_input);
    push_price(&mut fields, "cache_write", tier.cache_write);
    format!("{{{}}}", fields.join(", "))
}

/// Optional prices are written only when present.
fn push_price(fields: &mut Vec<String>, key: &str, price: Option<Decimal>) {
    if let Some(price) = price {
        fields.push(format!("\"{key}\": {}", amount(price)));
    }
}

/// A JSON string literal, escaped as JSON requires.
fn string(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

/// A decimal string without trailing zeros: the same price always renders the same way.
fn amount(value: Decimal) -> String {
    format!("\"{}\"", value.normalize())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    #[test]
    fn amounts_render_in_their_shortest_plain_form() {
        let d = |s: &str| Decimal::from_str(s).unwrap();
        assert_eq!(amount(d("0.3190")), "\"0.319\"");
        assert_eq!(amount(d("3.00")), "\"3\"");
        assert_eq!(amount(d("0.0000000001")), "\"0.0000000001\"");
        assert_eq!(amount(d("0.000")), "\"0\"");
        assert_eq!(amount(d("150")), "\"150\"");
    }

    #[test]
    fn names_are_escaped() {
        assert_eq!(string("a\"b\\c\n"), r#""a\"b\\c\n""#);
    }
}

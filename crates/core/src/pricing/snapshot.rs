//! One snapshot file: parsing and validation.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::NaiveDate;
use rust_decimal::Decimal;
use serde::Deserialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use super::error::PricingError;

const MAX_PRICE_PLACES: u32 = 10;
const MAX_RATIO_PLACES: u32 = 2;

/// A dated rate card, exactly as one file in the pricing directory gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub path: PathBuf,
    pub version: String,
    pub source: String,
    pub checked_at: NaiveDate,
    /// Billing group name → multiplier applied to every listed price.
    pub group_ratio: BTreeMap<String, Decimal>,
    pub models: BTreeMap<String, ModelPrice>,
    /// Lowercase hex SHA-256 of the file's bytes.
    /// Shared: every row priced by this snapshot names it.
    pub digest: crate::symbol::Symbol,
}

/// Listed prices of one model, USD per million tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelPrice {
    /// Shared: every row of the model names it.
    pub family: Option<crate::symbol::Symbol>,
    pub input: Decimal,
    pub output: Decimal,
    pub cached_input: Option<Decimal>,
    /// Cache-write input tokens; absent, they are billed at the input price in force.
    pub cache_write: Option<Decimal>,
    /// The most output tokens the model returns: the planned cap of last resort (§4).
    pub max_output_tokens: Option<i64>,
    /// Long-context prices, thresholds strictly increasing (the loader refuses other orders).
    pub tiers: Vec<PriceTier>,
}

/// Prices that replace a model's base prices for an attempt whose input tokens exceed
/// `above_input_tokens`. A price the tier omits stays the base one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriceTier {
    pub above_input_tokens: i64,
    pub input: Option<Decimal>,
    pub output: Option<Decimal>,
    pub cached_input: Option<Decimal>,
    pub cache_write: Option<Decimal>,
}

/// The four prices one attempt is billed at, once its tier is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prices {
    pub input: Decimal,
    pub output: Decimal,
    pub cached_input: Decimal,
    pub cache_write: Decimal,
}

impl ModelPrice {
    /// The tier an attempt with `input_tokens` (cached and cache-write ones included) is priced
    /// by: the highest whose threshold the count strictly exceeds. Exactly at a threshold is
    /// not above it.
    pub fn tier_for(&self, input_tokens: i64) -> Option<&PriceTier> {
        self.tiers
            .iter()
            .rev()
            .find(|tier| input_tokens > tier.above_input_tokens)
    }

    /// The threshold of the tier that prices `input_tokens`; `None` for base prices. The
    /// `price_tier_above_input_tokens` column.
    pub fn tier_threshold(&self, input_tokens: i64) -> Option<i64> {
        self.tier_for(input_tokens).map(|t| t.above_input_tokens)
    }

    /// The prices in force for `input_tokens`: the tier's where it gives one, else the base
    /// price; cached and cache-write tokens without a price of their own (in the tier or the
    /// base) are billed at the input price in force.
    pub fn prices_for(&self, input_tokens: i64) -> Prices {
        let tier = self.tier_for(input_tokens);
        let input = tier.and_then(|t| t.input).unwrap_or(self.input);
        Prices {
            input,
            output: tier.and_then(|t| t.output).unwrap_or(self.output),
            cached_input: tier
                .and_then(|t| t.cached_input)
                .or(self.cached_input)
                .unwrap_or(input),
            cache_write: tier
                .and_then(|t| t.cache_write)
                .or(self.cache_write)
                .unwrap_or(input),
        }
    }
}

#[derive(Deserialize)]
struct RawSnapshot<'a> {
    pricing_source: Option<String>,
    pricing_checked_at: Option<String>,
    pricing_version: Option<String>,
    currency: Option<String>,
    unit: Option<String>,
    #[serde(borrow)]
    group_ratio: Option<BTreeMap<String, &'a RawValue>>,
    #[serde(borrow)]
    models: Option<BTreeMap<String, RawModel<'a>>>,
}

#[derive(Deserialize)]
struct RawModel<'a> {
    family: Option<String>,
    #[serde(borrow)]
    input: Option<&'a RawValue>,
    #[serde(borrow)]
    output: Option<&'a RawValue>,
    #[serde(borrow)]
    cached_input: Option<&'a RawValue>,
    #[serde(borrow)]
    cache_write: Option<&'a RawValue>,
    #[serde(borrow)]
    max_output_tokens: Option<&'a RawValue>,
    #[serde(borrow)]
    tiers: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct RawTier<'a> {
    #[serde(borrow)]
    above_input_tokens: Option<&'a RawValue>,
    #[serde(borrow)]
    input: Option<&'a RawValue>,
    #[serde(borrow)]
    output: Option<&'a RawValue>,
    #[serde(borrow)]
    cached_input: Option<&'a RawValue>,
    #[serde(borrow)]
    cache_write: Option<&'a RawValue>,
}

impl Snapshot {
    /// Parses and validates a snapshot; `path` only names it in errors.
    pub fn from_bytes(path: &Path, bytes: &[u8]) -> Result<Snapshot, PricingError> {
        let err = |field: &str, problem: String| PricingError::new(path, field, problem);
        let raw: RawSnapshot<'_> =
            serde_json::from_slice(bytes).map_err(|e| err("", format!("not valid JSON: {e}")))?;

        let required = |value: Option<String>, field: &str| {
            value
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| err(field, "missing".into()))
        };
        let version = required(raw.pricing_version, "pricing_version")?;
        let source = required(raw.pricing_source, "pricing_source")?;
        let checked_at_text = required(raw.pricing_checked_at, "pricing_checked_at")?;
        let checked_at = parse_date(&checked_at_text).ok_or_else(|| {
            err(
                "pricing_checked_at",
                format!("{checked_at_text:?} is not a YYYY-MM-DD date or RFC 3339 timestamp"),
            )
        })?;
        let currency = required(raw.currency, "currency")?;
        if currency != "USD" {
            return Err(err(
                "currency",
                format!("{currency:?} is not supported, only \"USD\""),
            ));
        }
        let unit = required(raw.unit, "unit")?;
        if unit != "per_million_tokens" {
            return Err(err(
                "unit",
                format!("{unit:?} is not supported, only \"per_million_tokens\""),
            ));
        }

        let mut group_ratio = BTreeMap::new();
        for (group, value) in raw
            .group_ratio
            .ok_or_else(|| err("group_ratio", "missing".into()))?
        {
            let field = format!("group_ratio.{group}");
            let ratio = parse_amount(value, MAX_RATIO_PLACES).map_err(|p| err(&field, p))?;
            group_ratio.insert(group, ratio);
        }

        let mut models = BTreeMap::new();
        for (name, model) in raw.models.ok_or_else(|| err("models", "missing".into()))? {
            let field = |key: &str| format!("models.{name}.{key}");
            let price = |value: Option<&RawValue>, key: &str| {
                value
                    .map(|v| parse_amount(v, MAX_PRICE_PLACES).map_err(|p| err(&field(key), p)))
                    .transpose()
            };
            let missing = |key: &str| err(&field(key), "missing".into());
            let input = price(model.input, "input")?.ok_or_else(|| missing("input"))?;
            let output = price(model.output, "output")?.ok_or_else(|| missing("output"))?;
            let cached_input = price(model.cached_input, "cached_input")?;
            let cache_write = price(model.cache_write, "cache_write")?;
            let max_output_tokens = model
                .max_output_tokens
                .map(|v| parse_token_count(v, 1).map_err(|p| err(&field("max_output_tokens"), p)))
                .transpose()?;
            let tiers = match model.tiers {
                Some(raw) => parse_tiers(raw, &field("tiers")).map_err(|(f, p)| err(&f, p))?,
                None => Vec::new(),
            };
            let family = model
                .family
                .filter(|f| !f.is_empty())
                .map(|f| crate::symbol::symbol(&f));
            models.insert(
                name,
                ModelPrice {
                    family,
                    input,
                    output,
                    cached_input,
                    cache_write,
                    max_output_tokens,
                    tiers,
                },
            );
        }

        Ok(Snapshot {
            path: path.to_path_buf(),
            version,
            source,
            checked_at,
            group_ratio,
            models,
            digest: crate::symbol::symbol(&hex::encode(Sha256::digest(bytes))),
        })
    }
}

/// A model's `tiers`: each a threshold and the prices it replaces, thresholds strictly
/// increasing. Errors give the field (`models.m.tiers[1].above_input_tokens`) and the problem.
fn parse_tiers(raw: &RawValue, field: &str) -> Result<Vec<PriceTier>, (String, String)> {
    let listed: Vec<RawTier<'_>> = serde_json::from_str(raw.get()).map_err(|e| {
        (
            field.to_owned(),
            format!("not a list of {{\"above_input_tokens\": N, prices…}} objects: {e}"),
        )
    })?;
    let mut tiers: Vec<PriceTier> = Vec::with_capacity(listed.len());
    for (i, tier) in listed.into_iter().enumerate() {
        let at = |key: &str| format!("{field}[{i}].{key}");
        let price = |value: Option<&RawValue>, key: &str| {
            value
                .map(|v| parse_amount(v, MAX_PRICE_PLACES).map_err(|p| (at(key), p)))
                .transpose()
        };
        let threshold = tier
            .above_input_tokens
            .ok_or_else(|| (at("above_input_tokens"), "missing".to_owned()))?;
        let above_input_tokens =
            parse_token_count(threshold, 0).map_err(|p| (at("above_input_tokens"), p))?;
        if let Some(previous) = tiers.last() {
            if above_input_tokens <= previous.above_input_tokens {
                let how = if above_input_tokens == previous.above_input_tokens {
                    "repeats"
                } else {
                    "is below"
                };
                return Err((
                    at("above_input_tokens"),
                    format!(
                        "{above_input_tokens} {how} the threshold of tiers[{}] ({}): list tiers \
                         by strictly increasing above_input_tokens",
                        i - 1,
                        previous.above_input_tokens
                    ),
                ));
            }
        }
        tiers.push(PriceTier {
            above_input_tokens,
            input: price(tier.input, "input")?,
            output: price(tier.output, "output")?,
            cached_input: price(tier.cached_input, "cached_input")?,
            cache_write: price(tier.cache_write, "cache_write")?,
        });
    }
    Ok(tiers)
}

/// A whole number of tokens, at least `min`, written as a JSON integer.
fn parse_token_count(value: &RawValue, min: i64) -> Result<i64, String> {
    let text = value.get();
    text.parse::<i64>()
        .ok()
        .filter(|n| *n >= min)
        .ok_or_else(|| format!("{text} is not a whole number of tokens of at least {min}"))
}

/// A non-negative amount written as a decimal string or a JSON number, read exactly.
fn parse_amount(value: &RawValue, max_places: u32) -> Result<Decimal, String> {
    let text = value.get();
    let literal = if text.starts_with('"') {
        serde_json::from_str::<String>(text).map_err(|e| e.to_string())?
    } else {
        text.to_owned()
    };
    let amount = parse_decimal_literal(&literal).ok_or_else(|| {
        format!("{text} is not a decimal (write prices as strings like \"0.319\")")
    })?;
    if amount.is_sign_negative() && !amount.is_zero() {
        return Err(format!("{text} is negative"));
    }
    if amount.normalize().scale() > max_places {
        return Err(format!("{text} has more than {max_places} decimal places"));
    }
    Ok(amount)
}

/// Plain or scientific decimal notation, exactly, with no rounding.
pub fn parse_decimal_literal(text: &str) -> Option<Decimal> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if text.contains(['e', 'E']) {
        Decimal::from_scientific(text).ok()
    } else {
        Decimal::from_str_exact(text).ok()
    }
}

/// `YYYY-MM-DD`, or an RFC 3339 timestamp whose UTC date is taken.
pub fn parse_date(text: &str) -> Option<NaiveDate> {
    let text = text.trim();
    iso_date(text).or_else(|| chrono_date(text))
}

/// Every form `parse_date` takes, through chrono.
fn chrono_date(text: &str) -> Option<NaiveDate> {
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .or_else(|| {
            chrono::DateTime::parse_from_rfc3339(text)
                .ok()
                .map(|t| t.with_timezone(&chrono::Utc).date_naive())
        })
}

/// Exactly `YYYY-MM-DD`, the form every envelope sends, read without chrono's format parser,
/// which parses `"%Y-%m-%d"` itself again on every call (an envelope's date is read on every
/// logical span). Anything else, and impossible dates, are left to chrono, so the answer is
/// always chrono's.
fn iso_date(text: &str) -> Option<NaiveDate> {
    let bytes: &[u8; 10] = text.as_bytes().try_into().ok()?;
    if bytes[4] != b'-' || bytes[7] != b'-' {
        return None;
    }
    let number = |digits: &[u8]| {
        digits.iter().try_fold(0u32, |n, &b| {
            b.is_ascii_digit().then(|| n * 10 + u32::from(b - b'0'))
        })
    };
    let year = i32::try_from(number(&bytes[..4])?).ok()?;
    NaiveDate::from_ymd_opt(year, number(&bytes[5..7])?, number(&bytes[8..])?)
}

#[cfg(test)]
mod date_tests {
    use proptest::prelude::*;

    use super::*;

    /// What `parse_date` was before its fast path.
    fn chrono_only(text: &str) -> Option<NaiveDate> {
        chrono_date(text.trim())
    }

    #[test]
    fn the_forms_chrono_reads_read_the_same() {
        for text in [
            "2026-08-22",
            " 2026-08-22\n",
            "2026-8-22",
            "2026-08-2",
            "+2026-08-22",
            "0000-01-01",
            "2026-02-29",
            "2024-02-29",
            "2026-13-01",
            "2026-00-10",
            "2026-08-22T23:30:00-02:00",
            "2026/08/22",
            "2026-08-22x",
            "२०२६-08-22",
            "",
        ] {
            assert_eq!(parse_date(text), chrono_only(text), "{text:?}");
        }
        assert_eq!(
            parse_date("2026-08-22"),
            NaiveDate::from_ymd_opt(2026, 8, 22)
        );
        assert_eq!(parse_date("2026-02-29"), None);
    }

    proptest! {
        #[test]
        fn date_like_text_reads_as_chrono_reads_it(
            text in "[ +]?[0-9]{1,5}[-/][0-9]{1,3}-[0-9]{1,3}( |T00:00:00Z)?"
        ) {
            prop_assert_eq!(parse_date(&text), chrono_only(&text));
        }

        #[test]
        fn the_fast_form_reads_as_chrono_reads_it(
            text in "[0-9]{4}-[01][0-9]-[0-3][0-9]"
        ) {
            prop_assert_eq!(parse_date(&text), chrono_only(&text));
        }
    }
}

//! One snapshot file: parsing and validation.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::NaiveDate;
use rust_decimal::Decimal;
use serde::Deserialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use super::book::PricingError;

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
    pub digest: String,
}

/// Listed prices of one model, USD per million tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelPrice {
    pub family: Option<String>,
    pub input: Decimal,
    pub output: Decimal,
    pub cached_input: Option<Decimal>,
}

impl ModelPrice {
    /// Cached tokens are billed at the input price when the snapshot lists no cached price.
    pub fn cached_input_or_input(&self) -> Decimal {
        self.cached_input.unwrap_or(self.input)
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
}

impl Snapshot {
    pub fn from_file(path: &Path) -> Result<Snapshot, PricingError> {
        let bytes = std::fs::read(path)
            .map_err(|e| PricingError::new(path, "", format!("cannot read: {e}")))?;
        Snapshot::from_bytes(path, &bytes)
    }

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
            let price =
                |value: Option<&RawValue>, key: &str| -> Result<Option<Decimal>, PricingError> {
                    let field = format!("models.{name}.{key}");
                    value
                        .map(|v| parse_amount(v, MAX_PRICE_PLACES).map_err(|p| err(&field, p)))
                        .transpose()
                };
            let missing = |key: &str| err(&format!("models.{name}.{key}"), "missing".into());
            let input = price(model.input, "input")?.ok_or_else(|| missing("input"))?;
            let output = price(model.output, "output")?.ok_or_else(|| missing("output"))?;
            let cached_input = price(model.cached_input, "cached_input")?;
            let family = model.family.filter(|f| !f.is_empty());
            models.insert(
                name,
                ModelPrice {
                    family,
                    input,
                    output,
                    cached_input,
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
            digest: hex::encode(Sha256::digest(bytes)),
        })
    }
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
pub(crate) fn parse_decimal_literal(text: &str) -> Option<Decimal> {
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
pub(crate) fn parse_date(text: &str) -> Option<NaiveDate> {
    let text = text.trim();
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .or_else(|| {
            chrono::DateTime::parse_from_rfc3339(text)
                .ok()
                .map(|t| t.with_timezone(&chrono::Utc).date_naive())
        })
}

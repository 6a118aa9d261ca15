//! One policy file: TOML → checked [`Policy`] values, every problem naming its key.

use std::collections::BTreeMap;
use std::path::Path;

use rust_decimal::Decimal;
use serde::Deserialize;

use super::{Glob, Policy, PolicyError, LATEST};
use crate::contract::{round_money, symbol, EnvelopeFields};
use crate::pricing::{parse_date, parse_decimal_literal};
use crate::toml_error::TomlErrorAt;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    policy: Vec<RawPolicy>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    name: String,
    #[serde(default, rename = "match")]
    matcher: RawMatch,
    envelope: RawEnvelope,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMatch {
    service: Option<String>,
    task_type: Option<String>,
    model: Option<String>,
    #[serde(default)]
    attributes: BTreeMap<String, toml::Value>,
}

/// The fields of the JSON envelope form (SPEC §2), with TOML's types.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnvelope {
    pricing_source: Option<String>,
    /// A `"YYYY-MM-DD"` string, an RFC 3339 timestamp, or a bare TOML date.
    pricing_checked_at: Option<toml::Value>,
    pricing_version: Option<String>,
    billing_group: Option<String>,
    /// A decimal string (exact), or a TOML number read through its shortest decimal form.
    max_incremental_usd: Option<toml::Value>,
    max_attempts_after_first: Option<i64>,
    allow_family_fallback: Option<bool>,
    allowed_fallback_families: Option<Vec<String>>,
    replay_safe: Option<bool>,
    assumed_output_cap: Option<i64>,
    task_type: Option<String>,
}

/// Parses one file into its policies, each with its key (`policy[i]`), or every problem found.
pub(super) fn parse(path: &Path, text: &str) -> Result<Vec<(String, Policy)>, Vec<PolicyError>> {
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let at = TomlErrorAt::new(text, &e);
        vec![PolicyError {
            path: path.to_path_buf(),
            key: at.key,
            problem: at.message,
            location: at.location,
        }]
    })?;
    let mut errors = Vec::new();
    let mut policies = Vec::with_capacity(raw.policy.len());
    for (i, raw) in raw.policy.into_iter().enumerate() {
        let key = format!("policy[{i}]");
        let mut problems = Problems {
            path,
            key: &key,
            errors: &mut errors,
        };
        if let Some(policy) = problems.policy(raw) {
            policies.push((key.clone(), policy));
        }
    }
    if errors.is_empty() {
        Ok(policies)
    } else {
        Err(errors)
    }
}

/// Collects the problems of one `[[policy]]`, naming each key under it.
struct Problems<'a> {
    path: &'a Path,
    key: &'a str,
    errors: &'a mut Vec<PolicyError>,
}

impl Problems<'_> {
    fn report(&mut self, field: &str, problem: impl Into<String>) {
        self.errors.push(PolicyError::new(
            self.path,
            &format!("{}.{field}", self.key),
            problem,
        ));
    }

    /// The checked policy, or `None` once at least one problem is reported.
    fn policy(&mut self, raw: RawPolicy) -> Option<Policy> {
        let before = self.errors.len();
        if raw.name.trim().is_empty() {
            self.report("name", "must not be empty");
        }
        let service = self.glob("match.service", raw.matcher.service);
        let task_type = self.glob("match.task_type", raw.matcher.task_type);
        let model = self.glob("match.model", raw.matcher.model);
        let mut attributes = Vec::with_capacity(raw.matcher.attributes.len());
        for (name, value) in raw.matcher.attributes {
            match string_form(&value) {
                Some(text) => attributes.push((name, text)),
                None => self.report(
                    &format!("match.attributes.{name}"),
                    format!("{value} is not a string, number or boolean"),
                ),
            }
        }
        let envelope = self.envelope(raw.envelope);
        (self.errors.len() == before).then(|| Policy {
            name: raw.name,
            path: self.path.to_path_buf(),
            service,
            task_type,
            model,
            attributes,
            envelope,
        })
    }

    fn glob(&mut self, field: &str, pattern: Option<String>) -> Option<Glob> {
        match Glob::new(&pattern?) {
            Ok(glob) => Some(glob),
            Err(problem) => {
                self.report(field, problem);
                None
            }
        }
    }

    fn envelope(&mut self, raw: RawEnvelope) -> EnvelopeFields {
        let mut text = |field: &str, value: Option<String>| {
            let value = value?;
            if value.trim().is_empty() {
                self.report(
                    &format!("envelope.{field}"),
                    "must not be empty; leave the key out instead",
                );
                return None;
            }
            Some(value)
        };
        let pricing_source = text("pricing_source", raw.pricing_source);
        let pricing_version = text("pricing_version", raw.pricing_version);
        let billing_group = text("billing_group", raw.billing_group);
        let task_type = text("task_type", raw.task_type);

        let pricing_checked_at = raw.pricing_checked_at.and_then(|value| {
            let date = match &value {
                toml::Value::String(s) => parse_date(s),
                toml::Value::Datetime(d) => parse_date(&d.to_string()),
                _ => None,
            };
            if date.is_none() {
                self.report(
                    "envelope.pricing_checked_at",
                    format!("{value} is not a YYYY-MM-DD date or RFC 3339 timestamp"),
                );
            }
            date
        });
        if pricing_version.as_deref() == Some(LATEST) {
            let resolved = "must not be given with pricing_version = \"latest\", which pins the newest snapshot per request";
            if pricing_checked_at.is_some() {
                self.report("envelope.pricing_checked_at", resolved);
            }
            if pricing_source.is_some() {
                self.report("envelope.pricing_source", resolved);
            }
        }

        let max_incremental_usd = raw.max_incremental_usd.and_then(|value| {
            let amount = money(&value);
            match amount {
                Some(a) if a.is_sign_negative() && !a.is_zero() => {
                    self.report(
                        "envelope.max_incremental_usd",
                        format!("{value} is negative"),
                    );
                    None
                }
                Some(a) => Some(a),
                None => {
                    self.report(
                        "envelope.max_incremental_usd",
                        format!("{value} is not a decimal (write it as a string like \"0.015\")"),
                    );
                    None
                }
            }
        });
        let max_attempts_after_first = raw.max_attempts_after_first.and_then(|n| {
            let fits = i32::try_from(n).ok().filter(|n| *n >= 0);
            if fits.is_none() {
                self.report(
                    "envelope.max_attempts_after_first",
                    format!("{n} is not a count from 0 to {}", i32::MAX),
                );
            }
            fits
        });
        let allowed_fallback_families = raw.allowed_fallback_families.map(|mut families| {
            // As for spans: a set, so the order a reviewer writes it in does not matter.
            families.sort();
            families.dedup();
            families
        });
        EnvelopeFields {
            present: true,
            json_invalid: false,
            pricing_source: pricing_source.as_deref().map(symbol),
            pricing_checked_at,
            pricing_version: pricing_version.as_deref().map(symbol),
            billing_group: billing_group.as_deref().map(symbol),
            max_incremental_usd,
            max_attempts_after_first,
            allow_family_fallback: raw.allow_family_fallback,
            allowed_fallback_families,
            replay_safe: raw.replay_safe,
            assumed_output_cap: raw.assumed_output_cap,
            task_type: task_type.as_deref().map(symbol),
        }
    }
}

/// Money as a span's would be read: a decimal string exactly, a float through its shortest
/// decimal form, rounded half-even to the 18 places the Parquet columns hold.
fn money(value: &toml::Value) -> Option<Decimal> {
    let amount = match value {
        toml::Value::String(s) => parse_decimal_literal(s),
        toml::Value::Integer(i) => Some(Decimal::from(*i)),
        toml::Value::Float(f) if f.is_finite() => parse_decimal_literal(&f.to_string()),
        _ => None,
    }?;
    Some(round_money(amount))
}

/// A `match.attributes` value in the string form span attributes are compared in.
fn string_form(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

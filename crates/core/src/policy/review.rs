//! What `policy check` prints: one stable line per policy, so two checkouts' outputs diff into
//! the envelopes a pull request changes, and warnings about envelopes that would leave rows
//! unaudited.

use std::fmt::Write;

use super::{Policy, LATEST};
use crate::pricing::PricingBook;
use crate::record::UnauditedReason;

/// `name  file  match …  envelope …`, every given key in a fixed order.
pub fn describe(policy: &Policy) -> String {
    let file = policy.path.file_name().map_or_else(
        || policy.path.display().to_string(),
        |f| f.to_string_lossy().into_owned(),
    );
    let mut line = format!("{}  file {file}  match", policy.name);
    let mut matched = false;
    let mut add = |line: &mut String, key: &str, value: &dyn std::fmt::Display| {
        matched = true;
        // Writing into a String cannot fail.
        let _ = write!(line, " {key}={value}");
    };
    for (key, glob) in [
        ("service", &policy.service),
        ("task_type", &policy.task_type),
        ("model", &policy.model),
    ] {
        if let Some(glob) = glob {
            add(&mut line, key, glob);
        }
    }
    for (key, value) in &policy.attributes {
        add(
            &mut line,
            &format!("attributes.{key}"),
            &format!("{value:?}"),
        );
    }
    if !matched {
        line.push_str(" every request");
    }
    line.push_str("  envelope");
    let e = &policy.envelope;
    let mut field = |key: &str, value: Option<String>| {
        if let Some(value) = value {
            let _ = write!(line, " {key}={value}");
        }
    };
    field(
        "pricing_version",
        e.pricing_version.as_deref().map(str::to_owned),
    );
    field(
        "pricing_checked_at",
        e.pricing_checked_at.map(|d| d.to_string()),
    );
    field(
        "pricing_source",
        e.pricing_source.as_deref().map(str::to_owned),
    );
    field(
        "billing_group",
        e.billing_group.as_deref().map(str::to_owned),
    );
    field(
        "max_incremental_usd",
        e.max_incremental_usd.map(|d| d.normalize().to_string()),
    );
    field(
        "max_attempts_after_first",
        e.max_attempts_after_first.map(|n| n.to_string()),
    );
    field(
        "allow_family_fallback",
        e.allow_family_fallback.map(|b| b.to_string()),
    );
    field(
        "allowed_fallback_families",
        e.allowed_fallback_families
            .as_ref()
            .map(|f| format!("[{}]", f.join(","))),
    );
    field("replay_safe", e.replay_safe.map(|b| b.to_string()));
    field("task_type", e.task_type.as_deref().map(str::to_owned));
    line
}

/// Why rows this policy decides would be unaudited whatever their spans say, judged against
/// `book` when given; empty when nothing is wrong that can be known without spans.
pub fn warnings(policy: &Policy, book: Option<&PricingBook>) -> Vec<String> {
    let e = &policy.envelope;
    let mut reasons = Vec::new();
    if e.max_incremental_usd.is_none() || e.max_attempts_after_first.is_none() {
        reasons.push(UnauditedReason::EnvelopeIncomplete);
    }
    let latest = policy.pins_latest();
    if e.pricing_version.is_none() {
        reasons.push(UnauditedReason::PricingVersionMissing);
    }
    if !latest && e.pricing_source.is_none() {
        reasons.push(UnauditedReason::PricingSourceMissing);
    }
    if !latest && e.pricing_checked_at.is_none() {
        reasons.push(UnauditedReason::PricingCheckedAtMissing);
    }
    if e.billing_group.is_none() {
        reasons.push(UnauditedReason::UnknownBillingGroup);
    }
    let mut warnings: Vec<String> = reasons
        .into_iter()
        .map(|r| format!("every row it decides is unaudited: {r}"))
        .collect();
    let (Some(book), Some(version)) = (book, e.pricing_version.as_deref()) else {
        return warnings;
    };
    if version == LATEST {
        if book.is_empty() {
            warnings.push(format!(
                "no pricing snapshot is loaded, so \"{LATEST}\" resolves to none: {}",
                UnauditedReason::UnknownPricingVersion
            ));
        }
        return warnings;
    }
    let Some(snapshot) = book.pinned(version, e.pricing_checked_at) else {
        warnings.push(format!(
            "pricing version {version:?} is not loaded: {}",
            UnauditedReason::UnknownPricingVersion
        ));
        return warnings;
    };
    if Some(snapshot.checked_at) != e.pricing_checked_at
        || e.pricing_source
            .as_ref()
            .is_some_and(|s| **s != *snapshot.source)
    {
        warnings.push(format!(
            "no loaded snapshot of {version:?} has this checked date and source: {}",
            UnauditedReason::PricingMetadataMismatch
        ));
    }
    if let Some(group) = &e.billing_group {
        if !snapshot.group_ratio.contains_key(&**group) {
            warnings.push(format!(
                "billing group {group:?} is not in {}: {}",
                snapshot.path.display(),
                UnauditedReason::UnknownBillingGroup
            ));
        }
    }
    warnings
}

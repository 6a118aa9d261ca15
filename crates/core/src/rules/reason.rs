//! `decision_reason`: one sentence a support engineer can read to a customer.

use std::fmt::Write;

use rust_decimal::Decimal;

use crate::record::{AttemptRow, Decision, Violation};

pub fn sentence(row: &AttemptRow) -> String {
    let model = row.retry_model.as_deref().unwrap_or("an unnamed model");
    let k = row.attempt_index;
    // The longest sentences (within the envelope, with three amounts) pass 128 bytes: sized
    // once, so the text is never copied into a larger buffer as it grows.
    let mut s = String::with_capacity(192);
    // Writing into a String cannot fail.
    let _ = match row.decision {
        Decision::FirstAttempt => write!(s, "first attempt of {model}"),
        Decision::ReplayUnsafe => write!(
            s,
            "retry {k} of {model} replays a request whose partial output already reached the client, and the envelope is not replay_safe"
        ),
        Decision::OverAttempts => write!(
            s,
            "retry {k} of {model} exceeds the envelope's limit of {} attempts after the first",
            row.max_attempts_after_first.unwrap_or_default()
        ),
        Decision::RoutingDrift => write_drift(&mut s, row, model),
        Decision::Unaudited => write!(
            s,
            "retry {k} of {model} is unaudited: {}",
            row.unaudited_reason.map_or("unknown", |r| r.as_str())
        ),
        Decision::OverEnvelope => write!(
            s,
            "retry {k} of {model} would bring incremental spend to {} USD, over the {} envelope",
            usd(row.cumulative_incremental_usd),
            usd(row.max_incremental_usd)
        ),
        Decision::WithinEnvelope => write!(
            s,
            "retry {k} of {model} brings incremental spend to {} USD, within the {} envelope ({} USD left)",
            usd(row.cumulative_incremental_usd),
            usd(row.max_incremental_usd),
            usd(row.remaining_envelope_usd)
        ),
    };
    if row.decision == Decision::FirstAttempt {
        if row.violations.contains(&Violation::RoutingDrift) {
            let _ = write!(
                s,
                ", served as {}",
                row.response_model.as_deref().unwrap_or("another model")
            );
        }
        if let Some(reason) = row.unaudited_reason {
            let _ = write!(s, " (unaudited: {reason})");
        }
    }
    s
}

fn write_drift(s: &mut String, row: &AttemptRow, model: &str) -> std::fmt::Result {
    let k = row.attempt_index;
    match (&row.original_family, &row.retry_family) {
        (Some(from), Some(to)) if from != to => write!(
            s,
            "retry {k} of {model} moved from the {from} family to {to}, which the envelope does not allow"
        ),
        _ => write!(
            s,
            "retry {k} requested {model} but was served by {}",
            row.response_model.as_deref().unwrap_or("another model")
        ),
    }
}

/// An amount as the sentence quotes it, written in place (no `String` of its own).
fn usd(value: Option<Decimal>) -> Usd {
    Usd(value)
}

struct Usd(Option<Decimal>);

impl std::fmt::Display for Usd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(d) => std::fmt::Display::fmt(&d.normalize(), f),
            None => f.write_str("an unknown"),
        }
    }
}

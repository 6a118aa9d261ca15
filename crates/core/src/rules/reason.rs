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
            Some(d) => f.write_str(plain_decimal(d, &mut [0; PLAIN_DECIMAL_BYTES])),
            None => f.write_str("an unknown"),
        }
    }
}

/// A 96-bit mantissa has at most 29 digits and the scale at most 28, so a point, a leading
/// zero and a sign fit with room to spare.
const PLAIN_DECIMAL_BYTES: usize = 64;

/// What `d.normalize().to_string()` gives: no exponent, no trailing fractional zeros, no sign
/// on zero. Written by hand because `rust_decimal`'s `Display` with `normalize` was 4% of the
/// processor's instructions, every row quoting up to three amounts (BENCHMARKS.md, issue 18,
/// eighth pass).
fn plain_decimal(d: Decimal, buf: &mut [u8; PLAIN_DECIMAL_BYTES]) -> &str {
    let mantissa = d.mantissa().unsigned_abs();
    let negative = d.is_sign_negative() && mantissa != 0;
    // Amounts fit 64 bits as a rule, where dividing by ten is one multiplication.
    let mut at = match u64::try_from(mantissa) {
        Ok(small) => write_digits(small, d.scale(), buf),
        Err(_) => write_digits(mantissa, d.scale(), buf),
    };
    if negative {
        at -= 1;
        buf[at] = b'-';
    }
    // Only ASCII digits, '.' and '-' were written.
    std::str::from_utf8(&buf[at..]).unwrap_or_default()
}

/// Writes `mantissa` × 10^-`scale` at the end of `buf` without trailing fractional zeros;
/// returns where it starts.
fn write_digits<T>(mut mantissa: T, mut scale: u32, buf: &mut [u8; PLAIN_DECIMAL_BYTES]) -> usize
where
    T: Copy + PartialEq + From<u8> + std::ops::Rem<Output = T> + std::ops::DivAssign + TryInto<u8>,
{
    let (zero, ten) = (T::from(0), T::from(10));
    while scale > 0 && mantissa % ten == zero {
        mantissa /= ten;
        scale -= 1;
    }
    let mut at = buf.len();
    let mut digits = 0;
    loop {
        if scale > 0 && digits == scale {
            at -= 1;
            buf[at] = b'.';
        }
        at -= 1;
        buf[at] = b'0' + (mantissa % ten).try_into().unwrap_or_default();
        mantissa /= ten;
        digits += 1;
        if mantissa == zero && digits > scale {
            return at;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check(d: Decimal) {
        assert_eq!(
            plain_decimal(d, &mut [0; PLAIN_DECIMAL_BYTES]),
            d.normalize().to_string(),
            "{d:?}"
        );
    }

    #[test]
    fn amounts_read_as_rust_decimal_writes_them() {
        for text in [
            "0",
            "-0",
            "0.000",
            "-0.00",
            "1",
            "-1",
            "10",
            "100.00",
            "0.05",
            "-0.05",
            "0.0000001",
            "1.5000",
            "123456789.123456789",
            "0.0000000000000000000000000001",
            "79228162514264337593543950335",
            "-79228162514264337593543950335",
            "7.9228162514264337593543950335",
            "0.1000000000000000000000000000",
        ] {
            check(text.parse().expect("a decimal"));
        }
    }

    proptest! {
        #[test]
        fn any_decimal_reads_as_rust_decimal_writes_it(
            lo: u32, mid: u32, hi: u32, negative: bool, scale in 0u32..=28,
        ) {
            check(Decimal::from_parts(lo, mid, hi, negative, scale));
        }

        #[test]
        fn any_64_bit_amount_reads_as_rust_decimal_writes_it(
            mantissa: u64, negative: bool, scale in 0u32..=28,
        ) {
            check(Decimal::from_parts(
                mantissa as u32,
                (mantissa >> 32) as u32,
                0,
                negative,
                scale,
            ));
        }
    }
}

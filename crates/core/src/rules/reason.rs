//! `decision_reason`: one sentence a support engineer can read to a customer.

use rust_decimal::Decimal;

use crate::record::{AttemptRow, Decision, Violation};

pub fn sentence(row: &AttemptRow) -> String {
    let model = row.retry_model.as_deref().unwrap_or("an unnamed model");
    let k = row.attempt_index;
    // The longest sentences (within the envelope, with three amounts) pass 128 bytes: sized
    // once, so the text is never copied into a larger buffer as it grows. Written piece by
    // piece: `write!` through `fmt::write` cost twice as much for text that is mostly fixed.
    let mut s = Sentence(String::with_capacity(192));
    match row.decision {
        Decision::FirstAttempt => s.text("first attempt of ").text(model),
        Decision::ReplayUnsafe => s.retry(k, model).text(
            " replays a request whose partial output already reached the client, and the envelope is not replay_safe",
        ),
        Decision::OverAttempts => s
            .retry(k, model)
            .text(" exceeds the envelope's limit of ")
            .int(row.max_attempts_after_first.unwrap_or_default())
            .text(" attempts after the first"),
        Decision::RoutingDrift => drift(&mut s, row, model),
        Decision::Unaudited => s
            .retry(k, model)
            .text(" is unaudited: ")
            .text(row.unaudited_reason.map_or("unknown", |r| r.as_str())),
        Decision::OverEnvelope => s
            .retry(k, model)
            .text(" would bring incremental spend to ")
            .usd(row.cumulative_incremental_usd)
            .text(" USD, over the ")
            .usd(row.max_incremental_usd)
            .text(" envelope"),
        Decision::WithinEnvelope => s
            .retry(k, model)
            .text(" brings incremental spend to ")
            .usd(row.cumulative_incremental_usd)
            .text(" USD, within the ")
            .usd(row.max_incremental_usd)
            .text(" envelope (")
            .usd(row.remaining_envelope_usd)
            .text(" USD left)"),
    };
    if row.decision == Decision::FirstAttempt {
        if row.violations.contains(&Violation::RoutingDrift) {
            s.text(", served as ")
                .text(row.response_model.as_deref().unwrap_or("another model"));
        }
        if let Some(reason) = row.unaudited_reason {
            s.text(" (unaudited: ").text(reason.as_str()).text(")");
        }
    }
    s.0
}

fn drift<'s>(s: &'s mut Sentence, row: &AttemptRow, model: &str) -> &'s mut Sentence {
    match (&row.original_family, &row.retry_family) {
        (Some(from), Some(to)) if from != to => s
            .retry(row.attempt_index, model)
            .text(" moved from the ")
            .text(from)
            .text(" family to ")
            .text(to)
            .text(", which the envelope does not allow"),
        _ => s
            .text("retry ")
            .int(row.attempt_index)
            .text(" requested ")
            .text(model)
            .text(" but was served by ")
            .text(row.response_model.as_deref().unwrap_or("another model")),
    }
}

/// A sentence being written.
struct Sentence(String);

impl Sentence {
    fn text(&mut self, text: &str) -> &mut Sentence {
        self.0.push_str(text);
        self
    }

    /// "retry {k} of {model}", how most sentences start.
    fn retry(&mut self, k: i32, model: &str) -> &mut Sentence {
        self.text("retry ").int(k).text(" of ").text(model)
    }

    fn int(&mut self, n: i32) -> &mut Sentence {
        self.text(plain_decimal(
            Decimal::from(n),
            &mut [0; PLAIN_DECIMAL_BYTES],
        ))
    }

    fn usd(&mut self, value: Option<Decimal>) -> &mut Sentence {
        match value {
            Some(d) => self.text(plain_decimal(d, &mut [0; PLAIN_DECIMAL_BYTES])),
            None => self.text("an unknown"),
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
    use crate::record::UnauditedReason;
    use proptest::prelude::*;

    use std::fmt::Write;

    /// The sentence as `write!` wrote it before, to check the pieces against.
    fn sentence_by_format(row: &AttemptRow) -> String {
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
            Decision::RoutingDrift => write_drift_by_format(&mut s, row, model),
            Decision::Unaudited => write!(
                s,
                "retry {k} of {model} is unaudited: {}",
                row.unaudited_reason.map_or("unknown", |r| r.as_str())
            ),
            Decision::OverEnvelope => write!(
                s,
                "retry {k} of {model} would bring incremental spend to {} USD, over the {} envelope",
                Usd(row.cumulative_incremental_usd),
                Usd(row.max_incremental_usd)
            ),
            Decision::WithinEnvelope => write!(
                s,
                "retry {k} of {model} brings incremental spend to {} USD, within the {} envelope ({} USD left)",
                Usd(row.cumulative_incremental_usd),
                Usd(row.max_incremental_usd),
                Usd(row.remaining_envelope_usd)
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

    fn write_drift_by_format(s: &mut String, row: &AttemptRow, model: &str) -> std::fmt::Result {
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

    struct Usd(Option<Decimal>);

    impl std::fmt::Display for Usd {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self.0 {
                Some(d) => write!(f, "{}", d.normalize()),
                None => f.write_str("an unknown"),
            }
        }
    }

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

    proptest::proptest! {
        /// Any mantissa at any scale, trailing zeros of every count included.
        #[test]
        fn any_amount_reads_as_rust_decimal_writes_it(
            digits in 0u64..1_000_000,
            zeros in 0u32..19,
            scale in 0u32..=28,
            negative in proptest::prelude::any::<bool>(),
        ) {
            let mantissa = i128::from(digits) * 10i128.pow(zeros);
            let d = Decimal::from_i128_with_scale(if negative { -mantissa } else { mantissa }, scale);
            let mut buf = [0; PLAIN_DECIMAL_BYTES];
            proptest::prop_assert_eq!(plain_decimal(d, &mut buf), d.normalize().to_string());
        }
    }

    /// Every decision, with and without each optional piece, reads as `write!` wrote it.
    #[test]
    fn the_sentence_reads_as_it_did_with_write() {
        let amounts = [
            None,
            Some(Decimal::ZERO),
            Some(Decimal::new(-125, 4)),
            Some(Decimal::new(5, 2)),
        ];
        let mut checked = 0;
        for &decision in Decision::ALL {
            for model in [None, Some("gpt-4o")] {
                for k in [0, 3, -1, -7, i32::MIN, i32::MAX] {
                    for (i, &amount) in amounts.iter().enumerate() {
                        for reason in [
                            None,
                            Some(UnauditedReason::ALL[i % UnauditedReason::ALL.len()]),
                        ] {
                            for drifted in [false, true] {
                                for families in [
                                    (None, None),
                                    (Some("gpt"), Some("gpt")),
                                    (Some("gpt"), Some("claude")),
                                ] {
                                    let mut row = AttemptRow::blank();
                                    row.decision = decision;
                                    row.retry_model = model.map(Into::into);
                                    row.response_model = drifted.then(|| "gpt-4o-mini".into());
                                    row.attempt_index = k;
                                    row.max_attempts_after_first = amount.map(|_| k);
                                    row.unaudited_reason = reason;
                                    row.cumulative_incremental_usd = amount;
                                    row.max_incremental_usd = amounts[(i + 1) % amounts.len()];
                                    row.remaining_envelope_usd = amounts[(i + 2) % amounts.len()];
                                    row.original_family = families.0.map(Into::into);
                                    row.retry_family = families.1.map(Into::into);
                                    if drifted {
                                        row.violations.push(Violation::RoutingDrift);
                                    }
                                    assert_eq!(sentence(&row), sentence_by_format(&row), "{row:?}");
                                    checked += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(checked, Decision::ALL.len() * 2 * 6 * 4 * 2 * 2 * 3);
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

//! Pricing snapshots (SPEC §3): dated rate cards the envelopes pin, and the cost formula.

pub mod age;
mod book;
pub mod import;
mod snapshot;

pub use book::{PricingBook, PricingError, PricingErrors};
pub(crate) use snapshot::{parse_date, parse_decimal_literal};
pub use snapshot::{ModelPrice, Snapshot};

use rust_decimal::Decimal;

/// Token usage of one attempt as the cost formula needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// All input tokens, cached ones included (OpenTelemetry semantics).
    pub input: i64,
    /// The cached subset of `input`.
    pub cached: i64,
    /// Output tokens: the cap for a planned cost, the actual count for an actual cost.
    pub output: i64,
}

/// `((input - cached) * p_input + cached * p_cached + output * p_output) / 1e6 * group_ratio`.
///
/// Exact: prices carry at most 10 decimal places and ratios 2, so the result has at most 18 and
/// nothing is rounded. `None` when the figures are too large for a decimal to hold exactly
/// (absurd counts or prices).
pub fn cost_usd(price: &ModelPrice, group_ratio: Decimal, usage: Usage) -> Option<Decimal> {
    // A snapshot may write "0.3190000000" with zeros past its 10 places; they are no digits, and
    // counting them could push an exact product past a decimal's 28 places.
    let term = |count: i64, price: Decimal| mul_exact(Decimal::from(count), price.normalize());
    let group_ratio = group_ratio.normalize();
    let uncached = usage.input.checked_sub(usage.cached)?;
    let per_million = add_exact(
        add_exact(
            term(uncached, price.input)?,
            term(usage.cached, price.cached_input_or_input())?,
        )?,
        term(usage.output, price.output)?,
    )?;
    // Multiplying by 10^-6 only shifts the scale, where a division could round.
    mul_exact(mul_exact(per_million, Decimal::new(1, 6))?, group_ratio)
}

/// `a + b`, or `None` when a decimal cannot hold the sum exactly.
pub fn add_exact(a: Decimal, b: Decimal) -> Option<Decimal> {
    kept_every_digit(a.checked_add(b)?, places(a).max(places(b)))
}

/// `a - b`, or `None` when a decimal cannot hold the difference exactly.
pub fn sub_exact(a: Decimal, b: Decimal) -> Option<Decimal> {
    kept_every_digit(a.checked_sub(b)?, places(a).max(places(b)))
}

fn mul_exact(a: Decimal, b: Decimal) -> Option<Decimal> {
    kept_every_digit(a.checked_mul(b)?, places(a) + places(b))
}

/// The places an operand brings to a result: none for a zero, whatever scale it is written at.
fn places(d: Decimal) -> u32 {
    if d.is_zero() {
        0
    } else {
        d.scale()
    }
}

/// rust_decimal keeps every digit of a sum or product when its 96-bit mantissa can, and rounds
/// to fewer places when it cannot, instead of failing. Money is never rounded, so a non-zero
/// result at a lower scale than its operands give was rounded and is not a figure.
fn kept_every_digit(result: Decimal, exact_scale: u32) -> Option<Decimal> {
    (result.is_zero() || result.scale() >= exact_scale).then_some(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }

    fn flash() -> ModelPrice {
        ModelPrice {
            family: Some("deepseek".into()),
            input: d("0.319"),
            output: d("0.957"),
            cached_input: Some(d("0.0318")),
        }
    }

    #[test]
    fn worked_example_vip() {
        let usage = Usage {
            input: 10_000,
            cached: 4_000,
            output: 800,
        };
        assert_eq!(cost_usd(&flash(), d("1"), usage), Some(d("0.0028068")));
    }

    #[test]
    fn worked_example_default_group_triples() {
        let usage = Usage {
            input: 10_000,
            cached: 4_000,
            output: 800,
        };
        assert_eq!(cost_usd(&flash(), d("3"), usage), Some(d("0.0084204")));
    }

    #[test]
    fn missing_cached_price_bills_cached_tokens_at_input_price() {
        let qwen = ModelPrice {
            family: Some("qwen".into()),
            input: d("0.246575"),
            output: d("1.862"),
            cached_input: None,
        };
        let all_cached = Usage {
            input: 1_000_000,
            cached: 1_000_000,
            output: 0,
        };
        let none_cached = Usage {
            input: 1_000_000,
            cached: 0,
            output: 0,
        };
        assert_eq!(cost_usd(&qwen, d("1"), all_cached), Some(d("0.246575")));
        assert_eq!(
            cost_usd(&qwen, d("1"), all_cached),
            cost_usd(&qwen, d("1"), none_cached)
        );
    }

    #[test]
    fn smallest_prices_stay_exact_at_scale_18() {
        let tiny = ModelPrice {
            family: None,
            input: d("0.0000000001"),
            output: d("0"),
            cached_input: None,
        };
        let usage = Usage {
            input: 1,
            cached: 0,
            output: 0,
        };
        assert_eq!(
            cost_usd(&tiny, d("0.01"), usage),
            Some(d("0.000000000000000001"))
        );
    }

    #[test]
    fn absurd_counts_give_none_not_a_panic() {
        let usage = Usage {
            input: i64::MAX,
            cached: i64::MIN,
            output: i64::MAX,
        };
        assert_eq!(cost_usd(&flash(), d("3"), usage), None);
    }

    #[test]
    fn a_cost_too_large_to_hold_exactly_is_none_not_rounded() {
        let dear = ModelPrice {
            family: None,
            input: d("99.9999999999"),
            output: d("0"),
            cached_input: None,
        };
        let usage = Usage {
            input: crate::contract::MAX_TOKEN_COUNT - 1,
            cached: 0,
            output: 0,
        };
        // Exactly (2^53 - 1) * 999999999999 * 101 at scale 18: 30 digits, more than a Decimal's
        // 96-bit mantissa holds, so no Decimal is this cost.
        assert_eq!(cost_usd(&dear, d("1.01"), usage), None);
    }

    #[test]
    fn sums_and_differences_that_would_round_are_none() {
        // 40 billion USD at 18 places: two of them need a 30-digit mantissa.
        let huge = d("40000000000.000000000000000001");
        assert_eq!(add_exact(huge, huge), None);
        assert_eq!(sub_exact(-huge, huge), None);
        assert_eq!(add_exact(Decimal::MAX, Decimal::ONE), None);
        assert_eq!(add_exact(d("0.015"), d("0.0039556")), Some(d("0.0189556")));
        assert_eq!(sub_exact(d("0.015"), d("0.0189556")), Some(d("-0.0039556")));
        assert_eq!(
            add_exact(huge, d("1")),
            Some(d("40000000001.000000000000000001"))
        );
    }

    #[test]
    fn zeros_written_past_ten_places_do_not_make_a_cost_unpriceable() {
        let zeros = "0".repeat(20);
        let padded = ModelPrice {
            family: None,
            input: d(&format!("0.319{zeros}")),
            output: d(&format!("0.957{zeros}")),
            cached_input: Some(d(&format!("0.0318{zeros}"))),
        };
        let usage = Usage {
            input: 10_000,
            cached: 4_000,
            output: 800,
        };
        let cost = cost_usd(&padded, d("1.00"), usage);
        assert_eq!(cost, Some(d("0.0028068")));
        assert!(cost.is_some_and(|c| c.scale() <= 18));
    }
}

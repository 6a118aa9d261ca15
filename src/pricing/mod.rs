//! Pricing snapshots (SPEC §3): dated rate cards the envelopes pin, and the cost formula.

mod book;
mod snapshot;

pub use book::{PricingBook, PricingError, PricingErrors};
pub(crate) use snapshot::parse_date;
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
/// nothing is rounded. `None` only when the figures are too large for a decimal (absurd counts).
pub fn cost_usd(price: &ModelPrice, group_ratio: Decimal, usage: Usage) -> Option<Decimal> {
    let uncached = Decimal::from(usage.input.checked_sub(usage.cached)?);
    let per_million = uncached
        .checked_mul(price.input)?
        .checked_add(Decimal::from(usage.cached).checked_mul(price.cached_input_or_input())?)?
        .checked_add(Decimal::from(usage.output).checked_mul(price.output)?)?;
    // Multiplying by 10^-6 only shifts the scale, where a division could round.
    per_million
        .checked_mul(Decimal::new(1, 6))?
        .checked_mul(group_ratio)
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
}

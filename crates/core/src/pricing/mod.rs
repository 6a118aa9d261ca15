//! Pricing snapshots (SPEC §3): dated rate cards the envelopes pin, and the cost formula.

pub mod age;
mod book;
mod error;
mod fixed;
mod snapshot;

pub use book::PricingBook;
pub use error::{PricingError, PricingErrors};
pub use snapshot::{parse_date, parse_decimal_literal};
pub use snapshot::{ModelPrice, PriceTier, Prices, Snapshot};

use rust_decimal::Decimal;

/// Token usage of one attempt as the cost formula needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// All input tokens, cached and cache-write ones included (OpenTelemetry semantics); also
    /// what selects the price tier.
    pub input: i64,
    /// The cached subset of `input`.
    pub cached: i64,
    /// The cache-write subset of `input`.
    pub cache_write: i64,
    /// Output tokens: the cap for a planned cost, the actual count for an actual cost.
    pub output: i64,
}

/// SPEC §4: `(uncached * p_input + cached * p_cached + cache_write * p_cache_write
/// + output * p_output) / 1e6 * group_ratio`, with `uncached = input - cached - cache_write`
/// and the prices of the tier `input` selects ([`ModelPrice::prices_for`]).
///
/// Exact: prices carry at most 10 decimal places and ratios 2, so the result has at most 18 and
/// nothing is rounded. `None` when the counts are no usage (a negative count, or cached +
/// cache-write above input; the rules flag those as `invalid_usage`) or the figures are too
/// large for a decimal to hold exactly (absurd counts or prices).
pub fn cost_usd(price: &ModelPrice, group_ratio: Decimal, usage: Usage) -> Option<Decimal> {
    let counts = [usage.input, usage.cached, usage.cache_write, usage.output];
    if counts.iter().any(|n| *n < 0) {
        return None;
    }
    let uncached = usage
        .input
        .checked_sub(usage.cached)?
        .checked_sub(usage.cache_write)
        .filter(|n| *n >= 0)?;
    let prices = price.prices_for(usage.input);
    let counts = [uncached, usage.cached, usage.cache_write, usage.output];
    fixed::cost_usd(&prices, group_ratio, counts)
        .or_else(|| cost_by_decimals(&prices, group_ratio, counts))
}

/// [`cost_usd`] of chosen prices and checked counts (`[uncached, cached, cache_write,
/// output]`) in `rust_decimal`, step by step, refusing any step that rounds.
fn cost_by_decimals(prices: &Prices, group_ratio: Decimal, counts: [i64; 4]) -> Option<Decimal> {
    let [uncached, cached, cache_write, output] = counts;
    // A snapshot may write "0.3190000000" with zeros past its 10 places; they are no digits, and
    // counting them could push an exact product past a decimal's 28 places.
    let term = |count: i64, price: Decimal| mul_exact(Decimal::from(count), price.normalize());
    let group_ratio = group_ratio.normalize();
    let per_million = [
        term(cached, prices.cached_input)?,
        term(cache_write, prices.cache_write)?,
        term(output, prices.output)?,
    ]
    .into_iter()
    .try_fold(term(uncached, prices.input)?, add_exact)?;
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

/// The snapshots shipped in config/pricing, for tests (the core reads no files itself).
#[cfg(test)]
pub fn shipped_book() -> PricingBook {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/pricing");
    let files = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .map(|path| {
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        });
    PricingBook::from_files(files).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }

    fn usage(input: i64, cached: i64, cache_write: i64, output: i64) -> Usage {
        Usage {
            input,
            cached,
            cache_write,
            output,
        }
    }

    /// A model with base prices only: input, output, cached input.
    fn base(input: &str, output: &str, cached_input: Option<&str>) -> ModelPrice {
        ModelPrice {
            family: None,
            input: d(input),
            output: d(output),
            cached_input: cached_input.map(d),
            cache_write: None,
            max_output_tokens: None,
            tiers: Vec::new(),
        }
    }

    fn tier(above: i64, input: Option<&str>, output: Option<&str>) -> PriceTier {
        PriceTier {
            above_input_tokens: above,
            input: input.map(d),
            output: output.map(d),
            cached_input: None,
            cache_write: None,
        }
    }

    fn flash() -> ModelPrice {
        ModelPrice {
            family: Some("deepseek".into()),
            ..base("0.319", "0.957", Some("0.0318"))
        }
    }

    /// SPEC §3's claude-sonnet-4-5: every price given, base and above 200k.
    fn sonnet() -> ModelPrice {
        ModelPrice {
            cache_write: Some(d("3.75")),
            max_output_tokens: Some(64_000),
            tiers: vec![PriceTier {
                above_input_tokens: 200_000,
                input: Some(d("6")),
                output: Some(d("22.5")),
                cached_input: Some(d("0.6")),
                cache_write: Some(d("7.5")),
            }],
            ..base("3", "15", Some("0.3"))
        }
    }

    #[test]
    fn worked_example_vip() {
        let cost = cost_usd(&flash(), d("1"), usage(10_000, 4_000, 0, 800));
        assert_eq!(cost, Some(d("0.0028068")));
    }

    #[test]
    fn worked_example_default_group_triples() {
        let cost = cost_usd(&flash(), d("3"), usage(10_000, 4_000, 0, 800));
        assert_eq!(cost, Some(d("0.0084204")));
    }

    #[test]
    fn missing_cached_price_bills_cached_tokens_at_input_price() {
        let qwen = base("0.246575", "1.862", None);
        let all_cached = usage(1_000_000, 1_000_000, 0, 0);
        let none_cached = usage(1_000_000, 0, 0, 0);
        assert_eq!(cost_usd(&qwen, d("1"), all_cached), Some(d("0.246575")));
        assert_eq!(
            cost_usd(&qwen, d("1"), all_cached),
            cost_usd(&qwen, d("1"), none_cached)
        );
    }

    #[test]
    fn cache_write_tokens_are_billed_at_the_cache_write_price() {
        // 100k uncached × 3 + 50k cached × 0.3 + 50k written × 3.75 + 1k out × 15, per million.
        let cost = cost_usd(&sonnet(), d("1"), usage(200_000, 50_000, 50_000, 1_000));
        assert_eq!(cost, Some(d("0.5175")));
    }

    #[test]
    fn cache_write_absent_bills_cache_write_tokens_at_the_input_price() {
        let flash = flash();
        let written = cost_usd(&flash, d("1"), usage(10_000, 4_000, 6_000, 0));
        let uncached = cost_usd(&flash, d("1"), usage(10_000, 4_000, 0, 0));
        assert_eq!(written, uncached);
        assert_eq!(written, Some(d("0.0020412")));
    }

    #[test]
    fn cache_write_absent_in_a_tier_and_base_bills_at_the_tiers_input_price() {
        let model = ModelPrice {
            tiers: vec![tier(100, Some("2"), None)],
            ..base("1", "1", None)
        };
        // 101 tokens, all written to the cache, at the tier's input price of 2.
        let cost = cost_usd(&model, d("1"), usage(101, 0, 101, 0));
        assert_eq!(cost, Some(d("0.000202")));
    }

    #[test]
    fn exactly_at_a_threshold_is_base_price() {
        let model = sonnet();
        assert_eq!(model.tier_for(200_000), None);
        assert_eq!(model.tier_threshold(200_000), None);
        let cost = cost_usd(&model, d("1"), usage(200_000, 0, 0, 0));
        assert_eq!(cost, Some(d("0.6")));
    }

    #[test]
    fn one_token_above_a_threshold_is_the_tier_price_for_the_whole_attempt() {
        let model = sonnet();
        assert_eq!(model.tier_threshold(200_001), Some(200_000));
        // Every token at the tier's prices: 200001 × 6 + 1000 × 22.5, per million.
        let cost = cost_usd(&model, d("1"), usage(200_001, 0, 0, 1_000));
        assert_eq!(cost, Some(d("1.222506")));
    }

    #[test]
    fn the_highest_exceeded_tier_wins() {
        let model = ModelPrice {
            tiers: vec![
                tier(32_000, Some("2"), Some("20")),
                tier(128_000, Some("3"), Some("30")),
                tier(256_000, Some("4"), Some("40")),
            ],
            ..base("1", "10", None)
        };
        let cases = [
            (0, None, "1"),
            (32_000, None, "1"),
            (32_001, Some(32_000), "2"),
            (128_000, Some(32_000), "2"),
            (128_001, Some(128_000), "3"),
            (256_001, Some(256_000), "4"),
            (i64::MAX, Some(256_000), "4"),
        ];
        for (input, threshold, price) in cases {
            assert_eq!(model.tier_threshold(input), threshold, "{input}");
            assert_eq!(model.prices_for(input).input, d(price), "{input}");
        }
    }

    #[test]
    fn a_price_the_tier_omits_stays_the_base_one() {
        let model = ModelPrice {
            cache_write: Some(d("1.25")),
            tiers: vec![tier(1_000, None, Some("30"))],
            ..base("1", "10", Some("0.1"))
        };
        assert_eq!(
            model.prices_for(1_001),
            Prices {
                input: d("1"),
                output: d("30"),
                cached_input: d("0.1"),
                cache_write: d("1.25"),
            }
        );
    }

    #[test]
    fn cached_tokens_without_a_cached_price_bill_at_the_tiers_input_price() {
        let model = ModelPrice {
            tiers: vec![tier(1_000, Some("2"), None)],
            ..base("1", "10", None)
        };
        assert_eq!(model.prices_for(1_001).cached_input, d("2"));
        assert_eq!(model.prices_for(1_000).cached_input, d("1"));
        // 2000 tokens, 1500 cached: all at the tier's input price, 2 per million.
        let cost = cost_usd(&model, d("1"), usage(2_000, 1_500, 0, 0));
        assert_eq!(cost, Some(d("0.004")));
    }

    #[test]
    fn cached_tokens_in_a_tier_that_omits_cached_input_bill_at_the_base_cached_price() {
        let model = ModelPrice {
            tiers: vec![tier(1_000, Some("2"), None)],
            ..base("1", "10", Some("0.1"))
        };
        // 500 uncached × 2 + 1500 cached × 0.1, per million.
        let cost = cost_usd(&model, d("1"), usage(2_000, 1_500, 0, 0));
        assert_eq!(cost, Some(d("0.00115")));
    }

    #[test]
    fn cached_and_cache_write_tokens_in_a_tier_take_the_tiers_prices() {
        // 150k uncached × 6 + 50k cached × 0.6 + 10k written × 7.5 + 2k out × 22.5, per million.
        let cost = cost_usd(&sonnet(), d("1"), usage(210_000, 50_000, 10_000, 2_000));
        assert_eq!(cost, Some(d("1.05")));
    }

    #[test]
    fn group_ratio_multiplies_tier_prices_too() {
        let tiered = usage(210_000, 50_000, 10_000, 2_000);
        assert_eq!(cost_usd(&sonnet(), d("3"), tiered), Some(d("3.15")));
        assert_eq!(cost_usd(&sonnet(), d("0.85"), tiered), Some(d("0.8925")));
        assert_eq!(cost_usd(&sonnet(), d("0"), tiered), Some(d("0")));
    }

    #[test]
    fn tier_prices_stay_exact_to_18_places() {
        let model = ModelPrice {
            tiers: vec![PriceTier {
                cached_input: Some(d("0.0000000003")),
                cache_write: Some(d("0.0000000007")),
                ..tier(1, Some("0.0000000001"), Some("9.9999999999"))
            }],
            ..base("5", "5", None)
        };
        let cost = cost_usd(&model, d("0.01"), usage(4, 1, 1, 1));
        // (2 × 1e-10 + 3e-10 + 7e-10 + 9.9999999999) / 1e6 × 0.01 = 10.0000000011e-8
        assert_eq!(cost, Some(d("0.000000100000000011")));
        assert_eq!(cost.map(|c| c.scale()), Some(18));
    }

    #[test]
    fn cached_and_cache_write_above_input_is_no_cost() {
        assert_eq!(cost_usd(&sonnet(), d("1"), usage(100, 60, 41, 0)), None);
        assert_eq!(
            cost_usd(&sonnet(), d("1"), usage(100, 60, 40, 0)),
            Some(d("0.000168"))
        );
    }

    #[test]
    fn smallest_prices_stay_exact_at_scale_18() {
        let tiny = base("0.0000000001", "0", None);
        assert_eq!(
            cost_usd(&tiny, d("0.01"), usage(1, 0, 0, 0)),
            Some(d("0.000000000000000001"))
        );
    }

    #[test]
    fn absurd_counts_give_none_not_a_panic() {
        let absurd = [
            usage(i64::MAX, i64::MIN, 0, i64::MAX),
            usage(i64::MAX, 0, i64::MIN, 0),
            usage(-1, 0, 0, 0),
        ];
        for usage in absurd {
            assert_eq!(cost_usd(&flash(), d("3"), usage), None, "{usage:?}");
        }
    }

    #[test]
    fn a_cost_too_large_to_hold_exactly_is_none_not_rounded() {
        let dear = base("99.9999999999", "0", None);
        let usage = usage(crate::contract::MAX_TOKEN_COUNT - 1, 0, 0, 0);
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
        let padded = base(
            &format!("0.319{zeros}"),
            &format!("0.957{zeros}"),
            Some(&format!("0.0318{zeros}")),
        );
        let cost = cost_usd(&padded, d("1.00"), usage(10_000, 4_000, 0, 800));
        assert_eq!(cost, Some(d("0.0028068")));
        assert!(cost.is_some_and(|c| c.scale() <= 18));
    }
}

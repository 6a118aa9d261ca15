//! [`cost_usd`](super::cost_usd) in plain integer arithmetic, for the usual case.
//!
//! Every price, count and ratio of a real attempt is a non-negative decimal of a few digits,
//! and every step of the formula stays far inside a decimal's 96-bit mantissa and 28 places.
//! There `rust_decimal` computes each step exactly, so the result is a mantissa and a scale
//! that 128-bit integers give directly: a product's scale is the sum of its operands', a sum
//! is taken at the larger scale, and a zero operand makes a product zero at scale 0 and leaves
//! a sum the other operand. Anything else (a negative, a mantissa past 64 bits before a
//! product, a step past 96 bits or 28 places) is left to the decimal path, which decides
//! whether it is exact. Property tests check that both paths give the same mantissa and scale.

use rust_decimal::Decimal;

use super::Prices;

/// A non-negative decimal: `m × 10^-scale`, with `m < 2^96` and `scale <= 28`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fixed {
    m: u128,
    scale: u32,
}

const ZERO: Fixed = Fixed { m: 0, scale: 0 };
const OVERFLOW_U96: u128 = 1 << 96;
const MAX_SCALE: u32 = 28;

/// `POWERS_OF_TEN[n]` is 10ⁿ for every rescale within `MAX_SCALE`: `checked_pow` on `u128`
/// looped through library multiplications for each of three sums an attempt.
const POWERS_OF_TEN: [u128; MAX_SCALE as usize + 1] = {
    let mut powers = [1; MAX_SCALE as usize + 1];
    let mut n = 1;
    while n < powers.len() {
        powers[n] = powers[n - 1] * 10;
        n += 1;
    }
    powers
};

impl Fixed {
    /// `d.normalize()`, for a non-negative `d` whose mantissa fits 64 bits.
    fn normalized(d: Decimal) -> Option<Fixed> {
        if d.is_sign_negative() {
            return None;
        }
        let mut m = u64::try_from(d.mantissa()).ok()?;
        if m == 0 {
            return Some(ZERO);
        }
        let mut scale = d.scale();
        // 64-bit division by a constant is a multiply; a u128 one would be a library call.
        while scale > 0 && m % 10 == 0 {
            m /= 10;
            scale -= 1;
        }
        Some(Fixed {
            m: u128::from(m),
            scale,
        })
    }

    fn count(n: i64) -> Option<Fixed> {
        Some(Fixed {
            m: u128::from(u64::try_from(n).ok()?),
            scale: 0,
        })
    }

    fn mul(self, other: Fixed) -> Option<Fixed> {
        if self.m == 0 || other.m == 0 {
            return Some(ZERO);
        }
        let m = product(self.m, other.m)?;
        let scale = self.scale + other.scale;
        (m < OVERFLOW_U96 && scale <= MAX_SCALE).then_some(Fixed { m, scale })
    }

    fn add(self, other: Fixed) -> Option<Fixed> {
        if self.m == 0 {
            return Some(other);
        }
        if other.m == 0 {
            return Some(self);
        }
        let scale = self.scale.max(other.scale);
        let at_scale = |f: Fixed| {
            let factor = POWERS_OF_TEN.get(usize::try_from(scale - f.scale).ok()?)?;
            product(f.m, *factor)
        };
        let m = at_scale(self)?.checked_add(at_scale(other)?)?;
        (m < OVERFLOW_U96).then_some(Fixed { m, scale })
    }

    fn decimal(self) -> Option<Decimal> {
        Decimal::try_from_i128_with_scale(i128::try_from(self.m).ok()?, self.scale).ok()
    }
}

/// `a × b`, or `None` past `u128`. Operands of 64 bits cannot overflow and take one
/// multiplication; `checked_mul` on `u128` is a library call, and an attempt's cost made a dozen.
fn product(a: u128, b: u128) -> Option<u128> {
    if a >> 64 == 0 && b >> 64 == 0 {
        Some(a * b)
    } else {
        a.checked_mul(b)
    }
}

/// The cost the decimal path computes, when every step is certainly exact; `None` leaves it to
/// the decimal path. `counts` are `[uncached, cached, cache_write, output]`, already checked.
pub(super) fn cost_usd(prices: &Prices, group_ratio: Decimal, counts: [i64; 4]) -> Option<Decimal> {
    let [uncached, cached, cache_write, output] = counts;
    let term = |count: i64, price: Decimal| Fixed::count(count)?.mul(Fixed::normalized(price)?);
    let per_million = term(uncached, prices.input)?
        .add(term(cached, prices.cached_input)?)?
        .add(term(cache_write, prices.cache_write)?)?
        .add(term(output, prices.output)?)?;
    per_million
        .mul(Fixed { m: 1, scale: 6 })?
        .mul(Fixed::normalized(group_ratio)?)?
        .decimal()
}

#[cfg(test)]
mod tests {
    use super::super::cost_by_decimals as decimal_path;
    use super::*;
    use proptest::prelude::*;

    fn same(a: Option<Decimal>, b: Option<Decimal>) -> bool {
        match (a, b) {
            (Some(a), Some(b)) => {
                a.mantissa() == b.mantissa()
                    && a.scale() == b.scale()
                    && a.is_sign_negative() == b.is_sign_negative()
            }
            (None, None) => true,
            _ => false,
        }
    }

    /// Prices as snapshots write them (up to 10 places, zeros past the digits, zero itself)
    /// and, now and then, mantissas of any width.
    fn price() -> impl Strategy<Value = Decimal> {
        prop_oneof![
            4 => (0u64..10_000_000_000_000, 0u32..=10)
                .prop_map(|(m, s)| Decimal::from_i128_with_scale(i128::from(m), s)),
            1 => Just(Decimal::ZERO),
            1 => (0u32..=28).prop_map(|s| Decimal::from_i128_with_scale(0, s)),
            1 => (any::<u128>(), 0u32..=28).prop_map(|(m, s)| {
                Decimal::from_i128_with_scale((m >> 32) as i128, s)
            }),
            1 => (any::<u64>(), 0u32..=28)
                .prop_map(|(m, s)| Decimal::from_i128_with_scale(-(i128::from(m)), s)),
        ]
    }

    fn ratio() -> impl Strategy<Value = Decimal> {
        prop_oneof![
            4 => (0u64..1_000, 0u32..=2)
                .prop_map(|(m, s)| Decimal::from_i128_with_scale(i128::from(m), s)),
            1 => Just(Decimal::ONE),
            1 => price(),
        ]
    }

    fn count() -> impl Strategy<Value = i64> {
        prop_oneof![
            4 => 0i64..2_000_000,
            1 => Just(0i64),
            1 => 0i64..=i64::MAX,
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        /// Where the integer path answers, it answers exactly what the decimal path does.
        #[test]
        fn the_integer_path_agrees_with_the_decimal_path(
            input in price(), cached_input in price(), cache_write in price(), output in price(),
            group_ratio in ratio(),
            counts in [count(), count(), count(), count()],
        ) {
            let prices = Prices { input, output, cached_input, cache_write };
            if let Some(fast) = cost_usd(&prices, group_ratio, counts) {
                let slow = decimal_path(&prices, group_ratio, counts);
                prop_assert!(same(Some(fast), slow), "fast {fast:?} slow {slow:?}");
            }
        }
    }

    #[test]
    fn ordinary_prices_take_the_integer_path() {
        let d = |s: &str| s.parse::<Decimal>().expect("a decimal");
        let prices = Prices {
            input: d("0.0000030000"),
            output: d("15"),
            cached_input: d("0.30"),
            cache_write: d("3.75"),
        };
        let fast = cost_usd(&prices, d("1.00"), [1_200, 300, 0, 800]);
        assert_eq!(fast, Some(d("0.0120900036")));
        let slow = decimal_path(&prices, d("1.00"), [1_200, 300, 0, 800]);
        assert!(same(fast, slow));
        // Zero usage is zero at scale 0, as a decimal product of zero is.
        let zero = cost_usd(&prices, d("1.5"), [0; 4]).expect("integer path");
        assert!(zero.is_zero() && zero.scale() == 0);
        assert!(same(Some(zero), decimal_path(&prices, d("1.5"), [0; 4])));
    }

    #[test]
    fn the_table_holds_every_power_of_ten_up_to_the_largest_scale() {
        for (n, power) in (0u32..).zip(POWERS_OF_TEN) {
            assert_eq!(Some(power), 10u128.checked_pow(n), "10^{n}");
        }
    }

    #[test]
    fn a_product_of_64_bit_operands_is_exact_and_a_wider_one_is_checked() {
        let max = u128::from(u64::MAX);
        assert_eq!(product(max, max), max.checked_mul(max));
        assert_eq!(product(1 << 64, 3), Some(3 << 64));
        assert_eq!(product(1 << 64, 1 << 64), None);
        assert_eq!(product(0, u128::MAX), Some(0));
    }
}

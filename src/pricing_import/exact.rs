//! Exact decimal arithmetic on feed numbers.
//!
//! A float's shortest decimal form has up to 17 significant digits, so a product of two of them
//! (new-api's `model_ratio × 2 × completion_ratio`) can need 35: more than a `Decimal`'s 28, which
//! would round silently before the one rounding §3 allows. A `u128` mantissa holds 38.

use rust_decimal::Decimal;

/// A non-negative decimal, exactly `mantissa × 10^-scale`, with no trailing zeros in the mantissa.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Exact {
    mantissa: u128,
    scale: u32,
}

/// Exponents beyond this are no price or ratio; refusing them keeps the scale arithmetic small.
const MAX_EXPONENT: u32 = 60;

impl Exact {
    pub const ZERO: Exact = Exact {
        mantissa: 0,
        scale: 0,
    };

    pub fn integer(n: u128) -> Exact {
        Exact {
            mantissa: n,
            scale: 0,
        }
        .normalized()
    }

    /// Reads JSON number text (`0.1595`, `3`, `2.5e-06`, `1E-7`) or the same inside a decimal
    /// string, digit for digit.
    pub fn parse(text: &str) -> Result<Exact, String> {
        let bad = || format!("{text} is not a decimal number");
        let trimmed = text.trim();
        let (negative, unsigned) = match trimmed.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, trimmed.strip_prefix('+').unwrap_or(trimmed)),
        };
        let (digits_part, exponent) = match unsigned.split_once(['e', 'E']) {
            Some((digits, exp)) => {
                let (exp_negative, exp_digits) = match exp.strip_prefix('-') {
                    Some(rest) => (true, rest),
                    None => (false, exp.strip_prefix('+').unwrap_or(exp)),
                };
                if exp_digits.is_empty() || !exp_digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                let magnitude: u32 = exp_digits
                    .parse()
                    .ok()
                    .filter(|m| *m <= MAX_EXPONENT)
                    .ok_or_else(|| format!("{text} has an exponent beyond ±{MAX_EXPONENT}"))?;
                (
                    digits,
                    if exp_negative {
                        -(magnitude as i64)
                    } else {
                        magnitude as i64
                    },
                )
            }
            None => (unsigned, 0),
        };
        let (whole, fraction) = digits_part.split_once('.').unwrap_or((digits_part, ""));
        if whole.is_empty() && fraction.is_empty()
            || !whole
                .bytes()
                .chain(fraction.bytes())
                .all(|b| b.is_ascii_digit())
        {
            return Err(bad());
        }
        let too_long = || format!("{text} has more digits than can be computed exactly");
        let mut mantissa: u128 = 0;
        for digit in whole.bytes().chain(fraction.bytes()) {
            mantissa = mantissa
                .checked_mul(10)
                .and_then(|m| m.checked_add(u128::from(digit - b'0')))
                .ok_or_else(too_long)?;
        }
        let mut scale = fraction.len() as i64 - exponent;
        while scale < 0 {
            mantissa = mantissa.checked_mul(10).ok_or_else(too_long)?;
            scale += 1;
        }
        let value = Exact {
            mantissa,
            scale: u32::try_from(scale).map_err(|_| too_long())?,
        }
        .normalized();
        if negative && value.mantissa != 0 {
            return Err(format!("{text} is negative"));
        }
        Ok(value)
    }

    /// `self × other`, or `None` when the exact product has more digits than 38.
    pub fn checked_mul(self, other: Exact) -> Option<Exact> {
        Some(
            Exact {
                mantissa: self.mantissa.checked_mul(other.mantissa)?,
                scale: self.scale + other.scale,
            }
            .normalized(),
        )
    }

    /// Decimal places the value needs.
    pub fn places(self) -> u32 {
        self.scale
    }

    /// Rounds half-even to `places` when the value has more; `None` when even the rounded value
    /// does not fit a `Decimal`.
    pub fn round(self, places: u32) -> Option<Decimal> {
        if self.scale <= places {
            return to_decimal(self.mantissa, self.scale);
        }
        let drop = self.scale - places;
        let Some(divisor) = 10u128.checked_pow(drop) else {
            // 10^drop exceeds every u128, so the value is below half a unit of the last place.
            return Some(Decimal::ZERO);
        };
        let (quotient, remainder) = (self.mantissa / divisor, self.mantissa % divisor);
        let half = divisor / 2;
        let up = remainder > half || remainder == half && quotient % 2 == 1;
        to_decimal(quotient + u128::from(up), places)
    }

    fn normalized(mut self) -> Exact {
        if self.mantissa == 0 {
            return Exact::ZERO;
        }
        while self.scale > 0 && self.mantissa.is_multiple_of(10) {
            self.mantissa /= 10;
            self.scale -= 1;
        }
        self
    }
}

fn to_decimal(mantissa: u128, scale: u32) -> Option<Decimal> {
    let mantissa = i128::try_from(mantissa).ok()?;
    Decimal::try_from_i128_with_scale(mantissa, scale)
        .ok()
        .map(|d| d.normalize())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn exact(text: &str) -> Exact {
        Exact::parse(text).unwrap()
    }

    fn d(text: &str) -> Decimal {
        Decimal::from_str(text).unwrap()
    }

    #[test]
    fn parses_plain_and_scientific_forms_digit_for_digit() {
        assert_eq!(exact("0.1595").round(10), Some(d("0.1595")));
        assert_eq!(exact("2.5e-06").round(10), Some(d("0.0000025")));
        assert_eq!(exact("1E-7").round(10), Some(d("0.0000001")));
        assert_eq!(exact("1.5e+2").round(10), Some(d("150")));
        assert_eq!(exact("3").round(10), Some(d("3")));
        assert_eq!(exact("-0").round(10), Some(Decimal::ZERO));
        assert_eq!(exact("0.30000000000000004").places(), 17);
    }

    #[test]
    fn rejects_what_is_not_a_non_negative_decimal() {
        for text in [
            "", "-", ".", "1e", "1e+", "0x10", "1.2.3", "NaN", "abc", "1e99",
        ] {
            assert!(Exact::parse(text).is_err(), "{text:?}");
        }
        assert!(Exact::parse("-1").unwrap_err().contains("negative"));
    }

    #[test]
    fn products_keep_every_digit() {
        let two = Exact::integer(2);
        let input = exact("0.1595").checked_mul(two).unwrap();
        assert_eq!(input.round(10), Some(d("0.319")));
        // 35 significant digits: a Decimal would have rounded this product before we do.
        let long = exact("0.30000000000000004")
            .checked_mul(exact("0.10438871473354232"))
            .unwrap();
        assert_eq!(long.places(), 34);
        assert_eq!(long.round(10), Some(d("0.0313166144")));
    }

    #[test]
    fn rounds_half_even_only_past_the_places() {
        assert_eq!(exact("0.00000000005").round(10), Some(d("0")));
        assert_eq!(exact("0.00000000015").round(10), Some(d("0.0000000002")));
        assert_eq!(
            exact("0.000000000250000001").round(10),
            Some(d("0.0000000003"))
        );
        assert_eq!(exact("0.00000000025").round(10), Some(d("0.0000000002")));
        assert_eq!(exact("1e-60").round(10), Some(d("0")));
    }
}

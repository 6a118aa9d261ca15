//! Turning attempt rows into one Arrow batch of the `attempts` schema.
//!
//! Columns are filled straight from borrowed row fields, so a batch costs one copy of each
//! string into its Arrow buffer and nothing else per row.

use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Decimal128Builder, ListBuilder, PrimitiveBuilder, StringBuilder,
};
use arrow_array::types::{Date32Type, Int32Type, Int64Type};
use arrow_array::{ArrayRef, ArrowPrimitiveType, RecordBatch, TimestampMicrosecondArray};
use rust_decimal::{Decimal, RoundingStrategy};

use super::schema::{self, attempts_schema, MONEY_PRECISION, MONEY_SCALE};
use super::ParquetSinkError;
use crate::record::AttemptRow;

/// Builds one batch holding `rows` in order.
pub fn rows_to_batch(rows: &[AttemptRow]) -> Result<RecordBatch, ParquetSinkError> {
    let rows: Vec<&AttemptRow> = rows.iter().collect();
    batch_from_refs(&rows)
}

/// Same as [`rows_to_batch`] for rows picked out of a larger slice (one partition's share).
///
/// Columns are filled a tile of rows at a time: filled one whole column after another, a batch
/// of thousands of rows (some 500 bytes each) was read from memory once per column, and those
/// cache misses were most of the cost of a batch (BENCHMARKS.md, issue 18, twenty-first pass).
pub(super) fn batch_from_refs(rows: &[&AttemptRow]) -> Result<RecordBatch, ParquetSinkError> {
    let n = rows.len();
    let mut columns: Vec<Box<dyn Column<'_> + '_>> = vec![
        timestamps(n, |r| r.event_time),
        timestamps(n, |r| r.end_time),
        hex_ids(n, |r| &r.trace_id),
        hex_ids(n, |r| &r.span_id),
        strings(n, |r| Some(&r.request_id)),
        strings(n, |r| Some(&r.service_name)),
        strings(n, |r| r.task_type.as_deref()),
        strings(n, |r| r.billing_group.as_deref()),
        strings(n, |r| r.provider.as_deref()),
        primitives::<Int32Type, _>(n, |r| Some(r.attempt_index)),
        strings(n, |r| r.original_model.as_deref()),
        strings(n, |r| r.retry_model.as_deref()),
        strings(n, |r| r.response_model.as_deref()),
        strings(n, |r| r.original_family.as_deref()),
        strings(n, |r| r.retry_family.as_deref()),
        primitives::<Int64Type, _>(n, |r| r.input_tokens),
        primitives::<Int64Type, _>(n, |r| r.cached_input_tokens),
        primitives::<Int64Type, _>(n, |r| r.cache_write_input_tokens),
        primitives::<Int64Type, _>(n, |r| r.output_tokens),
        primitives::<Int64Type, _>(n, |r| r.output_cap),
        money(n, schema::PLANNED_ATTEMPT_USD, |r| r.planned_attempt_usd),
        money(n, schema::ACTUAL_ATTEMPT_USD, |r| r.actual_attempt_usd),
        money(n, schema::ESTIMATED_INCREMENTAL_USD, |r| {
            r.estimated_incremental_usd
        }),
        money(n, schema::CUMULATIVE_INCREMENTAL_USD, |r| {
            r.cumulative_incremental_usd
        }),
        money(n, schema::REMAINING_ENVELOPE_USD, |r| {
            r.remaining_envelope_usd
        }),
        money(n, schema::MAX_INCREMENTAL_USD, |r| r.max_incremental_usd),
        money(n, schema::GROUP_RATIO, |r| r.group_ratio),
        money(n, schema::SDK_ESTIMATED_INCREMENTAL_USD, |r| {
            r.sdk_estimated_incremental_usd
        }),
        money(n, schema::SDK_REMAINING_ENVELOPE_USD, |r| {
            r.sdk_remaining_envelope_usd
        }),
        primitives::<Int32Type, _>(n, |r| r.max_attempts_after_first),
        strings(n, |r| r.pricing_version.as_deref()),
        strings(n, |r| r.pricing_source.as_deref()),
        strings(n, |r| r.pricing_digest.as_deref()),
        primitives::<Date32Type, _>(n, |r| r.pricing_checked_at.map(|date| date.to_epoch_days())),
        strings(n, |r| Some(r.spend_class.as_str())),
        strings(n, |r| Some(r.decision.as_str())),
        strings(n, |r| Some(&r.decision_reason)),
        bools(n, |r| Some(r.audited)),
        strings(n, |r| r.unaudited_reason.map(|reason| reason.as_str())),
        strings(n, |r| r.error_type.as_deref()),
        strings(n, |r| r.sdk_decision_reason.as_deref()),
        Box::new(Violations(
            ListBuilder::with_capacity(StringBuilder::new(), n)
                .with_field(Arc::new(schema::violation_item_field())),
        )),
        bools(n, |r| r.output_reached_client),
        strings(n, |r| Some(r.attempt_source.as_str())),
        strings(n, |r| r.usage_source.map(|s| s.as_str())),
        strings(n, |r| r.output_cap_source.map(|s| s.as_str())),
        primitives::<Int64Type, _>(n, |r| r.price_tier_above_input_tokens),
        strings(n, |r| r.envelope_source.as_deref()),
    ];
    for tile in rows.chunks(TILE_ROWS) {
        for column in &mut columns {
            column.append(tile);
        }
    }
    let arrays = columns
        .into_iter()
        .map(|column| column.finish())
        .collect::<Result<Vec<ArrayRef>, _>>()?;
    Ok(RecordBatch::try_new(attempts_schema(), arrays)?)
}

/// Rows read for every column before the next: 64 rows of some 500 bytes stay in a core's
/// first-level cache.
const TILE_ROWS: usize = 64;

/// One column of a batch being filled.
trait Column<'a> {
    fn append(&mut self, rows: &[&'a AttemptRow]);
    fn finish(self: Box<Self>) -> Result<ArrayRef, ParquetSinkError>;
}

/// `value` is a row's nanoseconds; the column holds them truncated to microseconds.
struct Timestamps<F>(Vec<i64>, F);

fn timestamps<'a, F: Fn(&AttemptRow) -> i64 + 'a>(n: usize, value: F) -> Box<dyn Column<'a> + 'a> {
    Box::new(Timestamps(Vec::with_capacity(n), value))
}

impl<'a, F: Fn(&AttemptRow) -> i64> Column<'a> for Timestamps<F> {
    fn append(&mut self, rows: &[&'a AttemptRow]) {
        let value = &self.1;
        self.0
            .extend(rows.iter().map(|r| schema::timestamp_micros(value(r))));
    }

    fn finish(self: Box<Self>) -> Result<ArrayRef, ParquetSinkError> {
        Ok(Arc::new(
            TimestampMicrosecondArray::from(self.0).with_timezone(schema::TIMESTAMP_TZ),
        ))
    }
}

/// Integers and dates: one Arrow primitive a row, or null.
struct Primitives<T: ArrowPrimitiveType, F>(PrimitiveBuilder<T>, F);

fn primitives<'a, T: ArrowPrimitiveType, F: Fn(&AttemptRow) -> Option<T::Native> + 'a>(
    n: usize,
    value: F,
) -> Box<dyn Column<'a> + 'a> {
    Box::new(Primitives(PrimitiveBuilder::<T>::with_capacity(n), value))
}

impl<'a, T: ArrowPrimitiveType, F: Fn(&AttemptRow) -> Option<T::Native>> Column<'a>
    for Primitives<T, F>
{
    fn append(&mut self, rows: &[&'a AttemptRow]) {
        let value = &self.1;
        self.0
            .extend_from_iter_option(rows.iter().map(|r| value(r)));
    }

    fn finish(mut self: Box<Self>) -> Result<ArrayRef, ParquetSinkError> {
        Ok(Arc::new(self.0.finish()))
    }
}

struct Bools<F>(BooleanBuilder, F);

fn bools<'a, F: Fn(&AttemptRow) -> Option<bool> + 'a>(
    n: usize,
    value: F,
) -> Box<dyn Column<'a> + 'a> {
    Box::new(Bools(BooleanBuilder::with_capacity(n), value))
}

impl<'a, F: Fn(&AttemptRow) -> Option<bool>> Column<'a> for Bools<F> {
    fn append(&mut self, rows: &[&'a AttemptRow]) {
        for row in rows {
            self.0.append_option((self.1)(row));
        }
    }

    fn finish(mut self: Box<Self>) -> Result<ArrayRef, ParquetSinkError> {
        Ok(Arc::new(self.0.finish()))
    }
}

/// Bytes a text column reserves per row at first; it grows past that as a vector does.
const TEXT_BYTES_PER_ROW: usize = 16;

struct Strings<F>(StringBuilder, F);

fn strings<'a, F: Fn(&'a AttemptRow) -> Option<&'a str> + 'a>(
    n: usize,
    value: F,
) -> Box<dyn Column<'a> + 'a> {
    Box::new(Strings(
        StringBuilder::with_capacity(n, n * TEXT_BYTES_PER_ROW),
        value,
    ))
}

impl<'a, F: Fn(&'a AttemptRow) -> Option<&'a str>> Column<'a> for Strings<F> {
    fn append(&mut self, rows: &[&'a AttemptRow]) {
        for row in rows {
            self.0.append_option((self.1)(row));
        }
    }

    fn finish(mut self: Box<Self>) -> Result<ArrayRef, ParquetSinkError> {
        Ok(Arc::new(self.0.finish()))
    }
}

/// Ids as lowercase hex, encoded straight into the column.
struct HexIds<const N: usize, F>(StringBuilder, F);

fn hex_ids<'a, const N: usize, F: Fn(&AttemptRow) -> &[u8; N] + 'a>(
    n: usize,
    id: F,
) -> Box<dyn Column<'a> + 'a> {
    Box::new(HexIds::<N, F>(
        StringBuilder::with_capacity(n, n * N * 2),
        id,
    ))
}

impl<'a, const N: usize, F: Fn(&AttemptRow) -> &[u8; N]> Column<'a> for HexIds<N, F> {
    fn append(&mut self, rows: &[&'a AttemptRow]) {
        let mut buffer = [0u8; 32];
        for row in rows {
            self.0
                .append_value(crate::contract::id_hex_in((self.1)(row), &mut buffer));
        }
    }

    fn finish(mut self: Box<Self>) -> Result<ArrayRef, ParquetSinkError> {
        Ok(Arc::new(self.0.finish()))
    }
}

/// A value that does not fit the column is written as null rather than failing the batch: one
/// absurd number must not cost finance every other row of the request. The warning names the
/// span so the value can be found in the trace.
struct Money<F> {
    builder: Decimal128Builder,
    column: &'static str,
    value: F,
}

fn money<'a, F: Fn(&AttemptRow) -> Option<Decimal> + 'a>(
    n: usize,
    column: &'static str,
    value: F,
) -> Box<dyn Column<'a> + 'a> {
    Box::new(Money {
        builder: Decimal128Builder::with_capacity(n),
        column,
        value,
    })
}

impl<'a, F: Fn(&AttemptRow) -> Option<Decimal>> Column<'a> for Money<F> {
    fn append(&mut self, rows: &[&'a AttemptRow]) {
        for row in rows {
            let scaled = (self.value)(row).and_then(|amount| {
                let scaled = decimal_to_scaled_i128(amount);
                if scaled.is_none() {
                    tracing::warn!(
                        column = self.column,
                        value = %amount,
                        trace_id = %crate::contract::id_hex(&row.trace_id),
                        span_id = %crate::contract::id_hex(&row.span_id),
                        "money value does not fit decimal128(38, 18); writing null"
                    );
                }
                scaled
            });
            self.builder.append_option(scaled);
        }
    }

    fn finish(mut self: Box<Self>) -> Result<ArrayRef, ParquetSinkError> {
        Ok(Arc::new(
            self.builder
                .finish()
                .with_precision_and_scale(MONEY_PRECISION, MONEY_SCALE)?,
        ))
    }
}

struct Violations(ListBuilder<StringBuilder>);

impl<'a> Column<'a> for Violations {
    fn append(&mut self, rows: &[&'a AttemptRow]) {
        for row in rows {
            for violation in &row.violations {
                self.0.values().append_value(violation.as_str());
            }
            self.0.append(true);
        }
    }

    fn finish(mut self: Box<Self>) -> Result<ArrayRef, ParquetSinkError> {
        Ok(Arc::new(self.0.finish()))
    }
}

/// Converts a money value to the unscaled i128 of decimal128(38, 18), without passing through
/// floating point. `None` when the value does not fit 38 digits at scale 18.
///
/// rust_decimal allows up to 28 fractional digits; anything past 18 is rounded half-even (the
/// rounding finance tools assume) before rescaling.
pub fn decimal_to_scaled_i128(value: Decimal) -> Option<i128> {
    let target = MONEY_SCALE.unsigned_abs() as u32;
    let value = if value.scale() > target {
        value.round_dp_with_strategy(target, RoundingStrategy::MidpointNearestEven)
    } else {
        value
    };
    // A table rather than `checked_pow`, whose loop ran for each of nine amounts a row.
    let factor = *SCALE_FACTORS.get(usize::try_from(target.checked_sub(value.scale())?).ok()?)?;
    let mantissa = value.mantissa();
    // Amounts are small: below 2⁶⁴, times a factor below 2⁶⁰, the product fits 124 bits and
    // needs no checked multiply (a library call for i128, nine times a row).
    let scaled = if mantissa.unsigned_abs() >> 64 == 0 {
        mantissa * factor
    } else {
        mantissa.checked_mul(factor)?
    };
    (scaled.abs() < MONEY_LIMIT).then_some(scaled)
}

/// `SCALE_FACTORS[n]` is 10ⁿ, for every rescale to `MONEY_SCALE`.
const SCALE_FACTORS: [i128; MONEY_SCALE.unsigned_abs() as usize + 1] = {
    let mut factors = [1; MONEY_SCALE.unsigned_abs() as usize + 1];
    let mut n = 1;
    while n < factors.len() {
        factors[n] = factors[n - 1] * 10;
        n += 1;
    }
    factors
};

/// The first magnitude decimal128(`MONEY_PRECISION`, _) cannot hold.
const MONEY_LIMIT: i128 = 10_i128.pow(MONEY_PRECISION as u32);

/// The inverse of [`decimal_to_scaled_i128`]: the exact value of an unscaled decimal128(38, 18),
/// with trailing zeros dropped so that sums of it stay small. `None` past rust_decimal's 96 bits
/// (about 79 billion at scale 18).
pub fn scaled_i128_to_decimal(scaled: i128) -> Option<Decimal> {
    let scale = MONEY_SCALE.unsigned_abs() as u32;
    Decimal::try_from_i128_with_scale(scaled, scale)
        .ok()
        .map(|d| d.normalize())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn scaled(text: &str) -> Option<i128> {
        decimal_to_scaled_i128(Decimal::from_str(text).expect("test decimal parses"))
    }

    #[test]
    fn money_is_rescaled_to_18_digits_exactly() {
        assert_eq!(scaled("0.0028068"), Some(2_806_800_000_000_000));
        assert_eq!(scaled("-0.0012"), Some(-1_200_000_000_000_000));
        assert_eq!(scaled("0"), Some(0));
        assert_eq!(scaled("15"), Some(15_000_000_000_000_000_000));
        assert_eq!(scaled("0.000000000000000001"), Some(1));
    }

    #[test]
    fn money_past_18_digits_rounds_half_even() {
        assert_eq!(scaled("0.0000000000000000005"), Some(0));
        assert_eq!(scaled("0.0000000000000000015"), Some(2));
        assert_eq!(scaled("0.0000000000000000025"), Some(2));
        assert_eq!(scaled("-0.0000000000000000025"), Some(-2));
    }

    /// Every scale up to 18, by moving the decimal point in the text: the zeros appended are
    /// the factor the table holds.
    #[test]
    fn every_scale_up_to_18_is_rescaled_exactly() {
        for mantissa in [
            1_i128,
            -7,
            123_456_789,
            99_999_999_999_999_999_999,
            -(1 << 95),
            // Either side of the unchecked multiply's bound.
            u64::MAX as i128,
            -(u64::MAX as i128),
            1 << 64,
            -(1 << 64),
        ] {
            for scale in 0..=18_u32 {
                let value = Decimal::from_i128_with_scale(mantissa, scale);
                let text = format!("{mantissa}{}", "0".repeat(18 - scale as usize));
                let expected = text.parse::<i128>().ok().filter(|v| v.abs() < MONEY_LIMIT);
                assert_eq!(decimal_to_scaled_i128(value), expected, "{value}");
            }
        }
    }

    #[test]
    fn money_too_large_for_38_digits_is_none() {
        assert_eq!(scaled("79228162514264337593543950335"), None);
        assert_eq!(scaled("100000000000000000000"), None);
        assert_eq!(
            scaled("99999999999999999999"),
            Some(99_999_999_999_999_999_999_000_000_000_000_000_000)
        );
    }

    #[test]
    fn scaled_money_reads_back_exactly_without_trailing_zeros() {
        for text in ["0.0028068", "-0.0012", "0", "15", "0.000000000000000001"] {
            let back = scaled(text).and_then(scaled_i128_to_decimal);
            assert_eq!(back.map(|d| d.to_string()), Some(text.to_owned()), "{text}");
        }
        assert_eq!(scaled_i128_to_decimal(i128::MAX), None);
    }
}

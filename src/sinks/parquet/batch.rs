//! Turning attempt rows into one Arrow batch of the `attempts` schema.
//!
//! Columns are filled straight from borrowed row fields, so a batch costs one copy of each
//! string into its Arrow buffer and nothing else per row.

use std::sync::Arc;

use arrow_array::builder::{ListBuilder, StringBuilder};
use arrow_array::{
    ArrayRef, BooleanArray, Date32Array, Decimal128Array, Int32Array, Int64Array, RecordBatch,
    TimestampMicrosecondArray,
};
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
pub(super) fn batch_from_refs(rows: &[&AttemptRow]) -> Result<RecordBatch, ParquetSinkError> {
    let columns: Vec<ArrayRef> = vec![
        timestamps(rows, |r| r.event_time),
        timestamps(rows, |r| r.end_time),
        hex_ids(rows, |r| &r.trace_id),
        hex_ids(rows, |r| &r.span_id),
        strings(rows, |r| Some(&r.request_id)),
        strings(rows, |r| Some(&r.service_name)),
        strings(rows, |r| r.task_type.as_deref()),
        strings(rows, |r| r.billing_group.as_deref()),
        strings(rows, |r| r.provider.as_deref()),
        Arc::new(Int32Array::from_iter_values(
            rows.iter().map(|r| r.attempt_index),
        )),
        strings(rows, |r| r.original_model.as_deref()),
        strings(rows, |r| r.retry_model.as_deref()),
        strings(rows, |r| r.response_model.as_deref()),
        strings(rows, |r| r.original_family.as_deref()),
        strings(rows, |r| r.retry_family.as_deref()),
        int64s(rows, |r| r.input_tokens),
        int64s(rows, |r| r.cached_input_tokens),
        int64s(rows, |r| r.cache_write_input_tokens),
        int64s(rows, |r| r.output_tokens),
        int64s(rows, |r| r.output_cap),
        money(rows, schema::PLANNED_ATTEMPT_USD, |r| r.planned_attempt_usd)?,
        money(rows, schema::ACTUAL_ATTEMPT_USD, |r| r.actual_attempt_usd)?,
        money(rows, schema::ESTIMATED_INCREMENTAL_USD, |r| {
            r.estimated_incremental_usd
        })?,
        money(rows, schema::CUMULATIVE_INCREMENTAL_USD, |r| {
            r.cumulative_incremental_usd
        })?,
        money(rows, schema::REMAINING_ENVELOPE_USD, |r| {
            r.remaining_envelope_usd
        })?,
        money(rows, schema::MAX_INCREMENTAL_USD, |r| r.max_incremental_usd)?,
        money(rows, schema::GROUP_RATIO, |r| r.group_ratio)?,
        money(rows, schema::SDK_ESTIMATED_INCREMENTAL_USD, |r| {
            r.sdk_estimated_incremental_usd
        })?,
        money(rows, schema::SDK_REMAINING_ENVELOPE_USD, |r| {
            r.sdk_remaining_envelope_usd
        })?,
        Arc::new(Int32Array::from_iter(
            rows.iter().map(|r| r.max_attempts_after_first),
        )),
        strings(rows, |r| r.pricing_version.as_deref()),
        strings(rows, |r| r.pricing_source.as_deref()),
        strings(rows, |r| r.pricing_digest.as_deref()),
        Arc::new(Date32Array::from_iter(
            rows.iter()
                .map(|r| r.pricing_checked_at.map(|date| date.to_epoch_days())),
        )),
        strings(rows, |r| Some(r.spend_class.as_str())),
        strings(rows, |r| Some(r.decision.as_str())),
        strings(rows, |r| Some(&r.decision_reason)),
        Arc::new(BooleanArray::from_iter(
            rows.iter().map(|r| Some(r.audited)),
        )),
        strings(rows, |r| r.unaudited_reason.map(|reason| reason.as_str())),
        strings(rows, |r| r.error_type.as_deref()),
        strings(rows, |r| r.sdk_decision_reason.as_deref()),
        violations(rows),
        Arc::new(BooleanArray::from_iter(
            rows.iter().map(|r| r.output_reached_client),
        )),
        strings(rows, |r| Some(r.attempt_source.as_str())),
        strings(rows, |r| r.usage_source.map(|s| s.as_str())),
        strings(rows, |r| r.output_cap_source.map(|s| s.as_str())),
        int64s(rows, |r| r.price_tier_above_input_tokens),
        strings(rows, |r| r.envelope_source.as_deref()),
    ];
    Ok(RecordBatch::try_new(attempts_schema(), columns)?)
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

/// `value` is a row's nanoseconds; the column holds them truncated to microseconds.
fn timestamps(rows: &[&AttemptRow], value: impl Fn(&AttemptRow) -> i64) -> ArrayRef {
    Arc::new(
        TimestampMicrosecondArray::from_iter_values(
            rows.iter().map(|r| schema::timestamp_micros(value(r))),
        )
        .with_timezone(schema::TIMESTAMP_TZ),
    )
}

fn int64s(rows: &[&AttemptRow], value: impl Fn(&AttemptRow) -> Option<i64>) -> ArrayRef {
    Arc::new(Int64Array::from_iter(rows.iter().map(|r| value(r))))
}

fn strings<'a>(
    rows: &[&'a AttemptRow],
    value: impl Fn(&'a AttemptRow) -> Option<&'a str>,
) -> ArrayRef {
    let bytes = rows.iter().filter_map(|r| value(r)).map(str::len).sum();
    let mut builder = StringBuilder::with_capacity(rows.len(), bytes);
    for row in rows {
        builder.append_option(value(row));
    }
    Arc::new(builder.finish())
}

/// Ids as lowercase hex, encoded straight into the column.
fn hex_ids<const N: usize>(rows: &[&AttemptRow], id: impl Fn(&AttemptRow) -> &[u8; N]) -> ArrayRef {
    let mut builder = StringBuilder::with_capacity(rows.len(), rows.len() * N * 2);
    let mut buffer = [0u8; 32];
    for row in rows {
        builder.append_value(crate::contract::id_hex_in(id(row), &mut buffer));
    }
    Arc::new(builder.finish())
}

/// A value that does not fit the column is written as null rather than failing the batch: one
/// absurd number must not cost finance every other row of the request. The warning names the
/// span so the value can be found in the trace.
fn money(
    rows: &[&AttemptRow],
    column: &str,
    value: impl Fn(&AttemptRow) -> Option<Decimal>,
) -> Result<ArrayRef, ParquetSinkError> {
    let values = rows.iter().map(|row| {
        let amount = value(row)?;
        let scaled = decimal_to_scaled_i128(amount);
        if scaled.is_none() {
            tracing::warn!(
                column,
                value = %amount,
                trace_id = %crate::contract::id_hex(&row.trace_id),
                span_id = %crate::contract::id_hex(&row.span_id),
                "money value does not fit decimal128(38, 18); writing null"
            );
        }
        scaled
    });
    let array = Decimal128Array::from_iter(values)
        .with_precision_and_scale(MONEY_PRECISION, MONEY_SCALE)?;
    Ok(Arc::new(array))
}

fn violations(rows: &[&AttemptRow]) -> ArrayRef {
    let count: usize = rows.iter().map(|r| r.violations.len()).sum();
    let bytes = rows
        .iter()
        .flat_map(|r| &r.violations)
        .map(|v| v.as_str().len())
        .sum();
    let mut builder =
        ListBuilder::with_capacity(StringBuilder::with_capacity(count, bytes), rows.len())
            .with_field(Arc::new(schema::violation_item_field()));
    for row in rows {
        for violation in &row.violations {
            builder.values().append_value(violation.as_str());
        }
        builder.append(true);
    }
    Arc::new(builder.finish())
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

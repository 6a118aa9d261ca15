//! The `attempts` table layout (SPEC §5): every column name, once, and the Arrow schema.
//!
//! The column order follows the fields of [`AttemptRow`](crate::record::AttemptRow), so a reader
//! comparing the struct with a file sees the same sequence.

use std::sync::{Arc, OnceLock};

use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

pub const EVENT_TIME: &str = "event_time";
pub const END_TIME: &str = "end_time";
pub const TRACE_ID: &str = "trace_id";
pub const SPAN_ID: &str = "span_id";
pub const REQUEST_ID: &str = "request_id";
pub const SERVICE_NAME: &str = "service_name";
pub const TASK_TYPE: &str = "task_type";
pub const BILLING_GROUP: &str = "billing_group";
pub const PROVIDER: &str = "provider";
pub const ATTEMPT_INDEX: &str = "attempt_index";
pub const ORIGINAL_MODEL: &str = "original_model";
pub const RETRY_MODEL: &str = "retry_model";
pub const RESPONSE_MODEL: &str = "response_model";
pub const ORIGINAL_FAMILY: &str = "original_family";
pub const RETRY_FAMILY: &str = "retry_family";
pub const INPUT_TOKENS: &str = "input_tokens";
pub const CACHED_INPUT_TOKENS: &str = "cached_input_tokens";
pub const CACHE_WRITE_INPUT_TOKENS: &str = "cache_write_input_tokens";
pub const OUTPUT_TOKENS: &str = "output_tokens";
pub const OUTPUT_CAP: &str = "output_cap";
pub const PLANNED_ATTEMPT_USD: &str = "planned_attempt_usd";
pub const ACTUAL_ATTEMPT_USD: &str = "actual_attempt_usd";
pub const ESTIMATED_INCREMENTAL_USD: &str = "estimated_incremental_usd";
pub const CUMULATIVE_INCREMENTAL_USD: &str = "cumulative_incremental_usd";
pub const REMAINING_ENVELOPE_USD: &str = "remaining_envelope_usd";
pub const MAX_INCREMENTAL_USD: &str = "max_incremental_usd";
pub const GROUP_RATIO: &str = "group_ratio";
pub const SDK_ESTIMATED_INCREMENTAL_USD: &str = "sdk_estimated_incremental_usd";
pub const SDK_REMAINING_ENVELOPE_USD: &str = "sdk_remaining_envelope_usd";
pub const MAX_ATTEMPTS_AFTER_FIRST: &str = "max_attempts_after_first";
pub const PRICING_VERSION: &str = "pricing_version";
pub const PRICING_SOURCE: &str = "pricing_source";
pub const PRICING_DIGEST: &str = "pricing_digest";
pub const PRICING_CHECKED_AT: &str = "pricing_checked_at";
pub const SPEND_CLASS: &str = "spend_class";
pub const DECISION: &str = "decision";
pub const DECISION_REASON: &str = "decision_reason";
pub const AUDITED: &str = "audited";
pub const UNAUDITED_REASON: &str = "unaudited_reason";
pub const ERROR_TYPE: &str = "error_type";
pub const SDK_DECISION_REASON: &str = "sdk_decision_reason";
pub const VIOLATIONS: &str = "violations";
pub const OUTPUT_REACHED_CLIENT: &str = "output_reached_client";
pub const ATTEMPT_SOURCE: &str = "attempt_source";
pub const USAGE_SOURCE: &str = "usage_source";
pub const OUTPUT_CAP_SOURCE: &str = "output_cap_source";
pub const PRICE_TIER_ABOVE_INPUT_TOKENS: &str = "price_tier_above_input_tokens";
pub const ENVELOPE_SOURCE: &str = "envelope_source";

/// Name of the element field inside `violations`; "item" is what Arrow's own list builders use.
pub const LIST_ITEM: &str = "item";

/// Precision of every money column: the widest decimal128.
pub const MONEY_PRECISION: u8 = 38;
/// Scale of every money column: enough for per-token prices in USD without rounding.
pub const MONEY_SCALE: i8 = 18;

/// Timezone stamped on both timestamp columns, so readers do not guess local time.
pub const TIMESTAMP_TZ: &str = "UTC";

/// Columns whose values are unique per row; a dictionary only costs space there.
pub const HIGH_CARDINALITY_COLUMNS: &[&str] = &[TRACE_ID, SPAN_ID, REQUEST_ID];
/// Columns written without a dictionary but with statistics: an attempt's times are unique to
/// the microsecond in real traffic, so a dictionary filled its page limit within each row group
/// and fell back to plain, after interning every value (0.7% of `replay`, 5% of the file).
/// Their min/max prune by time.
pub const UNIQUE_TIME_COLUMNS: &[&str] = &[EVENT_TIME, END_TIME];

/// The money columns, in table order.
pub const MONEY_COLUMNS: &[&str] = &[
    PLANNED_ATTEMPT_USD,
    ACTUAL_ATTEMPT_USD,
    ESTIMATED_INCREMENTAL_USD,
    CUMULATIVE_INCREMENTAL_USD,
    REMAINING_ENVELOPE_USD,
    MAX_INCREMENTAL_USD,
    GROUP_RATIO,
    SDK_ESTIMATED_INCREMENTAL_USD,
    SDK_REMAINING_ENVELOPE_USD,
];

/// The data type of every money column.
pub fn money_type() -> DataType {
    DataType::Decimal128(MONEY_PRECISION, MONEY_SCALE)
}

/// The data type of `event_time` and `end_time`: microseconds, the unit every lake engine reads
/// (Spark refuses nanosecond timestamps unless told to read them as plain integers).
pub fn timestamp_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some(TIMESTAMP_TZ.into()))
}

/// Nanoseconds in one microsecond of the timestamp columns.
pub const NANOS_PER_MICRO: i64 = 1_000;

/// A span time in the columns' unit: its nanoseconds floored to the microsecond, so the value
/// stays within the `date` partition its untruncated start picked.
pub fn timestamp_micros(nanos: i64) -> i64 {
    nanos.div_euclid(NANOS_PER_MICRO)
}

/// The element field of `violations`: a list never holds a null violation.
pub fn violation_item_field() -> Field {
    Field::new(LIST_ITEM, DataType::Utf8, false)
}

/// The Arrow schema of the `attempts` table, built once and shared by every batch and file.
pub fn attempts_schema() -> SchemaRef {
    static SCHEMA: OnceLock<SchemaRef> = OnceLock::new();
    Arc::clone(SCHEMA.get_or_init(|| Arc::new(build_schema())))
}

fn build_schema() -> Schema {
    let utf8 = |name: &str, nullable: bool| Field::new(name, DataType::Utf8, nullable);
    let int64 = |name: &str| Field::new(name, DataType::Int64, true);
    let money = |name: &str| Field::new(name, money_type(), true);

    let mut fields = vec![
        Field::new(EVENT_TIME, timestamp_type(), false),
        Field::new(END_TIME, timestamp_type(), false),
        utf8(TRACE_ID, false),
        utf8(SPAN_ID, false),
        utf8(REQUEST_ID, false),
        utf8(SERVICE_NAME, false),
        utf8(TASK_TYPE, true),
        utf8(BILLING_GROUP, true),
        utf8(PROVIDER, true),
        Field::new(ATTEMPT_INDEX, DataType::Int32, false),
        utf8(ORIGINAL_MODEL, true),
        utf8(RETRY_MODEL, true),
        utf8(RESPONSE_MODEL, true),
        utf8(ORIGINAL_FAMILY, true),
        utf8(RETRY_FAMILY, true),
        int64(INPUT_TOKENS),
        int64(CACHED_INPUT_TOKENS),
        int64(CACHE_WRITE_INPUT_TOKENS),
        int64(OUTPUT_TOKENS),
        int64(OUTPUT_CAP),
    ];
    fields.extend(MONEY_COLUMNS.iter().map(|name| money(name)));
    fields.extend([
        Field::new(MAX_ATTEMPTS_AFTER_FIRST, DataType::Int32, true),
        utf8(PRICING_VERSION, true),
        utf8(PRICING_SOURCE, true),
        utf8(PRICING_DIGEST, true),
        Field::new(PRICING_CHECKED_AT, DataType::Date32, true),
        utf8(SPEND_CLASS, false),
        utf8(DECISION, false),
        utf8(DECISION_REASON, false),
        Field::new(AUDITED, DataType::Boolean, false),
        utf8(UNAUDITED_REASON, true),
        utf8(ERROR_TYPE, true),
        utf8(SDK_DECISION_REASON, true),
        Field::new(
            VIOLATIONS,
            DataType::List(Arc::new(violation_item_field())),
            false,
        ),
        Field::new(OUTPUT_REACHED_CLIENT, DataType::Boolean, true),
        utf8(ATTEMPT_SOURCE, false),
        utf8(USAGE_SOURCE, true),
        utf8(OUTPUT_CAP_SOURCE, true),
        int64(PRICE_TIER_ABOVE_INPUT_TOKENS),
        utf8(ENVELOPE_SOURCE, true),
    ]);
    Schema::new(fields)
}

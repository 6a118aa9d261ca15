//! Every metric family the collector exposes, in one place.
//!
//! Alert rules (`config/alerts.yml`) and dashboards key on these names, so a rename is a breaking
//! change for operators; keeping them together makes that visible in review. The order of
//! [`ALL`] is the order families appear on `/metrics`.

/// The Prometheus metric type written on the `# TYPE` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// One metric family: its name, type and the help text an operator sees next to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
}

const fn counter(name: &'static str, help: &'static str) -> Family {
    Family {
        name,
        kind: Kind::Counter,
        help,
    }
}

const fn gauge(name: &'static str, help: &'static str) -> Family {
    Family {
        name,
        kind: Kind::Gauge,
        help,
    }
}

pub const LABEL_TRANSPORT: &str = "transport";
pub const LABEL_OUTCOME: &str = "outcome";
pub const LABEL_DECISION: &str = "decision";
pub const LABEL_SPEND_CLASS: &str = "spend_class";
pub const LABEL_TASK_TYPE: &str = "task_type";
pub const LABEL_BILLING_GROUP: &str = "billing_group";
pub const LABEL_VIOLATION: &str = "violation";
pub const LABEL_ALLOWED: &str = "allowed";

pub const SPANS_RECEIVED: Family = counter(
    "retry_spend_spans_received_total",
    "Spans accepted from OTLP clients (or read by replay), by transport.",
);
pub const EXPORT_REQUESTS: Family = counter(
    "retry_spend_export_requests_total",
    "OTLP export requests answered, by transport and outcome.",
);
pub const DUPLICATE_SPANS: Family = counter(
    "retry_spend_duplicate_spans_total",
    "Spans dropped because a span with the same trace and span id was already held.",
);
pub const LATE_ATTEMPTS: Family = counter(
    "retry_spend_late_attempts_total",
    "Attempt spans that arrived after their request had already been evaluated.",
);
pub const REQUESTS_PENDING: Family = gauge(
    "retry_spend_requests_pending",
    "Requests held in memory waiting for more attempts.",
);
pub const REQUESTS_PENDING_LIMIT: Family = gauge(
    "retry_spend_requests_pending_limit",
    "Configured cap on pending requests; beyond it the oldest are evaluated early.",
);
pub const REQUESTS_EVICTED: Family = counter(
    "retry_spend_requests_evicted_total",
    "Requests evaluated early because the pending request cap was reached.",
);
pub const ATTEMPTS: Family = counter(
    "retry_spend_attempts_total",
    "Evaluated attempts, by decision, spend class, task type and billing group.",
);
pub const INCREMENTAL_USD: Family = counter(
    "retry_spend_incremental_usd_total",
    "Sum of the known estimated incremental USD of retries (attempt index > 0), by spend class.",
);
pub const UNAUDITED_ATTEMPTS: Family = counter(
    "retry_spend_unaudited_attempts_total",
    "Retries (attempt index > 0) the collector could not audit.",
);
pub const LABEL_VALUES_CAPPED: Family = counter(
    "retry_spend_label_values_capped_total",
    "Attempts counted under task_type or billing_group `_other` because the label already had its cap of distinct values.",
);
pub const VIOLATIONS: Family = counter(
    "retry_spend_violations_total",
    "Violations found on evaluated attempts, by violation.",
);
pub const ROWS_WRITTEN: Family = counter(
    "retry_spend_rows_written_total",
    "Attempt rows written to the Parquet sink.",
);
pub const LAST_WRITE_TIMESTAMP: Family = gauge(
    "retry_spend_last_write_timestamp_seconds",
    "Unix time of the last successful Parquet write of at least one row; 0 before the first.",
);
pub const PARQUET_FILES: Family = counter(
    "retry_spend_parquet_files_total",
    "Parquet files completed and renamed into place.",
);
pub const SINK_ERRORS: Family = counter(
    "retry_spend_sink_errors_total",
    "Errors writing the Parquet sink.",
);
pub const FORWARD_SPANS: Family = counter(
    "retry_spend_forward_spans_total",
    "Spans forwarded to the downstream OTLP endpoint.",
);
pub const FORWARD_FAILURES: Family = counter(
    "retry_spend_forward_failures_total",
    "Failed export calls to the downstream OTLP endpoint.",
);
pub const FORWARD_DROPPED_SPANS: Family = counter(
    "retry_spend_forward_dropped_spans_total",
    "Spans given up on and never forwarded downstream.",
);
pub const DECISIONS: Family = counter(
    "retry_spend_decisions_total",
    "Answers of the decision service (POST /v1/retry-decision, RetryDecisions/Decide), by \
     decision and whether the retry was allowed.",
);

/// Every family, in exposition order: intake, grouping, evaluation, Parquet, forwarding,
/// decisions.
pub const ALL: &[Family] = &[
    SPANS_RECEIVED,
    EXPORT_REQUESTS,
    DUPLICATE_SPANS,
    LATE_ATTEMPTS,
    REQUESTS_PENDING,
    REQUESTS_PENDING_LIMIT,
    REQUESTS_EVICTED,
    ATTEMPTS,
    INCREMENTAL_USD,
    UNAUDITED_ATTEMPTS,
    LABEL_VALUES_CAPPED,
    VIOLATIONS,
    ROWS_WRITTEN,
    LAST_WRITE_TIMESTAMP,
    PARQUET_FILES,
    SINK_ERRORS,
    FORWARD_SPANS,
    FORWARD_FAILURES,
    FORWARD_DROPPED_SPANS,
    DECISIONS,
];

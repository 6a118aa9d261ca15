//! The collector's counters and gauges, and their rendering for `/metrics`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use rust_decimal::Decimal;

use super::exposition::Exposition;
use super::names::{self, Family};
use crate::record::{AttemptRow, Decision};

/// One counter per (decision, allowed): the decision service counts without a lock or an
/// allocation, as it answers on the retry path of a user's request.
type DecisionCounters = [[AtomicU64; 2]; Decision::ALL.len()];

/// Every metric the collector exposes, shared as `Arc<Metrics>` by receivers, the pipeline and
/// the sinks.
///
/// Plain counters are atomics because they are bumped from several tasks. Labelled families sit
/// behind a mutex: they are updated once per export request or per batch of rows, never per
/// span, so the lock is cheap and a `BTreeMap` gives `/metrics` a stable series order for free.
#[derive(Debug, Default)]
pub struct Metrics {
    spans_received: Mutex<BTreeMap<&'static str, u64>>,
    export_requests: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    duplicate_spans: AtomicU64,
    late_attempts: AtomicU64,
    requests_pending: AtomicU64,
    requests_pending_limit: AtomicU64,
    requests_evicted: AtomicU64,
    evaluated: Mutex<EvaluatedTotals>,
    rows_written: AtomicU64,
    /// Milliseconds rather than seconds so two writes in the same second still move it.
    last_write_unix_millis: AtomicU64,
    parquet_files: AtomicU64,
    sink_errors: AtomicU64,
    forward_spans: AtomicU64,
    forward_failures: AtomicU64,
    forward_dropped_spans: AtomicU64,
    /// Distinct values `task_type` and `billing_group` may each take; 0 means the default.
    label_values_cap: AtomicU64,
    decisions: DecisionCounters,
}

/// Distinct values a client-supplied label keeps before the rest are counted as `_other`: both
/// come from spans, and a client must not be able to grow `/metrics` without bound.
pub const DEFAULT_LABEL_VALUES: usize = 100;
/// The label value that stands for every value past the cap.
pub const OTHER_LABEL_VALUE: &str = "_other";

/// The families derived from evaluated rows, under one lock so a scrape never sees a batch's
/// attempts counted without its dollars.
#[derive(Debug, Default)]
struct EvaluatedTotals {
    attempts: BTreeMap<AttemptKey, u64>,
    incremental_usd: BTreeMap<&'static str, Decimal>,
    unaudited_retries: u64,
    violations: BTreeMap<&'static str, u64>,
    task_types: std::collections::BTreeSet<String>,
    billing_groups: std::collections::BTreeSet<String>,
    capped: u64,
}

/// `value` itself while the label has room for it (or already has it), else `_other`, for
/// `attempts` attempts.
fn capped_label(
    seen: &mut std::collections::BTreeSet<String>,
    value: &str,
    cap: usize,
    attempts: u64,
    capped: &mut u64,
) -> String {
    if value.is_empty() || seen.contains(value) {
        return value.to_owned();
    }
    if seen.len() < cap {
        seen.insert(value.to_owned());
        return value.to_owned();
    }
    *capped += attempts;
    OTHER_LABEL_VALUE.to_owned()
}

/// [`AttemptKey`] before the caps, borrowed from a batch's rows.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct BatchLabels<'a> {
    decision: &'static str,
    spend_class: &'static str,
    task_type: &'a str,
    billing_group: &'a str,
}

/// The labels of `retry_spend_attempts_total`, in label order so the map sorts like the output.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct AttemptKey {
    decision: &'static str,
    spend_class: &'static str,
    task_type: String,
    billing_group: String,
}

impl Metrics {
    pub fn new() -> Arc<Metrics> {
        Arc::new(Metrics::default())
    }

    /// Counts a batch of evaluated attempts: decisions, retry dollars, unaudited retries and
    /// violations. Only retries (attempt index > 0) carry incremental spend or count as
    /// unaudited; a first attempt is the base cost the retry envelope does not cover.
    pub fn record_rows(&self, rows: &[AttemptRow]) {
        // A batch's rows share a handful of label sets: each set is counted here first and
        // enters the shared map once, with the labels' owned strings made once, not per row.
        let mut sets: Vec<(BatchLabels<'_>, u64)> = Vec::new();
        let mut index: std::collections::HashMap<BatchLabels<'_>, usize, ahash::RandomState> =
            std::collections::HashMap::default();
        for row in rows {
            let labels = BatchLabels {
                decision: row.decision.as_str(),
                spend_class: row.spend_class.as_str(),
                task_type: row.task_type.as_deref().unwrap_or_default(),
                billing_group: row.billing_group.as_deref().unwrap_or_default(),
            };
            match index.entry(labels) {
                std::collections::hash_map::Entry::Occupied(at) => sets[*at.get()].1 += 1,
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(sets.len());
                    sets.push((labels, 1));
                }
            }
        }
        let cap = self.label_values_cap();
        let mut totals = lock(&self.evaluated);
        let totals = &mut *totals;
        // In order of first appearance, so the labels' caps admit values as row by row would.
        for (labels, count) in sets {
            let key = AttemptKey {
                decision: labels.decision,
                spend_class: labels.spend_class,
                task_type: capped_label(
                    &mut totals.task_types,
                    labels.task_type,
                    cap,
                    count,
                    &mut totals.capped,
                ),
                billing_group: capped_label(
                    &mut totals.billing_groups,
                    labels.billing_group,
                    cap,
                    count,
                    &mut totals.capped,
                ),
            };
            *totals.attempts.entry(key).or_default() += count;
        }
        for row in rows {
            for violation in &row.violations {
                *totals.violations.entry(violation.as_str()).or_default() += 1;
            }
            if row.attempt_index > 0 {
                if let Some(usd) = row.estimated_incremental_usd {
                    let sum = totals
                        .incremental_usd
                        .entry(row.spend_class.as_str())
                        .or_default();
                    // Saturating: 7.9e28 USD is not a real figure, and a panic would take the
                    // collector down with every buffered request.
                    *sum = sum.saturating_add(usd);
                }
                if !row.audited {
                    totals.unaudited_retries += 1;
                }
            }
        }
    }

    /// Caps the distinct values of `task_type` and `billing_group` (`telemetry.max_label_values`).
    pub fn set_label_values_cap(&self, cap: usize) {
        self.label_values_cap.store(cap as u64, Ordering::Relaxed);
    }

    fn label_values_cap(&self) -> usize {
        match self.label_values_cap.load(Ordering::Relaxed) {
            0 => DEFAULT_LABEL_VALUES,
            n => usize::try_from(n).unwrap_or(usize::MAX),
        }
    }

    /// Counts spans accepted on `transport` (`grpc`, `http`, `replay`).
    pub fn spans_received(&self, transport: &'static str, n: u64) {
        *lock(&self.spans_received).entry(transport).or_default() += n;
    }

    /// Counts one answered export request by its `outcome` (`ok`, `invalid`, `too_large`,
    /// `unsupported_media_type`, `unavailable`).
    pub fn export_request(&self, transport: &'static str, outcome: &'static str) {
        *lock(&self.export_requests)
            .entry((transport, outcome))
            .or_default() += 1;
    }

    /// Counts rows the Parquet sink wrote and, when there were any, stamps the time: a writer
    /// that keeps "succeeding" with nothing to write must still look stalled to the alert.
    pub fn rows_written(&self, n: u64) {
        self.rows_written.fetch_add(n, Ordering::Relaxed);
        if n == 0 {
            return;
        }
        // A clock before 1970 leaves the stamp alone rather than inventing one.
        if let Ok(since_epoch) = SystemTime::now().duration_since(UNIX_EPOCH) {
            let millis = u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX);
            // fetch_max: two sink tasks finishing out of order never move the stamp back.
            self.last_write_unix_millis
                .fetch_max(millis, Ordering::Relaxed);
        }
    }

    pub fn parquet_file_completed(&self) {
        self.parquet_files.fetch_add(1, Ordering::Relaxed);
    }

    pub fn set_requests_pending(&self, n: u64) {
        self.requests_pending.store(n, Ordering::Relaxed);
    }

    /// Publishes the configured pending request cap, so alert rules can compare against it
    /// without repeating the collector's configuration.
    /// One shard's pending count went from `before` to `after`.
    pub fn adjust_requests_pending(&self, before: u64, after: u64) {
        if after >= before {
            self.requests_pending
                .fetch_add(after - before, Ordering::Relaxed);
        } else {
            self.requests_pending
                .fetch_sub(before - after, Ordering::Relaxed);
        }
    }

    pub fn set_requests_pending_limit(&self, n: u64) {
        self.requests_pending_limit.store(n, Ordering::Relaxed);
    }

    /// Counts requests evaluated early because the pending cap was hit.
    pub fn requests_evicted(&self, n: u64) {
        self.requests_evicted.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts attempts that arrived after their request had been evaluated.
    pub fn late_attempts(&self, n: u64) {
        self.late_attempts.fetch_add(n, Ordering::Relaxed);
    }

    pub fn duplicate_spans(&self, n: u64) {
        self.duplicate_spans.fetch_add(n, Ordering::Relaxed);
    }

    pub fn spans_forwarded(&self, n: u64) {
        self.forward_spans.fetch_add(n, Ordering::Relaxed);
    }

    pub fn forward_failures(&self, n: u64) {
        self.forward_failures.fetch_add(n, Ordering::Relaxed);
    }

    pub fn forward_spans_dropped(&self, n: u64) {
        self.forward_dropped_spans.fetch_add(n, Ordering::Relaxed);
    }

    pub fn sink_errors(&self, n: u64) {
        self.sink_errors.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts one answer of the decision service.
    pub fn decision(&self, decision: Decision, allowed: bool) {
        self.decisions[decision as usize][usize::from(allowed)].fetch_add(1, Ordering::Relaxed);
    }

    /// The `/metrics` body: every family with its HELP and TYPE lines, series sorted by label
    /// values. Labelled families without any series yet show only HELP and TYPE.
    pub fn render(&self) -> String {
        let mut out = Exposition::default();

        out.family(&names::SPANS_RECEIVED);
        for (transport, n) in lock(&self.spans_received).iter() {
            out.sample(
                &names::SPANS_RECEIVED,
                &[(names::LABEL_TRANSPORT, transport)],
                &n.to_string(),
            );
        }
        out.family(&names::EXPORT_REQUESTS);
        for ((transport, outcome), n) in lock(&self.export_requests).iter() {
            out.sample(
                &names::EXPORT_REQUESTS,
                &[
                    (names::LABEL_TRANSPORT, transport),
                    (names::LABEL_OUTCOME, outcome),
                ],
                &n.to_string(),
            );
        }
        single(&mut out, &names::DUPLICATE_SPANS, &self.duplicate_spans);
        single(&mut out, &names::LATE_ATTEMPTS, &self.late_attempts);
        single(&mut out, &names::REQUESTS_PENDING, &self.requests_pending);
        single(
            &mut out,
            &names::REQUESTS_PENDING_LIMIT,
            &self.requests_pending_limit,
        );
        single(&mut out, &names::REQUESTS_EVICTED, &self.requests_evicted);

        self.render_evaluated(&mut out);

        single(&mut out, &names::ROWS_WRITTEN, &self.rows_written);
        out.single(
            &names::LAST_WRITE_TIMESTAMP,
            &unix_seconds(self.last_write_unix_millis.load(Ordering::Relaxed)),
        );
        single(&mut out, &names::PARQUET_FILES, &self.parquet_files);
        single(&mut out, &names::SINK_ERRORS, &self.sink_errors);
        single(&mut out, &names::FORWARD_SPANS, &self.forward_spans);
        single(&mut out, &names::FORWARD_FAILURES, &self.forward_failures);
        single(
            &mut out,
            &names::FORWARD_DROPPED_SPANS,
            &self.forward_dropped_spans,
        );
        self.render_decisions(&mut out);
        out.finish()
    }

    fn render_evaluated(&self, out: &mut Exposition) {
        let totals = lock(&self.evaluated);

        out.family(&names::ATTEMPTS);
        for (key, n) in &totals.attempts {
            out.sample(
                &names::ATTEMPTS,
                &[
                    (names::LABEL_DECISION, key.decision),
                    (names::LABEL_SPEND_CLASS, key.spend_class),
                    (names::LABEL_TASK_TYPE, &key.task_type),
                    (names::LABEL_BILLING_GROUP, &key.billing_group),
                ],
                &n.to_string(),
            );
        }
        out.family(&names::INCREMENTAL_USD);
        for (spend_class, usd) in &totals.incremental_usd {
            // Exact decimal digits, never through f64; normalize drops the trailing zeros a
            // sum of differently scaled prices accumulates.
            out.sample(
                &names::INCREMENTAL_USD,
                &[(names::LABEL_SPEND_CLASS, spend_class)],
                &usd.normalize().to_string(),
            );
        }
        out.single(
            &names::UNAUDITED_ATTEMPTS,
            &totals.unaudited_retries.to_string(),
        );
        out.single(&names::LABEL_VALUES_CAPPED, &totals.capped.to_string());
        out.family(&names::VIOLATIONS);
        for (violation, n) in &totals.violations {
            out.sample(
                &names::VIOLATIONS,
                &[(names::LABEL_VIOLATION, violation)],
                &n.to_string(),
            );
        }
    }

    fn render_decisions(&self, out: &mut Exposition) {
        out.family(&names::DECISIONS);
        let mut series: Vec<(&str, &str, u64)> = Decision::ALL
            .iter()
            .flat_map(|&decision| {
                [false, true].map(|allowed| {
                    let n = self.decisions[decision as usize][usize::from(allowed)]
                        .load(Ordering::Relaxed);
                    (decision.as_str(), if allowed { "true" } else { "false" }, n)
                })
            })
            .filter(|(_, _, n)| *n > 0)
            .collect();
        series.sort_unstable();
        for (decision, allowed, n) in series {
            out.sample(
                &names::DECISIONS,
                &[
                    (names::LABEL_DECISION, decision),
                    (names::LABEL_ALLOWED, allowed),
                ],
                &n.to_string(),
            );
        }
    }
}

fn single(out: &mut Exposition, family: &Family, value: &AtomicU64) {
    out.single(family, &value.load(Ordering::Relaxed).to_string());
}

/// Milliseconds since the epoch as decimal seconds (`1757412345.678`), `0` before any write.
fn unix_seconds(millis: u64) -> String {
    if millis == 0 {
        return "0".to_owned();
    }
    format!("{}.{:03}", millis / 1000, millis % 1000)
}

/// Counters stay meaningful after a panic elsewhere; refusing to serve them would hide the very
/// collector that needs looking at.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

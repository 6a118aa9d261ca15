//! `report`: the finance view of the `attempts` table (SPEC §5), read back from a local output
//! or an object store: attempts and incremental spend by month × task type × spend class, and
//! the requests that spent the most on retries.
//!
//! [`mod@read`] lists and decodes the files, newest first; [`Report`] adds rows up (pure, no I/O),
//! leaving out the copies of an attempt that older files hold ([`dedup`]); [`mod@format`] prints
//! the result. Money is summed as `rust_decimal` straight from the decimal128 columns,
//! never through a float, so every USD figure is exact.

pub mod dedup;
pub mod format;
pub mod read;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};

use chrono::Datelike;
use rust_decimal::prelude::RoundingStrategy;
use rust_decimal::Decimal;

use crate::record::{AttemptRow, Decision, SpendClass};

use dedup::Dedup;
pub use format::ReportFormat;
pub use read::{read, ReportError};

/// How many top requests `report` lists unless told otherwise.
pub const DEFAULT_TOP: usize = 10;

/// Decimal places of the unaudited share.
pub const SHARE_PLACES: u32 = 4;

/// The columns of one attempt row the report reads; everything else in the table is ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportRow {
    /// Span start, nanoseconds since the Unix epoch (UTC): the column the partition date comes from.
    pub event_time: i64,
    pub trace_id: String,
    pub span_id: String,
    pub request_id: String,
    pub service_name: String,
    pub task_type: Option<String>,
    pub attempt_index: i32,
    pub spend_class: String,
    pub decision: String,
    pub audited: bool,
    pub estimated_incremental_usd: Option<Decimal>,
}

impl ReportRow {
    /// Retries and fallbacks: the rows whose estimate is incremental spend (SPEC §4 gives attempt 0
    /// an estimate of 0; the replay summary and the metrics count only these rows too).
    fn is_retry(&self) -> bool {
        self.attempt_index > 0
    }

    /// The row's incremental USD: its estimate when it is a retry whose estimate is known.
    fn incremental_usd(&self) -> Option<Decimal> {
        self.estimated_incremental_usd.filter(|_| self.is_retry())
    }

    fn is_over_envelope(&self) -> bool {
        self.decision == Decision::OverEnvelope.as_str()
    }
}

impl From<&AttemptRow> for ReportRow {
    fn from(row: &AttemptRow) -> Self {
        ReportRow {
            event_time: row.event_time,
            trace_id: crate::contract::id_hex(&row.trace_id),
            span_id: crate::contract::id_hex(&row.span_id),
            request_id: row.request_id.to_string(),
            service_name: row.service_name.to_string(),
            task_type: row.task_type.as_deref().map(str::to_owned),
            attempt_index: row.attempt_index,
            spend_class: row.spend_class.as_str().to_owned(),
            decision: row.decision.as_str().to_owned(),
            audited: row.audited,
            estimated_incremental_usd: row.estimated_incremental_usd,
        }
    }
}

/// A calendar month, UTC, of the span start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Month {
    pub year: i32,
    pub month: u32,
}

impl Month {
    pub fn of(event_time: i64) -> Month {
        let date = chrono::DateTime::from_timestamp_nanos(event_time).date_naive();
        Month {
            year: date.year(),
            month: date.month(),
        }
    }
}

impl std::fmt::Display for Month {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:04}-{:02}", self.year, self.month)
    }
}

/// A spend class as written, ordered as SPEC §4 lists them (base, retry, fallback, drift,
/// unknown); a value this version does not know sorts after them, by name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SpendClassName(pub String);

impl SpendClassName {
    fn rank(&self) -> usize {
        SpendClass::ALL
            .iter()
            .position(|c| c.as_str() == self.0)
            .unwrap_or(SpendClass::ALL.len())
    }
}

impl Ord for SpendClassName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.rank(), &self.0).cmp(&(other.rank(), &other.0))
    }
}

impl PartialOrd for SpendClassName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// One line of the summary: rows of one month, task type (`None`: the row has none) and spend
/// class.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKey {
    pub month: Month,
    pub task_type: Option<String>,
    pub spend_class: SpendClassName,
}

/// What is added up per summary line and per request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    /// Rows.
    pub attempts: u64,
    /// Sum of `estimated_incremental_usd` over rows with `attempt_index` > 0 (nulls skipped).
    pub incremental_usd: Decimal,
    /// The same sum over rows whose `decision` is `over_envelope`.
    pub over_envelope_usd: Decimal,
    /// Rows with `attempt_index` > 0 whose `estimated_incremental_usd` is null: spend the USD
    /// figures cannot include.
    pub unpriced_retries: u64,
    /// Rows with `audited` false.
    pub unaudited: u64,
}

impl Totals {
    fn add(&mut self, row: &ReportRow) -> Result<(), Overflow> {
        self.attempts += 1;
        if !row.audited {
            self.unaudited += 1;
        }
        if row.is_retry() && row.estimated_incremental_usd.is_none() {
            self.unpriced_retries += 1;
        }
        if let Some(usd) = row.incremental_usd() {
            self.incremental_usd = self.incremental_usd.checked_add(usd).ok_or(Overflow)?;
            if row.is_over_envelope() {
                self.over_envelope_usd = self.over_envelope_usd.checked_add(usd).ok_or(Overflow)?;
            }
        }
        Ok(())
    }

    /// Unaudited rows / attempts, rounded half away from zero to [`SHARE_PLACES`] places (the
    /// rounding of spreadsheets and SQL `round`); 0 without attempts.
    pub fn unaudited_share(&self) -> Decimal {
        let mut share = match self.attempts {
            0 => Decimal::ZERO,
            n => (Decimal::from(self.unaudited) / Decimal::from(n))
                .round_dp_with_strategy(SHARE_PLACES, RoundingStrategy::MidpointAwayFromZero),
        };
        // Fixed places, so that 0 and 1 print as 0.0000 and 1.0000 like every other share.
        share.rescale(SHARE_PLACES);
        share
    }
}

/// A sum past what a decimal holds exactly (about 79 billion USD at 18 places).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overflow;

/// One request, identified as SPEC §2 groups them: (trace id, request id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestLine {
    pub trace_id: String,
    pub request_id: String,
    /// `service_name` and `task_type` of its first row by (attempt index, start, span id).
    pub service_name: String,
    pub task_type: Option<String>,
    /// Earliest span start of its rows, ns since the epoch.
    pub started: i64,
    /// Rows with `attempt_index` > 0.
    pub retries: u64,
    pub totals: Totals,
}

#[derive(Debug, Clone)]
struct RequestState {
    first: (i32, i64, String),
    line: RequestLine,
}

/// The running aggregation. Rows may come in any order within a file; files come newest first
/// (by modification time, then name), each announced by [`begin_file`](Self::begin_file), so
/// that an attempt written to several files is counted once, from the newest ([`dedup`]).
#[derive(Debug, Default)]
pub struct Report {
    groups: BTreeMap<GroupKey, Totals>,
    requests: HashMap<(String, String), RequestState>,
    total: Totals,
    dedup: Dedup,
    /// Files begun.
    pub files: usize,
    /// Rows left out: their (`trace_id`, `span_id`) is in a newer file, whose rows count.
    pub duplicates: u64,
}

impl Report {
    /// The rows added next come from another file, older than those before it.
    pub fn begin_file(&mut self) {
        if self.files > 0 {
            self.dedup.next_file();
        }
        self.files += 1;
    }

    /// Adds a row of the current file, unless a newer file has its attempt.
    pub fn add(&mut self, row: &ReportRow) -> Result<(), Overflow> {
        if !self.dedup.keep(&row.trace_id, &row.span_id) {
            self.duplicates += 1;
            return Ok(());
        }
        let key = GroupKey {
            month: Month::of(row.event_time),
            task_type: row.task_type.clone(),
            spend_class: SpendClassName(row.spend_class.clone()),
        };
        self.groups.entry(key).or_default().add(row)?;
        self.total.add(row)?;

        let first = (row.attempt_index, row.event_time, row.span_id.clone());
        let state = self
            .requests
            .entry((row.trace_id.clone(), row.request_id.clone()))
            .or_insert_with(|| RequestState {
                first: first.clone(),
                line: RequestLine {
                    trace_id: row.trace_id.clone(),
                    request_id: row.request_id.clone(),
                    service_name: row.service_name.clone(),
                    task_type: row.task_type.clone(),
                    started: row.event_time,
                    retries: 0,
                    totals: Totals::default(),
                },
            });
        if first < state.first {
            state.line.service_name.clone_from(&row.service_name);
            state.line.task_type.clone_from(&row.task_type);
            state.first = first;
        }
        state.line.started = state.line.started.min(row.event_time);
        if row.is_retry() {
            state.line.retries += 1;
        }
        state.line.totals.add(row)
    }

    /// The summary lines in (month, task type, spend class) order, task type `None` first.
    pub fn groups(&self) -> impl Iterator<Item = (&GroupKey, &Totals)> {
        self.groups.iter()
    }

    /// Every row added up.
    pub fn total(&self) -> &Totals {
        &self.total
    }

    /// Requests with at least one row of `attempt_index` > 0.
    pub fn requests_with_retries(&self) -> usize {
        self.requests
            .values()
            .filter(|s| s.line.retries > 0)
            .count()
    }

    /// The `n` requests with retries or fallbacks that spent the most incremental USD; ties (and
    /// requests whose retries are all unpriced) in (trace id, request id) order.
    pub fn top_requests(&self, n: usize) -> Vec<&RequestLine> {
        let mut lines: Vec<&RequestLine> = self
            .requests
            .values()
            .map(|s| &s.line)
            .filter(|l| l.retries > 0)
            .collect();
        lines.sort_by(|a, b| {
            b.totals
                .incremental_usd
                .cmp(&a.totals.incremental_usd)
                .then_with(|| (&a.trace_id, &a.request_id).cmp(&(&b.trace_id, &b.request_id)))
        });
        lines.truncate(n);
        lines
    }
}

//! Printing a [`Report`]: an aligned text table (the default), CSV, JSON or Markdown.
//!
//! Every format has the same two tables with the same column names. Money is printed exactly,
//! as the shortest decimal that is the sum (`0.0028068`, `0`), never rounded; the unaudited
//! share with [`SHARE_PLACES`](super::SHARE_PLACES) places. Rows left out as copies of an
//! attempt a newer file holds are counted: a line in the text formats when there are any (a
//! trailing `#` comment in CSV), and always a field in JSON.

use std::io::{self, Write};
use std::str::FromStr;

use rust_decimal::Decimal;
use serde::Serialize;

use super::{GroupKey, Report, RequestLine, Totals};

/// How `report` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReportFormat {
    #[default]
    Table,
    Csv,
    Json,
    Markdown,
}

impl ReportFormat {
    pub const NAMES: [&'static str; 4] = ["table", "csv", "json", "markdown"];
}

impl FromStr for ReportFormat {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "table" => Ok(ReportFormat::Table),
            "csv" => Ok(ReportFormat::Csv),
            "json" => Ok(ReportFormat::Json),
            "markdown" => Ok(ReportFormat::Markdown),
            other => Err(format!(
                "{other:?} is not a report format; use one of {}",
                ReportFormat::NAMES.join(", ")
            )),
        }
    }
}

const GROUP_COLUMNS: [&str; 9] = [
    "month",
    "task_type",
    "spend_class",
    "attempts",
    "incremental_usd",
    "over_envelope_usd",
    "unpriced_retries",
    "unaudited",
    "unaudited_share",
];

const REQUEST_COLUMNS: [&str; 11] = [
    "request_id",
    "trace_id",
    "service_name",
    "task_type",
    "started",
    "attempts",
    "retries",
    "incremental_usd",
    "over_envelope_usd",
    "unpriced_retries",
    "unaudited",
];

/// Columns after the first `TEXT_COLUMNS` are numbers, right-aligned in the text table.
const GROUP_TEXT_COLUMNS: usize = 3;
const REQUEST_TEXT_COLUMNS: usize = 5;

/// Written where a row has no task type, in the text formats (CSV leaves the field empty, JSON
/// writes null).
const NONE: &str = "-";

/// Writes `report` with its `top` requests in `format`.
pub fn write(
    report: &Report,
    top: usize,
    format: ReportFormat,
    out: &mut dyn Write,
) -> io::Result<()> {
    let top_requests = report.top_requests(top);
    match format {
        ReportFormat::Table => write_text(report, &top_requests, out),
        ReportFormat::Markdown => write_markdown(report, &top_requests, out),
        ReportFormat::Csv => write_csv(report, &top_requests, top, out),
        ReportFormat::Json => write_json(report, &top_requests, out),
    }
}

fn usd(value: Decimal) -> String {
    value.normalize().to_string()
}

fn started(nanos: i64) -> String {
    chrono::DateTime::from_timestamp_nanos(nanos)
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// A summary line's cells; `task_type` `None` is `none`.
fn group_cells(key: &GroupKey, totals: &Totals, none: &str) -> Vec<String> {
    let mut cells = vec![
        key.month.to_string(),
        key.task_type.clone().unwrap_or_else(|| none.to_owned()),
        key.spend_class.0.clone(),
    ];
    cells.extend(totals_cells(totals));
    cells
}

fn totals_cells(totals: &Totals) -> [String; 6] {
    [
        totals.attempts.to_string(),
        usd(totals.incremental_usd),
        usd(totals.over_envelope_usd),
        totals.unpriced_retries.to_string(),
        totals.unaudited.to_string(),
        totals.unaudited_share().to_string(),
    ]
}

fn request_cells(line: &RequestLine, none: &str) -> Vec<String> {
    vec![
        line.request_id.clone(),
        line.trace_id.clone(),
        line.service_name.clone(),
        line.task_type.clone().unwrap_or_else(|| none.to_owned()),
        started(line.started),
        line.totals.attempts.to_string(),
        line.retries.to_string(),
        usd(line.totals.incremental_usd),
        usd(line.totals.over_envelope_usd),
        line.totals.unpriced_retries.to_string(),
        line.totals.unaudited.to_string(),
    ]
}

/// The summary's last line: every row.
fn total_cells(report: &Report) -> Vec<String> {
    let mut cells = vec!["total".to_owned(), String::new(), String::new()];
    cells.extend(totals_cells(report.total()));
    cells
}

fn top_title(report: &Report, shown: usize) -> String {
    format!(
        "Top {shown} requests by incremental USD (of {} with retries or fallbacks)",
        report.requests_with_retries()
    )
}

const GROUP_TITLE: &str = "Attempts by month, task type and spend class";

/// What the report left out, when it left out anything.
fn duplicates_note(report: &Report) -> Option<String> {
    let plural = if report.duplicates == 1 { "" } else { "s" };
    (report.duplicates > 0).then(|| {
        format!(
            "Left out {} duplicate row{plural}: attempts (trace_id, span_id) a newer file also holds, each counted once, from the newest file",
            report.duplicates
        )
    })
}

/// Text cells are one line: a newline or tab from a span attribute would break the columns.
fn one_line(cell: &str) -> String {
    cell.replace(['\n', '\r', '\t'], " ")
}

fn write_text(report: &Report, top: &[&RequestLine], out: &mut dyn Write) -> io::Result<()> {
    let plural = if report.files == 1 { "" } else { "s" };
    writeln!(out, "{GROUP_TITLE} ({} Parquet file{plural})", report.files)?;
    if let Some(note) = duplicates_note(report) {
        writeln!(out, "{note}")?;
    }
    let mut rows: Vec<Vec<String>> = report
        .groups()
        .map(|(key, totals)| group_cells(key, totals, NONE))
        .collect();
    rows.push(total_cells(report));
    aligned(&GROUP_COLUMNS, GROUP_TEXT_COLUMNS, &rows, out)?;
    writeln!(out)?;
    writeln!(out, "{}", top_title(report, top.len()))?;
    let rows: Vec<Vec<String>> = top.iter().map(|l| request_cells(l, NONE)).collect();
    aligned(&REQUEST_COLUMNS, REQUEST_TEXT_COLUMNS, &rows, out)
}

fn aligned(
    header: &[&str],
    text_columns: usize,
    rows: &[Vec<String>],
    out: &mut dyn Write,
) -> io::Result<()> {
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| one_line(c)).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (cell, &width))| match i < text_columns {
                true => format!("{cell:<width$}"),
                false => format!("{cell:>width$}"),
            })
            .collect();
        writeln!(out, "{}", cells.join("  ").trim_end())?;
    }
    Ok(())
}

fn write_markdown(report: &Report, top: &[&RequestLine], out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "### {GROUP_TITLE}")?;
    writeln!(out)?;
    if let Some(note) = duplicates_note(report) {
        writeln!(out, "{note}.")?;
        writeln!(out)?;
    }
    let mut rows: Vec<Vec<String>> = report
        .groups()
        .map(|(key, totals)| group_cells(key, totals, NONE))
        .collect();
    let mut total = total_cells(report);
    total[0] = "**total**".to_owned();
    rows.push(total);
    markdown_table(&GROUP_COLUMNS, GROUP_TEXT_COLUMNS, &rows, out)?;
    writeln!(out)?;
    writeln!(out, "### {}", top_title(report, top.len()))?;
    writeln!(out)?;
    let rows: Vec<Vec<String>> = top.iter().map(|l| request_cells(l, NONE)).collect();
    markdown_table(&REQUEST_COLUMNS, REQUEST_TEXT_COLUMNS, &rows, out)
}

fn markdown_table(
    header: &[&str],
    text_columns: usize,
    rows: &[Vec<String>],
    out: &mut dyn Write,
) -> io::Result<()> {
    writeln!(out, "| {} |", header.join(" | "))?;
    let rule: Vec<&str> = (0..header.len())
        .map(|i| if i < text_columns { "---" } else { "---:" })
        .collect();
    writeln!(out, "|{}|", rule.join("|"))?;
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .map(|c| one_line(c).replace('|', "\\|"))
            .collect();
        writeln!(out, "| {} |", cells.join(" | "))?;
    }
    Ok(())
}

/// Two CSV tables, the summary and then (unless `--top 0`) the top requests, separated by one
/// empty line, each with its header; then, when rows were left out as duplicates, a last line
/// saying so as a `#` comment (what `comment='#'` in pandas and DuckDB skip).
fn write_csv(
    report: &Report,
    top_requests: &[&RequestLine],
    top: usize,
    out: &mut dyn Write,
) -> io::Result<()> {
    csv_row(out, GROUP_COLUMNS.iter().map(|c| (*c).to_owned()), 0)?;
    for (key, totals) in report.groups() {
        csv_row(out, group_cells(key, totals, ""), GROUP_TEXT_COLUMNS)?;
    }
    if top > 0 {
        out.write_all(b"\r\n")?;
        csv_row(out, REQUEST_COLUMNS.iter().map(|c| (*c).to_owned()), 0)?;
        for line in top_requests {
            csv_row(out, request_cells(line, ""), REQUEST_TEXT_COLUMNS)?;
        }
    }
    match duplicates_note(report) {
        Some(note) => write!(out, "# {note}\r\n"),
        None => Ok(()),
    }
}

/// One RFC 4180 record. The first `text_columns` cells come from span attributes: one starting
/// with `=`, `+`, `-`, `@` or a tab would be run as a formula by a spreadsheet, so it gets a
/// leading `'` (the usual CSV-injection guard).
fn csv_row(
    out: &mut dyn Write,
    cells: impl IntoIterator<Item = String>,
    text_columns: usize,
) -> io::Result<()> {
    let fields: Vec<String> = cells
        .into_iter()
        .enumerate()
        .map(|(i, cell)| {
            let cell = match i < text_columns && cell.starts_with(['=', '+', '-', '@', '\t', '\r'])
            {
                true => format!("'{cell}"),
                false => cell,
            };
            match cell.contains([',', '"', '\n', '\r']) {
                true => format!("\"{}\"", cell.replace('"', "\"\"")),
                false => cell,
            }
        })
        .collect();
    // CRLF, as RFC 4180 and spreadsheets expect.
    write!(out, "{}\r\n", fields.join(","))
}

#[derive(Serialize)]
struct JsonReport<'a> {
    files: usize,
    duplicate_rows_left_out: u64,
    by_month: Vec<JsonGroup<'a>>,
    total: JsonTotals,
    requests_with_retries: usize,
    top_requests: Vec<JsonRequest<'a>>,
}

#[derive(Serialize)]
struct JsonGroup<'a> {
    month: String,
    task_type: Option<&'a str>,
    spend_class: &'a str,
    #[serde(flatten)]
    totals: JsonTotals,
}

/// Money and the share as strings, so that no JSON reader turns them into floats.
#[derive(Serialize)]
struct JsonTotals {
    attempts: u64,
    incremental_usd: String,
    over_envelope_usd: String,
    unpriced_retries: u64,
    unaudited: u64,
    unaudited_share: String,
}

impl From<&Totals> for JsonTotals {
    fn from(totals: &Totals) -> Self {
        JsonTotals {
            attempts: totals.attempts,
            incremental_usd: usd(totals.incremental_usd),
            over_envelope_usd: usd(totals.over_envelope_usd),
            unpriced_retries: totals.unpriced_retries,
            unaudited: totals.unaudited,
            unaudited_share: totals.unaudited_share().to_string(),
        }
    }
}

#[derive(Serialize)]
struct JsonRequest<'a> {
    request_id: &'a str,
    trace_id: &'a str,
    service_name: &'a str,
    task_type: Option<&'a str>,
    started: String,
    attempts: u64,
    retries: u64,
    incremental_usd: String,
    over_envelope_usd: String,
    unpriced_retries: u64,
    unaudited: u64,
}

fn write_json(report: &Report, top: &[&RequestLine], out: &mut dyn Write) -> io::Result<()> {
    let json = JsonReport {
        files: report.files,
        duplicate_rows_left_out: report.duplicates,
        by_month: report
            .groups()
            .map(|(key, totals)| JsonGroup {
                month: key.month.to_string(),
                task_type: key.task_type.as_deref(),
                spend_class: &key.spend_class.0,
                totals: totals.into(),
            })
            .collect(),
        total: report.total().into(),
        requests_with_retries: report.requests_with_retries(),
        top_requests: top
            .iter()
            .map(|line| JsonRequest {
                request_id: &line.request_id,
                trace_id: &line.trace_id,
                service_name: &line.service_name,
                task_type: line.task_type.as_deref(),
                started: started(line.started),
                attempts: line.totals.attempts,
                retries: line.retries,
                incremental_usd: usd(line.totals.incremental_usd),
                over_envelope_usd: usd(line.totals.over_envelope_usd),
                unpriced_retries: line.totals.unpriced_retries,
                unaudited: line.totals.unaudited,
            })
            .collect(),
    };
    serde_json::to_writer_pretty(&mut *out, &json).map_err(io::Error::from)?;
    writeln!(out)
}

//! Times `replay`'s OTLP-JSON readers alone, on one thread: the cursor (what `replay` uses),
//! the serde reader behind it, and a syntax-only pass of serde_json over the same lines, the
//! floor any reader built on serde_json has (BENCHMARKS.md, issue 18, seventh and fourteenth
//! passes).
//!
//! ```sh
//! cargo run --release --example loadgen -- gen-jsonl --spans 262144 --out /tmp/spans.jsonl
//! taskset -c 1 cargo run --release --example json_reader -- /tmp/spans.jsonl
//! ```

use std::io::BufRead;
use std::time::Instant;

use anyhow::Context;
use retry_spend_collector::contract::otlp_json::{read_cursor, read_direct};
use retry_spend_collector::contract::AttributeKeys;

fn main() -> anyhow::Result<()> {
    let path = std::env::args()
        .nth(1)
        .context("usage: json_reader FILE.jsonl")?;
    let file = std::fs::File::open(&path).with_context(|| format!("cannot open {path}"))?;
    // Read first, so neither pass pays for the disk or the line splitting.
    let lines = std::io::BufReader::new(file)
        .lines()
        .collect::<Result<Vec<String>, _>>()
        .with_context(|| format!("cannot read {path}"))?;
    let bytes: usize = lines.iter().map(String::len).sum();
    let keys = AttributeKeys::default();

    let start = Instant::now();
    let mut cursor_spans = 0;
    let mut cursor_fallbacks = 0;
    for line in &lines {
        match read_cursor(line.as_bytes(), &keys) {
            Some(facts) => cursor_spans += facts.len(),
            None => cursor_fallbacks += 1,
        }
    }
    let cursor = start.elapsed();

    let start = Instant::now();
    let mut spans = 0;
    let mut fallbacks = 0;
    for line in &lines {
        match read_direct(line.as_bytes(), &keys) {
            Some(facts) => spans += facts.len(),
            None => fallbacks += 1,
        }
    }
    let direct = start.elapsed();

    let start = Instant::now();
    for line in &lines {
        serde_json::from_str::<serde::de::IgnoredAny>(line)
            .with_context(|| format!("{path} holds a line that is not JSON"))?;
    }
    let syntax = start.elapsed();

    println!(
        "{} lines, {:.0} MB, {spans} spans ({fallbacks} lines left to the decoded path)",
        lines.len(),
        bytes as f64 / 1e6
    );
    println!(
        "read_cursor: {:.3} s, {:.2} µs per span ({cursor_fallbacks} lines left to the serde \
         reader; {:.2}× the serde reader's speed)",
        cursor.as_secs_f64(),
        cursor.as_secs_f64() * 1e6 / cursor_spans.max(1) as f64,
        direct.as_secs_f64() / cursor.as_secs_f64().max(f64::EPSILON)
    );
    println!(
        "read_direct: {:.3} s, {:.2} µs per span",
        direct.as_secs_f64(),
        direct.as_secs_f64() * 1e6 / spans.max(1) as f64
    );
    println!(
        "serde_json syntax only (IgnoredAny): {:.3} s ({:.2}× faster)",
        syntax.as_secs_f64(),
        direct.as_secs_f64() / syntax.as_secs_f64().max(f64::EPSILON)
    );
    Ok(())
}

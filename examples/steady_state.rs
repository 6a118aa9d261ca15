//! Times the processor every driver runs (offer → expire → evaluate → finish) in steady state,
//! on one thread, with no receiver, log or sink: the shard's own work, for A/B comparisons of
//! the grouper and the finished-request cache that whole-collector runs are too noisy to show
//! (BENCHMARKS.md, issue 18, eighth pass).
//!
//! Each round offers every span of `examples/retries.jsonl` twenty times over with fresh trace
//! ids, then lets `group_wait` pass (as for SDKs that set no `attempt_count`), so requests wait,
//! are evaluated, and fill the finished cache; past about 300 rounds every evaluated request
//! forgets the oldest.
//!
//! ```sh
//! cargo build --release --example steady_state
//! /usr/bin/time -v taskset -c 1 target/release/examples/steady_state 3000
//! ```

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use retry_spend_collector::assemble::{Assembler, AssemblyBounds};
use retry_spend_collector::contract::otlp_json::parse_request;
use retry_spend_collector::contract::SpanFacts;
use retry_spend_collector::engine::{span_facts, Engine};
use retry_spend_collector::processor::{Arrival, Processor};

/// The collector's allocator, so allocation costs what it costs in `serve`.
#[global_allocator]
static ALLOCATOR: retry_spend_collector::allocator::Mimalloc =
    retry_spend_collector::allocator::Mimalloc;

/// Copies of the example spans per round.
const COPIES: u32 = 20;

fn main() -> anyhow::Result<()> {
    let rounds: u64 = match std::env::args().nth(1) {
        Some(n) => n.parse().context("usage: steady_state [ROUNDS]")?,
        None => 3000,
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("examples/retries.jsonl"))
        .context("cannot read examples/retries.jsonl")?;
    let mut facts: Vec<SpanFacts> = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let request = parse_request(line.as_bytes()).context("an example line does not parse")?;
        facts.extend(span_facts(&request));
    }
    let engine = Engine {
        book: retry_spend_collector::load::pricing_dir(&root.join("config/pricing"))
            .context("cannot load config/pricing")?,
        ..Engine::default()
    };
    let bounds = AssemblyBounds::default();
    let mut processor = Processor::new(engine, Assembler::new(&bounds, 1));
    let mut now = Instant::now();
    let mut rows = Vec::new();
    let (mut spans, mut written) = (0u64, 0u64);
    let start = Instant::now();
    for round in 0..rounds {
        for copy in 0..COPIES {
            for span in &facts {
                let mut span = span.clone();
                span.trace_id[..8].copy_from_slice(&round.to_be_bytes());
                span.trace_id[8..12].copy_from_slice(&copy.to_be_bytes());
                processor.offer(span, now, Arrival::Live);
                spans += 1;
            }
        }
        now += bounds.group_wait + Duration::from_millis(1);
        processor.expire(now);
        rows.clear();
        processor.evaluate(&mut rows, usize::MAX, |_, _, _| {});
        written += rows.len() as u64;
    }
    let elapsed = start.elapsed();
    println!(
        "steady_state: rounds={rounds} spans={spans} rows={written} s={:.3} ns_per_span={:.0}",
        elapsed.as_secs_f64(),
        elapsed.as_nanos() as f64 / spans as f64
    );
    Ok(())
}

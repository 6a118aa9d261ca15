//! Command line: parse arguments, load configuration, start.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

use retry_spend_collector::pipeline::Engine;
use retry_spend_collector::pricing::PricingBook;
use retry_spend_collector::replay::replay;
use retry_spend_collector::rules::RulesConfig;
use retry_spend_collector::sinks::parquet::SinkOptions;

#[derive(Parser)]
#[command(name = "retry-spend-collector", version, about)]
/// Prices LLM retries and fallbacks against the retry spend envelope each request names.
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Evaluate OTLP JSON lines (one ExportTraceServiceRequest per line) and write Parquet.
    Replay {
        /// Directory of pricing snapshot files.
        #[arg(long, value_name = "DIR", default_value = "config/pricing")]
        pricing: PathBuf,
        /// Output directory; rows go to OUTPUT/attempts/date=YYYY-MM-DD/.
        #[arg(long, value_name = "DIR", default_value = "data")]
        output: PathBuf,
        /// A snapshot checked more than this many days before a span is stale.
        #[arg(long, value_name = "DAYS", default_value_t = RulesConfig::default().max_pricing_age_days)]
        max_pricing_age_days: i64,
        /// OTLP JSON lines files; `-` reads standard input.
        #[arg(value_name = "FILE", required = true)]
        files: Vec<PathBuf>,
    },
    /// Pricing snapshot tools.
    Pricing {
        #[command(subcommand)]
        command: PricingCommand,
    },
}

#[derive(Subcommand)]
enum PricingCommand {
    /// Validate every snapshot of a directory and print what it holds.
    Check {
        #[arg(value_name = "DIR", default_value = "config/pricing")]
        dir: PathBuf,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();

    let result = match Cli::parse().command {
        Command::Replay {
            pricing,
            output,
            max_pricing_age_days,
            files,
        } => run_replay(&pricing, &output, max_pricing_age_days, &files),
        Command::Pricing {
            command: PricingCommand::Check { dir },
        } => pricing_check(&dir),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn load_book(dir: &Path) -> anyhow::Result<PricingBook> {
    let book = PricingBook::load_dir(dir)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("cannot load pricing snapshots from {}", dir.display()))?;
    if book.is_empty() {
        tracing::warn!(dir = %dir.display(), "no pricing snapshots found: every envelope will be unknown_pricing_version");
    }
    Ok(book)
}

fn run_replay(
    pricing: &Path,
    output: &Path,
    max_pricing_age_days: i64,
    files: &[PathBuf],
) -> anyhow::Result<ExitCode> {
    let engine = Engine {
        book: load_book(pricing)?,
        rules: RulesConfig {
            max_pricing_age_days,
        },
    };
    let summary = replay(files, &engine, output, SinkOptions::default(), |bad| {
        eprintln!("{bad}")
    })?;
    print!("{summary}");
    Ok(if summary.bad_lines.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn pricing_check(dir: &Path) -> anyhow::Result<ExitCode> {
    let book = match PricingBook::load_dir(dir) {
        Ok(book) => book,
        Err(errors) => {
            eprintln!("{errors}");
            return Ok(ExitCode::FAILURE);
        }
    };
    if book.is_empty() {
        eprintln!("{}: no pricing snapshots (*.json) found", dir.display());
        return Ok(ExitCode::FAILURE);
    }
    for s in book.snapshots() {
        println!(
            "{}  checked {}  source {}  {} models  sha256 {}  {}",
            s.version,
            s.checked_at,
            s.source,
            s.models.len(),
            s.digest,
            s.path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

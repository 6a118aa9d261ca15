//! Command line: parse arguments, load configuration, start.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use chrono::NaiveDate;
use clap::builder::TypedValueParser;
use clap::{Parser, Subcommand};

use retry_spend_collector::config::{Config, ServeOverrides};
use retry_spend_collector::config_kernel::parse_duration_arg;
use retry_spend_collector::engine::Engine;
use retry_spend_collector::error_chain;
use retry_spend_collector::load::DEFAULT_POLICIES_DIR;
use retry_spend_collector::policy::{review, PolicySet};
use retry_spend_collector::pricing::{age, PricingBook};
use retry_spend_collector::pricing_import::{self as import, Format, ImportOptions, Imported};
use retry_spend_collector::replay::{self, replay, replay_to_store, ReplayOptions, Staging};
use retry_spend_collector::report::{self, ReportFormat, DEFAULT_TOP};
use retry_spend_collector::rules::RulesConfig;
use retry_spend_collector::sinks::parquet::{ObjectStoreConfig, Output};

/// The collector allocates per span on its hot path; glibc's allocator spent about a tenth of
/// its CPU in consolidation and fragmentation under load (see BENCHMARKS.md). Built with
/// mimalloc's `no_thp`: with transparent huge pages it faulted memory back 2 MiB at a time after
/// each purge, and the kernel zeroing those pages was 28% of `replay` (BENCHMARKS.md).
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: retry_spend_collector::allocator::Mimalloc =
    retry_spend_collector::allocator::Mimalloc;

/// mimalloc's `mi_option_purge_delay` (v3's option enum; the crate names no constant for it).
#[cfg(not(feature = "system-allocator"))]
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// mimalloc's `mi_option_destroy_on_exit`, seven places after the purge delay.
#[cfg(not(feature = "system-allocator"))]
const MI_OPTION_DESTROY_ON_EXIT: libmimalloc_sys::mi_option_t = 22;

/// Above 1, mimalloc's exit handler returns at once (`_mi_auto_process_done`). By default it
/// collected every heap and purged every arena on the way out, memory the kernel takes back
/// anyway: 30 ms of one core at the end of a 0.9 s `replay`, with every other thread done
/// (BENCHMARKS.md, twenty-sixth pass).
fn skip_allocator_teardown() {
    #[cfg(not(feature = "system-allocator"))]
    // SAFETY: sets a process-wide option, which mimalloc reads atomically; no memory involved.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_DESTROY_ON_EXIT, 2)
    };
}

/// For `serve`: freed memory goes back to the OS at once instead of after a second (v3's
/// default): the peaks of one export's rows and batches then do not pile up in RSS (about
/// 20 MiB less at 2M spans, throughput the same within noise; BENCHMARKS.md). A batch job
/// keeps the default: `replay` spent up to a third of its time faulting returned pages back
/// in. `MIMALLOC_PURGE_DELAY` in the environment still decides.
fn configure_allocator() {
    #[cfg(not(feature = "system-allocator"))]
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets a process-wide option, which mimalloc reads atomically; no memory
        // involved.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
    }
}

#[derive(Parser)]
#[command(
    name = "retry-spend-collector",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
/// Prices LLM retries and fallbacks against the retry spend envelope each request names.
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Without a subcommand the collector serves, and takes serve's options.
    #[command(flatten)]
    serve: ServeArgs,
}

/// Where `serve` looks for its configuration when `--config` is not given.
const DEFAULT_CONFIG: &str = "config/collector.toml";

#[derive(clap::Args)]
struct ServeArgs {
    /// TOML configuration file [default: config/collector.toml if present, else built-in defaults]
    #[arg(long, value_name = "FILE", env = "RETRY_SPEND_CONFIG")]
    config: Option<PathBuf>,
    /// OTLP/gRPC listen address [default: 127.0.0.1:4317]
    #[arg(long, value_name = "ADDR", env = "RETRY_SPEND_GRPC_ADDR", value_parser = parse_listen_addr)]
    grpc_addr: Option<SocketAddr>,
    /// OTLP/HTTP listen address [default: 127.0.0.1:4318]
    #[arg(long, value_name = "ADDR", env = "RETRY_SPEND_HTTP_ADDR", value_parser = parse_listen_addr)]
    http_addr: Option<SocketAddr>,
    /// Prometheus /metrics and /healthz listen address [default: 127.0.0.1:9464]
    #[arg(long, value_name = "ADDR", env = "RETRY_SPEND_METRICS_ADDR", value_parser = parse_listen_addr)]
    metrics_addr: Option<SocketAddr>,
    /// Directory of pricing snapshot files [default: config/pricing]
    #[arg(long = "pricing", value_name = "DIR", env = "RETRY_SPEND_PRICING_DIR")]
    pricing_dir: Option<PathBuf>,
    /// Directory of envelope policy files (*.toml) [default: config/policies, none if missing]
    #[arg(
        long = "policies",
        value_name = "DIR",
        env = "RETRY_SPEND_POLICIES_DIR"
    )]
    policies_dir: Option<PathBuf>,
    /// Output directory, or s3://bucket/prefix (gs://, az://): Parquet under OUTPUT/attempts/ [default: data]
    #[arg(
        long = "output",
        value_name = "DIR|URL",
        env = "RETRY_SPEND_OUTPUT_DIR"
    )]
    output_dir: Option<PathBuf>,
    /// Part of every file name, so collectors can share an output [default: generated]
    #[arg(long, value_name = "ID", env = "RETRY_SPEND_INSTANCE_ID")]
    instance_id: Option<String>,
    /// How long to wait for a request's attempts after its latest span, e.g. "10s"
    #[arg(long, value_name = "DURATION", env = "RETRY_SPEND_GROUP_WAIT", value_parser = parse_duration_arg)]
    group_wait: Option<Duration>,
    /// `none` acknowledges and discards every export after decoding: a benchmark baseline
    #[arg(long, value_name = "SINK", value_parser = ["parquet", "none"])]
    sink: Option<String>,
    /// `off` answers exports without the write-ahead log (a crash loses unwritten rows)
    #[arg(long, value_name = "ON|OFF", value_parser = ["on", "off"])]
    wal: Option<String>,
    /// Local state: the write-ahead log, and with an object store output the files waiting for
    /// upload; overrides [wal] dir [default: OUTPUT/wal; required with an object store output]
    #[arg(long, value_name = "DIR", env = "RETRY_SPEND_WAL_DIR")]
    wal_dir: Option<PathBuf>,
    /// Downstream OTLP gRPC endpoint to forward enriched spans to, e.g. http://127.0.0.1:14317
    #[arg(long, value_name = "URL", env = "RETRY_SPEND_FORWARD_ENDPOINT")]
    forward_endpoint: Option<String>,
    /// Pipeline shards; 0 runs one per core the process may use [default: 0]
    #[arg(long, value_name = "N", env = "RETRY_SPEND_WORKERS")]
    workers: Option<usize>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the live collector (the default).
    Serve(ServeArgs),
    /// Evaluate OTLP JSON lines (one ExportTraceServiceRequest per line) and write Parquet.
    Replay {
        /// Directory of pricing snapshot files.
        #[arg(
            long,
            value_name = "DIR",
            default_value = "config/pricing",
            env = "RETRY_SPEND_PRICING_DIR"
        )]
        pricing: PathBuf,
        /// Directory of envelope policy files (*.toml) [default: config/policies, none if missing]
        #[arg(long, value_name = "DIR", env = "RETRY_SPEND_POLICIES_DIR")]
        policies: Option<PathBuf>,
        /// Output directory, or s3://bucket/prefix (gs://, az://); rows go to OUTPUT/attempts/date=YYYY-MM-DD/.
        #[arg(
            long,
            value_name = "DIR|URL",
            default_value = "data",
            env = "RETRY_SPEND_OUTPUT_DIR"
        )]
        output: PathBuf,
        /// With an object store output: where files are written before upload, kept afterwards [default: a new directory under --wal-dir, removed afterwards]
        #[arg(long, value_name = "DIR")]
        staging: Option<PathBuf>,
        /// With an object store output: local state; files are staged in a new directory under it, removed once uploaded [default: the system's temporary directory]
        #[arg(long, value_name = "DIR", env = "RETRY_SPEND_WAL_DIR")]
        wal_dir: Option<PathBuf>,
        /// A snapshot checked more than this many days before a span is stale.
        #[arg(long, value_name = "DAYS", default_value_t = RulesConfig::default().max_pricing_age_days)]
        max_pricing_age_days: i64,
        /// Estimated bytes of requests held while the input is read (serve's
        /// processors.retry_spend.max_pending_bytes, larger here: a batch job's rows should be those of the whole input); over it the oldest are evaluated early (counted in the summary).
        #[arg(long, value_name = "BYTES", default_value_t = replay::DEFAULT_MAX_PENDING_BYTES, value_parser = clap::value_parser!(u64).range(1024 * 1024..))]
        max_pending_bytes: u64,
        /// With an object store output: retries of a failed upload (200 ms doubling to 30 s apart) before the replay ends with exit code 2; a 4xx answer other than 408 and 429 ends it at once.
        #[arg(long, value_name = "N", default_value_t = replay::DEFAULT_UPLOAD_RETRIES, env = "RETRY_SPEND_UPLOAD_RETRIES")]
        upload_retries: u32,
        /// Streams the spans are sharded into by trace, each on a thread of its own with its share of --max-pending-bytes; 0 runs one per core; rows are the same whatever it is [default: 0]
        #[arg(long, value_name = "N", env = "RETRY_SPEND_WORKERS")]
        workers: Option<usize>,
        /// OTLP JSON lines files; `-` reads standard input.
        #[arg(value_name = "FILE", required = true)]
        files: Vec<PathBuf>,
    },
    /// Finance report over written Parquet: attempts, incremental and over-envelope USD and the
    /// unaudited share by month, task type and spend class, and the top requests by incremental USD.
    Report {
        /// The --output of serve or replay (its attempts/ table is read), a directory below it, or s3://bucket/prefix (gs://, az://)
        #[arg(
            value_name = "DIR|URL",
            default_value = "data",
            env = "RETRY_SPEND_OUTPUT_DIR"
        )]
        location: PathBuf,
        /// How many requests to list by incremental USD; 0 lists none.
        #[arg(long, value_name = "N", default_value_t = DEFAULT_TOP)]
        top: usize,
        /// table, csv, json or markdown.
        #[arg(long, value_name = "FORMAT", default_value = "table", value_parser = clap::builder::PossibleValuesParser::new(ReportFormat::NAMES).try_map(|s| s.parse::<ReportFormat>()))]
        format: ReportFormat,
    },
    /// Pricing snapshot tools.
    Pricing {
        #[command(subcommand)]
        command: PricingCommand,
    },
    /// Envelope policy tools.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Validate every policy file of a directory and print each policy, one line each, in the
    /// order requests are matched: diff two outputs to review which envelopes a change moves.
    Check {
        /// [default: config/policies, no policies if missing, as for serve]
        #[arg(value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Also check that each pinned pricing version is loaded from this directory.
        #[arg(long, value_name = "DIR")]
        pricing: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum PricingCommand {
    /// Validate every snapshot of a directory and print what it holds.
    Check {
        #[arg(value_name = "DIR", default_value = "config/pricing")]
        dir: PathBuf,
    },
    /// Convert a saved price feed into a snapshot file.
    Import {
        #[command(flatten)]
        snapshot: SnapshotArgs,
        /// The saved feed.
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Download a price feed and convert it into a snapshot file.
    Fetch {
        #[command(flatten)]
        snapshot: SnapshotArgs,
        /// Give up when the download has not completed within this, e.g. "30s".
        #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration_arg)]
        timeout: Duration,
        /// The feed's http:// or https:// URL.
        #[arg(value_name = "URL")]
        url: String,
    },
}

/// What `pricing import` and `pricing fetch` share: the snapshot's identity and destination.
#[derive(clap::Args)]
struct SnapshotArgs {
    /// The feed's format.
    #[arg(long, value_name = "FORMAT", value_parser = clap::builder::PossibleValuesParser::new(Format::NAMES).try_map(|s| s.parse::<Format>()))]
    format: Format,
    /// The snapshot's pricing_checked_at, YYYY-MM-DD [default: today, UTC]
    #[arg(long, value_name = "DATE", value_parser = parse_checked_at)]
    checked_at: Option<NaiveDate>,
    /// The snapshot's pricing_source [default: the URL fetched, or the file's path]
    #[arg(long, value_name = "TEXT")]
    source: Option<String>,
    /// The snapshot's pricing_version [default: the feed's own (new-api), else the first 32 hex digits of the feed's SHA-256]
    #[arg(long, value_name = "V")]
    version: Option<String>,
    /// Directory to write the snapshot into: the pricing directory
    #[arg(
        long,
        value_name = "DIR",
        default_value = "config/pricing",
        env = "RETRY_SPEND_PRICING_DIR"
    )]
    out: PathBuf,
}

impl SnapshotArgs {
    fn options(&self, default_source: String) -> ImportOptions {
        ImportOptions {
            format: self.format,
            checked_at: self.checked_at.unwrap_or_else(today_utc),
            source: self.source.clone().unwrap_or(default_source),
            version: self.version.clone(),
        }
    }
}

fn main() -> ExitCode {
    skip_allocator_teardown();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();

    let cli = Cli::parse();
    let result = match cli.command.unwrap_or(Command::Serve(cli.serve)) {
        Command::Serve(args) => {
            configure_allocator();
            serve(args)
        }
        Command::Replay {
            pricing,
            policies,
            output,
            staging,
            wal_dir,
            max_pricing_age_days,
            max_pending_bytes,
            upload_retries,
            workers,
            files,
        } => run_replay(
            &pricing,
            policies.as_deref(),
            &output,
            StagingArgs {
                dir: staging.as_deref(),
                state_dir: wal_dir.as_deref(),
            },
            max_pricing_age_days,
            ReplayOptions {
                max_pending_bytes,
                upload_retries,
                workers: workers.unwrap_or(0),
                ..ReplayOptions::default()
            },
            &files,
        ),
        Command::Report {
            location,
            top,
            format,
        } => run_report(&location, top, format),
        Command::Pricing { command } => match command {
            PricingCommand::Check { dir } => pricing_check(&dir),
            PricingCommand::Import { snapshot, file } => pricing_import(&snapshot, &file),
            PricingCommand::Fetch {
                snapshot,
                timeout,
                url,
            } => pricing_fetch(&snapshot, timeout, &url),
        },
        Command::Policy {
            command: PolicyCommand::Check { dir, pricing },
        } => policy_check(dir.as_deref(), pricing.as_deref()),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", error_chain::one_line(&e));
            ExitCode::from(2)
        }
    }
}

fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None if Path::new(DEFAULT_CONFIG).is_file() => Config::load(Path::new(DEFAULT_CONFIG))?,
        None => {
            tracing::info!(
                "no config file at {}: built-in defaults; point at one with --config FILE or RETRY_SPEND_CONFIG",
                absolute(Path::new(DEFAULT_CONFIG)).display()
            );
            Config::default()
        }
    };
    config.apply(ServeOverrides {
        grpc_addr: args.grpc_addr,
        http_addr: args.http_addr,
        metrics_addr: args.metrics_addr,
        pricing_dir: args.pricing_dir,
        policies_dir: args.policies_dir,
        output_dir: args.output_dir,
        instance_id: args.instance_id,
        group_wait: args.group_wait,
        forward_endpoint: args.forward_endpoint,
        parquet_enabled: args.sink.map(|sink| sink == "parquet"),
        wal_enabled: args.wal.map(|wal| wal == "on"),
        wal_dir: args.wal_dir,
        workers: args.workers,
    });
    config.validate("command line")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        // Handlers first: a signal that arrives while starting must not take the default action.
        use tokio::signal::unix::{signal, SignalKind};
        let terminate = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
        let hangup = signal(SignalKind::hangup()).context("cannot listen for SIGHUP")?;
        let collector = retry_spend_collector::service::start(config).await?;
        wait_for_signal(&collector, terminate, hangup).await?;
        collector.shutdown();
        let summary = collector.wait().await?;
        if summary.rows_lost > 0 {
            anyhow::bail!("{} rows could not be written to Parquet", summary.rows_lost);
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// Waits for SIGTERM or SIGINT; SIGHUP reloads the pricing snapshots, policies, TLS certificate
/// and bearer tokens meanwhile.
async fn wait_for_signal(
    collector: &retry_spend_collector::service::Collector,
    mut terminate: tokio::signal::unix::Signal,
    mut hangup: tokio::signal::unix::Signal,
) -> anyhow::Result<()> {
    loop {
        tokio::select! {
            _ = terminate.recv() => {
                tracing::info!("SIGTERM received");
                return Ok(());
            }
            result = tokio::signal::ctrl_c() => {
                result.context("cannot listen for SIGINT")?;
                tracing::info!("SIGINT received");
                return Ok(());
            }
            _ = hangup.recv() => match collector.reload().await {
                Ok(reloaded) => tracing::info!(
                    snapshots = reloaded.snapshots,
                    policies = reloaded.policies,
                    tls_certificate = reloaded.certificate,
                    bearer_tokens = reloaded.tokens,
                    "SIGHUP: pricing snapshots reloaded, envelope policies reloaded"
                ),
                Err(e) => tracing::error!("SIGHUP: {}; nothing reloaded, keeping the snapshots, policies, certificate and tokens in use", error_chain::one_line(&e)),
            },
        }
    }
}

/// `IP:PORT`, or `HOST:PORT` resolved once at start (`localhost:4317`).
fn parse_listen_addr(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    std::net::ToSocketAddrs::to_socket_addrs(text)
        .map_err(|e| format!("{text:?} is not HOST:PORT: {e}"))?
        .next()
        .ok_or_else(|| format!("{text:?} resolves to no address"))
}

/// `replay --pricing`, `policy check --pricing`.
fn load_book(dir: &Path) -> anyhow::Result<PricingBook> {
    if !dir.exists() {
        anyhow::bail!(
            "cannot load pricing snapshots: there is no directory {}; point at one with --pricing DIR or RETRY_SPEND_PRICING_DIR (the default, config/pricing, is relative to the current directory)",
            absolute(dir).display()
        );
    }
    let book = retry_spend_collector::load::pricing_dir(dir)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("cannot load pricing snapshots from {}", dir.display()))?;
    if book.is_empty() {
        tracing::warn!(dir = %dir.display(), "no pricing snapshots found: every envelope will be unknown_pricing_version");
    }
    Ok(book)
}

fn load_policies(dir: Option<&Path>) -> anyhow::Result<PolicySet> {
    if let Some(dir) = dir.filter(|dir| !dir.exists()) {
        anyhow::bail!(
            "cannot load envelope policies: there is no directory {}; point at one with --policies DIR or RETRY_SPEND_POLICIES_DIR, or leave both out to run without policies",
            absolute(dir).display()
        );
    }
    retry_spend_collector::load::policies(dir)
        .map_err(anyhow::Error::msg)
        .with_context(|| {
            let dir = dir.unwrap_or(Path::new(DEFAULT_POLICIES_DIR));
            format!("cannot load envelope policies from {}", dir.display())
        })
}

/// Where `replay` to an object store writes files before their upload.
struct StagingArgs<'a> {
    /// `--staging`: this directory, kept.
    dir: Option<&'a Path>,
    /// `--wal-dir`: a new directory under this one (else the system's temporary directory),
    /// removed once every file is uploaded.
    state_dir: Option<&'a Path>,
}

fn run_replay(
    pricing: &Path,
    policies: Option<&Path>,
    output: &Path,
    staging: StagingArgs<'_>,
    max_pricing_age_days: i64,
    options: ReplayOptions,
    files: &[PathBuf],
) -> anyhow::Result<ExitCode> {
    let output = Output::parse(output).context("replay --output")?;
    let book = load_book(pricing)?;
    if let Some(stale) = age::stale_newest(&book, SystemTime::now(), max_pricing_age_days) {
        tracing::warn!("{stale}");
    }
    let engine = Engine {
        book,
        rules: RulesConfig {
            max_pricing_age_days,
        },
        policies: load_policies(policies)?,
    };
    let on_bad_line = |bad: &_| eprintln!("{bad}");
    let summary = match &output {
        Output::Local(dir) => replay(files, &engine, dir, options, on_bad_line)?,
        Output::Remote(remote) => {
            // Nothing staged outlives a replay that did not complete: it is simply run again.
            let staging = Arc::new(Staging::new(
                staging.dir,
                staging.state_dir,
                &options.sink.instance_id,
            ));
            abandon_on_signal(Arc::clone(&staging))?;
            replay_to_store(
                files,
                &engine,
                remote,
                &ObjectStoreConfig::default(),
                &staging,
                options,
                on_bad_line,
            )?
        }
    };
    print_stdout(|out| write!(out, "{summary}"))?;
    Ok(if summary.bad_lines.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// At SIGTERM or SIGINT, removes what the replay staged (the objects already uploaded stay) and
/// exits with 128 + the signal's number, as a shell reports a command a signal stopped.
fn abandon_on_signal(staging: Arc<Staging>) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the signal listener")?;
    // Listening from here on: a signal that comes before the thread runs is not missed.
    let (mut terminate, mut interrupt) = runtime
        .block_on(async {
            Ok::<_, std::io::Error>((
                signal(SignalKind::terminate())?,
                signal(SignalKind::interrupt())?,
            ))
        })
        .context("cannot listen for SIGTERM and SIGINT")?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let (name, number) = runtime.block_on(async {
                tokio::select! {
                    _ = terminate.recv() => ("SIGTERM", 15),
                    _ = interrupt.recv() => ("SIGINT", 2),
                }
            });
            staging.abandon();
            eprintln!(
                "error: replay stopped by {name}; its staged files under {} are removed, the objects already uploaded stay",
                staging.dir().display()
            );
            std::process::exit(128 + number);
        })
        .context("cannot start the signal listener")?;
    Ok(())
}

/// `path` from the root, for messages about relative defaults: the current directory is often
/// not the one a user thinks.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

fn run_report(location: &Path, top: usize, format: ReportFormat) -> anyhow::Result<ExitCode> {
    let location = Output::parse(location).context("report")?;
    let report = report::read(&location, &ObjectStoreConfig::default())?;
    print_stdout(|out| report::format::write(&report, top, format, out))?;
    Ok(ExitCode::SUCCESS)
}

/// Writes to a locked, buffered stdout. A reader that went away (`| head`) is no error: the
/// output is simply cut short, where `print!` would panic.
fn print_stdout(
    write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    match write(&mut out).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        result => result.context("cannot write to standard output"),
    }
}

fn pricing_check(dir: &Path) -> anyhow::Result<ExitCode> {
    if !dir.exists() {
        eprintln!(
            "there is no directory {}; pass the pricing directory as DIR (the default, config/pricing, is relative to the current directory)",
            absolute(dir).display()
        );
        return Ok(ExitCode::FAILURE);
    }
    let book = match retry_spend_collector::load::pricing_dir(dir) {
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
    print_stdout(|out| {
        for s in book.snapshots() {
            writeln!(
                out,
                "{}  checked {}  source {}  {} models  sha256 {}  {}",
                s.version,
                s.checked_at,
                s.source,
                s.models.len(),
                s.digest,
                s.path.display()
            )?;
            let groups: Vec<String> = s
                .group_ratio
                .iter()
                .map(|(g, r)| format!("{g}={r}"))
                .collect();
            writeln!(out, "  group_ratio: {}", groups.join(", "))?;
            for (name, price) in &s.models {
                let cached = price
                    .cached_input
                    .map_or_else(|| "input price".to_owned(), |c| c.to_string());
                writeln!(
                    out,
                    "  {name}  family {}  input {}  output {}  cached_input {cached}  USD per million tokens",
                    price.family.as_deref().unwrap_or("-"),
                    price.input,
                    price.output,
                )?;
            }
        }
        Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

fn pricing_import(args: &SnapshotArgs, file: &Path) -> anyhow::Result<ExitCode> {
    let feed =
        std::fs::read(file).with_context(|| format!("cannot read feed {}", file.display()))?;
    let name = file.display().to_string();
    let imported = import::convert(&name, &feed, &args.options(name.clone()))?;
    write_snapshot(&imported, &args.out)
}

fn pricing_fetch(args: &SnapshotArgs, timeout: Duration, url: &str) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let feed = runtime.block_on(import::fetch_feed(url, timeout, import::MAX_FEED_BYTES))?;
    let imported = import::convert(url, &feed, &args.options(url.to_owned()))?;
    write_snapshot(&imported, &args.out)
}

fn write_snapshot(imported: &Imported, out: &Path) -> anyhow::Result<ExitCode> {
    let written = imported.write_into(out)?;
    let what = if written.unchanged {
        "unchanged, already in"
    } else {
        "wrote"
    };
    print_stdout(|out| {
        writeln!(out, "{what} {}", written.path.display())?;
        writeln!(
            out,
            "  version {}  checked {}  source {}  {} models  sha256 {}",
            imported.version, imported.checked_at, imported.source, imported.models, written.digest
        )?;
        for r in &imported.rounded {
            writeln!(
                out,
                "  rounded to 10 decimal places: {} ({})",
                r.model,
                r.fields.join(", ")
            )?;
        }
        for l in &imported.left_out {
            writeln!(out, "  left out: {}: {}", l.model, l.reason)?;
        }
        if imported.skipped > 0 {
            writeln!(
                out,
                "  skipped {} entries that are no model (sample_spec, or not an object)",
                imported.skipped
            )?;
        }
        Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

fn parse_checked_at(text: &str) -> Result<NaiveDate, String> {
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .map_err(|e| format!("{text:?} is not a YYYY-MM-DD date: {e}"))
}

fn today_utc() -> NaiveDate {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(now.as_secs())
        .ok()
        .and_then(|secs| chrono::DateTime::from_timestamp(secs, 0))
        .map(|t| t.date_naive())
        .unwrap_or_default()
}
/// Lists every policy of `dir` one a line, in matching order, with its match and its envelope;
/// warns (still exit 0) about envelopes that would leave rows unaudited. Exit 1 on any error.
/// Without `dir`, a missing `config/policies` is no error: `serve` and `replay` then run without
/// policies, and so says the check.
fn policy_check(dir: Option<&Path>, pricing: Option<&Path>) -> anyhow::Result<ExitCode> {
    let default = Path::new(DEFAULT_POLICIES_DIR);
    if dir.is_none() && !default.exists() {
        print_stdout(|out| {
            writeln!(
                out,
                "no envelope policies: there is no {} (serve and replay run without policies; pass a DIR to check another directory)",
                absolute(default).display()
            )
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    let dir = dir.unwrap_or(default);
    let set = match retry_spend_collector::load::policies_dir(dir, true) {
        Ok(set) => set,
        Err(errors) => {
            eprintln!("{errors}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let book = pricing.map(load_book).transpose()?;
    print_stdout(|out| {
        if set.is_empty() {
            writeln!(out, "{}: no envelope policies (*.toml)", dir.display())?;
        }
        for policy in set.policies() {
            writeln!(out, "{}", review::describe(policy))?;
            for warning in review::warnings(policy, book.as_ref()) {
                eprintln!(
                    "warning: {}: policy {:?}: {warning}",
                    policy.path.display(),
                    policy.name
                );
            }
        }
        Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(all(test, not(feature = "system-allocator")))]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_option_is_the_one_whose_default_is_1000_ms() {
        // The index is ours, not the crate's: the default of the option at that index, v3's
        // purge delay of 1000 ms (`options.c`), shows it names the purge delay (main, which
        // sets it, does not run in tests).
        assert_eq!(
            unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) },
            1000
        );
    }

    #[test]
    fn the_destroy_on_exit_option_lies_between_its_neighbours() {
        // Its own default (0) says nothing; the options just before it, `max_warnings` (32) and
        // the deprecated `max_segment_reclaim` (10), and the one after it, `arena_reserve`
        // (1 GiB, in KiB), have defaults of their own.
        let get = |option| unsafe { libmimalloc_sys::mi_option_get(option) };
        assert_eq!(get(MI_OPTION_DESTROY_ON_EXIT - 2), 32);
        assert_eq!(get(MI_OPTION_DESTROY_ON_EXIT - 1), 10);
        assert_eq!(get(MI_OPTION_DESTROY_ON_EXIT + 1), 1024 * 1024);
    }
}

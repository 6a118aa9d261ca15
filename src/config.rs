//! The TOML configuration of `serve` as a whole: the sections composed, parsing, flag overrides,
//! and the checks of values in different sections that only fail together.
//!
//! Laid out like an OpenTelemetry Collector config (receivers → processors → exporters, plus
//! `telemetry` and `service`), so users read it with the picture they already have. Each section
//! is owned by the component it configures, next to its code, with its defaults and its
//! `validate`: `[receivers.otlp]` in `receivers/config.rs`, `[processors.retry_spend]` in
//! `pipeline/config.rs`, `[exporters.parquet]` and `[exporters.otlp_forward]` in
//! `sinks/{parquet,forward}/config.rs`, `[telemetry]` in `sinks/metrics/config.rs`, `[wal]` in
//! `wal/config.rs`, `[decisions]` in `decisions/config.rs`; `[service]`, the process as a whole, is here.
//!
//! Every key has a default, so an empty file is a valid config and `config/collector.toml` only
//! documents them. Unknown keys are errors: a typo'd key silently falling back to its default is
//! the worst kind of misconfiguration, because nothing tells the user it happened.

use retry_spend_core::toml_error::TomlErrorAt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::config_kernel::{non_empty, ConfigProblem, Problems, ABOVE_ZERO, MIB};
use crate::decisions::config::DecisionsConfig;
use crate::pipeline::config::ProcessorsConfig;
use crate::receivers::config::{addresses_collide, ReceiversConfig};
use crate::sinks::forward::config::OtlpForwardConfig;
use crate::sinks::parquet::config::ParquetExporterConfig;
use crate::sinks::parquet::Output;
use crate::telemetry::config::TelemetryConfig;
use crate::wal::config::WalConfig;

/// The `serve` configuration, as read from `config/collector.toml` and then overridden by flags.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub receivers: ReceiversConfig,
    pub processors: ProcessorsConfig,
    pub exporters: ExportersConfig,
    pub telemetry: TelemetryConfig,
    pub service: ServiceConfig,
    pub wal: WalConfig,
    pub decisions: DecisionsConfig,
}

/// `[exporters]`: where evaluated attempts go.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExportersConfig {
    pub parquet: ParquetExporterConfig,
    pub otlp_forward: OtlpForwardConfig,
}

impl ExportersConfig {
    pub fn validate(&self) -> Result<(), Vec<ConfigProblem>> {
        let mut problems = Problems::default();
        problems.add(self.parquet.validate());
        problems.add(self.otlp_forward.validate());
        problems.finish()
    }
}

/// Values from `serve` flags and their `RETRY_SPEND_*` environment variables; `None` keeps the
/// file's value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServeOverrides {
    pub grpc_addr: Option<SocketAddr>,
    pub http_addr: Option<SocketAddr>,
    pub metrics_addr: Option<SocketAddr>,
    pub pricing_dir: Option<PathBuf>,
    /// `--policies` / `RETRY_SPEND_POLICIES_DIR`.
    pub policies_dir: Option<PathBuf>,
    pub output_dir: Option<PathBuf>,
    /// `--instance-id` / `RETRY_SPEND_INSTANCE_ID`.
    pub instance_id: Option<String>,
    pub group_wait: Option<Duration>,
    /// `--sink`: `Some(false)` discards after decoding (benchmark baseline).
    pub parquet_enabled: Option<bool>,
    /// `--wal`: `Some(false)` runs without the write-ahead log.
    pub wal_enabled: Option<bool>,
    /// `--wal-dir` / `RETRY_SPEND_WAL_DIR`: `[wal] dir`.
    pub wal_dir: Option<PathBuf>,
    /// An empty string turns forwarding off, so an environment variable can undo the file.
    pub forward_endpoint: Option<String>,
    /// `--workers`: pipeline shards.
    pub workers: Option<usize>,
}

/// `[service]`: the process as a whole.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServiceConfig {
    /// How long shutdown waits for the forward queue to drain downstream. Evaluating buffered
    /// requests and completing Parquet files are not cut short: they always finish, so nothing
    /// accepted is lost.
    #[serde(deserialize_with = "crate::config_kernel::duration::deserialize")]
    pub shutdown_timeout: Duration,
    /// Bytes the process may hold for what grows with load: exports in flight, pending
    /// requests and the finished-request cache, the Parquet files being built. Past it, exports
    /// are refused with retryable answers (the OpenTelemetry Collector's `memory_limiter`,
    /// counted rather than sampled). The in-flight and pending budgets default to a half and a
    /// quarter of it.
    pub memory_limit: u64,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            shutdown_timeout: Duration::from_secs(30),
            memory_limit: 128 * MIB,
        }
    }
}

impl ServiceConfig {
    pub fn validate(&self) -> Result<(), Vec<ConfigProblem>> {
        let mut problems = Problems::default();
        problems.check(
            !self.shutdown_timeout.is_zero(),
            "service.shutdown_timeout",
            ABOVE_ZERO,
        );
        problems.check(
            self.memory_limit >= MIB,
            "service.memory_limit",
            "must be at least 1 MiB (1048576)",
        );
        problems.finish()
    }
}

/// Why a config could not be used. Every message starts with where the config came from and
/// names the offending key, so the user knows which line to fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Not TOML, an unknown key, or a value of the wrong form.
    #[error("{origin}: {}{message}{}", key_prefix(key), location_suffix(*location))]
    Parse {
        origin: String,
        /// Dotted key path, empty when the error is not about one key (a syntax error).
        key: String,
        message: String,
        /// 1-based (line, column) of the offending text.
        location: Option<(usize, usize)>,
    },
    /// Well-formed values that cannot work together; every problem is listed, one per line.
    #[error("{}", render_problems(origin, problems))]
    Invalid {
        origin: String,
        problems: Vec<ConfigProblem>,
    },
}

fn key_prefix(key: &str) -> String {
    if key.is_empty() {
        String::new()
    } else {
        format!("{key}: ")
    }
}

fn location_suffix(location: Option<(usize, usize)>) -> String {
    match location {
        Some((line, column)) => format!(" (line {line}, column {column})"),
        None => String::new(),
    }
}

fn render_problems(origin: &str, problems: &[ConfigProblem]) -> String {
    problems
        .iter()
        .map(|p| format!("{origin}: {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

impl Config {
    /// Reads, parses and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::from_toml_str(&text, &path.display().to_string())
    }

    /// Parses and validates config text; `origin` only names it in errors.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| parse_error(text, origin, &e))?;
        config.validate(origin)?;
        Ok(config)
    }

    /// Applies `serve` flag and environment overrides. Call [`Config::validate`] afterwards: a
    /// flag can set a value the file could not.
    pub fn apply(&mut self, o: ServeOverrides) {
        if let Some(addr) = o.grpc_addr {
            self.receivers.otlp.grpc_addr = addr;
        }
        if let Some(addr) = o.http_addr {
            self.receivers.otlp.http_addr = addr;
        }
        if let Some(addr) = o.metrics_addr {
            self.telemetry.metrics_addr = addr;
        }
        if let Some(dir) = o.pricing_dir {
            self.processors.retry_spend.pricing_dir = dir;
        }
        if let Some(dir) = o.policies_dir {
            self.processors.retry_spend.policies_dir = Some(dir);
        }
        if let Some(dir) = o.output_dir {
            self.exporters.parquet.output_dir = dir;
        }
        if let Some(id) = o.instance_id {
            self.exporters.parquet.instance_id = id;
        }
        if let Some(wait) = o.group_wait {
            self.processors.retry_spend.group_wait = wait;
        }
        if let Some(endpoint) = o.forward_endpoint {
            self.exporters.otlp_forward.endpoint = non_empty(endpoint);
        }
        if let Some(enabled) = o.parquet_enabled {
            self.exporters.parquet.enabled = enabled;
        }
        if let Some(enabled) = o.wal_enabled {
            self.wal.enabled = enabled;
        }
        if let Some(dir) = o.wal_dir {
            self.wal.dir = dir;
        }
        if let Some(workers) = o.workers {
            self.processors.retry_spend.workers = workers;
        }
    }

    /// The in-flight budget: `receivers.otlp.max_in_flight_bytes`, else half of
    /// `service.memory_limit`.
    pub fn in_flight_limit(&self) -> u64 {
        self.receivers
            .otlp
            .max_in_flight_bytes
            .unwrap_or(self.service.memory_limit / 2)
    }

    /// Rejects values that would make the collector fail later, drop data, or never make
    /// progress. `origin` names where the values came from, e.g. the file path, or the path
    /// followed by "with serve flags" after [`Config::apply`].
    pub fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let problems = self.problems();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid {
                origin: origin.to_owned(),
                problems,
            })
        }
    }

    /// Every section's own problems, then those of values in different sections that only
    /// fail together.
    fn problems(&self) -> Vec<ConfigProblem> {
        let mut problems = Problems::default();
        problems.add(self.receivers.validate());
        problems.add(self.processors.validate());
        problems.add(self.exporters.validate());
        problems.add(self.telemetry.validate());
        problems.add(self.service.validate());
        problems.add(self.wal.validate());

        let otlp = &self.receivers.otlp;
        let memory_limit = self.service.memory_limit;
        problems.check(
            self.in_flight_limit() >= otlp.max_request_bytes,
            "receivers.otlp.max_in_flight_bytes",
            "must be at least receivers.otlp.max_request_bytes, or no large request could ever pass (unset, it is half of service.memory_limit)",
        );
        problems.check(
            otlp.max_in_flight_bytes
                .is_none_or(|bytes| bytes <= memory_limit),
            "receivers.otlp.max_in_flight_bytes",
            "must not be above service.memory_limit, which covers it",
        );
        problems.check(
            self.processors
                .retry_spend
                .max_pending_bytes
                .is_none_or(|bytes| bytes <= memory_limit),
            "processors.retry_spend.max_pending_bytes",
            "must not be above service.memory_limit, which covers it",
        );
        let metrics_addr = self.telemetry.metrics_addr;
        problems.check(
            !addresses_collide(metrics_addr, otlp.grpc_addr)
                && !addresses_collide(metrics_addr, otlp.http_addr),
            "telemetry.metrics_addr",
            "must differ from the receivers.otlp addresses",
        );
        if let Ok(output) = Output::parse(&self.exporters.parquet.output_dir) {
            problems.check(
                !output.is_remote() || !self.wal.dir.as_os_str().is_empty(),
                "wal.dir",
                "must be set when exporters.parquet.output_dir is an object store URL: the write-ahead log and the Parquet files waiting for upload stay on local disk; set it with --wal-dir DIR, RETRY_SPEND_WAL_DIR or [wal] dir in the --config file",
            );
        }
        problems.0
    }
}

/// Turns a toml error into one naming the origin and the dotted key the error points at. The
/// toml crate knows the key but only shows it as a source excerpt, which does not survive being
/// printed on one line in a log.
fn parse_error(text: &str, origin: &str, e: &toml::de::Error) -> ConfigError {
    let at = TomlErrorAt::new(text, e);
    ConfigError::Parse {
        origin: origin.to_owned(),
        key: at.key,
        message: at.message,
        location: at.location,
    }
}

/// Helpers for the config tests, here and beside each section: a section's keys are tested as
/// users meet them, in a file with its errors' wording.
#[cfg(test)]
pub(crate) mod testing {
    use super::{Config, ConfigError};

    pub(crate) fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::from_toml_str(text, "test.toml")
    }

    pub(crate) fn parse_err(text: &str) -> String {
        match parse(text) {
            Ok(c) => panic!("expected an error, got {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    /// The validation message for a config that differs from the default only by `edit`.
    pub(crate) fn invalid(edit: impl FnOnce(&mut Config)) -> String {
        let mut config = Config::default();
        edit(&mut config);
        match config.validate("test.toml") {
            Ok(()) => panic!("expected a validation error for {config:?}"),
            Err(e) => e.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{invalid, parse, parse_err};
    use super::*;
    use crate::config_kernel::{parse_duration_arg, MIB};

    const SHIPPED: &str = include_str!("../config/collector.toml");

    #[test]
    fn shipped_file_equals_defaults() {
        assert_eq!(parse(SHIPPED).unwrap(), Config::default());
    }

    #[test]
    fn shipped_file_loads_from_disk() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/collector.toml");
        assert_eq!(Config::load(&path).unwrap(), Config::default());
    }

    #[test]
    fn empty_file_equals_defaults() {
        assert_eq!(parse("").unwrap(), Config::default());
        Config::default().validate("defaults").unwrap();
    }

    #[test]
    fn defaults_are_the_documented_values() {
        let c = Config::default();
        assert_eq!(c.receivers.otlp.grpc_addr.to_string(), "127.0.0.1:4317");
        assert_eq!(c.receivers.otlp.http_addr.to_string(), "127.0.0.1:4318");
        assert_eq!(c.receivers.otlp.max_request_bytes, 4_194_304);
        assert_eq!(c.processors.retry_spend.group_wait, Duration::from_secs(10));
        assert_eq!(c.exporters.parquet.max_bytes_per_file, 134_217_728);
        assert_eq!(c.exporters.otlp_forward.endpoint, None);
        assert_eq!(c.exporters.otlp_forward.max_batch_bytes, 1_048_576);
        assert_eq!(c.telemetry.metrics_addr.to_string(), "127.0.0.1:9464");
        assert_eq!(c.service.shutdown_timeout, Duration::from_secs(30));
        assert!(!c.decisions.allow_unaudited, "decisions fail closed");
    }

    #[test]
    fn the_byte_budgets_derive_from_the_memory_limit_unless_set() {
        let c = Config::default();
        assert_eq!(c.service.memory_limit, 128 * MIB);
        assert_eq!(c.in_flight_limit(), 64 * MIB);
        let assembly = c.processors.retry_spend.assembly(c.service.memory_limit);
        assert_eq!(assembly.max_pending_bytes, 32 * MIB);

        let c = parse("[service]\nmemory_limit = 16777216\n").unwrap();
        assert_eq!(c.in_flight_limit(), 8 * MIB);
        let c = parse(
            "[service]\nmemory_limit = 16777216\n[receivers.otlp]\nmax_in_flight_bytes = 5242880\n",
        )
        .unwrap();
        assert_eq!(c.in_flight_limit(), 5 * MIB);

        let too_big = parse_err(
            "[service]\nmemory_limit = 8388608\n[processors.retry_spend]\nmax_pending_bytes = 16777216\n",
        );
        assert!(
            too_big.contains(
                "processors.retry_spend.max_pending_bytes: must not be above service.memory_limit"
            ),
            "{too_big}"
        );
        // Half of a small limit cannot take the largest request.
        let small = parse_err("[service]\nmemory_limit = 4194304\n");
        assert!(
            small.contains("receivers.otlp.max_in_flight_bytes: must be at least receivers.otlp.max_request_bytes"),
            "{small}"
        );
        assert!(parse_err("[service]\nmemory_limit = 1024\n").contains("service.memory_limit"));
    }

    #[test]
    fn durations_are_humantime_strings() {
        let c = parse(
            r#"
            [processors.retry_spend]
            group_wait = "500ms"
            [exporters.parquet]
            max_file_age = "1m"
            [service]
            shutdown_timeout = "2s"
            "#,
        )
        .unwrap();
        assert_eq!(
            c.processors.retry_spend.group_wait,
            Duration::from_millis(500)
        );
        assert_eq!(c.exporters.parquet.max_file_age, Duration::from_secs(60));
        assert_eq!(c.service.shutdown_timeout, Duration::from_secs(2));
    }

    #[test]
    fn partial_section_keeps_other_defaults() {
        let c = parse("[exporters.otlp_forward]\nmax_retries = 2\n").unwrap();
        assert_eq!(c.exporters.otlp_forward.max_retries, 2);
        assert_eq!(
            c.exporters.otlp_forward.timeout,
            OtlpForwardConfig::default().timeout
        );
    }

    #[test]
    fn unknown_key_error_names_file_and_key() {
        let msg = parse_err("[processors.retry_spend]\ngruop_wait = \"10s\"\n");
        assert!(msg.starts_with("test.toml: "), "{msg}");
        assert!(
            msg.contains("processors.retry_spend.gruop_wait: unknown field `gruop_wait`"),
            "{msg}"
        );
        assert!(msg.contains("line 2"), "{msg}");
    }

    #[test]
    fn unknown_section_error_names_it() {
        let msg = parse_err("[recievers.otlp]\ngrpc_addr = \"127.0.0.1:4317\"\n");
        assert!(
            msg.contains("recievers: unknown field `recievers`"),
            "{msg}"
        );
    }

    #[test]
    fn bad_duration_error_names_file_key_and_value() {
        let msg = parse_err("[processors.retry_spend]\ngroup_wait = \"10 parsecs\"\n");
        assert!(
            msg.starts_with(
                "test.toml: processors.retry_spend.group_wait: invalid duration \"10 parsecs\": "
            ),
            "{msg}"
        );
        assert!(
            msg.contains(r#"expected a duration string such as "500ms""#),
            "{msg}"
        );
    }

    #[test]
    fn bare_number_duration_says_what_was_expected() {
        let msg = parse_err("[exporters.otlp_forward]\ntimeout = 5\n");
        assert!(msg.contains("exporters.otlp_forward.timeout: "), "{msg}");
        assert!(
            msg.contains(r#"expected a duration string such as "500ms""#),
            "{msg}"
        );
    }

    #[test]
    fn bad_address_error_names_key() {
        let msg = parse_err("[telemetry]\nmetrics_addr = \"localhost\"\n");
        assert!(msg.contains("test.toml: telemetry.metrics_addr: "), "{msg}");
    }

    #[test]
    fn syntax_error_names_file_and_line() {
        let msg = parse_err("[service]\nshutdown_timeout = \n");
        assert!(msg.starts_with("test.toml: "), "{msg}");
        assert!(msg.contains("line 2"), "{msg}");
    }

    #[test]
    fn load_names_missing_file() {
        let err = Config::load(Path::new("/nonexistent/collector.toml")).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("/nonexistent/collector.toml: cannot read: "),
            "{err}"
        );
    }

    #[test]
    fn validation_runs_on_load() {
        let msg = parse_err("[processors.retry_spend]\ngroup_wait = \"0s\"\n");
        assert_eq!(
            msg,
            "test.toml: processors.retry_spend.group_wait: must be above zero"
        );
    }

    #[test]
    fn every_problem_is_listed() {
        let msg = invalid(|c| {
            c.exporters.parquet.max_rows_per_file = 0;
            c.exporters.parquet.row_group_rows = 0;
        });
        assert_eq!(
            msg,
            "test.toml: exporters.parquet.max_rows_per_file: must be above zero\n\
             test.toml: exporters.parquet.row_group_rows: must be above zero"
        );
    }

    #[test]
    fn listen_addresses_must_differ() {
        let msg = invalid(|c| c.receivers.otlp.http_addr = c.receivers.otlp.grpc_addr);
        assert!(
            msg.contains("receivers.otlp.http_addr: must differ"),
            "{msg}"
        );
        let msg = invalid(|c| c.telemetry.metrics_addr = c.receivers.otlp.http_addr);
        assert!(msg.contains("telemetry.metrics_addr: must differ"), "{msg}");
    }

    #[test]
    fn port_zero_addresses_may_repeat() {
        let mut c = Config::default();
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        c.receivers.otlp.grpc_addr = any;
        c.receivers.otlp.http_addr = any;
        c.telemetry.metrics_addr = any;
        c.validate("test.toml").unwrap();
    }

    #[test]
    fn directories_must_not_be_empty() {
        let msg = invalid(|c| c.processors.retry_spend.pricing_dir = PathBuf::new());
        assert!(msg.contains("processors.retry_spend.pricing_dir: must not be empty"));
        let msg = invalid(|c| c.exporters.parquet.output_dir = PathBuf::new());
        assert!(msg.contains("exporters.parquet.output_dir: must not be empty"));
    }

    #[test]
    fn an_object_store_output_needs_a_wal_dir() {
        let msg = invalid(|c| c.exporters.parquet.output_dir = PathBuf::from("s3://lake/llm"));
        assert!(
            msg.contains(
                "wal.dir: must be set when exporters.parquet.output_dir is an object store URL"
            ),
            "{msg}"
        );
        assert!(
            msg.contains("--wal-dir DIR, RETRY_SPEND_WAL_DIR or [wal] dir"),
            "{msg}"
        );
        let mut c = Config::default();
        c.apply(ServeOverrides {
            output_dir: Some(PathBuf::from("s3://lake/llm")),
            wal_dir: Some(PathBuf::from("/var/lib/retry-spend")),
            ..ServeOverrides::default()
        });
        c.validate("flags").unwrap();
        let c = parse(
            "[exporters.parquet]\noutput_dir = \"s3://lake/llm\"\ninstance_id = \"eu-1\"\n\n[exporters.parquet.object_store]\nendpoint = \"http://127.0.0.1:9000\"\nallow_http = true\npart_bytes = 8388608\n\n[wal]\ndir = \"/var/lib/retry-spend\"\n",
        )
        .unwrap();
        let os = &c.exporters.parquet.object_store;
        assert_eq!(os.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(os.allow_http, Some(true));
        assert_eq!(os.part_bytes, 8 * MIB);
    }

    #[test]
    fn shutdown_timeout_must_be_above_zero() {
        let msg = invalid(|c| c.service.shutdown_timeout = Duration::ZERO);
        assert!(msg.contains("service.shutdown_timeout: must be above zero"));
    }

    #[test]
    fn overrides_replace_file_values() {
        let mut c = parse("[exporters.otlp_forward]\nendpoint = \"http://a:4317\"\n").unwrap();
        let addr = |port| SocketAddr::from(([0, 0, 0, 0], port));
        c.apply(ServeOverrides {
            grpc_addr: Some(addr(1)),
            http_addr: Some(addr(2)),
            metrics_addr: Some(addr(3)),
            pricing_dir: Some(PathBuf::from("/etc/pricing")),
            policies_dir: Some(PathBuf::from("/etc/policies")),
            output_dir: Some(PathBuf::from("/var/lib/retry-spend")),
            instance_id: Some("collector-a".to_owned()),
            group_wait: Some(Duration::from_secs(20)),
            forward_endpoint: Some("http://b:4317".to_owned()),
            parquet_enabled: Some(false),
            wal_enabled: Some(false),
            wal_dir: Some(PathBuf::from("/var/lib/retry-spend-wal")),
            workers: Some(3),
        });
        assert_eq!(c.processors.retry_spend.worker_count(), 3);
        assert_eq!(c.wal.dir, Path::new("/var/lib/retry-spend-wal"));
        assert!(!c.exporters.parquet.enabled);
        assert!(!c.wal.enabled);
        assert_eq!(c.receivers.otlp.grpc_addr, addr(1));
        assert_eq!(c.receivers.otlp.http_addr, addr(2));
        assert_eq!(c.telemetry.metrics_addr, addr(3));
        assert_eq!(
            c.processors.retry_spend.pricing_dir,
            Path::new("/etc/pricing")
        );
        assert_eq!(
            c.processors.retry_spend.policies_dir.as_deref(),
            Some(Path::new("/etc/policies"))
        );
        assert_eq!(
            c.exporters.parquet.output_dir,
            Path::new("/var/lib/retry-spend")
        );
        assert_eq!(c.exporters.parquet.instance_id, "collector-a");
        assert_eq!(c.processors.retry_spend.group_wait, Duration::from_secs(20));
        assert_eq!(
            c.exporters.otlp_forward.endpoint.as_deref(),
            Some("http://b:4317")
        );
        c.validate("test.toml").unwrap();
    }

    #[test]
    fn empty_overrides_change_nothing() {
        let mut c = Config::default();
        c.apply(ServeOverrides::default());
        assert_eq!(c, Config::default());
    }

    #[test]
    fn empty_forward_endpoint_override_turns_forwarding_off() {
        let mut c = parse("[exporters.otlp_forward]\nendpoint = \"http://a:4317\"\n").unwrap();
        c.apply(ServeOverrides {
            forward_endpoint: Some(String::new()),
            ..ServeOverrides::default()
        });
        assert_eq!(c.exporters.otlp_forward.endpoint, None);
    }

    #[test]
    fn overrides_are_validated_again() {
        let mut c = Config::default();
        c.apply(ServeOverrides {
            group_wait: Some(Duration::ZERO),
            forward_endpoint: Some("grpc://x".to_owned()),
            ..ServeOverrides::default()
        });
        let msg = c.validate("flags").unwrap_err().to_string();
        assert!(
            msg.contains("flags: processors.retry_spend.group_wait"),
            "{msg}"
        );
        assert!(
            msg.contains("flags: exporters.otlp_forward.endpoint"),
            "{msg}"
        );
    }

    #[test]
    fn duration_arg_parses_humantime() {
        assert_eq!(parse_duration_arg("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration_arg("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration_arg("1m"), Ok(Duration::from_secs(60)));
        let err = parse_duration_arg("soon").unwrap_err();
        assert!(err.starts_with("invalid duration \"soon\": "), "{err}");
    }

    #[test]
    fn duration_arg_works_as_clap_value_parser() {
        use clap::Parser;

        #[derive(Parser)]
        struct Flags {
            #[arg(long, value_parser = parse_duration_arg)]
            group_wait: Option<Duration>,
        }
        let flags = Flags::try_parse_from(["serve", "--group-wait", "15s"]).unwrap();
        assert_eq!(flags.group_wait, Some(Duration::from_secs(15)));
        let err = Flags::try_parse_from(["serve", "--group-wait", "soon"])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("invalid duration \"soon\""), "{err}");
    }
}

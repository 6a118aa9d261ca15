//! `[processors.retry_spend]`: the processor the pipeline shards run — grouping attempts into
//! requests (the assembler's bounds), and pricing and judging them (snapshots, policies, rules).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::assemble::AssemblyBounds;
use crate::config_kernel::{duration, ConfigProblem, Problems, ABOVE_ZERO, MIB};
use crate::rules::RulesConfig;

/// `[processors]`: what happens between receiving and exporting.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProcessorsConfig {
    pub retry_spend: RetrySpendConfig,
}

impl ProcessorsConfig {
    pub fn validate(&self) -> Result<(), Vec<ConfigProblem>> {
        self.retry_spend.validate()
    }
}

/// `[processors.retry_spend]`: grouping attempts into requests and pricing them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetrySpendConfig {
    /// How long a request waits for missing spans after its latest span arrived.
    #[serde(deserialize_with = "duration::deserialize")]
    pub group_wait: Duration,
    /// Requests buffered while waiting; the bound on the assembler's memory.
    pub max_pending_requests: usize,
    /// Recently evaluated requests remembered so a late duplicate span is not a new request.
    pub finished_cache_requests: usize,
    /// Estimated bytes of pending requests and the finished-request cache together (all
    /// shards). Unset: a quarter of `service.memory_limit`.
    pub max_pending_bytes: Option<u64>,
    /// A snapshot checked more than this many whole days before a span start is stale.
    pub max_pricing_age_days: i64,
    /// Directory of pricing snapshot files, all loaded at start.
    pub pricing_dir: PathBuf,
    /// Directory of envelope policy files; `None` means `config/policies`, which may then be
    /// missing (no policies). A directory named here must exist.
    pub policies_dir: Option<PathBuf>,
    /// Pipeline shards, each a thread owning the requests of its traces; 0: one per core the
    /// process may use.
    pub workers: usize,
}

impl Default for RetrySpendConfig {
    fn default() -> Self {
        let assembly = AssemblyBounds::default();
        RetrySpendConfig {
            group_wait: assembly.group_wait,
            max_pending_requests: assembly.max_pending_requests,
            finished_cache_requests: assembly.finished_cache_requests,
            max_pending_bytes: None,
            max_pricing_age_days: 30,
            pricing_dir: PathBuf::from("config/pricing"),
            workers: 0,
            policies_dir: None,
        }
    }
}

impl RetrySpendConfig {
    pub fn validate(&self) -> Result<(), Vec<ConfigProblem>> {
        let mut problems = Problems::default();
        problems.check(
            !self.group_wait.is_zero(),
            "processors.retry_spend.group_wait",
            ABOVE_ZERO,
        );
        problems.check(
            self.max_pending_requests > 0,
            "processors.retry_spend.max_pending_requests",
            ABOVE_ZERO,
        );
        problems.check(
            self.max_pending_bytes.is_none_or(|bytes| bytes >= MIB),
            "processors.retry_spend.max_pending_bytes",
            "must be at least 1 MiB (1048576)",
        );
        problems.check(
            self.max_pricing_age_days >= 0,
            "processors.retry_spend.max_pricing_age_days",
            "must not be negative",
        );
        problems.check(
            !self.pricing_dir.as_os_str().is_empty(),
            "processors.retry_spend.pricing_dir",
            "must not be empty",
        );
        problems.check(
            self.policies_dir
                .as_ref()
                .is_none_or(|dir| !dir.as_os_str().is_empty()),
            "processors.retry_spend.policies_dir",
            "must not be empty; leave it out for the default config/policies",
        );
        problems.finish()
    }

    /// The number of pipeline shards to run.
    pub fn worker_count(&self) -> usize {
        match self.workers {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }

    /// The assemblers' bounds from this section, for the whole process; `memory_limit` is
    /// `service.memory_limit`, a quarter of which is the byte budget unless one is set.
    pub fn assembly(&self, memory_limit: u64) -> AssemblyBounds {
        AssemblyBounds {
            group_wait: self.group_wait,
            max_pending_requests: self.max_pending_requests,
            finished_cache_requests: self.finished_cache_requests,
            max_pending_bytes: self.max_pending_bytes.unwrap_or(memory_limit / 4),
        }
    }

    /// The rules' settings from this section.
    pub fn rules(&self) -> RulesConfig {
        RulesConfig {
            max_pricing_age_days: self.max_pricing_age_days,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::testing::{invalid, parse};
    use crate::config::Config;

    #[test]
    fn group_wait_must_be_above_zero() {
        let msg = invalid(|c| c.processors.retry_spend.group_wait = Duration::ZERO);
        assert!(msg.contains("processors.retry_spend.group_wait: must be above zero"));
    }

    #[test]
    fn max_pending_requests_must_be_above_zero() {
        let msg = invalid(|c| c.processors.retry_spend.max_pending_requests = 0);
        assert!(msg.contains("processors.retry_spend.max_pending_requests: must be above zero"));
    }

    #[test]
    fn finished_cache_may_be_zero() {
        let mut c = Config::default();
        c.processors.retry_spend.finished_cache_requests = 0;
        c.validate("test.toml").unwrap();
    }

    #[test]
    fn max_pricing_age_days_must_not_be_negative() {
        let msg = invalid(|c| c.processors.retry_spend.max_pricing_age_days = -1);
        assert!(msg.contains("processors.retry_spend.max_pricing_age_days: must not be negative"));
        let mut c = Config::default();
        c.processors.retry_spend.max_pricing_age_days = 0;
        c.validate("test.toml").unwrap();
    }

    #[test]
    fn policies_dir_defaults_to_none_and_is_read_from_the_file() {
        assert_eq!(Config::default().processors.retry_spend.policies_dir, None);
        let c = parse("[processors.retry_spend]\npolicies_dir = \"/etc/policies\"\n").unwrap();
        assert_eq!(
            c.processors.retry_spend.policies_dir.as_deref(),
            Some(Path::new("/etc/policies"))
        );
        let msg = invalid(|c| c.processors.retry_spend.policies_dir = Some(PathBuf::new()));
        assert!(
            msg.contains("processors.retry_spend.policies_dir: must not be empty"),
            "{msg}"
        );
    }
}

//! The config kernel every section's `validate` and deserializers use: problems, sizes,
//! durations. A leaf: it knows no section, so sections and `config` (which composes them) never
//! import each other in a circle.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

pub(crate) const MIB: u64 = 1024 * 1024;

/// The most common validation problem.
/// The request size most OTLP receivers accept (the OpenTelemetry Collector's gRPC default).
/// A forwarded batch at or above it would be refused downstream.
pub const OTLP_RECEIVE_LIMIT_BYTES: u64 = 4 * MIB;

pub(crate) const ABOVE_ZERO: &str = "must be above zero";

/// One value that fails validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// Dotted key path, e.g. `exporters.otlp_forward.max_batch_bytes`.
    pub key: &'static str,
    pub problem: String,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.problem)
    }
}

/// Problems on one line, `; `-separated, for an error from a component given a config that was
/// not validated first.
pub fn join_problems(problems: &[ConfigProblem]) -> String {
    let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
    problems.join("; ")
}

/// The problems of one section or more: every one is reported, not only the first, so a user
/// fixes a config in one go.
#[derive(Debug, Default)]
pub(crate) struct Problems(pub(crate) Vec<ConfigProblem>);

impl Problems {
    /// Records `problem` with `key` unless `ok`.
    pub(crate) fn check(&mut self, ok: bool, key: &'static str, problem: &str) {
        if !ok {
            self.0.push(ConfigProblem {
                key,
                problem: problem.to_owned(),
            });
        }
    }

    /// Records a section's problems.
    pub(crate) fn add(&mut self, section: Result<(), Vec<ConfigProblem>>) {
        if let Err(problems) = section {
            self.0.extend(problems);
        }
    }

    pub(crate) fn finish(self) -> Result<(), Vec<ConfigProblem>> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(self.0)
        }
    }
}

/// Parses a duration such as `500ms`, `2s` or `1m`; usable as a clap `value_parser`.
pub fn parse_duration_arg(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| duration::problem(s, &e))
}

pub(crate) fn non_empty(s: String) -> Option<String> {
    if s.is_empty() {
        None
    } else {
        Some(s)
    }
}

pub(crate) fn deserialize_endpoint<'de, D>(deserializer: D) -> Result<Option<String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Ok(non_empty(String::deserialize(deserializer)?))
}

/// Durations are written as humantime strings (`"500ms"`, `"2s"`, `"1m"`), never bare numbers,
/// so a reader never has to guess the unit.
pub(crate) mod duration {
    use std::fmt;
    use std::time::Duration;

    use serde::de::{self, Visitor};

    const EXPECTED: &str = r#"a duration string such as "500ms", "2s" or "1m""#;

    pub(crate) fn problem(s: &str, e: &humantime::DurationError) -> String {
        format!("invalid duration {s:?}: {e}; expected {EXPECTED}")
    }

    pub(crate) fn deserialize<'de, D>(deserializer: D) -> Result<Duration, D::Error>
    where
        D: de::Deserializer<'de>,
    {
        deserializer.deserialize_str(DurationVisitor)
    }

    struct DurationVisitor;

    impl Visitor<'_> for DurationVisitor {
        type Value = Duration;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(EXPECTED)
        }

        fn visit_str<E: de::Error>(self, s: &str) -> Result<Duration, E> {
            humantime::parse_duration(s).map_err(|e| E::custom(problem(s, &e)))
        }
    }
}

//! Envelope policies (SPEC §2, "Envelope policies"): reviewed TOML files that give an envelope to
//! requests whose spans carry none, so services whose SDK writes no envelope are still audited.
//!
//! Loading is strict (a file that does not parse, an unknown key, a bad glob, a duplicate name or
//! a `latest` version with a date fails, naming file and key), because a policy decides money
//! and is changed in pull requests. Choosing a policy for a request is pure: [`PolicySet::select`].

mod file;
mod glob;
pub mod review;

pub use glob::Glob;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::contract::{AttributeKeys, EnvelopeFields, SpanFacts};

/// `pricing_version = "latest"`: pin, per request, the newest snapshot checked on or before
/// attempt 0's start date.
pub const LATEST: &str = "latest";

/// A policy file, or one key of it, that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("policy file {}: {}{problem}{}", path.display(), key_prefix(key), location_suffix(*location))]
pub struct PolicyError {
    pub path: PathBuf,
    /// Dotted key, e.g. `policy[1].match.service` (policies counted from 0 in their file);
    /// empty for whole-file problems.
    pub key: String,
    pub problem: String,
    /// 1-based (line, column), when the TOML parser located the problem.
    pub location: Option<(usize, usize)>,
}

fn key_prefix(key: &str) -> String {
    if key.is_empty() {
        String::new()
    } else {
        format!("{key}: ")
    }
}

fn location_suffix(location: Option<(usize, usize)>) -> String {
    location.map_or_else(String::new, |(line, column)| {
        format!(" (line {line}, column {column})")
    })
}

impl PolicyError {
    pub fn new(path: &Path, key: &str, problem: impl Into<String>) -> PolicyError {
        PolicyError {
            path: path.to_path_buf(),
            key: key.to_owned(),
            problem: problem.into(),
            location: None,
        }
    }
}

/// Every problem found in a policies directory, one per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct PolicyErrors(pub Vec<PolicyError>);

impl fmt::Display for PolicyErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// One `[[policy]]`: when it applies, and the envelope it gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Unique across the directory; rows it decides carry `envelope_source` `policy:<name>`.
    pub name: String,
    /// The file it came from, for listings and errors.
    pub path: PathBuf,
    /// Glob on the resource's `service.name`.
    pub service: Option<Glob>,
    /// Glob on the request's `retry_spend.task.type`.
    pub task_type: Option<Glob>,
    /// Glob on attempt 0's `gen_ai.request.model`.
    pub model: Option<Glob>,
    /// Attributes some span of the request (or its resource) must have, value in string form.
    pub attributes: Vec<(String, String)>,
    /// Always `present`; `pricing_version` may be [`LATEST`].
    pub envelope: EnvelopeFields,
}

/// What a request is matched on.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// Attempt 0's resource `service.name`.
    pub service: &'a str,
    pub task_type: Option<&'a str>,
    /// Attempt 0's `gen_ai.request.model`.
    pub model: Option<&'a str>,
    /// Every span of the request, read with the set's [`PolicySet::attribute_keys`]. None (as
    /// for the decision service): a policy with `match.attributes` never matches.
    pub spans: &'a [&'a SpanFacts],
}

impl Policy {
    /// Whether the envelope pins the newest snapshot per request rather than a named one.
    pub fn pins_latest(&self) -> bool {
        self.envelope.pricing_version.as_deref() == Some(LATEST)
    }

    /// Every `match` key given holds. An absent task type or model satisfies no pattern, not
    /// even `*`: the pattern asks for a value.
    pub fn matches(&self, subject: &Subject<'_>) -> bool {
        let holds = |glob: &Option<Glob>, value: Option<&str>| {
            glob.as_ref()
                .is_none_or(|g| value.is_some_and(|v| g.matches(v)))
        };
        holds(&self.service, Some(subject.service))
            && holds(&self.task_type, subject.task_type)
            && holds(&self.model, subject.model)
            && self.attributes.iter().all(|(key, value)| {
                subject
                    .spans
                    .iter()
                    .any(|span| span.captured.has(key, value))
            })
    }
}

/// Every policy of a directory, in file name order, then file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicySet {
    policies: Vec<Policy>,
    keys: AttributeKeys,
}

impl PolicySet {
    /// Parses policy files given as (path, text), in the order given; `path` only names them.
    pub fn parse(
        files: impl IntoIterator<Item = (PathBuf, String)>,
    ) -> Result<PolicySet, PolicyErrors> {
        let mut errors = Vec::new();
        let mut policies: Vec<Policy> = Vec::new();
        let mut names: HashMap<String, (PathBuf, String)> = HashMap::new();
        for (path, text) in files {
            match file::parse(&path, &text) {
                Ok(parsed) => {
                    for (key, policy) in parsed {
                        if let Some((first_path, first_key)) = names.get(&policy.name) {
                            errors.push(PolicyError::new(
                                &path,
                                &format!("{key}.name"),
                                format!(
                                    "{:?} is already the name of {} {first_key}",
                                    policy.name,
                                    first_path.display()
                                ),
                            ));
                            continue;
                        }
                        names.insert(policy.name.clone(), (path.clone(), key));
                        policies.push(policy);
                    }
                }
                Err(mut file_errors) => errors.append(&mut file_errors),
            }
        }
        if !errors.is_empty() {
            return Err(PolicyErrors(errors));
        }
        let keys = AttributeKeys::new(
            policies
                .iter()
                .flat_map(|p| p.attributes.iter().map(|(key, _)| key.clone())),
        );
        Ok(PolicySet { policies, keys })
    }

    /// The first policy that matches.
    pub fn select(&self, subject: &Subject<'_>) -> Option<&Policy> {
        self.policies.iter().find(|p| p.matches(subject))
    }

    pub fn policies(&self) -> &[Policy] {
        &self.policies
    }

    /// The keys any policy's `match.attributes` names: what the span reader must keep.
    pub fn attribute_keys(&self) -> &AttributeKeys {
        &self.keys
    }

    pub fn len(&self) -> usize {
        self.policies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }
}

#[cfg(test)]
mod tests;

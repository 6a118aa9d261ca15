//! Why a snapshot file cannot be used.

use std::fmt;
use std::path::{Path, PathBuf};

/// A snapshot file that cannot be used, naming the file and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pricing file {}: {}{problem}", path.display(), field_prefix(field))]
pub struct PricingError {
    pub path: PathBuf,
    /// Dotted JSON path of the offending field, empty for whole-file problems.
    pub field: String,
    pub problem: String,
}

fn field_prefix(field: &str) -> String {
    if field.is_empty() {
        String::new()
    } else {
        format!("{field}: ")
    }
}

impl PricingError {
    pub fn new(path: &Path, field: &str, problem: impl Into<String>) -> Self {
        PricingError {
            path: path.to_path_buf(),
            field: field.to_owned(),
            problem: problem.into(),
        }
    }
}

/// Every problem found in a pricing directory, one per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct PricingErrors(pub Vec<PricingError>);

impl fmt::Display for PricingErrors {
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

//! The pricing book: every snapshot of a directory, keyed by pricing version.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use super::snapshot::Snapshot;

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

/// All loaded snapshots. Old snapshots stay so old traces re-price identically.
#[derive(Debug, Clone, Default)]
pub struct PricingBook {
    by_version: HashMap<String, Snapshot>,
}

impl PricingBook {
    /// Loads every `*.json` file of `dir`, reporting every bad file rather than the first.
    pub fn load_dir(dir: &Path) -> Result<PricingBook, PricingErrors> {
        let entries = std::fs::read_dir(dir).map_err(|e| {
            PricingErrors(vec![PricingError::new(
                dir,
                "",
                format!("cannot read directory: {e}"),
            )])
        })?;
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|ext| ext == "json") && p.is_file())
            .collect();
        paths.sort();

        let mut errors = Vec::new();
        let mut book = PricingBook::default();
        for path in paths {
            match Snapshot::from_file(&path) {
                Ok(snapshot) => {
                    if let Err(e) = book.insert(snapshot) {
                        errors.push(e);
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            Ok(book)
        } else {
            Err(PricingErrors(errors))
        }
    }

    /// Adds a snapshot; the same version twice is fine only with byte-identical content.
    pub fn insert(&mut self, snapshot: Snapshot) -> Result<(), PricingError> {
        if let Some(existing) = self.by_version.get(&snapshot.version) {
            if existing.digest == snapshot.digest {
                return Ok(());
            }
            return Err(PricingError::new(
                &snapshot.path,
                "pricing_version",
                format!(
                    "{:?} is also claimed by {} with different content",
                    snapshot.version,
                    existing.path.display()
                ),
            ));
        }
        self.by_version.insert(snapshot.version.clone(), snapshot);
        Ok(())
    }

    pub fn get(&self, version: &str) -> Option<&Snapshot> {
        self.by_version.get(version)
    }

    pub fn len(&self) -> usize {
        self.by_version.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_version.is_empty()
    }

    /// Snapshots ordered by checked date, then version, for stable listings.
    pub fn snapshots(&self) -> Vec<&Snapshot> {
        let mut all: Vec<&Snapshot> = self.by_version.values().collect();
        all.sort_by(|a, b| (a.checked_at, &a.version).cmp(&(b.checked_at, &b.version)));
        all
    }
}

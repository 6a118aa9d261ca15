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

#[cfg(test)]
mod tests {
    use super::*;

    const SHIPPED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/pricing");

    fn write(dir: &Path, name: &str, body: &str) {
        std::fs::write(dir.join(name), body).unwrap();
    }

    fn snapshot_json(version: &str, models: &str) -> String {
        format!(
            r#"{{"pricing_source": "https://aiwave.live/api/pricing", "pricing_checked_at": "2026-08-22",
               "pricing_version": "{version}", "currency": "USD", "unit": "per_million_tokens",
               "group_ratio": {{"default": "3", "vip": 1}}, "models": {{{models}}}}}"#
        )
    }

    fn single_error(body: &str) -> PricingError {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "bad.json", body);
        let mut errors = PricingBook::load_dir(dir.path()).unwrap_err().0;
        assert_eq!(errors.len(), 1, "{errors:?}");
        errors.remove(0)
    }

    #[test]
    fn shipped_snapshot_loads_with_the_seed_rows() {
        let book = PricingBook::load_dir(Path::new(SHIPPED)).unwrap();
        let s = book
            .get("a42d372ccf0b5dd13ecf71203521f9d2")
            .expect("seed snapshot");
        assert_eq!(s.models.len(), 6);
        assert_eq!(s.group_ratio["default"].to_string(), "3");
        assert_eq!(s.models["qwen3.5-122b-a10b"].cached_input, None);
        assert_eq!(
            s.models["kimi-k2.7-code"].cached_input.unwrap().to_string(),
            "0.150794"
        );
        assert_eq!(s.models["glm-5"].family.as_deref(), Some("glm"));
        assert_eq!(s.digest.len(), 64);
    }

    #[test]
    fn numbers_are_accepted_and_read_exactly() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "a.json",
            &snapshot_json("v", r#""m": {"input": 0.1234567891, "output": 2}"#),
        );
        let book = PricingBook::load_dir(dir.path()).unwrap();
        assert_eq!(
            book.get("v").unwrap().models["m"].input.to_string(),
            "0.1234567891"
        );
    }

    #[test]
    fn bad_decimal_names_file_and_field() {
        let e = single_error(&snapshot_json(
            "v",
            r#""glm-5": {"input": "cheap", "output": "1"}"#,
        ));
        assert_eq!(e.field, "models.glm-5.input");
        assert!(
            e.to_string()
                .contains("bad.json: models.glm-5.input: \"cheap\" is not a decimal"),
            "{e}"
        );
    }

    #[test]
    fn negative_price_is_an_error() {
        let e = single_error(&snapshot_json(
            "v",
            r#""m": {"input": "-0.1", "output": "1"}"#,
        ));
        assert_eq!(e.field, "models.m.input");
        assert!(e.problem.contains("negative"));
    }

    #[test]
    fn too_many_decimal_places_is_an_error() {
        let e = single_error(&snapshot_json(
            "v",
            r#""m": {"input": "0.12345678901", "output": "1"}"#,
        ));
        assert_eq!(e.field, "models.m.input");
        let e = single_error(&snapshot_json("v", "").replace(r#""vip": 1"#, r#""vip": "1.005""#));
        assert_eq!(e.field, "group_ratio.vip");
    }

    #[test]
    fn missing_field_is_an_error() {
        let e = single_error(&snapshot_json("v", r#""m": {"input": "1"}"#));
        assert_eq!(
            (e.field.as_str(), e.problem.as_str()),
            ("models.m.output", "missing")
        );
        let e = single_error(&snapshot_json("v", "").replace(r#""pricing_version": "v","#, ""));
        assert_eq!(e.field, "pricing_version");
    }

    #[test]
    fn other_currency_or_unit_is_an_error() {
        assert_eq!(
            single_error(&snapshot_json("v", "").replace("USD", "EUR")).field,
            "currency"
        );
        assert_eq!(
            single_error(&snapshot_json("v", "").replace("per_million_tokens", "per_token")).field,
            "unit"
        );
    }

    #[test]
    fn malformed_json_is_an_error() {
        assert!(single_error("{").problem.starts_with("not valid JSON"));
    }

    #[test]
    fn two_files_claiming_one_version_with_different_content() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "a.json",
            &snapshot_json("v", r#""m": {"input": "1", "output": "1"}"#),
        );
        write(
            dir.path(),
            "b.json",
            &snapshot_json("v", r#""m": {"input": "2", "output": "1"}"#),
        );
        let errors = PricingBook::load_dir(dir.path()).unwrap_err().0;
        assert_eq!(errors.len(), 1);
        assert!(errors[0].path.ends_with("b.json"));
        assert!(errors[0].problem.contains("a.json"));
    }

    #[test]
    fn identical_copies_of_one_version_are_fine() {
        let dir = tempfile::tempdir().unwrap();
        let body = snapshot_json("v", r#""m": {"input": "1", "output": "1"}"#);
        write(dir.path(), "a.json", &body);
        write(dir.path(), "b.json", &body);
        assert_eq!(PricingBook::load_dir(dir.path()).unwrap().len(), 1);
    }

    #[test]
    fn every_bad_file_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.json", "{");
        write(dir.path(), "b.json", "[]");
        write(dir.path(), "notes.txt", "ignored");
        assert_eq!(PricingBook::load_dir(dir.path()).unwrap_err().0.len(), 2);
    }
}

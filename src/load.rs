//! Reading pricing snapshots and envelope policies from disk: the core parses what this reads.

use std::io;
use std::path::{Path, PathBuf};

use crate::policy::{PolicyError, PolicyErrors, PolicySet};
use crate::pricing::{PricingBook, PricingError, PricingErrors, Snapshot};

/// Where policies are read from when neither the config, `--policies` nor
/// `RETRY_SPEND_POLICIES_DIR` names a directory. Missing, it means no policies.
pub const DEFAULT_POLICIES_DIR: &str = "config/policies";

/// Loads every `*.json` file of `dir`, reporting every bad file rather than the first.
pub fn pricing_dir(dir: &Path) -> Result<PricingBook, PricingErrors> {
    let unreadable = |e: io::Error| {
        PricingErrors(vec![PricingError::new(
            dir,
            "",
            format!("cannot read directory: {e}"),
        )])
    };
    let paths = files_with_extension(dir, "json").map_err(unreadable)?;
    let mut errors = Vec::new();
    let mut files = Vec::with_capacity(paths.len());
    for path in paths {
        match std::fs::read(&path) {
            Ok(bytes) => files.push((path, bytes)),
            Err(e) => errors.push(PricingError::new(&path, "", format!("cannot read: {e}"))),
        }
    }
    match PricingBook::from_files(files) {
        Ok(book) if errors.is_empty() => Ok(book),
        Ok(_) => Err(PricingErrors(errors)),
        Err(PricingErrors(more)) => {
            errors.extend(more);
            Err(PricingErrors(errors))
        }
    }
}

/// One snapshot file.
pub fn snapshot_file(path: &Path) -> Result<Snapshot, PricingError> {
    let bytes = std::fs::read(path)
        .map_err(|e| PricingError::new(path, "", format!("cannot read: {e}")))?;
    Snapshot::from_bytes(path, &bytes)
}

/// Loads the configured directory; `None` means [`DEFAULT_POLICIES_DIR`], which may be missing
/// (no policies). A directory that was named must exist.
pub fn policies(dir: Option<&Path>) -> Result<PolicySet, PolicyErrors> {
    match dir {
        Some(dir) => policies_dir(dir, true),
        None => policies_dir(Path::new(DEFAULT_POLICIES_DIR), false),
    }
}

/// Loads every `*.toml` file of `dir` in name order, reporting every problem rather than the
/// first. A missing `dir` is an error only when `required`.
pub fn policies_dir(dir: &Path, required: bool) -> Result<PolicySet, PolicyErrors> {
    let paths = match files_with_extension(dir, "toml") {
        Ok(paths) => paths,
        Err(e) if e.kind() == io::ErrorKind::NotFound && !required => {
            return Ok(PolicySet::default());
        }
        Err(e) => {
            return Err(PolicyErrors(vec![PolicyError::new(
                dir,
                "",
                format!("cannot read directory: {e}"),
            )]))
        }
    };
    let mut errors = Vec::new();
    let mut files = Vec::with_capacity(paths.len());
    for path in paths {
        match std::fs::read_to_string(&path) {
            Ok(text) => files.push((path, text)),
            Err(e) => errors.push(PolicyError::new(&path, "", format!("cannot read: {e}"))),
        }
    }
    match PolicySet::parse(files) {
        Ok(set) if errors.is_empty() => Ok(set),
        Ok(_) => Err(PolicyErrors(errors)),
        Err(PolicyErrors(more)) => {
            errors.extend(more);
            Err(PolicyErrors(errors))
        }
    }
}

/// The regular files of `dir` named `*.<extension>`, in name order.
fn files_with_extension(dir: &Path, extension: &str) -> io::Result<Vec<PathBuf>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|ext| ext == extension) && p.is_file())
        .collect();
    paths.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_dir_reads_toml_files_in_name_order() {
        let dir = tempfile::tempdir().unwrap();
        let policy = |name: &str| format!("[[policy]]\nname = \"{name}\"\n[policy.envelope]\n");
        std::fs::write(dir.path().join("b.toml"), policy("from-b")).unwrap();
        std::fs::write(dir.path().join("a.toml"), policy("from-a")).unwrap();
        std::fs::write(dir.path().join("c.toml.bak"), "not = [toml").unwrap();
        std::fs::write(dir.path().join("README.md"), "# policies").unwrap();
        let set = policies_dir(dir.path(), true).unwrap();
        let names: Vec<&str> = set.policies().iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["from-a", "from-b"]);
        assert!(set.attribute_keys().is_empty());
    }

    #[test]
    fn a_missing_directory_is_no_policies_only_by_default() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("policies");
        assert_eq!(policies_dir(&missing, false).unwrap(), PolicySet::default());
        let errors = policies_dir(&missing, true).unwrap_err();
        assert!(
            errors.to_string().contains("cannot read directory"),
            "{errors}"
        );
        assert!(errors.to_string().contains("policies"), "{errors}");
    }

    #[test]
    fn nothing_ships_in_the_default_policies_directory() {
        let default_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(DEFAULT_POLICIES_DIR);
        assert!(policies_dir(&default_dir, false).unwrap().is_empty());
    }

    #[test]
    fn every_bad_snapshot_file_is_reported_and_other_files_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.json"), "{").unwrap();
        std::fs::write(dir.path().join("b.json"), "[]").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
        assert_eq!(pricing_dir(dir.path()).unwrap_err().0.len(), 2);
        let missing = pricing_dir(&dir.path().join("nope"))
            .unwrap_err()
            .to_string();
        assert!(missing.contains("cannot read directory"), "{missing}");
    }
}

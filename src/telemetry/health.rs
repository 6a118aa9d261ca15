//! What `/healthz` reports: the problems components have raised and not yet cleared.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Current problems, one per component.
///
/// A component raises a problem when it cannot do its job (the Parquet directory is not
/// writable, the downstream endpoint refuses spans) and clears it once it can again, so a
/// load balancer or orchestrator sees the collector unhealthy exactly while something is wrong.
#[derive(Debug, Default)]
pub struct Health {
    problems: Mutex<BTreeMap<&'static str, String>>,
}

impl Health {
    pub fn new() -> Arc<Health> {
        Arc::new(Health::default())
    }

    /// Records (or replaces) the problem of `component`.
    pub fn set_problem(&self, component: &'static str, message: String) {
        self.problems().insert(component, message);
    }

    /// Forgets the problem of `component`, if it had one.
    pub fn clear_problem(&self, component: &'static str) {
        self.problems().remove(component);
    }

    /// The problem `component` has raised, if any.
    pub fn problem(&self, component: &'static str) -> Option<String> {
        self.problems().get(component).cloned()
    }

    /// `Ok` when no component has a problem; otherwise every problem as `component: message`,
    /// one per line, sorted by component so repeated checks read the same.
    pub fn status(&self) -> Result<(), String> {
        let problems = self.problems();
        if problems.is_empty() {
            return Ok(());
        }
        let lines: Vec<String> = problems
            .iter()
            .map(|(component, message)| format!("{component}: {message}"))
            .collect();
        Err(lines.join("\n"))
    }

    /// The problems are plain data, valid even if a thread panicked while holding the lock.
    fn problems(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, String>> {
        self.problems.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

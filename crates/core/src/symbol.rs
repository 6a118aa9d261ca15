//! Shared text: model names, providers, families, error types, services. The span reader, the
//! pricing snapshots and the rows all hold it, so it lives below all of them.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

/// Text that many spans repeat (models, providers, families, error types): read once per
/// distinct value and thread, then shared, so that holding, evaluating and remembering a span
/// copies a pointer where it copied the text. A thin pointer (its length lives with the text):
/// a span holds eight of them, and `Arc<str>`'s 16 bytes each were a fifth of every held
/// attempt (BENCHMARKS.md, issue 18, seventeenth pass).
pub type Symbol = arcstr::ArcStr;

/// Symbols a reading thread keeps; past it, it starts again (a client sending a new model
/// name on every span gets fresh allocations, never an unbounded table).
const SYMBOLS_PER_THREAD: usize = 4096;
/// Longer values are not kept: no model name is this long, and a hostile one should not stay.
const SYMBOL_MAX_LEN: usize = 256;

/// Bytes the process may spend on permanent symbols (see [`symbol`]), counting each one's text,
/// its 16-byte header and its table entry. A deployment sees dozens of models, providers and
/// services, a few KiB; a client inventing a name per span spends this once, then gets counted
/// symbols as before.
const PERMANENT_BYTES: usize = 1 << 20;
const PERMANENT_OVERHEAD: usize = 32;

thread_local! {
    static SYMBOLS: std::cell::RefCell<HashSet<Symbol, ahash::RandomState>> =
        Default::default();
}

/// The process's permanent symbols: every thread finds the same one, so none is made twice.
static PERMANENT: Permanent = Permanent::new(PERMANENT_BYTES);

/// Permanent symbols within a budget of bytes.
struct Permanent {
    /// The symbols made, and the bytes they cost.
    table: Mutex<(Option<HashSet<Symbol, ahash::RandomState>>, usize)>,
    budget: usize,
}

/// The shared copy of `text` (see [`Symbol`]).
///
/// Within `PERMANENT_BYTES` (1 MiB) the copy is permanent (`ArcStr::leak`): cloning and
/// dropping it touch no reference count. A row clones a dozen symbols and drops them on another thread than
/// the one that read them, and those counts' atomic updates, their cache lines moving between
/// cores, were about 5% of `replay` (BENCHMARKS.md, issue 18, twenty-first pass).
pub fn symbol(text: &str) -> Symbol {
    if text.len() > SYMBOL_MAX_LEN {
        return Symbol::from(text);
    }
    SYMBOLS.with(|table| {
        let mut known = table.borrow_mut();
        if let Some(shared) = known.get(text) {
            return shared.clone();
        }
        if known.len() >= SYMBOLS_PER_THREAD {
            known.clear();
        }
        let shared = PERMANENT.get(text).unwrap_or_else(|| Symbol::from(text));
        known.insert(shared.clone());
        shared
    })
}

impl Permanent {
    const fn new(budget: usize) -> Permanent {
        Permanent {
            table: Mutex::new((None, 0)),
            budget,
        }
    }

    /// The permanent symbol of `text`, made now if the budget allows; `None` once it is spent.
    /// Only a thread's first sight of a value comes here, so the lock is rarely taken.
    fn get(&self, text: &str) -> Option<Symbol> {
        let mut guard = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let (table, spent) = &mut *guard;
        let table = table.get_or_insert_with(HashSet::default);
        if let Some(shared) = table.get(text) {
            return Some(shared.clone());
        }
        let cost = text.len() + PERMANENT_OVERHEAD;
        if *spent + cost > self.budget {
            return None;
        }
        *spent += cost;
        let shared = Symbol::from(text);
        shared.leak();
        table.insert(shared.clone());
        Some(shared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symbol_is_one_permanent_copy_across_threads() {
        let here = symbol("symbol-test-model");
        let there = std::thread::spawn(|| symbol("symbol-test-model"))
            .join()
            .expect("the thread interns");
        assert_eq!(here, "symbol-test-model");
        assert!(Symbol::is_static(&here));
        assert!(Symbol::ptr_eq(&here, &there));
    }

    #[test]
    fn long_values_are_neither_kept_nor_permanent() {
        let long = "m".repeat(SYMBOL_MAX_LEN + 1);
        let symbol = symbol(&long);
        assert_eq!(symbol, long.as_str());
        assert!(!Symbol::is_static(&symbol));
    }

    #[test]
    fn past_the_budget_symbols_are_counted_again() {
        let permanent = Permanent::new(2 * PERMANENT_OVERHEAD + 8);
        let first = permanent.get("model-a").expect("within the budget");
        assert!(Symbol::is_static(&first));
        let again = permanent.get("model-a").expect("already made");
        assert!(Symbol::ptr_eq(&first, &again));
        assert!(permanent.get("model-b").is_none(), "past the budget");
        assert!(
            permanent.get("m").is_some(),
            "what is left still fits a short one"
        );
    }
}

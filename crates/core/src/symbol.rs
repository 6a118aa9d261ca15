//! Shared text: model names, providers, families, error types, services. The span reader, the
//! pricing snapshots and the rows all hold it, so it lives below all of them.

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

thread_local! {
    static SYMBOLS: std::cell::RefCell<std::collections::HashSet<Symbol, ahash::RandomState>> =
        Default::default();
}

/// The shared copy of `text` (see [`Symbol`]).
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
        let shared = Symbol::from(text);
        known.insert(shared.clone());
        shared
    })
}

//! One copy of every attempt, however many times it was written.
//!
//! The same attempt can reach one output twice: the same spans replayed twice into it, an export
//! sent again after a restart. Each copy is a row with the same (`trace_id`, `span_id`), in
//! another file. A file may also hold several rows of one span legitimately (tries inferred from
//! one call's span share its id, SPEC §2), so copies are told apart by file, not by row: for each
//! (`trace_id`, `span_id`) the rows of one file are kept, all of them, and those of every other
//! file are left out. The file kept is the one modified last, then (a tie) the one with the
//! greatest name: the latest write of the attempt.
//!
//! Files are offered newest first, so the first file that has a key is the one that keeps it,
//! and a single pass over the files is enough. One key per attempt is held in memory (about
//! 50 bytes each: ids as integers).

use std::collections::HashMap;

/// Which file keeps each attempt, as files are offered newest first.
#[derive(Debug, Default)]
pub struct Dedup {
    keeper: HashMap<AttemptKey, u32>,
    /// The file being read, counted from 0 for the newest.
    file: u32,
}

/// (`trace_id`, `span_id`) as integers when they are the hex the table holds, else as text (a
/// file written by another tool: still compared exactly).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum AttemptKey {
    Ids(u128, u64),
    Text(Box<str>, Box<str>),
}

impl AttemptKey {
    fn of(trace_id: &str, span_id: &str) -> AttemptKey {
        // Only the lowercase hex the sink writes: `AB` and `ab` stay two ids, as in SQL.
        let hex = |s: &str, len: usize| {
            s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        if hex(trace_id, 32) && hex(span_id, 16) {
            if let (Ok(trace), Ok(span)) = (
                u128::from_str_radix(trace_id, 16),
                u64::from_str_radix(span_id, 16),
            ) {
                return AttemptKey::Ids(trace, span);
            }
        }
        AttemptKey::Text(trace_id.into(), span_id.into())
    }
}

impl Dedup {
    /// The next file, older than every one before it.
    pub fn next_file(&mut self) {
        self.file += 1;
    }

    /// Whether a row of the current file with these ids is kept: its ids were in no newer file.
    pub fn keep(&mut self, trace_id: &str, span_id: &str) -> bool {
        let file = self.file;
        *self
            .keeper
            .entry(AttemptKey::of(trace_id, span_id))
            .or_insert(file)
            == file
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
    const SPAN: &str = "b7ad6b7169203331";

    #[test]
    fn every_row_of_the_newest_file_with_an_attempt_is_kept_and_older_copies_left_out() {
        let mut dedup = Dedup::default();
        // Two rows of one span in one file: tries inferred from one call.
        assert!(dedup.keep(TRACE, SPAN));
        assert!(dedup.keep(TRACE, SPAN));
        dedup.next_file();
        assert!(!dedup.keep(TRACE, SPAN), "a copy in an older file");
        assert!(dedup.keep(TRACE, "b7ad6b7169203332"), "another span");
        dedup.next_file();
        assert!(!dedup.keep(TRACE, SPAN));
        assert!(!dedup.keep(TRACE, "b7ad6b7169203332"));
    }

    #[test]
    fn ids_that_are_not_the_tables_hex_are_compared_as_text() {
        let mut dedup = Dedup::default();
        assert!(dedup.keep("t", "s"));
        assert!(dedup.keep(&TRACE.to_uppercase(), SPAN));
        dedup.next_file();
        assert!(!dedup.keep("t", "s"));
        assert!(dedup.keep("ts", ""), "the pair, not the concatenation");
        assert!(dedup.keep(TRACE, SPAN), "uppercase hex is another id");
        assert!(!dedup.keep(&TRACE.to_uppercase(), SPAN));
    }
}

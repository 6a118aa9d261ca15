//! Span buffers passed back from the shards to the receivers.
//!
//! Every export is read into a vector of facts (512 spans are about 176 KB) that a shard
//! empties. Dropped there, the block went back to mimalloc on another thread, was returned to
//! the OS (`serve`'s purge delay is 0) and faulted in again for the next export: the kernel's
//! page faults under `read_export` were the largest share of the collector's (BENCHMARKS.md).
//! A few emptied buffers are kept for the next exports instead.

use std::sync::Mutex;

use crate::contract::SpanFacts;

/// Buffers kept at most: enough for the exports in flight between the receivers and a shard.
const KEPT: usize = 4;
/// Larger buffers are dropped rather than kept: the pool holds at most `KEPT` × 1,024 spans'
/// worth (about 1.4 MB), within what the memory limit leaves outside its budgets.
const KEPT_CAPACITY: usize = 1024;

#[derive(Debug, Default)]
pub struct SpanBuffers {
    free: Mutex<Vec<Vec<SpanFacts>>>,
}

impl SpanBuffers {
    /// An empty vector, with the room of an earlier export's when one is kept.
    pub fn take(&self) -> Vec<SpanFacts> {
        self.free
            .lock()
            .ok()
            .and_then(|mut free| free.pop())
            .unwrap_or_default()
    }

    /// Keeps `spans`' room for a later [`take`](Self::take) (its contents are dropped).
    pub fn give(&self, mut spans: Vec<SpanFacts>) {
        if spans.capacity() == 0 || spans.capacity() > KEPT_CAPACITY {
            return;
        }
        spans.clear();
        if let Ok(mut free) = self.free.lock() {
            if free.len() < KEPT {
                free.push(spans);
            }
        }
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    fn spans(n: usize) -> Vec<SpanFacts> {
        (0..n).map(|_| SpanFacts::blank("svc".into())).collect()
    }

    #[test]
    fn a_given_buffer_comes_back_empty_with_its_room() {
        let buffers = SpanBuffers::default();
        let given = spans(512);
        let (room, at) = (given.capacity(), given.as_ptr());
        buffers.give(given);
        let taken = buffers.take();
        assert!(taken.is_empty());
        assert_eq!((taken.capacity(), taken.as_ptr()), (room, at));
        assert_eq!(
            buffers.take().capacity(),
            0,
            "each buffer is handed out once"
        );
    }

    #[test]
    fn the_pool_keeps_few_and_small_buffers() {
        let buffers = SpanBuffers::default();
        buffers.give(spans(KEPT_CAPACITY + 1));
        assert_eq!(buffers.take().capacity(), 0, "a large buffer is not kept");
        for _ in 0..KEPT + 2 {
            buffers.give(spans(8));
        }
        let kept = std::iter::from_fn(|| Some(buffers.take()))
            .take_while(|b| b.capacity() > 0)
            .count();
        assert_eq!(kept, KEPT);
    }
}

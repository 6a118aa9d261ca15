//! How much of the write-ahead log is still needed, across pipeline shards.
//!
//! Like a Kafka consumer's offset tracker: the log stage notes which records it handed to each
//! shard, each shard reports which records it still needs (pending spans, rows in open files),
//! and the log deletes segments below the lowest record any shard needs. Nothing else — not the
//! Parquet sink, not the receivers — knows the log exists.

use std::sync::Mutex;

#[derive(Debug, Default, Clone, Copy)]
struct Mark {
    /// Highest record the log handed to this shard.
    dispatched: u64,
    /// Highest record the shard had ingested when it last reported.
    ingested: u64,
    /// Lowest record the shard still needs (as of its last report), if any.
    oldest_needed: Option<u64>,
}

impl Mark {
    fn floor(&self) -> u64 {
        // Records handed over but not yet reported as ingested are still only in memory.
        let in_transit = if self.ingested < self.dispatched {
            self.ingested + 1
        } else {
            u64::MAX
        };
        self.oldest_needed.unwrap_or(u64::MAX).min(in_transit)
    }
}

#[derive(Debug)]
pub struct Watermark {
    shards: Box<[Mutex<Mark>]>,
}

impl Watermark {
    /// `recovered_from`: the first record replayed at start-up; every shard needs it until it
    /// has reported for the first time.
    pub fn new(shards: usize, recovered_from: Option<u64>) -> Watermark {
        let mark = Mark {
            oldest_needed: recovered_from,
            ..Mark::default()
        };
        Watermark {
            shards: (0..shards.max(1)).map(|_| Mutex::new(mark)).collect(),
        }
    }

    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    fn with<R>(&self, shard: usize, f: impl FnOnce(&mut Mark) -> R) -> R {
        let slot = &self.shards[shard % self.shards.len()];
        // A poisoned lock only means a shard panicked mid-report; its last values still hold.
        let mut mark = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut mark)
    }

    /// The log stage hands record `lsn` to `shard`.
    pub fn dispatched(&self, shard: usize, lsn: u64) {
        self.with(shard, |m| m.dispatched = m.dispatched.max(lsn));
    }

    /// A shard has ingested every record up to `ingested` it was given, and still needs
    /// `oldest_needed` and above (`None`: nothing).
    pub fn report(&self, shard: usize, ingested: u64, oldest_needed: Option<u64>) {
        self.with(shard, |m| {
            m.ingested = m.ingested.max(ingested);
            m.oldest_needed = oldest_needed;
        });
    }

    /// Records below the returned LSN are needed by no shard; `next_lsn` is the log's next.
    pub fn release_below(&self, next_lsn: u64) -> u64 {
        (0..self.shards.len())
            .map(|shard| self.with(shard, |m| m.floor()))
            .fold(next_lsn, u64::min)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_dispatched_releases_everything_below_next() {
        let w = Watermark::new(2, None);
        assert_eq!(w.release_below(10), 10);
    }

    #[test]
    fn recovered_records_stay_until_every_shard_reported() {
        let w = Watermark::new(2, Some(3));
        w.report(0, 0, None);
        assert_eq!(w.release_below(10), 3);
        w.report(1, 0, Some(5));
        assert_eq!(w.release_below(10), 5);
    }

    #[test]
    fn records_in_transit_are_kept() {
        let w = Watermark::new(2, None);
        w.dispatched(1, 7);
        assert_eq!(w.release_below(10), 1);
        w.report(1, 7, None);
        assert_eq!(w.release_below(10), 10);
    }

    #[test]
    fn lowest_need_of_any_shard_wins() {
        let w = Watermark::new(3, None);
        w.dispatched(0, 4);
        w.dispatched(2, 9);
        w.report(0, 4, Some(2));
        w.report(2, 9, Some(6));
        assert_eq!(w.release_below(10), 2);
        w.report(0, 4, None);
        assert_eq!(w.release_below(10), 6);
    }
}

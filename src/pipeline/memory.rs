//! `[service] memory_limit`: one limit over what the process holds that grows with load —
//! exports in flight, each shard's pending requests and finished-request cache, the Parquet
//! files being built. Like the OpenTelemetry Collector's `memory_limiter`, past it exports are
//! refused with answers clients retry; unlike it, the bytes are counted where they are held
//! rather than sampled from the heap, so a refusal never depends on when the allocator returns
//! pages.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::InFlight;

#[derive(Debug)]
pub struct MemoryLimit {
    limit: u64,
    in_flight: Arc<InFlight>,
    /// What each shard last reported holding.
    shards: Vec<AtomicU64>,
}

impl MemoryLimit {
    pub fn new(limit: u64, in_flight: Arc<InFlight>, shards: usize) -> Arc<MemoryLimit> {
        Arc::new(MemoryLimit {
            limit,
            in_flight,
            shards: (0..shards.max(1)).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes counted now: in flight plus every shard's last report.
    pub fn used(&self) -> u64 {
        self.shards
            .iter()
            .map(|held| held.load(Ordering::Relaxed))
            .fold(self.in_flight.used(), u64::saturating_add)
    }

    /// Whether an export of `bytes` may be accepted.
    pub fn admits(&self, bytes: u64) -> bool {
        self.used().saturating_add(bytes) <= self.limit
    }

    /// What shard `shard` holds now (its requests and its open files).
    pub fn report(&self, shard: usize, bytes: u64) {
        if let Some(held) = self.shards.get(shard) {
            held.store(bytes, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_are_admitted_while_in_flight_and_held_bytes_fit_the_limit() {
        let in_flight = InFlight::new(1000);
        let memory = MemoryLimit::new(1000, Arc::clone(&in_flight), 2);
        assert!(memory.admits(1000));
        let permit = in_flight.permit(400).unwrap();
        memory.report(0, 300);
        memory.report(1, 200);
        assert_eq!(memory.used(), 900);
        assert!(memory.admits(100));
        assert!(!memory.admits(101));
        // A shard's report replaces its last one; freed bytes make room again.
        memory.report(1, 0);
        drop(permit);
        assert_eq!(memory.used(), 300);
        assert!(memory.admits(700));
        // A shard index out of range is ignored rather than a panic.
        memory.report(7, u64::MAX);
        assert_eq!(memory.used(), 300);
    }
}

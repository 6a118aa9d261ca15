//! Times as nanoseconds since the first one a queue was given: the assembler's queues and the
//! plain hold's slots hold one per attempt, logical span or trace, in 8 bytes where an `Instant`
//! takes 16.

use std::time::{Duration, Instant};

/// A clock of nanoseconds since the first time it was given; exact, so deadlines kept in ticks
/// fall due at the same instants as deadlines kept in `Instant`s.
#[derive(Debug, Default)]
pub(super) struct Ticks {
    epoch: Option<Instant>,
}

impl Ticks {
    /// `at` in ticks; a time before the first one (a clock gone back) is tick 0.
    pub(super) fn of(&mut self, at: Instant) -> u64 {
        let epoch = *self.epoch.get_or_insert(at);
        Ticks::nanos(at.saturating_duration_since(epoch))
    }

    /// `at` in ticks, without starting the count.
    pub(super) fn peek(&self, at: Instant) -> u64 {
        self.epoch
            .map_or(0, |epoch| Ticks::nanos(at.saturating_duration_since(epoch)))
    }

    pub(super) fn instant(&self, ticks: u64) -> Option<Instant> {
        Some(self.epoch? + Duration::from_nanos(ticks))
    }

    pub(super) fn nanos(d: Duration) -> u64 {
        u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
    }
}

//! Times as nanoseconds since the first one a queue was given: the assembler's queues and the
//! plain hold's slots hold one per attempt, logical span or trace, in 8 bytes where an `Instant`
//! takes 16.

use std::time::{Duration, Instant};

/// A clock of nanoseconds since the first time it was given; exact, so deadlines kept in ticks
/// fall due at the same instants as deadlines kept in `Instant`s.
#[derive(Debug, Default)]
pub(super) struct Ticks {
    epoch: Option<Instant>,
    /// The last time converted: the spans of one export share their `now`, and the subtraction
    /// was 1% of the processor's instructions.
    last: Option<(Instant, u64)>,
}

impl Ticks {
    /// `at` in ticks; a time before the first one (a clock gone back) is tick 0.
    pub(super) fn of(&mut self, at: Instant) -> u64 {
        if let Some((last, ticks)) = self.last {
            if last == at {
                return ticks;
            }
        }
        let epoch = *self.epoch.get_or_insert(at);
        let ticks = Ticks::nanos(at.saturating_duration_since(epoch));
        self.last = Some((at, ticks));
        ticks
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_converted_again_is_the_same_tick_and_the_epoch_stays() {
        let start = Instant::now();
        let mut ticks = Ticks::default();
        assert_eq!(ticks.of(start), 0);
        let later = start + Duration::from_nanos(1_500);
        assert_eq!(ticks.of(later), 1_500);
        assert_eq!(ticks.of(later), 1_500);
        assert_eq!(ticks.of(start), 0);
        assert_eq!(ticks.peek(later), 1_500);
        assert_eq!(ticks.instant(1_500), Some(later));
    }
}

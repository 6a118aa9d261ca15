//! Whether the loaded rate cards are too old for today's attempts: a start-up check, so that a
//! user hears it once, before every row of the day says `pricing_stale`.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use chrono::NaiveDate;

use super::{PricingBook, Snapshot};

/// The newest loaded snapshot, when even it was checked more than `max_age_days` before today.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleCard<'a> {
    pub newest: &'a Snapshot,
    pub age_days: i64,
    pub max_age_days: i64,
}

/// `None` when the book is empty (that has its own warning) or its newest snapshot is recent
/// enough: the rules call a snapshot stale after the same number of whole days.
pub fn stale_newest(
    book: &PricingBook,
    now: SystemTime,
    max_age_days: i64,
) -> Option<StaleCard<'_>> {
    let newest = book.snapshots().into_iter().max_by_key(|s| s.checked_at)?;
    let age_days = (date_of(now) - newest.checked_at).num_days();
    (age_days > max_age_days).then_some(StaleCard {
        newest,
        age_days,
        max_age_days,
    })
}

fn date_of(now: SystemTime) -> NaiveDate {
    let secs = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    chrono::DateTime::from_timestamp(secs, 0)
        .map(|t| t.date_naive())
        .unwrap_or_default()
}

impl fmt::Display for StaleCard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the newest pricing snapshot, version {} checked {} ({}), is {} days old, over max_pricing_age_days = {}: \
             today's attempts will be priced pricing_stale; get a current rate card with \
             `retry-spend-collector pricing fetch --format FORMAT URL` or `pricing import --format FORMAT FILE`",
            self.newest.version,
            self.newest.checked_at,
            self.newest.path.display(),
            self.age_days,
            self.max_age_days,
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Noon UTC of `date`.
    fn noon(date: &str) -> SystemTime {
        let date = NaiveDate::parse_from_str(date, "%Y-%m-%d").unwrap();
        let secs = date.and_hms_opt(12, 0, 0).unwrap().and_utc().timestamp();
        UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).unwrap())
    }

    #[test]
    fn the_newest_snapshot_is_stale_only_past_max_pricing_age_days() {
        // The shipped snapshot was checked on 2026-08-22.
        let book = crate::pricing::shipped_book();
        for (today, max, stale_days) in [
            ("2026-08-22", 30, None),
            ("2026-09-21", 30, None),
            ("2026-09-22", 30, Some(31)),
            ("2026-12-01", 30, Some(101)),
            ("2026-12-01", 101, None),
            ("2026-08-23", 0, Some(1)),
        ] {
            let stale = stale_newest(&book, noon(today), max);
            assert_eq!(stale.map(|s| s.age_days), stale_days, "{today}, max {max}");
        }
    }

    #[test]
    fn the_warning_names_version_date_age_and_how_to_get_a_current_card() {
        let book = crate::pricing::shipped_book();
        let text = stale_newest(&book, noon("2026-12-01"), 30)
            .unwrap()
            .to_string();
        for part in [
            "version a42d372ccf0b5dd13ecf71203521f9d2",
            "checked 2026-08-22",
            "is 101 days old",
            "max_pricing_age_days = 30",
            "pricing fetch",
            "pricing import",
        ] {
            assert!(text.contains(part), "{part:?} missing from {text}");
        }
    }

    #[test]
    fn an_empty_book_is_not_stale() {
        assert_eq!(
            stale_newest(&PricingBook::default(), SystemTime::now(), 30),
            None
        );
    }
}

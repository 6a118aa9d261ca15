//! The pricing book: every snapshot of a directory, keyed by pricing version.

use std::collections::HashMap;

use std::path::PathBuf;

use chrono::NaiveDate;

use super::error::{PricingError, PricingErrors};
use super::snapshot::Snapshot;

/// All loaded snapshots, identified by (`pricing_version`, `pricing_checked_at`). Old snapshots
/// stay so old traces re-price identically, and feeds that keep one version across price changes
/// give several dated snapshots of it.
#[derive(Debug, Clone, Default)]
pub struct PricingBook {
    /// Version → its snapshots, oldest checked date first. Looked up for every attempt priced:
    /// ahash, not SipHash (1.2% of the processor's instructions for 32-character versions).
    by_version: HashMap<String, Vec<Snapshot>, ahash::RandomState>,
    /// Every snapshot's (checked date, version), ascending: the order "newest" is judged by.
    by_date: Vec<(NaiveDate, String)>,
    /// Model → the family the newest snapshot listing it gives (SPEC §2, `model_family`).
    family_by_model: HashMap<String, ListedFamily, ahash::RandomState>,
}

/// A model's family as the newest snapshot that lists the model gives it.
#[derive(Debug, Clone)]
struct ListedFamily {
    checked_at: NaiveDate,
    version: String,
    family: Option<crate::symbol::Symbol>,
}

impl PricingBook {
    /// The book of snapshot files given as (path, contents), in the order given, reporting
    /// every bad file rather than the first; `path` only names them. Reading a directory is the
    /// caller's (the collector's `load::pricing_dir`).
    pub fn from_files(
        files: impl IntoIterator<Item = (PathBuf, Vec<u8>)>,
    ) -> Result<PricingBook, PricingErrors> {
        let mut errors = Vec::new();
        let mut book = PricingBook::default();
        for (path, bytes) in files {
            match Snapshot::from_bytes(&path, &bytes) {
                Ok(snapshot) => {
                    if let Err(e) = book.insert(snapshot) {
                        errors.push(e);
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            Ok(book)
        } else {
            Err(PricingErrors(errors))
        }
    }

    /// Adds a snapshot. A second file claiming the same (version, checked date) is fine only
    /// with byte-identical content, and is then loaded once.
    pub fn insert(&mut self, snapshot: Snapshot) -> Result<(), PricingError> {
        let dated = self.by_version.entry(snapshot.version.clone()).or_default();
        let at = dated.partition_point(|s| s.checked_at < snapshot.checked_at);
        if let Some(existing) = dated
            .get(at)
            .filter(|s| s.checked_at == snapshot.checked_at)
        {
            if existing.digest == snapshot.digest {
                return Ok(());
            }
            return Err(PricingError::new(
                &snapshot.path,
                "pricing_checked_at",
                format!(
                    "version {:?} checked {} is also claimed by {} with different content",
                    snapshot.version,
                    snapshot.checked_at,
                    existing.path.display()
                ),
            ));
        }
        let key = (snapshot.checked_at, snapshot.version.clone());
        let by_date_at = self.by_date.partition_point(|k| *k < key);
        self.by_date.insert(by_date_at, key);
        for (model, price) in &snapshot.models {
            let newer = self.family_by_model.get(model).is_none_or(|listed| {
                (listed.checked_at, listed.version.as_str())
                    < (snapshot.checked_at, snapshot.version.as_str())
            });
            if newer {
                self.family_by_model.insert(
                    model.clone(),
                    ListedFamily {
                        checked_at: snapshot.checked_at,
                        version: snapshot.version.clone(),
                        family: price.family.clone(),
                    },
                );
            }
        }
        dated.insert(at, snapshot);
        Ok(())
    }

    /// The snapshot of `version` checked on `checked_at`, if loaded.
    pub fn get_dated(&self, version: &str, checked_at: NaiveDate) -> Option<&Snapshot> {
        let dated = self.by_version.get(version)?;
        let at = dated.partition_point(|s| s.checked_at < checked_at);
        dated.get(at).filter(|s| s.checked_at == checked_at)
    }

    /// The newest snapshot of `version` (latest checked date), if any is loaded.
    pub fn get(&self, version: &str) -> Option<&Snapshot> {
        self.by_version.get(version).and_then(|dated| dated.last())
    }

    /// The snapshot an envelope's figures come from (SPEC §4): the one of this version and
    /// date when loaded, else the newest of this version.
    pub fn pinned(&self, version: &str, checked_at: Option<NaiveDate>) -> Option<&Snapshot> {
        checked_at
            .and_then(|date| self.get_dated(version, date))
            .or_else(|| self.get(version))
    }

    /// The newest snapshot checked on or before `date`; among several of that date, the
    /// greatest version by byte order. What a `latest` policy pins.
    pub fn latest_on_or_before(&self, date: NaiveDate) -> Option<&Snapshot> {
        let end = self
            .by_date
            .partition_point(|(checked, _)| *checked <= date);
        let (checked_at, version) = self.by_date[..end].last()?;
        self.get_dated(version, *checked_at)
    }

    /// The family the newest loaded snapshot listing `model` gives it (latest checked date,
    /// then greatest version by byte order); `None` when no snapshot lists the model or that
    /// one names no family.
    pub fn newest_family(&self, model: &str) -> Option<&crate::symbol::Symbol> {
        self.family_by_model.get(model)?.family.as_ref()
    }

    /// Distinct snapshots loaded.
    pub fn len(&self) -> usize {
        self.by_date.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_date.is_empty()
    }

    /// Snapshots ordered by checked date, then version, for stable listings.
    pub fn snapshots(&self) -> Vec<&Snapshot> {
        self.by_date
            .iter()
            .filter_map(|(checked_at, version)| self.get_dated(version, *checked_at))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Snapshot files in memory, loaded in name order as a directory would be.
    #[derive(Default)]
    struct Files(Vec<(PathBuf, Vec<u8>)>);

    fn write(files: &mut Files, name: &str, body: &str) {
        files
            .0
            .push((PathBuf::from(name), body.as_bytes().to_vec()));
    }

    fn load(mut files: Files) -> Result<PricingBook, PricingErrors> {
        files.0.sort();
        PricingBook::from_files(files.0)
    }

    fn snapshot_json(version: &str, models: &str) -> String {
        format!(
            r#"{{"pricing_source": "https://aiwave.live/api/pricing", "pricing_checked_at": "2026-08-22",
               "pricing_version": "{version}", "currency": "USD", "unit": "per_million_tokens",
               "group_ratio": {{"default": "3", "vip": 1}}, "models": {{{models}}}}}"#
        )
    }

    fn single_error(body: &str) -> PricingError {
        let mut dir = Files::default();
        write(&mut dir, "bad.json", body);
        let mut errors = load(dir).unwrap_err().0;
        assert_eq!(errors.len(), 1, "{errors:?}");
        errors.remove(0)
    }

    #[test]
    fn shipped_snapshot_loads_with_the_seed_rows() {
        let book = crate::pricing::shipped_book();
        let s = book
            .get("a42d372ccf0b5dd13ecf71203521f9d2")
            .expect("seed snapshot");
        assert_eq!(s.models.len(), 6);
        assert_eq!(s.group_ratio["default"].to_string(), "3");
        assert_eq!(s.models["qwen3.5-122b-a10b"].cached_input, None);
        assert_eq!(
            s.models["kimi-k2.7-code"].cached_input.unwrap().to_string(),
            "0.150794"
        );
        assert_eq!(s.models["glm-5"].family.as_deref(), Some("glm"));
        assert_eq!(s.digest.len(), 64);
    }

    #[test]
    fn numbers_are_accepted_and_read_exactly() {
        let mut dir = Files::default();
        write(
            &mut dir,
            "a.json",
            &snapshot_json("v", r#""m": {"input": 0.1234567891, "output": 2}"#),
        );
        let book = load(dir).unwrap();
        assert_eq!(
            book.get("v").unwrap().models["m"].input.to_string(),
            "0.1234567891"
        );
    }

    #[test]
    fn bad_decimal_names_file_and_field() {
        let e = single_error(&snapshot_json(
            "v",
            r#""glm-5": {"input": "cheap", "output": "1"}"#,
        ));
        assert_eq!(e.field, "models.glm-5.input");
        assert!(
            e.to_string()
                .contains("bad.json: models.glm-5.input: \"cheap\" is not a decimal"),
            "{e}"
        );
    }

    #[test]
    fn negative_price_is_an_error() {
        let e = single_error(&snapshot_json(
            "v",
            r#""m": {"input": "-0.1", "output": "1"}"#,
        ));
        assert_eq!(e.field, "models.m.input");
        assert!(e.problem.contains("negative"));
    }

    #[test]
    fn too_many_decimal_places_is_an_error() {
        let e = single_error(&snapshot_json(
            "v",
            r#""m": {"input": "0.12345678901", "output": "1"}"#,
        ));
        assert_eq!(e.field, "models.m.input");
        let e = single_error(&snapshot_json("v", "").replace(r#""vip": 1"#, r#""vip": "1.005""#));
        assert_eq!(e.field, "group_ratio.vip");
    }

    #[test]
    fn missing_field_is_an_error() {
        let e = single_error(&snapshot_json("v", r#""m": {"input": "1"}"#));
        assert_eq!(
            (e.field.as_str(), e.problem.as_str()),
            ("models.m.output", "missing")
        );
        let e = single_error(&snapshot_json("v", "").replace(r#""pricing_version": "v","#, ""));
        assert_eq!(e.field, "pricing_version");
    }

    #[test]
    fn cache_write_max_output_tokens_and_tiers_load() {
        let mut dir = Files::default();
        let model = r#""claude-sonnet-4-5": {"input": "3", "output": "15", "cached_input": "0.3",
            "cache_write": 3.75, "max_output_tokens": 64000,
            "tiers": [{"above_input_tokens": 200000, "input": "6", "output": 22.5},
                      {"above_input_tokens": 1000000, "cached_input": "0.6", "cache_write": "7.5"}]}"#;
        write(&mut dir, "a.json", &snapshot_json("v", model));
        let book = load(dir).unwrap();
        let price = &book.get("v").unwrap().models["claude-sonnet-4-5"];
        let d = |s: &str| Some(s.parse::<rust_decimal::Decimal>().unwrap());
        assert_eq!(price.cache_write, d("3.75"));
        assert_eq!(price.max_output_tokens, Some(64_000));
        let tiers: Vec<_> = price
            .tiers
            .iter()
            .map(|t| {
                (
                    t.above_input_tokens,
                    t.input,
                    t.output,
                    t.cached_input,
                    t.cache_write,
                )
            })
            .collect();
        assert_eq!(
            tiers,
            [
                (200_000, d("6"), d("22.5"), None, None),
                (1_000_000, None, None, d("0.6"), d("7.5")),
            ]
        );
    }

    #[test]
    fn the_new_fields_are_optional() {
        let mut dir = Files::default();
        write(
            &mut dir,
            "a.json",
            &snapshot_json("v", r#""m": {"input": "1", "output": "2"}"#),
        );
        let book = load(dir).unwrap();
        let price = &book.get("v").unwrap().models["m"];
        assert_eq!(
            (
                price.cache_write,
                price.max_output_tokens,
                price.tiers.len()
            ),
            (None, None, 0)
        );
    }

    #[test]
    fn tiers_out_of_increasing_order_are_an_error_naming_file_and_model() {
        let e = single_error(&snapshot_json(
            "v",
            r#""m": {"input": "1", "output": "2", "tiers": [{"above_input_tokens": 200000, "input": "2"},
                                                          {"above_input_tokens": 128000, "input": "3"}]}"#,
        ));
        assert_eq!(e.field, "models.m.tiers[1].above_input_tokens");
        assert!(
            e.to_string().starts_with(
                "pricing file "
            ) && e.to_string().contains("bad.json: models.m.tiers[1].above_input_tokens: 128000 is below the threshold of tiers[0] (200000)"),
            "{e}"
        );
    }

    #[test]
    fn a_repeated_tier_threshold_is_an_error_naming_file_and_model() {
        let e = single_error(&snapshot_json(
            "v",
            r#""m": {"input": "1", "output": "2", "tiers": [{"above_input_tokens": 200000, "input": "2"},
                                                          {"above_input_tokens": 200000, "output": "3"}]}"#,
        ));
        assert_eq!(e.field, "models.m.tiers[1].above_input_tokens");
        assert!(
            e.problem
                .contains("200000 repeats the threshold of tiers[0]"),
            "{e}"
        );
    }

    #[test]
    fn tier_prices_follow_the_base_price_rules() {
        let tiered = |tier: &str| {
            single_error(&snapshot_json(
                "v",
                &format!(r#""m": {{"input": "1", "output": "2", "tiers": [{tier}]}}"#),
            ))
        };
        let e = tiered(r#"{"above_input_tokens": 1000, "input": "-1"}"#);
        assert_eq!(
            (e.field.as_str(), e.problem.as_str()),
            ("models.m.tiers[0].input", "\"-1\" is negative")
        );
        let e = tiered(r#"{"above_input_tokens": 1000, "cache_write": "0.12345678901"}"#);
        assert_eq!(e.field, "models.m.tiers[0].cache_write");
        assert!(e.problem.contains("more than 10 decimal places"), "{e}");
        let e = tiered(r#"{"above_input_tokens": 1000, "output": "cheap"}"#);
        assert_eq!(e.field, "models.m.tiers[0].output");
        let e = tiered(r#"{"input": "2"}"#);
        assert_eq!(
            (e.field.as_str(), e.problem.as_str()),
            ("models.m.tiers[0].above_input_tokens", "missing")
        );
        for bad in ["-1", "1.5", "\"1000\""] {
            let e = tiered(&format!(r#"{{"above_input_tokens": {bad}, "input": "2"}}"#));
            assert_eq!(e.field, "models.m.tiers[0].above_input_tokens", "{bad}");
        }
        let e = single_error(&snapshot_json(
            "v",
            r#""m": {"input": "1", "output": "2", "tiers": {"above_input_tokens": 1}}"#,
        ));
        assert_eq!(e.field, "models.m.tiers");
    }

    #[test]
    fn cache_write_and_max_output_tokens_follow_their_rules() {
        let e = single_error(&snapshot_json(
            "v",
            r#""m": {"input": "1", "output": "2", "cache_write": "-3.75"}"#,
        ));
        assert_eq!(e.field, "models.m.cache_write");
        for bad in ["0", "-1", "64000.5", "\"64000\""] {
            let e = single_error(&snapshot_json(
                "v",
                &format!(r#""m": {{"input": "1", "output": "2", "max_output_tokens": {bad}}}"#),
            ));
            assert_eq!(e.field, "models.m.max_output_tokens", "{bad}");
        }
    }

    #[test]
    fn other_currency_or_unit_is_an_error() {
        assert_eq!(
            single_error(&snapshot_json("v", "").replace("USD", "EUR")).field,
            "currency"
        );
        assert_eq!(
            single_error(&snapshot_json("v", "").replace("per_million_tokens", "per_token")).field,
            "unit"
        );
    }

    #[test]
    fn malformed_json_is_an_error() {
        assert!(single_error("{").problem.starts_with("not valid JSON"));
    }

    #[test]
    fn two_files_claiming_one_version_with_different_content() {
        let mut dir = Files::default();
        write(
            &mut dir,
            "a.json",
            &snapshot_json("v", r#""m": {"input": "1", "output": "1"}"#),
        );
        write(
            &mut dir,
            "b.json",
            &snapshot_json("v", r#""m": {"input": "2", "output": "1"}"#),
        );
        let errors = load(dir).unwrap_err().0;
        assert_eq!(errors.len(), 1);
        assert!(errors[0].path.ends_with("b.json"));
        assert!(errors[0].problem.contains("a.json"));
    }

    fn dated(version: &str, checked_at: &str, input: &str) -> Snapshot {
        let body = snapshot_json(version, &format!(r#""m": {{"family": "f-{version}-{checked_at}", "input": "{input}", "output": "1"}}"#))
            .replace("2026-08-22", checked_at);
        Snapshot::from_bytes(
            format!("{checked_at}-{version}.json").as_ref(),
            body.as_bytes(),
        )
        .unwrap()
    }

    fn date(text: &str) -> NaiveDate {
        NaiveDate::parse_from_str(text, "%Y-%m-%d").unwrap()
    }

    #[test]
    fn one_version_checked_on_several_dates_is_several_snapshots() {
        let mut book = PricingBook::default();
        book.insert(dated("v", "2026-08-01", "1")).unwrap();
        book.insert(dated("v", "2026-08-22", "2")).unwrap();
        book.insert(dated("v", "2026-08-10", "3")).unwrap();
        assert_eq!(book.len(), 3);
        let input = |s: Option<&Snapshot>| s.map(|s| s.models["m"].input.to_string());
        assert_eq!(
            input(book.get_dated("v", date("2026-08-10"))),
            Some("3".into())
        );
        assert_eq!(input(book.get_dated("v", date("2026-08-11"))), None);
        assert_eq!(input(book.get("v")), Some("2".into()));
        assert_eq!(input(book.get("w")), None);
        let listed: Vec<NaiveDate> = book.snapshots().iter().map(|s| s.checked_at).collect();
        assert_eq!(
            listed,
            [date("2026-08-01"), date("2026-08-10"), date("2026-08-22")]
        );
    }

    #[test]
    fn pinned_is_the_dated_snapshot_else_the_newest_of_its_version() {
        let mut book = PricingBook::default();
        book.insert(dated("v", "2026-08-01", "1")).unwrap();
        book.insert(dated("v", "2026-08-22", "2")).unwrap();
        let cases = [
            ("v", Some("2026-08-01"), Some("2026-08-01")),
            ("v", Some("2026-08-05"), Some("2026-08-22")),
            ("v", None, Some("2026-08-22")),
            ("w", Some("2026-08-01"), None),
        ];
        for (version, checked_at, expected) in cases {
            let got = book
                .pinned(version, checked_at.map(date))
                .map(|s| s.checked_at);
            assert_eq!(got, expected.map(date), "{version} {checked_at:?}");
        }
    }

    #[test]
    fn latest_on_or_before_takes_the_newest_date_then_the_greatest_version() {
        let mut book = PricingBook::default();
        book.insert(dated("b", "2026-08-01", "1")).unwrap();
        book.insert(dated("a", "2026-08-10", "2")).unwrap();
        book.insert(dated("c", "2026-08-10", "3")).unwrap();
        book.insert(dated("B", "2026-08-10", "4")).unwrap();
        book.insert(dated("z", "2026-09-01", "5")).unwrap();
        let cases = [
            ("2026-07-31", None),
            ("2026-08-01", Some(("b", "2026-08-01"))),
            ("2026-08-09", Some(("b", "2026-08-01"))),
            // "c" > "a" > "B" by byte order.
            ("2026-08-10", Some(("c", "2026-08-10"))),
            ("2026-08-31", Some(("c", "2026-08-10"))),
            ("2027-01-01", Some(("z", "2026-09-01"))),
        ];
        for (on, expected) in cases {
            let got = book
                .latest_on_or_before(date(on))
                .map(|s| (s.version.as_str(), s.checked_at));
            assert_eq!(got, expected.map(|(v, d)| (v, date(d))), "{on}");
        }
    }

    #[test]
    fn newest_family_comes_from_the_newest_snapshot_listing_the_model() {
        let mut book = PricingBook::default();
        book.insert(dated("b", "2026-08-10", "1")).unwrap();
        book.insert(dated("z", "2026-08-01", "1")).unwrap();
        book.insert(dated("a", "2026-08-10", "1")).unwrap();
        assert_eq!(
            book.newest_family("m").map(|f| &**f),
            Some("f-b-2026-08-10")
        );
        assert_eq!(book.newest_family("unlisted"), None);
    }

    #[test]
    fn same_version_and_date_with_other_bytes_names_file_and_field() {
        let mut book = PricingBook::default();
        book.insert(dated("v", "2026-08-01", "1")).unwrap();
        let mut other = dated("v", "2026-08-01", "2");
        other.path = PathBuf::from("other.json");
        let e = book.insert(other).unwrap_err();
        assert_eq!(e.field, "pricing_checked_at");
        assert!(
            e.to_string()
                .starts_with("pricing file other.json: pricing_checked_at: "),
            "{e}"
        );
        assert!(e.problem.contains("2026-08-01-v.json"), "{e}");
        assert!(book.insert(dated("v", "2026-08-01", "1")).is_ok());
        assert_eq!(book.len(), 1);
    }

    #[test]
    fn identical_copies_of_one_version_are_fine() {
        let mut dir = Files::default();
        let body = snapshot_json("v", r#""m": {"input": "1", "output": "1"}"#);
        write(&mut dir, "a.json", &body);
        write(&mut dir, "b.json", &body);
        assert_eq!(load(dir).unwrap().len(), 1);
    }

    #[test]
    fn every_bad_file_is_reported() {
        let mut dir = Files::default();
        write(&mut dir, "a.json", "{");
        write(&mut dir, "b.json", "[]");
        assert_eq!(load(dir).unwrap_err().0.len(), 2);
    }
}

//! Arbitrary bytes as a pricing snapshot file (SPEC §3).
//!
//! Whatever is accepted must keep the promises the cost formula relies on: non-negative prices
//! with at most 10 places and ratios with at most 2, so every cost fits the Parquet scale of 18.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use retry_spend_collector::pricing::{cost_usd, PricingBook, Snapshot, Usage};
use retry_spend_collector::sinks::parquet::decimal_to_scaled_i128;

fn usages() -> [Usage; 4] {
    let max = 1_i64 << 53;
    [
        Usage {
            input: 10_000,
            cached: 4_000,
            cache_write: 2_000,
            output: 800,
        },
        Usage {
            input: 1,
            cached: 0,
            cache_write: 0,
            output: 0,
        },
        Usage {
            input: 0,
            cached: 0,
            cache_write: 0,
            output: 1,
        },
        Usage {
            input: max,
            cached: max / 2,
            cache_write: max / 4,
            output: max,
        },
    ]
}

fuzz_target!(|data: &[u8]| {
    let Ok(snapshot) = Snapshot::from_bytes(Path::new("fuzz.json"), data) else {
        return;
    };
    assert!(!snapshot.version.trim().is_empty());
    assert!(!snapshot.source.trim().is_empty());
    assert_eq!(snapshot.digest.len(), 64);
    assert!(snapshot
        .digest
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));

    for (group, ratio) in &snapshot.group_ratio {
        assert!(
            !ratio.is_sign_negative() || ratio.is_zero(),
            "group_ratio.{group} = {ratio}"
        );
        assert!(
            ratio.normalize().scale() <= 2,
            "group_ratio.{group} = {ratio}"
        );
    }
    for (name, model) in &snapshot.models {
        let tier_prices = model
            .tiers
            .iter()
            .flat_map(|t| [t.input, t.output, t.cached_input, t.cache_write]);
        for price in [
            Some(model.input),
            Some(model.output),
            model.cached_input,
            model.cache_write,
        ]
        .into_iter()
        .chain(tier_prices)
        .flatten()
        {
            assert!(
                !price.is_sign_negative() || price.is_zero(),
                "models.{name}: {price}"
            );
            assert!(price.normalize().scale() <= 10, "models.{name}: {price}");
        }
        assert_ne!(model.family.as_deref(), Some(""));
        for ratio in snapshot.group_ratio.values() {
            for usage in usages() {
                if let Some(cost) = cost_usd(model, *ratio, usage) {
                    assert!(!cost.is_sign_negative() || cost.is_zero(), "{name}: {cost}");
                    assert!(cost.scale() <= 18, "{name}: {cost} has more than 18 places");
                    if let Some(scaled) = decimal_to_scaled_i128(cost) {
                        let exact = 10_i128
                            .checked_pow(18 - cost.scale())
                            .and_then(|f| cost.mantissa().checked_mul(f));
                        assert_eq!(Some(scaled), exact, "{cost} written to Parquet exactly");
                    }
                }
            }
        }
    }

    let mut book = PricingBook::default();
    book.insert(snapshot.clone())
        .expect("a first snapshot always inserts");
    book.insert(snapshot.clone())
        .expect("the same content again is no conflict");
    assert_eq!(book.get(&snapshot.version), Some(&snapshot));
});

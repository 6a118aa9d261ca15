//! LiteLLM's `model_prices_and_context_window.json`: one object per model, USD per token.

use std::collections::BTreeMap;

use serde_json::value::RawValue;

use super::{
    default_group, feed_error, per_million, positive_token_count, price_field, required_price,
    Converted, Exact, FeedModel, FeedTier, ImportError, LeftOut, LeftOutReason,
};

/// The modes §3 imports; embeddings, images, audio and the rest price other units.
const TOKEN_MODES: [&str; 3] = ["chat", "completion", "responses"];

const INPUT: &str = "input_cost_per_token";
const OUTPUT: &str = "output_cost_per_token";
const CACHED_INPUT: &str = "cache_read_input_token_cost";
const CACHE_WRITE: &str = "cache_creation_input_token_cost";
const PER_REQUEST: &str = "input_cost_per_request";
/// The key of a long-context price is one of the four above with this suffix around N
/// (thousands of input tokens); `_above_128k_tokens_priority` and the like are other
/// services' prices, not tiers.
const TIER_INFIX: &str = "_above_";
const TIER_SUFFIX: &str = "k_tokens";

pub(super) fn convert(feed: &str, bytes: &[u8]) -> Result<Converted, ImportError> {
    let entries: BTreeMap<String, &RawValue> = serde_json::from_slice(bytes).map_err(|e| {
        feed_error(
            feed,
            "",
            format!("not a LiteLLM model_prices_and_context_window.json: {e}"),
        )
    })?;
    let mut converted = Converted {
        group_ratio: default_group(),
        ..Default::default()
    };
    for (name, raw) in entries {
        // `sample_spec` documents the format; an entry that is no object is no model either.
        let entry = match serde_json::from_str::<BTreeMap<String, &RawValue>>(raw.get()) {
            Ok(entry) if name != "sample_spec" => entry,
            _ => {
                converted.skipped += 1;
                continue;
            }
        };
        match model(&entry) {
            Ok(model) => {
                converted.models.insert(name, model);
            }
            Err(reason) => converted.left_out.push(LeftOut {
                model: name,
                reason,
            }),
        }
    }
    Ok(converted)
}

fn model(entry: &BTreeMap<String, &RawValue>) -> Result<FeedModel, LeftOutReason> {
    let text = |key: &str| {
        entry
            .get(key)
            .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
    };
    let mode = text("mode");
    if !mode.as_deref().is_some_and(|m| TOKEN_MODES.contains(&m)) {
        return Err(match text("alias_of") {
            Some(of) if mode.is_none() => LeftOutReason::Alias { of },
            _ => LeftOutReason::Mode(mode),
        });
    }
    if entry.contains_key("tiered_pricing") {
        return Err(LeftOutReason::OtherTiers {
            field: "tiered_pricing".into(),
        });
    }
    // A fee on every request (Perplexity's online models) is a price per call that §4's
    // per-token formula cannot carry; its token prices alone would under-price its retries.
    // Search and grounding costs per query are a tool's, paid only when it is used.
    if price_field(entry, PER_REQUEST, PER_REQUEST)?.is_some_and(|fee| fee != Exact::ZERO) {
        return Err(LeftOutReason::PerCall);
    }
    let per_token = |key: &str| required_price(entry, key, key);
    let (input, output) = match per_token(INPUT).and_then(|i| per_token(OUTPUT).map(|o| (i, o))) {
        Ok(prices) => prices,
        Err(LeftOutReason::NoTokenPrice { field }) => return Err(unpriced(entry, field)),
        Err(reason) => return Err(reason),
    };
    let optional = |key: &str| {
        price_field(entry, key, key)?
            .map(|price| per_million(price, key))
            .transpose()
    };
    let family = text("litellm_provider").filter(|p| !p.is_empty());
    Ok(FeedModel {
        cache_write: optional(CACHE_WRITE)?,
        // Never the legacy `max_tokens`, which sometimes holds the input window.
        max_output_tokens: entry
            .get("max_output_tokens")
            .and_then(|raw| positive_token_count(raw)),
        tiers: tiers(entry)?,
        ..FeedModel::base(
            family,
            per_million(input, INPUT)?,
            per_million(output, OUTPUT)?,
            optional(CACHED_INPUT)?,
        )
    })
}

/// Why a chat model without both per-token prices is left out, judged by the units its
/// other prices use; `missing` is the per-token price it lacks.
fn unpriced(entry: &BTreeMap<String, &RawValue>, missing: String) -> LeftOutReason {
    let any_key = |test: &dyn Fn(&str) -> bool| entry.keys().any(|k| test(k));
    if any_key(&|k| k.ends_with("_cost_per_request") || k.ends_with("_cost_per_query")) {
        LeftOutReason::PerCall
    } else if any_key(&|k| k.contains("_per_second") || k == "cost_per_second") {
        LeftOutReason::PerSecond
    } else if any_key(&|k| k.contains("_cost_per_character")) {
        LeftOutReason::PerCharacter
    } else if any_key(&|k| k.contains("_cost_per_image") || k.contains("_cost_per_pixel")) {
        LeftOutReason::PerImage
    } else if !any_key(&|k| k.contains("cost") || k.contains("pricing")) {
        LeftOutReason::NoPrice
    } else {
        LeftOutReason::NoTokenPrice { field: missing }
    }
}

/// The long-context tiers: every key `<price>_above_<N>k_tokens` of the four per-token prices
/// gives that price above N × 1,000 input tokens.
fn tiers(entry: &BTreeMap<String, &RawValue>) -> Result<BTreeMap<i64, FeedTier>, LeftOutReason> {
    let mut tiers: BTreeMap<i64, FeedTier> = BTreeMap::new();
    for key in entry.keys() {
        let Some((base, threshold)) = tier_key(key) else {
            continue;
        };
        let Some(price) = price_field(entry, key, key)? else {
            continue;
        };
        let price = Some(per_million(price, key)?);
        let tier = tiers.entry(threshold).or_default();
        match base {
            INPUT => tier.input = price,
            OUTPUT => tier.output = price,
            CACHED_INPUT => tier.cached_input = price,
            _ => tier.cache_write = price,
        }
    }
    Ok(tiers)
}

/// `input_cost_per_token_above_200k_tokens` → (`input_cost_per_token`, 200000); `None` for
/// any other key.
fn tier_key(key: &str) -> Option<(&'static str, i64)> {
    let (base, thousands) = key.strip_suffix(TIER_SUFFIX)?.rsplit_once(TIER_INFIX)?;
    let base = [INPUT, OUTPUT, CACHED_INPUT, CACHE_WRITE]
        .into_iter()
        .find(|known| *known == base)?;
    if thousands.is_empty() || !thousands.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((base, thousands.parse::<i64>().ok()?.checked_mul(1_000)?))
}

#[cfg(test)]
mod tests {
    use super::tier_key;

    #[test]
    fn only_the_exact_above_nk_tokens_suffix_of_a_token_price_is_a_tier() {
        let cases = [
            (
                "input_cost_per_token_above_200k_tokens",
                Some(("input_cost_per_token", 200_000)),
            ),
            (
                "output_cost_per_token_above_128k_tokens",
                Some(("output_cost_per_token", 128_000)),
            ),
            (
                "cache_read_input_token_cost_above_272k_tokens",
                Some(("cache_read_input_token_cost", 272_000)),
            ),
            (
                "cache_creation_input_token_cost_above_200k_tokens",
                Some(("cache_creation_input_token_cost", 200_000)),
            ),
            ("input_cost_per_token_above_200k_tokens_priority", None),
            ("input_cost_per_token_above_272k_tokens_flex", None),
            ("input_cost_per_token_batches", None),
            ("input_cost_per_token_priority", None),
            ("cache_creation_input_token_cost_above_1hr", None),
            (
                "cache_creation_input_token_cost_above_1hr_above_200k_tokens",
                None,
            ),
            ("input_cost_per_audio_token_above_200k_tokens", None),
            ("input_cost_per_character_above_128k_tokens", None),
            ("input_cost_per_token_above_k_tokens", None),
            ("input_cost_per_token_above_1.5k_tokens", None),
            ("input_cost_per_token_above_200m_tokens", None),
            ("input_cost_per_token", None),
        ];
        for (key, expected) in cases {
            assert_eq!(tier_key(key), expected, "{key}");
        }
    }
}

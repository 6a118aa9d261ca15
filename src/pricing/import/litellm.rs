//! LiteLLM's `model_prices_and_context_window.json`: one object per model, USD per token.

use std::collections::BTreeMap;

use serde_json::value::RawValue;

use super::{
    default_group, feed_error, per_million, price_field, required_price, Converted, FeedModel,
    ImportError, LeftOut, LeftOutReason,
};

/// The modes §3 imports; embeddings, images, audio and the rest price other units.
const TOKEN_MODES: [&str; 2] = ["chat", "completion"];

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
        let Ok(entry) = serde_json::from_str::<BTreeMap<String, &RawValue>>(raw.get()) else {
            converted.skipped += 1;
            continue;
        };
        let mode = entry
            .get("mode")
            .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok());
        if name == "sample_spec" || !mode.is_some_and(|m| TOKEN_MODES.contains(&m.as_str())) {
            converted.skipped += 1;
            continue;
        }
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
    let per_token = |key: &str| required_price(entry, key, key);
    let prices = per_token("input_cost_per_token")
        .and_then(|input| per_token("output_cost_per_token").map(|output| (input, output)));
    let (input, output) = match prices {
        Ok(prices) => prices,
        Err(LeftOutReason::NoTokenPrice { .. }) if priced_per_call(entry) => {
            return Err(LeftOutReason::PerCall)
        }
        Err(reason) => return Err(reason),
    };
    let cached = "cache_read_input_token_cost";
    let family = entry
        .get("litellm_provider")
        .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
        .filter(|p| !p.is_empty());
    Ok(FeedModel {
        family,
        input: per_million(input, "input_cost_per_token")?,
        output: per_million(output, "output_cost_per_token")?,
        cached_input: price_field(entry, cached, cached)?
            .map(|c| per_million(c, cached))
            .transpose()?,
    })
}

/// LiteLLM names a price per call `…_cost_per_request` or `…_cost_per_query`.
fn priced_per_call(entry: &BTreeMap<String, &RawValue>) -> bool {
    entry
        .keys()
        .any(|k| k.ends_with("_cost_per_request") || k.ends_with("_cost_per_query"))
}

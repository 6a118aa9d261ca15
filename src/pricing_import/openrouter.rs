//! OpenRouter's `/api/v1/models`: `data[]` with prices in USD per token, as decimal strings.

use std::collections::{BTreeMap, HashSet};

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{
    default_group, feed_error, per_million, price_field, required_price, Converted, FeedModel,
    ImportError, LeftOut, LeftOutReason,
};

#[derive(Deserialize)]
struct Feed<'a> {
    #[serde(borrow)]
    data: Option<Vec<&'a RawValue>>,
}

#[derive(Deserialize)]
struct Entry<'a> {
    id: Option<String>,
    #[serde(borrow)]
    pricing: Option<BTreeMap<String, &'a RawValue>>,
    #[serde(borrow)]
    top_provider: Option<&'a RawValue>,
}

/// The provider OpenRouter routes to by default; only its output limit is read.
#[derive(Deserialize)]
struct TopProvider<'a> {
    #[serde(borrow)]
    max_completion_tokens: Option<&'a RawValue>,
}

pub(super) fn convert(feed: &str, bytes: &[u8]) -> Result<Converted, ImportError> {
    let parsed: Feed<'_> = serde_json::from_slice(bytes)
        .map_err(|e| feed_error(feed, "", format!("not an OpenRouter models list: {e}")))?;
    let data = parsed
        .data
        .ok_or_else(|| feed_error(feed, "data", "missing"))?;
    let mut converted = Converted {
        group_ratio: default_group(),
        ..Default::default()
    };
    let mut seen = HashSet::new();
    for (i, raw) in data.iter().enumerate() {
        let field = |key: &str| format!("data[{i}]{key}");
        let entry: Entry<'_> = serde_json::from_str(raw.get())
            .map_err(|e| feed_error(feed, &field(""), format!("not a model object: {e}")))?;
        let id = entry
            .id
            .filter(|id| !id.is_empty())
            .ok_or_else(|| feed_error(feed, &field(".id"), "missing"))?;
        if !seen.insert(id.clone()) {
            return Err(feed_error(
                feed,
                &field(".id"),
                format!("{id:?} is listed twice"),
            ));
        }
        let family = id
            .split_once('/')
            .map(|(family, _)| family.to_owned())
            .filter(|f| !f.is_empty());
        match model(entry.pricing.as_ref(), family) {
            Ok(mut model) => {
                model.max_output_tokens = entry.top_provider.and_then(max_completion_tokens);
                converted.models.insert(id, model);
            }
            Err(reason) => converted.left_out.push(LeftOut { model: id, reason }),
        }
    }
    Ok(converted)
}

fn model(
    pricing: Option<&BTreeMap<String, &RawValue>>,
    family: Option<String>,
) -> Result<FeedModel, LeftOutReason> {
    let pricing = pricing.ok_or_else(|| LeftOutReason::NoTokenPrice {
        field: "pricing".into(),
    })?;
    // A fee on every request is a price per call that §4's per-token formula cannot carry;
    // listing the model at its token prices alone would under-price its retries.
    if price_field(pricing, "request", "pricing.request")?
        .is_some_and(|fee| fee != super::Exact::ZERO)
    {
        return Err(LeftOutReason::PerCall);
    }
    let input = required_price(pricing, "prompt", "pricing.prompt")?;
    let output = required_price(pricing, "completion", "pricing.completion")?;
    let cached = price_field(pricing, "input_cache_read", "pricing.input_cache_read")?;
    let cache_write = price_field(pricing, "input_cache_write", "pricing.input_cache_write")?;
    Ok(FeedModel {
        cache_write: cache_write
            .map(|c| per_million(c, "pricing.input_cache_write"))
            .transpose()?,
        ..FeedModel::base(
            family,
            per_million(input, "pricing.prompt")?,
            per_million(output, "pricing.completion")?,
            cached
                .map(|c| per_million(c, "pricing.input_cache_read"))
                .transpose()?,
        )
    })
}

/// `top_provider.max_completion_tokens` when it is a positive whole number; OpenRouter writes
/// `null` for providers that state no limit, and a snapshot takes no other value.
fn max_completion_tokens(top_provider: &RawValue) -> Option<i64> {
    let provider: TopProvider<'_> = serde_json::from_str(top_provider.get()).ok()?;
    super::positive_token_count(provider.max_completion_tokens?)
}

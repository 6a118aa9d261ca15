//! new-api's `/api/pricing`: ratios against a base of 2 USD per million tokens.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Deserialize;
use serde_json::value::RawValue;

use super::exact::Exact;
use super::{
    exact_value, feed_error, price_field, product, required_price, Converted, FeedModel,
    ImportError, LeftOut, LeftOutReason, RATIO_PLACES,
};

/// `model_ratio` 1 is 0.002 USD per thousand tokens: 2 USD per million.
const RATIO_BASE_USD: u128 = 2;

#[derive(Deserialize)]
struct Feed<'a> {
    success: Option<bool>,
    message: Option<String>,
    #[serde(borrow)]
    data: Option<Vec<&'a RawValue>>,
    #[serde(borrow)]
    vendors: Option<Vec<&'a RawValue>>,
    #[serde(borrow)]
    group_ratio: Option<BTreeMap<String, &'a RawValue>>,
    pricing_version: Option<String>,
}

#[derive(Deserialize)]
struct Vendor {
    id: Option<i64>,
    name: Option<String>,
}

pub(super) fn convert(feed: &str, bytes: &[u8]) -> Result<Converted, ImportError> {
    let parsed: Feed<'_> = serde_json::from_slice(bytes)
        .map_err(|e| feed_error(feed, "", format!("not a new-api pricing feed: {e}")))?;
    if parsed.success == Some(false) {
        let message = parsed.message.unwrap_or_default();
        return Err(feed_error(
            feed,
            "success",
            format!("the gateway reports failure: {message:?}"),
        ));
    }
    // A vendor entry this reader does not understand only costs that vendor's models their
    // vendor family; they fall back to the name rule.
    let vendors: HashMap<i64, String> = parsed
        .vendors
        .unwrap_or_default()
        .iter()
        .filter_map(|raw| serde_json::from_str::<Vendor>(raw.get()).ok())
        .filter_map(|v| Some((v.id?, v.name.filter(|n| !n.is_empty())?.to_lowercase())))
        .collect();

    let mut converted = Converted {
        version: parsed.pricing_version.filter(|v| !v.is_empty()),
        ..Default::default()
    };
    for (group, raw) in parsed
        .group_ratio
        .ok_or_else(|| feed_error(feed, "group_ratio", "missing"))?
    {
        let field = format!("group_ratio.{group}");
        let ratio = exact_value(raw).map_err(|p| feed_error(feed, &field, p))?;
        if ratio.places() > RATIO_PLACES {
            return Err(feed_error(
                feed,
                &field,
                format!(
                    "{} has more than {RATIO_PLACES} decimal places; a billing group's ratio \
                     is never rounded",
                    raw.get()
                ),
            ));
        }
        let ratio = ratio
            .round(RATIO_PLACES)
            .ok_or_else(|| feed_error(feed, &field, format!("{} is too large", raw.get())))?;
        converted.group_ratio.insert(group, ratio);
    }

    let data = parsed
        .data
        .ok_or_else(|| feed_error(feed, "data", "missing"))?;
    let mut seen = HashSet::new();
    for (i, raw) in data.iter().enumerate() {
        let entry: BTreeMap<String, &RawValue> = serde_json::from_str(raw.get())
            .map_err(|e| feed_error(feed, &format!("data[{i}]"), format!("not an object: {e}")))?;
        let name = entry
            .get("model_name")
            .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
            .filter(|n| !n.is_empty())
            .ok_or_else(|| feed_error(feed, &format!("data[{i}].model_name"), "missing"))?;
        if !seen.insert(name.clone()) {
            return Err(feed_error(
                feed,
                &format!("data[{i}].model_name"),
                format!("{name:?} is listed twice"),
            ));
        }
        match model(&entry, &name, &vendors) {
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

fn model(
    entry: &BTreeMap<String, &RawValue>,
    name: &str,
    vendors: &HashMap<i64, String>,
) -> Result<FeedModel, LeftOutReason> {
    // new-api writes quota_type on every model; a feed without it prices per token.
    let quota_type = entry.get("quota_type").map_or("0", |raw| raw.get());
    match quota_type {
        "0" => {}
        "1" => return Err(LeftOutReason::PerCall),
        other => return Err(LeftOutReason::UnknownQuotaType(other.to_owned())),
    }
    let model_ratio = required_price(entry, "model_ratio", "model_ratio")?;
    let completion_ratio = required_price(entry, "completion_ratio", "completion_ratio")?;
    let cache_ratio = price_field(entry, "cache_ratio", "cache_ratio")?;

    let input = product(model_ratio, Exact::integer(RATIO_BASE_USD), "model_ratio")?;
    let output = product(input, completion_ratio, "completion_ratio")?;
    let cached_input = cache_ratio
        .map(|ratio| product(input, ratio, "cache_ratio"))
        .transpose()?;
    let vendor = entry
        .get("vendor_id")
        .and_then(|raw| raw.get().parse::<i64>().ok())
        .and_then(|id| vendors.get(&id));
    let family = vendor.cloned().or_else(|| name_family(name));
    Ok(FeedModel::base(family, input, output, cached_input))
}

/// The model name up to its first `-`, digit or `.`: `deepseek-v4-flash` → `deepseek`,
/// `qwen3.5-122b` → `qwen`, `glm-5` → `glm`.
fn name_family(name: &str) -> Option<String> {
    let end = name
        .find(|c: char| c == '-' || c == '.' || c.is_ascii_digit())
        .unwrap_or(name.len());
    Some(name[..end].to_owned()).filter(|f| !f.is_empty())
}

#[cfg(test)]
mod tests {
    use super::name_family;

    #[test]
    fn family_from_the_name_stops_at_dash_digit_or_dot() {
        assert_eq!(
            name_family("deepseek-v4-flash").as_deref(),
            Some("deepseek")
        );
        assert_eq!(name_family("qwen3.5-122b-a10b").as_deref(), Some("qwen"));
        assert_eq!(name_family("glm-5").as_deref(), Some("glm"));
        assert_eq!(name_family("kimi.k2").as_deref(), Some("kimi"));
        assert_eq!(name_family("mistral").as_deref(), Some("mistral"));
        assert_eq!(name_family("4o-mini"), None);
    }
}

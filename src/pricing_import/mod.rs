//! `pricing import` / `pricing fetch` (SPEC §3 "Importing feeds"): converts a provider's or a
//! gateway's price feed into a snapshot file, so nobody types a rate card.
//!
//! Each format reads its feed into exact prices (`Exact`); this module rounds each price once,
//! decides the version, renders deterministic JSON and writes it without ever replacing a
//! different snapshot.

mod exact;
mod fetch;
mod litellm;
mod new_api;
mod openrouter;
mod render;
mod write;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use chrono::NaiveDate;
use rust_decimal::Decimal;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use exact::Exact;
pub use fetch::{fetch_feed, FetchError, MAX_FEED_BYTES};
pub use write::Written;

/// Prices carry at most 10 decimal places (§3); ratios at most 2.
const PRICE_PLACES: u32 = 10;
const RATIO_PLACES: u32 = 2;
/// Feeds without a version of their own are named by this many hex digits of their SHA-256.
const DIGEST_VERSION_LEN: usize = 32;

/// The feed formats `--format` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `/api/pricing` of new-api-style gateways (AIWave among them).
    NewApi,
    /// LiteLLM's `model_prices_and_context_window.json`.
    Litellm,
    /// OpenRouter's `/api/v1/models`.
    OpenRouter,
}

impl Format {
    pub const NAMES: [&'static str; 3] = ["new-api", "litellm", "openrouter"];

    pub fn name(self) -> &'static str {
        match self {
            Format::NewApi => "new-api",
            Format::Litellm => "litellm",
            Format::OpenRouter => "openrouter",
        }
    }
}

impl FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Format, String> {
        match s {
            "new-api" => Ok(Format::NewApi),
            "litellm" => Ok(Format::Litellm),
            "openrouter" => Ok(Format::OpenRouter),
            other => Err(format!(
                "unknown feed format {other:?}: expected one of {}",
                Format::NAMES.join(", ")
            )),
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the command line decides about the snapshot, beyond what the feed says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportOptions {
    pub format: Format,
    /// `pricing_checked_at`: `--checked-at`, else today (UTC).
    pub checked_at: NaiveDate,
    /// `pricing_source`: `--source`, else the URL fetched or the file's path.
    pub source: String,
    /// `--version`: overrides whatever version the feed or its digest gives.
    pub version: Option<String>,
}

/// A feed that cannot be imported, or a snapshot that must not be written.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("feed {feed}: {}{problem}", field_prefix(field))]
    Feed {
        /// The file path or URL the feed came from.
        feed: String,
        /// Dotted JSON path of the offending field, empty for whole-feed problems.
        field: String,
        problem: String,
    },
    #[error(
        "pricing version {version:?} ({origin}) cannot name a snapshot file: \
         use letters, digits, '.', '-' and '_', not starting with '.'"
    )]
    Version { version: String, origin: String },
    #[error("--source is empty: a snapshot must say where its prices came from")]
    EmptySource,
    #[error(
        "refusing to write {}: {} already claims version {version:?} checked {checked_at} \
         with different content; import with another --checked-at or --version, or remove it",
        path.display(),
        existing.display()
    )]
    Conflict {
        path: PathBuf,
        existing: PathBuf,
        version: String,
        checked_at: NaiveDate,
    },
    #[error(
        "refusing to write {}: a different file of that name exists and is no snapshot of \
         this version and date",
        path.display()
    )]
    Occupied { path: PathBuf },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A guard: an import that the snapshot loader would refuse is a bug here, never written.
    #[error("the converted snapshot does not load: {0}")]
    Unloadable(#[from] crate::pricing::PricingError),
}

fn field_prefix(field: &str) -> String {
    if field.is_empty() {
        String::new()
    } else {
        format!("{field}: ")
    }
}

/// Why a model of the feed is not in the snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeftOutReason {
    /// A price per call (new-api `quota_type` 1, an OpenRouter `pricing.request`, a LiteLLM
    /// cost per request or query): §4's formula prices tokens only.
    PerCall,
    /// LiteLLM prices it per second of audio or video, or of compute.
    PerSecond,
    /// LiteLLM prices it per character (older Vertex AI models).
    PerCharacter,
    /// LiteLLM prices it per image or pixel.
    PerImage,
    /// Prices that change with the input's length in a form a snapshot's tiers do not take,
    /// such as LiteLLM's `tiered_pricing` ranges; its flat prices would be wrong for some.
    OtherTiers { field: String },
    /// The feed lists the model without any price.
    NoPrice,
    /// A LiteLLM entry that only names another (`alias_of`); the model is priced under that
    /// name.
    Alias { of: String },
    /// A LiteLLM entry whose `mode` is not `chat`, `completion` or `responses` (`None`: it
    /// states no mode): embeddings, images, audio and the rest price other units.
    Mode(Option<String>),
    /// The feed gives no price per token in this field.
    NoTokenPrice { field: String },
    /// The feed's value cannot be a price: negative (OpenRouter writes -1 for "varies"),
    /// not a number, or more digits than can be computed exactly.
    BadPrice { field: String, problem: String },
    /// new-api's `quota_type` is 0 (per token) or 1 (per call); anything else is unknown.
    UnknownQuotaType(String),
}

impl fmt::Display for LeftOutReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeftOutReason::PerCall => f.write_str("priced per call"),
            LeftOutReason::PerSecond => f.write_str("priced per second"),
            LeftOutReason::PerCharacter => f.write_str("priced per character"),
            LeftOutReason::PerImage => f.write_str("priced per image"),
            LeftOutReason::OtherTiers { field } => {
                write!(f, "tiered prices in another form ({field})")
            }
            LeftOutReason::NoPrice => f.write_str("no price at all"),
            LeftOutReason::Alias { of } => write!(f, "an alias of {of}, priced under that name"),
            LeftOutReason::Mode(Some(mode)) => {
                write!(f, "mode {mode:?}, not chat, completion or responses")
            }
            LeftOutReason::Mode(None) => {
                f.write_str("no mode, so not chat, completion or responses")
            }
            LeftOutReason::NoTokenPrice { field } => write!(f, "no per-token price ({field})"),
            LeftOutReason::BadPrice { field, problem } => write!(f, "{field}: {problem}"),
            LeftOutReason::UnknownQuotaType(q) => write!(f, "unknown quota_type {q}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOut {
    pub model: String,
    pub reason: LeftOutReason,
}

/// A model whose exact price had more than 10 decimal places in these fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rounded {
    pub model: String,
    /// Snapshot fields: `input`, `cache_write`, `tiers[0].output`, ….
    pub fields: Vec<String>,
}

/// A converted feed: the snapshot file's bytes and what the command reports about them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    pub version: String,
    pub checked_at: NaiveDate,
    pub source: String,
    pub models: usize,
    /// Models with a price rounded to 10 places, by name.
    pub rounded: Vec<Rounded>,
    /// Models of the feed not in the snapshot, by name.
    pub left_out: Vec<LeftOut>,
    /// Entries that are no model at all (LiteLLM's `sample_spec`, or not an object).
    pub skipped: usize,
    /// The snapshot file, byte for byte.
    pub bytes: Vec<u8>,
}

impl Imported {
    /// `<checked_at>-<version>.json` (§3).
    pub fn file_name(&self) -> String {
        format!("{}-{}.json", self.checked_at, self.version)
    }

    /// Lowercase hex SHA-256 of the file's bytes, as `pricing check` and the rows report it.
    pub fn digest(&self) -> String {
        hex::encode(Sha256::digest(&self.bytes))
    }
}

/// A feed read by its format: exact prices, before the one rounding.
#[derive(Debug, Default)]
struct Converted {
    /// The version the feed itself reports (new-api only).
    version: Option<String>,
    group_ratio: BTreeMap<String, Decimal>,
    models: BTreeMap<String, FeedModel>,
    left_out: Vec<LeftOut>,
    skipped: usize,
}

/// One model's exact prices, USD per million tokens.
#[derive(Debug, Clone)]
struct FeedModel {
    family: Option<String>,
    input: Exact,
    output: Exact,
    cached_input: Option<Exact>,
    cache_write: Option<Exact>,
    max_output_tokens: Option<i64>,
    /// Threshold (input tokens) → the prices above it; a map keeps them in increasing order.
    tiers: BTreeMap<i64, FeedTier>,
}

impl FeedModel {
    /// A model with base prices only, the fields the feeds without more give.
    fn base(family: Option<String>, input: Exact, output: Exact, cached: Option<Exact>) -> Self {
        FeedModel {
            family,
            input,
            output,
            cached_input: cached,
            cache_write: None,
            max_output_tokens: None,
            tiers: BTreeMap::new(),
        }
    }
}

/// The exact prices of one long-context tier; absent ones stay the base prices.
#[derive(Debug, Clone, Default)]
struct FeedTier {
    input: Option<Exact>,
    output: Option<Exact>,
    cached_input: Option<Exact>,
    cache_write: Option<Exact>,
}

/// A model's prices as the snapshot lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ListedModel {
    family: Option<String>,
    input: Decimal,
    output: Decimal,
    cached_input: Option<Decimal>,
    cache_write: Option<Decimal>,
    max_output_tokens: Option<i64>,
    /// In increasing order of threshold.
    tiers: Vec<ListedTier>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ListedTier {
    above_input_tokens: i64,
    input: Option<Decimal>,
    output: Option<Decimal>,
    cached_input: Option<Decimal>,
    cache_write: Option<Decimal>,
}

/// Converts `bytes`, a feed read from `feed` (a path or URL, for messages), into a snapshot.
pub fn convert(feed: &str, bytes: &[u8], options: &ImportOptions) -> Result<Imported, ImportError> {
    if options.source.trim().is_empty() {
        return Err(ImportError::EmptySource);
    }
    let converted = match options.format {
        Format::NewApi => new_api::convert(feed, bytes)?,
        Format::Litellm => litellm::convert(feed, bytes)?,
        Format::OpenRouter => openrouter::convert(feed, bytes)?,
    };
    let version = match (&options.version, converted.version) {
        (Some(flag), _) => checked_version(flag, "--version")?,
        (None, Some(own)) => checked_version(&own, &format!("pricing_version of {feed}"))?,
        (None, None) => {
            let mut digest = hex::encode(Sha256::digest(bytes));
            digest.truncate(DIGEST_VERSION_LEN);
            digest
        }
    };

    let mut left_out = converted.left_out;
    let mut rounded = Vec::new();
    let mut models = BTreeMap::new();
    for (name, model) in converted.models {
        match listed(model) {
            Ok((listed, fields)) => {
                if !fields.is_empty() {
                    rounded.push(Rounded {
                        model: name.clone(),
                        fields,
                    });
                }
                models.insert(name, listed);
            }
            Err(field) => left_out.push(LeftOut {
                model: name,
                reason: LeftOutReason::BadPrice {
                    field,
                    problem: "too large for a price in USD per million tokens".into(),
                },
            }),
        }
    }
    if models.is_empty() {
        return Err(feed_error(
            feed,
            "",
            format!(
                "no model priced per token in this {} feed ({} left out)",
                options.format,
                left_out.len()
            ),
        ));
    }
    left_out.sort_by(|a, b| a.model.cmp(&b.model));

    let bytes = render::snapshot_json(
        &options.source,
        options.checked_at,
        &version,
        &converted.group_ratio,
        &models,
    );
    let imported = Imported {
        version,
        checked_at: options.checked_at,
        source: options.source.clone(),
        models: models.len(),
        rounded,
        left_out,
        skipped: converted.skipped,
        bytes,
    };
    crate::pricing::Snapshot::from_bytes(&PathBuf::from(imported.file_name()), &imported.bytes)?;
    Ok(imported)
}

/// The one rounding of §3: each exact price to 10 places when it has more. Gives the listed
/// model and the fields that were rounded, or the field too large for a `Decimal`.
fn listed(model: FeedModel) -> Result<(ListedModel, Vec<String>), String> {
    let mut rounded = Vec::new();
    let input = round_price(model.input, "input".into(), &mut rounded)?;
    let output = round_price(model.output, "output".into(), &mut rounded)?;
    let mut optional = |price: Option<Exact>, field: String| {
        price
            .map(|price| round_price(price, field, &mut rounded))
            .transpose()
    };
    let cached_input = optional(model.cached_input, "cached_input".into())?;
    let cache_write = optional(model.cache_write, "cache_write".into())?;
    let mut tiers = Vec::with_capacity(model.tiers.len());
    for (i, (above_input_tokens, tier)) in model.tiers.into_iter().enumerate() {
        let at = |key: &str| format!("tiers[{i}].{key}");
        tiers.push(ListedTier {
            above_input_tokens,
            input: optional(tier.input, at("input"))?,
            output: optional(tier.output, at("output"))?,
            cached_input: optional(tier.cached_input, at("cached_input"))?,
            cache_write: optional(tier.cache_write, at("cache_write"))?,
        });
    }
    let listed = ListedModel {
        family: model.family,
        input,
        output,
        cached_input,
        cache_write,
        max_output_tokens: model.max_output_tokens,
        tiers,
    };
    Ok((listed, rounded))
}

/// One price rounded to 10 places, noting `field` in `rounded` when that changed it.
fn round_price(price: Exact, field: String, rounded: &mut Vec<String>) -> Result<Decimal, String> {
    if price.places() > PRICE_PLACES {
        rounded.push(field.clone());
    }
    price.round(PRICE_PLACES).ok_or(field)
}

/// The version becomes part of a file name, and a feed is untrusted input: `../x` must not
/// write outside `--out`.
fn checked_version(version: &str, origin: &str) -> Result<String, ImportError> {
    let fits = !version.is_empty()
        && version.len() <= 128
        && !version.starts_with('.')
        && version
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    if fits {
        Ok(version.to_owned())
    } else {
        Err(ImportError::Version {
            version: version.to_owned(),
            origin: origin.to_owned(),
        })
    }
}

fn feed_error(feed: &str, field: &str, problem: impl Into<String>) -> ImportError {
    ImportError::Feed {
        feed: feed.to_owned(),
        field: field.to_owned(),
        problem: problem.into(),
    }
}

/// The exact value of a JSON number, or of a decimal string (OpenRouter quotes its prices).
fn exact_value(raw: &RawValue) -> Result<Exact, String> {
    let text = raw.get();
    if text.starts_with('"') {
        let inner: String = serde_json::from_str(text).map_err(|e| e.to_string())?;
        Exact::parse(&inner)
    } else {
        Exact::parse(text)
    }
}

/// A price field: `Ok(None)` when absent (or null), a left-out reason when unusable.
fn price_field(
    entry: &BTreeMap<String, &RawValue>,
    key: &str,
    field: &str,
) -> Result<Option<Exact>, LeftOutReason> {
    match entry.get(key) {
        None => Ok(None),
        Some(raw) if raw.get() == "null" => Ok(None),
        Some(raw) => exact_value(raw)
            .map(Some)
            .map_err(|problem| LeftOutReason::BadPrice {
                field: field.to_owned(),
                problem,
            }),
    }
}

/// A required per-token price.
fn required_price(
    entry: &BTreeMap<String, &RawValue>,
    key: &str,
    field: &str,
) -> Result<Exact, LeftOutReason> {
    price_field(entry, key, field)?.ok_or_else(|| LeftOutReason::NoTokenPrice {
        field: field.to_owned(),
    })
}

/// `a × b` exactly, or a left-out reason naming `field`.
fn product(a: Exact, b: Exact, field: &str) -> Result<Exact, LeftOutReason> {
    a.checked_mul(b).ok_or_else(|| LeftOutReason::BadPrice {
        field: field.to_owned(),
        problem: "more digits than can be computed exactly".into(),
    })
}

/// Per-token feeds (LiteLLM, OpenRouter) list USD per token; snapshots per million tokens.
fn per_million(per_token: Exact, field: &str) -> Result<Exact, LeftOutReason> {
    product(per_token, Exact::integer(1_000_000), field)
}

/// A model's output limit as a snapshot takes it: a positive JSON integer. Anything else
/// (`null`, a description, `0`) states no limit, and the field is left out.
fn positive_token_count(raw: &RawValue) -> Option<i64> {
    raw.get().parse::<i64>().ok().filter(|n| *n > 0)
}

/// Feeds that price every caller alike: one group `default` = 1.
fn default_group() -> BTreeMap<String, Decimal> {
    BTreeMap::from([("default".to_owned(), Decimal::ONE)])
}

#[cfg(test)]
mod tests;

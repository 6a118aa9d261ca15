//! `pricing import` and `pricing fetch` as a user runs them: the real binary, a feed on disk or
//! served on 127.0.0.1, and `pricing check` on what they wrote.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use common::child::{binary, run, stderr, stdout};
use common::feed::serve;
use rust_decimal::{Decimal, RoundingStrategy};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

const FEEDS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/feeds");
const AIWAVE_FILE: &str = "2026-08-22-a42d372ccf0b5dd13ecf71203521f9d2.json";

fn feed(name: &str) -> String {
    format!("{FEEDS}/{name}")
}

fn sha256_hex(path: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(path).unwrap()))
}

/// `pricing import --format FORMAT --checked-at 2026-08-22 --out OUT FILE`.
fn import(format: &str, out: &Path, file: &str) -> Output {
    let out = out.to_str().unwrap();
    run([
        "pricing",
        "import",
        "--format",
        format,
        "--checked-at",
        "2026-08-22",
        "--out",
        out,
        file,
    ])
}

fn pricing_check(dir: &Path) -> Output {
    run(["pricing", "check", dir.to_str().unwrap()])
}

#[test]
fn import_writes_a_snapshot_that_pricing_check_accepts() {
    let out = tempfile::tempdir().unwrap();
    let file = feed("new-api.json");
    let result = import("new-api", out.path(), &file);
    assert!(result.status.success(), "{}", stderr(&result));
    let path = out.path().join(AIWAVE_FILE);
    let printed = stdout(&result);
    assert!(
        printed.starts_with(&format!("wrote {}", path.display())),
        "{printed}"
    );
    for expected in [
        "version a42d372ccf0b5dd13ecf71203521f9d2".to_owned(),
        "checked 2026-08-22".to_owned(),
        format!("source {file}"),
        "7 models".to_owned(),
        format!("sha256 {}", sha256_hex(&path)),
        "rounded to 10 decimal places: deepseek-v4-flash (cached_input)".to_owned(),
        "left out: mj_imagine: priced per call".to_owned(),
    ] {
        assert!(printed.contains(&expected), "{expected:?} in {printed}");
    }

    let check = pricing_check(out.path());
    assert!(check.status.success(), "{}", stderr(&check));
    assert!(stdout(&check).contains(
        "deepseek-v4-flash  family deepseek  input 0.319  output 0.957  cached_input 0.0318"
    ));

    // The same feed again: nothing to do, and that is success.
    let again = import("new-api", out.path(), &file);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(
        stdout(&again).starts_with("unchanged"),
        "{}",
        stdout(&again)
    );
}

#[test]
fn import_refuses_to_replace_a_different_snapshot_of_the_same_version_and_date() {
    let out = tempfile::tempdir().unwrap();
    let first = import("new-api", out.path(), &feed("new-api.json"));
    assert!(first.status.success(), "{}", stderr(&first));
    let before = std::fs::read(out.path().join(AIWAVE_FILE)).unwrap();

    // The gateway changed a price but not its pricing_version.
    let changed = out.path().join("changed-feed.txt");
    let text = std::fs::read_to_string(feed("new-api.json")).unwrap();
    std::fs::write(&changed, text.replace("0.1595", "0.16")).unwrap();
    let second = import("new-api", out.path(), changed.to_str().unwrap());
    assert!(!second.status.success());
    assert!(
        stderr(&second).contains("refusing to write"),
        "{}",
        stderr(&second)
    );
    assert_eq!(std::fs::read(out.path().join(AIWAVE_FILE)).unwrap(), before);
}

#[test]
fn import_writes_into_the_pricing_directory_by_default() {
    let out = tempfile::tempdir().unwrap();
    let result = binary()
        .args([
            "pricing",
            "import",
            "--format",
            "litellm",
            "--version",
            "litellm-1",
        ])
        .args(["--checked-at", "2026-08-22", "--source", "litellm main"])
        .arg(feed("litellm.json"))
        .env("RETRY_SPEND_PRICING_DIR", out.path())
        .output()
        .unwrap();
    assert!(result.status.success(), "{}", stderr(&result));
    let path = out.path().join("2026-08-22-litellm-1.json");
    let snapshot: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(snapshot["pricing_source"], "litellm main");
    assert_eq!(snapshot["models"]["gpt-4o"]["input"], "2.5");
    assert!(stdout(&result).contains("left out: perplexity/pplx-online-preview: priced per call"));
}

#[test]
fn fetch_downloads_a_feed_into_a_snapshot() {
    let body = std::fs::read(feed("openrouter.json")).unwrap();
    let addr = serve(body.clone());
    let url = format!("http://{addr}/api/pricing");
    let out = tempfile::tempdir().unwrap();
    let result = run([
        "pricing",
        "fetch",
        "--format",
        "openrouter",
        "--checked-at",
        "2026-08-22",
        "--timeout",
        "30s",
        "--out",
        out.path().to_str().unwrap(),
        &url,
    ]);
    assert!(result.status.success(), "{}", stderr(&result));

    // No version in an OpenRouter feed: the downloaded bytes' digest names it.
    let version = &hex::encode(Sha256::digest(&body))[..32];
    let path = out.path().join(format!("2026-08-22-{version}.json"));
    let printed = stdout(&result);
    assert!(printed.contains(&format!("source {url}")), "{printed}");
    assert!(
        printed.contains(&format!("sha256 {}", sha256_hex(&path))),
        "{printed}"
    );
    assert!(
        printed.contains("left out: perplexity/sonar: priced per call"),
        "{printed}"
    );
    let check = pricing_check(out.path());
    assert!(check.status.success(), "{}", stderr(&check));
    assert!(stdout(&check).contains(&format!("source {url}")));
}

#[test]
fn fetch_of_a_non_2xx_answer_is_a_clear_error_and_writes_nothing() {
    let addr = serve(Vec::new());
    let url = format!("http://{addr}/down");
    let out = tempfile::tempdir().unwrap();
    let result = run([
        "pricing",
        "fetch",
        "--format",
        "new-api",
        "--out",
        out.path().to_str().unwrap(),
        &url,
    ]);
    assert!(!result.status.success());
    let message = stderr(&result);
    assert!(
        message.contains(&format!(
            "{url}: the server answered HTTP 503 Service Unavailable"
        )),
        "{message}"
    );
    assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);
}

/// A trimmed copy of real entries of LiteLLM's `model_prices_and_context_window_backup.json`
/// (the litellm 1.110.2 wheel), byte for byte: long-context `_above_<N>k_tokens` tiers beside
/// `_priority`/`_flex`/`_batches` prices, cache-write costs, a `responses` model, and entries
/// priced per second, character, image or request, in `tiered_pricing` ranges, with no price,
/// aliases and other modes.
const LITELLM_REAL: &str = "litellm-real.json";

type Entry = BTreeMap<String, Box<RawValue>>;

/// A LiteLLM number, exactly as its text reads (no float in between).
fn literal(raw: &RawValue) -> Decimal {
    let text = raw.get();
    let exact = if text.contains(['e', 'E']) {
        Decimal::from_scientific(text)
    } else {
        Decimal::from_str_exact(text)
    };
    exact.unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// USD per token → the snapshot's USD per million tokens, rounded once, half-even, to 10 places.
fn per_million(raw: &RawValue) -> Decimal {
    (literal(raw) * Decimal::from(1_000_000))
        .round_dp_with_strategy(10, RoundingStrategy::MidpointNearestEven)
        .normalize()
}

fn listed_price(listed: &serde_json::Value, key: &str) -> Option<Decimal> {
    listed
        .get(key)
        .map(|v| Decimal::from_str_exact(v.as_str().expect("a decimal string")).unwrap())
}

fn expected_price(entry: &Entry, key: &str) -> Option<Decimal> {
    entry
        .get(key)
        .filter(|raw| raw.get() != "null")
        .map(|raw| per_million(raw))
}

const TOKEN_PRICES: [(&str, &str); 4] = [
    ("input_cost_per_token", "input"),
    ("output_cost_per_token", "output"),
    ("cache_read_input_token_cost", "cached_input"),
    ("cache_creation_input_token_cost", "cache_write"),
];

/// Threshold → (snapshot key → price) from the entry's `<price>_above_<N>k_tokens` keys.
fn expected_tiers(entry: &Entry) -> BTreeMap<i64, BTreeMap<&'static str, Decimal>> {
    let mut tiers: BTreeMap<i64, BTreeMap<&'static str, Decimal>> = BTreeMap::new();
    for (key, raw) in entry {
        let Some((base, n)) = key
            .strip_suffix("k_tokens")
            .and_then(|k| k.rsplit_once("_above_"))
        else {
            continue;
        };
        let Some((_, listed_as)) = TOKEN_PRICES.iter().find(|(feed, _)| *feed == base) else {
            continue;
        };
        let Ok(thousands) = n.parse::<i64>() else {
            continue;
        };
        tiers
            .entry(thousands * 1_000)
            .or_default()
            .insert(listed_as, per_million(raw));
    }
    tiers
}

#[test]
fn litellm_real_file_imports_prices_tiers_and_output_limits_exactly() {
    let out = tempfile::tempdir().unwrap();
    let file = feed(LITELLM_REAL);
    let result = import("litellm", out.path(), &file);
    assert!(result.status.success(), "{}", stderr(&result));
    let printed = stdout(&result);

    let raw_text = std::fs::read_to_string(&file).unwrap();
    let raw: BTreeMap<String, Box<RawValue>> = serde_json::from_str(&raw_text).unwrap();
    let version = &hex::encode(Sha256::digest(raw_text.as_bytes()))[..32];
    let written = out.path().join(format!("2026-08-22-{version}.json"));
    let snapshot: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&written).unwrap()).unwrap();
    let models = snapshot["models"].as_object().unwrap();

    let mut kept = 0;
    for (name, raw_entry) in &raw {
        if name == "sample_spec" {
            continue;
        }
        let entry: Entry = serde_json::from_str(raw_entry.get()).unwrap();
        let Some(listed) = models.get(name) else {
            assert!(
                printed.contains(&format!("left out: {name}: ")),
                "{name} is neither kept nor listed as left out:\n{printed}"
            );
            continue;
        };
        kept += 1;
        let mode = entry["mode"].get();
        assert!(
            ["\"chat\"", "\"completion\"", "\"responses\""].contains(&mode),
            "{name}: {mode}"
        );
        for (feed_key, listed_key) in TOKEN_PRICES {
            assert_eq!(
                listed_price(listed, listed_key),
                expected_price(&entry, feed_key),
                "{name}.{listed_key}"
            );
        }
        let max_output = entry
            .get("max_output_tokens")
            .and_then(|raw| raw.get().parse::<i64>().ok());
        assert_eq!(
            listed.get("max_output_tokens").and_then(|v| v.as_i64()),
            max_output,
            "{name}.max_output_tokens"
        );
        let tiers: BTreeMap<i64, BTreeMap<&'static str, Decimal>> = listed
            .get("tiers")
            .map(|t| t.as_array().unwrap().as_slice())
            .unwrap_or_default()
            .iter()
            .map(|tier| {
                let prices = TOKEN_PRICES
                    .iter()
                    .filter_map(|(_, key)| Some((*key, listed_price(tier, key)?)))
                    .collect();
                (tier["above_input_tokens"].as_i64().unwrap(), prices)
            })
            .collect();
        assert_eq!(tiers, expected_tiers(&entry), "{name}.tiers");
        let thresholds: Vec<i64> = tiers.keys().copied().collect();
        let written_order: Vec<i64> = listed
            .get("tiers")
            .map(|t| t.as_array().unwrap().as_slice())
            .unwrap_or_default()
            .iter()
            .map(|tier| tier["above_input_tokens"].as_i64().unwrap())
            .collect();
        assert_eq!(written_order, thresholds, "{name}: tiers by threshold");
    }
    assert_eq!(models.len(), kept);
    assert!(printed.contains(&format!("  {kept} models  ")), "{printed}");
    assert!(
        printed.contains("skipped 1 entries that are no model"),
        "{printed}"
    );

    // Spot checks, written out by hand from the raw file.
    let model = |name: &str| &models[name];
    let gemini = model("gemini-2.5-pro");
    assert_eq!(gemini["input"], "1.25");
    assert_eq!(
        gemini["tiers"],
        serde_json::json!([{"above_input_tokens": 200000, "input": "2.5", "output": "15",
                            "cached_input": "0.25", "cache_write": "0.25"}])
    );
    assert_eq!(gemini["max_output_tokens"], 65535);
    let sonnet = model("claude-sonnet-4-5");
    assert_eq!(
        (&sonnet["cache_write"], &sonnet["max_output_tokens"]),
        (&serde_json::json!("3.75"), &serde_json::json!(64000))
    );
    assert_eq!(
        model("claude-sonnet-4-5-20250929-v1:0")["tiers"],
        serde_json::json!([{"above_input_tokens": 200000, "input": "6", "output": "22.5",
                            "cached_input": "0.6", "cache_write": "7.5"}])
    );
    let thresholds = |name: &str| -> Vec<i64> {
        model(name)["tiers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["above_input_tokens"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(thresholds("kyma/qwen3.7-flash"), [32_000, 256_000]);
    assert_eq!(thresholds("gpt-5.4"), [272_000]);
    assert!(
        model("gpt-5").get("tiers").is_none(),
        "_priority/_flex are no tiers"
    );
    assert_eq!(model("gpt-5-pro")["output"], "120");
    assert_eq!(model("o3-pro")["family"], "openai");
    // 4.6999999999999995e-07 per token is 0.46999999999999995 per million: rounded, and listed.
    assert_eq!(model("opencode_go/qwen3.8-flash")["output"], "0.47");
    assert!(
        printed.contains(
            "rounded to 10 decimal places: opencode_go/qwen3.8-flash (output, cache_write)"
        ),
        "{printed}"
    );

    for (name, reason) in [
        (
            "dashscope/qwen-flash",
            "tiered prices in another form (tiered_pricing)",
        ),
        (
            "opencode_go/gpt-5.6-luna",
            "tiered prices in another form (tiered_pricing)",
        ),
        (
            "bedrock/us-east-1/1-month-commitment/anthropic.claude-v2:1",
            "priced per second",
        ),
        ("twelvelabs.pegasus-1-2-v1:0", "priced per second"),
        ("medlm-large", "priced per character"),
        ("meta/sam-3.1", "priced per image"),
        ("perplexity/pplx-70b-online", "priced per call"),
        ("perplexity/preset/pro-search", "no price at all"),
        ("github_copilot/gpt-4o", "no price at all"),
        (
            "fireworks_ai/accounts/fireworks/models/minimax-m2p7",
            "no per-token price (input_cost_per_token)",
        ),
        (
            "bedrock/claude-fable-latest",
            "an alias of global.anthropic.claude-fable-5-1, priced under that name",
        ),
        (
            "text-embedding-3-small",
            "mode \"embedding\", not chat, completion or responses",
        ),
        (
            "1024-x-1024/50-steps/stability.stable-diffusion-xl-v1",
            "mode \"image_generation\", not chat, completion or responses",
        ),
        (
            "tts-1",
            "mode \"audio_speech\", not chat, completion or responses",
        ),
    ] {
        let line = format!("left out: {name}: {reason}\n");
        assert!(printed.contains(&line), "{line:?} in {printed}");
    }

    let check = pricing_check(out.path());
    assert!(check.status.success(), "{}", stderr(&check));
}

use std::path::Path;
use std::str::FromStr;

use super::*;
use crate::pricing::{PricingBook, Snapshot};

const NEW_API: &[u8] = include_bytes!("../../../tests/fixtures/feeds/new-api.json");
const LITELLM: &[u8] = include_bytes!("../../../tests/fixtures/feeds/litellm.json");
const OPENROUTER: &[u8] = include_bytes!("../../../tests/fixtures/feeds/openrouter.json");
const SHIPPED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/pricing");
const AIWAVE_VERSION: &str = "a42d372ccf0b5dd13ecf71203521f9d2";

fn d(s: &str) -> Decimal {
    Decimal::from_str(s).unwrap()
}

fn options(format: Format) -> ImportOptions {
    ImportOptions {
        format,
        checked_at: NaiveDate::from_ymd_opt(2026, 8, 22).unwrap(),
        source: "https://aiwave.live/api/pricing".into(),
        version: None,
    }
}

fn import(format: Format, feed: &[u8]) -> Imported {
    convert("feed.json", feed, &options(format)).unwrap()
}

fn import_err(format: Format, feed: &str) -> ImportError {
    convert("feed.json", feed.as_bytes(), &options(format)).unwrap_err()
}

/// The snapshot as the collector's loader reads it back.
fn loaded(imported: &Imported) -> Snapshot {
    Snapshot::from_bytes(Path::new(&imported.file_name()), &imported.bytes).unwrap()
}

fn price(snapshot: &Snapshot, model: &str) -> (String, String, Option<String>) {
    let p = &snapshot.models[model];
    (
        p.input.to_string(),
        p.output.to_string(),
        p.cached_input.map(|c| c.to_string()),
    )
}

fn left_out(imported: &Imported) -> Vec<(&str, &LeftOutReason)> {
    imported
        .left_out
        .iter()
        .map(|l| (l.model.as_str(), &l.reason))
        .collect()
}

fn rounded(imported: &Imported) -> Vec<(&str, Vec<&str>)> {
    imported
        .rounded
        .iter()
        .map(|r| (r.model.as_str(), r.fields.clone()))
        .collect()
}

fn minimal_new_api(group_ratio: &str, version: &str) -> String {
    format!(
        r#"{{"success":true,"data":[{{"model_name":"glm-5","quota_type":0,"model_ratio":0.3875,
            "completion_ratio":3.2}}],"vendors":[],"group_ratio":{group_ratio}{version}}}"#
    )
}

#[test]
fn new_api_input_is_model_ratio_times_two_computed_exactly() {
    let snapshot = loaded(&import(Format::NewApi, NEW_API));
    // 0.1595 is no binary float; read from its text, 0.1595 × 2 is 0.319, not 0.31899999….
    assert_eq!(
        price(&snapshot, "deepseek-v4-flash"),
        ("0.319".into(), "0.957".into(), Some("0.0318".into()))
    );
    assert_eq!(
        price(&snapshot, "gpt-4o-mini"),
        ("0.15".into(), "0.6".into(), Some("0.075".into()))
    );
    assert_eq!(snapshot.models["qwen3.5-122b-a10b"].cached_input, None);
}

#[test]
fn new_api_feed_reproduces_the_shipped_aiwave_snapshot() {
    let imported = import(Format::NewApi, NEW_API);
    let snapshot = loaded(&imported);
    let book = PricingBook::load_dir(Path::new(SHIPPED)).unwrap();
    let shipped = book.get(AIWAVE_VERSION).unwrap();
    assert_eq!(snapshot.version, shipped.version);
    assert_eq!(snapshot.checked_at, shipped.checked_at);
    assert_eq!(snapshot.group_ratio, shipped.group_ratio);
    for (model, price) in &shipped.models {
        assert_eq!(&snapshot.models[model], price, "{model}");
    }
}

#[test]
fn new_api_family_is_the_vendor_lower_cased_else_the_name_prefix() {
    let snapshot = loaded(&import(Format::NewApi, NEW_API));
    let family = |m: &str| snapshot.models[m].family.clone().unwrap_or_default();
    assert_eq!(family("deepseek-v4-pro"), "deepseek");
    assert_eq!(family("gpt-4o-mini"), "openai");
    assert_eq!(family("glm-5"), "glm");
    assert_eq!(family("kimi-k2.7-code"), "kimi");
    // vendor_id 7 names no vendor of the feed.
    assert_eq!(family("qwen3.5-122b-a10b"), "qwen");
}

#[test]
fn new_api_per_call_models_are_left_out_and_listed() {
    let imported = import(Format::NewApi, NEW_API);
    assert_eq!(
        left_out(&imported),
        [("mj_imagine", &LeftOutReason::PerCall)]
    );
    assert!(!loaded(&imported).models.contains_key("mj_imagine"));
    assert_eq!(imported.models, 7);
}

#[test]
fn each_price_is_rounded_once_half_even_to_ten_places_and_listed() {
    let imported = import(Format::NewApi, NEW_API);
    // Exactly 0.957 × 0.03479623824451411 = 0.033300000000000003270…: cached input rounded.
    // Outputs come from the exact input, never from a rounded one.
    assert_eq!(
        rounded(&imported),
        [
            ("deepseek-v4-flash", vec!["cached_input"]),
            ("deepseek-v4-pro", vec!["cached_input"]),
            ("glm-5", vec!["output", "cached_input"]),
            ("kimi-k2.6", vec!["output", "cached_input"]),
            ("kimi-k2.7-code", vec!["output", "cached_input"]),
            ("qwen3.5-122b-a10b", vec!["output"]),
        ]
    );
    let tie = minimal_new_api(r#"{"default":1}"#, "").replace(
        r#""completion_ratio":3.2"#,
        r#""completion_ratio":1,"cache_ratio":0.00000000025"#,
    );
    let tie = import(Format::NewApi, tie.as_bytes());
    // 0.775 × 0.00000000025 = 0.00000000019375 → 0.0000000002; no tie-break needed here.
    assert_eq!(
        loaded(&tie).models["glm-5"].cached_input,
        Some(d("0.0000000002"))
    );
    let half = minimal_new_api(r#"{"default":1}"#, "").replace("0.3875", "0.000000000025");
    let half = import(Format::NewApi, half.as_bytes());
    // Exactly half a unit of the tenth place: to the even neighbour, 0.
    assert_eq!(loaded(&half).models["glm-5"].input, Decimal::ZERO);
    assert_eq!(rounded(&half), [("glm-5", vec!["input", "output"])]);
}

#[test]
fn new_api_group_ratio_is_copied_exactly() {
    let feed = minimal_new_api(r#"{"default":3,"svip":0.85,"vip":1}"#, "");
    let snapshot = loaded(&import(Format::NewApi, feed.as_bytes()));
    assert_eq!(snapshot.group_ratio["svip"], d("0.85"));
    assert_eq!(snapshot.group_ratio["default"], d("3"));
}

#[test]
fn a_group_ratio_with_more_than_two_places_is_an_error_naming_the_group() {
    let e = import_err(
        Format::NewApi,
        &minimal_new_api(r#"{"default":3,"svip":0.855}"#, ""),
    );
    match &e {
        ImportError::Feed { field, .. } => assert_eq!(field, "group_ratio.svip"),
        other => panic!("{other:?}"),
    }
    assert!(
        e.to_string()
            .contains("group_ratio.svip: 0.855 has more than 2 decimal places"),
        "{e}"
    );
}

#[test]
fn new_api_version_is_the_feeds_unless_given_else_the_feed_digest() {
    let feed = minimal_new_api(r#"{"default":1}"#, r#","pricing_version":"v7""#);
    assert_eq!(import(Format::NewApi, feed.as_bytes()).version, "v7");

    let mut flagged = options(Format::NewApi);
    flagged.version = Some("aiwave-2026-08".into());
    let imported = convert("feed.json", feed.as_bytes(), &flagged).unwrap();
    assert_eq!(imported.version, "aiwave-2026-08");
    assert_eq!(imported.file_name(), "2026-08-22-aiwave-2026-08.json");

    let unversioned = minimal_new_api(r#"{"default":1}"#, "");
    let digest = hex::encode(Sha256::digest(unversioned.as_bytes()));
    assert_eq!(
        import(Format::NewApi, unversioned.as_bytes()).version,
        digest[..32]
    );
}

#[test]
fn a_version_that_cannot_name_a_file_is_refused() {
    let feed = minimal_new_api(r#"{"default":1}"#, r#","pricing_version":"../../etc/x""#);
    assert!(matches!(
        import_err(Format::NewApi, &feed),
        ImportError::Version { .. }
    ));
    let mut flagged = options(Format::Litellm);
    flagged.version = Some("a/b".into());
    assert!(matches!(
        convert("feed.json", LITELLM, &flagged),
        Err(ImportError::Version { .. })
    ));
}

#[test]
fn feeds_that_are_not_the_format_are_errors_naming_the_feed() {
    let e = import_err(
        Format::NewApi,
        r#"{"success":false,"message":"rate limited"}"#,
    );
    assert!(e.to_string().starts_with("feed feed.json: success:"), "{e}");
    assert!(e.to_string().contains("rate limited"), "{e}");
    let e = import_err(Format::NewApi, r#"{"success":true,"group_ratio":{}}"#);
    assert!(e.to_string().contains("data: missing"), "{e}");
    assert!(matches!(
        import_err(Format::OpenRouter, "[1, 2]"),
        ImportError::Feed { .. }
    ));
    assert!(matches!(
        import_err(Format::Litellm, "not json"),
        ImportError::Feed { .. }
    ));
    let e = import_err(
        Format::NewApi,
        r#"{"success":true,"data":[{"model_name":"m","quota_type":1}],"group_ratio":{}}"#,
    );
    assert!(e.to_string().contains("no model priced per token"), "{e}");
}

#[test]
fn litellm_costs_per_token_become_costs_per_million_tokens() {
    let imported = import(Format::Litellm, LITELLM);
    let snapshot = loaded(&imported);
    assert_eq!(
        price(&snapshot, "gpt-4o"),
        ("2.5".into(), "10".into(), Some("1.25".into()))
    );
    assert_eq!(
        price(&snapshot, "claude-sonnet-4-20250514"),
        ("3".into(), "15".into(), Some("0.3".into()))
    );
    assert_eq!(
        price(&snapshot, "gemini/gemini-2.0-flash-lite"),
        ("0.075".into(), "0.3".into(), None)
    );
    assert_eq!(snapshot.models["gpt-4o"].family.as_deref(), Some("openai"));
    assert_eq!(
        snapshot.group_ratio,
        BTreeMap::from([("default".to_owned(), Decimal::ONE)])
    );
    assert_eq!(
        rounded(&imported),
        [(
            "together_ai/meta-llama/Llama-3.3-70B-Instruct-Turbo",
            vec!["output"]
        )]
    );
    assert_eq!(
        snapshot.models["together_ai/meta-llama/Llama-3.3-70B-Instruct-Turbo"].output,
        d("0.1666666667")
    );
}

#[test]
fn litellm_takes_chat_and_completion_models_only() {
    let imported = import(Format::Litellm, LITELLM);
    let snapshot = loaded(&imported);
    assert!(snapshot.models.contains_key("gpt-3.5-turbo-instruct"));
    for other_mode in ["text-embedding-3-small", "whisper-1", "sample_spec"] {
        assert!(!snapshot.models.contains_key(other_mode), "{other_mode}");
    }
    assert_eq!(imported.skipped, 3);
    assert_eq!(
        left_out(&imported),
        [
            ("perplexity/pplx-online-preview", &LeftOutReason::PerCall),
            (
                "vertex_ai/chat-bison",
                &LeftOutReason::NoTokenPrice {
                    field: "input_cost_per_token".into()
                }
            ),
        ]
    );
}

#[test]
fn litellm_version_is_the_first_32_hex_digits_of_the_feed_digest_unless_given() {
    let digest = hex::encode(Sha256::digest(LITELLM));
    let imported = import(Format::Litellm, LITELLM);
    assert_eq!(imported.version, digest[..32]);
    assert_eq!(
        imported.file_name(),
        format!("2026-08-22-{}.json", &digest[..32])
    );
    let mut flagged = options(Format::Litellm);
    flagged.version = Some("litellm-v1.74".into());
    assert_eq!(
        convert("feed.json", LITELLM, &flagged).unwrap().version,
        "litellm-v1.74"
    );
}

#[test]
fn openrouter_prices_per_token_become_prices_per_million_tokens() {
    let imported = import(Format::OpenRouter, OPENROUTER);
    let snapshot = loaded(&imported);
    assert_eq!(
        price(&snapshot, "openai/gpt-4o"),
        ("2.5".into(), "10".into(), Some("1.25".into()))
    );
    assert_eq!(
        price(&snapshot, "meta-llama/llama-3.3-70b-instruct"),
        ("0.038".into(), "0.1666666667".into(), None)
    );
    assert_eq!(
        snapshot.models["anthropic/claude-sonnet-4"]
            .family
            .as_deref(),
        Some("anthropic")
    );
    assert_eq!(
        rounded(&imported),
        [("meta-llama/llama-3.3-70b-instruct", vec!["output"])]
    );
    let digest = hex::encode(Sha256::digest(OPENROUTER));
    assert_eq!(imported.version, digest[..32]);
}

#[test]
fn openrouter_models_with_a_request_fee_or_no_fixed_price_are_left_out() {
    let imported = import(Format::OpenRouter, OPENROUTER);
    assert_eq!(
        left_out(&imported),
        [
            (
                "openrouter/auto",
                &LeftOutReason::BadPrice {
                    field: "pricing.prompt".into(),
                    problem: "-1 is negative".into()
                }
            ),
            ("perplexity/sonar", &LeftOutReason::PerCall),
        ]
    );
    assert_eq!(imported.models, 3);
}

#[test]
fn output_is_deterministic_json_with_decimal_strings() {
    let feed = minimal_new_api(r#"{"vip":1,"default":3}"#, r#","pricing_version":"v1""#);
    let imported = import(Format::NewApi, feed.as_bytes());
    let expected = r#"{
  "pricing_source": "https://aiwave.live/api/pricing",
  "pricing_checked_at": "2026-08-22",
  "pricing_version": "v1",
  "currency": "USD",
  "unit": "per_million_tokens",
  "group_ratio": {"default": "3", "vip": "1"},
  "models": {
    "glm-5": {"family": "glm", "input": "0.775", "output": "2.48"}
  }
}
"#;
    assert_eq!(String::from_utf8(imported.bytes.clone()).unwrap(), expected);
    assert_eq!(import(Format::NewApi, feed.as_bytes()), imported);
}

#[test]
fn written_snapshots_load_with_the_collectors_loader() {
    let dir = tempfile::tempdir().unwrap();
    for (format, feed) in [
        (Format::NewApi, NEW_API),
        (Format::Litellm, LITELLM),
        (Format::OpenRouter, OPENROUTER),
    ] {
        let imported = import(format, feed);
        let written = imported.write_into(dir.path()).unwrap();
        assert!(!written.unchanged);
        assert_eq!(written.path, dir.path().join(imported.file_name()));
        assert_eq!(std::fs::read(&written.path).unwrap(), imported.bytes);
        let snapshot = Snapshot::from_file(&written.path).unwrap();
        assert_eq!(snapshot.digest, written.digest);
    }
    assert_eq!(PricingBook::load_dir(dir.path()).unwrap().len(), 3);
    // Nothing but the snapshots is left behind.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);
}

#[test]
fn importing_the_same_feed_again_is_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let imported = import(Format::NewApi, NEW_API);
    let first = imported.write_into(dir.path()).unwrap();
    let again = imported.write_into(dir.path()).unwrap();
    assert!(again.unchanged);
    assert_eq!((again.path, again.digest), (first.path, first.digest));
}

#[test]
fn a_different_snapshot_of_the_same_version_and_date_is_never_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let before = import(Format::NewApi, NEW_API);
    let path = before.write_into(dir.path()).unwrap().path;
    let changed = std::str::from_utf8(NEW_API)
        .unwrap()
        .replace("0.1595", "0.16");
    let after = import(Format::NewApi, changed.as_bytes());
    assert_eq!(after.file_name(), before.file_name());
    let e = after.write_into(dir.path()).unwrap_err();
    assert!(matches!(e, ImportError::Conflict { .. }), "{e:?}");
    assert!(e.to_string().contains("already claims version"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), before.bytes);

    // The same claim under another file name is refused too: start-up would refuse both.
    std::fs::rename(&path, dir.path().join("aiwave.json")).unwrap();
    let e = after.write_into(dir.path()).unwrap_err();
    match e {
        ImportError::Conflict { existing, .. } => assert!(existing.ends_with("aiwave.json")),
        other => panic!("{other:?}"),
    }
    assert!(!dir.path().join(after.file_name()).exists());

    // A later check of the same feed version is a new snapshot beside the old one.
    let mut later = options(Format::NewApi);
    later.checked_at = NaiveDate::from_ymd_opt(2026, 9, 1).unwrap();
    let next = convert("feed.json", changed.as_bytes(), &later).unwrap();
    let written = next.write_into(dir.path()).unwrap();
    assert!(written
        .path
        .ends_with("2026-09-01-a42d372ccf0b5dd13ecf71203521f9d2.json"));
}

#[test]
fn a_file_of_that_name_that_is_no_such_snapshot_is_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let imported = import(Format::NewApi, NEW_API);
    let path = dir.path().join(imported.file_name());
    std::fs::write(&path, "{ half a file").unwrap();
    assert!(matches!(
        imported.write_into(dir.path()),
        Err(ImportError::Occupied { .. })
    ));
    assert_eq!(std::fs::read(&path).unwrap(), b"{ half a file");
}

#[test]
fn an_empty_source_is_refused() {
    let mut blank = options(Format::Litellm);
    blank.source = " ".into();
    assert!(matches!(
        convert("feed.json", LITELLM, &blank),
        Err(ImportError::EmptySource)
    ));
}

#[test]
fn new_api_output_comes_from_the_exact_input_not_the_rounded_one() {
    let feed = minimal_new_api(r#"{"default":1}"#, "")
        .replace("0.3875", "0.00000000003")
        .replace("3.2", "1000");
    let snapshot = loaded(&import(Format::NewApi, feed.as_bytes()));
    // Input 0.00000000006 rounds to 0.0000000001; output is 0.00000000006 × 1000, not 0.0000001.
    assert_eq!(
        price(&snapshot, "glm-5"),
        ("0.0000000001".into(), "0.00000006".into(), None)
    );
}

#[test]
fn a_price_too_large_for_a_snapshot_leaves_the_model_out() {
    let feed = r#"{"m": {"mode": "chat", "input_cost_per_token": 1e30, "output_cost_per_token": 0},
                   "n": {"mode": "chat", "input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6}}"#;
    let imported = import(Format::Litellm, feed.as_bytes());
    assert_eq!(imported.models, 1);
    assert!(matches!(
        &imported.left_out[..],
        [LeftOut { model, reason: LeftOutReason::BadPrice { field, .. } }]
            if model == "m" && field == "input"
    ));
}

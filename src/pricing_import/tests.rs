use std::path::Path;
use std::str::FromStr;

use super::*;
use crate::pricing::Snapshot;

const NEW_API: &[u8] = include_bytes!("../../tests/fixtures/feeds/new-api.json");
const LITELLM: &[u8] = include_bytes!("../../tests/fixtures/feeds/litellm.json");
const OPENROUTER: &[u8] = include_bytes!("../../tests/fixtures/feeds/openrouter.json");
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
        .map(|r| {
            (
                r.model.as_str(),
                r.fields.iter().map(String::as_str).collect(),
            )
        })
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
    let book = crate::load::pricing_dir(Path::new(SHIPPED)).unwrap();
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
    let family = |m: &str| {
        snapshot.models[m]
            .family
            .as_deref()
            .unwrap_or_default()
            .to_owned()
    };
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
fn litellm_takes_chat_completion_and_responses_models_and_lists_the_other_modes() {
    let imported = import(Format::Litellm, LITELLM);
    let snapshot = loaded(&imported);
    assert!(snapshot.models.contains_key("gpt-3.5-turbo-instruct"));
    for other_mode in ["text-embedding-3-small", "whisper-1", "sample_spec"] {
        assert!(!snapshot.models.contains_key(other_mode), "{other_mode}");
    }
    assert_eq!(imported.skipped, 1, "sample_spec only");
    let mode = |m: &str| LeftOutReason::Mode(Some(m.into()));
    assert_eq!(
        left_out(&imported),
        [
            ("perplexity/pplx-online-preview", &LeftOutReason::PerCall),
            ("text-embedding-3-small", &mode("embedding")),
            ("vertex_ai/chat-bison", &LeftOutReason::PerCharacter),
            ("whisper-1", &mode("audio_transcription")),
        ]
    );
    let responses = r#"{"o3-pro": {"mode": "responses", "input_cost_per_token": 2e-05,
                                   "output_cost_per_token": 8e-05}}"#;
    let snapshot = loaded(&import(Format::Litellm, responses.as_bytes()));
    assert_eq!(price(&snapshot, "o3-pro"), ("20".into(), "80".into(), None));
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
        let snapshot = crate::load::snapshot_file(&written.path).unwrap();
        assert_eq!(*snapshot.digest, *written.digest);
    }
    assert_eq!(crate::load::pricing_dir(dir.path()).unwrap().len(), 3);
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

/// A LiteLLM feed of one chat model with these extra keys.
fn litellm_chat(extra: &str) -> String {
    format!(
        r#"{{"m": {{"mode": "chat", "litellm_provider": "p", "input_cost_per_token": 1.25e-06,
                  "output_cost_per_token": 1e-05{extra}}}}}"#
    )
}

fn litellm_left_out(extra: &str) -> LeftOutReason {
    // A second model that is kept: a feed with none is an error.
    let feed = litellm_chat(extra).replacen(
        '{',
        r#"{"n": {"mode": "chat", "input_cost_per_token": 1e-06, "output_cost_per_token": 1e-06},"#,
        1,
    );
    let imported = import(Format::Litellm, feed.as_bytes());
    match &imported.left_out[..] {
        [LeftOut { model, reason }] if model == "m" => reason.clone(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn litellm_above_nk_tokens_keys_make_tiers_above_n_thousand_input_tokens() {
    let feed = litellm_chat(
        r#", "cache_read_input_token_cost": 1.25e-07, "cache_creation_input_token_cost": 1.5625e-06,
            "input_cost_per_token_above_200k_tokens": 2.5e-06,
            "output_cost_per_token_above_200k_tokens": 1.5e-05,
            "cache_read_input_token_cost_above_200k_tokens": 2.5e-07,
            "cache_creation_input_token_cost_above_200k_tokens": 3.125e-06,
            "input_cost_per_token_above_32k_tokens": 2e-06,
            "input_cost_per_token_priority": 2.5e-06,
            "input_cost_per_token_above_200k_tokens_priority": 5e-06,
            "output_cost_per_token_above_200k_tokens_flex": 1e-05,
            "cache_creation_input_token_cost_above_1hr": 2.5e-06,
            "cache_creation_input_token_cost_above_1hr_above_200k_tokens": 5e-06"#,
    );
    let imported = import(Format::Litellm, feed.as_bytes());
    let model = &loaded(&imported).models["m"];
    assert_eq!(model.cache_write, Some(d("1.5625")));
    let tiers: Vec<_> = model
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
            (32_000, Some(d("2")), None, None, None),
            (
                200_000,
                Some(d("2.5")),
                Some(d("15")),
                Some(d("0.25")),
                Some(d("3.125"))
            ),
        ]
    );
    let text = String::from_utf8(imported.bytes).unwrap();
    assert!(
        text.contains(
            r#""m": {"family": "p", "input": "1.25", "output": "10", "cached_input": "0.125", "cache_write": "1.5625", "tiers": [{"above_input_tokens": 32000, "input": "2"}, {"above_input_tokens": 200000, "input": "2.5", "output": "15", "cached_input": "0.25", "cache_write": "3.125"}]}"#
        ),
        "{text}"
    );
}

#[test]
fn litellm_max_output_tokens_is_read_never_the_legacy_max_tokens() {
    let snapshot = loaded(&import(Format::Litellm, LITELLM));
    assert_eq!(
        snapshot.models["claude-sonnet-4-20250514"].max_output_tokens,
        Some(64_000)
    );
    // A model with only the legacy field states no output limit.
    let legacy = litellm_chat(r#", "max_tokens": 128000"#);
    let model = &loaded(&import(Format::Litellm, legacy.as_bytes())).models["m"];
    assert_eq!(model.max_output_tokens, None);
    for unusable in ["null", "0", "\"8k\""] {
        let feed = litellm_chat(&format!(r#", "max_output_tokens": {unusable}"#));
        let model = &loaded(&import(Format::Litellm, feed.as_bytes())).models["m"];
        assert_eq!(model.max_output_tokens, None, "{unusable}");
    }
}

#[test]
fn litellm_lists_each_model_left_out_with_its_own_reason() {
    let cases = [
        (
            r#", "tiered_pricing": [{"range": [0, 32000]}]"#,
            LeftOutReason::OtherTiers {
                field: "tiered_pricing".into(),
            },
        ),
        (
            r#", "input_cost_per_token_above_200k_tokens": -1e-06"#,
            LeftOutReason::BadPrice {
                field: "input_cost_per_token_above_200k_tokens".into(),
                problem: "-1e-06 is negative".into(),
            },
        ),
        (
            r#", "cache_creation_input_token_cost": -3.75e-06"#,
            LeftOutReason::BadPrice {
                field: "cache_creation_input_token_cost".into(),
                problem: "-3.75e-06 is negative".into(),
            },
        ),
    ];
    for (extra, expected) in cases {
        assert_eq!(litellm_left_out(extra), expected, "{extra}");
    }
    let unpriced = |keys: &str| {
        let feed = format!(
            r#"{{"m": {{"mode": "chat"{keys}}}, "n": {{"mode": "chat", "input_cost_per_token": 1e-06, "output_cost_per_token": 1e-06}}}}"#
        );
        let imported = import(Format::Litellm, feed.as_bytes());
        imported.left_out[0].reason.clone()
    };
    assert_eq!(unpriced(""), LeftOutReason::NoPrice);
    assert_eq!(
        unpriced(r#", "input_cost_per_second": 0.001, "cost_per_second": 0.01"#),
        LeftOutReason::PerSecond
    );
    assert_eq!(
        unpriced(
            r#", "input_cost_per_video_per_second": 0.0005, "output_cost_per_token": 7.5e-06"#
        ),
        LeftOutReason::PerSecond
    );
    assert_eq!(
        unpriced(r#", "input_cost_per_character": 2.5e-07, "output_cost_per_character": 5e-07"#),
        LeftOutReason::PerCharacter
    );
    assert_eq!(
        unpriced(r#", "input_cost_per_image": 0.0025"#),
        LeftOutReason::PerImage
    );
    assert_eq!(
        unpriced(r#", "input_cost_per_query": 0.005"#),
        LeftOutReason::PerCall
    );
    assert_eq!(
        unpriced(
            r#", "input_cost_per_token_priority": 1e-06, "output_cost_per_token_priority": 1e-06"#
        ),
        LeftOutReason::NoTokenPrice {
            field: "input_cost_per_token".into()
        }
    );
    // A fee on every request leaves the model out even beside token prices; a search tool's
    // cost per query does not.
    assert_eq!(
        litellm_left_out(r#", "input_cost_per_request": 0.005"#),
        LeftOutReason::PerCall
    );
    let searching = litellm_chat(
        r#", "input_cost_per_request": 0, "search_context_cost_per_query": {"search_context_size_low": 0.03}"#,
    );
    assert!(import(Format::Litellm, searching.as_bytes())
        .left_out
        .is_empty());
    let feed = r#"{"a": {"alias_of": "n"}, "n": {"mode": "chat", "input_cost_per_token": 1e-06, "output_cost_per_token": 1e-06}}"#;
    assert_eq!(
        import(Format::Litellm, feed.as_bytes()).left_out[0].reason,
        LeftOutReason::Alias { of: "n".into() }
    );
    let feed = r#"{"e": {"input_cost_per_token": 1e-06}, "n": {"mode": "chat", "input_cost_per_token": 1e-06, "output_cost_per_token": 1e-06}}"#;
    assert_eq!(
        import(Format::Litellm, feed.as_bytes()).left_out[0].reason,
        LeftOutReason::Mode(None)
    );
    assert_eq!(
        LeftOutReason::Mode(Some("embedding".into())).to_string(),
        "mode \"embedding\", not chat, completion or responses"
    );
    assert_eq!(
        LeftOutReason::OtherTiers {
            field: "tiered_pricing".into()
        }
        .to_string(),
        "tiered prices in another form (tiered_pricing)"
    );
}

#[test]
fn tier_prices_are_rounded_once_and_listed_by_their_field() {
    let feed =
        litellm_chat(r#", "output_cost_per_token_above_200k_tokens": 1.6666666666666667e-07"#);
    let imported = import(Format::Litellm, feed.as_bytes());
    assert_eq!(rounded(&imported), [("m", vec!["tiers[0].output"])]);
    assert_eq!(
        loaded(&imported).models["m"].tiers[0].output,
        Some(d("0.1666666667"))
    );
}

#[test]
fn openrouter_cache_write_and_max_completion_tokens_are_read() {
    let snapshot = loaded(&import(Format::OpenRouter, OPENROUTER));
    let sonnet = &snapshot.models["anthropic/claude-sonnet-4"];
    assert_eq!(sonnet.cache_write, Some(d("3.75")));
    assert_eq!(sonnet.max_output_tokens, Some(64_000));
    let gpt = &snapshot.models["openai/gpt-4o"];
    assert_eq!(
        (gpt.cache_write, gpt.max_output_tokens),
        (None, Some(16_384))
    );
    // No top_provider at all: no limit.
    let llama = &snapshot.models["meta-llama/llama-3.3-70b-instruct"];
    assert_eq!(llama.max_output_tokens, None);
    let null = r#"{"data":[{"id":"a/b","pricing":{"prompt":"0.000001","completion":"0.000002"},
                  "top_provider":{"max_completion_tokens":null}}]}"#;
    let snapshot = loaded(&import(Format::OpenRouter, null.as_bytes()));
    assert_eq!(snapshot.models["a/b"].max_output_tokens, None);
}

#[test]
fn new_api_models_carry_base_prices_only() {
    let snapshot = loaded(&import(Format::NewApi, NEW_API));
    for (name, model) in &snapshot.models {
        assert_eq!(
            (
                model.cache_write,
                model.max_output_tokens,
                model.tiers.len()
            ),
            (None, None, 0),
            "{name}"
        );
    }
}

use proptest::prelude::*;
use serde_json::{json, Value};

use crate::contract::otlp_json::{read_decoded, read_direct, read_facts};
use crate::contract::{attr, AttributeKeys, SpanFacts};

/// The direct reader, where it reads a line, gives the decoded path's facts; with the fallback
/// every line gives the decoded path's facts or its error.
fn assert_agree(line: &[u8], keys: &AttributeKeys) -> Result<(), TestCaseError> {
    assert_reader_agrees(read_direct, line, keys)
}

/// `reader`, where it reads a line, gives the decoded path's facts; with the fallbacks every
/// line gives the decoded path's facts or its error.
pub(in crate::contract::otlp_json) fn assert_reader_agrees(
    reader: fn(&[u8], &AttributeKeys) -> Option<Vec<SpanFacts>>,
    line: &[u8],
    keys: &AttributeKeys,
) -> Result<(), TestCaseError> {
    let decoded = read_decoded(line, keys).map_err(|e| e.to_string());
    if let Some(direct) = reader(line, keys) {
        prop_assert_eq!(
            Ok(&direct),
            decoded.as_ref(),
            "{}",
            String::from_utf8_lossy(line)
        );
    }
    prop_assert_eq!(read_facts(line, keys).map_err(|e| e.to_string()), decoded);
    Ok(())
}

/// Keys policies match on: of spans, of resources, arrays, and one no span has.
pub(in crate::contract::otlp_json) fn policy_keys() -> AttributeKeys {
    AttributeKeys::new(
        [
            "unrelated.key",
            attr::TASK_TYPE,
            "host.name",
            attr::REQUEST_MODEL,
            attr::ALLOWED_FALLBACK_FAMILIES,
            "deployment.environment",
        ]
        .map(String::from),
    )
}

/// Every non-empty line of the bundled example and the recorded fixtures, read once.
pub(in crate::contract::otlp_json) fn fixture_lines() -> &'static [String] {
    static LINES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    LINES.get_or_init(|| {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut files = vec![root.join("examples/retries.jsonl")];
        for dir in ["tests/fixtures", "tests/fixtures/instrumented"] {
            for entry in std::fs::read_dir(root.join(dir)).unwrap().flatten() {
                if entry.path().extension().is_some_and(|e| e == "jsonl") {
                    files.push(entry.path());
                }
            }
        }
        let mut lines = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            lines.extend(
                text.lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(String::from),
            );
        }
        assert!(lines.len() > 20);
        lines
    })
}

/// Rewrites a serialised request into the other forms exporters write, chosen by `choices`:
/// enum names, `intValue` as a number, `doubleValue` as a string, times as numbers, unknown
/// fields, keys in another order.
fn vary(value: &mut Value, choices: &mut impl FnMut() -> u8) {
    match value {
        Value::Object(object) => {
            // Mostly no bytes values, which the direct reader leaves to the decoded path.
            if object.contains_key("bytesValue") && !choices().is_multiple_of(32) {
                object.remove("bytesValue");
                object.insert("stringValue".into(), json!("b"));
            }
            for (key, item) in object.iter_mut() {
                let choice = choices();
                match (key.as_str(), &*item) {
                    ("kind", Value::Number(n)) if choice.is_multiple_of(2) => {
                        if let Some(name) =
                            n.as_u64().and_then(|i| super::SPAN_KINDS.get(i as usize))
                        {
                            *item = json!(name);
                        }
                    }
                    ("code", Value::Number(n)) if choice.is_multiple_of(2) => {
                        if let Some(name) =
                            n.as_u64().and_then(|i| super::STATUS_CODES.get(i as usize))
                        {
                            *item = json!(name);
                        }
                    }
                    ("intValue", Value::String(s)) if choice.is_multiple_of(2) => {
                        if let Ok(i) = s.parse::<i64>() {
                            *item = json!(i);
                        }
                    }
                    ("doubleValue", Value::Number(n)) if choice.is_multiple_of(3) => {
                        *item = json!(format!(" {n} "));
                    }
                    // Mostly well-formed ids, so that most lines are read directly; the rest
                    // check the fallback.
                    ("traceId", Value::String(s))
                        if s.len() != 32 && !choice.is_multiple_of(32) =>
                    {
                        *item = json!(format!("{:032x}", u128::from(choice) + 1));
                    }
                    ("spanId" | "parentSpanId", Value::String(s))
                        if s.len() != 16 && !choice.is_multiple_of(32) =>
                    {
                        *item = json!(format!("{:016x}", u64::from(choice) + 1));
                    }
                    ("startTimeUnixNano" | "endTimeUnixNano", Value::String(s))
                        if choice.is_multiple_of(2) =>
                    {
                        if let Ok(t) = s.parse::<u64>() {
                            *item = json!(t);
                        }
                    }
                    _ => vary(item, choices),
                }
            }
            // Not in a value: the readers leave unknown fields there to the decoded path (the
            // edge cases below check that).
            let value_keys = [
                "stringValue",
                "boolValue",
                "intValue",
                "doubleValue",
                "arrayValue",
                "kvlistValue",
                "bytesValue",
                "values",
            ];
            let in_value = object.is_empty() || value_keys.iter().any(|k| object.contains_key(*k));
            if !in_value && choices().is_multiple_of(5) {
                object.insert(
                    "someFutureField".into(),
                    json!({"nested": [1, "two", null]}),
                );
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| vary(item, choices)),
        _ => {}
    }
}

pub(in crate::contract::otlp_json) fn varied_line(
    request: &opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest,
    seed: u64,
) -> String {
    let mut value = serde_json::to_value(request).expect("serialisable");
    let mut state = seed | 1;
    vary(&mut value, &mut || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 32) as u8
    });
    value.to_string()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_direct_json_reader_reads_what_the_decoded_path_reads(
        request in crate::contract::wire::tests::request(),
        seed in any::<u64>(),
    ) {
        let line = varied_line(&request, seed);
        assert_agree(line.as_bytes(), &AttributeKeys::NONE)?;
        assert_agree(line.as_bytes(), &policy_keys())?;
    }

    #[test]
    fn mangled_lines_give_the_decoded_paths_error_or_facts(
        request in crate::contract::wire::tests::request(),
        cut in any::<prop::sample::Index>(),
        flip in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let mut line = serde_json::to_vec(&request).expect("serialisable");
        let i = flip.index(line.len());
        line[i] = byte;
        if cut.index(4) == 0 {
            line.truncate(cut.index(line.len()));
        }
        assert_agree(&line, &AttributeKeys::NONE)?;
    }
}

#[test]
fn fixtures_are_read_directly_with_the_decoded_paths_facts() {
    for line in fixture_lines() {
        for keys in [AttributeKeys::NONE, policy_keys()] {
            let direct = read_direct(line.as_bytes(), &keys);
            assert!(direct.is_some(), "read directly: {line}");
            assert_eq!(
                direct.unwrap(),
                read_decoded(line.as_bytes(), &keys).unwrap()
            );
        }
    }
}

#[test]
fn unusual_forms_fall_back_to_the_decoded_path() {
    let span = |extra: &str| {
        format!(
            r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708"{extra}}}]}}]}}]}}"#
        )
    };
    for extra in [
        r#","spanId":"0102030405060709""#,
        r#","parentSpanId":"0x01020304050607""#,
        r#","attributes":[{"key":"a","value":{"stringValue":"x","intValue":"3"}}]"#,
        r#","attributes":[{"key":"a","value":{"bytesValue":"AQID"}}]"#,
    ] {
        let line = span(extra);
        assert!(
            read_direct(line.as_bytes(), &AttributeKeys::NONE).is_none(),
            "{line}"
        );
        assert_eq!(
            read_facts(line.as_bytes(), &AttributeKeys::NONE).map_err(|e| e.to_string()),
            read_decoded(line.as_bytes(), &AttributeKeys::NONE).map_err(|e| e.to_string()),
        );
    }
    let bad = span(r#","kind":"SPAN_KIND_NONE""#);
    assert!(read_facts(bad.as_bytes(), &AttributeKeys::NONE).is_err());
}

#[test]
fn a_resource_after_its_spans_still_names_their_service() {
    let line = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","attributes":[{"key":"gen_ai.request.model","value":{"stringValue":"glm-5"}}]}]}],"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"late"}},{"key":"service.name","value":{"stringValue":"second"}}]}}]}"#;
    let spans = read_direct(line.as_bytes(), &AttributeKeys::NONE).unwrap();
    assert_eq!(&*spans[0].service_name, "late");
    assert_eq!(
        spans,
        read_decoded(line.as_bytes(), &AttributeKeys::NONE).unwrap()
    );
}

/// The property above means something only if the direct reader reads most random lines
/// itself rather than handing them to the decoded path.
#[test]
fn most_random_lines_are_read_directly() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = crate::contract::wire::tests::request();
    let (mut direct, mut spans) = (0, 0);
    for seed in 0..300 {
        let request = strategy.new_tree(&mut runner).unwrap().current();
        let line = varied_line(&request, seed);
        let line = line.as_bytes();
        let n: usize = request
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        spans += n;
        if let Some(read) = read_direct(line, &AttributeKeys::NONE) {
            direct += read.len();
        }
    }
    assert!(
        direct * 2 > spans,
        "{direct} of {spans} spans read directly"
    );
}

/// JavaScript, Python and Go print a double in its shortest round-trip form, often 17 digits.
/// Read from OTLP/JSON it must be the double the exporter had, as protobuf would carry it:
/// money is read through that shortest form, so a neighbouring double changes the amount
/// (serde_json's default parser read `19.900000000000002` as `19.9`).
#[test]
fn doubles_are_the_ones_the_exporter_printed() {
    for text in [
        "19.900000000000002",
        "0.30000000000000004",
        "12.874560591713891",
        "0.9719863718547629",
        "7.204309649955221e-13",
    ] {
        let exact: f64 = text.parse().expect("a double");
        let line = format!(
            r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","attributes":[{{"key":"{}","value":{{"doubleValue":{text}}}}}]}}]}}]}}]}}"#,
            attr::MAX_INCREMENTAL_USD
        );
        let want = crate::contract::money(crate::contract::ValueRef::Double(exact));
        assert!(want.is_some(), "{text}");
        let direct = read_direct(line.as_bytes(), &AttributeKeys::NONE).expect("read directly");
        let decoded = read_decoded(line.as_bytes(), &AttributeKeys::NONE).expect("decoded");
        assert_eq!(direct[0].envelope.max_incremental_usd, want, "{text}");
        assert_eq!(decoded[0].envelope.max_incremental_usd, want, "{text}");
    }
}

/// Forms serde_json lets pass in a value it skips but refuses in one it reads as a type, or that
/// the two paths skip in different places: each line gives the decoded path's facts or its
/// error.
#[test]
fn the_reader_agrees_where_grammar_and_types_part() -> Result<(), String> {
    let span = |extra: &str| {
        format!(
            r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708"{extra}}}]}}]}}]}}"#
        )
    };
    let nested = |depth: usize| {
        format!(
            r#","attributes":[{{"key":"a","value":{{"arrayValue":{{"values":[{}{{"intValue":"1"}}{}]}}}}}}]"#,
            r#"{"arrayValue":{"values":["#.repeat(depth),
            "]}}".repeat(depth)
        )
    };
    let cases = [
        // serde_json reads `-0` as a float: no integer, but a double.
        r#","attributes":[{"key":"n","value":{"intValue":-0}}]"#.to_owned(),
        r#","attributes":[{"key":"n","value":{"doubleValue":-0}}]"#.to_owned(),
        r#","startTimeUnixNano":-0"#.to_owned(),
        r#","kind":-0"#.to_owned(),
        r#","flags":-0"#.to_owned(),
        // Out of range for a double: skipped without complaint, refused where it is read.
        r#","attributes":[{"key":"n","value":{"doubleValue":1e400}}]"#.to_owned(),
        r#","attributes":[{"key":"n","value":{"intValue":18446744073709551616}}]"#.to_owned(),
        r#","unknown":1e400"#.to_owned(),
        // A lone surrogate: skipped without complaint, refused where the string is read.
        r#","name":"\ud800""#.to_owned(),
        r#","attributes":[{"key":"\udc00","value":{"stringValue":"x"}}]"#.to_owned(),
        r#","attributes":[{"key":"a","value":{"stringValue":"\ud800"}}]"#.to_owned(),
        r#","unknown":"\ud800""#.to_owned(),
        // Escaped keys and values are what they spell.
        r#","parent\u0053panId":"0102030405060709""#.to_owned(),
        r#","attributes":[{"key":"gen_ai.request.\u006dodel","value":{"stringValue":"glm\u002d5 \"x\""}}]"#.to_owned(),
        // Types the decoded path refuses.
        r#","name":null"#.to_owned(),
        r#","flags":"1""#.to_owned(),
        r#","flags":1.0"#.to_owned(),
        r#","droppedAttributesCount":4294967296"#.to_owned(),
        r#","attributes":null"#.to_owned(),
        r#","attributes":[null]"#.to_owned(),
        r#","attributes":[{"value":{"stringValue":"x"}}]"#.to_owned(),
        r#","attributes":[{"key":"a","value":{"boolValue":"true"}}]"#.to_owned(),
        r#","status":{"code":"STATUS_CODE_NONE"}"#.to_owned(),
        r#","status":null,"events":[{"name":"e","attributes":[{"key":"k","value":{"intValue":"x"}}]}]"#.to_owned(),
        r#","events":[{"name":"e","timeUnixNano":"5"}],"links":[]"#.to_owned(),
        // Nulls the decoded path takes as absent.
        r#","attributes":[{"key":"a","value":null},{"key":"b","value":{"stringValue":null}}]"#.to_owned(),
        r#","attributes":[{"key":"a","value":{"arrayValue":null}}]"#.to_owned(),
        // Unknown fields of any shape, however deep, are skipped by both.
        format!(r#","unknown":{}1{}"#, "[".repeat(300), "]".repeat(300)),
        r#","unknown":{"a":["}",{"b":"]\"["}]}"#.to_owned(),
        // Unknown fields of a value are parsed, not skipped, by the decoded path.
        r#","attributes":[{"key":"a","value":{"stringValue":"x","junk":1e400}}]"#.to_owned(),
        // Nesting the decoded path reads as prost types: within its limit, and past it.
        nested(3),
        nested(60),
    ];
    for extra in &cases {
        assert_agree(span(extra).as_bytes(), &policy_keys()).map_err(|e| e.to_string())?;
    }
    // The common forms are still read directly.
    assert!(read_direct(span(&cases[12]).as_bytes(), &AttributeKeys::NONE).is_some());
    assert!(read_direct(span(&cases[13]).as_bytes(), &AttributeKeys::NONE).is_some());
    assert!(read_direct(span(&nested(3)).as_bytes(), &AttributeKeys::NONE).is_some());
    Ok(())
}

use proptest::prelude::*;
use serde_json::json;

use crate::contract::otlp_json::facts::tests::{
    assert_reader_agrees, fixture_lines, policy_keys, varied_line,
};
use crate::contract::otlp_json::{read_cursor, read_decoded, read_facts};
use crate::contract::{attr, AttributeKeys};

fn assert_agree(line: &[u8], keys: &AttributeKeys) -> Result<(), TestCaseError> {
    assert_reader_agrees(read_cursor, line, keys)
}

fn span(extra: &str) -> String {
    format!(
        r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708"{extra}}}]}}]}}]}}"#
    )
}

#[test]
fn fixtures_are_read_by_the_cursor_with_the_decoded_paths_facts() {
    let (mut read, mut lines) = (0, 0);
    for line in fixture_lines() {
        lines += 1;
        for keys in [AttributeKeys::NONE, policy_keys()] {
            let decoded = read_decoded(line.as_bytes(), &keys).unwrap();
            if let Some(spans) = read_cursor(line.as_bytes(), &keys) {
                assert_eq!(spans, decoded, "{line}");
                read += 1;
            }
        }
    }
    // Events on some recorded spans leave those lines to the serde reader.
    assert!(read * 10 > lines * 2 * 9, "{read} of {} reads", lines * 2);
}

#[test]
fn the_example_spans_are_all_read_by_the_cursor() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(root.join("examples/retries.jsonl")).unwrap();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            read_cursor(line.as_bytes(), &policy_keys()).is_some(),
            "{line}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_cursor_reads_what_the_decoded_path_reads(
        request in crate::contract::wire::tests::request(),
        seed in any::<u64>(),
    ) {
        let line = varied_line(&request, seed);
        assert_agree(line.as_bytes(), &AttributeKeys::NONE)?;
        assert_agree(line.as_bytes(), &policy_keys())?;
    }

    /// One byte of a real line replaced, inserted or removed: whatever the cursor still reads,
    /// it reads as the decoded path does.
    #[test]
    fn mangled_fixture_lines_give_the_decoded_paths_facts_or_error(
        pick in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
        byte in prop::sample::select(b"{}[]\",:\\ 0123456789-+.eEnulltrfasx\x01\xc3".to_vec()),
        how in 0..3u8,
    ) {
        let lines = fixture_lines();
        let mut line = lines[pick.index(lines.len())].clone().into_bytes();
        let i = at.index(line.len());
        match how {
            0 => line[i] = byte,
            1 => line.insert(i, byte),
            _ => {
                line.remove(i);
            }
        }
        assert_agree(&line, &policy_keys())?;
    }
}

#[test]
fn most_random_lines_are_read_by_the_cursor() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = crate::contract::wire::tests::request();
    let (mut read, mut spans) = (0, 0);
    for seed in 0..300 {
        let request = strategy.new_tree(&mut runner).unwrap().current();
        let line = varied_line(&request, seed);
        let n: usize = request
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        spans += n;
        if let Some(facts) = read_cursor(line.as_bytes(), &AttributeKeys::NONE) {
            read += facts.len();
        }
    }
    assert!(
        read * 2 > spans,
        "{read} of {spans} spans read by the cursor"
    );
}

/// Edges of JSON's grammar and of the types the decoded path reads: each line gives the
/// decoded path's facts or its error, and the common forms are read by the cursor.
#[test]
fn the_cursor_agrees_at_the_edges() -> Result<(), String> {
    let long = "x".repeat(37);
    let cases = [
        // Numbers serde_json reads as floats, or cannot hold.
        r#","attributes":[{"key":"n","value":{"intValue":-0}}]"#.to_owned(),
        r#","attributes":[{"key":"n","value":{"doubleValue":-0}}]"#.to_owned(),
        r#","attributes":[{"key":"n","value":{"doubleValue":-0.0}}]"#.to_owned(),
        r#","attributes":[{"key":"n","value":{"intValue":-9223372036854775808}}]"#.to_owned(),
        r#","attributes":[{"key":"n","value":{"intValue":-9223372036854775809}}]"#.to_owned(),
        r#","attributes":[{"key":"n","value":{"intValue":9223372036854775808}}]"#.to_owned(),
        r#","attributes":[{"key":"n","value":{"intValue":"+7"}}]"#.to_owned(),
        r#","attributes":[{"key":"n","value":{"intValue":" 7"}}]"#.to_owned(),
        r#","attributes":[{"key":"n","value":{"intValue":1.0}}]"#.to_owned(),
        r#","attributes":[{"key":"n","value":{"intValue":1e2}}]"#.to_owned(),
        r#","attributes":[{"key":"n","value":{"doubleValue":1e400}}]"#.to_owned(),
        r#","attributes":[{"key":"n","value":{"doubleValue":18446744073709551616}}]"#.to_owned(),
        r#","attributes":[{"key":"n","value":{"doubleValue":" Infinity "}}]"#.to_owned(),
        r#","attributes":[{"key":"n","value":{"doubleValue":"1e400"}}]"#.to_owned(),
        r#","attributes":[{"key":"n","value":{"doubleValue":0.1E-3}}]"#.to_owned(),
        r#","attributes":[{"key":"n","value":{"doubleValue":01}}]"#.to_owned(),
        r#","attributes":[{"key":"n","value":{"doubleValue":1.}}]"#.to_owned(),
        r#","attributes":[{"key":"n","value":{"doubleValue":.5}}]"#.to_owned(),
        r#","startTimeUnixNano":-0"#.to_owned(),
        r#","startTimeUnixNano":-1"#.to_owned(),
        r#","startTimeUnixNano":"+12""#.to_owned(),
        r#","startTimeUnixNano":"18446744073709551616""#.to_owned(),
        r#","endTimeUnixNano":18446744073709551615"#.to_owned(),
        r#","kind":-0"#.to_owned(),
        r#","kind":-1"#.to_owned(),
        r#","kind":2147483648"#.to_owned(),
        r#","kind":"SPAN_KIND_CLIENT""#.to_owned(),
        r#","kind":"SPAN_KIND_\u0043LIENT""#.to_owned(),
        r#","flags":-0"#.to_owned(),
        r#","flags":4294967295"#.to_owned(),
        r#","flags":4294967296"#.to_owned(),
        r#","unknown":1e400"#.to_owned(),
        r#","unknown":-"#.to_owned(),
        r#","unknown":[1,]"#.to_owned(),
        r#","unknown":{"a":1,}"#.to_owned(),
        r#","unknown":tru"#.to_owned(),
        r#","unknown":nulll"#.to_owned(),
        // Strings: escapes, surrogates, raw control characters, long runs.
        r#","name":"\ud800""#.to_owned(),
        r#","name":"\ud83d\ude00""#.to_owned(),
        r#","unknown":"\ud800""#.to_owned(),
        ",\"name\":\"a\u{1}b\"".to_owned(),
        ",\"name\":\"a\tb\"".to_owned(),
        r#","name":"a\qb""#.to_owned(),
        r#","name":"a\u00zzb""#.to_owned(),
        r#","name":"a\"#.to_owned(),
        r#","parent\u0053panId":"0102030405060709""#.to_owned(),
        r#","parentSpanId":"0A0b0C0d0E0f1F2a""#.to_owned(),
        r#","parentSpanId":"0A0b0C0d0E0f1F2g""#.to_owned(),
        r#","parentSpanId":"0A0b0C0d0E0f1F2""#.to_owned(),
        r#","parentSpanId":"0A0b0C0d0E0f1F2a0""#.to_owned(),
        r#","parentSpanId":"0A0b0C0d0E0f1F2\u00e9""#.to_owned(),
        format!(
            r#","attributes":[{{"key":"gen_ai.request.model","value":{{"stringValue":"{long}\u00e9\n\"\\\/\b\f\r\t{long}"}}}}]"#
        ),
        format!(
            r#","attributes":[{{"key":"gen_ai.request.model","value":{{"stringValue":"{long}é{long}"}}}}]"#
        ),
        r#","attributes":[{"key":"a","value":{"stringValue":"x"},"key":"b"}]"#.to_owned(),
        // Types the decoded path refuses, and nulls it takes as absent.
        r#","name":null"#.to_owned(),
        r#","flags":"1""#.to_owned(),
        r#","attributes":null"#.to_owned(),
        r#","attributes":[null]"#.to_owned(),
        r#","attributes":[{"value":{"stringValue":"x"}}]"#.to_owned(),
        r#","attributes":[{"key":"a","value":{"boolValue":"true"}}]"#.to_owned(),
        r#","attributes":[{"key":"a","value":{"boolValue":false}}]"#.to_owned(),
        r#","attributes":[{"key":"a","value":null},{"key":"b","value":{"stringValue":null}}]"#
            .to_owned(),
        r#","attributes":[{"key":"a","value":{"stringValue":null,"intValue":"1"}}]"#.to_owned(),
        r#","attributes":[{"key":"a","value":{"arrayValue":null}}]"#.to_owned(),
        r#","attributes":[{"key":"a","keyStrindex":-3,"value":{"other":[1]}}]"#.to_owned(),
        r#","status":{"code":"STATUS_CODE_NONE"}"#.to_owned(),
        r#","status":{"code":"STATUS_CODE_ERROR","message":"boom"}"#.to_owned(),
        r#","status":{"code":2,"code":2}"#.to_owned(),
        r#","status":null"#.to_owned(),
        r#","events":[],"links":[ ],"droppedEventsCount":0"#.to_owned(),
        r#","events":[{"name":"e","timeUnixNano":"5"}]"#.to_owned(),
        // Arrays: of strings the contract reads; anything else left to the others.
        format!(
            r#","attributes":[{{"key":"{}","value":{{"arrayValue":{{"values":[{{"stringValue":"qwen"}},{{"stringValue":"glm"}}]}}}}}}]"#,
            attr::ALLOWED_FALLBACK_FAMILIES
        ),
        format!(
            r#","attributes":[{{"key":"{}","value":{{"arrayValue":{{"values":[]}}}}}}]"#,
            attr::ALLOWED_FALLBACK_FAMILIES
        ),
        format!(
            r#","attributes":[{{"key":"{}","value":{{"arrayValue":{{}}}}}}]"#,
            attr::ALLOWED_FALLBACK_FAMILIES
        ),
        format!(
            r#","attributes":[{{"key":"{}","value":{{"arrayValue":{{"values":[{{"stringValue":"qwen"}},{{"intValue":"3"}}]}}}}}}]"#,
            attr::ALLOWED_FALLBACK_FAMILIES
        ),
        // Deep unknown values: within serde_json's limit, and past it.
        format!(r#","unknown":{}1{}"#, "[".repeat(60), "]".repeat(60)),
        format!(r#","unknown":{}1{}"#, "[".repeat(300), "]".repeat(300)),
        r#","unknown":{"a":["}",{"b":"]\"["}]}"#.to_owned(),
        r#","attributes":[{"key":"a","value":{"stringValue":"x","junk":1e400}}]"#.to_owned(),
        r#","attributes":[{"key":"a","value":{"stringValue":"x","junk":[1,{"b":null}]}}]"#
            .to_owned(),
        r#","attributes":[{"key":"a","junk":1e400,"value":{"stringValue":"x"}}]"#.to_owned(),
    ];
    for extra in &cases {
        for line in [span(extra), format!(" \n{}\t\r\n", span(extra))] {
            assert_agree(line.as_bytes(), &policy_keys()).map_err(|e| e.to_string())?;
        }
    }
    for common in [
        2, 3, 6, 14, 22, 26, 29, 31, 46, 51, 52, 60, 61, 66, 68, 69, 71, 72, 75, 77,
    ] {
        let line = span(&cases[common]);
        assert!(
            read_cursor(line.as_bytes(), &policy_keys()).is_some(),
            "{line}"
        );
    }
    let trailing = format!("{}x", span(""));
    assert!(read_facts(trailing.as_bytes(), &AttributeKeys::NONE).is_err());
    Ok(())
}

#[test]
fn a_resource_and_scope_after_their_spans_still_name_them() {
    let line = json!({"resourceSpans": [{
        "scopeSpans": [{
            "spans": [{"traceId": "0102030405060708090a0b0c0d0e0f10", "spanId": "0102030405060708"}],
            "scope": {"name": "openai-v2", "version": "1"},
        }],
        "resource": {"attributes": [
            {"key": "service.name", "value": {"stringValue": "late"}},
            {"key": "service.name", "value": {"stringValue": "second"}},
            {"key": "deployment.environment", "value": {"stringValue": "prod"}},
        ]},
    }]})
    .to_string();
    let spans = read_cursor(line.as_bytes(), &policy_keys()).expect("read by the cursor");
    assert_eq!(&*spans[0].service_name, "late");
    assert_eq!(
        spans,
        read_decoded(line.as_bytes(), &policy_keys()).unwrap()
    );
}

/// The string scan reads sixteen bytes a step, then eight, then one: a quote, an escape, a raw
/// control character or a non-ASCII letter at every offset across those steps gives the
/// decoded path's facts or error, and the plain values are read by the cursor.
#[test]
fn a_stop_at_every_offset_of_the_scan_is_found() -> Result<(), String> {
    for offset in 0..40 {
        let before = "m".repeat(offset);
        for (stop, plain) in [
            (String::new(), true),
            ("\\\"q".to_owned(), false),
            ("\\u0041".to_owned(), false),
            ("\u{1}".to_owned(), false),
            ("é".to_owned(), true),
        ] {
            let extra = format!(
                r#","attributes":[{{"key":"gen_ai.request.model","value":{{"stringValue":"{before}{stop}x"}}}}]"#
            );
            let line = span(&extra);
            assert_agree(line.as_bytes(), &policy_keys()).map_err(|e| e.to_string())?;
            if plain {
                assert!(
                    read_cursor(line.as_bytes(), &policy_keys()).is_some(),
                    "{line}"
                );
            }
        }
    }
    Ok(())
}

/// Whitespace between every two tokens, as a pretty-printer puts it: a line the cursor reads
/// compact (where each token's whitespace check is one compare) it reads pretty-printed too, to
/// the decoded path's facts.
#[test]
fn pretty_printed_lines_are_read_by_the_cursor_as_the_decoded_path_reads_them() -> Result<(), String>
{
    let mut read = 0;
    for line in fixture_lines() {
        let value: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
        let pretty = serde_json::to_string_pretty(&value).map_err(|e| e.to_string())?;
        // Raw newlines only come between tokens: inside strings they are escaped.
        let mut tabbed = Vec::new();
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b"\t");
        serde::Serialize::serialize(
            &value,
            &mut serde_json::Serializer::with_formatter(&mut tabbed, formatter),
        )
        .map_err(|e| e.to_string())?;
        let tabbed = String::from_utf8(tabbed)
            .map_err(|e| e.to_string())?
            .replace('\n', "\r\n");
        let compact_read = read_cursor(line.as_bytes(), &policy_keys()).is_some();
        for text in [pretty, tabbed] {
            assert_agree(text.as_bytes(), &policy_keys()).map_err(|e| e.to_string())?;
            assert_eq!(
                read_cursor(text.as_bytes(), &policy_keys()).is_some(),
                compact_read,
                "{text}"
            );
        }
        read += usize::from(compact_read);
    }
    assert!(read > 0);
    Ok(())
}

proptest! {
    /// A time read by the cursor's short path is the value `u64`'s parse gives, and every
    /// string of 1 to 19 digits takes that path.
    #[test]
    fn short_decimals_are_what_u64_parses(text in "[0-9+a-]{0,22}") {
        let fast = super::short_decimal(&text);
        if fast.is_some() {
            prop_assert_eq!(fast, text.parse::<u64>().ok());
        }
        let digits = !text.is_empty() && text.len() <= 19 && text.bytes().all(|b| b.is_ascii_digit());
        prop_assert_eq!(fast.is_some(), digits);
    }

    /// A string `intValue` is read exactly as `i64`'s parse reads it, signs and 19-digit
    /// values past `i64::MAX` included.
    #[test]
    fn digit_runs_with_one_odd_char_are_read_exactly(
        text in "[0-9]{1,19}|[0-9]{0,12}[^0-9][0-9]{0,12}",
    ) {
        let digits = !text.is_empty()
            && text.len() <= 19
            && text.bytes().all(|b| b.is_ascii_digit());
        let expected = if digits { text.parse::<u64>().ok() } else { None };
        prop_assert_eq!(super::short_decimal(&text), expected);
    }

    #[test]
    fn eight_digit_runs_are_what_u64_parses(text in "[0-9]{8}") {
        prop_assert_eq!(super::eight_digits(text.as_bytes()), text.parse::<u64>().ok());
    }

    #[test]
    fn string_ints_are_what_i64_parses(text in "[-+]?[0-9]{0,21}|[0-9+a-]{0,22}") {
        prop_assert_eq!(super::int64_text(&text), text.parse::<i64>().ok());
    }
}

/// Every byte value at every place of eight digits: refused unless it is a digit, and the
/// value `u64`'s parse gives when it is.
#[test]
fn eight_digits_refuse_every_other_byte_and_read_every_digit() {
    for place in 0..8 {
        for byte in 0..=u8::MAX {
            let mut chunk = *b"31415926";
            chunk[place] = byte;
            let read = super::eight_digits(&chunk);
            if byte.is_ascii_digit() {
                let text = std::str::from_utf8(&chunk).expect("digits");
                assert_eq!(read, text.parse::<u64>().ok(), "{text}");
            } else {
                assert_eq!(read, None, "byte {byte:#04x} at {place}");
            }
        }
    }
    for chunk in [*b"00000000", *b"99999999", *b"00000001", *b"10000000"] {
        let text = std::str::from_utf8(&chunk).expect("digits");
        assert_eq!(super::eight_digits(&chunk), text.parse::<u64>().ok());
    }
}

#[test]
fn string_ints_at_their_edges() {
    for text in [
        "9223372036854775807",
        "9223372036854775808",
        "9999999999999999999",
        "-9223372036854775808",
        "-9223372036854775809",
        "+0",
        "-0",
        "00000000000000000000042",
        "",
        "-",
    ] {
        assert_eq!(super::int64_text(text), text.parse::<i64>().ok(), "{text}");
    }
}

#[test]
fn short_decimals_at_their_edges() {
    for text in [
        "0",
        "0000000000000000001",
        "9999999999999999999",
        "1787659200100000000",
    ] {
        assert_eq!(super::short_decimal(text), text.parse().ok(), "{text}");
    }
    for text in [
        "",
        "+1",
        "18446744073709551615",
        "10000000000000000000",
        "１",
    ] {
        assert_eq!(super::short_decimal(text), None, "{text}");
    }
}

/// A span's fields as `"key":value` pairs, in the order of the span keys' table, and keys a
/// span may carry that the cursor does not read.
fn span_fields(index: usize) -> Vec<(&'static str, String)> {
    vec![
        (
            "traceId",
            r#""0102030405060708090a0b0c0d0e0f10""#.to_owned(),
        ),
        ("spanId", format!(r#""{:016x}""#, index + 1)),
        ("parentSpanId", r#""1112131415161718""#.to_owned()),
        ("traceState", r#""""#.to_owned()),
        ("flags", "256".to_owned()),
        ("name", r#""chat gpt-4o""#.to_owned()),
        ("kind", "3".to_owned()),
        (
            "startTimeUnixNano",
            format!(r#""{}""#, 1_787_659_200_100_000_000u64 + index as u64),
        ),
        ("endTimeUnixNano", r#""1787659202100000000""#.to_owned()),
        (
            "attributes",
            format!(
                r#"[{{"key":"gen_ai.request.model","value":{{"stringValue":"gpt-4o"}}}},{{"key":"retry_spend.attempt.index","value":{{"intValue":"{index}"}}}}]"#
            ),
        ),
        ("droppedAttributesCount", "0".to_owned()),
        ("events", "[]".to_owned()),
        ("droppedEventsCount", "0".to_owned()),
        ("links", "[]".to_owned()),
        ("droppedLinksCount", "0".to_owned()),
        (
            "status",
            if index.is_multiple_of(2) {
                "{}"
            } else {
                r#"{"code":2}"#
            }
            .to_owned(),
        ),
        ("names", r#""not a span key""#.to_owned()),
        ("nam", "1".to_owned()),
    ]
}

/// One span with its fields picked and ordered by `order` (indexes into [`span_fields`]),
/// each written `"key":value`, or `"key" : value` where `spaced` says so.
fn ordered_span(index: usize, order: &[usize], spaced: &[bool]) -> String {
    let fields = span_fields(index);
    let written: Vec<String> = order
        .iter()
        .enumerate()
        .map(|(place, &field)| {
            let (key, value) = &fields[field % fields.len()];
            if spaced.get(place).copied().unwrap_or(false) {
                format!(r#""{key}" : {value}"#)
            } else {
                format!(r#""{key}":{value}"#)
            }
        })
        .collect();
    format!("{{{}}}", written.join(","))
}

proptest! {
    /// Spans whose fields come in any order, some missing, some unknown, some spaced, changing
    /// from span to span and from line to line of one thread: the cursor, which guesses each
    /// key from the order it saw last, reads every span as the decoded path does.
    #[test]
    fn spans_in_any_key_order_are_read_as_the_decoded_path_reads_them(
        lines in prop::collection::vec(
            prop::collection::vec(
                (
                    Just((0..18usize).collect::<Vec<_>>()).prop_shuffle(),
                    0..18usize,
                    prop::collection::vec(prop::bool::weighted(0.1), 18),
                    any::<bool>(),
                ),
                1..6,
            ),
            1..4,
        ),
    ) {
        for spans in &lines {
            let written: Vec<String> = spans
                .iter()
                .enumerate()
                .map(|(i, (shuffled, kept, spaced, same))| {
                    // Half the spans keep the table's order of the fields they have, as an
                    // exporter does; the rest are shuffled.
                    let mut order: Vec<usize> = shuffled.iter().copied().filter(|&f| f < 2 || f >= *kept).collect();
                    if *same {
                        order.sort_unstable();
                    }
                    ordered_span(i, &order, spaced)
                })
                .collect();
            let line = format!(
                r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{}]}}]}}]}}"#,
                written.join(",")
            );
            let decoded = read_decoded(line.as_bytes(), &AttributeKeys::NONE);
            let read = read_cursor(line.as_bytes(), &AttributeKeys::NONE);
            prop_assert!(read.is_some(), "the cursor left {} to the other readers", line);
            prop_assert_eq!(read, decoded.ok(), "{}", line);
        }
    }
}

/// The same span's fields in the exporters' order, then in another, then back, then near the
/// end of the line, where fewer bytes are left than a key's compare takes.
#[test]
fn a_changed_key_order_is_followed_and_learned_again() {
    let table: Vec<usize> = (0..16).collect();
    let mut reversed = table.clone();
    reversed.reverse();
    let short = [0, 1, 5];
    for order in [&table[..], &reversed, &table, &short, &table] {
        let spans: Vec<String> = (0..3).map(|i| ordered_span(i, order, &[])).collect();
        let line = format!(
            r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{}]}}]}}]}}"#,
            spans.join(",")
        );
        let decoded = read_decoded(line.as_bytes(), &AttributeKeys::NONE).unwrap();
        assert_eq!(decoded.len(), 3);
        assert_eq!(
            read_cursor(line.as_bytes(), &AttributeKeys::NONE),
            Some(decoded),
            "{line}"
        );
    }
}

/// The span keys' index names each key of the table at its place, and nothing else.
#[test]
fn the_span_key_index_is_the_tables_order() {
    for (i, key) in super::SPAN_KEYS.iter().enumerate() {
        assert_eq!(super::span_key_index(key.name), Some(i), "{}", key.name);
    }
    assert_eq!(super::span_key_index("resource"), None);
}

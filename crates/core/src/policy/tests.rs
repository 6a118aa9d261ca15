use std::path::{Path, PathBuf};
use std::str::FromStr;

use chrono::NaiveDate;
use rust_decimal::Decimal;

use super::*;
use crate::contract::{CapturedAttributes, SpanFacts};

/// The policy of SPEC §2, as written there.
const SPEC_EXAMPLE: &str = r#"
[[policy]]
name = "support-summaries"                       # unique; recorded on every row it decides
match.service = "support-*"                      # resource service.name, glob (* and ?)
match.task_type = "support_summary"              # retry_spend.task.type of the request, glob
match.model = "deepseek-*"                       # gen_ai.request.model of attempt 0, glob
match.attributes = { "deployment.environment.name" = "prod" }  # span or resource attributes, exact
[policy.envelope]                                # same fields as the JSON envelope form
pricing_version = "a42d372ccf0b5dd13ecf71203521f9d2"
pricing_checked_at = "2026-08-22"
pricing_source = "https://aiwave.live/api/pricing"
billing_group = "vip"
max_incremental_usd = "0.015"
max_attempts_after_first = 1
allow_family_fallback = true
allowed_fallback_families = ["deepseek", "qwen", "glm"]
replay_safe = false
"#;

const SHIPPED_EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../config/policy-examples/support-summaries.toml"
);

fn parse_one(text: &str) -> Result<PolicySet, PolicyErrors> {
    PolicySet::parse([(PathBuf::from("team.toml"), text.to_owned())])
}

fn single_error(text: &str) -> PolicyError {
    let mut errors = parse_one(text).unwrap_err().0;
    assert_eq!(errors.len(), 1, "{errors:?}");
    errors.remove(0)
}

fn d(s: &str) -> Decimal {
    Decimal::from_str(s).unwrap()
}

/// A span of `service` whose captured attributes are `attributes`.
fn span(attributes: &[(&str, &str)]) -> SpanFacts {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    use opentelemetry_proto::tonic::trace::v1::Span;
    let otlp = Span {
        attributes: attributes
            .iter()
            .map(|(k, v)| crate::contract::kv(k, Value::StringValue((*v).to_owned())))
            .collect(),
        ..Default::default()
    };
    let keys = AttributeKeys::new(attributes.iter().map(|(k, _)| (*k).to_owned()));
    SpanFacts::from_span_with(&otlp, &"svc".into(), &[], &keys)
}

#[test]
fn the_spec_example_parses_into_its_envelope() {
    let set = parse_one(SPEC_EXAMPLE).unwrap();
    assert_eq!(set.len(), 1);
    let p = &set.policies()[0];
    assert_eq!(p.name, "support-summaries");
    assert_eq!(p.service.as_ref().map(Glob::as_str), Some("support-*"));
    assert_eq!(
        p.attributes,
        [("deployment.environment.name".to_owned(), "prod".to_owned())]
    );
    let e = &p.envelope;
    assert!(e.present);
    assert_eq!(
        e.pricing_version.as_deref(),
        Some("a42d372ccf0b5dd13ecf71203521f9d2")
    );
    assert_eq!(e.pricing_checked_at, NaiveDate::from_ymd_opt(2026, 8, 22));
    assert_eq!(e.max_incremental_usd, Some(d("0.015")));
    assert_eq!(e.max_attempts_after_first, Some(1));
    assert_eq!(e.allow_family_fallback, Some(true));
    assert_eq!(
        e.allowed_fallback_families,
        Some(vec!["deepseek".into(), "glm".into(), "qwen".into()])
    );
    assert_eq!(e.replay_safe, Some(false));
    assert!(!p.pins_latest());
    assert!(set.attribute_keys().contains("deployment.environment.name"));
}

#[test]
fn toml_numbers_dates_and_attribute_values_are_read_like_span_values() {
    let set = parse_one(
        r#"
        [[policy]]
        name = "numbers"
        match.attributes = { "tenant.tier" = 3, "sample.rate" = 0.25, canary = false }
        [policy.envelope]
        pricing_checked_at = 2026-08-22
        max_incremental_usd = 0.015
        "#,
    )
    .unwrap();
    let p = &set.policies()[0];
    assert_eq!(p.envelope.max_incremental_usd, Some(d("0.015")));
    assert_eq!(
        p.envelope.pricing_checked_at,
        NaiveDate::from_ymd_opt(2026, 8, 22)
    );
    let mut attributes = p.attributes.clone();
    attributes.sort();
    assert_eq!(
        attributes,
        [
            ("canary".to_owned(), "false".to_owned()),
            ("sample.rate".to_owned(), "0.25".to_owned()),
            ("tenant.tier".to_owned(), "3".to_owned()),
        ]
    );
}

#[test]
fn policy_errors_name_the_file_and_the_key() {
    // (case, text, key, part of the problem)
    let cases = [
        ("not TOML", "[[policy]\nname = 1", "", "expected `]`"),
        ("unknown top-level key", "polcy = 1", "polcy", "unknown field"),
        (
            "unknown match key",
            "[[policy]]\nname = \"a\"\nmatch.servce = \"x\"\n[policy.envelope]\n",
            "policy[0].match.servce",
            "unknown field `servce`",
        ),
        (
            "unknown envelope key",
            "[[policy]]\nname = \"a\"\n[policy.envelope]\nbudget = \"1\"\n",
            "policy[0].envelope.budget",
            "unknown field `budget`",
        ),
        (
            "wrong type",
            "[[policy]]\nname = \"a\"\n[policy.envelope]\nmax_attempts_after_first = \"one\"\n",
            "policy[0].envelope.max_attempts_after_first",
            "invalid type",
        ),
        (
            "bad glob",
            "[[policy]]\nname = \"a\"\nmatch.service = \"support-[ab]\"\n[policy.envelope]\n",
            "policy[0].match.service",
            "'['",
        ),
        (
            "empty glob",
            "[[policy]]\nname = \"a\"\nmatch.model = \"\"\n[policy.envelope]\n",
            "policy[0].match.model",
            "empty pattern",
        ),
        (
            "latest with a date",
            "[[policy]]\nname = \"a\"\n[policy.envelope]\npricing_version = \"latest\"\npricing_checked_at = \"2026-08-22\"\n",
            "policy[0].envelope.pricing_checked_at",
            "latest",
        ),
        (
            "latest with a source",
            "[[policy]]\nname = \"a\"\n[policy.envelope]\npricing_version = \"latest\"\npricing_source = \"x\"\n",
            "policy[0].envelope.pricing_source",
            "latest",
        ),
        (
            "budget not a decimal",
            "[[policy]]\nname = \"a\"\n[policy.envelope]\nmax_incremental_usd = \"cheap\"\n",
            "policy[0].envelope.max_incremental_usd",
            "not a decimal",
        ),
        (
            "negative budget",
            "[[policy]]\nname = \"a\"\n[policy.envelope]\nmax_incremental_usd = \"-1\"\n",
            "policy[0].envelope.max_incremental_usd",
            "negative",
        ),
        (
            "negative attempt limit",
            "[[policy]]\nname = \"a\"\n[policy.envelope]\nmax_attempts_after_first = -1\n",
            "policy[0].envelope.max_attempts_after_first",
            "not a count",
        ),
        (
            "bad date",
            "[[policy]]\nname = \"a\"\n[policy.envelope]\npricing_checked_at = \"22/08/2026\"\n",
            "policy[0].envelope.pricing_checked_at",
            "not a YYYY-MM-DD date",
        ),
        (
            "attribute value of no string form",
            "[[policy]]\nname = \"a\"\nmatch.attributes = { x = [1] }\n[policy.envelope]\n",
            "policy[0].match.attributes.x",
            "not a string, number or boolean",
        ),
        (
            "empty name",
            "[[policy]]\nname = \" \"\n[policy.envelope]\n",
            "policy[0].name",
            "must not be empty",
        ),
        (
            "error in the second policy",
            "[[policy]]\nname = \"a\"\n[policy.envelope]\n[[policy]]\nname = \"b\"\nmatch.task_type = \"{x}\"\n[policy.envelope]\n",
            "policy[1].match.task_type",
            "'{'",
        ),
        (
            "duplicate name in one file",
            "[[policy]]\nname = \"a\"\n[policy.envelope]\n[[policy]]\nname = \"a\"\n[policy.envelope]\n",
            "policy[1].name",
            "already the name of team.toml policy[0]",
        ),
    ];
    for (case, text, key, problem) in cases {
        let e = single_error(text);
        assert_eq!(e.path, Path::new("team.toml"), "{case}");
        assert_eq!(e.key, key, "{case}: {e}");
        assert!(e.problem.contains(problem), "{case}: {e}");
        let shown = e.to_string();
        assert!(
            shown.starts_with("policy file team.toml: "),
            "{case}: {shown}"
        );
        if !key.is_empty() {
            assert!(shown.contains(&format!("{key}: ")), "{case}: {shown}");
        }
    }
}

#[test]
fn a_missing_envelope_or_name_is_an_error() {
    assert!(single_error("[[policy]]\nname = \"a\"\n")
        .problem
        .contains("missing field `envelope`"));
    assert!(single_error("[[policy]]\n[policy.envelope]\n")
        .problem
        .contains("missing field `name`"));
}

#[test]
fn duplicate_names_across_files_name_both_files() {
    let policy = "[[policy]]\nname = \"shared\"\n[policy.envelope]\n".to_owned();
    let errors = PolicySet::parse([
        (PathBuf::from("a.toml"), policy.clone()),
        (PathBuf::from("b.toml"), policy),
    ])
    .unwrap_err()
    .0;
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].path, Path::new("b.toml"));
    assert_eq!(errors[0].key, "policy[0].name");
    assert!(
        errors[0].problem.contains("a.toml policy[0]"),
        "{}",
        errors[0]
    );
}

#[test]
fn every_bad_file_is_reported() {
    let errors = PolicySet::parse([
        (PathBuf::from("a.toml"), "x = ".to_owned()),
        (PathBuf::from("b.toml"), "y = 1".to_owned()),
    ])
    .unwrap_err()
    .0;
    assert_eq!(errors.len(), 2);
}

#[test]
fn policy_matches_when_every_given_key_holds() {
    let set = parse_one(SPEC_EXAMPLE).unwrap();
    let policy = &set.policies()[0];
    let prod = span(&[("deployment.environment.name", "prod")]);
    let staging = span(&[("deployment.environment.name", "staging")]);
    let plain = span(&[]);
    let with_prod = [&plain, &prod];
    let without = [&plain, &staging];
    let subject = Subject {
        service: "support-bot",
        task_type: Some("support_summary"),
        model: Some("deepseek-v4-flash"),
        spans: &with_prod,
    };
    // (case, subject, matches)
    let cases = [
        ("all hold", subject, true),
        (
            "other service",
            Subject {
                service: "billing",
                ..subject
            },
            false,
        ),
        (
            "other task",
            Subject {
                task_type: Some("code_patch"),
                ..subject
            },
            false,
        ),
        (
            "no task type",
            Subject {
                task_type: None,
                ..subject
            },
            false,
        ),
        (
            "other model",
            Subject {
                model: Some("glm-5"),
                ..subject
            },
            false,
        ),
        (
            "no model",
            Subject {
                model: None,
                ..subject
            },
            false,
        ),
        (
            "attribute on no span",
            Subject {
                spans: &without,
                ..subject
            },
            false,
        ),
        (
            "no spans (decision service)",
            Subject {
                spans: &[],
                ..subject
            },
            false,
        ),
    ];
    for (case, subject, expected) in cases {
        assert_eq!(policy.matches(&subject), expected, "{case}");
    }
}

#[test]
fn a_policy_without_match_matches_every_request_and_the_first_match_wins() {
    let set = PolicySet::parse([
        (
            PathBuf::from("10-code.toml"),
            "[[policy]]\nname = \"code\"\nmatch.task_type = \"code_*\"\n[policy.envelope]\n\n[[policy]]\nname = \"catch-all\"\n[policy.envelope]\n".to_owned(),
        ),
        (
            PathBuf::from("20-never.toml"),
            "[[policy]]\nname = \"shadowed\"\n[policy.envelope]\n".to_owned(),
        ),
    ])
    .unwrap();
    let subject = |task_type| Subject {
        service: "unknown_service",
        task_type,
        model: None,
        spans: &[],
    };
    let chosen = |task_type| set.select(&subject(task_type)).map(|p| p.name.as_str());
    assert_eq!(chosen(Some("code_patch")), Some("code"));
    assert_eq!(chosen(Some("support_summary")), Some("catch-all"));
    assert_eq!(chosen(None), Some("catch-all"));
    assert_eq!(PolicySet::default().select(&subject(None)), None);
}

#[test]
fn the_shipped_example_loads_and_matches_no_real_service() {
    let text = std::fs::read_to_string(SHIPPED_EXAMPLE).unwrap();
    let set = PolicySet::parse([(PathBuf::from(SHIPPED_EXAMPLE), text)]).unwrap();
    assert!(!set.is_empty());
    let prod = span(&[("deployment.environment.name", "prod")]);
    for service in ["support-bot", "checkout", "unknown_service"] {
        let subject = Subject {
            service,
            task_type: Some("support_summary"),
            model: Some("deepseek-v4-flash"),
            spans: &[&prod],
        };
        assert_eq!(set.select(&subject).map(|p| &p.name), None, "{service}");
    }
}

#[test]
fn review_describes_each_policy_on_one_stable_line() {
    let set = parse_one(SPEC_EXAMPLE).unwrap();
    assert_eq!(
        review::describe(&set.policies()[0]),
        "support-summaries  file team.toml  match service=support-* task_type=support_summary \
         model=deepseek-* attributes.deployment.environment.name=\"prod\"  envelope \
         pricing_version=a42d372ccf0b5dd13ecf71203521f9d2 pricing_checked_at=2026-08-22 \
         pricing_source=https://aiwave.live/api/pricing billing_group=vip \
         max_incremental_usd=0.015 max_attempts_after_first=1 allow_family_fallback=true \
         allowed_fallback_families=[deepseek,glm,qwen] replay_safe=false"
    );
    let bare = parse_one("[[policy]]\nname = \"bare\"\n[policy.envelope]\n").unwrap();
    assert_eq!(
        review::describe(&bare.policies()[0]),
        "bare  file team.toml  match every request  envelope"
    );
}

#[test]
fn review_warns_about_envelopes_that_leave_rows_unaudited() {
    let book = crate::pricing::shipped_book();
    let set = parse_one(SPEC_EXAMPLE).unwrap();
    assert_eq!(
        review::warnings(&set.policies()[0], Some(&book)),
        Vec::<String>::new()
    );
    let odd = parse_one(
        &SPEC_EXAMPLE
            .replace("\"vip\"", "\"platinum\"")
            .replace("max_attempts_after_first = 1\n", ""),
    )
    .unwrap();
    let warnings = review::warnings(&odd.policies()[0], Some(&book));
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[0].ends_with("envelope_incomplete"), "{warnings:?}");
    assert!(
        warnings[1].ends_with("unknown_billing_group"),
        "{warnings:?}"
    );
    let unknown =
        parse_one(&SPEC_EXAMPLE.replace("a42d372ccf0b5dd13ecf71203521f9d2", "nope")).unwrap();
    let warnings = review::warnings(&unknown.policies()[0], Some(&book));
    assert!(
        warnings[0].ends_with("unknown_pricing_version"),
        "{warnings:?}"
    );
}

#[test]
fn latest_pins_nothing_at_load_time() {
    let set = parse_one(
        "[[policy]]\nname = \"newest\"\n[policy.envelope]\npricing_version = \"latest\"\n",
    )
    .unwrap();
    assert!(set.policies()[0].pins_latest());
    assert_eq!(set.policies()[0].envelope.pricing_checked_at, None);
}

#[test]
fn captured_attributes_default_to_empty() {
    assert!(CapturedAttributes::default().is_empty());
}

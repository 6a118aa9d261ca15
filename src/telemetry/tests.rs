use std::io::{Read, Write};
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use rust_decimal::Decimal;

use super::names::{self, Kind};
use super::{router, serve, Health, Metrics};
use crate::contract::id_from_hex;
use crate::record::{AttemptRow, Decision, SpendClass, UnauditedReason, Violation};

fn usd(text: &str) -> Decimal {
    Decimal::from_str(text).expect("test decimal parses")
}

/// An audited attempt of the `summarize` task for `team-a`; tests change what they look at.
fn attempt(attempt_index: i32, decision: Decision, spend_class: SpendClass) -> AttemptRow {
    AttemptRow {
        event_time: 1_741_953_600_000_000_000,
        end_time: 1_741_953_602_000_000_000,
        span_id: id_from_hex(&format!("b7ad6b71692033{attempt_index:02}")).unwrap(),
        task_type: Some("summarize".into()),
        billing_group: Some("team-a".into()),
        attempt_index,
        spend_class,
        decision,
        envelope_source: Some("span".into()),
        ..AttemptRow::blank()
    }
}

/// The sample lines of one family, in the order `/metrics` shows them.
fn samples(text: &str, family: &str) -> Vec<String> {
    text.lines()
        .filter(|line| {
            line.strip_prefix(family)
                .is_some_and(|rest| rest.starts_with(['{', ' ']))
        })
        .map(str::to_owned)
        .collect()
}

/// Sends one HTTP/1.1 GET over a plain blocking socket; returns (status line, head, body).
fn http_get(addr: std::net::SocketAddr, path: &str) -> (String, String, String) {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the metrics server");
    // A server that never answers fails the test instead of hanging it.
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("set read timeout");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send request");
    let mut response = String::new();
    // Connection: close makes the server end the stream after one response.
    stream.read_to_string(&mut response).expect("read response");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .expect("response has a header block");
    let status = head.lines().next().unwrap_or_default().to_owned();
    (status, head.to_owned(), body.to_owned())
}

#[test]
fn fresh_collector_lists_every_family_with_help_and_type() {
    let text = Metrics::new().render();
    for family in names::ALL {
        let help = format!("# HELP {} {}", family.name, family.help);
        let kind = format!("# TYPE {} {}", family.name, family.kind.as_str());
        assert_eq!(text.lines().filter(|l| *l == help).count(), 1, "{help}");
        assert_eq!(text.lines().filter(|l| *l == kind).count(), 1, "{kind}");
        if family.kind == Kind::Counter {
            assert!(family.name.ends_with("_total"), "{}", family.name);
        }
    }
    // Labelled families have no series until something happens; plain ones start at 0.
    assert!(samples(&text, names::ATTEMPTS.name).is_empty());
    assert!(samples(&text, names::SPANS_RECEIVED.name).is_empty());
    assert_eq!(
        samples(&text, names::ROWS_WRITTEN.name),
        ["retry_spend_rows_written_total 0"]
    );
    assert_eq!(
        samples(&text, names::LAST_WRITE_TIMESTAMP.name),
        ["retry_spend_last_write_timestamp_seconds 0"]
    );
    assert!(text.ends_with('\n'));
}

#[test]
fn every_line_is_a_comment_or_a_sample_of_the_family_above_it() {
    let metrics = Metrics::new();
    metrics.record_rows(&[attempt(1, Decision::OverEnvelope, SpendClass::Retry)]);
    metrics.spans_received("grpc", 1);
    let text = metrics.render();
    let mut current: Option<&str> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            current = rest.split(' ').next();
        } else if !line.starts_with("# TYPE ") {
            let family = current.unwrap_or_else(|| panic!("{line} comes before any # HELP"));
            assert!(line.starts_with(family), "{line} outside {family}");
        }
    }
}

#[test]
fn rows_count_attempts_by_decision_spend_class_task_type_and_billing_group() {
    let metrics = Metrics::new();

    let mut first = attempt(0, Decision::FirstAttempt, SpendClass::Base);
    first.task_type = None;
    first.billing_group = None;
    first.audited = false;
    first.unaudited_reason = Some(UnauditedReason::NoEnvelope);
    first.estimated_incremental_usd = Some(Decimal::ZERO);

    let mut over = attempt(1, Decision::OverEnvelope, SpendClass::Retry);
    over.estimated_incremental_usd = Some(usd("0.0028068"));
    over.violations = vec![Violation::OverEnvelope, Violation::SdkEstimateMismatch];

    let mut within = attempt(2, Decision::WithinEnvelope, SpendClass::Retry);
    within.estimated_incremental_usd = Some(usd("0.00766626"));

    let mut unaudited = attempt(3, Decision::Unaudited, SpendClass::Fallback);
    unaudited.audited = false;
    unaudited.unaudited_reason = Some(UnauditedReason::ModelNotInPricing);

    metrics.record_rows(&[first, over]);
    metrics.record_rows(&[within, unaudited]);
    let text = metrics.render();

    assert_eq!(
        samples(&text, names::ATTEMPTS.name),
        [
            r#"retry_spend_attempts_total{decision="first_attempt",spend_class="base",task_type="",billing_group=""} 1"#,
            r#"retry_spend_attempts_total{decision="over_envelope",spend_class="retry",task_type="summarize",billing_group="team-a"} 1"#,
            r#"retry_spend_attempts_total{decision="unaudited",spend_class="fallback",task_type="summarize",billing_group="team-a"} 1"#,
            r#"retry_spend_attempts_total{decision="within_envelope",spend_class="retry",task_type="summarize",billing_group="team-a"} 1"#,
        ]
    );
    // The first attempt's 0 is base cost, not retry spend: no `base` series.
    assert_eq!(
        samples(&text, names::INCREMENTAL_USD.name),
        [r#"retry_spend_incremental_usd_total{spend_class="retry"} 0.01047306"#]
    );
    // The unaudited first attempt is not a retry.
    assert_eq!(
        samples(&text, names::UNAUDITED_ATTEMPTS.name),
        ["retry_spend_unaudited_attempts_total 1"]
    );
    assert_eq!(
        samples(&text, names::VIOLATIONS.name),
        [
            r#"retry_spend_violations_total{violation="over_envelope"} 1"#,
            r#"retry_spend_violations_total{violation="sdk_estimate_mismatch"} 1"#,
        ]
    );
}

#[test]
fn repeated_label_sets_add_up() {
    let metrics = Metrics::new();
    let mut retry = attempt(1, Decision::WithinEnvelope, SpendClass::Retry);
    retry.estimated_incremental_usd = Some(usd("0.10"));
    metrics.record_rows(&[retry.clone(), retry.clone()]);
    metrics.record_rows(&[retry]);
    let text = metrics.render();
    assert_eq!(
        samples(&text, names::ATTEMPTS.name),
        [
            r#"retry_spend_attempts_total{decision="within_envelope",spend_class="retry",task_type="summarize",billing_group="team-a"} 3"#
        ]
    );
    assert_eq!(
        samples(&text, names::INCREMENTAL_USD.name),
        [r#"retry_spend_incremental_usd_total{spend_class="retry"} 0.3"#]
    );
}

#[test]
fn label_values_escape_backslash_quote_and_newline() {
    let metrics = Metrics::new();
    let mut row = attempt(0, Decision::FirstAttempt, SpendClass::Base);
    row.task_type = Some("say \"hi\"\nC:\\tmp".into());
    metrics.record_rows(&[row]);
    assert_eq!(
        samples(&metrics.render(), names::ATTEMPTS.name),
        [
            r#"retry_spend_attempts_total{decision="first_attempt",spend_class="base",task_type="say \"hi\"\nC:\\tmp",billing_group="team-a"} 1"#
        ]
    );
}

#[test]
fn intake_counters_are_labelled_by_transport_and_outcome() {
    let metrics = Metrics::new();
    metrics.spans_received("http", 2);
    metrics.spans_received("grpc", 3);
    metrics.spans_received("grpc", 4);
    metrics.export_request("grpc", "ok");
    metrics.export_request("http", "too_large");
    metrics.export_request("grpc", "ok");
    let text = metrics.render();
    assert_eq!(
        samples(&text, names::SPANS_RECEIVED.name),
        [
            r#"retry_spend_spans_received_total{transport="grpc"} 7"#,
            r#"retry_spend_spans_received_total{transport="http"} 2"#,
        ]
    );
    assert_eq!(
        samples(&text, names::EXPORT_REQUESTS.name),
        [
            r#"retry_spend_export_requests_total{transport="grpc",outcome="ok"} 2"#,
            r#"retry_spend_export_requests_total{transport="http",outcome="too_large"} 1"#,
        ]
    );
}

#[test]
fn plain_counters_and_gauges_show_their_values() {
    let metrics = Metrics::new();
    metrics.set_requests_pending(12);
    metrics.set_requests_pending(5);
    metrics.set_requests_pending_limit(10_000);
    metrics.requests_evicted(2);
    metrics.late_attempts(3);
    metrics.duplicate_spans(4);
    metrics.parquet_file_completed();
    metrics.parquet_file_completed();
    metrics.sink_errors(1);
    metrics.spans_forwarded(40);
    metrics.forward_failures(6);
    metrics.forward_spans_dropped(7);
    let text = metrics.render();
    for expected in [
        "retry_spend_requests_pending 5",
        "retry_spend_requests_pending_limit 10000",
        "retry_spend_requests_evicted_total 2",
        "retry_spend_late_attempts_total 3",
        "retry_spend_duplicate_spans_total 4",
        "retry_spend_parquet_files_total 2",
        "retry_spend_sink_errors_total 1",
        "retry_spend_forward_spans_total 40",
        "retry_spend_forward_failures_total 6",
        "retry_spend_forward_dropped_spans_total 7",
    ] {
        assert_eq!(
            text.lines().filter(|l| *l == expected).count(),
            1,
            "{expected}"
        );
    }
}

#[test]
fn a_write_of_rows_stamps_the_last_write_time_and_an_empty_one_does_not() {
    let metrics = Metrics::new();
    metrics.rows_written(0);
    assert!(metrics
        .render()
        .contains("\nretry_spend_last_write_timestamp_seconds 0\n"));

    let before = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64();
    metrics.rows_written(3);
    let after = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64();

    let text = metrics.render();
    assert_eq!(
        samples(&text, names::ROWS_WRITTEN.name),
        ["retry_spend_rows_written_total 3"]
    );
    let stamp: f64 = samples(&text, names::LAST_WRITE_TIMESTAMP.name)[0]
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .expect("timestamp is a number");
    // Millisecond resolution: allow the truncation below `before`.
    assert!(stamp >= before - 0.001 && stamp <= after, "{stamp}");
}

#[test]
fn health_reports_every_open_problem_until_cleared() {
    let health = Health::new();
    assert_eq!(health.status(), Ok(()));

    health.set_problem("parquet", "cannot write /data/attempts: disk full".into());
    health.set_problem("forward", "collector:4317 unavailable".into());
    assert_eq!(
        health.status(),
        Err(
            "forward: collector:4317 unavailable\nparquet: cannot write /data/attempts: disk full"
                .into()
        )
    );

    health.set_problem("parquet", "cannot sync /data/attempts".into());
    health.clear_problem("forward");
    assert_eq!(
        health.status(),
        Err("parquet: cannot sync /data/attempts".into())
    );

    health.clear_problem("parquet");
    health.clear_problem("parquet");
    assert_eq!(health.status(), Ok(()));
}

#[tokio::test]
async fn serves_metrics_and_healthz_over_http() {
    let metrics = Metrics::new();
    let health = Health::new();
    metrics.spans_received("grpc", 9);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a free port");
    let addr = listener.local_addr().expect("bound address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(
        listener,
        router(metrics.clone(), health.clone()),
        async {
            let _ = stopped.await;
        },
    ));

    let fetch = |path: &'static str| tokio::task::spawn_blocking(move || http_get(addr, path));

    let (status, head, body) = fetch("/metrics").await.expect("client task");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        head.to_ascii_lowercase()
            .contains("\r\ncontent-type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    assert_eq!(body, metrics.render());
    assert!(body.contains("\nretry_spend_spans_received_total{transport=\"grpc\"} 9\n"));

    let (status, _, body) = fetch("/healthz").await.expect("client task");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(body, "ok\n");

    health.set_problem(
        "parquet",
        "cannot write /data: read-only file system".into(),
    );
    health.set_problem("forward", "downstream unavailable".into());
    let (status, _, body) = fetch("/healthz").await.expect("client task");
    assert_eq!(status, "HTTP/1.1 503 Service Unavailable");
    assert_eq!(
        body,
        "forward: downstream unavailable\nparquet: cannot write /data: read-only file system\n"
    );

    let (status, _, _) = fetch("/nope").await.expect("client task");
    assert_eq!(status, "HTTP/1.1 404 Not Found");

    stop.send(()).expect("server still running");
    server
        .await
        .expect("server task")
        .expect("server shuts down cleanly");
}

#[test]
fn client_label_values_past_the_cap_count_as_other() {
    let metrics = Metrics::new();
    metrics.set_label_values_cap(2);
    let rows: Vec<AttemptRow> = ["a", "b", "c", "a", "d"]
        .iter()
        .map(|task| {
            let mut row = attempt(0, Decision::FirstAttempt, SpendClass::Base);
            row.task_type = Some((*task).into());
            row
        })
        .collect();
    metrics.record_rows(&rows);
    let text = metrics.render();
    let attempts = samples(&text, "retry_spend_attempts_total");
    let count = |task: &str| {
        attempts
            .iter()
            .find(|l| l.contains(&format!("task_type=\"{task}\"")))
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_owned)
    };
    assert_eq!(count("a").as_deref(), Some("2"));
    assert_eq!(count("b").as_deref(), Some("1"));
    assert_eq!(count(super::OTHER_LABEL_VALUE).as_deref(), Some("2"));
    assert_eq!(count("c"), None);
    assert_eq!(
        samples(&text, "retry_spend_label_values_capped_total"),
        ["retry_spend_label_values_capped_total 2"]
    );
}

/// Attempts are counted per attempt and label, also when a batch repeats a label set: two
/// attempts over both caps count four times.
#[test]
fn capped_attempts_count_once_per_attempt_and_label() {
    let metrics = Metrics::new();
    metrics.set_label_values_cap(1);
    let row = |task: &str, group: &str, decision| {
        let mut row = attempt(0, decision, SpendClass::Base);
        row.task_type = Some(task.into());
        row.billing_group = Some(group.into());
        row
    };
    metrics.record_rows(&[
        row("a", "x", Decision::FirstAttempt),
        row("b", "y", Decision::FirstAttempt),
        row("a", "x", Decision::WithinEnvelope),
        row("b", "y", Decision::FirstAttempt),
    ]);
    let text = metrics.render();
    assert_eq!(
        samples(&text, "retry_spend_label_values_capped_total"),
        ["retry_spend_label_values_capped_total 4"]
    );
    let attempts = samples(&text, "retry_spend_attempts_total");
    let other = attempts
        .iter()
        .find(|l| l.contains("task_type=\"_other\"") && l.contains("billing_group=\"_other\""))
        .map(|l| l.rsplit(' ').next().unwrap_or_default().to_owned());
    assert_eq!(other.as_deref(), Some("2"), "{attempts:?}");
    assert_eq!(
        attempts
            .iter()
            .filter(|l| l.contains("task_type=\"a\""))
            .count(),
        2
    );
}

/// Every query of the shipped Grafana dashboard names only metrics the collector exports, and
/// the dashboard covers breaches, spend, audit coverage and pipeline health.
#[test]
fn the_grafana_dashboard_queries_only_exported_metrics() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/grafana/retry-spend.json"
    );
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("dashboard file")).unwrap();
    fn exprs(value: &serde_json::Value, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                for (key, v) in map {
                    match (key.as_str(), v) {
                        ("expr", serde_json::Value::String(e)) => out.push(e.clone()),
                        _ => exprs(v, out),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| exprs(v, out)),
            _ => {}
        }
    }
    let mut queries = Vec::new();
    exprs(&dashboard, &mut queries);
    assert!(queries.len() >= 10, "{queries:?}");
    let exported: Vec<&str> = names::ALL.iter().map(|f| f.name).collect();
    let mut used = std::collections::BTreeSet::new();
    for query in &queries {
        let mut rest = query.as_str();
        while let Some(at) = rest.find("retry_spend_") {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                exported.contains(&name.as_str()),
                "{name} in {query:?} is not a metric the collector exports"
            );
            used.insert(name.clone());
            rest = &rest[at + name.len()..];
        }
    }
    for needed in [
        names::ATTEMPTS.name,
        names::INCREMENTAL_USD.name,
        names::UNAUDITED_ATTEMPTS.name,
        names::REQUESTS_PENDING.name,
        names::ROWS_WRITTEN.name,
        names::SINK_ERRORS.name,
    ] {
        assert!(used.contains(needed), "the dashboard shows {needed}");
    }
}

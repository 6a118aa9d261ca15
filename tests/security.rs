//! TLS and bearer-token authentication on both receivers: the real OpenTelemetry SDK exporters
//! get through with the right certificate and token, and everything else is refused and
//! writes nothing.

mod common;

use common::collector::{config, example_requests, replayed_rows, stop, EXAMPLE, EXAMPLE_ROWS};
use common::otel::by_service;
use common::secure::{
    export_grpc, export_https, export_raw_grpc, post_https, self_signed, tokens_file, Client,
};
use opentelemetry_otlp::Protocol;
use retry_spend_collector::service::{start, Collector};

const TOKEN: &str = "rsc-ingest-7f3a9c";
const SECOND_TOKEN: &str = "rsc-ingest-b81d20";
const WRONG_TOKEN: &str = "rsc-ingest-7f3a9d";

fn export_requests_line(collector: &Collector, transport: &str, outcome: &str) -> String {
    let prefix = format!(
        r#"retry_spend_export_requests_total{{transport="{transport}",outcome="{outcome}"}} "#
    );
    collector
        .metrics
        .render()
        .lines()
        .find(|l| l.starts_with(&prefix))
        .map(|l| l.to_owned())
        .unwrap_or_default()
}

/// A collector with TLS and two accepted tokens, its output directory and its certificate.
struct Secured {
    collector: Collector,
    out: tempfile::TempDir,
    ca: String,
    _cert: common::secure::SelfSigned,
}

async fn secured() -> Secured {
    let out = tempfile::tempdir().unwrap();
    let cert = self_signed();
    let mut config = config(out.path());
    config.receivers.otlp.tls = cert.tls.clone();
    config.receivers.otlp.auth = tokens_file(out.path(), &[TOKEN, SECOND_TOKEN]);
    let collector = start(config).await.unwrap();
    Secured {
        collector,
        out,
        ca: cert.cert_pem.clone(),
        _cert: cert,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_grpc_exporter_over_tls_with_a_token_gives_the_replay_rows() {
    let s = secured().await;
    let client = Client {
        ca: Some(&s.ca),
        token: Some(TOKEN),
    };
    export_grpc(
        s.collector.grpc_addr,
        client,
        by_service(&example_requests()),
    )
    .await
    .expect("accepted");
    let rows = stop(s.collector, s.out.path()).await;
    assert_eq!(rows.len(), EXAMPLE_ROWS);
    assert_eq!(rows, replayed_rows());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_http_exporter_over_tls_with_a_token_gives_the_replay_rows() {
    let s = secured().await;
    let batches = by_service(&example_requests());
    export_https(
        s.collector.http_addr,
        &s.ca,
        Some(SECOND_TOKEN),
        Protocol::HttpBinary,
        batches,
    )
    .await
    .expect("accepted");
    assert_eq!(stop(s.collector, s.out.path()).await, replayed_rows());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_without_or_with_a_wrong_token_is_unauthenticated_and_writes_nothing() {
    let s = secured().await;
    let addr = s.collector.grpc_addr;
    let tls = Client {
        ca: Some(&s.ca),
        token: None,
    };
    let request = example_requests().remove(0);
    let wrong = format!("Bearer {WRONG_TOKEN}");
    let basic = format!("Basic {TOKEN}");
    for authorization in [None, Some(wrong.as_str()), Some(basic.as_str())] {
        let status = export_raw_grpc(addr, tls, authorization, request.clone())
            .await
            .expect_err("refused");
        assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
        assert_eq!(status.message(), "missing or invalid bearer token");
    }
    let sdk = Client {
        ca: Some(&s.ca),
        token: Some(WRONG_TOKEN),
    };
    let error = export_grpc(addr, sdk, by_service(&example_requests()))
        .await
        .expect_err("the SDK exporter is refused too");
    assert!(error.contains("nauthenticated"), "{error}");
    assert!(!error.contains(WRONG_TOKEN), "{error}");
    assert_eq!(
        export_requests_line(&s.collector, "grpc", "unauthenticated"),
        r#"retry_spend_export_requests_total{transport="grpc",outcome="unauthenticated"} 4"#
    );
    assert_eq!(export_requests_line(&s.collector, "grpc", "ok"), "");
    assert!(stop(s.collector, s.out.path()).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_without_or_with_a_wrong_token_is_401_and_writes_nothing() {
    let s = secured().await;
    let addr = s.collector.http_addr;
    let request = example_requests().remove(0);
    let wrong = format!("Bearer {WRONG_TOKEN}");
    for authorization in [None, Some(wrong.as_str()), Some(TOKEN)] {
        let response = post_https(addr, &s.ca, authorization, &request).await;
        assert_eq!(response.status(), 401, "{authorization:?}");
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
        let body = String::from_utf8_lossy(response.body());
        assert!(body.contains("missing or invalid bearer token"), "{body}");
    }
    let error = export_https(
        addr,
        &s.ca,
        Some(WRONG_TOKEN),
        Protocol::HttpBinary,
        by_service(&example_requests()),
    )
    .await
    .expect_err("the SDK exporter is refused too");
    assert!(error.contains("401"), "{error}");
    assert_eq!(
        export_requests_line(&s.collector, "http", "unauthenticated"),
        r#"retry_spend_export_requests_total{transport="http",outcome="unauthenticated"} 4"#
    );
    assert!(stop(s.collector, s.out.path()).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_or_untrusting_clients_cannot_talk_to_a_tls_receiver() {
    let s = secured().await;
    let plaintext = Client {
        ca: None,
        token: Some(TOKEN),
    };
    let batches = by_service(&example_requests());
    assert!(export_grpc(s.collector.grpc_addr, plaintext, batches)
        .await
        .is_err());
    let impostor = self_signed();
    let untrusting = Client {
        ca: Some(&impostor.cert_pem),
        token: Some(TOKEN),
    };
    let batches = by_service(&example_requests());
    assert!(export_grpc(s.collector.grpc_addr, untrusting, batches)
        .await
        .is_err());
    let batches = by_service(&example_requests());
    let https = export_https(
        s.collector.http_addr,
        &impostor.cert_pem,
        Some(TOKEN),
        Protocol::HttpBinary,
        batches,
    );
    assert!(https.await.is_err());
    let addr = s.collector.http_addr;
    let sent = tokio::task::spawn_blocking(move || {
        reqwest::blocking::Client::new()
            .post(format!("http://{addr}/v1/traces"))
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(
                std::fs::read_to_string(EXAMPLE)
                    .unwrap()
                    .lines()
                    .next()
                    .unwrap()
                    .to_owned(),
            )
            .send()
            .map(|r| r.status().as_u16())
    })
    .await
    .unwrap();
    assert!(sent.is_err(), "plain HTTP got an answer: {sent:?}");
    assert!(stop(s.collector, s.out.path()).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_without_auth_accepts_any_client_that_trusts_the_certificate() {
    let out = tempfile::tempdir().unwrap();
    let cert = self_signed();
    let mut config = config(out.path());
    config.receivers.otlp.tls = cert.tls.clone();
    let collector = start(config).await.unwrap();
    let client = Client {
        ca: Some(&cert.cert_pem),
        token: None,
    };
    let mut requests = example_requests();
    let second_half = requests.split_off(requests.len() / 2);
    export_grpc(collector.grpc_addr, client, by_service(&requests))
        .await
        .expect("gRPC accepted");
    export_https(
        collector.http_addr,
        &cert.cert_pem,
        None,
        Protocol::HttpJson,
        by_service(&second_half),
    )
    .await
    .expect("HTTP accepted");
    assert_eq!(stop(collector, out.path()).await, replayed_rows());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_without_tls_works_on_plaintext_receivers() {
    let out = tempfile::tempdir().unwrap();
    let mut config = config(out.path());
    config.receivers.otlp.auth = tokens_file(out.path(), &[TOKEN]);
    let collector = start(config).await.unwrap();
    let request = example_requests().remove(0);
    let anonymous = Client {
        ca: None,
        token: None,
    };
    let status = export_raw_grpc(collector.grpc_addr, anonymous, None, request.clone())
        .await
        .expect_err("refused");
    assert_eq!(status.code(), tonic::Code::Unauthenticated);
    let authorized = Client {
        ca: None,
        token: Some(TOKEN),
    };
    export_grpc(
        collector.grpc_addr,
        authorized,
        by_service(&example_requests()),
    )
    .await
    .expect("accepted");
    assert_eq!(stop(collector, out.path()).await, replayed_rows());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_refuses_a_bad_tokens_file_naming_it_but_not_the_token() {
    let out = tempfile::tempdir().unwrap();
    let mut config = config(out.path());
    let auth = tokens_file(out.path(), &[TOKEN, "half a token"]);
    let path = auth.tokens_file.clone();
    config.receivers.otlp.auth = auth;
    let error = format!("{:#}", start(config).await.err().expect("refused"));
    assert!(
        error.contains(&format!(
            "receivers.otlp.auth.tokens_file {}: line 4: ",
            path.display()
        )),
        "{error}"
    );
    assert!(
        !error.contains("half a token") && !error.contains(TOKEN),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_refuses_a_missing_certificate_naming_it() {
    let out = tempfile::tempdir().unwrap();
    let mut config = config(out.path());
    let cert = self_signed();
    config.receivers.otlp.tls = cert.tls.clone();
    config.receivers.otlp.tls.cert_file = out.path().join("missing.pem");
    let error = format!("{:#}", start(config).await.err().expect("refused"));
    assert!(
        error.contains(&format!(
            "receivers.otlp.tls.cert_file {}: cannot read",
            out.path().join("missing.pem").display()
        )),
        "{error}"
    );
}

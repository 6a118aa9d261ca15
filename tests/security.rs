//! TLS and bearer-token authentication on both receivers: the real OpenTelemetry SDK exporters
//! get through with the right certificate and token, and everything else is refused and
//! writes nothing.

mod common;

use common::collector::{config, example_requests, replayed_rows, stop, EXAMPLE, EXAMPLE_ROWS};
use common::otel::by_service;
use common::secure::{
    export_grpc, export_https, export_raw_grpc, handshake, post_https, post_https_to, self_signed,
    tokens_file, Client, SelfSigned,
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

/// Makes `to`'s certificate and key the ones in `from`'s files, as a certificate rotation does.
fn replace_certificate(from: &SelfSigned, to: &SelfSigned) {
    std::fs::copy(&to.tls.cert_file, &from.tls.cert_file).unwrap();
    std::fs::copy(&to.tls.key_file, &from.tls.key_file).unwrap();
}

/// Whether a new client trusting only `ca` completes a handshake with both receivers.
async fn both_receivers_trusted_by(collector: &Collector, ca: &str) -> (bool, bool) {
    (
        handshake(collector.grpc_addr, ca).await.is_ok(),
        handshake(collector.http_addr, ca).await.is_ok(),
    )
}

/// Whether `token` is accepted by the gRPC and the HTTP export, and by the HTTP decision
/// service, over a new connection trusting `ca`.
async fn token_accepted(collector: &Collector, ca: &str, token: &str) -> (bool, bool, bool) {
    let request = example_requests().remove(0);
    let bearer = format!("Bearer {token}");
    let client = Client {
        ca: Some(ca),
        token: None,
    };
    let grpc =
        match export_raw_grpc(collector.grpc_addr, client, Some(&bearer), request.clone()).await {
            Ok(()) => true,
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
                false
            }
        };
    let http = post_https(collector.http_addr, ca, Some(&bearer), &request).await;
    assert!(matches!(http.status().as_u16(), 200 | 401), "{http:?}");
    // An empty question: malformed (400) once past authentication, 401 before it.
    let decision = post_https_to(
        collector.http_addr,
        "/v1/retry-decision",
        ca,
        Some(&bearer),
        bytes::Bytes::new(),
    )
    .await;
    assert!(
        matches!(decision.status().as_u16(), 400 | 401),
        "{decision:?}"
    );
    (grpc, http.status() == 200, decision.status() != 401)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_puts_the_new_certificate_and_tokens_in_use_for_new_connections() {
    let out = tempfile::tempdir().unwrap();
    let old = self_signed();
    let new = self_signed();
    let mut config = config(out.path());
    config.receivers.otlp.tls = old.tls.clone();
    config.receivers.otlp.auth = tokens_file(out.path(), &[TOKEN]);
    let collector = start(config).await.unwrap();
    assert_eq!(
        both_receivers_trusted_by(&collector, &old.cert_pem).await,
        (true, true)
    );
    assert_eq!(
        both_receivers_trusted_by(&collector, &new.cert_pem).await,
        (false, false)
    );
    assert_eq!(
        token_accepted(&collector, &old.cert_pem, TOKEN).await,
        (true, true, true)
    );
    // A connection made before the reload, used after it.
    let mut open = tonic::transport::Channel::from_shared(format!(
        "https://{}",
        collector.grpc_addr
    ))
    .unwrap()
    .tls_config(
        tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(&old.cert_pem))
            .domain_name("localhost"),
    )
    .unwrap()
    .connect()
    .await
    .map(opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient::new)
    .unwrap();

    replace_certificate(&old, &new);
    tokens_file(out.path(), &[SECOND_TOKEN]);
    let reloaded = collector.reload().await.unwrap();
    assert!(reloaded.certificate);
    assert_eq!(reloaded.tokens, Some(1));

    assert_eq!(
        both_receivers_trusted_by(&collector, &new.cert_pem).await,
        (true, true),
        "new connections get the new certificate"
    );
    assert_eq!(
        both_receivers_trusted_by(&collector, &old.cert_pem).await,
        (false, false),
        "and never the old one"
    );
    assert_eq!(
        token_accepted(&collector, &new.cert_pem, SECOND_TOKEN).await,
        (true, true, true)
    );
    assert_eq!(
        token_accepted(&collector, &new.cert_pem, TOKEN).await,
        (false, false, false),
        "the token no longer in the file is refused everywhere"
    );
    let mut request = tonic::Request::new(example_requests().remove(1));
    let bearer = format!("Bearer {SECOND_TOKEN}").parse().unwrap();
    request.metadata_mut().insert("authorization", bearer);
    open.export(request)
        .await
        .expect("an open connection keeps its certificate and sees the new tokens");
    assert_eq!(
        export_requests_line(&collector, "grpc", "unauthenticated"),
        r#"retry_spend_export_requests_total{transport="grpc",outcome="unauthenticated"} 1"#
    );
    stop(collector, out.path()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_reload_names_the_file_and_keeps_the_certificate_and_tokens_in_use() {
    let out = tempfile::tempdir().unwrap();
    let old = self_signed();
    let new = self_signed();
    let mut config = config(out.path());
    config.receivers.otlp.tls = old.tls.clone();
    let tokens = tokens_file(out.path(), &[TOKEN]);
    config.receivers.otlp.auth = tokens.clone();
    let collector = start(config).await.unwrap();
    let in_use = || async {
        (
            both_receivers_trusted_by(&collector, &old.cert_pem).await,
            both_receivers_trusted_by(&collector, &new.cert_pem).await,
            token_accepted(&collector, &old.cert_pem, TOKEN).await,
            token_accepted(&collector, &old.cert_pem, SECOND_TOKEN).await,
        )
    };
    let unchanged = (
        (true, true),
        (false, false),
        (true, true, true),
        (false, false, false),
    );

    // A new certificate whose key is still the old one's, beside a good new tokens file.
    std::fs::copy(&new.tls.cert_file, &old.tls.cert_file).unwrap();
    tokens_file(out.path(), &[SECOND_TOKEN]);
    let error = format!("{:#}", collector.reload().await.unwrap_err());
    assert!(
        error.contains(&format!(
            "receivers.otlp.tls.key_file {}: cannot be used with {}",
            old.tls.key_file.display(),
            old.tls.cert_file.display()
        )),
        "{error}"
    );
    assert_eq!(in_use().await, unchanged, "nothing was replaced");

    // A good certificate and key beside a tokens file with a malformed line.
    replace_certificate(&old, &new);
    tokens_file(out.path(), &[SECOND_TOKEN, "half a token"]);
    let error = format!("{:#}", collector.reload().await.unwrap_err());
    assert!(
        error.contains(&format!(
            "receivers.otlp.auth.tokens_file {}: line 4: ",
            tokens.tokens_file.display()
        )),
        "{error}"
    );
    assert!(!error.contains("half a token"), "{error}");
    assert_eq!(in_use().await, unchanged, "nothing was replaced");

    // An unreadable certificate.
    std::fs::remove_file(&old.tls.cert_file).unwrap();
    tokens_file(out.path(), &[SECOND_TOKEN]);
    let error = format!("{:#}", collector.reload().await.unwrap_err());
    assert!(
        error.contains(&format!(
            "receivers.otlp.tls.cert_file {}: cannot read",
            old.tls.cert_file.display()
        )),
        "{error}"
    );
    assert_eq!(in_use().await, unchanged, "nothing was replaced");
    stop(collector, out.path()).await;
}

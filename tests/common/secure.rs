//! TLS material made at test time and OTLP clients that use it and bearer tokens: the real
//! OpenTelemetry SDK exporters, and raw gRPC and HTTPS clients for the refusals.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use opentelemetry_http::hyper::HyperClient;
use opentelemetry_http::HttpClient;
use opentelemetry_otlp::tonic_types::metadata::MetadataMap;
use opentelemetry_otlp::tonic_types::transport::{Certificate, ClientTlsConfig};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_sdk::trace::SpanExporter as _;
use opentelemetry_sdk::Resource;
use retry_spend_collector::receivers::{AuthConfig, TlsConfig};
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

use super::otel::ServiceBatch;

const TIMEOUT: Duration = Duration::from_secs(10);

/// A self-signed certificate for `localhost` and 127.0.0.1, written as PEM files.
pub struct SelfSigned {
    /// The certificate, which is also the CA a client must trust.
    pub cert_pem: String,
    pub tls: TlsConfig,
    _dir: tempfile::TempDir,
}

pub fn self_signed() -> SelfSigned {
    let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    let certified = rcgen::generate_simple_self_signed(names).expect("self-signed certificate");
    let dir = tempfile::tempdir().unwrap();
    let cert_file = dir.path().join("cert.pem");
    let key_file = dir.path().join("key.pem");
    let cert_pem = certified.cert.pem();
    std::fs::write(&cert_file, &cert_pem).unwrap();
    std::fs::write(&key_file, certified.signing_key.serialize_pem()).unwrap();
    SelfSigned {
        cert_pem,
        tls: TlsConfig {
            cert_file,
            key_file,
        },
        _dir: dir,
    }
}

/// Writes a tokens file (one a line, with a comment and a blank line as users write them).
pub fn tokens_file(dir: &Path, tokens: &[&str]) -> AuthConfig {
    let path: PathBuf = dir.join("tokens");
    let text = format!("# OTLP ingest tokens\n\n{}\n", tokens.join("\n"));
    std::fs::write(&path, text).unwrap();
    AuthConfig {
        tokens_file: path,
        ..AuthConfig::default()
    }
}

/// How a client connects: trusting `ca` over TLS (plaintext when `None`), sending `token`.
#[derive(Clone, Copy)]
pub struct Client<'a> {
    pub ca: Option<&'a str>,
    pub token: Option<&'a str>,
}

impl Client<'_> {
    fn scheme(&self) -> &'static str {
        if self.ca.is_some() {
            "https"
        } else {
            "http"
        }
    }

    fn authorization(&self) -> Option<String> {
        self.token.map(|t| format!("Bearer {t}"))
    }
}

fn resource(service: &str) -> Resource {
    Resource::builder_empty()
        .with_service_name(service.to_owned())
        .build()
}

/// Exports each batch in one call with the SDK's OTLP/gRPC exporter; the first refusal or
/// connection failure is returned.
pub async fn export_grpc(
    addr: SocketAddr,
    client: Client<'_>,
    batches: Vec<ServiceBatch>,
) -> Result<(), String> {
    for (service, spans) in batches {
        let mut builder = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(format!("{}://{addr}", client.scheme()))
            .with_timeout(TIMEOUT);
        if let Some(ca) = client.ca {
            builder = builder.with_tls_config(
                ClientTlsConfig::new()
                    .ca_certificate(Certificate::from_pem(ca))
                    .domain_name("localhost"),
            );
        }
        if let Some(authorization) = client.authorization() {
            let mut metadata = MetadataMap::new();
            metadata.insert("authorization", authorization.parse().unwrap());
            builder = builder.with_metadata(metadata);
        }
        let mut exporter = builder.build().map_err(|e| e.to_string())?;
        exporter.set_resource(&resource(&service));
        exporter.export(spans).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Completes a TLS handshake with `addr` as a new client trusting only `ca_pem` would: an error
/// when the server's certificate is not one that CA vouches for.
pub async fn handshake(addr: SocketAddr, ca_pem: &str) -> std::io::Result<()> {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(rustls_client(ca_pem)));
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").expect("a DNS name");
    tokio::time::timeout(TIMEOUT, connector.connect(name, tcp))
        .await
        .map_err(std::io::Error::other)?
        .map(drop)
}

/// A client config trusting only `ca_pem`, with the ring provider the collector uses.
fn rustls_client(ca_pem: &str) -> ClientConfig {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// An HTTPS client trusting only `ca_pem`, usable as the SDK exporter's HTTP client.
pub fn https_client(ca_pem: &str) -> impl HttpClient + 'static {
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(rustls_client(ca_pem))
        .https_only()
        .enable_http1()
        .build();
    HyperClient::new(connector, TIMEOUT, None)
}

/// Exports each batch in one call with the SDK's OTLP/HTTP exporter over HTTPS trusting `ca`.
pub async fn export_https(
    addr: SocketAddr,
    ca: &str,
    token: Option<&str>,
    protocol: Protocol,
    batches: Vec<ServiceBatch>,
) -> Result<(), String> {
    for (service, spans) in batches {
        let mut headers = HashMap::new();
        if let Some(token) = token {
            headers.insert("authorization".to_owned(), format!("Bearer {token}"));
        }
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(https_client(ca))
            .with_protocol(protocol)
            .with_endpoint(format!("https://{addr}/v1/traces"))
            .with_headers(headers)
            .build()
            .map_err(|e| e.to_string())?;
        exporter.set_resource(&resource(&service));
        exporter.export(spans).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Posts one protobuf export request over HTTPS; returns the status and the response.
pub async fn post_https(
    addr: SocketAddr,
    ca: &str,
    authorization: Option<&str>,
    request: &ExportTraceServiceRequest,
) -> http::Response<Bytes> {
    use prost::Message;
    let body = Bytes::from(request.encode_to_vec());
    post_https_to(addr, "/v1/traces", ca, authorization, body).await
}

/// Posts `body` (protobuf) to `path` over HTTPS; returns the status and the response.
pub async fn post_https_to(
    addr: SocketAddr,
    path: &str,
    ca: &str,
    authorization: Option<&str>,
    body: Bytes,
) -> http::Response<Bytes> {
    let mut builder = http::Request::post(format!("https://{addr}{path}"))
        .header("content-type", "application/x-protobuf");
    if let Some(value) = authorization {
        builder = builder.header("authorization", value);
    }
    let request = builder.body(body).unwrap();
    https_client(ca)
        .send_bytes(request)
        .await
        .expect("HTTPS request completes")
}

/// A gRPC endpoint at `addr`: over TLS trusting `ca` (for the name `localhost`) when given,
/// else plaintext.
pub fn grpc_endpoint(addr: SocketAddr, ca: Option<&str>) -> tonic::transport::Endpoint {
    let scheme = if ca.is_some() { "https" } else { "http" };
    let endpoint = tonic::transport::Channel::from_shared(format!("{scheme}://{addr}")).unwrap();
    match ca {
        Some(ca) => endpoint
            .tls_config(
                ClientTlsConfig::new()
                    .ca_certificate(Certificate::from_pem(ca))
                    .domain_name("localhost"),
            )
            .unwrap(),
        None => endpoint,
    }
}

/// Sends one export request with a raw tonic client; returns tonic's status on refusal.
pub async fn export_raw_grpc(
    addr: SocketAddr,
    client: Client<'_>,
    authorization: Option<&str>,
    request: ExportTraceServiceRequest,
) -> Result<(), tonic::Status> {
    let channel = grpc_endpoint(addr, client.ca)
        .timeout(TIMEOUT)
        .connect()
        .await
        .expect("gRPC connection");
    let mut request = tonic::Request::new(request);
    if let Some(value) = authorization {
        request
            .metadata_mut()
            .insert("authorization", value.parse().unwrap());
    }
    TraceServiceClient::new(channel)
        .export(request)
        .await
        .map(|_| ())
}

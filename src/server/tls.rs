//! TLS (rustls, ring) for the OTLP receivers.
//!
//! The certificate and key are read and checked at start, so a wrong path, a file that is not
//! PEM or a key that does not belong to the certificate fails start-up naming the file,
//! instead of failing every handshake later. Both receivers handshake on [`TlsListener`] with
//! a certificate resolver that reads the one in use per handshake, so a reload
//! ([`TlsIdentity::read`], then [`TlsIdentity::install`]) reaches new connections of both at
//! once while the connections already open keep the certificate they were made with.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::{self, PemObject};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::config::TlsConfig;

/// A client that connects but never finishes its handshake is dropped after this long.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the certificate or key cannot be used. Never shows key material.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("receivers.otlp.tls.{key} {}: cannot read: {source}", path.display())]
    Read {
        key: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("receivers.otlp.tls.{key} {}: {problem}", path.display())]
    Invalid {
        key: &'static str,
        path: PathBuf,
        problem: String,
    },
}

/// The receivers' TLS: the files it was loaded from and the certificate in use. Clones share
/// that certificate.
#[derive(Clone)]
pub struct TlsIdentity {
    config: TlsConfig,
    current: Arc<CurrentCertificate>,
    http: Arc<ServerConfig>,
    grpc: Arc<ServerConfig>,
}

impl fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsIdentity").finish_non_exhaustive()
    }
}

/// A certificate chain and its key, read and checked but not yet in use.
pub struct Certificate(Arc<CertifiedKey>);

impl fmt::Debug for Certificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certificate").finish_non_exhaustive()
    }
}

/// What every handshake of both receivers presents; replaced whole on reload.
struct CurrentCertificate(RwLock<Arc<CertifiedKey>>);

impl fmt::Debug for CurrentCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CurrentCertificate").finish_non_exhaustive()
    }
}

impl ResolvesServerCert for CurrentCertificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        // A poisoned lock still holds the last certificate set, which was checked.
        Some(Arc::clone(
            &self.0.read().unwrap_or_else(PoisonError::into_inner),
        ))
    }
}

impl TlsIdentity {
    /// Reads and checks the files `config` names; `None` when TLS is off.
    pub fn load(config: &TlsConfig) -> Result<Option<TlsIdentity>, TlsError> {
        if !config.is_enabled() {
            return Ok(None);
        }
        // tonic's clients (and any other rustls user in the process) build their configs with
        // the process-wide provider: make it ring, the one this crate is built with.
        let _ = ring::default_provider().install_default();
        let Certificate(first) = read_certificate(config)?;
        let current = Arc::new(CurrentCertificate(RwLock::new(first)));
        let server_config = |alpn: &[u8]| -> Result<Arc<ServerConfig>, TlsError> {
            let mut server =
                ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
                    .with_safe_default_protocol_versions()
                    .map_err(|e| TlsError::Invalid {
                        key: "cert_file",
                        path: config.cert_file.clone(),
                        problem: e.to_string(),
                    })?
                    .with_no_client_auth()
                    .with_cert_resolver(Arc::clone(&current) as Arc<dyn ResolvesServerCert>);
            server.alpn_protocols = vec![alpn.to_vec()];
            Ok(Arc::new(server))
        };
        Ok(Some(TlsIdentity {
            config: config.clone(),
            http: server_config(b"http/1.1")?,
            grpc: server_config(b"h2")?,
            current,
        }))
    }

    /// Reads and checks the files again, for [`TlsIdentity::install`]; what is in use is
    /// untouched, so a bad file on reload changes nothing.
    pub fn read(&self) -> Result<Certificate, TlsError> {
        read_certificate(&self.config)
    }

    /// Puts `certificate` in use for every handshake from now on, on both receivers.
    pub fn install(&self, certificate: Certificate) {
        *self
            .current
            .0
            .write()
            .unwrap_or_else(PoisonError::into_inner) = certificate.0;
    }

    /// The OTLP/HTTP receiver's listener: yields only connections whose handshake completed.
    pub fn http_listener(&self, tcp: TcpListener) -> TlsListener {
        TlsListener::new(tcp, &self.http)
    }

    /// The gRPC receiver's listener (HTTP/2 negotiated by ALPN, as gRPC clients require).
    pub fn grpc_listener(&self, tcp: TcpListener) -> TlsListener {
        TlsListener::new(tcp, &self.grpc)
    }
}

fn read_certificate(config: &TlsConfig) -> Result<Certificate, TlsError> {
    let cert_path = &config.cert_file;
    let key_path = &config.key_file;
    let cert_pem = read(cert_path, "cert_file")?;
    let key_pem = read(key_path, "key_file")?;
    let invalid = |key: &'static str, path: &Path, problem: String| TlsError::Invalid {
        key,
        path: path.to_path_buf(),
        problem,
    };
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid("cert_file", cert_path, format!("not PEM certificates: {e}")))?;
    if chain.is_empty() {
        return Err(invalid(
            "cert_file",
            cert_path,
            "no PEM certificate found (expected -----BEGIN CERTIFICATE-----)".to_owned(),
        ));
    }
    // The decoder's own messages can quote the file, so a key problem is described, not
    // echoed.
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        let problem = match e {
            pem::Error::NoItemsFound => "no PEM private key found",
            _ => "not a readable PEM private key",
        };
        invalid(
            "key_file",
            key_path,
            format!("{problem} (expected PKCS#8, PKCS#1 or SEC1)"),
        )
    })?;
    let certified = CertifiedKey::from_der(chain, key, &ring::default_provider()).map_err(|e| {
        invalid(
            "key_file",
            key_path,
            format!("cannot be used with {}: {e}", cert_path.display()),
        )
    })?;
    Ok(Certificate(Arc::new(certified)))
}

fn read(path: &Path, key: &'static str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        key,
        path: path.to_path_buf(),
        source,
    })
}

/// Accepts TCP connections and handshakes each on a task of its own, so one slow or silent
/// client never holds up the others; axum serves the streams it yields, and tonic the stream
/// [`TlsListener::into_incoming`] makes of it.
pub struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    handshakes: JoinSet<Option<(TlsStream<TcpStream>, SocketAddr)>>,
}

impl TlsListener {
    fn new(tcp: TcpListener, config: &Arc<ServerConfig>) -> TlsListener {
        TlsListener {
            tcp,
            acceptor: TlsAcceptor::from(Arc::clone(config)),
            handshakes: JoinSet::new(),
        }
    }

    /// The handshaken connections as the stream tonic serves; it never ends nor fails (accept
    /// errors are handled as axum's listener does).
    pub fn into_incoming(
        self,
    ) -> impl futures_util::Stream<Item = io::Result<TlsStream<TcpStream>>> + Send + 'static {
        futures_util::stream::unfold(self, |mut listener| async move {
            let (stream, _) = axum::serve::Listener::accept(&mut listener).await;
            Some((Ok(stream), listener))
        })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    // Cancel-safe, as axum needs when shutdown interrupts it: both branches are.
    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            tokio::select! {
                accepted = self.tcp.accept() => match accepted {
                    Ok((tcp, peer)) => {
                        // SDKs export one request at a time; Nagle would stall each answer.
                        let _ = tcp.set_nodelay(true);
                        let acceptor = self.acceptor.clone();
                        self.handshakes.spawn(handshake(acceptor, tcp, peer));
                    }
                    Err(e) => accept_failed(e).await,
                },
                Some(done) = self.handshakes.join_next(), if !self.handshakes.is_empty() => {
                    if let Ok(Some(connection)) = done {
                        return connection;
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

async fn handshake(
    acceptor: TlsAcceptor,
    tcp: TcpStream,
    peer: SocketAddr,
) -> Option<(TlsStream<TcpStream>, SocketAddr)> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(stream)) => Some((stream, peer)),
        Ok(Err(error)) => {
            tracing::debug!(%peer, %error, "OTLP TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!(%peer, "OTLP TLS handshake timed out");
            None
        }
    }
}

/// What axum does for a plain listener: per-connection errors are the client's and are
/// skipped; anything else (e.g. out of file descriptors) is logged and retried after a pause.
async fn accept_failed(error: io::Error) {
    if matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(%error, "OTLP receiver accept failed");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path, cert: &str, key: &str) -> TlsConfig {
        let cert_file = dir.join("cert.pem");
        let key_file = dir.join("key.pem");
        std::fs::write(&cert_file, cert).unwrap();
        std::fs::write(&key_file, key).unwrap();
        TlsConfig {
            cert_file,
            key_file,
        }
    }

    fn self_signed() -> (String, String) {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        (cert.cert.pem(), cert.signing_key.serialize_pem())
    }

    fn error(config: &TlsConfig) -> String {
        TlsIdentity::load(config).unwrap_err().to_string()
    }

    #[test]
    fn off_when_both_files_are_empty() {
        assert!(TlsIdentity::load(&TlsConfig::default()).unwrap().is_none());
    }

    #[test]
    fn a_matching_certificate_and_key_load() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = self_signed();
        let identity = TlsIdentity::load(&config(dir.path(), &cert, &key)).unwrap();
        assert!(identity.is_some());
    }

    #[test]
    fn a_missing_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = self_signed();
        let mut config = config(dir.path(), &cert, &key);
        config.key_file = dir.path().join("absent.pem");
        let msg = error(&config);
        assert!(
            msg.starts_with(&format!(
                "receivers.otlp.tls.key_file {}: cannot read: ",
                config.key_file.display()
            )),
            "{msg}"
        );
    }

    #[test]
    fn a_certificate_file_without_certificates_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let (_, key) = self_signed();
        let config = config(dir.path(), "not a certificate\n", &key);
        let msg = error(&config);
        assert!(
            msg.starts_with(&format!(
                "receivers.otlp.tls.cert_file {}: no PEM certificate found",
                config.cert_file.display()
            )),
            "{msg}"
        );
    }

    #[test]
    fn a_key_file_without_a_key_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, _) = self_signed();
        let config = config(dir.path(), &cert, &cert);
        let msg = error(&config);
        assert!(
            msg.starts_with(&format!(
                "receivers.otlp.tls.key_file {}: no PEM private key found",
                config.key_file.display()
            )),
            "{msg}"
        );
    }

    #[test]
    fn a_key_of_another_certificate_is_refused_without_showing_it() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, _) = self_signed();
        let (_, other_key) = self_signed();
        let config = config(dir.path(), &cert, &other_key);
        let msg = error(&config);
        assert!(
            msg.starts_with(&format!(
                "receivers.otlp.tls.key_file {}: cannot be used with ",
                config.key_file.display()
            )),
            "{msg}"
        );
        assert!(!msg.contains("PRIVATE KEY"), "{msg}");
    }
}

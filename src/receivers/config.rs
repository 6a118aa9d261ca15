//! `[receivers.otlp]`: the OTLP gRPC and OTLP/HTTP listeners, their TLS and bearer tokens.

use std::net::SocketAddr;

use serde::Deserialize;

use crate::config_kernel::{ConfigProblem, Problems, ABOVE_ZERO, OTLP_RECEIVE_LIMIT_BYTES};
pub use crate::server::{AuthConfig, TlsConfig};

/// `[receivers]`: where spans come in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReceiversConfig {
    pub otlp: OtlpReceiverConfig,
}

impl ReceiversConfig {
    pub fn validate(&self) -> Result<(), Vec<ConfigProblem>> {
        self.otlp.validate()
    }
}

/// `[receivers.otlp]`: the OTLP gRPC and OTLP/HTTP listeners.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OtlpReceiverConfig {
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    /// Largest accepted request body, after decompression.
    pub max_request_bytes: u64,
    /// Memory bound on accepted requests not yet taken by the pipeline; above it, exports are
    /// refused with the retryable answers OTLP clients back off on. Unset: half of
    /// `service.memory_limit` ([`crate::config::Config::in_flight_limit`]).
    pub max_in_flight_bytes: Option<u64>,
    pub tls: TlsConfig,
    pub auth: AuthConfig,
}

impl Default for OtlpReceiverConfig {
    fn default() -> Self {
        OtlpReceiverConfig {
            grpc_addr: SocketAddr::from(([127, 0, 0, 1], 4317)),
            http_addr: SocketAddr::from(([127, 0, 0, 1], 4318)),
            max_request_bytes: OTLP_RECEIVE_LIMIT_BYTES,
            max_in_flight_bytes: None,
            tls: TlsConfig::default(),
            auth: AuthConfig::default(),
        }
    }
}

impl OtlpReceiverConfig {
    pub fn validate(&self) -> Result<(), Vec<ConfigProblem>> {
        let mut problems = Problems::default();
        problems.check(
            self.max_request_bytes > 0,
            "receivers.otlp.max_request_bytes",
            ABOVE_ZERO,
        );
        problems.add(self.tls.validate());
        problems.add(self.auth.validate());
        problems.check(
            !addresses_collide(self.http_addr, self.grpc_addr),
            "receivers.otlp.http_addr",
            "must differ from receivers.otlp.grpc_addr",
        );
        problems.finish()
    }

    /// The largest request body, as the listeners and the decision service count it.
    pub fn request_limit(&self) -> usize {
        usize::try_from(self.max_request_bytes).unwrap_or(usize::MAX)
    }
}

/// Whether two listeners would take the same address. Port 0 asks the OS for a free port, so
/// two zero ports never collide.
pub fn addresses_collide(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() != 0 && a == b
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::testing::{invalid, parse, parse_err};
    use crate::config::Config;

    #[test]
    fn max_request_bytes_must_be_above_zero() {
        let msg = invalid(|c| c.receivers.otlp.max_request_bytes = 0);
        assert!(msg.contains("receivers.otlp.max_request_bytes: must be above zero"));
    }

    #[test]
    fn tls_and_auth_are_off_by_default() {
        let otlp = Config::default().receivers.otlp;
        assert!(!otlp.tls.is_enabled());
        assert!(!otlp.auth.is_enabled());
    }

    #[test]
    fn tls_and_auth_keys_parse() {
        let c = parse(
            r#"
            [receivers.otlp.tls]
            cert_file = "/etc/rsc/cert.pem"
            key_file = "/etc/rsc/key.pem"
            [receivers.otlp.auth]
            tokens_file = "/etc/rsc/tokens"
            tokens_env = "RETRY_SPEND_TOKENS"
            "#,
        )
        .unwrap();
        let otlp = &c.receivers.otlp;
        assert!(otlp.tls.is_enabled());
        assert_eq!(otlp.tls.cert_file, Path::new("/etc/rsc/cert.pem"));
        assert_eq!(otlp.tls.key_file, Path::new("/etc/rsc/key.pem"));
        assert!(otlp.auth.is_enabled());
        assert_eq!(otlp.auth.tokens_file, Path::new("/etc/rsc/tokens"));
        assert_eq!(otlp.auth.tokens_env, "RETRY_SPEND_TOKENS");
    }

    #[test]
    fn either_auth_source_alone_turns_auth_on() {
        let c = parse("[receivers.otlp.auth]\ntokens_env = \"TOKENS\"\n").unwrap();
        assert!(c.receivers.otlp.auth.is_enabled());
        let c = parse("[receivers.otlp.auth]\ntokens_file = \"tokens\"\n").unwrap();
        assert!(c.receivers.otlp.auth.is_enabled());
    }

    #[test]
    fn tls_cert_without_key_names_the_missing_key() {
        let msg = parse_err("[receivers.otlp.tls]\ncert_file = \"cert.pem\"\n");
        assert_eq!(
            msg,
            "test.toml: receivers.otlp.tls.key_file: must be set when \
             receivers.otlp.tls.cert_file is (leave both empty to turn TLS off)"
        );
    }

    #[test]
    fn tls_key_without_cert_names_the_missing_key() {
        let msg = parse_err("[receivers.otlp.tls]\nkey_file = \"key.pem\"\n");
        assert!(
            msg.starts_with("test.toml: receivers.otlp.tls.cert_file: must be set"),
            "{msg}"
        );
    }

    #[test]
    fn tokens_env_must_name_a_variable() {
        let msg = parse_err("[receivers.otlp.auth]\ntokens_env = \"TOKENS=abc\"\n");
        assert!(
            msg.starts_with("test.toml: receivers.otlp.auth.tokens_env: must be the name"),
            "{msg}"
        );
        assert!(
            !msg.contains("abc"),
            "a token-like value is never echoed: {msg}"
        );
    }

    #[test]
    fn unknown_tls_key_is_an_error() {
        let msg = parse_err("[receivers.otlp.tls]\ncert = \"cert.pem\"\n");
        assert!(
            msg.contains("receivers.otlp.tls.cert: unknown field `cert`"),
            "{msg}"
        );
    }
}

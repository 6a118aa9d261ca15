//! `[receivers.otlp.tls]` and `[receivers.otlp.auth]`: TLS and bearer tokens, served by the OTLP
//! receivers and the decision service alike.

use std::path::PathBuf;

use serde::Deserialize;

use crate::config_kernel::{ConfigProblem, Problems};

/// `[receivers.otlp.tls]`: TLS on both OTLP listeners. Off while both files are empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain, the server's own certificate first.
    pub cert_file: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of the first certificate.
    pub key_file: PathBuf,
}

impl TlsConfig {
    pub fn is_enabled(&self) -> bool {
        !self.cert_file.as_os_str().is_empty() || !self.key_file.as_os_str().is_empty()
    }

    pub fn validate(&self) -> Result<(), Vec<ConfigProblem>> {
        let mut problems = Problems::default();
        problems.check(
            self.cert_file.as_os_str().is_empty() || !self.key_file.as_os_str().is_empty(),
            "receivers.otlp.tls.key_file",
            "must be set when receivers.otlp.tls.cert_file is (leave both empty to turn TLS off)",
        );
        problems.check(
            self.key_file.as_os_str().is_empty() || !self.cert_file.as_os_str().is_empty(),
            "receivers.otlp.tls.cert_file",
            "must be set when receivers.otlp.tls.key_file is (leave both empty to turn TLS off)",
        );
        problems.finish()
    }
}

/// `[receivers.otlp.auth]`: bearer tokens both OTLP listeners require. Off while both keys are
/// empty. Only where the tokens are is configured here, never a token itself, so this struct is
/// safe to print.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// File of accepted tokens, one a line; blank lines and `#` comments are ignored.
    pub tokens_file: PathBuf,
    /// Name of an environment variable holding accepted tokens, comma-separated.
    pub tokens_env: String,
}

impl AuthConfig {
    pub fn is_enabled(&self) -> bool {
        !self.tokens_file.as_os_str().is_empty() || !self.tokens_env.is_empty()
    }

    pub fn validate(&self) -> Result<(), Vec<ConfigProblem>> {
        let mut problems = Problems::default();
        problems.check(
            !self.tokens_env.contains(['=', '\0']),
            "receivers.otlp.auth.tokens_env",
            "must be the name of an environment variable (no '=' or NUL), not a token",
        );
        problems.finish()
    }
}

//! Bearer-token authentication of OTLP exports (`authorization: Bearer <token>`).
//!
//! Accepted tokens are kept only as SHA-256 digests. A presented token is hashed and compared
//! with every accepted digest in constant time, so neither how long the comparison takes nor
//! the token's length tells a caller how close it came; and with no token held in memory, none
//! can end up in a log line or a `Debug` print. On reload the sources are read again and the
//! new tokens replace the old ones whole, or not at all.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{PoisonError, RwLock};

use http::HeaderValue;
use sha2::{Digest, Sha256};
use subtle::{Choice, ConstantTimeEq};

use super::config::AuthConfig;

/// What a refused client is told; deliberately the same for a missing and a wrong token.
pub const REFUSAL_MESSAGE: &str = "missing or invalid bearer token";
/// The metrics outcome label of a refused export.
pub const OUTCOME: &str = "unauthenticated";

const BAD_TOKEN: &str = "a token must be printable ASCII without spaces";

/// Why the accepted tokens could not be loaded. No message ever contains a token.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("receivers.otlp.auth.tokens_file {}: cannot read: {source}", path.display())]
    ReadFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("receivers.otlp.auth.tokens_file {}: line {line}: {BAD_TOKEN}", path.display())]
    BadFileToken { path: PathBuf, line: usize },
    #[error("receivers.otlp.auth.tokens_env {name}: {problem}")]
    Env { name: String, problem: String },
    #[error(
        "receivers.otlp.auth: {sources} holds no token; with authentication on, every export \
         would be refused"
    )]
    NoTokens { sources: String },
}

/// The accepted tokens, as digests, and where they were read from (read again on reload).
pub struct Authenticator {
    config: AuthConfig,
    digests: RwLock<Tokens>,
}

/// Accepted tokens, read and checked but not yet in use (see [`Authenticator::install`]).
pub struct Tokens(Vec<[u8; 32]>);

impl Tokens {
    /// How many tokens are accepted.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never true for tokens that were read: sources without a token are an error.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokens")
            .field("tokens", &self.len())
            .finish()
    }
}

impl fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authenticator")
            .field("tokens", &self.tokens())
            .finish()
    }
}

impl Authenticator {
    /// Reads the tokens `config` points at; `None` when authentication is off. Fails when a
    /// source cannot be read, holds a malformed token, or when there is no token at all.
    pub fn load(config: &AuthConfig) -> Result<Option<Authenticator>, AuthError> {
        Authenticator::load_with(config, |name| std::env::var_os(name))
    }

    fn load_with(
        config: &AuthConfig,
        env: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Option<Authenticator>, AuthError> {
        if !config.is_enabled() {
            return Ok(None);
        }
        Ok(Some(Authenticator {
            digests: RwLock::new(read_tokens(config, env)?),
            config: config.clone(),
        }))
    }

    /// Reads the sources again, for [`Authenticator::install`]; the tokens in use are
    /// untouched, so a bad file on reload changes nothing.
    pub fn read(&self) -> Result<Tokens, AuthError> {
        read_tokens(&self.config, |name| std::env::var_os(name))
    }

    /// Accepts `tokens`, and only them, from the next request on.
    pub fn install(&self, tokens: Tokens) {
        *self.digests.write().unwrap_or_else(PoisonError::into_inner) = tokens;
    }

    #[cfg(test)]
    fn from_tokens(tokens: &[String]) -> Authenticator {
        Authenticator {
            config: AuthConfig::default(),
            digests: RwLock::new(Tokens::digests_of(tokens)),
        }
    }

    /// How many tokens are accepted (for the start-up log line).
    pub fn tokens(&self) -> usize {
        self.current().len()
    }

    /// Whether an `authorization` header carries an accepted bearer token.
    pub fn accepts(&self, authorization: Option<&HeaderValue>) -> bool {
        authorization
            .and_then(|value| bearer_token(value.as_bytes()))
            .is_some_and(|token| self.accepts_token(token))
    }

    fn accepts_token(&self, token: &[u8]) -> bool {
        let presented = digest(token);
        // Every digest is compared, whichever matches, so timing does not say which one did.
        let matched = self
            .current()
            .0
            .iter()
            .fold(Choice::from(0), |any, accepted| {
                any | accepted.ct_eq(&presented)
            });
        matched.into()
    }

    fn current(&self) -> std::sync::RwLockReadGuard<'_, Tokens> {
        // A poisoned lock still holds the last tokens set, which were checked.
        self.digests.read().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Tokens {
    fn digests_of(tokens: &[String]) -> Tokens {
        Tokens(tokens.iter().map(|t| digest(t.as_bytes())).collect())
    }
}

/// Every token of `config`'s sources; an error when a source cannot be read, holds a
/// malformed token, or when there is no token at all.
fn read_tokens(
    config: &AuthConfig,
    env: impl Fn(&str) -> Option<OsString>,
) -> Result<Tokens, AuthError> {
    let mut tokens = Vec::new();
    let mut sources = Vec::new();
    if !config.tokens_file.as_os_str().is_empty() {
        tokens.extend(tokens_from_file(&config.tokens_file)?);
        sources.push(format!("tokens_file {}", config.tokens_file.display()));
    }
    if !config.tokens_env.is_empty() {
        tokens.extend(tokens_from_env(&config.tokens_env, &env)?);
        sources.push(format!("tokens_env {}", config.tokens_env));
    }
    if tokens.is_empty() {
        return Err(AuthError::NoTokens {
            sources: sources.join(" and "),
        });
    }
    Ok(Tokens::digests_of(&tokens))
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

/// The token of a `Bearer <token>` credential; the scheme is case-insensitive (RFC 9110 §11.1).
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let space = value.iter().position(|&b| b == b' ')?;
    let (scheme, rest) = value.split_at(space);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

fn is_valid_token(token: &str) -> bool {
    !token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic())
}

fn tokens_from_file(path: &Path) -> Result<Vec<String>, AuthError> {
    let text = std::fs::read_to_string(path).map_err(|source| AuthError::ReadFile {
        path: path.to_path_buf(),
        source,
    })?;
    let mut tokens = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if !is_valid_token(line) {
            return Err(AuthError::BadFileToken {
                path: path.to_path_buf(),
                line: i + 1,
            });
        }
        tokens.push(line.to_owned());
    }
    Ok(tokens)
}

fn tokens_from_env(
    name: &str,
    env: &impl Fn(&str) -> Option<OsString>,
) -> Result<Vec<String>, AuthError> {
    let problem = |problem: String| AuthError::Env {
        name: name.to_owned(),
        problem,
    };
    let value = env(name).ok_or_else(|| problem("is not set".to_owned()))?;
    let value = value
        .into_string()
        .map_err(|_| problem(BAD_TOKEN.to_owned()))?;
    let mut tokens = Vec::new();
    for (i, token) in value.split(',').enumerate() {
        let token = token.trim();
        if token.is_empty() {
            continue;
        }
        if !is_valid_token(token) {
            return Err(problem(format!(
                "token {} of the comma-separated list: {BAD_TOKEN}",
                i + 1
            )));
        }
        tokens.push(token.to_owned());
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authenticator(tokens: &[&str]) -> Authenticator {
        let tokens: Vec<String> = tokens.iter().map(|t| (*t).to_owned()).collect();
        Authenticator::from_tokens(&tokens)
    }

    fn header(value: &str) -> HeaderValue {
        HeaderValue::from_str(value).unwrap()
    }

    fn no_env(_: &str) -> Option<OsString> {
        None
    }

    fn file_config(text: &str) -> (tempfile::TempDir, AuthConfig) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, text).unwrap();
        let config = AuthConfig {
            tokens_file: path,
            ..AuthConfig::default()
        };
        (dir, config)
    }

    #[test]
    fn an_accepted_bearer_token_passes() {
        let auth = authenticator(&["alpha", "beta"]);
        assert!(auth.accepts(Some(&header("Bearer alpha"))));
        assert!(auth.accepts(Some(&header("Bearer beta"))));
    }

    #[test]
    fn the_scheme_is_case_insensitive_and_spaces_around_the_token_do_not_matter() {
        let auth = authenticator(&["alpha"]);
        assert!(auth.accepts(Some(&header("bearer alpha"))));
        assert!(auth.accepts(Some(&header("BEARER   alpha "))));
    }

    #[test]
    fn missing_wrong_or_malformed_credentials_are_refused() {
        let auth = authenticator(&["alpha"]);
        assert!(!auth.accepts(None));
        for value in [
            "Bearer alph",
            "Bearer alphaa",
            "Bearer ALPHA",
            "Bearer ",
            "Bearer",
            "alpha",
            "Basic alpha",
            "Bearer alpha beta",
        ] {
            assert!(!auth.accepts(Some(&header(value))), "{value:?}");
        }
    }

    #[test]
    fn off_when_neither_source_is_set() {
        assert!(Authenticator::load_with(&AuthConfig::default(), no_env)
            .unwrap()
            .is_none());
    }

    #[test]
    fn tokens_file_skips_blank_lines_and_comments() {
        let (_dir, config) = file_config("# ingest tokens\n\n  alpha  \r\n# old: gamma\nbeta\n");
        let auth = Authenticator::load_with(&config, no_env).unwrap().unwrap();
        assert_eq!(auth.tokens(), 2);
        assert!(auth.accepts(Some(&header("Bearer alpha"))));
        assert!(auth.accepts(Some(&header("Bearer beta"))));
        assert!(!auth.accepts(Some(&header("Bearer gamma"))));
    }

    #[test]
    fn tokens_env_is_comma_separated() {
        let config = AuthConfig {
            tokens_env: "TOKENS".to_owned(),
            ..AuthConfig::default()
        };
        let env = |name: &str| (name == "TOKENS").then(|| OsString::from("alpha, beta,,"));
        let auth = Authenticator::load_with(&config, env).unwrap().unwrap();
        assert_eq!(auth.tokens(), 2);
        assert!(auth.accepts(Some(&header("Bearer beta"))));
    }

    #[test]
    fn both_sources_together_accept_the_union() {
        let (_dir, mut config) = file_config("alpha\n");
        config.tokens_env = "TOKENS".to_owned();
        let env = |_: &str| Some(OsString::from("beta"));
        let auth = Authenticator::load_with(&config, env).unwrap().unwrap();
        assert!(auth.accepts(Some(&header("Bearer alpha"))));
        assert!(auth.accepts(Some(&header("Bearer beta"))));
    }

    #[test]
    fn unreadable_tokens_file_names_the_key_and_file() {
        let config = AuthConfig {
            tokens_file: PathBuf::from("/nonexistent/tokens"),
            ..AuthConfig::default()
        };
        let msg = Authenticator::load_with(&config, no_env)
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with("receivers.otlp.auth.tokens_file /nonexistent/tokens: cannot read: "),
            "{msg}"
        );
    }

    #[test]
    fn a_malformed_token_is_reported_by_line_without_the_token() {
        let (dir, config) = file_config("alpha\nsecret with spaces\n");
        let msg = Authenticator::load_with(&config, no_env)
            .unwrap_err()
            .to_string();
        let path = dir.path().join("tokens");
        assert_eq!(
            msg,
            format!(
                "receivers.otlp.auth.tokens_file {}: line 2: {BAD_TOKEN}",
                path.display()
            )
        );
        assert!(!msg.contains("secret"), "{msg}");
    }

    #[test]
    fn a_malformed_env_token_is_reported_by_position_without_the_token() {
        let config = AuthConfig {
            tokens_env: "TOKENS".to_owned(),
            ..AuthConfig::default()
        };
        let env = |_: &str| Some(OsString::from("alpha,sec\u{e9}ret"));
        let msg = Authenticator::load_with(&config, env)
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            format!(
                "receivers.otlp.auth.tokens_env TOKENS: token 2 of the comma-separated list: \
                 {BAD_TOKEN}"
            )
        );
    }

    #[test]
    fn an_unset_variable_is_an_error() {
        let config = AuthConfig {
            tokens_env: "TOKENS".to_owned(),
            ..AuthConfig::default()
        };
        let msg = Authenticator::load_with(&config, no_env)
            .unwrap_err()
            .to_string();
        assert_eq!(msg, "receivers.otlp.auth.tokens_env TOKENS: is not set");
    }

    #[test]
    fn sources_without_any_token_are_an_error_not_an_open_door() {
        let (_dir, config) = file_config("# nothing yet\n\n");
        let msg = Authenticator::load_with(&config, no_env)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("holds no token"), "{msg}");
    }

    #[test]
    fn a_reload_replaces_the_tokens_and_a_bad_file_keeps_them() {
        let (dir, config) = file_config("alpha\n");
        let auth = Authenticator::load_with(&config, no_env).unwrap().unwrap();
        std::fs::write(dir.path().join("tokens"), "beta\nbad token\n").unwrap();
        assert!(auth.read().is_err());
        assert!(auth.accepts(Some(&header("Bearer alpha"))));
        std::fs::write(dir.path().join("tokens"), "beta\n").unwrap();
        let tokens = auth.read().unwrap();
        // Read is not yet in use.
        assert!(auth.accepts(Some(&header("Bearer alpha"))));
        auth.install(tokens);
        assert!(!auth.accepts(Some(&header("Bearer alpha"))));
        assert!(auth.accepts(Some(&header("Bearer beta"))));
    }

    #[test]
    fn debug_shows_only_the_token_count() {
        let auth = authenticator(&["alpha", "beta"]);
        assert_eq!(format!("{auth:?}"), "Authenticator { tokens: 2 }");
    }
}

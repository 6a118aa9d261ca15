//! Where the `attempts` table goes: a local directory, or an object store URL
//! (`s3://bucket/prefix`, `gs://bucket/prefix`, `az://container/prefix`).
//!
//! Parsed once, at start-up, so that a mistyped scheme is refused instead of quietly becoming a
//! local folder named `s3:` (SPEC §6).

use std::fmt;
use std::path::{Path, PathBuf};

/// A parsed `--output` / `exporters.parquet.output_dir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// A directory on local disk (a plain path or a `file://` URL).
    Local(PathBuf),
    /// An object store: files are staged locally and uploaded whole.
    Remote(RemoteOutput),
}

/// Which object store a remote output names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    S3,
    Gcs,
    Azure,
}

/// An object store location: the URL as given, and the key prefix under which the
/// `attempts/` table lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteOutput {
    pub kind: StoreKind,
    /// The URL without its path: `s3://bucket`. Builds the store client.
    pub root: String,
    /// The key prefix, `/`-separated, without leading or trailing `/`; empty for the bucket root.
    pub prefix: object_store::path::Path,
}

impl RemoteOutput {
    /// The key of a table file from its path relative to the output root
    /// (`attempts/date=…/part-….parquet`).
    pub fn key(&self, relative: &str) -> object_store::path::Path {
        relative
            .split('/')
            .filter(|part| !part.is_empty())
            .fold(self.prefix.clone(), |key, part| key.join(part))
    }

    /// The URL of an object, for logs and summaries.
    pub fn url_of(&self, key: &object_store::path::Path) -> String {
        format!("{}/{key}", self.root)
    }
}

impl fmt::Display for RemoteOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.prefix.as_ref().is_empty() {
            f.write_str(&self.root)
        } else {
            write!(f, "{}/{}", self.root, self.prefix)
        }
    }
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Output::Local(dir) => write!(f, "{}", dir.display()),
            Output::Remote(remote) => remote.fmt(f),
        }
    }
}

/// Why an output could not be used. Each message says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutputError {
    #[error("{text:?}: unknown output scheme \"{scheme}:\"; write a directory path, file:///absolute/dir, s3://bucket/prefix, gs://bucket/prefix or az://container/prefix (for a local directory whose name has a colon, write ./{text})")]
    UnknownScheme { text: String, scheme: String },
    #[error("{text:?}: an object store output is written {scheme}://bucket/prefix, with // and a bucket name")]
    NoBucket { text: String, scheme: String },
    #[error("{text:?}: {reason}")]
    Invalid { text: String, reason: String },
}

impl Output {
    /// Reads an output as the user wrote it. A leading `word:` is a URL scheme, so `s3:bucket`
    /// or `ftp://host` is refused rather than taken for a local path.
    pub fn parse(output: &Path) -> Result<Output, OutputError> {
        // A name that is not UTF-8 cannot be a URL.
        let Some(text) = output.to_str() else {
            return Ok(Output::Local(output.to_path_buf()));
        };
        let Some(scheme) = scheme_of(text) else {
            return Ok(Output::Local(output.to_path_buf()));
        };
        let scheme = scheme.to_ascii_lowercase();
        let kind = match scheme.as_str() {
            "file" => return parse_file_url(text),
            "s3" => StoreKind::S3,
            "gs" => StoreKind::Gcs,
            "az" => StoreKind::Azure,
            _ => {
                return Err(OutputError::UnknownScheme {
                    text: text.to_owned(),
                    scheme,
                })
            }
        };
        let no_bucket = || OutputError::NoBucket {
            text: text.to_owned(),
            scheme: scheme.clone(),
        };
        if !text[scheme.len() + 1..].starts_with("//") {
            return Err(no_bucket());
        }
        let invalid = |reason: String| OutputError::Invalid {
            text: text.to_owned(),
            reason,
        };
        let url = url::Url::parse(text).map_err(|e| invalid(format!("not a URL: {e}")))?;
        let bucket = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(no_bucket)?;
        if url.query().is_some() || url.fragment().is_some() {
            return Err(invalid(
                "an output URL takes no ?query or #fragment; options go in [exporters.parquet.object_store] or the environment".into(),
            ));
        }
        let path = url.path().trim_matches('/');
        let prefix = object_store::path::Path::from_url_path(path)
            .map_err(|e| invalid(format!("not a valid key prefix: {e}")))?;
        // Azure's `container@account.host` form keeps its user part in the root.
        let authority = match url.username() {
            "" => bucket.to_owned(),
            user => format!("{user}@{bucket}"),
        };
        Ok(Output::Remote(RemoteOutput {
            kind,
            root: format!("{scheme}://{authority}"),
            prefix,
        }))
    }

    pub fn is_remote(&self) -> bool {
        matches!(self, Output::Remote(_))
    }
}

/// `scheme` of `scheme:…` (RFC 3986: a letter, then letters, digits, `+`, `-`, `.`).
fn scheme_of(text: &str) -> Option<&str> {
    let (scheme, _) = text.split_once(':')?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some(scheme)
}

fn parse_file_url(text: &str) -> Result<Output, OutputError> {
    let invalid = || OutputError::Invalid {
        text: text.to_owned(),
        reason: "a file URL names an absolute local directory: file:///var/lib/retry-spend".into(),
    };
    if !text["file:".len()..].starts_with("//") {
        return Err(invalid());
    }
    let url = url::Url::parse(text).map_err(|_| invalid())?;
    let path = url.to_file_path().map_err(|_| invalid())?;
    Ok(Output::Local(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Output, OutputError> {
        Output::parse(Path::new(text))
    }

    fn remote(text: &str) -> RemoteOutput {
        match parse(text) {
            Ok(Output::Remote(remote)) => remote,
            other => panic!("{text}: expected a remote output, got {other:?}"),
        }
    }

    #[test]
    fn plain_paths_are_local_directories() {
        for text in [
            "data",
            "/var/lib/retry-spend",
            "./s3:bucket",
            "../out",
            "a/b:c",
        ] {
            assert_eq!(
                parse(text),
                Ok(Output::Local(PathBuf::from(text))),
                "{text}"
            );
        }
    }

    #[test]
    fn file_urls_are_local_directories() {
        assert_eq!(
            parse("file:///var/lib/retry-spend"),
            Ok(Output::Local(PathBuf::from("/var/lib/retry-spend")))
        );
        assert!(matches!(
            parse("file:relative"),
            Err(OutputError::Invalid { .. })
        ));
    }

    #[test]
    fn object_store_urls_name_the_store_bucket_and_prefix() {
        let s3 = remote("s3://finance-lake/llm/retries/");
        assert_eq!(s3.kind, StoreKind::S3);
        assert_eq!(s3.root, "s3://finance-lake");
        assert_eq!(s3.prefix.as_ref(), "llm/retries");
        assert_eq!(
            s3.key("attempts/date=2026-08-25/part-x.parquet").as_ref(),
            "llm/retries/attempts/date=2026-08-25/part-x.parquet"
        );
        assert_eq!(s3.to_string(), "s3://finance-lake/llm/retries");

        let root = remote("S3://bucket");
        assert_eq!(root.prefix.as_ref(), "");
        assert_eq!(
            root.key("attempts/x.parquet").as_ref(),
            "attempts/x.parquet"
        );
        assert_eq!(remote("gs://b/p").kind, StoreKind::Gcs);
        assert_eq!(remote("az://container/p").kind, StoreKind::Azure);
    }

    #[test]
    fn unknown_schemes_are_refused_never_taken_for_a_path() {
        for text in ["ftp://x/y", "http://host/dir", "s4://bucket", "hdfs:/data"] {
            let Err(OutputError::UnknownScheme { scheme, .. }) = parse(text) else {
                panic!("{text} was accepted");
            };
            assert!(text.to_ascii_lowercase().starts_with(&scheme), "{text}");
        }
        let message = parse("ftp://x").unwrap_err().to_string();
        assert!(
            message.contains("unknown output scheme \"ftp:\""),
            "{message}"
        );
        assert!(message.contains("s3://bucket/prefix"), "{message}");
    }

    #[test]
    fn a_store_scheme_without_slashes_or_bucket_is_refused() {
        for text in [
            "s3:bucket/prefix",
            "s3:",
            "gs:/bucket",
            "s3:///prefix",
            "az://",
        ] {
            assert!(
                matches!(parse(text), Err(OutputError::NoBucket { .. })),
                "{text}: {:?}",
                parse(text)
            );
        }
    }

    #[test]
    fn a_query_or_fragment_is_refused() {
        assert!(matches!(
            parse("s3://bucket/prefix?region=eu-west-1"),
            Err(OutputError::Invalid { .. })
        ));
    }
}

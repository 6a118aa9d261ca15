//! The object store client of a remote output. Credentials, region and endpoint come from each
//! cloud's standard environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`), an AWS profile with static keys
//! (`AWS_PROFILE`, `~/.aws/credentials`), and `endpoint` / `allow_http` for S3-compatible stores.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::{BackoffConfig, ClientConfigKey, ObjectStore, RetryConfig};

use crate::sinks::parquet::config::ObjectStoreConfig;
use crate::sinks::parquet::output::{RemoteOutput, StoreKind};

/// How long one request may take: a 16 MiB part on a slow link, not a stalled connection.
const REQUEST_TIMEOUT: &str = "120s";
const CONNECT_TIMEOUT: &str = "5s";

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{output}: cannot set up the object store client: {source}")]
    Build {
        output: String,
        source: object_store::Error,
    },
    #[error("{output}: unknown object store setting {key:?}")]
    Setting { output: String, key: String },
    #[error("{output}: {problem}")]
    Profile { output: String, problem: String },
}

/// A client for `remote`. Nothing is sent yet: see [`super::Uploader::probe`].
pub fn build(
    remote: &RemoteOutput,
    config: &ObjectStoreConfig,
) -> Result<Arc<dyn ObjectStore>, StoreError> {
    let output = remote.to_string();
    let build_error = |source| StoreError::Build {
        output: output.clone(),
        source,
    };
    let setting = |key: &str| StoreError::Setting {
        output: output.clone(),
        key: key.to_owned(),
    };
    // The uploader retries for as long as it takes; the client only rides out short blips, so
    // that a store that is down shows promptly in /healthz.
    let retry = RetryConfig {
        backoff: BackoffConfig::default(),
        max_retries: 2,
        retry_timeout: Duration::from_secs(30),
    };
    let client = [
        (ClientConfigKey::Timeout, REQUEST_TIMEOUT.to_owned()),
        (ClientConfigKey::ConnectTimeout, CONNECT_TIMEOUT.to_owned()),
    ]
    .into_iter()
    .chain(
        config
            .allow_http
            .map(|allow| (ClientConfigKey::AllowHttp, allow.to_string())),
    );
    let store: Arc<dyn ObjectStore> = match remote.kind {
        StoreKind::S3 => {
            let mut builder = AmazonS3Builder::from_env()
                .with_url(&remote.root)
                .with_retry(retry);
            let env = |name: &str| std::env::var(name).ok();
            if let Some(profile) = aws_profile(&env).map_err(|problem| StoreError::Profile {
                output: output.clone(),
                problem,
            })? {
                builder = profile.apply(builder);
            }
            for (key, value) in client {
                builder = builder.with_config(AmazonS3ConfigKey::Client(key), value);
            }
            if let Some(endpoint) = &config.endpoint {
                builder = builder.with_endpoint(endpoint);
            }
            for (key, value) in &config.options {
                builder = builder.with_config(key.parse().map_err(|_| setting(key))?, value);
            }
            Arc::new(builder.build().map_err(build_error)?)
        }
        StoreKind::Gcs => {
            let mut builder = GoogleCloudStorageBuilder::from_env()
                .with_url(&remote.root)
                .with_retry(retry);
            for (key, value) in client {
                builder = builder.with_config(GoogleConfigKey::Client(key), value);
            }
            if let Some(endpoint) = &config.endpoint {
                builder = builder.with_base_url(endpoint);
            }
            for (key, value) in &config.options {
                builder = builder.with_config(key.parse().map_err(|_| setting(key))?, value);
            }
            Arc::new(builder.build().map_err(build_error)?)
        }
        StoreKind::Azure => {
            let mut builder = MicrosoftAzureBuilder::from_env()
                .with_url(&remote.root)
                .with_retry(retry);
            for (key, value) in client {
                builder = builder.with_config(AzureConfigKey::Client(key), value);
            }
            if let Some(endpoint) = &config.endpoint {
                builder = builder.with_endpoint(endpoint.clone());
            }
            for (key, value) in &config.options {
                builder = builder.with_config(key.parse().map_err(|_| setting(key))?, value);
            }
            Arc::new(builder.build().map_err(build_error)?)
        }
    };
    Ok(store)
}

/// Static keys (and a region) from the AWS CLI's shared files.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ProfileCredentials {
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
    region: Option<String>,
}

impl ProfileCredentials {
    fn apply(self, mut builder: AmazonS3Builder) -> AmazonS3Builder {
        builder = builder
            .with_access_key_id(self.access_key_id)
            .with_secret_access_key(self.secret_access_key);
        if let Some(token) = self.session_token {
            builder = builder.with_token(token);
        }
        if let Some(region) = self.region {
            builder = builder.with_region(region);
        }
        builder
    }
}

/// The profile to use when the environment has no keys: `AWS_PROFILE`, else `default` if the
/// credentials file has it. Keys in the environment win, as with the AWS CLI. Only static-key
/// profiles are read; with none, the client falls back to its own chain (web identity,
/// container and instance credentials).
fn aws_profile(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<ProfileCredentials>, String> {
    if env("AWS_ACCESS_KEY_ID").is_some() {
        return Ok(None);
    }
    let named = env("AWS_PROFILE").filter(|p| !p.is_empty());
    let profile = named.clone().unwrap_or_else(|| "default".to_owned());
    let home = env("HOME").map(PathBuf::from);
    let file = |variable: &str, name: &str| {
        env(variable)
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".aws").join(name)))
    };
    let credentials_file = file("AWS_SHARED_CREDENTIALS_FILE", "credentials");
    let text = credentials_file
        .as_ref()
        .and_then(|path| std::fs::read_to_string(path).ok());
    let shown = credentials_file.as_ref().map_or_else(
        || "~/.aws/credentials".to_owned(),
        |p| p.display().to_string(),
    );
    let section = text.as_deref().and_then(|t| ini_section(t, &profile));
    let keys = section.as_ref().and_then(|s| {
        Some((
            s.get("aws_access_key_id")?.clone(),
            s.get("aws_secret_access_key")?.clone(),
        ))
    });
    let Some((access_key_id, secret_access_key)) = keys else {
        return match named {
            Some(name) => Err(format!(
                "AWS_PROFILE={name}: {shown} has no [{name}] with aws_access_key_id and aws_secret_access_key (only profiles with static keys are read; for SSO, roles or credential_process, export the keys or use the instance's role)"
            )),
            None => Ok(None),
        };
    };
    let region = if env("AWS_REGION").is_some() || env("AWS_DEFAULT_REGION").is_some() {
        None
    } else {
        let config_header = match profile.as_str() {
            "default" => "default".to_owned(),
            name => format!("profile {name}"),
        };
        file("AWS_CONFIG_FILE", "config")
            .and_then(|path| std::fs::read_to_string(path).ok())
            .and_then(|text| ini_section(&text, &config_header))
            .and_then(|section| section.get("region").cloned())
    };
    Ok(Some(ProfileCredentials {
        access_key_id,
        secret_access_key,
        session_token: section.and_then(|s| s.get("aws_session_token").cloned()),
        region,
    }))
}

/// The `key = value` pairs of `[name]` in an INI text such as `~/.aws/credentials`.
fn ini_section(text: &str, name: &str) -> Option<BTreeMap<String, String>> {
    let mut found: Option<BTreeMap<String, String>> = None;
    let mut inside = false;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = header.trim() == name;
            if inside {
                found.get_or_insert_with(BTreeMap::new);
            }
            continue;
        }
        if let (true, Some((key, value)), Some(section)) =
            (inside, line.split_once('='), found.as_mut())
        {
            section.insert(key.trim().to_owned(), value.trim().to_owned());
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of<'a>(vars: &'a [(&'a str, String)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.clone())
        }
    }

    fn aws_home() -> tempfile::TempDir {
        let home = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(home.path().join(".aws")).expect(".aws");
        std::fs::write(
            home.path().join(".aws/credentials"),
            "[default]\naws_access_key_id = AKDEFAULT\naws_secret_access_key = s1\n\n# finance\n[finance]\naws_access_key_id=AKFIN\naws_secret_access_key=s2\naws_session_token=t2\n",
        )
        .expect("credentials");
        std::fs::write(
            home.path().join(".aws/config"),
            "[default]\nregion = us-east-2\n[profile finance]\nregion = eu-west-1\n",
        )
        .expect("config");
        home
    }

    #[test]
    fn keys_in_the_environment_win_over_profiles() {
        let home = aws_home();
        let vars = [
            ("HOME", home.path().display().to_string()),
            ("AWS_ACCESS_KEY_ID", "AKENV".to_owned()),
            ("AWS_PROFILE", "finance".to_owned()),
        ];
        assert_eq!(aws_profile(&env_of(&vars)), Ok(None));
    }

    #[test]
    fn a_named_profile_gives_its_keys_token_and_region() {
        let home = aws_home();
        let vars = [
            ("HOME", home.path().display().to_string()),
            ("AWS_PROFILE", "finance".to_owned()),
        ];
        assert_eq!(
            aws_profile(&env_of(&vars)),
            Ok(Some(ProfileCredentials {
                access_key_id: "AKFIN".into(),
                secret_access_key: "s2".into(),
                session_token: Some("t2".into()),
                region: Some("eu-west-1".into()),
            }))
        );
    }

    #[test]
    fn the_default_profile_is_used_when_present_and_region_env_wins() {
        let home = aws_home();
        let vars = [
            ("HOME", home.path().display().to_string()),
            ("AWS_REGION", "ap-south-1".to_owned()),
        ];
        let profile = aws_profile(&env_of(&vars)).expect("ok").expect("default");
        assert_eq!(profile.access_key_id, "AKDEFAULT");
        assert_eq!(profile.region, None);
    }

    #[test]
    fn a_missing_named_profile_is_an_error_and_no_files_fall_through() {
        let home = aws_home();
        let vars = [
            ("HOME", home.path().display().to_string()),
            ("AWS_PROFILE", "nope".to_owned()),
        ];
        let problem = aws_profile(&env_of(&vars)).expect_err("missing profile");
        assert!(problem.contains("AWS_PROFILE=nope"), "{problem}");
        let empty = tempfile::tempdir().expect("tempdir");
        let vars = [("HOME", empty.path().display().to_string())];
        assert_eq!(aws_profile(&env_of(&vars)), Ok(None));
    }
}

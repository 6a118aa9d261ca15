//! The instance id in every file name, so that several collectors can write into one prefix
//! (or one shared directory) without two files ever taking the same name.

use std::io::Write;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

/// File that keeps a generated id under the collector's state directory, so a restarted
/// collector keeps its name and the files it left staged keep theirs.
pub const INSTANCE_ID_FILE: &str = "instance-id";

/// Longest id accepted: it is part of every file name and object key.
pub const MAX_INSTANCE_ID_LEN: usize = 64;

/// Why an id cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum InstanceIdError {
    #[error("instance id {0:?}: use 1 to 64 ASCII letters, digits, '-' or '_'")]
    Invalid(String),
    #[error("cannot keep the instance id in {}: {source}", path.display())]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// Checks an id given by the user.
pub fn validate(id: &str) -> Result<(), InstanceIdError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_INSTANCE_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(InstanceIdError::Invalid(id.to_owned()))
    }
}

/// The id to name files with: `configured` when set, else the one kept in
/// `<state_dir>/instance-id`, generated and saved there on first use.
pub fn resolve(configured: &str, state_dir: &Path) -> Result<String, InstanceIdError> {
    if !configured.is_empty() {
        validate(configured)?;
        return Ok(configured.to_owned());
    }
    let path = state_dir.join(INSTANCE_ID_FILE);
    let io = |source| InstanceIdError::Io {
        path: path.clone(),
        source,
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let id = text.trim();
            validate(id)?;
            return Ok(id.to_owned());
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    std::fs::create_dir_all(state_dir).map_err(io)?;
    let id = random_id();
    // Written whole and synced before use: a torn id would name files differently after a crash.
    let temp = state_dir.join(format!(".{INSTANCE_ID_FILE}.tmp"));
    let mut file = std::fs::File::create(&temp).map_err(io)?;
    file.write_all(format!("{id}\n").as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)?;
    std::fs::rename(&temp, &path).map_err(io)?;
    Ok(id)
}

/// For a process with no state directory (`replay`, tests): the host name and the process id,
/// which tell an operator where a file came from.
pub fn process_instance_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_default();
        let host: String = host
            .trim()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .take(40)
            .collect();
        let host = host.trim_matches('-');
        match host {
            "" => format!("pid{}", std::process::id()),
            host => format!("{host}-{}", std::process::id()),
        }
    })
}

/// 16 hex digits that differ between machines and starts: a hash of what is unique to this
/// start (host, pid, clock, an address the OS randomises), so no random-number crate is needed.
fn random_id() -> String {
    let mut hash = Sha256::new();
    hash.update(process_instance_id().as_bytes());
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    hash.update(nanos.to_le_bytes());
    let local = 0u8;
    hash.update((std::ptr::addr_of!(local) as usize).to_le_bytes());
    hash.update(
        std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), nanos)
            .to_le_bytes(),
    );
    hex::encode(&hash.finalize()[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configured_id_is_used_when_valid() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(
            resolve("collector-a_1", dir.path()).expect("id"),
            "collector-a_1"
        );
        assert!(!dir.path().join(INSTANCE_ID_FILE).exists());
        for bad in ["a/b", "a b", "é", &"x".repeat(65)] {
            assert!(resolve(bad, dir.path()).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_generated_id_is_kept_across_restarts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = resolve("", dir.path()).expect("id");
        assert_eq!(first.len(), 16);
        assert_eq!(resolve("", dir.path()).expect("id again"), first);
        let other = tempfile::tempdir().expect("tempdir");
        assert_ne!(resolve("", other.path()).expect("other id"), first);
    }

    #[test]
    fn the_process_id_names_host_and_pid() {
        let id = process_instance_id();
        assert!(validate(id).is_ok(), "{id}");
        assert!(id.ends_with(&std::process::id().to_string()), "{id}");
    }
}

//! Writing a snapshot into the pricing directory without ever replacing a different one.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{ImportError, Imported};
use crate::pricing::Snapshot;

/// Where the snapshot is, and whether this import wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub path: PathBuf,
    /// Lowercase hex SHA-256 of the file's bytes.
    pub digest: String,
    /// The directory already held these exact bytes (at `path`); nothing was written.
    pub unchanged: bool,
}

impl Imported {
    /// Writes `<checked_at>-<version>.json` into `out` (created if missing). Refuses when a
    /// snapshot there claims the same (version, checked date) with other bytes, since start-up
    /// would then refuse the directory; identical bytes are success with nothing written.
    pub fn write_into(&self, out: &Path) -> Result<Written, ImportError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ImportError::Io { path, source }
        };
        fs::create_dir_all(out).map_err(io(out))?;
        let path = out.join(self.file_name());
        let digest = self.digest();
        if let Some(same) = self.find_claim(out, &path)? {
            return Ok(Written {
                path: same,
                digest,
                unchanged: true,
            });
        }

        // Written aside and linked into place: the loader never sees half a file, and a link
        // fails where a rename would replace a file that appeared meanwhile.
        let temporary = out.join(format!(".{}.{}.tmp", self.file_name(), std::process::id()));
        let written = (|| {
            let mut file = fs::File::create(&temporary)?;
            file.write_all(&self.bytes)?;
            file.sync_all()?;
            fs::hard_link(&temporary, &path)
        })();
        let _ = fs::remove_file(&temporary);
        match written {
            Ok(()) => Ok(Written {
                path,
                digest,
                unchanged: false,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                match self.find_claim(out, &path)? {
                    Some(same) => Ok(Written {
                        path: same,
                        digest,
                        unchanged: true,
                    }),
                    None => Err(ImportError::Occupied { path }),
                }
            }
            Err(e) => Err(io(&path)(e)),
        }
    }

    /// The file of `out` that already holds these bytes, if any; an error for one that claims
    /// this snapshot's (version, checked date) with other bytes, or that has its name.
    fn find_claim(&self, out: &Path, path: &Path) -> Result<Option<PathBuf>, ImportError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ImportError::Io { path, source }
        };
        let mut candidates: Vec<PathBuf> = fs::read_dir(out)
            .map_err(io(out))?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|ext| ext == "json") && p.is_file())
            .collect();
        candidates.sort();
        let mut identical = None;
        for candidate in candidates {
            let bytes = fs::read(&candidate).map_err(io(&candidate))?;
            if bytes == self.bytes {
                // Prefer the file of our own name when copies exist under others.
                if identical.is_none() || candidate == path {
                    identical = Some(candidate);
                }
                continue;
            }
            // A file the loader refuses claims nothing; `pricing check` reports it.
            let claims_ours = Snapshot::from_bytes(&candidate, &bytes)
                .is_ok_and(|s| s.version == self.version && s.checked_at == self.checked_at);
            if claims_ours {
                return Err(ImportError::Conflict {
                    path: path.to_path_buf(),
                    existing: candidate,
                    version: self.version.clone(),
                    checked_at: self.checked_at,
                });
            }
            if candidate == path {
                return Err(ImportError::Occupied {
                    path: path.to_path_buf(),
                });
            }
        }
        Ok(identical)
    }
}

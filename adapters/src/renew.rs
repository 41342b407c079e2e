//! The REST adapters' HTTP client, rebuilt when its credential files are renewed in place: a
//! grid proxy or a host certificate (`auth.certificate`, `auth.key`) and the CA bundle
//! (`auth.ca_file`) are replaced every few hours by an external tool, and the broker must not
//! need a restart to present the new ones. Before every call the files' identity (device,
//! inode, size, modification and change times) is compared with the one the client was built
//! from: two or three `stat` calls. When it changed, the client is built again from the new
//! files; when they cannot be used (unreadable, half written, a key that does not match its
//! certificate) the client built from the previous ones is kept and the reason is logged once
//! for that version of the files; files seen changing while they were read are tried again at
//! the next call. (The bearer token file needs none of this: it is read at every call.)
//!
//! `RenewingClient`, a reqwest client rebuilt when its client certificate or CA file changes on
//! disk (certificates renewed in place, no restart).

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use reqwest::Client;
use tracing::{info, warn};

use crate::rest::{Auth, RestAuth};
use crate::MssError;

/// A client for the configured credentials, renewed with their files.
pub struct RenewingClient {
    auth: RestAuth,
    timeout: Duration,
    /// The files the client is built from (certificate, key, CA bundle; none: nothing to watch).
    files: Vec<PathBuf>,
    current: Mutex<Current>,
}

struct Current {
    client: Client,
    /// The files' identity when the client was built from them.
    built_from: Stamp,
    /// Their identity when they were last refused: not tried again until they change.
    refused: Option<Stamp>,
}

/// Each file's identity, `None` for one that cannot be `stat`ed.
type Stamp = Vec<Option<FileStamp>>;

/// (device, inode, size, modified ns, changed ns): a file rewritten in place or replaced by a
/// rename differs in at least one.
type FileStamp = (u64, u64, u64, i128, i128);

impl RenewingClient {
    /// The client for `auth`, for calls bounded by `timeout`; refused (as at start-up) when the
    /// files cannot be used now.
    pub fn new(auth: &RestAuth, timeout: Duration) -> Result<RenewingClient, MssError> {
        let mut files = Vec::new();
        if let Auth::Certificate { certificate, key } = &auth.auth {
            files.push(certificate.clone());
            files.push(key.clone());
        }
        files.extend(auth.ca_file.clone());
        let built_from = stamp(&files);
        let client = auth.client(timeout)?;
        Ok(RenewingClient {
            auth: auth.clone(),
            timeout,
            files,
            current: Mutex::new(Current {
                client,
                built_from,
                refused: None,
            }),
        })
    }

    /// The client to make a call with: rebuilt first if the credential files changed and the
    /// new ones can be used.
    pub fn client(&self) -> Client {
        if self.files.is_empty() {
            return self.lock().client.clone();
        }
        let now = stamp(&self.files);
        let mut current = self.lock();
        if now == current.built_from || current.refused.as_ref() == Some(&now) {
            return current.client.clone();
        }
        match self.auth.client(self.timeout) {
            // Changed again while it was read: what was read may be half of each.
            Ok(_) if stamp(&self.files) != now => {}
            Ok(client) => {
                info!(files = ?self.files, "the credential files changed: calls from now on present the new ones");
                *current = Current {
                    client,
                    built_from: now,
                    refused: None,
                };
            }
            Err(e) => {
                warn!(files = ?self.files, error = %e,
                    "the credential files changed but cannot be used (unreadable, half written or \
                     not matching); the previous credentials are kept until they change again");
                current.refused = Some(now);
            }
        }
        current.client.clone()
    }

    fn lock(&self) -> MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn stamp(files: &[PathBuf]) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    files
        .iter()
        .map(|f| {
            let m = std::fs::metadata(f).ok()?;
            let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
            Some((
                m.dev(),
                m.ino(),
                m.size(),
                ns(m.mtime(), m.mtime_nsec()),
                ns(m.ctime(), m.ctime_nsec()),
            ))
        })
        .collect()
}

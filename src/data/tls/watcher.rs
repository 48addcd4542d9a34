//! Hot rotation: `CertWatcher` polls the certificate and CA files, loads a changed file once
//! per version (`Stamp`, `Seen`), swaps in what passes the checks and unloads files gone from
//! the directory, and republishes the expiry metric. A file that fails to load is a warning
//! and the previous certificate keeps serving. It must not run on the handshake path.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

use super::certs::LoadedCert;
use super::client_auth::ClientAuth;
use super::options::TlsOptions;
use super::store::{CertSource, CertStore};
use crate::ops::metrics::Metrics;

/// How often certificate and CA files are checked for changes.
const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// The certificate files `--ssl-cert` (and `--ssl-default-cert`) name now, sorted. In a
/// directory, hidden entries (Kubernetes' `..data` links among them) and non-files are skipped.
pub(super) fn cert_files(options: &TlsOptions) -> std::io::Result<Vec<PathBuf>> {
    let mut files: BTreeSet<PathBuf> = BTreeSet::new();
    let Some(cert) = &options.cert else {
        // No --ssl-cert (hence no --ssl-default-cert either): no file at all.
        return Ok(Vec::new());
    };
    if std::fs::metadata(cert)?.is_dir() {
        for entry in std::fs::read_dir(cert)? {
            let path = entry?.path();
            let hidden = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_none_or(|n| n.starts_with('.'));
            if !hidden && std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
                files.insert(path);
            }
        }
    } else {
        files.insert(cert.clone());
    }
    if let Some(d) = options.default_cert.as_ref()
        && let Some(p) = resolve_default(options, d)
    {
        let known = files.iter().any(|f| same_file(f, &p));
        if !known {
            files.insert(p);
        }
    }
    Ok(files.into_iter().collect())
}

/// `--ssl-default-cert` as a path among the certificate files: the file itself when it exists
/// (spelled the way the directory listing spells it when it is inside), else a file of that
/// name inside the `--ssl-cert` directory.
pub(super) fn resolve_default(options: &TlsOptions, default: &Path) -> Option<PathBuf> {
    let dir = options.cert.as_deref();
    let candidates = [Some(default.to_path_buf()), dir.map(|d| d.join(default))];
    let found = candidates.into_iter().flatten().find(|p| p.is_file())?;
    if let Some(dir) = dir.filter(|d| d.is_dir())
        && let Ok(entries) = std::fs::read_dir(dir)
    {
        for entry in entries.flatten() {
            if same_file(&entry.path(), &found) {
                return Some(entry.path());
            }
        }
    }
    Some(found)
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Identifies one version of a file without reading it: size, mtime, ctime and inode (a
/// rename-into-place changes the inode even when size and mtime match).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    ino: u64,
}

fn stamp(path: &Path) -> std::io::Result<Stamp> {
    let m = std::fs::metadata(path)?;
    Ok(Stamp {
        len: m.len(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        ino: m.ino(),
    })
}

pub(super) fn read_file(path: &Path) -> std::io::Result<(Stamp, Vec<u8>)> {
    let before = stamp(path)?;
    let bytes = std::fs::read(path)?;
    Ok((before, bytes))
}

/// Per file, the version last looked at (loaded or rejected), so each version is loaded or
/// warned about once.
#[derive(Debug, Clone, Default)]
pub(super) struct Seen {
    pub(super) files: BTreeMap<PathBuf, Stamp>,
    pub(super) ca: Option<Stamp>,
    /// Files that could not be read on the last poll (warned once until readable again).
    unreadable: BTreeSet<PathBuf>,
    /// The store is empty and that was warned about.
    warned_empty: bool,
}

/// Sets `tls_certificate_not_after_seconds` to the certificates loaded now, one series per
/// source (file), so a rotated file keeps its series and a removed one loses it.
pub(super) fn publish_expiry(store: &CertStore, metrics: &Metrics) {
    let certs: Vec<(String, i64)> = store
        .certificates()
        .into_iter()
        .map(|c| {
            let unix = match c.not_after.duration_since(UNIX_EPOCH) {
                Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
            };
            (c.source.to_string(), unix)
        })
        .collect();
    let borrowed: Vec<(&str, i64)> = certs.iter().map(|(n, t)| (n.as_str(), *t)).collect();
    metrics.data.set_certificates(&borrowed);
}

/// Polls the certificate and CA files and swaps in changed ones that pass the checks.
pub struct CertWatcher {
    pub(super) options: TlsOptions,
    pub(super) store: Arc<CertStore>,
    pub(super) client_auth: Option<Arc<ClientAuth>>,
    pub(super) seen: Mutex<Seen>,
    pub(super) metrics: Option<Arc<Metrics>>,
}

impl CertWatcher {
    /// One pass over the files: loads what changed, unloads files gone from the directory.
    pub fn poll(&self) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let now = SystemTime::now();
        match cert_files(&self.options) {
            Ok(files) => {
                if self.poll_certs(&files, &mut seen, now)
                    && let Some(m) = &self.metrics
                {
                    publish_expiry(&self.store, m);
                }
            }
            Err(e) => {
                let cert = self.options.cert.clone().unwrap_or_default();
                if seen.unreadable.insert(cert.clone()) {
                    tracing::warn!(
                        path = %cert.display(),
                        error = %e,
                        "cannot list certificates; the loaded ones keep serving"
                    );
                }
            }
        }
        let default = self
            .options
            .default_cert
            .as_ref()
            .and_then(|d| resolve_default(&self.options, d))
            .map(CertSource::File);
        if default.is_some() {
            self.store.set_default(default);
        }
        self.poll_ca(&mut seen, now);
    }

    /// Returns whether the set of loaded certificates changed.
    fn poll_certs(&self, files: &[PathBuf], seen: &mut Seen, now: SystemTime) -> bool {
        let mut changed = false;
        if let Some(cert) = &self.options.cert {
            seen.unreadable.remove(cert);
        }
        for path in files {
            let current = match stamp(path) {
                Ok(s) => s,
                Err(e) => {
                    if seen.unreadable.insert(path.clone()) {
                        tracing::warn!(file = %path.display(), error = %e,
                            "cannot read certificate; the loaded one keeps serving");
                    }
                    continue;
                }
            };
            if seen.files.get(path) == Some(&current) {
                continue;
            }
            let (stamp, pem) = match read_file(path) {
                Ok(r) => r,
                Err(e) => {
                    if seen.unreadable.insert(path.clone()) {
                        tracing::warn!(file = %path.display(), error = %e,
                            "cannot read certificate; the loaded one keeps serving");
                    }
                    continue;
                }
            };
            seen.unreadable.remove(path);
            seen.files.insert(path.clone(), stamp);
            let source = CertSource::File(path.clone());
            let checked = LoadedCert::from_pem(&pem).and_then(|c| {
                if c.is_expired(now) {
                    Err(format!("expired on {}", c.not_after_text))
                } else {
                    Ok(c)
                }
            });
            match checked {
                Ok(cert) => {
                    tracing::info!(file = %path.display(), names = %cert.names.join(","),
                        not_after = %cert.not_after_text, "certificate loaded");
                    self.store.insert(source, cert);
                    changed = true;
                }
                Err(reason) if self.store.contains(&source) => {
                    tracing::warn!(file = %path.display(), %reason,
                        "rejected the new certificate; the previous one keeps serving");
                }
                Err(reason) => {
                    tracing::warn!(file = %path.display(), %reason, "certificate not loaded");
                }
            }
        }
        let gone: Vec<PathBuf> = seen
            .files
            .keys()
            .filter(|p| !files.contains(p))
            .cloned()
            .collect();
        for path in gone {
            seen.files.remove(&path);
            seen.unreadable.remove(&path);
            if self.store.remove(&CertSource::File(path.clone())) {
                tracing::info!(file = %path.display(), "certificate file removed; unloaded");
                changed = true;
            }
        }
        let empty = self.store.is_empty();
        if empty && !seen.warned_empty {
            tracing::warn!(
                path = %self.options.cert.as_deref().unwrap_or(Path::new("")).display(),
                "no certificate loaded: TLS handshakes fail until one is added"
            );
        }
        seen.warned_empty = empty;
        changed
    }

    fn poll_ca(&self, seen: &mut Seen, now: SystemTime) {
        let (Some(path), Some(auth)) = (&self.options.client_ca, &self.client_auth) else {
            return;
        };
        let current = match stamp(path) {
            Ok(s) => s,
            Err(e) => {
                if seen.unreadable.insert(path.clone()) {
                    tracing::warn!(file = %path.display(), error = %e,
                        "cannot read the client CA bundle; the loaded one keeps verifying");
                }
                return;
            }
        };
        if seen.ca == Some(current) {
            return;
        }
        let (stamp, pem) = match read_file(path) {
            Ok(r) => r,
            Err(e) => {
                if seen.unreadable.insert(path.clone()) {
                    tracing::warn!(file = %path.display(), error = %e,
                        "cannot read the client CA bundle; the loaded one keeps verifying");
                }
                return;
            }
        };
        seen.unreadable.remove(path);
        seen.ca = Some(stamp);
        match auth.reload(&pem, now) {
            Ok(()) => tracing::info!(file = %path.display(), "client CA bundle reloaded"),
            Err(reason) => tracing::warn!(file = %path.display(), %reason,
                "rejected the new client CA bundle; the previous one keeps verifying"),
        }
    }
}

#[async_trait]
impl BackgroundService for CertWatcher {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut tick = tokio::time::interval(POLL_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = tick.tick() => self.poll(),
            }
        }
    }
}

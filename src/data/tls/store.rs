//! The loaded certificates (`CertStore`), keyed by the source that put them there
//! (`CertSource`), and the immutable SNI index rebuilt on every change and swapped in for new
//! handshakes (`SniResolver` is rustls's view of it). It must not read files or know where
//! certificates come from, and the handshake side takes no lock: it only loads the index.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::certs::{LoadedCert, normalize_name};

/// Who put a certificate into the store. Each source replaces or removes only its own.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CertSource {
    /// A PEM file named by `--ssl-cert` (or inside its directory) or `--ssl-default-cert`.
    File(PathBuf),
    /// A `kubernetes.io/tls` Secret (`namespace/name`) that a served Ingress names. Ordered
    /// after the files: a name both claim is served with the file's certificate.
    Secret(String),
}

impl fmt::Display for CertSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CertSource::File(p) => write!(f, "{}", p.display()),
            CertSource::Secret(s) => write!(f, "secret:{s}"),
        }
    }
}

/// What the metrics (and logs) can know about one loaded certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    pub source: CertSource,
    pub names: Vec<String>,
    pub subject: String,
    pub not_after: SystemTime,
    /// Served to clients without SNI or with a name no certificate has.
    pub is_default: bool,
}

/// The certificates every source loaded, and the SNI index built from them.
pub struct CertStore {
    /// Control side: only loaders take this lock, never a handshake.
    certs: Mutex<Certs>,
    /// Data side: read by every handshake.
    index: ArcSwap<SniIndex>,
}

#[derive(Default)]
struct Certs {
    by_source: BTreeMap<CertSource, LoadedCert>,
    /// The preferred default; when absent (or not loaded) the first source in order serves.
    default: Option<CertSource>,
}

#[derive(Default)]
struct SniIndex {
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// `*.example.com` is stored under `example.com`.
    wildcard: HashMap<String, Arc<CertifiedKey>>,
    default: Option<Arc<CertifiedKey>>,
}

impl Default for CertStore {
    fn default() -> Self {
        CertStore {
            certs: Mutex::new(Certs::default()),
            index: ArcSwap::from_pointee(SniIndex::default()),
        }
    }
}

impl fmt::Debug for CertStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertStore")
            .field("certificates", &self.certificates().len())
            .finish()
    }
}

impl CertStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, Certs> {
        // A panic while holding the lock leaves the map whole (every write is one insert or
        // remove), so the data is still good.
        self.certs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds or replaces the certificate of `source`, effective for the next handshake.
    pub fn insert(&self, source: CertSource, cert: LoadedCert) {
        let mut certs = self.lock();
        certs.by_source.insert(source, cert);
        self.rebuild(&certs);
    }

    /// Removes the certificate of `source`; returns whether there was one.
    pub fn remove(&self, source: &CertSource) -> bool {
        let mut certs = self.lock();
        let removed = certs.by_source.remove(source).is_some();
        if removed {
            self.rebuild(&certs);
        }
        removed
    }

    /// Marks the certificate of `source` as the default (`None`: the first in order).
    pub fn set_default(&self, source: Option<CertSource>) {
        let mut certs = self.lock();
        if certs.default != source {
            certs.default = source;
            self.rebuild(&certs);
        }
    }

    pub fn contains(&self, source: &CertSource) -> bool {
        self.lock().by_source.contains_key(source)
    }

    pub fn is_empty(&self) -> bool {
        self.lock().by_source.is_empty()
    }

    /// Every loaded certificate with its expiry, in source order.
    pub fn certificates(&self) -> Vec<CertInfo> {
        let certs = self.lock();
        let default = default_source(&certs);
        certs
            .by_source
            .iter()
            .map(|(source, c)| CertInfo {
                is_default: Some(source) == default,
                source: source.clone(),
                names: c.names.clone(),
                subject: c.subject.clone(),
                not_after: c.not_after,
            })
            .collect()
    }

    /// The certificate for a handshake: the exact name, then a wildcard covering it (one
    /// label, as X.509 wildcards do), then the default.
    pub fn resolve(&self, server_name: Option<&str>) -> Option<Arc<CertifiedKey>> {
        let index = self.index.load();
        if let Some(name) = server_name {
            let name = normalize_name(name);
            if let Some(k) = index.exact.get(&name) {
                return Some(Arc::clone(k));
            }
            if let Some(k) = name
                .split_once('.')
                .and_then(|(_, parent)| index.wildcard.get(parent))
            {
                return Some(Arc::clone(k));
            }
        }
        index.default.clone()
    }

    /// Builds the SNI index from scratch and swaps it in. When two certificates claim a name
    /// the first source in order keeps it, so the choice does not depend on load order.
    fn rebuild(&self, certs: &Certs) {
        let mut index = SniIndex::default();
        for cert in certs.by_source.values() {
            for name in &cert.names {
                let map = match name.strip_prefix("*.") {
                    Some(parent) => index.wildcard.entry(parent.to_string()),
                    None => index.exact.entry(name.clone()),
                };
                map.or_insert_with(|| Arc::clone(&cert.key));
            }
        }
        index.default = default_source(certs)
            .and_then(|s| certs.by_source.get(s))
            .map(|c| Arc::clone(&c.key));
        self.index.store(Arc::new(index));
    }
}

fn default_source(certs: &Certs) -> Option<&CertSource> {
    certs
        .default
        .as_ref()
        .filter(|s| certs.by_source.contains_key(*s))
        .or_else(|| certs.by_source.keys().next())
}

/// rustls's view of the store.
#[derive(Debug)]
pub(super) struct SniResolver(pub(super) Arc<CertStore>);

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.resolve(hello.server_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::tls::certs::tests::load;

    fn file(p: &str) -> CertSource {
        CertSource::File(PathBuf::from(p))
    }

    #[test]
    fn sni_prefers_exact_then_wildcard_then_default() {
        let store = CertStore::default();
        let a = load(&["a.example.com"]);
        let w = load(&["*.example.com"]);
        let d = load(&["default.test"]);
        let (ka, kw, kd) = (a.key.clone(), w.key.clone(), d.key.clone());
        store.insert(file("/c/b-wild.pem"), w);
        store.insert(file("/c/a.pem"), a);
        store.insert(file("/c/z-default.pem"), d);
        let is = |got: Option<Arc<CertifiedKey>>, want: &Arc<CertifiedKey>| {
            Arc::ptr_eq(&got.unwrap(), want)
        };
        assert!(is(store.resolve(Some("a.example.com")), &ka));
        assert!(is(store.resolve(Some("A.Example.COM.")), &ka));
        assert!(is(store.resolve(Some("b.example.com")), &kw));
        // A wildcard covers one label only.
        assert!(is(store.resolve(Some("x.b.example.com")), &ka));
        // Without a marked default, the first source in order serves.
        assert!(is(store.resolve(None), &ka));
        store.set_default(Some(file("/c/z-default.pem")));
        assert!(is(store.resolve(None), &kd));
        assert!(is(store.resolve(Some("unknown.test")), &kd));
        assert!(store.remove(&file("/c/z-default.pem")));
        assert!(is(store.resolve(None), &ka));
        let infos = store.certificates();
        assert_eq!(infos.len(), 2);
        assert!(infos[0].is_default);
    }

    #[test]
    fn a_name_claimed_twice_goes_to_the_first_source() {
        let store = CertStore::default();
        let first = load(&["dup.test"]);
        let k = first.key.clone();
        store.insert(file("/z.pem"), load(&["dup.test"]));
        store.insert(file("/a.pem"), first);
        assert!(Arc::ptr_eq(&store.resolve(Some("dup.test")).unwrap(), &k));
    }
}

//! The loaded certificates (`CertStore`), keyed by the source that put them there
//! (`CertSource`), and the immutable SNI index rebuilt on every change and swapped in for new
//! handshakes (`SniResolver` is rustls's view of it). It must not read files or know where
//! certificates come from, and the handshake side takes no lock: it only loads the index.
//!
//! A certificate may belong to one local address (a Gateway's own, `--gateway-addresses`):
//! a handshake to that address is answered from that address's certificates first, as its
//! requests are routed by that Gateway's listeners first, and from the shared ones only for
//! names none of them takes; a handshake to any other address never sees them.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::IpAddr;
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
    /// A `kubernetes.io/tls` Secret (`namespace/name`) that a served Ingress (or a Gateway
    /// listener without an address of its own) names. Ordered after the files: a name both
    /// claim is served with the file's certificate.
    Secret(String),
    /// A Secret that the listeners of the Gateway with this local address name: served to
    /// handshakes to that address only.
    AddressSecret(IpAddr, String),
    /// The self-signed certificate made at startup when the TLS port opened without
    /// `--ssl-cert` (`LoadedCert::self_signed`): the default, for names no Secret serves.
    Generated,
}

impl CertSource {
    /// The local address whose handshakes alone see this certificate, if it has one.
    fn address(&self) -> Option<IpAddr> {
        match self {
            CertSource::AddressSecret(ip, _) => Some(*ip),
            CertSource::File(_) | CertSource::Secret(_) | CertSource::Generated => None,
        }
    }
}

impl fmt::Display for CertSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CertSource::File(p) => write!(f, "{}", p.display()),
            CertSource::Secret(s) => write!(f, "secret:{s}"),
            CertSource::AddressSecret(ip, s) => write!(f, "secret:{s}@{ip}"),
            CertSource::Generated => write!(f, "generated"),
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
    /// The certificates of each address that has its own (`CertSource::AddressSecret`), asked
    /// first for a handshake to it; their `default` is the certificate of a listener without
    /// a hostname, which takes every name there.
    at: HashMap<IpAddr, SniIndex>,
}

impl SniIndex {
    /// The certificate for `name` (normalized) by exact name, then a wildcard covering it
    /// (one label, as X.509 wildcards do).
    fn by_name(&self, name: &str) -> Option<&Arc<CertifiedKey>> {
        self.exact.get(name).or_else(|| {
            name.split_once('.')
                .and_then(|(_, parent)| self.wildcard.get(parent))
        })
    }

    fn add(&mut self, cert: &LoadedCert) {
        for name in &cert.names {
            let map = match name.strip_prefix("*.") {
                Some(parent) => self.wildcard.entry(parent.to_string()),
                None => self.exact.entry(name.clone()),
            };
            map.or_insert_with(|| Arc::clone(&cert.key));
        }
    }
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
        self.resolve_at(None, server_name)
    }

    /// `resolve` for a handshake to `local` (its local address): the certificates of that
    /// address first (by name, then the one of a listener without a hostname), then the
    /// shared ones.
    pub fn resolve_at(
        &self,
        local: Option<IpAddr>,
        server_name: Option<&str>,
    ) -> Option<Arc<CertifiedKey>> {
        let index = self.index.load();
        let own = local
            .filter(|_| !index.at.is_empty())
            .and_then(|ip| index.at.get(&ip.to_canonical()));
        let name = server_name.map(normalize_name);
        if let Some(own) = own
            && let Some(k) = name
                .as_deref()
                .and_then(|n| own.by_name(n))
                .or(own.default.as_ref())
        {
            return Some(Arc::clone(k));
        }
        name.as_deref()
            .and_then(|n| index.by_name(n))
            .or(index.default.as_ref())
            .cloned()
    }

    /// Builds the SNI index from scratch and swaps it in. When two certificates claim a name
    /// the first source in order keeps it, so the choice does not depend on load order.
    fn rebuild(&self, certs: &Certs) {
        let mut index = SniIndex::default();
        for (source, cert) in &certs.by_source {
            match source.address() {
                None => index.add(cert),
                Some(ip) => {
                    let own = index.at.entry(ip.to_canonical()).or_default();
                    own.add(cert);
                    if cert.any_name && own.default.is_none() {
                        own.default = Some(Arc::clone(&cert.key));
                    }
                }
            }
        }
        index.default = default_source(certs)
            .and_then(|s| certs.by_source.get(s))
            .map(|c| Arc::clone(&c.key));
        self.index.store(Arc::new(index));
    }
}

/// The marked default, else the first shared source in order (an address's certificate is
/// never served to another address).
fn default_source(certs: &Certs) -> Option<&CertSource> {
    certs
        .default
        .as_ref()
        .filter(|s| certs.by_source.contains_key(*s))
        .or_else(|| certs.by_source.keys().find(|s| s.address().is_none()))
}

/// rustls's view of the store.
#[derive(Debug)]
pub(super) struct SniResolver(pub(super) Arc<CertStore>);

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0
            .resolve_at(super::local_ip::get(), hello.server_name())
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

    #[test]
    fn a_handshake_to_an_address_gets_its_certificates_first() {
        let store = CertStore::default();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let at = |a: &str, s: &str| CertSource::AddressSecret(ip(a), s.into());
        let shared = load(&["dup.test", "other.test"]);
        let two = load(&["dup.test"]);
        let three = load(&["dup.test"]);
        let (ks, k2, k3) = (shared.key.clone(), two.key.clone(), three.key.clone());
        // Sources of addresses sort after the shared ones: they must not become the default.
        store.insert(at("127.0.0.2", "ns/two"), two);
        store.insert(at("127.0.0.3", "ns/three"), three);
        store.insert(CertSource::Secret("ns/shared".into()), shared);
        let is = |got: Option<Arc<CertifiedKey>>, want: &Arc<CertifiedKey>| {
            Arc::ptr_eq(&got.unwrap(), want)
        };
        let at2 = Some(ip("127.0.0.2"));
        assert!(is(store.resolve_at(at2, Some("dup.test")), &k2));
        assert!(is(
            store.resolve_at(Some(ip("127.0.0.3")), Some("DUP.test")),
            &k3
        ));
        // An IPv4-mapped address is the IPv4 one.
        assert!(is(
            store.resolve_at(Some(ip("::ffff:127.0.0.3")), Some("dup.test")),
            &k3
        ));
        // Names the address's certificates do not take, and other addresses: the shared ones.
        assert!(is(store.resolve_at(at2, Some("other.test")), &ks));
        assert!(is(store.resolve_at(at2, None), &ks));
        assert!(is(
            store.resolve_at(Some(ip("127.0.0.1")), Some("dup.test")),
            &ks
        ));
        assert!(is(store.resolve_at(None, Some("dup.test")), &ks));
        assert!(is(store.resolve(Some("unknown.test")), &ks));
        // A listener without a hostname takes every name at its address.
        let mut any = load(&["any.test"]);
        any.any_name = true;
        let ka = any.key.clone();
        store.insert(at("127.0.0.2", "ns/any"), any);
        assert!(is(store.resolve_at(at2, Some("other.test")), &ka));
        assert!(is(store.resolve_at(at2, None), &ka));
        assert!(is(store.resolve_at(at2, Some("dup.test")), &k2));
        assert!(is(
            store.resolve_at(Some(ip("127.0.0.3")), Some("other.test")),
            &ks
        ));
        // Only address certificates loaded: no default for other addresses.
        assert!(store.remove(&CertSource::Secret("ns/shared".into())));
        assert!(store.resolve_at(None, Some("dup.test")).is_none());
        assert!(store.resolve_at(Some(ip("127.0.0.9")), None).is_none());
    }
}

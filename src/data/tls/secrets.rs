//! The second certificate source: certificates from `kubernetes.io/tls` Secrets that served
//! Ingresses and Gateway listeners name, each under `CertSource::Secret` (or, for a Gateway
//! with an address of its own, `CertSource::AddressSecret`) and indexed by the hosts the
//! Ingresses and listeners give it. `sync` makes the store hold exactly the given set, parsing only what changed; a
//! certificate that does not load (a key that does not fit it) is logged and counted, and its
//! hosts get the default certificate. It must not know where the set comes from (the routing
//! table): it takes plain names and bytes.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use super::certs::{LoadedCert, normalize_name};
use super::store::{CertSource, CertStore};
use super::watcher::publish_expiry;
use crate::ops::metrics::Metrics;

/// One Secret's certificate as the caller has it.
pub struct SecretPem<'a> {
    /// `namespace/name`.
    pub secret: &'a str,
    /// The host names to serve it for; empty: the names in the certificate. `*` among them:
    /// the names in the certificate too (a Gateway listener without a hostname).
    pub hosts: &'a [Box<str>],
    /// Certificate chain and key, PEM.
    pub pem: &'a Arc<[u8]>,
    /// The local address whose handshakes alone see it (a Gateway's own); `None`: all.
    pub address: Option<IpAddr>,
}

/// A Secret's bundle and hosts as last synced.
type Held = (Arc<[u8]>, Vec<Box<str>>);

/// Where a Secret's certificate is held: its `namespace/name` and the address it is for.
type HeldKey = (String, Option<IpAddr>);

fn cert_source(key: &HeldKey) -> CertSource {
    match key {
        (secret, None) => CertSource::Secret(secret.clone()),
        (secret, Some(ip)) => CertSource::AddressSecret(*ip, secret.clone()),
    }
}

/// Keeps the store's Secret certificates equal to the set last synced.
pub struct SecretCerts {
    store: Arc<CertStore>,
    metrics: Option<Arc<Metrics>>,
    /// What each Secret source holds now (or failed to load), to skip unchanged ones.
    loaded: BTreeMap<HeldKey, Held>,
}

impl SecretCerts {
    pub fn new(store: Arc<CertStore>, metrics: Option<Arc<Metrics>>) -> SecretCerts {
        SecretCerts {
            store,
            metrics,
            loaded: BTreeMap::new(),
        }
    }

    /// Loads the certificates of `certs` that changed, removes those no longer given.
    pub fn sync<'a>(&mut self, certs: impl IntoIterator<Item = SecretPem<'a>>) {
        let mut keep: BTreeMap<HeldKey, Held> = BTreeMap::new();
        let mut changed = false;
        for c in certs {
            let key = (c.secret.to_string(), c.address);
            let same = self
                .loaded
                .get(&key)
                .is_some_and(|(pem, hosts)| pem[..] == c.pem[..] && hosts[..] == c.hosts[..]);
            let source = cert_source(&key);
            keep.insert(key, (Arc::clone(c.pem), c.hosts.to_vec()));
            if same {
                continue;
            }
            changed = true;
            match LoadedCert::from_pem(c.pem) {
                Ok(mut cert) => {
                    let own = c.hosts.iter().any(|h| &**h == "*");
                    cert.any_name = own && c.address.is_some();
                    let given = c
                        .hosts
                        .iter()
                        .filter(|h| &***h != "*")
                        .map(|h| normalize_name(h));
                    if own {
                        cert.names.extend(given);
                        cert.names.sort();
                        cert.names.dedup();
                    } else if !c.hosts.is_empty() {
                        cert.names = given.collect();
                    }
                    tracing::info!(secret = c.secret, address = %c.address.map_or("any".to_string(), |a| a.to_string()),
                        names = %cert.names.join(","),
                        "certificate loaded from Secret");
                    self.store.insert(source, cert);
                }
                Err(reason) => {
                    // The Secret's hosts fall back to the default certificate.
                    self.store.remove(&source);
                    tracing::warn!(secret = c.secret, %reason,
                        "certificate of Secret not loaded; its hosts get the default certificate");
                    if let Some(m) = &self.metrics {
                        m.data.tls_secret_errors_total.inc();
                    }
                }
            }
        }
        for gone in self.loaded.keys().filter(|k| !keep.contains_key(*k)) {
            changed |= self.store.remove(&cert_source(gone));
        }
        self.loaded = keep;
        if changed && let Some(m) = &self.metrics {
            publish_expiry(&self.store, m);
        }
    }
}

//! TLS to backends: the CA bundles endpoints are verified against (`--backend-ca-file`, and a
//! Service's own `lb.backend-ca-file`, or the `ca.crt` of the Secret or ConfigMap its
//! `lb.backend-ca-secret` / `lb.backend-ca-configmap` names, which the table carries) and the
//! client certificates presented to endpoints that ask for one (`--backend-client-cert`/`-key`,
//! a Service's own `lb.backend-client-cert`/`-key`), loaded from PEM files, reloaded when a
//! file changes, and handed to each new upstream connection as its peer's CA and client
//! certificate. So a rotated file applies from the next connection on without a restart;
//! pooled connections keep what they verified.
//!
//! `BackendTlsWatcher` polls the files (the flag's, and those the current table names) and
//! swaps in a new map of parsed bundles (`arc-swap`); the request path only looks one up. A
//! file that fails to load is a warning and its previous version stays in use; a Service whose
//! own file never loaded has no bundle, and its TLS connections fail as an untrusted
//! certificate would (502, counted in `upstream_tls_failures_total`). Without
//! `--backend-ca-file` the default is Pingora's (the system's roots), which does not rotate.
//!
//! A bundle from a Secret or ConfigMap comes with the table, as PEM bytes: each distinct
//! content is parsed once (by the poll, or by the first connection that needs it, whichever
//! comes first) into a bundle of its own id, so a rotated object's new bundle is a new pool
//! group. A reference translate could not resolve has no bytes, and a content that does not
//! parse is refused (warned once): either way those connections fail closed, as for an
//! unloadable file, and never fall back to the flag's bundle or the system's roots.
//!
//! Which bundle, which client certificate, whether to verify: decided once, by `choose`, for both
//! engines and the health checks. Pingora's path writes the `TlsChoice` into its `HttpPeer`
//! (`PeerTls::configure`); the fast path, which speaks HTTP/1.1 over TLS to `https` backends and
//! HTTP/2 over TLS to `h2`/`grpcs` ones itself, gets a rustls client configuration for it
//! (`client_config`), built the way Pingora's connector builds one (TLS 1.2 and 1.3, the installed
//! crypto provider, ALPN `http/1.1`, or `h2` alone, the system's roots when no bundle applies, any
//! certificate accepted only when the Service skips verification) and kept per `ConfigKey` — bundle
//! version, client certificate version, verification, ALPN — so its session cache resumes TLS
//! sessions with the backends, and a rotated bundle is a new key (and a new pool group) from the
//! next connection on. The poll forgets the configurations of versions no longer loaded.
//!
//! The price of a per-connection bundle on Pingora's path: Pingora then builds the connection's
//! rustls client configuration each time, with a fresh session cache, so those TLS sessions are
//! not resumed (the fast path's are). So the flag's bundle as it was at startup is not handed
//! over: Pingora's connector loaded the same file into its shared configuration, whose session
//! cache resumes sessions; only once the file has rotated (or a Service names its own, or a
//! client certificate is presented) does a connection get its own. This module must not do I/O
//! on the request path: files are read by the poll, the system's roots by `client_config`,
//! which the fast path calls off the runtime's worker threads.

use std::collections::hash_map::Entry as MapEntry;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use async_trait::async_trait;
use pingora::prelude::HttpPeer;
use pingora::protocols::tls::CaType;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use pingora::upstreams::peer::Peer;
use pingora::utils::tls::{CertKey, WrappedX509, parse_x509};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::alt_names::AltNamesVerifier;
use super::watcher::{Stamp, read_file};
use crate::ops::health::PeerTls;
use crate::table::upstream::{CaBundle, SubjectAltName, Upstream};
use crate::table::{RoutingTable, TableReader};

/// How often the bundles are checked for changes.
const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// A Service's own CA bundle is not loaded (missing, unreadable or without a certificate).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the backend CA bundle {0} is not loaded")]
pub struct CaNotLoaded(pub Box<str>);

/// A Service's own client certificate is not loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the backend client certificate {0} is not loaded")]
pub struct ClientCertNotLoaded(pub Box<str>);

/// A CA bundle or a client certificate a TLS backend needs is not loaded: its connections
/// fail closed (502, counted in `upstream_tls_failures_total`) on either engine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotLoaded {
    #[error(transparent)]
    Ca(#[from] CaNotLoaded),
    #[error(transparent)]
    Client(#[from] ClientCertNotLoaded),
}

/// A client certificate's chain and key files.
type Pair = (PathBuf, PathBuf);

/// One loaded version of a client certificate.
#[derive(Clone)]
struct Client {
    ck: Arc<CertKey>,
    /// Unique per loaded version, as `Bundle::id`.
    id: u64,
}

/// The loaded client certificates, by chain file then key file: two levels so that a request
/// looks its Service's pair up by borrowed paths (`Path::new` of the table's strings), without
/// building a key.
#[derive(Clone, Default)]
struct Clients(HashMap<PathBuf, HashMap<PathBuf, Client>>);

impl Clients {
    fn get(&self, chain: &Path, key: &Path) -> Option<&Client> {
        self.0.get(chain)?.get(key)
    }

    fn contains(&self, (chain, key): &Pair) -> bool {
        self.get(chain, key).is_some()
    }

    fn insert(&mut self, (chain, key): Pair, client: Client) {
        self.0.entry(chain).or_default().insert(key, client);
    }

    fn pairs(&self) -> impl Iterator<Item = (&PathBuf, &PathBuf)> {
        self.0
            .iter()
            .flat_map(|(chain, keys)| keys.keys().map(move |key| (chain, key)))
    }

    fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.values().flat_map(|keys| keys.values().map(|c| c.id))
    }

    /// Keeps the pairs in `wanted` only.
    fn retain(&mut self, wanted: &[Pair]) {
        for (chain, keys) in &mut self.0 {
            keys.retain(|key, _| wanted.iter().any(|(c, k)| c == chain && k == key));
        }
        self.0.retain(|_, keys| !keys.is_empty());
    }
}

/// Numbers loaded client certificates (0: none).
static NEXT_CLIENT: AtomicU64 = AtomicU64::new(1);

/// One loaded version of a bundle.
#[derive(Clone)]
struct Bundle {
    ca: Arc<CaType>,
    /// Unique per loaded version: the peer's connection-pool key, so a pooled connection is
    /// only reused with the bundle it was verified against.
    id: u64,
}

/// Parsed bundles by their PEM content.
type HeldBundles = HashMap<Arc<[u8]>, Option<Bundle>, ahash::RandomState>;

/// Numbers loaded bundles (0 stays Pingora's default group, and the system's roots in a
/// `ConfigKey`).
static NEXT_BUNDLE: AtomicU64 = AtomicU64::new(1);

/// The loaded CA bundles, by path.
pub struct BackendTls {
    default_ca: Option<PathBuf>,
    /// The id of the flag's bundle as loaded at startup: the one Pingora's connector holds.
    startup_ca: Option<u64>,
    cas: ArcSwap<HashMap<PathBuf, Bundle>>,
    /// Bundles the table carries (from Secrets and ConfigMaps), by content; `None`: refused.
    /// Looked up for every connection to such a Service: hashed with aHash (a few hundred ns
    /// for a bundle of a few KiB), not SipHash.
    held: ArcSwap<HeldBundles>,
    default_client: Option<Pair>,
    clients: ArcSwap<Clients>,
    /// The watcher's memory between polls.
    seen: Mutex<Seen>,
    /// The fast path's rustls client configurations, one per distinct `ConfigKey`: kept, so
    /// that each one's session cache resumes TLS sessions across connections. Looked up when a
    /// connection opens (not per request); the poll forgets those of versions gone.
    configs: Mutex<HashMap<ConfigKey, Arc<ClientConfig>>>,
    /// The system's roots (as Pingora's connector loads them), loaded on first use.
    system_roots: OnceLock<Result<Arc<RootCertStore>, String>>,
    /// The verifiers of BackendTLSPolicy names, one per `ConfigKey`, kept.
    verifiers: Mutex<HashMap<ConfigKey, Arc<AltNamesVerifier>>>,
}

/// How a TLS connection to an entry's endpoints is made — which CA bundle verifies the
/// certificate, which client certificate is presented, whether the certificate is verified at
/// all — decided once by `BackendTls::choose` for both engines: the Pingora path writes it into
/// its `HttpPeer` (`PeerTls::configure`), the fast path builds its rustls configuration from it
/// (`BackendTls::client_config`).
#[derive(Clone)]
pub struct TlsChoice {
    /// `None`: the system's roots.
    ca: Option<Bundle>,
    client: Option<Client>,
    /// Off only by `lb.backend-insecure-skip-verify` (`Upstream::verify`).
    verify: bool,
    /// What the fast path's handshake offers by ALPN (Pingora's path sets its own).
    alpn: Alpn,
    /// A BackendTLSPolicy's `subjectAltNames`: verified instead of the name sent.
    names: Option<Arc<[SubjectAltName]>>,
}

/// The protocol a fast-path TLS connection offers by ALPN: `http/1.1` for `https` backends,
/// `h2` alone for `h2`/`grpcs` ones (as Pingora's connector offers for an HTTP/2-only peer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Alpn {
    Http11,
    H2,
}

/// What a connection was verified with and presented: the fast path's configuration cache
/// key, and (with the server name) its pool key, so a pooled connection is only reused under
/// the same bundle version, client certificate version and verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConfigKey {
    /// The bundle's id; 0: the system's roots.
    ca: u64,
    /// The client certificate's id; 0: none.
    client: u64,
    verify: bool,
    /// A connection offering `h2` is never one for HTTP/1.1, and back.
    alpn: Alpn,
    /// The names verified instead of the name sent (their hash; 0: none).
    names: u64,
}

impl TlsChoice {
    pub fn key(&self) -> ConfigKey {
        ConfigKey {
            ca: self.ca.as_ref().map_or(0, |b| b.id),
            client: self.client.as_ref().map_or(0, |c| c.id),
            verify: self.verify,
            alpn: self.alpn,
            names: self.names.as_deref().map_or(0, names_id),
        }
    }

    /// The server name the handshake sends and verifies for `sni` (`Upstream::sni`). As
    /// Pingora's connector does, a verified name's leftmost label has its underscores made
    /// dashes (a certificate cannot name them); `None` for a name rustls refuses.
    pub fn server_name(&self, sni: &str) -> Option<ServerName<'static>> {
        let name = match sni.split_once('.') {
            Some((left, rest)) if self.verify && rest.contains('.') && left.contains('_') => {
                format!("{}.{rest}", left.replace('_', "-"))
            }
            _ => sni.to_owned(),
        };
        ServerName::try_from(name).ok()
    }
}

/// An id for a list of names: their hash (never 0, which means none).
fn names_id(names: &[SubjectAltName]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    names.hash(&mut h);
    h.finish() | 1
}

/// Accepts any certificate (`lb.backend-insecure-skip-verify`), as Pingora's connector does
/// then; the handshake's signatures are still checked against the certificate presented.
#[derive(Debug)]
struct SkipVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for SkipVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// What the watcher remembers between polls, so each version of a file is loaded or warned
/// about once.
#[derive(Default)]
struct Seen {
    /// The version of each file last read.
    stamps: HashMap<PathBuf, Stamp>,
    /// Files last found unreadable.
    unreadable: HashSet<PathBuf>,
    /// CA bundles and client certificates whose current version was refused.
    refused_cas: HashSet<PathBuf>,
    refused: HashSet<Pair>,
}

/// One file as a poll found it.
struct FileNow {
    bytes: Vec<u8>,
    /// Not the version read last time (or never read).
    changed: bool,
}

impl Seen {
    /// Reads `path`; `None` (warned once) when it cannot be read.
    fn read(&mut self, path: &Path) -> Option<FileNow> {
        match read_file(path) {
            Ok((stamp, bytes)) => {
                self.unreadable.remove(path);
                let changed = self.stamps.insert(path.to_path_buf(), stamp) != Some(stamp);
                Some(FileNow { bytes, changed })
            }
            Err(e) => {
                if self.unreadable.insert(path.to_path_buf()) {
                    tracing::warn!(path = %path.display(), error = %e, "cannot read a backend TLS file; the last version loaded (if any) stays in use");
                }
                self.stamps.remove(path);
                None
            }
        }
    }
}

/// The certificates of a PEM bundle, each checked to parse (Pingora's wrapper would panic on
/// one that does not).
fn parse_bundle(pem: &[u8]) -> Result<Arc<CaType>, String> {
    let mut out = Vec::new();
    for der in CertificateDer::pem_slice_iter(pem) {
        let der = der.map_err(|e| format!("not PEM: {e}"))?;
        x509_parser::parse_x509_certificate(&der)
            .map_err(|e| format!("a certificate does not parse: {e}"))?;
        out.push(WrappedX509::new(der.to_vec(), parse_x509));
    }
    if out.is_empty() {
        return Err("holds no PEM certificate".into());
    }
    Ok(out.into())
}

/// A client certificate chain and its key, each checked the way Pingora's connector will
/// use them (it would panic on a certificate that does not parse or a key it cannot read).
fn parse_pair(chain: &[u8], key: &[u8]) -> Result<Arc<CertKey>, String> {
    let mut certs = Vec::new();
    for der in CertificateDer::pem_slice_iter(chain) {
        let der = der.map_err(|e| format!("not PEM: {e}"))?;
        x509_parser::parse_x509_certificate(&der)
            .map_err(|e| format!("a certificate does not parse: {e}"))?;
        certs.push(der.to_vec());
    }
    if certs.is_empty() {
        return Err("the chain holds no PEM certificate".into());
    }
    let key = PrivateKeyDer::from_pem_slice(key)
        .map_err(|e| format!("the key is not a PEM private key: {e}"))?;
    let der = key.secret_der().to_vec();
    PrivateKeyDer::try_from(der.clone()).map_err(|e| format!("the key: {e}"))?;
    Ok(Arc::new(CertKey::new(certs, der)))
}

impl BackendTls {
    /// With `--backend-ca-file` and `--backend-client-cert`/`-key` (loaded now, as they are
    /// used from the first connection), or without (Pingora's default roots, no client
    /// certificate).
    pub fn new(default_ca: Option<PathBuf>, default_client: Option<Pair>) -> BackendTls {
        let mut tls = BackendTls {
            default_ca,
            startup_ca: None,
            cas: ArcSwap::from_pointee(HashMap::new()),
            held: ArcSwap::from_pointee(HeldBundles::default()),
            default_client,
            clients: ArcSwap::from_pointee(Clients::default()),
            seen: Mutex::new(Seen::default()),
            configs: Mutex::new(HashMap::new()),
            system_roots: OnceLock::new(),
            verifiers: Mutex::new(HashMap::new()),
        };
        tls.poll(&RoutingTable::default());
        let startup = tls
            .default_ca
            .as_ref()
            .and_then(|p| tls.cas.load().get(p).map(|b| b.id));
        tls.startup_ca = startup;
        tls
    }

    /// The bundle to verify `u`'s endpoints against: the Service's own, else the flag's;
    /// `None` for the system's roots (Pingora's default).
    fn bundle_for(&self, u: &Upstream) -> Result<Option<Bundle>, CaNotLoaded> {
        if let Some(own) = &u.ca_bundle {
            // Unresolved or refused: fail closed, never the flag's bundle.
            return own
                .pem
                .as_ref()
                .and_then(|pem| self.held_bundle(own, pem))
                .map(Some)
                .ok_or_else(|| CaNotLoaded(own.to_string().into()));
        }
        let cas = self.cas.load();
        match (&u.ca_file, &self.default_ca) {
            (Some(own), _) => cas
                .get(Path::new(own.as_ref()))
                .map(|b| Some(b.clone()))
                .ok_or_else(|| CaNotLoaded(own.clone())),
            (None, Some(default)) => Ok(cas.get(default).cloned()),
            (None, None) => Ok(None),
        }
    }

    /// The parsed bundle of `pem`, parsed now if no poll has yet (once per content: a refusal
    /// is remembered too, so it is warned about once).
    fn held_bundle(&self, source: &CaBundle, pem: &Arc<[u8]>) -> Option<Bundle> {
        if let Some(b) = self.held.load().get(pem) {
            return b.clone();
        }
        let parsed = match parse_bundle(pem) {
            Ok(ca) => {
                tracing::info!(%source, "backend CA bundle loaded");
                Some(Bundle {
                    ca,
                    id: NEXT_BUNDLE.fetch_add(1, Ordering::Relaxed),
                })
            }
            Err(why) => {
                tracing::warn!(%source, %why, "backend CA bundle refused; TLS connections to its Service's endpoints fail");
                None
            }
        };
        // Two connections may race here: the first bundle stored is the one both use, so
        // they share a pool group.
        self.held.rcu(|m| {
            let mut m = HashMap::clone(m);
            if let MapEntry::Vacant(v) = m.entry(Arc::clone(pem)) {
                v.insert(parsed.clone());
            }
            m
        });
        self.held.load().get(pem).cloned().unwrap_or(parsed)
    }

    /// Parses the bundles `table` carries that are new, and forgets those it no longer does.
    fn poll_held(&self, table: &RoutingTable) {
        let wanted: Vec<(&CaBundle, &Arc<[u8]>)> = table
            .entries
            .iter()
            .filter(|e| e.upstream.protocol.tls())
            .filter_map(|e| e.upstream.ca_bundle.as_ref())
            .filter_map(|b| b.pem.as_ref().map(|pem| (b, pem)))
            .collect();
        for (source, pem) in &wanted {
            self.held_bundle(source, pem);
        }
        let keep: HashSet<&[u8]> = wanted.iter().map(|(_, pem)| &pem[..]).collect();
        if self.held.load().keys().any(|k| !keep.contains(&k[..])) {
            self.held.rcu(|m| {
                let mut m = HashMap::clone(m);
                m.retain(|k, _| keep.contains(&k[..]));
                m
            });
        }
    }

    /// The certificates of the bundle `u`'s endpoints are verified against now.
    pub fn ca_for(&self, u: &Upstream) -> Result<Option<Arc<CaType>>, CaNotLoaded> {
        Ok(self.bundle_for(u)?.map(|b| b.ca))
    }

    /// The client certificate to present to `u`'s endpoints: the Service's own, else the
    /// flags'; `None` for none.
    pub fn client_for(&self, u: &Upstream) -> Result<Option<Arc<CertKey>>, ClientCertNotLoaded> {
        Ok(self.client_of(u)?.map(|c| c.ck))
    }

    fn client_of(&self, u: &Upstream) -> Result<Option<Client>, ClientCertNotLoaded> {
        let clients = self.clients.load();
        match (&u.client_cert, &self.default_client) {
            (Some((c, k)), _) => clients
                .get(Path::new(c.as_ref()), Path::new(k.as_ref()))
                .map(|c| Some(c.clone()))
                .ok_or_else(|| ClientCertNotLoaded(c.clone())),
            (None, Some((c, k))) => Ok(clients.get(c, k).cloned()),
            (None, None) => Ok(None),
        }
    }

    /// The TLS `u`'s endpoints are spoken to with, on either engine: the Service's own CA
    /// bundle (file, Secret or ConfigMap), else the flag's, else the system's roots; the
    /// Service's own client certificate, else the flags'; verification unless skipped. A
    /// Service's own bundle or certificate that is not loaded is an error (fail closed),
    /// whether or not verification is skipped.
    pub fn choose(&self, u: &Upstream) -> Result<TlsChoice, NotLoaded> {
        Ok(TlsChoice {
            ca: self.bundle_for(u)?,
            client: self.client_of(u)?,
            verify: u.verify,
            alpn: if u.protocol.http2() {
                Alpn::H2
            } else {
                Alpn::Http11
            },
            names: u.subject_alt_names.clone(),
        })
    }

    /// The verifier of `c`'s names over its roots, when it has names and verifies: made once
    /// per `ConfigKey` and kept (both engines ask for it per connection).
    fn names_verifier(&self, c: &TlsChoice) -> Result<Option<Arc<AltNamesVerifier>>, String> {
        let Some(names) = c.names.as_ref().filter(|_| c.verify) else {
            return Ok(None);
        };
        let key = c.key();
        let kept = |v: &Mutex<HashMap<ConfigKey, Arc<AltNamesVerifier>>>| {
            v.lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&key)
                .cloned()
        };
        if let Some(v) = kept(&self.verifiers) {
            return Ok(Some(v));
        }
        let provider = CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
        let chain = WebPkiServerVerifier::builder_with_provider(self.roots(c)?, provider)
            .build()
            .map_err(|e| e.to_string())?;
        let made = Arc::new(AltNamesVerifier::new(chain, Arc::clone(names)));
        let mut verifiers = self.verifiers.lock().unwrap_or_else(|e| e.into_inner());
        Ok(Some(Arc::clone(verifiers.entry(key).or_insert(made))))
    }

    /// The roots `c` verifies against: its bundle's, or the system's.
    fn roots(&self, c: &TlsChoice) -> Result<Arc<RootCertStore>, String> {
        match &c.ca {
            Some(b) => {
                let mut store = RootCertStore::empty();
                for cert in b.ca.iter() {
                    store
                        .add(CertificateDer::from(cert))
                        .map_err(|e| format!("a CA certificate is not a trust anchor: {e}"))?;
                }
                Ok(Arc::new(store))
            }
            None => self.system_roots(),
        }
    }

    /// The fast path's rustls configuration for `c`, if already built (no I/O).
    pub fn cached_config(&self, c: &TlsChoice) -> Option<Arc<ClientConfig>> {
        let configs = self.configs.lock().unwrap_or_else(|e| e.into_inner());
        configs.get(&c.key()).cloned()
    }

    /// The fast path's rustls configuration for `c`, built on first use and kept (so that its
    /// session cache resumes sessions with the backends). May read the system's roots from
    /// disk the first time: call it off the runtime's worker threads.
    pub fn client_config(&self, c: &TlsChoice) -> Result<Arc<ClientConfig>, String> {
        if let Some(config) = self.cached_config(c) {
            return Ok(config);
        }
        let built = Arc::new(self.build_config(c)?);
        let mut configs = self.configs.lock().unwrap_or_else(|e| e.into_inner());
        // Two connections may race here: the first stored is the one both use.
        Ok(Arc::clone(configs.entry(c.key()).or_insert(built)))
    }

    /// A rustls client configuration as Pingora's connector makes one: TLS 1.2 and 1.3 with
    /// the provider the binary installed, the chosen roots and client certificate, ALPN
    /// `http/1.1` or `h2` (`Alpn`).
    fn build_config(&self, c: &TlsChoice) -> Result<ClientConfig, String> {
        let provider = CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(&[&rustls::version::TLS12, &rustls::version::TLS13])
            .map_err(|e| e.to_string())?;
        let builder = if c.verify {
            match self.names_verifier(c)? {
                Some(names) => builder.dangerous().with_custom_certificate_verifier(names),
                None => builder.with_root_certificates(self.roots(c)?),
            }
        } else {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(SkipVerify(provider)))
        };
        let mut config = match &c.client {
            Some(client) => {
                let mut chain = vec![CertificateDer::from(client.ck.leaf())];
                chain.extend(
                    client
                        .ck
                        .intermediates()
                        .into_iter()
                        .map(CertificateDer::from),
                );
                let key = PrivateKeyDer::try_from(client.ck.key().clone())
                    .map_err(|e| format!("the client key: {e}"))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("the client certificate: {e}"))?
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![match c.alpn {
            Alpn::Http11 => b"http/1.1".to_vec(),
            Alpn::H2 => b"h2".to_vec(),
        }];
        Ok(config)
    }

    fn system_roots(&self) -> Result<Arc<RootCertStore>, String> {
        self.system_roots
            .get_or_init(|| {
                let mut store = RootCertStore::empty();
                pingora::tls::load_platform_certs_incl_env_into_store(&mut store)
                    .map(|()| Arc::new(store))
                    .map_err(|e| e.to_string())
            })
            .clone()
    }

    /// Forgets the configurations of bundle and certificate versions no longer loaded.
    fn forget_configs(&self) {
        let mut live_cas: HashSet<u64> = self.cas.load().values().map(|b| b.id).collect();
        live_cas.extend(self.held.load().values().flatten().map(|b| b.id));
        let live_clients: HashSet<u64> = self.clients.load().ids().collect();
        let live = |k: &ConfigKey| {
            (k.ca == 0 || live_cas.contains(&k.ca))
                && (k.client == 0 || live_clients.contains(&k.client))
        };
        let mut configs = self.configs.lock().unwrap_or_else(|e| e.into_inner());
        configs.retain(|k, _| live(k));
        drop(configs);
        let mut verifiers = self.verifiers.lock().unwrap_or_else(|e| e.into_inner());
        verifiers.retain(|k, _| live(k));
    }

    /// The client certificates to follow now: the flags' and every TLS entry's own.
    fn wanted_pairs(&self, table: &RoutingTable) -> Vec<Pair> {
        let mut pairs: Vec<Pair> = self.default_client.iter().cloned().collect();
        for e in &table.entries {
            if let Some((c, k)) = e
                .upstream
                .client_cert
                .as_ref()
                .filter(|_| e.upstream.protocol.tls())
            {
                pairs.push((PathBuf::from(c.as_ref()), PathBuf::from(k.as_ref())));
            }
        }
        pairs.sort();
        pairs.dedup();
        pairs
    }

    /// As `poll` for the client certificates: a pair is reloaded when either file changed.
    fn poll_clients(&self, table: &RoutingTable, seen: &mut Seen) {
        let wanted = self.wanted_pairs(table);
        let current = self.clients.load_full();
        let mut next: Option<Clients> = None;
        for pair in &wanted {
            let (Some(chain), Some(key)) = (seen.read(&pair.0), seen.read(&pair.1)) else {
                continue;
            };
            let changed = chain.changed || key.changed;
            if !changed && (current.contains(pair) || seen.refused.contains(pair)) {
                continue;
            }
            match parse_pair(&chain.bytes, &key.bytes) {
                Ok(ck) => {
                    seen.refused.remove(pair);
                    let reloaded = current.contains(pair);
                    let id = NEXT_CLIENT.fetch_add(1, Ordering::Relaxed);
                    next.get_or_insert_with(|| (*current).clone())
                        .insert(pair.clone(), Client { ck, id });
                    tracing::info!(cert = %pair.0.display(), reloaded, "backend client certificate loaded");
                }
                Err(why) => {
                    seen.refused.insert(pair.clone());
                    tracing::warn!(cert = %pair.0.display(), %why, "backend client certificate refused; the last one loaded (if any) stays in use");
                }
            }
        }
        if current
            .pairs()
            .any(|(chain, key)| !wanted.iter().any(|(c, k)| c == chain && k == key))
        {
            next.get_or_insert_with(|| (*current).clone())
                .retain(&wanted);
        }
        seen.refused.retain(|p| wanted.contains(p));
        if let Some(next) = next {
            self.clients.store(Arc::new(next));
        }
    }

    /// The files to follow now: the flag's and every TLS entry's own.
    fn wanted(&self, table: &RoutingTable) -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> = self.default_ca.iter().cloned().collect();
        for e in &table.entries {
            if let Some(p) = e
                .upstream
                .ca_file
                .as_deref()
                .filter(|_| e.upstream.protocol.tls())
            {
                paths.push(PathBuf::from(p));
            }
        }
        paths.sort();
        paths.dedup();
        paths
    }

    /// Loads what changed among the files `table` needs and forgets those it no longer does;
    /// one swap per map when anything changed. Blocking file I/O: never on the request path.
    pub fn poll(&self, table: &RoutingTable) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        self.poll_cas(table, &mut seen);
        self.poll_held(table);
        self.poll_clients(table, &mut seen);
        let wanted: HashSet<PathBuf> = self
            .wanted(table)
            .into_iter()
            .chain(
                self.wanted_pairs(table)
                    .into_iter()
                    .flat_map(|(c, k)| [c, k]),
            )
            .collect();
        seen.stamps.retain(|p, _| wanted.contains(p));
        seen.unreadable.retain(|p| wanted.contains(p));
        self.forget_configs();
        // A policy's names verified against the system's roots: read them here, off the
        // request path, before a connection needs them.
        if table
            .entries
            .iter()
            .any(|e| e.upstream.subject_alt_names.is_some() && e.upstream.ca_bundle.is_none())
        {
            let _ = self.system_roots();
        }
    }

    fn poll_cas(&self, table: &RoutingTable, seen: &mut Seen) {
        let wanted = self.wanted(table);
        let current = self.cas.load_full();
        let mut next: Option<HashMap<PathBuf, Bundle>> = None;
        for path in &wanted {
            let Some(file) = seen.read(path) else {
                continue;
            };
            if !file.changed && (current.contains_key(path) || seen.refused_cas.contains(path)) {
                continue;
            }
            match parse_bundle(&file.bytes) {
                Ok(ca) => {
                    seen.refused_cas.remove(path);
                    let reloaded = current.contains_key(path);
                    let id = NEXT_BUNDLE.fetch_add(1, Ordering::Relaxed);
                    next.get_or_insert_with(|| (*current).clone())
                        .insert(path.clone(), Bundle { ca, id });
                    tracing::info!(path = %path.display(), reloaded, "backend CA bundle loaded");
                }
                Err(why) => {
                    seen.refused_cas.insert(path.clone());
                    tracing::warn!(path = %path.display(), %why, "backend CA bundle refused; the last one loaded (if any) stays in use");
                }
            }
        }
        if current.keys().any(|p| !wanted.contains(p)) {
            next.get_or_insert_with(|| (*current).clone())
                .retain(|p, _| wanted.contains(p));
        }
        seen.refused_cas.retain(|p| wanted.contains(p));
        if let Some(next) = next {
            self.cas.store(Arc::new(next));
        }
    }
}

impl PeerTls for BackendTls {
    fn configure(&self, u: &Upstream, peer: &mut HttpPeer) -> Result<(), String> {
        // The peer, not `u`, says whether this connection is TLS: an Ingress may speak
        // another protocol to the Service's endpoints than the Service port does.
        if !peer.tls() {
            return Ok(());
        }
        let choice = self.choose(u).map_err(|e| e.to_string())?;
        if !choice.verify {
            peer.options.verify_cert = false;
            peer.options.verify_hostname = false;
        }
        // A policy's names: verified by the same verifier as the fast path's, over the same
        // roots, on connections pooled apart from those verified by name.
        if let Some(names) = self.names_verifier(&choice)? {
            peer.group_key ^= choice.key().names;
            peer.options.server_cert_verifier = Some(names);
        }
        // The startup bundle is Pingora's own (see the module comment): left to its shared
        // configuration, so sessions are resumed.
        if let Some(b) = choice.ca
            && !(u.ca_file.is_none() && u.ca_bundle.is_none() && Some(b.id) == self.startup_ca)
        {
            peer.options.ca = Some(b.ca);
            peer.group_key ^= b.id;
        }
        if let Some(client) = choice.client {
            peer.client_cert_key = Some(client.ck);
        }
        Ok(())
    }
}

/// Polls the backend CA bundles until shutdown (a Pingora background service).
pub struct BackendTlsWatcher {
    pub tls: Arc<BackendTls>,
    pub table: TableReader,
}

#[async_trait]
impl BackgroundService for BackendTlsWatcher {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        while !*shutdown.borrow() {
            let tls = Arc::clone(&self.tls);
            let table = self.table.load();
            // File reads block: off the runtime's worker threads.
            let _ = tokio::task::spawn_blocking(move || tls.poll(&table)).await;
            tokio::select! {
                _ = shutdown.changed() => break,
                _ = tokio::time::sleep(POLL_INTERVAL) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::upstream::BackendProtocol;
    use crate::table::{Entry, Frontend};

    fn ca_pem(name: &str) -> String {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().pem()
    }

    fn tls_upstream(ca_file: Option<&Path>) -> Upstream {
        Upstream {
            protocol: BackendProtocol::Https,
            sni: "web.default.svc".into(),
            verify: true,
            ca_file: ca_file.map(|p| p.to_str().unwrap().into()),
            ca_bundle: None,
            client_cert: None,
            send_proxy: false,
            subject_alt_names: None,
        }
    }

    fn table_with(u: Upstream) -> RoutingTable {
        RoutingTable {
            entries: vec![Arc::new(Entry {
                upstream: u,
                ..Entry::fixture("web", Frontend::Http, &["10.0.0.1:443"])
            })],
            ..Default::default()
        }
    }

    fn names(ca: &CaType) -> Vec<String> {
        ca.iter()
            .map(|c| c.borrow_cert().subject().to_string())
            .collect()
    }

    /// Writes `contents` so that the watcher sees a new version even within one clock tick.
    fn replace(path: &Path, contents: &str) {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, contents).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }

    #[test]
    fn bundles_load_rotate_and_survive_a_bad_version() {
        let dir = tempfile::tempdir().unwrap();
        let default = dir.path().join("default.pem");
        let own = dir.path().join("own.pem");
        std::fs::write(&default, ca_pem("first")).unwrap();
        let tls = BackendTls::new(Some(default.clone()), None);
        let plain = tls_upstream(None);
        let got = tls.ca_for(&plain).unwrap().unwrap();
        assert_eq!(names(&got), ["CN=first"]);

        // A Service's own file: not loaded until the table names it.
        std::fs::write(&own, ca_pem("own")).unwrap();
        let with_own = tls_upstream(Some(&own));
        assert!(tls.ca_for(&with_own).is_err());
        let table = table_with(with_own.clone());
        tls.poll(&table);
        assert_eq!(names(&tls.ca_for(&with_own).unwrap().unwrap()), ["CN=own"]);

        // Rotation: the next lookup has the new bundle.
        replace(&default, &ca_pem("second"));
        tls.poll(&table);
        assert_eq!(names(&tls.ca_for(&plain).unwrap().unwrap()), ["CN=second"]);
        // A broken version is refused; the last good one stays.
        replace(&default, "not a certificate\n");
        tls.poll(&table);
        assert_eq!(names(&tls.ca_for(&plain).unwrap().unwrap()), ["CN=second"]);

        // A file the table no longer names is forgotten.
        tls.poll(&RoutingTable::default());
        assert!(tls.ca_for(&with_own).is_err());
    }

    fn held(kind: &'static str, pem: Option<&str>) -> Upstream {
        Upstream {
            ca_bundle: Some(CaBundle {
                kind,
                namespace: "default".into(),
                name: "web-ca".into(),
                pem: pem.map(|p| Arc::from(p.as_bytes())),
            }),
            ..tls_upstream(None)
        }
    }

    #[test]
    fn bundles_from_objects_are_parsed_once_per_content_and_fail_closed() {
        let dir = tempfile::tempdir().unwrap();
        let default = dir.path().join("default.pem");
        std::fs::write(&default, ca_pem("flag")).unwrap();
        let tls = BackendTls::new(Some(default), None);
        let (first, second) = (ca_pem("first"), ca_pem("second"));
        let a = held("Secret", Some(&first));
        let mut peer = HttpPeer::new("10.0.0.1:443", true, "web.default.svc".into());
        // Before any poll: parsed by the first connection.
        tls.configure(&a, &mut peer).unwrap();
        assert_eq!(names(peer.options.ca.as_ref().unwrap()), ["CN=first"]);
        let first_id = peer.group_key;
        assert_ne!(first_id, 0);
        // The same content (another Service, a rebuilt table): the same bundle and pool group.
        let mut again = HttpPeer::new("10.0.0.2:443", true, "web.default.svc".into());
        tls.configure(&held("ConfigMap", Some(&first)), &mut again)
            .unwrap();
        assert_eq!(again.group_key, first_id);
        // Rotated: another bundle, another pool group.
        let b = held("Secret", Some(&second));
        tls.poll(&table_with(b.clone()));
        let mut rotated = HttpPeer::new("10.0.0.1:443", true, "web.default.svc".into());
        tls.configure(&b, &mut rotated).unwrap();
        assert_eq!(names(rotated.options.ca.as_ref().unwrap()), ["CN=second"]);
        assert_ne!(rotated.group_key, first_id);
        assert_eq!(tls.held.load().len(), 1, "the first content is forgotten");
        // Unresolved, or a certificate that does not parse: an error, never the flag's bundle.
        let err = tls.configure(&held("Secret", None), &mut peer).unwrap_err();
        assert!(err.contains("Secret default/web-ca"), "{err}");
        let junk = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(
            tls.configure(&held("ConfigMap", Some(junk)), &mut peer)
                .is_err()
        );
        tls.poll(&RoutingTable::default());
        assert!(tls.held.load().is_empty());
    }

    #[test]
    fn client_certificates_load_and_are_handed_to_tls_peers() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        let ck = rcgen::generate_simple_self_signed(vec!["client".to_string()]).unwrap();
        std::fs::write(&cert, ck.cert.pem()).unwrap();
        std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
        let tls = BackendTls::new(None, Some((cert.clone(), key.clone())));
        let mut peer = HttpPeer::new("10.0.0.1:443", true, "web.default.svc".into());
        tls.configure(&tls_upstream(None), &mut peer).unwrap();
        assert!(peer.client_cert_key.is_some(), "the flags' certificate");

        // A Service's own pair, named by the table; a broken key is refused.
        let (own_cert, own_key) = (dir.path().join("oc.pem"), dir.path().join("ok.pem"));
        std::fs::write(&own_cert, ck.cert.pem()).unwrap();
        std::fs::write(
            &own_key,
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        let own = Upstream {
            client_cert: Some((
                own_cert.to_str().unwrap().into(),
                own_key.to_str().unwrap().into(),
            )),
            ..tls_upstream(None)
        };
        let table = table_with(own.clone());
        tls.poll(&table);
        assert!(tls.client_for(&own).is_err(), "refused: not loaded");
        replace(&own_key, &ck.signing_key.serialize_pem());
        tls.poll(&table);
        assert!(tls.client_for(&own).unwrap().is_some(), "loaded once fixed");
    }

    #[test]
    fn client_pairs_are_found_by_chain_and_key_and_forgotten_when_unwanted() {
        let ck = rcgen::generate_simple_self_signed(vec!["client".to_string()]).unwrap();
        let ck = parse_pair(
            ck.cert.pem().as_bytes(),
            ck.signing_key.serialize_pem().as_bytes(),
        )
        .unwrap();
        let pair = |c: &str, k: &str| (PathBuf::from(c), PathBuf::from(k));
        let mut clients = Clients::default();
        for (id, (c, k)) in [(1, ("a", "x")), (2, ("a", "y")), (3, ("b", "x"))] {
            let client = Client { ck: ck.clone(), id };
            clients.insert(pair(c, k), client);
        }
        let id = |c: &str, k: &str| clients.get(Path::new(c), Path::new(k)).map(|c| c.id);
        assert_eq!(
            (id("a", "x"), id("a", "y"), id("b", "x")),
            (Some(1), Some(2), Some(3))
        );
        assert_eq!(
            id("b", "y"),
            None,
            "a chain with another's key is not a pair"
        );

        clients.retain(&[pair("a", "y"), pair("c", "z")]);
        let id = |c: &str, k: &str| clients.get(Path::new(c), Path::new(k)).map(|c| c.id);
        assert_eq!(
            (id("a", "x"), id("a", "y"), id("b", "x")),
            (None, Some(2), None)
        );
        assert_eq!(clients.pairs().count(), 1);
        assert_eq!(clients.ids().collect::<Vec<_>>(), vec![2]);
        assert!(clients.contains(&pair("a", "y")) && !clients.contains(&pair("b", "x")));
    }

    #[test]
    fn one_choice_for_both_engines_and_one_fast_path_config_per_version() {
        let dir = tempfile::tempdir().unwrap();
        let default = dir.path().join("default.pem");
        std::fs::write(&default, ca_pem("first")).unwrap();
        let tls = BackendTls::new(Some(default.clone()), None);
        let verified = tls_upstream(None);
        let skipped = Upstream {
            verify: false,
            ..tls_upstream(None)
        };
        // Verification: what the choice says, on the peer too.
        let (a, b) = (
            tls.choose(&verified).unwrap(),
            tls.choose(&skipped).unwrap(),
        );
        assert_ne!(a.key(), b.key(), "verification is part of the key");
        let mut peer = HttpPeer::new("10.0.0.1:443", true, "web.default.svc".into());
        tls.configure(&skipped, &mut peer).unwrap();
        assert!(!peer.options.verify_cert && !peer.options.verify_hostname);
        // One configuration per key, kept (its session cache with it).
        let config = tls.client_config(&a).unwrap();
        assert!(Arc::ptr_eq(&config, &tls.client_config(&a).unwrap()));
        assert!(Arc::ptr_eq(&config, &tls.cached_config(&a).unwrap()));
        assert_eq!(config.alpn_protocols, [b"http/1.1".to_vec()]);
        assert!(!Arc::ptr_eq(&config, &tls.client_config(&b).unwrap()));
        // HTTP/2 over TLS offers `h2` alone, under a key of its own (never a connection made
        // for HTTP/1.1).
        let h2 = tls
            .choose(&Upstream {
                protocol: BackendProtocol::H2,
                ..tls_upstream(None)
            })
            .unwrap();
        assert_ne!(h2.key(), a.key());
        assert_eq!(
            tls.client_config(&h2).unwrap().alpn_protocols,
            [b"h2".to_vec()]
        );
        // Rotated: a new key and configuration; the old one is forgotten by the poll.
        replace(&default, &ca_pem("second"));
        tls.poll(&RoutingTable::default());
        let rotated = tls.choose(&verified).unwrap();
        assert_ne!(rotated.key(), a.key());
        assert!(tls.cached_config(&rotated).is_none());
        assert!(tls.cached_config(&a).is_none(), "forgotten with its bundle");
        assert!(
            tls.cached_config(&b).is_none(),
            "skipped, same bundle version"
        );
        // A Service's own bundle that is not loaded: an error on both engines.
        let missing = tls_upstream(Some(Path::new("/nonexistent/ca.pem")));
        assert!(matches!(tls.choose(&missing), Err(NotLoaded::Ca(_))));
        // The server name: Pingora's rule for underscores, on verified names only.
        assert_eq!(
            a.server_name("my_svc.ns.svc"),
            ServerName::try_from("my-svc.ns.svc").ok()
        );
        assert_eq!(
            b.server_name("web.default.svc"),
            ServerName::try_from("web.default.svc").ok()
        );
    }

    #[test]
    fn peers_get_the_bundle_only_over_tls() {
        let dir = tempfile::tempdir().unwrap();
        let default = dir.path().join("default.pem");
        std::fs::write(&default, ca_pem("ca")).unwrap();
        let tls = BackendTls::new(Some(default.clone()), None);
        let mut peer = HttpPeer::new("10.0.0.1:443", true, "web.default.svc".into());
        tls.configure(&tls_upstream(None), &mut peer).unwrap();
        assert!(
            peer.options.ca.is_none(),
            "the startup bundle is Pingora's own, which resumes sessions"
        );
        replace(&default, &ca_pem("rotated"));
        tls.poll(&RoutingTable::default());
        tls.configure(&tls_upstream(None), &mut peer).unwrap();
        assert!(peer.options.ca.is_some(), "rotated: handed over");
        assert_ne!(peer.group_key, 0, "pooled by the bundle verified against");
        let mut clear = HttpPeer::new("10.0.0.1:80", false, String::new());
        tls.configure(&Upstream::default(), &mut clear).unwrap();
        assert!(clear.options.ca.is_none());
        let missing = tls_upstream(Some(Path::new("/nonexistent/ca.pem")));
        assert!(tls.configure(&missing, &mut peer).is_err());
        assert!(
            BackendTls::new(None, None)
                .ca_for(&tls_upstream(None))
                .unwrap()
                .is_none()
        );
    }
}

//! TLS termination for the HTTPS frontend: certificates from PEM files chosen by SNI, optional
//! client-certificate verification, hot rotation by polling, and the headers the TLS port adds.
//!
//! Certificates live in a `CertStore`. Every source puts and removes only its own certificates
//! under a `CertSource` key (today the `--ssl-cert` files; the cluster watcher's
//! `kubernetes.io/tls` Secrets can become a second source without touching the handshake side),
//! and each change rebuilds an immutable SNI index that is swapped in for new handshakes
//! (`arc-swap`), so a handshake never sees a half-updated set and connections keep what they
//! negotiated. A file that fails to load at runtime is a warning and the certificate it would
//! have replaced keeps serving. This module must not know about Kubernetes, the routing table or
//! translation, and it does no I/O and takes no lock on the handshake path.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use async_trait::async_trait;
use pingora::listeners::TlsAccept;
use pingora::listeners::tls::{Acceptor, TlsSettings};
use pingora::protocols::IO;
use pingora::protocols::tls::{SslDigest, TlsRef, TlsStream};
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use x509_parser::objects::{oid_registry, oid2abbrev};

use crate::decide::edits::{ClientCert, Forwarding};
use crate::ops::metrics::{Metrics, TlsFailure};
use x509_parser::prelude::{GeneralName, X509Certificate, parse_x509_certificate};

/// The TLS frontend's metric label.
const FRONTEND_LABEL: &str = "https";

/// How often certificate and CA files are checked for changes.
const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// The `Strict-Transport-Security` max-age of the original template (half a year).
pub const DEFAULT_HSTS_MAX_AGE: u64 = 15_768_000;

/// Longest client subject passed upstream; a longer one is cut, so a client cannot make every
/// forwarded request grow without bound.
const MAX_DN_LEN: usize = 1024;

// === options ===

/// `--ssl-verify`: what happens to a client without a certificate when `--ssl-ca-cert` is set.
/// A certificate that is presented and fails verification fails the handshake either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientVerify {
    /// The handshake fails without a valid client certificate.
    #[default]
    Required,
    /// Clients without a certificate get through; backends see `X-Client-Verify: NONE`.
    Optional,
}

impl ClientVerify {
    pub fn as_str(self) -> &'static str {
        match self {
            ClientVerify::Required => "required",
            ClientVerify::Optional => "optional",
        }
    }
}

impl fmt::Display for ClientVerify {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ClientVerify {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "required" => Ok(ClientVerify::Required),
            "optional" => Ok(ClientVerify::Optional),
            _ => Err(format!(
                "{:?}: expected required or optional",
                s.chars().take(64).collect::<String>()
            )),
        }
    }
}

/// What the TLS frontend serves; built from flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsOptions {
    /// `--ssl-cert`: a PEM file (chain and key) or a directory of them.
    pub cert: PathBuf,
    /// `--ssl-default-cert`: the certificate for clients without SNI or with an unknown name
    /// (a path, or a file name inside the `--ssl-cert` directory).
    pub default_cert: Option<PathBuf>,
    /// `--ssl-ca-cert`: verify client certificates against this bundle.
    pub client_ca: Option<PathBuf>,
    pub verify: ClientVerify,
    /// `Strict-Transport-Security` max-age in seconds; `None` sends no header.
    pub hsts_max_age: Option<u64>,
}

/// Why TLS could not start. At runtime the same problems are warnings.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {reason}", path.display())]
    Invalid { path: PathBuf, reason: String },
    #[error("{}: no certificate file in this directory", path.display())]
    EmptyDir { path: PathBuf },
    #[error("--ssl-default-cert {}: no such file (nor in the --ssl-cert directory)", path.display())]
    NoDefault { path: PathBuf },
    #[error("configuring the TLS listener: {0}")]
    Listener(String),
}

/// The one crypto provider every certificate and verifier here is built with, named explicitly
/// so that no process-wide default (or a second provider linked in by a dependency) decides.
fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    Arc::clone(PROVIDER.get_or_init(|| Arc::new(rustls::crypto::ring::default_provider())))
}

fn system_time(unix_seconds: i64) -> SystemTime {
    if unix_seconds >= 0 {
        UNIX_EPOCH + Duration::from_secs(unix_seconds.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_secs(unix_seconds.unsigned_abs())
    }
}

// === impl LoadedCert ===

/// A certificate chain with its key, checked and ready for handshakes.
#[derive(Clone)]
pub struct LoadedCert {
    key: Arc<CertifiedKey>,
    /// DNS names it serves (subjectAltName, else the CN), lowercased; `*.` for wildcards.
    pub names: Vec<String>,
    pub subject: String,
    pub not_after: SystemTime,
    /// `not_after` as the certificate writes it, for messages.
    not_after_text: String,
}

impl fmt::Debug for LoadedCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedCert")
            .field("names", &self.names)
            .field("subject", &self.subject)
            .field("not_after", &self.not_after_text)
            .finish_non_exhaustive()
    }
}

impl LoadedCert {
    /// Parses an HAProxy-style PEM bundle: the certificate chain (leaf first) and its private
    /// key in one file. Checks that it parses and that the key matches the leaf; expiry is the
    /// caller's decision (`is_expired`).
    pub fn from_pem(pem: &[u8]) -> Result<LoadedCert, String> {
        let chain = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("bad PEM: {e}"))?;
        if chain.is_empty() {
            return Err("no CERTIFICATE block".into());
        }
        let key = PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
            rustls::pki_types::pem::Error::NoItemsFound => "no private key".to_string(),
            e => format!("bad private key: {e}"),
        })?;
        let (names, subject, not_after, not_after_text) = {
            let (_, leaf) =
                parse_x509_certificate(&chain[0]).map_err(|e| format!("bad certificate: {e}"))?;
            let validity = leaf.validity();
            (
                dns_names(&leaf),
                one_line_dn(&leaf),
                system_time(validity.not_after.timestamp()),
                validity.not_after.to_string(),
            )
        };
        let key = CertifiedKey::from_der(chain, key, &provider()).map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => {
                "the private key does not match the certificate".to_string()
            }
            e => format!("unusable private key: {e}"),
        })?;
        Ok(LoadedCert {
            key: Arc::new(key),
            names,
            subject,
            not_after,
            not_after_text,
        })
    }

    pub fn is_expired(&self, now: SystemTime) -> bool {
        self.not_after <= now
    }
}

/// The names a certificate serves: its DNS subjectAltNames, or its CN when it has none (as
/// browsers no longer do, but older HAProxy setups rely on).
fn dns_names(cert: &X509Certificate<'_>) -> Vec<String> {
    let mut names: Vec<String> = match cert.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                GeneralName::DNSName(d) => Some(normalize_name(d)),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    if names.is_empty() {
        names.extend(
            cert.subject()
                .iter_common_name()
                .filter_map(|cn| cn.as_str().ok())
                .map(normalize_name),
        );
    }
    names.retain(|n| !n.is_empty());
    names.sort();
    names.dedup();
    names
}

fn normalize_name(name: &str) -> String {
    name.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// The subject in OpenSSL's one-line form (`/C=DE/O=Acme/CN=client`), which is what HAProxy's
/// `ssl_c_s_dn` gives, so backends written for the original keep parsing it. Control
/// characters become `?` (they cannot travel in a header).
fn one_line_dn(cert: &X509Certificate<'_>) -> String {
    let mut out = String::new();
    for rdn in cert.subject().iter_rdn() {
        for attr in rdn.iter() {
            let oid = attr.attr_type();
            let key = oid2abbrev(oid, oid_registry())
                .map(str::to_string)
                .unwrap_or_else(|_| oid.to_id_string());
            out.push('/');
            out.push_str(&key);
            out.push('=');
            out.push_str(attr.as_str().unwrap_or("?"));
        }
    }
    out.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .take(MAX_DN_LEN)
        .collect()
}

// === impl CertStore ===

/// Who put a certificate into the store. Each source replaces or removes only its own.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CertSource {
    /// A PEM file named by `--ssl-cert` (or inside its directory) or `--ssl-default-cert`.
    File(PathBuf),
}

impl fmt::Display for CertSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CertSource::File(p) => write!(f, "{}", p.display()),
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
struct SniResolver(Arc<CertStore>);

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.resolve(hello.server_name())
    }
}

// === impl ClientAuth ===

/// Client-certificate verification whose CA bundle can be replaced while serving: it delegates
/// to the verifier built from the last good bundle.
pub struct ClientAuth {
    mode: ClientVerify,
    current: ArcSwap<Arc<dyn ClientCertVerifier>>,
}

impl fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientAuth")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl ClientAuth {
    /// Builds the verifier from a PEM CA bundle; fails on an empty or unparsable bundle, or
    /// one whose every certificate has expired.
    pub fn from_pem(pem: &[u8], mode: ClientVerify, now: SystemTime) -> Result<ClientAuth, String> {
        Ok(ClientAuth {
            mode,
            current: ArcSwap::from_pointee(verifier_from_pem(pem, mode, now)?),
        })
    }

    /// Replaces the CA bundle for the next handshakes.
    pub fn reload(&self, pem: &[u8], now: SystemTime) -> Result<(), String> {
        let verifier = verifier_from_pem(pem, self.mode, now)?;
        self.current.store(Arc::new(verifier));
        Ok(())
    }
}

fn verifier_from_pem(
    pem: &[u8],
    mode: ClientVerify,
    now: SystemTime,
) -> Result<Arc<dyn ClientCertVerifier>, String> {
    let mut roots = RootCertStore::empty();
    let mut current = 0;
    for der in CertificateDer::pem_slice_iter(pem) {
        let der = der.map_err(|e| format!("bad PEM: {e}"))?;
        let (_, cert) =
            parse_x509_certificate(&der).map_err(|e| format!("bad certificate: {e}"))?;
        if system_time(cert.validity().not_after.timestamp()) > now {
            current += 1;
        }
        roots
            .add(der)
            .map_err(|e| format!("unusable CA certificate: {e}"))?;
    }
    if roots.is_empty() {
        return Err("no CA certificate in the bundle".into());
    }
    if current == 0 {
        return Err("every CA certificate in the bundle has expired".into());
    }
    let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
    let builder = match mode {
        ClientVerify::Required => builder,
        ClientVerify::Optional => builder.allow_unauthenticated(),
    };
    builder.build().map_err(|e| e.to_string())
}

impl ClientCertVerifier for ClientAuth {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        self.mode == ClientVerify::Required
    }

    /// No CA names are hinted: the hint would have to borrow from one bundle generation, and
    /// clients send their configured certificate without it.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.current
            .load()
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current
            .load()
            .verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current
            .load()
            .verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.current.load().supported_verify_schemes()
    }
}

// === the HTTP side ===

/// The verified client certificate of a connection, kept in Pingora's TLS digest.
#[derive(Debug, Clone)]
pub struct PeerCert {
    /// One-line subject DN.
    pub subject: String,
}

/// Counts completed handshakes and records the client certificate. rustls only keeps a peer
/// certificate that the verifier accepted, so its presence means verification succeeded.
struct RecordPeer {
    metrics: Option<Arc<Metrics>>,
}

#[async_trait]
impl TlsAccept for RecordPeer {
    async fn handshake_complete_callback(
        &self,
        tls: &TlsRef,
    ) -> Option<Arc<dyn Any + Send + Sync>> {
        if let Some(m) = &self.metrics {
            m.data.tls_handshake_ok(FRONTEND_LABEL);
        }
        let der = tls.peer_certificate_der()?;
        let subject = parse_x509_certificate(der)
            .map(|(_, cert)| one_line_dn(&cert))
            .unwrap_or_default();
        Some(Arc::new(PeerCert { subject }))
    }
}

/// The verified client certificate's subject on a connection, when it presented one.
pub fn peer_subject(ssl: Option<&SslDigest>) -> Option<&str> {
    ssl.and_then(|s| s.extension.get::<PeerCert>())
        .map(|p| p.subject.as_str())
}

/// What a frontend's connection proved, for the request edits (`decide::edits`).
pub fn client_cert(ssl: Option<&SslDigest>) -> ClientCert<'_> {
    match peer_subject(ssl) {
        Some(subject) => ClientCert::Verified { subject },
        None => ClientCert::Absent,
    }
}

// === impl Tls ===

/// Everything the TLS frontend needs, loaded and checked at startup.
pub struct Tls {
    options: TlsOptions,
    store: Arc<CertStore>,
    client_auth: Option<Arc<ClientAuth>>,
    /// What was loaded, for the watcher to compare against.
    seen: Seen,
    metrics: Option<Arc<Metrics>>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("options", &self.options)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// Loads every certificate file and the CA bundle. Anything unreadable, unparsable or
    /// mismatched is an error (there is no previous version to keep serving); an expired
    /// certificate is only a warning, so that an outage of one certificate cannot stop the
    /// whole load balancer from starting.
    pub fn load(options: &TlsOptions) -> Result<Tls, TlsError> {
        let now = SystemTime::now();
        let files = cert_files(options).map_err(|source| TlsError::Read {
            path: options.cert.clone(),
            source,
        })?;
        if files.is_empty() {
            return Err(TlsError::EmptyDir {
                path: options.cert.clone(),
            });
        }
        let store = Arc::new(CertStore::default());
        let mut seen = Seen::default();
        for path in &files {
            let (stamp, pem) = read_file(path).map_err(|source| TlsError::Read {
                path: path.clone(),
                source,
            })?;
            let cert = LoadedCert::from_pem(&pem).map_err(|reason| TlsError::Invalid {
                path: path.clone(),
                reason,
            })?;
            if cert.is_expired(now) {
                tracing::warn!(
                    file = %path.display(),
                    not_after = %cert.not_after_text,
                    "certificate has expired; serving it until it is replaced"
                );
            }
            seen.files.insert(path.clone(), stamp);
            store.insert(CertSource::File(path.clone()), cert);
        }
        if let Some(d) = &options.default_cert {
            match resolve_default(options, d) {
                Some(p) => store.set_default(Some(CertSource::File(p))),
                None => return Err(TlsError::NoDefault { path: d.clone() }),
            }
        }
        let client_auth = match &options.client_ca {
            None => None,
            Some(path) => {
                let (stamp, pem) = read_file(path).map_err(|source| TlsError::Read {
                    path: path.clone(),
                    source,
                })?;
                let auth = ClientAuth::from_pem(&pem, options.verify, now).map_err(|reason| {
                    TlsError::Invalid {
                        path: path.clone(),
                        reason,
                    }
                })?;
                seen.ca = Some(stamp);
                Some(Arc::new(auth))
            }
        };
        for c in store.certificates() {
            tracing::info!(
                file = %c.source,
                names = ?c.names,
                default = c.is_default,
                "certificate loaded"
            );
        }
        Ok(Tls {
            options: options.clone(),
            store,
            client_auth,
            seen,
            metrics: None,
        })
    }

    /// Counts handshakes and publishes every certificate's expiry in `metrics` (now and after
    /// each rotation).
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Tls {
        publish_expiry(&self.store, &metrics);
        self.metrics = Some(metrics);
        self
    }

    /// The loaded certificates, for metrics (`not_after`) and for a second certificate source.
    pub fn store(&self) -> &Arc<CertStore> {
        &self.store
    }

    /// Listener settings for Pingora: TLS 1.2 and 1.3 (Pingora's rustls listener allows no
    /// other), ALPN h2 then http/1.1, certificates by SNI from the store, client verification
    /// when configured, and the client certificate recorded for `HttpsPolicy`.
    pub fn listener_settings(&self) -> Result<TlsSettings, TlsError> {
        let recorder = RecordPeer {
            metrics: self.metrics.clone(),
        };
        let mut settings = TlsSettings::with_callbacks(Box::new(recorder))
            .map_err(|e| TlsError::Listener(e.to_string()))?;
        settings.set_cert_resolver(Arc::new(SniResolver(Arc::clone(&self.store))));
        if let Some(auth) = &self.client_auth {
            settings.set_client_cert_verifier(Arc::clone(auth) as Arc<dyn ClientCertVerifier>);
        }
        settings.enable_h2();
        Ok(settings)
    }

    /// The handshake for the TLS port, run by `downstream::Guard` on each accepted TCP
    /// connection, so that a failed or slow handshake is seen, classified and counted (Pingora's
    /// own TLS listener drops it silently) and bounded by `timeout`.
    pub fn acceptor(&self, timeout: Duration) -> Result<HandshakeAcceptor, TlsError> {
        Ok(HandshakeAcceptor {
            acceptor: self.listener_settings()?.build(),
            timeout,
            metrics: self.metrics.clone(),
        })
    }

    pub fn forwarding(&self) -> Forwarding {
        Forwarding::tls(self.options.hsts_max_age, self.client_auth.is_some())
    }

    /// The background service that reloads changed files.
    pub fn watcher(&self) -> CertWatcher {
        CertWatcher {
            options: self.options.clone(),
            store: Arc::clone(&self.store),
            client_auth: self.client_auth.clone(),
            seen: Mutex::new(self.seen.clone()),
            metrics: self.metrics.clone(),
        }
    }
}

// === impl HandshakeAcceptor ===

/// Runs server handshakes with a deadline and counts the failures by reason.
pub struct HandshakeAcceptor {
    acceptor: Acceptor,
    timeout: Duration,
    metrics: Option<Arc<Metrics>>,
}

impl HandshakeAcceptor {
    /// The TLS stream, or `None` when the handshake failed or timed out (the connection is
    /// then dropped; rustls has already sent its alert where there was one to send).
    pub async fn accept<S: IO + 'static>(&self, stream: S) -> Option<TlsStream<S>> {
        let failure =
            match tokio::time::timeout(self.timeout, self.acceptor.tls_handshake(stream)).await {
                Ok(Ok(tls)) => return Some(tls),
                Ok(Err(e)) => {
                    let reason = handshake_failure(&e.to_string());
                    tracing::debug!(error = %e, reason = reason.as_str(), "TLS handshake failed");
                    reason
                }
                Err(_) => TlsFailure::Timeout,
            };
        if let Some(m) = &self.metrics {
            m.data.tls_handshake_failed(failure);
        }
        None
    }
}

/// Classifies a failed handshake by its message. Pingora keeps only the text of the rustls
/// (or I/O) error, so the text is what there is; `handshake_failures_are_classified` pins the
/// rustls messages this relies on.
pub fn handshake_failure(message: &str) -> TlsFailure {
    const NO_CERT: &[&str] = &["no server certificate chain resolved"];
    const CLIENT_CERT: &[&str] = &[
        "invalid peer certificate",
        "peer sent no certificates",
        "CertificateRequired",
    ];
    const PROTOCOL: &[&str] = &[
        "received corrupt message",
        "received unexpected",
        "peer is incompatible",
        "peer misbehaved",
        "received fatal alert",
        "cannot decrypt",
        "excess record size",
        "doesn't support any known protocol",
        "presented server name type",
    ];
    const IO: &[&str] = &[
        "handshake eof",
        "end of file",
        "os error",
        "reset by peer",
        "connection reset",
        "broken pipe",
    ];
    let has = |list: &[&str]| list.iter().any(|m| message.contains(m));
    if has(NO_CERT) {
        TlsFailure::NoCertificate
    } else if has(CLIENT_CERT) {
        TlsFailure::BadClientCertificate
    } else if has(PROTOCOL) {
        TlsFailure::Protocol
    } else if has(IO) {
        TlsFailure::Io
    } else {
        TlsFailure::Other
    }
}

/// The certificate files `--ssl-cert` (and `--ssl-default-cert`) name now, sorted. In a
/// directory, hidden entries (Kubernetes' `..data` links among them) and non-files are skipped.
fn cert_files(options: &TlsOptions) -> std::io::Result<Vec<PathBuf>> {
    let mut files: BTreeSet<PathBuf> = BTreeSet::new();
    if std::fs::metadata(&options.cert)?.is_dir() {
        for entry in std::fs::read_dir(&options.cert)? {
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
        files.insert(options.cert.clone());
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
fn resolve_default(options: &TlsOptions, default: &Path) -> Option<PathBuf> {
    let candidates = [default.to_path_buf(), options.cert.join(default)];
    let found = candidates.into_iter().find(|p| p.is_file())?;
    if options.cert.is_dir()
        && let Ok(entries) = std::fs::read_dir(&options.cert)
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
struct Stamp {
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

fn read_file(path: &Path) -> std::io::Result<(Stamp, Vec<u8>)> {
    let before = stamp(path)?;
    let bytes = std::fs::read(path)?;
    Ok((before, bytes))
}

/// Per file, the version last looked at (loaded or rejected), so each version is loaded or
/// warned about once.
#[derive(Debug, Clone, Default)]
struct Seen {
    files: BTreeMap<PathBuf, Stamp>,
    ca: Option<Stamp>,
    /// Files that could not be read on the last poll (warned once until readable again).
    unreadable: BTreeSet<PathBuf>,
    /// The store is empty and that was warned about.
    warned_empty: bool,
}

/// Sets `tls_certificate_not_after_seconds` to the certificates loaded now, one series per
/// source (file), so a rotated file keeps its series and a removed one loses it.
fn publish_expiry(store: &CertStore, metrics: &Metrics) {
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

// === impl CertWatcher ===

/// Polls the certificate and CA files and swaps in changed ones that pass the checks.
pub struct CertWatcher {
    options: TlsOptions,
    store: Arc<CertStore>,
    client_auth: Option<Arc<ClientAuth>>,
    seen: Mutex<Seen>,
    metrics: Option<Arc<Metrics>>,
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
                if seen.unreadable.insert(self.options.cert.clone()) {
                    tracing::warn!(
                        path = %self.options.cert.display(),
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
        seen.unreadable.remove(&self.options.cert);
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
                    tracing::info!(file = %path.display(), names = ?cert.names,
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
                path = %self.options.cert.display(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(names: &[&str]) -> (String, rcgen::KeyPair) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        let cert = params.self_signed(&key).unwrap();
        (format!("{}{}", cert.pem(), key.serialize_pem()), key)
    }

    fn load(names: &[&str]) -> LoadedCert {
        LoadedCert::from_pem(bundle(names).0.as_bytes()).unwrap()
    }

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
    fn bundles_are_checked() {
        let (good, _) = bundle(&["ok.test"]);
        let c = LoadedCert::from_pem(good.as_bytes()).unwrap();
        assert_eq!(c.names, vec!["ok.test".to_string()]);
        assert!(!c.is_expired(SystemTime::now()));
        assert!(c.expires_after_now_plus_a_day());

        let cert_only = good.split("-----BEGIN PRIVATE KEY").next().unwrap();
        assert!(
            LoadedCert::from_pem(cert_only.as_bytes())
                .unwrap_err()
                .contains("no private key")
        );
        let (_, other_key) = bundle(&["x.test"]);
        let mismatched = format!("{cert_only}{}", other_key.serialize_pem());
        let e = LoadedCert::from_pem(mismatched.as_bytes()).unwrap_err();
        assert!(e.contains("does not match"), "{e}");
        assert!(LoadedCert::from_pem(b"garbage").is_err());
    }

    #[test]
    fn ca_bundles_are_checked() {
        let (pem, _) = bundle(&["ca.test"]);
        let ca = pem.split("-----BEGIN PRIVATE KEY").next().unwrap();
        let now = SystemTime::now();
        assert!(ClientAuth::from_pem(ca.as_bytes(), ClientVerify::Required, now).is_ok());
        assert!(ClientAuth::from_pem(b"", ClientVerify::Required, now).is_err());
        assert!(ClientAuth::from_pem(b"not pem", ClientVerify::Optional, now).is_err());
        let later = now + Duration::from_secs(3600 * 24 * 365 * 5000);
        assert!(ClientAuth::from_pem(ca.as_bytes(), ClientVerify::Required, later).is_err());
    }

    #[test]
    fn handshake_failures_are_classified() {
        use rustls::{CertificateError, Error, InvalidMessage, PeerIncompatible};
        use std::io::{Error as IoError, ErrorKind};
        // As Pingora words them: its context, then tokio-rustls' io::Error around the rustls
        // error (or a plain I/O error).
        let pingora = |e: IoError| format!("TLSHandshakeFailure context: tls connect error: {e}");
        let tls = |e: Error| pingora(IoError::new(ErrorKind::InvalidData, e));
        let cases = [
            (
                tls(Error::General(
                    "no server certificate chain resolved".into(),
                )),
                TlsFailure::NoCertificate,
            ),
            (
                tls(Error::NoCertificatesPresented),
                TlsFailure::BadClientCertificate,
            ),
            (
                tls(Error::InvalidCertificate(CertificateError::Expired)),
                TlsFailure::BadClientCertificate,
            ),
            (
                tls(Error::InvalidCertificate(CertificateError::UnknownIssuer)),
                TlsFailure::BadClientCertificate,
            ),
            (
                tls(Error::InvalidMessage(InvalidMessage::InvalidContentType)),
                TlsFailure::Protocol,
            ),
            (
                tls(Error::PeerIncompatible(PeerIncompatible::Tls12NotOffered)),
                TlsFailure::Protocol,
            ),
            (
                tls(Error::AlertReceived(rustls::AlertDescription::UnknownCA)),
                TlsFailure::Protocol,
            ),
            (
                pingora(IoError::new(ErrorKind::UnexpectedEof, "tls handshake eof")),
                TlsFailure::Io,
            ),
            (
                pingora(IoError::from(ErrorKind::ConnectionReset)),
                TlsFailure::Io,
            ),
            (pingora(IoError::from_raw_os_error(104)), TlsFailure::Io),
            ("something new".to_string(), TlsFailure::Other),
        ];
        for (message, want) in cases {
            assert_eq!(handshake_failure(&message), want, "{message}");
        }
    }

    #[test]
    fn verify_mode_parses() {
        assert_eq!("required".parse(), Ok(ClientVerify::Required));
        assert_eq!("optional".parse(), Ok(ClientVerify::Optional));
        assert!("maybe".parse::<ClientVerify>().is_err());
    }

    impl LoadedCert {
        fn expires_after_now_plus_a_day(&self) -> bool {
            self.not_after > SystemTime::now() + Duration::from_secs(86_400)
        }
    }
}

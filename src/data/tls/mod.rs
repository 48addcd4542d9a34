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
//!
//! One noun per file: `options` (the flags and `TlsError`), `certs` (one parsed certificate),
//! `store` (the certificates and the SNI index), `client_auth` (client-certificate verification
//! and the verified subject), `handshake` (the TLS port's handshake and its failure reasons) and
//! `watcher` (hot rotation); `backend` is the other direction, the CA bundles TLS backends are
//! verified against, reloaded the same way. This file holds `Tls`, which loads them at startup and hands out
//! the listener settings, the forwarding settings, the acceptor and the watcher; other modules
//! import everything from here.

mod alt_names;
mod backend;
mod certs;
mod client_auth;
mod handshake;
mod kept;
mod listener_auth;
mod local_ip;
mod options;
mod secrets;
mod store;
mod terminator;
mod watcher;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use pingora::listeners::tls::TlsSettings;
use rustls::server::danger::ClientCertVerifier;

use crate::decide::edits::Forwarding;
use crate::ops::metrics::Metrics;
use store::SniResolver;
use watcher::{Seen, cert_files, publish_expiry, read_file, resolve_default};

pub use backend::{BackendTls, BackendTlsWatcher, CaNotLoaded, ConfigKey, NotLoaded, TlsChoice};
pub use certs::LoadedCert;
use client_auth::RecordPeer;
pub use client_auth::{ClientAuth, IngressPeer, PeerCert, client_ca, client_cert, ingress_subject};
pub use handshake::{HandshakeAcceptor, handshake_failure};
pub use options::{ClientVerify, DEFAULT_HSTS_MAX_AGE, TlsError, TlsOptions};
pub use secrets::{SecretCerts, SecretPem};
pub use store::{CertInfo, CertSource, CertStore};
pub use terminator::Terminators;
pub use watcher::CertWatcher;

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
            flag: "--ssl-cert",
            path: options.cert.clone().unwrap_or_default(),
            source,
        })?;
        let store = Arc::new(CertStore::default());
        match &options.cert {
            Some(cert) if files.is_empty() => {
                return Err(TlsError::EmptyDir { path: cert.clone() });
            }
            Some(_) => {}
            None => {
                let cert = LoadedCert::self_signed().map_err(TlsError::Generate)?;
                tracing::info!(
                    name = certs::SELF_SIGNED_NAME,
                    "no --ssl-cert: serving a generated self-signed certificate to names no \
                     Secret covers"
                );
                store.insert(CertSource::Generated, cert);
                store.set_default(Some(CertSource::Generated));
            }
        }
        let mut seen = Seen::default();
        for path in &files {
            let (stamp, pem) = read_file(path).map_err(|source| TlsError::Read {
                flag: "--ssl-cert",
                path: path.clone(),
                source,
            })?;
            let cert = LoadedCert::from_pem(&pem).map_err(|reason| TlsError::Invalid {
                flag: "--ssl-cert",
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
                    flag: "--ssl-ca-cert",
                    path: path.clone(),
                    source,
                })?;
                let auth = ClientAuth::from_pem(&pem, options.verify, now).map_err(|reason| {
                    TlsError::Invalid {
                        flag: "--ssl-ca-cert",
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
                names = %c.names.join(","),
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

    /// The Secrets' certificate source, loading into this store.
    pub fn secret_certs(&self) -> SecretCerts {
        SecretCerts::new(Arc::clone(&self.store), self.metrics.clone())
    }

    /// Listener settings for Pingora: TLS 1.2 and 1.3 (Pingora's rustls listener allows no
    /// other), ALPN h2 then http/1.1, certificates by SNI from the store, client verification
    /// when configured, and the client certificate recorded for `HttpsPolicy`.
    pub fn listener_settings(&self) -> Result<TlsSettings, TlsError> {
        let recorder = RecordPeer {
            metrics: self.metrics.clone(),
            proof: None,
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
            listeners: listener_auth::ListenerAuth::new(
                Arc::clone(&self.store),
                self.metrics.clone(),
            ),
            timeout,
            metrics: self.metrics.clone(),
            by_local_address: false,
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

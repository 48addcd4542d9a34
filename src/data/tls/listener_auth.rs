//! The handshakes of Gateway HTTPS listeners and Ingress hosts that verify client
//! certificates (`spec.tls.frontend`, `auth-tls-*`): one rustls configuration per CA bundle
//! and mode, made the first time a hello asks for it and kept for the next ones (a handful:
//! one per distinct bundle in the table). An Ingress host's takes any certificate and records
//! whether it verified (within `auth-tls-verify-depth`), for the request to be judged as
//! nginx judges it. Each presents the same certificates by SNI as the TLS port's own configuration and
//! records, with the verified certificate, which bundle it verified against, for the request
//! side to check (`client_auth::client_ca`). A bundle that cannot be used (no certificate,
//! every one expired) makes no configuration: its handshakes fail, never fall back to one
//! that asks nothing. It must not choose the bundle (the caller does, from the table).

use std::sync::Arc;
use std::time::SystemTime;

use pingora::listeners::tls::{Acceptor, TlsSettings};
use rustls::server::danger::ClientCertVerifier;

use super::client_auth::{Fallback, Proof, RecordPeer, verifier_from_pem};
use super::kept::Kept;
use super::options::ClientVerify;
use super::store::{CertStore, SniResolver};
use crate::ops::metrics::Metrics;
use crate::table::client_validation::ClientValidation;

/// One CA bundle and mode, and its configuration (`None`: the bundle is unusable).
struct Made {
    ca: Arc<[u8]>,
    insecure_fallback: bool,
    /// An Ingress host's: the verify depth.
    ingress_depth: Option<u8>,
    acceptor: Option<Arc<Acceptor>>,
}

/// The listeners' configurations, made on first use.
pub(super) struct ListenerAuth {
    store: Arc<CertStore>,
    metrics: Option<Arc<Metrics>>,
    made: Kept<Made>,
}

impl ListenerAuth {
    pub(super) fn new(store: Arc<CertStore>, metrics: Option<Arc<Metrics>>) -> ListenerAuth {
        ListenerAuth {
            store,
            metrics,
            made: Kept::default(),
        }
    }

    /// The configuration that verifies clients as `v` asks: against its CA bundle (PEM),
    /// asking for a certificate and requiring one unless it falls back or is an Ingress
    /// host's; `None` when the bundle is unusable.
    pub(super) fn acceptor(&self, v: &ClientValidation) -> Option<Arc<Acceptor>> {
        let ca = &v.ca;
        let ingress_depth = v.ingress.as_ref().map(|i| i.depth);
        let insecure_fallback = v.insecure_fallback || ingress_depth.is_some();
        let made = self.made.get_or_make(
            |m| {
                m.insecure_fallback == insecure_fallback
                    && m.ingress_depth == ingress_depth
                    && *m.ca == **ca
            },
            || Made {
                ca: Arc::clone(ca),
                insecure_fallback,
                ingress_depth,
                acceptor: self
                    .make(ca, insecure_fallback, ingress_depth)
                    .map(Arc::new),
            },
        );
        made.acceptor.clone()
    }

    fn make(
        &self,
        ca: &Arc<[u8]>,
        insecure_fallback: bool,
        ingress_depth: Option<u8>,
    ) -> Option<Acceptor> {
        let strict = match verifier_from_pem(ca, ClientVerify::Required, SystemTime::now()) {
            Ok(v) => v,
            Err(why) => {
                tracing::warn!(
                    reason = %why,
                    "a Gateway listener's client CA bundle cannot be used: its handshakes fail"
                );
                return None;
            }
        };
        let verifier: Arc<dyn ClientCertVerifier> = if insecure_fallback {
            Arc::new(Fallback {
                strict: Arc::clone(&strict),
            })
        } else {
            Arc::clone(&strict)
        };
        let recorder = RecordPeer {
            metrics: self.metrics.clone(),
            proof: Some(Proof {
                ca: Arc::clone(ca),
                strict: insecure_fallback.then_some(strict),
                ingress_depth,
            }),
        };
        let mut settings = match TlsSettings::with_callbacks(Box::new(recorder)) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot make a Gateway listener's TLS configuration");
                return None;
            }
        };
        settings.set_cert_resolver(Arc::new(SniResolver(Arc::clone(&self.store))));
        settings.set_client_cert_verifier(verifier);
        settings.enable_h2();
        Some(settings.build())
    }
}

//! TLS termination for Gateway TLS listeners in Terminate mode (`Terminators`): a rustls
//! acceptor per set of certificates (the listener's, PEM chain and key each), made the first
//! time a connection needs it and kept for the next ones, choosing the certificate by the
//! hello's server name among its own (exact, then wildcard, then the first). No ALPN is
//! offered: what is relayed is the client's byte stream, not HTTP. A set none of whose
//! certificates loads makes no acceptor, so its connections are closed, never passed through.
//! It must not choose the set (the caller does, from the table) or read files.

use std::fmt;
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

use super::certs::{LoadedCert, provider};
use super::kept::Kept;
use super::store::{CertSource, CertStore};

/// One set of certificates and its acceptor (`None`: none of them loads).
struct Made {
    certificates: Arc<[Arc<[u8]>]>,
    acceptor: Option<TlsAcceptor>,
}

/// The acceptors of the TLS listeners that terminate, made on first use.
#[derive(Default)]
pub struct Terminators {
    made: Kept<Made>,
}

impl fmt::Debug for Terminators {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Terminators").finish_non_exhaustive()
    }
}

impl Terminators {
    /// The acceptor serving `certificates` (PEM bundles); `None` when none of them loads.
    pub fn acceptor(&self, certificates: &Arc<[Arc<[u8]>]>) -> Option<TlsAcceptor> {
        let made = self.made.get_or_make(
            |m| Arc::ptr_eq(&m.certificates, certificates) || m.certificates == *certificates,
            || Made {
                certificates: Arc::clone(certificates),
                acceptor: make(certificates),
            },
        );
        made.acceptor.clone()
    }
}

fn make(certificates: &[Arc<[u8]>]) -> Option<TlsAcceptor> {
    let store = Arc::new(CertStore::default());
    for (i, pem) in certificates.iter().enumerate() {
        match LoadedCert::from_pem(pem) {
            Ok(cert) => store.insert(CertSource::Secret(format!("listener-{i:04}")), cert),
            Err(why) => {
                tracing::warn!(reason = %why, "a TLS listener's certificate cannot be used");
            }
        }
    }
    if store.is_empty() {
        tracing::warn!("no certificate of a terminating TLS listener loads: its connections fail");
        return None;
    }
    let config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS12, &rustls::version::TLS13])
        .ok()?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Own(store)));
    Some(TlsAcceptor::from(Arc::new(config)))
}

/// The listener's certificates by server name; without a match, the first.
#[derive(Debug)]
struct Own(Arc<CertStore>);

impl ResolvesServerCert for Own {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.resolve(hello.server_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::tls::certs::tests::bundle;

    #[test]
    fn acceptors_are_made_once_per_set_and_not_for_unusable_ones() {
        let (pem, _) = bundle(&["tls.example.com"]);
        let set: Arc<[Arc<[u8]>]> = Arc::from(vec![Arc::<[u8]>::from(pem.as_bytes())]);
        let t = Terminators::default();
        assert!(t.acceptor(&set).is_some());
        // The same content in another allocation (a new table) finds the kept one.
        let again: Arc<[Arc<[u8]>]> = Arc::from(vec![Arc::<[u8]>::from(pem.as_bytes())]);
        assert!(t.acceptor(&again).is_some());
        assert_eq!(t.made.len(), 1);
        let broken: Arc<[Arc<[u8]>]> = Arc::from(vec![Arc::<[u8]>::from(&b"not pem"[..])]);
        assert!(t.acceptor(&broken).is_none());
        let none: Arc<[Arc<[u8]>]> = Arc::from(Vec::new());
        assert!(t.acceptor(&none).is_none());
    }
}

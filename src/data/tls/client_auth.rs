//! Client certificates: `ClientAuth` verifies them against a CA bundle that can be replaced
//! while serving, `RecordPeer` counts completed handshakes and keeps the verified subject in
//! Pingora's TLS digest (`PeerCert`), and `peer_subject` / `client_cert` read it back for the
//! request side. It must not read files or decide what a request does with the subject.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwap;
use async_trait::async_trait;
use pingora::listeners::TlsAccept;
use pingora::protocols::tls::{SslDigest, TlsRef};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use x509_parser::prelude::parse_x509_certificate;

use super::certs::{one_line_dn, provider, system_time};
use super::options::ClientVerify;
use crate::decide::edits::ClientCert;
use crate::ops::metrics::Metrics;

/// The TLS frontend's metric label.
pub(super) const FRONTEND_LABEL: &str = "https";

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

pub(super) fn verifier_from_pem(
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

/// A verifier that asks for a certificate and takes the handshake whatever it gets (a
/// Gateway listener's `AllowInsecureFallback`): `RecordPeer` then keeps the certificate only
/// if `strict` verifies it. The handshake signatures are still checked (the client holds the
/// key of what it sent).
#[derive(Debug)]
pub(super) struct Fallback {
    pub(super) strict: Arc<dyn ClientCertVerifier>,
}

impl ClientCertVerifier for Fallback {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.strict.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.strict.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.strict.supported_verify_schemes()
    }
}

/// The client certificate of a connection, kept in Pingora's TLS digest: a verified one, or
/// on an Ingress host's handshake (which takes any) one that did not verify.
#[derive(Debug, Clone)]
pub struct PeerCert {
    /// One-line subject DN.
    pub subject: String,
    /// The Gateway listener's or Ingress host's CA bundle it verified against (`None`:
    /// `--ssl-ca-cert`'s, or it did not verify).
    pub ca: Option<Arc<[u8]>>,
    /// What an Ingress host's backend is told of it (`None`: not an Ingress host's handshake).
    pub ingress: Option<Box<IngressPeer>>,
}

/// A client certificate as ingress-nginx tells backends of it (`ssl-client-*`).
#[derive(Debug, Clone)]
pub struct IngressPeer {
    /// Subject and issuer as nginx's `$ssl_client_s_dn` and `$ssl_client_i_dn` (RFC 2253).
    pub subject: Arc<str>,
    pub issuer: String,
    /// The certificate in PEM, percent-encoded (`$ssl_client_escaped_cert`).
    pub escaped: String,
    /// Why it did not verify (`None`: it did).
    pub failure: Option<String>,
}

impl PeerCert {
    fn verified(&self) -> bool {
        self.ingress.as_ref().is_none_or(|i| i.failure.is_none())
    }
}

/// What a listener's or Ingress host's handshake proves: the CA bundle, and for one that
/// takes any certificate (`AllowInsecureFallback`, an Ingress host) the verifier that decides
/// whether the certificate it took proves anything.
pub(super) struct Proof {
    pub(super) ca: Arc<[u8]>,
    pub(super) strict: Option<Arc<dyn ClientCertVerifier>>,
    /// An Ingress host's: the longest chain to the bundle (`auth-tls-verify-depth`); a
    /// certificate that does not verify is recorded too, with why.
    pub(super) ingress_depth: Option<u8>,
}

/// Counts completed handshakes and records the client certificate. rustls only keeps a peer
/// certificate that the verifier accepted, so its presence means verification succeeded —
/// but for a fallback listener's or an Ingress host's, which `Proof::strict` verifies again
/// here.
pub(super) struct RecordPeer {
    pub(super) metrics: Option<Arc<Metrics>>,
    pub(super) proof: Option<Proof>,
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
        let mut failure = None;
        if let Some(proof) = &self.proof
            && let Some(strict) = &proof.strict
        {
            let (end_entity, intermediates) = tls.peer_cert_chain_der()?.split_first()?;
            // A chain of `depth` certificates from the client's own to the bundle: at most
            // `depth - 1` of the client's intermediates can be on it.
            let most = proof
                .ingress_depth
                .map_or(intermediates.len(), |d| usize::from(d.saturating_sub(1)));
            let intermediates = &intermediates[..most.min(intermediates.len())];
            if let Err(e) = strict.verify_client_cert(end_entity, intermediates, UnixTime::now()) {
                tracing::debug!(error = %e, "client certificate not verified");
                // Only an Ingress host's handshake records one that did not verify.
                proof.ingress_depth?;
                failure = Some(e.to_string());
            }
        }
        let parsed = parse_x509_certificate(der).ok().map(|(_, cert)| cert);
        let subject = parsed.as_ref().map(one_line_dn).unwrap_or_default();
        let ingress = self
            .proof
            .as_ref()
            .filter(|p| p.ingress_depth.is_some())
            .map(|_| {
                let (subject, issuer) = parsed.as_ref().map_or_else(Default::default, |c| {
                    (rfc2253_dn(c.subject()), rfc2253_dn(c.issuer()))
                });
                Box::new(IngressPeer {
                    subject: subject.into(),
                    issuer,
                    escaped: crate::decide::edits::escaped_pem(der),
                    failure,
                })
            });
        let verified = ingress.as_ref().is_none_or(|i| i.failure.is_none());
        let ca = self
            .proof
            .as_ref()
            .filter(|_| verified)
            .map(|p| Arc::clone(&p.ca));
        Some(Arc::new(PeerCert {
            subject,
            ca,
            ingress,
        }))
    }
}

/// The Gateway listener or Ingress host CA bundle a connection's client certificate verified
/// against.
pub fn client_ca(ssl: Option<&SslDigest>) -> Option<Arc<[u8]>> {
    ssl.and_then(|s| s.extension.get::<PeerCert>())
        .and_then(|p| p.ca.clone())
}

/// The subject (RFC 2253) of the certificate an Ingress host's handshake took, verified or
/// not (`None`: none was presented, or the handshake was not an Ingress host's).
pub fn ingress_subject(ssl: Option<&SslDigest>) -> Option<Arc<str>> {
    ssl.and_then(|s| s.extension.get::<PeerCert>())
        .and_then(|p| p.ingress.as_ref())
        .map(|i| Arc::clone(&i.subject))
}

/// What a frontend's connection proved, for the request edits (`decide::edits`).
pub fn client_cert(ssl: Option<&SslDigest>) -> ClientCert<'_> {
    let Some(p) = ssl.and_then(|s| s.extension.get::<PeerCert>()) else {
        return ClientCert::Absent;
    };
    let (issuer, escaped) = p
        .ingress
        .as_deref()
        .map_or(("", ""), |i| (i.issuer.as_str(), i.escaped.as_str()));
    let dn = p.ingress.as_deref().map_or("", |i| &*i.subject);
    match p.ingress.as_deref().and_then(|i| i.failure.as_deref()) {
        Some(reason) if !p.verified() => ClientCert::Failed {
            reason,
            dn,
            issuer,
            escaped,
        },
        _ => ClientCert::Verified {
            subject: &p.subject,
            dn,
            issuer,
            escaped,
        },
    }
}

/// A distinguished name as nginx's `$ssl_client_s_dn` writes it (RFC 2253: the most specific
/// RDN first, `,` between them, `+` within one, `,+"\<>;` and a leading `#` or space escaped).
/// Control characters become `?` (they cannot travel in a header).
fn rfc2253_dn(name: &x509_parser::x509::X509Name<'_>) -> String {
    let mut out = String::new();
    let rdns: Vec<_> = name.iter_rdn().collect();
    for (i, rdn) in rdns.iter().rev().enumerate() {
        if i > 0 {
            out.push(',');
        }
        for (j, attr) in rdn.iter().enumerate() {
            if j > 0 {
                out.push('+');
            }
            let oid = attr.attr_type();
            match x509_parser::objects::oid2abbrev(oid, x509_parser::objects::oid_registry()) {
                Ok(key) => out.push_str(key),
                Err(_) => out.push_str(&oid.to_id_string()),
            }
            out.push('=');
            let value = attr.as_str().unwrap_or("?");
            for (k, c) in value.chars().enumerate() {
                let leading = k == 0 && (c == '#' || c == ' ');
                if leading || matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';') {
                    out.push('\\');
                }
                out.push(if c.is_control() { '?' } else { c });
            }
        }
    }
    out.chars().take(super::certs::MAX_DN_LEN).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::tls::certs::tests::bundle;
    use std::time::Duration;

    #[test]
    fn an_ingress_peer_s_names_are_written_as_nginx_writes_them() {
        let mut params = rcgen::CertificateParams::new(vec!["client.test".into()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CountryName, "DE");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "Shop, Inc");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "alice");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let (_, parsed) = parse_x509_certificate(cert.der()).unwrap();
        assert_eq!(rfc2253_dn(parsed.subject()), "CN=alice,O=Shop\\, Inc,C=DE");
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
}

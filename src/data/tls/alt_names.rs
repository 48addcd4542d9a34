//! Verifying a backend's certificate against the names a BackendTLSPolicy lists in
//! `subjectAltNames` instead of the name sent (`AltNamesVerifier`): the chain is verified as
//! ever (the bundle or roots, validity, usage), then the certificate must carry one of the
//! names — a DNS name matched as webpki matches a server name (the certificate's wildcards
//! included), a `*.` name the certificate must itself list, or a URI equal to one of its URI
//! names. The name sent as SNI authenticates nothing then, as the Gateway API asks. Used by
//! both engines' connections (the fast path's configuration and Pingora's peer). It must not
//! choose the names (the table does) or do I/O.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, Error, SignatureScheme};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::parse_x509_certificate;

use crate::table::upstream::SubjectAltName;

/// A verifier for the chain and the policy's names.
#[derive(Debug)]
pub struct AltNamesVerifier {
    chain: Arc<WebPkiServerVerifier>,
    names: Arc<[SubjectAltName]>,
}

impl AltNamesVerifier {
    pub fn new(chain: Arc<WebPkiServerVerifier>, names: Arc<[SubjectAltName]>) -> AltNamesVerifier {
        AltNamesVerifier { chain, names }
    }

    /// Whether the certificate (whose chain verified) carries one of the names.
    fn carries_a_name(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> bool {
        let listed = || -> Vec<(bool, String)> {
            // (URI?, name) of the certificate's subjectAltName, lower-cased DNS names.
            let Ok((_, cert)) = parse_x509_certificate(end_entity) else {
                return Vec::new();
            };
            let Ok(Some(san)) = cert.subject_alternative_name() else {
                return Vec::new();
            };
            san.value
                .general_names
                .iter()
                .filter_map(|g| match g {
                    GeneralName::DNSName(d) => Some((false, d.to_ascii_lowercase())),
                    GeneralName::URI(u) => Some((true, (*u).to_string())),
                    _ => None,
                })
                .collect()
        };
        self.names.iter().any(|name| match name {
            SubjectAltName::Dns(d) if d.starts_with("*.") => {
                listed().iter().any(|(uri, n)| !uri && n == &**d)
            }
            SubjectAltName::Dns(d) => ServerName::try_from(d.to_string()).is_ok_and(|server| {
                self.chain
                    .verify_server_cert(end_entity, intermediates, &server, &[], now)
                    .is_ok()
            }),
            SubjectAltName::Uri(u) => listed().iter().any(|(uri, n)| *uri && n == &**u),
        })
    }
}

impl ServerCertVerifier for AltNamesVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        // The chain, whatever the name sent: only a name error is not one here.
        match self
            .chain
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Ok(_)
            | Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => {}
            Err(e) => return Err(e),
        }
        if self.carries_a_name(end_entity, intermediates, now) {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(Error::InvalidCertificate(CertificateError::NotValidForName))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.chain.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.chain.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.chain.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
    use rustls::RootCertStore;

    /// A CA and a leaf it signs with these DNS names and URIs, as DER.
    fn signed(dns: &[&str], uris: &[&str]) -> (CertificateDer<'static>, CertificateDer<'static>) {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "alt names CA");
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let mut leaf =
            CertificateParams::new(dns.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        for u in uris {
            leaf.subject_alt_names.push(SanType::URI(
                rcgen::string::Ia5String::try_from(*u).unwrap(),
            ));
        }
        let key = KeyPair::generate().unwrap();
        let cert = leaf.signed_by(&key, &issuer).unwrap();
        (
            CertificateDer::from(ca_cert.der().to_vec()),
            CertificateDer::from(cert.der().to_vec()),
        )
    }

    fn verifier(ca: &CertificateDer<'static>, names: Vec<SubjectAltName>) -> AltNamesVerifier {
        let mut roots = RootCertStore::empty();
        roots.add(ca.clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .unwrap();
        AltNamesVerifier::new(chain, Arc::from(names))
    }

    fn verifies(v: &AltNamesVerifier, leaf: &CertificateDer<'_>, sent: &str) -> bool {
        let sent = ServerName::try_from(sent.to_string()).unwrap();
        v.verify_server_cert(leaf, &[], &sent, &[], UnixTime::now())
            .is_ok()
    }

    #[test]
    fn one_listed_name_is_enough_and_the_name_sent_is_not() {
        let (ca, leaf) = signed(
            &["backend.internal", "*.svc.test"],
            &["spiffe://cluster.test/ns/a/sa/b"],
        );
        let dns = |n: &str| SubjectAltName::Dns(n.into());
        let uri = |n: &str| SubjectAltName::Uri(n.into());
        // The name sent is not on the certificate; a listed one is.
        assert!(verifies(
            &verifier(&ca, vec![dns("backend.internal")]),
            &leaf,
            "sent.test"
        ));
        // The certificate's wildcard covers a listed name; a listed wildcard must be listed.
        assert!(verifies(
            &verifier(&ca, vec![dns("x.svc.test")]),
            &leaf,
            "sent.test"
        ));
        assert!(verifies(
            &verifier(&ca, vec![dns("*.svc.test")]),
            &leaf,
            "sent.test"
        ));
        assert!(!verifies(
            &verifier(&ca, vec![dns("*.other.test")]),
            &leaf,
            "x.other.test"
        ));
        assert!(verifies(
            &verifier(
                &ca,
                vec![dns("nope.test"), uri("spiffe://cluster.test/ns/a/sa/b")]
            ),
            &leaf,
            "sent.test"
        ));
        assert!(!verifies(
            &verifier(&ca, vec![uri("spiffe://cluster.test/ns/a/sa/c")]),
            &leaf,
            "sent.test"
        ));
        // The name sent authenticates nothing when names are listed, even if the certificate
        // has it.
        assert!(!verifies(
            &verifier(&ca, vec![dns("nope.test")]),
            &leaf,
            "backend.internal"
        ));
        // A chain another CA signed fails whatever the names.
        let (other_ca, _) = signed(&["backend.internal"], &[]);
        assert!(!verifies(
            &verifier(&other_ca, vec![dns("backend.internal")]),
            &leaf,
            "backend.internal"
        ));
    }
}

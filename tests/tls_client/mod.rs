//! TLS fixtures shared by the TLS-speaking end-to-end tests: a test CA issuing server and
//! client certificates (rcgen), and a rustls client-side verifier that accepts any server
//! certificate, because those tests compare the presented certificate byte for byte instead
//! (which also works without SNI, where there is no name to verify).
#![allow(dead_code)]

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

#[derive(Debug)]
pub struct AnyServerCert;

impl ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A test certificate authority (rcgen): issues server and client leaves.
pub struct Ca {
    /// Signs leaves (a test may make its own odd ones).
    pub issuer: Issuer<'static, KeyPair>,
    /// The CA certificate (PEM), for `--ssl-ca-cert`.
    pub pem: String,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).unwrap();
        Ca {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    pub fn server(&self, names: &[&str]) -> Leaf {
        self.leaf(names, names[0], ExtendedKeyUsagePurpose::ServerAuth, false)
    }

    pub fn client(&self, cn: &str) -> Leaf {
        self.leaf(&[], cn, ExtendedKeyUsagePurpose::ClientAuth, false)
    }

    pub fn expired_client(&self, cn: &str) -> Leaf {
        self.leaf(&[], cn, ExtendedKeyUsagePurpose::ClientAuth, true)
    }

    fn leaf(&self, names: &[&str], cn: &str, eku: ExtendedKeyUsagePurpose, expired: bool) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(DnType::OrganizationName, "Switchyard Tests");
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![eku];
        if expired {
            params.not_before = rcgen::date_time_ymd(2001, 1, 1);
            params.not_after = rcgen::date_time_ymd(2002, 1, 1);
        }
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            der: cert.der().to_vec(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

/// A certificate issued by a [`Ca`], with its key.
pub struct Leaf {
    pub der: Vec<u8>,
    pub cert_pem: String,
    pub key_pem: String,
}

impl Leaf {
    /// HAProxy style: chain and key in one file.
    pub fn bundle(&self) -> String {
        format!("{}{}", self.cert_pem, self.key_pem)
    }
}

/// An HTTP/1.1 (ALPN) client configuration that accepts any server certificate and, with
/// `cert`, presents that client certificate.
pub fn client_config(cert: Option<&Leaf>) -> rustls::ClientConfig {
    use rustls::pki_types::PrivateKeyDer;
    use rustls::pki_types::pem::PemObject;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(std::sync::Arc::new(AnyServerCert));
    let mut config = match cert {
        Some(leaf) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from(leaf.der.clone())],
                PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).expect("client key"),
            )
            .expect("client certificate"),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config
}

/// A server configuration presenting `leaf`, offering `alpn` (e.g. `h2`, `http/1.1`).
pub fn server_config(leaf: &Leaf, alpn: &[&[u8]]) -> std::sync::Arc<rustls::ServerConfig> {
    use rustls::pki_types::PrivateKeyDer;
    use rustls::pki_types::pem::PemObject;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(leaf.der.clone())],
            PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).expect("server key"),
        )
        .expect("server certificate");
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    std::sync::Arc::new(config)
}

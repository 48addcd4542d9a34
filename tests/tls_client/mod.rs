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

// ---------------------------------------------------------------------------
// A rustls client
// ---------------------------------------------------------------------------

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Version};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::ClientConfig;
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::common::Resp;

/// The longest any TLS client step may take.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// A rustls client for the TLS port: SNI or none, a client certificate or none, HTTP/1.1 or
/// h2 by ALPN; it accepts any server certificate (tests compare the presented one).
#[derive(Default)]
pub struct Client<'a> {
    pub sni: Option<&'a str>,
    pub cert: Option<&'a Leaf>,
    pub h2: bool,
}

impl Client<'_> {
    pub fn config(&self) -> ClientConfig {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServerCert));
        let mut config = match self.cert {
            Some(leaf) => builder
                .with_client_auth_cert(
                    vec![CertificateDer::from(leaf.der.clone())],
                    PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap(),
                )
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        config.enable_sni = self.sni.is_some();
        config.alpn_protocols = if self.h2 {
            vec![b"h2".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        config
    }

    pub async fn connect(&self, port: u16) -> Result<TlsStream<TcpStream>, String> {
        self.connect_at("127.0.0.1", port).await
    }

    /// `connect` to local address `ip` (a `127.0.0.x`).
    pub async fn connect_at(&self, ip: &str, port: u16) -> Result<TlsStream<TcpStream>, String> {
        let fut = async {
            let tcp = TcpStream::connect((ip, port))
                .await
                .map_err(|e| format!("connect: {e}"))?;
            let name = ServerName::try_from(self.sni.unwrap_or("no-sni.invalid").to_string())
                .map_err(|e| e.to_string())?;
            TlsConnector::from(Arc::new(self.config()))
                .connect(name, tcp)
                .await
                .map_err(|e| format!("handshake: {e}"))
        };
        tokio::time::timeout(IO_TIMEOUT, fut)
            .await
            .map_err(|_| "timeout".to_string())?
    }

    /// The leaf certificate the server presented.
    pub async fn presented(&self, port: u16) -> Vec<u8> {
        let tls = self.connect(port).await.unwrap();
        tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
    }

    /// The leaf certificate presented on local address `ip`, if the handshake succeeded.
    pub async fn presented_at(&self, ip: &str, port: u16) -> Option<Vec<u8>> {
        let tls = self.connect_at(ip, port).await.ok()?;
        Some(tls.get_ref().1.peer_certificates()?.first()?.to_vec())
    }

    /// One request over a fresh TLS connection. With TLS 1.3 a rejected client certificate
    /// only shows on the first read, so "the handshake fails" means this returns an error.
    pub async fn get(
        &self,
        port: u16,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<Resp, String> {
        let tls = self.connect(port).await?;
        let host = self.sni.unwrap_or("127.0.0.1");
        let fut = async {
            let io = TokioIo::new(tls);
            let mut b = Request::get(if self.h2 {
                format!("https://{host}{path}")
            } else {
                path.to_string()
            });
            if !self.h2 {
                b = b.header("host", host);
            }
            for (k, v) in headers {
                b = b.header(*k, *v);
            }
            let req = b.body(Empty::<Bytes>::new()).unwrap();
            let resp = if self.h2 {
                let (mut send, conn) =
                    hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                        .await
                        .map_err(|e| format!("h2 handshake: {e}"))?;
                tokio::spawn(conn);
                send.send_request(req).await
            } else {
                let (mut send, conn) = hyper::client::conn::http1::handshake(io)
                    .await
                    .map_err(|e| format!("h1 handshake: {e}"))?;
                tokio::spawn(conn);
                send.send_request(req).await
            }
            .map_err(|e| format!("request: {e}"))?;
            let (parts, body) = resp.into_parts();
            if self.h2 {
                assert_eq!(parts.version, Version::HTTP_2, "the response came over h2");
            }
            let body = body
                .collect()
                .await
                .map_err(|e| format!("body: {e}"))?
                .to_bytes();
            Ok(Resp {
                status: parts.status.as_u16(),
                headers: parts.headers,
                body: String::from_utf8_lossy(&body).into_owned(),
            })
        };
        tokio::time::timeout(IO_TIMEOUT, fut)
            .await
            .map_err(|_| "timeout".to_string())?
    }
}

/// A client that sends `name` as SNI (and as Host).
pub fn sni(name: &str) -> Client<'_> {
    Client {
        sni: Some(name),
        ..Default::default()
    }
}

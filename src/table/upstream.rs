//! How switchyard speaks to an entry's endpoints: HTTP/1 or HTTP/2, in clear or over TLS, and
//! for TLS the name it sends and whether it verifies the certificate. Set per Service port by
//! translate (`appProtocol`, or the `lb.backend-protocol` annotation); read by the engines.
//! Plain data: no Pingora, tokio or Kubernetes here.

use std::sync::Arc;

use serde::Serialize;

/// The protocol to an entry's endpoints.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendProtocol {
    /// HTTP/1.1 in clear (the default).
    #[default]
    Http,
    /// HTTP/2 in clear, with prior knowledge (`kubernetes.io/h2c`, `grpc`).
    H2c,
    /// HTTP/1.1 over TLS.
    Https,
    /// HTTP/2 over TLS, negotiated by ALPN (`grpcs`).
    H2,
}

impl BackendProtocol {
    /// Reads a Service port's `appProtocol` or the `lb.backend-protocol` annotation: the
    /// Kubernetes standard values (`kubernetes.io/h2c`, `kubernetes.io/ws`, `kubernetes.io/wss`)
    /// and the common ones (`http`, `https`, `h2c`, `h2`, `grpc`, `grpcs`, any case).
    pub fn parse(value: &str) -> Option<BackendProtocol> {
        Some(match value.trim().to_ascii_lowercase().as_str() {
            "http" | "http1" | "kubernetes.io/ws" => BackendProtocol::Http,
            "h2c" | "grpc" | "kubernetes.io/h2c" => BackendProtocol::H2c,
            "https" | "kubernetes.io/wss" => BackendProtocol::Https,
            "h2" | "grpcs" => BackendProtocol::H2,
            _ => return None,
        })
    }

    /// The same protocol over TLS (HTTP/1.1 or HTTP/2 as before).
    pub fn over_tls(self) -> BackendProtocol {
        match self {
            BackendProtocol::Http | BackendProtocol::Https => BackendProtocol::Https,
            BackendProtocol::H2c | BackendProtocol::H2 => BackendProtocol::H2,
        }
    }

    pub fn tls(self) -> bool {
        matches!(self, BackendProtocol::Https | BackendProtocol::H2)
    }

    pub fn http2(self) -> bool {
        matches!(self, BackendProtocol::H2c | BackendProtocol::H2)
    }

    /// `http`, `h2c`, `https`, `h2`: for `/explain`, the stats page and logs.
    pub fn label(self) -> &'static str {
        match self {
            BackendProtocol::Http => "http",
            BackendProtocol::H2c => "h2c",
            BackendProtocol::Https => "https",
            BackendProtocol::H2 => "h2",
        }
    }
}

/// The connection to an entry's endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Upstream {
    pub protocol: BackendProtocol,
    /// For TLS: the server name sent and verified (the Service's DNS name unless
    /// `lb.backend-sni` says otherwise).
    pub sni: Box<str>,
    /// For TLS: verify the endpoint's certificate (off only by `lb.backend-insecure-skip-verify`).
    pub verify: bool,
    /// For TCP entries: a PROXY v2 header naming the client goes to the endpoint ahead of the
    /// client's bytes (`lb.send-proxy-protocol: v2`).
    pub send_proxy: bool,
    /// For TLS: the CA bundle (PEM file path) to verify against instead of `--backend-ca-file`
    /// (`lb.backend-ca-file`); the data plane loads it and follows its changes.
    pub ca_file: Option<Box<str>>,
    /// For TLS: the CA bundle held in a Secret or ConfigMap (`lb.backend-ca-secret`,
    /// `lb.backend-ca-configmap`), as translate found it; it takes the place of `ca_file`
    /// and of `--backend-ca-file`.
    pub ca_bundle: Option<CaBundle>,
    /// For TLS: the client certificate chain and key files (PEM) presented to endpoints that
    /// ask for one, instead of `--backend-client-cert` (`lb.backend-client-cert`, `-key`).
    pub client_cert: Option<(Box<str>, Box<str>)>,
    /// For TLS: the names the endpoint's certificate must have one of (a BackendTLSPolicy's
    /// `subjectAltNames`), verified instead of `sni`, which is then only sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject_alt_names: Option<Arc<[SubjectAltName]>>,
}

/// A name an endpoint's certificate must carry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub enum SubjectAltName {
    /// A DNS name (lower case), matched as the certificate's names are matched for SNI
    /// (its wildcards included); written with a leading `*.`, a wildcard the certificate
    /// must itself name.
    Dns(Box<str>),
    /// A URI (a SPIFFE ID, say), equal to one of the certificate's URI names.
    Uri(Box<str>),
}

impl Default for Upstream {
    /// HTTP/1 in clear (verification on, should TLS be chosen).
    fn default() -> Self {
        Upstream {
            protocol: BackendProtocol::Http,
            sni: "".into(),
            verify: true,
            send_proxy: false,
            ca_file: None,
            ca_bundle: None,
            client_cert: None,
            subject_alt_names: None,
        }
    }
}

/// The key of a Secret or ConfigMap that holds a CA bundle (the one cert-manager and
/// trust-manager write).
pub const CA_KEY: &str = "ca.crt";

/// A CA bundle from a Kubernetes object's `ca.crt`, carried in the table as bytes: the data
/// plane parses each distinct content once. A reference that did not resolve keeps its
/// place with no bytes, so that its connections fail closed instead of falling back to a
/// broader trust.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct CaBundle {
    /// `Secret` or `ConfigMap`.
    pub kind: &'static str,
    pub namespace: Box<str>,
    pub name: Box<str>,
    /// The PEM text of its `ca.crt`; `None` when the reference did not resolve (no such
    /// object, no such key, no certificate in it).
    #[serde(skip)]
    pub pem: Option<Arc<[u8]>>,
}

impl std::fmt::Display for CaBundle {
    /// `Secret shop/api-ca`, for logs and errors.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_protocol_values() {
        use BackendProtocol::*;
        for (v, want) in [
            ("kubernetes.io/h2c", Some(H2c)),
            ("kubernetes.io/ws", Some(Http)),
            ("kubernetes.io/wss", Some(Https)),
            ("HTTP", Some(Http)),
            ("https", Some(Https)),
            ("grpc", Some(H2c)),
            ("grpcs", Some(H2)),
            ("h2", Some(H2)),
            ("mysql", None),
            ("", None),
        ] {
            assert_eq!(BackendProtocol::parse(v), want, "{v}");
        }
        assert!(H2.tls() && H2.http2() && !H2c.tls() && Https.tls() && !Http.http2());
    }
}

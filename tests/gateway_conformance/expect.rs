//! upstream's `ExpectedResponse` and how `conformance/utils/http/http.go` checks it:
//! `MakeRequest` (defaults: GET, status 200, `X-Echo-Set-Header` always sent), the
//! round trip of `roundtripper.go` (a fresh connection per request, the echo's JSON read only
//! when `Content-Type` is exactly `application/json`, `Location` parsed on a redirect),
//! `CompareRoundTrip` (status among the expected ones, a 408/504 accepted for an expected
//! timeout; on 200: host if expected, path with query, method, namespace, request headers
//! joined by `,`, response headers, absent response and request headers, pod name prefix;
//! on a redirect: host, port by scheme, scheme, path), and `WaitForConsistentResponse`
//! (`RequiredConsecutiveSuccesses` = 3 in a row, 1 s after a miss, bounded by
//! [`MAX_TIME_TO_CONSISTENCY`]); `MakeRequestAndExpectFailure` (`WaitForConsistentFailureResponse`:
//! 5 answers other than 200 in a row) and the SNI the backend saw (`ExpectedRequest.SNI`,
//! echo-basic's `tls.serverName`).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Request};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

use super::Suite;

/// How long a case may take to become consistent (upstream: `MaxTimeToConsistency`, 30 s by
/// default; 10 s here, everything being local and the table live at readiness).
pub const MAX_TIME_TO_CONSISTENCY: Duration = Duration::from_secs(10);
/// upstream's `RequiredConsecutiveSuccesses`.
pub const REQUIRED_CONSECUTIVE_SUCCESSES: usize = 3;
/// upstream's `RequestTimeout`.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a request goes: the HTTP port (a port-80 listener), or the TLS port (a port-443
/// listener) with this SNI; upstream's TLS client trusts only the listener's certificate, so
/// the certificate presented must be this one (DER).
#[derive(Clone, Debug)]
pub enum Via {
    Http,
    Https { sni: String, cert: Vec<u8> },
}

/// upstream's `roundtripper.RedirectRequest` (empty = not checked, as upstream defaults it).
#[derive(Clone, Debug, Default)]
pub struct Redirect {
    pub scheme: String,
    pub host: String,
    pub port: String,
    pub path: String,
}

/// upstream's `http.ExpectedResponse`, with its `Request`, `ExpectedRequest` and `Response`.
#[derive(Clone, Debug)]
pub struct Exp {
    pub via: Via,
    pub host: String,
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub unfollow_redirect: bool,
    /// `ExpectedRequest` (None: the request made is what must arrive).
    pub expected_request: Option<ExpReq>,
    pub redirect: Option<Redirect>,
    pub backend_set_response_headers: Vec<(String, String)>,
    pub status: Vec<u16>,
    pub response_headers: Vec<(String, String)>,
    pub response_absent: Vec<String>,
    /// `ValidHeaderValues`: each of these response fields must be one of its values.
    pub response_valid: Vec<(String, Vec<String>)>,
    /// `IgnoreWhitespace` for `ValidHeaderValues`.
    pub ignore_whitespace: bool,
    pub backend: String,
    pub namespace: String,
    /// `MirroredTo`: (namespace, Deployment) of every backend that must see a copy.
    pub mirrored_to: Vec<(String, String)>,
    /// The Gateway's address (its `status.addresses`) when it has one of its own
    /// (`--gateway-addresses`); else 127.0.0.1.
    pub address: Option<IpAddr>,
    /// Over TLS, the client certificate offered when the server asks for one (upstream's
    /// `ClientCertificate` and `ClientCertificateKey`).
    pub client_cert: Option<ClientCert>,
    /// A listener's own port (not 80 or 443), which switchyard opens as the manifest says:
    /// connected to as it is. `None`: switchyard's HTTP or TLS port.
    pub port: Option<u16>,
    /// `Request.SNI`: the server name the backend must have been reached with over TLS
    /// (checked on a 200 when no `ExpectedRequest` is given; empty: not checked).
    pub sni: String,
}

/// A client certificate (DER) and its key (PEM).
#[derive(Clone, Debug)]
pub struct ClientCert {
    pub der: Vec<u8>,
    pub key_pem: String,
}

/// Where a Gateway without an address of its own is reached.
const SHARED: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// upstream's `ExpectedRequest`.
#[derive(Clone, Debug, Default)]
pub struct ExpReq {
    pub host: String,
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub absent: Vec<String>,
    /// `SNI`: the server name the backend saw (`tls.serverName`; empty: not checked).
    pub sni: String,
}

/// `http.Request{Path: path}` with nothing else set.
pub fn req(path: &str) -> Exp {
    Exp {
        via: Via::Http,
        host: String::new(),
        method: String::new(),
        path: path.into(),
        headers: vec![],
        unfollow_redirect: false,
        expected_request: None,
        redirect: None,
        backend_set_response_headers: vec![],
        status: vec![],
        response_headers: vec![],
        response_absent: vec![],
        response_valid: vec![],
        ignore_whitespace: false,
        backend: String::new(),
        namespace: String::new(),
        mirrored_to: vec![],
        address: None,
        client_cert: None,
        port: None,
        sni: String::new(),
    }
}

fn pairs(kv: &[(&str, &str)]) -> Vec<(String, String)> {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Exp {
    /// Sent to this Gateway address (upstream's `gwAddr`), as is the default Host.
    pub fn at(mut self, address: IpAddr) -> Self {
        self.address = Some(address);
        self
    }
    /// To a listener's own port (`gwAddr:8443` upstream).
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }
    pub fn host(mut self, h: &str) -> Self {
        self.host = h.into();
        self
    }
    pub fn method(mut self, m: &str) -> Self {
        self.method = m.into();
        self
    }
    pub fn headers(mut self, kv: &[(&str, &str)]) -> Self {
        self.headers = pairs(kv);
        self
    }
    pub fn unfollow(mut self) -> Self {
        self.unfollow_redirect = true;
        self
    }
    pub fn status(mut self, s: u16) -> Self {
        self.status.push(s);
        self
    }
    /// `Backend` and `Namespace`.
    pub fn to(mut self, backend: &str, ns: &str) -> Self {
        self.backend = backend.into();
        self.namespace = ns.into();
        self
    }
    pub fn ns(mut self, ns: &str) -> Self {
        self.namespace = ns.into();
        self
    }
    pub fn expected(mut self, r: ExpReq) -> Self {
        self.expected_request = Some(r);
        self
    }
    pub fn redirect(mut self, r: Redirect) -> Self {
        self.redirect = Some(r);
        self
    }
    pub fn backend_sets(mut self, kv: &[(&str, &str)]) -> Self {
        self.backend_set_response_headers = pairs(kv);
        self
    }
    pub fn response_headers(mut self, kv: &[(&str, &str)]) -> Self {
        self.response_headers = pairs(kv);
        self
    }
    pub fn response_absent(mut self, names: &[&str]) -> Self {
        self.response_absent = names.iter().map(|s| s.to_string()).collect();
        self
    }
    /// `ValidHeaderValues` (with `IgnoreWhitespace` when `ignore_whitespace`).
    pub fn response_valid(mut self, kv: &[(&str, &[&str])], ignore_whitespace: bool) -> Self {
        self.response_valid = kv
            .iter()
            .map(|(k, vs)| (k.to_string(), vs.iter().map(|v| v.to_string()).collect()))
            .collect();
        self.ignore_whitespace = ignore_whitespace;
        self
    }
    pub fn mirrored_to(mut self, ns: &str, deployment: &str) -> Self {
        self.mirrored_to.push((ns.into(), deployment.into()));
        self
    }
    /// `Request.SNI`: the backend must have been reached over TLS with this server name.
    pub fn sni(mut self, sni: &str) -> Self {
        self.sni = sni.into();
        self
    }
    /// Over TLS to the port-443 listeners, with SNI `sni`, expecting certificate `cert`.
    pub fn https(mut self, sni: &str, cert: &[u8]) -> Self {
        self.via = Via::Https {
            sni: sni.into(),
            cert: cert.to_vec(),
        };
        self
    }

    /// Offers this client certificate when the server asks for one (a setup Secret's).
    pub fn client_cert(mut self, leaf: &super::SelfSigned) -> Self {
        self.client_cert = Some(ClientCert {
            der: leaf.der.clone(),
            key_pem: leaf.key_pem.clone(),
        });
        self
    }

    /// A short name for failure messages (upstream's `GetTestCaseName`).
    pub fn name(&self, i: usize) -> String {
        let with = if self.headers.is_empty() {
            ""
        } else {
            " with headers"
        };
        let req = format!(
            "{i} {} request to '{}{}'{with}",
            if self.method.is_empty() {
                "GET"
            } else {
                &self.method
            },
            self.host,
            self.path
        );
        if self.backend.is_empty() {
            format!("{req} should receive a {:?}", self.statuses())
        } else {
            format!("{req} should go to {}", self.backend)
        }
    }

    fn statuses(&self) -> Vec<u16> {
        if self.status.is_empty() {
            vec![200]
        } else {
            self.status.clone()
        }
    }
}

impl ExpReq {
    pub fn path(path: &str) -> ExpReq {
        ExpReq {
            path: path.into(),
            ..Default::default()
        }
    }
    pub fn host(mut self, h: &str) -> Self {
        self.host = h.into();
        self
    }
    pub fn headers(mut self, kv: &[(&str, &str)]) -> Self {
        self.headers = pairs(kv);
        self
    }
    pub fn absent(mut self, names: &[&str]) -> Self {
        self.absent = names.iter().map(|s| s.to_string()).collect();
        self
    }
    pub fn sni(mut self, sni: &str) -> Self {
        self.sni = sni.into();
        self
    }
}

impl Redirect {
    pub fn host(h: &str) -> Redirect {
        Redirect {
            host: h.into(),
            ..Default::default()
        }
    }
    pub fn scheme(mut self, s: &str) -> Self {
        self.scheme = s.into();
        self
    }
    pub fn port(mut self, p: &str) -> Self {
        self.port = p.into();
        self
    }
    pub fn path(mut self, p: &str) -> Self {
        self.path = p.into();
        self
    }
}

/// upstream's `roundtripper.CapturedRequest` (the echo's JSON).
#[derive(Clone, Debug, Default)]
pub struct CapturedRequest {
    pub path: String,
    pub host: String,
    pub method: String,
    pub headers: BTreeMap<String, Vec<String>>,
    pub namespace: String,
    pub pod: String,
    /// `TLS.ServerName`: the SNI the backend was reached with (empty over clear text).
    pub sni: String,
}

/// upstream's `roundtripper.CapturedResponse`.
#[derive(Clone, Debug)]
pub struct CapturedResponse {
    pub status: u16,
    /// Lowercased names.
    pub headers: BTreeMap<String, Vec<String>>,
    pub redirect: Option<Redirect>,
    pub body: String,
}

/// The request as upstream's `MakeRequest` builds it.
struct Outgoing {
    method: String,
    host: String,
    /// Path and query of the URL.
    target: String,
    headers: Vec<(String, String)>,
}

fn outgoing(exp: &Exp) -> Outgoing {
    let method = if exp.method.is_empty() {
        "GET".to_string()
    } else {
        exp.method.clone()
    };
    // The Gateway's address (127.0.0.1 unless it has its own) on the listener's port (80 or
    // 443): the Host a Go client sends when the request's Host is unset omits the scheme's
    // default port.
    let host = if exp.host.is_empty() {
        match exp.address.unwrap_or(SHARED) {
            IpAddr::V4(ip) => ip.to_string(),
            IpAddr::V6(ip) => format!("[{ip}]"),
        }
    } else {
        exp.host.clone()
    };
    let mut headers = vec![("User-Agent".to_string(), "Go-http-client/1.1".to_string())];
    headers.extend(exp.headers.iter().cloned());
    let set: Vec<String> = exp
        .backend_set_response_headers
        .iter()
        .map(|(k, v)| format!("{k}:{v}"))
        .collect();
    headers.push(("X-Echo-Set-Header".to_string(), set.join(",")));
    headers.push(("Accept-Encoding".to_string(), "gzip".to_string()));
    Outgoing {
        method,
        host,
        target: exp.path.clone(),
        headers,
    }
}

/// One round trip over a fresh connection (upstream disables keep-alives).
pub async fn round_trip(
    suite: &Suite,
    exp: &Exp,
) -> Result<(CapturedRequest, CapturedResponse), String> {
    let out = outgoing(exp);
    let fut = async {
        match &exp.via {
            Via::Http => {
                let port = exp.port.unwrap_or(suite.sy.http_port);
                let tcp = TcpStream::connect((exp.address.unwrap_or(SHARED), port))
                    .await
                    .map_err(|e| format!("connect: {e}"))?;
                send(tcp, &out).await
            }
            Via::Https { sni, cert } => {
                let asked = Arc::new(AtomicBool::new(false));
                let tls = tls_connect(
                    exp.address.unwrap_or(SHARED),
                    exp.port.unwrap_or(suite.https_port),
                    sni,
                    exp.client_cert.as_ref().map(|c| (c, Arc::clone(&asked))),
                )
                .await?;
                let presented = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .map(|c| c.to_vec())
                    .unwrap_or_default();
                if &presented != cert {
                    return Err(format!(
                        "for SNI {sni} the TLS port presented another certificate than the \
                         listener's: {} (expected {})",
                        subject(&presented),
                        subject(cert)
                    ));
                }
                let sent = send(tls, &out).await;
                // upstream's GetClientCertificateHook: a client certificate given must have
                // been asked for during the handshake.
                if exp.client_cert.is_some() && !asked.load(Ordering::SeqCst) {
                    return Err(format!(
                        "for SNI {sni} the server did not ask for the client certificate \
                         (answer: {})",
                        match &sent {
                            Ok((_, r)) => r.status.to_string(),
                            Err(e) => e.clone(),
                        }
                    ));
                }
                sent
            }
        }
    };
    tokio::time::timeout(REQUEST_TIMEOUT, fut)
        .await
        .map_err(|_| format!("no answer within {REQUEST_TIMEOUT:?}"))?
}

/// A certificate's subject and names, for messages.
fn subject(der: &[u8]) -> String {
    match x509_parser::parse_x509_certificate(der) {
        Ok((_, cert)) => {
            let names = cert
                .subject_alternative_name()
                .ok()
                .flatten()
                .map(|san| format!("{:?}", san.value.general_names))
                .unwrap_or_default();
            format!("subject {:?} names {names}", cert.subject().to_string())
        }
        Err(e) => format!("unparsable certificate ({e})"),
    }
}

/// Offers a client certificate and records that the server asked for one.
#[derive(Debug)]
struct OfferCert {
    key: Arc<rustls::sign::CertifiedKey>,
    asked: Arc<AtomicBool>,
}

impl rustls::client::ResolvesClientCert for OfferCert {
    fn resolve(
        &self,
        _: &[&[u8]],
        _: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        self.asked.store(true, Ordering::SeqCst);
        Some(Arc::clone(&self.key))
    }

    fn has_certs(&self) -> bool {
        true
    }
}

async fn tls_connect(
    address: IpAddr,
    port: u16,
    sni: &str,
    client: Option<(&ClientCert, Arc<AtomicBool>)>,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(crate::tls_client::AnyServerCert));
    let mut config = match client {
        Some((cert, asked)) => {
            let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes())
                .map_err(|e| format!("client key: {e}"))?;
            let key = rustls::sign::CertifiedKey::from_der(
                vec![CertificateDer::from(cert.der.clone())],
                key,
                &provider,
            )
            .map_err(|e| format!("client certificate: {e}"))?;
            builder.with_client_cert_resolver(Arc::new(OfferCert {
                key: Arc::new(key),
                asked,
            }))
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = TcpStream::connect((address, port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let name = ServerName::try_from(sni.to_string()).map_err(|e| e.to_string())?;
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))
}

async fn send<T>(io: T, out: &Outgoing) -> Result<(CapturedRequest, CapturedResponse), String>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let conn_task = tokio::spawn(conn);
    let mut b = Request::builder()
        .method(out.method.as_str())
        .uri(out.target.as_str())
        .header(http::header::HOST, out.host.as_str())
        .header(http::header::CONNECTION, "close");
    for (k, v) in &out.headers {
        b = b.header(
            k.as_str(),
            HeaderValue::from_str(v).map_err(|e| e.to_string())?,
        );
    }
    let req = b
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("request: {e}"))?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| format!("send: {e}"));
    let resp = match resp {
        Ok(r) => r,
        Err(e) => {
            conn_task.abort();
            return Err(e);
        }
    };
    let status = resp.status().as_u16();
    let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, v) in resp.headers() {
        headers
            .entry(k.as_str().to_ascii_lowercase())
            .or_default()
            .push(String::from_utf8_lossy(v.as_bytes()).into_owned());
    }
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    conn_task.abort();
    let body = String::from_utf8_lossy(&body).into_owned();
    let mut creq = CapturedRequest::default();
    // "we cannot assume the response is JSON"
    if headers
        .get("content-type")
        .and_then(|v| v.first())
        .map(String::as_str)
        == Some("application/json")
    {
        let v: Value = serde_json::from_str(&body)
            .map_err(|e| format!("unexpected error reading response: {e}"))?;
        let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
        creq.path = s("path");
        creq.host = s("host");
        creq.method = s("method");
        creq.namespace = s("namespace");
        creq.pod = s("pod");
        creq.sni = v["tls"]["serverName"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if let Some(h) = v["headers"].as_object() {
            for (k, vals) in h {
                let vals = vals
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                creq.headers.insert(k.clone(), vals);
            }
        }
    } else {
        creq.method = out.method.clone();
    }
    let redirect = if is_redirect(status) {
        let loc = headers
            .get("location")
            .and_then(|v| v.first())
            .ok_or("http: no Location header in response")?;
        Some(parse_location(loc, &out.host)?)
    } else {
        None
    };
    Ok((
        creq,
        CapturedResponse {
            status,
            headers,
            redirect,
            body,
        },
    ))
}

fn is_redirect(s: u16) -> bool {
    matches!(s, 300 | 301 | 302 | 303 | 304 | 305 | 307 | 308)
}

fn is_timeout(s: u16) -> bool {
    matches!(s, 408 | 504)
}

/// Go's `resp.Location()` then `Scheme`, `Hostname()`, `Port()`, `Path`: a relative
/// reference resolves against the request URL (http://<host><path>).
pub fn parse_location(loc: &str, req_host: &str) -> Result<Redirect, String> {
    let (scheme, rest) = match loc.split_once("://") {
        Some((s, r)) => (s.to_string(), r.to_string()),
        None if loc.starts_with('/') => ("http".to_string(), format!("{req_host}{loc}")),
        None => return Err(format!("unparsable Location {loc:?}")),
    };
    let (authority, path) = match rest.find(['/', '?', '#']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest.as_str(), ""),
    };
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || p.chars().all(|c| c.is_ascii_digit()) => {
            (h.to_string(), p.to_string())
        }
        _ => (authority.to_string(), String::new()),
    };
    Ok(Redirect {
        scheme,
        host: host.trim_start_matches('[').trim_end_matches(']').into(),
        port,
        path: path.to_string(),
    })
}

fn joined(map: &BTreeMap<String, Vec<String>>, name: &str) -> Option<String> {
    map.iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.join(","))
}

/// The response's `AbsentHeaders` and `ValidHeaderValues`, which upstream checks whatever
/// the status.
fn check_response_fields(exp: &Exp, cres: &CapturedResponse) -> Result<(), String> {
    for name in &exp.response_absent {
        if let Some(got) = joined(&cres.headers, name) {
            return Err(format!("expected {name} header to not be set, got {got}"));
        }
    }
    let squeeze = |v: &str| -> String {
        if exp.ignore_whitespace {
            v.chars().filter(|c| !c.is_whitespace()).collect()
        } else {
            v.to_string()
        }
    };
    for (name, valid) in &exp.response_valid {
        let Some(got) = joined(&cres.headers, name) else {
            return Err(format!(
                "expected {name} header to be set, actual headers: {:?}",
                cres.headers
            ));
        };
        if !valid.iter().any(|v| squeeze(v) == squeeze(&got)) {
            return Err(format!(
                "expected {name} header to be one of {valid:?}, got {got}"
            ));
        }
    }
    Ok(())
}

/// upstream's `CompareRoundTrip`.
pub fn compare(exp: &Exp, creq: &CapturedRequest, cres: &CapturedResponse) -> Result<(), String> {
    let statuses = exp.statuses();
    if is_timeout(cres.status) && statuses.iter().any(|s| is_timeout(*s)) {
        return Ok(());
    }
    if !statuses.contains(&cres.status) {
        return Err(format!(
            "expected status code to be one of {statuses:?}, got {} (body {:?})",
            cres.status,
            cres.body.chars().take(200).collect::<String>()
        ));
    }
    if cres.status == 200 {
        let er = exp.expected_request.clone().unwrap_or_else(|| ExpReq {
            host: exp.host.clone(),
            method: exp.method.clone(),
            path: exp.path.clone(),
            headers: exp.headers.clone(),
            absent: vec![],
            sni: exp.sni.clone(),
        });
        let method = if er.method.is_empty() {
            "GET"
        } else {
            &er.method
        };
        if !er.host.is_empty() && er.host != creq.host {
            return Err(format!(
                "expected host to be {}, got {}",
                er.host, creq.host
            ));
        }
        if er.path != creq.path {
            return Err(format!(
                "expected path to be {}, got {}",
                er.path, creq.path
            ));
        }
        if method != creq.method {
            return Err(format!(
                "expected method to be {method}, got {}",
                creq.method
            ));
        }
        if exp.namespace != creq.namespace {
            return Err(format!(
                "expected namespace to be {}, got {}",
                exp.namespace, creq.namespace
            ));
        }
        for (name, want) in &er.headers {
            match joined(&creq.headers, name) {
                None => {
                    return Err(format!(
                        "expected {name} header to be set, actual headers: {:?}",
                        creq.headers
                    ));
                }
                Some(got) if &got != want => {
                    return Err(format!(
                        "expected {name} header to be set to {want}, got {got}"
                    ));
                }
                Some(_) => {}
            }
        }
        for (name, want) in &exp.response_headers {
            match joined(&cres.headers, name) {
                None => {
                    return Err(format!(
                        "expected {name} header to be set, actual headers: {:?}",
                        cres.headers
                    ));
                }
                Some(got) if &got != want => {
                    return Err(format!(
                        "expected {name} header to be set to {want}, got {got}"
                    ));
                }
                Some(_) => {}
            }
        }
        check_response_fields(exp, cres)?;
        for name in &er.absent {
            if let Some(got) = joined(&creq.headers, name) {
                return Err(format!(
                    "expected {name} header to not be set (request), got {got}"
                ));
            }
        }
        if !creq.pod.starts_with(&exp.backend) {
            return Err(format!(
                "expected pod name to start with {}, got {}",
                exp.backend, creq.pod
            ));
        }
        if !er.sni.is_empty() && er.sni != creq.sni {
            return Err(format!(
                "expected SNI {:?} to be equal to {:?}",
                creq.sni, er.sni
            ));
        }
    } else if is_redirect(cres.status) {
        let Some(want) = &exp.redirect else {
            return Ok(());
        };
        let got = cres.redirect.clone().unwrap_or_default();
        let mut want = want.clone();
        if want.host.is_empty() {
            want.host = got.host.clone();
        }
        if want.scheme.is_empty() {
            want.scheme = match exp.via {
                Via::Http => "http".into(),
                Via::Https { .. } => "https".into(),
            };
        }
        if want.path.is_empty() {
            want.path = exp.path.split('?').next().unwrap_or_default().to_string();
        }
        if want.host != got.host {
            return Err(format!(
                "expected redirected hostname to be {:?}, got {:?}",
                want.host, got.host
            ));
        }
        if want.port.is_empty() {
            let scheme = got.scheme.to_ascii_lowercase();
            if scheme == "http" && got.port != "80" && !got.port.is_empty() {
                return Err(format!(
                    "for http scheme, expected redirected port to be 80 or not set, got {:?}",
                    got.port
                ));
            }
            if scheme == "https" && got.port != "443" && !got.port.is_empty() {
                return Err(format!(
                    "for https scheme, expected redirected port to be 443 or not set, got {:?}",
                    got.port
                ));
            }
        } else if want.port != got.port {
            return Err(format!(
                "expected redirected port to be {:?}, got {:?}",
                want.port, got.port
            ));
        }
        if want.scheme != got.scheme {
            return Err(format!(
                "expected redirected scheme to be {:?}, got {:?}",
                want.scheme, got.scheme
            ));
        }
        if want.path != got.path {
            return Err(format!(
                "expected redirected path to be {:?}, got {:?}",
                want.path, got.path
            ));
        }
    }
    Ok(())
}

/// One round trip, compared (no retry).
pub async fn once(suite: &Suite, exp: &Exp) -> Result<(), String> {
    let (creq, cres) = round_trip(suite, exp).await?;
    compare(exp, &creq, &cres)
}

/// upstream's `MakeRequestAndExpectEventuallyConsistentResponse`: Err with the last miss when
/// [`REQUIRED_CONSECUTIVE_SUCCESSES`] in a row did not happen within the limit.
pub async fn eventually_consistent(suite: &Suite, exp: &Exp) -> Result<(), String> {
    let deadline = Instant::now() + MAX_TIME_TO_CONSISTENCY;
    let mut successes = 0;
    let mut last = String::from("no attempt");
    // Bounded by the deadline; a success is retried at once, a miss after 1 s.
    while Instant::now() < deadline {
        let outcome = match round_trip(suite, exp).await {
            Ok((creq, cres)) => compare(exp, &creq, &cres),
            Err(e) => Err(format!("request failed: {e}")),
        };
        match outcome {
            Ok(()) => {
                successes += 1;
                if successes >= REQUIRED_CONSECUTIVE_SUCCESSES {
                    return Ok(());
                }
            }
            Err(e) => {
                successes = 0;
                last = e;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    Err(format!(
        "not consistent within {MAX_TIME_TO_CONSISTENCY:?}; last: {last}"
    ))
}

/// upstream's `MakeRequestAndExpectFailure` (`WaitForConsistentFailureResponse`): the request
/// answered with a status other than 200 (and other than a timeout's) 5 times in a row within
/// the limit; a request that fails, or a timeout status, starts the count again (1 s later);
/// any 200 fails at once.
pub async fn consistent_failure(suite: &Suite, exp: &Exp) -> Result<(), String> {
    const THRESHOLD: usize = 5;
    let deadline = Instant::now() + MAX_TIME_TO_CONSISTENCY;
    let mut successes = 0;
    let mut last = String::from("no attempt");
    while Instant::now() < deadline {
        match round_trip(suite, exp).await {
            Ok((_, cres)) if cres.status == 200 => {
                return Err(format!(
                    "request should fail, returned HTTP Status OK (200) instead (body {:?})",
                    cres.body.chars().take(200).collect::<String>()
                ));
            }
            Ok((_, cres)) if !is_timeout(cres.status) => {
                successes += 1;
                if successes >= THRESHOLD {
                    return Ok(());
                }
                continue;
            }
            Ok((_, cres)) => last = format!("timeout status {}", cres.status),
            Err(e) => last = format!("request failed: {e}"),
        }
        successes = 0;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Err(format!(
        "no {THRESHOLD} failures in a row within {MAX_TIME_TO_CONSISTENCY:?}; last: {last}"
    ))
}

/// Runs [`consistent_failure`] for each of `cases` at once and panics with every one that did
/// not hold.
pub async fn run_all_failing(suite: &Suite, case: &str, cases: &[Exp]) {
    let outcomes = futures::future::join_all(cases.iter().enumerate().map(|(i, exp)| async move {
        consistent_failure(suite, exp)
            .await
            .map_err(|e| format!("{case}/{} should fail: {e}", exp.name(i)))
    }))
    .await;
    let failures: Vec<String> = outcomes.into_iter().filter_map(Result::err).collect();
    assert!(
        failures.is_empty(),
        "{} of {} failure expectations did not hold:\n{}\nswitchyard stderr:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n"),
        tail(&suite.sy.stderr(), 4000)
    );
}

/// upstream's `MakeTLSRequestAndExpectFailureResponse`: one request, which must fail (no
/// response at all: the handshake refused, or the connection closed before an answer); any
/// response, whatever its status, is a failure of the expectation. Like upstream, a client
/// certificate given must have been asked for.
pub async fn expect_no_response(suite: &Suite, exp: &Exp) -> Result<(), String> {
    match round_trip(suite, exp).await {
        Err(e) if e.contains("did not ask for the client certificate") => Err(e),
        Err(_) => Ok(()),
        Ok((_, cres)) => Err(format!(
            "request should fail, got a response: status {} (body {:?})",
            cres.status,
            cres.body.chars().take(200).collect::<String>()
        )),
    }
}

/// Runs [`expect_no_response`] for each of `cases` (after the case's successes have held, as
/// upstream runs its failure request after its consistent one) and panics with every one
/// that got an answer.
pub async fn run_all_fail(suite: &Suite, case: &str, cases: &[Exp]) {
    let outcomes = futures::future::join_all(cases.iter().enumerate().map(|(i, exp)| async move {
        expect_no_response(suite, exp)
            .await
            .map_err(|e| format!("{case}/{} should fail: {e}", exp.name(i)))
    }))
    .await;
    let failures: Vec<String> = outcomes.into_iter().filter_map(Result::err).collect();
    assert!(
        failures.is_empty(),
        "{} of {} failure expectations got an answer:\n{}\nswitchyard stderr:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n"),
        tail(&suite.sy.stderr(), 4000)
    );
}

/// upstream's `ExpectMirroredRequest`: every `MirroredTo` Deployment has a pod that saw a
/// request for `path` (upstream greps the pods' logs for it), within the request timeout.
pub async fn expect_mirrored(suite: &Suite, exp: &Exp) -> Result<(), String> {
    for (ns, deployment) in &exp.mirrored_to {
        let pods = suite.pods_of(ns, deployment);
        if pods.is_empty() {
            return Err(format!("no pods for mirror backend {ns}/{deployment}"));
        }
        let found = crate::common::eventually(REQUEST_TIMEOUT, || async {
            pods.iter()
                .any(|p| p.seen().iter().any(|s| s.path == exp.path))
        })
        .await;
        if !found {
            return Err(format!(
                "couldn't find the mirrored request for {} in {ns}/{deployment}",
                exp.path
            ));
        }
    }
    Ok(())
}

/// Runs every expectation of a case at once (upstream runs them as parallel subtests) and
/// panics with every one that did not hold, naming the case.
pub async fn run_all(suite: &Suite, case: &str, cases: &[Exp]) {
    let outcomes = futures::future::join_all(cases.iter().enumerate().map(|(i, exp)| async move {
        let r = match eventually_consistent(suite, exp).await {
            Ok(()) => expect_mirrored(suite, exp).await,
            Err(e) => Err(e),
        };
        r.map_err(|e| format!("{case}/{}: {e}", exp.name(i)))
    }))
    .await;
    let failures: Vec<String> = outcomes.into_iter().filter_map(Result::err).collect();
    assert!(
        failures.is_empty(),
        "{} of {} expectations failed:\n{}\nswitchyard stderr:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n"),
        tail(&suite.sy.stderr(), 4000)
    );
}

fn tail(s: &str, n: usize) -> &str {
    let start = s.len().saturating_sub(n);
    let start = (start..s.len())
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(s.len());
    &s[start..]
}

/// upstream's weighted-distribution check (`weight.TestWeightedDistribution`): 500 requests,
/// 10 at a time, each pod name reduced to its Deployment; every backend's share within 5
/// points of its weight, and only the backends with weight > 0 seen. Err with the reasons.
pub async fn weighted_distribution(
    suite: &Suite,
    exp: &Exp,
    weights: &[(&str, f64)],
) -> Result<(), String> {
    const CONCURRENT: usize = 10;
    const TOTAL: usize = 500;
    const TOLERANCE: f64 = 0.05;
    let mut seen: BTreeMap<String, f64> = BTreeMap::new();
    for _ in 0..TOTAL / CONCURRENT {
        let batch = futures::future::join_all((0..CONCURRENT).map(|_| async {
            let (creq, cres) = round_trip(suite, exp).await?;
            compare(exp, &creq, &cres)
                .map_err(|e| format!("response expectation failed for request: {e}"))?;
            Ok::<String, String>(creq.pod)
        }))
        .await;
        for pod in batch {
            let pod = pod.map_err(|e| format!("error while sending requests: {e}"))?;
            let parts: Vec<&str> = pod.split('-').collect();
            let backend = if parts.len() < 3 {
                pod.clone()
            } else {
                parts[..parts.len() - 2].join("-")
            };
            if !weights.iter().any(|(b, _)| *b == backend) {
                return Err(format!(
                    "request was handled by an unexpected pod {pod:?} (extracted backend: {backend:?})"
                ));
            }
            *seen.entry(backend).or_default() += 1.0;
        }
    }
    let active = weights.iter().filter(|(_, w)| *w > 0.0).count();
    let mut errs = Vec::new();
    if seen.len() != active {
        errs.push(format!(
            "expected {active} backends to receive traffic, but got {}",
            seen.len()
        ));
    }
    for (backend, want) in weights {
        let got = seen.get(*backend).copied();
        if got.is_none() && *want != 0.0 {
            errs.push(format!(
                "expect traffic to hit backend {backend:?} - but none was received"
            ));
            continue;
        }
        let share = got.unwrap_or(0.0) / TOTAL as f64;
        if (share - want).abs() > TOLERANCE {
            errs.push(format!(
                "backend {backend:?} weighted traffic of {share} not within tolerance {want} (+/-{TOLERANCE})"
            ));
        }
    }
    errs.sort();
    if errs.is_empty() {
        Ok(())
    } else {
        Err(format!("{errs:?} (seen {seen:?})"))
    }
}

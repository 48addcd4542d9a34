//! TCP echo pods: each Deployment of the upstream manifests that sets `TCP_ECHO_SERVER` becomes
//! a server on 127.0.0.1 speaking upstream's line protocol (`conformance/echo-basic/tcpserver`,
//! which `conformance/utils/tcp` drives): on connect it sends [`WELCOME`]; then, line by line
//! (a trailing `\r` dropped, as Go's `bufio.Scanner`), `PING` -> `PONG`, `IS_TLS` -> `true` or
//! `false`, `TEST` -> one JSON line (`namespace`, `ingress`, `service`, `pod`, `tcpport`,
//! `tlsport`, `isTLS`, and over TLS `tls`: `version`, `serverName`, `negotiatedProtocol`,
//! `cipherSuite`); any other line is ignored.
//!
//! A Deployment that also sets `TLS_SERVER_CERT` and `TLS_SERVER_PRIV_KEY` (the base manifests'
//! `tcp-backend`, with the `tls-passthrough-checks-certificate` Secret for `abc.example.com`)
//! speaks the same protocol over TLS on a second port (the pod's `TLS_PORT`, 8443), handshaking
//! with the mounted Secret's certificate; that is the backend upstream's TLSRoute passthrough
//! cases reach, and the `tls` object is how they see the server name that arrived.
//!
//! Bounded: a pod accepts at most [`MAX_CONNECTIONS`], a connection lives at most
//! [`CONNECTION_LIFETIME`] and answers at most [`MAX_LINES`] lines of at most [`MAX_LINE`]
//! bytes; dropping the pod stops its listeners (the connections end with their lifetime).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::echo::Pod;

/// `tcpserver.WelcomeMessage`.
pub const WELCOME: &str = "Gateway API Test TCP Server\n";

const MAX_CONNECTIONS: usize = 100_000;
const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_LINES: usize = 10_000;
const MAX_LINE: u64 = 4096;

/// Who a pod is, as the TEST answer reports it.
#[derive(Clone)]
struct Identity {
    namespace: String,
    service: String,
    pod: String,
}

/// Starts a TCP echo pod of Deployment `deployment`, named `name` in `namespace`, whose
/// `SERVICE_NAME` is `service`; with `tls`, also over TLS on a second port.
pub async fn start_pod(
    deployment: &str,
    name: &str,
    namespace: &str,
    service: &str,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> Pod {
    let plain = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind TCP echo pod");
    let port = plain.local_addr().expect("local_addr").port();
    let secure = match tls {
        Some(config) => Some((
            TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind TCP echo pod (TLS)"),
            TlsAcceptor::from(config),
        )),
        None => None,
    };
    let tls_port = secure
        .as_ref()
        .map(|(l, _)| l.local_addr().expect("local_addr").port());
    let who = Identity {
        namespace: namespace.to_string(),
        service: service.to_string(),
        pod: name.to_string(),
    };
    let task = tokio::spawn(async move {
        match secure {
            Some((l, acceptor)) => {
                tokio::join!(
                    accept_loop(plain, who.clone(), None),
                    accept_loop(l, who, Some(acceptor))
                );
            }
            None => accept_loop(plain, who, None).await,
        }
    });
    let seen = Arc::new(Mutex::new(Vec::new()));
    Pod::serving(deployment, name, namespace, port, seen, task).with_tls_port(tls_port)
}

async fn accept_loop(listener: TcpListener, who: Identity, tls: Option<TlsAcceptor>) {
    for _ in 0..MAX_CONNECTIONS {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let who = who.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(CONNECTION_LIFETIME, async move {
                match tls {
                    None => converse(stream, &who, None).await,
                    Some(acceptor) => {
                        let Ok(Ok(stream)) =
                            tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await
                        else {
                            return;
                        };
                        let conn = stream.get_ref().1;
                        let assertion = json!({
                            "version": match conn.protocol_version() {
                                Some(rustls::ProtocolVersion::TLSv1_3) => "TLS 1.3",
                                Some(rustls::ProtocolVersion::TLSv1_2) => "TLS 1.2",
                                _ => "",
                            },
                            "serverName": conn.server_name().unwrap_or(""),
                            "negotiatedProtocol": conn
                                .alpn_protocol()
                                .map(|p| String::from_utf8_lossy(p).into_owned())
                                .unwrap_or_default(),
                            "cipherSuite": conn
                                .negotiated_cipher_suite()
                                .map(|c| format!("{:?}", c.suite()))
                                .unwrap_or_default(),
                        });
                        converse(stream, &who, Some(assertion)).await
                    }
                }
            })
            .await;
        });
    }
}

/// The welcome, then the line protocol until the client closes (or a bound is reached).
async fn converse<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    who: &Identity,
    tls: Option<Value>,
) {
    let is_tls = tls.is_some();
    let mut test = json!({
        "namespace": who.namespace,
        "ingress": "",
        "service": who.service,
        "pod": who.pod,
        "tcpport": "3000",
        "tlsport": "8443",
        "isTLS": is_tls,
    });
    if let Some(t) = tls {
        test["tls"] = t;
    }
    let test = format!("{test}\n");
    let mut reader = BufReader::new(stream);
    if reader
        .get_mut()
        .write_all(WELCOME.as_bytes())
        .await
        .is_err()
    {
        return;
    }
    let mut line = String::new();
    for _ in 0..MAX_LINES {
        line.clear();
        match (&mut reader).take(MAX_LINE).read_line(&mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let answer = match line.trim_end_matches('\n').trim_end_matches('\r') {
            "TEST" => test.clone(),
            "IS_TLS" => format!("{is_tls}\n"),
            "PING" => "PONG\n".to_string(),
            _ => continue,
        };
        if reader.get_mut().write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

// === the client: upstream's conformance/utils/tcp ===

/// What one exchange must show: upstream's `tcp.ExpectedResponse`.
#[derive(Clone, Copy, Debug)]
pub struct Expected {
    /// The Deployment whose pod answers (upstream checks the pod name's `<backend>-` prefix;
    /// here the Deployment part of the name must equal it, so `tcp-backend-2` is no
    /// `tcp-backend`).
    pub backend: &'static str,
    pub namespace: &'static str,
    /// The answer to `IS_TLS`.
    pub is_tls: bool,
    /// The server name the backend's TLS handshake saw (`tls.serverName`), when set.
    pub hostname: Option<&'static str>,
}

/// Where and how to connect: a plain TCP connection, or TLS with a server name whose
/// presented certificate must be `cert` (upstream's client trusts that certificate alone).
#[derive(Clone, Copy, Debug)]
pub struct Dial<'a> {
    pub ip: &'a str,
    pub port: u16,
    pub tls: Option<(&'a str, &'a [u8])>,
}

/// A plain connection to `port` on 127.0.0.1.
pub fn plain(port: u16) -> Dial<'static> {
    Dial {
        ip: "127.0.0.1",
        port,
        tls: None,
    }
}

/// The time one exchange may take; upstream's EchoSendOnce timeout.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a valid answer is waited for (upstream: `MaxTimeToConsistency`, 30 s).
pub const MAX_TIME: Duration = Duration::from_secs(15);

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Connects as `dial` says; over TLS checks the presented certificate.
async fn connect(dial: Dial<'_>) -> Result<Box<dyn Io>, String> {
    let tcp = tokio::net::TcpStream::connect((dial.ip, dial.port))
        .await
        .map_err(|e| format!("connect {}:{}: {e}", dial.ip, dial.port))?;
    let Some((sni, cert)) = dial.tls else {
        return Ok(Box::new(tcp));
    };
    let mut config = crate::tls_client::Client {
        sni: Some(sni),
        ..Default::default()
    }
    .config();
    // Go's tls.Dialer offers no ALPN unless told.
    config.alpn_protocols.clear();
    let name = rustls::pki_types::ServerName::try_from(sni.to_string())
        .map_err(|e| format!("server name {sni}: {e}"))?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS handshake (SNI {sni}): {e}"))?;
    let presented = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .unwrap_or_default();
    if presented != cert {
        return Err(format!(
            "SNI {sni}: the certificate presented is not the one expected"
        ));
    }
    Ok(Box::new(tls))
}

async fn read_line<R: AsyncRead + Unpin>(r: &mut BufReader<R>) -> Result<String, String> {
    let mut line = String::new();
    match r.take(MAX_LINE).read_line(&mut line).await {
        Ok(0) => Err("connection closed".to_string()),
        Ok(_) => Ok(line),
        Err(e) => Err(format!("read: {e}")),
    }
}

/// The Deployment part of a pod name `<deployment>-<replicaset hash>-<pod suffix>`
/// (upstream's `extractTCPBackendName`).
pub fn deployment_of(pod: &str) -> &str {
    let mut cut = pod;
    for _ in 0..2 {
        match cut.rfind('-') {
            Some(i) => cut = &cut[..i],
            None => return pod,
        }
    }
    cut
}

/// One exchange on a new connection, as `WaitForValidTCPResponse` makes it: the welcome,
/// `PING`, `IS_TLS`, `TEST`, each answer checked.
pub async fn exchange(dial: Dial<'_>, exp: Expected) -> Result<(), String> {
    let fut = async {
        let mut s = BufReader::new(connect(dial).await?);
        let welcome = read_line(&mut s).await?;
        if welcome != WELCOME {
            return Err(format!("welcome message does not match: got {welcome:?}"));
        }
        let mut ask = async |q: &str| -> Result<String, String> {
            s.get_mut()
                .write_all(q.as_bytes())
                .await
                .map_err(|e| format!("write: {e}"))?;
            read_line(&mut s).await
        };
        let pong = ask("PING\n").await?;
        if pong != "PONG\n" {
            return Err(format!("PING answered {pong:?}"));
        }
        let is_tls = ask("IS_TLS\n").await?;
        if is_tls.trim_end() != exp.is_tls.to_string() {
            return Err(format!("IS_TLS answered {is_tls:?}, want {}", exp.is_tls));
        }
        let test: Value =
            serde_json::from_str(&ask("TEST\n").await?).map_err(|e| format!("TEST answer: {e}"))?;
        let (ns, pod) = (
            test["namespace"].as_str().unwrap_or(""),
            test["pod"].as_str().unwrap_or(""),
        );
        if ns != exp.namespace {
            return Err(format!("namespace {ns:?}, want {:?}", exp.namespace));
        }
        if deployment_of(pod) != exp.backend {
            return Err(format!("pod {pod:?} is not of {:?}", exp.backend));
        }
        if let Some(host) = exp.hostname {
            let got = test["tls"]["serverName"].as_str();
            if got != Some(host) {
                return Err(format!(
                    "the backend's TLS saw server name {got:?}, want {host:?}"
                ));
            }
        }
        Ok(())
    };
    tokio::time::timeout(IO_TIMEOUT, fut)
        .await
        .map_err(|_| "timeout".to_string())?
}

/// [`exchange`] until one passes, a miss retried after 1 s, within [`MAX_TIME`]
/// (`MakeTCPRequestAndExpectEventuallyValidResponse`); the misses otherwise.
pub async fn eventually_valid(dial: Dial<'_>, exp: Expected) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + MAX_TIME;
    let mut misses = Vec::new();
    for _ in 0..100 {
        match exchange(dial, exp).await {
            Ok(()) => return Ok(()),
            Err(e) => misses.push(e),
        }
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    misses.dedup();
    Err(format!(
        "{}:{} never answered as {exp:?}: {}",
        dial.ip,
        dial.port,
        misses.join("; ")
    ))
}

/// One connection, the welcome and `TEST`: the pod that answered (`EchoSendOnce`).
pub async fn echo_once(dial: Dial<'_>) -> Result<String, String> {
    let fut = async {
        let mut s = BufReader::new(connect(dial).await?);
        let welcome = read_line(&mut s).await?;
        if welcome != WELCOME {
            return Err(format!("unexpected welcome message: {welcome:?}"));
        }
        s.get_mut()
            .write_all(b"TEST\n")
            .await
            .map_err(|e| format!("write: {e}"))?;
        let test: Value = serde_json::from_str(&read_line(&mut s).await?)
            .map_err(|e| format!("TEST answer: {e}"))?;
        match test["pod"].as_str() {
            Some(pod) if !pod.is_empty() => Ok(pod.to_string()),
            _ => Err(format!("TEST answer without a pod: {test}")),
        }
    };
    tokio::time::timeout(IO_TIMEOUT, fut)
        .await
        .map_err(|_| "timeout".to_string())?
}

/// Upstream's `assertTCPWeightedDistribution`: 500 connections, 10 at a time, each counted
/// by the Deployment that answered; any other Deployment, or a failed connection, fails the
/// run; each share must be within `tolerance` of its weight.
pub async fn weighted_distribution(
    dial: Dial<'_>,
    weights: &[(&str, f64)],
    tolerance: f64,
) -> Result<(), String> {
    use futures_util::StreamExt;
    const TOTAL: usize = 500;
    const CONCURRENT: usize = 10;
    let answers: Vec<Result<String, String>> = futures_util::stream::iter(0..TOTAL)
        .map(|_| echo_once(dial))
        .buffer_unordered(CONCURRENT)
        .collect()
        .await;
    let mut seen: std::collections::BTreeMap<String, usize> = Default::default();
    for a in answers {
        let pod = a.map_err(|e| format!("error while sending TCP probes: {e}"))?;
        let backend = deployment_of(&pod).to_string();
        if !weights.iter().any(|(b, _)| *b == backend) {
            return Err(format!(
                "response from unexpected backend {backend:?} (pod {pod:?})"
            ));
        }
        *seen.entry(backend).or_default() += 1;
    }
    let errs: Vec<String> = weights
        .iter()
        .filter_map(|(b, want)| {
            let got = seen.get(*b).copied().unwrap_or(0) as f64 / TOTAL as f64;
            ((got - want).abs() > tolerance).then(|| {
                format!(
                    "backend {b:?} got {:.2}% of traffic; expected {:.2}% (+/- {:.2}%)",
                    got * 100.0,
                    want * 100.0,
                    tolerance * 100.0
                )
            })
        })
        .collect();
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs.join("; "))
    }
}

/// How a connection that must reach no backend ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Nothing listens on the port.
    NotListening,
    /// Accepted, then closed (or reset) before any byte (over TLS: the handshake failed).
    Closed,
}

/// One connection that must reach no backend: refused by the kernel, or closed without a
/// byte (over TLS, `dial.tls`'s certificate is not checked: a failed handshake is the
/// refusal). An answer, or a connection held open without one for [`IO_TIMEOUT`], is an error.
pub async fn refusal(dial: Dial<'_>) -> Result<Refusal, String> {
    let tcp = match tokio::net::TcpStream::connect((dial.ip, dial.port)).await {
        Ok(tcp) => tcp,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Ok(Refusal::NotListening);
        }
        Err(e) => return Err(format!("connect: {e}")),
    };
    let fut = async {
        match dial.tls {
            None => {
                let mut s = tcp;
                let mut buf = [0u8; 256];
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => Ok(Refusal::Closed),
                    Ok(n) => Err(format!(
                        "{}:{} answered {:?}",
                        dial.ip,
                        dial.port,
                        String::from_utf8_lossy(&buf[..n])
                    )),
                }
            }
            Some((sni, _)) => {
                let mut config = crate::tls_client::Client {
                    sni: Some(sni),
                    ..Default::default()
                }
                .config();
                config.alpn_protocols.clear();
                let name = rustls::pki_types::ServerName::try_from(sni.to_string())
                    .map_err(|e| e.to_string())?;
                match tokio_rustls::TlsConnector::from(Arc::new(config))
                    .connect(name, tcp)
                    .await
                {
                    Err(_) => Ok(Refusal::Closed),
                    Ok(_) => Err(format!(
                        "{}:{} completed a TLS handshake for {sni}",
                        dial.ip, dial.port
                    )),
                }
            }
        }
    };
    tokio::time::timeout(IO_TIMEOUT, fut)
        .await
        .map_err(|_| format!("{}:{} held the connection open", dial.ip, dial.port))?
}

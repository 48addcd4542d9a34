//! The one test backend: a listener on 127.0.0.1 whose behaviour is an option
//! ([`Behaviour`]: a hyper echo, a hand-written HTTP/1.1 loop that can inject [`Fault`]s or
//! answer scripted bytes, a raw recorder, a closer, a TCP echo), built with
//! [`Backend::builder`]. Every request it reads is recorded as a [`Seen`] (with its arrival
//! time); the hand-written engines also record every byte of every connection. Dropping it
//! (or [`Backend::stop`]) closes the listener and every open connection.
//!
//! Two engines sit behind the one type on purpose: hyper for the echo (real HTTP/1.1 framing,
//! upgrades), and a loop over the raw socket wherever a test needs bytes hyper would not send
//! or a socket cut hyper would not make. Every read and every connection is bounded in time.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

/// A script answers one request (its head, CRLFs included, and its Content-Length body) with
/// the bytes to send and whether to close the connection after them.
pub type Script = fn(&str, &[u8]) -> (Vec<u8>, bool);

/// What a backend does with the connections it accepts.
#[derive(Clone, Copy, Debug)]
pub enum Behaviour {
    /// hyper, HTTP/1.1 keep-alive: every request is answered `200` with
    /// `{"backend","method","uri","headers"}` and `x-backend: <name>`, WebSocket messages are
    /// echoed on `/ws`, and a path containing `/slow` is held 1 s.
    Echo,
    /// A hand-written HTTP/1.1 keep-alive loop (heads and Content-Length bodies read off the
    /// socket, so a [`Fault`] can cut it anywhere): `200` `<name> <uri>` with `x-backend`.
    Plain,
    /// The same loop, answering what the script returns.
    Scripted(Script),
    /// Records every byte of every connection without parsing it; once a head has arrived,
    /// reads on 100 ms (a body, or whatever was smuggled after it), answers `200 ok` with
    /// `Connection: close` and closes: one request per connection, so the recording of one
    /// request is never mixed with another's.
    RecordOnce,
    /// Accepts and closes at once, before any answer (the proxy sees a dead upstream).
    CloseAtOnce,
    /// Raw TCP: greets each connection with `<name>\n`, echoes every byte, and closes its side
    /// only after the client closed its own (so a half-close must get through).
    TcpEcho,
}

/// What the hand-written loop ([`Behaviour::Plain`], [`Behaviour::Scripted`]) does to each
/// request once it has read it; switched at runtime with [`Backend::set_fault`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answers.
    None,
    /// Never answers (holds the connection 60 s, then drops it).
    Hang,
    /// Resets the connection instead of answering.
    ResetBeforeHeaders,
    /// Sends the header and 100 of 1,000 promised body bytes, then resets.
    ResetMidBody,
}

/// One request as a backend received it.
#[derive(Clone, Debug)]
pub struct Seen {
    /// When the backend had read it.
    pub at: Instant,
    pub method: String,
    /// Path and query exactly as received on the request line.
    pub uri: String,
    /// Lowercased header names, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The head byte for byte, final CRLFs included (hand-written loop only; empty for
    /// [`Behaviour::Echo`]).
    pub head: String,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<String> {
        let vals: Vec<&str> = self
            .headers
            .iter()
            .filter(|(k, _)| k == &name.to_ascii_lowercase())
            .map(|(_, v)| v.as_str())
            .collect();
        if vals.is_empty() {
            None
        } else if name.eq_ignore_ascii_case("cookie") {
            Some(vals.join("; "))
        } else {
            Some(vals.join(", "))
        }
    }
}

/// How [`Behaviour::Echo`] is spoken to: HTTP/1.1 in clear (the default), HTTP/2 in clear
/// with prior knowledge, or TLS with this server configuration (HTTP/2 when ALPN picks `h2`,
/// else HTTP/1.1). The echo's JSON carries the `version` it saw and, over TLS, the `sni`.
#[derive(Clone, Default)]
pub enum Transport {
    #[default]
    Clear,
    H2c,
    Tls(Arc<rustls::ServerConfig>),
}

/// The bytes one connection received.
type Recording = Arc<Mutex<Vec<u8>>>;

/// What every connection task shares.
#[derive(Clone)]
struct Shared {
    name: Arc<str>,
    behaviour: Behaviour,
    delay: Duration,
    health_path: Option<Arc<str>>,
    log: Arc<Mutex<Vec<Seen>>>,
    conns: Arc<Mutex<Vec<Recording>>>,
    fault: Arc<Mutex<Fault>>,
    health: Arc<AtomicU16>,
    transport: Transport,
    /// The server name the TLS client sent, for this connection's echo.
    sni: Option<Arc<str>>,
}

/// A test backend on 127.0.0.1; see the module comment and [`Backend::builder`].
pub struct Backend {
    pub name: String,
    pub port: u16,
    shared: Shared,
    stop_tx: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

/// Options of a [`Backend`]; `start` binds and serves.
pub struct BackendBuilder {
    name: String,
    behaviour: Behaviour,
    delay: Duration,
    fault: Fault,
    health_path: Option<String>,
    port: u16,
    transport: Transport,
}

impl BackendBuilder {
    pub fn behaviour(mut self, behaviour: Behaviour) -> Self {
        self.behaviour = behaviour;
        self
    }

    /// Hold every answer this long after reading the request ([`Behaviour::Echo`],
    /// [`Behaviour::Plain`], [`Behaviour::Scripted`]).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// The fault injected from the start (the hand-written loop only).
    pub fn fault(mut self, fault: Fault) -> Self {
        self.fault = fault;
        self
    }

    /// [`Behaviour::Echo`] answers `path` with the status set by [`Backend::set_health`]
    /// (`200` at first) and body `health`, without recording it, so that health checks do
    /// not count as traffic.
    pub fn health(mut self, path: &str) -> Self {
        self.health_path = Some(path.to_string());
        self
    }

    /// Speak [`Behaviour::Echo`] over this transport.
    pub fn transport(mut self, transport: Transport) -> Self {
        self.transport = transport;
        self
    }

    /// Listen on this port (to bring a stopped backend back at the same address); the bind
    /// is retried for up to 5 s while the old socket lets go of it.
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    pub async fn start(self) -> Backend {
        let raw_http = matches!(self.behaviour, Behaviour::Plain | Behaviour::Scripted(_));
        assert!(
            raw_http || self.fault == Fault::None,
            "a fault needs Behaviour::Plain or Scripted, not {:?}",
            self.behaviour
        );
        assert!(
            matches!(self.behaviour, Behaviour::Echo) || self.health_path.is_none(),
            "a health path needs Behaviour::Echo"
        );
        assert!(
            raw_http || matches!(self.behaviour, Behaviour::Echo) || self.delay.is_zero(),
            "a delay needs an HTTP behaviour, not {:?}",
            self.behaviour
        );
        assert!(
            matches!(self.transport, Transport::Clear) || matches!(self.behaviour, Behaviour::Echo),
            "a transport needs Behaviour::Echo"
        );
        let listener = bind(self.port).await;
        let port = listener.local_addr().expect("backend addr").port();
        let shared = Shared {
            name: self.name.as_str().into(),
            behaviour: self.behaviour,
            delay: self.delay,
            health_path: self.health_path.map(Into::into),
            log: Arc::default(),
            conns: Arc::default(),
            fault: Arc::new(Mutex::new(self.fault)),
            health: Arc::new(AtomicU16::new(200)),
            transport: self.transport,
            sni: None,
        };
        let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
        let s = shared.clone();
        let task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                tokio::select! {
                    _ = &mut stop_rx => break,
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        if matches!(s.behaviour, Behaviour::CloseAtOnce) {
                            drop(stream);
                            continue;
                        }
                        conns.spawn(serve(stream, s.clone()));
                    }
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
            // Close the listener first, then kill every open connection.
            drop(listener);
            conns.shutdown().await;
        });
        Backend {
            name: self.name,
            port,
            shared,
            stop_tx: Some(stop_tx),
            task: Some(task),
        }
    }
}

async fn bind(port: u16) -> TcpListener {
    let bound = super::poll(
        Duration::from_secs(5),
        Duration::from_millis(50),
        || async { TcpListener::bind(("127.0.0.1", port)).await.ok() },
    )
    .await;
    bound.unwrap_or_else(|| panic!("bind 127.0.0.1:{port} within 5 s"))
}

impl Backend {
    /// The default: [`Behaviour::Echo`] on any free port.
    pub async fn start(name: &str) -> Backend {
        Self::builder(name).start().await
    }

    pub fn builder(name: &str) -> BackendBuilder {
        BackendBuilder {
            name: name.to_string(),
            behaviour: Behaviour::Echo,
            delay: Duration::ZERO,
            fault: Fault::None,
            health_path: None,
            port: 0,
            transport: Transport::Clear,
        }
    }

    /// Simulate a dead backend: close the listening socket and every open connection
    /// (keep-alive connections from the proxy included).
    pub async fn stop(&mut self) {
        if let Some(tx) = self.stop_tx.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
    }

    pub fn set_fault(&self, fault: Fault) {
        *self.shared.fault.lock().unwrap() = fault;
    }

    /// The status the health path answers from now on (see [`BackendBuilder::health`]).
    pub fn set_health(&self, status: u16) {
        self.shared.health.store(status, Ordering::Relaxed);
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.shared.log.lock().unwrap().clone()
    }

    /// The requests so far, leaving none behind (to compare one run with the next).
    pub fn take_requests(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.shared.log.lock().unwrap())
    }

    pub fn count(&self) -> usize {
        self.shared.log.lock().unwrap().len()
    }

    pub fn last(&self) -> Option<Seen> {
        self.shared.log.lock().unwrap().last().cloned()
    }

    /// Requests read strictly between `from` and `to`.
    pub fn count_between(&self, from: Instant, to: Instant) -> usize {
        let log = self.shared.log.lock().unwrap();
        log.iter().filter(|s| s.at > from && s.at < to).count()
    }

    /// Every byte each accepted connection sent, one entry per connection in accept order
    /// (the raw engines: [`Behaviour::Plain`], [`Behaviour::Scripted`],
    /// [`Behaviour::RecordOnce`]).
    pub fn received(&self) -> Vec<Vec<u8>> {
        let conns = self.shared.conns.lock().unwrap();
        conns.iter().map(|c| c.lock().unwrap().clone()).collect()
    }

    /// The connections that carried bytes: a health check's bare connect (every
    /// `--check-interval`) and a connection the proxy opened and did not use are left out, so
    /// counts do not depend on when a check lands.
    pub fn used_connections(&self) -> Vec<Vec<u8>> {
        let mut all = self.received();
        all.retain(|c| !c.is_empty());
        all
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Some(tx) = self.stop_tx.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn serve(stream: TcpStream, s: Shared) {
    match s.behaviour {
        Behaviour::Echo => serve_echo(stream, s).await,
        Behaviour::Plain | Behaviour::Scripted(_) => serve_raw_http(stream, s).await,
        Behaviour::RecordOnce => record_once(stream, s).await,
        Behaviour::TcpEcho => tcp_echo(stream, &s.name).await,
        Behaviour::CloseAtOnce => {}
    }
}

// === impl Behaviour::Echo ===

type BoxBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

async fn serve_echo(stream: TcpStream, mut s: Shared) {
    match s.transport.clone() {
        Transport::Clear => echo_over(stream, s, false).await,
        Transport::H2c => echo_over(stream, s, true).await,
        Transport::Tls(config) => {
            let accepted = tokio::time::timeout(
                Duration::from_secs(10),
                tokio_rustls::TlsAcceptor::from(config).accept(stream),
            )
            .await;
            let Ok(Ok(tls)) = accepted else { return };
            let (_, conn) = tls.get_ref();
            s.sni = conn.server_name().map(Into::into);
            let h2 = conn.alpn_protocol() == Some(b"h2");
            echo_over(tls, s, h2).await;
        }
    }
}

async fn echo_over<I>(io: I, s: Shared, h2: bool)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = service_fn(move |req| handle(req, s.clone()));
    if h2 {
        let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .serve_connection(TokioIo::new(io), svc)
            .await;
    } else {
        let _ = hyper::server::conn::http1::Builder::new()
            .keep_alive(true)
            .serve_connection(TokioIo::new(io), svc)
            .with_upgrades()
            .await;
    }
}

async fn handle(req: Request<Incoming>, s: Shared) -> Result<Response<BoxBody>, Infallible> {
    if s.health_path.as_deref() == Some(req.uri().path()) {
        let status = StatusCode::from_u16(s.health.load(Ordering::Relaxed)).expect("status");
        return Ok(simple(status, "health"));
    }
    if req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
    {
        return Ok(grpc_echo(req, s).await);
    }
    let name = s.name.as_ref();
    let version = format!("{:?}", req.version());
    let uri = req
        .uri()
        .path_and_query()
        .map(|pq| pq.as_str().to_string())
        .unwrap_or_else(|| req.uri().to_string());
    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let seen = Seen {
        at: Instant::now(),
        method: req.method().to_string(),
        uri: uri.clone(),
        headers: headers.clone(),
        head: String::new(),
    };
    s.log.lock().unwrap().push(seen.clone());

    // WebSocket upgrade: echo every text/binary message.
    let is_upgrade = req
        .headers()
        .get(http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if is_upgrade && req.uri().path() == "/ws" {
        let key = req
            .headers()
            .get("sec-websocket-key")
            .map(|k| derive_accept_key(k.as_bytes()));
        let Some(accept) = key else {
            return Ok(simple(StatusCode::BAD_REQUEST, "missing sec-websocket-key"));
        };
        let mut req = req;
        let on_upgrade = hyper::upgrade::on(&mut req);
        tokio::spawn(async move {
            let Ok(upgraded) = on_upgrade.await else {
                return;
            };
            let mut ws =
                WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                let Ok(Some(Ok(msg))) =
                    tokio::time::timeout(Duration::from_secs(30), ws.next()).await
                else {
                    break;
                };
                if msg.is_close() {
                    break;
                }
                if (msg.is_text() || msg.is_binary()) && ws.send(msg).await.is_err() {
                    break;
                }
            }
        });
        let resp = Response::builder()
            .status(StatusCode::SWITCHING_PROTOCOLS)
            .header(http::header::CONNECTION, "Upgrade")
            .header(http::header::UPGRADE, "websocket")
            .header("sec-websocket-accept", accept)
            .header("x-backend", name)
            .body(Empty::new().boxed())
            .expect("101 response");
        return Ok(resp);
    }

    let mut wait = s.delay;
    if req.uri().path().contains("/slow") {
        wait = wait.max(Duration::from_secs(1));
    }
    // Drain the request body so keep-alive stays usable.
    let _ = req.into_body().collect().await;
    if !wait.is_zero() {
        // Slow on purpose: the delay is the behaviour asked for, not a wait.
        tokio::time::sleep(wait).await;
    }

    let mut hmap: BTreeMap<String, String> = BTreeMap::new();
    for (k, _) in &headers {
        if !hmap.contains_key(k) {
            hmap.insert(k.clone(), seen.header(k).unwrap_or_default());
        }
    }
    let body = json!({
        "backend": name,
        "method": seen.method,
        "uri": uri,
        "headers": hmap,
        "version": version,
        "sni": s.sni.as_deref(),
    });
    let resp = Response::builder()
        .status(StatusCode::OK)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header("x-backend", name)
        .body(Full::new(Bytes::from(body.to_string())).boxed())
        .expect("200 response");
    Ok(resp)
}

/// A gRPC request to [`Behaviour::Echo`]: the request's messages come back as they are, then
/// the trailers `grpc-status` (the request's `x-want-status`, else 0) and `grpc-message`; the
/// `x-md` metadata is echoed as a response header and `x-backend` names the backend.
async fn grpc_echo(req: Request<Incoming>, s: Shared) -> Response<BoxBody> {
    let md = req.headers().get("x-md").cloned();
    let want = req
        .headers()
        .get("x-want-status")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("0")
        .to_string();
    let seen = Seen {
        at: Instant::now(),
        method: req.method().to_string(),
        uri: req.uri().path().to_string(),
        headers: Vec::new(),
        head: String::new(),
    };
    s.log.lock().unwrap().push(seen);
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    if !s.delay.is_zero() {
        // Slow on purpose (a deadline test), not a wait.
        tokio::time::sleep(s.delay).await;
    }
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", want.parse().expect("status"));
    trailers.insert("grpc-message", "echoed".parse().expect("message"));
    let frames = vec![
        Ok::<_, Infallible>(hyper::body::Frame::data(body)),
        Ok(hyper::body::Frame::trailers(trailers)),
    ];
    let stream_body = http_body_util::StreamBody::new(futures_util::stream::iter(frames));
    let mut resp = Response::builder()
        .status(StatusCode::OK)
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header("x-backend", s.name.as_ref());
    if let Some(md) = md {
        resp = resp.header("x-md", md);
    }
    resp.body(BodyExt::boxed(stream_body))
        .expect("grpc response")
}

fn simple(status: StatusCode, text: &'static str) -> Response<BoxBody> {
    Response::builder()
        .status(status)
        .body(Full::new(Bytes::from_static(text.as_bytes())).boxed())
        .expect("response")
}

// === impl Behaviour::Plain, Behaviour::Scripted ===

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A new recording for an accepted connection.
fn recording(s: &Shared) -> Recording {
    let rec: Recording = Arc::default();
    s.conns.lock().unwrap().push(Arc::clone(&rec));
    rec
}

/// Reads into `buf` (and the recording) until it holds `want` bytes; false on EOF, error or a
/// 70 s silence (longer than a hang, so a hung request is not cut by its own reader).
async fn fill(s: &mut TcpStream, rec: &Recording, buf: &mut Vec<u8>, want: usize) -> bool {
    let mut chunk = [0u8; 8192];
    while buf.len() < want {
        match tokio::time::timeout(Duration::from_secs(70), s.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => {
                buf.extend_from_slice(&chunk[..n]);
                rec.lock().unwrap().extend_from_slice(&chunk[..n]);
            }
            _ => return false,
        }
    }
    true
}

fn parse_head(head: &str) -> Seen {
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split_whitespace();
    let method = first.next().unwrap_or("").to_string();
    let uri = first.next().unwrap_or("").to_string();
    let headers = lines
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim().to_ascii_lowercase(), v.trim().to_string()))
        })
        .collect();
    Seen {
        at: Instant::now(),
        method,
        uri,
        headers,
        head: head.to_string(),
    }
}

async fn serve_raw_http(mut stream: TcpStream, s: Shared) {
    let rec = recording(&s);
    let mut buf = Vec::with_capacity(8192);
    // Bounded: a connection serves at most this many requests (far more than any test sends
    // on one connection).
    for _ in 0..1_000_000 {
        let head_end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            let want = buf.len() + 1;
            if want > 64 * 1024 || !fill(&mut stream, &rec, &mut buf, want).await {
                return;
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let seen = parse_head(&head);
        let body_len: usize = seen
            .header("content-length")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if !fill(&mut stream, &rec, &mut buf, head_end + body_len).await {
            return;
        }
        let body: Vec<u8> = buf.drain(..head_end + body_len).skip(head_end).collect();
        let uri = seen.uri.clone();
        s.log.lock().unwrap().push(seen);
        if !s.delay.is_zero() {
            // Slow on purpose: the delay is the behaviour asked for, not a wait.
            tokio::time::sleep(s.delay).await;
        }
        let fault = *s.fault.lock().unwrap();
        match fault {
            Fault::None => {}
            Fault::Hang => {
                // Never answering is the fault; the 60 s only bound the connection.
                tokio::time::sleep(Duration::from_secs(60)).await;
                return;
            }
            Fault::ResetBeforeHeaders => {
                let _ = stream.set_zero_linger();
                return;
            }
            Fault::ResetMidBody => {
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: 1000\r\nx-backend: {}\r\n\r\n",
                    s.name
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(&[b'x'; 100]).await;
                let _ = stream.flush().await;
                // Part of the fault: the partial body leaves before the reset, so the proxy
                // has begun the response when the connection breaks.
                tokio::time::sleep(Duration::from_millis(50)).await;
                let _ = stream.set_zero_linger();
                return;
            }
        }
        let (answer, close) = match s.behaviour {
            Behaviour::Scripted(script) => script(&head, &body),
            _ => {
                let text = format!("{} {uri}", s.name);
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nx-backend: {}\r\n\
                     content-length: {}\r\n\r\n{text}",
                    s.name,
                    text.len()
                );
                (answer.into_bytes(), false)
            }
        };
        if stream.write_all(&answer).await.is_err() || close {
            return;
        }
    }
}

// === impl Behaviour::RecordOnce ===

async fn record_once(mut stream: TcpStream, s: Shared) {
    let rec = recording(&s);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut answer_at = None;
    let mut buf = [0u8; 8192];
    loop {
        match tokio::time::timeout_at(answer_at.unwrap_or(deadline), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(n)) => {
                let mut r = rec.lock().unwrap();
                r.extend_from_slice(&buf[..n]);
                if answer_at.is_none() && find(&r, b"\r\n\r\n").is_some() {
                    answer_at = Some(tokio::time::Instant::now() + Duration::from_millis(100));
                }
            }
            Err(_) if answer_at.is_some() => {
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                    )
                    .await;
                return;
            }
            Err(_) => return,
        }
    }
}

// === impl Behaviour::TcpEcho ===

async fn tcp_echo(mut stream: TcpStream, name: &str) {
    let _ = stream.write_all(format!("{name}\n").as_bytes()).await;
    let (mut r, mut w) = stream.split();
    // Bounded: a connection lives at most 120 s (longer than any test keeps one).
    let _ = tokio::time::timeout(Duration::from_secs(120), tokio::io::copy(&mut r, &mut w)).await;
    let _ = w.shutdown().await;
}

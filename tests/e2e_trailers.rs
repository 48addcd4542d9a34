//! Trailers where one leg is HTTP/1.1, through a real switchyard on 127.0.0.1 and on both
//! engines (`--fast-path` on and off): an HTTP/1.1 client's chunked request with trailers to an
//! h2c backend and to an HTTP/1.1 backend, and an HTTP/2 client's trailers to an HTTP/1.1
//! backend; each backend's response trailers back to the client in the same protocol. On
//! HTTP/1.1 trailers ride in the last chunk of a chunked body, which Pingora 0.9.1 parsed and
//! dropped (vendor/README.md). Fields that frame a message or belong to one connection are not
//! trailers and are left out on the way. A request sent again to another backend, after the
//! first went away with its body read whole or in part, carries its body and trailers again;
//! a `POST` goes again only when an HTTP/2 backend did not process it (refused, or past its
//! GOAWAY). The test backends are written here by hand, so they show exactly what reached them;
//! every wait is bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

const ENGINES: [&[&str]; 2] = [&[], &["--fast-path", "false"]];
const WAIT: Duration = Duration::from_secs(5);

/// A backend task, stopped when dropped.
struct Task(tokio::task::JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What every backend here answers: `<method> <path> <body bytes> <x-request-trailer or ->
/// <the request's trailer names, comma-separated, or ->`, then the trailer `x-trailer: done`.
fn text(method: &str, path: &str, n: usize, trailer: Option<&str>, names: &[&str]) -> String {
    let names = if names.is_empty() {
        "-".to_owned()
    } else {
        names.join(",")
    };
    format!("{method} {path} {n} {} {names}", trailer.unwrap_or("-"))
}

/// What the test backends sharing it do with the next request while `armed` is set (`how`),
/// saying so on `closed` when done.
#[derive(Default)]
struct Dropper {
    armed: AtomicBool,
    how: Failing,
    closed: tokio::sync::Notify,
}

/// How a backend fails a request.
#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum Failing {
    /// Read it to its end, trailers too, then close the connection unanswered, as a backend
    /// that goes away mid-request does.
    #[default]
    Whole,
    /// The same after the first chunk of its body (h2c backends only).
    FirstChunk,
    /// Refuse the stream unprocessed (`REFUSED_STREAM`, h2c backends only).
    Refuse,
}

impl Dropper {
    fn armed(how: Failing) -> Arc<Self> {
        Arc::new(Self {
            armed: AtomicBool::new(true),
            how,
            closed: tokio::sync::Notify::new(),
        })
    }

    fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    fn take(&self) -> bool {
        self.armed.swap(false, Ordering::SeqCst)
    }

    fn dropped(&self) -> bool {
        !self.armed.load(Ordering::SeqCst)
    }
}

/// An h2c backend (prior knowledge) on a free port, dropping requests as `dropping` says.
async fn h2c_backend(dropping: Arc<Dropper>) -> (u16, Task) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let dropping = dropping.clone();
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(tcp).await else {
                    return;
                };
                // The connection must go on being polled while a body is read.
                let read = Arc::new(tokio::sync::Notify::new());
                loop {
                    let (req, respond) = tokio::select! {
                        next = conn.accept() => match next {
                            Some(Ok(stream)) => stream,
                            _ => return,
                        },
                        () = read.notified() => return,
                    };
                    match (dropping.take(), dropping.how) {
                        (false, _) => {
                            tokio::spawn(h2_answer(req, respond));
                        }
                        (true, Failing::Refuse) => {
                            let mut respond = respond;
                            respond.send_reset(h2::Reason::REFUSED_STREAM);
                            dropping.closed.notify_one();
                        }
                        (true, how) => {
                            let read = read.clone();
                            let dropping = dropping.clone();
                            tokio::spawn(async move {
                                let mut body = req.into_body();
                                while let Some(Ok(chunk)) = body.data().await {
                                    let _ = body.flow_control().release_capacity(chunk.len());
                                    if how == Failing::FirstChunk {
                                        break;
                                    }
                                }
                                if how == Failing::Whole {
                                    let _ = body.trailers().await;
                                }
                                read.notify_one();
                                drop(respond);
                                dropping.closed.notify_one();
                            });
                        }
                    }
                }
            });
        }
    });
    (port, Task(task))
}

async fn h2_answer(
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    let (parts, mut body) = req.into_parts();
    let mut n = 0;
    while let Some(Ok(chunk)) = body.data().await {
        n += chunk.len();
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let trailers = body.trailers().await.ok().flatten().unwrap_or_default();
    let trailer = trailers
        .get("x-request-trailer")
        .map(|v| v.to_str().unwrap_or("?"));
    let names: Vec<&str> = trailers.keys().map(|n| n.as_str()).collect();
    let resp = http::Response::builder().status(200).body(()).unwrap();
    if let Ok(mut send) = respond.send_response(resp, false) {
        let body = text(parts.method.as_str(), parts.uri.path(), n, trailer, &names);
        let _ = send.send_data(Bytes::from(body), false);
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-trailer", http::HeaderValue::from_static("done"));
        let _ = send.send_trailers(trailers);
    }
}

/// An HTTP/1.1 backend on a free port, keeping connections alive. A chunked request's trailers
/// are read; the answer is chunked with a trailer. `Content-Length` bodies are read too, and
/// any other request has none. It drops requests as `dropping` says (whole ones only).
async fn h1_backend(dropping: Arc<Dropper>) -> (u16, Task) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let dropping = dropping.clone();
            tokio::spawn(async move {
                let mut conn = BufReader::new(tcp);
                while let Ok(Some(msg)) = read_message(&mut conn, true).await {
                    if dropping.take() {
                        dropping.closed.notify_one();
                        return;
                    }
                    let (method, path) = msg.start.split_once(' ').unwrap_or(("?", "?"));
                    let path = path.split(' ').next().unwrap_or("?");
                    let trailer = msg.trailer("x-request-trailer");
                    let names: Vec<&str> = msg.trailers.iter().map(|(n, _)| n.as_str()).collect();
                    let body = text(method, path, msg.body.len(), trailer, &names);
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
                         {:x}\r\n{body}\r\n0\r\nx-trailer: done\r\n\r\n",
                        body.len()
                    );
                    if conn.get_mut().write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, Task(task))
}

/// One HTTP/1.1 message as read off the wire.
#[derive(Debug)]
struct Message {
    /// The request or status line.
    start: String,
    /// Field lines, names lower-cased.
    fields: Vec<(String, String)>,
    body: Vec<u8>,
    /// The trailer section's fields, names lower-cased.
    trailers: Vec<(String, String)>,
}

impl Message {
    fn trailer(&self, name: &str) -> Option<&str> {
        self.trailers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

async fn line<R: AsyncBufReadExt + Unpin>(r: &mut R) -> std::io::Result<Option<String>> {
    let mut l = String::new();
    if r.read_line(&mut l).await? == 0 {
        return Ok(None);
    }
    Ok(Some(l.trim_end_matches(['\r', '\n']).to_owned()))
}

async fn fields<R: AsyncBufReadExt + Unpin>(r: &mut R) -> std::io::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    while let Some(l) = line(r).await? {
        if l.is_empty() {
            return Ok(out);
        }
        let (n, v) = l.split_once(':').unwrap_or((&l, ""));
        out.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
    }
    Err(std::io::ErrorKind::UnexpectedEof.into())
}

/// Reads one message: a request (`request`), or a response with a body.
async fn read_message<R: AsyncBufReadExt + Unpin>(
    r: &mut R,
    request: bool,
) -> std::io::Result<Option<Message>> {
    let Some(start) = line(r).await? else {
        return Ok(None);
    };
    let mut msg = Message {
        start,
        fields: fields(r).await?,
        body: Vec::new(),
        trailers: Vec::new(),
    };
    if msg.field("transfer-encoding") == Some("chunked") {
        loop {
            let size = line(r).await?.ok_or(std::io::ErrorKind::UnexpectedEof)?;
            let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| std::io::ErrorKind::InvalidData)?;
            if size == 0 {
                msg.trailers = fields(r).await?;
                break;
            }
            let mut chunk = vec![0; size + 2];
            r.read_exact(&mut chunk).await?;
            msg.body.extend_from_slice(&chunk[..size]);
        }
    } else if let Some(n) = msg.field("content-length") {
        let mut body = vec![0; n.parse().map_err(|_| std::io::ErrorKind::InvalidData)?];
        r.read_exact(&mut body).await?;
        msg.body = body;
    } else if !request {
        r.read_to_end(&mut msg.body).await?;
    }
    Ok(Some(msg))
}

/// Sends `request` (whole, as bytes) on a new connection to `port` and reads the answer.
async fn h1_exchange(port: u16, request: &str) -> Message {
    let mut conn = h1_connect(port).await;
    h1_send(&mut conn, request).await
}

async fn h1_connect(port: u16) -> BufReader<TcpStream> {
    BufReader::new(TcpStream::connect(("127.0.0.1", port)).await.unwrap())
}

/// Sends `request` on `conn` and reads the answer.
async fn h1_send(conn: &mut BufReader<TcpStream>, request: &str) -> Message {
    let run = async {
        conn.get_mut().write_all(request.as_bytes()).await.unwrap();
        read_message(conn, false).await
    };
    match tokio::time::timeout(WAIT, run).await {
        Ok(Ok(Some(m))) => m,
        other => panic!("no answer: {other:?}"),
    }
}

/// `got` is a `200` with `body` and the backends' trailer `x-trailer: done`.
fn answered(got: &Message, body: &str, engine: &[&str]) {
    assert!(got.start.starts_with("HTTP/1.1 200"), "{engine:?}: {got:?}");
    assert_eq!(String::from_utf8_lossy(&got.body), body, "{engine:?}");
    assert_eq!(
        got.trailer("x-trailer"),
        Some("done"),
        "{engine:?}: {got:?}"
    );
}

/// A chunked `POST` to `path` with `hello` and the given trailer section.
fn chunked_post(path: &str, trailers: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: t.test\r\ntransfer-encoding: chunked\r\nte: trailers\r\n\
         \r\n5\r\nhello\r\n0\r\n{trailers}\r\n"
    )
}

fn world(name: &str, app_protocol: Option<&str>, port: u16) -> Vec<Value> {
    let mut s = svc(name, 80);
    if let Some(p) = app_protocol {
        s = s.app_protocol(p);
    }
    vec![s.into(), slice(name, "", port)]
}

/// An HTTP/1.1 client's request trailers reach an h2c backend, and its response trailers come
/// back in the last chunk, on both engines. A field that is not a trailer (`te`, which an h2
/// peer refuses in trailers) is left out and the rest still goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_client_and_an_h2c_backend_exchange_trailers() {
    let (port, _task) = h2c_backend(Arc::default()).await;
    for engine in ENGINES {
        let sy = switchyard(world("h2", Some("h2c"), port))
            .args(engine)
            .start()
            .await;
        let got = h1_exchange(
            sy.http_port,
            &chunked_post("/h2/t", "x-request-trailer: from-h1\r\nte: gzip\r\n"),
        )
        .await;
        answered(&got, "POST /t 5 from-h1 x-request-trailer", engine);
        // Without trailers, as before.
        let plain = h1_exchange(sy.http_port, &chunked_post("/h2/u", "")).await;
        assert_eq!(String::from_utf8_lossy(&plain.body), "POST /u 5 - -");
    }
}

/// HTTP/1.1 on both legs: the request's trailers reach the backend and the response's come
/// back, on both engines (the fast path relays a chunked body as it is; Pingora's proxy reads
/// and writes the trailer section again). A malformed trailer section is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_trailers_travel_both_ways_on_both_engines() {
    let (port, _task) = h1_backend(Arc::default()).await;
    for engine in ENGINES {
        let sy = switchyard(world("web", None, port))
            .args(engine)
            .start()
            .await;
        let mut conn = h1_connect(sy.http_port).await;
        let got = h1_send(
            &mut conn,
            &chunked_post(
                "/web/t",
                "x-request-trailer: from-h1\r\ncontent-length: 9\r\nx-other: 1\r\n",
            ),
        )
        .await;
        answered(&got, "POST /t 5 from-h1 x-request-trailer,x-other", engine);
        // The connection goes on after trailers both ways. A response's trailers to a plain
        // GET (which the fast path relays itself).
        let get = h1_send(&mut conn, "GET /web/g HTTP/1.1\r\nhost: t.test\r\n\r\n").await;
        answered(&get, "GET /g 0 - -", engine);
        // A trailer section that is not field lines: 400, and the log says why.
        let bad = h1_exchange(
            sy.http_port,
            &chunked_post("/web/t", "not a field line\r\n"),
        )
        .await;
        assert!(bad.start.starts_with("HTTP/1.1 400"), "{engine:?}: {bad:?}");
        assert!(
            eventually(WAIT, || async { sy.stderr().contains("malformed trailer") }).await,
            "{engine:?}: {}",
            sy.stderr()
        );
    }
}

/// An HTTP/2 client's request trailers reach an HTTP/1.1 backend in its chunked body, and the
/// backend's trailers come back as HTTP/2 trailers, on both engines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_client_and_an_http1_backend_exchange_trailers() {
    let (port, _task) = h1_backend(Arc::default()).await;
    for engine in ENGINES {
        let sy = switchyard(world("web", None, port))
            .args(engine)
            .start()
            .await;
        let (body, trailers) = h2_exchange(sy.http_port, "POST", engine).await;
        assert_eq!(body, "POST /t 5 from-h2 x-request-trailer", "{engine:?}");
        assert_eq!(
            trailers.as_ref().and_then(|t| t.get("x-trailer")),
            Some(&http::HeaderValue::from_static("done")),
            "{engine:?}"
        );
    }
}

/// An HTTP/2 request (prior knowledge) to `port`: `method` `/web/t` with `hello` and the trailer
/// `x-request-trailer: from-h2`; the answer's body and trailers, which must be a `200`.
async fn h2_exchange(
    port: u16,
    method: &str,
    engine: &[&str],
) -> (String, Option<http::HeaderMap>) {
    let (status, body, trailers) = h2_request(port, method, Bytes::from_static(b"hello")).await;
    assert_eq!(status, 200, "{engine:?}: {body}");
    (body, trailers)
}

/// As `h2_exchange`, with `body`; the answer's status too.
async fn h2_request(
    port: u16,
    method: &str,
    body: Bytes,
) -> (u16, String, Option<http::HeaderMap>) {
    let send = h2_client(port).await;
    let run = async {
        let mut send = send.ready().await.unwrap();
        let (resp, mut stream) = send.send_request(web_request(method), false).unwrap();
        stream.send_data(body, false).unwrap();
        let mut trailers = http::HeaderMap::new();
        trailers.insert(
            "x-request-trailer",
            http::HeaderValue::from_static("from-h2"),
        );
        stream.send_trailers(trailers).unwrap();
        read_h2_answer(resp).await
    };
    tokio::time::timeout(WAIT, run).await.expect("no answer")
}

/// An HTTP/2 connection (prior knowledge) to `port`, driven in a task of its own.
async fn h2_client(port: u16) -> h2::client::SendRequest<Bytes> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

/// `method` `http://t.test/web/t`, the target of every HTTP/2 request here.
fn web_request(method: &str) -> http::Request<()> {
    http::Request::builder()
        .method(method)
        .uri("http://t.test/web/t")
        .body(())
        .unwrap()
}

/// The answer's status, body and trailers.
async fn read_h2_answer(
    resp: h2::client::ResponseFuture,
) -> (u16, String, Option<http::HeaderMap>) {
    let resp = resp.await.unwrap();
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut got = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        got.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await.unwrap();
    (status, String::from_utf8_lossy(&got).into_owned(), trailers)
}

/// switchyard with `engine`'s flags before two h2c backends that fail the next request as
/// `how` says.
async fn two_failing_h2c(how: Failing, engine: &[&str]) -> (Arc<Dropper>, Switchyard, [Task; 2]) {
    let dropping = Dropper::armed(how);
    let (a, task_a) = h2c_backend(dropping.clone()).await;
    let (b, task_b) = h2c_backend(dropping.clone()).await;
    let sy = switchyard(two_h2c_endpoints(a, b))
        .args(engine)
        .start()
        .await;
    (dropping, sy, [task_a, task_b])
}

/// Service `web` (`appProtocol: h2c`) with the endpoints on ports `a` and `b`.
fn two_h2c_endpoints(a: u16, b: u16) -> Vec<Value> {
    let s = svc("web", 80).app_protocol("h2c");
    vec![s.into(), slice("web", "", a), slice("web", "", b)]
}

/// A request sent again keeps its trailers. The first request either of two backends gets is
/// read whole, trailers included, and its connection closed unanswered; switchyard replays the
/// `PUT` (idempotent, its body kept) on the other, which must get the trailers too. A body
/// longer than what is kept for a replay (64 KiB) is not sent again: `502`. HTTP/1.1 and HTTP/2
/// clients, HTTP/1.1 and h2c backends, both engines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_sent_again_keeps_its_trailers() {
    for engine in ENGINES {
        for h2c in [false, true] {
            let dropping = Dropper::armed(Failing::Whole);
            let backend = || async {
                if h2c {
                    h2c_backend(dropping.clone()).await
                } else {
                    h1_backend(dropping.clone()).await
                }
            };
            let ((a, _a), (b, _b)) = (backend().await, backend().await);
            let mut s = svc("web", 80);
            if h2c {
                s = s.app_protocol("h2c");
            }
            let sy = switchyard(vec![s.into(), slice("web", "", a), slice("web", "", b)])
                .args(engine)
                .start()
                .await;
            let to = if h2c { "h2c" } else { "h1" };
            let put =
                chunked_post("/web/t", "x-request-trailer: from-h1\r\n").replacen("POST", "PUT", 1);
            let got = h1_exchange(sy.http_port, &put).await;
            answered(&got, "PUT /t 5 from-h1 x-request-trailer", engine);
            assert!(dropping.dropped(), "{engine:?} to {to}: none dropped");
            dropping.arm();
            let (body, trailers) = h2_exchange(sy.http_port, "PUT", engine).await;
            assert_eq!(
                body, "PUT /t 5 from-h2 x-request-trailer",
                "{engine:?} to {to}"
            );
            assert!(trailers.is_some_and(|t| t.contains_key("x-trailer")));
            assert!(dropping.dropped(), "{engine:?} to {to}: none dropped");
            dropping.arm();
            let long = Bytes::from(vec![b'x'; 70 * 1024]);
            let (status, body, _) = h2_request(sy.http_port, "PUT", long).await;
            assert_eq!(status, 502, "{engine:?} to {to}: {body}");
            assert!(dropping.dropped(), "{engine:?} to {to}: none dropped");
        }
    }
}

/// A request whose first try breaks while the client is still sending its body goes again
/// whole: the part kept, then the rest as it comes, then the trailers. The first backend closes
/// its connection after the body's first chunk; only then does the client send the rest. An
/// HTTP/2 client and h2c backends, on both engines (the fast path's relay, Pingora's proxy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_broken_mid_body_goes_again_whole() {
    for engine in ENGINES {
        let (dropping, sy, _backends) = two_failing_h2c(Failing::FirstChunk, engine).await;
        let send = h2_client(sy.http_port).await;
        let run = async {
            let mut send = send.ready().await.unwrap();
            let (resp, mut stream) = send.send_request(web_request("PUT"), false).unwrap();
            stream.send_data(Bytes::from_static(b"hel"), false).unwrap();
            dropping.closed.notified().await;
            stream.send_data(Bytes::from_static(b"lo"), false).unwrap();
            let mut trailers = http::HeaderMap::new();
            trailers.insert("x-request-trailer", http::HeaderValue::from_static("late"));
            stream.send_trailers(trailers).unwrap();
            read_h2_answer(resp).await
        };
        let (status, body, _) = tokio::time::timeout(WAIT, run).await.expect("no answer");
        assert!(dropping.dropped(), "{engine:?}");
        assert_eq!(status, 200, "{engine:?}: {body}");
        assert_eq!(body, "PUT /t 5 late x-request-trailer", "{engine:?}");
    }
}

/// A request an HTTP/2 backend refused unprocessed (`REFUSED_STREAM`, RFC 9113 §8.7) goes to
/// another endpoint whatever its method: a `POST` here, without a body and with one, on both
/// engines (the fast path's relay and Pingora's proxy tell a refused stream alike, and keep
/// the body for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_post_goes_to_another_endpoint_on_both_engines() {
    for engine in ENGINES {
        let (dropping, sy, _backends) = two_failing_h2c(Failing::Refuse, engine).await;
        let (status, body) = h2_bodiless_post(sy.http_port).await;
        assert!(dropping.dropped(), "{engine:?}");
        assert_eq!(status, 200, "{engine:?}: {body}");
        assert_eq!(body, "POST /t 0 - -", "{engine:?}");
        // With a body, which may have gone before the refusal came: kept, and sent again.
        dropping.arm();
        let (status, body, _) = h2_request(sy.http_port, "POST", Bytes::from("hello")).await;
        assert!(dropping.dropped(), "{engine:?}");
        assert_eq!(status, 200, "{engine:?}: {body}");
        assert_eq!(body, "POST /t 5 from-h2 x-request-trailer", "{engine:?}");
    }
}

/// What a `raw_h2_backend` does with the first request any of them gets.
#[derive(Clone, Copy)]
enum RawFirst {
    /// A DATA frame on stream 0, a connection error (RFC 9113 §6.1): `h2` sends a GOAWAY of its
    /// own.
    BreakProtocol,
    /// A GOAWAY whose last stream is 0, as a backend shutting down sends: the request was not
    /// processed (RFC 9113 §6.8).
    GoAway,
}

/// An "h2c backend" written frame by frame, to fail a request in ways `h2`'s server does not:
/// the first request any of those sharing `seen` gets is failed as `first` says; a later one
/// gets a `200` without a body. `seen` counts the requests that reached one.
async fn raw_h2_backend(seen: Arc<AtomicUsize>, first: RawFirst) -> (u16, Task) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                // The client's preface (24 bytes), then frames until a HEADERS one.
                let mut at = 24;
                let stream = loop {
                    match tcp.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                    let mut headers = None;
                    while buf.len() >= at + 9 {
                        let len = usize::from(buf[at]) << 16
                            | usize::from(buf[at + 1]) << 8
                            | usize::from(buf[at + 2]);
                        if buf[at + 3] == 0x1 {
                            headers =
                                Some([buf[at + 5] & 0x7f, buf[at + 6], buf[at + 7], buf[at + 8]]);
                        }
                        at += 9 + len;
                    }
                    if let Some(stream) = headers {
                        break stream;
                    }
                };
                let settings_and_ack = [0, 0, 0, 0x4, 0, 0, 0, 0, 0, 0, 0, 0, 0x4, 0x1, 0, 0, 0, 0];
                let _ = tcp.write_all(&settings_and_ack).await;
                let answer: Vec<u8> = match (seen.fetch_add(1, Ordering::SeqCst), first) {
                    (0, RawFirst::BreakProtocol) => vec![0, 0, 1, 0x0, 0, 0, 0, 0, 0, b'x'],
                    (0, RawFirst::GoAway) => {
                        vec![0, 0, 8, 0x7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
                    }
                    // HEADERS, END_STREAM | END_HEADERS: `:status: 200` (static index 8).
                    _ => [&[0, 0, 1, 0x1, 0x5][..], &stream, &[0x88]].concat(),
                };
                let _ = tcp.write_all(&answer).await;
                // Held open until switchyard closes it.
                while let Ok(n) = tcp.read(&mut chunk).await {
                    if n == 0 {
                        break;
                    }
                }
            });
        }
    });
    (port, Task(task))
}

/// A GOAWAY that `h2` sends itself, because the backend broke the protocol, does not make a
/// `POST` unprocessed: it is not sent again (the backend may have processed it), on both
/// engines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_is_not_replayed_after_the_backend_broke_the_protocol() {
    for engine in ENGINES {
        let seen = Arc::new(AtomicUsize::new(0));
        let (a, _a) = raw_h2_backend(seen.clone(), RawFirst::BreakProtocol).await;
        let (b, _b) = raw_h2_backend(seen.clone(), RawFirst::BreakProtocol).await;
        let sy = switchyard(two_h2c_endpoints(a, b))
            .args(engine)
            .start()
            .await;
        let (status, body) = h2_bodiless_post(sy.http_port).await;
        assert_eq!(status, 502, "{engine:?}: {body}");
        assert_eq!(seen.load(Ordering::SeqCst), 1, "{engine:?}: sent again");
    }
}

/// A `POST` past the last stream of a GOAWAY the backend sent (a backend shutting down) was
/// not processed, and goes to another endpoint, on both engines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_past_a_backends_goaway_goes_to_another_endpoint() {
    for engine in ENGINES {
        let seen = Arc::new(AtomicUsize::new(0));
        let (a, _a) = raw_h2_backend(seen.clone(), RawFirst::GoAway).await;
        let (b, _b) = raw_h2_backend(seen.clone(), RawFirst::GoAway).await;
        let sy = switchyard(two_h2c_endpoints(a, b))
            .args(engine)
            .start()
            .await;
        let (status, body) = h2_bodiless_post(sy.http_port).await;
        assert_eq!(status, 200, "{engine:?}: {body}");
        assert_eq!(seen.load(Ordering::SeqCst), 2, "{engine:?}");
    }
}

/// An HTTP/2 `POST /web/t` without a body (the header ends the stream) to `port`: the answer's
/// status and body.
async fn h2_bodiless_post(port: u16) -> (u16, String) {
    let send = h2_client(port).await;
    let run = async {
        let mut send = send.ready().await.unwrap();
        let (resp, _) = send.send_request(web_request("POST"), true).unwrap();
        let (status, body, _) = read_h2_answer(resp).await;
        (status, body)
    };
    tokio::time::timeout(WAIT, run).await.expect("no answer")
}

/// An HTTP/2 client's body without `content-length`, ended by an empty `DATA` frame (as `h2`
/// clients end a body after the fact), reaches an HTTP/1.1 backend chunked and ended once: the
/// backend's raw bytes hold one last chunk and nothing after it. Pingora's writer sent the
/// empty frame as the chunk `0\r\n\r\n` and then the last chunk again, which a kept-alive
/// backend read as a second, bad request (vendor/README.md). Both engines (the fast path hands
/// such a stream to Pingora).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_body_without_length_ends_once_at_an_http1_backend() {
    // What the backend read up to the end of the first chunked body, and what came after it
    // within half a second.
    type Seen = std::sync::Mutex<Vec<(Vec<u8>, Vec<u8>)>>;
    let seen: Arc<Seen> = Arc::default();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let record = seen.clone();
    let _task = Task(tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let record = record.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(5).any(|w| w == b"0\r\n\r\n") {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let end = request
                    .windows(5)
                    .position(|w| w == b"0\r\n\r\n")
                    .map_or(request.len(), |i| i + 5);
                let mut extra = request.split_off(end);
                let answer = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                if tcp.write_all(answer.as_bytes()).await.is_err() {
                    return;
                }
                let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
                while let Ok(Ok(n)) = tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
                    if n == 0 {
                        break;
                    }
                    extra.extend_from_slice(&buf[..n]);
                }
                record.lock().unwrap().push((request, extra));
            });
        }
    }));
    for engine in ENGINES {
        let sy = switchyard(world("web", None, port))
            .args(engine)
            .start()
            .await;
        let send = h2_client(sy.http_port).await;
        let run = async {
            let mut send = send.ready().await.unwrap();
            let (resp, mut stream) = send.send_request(web_request("POST"), false).unwrap();
            stream
                .send_data(Bytes::from_static(b"hello"), false)
                .unwrap();
            stream.send_data(Bytes::new(), true).unwrap();
            read_h2_answer(resp).await
        };
        let (status, body, _) = tokio::time::timeout(WAIT, run).await.expect("no answer");
        assert_eq!((status, body.as_str()), (200, "ok"), "{engine:?}");
        let got = poll(WAIT, Duration::from_millis(50), || async {
            seen.lock().unwrap().pop()
        })
        .await
        .expect("the backend recorded no request");
        let (request, extra) = got;
        let text = String::from_utf8_lossy(&request);
        assert!(
            text.to_ascii_lowercase()
                .contains("transfer-encoding: chunked")
                && text.ends_with("hello\r\n0\r\n\r\n"),
            "{engine:?}: {text:?}"
        );
        assert_eq!(
            String::from_utf8_lossy(&extra),
            "",
            "{engine:?}: bytes after the body's end"
        );
    }
}

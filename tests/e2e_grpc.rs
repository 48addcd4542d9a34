//! End-to-end gRPC through switchyard: a real gRPC client (tonic, messages declared by hand)
//! over HTTP/2 in clear to the HTTP port, a gRPC backend over h2c chosen by `appProtocol:
//! grpc` (the test backend echoes messages with `grpc-status` trailers). Checks that trailers,
//! status codes and metadata cross the proxy, and that switchyard's own errors are gRPC
//! statuses (no route: UNIMPLEMENTED, no endpoint: UNAVAILABLE), not HTML pages.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod tls_client;

use std::time::Duration;

use common::*;
use serde_json::Value;
use tonic::Code;
use tonic::codegen::http::uri::PathAndQuery;

#[derive(Clone, PartialEq, prost::Message)]
struct Msg {
    #[prost(string, tag = "1")]
    text: String,
}

/// One unary call of `path` with `text`, and metadata `md`.
async fn call(
    port: u16,
    path: &'static str,
    text: &str,
    md: &[(&'static str, &str)],
) -> Result<tonic::Response<Msg>, tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .timeout(Duration::from_secs(10))
        .connect()
        .await
        .map_err(|e| tonic::Status::unavailable(format!("connect: {e}")))?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let mut req = tonic::Request::new(Msg { text: text.into() });
    for (k, v) in md {
        req.metadata_mut().insert(*k, v.parse().unwrap());
    }
    grpc.unary(
        req,
        PathAndQuery::from_static(path),
        tonic_prost::ProstCodec::<Msg, Msg>::default(),
    )
    .await
}

fn grpc_service(backend: &Backend) -> Vec<Value> {
    vec![
        svc("echo", 80)
            .app_protocol("grpc")
            .acl("/test.Echo/")
            .into(),
        slice("echo", "", backend.port),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_calls_carry_messages_trailers_and_metadata() {
    let b = Backend::builder("grpc")
        .transport(Transport::H2c)
        .start()
        .await;
    let sy = switchyard(grpc_service(&b)).start().await;
    let r = call(sy.http_port, "/test.Echo/Say", "hello", &[("x-md", "m1")])
        .await
        .expect("an OK call");
    assert_eq!(r.get_ref().text, "hello");
    assert_eq!(
        r.metadata().get("x-md").and_then(|v| v.to_str().ok()),
        Some("m1"),
        "metadata round trip"
    );
    assert_eq!(b.count(), 1);

    // A status in the backend's trailers reaches the client as it is.
    let e = call(
        sy.http_port,
        "/test.Echo/Say",
        "x",
        &[("x-want-status", "5")],
    )
    .await
    .expect_err("the backend said NOT_FOUND");
    assert_eq!((e.code(), e.message()), (Code::NotFound, "echoed"));
}

/// switchyard's own answers to a gRPC request are gRPC statuses: a path no route takes is
/// UNIMPLEMENTED, a Service without endpoints UNAVAILABLE, a dead endpoint UNAVAILABLE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switchyards_own_errors_are_grpc_statuses() {
    let dead = DeadPort::new();
    let objs = vec![
        svc("empty", 80)
            .app_protocol("grpc")
            .acl("/test.Empty/")
            .into(),
        svc("dead", 80)
            .app_protocol("grpc")
            .acl("/test.Dead/")
            .into(),
        slice("dead", "", dead.port),
    ];
    let sy = switchyard(objs).start().await;
    let e = call(sy.http_port, "/test.Nowhere/Say", "x", &[])
        .await
        .expect_err("no route");
    assert_eq!(e.code(), Code::Unimplemented, "{e:?}");
    let e = call(sy.http_port, "/test.Empty/Say", "x", &[])
        .await
        .expect_err("no endpoint");
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    let e = call(sy.http_port, "/test.Dead/Say", "x", &[])
        .await
        .expect_err("connection refused");
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
}

/// `grpc-timeout` is the call's deadline at switchyard too: a backend slower than it is cut off
/// and the client gets DEADLINE_EXCEEDED when the deadline passes, not when the backend
/// answers. A plain HTTP/2 client sends the header, so no client-side timer is involved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_timeout_is_the_deadline() {
    let b = Backend::builder("slow")
        .transport(Transport::H2c)
        .delay(Duration::from_secs(3))
        .start()
        .await;
    let sy = switchyard(grpc_service(&b)).start().await;
    // One empty message: flag 0, length 0.
    let message = bytes::Bytes::from_static(&[0, 0, 0, 0, 0]);
    let took = call_past_its_deadline(sy.http_port, message).await;
    assert!(
        took < Duration::from_millis(2500),
        "answered at the deadline, not when the backend did: {took:?}"
    );
}

/// Sends one gRPC call of `message` with a deadline of 300 ms (`grpc-timeout`) over a plain
/// HTTP/2 client (so no client-side timer is involved), checks that it ended with
/// DEADLINE_EXCEEDED within 10 s, and says how long that took.
async fn call_past_its_deadline(port: u16, message: bytes::Bytes) -> Duration {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let req = http::Request::post(format!("http://127.0.0.1:{port}/test.Echo/Say"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", "300m")
        .body(http_body_util::Full::new(message))
        .unwrap();
    let started = std::time::Instant::now();
    let resp = tokio::time::timeout(Duration::from_secs(10), send.send_request(req))
        .await
        .expect("an answer within 10 s")
        .unwrap();
    let took = started.elapsed();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()
            .get("grpc-status")
            .and_then(|v| v.to_str().ok()),
        Some("4"),
        "DEADLINE_EXCEEDED: {resp:?}"
    );
    took
}

/// A backend that never opens its flow-control window holds the request's message back; the
/// call still ends at its deadline (DEADLINE_EXCEEDED), not at the server timeout (50 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_never_takes_the_message_ends_the_call_at_its_deadline() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    // Takes each stream's header and holds the stream, with a window of 0 for its body.
    let backend = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::Builder::new()
                    .initial_window_size(0)
                    .handshake::<_, bytes::Bytes>(tcp)
                    .await
                else {
                    return;
                };
                let mut held = Vec::new();
                while let Some(Ok(stream)) = conn.accept().await {
                    held.push(stream);
                }
            });
        }
    });
    let objs = vec![
        svc("stuck", 80)
            .app_protocol("grpc")
            .acl("/test.Echo/")
            .into(),
        slice("stuck", "", port),
    ];
    let sy = switchyard(objs).start().await;
    // One message of 100,000 bytes (flag 0, then the length): past the 65,535 bytes a
    // connection may send before the backend's settings say its windows are 0.
    let mut message = vec![0u8];
    message.extend_from_slice(&100_000u32.to_be_bytes());
    message.resize(5 + 100_000, 7);
    let took = call_past_its_deadline(sy.http_port, message.into()).await;
    assert!(
        took < Duration::from_millis(2500),
        "at the deadline: {took:?}"
    );
    backend.abort();
}

// === streaming calls, against a tonic server in this test ===
//
// The backend below is tonic's server codec (`tonic::server::Grpc`) over hyper's HTTP/2
// server, in clear or over TLS, with four methods of `test.Stream`:
// - `Count` (server streaming): `text` = n, answers "0".."n-1"; with `x-gate` it waits after
//   the first message until the test opens the gate (so the test sees that the first message
//   crossed the proxy before the last one existed); `x-gap-ms` spaces the messages; `x-fail: CODE`
//   ends the stream with that status, message "failed on purpose" and trailer `x-trailer: t1`.
// - `Join` (client streaming): the texts joined; tells the test when the first message arrived.
// - `Chat` (bidirectional): each message answered at once, upper-cased.
// - `Say` (unary): echoes, or fails like `Count` (a trailers-only answer).
// Every method echoes `x-md` and `x-md-bin` as response metadata.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::server::{
    ClientStreamingService, ServerStreamingService, StreamingService, UnaryService,
};
use tonic::{Status, Streaming};

type MsgStream = BoxStream<'static, Result<Msg, Status>>;
type Answer<T> =
    Pin<Box<dyn std::future::Future<Output = Result<tonic::Response<T>, Status>> + Send>>;

/// What the test and the streaming backend share.
struct Signals {
    /// Opened by the test once it holds `Count`'s first message.
    gate: tokio::sync::Notify,
    /// Notified by `Join` when the first message arrived.
    first_in: tokio::sync::Notify,
    /// `Count` streams dropped before they ended (the call was cancelled).
    cancelled: AtomicUsize,
    /// What `grpc.health.v1.Health/Check` answers for the whole server (`""`) and for
    /// `test.Stream`: SERVING (1) at first; NOT_SERVING is 2.
    serving: AtomicI32,
    /// Calls of `Say` this backend answered.
    said: AtomicUsize,
}

impl Default for Signals {
    fn default() -> Self {
        Signals {
            gate: Default::default(),
            first_in: Default::default(),
            cancelled: AtomicUsize::new(0),
            serving: AtomicI32::new(1),
            said: AtomicUsize::new(0),
        }
    }
}

/// The request metadata a backend echoes back.
fn echoed(md: &MetadataMap) -> MetadataMap {
    let mut out = MetadataMap::new();
    if let Some(v) = md.get("x-md") {
        out.insert("x-md", v.clone());
    }
    if let Some(v) = md.get_bin("x-md-bin") {
        out.insert_bin("x-md-bin", v.clone());
    }
    out
}

/// `x-fail: CODE` as a failure status with a custom trailer.
fn wanted_failure(md: &MetadataMap) -> Option<Status> {
    let code: i32 = md.get("x-fail")?.to_str().ok()?.parse().ok()?;
    let mut trailers = MetadataMap::new();
    trailers.insert("x-trailer", MetadataValue::from_static("t1"));
    Some(Status::with_metadata(
        Code::from_i32(code),
        "failed on purpose",
        trailers,
    ))
}

fn with_metadata<T>(body: T, md: MetadataMap) -> tonic::Response<T> {
    let mut r = tonic::Response::new(body);
    *r.metadata_mut() = md;
    r
}

/// Counts a `Count` stream dropped before its end.
struct CancelGuard {
    signals: Arc<Signals>,
    done: bool,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if !self.done {
            self.signals.cancelled.fetch_add(1, Ordering::Relaxed);
        }
    }
}

struct Count(Arc<Signals>);

impl ServerStreamingService<Msg> for Count {
    type Response = Msg;
    type ResponseStream = MsgStream;
    type Future = Answer<MsgStream>;

    fn call(&mut self, req: tonic::Request<Msg>) -> Self::Future {
        let signals = Arc::clone(&self.0);
        Box::pin(async move {
            let md = req.metadata();
            let n: usize = req.get_ref().text.parse().unwrap_or(0);
            let gate = md.contains_key("x-gate");
            let gap = md
                .get("x-gap-ms")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .map(Duration::from_millis);
            let failure = wanted_failure(md);
            let out = echoed(md);
            let guard = CancelGuard {
                signals: Arc::clone(&signals),
                done: false,
            };
            // State: (next index, the guard, the failure still to send).
            let stream = futures_util::stream::unfold(
                (0usize, guard, failure),
                move |(i, mut guard, failure)| {
                    let signals = Arc::clone(&signals);
                    async move {
                        if i == n {
                            guard.done = true;
                            return failure.map(|f| (Err(f), (i + 1, guard, None)));
                        }
                        if i > n {
                            return None;
                        }
                        if i == 1 && gate {
                            signals.gate.notified().await;
                        }
                        if let Some(gap) = gap.filter(|_| i > 0) {
                            // Spacing the messages is the behaviour asked for, not a wait.
                            tokio::time::sleep(gap).await;
                        }
                        let msg = Msg {
                            text: i.to_string(),
                        };
                        Some((Ok(msg), (i + 1, guard, failure)))
                    }
                },
            );
            Ok(with_metadata(stream.boxed(), out))
        })
    }
}

struct Join(Arc<Signals>);

impl ClientStreamingService<Msg> for Join {
    type Response = Msg;
    type Future = Answer<Msg>;

    fn call(&mut self, req: tonic::Request<Streaming<Msg>>) -> Self::Future {
        let signals = Arc::clone(&self.0);
        Box::pin(async move {
            let out = echoed(req.metadata());
            let mut input = req.into_inner();
            let mut joined = String::new();
            // Bounded: the test sends a handful of messages.
            for i in 0..100 {
                let Some(m) = input.message().await? else {
                    break;
                };
                joined.push_str(&m.text);
                if i == 0 {
                    signals.first_in.notify_one();
                }
            }
            Ok(with_metadata(Msg { text: joined }, out))
        })
    }
}

struct Chat;

impl StreamingService<Msg> for Chat {
    type Response = Msg;
    type ResponseStream = MsgStream;
    type Future = Answer<MsgStream>;

    fn call(&mut self, req: tonic::Request<Streaming<Msg>>) -> Self::Future {
        Box::pin(async move {
            let out = echoed(req.metadata());
            let input = req.into_inner();
            let answers = input.map(|m| {
                m.map(|m| Msg {
                    text: m.text.to_uppercase(),
                })
            });
            Ok(with_metadata(answers.boxed(), out))
        })
    }
}

struct Say(Arc<Signals>);

impl UnaryService<Msg> for Say {
    type Response = Msg;
    type Future = Answer<Msg>;

    fn call(&mut self, req: tonic::Request<Msg>) -> Self::Future {
        self.0.said.fetch_add(1, Ordering::Relaxed);
        Box::pin(async move {
            if let Some(f) = wanted_failure(req.metadata()) {
                return Err(f);
            }
            let out = echoed(req.metadata());
            Ok(with_metadata(req.into_inner(), out))
        })
    }
}

type Codec = tonic_prost::ProstCodec<Msg, Msg>;

/// `grpc.health.v1.HealthCheckRequest`.
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    service: String,
}

/// `grpc.health.v1.HealthCheckResponse` (`status`: 1 SERVING, 2 NOT_SERVING).
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    status: i32,
}

type HealthCodec = tonic_prost::ProstCodec<HealthCheckResponse, HealthCheckRequest>;

/// The gRPC health service: `Signals::serving` for `""` and `test.Stream`, NOT_FOUND for
/// any other service name (as the reference implementation answers).
struct Health(Arc<Signals>);

impl UnaryService<HealthCheckRequest> for Health {
    type Response = HealthCheckResponse;
    type Future = Answer<HealthCheckResponse>;

    fn call(&mut self, req: tonic::Request<HealthCheckRequest>) -> Self::Future {
        let status = self.0.serving.load(Ordering::Relaxed);
        Box::pin(async move {
            match req.get_ref().service.as_str() {
                "" | "test.Stream" => Ok(tonic::Response::new(HealthCheckResponse { status })),
                _ => Err(Status::not_found("unknown service")),
            }
        })
    }
}

async fn route(
    req: http::Request<hyper::body::Incoming>,
    signals: Arc<Signals>,
) -> Result<http::Response<tonic::body::Body>, std::convert::Infallible> {
    let mut grpc = tonic::server::Grpc::new(Codec::default());
    Ok(match req.uri().path() {
        "/test.Stream/Count" => grpc.server_streaming(Count(signals), req).await,
        "/test.Stream/Join" => grpc.client_streaming(Join(signals), req).await,
        "/test.Stream/Chat" => grpc.streaming(Chat, req).await,
        "/test.Stream/Say" => grpc.unary(Say(signals), req).await,
        "/grpc.health.v1.Health/Check" => {
            let mut grpc = tonic::server::Grpc::new(HealthCodec::default());
            grpc.unary(Health(signals), req).await
        }
        _ => Status::unimplemented("no such method").into_http(),
    })
}

/// The streaming backend: its port and what it shares with the test; stops when dropped.
struct StreamBackend {
    port: u16,
    signals: Arc<Signals>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StreamBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StreamBackend {
    /// Over h2c, or over TLS (ALPN `h2`) with `tls`.
    async fn start(tls: Option<Arc<rustls::ServerConfig>>) -> StreamBackend {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let signals = Arc::new(Signals::default());
        let s = Arc::clone(&signals);
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (s, tls) = (Arc::clone(&s), tls.clone());
                conns.spawn(async move {
                    let svc = hyper::service::service_fn(move |req| route(req, Arc::clone(&s)));
                    let h2 = hyper::server::conn::http2::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    );
                    match tls {
                        None => {
                            let io = hyper_util::rt::TokioIo::new(tcp);
                            let _ = h2.serve_connection(io, svc).await;
                        }
                        Some(cfg) => {
                            let accept = tokio_rustls::TlsAcceptor::from(cfg).accept(tcp);
                            let Ok(Ok(stream)) =
                                tokio::time::timeout(Duration::from_secs(10), accept).await
                            else {
                                return;
                            };
                            let io = hyper_util::rt::TokioIo::new(stream);
                            let _ = h2.serve_connection(io, svc).await;
                        }
                    }
                });
                // Reap finished connections so the set stays small.
                while conns.try_join_next().is_some() {}
            }
        });
        StreamBackend {
            port,
            signals,
            task,
        }
    }
}

/// How the proxy reaches the streaming backend in a test.
#[derive(Clone, Copy, Debug)]
enum Hop {
    H2c,
    Tls,
}

const HOPS: [Hop; 2] = [Hop::H2c, Hop::Tls];

/// A streaming backend behind a switchyard that speaks `hop` to it (`grpc` or `grpcs`, the
/// latter verified against the backend's CA).
async fn behind_switchyard(hop: Hop) -> (StreamBackend, Switchyard) {
    let (mut bs, sy) = backends_behind_switchyard(hop, 1, &[], &[]).await;
    (bs.remove(0), sy)
}

/// `n` streaming backends of one Service with annotations `anns`, behind a switchyard with
/// `args` that speaks `hop` to them.
async fn backends_behind_switchyard(
    hop: Hop,
    n: usize,
    anns: &[(&str, &str)],
    args: &[&str],
) -> (Vec<StreamBackend>, Switchyard) {
    let (tls, protocol, ca) = match hop {
        Hop::H2c => (None, "grpc", None),
        Hop::Tls => {
            let ca = tls_client::Ca::new("grpc backend CA");
            let leaf = ca.server(&["stream.default.svc"]);
            (
                Some(tls_client::server_config(&leaf, &[b"h2"])),
                "grpcs",
                Some(ca),
            )
        }
    };
    let mut bs = Vec::new();
    for _ in 0..n {
        bs.push(StreamBackend::start(tls.clone()).await);
    }
    let mut s = svc("stream", 80)
        .app_protocol(protocol)
        .acl("/test.Stream/");
    for (k, v) in anns {
        s = s.ann(k, v);
    }
    let mut objs = vec![s.into()];
    objs.extend(bs.iter().map(|b| slice("stream", "", b.port)));
    let mut builder = switchyard(objs).args(args);
    let dir = tempfile::tempdir().unwrap();
    if let Some(ca) = ca {
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, &ca.pem).unwrap();
        builder = builder.args(&["--backend-ca-file", path.to_str().unwrap()]);
    }
    let sy = builder.start().await;
    (bs, sy)
}

/// A gRPC client over HTTP/2 in clear to `port` (no timeout of its own: deadlines are sent
/// as `grpc-timeout` and enforced by switchyard).
async fn client(port: u16) -> tonic::client::Grpc<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await
        .expect("connect to switchyard");
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    grpc
}

fn request<T>(body: T, md: &[(&'static str, &str)]) -> tonic::Request<T> {
    let mut req = tonic::Request::new(body);
    for (k, v) in md {
        req.metadata_mut().insert(*k, v.parse().unwrap());
    }
    req
}

fn msg(text: &str) -> Msg {
    Msg { text: text.into() }
}

/// Bounds every step of a test at 10 s, so a proxy that buffers a stream fails, not hangs.
async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .unwrap_or_else(|_| panic!("{what} within 10 s"))
}

/// Server streaming: each message crosses the proxy as it is sent (the backend holds the
/// rest of the stream until the test has the first), then the trailers end the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_streaming_relays_each_message_as_it_is_sent() {
    for hop in HOPS {
        let (b, sy) = behind_switchyard(hop).await;
        let mut grpc = client(sy.http_port).await;
        let resp = within(
            "the response header",
            grpc.server_streaming(
                request(msg("4"), &[("x-gate", "1")]),
                PathAndQuery::from_static("/test.Stream/Count"),
                Codec::default(),
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("{hop:?}: {e:?}"));
        let mut stream = resp.into_inner();
        let first = within("the first message", stream.message()).await;
        assert_eq!(first.unwrap().unwrap().text, "0", "{hop:?}");
        b.signals.gate.notify_one();
        let mut rest = Vec::new();
        for _ in 0..10 {
            match within("the next message", stream.message()).await {
                Ok(Some(m)) => rest.push(m.text),
                Ok(None) => break,
                Err(e) => panic!("{hop:?}: {e:?}"),
            }
        }
        assert_eq!(rest, ["1", "2", "3"], "{hop:?}");
        let trailers = within("the trailers", stream.trailers()).await;
        assert!(trailers.is_ok(), "{hop:?}: {trailers:?}");
    }
}

/// Client streaming: the backend has the first message before the client sends the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_streaming_relays_each_message_as_it_is_sent() {
    for hop in HOPS {
        let (b, sy) = behind_switchyard(hop).await;
        let mut grpc = client(sy.http_port).await;
        let signals = Arc::clone(&b.signals);
        let outgoing = futures_util::stream::unfold(0, move |i| {
            let signals = Arc::clone(&signals);
            async move {
                match i {
                    0 => Some((msg("a"), 1)),
                    // Sent only once the backend said it has "a": a proxy that held the
                    // request body back would never get here.
                    1 => {
                        signals.first_in.notified().await;
                        Some((msg("b"), 2))
                    }
                    2 => Some((msg("c"), 3)),
                    _ => None,
                }
            }
        });
        let r = within(
            "the joined answer",
            grpc.client_streaming(
                request(outgoing, &[("x-md", "m2")]),
                PathAndQuery::from_static("/test.Stream/Join"),
                Codec::default(),
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("{hop:?}: {e:?}"));
        assert_eq!(r.get_ref().text, "abc", "{hop:?}");
        assert_eq!(
            r.metadata().get("x-md").and_then(|v| v.to_str().ok()),
            Some("m2")
        );
    }
}

/// Bidirectional: a ping-pong, each message sent only after the previous answer arrived (a
/// proxy that buffered either direction would stall it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bidirectional_streams_ping_pong() {
    for hop in HOPS {
        let (_b, sy) = behind_switchyard(hop).await;
        let mut grpc = client(sy.http_port).await;
        let (tx, rx) = tokio::sync::mpsc::channel::<Msg>(1);
        let outgoing =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|m| (m, rx)) },
            );
        tx.send(msg("ping0")).await.unwrap();
        let resp = within(
            "the response header",
            grpc.streaming(
                request(outgoing, &[]),
                PathAndQuery::from_static("/test.Stream/Chat"),
                Codec::default(),
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("{hop:?}: {e:?}"));
        let mut answers = resp.into_inner();
        for i in 0..3 {
            let got = within("an answer", answers.message()).await;
            assert_eq!(got.unwrap().unwrap().text, format!("PING{i}"), "{hop:?}");
            if i < 2 {
                tx.send(msg(&format!("ping{}", i + 1))).await.unwrap();
            }
        }
        drop(tx);
        let end = within("the end of the stream", answers.message()).await;
        assert!(matches!(end, Ok(None)), "{hop:?}: {end:?}");
    }
}

/// A backend's error crosses whole: status, message and custom trailer metadata, both after
/// streamed messages (in trailers) and as a trailers-only answer (in the header).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_errors_keep_status_message_and_trailers() {
    for hop in HOPS {
        let (_b, sy) = behind_switchyard(hop).await;
        let mut grpc = client(sy.http_port).await;
        let resp = within(
            "the response header",
            grpc.server_streaming(
                request(msg("2"), &[("x-fail", "8")]),
                PathAndQuery::from_static("/test.Stream/Count"),
                Codec::default(),
            ),
        )
        .await
        .unwrap();
        let mut stream = resp.into_inner();
        let mut got = Vec::new();
        let mut error = None;
        for _ in 0..5 {
            match within("a message", stream.message()).await {
                Ok(Some(m)) => got.push(m.text),
                Ok(None) => break,
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        assert_eq!(got, ["0", "1"], "{hop:?}");
        let e = error.unwrap_or_else(|| panic!("{hop:?}: the stream ended without an error"));
        assert_eq!(
            (e.code(), e.message()),
            (Code::ResourceExhausted, "failed on purpose"),
            "{hop:?}"
        );
        assert_eq!(
            e.metadata().get("x-trailer").and_then(|v| v.to_str().ok()),
            Some("t1"),
            "{hop:?}: {e:?}"
        );

        grpc.ready().await.unwrap();
        let e = within(
            "the unary answer",
            grpc.unary(
                request(msg("x"), &[("x-fail", "7")]),
                PathAndQuery::from_static("/test.Stream/Say"),
                Codec::default(),
            ),
        )
        .await
        .expect_err("PERMISSION_DENIED");
        assert_eq!(
            (e.code(), e.message()),
            (Code::PermissionDenied, "failed on purpose"),
            "{hop:?}"
        );
        assert_eq!(
            e.metadata().get("x-trailer").and_then(|v| v.to_str().ok()),
            Some("t1"),
            "{hop:?}: {e:?}"
        );
    }
}

/// Request metadata reaches the backend and its response metadata comes back, text and
/// binary (`-bin`) alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_round_trips_text_and_binary() {
    for hop in HOPS {
        let (_b, sy) = behind_switchyard(hop).await;
        let mut grpc = client(sy.http_port).await;
        let mut req = request(msg("1"), &[("x-md", "m3")]);
        req.metadata_mut()
            .insert_bin("x-md-bin", MetadataValue::from_bytes(&[0, 159, 255, 1]));
        let resp = within(
            "the response header",
            grpc.server_streaming(
                req,
                PathAndQuery::from_static("/test.Stream/Count"),
                Codec::default(),
            ),
        )
        .await
        .unwrap();
        let md = resp.metadata();
        assert_eq!(
            md.get("x-md").and_then(|v| v.to_str().ok()),
            Some("m3"),
            "{hop:?}"
        );
        assert_eq!(
            md.get_bin("x-md-bin").and_then(|v| v.to_bytes().ok()),
            Some(bytes::Bytes::from_static(&[0, 159, 255, 1])),
            "{hop:?}"
        );
    }
}

/// A deadline that passes while messages still flow ends the call there: the client gets
/// DEADLINE_EXCEEDED (in the trailers, after the messages it had) at the deadline, not when
/// the backend would have finished, and the backend's stream is cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_that_passes_mid_stream_ends_the_call() {
    for hop in HOPS {
        let (b, sy) = behind_switchyard(hop).await;
        let mut grpc = client(sy.http_port).await;
        // 30 messages 100 ms apart: 3 s of stream, against a 600 ms deadline.
        let mut req = request(msg("30"), &[("x-gap-ms", "100")]);
        req.set_timeout(Duration::from_millis(600));
        let started = std::time::Instant::now();
        let resp = within(
            "the response header",
            grpc.server_streaming(
                req,
                PathAndQuery::from_static("/test.Stream/Count"),
                Codec::default(),
            ),
        )
        .await
        .unwrap();
        let mut stream = resp.into_inner();
        let mut got = 0;
        let mut error = None;
        for _ in 0..40 {
            match within("a message", stream.message()).await {
                Ok(Some(_)) => got += 1,
                Ok(None) => break,
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        let took = started.elapsed();
        let e = error.unwrap_or_else(|| panic!("{hop:?}: all {got} messages, no deadline"));
        assert_eq!(e.code(), Code::DeadlineExceeded, "{hop:?}: {e:?}");
        assert!((1..30).contains(&got), "{hop:?}: {got} messages");
        assert!(
            took < Duration::from_millis(2000),
            "{hop:?}: ended at the deadline, not with the stream: {took:?}"
        );
        let cancelled = poll(
            Duration::from_secs(5),
            Duration::from_millis(20),
            || async { (b.signals.cancelled.load(Ordering::Relaxed) > 0).then_some(()) },
        )
        .await;
        assert!(
            cancelled.is_some(),
            "{hop:?}: the backend's stream was cancelled"
        );
    }
}

// === gRPC health checks ===

/// The state and last check of endpoint `port` in `/explain`'s answer for the stream entry.
async fn endpoint_health(sy: &Switchyard, port: u16) -> Option<(String, String)> {
    let x = sy.admin("/explain?path=/test.Stream/Say").await.json();
    let eps = x["entry"]["endpoints"].as_array()?.clone();
    let ep = eps
        .iter()
        .find(|e| e["address"] == format!("127.0.0.1:{port}"))?;
    Some((
        ep["state"].as_str()?.to_string(),
        ep["last_check"].as_str()?.to_string(),
    ))
}

/// `lb.check-grpc` asks each endpoint's `grpc.health.v1.Health/Check` in the port's protocol
/// (h2c, or TLS verified as traffic is): one that answers NOT_SERVING is marked down and
/// gets no calls, and comes back once it serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_health_checks_take_a_not_serving_endpoint_out() {
    for hop in HOPS {
        let (bs, sy) = backends_behind_switchyard(
            hop,
            2,
            &[
                ("serviceloadbalancer/lb.check-grpc", "test.Stream"),
                ("serviceloadbalancer/lb.check-interval", "100ms"),
            ],
            &["--check-fall", "1", "--check-rise", "1"],
        )
        .await;
        let (good, sick) = (&bs[0], &bs[1]);
        sick.signals.serving.store(2, Ordering::Relaxed);
        let settled = poll(
            Duration::from_secs(10),
            Duration::from_millis(50),
            || async {
                let g = endpoint_health(&sy, good.port).await?;
                let s = endpoint_health(&sy, sick.port).await?;
                (g.1 != "-" && s.0 == "down").then_some((g, s))
            },
        )
        .await;
        let Some((g, s)) = settled else {
            let x = sy.admin("/explain?path=/test.Stream/Say").await.body;
            panic!("{hop:?}: never settled: {x}");
        };
        assert_eq!(g.1, "L7OK SERVING", "{hop:?}");
        assert_eq!(s.1, "L7STS NOT_SERVING", "{hop:?}");

        let mut grpc = client(sy.http_port).await;
        for _ in 0..6 {
            grpc.ready().await.unwrap();
            within(
                "a call",
                grpc.unary(
                    request(msg("x"), &[]),
                    PathAndQuery::from_static("/test.Stream/Say"),
                    Codec::default(),
                ),
            )
            .await
            .unwrap_or_else(|e| panic!("{hop:?}: {e:?}"));
        }
        assert_eq!(
            (
                good.signals.said.load(Ordering::Relaxed),
                sick.signals.said.load(Ordering::Relaxed)
            ),
            (6, 0),
            "{hop:?}: the NOT_SERVING endpoint gets no calls"
        );

        sick.signals.serving.store(1, Ordering::Relaxed);
        let back = poll(
            Duration::from_secs(10),
            Duration::from_millis(50),
            || async {
                let s = endpoint_health(&sy, sick.port).await?;
                (s.0 == "up").then_some(s)
            },
        )
        .await;
        assert!(back.is_some(), "{hop:?}: serving again, back up");
    }
}

/// A service name the backend does not know is a failed check (`NOT_FOUND`), as the
/// health-checking protocol says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_health_check_of_an_unknown_service_fails() {
    let (bs, sy) = backends_behind_switchyard(
        Hop::H2c,
        1,
        &[
            ("serviceloadbalancer/lb.check-grpc", "no.Such"),
            ("serviceloadbalancer/lb.check-interval", "100ms"),
        ],
        &["--check-fall", "1"],
    )
    .await;
    let down = poll(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async {
            let s = endpoint_health(&sy, bs[0].port).await?;
            (s.0 == "down").then_some(s)
        },
    )
    .await;
    assert_eq!(
        down.map(|s| s.1).as_deref(),
        Some("L7STS grpc-5"),
        "NOT_FOUND"
    );
}

// === metrics and access logs by gRPC status ===

/// How each call ended is counted by its gRPC status and logged as `grpc_status`, wherever
/// the status came from: the trailers after messages, a trailers-only answer, or switchyard's
/// own trailers when a deadline passed mid-stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_are_counted_and_logged_by_grpc_status() {
    let (_bs, sy) = backends_behind_switchyard(Hop::H2c, 1, &[], &["--access-log", "json"]).await;
    let mut grpc = client(sy.http_port).await;
    // OK, in the trailers.
    within(
        "an OK call",
        grpc.unary(
            request(msg("x"), &[]),
            PathAndQuery::from_static("/test.Stream/Say"),
            Codec::default(),
        ),
    )
    .await
    .unwrap();
    // PERMISSION_DENIED, trailers-only.
    grpc.ready().await.unwrap();
    let _ = within(
        "a refused call",
        grpc.unary(
            request(msg("x"), &[("x-fail", "7")]),
            PathAndQuery::from_static("/test.Stream/Say"),
            Codec::default(),
        ),
    )
    .await
    .expect_err("PERMISSION_DENIED");
    // RESOURCE_EXHAUSTED in the trailers after two messages, then DEADLINE_EXCEEDED from
    // switchyard mid-stream.
    for (n, md, timeout) in [
        ("2", ("x-fail", "8"), None),
        ("30", ("x-gap-ms", "100"), Some(300)),
    ] {
        grpc.ready().await.unwrap();
        let mut req = request(msg(n), &[md]);
        if let Some(ms) = timeout {
            req.set_timeout(Duration::from_millis(ms));
        }
        let mut stream = within(
            "a stream",
            grpc.server_streaming(
                req,
                PathAndQuery::from_static("/test.Stream/Count"),
                Codec::default(),
            ),
        )
        .await
        .unwrap()
        .into_inner();
        for _ in 0..40 {
            if !matches!(within("a message", stream.message()).await, Ok(Some(_))) {
                break;
            }
        }
    }

    let want = [
        "OK",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "DEADLINE_EXCEEDED",
    ];
    let counted = poll(
        Duration::from_secs(5),
        Duration::from_millis(50),
        || async {
            let metrics = sy.admin("/metrics").await.body;
            let series = |code: &str| {
                let prefix =
                    format!("switchyard_grpc_responses_total{{code=\"{code}\",entry=\"stream\"}} ");
                metrics
                    .lines()
                    .find_map(|l| l.strip_prefix(prefix.as_str()))
                    .and_then(|v| v.parse::<u64>().ok())
            };
            let all = want.iter().all(|c| series(c) == Some(1));
            (all && series("none") == Some(0) && series("NOT_FOUND") == Some(0)).then_some(())
        },
    )
    .await;
    assert!(
        counted.is_some(),
        "one call per status: {}",
        sy.admin("/metrics").await.body
    );

    let logged = poll(
        Duration::from_secs(5),
        Duration::from_millis(50),
        || async {
            let mut got: Vec<String> = sy
                .stdout()
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter_map(|v| v["grpc_status"].as_str().map(str::to_string))
                .collect();
            got.sort();
            (got.len() == want.len()).then_some(got)
        },
    )
    .await;
    let mut want_sorted = want.to_vec();
    want_sorted.sort();
    assert_eq!(
        logged,
        Some(want_sorted.iter().map(|s| s.to_string()).collect()),
        "{}",
        sy.stdout()
    );
}

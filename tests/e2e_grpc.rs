//! End-to-end gRPC through switchyard: a real gRPC client (tonic, messages declared by hand)
//! over HTTP/2 in clear to the HTTP port, a gRPC backend over h2c chosen by `appProtocol:
//! grpc` (the test backend echoes messages with `grpc-status` trailers). Checks that trailers,
//! status codes and metadata cross the proxy, and that switchyard's own errors are gRPC
//! statuses (no route: UNIMPLEMENTED, no endpoint: UNAVAILABLE), not HTML pages.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

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
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", sy.http_port))
        .await
        .unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    // One empty message: flag 0, length 0.
    let body = http_body_util::Full::new(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]));
    let req = http::Request::post(format!("http://127.0.0.1:{}/test.Echo/Say", sy.http_port))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", "300m")
        .body(body)
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
    assert!(
        took < Duration::from_millis(2500),
        "answered at the deadline, not when the backend did: {took:?}"
    );
}

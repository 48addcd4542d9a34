//! A gRPC backend for `benches/loadtest/run.py`: one unary method, `/bench.Echo/Say`, that
//! answers the request's message back (tonic's server codec over hyper's HTTP/2 server, in
//! clear: h2c with prior knowledge), on every port given, in one single-threaded process.
//!
//! Question it serves: how do switchyard and HAProxy compare proxying gRPC unary calls, with
//! a backend cheap enough not to be the bottleneck. Messages are declared by hand (prost
//! derive, no protoc), as in `tests/e2e_grpc.rs`.
//!
//! `cargo build --release --example grpc_bench_backend`, then
//! `target/release/examples/grpc_bench_backend 18084 18085 18086` (prints `LISTENING` once
//! every port is bound; stops on SIGTERM/SIGKILL).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::pin::Pin;

use tonic::Status;
use tonic::server::UnaryService;

/// `message Msg { string text = 1; }`
#[derive(Clone, PartialEq, prost::Message)]
struct Msg {
    #[prost(string, tag = "1")]
    text: String,
}

struct Say;

impl UnaryService<Msg> for Say {
    type Response = Msg;
    type Future = Pin<Box<dyn Future<Output = Result<tonic::Response<Msg>, Status>> + Send>>;

    fn call(&mut self, req: tonic::Request<Msg>) -> Self::Future {
        Box::pin(async move { Ok(tonic::Response::new(req.into_inner())) })
    }
}

async fn route(
    req: http::Request<hyper::body::Incoming>,
) -> Result<http::Response<tonic::body::Body>, std::convert::Infallible> {
    Ok(match req.uri().path() {
        "/bench.Echo/Say" => {
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::<Msg, Msg>::default());
            grpc.unary(Say, req).await
        }
        _ => Status::unimplemented("no such method").into_http(),
    })
}

async fn serve(listener: tokio::net::TcpListener) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        tokio::spawn(async move {
            let h2 = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
            let svc = hyper::service::service_fn(route);
            let _ = h2
                .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                .await;
        });
    }
}

fn main() {
    let ports: Vec<u16> = std::env::args()
        .skip(1)
        .map(|p| p.parse().expect("a port number"))
        .collect();
    assert!(
        !ports.is_empty(),
        "usage: grpc_bench_backend PORT [PORT...]"
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut tasks = Vec::new();
        for port in ports {
            let l = tokio::net::TcpListener::bind(("127.0.0.1", port))
                .await
                .expect("bind");
            tasks.push(tokio::spawn(serve(l)));
        }
        println!("LISTENING");
        for t in tasks {
            let _ = t.await;
        }
    });
}

//! Gateway API figures through the fake API server (ignored by default: they are
//! measurements, meaningful only with a release binary, not checks):
//!
//! - route change to live: with 3,000 HTTPRoutes (one per Service) attached to one Gateway,
//!   a new HTTPRoute is created and its host polled until it answers 200; the time from the
//!   write to that first 200, median and max over 20 routes; the same for 3,000 GRPCRoutes
//!   (calls over h2c, each poll a fresh connection, live when a call reaches the h2c backend
//!   instead of switchyard's `UNIMPLEMENTED`) and for 3,000 TLSRoutes on a TLS listener in
//!   Passthrough mode (each poll a fresh connection and TLS handshake with the backend by
//!   server name, live at its first 200; before that switchyard closes it). Each also prints
//!   the floor: the median time of one poll of a route already live;
//! - unrelated routes under churn: 1,000 route changes (100/s for 10 s) to routes 1,000 and up
//!   while 100 other routes take 5,000 requests/s on keep-alive connections; every request
//!   must answer 200.
//!
//! Run: `cargo build --release && SWITCHYARD_TEST_BIN=target/release/switchyard cargo test
//! --test e2e_gateway_figures -- --ignored --nocapture`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod kube_api;
mod tls_client;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Backend, Transport, eventually, free_port, try_request};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use kube_api::{FakeApi, Watching, service, slice};
use serde_json::{Value, json};
use tls_client::{Ca, server_config, sni};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const ROUTES: usize = 3_000;

/// The route kind a route-change figure creates, and how a client sees one live.
#[derive(Clone, Copy, PartialEq)]
enum RouteKind {
    Http,
    /// GRPCRoutes on the HTTP listener, calls over h2c to an h2c backend.
    Grpc,
    /// TLSRoutes on a TLS listener (Passthrough) on `port`, to a TLS backend.
    Tls {
        port: u16,
    },
}

fn objects_of(kind: RouteKind, backend: u16) -> Vec<Value> {
    let mut objs = vec![
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": "sy"},
            "spec": {"controllerName": "switchyard.io/gateway-controller"},
        }),
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": "default"},
            "spec": {"gatewayClassName": "sy", "listeners": [match kind {
                RouteKind::Tls { port } => json!({"name": "tls", "port": port, "protocol": "TLS",
                    "tls": {"mode": "Passthrough"}}),
                _ => json!({"name": "http", "port": 80, "protocol": "HTTP"}),
            }]},
        }),
    ];
    for i in 0..ROUTES {
        let mut svc = service(&format!("svc-{i}"), &[]);
        if kind == RouteKind::Grpc {
            svc["spec"]["ports"][0]["appProtocol"] = json!("kubernetes.io/h2c");
        }
        objs.push(svc);
        objs.push(slice(
            &format!("svc-{i}"),
            &format!("svc-{i}-1"),
            backend,
            true,
            true,
            false,
        ));
        objs.push(route_of(kind, i, &format!("svc-{i}")));
    }
    objs
}

/// Route `i` of `kind` for host `r-{i}.example.com` to port 80 of `svc`.
fn route_of(kind: RouteKind, i: usize, svc: &str) -> Value {
    match kind {
        RouteKind::Http => route(i, "/", svc),
        RouteKind::Grpc => json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GRPCRoute",
            "metadata": {"name": format!("g-{i}"), "namespace": "default"},
            "spec": {
                "parentRefs": [{"name": "gw"}],
                "hostnames": [format!("r-{i}.example.com")],
                "rules": [{
                    "matches": [{"method": {"service": "bench.Echo"}}],
                    "backendRefs": [{"name": svc, "port": 80}],
                }],
            },
        }),
        RouteKind::Tls { .. } => json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "TLSRoute",
            "metadata": {"name": format!("t-{i}"), "namespace": "default"},
            "spec": {
                "parentRefs": [{"name": "gw"}],
                "hostnames": [format!("r-{i}.example.com")],
                "rules": [{"backendRefs": [{"name": svc, "port": 80}]}],
            },
        }),
    }
}

/// Whether a client reaches the backend through route `host` of `kind` now: one request on
/// a fresh connection.
async fn live(kind: RouteKind, http_port: u16, host: &str) -> bool {
    match kind {
        RouteKind::Http => try_request(http_port, "GET", "/", &[("host", host)])
            .await
            .is_ok_and(|r| r.status == 200),
        RouteKind::Grpc => grpc_reaches_backend(http_port, host).await,
        RouteKind::Tls { port } => sni(host)
            .get(port, "/", &[])
            .await
            .is_ok_and(|r| r.status == 200),
    }
}

/// A gRPC call (`POST /bench.Echo/Say`) over h2c with prior knowledge for `host`: true when
/// the echo backend answered it (200 without `grpc-status`), false for switchyard's own
/// `UNIMPLEMENTED` (no route yet) or any failure.
async fn grpc_reaches_backend(port: u16, host: &str) -> bool {
    let call = async {
        let tcp = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        tcp.set_nodelay(true).ok()?;
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                .await
                .ok()?;
        tokio::spawn(conn);
        let req = http::Request::post(format!("http://{host}/bench.Echo/Say"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Full::new(Bytes::from_static(&[0, 0, 0, 0, 0])))
            .ok()?;
        let resp = send.send_request(req).await.ok()?;
        let ok = resp.status() == 200 && !resp.headers().contains_key("grpc-status");
        resp.into_body().collect().await.ok()?;
        Some(ok)
    };
    tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

fn route(i: usize, path: &str, svc: &str) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": format!("r-{i}"), "namespace": "default"},
        "spec": {
            "parentRefs": [{"name": "gw"}],
            "hostnames": [format!("r-{i}.example.com")],
            "rules": [{
                "matches": [{"path": {"type": "PathPrefix", "value": path}}],
                "backendRefs": [{"name": svc, "port": 80}],
            }],
        },
    })
}

async fn start() -> (Backend, FakeApi, Watching) {
    start_of(RouteKind::Http).await
}

async fn start_of(kind: RouteKind) -> (Backend, FakeApi, Watching) {
    let backend = match kind {
        RouteKind::Http => Backend::start("web").await,
        RouteKind::Grpc => {
            Backend::builder("grpc")
                .transport(Transport::H2c)
                .start()
                .await
        }
        RouteKind::Tls { .. } => {
            let leaf = Ca::new("figures").server(&["*.example.com"]);
            Backend::builder("tls")
                .transport(Transport::Tls(server_config(&leaf, &[b"http/1.1"])))
                .start()
                .await
        }
    };
    let api = FakeApi::start_reaching_local_backends().await;
    api.apply_all(objects_of(kind, backend.port));
    // `SWITCHYARD_FIGURES_LOG=info` prints each swap's build time at the end, `=debug` also
    // each watch event's time to a live table.
    let log = std::env::var("SWITCHYARD_FIGURES_LOG").unwrap_or_else(|_| "warn".into());
    let sy = api.spawn_switchyard(&["--gateway-http-port", "80"], &log);
    let ready = eventually(Duration::from_secs(120), || async {
        try_request(sy.admin_port, "GET", "/readyz", &[])
            .await
            .is_ok_and(|r| r.status == 200)
    })
    .await;
    assert!(ready, "not ready: {}", sy.stderr());
    let host = format!("r-{}.example.com", ROUTES - 1);
    let served = eventually(Duration::from_secs(60), || async {
        live(kind, sy.http_port, &host).await
    })
    .await;
    assert!(served, "routes not served: {}", sy.stderr());
    (backend, api, sy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a figure, not a check: minutes of setup and meaningful only with a release binary; \
            run `cargo build --release && SWITCHYARD_TEST_BIN=target/release/switchyard \
            cargo test --test e2e_gateway_figures -- --ignored --nocapture`"]
async fn route_change_to_live_at_3000_routes() {
    change_to_live(RouteKind::Http, "HTTPRoutes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a figure, not a check: minutes of setup and meaningful only with a release binary; \
            run `cargo build --release && SWITCHYARD_TEST_BIN=target/release/switchyard \
            cargo test --test e2e_gateway_figures -- --ignored --nocapture`"]
async fn grpc_route_change_to_live_at_3000_routes() {
    change_to_live(RouteKind::Grpc, "GRPCRoutes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a figure, not a check: minutes of setup and meaningful only with a release binary; \
            run `cargo build --release && SWITCHYARD_TEST_BIN=target/release/switchyard \
            cargo test --test e2e_gateway_figures -- --ignored --nocapture`"]
async fn tls_route_change_to_live_at_3000_routes() {
    change_to_live(RouteKind::Tls { port: free_port() }, "TLSRoutes").await;
}

/// 20 new routes of `kind`, one at a time on an idle pipeline: the time from each write to
/// the first poll that reaches the backend through it, then the floor (one poll of a route
/// already live).
async fn change_to_live(kind: RouteKind, label: &str) {
    let (_backend, api, sy) = start_of(kind).await;
    let mut took = Vec::new();
    for k in 0..20 {
        let i = ROUTES + k;
        let host = format!("r-{i}.example.com");
        // Spacing: each change starts on an idle pipeline.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let written = Instant::now();
        api.apply(route_of(kind, i, "svc-0"));
        let mut is_live = None;
        while written.elapsed() < Duration::from_secs(10) {
            if live(kind, sy.http_port, &host).await {
                is_live = Some(written.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        took.push(is_live.unwrap_or_else(|| panic!("route {i} not live in 10 s")));
    }
    let mut floor = Vec::new();
    let host = format!("r-{ROUTES}.example.com");
    for _ in 0..20 {
        let polled = Instant::now();
        assert!(live(kind, sy.http_port, &host).await, "a live route failed");
        floor.push(polled.elapsed());
    }
    floor.sort();
    if std::env::var_os("SWITCHYARD_FIGURES_LOG").is_some() {
        let log = sy.stderr();
        let swaps: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("build_ms") || l.contains("latency_ms"))
            .collect();
        for l in &swaps[swaps.len().saturating_sub(90)..] {
            println!("{l}");
        }
    }
    took.sort();
    println!(
        "route change to live at {ROUTES} {label}: median {:.1} ms, max {:.1} ms (n = {}); \
         one poll of a live route: median {:.1} ms",
        took[took.len() / 2].as_secs_f64() * 1e3,
        took[took.len() - 1].as_secs_f64() * 1e3,
        took.len(),
        floor[floor.len() / 2].as_secs_f64() * 1e3,
    );
}

/// One keep-alive connection sending `GET /` for `host` every `every`, until `stop`;
/// counts answers that are 200 and those that are not (or fail).
async fn load(
    port: u16,
    host: String,
    every: Duration,
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    bad: Arc<AtomicU64>,
) {
    let request = format!("GET / HTTP/1.1\r\nhost: {host}\r\n\r\n");
    let mut conn = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        next += every;
        let answered = async {
            conn.write_all(request.as_bytes()).await.ok()?;
            // The echo answers with a Content-Length body: read until the head and the body
            // are in (one read is enough on loopback for these small answers, else more).
            let mut got = 0;
            loop {
                let n = conn.read(&mut buf[got..]).await.ok()?;
                if n == 0 {
                    return None;
                }
                got += n;
                let text = std::str::from_utf8(&buf[..got]).ok()?;
                if let Some(end) = text.find("\r\n\r\n") {
                    let len = text[..end]
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse::<usize>().ok())?
                        })
                        .unwrap_or(0);
                    if got >= end + 4 + len {
                        return Some(text.starts_with("HTTP/1.1 200"));
                    }
                }
            }
        };
        match tokio::time::timeout(Duration::from_secs(5), answered).await {
            Ok(Some(true)) => ok.fetch_add(1, Ordering::Relaxed),
            _ => {
                bad.fetch_add(1, Ordering::Relaxed);
                conn = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
                0
            }
        };
        tokio::time::sleep_until(next.into()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a figure, not a check: minutes of setup and meaningful only with a release binary; \
            run `cargo build --release && SWITCHYARD_TEST_BIN=target/release/switchyard \
            cargo test --test e2e_gateway_figures -- --ignored --nocapture`"]
async fn unrelated_routes_answer_through_1000_route_changes() {
    let (_backend, api, sy) = start().await;
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let bad = Arc::new(AtomicU64::new(0));
    // 100 connections at 50 requests/s each: 5,000 requests/s on routes 0..100.
    let mut tasks = Vec::new();
    for i in 0..100 {
        tasks.push(tokio::spawn(load(
            sy.http_port,
            format!("r-{i}.example.com"),
            Duration::from_millis(20),
            Arc::clone(&stop),
            Arc::clone(&ok),
            Arc::clone(&bad),
        )));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    let before = ok.load(Ordering::Relaxed);
    // 1,000 changes at 100/s to routes 1,000 and up: a path moves back and forth.
    for k in 0..1_000 {
        let i = 1_000 + k % 1_000;
        let path = if k % 2 == 0 { "/moved" } else { "/" };
        api.apply(route(i, path, &format!("svc-{i}")));
        tokio::time::sleep_until((started + Duration::from_millis(10 * (k as u64 + 1))).into())
            .await;
    }
    let changes_took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let served = ok.load(Ordering::Relaxed) - before;
    let failed = bad.load(Ordering::Relaxed);
    println!(
        "1,000 route changes in {:.1} s while unrelated routes took {:.0} requests/s: \
         {failed} failed, {served} answered 200",
        changes_took.as_secs_f64(),
        served as f64 / changes_took.as_secs_f64()
    );
    assert_eq!(
        failed,
        0,
        "requests to unrelated routes failed: {}",
        sy.stderr()
    );
}

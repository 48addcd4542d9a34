//! Gateway API figures through the fake API server (ignored by default: they are
//! measurements, meaningful only with a release binary, not checks):
//!
//! - route change to live: with 3,000 HTTPRoutes (one per Service) attached to one Gateway,
//!   a new HTTPRoute is created and its host polled until it answers 200; the time from the
//!   write to that first 200, median and max over 20 routes;
//! - unrelated routes under churn: 1,000 route changes (100/s for 10 s) to routes 1,000 and up
//!   while 100 other routes take 5,000 requests/s on keep-alive connections; every request
//!   must answer 200.
//!
//! Run: `cargo build --release && SWITCHYARD_TEST_BIN=target/release/switchyard cargo test
//! --test e2e_gateway_figures -- --ignored --nocapture`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod kube_api;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Backend, eventually, try_request};
use kube_api::{FakeApi, Watching, service, slice};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const ROUTES: usize = 3_000;

fn objects(backend: u16) -> Vec<Value> {
    let mut objs = vec![
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": "sy"},
            "spec": {"controllerName": "switchyard.io/gateway-controller"},
        }),
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": "default"},
            "spec": {"gatewayClassName": "sy", "listeners": [
                {"name": "http", "port": 80, "protocol": "HTTP"}]},
        }),
    ];
    for i in 0..ROUTES {
        objs.push(service(&format!("svc-{i}"), &[]));
        objs.push(slice(
            &format!("svc-{i}"),
            &format!("svc-{i}-1"),
            backend,
            true,
            true,
            false,
        ));
        objs.push(route(i, "/", &format!("svc-{i}")));
    }
    objs
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
    let backend = Backend::start("web").await;
    let api = FakeApi::start_reaching_local_backends().await;
    api.apply_all(objects(backend.port));
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
        try_request(sy.http_port, "GET", "/", &[("host", &host)])
            .await
            .is_ok_and(|r| r.status == 200)
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
    let (_backend, api, sy) = start().await;
    let mut took = Vec::new();
    for k in 0..20 {
        let i = ROUTES + k;
        let host = format!("r-{i}.example.com");
        // Spacing: each change starts on an idle pipeline.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let written = Instant::now();
        api.apply(route(i, "/", "svc-0"));
        let mut live = None;
        while written.elapsed() < Duration::from_secs(10) {
            if try_request(sy.http_port, "GET", "/", &[("host", &host)])
                .await
                .is_ok_and(|r| r.status == 200)
            {
                live = Some(written.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        took.push(live.unwrap_or_else(|| panic!("route {i} not live in 10 s")));
    }
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
        "route change to live at {ROUTES} routes: median {:.1} ms, max {:.1} ms (n = {})",
        took[took.len() / 2].as_secs_f64() * 1e3,
        took[took.len() - 1].as_secs_f64() * 1e3,
        took.len()
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

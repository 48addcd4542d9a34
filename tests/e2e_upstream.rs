//! End-to-end: the protocol switchyard speaks to a Service's endpoints, chosen per Service port
//! by `appProtocol` or `lb.backend-protocol`: HTTP/2 in clear (h2c), HTTP/1.1 over TLS and
//! HTTP/2 over TLS, with the Service's DNS name as SNI, verification against
//! `--backend-ca-file`, and skipping it only when the annotation asks. Real backends (hyper over
//! tokio-rustls) on 127.0.0.1; both engines (the fast path serves HTTP/1.1 over TLS itself and
//! hands HTTP/2 backends to Pingora).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod tls_client;

use std::time::Duration;

use common::*;
use tls_client::{Ca, server_config};

/// `ca`'s certificate as `dir/ca.pem`, for `--backend-ca-file`.
fn ca_file(dir: &tempfile::TempDir, ca: &Ca) -> String {
    let path = dir.path().join("ca.pem");
    std::fs::write(&path, &ca.pem).unwrap();
    path.to_str().unwrap().to_string()
}

/// A TLS backend offering `alpn`, whose certificate for `server_name` a fresh CA issued;
/// with that CA.
async fn tls_backend(name: &str, server_name: &str, alpn: &[u8]) -> (Backend, Ca) {
    let ca = Ca::new("backend CA");
    let leaf = ca.server(&[server_name]);
    let b = Backend::builder(name)
        .transport(Transport::Tls(server_config(&leaf, &[alpn])))
        .start()
        .await;
    (b, ca)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2c_backend_is_spoken_to_over_http2_by_app_protocol_alone() {
    let b = Backend::builder("h2c")
        .transport(Transport::H2c)
        .start()
        .await;
    let objs = vec![
        svc("grpc", 80).app_protocol("kubernetes.io/h2c").into(),
        slice("grpc", "", b.port),
    ];
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &[]).await;
        for _ in 0..3 {
            let r = sy.get("/grpc/x?y=1").await;
            assert_eq!(r.status, 200, "{engine}: {r:?}");
            let j = r.json();
            assert_eq!(j["version"], "HTTP/2.0", "{engine}: {j}");
            assert_eq!(j["uri"], "/x?y=1");
        }
        let r = try_request(
            sy.http_port,
            "POST",
            "/grpc/post",
            &[("content-length", "0")],
        )
        .await
        .unwrap();
        assert_eq!((r.status, r.json()["method"].as_str()), (200, Some("POST")));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_backend_is_verified_and_gets_the_services_name() {
    let (b, ca) = tls_backend("tls", "web.default.svc", b"http/1.1").await;
    let dir = tempfile::tempdir().unwrap();
    let ca_path = ca_file(&dir, &ca);
    let objs = vec![
        svc("web", 80).app_protocol("https").into(),
        slice("web", "", b.port),
    ];
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &["--backend-ca-file", &ca_path]).await;
        let r = sy.get("/web/a").await;
        assert_eq!(r.status, 200, "{engine}: {r:?}");
        let j = r.json();
        assert_eq!(j["sni"], "web.default.svc", "{j}");
        assert_eq!(j["version"], "HTTP/1.1");
        assert_eq!(j["uri"], "/a");
        // One request, one new connection: one handshake, counted with its duration (it is
        // recorded when the connection opens, before the response).
        // (`resumed`: the fast path says; Pingora's engine cannot.)
        let m = sy.admin("/metrics").await.body;
        let value = |series: &str| {
            m.lines()
                .find_map(|l| l.strip_prefix(series))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        let handshakes = value(&format!(
            "switchyard_upstream_tls_handshakes_total{{entry=\"web\",resumed=\"{}\"}}",
            first_handshake(engine)
        ));
        assert_eq!(
            handshakes,
            Some(1),
            "{engine}: one request, one handshake: {m}"
        );
        assert_eq!(
            value("switchyard_upstream_tls_handshake_duration_seconds_count{entry=\"web\"}"),
            handshakes,
            "{engine}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_backend_over_tls_with_its_own_server_name() {
    let (b, ca) = tls_backend("h2", "api.internal", b"h2").await;
    let dir = tempfile::tempdir().unwrap();
    let ca_path = ca_file(&dir, &ca);
    let objs = vec![
        svc("api", 80)
            .ann("serviceloadbalancer/lb.backend-protocol", "grpcs")
            .ann("serviceloadbalancer/lb.backend-sni", "api.internal")
            .into(),
        slice("api", "", b.port),
    ];
    let sy = switchyard_on(objs, "true", &["--backend-ca-file", &ca_path]).await;
    let r = sy.get("/api/q").await;
    assert_eq!(r.status, 200, "{r:?}");
    let j = r.json();
    assert_eq!(
        (j["version"].as_str(), j["sni"].as_str()),
        (Some("HTTP/2.0"), Some("api.internal"))
    );
    // `/explain` says how the entry's endpoints are spoken to.
    let x = sy.admin("/explain?path=/api/q").await.json();
    let e = &x["entry"];
    assert_eq!(
        (
            &e["backend_protocol"],
            &e["backend_sni"],
            &e["backend_verify"]
        ),
        (&"h2".into(), &"api.internal".into(), &true.into()),
        "{x}"
    );
}

/// A certificate from another CA is refused; `lb.backend-insecure-skip-verify` is the only way
/// past it, and it is warned about.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_certificate_from_the_wrong_ca_is_refused_unless_skipped() {
    let (b, _) = tls_backend("tls", "web.default.svc", b"http/1.1").await;
    let other = Ca::new("another CA");
    let dir = tempfile::tempdir().unwrap();
    let wrong = ca_file(&dir, &other);
    let objs = vec![
        svc("web", 80).app_protocol("https").into(),
        slice("web", "", b.port),
    ];
    let sy = switchyard_on(objs, "true", &["--backend-ca-file", &wrong]).await;
    let r = sy.get("/web/a").await;
    assert_eq!(r.status, 502, "refused: {r:?}");
    assert_eq!(b.count(), 0, "no request reached the backend");
    let metrics = sy.admin("/metrics").await.body;
    let failures: f64 = metrics
        .lines()
        .find(|l| l.starts_with("switchyard_upstream_tls_failures_total{entry=\"web\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0);
    assert!(failures >= 1.0, "counted: {metrics}");
    drop(sy);

    let objs = vec![
        svc("web", 80)
            .app_protocol("https")
            .ann(
                "serviceloadbalancer/lb.backend-insecure-skip-verify",
                "true",
            )
            .into(),
        slice("web", "", b.port),
    ];
    let sy = switchyard_on(objs, "true", &["--backend-ca-file", &wrong]).await;
    let r = sy.get("/web/a").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        sy.stderr().contains("InsecureBackend"),
        "skipping verification is warned about:\n{}",
        sy.stderr()
    );
}

#[test]
fn a_backend_ca_file_without_a_certificate_is_refused_at_startup() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.pem");
    std::fs::write(&path, "not a certificate\n").unwrap();
    let out = run_to_exit(&[
        "--manifests",
        "x",
        "--backend-ca-file",
        path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--backend-ca-file") && err.contains("no PEM certificate"),
        "{err}"
    );
}

/// The state and last check of endpoint `port` of the entry `/explain` finds for `path`.
async fn endpoint_health(sy: &Switchyard, path: &str, port: u16) -> Option<(String, String)> {
    let x = sy.admin(&format!("/explain?path={path}")).await.json();
    let eps = x["entry"]["endpoints"].as_array()?.clone();
    let ep = eps
        .iter()
        .find(|e| e["address"] == format!("127.0.0.1:{port}"))?;
    Some((
        ep["state"].as_str()?.to_string(),
        ep["last_check"].as_str()?.to_string(),
    ))
}

/// Health checks speak the backend's protocol: `lb.check-path` is a GET over HTTP/2 and TLS
/// for an `h2` backend (a 503 marks it down), and the TLS handshake is verified as traffic's
/// is (a certificate from another CA marks it down, `L6RSP`). Traffic then avoids both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_speak_http2_over_tls_and_verify_the_certificate() {
    let ca = Ca::new("backend CA");
    let leaf = ca.server(&["web.default.svc"]);
    let tls = || Transport::Tls(server_config(&leaf, &[b"h2"]));
    let good = Backend::builder("good")
        .transport(tls())
        .health("/healthz")
        .start()
        .await;
    let sick = Backend::builder("sick")
        .transport(tls())
        .health("/healthz")
        .start()
        .await;
    sick.set_health(503);
    let (wrong, _) = tls_backend("wrong", "web.default.svc", b"h2").await;
    let dir = tempfile::tempdir().unwrap();
    let ca_path = ca_file(&dir, &ca);
    let mut objs = vec![
        svc("web", 80)
            .app_protocol("h2")
            .ann("serviceloadbalancer/lb.check-path", "/healthz")
            .ann("serviceloadbalancer/lb.check-interval", "100ms")
            .into(),
    ];
    objs.extend(slices("web", &[&good, &sick, &wrong]));
    let sy = switchyard_on(
        objs,
        "true",
        &["--backend-ca-file", &ca_path, "--check-fall", "1"],
    )
    .await;
    let settled = poll(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async {
            let g = endpoint_health(&sy, "/web/", good.port).await?;
            let s = endpoint_health(&sy, "/web/", sick.port).await?;
            let w = endpoint_health(&sy, "/web/", wrong.port).await?;
            (g.1 != "-" && s.0 == "down" && w.0 == "down").then_some((g, s, w))
        },
    )
    .await;
    let Some((g, s, w)) = settled else {
        let x = sy.admin("/explain?path=/web/").await.body;
        panic!("never settled: {x}");
    };
    assert_eq!(g, ("up".to_string(), "L7OK 200".to_string()));
    assert_eq!(s.1, "L7STS 503");
    assert_eq!(w.1, "L6RSP", "the wrong CA fails the TLS handshake");

    let tls_failures = || async {
        let metrics = sy.admin("/metrics").await.body;
        metrics
            .lines()
            .find(|l| l.starts_with("switchyard_upstream_tls_failures_total{entry=\"web\"}"))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let before = tls_failures().await;
    for _ in 0..6 {
        let r = sy.get("/web/x").await;
        assert_eq!(
            (r.status, r.backend().as_deref()),
            (200, Some("good")),
            "{r:?}"
        );
    }
    assert_eq!(sick.count(), 0, "checks are not recorded as traffic");
    assert_eq!(
        tls_failures().await,
        before,
        "no request tried the wrong-CA endpoint"
    );
}

/// A bare connect check of a TLS backend is a verified handshake (`L6OK`); `lb.check-path`
/// on an HTTP/1.1-over-TLS backend is a GET over TLS (`L7OK 200`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_checks_of_http1_backends_connect_or_get_over_tls() {
    let ca = Ca::new("backend CA");
    let leaf = ca.server(&["web.default.svc", "api.default.svc"]);
    let tls = || Transport::Tls(server_config(&leaf, &[b"http/1.1"]));
    let bare = Backend::builder("bare").transport(tls()).start().await;
    let get = Backend::builder("get")
        .transport(tls())
        .health("/healthz")
        .start()
        .await;
    let dir = tempfile::tempdir().unwrap();
    let ca_path = ca_file(&dir, &ca);
    let objs = vec![
        svc("web", 80)
            .app_protocol("https")
            .ann("serviceloadbalancer/lb.check-interval", "100ms")
            .into(),
        slice("web", "", bare.port),
        svc("api", 80)
            .app_protocol("https")
            .ann("serviceloadbalancer/lb.check-interval", "100ms")
            .ann("serviceloadbalancer/lb.check-path", "/healthz")
            .into(),
        slice("api", "", get.port),
    ];
    let sy = switchyard_on(objs, "true", &["--backend-ca-file", &ca_path]).await;
    for (path, port, want) in [
        ("/web/", bare.port, "L6OK"),
        ("/api/", get.port, "L7OK 200"),
    ] {
        let checked = poll(
            Duration::from_secs(10),
            Duration::from_millis(50),
            || async {
                let s = endpoint_health(&sy, path, port).await?;
                (s.1 != "-").then_some(s)
            },
        )
        .await;
        assert_eq!(
            checked,
            Some(("up".to_string(), want.to_string())),
            "{path}"
        );
    }
    assert_eq!(get.count(), 0, "checks are not recorded as traffic");
}

/// The CA bundles are followed on disk: while `--backend-ca-file` holds another CA the backend
/// is refused (502); once the file holds the right one, requests succeed without a restart. A
/// Service's own `lb.backend-ca-file` is used instead of the flag's, and rotates the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_ca_bundles_rotate_without_a_restart() {
    let (b, right) = tls_backend("tls", "web.default.svc", b"http/1.1").await;
    let wrong = Ca::new("another CA");
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("flag.pem");
    std::fs::write(&flag, &wrong.pem).unwrap();
    let objs = |own: Option<&str>| {
        let mut s = svc("web", 80).app_protocol("https");
        if let Some(path) = own {
            s = s.ann("serviceloadbalancer/lb.backend-ca-file", path);
        }
        vec![s.into(), slice("web", "", b.port)]
    };
    let sy = switchyard_on(
        objs(None),
        "true",
        &["--backend-ca-file", flag.to_str().unwrap()],
    )
    .await;
    let status = || async { sy.get("/web/a").await.status };
    assert_eq!(status().await, 502, "the flag's bundle is the wrong CA");
    write_atomic(&flag, &right.pem);
    let ok = poll(
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async { (status().await == 200).then_some(()) },
    )
    .await;
    assert!(ok.is_some(), "rotated to the right CA without a restart");

    // The Service's own bundle replaces the flag's: the wrong CA again, so refused (the
    // connections verified against the flag's bundle are not reused for it).
    let own = dir.path().join("own.pem");
    std::fs::write(&own, &wrong.pem).unwrap();
    sy.rewrite(&objs(Some(own.to_str().unwrap())));
    let refused = poll(
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async { (status().await == 502).then_some(()) },
    )
    .await;
    assert!(refused.is_some(), "the Service's own bundle is used");
    let x = sy.admin("/explain?path=/web/a").await.json();
    assert_eq!(x["entry"]["backend_ca_file"], own.to_str().unwrap(), "{x}");
    write_atomic(&own, &right.pem);
    let ok = poll(
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async { (status().await == 200).then_some(()) },
    )
    .await;
    assert!(ok.is_some(), "the Service's own bundle rotates too");
}

/// A server configuration presenting `leaf` (ALPN `http/1.1`) that requires a client
/// certificate issued by `clients`.
fn mtls_server_config(
    leaf: &tls_client::Leaf,
    clients: &Ca,
) -> std::sync::Arc<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(clients.pem.as_bytes()).unwrap())
        .unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        std::sync::Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![CertificateDer::from(leaf.der.clone())],
            PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap(),
        )
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    std::sync::Arc::new(config)
}

/// Mutual TLS to a backend: without a client certificate it refuses switchyard (502); with
/// `--backend-client-cert`/`-key` it answers; a Service's own `lb.backend-client-cert`/`-key`
/// is presented instead of the flags' (here one the backend does not trust: refused again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_presented_to_backends_that_ask_for_one() {
    let ca = Ca::new("backend CA");
    let clients = Ca::new("client CA");
    let b = Backend::builder("mtls")
        .transport(Transport::Tls(mtls_server_config(
            &ca.server(&["web.default.svc"]),
            &clients,
        )))
        .start()
        .await;
    let dir = tempfile::tempdir().unwrap();
    let ca_path = ca_file(&dir, &ca);
    let write = |name: &str, leaf: &tls_client::Leaf| {
        let (c, k) = (
            dir.path().join(format!("{name}.crt")),
            dir.path().join(format!("{name}.key")),
        );
        std::fs::write(&c, &leaf.cert_pem).unwrap();
        std::fs::write(&k, &leaf.key_pem).unwrap();
        (
            c.to_str().unwrap().to_string(),
            k.to_str().unwrap().to_string(),
        )
    };
    let (cert, key) = write("trusted", &clients.client("switchyard"));
    let (other_cert, other_key) = write("other", &Ca::new("unknown").client("switchyard"));
    let objs = |own: Option<(&str, &str)>| {
        let mut s = svc("web", 80).app_protocol("https");
        if let Some((c, k)) = own {
            s = s
                .ann("serviceloadbalancer/lb.backend-client-cert", c)
                .ann("serviceloadbalancer/lb.backend-client-key", k);
        }
        vec![s.into(), slice("web", "", b.port)]
    };

    let sy = switchyard_on(objs(None), "true", &["--backend-ca-file", &ca_path]).await;
    assert_eq!(sy.get("/web/a").await.status, 502, "no client certificate");
    drop(sy);

    let sy = switchyard_on(
        objs(None),
        "true",
        &[
            "--backend-ca-file",
            &ca_path,
            "--backend-client-cert",
            &cert,
            "--backend-client-key",
            &key,
        ],
    )
    .await;
    let r = sy.get("/web/a").await;
    assert_eq!(
        (r.status, r.backend().as_deref()),
        (200, Some("mtls")),
        "{r:?}"
    );

    sy.rewrite(&objs(Some((&other_cert, &other_key))));
    let refused = poll(
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async { (sy.get("/web/a").await.status == 502).then_some(()) },
    )
    .await;
    assert!(
        refused.is_some(),
        "the Service's own (untrusted) certificate is presented"
    );
}

/// A TLS backend that answers each request with `200 ok` and closes (so every request is a new
/// connection, and a new handshake), recording whether each handshake resumed a session.
async fn resumption_backend(
    config: std::sync::Arc<rustls::ServerConfig>,
) -> (
    u16,
    std::sync::Arc<std::sync::Mutex<Vec<bool>>>,
    tokio::task::JoinHandle<()>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let resumed = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = std::sync::Arc::clone(&resumed);
    let task = tokio::spawn(async move {
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        // Bounded: a test makes a handful of connections.
        for _ in 0..100 {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let Ok(Ok(mut tls)) =
                tokio::time::timeout(Duration::from_secs(5), acceptor.accept(tcp)).await
            else {
                continue;
            };
            let kind = tls.get_ref().1.handshake_kind();
            seen.lock()
                .unwrap()
                .push(kind == Some(rustls::HandshakeKind::Resumed));
            let mut buf = [0u8; 4096];
            let _ = tokio::time::timeout(Duration::from_secs(5), tls.read(&mut buf)).await;
            let _ = tls
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                .await;
            let _ = tls.shutdown().await;
        }
    });
    (port, resumed, task)
}

/// A second new connection to the same backend resumes the TLS session of the first, on both
/// engines (the fast path keeps one rustls configuration per bundle version; Pingora's engine
/// leaves the startup `--backend-ca-file` bundle to its shared client configuration, whose
/// session cache does it); health checks are off so only traffic connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_connection_to_a_tls_backend_resumes_the_session() {
    for engine in ENGINES {
        let ca = Ca::new("backend CA");
        let config = server_config(&ca.server(&["web.default.svc"]), &[b"http/1.1"]);
        let (port, resumed, _task) = resumption_backend(config).await;
        let dir = tempfile::tempdir().unwrap();
        let ca_path = ca_file(&dir, &ca);
        let objs = vec![
            svc("web", 80).app_protocol("https").into(),
            slice("web", "", port),
        ];
        let sy = switchyard_on(
            objs,
            engine,
            &["--backend-ca-file", &ca_path, "--check-interval", "0"],
        )
        .await;
        for i in 0..3 {
            let r = sy.get("/web/a").await;
            assert_eq!(r.status, 200, "{engine}: request {i}: {r:?}");
        }
        let kinds = resumed.lock().unwrap().clone();
        assert_eq!(
            kinds.len(),
            3,
            "{engine}: one connection per request: {kinds:?}"
        );
        assert!(!kinds[0], "{engine}: the first handshake is a full one");
        assert!(
            kinds[1..].iter().all(|r| *r),
            "{engine}: later ones resume: {kinds:?}"
        );
    }
}

// === The fast path over TLS ===
//
// `https` backends (HTTP/1.1 over TLS) are the fast path's since issue #17; these run each
// case on both engines. Which engine served shows in `upstream_tls_handshakes_total`: the fast
// path says whether each handshake resumed a session (`resumed="true"`/`"false"`), Pingora's
// engine cannot (`"unknown"`).

/// What a `keep_alive_tls_backend` saw: per TCP connection, the server name sent and whether
/// the handshake resumed a session; and the requests answered.
#[derive(Default)]
struct TlsSeen {
    handshakes: std::sync::Mutex<Vec<(Option<String>, bool)>>,
    requests: std::sync::atomic::AtomicUsize,
}

impl TlsSeen {
    fn connections(&self) -> usize {
        self.handshakes.lock().unwrap().len()
    }

    fn requests(&self) -> usize {
        self.requests.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A TLS backend answering `200 ok` to each request head on a connection, keeping it open
/// unless `close` (then one request per connection, so each is a new handshake).
async fn keep_alive_tls_backend(
    config: std::sync::Arc<rustls::ServerConfig>,
    close: bool,
) -> (u16, std::sync::Arc<TlsSeen>, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(TlsSeen::default());
    let shared = std::sync::Arc::clone(&seen);
    let task = tokio::spawn(async move {
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            let seen = std::sync::Arc::clone(&shared);
            tokio::spawn(async move {
                let Ok(Ok(mut tls)) =
                    tokio::time::timeout(Duration::from_secs(5), acceptor.accept(tcp)).await
                else {
                    return;
                };
                let conn = tls.get_ref().1;
                let sni = conn.server_name().map(str::to_string);
                let resumed = conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
                seen.handshakes.lock().unwrap().push((sni, resumed));
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        seen.requests
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let answer: &[u8] = if close {
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                        } else {
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
                        };
                        if tls.write_all(answer).await.is_err() || close {
                            let _ = tls.shutdown().await;
                            return;
                        }
                    }
                    match tokio::time::timeout(Duration::from_secs(30), tls.read(&mut chunk)).await
                    {
                        Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                        _ => return,
                    }
                }
            });
        }
    });
    (port, seen, task)
}

/// The `upstream_tls_handshakes_total` of `entry` with `resumed`.
async fn handshakes(sy: &Switchyard, entry: &str, resumed: &str) -> u64 {
    let series = format!(
        "switchyard_upstream_tls_handshakes_total{{entry=\"{entry}\",resumed=\"{resumed}\"}} "
    );
    sy.admin("/metrics")
        .await
        .body
        .lines()
        .find_map(|l| l.strip_prefix(&series)?.parse().ok())
        .unwrap_or(0)
}

/// The `upstream_tls_failures_total` of `entry`.
async fn tls_failures_of(sy: &Switchyard, entry: &str) -> u64 {
    let series = format!("switchyard_upstream_tls_failures_total{{entry=\"{entry}\"}} ");
    sy.admin("/metrics")
        .await
        .body
        .lines()
        .find_map(|l| l.strip_prefix(&series)?.parse().ok())
        .unwrap_or(0)
}

/// The `resumed` value a new connection's handshake is counted under by `engine`: the fast
/// path knows whether it resumed; Pingora's engine does not say.
fn first_handshake(engine: &str) -> &'static str {
    if engine == "true" { "false" } else { "unknown" }
}

/// Both engines give the same answers for `https` backends, and the fast path serves them:
/// a verified backend answers (the Service's name sent as SNI, connections reused); a
/// Service's own bundle from another CA is refused (502, counted, nothing reaches the
/// backend); a bundle that is not loaded fails closed the same way; skipping verification
/// works only where the Service asks for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_backends_answer_alike_on_both_engines_and_the_fast_path_serves_them() {
    let ca = Ca::new("backend CA");
    let names = ["web.default.svc", "bad.default.svc", "lax.default.svc"];
    let config = server_config(&ca.server(&names), &[b"http/1.1"]);
    let (port, seen, _task) = keep_alive_tls_backend(config, false).await;
    let dir = tempfile::tempdir().unwrap();
    let right = ca_file(&dir, &ca);
    let wrong = dir.path().join("wrong.pem");
    std::fs::write(&wrong, Ca::new("another CA").pem).unwrap();
    let wrong = wrong.to_str().unwrap();
    let missing = dir.path().join("missing.pem");
    let missing = missing.to_str().unwrap();
    let own = "serviceloadbalancer/lb.backend-ca-file";
    let skip = "serviceloadbalancer/lb.backend-insecure-skip-verify";
    let objs = vec![
        svc("web", 80).app_protocol("https").into(),
        slice("web", "", port),
        svc("bad", 80).app_protocol("https").ann(own, wrong).into(),
        slice("bad", "", port),
        svc("lax", 80)
            .app_protocol("https")
            .ann(own, wrong)
            .ann(skip, "true")
            .into(),
        slice("lax", "", port),
        svc("gone", 80)
            .app_protocol("https")
            .ann(own, missing)
            .into(),
        slice("gone", "", port),
    ];
    for engine in ENGINES {
        let sy = switchyard_on(
            objs.clone(),
            engine,
            &["--backend-ca-file", &right, "--check-interval", "0"],
        )
        .await;
        let (conns, requests) = (seen.connections(), seen.requests());
        for i in 0..10 {
            let r = sy.get("/web/a").await;
            assert_eq!(
                (r.status, r.body.as_str()),
                (200, "ok"),
                "{engine} {i}: {r:?}"
            );
        }
        assert_eq!(seen.requests() - requests, 10, "{engine}");
        let opened = seen.connections() - conns;
        assert!(
            (1..10).contains(&opened),
            "{engine}: {opened} TLS connections for 10 requests"
        );
        let names: Vec<Option<String>> = seen.handshakes.lock().unwrap()[conns..]
            .iter()
            .map(|(n, _)| n.clone())
            .collect();
        assert!(
            names
                .iter()
                .all(|n| n.as_deref() == Some("web.default.svc")),
            "{engine}: the Service's name is sent: {names:?}"
        );
        // Each new connection's handshake is counted, under the engine's `resumed` values (a
        // request may find the pool empty while the previous one is still returning its
        // connection: a second connection then, which the fast path resumes).
        let counted = match engine {
            "true" => handshakes(&sy, "web", "false").await + handshakes(&sy, "web", "true").await,
            _ => handshakes(&sy, "web", "unknown").await,
        };
        assert_eq!(
            counted,
            opened as u64,
            "{engine}: {}",
            sy.admin("/metrics").await.body
        );
        assert!(
            handshakes(&sy, "web", first_handshake(engine)).await >= 1,
            "{engine}"
        );

        // The Services' own bundle (another CA) is loaded by the watcher's next poll; with
        // verification skipped by the Service, answered.
        let answered = poll(
            Duration::from_secs(10),
            Duration::from_millis(50),
            || async {
                let r = sy.get("/lax/a").await;
                (r.status == 200 && r.body == "ok").then_some(())
            },
        )
        .await;
        assert!(answered.is_some(), "{engine}: {}", sy.stderr());
        assert_eq!(
            handshakes(&sy, "lax", first_handshake(engine)).await,
            1,
            "{engine}"
        );

        // Another CA: refused before a byte of the request goes out, and counted.
        let requests = seen.requests();
        let r = sy.get("/bad/a").await;
        assert_eq!(r.status, 502, "{engine}: {r:?}");
        assert!(tls_failures_of(&sy, "bad").await >= 1, "{engine}");
        // A bundle that never loaded: the same answer and count, never another bundle.
        let r = sy.get("/gone/a").await;
        assert_eq!(r.status, 502, "{engine}: {r:?}");
        assert!(tls_failures_of(&sy, "gone").await >= 1, "{engine}");
        assert_eq!(
            seen.requests(),
            requests,
            "{engine}: nothing reached the backend"
        );
    }
}

/// A rotated bundle verifies the next connection, and no connection pooled under the old one
/// is used for it: the backend's CA rotated to another makes the very next requests fail
/// (a pooled connection would still answer), and back again they succeed over a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_bundle_never_reuses_a_connection_verified_under_the_old_one() {
    let ca = Ca::new("backend CA");
    let config = server_config(&ca.server(&["web.default.svc"]), &[b"http/1.1"]);
    let (port, seen, _task) = keep_alive_tls_backend(config, false).await;
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("flag.pem");
    std::fs::write(&flag, &ca.pem).unwrap();
    let objs = vec![
        svc("web", 80).app_protocol("https").into(),
        slice("web", "", port),
    ];
    for engine in ENGINES {
        write_atomic(&flag, &ca.pem);
        let sy = switchyard_on(
            objs.clone(),
            engine,
            &[
                "--backend-ca-file",
                flag.to_str().unwrap(),
                "--check-interval",
                "0",
            ],
        )
        .await;
        for _ in 0..3 {
            assert_eq!(sy.get("/web/a").await.status, 200, "{engine}");
        }
        let conns = seen.connections();
        write_atomic(&flag, &Ca::new("another CA").pem);
        let refused = poll(
            Duration::from_secs(10),
            Duration::from_millis(50),
            || async { (sy.get("/web/a").await.status == 502).then_some(()) },
        )
        .await;
        assert!(
            refused.is_some(),
            "{engine}: still answered through a connection verified under the old bundle"
        );
        assert!(tls_failures_of(&sy, "web").await >= 1, "{engine}");
        write_atomic(&flag, &ca.pem);
        let back = poll(
            Duration::from_secs(10),
            Duration::from_millis(50),
            || async { (sy.get("/web/a").await.status == 200).then_some(()) },
        )
        .await;
        assert!(back.is_some(), "{engine}: rotated back");
        assert!(
            seen.connections() > conns,
            "{engine}: the new bundle verified a new connection"
        );
        assert!(
            handshakes(&sy, "web", first_handshake(engine)).await >= 1,
            "{engine}: {}",
            sy.admin("/metrics").await.body
        );
    }
}

/// The fast path resumes TLS sessions with backends, counted by `resumed`: one rustls
/// configuration per bundle version keeps its session cache, also for a Service's own bundle
/// (for which Pingora's connector builds a configuration per connection, so never resumes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fast_path_resumes_sessions_with_a_services_own_bundle_and_counts_them() {
    let ca = Ca::new("backend CA");
    let config = server_config(&ca.server(&["web.default.svc"]), &[b"http/1.1"]);
    let (port, seen, _task) = keep_alive_tls_backend(config, true).await;
    let dir = tempfile::tempdir().unwrap();
    let own = ca_file(&dir, &ca);
    let objs = vec![
        svc("web", 80)
            .app_protocol("https")
            .ann("serviceloadbalancer/lb.backend-ca-file", &own)
            .into(),
        slice("web", "", port),
    ];
    let sy = switchyard_on(objs, "true", &["--check-interval", "0"]).await;
    // The Service's own file is loaded by the watcher's next poll (until then, refused before
    // connecting).
    let loaded = poll(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async { (sy.get("/web/a").await.status == 200).then_some(()) },
    )
    .await;
    assert!(loaded.is_some(), "{}", sy.stderr());
    for i in 1..3 {
        let r = sy.get("/web/a").await;
        assert_eq!(r.status, 200, "request {i}: {r:?}");
    }
    let kinds: Vec<bool> = seen
        .handshakes
        .lock()
        .unwrap()
        .iter()
        .map(|h| h.1)
        .collect();
    assert_eq!(
        kinds,
        [false, true, true],
        "one connection per request, later ones resumed"
    );
    assert_eq!(handshakes(&sy, "web", "false").await, 1);
    assert_eq!(handshakes(&sy, "web", "true").await, 2);
}

/// HTTP/2 clients' plain `GET` streams reach `https` backends through the fast path too (each
/// stream as an HTTP/1.1 request over a pooled TLS connection), with the same answers as
/// through Pingora's engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_streams_reach_https_backends_through_the_fast_path() {
    let ca = Ca::new("backend CA");
    let config = server_config(&ca.server(&["web.default.svc"]), &[b"http/1.1"]);
    let (port, seen, _task) = keep_alive_tls_backend(config, false).await;
    let dir = tempfile::tempdir().unwrap();
    let right = ca_file(&dir, &ca);
    let objs = vec![
        svc("web", 80).app_protocol("https").into(),
        slice("web", "", port),
    ];
    for engine in ENGINES {
        let sy = switchyard_on(
            objs.clone(),
            engine,
            &["--backend-ca-file", &right, "--check-interval", "0"],
        )
        .await;
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", sy.http_port))
            .await
            .unwrap();
        let (sender, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(tcp),
        )
        .await
        .unwrap();
        tokio::spawn(conn);
        let (conns, requests) = (seen.connections(), seen.requests());
        for i in 0..5 {
            let req = http::Request::get("http://web.test/web/a")
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .unwrap();
            let resp =
                tokio::time::timeout(Duration::from_secs(10), sender.clone().send_request(req))
                    .await
                    .unwrap()
                    .unwrap();
            assert_eq!(resp.version(), http::Version::HTTP_2);
            assert_eq!(resp.status(), 200, "{engine} {i}");
            let body = http_body_util::BodyExt::collect(resp.into_body())
                .await
                .unwrap()
                .to_bytes();
            assert_eq!(&body[..], b"ok", "{engine} {i}");
        }
        assert_eq!(seen.requests() - requests, 5, "{engine}");
        let opened = seen.connections() - conns;
        assert!((1..5).contains(&opened), "{engine}: {opened} connections");
        assert!(
            handshakes(&sy, "web", first_handshake(engine)).await >= 1,
            "{engine}: {}",
            sy.admin("/metrics").await.body
        );
    }
}

/// Without any bundle (no `--backend-ca-file`, none of the Service's own) the system's roots
/// verify, on both engines: a private CA is refused (502, counted); only a Service that skips
/// verification is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_bundle_the_systems_roots_refuse_a_private_ca_on_both_engines() {
    let ca = Ca::new("private CA");
    let names = ["web.default.svc", "lax.default.svc"];
    let config = server_config(&ca.server(&names), &[b"http/1.1"]);
    let (port, seen, _task) = keep_alive_tls_backend(config, false).await;
    let objs = vec![
        svc("web", 80).app_protocol("https").into(),
        slice("web", "", port),
        svc("lax", 80)
            .app_protocol("https")
            .ann(
                "serviceloadbalancer/lb.backend-insecure-skip-verify",
                "true",
            )
            .into(),
        slice("lax", "", port),
    ];
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &["--check-interval", "0"]).await;
        let requests = seen.requests();
        let r = sy.get("/web/a").await;
        assert_eq!(r.status, 502, "{engine}: {r:?}");
        assert!(tls_failures_of(&sy, "web").await >= 1, "{engine}");
        assert_eq!(seen.requests(), requests, "{engine}");
        let r = sy.get("/lax/a").await;
        assert_eq!((r.status, r.body.as_str()), (200, "ok"), "{engine}: {r:?}");
        assert_eq!(
            handshakes(&sy, "lax", first_handshake(engine)).await,
            1,
            "{engine}"
        );
    }
}

//! End-to-end checks of `--proxy-protocol`: real sockets on 127.0.0.1 write PROXY v1 and v2
//! headers by hand (as an AWS NLB or HAProxy would) ahead of HTTP, TLS and raw TCP, on both HTTP
//! engines. The header's client must be what the backend sees in X-Forwarded-For, what the
//! access log records, and what `source` balancing and client-IP affinity decide on; a
//! connection without a valid header, or from an untrusted peer, is closed and counted. Every
//! wait is bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod tls_client;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use rustls::pki_types::ServerName;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// What a read that got nothing within `IO_TIMEOUT` reports: switchyard's log and access log.
fn stalled(sy: &Switchyard) -> String {
    format!(
        "nothing within {IO_TIMEOUT:?}; stderr:\n{}\nstdout:\n{}",
        sy.stderr(),
        sy.stdout()
    )
}

/// A v1 header for a TCP4 client `ip:port` (the destination is informational).
fn v1(ip: &str, port: u16) -> Vec<u8> {
    format!("PROXY TCP4 {ip} 127.0.0.1 {port} 80\r\n").into_bytes()
}

/// A v2 PROXY/TCP4 header for `ip:port`, with a TLV after the addresses (AWS sends one).
fn v2(ip: [u8; 4], port: u16) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend_from_slice(&[0x21, 0x11, 0, 12 + 5]);
    h.extend_from_slice(&ip);
    h.extend_from_slice(&[127, 0, 0, 1]);
    h.extend_from_slice(&port.to_be_bytes());
    h.extend_from_slice(&80u16.to_be_bytes());
    h.extend_from_slice(&[0xEA, 0, 2, b'i', b'd']);
    h
}

/// A connection to `port` that has sent `header`, in segments of `chunk` bytes apart in time.
/// A failed write is left for the reads that follow to show: a refusal may close early.
async fn connect_with(port: u16, header: &[u8], chunk: usize) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.set_nodelay(true).unwrap();
    for part in header.chunks(chunk) {
        if s.write_all(part).await.is_err() {
            break;
        }
        if part.len() < header.len() {
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    }
    s
}

/// One GET over a connection that starts with `header`.
async fn get_via(port: u16, header: &[u8], path: &str) -> Resp {
    let s = connect_with(port, header, usize::MAX).await;
    OneConn::over(port, s).await.get(path, &[]).await.unwrap()
}

/// Whether the server closes `s` without answering (after the client wrote `then`).
async fn closed_without_answer(mut s: impl tokio::io::AsyncRead + Unpin) -> bool {
    let mut got = Vec::new();
    match tokio::time::timeout(IO_TIMEOUT, s.read_to_end(&mut got)).await {
        Ok(Ok(_)) => got.is_empty(),
        // A reset: the server closed with our bytes unread.
        Ok(Err(_)) => true,
        Err(_) => false,
    }
}

/// `switchyard_proxy_protocol_rejected_total` of `frontend` and `reason`.
async fn rejected(sy: &Switchyard, frontend: &str, reason: &str) -> u64 {
    let body = sy.admin("/metrics").await.body;
    body.lines()
        .filter(|l| l.starts_with("switchyard_proxy_protocol_rejected_total{"))
        .filter(|l| {
            l.contains(&format!("frontend=\"{frontend}\""))
                && l.contains(&format!("reason=\"{reason}\""))
        })
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

/// Waits (bounded) for an access-log line whose `client` is `client`.
async fn logged_client(sy: &Switchyard, client: &str) -> Option<Value> {
    poll(IO_TIMEOUT, Duration::from_millis(50), || async {
        sy.stdout()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["client"] == client)
    })
    .await
}

fn web(backends: &[&Backend]) -> Vec<Value> {
    let mut objs = vec![svc("web", 80).into()];
    objs.extend(slices("web", backends));
    objs
}

#[tokio::test]
async fn v1_and_v2_headers_give_the_client_to_the_backend_and_the_log() {
    let b = Backend::start("web").await;
    for engine in ENGINES {
        let sy = switchyard_on(
            web(&[&b]),
            engine,
            &["--proxy-protocol", "http", "--access-log", "json"],
        )
        .await;
        let port = sy.http_port;

        let r = get_via(port, &v1("203.0.113.7", 40001), "/web/v1").await;
        assert_eq!(r.status, 200, "engine {engine}: {r:?}");
        assert_eq!(
            r.seen_header("x-forwarded-for").as_deref(),
            Some("203.0.113.7"),
            "engine {engine}"
        );
        assert!(
            logged_client(&sy, "203.0.113.7:40001").await.is_some(),
            "engine {engine}: {}",
            sy.stdout()
        );

        let r = get_via(port, &v2([198, 51, 100, 9], 40002), "/web/v2").await;
        assert_eq!(
            r.seen_header("x-forwarded-for").as_deref(),
            Some("198.51.100.9"),
            "engine {engine}"
        );
        assert!(
            logged_client(&sy, "198.51.100.9:40002").await.is_some(),
            "engine {engine}"
        );

        // A header split over TCP segments, then two requests on the kept-alive connection
        // (the second one through Pingora on both engines: the fast path takes no POST).
        let s = connect_with(port, &v1("192.0.2.33", 40003), 5).await;
        let mut conn = OneConn::over(port, s).await;
        let r = conn.get("/web/split", &[]).await.unwrap();
        assert_eq!(
            r.seen_header("x-forwarded-for").as_deref(),
            Some("192.0.2.33"),
            "engine {engine}"
        );
        let r = conn.request("POST", "/web/again", &[]).await.unwrap();
        assert_eq!(r.status, 200, "engine {engine}: {r:?}");
        assert_eq!(
            r.seen_header("x-forwarded-for").as_deref(),
            Some("192.0.2.33"),
            "engine {engine}"
        );

        // LOCAL (the balancer's own health check) keeps the socket's peer.
        let local = b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00";
        let r = get_via(port, local, "/web/local").await;
        assert_eq!(
            r.seen_header("x-forwarded-for").as_deref(),
            Some("127.0.0.1"),
            "engine {engine}"
        );
        let r = get_via(port, b"PROXY UNKNOWN\r\n", "/web/unknown").await;
        assert_eq!(
            r.seen_header("x-forwarded-for").as_deref(),
            Some("127.0.0.1"),
            "engine {engine}"
        );
    }
}

#[tokio::test]
async fn connections_without_a_valid_header_are_closed_and_counted() {
    let b = Backend::start("web").await;
    for engine in ENGINES {
        let sy = switchyard_on(
            web(&[&b]),
            engine,
            &["--proxy-protocol", "http", "--request-header-timeout", "1s"],
        )
        .await;
        let port = sy.http_port;
        let before = b.count();

        // A client that bypassed the balancer: plain HTTP.
        let s = connect_with(port, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", usize::MAX).await;
        assert!(
            closed_without_answer(s).await,
            "engine {engine}: plain HTTP answered"
        );
        // A garbled header, a too-long one, a bad v2 command.
        for bad in [
            &b"PROXY TCP4 203.0.113.7 nonsense 1 2\r\nGET / HTTP/1.1\r\n\r\n"[..],
            &[b"PROXY UNKNOWN ".as_slice(), &[b'x'; 120]].concat(),
            b"\r\n\r\n\0\r\nQUIT\n\x2f\x11\x00\x0c000000000000GET / HTTP/1.1\r\n\r\n",
        ] {
            let s = connect_with(port, bad, usize::MAX).await;
            assert!(
                closed_without_answer(s).await,
                "engine {engine}: {bad:?} answered"
            );
        }
        // Half a header, then silence: closed after --request-header-timeout.
        let started = std::time::Instant::now();
        let s = connect_with(port, b"PROXY TCP4 ", usize::MAX).await;
        assert!(
            closed_without_answer(s).await,
            "engine {engine}: a stalled header stays open"
        );
        assert!(started.elapsed() >= Duration::from_millis(900));

        assert_eq!(
            b.count(),
            before,
            "engine {engine}: nothing reached the backend"
        );
        assert_eq!(
            rejected(&sy, "http", "not_proxy").await,
            1,
            "engine {engine}"
        );
        assert_eq!(rejected(&sy, "http", "invalid").await, 3, "engine {engine}");
        assert_eq!(rejected(&sy, "http", "timeout").await, 1, "engine {engine}");
        // A connect-and-close (a TCP health check) is no refusal.
        assert_eq!(rejected(&sy, "http", "closed").await, 0, "engine {engine}");
        // The frontend still serves a proper client.
        let r = get_via(port, &v1("203.0.113.1", 1), "/web/").await;
        assert_eq!(r.status, 200, "engine {engine}");
    }
}

#[tokio::test]
async fn headers_from_untrusted_peers_are_refused() {
    let b = Backend::start("web").await;
    let sy = switchyard(web(&[&b]))
        .args(&[
            "--proxy-protocol",
            "http",
            "--proxy-protocol-trusted",
            "10.0.0.0/8,192.0.2.0/24",
        ])
        .start()
        .await;
    let s = connect_with(sy.http_port, &v1("203.0.113.7", 1), usize::MAX).await;
    let s = {
        let mut s = s;
        // The refusal may already have closed it.
        let _ = s.write_all(b"GET /web/ HTTP/1.1\r\nHost: a\r\n\r\n").await;
        s
    };
    assert!(
        closed_without_answer(s).await,
        "a header from 127.0.0.1 was believed"
    );
    assert_eq!(b.count(), 0);
    assert_eq!(rejected(&sy, "http", "untrusted").await, 1);

    // Trusting loopback lets the same header through.
    let sy = switchyard(web(&[&b]))
        .args(&[
            "--proxy-protocol",
            "http",
            "--proxy-protocol-trusted",
            "10.0.0.0/8,127.0.0.1",
        ])
        .start()
        .await;
    let r = get_via(sy.http_port, &v1("203.0.113.7", 1), "/web/").await;
    assert_eq!(
        r.seen_header("x-forwarded-for").as_deref(),
        Some("203.0.113.7")
    );
}

#[tokio::test]
async fn source_balancing_and_client_ip_affinity_follow_the_header() {
    let (b1, b2) = (Backend::start("b1").await, Backend::start("b2").await);
    let mut objs: Vec<Value> = vec![
        svc("hashed", 80).algo("source").acl("/hashed").into(),
        svc("pinned", 80).client_ip_affinity().acl("/pinned").into(),
    ];
    objs.extend(slices("hashed", &[&b1, &b2]));
    objs.extend(slices("pinned", &[&b1, &b2]));
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &["--proxy-protocol", "http"]).await;
        for path in ["/hashed", "/pinned"] {
            // Every connection comes from 127.0.0.1; only the header tells clients apart.
            let mut by_client: BTreeMap<u8, BTreeSet<String>> = BTreeMap::new();
            for round in 0..3u16 {
                for last in 1..=12u8 {
                    let r =
                        get_via(sy.http_port, &v2([198, 51, 100, last], 1000 + round), path).await;
                    assert_eq!(r.status, 200, "engine {engine} {path}: {r:?}");
                    by_client
                        .entry(last)
                        .or_default()
                        .insert(r.backend().unwrap());
                }
            }
            assert!(
                by_client.values().all(|s| s.len() == 1),
                "engine {engine} {path}: a client moved between backends: {by_client:?}"
            );
            let used: BTreeSet<&String> = by_client.values().flatten().collect();
            assert_eq!(
                used.len(),
                2,
                "engine {engine} {path}: clients not spread: {by_client:?}"
            );
        }
    }
}

#[tokio::test]
async fn the_tls_frontend_reads_the_header_before_the_client_hello() {
    let secure = Backend::start("secure").await;
    let ca = tls_client::Ca::new("proxy-protocol-test");
    let leaf = ca.server(&["localhost"]);
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("cert.pem");
    std::fs::write(&cert, leaf.bundle()).unwrap();
    let port = free_port();
    let mut objs: Vec<Value> = vec![
        svc("secure", 80)
            .ann("serviceloadbalancer/lb.sslTerm", "true")
            .into(),
    ];
    objs.extend(slices("secure", &[&secure]));
    let sy = switchyard(objs)
        .args(&[
            "--https-port",
            &port.to_string(),
            "--ssl-cert",
            cert.to_str().unwrap(),
        ])
        .args(&["--proxy-protocol", "https"])
        .start()
        .await;
    assert!(
        eventually(Duration::from_secs(10), || async { sy.listens(port) }).await,
        "TLS port never opened; stderr:\n{}",
        sy.stderr()
    );
    let connector = TlsConnector::from(Arc::new(tls_client::client_config(None)));
    let name = ServerName::try_from("localhost").unwrap();

    for (header, client) in [
        (v1("203.0.113.44", 7), "203.0.113.44"),
        (v2([192, 0, 2, 5], 8), "192.0.2.5"),
    ] {
        let tcp = connect_with(port, &header, 3).await;
        let tls = tokio::time::timeout(IO_TIMEOUT, connector.connect(name.clone(), tcp))
            .await
            .unwrap()
            .unwrap();
        let r = OneConn::over(port, tls)
            .await
            .get("/secure/", &[])
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.seen_header("x-forwarded-for").as_deref(), Some(client));
    }

    // A ClientHello without a header first is refused before any TLS is spoken.
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let handshake = tokio::time::timeout(IO_TIMEOUT, connector.connect(name, tcp))
        .await
        .unwrap();
    assert!(handshake.is_err(), "TLS without a PROXY header was served");
    assert_eq!(rejected(&sy, "https", "not_proxy").await, 1);
}

/// A TCP backend that greets with its name, then echoes ([`Behaviour::TcpEcho`]).
async fn echo(name: &str) -> Backend {
    Backend::builder(name)
        .behaviour(Behaviour::TcpEcho)
        .start()
        .await
}

#[tokio::test]
async fn tcp_frontends_take_the_client_from_the_header() {
    let web_b = Backend::start("web").await;
    let e = echo("echo").await;
    let (port, plain) = (free_port(), free_port());
    let mut objs = web(&[&web_b]);
    objs.push(svc("db", port).into());
    objs.push(slice("db", "", e.port));
    objs.push(svc("cache", plain).into());
    objs.push(slice("cache", "", e.port));
    let sy = switchyard(objs)
        .args(&["--tcp-services", &format!("db:{port},cache:{plain}")])
        .args(&[
            "--proxy-protocol",
            &format!("tcp:{port}"),
            "--access-log",
            "json",
        ])
        .start()
        .await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            sy.listens(port) && sy.listens(plain)
        })
        .await,
        "TCP ports never opened; stderr:\n{}",
        sy.stderr()
    );

    for (header, client) in [
        (v2([203, 0, 113, 70], 5555), "203.0.113.70:5555"),
        (v1("203.0.113.71", 5556), "203.0.113.71:5556"),
    ] {
        let s = connect_with(port, &header, 4).await;
        let mut r = BufReader::new(s);
        let mut greeting = String::new();
        tokio::time::timeout(IO_TIMEOUT, r.read_line(&mut greeting))
            .await
            .unwrap_or_else(|_| panic!("{}", stalled(&sy)))
            .unwrap();
        assert_eq!(greeting.trim(), "echo");
        // The backend gets exactly the client's bytes: the header is not relayed.
        r.get_mut().write_all(b"ping\n").await.unwrap();
        let mut back = String::new();
        tokio::time::timeout(IO_TIMEOUT, r.read_line(&mut back))
            .await
            .unwrap_or_else(|_| panic!("{}", stalled(&sy)))
            .unwrap();
        assert_eq!(back, "ping\n");
        drop(r);
        let line = logged_client(&sy, client)
            .await
            .unwrap_or_else(|| panic!("no log of {client}: {}", sy.stdout()));
        assert_eq!(line["frontend"], format!("tcp:{port}"));
    }

    // Without a header: closed before the backend is dialled.
    let s = connect_with(port, b"ping\n", usize::MAX).await;
    assert!(closed_without_answer(s).await);
    assert_eq!(rejected(&sy, &format!("tcp:{port}"), "not_proxy").await, 1);
    // (e2e_observability checks the metrics table for the series a default run exposes; this
    // one only shows with the flag.)
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"));
    assert!(
        doc.unwrap()
            .contains("`switchyard_proxy_protocol_rejected_total`")
    );
    // The port not listed keeps working without one.
    let mut r = BufReader::new(TcpStream::connect(("127.0.0.1", plain)).await.unwrap());
    let mut greeting = String::new();
    tokio::time::timeout(IO_TIMEOUT, r.read_line(&mut greeting))
        .await
        .unwrap_or_else(|_| panic!("{}", stalled(&sy)))
        .unwrap();
    assert_eq!(greeting.trim(), "echo");
}

#[tokio::test]
async fn tcp_backends_get_a_v2_header_by_annotation() {
    let web_b = Backend::start("web").await;
    let e = echo("echo").await;
    let port = free_port();
    let mut objs = web(&[&web_b]);
    objs.push(
        svc("relay", port)
            .ann("serviceloadbalancer/lb.send-proxy-protocol", "v2")
            .into(),
    );
    objs.push(slice("relay", "", e.port));
    let sy = switchyard(objs)
        .args(&["--tcp-services", &format!("relay:{port}")])
        .args(&["--proxy-protocol", &format!("tcp:{port}")])
        .start()
        .await;
    assert!(
        eventually(Duration::from_secs(10), || async { sy.listens(port) }).await,
        "TCP port never opened; stderr:\n{}",
        sy.stderr()
    );
    // The client arrives through a balancer (v1); the backend is told in v2, ahead of the
    // client's bytes, with the frontend address the client reached.
    let s = connect_with(port, &v1("203.0.113.80", 6000), usize::MAX).await;
    let mut r = BufReader::new(s);
    let mut greeting = String::new();
    tokio::time::timeout(IO_TIMEOUT, r.read_line(&mut greeting))
        .await
        .unwrap_or_else(|_| panic!("{}", stalled(&sy)))
        .unwrap();
    assert_eq!(greeting.trim(), "echo");
    let mut want = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c".to_vec();
    want.extend_from_slice(&[203, 0, 113, 80, 127, 0, 0, 1]);
    want.extend_from_slice(&6000u16.to_be_bytes());
    want.extend_from_slice(&port.to_be_bytes());
    let mut echoed = vec![0u8; want.len()];
    tokio::time::timeout(IO_TIMEOUT, r.read_exact(&mut echoed))
        .await
        .unwrap_or_else(|_| panic!("{}", stalled(&sy)))
        .unwrap();
    assert_eq!(echoed, want, "the header the backend got");
    r.get_mut().write_all(b"ping\n").await.unwrap();
    let mut back = String::new();
    tokio::time::timeout(IO_TIMEOUT, r.read_line(&mut back))
        .await
        .unwrap_or_else(|_| panic!("{}", stalled(&sy)))
        .unwrap();
    assert_eq!(back, "ping\n");
}

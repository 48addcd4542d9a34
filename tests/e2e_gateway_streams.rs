//! Gateway API TCP and TLS listeners end to end, offline (`--manifests`): real sockets on
//! 127.0.0.1, a switchyard subprocess, TCP echo backends and TLS backends with certificates of
//! their own. A TCPRoute's connections are shared by weight (the spec's conformance shape:
//! 70/30/0, the oldest of two routes on a listener served), a TLSRoute's are relayed
//! unterminated by the hello's server name, on a port of their own and on the TLS port beside
//! termination, and a port opens and closes as the routes come and go. Every wait is bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod tls_client;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use tls_client::{Ca, sni};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const IO_TIMEOUT: Duration = Duration::from_secs(5);

fn class() -> Value {
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": {"name": "sy"},
        "spec": {"controllerName": "switchyard.io/gateway-controller"}})
}

fn gateway(listeners: Value) -> Value {
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "gw", "namespace": "default",
            "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"gatewayClassName": "sy", "listeners": listeners}})
}

/// A TCPRoute or TLSRoute on listener `section` of `gw`, created at `created`.
fn route(kind: &str, name: &str, section: &str, hostnames: &[&str], backends: Value) -> Value {
    let mut spec = json!({"parentRefs": [{"name": "gw", "sectionName": section}],
        "rules": [{"backendRefs": backends}]});
    if !hostnames.is_empty() {
        spec["hostnames"] = json!(hostnames);
    }
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec})
}

/// A Service named `name` on port 3000 whose one endpoint is `backend`.
fn service(name: &str, backend: &Backend) -> Vec<Value> {
    vec![svc(name, 3000).into(), slice(name, "", backend.port)]
}

async fn echo(name: &str) -> Backend {
    Backend::builder(name)
        .behaviour(Behaviour::TcpEcho)
        .start()
        .await
}

/// The greeting of the echo backend a new connection to `port` reached, after echoing a line
/// through it.
async fn greeting(port: u16) -> Result<String, String> {
    let fut = async {
        let s = TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let mut reader = BufReader::new(s);
        let mut name = String::new();
        reader
            .read_line(&mut name)
            .await
            .map_err(|e| format!("greeting: {e}"))?;
        if name.is_empty() {
            return Err("closed before the greeting".to_string());
        }
        reader
            .get_mut()
            .write_all(b"ping\n")
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut back = String::new();
        reader
            .read_line(&mut back)
            .await
            .map_err(|e| format!("echo: {e}"))?;
        if back != "ping\n" {
            return Err(format!("echoed {back:?}"));
        }
        Ok(name.trim().to_string())
    };
    tokio::time::timeout(IO_TIMEOUT, fut)
        .await
        .map_err(|_| "timeout".to_string())?
}

fn refused(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(1),
    )
    .is_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_routes_share_connections_by_weight_and_the_oldest_route_serves() {
    let (v1, v2, v3, newer) = (
        echo("v1").await,
        echo("v2").await,
        echo("v3").await,
        echo("newer").await,
    );
    let port = free_port();
    let mut objs = vec![
        class(),
        gateway(json!([{"name": "tcp", "port": port, "protocol": "TCP",
            "allowedRoutes": {"kinds": [{"kind": "TCPRoute"}]}}])),
    ];
    for (name, b) in [("v1", &v1), ("v2", &v2), ("v3", &v3), ("newer", &newer)] {
        objs.extend(service(name, b));
    }
    let mut older = route(
        "TCPRoute",
        "older",
        "tcp",
        &[],
        json!([{"name": "v1", "port": 3000, "weight": 70},
            {"name": "v2", "port": 3000, "weight": 30},
            {"name": "v3", "port": 3000, "weight": 0}]),
    );
    older["metadata"]["creationTimestamp"] = json!("2026-01-02T00:00:00Z");
    let mut newer_route = route(
        "TCPRoute",
        "newer",
        "tcp",
        &[],
        json!([{"name": "newer", "port": 3000}]),
    );
    newer_route["metadata"]["creationTimestamp"] = json!("2026-01-03T00:00:00Z");
    let base = objs.clone();
    objs.push(older);
    objs.push(newer_route);
    let sy = switchyard(objs.clone()).start().await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            greeting(port).await.is_ok()
        })
        .await,
        "the TCP listener never opened:\n{}",
        sy.stderr()
    );
    // Any 100 connections in a row: exactly the weights; the newer route's backend none.
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for _ in 0..100 {
        *seen.entry(greeting(port).await.unwrap()).or_default() += 1;
    }
    assert_eq!(
        seen,
        BTreeMap::from([("v1".to_string(), 70), ("v2".to_string(), 30)])
    );
    // Routes gone: the port closes; back: it opens again.
    sy.rewrite(&base);
    assert!(
        eventually(Duration::from_secs(10), || async { refused(port) }).await,
        "the port stayed open without routes"
    );
    sy.rewrite(&objs);
    assert!(
        eventually(Duration::from_secs(10), || async {
            greeting(port).await.is_ok()
        })
        .await,
        "the port did not open again:\n{}",
        sy.stderr()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_routes_pass_connections_through_by_server_name() {
    let backend_ca = Ca::new("backends' CA");
    let tls_backend = |name: &'static str, leaf: &tls_client::Leaf| {
        Backend::builder(name)
            .transport(Transport::Tls(tls_client::server_config(
                leaf,
                &[b"http/1.1"],
            )))
            .start()
    };
    let (abc_leaf, def_leaf) = (
        backend_ca.server(&["abc.example.com"]),
        backend_ca.server(&["def.example.com"]),
    );
    let abc = tls_backend("abc", &abc_leaf).await;
    let def = tls_backend("def", &def_leaf).await;
    let ca = Ca::new("switchyard CA");
    let default = ca.server(&["default.test"]);
    let dir = tempfile::tempdir().unwrap();
    let default_file = dir.path().join("default.pem");
    std::fs::write(&default_file, default.bundle()).unwrap();
    let (tls_port, https_port) = (free_port(), free_port());
    let mut objs = vec![
        class(),
        gateway(json!([
            {"name": "tls", "port": tls_port, "protocol": "TLS", "hostname": "*.example.com",
                "tls": {"mode": "Passthrough"}},
            {"name": "shared", "port": https_port, "protocol": "TLS",
                "hostname": "pass.example.com", "tls": {"mode": "Passthrough"}},
        ])),
        route(
            "TLSRoute",
            "abc",
            "tls",
            &["abc.example.com"],
            json!([{"name": "abc", "port": 3000}]),
        ),
        route(
            "TLSRoute",
            "def",
            "tls",
            &["def.example.com"],
            json!([{"name": "def", "port": 3000}]),
        ),
        route(
            "TLSRoute",
            "pass",
            "shared",
            &[],
            json!([{"name": "abc", "port": 3000}]),
        ),
    ];
    objs.extend(service("abc", &abc));
    objs.extend(service("def", &def));
    let sy = switchyard(objs)
        .args(&[
            "--https-port",
            &https_port.to_string(),
            "--gateway-https-port",
            &https_port.to_string(),
            "--ssl-cert",
            default_file.to_str().unwrap(),
        ])
        .start()
        .await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            sni("abc.example.com").connect(tls_port).await.is_ok()
        })
        .await,
        "the TLS listener never opened:\n{}",
        sy.stderr()
    );
    // Each name reaches its own backend, which completes the handshake with its certificate.
    assert_eq!(
        sni("abc.example.com").presented(tls_port).await,
        abc_leaf.der
    );
    assert_eq!(
        sni("def.example.com").presented(tls_port).await,
        def_leaf.der
    );
    let r = sni("def.example.com")
        .get(tls_port, "/x", &[])
        .await
        .unwrap();
    assert_eq!(r.backend().as_deref(), Some("def"));
    // Unterminated: switchyard added nothing.
    assert_eq!(r.seen_header("x-forwarded-proto"), None);
    // A name no route takes (or none at all) is closed.
    assert!(sni("zzz.example.com").connect(tls_port).await.is_err());
    assert!(
        tls_client::Client::default()
            .connect(tls_port)
            .await
            .is_err()
    );
    // On the TLS port the listener's name is relayed before any handshake; other names are
    // terminated by switchyard as ever.
    assert_eq!(
        sni("pass.example.com").presented(https_port).await,
        abc_leaf.der
    );
    assert_eq!(sni("other.test").presented(https_port).await, default.der);
    assert!(!sy.stderr().contains("cannot listen"), "{}", sy.stderr());
}

#[tokio::test]
async fn a_listener_on_a_port_switchyard_has_is_refused_and_said() {
    let v1 = echo("v1").await;
    let sy_port = free_port();
    let mut objs = vec![
        class(),
        gateway(json!([{"name": "on-http", "port": sy_port, "protocol": "TCP"}])),
        route(
            "TCPRoute",
            "r",
            "on-http",
            &[],
            json!([{"name": "v1", "port": 3000}]),
        ),
    ];
    objs.extend(service("v1", &v1));
    let sy = switchyard(objs)
        .args(&["--gateway-http-port", &sy_port.to_string()])
        .start()
        .await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            sy.stderr().contains("PortUnavailable")
                || sy.stderr().contains("is the Gateway HTTP port")
        })
        .await,
        "no word of the refused listener:\n{}",
        sy.stderr()
    );
    assert!(refused(sy_port));
}

/// The greeting of the echo backend reached over a TLS connection that switchyard
/// terminated (a TLS listener in Terminate mode), after echoing a line through it.
async fn greeting_over_tls(name: &str, port: u16) -> Result<String, String> {
    let fut = async {
        let s = sni(name).connect(port).await?;
        let mut reader = BufReader::new(s);
        let mut greeting = String::new();
        reader
            .read_line(&mut greeting)
            .await
            .map_err(|e| format!("greeting: {e}"))?;
        if greeting.is_empty() {
            return Err("closed before the greeting".to_string());
        }
        let s = reader.get_mut();
        s.write_all(b"ping\n")
            .await
            .map_err(|e| format!("write: {e}"))?;
        s.flush().await.map_err(|e| format!("flush: {e}"))?;
        let mut back = String::new();
        reader
            .read_line(&mut back)
            .await
            .map_err(|e| format!("echo: {e}"))?;
        if back != "ping\n" {
            return Err(format!("echoed {back:?}"));
        }
        Ok(greeting.trim().to_string())
    };
    tokio::time::timeout(IO_TIMEOUT, fut)
        .await
        .map_err(|_| "timeout".to_string())?
}

/// TLS listeners in Terminate mode (upstream's TLSRouteModeTerminate and TLSRouteModeMixed):
/// switchyard completes the handshake with the listener's certificate and relays the
/// plaintext to a TCP backend; a Passthrough listener on the same port keeps relaying its
/// name unterminated; a Terminate listener whose certificate does not resolve takes no
/// handshake (never passed through); on the Gateway HTTPS port Terminate is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_listeners_terminate_and_relay_beside_passthrough() {
    let plain = echo("plain").await;
    let backend_ca = Ca::new("backends' CA");
    let abc_leaf = backend_ca.server(&["abc.example.com"]);
    let abc = Backend::builder("abc")
        .transport(Transport::Tls(tls_client::server_config(
            &abc_leaf,
            &[b"http/1.1"],
        )))
        .start()
        .await;
    let ca = Ca::new("listener CA");
    let listener_leaf = ca.server(&["tls.example.com"]);
    let (port, broken_port, https_port) = (free_port(), free_port(), free_port());
    let mut objs = vec![
        class(),
        gateway(json!([
            {"name": "term", "port": port, "protocol": "TLS", "hostname": "tls.example.com",
                "tls": {"mode": "Terminate", "certificateRefs": [{"name": "term"}]}},
            {"name": "pass", "port": port, "protocol": "TLS", "hostname": "abc.example.com",
                "tls": {"mode": "Passthrough"}},
            {"name": "broken", "port": broken_port, "protocol": "TLS",
                "tls": {"mode": "Terminate", "certificateRefs": [{"name": "missing"}]}},
            {"name": "on-https", "port": https_port, "protocol": "TLS",
                "hostname": "https.example.com",
                "tls": {"mode": "Terminate", "certificateRefs": [{"name": "term"}]}},
        ])),
        tls_secret("term", &listener_leaf.cert_pem, &listener_leaf.key_pem),
        route(
            "TLSRoute",
            "term",
            "term",
            &["tls.example.com"],
            json!([{"name": "plain", "port": 3000}]),
        ),
        route(
            "TLSRoute",
            "pass",
            "pass",
            &["abc.example.com"],
            json!([{"name": "abc", "port": 3000}]),
        ),
        route(
            "TLSRoute",
            "broken",
            "broken",
            &[],
            json!([{"name": "abc", "port": 3000}]),
        ),
    ];
    objs.extend(service("plain", &plain));
    objs.extend(service("abc", &abc));
    let sy = switchyard(objs)
        .args(&[
            "--https-port",
            &https_port.to_string(),
            "--gateway-https-port",
            &https_port.to_string(),
        ])
        .start()
        .await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            greeting_over_tls("tls.example.com", port).await.is_ok()
        })
        .await,
        "the terminating listener never served:\n{}",
        sy.stderr()
    );
    // Terminated with the listener's certificate, the plaintext relayed to the TCP backend.
    assert_eq!(
        sni("tls.example.com").presented(port).await,
        listener_leaf.der
    );
    assert_eq!(
        greeting_over_tls("tls.example.com", port).await.as_deref(),
        Ok("plain")
    );
    // The same port passes the other name through to its backend's own handshake.
    assert_eq!(sni("abc.example.com").presented(port).await, abc_leaf.der);
    let r = sni("abc.example.com").get(port, "/x", &[]).await.unwrap();
    assert_eq!(r.backend().as_deref(), Some("abc"));
    // A name neither listener takes is closed.
    assert!(sni("zzz.example.com").connect(port).await.is_err());
    // No certificate resolves: no handshake at all — never passed through to the TLS
    // backend behind it, whose own handshake would succeed.
    assert!(
        eventually(Duration::from_secs(5), || async { !refused(broken_port) }).await,
        "{}",
        sy.stderr()
    );
    assert!(sni("any.example.com").connect(broken_port).await.is_err());
    // Terminate on the Gateway HTTPS port is refused, and said.
    let log = sy.stderr();
    assert!(
        log.lines()
            .any(|l| l.contains("on-https") && l.contains("Terminate is not served")),
        "{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("broken") && l.contains("Secret default/missing")),
        "{log}"
    );
}

//! Gateway API conformance, TCPRoute and TLSRoute traffic, offline: one test per upstream
//! TCPRoute and TLSRoute case (kubernetes-sigs/gateway-api v1.6.1,
//! `conformance/tests/tcproute-*.go` and `tlsroute-*.go`), on the same manifests
//! (tests/data/gateway-api, copied unchanged), switchyard reading them with `--manifests`.
//! The base manifests' `TCP_ECHO_SERVER` Deployments are TCP echo pods on 127.0.0.1 speaking
//! upstream's line protocol, `tcp-backend` over TLS too with the `abc.example.com` Secret
//! (tests/gateway_conformance/tcp.rs); `tls-backend` and `tls-backend-2` answer HTTPS with
//! the CA-signed `tls-checks-certificate` (tests/gateway_conformance/echo.rs). Each case
//! checks what upstream's does, the way `conformance/utils/tcp` checks it (welcome, `PING`,
//! `IS_TLS`, `TEST`; over TLS the certificate presented and the server name the backend saw).
//!
//! The listeners' ports are the manifests' own (9300, 9310, 8883, ...), opened by switchyard
//! on 127.0.0.1; cases sharing a port would meet, so every case here holds [`PORTS`] while it
//! runs. A listener on port 443 is served on switchyard's TLS port (`--gateway-https-port 443`,
//! the harness's `https_port`), and the client connects there. Upstream cases that only read
//! status (conditions, attached routes) are checked here for what shows offline, where no
//! status is written: the connections a route that is not served would take are refused, or a
//! server name it would take is not relayed. docs/gateway-conformance.md lists every case.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod gateway_conformance;
mod kube_api;
mod tls_client;

use std::time::Duration;

use gateway_conformance::tcp::{
    Dial, Expected, Refusal, echo_once, eventually_valid, plain, refusal, weighted_distribution,
};
use gateway_conformance::{APP, INFRA, Suite, WEB, start, start_addressed, start_world, world};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Where switchyard reads the objects from.
const SOURCE: gateway_conformance::Source = gateway_conformance::Source::Manifests;

/// Held by each case for its whole run: the cases' listeners are on fixed ports.
static PORTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn tcp(backend: &'static str, namespace: &'static str) -> Expected {
    Expected {
        backend,
        namespace,
        is_tls: false,
        hostname: None,
    }
}

/// `eventually_valid`, failing the test with switchyard's stderr.
async fn must_answer(s: &Suite, case: &str, dial: Dial<'_>, exp: Expected) {
    if let Err(e) = eventually_valid(dial, exp).await {
        panic!("{case}: {e}\n{}", s.sy.stderr());
    }
}

/// Every one of `n` connections reaches no backend; the port must have a listener (a route
/// is attached) unless `listening` is false.
async fn must_refuse(s: &Suite, case: &str, dial: Dial<'_>, n: usize, listening: bool) {
    for i in 0..n {
        match refusal(dial).await {
            Ok(Refusal::NotListening) if listening => panic!(
                "{case}: nothing listens on {}:{} (connection {i})\n{}",
                dial.ip,
                dial.port,
                s.sy.stderr()
            ),
            Ok(_) => {}
            Err(e) => panic!("{case}: connection {i}: {e}\n{}", s.sy.stderr()),
        }
    }
}

/// Waits (at most 10 s) until `port` accepts a TCP connection.
async fn accepting(port: u16) -> bool {
    common::eventually(Duration::from_secs(10), || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    })
    .await
}

// === TCPRoute ===

/// TCPRouteWeightedRouting
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_route_weighted_routing() {
    let _ports = PORTS.lock().await;
    let s = start(&["tcproute-weighted-routing.yaml"]).await;
    let dial = plain(9300);
    // GatewayAndTCPRoutesMustBeAccepted: here, the listener answers.
    let up = common::eventually(Duration::from_secs(15), || async {
        echo_once(dial).await.is_ok()
    })
    .await;
    assert!(up, "the TCP listener never answered:\n{}", s.sy.stderr());
    let weights = [("tcp-backend-v1", 0.7), ("tcp-backend-v2", 0.3)];
    let mut misses = Vec::new();
    // upstream: weight.MaxTestRetries (10) runs, the first that holds passes; 3 points.
    for attempt in 1..=10 {
        match weighted_distribution(dial, &weights, 0.03).await {
            Ok(()) => return,
            Err(e) => misses.push(format!("({attempt}/10) {e}")),
        }
    }
    panic!(
        "TCPRouteWeightedRouting: did not converge within tolerance:\n{}\n{}",
        misses.join("\n"),
        s.sy.stderr()
    );
}

/// TCPRouteMultipleRoutesAttachment. Upstream creates `tcproute-attach-newer` a second after
/// the manifest's route, so the API server stamps it a second later; offline nothing stamps,
/// so both routes get a `creationTimestamp` a second apart, the manifest's first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_route_multiple_routes_attachment() {
    let _ports = PORTS.lock().await;
    let mut w = world(&[
        "base/manifests.yaml",
        "tcproute-multiple-routes-attachment.yaml",
    ])
    .await;
    for o in &mut w.objects {
        if o["kind"] == "TCPRoute" && o["metadata"]["name"] == "tcproute-attach-older" {
            o["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
    }
    let s = start_world(w).await;
    let dial = plain(9310);
    must_answer(
        &s,
        "TCPRouteMultipleRoutesAttachment",
        dial,
        tcp("tcp-attach-backend-1", INFRA),
    )
    .await;
    let mut objects = s.objects.clone();
    objects.push(json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "TCPRoute",
        "metadata": {"name": "tcproute-attach-newer", "namespace": INFRA,
            "creationTimestamp": "2026-01-01T00:00:01Z"},
        "spec": {
            "parentRefs": [{"name": "tcp-multi-route-attach-gateway", "sectionName": "tcp"}],
            "rules": [{"backendRefs": [{"name": "tcp-attach-backend-2", "port": 3000}]}],
        },
    }));
    s.rewrite(&objects).await;
    // "Only the oldest TCPRoute should receive traffic": converge, then 100 samples.
    must_answer(
        &s,
        "TCPRouteMultipleRoutesAttachment",
        dial,
        tcp("tcp-attach-backend-1", INFRA),
    )
    .await;
    for i in 1..=100 {
        let pod = echo_once(dial)
            .await
            .unwrap_or_else(|e| panic!("TCP echo request {i}/100 failed: {e}\n{}", s.sy.stderr()));
        assert!(
            pod.starts_with("tcp-attach-backend-1-"),
            "request {i}/100 reached {pod:?}; only the oldest route should be attached\n{}",
            s.sy.stderr()
        );
    }
}

/// TCPRouteParentRefAttachAll
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_route_parent_ref_attach_all() {
    let _ports = PORTS.lock().await;
    let s = start(&["tcproute-parentref-attach-all.yaml"]).await;
    for port in [9310, 9311, 9312, 9313] {
        must_answer(
            &s,
            "TCPRouteParentRefAttachAll",
            plain(port),
            tcp("tcp-echo-attach-all", INFRA),
        )
        .await;
    }
}

/// TCPRouteParentRefPortAndSectionName
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_route_parent_ref_port_and_section_name() {
    let _ports = PORTS.lock().await;
    let s = start(&["tcproute-parentref-port-and-section-name.yaml"]).await;
    for (port, backend) in [
        (9300, "tcp-echo-one"),
        (9301, "tcp-echo-two"),
        (9302, "tcp-echo-three"),
    ] {
        must_answer(
            &s,
            "TCPRouteParentRefPortAndSectionName",
            plain(port),
            tcp(backend, INFRA),
        )
        .await;
    }
}

/// TCPRouteReferenceGrant. Upstream then deletes the ReferenceGrant and waits for
/// `ResolvedRefs: False` (`RefNotPermitted`); offline, the route's connections are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_route_reference_grant() {
    let _ports = PORTS.lock().await;
    let s = start(&["tcproute-reference-grant.yaml"]).await;
    let dial = plain(9320);
    must_answer(
        &s,
        "TCPRouteReferenceGrant",
        dial,
        tcp("tcp-reference-grant-backend", WEB),
    )
    .await;
    let objects: Vec<Value> = s
        .objects
        .iter()
        .filter(|o| {
            !(o["kind"] == "ReferenceGrant" && o["metadata"]["name"] == "tcp-reference-grant")
        })
        .cloned()
        .collect();
    assert_eq!(
        objects.len() + 1,
        s.objects.len(),
        "the ReferenceGrant is in the manifest"
    );
    s.rewrite(&objects).await;
    let refused = common::eventually(Duration::from_secs(10), || async {
        refusal(dial).await.is_ok()
    })
    .await;
    assert!(
        refused,
        "TCPRouteReferenceGrant: the backend is still reached without the grant\n{}",
        s.sy.stderr()
    );
    must_refuse(&s, "TCPRouteReferenceGrant", dial, 20, false).await;
}

/// TCPRouteInvalidBackendRefNonexistent (status only upstream: `ResolvedRefs: False`,
/// `BackendNotFound`). Offline: the listener is open (its route is attached) and refuses
/// every connection, the share of a backend that does not resolve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_route_invalid_backend_ref_nonexistent() {
    let _ports = PORTS.lock().await;
    let s = start(&["tcproute-invalid-backendref-nonexistent.yaml"]).await;
    assert!(
        accepting(9300).await,
        "port 9300 never opened:\n{}",
        s.sy.stderr()
    );
    must_refuse(
        &s,
        "TCPRouteInvalidBackendRefNonexistent",
        plain(9300),
        20,
        true,
    )
    .await;
}

/// TCPRouteInvalidCrossNamespaceBackendRef (status only upstream: `ResolvedRefs: False`,
/// `RefNotPermitted`). Offline: the backend in another namespace, without a grant, is never
/// reached although its pod runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_route_invalid_cross_namespace_backend_ref() {
    let _ports = PORTS.lock().await;
    let s = start(&["tcproute-invalid-cross-namespace-backend-ref.yaml"]).await;
    assert_eq!(s.pods_of(WEB, "tcp-invalid-xns-backend").len(), 1);
    assert!(
        accepting(9321).await,
        "port 9321 never opened:\n{}",
        s.sy.stderr()
    );
    must_refuse(
        &s,
        "TCPRouteInvalidCrossNamespaceBackendRef",
        plain(9321),
        20,
        true,
    )
    .await;
}

/// TCPRouteInvalidNonTCPListener (status only upstream: `Accepted: False`,
/// `NotAllowedByListeners`, no route attached). Offline: port 5300 is the HTTP listener's
/// (a port of its own, opened for it): it speaks HTTP (404: no HTTPRoute attached), never
/// relays to the TCPRoute's backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_route_invalid_non_tcp_listener() {
    let _ports = PORTS.lock().await;
    let s = start(&["tcproute-invalid-non-tcp-listener.yaml"]).await;
    let answer = || async {
        let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", 5300))
            .await
            .ok()?;
        tcp.write_all(b"GET / HTTP/1.1\r\nHost: any.example\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut buf = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut buf))
            .await
            .ok()?
            .ok()?;
        Some(String::from_utf8_lossy(&buf).into_owned())
    };
    let served = common::eventually(Duration::from_secs(10), || async {
        answer().await.is_some()
    })
    .await;
    assert!(
        served,
        "TCPRouteInvalidNonTCPListener: port 5300 never served HTTP:\n{}",
        s.sy.stderr()
    );
    for i in 0..5 {
        let got = answer().await.unwrap_or_default();
        assert!(
            got.starts_with("HTTP/1.1 404") && !got.contains("Gateway API Test TCP Server"),
            "TCPRouteInvalidNonTCPListener: connection {i}: {got:?}"
        );
    }
}

// === TLSRoute ===

/// The certificate of setup Secret `ns/name` (DER).
fn cert(s: &Suite, ns: &str, name: &str) -> Vec<u8> {
    s.secret(ns, name).der.clone()
}

/// TLSRouteSimpleSameNamespace
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_simple_same_namespace() {
    let _ports = PORTS.lock().await;
    let s = start(&["tlsroute-simple-same-namespace.yaml"]).await;
    let cert = cert(&s, INFRA, "tls-passthrough-checks-certificate");
    // The listener is on port 443: switchyard's TLS port.
    let dial = Dial {
        ip: "127.0.0.1",
        port: s.https_port,
        tls: Some(("abc.example.com", &cert)),
    };
    must_answer(
        &s,
        "TLSRouteSimpleSameNamespace",
        dial,
        Expected {
            backend: "tcp-backend",
            namespace: INFRA,
            is_tls: true,
            hostname: Some("abc.example.com"),
        },
    )
    .await;
}

/// TLSRouteTerminateSimpleSameNamespace (TLSRouteModeTerminate): a TLS listener in Terminate
/// mode on port 8443; the client verifies switchyard's handshake (the listener's
/// `tls-terminate-checks-certificate`) and its bytes reach `tcp-backend`'s plain port
/// decrypted (the backend sees no TLS, no server name).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_terminate_simple_same_namespace() {
    let _ports = PORTS.lock().await;
    let s = start(&["tlsroute-terminate-simple-same-namespace.yaml"]).await;
    let cert = cert(&s, INFRA, "tls-terminate-checks-certificate");
    let dial = Dial {
        ip: "127.0.0.1",
        port: 8443,
        tls: Some(("tls.example.com", &cert)),
    };
    must_answer(
        &s,
        "TLSRouteTerminateSimpleSameNamespace",
        dial,
        Expected {
            backend: "tcp-backend",
            namespace: INFRA,
            is_tls: false,
            hostname: None,
        },
    )
    .await;
}

/// TLSRouteMixedTerminationSameNamespace (TLSRouteModeTerminate, TLSRouteModeMixed): on
/// port 8883 `abc.example.com` is relayed unterminated to `tcp-backend`'s TLS port (the
/// backend's own certificate and handshake), and `tls.example.com` is terminated by
/// switchyard and relayed to the plain port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_mixed_termination_same_namespace() {
    let _ports = PORTS.lock().await;
    let s = start(&["tlsroute-mixed-termination-same-namespace.yaml"]).await;
    let passthrough = cert(&s, INFRA, "tls-passthrough-checks-certificate");
    let dial = Dial {
        ip: "127.0.0.1",
        port: 8883,
        tls: Some(("abc.example.com", &passthrough)),
    };
    must_answer(
        &s,
        "TLSRouteMixedTerminationSameNamespace (passthrough)",
        dial,
        Expected {
            backend: "tcp-backend",
            namespace: INFRA,
            is_tls: true,
            hostname: Some("abc.example.com"),
        },
    )
    .await;
    let terminate = cert(&s, INFRA, "tls-terminate-checks-certificate");
    let dial = Dial {
        ip: "127.0.0.1",
        port: 8883,
        tls: Some(("tls.example.com", &terminate)),
    };
    must_answer(
        &s,
        "TLSRouteMixedTerminationSameNamespace (terminate)",
        dial,
        Expected {
            backend: "tcp-backend",
            namespace: INFRA,
            is_tls: false,
            hostname: None,
        },
    )
    .await;
}

/// One HTTPS request `GET /` with SNI and Host `name` to `ip:port`, whose certificate must be
/// `cert`: the echo's JSON.
async fn https_get(ip: &str, port: u16, name: &str, cert: &[u8]) -> Result<Value, String> {
    let fut = async {
        let mut tls = tls_client::sni(name)
            .connect_at(ip, port)
            .await
            .map_err(|e| format!("SNI {name}: {e}"))?;
        let presented = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.to_vec())
            .unwrap_or_default();
        if presented != cert {
            return Err(format!("SNI {name}: not the backend's certificate"));
        }
        let req = format!("GET / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n");
        tls.write_all(req.as_bytes())
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut buf = Vec::new();
        (&mut tls)
            .take(1 << 20)
            .read_to_end(&mut buf)
            .await
            .map_err(|e| format!("read: {e}"))?;
        let text = String::from_utf8_lossy(&buf);
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| format!("no HTTP answer: {text:?}"))?;
        if !head.starts_with("HTTP/1.1 200") {
            return Err(format!("status: {}", head.lines().next().unwrap_or("")));
        }
        serde_json::from_str(body).map_err(|e| format!("body: {e}: {body:?}"))
    };
    tokio::time::timeout(Duration::from_secs(5), fut)
        .await
        .map_err(|_| "timeout".to_string())?
}

/// Upstream's `MakeTLSRequestAndExpectEventuallyConsistentResponse` for one name: 3 answers
/// in a row from `backend` in `ns`, with the host and path sent, within 10 s (a miss retried
/// after 1 s).
async fn https_consistently(
    ip: &str,
    port: u16,
    name: &str,
    cert: &[u8],
    backend: &str,
    ns: &str,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut in_a_row = 0;
    let mut last = String::new();
    for _ in 0..100 {
        let check = https_get(ip, port, name, cert).await.and_then(|v| {
            let pod = v["pod"].as_str().unwrap_or("");
            let got = gateway_conformance::tcp::deployment_of(pod);
            if got != backend {
                return Err(format!("pod {pod:?} is not of {backend:?}"));
            }
            if v["namespace"] != ns || v["host"] != name || v["path"] != "/" {
                return Err(format!("unexpected echo: {v}"));
            }
            Ok(())
        });
        match check {
            Ok(()) => {
                in_a_row += 1;
                if in_a_row == 3 {
                    return Ok(());
                }
                continue;
            }
            Err(e) => {
                in_a_row = 0;
                last = e;
            }
        }
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Err(format!("{ip}:{port} SNI {name} -> {backend}: {last}"))
}

/// TLSRouteHostnameIntersection. Upstream sends to each Gateway's own address; switchyard runs
/// with `--gateway-addresses` (one address each for the base manifests' Gateways and the
/// case's four) and each request goes to its Gateway's address on the TLS port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_hostname_intersection() {
    let _ports = PORTS.lock().await;
    let pool = [
        "127.0.0.2",
        "127.0.0.3",
        "127.0.0.4",
        "127.0.0.5",
        "127.0.0.6",
        "127.0.0.7",
        "127.0.0.8",
        "127.0.0.9",
    ];
    let s = start_addressed(&["tlsroute-hostname-intersection.yaml"], &pool).await;
    let cert = cert(&s, INFRA, "tls-checks-certificate");
    let checks: [(&str, &[(&str, &str)]); 4] = [
        (
            "gw-tlsroute-exact-hostname-x-1",
            &[("abc.example.com", "tls-backend")],
        ),
        (
            "gw-tlsroute-more-specific-wc-hostname-x-2",
            &[
                ("abc.example.com", "tls-backend"),
                ("other.example.com", "tls-backend-2"),
            ],
        ),
        (
            "gw-tlsroute-less-specific-wc-hostname-x-3",
            &[
                ("abc.example.com", "tls-backend"),
                ("other.example.com", "tls-backend-2"),
            ],
        ),
        (
            "gw-tlsroute-empty-hostname-x-4",
            &[
                ("abc.example.com", "tls-backend"),
                ("other.example.com", "tls-backend-2"),
            ],
        ),
    ];
    let mut failures = Vec::new();
    for (gw, names) in checks {
        let ip = s.gateway_address(INFRA, gw).await.to_string();
        for (name, backend) in names {
            if let Err(e) = https_consistently(&ip, s.https_port, name, &cert, backend, INFRA).await
            {
                failures.push(format!("{gw}: {e}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "TLSRouteHostnameIntersection:\n{}\n{}",
        failures.join("\n"),
        s.sy.stderr()
    );
}

/// A TLS connection to the TLS port with server name `name` is refused (closed before the
/// handshake completes): its route is served but its backend does not resolve.
async fn tls_refused(s: &Suite, case: &str, name: &str) {
    let dial = Dial {
        ip: "127.0.0.1",
        port: s.https_port,
        tls: Some((name, &[])),
    };
    must_refuse(s, case, dial, 10, true).await;
}

/// TLSRouteInvalidBackendRefNonexistent (status only upstream: `ResolvedRefs: False`,
/// `BackendNotFound`). Offline: the route's name is refused, not terminated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_invalid_backend_ref_nonexistent() {
    let _ports = PORTS.lock().await;
    let s = start(&["tlsroute-invalid-backendref-nonexistent.yaml"]).await;
    tls_refused(&s, "TLSRouteInvalidBackendRefNonexistent", "example.com").await;
}

/// TLSRouteInvalidBackendRefUnknownKind (status only upstream: `ResolvedRefs: False`,
/// `InvalidKind`). Offline: the route's name is refused, not terminated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_invalid_backend_ref_unknown_kind() {
    let _ports = PORTS.lock().await;
    let s = start(&["tlsroute-invalid-backendref-unknown-kind.yaml"]).await;
    tls_refused(&s, "TLSRouteInvalidBackendRefUnknownKind", "example.com").await;
}

/// TLSRouteInvalidReferenceGrant (status only upstream: `ResolvedRefs: False`,
/// `RefNotPermitted`). Offline: `abc.example.com` is refused; the backend in
/// gateway-conformance-app-backend, whose pod runs, is never reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_invalid_reference_grant() {
    let _ports = PORTS.lock().await;
    let s = start(&["tlsroute-invalid-reference-grant.yaml"]).await;
    assert_eq!(s.pods_of(APP, "tls-backend").len(), 1);
    tls_refused(&s, "TLSRouteInvalidReferenceGrant", "abc.example.com").await;
}

/// Server name `name` on the TLS port is not relayed to a backend: switchyard completes the
/// handshake itself, with a certificate that is none of the backends'.
async fn tls_not_relayed(s: &Suite, case: &str, name: &str) {
    let backends = [
        cert(s, INFRA, "tls-checks-certificate"),
        cert(s, INFRA, "tls-passthrough-checks-certificate"),
        cert(s, APP, "tls-passthrough-checks-certificate"),
    ];
    let presented = tls_client::sni(name).connect(s.https_port).await.map(|t| {
        t.get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.to_vec())
    });
    match presented {
        Ok(Some(der)) if !backends.contains(&der) => {}
        other => panic!(
            "{case}: SNI {name}: want a handshake by switchyard, got {:?}\n{}",
            other.map(|d| d.map(|d| if backends.contains(&d) {
                "a backend's certificate"
            } else {
                "?"
            })),
            s.sy.stderr()
        ),
    }
}

/// TLSRouteInvalidNoMatchingListenerHostname (status only upstream: `Accepted: False`,
/// `NoMatchingListenerHostname`). Offline: the routes' names are not relayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_invalid_no_matching_listener_hostname() {
    let _ports = PORTS.lock().await;
    let s = start(&["tlsroute-invalid-no-matching-listener-hostname.yaml"]).await;
    for name in [
        "www.nomatch.com",
        "x.nomatch.com",
        "www.different.com",
        "x.different.com",
        "www.example.com",
    ] {
        tls_not_relayed(&s, "TLSRouteInvalidNoMatchingListenerHostname", name).await;
    }
}

/// TLSRouteInvalidNoMatchingListener (status only upstream: `Accepted: False`,
/// `NotAllowedByListeners` / `NoMatchingParent`, no route attached). Offline: the routes'
/// `tls.example.com` is not relayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_invalid_no_matching_listener() {
    let _ports = PORTS.lock().await;
    let s = start(&["tlsroute-invalid-no-matching-listener.yaml"]).await;
    tls_not_relayed(&s, "TLSRouteInvalidNoMatchingListener", "tls.example.com").await;
}

/// Waits (at most 10 s) for a line of switchyard's stderr holding every one of `parts`.
async fn must_warn(s: &Suite, case: &str, parts: &[&str]) {
    let said = common::eventually(Duration::from_secs(10), || async {
        s.sy.stderr()
            .lines()
            .any(|l| parts.iter().all(|p| l.contains(p)))
    })
    .await;
    assert!(
        said,
        "{case}: no warning with {parts:?}:\n{}",
        s.sy.stderr()
    );
}

/// TLSRouteListenerTerminateSupportedKinds (status only upstream: the Terminate listener
/// accepted, `supportedKinds` TLSRoute). Offline: once the table is up, nothing is said
/// against the Gateway (its port opens with a route; it has none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_listener_terminate_supported_kinds() {
    let _ports = PORTS.lock().await;
    let s = start(&["tlsroute-listener-terminate-supported-kinds.yaml"]).await;
    let log = s.sy.stderr();
    assert!(
        !log.lines()
            .any(|l| l.contains("gateway-tlsroute-terminate-supported") && l.contains("WARN")),
        "TLSRouteListenerTerminateSupportedKinds:\n{log}"
    );
}

/// TLSRouteListenerPassthroughSupportedKinds (status only upstream: the listener's
/// `supportedKinds` is TLSRoute alone, `ResolvedRefs: False`, `InvalidRouteKinds`). Offline:
/// the kind it does not take is said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_listener_passthrough_supported_kinds() {
    let _ports = PORTS.lock().await;
    let s = start(&["tlsroute-listener-passthrough-supported-kinds.yaml"]).await;
    must_warn(
        &s,
        "TLSRouteListenerPassthroughSupportedKinds",
        &[
            "gateway-tlsroute-passthrough-supported-kind",
            "listener tls-passthrough",
            "route kind TCPRoute is not supported on a TLS listener",
        ],
    )
    .await;
}

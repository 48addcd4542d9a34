//! Gateway API conformance, UDPRoute traffic, offline: one test per upstream UDPRoute case
//! (kubernetes-sigs/gateway-api v1.6.1, `conformance/tests/udproute-*.go`), on the same
//! manifests (tests/data/gateway-api, copied unchanged), switchyard reading them with
//! `--manifests`. The base manifests' `coredns` Deployment is a DNS responder on 127.0.0.1
//! answering as its Corefile makes CoreDNS answer (`whoami` for `foo.bar.com`;
//! tests/gateway_conformance/dns.rs); the cases' `UDP_ECHO_SERVER` Deployments are UDP echo
//! pods answering echo-basic's JSON (tests/gateway_conformance/udp.rs). Their Services'
//! EndpointSlices carry the UDP ports (`protocol: UDP`, the port's name). Each case checks
//! what upstream's does, the way upstream's client checks it: a DNS exchange
//! (`dns.Exchange`), or a UDP echo probe from a new socket answered by the expected Service
//! and namespace, or the weighted count of 500 probes by the Deployment that answered.
//!
//! The listeners' ports are the manifests' own (5300-5302, 5310-5312), opened by switchyard
//! on 127.0.0.1; cases sharing a port would meet, so every case here holds [`PORTS`] while it
//! runs. Upstream cases that only read status (conditions, attached routes) are checked here
//! for what shows offline, where no status is written: a datagram of a route whose backend
//! does not resolve, or may not be referenced, gets no answer (UDP's refusal: the port is
//! open, the datagram dropped), and a route on a listener that does not take it is warned
//! about and opens no UDP port. docs/gateway-conformance.md lists every case.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod gateway_conformance;
mod kube_api;
mod tls_client;

use std::time::Duration;

use gateway_conformance::dns::{self, NOERROR, TYPE_A};
use gateway_conformance::udp::{
    Expected, Silence, eventually_echo, pod_once, silence, weighted_distribution,
};
use gateway_conformance::{APP, INFRA, Suite, start, start_world, world};
use serde_json::{Value, json};

/// Where switchyard reads the objects from.
const SOURCE: gateway_conformance::Source = gateway_conformance::Source::Manifests;

/// Held by each case for its whole run: the cases' listeners are on fixed ports.
static PORTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn echo(service: &'static str, namespace: &'static str) -> Expected {
    Expected {
        service: Some(service),
        namespace: Some(namespace),
    }
}

/// `eventually_echo`, failing the test with switchyard's stderr.
async fn must_echo(s: &Suite, case: &str, port: u16, exp: Expected) {
    if let Err(e) = eventually_echo(port, exp).await {
        panic!("{case}: {e}\n{}", s.sy.stderr());
    }
}

/// Every one of `n` datagrams, each from a new socket (a new flow), sent together, gets no
/// answer; the port must be open (a route is attached: the datagrams are dropped, not refused
/// by the kernel) unless `open` is false.
async fn must_drop(s: &Suite, case: &str, port: u16, n: usize, open: bool) {
    let probes = (0..n).map(|_| silence(port, gateway_conformance::udp::PROBE.as_bytes()));
    for (i, r) in futures_util::future::join_all(probes)
        .await
        .into_iter()
        .enumerate()
    {
        match r {
            Ok(Silence::NotListening) if open => panic!(
                "{case}: nothing has UDP port {port} (datagram {i})\n{}",
                s.sy.stderr()
            ),
            Ok(_) => {}
            Err(e) => panic!("{case}: datagram {i}: {e}\n{}", s.sy.stderr()),
        }
    }
}

/// Waits (at most 10 s) until UDP port `port` of 127.0.0.1 is held by a socket: a datagram
/// to it is no longer refused by the kernel (it is answered or dropped).
async fn udp_open(port: u16) -> bool {
    common::eventually(Duration::from_secs(10), || async {
        !matches!(silence(port, b"open?").await, Ok(Silence::NotListening))
    })
    .await
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

/// UDPRoute (`udproute-simple.yaml`): `foo.bar.com. A` through the Gateway's port 5300 to
/// CoreDNS. Upstream polls `dns.Exchange` every second for a minute and passes on the first
/// answer with the query's ID; here within 15 s, and the answer must also be CoreDNS's
/// `whoami` (NOERROR, authoritative, the address and port it saw the query from: switchyard's
/// flow socket on 127.0.0.1), and the CoreDNS pod must have seen the query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_route_simple() {
    let _ports = PORTS.lock().await;
    let s = start(&["udproute-simple.yaml"]).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut misses = Vec::new();
    let answer = loop {
        match dns::query("127.0.0.1", 5300, "foo.bar.com.", TYPE_A).await {
            Ok(a) => break a,
            Err(e) => misses.push(e),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "UDPRoute: no DNS answer through port 5300: {misses:?}\n{}",
            s.sy.stderr()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    assert_eq!(answer.rcode, NOERROR, "UDPRoute: {answer:?}");
    assert!(answer.authoritative, "UDPRoute: {answer:?}");
    assert_eq!(
        answer.client_ip,
        Some("127.0.0.1".parse().unwrap()),
        "UDPRoute: {answer:?}"
    );
    assert!(answer.client_port.is_some(), "UDPRoute: {answer:?}");
    let pods = s.pods_of(INFRA, "coredns");
    assert_eq!(pods.len(), 1);
    assert!(
        pods[0]
            .seen()
            .iter()
            .any(|q| q.path == "foo.bar.com" && q.method == "A"),
        "UDPRoute: the CoreDNS pod never saw the query"
    );
}

/// UDPRouteWeightedRouting: 500 probes, 10 at a time, each from a new socket; 70/30 between
/// `udp-backend-v1` and `-v2` within 3 points (the stricter of the two stored revisions of
/// upstream's file: 3 points in its own helper, 5 in `weight.TestWeightedDistribution`), and
/// `udp-backend-v3` (weight 0) never; 10 attempts, the first that holds passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_route_weighted_routing() {
    let _ports = PORTS.lock().await;
    let s = start(&["udproute-weighted-routing.yaml"]).await;
    // GatewayAndUDPRoutesMustBeAccepted: here, the listener answers.
    let up = common::eventually(Duration::from_secs(15), || async {
        pod_once(5300).await.is_ok()
    })
    .await;
    assert!(up, "the UDP listener never answered:\n{}", s.sy.stderr());
    let weights = [
        ("udp-backend-v1", 0.7),
        ("udp-backend-v2", 0.3),
        ("udp-backend-v3", 0.0),
    ];
    let mut misses = Vec::new();
    for attempt in 1..=10 {
        match weighted_distribution(5300, &weights, 0.03).await {
            Ok(()) => return,
            Err(e) => misses.push(format!("({attempt}/10) {e}")),
        }
    }
    panic!(
        "UDPRouteWeightedRouting: did not converge within tolerance:\n{}\n{}",
        misses.join("\n"),
        s.sy.stderr()
    );
}

/// UDPRouteMultipleRoutesAttachment. Upstream creates `udproute-attach-newer` a second after
/// the manifest's route, so the API server stamps it a second later; offline nothing stamps,
/// so both routes get a `creationTimestamp` a second apart, the manifest's first. Both
/// routes' `Accepted` and the listener's `attachedRoutes: 2` are status; the traffic is
/// checked: only the older route's backend answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_route_multiple_routes_attachment() {
    let _ports = PORTS.lock().await;
    let mut w = world(&[
        "base/manifests.yaml",
        "udproute-multiple-routes-attachment.yaml",
    ])
    .await;
    for o in &mut w.objects {
        if o["kind"] == "UDPRoute" && o["metadata"]["name"] == "udproute-attach-older" {
            o["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
    }
    let s = start_world(w).await;
    let case = "UDPRouteMultipleRoutesAttachment";
    must_echo(&s, case, 5301, echo("udp-attach-backend-1", INFRA)).await;
    let mut objects = s.objects.clone();
    objects.push(json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "UDPRoute",
        "metadata": {"name": "udproute-attach-newer", "namespace": INFRA,
            "creationTimestamp": "2026-01-01T00:00:01Z"},
        "spec": {
            "parentRefs": [{"name": "udp-multi-route-attach-gateway", "sectionName": "udp"}],
            "rules": [{"backendRefs": [{"name": "udp-attach-backend-2", "port": 8080}]}],
        },
    }));
    s.rewrite(&objects).await;
    // "Only the oldest UDPRoute should receive traffic": upstream polls 20 probes, failing
    // at once on another backend; here 100 probes after the rewrite, each a new flow.
    for i in 1..=100 {
        let pod = pod_once(5301)
            .await
            .unwrap_or_else(|e| panic!("{case}: UDP probe {i}/100 failed: {e}\n{}", s.sy.stderr()));
        assert_eq!(
            gateway_conformance::udp::deployment_of(&pod),
            "udp-attach-backend-1",
            "{case}: probe {i}/100 reached {pod:?}; only the oldest route should be attached\n{}",
            s.sy.stderr()
        );
    }
    assert!(
        s.pods_of(INFRA, "udp-attach-backend-2")[0]
            .seen()
            .is_empty(),
        "{case}: the newer route's backend was reached"
    );
}

/// UDPRouteParentRefAttachAllListeners: a parentRef without port or sectionName attaches to
/// the three UDP listeners; each (5310-5312) reaches `udp-echo-attach-all`. Each listener's
/// `attachedRoutes: 1` is status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_route_parent_ref_attach_all_listeners() {
    let _ports = PORTS.lock().await;
    let s = start(&["udproute-parentref-attach-all-listeners.yaml"]).await;
    for port in [5310, 5311, 5312] {
        must_echo(
            &s,
            "UDPRouteParentRefAttachAllListeners",
            port,
            echo("udp-echo-attach-all", INFRA),
        )
        .await;
    }
}

/// UDPRouteParentRefPortAndSectionName: by port, 5300 -> `udp-echo-by-port`; by
/// sectionName, 5301 -> `udp-echo-by-section`; by both, 5302 -> `udp-echo-by-section-and-port`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_route_parent_ref_port_and_section_name() {
    let _ports = PORTS.lock().await;
    let s = start(&["udproute-parentref-port-and-section-name.yaml"]).await;
    for (port, service) in [
        (5300, "udp-echo-by-port"),
        (5301, "udp-echo-by-section"),
        (5302, "udp-echo-by-section-and-port"),
    ] {
        must_echo(
            &s,
            "UDPRouteParentRefPortAndSectionName",
            port,
            echo(service, INFRA),
        )
        .await;
    }
}

/// UDPRouteReferenceGrant: while the ReferenceGrant exists, the backend in
/// gateway-conformance-app-backend answers (upstream: any echo answer; here from
/// `udp-echo-reference-grant` in that namespace). Upstream then deletes the grant and waits
/// for `ResolvedRefs: False` (`RefNotPermitted`); offline, every new flow gets no answer and
/// the warning says no ReferenceGrant allows the reference.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_route_reference_grant() {
    let _ports = PORTS.lock().await;
    let s = start(&["udproute-reference-grant.yaml"]).await;
    let case = "UDPRouteReferenceGrant";
    must_echo(&s, case, 5300, echo("udp-echo-reference-grant", APP)).await;
    let objects: Vec<Value> = s
        .objects
        .iter()
        .filter(|o| {
            !(o["kind"] == "ReferenceGrant" && o["metadata"]["name"] == "udp-reference-grant")
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
        silence(5300, b"still there?").await.is_ok()
    })
    .await;
    assert!(
        refused,
        "{case}: the backend is still reached without the grant\n{}",
        s.sy.stderr()
    );
    must_drop(&s, case, 5300, 20, false).await;
    must_warn(
        &s,
        case,
        &["udp-route-reference-grant", "no ReferenceGrant allows it"],
    )
    .await;
}

/// UDPRouteInvalidBackendRefNonexistent (status only upstream: `ResolvedRefs: False`,
/// `BackendNotFound`). Offline: the warning names the Service that does not exist, the
/// listener's port is open (its route is attached) and every new flow's datagram is dropped,
/// the share of a backend that does not resolve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_route_invalid_backend_ref_nonexistent() {
    let _ports = PORTS.lock().await;
    let s = start(&["udproute-invalid-backendref-nonexistent.yaml"]).await;
    let case = "UDPRouteInvalidBackendRefNonexistent";
    must_warn(
        &s,
        case,
        &[
            "udp-route-invalid-backend-ref-nonexistent",
            "nonexistent-service does not exist",
        ],
    )
    .await;
    assert!(
        udp_open(5300).await,
        "{case}: UDP port 5300 never opened:\n{}",
        s.sy.stderr()
    );
    must_drop(&s, case, 5300, 20, true).await;
}

/// UDPRouteInvalidCrossNamespaceBackendRef (status only upstream: `ResolvedRefs: False`,
/// `RefNotPermitted`; the route still `Accepted`). The Service it names,
/// gateway-conformance-app-backend/udp-echo-no-reference-grant, is in no manifest: upstream
/// checks only that the reference is not permitted. Offline: the warning says so (not that
/// the Service does not exist), the port is open (the route is attached) and every datagram
/// is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_route_invalid_cross_namespace_backend_ref() {
    let _ports = PORTS.lock().await;
    let s = start(&["udproute-invalid-cross-namespace-backend-ref.yaml"]).await;
    let case = "UDPRouteInvalidCrossNamespaceBackendRef";
    must_warn(
        &s,
        case,
        &[
            "udp-route-invalid-cross-namespace-backend-ref",
            "no ReferenceGrant allows it",
        ],
    )
    .await;
    assert!(
        udp_open(5300).await,
        "{case}: UDP port 5300 never opened:\n{}",
        s.sy.stderr()
    );
    must_drop(&s, case, 5300, 20, true).await;
}

/// UDPRouteNotAllowedByListeners (status only upstream: `Accepted: False`,
/// `NotAllowedByListeners`, 0 routes on the Gateway; run only where TLSRoute is supported,
/// as in switchyard). Offline, where a route that is not accepted is not warned about (its
/// status says it): no UDP port opens for it (the listener's port 443 is served on
/// switchyard's TLS port: neither answers a DNS query), and CoreDNS is never reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_route_not_allowed_by_listeners() {
    let _ports = PORTS.lock().await;
    let s = start(&["udproute-not-allowed-by-listeners.yaml"]).await;
    let case = "UDPRouteNotAllowedByListeners";
    // Give the UDP relays time to open a port they should not.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for port in [s.https_port, 443] {
        let queries = (0..5).map(|_| dns::query("127.0.0.1", port, "foo.bar.com.", TYPE_A));
        for (i, r) in futures_util::future::join_all(queries)
            .await
            .into_iter()
            .enumerate()
        {
            assert!(
                r.is_err(),
                "{case}: UDP port {port} answered query {i}: {r:?}\n{}",
                s.sy.stderr()
            );
        }
    }
    assert!(
        s.pods_of(INFRA, "coredns")[0].seen().is_empty(),
        "{case}: CoreDNS was reached"
    );
}

// === the harness itself ===

/// The pods answer as upstream's do, and the clients tell a wrong answer from a right one:
/// the CoreDNS pod's `whoami` (NOERROR, the client's own address and port) for
/// `foo.bar.com`, SERVFAIL for a name it would forward; the UDP echo pod's JSON with its
/// Service, namespace and pod; a distribution off its weights fails; an answer is no silence
/// and a port nothing holds is `NotListening`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harness_pods_answer_as_upstreams() {
    let coredns = dns::start_pod("coredns", "coredns-5d8f9c7b6-p0x", INFRA).await;
    let a = dns::query("127.0.0.1", coredns.port, "foo.bar.com.", TYPE_A)
        .await
        .unwrap();
    assert_eq!(a.rcode, NOERROR);
    assert!(a.authoritative);
    assert_eq!(a.client_ip, Some("127.0.0.1".parse().unwrap()));
    assert!(a.client_port.is_some_and(|p| p != coredns.port));
    let b = dns::query("127.0.0.1", coredns.port, "example.com.", TYPE_A)
        .await
        .unwrap();
    assert_eq!((b.rcode, b.client_ip), (dns::SERVFAIL, None));
    assert_eq!(coredns.seen().len(), 2);

    let pod = gateway_conformance::udp::start_pod(
        "udp-backend-v1",
        "udp-backend-v1-5d8f9c7b6-p0x",
        INFRA,
        "udp-backend-v1",
    )
    .await;
    let got = eventually_echo(pod.port, echo("udp-backend-v1", INFRA))
        .await
        .unwrap();
    assert_eq!(got["pod"], "udp-backend-v1-5d8f9c7b6-p0x");
    assert_eq!(
        gateway_conformance::udp::deployment_of(&pod_once(pod.port).await.unwrap()),
        "udp-backend-v1"
    );
    let weights = [("udp-backend-v1", 1.0), ("udp-backend-v2", 0.0)];
    assert!(
        weighted_distribution(pod.port, &weights, 0.03)
            .await
            .is_ok()
    );
    let weights = [("udp-backend-v1", 0.7), ("udp-backend-v2", 0.3)];
    assert!(
        weighted_distribution(pod.port, &weights, 0.03)
            .await
            .is_err()
    );
    assert!(silence(pod.port, b"x").await.is_err());
    let closed = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    assert_eq!(silence(closed_port, b"x").await, Ok(Silence::NotListening));
    drop(pod);
    tokio::time::sleep(Duration::from_millis(100)).await;
}

//! Gateway API conformance, ListenerSet, offline: one test per upstream ListenerSet case
//! (kubernetes-sigs/gateway-api v1.6.1, `conformance/tests/listenerset-*.go`), on the same
//! manifests (tests/data/gateway-api, copied unchanged), switchyard reading them with
//! `--manifests` and serving the Gateways' port-80 listeners on its HTTP port, port-443 ones on
//! its TLS port (`--gateway-http-port 80 --gateway-https-port 443`), as for the HTTPRoute cases
//! (tests/e2e_gateway_conformance.rs).
//!
//! The cases with traffic send upstream's requests (by hostname, to the Gateway's own
//! listeners and to its ListenerSets') and check upstream's `ExpectedResponse`s the way
//! upstream does (tests/gateway_conformance/expect.rs: 3 consistent answers in a row). The
//! cases that only read status (ListenerSet and listener conditions, attached counts, route
//! parent conditions) are checked here for what shows offline, where no status is written:
//! a refused ListenerSet is warned about on stderr ("does not allow ListenerSets"), an
//! allowed one is not; a route through a set reaches only the set's listeners; a set's HTTPS
//! listener presents its certificate. docs/gateway-conformance.md lists every case.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod gateway_conformance;
mod kube_api;
mod tls_client;

use std::time::Duration;

use gateway_conformance::expect::{Exp, run_all};
use gateway_conformance::{INFRA, Suite, WEB, start};

/// Where switchyard reads the objects from.
const SOURCE: gateway_conformance::Source = gateway_conformance::Source::Manifests;

const V1: &str = "infra-backend-v1";
const V2: &str = "infra-backend-v2";
const V3: &str = "infra-backend-v3";

/// The refusal of a ListenerSet its Gateway's `allowedListeners` does not allow.
const NOT_ALLOWED: &str = "does not allow ListenerSets";

/// How a warning names ListenerSet `ns/name` (its `object` field).
fn set(ns: &str, name: &str) -> String {
    format!("object=\"ListenerSet {ns}/{name}\"")
}

/// `http.Request{Host: host, Path: path}`.
fn at(host: &str, path: &str) -> Exp {
    gateway_conformance::expect::req(path).host(host)
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

/// No line of switchyard's stderr holds every one of `parts` (checked after the warnings
/// the case waits for, so after the table they come from was built).
fn must_not_warn(s: &Suite, case: &str, parts: &[&str]) {
    let stderr = s.sy.stderr();
    assert!(
        !stderr.lines().any(|l| parts.iter().all(|p| l.contains(p))),
        "{case}: a warning with {parts:?}:\n{stderr}"
    );
}

/// The sets `listenerset-with-{kind}-conflict-with-{gateway,listener-set}-2` of the conflict
/// cases have only a conflicted listener: each is warned about as serving none (upstream's
/// `ListenersNotValid`); their `-1` siblings keep a valid listener and are not.
async fn sets_without_valid_listeners(s: &Suite, case: &str, kind: &str) {
    const NONE: &str = "none of its listeners can be served";
    for with in ["gateway", "listener-set"] {
        let ls = format!("listenerset-with-{kind}-conflict-with-{with}-2");
        must_warn(s, case, &[NONE, &set(INFRA, &ls)]).await;
    }
    for with in ["gateway", "listener-set"] {
        let ls = format!("listenerset-with-{kind}-conflict-with-{with}-1");
        must_not_warn(s, case, &[NONE, &set(INFRA, &ls)]);
    }
}

// === traffic ===

/// ListenerSetHTTPRouting: two sets of two listeners each beside the Gateway's two; a route
/// through the Gateway and both sets reaches all six hostnames, one through the Gateway the
/// Gateway's two only, one through a set that set's only, and a `sectionName` one listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_http_routing() {
    let s = start(&["listenerset-http-routing.yaml"]).await;
    let gw = ["gateway-listener-1.com", "gateway-listener-2.com"];
    let ls1 = [
        "listener-set-http-routing-1-listener-1.com",
        "listener-set-http-routing-1-listener-2.com",
    ];
    let ls2 = [
        "listener-set-http-routing-2-listener-1.com",
        "listener-set-http-routing-2-listener-2.com",
    ];
    let all: Vec<&str> = gw.iter().chain(&ls1).chain(&ls2).copied().collect();
    // (path, the hostnames it is served on, backend); 404 on every other hostname.
    let routes: [(&str, &[&str], &str); 6] = [
        ("/route", &all, V1),
        ("/gateway-route", &gw, V2),
        ("/gateway-section-route", &gw[..1], V3),
        ("/listener-set-http-routing-1-route", &ls1, V2),
        ("/listener-set-http-routing-1-section-route", &ls1[..1], V3),
        ("/listener-set-http-routing-2-route", &ls2, V2),
    ];
    let mut cases = Vec::new();
    for (path, served, backend) in routes {
        for host in &all {
            cases.push(if served.contains(host) {
                at(host, path).to(backend, INFRA)
            } else {
                at(host, path).status(404)
            });
        }
    }
    run_all(&s, "ListenerSetHTTPRouting", &cases).await;
}

/// ListenerSetAllowedRoutesNamespaces: a set's listeners admit routes from All, Same (the
/// set's namespace) and Selector namespaces; a set in another namespace than its Gateway,
/// with a `Same` listener, admits the routes of the set's namespace, not the Gateway's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_allowed_routes_namespaces() {
    let s = start(&["listenerset-allowed-routes-namespaces.yaml"]).await;
    let all = "listener-set-listener-allowed-routes-all.com";
    let same = "listener-set-listener-allowed-routes-same.com";
    let selector = "listener-set-listener-allowed-routes-selector.com";
    let cross = "listener-set-listener-allowed-routes-cross-ns-same.com";
    run_all(
        &s,
        "ListenerSetAllowedRoutesNamespaces",
        &[
            at(all, "/route-in-same-namespace").to(V1, INFRA),
            at(all, "/route-in-selected-namespace").to(V2, INFRA),
            at(all, "/route-not-in-selected-namespace").to(V3, INFRA),
            at(same, "/route-in-same-namespace").to(V1, INFRA),
            at(same, "/route-in-selected-namespace").status(404),
            at(same, "/route-not-in-selected-namespace").status(404),
            at(selector, "/route-in-same-namespace").status(404),
            at(selector, "/route-in-selected-namespace").to(V2, INFRA),
            at(selector, "/route-not-in-selected-namespace").status(404),
            // Cross-namespace ListenerSet
            at(cross, "/route-in-listenerset-namespace").to(V1, INFRA),
            at(cross, "/route-in-gateway-namespace").status(404),
        ],
    )
    .await;
}

/// ListenerSetDualParentRefIndependence: a route with both the Gateway and the set as
/// parents is served on both; one whose Gateway parentRef names the set's listener
/// (`NoMatchingParent` there) is served through its set parentRef only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_dual_parent_ref_independence() {
    let s = start(&["listenerset-dual-parentref-independence.yaml"]).await;
    run_all(
        &s,
        "ListenerSetDualParentRefIndependence",
        &[
            at("gw-dual.com", "/dualboth").to(V1, INFRA),
            at("ls-dual.com", "/dualboth").to(V1, INFRA),
            at("ls-dual.com", "/dualone").to(V2, INFRA),
            at("gw-dual.com", "/dualone").status(404),
        ],
    )
    .await;
}

/// ListenerSetGatewayParentSectionNameNotFound: a route through the set's `sectionName` is
/// served; one naming that listener through the Gateway finds no listener (404).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_gateway_parent_section_name_not_found() {
    let s = start(&["listenerset-gateway-parent-section-name-not-found.yaml"]).await;
    run_all(
        &s,
        "ListenerSetGatewayParentSectionNameNotFound",
        &[
            at("ls-section-name.com", "/goodsection").to(V1, INFRA),
            at("gw-section.com", "/badsection").status(404),
        ],
    )
    .await;
}

// === status only upstream: what shows offline ===

/// ListenerSetRouteStatusScopedToParentRef (upstream: each route's `status.parents` holds
/// only the parentRef it names). Offline: the Gateway-only route is served on the Gateway's
/// listener alone, the set-only route on the set's alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_route_status_scoped_to_parent_ref() {
    let s = start(&["listenerset-route-status-scoped-to-parentref.yaml"]).await;
    run_all(
        &s,
        "ListenerSetRouteStatusScopedToParentRef",
        &[
            at("gw-parentref.com", "/gwonly").to(V1, INFRA),
            at("listenerset-parentref.com", "/gwonly").status(404),
            at("listenerset-parentref.com", "/lsonly").to(V2, INFRA),
            at("gw-parentref.com", "/lsonly").status(404),
        ],
    )
    .await;
}

/// ListenerSetAllowedNamespaceNone (upstream: the set `Accepted: False`, `NotAllowed`).
/// Offline: the set is refused with a warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_allowed_namespace_none() {
    let s = start(&["listenerset-allowed-namespace-none.yaml"]).await;
    must_warn(
        &s,
        "ListenerSetAllowedNamespaceNone",
        &[NOT_ALLOWED, &set(INFRA, "listenerset-not-allowed")],
    )
    .await;
}

/// ListenerSetDefaultNotAllowed (upstream: without `allowedListeners` the set is
/// `Accepted: False`, `NotAllowed`). Offline: the set is refused with a warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_default_not_allowed() {
    let s = start(&["listenerset-default-not-allowed.yaml"]).await;
    must_warn(
        &s,
        "ListenerSetDefaultNotAllowed",
        &[NOT_ALLOWED, &set(INFRA, "listenerset-default-not-allowed")],
    )
    .await;
}

/// ListenerSetAllowedNamespaceSame (upstream: the set of the Gateway's namespace accepted,
/// the other `NotAllowed`; one attached). Offline: the other is refused with a warning, the
/// same-namespace one is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_allowed_namespace_same() {
    let s = start(&["listenerset-allowed-namespace-same.yaml"]).await;
    let case = "ListenerSetAllowedNamespaceSame";
    let other = set(
        "gateway-api-listenerset-not-allowed-ns",
        "listenerset-in-different-namespace",
    );
    must_warn(&s, case, &[NOT_ALLOWED, &other]).await;
    must_not_warn(&s, case, &[&set(INFRA, "listenerset-in-same-namespace")]);
}

/// ListenerSetAllowedNamespaceSelector (upstream: the set of the labelled namespace
/// accepted, the other `NotAllowed`). Offline: the other is refused with a warning, the
/// selected one is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_allowed_namespace_selector() {
    let s = start(&["listenerset-allowed-namespace-selector.yaml"]).await;
    let case = "ListenerSetAllowedNamespaceSelector";
    let other = set(
        "gateway-api-listenerset-selector-not-allowed-ns",
        "listenerset-not-in-selected-namespace",
    );
    must_warn(&s, case, &[NOT_ALLOWED, &other]).await;
    let selected = set(
        "gateway-api-listenerset-selector-allowed-ns",
        "listenerset-in-selected-namespace",
    );
    must_not_warn(&s, case, &[&selected]);
}

/// ListenerSetReferenceGrant (upstream: the set whose namespace a ReferenceGrant lets
/// reference the Secret is `Accepted`, its listener `ResolvedRefs: True`; the other's
/// listener `RefNotPermitted`, the set `ListenersNotValid`). Offline: the granted set's
/// HTTPS listener presents the Secret's certificate for its hostname (no route: 404), the
/// other's listener is refused with a warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_reference_grant() {
    let s = start(&["listenerset-reference-grant.yaml"]).await;
    let cert = s.secret(WEB, "certificate").der.clone();
    let granted = "listenerset-with-reference-grant-listener.com";
    run_all(
        &s,
        "ListenerSetReferenceGrant",
        &[at(granted, "/").https(granted, &cert).status(404)],
    )
    .await;
    must_warn(
        &s,
        "ListenerSetReferenceGrant",
        &[
            &set(
                "gateway-api-listener-sets-test-reference-grant-ns",
                "listenerset-without-reference-grant",
            ),
            "listenerset-without-reference-grant-listener",
        ],
    )
    .await;
}

/// ListenerSetAllowedRoutesSupportedKinds (upstream: a set's TLS listener that allows only
/// HTTPRoute has `ResolvedRefs: False`, `InvalidRouteKinds`). Offline: the listener is
/// warned about for its route kinds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_allowed_routes_supported_kinds() {
    let s = start(&["listenerset-allowed-routes-supported-kinds.yaml"]).await;
    must_warn(
        &s,
        "ListenerSetAllowedRoutesSupportedKinds",
        &[
            &set(INFRA, "listenerset-test-allowed-routes-supported-kinds"),
            "listener-set-listener-allowed-routes-tls-only",
            "HTTPRoute",
        ],
    )
    .await;
}

/// ListenerSetHostnameConflict (upstream: a set's listener with the hostname of a Gateway
/// listener, or of an older set's, is `Conflicted: True`, `HostnameConflict`, not accepted;
/// a set with no other listener is `ListenersNotValid`, one with others accepted). Offline:
/// the sets with no other listener are warned about as serving none, the others are not.
/// The conflicted listener itself shows nothing offline: its hostname is the older
/// listener's, which serves it, and switchyard warns of no conflict (its status is the
/// status suite's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_hostname_conflict() {
    let s = start(&["listenerset-hostname-conflict.yaml"]).await;
    sets_without_valid_listeners(&s, "ListenerSetHostnameConflict", "hostname").await;
}

/// ListenerSetProtocolConflict (upstream: a set's TCP listener on the port of a Gateway's or
/// an older set's HTTP listener is `Conflicted: True`, `ProtocolConflict`, not accepted; a
/// set with no other listener is `ListenersNotValid`). Offline: each conflicted listener of
/// a set is warned about (as refused: a TCP listener may not have switchyard's HTTP port,
/// conflict or not), and the sets with no other listener as serving none, the others not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_protocol_conflict() {
    let s = start(&["listenerset-protocol-conflict.yaml"]).await;
    let case = "ListenerSetProtocolConflict";
    for (ls, listener) in [
        (
            "listenerset-with-protocol-conflict-with-gateway-1",
            "protocol-conflict-with-gateway-listener",
        ),
        (
            "listenerset-with-protocol-conflict-with-gateway-2",
            "protocol-conflict-with-gateway-listener",
        ),
        (
            "listenerset-with-protocol-conflict-with-listener-set-1",
            "protocol-conflict-with-listener-set-listener",
        ),
        (
            "listenerset-with-protocol-conflict-with-listener-set-2",
            "protocol-conflict-with-listener-set-listener",
        ),
    ] {
        must_warn(&s, case, &[&set(INFRA, ls), listener]).await;
    }
    sets_without_valid_listeners(&s, case, "protocol").await;
}

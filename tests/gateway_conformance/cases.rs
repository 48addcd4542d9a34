// The conformance cases, shared by tests/e2e_gateway_conformance.rs (offline, `--manifests`)
// and tests/e2e_gateway_conformance_cluster.rs (through the fake API server), which include
// this file after defining `SOURCE`. Not a module: the tests must be the including crate's.

use gateway_conformance::expect::{
    Exp, ExpReq, Redirect, eventually_consistent, req, run_all, run_all_fail, run_all_failing,
    weighted_distribution,
};
use gateway_conformance::{APP, INFRA, WEB, start, start_addressed};

const V1: &str = "infra-backend-v1";
const V2: &str = "infra-backend-v2";
const V3: &str = "infra-backend-v3";

// === core: Gateway, HTTPRoute, ReferenceGrant ===

/// HTTPRouteSimpleSameNamespace
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_simple_same_namespace() {
    let s = start(&["httproute-simple-same-namespace.yaml"]).await;
    run_all(
        &s,
        "HTTPRouteSimpleSameNamespace",
        &[req("/").status(200).to(V1, INFRA)],
    )
    .await;
}

/// HTTPRouteCrossNamespace: a route in the web-backend namespace attaches to the Gateway
/// `backend-namespaces`, whose listener admits namespaces labelled
/// `gateway-conformance: backend` (the Namespace objects of the base manifests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_cross_namespace() {
    let s = start(&["httproute-cross-namespace.yaml"]).await;
    run_all(
        &s,
        "HTTPRouteCrossNamespace",
        &[req("/").status(200).to("web-backend", WEB)],
    )
    .await;
}

/// HTTPExactPathMatching
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_exact_path_matching() {
    let s = start(&["httproute-exact-path-matching.yaml"]).await;
    run_all(
        &s,
        "HTTPExactPathMatching",
        &[
            req("/one").to(V1, INFRA),
            req("/two").to(V2, INFRA),
            req("/").status(404),
            req("/one/example").status(404),
            req("/two/").status(404),
            req("/Two").status(404),
        ],
    )
    .await;
}

/// HTTPRouteHeaderMatching
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_header_matching() {
    let s = start(&["httproute-header-matching.yaml"]).await;
    let h = |kv: &[(&str, &str)]| req("/").headers(kv);
    run_all(
        &s,
        "HTTPRouteHeaderMatching",
        &[
            h(&[("Version", "one")]).to(V1, INFRA),
            h(&[("Version", "two")]).to(V2, INFRA),
            h(&[("Version", "two"), ("Color", "orange")]).to(V1, INFRA),
            h(&[("Version", "two"), ("Color", "blue")]).to(V2, INFRA),
            h(&[("Color", "orange")]).status(404),
            h(&[("Some-Other-Header", "one")]).status(404),
            h(&[("Color", "blue")]).to(V1, INFRA),
            h(&[("Color", "green")]).to(V1, INFRA),
            h(&[("Color", "red")]).to(V2, INFRA),
            h(&[("Color", "yellow")]).to(V2, INFRA),
            h(&[("Color", "purple")]).status(404),
        ],
    )
    .await;
}

/// HTTPRouteHostnameIntersection (its traffic subtests; the AttachedRoutes and route
/// conditions subtests are status).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_hostname_intersection() {
    let s = start(&["httproute-hostname-intersection.yaml"]).await;
    let r = |host: &str, path: &str| req(path).host(host);
    run_all(
        &s,
        "HTTPRouteHostnameIntersection",
        &[
            // specific-host-matches-listener-specific-host
            r("very.specific.com", "/s1").to(V1, INFRA),
            // The port in the Host header must not be considered when matching hostnames.
            r("very.specific.com:1234", "/s1").to(V1, INFRA),
            r("non.matching.com", "/s1").status(404),
            r("foo.nonmatchingwildcard.io", "/s1").status(404),
            r("foo.wildcard.io", "/s1").status(404),
            r("very.specific.com", "/non-matching-prefix").status(404),
            // specific-host-matches-listener-wildcard-host
            r("foo.wildcard.io", "/s2").to(V2, INFRA),
            r("bar.wildcard.io", "/s2").to(V2, INFRA),
            r("foo.bar.wildcard.io", "/s2").to(V2, INFRA),
            r("non.matching.com", "/s2").status(404),
            r("wildcard.io", "/s2").status(404),
            r("very.specific.com", "/s2").status(404),
            r("foo.wildcard.io", "/non-matching-prefix").status(404),
            // wildcard-host-matches-listener-specific-host
            r("very.specific.com", "/s3").to(V3, INFRA),
            r("non.matching.com", "/s3").status(404),
            r("foo.specific.com", "/s3").status(404),
            r("foo.wildcard.io", "/s3").status(404),
            r("very.specific.com", "/non-matching-prefix").status(404),
            // wildcard-host-matches-listener-wildcard-host
            r("foo.anotherwildcard.io", "/s4").to(V1, INFRA),
            r("bar.anotherwildcard.io", "/s4").to(V1, INFRA),
            r("foo.bar.anotherwildcard.io", "/s4").to(V1, INFRA),
            r("anotherwildcard.io", "/s4").status(404),
            r("foo.wildcard.io", "/s4").status(404),
            r("very.specific.com", "/s4").status(404),
            r("foo.anotherwildcard.io", "/non-matching-prefix").status(404),
            // no-intersecting-hosts
            r("specific.but.wrong.com", "/s5").status(404),
            r("wildcard.io", "/s5").status(404),
            // httproute-hostname-intersection-all (a listener without a hostname)
            r("first.com", "/").to(V2, INFRA),
            r("sub.first.com", "/").to(V2, INFRA),
            r("second.com", "/").to(V2, INFRA),
            r("sub.second.com", "/").to(V2, INFRA),
            r("third.com", "/").ns(INFRA).status(404),
            r("sub.third.com", "/").ns(INFRA).status(404),
        ],
    )
    .await;
}

/// HTTPRouteListenerHostnameMatching
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_listener_hostname_matching() {
    let s = start(&["httproute-listener-hostname-matching.yaml"]).await;
    let r = |host: &str| req("/").host(host);
    run_all(
        &s,
        "HTTPRouteListenerHostnameMatching",
        &[
            r("bar.com").to(V1, INFRA),
            r("foo.bar.com").to(V2, INFRA),
            r("baz.bar.com").to(V3, INFRA),
            r("boo.bar.com").to(V3, INFRA),
            r("multiple.prefixes.bar.com").to(V3, INFRA),
            r("multiple.prefixes.foo.com").to(V3, INFRA),
            r("foo.com").status(404),
            r("no.matching.host").status(404),
        ],
    )
    .await;
}

/// HTTPRouteMultipleGateways: Gateways `same-namespace` and `all-namespaces` both listen on
/// port 80 without a hostname; a shared route is attached to both, and each has a dedicated
/// route for `/` to another backend. Each Gateway is reached at its own `status.addresses`
/// (`--gateway-addresses`: the base manifests' four Gateways get one each) and answers with
/// its own routes only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_multiple_gateways() {
    let pool = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"];
    let s = start_addressed(&["httproute-multiple-gateways.yaml"], &pool).await;
    let same = s.gateway_address(INFRA, "same-namespace").await;
    let all = s.gateway_address(INFRA, "all-namespaces").await;
    assert_ne!(same, all, "two Gateways, one address");
    run_all(
        &s,
        "HTTPRouteMultipleGateways",
        &[
            // Gateway same-namespace
            req("/shared").at(same).status(200).to(V1, INFRA),
            req("/").at(same).status(200).to(V2, INFRA),
            // Gateway all-namespaces
            req("/shared").at(all).status(200).to(V1, INFRA),
            req("/").at(all).status(200).to(V3, INFRA),
        ],
    )
    .await;
}

/// HTTPRouteMatching
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_matching() {
    let s = start(&["httproute-matching.yaml"]).await;
    run_all(
        &s,
        "HTTPRouteMatching",
        &[
            req("/").to(V1, INFRA),
            req("/example").to(V1, INFRA),
            req("/").headers(&[("Version", "one")]).to(V1, INFRA),
            req("/v2").to(V2, INFRA),
            req("/v2/example").to(V2, INFRA),
            req("/").headers(&[("Version", "two")]).to(V2, INFRA),
            req("/v2/").to(V2, INFRA),
            // Not a path segment prefix so should not match /v2.
            req("/v2example").to(V1, INFRA),
            req("/foo/v2/example").to(V1, INFRA),
        ],
    )
    .await;
}

/// HTTPRouteMatchingAcrossRoutes
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_matching_across_routes() {
    let s = start(&["httproute-matching-across-routes.yaml"]).await;
    let r = |host: &str, path: &str| req(path).host(host);
    run_all(
        &s,
        "HTTPRouteMatchingAcrossRoutes",
        &[
            r("example.com", "/").to(V1, INFRA),
            r("example.com", "/example").to(V1, INFRA),
            r("example.net", "/example").to(V1, INFRA),
            r("example.com", "/example")
                .headers(&[("Version", "one")])
                .to(V1, INFRA),
            r("example.com", "/v2").to(V2, INFRA),
            // v2 matches are limited to example.com
            r("example.net", "/v2").to(V1, INFRA),
            r("example.com", "/v2/example").to(V2, INFRA),
            r("example.com", "/")
                .headers(&[("Version", "two")])
                .to(V2, INFRA),
        ],
    )
    .await;
}

/// HTTPRoutePathMatchOrder
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_path_match_order() {
    let s = start(&["httproute-path-match-order.yaml"]).await;
    run_all(
        &s,
        "HTTPRoutePathMatchOrder",
        &[
            req("/match/exact/one").to(V3, INFRA),
            req("/match/exact").to(V2, INFRA),
            req("/match").to(V1, INFRA),
            req("/match/prefix/one/any").to(V2, INFRA),
            req("/match/prefix/any").to(V1, INFRA),
            req("/match/any").to(V3, INFRA),
        ],
    )
    .await;
}

/// The expectations of HTTPRouteRequestHeaderModifier, also those of the backendRef-level
/// variant (same rules, the filters on the backendRefs).
fn request_header_modifier_cases() -> Vec<Exp> {
    vec![
        req("/set")
            .headers(&[("Some-Other-Header", "val")])
            .expected(ExpReq::path("/set").headers(&[
                ("Some-Other-Header", "val"),
                ("X-Header-Set", "set-overwrites-values"),
            ]))
            .to(V1, INFRA),
        req("/set")
            .headers(&[
                ("Some-Other-Header", "val"),
                ("X-Header-Set", "some-other-value"),
            ])
            .expected(ExpReq::path("/set").headers(&[
                ("Some-Other-Header", "val"),
                ("X-Header-Set", "set-overwrites-values"),
            ]))
            .to(V1, INFRA),
        req("/add")
            .headers(&[("Some-Other-Header", "val")])
            .expected(ExpReq::path("/add").headers(&[
                ("Some-Other-Header", "val"),
                ("X-Header-Add", "add-appends-values"),
            ]))
            .to(V1, INFRA),
        req("/add")
            .headers(&[
                ("Some-Other-Header", "val"),
                ("X-Header-Add", "some-other-value"),
            ])
            .expected(ExpReq::path("/add").headers(&[
                ("Some-Other-Header", "val"),
                ("X-Header-Add", "some-other-value,add-appends-values"),
            ]))
            .to(V1, INFRA),
        req("/remove")
            .headers(&[("X-Header-Remove", "val")])
            .expected(ExpReq::path("/remove").absent(&["X-Header-Remove"]))
            .to(V1, INFRA),
        req("/multiple")
            .headers(&[
                ("X-Header-Set-2", "set-val-2"),
                ("X-Header-Add-2", "add-val-2"),
                ("X-Header-Remove-2", "remove-val-2"),
                ("Another-Header", "another-header-val"),
            ])
            .expected(
                ExpReq::path("/multiple")
                    .headers(&[
                        ("X-Header-Set-1", "header-set-1"),
                        ("X-Header-Set-2", "header-set-2"),
                        ("X-Header-Add-1", "header-add-1"),
                        ("X-Header-Add-2", "add-val-2,header-add-2"),
                        ("X-Header-Add-3", "header-add-3"),
                        ("Another-Header", "another-header-val"),
                    ])
                    .absent(&["X-Header-Remove-1", "X-Header-Remove-2"]),
            )
            .to(V1, INFRA),
        // The filter uses canonicalized header names, the request uses lowercase names.
        req("/case-insensitivity")
            .headers(&[
                ("x-header-set", "original-val-set"),
                ("x-header-add", "original-val-add"),
                ("x-header-remove", "original-val-remove"),
                ("Another-Header", "another-header-val"),
            ])
            .expected(
                ExpReq::path("/case-insensitivity")
                    .headers(&[
                        ("X-Header-Set", "header-set"),
                        ("X-Header-Add", "original-val-add,header-add"),
                        ("Another-Header", "another-header-val"),
                    ])
                    .absent(&["x-header-remove", "X-Header-Remove"]),
            )
            .to(V1, INFRA),
    ]
}

/// HTTPRouteRequestHeaderModifier
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_request_header_modifier() {
    let s = start(&["httproute-request-header-modifier.yaml"]).await;
    run_all(
        &s,
        "HTTPRouteRequestHeaderModifier",
        &request_header_modifier_cases(),
    )
    .await;
}

/// HTTPRouteRedirectHostAndStatus
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_redirect_host_and_status() {
    let s = start(&["httproute-redirect-host-and-status.yaml"]).await;
    run_all(
        &s,
        "HTTPRouteRedirectHostAndStatus",
        &[
            req("/hostname-redirect")
                .unfollow()
                .status(302)
                .redirect(Redirect::host("example.org"))
                .ns(INFRA),
            req("/host-and-status")
                .unfollow()
                .status(301)
                .redirect(Redirect::host("example.org"))
                .ns(INFRA),
        ],
    )
    .await;
}

/// HTTPRouteReferenceGrant
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_reference_grant() {
    let s = start(&["httproute-reference-grant.yaml"]).await;
    run_all(
        &s,
        "HTTPRouteReferenceGrant",
        &[req("/").method("GET").status(200).to("web-backend", WEB)],
    )
    .await;
}

/// HTTPRouteWeight: 70/30/0 over v1, v2, v3, within 5 points, ten attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_weight() {
    let s = start(&["httproute-weight.yaml"]).await;
    let exp = req("/").status(200).ns(INFRA);
    // Assert the request succeeds before the distribution check.
    eventually_consistent(&s, &exp)
        .await
        .unwrap_or_else(|e| panic!("HTTPRouteWeight: {e}\n{}", s.sy.stderr()));
    let weights = [(V1, 0.7), (V2, 0.3), (V3, 0.0)];
    let mut misses = Vec::new();
    // upstream: up to 10 distribution runs, the first that holds passes.
    for attempt in 1..=10 {
        match weighted_distribution(&s, &exp, &weights).await {
            Ok(()) => return,
            Err(e) => misses.push(format!("({attempt}/10) {e}")),
        }
    }
    panic!(
        "HTTPRouteWeight: weighted distribution tests failed:\n{}",
        misses.join("\n")
    );
}

/// HTTPRouteInvalidNonExistentBackendRef (traffic: 500)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_invalid_nonexistent_backend_ref() {
    let s = start(&["httproute-invalid-nonexistent-backendref.yaml"]).await;
    run_all(
        &s,
        "HTTPRouteInvalidNonExistentBackendRef",
        &[req("/").method("GET").status(500)],
    )
    .await;
}

/// HTTPRouteInvalidBackendRefUnknownKind (traffic: 500)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_invalid_backend_ref_unknown_kind() {
    let s = start(&["httproute-invalid-backendref-unknown-kind.yaml"]).await;
    run_all(
        &s,
        "HTTPRouteInvalidBackendRefUnknownKind",
        &[req("/v2").method("GET").status(500)],
    )
    .await;
}

/// HTTPRouteInvalidCrossNamespaceBackendRef (traffic: 500)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_invalid_cross_namespace_backend_ref() {
    let s = start(&["httproute-invalid-cross-namespace-backend-ref.yaml"]).await;
    run_all(
        &s,
        "HTTPRouteInvalidCrossNamespaceBackendRef",
        &[req("/").method("GET").status(500)],
    )
    .await;
}

/// HTTPRouteInvalidReferenceGrant (traffic: 500)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_invalid_reference_grant() {
    let s = start(&["httproute-invalid-reference-grant.yaml"]).await;
    run_all(
        &s,
        "HTTPRouteInvalidReferenceGrant",
        &[req("/").method("GET").status(500)],
    )
    .await;
}

/// HTTPRoutePartiallyInvalidViaInvalidReferenceGrant (traffic: 500 for the ungranted
/// Service, 200 for its granted sibling)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_partially_invalid_via_invalid_reference_grant() {
    let s = start(&["httproute-partially-invalid-via-invalid-reference-grant.yaml"]).await;
    run_all(
        &s,
        "HTTPRoutePartiallyInvalidViaInvalidReferenceGrant",
        &[
            req("/v2").method("GET").status(500),
            req("/").method("GET").status(200).to("app-backend-v1", APP),
        ],
    )
    .await;
}

/// HTTPRouteNoBackendRefs (httproute-omitted-backendrefs.yaml)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_no_backend_refs() {
    let s = start(&["httproute-omitted-backendrefs.yaml"]).await;
    run_all(
        &s,
        "HTTPRouteNoBackendRefs",
        &[
            req("/forward").to(V1, INFRA),
            req("/omitted-no-forward").status(500),
            req("/empty-no-forward").status(500),
        ],
    )
    .await;
}

/// HTTPRouteHTTPSListener: TLS to the port-443 listeners of `same-namespace-with-https-listener`
/// with the certificate of Secret `tls-validity-checks-certificate`, SNI = Host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_https_listener() {
    let s = start(&["httproute-https-listener.yaml"]).await;
    let cert = s
        .secret(INFRA, "tls-validity-checks-certificate")
        .der
        .clone();
    let r = |host: &str| req("/").host(host).https(host, &cert).ns(INFRA);
    run_all(
        &s,
        "HTTPRouteHTTPSListener",
        &[
            r("example.org").status(200).to(V1, INFRA),
            r("unknown-example.org").status(404),
            r("second-example.org").status(200).to(V2, INFRA),
        ],
    )
    .await;
}

/// HTTPRouteServiceTypes: a Service with manual EndpointSlices, a headless one, a headless
/// one with manual EndpointSlices. upstream fills the manual slices with infra-backend-v1's
/// pod addresses at run time; here every pod is 127.0.0.1 on its own port, and a slice has
/// one port list, so the IPv4 slice gets the first pod (the IPv6 slice stays empty: no
/// IPv6 pods).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_service_types() {
    let mut w =
        gateway_conformance::world(&["base/manifests.yaml", "httproute-service-types.yaml"]).await;
    let pod = w
        .pods
        .iter()
        .find(|p| p.namespace == INFRA && p.deployment == V1)
        .map(|p| (p.name.clone(), p.port))
        .expect("an infra-backend-v1 pod");
    for name in [
        "manual-endpointslices-ip4",
        "headless-manual-endpointslices-ip4",
    ] {
        let slice = w
            .objects
            .iter_mut()
            .find(|o| o["kind"] == "EndpointSlice" && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("EndpointSlice {name} in the manifest"));
        slice["endpoints"] = serde_json::json!([{
            "addresses": ["127.0.0.1"],
            "conditions": {"ready": true, "serving": true, "terminating": false},
            "targetRef": {"kind": "Pod", "name": pod.0, "namespace": INFRA},
        }]);
        slice["ports"][0]["port"] = serde_json::json!(pod.1);
    }
    let s = gateway_conformance::start_world(w).await;
    run_all(
        &s,
        "HTTPRouteServiceTypes",
        &[
            req("/headless").status(200).to(V1, INFRA),
            req("/manual-endpointslices").status(200).to(V1, INFRA),
            req("/headless-manual-endpointslices")
                .status(200)
                .to(V1, INFRA),
        ],
    )
    .await;
}

// === extended: query parameter and method matching ===

/// HTTPRouteQueryParamMatching (HTTPRouteQueryParamMatching)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_query_param_matching() {
    let s = start(&["httproute-query-param-matching.yaml"]).await;
    let v = |ver: &str, path: &str| req(path).headers(&[("version", ver)]);
    run_all(
        &s,
        "HTTPRouteQueryParamMatching",
        &[
            req("/?animal=whale").to(V1, INFRA),
            req("/?animal=dolphin").to(V2, INFRA),
            req("/?animal=dolphin&color=blue").to(V3, INFRA),
            req("/?ANIMAL=Whale").to(V3, INFRA),
            req("/?animal=whale&otherparam=irrelevant").to(V1, INFRA),
            req("/?animal=dolphin&color=yellow").to(V2, INFRA),
            req("/?color=blue").status(404),
            req("/?animal=dog").status(404),
            req("/?animal=whaledolphin").status(404),
            req("/").status(404),
            // Combinations with other core matches.
            req("/path1?animal=whale").to(V1, INFRA),
            v("one", "/?animal=whale").to(V2, INFRA),
            v("two", "/path2?animal=whale").to(V3, INFRA),
            // ORed matches match with only one of them in the request.
            req("/path3?animal=shark").to(V1, INFRA),
            v("three", "/path4?animal=kraken").to(V1, INFRA),
            // ANDed match types do not match with a subset.
            req("/?animal=shark").status(404),
            req("/path4?animal=kraken").status(404),
            // Precedence among several matching rules.
            req("/path5?animal=hydra").to(V1, INFRA),
            v("four", "/?animal=hydra").to(V3, INFRA),
        ],
    )
    .await;
}

/// HTTPRouteMethodMatching (HTTPRouteMethodMatching)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_method_matching() {
    let s = start(&["httproute-method-matching.yaml"]).await;
    let m = |method: &str, path: &str| req(path).method(method);
    let vm = |ver: &str, method: &str, path: &str| m(method, path).headers(&[("version", ver)]);
    run_all(
        &s,
        "HTTPRouteMethodMatching",
        &[
            m("POST", "/").to(V1, INFRA),
            m("GET", "/").to(V2, INFRA),
            m("HEAD", "/").status(404),
            m("GET", "/path1").to(V1, INFRA),
            vm("one", "PUT", "/").to(V2, INFRA),
            vm("two", "POST", "/path2").to(V3, INFRA),
            m("PATCH", "/path3").to(V1, INFRA),
            vm("three", "DELETE", "/path4").to(V1, INFRA),
            m("PUT", "/").status(404),
            m("DELETE", "/path4").status(404),
            m("PATCH", "/path5").to(V1, INFRA),
            vm("four", "PATCH", "/").to(V2, INFRA),
        ],
    )
    .await;
}

// === extended: response header modifier ===

/// HTTPRouteResponseHeaderModifier (HTTPResponseHeaderModification). The echo sets the
/// response headers asked for in `X-Echo-Set-Header` (upstream's BackendSetResponseHeaders).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_response_header_modifier() {
    let s = start(&["httproute-response-header-modifier.yaml"]).await;
    run_all(
        &s,
        "HTTPRouteResponseHeaderModifier",
        &[
            req("/set")
                .backend_sets(&[("Some-Other-Header", "val")])
                .response_headers(&[
                    ("Some-Other-Header", "val"),
                    ("X-Header-Set", "set-overwrites-values"),
                ])
                .to(V1, INFRA),
            req("/set")
                .backend_sets(&[
                    ("Some-Other-Header", "val"),
                    ("X-Header-Set", "some-other-value"),
                ])
                .response_headers(&[
                    ("Some-Other-Header", "val"),
                    ("X-Header-Set", "set-overwrites-values"),
                ])
                .to(V1, INFRA),
            req("/add")
                .backend_sets(&[("Some-Other-Header", "val")])
                .response_headers(&[
                    ("Some-Other-Header", "val"),
                    ("X-Header-Add", "add-appends-values"),
                ])
                .to(V1, INFRA),
            req("/add")
                .backend_sets(&[
                    ("Some-Other-Header", "val"),
                    ("X-Header-Add", "some-other-value"),
                ])
                .response_headers(&[
                    ("Some-Other-Header", "val"),
                    ("X-Header-Add", "some-other-value,add-appends-values"),
                ])
                .to(V1, INFRA),
            req("/remove")
                .backend_sets(&[("X-Header-Remove", "val")])
                .response_absent(&["X-Header-Remove"])
                .to(V1, INFRA),
            req("/multiple")
                .backend_sets(&[
                    ("X-Header-Set-2", "set-val-2"),
                    ("X-Header-Add-2", "add-val-2"),
                    ("X-Header-Remove-2", "remove-val-2"),
                    ("Another-Header", "another-header-val"),
                    ("X-Header-Remove-1", "remove-val-1"),
                ])
                .response_headers(&[
                    ("X-Header-Set-1", "header-set-1"),
                    ("X-Header-Set-2", "header-set-2"),
                    ("X-Header-Add-1", "header-add-1"),
                    ("X-Header-Add-2", "add-val-2,header-add-2"),
                    ("X-Header-Add-3", "header-add-3"),
                    ("Another-Header", "another-header-val"),
                ])
                .response_absent(&["X-Header-Remove-1", "X-Header-Remove-2"])
                .to(V1, INFRA),
            // The filter uses canonicalized header names, the backend lowercase ones.
            req("/case-insensitivity")
                .backend_sets(&[
                    ("x-header-set", "original-val-set"),
                    ("x-header-add", "original-val-add"),
                    ("x-header-remove", "original-val-remove"),
                    ("Another-Header", "another-header-val"),
                ])
                .response_headers(&[
                    ("X-Header-Set", "header-set"),
                    ("X-Header-Add", "original-val-add,header-add"),
                    ("X-Lowercase-Add", "lowercase-add"),
                    ("X-Mixedcase-Add-1", "mixedcase-add-1"),
                    ("X-Mixedcase-Add-2", "mixedcase-add-2"),
                    ("X-Uppercase-Add", "uppercase-add"),
                    ("Another-Header", "another-header-val"),
                ])
                .response_absent(&["x-header-remove", "X-Header-Remove"])
                .to(V1, INFRA),
            // Both filters on one rule: the request's headers edited on the way in, the
            // response's on the way out.
            req("/response-and-request-header-modifiers")
                .headers(&[
                    ("X-Header-Remove", "remove-val"),
                    ("X-Header-Add-Append", "append-val-1"),
                ])
                .backend_sets(&[
                    ("X-Header-Set-2", "set-val-2"),
                    ("X-Header-Add-2", "add-val-2"),
                    ("X-Header-Remove-2", "remove-val-2"),
                    ("Another-Header", "another-header-val"),
                ])
                .expected(
                    ExpReq::path("/response-and-request-header-modifiers")
                        .headers(&[
                            ("X-Header-Set", "set-overwrites-values"),
                            ("X-Header-Add", "header-val-1"),
                            ("X-Header-Add-Append", "append-val-1,header-val-2"),
                        ])
                        .absent(&["X-Header-Remove"]),
                )
                .response_headers(&[
                    ("X-Header-Set-1", "header-set-1"),
                    ("X-Header-Set-2", "header-set-2"),
                    ("X-Header-Add-1", "header-add-1"),
                    ("X-Header-Add-2", "add-val-2,header-add-2"),
                    ("Another-Header", "another-header-val"),
                ])
                .response_absent(&["X-Header-Remove-1", "X-Header-Remove-2"])
                .to(V1, INFRA),
        ],
    )
    .await;
}

// === extended: request redirect (port, scheme, path) ===

/// HTTPRouteRedirectPort (HTTPRoutePortRedirect)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_redirect_port() {
    let s = start(&["httproute-redirect-port.yaml"]).await;
    let r = |path: &str, status: u16| req(path).unfollow().status(status).ns(INFRA);
    run_all(
        &s,
        "HTTPRouteRedirectPort",
        &[
            r("/port", 302).redirect(Redirect::default().port("8083")),
            r("/port-and-host", 302).redirect(Redirect::host("example.org").port("8083")),
            r("/port-and-status", 301).redirect(Redirect::default().port("8083")),
            r("/port-and-host-and-status", 302)
                .redirect(Redirect::host("example.org").port("8083")),
        ],
    )
    .await;
}

/// HTTPRouteRedirectScheme (HTTPRouteSchemeRedirect)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_redirect_scheme() {
    let s = start(&["httproute-redirect-scheme.yaml"]).await;
    let r = |path: &str, status: u16| req(path).unfollow().status(status).ns(INFRA);
    run_all(
        &s,
        "HTTPRouteRedirectScheme",
        &[
            r("/scheme", 302).redirect(Redirect::default().scheme("https")),
            r("/scheme-and-host", 302).redirect(Redirect::host("example.org").scheme("https")),
            r("/scheme-and-status", 301).redirect(Redirect::default().scheme("https")),
            r("/scheme-and-host-and-status", 302)
                .redirect(Redirect::host("example.org").scheme("https")),
        ],
    )
    .await;
}

/// HTTPRouteRedirectPath (HTTPRoutePathRedirect)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_redirect_path() {
    let s = start(&["httproute-redirect-path.yaml"]).await;
    let r = |path: &str, status: u16| req(path).unfollow().status(status).ns(INFRA);
    run_all(
        &s,
        "HTTPRouteRedirectPath",
        &[
            r("/original-prefix/lemon", 302)
                .redirect(Redirect::default().path("/replacement-prefix/lemon")),
            r("/full/path/original", 302)
                .redirect(Redirect::default().path("/full-path-replacement")),
            r("/path-and-host", 302)
                .redirect(Redirect::host("example.org").path("/replacement-prefix")),
            r("/path-and-status", 301).redirect(Redirect::default().path("/replacement-prefix")),
            r("/full-path-and-host", 302)
                .redirect(Redirect::host("example.org").path("/replacement-full")),
            r("/full-path-and-status", 301).redirect(Redirect::default().path("/replacement-full")),
        ],
    )
    .await;
}

/// The cases whose listeners have ports of their own (8080, 8090, 8443, ...), which switchyard
/// opens as the manifests say: one at a time, so that two never ask for one port.
static OWN_PORTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// HTTPRouteRedirectPortAndScheme (HTTPRoutePortRedirect, HTTPRouteSchemeRedirect, and
/// GatewayPort8080 for the port-8080 listener's subtests): every subtest of the port-80,
/// port-443 and port-8080 listeners.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_redirect_port_and_scheme() {
    let _ports = OWN_PORTS.lock().await;
    let s = start(&["httproute-redirect-port-and-scheme.yaml"]).await;
    let cert = s
        .secret(INFRA, "tls-validity-checks-certificate")
        .der
        .clone();
    let r = |path: &str| req(path).unfollow().status(302).ns(INFRA);
    let tls = |path: &str| r(path).host("example.org").https("example.org", &cert);
    let to = |scheme: &str| Redirect::host("example.org").scheme(scheme);
    run_all(
        &s,
        "HTTPRouteRedirectPortAndScheme",
        &[
            // http-listener-on-80
            r("/scheme-nil-and-port-nil").redirect(to("http")),
            r("/scheme-nil-and-port-80").redirect(to("http")),
            r("/scheme-nil-and-port-8080").redirect(to("http").port("8080")),
            r("/scheme-https-and-port-nil").redirect(to("https")),
            r("/scheme-https-and-port-443").redirect(to("https")),
            r("/scheme-https-and-port-8443").redirect(to("https").port("8443")),
            // https-listener-on-443
            tls("/scheme-nil-and-port-nil").redirect(to("https")),
            tls("/scheme-nil-and-port-443").redirect(to("https")),
            tls("/scheme-nil-and-port-8443").redirect(to("https").port("8443")),
            tls("/scheme-http-and-port-nil").redirect(to("http")),
            tls("/scheme-http-and-port-80").redirect(to("http")),
            tls("/scheme-http-and-port-8080").redirect(to("http").port("8080")),
            // http-listener-on-8080: a port of its own
            r("/scheme-nil-and-port-nil")
                .port(8080)
                .redirect(to("http").port("8080")),
            r("/scheme-nil-and-port-80").port(8080).redirect(to("http")),
            r("/scheme-https-and-port-nil")
                .port(8080)
                .redirect(to("https")),
        ],
    )
    .await;
}

/// GatewayWithAttachedRoutesWithPort8080 (GatewayPort8080): of Gateway
/// `gateway-with-two-listeners-and-one-attached-route`, listener `http` (80) counts the one
/// route, `http-unattached` (8080) none; both accepted (through the fake API server). Here
/// also: port 80 serves the route, port 8080 (opened for its listener) answers 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_with_attached_routes_with_port_8080() {
    let _ports = OWN_PORTS.lock().await;
    let case = "GatewayWithAttachedRoutesWithPort8080";
    let gw = "gateway-with-two-listeners-and-one-attached-route";
    let s = start(&["gateway-with-attached-routes-with-port-8080.yaml"]).await;
    if s.writes_status() {
        s.listener_attached_must_be(INFRA, gw, "http", 1).await;
        s.listener_attached_must_be(INFRA, gw, "http-unattached", 0)
            .await;
        for listener in ["http", "http-unattached"] {
            s.listener_must_have(INFRA, gw, listener, &LISTENER_OK)
                .await;
        }
    }
    run_all(
        &s,
        case,
        &[
            req("/").to(V1, INFRA),
            req("/").port(8080).status(404),
        ],
    )
    .await;
}

/// HTTPRouteListenerPortMatching (HTTPRouteParentRefPort, GatewayPort8080): routes attached by
/// `parentRef.port` to the listeners on 80, 8080 and 8090 of one Gateway; each port's hosts go
/// to its route, `bar.com` on 8090 (no route of that listener) is 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_listener_port_matching() {
    let _ports = OWN_PORTS.lock().await;
    let s = start(&["httproute-listener-port-matching.yaml"]).await;
    run_all(
        &s,
        "HTTPRouteListenerPortMatching",
        &[
            req("/").host("foo.com").to(V1, INFRA),
            req("/").host("foo.com:8080").port(8080).to(V2, INFRA),
            req("/").host("bar.com:8080").port(8080).to(V2, INFRA),
            req("/").host("foo.com:8090").port(8090).to(V3, INFRA),
            req("/").host("bar.com:8090").port(8090).status(404),
        ],
    )
    .await;
}

// === extended: URL rewrite (host, path) ===

/// HTTPRouteRewriteHost (HTTPRouteHostRewrite)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_rewrite_host() {
    let s = start(&["httproute-rewrite-host.yaml"]).await;
    run_all(
        &s,
        "HTTPRouteRewriteHost",
        &[
            req("/one")
                .host("rewrite.example")
                .expected(ExpReq::path("/one").host("one.example.org"))
                .to(V1, INFRA),
            req("/two")
                .host("rewrite.example")
                .expected(ExpReq::path("/two").host("example.org"))
                .to(V2, INFRA),
            req("/rewrite-host-and-modify-headers")
                .host("rewrite.example")
                .headers(&[
                    ("X-Header-Remove", "remove-val"),
                    ("X-Header-Add-Append", "append-val-1"),
                ])
                .expected(
                    ExpReq::path("/rewrite-host-and-modify-headers")
                        .host("test.example.org")
                        .headers(&[
                            ("X-Header-Add", "header-val-1"),
                            ("X-Header-Add-Append", "append-val-1,header-val-2"),
                            ("X-Header-Set", "set-overwrites-values"),
                        ])
                        .absent(&["X-Header-Remove"]),
                )
                .to(V2, INFRA),
        ],
    )
    .await;
}

/// HTTPRouteRewritePath (HTTPRoutePathRewrite)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_rewrite_path() {
    let s = start(&["httproute-rewrite-path.yaml"]).await;
    let modify = [
        ("X-Header-Remove", "remove-val"),
        ("X-Header-Add-Append", "append-val-1"),
        ("X-Header-Set", "set-val"),
    ];
    let modified = [
        ("X-Header-Add", "header-val-1"),
        ("X-Header-Add-Append", "append-val-1,header-val-2"),
        ("X-Header-Set", "set-overwrites-values"),
    ];
    run_all(
        &s,
        "HTTPRouteRewritePath",
        &[
            req("/prefix/one/two")
                .expected(ExpReq::path("/one/two"))
                .to(V1, INFRA),
            req("/strip-prefix/three")
                .expected(ExpReq::path("/three"))
                .to(V1, INFRA),
            req("/strip-prefix")
                .expected(ExpReq::path("/"))
                .to(V1, INFRA),
            req("/full/one/two")
                .expected(ExpReq::path("/one"))
                .to(V1, INFRA),
            req("/full/rewrite-path-and-modify-headers/test")
                .headers(&modify)
                .expected(
                    ExpReq::path("/test")
                        .headers(&modified)
                        .absent(&["X-Header-Remove"]),
                )
                .to(V1, INFRA),
            req("/prefix/rewrite-path-and-modify-headers/one")
                .headers(&modify)
                .expected(
                    ExpReq::path("/prefix/one")
                        .headers(&modified)
                        .absent(&["X-Header-Remove"]),
                )
                .to(V1, INFRA),
        ],
    )
    .await;
}

// === extended: CORS ===

/// HTTPRouteCORS (HTTPRouteCORS): preflights answered by the filter with the route's fields
/// (the requested method and headers echoed for `*`), simple requests given the origin,
/// other origins given nothing; whitespace in lists ignored, as upstream ignores it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_cors() {
    let s = start(&["httproute-cors.yaml"]).await;
    // A preflight's empty answer: what upstream expects of "the request" that never arrived.
    let preflight = || ExpReq {
        method: "OPTIONS".into(),
        ..Default::default()
    };
    let asked = |origin: &'static str, method: &'static str, headers: bool| {
        let mut h = vec![("Origin", origin), ("access-control-request-method", method)];
        if headers {
            h.push(("access-control-request-headers", "x-header-1, x-header-2"));
        }
        h
    };
    let full = |origin: &str| -> Vec<(String, Vec<String>)> {
        [
            ("access-control-allow-origin", vec![origin]),
            ("access-control-allow-methods", vec!["GET, OPTIONS", "OPTIONS, GET"]),
            (
                "access-control-allow-headers",
                vec!["x-header-1, x-header-2", "x-header-2, x-header-1"],
            ),
            (
                "access-control-expose-headers",
                vec!["x-header-3, x-header-4", "x-header-4, x-header-3"],
            ),
            ("access-control-max-age", vec!["3600"]),
            ("access-control-allow-credentials", vec!["true"]),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.iter().map(|x| x.to_string()).collect()))
        .collect()
    };
    let valid = |e: Exp, fields: Vec<(String, Vec<String>)>, ignore_ws: bool| {
        let refs: Vec<(&str, Vec<&str>)> = fields
            .iter()
            .map(|(k, v)| (k.as_str(), v.iter().map(String::as_str).collect()))
            .collect();
        let refs: Vec<(&str, &[&str])> = refs.iter().map(|(k, v)| (*k, v.as_slice())).collect();
        e.response_valid(&refs, ignore_ws)
    };
    let cases = vec![
        valid(
            req("/cors-1")
                .method("OPTIONS")
                .headers(&asked("https://www.foo.com", "GET", true))
                .expected(preflight())
                .status(200)
                .status(204),
            full("https://www.foo.com"),
            true,
        ),
        valid(
            req("/cors-1")
                .method("OPTIONS")
                .headers(&asked("https://www.bar.com", "GET", true))
                .expected(preflight())
                .status(200),
            full("https://www.bar.com"),
            true,
        ),
        valid(
            req("/cors-1")
                .method("OPTIONS")
                .headers(&asked("https://xpto.www.bar.com", "GET", true))
                .expected(preflight())
                .status(200),
            full("https://xpto.www.bar.com"),
            true,
        ),
        req("/cors-1")
            .method("OPTIONS")
            .headers(&asked("https://foobar.com", "GET", false))
            .expected(preflight())
            .status(200)
            .status(204)
            .status(403)
            .response_absent(&["access-control-allow-origin"]),
        req("/cors-1")
            .headers(&asked("https://www.foo.com", "GET", true))
            .ns(INFRA)
            .status(200)
            .status(204)
            .response_headers(&[("access-control-allow-origin", "https://www.foo.com")]),
        req("/cors-1")
            .headers(&asked("https://www.bar.com", "GET", true))
            .ns(INFRA)
            .status(200)
            .status(204)
            .response_headers(&[("access-control-allow-origin", "https://www.bar.com")]),
        req("/cors-1")
            .headers(&asked("https://foobar.com", "GET", false))
            .ns(INFRA)
            .response_absent(&["access-control-allow-origin"]),
        req("/cors-2")
            .method("OPTIONS")
            .headers(&asked("https://www.foo.com", "POST", false))
            .expected(preflight())
            .status(200)
            .status(204)
            .response_valid(&[("access-control-allow-methods", &["POST", "*"])], false)
            .response_headers(&[("access-control-allow-origin", "https://www.foo.com")])
            .response_absent(&["access-control-allow-credentials"]),
        req("/cors-wildcard-origin")
            .method("OPTIONS")
            .headers(&asked("https://foobar.com", "PUT", false))
            .expected(preflight())
            .status(200)
            .status(204)
            .response_valid(
                &[
                    ("access-control-allow-origin", &["https://foobar.com", "*"]),
                    ("access-control-allow-methods", &["PUT"]),
                ],
                false,
            )
            .response_absent(&["access-control-allow-credentials"]),
        req("/cors-wildcard-origin")
            .method("OPTIONS")
            .headers(&asked("https://foobar.com:12345", "PUT", false))
            .expected(preflight())
            .status(200)
            .status(204)
            .response_valid(
                &[
                    ("access-control-allow-origin", &["https://foobar.com:12345", "*"]),
                    ("access-control-allow-methods", &["PUT"]),
                ],
                false,
            )
            .response_absent(&["access-control-allow-credentials"]),
        req("/cors-wildcard-origin")
            .method("PUT")
            .headers(&[("Origin", "https://foobar.com:12345")])
            .ns(INFRA)
            .response_valid(
                &[("access-control-allow-origin", &["https://foobar.com:12345", "*"])],
                false,
            ),
        req("/cors-wildcard-origin")
            .method("PUT")
            .headers(&[("Origin", "https://foobar.com")])
            .ns(INFRA)
            .status(200)
            .status(204)
            .response_valid(
                &[("access-control-allow-origin", &["https://foobar.com", "*"])],
                false,
            )
            .response_absent(&["access-control-allow-credentials"]),
        req("/cors-wildcard-methods-headers")
            .method("OPTIONS")
            .headers(&asked("https://other.foo.com", "PUT", true))
            .expected(preflight())
            .status(200)
            .response_valid(
                &[
                    ("access-control-allow-origin", &["https://other.foo.com"]),
                    ("access-control-allow-methods", &["PUT"]),
                    (
                        "access-control-allow-headers",
                        &["x-header-1, x-header-2", "x-header-2, x-header-1"],
                    ),
                    ("access-control-allow-credentials", &["true"]),
                ],
                true,
            ),
        req("/cors-wildcard-methods-headers-unauth")
            .method("OPTIONS")
            .headers(&asked("https://other.foo.com", "PUT", true))
            .expected(preflight())
            .status(200)
            .response_valid(
                &[
                    ("access-control-allow-origin", &["https://other.foo.com", "*"]),
                    ("access-control-allow-methods", &["PUT", "*"]),
                    (
                        "access-control-allow-headers",
                        &["x-header-1, x-header-2", "x-header-2, x-header-1", "*"],
                    ),
                ],
                true,
            )
            .response_absent(&["access-control-allow-credentials"]),
        req("/cors-wildcard-methods-headers")
            .headers(&[("Origin", "https://other.foo.com"), ("Authorization", "Bearer test")])
            .ns(INFRA)
            .status(200)
            .response_valid(
                &[
                    ("access-control-allow-origin", &["https://other.foo.com"]),
                    ("access-control-allow-credentials", &["true"]),
                ],
                false,
            ),
        req("/cors-wildcard-methods-headers-unauth")
            .headers(&[("Origin", "https://other.foo.com"), ("Authorization", "Bearer test")])
            .ns(INFRA)
            .status(200)
            .response_valid(&[("access-control-allow-origin", &["https://other.foo.com"])], false)
            .response_absent(&["access-control-allow-credentials"]),
    ];
    run_all(&s, "HTTPRouteCORS", &cases).await;
}

// === extended: request mirror ===

/// HTTPRouteRequestMirror (HTTPRouteRequestMirror)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_request_mirror() {
    let s = start(&["httproute-request-mirror.yaml"]).await;
    run_all(
        &s,
        "HTTPRouteRequestMirror",
        &[
            req("/mirror")
                .expected(ExpReq::path("/mirror"))
                .to(V1, INFRA)
                .mirrored_to(INFRA, V2),
            req("/mirror-and-modify-headers")
                .headers(&[
                    ("X-Header-Remove", "remove-val"),
                    ("X-Header-Add-Append", "append-val-1"),
                ])
                .expected(
                    ExpReq::path("/mirror-and-modify-headers")
                        .headers(&[
                            ("X-Header-Add", "header-val-1"),
                            ("X-Header-Add-Append", "append-val-1,header-val-2"),
                            ("X-Header-Set", "set-overwrites-values"),
                        ])
                        .absent(&["X-Header-Remove"]),
                )
                .to(V1, INFRA)
                .mirrored_to(INFRA, V2),
        ],
    )
    .await;
}

/// HTTPRouteRequestMultipleMirrors (HTTPRouteRequestMultipleMirrors)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_request_multiple_mirrors() {
    let s = start(&["httproute-request-multiple-mirrors.yaml"]).await;
    run_all(
        &s,
        "HTTPRouteRequestMultipleMirrors",
        &[
            req("/multi-mirror")
                .expected(ExpReq::path("/multi-mirror"))
                .to(V1, INFRA)
                .mirrored_to(INFRA, V2)
                .mirrored_to(INFRA, V3),
            req("/multi-mirror-and-modify-request-headers")
                .headers(&[
                    ("X-Header-Remove", "remove-val"),
                    ("X-Header-Add-Append", "append-val-1"),
                ])
                .expected(
                    ExpReq::path("/multi-mirror-and-modify-request-headers")
                        .headers(&[
                            ("X-Header-Add", "header-val-1"),
                            ("X-Header-Add-Append", "append-val-1,header-val-2"),
                            ("X-Header-Set", "set-overwrites-values"),
                        ])
                        .absent(&["X-Header-Remove"]),
                )
                .to(V1, INFRA)
                .mirrored_to(INFRA, V2)
                .mirrored_to(INFRA, V3),
        ],
    )
    .await;
}

// === extended: backend request header modifier (filters on backendRefs) ===

/// HTTPRouteBackendRequestHeaderModifier (HTTPRouteBackendRequestHeaderModification): the
/// request header modifier's rules with the filters on the backendRefs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_backend_request_header_modifier() {
    let s = start(&["httproute-request-header-modifier-backend.yaml"]).await;
    run_all(
        &s,
        "HTTPRouteBackendRequestHeaderModifier",
        &request_header_modifier_cases(),
    )
    .await;
}

/// HTTPRouteRequestHeaderModifierBackendWeights (HTTPRouteBackendRequestHeaderModification):
/// two weighted backendRefs, each with a filter setting `Backend: <its name>`; after the
/// request succeeds consistently, 100 requests must each carry exactly one `Backend` header,
/// naming the backend whose pod answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_request_header_modifier_backend_weights() {
    let s = start(&["httproute-request-header-modifier-backend-weights.yaml"]).await;
    let exp = req("/").status(200).ns(INFRA);
    eventually_consistent(&s, &exp).await.unwrap_or_else(|e| {
        panic!(
            "HTTPRouteRequestHeaderModifierBackendWeights: {e}\n{}",
            s.sy.stderr()
        )
    });
    for i in 0..100 {
        let (creq, _) = gateway_conformance::expect::round_trip(&s, &exp)
            .await
            .unwrap_or_else(|e| panic!("request #{i}: failed to roundtrip request: {e}"));
        let backends = creq.headers.get("Backend").cloned().unwrap_or_default();
        assert_eq!(
            backends.len(),
            1,
            "request #{i}: expected a single 'Backend' header to have been set, got {backends:?}"
        );
        assert!(
            creq.pod.starts_with(&backends[0]),
            "request #{i}: expected the backendRef to have set the correct headers and sent the \
             request to the correct pod, got {:?}, want {:?}",
            creq.pod,
            backends[0]
        );
    }
}

// === extended: timeouts ===

/// HTTPRouteTimeoutRequest (HTTPRouteRequestTimeout)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_timeout_request() {
    let s = start(&["httproute-timeout-request.yaml"]).await;
    run_all(
        &s,
        "HTTPRouteTimeoutRequest",
        &[
            req("/request-timeout").status(200).ns(INFRA),
            req("/request-timeout?delay=1s").status(504).ns(INFRA),
            req("/disable-request-timeout?delay=1s")
                .status(200)
                .ns(INFRA),
        ],
    )
    .await;
}

/// HTTPRouteTimeoutBackendRequest (HTTPRouteBackendTimeout)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_timeout_backend_request() {
    let s = start(&["httproute-timeout-backend-request.yaml"]).await;
    run_all(
        &s,
        "HTTPRouteTimeoutBackendRequest",
        &[
            req("/backend-timeout").status(200).ns(INFRA),
            req("/backend-timeout?delay=1s").status(504).ns(INFRA),
        ],
    )
    .await;
}

// === extended: frontend client-certificate validation (spec.tls.frontend) ===
//
// upstream sends each request to its Gateway's address: here too (`--gateway-addresses`, one
// address for each of the base manifests' four Gateways and the case's), so the case's
// host-less HTTPS listener does not meet the base Gateway `same-namespace-with-https-listener`'s
// on one address (two listeners asking differently of clients for one hostname: the younger
// would not be served). A listener on port 443 is served on switchyard's TLS port
// (`--gateway-https-port 443`); one on 8443, 7443 or 6443 on that port of its own, which
// switchyard opens on the Gateway's address as the manifest says.

/// One address for each Gateway of the base manifests and the case's.
const CLIENT_CERT_POOL: [&str; 5] = [
    "127.0.0.2",
    "127.0.0.3",
    "127.0.0.4",
    "127.0.0.5",
    "127.0.0.6",
];

/// A listener switchyard serves: ResolvedRefs, Accepted and Programmed True (any reason).
const LISTENER_OK: [gateway_conformance::Cond<'static>; 3] = [
    ("ResolvedRefs", "True", ""),
    ("Accepted", "True", ""),
    ("Programmed", "True", ""),
];


/// GatewayFrontendClientCertificateValidation: Gateway `client-validation-default` verifies
/// client certificates on its HTTPS listeners against ConfigMap
/// `tls-validity-checks-ca-certificate` (`default`), on port 8443 against
/// `tls-validity-checks-per-port-ca-certificate` (`perPort`). Ported whole: the Gateway and
/// routes accepted with ResolvedRefs; "Validate default configuration": on port 443 the client
/// certificate of the default CA gets infra-backend-v1 (the certificate asked for in the
/// handshake), the per-port CA's gets no response; "Validate per port configuration": on port
/// 8443 (`second-example.org`) the per-port CA's gets infra-backend-v2, the default CA's no
/// response. Added here: no client certificate gets no response on either port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_frontend_client_certificate_validation() {
    let _ports = OWN_PORTS.lock().await;
    let case = "GatewayFrontendClientCertificateValidation";
    let s = start_addressed(
        &["gateway-with-clientcertificate-validation.yaml"],
        &CLIENT_CERT_POOL,
    )
    .await;
    let gw = s.gateway_address(INFRA, "client-validation-default").await;
    if s.writes_status() {
        let gw_name = "client-validation-default";
        s.gateway_must_have(INFRA, gw_name, &[("Accepted", "True", "")])
            .await;
        for listener in ["https", "https-with-hostname"] {
            s.listener_must_have(INFRA, gw_name, listener, &LISTENER_OK)
                .await;
        }
        for route in [
            "client-certificate-validation-https-test",
            "client-certificate-validation-https-test-no-hostname",
        ] {
            s.route_parent_must_have(
                INFRA,
                route,
                gw_name,
                &[("Accepted", "True", ""), ("ResolvedRefs", "True", "")],
            )
            .await;
        }
    } else {
        let log = s.sy.stderr();
        assert!(
            !log.lines().any(|l| l.contains("client-validation-default") && l.contains("WARN")),
            "{case}: {log}"
        );
    }
    let server = s
        .secret(INFRA, "tls-validity-checks-certificate")
        .der
        .clone();
    let default_client = s.secret(INFRA, "tls-validity-checks-client-certificate");
    let per_port_client = s.secret(INFRA, "tls-validity-checks-per-port-client-certificate");
    let r = || req("/").host("example.org").https("example.org", &server).at(gw);
    let second = || {
        req("/")
            .host("second-example.org")
            .https("second-example.org", &server)
            .at(gw)
            .port(8443)
    };
    run_all(
        &s,
        case,
        &[
            r().client_cert(default_client).status(200).to(V1, INFRA),
            second().client_cert(per_port_client).status(200).to(V2, INFRA),
        ],
    )
    .await;
    run_all_fail(
        &s,
        case,
        &[
            r().client_cert(per_port_client).ns(INFRA),
            second().client_cert(default_client).ns(INFRA),
            // switchyard's own: no certificate at all.
            r().ns(INFRA),
            second().ns(INFRA),
        ],
    )
    .await;
}

/// GatewayFrontendClientCertificateValidationInsecureFallback: Gateway
/// `client-validation-insecure-fallback`, as GatewayFrontendClientCertificateValidation with
/// `mode: AllowInsecureFallback`. Ported whole: the routes accepted with ResolvedRefs, the
/// Gateway's `InsecureFrontendValidationMode: True` (`ConfigurationChanged`), and on port 443
/// (`example.org`, infra-backend-v1) and port 8443 (`second-example.org`, infra-backend-v2)
/// the default CA's client certificate, the per-port CA's and none each get their backend (a
/// certificate offered must have been asked for).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_frontend_client_certificate_validation_insecure_fallback() {
    let _ports = OWN_PORTS.lock().await;
    let case = "GatewayFrontendClientCertificateValidationInsecureFallback";
    let gw_name = "client-validation-insecure-fallback";
    let s = start_addressed(
        &["gateway-with-clientcertificate-validation-insecure-fallback.yaml"],
        &CLIENT_CERT_POOL,
    )
    .await;
    let gw = s.gateway_address(INFRA, gw_name).await;
    if s.writes_status() {
        s.gateway_must_have(
            INFRA,
            gw_name,
            &[
                ("Accepted", "True", ""),
                (
                    "InsecureFrontendValidationMode",
                    "True",
                    "ConfigurationChanged",
                ),
            ],
        )
        .await;
        for listener in ["https", "https-with-hostname"] {
            s.listener_must_have(INFRA, gw_name, listener, &LISTENER_OK)
                .await;
        }
        for route in [
            "client-cert-validation-insecure-fallback-test",
            "client-cert-validation-insecure-fallback-test-no-hostname",
        ] {
            s.route_parent_must_have(
                INFRA,
                route,
                gw_name,
                &[("Accepted", "True", ""), ("ResolvedRefs", "True", "")],
            )
            .await;
        }
    } else {
        must_warn(&s, case, &[gw_name, "AllowInsecureFallback"]).await;
    }
    let server = s
        .secret(INFRA, "tls-validity-checks-certificate")
        .der
        .clone();
    let default_client = s.secret(INFRA, "tls-validity-checks-client-certificate");
    let per_port_client = s.secret(INFRA, "tls-validity-checks-per-port-client-certificate");
    let r = || req("/").host("example.org").https("example.org", &server).at(gw);
    let second = || {
        req("/")
            .host("second-example.org")
            .https("second-example.org", &server)
            .at(gw)
            .port(8443)
    };
    run_all(
        &s,
        case,
        &[
            r().client_cert(default_client).status(200).to(V1, INFRA),
            r().client_cert(per_port_client).status(200).to(V1, INFRA),
            r().status(200).to(V1, INFRA),
            second().client_cert(per_port_client).status(200).to(V2, INFRA),
            second().client_cert(default_client).status(200).to(V2, INFRA),
            second().status(200).to(V2, INFRA),
        ],
    )
    .await;
}

/// GatewayFrontendInvalidClientCertificateValidation (upstream's ShortName:
/// GatewayInvalidFrontendClientCertificateValidation): Gateway
/// `gateway-with-invalid-client-cert-validation`, status only upstream. Ported whole: listener
/// `https` (port 443, `default` CA valid) ResolvedRefs, Accepted and Programmed True;
/// `https-unresolved` (7443, `InvalidCACertificateRef`), `https-invalid-kind` (8443,
/// `InvalidCACertificateKind`) and `https-grant-missing` (6443, `RefNotPermitted`) each
/// ResolvedRefs False with that reason, Accepted False (`NoValidCACertificate`), Programmed
/// False. Here also served: on port 443 the default CA's client certificate gets an answer
/// (404: the manifest's route names a parent, `client-validation-invalid`, that does not
/// exist), none gets no response; the three refused listeners' ports are not opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_frontend_invalid_client_certificate_validation() {
    let _ports = OWN_PORTS.lock().await;
    let case = "GatewayFrontendInvalidClientCertificateValidation";
    let gw_name = "gateway-with-invalid-client-cert-validation";
    let s = start_addressed(
        &["gateway-with-invalid-clientcertificate-validation.yaml"],
        &CLIENT_CERT_POOL,
    )
    .await;
    let gw = s.gateway_address(INFRA, gw_name).await;
    let refused = [
        ("https-unresolved", "InvalidCACertificateRef", 7443),
        ("https-invalid-kind", "InvalidCACertificateKind", 8443),
        ("https-grant-missing", "RefNotPermitted", 6443),
    ];
    if s.writes_status() {
        s.listener_must_have(INFRA, gw_name, "https", &LISTENER_OK)
            .await;
        for (listener, reason, _) in refused {
            s.listener_must_have(
                INFRA,
                gw_name,
                listener,
                &[
                    ("ResolvedRefs", "False", reason),
                    ("Accepted", "False", "NoValidCACertificate"),
                    ("Programmed", "False", ""),
                ],
            )
            .await;
        }
    } else {
        for (listener, _, _) in refused {
            must_warn(&s, case, &[gw_name, listener, "NotServed", "no caCertificateRef"]).await;
        }
    }
    let server = s
        .secret(INFRA, "tls-validity-checks-certificate")
        .der
        .clone();
    let default_client = s.secret(INFRA, "tls-validity-checks-client-certificate");
    let r = || req("/").host("example.org").https("example.org", &server).at(gw);
    run_all(
        &s,
        case,
        &[r().client_cert(default_client).status(404)],
    )
    .await;
    run_all_fail(&s, case, &[r().ns(INFRA)]).await;
    // A listener not served has no port: nothing listens there.
    for (listener, _, port) in refused {
        let open = tokio::net::TcpStream::connect((gw, port)).await.is_ok();
        assert!(!open, "{case}: port {port} of {listener} is open");
    }
}

/// GatewayInvalidDefaultFrontendClientCertificateValidation (upstream's ShortName:
/// GatewayFrontendInvalidDefaultClientCertificateValidation): Gateway
/// `invalid-default-client-validation-config`, whose `default` CA ref names a ConfigMap that
/// does not exist (its `perPort` entry is for port 80, an HTTP listener, which client
/// validation never affects). Ported whole: listener `http` ResolvedRefs, Accepted and
/// Programmed True and on port 80 `example.org` gets infra-backend-v1; listener `https`
/// ResolvedRefs False (`InvalidCACertificateRef`), Accepted False (`NoValidCACertificate`),
/// Programmed False, and on port 443 a request without a client certificate gets no response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_invalid_default_frontend_client_certificate_validation() {
    let case = "GatewayInvalidDefaultFrontendClientCertificateValidation";
    let gw_name = "invalid-default-client-validation-config";
    let s = start_addressed(
        &["gateway-invalid-default-frontend-client-certificate-validation.yaml"],
        &CLIENT_CERT_POOL,
    )
    .await;
    let gw = s.gateway_address(INFRA, gw_name).await;
    if s.writes_status() {
        s.listener_must_have(INFRA, gw_name, "http", &LISTENER_OK)
            .await;
        s.listener_must_have(
            INFRA,
            gw_name,
            "https",
            &[
                ("ResolvedRefs", "False", "InvalidCACertificateRef"),
                ("Accepted", "False", "NoValidCACertificate"),
                ("Programmed", "False", ""),
            ],
        )
        .await;
    } else {
        must_warn(&s, case, &[gw_name, "https", "does-not-exist"]).await;
    }
    run_all(
        &s,
        case,
        &[req("/").host("example.org").at(gw).status(200).to(V1, INFRA)],
    )
    .await;
    let server = s
        .secret(INFRA, "tls-validity-checks-certificate")
        .der
        .clone();
    run_all_fail(
        &s,
        case,
        &[req("/")
            .host("example.org")
            .https("example.org", &server)
            .at(gw)
            .ns(INFRA)],
    )
    .await;
}

/// Some line of switchyard's stderr holds every one of `parts` (within 10 s).
async fn must_warn(s: &gateway_conformance::Suite, case: &str, parts: &[&str]) {
    let found = common::eventually(std::time::Duration::from_secs(10), || async {
        s.sy.stderr()
            .lines()
            .any(|l| parts.iter().all(|p| l.contains(p)))
    })
    .await;
    assert!(
        found,
        "{case}: no warning with {parts:?}:\n{}",
        s.sy.stderr()
    );
}

// === the harness itself ===

/// The harness against a route switchyard already serves (an Ingress to infra-backend-v1):
/// the comparison accepts the right answer and refuses a wrong backend, namespace, path,
/// header or status, so that a failing case above is switchyard's, not the harness's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harness_checks_what_upstream_checks() {
    let mut w = gateway_conformance::world(&["base/manifests.yaml"]).await;
    // Without the base Gateways: their host-less port-80 and port-443 listeners would own
    // every host of those ports, the Ingress's too.
    w.objects.retain(|o| o["kind"] != "Gateway");
    w.objects.push(common::ingress_class("switchyard", false));
    w.objects.push(serde_json::json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {
            "name": "harness",
            "namespace": INFRA,
            "annotations": {"switchyard.io/ssl-redirect": "false"},
        },
        "spec": {
            "ingressClassName": "switchyard",
            "tls": [{"hosts": ["harness.example"], "secretName": "tls-validity-checks-certificate"}],
            "rules": [{"http": {"paths": [{
                "path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": V1, "port": {"number": 8080}}},
            }]}}],
        },
    }));
    let s = gateway_conformance::start_world(w).await;
    let ok = req("/echo?x=1")
        .host("harness.example")
        .headers(&[("X-Sent", "a")])
        .backend_sets(&[("X-Back", "b")])
        .response_headers(&[("X-Back", "b")])
        .response_absent(&["X-Not-Set"])
        .to(V1, INFRA);
    // The same over TLS: the Secret's certificate for the SNI, then the same checks.
    let cert = s
        .secret(INFRA, "tls-validity-checks-certificate")
        .der
        .clone();
    let tls = ok.clone().https("harness.example", &cert);
    run_all(&s, "harness", &[ok.clone(), tls]).await;
    let wrong_cert = ok.clone().https("harness.example", b"another certificate");
    assert!(
        gateway_conformance::expect::once(&s, &wrong_cert)
            .await
            .is_err()
    );
    let once = gateway_conformance::expect::once;
    let wrong = [
        ("backend", ok.clone().to(V2, INFRA)),
        ("namespace", ok.clone().to(V1, WEB)),
        ("status", ok.clone().status(404)),
        (
            "request header",
            ok.clone()
                .expected(ExpReq::path("/echo?x=1").headers(&[("X-Sent", "b")])),
        ),
        (
            "absent request header",
            ok.clone()
                .expected(ExpReq::path("/echo?x=1").absent(&["X-Sent"])),
        ),
        ("path", ok.clone().expected(ExpReq::path("/echo"))),
        (
            "host",
            ok.clone().expected(ExpReq::path("/echo?x=1").host("other")),
        ),
        (
            "response header",
            ok.clone().response_headers(&[("X-Back", "c")]),
        ),
        (
            "absent response header",
            ok.clone().response_absent(&["X-Back"]),
        ),
    ];
    for (what, exp) in wrong {
        assert!(once(&s, &exp).await.is_err(), "a wrong {what} was accepted");
    }
    // The mirror check finds the request the pod saw, and only that one.
    let mirrored = ok.clone().mirrored_to(INFRA, V1);
    gateway_conformance::expect::expect_mirrored(&s, &mirrored)
        .await
        .unwrap();
    let unseen = req("/never-sent").mirrored_to(INFRA, V1);
    assert!(
        gateway_conformance::expect::expect_mirrored(&s, &unseen)
            .await
            .is_err()
    );
}

/// upstream's redirect rules as the harness applies them: Location parsed as Go's URL parser
/// reads it, the port left out or the scheme's default when none is expected, otherwise equal.
#[test]
fn harness_redirect_rules() {
    use gateway_conformance::expect::{CapturedRequest, CapturedResponse, compare, parse_location};
    let got = |loc: &str| CapturedResponse {
        status: 302,
        headers: Default::default(),
        redirect: Some(parse_location(loc, "127.0.0.1").unwrap()),
        body: String::new(),
    };
    let none = CapturedRequest::default();
    let exp = req("/a?q=1").unfollow().status(302);
    let to_https = exp
        .clone()
        .redirect(Redirect::host("example.org").scheme("https"));
    assert!(compare(&to_https, &none, &got("https://example.org/a")).is_ok());
    assert!(compare(&to_https, &none, &got("https://example.org:443/a")).is_ok());
    assert!(compare(&to_https, &none, &got("https://example.org:8443/a")).is_err());
    assert!(compare(&to_https, &none, &got("http://example.org/a")).is_err());
    assert!(compare(&to_https, &none, &got("https://example.org/b")).is_err());
    let port = exp.clone().redirect(Redirect::default().port("8083"));
    assert!(compare(&port, &none, &got("http://127.0.0.1:8083/a?q=1")).is_ok());
    assert!(compare(&port, &none, &got("http://127.0.0.1/a")).is_err());
    // A relative Location resolves against the request's host.
    let same = exp.clone().redirect(Redirect::default().path("/b"));
    assert!(compare(&same, &none, &got("/b")).is_ok());
    assert_eq!(
        gateway_conformance::echo::go_duration("1m30s"),
        Some(std::time::Duration::from_secs(90))
    );
    assert_eq!(gateway_conformance::echo::go_duration("1x"), None);
}

// === extended: listener isolation ===

/// The expectations of GatewayHTTPListenerIsolation, for both of its Gateways: each request
/// answered by the most specific listener's routes alone.
fn isolation_cases() -> Vec<Exp> {
    let r = |host: &str, path: &str| req(path).host(host);
    vec![
        r("bar.com", "/empty-hostname").to(V1, INFRA),
        r("bar.com", "/wildcard-example-com").status(404),
        r("bar.com", "/wildcard-foo-example-com").status(404),
        r("bar.com", "/abc-foo-example-com").status(404),
        r("bar.example.com", "/empty-hostname").status(404),
        r("bar.example.com", "/wildcard-example-com").to(V1, INFRA),
        r("bar.example.com", "/wildcard-foo-example-com").status(404),
        r("bar.example.com", "/abc-foo-example-com").status(404),
        r("bar.foo.example.com", "/empty-hostname").status(404),
        r("bar.foo.example.com", "/wildcard-example-com").status(404),
        r("bar.foo.example.com", "/wildcard-foo-example-com").to(V1, INFRA),
        r("bar.foo.example.com", "/abc-foo-example-com").status(404),
        r("abc.foo.example.com", "/empty-hostname").status(404),
        r("abc.foo.example.com", "/wildcard-example-com").status(404),
        r("abc.foo.example.com", "/wildcard-foo-example-com").status(404),
        r("abc.foo.example.com", "/abc-foo-example-com").to(V1, INFRA),
    ]
}

/// GatewayHTTPListenerIsolation, "hostnames are configured only in listeners".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_http_listener_isolation() {
    let s = start(&["gateway-http-listener-isolation.yaml"]).await;
    run_all(&s, "GatewayHTTPListenerIsolation", &isolation_cases()).await;
}

/// GatewayHTTPListenerIsolation, "intersecting hostnames are configured in listeners and
/// HTTPRoutes".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_http_listener_isolation_with_hostname_intersection() {
    let s = start(&["gateway-http-listener-isolation-with-hostname-intersection.yaml"]).await;
    run_all(
        &s,
        "GatewayHTTPListenerIsolation/intersection",
        &isolation_cases(),
    )
    .await;
}

// === switchyard's own: RegularExpression matches (implementation-specific) ===

/// No upstream case of v1.6.1 sends traffic to `RegularExpression` matches (their support is
/// implementation-specific), so this route is switchyard's: regex paths after exact and
/// prefix paths (the longest pattern first), whole-value header and query patterns, and a
/// rule whose pattern does not compile dropped while the others serve.
const REGEX_ROUTE: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: regex-matching, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: RegularExpression, value: "/v[0-9]+/users/[a-z]+"}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: RegularExpression, value: "/v[0-9]+/.*"}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /v3}}, {path: {type: Exact, value: /v9/users/exact}}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /hdr}, headers: [{type: RegularExpression, name: Version, value: "v[0-9]+"}]}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /hdr}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /q}, queryParams: [{type: RegularExpression, name: id, value: "[0-9]{1,3}"}]}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches: [{path: {type: RegularExpression, value: "/bad/(x"}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
"#;

/// RegularExpression path, header and query-parameter matches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switchyard_regular_expression_matching() {
    let mut w = gateway_conformance::world(&["base/manifests.yaml"]).await;
    w.objects
        .push(serde_yaml_ng::from_str(REGEX_ROUTE).expect("route"));
    let s = gateway_conformance::start_world(w).await;
    let v = |ver: &str| req("/hdr").headers(&[("Version", ver)]);
    run_all(
        &s,
        "RegularExpressionMatching",
        &[
            req("/v1/users/bob").to(V1, INFRA),
            // Only the shorter pattern matches these.
            req("/v1/users/bob7").to(V2, INFRA),
            req("/v12/orders").to(V2, INFRA),
            // An exact path or a prefix beats every pattern.
            req("/v3/users/bob").to(V3, INFRA),
            req("/v9/users/exact").to(V3, INFRA),
            // The whole path must match; the query is not part of it.
            req("/v1/users/bob?x=1").to(V1, INFRA),
            req("/api/v1/users/bob").status(404),
            req("/v1").status(404),
            // Header and query patterns match whole values.
            v("v2").to(V1, INFRA),
            v("v2x").to(V2, INFRA),
            req("/hdr").to(V2, INFRA),
            req("/q?id=42").to(V3, INFRA),
            req("/q?a=b&id=999").to(V3, INFRA),
            req("/q?id=1234").status(404),
            req("/q").status(404),
            // The rule whose pattern does not compile is dropped; the others serve.
            req("/bad/x").status(404),
        ],
    )
    .await;
}

// === extended: BackendTLSPolicy ===
//
// The base manifests' `tls-backend` answers HTTPS with `tls-checks-certificate`, signed by the
// CA of ConfigMap `tls-checks-ca-certificate` for `abc.example.com`, `other.example.com` and
// `spiffe://abc.example.com/test-identity`; `mismatch-ca-certificate` is a CA that signed
// nothing (both made as upstream's `Setup` makes them). The pod reports the server name it
// was reached with (echo-basic's `tls.serverName`), which upstream's `Request.SNI` checks.
// Policy status is written only through the fake API server: offline, the warnings stand for
// it where a policy is refused.

/// upstream's `acceptedCond` and `resolvedRefsCond` of a policy that applies.
const POLICY_OK: [gateway_conformance::Cond<'static>; 2] = [
    ("Accepted", "True", "Accepted"),
    ("ResolvedRefs", "True", "ResolvedRefs"),
];

/// upstream's `GatewayAndRoutesMustBeAccepted` and `HTTPRouteMustHaveResolvedRefsConditionsTrue`
/// for HTTPRoute `route` of Gateway `gw` (the infra namespace); through the fake API server.
async fn gateway_and_route_accepted(s: &gateway_conformance::Suite, gw: &str, route: &str) {
    s.gateway_must_have(INFRA, gw, &[("Accepted", "True", "")])
        .await;
    s.route_parent_must_have(
        INFRA,
        route,
        gw,
        &[("Accepted", "True", ""), ("ResolvedRefs", "True", "")],
    )
    .await;
}

/// BackendTLSPolicy: Service `backendtlspolicy-test` (policy `normative-test`: the setup CA,
/// `abc.example.com`) is reached over TLS with that server name from an HTTP listener and,
/// re-encrypted, from an HTTPS one; the policies `host-mismatch` (`mismatch.example.com`) and
/// `cert-mismatch` (a CA that signed nothing) are accepted with their references resolved,
/// and their Services fail. upstream's host-mismatch request is for `abc.example.org`, a host
/// the route does not take (its 404 satisfies the check without reaching the policy); beyond
/// upstream, the same path for `abc.example.com` must get switchyard's 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policy() {
    let case = "BackendTLSPolicy";
    let s = start(&["backendtlspolicy.yaml"]).await;
    let https_gw = "same-namespace-with-https-listener";
    if s.writes_status() {
        gateway_and_route_accepted(&s, https_gw, "backendtlspolicy-reencrypt").await;
        s.policy_must_have(INFRA, "normative-test", https_gw, &POLICY_OK)
            .await;
        gateway_and_route_accepted(&s, "same-namespace", "backendtlspolicy").await;
        for policy in ["normative-test", "host-mismatch", "cert-mismatch"] {
            s.policy_must_have(INFRA, policy, "same-namespace", &POLICY_OK)
                .await;
        }
    }
    let frontend = s
        .secret(INFRA, "tls-validity-checks-certificate")
        .der
        .clone();
    run_all(
        &s,
        case,
        &[
            // "Re-encrypt HTTPS request sent to Service with valid BackendTLSPolicy should
            // succeed"
            req("/backendtlspolicy")
                .host("https-listener.org")
                .https("https-listener.org", &frontend)
                .expected(ExpReq::path("/backendtlspolicy").sni("abc.example.com"))
                .status(200)
                .ns(INFRA),
            // "HTTP request sent to Service with valid BackendTLSPolicy should succeed"
            req("/backendtlspolicy")
                .host("abc.example.com")
                .sni("abc.example.com")
                .status(200)
                .ns(INFRA),
            // switchyard's own: the host-mismatch policy's Service for the route's host.
            req("/backendtlspolicy-host-mismatch")
                .host("abc.example.com")
                .status(502),
        ],
    )
    .await;
    run_all_failing(
        &s,
        case,
        &[
            req("/backendtlspolicy-host-mismatch")
                .host("abc.example.org")
                .sni("abc.example.com")
                .ns(INFRA),
            req("/backendtlspolicy-cert-mismatch")
                .host("abc.example.com")
                .sni("abc.example.com")
                .ns(INFRA),
        ],
    )
    .await;
}

/// BackendTLSPolicySANValidation: `subjectAltNames` verified instead of the hostname (which
/// is still sent): a DNS name, a URI, both, each of the certificate (200, the backend reached
/// with SNI `abc.example.com`) or not (an HTTP error); every policy accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policy_san_validation() {
    let case = "BackendTLSPolicySANValidation";
    let s = start(&["backendtlspolicy-san.yaml"]).await;
    if s.writes_status() {
        gateway_and_route_accepted(&s, "same-namespace", "backendtlspolicy-san-test").await;
        for policy in [
            "san-dns",
            "san-dns-mismatch",
            "san-uri",
            "san-uri-mismatch",
            "multiple-sans",
            "multiple-mismatch-sans",
        ] {
            s.policy_must_have(
                INFRA,
                policy,
                "same-namespace",
                &[("Accepted", "True", "Accepted")],
            )
            .await;
        }
    }
    let r = |path: &str| req(path).host("abc.example.com").sni("abc.example.com").ns(INFRA);
    run_all(
        &s,
        case,
        &[
            r("/backendtlspolicy-san-dns").status(200),
            r("/backendtlspolicy-san-uri").status(200),
            r("/backendtlspolicy-multiple-sans").status(200),
        ],
    )
    .await;
    run_all_failing(
        &s,
        case,
        &[
            r("/backendtlspolicy-san-dns-mismatch"),
            r("/backendtlspolicy-san-uri-mismatch"),
            r("/backendtlspolicy-multiple-mismatch-sans"),
        ],
    )
    .await;
    // The harness's own checks: a 200 is not a failure, and another server name than the
    // one the backend saw is refused.
    let expect = gateway_conformance::expect::consistent_failure;
    assert!(expect(&s, &r("/backendtlspolicy-san-dns")).await.is_err());
    let once = gateway_conformance::expect::once;
    let other = req("/backendtlspolicy-san-dns")
        .host("abc.example.com")
        .sni("other.example.com")
        .ns(INFRA);
    assert!(once(&s, &other).await.is_err());
}

/// BackendTLSPolicyConflictResolution: of two policies on one Service (or one port of it), the
/// first applies and the second is `Accepted: False` (`Conflicted`); a policy on a port and
/// one on the whole Service do not conflict, the port's applying to it. The manifest's
/// policies are applied together, so they are as old (as in a cluster within one second) and
/// the first by name applies (`-1`, `other.example.com`), which is what upstream expects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policy_conflict_resolution() {
    let case = "BackendTLSPolicyConflictResolution";
    let s = start(&["backendtlspolicy-conflict-resolution.yaml"]).await;
    if s.writes_status() {
        let gw = "same-namespace";
        gateway_and_route_accepted(&s, gw, "backendtlspolicy-conflict-resolution").await;
        let accepted = [("Accepted", "True", "Accepted")];
        let conflicted = [("Accepted", "False", "Conflicted")];
        for (policy, want) in [
            ("conflicted-without-section-name-1", &accepted),
            ("conflicted-without-section-name-2", &conflicted),
            ("conflicted-with-section-name-1", &accepted),
            ("conflicted-with-section-name-2", &conflicted),
            ("not-conflicted-with-section-name", &accepted),
            ("not-conflicted-without-section-name", &accepted),
        ] {
            s.policy_must_have(INFRA, policy, gw, want).await;
        }
    } else {
        for loser in [
            "conflicted-without-section-name-2",
            "conflicted-with-section-name-2",
        ] {
            must_warn(&s, case, &[loser, "which applies"]).await;
        }
    }
    let r = |path: &str, sni: &str| {
        req(path)
            .host("abc.example.com")
            .sni(sni)
            .status(200)
            .ns(INFRA)
    };
    run_all(
        &s,
        case,
        &[
            r(
                "/backendtlspolicy-conflicted-without-section-name",
                "other.example.com",
            ),
            r(
                "/backendtlspolicy-conflicted-with-section-name",
                "other.example.com",
            ),
            r(
                "/backendtlspolicy-not-conflicted-with-section-name",
                "other.example.com",
            ),
            r(
                "/backendtlspolicy-not-conflicted-without-section-name",
                "abc.example.com",
            ),
        ],
    )
    .await;
}

/// BackendTLSPolicyInvalidCACertificateRef: a policy whose one CA reference names a ConfigMap
/// that does not exist, and one whose ConfigMap has no `ca.crt`: each `Accepted: False`
/// (`NoValidCACertificate`) and `ResolvedRefs: False` (`InvalidCACertificateRef`), and its
/// Service answers 500, 502 or 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policy_invalid_ca_certificate_ref() {
    let case = "BackendTLSPolicyInvalidCACertificateRef";
    let s = start(&["backendtlspolicy-invalid-ca-certificate-ref.yaml"]).await;
    let policies = [
        "nonexistent-ca-certificate-ref",
        "malformed-ca-certificate-ref",
    ];
    for policy in policies {
        if s.writes_status() {
            s.gateway_must_have(INFRA, "same-namespace", &[("Accepted", "True", "")])
                .await;
            s.route_parent_must_have(
                INFRA,
                "backendtlspolicy-invalid-ca-certificate-ref",
                "same-namespace",
                &[("Accepted", "True", "")],
            )
            .await;
            s.policy_must_have(
                INFRA,
                policy,
                "same-namespace",
                &[
                    ("Accepted", "False", "NoValidCACertificate"),
                    ("ResolvedRefs", "False", "InvalidCACertificateRef"),
                ],
            )
            .await;
        } else {
            must_warn(&s, case, &[policy, "NoValidCACertificate"]).await;
            must_warn(&s, case, &[policy, "InvalidCACertificateRef"]).await;
        }
    }
    let cases: Vec<Exp> = policies
        .iter()
        .map(|p| {
            req(&format!("/backendtlspolicy-{p}"))
                .host("abc.example.com")
                .status(500)
                .status(502)
                .status(503)
                .ns(INFRA)
        })
        .collect();
    run_all(&s, case, &cases).await;
}

/// BackendTLSPolicyInvalidKind: a policy whose one CA reference is of a kind that is not a
/// ConfigMap: `Accepted: False` (`NoValidCACertificate`), `ResolvedRefs: False`
/// (`InvalidKind`), and its Service answers 500, 502 or 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policy_invalid_kind() {
    let case = "BackendTLSPolicyInvalidKind";
    let s = start(&["backendtlspolicy-invalid-kind.yaml"]).await;
    if s.writes_status() {
        s.gateway_must_have(INFRA, "same-namespace", &[("Accepted", "True", "")])
            .await;
        s.route_parent_must_have(
            INFRA,
            "backendtlspolicy-invalid-kind-test",
            "same-namespace",
            &[("Accepted", "True", "")],
        )
        .await;
        s.policy_must_have(
            INFRA,
            "invalid-kind",
            "same-namespace",
            &[
                ("Accepted", "False", "NoValidCACertificate"),
                ("ResolvedRefs", "False", "InvalidKind"),
            ],
        )
        .await;
    } else {
        must_warn(&s, case, &["invalid-kind", "NoValidCACertificate"]).await;
        must_warn(&s, case, &["invalid-kind", "InvalidKind"]).await;
    }
    run_all(
        &s,
        case,
        &[req("/backendtlspolicy-invalid-kind")
            .host("abc.example.com")
            .status(500)
            .status(502)
            .status(503)
            .ns(INFRA)],
    )
    .await;
}

/// BackendTLSPolicyObservedGenerationBump, status only upstream: the policy's conditions are
/// of its generation; after its hostname is changed (`foo.example.com`) it is still accepted
/// and every condition is of the new generation. Through the fake API server only; offline,
/// where nothing writes status, the policy is served without a warning (upstream's premise,
/// an accepted policy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policy_observed_generation_bump() {
    let case = "BackendTLSPolicyObservedGenerationBump";
    let name = "observed-generation-bump";
    let s = start(&["backendtlspolicy-observed-generation-bump.yaml"]).await;
    let Some(api) = s.api() else {
        // The table is built before readiness: every warning of it is out by now.
        let stderr = s.sy.stderr();
        assert!(
            !stderr
                .lines()
                .any(|l| l.contains("BackendTLSPolicy") && l.contains(name)),
            "{case}: the policy was warned about:\n{stderr}"
        );
        return;
    };
    let gw = "same-namespace";
    s.policy_must_have(INFRA, name, gw, &[("Accepted", "True", "")])
        .await;
    let original = s.policy_has_latest_conditions(INFRA, name);
    let mut policy = api
        .object(kube_api::Kind::BackendTLSPolicy, INFRA, name)
        .expect("the policy");
    policy["spec"]["validation"]["hostname"] = serde_json::json!("foo.example.com");
    api.apply(policy);
    let updated = common::eventually(std::time::Duration::from_secs(10), || async {
        api.object(kube_api::Kind::BackendTLSPolicy, INFRA, name)
            .and_then(|p| p["status"]["ancestors"][0]["conditions"][0]["observedGeneration"].as_i64())
            .is_some_and(|g| g > original)
    })
    .await;
    assert!(updated, "{case}: no condition of the new generation:\n{}", s.sy.stderr());
    s.policy_must_have(INFRA, name, gw, &[("Accepted", "True", "")])
        .await;
    let now = s.policy_has_latest_conditions(INFRA, name);
    assert_ne!(original, now, "{case}: generation should change after an update");
}

/// BackendTLSPolicy, the subtest of policy `reconcile-test` (kubernetes-sigs/gateway-api
/// issue #4338, pull request #4360: "Changing the content of a ConfigMap used by
/// BackendTLSPolicy as CA certificate should be reconciled"). Its Go code was not among the
/// stored files, so the steps are the issue's: the policy pointed at a ConfigMap of the test's
/// own holding the setup CA, a request succeeds; the ConfigMap's `ca.crt` changed to a CA
/// that signed nothing, requests fail; changed back, they succeed again. The ConfigMap's name
/// (`reconcile-test-ca-certificate`) is this harness's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policy_ca_config_map_change() {
    use serde_json::Value;
    let case = "BackendTLSPolicy/reconcile";
    let s = start(&["backendtlspolicy.yaml"]).await;
    let find = |objects: &[Value], kind: &str, name: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };
    let ca = |name: &str| find(&s.objects, "ConfigMap", name)["data"]["ca.crt"].clone();
    let (good, bad) = (
        ca("tls-checks-ca-certificate"),
        ca("mismatch-ca-certificate"),
    );
    let config_map = |pem: &Value| {
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "reconcile-test-ca-certificate", "namespace": INFRA},
            "data": {"ca.crt": pem},
        })
    };
    let mut policy = find(&s.objects, "BackendTLSPolicy", "reconcile-test");
    policy["spec"]["validation"]["caCertificateRefs"][0]["name"] =
        serde_json::json!("reconcile-test-ca-certificate");
    // The objects as now applied (offline: the whole manifest, rewritten).
    let mut objects = s.objects.clone();
    let mut put = async |changed: Vec<Value>| {
        if s.writes_status() {
            s.apply(changed).await;
            return;
        }
        for o in changed {
            objects.retain(|x| {
                !(x["kind"] == o["kind"] && x["metadata"]["name"] == o["metadata"]["name"])
            });
            objects.push(o);
        }
        s.rewrite(&objects).await;
    };
    let r = || {
        req("/backendtlspolicy-reconcile-test")
            .host("abc.example.com")
            .sni("abc.example.com")
            .ns(INFRA)
    };
    put(vec![config_map(&good), policy]).await;
    if s.writes_status() {
        s.policy_must_have(INFRA, "reconcile-test", "same-namespace", &POLICY_OK)
            .await;
    }
    run_all(&s, case, &[r().status(200)]).await;
    put(vec![config_map(&bad)]).await;
    run_all_failing(&s, case, &[r()]).await;
    put(vec![config_map(&good)]).await;
    run_all(&s, case, &[r().status(200)]).await;
}

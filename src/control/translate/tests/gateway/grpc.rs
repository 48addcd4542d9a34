//! GRPCRoute translation: method and header matches as the paths and conditions they mean,
//! the spec's precedence, listeners' kinds, ReferenceGrants from GRPCRoutes, HTTP/2 backends,
//! and the status kept apart from HTTPRoutes'.

use super::*;

/// Two gRPC Services (`appProtocol: kubernetes.io/h2c`, as upstream's conformance ones) and
/// one spoken to over HTTP/1.1 (`v1` of `BASE`).
const GRPC: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: g1, namespace: infra}
spec: {ports: [{port: 8080, appProtocol: kubernetes.io/h2c}]}
---
apiVersion: v1
kind: Service
metadata: {name: g2, namespace: infra}
spec: {ports: [{port: 8080, appProtocol: kubernetes.io/h2c}]}
---
apiVersion: v1
kind: Service
metadata: {name: g3, namespace: apps}
spec: {ports: [{port: 8080, appProtocol: kubernetes.io/h2c}]}
"#;

const SVC: &str = "gateway_api_conformance.echo_basic.grpcecho.GrpcEcho";

fn with_grpc(objects: &str) -> World {
    world(&format!("{BASE}\n---\n{GRPC}\n---\n{objects}"))
}

/// Where a gRPC call (a POST of `/service/method`) with `headers` goes.
fn call(
    t: &RoutingTable,
    host: &str,
    path: &str,
    headers: Vec<(&'static str, &'static str)>,
) -> String {
    goes(t, host, path, &Req("POST", headers, None))
}

fn grpc_status<'a>(b: &'a Built, name: &str) -> &'a RouteStatus {
    &b.memo.gateway_status().grpc_routes[&("infra".to_string(), name.to_string())]
}

fn condition<'a>(s: &'a RouteStatus, ty: &str) -> Option<(&'a str, &'a str)> {
    s.parents[0]
        .conditions
        .iter()
        .find(|c| c.type_ == ty)
        .map(|c| (c.status.as_str(), c.reason.as_str()))
}

#[test]
fn method_matches_route_by_service_and_method_with_the_spec_precedence() {
    let w = with_grpc(&format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: r, namespace: infra, generation: 4}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - matches: [{{method: {{service: {SVC}, method: Echo}}}}]
    backendRefs: [{{name: g1, port: 8080}}]
  - matches: [{{method: {{service: {SVC}}}}}]
    backendRefs: [{{name: g2, port: 8080}}]
  - matches: [{{method: {{method: EchoTwo}}}}]
    backendRefs: [{{name: g3, namespace: apps, port: 8080}}]
"#
    ));
    let (b, warnings) = build(&w);
    let t = &b.table;
    // The exact service and method first, then the service alone, then the method alone
    // (characters of a matching service, then of a matching method).
    assert_eq!(
        call(t, "h", &format!("/{SVC}/Echo"), vec![]),
        "infra/g1:8080"
    );
    assert_eq!(
        call(t, "h", &format!("/{SVC}/EchoTwo"), vec![]),
        "infra/g2:8080"
    );
    assert_eq!(
        call(t, "h", &format!("/{SVC}/Other"), vec![]),
        "infra/g2:8080"
    );
    // The backend of the method-only rule is in another namespace without a grant.
    assert_eq!(call(t, "h", "/other.Service/EchoTwo", vec![]), "500");
    // A service that only starts like the one matched, and another method: no route.
    assert_eq!(call(t, "h", &format!("/{SVC}X/Echo"), vec![]), "404");
    assert_eq!(call(t, "h", "/other.Service/Echo", vec![]), "404");
    let s = grpc_status(&b, "r");
    assert_eq!(condition(s, "Accepted"), Some(("True", "Accepted")));
    assert_eq!(
        condition(s, "ResolvedRefs"),
        Some(("False", "RefNotPermitted"))
    );
    assert_eq!(s.parents[0].conditions[0].observed_generation, Some(4));
    assert!(
        warnings.iter().all(|w| w.object.kind == "GRPCRoute"),
        "{warnings:?}"
    );
    // Kept apart from HTTPRoutes' status; counted on the listener, which takes both kinds.
    let st = b.memo.gateway_status();
    assert!(st.http_routes.is_empty());
    let l = &st.gateways[&("infra".to_string(), "gw".to_string())].listeners[0];
    assert_eq!(l.attached_routes, 1);
    let kinds: Vec<&str> = l.supported_kinds.iter().map(|k| k.kind.as_str()).collect();
    assert_eq!(kinds, ["HTTPRoute", "GRPCRoute"]);
}

#[test]
fn a_reference_grant_from_grpc_routes_lets_one_name_a_backend_elsewhere() {
    let route = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: r, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: g3, namespace: apps, port: 8080}]}]
"#;
    let grant = |kind: &str| {
        format!(
            r#"
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {{name: g, namespace: apps}}
spec:
  from: [{{group: gateway.networking.k8s.io, kind: {kind}, namespace: infra}}]
  to: [{{group: "", kind: Service}}]
"#
        )
    };
    let (b, _) = build(&with_grpc(&format!("{route}\n---\n{}", grant("GRPCRoute"))));
    assert_eq!(call(&b.table, "h", "/a.B/C", vec![]), "apps/g3:8080");
    assert_eq!(
        condition(grpc_status(&b, "r"), "ResolvedRefs"),
        Some(("True", "ResolvedRefs"))
    );
    // A grant to HTTPRoutes says nothing of GRPCRoutes.
    let (b, _) = build(&with_grpc(&format!("{route}\n---\n{}", grant("HTTPRoute"))));
    assert_eq!(call(&b.table, "h", "/a.B/C", vec![]), "500");
}

#[test]
fn header_matches_and_regular_expressions_are_served_whole() {
    let w = with_grpc(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: r, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{headers: [{name: version, value: one}]}]
    backendRefs: [{name: g1, port: 8080}]
  - matches: [{headers: [{type: RegularExpression, name: Version, value: "t[a-z]+"}]}]
    backendRefs: [{name: g2, port: 8080}]
  - matches: [{method: {type: RegularExpression, service: "pkg\\.v[0-9]+\\.Svc", method: "Get.*"}}]
    backendRefs: [{name: g1, port: 8080}]
"#,
    );
    let (b, warnings) = build(&w);
    assert!(warnings.is_empty(), "{warnings:?}");
    let t = &b.table;
    assert_eq!(
        call(t, "h", "/a.B/C", vec![("version", "one")]),
        "infra/g1:8080"
    );
    assert_eq!(
        call(t, "h", "/a.B/C", vec![("version", "two")]),
        "infra/g2:8080"
    );
    assert_eq!(call(t, "h", "/a.B/C", vec![("version", "2two")]), "404");
    assert_eq!(call(t, "h", "/a.B/C", vec![]), "404");
    assert_eq!(
        call(t, "h", "/pkg.v2.Svc/GetThing", vec![]),
        "infra/g1:8080"
    );
    assert_eq!(call(t, "h", "/pkg.v2.Svc/Put", vec![]), "404");
    assert_eq!(call(t, "h", "/x/pkg.v2.Svc/GetThing", vec![]), "404");
}

#[test]
fn listener_kinds_decide_which_routes_attach() {
    let w = with_grpc(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: kinds, namespace: infra}
spec:
  gatewayClassName: sy
  listeners:
  - name: http-only
    port: 80
    protocol: HTTP
    hostname: http.example
    allowedRoutes: {kinds: [{kind: HTTPRoute}]}
  - name: grpc-only
    port: 80
    protocol: HTTP
    hostname: grpc.example
    allowedRoutes: {kinds: [{kind: GRPCRoute}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: refused, namespace: infra}
spec:
  parentRefs: [{name: kinds, sectionName: http-only}]
  rules: [{backendRefs: [{name: g1, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: taken, namespace: infra}
spec:
  parentRefs: [{name: kinds}]
  rules: [{backendRefs: [{name: g2, port: 8080}]}]
"#,
    );
    let (b, _) = build(&w);
    assert_eq!(
        condition(grpc_status(&b, "refused"), "Accepted"),
        Some(("False", "NotAllowedByListeners"))
    );
    assert_eq!(
        condition(grpc_status(&b, "taken"), "Accepted"),
        Some(("True", "Accepted"))
    );
    let t = &b.table;
    assert_eq!(call(t, "grpc.example", "/a.B/C", vec![]), "infra/g2:8080");
    assert_eq!(call(t, "http.example", "/a.B/C", vec![]), "404");
    let st = b.memo.gateway_status();
    let ls = &st.gateways[&("infra".to_string(), "kinds".to_string())].listeners;
    let kinds = |i: usize| -> Vec<&str> {
        ls[i]
            .supported_kinds
            .iter()
            .map(|k| k.kind.as_str())
            .collect()
    };
    assert_eq!((kinds(0), kinds(1)), (vec!["HTTPRoute"], vec!["GRPCRoute"]));
    assert_eq!((ls[0].attached_routes, ls[1].attached_routes), (0, 1));
}

#[test]
fn a_backend_spoken_to_over_http1_is_refused_not_served_wrong() {
    let w = with_grpc(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: r, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: v1, port: 8080}]}]
"#,
    );
    let (b, warnings) = build(&w);
    assert_eq!(call(&b.table, "h", "/a.B/C", vec![]), "500");
    assert_eq!(
        condition(grpc_status(&b, "r"), "ResolvedRefs"),
        Some(("False", "UnsupportedProtocol"))
    );
    assert!(
        warnings.iter().any(|w| w.message.contains("HTTP/2")),
        "{warnings:?}"
    );
}

#[test]
fn what_cannot_be_served_exactly_is_dropped_with_a_warning() {
    let w = with_grpc(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: r, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{method: {service: "a/b", method: C}}, {method: {service: ok.Svc, method: C}}]
    backendRefs: [{name: g1, port: 8080}]
  - matches: [{method: {service: mirrored.Svc}}]
    filters:
    - type: RequestMirror
      requestMirror: {backendRef: {name: g2, port: 8080}}
    backendRefs: [{name: g1, port: 8080}]
"#,
    );
    let (b, warnings) = build(&w);
    let t = &b.table;
    // The invalid match alone is skipped; its rule's other match serves.
    assert_eq!(call(t, "h", "/ok.Svc/C", vec![]), "infra/g1:8080");
    assert_eq!(call(t, "h", "/a/b/C", vec![]), "404");
    assert!(
        warnings
            .iter()
            .any(|w| w.message.contains("not a valid service name")),
        "{warnings:?}"
    );
    // A mirror cannot be carried over HTTP/2: its rule is dropped, the route partly invalid.
    assert_eq!(call(t, "h", "/mirrored.Svc/C", vec![]), "404");
    assert_eq!(
        condition(grpc_status(&b, "r"), "PartiallyInvalid"),
        Some(("True", "UnsupportedValue"))
    );
}

#[test]
fn a_grpc_route_and_an_http_route_of_one_name_are_both_served() {
    let w = with_grpc(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: same, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  hostnames: [grpc.example]
  rules: [{backendRefs: [{name: g1, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: same, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  hostnames: [web.example]
  rules: [{backendRefs: [{name: v1, port: 8080}]}]
"#,
    );
    let (b, _) = build(&w);
    assert_eq!(
        call(&b.table, "grpc.example", "/a.B/C", vec![]),
        "infra/g1:8080"
    );
    assert_eq!(get(&b.table, "web.example", "/"), "infra/v1:8080");
    let st = b.memo.gateway_status();
    let key = ("infra".to_string(), "same".to_string());
    assert!(st.http_routes.contains_key(&key) && st.grpc_routes.contains_key(&key));
    let l = &st.gateways[&("infra".to_string(), "gw".to_string())].listeners[0];
    assert_eq!(l.attached_routes, 2);
}

#[test]
fn a_gateway_only_build_translates_the_changed_grpc_route_alone_and_equals_a_cold_one() {
    let objects = |echo: &str| {
        format!(
            r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: same, namespace: infra}}
spec:
  parentRefs: [{{name: gw}}]
  rules: [{{matches: [{{method: {{service: a.B, method: {echo}}}}}], backendRefs: [{{name: g1, port: 8080}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: other, namespace: infra}}
spec:
  parentRefs: [{{name: gw}}]
  rules: [{{matches: [{{method: {{service: c.D}}}}], backendRefs: [{{name: g2, port: 8080}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: same, namespace: infra}}
spec:
  parentRefs: [{{name: gw}}]
  rules: [{{matches: [{{path: {{value: /web}}}}], backendRefs: [{{name: v1, port: 8080}}]}}]
"#
        )
    };
    let gateway_only = Changes {
        gateway: true,
        ..Changes::default()
    };
    let w0 = with_grpc(&objects("Echo"));
    let (b0, _) = build_changes(&w0, None, None);
    assert_eq!(b0.memo.gateway_routes_translated(), Some(3));
    // The GRPCRoute `same` changed; the HTTPRoute of the same name did not.
    let w1 = with_grpc(&objects("EchoTwo"));
    let (b1, warnings) = build_changes(&w1, Some(&gateway_only), Some(b0.previous()));
    let (cold, cold_warnings) = build_changes(&w1, None, None);
    assert_eq!(b1.memo.gateway_routes_translated(), Some(1));
    assert!(b1.table == cold.table);
    assert_eq!(warnings, cold_warnings);
    assert_eq!(b1.memo.gateway_status(), cold.memo.gateway_status());
    assert_eq!(
        call(&b1.table, "h", "/a.B/EchoTwo", vec![]),
        "infra/g1:8080"
    );
    assert_eq!(call(&b1.table, "h", "/a.B/Echo", vec![]), "404");
    assert_eq!(get(&b1.table, "h", "/web"), "infra/v1:8080");
    // Nothing changed: nothing translated, the routers and status shared.
    let (b2, _) = build_changes(&w1, Some(&gateway_only), Some(b1.previous()));
    assert_eq!(b2.memo.gateway_routes_translated(), Some(0));
    assert!(Arc::ptr_eq(&b2.table.gateway, &b1.table.gateway));
}

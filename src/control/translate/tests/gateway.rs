//! Gateway API translation: classes claimed, listeners checked, routes attached, rules and
//! their precedence, backends and the status decided, one behaviour per test.

use std::sync::Arc;

use super::*;
use crate::control::translate::gateway::api::*;
use crate::table::gateway::{Action, BareRequest, GatewayMatch, RequestView};

/// The objects of a YAML stream, by kind.
#[derive(Default)]
struct World {
    services: Vec<Service>,
    slices: Vec<EndpointSlice>,
    classes: Vec<GatewayClass>,
    gateways: Vec<Gateway>,
    routes: Vec<HTTPRoute>,
    grpc_routes: Vec<GRPCRoute>,
    tcp_routes: Vec<TCPRoute>,
    tls_routes: Vec<TLSRoute>,
    udp_routes: Vec<UDPRoute>,
    listener_sets: Vec<ListenerSet>,
    policies: Vec<BackendTLSPolicy>,
    config_maps: Vec<k8s_openapi::api::core::v1::ConfigMap>,
    grants: Vec<ReferenceGrant>,
    namespaces: Vec<k8s_openapi::api::core::v1::Namespace>,
    secrets: Vec<k8s_openapi::api::core::v1::Secret>,
}

fn world(yaml: &str) -> World {
    let mut w = World::default();
    for doc in serde_yaml_ng::Deserializer::from_str(yaml) {
        let v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
        let kind = v["kind"].as_str().unwrap_or_default().to_string();
        match kind.as_str() {
            "Service" => w.services.push(serde_json::from_value(v).unwrap()),
            "EndpointSlice" => w.slices.push(serde_json::from_value(v).unwrap()),
            "GatewayClass" => w.classes.push(serde_json::from_value(v).unwrap()),
            "Gateway" => w.gateways.push(serde_json::from_value(v).unwrap()),
            "HTTPRoute" => w.routes.push(serde_json::from_value(v).unwrap()),
            "GRPCRoute" => w.grpc_routes.push(serde_json::from_value(v).unwrap()),
            "TCPRoute" => w.tcp_routes.push(serde_json::from_value(v).unwrap()),
            "TLSRoute" => w.tls_routes.push(serde_json::from_value(v).unwrap()),
            "UDPRoute" => w.udp_routes.push(serde_json::from_value(v).unwrap()),
            "ListenerSet" => w.listener_sets.push(serde_json::from_value(v).unwrap()),
            "BackendTLSPolicy" => w.policies.push(serde_json::from_value(v).unwrap()),
            "ConfigMap" => w.config_maps.push(serde_json::from_value(v).unwrap()),
            "ReferenceGrant" => w.grants.push(serde_json::from_value(v).unwrap()),
            "Namespace" => w.namespaces.push(serde_json::from_value(v).unwrap()),
            "Secret" => w.secrets.push(serde_json::from_value(v).unwrap()),
            other => panic!("unexpected kind {other}"),
        }
    }
    w
}

fn build(w: &World) -> (Built, Vec<Warning>) {
    let refs = IngressRefs::of([], [], w.secrets.iter())
        .with_config_maps(w.config_maps.iter())
        .with_gateway(GatewayRefs {
            classes: w.classes.iter().collect(),
            gateways: w.gateways.iter().collect(),
            routes: w.routes.iter().collect(),
            grpc_routes: w.grpc_routes.iter().collect(),
            tcp_routes: w.tcp_routes.iter().collect(),
            tls_routes: w.tls_routes.iter().collect(),
            udp_routes: w.udp_routes.iter().collect(),
            listener_sets: w.listener_sets.iter().collect(),
            backend_tls_policies: w.policies.iter().collect(),
            grants: w.grants.iter().collect(),
            namespaces: w.namespaces.iter().collect(),
        });
    translate_with(
        &w.services,
        &w.slices,
        refs.inputs(),
        &Options::default(),
        None,
    )
}

const BASE: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: sy, generation: 1}
spec: {controllerName: switchyard.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: theirs}
spec: {controllerName: example.com/other}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: infra, generation: 3}
spec:
  gatewayClassName: sy
  listeners:
  - {name: http, port: 80, protocol: HTTP}
---
apiVersion: v1
kind: Service
metadata: {name: v1, namespace: infra}
spec: {ports: [{port: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: v2, namespace: infra}
spec: {ports: [{port: 8080}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: v1-a, namespace: infra, labels: {kubernetes.io/service-name: v1}}
addressType: IPv4
ports: [{port: 3000}]
endpoints: [{addresses: [10.0.0.1]}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: v2-a, namespace: infra, labels: {kubernetes.io/service-name: v2}}
addressType: IPv4
ports: [{port: 3000}]
endpoints: [{addresses: [10.0.0.2]}]
"#;

struct Req(
    &'static str,
    Vec<(&'static str, &'static str)>,
    Option<&'static str>,
);

impl RequestView for Req {
    fn method(&self) -> &[u8] {
        self.0.as_bytes()
    }
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.1
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_bytes())
    }
    fn query(&self) -> Option<&str> {
        self.2
    }
}

/// Where a request goes: the entry's name, or the action's kind.
fn goes(t: &RoutingTable, host: &str, path: &str, req: &impl RequestView) -> String {
    match t.gateway.lookup(false, Some(host.as_bytes()), path, req) {
        GatewayMatch::NoRoute => "404".into(),
        GatewayMatch::NotTaken => "not gateway".into(),
        GatewayMatch::Matched(_, c) => match &c.rule.action {
            Action::Fail(s) => s.to_string(),
            Action::Redirect(r) => format!("redirect {}", r.status),
            Action::Backends(b) => {
                let names: Vec<String> = b
                    .backends
                    .iter()
                    .map(|b| {
                        b.entry
                            .map_or("500".into(), |e| t.entry(e).unwrap().name.to_string())
                    })
                    .collect();
                names.join("+")
            }
        },
    }
}

fn get(t: &RoutingTable, host: &str, path: &str) -> String {
    goes(t, host, path, &BareRequest::GET)
}

fn with_route(route: &str) -> World {
    world(&format!("{BASE}\n---\n{route}"))
}

#[test]
fn a_route_on_our_gateway_is_served_and_accepted() {
    let w = with_route(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: infra, generation: 2}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: v1, port: 8080}]}]
"#,
    );
    let (b, warnings) = build(&w);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(get(&b.table, "anything.example", "/x"), "infra/v1:8080");
    let status = b.memo.gateway_status();
    assert!(status.classes.contains_key("sy") && !status.classes.contains_key("theirs"));
    let gw = &status.gateways[&("infra".to_string(), "gw".to_string())];
    assert_eq!(gw.listeners[0].attached_routes, 1);
    assert!(
        gw.conditions
            .iter()
            .all(|c| c.status == "True" && c.observed_generation == Some(3))
    );
    let r = &status.http_routes[&("infra".to_string(), "r".to_string())];
    assert_eq!(r.parents.len(), 1);
    let types: Vec<(&str, &str)> = r.parents[0]
        .conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str()))
        .collect();
    assert_eq!(types, [("Accepted", "True"), ("ResolvedRefs", "True")]);
}

#[test]
fn precedence_follows_the_spec_across_routes() {
    // Two routes: path and header matches compete (upstream's matching-across-routes case).
    let w = with_route(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: part1, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  hostnames: [example.com, example.net]
  rules:
  - matches: [{path: {type: PathPrefix, value: /}}, {headers: [{name: version, value: one}]}]
    backendRefs: [{name: v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: part2, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  hostnames: [example.com]
  rules:
  - matches: [{path: {type: PathPrefix, value: /v2}}, {headers: [{name: version, value: two}]}]
    backendRefs: [{name: v2, port: 8080}]
"#,
    );
    let (b, _) = build(&w);
    let t = &b.table;
    assert_eq!(get(t, "example.com", "/"), "infra/v1:8080");
    assert_eq!(get(t, "example.net", "/v2"), "infra/v1:8080");
    assert_eq!(get(t, "example.com", "/v2/example"), "infra/v2:8080");
    let two = Req("GET", vec![("Version", "two")], None);
    assert_eq!(goes(t, "example.com", "/", &two), "infra/v2:8080");
    let one = Req("GET", vec![("Version", "one")], None);
    assert_eq!(goes(t, "example.com", "/example", &one), "infra/v1:8080");
    // A host no route names: the listener's routes take it, none matches.
    assert_eq!(get(t, "example.org", "/"), "404");
}

#[test]
fn unresolved_backends_answer_500_and_say_why() {
    let w = with_route(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {value: /missing}}]
    backendRefs: [{name: nope, port: 8080}]
  - matches: [{path: {value: /kind}}]
    backendRefs: [{group: example.com, kind: Thing, name: v1}]
  - matches: [{path: {value: /other-ns}}]
    backendRefs: [{name: web, namespace: apps, port: 8080}]
  - matches: [{path: {value: /ok}}]
    backendRefs: [{name: v1, port: 8080}]
"#,
    );
    let (b, warnings) = build(&w);
    let t = &b.table;
    assert_eq!(get(t, "h", "/missing"), "500");
    assert_eq!(get(t, "h", "/kind"), "500");
    assert_eq!(get(t, "h", "/other-ns"), "500");
    assert_eq!(get(t, "h", "/ok"), "infra/v1:8080");
    let r = &b.memo.gateway_status().http_routes[&("infra".into(), "r".into())];
    let refs = &r.parents[0].conditions[1];
    assert_eq!(
        (refs.status.as_str(), refs.reason.as_str()),
        ("False", "BackendNotFound")
    );
    assert!(!warnings.is_empty());
}

#[test]
fn a_reference_grant_opens_another_namespace() {
    let apps = r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: apps}
spec: {ports: [{port: 8080}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: web, namespace: apps, port: 8080}]}]
"#;
    let (b, _) = build(&with_route(apps));
    let refs = &b.memo.gateway_status().http_routes[&("infra".into(), "r".into())].parents[0]
        .conditions[1];
    assert_eq!(refs.reason, "RefNotPermitted");
    let granted = format!(
        "{apps}\n---\n{}",
        r#"
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: g, namespace: apps}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: infra}]
  to: [{group: "", kind: Service}]
"#
    );
    let (b, _) = build(&with_route(&granted));
    assert_eq!(get(&b.table, "h", "/"), "apps/web:8080");
}

#[test]
fn listeners_take_only_the_routes_they_allow() {
    let w = with_route(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: elsewhere}
spec:
  parentRefs: [{name: gw, namespace: infra}]
  rules: [{backendRefs: [{name: v1, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: s, namespace: infra}
spec:
  parentRefs: [{name: gw, sectionName: nope}]
"#,
    );
    let (b, _) = build(&w);
    let st = b.memo.gateway_status();
    let accepted = |ns: &str, name: &str| {
        st.http_routes[&(ns.to_string(), name.to_string())].parents[0].conditions[0]
            .reason
            .clone()
    };
    assert_eq!(accepted("elsewhere", "r"), "NotAllowedByListeners");
    assert_eq!(accepted("infra", "s"), "NoMatchingParent");
    // The listener still takes every host: nothing attached, so 404.
    assert_eq!(get(&b.table, "h", "/"), "404");
}

#[test]
fn filters_become_rule_data() {
    let w = with_route(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {value: /redirect}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org, statusCode: 301}}]
  - matches: [{path: {value: /rewrite}}]
    filters:
    - {type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /new}}}
    - type: RequestHeaderModifier
      requestHeaderModifier: {set: [{name: X-Set, value: a}], remove: [X-Drop]}
    backendRefs: [{name: v1, port: 8080, weight: 3}, {name: v2, port: 8080, weight: 1}]
    timeouts: {request: 10s, backendRequest: 500ms}
"#,
    );
    let (b, warnings) = build(&w);
    assert!(warnings.is_empty(), "{warnings:?}");
    let t = &b.table;
    assert_eq!(get(t, "h", "/redirect/x"), "redirect 301");
    assert_eq!(get(t, "h", "/rewrite"), "infra/v1:8080+infra/v2:8080");
    let rule = t
        .gateway
        .rules
        .iter()
        .find(|r| r.rewrite_path.is_some())
        .unwrap();
    assert_eq!(rule.request_headers.set, vec![("x-set".into(), "a".into())]);
    assert_eq!(
        rule.request_headers.remove,
        vec![Box::<str>::from("x-drop")]
    );
    assert_eq!(rule.request_timeout, Some(Duration::from_secs(10)));
    assert_eq!(rule.backend_timeout, Some(Duration::from_millis(500)));
    let Action::Backends(bk) = &rule.action else {
        panic!()
    };
    assert_eq!(bk.total, 4);
}

#[test]
fn unsupported_listeners_and_filters_are_refused_in_status() {
    let w = world(&format!(
        "{BASE}\n---\n{}",
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: odd, namespace: infra}
spec:
  gatewayClassName: sy
  listeners:
  - {name: sctp, port: 9000, protocol: SCTP}
  - {name: other-port, port: 8080, protocol: HTTP}
  - {name: http, port: 80, protocol: HTTP, allowedRoutes: {kinds: [{kind: TCPRoute}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: m, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  rules: [{filters: [{type: CORS}], backendRefs: [{name: v1, port: 8080}]}]
"#
    ));
    let (b, _) = build(&w);
    let st = b.memo.gateway_status();
    let odd = &st.gateways[&("infra".into(), "odd".into())];
    let reason = |i: usize, ty: &str| {
        odd.listeners[i]
            .conditions
            .iter()
            .find(|c| c.type_ == ty)
            .map(|c| (c.status.clone(), c.reason.clone()))
            .unwrap()
    };
    assert_eq!(
        reason(0, "Accepted"),
        ("False".into(), "UnsupportedProtocol".into())
    );
    // Another port is one of the listener's own.
    assert_eq!(reason(1, "Accepted"), ("True".into(), "Accepted".into()));
    assert_eq!(
        reason(2, "ResolvedRefs"),
        ("False".into(), "InvalidRouteKinds".into())
    );
    assert!(odd.listeners[2].supported_kinds.is_empty());
    let m = &st.http_routes[&("infra".into(), "m".into())].parents[0].conditions[0];
    assert_eq!(
        (m.status.as_str(), m.reason.as_str()),
        ("False", "UnsupportedValue")
    );
    assert_eq!(get(&b.table, "h", "/"), "404");
}

/// The conditions of route `name`'s first parent: (type, status, reason, message).
fn route_conditions(b: &Built, name: &str) -> Vec<(String, String, String, String)> {
    b.memo.gateway_status().http_routes[&("infra".to_string(), name.to_string())].parents[0]
        .conditions
        .iter()
        .map(|c| {
            (
                c.type_.clone(),
                c.status.clone(),
                c.reason.clone(),
                c.message.clone(),
            )
        })
        .collect()
}

#[test]
fn regular_expressions_match_whole_paths_after_exact_and_prefix() {
    let w = with_route(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  hostnames: [example.com]
  rules:
  - matches: [{path: {type: RegularExpression, value: "/v[0-9]+/users/[a-z]+"}}]
    backendRefs: [{name: v1, port: 8080}]
  - matches: [{path: {type: RegularExpression, value: "/v[0-9]+/.*"}}, {path: {type: Exact, value: /v9/users/exact}}]
    backendRefs: [{name: v2, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /v3}}]
    filters: [{type: RequestRedirect, requestRedirect: {statusCode: 301}}]
"#,
    );
    let (b, warnings) = build(&w);
    assert!(warnings.is_empty(), "{warnings:?}");
    let t = &b.table;
    assert_eq!(get(t, "example.com", "/v1/users/bob"), "infra/v1:8080");
    // The longer pattern first; a path only the shorter matches goes to it.
    assert_eq!(get(t, "example.com", "/v1/users/bob7"), "infra/v2:8080");
    assert_eq!(get(t, "example.com", "/v12/orders"), "infra/v2:8080");
    // Exact and prefix paths beat every pattern.
    assert_eq!(get(t, "example.com", "/v9/users/exact"), "infra/v2:8080");
    assert_eq!(get(t, "example.com", "/v3/users/bob"), "redirect 301");
    // The whole path must match.
    assert_eq!(get(t, "example.com", "/api/v1/users/bob"), "404");
    assert_eq!(get(t, "example.com", "/v1"), "404");
    assert_eq!(
        route_conditions(&b, "r")
            .iter()
            .map(|c| (c.0.as_str(), c.1.as_str()))
            .collect::<Vec<_>>(),
        [("Accepted", "True"), ("ResolvedRefs", "True")]
    );
}

#[test]
fn header_and_query_regular_expressions_are_conditions() {
    let w = with_route(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches:
    - headers: [{type: RegularExpression, name: Version, value: "v[0-9]+"}]
      queryParams: [{type: RegularExpression, name: id, value: "[0-9]{1,3}"}]
    backendRefs: [{name: v2, port: 8080}]
  - backendRefs: [{name: v1, port: 8080}]
"#,
    );
    let (b, warnings) = build(&w);
    assert!(warnings.is_empty(), "{warnings:?}");
    let t = &b.table;
    let req = |v, q| Req("GET", vec![("version", v)], Some(q));
    assert_eq!(goes(t, "h", "/", &req("v12", "id=42")), "infra/v2:8080");
    assert_eq!(
        goes(t, "h", "/", &req("v12", "a=b&id=999")),
        "infra/v2:8080"
    );
    assert_eq!(goes(t, "h", "/", &req("v12x", "id=42")), "infra/v1:8080");
    assert_eq!(goes(t, "h", "/", &req("v12", "id=1000")), "infra/v1:8080");
    assert_eq!(
        goes(t, "h", "/", &Req("GET", vec![], Some("id=1"))),
        "infra/v1:8080"
    );
}

#[test]
fn an_invalid_regular_expression_drops_its_rule_and_says_so() {
    let w = with_route(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: partly, namespace: infra, generation: 4}
spec:
  parentRefs: [{name: gw}]
  hostnames: [partly.example]
  rules:
  - matches: [{path: {type: PathPrefix, value: /ok}}]
    backendRefs: [{name: v1, port: 8080}]
  - matches: [{path: {type: RegularExpression, value: "/(unclosed"}}]
    backendRefs: [{name: v2, port: 8080}]
  - matches: [{headers: [{type: RegularExpression, name: x, value: "\\w{50}"}]}]
    backendRefs: [{name: v2, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: wholly, namespace: infra, generation: 2}
spec:
  parentRefs: [{name: gw}]
  hostnames: [wholly.example]
  rules:
  - matches: [{queryParams: [{type: RegularExpression, name: q, value: "a{2,100000}"}]}]
    backendRefs: [{name: v2, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: prefix-rewrite, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  hostnames: [rewrite.example]
  rules:
  - matches: [{path: {type: RegularExpression, value: "/a.*"}}]
    filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /b}}}]
    backendRefs: [{name: v2, port: 8080}]
"#,
    );
    let (b, warnings) = build(&w);
    let t = &b.table;
    // The valid rule serves; the dropped ones match nothing.
    assert_eq!(get(t, "partly.example", "/ok"), "infra/v1:8080");
    assert_eq!(get(t, "partly.example", "/(unclosed"), "404");
    let c = route_conditions(&b, "partly");
    assert_eq!(c.len(), 3, "{c:?}");
    assert_eq!((c[0].0.as_str(), c[0].1.as_str()), ("Accepted", "True"));
    let p = &c[2];
    assert_eq!(
        (p.0.as_str(), p.1.as_str(), p.2.as_str()),
        ("PartiallyInvalid", "True", "UnsupportedValue")
    );
    assert!(
        p.3.starts_with("Dropped Rule 1: path regular expression"),
        "{}",
        p.3
    );
    assert!(
        p.3.contains("; Rule 2: header \"x\" regular expression"),
        "{}",
        p.3
    );
    assert!(p.3.contains("compiles to more than"), "{}", p.3);
    // Every rule invalid: the route is refused, and nothing else says PartiallyInvalid.
    for name in ["wholly", "prefix-rewrite"] {
        let c = route_conditions(&b, name);
        assert_eq!(
            (c[0].0.as_str(), c[0].1.as_str(), c[0].2.as_str()),
            ("Accepted", "False", "UnsupportedValue"),
            "{name}"
        );
        assert!(c.iter().all(|c| c.0 != "PartiallyInvalid"), "{c:?}");
    }
    assert!(
        route_conditions(&b, "prefix-rewrite")[0]
            .3
            .contains("ReplacePrefixMatch needs a PathPrefix match")
    );
    assert_eq!(get(t, "wholly.example", "/"), "404");
    assert_eq!(get(t, "rewrite.example", "/a"), "404");
    // One warning per route.
    let warned: Vec<&str> = warnings.iter().map(|w| w.object.name.as_str()).collect();
    assert_eq!(
        warned,
        ["partly", "prefix-rewrite", "wholly"],
        "{warnings:?}"
    );
}

#[test]
fn a_rule_with_filters_that_cannot_be_served_drops_only_itself() {
    let w = with_route(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: mixed, namespace: infra, generation: 5}
spec:
  parentRefs: [{name: gw}]
  hostnames: [mixed.example]
  rules:
  - matches: [{path: {value: /ok}}]
    backendRefs: [{name: v1, port: 8080}]
  - matches: [{path: {value: /cors}}]
    filters: [{type: CORS, cors: {allowOrigins: ["https://app.example", "not an origin"]}}]
    backendRefs: [{name: v2, port: 8080}]
  - matches: [{path: {value: /both}}]
    filters:
    - {type: RequestRedirect, requestRedirect: {hostname: a.example}}
    - {type: URLRewrite, urlRewrite: {hostname: b.example}}
  - matches: [{path: {value: /twice}}]
    filters:
    - {type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: a, value: "1"}]}}
    - {type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: a, value: "2"}]}}
    backendRefs: [{name: v2, port: 8080}]
  - matches: [{path: {value: /redirect-and-backend}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: a.example}}]
    backendRefs: [{name: v2, port: 8080}]
  - matches: [{path: {value: /status}}]
    filters: [{type: RequestRedirect, requestRedirect: {statusCode: 404}}]
  - matches: [{path: {value: /on-backend}}]
    backendRefs:
    - name: v2
      port: 8080
      filters: [{type: URLRewrite, urlRewrite: {hostname: b.example}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: clash, namespace: infra, generation: 2}
spec:
  parentRefs: [{name: gw}]
  hostnames: [clash.example]
  rules:
  - filters:
    - {type: RequestRedirect, requestRedirect: {hostname: a.example}}
    - {type: URLRewrite, urlRewrite: {hostname: b.example}}
"#,
    );
    let (b, warnings) = build(&w);
    let t = &b.table;
    assert_eq!(get(t, "mixed.example", "/ok"), "infra/v1:8080");
    for dropped in [
        "/cors",
        "/both",
        "/twice",
        "/redirect-and-backend",
        "/status",
        "/on-backend",
    ] {
        assert_eq!(get(t, "mixed.example", dropped), "404", "{dropped}");
    }
    let c = route_conditions(&b, "mixed");
    assert_eq!(
        (c[0].0.as_str(), c[0].1.as_str(), c[0].2.as_str()),
        ("Accepted", "True", "Accepted")
    );
    let p = c
        .iter()
        .find(|c| c.0 == "PartiallyInvalid")
        .expect("PartiallyInvalid");
    assert_eq!(
        (p.1.as_str(), p.2.as_str()),
        ("True", "UnsupportedValue"),
        "{p:?}"
    );
    assert_eq!(
        p.3,
        "Dropped Rule 1: CORS origin \"not an origin\" is not scheme://host[:port]; \
         Rule 2: RequestRedirect and URLRewrite filters may not be combined; \
         Rule 3: filter RequestHeaderModifier may not be repeated; \
         Rule 4: a RequestRedirect filter may not be used together with backendRefs; \
         Rule 5: redirect status 404 is not supported; \
         Rule 6: filter URLRewrite on a backendRef is not supported"
    );
    // A route whose every rule is dropped is refused, for the first rule's reason.
    let c = route_conditions(&b, "clash");
    assert_eq!(
        (c[0].0.as_str(), c[0].1.as_str(), c[0].2.as_str()),
        ("Accepted", "False", "IncompatibleFilters")
    );
    assert!(c.iter().all(|c| c.0 != "PartiallyInvalid"), "{c:?}");
    assert_eq!(get(t, "clash.example", "/"), "404");
    let warned: Vec<&str> = warnings.iter().map(|w| w.object.name.as_str()).collect();
    assert_eq!(warned, ["clash", "mixed"], "{warnings:?}");
}

#[test]
fn an_extension_filter_is_never_skipped_its_rule_answers_500() {
    let w = with_route(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: ext, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  hostnames: [ext.example]
  rules:
  - matches: [{path: {value: /admin}}]
    filters: [{type: ExtensionRef, extensionRef: {group: auth.example.net, kind: Guard, name: strict}}]
    backendRefs: [{name: v1, port: 8080}]
  - backendRefs:
    - {name: v2, port: 8080}
    - name: v1
      port: 8080
      filters: [{type: ExtensionRef, extensionRef: {group: x.example.net, kind: Tap, name: t}}]
"#,
    );
    let (b, _) = build(&w);
    let t = &b.table;
    // Not dropped: `/` would otherwise serve `/admin` without the filter.
    assert_eq!(get(t, "ext.example", "/admin/users"), "500");
    // On a backendRef: that backend's share is answered 500, the others serve.
    assert_eq!(get(t, "ext.example", "/"), "infra/v2:8080+500");
    let c = route_conditions(&b, "ext");
    assert_eq!(
        (c[0].0.as_str(), c[0].1.as_str()),
        ("Accepted", "True"),
        "{c:?}"
    );
    assert_eq!(
        (c[1].0.as_str(), c[1].1.as_str(), c[1].2.as_str()),
        ("ResolvedRefs", "False", "InvalidKind")
    );
    assert!(c[1].3.contains("ExtensionRef"), "{}", c[1].3);
    assert!(c.iter().all(|c| c.0 != "PartiallyInvalid"), "{c:?}");
}

#[test]
fn a_route_holds_a_bounded_number_of_regular_expressions() {
    // Three rules of 30 patterns each (a path and 29 headers): the third would pass 64.
    let rule = |i: usize| {
        let headers: Vec<String> = (0..29)
            .map(|h| format!("{{type: RegularExpression, name: h{h}, value: \"v.*\"}}"))
            .collect();
        format!(
            "  - matches: [{{path: {{type: RegularExpression, value: \"/r{i}/.*\"}}, headers: [{}]}}]\n    backendRefs: [{{name: v1, port: 8080}}]\n",
            headers.join(", ")
        )
    };
    let route = format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: many, namespace: infra}}\nspec:\n  parentRefs: [{{name: gw}}]\n  rules:\n{}{}{}",
        rule(0),
        rule(1),
        rule(2)
    );
    let (b, warnings) = build(&with_route(&route));
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let c = route_conditions(&b, "many");
    let p = c
        .iter()
        .find(|c| c.0 == "PartiallyInvalid")
        .expect("PartiallyInvalid");
    assert_eq!(
        p.3,
        "Dropped Rule 2: the route would hold more than 64 regular expressions"
    );
    // `Req` holds static names: 29 leaked strings in a test.
    let headers = (0..29)
        .map(|h| (&*Box::leak(format!("h{h}").into_boxed_str()), "v1"))
        .collect();
    let all = Req("GET", headers, None);
    assert_eq!(goes(&b.table, "h", "/r1/x", &all), "infra/v1:8080");
    assert_eq!(goes(&b.table, "h", "/r2/x", &all), "404");
}

#[test]
fn equal_patterns_build_equal_tables() {
    let route = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: RegularExpression, value: "/a+"}, headers: [{type: RegularExpression, name: h, value: "x|y"}]}]
    backendRefs: [{name: v1, port: 8080}]
"#;
    let (a, _) = build(&with_route(route));
    let (b, _) = build(&with_route(route));
    assert_eq!(a.table.gateway, b.table.gateway);
    let (c, _) = build(&with_route(&route.replace("/a+", "/a*")));
    assert_ne!(a.table.gateway, c.table.gateway);
}

/// The compiled pattern of `source` in `t` (the first, when several routes use it).
fn pattern<'t>(t: &'t RoutingTable, source: &str) -> &'t crate::table::pattern::Pattern {
    t.gateway
        .patterns()
        .find(|p| p.as_str() == source)
        .unwrap_or_else(|| panic!("no pattern {source}"))
}

#[test]
fn unchanged_patterns_are_taken_from_the_previous_table_not_compiled_again() {
    let route = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: RegularExpression, value: "/a+"}, headers: [{type: RegularExpression, name: h, value: "x|y"}], queryParams: [{type: RegularExpression, name: q, value: "[0-9]+"}]}]
    backendRefs: [{name: v1, port: 8080}]
"#;
    let w = with_route(route);
    let (first, _) = build(&w);
    let refs = IngressRefs::of([], [], w.secrets.iter())
        .with_config_maps(w.config_maps.iter())
        .with_gateway(GatewayRefs {
            classes: w.classes.iter().collect(),
            gateways: w.gateways.iter().collect(),
            routes: w.routes.iter().collect(),
            grpc_routes: Vec::new(),
            tcp_routes: Vec::new(),
            tls_routes: Vec::new(),
            udp_routes: Vec::new(),
            listener_sets: Vec::new(),
            backend_tls_policies: Vec::new(),
            grants: w.grants.iter().collect(),
            namespaces: w.namespaces.iter().collect(),
        });
    let (second, _) = translate_with(
        &w.services,
        &w.slices,
        refs.inputs(),
        &Options::default(),
        Some(&first.table),
    );
    for source in ["/a+", "x|y", "[0-9]+"] {
        assert!(
            pattern(&second.table, source).shares(pattern(&first.table, source)),
            "{source} compiled again"
        );
    }
    // A Gateway-only build reuses them too; a changed pattern is compiled, the others not.
    let (b1, _) = build_changes(&w, None, None);
    let changed = with_route(&route.replace("/a+", "/a*"));
    let told = Changes {
        gateway: true,
        ..Default::default()
    };
    let (quick, _) = build_changes(&changed, Some(&told), Some(b1.previous()));
    assert!(pattern(&quick.table, "x|y").shares(pattern(&b1.table, "x|y")));
    assert!(pattern(&quick.table, "[0-9]+").shares(pattern(&b1.table, "[0-9]+")));
    assert_eq!(pattern(&quick.table, "/a*").as_str(), "/a*");
    assert!(b1.table.gateway.patterns().all(|p| p.as_str() != "/a*"));
    // Without a previous table, each build compiles its own.
    let (again, _) = build(&w);
    assert!(!pattern(&again.table, "/a+").shares(pattern(&first.table, "/a+")));
}

#[test]
fn hosts_no_listener_takes_are_left_to_services_and_ingresses() {
    let w = world(&BASE.replace(
        "- {name: http, port: 80, protocol: HTTP}",
        "- {name: http, port: 80, protocol: HTTP, hostname: \"*.example.com\"}",
    ));
    let (b, _) = build(&w);
    assert_eq!(get(&b.table, "a.example.com", "/"), "404");
    assert_eq!(get(&b.table, "example.com", "/"), "not gateway");
    assert_eq!(get(&b.table, "other.org", "/"), "not gateway");
}

/// Stores keyed as the cluster source keeps them.
fn keyed<T: k8s_openapi::Metadata<Ty = ObjectMeta> + Clone>(items: &[T]) -> Store<T> {
    items
        .iter()
        .map(|i| {
            let m = i.metadata();
            let (ns, name) = super::meta_key(&m.namespace, &m.name);
            ((ns.to_string(), name.to_string()), i.clone())
        })
        .collect()
}

fn build_changes(
    w: &World,
    changes: Option<&Changes>,
    prev: Option<Previous<'_>>,
) -> (Built, Vec<Warning>) {
    build_changes_with(w, changes, prev, &Options::default())
}

/// `build_changes` with `options`.
fn build_changes_with(
    w: &World,
    changes: Option<&Changes>,
    prev: Option<Previous<'_>>,
    options: &Options,
) -> (Built, Vec<Warning>) {
    let refs = IngressRefs::of([], [], w.secrets.iter())
        .with_config_maps(w.config_maps.iter())
        .with_gateway(GatewayRefs {
            classes: w.classes.iter().collect(),
            gateways: w.gateways.iter().collect(),
            routes: w.routes.iter().collect(),
            grpc_routes: w.grpc_routes.iter().collect(),
            tcp_routes: w.tcp_routes.iter().collect(),
            tls_routes: w.tls_routes.iter().collect(),
            udp_routes: w.udp_routes.iter().collect(),
            listener_sets: w.listener_sets.iter().collect(),
            backend_tls_policies: w.policies.iter().collect(),
            grants: w.grants.iter().collect(),
            namespaces: w.namespaces.iter().collect(),
        });
    let mut services = w.services.clone();
    let mut slices = w.slices.clone();
    for (i, s) in services.iter_mut().enumerate() {
        s.metadata.resource_version = Some(format!("{}", 100 + i));
    }
    for (i, s) in slices.iter_mut().enumerate() {
        s.metadata.resource_version = Some(format!("{}", 200 + i));
    }
    translate_changes(
        &keyed(&services),
        &keyed(&slices),
        refs.inputs(),
        changes,
        options,
        prev,
    )
}

#[test]
fn a_gateway_only_change_builds_what_a_full_build_would() {
    let route = |path: &str, svc: &str| {
        format!(
            r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r, namespace: infra}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - matches: [{{path: {{value: {path}}}}}]
    backendRefs: [{{name: {svc}, port: 8080}}]
"#
        )
    };
    let before = with_route(&route("/a", "v1"));
    let (b1, _) = build_changes(&before, None, None);
    let told = Changes {
        gateway: true,
        ..Default::default()
    };
    // Changes that the shared entries can serve, one that makes a warning, and one that drops
    // the route; each equal to a full build of the same objects.
    for after in [route("/b", "v2"), route("/c", "missing"), String::new()] {
        let w = if after.is_empty() {
            world(BASE)
        } else {
            with_route(&after)
        };
        let (quick, wq) = build_changes(&w, Some(&told), Some(b1.previous()));
        let (full, wf) = build_changes(&w, None, Some(b1.previous()));
        assert!(quick.table == full.table, "tables differ for {after}");
        assert_eq!(wq, wf);
        assert_eq!(quick.memo.gateway_status(), full.memo.gateway_status());
        // The quick build shared the entries (no Service was redone).
        assert!(Arc::ptr_eq(&quick.table.entries[0], &b1.table.entries[0]));
    }
}

#[test]
fn a_gateway_only_change_that_needs_a_new_entry_is_a_full_build() {
    // A LoadBalancer Service has no entry of its own: a route to it needs one made.
    let lb = r#"
apiVersion: v1
kind: Service
metadata: {name: lb, namespace: infra}
spec: {type: LoadBalancer, ports: [{port: 8080}]}
"#;
    let before = with_route(lb);
    let (b1, _) = build_changes(&before, None, None);
    let after = with_route(&format!(
        "{lb}\n---\n{}",
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: lb, port: 8080}]}]
"#
    ));
    let told = Changes {
        gateway: true,
        ..Default::default()
    };
    let (quick, _) = build_changes(&after, Some(&told), Some(b1.previous()));
    let (full, _) = build_changes(&after, None, None);
    assert!(quick.table == full.table);
    assert_eq!(get(&quick.table, "h", "/"), "infra/lb:8080");
}

// === --gateway-addresses ===

/// `BASE` plus a second Gateway `other` (port 80, no hostname) and a route for `/` on each:
/// `gw`'s to v1, `other`'s to v2.
const TWO_GATEWAYS: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: other, namespace: infra, creationTimestamp: "2026-01-02T00:00:00Z"}
spec:
  gatewayClassName: sy
  listeners:
  - {name: http, port: 80, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: on-gw, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: v1, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: on-other, namespace: infra}
spec:
  parentRefs: [{name: other}]
  rules: [{backendRefs: [{name: v2, port: 8080}]}]
"#;

fn ip(s: &str) -> std::net::IpAddr {
    s.parse().unwrap()
}

fn with_pool(pool: &[&str]) -> Options {
    Options {
        gateway_addresses: pool.iter().map(|s| ip(s)).collect(),
        ..Options::default()
    }
}

fn build_at(w: &World, options: &Options, previous: Option<&RoutingTable>) -> Built {
    build_at_warned(w, options, previous).0
}

fn build_at_warned(
    w: &World,
    options: &Options,
    previous: Option<&RoutingTable>,
) -> (Built, Vec<Warning>) {
    let refs = IngressRefs::of([], [], w.secrets.iter())
        .with_config_maps(w.config_maps.iter())
        .with_gateway(GatewayRefs {
            classes: w.classes.iter().collect(),
            gateways: w.gateways.iter().collect(),
            routes: w.routes.iter().collect(),
            grpc_routes: Vec::new(),
            tcp_routes: Vec::new(),
            tls_routes: Vec::new(),
            udp_routes: Vec::new(),
            listener_sets: Vec::new(),
            backend_tls_policies: Vec::new(),
            grants: w.grants.iter().collect(),
            namespaces: w.namespaces.iter().collect(),
        });
    translate_with(&w.services, &w.slices, refs.inputs(), options, previous)
}

/// Where a request to local address `local` goes (`goes`, for one address).
fn get_at(t: &RoutingTable, local: &str, host: &str, path: &str) -> String {
    let g = &t.gateway;
    match g.lookup_at(
        (Some(ip(local)), None),
        false,
        Some(host.as_bytes()),
        path,
        &BareRequest::GET,
    ) {
        GatewayMatch::NoRoute => "404".into(),
        GatewayMatch::NotTaken => "not gateway".into(),
        GatewayMatch::Matched(_, c) => match &c.rule.action {
            Action::Backends(b) => t
                .entry(b.backends[0].entry.unwrap())
                .unwrap()
                .name
                .to_string(),
            other => format!("{other:?}"),
        },
    }
}

/// A Gateway's status: its addresses and (type, status, reason) of its conditions.
fn gateway_status(b: &Built, name: &str) -> (Vec<String>, Vec<(String, String, String)>) {
    let st = &b.memo.gateway_status().gateways[&("infra".to_string(), name.to_string())];
    (
        st.addresses.iter().map(|a| a.value.clone()).collect(),
        st.conditions
            .iter()
            .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
            .collect(),
    )
}

fn condition(b: &Built, name: &str, type_: &str) -> (String, String) {
    let (_, conditions) = gateway_status(b, name);
    conditions
        .into_iter()
        .find(|c| c.0 == type_)
        .map(|c| (c.1, c.2))
        .unwrap()
}

#[test]
fn each_gateway_with_an_address_answers_alone_on_it() {
    let w = world(&format!("{BASE}\n---\n{TWO_GATEWAYS}"));
    // Without the flag both routes meet on one host level: the older route (on-gw) wins.
    let (shared, _) = build(&w);
    assert_eq!(get(&shared.table, "h", "/"), "infra/v1:8080");
    assert!(shared.table.gateway.addressed.is_empty());
    assert!(!shared.memo.gateway_status().own_addresses);
    assert!(gateway_status(&shared, "gw").0.is_empty());

    let b = build_at(&w, &with_pool(&["127.0.0.2", "127.0.0.3"]), None);
    // gw has no creation time (the oldest), other's is set: gw gets the pool's first.
    assert_eq!(gateway_status(&b, "gw").0, ["127.0.0.2"]);
    assert_eq!(gateway_status(&b, "other").0, ["127.0.0.3"]);
    assert_eq!(
        condition(&b, "other", "Programmed"),
        ("True".into(), "Programmed".into())
    );
    assert!(b.memo.gateway_status().own_addresses);
    assert_eq!(get_at(&b.table, "127.0.0.2", "h", "/"), "infra/v1:8080");
    assert_eq!(get_at(&b.table, "127.0.0.3", "h", "/"), "infra/v2:8080");
    // Any other address: no shared Gateway, the Services and Ingresses decide.
    assert_eq!(get_at(&b.table, "127.0.0.1", "h", "/"), "not gateway");
    assert_eq!(get(&b.table, "h", "/"), "not gateway");

    // The pool's order is the order addresses are handed out in, not the order they are
    // looked up in: gw (first by name) gets the higher address and is still found there.
    let b = build_at(&w, &with_pool(&["127.0.0.3", "127.0.0.2"]), None);
    assert_eq!(gateway_status(&b, "gw").0, ["127.0.0.3"]);
    assert_eq!(get_at(&b.table, "127.0.0.3", "h", "/"), "infra/v1:8080");
    assert_eq!(get_at(&b.table, "127.0.0.2", "h", "/"), "infra/v2:8080");
}

#[test]
fn addresses_stay_with_their_gateways_across_rebuilds() {
    let w = world(&format!("{BASE}\n---\n{TWO_GATEWAYS}"));
    let pool = with_pool(&["127.0.0.2", "127.0.0.3", "127.0.0.4"]);
    let first = build_at(&w, &pool, None);
    // A new Gateway older than both (an earlier creation time, a name that sorts first)
    // comes: the two keep their addresses, the new one gets the free one.
    let newer = world(&format!(
        "{BASE}\n---\n{TWO_GATEWAYS}\n---\n{}",
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: aaa, namespace: infra}
spec:
  gatewayClassName: sy
  listeners:
  - {name: http, port: 80, protocol: HTTP}
"#
    ));
    let again = build_at(&newer, &pool, Some(&first.table));
    assert_eq!(gateway_status(&again, "gw").0, ["127.0.0.2"]);
    assert_eq!(gateway_status(&again, "other").0, ["127.0.0.3"]);
    assert_eq!(gateway_status(&again, "aaa").0, ["127.0.0.4"]);
    // From scratch the same objects are assigned oldest first: deterministic either way.
    let fresh = build_at(&newer, &pool, None);
    assert_eq!(gateway_status(&fresh, "aaa").0, ["127.0.0.2"]);
    assert_eq!(gateway_status(&fresh, "gw").0, ["127.0.0.3"]);
    assert!(build_at(&newer, &pool, None).table == fresh.table);
    // After a restart (no previous table) the address a Gateway's status shows is kept.
    let mut restarted = newer;
    for g in &mut restarted.gateways {
        g.status = Some(
            again.memo.gateway_status().gateways
                [&("infra".to_string(), g.metadata.name.clone().unwrap())]
                .clone(),
        );
    }
    let after = build_at(&restarted, &pool, None);
    assert_eq!(gateway_status(&after, "aaa").0, ["127.0.0.4"]);
    assert_eq!(gateway_status(&after, "gw").0, ["127.0.0.2"]);
}

#[test]
fn an_address_asked_for_is_given_or_refused_in_status() {
    let asked = |value: &str| {
        world(&format!(
            "{BASE}\n---\n{}",
            TWO_GATEWAYS.replacen(
                "  gatewayClassName: sy\n",
                &format!("  gatewayClassName: sy\n  addresses: [{value}]\n"),
                1
            )
        ))
    };
    let pool = with_pool(&["127.0.0.2", "127.0.0.3"]);
    // `other` asks for .2: it gets it although gw is older; gw gets the other one.
    let b = build_at(&asked("{type: IPAddress, value: 127.0.0.2}"), &pool, None);
    assert_eq!(gateway_status(&b, "other").0, ["127.0.0.2"]);
    assert_eq!(gateway_status(&b, "gw").0, ["127.0.0.3"]);
    assert_eq!(get_at(&b.table, "127.0.0.2", "h", "/"), "infra/v2:8080");
    // Outside the pool: not programmed, not served anywhere, and it says so.
    let b = build_at(&asked("{value: 10.9.9.9}"), &pool, None);
    assert_eq!(
        condition(&b, "other", "Programmed"),
        ("False".into(), "AddressNotUsable".into())
    );
    assert_eq!(
        condition(&b, "other", "Accepted"),
        ("True".into(), "Accepted".into())
    );
    assert!(gateway_status(&b, "other").0.is_empty());
    assert!(
        b.table
            .gateway
            .assigned()
            .all(|(_, name, _)| name != "other")
    );
    // Another type: refused.
    let b = build_at(
        &asked("{type: Hostname, value: gw.example.com}"),
        &pool,
        None,
    );
    assert_eq!(
        condition(&b, "other", "Accepted"),
        ("False".into(), "UnsupportedAddress".into())
    );
    // Taken by a Gateway that has it: refused, the holder keeps it.
    let first = build_at(&world(&format!("{BASE}\n---\n{TWO_GATEWAYS}")), &pool, None);
    let b = build_at(
        &asked("{type: IPAddress, value: 127.0.0.2}"),
        &pool,
        Some(&first.table),
    );
    assert_eq!(gateway_status(&b, "gw").0, ["127.0.0.2"]);
    assert_eq!(
        condition(&b, "other", "Programmed"),
        ("False".into(), "AddressNotUsable".into())
    );
    // Without the flag spec.addresses is refused as before.
    let (b, _) = build(&asked("{value: 127.0.0.2}"));
    assert_eq!(
        condition(&b, "other", "Accepted"),
        ("False".into(), "UnsupportedAddress".into())
    );
}

#[test]
fn an_exhausted_pool_leaves_a_gateway_unserved_and_says_so() {
    let w = world(&format!("{BASE}\n---\n{TWO_GATEWAYS}"));
    let (b, warnings) = build_at_warned(&w, &with_pool(&["127.0.0.2"]), None);
    assert!(
        warnings
            .iter()
            .any(|w| w.object.name == "other" && w.message.contains("not served")),
        "{warnings:?}"
    );
    assert_eq!(gateway_status(&b, "gw").0, ["127.0.0.2"]);
    let (addresses, _) = gateway_status(&b, "other");
    assert!(addresses.is_empty());
    assert_eq!(
        condition(&b, "other", "Programmed"),
        ("False".into(), "AddressNotAssigned".into())
    );
    let st = &b.memo.gateway_status().gateways[&("infra".to_string(), "other".to_string())];
    assert!(
        st.listeners[0]
            .conditions
            .iter()
            .any(|c| c.type_ == "Programmed" && c.status == "False")
    );
    // Its route is served nowhere: not on the shared frontend, not at gw's address.
    assert_eq!(get_at(&b.table, "127.0.0.2", "h", "/"), "infra/v1:8080");
    assert_eq!(get_at(&b.table, "127.0.0.9", "h", "/"), "not gateway");
}

#[test]
fn a_gateway_asking_for_several_addresses_gets_them_all_or_none() {
    let asked = |values: &str| {
        world(&format!(
            "{BASE}\n---\n{}",
            TWO_GATEWAYS.replacen(
                "  gatewayClassName: sy\n",
                &format!("  gatewayClassName: sy\n  addresses: [{values}]\n"),
                1
            )
        ))
    };
    let pool = with_pool(&["127.0.0.2", "127.0.0.3", "127.0.0.4"]);
    let w = asked("{value: 127.0.0.4}, {value: 127.0.0.2}");
    let b = build_at(&w, &pool, None);
    // Both, in the order asked; gw gets the free one.
    assert_eq!(gateway_status(&b, "other").0, ["127.0.0.4", "127.0.0.2"]);
    assert_eq!(gateway_status(&b, "gw").0, ["127.0.0.3"]);
    assert_eq!(
        condition(&b, "other", "Programmed"),
        ("True".into(), "Programmed".into())
    );
    for at in ["127.0.0.2", "127.0.0.4"] {
        assert_eq!(get_at(&b.table, at, "h", "/"), "infra/v2:8080", "{at}");
    }
    assert_eq!(get_at(&b.table, "127.0.0.3", "h", "/"), "infra/v1:8080");
    // Kept across a rebuild, and after a restart from its status.
    let again = build_at(&w, &pool, Some(&b.table));
    assert!(again.table == b.table);
    let mut restarted = asked("{value: 127.0.0.4}, {value: 127.0.0.2}");
    for g in &mut restarted.gateways {
        g.status = Some(
            b.memo.gateway_status().gateways
                [&("infra".to_string(), g.metadata.name.clone().unwrap())]
                .clone(),
        );
    }
    assert!(build_at(&restarted, &pool, None).table == b.table);
    // One of them outside the pool, or taken: none, and it is served nowhere.
    for (values, why) in [
        (
            "{value: 127.0.0.4}, {value: 10.9.9.9}",
            "10.9.9.9 is not one of --gateway-addresses",
        ),
        (
            "{value: 127.0.0.4}, {value: 127.0.0.2}",
            "127.0.0.2 is taken by Gateway infra/gw",
        ),
    ] {
        let taken = build_at(&world(&format!("{BASE}\n---\n{TWO_GATEWAYS}")), &pool, None);
        let (b, warnings) = build_at_warned(&asked(values), &pool, Some(&taken.table));
        assert!(gateway_status(&b, "other").0.is_empty(), "{values}");
        assert_eq!(
            condition(&b, "other", "Programmed"),
            ("False".into(), "AddressNotUsable".into())
        );
        assert!(
            warnings
                .iter()
                .any(|w| w.object.name == "other" && w.message.contains(why)),
            "{values}: {warnings:?}"
        );
        assert_eq!(get_at(&b.table, "127.0.0.4", "h", "/"), "not gateway");
    }
}

/// Two Gateways with an HTTPS listener for one hostname, each naming its own Secret: `young`
/// (created later, first by name) and `old`.
const TWO_HTTPS_GATEWAYS: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: young, namespace: infra, creationTimestamp: "2026-02-01T00:00:00Z", generation: 2}
spec:
  gatewayClassName: sy
  listeners:
  - {name: https, port: 443, protocol: HTTPS, hostname: secure.test,
     tls: {certificateRefs: [{name: young-cert}]}}
  - {name: other, port: 443, protocol: HTTPS, hostname: young.test,
     tls: {certificateRefs: [{name: young-cert}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: old, namespace: infra, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  gatewayClassName: sy
  listeners:
  - {name: https, port: 443, protocol: HTTPS, hostname: secure.test,
     tls: {certificateRefs: [{name: old-cert}]}}
"#;

fn https_world() -> World {
    use k8s_openapi::ByteString;
    let mut w = world(&format!("{BASE}\n---\n{TWO_HTTPS_GATEWAYS}"));
    // Syntactically valid PEM (the key's fit is the TLS side's check).
    let crt = "-----BEGIN CERTIFICATE-----\nMIIBAA==\n-----END CERTIFICATE-----\n";
    let key = "-----BEGIN PRIVATE KEY-----\nMIIBAA==\n-----END PRIVATE KEY-----\n";
    for name in ["young-cert", "old-cert"] {
        w.secrets.push(k8s_openapi::api::core::v1::Secret {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("infra".into()),
                ..Default::default()
            },
            type_: Some("kubernetes.io/tls".into()),
            data: Some(BTreeMap::from([
                ("tls.crt".to_string(), ByteString(crt.as_bytes().to_vec())),
                ("tls.key".to_string(), ByteString(key.as_bytes().to_vec())),
            ])),
            ..Default::default()
        });
    }
    w
}

/// The table's certificates as (Secret, address, hosts).
fn certificates(t: &RoutingTable) -> Vec<(String, Option<String>, Vec<String>)> {
    t.certificates
        .iter()
        .map(|c| {
            (
                c.secret.to_string(),
                c.address.map(|a| a.to_string()),
                c.hosts.iter().map(|h| h.to_string()).collect(),
            )
        })
        .collect()
}

fn listener_conditions(b: &Built, gw: &str, listener: &str) -> Vec<(String, String, String)> {
    let st = &b.memo.gateway_status().gateways[&("infra".to_string(), gw.to_string())];
    st.listeners
        .iter()
        .find(|l| l.name == listener)
        .unwrap()
        .conditions
        .iter()
        .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
        .collect()
}

#[test]
fn two_gateways_giving_one_hostname_other_certificates_conflict_and_the_oldest_wins() {
    let w = https_world();
    let (b, warnings) = build_at_warned(&w, &Options::default(), None);
    // The older Gateway's Secret has the hostname; the younger's keeps only its own name.
    assert_eq!(
        certificates(&b.table),
        [
            ("infra/old-cert".into(), None, vec!["secure.test".into()]),
            ("infra/young-cert".into(), None, vec!["young.test".into()]),
        ]
    );
    let conflicted = listener_conditions(&b, "young", "https");
    assert!(
        conflicted.contains(&(
            "Conflicted".into(),
            "True".into(),
            "HostnameConflict".into()
        )),
        "{conflicted:?}"
    );
    // Still accepted and served: its routes share the host level, as on the HTTP port.
    assert!(conflicted.contains(&("Accepted".into(), "True".into(), "Accepted".into())));
    assert_eq!(
        condition(&b, "young", "Accepted"),
        ("True".into(), "ListenersNotValid".into())
    );
    assert!(listener_conditions(&b, "young", "other").contains(&(
        "Conflicted".into(),
        "False".into(),
        "NoConflicts".into()
    )));
    assert!(listener_conditions(&b, "old", "https").contains(&(
        "Conflicted".into(),
        "False".into(),
        "NoConflicts".into()
    )));
    assert_eq!(
        condition(&b, "old", "Accepted"),
        ("True".into(), "Accepted".into())
    );
    let warned: Vec<&Warning> = warnings
        .iter()
        .filter(|w| w.message.contains("secure.test"))
        .collect();
    assert_eq!(warned.len(), 1, "{warnings:?}");
    assert_eq!(warned[0].object.name, "young");
    assert!(
        warned[0].message.contains("infra/old"),
        "{}",
        warned[0].message
    );
}

#[test]
fn a_gateway_with_an_address_has_its_certificates_for_that_address_alone() {
    let w = https_world();
    let pool = with_pool(&["127.0.0.2", "127.0.0.3", "127.0.0.4"]);
    let (b, warnings) = build_at_warned(&w, &pool, None);
    // Oldest first (BASE's gw has no creation time): old gets .3, young .4; each Secret for
    // its own address, no conflict.
    assert_eq!(gateway_status(&b, "old").0, ["127.0.0.3"]);
    assert_eq!(
        certificates(&b.table),
        [
            (
                "infra/old-cert".into(),
                Some("127.0.0.3".into()),
                vec!["secure.test".into()]
            ),
            (
                "infra/young-cert".into(),
                Some("127.0.0.4".into()),
                vec!["secure.test".into(), "young.test".into()]
            ),
        ]
    );
    assert!(listener_conditions(&b, "young", "https").contains(&(
        "Conflicted".into(),
        "False".into(),
        "NoConflicts".into()
    )));
    assert!(
        !warnings.iter().any(|w| w.message.contains("secure.test")),
        "{warnings:?}"
    );
    // A Gateway left without an address serves its certificates nowhere.
    let (b, _) = build_at_warned(&w, &with_pool(&["127.0.0.2", "127.0.0.3"]), None);
    assert_eq!(
        certificates(&b.table),
        [(
            "infra/old-cert".into(),
            Some("127.0.0.3".into()),
            vec!["secure.test".into()]
        )]
    );
}

mod backend_tls;
mod cache;
mod frontend_validation;
mod grpc;
mod listener_sets;
mod own_ports;
mod streams;

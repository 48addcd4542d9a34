//! HTTP and HTTPS listeners on ports of their own (not the Gateway HTTP or HTTPS port): each
//! port a frontend of its own in the table, its routes seen only by connections to it, the
//! port claimed by the oldest Gateway, and switchyard's own ports refused.

use super::*;
use crate::table::gateway::GatewayMatch;

const OWN_PORTS: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: ports, namespace: infra, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  gatewayClassName: sy
  listeners:
  - {name: main, port: 80, protocol: HTTP, hostname: main.test}
  - {name: alt, port: 8080, protocol: HTTP}
  - {name: alt-named, port: 8080, protocol: HTTP, hostname: named.test}
  - {name: tls, port: 8443, protocol: HTTPS, tls: {certificateRefs: [{name: young-cert}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: late, namespace: infra, creationTimestamp: "2026-02-01T00:00:00Z"}
spec:
  gatewayClassName: sy
  listeners:
  - {name: same-port, port: 8080, protocol: HTTP}
  - {name: http-port-as-https, port: 80, protocol: HTTPS,
     tls: {certificateRefs: [{name: young-cert}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: on-alt, namespace: infra}
spec:
  parentRefs: [{name: ports, sectionName: alt}]
  rules: [{backendRefs: [{name: v1, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: on-named, namespace: infra}
spec:
  parentRefs: [{name: ports, sectionName: alt-named}]
  rules: [{backendRefs: [{name: v2, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: on-main, namespace: infra}
spec:
  parentRefs: [{name: ports, sectionName: main}]
  rules: [{backendRefs: [{name: v2, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: on-tls, namespace: infra}
spec:
  parentRefs: [{name: ports, sectionName: tls}]
  hostnames: [secure.test]
  rules: [{backendRefs: [{name: v1, port: 8080}]}]
"#;

/// Where a request for `host` to `port` (`None`: switchyard's own port) goes.
fn to(t: &RoutingTable, port: Option<u16>, https: bool, host: &str) -> String {
    match t.gateway.lookup_at(
        (None, port),
        https,
        Some(host.as_bytes()),
        "/",
        &BareRequest::GET,
    ) {
        GatewayMatch::Matched(_, c) => match &c.rule.action {
            crate::table::gateway::Action::Backends(b) => b
                .peek()
                .and_then(|(_, b)| b.entry)
                .and_then(|id| t.entry(id))
                .map_or("none".into(), |e| e.key.to_string()),
            _ => "answer".into(),
        },
        GatewayMatch::NoRoute => "404".into(),
        GatewayMatch::NotTaken => "not gateway".into(),
    }
}

#[test]
fn a_listener_on_another_port_is_served_on_that_port_alone() {
    let mut w = https_world();
    let more = world(&format!("{BASE}\n---\n{OWN_PORTS}"));
    w.gateways = more.gateways;
    w.routes = more.routes;
    let (b, warnings) = build_at_warned(&w, &Options::default(), None);
    let t = &b.table;
    // The port 8080 is a frontend of its own, HTTP; 8443 one for HTTPS.
    let ports: Vec<(Option<u16>, bool)> = t
        .gateway
        .ported
        .iter()
        .map(|p| (Some(p.port), p.https))
        .collect();
    assert_eq!(ports, vec![(Some(8080), false), (Some(8443), true)]);
    // On 8080: its listeners' routes, by listener isolation (the named listener's host to its
    // own route); any other host is the hostname-less listener's.
    assert_eq!(to(t, Some(8080), false, "named.test"), "infra/v2:8080");
    assert_eq!(to(t, Some(8080), false, "other.test"), "infra/v1:8080");
    // The port-80 listener's route is not on 8080, nor 8080's on port 80.
    assert_eq!(to(t, Some(8080), false, "main.test"), "infra/v1:8080");
    assert_eq!(to(t, None, false, "main.test"), "infra/v2:8080");
    // (BASE's Gateway `gw` has a port-80 listener without a hostname.)
    assert_eq!(to(t, None, false, "other.test"), "404");
    // HTTPS on 8443: its route's host; others 404 there, never the Ingresses'.
    assert_eq!(to(t, Some(8443), true, "secure.test"), "infra/v1:8080");
    assert_eq!(to(t, Some(8443), true, "else.test"), "404");
    assert_eq!(to(t, None, true, "secure.test"), "not gateway");
    // A port no listener has (any more): 404, not the Ingresses'.
    assert_eq!(to(t, Some(9999), false, "main.test"), "404");
    // The port is the oldest Gateway's; switchyard's HTTP port is not an HTTPS listener's.
    let late = |name: &str| {
        b.memo.gateway_status().gateways[&("infra".to_string(), "late".to_string())]
            .listeners
            .iter()
            .find(|l| l.name == name)
            .unwrap()
            .conditions
            .iter()
            .find(|c| c.type_ == "Accepted")
            .map(|c| (c.status.clone(), c.reason.clone()))
            .unwrap()
    };
    assert_eq!(
        late("same-port"),
        ("False".into(), "PortUnavailable".into())
    );
    assert_eq!(
        late("http-port-as-https"),
        ("False".into(), "PortUnavailable".into())
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.message.contains("same-port") && w.message.contains("infra/ports")),
        "{warnings:?}"
    );
    let conditions = listener_conditions(&b, "ports", "alt");
    assert!(
        conditions.contains(&("Programmed".into(), "True".into(), "Programmed".into())),
        "{conditions:?}"
    );
    // A redirect without a port keeps the listener's own.
    assert_eq!(t.gateway.listener_port(false, Some(8080)), 8080);
    assert_eq!(t.gateway.listener_port(false, None), 80);
}

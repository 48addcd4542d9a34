//! TCPRoute and TLSRoute translation: TCP and TLS listeners on ports of their own, the oldest
//! route of a TCP listener served, TLS server names by route, TLS listeners sharing the TLS
//! port, port conflicts, backends that do not resolve, and the status of both kinds.

use super::*;
use crate::table::stream::{SniRoute, StreamServe, sni_route};

const STREAMS: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: streams, namespace: infra, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  gatewayClassName: sy
  listeners:
  - {name: tcp, port: 9300, protocol: TCP, allowedRoutes: {kinds: [{kind: TCPRoute}]}}
  - {name: tls, port: 9443, protocol: TLS, hostname: "*.example.com", tls: {mode: Passthrough}}
  - {name: shared, port: 443, protocol: TLS, hostname: pass.example.com, tls: {mode: Passthrough}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata: {name: older, namespace: infra, creationTimestamp: "2026-01-02T00:00:00Z"}
spec:
  parentRefs: [{name: streams, sectionName: tcp}]
  rules:
  - backendRefs:
    - {name: v1, port: 8080, weight: 70}
    - {name: v2, port: 8080, weight: 30}
    - {name: missing, port: 8080, weight: 0}
---
apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata: {name: newer, namespace: infra, creationTimestamp: "2026-01-03T00:00:00Z"}
spec:
  parentRefs: [{name: streams, sectionName: tcp}]
  rules: [{backendRefs: [{name: v2, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: abc, namespace: infra}
spec:
  parentRefs: [{name: streams, sectionName: tls}]
  hostnames: [abc.example.com, other.org]
  rules: [{backendRefs: [{name: v1, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: pass, namespace: infra}
spec:
  parentRefs: [{name: streams, sectionName: shared}]
  rules: [{backendRefs: [{name: v2, port: 8080}]}]
"#;

fn streams_world(more: &str) -> World {
    if more.is_empty() {
        return world(&format!("{BASE}\n---\n{STREAMS}"));
    }
    world(&format!("{BASE}\n---\n{STREAMS}\n---\n{more}"))
}

/// The entry key of an entry id.
fn key(t: &RoutingTable, id: Option<u32>) -> String {
    id.and_then(|id| t.entry(id))
        .map_or("none".into(), |e| e.key.to_string())
}

/// (type, status, reason) of a stream route's first parent's conditions.
fn conditions(b: &Built, tls: bool, name: &str) -> Vec<(String, String, String)> {
    let st = b.memo.gateway_status();
    let map = if tls { &st.tls_routes } else { &st.tcp_routes };
    map[&("infra".to_string(), name.to_string())].parents[0]
        .conditions
        .iter()
        .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
        .collect()
}

fn listener<'s>(b: &'s Built, gw: &str, name: &str) -> &'s ListenerStatus {
    b.memo.gateway_status().gateways[&("infra".to_string(), gw.to_string())]
        .listeners
        .iter()
        .find(|l| l.name == name)
        .unwrap()
}

fn accepted(l: &ListenerStatus) -> (String, String) {
    let c = l.conditions.iter().find(|c| c.type_ == "Accepted").unwrap();
    (c.status.clone(), c.reason.clone())
}

#[test]
fn a_tcp_listener_serves_its_oldest_route_by_weight() {
    let (b, warnings) = build(&streams_world(""));
    let t = &b.table;
    let Some(StreamServe::Tcp(to)) = t.streams.port(None, 9300) else {
        panic!("no TCP port: {:?}", t.streams)
    };
    // 70/30/0 over any run of 100 connections; the newer route's backend takes none.
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for _ in 0..100 {
        let entry = to.next().and_then(|(_, b)| b.entry);
        *seen.entry(key(t, entry)).or_default() += 1;
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen["infra/v1:8080"], 70);
    assert_eq!(seen["infra/v2:8080"], 30);
    // Both accepted, both counted; the one that does not resolve says so.
    let older = conditions(&b, false, "older");
    assert_eq!(
        older[0],
        ("Accepted".into(), "True".into(), "Accepted".into())
    );
    assert_eq!(
        older[1],
        (
            "ResolvedRefs".into(),
            "False".into(),
            "BackendNotFound".into()
        )
    );
    assert_eq!(
        conditions(&b, false, "newer"),
        [
            ("Accepted".into(), "True".into(), "Accepted".into()),
            ("ResolvedRefs".into(), "True".into(), "ResolvedRefs".into())
        ]
    );
    let tcp = listener(&b, "streams", "tcp");
    assert_eq!(tcp.attached_routes, 2);
    assert_eq!(accepted(tcp), ("True".into(), "Accepted".into()));
    assert_eq!(tcp.supported_kinds[0].kind, "TCPRoute");
    assert!(warnings.iter().any(|w| w.message.contains("missing")));
}

#[test]
fn tls_listeners_route_by_server_name_on_their_port_and_on_the_tls_port() {
    let (b, _) = build(&streams_world(""));
    let t = &b.table;
    let Some(StreamServe::Tls(routes)) = t.streams.port(None, 9443) else {
        panic!("no TLS port: {:?}", t.streams)
    };
    let to = |routes: &[SniRoute], name: Option<&str>| {
        key(
            t,
            sni_route(routes, name, None).and_then(|b| b.peek().and_then(|(_, b)| b.entry)),
        )
    };
    assert_eq!(to(routes, Some("abc.example.com")), "infra/v1:8080");
    // The route's other name is not the listener's: not taken. Nor are names no route has.
    assert_eq!(to(routes, Some("other.org")), "none");
    assert_eq!(to(routes, Some("def.example.com")), "none");
    assert_eq!(to(routes, None), "none");
    // The route without hostnames takes its listener's, on the TLS port (443 is
    // --gateway-https-port): relayed there before any handshake.
    assert_eq!(
        to(&t.streams.passthrough, Some("pass.example.com")),
        "infra/v2:8080"
    );
    assert_eq!(to(&t.streams.passthrough, Some("x.example.com")), "none");
    assert!(t.streams.port(None, 443).is_none());
    assert_eq!(listener(&b, "streams", "tls").attached_routes, 1);
    assert_eq!(listener(&b, "streams", "shared").attached_routes, 1);
    assert_eq!(
        conditions(&b, true, "abc")[0],
        ("Accepted".into(), "True".into(), "Accepted".into())
    );
    // A TLS listener's hostname is not an HTTP listener's: plain HTTP requests for it are
    // not the Gateway's (no listener isolation from it).
    for hosts in [&t.gateway.http_hosts, &t.gateway.https_hosts] {
        assert!(hosts.id(Some("pass.example.com"), false).is_none());
        assert!(hosts.id(Some(".example.com"), true).is_none());
    }
}

#[test]
fn tls_listeners_in_terminate_mode_carry_their_certificates_to_their_port() {
    let more = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: term, namespace: infra, creationTimestamp: "2026-02-01T00:00:00Z"}
spec:
  gatewayClassName: sy
  listeners:
  - {name: term, port: 9800, protocol: TLS, hostname: t.example.com,
     tls: {mode: Terminate, certificateRefs: [{name: young-cert}]}}
  - {name: pass, port: 9800, protocol: TLS, hostname: p.example.com, tls: {mode: Passthrough}}
  - {name: no-cert, port: 9801, protocol: TLS, tls: {certificateRefs: [{name: missing}]}}
  - {name: on-https, port: 443, protocol: TLS, hostname: h.example.com,
     tls: {mode: Terminate, certificateRefs: [{name: young-cert}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: t, namespace: infra}
spec:
  parentRefs: [{name: term}]
  rules: [{backendRefs: [{name: v1, port: 8080}]}]
"#;
    let mut w = https_world();
    let s = streams_world(more);
    w.gateways = s.gateways;
    w.tls_routes = s.tls_routes;
    let (b, warnings) = build(&w);
    let t = &b.table;
    let certs = |port, name| t.streams.terminate(None, port, Some(name)).map(|c| c.len());
    // Terminated with the listener's one certificate; the other name on the port passes
    // through; neither is on the TLS port's SNI.
    assert_eq!(certs(9800, "t.example.com"), Some(1));
    assert_eq!(certs(9800, "p.example.com"), None);
    assert!(
        !certificates(t)
            .iter()
            .any(|(_, _, hosts)| hosts.contains(&"t.example.com".to_string())),
        "{:?}",
        certificates(t)
    );
    // Terminate is the default mode; a certificate that does not resolve terminates with
    // none (every handshake fails), never passes through.
    assert_eq!(certs(9801, "any.example.com"), Some(0));
    let no_cert = listener(&b, "term", "no-cert");
    assert!(
        no_cert
            .conditions
            .iter()
            .any(|c| c.type_ == "ResolvedRefs" && c.reason == "InvalidCertificateRef"),
        "{no_cert:?}"
    );
    assert_eq!(
        accepted(listener(&b, "term", "term")),
        ("True".into(), "Accepted".into())
    );
    // Not on the Gateway HTTPS port, where HTTPS listeners terminate.
    assert_eq!(
        accepted(listener(&b, "term", "on-https")),
        ("False".into(), "UnsupportedValue".into())
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.message.contains("on-https") && w.message.contains("Terminate")),
        "{warnings:?}"
    );
}

#[test]
fn ports_switchyard_has_or_another_gateway_took_are_refused() {
    let more = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: late, namespace: infra, creationTimestamp: "2026-02-01T00:00:00Z"}
spec:
  gatewayClassName: sy
  listeners:
  - {name: same-port, port: 9300, protocol: TCP}
  - {name: http-port, port: 80, protocol: TCP}
  - {name: tls-port, port: 443, protocol: TCP}
  - {name: terminate, port: 9500, protocol: TLS, tls: {mode: Reencrypt}}
  - {name: sctp, port: 9600, protocol: SCTP}
  - {name: free, port: 9700, protocol: TCP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata: {name: late-route, namespace: infra}
spec:
  parentRefs: [{name: late}]
  rules: [{backendRefs: [{name: v1, port: 8080}]}]
"#;
    let (b, warnings) = build(&streams_world(more));
    let reason = |name: &str| accepted(listener(&b, "late", name));
    assert_eq!(
        reason("same-port"),
        ("False".into(), "PortUnavailable".into())
    );
    assert_eq!(
        reason("http-port"),
        ("False".into(), "PortUnavailable".into())
    );
    assert_eq!(
        reason("tls-port"),
        ("False".into(), "PortUnavailable".into())
    );
    assert_eq!(
        reason("terminate"),
        ("False".into(), "UnsupportedValue".into())
    );
    assert_eq!(
        reason("sctp"),
        ("False".into(), "UnsupportedProtocol".into())
    );
    assert_eq!(reason("free"), ("True".into(), "Accepted".into()));
    assert!(
        warnings
            .iter()
            .any(|w| w.message.contains("is opened for Gateway infra/streams")),
        "{warnings:?}"
    );
    // The older Gateway keeps its port; the newer one serves where it may.
    let Some(StreamServe::Tcp(to)) = b.table.streams.port(None, 9300) else {
        panic!()
    };
    assert_eq!(to.total, 100);
    assert!(b.table.streams.port(None, 9700).is_some());
    assert_eq!(listener(&b, "late", "free").attached_routes, 1);
    assert_eq!(listener(&b, "late", "same-port").attached_routes, 0);
}

#[test]
fn a_listener_on_a_tcp_services_port_or_an_own_port_is_refused() {
    let w = streams_world("");
    let options = Options {
        tcp_services: vec![TcpService {
            namespace: None,
            name: "db".into(),
            port: 9300,
        }],
        own_ports: vec![9443],
        ..Options::default()
    };
    let (b, _) = build_changes_with(&w, None, None, &options);
    assert_eq!(
        accepted(listener(&b, "streams", "tcp")),
        ("False".into(), "PortUnavailable".into())
    );
    assert_eq!(
        accepted(listener(&b, "streams", "tls")),
        ("False".into(), "PortUnavailable".into())
    );
    assert!(b.table.streams.ports.is_empty());
    // Routes on a refused listener are not accepted there.
    assert_eq!(conditions(&b, false, "older")[0].1, "False");
}

#[test]
fn a_gateway_only_change_to_stream_routes_builds_what_a_full_build_would() {
    let (b1, _) = build_changes(&streams_world(""), None, None);
    let told = Changes {
        gateway: true,
        ..Default::default()
    };
    let newer_only = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata: {name: older, namespace: infra, creationTimestamp: "2026-01-02T00:00:00Z"}
spec:
  parentRefs: [{name: streams, sectionName: tcp}]
  rules: [{backendRefs: [{name: v2, port: 8080}]}]
"#;
    let mut w = streams_world("");
    w.tcp_routes.clear();
    let extra = world(newer_only);
    w.tcp_routes = extra.tcp_routes;
    let (quick, wq) = build_changes(&w, Some(&told), Some(b1.previous()));
    let (full, wf) = build_changes(&w, None, Some(b1.previous()));
    assert!(quick.table == full.table);
    assert_eq!(wq, wf);
    assert_eq!(quick.memo.gateway_status(), full.memo.gateway_status());
    assert_ne!(quick.table.streams, b1.table.streams);
    assert_eq!(listener(&quick, "streams", "tcp").attached_routes, 1);
}

const UDP: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: udp, namespace: infra, creationTimestamp: "2026-01-05T00:00:00Z"}
spec:
  gatewayClassName: sy
  listeners:
  - {name: dns, port: 9300, protocol: UDP}
---
apiVersion: v1
kind: Service
metadata: {name: dns, namespace: infra}
spec: {ports: [{name: dns, port: 53, protocol: UDP}, {name: dns-tcp, port: 53, protocol: TCP}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: dns-a, namespace: infra, labels: {kubernetes.io/service-name: dns}}
addressType: IPv4
ports: [{name: dns, port: 5353, protocol: UDP}, {name: dns-tcp, port: 5353, protocol: TCP}]
endpoints: [{addresses: [10.0.0.7, 10.0.0.8]}, {addresses: [10.0.0.9], conditions: {ready: false}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: UDPRoute
metadata: {name: dns, namespace: infra}
spec:
  parentRefs: [{name: udp}]
  rules:
  - backendRefs:
    - {name: dns, port: 53, weight: 3}
    - {name: v1, port: 8080, weight: 1}
"#;

#[test]
fn a_udp_listener_relays_to_its_routes_udp_endpoints() {
    // Port 9300 is also the older Gateway's TCP listener's: UDP ports are apart.
    let (b, warnings) = build(&streams_world(UDP));
    let to = b.table.streams.udp_port(None, 9300).expect("a UDP port");
    assert_eq!(to.total, 4);
    assert_eq!(&*to.backends[0].service, "infra/dns:53");
    let endpoints: Vec<String> = to.backends[0]
        .endpoints
        .iter()
        .map(|e| e.to_string())
        .collect();
    // Ready endpoints only, on the slice's UDP port.
    assert_eq!(endpoints, ["10.0.0.7:5353", "10.0.0.8:5353"]);
    // v1 has no UDP port: its share is refused, and the route says so.
    assert!(to.backends[1].endpoints.is_empty());
    let st = b.memo.gateway_status();
    let c = &st.udp_routes[&("infra".to_string(), "dns".to_string())].parents[0].conditions;
    assert_eq!(
        (c[0].type_.as_str(), c[0].status.as_str()),
        ("Accepted", "True")
    );
    assert_eq!(
        (c[1].status.as_str(), c[1].reason.as_str()),
        ("False", "BackendNotFound")
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.message.contains("no UDP port 8080"))
    );
    assert_eq!(
        accepted(listener(&b, "udp", "dns")),
        ("True".into(), "Accepted".into())
    );
    assert_eq!(
        listener(&b, "udp", "dns").supported_kinds[0].kind,
        "UDPRoute"
    );
    assert!(
        b.table.streams.port(None, 9300).is_some(),
        "the TCP port stays"
    );
}

#[test]
fn endpoint_changes_of_a_udp_backend_rebuild_in_full() {
    let w = streams_world(UDP);
    let (b1, _) = build_changes(&w, None, None);
    let mut w2 = streams_world(UDP);
    for s in &mut w2.slices {
        if s.metadata.name.as_deref() == Some("dns-a") {
            let e = s.endpoints.as_mut().unwrap();
            e.truncate(1);
            e[0].addresses = vec!["10.0.0.7".into()];
        }
    }
    let told = Changes {
        slices: [("infra".to_string(), "dns-a".to_string())].into(),
        ..Default::default()
    };
    let (quick, _) = build_changes(&w2, Some(&told), Some(b1.previous()));
    let (full, _) = build_changes(&w2, None, None);
    assert!(quick.table == full.table);
    let to = quick.table.streams.udp_port(None, 9300).unwrap();
    assert_eq!(to.backends[0].endpoints.len(), 1);
}

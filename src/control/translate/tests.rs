//! Translation rules, one behaviour per test, built from fixture helpers; plus property tests.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    ClientIPConfig, Service, ServicePort, ServiceSpec, SessionAffinityConfig,
};
use k8s_openapi::api::discovery::v1::{
    Endpoint as SliceEndpoint, EndpointConditions, EndpointPort, EndpointSlice,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use proptest::prelude::*;

use super::*;

// === fixtures ===

/// The function under test with concrete input types, so `&[]` needs no annotation.
fn translate(
    services: &[Service],
    slices: &[EndpointSlice],
    options: &Options,
    previous: Option<&RoutingTable>,
) -> (RoutingTable, Vec<Warning>) {
    super::translate(services, slices, options, previous)
}

fn mk_service(ns: &str, name: &str, ports: &[u16]) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            ports: Some(
                ports
                    .iter()
                    .map(|&p| ServicePort {
                        name: Some(format!("p{p}")),
                        port: p.into(),
                        protocol: Some("TCP".into()),
                        ..Default::default()
                    })
                    .collect(),
            ),
            cluster_ip: Some("10.96.0.10".into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn annotate(mut svc: Service, key: &str, value: &str) -> Service {
    svc.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key.into(), value.into());
    svc
}

fn mk_slice(ns: &str, svc: &str, port_name: &str, port: u16, addrs: &[&str]) -> EndpointSlice {
    mk_slice_with(
        ns,
        svc,
        port_name,
        port,
        addrs.iter().map(|a| (*a, None)).collect(),
    )
}

fn mk_slice_with(
    ns: &str,
    svc: &str,
    port_name: &str,
    port: u16,
    eps: Vec<(&str, Option<bool>)>,
) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(format!("{svc}-{port_name}-{}", eps.len())),
            namespace: Some(ns.into()),
            labels: Some(BTreeMap::from([(
                SERVICE_NAME_LABEL.to_string(),
                svc.to_string(),
            )])),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        endpoints: Some(
            eps.into_iter()
                .map(|(a, ready)| SliceEndpoint {
                    addresses: vec![a.to_string()],
                    conditions: Some(EndpointConditions {
                        ready,
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect(),
        ),
        ports: Some(vec![EndpointPort {
            name: Some(port_name.into()),
            port: Some(port.into()),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
    }
}

fn run(svcs: &[Service], slices: &[EndpointSlice]) -> (RoutingTable, Vec<Warning>) {
    translate(svcs, slices, &Options::default(), None)
}

fn entry<'t>(t: &'t RoutingTable, name: &str) -> &'t Entry {
    t.entries
        .iter()
        .find(|e| &*e.name == name)
        .unwrap_or_else(|| panic!("no entry {name}"))
}

fn addrs(e: &Entry) -> Vec<String> {
    e.endpoints.iter().map(|ep| ep.addr.to_string()).collect()
}

/// Which entry a request on the HTTP frontend reaches, and whether the prefix is stripped.
fn route(t: &RoutingTable, host: &str, path: &str) -> Option<(String, bool)> {
    let host = (!host.is_empty()).then_some(host.as_bytes());
    t.http
        .lookup(host, path)
        .map(|r| (t.entries[r.target as usize].name.to_string(), r.strip))
}

fn reasons(w: &[Warning]) -> Vec<WarningReason> {
    w.iter().map(|w| w.reason).collect()
}

// === entries and names ===

#[test]
fn port_80_is_named_after_the_service() {
    let (t, _) = run(&[mk_service("default", "web", &[80, 8080])], &[]);
    let names: Vec<_> = t.entries.iter().map(|e| e.name.to_string()).collect();
    assert_eq!(names, ["web", "web:8080"]);
}

#[test]
fn other_namespaces_are_prefixed_so_names_never_collide() {
    let (t, w) = run(
        &[
            mk_service("default", "web", &[80]),
            mk_service("shop", "web", &[80]),
        ],
        &[
            mk_slice("default", "web", "p80", 8000, &["10.0.0.1"]),
            mk_slice("shop", "web", "p80", 8000, &["10.0.1.1"]),
        ],
    );
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(route(&t, "", "/web"), Some(("web".into(), true)));
    assert_eq!(
        route(&t, "", "/shop/web/x"),
        Some(("shop/web".into(), true))
    );
    assert_eq!(addrs(entry(&t, "shop/web")), ["10.0.1.1:8000"]);
    assert_eq!(addrs(entry(&t, "web")), ["10.0.0.1:8000"]);
}

#[test]
fn home_namespace_is_configurable() {
    let opts = Options {
        home_namespace: "shop".into(),
        ..Default::default()
    };
    let (t, _) = translate(&[mk_service("shop", "web", &[80])], &[], &opts, None);
    assert_eq!(&*t.entries[0].name, "web");
}

#[test]
fn namespace_option_keeps_only_that_namespace() {
    let opts = Options {
        only_namespace: Some("shop".into()),
        home_namespace: "shop".into(),
        ..Default::default()
    };
    let (t, _) = translate(
        &[
            mk_service("default", "a", &[80]),
            mk_service("shop", "b", &[80]),
        ],
        &[],
        &opts,
        None,
    );
    let names: Vec<_> = t.entries.iter().map(|e| e.name.to_string()).collect();
    assert_eq!(names, ["b"]);
}

/// The Services routed on their own under `mode`, as the names of their entries.
fn routed_under(mode: ServiceRoutes, svcs: &[Service]) -> (Vec<String>, Vec<Warning>) {
    let opts = Options {
        service_routes: mode,
        tcp_services: vec![TcpService {
            namespace: Some("db".into()),
            name: "pg".into(),
            port: 5432,
        }],
        ..Default::default()
    };
    let (t, w) = translate(svcs, &[], &opts, None);
    let mut names: Vec<String> = t.entries.iter().map(|e| e.name.to_string()).collect();
    names.sort();
    (names, w)
}

#[test]
fn service_routes_serve_only_the_services_asked_for() {
    let svcs = [
        mk_service("default", "plain", &[80]),
        mk_service("internal", "admin-api", &[9000]),
        annotate(
            mk_service("internal", "shown", &[80]),
            annotation::EXPOSE,
            "true",
        ),
        annotate(
            mk_service("internal", "hosted", &[80]),
            annotation::HOST,
            "h.test",
        ),
        annotate(
            mk_service("internal", "acl", &[80]),
            annotation::ACL_MATCH,
            "/acl",
        ),
        annotate(
            mk_service("default", "hidden", &[80]),
            annotation::EXPOSE,
            "false",
        ),
        // Asks for nothing about routes: an Ingress backend's protocol, say.
        annotate(
            mk_service("internal", "h2", &[80]),
            annotation::BACKEND_PROTOCOL,
            "h2c",
        ),
        // A --tcp-services port is asked for by the flag; its other ports are not.
        mk_service("db", "pg", &[5432, 8080]),
        // UDP and LoadBalancer Services no one asked for are not even warned about.
        annotate(mk_service("kube-system", "dns", &[53]), "x", "y"),
    ];
    let (annotated, w) = routed_under(ServiceRoutes::Annotated, &svcs);
    assert_eq!(
        annotated,
        [
            "db/pg:5432",
            "internal/acl",
            "internal/hosted",
            "internal/shown"
        ]
    );
    assert!(w.is_empty(), "{w:?}");
    let (namespace, _) = routed_under(ServiceRoutes::Namespace, &svcs);
    assert_eq!(
        namespace,
        [
            "db/pg:5432",
            "internal/acl",
            "internal/hosted",
            "internal/shown",
            "plain"
        ]
    );
    let (all, _) = routed_under(ServiceRoutes::All, &svcs);
    assert_eq!(
        all,
        [
            "db/pg:5432",
            "db/pg:8080",
            "internal/acl",
            "internal/admin-api:9000",
            "internal/h2",
            "internal/hosted",
            "internal/shown",
            "kube-system/dns:53",
            "plain"
        ]
    );
}

#[test]
fn a_service_not_routed_is_still_an_ingress_backend_and_a_bad_expose_is_warned() {
    let svc = annotate(
        mk_service("internal", "admin-api", &[9000]),
        annotation::EXPOSE,
        "sometimes",
    );
    let opts = Options {
        service_routes: ServiceRoutes::Annotated,
        ..Default::default()
    };
    let (t, w) = translate(&[svc], &[], &opts, None);
    assert!(t.entries.is_empty());
    assert_eq!(route(&t, "", "/internal/admin-api:9000/users/delete"), None);
    assert_eq!(reasons(&w), [WarningReason::InvalidAnnotation], "{w:?}");
    assert!(w[0].message.contains("--service-routes"), "{w:?}");
}

#[test]
fn service_routes_read_as_the_flag_says() {
    for mode in [
        ServiceRoutes::Annotated,
        ServiceRoutes::Namespace,
        ServiceRoutes::All,
    ] {
        assert_eq!(mode.as_str().parse::<ServiceRoutes>(), Ok(mode));
    }
    let err = "everything".parse::<ServiceRoutes>().unwrap_err();
    assert!(err.contains("annotated, namespace, all"), "{err}");
}

#[test]
fn udp_ports_are_skipped_with_a_notice() {
    let mut svc = mk_service("default", "dns", &[53, 80]);
    svc.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].protocol = Some("UDP".into());
    let (t, w) = run(&[svc], &[]);
    assert_eq!(t.entries.len(), 1);
    assert_eq!(reasons(&w), [WarningReason::Skipped]);
}

#[test]
fn load_balancer_services_are_skipped() {
    let mut svc = mk_service("default", "lb", &[80]);
    svc.spec.as_mut().unwrap().type_ = Some("LoadBalancer".into());
    let (t, w) = run(&[svc], &[]);
    assert!(t.entries.is_empty());
    assert_eq!(reasons(&w), [WarningReason::Skipped]);
}

#[test]
fn target_service_keeps_only_that_service() {
    let opts = Options {
        target_service: Some("b".into()),
        ..Default::default()
    };
    let (t, _) = translate(
        &[
            mk_service("default", "a", &[80]),
            mk_service("default", "b", &[80]),
        ],
        &[],
        &opts,
        None,
    );
    assert_eq!(t.entries.len(), 1);
    assert_eq!(&*t.entries[0].name, "b");
}

// === endpoints ===

#[test]
fn endpoints_match_the_port_by_name_and_are_deduplicated() {
    let (t, _) = run(
        &[mk_service("default", "web", &[80, 81])],
        &[
            mk_slice("default", "web", "p80", 8080, &["10.0.0.2", "10.0.0.1"]),
            mk_slice("default", "web", "p80", 8080, &["10.0.0.1"]),
            mk_slice("default", "web", "p81", 9090, &["10.0.0.3"]),
        ],
    );
    assert_eq!(addrs(entry(&t, "web")), ["10.0.0.1:8080", "10.0.0.2:8080"]);
    assert_eq!(addrs(entry(&t, "web:81")), ["10.0.0.3:9090"]);
}

#[test]
fn unnamed_ports_match_unnamed_slice_ports() {
    let mut svc = mk_service("default", "web", &[80]);
    svc.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].name = None;
    let mut slice = mk_slice("default", "web", "", 8080, &["10.0.0.1"]);
    slice.ports.as_mut().unwrap()[0].name = None;
    let (t, _) = run(&[svc], &[slice]);
    assert_eq!(addrs(entry(&t, "web")), ["10.0.0.1:8080"]);
}

#[test]
fn unnamed_port_falls_back_to_the_target_port_number() {
    let mut svc = mk_service("default", "web", &[80]);
    let port = &mut svc.spec.as_mut().unwrap().ports.as_mut().unwrap()[0];
    port.name = None;
    port.target_port = Some(IntOrString::Int(8080));
    let (t, _) = run(
        &[svc],
        &[mk_slice("default", "web", "http", 8080, &["10.0.0.1"])],
    );
    assert_eq!(addrs(entry(&t, "web")), ["10.0.0.1:8080"]);
}

#[test]
fn only_ready_endpoints_and_unset_ready_counts_as_ready() {
    let (t, _) = run(
        &[mk_service("default", "web", &[80])],
        &[mk_slice_with(
            "default",
            "web",
            "p80",
            80,
            vec![
                ("10.0.0.1", Some(true)),
                ("10.0.0.2", Some(false)),
                ("10.0.0.3", None),
            ],
        )],
    );
    assert_eq!(addrs(entry(&t, "web")), ["10.0.0.1:80", "10.0.0.3:80"]);
}

#[test]
fn terminating_serving_endpoints_are_kept_as_draining() {
    let mut slice = mk_slice_with(
        "default",
        "web",
        "p80",
        80,
        vec![
            ("10.0.0.1", Some(true)),
            ("10.0.0.2", Some(false)),
            ("10.0.0.3", Some(false)),
        ],
    );
    let eps = slice.endpoints.as_mut().unwrap();
    for (ep, (serving, terminating)) in
        eps.iter_mut()
            .zip([(true, false), (true, true), (false, true)])
    {
        let c = ep.conditions.as_mut().unwrap();
        c.serving = Some(serving);
        c.terminating = Some(terminating);
    }
    let (t, _) = run(&[mk_service("default", "web", &[80])], &[slice]);
    let e = entry(&t, "web");
    assert_eq!(
        addrs(e),
        ["10.0.0.1:80", "10.0.0.2:80"],
        "terminating and not serving: gone"
    );
    assert!(!e.endpoints[0].draining);
    assert!(
        e.endpoints[1].draining,
        "serving and terminating: sticky clients only"
    );
}

#[test]
fn an_address_ready_in_one_slice_is_not_draining() {
    let ready = mk_slice_with("default", "web", "p80", 80, vec![("10.0.0.1", Some(true))]);
    let mut term = mk_slice_with(
        "default",
        "web",
        "p80",
        80,
        vec![("10.0.0.1", Some(false)), ("10.0.0.9", Some(false))],
    );
    for ep in term.endpoints.as_mut().unwrap() {
        let c = ep.conditions.as_mut().unwrap();
        c.serving = Some(true);
        c.terminating = Some(true);
    }
    let (t1, _) = run(
        &[mk_service("default", "web", &[80])],
        &[ready.clone(), term.clone()],
    );
    let (t2, _) = run(&[mk_service("default", "web", &[80])], &[term, ready]);
    assert_eq!(t1, t2);
    assert!(!entry(&t1, "web").endpoints[0].draining);
}

#[test]
fn slices_of_other_namespaces_do_not_leak() {
    let (t, _) = run(
        &[mk_service("default", "web", &[80])],
        &[mk_slice("other", "web", "p80", 80, &["10.0.0.1"])],
    );
    assert!(entry(&t, "web").endpoints.is_empty());
}

#[test]
fn zero_endpoints_still_route_so_the_proxy_can_answer_503() {
    let (t, _) = run(&[mk_service("default", "web", &[80])], &[]);
    assert!(entry(&t, "web").endpoints.is_empty());
    assert_eq!(route(&t, "", "/web"), Some(("web".into(), true)));
}

#[test]
fn forward_services_uses_the_cluster_ip() {
    let opts = Options {
        forward_services: true,
        ..Default::default()
    };
    let (t, _) = translate(
        &[mk_service("default", "web", &[80])],
        &[mk_slice("default", "web", "p80", 8080, &["10.0.0.1"])],
        &opts,
        None,
    );
    assert_eq!(addrs(entry(&t, "web")), ["10.96.0.10:80"]);
}

#[test]
fn forward_services_without_cluster_ip_warns() {
    let opts = Options {
        forward_services: true,
        ..Default::default()
    };
    let mut svc = mk_service("default", "web", &[80]);
    svc.spec.as_mut().unwrap().cluster_ip = Some("None".into());
    let (t, w) = translate(&[svc], &[], &opts, None);
    assert!(entry(&t, "web").endpoints.is_empty());
    assert_eq!(reasons(&w), [WarningReason::InvalidObject]);
}

#[test]
fn bad_addresses_and_fqdn_slices_warn_and_are_skipped() {
    let mut fqdn = mk_slice("default", "web", "p80", 80, &["db.example.com"]);
    fqdn.address_type = "FQDN".into();
    let (t, w) = run(
        &[mk_service("default", "web", &[80])],
        &[
            fqdn,
            mk_slice("default", "web", "p80", 80, &["10.0.0.1", "not-an-ip"]),
        ],
    );
    assert_eq!(addrs(entry(&t, "web")), ["10.0.0.1:80"]);
    assert_eq!(
        reasons(&w),
        [WarningReason::Skipped, WarningReason::InvalidObject]
    );
}

// === routes ===

#[test]
fn path_route_strips_and_respects_segments() {
    let (t, _) = run(
        &[
            mk_service("default", "svc-1", &[80]),
            mk_service("default", "svc-10", &[80]),
        ],
        &[],
    );
    assert_eq!(route(&t, "any", "/svc-1/x"), Some(("svc-1".into(), true)));
    assert_eq!(route(&t, "any", "/svc-10"), Some(("svc-10".into(), true)));
    assert_eq!(route(&t, "any", "/svc-100"), None);
}

#[test]
fn host_annotation_routes_any_path_unstripped() {
    let svc = annotate(
        mk_service("default", "web", &[80]),
        annotation::HOST,
        "Foo.Example.com",
    );
    let (t, _) = run(&[svc], &[]);
    assert_eq!(
        route(&t, "foo.example.com:8080", "/anything"),
        Some(("web".into(), false))
    );
    assert_eq!(
        route(&t, "other.com", "/web"),
        None,
        "a host rule replaces /<name>"
    );
}

#[test]
fn wildcard_host_matches_one_or_more_labels() {
    let svc = annotate(
        mk_service("default", "web", &[80]),
        annotation::HOST,
        "*.example.com",
    );
    let (t, _) = run(&[svc], &[]);
    assert!(route(&t, "a.example.com", "/").is_some());
    assert!(route(&t, "a.b.example.com", "/").is_some());
    assert!(route(&t, "example.com", "/").is_none());
}

#[test]
fn acl_match_replaces_the_name_route() {
    let svc = annotate(
        mk_service("default", "api", &[80]),
        annotation::ACL_MATCH,
        "/api  /v2",
    );
    let (t, _) = run(&[svc], &[]);
    assert_eq!(route(&t, "", "/api/x"), Some(("api".into(), false)));
    assert_eq!(route(&t, "", "/v2"), Some(("api".into(), false)));
    assert_eq!(route(&t, "", "/apix"), None);
}

#[test]
fn acl_match_with_host_narrows_that_host() {
    let svc = annotate(
        annotate(
            mk_service("default", "api", &[80]),
            annotation::ACL_MATCH,
            "/api",
        ),
        annotation::HOST,
        "foo.com",
    );
    let (t, _) = run(&[svc], &[]);
    assert_eq!(route(&t, "foo.com", "/api/x"), Some(("api".into(), false)));
    assert_eq!(route(&t, "foo.com", "/other"), None);
    assert_eq!(route(&t, "bar.com", "/api"), None);
}

#[test]
fn precedence_is_by_specificity_not_name() {
    let a = annotate(
        mk_service("default", "a", &[80]),
        annotation::ACL_MATCH,
        "/api/admin",
    );
    let z = annotate(
        mk_service("default", "z", &[80]),
        annotation::ACL_MATCH,
        "/api",
    );
    let host = annotate(
        mk_service("default", "h", &[80]),
        annotation::HOST,
        "foo.com",
    );
    let wild = annotate(mk_service("default", "w", &[80]), annotation::HOST, "*.com");
    let (t, w) = run(&[z, a, host, wild], &[]);
    assert!(w.is_empty());
    assert_eq!(route(&t, "", "/api/admin/x").unwrap().0, "a");
    assert_eq!(route(&t, "", "/api/other").unwrap().0, "z");
    assert_eq!(
        route(&t, "foo.com", "/api").unwrap().0,
        "h",
        "exact host beats host-less"
    );
    assert_eq!(
        route(&t, "bar.com", "/api").unwrap().0,
        "w",
        "wildcard beats host-less"
    );
}

#[test]
fn conflicts_are_broken_deterministically_and_reported() {
    let a = annotate(
        mk_service("default", "a", &[80]),
        annotation::ACL_MATCH,
        "/same",
    );
    let b = annotate(
        mk_service("default", "b", &[80]),
        annotation::ACL_MATCH,
        "/same",
    );
    let (t1, w1) = run(&[a.clone(), b.clone()], &[]);
    let (t2, w2) = run(&[b, a], &[]);
    assert_eq!(route(&t1, "", "/same").unwrap().0, "a");
    assert_eq!(t1, t2);
    assert_eq!(w1, w2);
    assert_eq!(reasons(&w1), [WarningReason::RouteConflict]);
    assert_eq!(w1[0].object.name, "b", "the loser is the one warned about");
}

// === migrating from the original (docs/migration.md) ===

/// `default/shop` (path route `/shop`) owns everything below `/shop/`: the Service `web` in a
/// namespace called `shop` (path route `/shop/web`) cannot take its sub-paths, whichever
/// object comes first; it is warned about, naming both.
#[test]
fn a_home_path_route_owns_its_subtree_against_a_namespace_of_that_name() {
    let home = mk_service("default", "shop", &[80]);
    let intruder = mk_service("shop", "web", &[80]);
    let (t1, w1) = run(&[home.clone(), intruder.clone()], &[]);
    let (t2, w2) = run(&[intruder.clone(), home], &[]);
    assert_eq!(t1, t2);
    assert_eq!(w1, w2);
    assert_eq!(route(&t1, "", "/shop/web/x"), Some(("shop".into(), true)));
    assert_eq!(route(&t1, "", "/shop/web"), Some(("shop".into(), true)));
    assert_eq!(reasons(&w1), [WarningReason::RouteConflict]);
    assert_eq!(
        (w1[0].object.namespace.as_str(), w1[0].object.name.as_str()),
        ("shop", "web")
    );
    assert!(
        w1[0].message.contains("/shop/web") && w1[0].message.contains("default/shop"),
        "names both: {}",
        w1[0].message
    );
    // Without the home Service, the namespaced one serves its route.
    let (t, w) = run(&[intruder], &[]);
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(
        route(&t, "", "/shop/web/x"),
        Some(("shop/web".into(), true))
    );
}

/// An aclMatch prefix at or below another Service's path route: the path route keeps its
/// key and its subtree (the original applied aclMatch on the TLS port only); warned.
#[test]
fn an_acl_match_cannot_shadow_another_services_path_route() {
    let web = mk_service("default", "web", &[80]);
    let same = annotate(
        mk_service("default", "aaa", &[80]),
        annotation::ACL_MATCH,
        "/web",
    );
    let below = annotate(
        mk_service("other", "b", &[80]),
        annotation::ACL_MATCH,
        "/web/admin /elsewhere",
    );
    let folded = annotate(
        mk_service("other", "c", &[80]),
        annotation::ACL_MATCH,
        "-i /WEB/x /Folded",
    );
    let (t, w) = run(
        &[web.clone(), same.clone(), below.clone(), folded.clone()],
        &[],
    );
    let (t2, w2) = run(&[folded, below, same, web], &[]);
    assert_eq!((&t, &w), (&t2, &w2));
    assert_eq!(
        route(&t, "", "/web/x"),
        Some(("web".into(), true)),
        "its own path route wins, not the lower name"
    );
    assert_eq!(route(&t, "", "/web/admin/1"), Some(("web".into(), true)));
    assert_eq!(route(&t, "", "/elsewhere"), Some(("other/b".into(), false)));
    assert_eq!(route(&t, "", "/FOLDED"), Some(("other/c".into(), false)));
    assert_eq!(reasons(&w), [WarningReason::RouteConflict; 3], "{w:?}");
    let msgs: Vec<&str> = w.iter().map(|w| w.message.as_str()).collect();
    assert!(
        msgs.iter()
            .any(|m| m.contains("/web/admin") && m.contains("default/web")),
        "{msgs:?}"
    );
    assert!(msgs.iter().any(|m| m.contains("-i /web/x")), "{msgs:?}");
    assert!(
        msgs.iter().any(|m| m.contains("own path route")),
        "{msgs:?}"
    );
}

#[test]
fn a_host_may_carry_a_port() {
    let svc = annotate(
        mk_service("default", "shop", &[80]),
        annotation::HOST,
        "Shop.Example.com:8080",
    );
    let (t, w) = run(&[svc], &[]);
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(
        route(&t, "shop.example.com:8080", "/x"),
        Some(("shop".into(), false))
    );
    assert_eq!(route(&t, "shop.example.com", "/x"), None);
    assert_eq!(route(&t, "shop.example.com:80", "/x"), None);
    assert_eq!(route(&t, "", "/shop"), None, "no path route with a host");
}

#[test]
fn several_hosts_each_route_and_a_bad_one_is_warned_alone() {
    let svc = annotate(
        mk_service("default", "m", &[80]),
        annotation::HOST,
        " m1.example.com  m2.example.com\tbad_name *.m3.example.com ",
    );
    let (t, w) = run(&[svc], &[]);
    assert_eq!(reasons(&w), [WarningReason::InvalidAnnotation]);
    assert!(w[0].message.contains("bad_name"), "{}", w[0].message);
    for host in ["m1.example.com", "m2.example.com", "a.m3.example.com"] {
        assert_eq!(route(&t, host, "/p"), Some(("m".into(), false)), "{host}");
    }
    assert_eq!(route(&t, "", "/m"), None);
}

#[test]
fn acl_match_honours_dash_i_and_warns_about_other_flags() {
    let svc = annotate(
        mk_service("default", "t", &[80]),
        annotation::ACL_MATCH,
        "-i /test /Other",
    );
    let (t, w) = run(&[svc], &[]);
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(route(&t, "", "/TEST/a"), Some(("t".into(), false)));
    assert_eq!(route(&t, "", "/other"), Some(("t".into(), false)));
    assert_eq!(route(&t, "", "/testing"), None, "still a segment boundary");

    let svc = annotate(
        mk_service("default", "u", &[80]),
        annotation::ACL_MATCH,
        "-m beg -n /Up",
    );
    let (t, w) = run(&[svc], &[]);
    assert_eq!(reasons(&w), [WarningReason::InvalidAnnotation; 2], "{w:?}");
    assert!(w.iter().any(|w| w.message.contains("-m")), "{w:?}");
    assert!(w.iter().any(|w| w.message.contains("-n")), "{w:?}");
    assert_eq!(route(&t, "", "/Up"), Some(("u".into(), false)));
    assert_eq!(route(&t, "", "/up"), None, "case-sensitive without -i");
}

// === backend protocol (appProtocol, lb.backend-*) ===

#[test]
fn backend_protocol_comes_from_app_protocol_or_the_annotation() {
    use crate::table::upstream::BackendProtocol::*;
    let mut svc = mk_service("shop", "api", &[80, 81, 82, 83]);
    let ports = svc.spec.as_mut().unwrap().ports.as_mut().unwrap();
    ports[0].app_protocol = Some("kubernetes.io/h2c".into());
    ports[1].app_protocol = Some("https".into());
    ports[2].app_protocol = Some("mysql".into());
    let (t, w) = run(&[svc.clone()], &[]);
    let proto = |t: &RoutingTable, n: &str| entry(t, n).upstream.protocol;
    assert_eq!(proto(&t, "shop/api"), H2c);
    assert_eq!(proto(&t, "shop/api:81"), Https);
    assert_eq!(proto(&t, "shop/api:82"), Http, "unknown: HTTP/1, warned");
    assert_eq!(proto(&t, "shop/api:83"), Http);
    assert_eq!(reasons(&w), [WarningReason::InvalidObject]);
    assert!(w[0].message.contains("mysql"), "{}", w[0].message);
    let https = &entry(&t, "shop/api:81").upstream;
    assert_eq!((&*https.sni, https.verify), ("api.shop.svc", true));

    let svc = annotate(
        annotate(
            annotate(svc, annotation::BACKEND_PROTOCOL, "grpcs"),
            annotation::BACKEND_SNI,
            "API.Internal",
        ),
        annotation::BACKEND_SKIP_VERIFY,
        "true",
    );
    let svc = annotate(svc, annotation::CHECK_PATH, "/healthz");
    let (t, w) = run(&[svc], &[]);
    for n in ["shop/api", "shop/api:81", "shop/api:82", "shop/api:83"] {
        let u = &entry(&t, n).upstream;
        assert_eq!(
            (u.protocol, &*u.sni, u.verify),
            (H2, "api.internal", false),
            "{n}"
        );
        assert_eq!(
            entry(&t, n).check.path.as_deref(),
            Some("/healthz"),
            "the check speaks HTTP/2 over TLS too"
        );
    }
    let r = reasons(&w);
    assert_eq!(
        r.iter()
            .filter(|r| **r == WarningReason::InsecureBackend)
            .count(),
        4,
        "{w:?}"
    );
    assert!(
        !r.contains(&WarningReason::InvalidAnnotation),
        "a check path suits every protocol: {w:?}"
    );
}

#[test]
fn a_backend_ca_file_is_a_tls_ports_absolute_path() {
    let mut svc = mk_service("shop", "api", &[80, 81]);
    let ports = svc.spec.as_mut().unwrap().ports.as_mut().unwrap();
    ports[0].app_protocol = Some("https".into());
    let svc = annotate(svc, annotation::BACKEND_CA_FILE, " /etc/cas/shop.pem ");
    let (t, w) = run(std::slice::from_ref(&svc), &[]);
    assert_eq!(
        entry(&t, "shop/api").upstream.ca_file.as_deref(),
        Some("/etc/cas/shop.pem")
    );
    assert_eq!(
        entry(&t, "shop/api:81").upstream.ca_file,
        None,
        "no TLS there"
    );
    assert!(w.is_empty(), "{w:?}");
    let (t, w) = run(
        &[annotate(
            svc.clone(),
            annotation::BACKEND_CA_FILE,
            "cas/shop.pem",
        )],
        &[],
    );
    assert_eq!(entry(&t, "shop/api").upstream.ca_file, None);
    assert_eq!(reasons(&w), [WarningReason::InvalidAnnotation]);

    // A client certificate: both files, absolute.
    let both = annotate(
        annotate(svc.clone(), annotation::BACKEND_CLIENT_CERT, "/c/tls.crt"),
        annotation::BACKEND_CLIENT_KEY,
        "/c/tls.key",
    );
    let (t, w) = run(&[both], &[]);
    let cc = entry(&t, "shop/api").upstream.client_cert.clone();
    assert_eq!(
        cc,
        Some(("/c/tls.crt".into(), "/c/tls.key".into())),
        "{w:?}"
    );
    assert_eq!(
        entry(&t, "shop/api:81").upstream.client_cert,
        None,
        "no TLS there"
    );
    let (t, w) = run(
        &[annotate(svc, annotation::BACKEND_CLIENT_CERT, "/c/tls.crt")],
        &[],
    );
    assert_eq!(entry(&t, "shop/api").upstream.client_cert, None);
    assert!(w.iter().any(|w| w.message.contains("needs both")), "{w:?}");
}

#[test]
fn grpc_checks_need_an_http2_backend() {
    let mut svc = mk_service("shop", "api", &[80, 81]);
    let ports = svc.spec.as_mut().unwrap().ports.as_mut().unwrap();
    ports[0].app_protocol = Some("grpc".into());
    let svc = annotate(svc, annotation::CHECK_GRPC, " shop.Cart ");
    let (t, w) = run(std::slice::from_ref(&svc), &[]);
    assert_eq!(
        entry(&t, "shop/api").check.grpc.as_deref(),
        Some("shop.Cart")
    );
    assert_eq!(
        entry(&t, "shop/api:81").check.grpc,
        None,
        "HTTP/1: not gRPC"
    );
    assert_eq!(reasons(&w), [WarningReason::InvalidAnnotation]);
    assert!(w[0].message.contains("port 81"), "{}", w[0].message);

    let (t, w) = run(&[annotate(svc, annotation::CHECK_GRPC, "")], &[]);
    assert_eq!(
        entry(&t, "shop/api").check.grpc.as_deref(),
        Some(""),
        "the whole server"
    );
    assert_eq!(w.len(), 1, "port 81 again: {w:?}");
    let bad = annotate(
        mk_service("shop", "b", &[80]),
        annotation::CHECK_GRPC,
        "a/b",
    );
    let (t, w) = run(&[bad], &[]);
    assert_eq!(entry(&t, "shop/b").check.grpc, None);
    assert!(w[0].message.contains("not a gRPC service name"), "{w:?}");
}

// === annotations ===

#[test]
fn algorithm_annotation_and_default() {
    let a = annotate(
        mk_service("default", "a", &[80]),
        annotation::ALGORITHM,
        "leastconn",
    );
    let b = mk_service("default", "b", &[80]);
    let opts = Options {
        default_algorithm: Algorithm::Source,
        ..Default::default()
    };
    let (t, _) = translate(&[a, b], &[], &opts, None);
    assert_eq!(entry(&t, "a").algorithm, Algorithm::LeastConn);
    assert_eq!(entry(&t, "b").algorithm, Algorithm::Source);
}

#[test]
fn invalid_algorithm_warns_and_falls_back_for_that_service_only() {
    let bad = annotate(
        mk_service("default", "bad", &[80]),
        annotation::ALGORITHM,
        "bogus\nbackend x",
    );
    let good = annotate(
        mk_service("default", "good", &[80]),
        annotation::ALGORITHM,
        "first",
    );
    let (t, w) = run(
        &[bad, good],
        &[mk_slice("default", "bad", "p80", 80, &["10.0.0.1"])],
    );
    assert_eq!(entry(&t, "bad").algorithm, Algorithm::RoundRobin);
    assert_eq!(
        entry(&t, "bad").endpoints.len(),
        1,
        "the entry still serves"
    );
    assert_eq!(entry(&t, "good").algorithm, Algorithm::First);
    assert_eq!(reasons(&w), [WarningReason::InvalidAnnotation]);
    assert!(
        w[0].message.contains("\\n"),
        "the bad value is escaped: {}",
        w[0].message
    );
}

#[test]
fn invalid_host_and_prefix_warn_and_are_ignored() {
    let svc = annotate(
        annotate(
            mk_service("default", "web", &[80]),
            annotation::HOST,
            "bad_host",
        ),
        annotation::ACL_MATCH,
        "/ok nope",
    );
    let (t, w) = run(&[svc], &[]);
    assert_eq!(
        reasons(&w),
        [
            WarningReason::InvalidAnnotation,
            WarningReason::InvalidAnnotation,
            WarningReason::InvalidAnnotation
        ],
        "the bad name, the annotation left without a valid name, the bad prefix: {w:?}"
    );
    assert_eq!(route(&t, "bad_host", "/ok"), Some(("web".into(), false)));
}

#[test]
fn booleans_parse_like_go_and_bad_ones_warn() {
    let yes = annotate(
        mk_service("default", "yes", &[80]),
        annotation::COOKIE_STICKY,
        "True",
    );
    let bad = annotate(
        mk_service("default", "bad", &[80]),
        annotation::COOKIE_STICKY,
        "yes please",
    );
    let (t, w) = run(&[yes, bad], &[]);
    assert!(entry(&t, "yes").cookie_sticky);
    assert!(!entry(&t, "bad").cookie_sticky);
    assert_eq!(reasons(&w), [WarningReason::InvalidAnnotation]);
}

#[test]
fn ssl_term_moves_the_entry_to_the_tls_frontend() {
    let svc = annotate(
        mk_service("default", "secure", &[80]),
        annotation::SSL_TERM,
        "true",
    );
    let (t, _) = run(&[svc], &[]);
    assert_eq!(entry(&t, "secure").frontend, Frontend::Https);
    assert!(t.http.is_empty());
    assert!(t.https.lookup(None, "/secure").is_some());
}

#[test]
fn maxconn_parses_and_rejects_nonsense() {
    let ok = annotate(
        mk_service("default", "ok", &[80]),
        annotation::MAXCONN,
        "10",
    );
    let neg = annotate(
        mk_service("default", "neg", &[80]),
        annotation::MAXCONN,
        "-1",
    );
    let huge = annotate(
        mk_service("default", "huge", &[80]),
        annotation::MAXCONN,
        "99999999999999",
    );
    let (t, w) = run(&[ok, neg, huge], &[]);
    assert_eq!(entry(&t, "ok").maxconn, Some(10));
    assert_eq!(entry(&t, "neg").maxconn, None);
    assert_eq!(entry(&t, "huge").maxconn, None);
    assert_eq!(reasons(&w), [WarningReason::InvalidAnnotation; 2]);
}

#[test]
fn check_annotations_parse_and_bad_values_warn_for_that_service_only() {
    let svc = |name: &str, interval: Option<&str>, path: Option<&str>| {
        let mut s = mk_service("default", name, &[80]);
        if let Some(v) = interval {
            s = annotate(s, annotation::CHECK_INTERVAL, v);
        }
        if let Some(v) = path {
            s = annotate(s, annotation::CHECK_PATH, v);
        }
        s
    };
    let (t, w) = run(
        &[
            svc("plain", None, None),
            svc("fast", Some("500ms"), Some("/healthz?deep=1")),
            svc("off", Some("0"), None),
            svc("mins", Some(" 2m "), None),
            svc("bare", Some("5"), None),
            svc("tiny", Some("5ms"), None),
            svc("long", Some("2h"), None),
            svc("badpath", None, Some("healthz")),
            svc("spaces", None, Some("/a b")),
        ],
        &[],
    );
    assert_eq!(entry(&t, "plain").check, CheckSpec::default());
    assert_eq!(
        entry(&t, "fast").check,
        CheckSpec {
            interval: Some(Duration::from_millis(500)),
            path: Some("/healthz?deep=1".into()),
            grpc: None,
        }
    );
    assert_eq!(entry(&t, "off").check.interval, Some(Duration::ZERO));
    assert_eq!(
        entry(&t, "mins").check.interval,
        Some(Duration::from_secs(120))
    );
    for name in ["bare", "tiny", "long", "badpath", "spaces"] {
        assert_eq!(entry(&t, name).check, CheckSpec::default(), "{name}");
    }
    assert_eq!(reasons(&w), [WarningReason::InvalidAnnotation; 5]);
    let objects: Vec<&str> = w.iter().map(|w| w.object.name.as_str()).collect();
    assert_eq!(objects, ["badpath", "bare", "long", "spaces", "tiny"]);
}

#[test]
fn overlong_annotation_is_a_warning() {
    let svc = annotate(
        mk_service("default", "web", &[80]),
        annotation::HOST,
        &"a".repeat(10_000),
    );
    let (t, w) = run(&[svc], &[]);
    assert_eq!(reasons(&w), [WarningReason::InvalidAnnotation]);
    assert!(w[0].message.len() < 300);
    assert!(route(&t, "", "/web").is_some());
}

#[test]
fn client_ip_affinity_only_for_client_ip() {
    let mut a = mk_service("default", "a", &[80]);
    a.spec.as_mut().unwrap().session_affinity = Some("ClientIP".into());
    let mut b = mk_service("default", "b", &[80]);
    b.spec.as_mut().unwrap().session_affinity = Some("None".into());
    let mut c = mk_service("default", "c", &[80]);
    let spec = c.spec.as_mut().unwrap();
    spec.session_affinity = Some("ClientIP".into());
    spec.session_affinity_config = Some(SessionAffinityConfig {
        client_ip: Some(ClientIPConfig {
            timeout_seconds: Some(60),
        }),
    });
    let (t, _) = run(&[a, b, c], &[]);
    assert_eq!(
        entry(&t, "a").client_ip_affinity,
        Some(DEFAULT_AFFINITY_TIMEOUT)
    );
    assert_eq!(entry(&t, "b").client_ip_affinity, None);
    assert_eq!(
        entry(&t, "c").client_ip_affinity,
        Some(Duration::from_secs(60))
    );
}

#[test]
fn tcp_services_get_their_own_frontend() {
    let opts = Options {
        tcp_services: vec![TcpService {
            namespace: None,
            name: "db".into(),
            port: 5432,
        }],
        ..Default::default()
    };
    let (t, _) = translate(
        &[mk_service("default", "db", &[5432, 80])],
        &[],
        &opts,
        None,
    );
    assert_eq!(t.tcp.len(), 1);
    assert_eq!(t.tcp[0].port, 5432);
    assert_eq!(entry(&t, "db:5432").frontend, Frontend::Tcp(5432));
    assert!(route(&t, "", "/db:5432").is_none());
    assert!(route(&t, "", "/db").is_some());
}

#[test]
fn send_proxy_protocol_applies_to_tcp_entries() {
    let opts = Options {
        tcp_services: vec![TcpService {
            namespace: None,
            name: "db".into(),
            port: 5432,
        }],
        ..Default::default()
    };
    let db = annotate(
        mk_service("default", "db", &[5432, 80]),
        annotation::SEND_PROXY,
        "v2",
    );
    let (t, w) = translate(&[db], &[], &opts, None);
    assert!(entry(&t, "db:5432").upstream.send_proxy);
    // An HTTP entry has no raw stream to put it on: warned, ignored.
    assert!(!entry(&t, "db").upstream.send_proxy);
    assert_eq!(reasons(&w), [WarningReason::InvalidAnnotation]);
    assert!(w[0].message.contains("port 80"), "{}", w[0].message);
    let v1 = annotate(
        mk_service("default", "db", &[5432]),
        annotation::SEND_PROXY,
        "v1",
    );
    let (t, w) = translate(&[v1], &[], &opts, None);
    assert!(!entry(&t, "db:5432").upstream.send_proxy);
    assert_eq!(reasons(&w), [WarningReason::InvalidAnnotation]);
}

// === state carried across rebuilds ===

#[test]
fn endpoint_and_entry_state_survive_a_rebuild() {
    let svcs = [mk_service("default", "web", &[80])];
    let (t1, _) = run(
        &svcs,
        &[mk_slice("default", "web", "p80", 80, &["10.0.0.1"])],
    );
    let ep_state = t1.entries[0].endpoints[0].state.0.clone();
    let entry_state = t1.entries[0].state.0.clone();
    let (t2, _) = translate(
        &svcs,
        &[mk_slice(
            "default",
            "web",
            "p80",
            80,
            &["10.0.0.1", "10.0.0.2"],
        )],
        &Options::default(),
        Some(&t1),
    );
    assert!(Arc::ptr_eq(&t2.entries[0].endpoints[0].state.0, &ep_state));
    assert!(Arc::ptr_eq(&t2.entries[0].state.0, &entry_state));
}

#[test]
fn entries_sharing_an_address_share_its_state_from_the_first_build() {
    let svcs = [
        mk_service("default", "a", &[80]),
        mk_service("default", "b", &[80]),
    ];
    let slices = [
        mk_slice("default", "a", "p80", 80, &["10.0.0.1"]),
        mk_slice("default", "b", "p80", 80, &["10.0.0.1"]),
    ];
    let (t, _) = run(&svcs, &slices);
    assert!(Arc::ptr_eq(
        &entry(&t, "a").endpoints[0].state.0,
        &entry(&t, "b").endpoints[0].state.0
    ));
}

#[test]
fn a_cold_build_shares_states_by_address_not_by_hash() {
    // Four endpoints whose hashes all collide: only the two of one address may share.
    let mk = |addrs: &[&str]| {
        let mut e = Entry::fixture("x", Frontend::Http, addrs);
        for ep in &mut e.endpoints {
            ep.hash = 7;
        }
        e
    };
    let mut entries = [
        mk(&["10.0.0.1:80", "10.0.0.2:80"]),
        mk(&["10.0.0.2:80", "10.0.0.3:80"]),
    ];
    share_repeated_states(&mut entries);
    let [a, b] = &entries;
    let same = |x: &Endpoint, y: &Endpoint| Arc::ptr_eq(&x.state.0, &y.state.0);
    assert!(same(&a.endpoints[1], &b.endpoints[0]));
    assert!(!same(&a.endpoints[0], &a.endpoints[1]));
    assert!(!same(&a.endpoints[0], &b.endpoints[1]));
    assert!(!same(&a.endpoints[1], &b.endpoints[1]));
}

#[test]
fn duplicate_definitions_pick_by_content() {
    let a = annotate(
        mk_service("default", "web", &[80]),
        annotation::ALGORITHM,
        "first",
    );
    let b = annotate(
        mk_service("default", "web", &[80]),
        annotation::ALGORITHM,
        "source",
    );
    let (t1, w1) = run(&[a.clone(), b.clone()], &[]);
    let (t2, _) = run(&[b, a], &[]);
    assert_eq!(t1, t2);
    assert_eq!(reasons(&w1), [WarningReason::DuplicateObject]);
}

use std::sync::Arc;

// === properties ===

fn world() -> impl Strategy<Value = (Vec<Service>, Vec<EndpointSlice>)> {
    let svc = (
        0u8..3,
        0u8..6,
        prop::collection::vec(prop::sample::select(vec![80u16, 81, 443]), 1..3),
        0u8..4,
    );
    prop::collection::vec(svc, 1..8).prop_flat_map(|specs| {
        let mut services = Vec::new();
        let mut slices = Vec::new();
        for (ns, n, ports, ann) in &specs {
            let ns = format!("ns{ns}");
            let name = format!("s{n}");
            let mut s = mk_service(&ns, &name, ports);
            s = match ann {
                0 => s,
                1 => annotate(s, annotation::HOST, &format!("{name}.example.com")),
                2 => annotate(s, annotation::ACL_MATCH, "/shared"),
                _ => annotate(s, annotation::ALGORITHM, "nonsense"),
            };
            services.push(s);
            for &p in ports {
                slices.push(mk_slice_with(
                    &ns,
                    &name,
                    &format!("p{p}"),
                    8000 + p,
                    (0..3)
                        .map(|i| (["10.1.0.1", "10.1.0.2", "10.1.0.3"][i], Some(i != 2)))
                        .collect(),
                ));
            }
        }
        let n_s = services.len();
        let n_e = slices.len();
        (Just(services), Just(slices), Just(n_s), Just(n_e))
            .prop_flat_map(|(s, e, n_s, n_e)| {
                (
                    Just(s),
                    Just(e),
                    Just((0..n_s).collect::<Vec<_>>()).prop_shuffle(),
                    Just((0..n_e).collect::<Vec<_>>()).prop_shuffle(),
                )
            })
            .prop_map(|(s, e, ps, pe)| {
                (
                    ps.iter()
                        .map(|&i| s[i].clone())
                        .chain(s.iter().cloned())
                        .collect::<Vec<_>>(),
                    pe.iter().map(|&i| e[i].clone()).collect(),
                )
            })
    })
}

proptest! {
    /// The table and the warnings do not depend on the order of the input objects.
    #[test]
    fn permutation_invariant((services, slices) in world(), seed in any::<u64>()) {
        let (t1, w1) = run(&services, &slices);
        let mut rs = services.clone();
        let mut re = slices.clone();
        let k = (seed as usize) % rs.len().max(1);
        rs.rotate_left(k);
        rs.reverse();
        re.reverse();
        let (t2, w2) = run(&rs, &re);
        prop_assert_eq!(&t1, &t2);
        prop_assert_eq!(t1.to_json(), t2.to_json());
        prop_assert_eq!(w1, w2);
    }

    /// A cold build gives two endpoints one state exactly when they have one address.
    #[test]
    fn one_state_per_address((services, slices) in world()) {
        let (t, _) = run(&services, &slices);
        let eps: Vec<&Endpoint> = t.entries.iter().flat_map(|e| &e.endpoints).collect();
        for a in &eps {
            for b in &eps {
                prop_assert_eq!(Arc::ptr_eq(&a.state.0, &b.state.0), a.addr == b.addr);
            }
        }
    }

    /// Every ready endpoint of every served port appears exactly once in its entry.
    #[test]
    fn every_ready_endpoint_once((services, slices) in world()) {
        let (t, _) = run(&services, &slices);
        for e in &t.entries {
            let got = addrs(e);
            let mut want: Vec<String> = ["10.1.0.1", "10.1.0.2"].iter().map(|a| format!("{a}:{}", 8000 + e.key.port)).collect();
            want.sort();
            prop_assert_eq!(got, want);
        }
    }
}

// === incremental rebuilds ===

fn versioned(
    mut svcs: Vec<Service>,
    mut slices: Vec<EndpointSlice>,
) -> (Vec<Service>, Vec<EndpointSlice>) {
    for (i, s) in svcs.iter_mut().enumerate() {
        s.metadata.resource_version = Some(format!("{}", 1000 + i));
        s.metadata.uid = Some(format!("svc-uid-{i}"));
    }
    for (i, s) in slices.iter_mut().enumerate() {
        s.metadata.name = Some(format!("slice-{i}"));
        s.metadata.resource_version = Some(format!("{}", 5000 + i));
        s.metadata.uid = Some(format!("slice-uid-{i}"));
    }
    (svcs, slices)
}

/// Objects keyed as the cluster source keeps them.
fn store<K: Clone>(objects: &[K], meta: impl Fn(&K) -> &ObjectMeta) -> Store<K> {
    objects
        .iter()
        .map(|o| {
            let m = meta(o);
            let key = (
                m.namespace.clone().unwrap_or_default(),
                m.name.clone().unwrap_or_default(),
            );
            (key, o.clone())
        })
        .collect()
}

fn stores(svcs: &[Service], slices: &[EndpointSlice]) -> (Store<Service>, Store<EndpointSlice>) {
    (store(svcs, |s| &s.metadata), store(slices, |s| &s.metadata))
}

/// A keyed full build of `svcs` and `slices`, with the memo an incremental build needs.
fn built(svcs: &[Service], slices: &[EndpointSlice], o: &Options) -> (Built, Vec<Warning>) {
    let (ss, es) = stores(svcs, slices);
    translate_changes(&ss, &es, Default::default(), None, o, None)
}

fn key(ns: &str, name: &str) -> ObjectKey {
    (ns.to_string(), name.to_string())
}

fn slices_changed(keys: &[ObjectKey]) -> Changes {
    Changes {
        ingress: false,
        gateway: false,
        services: BTreeSet::new(),
        slices: keys.iter().cloned().collect(),
    }
}

fn world_small() -> (Vec<Service>, Vec<EndpointSlice>) {
    versioned(
        vec![
            mk_service("default", "a", &[80, 81]),
            annotate(
                mk_service("default", "b", &[80]),
                annotation::ALGORITHM,
                "bogus",
            ),
            annotate(
                mk_service("shop", "c", &[80]),
                annotation::HOST,
                "c.example.com",
            ),
        ],
        vec![
            mk_slice("default", "a", "p80", 8080, &["10.0.0.1", "10.0.0.2"]),
            mk_slice("default", "a", "p81", 8081, &["10.0.0.1"]),
            mk_slice("default", "b", "p80", 8080, &["10.0.1.1"]),
            mk_slice("shop", "c", "p80", 8080, &["10.0.2.1", "not-an-ip"]),
        ],
    )
}

#[test]
fn a_slice_change_rebuilds_only_its_service_and_equals_a_full_build() {
    let (svcs, mut slices) = world_small();
    let o = Options::default();
    let (b1, _) = built(&svcs, &slices, &o);
    let t1 = b1.table.clone();
    slices[0] = mk_slice("default", "a", "p80", 8080, &["10.0.0.1", "10.0.0.3"]);
    slices[0].metadata.name = Some("slice-0".into());
    slices[0].metadata.resource_version = Some("9999".into());
    slices[0].metadata.uid = Some("slice-uid-0".into());
    let (ss, es) = stores(&svcs, &slices);
    let changes = slices_changed(&[key("default", "slice-0")]);
    let (b2, w2) = translate_changes(
        &ss,
        &es,
        Default::default(),
        Some(&changes),
        &o,
        Some(b1.previous()),
    );

    let t2 = b2.table.clone();
    let (t3, w3) = translate(&svcs, &slices, &o, None);
    assert_eq!(t2, t3, "incremental and full builds agree");
    assert_eq!(w2, w3);
    assert_eq!(t2.to_json()["entries"], t3.to_json()["entries"]);
    assert!(
        Arc::ptr_eq(&t1.http, &t2.http),
        "routes are shared, not rebuilt"
    );
    assert!(
        Arc::ptr_eq(&t1.entries[2], &t2.entries[2]),
        "an unchanged Service's entries are shared"
    );
    assert!(!Arc::ptr_eq(&t1.entries[0], &t2.entries[0]));
    assert!(
        Arc::ptr_eq(
            &t1.entries[0].endpoints[0].state.0,
            &t2.entries[0].endpoints[0].state.0
        ),
        "endpoint state survives the incremental rebuild"
    );
}

#[test]
fn nothing_changed_gives_an_equal_table() {
    let (svcs, slices) = world_small();
    let (ss, es) = stores(&svcs, &slices);
    let o = Options::default();
    let (b1, w1) = translate_changes(&ss, &es, Default::default(), None, &o, None);

    let t1 = b1.table.clone();
    // Told in vain: the same versions.
    let told = Changes {
        ingress: false,
        gateway: false,
        services: [key("default", "a")].into(),
        slices: [key("default", "slice-0")].into(),
    };
    for changes in [Changes::default(), told] {
        let (b2, w2) = translate_changes(
            &ss,
            &es,
            Default::default(),
            Some(&changes),
            &o,
            Some(b1.previous()),
        );

        let t2 = b2.table.clone();
        assert_eq!(t1, t2);
        assert_eq!(w1, w2);
        assert!(
            t1.entries
                .iter()
                .zip(&t2.entries)
                .all(|(a, b)| Arc::ptr_eq(a, b))
        );
    }
}

#[test]
fn a_service_change_or_new_options_take_the_full_path() {
    let (mut svcs, slices) = world_small();
    let o = Options::default();
    let (b1, _) = built(&svcs, &slices, &o);
    svcs[0] = annotate(svcs[0].clone(), annotation::ACL_MATCH, "/new");
    svcs[0].metadata.resource_version = Some("7777".into());
    let (ss, es) = stores(&svcs, &slices);
    let changes = Changes {
        ingress: false,
        gateway: false,
        services: [key("default", "a")].into(),
        slices: BTreeSet::new(),
    };
    let (b2, w2) = translate_changes(
        &ss,
        &es,
        Default::default(),
        Some(&changes),
        &o,
        Some(b1.previous()),
    );

    let t2 = b2.table.clone();
    let (t3, w3) = translate(&svcs, &slices, &o, None);
    assert_eq!(t2, t3);
    assert_eq!(w2, w3);
    assert!(route(&t2, "", "/new").is_some());
    let opts = Options {
        default_algorithm: Algorithm::Source,
        ..Default::default()
    };
    let (b4, _) = translate_changes(
        &ss,
        &es,
        Default::default(),
        Some(&Changes::default()),
        &opts,
        Some(b2.previous()),
    );

    let t4 = b4.table.clone();
    assert_eq!(entry(&t4, "a").algorithm, Algorithm::Source);
}

#[test]
fn untold_adds_and_deletes_are_caught_by_counting() {
    let (svcs, slices) = world_small();
    let o = Options::default();
    let (b1, _) = built(&svcs, &slices, &o);
    let nothing = Changes::default();
    // A slice deleted untold.
    let (ss, es) = stores(&svcs, &slices[1..]);
    let (b2, _) = translate_changes(
        &ss,
        &es,
        Default::default(),
        Some(&nothing),
        &o,
        Some(b1.previous()),
    );

    let t2 = b2.table.clone();
    assert_eq!(t2, translate(&svcs, &slices[1..], &o, None).0);
    // A Service added untold.
    let mut more = svcs.clone();
    more.push(mk_service("default", "d", &[80]));
    let (ss, es) = stores(&more, &slices);
    let (b3, _) = translate_changes(
        &ss,
        &es,
        Default::default(),
        Some(&nothing),
        &o,
        Some(b1.previous()),
    );

    let t3 = b3.table.clone();
    assert!(t3.entries.iter().any(|e| &*e.name == "d"));
}

#[test]
fn objects_without_versions_are_always_translated_again() {
    let svcs = vec![mk_service("default", "a", &[80])];
    let slices = vec![mk_slice("default", "a", "p80", 80, &["10.0.0.1"])];
    let (ss, es) = stores(&svcs, &slices);
    let o = Options::default();
    let (b1, _) = translate_changes(&ss, &es, Default::default(), None, &o, None);

    let slices2 = vec![mk_slice("default", "a", "p80", 80, &["10.0.0.2"])];
    let (_, es2) = stores(&svcs, &slices2);
    let changes = slices_changed(&[key("default", "a-p80-1")]);
    let (b2, _) = translate_changes(
        &ss,
        &es2,
        Default::default(),
        Some(&changes),
        &o,
        Some(b1.previous()),
    );

    let t2 = b2.table.clone();
    assert_eq!(
        addrs(entry(&t2, "a")),
        ["10.0.0.2:80"],
        "an unversioned change is never missed"
    );
}

/// One step of a random history of the stores.
#[derive(Debug, Clone)]
enum Edit {
    /// Add or replace Service `n` (ports chosen by `ports`, annotation variant `ann`).
    PutService {
        n: u8,
        ports: u8,
        ann: u8,
    },
    DeleteService {
        n: u8,
    },
    /// Add or replace slice `k`: feeding Service `target` (6 and 7: no such Service, 8: no
    /// label), port `port`, addresses chosen by `addrs`, FQDN when `fqdn`.
    PutSlice {
        k: u8,
        target: u8,
        port: u8,
        addrs: u8,
        fqdn: bool,
    },
    DeleteSlice {
        k: u8,
    },
    /// Tell a key that did not change.
    Touch {
        k: u8,
    },
}

fn edit() -> impl Strategy<Value = Edit> {
    // Mostly slice edits, as in a cluster: a Service edit makes the whole batch a full build.
    prop_oneof![
        1 => (0u8..6, 1u8..4, 0u8..4).prop_map(|(n, ports, ann)| Edit::PutService { n, ports, ann }),
        1 => (0u8..6).prop_map(|n| Edit::DeleteService { n }),
        8 => (0u8..10, 0u8..9, 0u8..2, any::<u8>(), prop::bool::weighted(0.05)).prop_map(
            |(k, target, port, addrs, fqdn)| Edit::PutSlice {
                k,
                target,
                port,
                addrs,
                fqdn
            }
        ),
        2 => (0u8..10).prop_map(|k| Edit::DeleteSlice { k }),
        2 => (0u8..10).prop_map(|k| Edit::Touch { k }),
    ]
}

/// Applies `edit` to the stores as a watcher would, recording what changed in `changes`.
fn apply_edit(
    services: &mut Store<Service>,
    slices: &mut Store<EndpointSlice>,
    changes: &mut Changes,
    edit: &Edit,
    version: u64,
) {
    let rv = Some(version.to_string());
    match *edit {
        Edit::PutService { n, ports, ann } => {
            let name = format!("s{n}");
            let ports: Vec<u16> = [80, 81]
                .into_iter()
                .enumerate()
                .filter(|(i, _)| ports & (1 << i) != 0)
                .map(|(_, p)| p)
                .collect();
            let mut s = mk_service("default", &name, &ports);
            s = match ann {
                0 => s,
                1 => annotate(s, annotation::HOST, &format!("{name}.example.com")),
                2 => annotate(s, annotation::ACL_MATCH, "/shared"),
                _ => annotate(s, annotation::ALGORITHM, "nonsense"),
            };
            s.metadata.resource_version = rv;
            s.metadata.uid = Some(name.clone());
            services.insert(key("default", &name), s);
            changes.services.insert(key("default", &name));
        }
        Edit::DeleteService { n } => {
            let k = key("default", &format!("s{n}"));
            services.remove(&k);
            changes.services.insert(k);
        }
        Edit::PutSlice {
            k,
            target,
            port,
            addrs,
            fqdn,
        } => {
            let pool = ["10.1.0.1", "10.1.0.2", "10.1.0.3", "10.1.0.4", "bogus"];
            let eps: Vec<(&str, Option<bool>)> = pool
                .iter()
                .enumerate()
                .filter(|(i, _)| addrs & (1 << i) != 0)
                .map(|(i, a)| (*a, Some(addrs & (0x20 << (i % 3)) == 0)))
                .collect();
            let p = [80u16, 81][usize::from(port)];
            let mut s = mk_slice_with(
                "default",
                &format!("s{target}"),
                &format!("p{p}"),
                8000 + p,
                eps,
            );
            let name = format!("slice-{k}");
            s.metadata.name = Some(name.clone());
            s.metadata.resource_version = rv;
            s.metadata.uid = Some(name.clone());
            if target == 8 {
                s.metadata.labels = None;
            }
            if fqdn {
                s.address_type = "FQDN".into();
            }
            slices.insert(key("default", &name), s);
            changes.slices.insert(key("default", &name));
        }
        Edit::DeleteSlice { k } => {
            let k = key("default", &format!("slice-{k}"));
            slices.remove(&k);
            changes.slices.insert(k);
        }
        Edit::Touch { k } => {
            changes.slices.insert(key("default", &format!("slice-{k}")));
            changes.services.insert(key("default", &format!("s{k}")));
        }
    }
}

/// A table's JSON without its generation, which counts builds and so differs by history.
fn json_of(t: &RoutingTable) -> serde_json::Value {
    let mut j = t.to_json();
    j["generation"] = serde_json::Value::Null;
    j
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// Along any history of adds, modifications and deletes of Services and EndpointSlices,
    /// built in batches with their change sets, every incremental table equals a cold build of
    /// the same stores: the table, its JSON and the warnings.
    #[test]
    fn incremental_equals_cold(
        start in prop::collection::vec(edit(), 0..12),
        batches in prop::collection::vec(prop::collection::vec(edit(), 1..4), 1..8),
    ) {
        let o = Options::default();
        let (mut services, mut slices) = (Store::new(), Store::new());
        let mut version = 1;
        let mut ignored = Changes::default();
        for e in &start {
            version += 1;
            apply_edit(&mut services, &mut slices, &mut ignored, e, version);
        }
        let (mut table, _) = translate_changes(&services, &slices, Default::default(), None, &o, None);
        for batch in &batches {
            let mut changes = Changes::default();
            for e in batch {
                version += 1;
                apply_edit(&mut services, &mut slices, &mut changes, e, version);
            }
            let (next, w_inc) =
                translate_changes(&services, &slices, Default::default(), Some(&changes), &o, Some(table.previous()));
            let (cold, w_cold) = translate_changes(&services, &slices, Default::default(), None, &o, None);
            prop_assert_eq!(&next.table, &cold.table);
            prop_assert_eq!(json_of(&next.table), json_of(&cold.table));
            prop_assert_eq!(w_inc, w_cold);
            table = next;
        }
    }
}

// === hostile annotations ===

const ANNOTATION_KEYS: &[&str] = &[
    "serviceloadbalancer/lb.host",
    "serviceloadbalancer/lb.aclMatch",
    "serviceloadbalancer/lb.algorithm",
    "serviceloadbalancer/lb.maxconn",
    "serviceloadbalancer/lb.cookie-sticky-session",
    "serviceloadbalancer/lb.sslTerm",
    "serviceloadbalancer/lb.check-interval",
    "serviceloadbalancer/lb.check-path",
];

/// What the good Service (`good`, host `good.test`) becomes in a table.
fn good_part(t: &RoutingTable) -> (serde_json::Value, serde_json::Value) {
    let j = t.to_json();
    (
        j["entries"]["good"].clone(),
        j["http"]["hosts"]["good.test"].clone(),
    )
}

fn good_world() -> (Service, EndpointSlice) {
    let good = annotate(
        mk_service("default", "good", &[80]),
        "serviceloadbalancer/lb.host",
        "good.test",
    );
    (good, mk_slice("default", "good", "p80", 80, &["10.9.0.1"]))
}

proptest! {
    /// Any annotation values on other Services (named to sort after `good`, so a claim on the
    /// same host is theirs to lose) never panic and never change the good Service's routing.
    #[test]
    fn hostile_annotations_stay_local(
        hostile in prop::collection::vec(
            (0..ANNOTATION_KEYS.len(), prop_oneof![
                any::<String>(),
                "[ -~\n\r\t\"'\\\\]{0,40}",
                "(/|\\*\\.|-|[0-9]{1,30}|[a-z.]{1,10}|good\\.test|ms|s|m| ){0,8}",
            ]),
            1..12,
        )
    ) {
        let (good, good_slice) = good_world();
        let (alone, _) = run(std::slice::from_ref(&good), std::slice::from_ref(&good_slice));
        let mut services = vec![good];
        let mut slices = vec![good_slice];
        for (i, (k, v)) in hostile.iter().enumerate() {
            let name = format!("zz-hostile-{i}");
            services.push(annotate(mk_service("default", &name, &[80]), ANNOTATION_KEYS[*k], v));
            slices.push(mk_slice("default", &name, "p80", 80, &["10.9.0.2"]));
        }
        let (mixed, _) = run(&services, &slices);
        prop_assert_eq!(good_part(&alone), good_part(&mixed));
    }
}

#[test]
fn entry_names_are_built_at_their_exact_length() {
    for (ns, name, port, want) in [
        (None, "web", 80, "web"),
        (None, "web", 8080, "web:8080"),
        (Some("shop"), "web", 0, "shop/web:0"),
        (Some("shop"), "web", 65535, "shop/web:65535"),
    ] {
        let got = super::entry_name(ns, name, port);
        assert_eq!(got, want);
        assert_eq!(got.capacity(), got.len());
    }
}

/// A typo under the annotations' prefix is a warning naming the key it probably meant, and
/// changes nothing else; keys under other prefixes are not ours to judge.
#[test]
fn unknown_annotation_keys_are_warned_about_with_the_nearest_known_key() {
    let mut svc = mk_service("default", "web", &[80]);
    for (k, v) in [
        ("serviceloadbalancer/lb.sticky", "true"),
        ("serviceloadbalancer/lb.algoritm", "source"),
        ("serviceloadbalancer/lb.host", "web.example.com"),
        ("example.com/other", "x"),
    ] {
        svc = annotate(svc, k, v);
    }
    let slices = vec![mk_slice("default", "web", "p80", 80, &["10.0.0.1"])];
    let (t, w) = translate(&[svc], &slices, &Options::default(), None);
    let msgs: Vec<&str> = w
        .iter()
        .filter(|w| w.reason == WarningReason::InvalidAnnotation)
        .map(|w| w.message.as_str())
        .collect();
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert!(
        msgs.iter().any(|m| m.contains("lb.sticky")
            && m.ends_with("did you mean serviceloadbalancer/lb.cookie-sticky-session?")),
        "{msgs:?}"
    );
    assert!(
        msgs.iter().any(|m| m.contains("lb.algoritm")
            && m.ends_with("did you mean serviceloadbalancer/lb.algorithm?")),
        "{msgs:?}"
    );
    assert!(!entry(&t, "web").cookie_sticky);
    assert!(route(&t, "web.example.com", "/").is_some());
}

/// `default/kubernetes` (the API server's HTTPS port) is skipped with a warning unless asked
/// for by flag or by `--target-service`.
#[test]
fn the_api_servers_own_service_is_skipped_unless_asked_for() {
    let svcs = vec![
        mk_service("default", "kubernetes", &[443]),
        mk_service("default", "web", &[80]),
    ];
    let slices = vec![
        mk_slice("default", "kubernetes", "p443", 443, &["10.0.0.100"]),
        mk_slice("default", "web", "p80", 80, &["10.0.0.1"]),
    ];
    let (t, w) = translate(&svcs, &slices, &Options::default(), None);
    assert!(t.entries.iter().all(|e| !e.name.starts_with("kubernetes")));
    assert!(t.entries.iter().any(|e| &*e.name == "web"));
    assert!(w.iter().any(|w| w.reason == WarningReason::Skipped
        && w.object.name == "kubernetes"
        && w.message.contains("--serve-kubernetes-service")));
    for o in [
        Options {
            serve_kubernetes_service: true,
            ..Options::default()
        },
        Options {
            target_service: Some("default/kubernetes".into()),
            ..Options::default()
        },
    ] {
        let (t, _) = translate(&svcs, &slices, &o, None);
        assert!(
            t.entries.iter().any(|e| e.name.starts_with("kubernetes")),
            "{o:?}"
        );
    }
}

mod gateway;
mod ingress;
mod trust;

//! Ingress translation: classes, hosts, path types, backends, TLS Secrets, annotations and
//! conflicts, one behaviour per test.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressClass, IngressClassSpec,
    IngressRule, IngressServiceBackend, IngressSpec, IngressTLS, ServiceBackendPort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;

fn class(name: &str, controller: &str, default: bool) -> IngressClass {
    IngressClass {
        metadata: ObjectMeta {
            name: Some(name.into()),
            annotations: default.then(|| {
                BTreeMap::from([(
                    "ingressclass.kubernetes.io/is-default-class".to_string(),
                    "true".to_string(),
                )])
            }),
            ..Default::default()
        },
        spec: Some(IngressClassSpec {
            controller: Some(controller.into()),
            parameters: None,
        }),
    }
}

fn ours() -> IngressClass {
    class("switchyard", DEFAULT_CONTROLLER_NAME, false)
}

fn backend(svc: &str, port: u16) -> IngressBackend {
    IngressBackend {
        resource: None,
        service: Some(IngressServiceBackend {
            name: svc.into(),
            port: Some(ServiceBackendPort {
                name: None,
                number: Some(port.into()),
            }),
        }),
    }
}

fn path(p: &str, kind: &str, to: IngressBackend) -> HTTPIngressPath {
    HTTPIngressPath {
        backend: to,
        path: Some(p.into()),
        path_type: kind.into(),
    }
}

fn rule(host: Option<&str>, paths: Vec<HTTPIngressPath>) -> IngressRule {
    IngressRule {
        host: host.map(Into::into),
        http: Some(HTTPIngressRuleValue { paths }),
    }
}

fn ing(ns: &str, name: &str, class: Option<&str>, rules: Vec<IngressRule>) -> Ingress {
    Ingress {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        spec: Some(IngressSpec {
            ingress_class_name: class.map(Into::into),
            rules: Some(rules),
            ..Default::default()
        }),
        status: None,
    }
}

fn annotated(mut i: Ingress, key: &str, value: &str) -> Ingress {
    i.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key.into(), value.into());
    i
}

fn created(mut i: Ingress, rfc3339: &str) -> Ingress {
    i.metadata.creation_timestamp = Some(Time(rfc3339.parse().unwrap()));
    i
}

fn tls_secret(ns: &str, name: &str, crt: &str, key: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            ("tls.crt".to_string(), ByteString(crt.as_bytes().to_vec())),
            ("tls.key".to_string(), ByteString(key.as_bytes().to_vec())),
        ])),
        ..Default::default()
    }
}

/// A syntactically valid PEM pair (the key's fit is the TLS side's check).
const CRT: &str = "-----BEGIN CERTIFICATE-----\nMIIBAA==\n-----END CERTIFICATE-----\n";
const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIIBAA==\n-----END PRIVATE KEY-----\n";

fn svcs() -> (Vec<Service>, Vec<EndpointSlice>) {
    (
        vec![
            mk_service("default", "web", &[80]),
            mk_service("default", "api", &[8080]),
        ],
        vec![
            mk_slice("default", "web", "p80", 8000, &["10.0.0.1"]),
            mk_slice("default", "api", "p8080", 9000, &["10.0.0.2"]),
        ],
    )
}

fn build(
    svcs: &[Service],
    slices: &[EndpointSlice],
    ingresses: &[Ingress],
    classes: &[IngressClass],
    secrets: &[Secret],
    o: &Options,
) -> (Built, Vec<Warning>) {
    let refs = IngressRefs::of(ingresses, classes, secrets);
    translate_with(svcs, slices, refs.inputs(), o, None)
}

fn with(ingresses: &[Ingress]) -> (RoutingTable, Vec<Warning>) {
    let (s, e) = svcs();
    let (b, w) = build(&s, &e, ingresses, &[ours()], &[], &Options::default());
    (b.table, w)
}

/// Where a request reaches on `frontend`: the entry, with the route's path kind.
fn reach(t: &RoutingTable, frontend: Frontend, host: &str, path: &str) -> Option<String> {
    let host = (!host.is_empty()).then_some(host.as_bytes());
    t.router(frontend)?
        .lookup(host, path)
        .map(|r| t.entries[r.target as usize].name.to_string())
}

fn http(t: &RoutingTable, host: &str, path: &str) -> Option<String> {
    reach(t, Frontend::Http, host, path)
}

fn ingress_warnings(w: &[Warning]) -> Vec<String> {
    w.iter()
        .filter(|w| w.object.kind == "Ingress")
        .map(|w| format!("{}: {}", w.object.name, w.message))
        .collect()
}

#[test]
fn only_ingresses_of_our_classes_are_served() {
    let (s, e) = svcs();
    let r = || {
        vec![rule(
            Some("a.example.com"),
            vec![path("/", "Prefix", backend("web", 80))],
        )]
    };
    let ingresses = [
        ing("default", "mine", Some("switchyard"), r()),
        ing("default", "nginx", Some("nginx"), r()),
        ing("default", "classless", None, r()),
    ];
    let classes = [ours(), class("nginx", "k8s.io/ingress-nginx", false)];
    let (b, w) = build(&s, &e, &ingresses, &classes, &[], &Options::default());
    let served: Vec<_> = b
        .memo
        .served_ingresses()
        .iter()
        .map(|k| k.1.clone())
        .collect();
    assert_eq!(served, ["mine"]);
    assert!(ingress_warnings(&w).is_empty(), "{w:?}");

    // A default class of ours takes class-less Ingresses; so does the flag.
    let classes = [class("switchyard", DEFAULT_CONTROLLER_NAME, true)];
    let (b, _) = build(&s, &e, &ingresses, &classes, &[], &Options::default());
    let served: Vec<_> = b
        .memo
        .served_ingresses()
        .iter()
        .map(|k| k.1.clone())
        .collect();
    assert_eq!(served, ["classless", "mine"]);
    let o = Options {
        watch_ingress_without_class: true,
        ..Default::default()
    };
    let (b, _) = build(&s, &e, &ingresses, &[ours()], &[], &o);
    assert_eq!(b.memo.served_ingresses().len(), 2);

    // Another controller name: nothing is ours.
    let o = Options {
        controller_name: "example.com/other".into(),
        ..Default::default()
    };
    let (b, _) = build(&s, &e, &ingresses, &classes, &[], &o);
    assert!(b.memo.served_ingresses().is_empty());
    assert_eq!(http(&b.table, "a.example.com", "/"), None);

    // The legacy annotation names a class too.
    let legacy = annotated(
        ing("default", "old", None, r()),
        "kubernetes.io/ingress.class",
        "switchyard",
    );
    let (b, _) = build(&s, &e, &[legacy], &[ours()], &[], &Options::default());
    assert_eq!(b.memo.served_ingresses().len(), 1);
}

#[test]
fn a_wildcard_host_matches_exactly_one_label_and_exact_hosts_win() {
    let (t, w) = with(&[ing(
        "default",
        "i",
        Some("switchyard"),
        vec![
            rule(
                Some("*.example.com"),
                vec![path("/", "Prefix", backend("web", 80))],
            ),
            rule(
                Some("api.example.com"),
                vec![path("/", "Prefix", backend("api", 8080))],
            ),
        ],
    )]);
    assert!(w.iter().all(|w| w.object.kind != "Ingress"), "{w:?}");
    assert_eq!(http(&t, "shop.example.com", "/x").as_deref(), Some("web"));
    assert_eq!(http(&t, "SHOP.Example.com:80", "/").as_deref(), Some("web"));
    assert_eq!(
        http(&t, "api.example.com", "/").as_deref(),
        Some("api:8080")
    );
    assert_eq!(http(&t, "a.b.example.com", "/"), None, "two labels");
    assert_eq!(http(&t, "example.com", "/"), None, "no label");
}

#[test]
fn path_types_exact_prefix_and_implementation_specific() {
    let (t, w) = with(&[ing(
        "default",
        "i",
        Some("switchyard"),
        vec![rule(
            Some("h.test"),
            vec![
                path("/foo", "Prefix", backend("web", 80)),
                path("/foo", "Exact", backend("api", 8080)),
                path("/foo/bar/", "Prefix", backend("api", 8080)),
                path("/impl", "ImplementationSpecific", backend("web", 80)),
                path("/bad", "Regex", backend("web", 80)),
            ],
        )],
    )]);
    let at = |p: &str| http(&t, "h.test", p);
    assert_eq!(
        at("/foo").as_deref(),
        Some("api:8080"),
        "Exact beats Prefix"
    );
    assert_eq!(at("/foo/").as_deref(), Some("web"));
    assert_eq!(at("/foo/x").as_deref(), Some("web"));
    assert_eq!(at("/foobar"), None, "element-wise");
    assert_eq!(
        at("/foo/bar").as_deref(),
        Some("api:8080"),
        "trailing slash ignored, longest wins"
    );
    assert_eq!(at("/foo/bar/baz").as_deref(), Some("api:8080"));
    assert_eq!(
        at("/impl/x").as_deref(),
        Some("web"),
        "ImplementationSpecific is Prefix"
    );
    assert_eq!(at("/bad"), None);
    let warned = ingress_warnings(&w);
    assert!(
        warned.len() == 1 && warned[0].contains("pathType \"Regex\""),
        "{warned:?}"
    );
}

#[test]
fn default_backend_catches_what_no_rule_matches_and_ports_resolve_by_name() {
    let mut i = ing(
        "default",
        "i",
        Some("switchyard"),
        vec![rule(
            Some("h.test"),
            vec![path("/api", "Prefix", backend("api", 8080))],
        )],
    );
    let spec = i.spec.as_mut().unwrap();
    spec.default_backend = Some(IngressBackend {
        resource: None,
        service: Some(IngressServiceBackend {
            name: "web".into(),
            port: Some(ServiceBackendPort {
                name: Some("p80".into()),
                number: None,
            }),
        }),
    });
    let (t, w) = with(&[i]);
    assert!(ingress_warnings(&w).is_empty(), "{w:?}");
    assert_eq!(http(&t, "h.test", "/api/v1").as_deref(), Some("api:8080"));
    assert_eq!(http(&t, "h.test", "/other").as_deref(), Some("web"));
    assert_eq!(http(&t, "elsewhere.test", "/").as_deref(), Some("web"));
}

#[test]
fn unresolvable_backends_warn_and_answer_503_or_are_skipped() {
    let mut resource = backend("x", 1);
    resource.service = None;
    resource.resource = Some(k8s_openapi::api::core::v1::TypedLocalObjectReference {
        api_group: Some("storage.example.com".into()),
        kind: "Bucket".into(),
        name: "b".into(),
    });
    let (t, w) = with(&[ing(
        "default",
        "i",
        Some("switchyard"),
        vec![rule(
            Some("h.test"),
            vec![
                path("/gone", "Prefix", backend("nosuch", 80)),
                path("/port", "Prefix", backend("web", 81)),
                path("/res", "Prefix", resource),
            ],
        )],
    )]);
    let warned = ingress_warnings(&w).join("\n");
    assert!(
        warned.contains("Service default/nosuch does not exist"),
        "{warned}"
    );
    assert!(warned.contains("has no port 81"), "{warned}");
    assert!(warned.contains("Bucket resource"), "{warned}");
    // The missing ones route to an entry without endpoints (503); the resource does not route.
    let gone = http(&t, "h.test", "/gone").unwrap();
    assert!(entry(&t, &gone).endpoints.is_empty());
    assert!(
        entry(&t, &http(&t, "h.test", "/port").unwrap())
            .endpoints
            .is_empty()
    );
    assert_eq!(http(&t, "h.test", "/res"), None);
    // The rest of the table is untouched.
    assert_eq!(addrs(entry(&t, "web")), ["10.0.0.1:8000"]);
}

#[test]
fn a_service_the_annotation_mode_skips_still_backs_an_ingress() {
    let mut lb = mk_service("default", "lb", &[80]);
    lb.spec.as_mut().unwrap().type_ = Some("LoadBalancer".into());
    let slices = [mk_slice("default", "lb", "p80", 8000, &["10.0.0.9"])];
    let i = ing(
        "default",
        "i",
        Some("switchyard"),
        vec![rule(
            Some("lb.test"),
            vec![path("/", "Prefix", backend("lb", 80))],
        )],
    );
    let (b, _) = build(&[lb], &slices, &[i], &[ours()], &[], &Options::default());
    let t = &b.table;
    assert_eq!(http(t, "lb.test", "/").as_deref(), Some("lb"));
    assert_eq!(addrs(entry(t, "lb")), ["10.0.0.9:8000"]);
    // No path route of its own: the annotation mode still skips it.
    assert_eq!(http(t, "", "/lb"), None);
}

#[test]
fn tls_secrets_become_certificates_and_their_hosts_redirect() {
    let mut i = ing(
        "default",
        "i",
        Some("switchyard"),
        vec![
            rule(
                Some("secure.test"),
                vec![path("/", "Prefix", backend("web", 80))],
            ),
            rule(
                Some("plain.test"),
                vec![path("/", "Prefix", backend("web", 80))],
            ),
        ],
    );
    i.spec.as_mut().unwrap().tls = Some(vec![IngressTLS {
        hosts: Some(vec!["secure.test".into()]),
        secret_name: Some("secure-cert".into()),
    }]);
    let (s, e) = svcs();
    let secret_of = || tls_secret("default", "secure-cert", CRT, KEY);
    let (b, w) = build(
        &s,
        &e,
        &[i.clone()],
        &[ours()],
        &[secret_of()],
        &Options::default(),
    );
    assert!(ingress_warnings(&w).is_empty(), "{w:?}");
    let t = &b.table;
    assert_eq!(t.certificates.len(), 1);
    assert_eq!(&*t.certificates[0].secret, "default/secure-cert");
    assert_eq!(
        t.certificates[0].hosts,
        vec![Box::<str>::from("secure.test")]
    );
    let redirect = |host: &str| {
        let rule = t.http.lookup(Some(host.as_bytes()), "/").unwrap();
        t.policies[rule.policy.unwrap() as usize].https_redirect
    };
    assert_eq!(redirect("secure.test"), Some(308));
    assert_eq!(redirect("plain.test"), None);
    // The TLS port serves the same rules, never redirecting.
    let rule = t.https.lookup(Some(b"secure.test"), "/").unwrap();
    assert_eq!(t.entries[rule.target as usize].name.as_ref(), "web");

    // Without a TLS port (offline, no --ssl-cert) spec.tls cannot be served: a warning on the
    // Ingress, which still builds.
    let closed = Options {
        tls_port: false,
        ..Options::default()
    };
    let (b, w) = build(&s, &e, &[i.clone()], &[ours()], &[secret_of()], &closed);
    let warned = ingress_warnings(&w).join("\n");
    assert!(warned.contains("spec.tls cannot be served"), "{warned}");
    assert!(b.table.http.lookup(Some(b"secure.test"), "/").is_some());

    // ssl-redirect "false" proxies plain HTTP; a missing Secret is a warning, routes stay.
    let off = annotated(i.clone(), ingress_annotation::SSL_REDIRECT, "false");
    let (b, w) = build(&s, &e, &[off], &[ours()], &[], &Options::default());
    let rule = b.table.http.lookup(Some(b"secure.test"), "/").unwrap();
    assert_eq!(
        b.table.policies[rule.policy.unwrap() as usize].https_redirect,
        None
    );
    assert!(b.table.certificates.is_empty());
    let warned = ingress_warnings(&w).join("\n");
    assert!(
        warned.contains("TLS Secret default/secure-cert does not exist"),
        "{warned}"
    );

    // A Secret of another type, or without a key, is a warning too.
    let mut opaque = tls_secret("default", "secure-cert", CRT, KEY);
    opaque.type_ = Some("Opaque".into());
    let (b, w) = build(
        &s,
        &e,
        &[i.clone()],
        &[ours()],
        &[opaque],
        &Options::default(),
    );
    assert!(b.table.certificates.is_empty());
    assert!(
        ingress_warnings(&w)
            .join("\n")
            .contains("not kubernetes.io/tls"),
        "{w:?}"
    );
    let nokey = tls_secret("default", "secure-cert", CRT, "not a key");
    let (b, w) = build(&s, &e, &[i], &[ours()], &[nokey], &Options::default());
    assert!(b.table.certificates.is_empty());
    assert!(
        ingress_warnings(&w).join("\n").contains("bad tls.key"),
        "{w:?}"
    );
}

#[test]
fn annotations_set_the_route_policy_and_unsupported_nginx_ones_warn_once() {
    let i = ing(
        "default",
        "i",
        Some("switchyard"),
        vec![rule(
            Some("h.test"),
            vec![path("/app", "Prefix", backend("web", 80))],
        )],
    );
    let i = annotated(i, ingress_annotation::REWRITE_TARGET, "/");
    let i = annotated(
        i,
        "nginx.ingress.kubernetes.io/whitelist-source-range",
        "10.0.0.0/8, bogus",
    );
    let i = annotated(i, ingress_annotation::DENYLIST_SOURCE_RANGE, "10.9.0.0/16");
    let i = annotated(
        i,
        "nginx.ingress.kubernetes.io/configuration-snippet",
        "more_set_headers x",
    );
    let i = annotated(i, "nginx.ingress.kubernetes.io/proxy-buffering", "on");
    let i = annotated(i, "nginx.ingress.kubernetes.io/use-regex", "false");
    let i = annotated(i, "switchyard.io/no-such-thing", "1");
    let (t, w) = with(&[i]);
    let hit = t.http.lookup(Some(b"h.test"), "/app/x").unwrap();
    let p = &t.policies[hit.policy.unwrap() as usize];
    assert_eq!(p.rewrite.as_deref(), Some("/"));
    assert_eq!(&*p.origin, "default/i");
    let nets = |v: &[crate::table::cidr::Cidr]| v.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    assert_eq!(nets(&p.allow), ["10.0.0.0/8"]);
    assert_eq!(nets(&p.deny), ["10.9.0.0/16"]);
    let warned = ingress_warnings(&w);
    let nginx: Vec<_> = warned
        .iter()
        .filter(|m| m.contains("ingress-nginx"))
        .collect();
    assert_eq!(nginx.len(), 1, "{warned:?}");
    assert!(nginx[0].contains("configuration-snippet") && nginx[0].contains("proxy-buffering"));
    assert!(
        !nginx[0].contains("use-regex"),
        "a harmless value is not warned about"
    );
    assert!(warned.iter().any(|m| m.contains("\"bogus\"")), "{warned:?}");
    assert!(
        warned
            .iter()
            .any(|m| m.contains("unknown annotation switchyard.io/no-such-thing"))
    );

    // Capture groups are refused; an allowlist with no valid range refuses everyone.
    let bad = annotated(
        annotated(
            ing(
                "default",
                "j",
                Some("switchyard"),
                vec![rule(
                    Some("j.test"),
                    vec![path("/", "Prefix", backend("web", 80))],
                )],
            ),
            ingress_annotation::REWRITE_TARGET,
            "/$1",
        ),
        ingress_annotation::ALLOWLIST_SOURCE_RANGE,
        "nonsense",
    );
    let (t, w) = with(&[bad]);
    let rule = t.http.lookup(Some(b"j.test"), "/").unwrap();
    let p = &t.policies[rule.policy.unwrap() as usize];
    assert_eq!(p.rewrite, None);
    assert!(!p.admits(Some("10.0.0.1".parse().unwrap())));
    assert!(!p.admits(Some("::1".parse().unwrap())));
    assert!(
        ingress_warnings(&w).join("\n").contains("capture groups"),
        "{w:?}"
    );
}

#[test]
fn conflicts_go_to_the_oldest_ingress_and_services_keep_their_path_routes() {
    let r = |svc: &str, port: u16| {
        vec![rule(
            Some("h.test"),
            vec![path("/", "Prefix", backend(svc, port))],
        )]
    };
    let young = created(
        ing("default", "a-young", Some("switchyard"), r("api", 8080)),
        "2026-05-01T00:00:00Z",
    );
    let old = created(
        ing("default", "z-old", Some("switchyard"), r("web", 80)),
        "2025-01-01T00:00:00Z",
    );
    for order in [[young.clone(), old.clone()], [old.clone(), young.clone()]] {
        let (t, w) = with(&order);
        assert_eq!(
            http(&t, "h.test", "/").as_deref(),
            Some("web"),
            "the older wins"
        );
        let conflicts: Vec<_> = w
            .iter()
            .filter(|w| w.reason == WarningReason::RouteConflict)
            .collect();
        assert!(
            conflicts
                .iter()
                .any(|w| w.object.name == "a-young"
                    && w.message.contains("Ingress default/z-old wins")),
            "{conflicts:?}"
        );
    }
    // A host-less Ingress path inside a Service's own path route loses to it.
    let inside = ing(
        "default",
        "i",
        Some("switchyard"),
        vec![rule(
            None,
            vec![path("/web/admin", "Prefix", backend("api", 8080))],
        )],
    );
    let (t, w) = with(&[inside]);
    assert_eq!(http(&t, "", "/web/admin"), Some("web".into()));
    assert!(
        w.iter()
            .any(|w| w.object.kind == "Ingress" && w.reason == WarningReason::RouteConflict),
        "{w:?}"
    );
}

#[test]
fn ingress_input_order_does_not_matter() {
    let a = ing(
        "default",
        "a",
        Some("switchyard"),
        vec![rule(
            Some("a.test"),
            vec![path("/", "Prefix", backend("web", 80))],
        )],
    );
    let b = ing(
        "default",
        "b",
        Some("switchyard"),
        vec![rule(
            Some("a.test"),
            vec![path("/", "Prefix", backend("api", 8080))],
        )],
    );
    let (t1, w1) = with(&[a.clone(), b.clone()]);
    let (t2, w2) = with(&[b, a]);
    assert_eq!(t1, t2);
    assert_eq!(w1, w2);
}

#[test]
fn an_ingress_change_rebuilds_in_full() {
    let (s, e) = svcs();
    let (ss, es) = stores(&s, &e);
    let i = ing(
        "default",
        "i",
        Some("switchyard"),
        vec![rule(
            Some("h.test"),
            vec![path("/", "Prefix", backend("web", 80))],
        )],
    );
    let classes = [ours()];
    let one = [&i];
    let class_refs: Vec<&IngressClass> = classes.iter().collect();
    let inputs = IngressInputs {
        ingresses: &one,
        classes: &class_refs,
        secrets: &[],
        config_maps: &[],
        gateway: Default::default(),
    };
    let o = Options::default();
    let (b1, _) = translate_changes(&ss, &es, inputs, None, &o, None);
    assert_eq!(http(&b1.table, "h.test", "/").as_deref(), Some("web"));
    // The Ingress goes: told as an Ingress change, the build drops its routes.
    let told = Changes {
        ingress: true,
        ..Default::default()
    };
    let (b2, _) = translate_changes(
        &ss,
        &es,
        IngressInputs {
            ingresses: &[],
            ..inputs
        },
        Some(&told),
        &o,
        Some(b1.previous()),
    );
    assert_eq!(http(&b2.table, "h.test", "/"), None);
    assert!(b2.memo.served_ingresses().is_empty());
}

#[test]
fn endpoints_of_an_ingress_only_entry_follow_their_slices() {
    let mut lb = mk_service("default", "lb", &[80]);
    lb.spec.as_mut().unwrap().type_ = Some("LoadBalancer".into());
    let before = [versioned_slice(
        mk_slice("default", "lb", "p80", 8000, &["10.0.0.9"]),
        "1",
    )];
    let after = [versioned_slice(
        mk_slice("default", "lb", "p80", 8000, &["10.0.0.7"]),
        "2",
    )];
    let svc = [versioned_service(lb)];
    let i = ing(
        "default",
        "i",
        Some("switchyard"),
        vec![rule(
            Some("lb.test"),
            vec![path("/", "Prefix", backend("lb", 80))],
        )],
    );
    let (ss, es1) = stores(&svc, &before);
    let (_, es2) = stores(&svc, &after);
    let one = [&i];
    let class = ours();
    let classes = [&class];
    let inputs = IngressInputs {
        ingresses: &one,
        classes: &classes,
        secrets: &[],
        config_maps: &[],
        gateway: Default::default(),
    };
    let o = Options::default();
    let (b1, _) = translate_changes(&ss, &es1, inputs, None, &o, None);
    assert_eq!(addrs(entry(&b1.table, "lb")), ["10.0.0.9:8000"]);
    let key = es2.keys().next().unwrap().clone();
    let changes = Changes {
        slices: [key].into(),
        ..Default::default()
    };
    let (b2, _) = translate_changes(&ss, &es2, inputs, Some(&changes), &o, Some(b1.previous()));
    assert_eq!(addrs(entry(&b2.table, "lb")), ["10.0.0.7:8000"]);
    let (full, _) = translate_changes(&ss, &es2, inputs, None, &o, None);
    assert_eq!(b2.table, full.table);
}

fn versioned_slice(mut s: EndpointSlice, rv: &str) -> EndpointSlice {
    s.metadata.resource_version = Some(rv.into());
    s.metadata.uid = s.metadata.name.clone();
    s
}

fn versioned_service(mut s: Service) -> Service {
    s.metadata.resource_version = Some("1".into());
    s.metadata.uid = s.metadata.name.clone();
    s
}

#[test]
fn protocol_timeout_and_body_size_annotations() {
    let base = || {
        ing(
            "default",
            "i",
            Some("switchyard"),
            vec![rule(
                Some("h.test"),
                vec![path("/", "Prefix", backend("web", 80))],
            )],
        )
    };
    let policy_of = |i: Ingress| {
        let (t, w) = with(&[i]);
        let hit = t.http.lookup(Some(b"h.test"), "/").unwrap();
        (
            t.policies[hit.policy.unwrap() as usize].clone(),
            ingress_warnings(&w),
        )
    };
    let i = annotated(
        base(),
        "nginx.ingress.kubernetes.io/backend-protocol",
        "GRPC",
    );
    let i = annotated(i, "nginx.ingress.kubernetes.io/proxy-read-timeout", "120");
    let i = annotated(i, ingress_annotation::PROXY_BODY_SIZE, "8m");
    let (p, w) = policy_of(i);
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(
        p.protocol,
        Some(crate::table::upstream::BackendProtocol::H2c)
    );
    assert_eq!(p.server_timeout, Some(Duration::from_secs(120)));
    assert_eq!(p.max_body, Some(8 << 20));

    let i = annotated(base(), ingress_annotation::PROXY_READ_TIMEOUT, "1m30s");
    let i = annotated(i, ingress_annotation::PROXY_BODY_SIZE, "0");
    let (p, _) = policy_of(i);
    assert_eq!(p.server_timeout, Some(Duration::from_secs(90)));
    assert_eq!(p.max_body, None, "0 is no limit");
    assert_eq!(p.send_timeout, None);

    // proxy-send-timeout: its own bound on writes; bad values warn and leave the read
    // timeout bounding them.
    let i = annotated(
        base(),
        "nginx.ingress.kubernetes.io/proxy-send-timeout",
        "7",
    );
    let (p, w) = policy_of(i);
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(p.send_timeout, Some(Duration::from_secs(7)));
    let (p, w) = policy_of(annotated(
        base(),
        ingress_annotation::PROXY_SEND_TIMEOUT,
        "0",
    ));
    assert!(
        w.iter()
            .any(|m| m.contains("the read timeout bounds writes")),
        "{w:?}"
    );
    assert_eq!(p.send_timeout, None);

    for (key, value, why) in [
        (ingress_annotation::BACKEND_PROTOCOL, "FCGI", "is not HTTP"),
        (ingress_annotation::PROXY_READ_TIMEOUT, "0", "more than 0"),
        (
            ingress_annotation::PROXY_READ_TIMEOUT,
            "soon",
            "not a duration",
        ),
    ] {
        let (p, w) = policy_of(annotated(base(), key, value));
        assert!(w.iter().any(|m| m.contains(why)), "{key}={value}: {w:?}");
        assert_eq!(
            (p.protocol, p.server_timeout, p.max_body),
            (None, None, None)
        );
    }
    // A body limit is read as people write it, and one that cannot be read is not dropped:
    // no body is taken until it is fixed.
    for (value, bytes) in [
        ("8mb", 8 << 20),
        ("8MiB", 8 << 20),
        ("512K", 512 << 10),
        ("1g", 1 << 30),
    ] {
        let (p, w) = policy_of(annotated(
            base(),
            "nginx.ingress.kubernetes.io/proxy-body-size",
            value,
        ));
        assert_eq!((p.max_body, w.len()), (Some(bytes), 0), "{value}: {w:?}");
    }
    for (value, why) in [
        ("8t", "unit other than"),
        ("99999999999g", "too large"),
        ("eight", "is not a size"),
        ("-1m", "is not a size"),
    ] {
        let (p, w) = policy_of(annotated(
            base(),
            ingress_annotation::PROXY_BODY_SIZE,
            value,
        ));
        assert!(
            w.iter()
                .any(|m| m.contains(why) && m.contains("no request body")),
            "{value}: {w:?}"
        );
        assert_eq!(p.max_body, Some(0), "{value}: the limit fails closed");
    }
}

#[test]
fn typos_and_regular_expressions_are_named_in_warnings() {
    let i = ing(
        "default",
        "i",
        Some("switchyard"),
        vec![rule(
            Some("h.test"),
            vec![
                path(
                    "/something(/|$)(.*)",
                    "ImplementationSpecific",
                    backend("web", 80),
                ),
                path("/v1.2/files", "Prefix", backend("web", 80)),
            ],
        )],
    );
    let i = annotated(i, "switchyard.io/ssl-redirct", "false");
    let i = annotated(i, ingress_annotation::REWRITE_TARGET, "/$2");
    let (_, w) = with(&[i]);
    let warned = ingress_warnings(&w);
    let has = |s: &str| warned.iter().any(|m| m.contains(s));
    assert!(
        has("did you mean switchyard.io/ssl-redirect?"),
        "{warned:?}"
    );
    assert!(has("capture groups ($2)"), "{warned:?}");
    assert!(
        has("\"/something(/|$)(.*)\" looks like a regular expression"),
        "{warned:?}"
    );
    assert!(
        !has("/v1.2/files"),
        "a dot is no regular expression: {warned:?}"
    );
}

/// ingress-nginx's `use-regex` and `rewrite-target`: every path of the host becomes a
/// regular expression whichever Ingress declares it, the longest first; the rewrite keeps its
/// groups; a path the `regex` crate cannot take is warned about and skipped alone.
#[test]
fn regex_paths_cover_their_host_and_are_ordered_longest_first() {
    use crate::table::policy::Part;
    let plain = ing(
        "default",
        "plain",
        Some("switchyard"),
        vec![rule(
            Some("h.test"),
            vec![
                path("/a", "Prefix", backend("web", 80)),
                path("/a/b/", "Exact", backend("web", 80)),
            ],
        )],
    );
    let regex = annotated(
        ing(
            "default",
            "regex",
            Some("switchyard"),
            vec![
                rule(
                    Some("h.test"),
                    vec![
                        path(
                            "/a/(x|y)/(.*)",
                            "ImplementationSpecific",
                            backend("web", 80),
                        ),
                        path("/bad(", "ImplementationSpecific", backend("web", 80)),
                    ],
                ),
                rule(
                    Some("other.test"),
                    vec![path("/o", "Prefix", backend("web", 80))],
                ),
            ],
        ),
        "nginx.ingress.kubernetes.io/rewrite-target",
        "/$2",
    );
    let elsewhere = ing(
        "default",
        "elsewhere",
        Some("switchyard"),
        vec![rule(
            Some("plain.test"),
            vec![path("/p(", "Prefix", backend("web", 80))],
        )],
    );
    let (t, w) = with(&[plain, regex, elsewhere]);
    let rules = t.http.exact.get("h.test").unwrap();
    let order: Vec<&str> = rules.iter().map(|r| &*r.prefix).collect();
    assert_eq!(
        order,
        ["/a/(x|y)/(.*)", "/a/b/", "/a"],
        "longest first, all regex"
    );
    assert!(rules.iter().all(|r| r.regex.is_some() && !r.exact));
    let hit = |host: &[u8], p: &str| t.http.lookup(Some(host), p).map(|r| r.prefix.to_string());
    assert_eq!(hit(b"h.test", "/A/Y/z").as_deref(), Some("/a/(x|y)/(.*)"));
    // `Exact` is a regular expression too here, as in ingress-nginx: `^/a/b/` and more.
    assert_eq!(hit(b"h.test", "/a/b/c").as_deref(), Some("/a/b/"));
    assert_eq!(hit(b"h.test", "/ab").as_deref(), Some("/a"));
    // The Ingress's other host is regex too; a host no such Ingress names is not.
    assert!(
        t.http
            .exact
            .get("other.test")
            .unwrap()
            .iter()
            .all(|r| r.regex.is_some())
    );
    assert!(
        t.http
            .exact
            .get("plain.test")
            .unwrap()
            .iter()
            .all(|r| r.regex.is_none())
    );
    let r = t.http.lookup(Some(b"h.test"), "/a/x/1").unwrap();
    let target = t.policies[r.policy.unwrap() as usize]
        .rewrite_path
        .as_ref()
        .unwrap();
    assert_eq!(&*target.parts, [Part::Text("/".into()), Part::Group(2)]);
    let warned = ingress_warnings(&w);
    assert!(
        warned
            .iter()
            .any(|m| m.contains("\"/bad(\"") && m.contains("path skipped")),
        "{warned:?}"
    );
    assert!(
        warned.iter().any(|m| m.contains("\"/p(\" looks like")),
        "{warned:?}"
    );
    assert!(
        !warned.iter().any(|m| m.contains("does not support")),
        "{warned:?}"
    );
}

/// The bundled demo (`--demo`) serves its Ingresses beside its annotated Services, cleanly.
#[test]
fn the_demo_manifest_serves_its_ingresses_without_warnings() {
    let objects = crate::control::manifests::load(&[crate::demo::MANIFEST_PATH.into()]).unwrap();
    let refs = objects.ingress_refs();
    let (b, w) = translate_with(
        &objects.services,
        &objects.slices,
        refs.inputs(),
        &Options::default(),
        None,
    );
    assert!(w.is_empty(), "{w:?}");
    let t = &b.table;
    assert_eq!(http(t, "shop.local", "/cart").as_deref(), Some("demo"));
    let old = t.http.lookup(Some(b"shop.local"), "/old/cart").unwrap();
    assert_eq!(
        t.policies[old.policy.unwrap() as usize].rewrite.as_deref(),
        Some("/")
    );
    assert_eq!(http(t, "", "/demo/x").as_deref(), Some("demo"));
    assert_eq!(b.memo.served_ingresses().len(), 2);
}

/// A Service's `lb.host` claim and an Ingress rule on the same host and path: the Service's
/// annotations win (the original's mode first), the Ingress is told, and its other paths serve.
#[test]
fn a_service_annotation_beats_an_ingress_on_the_same_host_and_path() {
    let web = annotate(
        mk_service("default", "web", &[80]),
        annotation::HOST,
        "h.test",
    );
    let api = mk_service("default", "api", &[8080]);
    let i = ing(
        "default",
        "i",
        Some("switchyard"),
        vec![rule(
            Some("h.test"),
            vec![
                path("/", "Prefix", backend("api", 8080)),
                path("/only", "Prefix", backend("api", 8080)),
            ],
        )],
    );
    let (b, w) = build(&[web, api], &[], &[i], &[ours()], &[], &Options::default());
    assert_eq!(http(&b.table, "h.test", "/x").as_deref(), Some("web"));
    assert_eq!(
        http(&b.table, "h.test", "/only/x").as_deref(),
        Some("api:8080")
    );
    let lost: Vec<_> = w
        .iter()
        .filter(|w| w.reason == WarningReason::RouteConflict && w.object.kind == "Ingress")
        .collect();
    assert!(
        lost.len() == 1 && lost[0].message.contains("default/web:80 wins"),
        "{w:?}"
    );
}

/// The Ingress `name` served (given an address in its status) by `b`.
fn is_served(b: &Built, name: &str) -> bool {
    b.memo.served_ingresses().iter().any(|k| k.1 == name)
}

#[test]
fn an_ingress_asking_for_authentication_is_refused_to_everyone_not_served_open() {
    let (s, e) = svcs();
    let protected = |name: &str, key: &str, value: &str| {
        annotated(
            ing(
                "default",
                name,
                Some("switchyard"),
                vec![rule(
                    Some("h.test"),
                    vec![path(&format!("/{name}"), "Prefix", backend("api", 8080))],
                )],
            ),
            key,
            value,
        )
    };
    let open = ing(
        "default",
        "open",
        Some("switchyard"),
        vec![rule(
            Some("h.test"),
            vec![path("/", "Prefix", backend("web", 80))],
        )],
    );
    let basic = annotated(
        protected("basic", "nginx.ingress.kubernetes.io/auth-type", "basic"),
        "nginx.ingress.kubernetes.io/auth-secret",
        "users",
    );
    let basic = annotated(basic, "nginx.ingress.kubernetes.io/auth-realm", "Go away");
    let external = protected(
        "external",
        "nginx.ingress.kubernetes.io/auth-url",
        "https://$host/oauth2/auth",
    );
    let mtls = protected(
        "mtls",
        "nginx.ingress.kubernetes.io/auth-tls-secret",
        "default/ca",
    );
    // Verification off restricts nothing: served, the key warned about as unsupported.
    let mtls_off = annotated(
        protected(
            "mtlsoff",
            "nginx.ingress.kubernetes.io/auth-tls-secret",
            "default/ca",
        ),
        "nginx.ingress.kubernetes.io/auth-tls-verify-client",
        "off",
    );
    let ingresses = [open, basic, external, mtls, mtls_off];
    let (b, w) = build(&s, &e, &ingresses, &[ours()], &[], &Options::default());
    let t = &b.table;
    for name in ["basic", "external", "mtls"] {
        assert!(!is_served(&b, name), "{name} has an address in its status");
        // Its path is still claimed (not left to `/` of `open`), by a policy refusing everyone.
        let hit = t
            .http
            .lookup(Some(b"h.test"), &format!("/{name}/x"))
            .unwrap();
        assert_eq!(t.entries[hit.target as usize].name.as_ref(), "api:8080");
        let p = &t.policies[hit.policy.unwrap() as usize];
        for ip in ["10.1.2.3", "127.0.0.1", "::1", "2001:db8::1"] {
            assert!(!p.admits(Some(ip.parse().unwrap())), "{name} admits {ip}");
        }
        assert!(!p.admits(None), "{name} admits a client of no address");
    }
    assert!(is_served(&b, "open") && is_served(&b, "mtlsoff"));
    let hit = t.http.lookup(Some(b"h.test"), "/mtlsoff").unwrap();
    let p = &t.policies[hit.policy.unwrap() as usize];
    assert!(p.admits(Some("10.1.2.3".parse().unwrap())));
    let not_served: Vec<_> = w
        .iter()
        .filter(|w| w.reason == WarningReason::NotServed)
        .map(|w| format!("{}: {}", w.object.name, w.message))
        .collect();
    assert_eq!(not_served.len(), 3, "{not_served:?}");
    // Basic authentication is served, but not without its users: it fails closed.
    assert!(
        not_served[0].starts_with(
            "basic: auth-type is basic and Secret default/users does not exist or has no key \
             auth"
        ) && not_served[0].contains("403"),
        "{not_served:?}"
    );
    // One warning for the refused Ingress: its other auth-* keys are not listed as ignored.
    let warned = ingress_warnings(&w);
    assert!(
        !warned
            .iter()
            .any(|m| m.starts_with("basic:") && m.contains("ignored")),
        "{warned:?}"
    );
    assert!(
        warned
            .iter()
            .any(|m| m.starts_with("mtlsoff:") && m.contains("auth-tls-secret")),
        "{warned:?}"
    );
}

/// `auth-url` to a Service by its cluster name becomes the route's external authentication,
/// aimed at that Service's entry (in its own namespace), with its companions read; a missing
/// Service is warned about and fails closed (an entry without endpoints); a method that is
/// not one refuses the Ingress; a bad sign-in URL or field name is left out, warned.
#[test]
fn external_authentication_aims_at_the_service_the_url_names() {
    use crate::table::external_auth::AuthTarget;
    let (mut s, mut e) = svcs();
    s.push(mk_service("auth", "authn", &[4180]));
    e.push(mk_slice("auth", "authn", "p4180", 4180, &["10.0.9.9"]));
    let guarded = |name: &str, url: &str| {
        let i = ing(
            "default",
            name,
            Some("switchyard"),
            vec![rule(
                Some(&format!("{name}.test")),
                vec![path("/", "Prefix", backend("web", 80))],
            )],
        );
        annotated(i, "nginx.ingress.kubernetes.io/auth-url", url)
    };
    let ok = guarded("ok", "http://authn.auth.svc.cluster.local:4180/check");
    let ok = annotated(ok, "nginx.ingress.kubernetes.io/auth-method", "POST");
    let ok = annotated(
        ok,
        "nginx.ingress.kubernetes.io/auth-response-headers",
        "X-User, bad name, x-user",
    );
    let ok = annotated(
        ok,
        "nginx.ingress.kubernetes.io/auth-signin",
        "https://login.test/?x=$foo",
    );
    let missing = guarded("missing", "http://gone.auth:8080/check");
    let method = annotated(
        guarded("method", "http://authn.auth.svc:4180/"),
        "nginx.ingress.kubernetes.io/auth-method",
        "FETCH",
    );
    let (b, w) = build(
        &s,
        &e,
        &[ok, missing, method],
        &[ours()],
        &[],
        &Options::default(),
    );
    let t = &b.table;
    let policy = |host: &str| {
        let hit = t.http.lookup(Some(host.as_bytes()), "/").unwrap();
        t.policies[hit.policy.unwrap() as usize].clone()
    };
    let auth = policy("ok.test").external_auth.unwrap();
    let AuthTarget::Entry(id) = auth.target else {
        panic!("{auth:?}")
    };
    let entry = &t.entries[id as usize];
    assert_eq!(entry.name.as_ref(), "auth/authn:4180");
    assert_eq!(entry.endpoints.len(), 1);
    assert_eq!(
        (&*auth.host, &*auth.path, &*auth.method),
        ("authn.auth.svc.cluster.local:4180", "/check", "POST")
    );
    assert_eq!(&*auth.response_headers, [Box::from("x-user")]);
    assert_eq!(auth.signin, None);
    let missing = policy("missing.test").external_auth.unwrap();
    let AuthTarget::Entry(id) = missing.target else {
        panic!("{missing:?}")
    };
    assert!(t.entries[id as usize].endpoints.is_empty());
    assert!(is_served(&b, "ok") && is_served(&b, "missing") && !is_served(&b, "method"));
    let refused = policy("method.test");
    assert!(refused.external_auth.is_none() && !refused.admits(Some("10.1.2.3".parse().unwrap())));
    let warned = ingress_warnings(&w);
    for (name, says) in [
        ("ok", "auth-signin"),
        ("ok", "\"bad name\" is not a field name"),
        (
            "missing",
            "Service auth/gone port 8080, which does not exist",
        ),
        ("method", "auth-method \"FETCH\" is not an HTTP method"),
    ] {
        assert!(
            warned
                .iter()
                .any(|m| m.starts_with(&format!("{name}:")) && m.contains(says)),
            "{name} {says}: {warned:?}"
        );
    }
}

/// Request limits are read with ingress-nginx's defaults, and an unchanged limit keeps its
/// counts across a rebuild (a changed one starts anew), so that a table swap never hands a
/// client a fresh burst.
#[test]
fn request_limits_keep_counting_across_rebuilds() {
    let (s, e) = svcs();
    let limited = |rps: &str| {
        let i = ing(
            "default",
            "limited",
            Some("switchyard"),
            vec![rule(
                Some("l.test"),
                vec![path("/", "Prefix", backend("web", 80))],
            )],
        );
        let i = annotated(i, "nginx.ingress.kubernetes.io/limit-rps", rps);
        let i = annotated(i, "nginx.ingress.kubernetes.io/limit-connections", "x");
        annotated(
            i,
            "nginx.ingress.kubernetes.io/limit-allowlist",
            "10.0.0.0/8, nope",
        )
    };
    let limit_of = |t: &RoutingTable| {
        let hit = t.http.lookup(Some(b"l.test"), "/").unwrap();
        t.policies[hit.policy.unwrap() as usize]
            .rate_limit
            .clone()
            .unwrap()
    };
    let o = Options::default();
    let (three, four, classes) = ([limited("3")], [limited("4")], [ours()]);
    let refs = IngressRefs::of(&three, &classes, &[]);
    let (first, w) = translate_with(&s, &e, refs.inputs(), &o, None);
    let l = limit_of(&first.table);
    assert_eq!(
        (l.rps, l.rpm, l.connections, l.burst_multiplier),
        (Some(3), None, None, 5)
    );
    assert_eq!(l.allow, ["10.0.0.0/8".parse().unwrap()]);
    let warned = ingress_warnings(&w);
    assert!(
        warned
            .iter()
            .any(|m| m.contains("limit-connections: \"x\" is not a positive")),
        "{warned:?}"
    );
    assert!(
        warned.iter().any(|m| m.contains("limit-allowlist")),
        "{warned:?}"
    );
    let (again, _) = translate_with(&s, &e, refs.inputs(), &o, Some(&first.table));
    assert!(Arc::ptr_eq(&limit_of(&again.table).state.0, &l.state.0));
    let refs = IngressRefs::of(&four, &classes, &[]);
    let (changed, _) = translate_with(&s, &e, refs.inputs(), &o, Some(&again.table));
    assert!(!Arc::ptr_eq(&limit_of(&changed.table).state.0, &l.state.0));
}

/// `affinity: cookie` is read with ingress-nginx's defaults; a setting that could not be
/// written in a cookie is warned about and left at its default; another kind of affinity is
/// warned about and not served.
#[test]
fn cookie_affinity_is_read_with_its_defaults() {
    let sticky = |name: &str, pairs: &[(&str, &str)]| {
        let mut i = ing(
            "default",
            name,
            Some("switchyard"),
            vec![rule(
                Some(&format!("{name}.test")),
                vec![path("/", "Prefix", backend("web", 80))],
            )],
        );
        for (k, v) in pairs {
            i = annotated(i, &format!("nginx.ingress.kubernetes.io/{k}"), v);
        }
        i
    };
    let (t, w) = with(&[
        sticky("plain", &[("affinity", "cookie")]),
        sticky(
            "odd",
            &[
                ("affinity", "cookie"),
                ("session-cookie-name", "a;b"),
                ("session-cookie-max-age", "soon"),
                ("session-cookie-samesite", "strict"),
                ("session-cookie-secure", "true"),
            ],
        ),
        sticky("source", &[("affinity", "source")]),
    ]);
    let affinity = |host: &str| {
        let hit = t.http.lookup(Some(host.as_bytes()), "/").unwrap();
        t.policies[hit.policy.unwrap() as usize].affinity.clone()
    };
    let plain = affinity("plain.test").unwrap();
    assert_eq!(
        plain.set_cookie_value(0xab, "/", false),
        "INGRESSCOOKIE=00000000000000ab; Path=/; HttpOnly"
    );
    let odd = affinity("odd.test").unwrap();
    assert_eq!(
        odd.set_cookie_value(1, "/x", false),
        "INGRESSCOOKIE=0000000000000001; Path=/x; SameSite=Strict; Secure; HttpOnly"
    );
    assert_eq!(affinity("source.test"), None);
    let warned = ingress_warnings(&w);
    for says in [
        "session-cookie-name: \"a;b\" cannot be written in a cookie",
        "session-cookie-max-age: \"soon\" is not a number of seconds",
        "affinity \"source\" is not cookie",
    ] {
        assert!(
            warned.iter().any(|m| m.contains(says)),
            "{says}: {warned:?}"
        );
    }
}

#[test]
fn a_canary_joins_its_main_route_and_is_never_the_main_one() {
    let (s, e) = svcs();
    let r = |host: &str, to: &str, port: u16| {
        vec![rule(
            Some(host),
            vec![path("/", "Prefix", backend(to, port))],
        )]
    };
    let canary_of = |name: &str, host: &str, at: &str| {
        let c = created(
            annotated(
                ing("default", name, Some("switchyard"), r(host, "api", 8080)),
                "nginx.ingress.kubernetes.io/canary",
                "true",
            ),
            at,
        );
        annotated(c, "nginx.ingress.kubernetes.io/canary-weight", "10")
    };
    // Older than its main Ingress, which once made it take every request.
    let canary = canary_of("canary", "h.test", "2020-01-01T00:00:00Z");
    let second = canary_of("second", "h.test", "2021-01-01T00:00:00Z");
    let orphan = canary_of("orphan", "o.test", "2021-01-01T00:00:00Z");
    let guarded = annotated(
        canary_of("guarded", "g.test", "2021-01-01T00:00:00Z"),
        "nginx.ingress.kubernetes.io/auth-type",
        "basic",
    );
    let main = created(
        ing(
            "default",
            "main",
            Some("switchyard"),
            r("h.test", "web", 80),
        ),
        "2024-01-01T00:00:00Z",
    );
    let main_g = ing(
        "default",
        "main-g",
        Some("switchyard"),
        r("g.test", "web", 80),
    );
    // `canary: "false"` is an ordinary Ingress.
    let not_canary = annotated(
        ing(
            "default",
            "plain",
            Some("switchyard"),
            r("p.test", "api", 8080),
        ),
        "nginx.ingress.kubernetes.io/canary",
        "false",
    );
    let (b, w) = build(
        &s,
        &e,
        &[canary, second, orphan, guarded, main, main_g, not_canary],
        &[ours()],
        &[],
        &Options::default(),
    );
    for frontend in [Frontend::Http, Frontend::Https] {
        assert_eq!(
            reach(&b.table, frontend, "h.test", "/x").as_deref(),
            Some("web")
        );
        let rule = b
            .table
            .router(frontend)
            .unwrap()
            .lookup(Some(b"h.test"), "/x")
            .unwrap();
        let c = b.table.policies[rule.policy.unwrap() as usize]
            .canary
            .as_deref()
            .unwrap();
        assert_eq!(&*c.origin, "default/canary", "the oldest canary");
        assert_eq!((c.weight.numerator, c.weight.denominator), (10, 100));
        let g = b
            .table
            .router(frontend)
            .unwrap()
            .lookup(Some(b"g.test"), "/")
            .unwrap();
        assert!(
            b.table
                .policies
                .get(g.policy.unwrap_or(u32::MAX) as usize)
                .is_none_or(|p| p.canary.is_none())
        );
    }
    assert_eq!(
        reach(&b.table, Frontend::Http, "o.test", "/"),
        None,
        "a canary alone"
    );
    assert!(is_served(&b, "canary") && is_served(&b, "main") && is_served(&b, "plain"));
    for name in ["second", "orphan", "guarded"] {
        assert!(!is_served(&b, name), "{name}");
    }
    let about = |name: &str| {
        w.iter()
            .filter(|w| w.object.name == name)
            .map(|w| (w.reason, w.message.clone()))
            .collect::<Vec<_>>()
    };
    assert!(about("canary").is_empty(), "{w:?}");
    let orphan = about("orphan");
    assert!(
        orphan.len() == 1
            && orphan[0].0 == WarningReason::NotServed
            && orphan[0].1.contains("no main Ingress"),
        "{orphan:?}"
    );
    let second = about("second");
    assert!(
        second.len() == 1
            && second[0].0 == WarningReason::RouteConflict
            && second[0].1.contains("default/canary"),
        "{second:?}"
    );
    let guarded = about("guarded");
    assert!(
        guarded.len() == 1
            && guarded[0].0 == WarningReason::NotServed
            && guarded[0].1.contains("auth-type"),
        "{guarded:?}"
    );
}

/// ingress-nginx's `auth-tls-*` become the verification of each rule host (and alias) of the
/// Ingress on the TLS port, with the Ingress's routes judging plain HTTP; the first Ingress of
/// a host decides it (a later one that asks otherwise is told); what cannot be verified as
/// asked — no `ca.crt`, a rule without a host, a `match-cn` that does not compile — refuses
/// the Ingress; bad companions are warned about and read as nginx's defaults.
#[test]
fn client_certificates_are_verified_per_host() {
    use crate::table::cert_auth::VerifyClient;
    let (s, e) = svcs();
    let ca = |name: &str, key: &str| Secret {
        metadata: ObjectMeta {
            namespace: Some("default".into()),
            name: Some(name.into()),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            key.to_string(),
            ByteString(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".to_vec()),
        )])),
        ..Default::default()
    };
    let on_host = |name: &str, host: Option<&str>| {
        let i = ing(
            "default",
            name,
            Some("switchyard"),
            vec![rule(host, vec![path("/", "Prefix", backend("web", 80))])],
        );
        annotated(
            i,
            "nginx.ingress.kubernetes.io/auth-tls-secret",
            "client-ca",
        )
    };
    let first = annotated(
        annotated(
            on_host("first", Some("a.test")),
            "nginx.ingress.kubernetes.io/auth-tls-verify-depth",
            "zero",
        ),
        "nginx.ingress.kubernetes.io/server-alias",
        "alias.test",
    );
    let later = annotated(
        on_host("later", Some("a.test")),
        "nginx.ingress.kubernetes.io/auth-tls-verify-client",
        "optional",
    );
    let wild = on_host("wild", Some("*.w.test"));
    let hostless = on_host("hostless", None);
    let no_ca = annotated(
        on_host("noca", Some("n.test")),
        "nginx.ingress.kubernetes.io/auth-tls-secret",
        "other-key",
    );
    let bad_cn = annotated(
        on_host("badcn", Some("c.test")),
        "nginx.ingress.kubernetes.io/auth-tls-match-cn",
        "CN=(",
    );
    let ingresses = [first, later, wild, hostless, no_ca, bad_cn];
    let secrets = [ca("client-ca", "ca.crt"), ca("other-key", "tls.crt")];
    let (b, w) = build(&s, &e, &ingresses, &[ours()], &secrets, &Options::default());
    let t = &b.table;
    let hosts = &t.client_validation.ingress_hosts;
    let of = |h: &str| hosts.of(h.as_bytes()).map(|v| v.origin.to_string());
    assert_eq!(of("a.test").as_deref(), Some("default/first"));
    assert_eq!(of("alias.test").as_deref(), Some("default/first"));
    assert_eq!(of("x.w.test").as_deref(), Some("default/wild"));
    assert_eq!(of("n.test"), None);
    let a = hosts.of(b"a.test").unwrap();
    let auth = a.ingress.as_ref().unwrap();
    assert_eq!((auth.verify, auth.depth), (VerifyClient::On, 1));
    // The Ingress's routes judge plain HTTP.
    let hit = t.http.lookup(Some(b"a.test"), "/").unwrap();
    let p = &t.policies[hit.policy.unwrap() as usize];
    assert_eq!(p.client_cert.as_deref(), Some(auth));
    for name in ["first", "later", "wild"] {
        assert!(is_served(&b, name), "{name}");
    }
    for name in ["hostless", "noca", "badcn"] {
        assert!(!is_served(&b, name), "{name}");
    }
    let warned: Vec<String> = w
        .iter()
        .map(|w| format!("{}: {}", w.object.name, w.message))
        .collect();
    let said = |who: &str, what: &str| {
        warned
            .iter()
            .any(|m| m.starts_with(who) && m.contains(what))
    };
    assert!(said("first", "auth-tls-verify-depth"), "{warned:?}");
    assert!(said("later", "default/first verifies"), "{warned:?}");
    assert!(said("hostless", "without a host"), "{warned:?}");
    assert!(said("noca", "has no key ca.crt"), "{warned:?}");
    assert!(said("badcn", "auth-tls-match-cn"), "{warned:?}");
}

/// `auth-cache-duration` as nginx's `proxy_cache_valid`: codes then a time, `any`, several
/// entries; no code is 200, 301 and 302; a bad one is said.
#[test]
fn auth_cache_durations_read_as_nginx_reads_them() {
    use super::super::ingress::cache_durations;
    use std::time::Duration;
    let d = cache_durations("200 202 10m, 401 5m").unwrap();
    assert_eq!(d.len(), 2);
    assert_eq!(d[0].0.as_deref(), Some([200, 202].as_slice()));
    assert_eq!(d[0].1, Duration::from_secs(600));
    assert_eq!(d[1].0.as_deref(), Some([401].as_slice()));
    assert_eq!(cache_durations("any 1m").unwrap()[0].0, None);
    assert_eq!(
        cache_durations("30s").unwrap()[0].0.as_deref(),
        Some([200, 301, 302].as_slice())
    );
    assert!(cache_durations("200 forever").is_err());
    assert!(cache_durations("2000 1m").is_err());
    assert!(cache_durations(" , ").is_err());
}

/// `--limit-scope cluster`: each replica's share of an Ingress's limits is the limit divided
/// by the ready endpoints of `--limit-peers` (rounded up, at least 1); a not-ready endpoint
/// is not a replica; without the Service, one replica.
#[test]
fn cluster_scoped_limits_are_shared_by_the_ready_replicas() {
    let (mut s, mut e) = svcs();
    s.push(mk_service("ingress", "switchyard", &[80]));
    e.push(mk_slice_with(
        "ingress",
        "switchyard",
        "p80",
        80,
        vec![
            ("10.1.0.1", None),
            ("10.1.0.2", Some(true)),
            ("10.1.0.3", Some(true)),
            ("10.1.0.4", Some(false)),
        ],
    ));
    let limited = |name: &str, host: &str| {
        let i = ing(
            "default",
            name,
            Some("switchyard"),
            vec![rule(
                Some(host),
                vec![path("/", "Prefix", backend("web", 80))],
            )],
        );
        let i = annotated(i, "nginx.ingress.kubernetes.io/limit-rps", "10");
        let i = annotated(i, "nginx.ingress.kubernetes.io/limit-rpm", "2");
        annotated(i, "nginx.ingress.kubernetes.io/limit-connections", "5")
    };
    let limit_of = |o: &Options| {
        let (b, _) = build(&s, &e, &[limited("l", "l.test")], &[ours()], &[], o);
        let hit = b.table.http.lookup(Some(b"l.test"), "/").unwrap();
        let p = &b.table.policies[hit.policy.unwrap() as usize];
        let l = p.rate_limit.as_deref().unwrap();
        (l.rps, l.rpm, l.connections, l.replicas)
    };
    assert_eq!(
        limit_of(&Options::default()),
        (Some(10), Some(2), Some(5), 1)
    );
    let cluster = Options {
        limit_peers: Some(("ingress".into(), "switchyard".into())),
        ..Options::default()
    };
    assert_eq!(limit_of(&cluster), (Some(4), Some(1), Some(2), 3));
    let missing = Options {
        limit_peers: Some(("ingress".into(), "nowhere".into())),
        ..Options::default()
    };
    assert_eq!(limit_of(&missing), (Some(10), Some(2), Some(5), 1));
}

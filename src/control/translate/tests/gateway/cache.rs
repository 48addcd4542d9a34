//! The Gateway build's route cache: along random histories of single changes (a route
//! created, updated or deleted, a listener, a ReferenceGrant, a namespace's labels, a
//! Service a route names), with or without `--gateway-addresses`, every build equals a cold
//! build of the same objects; a change translates only the routes it touches; a pattern that
//! fails to compile is not tried again.

use super::*;

const SERVICES: [&str; 3] = ["infra/v1", "infra/v2", "apps/s3"];

/// One route of the random worlds: its namespace, Gateway, hostname, age and rules.
#[derive(Debug, Clone)]
struct RouteP {
    ns: u8,
    parent: u8,
    host: u8,
    created: u8,
    rules: Vec<RuleP>,
    /// Its resourceVersion: bumped by a write that leaves the spec alone.
    version: u32,
}

#[derive(Debug, Clone)]
struct RuleP {
    path: u8,
    header: bool,
    backend: u8,
}

/// The objects besides the routes.
#[derive(Debug, Clone)]
struct Scene {
    /// Gateway `infra/gw`'s listener: hostname and allowedRoutes variant.
    listener: u8,
    /// ReferenceGrant in `infra` for routes of `apps`.
    grant: bool,
    /// Labels of `infra` and `apps`.
    labels: [u8; 2],
    /// Service `apps/s3` exists.
    s3: bool,
    /// The addresses `infra/gw` asks for in `spec.addresses`: none, 127.0.0.4, 127.0.0.3,
    /// 127.0.0.9 (in no pool), 127.0.0.3 and 127.0.0.2, or 127.0.0.4 and 127.0.0.9.
    ask: u8,
}

fn route_p() -> impl Strategy<Value = RouteP> {
    let rule = (0u8..6, any::<bool>(), 0u8..5).prop_map(|(path, header, backend)| RuleP {
        path,
        header,
        backend,
    });
    (
        0u8..2,
        0u8..4,
        0u8..4,
        0u8..3,
        prop::collection::vec(rule, 1..3),
    )
        .prop_map(|(ns, parent, host, created, rules)| RouteP {
            ns,
            parent,
            host,
            created,
            rules,
            version: 0,
        })
}

fn scene() -> impl Strategy<Value = Scene> {
    (
        0u8..4,
        any::<bool>(),
        (0u8..2, 0u8..2),
        any::<bool>(),
        0u8..6,
    )
        .prop_map(|(listener, grant, (a, b), s3, ask)| Scene {
            listener,
            grant,
            labels: [a, b],
            s3,
            ask,
        })
}

fn route_json(name: &str, r: &RouteP) -> serde_json::Value {
    let ns = ["infra", "apps"][usize::from(r.ns)];
    let parent = match r.parent {
        0 => serde_json::json!({"name": "gw", "namespace": "infra"}),
        1 => serde_json::json!({"name": "gw2", "namespace": "apps"}),
        2 => serde_json::json!({"name": "gw", "namespace": "infra", "sectionName": "http"}),
        _ => serde_json::json!({"name": "nowhere", "namespace": "infra"}),
    };
    let hostnames: Vec<String> = match r.host {
        0 => vec![],
        1 => vec!["a.example.com".into()],
        2 => vec!["b.example.com".into()],
        3 => vec!["*.example.com".into()],
        // Beyond the random worlds' range: a host of its own.
        h => vec![format!("h{h}.example.com")],
    };
    let rules: Vec<serde_json::Value> = r
        .rules
        .iter()
        .map(|rule| {
            let path = match rule.path {
                0 => serde_json::json!({"type": "PathPrefix", "value": "/"}),
                1 => serde_json::json!({"type": "PathPrefix", "value": "/a"}),
                2 => serde_json::json!({"type": "Exact", "value": "/a/b"}),
                3 => serde_json::json!({"type": "RegularExpression", "value": "/r[0-9]+"}),
                4 => serde_json::json!({"type": "RegularExpression", "value": "/bad("}),
                _ => serde_json::json!({"type": "PathPrefix", "value": "/a"}),
            };
            let mut m = serde_json::json!({"path": path});
            if rule.header {
                m["headers"] = serde_json::json!([{"name": "x-v", "value": "2"}]);
            }
            let backend = match rule.backend {
                0 => serde_json::json!({"name": "v1", "namespace": "infra", "port": 8080}),
                1 => serde_json::json!({"name": "v2", "namespace": "infra", "port": 8080}),
                2 => serde_json::json!({"name": "missing", "port": 8080}),
                3 => serde_json::json!({"name": "s3", "namespace": "apps", "port": 8080}),
                _ => serde_json::json!({"name": "v1", "namespace": "infra", "port": 9999}),
            };
            serde_json::json!({"matches": [m], "backendRefs": [backend]})
        })
        .collect();
    serde_json::json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {
            "name": name, "namespace": ns, "generation": 1,
            "resourceVersion": r.version.to_string(),
            "creationTimestamp": format!("2026-01-0{}T00:00:00Z", r.created + 1),
        },
        "spec": {"parentRefs": [parent], "hostnames": hostnames, "rules": rules},
    })
}

fn from<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).unwrap()
}

/// The world of a scene and its routes (route `i` is named `r{i}`).
fn scene_world(s: &Scene, routes: &BTreeMap<u8, RouteP>) -> World {
    let mut w = World::default();
    w.classes.push(from(serde_json::json!({
        "metadata": {"name": "sy"},
        "spec": {"controllerName": "switchyard.io/gateway-controller"},
    })));
    let (hostname, allowed) = match s.listener {
        0 => (None, serde_json::json!({"namespaces": {"from": "All"}})),
        1 => (
            Some("*.example.com"),
            serde_json::json!({"namespaces": {"from": "All"}}),
        ),
        2 => (None, serde_json::json!({"namespaces": {"from": "Same"}})),
        _ => (
            None,
            serde_json::json!({"namespaces": {"from": "Selector",
                "selector": {"matchLabels": {"env": "prod"}}}}),
        ),
    };
    let mut listener = serde_json::json!({"name": "http", "port": 80, "protocol": "HTTP",
        "allowedRoutes": allowed});
    if let Some(h) = hostname {
        listener["hostname"] = h.into();
    }
    // Both Gateways give b.example.com a certificate on the TLS port, each its own: shared,
    // they conflict (gw2 keeps it, first by namespace); with addresses, each has its own.
    let https = |secret: &str| {
        serde_json::json!({"name": "tls", "port": 443, "protocol": "HTTPS",
            "hostname": "b.example.com", "tls": {"certificateRefs": [{"name": secret}]}})
    };
    let mut gw = serde_json::json!({
        "metadata": {"name": "gw", "namespace": "infra", "generation": 1},
        "spec": {"gatewayClassName": "sy", "listeners": [listener, https("gw-cert")]},
    });
    let asked: &[&str] = [
        &[][..],
        &["127.0.0.4"],
        &["127.0.0.3"],
        &["127.0.0.9"],
        &["127.0.0.3", "127.0.0.2"],
        &["127.0.0.4", "127.0.0.9"],
    ][usize::from(s.ask)];
    if !asked.is_empty() {
        gw["spec"]["addresses"] = asked
            .iter()
            .map(|ip| serde_json::json!({"type": "IPAddress", "value": ip}))
            .collect();
    }
    w.gateways.push(from(gw));
    w.gateways.push(from(serde_json::json!({
        "metadata": {"name": "gw2", "namespace": "apps", "generation": 1},
        "spec": {"gatewayClassName": "sy", "listeners": [
            {"name": "web", "port": 80, "protocol": "HTTP", "hostname": "b.example.com",
             "allowedRoutes": {"namespaces": {"from": "Selector",
                 "selector": {"matchLabels": {"env": "dev"}}}}},
            https("gw2-cert")]},
    })));
    for (ns, name) in [("infra", "gw-cert"), ("apps", "gw2-cert")] {
        // Syntactically valid PEM (the key's fit is the TLS side's check).
        w.secrets.push(from(serde_json::json!({
            "metadata": {"name": name, "namespace": ns},
            "type": "kubernetes.io/tls",
            "data": {
                "tls.crt": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJBQT09Ci0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K",
                "tls.key": "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCk1JSUJBQT09Ci0tLS0tRU5EIFBSSVZBVEUgS0VZLS0tLS0K",
            },
        })));
    }
    for (ns, label) in ["infra", "apps"].iter().zip(s.labels) {
        let env = ["prod", "dev"][usize::from(label)];
        w.namespaces.push(from(serde_json::json!({
            "metadata": {"name": ns, "labels": {"env": env}},
        })));
    }
    if s.grant {
        w.grants.push(from(serde_json::json!({
            "metadata": {"name": "apps-to-infra", "namespace": "infra"},
            "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                               "namespace": "apps"}],
                     "to": [{"group": "", "kind": "Service"}]},
        })));
    }
    for key in SERVICES {
        let (ns, name) = key.split_once('/').unwrap();
        if name == "s3" && !s.s3 {
            continue;
        }
        w.services.push(from(serde_json::json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": {"ports": [{"port": 8080}]},
        })));
    }
    for (i, r) in routes {
        w.routes.push(from(route_json(&format!("r{i}"), r)));
    }
    w
}

/// One change, as a watcher would see it.
#[derive(Debug, Clone)]
enum Step {
    PutRoute(u8, RouteP),
    DeleteRoute(u8),
    /// The same route written again (its status, say): nothing to translate.
    Rewrite(u8),
    Listener(u8),
    Grant(bool),
    Labels(u8, u8),
    S3(bool),
    /// `infra/gw` asks for another address (`Scene::ask`).
    Ask(u8),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..6, route_p()).prop_map(|(i, r)| Step::PutRoute(i, r)),
        2 => (0u8..6).prop_map(Step::DeleteRoute),
        1 => (0u8..6).prop_map(Step::Rewrite),
        2 => (0u8..4).prop_map(Step::Listener),
        1 => any::<bool>().prop_map(Step::Grant),
        2 => (0u8..2, 0u8..2).prop_map(|(n, l)| Step::Labels(n, l)),
        1 => any::<bool>().prop_map(Step::S3),
        3 => (0u8..6).prop_map(Step::Ask),
    ]
}

/// Applies `step`, returning the change set a watcher would pass.
fn apply(s: &mut Scene, routes: &mut BTreeMap<u8, RouteP>, step: &Step) -> Changes {
    let mut changes = Changes {
        gateway: true,
        ..Default::default()
    };
    match step {
        Step::PutRoute(i, r) => {
            routes.insert(*i, r.clone());
        }
        Step::DeleteRoute(i) => {
            routes.remove(i);
        }
        Step::Rewrite(i) => {
            if let Some(r) = routes.get_mut(i) {
                r.version += 1;
            }
        }
        Step::Listener(v) => s.listener = *v,
        Step::Grant(g) => s.grant = *g,
        Step::Labels(n, l) => s.labels[usize::from(*n)] = *l,
        Step::Ask(a) => s.ask = *a,
        Step::S3(on) => {
            s.s3 = *on;
            changes.gateway = false;
            changes.services.insert(key("apps", "s3"));
        }
    }
    changes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Along any history of single changes, each build from the previous one (Gateway-only
    /// where the change allows, taking unchanged routes from the cache) equals a cold build
    /// of the same objects (with `--gateway-addresses`, a full build from the same previous
    /// table): table, warnings and status.
    #[test]
    fn every_build_equals_a_cold_build_along_random_changes(
        start in scene(),
        initial in prop::collection::btree_map(0u8..6, route_p(), 0..6),
        steps in prop::collection::vec(step(), 1..8),
        pool in 0usize..4,
    ) {
        // No pool (every Gateway shared), one address for two Gateways (one goes unserved),
        // one each, or one to spare (a Gateway asking for it moves there).
        let options = with_pool(&["127.0.0.2", "127.0.0.3", "127.0.0.4"][..pool]);
        let (mut s, mut routes) = (start, initial);
        let (mut built, _) =
            build_changes_with(&scene_world(&s, &routes), None, None, &options);
        for st in &steps {
            let changes = apply(&mut s, &mut routes, st);
            let w = scene_world(&s, &routes);
            let (next, w_next) =
                build_changes_with(&w, Some(&changes), Some(built.previous()), &options);
            // With a pool, which Gateway has which address depends on the previous build (a
            // Gateway keeps its address): the reference is then a full build from the same
            // previous table; without one, a cold build.
            let (cold, w_cold) = if pool == 0 {
                build_changes_with(&w, None, None, &options)
            } else {
                build_changes_with(&w, None, Some(built.previous()), &options)
            };
            prop_assert!(next.table == cold.table, "tables differ after {:?}", st);
            prop_assert_eq!(json_of(&next.table), json_of(&cold.table));
            prop_assert_eq!(w_next, w_cold);
            prop_assert_eq!(next.memo.gateway_status(), cold.memo.gateway_status());
            built = next;
        }
    }
}

/// `n` routes `r{i}` of namespace `infra`, each on its own host, plus one of `apps` naming
/// a Service of `infra` (through the grant).
fn many(n: u8) -> BTreeMap<u8, RouteP> {
    (0..n)
        .map(|i| {
            let r = RouteP {
                ns: u8::from(i == 0),
                parent: 0,
                host: i % 4,
                created: i % 3,
                rules: vec![
                    RuleP {
                        path: i % 4,
                        header: i % 2 == 0,
                        backend: i % 2,
                    },
                    RuleP {
                        path: 1,
                        header: false,
                        backend: 1,
                    },
                ],
                version: 0,
            };
            (i, r)
        })
        .collect()
}

fn translated(b: &Built) -> usize {
    b.memo.gateway_routes_translated().unwrap()
}

#[test]
fn a_change_translates_only_the_routes_it_touches() {
    let mut s = Scene {
        listener: 0,
        grant: true,
        labels: [0, 0],
        s3: true,
        ask: 0,
    };
    let mut routes = many(40);
    let (b0, _) = build_changes(&scene_world(&s, &routes), None, None);
    assert_eq!(translated(&b0), 40, "a full build translates every route");
    let step = |s: &mut Scene, routes: &mut BTreeMap<u8, RouteP>, st: Step, prev: &Built| {
        let changes = apply(s, routes, &st);
        let w = scene_world(s, routes);
        let (next, w_next) = build_changes(&w, Some(&changes), Some(prev.previous()));
        let (cold, w_cold) = build_changes(&w, None, None);
        assert!(next.table == cold.table, "tables differ after {st:?}");
        assert_eq!(w_next, w_cold);
        assert_eq!(next.memo.gateway_status(), cold.memo.gateway_status());
        next
    };
    // A route created or updated: that route alone.
    let mut r = routes[&3].clone();
    r.rules[0].path = 2;
    let b1 = step(&mut s, &mut routes, Step::PutRoute(3, r), &b0);
    assert_eq!(translated(&b1), 1);
    let seventh = routes[&7].clone();
    let b2 = step(&mut s, &mut routes, Step::PutRoute(50, seventh), &b1);
    assert_eq!(translated(&b2), 1);
    // A route deleted, or written again unchanged: none.
    let b3 = step(&mut s, &mut routes, Step::DeleteRoute(50), &b2);
    assert_eq!(translated(&b3), 0);
    let b4 = step(&mut s, &mut routes, Step::Rewrite(3), &b3);
    assert_eq!(translated(&b4), 0);
    // Nothing of the routes changed: their routers and status are shared, not assembled.
    assert!(Arc::ptr_eq(&b4.table.gateway, &b3.table.gateway));
    assert!(Arc::ptr_eq(
        b4.memo.gateway_status(),
        b3.memo.gateway_status()
    ));
    // A route gone is assembled again (and equal to a cold build, checked by `step`).
    assert!(!Arc::ptr_eq(&b3.table.gateway, &b2.table.gateway));
    // The grant: the one route that names a Service of another namespace.
    let b5 = step(&mut s, &mut routes, Step::Grant(false), &b4);
    assert_eq!(translated(&b5), 1);
    // The labels of `apps`: its one route.
    let b6 = step(&mut s, &mut routes, Step::Labels(1, 1), &b5);
    assert_eq!(translated(&b6), 1);
    // A listener of the Gateway they all name: every route.
    let b7 = step(&mut s, &mut routes, Step::Listener(1), &b6);
    assert_eq!(translated(&b7), 40);
    // A Service change is a full build (new entries): every route, and the cache after it
    // serves the next Gateway-only build.
    let b8 = step(&mut s, &mut routes, Step::S3(false), &b7);
    assert_eq!(translated(&b8), 40);
    let mut r = routes[&5].clone();
    r.host = 2;
    let b9 = step(&mut s, &mut routes, Step::PutRoute(5, r), &b8);
    assert_eq!(translated(&b9), 1);
}

#[test]
fn a_pattern_that_does_not_compile_is_not_tried_again() {
    let s = Scene {
        listener: 0,
        grant: false,
        labels: [0, 0],
        s3: false,
        ask: 0,
    };
    let bad = |host| RouteP {
        ns: 0,
        parent: 0,
        host,
        created: 0,
        rules: vec![RuleP {
            path: 4,
            header: false,
            backend: 0,
        }],
        version: 0,
    };
    let mut routes = BTreeMap::from([(0, bad(1))]);
    let failures = |b: &Built| b.memo.gateway_cache.as_ref().unwrap().failures_compiled;
    let (b0, w0) = build_changes(&scene_world(&s, &routes), None, None);
    assert_eq!(failures(&b0), 1);
    assert!(w0.iter().any(|w| w.message.contains("/bad(")), "{w0:?}");
    // A full build from it: known to fail, same warning.
    let (b1, w1) = build_changes(&scene_world(&s, &routes), None, Some(b0.previous()));
    assert_eq!(failures(&b1), 0);
    assert_eq!(w1, w0);
    // The route translated again (its hostname changed) in a Gateway-only build: still
    // known, and the build equals a cold one.
    routes.insert(0, bad(2));
    let told = Changes {
        gateway: true,
        ..Default::default()
    };
    let w = scene_world(&s, &routes);
    let (b2, w2) = build_changes(&w, Some(&told), Some(b1.previous()));
    assert_eq!(translated(&b2), 1);
    assert_eq!(failures(&b2), 0);
    let (cold, w_cold) = build_changes(&w, None, None);
    assert!(b2.table == cold.table);
    assert_eq!(w2, w_cold);
    // Known across a Gateway-only build that did not ask for it, too.
    routes.insert(1, bad(3));
    let w = scene_world(&s, &routes);
    let (b3, _) = build_changes(&w, Some(&told), Some(b2.previous()));
    assert_eq!((translated(&b3), failures(&b3)), (1, 0));
    // Without the memo (a first build), it is compiled, and fails, again.
    let (b4, _) = build_changes(
        &w,
        None,
        Some(Previous {
            table: &b3.table,
            memo: None,
        }),
    );
    assert_eq!(failures(&b4), 1);
}

/// A Gateway that moves to another address of `--gateway-addresses` takes its routes along,
/// though neither they nor its listeners changed: the routes are translated again for the
/// new address, and the build is the full build's.
#[test]
fn a_gateway_that_moves_address_takes_its_routes_along() {
    let options = with_pool(&["127.0.0.2", "127.0.0.3", "127.0.0.4"]);
    let mut s = Scene {
        listener: 0,
        grant: true,
        labels: [0, 0],
        s3: true,
        ask: 0,
    };
    let mut routes = many(4);
    let (b0, _) = build_changes_with(&scene_world(&s, &routes), None, None, &options);
    let at = |b: &Built| -> Vec<(String, std::net::IpAddr)> {
        b.table
            .gateway
            .assigned()
            .map(|(ns, name, ip)| (format!("{ns}/{name}"), ip))
            .collect()
    };
    assert!(at(&b0).contains(&("infra/gw".into(), ip("127.0.0.3"))));
    let ask = apply(&mut s, &mut routes, &Step::Ask(1));
    let w = scene_world(&s, &routes);
    let (b1, w1) = build_changes_with(&w, Some(&ask), Some(b0.previous()), &options);
    let (full, w_full) = build_changes_with(&w, None, Some(b0.previous()), &options);
    assert!(at(&b1).contains(&("infra/gw".into(), ip("127.0.0.4"))));
    assert!(b1.table == full.table, "the moved Gateway's routes differ");
    assert_eq!(json_of(&b1.table), json_of(&full.table));
    assert_eq!(w1, w_full);
    assert!(
        translated(&b1) > 0,
        "its routes are translated for the new address"
    );
}

/// A route change makes again only the host levels of the Gateway routers that the route had
/// or now has: every other level is the previous table's own (`Arc`), and the table still
/// equals a cold build.
#[test]
fn a_route_change_remakes_only_the_host_levels_it_touches() {
    let mut s = Scene {
        listener: 0,
        grant: true,
        labels: [0, 0],
        s3: true,
        ask: 0,
    };
    // 20 routes on hosts of their own, two on a.example.com, one on any host.
    let route = |host: u8, path: u8| RouteP {
        ns: 0,
        parent: 0,
        host,
        created: 0,
        rules: vec![RuleP {
            path,
            header: false,
            backend: 0,
        }],
        version: 0,
    };
    let mut routes: BTreeMap<u8, RouteP> = (0..20).map(|i| (i, route(10 + i, 1))).collect();
    routes.insert(20, route(1, 1));
    routes.insert(21, route(1, 0));
    routes.insert(22, route(0, 1));
    let (b0, _) = build_changes(&scene_world(&s, &routes), None, None);
    let levels = |b: &Built| b.table.gateway.http.exact.len();
    assert_eq!(levels(&b0), 21);
    // 21 exact hosts and the any-host level on the HTTP port, and b.example.com on the TLS
    // port, where the route without hostnames also attaches (the scene's HTTPS listener).
    assert_eq!(
        b0.memo.gateway_levels_made(),
        Some(23),
        "a cold build makes every level"
    );
    let step = |s: &mut Scene, routes: &mut BTreeMap<u8, RouteP>, st: Step, prev: &Built| {
        let changes = apply(s, routes, &st);
        let w = scene_world(s, routes);
        let (next, w_next) = build_changes(&w, Some(&changes), Some(prev.previous()));
        let (cold, w_cold) = build_changes(&w, None, None);
        assert!(next.table == cold.table, "tables differ after {st:?}");
        assert_eq!(json_of(&next.table), json_of(&cold.table));
        assert_eq!(w_next, w_cold);
        next
    };
    // Every level but `changed` is the same `Arc` in both tables.
    let shared_but = |a: &Built, b: &Built, changed: &[&str]| {
        let (a, b) = (&a.table.gateway.http, &b.table.gateway.http);
        for (host, level) in &b.exact {
            let same = a.exact.get(host).is_some_and(|l| Arc::ptr_eq(l, level));
            assert_eq!(same, !changed.contains(&&**host), "level {host}");
        }
        assert_eq!(
            Arc::ptr_eq(&a.any_host, &b.any_host),
            !changed.contains(&"")
        );
    };
    // A route moved to a new host: its new level is made, its old one goes.
    let b1 = step(&mut s, &mut routes, Step::PutRoute(3, route(40, 1)), &b0);
    assert_eq!(b1.memo.gateway_levels_made(), Some(1));
    assert!(!b1.table.gateway.http.exact.contains_key("h13.example.com"));
    shared_but(&b0, &b1, &["h40.example.com"]);
    // A route of a host that others share: that one level, with both routes' rules.
    let b2 = step(&mut s, &mut routes, Step::PutRoute(21, route(1, 2)), &b1);
    assert_eq!(b2.memo.gateway_levels_made(), Some(1));
    shared_but(&b1, &b2, &["a.example.com"]);
    // A route created on any host, and one deleted: the levels they are on.
    // (Without hostnames it also attaches to the HTTPS listener: b.example.com on the TLS port.)
    let b3 = step(&mut s, &mut routes, Step::PutRoute(30, route(0, 2)), &b2);
    assert_eq!(b3.memo.gateway_levels_made(), Some(2));
    shared_but(&b2, &b3, &[""]);
    let b4 = step(&mut s, &mut routes, Step::DeleteRoute(7), &b3);
    assert_eq!(b4.memo.gateway_levels_made(), Some(0));
    assert_eq!(levels(&b4), 20);
    shared_but(&b3, &b4, &[]);
    // A listener's hostname changed: its frontend's levels are all made again (candidates
    // carry their listener's id).
    let b5 = step(&mut s, &mut routes, Step::Listener(1), &b4);
    assert!(b5.memo.gateway_levels_made() > Some(1));
}

//! Question: how long does a full rebuild of the routing table take as a cluster grows, and
//! what does one request's lookup (host + path match and an endpoint pick) cost on a large
//! table? A rebuild runs on every coalesced change; a lookup runs on every request.
//!
//! Run: `cargo bench --bench translate` (add `-- --quick` for a fast pass).
//! World: `common/world.rs` (N Services, 3 ports and 10 ready endpoints each). `cold` is a full
//! build without a previous table; `rebuild` is the watcher's build after a batch of events that
//! changed nothing (an empty change set); `10000_one_slice_changed` is the common watch event,
//! one EndpointSlice gaining an endpoint, built from the previous table and its change set.
//! Per-algorithm lookups and a concurrent swapper are in `benches/lookup.rs`.
//! `ingress_10000`: the same 10,000 Services with one Ingress each (a host, three Prefix
//! paths): `cold` builds it all, `one_ingress_changed` is the build after one Ingress changed
//! (a full build: Ingress changes are never incremental), and `lookup_and_pick` is a request
//! to an Ingress route on that table (target: under 200 ns).
//! Ingress result (2026-12-01, same VM on a slower day: cold 10,000 Services took 427 ms in
//! the same run): cold 891 ms, one Ingress changed 1.09 s, lookup + pick 167 ns.
//! `ingress_regex_10000`: the same Ingresses written for ingress-nginx's `use-regex` and
//! `rewrite-target: /$2` (30,000 patterns): `cold`, `one_ingress_changed` (patterns reused
//! from the previous table), `lookup_and_pick` (target: under 300 ns) and
//! `lookup_pick_and_groups` (the rewrite's groups too). Result (2026-12-07 13:53, `--quick`,
//! load average 1.2-1.5, same run as `ingress_10000`'s cold 329 ms, one changed 394 ms,
//! lookup + pick 74 ns): cold 321 ms, one Ingress changed 446 ms, lookup + pick 71 ns, with
//! the groups 300 ns (a second lookup and the pattern run again for its groups).
//! `gateway_10000`: the same 10,000 Services with one HTTPRoute each (three rules, one with a
//! header and a query match) on one Gateway: `cold`, `one_route_changed` (a Gateway-only
//! rebuild) and `lookup_header_query_and_pick` (target: under 300 ns). Result (2026-12-01,
//! load average 4-7 from parallel builds): cold 0.97-1.37 s, one route changed 535 ms (1.26 s
//! before the Gateway-only rebuild), lookup 175 ns (Ingress lookup 194 ns in the same run).
//!
//! `gateway_changes`: the Gateway-only rebuild after one HTTPRoute is created among 3,000 and
//! 10,000 (the build `tests/e2e_gateway_figures.rs` times end to end), and 10,000 routes with a
//! `RegularExpression` path and a header pattern each (20,000 patterns), built without a
//! previous table (every pattern compiled, as every build did before patterns were reused),
//! with one (every pattern reused), and Gateway-only after one route changed. Result
//! (2026-12-01 23:00, `--quick`, load average about 11 from three other parallel builds, so
//! read the ratios): one route created 401 ms at 3,000, 1.05 s at 10,000; patterns compiled
//! 10.6 s, reused 4.43 s, one route changed 1.66 s.
//! `one_route_created_every_route_translated` is the same build with the memo's route cache
//! dropped (every route translated, as before routes were kept); `nothing_translated` is a
//! write that changed no spec (routers and route status shared). Result (2026-12-02 03:17,
//! `--quick`, load average 0.1-0.5): one route created 38.5 ms at 3,000 and 170 ms at 10,000,
//! against 61.4 ms and 321 ms translating every route; nothing translated 6.8 ms and 34 ms.
//! With the host levels shared (2be2125; 2026-12-02 06:24, `--quick`, load average 4.6-4.9 from
//! other builds, same run, 532af4e then 2be2125): one route created 196.7 → 41.9 ms at 3,000 and
//! 563.4 → 220.7 ms at 10,000; `gateway_10000/lookup_header_query_and_pick` 949 → 799 ns (both
//! inflated by the load).
//!
//! Last result (2026-11-30, 2-vCPU sandbox VM, otherwise idle, release profile, jemalloc as in
//! the binary, `--quick`, medians): cold 100 Services 0.65 ms, 1,000 12.8 ms, 10,000 167 ms
//! (criterion keeps each batch's tables alive until the batch ends, so this figure includes
//! first-touch page faults, as a start-up does); rebuild 100 9 µs, 1,000 126 µs, 10,000 0.83 ms;
//! one slice changed in 10,000 0.88 ms; lookup+pick on the 10,000-Service table 73 ns for a path
//! route, 53 ns for a host route. Under glibc's malloc (before the benches used the binary's
//! allocator) cold 10,000 was 160-192 ms and the rebuilds 2.1 / 1.2 ms.
//! Cold build without the address map (2026-12-01, load average 2-6 from other builds, before
//! and after alternating, seven rounds each, medians): cold 10,000 479 → 329 ms (0.69×; about
//! 115 ms quiet by that ratio); rebuild 2.96 / 3.22 ms and one slice changed 2.60 / 3.17 ms,
//! unchanged code, within noise; lookup+pick 220 / 199 ns (path), 145 / 152 ns (host).

use std::hint::black_box;
use std::sync::atomic::AtomicUsize;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use switchyard::control::translate::{
    Changes, IngressInputs, Options, Store, translate, translate_changes,
};
use switchyard::table::balance::{self, Pick};

#[path = "common/world.rs"]
mod common;
use common::{http_routes, ingresses, world};

/// Objects keyed as the cluster source's stores hold them.
fn stores(
    services: &[Service],
    slices: &[EndpointSlice],
) -> (Store<Service>, Store<EndpointSlice>) {
    let key = |m: &ObjectMeta| {
        (
            m.namespace.clone().unwrap_or_default(),
            m.name.clone().unwrap_or_default(),
        )
    };
    (
        services
            .iter()
            .map(|s| (key(&s.metadata), s.clone()))
            .collect(),
        slices
            .iter()
            .map(|s| (key(&s.metadata), s.clone()))
            .collect(),
    )
}

fn bench_translate(c: &mut Criterion) {
    let mut g = c.benchmark_group("translate");
    g.sample_size(10);
    for n in [100, 1_000, 10_000] {
        let (services, slices) = world(n);
        let (svc_store, eps_store) = stores(&services, &slices);
        let options = Options::default();
        let (previous, _) = translate_changes(
            &svc_store,
            &eps_store,
            Default::default(),
            None,
            &options,
            None,
        );
        // The old table is dropped after the swap, outside the rebuild: leave drops out.
        g.bench_with_input(BenchmarkId::new("cold", n), &n, |b, _| {
            b.iter_with_large_drop(|| {
                translate(black_box(&services), black_box(&slices), &options, None)
            })
        });
        // What the watcher does after a batch of events that changed nothing routing reads.
        let nothing = Changes::default();
        g.bench_with_input(BenchmarkId::new("rebuild", n), &n, |b, _| {
            b.iter_with_large_drop(|| {
                translate_changes(
                    black_box(&svc_store),
                    black_box(&eps_store),
                    Default::default(),
                    Some(&nothing),
                    &options,
                    Some(previous.previous()),
                )
            })
        });
    }
    // One EndpointSlice gains an endpoint in a 10,000-Service world (the common watch event).
    let (services, mut slices) = world(10_000);
    let options = Options::default();
    let (svc_before, eps_before) = stores(&services, &slices);
    let (previous, _) = translate_changes(
        &svc_before,
        &eps_before,
        Default::default(),
        None,
        &options,
        None,
    );
    slices[4_242].metadata.resource_version = Some("999999".into());
    if let Some(eps) = slices[4_242].endpoints.as_mut() {
        eps.push(Endpoint {
            addresses: vec!["10.250.0.1".into()],
            ..Default::default()
        });
    }
    let (svc_store, eps_store) = stores(&services, &slices);
    let m = &slices[4_242].metadata;
    let changes = Changes {
        ingress: false,
        gateway: false,
        services: Default::default(),
        slices: [(
            m.namespace.clone().unwrap_or_default(),
            m.name.clone().unwrap_or_default(),
        )]
        .into(),
    };
    g.bench_function("10000_one_slice_changed", |b| {
        b.iter_with_large_drop(|| {
            translate_changes(
                black_box(&svc_store),
                black_box(&eps_store),
                Default::default(),
                Some(&changes),
                &options,
                Some(previous.previous()),
            )
        })
    });
    g.finish();
}

/// One request's routing on the HTTP frontend: host and path match, then the entry's pick.
fn lookup_and_pick(
    table: &switchyard::table::RoutingTable,
    host: &str,
    path: &str,
    cursor: &AtomicUsize,
) -> Option<usize> {
    let rule = table.http.lookup(Some(host.as_bytes()), path);
    let entry = rule.and_then(|r| table.entry(r.target))?;
    let pick = Pick {
        algorithm: entry.algorithm,
        cursor,
        client_hash: 0,
        maxconn: entry.maxconn,
    };
    balance::pick(&entry.endpoints, &pick, |_| true)
}

fn bench_lookup(c: &mut Criterion) {
    let (services, slices) = world(10_000);
    let (table, _) = translate(&services, &slices, &Options::default(), None);
    let cursor = AtomicUsize::new(0);
    let mut g = c.benchmark_group("lookup_and_pick_10k");
    for (label, host, path) in [
        (
            "path_route",
            "unknown.example.org",
            "/ns-7/svc-4567:8080/some/deep/path",
        ),
        ("host_route", "svc-4566.example.com", "/index.html"),
    ] {
        g.bench_function(label, |b| {
            b.iter(|| lookup_and_pick(&table, black_box(host), black_box(path), &cursor))
        });
    }
    g.finish();
}

fn bench_ingress(c: &mut Criterion) {
    let (services, slices) = world(10_000);
    let (svc_store, eps_store) = stores(&services, &slices);
    let (mut ings, class) = ingresses(10_000);
    let classes = [&class];
    let options = Options::default();
    let build = |ings: &[k8s_openapi::api::networking::v1::Ingress],
                 previous: Option<switchyard::control::translate::Previous<'_>>,
                 changes: Option<&Changes>| {
        let refs: Vec<_> = ings.iter().collect();
        let inputs = IngressInputs {
            ingresses: &refs,
            classes: &classes,
            secrets: &[],
            config_maps: &[],
            gateway: Default::default(),
        };
        translate_changes(&svc_store, &eps_store, inputs, changes, &options, previous)
    };
    let mut g = c.benchmark_group("ingress_10000");
    g.sample_size(10);
    g.bench_function("cold", |b| {
        b.iter_with_large_drop(|| build(black_box(&ings), None, None))
    });
    let (previous, _) = build(&ings, None, None);
    if let Some(rule) = ings[4_242]
        .spec
        .as_mut()
        .and_then(|s| s.rules.as_mut())
        .and_then(|r| r.first_mut())
    {
        rule.host = Some("renamed.example.com".into());
    }
    let changes = Changes {
        ingress: true,
        ..Default::default()
    };
    g.bench_function("one_ingress_changed", |b| {
        b.iter_with_large_drop(|| {
            build(black_box(&ings), Some(previous.previous()), Some(&changes))
        })
    });
    let table = &previous.table;
    let cursor = AtomicUsize::new(0);
    g.sample_size(100);
    g.bench_function("lookup_and_pick", |b| {
        b.iter(|| {
            lookup_and_pick(
                table,
                black_box("app-4567.example.com"),
                black_box("/api/v1/orders/42"),
                &cursor,
            )
        })
    });
    g.finish();
}

/// The same 10,000 Ingresses written for ingress-nginx's regular expressions: `use-regex`
/// and `rewrite-target: /$2` on each, paths `/api(/|$)(.*)`, `/static/v[0-9]+/(.*)` and `/`
/// (every path of each host a regular expression, 30,000 patterns).
fn bench_ingress_regex(c: &mut Criterion) {
    let (services, slices) = world(10_000);
    let (svc_store, eps_store) = stores(&services, &slices);
    let (mut ings, class) = ingresses(10_000);
    for ing in &mut ings {
        let ann = ing
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        ann.insert(
            "nginx.ingress.kubernetes.io/use-regex".into(),
            "true".into(),
        );
        ann.insert(
            "nginx.ingress.kubernetes.io/rewrite-target".into(),
            "/$2".into(),
        );
        let paths = ing
            .spec
            .as_mut()
            .and_then(|s| s.rules.as_mut())
            .and_then(|r| r.first_mut())
            .and_then(|r| r.http.as_mut())
            .map(|h| &mut h.paths);
        for p in paths.into_iter().flatten() {
            p.path_type = "ImplementationSpecific".into();
            p.path = Some(match p.path.as_deref() {
                Some("/api") => "/api(/|$)(.*)".into(),
                Some("/static/v1") => "/static/v[0-9]+/(.*)".into(),
                _ => "/".into(),
            });
        }
    }
    let classes = [&class];
    let options = Options::default();
    let build = |ings: &[k8s_openapi::api::networking::v1::Ingress],
                 previous: Option<switchyard::control::translate::Previous<'_>>,
                 changes: Option<&Changes>| {
        let refs: Vec<_> = ings.iter().collect();
        let inputs = IngressInputs {
            ingresses: &refs,
            classes: &classes,
            secrets: &[],
            config_maps: &[],
            gateway: Default::default(),
        };
        translate_changes(&svc_store, &eps_store, inputs, changes, &options, previous)
    };
    let mut g = c.benchmark_group("ingress_regex_10000");
    g.sample_size(10);
    g.bench_function("cold", |b| {
        b.iter_with_large_drop(|| build(black_box(&ings), None, None))
    });
    let (previous, warnings) = build(&ings, None, None);
    // The Services' own routes conflict among their ports (the world's doing); the Ingresses
    // must be served without a word.
    let about_ingresses: Vec<_> = warnings
        .iter()
        .filter(|w| w.object.kind == "Ingress")
        .collect();
    assert!(about_ingresses.is_empty(), "{about_ingresses:?}");
    let changes = Changes {
        ingress: true,
        ..Default::default()
    };
    g.bench_function("one_ingress_changed", |b| {
        b.iter_with_large_drop(|| {
            build(black_box(&ings), Some(previous.previous()), Some(&changes))
        })
    });
    let table = &previous.table;
    let cursor = AtomicUsize::new(0);
    let (host, path) = ("app-4567.example.com", "/api/v1/orders/42");
    assert!(lookup_and_pick(table, host, path, &cursor).is_some());
    g.sample_size(100);
    g.bench_function("lookup_and_pick", |b| {
        b.iter(|| lookup_and_pick(table, black_box(host), black_box(path), &cursor))
    });
    // What the rewrite adds: the groups of the path that matched.
    g.bench_function("lookup_pick_and_groups", |b| {
        b.iter(|| {
            let picked = lookup_and_pick(table, black_box(host), black_box(path), &cursor);
            let rule = table.http.lookup(Some(host.as_bytes()), path);
            let groups = rule
                .and_then(|r| r.regex.as_deref())
                .and_then(|p| p.groups(black_box(path)))
                .map(|g| g.get(2).len());
            (picked, groups)
        })
    });
    g.finish();
}

/// A request with a header and a query, as a Gateway route's conditions read it.
struct BenchRequest<'a> {
    header: (&'a str, &'a [u8]),
    query: &'a str,
}

impl switchyard::table::gateway::RequestView for BenchRequest<'_> {
    fn method(&self) -> &[u8] {
        b"GET"
    }
    fn header(&self, name: &str) -> Option<&[u8]> {
        (name == self.header.0).then_some(self.header.1)
    }
    fn query(&self) -> Option<&str> {
        Some(self.query)
    }
}

fn bench_gateway(c: &mut Criterion) {
    use switchyard::control::translate::{GatewayRefs, IngressRefs};
    use switchyard::table::gateway::{Action, GatewayMatch};
    let (services, slices) = world(10_000);
    let (svc_store, eps_store) = stores(&services, &slices);
    let (mut routes, class, gateway) = http_routes(10_000);
    let options = Options::default();
    let build = |routes: &[switchyard::control::translate::gateway::api::HTTPRoute],
                 previous: Option<switchyard::control::translate::Previous<'_>>,
                 changes: Option<&Changes>| {
        let refs = IngressRefs::of([], [], []).with_gateway(GatewayRefs {
            classes: vec![&class],
            gateways: vec![&gateway],
            routes: routes.iter().collect(),
            ..GatewayRefs::default()
        });
        translate_changes(
            &svc_store,
            &eps_store,
            refs.inputs(),
            changes,
            &options,
            previous,
        )
    };
    let mut g = c.benchmark_group("gateway_10000");
    g.sample_size(10);
    g.bench_function("cold", |b| {
        b.iter_with_large_drop(|| build(black_box(&routes), None, None))
    });
    let (previous, _) = build(&routes, None, None);
    routes[4_242].spec.hostnames = vec!["renamed.example.com".into()];
    // A Gateway API change alone: only the Gateway routes and status are redone.
    let changes = Changes {
        gateway: true,
        ..Default::default()
    };
    g.bench_function("one_route_changed", |b| {
        b.iter_with_large_drop(|| {
            build(
                black_box(&routes),
                Some(previous.previous()),
                Some(&changes),
            )
        })
    });
    let table = &previous.table;
    let cursor = AtomicUsize::new(0);
    let req = BenchRequest {
        header: ("x-version", b"v2"),
        query: "debug=1&page=2",
    };
    // The route must be the header-and-query rule, or the figure measures something else.
    match table
        .gateway
        .lookup(false, Some(b"app-4567.example.com"), "/api/v1/orders", &req)
    {
        GatewayMatch::Matched(_, c) => assert_eq!(c.headers.len(), 1),
        other => panic!("bench route not matched: {other:?}"),
    }
    g.sample_size(100);
    g.bench_function("lookup_header_query_and_pick", |b| {
        b.iter(|| {
            let GatewayMatch::Matched(_, c) = table.gateway.lookup(
                false,
                Some(black_box(b"app-4567.example.com")),
                black_box("/api/v1/orders"),
                &req,
            ) else {
                return None;
            };
            let Action::Backends(backends) = &c.rule.action else {
                return None;
            };
            let entry = table.entry(backends.next()?.1.entry?)?;
            let pick = Pick {
                algorithm: entry.algorithm,
                cursor: &cursor,
                client_hash: 0,
                maxconn: entry.maxconn,
            };
            balance::pick(&entry.endpoints, &pick, |_| true)
        })
    });
    g.finish();
}

/// What a Gateway bench builds on: the Services, one GatewayClass and Gateway, the options.
struct GatewayWorld<'a> {
    services: &'a Store<Service>,
    slices: &'a Store<EndpointSlice>,
    class: &'a switchyard::control::translate::gateway::api::GatewayClass,
    gateway: &'a switchyard::control::translate::gateway::api::Gateway,
    options: &'a Options,
}

impl GatewayWorld<'_> {
    /// A build with `routes` attached, from `previous` (with `changes`) or cold.
    fn build(
        &self,
        routes: &[switchyard::control::translate::gateway::api::HTTPRoute],
        previous: Option<switchyard::control::translate::Previous<'_>>,
        changes: Option<&Changes>,
    ) -> (
        switchyard::control::translate::Built,
        Vec<switchyard::control::translate::Warning>,
    ) {
        use switchyard::control::translate::{GatewayRefs, IngressRefs};
        let refs = IngressRefs::of([], [], []).with_gateway(GatewayRefs {
            classes: vec![self.class],
            gateways: vec![self.gateway],
            routes: routes.iter().collect(),
            ..GatewayRefs::default()
        });
        translate_changes(
            self.services,
            self.slices,
            refs.inputs(),
            changes,
            self.options,
            previous,
        )
    }
}

/// The Gateway-only rebuild after one HTTPRoute is created among `n` (what
/// `tests/e2e_gateway_figures.rs` times end to end at 3,000), and the cost of regular
/// expressions on builds: 10,000 routes with a `RegularExpression` path and a header pattern
/// each, built without a previous table (every pattern compiled), with one (every pattern
/// reused) and Gateway-only after one route changed.
#[allow(clippy::expect_used)] // fixed JSON: a failure is a bug in the bench
fn bench_gateway_changes(c: &mut Criterion) {
    let options = Options::default();
    let changes = Changes {
        gateway: true,
        ..Default::default()
    };
    let mut g = c.benchmark_group("gateway_changes");
    g.sample_size(10);
    for n in [3_000, 10_000] {
        let (services, slices) = world(n);
        let (svc_store, eps_store) = stores(&services, &slices);
        let (routes, class, gateway) = http_routes(n);
        let world = GatewayWorld {
            services: &svc_store,
            slices: &eps_store,
            class: &class,
            gateway: &gateway,
            options: &options,
        };
        let (previous, _) = world.build(&routes[..n - 1], None, None);
        // The figure must be of a build that took the other routes from the cache.
        let (once, _) = world.build(&routes, Some(previous.previous()), Some(&changes));
        assert_eq!(once.memo.gateway_routes_translated(), Some(1));
        g.bench_with_input(BenchmarkId::new("one_route_created", n), &n, |b, _| {
            b.iter_with_large_drop(|| {
                world.build(
                    black_box(&routes),
                    Some(previous.previous()),
                    Some(&changes),
                )
            })
        });
        // A write that changed no spec (a route's status coming back): nothing translated,
        // the routers and route status shared.
        g.bench_with_input(BenchmarkId::new("nothing_translated", n), &n, |b, _| {
            b.iter_with_large_drop(|| {
                world.build(black_box(&routes), Some(once.previous()), Some(&changes))
            })
        });
        // The same build translating every route, as before routes were kept (same run).
        let (mut forgetful, _) = world.build(&routes[..n - 1], None, None);
        forgetful.memo.forget_gateway_routes();
        g.bench_with_input(
            BenchmarkId::new("one_route_created_every_route_translated", n),
            &n,
            |b, _| {
                b.iter_with_large_drop(|| {
                    world.build(
                        black_box(&routes),
                        Some(forgetful.previous()),
                        Some(&changes),
                    )
                })
            },
        );
    }
    let n = 10_000;
    let (services, slices) = world(n);
    let (svc_store, eps_store) = stores(&services, &slices);
    let (mut routes, class, gateway) = http_routes(n);
    for (i, r) in routes.iter_mut().enumerate() {
        let rule: serde_json::Value = serde_json::json!({
            "matches": [{
                "path": {"type": "RegularExpression", "value": format!("/static/v[0-9]+/app-{i}/.*")},
                "headers": [{"type": "RegularExpression", "name": "x-build", "value": "[0-9]{1,6}"}],
            }],
            "backendRefs": [{"name": format!("svc-{i}"), "port": 9090}],
        });
        if let Some(rules) = r.spec.rules.as_mut() {
            rules[2] = serde_json::from_value(rule).expect("rule");
        }
    }
    let world = GatewayWorld {
        services: &svc_store,
        slices: &eps_store,
        class: &class,
        gateway: &gateway,
        options: &options,
    };
    let (previous, _) = world.build(&routes, None, None);
    assert_eq!(previous.table.gateway.patterns().count(), 2 * n);
    g.bench_function("regex_10000_full_compiling", |b| {
        b.iter_with_large_drop(|| world.build(black_box(&routes), None, None))
    });
    g.bench_function("regex_10000_full_reusing", |b| {
        b.iter_with_large_drop(|| world.build(black_box(&routes), Some(previous.previous()), None))
    });
    routes[4_242].spec.hostnames = vec!["renamed.example.com".into()];
    g.bench_function("regex_10000_one_route_changed", |b| {
        b.iter_with_large_drop(|| {
            world.build(
                black_box(&routes),
                Some(previous.previous()),
                Some(&changes),
            )
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    bench_translate,
    bench_lookup,
    bench_ingress,
    bench_ingress_regex,
    bench_gateway,
    bench_gateway_changes
);
criterion_main!(benches);

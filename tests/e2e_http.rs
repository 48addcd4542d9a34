//! End-to-end tests: the real `switchyard` binary in front of real HTTP
//! backends, everything on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

/// Assert that the request does NOT reach any of our backends and gets 404.
async fn expect_404(sy: &Switchyard, host: Option<&str>, path: &str) {
    let r = match host {
        Some(h) => sy.get_host(h, path).await,
        None => sy.get(path).await,
    };
    assert_eq!(
        r.status, 404,
        "host={host:?} path={path} should be unmatched: {r:?}"
    );
    assert_eq!(r.backend(), None, "host={host:?} path={path}: {r:?}");
}

fn objs(svcs: Vec<Svc>, slices: Vec<Vec<Value>>) -> Vec<Value> {
    let mut v: Vec<Value> = svcs.into_iter().map(Value::from).collect();
    v.extend(slices.into_iter().flatten());
    v
}

// 0 ---------------------------------------------------------------------------

/// Safe by default: a Service that does not ask to be routed (`internal/admin-api:9000`, no
/// annotation) is not reachable on the public port, on any host, while one that asks is; an
/// Ingress still reaches an unannotated Service; `--service-routes namespace` is the original's
/// mode (the home namespace's Services by name, the others not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unannotated_service_is_not_reachable_by_default() {
    let admin = Backend::start("admin").await;
    let public = Backend::start("public").await;
    let home = Backend::start("home").await;
    let objects = || {
        objs(
            vec![
                svc("admin-api", 9000).ns("internal"),
                svc("site", 80)
                    .ns("internal")
                    .ann("serviceloadbalancer/lb.expose", "true"),
                svc("home", 80),
            ],
            vec![
                vec![slice_ns("internal", "admin-api", "", admin.port)],
                vec![slice_ns("internal", "site", "", public.port)],
                slices("home", &[&home]),
            ],
        )
    };
    let mut with_ingress = objects();
    with_ingress.push(ingress_class("switchyard", false));
    with_ingress.push(
        ing("admin")
            .ns("internal")
            .rule(Some("admin.test"), &[("/", "Prefix", "admin-api", 9000)])
            .into(),
    );
    for engine in ENGINES {
        let sy = switchyard(with_ingress.clone())
            .service_routes_default()
            .args(&["--fast-path", engine])
            .start()
            .await;
        let before = admin.count();
        for host in [None, Some("anything.test")] {
            expect_404(&sy, host, "/internal/admin-api:9000/users/delete").await;
            expect_404(&sy, host, "/home/").await;
        }
        assert_eq!(admin.count(), before, "{engine}");
        expect_route(&sy, None, "/internal/site/x", &public, "/x").await;
        expect_route(&sy, Some("admin.test"), "/users", &admin, "/users").await;
    }
    let sy = switchyard(objects())
        .args(&["--service-routes", "namespace"])
        .start()
        .await;
    expect_route(&sy, None, "/home/x", &home, "/x").await;
    expect_route(&sy, None, "/internal/site/x", &public, "/x").await;
    expect_404(&sy, None, "/internal/admin-api:9000/users").await;
}

// 1 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_routing_strips_prefix_on_segment_boundary() {
    let b1 = Backend::start("b1").await;
    let b2 = Backend::start("b2").await;
    let b3 = Backend::start("b3").await;
    let b4 = Backend::start("b4").await;
    let b5 = Backend::start("b5").await;
    let b6 = Backend::start("b6").await;
    let b7 = Backend::start("b7").await;
    let sy = switchyard(objs(
        vec![
            svc("svc-1", 80),
            svc("svc-10", 80),
            svc("web", 80).ns("shop"),
            svc("web", 80),
            svc("multi", 80).named_ports(&[("http", 80), ("alt", 8080)]),
            svc("cart", 9090).ns("shop"),
        ],
        vec![
            vec![slice_ns("shop", "cart", "", b7.port)],
            slices("svc-1", &[&b1]),
            slices("svc-10", &[&b2]),
            vec![slice_ns("shop", "web", "", b3.port)],
            slices("web", &[&b4]),
            vec![
                slice("multi", "http", b5.port),
                slice("multi", "alt", b6.port),
            ],
        ],
    ))
    .start()
    .await;

    expect_route(&sy, None, "/svc-1", &b1, "/").await;
    expect_route(&sy, None, "/svc-1/", &b1, "/").await;
    expect_route(&sy, None, "/svc-1/a?b", &b1, "/a?b").await;
    expect_route(&sy, None, "/svc-1?x=1", &b1, "/?x=1").await;
    expect_route(
        &sy,
        Some("anything.test"),
        "/svc-1/deep/path",
        &b1,
        "/deep/path",
    )
    .await;
    expect_route(&sy, None, "/svc-10", &b2, "/").await;
    expect_route(&sy, None, "/svc-10/a?b", &b2, "/a?b").await;
    expect_404(&sy, None, "/svc-1x").await;
    expect_404(&sy, None, "/svc-100").await;
    expect_route(&sy, None, "/shop/web/x", &b3, "/x").await;
    expect_route(&sy, None, "/web/x", &b4, "/x").await;
    expect_route(&sy, None, "/multi/p", &b5, "/p").await;
    expect_route(&sy, None, "/multi:8080/q?z=1", &b6, "/q?z=1").await;
    expect_route(&sy, None, "/shop/cart:9090/c", &b7, "/c").await;
    expect_404(&sy, None, "/cart:9090/c").await;
}

// 2 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_routing_case_insensitive_wildcard_and_exact_precedence() {
    let exact = Backend::start("exact").await;
    let wild = Backend::start("wild").await;
    let other = Backend::start("other").await;
    let sy = switchyard(objs(
        vec![
            svc("web", 80).host("foo.example.com"),
            svc("wild", 80).host("*.example.com"),
            svc("other", 80),
        ],
        vec![
            slices("web", &[&exact]),
            slices("wild", &[&wild]),
            slices("other", &[&other]),
        ],
    ))
    .start()
    .await;

    // Exact host, case-insensitive, port ignored, any path, unstripped.
    expect_route(
        &sy,
        Some("FOO.example.com:8080"),
        "/web/a",
        &exact,
        "/web/a",
    )
    .await;
    expect_route(&sy, Some("foo.example.com"), "/", &exact, "/").await;
    expect_route(&sy, Some("foo.EXAMPLE.com"), "/x/y?z", &exact, "/x/y?z").await;
    // Host rule beats the host-less /other path rule.
    expect_route(&sy, Some("foo.example.com"), "/other/a", &exact, "/other/a").await;
    // Wildcard.
    expect_route(&sy, Some("a.example.com"), "/p", &wild, "/p").await;
    expect_route(&sy, Some("a.b.example.com:81"), "/p", &wild, "/p").await;
    expect_route(&sy, Some("A.Example.Com"), "/web/a", &wild, "/web/a").await;
    // The apex does not match the wildcard.
    expect_404(&sy, Some("example.com"), "/p").await;
    // Unrelated host still gets host-less path routing.
    expect_route(&sy, Some("unrelated.test"), "/other/a", &other, "/a").await;
}

// 3 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_match_routes_listed_paths_unstripped() {
    let b1 = Backend::start("b1").await;
    let b2 = Backend::start("b2").await;
    let sy = switchyard(objs(
        vec![
            svc("acl", 80).acl("/api /v2"),
            svc("hosted", 80).host("h.example.com").acl("/only"),
        ],
        vec![slices("acl", &[&b1]), slices("hosted", &[&b2])],
    ))
    .start()
    .await;

    expect_route(&sy, None, "/api/x", &b1, "/api/x").await;
    expect_route(&sy, None, "/api", &b1, "/api").await;
    expect_route(&sy, None, "/v2", &b1, "/v2").await;
    expect_route(&sy, Some("any.test"), "/v2/z?q=1", &b1, "/v2/z?q=1").await;
    // The entry name no longer routes.
    expect_404(&sy, None, "/acl").await;
    expect_404(&sy, None, "/acl/api").await;

    // lb.host + aclMatch: only that host AND those paths.
    expect_route(&sy, Some("h.example.com"), "/only/x", &b2, "/only/x").await;
    expect_route(&sy, Some("H.EXAMPLE.COM:9999"), "/only", &b2, "/only").await;
    expect_404(&sy, Some("h.example.com"), "/other").await;
    expect_404(&sy, Some("x.example.com"), "/only").await;
    expect_404(&sy, None, "/only").await;
    expect_404(&sy, None, "/hosted").await;
}

// 4 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn longest_prefix_wins_and_host_rule_beats_hostless() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let c = Backend::start("c").await;
    let sy = switchyard(objs(
        vec![
            svc("svc-a", 80).acl("/api"),
            svc("svc-b", 80).acl("/api/admin"),
            svc("svc-c", 80).host("p.example.com").acl("/api"),
        ],
        vec![
            slices("svc-a", &[&a]),
            slices("svc-b", &[&b]),
            slices("svc-c", &[&c]),
        ],
    ))
    .start()
    .await;

    expect_route(&sy, None, "/api/admin/x", &b, "/api/admin/x").await;
    expect_route(&sy, None, "/api/admin", &b, "/api/admin").await;
    expect_route(&sy, None, "/api/other", &a, "/api/other").await;
    expect_route(&sy, None, "/api", &a, "/api").await;
    // Host rule (shorter path) beats host-less rule (longer path).
    expect_route(
        &sy,
        Some("p.example.com"),
        "/api/admin/x",
        &c,
        "/api/admin/x",
    )
    .await;
    expect_route(&sy, Some("p.example.com"), "/api/other", &c, "/api/other").await;
}

// 5 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roundrobin_spreads_evenly() {
    let bs = [
        Backend::start("b1").await,
        Backend::start("b2").await,
        Backend::start("b3").await,
    ];
    let sy = switchyard(objs(
        vec![svc("web", 80)],
        vec![slices("web", &[&bs[0], &bs[1], &bs[2]])],
    ))
    .start()
    .await;
    let counts = spread(&sy, "/web/x", 30).await;
    let expected: BTreeMap<String, usize> = [
        ("b1".to_string(), 10),
        ("b2".to_string(), 10),
        ("b3".to_string(), 10),
    ]
    .into();
    assert_eq!(counts, expected);
}

fn lowest_port(bs: &[Backend]) -> &Backend {
    bs.iter().min_by_key(|b| b.port).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_algorithm_flag_sends_all_to_lowest_port() {
    let bs = vec![
        Backend::start("b1").await,
        Backend::start("b2").await,
        Backend::start("b3").await,
    ];
    let sy = switchyard(objs(
        vec![svc("web", 80)],
        vec![slices("web", &[&bs[0], &bs[1], &bs[2]])],
    ))
    .args(&["--balance-algorithm", "first"])
    .start()
    .await;
    let counts = spread(&sy, "/web", 20).await;
    let first = lowest_port(&bs);
    assert_eq!(
        counts,
        [(first.name.clone(), 20)].into(),
        "ports: {:?}",
        bs.iter().map(|b| (&b.name, b.port)).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn algorithm_annotation_per_service() {
    let f = vec![
        Backend::start("f1").await,
        Backend::start("f2").await,
        Backend::start("f3").await,
    ];
    let r = [
        Backend::start("r1").await,
        Backend::start("r2").await,
        Backend::start("r3").await,
    ];
    let sy = switchyard(objs(
        vec![svc("firsty", 80).algo("first"), svc("rr", 80)],
        vec![
            slices("firsty", &[&f[0], &f[1], &f[2]]),
            slices("rr", &[&r[0], &r[1], &r[2]]),
        ],
    ))
    .start()
    .await;
    let counts = spread(&sy, "/firsty", 20).await;
    assert_eq!(counts, [(lowest_port(&f).name.clone(), 20)].into());
    // The default (roundrobin) still applies to the other service.
    let counts = spread(&sy, "/rr", 30).await;
    assert_eq!(
        counts.values().copied().collect::<Vec<_>>(),
        vec![10, 10, 10],
        "{counts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_algorithm_annotation_falls_back_to_roundrobin() {
    let bs = [
        Backend::start("b1").await,
        Backend::start("b2").await,
        Backend::start("b3").await,
    ];
    let sy = switchyard(objs(
        vec![svc("web", 80).algo("bogus")],
        vec![slices("web", &[&bs[0], &bs[1], &bs[2]])],
    ))
    .start()
    .await;
    let counts = spread(&sy, "/web", 30).await;
    assert_eq!(
        counts.values().copied().collect::<Vec<_>>(),
        vec![10, 10, 10],
        "{counts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_algorithm_pins_client() {
    let bs = [
        Backend::start("b1").await,
        Backend::start("b2").await,
        Backend::start("b3").await,
    ];
    let sy = switchyard(objs(
        vec![svc("web", 80).algo("source")],
        vec![slices("web", &[&bs[0], &bs[1], &bs[2]])],
    ))
    .start()
    .await;
    let counts = spread(&sy, "/web", 20).await;
    assert_eq!(
        counts.len(),
        1,
        "source hashing must pin 127.0.0.1 to one backend: {counts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_algorithm_flag_pins_client() {
    let bs = [
        Backend::start("b1").await,
        Backend::start("b2").await,
        Backend::start("b3").await,
    ];
    let sy = switchyard(objs(
        vec![svc("web", 80)],
        vec![slices("web", &[&bs[0], &bs[1], &bs[2]])],
    ))
    .args(&["--balance-algorithm", "source"])
    .start()
    .await;
    let counts = spread(&sy, "/web", 20).await;
    assert_eq!(counts.len(), 1, "{counts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leastconn_prefers_idle_backend() {
    let slow = Backend::builder("slow")
        .delay(Duration::from_millis(1000))
        .start()
        .await;
    let fast = Backend::start("fast").await;
    let sy = switchyard(objs(
        vec![svc("web", 80).algo("leastconn")],
        vec![slices("web", &[&slow, &fast])],
    ))
    .start()
    .await;
    let port = sy.http_port;
    // 4 concurrent sequential clients for ~2.5 s.
    let deadline = Instant::now() + Duration::from_millis(2500);
    let mut tasks = Vec::new();
    for _ in 0..4 {
        tasks.push(tokio::spawn(async move {
            let mut got: Vec<String> = Vec::new();
            for _ in 0..500 {
                if Instant::now() >= deadline {
                    break;
                }
                let r = get(port, "/web", &[]).await;
                assert_eq!(r.status, 200, "{r:?}");
                got.push(r.backend().unwrap());
                // Pacing the clients, not a wait.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            got
        }));
    }
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for t in tasks {
        for b in t.await.unwrap() {
            *counts.entry(b).or_insert(0) += 1;
        }
    }
    eprintln!("leastconn counts: {counts:?}");
    let s = counts.get("slow").copied().unwrap_or(0);
    let f = counts.get("fast").copied().unwrap_or(0);
    assert!(
        f >= 20 && f > 3 * s,
        "leastconn should favour the idle backend: {counts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leastconn_sequential_requests_use_all_backends() {
    let bs = [
        Backend::start("b1").await,
        Backend::start("b2").await,
        Backend::start("b3").await,
    ];
    let sy = switchyard(objs(
        vec![svc("web", 80)],
        vec![slices("web", &[&bs[0], &bs[1], &bs[2]])],
    ))
    .args(&["--balance-algorithm", "leastconn"])
    .start()
    .await;
    let counts = spread(&sy, "/web", 30).await;
    assert_eq!(counts.len(), 3, "all backends should get some: {counts:?}");
}

// 6 ---------------------------------------------------------------------------

fn serverid_cookie(r: &Resp) -> Option<(String, Vec<String>)> {
    let sc = r
        .header_all("set-cookie")
        .into_iter()
        .find(|c| c.trim_start().starts_with("SERVERID="))?;
    let mut parts = sc.split(';').map(|p| p.trim().to_string());
    let id = parts.next()?.trim_start_matches("SERVERID=").to_string();
    Some((id, parts.collect()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_sticky_session() {
    let bs = [
        Backend::start("b1").await,
        Backend::start("b2").await,
        Backend::start("b3").await,
    ];
    let sy = switchyard(objs(
        vec![svc("web", 80).sticky()],
        vec![slices("web", &[&bs[0], &bs[1], &bs[2]])],
    ))
    .start()
    .await;

    // Without a cookie: every response sets one; ids map 1:1 to backends.
    let mut id_to_backend: BTreeMap<String, String> = BTreeMap::new();
    for i in 0..6 {
        let r = sy.get("/web").await;
        assert_eq!(r.status, 200, "{r:?}");
        let (id, attrs) = serverid_cookie(&r)
            .unwrap_or_else(|| panic!("request #{i}: no SERVERID Set-Cookie: {r:?}"));
        assert!(!id.is_empty(), "empty SERVERID: {r:?}");
        assert!(
            attrs.iter().any(|a| a == "Path=/"),
            "Set-Cookie lacks Path=/: {r:?}"
        );
        assert!(
            attrs.iter().any(|a| a.eq_ignore_ascii_case("HttpOnly")),
            "Set-Cookie lacks HttpOnly: {r:?}"
        );
        assert_eq!(
            r.header("cache-control").as_deref(),
            Some("no-cache=\"set-cookie\""),
            "{r:?}"
        );
        let b = r.backend().unwrap();
        if let Some(prev) = id_to_backend.insert(id.clone(), b.clone()) {
            assert_eq!(prev, b, "SERVERID {id} was issued by two backends");
        }
    }
    let backends: BTreeSet<&String> = id_to_backend.values().collect();
    assert!(
        backends.len() >= 2,
        "roundrobin should have spread the first requests: {id_to_backend:?}"
    );

    // With a valid cookie: always the same backend, cookie stripped, not re-set.
    for (id, backend) in &id_to_backend {
        let cookie = format!("a=1; SERVERID={id}; b=2");
        for i in 0..10 {
            let r = sy.get_with("/web/p", &[("cookie", &cookie)]).await;
            assert_eq!(r.status, 200, "{r:?}");
            assert_eq!(
                r.backend().as_ref(),
                Some(backend),
                "request #{i} with {cookie}"
            );
            let seen = r.seen_header("cookie").unwrap_or_default();
            assert!(!seen.contains("SERVERID"), "backend saw SERVERID: {seen:?}");
            assert!(
                seen.contains("a=1") && seen.contains("b=2"),
                "other cookies lost: {seen:?}"
            );
            assert!(serverid_cookie(&r).is_none(), "cookie set again: {r:?}");
        }
        // Only the SERVERID cookie: the backend sees no SERVERID at all.
        let r = sy
            .get_with("/web", &[("cookie", &format!("SERVERID={id}"))])
            .await;
        assert_eq!(r.backend().as_ref(), Some(backend));
        assert!(
            !r.seen_header("cookie")
                .unwrap_or_default()
                .contains("SERVERID"),
            "{r:?}"
        );
    }

    // Unknown id: fresh Set-Cookie with a valid id.
    let r = sy
        .get_with("/web", &[("cookie", "SERVERID=does-not-exist")])
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let (id, _) = serverid_cookie(&r).unwrap_or_else(|| panic!("no fresh cookie: {r:?}"));
    assert_ne!(id, "does-not-exist");
    assert!(
        !r.seen_header("cookie")
            .unwrap_or_default()
            .contains("SERVERID"),
        "{r:?}"
    );
}

// 7 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_ip_session_affinity() {
    let bs = [
        Backend::start("b1").await,
        Backend::start("b2").await,
        Backend::start("b3").await,
    ];
    let sy = switchyard(objs(
        vec![svc("web", 80).client_ip_affinity()],
        vec![slices("web", &[&bs[0], &bs[1], &bs[2]])],
    ))
    .args(&["--balance-algorithm", "roundrobin"])
    .start()
    .await;
    let counts = spread(&sy, "/web", 20).await;
    assert_eq!(
        counts.len(),
        1,
        "ClientIP affinity must pin 127.0.0.1: {counts:?}"
    );
}

// 8 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_without_endpoints_answers_503() {
    let b = Backend::start("b1").await;
    let stray = Backend::start("stray").await;
    let sy = switchyard(objs(
        vec![
            svc("empty", 80),
            svc("web", 80),
            svc("mismatch", 80).named_ports(&[("http", 80)]),
        ],
        // The slice's port name must equal the Service port's name: "other"
        // is not "http", so `mismatch` has no endpoints either.
        vec![
            slices("web", &[&b]),
            vec![slice("mismatch", "other", stray.port)],
        ],
    ))
    .start()
    .await;
    for path in ["/empty", "/empty/x", "/mismatch"] {
        let r = sy.get(path).await;
        assert_eq!(r.status, 503, "{path}: {r:?}");
    }
    expect_route(&sy, None, "/web", &b, "/").await;
}

// 9 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmatched_request_default_404() {
    let b = Backend::start("b1").await;
    let sy = switchyard(objs(vec![svc("web", 80)], vec![slices("web", &[&b])]))
        .start()
        .await;
    for path in ["/nothing-here", "/", "/webx"] {
        let r = sy.get(path).await;
        assert_eq!(r.status, 404, "{path}: {r:?}");
        assert!(!r.body.is_empty(), "{path}: 404 body is empty");
        assert_eq!(r.backend(), None, "{path} reached a backend: {r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmatched_request_custom_code_and_error_page() {
    let b = Backend::start("b1").await;
    let page_dir = tempfile::tempdir().unwrap();
    let page = page_dir.path().join("x.html");
    let html = "<html><body>custom switchyard error page 7f3a</body></html>\n";
    std::fs::write(&page, html).unwrap();
    let sy = switchyard(objs(vec![svc("web", 80)], vec![slices("web", &[&b])]))
        .args(&["--default-return-code", "403"])
        .args(&["--error-page", &format!("file://{}", page.display())])
        .start()
        .await;
    let r = sy.get("/nothing-here").await;
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(r.body, html);
    // Matched requests are unaffected.
    expect_route(&sy, None, "/web/ok", &b, "/ok").await;
}

// 10 --------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_succeed_after_a_backend_dies() {
    let mut b1 = Backend::start("b1").await;
    let b2 = Backend::start("b2").await;
    let sy = switchyard(objs(vec![svc("web", 80)], vec![slices("web", &[&b1, &b2])]))
        .start()
        .await;
    // Warm up: both backends answer (and the proxy may pool connections).
    let counts = spread(&sy, "/web", 4).await;
    assert_eq!(counts.len(), 2, "{counts:?}");
    b1.stop().await;
    for i in 0..20 {
        let r = try_request(sy.http_port, "GET", "/web/after", &[]).await;
        let r = r.unwrap_or_else(|e| panic!("request #{i} after b1 died: {e}"));
        assert_eq!(r.status, 200, "request #{i} after b1 died: {r:?}");
        assert_eq!(r.backend().as_deref(), Some("b2"), "request #{i}: {r:?}");
    }
}

// 11 --------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_headers_reach_backend() {
    let b = Backend::start("b1").await;
    let sy = switchyard(objs(vec![svc("web", 80)], vec![slices("web", &[&b])]))
        .start()
        .await;
    let r = sy.get("/web/h").await;
    assert_eq!(r.status, 200, "{r:?}");
    let xff = r.seen_header("x-forwarded-for").unwrap_or_default();
    assert!(
        xff.contains("127.0.0.1"),
        "X-Forwarded-For = {xff:?}; {r:?}"
    );
    assert_eq!(
        r.seen_header("x-forwarded-proto").as_deref(),
        Some("http"),
        "{r:?}"
    );
    // Same through the backend's own record.
    let seen = b.last().unwrap();
    assert!(
        seen.header("x-forwarded-for")
            .unwrap_or_default()
            .contains("127.0.0.1")
    );
}

// 12 --------------------------------------------------------------------------

async fn ws_echo(url: &str) {
    let (mut ws, resp) = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_tungstenite::connect_async(url),
    )
    .await
    .unwrap_or_else(|_| panic!("websocket handshake to {url} timed out"))
    .unwrap_or_else(|e| panic!("websocket handshake to {url} failed: {e}"));
    assert_eq!(resp.status(), 101);
    for text in ["hello switchyard", "second message"] {
        ws.send(Message::text(text)).await.expect("ws send");
        let got = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .expect("echo timed out")
            .expect("stream ended")
            .expect("ws error");
        assert_eq!(got, Message::text(text));
    }
    let _ = ws.close(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_upgrade_via_acl_match() {
    let b = Backend::start("b1").await;
    let sy = switchyard(objs(
        vec![svc("chat", 80).acl("/ws")],
        vec![slices("chat", &[&b])],
    ))
    .start()
    .await;
    ws_echo(&format!("ws://127.0.0.1:{}/ws", sy.http_port)).await;
    assert_eq!(b.last().map(|s| s.uri).as_deref(), Some("/ws"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_upgrade_via_path_prefix() {
    let b = Backend::start("b1").await;
    let sy = switchyard(objs(vec![svc("chat", 80)], vec![slices("chat", &[&b])]))
        .start()
        .await;
    ws_echo(&format!("ws://127.0.0.1:{}/chat/ws", sy.http_port)).await;
    assert_eq!(b.last().map(|s| s.uri).as_deref(), Some("/ws"));
}

// 13 --------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_manifest_edit_without_failed_requests() {
    let b1 = Backend::start("b1").await;
    let b2 = Backend::start("b2").await;
    let b3 = Backend::start("b3").await;
    let sy = switchyard(objs(vec![svc("web", 80)], vec![slices("web", &[&b1])]))
        .start()
        .await;
    expect_404(&sy, None, "/api").await;

    // Sequential keep-alive load on /web, bounded to 8 s / 3000 requests.
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let url = sy.url("/web/load");
    let load = {
        let (stop, ok) = (stop.clone(), ok.clone());
        tokio::spawn(async move {
            let client = pooled_client();
            let deadline = Instant::now() + Duration::from_secs(8);
            let mut failures = Vec::new();
            let mut seen = BTreeSet::new();
            for i in 0..3000 {
                if stop.load(Ordering::Relaxed) || Instant::now() >= deadline {
                    break;
                }
                match pooled_get(&client, &url).await {
                    Ok(r) if r.status == 200 => {
                        ok.fetch_add(1, Ordering::Relaxed);
                        seen.insert(r.backend().unwrap_or_default());
                    }
                    Ok(r) => failures.push(format!("#{i}: status {} body {:?}", r.status, r.body)),
                    Err(e) => failures.push(format!("#{i}: {e}")),
                }
                // Pacing the load, not a wait.
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            (failures, seen)
        })
    };
    let running = eventually(Duration::from_secs(5), || async {
        ok.load(Ordering::Relaxed) > 0
    })
    .await;
    assert!(running, "the load did not get going");

    sy.rewrite(&objs(
        vec![svc("web", 80), svc("api", 80)],
        vec![slices("web", &[&b1, &b2]), slices("api", &[&b3])],
    ));
    let changed = Instant::now();
    let api_live = eventually(Duration::from_secs(5), || async {
        let r = sy.get("/api/x").await;
        r.status == 200 && r.backend().as_deref() == Some("b3")
    })
    .await;
    let took = changed.elapsed();
    // The load goes on until it has seen the new table (b2 gets traffic) and made its count;
    // the assertions below say which of the two did not come.
    eventually(Duration::from_secs(5), || async {
        b2.count() > 0 && ok.load(Ordering::Relaxed) > 50
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let (failures, seen) = load.await.unwrap();
    eprintln!(
        "live edit: {} ok, route after {took:?}, backends {seen:?}",
        ok.load(Ordering::Relaxed)
    );

    assert!(
        api_live,
        "new route /api did not answer within 5 s of the edit"
    );
    assert!(
        failures.is_empty(),
        "{} load requests failed: {failures:?}",
        failures.len()
    );
    assert!(
        ok.load(Ordering::Relaxed) > 50,
        "load made too few requests: {}",
        ok.load(Ordering::Relaxed)
    );
    assert!(
        seen.contains("b2"),
        "new backend b2 never got load traffic: {seen:?} (route took {took:?})"
    );
    expect_route(&sy, None, "/api/y?z", &b3, "/y?z").await;
}

// 14 --------------------------------------------------------------------------

/// Waits (at most 5 s) until switchyard has read the manifest and refused it.
async fn refused(sy: &Switchyard) {
    let refused = eventually(Duration::from_secs(5), || async {
        sy.stderr().contains("manifests not applied")
    })
    .await;
    assert!(
        refused,
        "the broken manifest was not refused; stderr:\n{}",
        sy.stderr()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_manifest_keeps_last_good_table() {
    let b1 = Backend::start("b1").await;
    let b2 = Backend::start("b2").await;
    let sy = switchyard(objs(vec![svc("web", 80)], vec![slices("web", &[&b1])]))
        .start()
        .await;
    expect_route(&sy, None, "/web/a", &b1, "/a").await;

    sy.rewrite_raw(
        "apiVersion: v1\nkind: Service\nmetadata: {name: [unclosed\n  : : :\n\t- nope\n",
    );
    // Once switchyard has read and refused it, the last good table still serves.
    refused(&sy).await;
    expect_route(&sy, None, "/web/a", &b1, "/a").await;
    let ready = get(sy.admin_port, "/healthz", &[]).await;
    assert_eq!(
        ready.status, 200,
        "healthz during broken manifest: {ready:?}"
    );

    // Fix it, with a change: a second service.
    sy.rewrite(&objs(
        vec![svc("web", 80), svc("api", 80)],
        vec![slices("web", &[&b1]), slices("api", &[&b2])],
    ));
    let live = eventually(Duration::from_secs(5), || async {
        sy.get("/api").await.backend().as_deref() == Some("b2")
    })
    .await;
    assert!(
        live,
        "fixed manifest not applied within 5 s; stderr:\n{}",
        sy.stderr()
    );
    expect_route(&sy, None, "/web/a", &b1, "/a").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_json_manifest_keeps_last_good_table() {
    let b1 = Backend::start("b1").await;
    let b2 = Backend::start("b2").await;
    let sy = switchyard(objs(vec![svc("web", 80)], vec![slices("web", &[&b1])]))
        .layout(Layout::JsonFile)
        .start()
        .await;
    expect_route(&sy, None, "/web/a", &b1, "/a").await;

    sy.rewrite_raw("{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [ {\"kind\": ");
    refused(&sy).await;
    expect_route(&sy, None, "/web/a", &b1, "/a").await;

    sy.rewrite(&objs(
        vec![svc("web", 80), svc("api", 80)],
        vec![slices("web", &[&b1]), slices("api", &[&b2])],
    ));
    let live = eventually(Duration::from_secs(5), || async {
        sy.get("/api").await.backend().as_deref() == Some("b2")
    })
    .await;
    assert!(
        live,
        "fixed JSON manifest not applied within 5 s; stderr:\n{}",
        sy.stderr()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifest_directory_picks_up_new_and_removed_files() {
    let b1 = Backend::start("b1").await;
    let b2 = Backend::start("b2").await;
    let sy = switchyard(objs(vec![svc("web", 80)], vec![slices("web", &[&b1])]))
        .layout(Layout::Dir)
        .start()
        .await;
    expect_route(&sy, None, "/web/a", &b1, "/a").await;
    expect_404(&sy, None, "/api").await;

    // A new file in the directory adds a service...
    sy.write_dir_file(
        "extra.yaml",
        &objs(vec![svc("api", 80)], vec![slices("api", &[&b2])]),
    );
    let added = eventually(Duration::from_secs(5), || async {
        sy.get("/api/x").await.backend().as_deref() == Some("b2")
    })
    .await;
    assert!(
        added,
        "new file in the manifest directory not applied within 5 s"
    );
    expect_route(&sy, None, "/api/x", &b2, "/x").await;
    expect_route(&sy, None, "/web/a", &b1, "/a").await;

    // ...and removing it removes the service again.
    std::fs::remove_file(sy.manifest.join("extra.yaml")).unwrap();
    let removed = eventually(Duration::from_secs(5), || async {
        sy.get("/api/x").await.status == 404
    })
    .await;
    assert!(removed, "removed file still routed after 5 s");
    expect_route(&sy, None, "/web/a", &b1, "/a").await;
}

// 15 --------------------------------------------------------------------------

#[test]
fn dry_run_prints_json_with_entry_names() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.json");
    let objects = objs(
        vec![
            svc("web", 80),
            svc("api", 8080),
            svc("web", 80).ns("shop"),
            svc("cart", 9090).ns("shop"),
            svc("dnsy", 80)
                .named_ports(&[("http", 80)])
                .udp_port("dns", 53),
        ],
        vec![
            vec![slice("web", "", 18080), slice("api", "", 18081)],
            vec![slice("dnsy", "http", 18084)],
            vec![
                slice_ns("shop", "web", "", 18082),
                slice_ns("shop", "cart", "", 18083),
            ],
        ],
    );
    std::fs::write(&file, list_doc(&objects)).unwrap();
    let out = run_to_exit(&["--dry-run", "--manifests", file.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}; stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("dry-run stdout is not JSON ({e}):\n{stdout}"));
    let text = v.to_string();
    for name in [
        "\"web\"",
        "\"api:8080\"",
        "\"shop/web\"",
        "\"shop/cart:9090\"",
    ] {
        assert!(
            text.contains(name),
            "dry-run JSON lacks entry {name}:\n{stdout}"
        );
    }
    // Only TCP ports become entries.
    assert!(text.contains("\"dnsy\""), "{stdout}");
    assert!(
        !text.contains("dnsy:53"),
        "UDP port became an entry:\n{stdout}"
    );
    // Stable: a second run prints exactly the same thing.
    let again = run_to_exit(&["--dry-run", "--manifests", file.to_str().unwrap()]);
    assert_eq!(String::from_utf8_lossy(&again.stdout), stdout);
}

#[test]
fn dry_run_reads_a_directory_of_manifests() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("a.yaml"),
        multi_doc(&[svc("alpha", 80).into(), slice("alpha", "", 18090)]),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("b.yaml"),
        multi_doc(&[svc("beta", 81).into(), slice("beta", "", 18091)]),
    )
    .unwrap();
    let out = run_to_exit(&["--dry-run", "--manifests", dir.path().to_str().unwrap()]);
    assert!(
        out.status.success(),
        "stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}"));
    let text = v.to_string();
    assert!(
        text.contains("\"alpha\"") && text.contains("\"beta:81\""),
        "{stdout}"
    );
}

#[test]
fn bogus_flag_exits_2_with_one_line_error() {
    let out = run_to_exit(&["--bogus-flag"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr:\n{stderr}");
    let lines: Vec<&str> = stderr.trim().lines().collect();
    assert_eq!(lines.len(), 1, "stderr should be one line, got:\n{stderr}");
    assert!(!lines[0].trim().is_empty());
}

#[test]
fn version_flag_prints_version() {
    let out = run_to_exit(&["--version"]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(env!("CARGO_PKG_VERSION")), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_endpoints_objects_are_accepted() {
    let b1 = Backend::start("b1").await;
    let b2 = Backend::start("b2").await;
    let endpoints = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": "legacy"},
        "subsets": [
            {"addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": b1.port, "protocol": "TCP"}]},
            {"addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": b2.port, "protocol": "TCP"}]},
        ],
    });
    let sy = switchyard(vec![svc("legacy", 80).into(), endpoints])
        .start()
        .await;
    let counts = spread(&sy, "/legacy/e", 10).await;
    assert_eq!(
        counts,
        [("b1".to_string(), 5), ("b2".to_string(), 5)].into()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_health_and_readiness() {
    let b = Backend::start("b1").await;
    let sy = switchyard(objs(vec![svc("web", 80)], vec![slices("web", &[&b])]))
        .start()
        .await;
    assert_eq!(get(sy.admin_port, "/healthz", &[]).await.status, 200);
    assert_eq!(get(sy.admin_port, "/readyz", &[]).await.status, 200);
    // The admin server is not the data plane.
    expect_route(&sy, None, "/web", &b, "/").await;
}

// 16 --------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_serves_many_requests_on_one_connection() {
    let b1 = Backend::start("b1").await;
    let b2 = Backend::start("b2").await;
    let sy = switchyard(objs(
        vec![svc("web", 80), svc("api", 80)],
        vec![slices("web", &[&b1]), slices("api", &[&b2])],
    ))
    .start()
    .await;
    let mut conn = OneConn::open(sy.http_port).await;
    for i in 0..10 {
        let (path, want, uri) = if i % 2 == 0 {
            ("/web/k", "b1", "/k")
        } else {
            ("/api/k", "b2", "/k")
        };
        let r = conn
            .get(&format!("{path}?i={i}"), &[])
            .await
            .unwrap_or_else(|e| panic!("request #{i} on the same connection failed: {e}"));
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.backend().as_deref(), Some(want));
        assert_eq!(r.uri(), format!("{uri}?i={i}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_survives_unmatched_request() {
    let b1 = Backend::start("b1").await;
    let sy = switchyard(objs(vec![svc("web", 80)], vec![slices("web", &[&b1])]))
        .start()
        .await;
    let mut conn = OneConn::open(sy.http_port).await;
    assert_eq!(
        conn.get("/web", &[]).await.expect("first request").status,
        200
    );
    let r = conn
        .get("/nope", &[])
        .await
        .expect("404 on keep-alive conn");
    assert_eq!(r.status, 404, "{r:?}");
    let r = conn
        .get("/web/again", &[])
        .await
        .expect("request after a 404 on the same connection");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.uri(), "/again");
}

#[test]
fn keep_alive_with_curl_reuses_connection() {
    // Uses a plain std runtime for the backend.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let b = Backend::start("b1").await;
        let sy = switchyard(objs(vec![svc("web", 80)], vec![slices("web", &[&b])]))
            .start()
            .await;
        let urls: Vec<String> = (0..3).map(|i| sy.url(&format!("/web/c{i}"))).collect();
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new("curl")
                .args([
                    "-sS",
                    "-v",
                    "--max-time",
                    "10",
                    "-o",
                    "/dev/null",
                    "-o",
                    "/dev/null",
                    "-o",
                    "/dev/null",
                ])
                .args(&urls)
                .output()
                .expect("run curl")
        })
        .await
        .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "curl failed:\n{err}");
        assert!(
            err.contains("Re-using existing connection") || err.contains("Reusing existing"),
            "curl did not reuse the connection:\n{err}"
        );
        let uris: Vec<String> = b.requests().into_iter().map(|s| s.uri).collect();
        assert_eq!(uris, vec!["/c0", "/c1", "/c2"]);
    });
}

// Harness self-check (no switchyard): the test backend itself behaves as the
// other tests assume, so a failure above is switchyard's, not the harness's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harness_backend_self_check() {
    let mut b = Backend::start("b1").await;
    let r = get(b.port, "/a/b?c=d&e", &[("x-test", "1"), ("cookie", "a=1")]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.backend().as_deref(), Some("b1"));
    assert_eq!(r.uri(), "/a/b?c=d&e");
    assert_eq!(r.seen_header("X-Test").as_deref(), Some("1"));
    assert_eq!(r.seen_header("cookie").as_deref(), Some("a=1"));
    let mut conn = OneConn::open(b.port).await;
    for _ in 0..3 {
        assert_eq!(conn.get("/k", &[]).await.unwrap().status, 200);
    }
    ws_echo(&format!("ws://127.0.0.1:{}/ws", b.port)).await;
    assert_eq!(b.count(), 5);
    b.stop().await;
    assert!(
        conn.get("/k", &[]).await.is_err(),
        "keep-alive conn survived stop()"
    );
    assert!(
        try_request(b.port, "GET", "/", &[]).await.is_err(),
        "listener survived stop()"
    );
}

// Added with the core issue: flags and readiness ---------------------------------------------

/// A manifest that is broken at startup keeps /readyz at 503 (nothing is served half-built);
/// fixing the file makes the first table live and the process ready, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_until_a_good_manifest_loads() {
    let b1 = Backend::start("b1").await;
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("m.yaml");
    write_atomic(&manifest, "kind: Service\nmetadata: {name: [broken\n");
    let (http_port, admin_port) = (free_port(), free_port());
    let mut child = std::process::Command::new(bin())
        .arg("--manifests")
        .arg(&manifest)
        .args(["--bind-address", "127.0.0.1"])
        .args(["--http-port", &http_port.to_string()])
        .args(["--admin-port", &admin_port.to_string()])
        .args(["--stats-port", "0"])
        .env(EVERY_SERVICE_ROUTED.0, EVERY_SERVICE_ROUTED.1)
        .env("RUST_LOG", "error")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ready_status = || async {
        try_request(admin_port, "GET", "/readyz", &[])
            .await
            .map(|r| r.status)
    };
    assert!(
        eventually(Duration::from_secs(10), || async {
            ready_status().await == Ok(503)
        })
        .await,
        "admin should answer 503 while no table is live"
    );
    // A window in which readiness must not come: its absence cannot be awaited.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        ready_status().await,
        Ok(503),
        "still not ready after several polls"
    );
    write_atomic(
        &manifest,
        &multi_doc(&objs(vec![svc("web", 80)], vec![slices("web", &[&b1])])),
    );
    let ready = eventually(Duration::from_secs(10), || async {
        ready_status().await == Ok(200)
    })
    .await;
    let routed = get(http_port, "/web", &[]).await;
    let _ = child.kill();
    let _ = child.wait();
    assert!(ready, "fixing the manifest should make switchyard ready");
    assert_eq!(routed.backend().as_deref(), Some("b1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_service_serves_only_that_service() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let sy = switchyard(objs(
        vec![svc("a", 80), svc("b", 80)],
        vec![slices("a", &[&a]), slices("b", &[&b])],
    ))
    .args(&["--target-service", "b"])
    .start()
    .await;
    expect_404(&sy, None, "/a").await;
    expect_route(&sy, None, "/b/x", &b, "/x").await;
}

/// `--forward-services` sends to clusterIP:port (kube-proxy would balance from there), ignoring
/// the EndpointSlices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_services_uses_the_cluster_ip() {
    let vip = Backend::start("vip").await;
    let pod = Backend::start("pod").await;
    let mut service = svc("web", vip.port).to_value();
    service["spec"]["clusterIP"] = serde_json::json!("127.0.0.1");
    let mut all = vec![service];
    all.extend(slices("web", &[&pod]));
    let sy = switchyard(all).arg("--forward-services").start().await;
    let path = format!("/web:{}/x", vip.port);
    for _ in 0..4 {
        expect_route(&sy, None, &path, &vip, "/x").await;
    }
    // None of this test's requests reached the pod. (Only those: on a loaded machine another
    // test's health checks may reach a recycled port, which once failed a plain count.)
    let proxied: Vec<String> = pod
        .requests()
        .into_iter()
        .map(|r| r.uri)
        .filter(|u| u == "/x")
        .collect();
    assert!(proxied.is_empty(), "requests reached the pod: {proxied:?}");
}

/// `first` with `lb.maxconn: 1`: while the first endpoint holds one request, the next goes to
/// the second endpoint; once it is free, traffic returns to the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_moves_on_when_maxconn_is_reached() {
    let b1 = Backend::start("b1").await;
    let b2 = Backend::start("b2").await;
    // `first` orders endpoints by address: the lower port is first.
    let (lo, hi) = if b1.port < b2.port {
        (&b1, &b2)
    } else {
        (&b2, &b1)
    };
    let sy = switchyard(objs(
        vec![
            svc("web", 80)
                .algo("first")
                .ann("serviceloadbalancer/lb.maxconn", "1"),
        ],
        vec![slices("web", &[lo, hi])],
    ))
    .start()
    .await;
    let port = sy.http_port;
    // Any backend holds a `/slow` request for 1 s.
    let held = tokio::spawn(async move { get(port, "/web/slow", &[]).await });
    let holding = eventually(Duration::from_secs(5), || async { lo.count() == 1 }).await;
    assert!(holding, "the first endpoint never got the held request");
    let during = sy.get("/web").await;
    let held = held.await.unwrap();
    assert_eq!(held.backend().as_deref(), Some(lo.name.as_str()));
    assert_eq!(
        during.backend().as_deref(),
        Some(hi.name.as_str()),
        "the first endpoint was full"
    );
    let after = sy.get("/web").await;
    assert_eq!(
        after.backend().as_deref(),
        Some(lo.name.as_str()),
        "back to the first once free"
    );
}

/// An HTTP/2 client connection (cleartext, prior knowledge) to `port`, driven by its own task.
async fn h2c(
    port: u16,
) -> (
    hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>,
    tokio::task::JoinHandle<hyper::Result<()>>,
) {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let (sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    (sender, tokio::spawn(conn))
}

/// SIGTERM with an HTTP/2 stream in flight (the backend holds it 1 s; no shutdown delay): the
/// connection gets a GOAWAY, yet the stream is answered whole; then the connection ends and the
/// process exits within the grace period. Run by CI on both engines (the fast path's own
/// connection, and Pingora's with `--fast-path=false`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_http2_streams_in_flight_finish() {
    let held = Backend::start("held").await;
    let mut sy = switchyard(objs(vec![svc("web", 80)], vec![slices("web", &[&held])]))
        .args(&["--shutdown-delay", "0s", "--shutdown-grace", "5s"])
        .start()
        .await;
    let (mut sender, conn) = h2c(sy.http_port).await;
    let req = http::Request::get("http://web.test/web/slow")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let answer = tokio::spawn(sender.send_request(req));
    let in_flight = eventually(Duration::from_secs(5), || async { held.count() == 1 }).await;
    assert!(in_flight, "the held request never reached the backend");
    let signalled = Instant::now();
    let pid = sy.child.id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let resp = tokio::time::timeout(Duration::from_secs(5), answer)
        .await
        .expect("answered within the grace period")
        .unwrap()
        .expect("the stream in flight is answered, not refused");
    assert_eq!(resp.status(), 200);
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .expect("the body whole")
        .to_bytes();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["uri"], "/slow");
    // The GOAWAY came: the connection ends once its stream is done, without an error.
    let ended = tokio::time::timeout(Duration::from_secs(5), conn)
        .await
        .expect("the connection ends after its last stream")
        .unwrap();
    assert!(ended.is_ok(), "{ended:?}");
    let exited = poll(Duration::from_secs(10), Duration::from_millis(50), || {
        std::future::ready(sy.child.try_wait().unwrap())
    })
    .await
    .expect("exited within the grace period");
    assert!(exited.success(), "{exited}");
    assert!(
        signalled.elapsed() < Duration::from_secs(6),
        "{:?}",
        signalled.elapsed()
    );
}

/// HTTP/2 (cleartext, prior knowledge) carries the host in `:authority`, with no Host header:
/// host rules must match it all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_authority_is_matched_like_host() {
    let byhost = Backend::start("byhost").await;
    let other = Backend::start("other").await;
    let sy = switchyard(objs(
        vec![svc("web", 80).host("foo.example.com"), svc("other", 80)],
        vec![slices("web", &[&byhost]), slices("other", &[&other])],
    ))
    .start()
    .await;
    let (mut sender, _conn) = h2c(sy.http_port).await;
    let mut seen = Vec::new();
    for uri in [
        "http://FOO.example.com:8080/a?b",
        "http://elsewhere.example.org/other/x",
    ] {
        let req = http::Request::get(uri)
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        assert!(req.headers().get("host").is_none());
        let resp = tokio::time::timeout(Duration::from_secs(10), sender.send_request(req))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(resp.version(), http::Version::HTTP_2);
        assert_eq!(resp.status(), 200, "{uri}");
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap()
            .to_bytes();
        let v: Value = serde_json::from_slice(&body).unwrap();
        seen.push((
            v["backend"].as_str().unwrap_or("").to_string(),
            v["uri"].as_str().unwrap_or("").to_string(),
        ));
    }
    assert_eq!(
        seen[0],
        ("byhost".to_string(), "/a?b".to_string()),
        "routed by :authority, unstripped"
    );
    assert_eq!(
        seen[1],
        ("other".to_string(), "/x".to_string()),
        "no host rule: path route"
    );
}

/// Dot-segments are removed before routing (RFC 3986 §5.2.4, `%2e` read as a dot) and the
/// backend gets the path that was routed, on both engines: `/api/../admin/x` can neither reach
/// the `api` backend nor arrive anywhere as `/api/../admin/x`.
#[tokio::test]
async fn dot_segments_are_removed_before_routing_and_forwarding() {
    let api = Backend::start("api").await;
    let admin = Backend::start("admin").await;
    let world = objs(
        vec![svc("api", 80).acl("/api"), svc("admin", 80)],
        vec![slices("api", &[&api]), slices("admin", &[&admin])],
    );
    for engine in [&[][..], &["--fast-path", "false"][..]] {
        let sy = switchyard(world.clone()).args(engine).start().await;
        for (path, backend, seen) in [
            ("/api/../admin/x", "admin", "/x"),
            ("/api/%2e%2e/admin/x?q=1", "admin", "/x?q=1"),
            ("/api/./v1", "api", "/api/v1"),
            ("/api/v1/../v2", "api", "/api/v2"),
            ("/../../api/v1", "api", "/api/v1"),
        ] {
            let r = sy.get(path).await;
            assert_eq!(r.status, 200, "{engine:?} {path}");
            assert_eq!(r.backend().as_deref(), Some(backend), "{engine:?} {path}");
            assert_eq!(r.uri(), seen, "{engine:?} {path}");
        }
    }
}

/// Without work stealing (`--work-stealing false`: a runtime and an epoll per thread) an HTTP
/// connection placed on another thread than the one that accepted it is registered with that
/// thread's epoll, not left with the accepting thread's reactor relaying its readiness for its
/// whole life (Pingora 0.9.1 left it; a change in the vendored core, vendor/README.md). Sixteen
/// keep-alive connections, each placed at random on one of two threads: some are in an epoll
/// other than the listener's (all sixteen on the accepting thread: one chance in 65,536).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_served_by_their_threads_reactor_without_work_stealing() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let b = Backend::start("b").await;
    let sy = switchyard(objs(vec![svc("web", 80)], vec![slices("web", &[&b])]))
        .args(&["--threads", "2", "--work-stealing", "false"])
        .start()
        .await;
    let mut conns = Vec::new();
    for _ in 0..16 {
        let mut c = tokio::net::TcpStream::connect(("127.0.0.1", sy.http_port))
            .await
            .unwrap();
        c.write_all(b"GET /web/ HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        // The response's start is enough: the connection has been placed and served.
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
                .await
                .expect("an answer within 5 s")
                .unwrap();
            assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        assert!(
            got.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&got)
        );
        conns.push(c);
    }
    let (listener, accepted) = epolls_of_port(sy.child.id(), sy.http_port);
    assert_eq!(listener.len(), 1, "the listener in one epoll: {listener:?}");
    assert_eq!(
        accepted.len(),
        16,
        "each connection in one epoll: {accepted:?}"
    );
    let elsewhere = accepted.iter().filter(|&&e| e != listener[0]).count();
    assert!(
        elsewhere > 0,
        "all 16 connections' readiness is served by the accepting thread's epoll {}",
        listener[0]
    );
}

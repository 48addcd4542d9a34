//! End-to-end checks of what a user migrating from the original service-loadbalancer meets
//! (docs/migration.md): the path-ownership rule, `lb.host` with a port or several names,
//! `lb.aclMatch` with `-i`, and `GET /healthz` on the traffic port. Each runs on both HTTP
//! engines (the fast path and Pingora's), since both apply the same routing decision.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::Value;

/// The home Service `default/shop` owns `/shop/...`; the Service `web` in a namespace named
/// `shop` (route `/shop/web`) cannot take it, whichever object comes first in the manifests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_named_like_a_home_service_cannot_take_its_paths() {
    let home = Backend::start("home").await;
    let intruder = Backend::start("intruder").await;
    let objects = [
        vec![svc("shop", 80).into(), slice("shop", "", home.port)],
        vec![
            svc("web", 80).ns("shop").into(),
            slice_ns("shop", "web", "", intruder.port),
        ],
    ];
    for (order, engine) in [(0, "true"), (1, "false")] {
        let objs: Vec<Value> = if order == 0 {
            objects.concat()
        } else {
            objects.iter().rev().flatten().cloned().collect()
        };
        let sy = switchyard_on(objs, engine, &[]).await;
        expect_route(&sy, None, "/shop/web/x", &home, "/web/x").await;
        expect_route(&sy, None, "/shop/web", &home, "/web").await;
        assert_eq!(intruder.count(), 0, "order {order}");
        let log = sy.stderr();
        assert!(
            log.lines().any(|l| l.contains("RouteConflict")
                && l.contains("/shop/web")
                && l.contains("default/shop")),
            "the loser is warned about, naming both:\n{log}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_with_a_port_matches_only_that_port() {
    let shop = Backend::start("shop").await;
    let objs = vec![
        svc("shop", 80).host("shop.example.com:8080").into(),
        slice("shop", "", shop.port),
    ];
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &[]).await;
        expect_route(&sy, Some("shop.example.com:8080"), "/a", &shop, "/a").await;
        expect_route(&sy, Some("SHOP.example.com.:8080"), "/a", &shop, "/a").await;
        assert_eq!(sy.get_host("shop.example.com", "/a").await.status, 404);
        assert_eq!(sy.get_host("shop.example.com:8081", "/a").await.status, 404);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_hosts_in_one_annotation_each_route() {
    let m = Backend::start("m").await;
    let objs = vec![
        svc("m", 80)
            .host("m1.example.com m2.example.com not_a_host")
            .into(),
        slice("m", "", m.port),
    ];
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &[]).await;
        expect_route(&sy, Some("m1.example.com"), "/p", &m, "/p").await;
        expect_route(&sy, Some("m2.example.com"), "/p", &m, "/p").await;
        assert_eq!(sy.get_host("m3.example.com", "/p").await.status, 404);
        let log = sy.stderr();
        assert!(
            log.contains("not_a_host"),
            "the bad name is warned about:\n{log}"
        );
    }
}

/// The original README's own example, `-i /test`: a case-insensitive prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_match_dash_i_ignores_case() {
    let t = Backend::start("t").await;
    let objs = vec![svc("t", 80).acl("-i /test").into(), slice("t", "", t.port)];
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &[]).await;
        expect_route(&sy, None, "/test/a", &t, "/test/a").await;
        expect_route(&sy, None, "/TeSt/a", &t, "/TeSt/a").await;
        assert_eq!(sy.get("/testing").await.status, 404);
    }
}

/// An aclMatch on another Service's path route loses it, with a warning naming both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_match_cannot_take_another_services_path_route() {
    let web = Backend::start("web").await;
    let greedy = Backend::start("greedy").await;
    let objs = vec![
        svc("web", 80).into(),
        slice("web", "", web.port),
        // Sorts before `web`: without the rule it would win `/web` by name.
        svc("aaa", 80).acl("/web /web/admin /greedy").into(),
        slice("aaa", "", greedy.port),
    ];
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &[]).await;
        expect_route(&sy, None, "/web/x", &web, "/x").await;
        expect_route(&sy, None, "/web/admin", &web, "/admin").await;
        expect_route(&sy, None, "/greedy/x", &greedy, "/greedy/x").await;
        let log = sy.stderr();
        let conflicts = log
            .lines()
            .filter(|l| l.contains("RouteConflict") && l.contains("default/web"))
            .count();
        assert_eq!(conflicts, 2, "one warning per lost prefix:\n{log}");
    }
}

/// `GET /healthz` on the traffic port answers `200 ok` unless a Service claims it or
/// `--traffic-healthz false`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_on_the_traffic_port() {
    let claims = Backend::start("claims").await;
    for engine in ENGINES {
        let sy = switchyard_on(vec![], engine, &[]).await;
        let r = sy.get("/healthz").await;
        assert_eq!((r.status, r.body.as_str()), (200, "ok"), "{engine}");
        assert_eq!(
            r.header("content-type").as_deref(),
            Some("text/plain; charset=utf-8")
        );
        assert_eq!(sy.get("/healthz/x").await.status, 404);
        assert_eq!(sy.get_host("any.example.com", "/healthz").await.status, 200);
        drop(sy);

        let sy = switchyard_on(vec![], engine, &["--traffic-healthz", "false"]).await;
        assert_eq!(sy.get("/healthz").await.status, 404, "{engine}");
        drop(sy);

        let objs = vec![
            svc("claims", 80).acl("/healthz").into(),
            slice("claims", "", claims.port),
        ];
        let sy = switchyard_on(objs, engine, &[]).await;
        expect_route(&sy, None, "/healthz", &claims, "/healthz").await;
    }
}

/// The original kept serving its last configuration when no Service had endpoints left; the
/// table follows the objects: a Service without endpoints answers 503, and once no Service is
/// left nothing is routed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_follows_the_objects_down_to_none() {
    let web = Backend::start("web").await;
    let sy = switchyard_on(
        vec![svc("web", 80).into(), slice("web", "", web.port)],
        "true",
        &[],
    )
    .await;
    expect_route(&sy, None, "/web/a", &web, "/a").await;
    sy.rewrite(&[svc("web", 80).into()]);
    let unavailable = eventually(std::time::Duration::from_secs(5), || async {
        sy.get("/web/a").await.status == 503
    })
    .await;
    assert!(unavailable, "no endpoints: 503 within 5 s");
    sy.rewrite(&[]);
    let gone = eventually(std::time::Duration::from_secs(5), || async {
        sy.get("/web/a").await.status == 404
    })
    .await;
    assert!(gone, "no Services: no routes within 5 s");
}

/// `--dry-run --migration-preview` lists, as JSON, the requests the original would have answered
/// differently: here `/api/x` (the original's un-namespaced route) and `/webshop` (its raw
/// prefix), and nothing for `/web/x`, which both route alike.
#[test]
fn the_migration_preview_lists_what_the_original_did_differently() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.yaml");
    let objs: Vec<Value> = vec![
        svc("web", 80).into(),
        slice("web", "", 8080),
        svc("api", 80).ns("team").into(),
        slice_ns("team", "api", "", 8080),
    ];
    std::fs::write(&file, multi_doc(&objs)).unwrap();
    let out = run_to_exit(&[
        "--dry-run",
        "--migration-preview",
        "--manifests",
        file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let diffs: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let at = |path: &str| {
        diffs
            .iter()
            .find(|d| d["path"] == path && d["host"].is_null())
    };
    let api = at("/api/x").expect("/api/x differs");
    assert_eq!(api["original"]["proxied"]["service"], "team/api:80");
    assert_eq!(api["switchyard"]["answered"]["status"], 404);
    let shop = at("/webx").expect("/webx differs");
    assert_eq!(shop["original"]["proxied"]["path"], "/x");
    assert!(at("/web/x").is_none(), "{diffs:#?}");
    let bad = run_to_exit(&["--migration-preview", "--manifests", file.to_str().unwrap()]);
    assert_eq!(bad.status.code(), Some(2), "needs --dry-run");
}

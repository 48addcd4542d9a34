//! End-to-end checks of Ingress v1 (docs/ingress.md) in offline mode, through real sockets
//! on both HTTP engines: rules by host and path type, the default backend, the per-Ingress
//! annotations (rewrite target, source ranges), certificates from TLS Secrets chosen by SNI
//! with plain HTTP redirected, and a bad Ingress that affects only itself.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod tls_client;

use std::time::Duration;

use common::*;
use serde_json::Value;
use tls_client::{Ca, sni};
use tokio::net::TcpStream;

/// Services `web` (port 80) and `api` (port 8080), each with one backend.
fn services(web: &Backend, api: &Backend) -> Vec<Value> {
    vec![
        svc("web", 80).into(),
        slice("web", "", web.port),
        svc("api", 8080).into(),
        slice("api", "", api.port),
        ingress_class("switchyard", false),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_route_by_host_and_path_type() {
    let web = Backend::start("web").await;
    let api = Backend::start("api").await;
    let mut objs = services(&web, &api);
    objs.push(
        ing("shop")
            .rule(
                Some("shop.example.com"),
                &[
                    ("/", "Prefix", "web", 80),
                    ("/api", "Prefix", "api", 8080),
                    ("/exact", "Exact", "api", 8080),
                ],
            )
            .rule(Some("*.apps.example.com"), &[("/", "Prefix", "api", 8080)])
            .into(),
    );
    // Another controller's Ingress for the same host is not ours: ignored.
    objs.push(
        ing("theirs")
            .class(Some("nginx"))
            .rule(
                Some("shop.example.com"),
                &[("/theirs", "Prefix", "api", 8080)],
            )
            .into(),
    );
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &[]).await;
        let shop = Some("shop.example.com");
        expect_route(&sy, shop, "/", &web, "/").await;
        expect_route(&sy, shop, "/api", &api, "/api").await;
        expect_route(&sy, shop, "/api/v1/x?q=1", &api, "/api/v1/x?q=1").await;
        expect_route(&sy, shop, "/apix", &web, "/apix").await;
        expect_route(&sy, shop, "/exact", &api, "/exact").await;
        expect_route(&sy, shop, "/exact/more", &web, "/exact/more").await;
        expect_route(&sy, shop, "/theirs", &web, "/theirs").await;
        expect_route(&sy, Some("one.apps.example.com"), "/z", &api, "/z").await;
        let deep = sy.get_host("two.one.apps.example.com", "/z").await;
        assert_eq!(
            deep.status, 404,
            "a wildcard matches one label only ({engine})"
        );
        assert_eq!(sy.get_host("other.example.com", "/").await.status, 404);
        // The Service-annotation mode keeps working beside Ingresses.
        expect_route(&sy, None, "/web/x", &web, "/x").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_backend_and_a_missing_service() {
    let web = Backend::start("web").await;
    let api = Backend::start("api").await;
    let mut objs = services(&web, &api);
    objs.push(
        ing("site")
            .rule(
                Some("site.test"),
                &[
                    ("/api", "Prefix", "api", 8080),
                    ("/gone", "Prefix", "nosuch", 80),
                ],
            )
            .default_backend("web", 80)
            .into(),
    );
    // ingress-nginx's `default-backend` annotation: the Ingress's routes whose Service has no
    // endpoint (here none at all, or a Service that does not exist) are answered by it.
    objs.push(svc("empty", 80).into());
    objs.push(
        ing("fallback")
            .ann("nginx.ingress.kubernetes.io/default-backend", "api")
            .rule(
                Some("fb.test"),
                &[
                    ("/empty", "Prefix", "empty", 80),
                    ("/missing", "Prefix", "nosuch", 80),
                    ("/web", "Prefix", "web", 80),
                ],
            )
            .into(),
    );
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &[]).await;
        expect_route(&sy, Some("site.test"), "/api/x", &api, "/api/x").await;
        expect_route(&sy, Some("site.test"), "/other", &web, "/other").await;
        expect_route(&sy, Some("anything.test"), "/", &web, "/").await;
        let r = sy.get_host("site.test", "/gone").await;
        assert_eq!(r.status, 503, "a missing Service answers 503 ({engine})");
        expect_route(&sy, Some("fb.test"), "/empty/x", &api, "/empty/x").await;
        expect_route(&sy, Some("fb.test"), "/missing", &api, "/missing").await;
        // A Service with endpoints serves its own requests.
        expect_route(&sy, Some("fb.test"), "/web/x", &web, "/web/x").await;
        let log = sy.stderr();
        assert!(
            log.contains("Ingress default/site") && log.contains("default/nosuch does not exist"),
            "{log}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrite_target_and_source_ranges() {
    let web = Backend::start("web").await;
    let api = Backend::start("api").await;
    let mut objs = services(&web, &api);
    objs.push(
        ing("strip")
            .ann("switchyard.io/rewrite-target", "/")
            .rule(Some("r.test"), &[("/app", "Prefix", "web", 80)])
            .into(),
    );
    objs.push(
        ing("v2")
            .ann("nginx.ingress.kubernetes.io/rewrite-target", "/v2/")
            .rule(Some("r.test"), &[("/old", "Prefix", "api", 8080)])
            .into(),
    );
    objs.push(
        ing("office")
            .ann("switchyard.io/allowlist-source-range", "10.0.0.0/8")
            .rule(Some("office.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    );
    objs.push(
        ing("local")
            .ann(
                "nginx.ingress.kubernetes.io/whitelist-source-range",
                "127.0.0.1/32",
            )
            .ann("switchyard.io/denylist-source-range", "127.0.0.2")
            .rule(Some("local.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    );
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &[]).await;
        expect_route(&sy, Some("r.test"), "/app/x?y=1", &web, "/x?y=1").await;
        expect_route(&sy, Some("r.test"), "/app", &web, "/").await;
        // ingress-nginx's rewrite-target replaces the whole path (nginx's `rewrite`), the
        // query kept; switchyard's own key replaces the matched prefix.
        expect_route(&sy, Some("r.test"), "/old/a/b", &api, "/v2/").await;
        expect_route(&sy, Some("r.test"), "/old?q=1", &api, "/v2/?q=1").await;
        let before = web.count();
        let r = sy.get_host("office.test", "/").await;
        assert_eq!(r.status, 403, "127.0.0.1 is outside 10.0.0.0/8 ({engine})");
        assert_eq!(web.count(), before, "a refused request reaches no backend");
        expect_route(&sy, Some("local.test"), "/p", &web, "/p").await;
    }
}

/// ingress-nginx's regular-expression paths and rewrites, on both engines: its canonical
/// `use-regex` + `rewrite-target: /$2` example, its path-priority example (every path of a
/// host whose Ingress asks for regular expressions is one, case ignored, the longest first),
/// a target with a query of its own, and a path that is not a valid expression skipped
/// alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regex_paths_and_capture_group_rewrites_as_ingress_nginx() {
    let web = Backend::start("web").await;
    let api = Backend::start("api").await;
    let mut objs = services(&web, &api);
    objs.push(
        ing("rewrite")
            .ann("nginx.ingress.kubernetes.io/use-regex", "true")
            .ann("nginx.ingress.kubernetes.io/rewrite-target", "/$2")
            .rule(
                Some("rewrite.bar.com"),
                &[("/something(/|$)(.*)", "ImplementationSpecific", "web", 80)],
            )
            .into(),
    );
    // ingress-nginx's docs/user-guide/ingress-path-matching.md: two Ingresses, one host.
    objs.push(
        ing("test-ingress-1")
            .rule(
                Some("test.com"),
                &[
                    ("/foo/bar", "Prefix", "web", 80),
                    ("/foo/bar/", "Prefix", "api", 8080),
                ],
            )
            .into(),
    );
    objs.push(
        ing("test-ingress-2")
            .ann("nginx.ingress.kubernetes.io/rewrite-target", "/$1")
            .rule(
                Some("test.com"),
                &[("/foo/bar/(.+)", "ImplementationSpecific", "web", 80)],
            )
            .into(),
    );
    objs.push(
        ing("query")
            .ann(
                "nginx.ingress.kubernetes.io/rewrite-target",
                "/search?from=ingress",
            )
            .rule(Some("q.test"), &[("/s", "Prefix", "api", 8080)])
            .into(),
    );
    objs.push(
        ing("bad")
            .ann("nginx.ingress.kubernetes.io/use-regex", "true")
            .rule(
                Some("bad.test"),
                &[
                    ("/ok/[0-9]+", "ImplementationSpecific", "web", 80),
                    ("/broken(", "ImplementationSpecific", "api", 8080),
                ],
            )
            .into(),
    );
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &[]).await;
        let rw = Some("rewrite.bar.com");
        expect_route(&sy, rw, "/something", &web, "/").await;
        expect_route(&sy, rw, "/something/", &web, "/").await;
        expect_route(&sy, rw, "/something/new", &web, "/new").await;
        expect_route(&sy, rw, "/SomeThing/new/x?y=1", &web, "/new/x?y=1").await;
        let r = sy.get_host("rewrite.bar.com", "/somethingelse").await;
        assert_eq!(r.status, 404, "{engine}: {r:?}");

        let t = Some("test.com");
        expect_route(&sy, t, "/foo/bar/1", &web, "/1").await;
        expect_route(&sy, t, "/foo/bar/", &api, "/foo/bar/").await;
        expect_route(&sy, t, "/foo/bar", &web, "/foo/bar").await;
        // Case ignored on the Ingress that asked for nothing, as nginx's `~*` does.
        expect_route(&sy, t, "/FOO/Bar", &web, "/FOO/Bar").await;

        expect_route(
            &sy,
            Some("q.test"),
            "/s/x?q=1",
            &api,
            "/search?from=ingress&q=1",
        )
        .await;
        expect_route(&sy, Some("q.test"), "/S", &api, "/search?from=ingress").await;

        expect_route(&sy, Some("bad.test"), "/ok/12", &web, "/ok/12").await;
        let r = sy.get_host("bad.test", "/broken(").await;
        assert_eq!(
            r.status, 404,
            "{engine}: an invalid path is not served: {r:?}"
        );
    }
}

/// ingress-nginx's canaries on both engines: by header (`always` / `never`), by header value,
/// by cookie, by weight; a canary older than its main Ingress is still only the canary, and
/// one without a main Ingress is not served at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canaries_take_their_share_and_never_the_main_route() {
    let web = Backend::start("web").await;
    let api = Backend::start("api").await;
    let mut objs = services(&web, &api);
    objs.push(
        ing("main")
            .created("2026-06-01T00:00:00Z")
            .rule(Some("c.test"), &[("/", "Prefix", "web", 80)])
            .rule(Some("w.test"), &[("/app", "Prefix", "web", 80)])
            .into(),
    );
    // Older than its main Ingress, which before took it every request.
    objs.push(
        ing("canary")
            .created("2026-01-01T00:00:00Z")
            .ann("nginx.ingress.kubernetes.io/canary", "true")
            .ann("nginx.ingress.kubernetes.io/canary-by-header", "X-Canary")
            .ann("nginx.ingress.kubernetes.io/canary-by-cookie", "canary")
            .rule(Some("c.test"), &[("/", "Prefix", "api", 8080)])
            .into(),
    );
    objs.push(
        ing("weighted")
            .ann("nginx.ingress.kubernetes.io/canary", "true")
            .ann("nginx.ingress.kubernetes.io/canary-weight", "30")
            .ann("nginx.ingress.kubernetes.io/canary-weight-total", "60")
            .ann("nginx.ingress.kubernetes.io/canary-by-header", "x-env")
            .ann("nginx.ingress.kubernetes.io/canary-by-header-value", "v2")
            .rule(Some("w.test"), &[("/app", "Prefix", "api", 8080)])
            .into(),
    );
    objs.push(
        ing("orphan")
            .ann("nginx.ingress.kubernetes.io/canary", "true")
            .ann("nginx.ingress.kubernetes.io/canary-weight", "100")
            .rule(Some("orphan.test"), &[("/", "Prefix", "api", 8080)])
            .into(),
    );
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &[]).await;
        let to = |r: &Resp| r.backend().unwrap_or_default();
        let get = |headers: &'static [(&'static str, &'static str)]| {
            let mut all = vec![("host", "c.test")];
            all.extend_from_slice(headers);
            let port = sy.http_port;
            async move { get(port, "/x", &all).await }
        };
        for _ in 0..5 {
            assert_eq!(to(&get(&[]).await), "web", "{engine}: weight 0, the main");
        }
        assert_eq!(to(&get(&[("x-canary", "always")]).await), "api", "{engine}");
        assert_eq!(
            to(&get(&[("X-Canary", "never"), ("cookie", "canary=always")]).await),
            "web"
        );
        assert_eq!(
            to(&get(&[("x-canary", "maybe"), ("cookie", "a=1; canary=always")]).await),
            "api"
        );
        assert_eq!(
            to(&get(&[("cookie", "canary=never")]).await),
            "web",
            "{engine}"
        );
        let r = get(&[("x-canary", "always")]).await;
        assert_eq!(
            r.uri(),
            "/x",
            "{engine}: the canary gets the request as sent"
        );

        // 30 of 60: exactly half of each run of 60 requests, spread over it.
        let mut canary = 0;
        for i in 0..60 {
            let r = get_host_path(&sy, "w.test", "/app/1", &[]).await;
            assert_eq!(r.status, 200, "{engine}: {r:?}");
            canary += usize::from(to(&r) == "api");
            if i == 9 {
                assert!(
                    (2..=8).contains(&canary),
                    "{engine}: spread, {canary} of 10"
                );
            }
        }
        assert_eq!(canary, 30, "{engine}");
        // With a header value only that value chooses by header (`always` is just a value).
        for _ in 0..3 {
            let r = get_host_path(&sy, "w.test", "/app/1", &[("x-env", "v2")]).await;
            assert_eq!(to(&r), "api", "{engine}");
        }

        let r = sy.get_host("orphan.test", "/").await;
        assert_eq!(
            r.status, 404,
            "{engine}: a canary alone is never the main route: {r:?}"
        );
    }
}

async fn get_host_path(sy: &Switchyard, host: &str, path: &str, more: &[(&str, &str)]) -> Resp {
    let mut headers = vec![("host", host)];
    headers.extend_from_slice(more);
    get(sy.http_port, path, &headers).await
}

/// ingress-nginx's basic authentication on both engines: the realm's challenge with 401, a
/// user of the htpasswd Secret (Apache MD5 and bcrypt hashes) served without its credentials
/// reaching the backend, and the cases that cannot be checked failing closed (a missing
/// Secret, digest authentication): 403, nothing reaches the backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_authentication_as_ingress_nginx() {
    use base64::Engine as _;
    let web = Backend::start("web").await;
    let api = Backend::start("api").await;
    let mut objs = services(&web, &api);
    objs.push(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "basic-auth", "namespace": "default"},
        "type": "Opaque",
        "stringData": {"auth": "alice:$apr1$saltsalt$11QAx5Oiaores.cTy1Ple.\n\
            bob:$2a$04$UuTkLRZZ6QofpDOlMz32MuuxEHA43WOemOYHPz6.SjsVsyO1tDU96\n"}
    }));
    let auth = |i: Ing, secret: &str| {
        i.ann("nginx.ingress.kubernetes.io/auth-type", "basic")
            .ann("nginx.ingress.kubernetes.io/auth-secret", secret)
            .ann(
                "nginx.ingress.kubernetes.io/auth-realm",
                "Authentication Required - alice",
            )
    };
    objs.push(
        auth(ing("private"), "basic-auth")
            .rule(Some("auth.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    );
    objs.push(
        auth(ing("lost"), "no-such-secret")
            .rule(Some("lost.test"), &[("/", "Prefix", "api", 8080)])
            .into(),
    );
    objs.push(
        ing("digest")
            .ann("nginx.ingress.kubernetes.io/auth-type", "digest")
            .ann("nginx.ingress.kubernetes.io/auth-secret", "basic-auth")
            .rule(Some("digest.test"), &[("/", "Prefix", "api", 8080)])
            .into(),
    );
    let basic = |user_pass: &str| {
        let b64 = base64::engine::general_purpose::STANDARD.encode(user_pass);
        format!("Basic {b64}")
    };
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &[]).await;
        let ask = |host: &'static str, authorization: Option<String>| {
            let port = sy.http_port;
            async move {
                let mut headers = vec![("host", host.to_string())];
                if let Some(a) = authorization {
                    headers.push(("authorization", a));
                }
                let headers: Vec<(&str, &str)> =
                    headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
                get(port, "/x?y=1", &headers).await
            }
        };
        let before = web.count();
        for refused in [
            None,
            Some(basic("alice:wrong")),
            Some(basic("eve:p@ss word")),
        ] {
            let r = ask("auth.test", refused.clone()).await;
            assert_eq!(r.status, 401, "{engine} {refused:?}: {r:?}");
            assert_eq!(
                r.header("www-authenticate").as_deref(),
                Some("Basic realm=\"Authentication Required - alice\""),
                "{engine}"
            );
        }
        assert_eq!(
            web.count(),
            before,
            "{engine}: a refused request reached the backend"
        );
        for user in ["alice:p@ss word", "bob:password"] {
            let r = ask("auth.test", Some(basic(user))).await;
            assert_eq!(r.status, 200, "{engine} {user}: {r:?}");
            assert_eq!(r.uri(), "/x?y=1");
            assert_eq!(
                r.seen_header("authorization"),
                None,
                "{engine}: the credentials are switchyard's, not the backend's"
            );
        }
        let before = api.count();
        for host in ["lost.test", "digest.test"] {
            let r = ask(host, Some(basic("alice:p@ss word"))).await;
            assert_eq!(r.status, 403, "{engine} {host}: fails closed: {r:?}");
        }
        assert_eq!(api.count(), before, "{engine}");
    }
}

/// The authentication service of `external_authentication_as_ingress_nginx`: `Bearer good`
/// is let through as user `ann` (with a cookie to refresh), `Bearer banned` is forbidden,
/// `Bearer broken` breaks it (502), anything else must sign in (401 with a challenge).
fn authenticate(head: &str, _body: &[u8]) -> (Vec<u8>, bool) {
    let lower = head.to_ascii_lowercase();
    let answer = if lower.contains("\r\nauthorization: bearer good\r\n") {
        "HTTP/1.1 200 OK\r\nx-user: ann\r\nset-cookie: refreshed=1\r\ncontent-length: 0\r\n\r\n"
    } else if lower.contains("\r\nauthorization: bearer banned\r\n") {
        "HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n"
    } else if lower.contains("\r\nauthorization: bearer broken\r\n") {
        "HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n"
    } else {
        "HTTP/1.1 401 Unauthorized\r\nwww-authenticate: Bearer realm=\"test\"\r\ncontent-length: 0\r\n\r\n"
    };
    (answer.as_bytes().to_vec(), false)
}

/// ingress-nginx's external authentication on both engines, against a real service on
/// 127.0.0.1 named by its Service's cluster name: a request is proxied only after a `2xx`,
/// with the `auth-response-headers` the service vouched for (a client's own copy never
/// passes) and its cookie; 401 is passed on with the service's challenge, or sent to
/// `auth-signin` with the way back; 403 is passed on; a broken or unreachable service is a
/// 500, and nothing reaches the backend unless allowed. The subrequest carries the client's
/// fields and `X-Original-URL`/`-Method`, never its body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_authentication_as_ingress_nginx() {
    let web = Backend::start("web").await;
    let api = Backend::start("api").await;
    let authn = Backend::builder("authn")
        .behaviour(Behaviour::Scripted(authenticate))
        .start()
        .await;
    let mut objs = services(&web, &api);
    objs.push(svc("authn", 4180).ns("auth").into());
    objs.push(slice_ns("auth", "authn", "", authn.port));
    let dead = DeadPort::new();
    let url = "http://authn.auth.svc.cluster.local:4180/check?from=ingress";
    objs.push(
        ing("guarded")
            .ann("nginx.ingress.kubernetes.io/auth-url", url)
            .ann(
                "nginx.ingress.kubernetes.io/auth-response-headers",
                "X-User, X-Groups",
            )
            .rule(Some("app.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    );
    objs.push(
        ing("signin")
            .ann("nginx.ingress.kubernetes.io/auth-url", url)
            .ann(
                "nginx.ingress.kubernetes.io/auth-signin",
                "https://login.test/start",
            )
            .rule(Some("signin.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    );
    // Answers kept per Authorization field: 200 and 401 for a minute, 403 never.
    objs.push(
        ing("cached")
            .ann("nginx.ingress.kubernetes.io/auth-url", url)
            .ann(
                "nginx.ingress.kubernetes.io/auth-cache-key",
                "$http_authorization",
            )
            .ann(
                "nginx.ingress.kubernetes.io/auth-cache-duration",
                "200 401 1m",
            )
            .ann(
                "nginx.ingress.kubernetes.io/auth-response-headers",
                "X-User",
            )
            .rule(Some("cached.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    );
    let unreachable = format!("http://127.0.0.1:{}/check", dead.port);
    objs.push(
        ing("unreachable")
            .ann("nginx.ingress.kubernetes.io/auth-url", &unreachable)
            .rule(Some("down.test"), &[("/", "Prefix", "api", 8080)])
            .into(),
    );
    // A URL switchyard cannot reach without resolving a name: not served, never open.
    objs.push(
        ing("by-name")
            .ann(
                "nginx.ingress.kubernetes.io/auth-url",
                "https://auth.example.com/check",
            )
            .rule(Some("name.test"), &[("/", "Prefix", "api", 8080)])
            .into(),
    );
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &[]).await;
        let ask = |host: &'static str,
                   token: Option<&'static str>,
                   more: &[(&'static str, &'static str)]| {
            let port = sy.http_port;
            let mut headers = vec![("host", host.to_string())];
            if let Some(t) = token {
                headers.push(("authorization", format!("Bearer {t}")));
            }
            headers.extend(more.iter().map(|(k, v)| (*k, v.to_string())));
            async move {
                let headers: Vec<(&str, &str)> =
                    headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
                get(port, "/x?y=1", &headers).await
            }
        };
        let served = web.count();
        authn.take_requests();
        let r = ask(
            "app.test",
            Some("good"),
            &[("x-user", "root"), ("x-groups", "admins")],
        )
        .await;
        assert_eq!(r.status, 200, "{engine}: {r:?}");
        assert_eq!(r.uri(), "/x?y=1", "{engine}");
        assert_eq!(r.seen_header("x-user").as_deref(), Some("ann"), "{engine}");
        assert_eq!(
            r.seen_header("x-groups"),
            None,
            "{engine}: the service vouched for no groups; the client's own must not pass"
        );
        assert_eq!(
            r.header("set-cookie").as_deref(),
            Some("refreshed=1"),
            "{engine}"
        );
        let asked = authn.take_requests();
        assert_eq!(asked.len(), 1, "{engine}: one subrequest: {asked:?}");
        let sub = &asked[0];
        assert_eq!(
            (sub.method.as_str(), sub.uri.as_str()),
            ("GET", "/check?from=ingress"),
            "{engine}"
        );
        assert_eq!(
            sub.header("host").as_deref(),
            Some("authn.auth.svc.cluster.local:4180"),
            "{engine}"
        );
        assert_eq!(
            sub.header("x-original-url").as_deref(),
            Some("http://app.test/x?y=1"),
            "{engine}"
        );
        assert_eq!(sub.header("x-original-method").as_deref(), Some("GET"));
        assert_eq!(
            sub.header("x-auth-request-redirect").as_deref(),
            Some("/x?y=1")
        );
        assert_eq!(sub.header("authorization").as_deref(), Some("Bearer good"));
        assert_eq!(sub.header("x-real-ip").as_deref(), Some("127.0.0.1"));
        assert_eq!(sub.header("content-length"), None, "{engine}");
        assert_eq!(web.count(), served + 1, "{engine}");

        // Denials: nothing reaches the backend.
        let served = web.count();
        let r = ask("app.test", None, &[]).await;
        assert_eq!(r.status, 401, "{engine}: {r:?}");
        assert_eq!(
            r.header("www-authenticate").as_deref(),
            Some("Bearer realm=\"test\""),
            "{engine}"
        );
        let r = ask("app.test", Some("banned"), &[]).await;
        assert_eq!(r.status, 403, "{engine}: {r:?}");
        let r = ask("app.test", Some("broken"), &[]).await;
        assert_eq!(r.status, 500, "{engine}: {r:?}");
        let r = ask("signin.test", None, &[]).await;
        assert_eq!(r.status, 302, "{engine}: {r:?}");
        assert_eq!(
            r.header("location").as_deref(),
            Some("https://login.test/start?rd=http://signin.test%2Fx%3Fy%3D1"),
            "{engine}"
        );
        assert_eq!(
            web.count(),
            served,
            "{engine}: a denied request reached the backend"
        );
        // An allowed client of the sign-in route is served.
        let r = ask("signin.test", Some("good"), &[]).await;
        assert_eq!(r.status, 200, "{engine}: {r:?}");

        // The cache: one subrequest per key while its answer is kept; an answer of a status
        // not kept (403) is asked for each time; the kept answer still vouches for X-User.
        authn.take_requests();
        for _ in 0..3 {
            let r = ask("cached.test", Some("good"), &[("x-user", "root")]).await;
            assert_eq!(r.status, 200, "{engine}: {r:?}");
            assert_eq!(r.seen_header("x-user").as_deref(), Some("ann"), "{engine}");
        }
        assert_eq!(authn.take_requests().len(), 1, "{engine}: kept for its key");
        for _ in 0..2 {
            assert_eq!(ask("cached.test", None, &[]).await.status, 401, "{engine}");
            assert_eq!(
                ask("cached.test", Some("banned"), &[]).await.status,
                403,
                "{engine}"
            );
        }
        assert_eq!(
            authn.take_requests().len(),
            1 + 2,
            "{engine}: 401 kept, 403 asked each time"
        );
        // Another key is asked: no client is given another's answer.
        assert_eq!(ask("cached.test", Some("other"), &[]).await.status, 401);
        assert_eq!(authn.take_requests().len(), 1, "{engine}");

        let before = api.count();
        let r = ask("down.test", Some("good"), &[]).await;
        assert_eq!(
            r.status, 500,
            "{engine}: an unreachable service fails closed: {r:?}"
        );
        let r = ask("name.test", Some("good"), &[]).await;
        assert_eq!(
            r.status, 403,
            "{engine}: a URL that cannot be asked refuses: {r:?}"
        );
        assert_eq!(api.count(), before, "{engine}");
    }
}

/// ingress-nginx's request limits per client address on both engines: `limit-rpm: 2` with
/// the default burst multiplier (5) takes ten requests at once and answers the next 503 (a
/// minute's rate drains too slowly to blur the count); `limit-connections: 1` answers a
/// second request 503 while the first is in progress and takes one again once it ended; an
/// allowed network is never limited; another Ingress's limit is its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_limits_as_ingress_nginx() {
    let web = Backend::start("web").await;
    let api = Backend::start("api").await;
    let mut objs = services(&web, &api);
    objs.push(
        ing("counted")
            .ann("nginx.ingress.kubernetes.io/limit-rpm", "2")
            .rule(Some("rate.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    );
    objs.push(
        ing("one-at-a-time")
            .ann("nginx.ingress.kubernetes.io/limit-connections", "1")
            .rule(Some("conn.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    );
    objs.push(
        ing("trusted")
            .ann("nginx.ingress.kubernetes.io/limit-rpm", "1")
            .ann(
                "nginx.ingress.kubernetes.io/limit-allowlist",
                "10.0.0.0/8, 127.0.0.0/8",
            )
            .rule(Some("trusted.test"), &[("/", "Prefix", "api", 8080)])
            .into(),
    );
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &[]).await;
        let mut statuses = Vec::new();
        for _ in 0..14 {
            statuses.push(get_host_path(&sy, "rate.test", "/x", &[]).await.status);
        }
        assert_eq!(
            statuses,
            [[200; 10].as_slice(), [503; 4].as_slice()].concat(),
            "{engine}"
        );
        for _ in 0..12 {
            let r = get_host_path(&sy, "trusted.test", "/", &[]).await;
            assert_eq!(
                r.status, 200,
                "{engine}: an allowed network is never limited"
            );
        }
        // One request in progress (the backend holds /slow for a second).
        let port = sy.http_port;
        let slow =
            tokio::spawn(async move { get(port, "/slow", &[("host", "conn.test")]).await.status });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let r = get_host_path(&sy, "conn.test", "/x", &[]).await;
        assert_eq!(
            r.status, 503,
            "{engine}: a second request while one is in progress"
        );
        assert_eq!(slow.await.unwrap(), 200, "{engine}");
        for _ in 0..3 {
            let r = get_host_path(&sy, "conn.test", "/x", &[]).await;
            assert_eq!(r.status, 200, "{engine}: one at a time is served");
        }
    }
    // `--limit-scope cluster`: with two ready replicas behind `default/switchyard` (and one
    // not ready), each takes half: `limit-rpm: 2` is 1 a minute here, five at once.
    let mut cluster = objs.clone();
    cluster.push(svc("switchyard", 80).into());
    cluster.push(serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "switchyard-1", "namespace": "default",
                     "labels": {"kubernetes.io/service-name": "switchyard"}},
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["10.9.0.1"], "conditions": {"ready": true}},
            {"addresses": ["10.9.0.2"]},
            {"addresses": ["10.9.0.3"], "conditions": {"ready": false}}],
        "ports": [{"name": "", "port": 80, "protocol": "TCP"}]}));
    for engine in ENGINES {
        let args = [
            "--limit-scope",
            "cluster",
            "--limit-peers",
            "default/switchyard",
        ];
        let sy = switchyard_on(cluster.clone(), engine, &args).await;
        let mut statuses = Vec::new();
        for _ in 0..7 {
            statuses.push(get_host_path(&sy, "rate.test", "/x", &[]).await.status);
        }
        assert_eq!(
            statuses,
            [[200; 5].as_slice(), [503; 2].as_slice()].concat(),
            "{engine}: half the limit on each of two replicas"
        );
    }
    // The status is the operator's to choose (ingress-nginx's limit-req-status-code).
    let sy = switchyard_on(objs, ENGINES[0], &["--limit-status-code", "429"]).await;
    let mut statuses = Vec::new();
    for _ in 0..11 {
        statuses.push(get_host_path(&sy, "rate.test", "/x", &[]).await.status);
    }
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
}

/// ingress-nginx's cookie affinity on both engines: a client without the cookie is given
/// one (`INGRESSCOOKIE`, the route's path, `HttpOnly`, or the Ingress's name, path, max-age
/// and SameSite), and with it stays on the same endpoint of two, never given another, the
/// cookie passed on to the backend; a cookie naming no endpoint is replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_affinity_as_ingress_nginx() {
    let web = Backend::start("web").await;
    let api = Backend::start("api").await;
    let one = Backend::start("one").await;
    let two = Backend::start("two").await;
    let mut objs = services(&web, &api);
    objs.push(svc("pair", 80).into());
    objs.extend(slices("pair", &[&one, &two]));
    objs.push(
        ing("sticky")
            .ann("nginx.ingress.kubernetes.io/affinity", "cookie")
            .ann("nginx.ingress.kubernetes.io/affinity-mode", "persistent")
            .rule(Some("sticky.test"), &[("/app", "Prefix", "pair", 80)])
            .into(),
    );
    // ingress-nginx's default mode: the cookie holds a session key, the endpoint is the
    // key's by consistent hashing.
    objs.push(
        ing("balanced")
            .ann("nginx.ingress.kubernetes.io/affinity", "cookie")
            .rule(Some("balanced.test"), &[("/", "Prefix", "pair", 80)])
            .into(),
    );
    objs.push(
        ing("named")
            .ann("nginx.ingress.kubernetes.io/affinity", "cookie")
            .ann("nginx.ingress.kubernetes.io/session-cookie-name", "route")
            .ann("nginx.ingress.kubernetes.io/session-cookie-path", "/")
            .ann("nginx.ingress.kubernetes.io/session-cookie-max-age", "3600")
            .ann("nginx.ingress.kubernetes.io/session-cookie-samesite", "lax")
            .rule(Some("named.test"), &[("/", "Prefix", "pair", 80)])
            .into(),
    );
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &[]).await;
        let r = get_host_path(&sy, "sticky.test", "/app/x", &[]).await;
        assert_eq!(r.status, 200, "{engine}: {r:?}");
        let set = r.header("set-cookie").expect("a cookie");
        let (pair, attributes) = set.split_once("; ").unwrap();
        assert!(pair.starts_with("INGRESSCOOKIE="), "{engine}: {set}");
        assert_eq!(attributes, "Path=/app; HttpOnly", "{engine}");
        let first = r.json()["backend"].as_str().unwrap().to_string();
        for _ in 0..6 {
            let r = get_host_path(&sy, "sticky.test", "/app/y", &[("cookie", pair)]).await;
            assert_eq!(
                r.json()["backend"].as_str(),
                Some(first.as_str()),
                "{engine}"
            );
            assert_eq!(
                r.header("set-cookie"),
                None,
                "{engine}: a valid cookie is kept"
            );
            assert_eq!(r.seen_header("cookie").as_deref(), Some(pair), "{engine}");
        }
        // Without the cookie, round robin goes on between both.
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..4 {
            let r = get_host_path(&sy, "sticky.test", "/app/z", &[]).await;
            seen.insert(r.json()["backend"].as_str().unwrap().to_string());
        }
        assert_eq!(seen.len(), 2, "{engine}: {seen:?}");
        let r = get_host_path(
            &sy,
            "sticky.test",
            "/app",
            &[("cookie", "INGRESSCOOKIE=0123")],
        )
        .await;
        assert!(
            r.header("set-cookie")
                .is_some_and(|c| c.starts_with("INGRESSCOOKIE=")),
            "{engine}: a cookie naming no endpoint is replaced: {r:?}"
        );
        // Balanced: each new session a key of its own (16 hex digits), kept with its endpoint;
        // new sessions spread over both endpoints.
        let mut seen = std::collections::BTreeSet::new();
        let mut keys = std::collections::BTreeSet::new();
        for _ in 0..16 {
            let r = get_host_path(&sy, "balanced.test", "/", &[]).await;
            let set = r.header("set-cookie").expect("a cookie");
            let (pair, _) = set.split_once("; ").unwrap();
            let key = pair.strip_prefix("INGRESSCOOKIE=").unwrap().to_string();
            assert!(
                key.len() == 16 && key.bytes().all(|b| b.is_ascii_hexdigit()),
                "{engine}: {set}"
            );
            let backend = r.json()["backend"].as_str().unwrap().to_string();
            for _ in 0..3 {
                let r = get_host_path(&sy, "balanced.test", "/x", &[("cookie", pair)]).await;
                assert_eq!(r.json()["backend"].as_str(), Some(backend.as_str()));
                assert_eq!(r.header("set-cookie"), None, "{engine}: a key is kept");
            }
            seen.insert(backend);
            keys.insert(key);
        }
        assert_eq!(seen.len(), 2, "{engine}: sessions spread: {seen:?}");
        assert_eq!(keys.len(), 16, "{engine}: a key per session");
        let r = get_host_path(&sy, "named.test", "/", &[]).await;
        let set = r.header("set-cookie").expect("a cookie");
        let (pair, attributes) = set.split_once("; ").unwrap();
        assert!(pair.starts_with("route="), "{engine}: {set}");
        assert_eq!(
            attributes, "Path=/; Max-Age=3600; SameSite=Lax; HttpOnly",
            "{engine}"
        );
    }
}

/// ingress-nginx's `ssl-passthrough` on both engines: a TLS connection whose hello names the
/// Ingress's host is relayed unterminated to its Service, so the client completes its
/// handshake with the backend's own certificate and speaks to the backend; other names are
/// terminated by switchyard as before (its certificate, its routing), and a passed-through
/// host whose Service has no endpoint has its connections closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssl_passthrough_as_ingress_nginx() {
    let web = Backend::start("web").await;
    let api = Backend::start("api").await;
    let vault_ca = Ca::new("vault CA");
    let vault_leaf = vault_ca.server(&["vault.test"]);
    let vault = Backend::builder("vault")
        .transport(Transport::Tls(tls_client::server_config(
            &vault_leaf,
            &[b"http/1.1"],
        )))
        .start()
        .await;
    let ca = Ca::new("switchyard CA");
    let default = ca.server(&["default.test"]);
    let dir = tempfile::tempdir().unwrap();
    let default_file = dir.path().join("default.pem");
    std::fs::write(&default_file, default.bundle()).unwrap();
    let mut objs = services(&web, &api);
    objs.push(svc("vault", 8200).into());
    objs.push(slice("vault", "", vault.port));
    objs.push(svc("gone", 8200).into());
    objs.push(
        ing("vault")
            .ann("nginx.ingress.kubernetes.io/ssl-passthrough", "true")
            .rule(Some("vault.test"), &[("/", "Prefix", "vault", 8200)])
            .into(),
    );
    objs.push(
        ing("gone")
            .ann("nginx.ingress.kubernetes.io/ssl-passthrough", "true")
            .rule(Some("gone.test"), &[("/", "Prefix", "gone", 8200)])
            .into(),
    );
    objs.push(
        ing("site")
            .rule(Some("site.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    );
    for engine in ENGINES {
        let port = free_port();
        let sy = switchyard_on(
            objs.clone(),
            engine,
            &[
                "--https-port",
                &port.to_string(),
                "--ssl-cert",
                default_file.to_str().unwrap(),
                "--enable-ssl-passthrough",
            ],
        )
        .await;
        let up = eventually(Duration::from_secs(10), || async {
            TcpStream::connect(("127.0.0.1", port)).await.is_ok()
        })
        .await;
        assert!(up, "TLS port never opened:\n{}", sy.stderr());
        assert_eq!(
            sni("vault.test").presented(port).await,
            vault_leaf.der,
            "{engine}: the backend's own certificate"
        );
        let before = vault.count();
        for _ in 0..3 {
            let r = sni("vault.test")
                .get(port, "/v1/sys/health", &[])
                .await
                .unwrap();
            assert_eq!(r.status, 200, "{engine}: {r:?}");
            assert_eq!(r.backend().as_deref(), Some("vault"), "{engine}");
            assert_eq!(r.uri(), "/v1/sys/health", "{engine}");
            // Unterminated: switchyard added nothing.
            assert_eq!(r.seen_header("x-forwarded-proto"), None, "{engine}");
        }
        assert_eq!(vault.count(), before + 3, "{engine}");
        assert_eq!(
            sni("site.test").presented(port).await,
            default.der,
            "{engine}"
        );
        let r = sni("site.test").get(port, "/x", &[]).await.unwrap();
        assert_eq!(r.backend().as_deref(), Some("web"), "{engine}");
        assert_eq!(r.seen_header("x-forwarded-proto").as_deref(), Some("https"));
        assert!(
            sni("gone.test").get(port, "/", &[]).await.is_err(),
            "{engine}: no endpoint: closed"
        );
        let m = sy.admin("/metrics").await.body;
        assert!(
            m.contains("switchyard_passthrough_connections_total{result=\"relayed\"} 4"),
            "{engine}: {}",
            m.lines()
                .filter(|l| l.contains("passthrough"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    // Without --enable-ssl-passthrough, as in ingress-nginx, nothing is passed through, and
    // the Ingress is not served rather than served with its TLS terminated.
    let port = free_port();
    let args = [
        "--https-port",
        &port.to_string(),
        "--ssl-cert",
        default_file.to_str().unwrap(),
    ];
    let sy = switchyard_on(objs.clone(), ENGINES[0], &args).await;
    let up = eventually(Duration::from_secs(10), || async {
        TcpStream::connect(("127.0.0.1", port)).await.is_ok()
    })
    .await;
    assert!(up, "TLS port never opened:\n{}", sy.stderr());
    assert_eq!(sni("vault.test").presented(port).await, default.der);
    let r = sni("vault.test").get(port, "/", &[]).await.unwrap();
    assert_eq!(r.status, 403, "{r:?}");
    assert!(
        sy.stderr().contains("--enable-ssl-passthrough"),
        "{}",
        sy.stderr()
    );
}

/// ingress-nginx's `upstream-hash-by` on both engines: requests with the same key (here
/// `$arg_user`) always reach the same endpoint of three, and thirty keys spread over all three
/// (the endpoints' ports change from run to run: missing one has a chance of 3 x (2/3)^30).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_hash_by_as_ingress_nginx() {
    let web = Backend::start("web").await;
    let api = Backend::start("api").await;
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let c = Backend::start("c").await;
    let mut objs = services(&web, &api);
    objs.push(svc("trio", 80).into());
    objs.extend(slices("trio", &[&a, &b, &c]));
    objs.push(
        ing("hashed")
            .ann("nginx.ingress.kubernetes.io/upstream-hash-by", "$arg_user")
            .rule(Some("hash.test"), &[("/", "Prefix", "trio", 80)])
            .into(),
    );
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &[]).await;
        let mut spread = std::collections::BTreeSet::new();
        for user in 0..30 {
            let path = format!("/p?user=u{user}");
            let first = get_host_path(&sy, "hash.test", &path, &[]).await;
            let first = first.json()["backend"].as_str().unwrap().to_string();
            for other in ["", "&x=1"] {
                let again = get_host_path(&sy, "hash.test", &format!("{path}{other}"), &[]).await;
                assert_eq!(
                    again.json()["backend"].as_str(),
                    Some(first.as_str()),
                    "{engine}: u{user} moved"
                );
            }
            spread.insert(first);
        }
        assert_eq!(
            spread.len(),
            3,
            "{engine}: thirty keys over three endpoints: {spread:?}"
        );
    }
}

/// ingress-nginx's `proxy-next-upstream` on both engines, each Service with a broken endpoint
/// beside a good one: by default a refused connection is retried on the good one (no request
/// fails); `off` answers the one request that met the refused endpoint 503 (switchyard's status
/// for a refused connection); with `timeout` a request the endpoint holds past
/// `proxy-read-timeout` goes to the good one, with `error` alone it is answered 504; and with
/// `proxy-next-upstream-timeout` no longer than that wait, it is 504 too (no time left for
/// another try). `http_503` sends a GET the busy endpoint answered 503 to the good one, and a
/// POST only with `non_idempotent`; a status not named is relayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_next_upstream_as_ingress_nginx() {
    let web = Backend::start("web").await;
    let api = Backend::start("api").await;
    let good = Backend::start("good").await;
    let mut objs = services(&web, &api);
    let mut keep = Vec::new();
    let mut route = |name: &str, broken: u16, ann: &[(&str, &str)]| {
        objs.push(svc(name, 80).into());
        objs.push(slice(name, "", broken));
        objs.push(slice(name, "", good.port));
        let mut i = ing(name);
        for (k, v) in ann {
            i = i.ann(&format!("nginx.ingress.kubernetes.io/{k}"), v);
        }
        objs.push(
            i.rule(Some(&format!("{name}.test")), &[("/", "Prefix", name, 80)])
                .into(),
        );
    };
    let (refused_a, refused_b) = (DeadPort::new(), DeadPort::new());
    route("dflt", refused_a.port, &[]);
    route("off", refused_b.port, &[("proxy-next-upstream", "off")]);
    for name in ["hang-a", "hang-b", "hang-c"] {
        keep.push(
            Backend::builder(name)
                .behaviour(Behaviour::Plain)
                .fault(Fault::Hang)
                .start()
                .await,
        );
    }
    route(
        "timeout",
        keep[0].port,
        &[
            ("proxy-next-upstream", "error timeout"),
            ("proxy-read-timeout", "1"),
        ],
    );
    route(
        "error",
        keep[1].port,
        &[
            ("proxy-next-upstream", "error"),
            ("proxy-read-timeout", "1"),
        ],
    );
    route(
        "within",
        keep[2].port,
        &[
            ("proxy-next-upstream", "error timeout"),
            ("proxy-read-timeout", "1"),
            ("proxy-next-upstream-timeout", "1"),
        ],
    );
    for name in ["busy-a", "busy-b", "busy-c"] {
        keep.push(
            Backend::builder(name)
                .behaviour(Behaviour::Scripted(busy))
                .start()
                .await,
        );
    }
    route(
        "status",
        keep[3].port,
        &[("proxy-next-upstream", "error timeout http_503")],
    );
    route(
        "anymethod",
        keep[4].port,
        &[("proxy-next-upstream", "error http_503 non_idempotent")],
    );
    route(
        "other",
        keep[5].port,
        &[("proxy-next-upstream", "error http_502 http_504")],
    );
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &[]).await;
        for (host, want) in [
            ("dflt.test", [200, 200]),
            ("off.test", [200, 503]),
            ("timeout.test", [200, 200]),
            ("error.test", [200, 504]),
            ("within.test", [200, 504]),
            ("status.test", [200, 200]),
            ("anymethod.test", [200, 200]),
            ("other.test", [200, 503]),
        ] {
            // Two requests: round robin sends one of them to the broken endpoint first.
            let mut got = Vec::new();
            for _ in 0..2 {
                got.push(get_host_path(&sy, host, "/x", &[]).await.status);
            }
            got.sort_unstable();
            assert_eq!(got, want, "{engine} {host}");
        }
        // A POST (Pingora's engine carries bodies): sent again only with `non_idempotent`.
        for (host, want) in [("status.test", [200, 503]), ("anymethod.test", [200, 200])] {
            let mut got = Vec::new();
            for _ in 0..2 {
                got.push(post_status(sy.http_port, host, "/x", 4, false));
            }
            got.sort_unstable();
            assert_eq!(got, want, "{engine} POST {host}");
        }
    }
}

/// An endpoint that answers every request 503.
fn busy(_head: &str, _body: &[u8]) -> (Vec<u8>, bool) {
    (
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\n\r\nbusy".to_vec(),
        false,
    )
}

/// ingress-nginx's `proxy-send-timeout` on both engines: a request body to an endpoint that
/// takes the connection and never reads is given up on once one write waits past the send
/// timeout (504), not after the read timeout (60 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_send_timeout_bounds_writes_to_an_endpoint_that_stops_reading() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let web = Backend::start("web").await;
    let api = Backend::start("api").await;
    let mut objs = services(&web, &api);
    // Accepts and holds every connection, reading nothing.
    let sink = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sink_port = sink.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = sink.accept().await {
            held.push(s);
        }
    });
    objs.push(svc("sink", 80).into());
    objs.push(slice("sink", "", sink_port));
    objs.push(
        ing("sink")
            .ann("nginx.ingress.kubernetes.io/proxy-send-timeout", "1")
            .ann("nginx.ingress.kubernetes.io/proxy-read-timeout", "60")
            .rule(Some("sink.test"), &[("/", "Prefix", "sink", 80)])
            .into(),
    );
    const BODY: usize = 64 << 20;
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &["--check-interval", "0s"]).await;
        let started = std::time::Instant::now();
        let tcp = TcpStream::connect(("127.0.0.1", sy.http_port))
            .await
            .unwrap();
        let (mut rd, mut wr) = tcp.into_split();
        let head =
            format!("POST /up HTTP/1.1\r\nHost: sink.test\r\nContent-Length: {BODY}\r\n\r\n");
        wr.write_all(head.as_bytes()).await.unwrap();
        // The body, until switchyard stops taking it (bounded: at most BODY bytes).
        let writer = tokio::spawn(async move {
            let chunk = vec![b'x'; 64 << 10];
            let mut sent = 0;
            while sent < BODY && wr.write_all(&chunk).await.is_ok() {
                sent += chunk.len();
            }
        });
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(30), async {
            let mut buf = [0u8; 1024];
            while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
                match rd.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => answer.extend_from_slice(&buf[..n]),
                }
            }
        })
        .await;
        writer.abort();
        let took = started.elapsed();
        assert!(read.is_ok(), "{engine}: no answer in 30 s: {}", sy.stderr());
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.1 504"), "{engine}: {text}");
        assert!(
            took < Duration::from_secs(20),
            "{engine}: answered after {took:?}, the read timeout's doing"
        );
    }
}

/// `upstream-vhost` and `x-forwarded-prefix`, on both engines: the backend gets the Host and
/// the prefix header the Ingress names, a client's own `X-Forwarded-Prefix` replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_vhost_and_forwarded_prefix() {
    let web = Backend::start("web").await;
    let api = Backend::start("api").await;
    let mut objs = services(&web, &api);
    objs.push(
        ing("vhost")
            .ann(
                "nginx.ingress.kubernetes.io/upstream-vhost",
                "internal.svc:8080",
            )
            .ann("nginx.ingress.kubernetes.io/x-forwarded-prefix", "/shop")
            .rule(Some("v.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    );
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &[]).await;
        let r = get(
            sy.http_port,
            "/cart?x=1",
            &[("host", "v.test"), ("x-forwarded-prefix", "/evil")],
        )
        .await;
        assert_eq!(r.status, 200, "{engine}: {r:?}");
        assert_eq!(r.uri(), "/cart?x=1");
        assert_eq!(
            r.seen_header("host").as_deref(),
            Some("internal.svc:8080"),
            "{engine}"
        );
        assert_eq!(
            r.seen_header("x-forwarded-prefix").as_deref(),
            Some("/shop"),
            "{engine}"
        );
    }
}

/// ingress-nginx's CORS on both engines: a preflight from an allowed origin answered 204 by
/// switchyard with the `Access-Control-*` fields (nothing reaches the backend), responses to
/// allowed origins given them (the origin echoed, a one-label wildcard honoured), other
/// origins given none and their preflights proxied; `*` answers every request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_as_ingress_nginx() {
    let web = Backend::start("web").await;
    let api = Backend::start("api").await;
    let mut objs = services(&web, &api);
    objs.push(
        ing("listed")
            .ann("nginx.ingress.kubernetes.io/enable-cors", "true")
            .ann(
                "nginx.ingress.kubernetes.io/cors-allow-origin",
                "https://app.test, https://*.example.org",
            )
            .ann(
                "nginx.ingress.kubernetes.io/cors-allow-credentials",
                "false",
            )
            .ann("nginx.ingress.kubernetes.io/cors-expose-headers", "X-Total")
            .ann("nginx.ingress.kubernetes.io/cors-max-age", "600")
            .rule(Some("cors.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    );
    objs.push(
        ing("any")
            .ann("nginx.ingress.kubernetes.io/enable-cors", "true")
            .rule(Some("any.test"), &[("/", "Prefix", "api", 8080)])
            .into(),
    );
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &[]).await;
        let port = sy.http_port;
        let before = web.count();
        let pre = try_request(
            port,
            "OPTIONS",
            "/api/items",
            &[
                ("host", "cors.test"),
                ("origin", "https://app.test"),
                ("access-control-request-method", "PUT"),
            ],
        )
        .await
        .unwrap();
        assert_eq!(pre.status, 204, "{engine}: {pre:?}");
        assert_eq!(
            web.count(),
            before,
            "{engine}: a preflight reached the backend"
        );
        let h = |r: &Resp, n: &str| r.header(n);
        assert_eq!(
            h(&pre, "access-control-allow-origin").as_deref(),
            Some("https://app.test")
        );
        assert_eq!(
            h(&pre, "access-control-allow-methods").as_deref(),
            Some("GET, PUT, POST, DELETE, PATCH, OPTIONS")
        );
        assert!(
            h(&pre, "access-control-allow-headers").is_some_and(|v| v.contains("Authorization"))
        );
        assert_eq!(
            h(&pre, "access-control-expose-headers").as_deref(),
            Some("X-Total")
        );
        assert_eq!(h(&pre, "access-control-max-age").as_deref(), Some("600"));
        assert_eq!(
            h(&pre, "access-control-allow-credentials"),
            None,
            "{engine}"
        );

        let r = get(
            port,
            "/x",
            &[("host", "cors.test"), ("origin", "https://a.example.org")],
        )
        .await;
        assert_eq!(r.status, 200, "{engine}");
        assert_eq!(r.backend().as_deref(), Some("web"));
        assert_eq!(
            h(&r, "access-control-allow-origin").as_deref(),
            Some("https://a.example.org"),
            "{engine}"
        );
        for origin in ["https://evil.test", "https://a.b.example.org"] {
            let r = get(port, "/x", &[("host", "cors.test"), ("origin", origin)]).await;
            assert_eq!(r.status, 200, "{engine}");
            assert_eq!(
                h(&r, "access-control-allow-origin"),
                None,
                "{engine} {origin}"
            );
        }
        let before = web.count();
        let pre = try_request(
            port,
            "OPTIONS",
            "/x",
            &[("host", "cors.test"), ("origin", "https://evil.test")],
        )
        .await
        .unwrap();
        assert_eq!(
            web.count(),
            before + 1,
            "{engine}: not allowed, so proxied: {pre:?}"
        );
        assert_eq!(h(&pre, "access-control-allow-origin"), None);

        let r = get(port, "/y", &[("host", "any.test")]).await;
        assert_eq!(r.backend().as_deref(), Some("api"), "{engine}");
        assert_eq!(
            h(&r, "access-control-allow-origin").as_deref(),
            Some("*"),
            "{engine}"
        );
        assert_eq!(
            h(&r, "access-control-allow-credentials").as_deref(),
            Some("true")
        );
        assert_eq!(h(&r, "access-control-max-age").as_deref(), Some("1728000"));
    }
}

/// ingress-nginx's redirect annotations, with its statuses and locations, on both engines:
/// `permanent-redirect` (301, or `permanent-redirect-code`) wins over `temporal-redirect`
/// (302), nginx's `$request_uri`-style variables are filled in, `app-root` sends `/` itself
/// to the application's root and leaves other paths proxied, and a client the source ranges
/// refuse gets 403, never a location. No redirected request reaches a backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirect_annotations_answer_as_ingress_nginx_does() {
    let web = Backend::start("web").await;
    let api = Backend::start("api").await;
    let nginx = |k: &str| format!("nginx.ingress.kubernetes.io/{k}");
    let mut objs = services(&web, &api);
    objs.push(
        ing("moved")
            .ann(&nginx("permanent-redirect"), "https://new.test$request_uri")
            .ann(&nginx("temporal-redirect"), "https://temp.test/")
            .rule(Some("old.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    );
    objs.push(
        ing("seeother")
            .ann(&nginx("permanent-redirect"), "/elsewhere")
            .ann(&nginx("permanent-redirect-code"), "308")
            .rule(Some("code.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    );
    objs.push(
        ing("temp")
            .ann(
                &nginx("temporal-redirect"),
                "$scheme://$host/maintenance$is_args$args",
            )
            .rule(Some("temp.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    );
    objs.push(
        ing("root")
            .ann(&nginx("app-root"), "/app1")
            .rule(Some("root.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    );
    objs.push(
        ing("closed")
            .ann(&nginx("permanent-redirect"), "https://new.test/")
            .ann(&nginx("whitelist-source-range"), "10.0.0.0/8")
            .rule(Some("closed.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    );
    objs.push(
        ing("www")
            .ann(&nginx("from-to-www-redirect"), "true")
            .ann(&nginx("server-alias"), "alias.test, other.test")
            .rule(Some("www.site.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    );
    // A host a rule names is that rule's, not an alias's.
    objs.push(
        ing("other")
            .rule(Some("other.test"), &[("/only", "Prefix", "api", 8080)])
            .into(),
    );
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &[]).await;
        expect_route(&sy, Some("alias.test"), "/x", &web, "/x").await;
        expect_route(&sy, Some("other.test"), "/only", &api, "/only").await;
        assert_eq!(
            sy.get_host("other.test", "/x").await.status,
            404,
            "({engine})"
        );
        let before = web.count();
        let cases = [
            ("site.test", "/a?b=1", 308, "http://www.site.test/a?b=1"),
            ("old.test", "/a/b?c=1", 301, "https://new.test/a/b?c=1"),
            ("code.test", "/x", 308, "/elsewhere"),
            (
                "temp.test",
                "/p?q=2",
                302,
                "http://temp.test/maintenance?q=2",
            ),
            ("temp.test", "/p", 302, "http://temp.test/maintenance"),
            ("root.test", "/", 302, "http://root.test/app1"),
        ];
        for (host, path, status, location) in cases {
            let r = sy.get_host(host, path).await;
            assert_eq!(r.status, status, "{host}{path} ({engine})");
            assert_eq!(
                r.header("location").as_deref(),
                Some(location),
                "{host}{path} ({engine})"
            );
        }
        assert_eq!(
            web.count(),
            before,
            "no redirected request reaches a backend ({engine})"
        );
        expect_route(&sy, Some("root.test"), "/app1/page", &web, "/app1/page").await;
        let r = sy.get_host("closed.test", "/").await;
        assert_eq!(r.status, 403, "source ranges first ({engine})");
        assert_eq!(r.header("location"), None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_secrets_are_served_by_sni_and_plain_http_redirects() {
    let web = Backend::start("web").await;
    let api = Backend::start("api").await;
    let ca = Ca::new("ingress CA");
    let default = ca.server(&["default.test"]);
    let secure = ca.server(&["secure.test"]);
    let rotated = ca.server(&["secure.test"]);
    let dir = tempfile::tempdir().unwrap();
    let default_file = dir.path().join("default.pem");
    std::fs::write(&default_file, default.bundle()).unwrap();
    let objs = |leaf: &tls_client::Leaf| {
        let mut objs = services(&web, &api);
        objs.push(
            ing("secure")
                .tls(&["secure.test"], "secure-cert")
                .rule(Some("secure.test"), &[("/", "Prefix", "web", 80)])
                .into(),
        );
        objs.push(
            ing("optout")
                .ann("switchyard.io/ssl-redirect", "false")
                .tls(&["optout.test"], "no-such-secret")
                .rule(Some("optout.test"), &[("/", "Prefix", "api", 8080)])
                .into(),
        );
        objs.push(tls_secret("secure-cert", &leaf.cert_pem, &leaf.key_pem));
        objs
    };
    for engine in ENGINES {
        let (sy, port) = with_tls_port(objs(&secure), engine, &default_file).await;
        // The Secret's certificate for its host; the default for others and for a host whose
        // Secret is missing.
        assert_eq!(sni("secure.test").presented(port).await, secure.der);
        assert_eq!(sni("other.test").presented(port).await, default.der);
        assert_eq!(sni("optout.test").presented(port).await, default.der);
        let r = sni("secure.test").get(port, "/x", &[]).await.unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.backend().as_deref(), Some("web"));

        // Plain HTTP for a TLS host is redirected with its path and query, keeping the method.
        let r = sy.get_host("secure.test", "/a/b?c=1").await;
        assert_eq!(r.status, 308, "({engine}) {r:?}");
        assert_eq!(
            r.header("location").as_deref(),
            Some(format!("https://secure.test:{port}/a/b?c=1").as_str())
        );
        // ssl-redirect "false": proxied over plain HTTP.
        expect_route(&sy, Some("optout.test"), "/p", &api, "/p").await;
        assert!(
            sy.stderr()
                .contains("TLS Secret default/no-such-secret does not exist"),
            "{}",
            sy.stderr()
        );

        // A new certificate in the Secret serves new handshakes, without a restart.
        sy.rewrite(&objs(&rotated));
        let live = eventually(Duration::from_secs(10), || async {
            sni("secure.test").presented(port).await == rotated.der
        })
        .await;
        assert!(live, "the rotated Secret was not served:\n{}", sy.stderr());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_ingress_affects_only_itself() {
    let web = Backend::start("web").await;
    let api = Backend::start("api").await;
    let mut objs = services(&web, &api);
    objs.push(
        ing("bad")
            .rule(Some("bad host!"), &[("/", "Prefix", "web", 80)])
            .rule(
                Some("bad.test"),
                &[("nope", "Prefix", "web", 80), ("/r", "Regex", "web", 80)],
            )
            .ann(
                "nginx.ingress.kubernetes.io/configuration-snippet",
                "return 200;",
            )
            .into(),
    );
    objs.push(
        ing("good")
            .rule(Some("good.test"), &[("/", "Prefix", "api", 8080)])
            .into(),
    );
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &[]).await;
        expect_route(&sy, Some("good.test"), "/", &api, "/").await;
        assert_eq!(sy.get_host("bad.test", "/r").await.status, 404);
        let log = sy.stderr();
        for needle in [
            "\"bad host!\"",
            "\"nope\"",
            "pathType \"Regex\"",
            "configuration-snippet",
        ] {
            assert!(
                log.lines()
                    .any(|l| l.contains("Ingress default/bad") && l.contains(needle)),
                "no warning about {needle}:\n{log}"
            );
        }
    }
}

/// `curl` a request with a body of `len` bytes (chunked when asked); the status it got.
fn post_status(port: u16, host: &str, path: &str, len: usize, chunked: bool) -> u16 {
    let mut cmd = std::process::Command::new("curl");
    cmd.args([
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--max-time",
        "10",
    ])
    .args(["-H", &format!("Host: {host}"), "--data-binary", "@-"]);
    if chunked {
        cmd.args(["-H", "Transfer-Encoding: chunked"]);
    }
    cmd.arg(format!("http://127.0.0.1:{port}{path}"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("run curl");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        let _ = stdin.write_all(&vec![b'x'; len]);
    }
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_protocol_timeout_and_body_size_per_ingress() {
    let web = Backend::start("web").await;
    let api = Backend::start("api").await;
    let h2c = Backend::builder("h2c")
        .transport(Transport::H2c)
        .start()
        .await;
    let slow = Backend::builder("slow")
        .delay(Duration::from_millis(1500))
        .start()
        .await;
    let mut objs = services(&web, &api);
    objs.extend([
        svc("h2c", 80).into(),
        slice("h2c", "", h2c.port),
        svc("slow", 80).into(),
        slice("slow", "", slow.port),
    ]);
    objs.push(
        ing("h2")
            .ann("nginx.ingress.kubernetes.io/backend-protocol", "H2C")
            .rule(Some("h2c.test"), &[("/", "Prefix", "h2c", 80)])
            .into(),
    );
    objs.push(
        ing("impatient")
            .ann("switchyard.io/proxy-read-timeout", "500ms")
            .rule(Some("impatient.test"), &[("/", "Prefix", "slow", 80)])
            .into(),
    );
    objs.push(
        ing("patient")
            .rule(Some("patient.test"), &[("/", "Prefix", "slow", 80)])
            .into(),
    );
    objs.push(
        ing("small")
            .ann("switchyard.io/proxy-body-size", "1k")
            .rule(Some("small.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    );
    // A port whose accept queue is full (backlog 0, one connection queued): a connect to it
    // waits, its SYN dropped.
    let full = tokio::net::TcpSocket::new_v4().unwrap();
    full.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let full = full.listen(0).unwrap();
    let full_port = full.local_addr().unwrap().port();
    let _queued = std::net::TcpStream::connect(("127.0.0.1", full_port)).unwrap();
    objs.extend([svc("full", 80).into(), slice("full", "", full_port)]);
    objs.push(
        ing("hasty")
            .ann("nginx.ingress.kubernetes.io/proxy-connect-timeout", "1")
            .rule(Some("hasty.test"), &[("/", "Prefix", "full", 80)])
            .into(),
    );
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &["--server-timeout", "10s"]).await;
        // The route's connect timeout, not the default 5 s: given up in about a second (the
        // one endpoint is then out of rotation: 503).
        let started = std::time::Instant::now();
        let r = sy.get_host("hasty.test", "/").await;
        let took = started.elapsed();
        let in_time = took > Duration::from_millis(900) && took < Duration::from_secs(4);
        assert!(
            matches!(r.status, 503 | 504) && in_time,
            "({engine}) {took:?} {r:?}"
        );
        // The Ingress says h2c for a Service port that says nothing: HTTP/2 to the endpoint.
        let r = sy.get_host("h2c.test", "/x").await;
        assert_eq!(r.status, 200, "({engine}) {r:?}");
        assert_eq!(r.json()["version"], "HTTP/2.0", "({engine})");
        // The route's read timeout, not --server-timeout.
        let started = std::time::Instant::now();
        assert_eq!(
            sy.get_host("impatient.test", "/").await.status,
            504,
            "({engine})"
        );
        assert!(
            started.elapsed() < Duration::from_millis(1400),
            "({engine})"
        );
        assert_eq!(
            sy.get_host("patient.test", "/").await.status,
            200,
            "({engine})"
        );
        // Bodies over the route's size: 413, announced or chunked; smaller ones pass.
        let port = sy.http_port;
        assert_eq!(
            post_status(port, "small.test", "/p", 512, false),
            200,
            "({engine})"
        );
        let before = web.count();
        assert_eq!(
            post_status(port, "small.test", "/p", 4096, false),
            413,
            "({engine})"
        );
        assert_eq!(
            web.count(),
            before,
            "an announced oversize body is never sent on"
        );
        assert_eq!(
            post_status(port, "small.test", "/p", 64 * 1024, true),
            413,
            "({engine})"
        );
        assert_eq!(
            post_status(port, "web.test", "/web/p", 4096, false),
            200,
            "({engine})"
        );
    }
}

/// ingress-nginx's authentication annotations are not served yet: the Ingress that carries
/// them answers 403 to every client on every path it claims, on both engines, rather than fall
/// through to another Ingress's `/` or reach its backend unauthenticated; a canary Ingress
/// never takes its main Ingress's traffic, however old it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_restricting_annotations_not_served_refuse_rather_than_serve_open() {
    let web = Backend::start("web").await;
    let api = Backend::start("api").await;
    let mut objs = services(&web, &api);
    objs.push(
        ing("site")
            .rule(Some("site.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    );
    objs.push(
        ing("admin")
            .ann("nginx.ingress.kubernetes.io/auth-type", "basic")
            .ann("nginx.ingress.kubernetes.io/auth-secret", "admins")
            .rule(Some("site.test"), &[("/admin", "Prefix", "api", 8080)])
            .into(),
    );
    objs.push(
        ing("sso")
            .ann(
                "nginx.ingress.kubernetes.io/auth-url",
                // Through the ingress itself by an nginx variable: not reachable without
                // resolving a name, so refused (a Service's cluster name is served).
                "https://$host/oauth2/auth",
            )
            .rule(Some("sso.test"), &[("/", "Prefix", "api", 8080)])
            .into(),
    );
    // A canary created before its main Ingress (`created` defaults to none, which sorts
    // first) that asks for authentication: not served at all, not even as the canary.
    objs.push(
        ing("canary")
            .ann("nginx.ingress.kubernetes.io/canary", "true")
            .ann("nginx.ingress.kubernetes.io/canary-weight", "100")
            .ann("nginx.ingress.kubernetes.io/auth-type", "basic")
            .rule(Some("site.test"), &[("/", "Prefix", "api", 8080)])
            .into(),
    );
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &[]).await;
        let before = api.count();
        for (host, path) in [
            ("site.test", "/admin"),
            ("site.test", "/admin/users?delete=1"),
            ("sso.test", "/"),
            ("sso.test", "/anything"),
        ] {
            let r = sy.get_host(host, path).await;
            assert_eq!(r.status, 403, "{host}{path} ({engine}): {r:?}");
        }
        assert_eq!(
            api.count(),
            before,
            "a protected backend was reached ({engine})"
        );
        // The main Ingress keeps its paths and all of the traffic.
        expect_route(&sy, Some("site.test"), "/", &web, "/").await;
        expect_route(&sy, Some("site.test"), "/shop", &web, "/shop").await;
        let log = sy.stderr();
        for name in ["admin", "sso", "canary"] {
            assert!(
                log.lines()
                    .any(|l| l.contains(&format!("default/{name}")) && l.contains("NotServed")),
                "no NotServed warning for {name} ({engine}):\n{log}"
            );
        }
        let metrics = sy.admin("/metrics").await.body;
        assert!(
            metrics.contains("switchyard_translate_warnings_total{reason=\"NotServed\"} 3"),
            "({engine})\n{metrics}"
        );
    }
}

/// ingress-nginx's client certificates per Ingress host on both engines, over HTTP/1.1 and
/// HTTP/2: `auth-tls-secret` alone (verify on) answers a client without a certificate, or with
/// one of another CA, 400, and serves one of the Secret's CA with the `ssl-client-*` fields
/// ingress-nginx sends (a client's own copies replaced); the host's other Ingresses' paths are
/// verified too, a host with no such annotation asks nothing. `optional` serves a client
/// without one, refuses a bad one; `auth-tls-error-page` sends it there (302) instead;
/// `match-cn` answers another subject 403; `pass-certificate-to-upstream` sends the
/// certificate. Plain HTTP to the verifying Ingress is refused as a connection without one.
/// A Secret without `ca.crt` leaves the Ingress not served (403).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_per_host_as_ingress_nginx() {
    let web = Backend::start("web").await;
    let api = Backend::start("api").await;
    let server_ca = Ca::new("ingress mTLS server CA");
    let server = server_ca.server(&["mtls.test", "opt.test", "cn.test", "open.test", "bad.test"]);
    let trusted = Ca::new("ingress mTLS client CA");
    let other = Ca::new("another client CA");
    let alice = trusted.client("alice");
    let bob = trusted.client("bob");
    let mallory = other.client("mallory");
    let dir = tempfile::tempdir().unwrap();
    let default_file = dir.path().join("default.pem");
    std::fs::write(&default_file, server.bundle()).unwrap();
    let ca_secret = |name: &str, key: &str| -> Value {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(trusted.pem.as_bytes());
        serde_json::json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": "default"}, "data": {key: b64}})
    };
    let mut objs = services(&web, &api);
    objs.push(ca_secret("client-ca", "ca.crt"));
    objs.push(ca_secret("no-ca", "tls.crt"));
    objs.push(
        ing("mtls")
            .ann(
                "nginx.ingress.kubernetes.io/auth-tls-secret",
                "default/client-ca",
            )
            .rule(Some("mtls.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    );
    // Another Ingress of the host: its path is verified too (nginx's is one server).
    objs.push(
        ing("mtls-api")
            .rule(Some("mtls.test"), &[("/api", "Prefix", "api", 8080)])
            .into(),
    );
    objs.push(
        ing("opt")
            .ann("nginx.ingress.kubernetes.io/auth-tls-secret", "client-ca")
            .ann(
                "nginx.ingress.kubernetes.io/auth-tls-verify-client",
                "optional",
            )
            .ann(
                "nginx.ingress.kubernetes.io/auth-tls-error-page",
                "https://login.test/cert",
            )
            .ann(
                "nginx.ingress.kubernetes.io/auth-tls-pass-certificate-to-upstream",
                "true",
            )
            .rule(Some("opt.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    );
    objs.push(
        ing("cn")
            .ann("nginx.ingress.kubernetes.io/auth-tls-secret", "client-ca")
            .ann("nginx.ingress.kubernetes.io/auth-tls-match-cn", "CN=alice")
            .rule(Some("cn.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    );
    objs.push(
        ing("open")
            .rule(Some("open.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    );
    objs.push(
        ing("bad")
            .ann("nginx.ingress.kubernetes.io/auth-tls-secret", "no-ca")
            .rule(Some("bad.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    );
    for engine in ENGINES {
        let (sy, port) = with_tls_port(objs.clone(), engine, &default_file).await;
        let spoof = [
            ("ssl-client-verify", "SUCCESS"),
            ("ssl-client-subject-dn", "CN=admin"),
            ("ssl-client-cert", "forged"),
        ];
        for h2 in [false, true] {
            let what = format!("{engine} h2={h2}");
            let ask = |host, cert| client(host, cert, h2);
            let (alice, bob, mallory) = (Some(&alice), Some(&bob), Some(&mallory));
            let before = web.count() + api.count();
            for (host, path) in [("mtls.test", "/x"), ("mtls.test", "/api/x")] {
                let r = ask(host, None).get(port, path, &spoof).await.unwrap();
                assert_eq!(r.status, 400, "{what} {path}: no certificate");
                let r = ask(host, mallory).get(port, path, &[]).await.unwrap();
                assert_eq!(r.status, 400, "{what} {path}: another CA's");
            }
            assert_eq!(web.count() + api.count(), before, "{what}: nothing reached");
            let r = ask("mtls.test", alice)
                .get(port, "/x", &spoof)
                .await
                .unwrap();
            assert_eq!(r.status, 200, "{what}");
            assert_eq!(r.backend().as_deref(), Some("web"));
            assert_eq!(
                r.seen_header("ssl-client-verify").as_deref(),
                Some("SUCCESS")
            );
            let dn = r.seen_header("ssl-client-subject-dn").unwrap_or_default();
            // RFC 2253: the last RDN the certificate holds comes first.
            assert_eq!(dn, "O=Switchyard Tests,CN=alice", "{what}");
            let issuer = r.seen_header("ssl-client-issuer-dn").unwrap_or_default();
            assert!(
                issuer.contains("ingress mTLS client CA"),
                "{what}: {issuer}"
            );
            assert_eq!(
                r.seen_header("ssl-client-cert"),
                None,
                "{what}: not passed on"
            );
            let r = ask("mtls.test", alice)
                .get(port, "/api/x", &[])
                .await
                .unwrap();
            assert_eq!((r.status, r.backend().as_deref()), (200, Some("api")));
            // A host that asks nothing: the client's copies are its own affair, as nginx's.
            let r = ask("open.test", None).get(port, "/", &[]).await.unwrap();
            assert_eq!(r.status, 200, "{what}");

            // Optional: none is served (told NONE), a bad one goes to the error page.
            let r = ask("opt.test", None).get(port, "/", &spoof).await.unwrap();
            assert_eq!(r.status, 200, "{what}");
            assert_eq!(r.seen_header("ssl-client-verify").as_deref(), Some("NONE"));
            assert_eq!(r.seen_header("ssl-client-cert").as_deref(), Some(""));
            let r = ask("opt.test", mallory).get(port, "/", &[]).await.unwrap();
            assert_eq!(r.status, 302, "{what}");
            assert_eq!(
                r.header("location").as_deref(),
                Some("https://login.test/cert")
            );
            let r = ask("opt.test", alice).get(port, "/", &[]).await.unwrap();
            assert_eq!(r.status, 200, "{what}");
            let cert = r.seen_header("ssl-client-cert").unwrap_or_default();
            assert!(
                cert.starts_with("-----BEGIN%20CERTIFICATE-----%0A"),
                "{what}: {cert}"
            );

            // match-cn: another subject of the same CA is 403.
            let r = ask("cn.test", alice).get(port, "/", &[]).await.unwrap();
            assert_eq!(r.status, 200, "{what}");
            let r = ask("cn.test", bob).get(port, "/", &[]).await.unwrap();
            assert_eq!(r.status, 403, "{what}");

            // A CA that cannot be read: not served, to anyone.
            let r = ask("bad.test", alice).get(port, "/", &[]).await.unwrap();
            assert_eq!(r.status, 403, "{what}");
        }
        // Plain HTTP, where no certificate can be shown: the verifying Ingress refuses it,
        // optional serves it.
        assert_eq!(sy.get_host("mtls.test", "/x").await.status, 400, "{engine}");
        assert_eq!(sy.get_host("opt.test", "/").await.status, 200, "{engine}");
        assert_eq!(sy.get_host("open.test", "/").await.status, 200, "{engine}");
        // The warning says why the bad one is not served.
        assert!(sy.stderr().contains("has no key ca.crt"), "{}", sy.stderr());
    }
}

/// A TLS client naming `host`, with `cert` if any.
fn client<'a>(
    host: &'a str,
    cert: Option<&'a tls_client::Leaf>,
    h2: bool,
) -> tls_client::Client<'a> {
    tls_client::Client {
        sni: Some(host),
        cert,
        h2,
    }
}

/// switchyard on `engine` serving `objs`, with a TLS port (on a free port, `default_file` its
/// default certificate) open; and that port.
async fn with_tls_port(
    objs: Vec<Value>,
    engine: &str,
    default_file: &std::path::Path,
) -> (Switchyard, u16) {
    let port = free_port();
    let port_text = port.to_string();
    let args = [
        "--https-port",
        port_text.as_str(),
        "--ssl-cert",
        default_file.to_str().unwrap(),
    ];
    let sy = switchyard_on(objs, engine, &args).await;
    let up = eventually(Duration::from_secs(10), || async {
        TcpStream::connect(("127.0.0.1", port)).await.is_ok()
    })
    .await;
    assert!(up, "TLS port never opened:\n{}", sy.stderr());
    (sy, port)
}

/// ingress-nginx's `custom-http-errors` with `default-backend`, on both engines: an endpoint's
/// 503 is answered by the default backend, asked for `/` (the query kept) and told why
/// (`X-Code`, `X-Original-URI`, `X-Format`, `X-Namespace`, `X-Ingress-Name`,
/// `X-Service-Name`, `X-Service-Port`), a POST's body going along; a status not listed is
/// relayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_http_errors_are_answered_by_the_default_backend() {
    let web = Backend::start("web").await;
    let api = Backend::start("api").await;
    let failing = Backend::builder("busy")
        .behaviour(Behaviour::Scripted(busy))
        .start()
        .await;
    let mut objs = services(&web, &api);
    objs.push(svc("busy", 80).into());
    objs.push(slice("busy", "", failing.port));
    for (name, codes) in [("errors", "404, 503"), ("other", "404")] {
        objs.push(
            ing(name)
                .ann("nginx.ingress.kubernetes.io/default-backend", "api")
                .ann("nginx.ingress.kubernetes.io/custom-http-errors", codes)
                .rule(
                    Some(&format!("{name}.test")),
                    &[("/", "Prefix", "busy", 80)],
                )
                .into(),
        );
    }
    for engine in ENGINES {
        let sy = switchyard_on(objs.clone(), engine, &[]).await;
        let accept = [("accept", "application/json")];
        let r = get_host_path(&sy, "errors.test", "/shop/item?id=7", &accept).await;
        assert_eq!(r.status, 200, "{engine}: {r:?}");
        assert_eq!(r.backend().as_deref(), Some("api"), "{engine}");
        assert_eq!(r.uri(), "/?id=7", "{engine}");
        for (name, value) in [
            ("x-code", "503"),
            ("x-original-uri", "/shop/item?id=7"),
            ("x-format", "application/json"),
            ("x-namespace", "default"),
            ("x-ingress-name", "errors"),
            ("x-service-name", "busy"),
            ("x-service-port", "80"),
        ] {
            assert_eq!(
                r.seen_header(name).as_deref(),
                Some(value),
                "{engine} {name}"
            );
        }
        let r = get_host_path(&sy, "other.test", "/", &[]).await;
        assert_eq!(r.status, 503, "{engine}: a status not listed is relayed");
        assert_eq!(
            post_status(sy.http_port, "errors.test", "/x", 4, false),
            200
        );
    }
}

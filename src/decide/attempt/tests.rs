//! The attempt's decisions on hand-built tables: routing, pins, retries, ejection, stale
//! pooled connections and dry runs. No sockets, no clock but `Instant::now` passed in.

use super::*;
use crate::table::TcpFrontend;
use crate::table::matcher::{PathRule, PathRules, Router};

const DOWN_FOR: Duration = Duration::from_secs(5);

/// `/web` (strip) -> entry 0 with `addrs`; TCP port 9000 -> the same entry.
fn table(addrs: &[&str], sticky: bool) -> Arc<RoutingTable> {
    let mut entry = Entry::fixture("web", Frontend::Http, addrs);
    entry.cookie_sticky = sticky;
    let mut rules = PathRules::default();
    rules.insert(PathRule {
        prefix: "/web".into(),
        strip: true,
        ignore_case: false,
        exact: false,
        regex: None,
        policy: None,
        target: 0,
    });
    let mut http = Router {
        any_host: rules,
        ..Router::default()
    };
    http.finish();
    Arc::new(RoutingTable {
        entries: vec![Arc::new(entry)],
        http: Arc::new(http),
        tcp: vec![TcpFrontend {
            port: 9000,
            entry: 0,
        }],
        ..Default::default()
    })
}

fn routed(t: &Arc<RoutingTable>, cookie: Option<&str>) -> (Attempt, Route) {
    let mut a = Attempt::new(Some(IpAddr::from([192, 0, 2, 1])));
    let cookies = cookie.iter().map(|c| c.as_bytes());
    let policy = Policy::new(3, DOWN_FOR, true);
    let r = a
        .route(
            Arc::clone(t),
            Frontend::Http,
            None,
            "/web/x",
            cookies,
            &policy,
            Instant::now(),
        )
        .unwrap();
    (a, r)
}

#[test]
fn routes_picks_and_counts_in_flight() {
    let t = table(&["192.0.2.10:80", "192.0.2.11:80"], false);
    let (mut a, r) = routed(&t, None);
    assert_eq!(
        r,
        Route::Proxy {
            strip: Some(Strip::of("/web"))
        }
    );
    let addr = a.next(Instant::now()).unwrap();
    let i = a.current().unwrap();
    assert_eq!(t.entries[0].endpoints[i].addr, addr);
    assert_eq!(
        t.entries[0].endpoints[i]
            .state
            .in_flight
            .load(Ordering::Relaxed),
        1
    );
    a.finish();
    assert_eq!(
        t.entries[0].endpoints[i]
            .state
            .in_flight
            .load(Ordering::Relaxed),
        0
    );
    let (_, r) = routed(&t, None);
    assert_eq!(
        r,
        Route::Proxy {
            strip: Some(Strip::of("/web"))
        }
    );
    let mut miss = Attempt::new(None);
    let policy = Policy::new(1, DOWN_FOR, true);
    let r = miss
        .route(
            t,
            Frontend::Http,
            None,
            "/other",
            std::iter::empty(),
            &policy,
            Instant::now(),
        )
        .unwrap();
    assert_eq!(r, Route::NotFound);
}

#[test]
fn no_endpoint_is_unavailable_and_tcp_routes_by_port() {
    let t = table(&[], false);
    let (_, r) = routed(&t, None);
    assert_eq!(r, Route::Unavailable);
    let t = table(&["192.0.2.10:80"], false);
    let policy = Policy::new(1, DOWN_FOR, true);
    let mut a = Attempt::new(None);
    let r = a.route_tcp(Arc::clone(&t), 9000, &policy, Instant::now());
    assert_eq!(r, Ok(Route::Proxy { strip: None }));
    let mut b = Attempt::new(None);
    assert_eq!(
        b.route_tcp(t, 9001, &policy, Instant::now()),
        Ok(Route::NotFound)
    );
}

#[test]
fn a_connect_failure_ejects_and_retries_elsewhere_until_tries_run_out() {
    let t = table(&["192.0.2.10:80", "192.0.2.11:80", "192.0.2.12:80"], false);
    let (mut a, _) = routed(&t, None);
    let policy = Policy::new(2, DOWN_FOR, true);
    let now = Instant::now();
    let first = a.next(now).unwrap();
    let refused = Failure {
        cause: Cause::ConnectRefused,
        replayable: false,
    };
    let v = a.failed(refused, &policy, now);
    assert_eq!(
        v,
        Verdict {
            retry: true,
            ejected: true,
            endpoint_fault: true
        }
    );
    assert!(a.connect_failed());
    let second = a.next(now).unwrap();
    assert_ne!(first, second);
    // Two tries allowed: the second failure gives up.
    let v = a.failed(refused, &policy, now);
    assert!(!v.retry && v.ejected);
    let e = &t.entries[0];
    let down = e
        .endpoints
        .iter()
        .filter(|ep| ep.state.is_down(now))
        .count();
    assert_eq!(down, 2);
}

#[test]
fn after_connecting_only_replayable_non_timeouts_retry() {
    let policy = Policy::new(3, DOWN_FOR, true);
    let now = Instant::now();
    for (cause, replayable, retry, fault) in [
        (Cause::UpstreamClosed, true, true, true),
        (Cause::UpstreamClosed, false, false, true),
        (Cause::UpstreamTimedOut, true, false, true),
        // A gRPC deadline that passed is the client's budget: no retry, no ejection.
        (Cause::DeadlinePassed, true, false, false),
        (Cause::InvalidResponse, true, true, true),
        (Cause::ClientGone, true, false, false),
        (Cause::TunnelEnded, true, false, false),
    ] {
        let t = table(&["192.0.2.10:80", "192.0.2.11:80"], false);
        let (mut a, _) = routed(&t, None);
        a.next(now).unwrap();
        a.connected(false, now);
        let v = a.failed(Failure { cause, replayable }, &policy, now);
        assert_eq!((v.retry, v.endpoint_fault), (retry, fault), "{cause:?}");
    }
}

#[test]
fn a_stale_pooled_connection_is_replayed_on_the_same_endpoint_without_ejection() {
    let t = table(&["192.0.2.10:80"], false);
    let policy = Policy::new(2, DOWN_FOR, true);
    let now = Instant::now();
    let (mut a, _) = routed(&t, None);
    let first = a.next(now).unwrap();
    a.connected(true, now);
    let v = a.failed(
        Failure {
            cause: Cause::UpstreamClosed,
            replayable: true,
        },
        &policy,
        now,
    );
    assert_eq!(
        v,
        Verdict {
            retry: true,
            ejected: false,
            endpoint_fault: false
        }
    );
    assert_eq!(a.next(now), Some(first));
    assert!(!t.entries[0].endpoints[0].state.is_down(now));
    // A response cut short is never stale, even on a pooled connection.
    a.connected(true, now);
    let v = a.failed(
        Failure {
            cause: Cause::ResponseTruncated,
            replayable: false,
        },
        &policy,
        now,
    );
    assert!(v.ejected && !v.retry);
}

#[test]
fn the_cookie_pins_and_set_cookie_only_when_it_changes() {
    let t = table(&["192.0.2.10:80", "192.0.2.11:80"], true);
    let (mut a, _) = routed(&t, None);
    a.next(Instant::now()).unwrap();
    let id = a.set_cookie().unwrap();
    let i = a.current().unwrap();
    let cookie = id.value();
    let value = cookie.split(';').next().unwrap().to_string();
    for _ in 0..4 {
        let (mut b, _) = routed(&t, Some(&value));
        assert_eq!(b.pinned(), Some(i));
        b.next(Instant::now()).unwrap();
        assert_eq!(b.current(), Some(i));
        assert_eq!(b.set_cookie(), None);
    }
}

#[test]
fn a_dry_run_moves_nothing() {
    let t = table(&["192.0.2.10:80", "192.0.2.11:80"], false);
    let before = t.entries[0].state.cursor.load(Ordering::Relaxed);
    let mut a = Attempt::dry_run(None);
    let policy = Policy::new(1, DOWN_FOR, true);
    a.route(
        Arc::clone(&t),
        Frontend::Http,
        None,
        "/web",
        std::iter::empty(),
        &policy,
        Instant::now(),
    )
    .unwrap();
    let addr = a.next(Instant::now()).unwrap();
    assert_eq!(t.entries[0].state.cursor.load(Ordering::Relaxed), before);
    let i = a.current().unwrap();
    assert_eq!(t.entries[0].endpoints[i].addr, addr);
    assert_eq!(
        t.entries[0].endpoints[i]
            .state
            .in_flight
            .load(Ordering::Relaxed),
        0
    );
}

/// `/app` -> entry 0 under `policy` (what an Ingress adds to its routes).
fn policed(policy: crate::table::policy::RoutePolicy) -> Arc<RoutingTable> {
    let entry = Entry::fixture("app", Frontend::Http, &["192.0.2.10:80"]);
    let mut rules = PathRules::default();
    rules.insert(PathRule {
        prefix: "/app".into(),
        strip: false,
        ignore_case: false,
        exact: false,
        regex: None,
        policy: Some(0),
        target: 0,
    });
    let http = Router {
        any_host: rules.clone(),
        ..Router::default()
    };
    let https = Router {
        any_host: rules,
        ..Router::default()
    };
    Arc::new(RoutingTable {
        entries: vec![Arc::new(entry)],
        http: Arc::new(http),
        https: Arc::new(https),
        policies: Arc::new(vec![policy]),
        ..Default::default()
    })
}

fn open_policy() -> crate::table::policy::RoutePolicy {
    crate::table::policy::RoutePolicy::of("default/app")
}

fn route_as(
    t: &Arc<RoutingTable>,
    frontend: Frontend,
    client: &str,
    https_port: Option<u16>,
) -> Route {
    let mut a = Attempt::new(Some(client.parse().unwrap()));
    let policy = Policy::new(1, DOWN_FOR, true).with_https_port(https_port);
    a.route(
        Arc::clone(t),
        frontend,
        Some(b"h.test"),
        "/app/x",
        std::iter::empty(),
        &policy,
        Instant::now(),
    )
    .unwrap()
}

#[test]
fn a_route_policy_refuses_redirects_or_rewrites() {
    // Source ranges: refused before anything else, on either port.
    let t = policed(crate::table::policy::RoutePolicy {
        allow: vec!["10.0.0.0/8".parse().unwrap()],
        ..open_policy()
    });
    assert_eq!(
        route_as(&t, Frontend::Http, "192.0.2.1", None),
        Route::Forbidden
    );
    assert_eq!(
        route_as(&t, Frontend::Https, "192.0.2.1", None),
        Route::Forbidden
    );
    assert!(matches!(
        route_as(&t, Frontend::Http, "10.1.1.1", None),
        Route::Proxy { strip: None }
    ));

    // HTTPS redirect: plain HTTP only, and only when there is a TLS port to go to.
    let t = policed(crate::table::policy::RoutePolicy {
        https_redirect: Some(308),
        ..open_policy()
    });
    assert_eq!(
        route_as(&t, Frontend::Http, "192.0.2.1", Some(8443)),
        Route::Redirect {
            status: 308,
            https_port: 8443
        }
    );
    assert!(matches!(
        route_as(&t, Frontend::Https, "192.0.2.1", Some(8443)),
        Route::Proxy { .. }
    ));
    assert!(matches!(
        route_as(&t, Frontend::Http, "192.0.2.1", None),
        Route::Proxy { .. }
    ));

    // A rewrite replaces the matched prefix.
    let t = policed(crate::table::policy::RoutePolicy {
        rewrite: Some("/v2".into()),
        ..open_policy()
    });
    let Route::Proxy { strip: Some(s) } = route_as(&t, Frontend::Http, "192.0.2.1", None) else {
        panic!("expected a rewrite");
    };
    assert_eq!(s.apply("/app/x?q=1"), ("/v2", "/x?q=1"));

    // Timeouts: the route's, else the default each engine passes.
    let t = policed(crate::table::policy::RoutePolicy {
        connect_timeout: Some(Duration::from_millis(700)),
        ..open_policy()
    });
    let mut a = Attempt::new(Some("192.0.2.1".parse().unwrap()));
    let p = Policy::new(1, DOWN_FOR, true);
    let cookies = std::iter::empty();
    a.route(
        Arc::clone(&t),
        Frontend::Http,
        None,
        "/app",
        cookies,
        &p,
        Instant::now(),
    )
    .unwrap();
    let default = Duration::from_secs(5);
    assert_eq!(a.connect_timeout(default), Duration::from_millis(700));
    assert_eq!(a.server_timeout(default), default);
    assert_eq!(Attempt::new(None).connect_timeout(default), default);

    // Redirects: app-root for / itself, then the route's location with the request's parts.
    let t = policed(crate::table::policy::RoutePolicy {
        redirect: Some(crate::table::policy::Redirect {
            status: 301,
            location: crate::table::policy::Location::parse("https://n.test$request_uri").unwrap(),
        }),
        ..open_policy()
    });
    assert_eq!(
        route_as(&t, Frontend::Http, "192.0.2.1", None),
        Route::Moved {
            status: 301,
            location: "https://n.test/app/x".into()
        }
    );
}

#[test]
fn https_locations_keep_path_and_query_and_drop_the_port() {
    assert_eq!(
        https_location(b"shop.test:8080", "/a?b=1", 443),
        "https://shop.test/a?b=1"
    );
    assert_eq!(
        https_location(b"shop.test", "/", 8443),
        "https://shop.test:8443/"
    );
    assert_eq!(https_location(b"[::1]:80", "/x", 443), "https://[::1]/x");
    assert_eq!(https_location(b"[::1]", "/x", 443), "https://[::1]/x");
}

#[test]
fn a_request_goes_again_only_whole_unanswered_and_idempotent_or_unprocessed() {
    use BodyKept::{All, Partly};
    for (idempotent, unprocessed, body, answered, replayable) in [
        (true, false, All, false, true),
        (false, true, All, false, true),
        (false, false, All, false, false),
        (true, true, Partly, false, false),
        (true, true, All, true, false),
    ] {
        let sent = Sent {
            idempotent,
            unprocessed,
            body,
            answered,
        };
        assert_eq!(sent.replayable(), replayable, "{sent:?}");
    }
}

/// `table` with three endpoints, its route's retry rule `retry`.
fn retrying(retry: crate::table::policy::Retry) -> Arc<RoutingTable> {
    use crate::table::policy::RoutePolicy;
    let mut t = (*table(&["192.0.2.10:80", "192.0.2.11:80", "192.0.2.12:80"], false)).clone();
    let mut http = (*t.http).clone();
    http.any_host = {
        let mut rules = PathRules::default();
        rules.insert(PathRule {
            prefix: "/web".into(),
            strip: true,
            ignore_case: false,
            exact: false,
            regex: None,
            policy: Some(0),
            target: 0,
        });
        rules
    };
    http.finish();
    t.http = Arc::new(http);
    t.policies = Arc::new(vec![RoutePolicy {
        retry: Some(retry),
        ..RoutePolicy::of("default/x")
    }]);
    Arc::new(t)
}

/// `proxy-next-upstream-timeout`: once the route's time for tries has passed since the first
/// try, a failure is the last, whatever tries are left.
#[test]
fn no_endpoint_is_tried_past_the_route_s_time_for_tries() {
    use crate::table::policy::Retry;
    let t = retrying(Retry {
        tries: 3,
        on_timeout: false,
        within: Some(Duration::from_secs(1)),
        on_status: Default::default(),
        non_idempotent: false,
    });
    let policy = Policy::new(3, DOWN_FOR, true);
    let refused = Failure {
        cause: Cause::ConnectRefused,
        replayable: true,
    };
    let now = Instant::now();
    let (mut a, _) = routed(&t, None);
    a.next(now).unwrap();
    assert!(a.failed(refused, &policy, now).retry, "in time: another");
    a.next(now + Duration::from_millis(500)).unwrap();
    let late = now + Duration::from_millis(1500);
    assert!(
        !a.failed(refused, &policy, late).retry,
        "counted from the first try, not the second"
    );
}

/// `proxy-next-upstream http_503`: a 503 sends a request that may go again to another
/// endpoint while tries and endpoints are left (the last endpoint's answer is relayed); a
/// request that may not go again, or another status, is relayed; `non_idempotent` lets any
/// method go again. The endpoint is not marked down.
#[test]
fn a_status_the_route_names_sends_the_request_to_another_endpoint() {
    use crate::table::policy::{Retry, RetryStatuses};
    let mut on_status = RetryStatuses::default();
    assert!(on_status.insert(503) && !on_status.insert(418));
    let rule = |non_idempotent| Retry {
        tries: 3,
        on_timeout: false,
        within: None,
        on_status,
        non_idempotent,
    };
    let policy = Policy::new(3, DOWN_FOR, true);
    let now = Instant::now();
    let sent = |idempotent| Sent {
        idempotent,
        unprocessed: false,
        body: BodyKept::All,
        answered: false,
    };
    let t = retrying(rule(false));
    let (mut a, _) = routed(&t, None);
    let first = a.next(now).unwrap();
    assert!(
        a.answered(502, sent(true), &policy, now).is_none(),
        "not named"
    );
    assert!(
        a.answered(503, sent(false), &policy, now).is_none(),
        "a POST"
    );
    let v = a.answered(503, sent(true), &policy, now).unwrap();
    assert!(v.retry && !v.ejected);
    let second = a.next(now).unwrap();
    assert_ne!(first, second);
    assert!(a.answered(503, sent(true), &policy, now).is_some());
    a.next(now).unwrap();
    assert!(
        a.answered(503, sent(true), &policy, now).is_none(),
        "the third and last try's answer is relayed"
    );
    let entry = &t.entries[0];
    assert!((0..3).all(|i| !entry.endpoints[i].state.is_down(now)));
    let t = retrying(rule(true));
    let (mut a, _) = routed(&t, None);
    a.next(now).unwrap();
    assert!(
        a.answered(503, sent(false), &policy, now).is_some(),
        "non_idempotent"
    );
}

/// A balanced affinity cookie holds a session key of 16 hex digits; anything else is none,
/// and new keys do not repeat.
#[test]
fn balanced_session_keys_are_read_and_made() {
    assert_eq!(session_key(b"00000000000000ff"), Some(255));
    assert_eq!(session_key(b"0123"), None);
    assert_eq!(session_key(b"1645462341.123.4"), None);
    let keys: std::collections::HashSet<u64> = (0..1000).map(|_| new_session_key()).collect();
    assert_eq!(keys.len(), 1000);
}

/// `custom-http-errors`: a listed status sends the request to the default backend once, told
/// why; another status, or the default backend's own error, is the answer.
#[test]
fn a_listed_error_is_answered_by_the_default_backend_once() {
    use crate::table::policy::RoutePolicy;
    let base = retrying(crate::table::policy::Retry {
        tries: 1,
        on_timeout: false,
        within: None,
        on_status: Default::default(),
        non_idempotent: false,
    });
    let mut t = (*base).clone();
    let mut entries = t.entries.clone();
    entries.push(Arc::new(Entry::fixture(
        "errors",
        Frontend::Http,
        &["192.0.2.99:80"],
    )));
    t.entries = entries;
    t.policies = Arc::new(vec![RoutePolicy {
        fallback: Some(1),
        custom_errors: Some(Arc::from([404u16, 503].as_slice())),
        ..RoutePolicy::of("shop/errors")
    }]);
    let t = Arc::new(t);
    let policy = Policy::new(3, DOWN_FOR, true);
    let now = Instant::now();
    let (mut a, _) = routed(&t, None);
    a.next(now).unwrap();
    let asked = || ("/cart?x=1", Some("text/html"));
    assert!(!a.divert(500, asked, &policy, now), "not listed");
    assert!(a.divert(503, asked, &policy, now));
    let d = a.diverted().unwrap().clone();
    assert_eq!(
        (&*d.code, &*d.namespace, &*d.ingress, &*d.target),
        ("503", "shop", "errors", "/?x=1")
    );
    assert_eq!(a.next(now), Some("192.0.2.99:80".parse().unwrap()));
    assert!(!a.divert(503, asked, &policy, now), "once");
    let ops: Vec<_> = a.request_ops().collect();
    assert!(ops.contains(&HeaderOp::Set(X_CODE, "503")));
    assert!(ops.contains(&HeaderOp::Set(X_FORMAT, "text/html")));
}

//! Explain: where would a request go, and why? A pure function over the routing table that
//! walks the same steps as the data plane (host and path match with its precedence level,
//! entry, stickiness, health gate, endpoint choice) and reports each decision as JSON.
//!
//! The decisions are a dry run of the data plane's own `Attempt` (route, pin, unavailable,
//! pick, set-cookie), so the answer cannot drift from what a request does; this module only
//! describes them. It changes nothing: the round-robin cursor is copied, not advanced, and
//! affinity pins are peeked, not refreshed. It must not do I/O or know about Pingora, tokio or Kubernetes;
//! `admin` serves it at `/explain` and `--dry-run --explain` prints it.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::decide::attempt::{Attempt, Policy, Route, https_location, unrouted};
use crate::table::gateway::{Action, BareRequest, GatewayMatch};
use crate::table::matcher::{self, Level, PathRule};
use crate::table::sticky::{self, COOKIE_NAME};
use crate::table::stream::StreamServe;
use crate::table::{Entry, EntryId, Frontend, HealthGate, RoutingTable};

/// The request to explain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub frontend: Frontend,
    /// The Host header (any case, optional port); `None`: no Host.
    pub host: Option<String>,
    /// Path, optionally with `?query`.
    pub path: String,
    pub client: Option<IpAddr>,
    /// A whole `Cookie` header value, or just the `SERVERID` value.
    pub cookie: Option<String>,
    /// The address the request is sent to (a connection's local address): a Gateway with
    /// that address (`--gateway-addresses`) answers it alone. `None`: the shared Gateways.
    pub local: Option<IpAddr>,
}

impl Query {
    /// From a URL query string:
    /// `host=H&path=P[&client=IP][&cookie=C][&frontend=F][&local=IP]` (percent-encoded;
    /// `frontend` is `http`, `https` or `tcp:PORT`; `local` the address connected to).
    pub fn from_query_string(qs: &str) -> Result<Query, String> {
        let mut q = Query {
            frontend: Frontend::Http,
            host: None,
            path: "/".into(),
            client: None,
            cookie: None,
            local: None,
        };
        for pair in qs.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = percent_decode(v).ok_or_else(|| format!("{k}: bad percent-encoding"))?;
            match k {
                "host" => q.host = (!v.is_empty()).then_some(v),
                "path" => q.path = v,
                "client" => {
                    q.client = Some(
                        v.parse()
                            .map_err(|_| format!("client: {v:?} is not an IP address"))?,
                    );
                }
                "cookie" => q.cookie = (!v.is_empty()).then_some(v),
                "local" => {
                    q.local = Some(
                        v.parse()
                            .map_err(|_| format!("local: {v:?} is not an IP address"))?,
                    );
                }
                "frontend" => q.frontend = parse_frontend(&v)?,
                other => return Err(format!("unknown parameter {other:?}")),
            }
        }
        if !q.path.starts_with('/') {
            return Err(format!("path: {:?} must start with '/'", q.path));
        }
        Ok(q)
    }

    /// From `HOST/PATH`, `/PATH` (no Host), optionally led by `http://` or `https://` (which
    /// picks the frontend); or from `/explain`'s query string (`host=H&path=P...`), which a
    /// host can never look like (`=` is not in a host name).
    pub fn from_target(target: &str) -> Result<Query, String> {
        if target.split('/').next().is_some_and(|h| h.contains('=')) {
            return Query::from_query_string(target);
        }
        let (frontend, rest) = if let Some(r) = target.strip_prefix("https://") {
            (Frontend::Https, r)
        } else {
            (
                Frontend::Http,
                target.strip_prefix("http://").unwrap_or(target),
            )
        };
        let (host, path) = match rest.find('/') {
            Some(0) => (None, rest.to_string()),
            Some(i) => (Some(rest[..i].to_string()), rest[i..].to_string()),
            None if rest.is_empty() => return Err("empty target; use HOST/PATH or /PATH".into()),
            None => (Some(rest.to_string()), "/".to_string()),
        };
        Ok(Query {
            frontend,
            host,
            path,
            client: None,
            cookie: None,
            local: None,
        })
    }
}

fn parse_frontend(v: &str) -> Result<Frontend, String> {
    match v {
        "http" => Ok(Frontend::Http),
        "https" => Ok(Frontend::Https),
        _ => v
            .strip_prefix("tcp:")
            .and_then(|p| p.parse().ok())
            .map(Frontend::Tcp)
            .ok_or_else(|| format!("frontend: {v:?} is not http, https or tcp:PORT")),
    }
}

/// `%XX` and `+` decoding of one query-string value.
fn percent_decode(v: &str) -> Option<String> {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Everything `explain` found, ready for JSON.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    pub generation: u64,
    pub request: RequestView,
    /// The levels looked at, most specific first, up to the one that matched.
    pub precedence: Vec<Step>,
    pub route: Option<RouteView>,
    pub entry: Option<EntryView>,
    pub stickiness: Stickiness,
    /// The endpoint a request would go to now.
    pub endpoint: Option<String>,
    /// The `Set-Cookie` the response would carry.
    pub set_cookie: Option<String>,
    /// `proxy`, `no_route` (answered with `--default-return-code`), `traffic_healthz` (200,
    /// `--traffic-healthz`) or `unavailable` (503).
    pub outcome: &'static str,
    pub summary: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct RequestView {
    pub frontend: String,
    pub host: Option<String>,
    /// The host as matched: lower case, without port or trailing dot.
    pub normalized_host: Option<String>,
    pub path: String,
    pub client: Option<String>,
    pub cookie: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local: Option<String>,
}

/// One precedence level that was considered.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    /// `exact_host`, `wildcard_host`, `any_host` or `tcp_port`.
    pub level: &'static str,
    /// The rule's host (`shop.example.com`, `*.example.com`); absent for any host.
    pub host: Option<String>,
    /// The longest matching prefix at this level, if any.
    pub matched_prefix: Option<String>,
    pub note: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct RouteView {
    pub level: &'static str,
    pub host: Option<String>,
    pub prefix: String,
    /// The rule matches this whole path only (an Ingress `Exact` path).
    pub exact: bool,
    /// The rule's path is a regular expression that the whole path matches (a Gateway
    /// `RegularExpression` path); `prefix` is its source.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub regex: bool,
    pub strip_prefix: bool,
    /// The Ingress (`namespace/name`) whose settings apply to this route.
    pub ingress: Option<String>,
    /// The request target the endpoint receives.
    pub forwarded_path: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct EntryView {
    pub name: String,
    pub service: String,
    pub port: u16,
    pub algorithm: &'static str,
    pub cookie_sticky: bool,
    pub client_ip_affinity_seconds: Option<u64>,
    /// `http`, `h2c`, `https` or `h2`: how the endpoints are spoken to.
    pub backend_protocol: &'static str,
    /// Over TLS: the server name sent and verified; absent in clear.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_sni: Option<String>,
    /// Over TLS: whether the endpoints' certificates are verified (off only by
    /// `lb.backend-insecure-skip-verify`); absent in clear.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_verify: Option<bool>,
    /// Over TLS: the Service's own CA bundle (`lb.backend-ca-file`); absent when
    /// `--backend-ca-file` (or the system's roots) applies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_ca_file: Option<String>,
    /// Over TLS: the Secret or ConfigMap whose `ca.crt` the endpoints are verified against
    /// (`lb.backend-ca-secret`, `lb.backend-ca-configmap`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_ca_object: Option<CaObjectView>,
    pub health_gate: HealthGate,
    pub endpoints: Vec<EndpointView>,
}

/// Where a Service's CA bundle comes from.
#[derive(Debug, Clone, Serialize)]
pub struct CaObjectView {
    /// `Secret` or `ConfigMap`.
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub key: &'static str,
    /// It held a CA certificate when the table was built; when `false`, TLS connections to
    /// the endpoints fail (502) until it does.
    pub resolved: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct EndpointView {
    pub address: String,
    /// `up`, `down` (active checks), `ejected` (failed connect, for a while), `draining`.
    pub state: &'static str,
    pub in_flight: u32,
    pub cookie_id: String,
    pub last_check: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Stickiness {
    /// `none`, `cookie` or `client_ip`.
    pub mode: &'static str,
    pub pinned: Option<String>,
    pub decision: String,
}

/// The state of endpoint `i` in words.
pub fn endpoint_state(entry: &Entry, i: usize, now: Instant) -> &'static str {
    let e = &entry.endpoints[i];
    if e.draining {
        "draining"
    } else if !e.state.health.is_up() {
        "down"
    } else if e.state.is_down(now) {
        "ejected"
    } else {
        "up"
    }
}

/// Explains `q` against `table` at `now` (`fail_open`: `--health-fail-open`).
pub fn explain(table: &Arc<RoutingTable>, q: &Query, now: Instant, policy: &Policy) -> Explanation {
    let (raw_path, query) = match q.path.split_once('?') {
        Some((p, qs)) => (p, Some(qs)),
        None => (q.path.as_str(), None),
    };
    // Routed as the data plane routes it: dot-segments removed.
    let normalized = crate::decide::target::normalize_path(raw_path);
    let path = &*normalized;
    let mut host_buf = [0u8; 255];
    let normalized = q
        .host
        .as_deref()
        .and_then(|h| matcher::normalize_host(h.as_bytes(), &mut host_buf))
        .map(|h| h.with_port.to_string());
    let mut x = Explanation {
        generation: table.generation,
        request: RequestView {
            frontend: q.frontend.label(),
            host: q.host.clone(),
            normalized_host: normalized.clone(),
            path: q.path.clone(),
            client: q.client.map(|c| c.to_string()),
            cookie: q.cookie.clone(),
            local: q.local.map(|l| l.to_string()),
        },
        precedence: Vec::new(),
        route: None,
        entry: None,
        stickiness: Stickiness {
            mode: "none",
            pinned: None,
            decision: "no stickiness".into(),
        },
        endpoint: None,
        set_cookie: None,
        outcome: "no_route",
        summary: String::new(),
    };

    let target = match q.frontend {
        Frontend::Tcp(port) => {
            let hit = table.tcp.iter().find(|t| t.port == port).map(|t| t.entry);
            let (target, note) = match (hit, table.streams.port(None, port)) {
                (Some(e), _) => (
                    Some(e),
                    format!("TCP port {port} forwards every connection to its entry"),
                ),
                (None, Some(StreamServe::Tcp(to))) => (
                    to.peek().and_then(|(_, b)| b.entry),
                    format!(
                        "Gateway TCP listener on port {port}: its route's next backend by weight"
                    ),
                ),
                (None, Some(StreamServe::Tls(_))) => (
                    None,
                    format!(
                        "Gateway TLS listener on port {port}: connections go by the server \
                         name of their hello, which this query does not give"
                    ),
                ),
                (None, None) => (None, format!("no TCP frontend on port {port}")),
            };
            x.precedence.push(Step {
                level: "tcp_port",
                host: None,
                matched_prefix: None,
                note,
            });
            target
        }
        Frontend::Http | Frontend::Https => match route_gateway(table, q, path, query, &mut x) {
            GatewayStep::NotTaken => route_http(table, q, path, query, &mut x),
            GatewayStep::Entry(id) => id,
            GatewayStep::Answered => return x,
        },
    };
    let Some(entry) = target.and_then(|id| table.entry(id)) else {
        x.summary = match q.frontend {
            Frontend::Tcp(_) => "no TCP frontend on that port".into(),
            _ if unrouted(path, policy) == Route::Healthz => {
                x.outcome = "traffic_healthz";
                "no route matches /healthz: answered 200 ok (--traffic-healthz)".into()
            }
            _ => "no route matches: the request is answered with --default-return-code".into(),
        };
        return x;
    };
    x.entry = Some(entry_view(entry, now, policy.fail_open));
    // The decisions: a dry run of the attempt every engine makes.
    let mut attempt = Attempt::dry_run(q.client);
    attempt.set_local_ip(q.local);
    // Explained as for a client whose certificate the host's listener verified.
    if q.frontend == Frontend::Https
        && let Some(v) =
            table.client_validation((q.local, None), q.host.as_deref().map(str::as_bytes))
    {
        attempt.set_client_ca(Some(Arc::clone(&v.ca)));
        if let Some(auth) = &v.ingress {
            x.precedence.push(Step {
                level: "client_certificate",
                host: q.host.clone(),
                matched_prefix: None,
                note: format!(
                    "the host verifies client certificates (Ingress {}, auth-tls-verify-client \
                     {:?}): explained as for a client whose certificate verified{}",
                    v.origin,
                    auth.verify,
                    if auth.match_cn.is_some() {
                        " and whose subject auth-tls-match-cn finds"
                    } else {
                        ""
                    }
                ),
            });
        }
    }
    let policy = Policy {
        tries: 1,
        passive_down: Duration::ZERO,
        ..*policy
    };
    let cookie = q.cookie.as_deref().map(|c| {
        if c.contains('=') {
            c.to_string()
        } else {
            format!("{COOKIE_NAME}={c}")
        }
    });
    let cookies = cookie.iter().map(|c| c.as_bytes());
    let route = match q.frontend {
        Frontend::Tcp(port) => attempt.route_tcp(Arc::clone(table), port, &policy, now),
        Frontend::Http | Frontend::Https => attempt.route(
            Arc::clone(table),
            q.frontend,
            q.host.as_deref().map(str::as_bytes),
            path,
            cookies,
            &policy,
            now,
        ),
    };
    match &route {
        Ok(Route::Proxy { strip: Some(strip) }) => {
            if let Some(r) = x.route.as_mut() {
                let (head, rest) = strip.apply(&r.forwarded_path);
                r.forwarded_path = format!("{head}{rest}");
            }
        }
        Ok(Route::Forbidden) => {
            x.outcome = "forbidden";
            x.summary = "the route's source ranges do not admit this client: 403".into();
            return x;
        }
        &Ok(Route::Redirect { status, https_port }) => {
            let pq = x.route.as_ref().map_or("/", |r| r.forwarded_path.as_str());
            let host = q.host.as_deref().unwrap_or_default().as_bytes();
            x.outcome = "redirect";
            x.summary = format!(
                "a host served over TLS: {status} redirect to {}",
                https_location(host, pq, https_port)
            );
            return x;
        }
        _ => {}
    }
    choose(entry, q, now, route, &mut attempt, &mut x);
    x
}

/// What the Gateway routes made of an explained request.
enum GatewayStep {
    /// No listener takes the host: the Service and Ingress routes decide.
    NotTaken,
    /// A rule sends it to this entry (the backend the next request would get), or none (404).
    Entry(Option<EntryId>),
    /// A rule answers it itself (a redirect, an error); `x` says how.
    Answered,
}

/// The Gateway step of the explanation: the same lookup the engines make, for a `GET` with no
/// headers or query conditions beyond the URL's.
fn route_gateway(
    table: &RoutingTable,
    q: &Query,
    path: &str,
    query: Option<&str>,
    x: &mut Explanation,
) -> GatewayStep {
    let gw = &table.gateway;
    let https = q.frontend == Frontend::Https;
    let host = q.host.as_deref().map(str::as_bytes);
    let req = BareRequest {
        method: b"GET",
        query,
    };
    if let Some(v) = https
        .then(|| table.client_validation((q.local, None), host))
        .flatten()
        .filter(|v| v.ingress.is_none())
    {
        let note = if v.insecure_fallback {
            "verifies client certificates but serves clients without a valid one too \
             (AllowInsecureFallback)"
        } else {
            "verifies client certificates: a request on a connection whose certificate did \
             not verify against its CA is answered 421; below, a client whose did"
        };
        x.precedence.push(Step {
            level: "gateway",
            host: q.host.clone(),
            matched_prefix: None,
            note: format!("listener {} {note}", v.origin),
        });
    }
    let (prule, candidate) = match gw.lookup_at((q.local, None), https, host, path, &req) {
        GatewayMatch::NotTaken => return GatewayStep::NotTaken,
        GatewayMatch::NoRoute => {
            x.precedence.push(Step {
                level: "gateway",
                host: q.host.clone(),
                matched_prefix: None,
                note: "a Gateway listener takes this host; no HTTPRoute rule matches it".into(),
            });
            return GatewayStep::Entry(None);
        }
        GatewayMatch::Matched(prule, candidate) => (prule, candidate),
    };
    let rule = &*candidate.rule;
    x.precedence.push(Step {
        level: "gateway",
        host: q.host.clone(),
        matched_prefix: Some(prule.prefix.to_string()),
        note: format!(
            "HTTPRoute {} ({} path)",
            rule.origin,
            if prule.regex.is_some() {
                "regular-expression"
            } else if prule.exact {
                "exact"
            } else {
                "prefix"
            }
        ),
    });
    let pq = match query {
        Some(q) => format!("{path}?{q}"),
        None => path.to_string(),
    };
    x.route = Some(RouteView {
        level: "gateway",
        host: q.host.clone(),
        prefix: prule.prefix.to_string(),
        exact: prule.exact,
        regex: prule.regex.is_some(),
        strip_prefix: false,
        ingress: None,
        forwarded_path: pq,
    });
    match &rule.action {
        Action::Fail(status) => {
            x.outcome = "error";
            x.summary = format!(
                "{}: its backends cannot be used, answered {status}",
                rule.origin
            );
            GatewayStep::Answered
        }
        Action::Redirect(r) => {
            let location = crate::decide::gateway::location(
                r,
                https,
                host.unwrap_or_default(),
                path,
                query,
                &prule.prefix,
                gw.listener_port(https, None),
            );
            x.outcome = "redirect";
            x.summary = format!("{}: {} redirect to {location}", rule.origin, r.status);
            GatewayStep::Answered
        }
        Action::Backends(b) => match b.peek().and_then(|(_, b)| b.entry) {
            Some(id) => GatewayStep::Entry(Some(id)),
            None => {
                x.outcome = "error";
                x.summary = format!(
                    "{}: the next request goes to a backend that does not resolve: 500",
                    rule.origin
                );
                GatewayStep::Answered
            }
        },
    }
}

/// Host and path matching, with the levels considered; returns the matched entry.
fn route_http(
    table: &RoutingTable,
    q: &Query,
    path: &str,
    query: Option<&str>,
    x: &mut Explanation,
) -> Option<EntryId> {
    let router = table.router(q.frontend)?;
    // The data plane's own walk over the host levels; each level it visits is a step.
    let mut level = None;
    let rule = router.walk(q.host.as_deref().map(str::as_bytes), |lvl, rules| {
        let (name, host) = match lvl {
            Level::ExactHost(h) => ("exact_host", Some(h.to_string())),
            Level::WildcardHost(s) => ("wildcard_host", Some(format!("*{s}"))),
            Level::OneLabelHost(s) => ("one_label_host", Some(format!("*{s}"))),
            Level::AnyHost => ("any_host", None),
        };
        let hit = rules.lookup(path);
        let note = match hit {
            Some(r) if r.exact => format!("exact path {} matches (beats every prefix)", r.prefix),
            Some(r) => format!(
                "prefix {}{} matches (longest matching prefix at this level)",
                if r.ignore_case { "-i " } else { "" },
                r.prefix
            ),
            None if lvl == Level::AnyHost => format!(
                "none of the {} host-less prefixes matches {path}",
                rules.len()
            ),
            None => format!(
                "this host has {} rule(s), none matches {path}: falls through to the next level",
                rules.len()
            ),
        };
        x.precedence.push(Step {
            level: name,
            host: host.clone(),
            matched_prefix: hit.map(|r| r.prefix.to_string()),
            note,
        });
        if hit.is_some() {
            level = Some((name, host));
        }
        hit
    });
    let rule: &PathRule<EntryId> = rule?;
    let (lvl, host) = level.unwrap_or(("any_host", None));
    let pq = match query {
        Some(qs) => format!("{path}?{qs}"),
        None => path.to_string(),
    };
    // The target as given; the attempt's own rewrite replaces it once the route is decided.
    x.route = Some(RouteView {
        level: lvl,
        host,
        prefix: rule.prefix.to_string(),
        exact: rule.exact,
        regex: false,
        strip_prefix: rule.strip,
        ingress: rule
            .policy
            .and_then(|p| table.policies.get(p as usize))
            .map(|p| p.origin.to_string()),
        forwarded_path: pq,
    });
    Some(rule.target)
}

fn entry_view(entry: &Entry, now: Instant, fail_open: bool) -> EntryView {
    let tls = entry.upstream.protocol.tls();
    EntryView {
        name: entry.name.to_string(),
        service: format!("{}/{}", entry.key.namespace, entry.key.service),
        port: entry.key.port,
        algorithm: entry.algorithm.as_str(),
        cookie_sticky: entry.cookie_sticky,
        client_ip_affinity_seconds: entry.client_ip_affinity.map(|d| d.as_secs()),
        backend_protocol: entry.upstream.protocol.label(),
        backend_sni: tls.then(|| entry.upstream.sni.to_string()),
        backend_verify: tls.then_some(entry.upstream.verify),
        backend_ca_file: entry.upstream.ca_file.as_deref().map(str::to_string),
        backend_ca_object: entry.upstream.ca_bundle.as_ref().map(|b| CaObjectView {
            kind: b.kind,
            namespace: b.namespace.to_string(),
            name: b.name.to_string(),
            key: crate::table::upstream::CA_KEY,
            resolved: b.pem.is_some(),
        }),
        health_gate: entry.health_gate(fail_open),
        endpoints: (0..entry.endpoints.len())
            .map(|i| {
                let e = &entry.endpoints[i];
                EndpointView {
                    address: e.addr.to_string(),
                    state: endpoint_state(entry, i, now),
                    in_flight: e.state.in_flight.load(Ordering::Relaxed),
                    cookie_id: sticky::format_cookie_id(e.cookie_id),
                    last_check: e.state.health.last().code(),
                }
            })
            .collect(),
    }
}

/// Describes the attempt's stickiness and endpoint decisions.
fn choose(
    entry: &Entry,
    q: &Query,
    now: Instant,
    route: Result<Route, crate::decide::attempt::RouteError>,
    attempt: &mut Attempt,
    x: &mut Explanation,
) {
    let addr = |i: usize| entry.endpoints[i].addr.to_string();
    let pinned = if entry.cookie_sticky {
        x.stickiness.mode = "cookie";
        let value = q.cookie.as_deref().and_then(|c| {
            if c.contains('=') {
                sticky::find_cookie(c.as_bytes(), COOKIE_NAME)
            } else {
                Some(c.as_bytes())
            }
        });
        let named = value.and_then(|v| entry.endpoint_by_cookie(v));
        let pinned = attempt.pinned();
        x.stickiness.decision = match (value, named, pinned) {
            (None, _, _) => {
                "no SERVERID cookie: a new endpoint is picked and pinned by Set-Cookie".into()
            }
            (Some(_), None, _) => {
                "SERVERID names no endpoint of this entry (gone, or not ours): re-pinned".into()
            }
            (Some(_), Some(i), None) => format!(
                "SERVERID names {}, which is {}: re-pinned",
                addr(i),
                endpoint_state(entry, i, now)
            ),
            (Some(_), Some(i), Some(_)) if entry.endpoints[i].draining => format!(
                "SERVERID pins the client to {} (draining: it still serves its pinned clients)",
                addr(i)
            ),
            (Some(_), Some(i), Some(_)) => format!("SERVERID pins the client to {}", addr(i)),
        };
        pinned
    } else if let Some(timeout) = entry.client_ip_affinity {
        x.stickiness.mode = "client_ip";
        match q.client {
            None => {
                x.stickiness.decision =
                    "client-IP affinity, but no client given: pass client=IP to see its pin".into();
                None
            }
            Some(ip) => {
                let named = entry
                    .state
                    .affinity
                    .peek(&ip, now, timeout)
                    .map(|a| (a, entry.endpoint_by_addr(&a)));
                let pinned = attempt.pinned();
                x.stickiness.decision = match (named, pinned) {
                    (None, _) => format!(
                        "no live pin for {ip}: a new endpoint is picked and pinned for {} s idle",
                        timeout.as_secs()
                    ),
                    (Some((a, None)), _) => {
                        format!("{ip} was pinned to {a}, which left the table: re-pinned")
                    }
                    (Some((a, Some(i))), None) => format!(
                        "{ip} is pinned to {a}, which is {}: re-pinned",
                        endpoint_state(entry, i, now)
                    ),
                    (Some((a, Some(_))), Some(_)) => format!("{ip} is pinned to {a}"),
                };
                pinned
            }
        }
    } else {
        None
    };
    x.stickiness.pinned = pinned.map(addr);

    let gate = x
        .entry
        .as_ref()
        .map_or(HealthGate::SkipDown, |e| e.health_gate);
    let takes_new = entry.endpoints.iter().any(|e| e.takes_new());
    if matches!(route, Ok(Route::Unavailable)) {
        x.outcome = "unavailable";
        x.summary = if entry.endpoints.is_empty() {
            format!("entry {} has no endpoints: 503", entry.name)
        } else if !takes_new {
            format!(
                "every endpoint of {} is draining and the client is not pinned: 503",
                entry.name
            )
        } else {
            format!(
                "every endpoint of {} is down and --health-fail-open is false: 503",
                entry.name
            )
        };
        return;
    }
    let chosen = attempt.next(now).and(attempt.current());
    let Some(i) = chosen else {
        x.outcome = "unavailable";
        x.summary = format!("no endpoint of {} is eligible: 503", entry.name);
        return;
    };
    x.outcome = "proxy";
    x.endpoint = Some(addr(i));
    x.set_cookie = attempt.set_cookie().map(|c| c.value());
    let how = if pinned.is_some() {
        "the pinned endpoint".to_string()
    } else {
        let gate_note = match gate {
            HealthGate::FailOpen => " (every endpoint is down: fail-open ignores the checks)",
            _ => "",
        };
        format!("{} picks it{gate_note}", entry.algorithm)
    };
    let route = x
        .route
        .as_ref()
        .map(|r| format!(" via {} {}", r.level.replace('_', " "), r.prefix))
        .unwrap_or_default();
    x.summary = format!("entry {}{route}; endpoint {} ({how})", entry.name, addr(i));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::CheckResult;
    use crate::table::balance::Pick;
    use crate::table::matcher::{PathRules, Router};
    use crate::table::upstream::{BackendProtocol, Upstream};

    fn entry(name: &str, addrs: &[&str]) -> Entry {
        Entry::fixture(name, Frontend::Http, addrs)
    }

    const POLICY: Policy = Policy {
        tries: 1,
        passive_down: Duration::ZERO,
        fail_open: true,
        traffic_healthz: false,
        https_port: None,
    };

    fn rules<T: Clone>(list: &[(&str, bool, T)]) -> PathRules<T> {
        let mut r = PathRules::default();
        for (prefix, strip, target) in list.iter().cloned() {
            r.insert(PathRule {
                prefix: prefix.into(),
                strip,
                ignore_case: false,
                exact: false,
                regex: None,
                policy: None,
                target,
            });
        }
        r
    }

    /// web (path route /web, two endpoints), shop (exact host, /api only), wild (*.example.com)
    fn table() -> RoutingTable {
        let mut shop = entry("shop", &["10.0.0.9:80"]);
        shop.cookie_sticky = true;
        let mut http = Router {
            any_host: rules(&[("/web", true, 0)]),
            ..Router::default()
        };
        http.exact
            .insert("shop.example.com".into(), rules(&[("/api", false, 1)]));
        http.wildcard
            .push((".example.com".into(), rules(&[("/", false, 2)])));
        http.finish();
        RoutingTable {
            generation: 4,
            entries: [
                entry("web", &["10.0.0.1:80", "10.0.0.2:80"]),
                shop,
                entry("wild", &["10.0.0.5:80"]),
            ]
            .into_iter()
            .map(std::sync::Arc::new)
            .collect(),
            http: std::sync::Arc::new(http),
            ..Default::default()
        }
    }

    fn q(host: Option<&str>, path: &str) -> Query {
        Query {
            frontend: Frontend::Http,
            host: host.map(str::to_string),
            path: path.into(),
            client: None,
            cookie: None,
            local: None,
        }
    }

    #[test]
    fn levels_and_fall_through_are_explained() {
        let t = std::sync::Arc::new(table());
        let now = Instant::now();
        let x = explain(
            &t,
            &q(Some("Shop.Example.com:80"), "/api/x?y=1"),
            now,
            &POLICY,
        );
        let r = x.route.as_ref().unwrap();
        assert_eq!((r.level, r.prefix.as_str()), ("exact_host", "/api"));
        assert_eq!(r.forwarded_path, "/api/x?y=1");
        assert_eq!(x.entry.as_ref().unwrap().name, "shop");
        assert_eq!(x.generation, 4);

        let x = explain(&t, &q(Some("shop.example.com"), "/web/a"), now, &POLICY);
        let levels: Vec<_> = x.precedence.iter().map(|s| s.level).collect();
        assert_eq!(levels, ["exact_host", "wildcard_host"]);
        assert!(x.precedence[0].note.contains("falls through"));
        assert_eq!(x.route.as_ref().unwrap().level, "wildcard_host");
        assert_eq!(x.entry.as_ref().unwrap().name, "wild");

        let x = explain(&t, &q(None, "/web/a?b"), now, &POLICY);
        let r = x.route.as_ref().unwrap();
        assert_eq!((r.level, r.strip_prefix), ("any_host", true));
        assert_eq!(r.forwarded_path, "/a?b");

        let x = explain(&t, &q(None, "/nothing"), now, &POLICY);
        assert_eq!(x.outcome, "no_route");
        assert!(x.route.is_none() && x.entry.is_none());

        let x = explain(&t, &q(None, "/healthz"), now, &POLICY);
        assert_eq!(x.outcome, "no_route", "--traffic-healthz off");
        let on = POLICY.with_traffic_healthz(true);
        let x = explain(&t, &q(None, "/healthz"), now, &on);
        assert_eq!(x.outcome, "traffic_healthz");
        let x = explain(&t, &q(None, "/healthz/x"), now, &on);
        assert_eq!(x.outcome, "no_route", "only /healthz itself");
    }

    /// An Ingress's route: one-label host, exact path, and its policy's outcomes.
    #[test]
    fn ingress_routes_and_their_policies_are_explained() {
        use crate::table::policy::RoutePolicy;
        let mut t = table();
        let mut rules = PathRules::default();
        for (prefix, exact, policy) in [("/app", false, 0), ("/login", true, 1), ("/v1", false, 2)]
        {
            rules.insert(PathRule {
                prefix: prefix.into(),
                strip: false,
                ignore_case: false,
                exact,
                regex: None,
                policy: Some(policy),
                target: 0,
            });
        }
        let mut http = (*t.http).clone();
        http.one_label.insert(".apps.test".into(), rules);
        t.http = std::sync::Arc::new(http);
        let policy = |f: fn(&mut RoutePolicy)| {
            let mut p = RoutePolicy::of("default/site");
            f(&mut p);
            p
        };
        t.policies = std::sync::Arc::new(vec![
            policy(|p| p.rewrite = Some("/".into())),
            policy(|p| p.https_redirect = Some(308)),
            policy(|p| p.allow = vec!["10.0.0.0/8".parse().unwrap()]),
        ]);
        let t = std::sync::Arc::new(t);
        let now = Instant::now();
        let x = explain(&t, &q(Some("a.apps.test"), "/app/x"), now, &POLICY);
        let r = x.route.as_ref().unwrap();
        assert_eq!(r.level, "one_label_host");
        assert_eq!(r.ingress.as_deref(), Some("default/site"));
        assert_eq!(r.forwarded_path, "/x", "the rewrite the attempt applies");
        assert_eq!(x.outcome, "proxy");

        let x = explain(
            &t,
            &q(Some("a.apps.test"), "/login"),
            now,
            &POLICY.with_https_port(Some(8443)),
        );
        assert!(x.route.as_ref().unwrap().exact);
        assert_eq!(x.outcome, "redirect");
        assert!(
            x.summary.contains("https://a.apps.test:8443/login"),
            "{}",
            x.summary
        );

        let mut from = q(Some("a.apps.test"), "/v1/z");
        from.client = Some("192.0.2.1".parse().unwrap());
        let x = explain(&t, &from, now, &POLICY);
        assert_eq!(x.outcome, "forbidden");
        // Two labels: not this Ingress's wildcard.
        let x = explain(&t, &q(Some("b.a.apps.test"), "/app/x"), now, &POLICY);
        assert_ne!(x.route.as_ref().map(|r| r.level), Some("one_label_host"));
    }

    #[test]
    fn the_backend_protocol_and_its_tls_settings_are_shown() {
        let mut t = table();
        let x = explain(
            &std::sync::Arc::new(t.clone()),
            &q(None, "/web"),
            Instant::now(),
            &POLICY,
        );
        let e = x.entry.unwrap();
        assert_eq!(
            (e.backend_protocol, e.backend_sni, e.backend_verify),
            ("http", None, None)
        );
        let mut web = (*t.entries[0]).clone();
        web.upstream = Upstream {
            protocol: BackendProtocol::H2,
            sni: "api.internal".into(),
            verify: false,
            ca_file: None,
            ca_bundle: Some(crate::table::upstream::CaBundle {
                kind: "Secret",
                namespace: "default".into(),
                name: "web-ca".into(),
                pem: None,
            }),
            client_cert: None,
            send_proxy: false,
            subject_alt_names: None,
        };
        t.entries[0] = std::sync::Arc::new(web);
        let x = explain(
            &std::sync::Arc::new(t),
            &q(None, "/web"),
            Instant::now(),
            &POLICY,
        );
        let json = serde_json::to_value(x.entry.unwrap()).unwrap();
        assert_eq!(json["backend_protocol"], "h2");
        assert_eq!(json["backend_sni"], "api.internal");
        assert_eq!(json["backend_verify"], false);
        assert_eq!(
            json["backend_ca_object"],
            serde_json::json!({"kind": "Secret", "namespace": "default", "name": "web-ca",
                "key": "ca.crt", "resolved": false})
        );
    }

    /// An Ingress host that verifies client certificates, `match-cn` too: explained as for a
    /// client that passes, with a step saying so.
    #[test]
    fn an_ingress_host_verifying_clients_is_explained_for_one_that_passes() {
        use crate::table::cert_auth::{IngressCertAuth, VerifyClient};
        use crate::table::client_validation::{ClientValidation, ClientValidations, IngressHosts};
        use crate::table::pattern::Pattern;
        let mut t = table();
        t.https = t.http.clone();
        let v = std::sync::Arc::new(ClientValidation {
            ca: std::sync::Arc::from(&b"ca"[..]),
            insecure_fallback: false,
            origin: "default/shop".into(),
            ingress: Some(IngressCertAuth {
                verify: VerifyClient::On,
                depth: 1,
                error_page: None,
                pass_certificate: false,
                match_cn: Some(Pattern::search("CN=alice").unwrap()),
            }),
        });
        let hosts = IngressHosts::new(vec![("shop.example.com".into(), v)]);
        t.client_validation =
            std::sync::Arc::new(ClientValidations::default().with_ingress_hosts(hosts));
        let query = Query {
            frontend: Frontend::Https,
            ..q(Some("shop.example.com"), "/api/x")
        };
        let x = explain(&std::sync::Arc::new(t), &query, Instant::now(), &POLICY);
        assert_eq!(x.outcome, "proxy", "{x:?}");
        assert!(
            x.precedence
                .iter()
                .any(|s| s.level == "client_certificate" && s.note.contains("match-cn")),
            "{:?}",
            x.precedence
        );
    }

    #[test]
    fn explaining_does_not_consume_the_round_robin_turn() {
        let t = std::sync::Arc::new(table());
        let now = Instant::now();
        let first = explain(&t, &q(None, "/web"), now, &POLICY).endpoint;
        assert_eq!(explain(&t, &q(None, "/web"), now, &POLICY).endpoint, first);
        // The data plane's own choice agrees, and then the turn moves on.
        let web = &t.entries[0];
        let pick = Pick {
            algorithm: web.algorithm,
            cursor: &web.state.cursor,
            client_hash: 0,
            maxconn: None,
        };
        let i = web.choose(&pick, web.health_gate(true), now, &[]).unwrap();
        assert_eq!(Some(web.endpoints[i].addr.to_string()), first);
        assert_ne!(explain(&t, &q(None, "/web"), now, &POLICY).endpoint, first);
    }

    #[test]
    fn cookie_decisions() {
        let t = std::sync::Arc::new(table());
        let now = Instant::now();
        let shop = &t.entries[1];
        let id = sticky::format_cookie_id(shop.endpoints[0].cookie_id);
        let mut query = q(Some("shop.example.com"), "/api");
        let x = explain(&t, &query, now, &POLICY);
        assert_eq!(x.stickiness.mode, "cookie");
        assert!(x.set_cookie.is_some(), "no cookie: one is set");
        query.cookie = Some(format!("a=b; SERVERID={id}"));
        let x = explain(&t, &query, now, &POLICY);
        assert_eq!(x.stickiness.pinned.as_deref(), Some("10.0.0.9:80"));
        assert!(x.set_cookie.is_none(), "valid cookie: nothing set");
        query.cookie = Some("0123456789abcdef".into());
        let x = explain(&t, &query, now, &POLICY);
        assert!(x.stickiness.decision.contains("re-pinned"), "{x:?}");
    }

    #[test]
    fn health_shows_in_the_choice() {
        let t = std::sync::Arc::new(table());
        let now = Instant::now();
        for _ in 0..3 {
            t.entries[0].endpoints[0]
                .state
                .health
                .record(CheckResult::ConnectFailed, 2, 3);
        }
        for _ in 0..3 {
            let x = explain(&t, &q(None, "/web"), now, &POLICY);
            assert_eq!(x.endpoint.as_deref(), Some("10.0.0.2:80"));
            assert_eq!(x.entry.as_ref().unwrap().endpoints[0].state, "down");
        }
        for _ in 0..3 {
            t.entries[0].endpoints[1]
                .state
                .health
                .record(CheckResult::Timeout, 2, 3);
        }
        let closed = Policy {
            fail_open: false,
            ..POLICY
        };
        let x = explain(&t, &q(None, "/web"), now, &closed);
        assert_eq!(x.outcome, "unavailable");
        let x = explain(&t, &q(None, "/web"), now, &POLICY);
        assert_eq!(x.outcome, "proxy");
        assert!(x.summary.contains("fail-open"), "{}", x.summary);
    }

    #[test]
    fn queries_parse() {
        let q = Query::from_query_string(
            "host=a.example.com&path=%2Fx%3Fy%3D1&client=10.1.2.3&cookie=SERVERID%3Dab&frontend=https",
        )
        .unwrap();
        assert_eq!(q.host.as_deref(), Some("a.example.com"));
        assert_eq!(q.path, "/x?y=1");
        assert_eq!(q.client, Some("10.1.2.3".parse().unwrap()));
        assert_eq!(q.cookie.as_deref(), Some("SERVERID=ab"));
        assert_eq!(q.frontend, Frontend::Https);
        assert!(Query::from_query_string("path=x").is_err());
        assert!(Query::from_query_string("client=nope").is_err());
        assert!(Query::from_query_string("bogus=1").is_err());
        assert_eq!(
            Query::from_query_string("local=127.0.0.2").unwrap().local,
            Some("127.0.0.2".parse().unwrap())
        );
        assert!(Query::from_query_string("local=nope").is_err());
        assert_eq!(
            Query::from_query_string("frontend=tcp:3306")
                .unwrap()
                .frontend,
            Frontend::Tcp(3306)
        );

        let t = Query::from_target("shop.example.com/api/x").unwrap();
        assert_eq!(
            (t.host.as_deref(), t.path.as_str()),
            (Some("shop.example.com"), "/api/x")
        );
        let t = Query::from_target("/web").unwrap();
        assert_eq!((t.host, t.path.as_str()), (None, "/web"));
        let t = Query::from_target("https://a.com").unwrap();
        assert_eq!((t.frontend, t.path.as_str()), (Frontend::Https, "/"));
        assert!(Query::from_target("").is_err());
        // /explain's query string, as docs/migration.md writes it.
        for qs in ["host=h.test&path=/p", "path=/p&host=h.test"] {
            let t = Query::from_target(qs).unwrap();
            assert_eq!(
                (t.host.as_deref(), t.path.as_str()),
                (Some("h.test"), "/p"),
                "{qs}"
            );
        }
    }

    #[test]
    fn gateway_routes_are_explained_before_the_others() {
        use crate::table::gateway::{
            Backend, Backends, Candidate, Candidates, GatewayRoutes, GatewayRule, HeaderFilter,
            Redirect,
        };
        use std::sync::Arc;
        let mut t = table();
        let mut g = GatewayRoutes::default();
        let rule = |action| {
            Arc::new(GatewayRule {
                action,
                ..GatewayRule::answering("infra/r rule 0".into(), 500)
            })
        };
        g.rules = vec![
            rule(Action::Backends(Backends {
                backends: Box::new([Backend {
                    entry: Some(2),
                    weight: 1,
                    request_headers: HeaderFilter::default(),
                    response_headers: HeaderFilter::default(),
                }]),
                total: 1,
                turn: Default::default(),
            })),
            rule(Action::Redirect(Redirect {
                scheme: Some("https".into()),
                hostname: None,
                port: None,
                path: None,
                status: 301,
            })),
        ];
        let cand = |rule: usize, listener| -> Candidates {
            Arc::new([Candidate {
                method: None,
                headers: Box::new([]),
                query: Box::new([]),
                rule: Arc::clone(&g.rules[rule]),
                listener,
            }])
        };
        let mut gw_rules = rules(&[("/app", false, cand(0, 1)), ("/old", false, cand(1, 1))]);
        gw_rules.insert(PathRule {
            prefix: "/re/[0-9]+".into(),
            strip: false,
            ignore_case: false,
            exact: false,
            regex: Some(Box::new(
                crate::table::pattern::Pattern::new("/re/[0-9]+").unwrap(),
            )),
            policy: None,
            target: cand(0, 1),
        });
        // A Gateway with an address of its own, whose host-less listener sends / to rule 0.
        let own: std::net::IpAddr = "127.0.0.2".parse().unwrap();
        let mut at = crate::table::gateway::AddressRoutes::new(own, "infra", "own");
        at.http.any_host = Arc::new(rules(&[(
            "/",
            false,
            cand(0, crate::table::gateway::ANY_LISTENER),
        )]));
        at.http_hosts.any = true;
        g.http
            .exact
            .insert("gw.example.com".into(), Arc::new(gw_rules));
        g.http_hosts.exact.push("gw.example.com".into());
        g.addressed.push(at);
        t.gateway = std::sync::Arc::new(g);
        let t = std::sync::Arc::new(t);
        let now = Instant::now();
        // gw.example.com would match the *.example.com wildcard: the Gateway takes it first.
        let x = explain(&t, &q(Some("gw.example.com"), "/app/x"), now, &POLICY);
        assert_eq!(x.route.as_ref().unwrap().level, "gateway");
        assert_eq!(x.entry.as_ref().unwrap().name, "wild");
        let x = explain(&t, &q(Some("gw.example.com"), "/old/a"), now, &POLICY);
        assert_eq!(x.outcome, "redirect");
        assert!(
            x.summary.contains("https://gw.example.com/old/a"),
            "{}",
            x.summary
        );
        let x = explain(&t, &q(Some("gw.example.com"), "/nothing"), now, &POLICY);
        assert_eq!(x.outcome, "no_route");
        // A regular-expression path says so.
        let x = explain(&t, &q(Some("gw.example.com"), "/re/42"), now, &POLICY);
        let r = x.route.as_ref().unwrap();
        assert_eq!(
            (r.regex, r.exact, r.prefix.as_str()),
            (true, false, "/re/[0-9]+")
        );
        assert!(
            x.precedence
                .last()
                .unwrap()
                .note
                .contains("regular-expression path"),
            "{:?}",
            x.precedence
        );
        assert_eq!(x.entry.as_ref().unwrap().name, "wild");
        // Other hosts are the Service routes' as before.
        let x = explain(&t, &q(Some("a.example.com"), "/"), now, &POLICY);
        assert_eq!(x.entry.as_ref().unwrap().name, "wild");
        assert_eq!(x.route.as_ref().unwrap().level, "wildcard_host");
        // Sent to the Gateway's own address, every host is that Gateway's alone: the shared
        // Gateway's host is not, and neither are the Service routes'.
        let at = |host: &str, path: &str| Query {
            local: Some(own),
            ..q(Some(host), path)
        };
        let x = explain(&t, &at("a.example.com", "/"), now, &POLICY);
        assert_eq!(x.route.as_ref().unwrap().level, "gateway");
        assert_eq!(x.request.local.as_deref(), Some("127.0.0.2"));
        let x = explain(&t, &at("gw.example.com", "/old/a"), now, &POLICY);
        assert_eq!(x.route.as_ref().unwrap().level, "gateway");
        assert_ne!(x.outcome, "redirect");
        // Another local address sees the shared Gateways.
        let x = explain(
            &t,
            &Query {
                local: Some("127.0.0.9".parse().unwrap()),
                ..q(Some("gw.example.com"), "/old/a")
            },
            now,
            &POLICY,
        );
        assert_eq!(x.outcome, "redirect");
    }
}

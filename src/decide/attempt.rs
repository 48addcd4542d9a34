//! One request's (or TCP connection's) way through the table, the same for every engine:
//! route -> stickiness -> unavailable? -> pick -> (failed -> eject -> retry or give up) ->
//! set-cookie. `Attempt` owns the table snapshot, the matched entry, the pin, the endpoints
//! tried and the in-flight guard; an engine asks it what to do and carries it out on its own
//! wire. `/explain` runs the same attempt dry (no cursor moved, no pin stored, nothing
//! counted in flight). It must not do I/O, name an engine, or read a clock itself: callers
//! pass `now`.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::decide::cause::{Cause, Side};
use crate::decide::edits::{
    ACCESS_CONTROL_REQUEST_HEADERS, ACCESS_CONTROL_REQUEST_METHOD, AUTHORIZATION, Asked, HOST,
    Hidden, ORIGIN, StickyCookie, cors_fields,
};
use crate::decide::external_auth::{Denial, Granted};
use crate::decide::gateway::HeaderOp;
use crate::decide::hash_key::{Keyed, key_hash};
use crate::decide::location::{Vars, expand, fill_location};
use crate::decide::rate_limit::InProgress;
use crate::table::balance::mix64;
use crate::table::balance::{Algorithm, Pick};
use crate::table::cert_auth::{CertVerdict, IngressCertAuth, Proved};
use crate::table::external_auth::{AuthTarget, ExternalAuth};
use crate::table::gateway::{
    Action, Backend, Backends, BareRequest, GatewayMatch, GatewayRule, PathRewrite, RequestView,
};
use crate::table::matcher::Strip;
use crate::table::passthrough::passthrough_for;
use crate::table::pattern::Pattern;
use crate::table::policy::Retry;
use crate::table::policy::{AllowOrigin, Cors, CorsFlavor, Location, RoutePolicy, canary_takes};
use crate::table::sticky::{self, COOKIE_NAME};
use crate::table::stream::{StreamServe, sni_route};
use crate::table::upstream::BackendProtocol;
use crate::table::{Entry, EntryId, Frontend, HealthGate, InFlight, RoutingTable, Totals};

/// Most endpoints one request may try (the configured tries are capped to this).
pub const MAX_TRIES: usize = 8;

/// The retry and ejection settings of a frontend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Endpoints one request may try, 1..=MAX_TRIES.
    pub tries: usize,
    /// How long a failing endpoint is marked down (passive health).
    pub passive_down: Duration,
    /// `--health-fail-open`: when every endpoint is down, use them all rather than answer 503.
    pub fail_open: bool,
    /// `--traffic-healthz`: a `GET /healthz` that no route takes is answered `200 ok`, as the
    /// original's default backend did.
    pub traffic_healthz: bool,
    /// The TLS port, for redirects of plain HTTP to HTTPS (`None`: no TLS port, so a route
    /// that asks for one proxies instead).
    pub https_port: Option<u16>,
}

impl Policy {
    pub fn new(tries: usize, passive_down: Duration, fail_open: bool) -> Policy {
        Policy {
            tries: tries.clamp(1, MAX_TRIES),
            passive_down,
            fail_open,
            traffic_healthz: false,
            https_port: None,
        }
    }

    pub fn with_traffic_healthz(mut self, on: bool) -> Policy {
        self.traffic_healthz = on;
        self
    }

    pub fn with_https_port(mut self, port: Option<u16>) -> Policy {
        self.https_port = port;
        self
    }
}

/// Where a redirect of plain HTTP to HTTPS points: the request's host without its port, the
/// TLS port when it is not 443, and the same path and query.
pub fn https_location(host: &[u8], path_and_query: &str, https_port: u16) -> String {
    let host = String::from_utf8_lossy(host);
    let name = match host.rfind(':') {
        Some(i) if !host[i..].contains(']') => &host[..i],
        _ => &host[..],
    };
    let mut out = String::with_capacity(16 + name.len() + path_and_query.len());
    out.push_str("https://");
    out.push_str(name);
    if https_port != 443 {
        out.push(':');
        out.push_str(&https_port.to_string());
    }
    out.push_str(path_and_query);
    out
}

/// The path the original's default backend answered `200 ok` on (`--traffic-healthz`).
pub const TRAFFIC_HEALTHZ_PATH: &str = "/healthz";

/// What a request that no route takes gets: the not-found page, or `200 ok` for the traffic
/// port's `/healthz` when `--traffic-healthz` is on (so a Service that claims `/healthz`
/// always has it).
pub fn unrouted(path: &str, policy: &Policy) -> Route {
    if policy.traffic_healthz && path == TRAFFIC_HEALTHZ_PATH {
        Route::Healthz
    } else {
        Route::NotFound
    }
}

/// The redirect an Ingress's route answers instead of proxying, if it has one: to its
/// application root for `/` itself (`app-root`: `302` to the same scheme and host, as
/// ingress-nginx writes it), else to its permanent or temporary location with the request's
/// parts filled in. Checked after the route's source ranges (a client they refuse gets 403,
/// never a location).
fn policy_redirect(
    p: &RoutePolicy,
    https: bool,
    host: Option<&[u8]>,
    path: &str,
    query: Option<&str>,
) -> Option<Route> {
    let scheme = if https { "https" } else { "http" };
    let http_host = host
        .and_then(|h| std::str::from_utf8(h).ok())
        .unwrap_or_default();
    if let Some(root) = p.app_root.as_deref()
        && path == "/"
    {
        let location = if http_host.is_empty() {
            root.to_string()
        } else {
            format!("{scheme}://{http_host}{root}")
        };
        return Some(Route::Moved {
            status: 302,
            location,
        });
    }
    let r = p.redirect.as_ref()?;
    let location = fill_location(&r.location, https, host, path, query);
    Some(Route::Moved {
        status: r.status,
        location,
    })
}

impl From<Denial> for Route {
    fn from(d: Denial) -> Route {
        match d {
            Denial::Unauthorized(challenge) => Route::Unauthorized { challenge },
            Denial::SignIn(location) => Route::Moved {
                status: 302,
                location,
            },
            Denial::Forbidden => Route::Forbidden,
            Denial::Failed => Route::Fail(500),
        }
    }
}

/// The target an ingress-nginx `rewrite-target` gives the backend, as nginx's
/// `rewrite "(?i)path" target break;` does: the whole path replaced by `target` with the
/// groups of the route's regular-expression path filled in, the query kept (after the
/// target's own, joined by `&`, when the target has one).
fn rewrite_target(
    target: &Location,
    regex: Option<&Pattern>,
    https: bool,
    host: Option<&[u8]>,
    path: &str,
    query: Option<&str>,
) -> Strip {
    let vars = Vars::new(https, host, path, query, regex.and_then(|p| p.groups(path)));
    let mut with = String::with_capacity(target.text.len() + path.len());
    expand(&target.parts, &vars, &mut with);
    if !with.starts_with('/') {
        // A target that starts with a group that was empty or held no slash.
        with.insert(0, '/');
    }
    if !with.contains('?') {
        return Strip::full(with.into());
    }
    if let Some(q) = query.filter(|q| !q.is_empty()) {
        with.push('&');
        with.push_str(q);
    }
    Strip::target(with.into())
}

/// What routing decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// No rule matched: the not-found page.
    NotFound,
    /// No rule matched `/healthz` and `--traffic-healthz` is on: `200 ok`.
    Healthz,
    /// No endpoint takes this client: the 503 page.
    Unavailable,
    /// The route's source ranges refuse this client: the 403 page.
    Forbidden,
    /// The route's request limits refuse this client now: the 503 page.
    Limited,
    /// The host's Gateway listener verifies client certificates, and this connection's did
    /// not verify against its CA (none, another listener's, or none asked for): 421, so that
    /// the client connects again naming the host.
    Misdirected,
    /// The host is an Ingress's that requires a valid client certificate and the connection
    /// has none (nginx's 495/496): 400.
    BadCertificate,
    /// The route's basic or external authentication did not admit the request: 401 with this
    /// `WWW-Authenticate` challenge, if any.
    Unauthorized { challenge: Option<Arc<str>> },
    /// A CORS preflight from an allowed origin: answered with the route's
    /// `Access-Control-*` fields; `methods` and `headers` are what it asked for.
    Preflight {
        cors: Arc<Cors>,
        origin: AllowOrigin,
        methods: Option<Box<str>>,
        headers: Option<Box<str>>,
    },
    /// Plain HTTP for a route served over TLS: a redirect with this status to
    /// `https_location`.
    Redirect { status: u16, https_port: u16 },
    /// Proxy it, with the matched prefix removed (or replaced) in the target when given.
    Proxy { strip: Option<Strip> },
    /// A Gateway route's `RequestRedirect`: this status, to this location.
    Moved { status: u16, location: String },
    /// A Gateway route that cannot be served answers this status (500 for backends that do
    /// not resolve, as the Gateway API says).
    Fail(u16),
}

/// Where a whole connection goes: an entry (none: no route), or the entry a route's weights
/// picked (none: a backend that does not resolve, or no weight at all).
enum Picked {
    Entry(Option<EntryId>),
    Backends(Option<EntryId>),
}

/// The entry the next connection of `to` goes to.
fn pick(to: &Backends) -> Option<EntryId> {
    to.next().and_then(|(_, b)| b.entry)
}

/// What ingress-nginx tells its default backend of an error it answers instead of the
/// endpoint (`custom-http-errors`): the fields below, set on the request, and `/` as its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diverted {
    /// `X-Code`: the endpoint's status.
    pub code: Box<str>,
    /// `X-Service-Name` and `X-Service-Port`: the route's own Service.
    pub service: Box<str>,
    pub port: Box<str>,
    /// `X-Namespace` and `X-Ingress-Name`: the Ingress's.
    pub namespace: Box<str>,
    pub ingress: Box<str>,
    /// `X-Original-URI`: the request's path and query as the client sent them.
    pub original_uri: Box<str>,
    /// `X-Format`: the request's `Accept`, when it had one.
    pub format: Option<Box<str>>,
    /// The default backend's target: `/`, with the request's query (nginx's
    /// `rewrite (.*) / break`).
    pub target: Box<str>,
}

pub const X_CODE: &str = "x-code";
pub const X_SERVICE_NAME: &str = "x-service-name";
pub const X_SERVICE_PORT: &str = "x-service-port";
pub const X_NAMESPACE: &str = "x-namespace";
pub const X_INGRESS_NAME: &str = "x-ingress-name";
pub const X_ORIGINAL_URI: &str = "x-original-uri";
pub const X_FORMAT: &str = "x-format";

/// The session key a balanced affinity cookie holds: the 16 hex digits switchyard writes
/// (another value, an ingress-nginx cookie's, is not one: its client gets a new key).
fn session_key(value: &[u8]) -> Option<u64> {
    if value.len() != 16 {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(value).ok()?, 16).ok()
}

/// A new session key: each `RandomState` is keyed apart (randomly per thread, then counted),
/// so keys do not repeat or follow one another.
fn new_session_key() -> u64 {
    use std::hash::BuildHasher;
    std::hash::RandomState::new().hash_one(0u8)
}

/// The table is inconsistent (a bug in translate, never a client's fault).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("a route names an entry the table does not have")]
    MissingEntry,
}

/// How a try failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    pub cause: Cause,
    /// The request may be sent again (`Sent::replayable`). Irrelevant before a connection:
    /// nothing was sent.
    pub replayable: bool,
}

/// How much of the request body that went to the endpoint an engine still has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKept {
    /// All of it: none went, or what went is still in the replay buffer (64 KiB, Pingora's
    /// `BODY_BUF_LIMIT`), the trailers with it.
    All,
    /// Some of it is gone: past the replay buffer, or not buffered.
    Partly,
}

/// What a try that failed after connecting had done, to say whether its request may go again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// The method is idempotent (RFC 9110 §9.2.2): sending it twice is the same as once.
    pub idempotent: bool,
    /// The backend said it did not process the request (HTTP/2 `REFUSED_STREAM`, or past a
    /// GOAWAY's last stream; RFC 9113 §8.7).
    pub unprocessed: bool,
    pub body: BodyKept,
    /// The client has had some of a response (even a `1xx`).
    pub answered: bool,
}

impl Sent {
    /// The request can be sent again as it was, whatever its method: nothing was answered
    /// yet and all of its body is at hand.
    pub fn replayable_body(&self) -> bool {
        !self.answered && self.body == BodyKept::All
    }

    /// Every engine's rule for sending a request again once a backend may have seen it: only
    /// while the client has had nothing, all of the body sent is still at hand, and the request
    /// is idempotent or was not processed.
    pub fn replayable(&self) -> bool {
        self.replayable_body() && (self.idempotent || self.unprocessed)
    }
}

/// What to do after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// Try again (`next`); otherwise give up.
    pub retry: bool,
    /// The endpoint was up until this failure marked it down (an ejection to count).
    pub ejected: bool,
    /// The failure was the endpoint's (counted against it); not a stale pooled connection,
    /// a client's failure or an ended tunnel.
    pub endpoint_fault: bool,
}

/// One request's attempt.
#[derive(Default)]
pub struct Attempt {
    table: Option<Arc<RoutingTable>>,
    entry: Option<EntryId>,
    /// The matched route's policy (an Ingress's settings), as an index into the table's.
    policy: Option<u32>,
    /// The matched Gateway rule and the backend it chose.
    gateway: Option<(Arc<GatewayRule>, usize)>,
    client_ip: Option<IpAddr>,
    /// The address the client connected to: a Gateway with that address
    /// (`--gateway-addresses`) answers alone.
    local_ip: Option<IpAddr>,
    /// The port the client connected to, when it is a Gateway listener's own (connections to
    /// switchyard's own HTTP and TLS ports leave it `None`).
    local_port: Option<u16>,
    /// The CA bundle the connection's client certificate verified against (a Gateway
    /// listener's; `None`: none did).
    client_ca: Option<Arc<[u8]>>,
    /// The request's Gateway listener verifies client certificates.
    listener_verifies: bool,
    /// The subject (RFC 2253) of the certificate an Ingress host's handshake took, verified
    /// or not (`None`: none was presented).
    client_subject: Option<Arc<str>>,
    /// The request's Ingress host verifies client certificates and admitted it: the backend
    /// is told as ingress-nginx tells it, the certificate too when true.
    ingress_cert: Option<bool>,
    /// Endpoint the client is pinned to by cookie or affinity (index into the entry).
    pinned: Option<usize>,
    /// The request carried a `SERVERID` that named a live endpoint.
    valid_cookie: bool,
    /// The route's basic authentication admitted the request's credentials.
    authenticated: bool,
    /// The route's CORS, and what the request's origin is allowed as.
    cors: Option<(Arc<Cors>, AllowOrigin)>,
    /// What the route's external authentication allowed the request with (boxed: most
    /// requests have none, and the attempt moves with each).
    granted: Option<Box<Granted>>,
    /// The request counts against its route's `limit-connections` until it ends.
    in_progress: Option<InProgress>,
    /// The hash of the request's `upstream-hash-by` key: the endpoint is picked by it.
    key_hash: Option<u64>,
    /// The route's Ingress cookie affinity is on: its cookie's default path (the route's
    /// path), and whether the request came over TLS (its cookie is then `Secure`).
    affinity_path: Option<(Box<str>, bool)>,
    /// The route's cookie affinity is balanced: the session key its cookie holds (or a new
    /// one), and whether the request carried it.
    balance: Option<(u64, bool)>,
    /// The endpoint's response was an error the route's Ingress answers with its default
    /// backend (`custom-http-errors`): what that backend is told.
    diverted: Option<Box<Diverted>>,
    /// Endpoints tried so far, in order; the last is the current one.
    tried: [usize; MAX_TRIES],
    n_tried: usize,
    in_flight: Option<InFlight>,
    /// The entry's totals for the current try's endpoint (the stats page).
    totals: Option<Arc<Totals>>,
    /// The health gate of this request's entry, decided once.
    gate: Option<HealthGate>,
    /// When the current upstream connection was asked for.
    connect_started: Option<Instant>,
    /// When the first endpoint was tried (`proxy-next-upstream-timeout` counts from it).
    first_try: Option<Instant>,
    /// Time to open the upstream connection (none when a pooled one was reused).
    connect_time: Option<Duration>,
    /// When the current try's request header went to the endpoint.
    request_sent: Option<Instant>,
    /// From the request header going to the endpoint to its response header arriving, for
    /// the try that answered.
    response_time: Option<Duration>,
    /// The last try failed to connect (so a final error is not a response error).
    connect_failed: bool,
    /// The current try's upstream connection came from a pool.
    reused: bool,
    /// `/explain`: decide without touching shared state.
    dry_run: bool,
}

impl Attempt {
    pub fn new(client_ip: Option<IpAddr>) -> Attempt {
        Attempt {
            client_ip,
            ..Attempt::default()
        }
    }

    /// An attempt that decides as a real one would but moves no cursor, stores no pin and
    /// counts nothing in flight (`/explain`).
    pub fn dry_run(client_ip: Option<IpAddr>) -> Attempt {
        Attempt {
            client_ip,
            dry_run: true,
            ..Attempt::default()
        }
    }

    pub fn set_client_ip(&mut self, ip: Option<IpAddr>) {
        self.client_ip = ip;
    }

    /// The connection's local address (the accepted socket's), which picks the Gateways that
    /// may answer.
    pub fn set_local_ip(&mut self, ip: Option<IpAddr>) {
        self.local_ip = ip;
    }

    /// The port the connection was made to, when it is a Gateway listener's own: its
    /// listeners' routes alone answer.
    pub fn set_local_port(&mut self, port: Option<u16>) {
        self.local_port = port;
    }

    /// The CA bundle the connection's client certificate verified against, which the Gateway
    /// listeners that verify clients ask for.
    pub fn set_client_ca(&mut self, ca: Option<Arc<[u8]>>) {
        self.client_ca = ca;
    }

    /// The subject of the certificate an Ingress host's handshake took (verified or not),
    /// which `auth-tls-verify-client: optional` and `auth-tls-match-cn` read.
    pub fn set_client_subject(&mut self, subject: Option<Arc<str>>) {
        self.client_subject = subject;
    }

    /// How an Ingress host that verifies client certificates judges this request: `Ok` with
    /// what its backend is told, or the answer that refuses it.
    fn judge_certificate(&mut self, ca: &[u8], auth: &IngressCertAuth) -> Result<(), Route> {
        let proved = Proved {
            ca: self.client_ca.as_deref(),
            presented: self.client_subject.is_some(),
            subject: self.client_subject.as_deref().unwrap_or(""),
        };
        // Explained as for a client whose subject `match-cn` finds: `/explain` has none.
        let verdict = match auth.judge(ca, proved) {
            CertVerdict::Unauthorized if self.dry_run => CertVerdict::Pass,
            v => v,
        };
        match verdict {
            CertVerdict::Pass => {
                self.ingress_cert = Some(auth.pass_certificate);
                Ok(())
            }
            CertVerdict::Refused => Err(match &auth.error_page {
                Some(url) => Route::Moved {
                    status: 302,
                    location: url.to_string(),
                },
                None => Route::BadCertificate,
            }),
            CertVerdict::Unauthorized => Err(Route::Forbidden),
        }
    }

    /// Matches host and path on `frontend` and settles stickiness from `cookies` (the values
    /// of the request's `Cookie` fields) or the client's address.
    // Each argument is a distinct fact the caller already holds; a struct would only rename
    // them at every call.
    #[allow(clippy::too_many_arguments)]
    pub fn route<'c>(
        &mut self,
        table: Arc<RoutingTable>,
        frontend: Frontend,
        host: Option<&[u8]>,
        path: &str,
        cookies: impl Iterator<Item = &'c [u8]>,
        policy: &Policy,
        now: Instant,
    ) -> Result<Route, RouteError> {
        self.route_request(
            table,
            frontend,
            host,
            path,
            &BareRequest::GET,
            cookies,
            policy,
            now,
        )
    }

    /// `route` for a request whose method, headers and query a Gateway route's conditions
    /// may read. Gateway routes come first: a host their listeners cover is theirs alone.
    #[allow(clippy::too_many_arguments)]
    pub fn route_request<'c>(
        &mut self,
        table: Arc<RoutingTable>,
        frontend: Frontend,
        host: Option<&[u8]>,
        path: &str,
        req: &impl RequestView,
        cookies: impl Iterator<Item = &'c [u8]>,
        policy: &Policy,
        now: Instant,
    ) -> Result<Route, RouteError> {
        let https = frontend == Frontend::Https;
        if frontend != Frontend::Http && !https {
            return Ok(Route::NotFound);
        }
        // Before any route: a listener that verifies clients serves none that did not prove
        // itself to it, whatever the server name its connection was made with.
        let local = (self.local_ip, self.local_port);
        if https && let Some(v) = table.client_validation(local, host) {
            match &v.ingress {
                None if !v.admits(self.client_ca.as_deref()) => return Ok(Route::Misdirected),
                None => self.listener_verifies = true,
                Some(auth) => {
                    if let Err(refused) = self.judge_certificate(&v.ca, auth) {
                        return Ok(refused);
                    }
                }
            }
        }
        match table.gateway.lookup_at(local, https, host, path, req) {
            GatewayMatch::NoRoute => return Ok(Route::NotFound),
            GatewayMatch::NotTaken => {}
            GatewayMatch::Matched(prule, candidate) => {
                let gw = &table.gateway;
                let rule = &*candidate.rule;
                // The `CORS` filter answers a preflight before the rule's action.
                if let Some(cors) = &rule.cors
                    && let Some(preflight) = self.cors_check(cors, req)
                {
                    return Ok(preflight);
                }
                let (entry, strip) = match &rule.action {
                    Action::Fail(status) => return Ok(Route::Fail(*status)),
                    Action::Redirect(r) => {
                        let location = crate::decide::gateway::location(
                            r,
                            https,
                            host.unwrap_or_default(),
                            path,
                            req.query(),
                            &prule.prefix,
                            gw.listener_port(https, self.local_port),
                        );
                        return Ok(Route::Moved {
                            status: r.status,
                            location,
                        });
                    }
                    Action::Backends(b) => {
                        let chosen = if self.dry_run { b.peek() } else { b.next() };
                        let Some((i, backend)) = chosen else {
                            return Ok(Route::Fail(500));
                        };
                        let Some(entry) = backend.entry else {
                            return Ok(Route::Fail(500));
                        };
                        self.gateway = Some((Arc::clone(&candidate.rule), i));
                        let strip = match &rule.rewrite_path {
                            Some(PathRewrite::Full(p)) => Some(Strip::full(Arc::clone(p))),
                            Some(PathRewrite::Prefix(p)) => {
                                Some(Strip::replace(&prule.prefix, Arc::clone(p)))
                            }
                            None => None,
                        };
                        (entry, strip)
                    }
                };
                return self
                    .settle(table, entry, cookies, None, policy, now)
                    .map(|available| {
                        if available {
                            Route::Proxy { strip }
                        } else {
                            Route::Unavailable
                        }
                    });
            }
        }
        let Some(rule) = table.router(frontend).and_then(|r| r.lookup(host, path)) else {
            return Ok(unrouted(path, policy));
        };
        let mut target = rule.target;
        self.policy = rule.policy;
        let route_policy = rule.policy.and_then(|p| table.policies.get(p as usize));
        if let Some(p) = route_policy {
            if !p.admits(self.client_ip) {
                return Ok(Route::Forbidden);
            }
            if let Some(moved) = policy_redirect(p, https, host, path, req.query()) {
                return Ok(moved);
            }
            if frontend == Frontend::Http
                && let (Some(status), Some(https_port)) = (p.https_redirect, policy.https_port)
            {
                return Ok(Route::Redirect { status, https_port });
            }
            // An Ingress that verifies client certificates, over plain HTTP: no certificate
            // can be shown there, so it is judged as a connection without one.
            if frontend == Frontend::Http
                && let Some(auth) = p.client_cert.as_deref()
                && let Err(refused) = self.judge_certificate(&[], auth)
            {
                return Ok(refused);
            }
            // CORS as ingress-nginx's rewrite phase has it: a preflight from an allowed
            // origin is answered here, before any password is asked for (a browser sends
            // none with it).
            if let Some(cors) = &p.cors
                && let Some(preflight) = self.cors_check(cors, req)
            {
                return Ok(preflight);
            }
            // Limits as nginx's preaccess phase has them: after the redirects and the
            // preflights, before any password is checked.
            if let Some(limit) = p.rate_limit.as_deref()
                && !self.dry_run
            {
                match crate::decide::rate_limit::admit(limit, self.client_ip, now) {
                    Ok(in_progress) => self.in_progress = in_progress,
                    Err(_) => return Ok(Route::Limited),
                }
            }
            // After the redirects, as nginx's access phase comes after its rewrite phase: a
            // plain-HTTP request is sent to HTTPS before it is asked for a password.
            if let Some(auth) = p.basic_auth.as_deref() {
                if !crate::decide::auth::admits(auth, req.header(AUTHORIZATION)) {
                    return Ok(Route::Unauthorized {
                        challenge: Some(Arc::clone(&auth.challenge)),
                    });
                }
                self.authenticated = true;
            }
            // A canary shares the main route's policy, checked above.
            if let Some(c) = p.canary.as_deref()
                && canary_takes(c, |name| req.header(name), |name| req.cookie(name))
            {
                target = c.entry;
            }
        }
        if let Some(key) = route_policy.and_then(|p| p.hash_by.as_deref()) {
            let keyed = Keyed {
                client: self.client_ip,
                host,
                path,
            };
            self.key_hash = Some(key_hash(key, req, &keyed));
        }
        // Held apart from the table, which `settle` takes: a reference count, not a copy.
        let affinity = route_policy.and_then(|p| p.affinity.clone());
        if affinity.is_some() {
            let path = if rule.regex.is_some() || rule.prefix.is_empty() {
                "/"
            } else {
                &rule.prefix
            };
            self.affinity_path = Some((path.into(), https));
        }
        // ingress-nginx's balanced affinity: the cookie's session key picks the endpoint by
        // consistent hashing (as `upstream-hash-by` does, which it overrides); a request
        // without one gets a new key.
        if let Some(a) = affinity.as_deref().filter(|a| a.balanced) {
            let carried = req.cookie(&a.name).and_then(session_key);
            let key = carried.unwrap_or_else(new_session_key);
            self.key_hash = Some(mix64(key));
            self.balance = Some((key, carried.is_some()));
        }
        let strip = match route_policy {
            Some(RoutePolicy {
                rewrite_path: Some(target),
                ..
            }) => Some(rewrite_target(
                target,
                rule.regex.as_deref(),
                https,
                host,
                path,
                req.query(),
            )),
            Some(RoutePolicy {
                rewrite: Some(with),
                ..
            }) => {
                // On a regular-expression path, the part it matched is the prefix.
                let prefix = match rule.regex.as_deref().and_then(|p| p.groups(path)) {
                    Some(g) => g.get(0),
                    None => &rule.prefix,
                };
                Some(Strip::replace(prefix, Arc::clone(with)))
            }
            _ => rule.strip.then(|| Strip::of(&rule.prefix)),
        };
        // A balanced cookie holds a key, not an endpoint: nothing to pin by.
        let cookie_name = affinity
            .as_deref()
            .filter(|a| !a.balanced)
            .map(|a| &*a.name);
        let fallback = route_policy.and_then(|p| p.fallback);
        let available = match fallback {
            None => self.settle(table, target, cookies, cookie_name, policy, now)?,
            Some(fallback) => {
                let again = Arc::clone(&table);
                self.settle(table, target, cookies, cookie_name, policy, now)? || {
                    // No endpoint takes it: the Ingress's `default-backend` answers instead,
                    // without the route's stickiness (its endpoints are another Service's).
                    self.affinity_path = None;
                    self.settle(again, fallback, std::iter::empty(), None, policy, now)?
                }
            }
        };
        Ok(if available {
            Route::Proxy { strip }
        } else {
            Route::Unavailable
        })
    }

    /// The entry a TLS connection to `local` is passed through to, with client-IP affinity
    /// settled, as a TCP frontend's: a Gateway TLS listener's route for its server name
    /// (`table::stream`) first, then an `ssl-passthrough` Ingress's (`table::passthrough`).
    /// `NotFound`: neither takes the name (the connection goes on to the handshake).
    pub fn route_passthrough(
        &mut self,
        table: Arc<RoutingTable>,
        server_name: &str,
        local: Option<IpAddr>,
        policy: &Policy,
        now: Instant,
    ) -> Result<Route, RouteError> {
        let gateway = sni_route(&table.streams.passthrough, Some(server_name), local).map(pick);
        let target = match gateway {
            Some(picked) => Picked::Backends(picked),
            None => Picked::Entry(passthrough_for(&table.passthrough, server_name)),
        };
        self.route_picked(table, target, policy, now)
    }

    /// The backend of a connection to a Gateway's TCP or TLS listener port `port`, opened on
    /// `address` (`None`: the bind address): its route's weights pick it, by `server_name`
    /// (the hello's) on a TLS listener's port. `NotFound`: no route takes it; `Unavailable`:
    /// the share of a backend that does not resolve, refused as the spec asks.
    pub fn route_stream(
        &mut self,
        table: Arc<RoutingTable>,
        (address, port): (Option<IpAddr>, u16),
        server_name: Option<&str>,
        policy: &Policy,
        now: Instant,
    ) -> Result<Route, RouteError> {
        let to = match table.streams.port(address, port) {
            None => None,
            Some(StreamServe::Tcp(to)) => Some(to),
            Some(StreamServe::Tls(routes)) => sni_route(routes, server_name, None),
        };
        let target = match to {
            Some(to) => Picked::Backends(pick(to)),
            None => Picked::Entry(None),
        };
        self.route_picked(table, target, policy, now)
    }

    fn route_picked(
        &mut self,
        table: Arc<RoutingTable>,
        target: Picked,
        policy: &Policy,
        now: Instant,
    ) -> Result<Route, RouteError> {
        match target {
            Picked::Entry(target) => self.route_whole(table, target, policy, now),
            Picked::Backends(Some(target)) => self.route_whole(table, Some(target), policy, now),
            Picked::Backends(None) => Ok(Route::Unavailable),
        }
    }

    /// The entry behind TCP frontend `port`, with client-IP affinity settled.
    pub fn route_tcp(
        &mut self,
        table: Arc<RoutingTable>,
        port: u16,
        policy: &Policy,
        now: Instant,
    ) -> Result<Route, RouteError> {
        let target = table
            .tcp
            .binary_search_by_key(&port, |f| f.port)
            .ok()
            .map(|i| table.tcp[i].entry);
        self.route_whole(table, target, policy, now)
    }

    /// A whole connection to `target` (none: `NotFound`), with client-IP affinity settled.
    fn route_whole(
        &mut self,
        table: Arc<RoutingTable>,
        target: Option<EntryId>,
        policy: &Policy,
        now: Instant,
    ) -> Result<Route, RouteError> {
        let Some(target) = target else {
            return Ok(Route::NotFound);
        };
        self.settle(table, target, std::iter::empty(), None, policy, now)
            .map(|available| {
                if available {
                    Route::Proxy { strip: None }
                } else {
                    Route::Unavailable
                }
            })
    }

    /// Keeps `table` and `target`, settles the pin (by the cookie `affinity` names, an
    /// Ingress's, else the entry's `SERVERID` or client-IP affinity); says whether anything
    /// takes this client.
    fn settle<'c>(
        &mut self,
        table: Arc<RoutingTable>,
        target: EntryId,
        mut cookies: impl Iterator<Item = &'c [u8]>,
        affinity: Option<&str>,
        policy: &Policy,
        now: Instant,
    ) -> Result<bool, RouteError> {
        let entry = table.entry(target).ok_or(RouteError::MissingEntry)?;
        let gate = entry.health_gate(policy.fail_open);
        self.gate = Some(gate);
        let cookie = affinity.or(entry.cookie_sticky.then_some(COOKIE_NAME));
        if let Some(name) = cookie {
            let pinned = cookies
                .find_map(|v| sticky::find_cookie(v, name))
                .and_then(|id| entry.endpoint_by_cookie(id))
                .filter(|&i| entry.pin_allowed(i, now, gate));
            self.valid_cookie = pinned.is_some();
            self.pinned = pinned;
        } else if let (Some(timeout), Some(ip)) = (entry.client_ip_affinity, self.client_ip) {
            let pinned_addr = if self.dry_run {
                entry.state.affinity.peek(&ip, now, timeout)
            } else {
                entry.state.affinity.get(&ip, now, timeout)
            };
            self.pinned = pinned_addr
                .and_then(|addr| entry.endpoint_by_addr(&addr))
                .filter(|&i| entry.pin_allowed(i, now, gate));
        }
        // No endpoint takes new sessions (none, all draining, or all down without fail-open)
        // and this client is not pinned to one that still serves it: the app is visibly down.
        let none_new = !entry.endpoints.iter().any(|e| e.takes_new());
        let available = self.pinned.is_some() || !(none_new || gate == HealthGate::Closed);
        self.entry = Some(target);
        self.table = Some(table);
        Ok(available)
    }

    /// The endpoint for the next try (the pinned one first, then the algorithm among those
    /// not tried); counts it in flight and remembers it. `None`: nothing left to try.
    pub fn next(&mut self, now: Instant) -> Option<SocketAddr> {
        let i = self.choose(now)?;
        let entry = self.entry()?;
        let endpoint = &entry.endpoints[i];
        let addr = endpoint.addr;
        let (guard, totals) = if self.dry_run {
            (None, None)
        } else {
            let totals = entry.state.totals.get_or_insert(addr, &entry.endpoints);
            let guard = endpoint.state.0.enter(Arc::clone(&totals), now);
            (Some(guard), Some(totals))
        };
        if !self.dry_run
            && let (Some(timeout), Some(ip)) = (entry.client_ip_affinity, self.client_ip)
            && self.pinned != Some(i)
        {
            entry.state.affinity.set(ip, addr, now, timeout);
        }
        if self.n_tried < MAX_TRIES {
            self.tried[self.n_tried] = i;
            self.n_tried += 1;
        }
        self.in_flight = guard;
        self.totals = totals;
        self.request_sent = None;
        self.connect_started = Some(now);
        self.first_try.get_or_insert(now);
        self.connect_failed = false;
        self.reused = false;
        Some(addr)
    }

    fn choose(&self, now: Instant) -> Option<usize> {
        let entry = self.entry()?;
        if let Some(i) = self.pinned.filter(|&i| !self.was_tried(i)) {
            return Some(i);
        }
        // A dry run picks from a copy of the cursor: explaining must not move the next
        // request's round-robin turn.
        let copy;
        let cursor = if self.dry_run {
            copy = AtomicUsize::new(entry.state.cursor.load(Ordering::Relaxed));
            &copy
        } else {
            &entry.state.cursor
        };
        // A route's `upstream-hash-by` picks by its key, consistently, as `source` by address.
        let (algorithm, client_hash) = match self.key_hash {
            Some(h) => (Algorithm::Source, h),
            None => (
                entry.algorithm,
                self.client_ip.as_ref().map_or(0, sticky::client_hash),
            ),
        };
        let pick = Pick {
            algorithm,
            cursor,
            client_hash,
            maxconn: entry.maxconn,
        };
        entry.choose(&pick, self.gate(), now, &self.tried[..self.n_tried])
    }

    /// The current try's request header is being written to the endpoint.
    pub fn request_sent(&mut self, now: Instant) {
        self.request_sent = Some(now);
    }

    /// The endpoint's (final) response header arrived.
    pub fn response_started(&mut self, now: Instant) {
        self.response_time = self.request_sent.map(|t| now.saturating_duration_since(t));
    }

    /// The endpoint's response time (request header sent to response header received).
    pub fn response_time(&self) -> Option<Duration> {
        self.response_time
    }

    /// The current try's upstream connection is open (`reused`: it came from a pool).
    pub fn connected(&mut self, reused: bool, now: Instant) {
        self.reused = reused;
        if !reused {
            self.connect_time = self
                .connect_started
                .map(|t| now.saturating_duration_since(t));
        }
    }

    /// The current try failed: ejects the endpoint for the passive-health period where the
    /// failure says something of its health, and says whether to try again.
    ///
    /// Before a connection, any method may go elsewhere (nothing was sent). After one, a
    /// replayable request goes to another endpoint (HAProxy `retry-on empty-response`); a
    /// timeout is not replayed, as the backend may still be working on it and the client's
    /// wait is already spent. A pooled connection the backend had closed while idle is stale,
    /// not a fault: replayed, possibly on the same endpoint, without an ejection. A client's
    /// failure or an abruptly ended tunnel says nothing of the endpoint.
    pub fn failed(&mut self, f: Failure, policy: &Policy, now: Instant) -> Verdict {
        self.in_flight = None;
        // The route's own rule (an Ingress's `proxy-next-upstream`), else `--retries`'.
        let route = self.route_policy().and_then(|p| p.retry);
        let tries = self.tries_allowed(route, policy, now);
        let on_timeout = route.is_some_and(|r| r.on_timeout);
        let give_up = Verdict {
            retry: false,
            ejected: false,
            endpoint_fault: false,
        };
        if f.cause.before_connect() {
            self.connect_failed = true;
            let Some(entry) = self.entry() else {
                return give_up;
            };
            let ejected = self.eject_current(entry, policy, now);
            if let Some(t) = &self.totals {
                t.connect_errors.fetch_add(1, Ordering::Relaxed);
            }
            if self.current().is_some()
                && let (Some(_), Some(ip)) = (entry.client_ip_affinity, self.client_ip)
            {
                entry.state.affinity.forget(&ip);
            }
            let retry = self.n_tried < tries && self.any_untried(entry);
            return Verdict {
                retry,
                ejected,
                endpoint_fault: true,
            };
        }
        if f.cause == Cause::UpstreamClosed && self.reused {
            // Let the same endpoint be picked again.
            self.n_tried = self.n_tried.saturating_sub(1);
            return Verdict {
                retry: f.replayable,
                ejected: false,
                endpoint_fault: false,
            };
        }
        if f.cause.side() != Side::Upstream || f.cause == Cause::TunnelEnded {
            return give_up;
        }
        let Some(entry) = self.entry() else {
            return give_up;
        };
        let ejected = self.eject_current(entry, policy, now);
        let retry = f.replayable
            && (f.cause != Cause::UpstreamTimedOut || on_timeout)
            && self.n_tried < tries
            && self.any_untried(entry);
        Verdict {
            retry,
            ejected,
            endpoint_fault: true,
        }
    }

    /// The endpoints this request may try in all: the route's rule (`proxy-next-upstream`),
    /// else `--retries`'; past the route's time for tries (`proxy-next-upstream-timeout`), the
    /// current one was the last.
    fn tries_allowed(&self, route: Option<Retry>, policy: &Policy, now: Instant) -> usize {
        let in_time = route
            .and_then(|r| r.within)
            .zip(self.first_try)
            .is_none_or(|(within, first)| now.saturating_duration_since(first) < within);
        match in_time {
            true => route.map_or(policy.tries, |r| r.tries.clamp(1, MAX_TRIES)),
            false => 1,
        }
    }

    /// The current endpoint answered with `status`: `Some` when the route sends the request to
    /// another endpoint instead (`proxy-next-upstream http_502`, ...), as nginx does while
    /// the request may go again (`sent`; any method with `non_idempotent`), tries are left
    /// and an endpoint has not been tried. The response is then dropped, never relayed; the
    /// endpoint is not marked down (a status is not a broken connection; ingress-nginx's
    /// balancer does not either). `None`: this is the response (also on the last try, as
    /// nginx relays the last endpoint's answer).
    pub fn answered(
        &mut self,
        status: u16,
        sent: Sent,
        policy: &Policy,
        now: Instant,
    ) -> Option<Verdict> {
        let route = self.route_policy().and_then(|p| p.retry)?;
        if !route.on_status.contains(status) {
            return None;
        }
        let sent = Sent {
            idempotent: sent.idempotent || route.non_idempotent,
            ..sent
        };
        let tries = self.tries_allowed(Some(route), policy, now);
        let entry = self.entry()?;
        if !(sent.replayable() && self.n_tried < tries && self.any_untried(entry)) {
            return None;
        }
        self.in_flight = None;
        Some(Verdict {
            retry: true,
            ejected: false,
            endpoint_fault: true,
        })
    }

    /// The current endpoint answered `status`: `true` when the route's Ingress answers such
    /// errors with its default backend (`custom-http-errors`) and that backend takes the
    /// request. The response is then dropped, and the next try goes to the default backend,
    /// told why (`diverted`); a default backend's own error is its answer (once only, as
    /// nginx's `error_page` in a named location).
    /// `asked`: the client's request's path and query and its `Accept`, read only then.
    pub fn divert<'r>(
        &mut self,
        status: u16,
        asked: impl FnOnce() -> (&'r str, Option<&'r str>),
        policy: &Policy,
        now: Instant,
    ) -> bool {
        if self.diverted.is_some() {
            return false;
        }
        let Some(p) = self.route_policy() else {
            return false;
        };
        let (Some(codes), Some(fallback)) = (&p.custom_errors, p.fallback) else {
            return false;
        };
        if !codes.contains(&status) {
            return false;
        }
        let (request_uri, accept) = asked();
        let (namespace, ingress) = p.origin.split_once('/').unwrap_or(("", &p.origin));
        let (namespace, ingress) = (Box::from(namespace), Box::from(ingress));
        // The route's own Service and port.
        let (service, port) = self
            .entry()
            .map(|e| (e.key.service.clone(), e.key.port.to_string()))
            .unwrap_or_default();
        let target = match request_uri.split_once('?') {
            Some((_, query)) => format!("/?{query}").into(),
            None => "/".into(),
        };
        let diverted = Diverted {
            code: status.to_string().into(),
            service: service.into_boxed_str(),
            port: port.into_boxed_str(),
            namespace,
            ingress,
            original_uri: request_uri.into(),
            format: accept.map(Box::from),
            target,
        };
        let Some(table) = self.table.clone() else {
            return false;
        };
        self.in_flight = None;
        self.n_tried = 0;
        self.pinned = None;
        self.valid_cookie = false;
        self.key_hash = None;
        self.balance = None;
        self.affinity_path = None;
        match self.settle(table, fallback, std::iter::empty(), None, policy, now) {
            Ok(true) => {
                self.diverted = Some(Box::new(diverted));
                true
            }
            // The default backend takes nothing either: the endpoint's answer stands.
            _ => false,
        }
    }

    /// What the default backend is told of the error it answers (`divert`).
    pub fn diverted(&self) -> Option<&Diverted> {
        self.diverted.as_deref()
    }

    /// Marks the current try's endpoint down; true when it was up until now.
    fn eject_current(&self, entry: &Entry, policy: &Policy, now: Instant) -> bool {
        let Some(i) = self.current() else {
            return false;
        };
        let state = &entry.endpoints[i].state;
        let ejected = !state.is_down(now);
        state.mark_down(now, policy.passive_down);
        ejected
    }

    /// Whether an endpoint this request has not tried may still take it.
    fn any_untried(&self, entry: &Entry) -> bool {
        let gate = self.gate();
        (0..entry.endpoints.len()).any(|i| !self.was_tried(i) && entry.eligible(i, gate))
    }

    /// The endpoint id for a `Set-Cookie` on this response: the entry is cookie-sticky and
    /// the client did not already carry a valid cookie for the endpoint that answered.
    pub fn set_cookie(&self) -> Option<StickyCookie<'_>> {
        let entry = self.entry()?;
        let affinity = self
            .route_policy()
            .and_then(|p| p.affinity.as_deref())
            .zip(self.affinity_path.as_ref())
            .map(|(a, (path, https))| (a, &**path, *https));
        if !entry.cookie_sticky && affinity.is_none() {
            return None;
        }
        if let (Some((key, carried)), Some(_)) = (self.balance, affinity) {
            return (!carried).then_some(StickyCookie { id: key, affinity });
        }
        let i = self.current()?;
        if self.valid_cookie && self.pinned == Some(i) {
            return None;
        }
        Some(StickyCookie {
            id: entry.endpoints[i].cookie_id,
            affinity,
        })
    }

    /// The response's last byte is handed to the client's writer: the request no longer
    /// counts against its route's `limit-connections`, nor in flight on its endpoint
    /// (`maxconn`, `leastconn`). nginx and HAProxy free both in the same turn of their loop as
    /// the last write; an engine that records the request later, on another task, calls this
    /// first so that a client that got its answer never finds its own request still counted.
    pub fn response_done(&mut self) {
        self.in_progress = None;
        self.in_flight = None;
    }

    /// The request is over: it no longer counts in flight.
    pub fn finish(&mut self) {
        self.in_flight = None;
    }

    // === what engines and recorders read ===

    pub fn table(&self) -> Option<&Arc<RoutingTable>> {
        self.table.as_ref()
    }

    pub fn entry_id(&self) -> Option<EntryId> {
        self.entry
    }

    /// The matched route's policy (what its Ingress adds), if it has one.
    pub fn route_policy(&self) -> Option<&RoutePolicy> {
        self.table.as_ref()?.policies.get(self.policy? as usize)
    }

    /// The matched Gateway rule and the backend it chose, when a Gateway route took the
    /// request: the filters an engine applies.
    pub fn gateway_rule(&self) -> Option<(&GatewayRule, &Backend)> {
        let (rule, backend) = self.gateway.as_ref()?;
        match &rule.action {
            Action::Backends(b) => Some((rule, b.backends.get(*backend)?)),
            _ => None,
        }
    }

    /// Where copies of this request go (a Gateway rule's `RequestMirror`s whose share this
    /// request is in): an endpoint of each mirror backend, picked by its algorithm, and how
    /// that backend is spoken to. Empty for most requests (no allocation then).
    pub fn mirrors(&self, now: Instant) -> Vec<(SocketAddr, BackendProtocol)> {
        let Some((rule, _)) = self.gateway_rule() else {
            return Vec::new();
        };
        let Some(table) = self.table.as_ref() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for m in rule.mirrors.iter().filter(|m| !self.dry_run && m.due()) {
            let Some(entry) = table.entry(m.entry) else {
                continue;
            };
            if let Some(addr) = self.pick_in(entry, now) {
                out.push((addr, entry.upstream.protocol));
            }
        }
        out
    }

    /// An endpoint of `entry` (not this request's), picked by its algorithm.
    fn pick_in(&self, entry: &Entry, now: Instant) -> Option<SocketAddr> {
        let pick = Pick {
            algorithm: entry.algorithm,
            cursor: &entry.state.cursor,
            client_hash: self.client_ip.as_ref().map_or(0, sticky::client_hash),
            maxconn: entry.maxconn,
        };
        let i = entry.choose(&pick, entry.health_gate(false), now, &[])?;
        Some(entry.endpoints[i].addr)
    }

    /// The routed request's external authentication (ingress-nginx's `auth-url`), which the
    /// engine asks before the request goes on (`decide::external_auth`).
    pub fn external_auth(&self) -> Option<&Arc<ExternalAuth>> {
        self.route_policy()?.external_auth.as_ref()
    }

    /// Where the subrequest of `auth` goes: its address, or an endpoint of its Service;
    /// `None` when the Service has none.
    pub fn auth_endpoint(&self, auth: &ExternalAuth, now: Instant) -> Option<SocketAddr> {
        match auth.target {
            AuthTarget::Address(addr) => Some(addr),
            AuthTarget::Entry(id) => self.pick_in(self.table.as_ref()?.entry(id)?, now),
        }
    }

    /// The request was allowed by its external authentication with `granted`'s changes.
    pub fn grant(&mut self, granted: Granted) {
        self.granted = Some(Box::new(granted));
    }

    /// Whether the request or response must change beyond `decide::edits` (a Gateway rule's
    /// filters or timeouts, CORS fields, external authentication, an Ingress's
    /// `upstream-vhost` or `custom-http-errors`): the fast path leaves such requests to
    /// Pingora.
    pub fn rewrites(&self) -> bool {
        self.gateway_rule().is_some_and(|(r, _)| r.rewrites())
            || self.cors.is_some()
            || self.external_auth().is_some()
            || self
                .route_policy()
                .is_some_and(|p| p.upstream_vhost.is_some() || p.custom_errors.is_some())
    }

    /// The header operations a response of `status` gets on its way to the client beyond
    /// every route's edits: a Gateway rule's and backend's filters, an allowed origin's CORS
    /// fields (which replace the backend's), the external authentication's cookies.
    pub fn response_ops(&self, status: u16) -> impl Iterator<Item = HeaderOp<'_>> {
        let filters = self
            .gateway_rule()
            .into_iter()
            .flat_map(|(rule, backend)| crate::decide::gateway::response_ops(rule, backend));
        let cors = self
            .cors
            .iter()
            .flat_map(|(cors, origin)| cors_fields(cors, origin, Asked::default()))
            .map(|(name, value)| HeaderOp::Set(name, value));
        let granted = self
            .granted
            .iter()
            .flat_map(move |g| g.response_ops(status));
        filters.chain(cors).chain(granted)
    }

    /// The header operations the request gets on its way to the endpoint beyond every
    /// route's edits (the forwarding fields, `X-Forwarded-Prefix` included, are
    /// `decide::edits`'): a Gateway rule's and backend's filters and its `URLRewrite` host, an
    /// Ingress's `upstream-vhost` (the `Host`), and the fields its external authentication
    /// vouched for.
    pub fn request_ops(&self) -> impl Iterator<Item = HeaderOp<'_>> {
        let gateway = self.gateway_rule();
        let filters = gateway
            .into_iter()
            .flat_map(|(rule, backend)| crate::decide::gateway::request_ops(rule, backend));
        let gateway_host = gateway
            .and_then(|(rule, _)| rule.rewrite_host.as_deref())
            .map(|h| HeaderOp::Set(HOST, h));
        let policy = self.route_policy();
        let vhost = policy
            .and_then(|p| p.upstream_vhost.as_deref())
            .map(|h| HeaderOp::Set(HOST, h));
        let granted = self.granted.iter().flat_map(|g| g.request_ops());
        let diverted = self.diverted.iter().flat_map(|d| {
            [
                HeaderOp::Set(X_CODE, &d.code),
                HeaderOp::Set(X_SERVICE_NAME, &d.service),
                HeaderOp::Set(X_SERVICE_PORT, &d.port),
                HeaderOp::Set(X_NAMESPACE, &d.namespace),
                HeaderOp::Set(X_INGRESS_NAME, &d.ingress),
                HeaderOp::Set(X_ORIGINAL_URI, &d.original_uri),
            ]
            .into_iter()
            .chain(d.format.as_deref().map(|f| HeaderOp::Set(X_FORMAT, f)))
        });
        filters
            .chain(gateway_host)
            .chain(vhost)
            .chain(granted)
            .chain(diverted)
    }

    /// How this request reaches the endpoints: the route's protocol when its Ingress sets
    /// one, else the entry's (the Service port's).
    pub fn backend_protocol(&self) -> BackendProtocol {
        self.route_policy()
            .and_then(|p| p.protocol)
            .or_else(|| self.entry().map(|e| e.upstream.protocol))
            .unwrap_or_default()
    }

    /// The wait for the endpoint's response (header, and between body reads): the route's
    /// when its Ingress sets one, else `default` (`--server-timeout`).
    pub fn server_timeout(&self, default: Duration) -> Duration {
        self.gateway_rule()
            .and_then(|(r, _)| r.backend_timeout)
            .or_else(|| self.route_policy().and_then(|p| p.server_timeout))
            .unwrap_or(default)
    }

    /// The wait for each write of the request to the endpoint (one that stops reading): the
    /// route's `proxy-send-timeout`, else the response's wait (`server_timeout`), as nginx's
    /// `proxy_send_timeout` beside `proxy_read_timeout`.
    pub fn send_timeout(&self, default: Duration) -> Duration {
        self.route_policy()
            .and_then(|p| p.send_timeout)
            .unwrap_or_else(|| self.server_timeout(default))
    }

    /// The wait for each connection to the endpoint: the route's `proxy-connect-timeout`,
    /// else `default` (5 s).
    pub fn connect_timeout(&self, default: Duration) -> Duration {
        self.route_policy()
            .and_then(|p| p.connect_timeout)
            .unwrap_or(default)
    }

    /// Whether a request body of `len` bytes (so far, or announced) may be sent on: the
    /// route's `proxy-body-size`, when its Ingress sets one.
    pub fn body_allowed(&self, len: u64) -> bool {
        self.route_policy()
            .and_then(|p| p.max_body)
            .is_none_or(|max| len <= max)
    }

    pub fn entry(&self) -> Option<&Entry> {
        self.table.as_ref()?.entry(self.entry?)
    }

    /// The entry's totals for the current try's endpoint (none in a dry run or before a try).
    pub fn totals(&self) -> Option<&Totals> {
        self.totals.as_deref()
    }

    /// The index of the current try's endpoint in the entry.
    pub fn current(&self) -> Option<usize> {
        self.n_tried.checked_sub(1).map(|k| self.tried[k])
    }

    pub fn pinned(&self) -> Option<usize> {
        self.pinned
    }

    pub fn valid_cookie(&self) -> bool {
        self.valid_cookie
    }

    pub fn client_ip(&self) -> Option<IpAddr> {
        self.client_ip
    }

    pub fn connect_time(&self) -> Option<Duration> {
        self.connect_time
    }

    /// The last try failed before its connection was open.
    pub fn connect_failed(&self) -> bool {
        self.connect_failed
    }

    pub fn tries(&self) -> usize {
        self.n_tried
    }

    /// Whether the entry is cookie-sticky (its cookie is removed from forwarded requests).
    pub fn cookie_sticky(&self) -> bool {
        self.entry().is_some_and(|e| e.cookie_sticky)
    }

    /// CORS for a request on a route with `cors`: a preflight from an allowed origin is
    /// the route's answer (`Some`); another request from one is remembered, for the fields
    /// its response gets (`response_ops`).
    fn cors_check(&mut self, cors: &Arc<Cors>, req: &impl RequestView) -> Option<Route> {
        let asked_method = req.header(ACCESS_CONTROL_REQUEST_METHOD);
        let Some(origin) = cors.allow(req.header(ORIGIN)) else {
            // A Gateway's CORS filter owns the preflights of its rule: one from an origin it
            // does not allow is refused, not handed to the backend.
            let refused = cors.flavor == CorsFlavor::Gateway
                && req.header(ORIGIN).is_some()
                && cors.preflight(req.method(), asked_method);
            return refused.then_some(Route::Forbidden);
        };
        if cors.preflight(req.method(), asked_method) {
            let text = |v: Option<&[u8]>| {
                v.and_then(|v| std::str::from_utf8(v).ok())
                    .map(|v| Box::<str>::from(v.trim()))
            };
            return Some(Route::Preflight {
                cors: Arc::clone(cors),
                origin,
                methods: text(asked_method),
                headers: text(req.header(ACCESS_CONTROL_REQUEST_HEADERS)),
            });
        }
        self.cors = Some((Arc::clone(cors), origin));
        None
    }

    /// What of the client's request its backend must not see.
    pub fn hidden(&self) -> Hidden<'_> {
        Hidden {
            sticky_cookie: self.cookie_sticky(),
            authorization: self.authenticated,
            forwarded_prefix: self
                .route_policy()
                .and_then(|p| p.forwarded_prefix.as_deref()),
            client_cert: self.listener_verifies,
            ingress_cert: self.ingress_cert,
        }
    }

    fn gate(&self) -> HealthGate {
        self.gate.unwrap_or(HealthGate::SkipDown)
    }

    fn was_tried(&self, i: usize) -> bool {
        self.tried[..self.n_tried].contains(&i)
    }
}

#[cfg(test)]
mod tests;

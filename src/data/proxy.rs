//! The HTTP data plane: Pingora's `ProxyHttp` for one frontend (the plain port or the TLS
//! port; `tls::HttpsPolicy` adds the TLS port's headers).
//!
//! Per request it loads the current table once (an `Arc` kept in the context, never a guard
//! across an await), matches host and path, honours stickiness, picks an endpoint and hands
//! Pingora a peer built from a socket address that is already in the table. It must stay thin:
//! lookups only, no DNS, no locks held across an await, no `unwrap`, no per-request logging
//! above debug; routing policy belongs to `translate`, selection to `balance` and
//! `Entry::choose`. Metrics and the access log are recorded once per request, in `logging`,
//! through pre-resolved handles.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, COOKIE, HOST, SET_COOKIE};
use http::{HeaderValue, Uri};
use pingora::apps::ServerApp;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::{HttpPeer, ProxyHttp, Session};
use pingora::protocols::Digest;
use pingora::protocols::Stream;
use pingora::proxy::FailToProxy;
use pingora::server::ShutdownWatch;
use pingora::{Error, ErrorSource, ErrorType, Result};
use prometheus::{IntCounter, IntGauge};

use crate::config::Timeouts;
use crate::data::tls::HttpsPolicy;
use crate::decide::error_page::ErrorPage;
use crate::ops::access_log::{AccessLog, HttpRecord};
use crate::ops::lifecycle::{Active, Lifecycle};
use crate::ops::metrics::{Metrics, OpenConnection};
use crate::table::balance::Pick;
use crate::table::matcher::Strip;
use crate::table::sticky::{self, COOKIE_NAME};
use crate::table::{Entry, EntryId, Frontend, HealthGate, InFlight, RoutingTable, TableReader};

/// Most endpoints a request may try (the configured tries are capped to this).
const MAX_TRIES: usize = 8;

/// The proxy for one frontend.
#[derive(Clone)]
pub struct HttpProxy {
    pub(crate) table: TableReader,
    pub(crate) frontend: Frontend,
    /// `X-Forwarded-Proto` value.
    pub(crate) scheme: &'static str,
    pub(crate) timeouts: Timeouts,
    pub(crate) tries: usize,
    pub(crate) not_found: ErrorPage,
    pub(crate) unavailable: ErrorPage,
    pub(crate) lifecycle: Arc<Lifecycle>,
    /// `--health-fail-open`.
    pub(crate) fail_open: bool,
    pub(crate) metrics: Arc<Metrics>,
    /// `http_unmatched_requests_total` of this frontend, resolved once.
    pub(crate) unmatched: IntCounter,
    /// The frontend's metric label (`http`, `https`).
    pub(crate) label: String,
    pub(crate) access_log: Arc<AccessLog>,
    /// The TLS port's extra headers (HSTS, client certificate).
    pub(crate) https: Option<HttpsPolicy>,
}

impl HttpProxy {
    pub fn new(
        table: TableReader,
        frontend: Frontend,
        timeouts: Timeouts,
        tries: usize,
        not_found: ErrorPage,
    ) -> Self {
        let metrics = Arc::new(Metrics::new());
        let label = frontend.label();
        HttpProxy {
            table,
            scheme: if frontend == Frontend::Https {
                "https"
            } else {
                "http"
            },
            frontend,
            timeouts,
            tries: tries.clamp(1, MAX_TRIES),
            not_found,
            unavailable: ErrorPage::builtin(503),
            lifecycle: Lifecycle::new(),
            fail_open: true,
            unmatched: metrics.data.unmatched(&label),
            label,
            metrics,
            access_log: Arc::new(AccessLog::off()),
            https: None,
        }
    }

    /// Counts this proxy's requests in `lifecycle`, so a graceful shutdown waits for them.
    pub fn with_lifecycle(mut self, lifecycle: Arc<Lifecycle>) -> Self {
        self.lifecycle = lifecycle;
        self
    }

    /// Records into `metrics` and `access_log` (without this, into a private registry and no
    /// log).
    pub fn with_observability(mut self, metrics: Arc<Metrics>, access_log: Arc<AccessLog>) -> Self {
        self.unmatched = metrics.data.unmatched(&self.label);
        self.metrics = metrics;
        self.access_log = access_log;
        self
    }

    /// `--health-fail-open`: when every endpoint is marked down, use them all (default) rather
    /// than answer 503.
    pub fn with_fail_open(mut self, fail_open: bool) -> Self {
        self.fail_open = fail_open;
        self
    }

    /// Adds the TLS port's headers to requests and responses.
    pub fn with_https(mut self, policy: HttpsPolicy) -> Self {
        self.https = Some(policy);
        self
    }

    pub(crate) fn hsts(&self) -> Option<&HeaderValue> {
        self.https.as_ref().and_then(HttpsPolicy::hsts)
    }
}

/// Per-request state.
#[derive(Default)]
pub struct Ctx {
    table: Option<Arc<RoutingTable>>,
    entry: Option<EntryId>,
    /// The request target to forward when the route strips its prefix.
    rewrite: Option<Uri>,
    client_ip: Option<IpAddr>,
    /// Endpoint the client is pinned to by cookie or affinity (index into the entry).
    pinned: Option<usize>,
    /// The request carried a `SERVERID` that named a live endpoint.
    valid_cookie: bool,
    /// Endpoints tried so far, in order; the last is the current one.
    tried: [usize; MAX_TRIES],
    n_tried: usize,
    in_flight: Option<InFlight>,
    /// Keeps a graceful shutdown waiting until this request ends.
    _active: Option<Active>,
    /// When the request header had been read.
    started: Option<Instant>,
    /// The health gate of this request's entry, decided once.
    gate: Option<HealthGate>,
    /// When the current upstream connection was asked for.
    connect_started: Option<Instant>,
    /// Time to open the upstream connection (none when a pooled one was reused).
    connect_time: Option<Duration>,
    /// The last try failed to connect (so a final error is not a response error).
    connect_failed: bool,
}

impl Ctx {
    pub(crate) fn set_client_ip(&mut self, ip: Option<IpAddr>) {
        self.client_ip = ip;
    }

    /// The upstream connection of the current try is open (`reused`: from a pool).
    pub(crate) fn connected(&mut self, reused: bool) {
        if !reused {
            self.connect_time = self.connect_started.map(|t| t.elapsed());
        }
    }

    pub(crate) fn entry(&self) -> Option<&Entry> {
        self.table.as_ref()?.entry(self.entry?)
    }

    pub(crate) fn was_tried(&self, i: usize) -> bool {
        self.tried[..self.n_tried].contains(&i)
    }

    pub(crate) fn current(&self) -> Option<usize> {
        self.n_tried.checked_sub(1).map(|k| self.tried[k])
    }
}

fn internal(why: &'static str) -> Box<Error> {
    Error::explain(ErrorType::InternalError, why)
}

/// The status for an upstream failure (see `fail_to_proxy`).
fn upstream_status(t: &ErrorType) -> u16 {
    match t {
        ErrorType::ConnectTimedout
        | ErrorType::ConnectRefused
        | ErrorType::ConnectNoRoute
        | ErrorType::ConnectError
        | ErrorType::ConnectProxyFailure
        | ErrorType::SocketError
        | ErrorType::BindError => 503,
        ErrorType::ReadTimedout | ErrorType::WriteTimedout => 504,
        _ => 502,
    }
}

#[async_trait]
impl ProxyHttp for HttpProxy {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx {
            _active: Some(self.lifecycle.enter()),
            started: Some(Instant::now()),
            ..Ctx::default()
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        if let Err(why) = crate::data::listener::check_request(session.req_header(), || {
            session.as_downstream().to_h1_raw()
        }) {
            tracing::debug!(why, "bad request");
            session.set_keepalive(None);
            session.respond_error(400).await?;
            return Ok(true);
        }
        let req = session.req_header();
        let host = req
            .headers
            .get(HOST)
            .map(HeaderValue::as_bytes)
            .or_else(|| req.uri.authority().map(|a| a.as_str().as_bytes()));
        ctx.client_ip = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip());
        let cookies = req
            .headers
            .get_all(COOKIE)
            .iter()
            .map(HeaderValue::as_bytes);
        match self.route(ctx, host, req.uri.path(), cookies) {
            Err(why) => return Err(internal(why)),
            Ok(Route::NotFound) => {
                self.not_found.respond_with(session, self.hsts()).await?;
                return Ok(true);
            }
            Ok(Route::Unavailable) => {
                self.unavailable.respond_with(session, self.hsts()).await?;
                return Ok(true);
            }
            Ok(Route::Proxy { strip: None }) => {}
            Ok(Route::Proxy { strip: Some(strip) }) => {
                let req = session.req_header();
                let pq = req.uri.path_and_query().map_or("/", |pq| pq.as_str());
                let (slash, rest) = strip.apply(pq);
                let stripped = if slash.is_empty() {
                    Uri::try_from(rest)
                } else {
                    Uri::try_from(format!("{slash}{rest}"))
                };
                ctx.rewrite = Some(
                    stripped
                        .map_err(|_| Error::explain(ErrorType::InvalidHTTPHeader, "bad path"))?,
                );
            }
        }

        let upgrade = session.is_upgrade_req();
        let downstream = session.as_downstream_mut();
        downstream.set_keepalive(Some(self.timeouts.keep_alive.as_secs()));
        downstream.set_read_timeout(Some(if upgrade {
            self.timeouts.tunnel
        } else {
            self.timeouts.client_idle
        }));
        Ok(false)
    }

    async fn upstream_peer(&self, session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        let Some(addr) = self.pick(ctx) else {
            return Err(Error::explain(
                ErrorType::HTTPStatus(503),
                "no endpoint left to try",
            ));
        };

        let mut peer = HttpPeer::new(addr, false, String::new());
        let o = &mut peer.options;
        o.connection_timeout = Some(self.timeouts.connect);
        o.idle_timeout = Some(self.timeouts.server_idle);
        let io_timeout = if session.is_upgrade_req() {
            self.timeouts.tunnel
        } else {
            self.timeouts.server_idle
        };
        o.read_timeout = Some(io_timeout);
        o.write_timeout = Some(io_timeout);
        Ok(Box::new(peer))
    }

    fn fail_to_connect(
        &self,
        _session: &mut Session,
        _peer: &HttpPeer,
        ctx: &mut Ctx,
        mut e: Box<Error>,
    ) -> Box<Error> {
        e.set_retry(self.connect_failed(ctx));
        e
    }

    /// A failure after connecting. The endpoint is ejected for the passive-health period
    /// (HAProxy `observe layer4` with `on-error mark-down`); when nothing has reached the
    /// client yet, an idempotent request whose body is still buffered is replayed on another
    /// endpoint
    /// (HAProxy `retry-on empty-response`); a timeout is not replayed, as the backend may
    /// still be working on it and the client's wait is already spent. A pooled connection the
    /// backend had closed while idle is stale, not a fault: replayed, possibly on the same
    /// endpoint, without an ejection.
    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        session: &mut Session,
        e: Box<Error>,
        ctx: &mut Ctx,
        client_reused: bool,
    ) -> Box<Error> {
        let mut e = e.more_context(format!("Peer: {peer}"));
        let failure = Failure {
            replayable: session.req_header().method.is_idempotent()
                && !session.as_ref().retry_buffer_truncated()
                && session.response_written().is_none(),
            upstream: *e.esource() == ErrorSource::Upstream,
            timed_out: matches!(
                e.etype(),
                ErrorType::ReadTimedout | ErrorType::WriteTimedout
            ),
            closed: matches!(
                e.etype(),
                ErrorType::ConnectionClosed | ErrorType::ReadError | ErrorType::WriteError
            ),
            reused: client_reused,
            // A tunnel (101) that ends abruptly says nothing about the endpoint's health.
            tunnel: session
                .response_written()
                .is_some_and(|r| r.status == http::StatusCode::SWITCHING_PROTOCOLS),
        };
        e.set_retry(self.upstream_failed(ctx, &failure));
        e
    }

    /// The final answer when proxying failed, in HAProxy's terms: no connection to any
    /// endpoint is 503 (`sC`/`SC`), no response within --server-timeout is 504 (`sH`), a
    /// connection closed or reset before a complete response header, or an invalid one, is
    /// 502 (`SH`/`PH`). Once a response header went out nothing can be said any more: the
    /// client connection is closed, so a truncated body is never mistaken for a whole one.
    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, _ctx: &mut Ctx) -> FailToProxy
    where
        Ctx: Send + Sync,
    {
        let code = match (e.etype(), e.esource()) {
            (ErrorType::HTTPStatus(code), _) => *code,
            (t, ErrorSource::Upstream) => upstream_status(t),
            (
                ErrorType::WriteError | ErrorType::ReadError | ErrorType::ConnectionClosed,
                ErrorSource::Downstream,
            ) => 0,
            (_, ErrorSource::Downstream) => 400,
            _ => 500,
        };
        if code > 0 {
            session.respond_error(code).await.unwrap_or_else(|err| {
                tracing::debug!(error = %err, "cannot send the error response");
            });
        }
        FailToProxy {
            error_code: code,
            can_reuse_downstream: false,
        }
    }

    async fn connected_to_upstream(
        &self,
        _session: &mut Session,
        reused: bool,
        _peer: &HttpPeer,
        #[cfg(unix)] _fd: std::os::unix::io::RawFd,
        #[cfg(windows)] _sock: std::os::windows::io::RawSocket,
        _digest: Option<&Digest>,
        ctx: &mut Ctx,
    ) -> Result<()> {
        ctx.connected(reused);
        Ok(())
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        req: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let Some(uri) = ctx.rewrite.clone() {
            req.set_uri(uri);
        }
        // Pingora accepts identical duplicate lengths (RFC 9110 §8.6) but forwards them all;
        // the backend gets one.
        if req.headers.get_all(CONTENT_LENGTH).iter().nth(1).is_some()
            && let Some(first) = req.headers.get(CONTENT_LENGTH).cloned()
        {
            req.insert_header(CONTENT_LENGTH, first)?;
        }
        if ctx.entry().is_some_and(|e| e.cookie_sticky) {
            strip_our_cookie(req)?;
        }
        if let Some(ip) = ctx.client_ip {
            let xff = match req.headers.get("x-forwarded-for").map(|v| v.to_str()) {
                Some(Ok(prev)) if !prev.is_empty() => format!("{prev}, {ip}"),
                _ => ip.to_string(),
            };
            req.insert_header("x-forwarded-for", xff)?;
        }
        req.insert_header("x-forwarded-proto", self.scheme)?;
        if let Some(https) = &self.https {
            https.request_headers(session.digest(), req)?;
        }
        Ok(())
    }

    async fn response_filter(
        &self,
        _session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let Some(https) = &self.https {
            https.response_headers(resp)?;
        }
        if let Some(id) = self.set_cookie(ctx) {
            resp.append_header(SET_COOKIE, sticky::set_cookie_value(id))?;
            let cc =
                no_cache_set_cookie(resp.headers.get(CACHE_CONTROL).map(HeaderValue::as_bytes));
            resp.insert_header(CACHE_CONTROL, cc)?;
        }
        Ok(())
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut Ctx) {
        let req = session.req_header();
        let host = req
            .headers
            .get(HOST)
            .map(HeaderValue::as_bytes)
            .or_else(|| req.uri.authority().map(|a| a.as_str().as_bytes()))
            .unwrap_or_default();
        self.record(
            ctx,
            &Finished {
                status: session.response_written().map_or(0, |r| r.status.as_u16()),
                bytes_in: session.body_bytes_read() as u64,
                bytes_out: session.body_bytes_sent() as u64,
                failed: e.is_some(),
                client: session
                    .client_addr()
                    .and_then(|a| a.as_inet())
                    .map(|a| std::net::SocketAddr::new(a.ip(), a.port())),
                host,
                method: req.method.as_str(),
                path: req.uri.path(),
            },
        );
    }
}

// === shared request logic ===

/// What routing decided for a request.
pub enum Route {
    /// No rule matched: the not-found page.
    NotFound,
    /// No endpoint takes this client: the 503 page.
    Unavailable,
    /// Proxy it, with the matched prefix removed from the target when given.
    Proxy { strip: Option<Strip> },
}

/// How a try failed after its upstream connection was open.
pub struct Failure {
    /// Nothing has reached the client and the request may be sent again.
    pub replayable: bool,
    /// The upstream side failed (not the client).
    pub upstream: bool,
    pub timed_out: bool,
    /// The connection was closed or broken (not a protocol error).
    pub closed: bool,
    /// The upstream connection came from the pool.
    pub reused: bool,
    /// A switched-protocol tunnel was open.
    pub tunnel: bool,
}

/// What `record` needs to know of a finished request.
pub struct Finished<'a> {
    /// 0 when no response was written.
    pub status: u16,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub failed: bool,
    pub client: Option<std::net::SocketAddr>,
    pub host: &'a [u8],
    pub method: &'a str,
    pub path: &'a str,
}

/// Whether an endpoint of `entry` that this request has not tried may still take it.
fn any_untried(ctx: &Ctx, entry: &Entry) -> bool {
    let gate = ctx.gate.unwrap_or(HealthGate::SkipDown);
    (0..entry.endpoints.len()).any(|i| !ctx.was_tried(i) && entry.eligible(i, gate))
}

/// `Cache-Control` with `no-cache="set-cookie"` added (`nocache`: a shared cache must not hand
/// the load balancer's cookie to other clients).
pub fn no_cache_set_cookie(prev: Option<&[u8]>) -> String {
    match prev.map(std::str::from_utf8) {
        Some(Ok(prev)) if !prev.is_empty() => format!("{prev}, no-cache=\"set-cookie\""),
        _ => "no-cache=\"set-cookie\"".to_string(),
    }
}

/// The decisions both HTTP/1 paths (Pingora's and `fast_path`) share, so that they route,
/// pick, retry, eject and count alike.
impl HttpProxy {
    /// Matches host and path and settles stickiness; fills `ctx` (table, entry, gate, pin).
    /// `ctx.client_ip` must be set first.
    pub fn route<'c>(
        &self,
        ctx: &mut Ctx,
        host: Option<&[u8]>,
        path: &str,
        mut cookies: impl Iterator<Item = &'c [u8]>,
    ) -> std::result::Result<Route, &'static str> {
        let table = self.table.load();
        let Some(rule) = table
            .router(self.frontend)
            .and_then(|r| r.lookup(host, path))
        else {
            return Ok(Route::NotFound);
        };
        let target = rule.target;
        let strip = rule.strip.then(|| Strip::of(&rule.prefix));
        let Some(entry) = table.entry(target) else {
            return Err("route names a missing entry");
        };
        let now = Instant::now();
        let gate = entry.health_gate(self.fail_open);
        ctx.gate = Some(gate);
        if entry.cookie_sticky {
            let pinned = cookies
                .find_map(|v| sticky::find_cookie(v, COOKIE_NAME))
                .and_then(|id| entry.endpoint_by_cookie(id))
                .filter(|&i| entry.pin_allowed(i, now, gate));
            ctx.valid_cookie = pinned.is_some();
            ctx.pinned = pinned;
        } else if let (Some(timeout), Some(ip)) = (entry.client_ip_affinity, ctx.client_ip) {
            ctx.pinned = entry
                .state
                .affinity
                .get(&ip, now, timeout)
                .and_then(|addr| entry.endpoint_by_addr(&addr))
                .filter(|&i| entry.pin_allowed(i, now, gate));
        }
        // No endpoint takes new sessions (none, all draining, or all down without fail-open)
        // and this client is not pinned to one that still serves it: the app is visibly down.
        let none_new = !entry.endpoints.iter().any(|e| e.takes_new());
        let unavailable = ctx.pinned.is_none() && (none_new || gate == HealthGate::Closed);
        ctx.entry = Some(target);
        ctx.table = Some(table);
        Ok(if unavailable {
            Route::Unavailable
        } else {
            Route::Proxy { strip }
        })
    }

    /// Picks the endpoint for the next try (the pinned one first, then the algorithm among
    /// those not tried), counts it in flight and remembers it. `None`: nothing left to try.
    pub fn pick(&self, ctx: &mut Ctx) -> Option<std::net::SocketAddr> {
        let entry = ctx.entry()?;
        let now = Instant::now();
        let chosen = match ctx.pinned.filter(|&i| !ctx.was_tried(i)) {
            Some(i) => Some(i),
            None => {
                let pick = Pick {
                    algorithm: entry.algorithm,
                    cursor: &entry.state.cursor,
                    client_hash: ctx.client_ip.as_ref().map_or(0, sticky::client_hash),
                    maxconn: entry.maxconn,
                };
                let gate = ctx.gate.unwrap_or(HealthGate::SkipDown);
                entry.choose(&pick, gate, now, &ctx.tried[..ctx.n_tried])
            }
        };
        let i = chosen?;
        let endpoint = &entry.endpoints[i];
        let addr = endpoint.addr;
        let guard = endpoint.state.0.enter();
        if let (Some(timeout), Some(ip)) = (entry.client_ip_affinity, ctx.client_ip)
            && ctx.pinned != Some(i)
        {
            entry.state.affinity.set(ip, addr, now, timeout);
        }
        if ctx.n_tried < MAX_TRIES {
            ctx.tried[ctx.n_tried] = i;
            ctx.n_tried += 1;
        }
        ctx.in_flight = Some(guard);
        ctx.connect_started = Some(Instant::now());
        ctx.connect_failed = false;
        Some(addr)
    }

    /// The current try could not connect: ejects the endpoint for the passive-health period
    /// and says whether to try another (nothing was sent, so any method may go elsewhere).
    pub fn connect_failed(&self, ctx: &mut Ctx) -> bool {
        let Some(entry) = ctx.entry() else {
            return false;
        };
        let ejected = self.eject_current(ctx, entry);
        if let Some(i) = ctx.current() {
            let state = &entry.endpoints[i].state;
            state.totals.connect_errors.fetch_add(1, Ordering::Relaxed);
            if let (Some(_), Some(ip)) = (entry.client_ip_affinity, ctx.client_ip) {
                entry.state.affinity.forget(&ip);
            }
        }
        let retry = ctx.n_tried < self.tries && any_untried(ctx, entry);
        self.count_failure(ctx, ejected, retry);
        ctx.in_flight = None;
        ctx.connect_failed = true;
        retry
    }

    /// A failure after connecting; says whether to replay the request. The endpoint is
    /// ejected for the passive-health period (HAProxy `observe layer4` with `on-error
    /// mark-down`); when nothing has reached the client yet, a replayable request goes to
    /// another endpoint (HAProxy `retry-on empty-response`); a timeout is not replayed, as the
    /// backend may still be working on it and the client's wait is already spent. A pooled
    /// connection the backend had closed while idle is stale, not a fault: replayed, possibly
    /// on the same endpoint, without an ejection.
    pub fn upstream_failed(&self, ctx: &mut Ctx, f: &Failure) -> bool {
        ctx.in_flight = None;
        if f.upstream && f.reused && !f.timed_out && f.closed {
            // Let the same endpoint be picked again.
            ctx.n_tried = ctx.n_tried.saturating_sub(1);
            return f.replayable;
        }
        let Some(entry) = ctx.entry() else {
            return false;
        };
        if !f.upstream || f.tunnel {
            return false;
        }
        let ejected = self.eject_current(ctx, entry);
        let retry =
            f.replayable && !f.timed_out && ctx.n_tried < self.tries && any_untried(ctx, entry);
        self.count_failure(ctx, ejected, retry);
        retry
    }

    /// Marks the current try's endpoint down for the passive-health period; true when it was
    /// up until now (an ejection to count).
    fn eject_current(&self, ctx: &Ctx, entry: &Entry) -> bool {
        let Some(i) = ctx.current() else {
            return false;
        };
        let now = Instant::now();
        let state = &entry.endpoints[i].state;
        let ejected = !state.is_down(now);
        state.mark_down(now, self.timeouts.passive_down);
        ejected
    }

    fn count_failure(&self, ctx: &Ctx, ejected: bool, retry: bool) {
        if let (Some(table), Some(id), Some(entry)) = (&ctx.table, ctx.entry, ctx.entry()) {
            self.metrics.data.count_failure(
                table.generation,
                id as usize,
                &entry.name,
                ejected,
                retry,
            );
        }
    }

    /// The endpoint id for a `Set-Cookie` on this response, when the entry is cookie-sticky
    /// and the client did not already carry a valid cookie for the endpoint that answered.
    pub fn set_cookie(&self, ctx: &Ctx) -> Option<u64> {
        let entry = ctx.entry()?;
        if !entry.cookie_sticky {
            return None;
        }
        let i = ctx.current()?;
        if ctx.valid_cookie && ctx.pinned == Some(i) {
            return None;
        }
        Some(entry.endpoints[i].cookie_id)
    }

    /// Counts a finished request in the metrics and the access log, once.
    pub fn record(&self, ctx: &mut Ctx, f: &Finished<'_>) {
        ctx.in_flight = None;
        let duration = ctx.started.map_or(Duration::ZERO, |t| t.elapsed());
        let mut endpoint = None;
        match (&ctx.table, ctx.entry) {
            (Some(table), Some(id)) => {
                let Some(entry) = table.entry(id) else {
                    return;
                };
                self.metrics
                    .data
                    .with_entry(table.generation, id as usize, &entry.name, |h| {
                        h.requests(f.status).inc();
                        h.duration.observe(duration.as_secs_f64());
                        if let Some(c) = ctx.connect_time {
                            h.connect.observe(c.as_secs_f64());
                        }
                        h.request_bytes.inc_by(f.bytes_in);
                        h.response_bytes.inc_by(f.bytes_out);
                    });
                if let Some(ep) = ctx.current().and_then(|i| entry.endpoints.get(i)) {
                    let t = &ep.state.totals;
                    t.bytes_in.fetch_add(f.bytes_in, Ordering::Relaxed);
                    t.bytes_out.fetch_add(f.bytes_out, Ordering::Relaxed);
                    if f.failed && !ctx.connect_failed {
                        t.response_errors.fetch_add(1, Ordering::Relaxed);
                    }
                    endpoint = Some(ep.addr);
                }
            }
            _ => self.unmatched.inc(),
        }
        if !self.access_log.enabled() {
            return;
        }
        let host = String::from_utf8_lossy(&f.host[..f.host.len().min(255)]);
        let entry = ctx.entry().map_or("", |e| &e.name);
        self.access_log.http(&HttpRecord {
            time: SystemTime::now(),
            client: f.client,
            frontend: &self.label,
            host: &host,
            method: f.method,
            path: f.path,
            status: f.status,
            entry,
            endpoint,
            bytes_in: f.bytes_in,
            bytes_out: f.bytes_out,
            duration,
            connect: ctx.connect_time,
            generation: ctx.table.as_ref().map_or(0, |t| t.generation),
            retries: u32::try_from(ctx.n_tried.saturating_sub(1)).unwrap_or(0),
        });
    }
}

// === impl CountConnections ===

/// Wraps a Pingora server application so that `downstream_open_connections` counts the client
/// connections it is serving (one `process_new` call lasts as long as its connection).
pub struct CountConnections<A> {
    inner: Arc<A>,
    open: IntGauge,
}

impl<A> CountConnections<A> {
    pub fn new(inner: A, open: IntGauge) -> Self {
        CountConnections {
            inner: Arc::new(inner),
            open,
        }
    }
}

#[async_trait]
impl<A: ServerApp + Send + Sync + 'static> ServerApp for CountConnections<A> {
    async fn process_new(
        self: &Arc<Self>,
        stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let _open = OpenConnection::new(self.open.clone());
        self.inner.process_new(stream, shutdown).await
    }

    async fn cleanup(&self) {
        self.inner.cleanup().await;
    }
}

/// Removes the load balancer's cookie from the forwarded request ("indirect" mode), keeping
/// every other cookie.
fn strip_our_cookie(req: &mut RequestHeader) -> Result<()> {
    let has_ours = req
        .headers
        .get_all(COOKIE)
        .iter()
        .any(|v| sticky::find_cookie(v.as_bytes(), COOKIE_NAME).is_some());
    if !has_ours {
        return Ok(());
    }
    let kept: Vec<Vec<u8>> = req
        .headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| sticky::strip_cookie(v.as_bytes(), COOKIE_NAME))
        .collect();
    req.remove_header(&COOKIE);
    for v in kept {
        req.append_header(COOKIE, v)?;
    }
    Ok(())
}

// === impl ErrorPage responses ===

impl ErrorPage {
    /// Writes this page as the whole response.
    pub async fn respond(&self, session: &mut Session) -> Result<()> {
        self.respond_with(session, None).await
    }

    /// Writes this page, with `Strict-Transport-Security` when given (the TLS port).
    pub async fn respond_with(
        &self,
        session: &mut Session,
        hsts: Option<&HeaderValue>,
    ) -> Result<()> {
        let mut resp = ResponseHeader::build(self.status, Some(5))?;
        resp.insert_header(CONTENT_TYPE, self.content_type.as_str())?;
        resp.insert_header(CONTENT_LENGTH, self.body.len().to_string())?;
        resp.insert_header(CACHE_CONTROL, "no-cache")?;
        if let Some(v) = hsts {
            resp.insert_header(http::header::STRICT_TRANSPORT_SECURITY, v.clone())?;
        }
        session.write_response_header(Box::new(resp), false).await?;
        session
            .write_response_body(Some(Bytes::clone(&self.body)), true)
            .await?;
        Ok(())
    }
}

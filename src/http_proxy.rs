//! The HTTP data plane: Pingora's `ProxyHttp` for one frontend (the plain port, or later the
//! TLS port).
//!
//! Per request it loads the current table once (an `Arc` kept in the context, never a guard
//! across an await), matches host and path, honours stickiness, picks an endpoint and hands
//! Pingora a peer built from a socket address that is already in the table. It must stay thin:
//! lookups only, no DNS, no locks held across an await, no `unwrap`, no per-request logging
//! above debug; routing policy belongs to `translate`, selection to `balance`.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, COOKIE, HOST, SET_COOKIE};
use http::{HeaderValue, Uri};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::{HttpPeer, ProxyHttp, Session};
use pingora::{Error, ErrorType, Result};

use crate::balance::{self, Pick};
use crate::config::Timeouts;
use crate::error_page::ErrorPage;
use crate::lifecycle::{Active, Lifecycle};
use crate::matcher;
use crate::sticky::{self, COOKIE_NAME};
use crate::table::{Entry, EntryId, Frontend, InFlight, RoutingTable, TableReader};

/// Most endpoints a request may try (the configured tries are capped to this).
const MAX_TRIES: usize = 8;

/// The proxy for one frontend.
pub struct HttpProxy {
    table: TableReader,
    frontend: Frontend,
    /// `X-Forwarded-Proto` value.
    scheme: &'static str,
    timeouts: Timeouts,
    tries: usize,
    not_found: ErrorPage,
    unavailable: ErrorPage,
    lifecycle: Arc<Lifecycle>,
}

impl HttpProxy {
    pub fn new(
        table: TableReader,
        frontend: Frontend,
        timeouts: Timeouts,
        tries: usize,
        not_found: ErrorPage,
    ) -> Self {
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
        }
    }

    /// Counts this proxy's requests in `lifecycle`, so a graceful shutdown waits for them.
    pub fn with_lifecycle(mut self, lifecycle: Arc<Lifecycle>) -> Self {
        self.lifecycle = lifecycle;
        self
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
}

impl Ctx {
    fn entry(&self) -> Option<&Entry> {
        self.table.as_ref()?.entry(self.entry?)
    }

    fn was_tried(&self, i: usize) -> bool {
        self.tried[..self.n_tried].contains(&i)
    }

    fn current(&self) -> Option<usize> {
        self.n_tried.checked_sub(1).map(|k| self.tried[k])
    }
}

fn internal(why: &'static str) -> Box<Error> {
    Error::explain(ErrorType::InternalError, why)
}

#[async_trait]
impl ProxyHttp for HttpProxy {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx {
            _active: Some(self.lifecycle.enter()),
            ..Ctx::default()
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        let table = self.table.load();
        let req = session.req_header();
        let host = req
            .headers
            .get(HOST)
            .map(HeaderValue::as_bytes)
            .or_else(|| req.uri.authority().map(|a| a.as_str().as_bytes()));
        let Some(rule) = table
            .router(self.frontend)
            .and_then(|r| r.lookup(host, req.uri.path()))
        else {
            self.not_found.respond(session).await?;
            return Ok(true);
        };
        let Some(entry) = table.entry(rule.target) else {
            return Err(internal("route names a missing entry"));
        };
        if rule.strip {
            let pq = req.uri.path_and_query().map_or("/", |pq| pq.as_str());
            let stripped = matcher::strip_prefix(pq, &rule.prefix);
            ctx.rewrite = Some(
                Uri::try_from(stripped)
                    .map_err(|_| Error::explain(ErrorType::InvalidHTTPHeader, "bad path"))?,
            );
        }
        ctx.client_ip = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip());
        let now = Instant::now();
        if entry.cookie_sticky {
            let pinned = req
                .headers
                .get_all(COOKIE)
                .iter()
                .find_map(|v| sticky::find_cookie(v.as_bytes(), COOKIE_NAME))
                .and_then(|id| entry.endpoint_by_cookie(id))
                .filter(|&i| !entry.endpoints[i].state.is_down(now));
            ctx.valid_cookie = pinned.is_some();
            ctx.pinned = pinned;
        } else if let (Some(timeout), Some(ip)) = (entry.client_ip_affinity, ctx.client_ip) {
            ctx.pinned = entry
                .state
                .affinity
                .get(&ip, now, timeout)
                .and_then(|addr| entry.endpoint_by_addr(&addr))
                .filter(|&i| !entry.endpoints[i].state.is_down(now));
        }
        // No endpoint takes new sessions (none, or all draining) and this client is not pinned
        // to a draining one: the app is visibly down.
        if ctx.pinned.is_none() && !entry.endpoints.iter().any(|e| e.takes_new()) {
            self.unavailable.respond(session).await?;
            return Ok(true);
        }
        ctx.entry = Some(rule.target);
        ctx.table = Some(table);

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
        let entry = ctx.entry().ok_or_else(|| internal("no entry chosen"))?;
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
                let eps = &entry.endpoints;
                let fresh = |i: usize| !ctx.was_tried(i) && eps[i].takes_new();
                balance::pick(eps, &pick, |i| fresh(i) && !eps[i].state.is_down(now))
                    // Every untried endpoint is marked down: the marks are a guess, so try one.
                    .or_else(|| balance::pick(eps, &pick, fresh))
            }
        };
        let Some(i) = chosen else {
            return Err(Error::explain(
                ErrorType::HTTPStatus(503),
                "no endpoint left to try",
            ));
        };
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
        let Some(entry) = ctx.entry() else {
            return e;
        };
        let now = Instant::now();
        if let Some(i) = ctx.current() {
            entry.endpoints[i]
                .state
                .mark_down(now, self.timeouts.passive_down);
            if let (Some(_), Some(ip)) = (entry.client_ip_affinity, ctx.client_ip) {
                entry.state.affinity.forget(&ip);
            }
        }
        // Redispatch: nothing was sent yet, so any method may go to another endpoint.
        let untried =
            (0..entry.endpoints.len()).any(|i| !ctx.was_tried(i) && entry.endpoints[i].takes_new());
        e.set_retry(ctx.n_tried < self.tries && untried);
        ctx.in_flight = None;
        e
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
        let _ = session;
        Ok(())
    }

    async fn response_filter(
        &self,
        _session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        let Some(entry) = ctx.entry() else {
            return Ok(());
        };
        if !entry.cookie_sticky {
            return Ok(());
        }
        let Some(i) = ctx.current() else {
            return Ok(());
        };
        if ctx.valid_cookie && ctx.pinned == Some(i) {
            return Ok(());
        }
        resp.append_header(
            SET_COOKIE,
            sticky::set_cookie_value(&entry.endpoints[i].cookie_id),
        )?;
        // `nocache`: a shared cache must not hand this cookie to other clients.
        let cc = match resp.headers.get(CACHE_CONTROL).map(|v| v.to_str()) {
            Some(Ok(prev)) if !prev.is_empty() => format!("{prev}, no-cache=\"set-cookie\""),
            _ => "no-cache=\"set-cookie\"".to_string(),
        };
        resp.insert_header(CACHE_CONTROL, cc)?;
        Ok(())
    }

    async fn logging(&self, _session: &mut Session, _e: Option<&Error>, ctx: &mut Ctx) {
        ctx.in_flight = None;
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
        let mut resp = ResponseHeader::build(self.status, Some(4))?;
        resp.insert_header(CONTENT_TYPE, self.content_type.as_str())?;
        resp.insert_header(CONTENT_LENGTH, self.body.len().to_string())?;
        resp.insert_header(CACHE_CONTROL, "no-cache")?;
        session.write_response_header(Box::new(resp), false).await?;
        session
            .write_response_body(Some(Bytes::clone(&self.body)), true)
            .await?;
        Ok(())
    }
}

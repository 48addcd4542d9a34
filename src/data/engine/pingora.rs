//! The fallback seam: Pingora's `ProxyHttp` for one frontend (the plain port or the TLS
//! port), serving what the fast path declines before a byte goes upstream. That is what
//! Pingora still serves better than switchyard's own engines, and only that: requests with a
//! body to HTTP/1 backends (its body buffering and replay), upgrades and tunnels (WebSocket,
//! CONNECT-style relays), Gateway rules with filters or timeouts (header operations, URL
//! rewrites, mirrors, request timeouts, carried out on its header maps), HTTP/1.0 and HTTP/1
//! heads the fast path's parser is not sure of (odd framing, dot-segments, bare line feeds,
//! non-ASCII targets), HTTP/2 streams the relay does not take, and, with `--fast-path=false`,
//! everything. Each hook asks `decide` what to do — the exchange's opening
//! (`decide::exchange`), the endpoint for each try and the verdict on a failure (`Attempt`),
//! the header edits, switchyard's own answers — and carries it out on Pingora's types. It must
//! hold no request policy of its own, do no DNS, hold no lock across an await and log nothing
//! per request above debug. Recording goes through `record::Recorder`, once per request, in
//! `logging`.

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::{HeaderValue, Uri};
use pingora::apps::ServerApp;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::{HttpPeer, ProxyHttp, Session};
use pingora::protocols::Digest;
use pingora::protocols::Stream;
use pingora::proxy::{FailToProxy, ProxyWarnLogContext};
use pingora::server::ShutdownWatch;
use pingora::{Error, ErrorSource, ErrorType, Result};
use prometheus::IntGauge;

use crate::data::external_auth::subrequest_head;
use crate::data::frontend::HttpProxy;
use crate::data::headers::{
    Fields, GRPC_STATUS_NAME, PingoraView, apply, exchange_request, grpc_of, grpc_trailers,
    host_of, join_cookies, keep_origin, protocol_name, stripped_target,
};
use crate::data::mirror::BodyCopies;
use crate::data::record::Finished;
use crate::data::tls;
use crate::data::upstream::h2_pool::H2_STREAMS_PER_CONNECTION;
use crate::decide::attempt::{Attempt, BodyKept, Failure, Route, Sent};
use crate::decide::cause::{Cause, Rejection};
use crate::decide::edits::{Edits, Forwarding, ip_text, request_edits, response_edits};
use crate::decide::error_page::{Answer, failure_answer, grpc_answer, rejection_answer};
use crate::decide::exchange;
use crate::decide::external_auth::{Verdict, cache_key, cached, keep, subrequest_fields, verdict};
use crate::decide::grpc::Ending;
use crate::decide::hash_key::Keyed;
use crate::decide::reply::{Asked, Reply, reply};
use crate::decide::target::normalize_path;
use crate::ops::health::PeerTls;
use crate::ops::lifecycle::Active;
use crate::ops::metrics::{OpenConnection, Resumed};
use crate::table::Frontend;
use crate::table::external_auth::ExternalAuth;

/// Per-request state.
pub struct Ctx {
    attempt: Attempt,
    /// The request target to forward when the route strips its prefix.
    rewrite: Option<Uri>,
    /// Keeps a graceful shutdown waiting until this request ends.
    _active: Active,
    /// When the request header had been read.
    started: Instant,
    /// The request speaks gRPC: switchyard's own answers are gRPC statuses.
    grpc: bool,
    /// A gRPC call's `grpc-timeout`, from when the request arrived: no upstream wait outlives it.
    deadline: Option<Instant>,
    /// Refused before routing.
    rejected: Option<Rejection>,
    /// Request body bytes read so far (against the route's `proxy-body-size`).
    body_read: u64,
    /// A gRPC call's `grpc-status` trailer (from the endpoint, or switchyard's own when it
    /// ended the call mid-stream); a trailers-only answer has it in the response header.
    grpc_trailer: Option<Ending>,
    /// The `RequestMirror` copies still waiting for this request's body.
    mirror_body: Option<BodyCopies>,
    /// The status of the endpoint's response header (1xx not counted), for the access log.
    upstream_status: Option<u16>,
    /// The endpoint's response is dropped for another try (`proxy-next-upstream http_*`,
    /// counted already): the error that carries it out is a retry, nothing more.
    status_retry: bool,
}

impl Ctx {
    /// `cause`, unless the call's own deadline has passed (`grpc::blame`).
    fn blame(&self, cause: Cause) -> Cause {
        crate::decide::grpc::blame(cause, self.deadline, Instant::now())
    }

    fn deadline_passed(&self) -> bool {
        crate::decide::grpc::deadline_passed(self.deadline, Instant::now())
    }
}

/// The cause of a Pingora error raised before the upstream connection was open.
/// `None` for an error that does not belong to opening the connection.
fn connect_cause(t: &ErrorType) -> Option<Cause> {
    Some(match t {
        ErrorType::ConnectRefused => Cause::ConnectRefused,
        ErrorType::ConnectTimedout => Cause::ConnectTimedOut,
        ErrorType::ConnectNoRoute
        | ErrorType::ConnectError
        | ErrorType::ConnectProxyFailure
        | ErrorType::SocketError
        | ErrorType::BindError => Cause::ConnectFailed,
        ErrorType::TLSHandshakeFailure
        | ErrorType::TLSHandshakeTimedout
        | ErrorType::InvalidCert
        | ErrorType::TLSWantX509Lookup
        | ErrorType::HandshakeError => Cause::UpstreamTls,
        _ => return None,
    })
}

/// The cause of a Pingora error (`responded`: a response header went to the client;
/// `tunnel`: a switched-protocol tunnel was open).
fn cause_of(e: &Error, responded: bool, tunnel: bool) -> Cause {
    match (e.esource(), e.etype()) {
        (ErrorSource::Upstream, t) if let Some(c) = connect_cause(t) => c,
        // As the fast path's relay says of it: the stream went nowhere, as a closed connection.
        (ErrorSource::Upstream, _) if refused(e) => Cause::UpstreamClosed,
        (ErrorSource::Upstream, _) if tunnel => Cause::TunnelEnded,
        (
            ErrorSource::Upstream,
            ErrorType::ConnectionClosed | ErrorType::ReadError | ErrorType::WriteError,
        ) if responded => Cause::ResponseTruncated,
        (ErrorSource::Upstream, ErrorType::ReadTimedout | ErrorType::WriteTimedout) => {
            Cause::UpstreamTimedOut
        }
        (
            ErrorSource::Upstream,
            ErrorType::ConnectionClosed | ErrorType::ReadError | ErrorType::WriteError,
        ) => Cause::UpstreamClosed,
        (ErrorSource::Upstream, _) => Cause::InvalidResponse,
        (
            ErrorSource::Downstream,
            ErrorType::ConnectionClosed | ErrorType::ReadError | ErrorType::WriteError,
        ) => Cause::ClientGone,
        (ErrorSource::Downstream, _) => Cause::BadRequest,
        _ => Cause::Internal,
    }
}

/// The backend did not process the stream (RFC 9113 §8.7): it refused it (`REFUSED_STREAM`), or
/// the stream was past the last one of the GOAWAY it sent. A GOAWAY `h2` sends itself (the
/// backend broke the protocol) says no such thing. The fast path's relay and Pingora's proxy
/// read an `h2` error alike with this.
pub(crate) fn h2_unprocessed(e: &h2::Error) -> bool {
    e.is_remote()
        && (e.is_go_away() || (e.is_reset() && e.reason() == Some(h2::Reason::REFUSED_STREAM)))
}

/// `h2_unprocessed` of the `h2` error that caused `e`, if one did (Pingora's HTTP/2 upstream).
fn refused(e: &Error) -> bool {
    e.root_cause()
        .downcast_ref::<h2::Error>()
        .is_some_and(h2_unprocessed)
}

impl HttpProxy {
    /// Asks the route's external authentication about the request: `None` when it allows
    /// it (the attempt then carries what the service vouched for), else switchyard's answer.
    /// `host` and `path`: the request's, as routed.
    async fn authorize(
        &self,
        session: &Session,
        attempt: &mut Attempt,
        auth: &ExternalAuth,
        host: Option<&[u8]>,
        path: &str,
    ) -> Option<Route> {
        let req = session.req_header();
        let https = self.frontend == Frontend::Https;
        let request_uri = req.uri.path_and_query().map_or("/", |pq| pq.as_str());
        let host_text = host
            .and_then(|h| std::str::from_utf8(h).ok())
            .unwrap_or_default();
        // An answer kept for the request's key (`auth-cache-key`) is given again unasked.
        let now = Instant::now();
        let key = auth.cache.as_ref().map(|c| {
            let keyed = Keyed {
                client: attempt.client_ip(),
                host,
                path,
            };
            (c, cache_key(c, &PingoraView(req), &keyed))
        });
        let kept = key.and_then(|(c, k)| cached(c, &k, now));
        let answer = match kept {
            Some(kept) => Some(kept),
            None => {
                let set =
                    subrequest_fields(auth, https, host_text, req.method.as_str(), request_uri);
                let head = with_request_edits(&self.fwd, session, attempt, |edits| {
                    subrequest_head(&auth.method, &auth.path, req, edits, &set)
                });
                let addr = attempt.auth_endpoint(auth, now);
                let answer = self
                    .auth_calls
                    .ask(
                        addr,
                        &head,
                        attempt.connect_timeout(self.timeouts.connect),
                        attempt.server_timeout(self.timeouts.server_idle),
                    )
                    .await;
                if answer.is_none() {
                    tracing::debug!(url = %auth.url, ?addr, "external authentication gave no answer");
                }
                if let (Some((c, k)), Some(a)) = (key, &answer) {
                    keep(c, k, a, now);
                }
                answer.map(Arc::new)
            }
        };
        let answer = answer.as_deref();
        let verdict = verdict(auth, answer, https, host, path, req.uri.query());
        self.auth_calls.count(&verdict);
        match verdict {
            Verdict::Allowed(granted) => {
                attempt.grant(granted);
                None
            }
            Verdict::Denied(denial) => Some(Route::from(denial)),
        }
    }
}

/// Writes one of switchyard's own answers as the whole response.
async fn write_answer(session: &mut Session, a: &Answer<'_>, body: Bytes) -> Result<()> {
    let mut resp = ResponseHeader::build(a.status, Some(a.fields.iter().count()))?;
    apply(&mut resp, &a.fields)?;
    session.write_response_header(Box::new(resp), false).await?;
    session.write_response_body(Some(body), true).await?;
    Ok(())
}

#[async_trait]
impl ProxyHttp for HttpProxy {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx {
            attempt: Attempt::new(None),
            rewrite: None,
            _active: self.enter(),
            started: Instant::now(),
            grpc: false,
            deadline: None,
            rejected: None,
            body_read: 0,
            grpc_trailer: None,
            mirror_body: None,
            upstream_status: None,
            status_retry: false,
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        // HTTP/1 headers were checked before Pingora read them (`intake`); this catches
        // HTTP/2 ones, with the same rule and answer.
        if let Err(r) = crate::data::headers::check_request(session.req_header(), || {
            session.as_downstream().to_h1_raw()
        }) {
            tracing::debug!(reason = r.as_str(), "request refused");
            session.set_keepalive(None);
            ctx.rejected = Some(r);
            write_answer(session, &rejection_answer(r, &self.fwd), Bytes::new()).await?;
            return Ok(true);
        }
        let req = session.req_header();
        ctx.grpc = grpc_of(req);
        let host = host_of(req);
        // The path routed on is the path forwarded: dot-segments removed (decide::target).
        let path = normalize_path(req.uri.path());
        let normalized = match (&path, req.uri.query()) {
            (Cow::Borrowed(_), _) => None,
            (Cow::Owned(p), None) => Some(p.clone()),
            (Cow::Owned(p), Some(q)) => Some(format!("{p}?{q}")),
        };
        let pq = match &normalized {
            Some(pq) => pq.as_str(),
            None => req.uri.path_and_query().map_or("/", |pq| pq.as_str()),
        };
        let view = PingoraView(req);
        let desk = self.desk();
        let table = self.table.load();
        let client_ip: Option<IpAddr> = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip());
        let local = (session.server_addr())
            .filter(|_| self.reads_local())
            .and_then(|a| a.as_inet())
            .copied();
        let ssl = session.digest().and_then(|d| d.ssl_digest.as_deref());
        ctx.attempt = self.attempt(&table, client_ip, local, ssl);
        let opened = exchange::open(
            &mut ctx.attempt,
            table,
            desk,
            exchange_request(req, &view, &path, pq, ctx.grpc),
            ctx.started,
        )
        .map_err(|e| Error::explain(ErrorType::InternalError, e.to_string()))?;
        ctx.deadline = opened.deadline;
        let mut location = String::new();
        match opened.reply(host.unwrap_or_default(), pq, desk, &mut location) {
            Reply::Answer {
                answer,
                body,
                close,
            } => {
                if close {
                    session.set_keepalive(None);
                }
                write_answer(session, &answer, body).await?;
                return Ok(true);
            }
            Reply::Proxy { strip: None } => {
                if let Some(pq) = normalized {
                    ctx.rewrite =
                        Some(Uri::try_from(pq).map_err(|_| {
                            Error::explain(ErrorType::InvalidHTTPHeader, "bad path")
                        })?);
                }
            }
            Reply::Proxy { strip: Some(strip) } => {
                ctx.rewrite = Some(
                    stripped_target(strip, pq)
                        .map_err(|_| Error::explain(ErrorType::InvalidHTTPHeader, "bad path"))?,
                );
            }
        }

        // After everything decided without asking anyone (source ranges, redirects, basic
        // authentication), before anything goes to a backend (copies included).
        if let Some(auth) = ctx.attempt.external_auth().cloned()
            && let Some(denied) = self
                .authorize(session, &mut ctx.attempt, &auth, host, &path)
                .await
        {
            // A denial names no path of the request (its redirect has its own location).
            let asked = Asked {
                host: host.unwrap_or_default(),
                path_and_query: "/",
                grpc: ctx.grpc,
            };
            let mut location = String::new();
            if let Reply::Answer { answer, body, .. } =
                reply(&denied, asked, &self.pages, &self.fwd, &mut location)
            {
                write_answer(session, &answer, body).await?;
                return Ok(true);
            }
        }

        let mirrors = ctx.attempt.mirrors(Instant::now());
        if !mirrors.is_empty() {
            // A copy gets the request edits every request gets (the forwarding fields, the
            // asserted ones removed, the load balancer's cookie taken out).
            let has_body = !session.is_body_empty();
            ctx.mirror_body = with_request_edits(&self.fwd, session, &ctx.attempt, |edits| {
                self.mirrors
                    .send(mirrors, session.req_header(), edits, has_body)
            });
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
        let Some(addr) = ctx.attempt.next(Instant::now()) else {
            return Err(Error::explain(
                ErrorType::HTTPStatus(503),
                "no endpoint left to try",
            ));
        };

        // How the entry's endpoints are spoken to: HTTP/1 or HTTP/2, clear or TLS (`appProtocol`
        // or `lb.backend-protocol`, decided by translate).
        let upstream = ctx.attempt.entry().map(|e| &e.upstream);
        let protocol = ctx.attempt.backend_protocol();
        let sni = match upstream {
            Some(u) if protocol.tls() => u.sni.to_string(),
            _ => String::new(),
        };
        let mut peer = HttpPeer::new(addr, protocol.tls(), sni);
        let o = &mut peer.options;
        if protocol.http2() {
            // Prior knowledge for h2c; ALPN `h2` only, over TLS.
            o.set_http_version(2, 2);
            o.max_h2_streams = H2_STREAMS_PER_CONNECTION;
        } else {
            o.set_http_version(1, 1);
        }
        // The bundle, client certificate and verification: `BackendTls::choose`, which the
        // fast path applies too.
        if let Some(u) = upstream
            && let Err(e) = self.backend_tls.configure(u, &mut peer)
        {
            // The Service's own CA bundle or client certificate is not loaded (the watcher
            // warned why): refused as an untrusted certificate would be (502), and counted as
            // one; not the endpoint's fault, so neither ejected nor retried (the fast path
            // does the same).
            self.recorder.tls_failure(&ctx.attempt);
            return Err(Error::create(
                ErrorType::InvalidCert,
                ErrorSource::Upstream,
                Some(e.into()),
                None,
            ));
        }
        let o = &mut peer.options;
        o.connection_timeout = Some(ctx.attempt.connect_timeout(self.timeouts.connect));
        o.idle_timeout = Some(self.timeouts.server_idle);
        let (read_timeout, write_timeout) = if session.is_upgrade_req() {
            (self.timeouts.tunnel, self.timeouts.tunnel)
        } else {
            let idle = self.timeouts.server_idle;
            (
                ctx.attempt.server_timeout(idle),
                ctx.attempt.send_timeout(idle),
            )
        };
        // A gRPC deadline bounds every wait upstream; once it passed, the read times out at
        // once and the client gets DEADLINE_EXCEEDED.
        let (read_timeout, write_timeout) = match ctx.deadline {
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                o.connection_timeout = o.connection_timeout.map(|c| c.min(left));
                (read_timeout.min(left), write_timeout.min(left))
            }
            None => (read_timeout, write_timeout),
        };
        o.read_timeout = Some(read_timeout);
        o.write_timeout = Some(write_timeout);
        Ok(Box::new(peer))
    }

    fn fail_to_connect(
        &self,
        _session: &mut Session,
        _peer: &HttpPeer,
        ctx: &mut Ctx,
        mut e: Box<Error>,
    ) -> Box<Error> {
        let failure = Failure {
            cause: ctx.blame(connect_cause(e.etype()).unwrap_or(Cause::ConnectFailed)),
            replayable: true,
        };
        let verdict = ctx.attempt.failed(failure, &self.policy, Instant::now());
        self.recorder.failure(&ctx.attempt, &verdict);
        if failure.cause == Cause::UpstreamTls {
            self.recorder.tls_failure(&ctx.attempt);
        }
        e.set_retry(verdict.retry);
        e
    }

    /// A response dropped for another try (`proxy-next-upstream http_*`, `custom-http-errors`)
    /// is a decision, counted already, not a failure to warn of.
    fn suppress_proxy_warn_log(
        &self,
        _session: &Session,
        _ctx: &Ctx,
        error: &Error,
        context: ProxyWarnLogContext,
    ) -> bool {
        // Pingora's own errors of a status are not retried; these are this engine's.
        matches!(context, ProxyWarnLogContext::UpstreamRetry)
            && matches!(error.etype(), ErrorType::HTTPStatus(_))
    }

    /// A failure after connecting: `Attempt::failed` says whether to replay the request.
    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        session: &mut Session,
        e: Box<Error>,
        ctx: &mut Ctx,
        _client_reused: bool,
    ) -> Box<Error> {
        let mut e = e.more_context(format!("Peer: {peer}"));
        if std::mem::take(&mut ctx.status_retry) {
            e.set_retry(true);
            return e;
        }
        // A tunnel (101) that ends abruptly says nothing about the endpoint's health.
        let tunnel = session
            .response_written()
            .is_some_and(|r| r.status == http::StatusCode::SWITCHING_PROTOCOLS);
        let failure = Failure {
            cause: ctx.blame(cause_of(&e, session.response_written().is_some(), tunnel)),
            replayable: Sent {
                idempotent: session.req_header().method.is_idempotent(),
                unprocessed: refused(&e),
                body: if session.as_ref().retry_buffer_truncated() {
                    BodyKept::Partly
                } else {
                    BodyKept::All
                },
                answered: session.response_written().is_some(),
            }
            .replayable(),
        };
        let verdict = ctx.attempt.failed(failure, &self.policy, Instant::now());
        self.recorder.failure(&ctx.attempt, &verdict);
        e.set_retry(verdict.retry);
        e
    }

    /// The final answer when proxying failed: the status of its cause (`Cause::status`).
    /// Once a response header went out nothing can be said any more: the client connection
    /// is closed, so a truncated body is never mistaken for a whole one.
    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy
    where
        Ctx: Send + Sync,
    {
        let code = match e.etype() {
            ErrorType::HTTPStatus(code) => *code,
            _ => ctx.blame(cause_of(e, false, false)).status().unwrap_or(0),
        };
        if code > 0 && ctx.grpc && session.response_written().is_some() && session.is_http2() {
            // A gRPC call broken mid-stream (its deadline passed, the endpoint went away)
            // still ends as gRPC says: the status in trailers after the messages already sent.
            // (HTTP/2 only: an HTTP/1 client's connection is closed as for any request.)
            let (trailers, ending) = grpc_trailers(code);
            match session.write_response_trailers(trailers).await {
                Ok(()) => ctx.grpc_trailer = Some(ending),
                Err(err) => tracing::debug!(error = %err, "cannot end the gRPC call"),
            }
        }
        if code > 0 && session.response_written().is_none() {
            session.set_keepalive(None);
            let answer = if ctx.grpc {
                grpc_answer(code, &self.fwd)
            } else {
                failure_answer(code, &self.fwd)
            };
            if let Err(err) = write_answer(session, &answer, Bytes::new()).await {
                tracing::debug!(error = %err, "cannot send the error response");
            }
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
        digest: Option<&Digest>,
        ctx: &mut Ctx,
    ) -> Result<()> {
        ctx.attempt.connected(reused, Instant::now());
        // A new TLS connection: its handshake is the TLS layer's (the last) establishment.
        if !reused
            && let Some(d) = digest.filter(|d| d.ssl_digest.is_some())
            && let Some(took) = d
                .timing_digest
                .iter()
                .rev()
                .flatten()
                .find_map(|t| t.establishment_duration)
        {
            // Pingora's digest does not say whether the session was resumed.
            self.recorder
                .tls_handshake(&ctx.attempt, took, Resumed::Unknown);
        }
        Ok(())
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        req: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        // The default backend answering an error (`custom-http-errors`) is asked for `/`.
        let diverted = ctx
            .attempt
            .diverted()
            .and_then(|d| http::Uri::try_from(&*d.target).ok());
        if let Some(uri) = diverted.or_else(|| ctx.rewrite.clone()) {
            let uri = if session.is_http2() {
                keep_origin(&req.uri, uri)
            } else {
                uri
            };
            req.set_uri(uri);
        }
        // Pingora accepts identical duplicate lengths (RFC 9110 §8.6) but forwards them all;
        // the backend gets one.
        if req.headers.get_all(CONTENT_LENGTH).iter().nth(1).is_some()
            && let Some(first) = req.headers.get(CONTENT_LENGTH).cloned()
        {
            req.insert_header(CONTENT_LENGTH, first)?;
        }
        // HTTP/2 may split `cookie` into fields that an HTTP/1 backend must get as one
        // (RFC 9113 §8.2.3), as the fast path writes them.
        if session.is_http2() && !ctx.attempt.backend_protocol().http2() {
            join_cookies(req)?;
        }
        with_request_edits(&self.fwd, session, &ctx.attempt, |edits| apply(req, edits))?;
        for op in ctx.attempt.request_ops() {
            req.apply_op(op)?;
        }
        // The header is written to the endpoint right after this hook.
        ctx.attempt.request_sent(Instant::now());
        Ok(())
    }

    /// Counts the request body against the route's `proxy-body-size` (a chunked body has no
    /// length to refuse up front): past it, the request fails with 413 if nothing was
    /// answered yet.
    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let Some(b) = body {
            ctx.body_read += b.len() as u64;
            if !ctx.attempt.body_allowed(ctx.body_read) {
                return Err(Error::explain(
                    ErrorType::HTTPStatus(413),
                    "request body longer than the route allows",
                ));
            }
        }
        if let Some(copies) = &mut ctx.mirror_body {
            copies.feed(body.as_ref(), end_of_stream);
            if end_of_stream {
                ctx.mirror_body = None;
            }
        }
        Ok(())
    }

    async fn upstream_response_filter(
        &self,
        session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        // Informational answers (100 Continue) are not the response.
        if !resp.status.is_informational() || resp.status == http::StatusCode::SWITCHING_PROTOCOLS {
            // A status the route sends elsewhere (`proxy-next-upstream http_*`): an error
            // that Pingora retries, before anything of this response went to the client.
            let status = resp.status.as_u16();
            let sent = Sent {
                idempotent: session.req_header().method.is_idempotent(),
                unprocessed: false,
                body: if session.as_ref().retry_buffer_truncated() {
                    BodyKept::Partly
                } else {
                    BodyKept::All
                },
                answered: session.response_written().is_some(),
            };
            // An error the route's Ingress answers with its default backend
            // (`custom-http-errors`): retried there, with the request's body still held.
            let req = session.req_header();
            let asked = || {
                (
                    req.uri.path_and_query().map_or("/", |pq| pq.as_str()),
                    req.headers
                        .get(http::header::ACCEPT)
                        .and_then(|v| v.to_str().ok()),
                )
            };
            if sent.replayable_body()
                && ctx
                    .attempt
                    .divert(status, asked, &self.policy, Instant::now())
            {
                ctx.status_retry = true;
                let mut e = Error::explain(
                    ErrorType::HTTPStatus(status),
                    "the Ingress answers a response of this status with its default backend",
                );
                e.set_retry(true);
                return Err(e);
            }
            if let Some(verdict) = ctx
                .attempt
                .answered(status, sent, &self.policy, Instant::now())
            {
                self.recorder.failure(&ctx.attempt, &verdict);
                ctx.status_retry = true;
                let mut e = Error::explain(
                    ErrorType::HTTPStatus(status),
                    "the route sends a response of this status to another endpoint",
                );
                e.set_retry(true);
                return Err(e);
            }
            ctx.attempt.response_started(Instant::now());
            ctx.upstream_status = Some(status);
        }
        Ok(())
    }

    async fn response_filter(
        &self,
        session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        apply(resp, &response_edits(&self.fwd, ctx.attempt.set_cookie()))?;
        for op in ctx.attempt.response_ops(resp.status.as_u16()) {
            resp.apply_op(op)?;
        }
        // A response without a body ends with its header; `logging` comes after the client
        // may already have read it.
        let status = resp.status.as_u16();
        if session.req_header().method == http::Method::HEAD
            || matches!(status, 204 | 304)
            || (status >= 200
                && resp
                    .headers
                    .get(http::header::CONTENT_LENGTH)
                    .is_some_and(|v| v.as_bytes() == b"0"))
        {
            ctx.attempt.response_done();
        }
        Ok(())
    }

    /// The last body chunk is filtered before it is written: the request stops counting
    /// against `limit-connections` before the client can see the response end.
    fn response_body_filter(
        &self,
        _session: &mut Session,
        _body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<Option<Duration>> {
        if end_of_stream {
            ctx.attempt.response_done();
        }
        Ok(None)
    }

    /// A gRPC deadline holds for the whole call: a stream whose messages keep coming past it
    /// is cut there (each read alone is bounded by what was left when it was connected).
    fn upstream_response_body_filter(
        &self,
        _session: &mut Session,
        _body: &mut Option<Bytes>,
        _end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<Option<Duration>> {
        if ctx.deadline_passed() {
            return Err(Error::create(
                ErrorType::ReadTimedout,
                ErrorSource::Upstream,
                Some("the gRPC deadline passed".into()),
                None,
            ));
        }
        Ok(None)
    }

    fn upstream_response_trailer_filter(
        &self,
        _session: &mut Session,
        trailers: &mut http::HeaderMap,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if ctx.grpc {
            ctx.grpc_trailer = Some(Ending::of(
                trailers.get(&GRPC_STATUS_NAME).map(HeaderValue::as_bytes),
            ));
        }
        Ok(())
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut Ctx) {
        // A trailers-only answer (an error before any message, or switchyard's own) has the
        // status in the response header; otherwise it came in the trailers.
        let grpc = ctx.grpc.then(|| {
            let header = session
                .response_written()
                .and_then(|r| r.headers.get(&GRPC_STATUS_NAME))
                .map(HeaderValue::as_bytes);
            match header {
                Some(v) => Ending::of(Some(v)),
                None => ctx.grpc_trailer.unwrap_or(Ending::NONE),
            }
        });
        let req = session.req_header();
        let host = host_of(req).unwrap_or_default();
        let client = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| std::net::SocketAddr::new(a.ip(), a.port()));
        let mut fin = Finished {
            status: session.response_written().map_or(0, |r| r.status.as_u16()),
            bytes_in: session.body_bytes_read() as u64,
            bytes_out: session.body_bytes_sent() as u64,
            failed: e.is_some(),
            // A body that broke after routing is refused too (Pingora answered 400
            // through `fail_to_proxy`).
            rejected: ctx.rejected.or_else(|| {
                e.filter(|e| cause_of(e, false, false) == Cause::BadRequest)
                    .filter(|_| session.response_written().is_some_and(|r| r.status == 400))
                    .map(|_| Rejection::BadBody)
            }),
            grpc,
            upstream_status: ctx.upstream_status,
            forwarded: ctx.rewrite.as_ref().map(|u| ("", u.path())),
            ..Finished::new(
                client,
                protocol_name(req.version),
                host,
                req.method.as_str(),
                req.uri.path(),
            )
        };
        if self.recorder.logs() {
            fin.fields(|name| req.headers.get(name).map(HeaderValue::as_bytes));
        }
        self.recorder.finished(&mut ctx.attempt, ctx.started, &fin);
    }
}

/// Runs `f` with the request edits of a request on Pingora's path (its client's address, and
/// its certificate read from `session`).
fn with_request_edits<R>(
    fwd: &Forwarding,
    session: &Session,
    attempt: &Attempt,
    f: impl FnOnce(&Edits<'_>) -> R,
) -> R {
    let client_ip = attempt.client_ip().map(ip_text);
    f(&request_edits(
        fwd,
        client_ip.as_deref(),
        attempt.hidden(),
        || tls::client_cert(session.digest().and_then(|d| d.ssl_digest.as_deref())),
    ))
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

//! The HTTP/1 fast path: serves the plain keep-alive requests that make up most traffic
//! (`GET` and `HEAD`, HTTP/1.1, origin-form target, no body, no upgrade) without Pingora's
//! per-request machinery, and hands every other request to Pingora's proxy untouched.
//!
//! Pingora's HTTP/1 path costs about three times HAProxy's user-space instructions per
//! request (case-preserving header maps, boxed hooks, a channel and a pool-watcher task per
//! request); the kernel work is the same. This path parses the request header once in place
//! (`request`), copies it to the backend with `decide`'s edits carried out, and streams the
//! response back with its framing checked (`response`, `chunked`), over its own pool of
//! upstream connections (`pool`): HTTP/1.1 in clear, or over TLS to `https` backends with the
//! bundle, client certificate and verification `tls::BackendTls::choose` decides for Pingora's
//! path too. Streams of HTTP/2 clients to `h2c`/`grpc` backends are relayed frame by frame
//! over the path's own HTTP/2 connections (`relay`, `h2_pool`). Every decision — route, stickiness, pick, retry, ejection,
//! header edits, answers — is the `Attempt`'s and the edit lists' of `decide`, the same the
//! Pingora hooks apply; recording is `record::Recorder`'s. Anything this module is not sure of
//! (a header it does not handle, a parse error, a method with a body) is declined before a
//! byte goes upstream: the bytes read are put back and Pingora serves the request, refusing
//! what it must. It must not guess at framing, and it never holds a lock across an await.

use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};
use pingora::protocols::tls::SslDigest;
use pingora::protocols::{GetSocketDigest, SocketDigest, Ssl};
use pingora::server::ShutdownWatch;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::data::exchange::{NoResponse, TryFailed, after_failure, next_endpoint};
use crate::data::frontend::HttpProxy;
use crate::data::guard::GuardedStream;
use crate::data::record::Finished;
use crate::data::tls::{self, TlsChoice};
use crate::data::upstream::h2_pool::H2Pool;
use crate::data::upstream::pool::{Key, Pool, TlsUpstream, Upstream};
use crate::data::wire::h1::chunked::{ChunkError, Chunks};
use crate::data::wire::h1::request::{Field, Parse, Request, build_request, parse_request, str_at};
use crate::data::wire::h1::response::{
    Framing, Head, MAX_RESPONSE_HEAD, ResponseHead, response_head, write_answer,
};
use crate::decide::attempt::{Attempt, BodyKept, Failure, Route, Sent};
use crate::decide::cause::Cause;
use crate::decide::edits::{Edits, ip_text, request_edits, response_edits};
use crate::decide::error_page::failure_answer;
use crate::decide::exchange;
use crate::decide::reply::Reply;
use crate::ops::metrics::Resumed;
use crate::table::Entry;
use crate::table::gateway::RequestView;

/// Room made in a read buffer before each read.
const READ_SIZE: usize = 16 * 1024;

/// How long a kept-alive connection waits for its next request holding its buffers; past
/// this it gives them back (`Connection::release`) and waits on `IDLE_READ` bytes of room, so
/// that an idle connection costs its sockets and a few small structures, not 2 × 16 KiB of
/// read buffers and a write buffer. A busy connection (requests under a second apart) keeps
/// them; an idle one pays one more read for a next request longer than `IDLE_READ`.
const IDLE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Room for the first read after a connection went idle (`IDLE_AFTER`): most request headers
/// fit; a longer one is read on into `READ_SIZE` more.
const IDLE_READ: usize = 1024;

/// How a connection left the fast path.
#[derive(Debug, PartialEq, Eq)]
pub enum Served {
    /// The connection is done (closed by either side, timed out, or answered with a close).
    Closed,
    /// The next request is not for the fast path; its bytes were put back on the stream.
    Declined,
}

/// The fast path of one frontend.
pub struct FastPath {
    pub(super) proxy: HttpProxy,
    pub(super) pool: Arc<Pool>,
    /// HTTP/2 connections to `h2c`/`grpc` endpoints (`relay`).
    pub(super) h2_pool: Arc<H2Pool>,
}

/// Per client connection: buffers reused by every request on it.
pub struct Connection {
    client: Option<SocketAddr>,
    client_ip: Option<IpAddr>,
    /// The address the client connected to (a Gateway's own picks its routes).
    local_ip: Option<IpAddr>,
    /// `client_ip` as text, formatted once for the forwarding fields of every request.
    client_ip_text: Option<String>,
    /// No request has been served yet (the header deadline, not the keep-alive timeout,
    /// bounds the wait for the first).
    fresh: bool,
    /// Bytes read from the client and not used yet.
    buf: BytesMut,
    /// Bytes read from the backend and not forwarded yet.
    upstream_buf: BytesMut,
    /// What is written next, to the backend or to the client.
    out: Vec<u8>,
    /// The header lines of the current request.
    pub(super) fields: Vec<Field>,
    /// The connection's TLS digest (its verified client certificate, for the request edits).
    ssl: Option<Arc<SslDigest>>,
    /// The current request's wait for its endpoint (`--server-timeout`, or its route's).
    server_timeout: std::time::Duration,
}

impl Connection {
    /// Gives back the buffers of a connection gone idle (nothing pending: `buf` is empty);
    /// the next request grows them again.
    fn release(&mut self) {
        debug_assert!(self.buf.is_empty());
        self.buf = BytesMut::new();
        self.upstream_buf = BytesMut::new();
        self.out = Vec::new();
        self.fields = Vec::new();
    }

    /// The bytes of heap this connection's buffers hold (their capacities).
    #[cfg(test)]
    fn buffered(&self) -> usize {
        self.buf.capacity()
            + self.upstream_buf.capacity()
            + self.out.capacity()
            + self.fields.capacity() * std::mem::size_of::<Field>()
    }

    /// No request has been served on this connection yet.
    pub fn is_fresh(&self) -> bool {
        self.fresh
    }

    /// What was read from the client and not used (part of a header when the guard refused
    /// it).
    pub fn pending(&self) -> &[u8] {
        &self.buf
    }
}

/// Waits (at most `keep_alive`, and not past shutdown) for the next request on a kept-alive
/// connection, reading its first bytes into `conn.buf`; `None` when the wait ended without
/// one. Past `IDLE_AFTER` the connection's buffers are given back (`Connection::release`).
async fn wait_request(
    stream: &mut GuardedStream,
    conn: &mut Connection,
    shutdown: &mut ShutdownWatch,
    keep_alive: std::time::Duration,
) -> Option<std::io::Result<usize>> {
    let deadline = tokio::time::Instant::now() + keep_alive;
    let mut release = Some(deadline.min(tokio::time::Instant::now() + IDLE_AFTER));
    loop {
        let until = release.unwrap_or(deadline);
        // `read_buf` is cancel safe: a read not finished when a timer fires consumed nothing.
        tokio::select! {
            biased;
            r = stream.read_buf(&mut conn.buf) => return Some(r),
            _ = shutdown.changed() => return None,
            _ = tokio::time::sleep_until(until) => {
                release.take()?;
                conn.release();
                conn.buf.reserve(IDLE_READ);
            }
        }
    }
}

/// Why a try failed before its response header was complete.
#[derive(Debug, Clone, Copy)]
struct Exchange {
    cause: Cause,
    /// An informational response already reached the client: nothing can be replayed.
    informed: bool,
}

/// A failure while relaying the body (the response header may have gone out).
struct Relay {
    bytes: u64,
    cause: Cause,
}

struct Body {
    bytes: u64,
    /// The backend sent nothing after the end of the response.
    clean: bool,
}

enum Read {
    Request(Request),
    Declined,
    Closed,
}

/// An entry spoken to over TLS has no server name: Pingora's connector has its own rule for
/// that (no SNI), so the fast path leaves such requests to it.
pub(super) struct NoServerName;

/// Over TLS, the routed entry, whose connection settings (server name, bundle, client
/// certificate, verification) every try uses, held apart from the attempt, which the tries
/// borrow mutably; `None` in clear. The same rule for HTTP/1 (`https`) and HTTP/2 (`h2`)
/// backends.
pub(super) fn tls_entry(attempt: &Attempt) -> Result<Option<Arc<Entry>>, NoServerName> {
    if !attempt.backend_protocol().tls() {
        return Ok(None);
    }
    let entry = attempt
        .table()
        .zip(attempt.entry_id())
        .and_then(|(t, id)| t.entries.get(id as usize));
    match entry {
        Some(e) if !e.upstream.sni.is_empty() => Ok(Some(Arc::clone(e))),
        _ => Err(NoServerName),
    }
}

impl FastPath {
    /// Keeps a graceful shutdown waiting until the returned guard is dropped: an HTTP/2
    /// connection holds one while it drains, since its streams' answers are queued on it after
    /// their requests' own guards are gone.
    pub(crate) fn enter(&self) -> crate::ops::lifecycle::Active {
        self.proxy.enter()
    }

    /// `per_thread`: Pingora's per-thread runtimes (`--work-stealing false`), whose threads
    /// each keep HTTP/2 connections of their own (`H2Pool::new`).
    pub fn new(proxy: HttpProxy, per_thread: bool) -> FastPath {
        FastPath {
            proxy,
            pool: Arc::default(),
            h2_pool: Arc::new(H2Pool::new(per_thread)),
        }
    }

    /// The state of a new client connection.
    pub fn connection(&self, stream: &GuardedStream) -> Connection {
        self.connection_of(
            stream.get_socket_digest().as_deref(),
            stream.get_ssl_digest(),
        )
    }

    /// The state of a client connection with these digests (an HTTP/2 stream gets its own).
    pub(super) fn connection_of(
        &self,
        socket: Option<&SocketDigest>,
        ssl: Option<Arc<SslDigest>>,
    ) -> Connection {
        let client = socket.and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).copied());
        Connection {
            client,
            client_ip: client.map(|a| a.ip()),
            local_ip: socket
                .filter(|_| self.proxy.by_local_address)
                .and_then(|d| d.local_addr().and_then(|a| a.as_inet()))
                .map(|a| a.ip()),
            client_ip_text: client.map(|a| ip_text(a.ip())),
            fresh: true,
            // Both grow at their first read (`reserve(READ_SIZE)`), not before.
            buf: BytesMut::new(),
            upstream_buf: BytesMut::new(),
            out: Vec::with_capacity(1024),
            fields: Vec::new(),
            ssl,
            server_timeout: self.proxy.timeouts.server_idle,
        }
    }

    /// Marks a request served on `conn` by the other path.
    pub fn served_elsewhere(conn: &mut Connection) {
        conn.fresh = false;
    }

    /// Serves requests on `stream` until the connection ends or a request is declined.
    pub async fn serve(
        &self,
        stream: &mut GuardedStream,
        conn: &mut Connection,
        shutdown: &mut ShutdownWatch,
    ) -> Served {
        loop {
            let req = match self.read_request(stream, conn, shutdown).await {
                Read::Request(req) => req,
                Read::Closed => return Served::Closed,
                Read::Declined => {
                    stream.unread(conn.buf.split().freeze());
                    return Served::Declined;
                }
            };
            let head = conn.buf.split_to(req.len).freeze();
            let close = req.close || *shutdown.borrow();
            let Some(keep) = self.proxy_request(stream, conn, &head, &req, close).await else {
                // Declined once routed (a backend this path does not speak to): the request
                // goes back in front of what followed it, for Pingora.
                let mut all = BytesMut::with_capacity(head.len() + conn.buf.len());
                all.extend_from_slice(&head);
                all.extend_from_slice(&conn.buf);
                conn.buf.clear();
                stream.unread(all.freeze());
                return Served::Declined;
            };
            conn.fresh = false;
            if !keep || close {
                let _ = stream.flush().await;
                return Served::Closed;
            }
            stream.rearm();
        }
    }

    /// Reads until a whole request header is in `conn.buf` and says whether it is one for
    /// this path. Waiting for a request after the first is bounded by the keep-alive timeout
    /// and ends at shutdown; once a byte came, the header guard bounds the rest.
    async fn read_request(
        &self,
        stream: &mut GuardedStream,
        conn: &mut Connection,
        shutdown: &mut ShutdownWatch,
    ) -> Read {
        loop {
            if !conn.buf.is_empty() {
                match parse_request(&conn.buf, &mut conn.fields) {
                    Parse::Request(req) => return Read::Request(req),
                    Parse::Declined => return Read::Declined,
                    Parse::Partial => {}
                }
            }
            conn.buf.reserve(READ_SIZE);
            let read = if conn.buf.is_empty() && !conn.fresh {
                if *shutdown.borrow() {
                    return Read::Closed;
                }
                match wait_request(stream, conn, shutdown, self.proxy.timeouts.keep_alive).await {
                    Some(r) => r,
                    None => return Read::Closed,
                }
            } else {
                stream.read_buf(&mut conn.buf).await
            };
            match read {
                // A request cut short: Pingora answers it as it always has.
                Ok(0) if !conn.buf.is_empty() => return Read::Declined,
                Ok(0) | Err(_) => return Read::Closed,
                Ok(_) => {}
            }
        }
    }

    /// Proxies one request whose header is `head`; says whether the client connection may
    /// serve another.
    pub(super) async fn proxy_request<D: Downstream>(
        &self,
        stream: &mut D,
        conn: &mut Connection,
        head: &Bytes,
        req: &Request,
        close: bool,
    ) -> Option<bool> {
        let _active = self.proxy.enter();
        let started = Instant::now();
        let policy = &self.proxy.policy;
        let mut attempt = Attempt::new(conn.client_ip);
        attempt.set_local_ip(conn.local_ip);
        let target = str_at(head, req.target.clone());
        let path = target.split_once('?').map_or(target, |(p, _)| p);
        let host = &head[req.host.clone()];
        let cookies = conn
            .fields
            .iter()
            .filter(|f| head[f.name.clone()].eq_ignore_ascii_case(b"cookie"))
            .map(|f| &head[f.value.clone()]);
        let view = FastView {
            head,
            fields: &conn.fields,
            method: req.method().as_bytes(),
            query: target.split_once('?').map(|(_, q)| q),
        };
        let desk = self.proxy.desk();
        // This path takes GET and HEAD without a body only: never a gRPC call, no length.
        let asked = exchange::Request {
            host: Some(host),
            path,
            path_and_query: target,
            view: &view,
            cookies,
            grpc: false,
            grpc_timeout: None,
            content_length: None,
        };
        let opened = exchange::open(&mut attempt, self.proxy.table.load(), desk, asked, started);
        // This path takes GET and HEAD only: never a gRPC call.
        let mut fin = Finished::new(conn.client, D::PROTOCOL, host, req.method(), path);
        if self.proxy.recorder.logs() {
            fin.fields(|name| field_value(head, &conn.fields, name));
        }
        let opened = match opened {
            // This path speaks HTTP/1.1 to backends, in clear or over TLS; HTTP/2 to backends
            // (h2c, h2, gRPC) is the relay's or Pingora's.
            Ok(o)
                if matches!(o.route, Route::Proxy { .. }) && attempt.backend_protocol().http2() =>
            {
                return None;
            }
            // A Gateway rule's filters are carried out by Pingora's engine alone (one place
            // applies them; this path stays lean).
            Ok(o) if matches!(o.route, Route::Proxy { .. }) && attempt.rewrites() => return None,
            Ok(opened) => opened,
            Err(e) => {
                tracing::warn!(error = %e, "cannot route");
                let status = Cause::Internal.status().unwrap_or(500);
                return Some(
                    self.fail(stream, conn, &mut attempt, started, &mut fin, status)
                        .await,
                );
            }
        };
        let mut location = String::new();
        let strip = match opened.reply(host, target, desk, &mut location) {
            Reply::Proxy { strip } => strip,
            Reply::Answer {
                answer,
                close: true,
                ..
            } => {
                return Some(
                    self.fail(stream, conn, &mut attempt, started, &mut fin, answer.status)
                        .await,
                );
            }
            Reply::Answer { answer, .. } => {
                let body = if req.head { &[][..] } else { answer.body };
                write_answer(&mut conn.out, &answer, close);
                conn.out.extend_from_slice(body);
                fin.status = answer.status;
                fin.bytes_out = body.len() as u64;
                let ok = self.write_client(stream, &conn.out).await;
                fin.failed = !ok;
                self.proxy.recorder.finished(&mut attempt, started, &fin);
                return Some(ok);
            }
        };

        let Ok(tls_entry) = tls_entry(&attempt) else {
            return None;
        };
        let tls_upstream = tls_entry.as_deref().map(|e| &e.upstream);
        let sni = tls_upstream.map_or("", |u| &*u.sni);
        // Over TLS: how each connection is made, chosen once for the request.
        let tls: Option<TlsChoice> = match tls_upstream.map(|u| self.proxy.backend_tls.choose(u)) {
            None => None,
            Some(Ok(choice)) => Some(choice),
            Some(Err(e)) => {
                // A Service's own bundle or client certificate is not loaded (the watcher
                // warned why): refused as an untrusted certificate would be, and counted as one,
                // as on Pingora's path; not the endpoint's fault, so no ejection and no other
                // endpoint.
                tracing::debug!(error = %e, "backend TLS not loaded");
                self.proxy.recorder.tls_failure(&attempt);
                let status = Cause::UpstreamTls.status().unwrap_or(502);
                return Some(
                    self.fail(stream, conn, &mut attempt, started, &mut fin, status)
                        .await,
                );
            }
        };

        conn.server_timeout = attempt.server_timeout(self.proxy.timeouts.server_idle);
        // The request as the backend gets it.
        let edits = request_edits(
            &self.proxy.fwd,
            conn.client_ip_text.as_deref(),
            attempt.cookie_sticky(),
            || tls::client_cert(conn.ssl.as_deref()),
        );
        let forwarded = strip.map(|s| s.apply(target));
        fin.forwarded = forwarded;
        build_request(&mut conn.out, head, req, &conn.fields, forwarded, &edits);

        // Tries: connect, send, read the response header; replay where the attempt says so.
        let (mut up, key, resp) = loop {
            let addr = match next_endpoint(&mut attempt) {
                Ok(addr) => addr,
                Err(end) => {
                    return Some(
                        self.ended(stream, conn, &mut attempt, started, &mut fin, end)
                            .await,
                    );
                }
            };
            let failed = match self
                .try_h1(
                    stream,
                    conn,
                    &mut attempt,
                    addr,
                    (tls.as_ref(), sni),
                    req.head,
                    close,
                )
                .await
            {
                Ok(answered) => {
                    attempt.response_started(Instant::now());
                    break answered;
                }
                Err(failed) => failed,
            };
            if let Some(end) = after_failure(&self.proxy.recorder, policy, &mut attempt, failed) {
                return Some(
                    self.ended(stream, conn, &mut attempt, started, &mut fin, end)
                        .await,
                );
            }
        };

        // The response: its header is in `conn.out`, what followed it in `upstream_buf`.
        fin.status = resp.status;
        fin.upstream_status = Some(resp.status);
        let relayed = self.relay_body(&mut up, stream, conn, resp.framing).await;
        match relayed {
            Ok(body) => {
                fin.bytes_out = body.bytes;
                if resp.reusable && body.clean {
                    self.pool.put(key, up, self.proxy.timeouts.server_idle);
                }
                self.proxy.recorder.finished(&mut attempt, started, &fin);
                Some(true)
            }
            Err(e) => {
                fin.failed = true;
                fin.bytes_out = e.bytes;
                let failure = Failure {
                    cause: e.cause,
                    replayable: false,
                };
                let verdict = attempt.failed(failure, policy, Instant::now());
                self.proxy.recorder.failure(&attempt, &verdict);
                self.proxy.recorder.finished(&mut attempt, started, &fin);
                Some(false)
            }
        }
    }

    /// One try at `addr`: a pooled connection or a new one (over TLS with `tls`'s choice and
    /// server name), the request in `conn.out` sent, the response header read and relayed.
    #[allow(clippy::too_many_arguments)]
    async fn try_h1<D: Downstream>(
        &self,
        stream: &mut D,
        conn: &mut Connection,
        attempt: &mut Attempt,
        addr: SocketAddr,
        (tls, sni): (Option<&TlsChoice>, &str),
        head_only: bool,
        close: bool,
    ) -> Result<(Upstream, Key, ResponseHead), TryFailed> {
        let key = match tls {
            None => Key::plain(addr),
            Some(choice) => Key::tls(addr, choice.key(), sni),
        };
        let idle = self.proxy.timeouts.server_idle;
        let (mut up, reused) = match self.pool.take(&key, sni, idle) {
            Some(up) => (up, true),
            None => {
                let up = self.connect(addr, tls.map(|c| (c, sni)), attempt).await;
                (up.map_err(TryFailed::unsent)?, false)
            }
        };
        attempt.connected(reused, Instant::now());
        conn.upstream_buf.clear();
        attempt.request_sent(Instant::now());
        // This path takes only `GET` and `HEAD`, without a body.
        let sent = |answered| Sent {
            idempotent: true,
            unprocessed: false,
            body: BodyKept::All,
            answered,
        };
        if let Err(cause) = self.send(&mut up, &conn.out, conn.server_timeout).await {
            return Err(TryFailed {
                cause,
                sent: sent(false),
            });
        }
        let edits = response_edits(&self.proxy.fwd, attempt.set_cookie());
        match self
            .read_response(&mut up, stream, conn, head_only, &edits, close)
            .await
        {
            Ok(resp) => Ok((up, key, resp)),
            Err(x) => Err(TryFailed {
                cause: x.cause,
                sent: sent(x.informed),
            }),
        }
    }

    /// Ends a request whose tries gave no response: answered with a status and the
    /// connection closed, or (the client gone, or part of an answer written) only closed.
    async fn ended<D: Downstream>(
        &self,
        stream: &mut D,
        conn: &mut Connection,
        attempt: &mut Attempt,
        started: Instant,
        fin: &mut Finished<'_>,
        end: NoResponse,
    ) -> bool {
        match end {
            NoResponse::Answer(status) => {
                self.fail(stream, conn, attempt, started, fin, status).await
            }
            NoResponse::Gone => {
                fin.failed = true;
                self.proxy.recorder.finished(attempt, started, fin);
                false
            }
        }
    }

    /// Answers a request that could not be proxied with `status`, closing the connection
    /// (as Pingora does after its own error responses).
    async fn fail<D: Downstream>(
        &self,
        stream: &mut D,
        conn: &mut Connection,
        attempt: &mut Attempt,
        started: Instant,
        fin: &mut Finished<'_>,
        status: u16,
    ) -> bool {
        write_answer(
            &mut conn.out,
            &failure_answer(status, &self.proxy.fwd),
            true,
        );
        let _ = self.write_client(stream, &conn.out).await;
        fin.status = status;
        fin.failed = true;
        self.proxy.recorder.finished(attempt, started, fin);
        false
    }

    /// Opens a connection to `addr`: TCP, then over TLS the handshake with `tls`'s choice and
    /// server name, each within `--connect-timeout` (as Pingora's connector bounds each).
    pub(super) async fn connect(
        &self,
        addr: SocketAddr,
        tls: Option<(&TlsChoice, &str)>,
        attempt: &Attempt,
    ) -> Result<Upstream, Cause> {
        let tcp = self.connect_tcp(addr).await?;
        match tls {
            None => Ok(Upstream::Plain(tcp)),
            Some((choice, sni)) => self.handshake(tcp, choice, sni, attempt).await,
        }
    }

    /// The TLS handshake on a new connection, counted in `upstream_tls_handshakes_total` with
    /// whether it resumed a session. A certificate that does not verify, a name it is not
    /// for, or any other handshake failure is `Cause::UpstreamTls`, as on Pingora's path.
    async fn handshake(
        &self,
        tcp: TcpStream,
        choice: &TlsChoice,
        sni: &str,
        attempt: &Attempt,
    ) -> Result<Upstream, Cause> {
        let backend_tls = &self.proxy.backend_tls;
        let config = match backend_tls.cached_config(choice) {
            Some(config) => config,
            None => {
                // The first connection with this choice: building its configuration may read
                // the system's roots from disk.
                let backend_tls = Arc::clone(backend_tls);
                let choice = choice.clone();
                let built =
                    tokio::task::spawn_blocking(move || backend_tls.client_config(&choice)).await;
                match built {
                    Ok(Ok(config)) => config,
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "cannot make the TLS configuration for a backend");
                        return Err(Cause::UpstreamTls);
                    }
                    Err(_) => return Err(Cause::UpstreamTls),
                }
            }
        };
        let Some(name) = choice.server_name(sni) else {
            return Err(Cause::UpstreamTls);
        };
        let started = Instant::now();
        let handshake = tokio_rustls::TlsConnector::from(config).connect(name, tcp);
        match tokio::time::timeout(self.proxy.timeouts.connect, handshake).await {
            Err(_) => Err(Cause::ConnectTimedOut),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, sni, "TLS handshake with an endpoint failed");
                Err(Cause::UpstreamTls)
            }
            Ok(Ok(stream)) => {
                let resumed = match stream.get_ref().1.handshake_kind() {
                    Some(rustls::HandshakeKind::Resumed) => Resumed::Yes,
                    _ => Resumed::No,
                };
                self.proxy
                    .recorder
                    .tls_handshake(attempt, started.elapsed(), resumed);
                Ok(Upstream::Tls(Box::new(TlsUpstream {
                    stream,
                    sni: sni.into(),
                })))
            }
        }
    }

    async fn connect_tcp(&self, addr: SocketAddr) -> Result<TcpStream, Cause> {
        let up = match tokio::time::timeout(self.proxy.timeouts.connect, TcpStream::connect(addr))
            .await
        {
            Err(_) => return Err(Cause::ConnectTimedOut),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                return Err(Cause::ConnectRefused);
            }
            Ok(Err(_)) => return Err(Cause::ConnectFailed),
            Ok(Ok(up)) => up,
        };
        up.set_nodelay(true).map_err(|_| Cause::ConnectFailed)?;
        Ok(up)
    }

    async fn send(
        &self,
        up: &mut Upstream,
        bytes: &[u8],
        timeout: std::time::Duration,
    ) -> Result<(), Cause> {
        // Over TLS a write may leave records in rustls's buffer: the flush sends them.
        let sent = async {
            up.write_all(bytes).await?;
            up.flush().await
        };
        match tokio::time::timeout(timeout, sent).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(Cause::UpstreamClosed),
            Err(_) => Err(Cause::UpstreamTimedOut),
        }
    }

    /// Reads from the backend into `conn.upstream_buf`; 0 is the end of the stream.
    async fn read_upstream(
        &self,
        up: &mut Upstream,
        conn: &mut Connection,
    ) -> Result<usize, Cause> {
        conn.upstream_buf.reserve(READ_SIZE);
        match tokio::time::timeout(conn.server_timeout, up.read_buf(&mut conn.upstream_buf)).await {
            Ok(Ok(n)) => Ok(n),
            Ok(Err(_)) => Err(Cause::UpstreamClosed),
            Err(_) => Err(Cause::UpstreamTimedOut),
        }
    }

    /// Reads the response header and writes the client's version of it into `conn.out`.
    /// Informational responses (1xx but 101) go to the client as they come.
    async fn read_response<D: Downstream>(
        &self,
        up: &mut Upstream,
        stream: &mut D,
        conn: &mut Connection,
        head_request: bool,
        edits: &Edits<'_>,
        close: bool,
    ) -> Result<ResponseHead, Exchange> {
        let mut informed = false;
        loop {
            if !conn.upstream_buf.is_empty() {
                conn.out.clear();
                let invalid = Exchange {
                    cause: Cause::InvalidResponse,
                    informed,
                };
                match response_head(
                    &conn.upstream_buf,
                    head_request,
                    close,
                    edits,
                    &mut conn.out,
                ) {
                    Head::Partial if conn.upstream_buf.len() > MAX_RESPONSE_HEAD => {
                        return Err(invalid);
                    }
                    Head::Partial => {}
                    Head::Invalid => return Err(invalid),
                    Head::Informational(len) => {
                        let info = conn.upstream_buf.split_to(len);
                        if !self.write_client(stream, &info).await {
                            return Err(Exchange {
                                cause: Cause::ClientGone,
                                informed: true,
                            });
                        }
                        informed = true;
                        continue;
                    }
                    Head::Final(resp) => {
                        conn.upstream_buf.advance(resp.len);
                        return Ok(resp);
                    }
                }
            }
            match self.read_upstream(up, conn).await {
                Ok(0) => {
                    return Err(Exchange {
                        cause: Cause::UpstreamClosed,
                        informed,
                    });
                }
                Ok(_) => {}
                Err(cause) => return Err(Exchange { cause, informed }),
            }
        }
    }

    /// Writes the response header in `conn.out` and the body after it, as the backend sends
    /// it; says how many body bytes went out and whether the backend connection ended
    /// exactly at the end of the response.
    async fn relay_body<D: Downstream>(
        &self,
        up: &mut Upstream,
        stream: &mut D,
        conn: &mut Connection,
        framing: Framing,
    ) -> Result<Body, Relay> {
        let mut bytes = 0u64;
        let mut chunks = Chunks::default();
        let mut left = match framing {
            Framing::Length(n) => n,
            _ => 0,
        };
        let mut done = framing == Framing::Empty || framing == Framing::Length(0);
        loop {
            // Move what is buffered into `out`, up to the end of the body.
            let available = conn.upstream_buf.len();
            let take = match framing {
                Framing::Empty => 0,
                Framing::Length(_) => {
                    let take = usize::try_from(left).map_or(available, |l| l.min(available));
                    left -= take as u64;
                    bytes += take as u64;
                    done = left == 0;
                    take
                }
                Framing::Chunked => match chunks.feed(&conn.upstream_buf) {
                    Ok(Some(end)) => {
                        done = true;
                        end
                    }
                    Ok(None) => available,
                    Err(ChunkError) => {
                        let _ = self.write_client(stream, &conn.out).await;
                        return Err(Relay {
                            bytes,
                            cause: Cause::InvalidResponse,
                        });
                    }
                },
                Framing::UntilClose => {
                    if available > 0 {
                        let _ = write!(conn.out, "{available:x}\r\n");
                        conn.out.extend_from_slice(&conn.upstream_buf);
                        conn.out.extend_from_slice(b"\r\n");
                        bytes += available as u64;
                        conn.upstream_buf.clear();
                    }
                    0
                }
            };
            conn.out.extend_from_slice(&conn.upstream_buf[..take]);
            conn.upstream_buf.advance(take);
            if framing == Framing::Chunked {
                bytes = chunks.data;
            }
            if done {
                self.flush_out(stream, conn, bytes).await?;
                return Ok(Body {
                    bytes,
                    clean: conn.upstream_buf.is_empty(),
                });
            }
            if !conn.out.is_empty() {
                self.flush_out(stream, conn, bytes).await?;
            }
            match self.read_upstream(up, conn).await {
                Ok(0) if framing == Framing::UntilClose => {
                    conn.out.extend_from_slice(b"0\r\n\r\n");
                    self.flush_out(stream, conn, bytes).await?;
                    return Ok(Body {
                        bytes,
                        clean: false,
                    });
                }
                Ok(0) => {
                    return Err(Relay {
                        bytes,
                        cause: Cause::ResponseTruncated,
                    });
                }
                Ok(_) => {}
                Err(Cause::UpstreamClosed) => {
                    return Err(Relay {
                        bytes,
                        cause: Cause::ResponseTruncated,
                    });
                }
                Err(cause) => return Err(Relay { bytes, cause }),
            }
        }
    }

    /// Writes `conn.out` to the client and empties it (`bytes`: the body bytes relayed so far,
    /// for the error).
    async fn flush_out<D: Downstream>(
        &self,
        stream: &mut D,
        conn: &mut Connection,
        bytes: u64,
    ) -> Result<(), Relay> {
        if !self.write_client(stream, &conn.out).await {
            return Err(Relay {
                bytes,
                cause: Cause::ClientGone,
            });
        }
        conn.out.clear();
        Ok(())
    }

    /// Writes `bytes` to the client within the client timeout; false when it failed.
    async fn write_client<D: Downstream>(&self, stream: &mut D, bytes: &[u8]) -> bool {
        let write = stream.send(bytes);
        matches!(
            tokio::time::timeout(self.proxy.timeouts.client_idle, write).await,
            Ok(true)
        )
    }
}

/// Where the fast path's response goes: the HTTP/1 client connection, or one HTTP/2 stream
/// (`h2::Reply`), which takes the same HTTP/1 bytes and sends them as HTTP/2 frames. Either
/// way the bytes are the whole response as this path makes it: informational heads alone, then
/// the final head, then the body in HTTP/1 framing.
pub(crate) trait Downstream {
    /// The client's protocol, as the access log names it (`HTTP/1.1`, `HTTP/2.0`).
    const PROTOCOL: &'static str;

    /// Writes `bytes` of the response; false when the client is gone.
    async fn send(&mut self, bytes: &[u8]) -> bool;
}

impl Downstream for GuardedStream {
    // `parse_request` takes HTTP/1.1 only (an HTTP/1.0 request is Pingora's).
    const PROTOCOL: &'static str = "HTTP/1.1";

    async fn send(&mut self, bytes: &[u8]) -> bool {
        self.write_all(bytes).await.is_ok() && self.flush().await.is_ok()
    }
}

/// The value of the first of the request's `fields` named `name` (case ignored), in `head`.
fn field_value<'h>(head: &'h [u8], fields: &[Field], name: &str) -> Option<&'h [u8]> {
    fields
        .iter()
        .find(|f| head[f.name.clone()].eq_ignore_ascii_case(name.as_bytes()))
        .map(|f| &head[f.value.clone()])
}

/// The fast path's request as a Gateway route's conditions read it.
struct FastView<'a> {
    head: &'a Bytes,
    fields: &'a [Field],
    method: &'a [u8],
    query: Option<&'a str>,
}

impl RequestView for FastView<'_> {
    fn method(&self) -> &[u8] {
        self.method
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|f| self.head[f.name.clone()].eq_ignore_ascii_case(name.as_bytes()))
            .map(|f| &self.head[f.value.clone()])
    }

    fn query(&self) -> Option<&str> {
        self.query
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    use super::*;

    /// A connection that served a request, with the buffers that request grew.
    fn served_connection() -> Connection {
        Connection {
            client: None,
            client_ip: None,
            local_ip: None,
            client_ip_text: None,
            fresh: false,
            buf: BytesMut::with_capacity(READ_SIZE),
            upstream_buf: BytesMut::with_capacity(READ_SIZE),
            out: Vec::with_capacity(READ_SIZE),
            fields: Vec::with_capacity(16),
            ssl: None,
            server_timeout: Duration::from_secs(60),
        }
    }

    #[tokio::test]
    async fn an_idle_connection_gives_its_buffers_back_and_reads_on() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let l4 = pingora::protocols::l4::stream::Stream::from(server);
        let mut stream = GuardedStream::plain(Box::new(l4));
        let (_shutdown_tx, mut shutdown) = tokio::sync::watch::channel(false);
        let keep_alive = Duration::from_secs(60);
        let mut conn = served_connection();
        let held = conn.buffered();
        assert!(held >= 3 * READ_SIZE);

        // Busy: the next request within IDLE_AFTER is read into the buffers as they are.
        client.write_all(b"GET /a HTTP/1.1\r\n\r\n").await.unwrap();
        let n = wait_request(&mut stream, &mut conn, &mut shutdown, keep_alive).await;
        assert_eq!(n.unwrap().unwrap(), 19);
        assert_eq!(conn.buffered(), held, "kept while busy");
        conn.buf.clear();

        // Idle past IDLE_AFTER: given back; the request after is read into IDLE_READ bytes
        // of room, and the rest of a longer one on the next read.
        let started = Instant::now();
        let long = format!("GET /b HTTP/1.1\r\nx: {}\r\n\r\n", "y".repeat(2000));
        let long_len = long.len();
        let writer = tokio::spawn(async move {
            tokio::time::sleep(IDLE_AFTER + Duration::from_millis(300)).await;
            client.write_all(long.as_bytes()).await.unwrap();
            client
        });
        let n = wait_request(&mut stream, &mut conn, &mut shutdown, keep_alive).await;
        assert!(started.elapsed() >= IDLE_AFTER);
        let n = n.unwrap().unwrap();
        assert!(n > 0 && n <= IDLE_READ, "{n}");
        assert!(
            conn.buffered() < 2 * IDLE_READ,
            "{} bytes held after going idle",
            conn.buffered()
        );
        assert!(conn.upstream_buf.capacity() == 0 && conn.out.capacity() == 0);
        let client = writer.await.unwrap();
        let mut total = n;
        while total < long_len {
            conn.buf.reserve(READ_SIZE);
            total += stream.read_buf(&mut conn.buf).await.unwrap();
        }
        assert_eq!(total, long_len);

        // The keep-alive timeout still ends the wait.
        let started = Instant::now();
        let mut conn = served_connection();
        let waited = wait_request(
            &mut stream,
            &mut conn,
            &mut shutdown,
            Duration::from_millis(200),
        )
        .await;
        assert!(waited.is_none() && started.elapsed() < IDLE_AFTER);
        drop(client);
    }
}

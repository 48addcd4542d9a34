//! The HTTP/1 fast path: serves the plain keep-alive requests that make up most traffic
//! (`GET` and `HEAD`, HTTP/1.1, origin-form target, no body, no upgrade) without Pingora's
//! per-request machinery, and hands every other request to Pingora's proxy untouched.
//!
//! Pingora's HTTP/1 path costs about three times HAProxy's user-space instructions per
//! request (case-preserving header maps, boxed hooks, a channel and a pool-watcher task per
//! request); the kernel work is the same. This path parses the request header once in place
//! (`httparse`, as Pingora does), copies it to the backend with the forwarding headers
//! changed, and streams the response back with its framing checked, over its own pool of
//! upstream connections. The decisions — route, stickiness, pick, retry, ejection, metrics,
//! access log — are `HttpProxy`'s own methods, the same ones the Pingora hooks call, so the
//! two paths cannot drift apart. Anything this module is not sure of (a header it does not
//! handle, a parse error, a method with a body) is declined before a byte goes upstream:
//! the bytes read are put back and Pingora serves the request, refusing what it must. It
//! must not guess at framing, and it never holds a lock across an await.

use std::collections::HashMap;
use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use http::StatusCode;
use pingora::prelude::ProxyHttp;
use pingora::protocols::http::date::get_cached_date;
use pingora::protocols::{GetSocketDigest, Ssl};
use pingora::server::ShutdownWatch;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::data::listener::{GuardedStream, valid_host};
use crate::data::proxy::{Ctx, Failure, Finished, HttpProxy, Route, no_cache_set_cookie};
use crate::data::tls::{CLIENT_DN_HEADER, CLIENT_VERIFY_HEADER};
use crate::table::sticky::{self, COOKIE_NAME};

/// Most headers a request may have here (Pingora takes the rest and refuses what it must).
const MAX_REQUEST_HEADERS: usize = 96;
/// Most headers a backend's response may have.
const MAX_RESPONSE_HEADERS: usize = 256;
/// Largest response header accepted from a backend.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;
/// Room made in a read buffer before each read.
const READ_SIZE: usize = 16 * 1024;
/// Idle upstream connections kept per endpoint.
const MAX_IDLE_PER_ENDPOINT: usize = 128;
/// How often the pool drops connections idle for longer than `--server-timeout` or closed.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

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
    proxy: HttpProxy,
    pool: Arc<Pool>,
}

/// Per client connection: buffers reused by every request on it.
pub struct Connection {
    client: Option<SocketAddr>,
    client_ip: Option<IpAddr>,
    /// No request has been served yet (the header deadline, not the keep-alive timeout,
    /// bounds the wait for the first).
    fresh: bool,
    /// Bytes read from the client and not used yet.
    buf: BytesMut,
    /// Bytes read from the backend and not forwarded yet.
    upstream_buf: BytesMut,
    /// What is written next, to the backend or to the client.
    out: Vec<u8>,
    /// Header lines of the current request that are not forwarded as they are.
    skip: Vec<Range<usize>>,
    /// `(line, value)` of each `Cookie` header of the current request.
    cookies: Vec<(Range<usize>, Range<usize>)>,
    /// On the TLS port: `x-client-verify` and `x-client-dn` for backends.
    cert_headers: Option<(&'static str, Option<String>)>,
}

impl FastPath {
    pub fn new(proxy: HttpProxy) -> FastPath {
        FastPath {
            proxy,
            pool: Arc::default(),
        }
    }

    /// The state of a new client connection.
    pub fn connection(&self, stream: &GuardedStream) -> Connection {
        let client = stream
            .get_socket_digest()
            .and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).copied());
        let cert_headers = self
            .proxy
            .https
            .as_ref()
            .and_then(|https| https.client_header_values(stream.get_ssl_digest().as_deref()));
        Connection {
            client,
            client_ip: client.map(|a| a.ip()),
            fresh: true,
            // Both grow at their first read (`reserve(READ_SIZE)`), not before.
            buf: BytesMut::new(),
            upstream_buf: BytesMut::new(),
            out: Vec::with_capacity(1024),
            skip: Vec::new(),
            cookies: Vec::new(),
            cert_headers,
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
            let keep = self.proxy_request(stream, conn, &head, &req, close).await;
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
        let https = self.proxy.https.is_some();
        loop {
            if !conn.buf.is_empty() {
                conn.skip.clear();
                conn.cookies.clear();
                match parse_request(&conn.buf, https, &mut conn.skip, &mut conn.cookies) {
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
                tokio::select! {
                    biased;
                    r = stream.read_buf(&mut conn.buf) => r,
                    _ = shutdown.changed() => return Read::Closed,
                    _ = tokio::time::sleep(self.proxy.timeouts.keep_alive) => return Read::Closed,
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
    async fn proxy_request(
        &self,
        stream: &mut GuardedStream,
        conn: &mut Connection,
        head: &Bytes,
        req: &Request,
        close: bool,
    ) -> bool {
        let mut ctx = self.proxy.new_ctx();
        ctx.set_client_ip(conn.client_ip);
        let target = str_at(head, req.target.clone());
        let path = target.split_once('?').map_or(target, |(p, _)| p);
        let host = &head[req.host.clone()];
        let method = if req.head { "HEAD" } else { "GET" };
        let cookies = conn.cookies.iter().map(|(_, v)| &head[v.clone()]);
        let route = self.proxy.route(&mut ctx, Some(host), path, cookies);
        let mut fin = Finished {
            status: 0,
            bytes_in: 0,
            bytes_out: 0,
            failed: false,
            client: conn.client,
            host,
            method,
            path,
        };
        let strip = match route {
            Ok(Route::Proxy { strip }) => strip,
            Err(why) => {
                tracing::warn!(why, "cannot route");
                return self.fail(stream, conn, &mut ctx, &mut fin, 500).await;
            }
            Ok(Route::NotFound | Route::Unavailable) => {
                let page = match route {
                    Ok(Route::NotFound) => &self.proxy.not_found,
                    _ => &self.proxy.unavailable,
                };
                conn.out.clear();
                let body = if req.head { &[][..] } else { &page.body[..] };
                write_status(&mut conn.out, page.status, "");
                let _ = write!(
                    conn.out,
                    "Content-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-cache\r\n",
                    page.content_type,
                    page.body.len()
                );
                if let Some(v) = self.proxy.hsts() {
                    header(&mut conn.out, "Strict-Transport-Security", v.as_bytes());
                }
                if close {
                    conn.out.extend_from_slice(b"Connection: close\r\n");
                }
                conn.out.extend_from_slice(b"\r\n");
                conn.out.extend_from_slice(body);
                fin.status = page.status;
                fin.bytes_out = body.len() as u64;
                let ok = self.write_client(stream, &conn.out).await;
                fin.failed = !ok;
                self.proxy.record(&mut ctx, &fin);
                return ok;
            }
        };

        // The request as the backend gets it.
        let sticky = ctx.entry().is_some_and(|e| e.cookie_sticky);
        build_request(
            conn,
            head,
            req,
            method,
            strip.map(|s| s.apply(target)),
            sticky,
            self.proxy.scheme,
        );

        // Tries: connect, send, read the response header; replay where `HttpProxy` says so.
        let (mut up, addr, resp) = loop {
            let Some(addr) = self.proxy.pick(&mut ctx) else {
                return self.fail(stream, conn, &mut ctx, &mut fin, 503).await;
            };
            let (mut up, reused) = match self.pool.take(addr, self.proxy.timeouts.server_idle) {
                Some(up) => (up, true),
                None => match self.connect(addr).await {
                    Some(up) => (up, false),
                    None => {
                        if self.proxy.connect_failed(&mut ctx) {
                            continue;
                        }
                        return self.fail(stream, conn, &mut ctx, &mut fin, 503).await;
                    }
                },
            };
            ctx.connected(reused);
            conn.upstream_buf.clear();
            let sent = self.send(&mut up, &conn.out).await;
            let outcome = match sent {
                Ok(()) => {
                    self.read_response(&mut up, stream, conn, req.head, &ctx, close)
                        .await
                }
                Err(e) => Err(e),
            };
            match outcome {
                Ok(resp) => break (up, addr, resp),
                Err(e) => {
                    let failure = Failure {
                        replayable: !e.informed,
                        upstream: !e.client,
                        timed_out: e.timed_out,
                        closed: e.closed,
                        reused,
                        tunnel: false,
                    };
                    if self.proxy.upstream_failed(&mut ctx, &failure) {
                        continue;
                    }
                    let code = if e.timed_out { 504 } else { 502 };
                    if e.informed {
                        fin.failed = true;
                        self.proxy.record(&mut ctx, &fin);
                        return false;
                    }
                    return self.fail(stream, conn, &mut ctx, &mut fin, code).await;
                }
            }
        };

        // The response: its header is in `conn.out`, what followed it in `upstream_buf`.
        fin.status = resp.status;
        let relayed = self.relay_body(&mut up, stream, conn, resp.framing).await;
        match relayed {
            Ok(body) => {
                fin.bytes_out = body.bytes;
                if resp.reusable && body.clean {
                    self.pool.put(addr, up, self.proxy.timeouts.server_idle);
                }
                self.proxy.record(&mut ctx, &fin);
                true
            }
            Err(e) => {
                fin.failed = true;
                fin.bytes_out = e.bytes;
                let failure = Failure {
                    replayable: false,
                    upstream: e.upstream,
                    timed_out: e.timed_out,
                    closed: e.closed,
                    reused: false,
                    tunnel: false,
                };
                self.proxy.upstream_failed(&mut ctx, &failure);
                self.proxy.record(&mut ctx, &fin);
                false
            }
        }
    }

    /// Answers a request that could not be proxied with `code`, closing the connection
    /// (as Pingora does after its own error responses).
    async fn fail(
        &self,
        stream: &mut GuardedStream,
        conn: &mut Connection,
        ctx: &mut Ctx,
        fin: &mut Finished<'_>,
        code: u16,
    ) -> bool {
        conn.out.clear();
        write_status(&mut conn.out, code, "");
        conn.out.extend_from_slice(
            b"Content-Length: 0\r\nCache-Control: private, no-store\r\nConnection: close\r\n\r\n",
        );
        let _ = self.write_client(stream, &conn.out).await;
        fin.status = code;
        fin.failed = true;
        self.proxy.record(ctx, fin);
        false
    }

    async fn connect(&self, addr: SocketAddr) -> Option<TcpStream> {
        let up = tokio::time::timeout(self.proxy.timeouts.connect, TcpStream::connect(addr))
            .await
            .ok()?
            .ok()?;
        up.set_nodelay(true).ok()?;
        Some(up)
    }

    async fn send(&self, up: &mut TcpStream, bytes: &[u8]) -> Result<(), UpstreamError> {
        match tokio::time::timeout(self.proxy.timeouts.server_idle, up.write_all(bytes)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(UpstreamError::closed(false)),
            Err(_) => Err(UpstreamError::timed_out(false)),
        }
    }

    /// Reads from the backend into `conn.upstream_buf`; 0 is the end of the stream.
    async fn read_upstream(
        &self,
        up: &mut TcpStream,
        conn: &mut Connection,
    ) -> Result<usize, UpstreamError> {
        conn.upstream_buf.reserve(READ_SIZE);
        match tokio::time::timeout(
            self.proxy.timeouts.server_idle,
            up.read_buf(&mut conn.upstream_buf),
        )
        .await
        {
            Ok(Ok(n)) => Ok(n),
            Ok(Err(_)) => Err(UpstreamError::closed(false)),
            Err(_) => Err(UpstreamError::timed_out(false)),
        }
    }

    /// Reads the response header and writes the client's version of it into `conn.out`.
    /// Informational responses (1xx but 101) go to the client as they come.
    async fn read_response(
        &self,
        up: &mut TcpStream,
        stream: &mut GuardedStream,
        conn: &mut Connection,
        head_request: bool,
        ctx: &Ctx,
        close: bool,
    ) -> Result<ResponseHead, UpstreamError> {
        let mut informed = false;
        loop {
            if !conn.upstream_buf.is_empty() {
                conn.out.clear();
                match self.response_head(
                    &conn.upstream_buf,
                    ctx,
                    head_request,
                    close,
                    &mut conn.out,
                ) {
                    Head::Partial if conn.upstream_buf.len() > MAX_RESPONSE_HEAD => {
                        return Err(UpstreamError::invalid(informed));
                    }
                    Head::Partial => {}
                    Head::Invalid => return Err(UpstreamError::invalid(informed)),
                    Head::Informational(len) => {
                        let info = conn.upstream_buf.split_to(len);
                        if !self.write_client(stream, &info).await {
                            return Err(UpstreamError::client());
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
                Ok(0) => return Err(UpstreamError::closed(informed)),
                Ok(_) => {}
                Err(e) => return Err(UpstreamError { informed, ..e }),
            }
        }
    }

    /// Parses the response header at the start of `buf` and writes the client's version
    /// of it into `out`: hop-by-hop headers dropped, the framing restated, the stickiness
    /// cookie and HSTS added.
    fn response_head(
        &self,
        buf: &[u8],
        ctx: &Ctx,
        head_request: bool,
        close: bool,
        out: &mut Vec<u8>,
    ) -> Head {
        let mut headers = [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
        let mut resp = httparse::Response::new(&mut headers);
        let len = match resp.parse(buf) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => return Head::Partial,
            Err(_) => return Head::Invalid,
        };
        let (Some(status), Some(version)) = (resp.code, resp.version) else {
            return Head::Invalid;
        };
        if status == 101 || !(100..=599).contains(&status) {
            return Head::Invalid;
        }
        if status < 200 {
            return Head::Informational(len);
        }
        let mut length: Option<u64> = None;
        let mut chunked = false;
        let mut other_coding = false;
        let mut upstream_close = version == 0;
        let mut has_hsts = false;
        let mut has_date = false;
        let mut cache_control: Option<&[u8]> = None;
        for h in resp.headers.iter() {
            match response_kind(h.name) {
                ResponseKind::ContentLength => {
                    let Some(n) = parse_length(h.value) else {
                        return Head::Invalid;
                    };
                    if length.is_some_and(|l| l != n) {
                        return Head::Invalid;
                    }
                    length = Some(n);
                }
                ResponseKind::TransferEncoding => {
                    if !chunked
                        && !other_coding
                        && h.value.trim_ascii().eq_ignore_ascii_case(b"chunked")
                    {
                        chunked = true;
                    } else {
                        other_coding = true;
                    }
                }
                ResponseKind::Connection => {
                    for token in h.value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                        if token.eq_ignore_ascii_case(b"close") {
                            upstream_close = true;
                        } else if token.eq_ignore_ascii_case(b"keep-alive") {
                            upstream_close &= version != 0;
                        } else if !token.is_empty() {
                            // A header named in Connection is hop-by-hop; not worth the
                            // bookkeeping here, and the connection is not reused.
                            upstream_close = true;
                        }
                    }
                }
                ResponseKind::Hsts => has_hsts = true,
                ResponseKind::Date => has_date = true,
                ResponseKind::CacheControl => {
                    cache_control.get_or_insert(h.value);
                }
                ResponseKind::HopByHop | ResponseKind::Other => {}
            }
        }
        let framing = if head_request || status == 204 || status == 304 {
            Framing::Empty
        } else if chunked && !other_coding {
            Framing::Chunked
        } else if other_coding {
            Framing::UntilClose
        } else if let Some(n) = length {
            Framing::Length(n)
        } else {
            Framing::UntilClose
        };
        // A length beside a transfer coding is ignored (RFC 9112 §6.3), but such a backend
        // connection is not trusted with another request.
        let ambiguous = length.is_some() && (chunked || other_coding);
        let reusable = !upstream_close && !ambiguous && framing != Framing::UntilClose;

        let set_cookie = self.proxy.set_cookie(ctx);
        write_status(out, status, resp.reason.unwrap_or(""));
        let mut wrote_length = false;
        for h in resp.headers.iter() {
            match response_kind(h.name) {
                ResponseKind::ContentLength => {
                    if matches!(framing, Framing::Length(_) | Framing::Empty) && !wrote_length {
                        wrote_length = true;
                        header(out, h.name, h.value);
                    }
                }
                ResponseKind::TransferEncoding
                | ResponseKind::Connection
                | ResponseKind::HopByHop => {}
                ResponseKind::CacheControl if set_cookie.is_some() => {}
                _ => header(out, h.name, h.value),
            }
        }
        if !has_date {
            // RFC 9110 §6.6.1: a recipient with a clock adds the Date an origin left out.
            header(out, "Date", get_cached_date().as_bytes());
        }
        if matches!(framing, Framing::Chunked | Framing::UntilClose) {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
        }
        if let Some(id) = set_cookie {
            header(out, "Set-Cookie", sticky::set_cookie_value(id).as_bytes());
            header(
                out,
                "Cache-Control",
                no_cache_set_cookie(cache_control).as_bytes(),
            );
        }
        if !has_hsts && let Some(v) = self.proxy.hsts() {
            header(out, "Strict-Transport-Security", v.as_bytes());
        }
        if close {
            out.extend_from_slice(b"Connection: close\r\n");
        }
        out.extend_from_slice(b"\r\n");
        Head::Final(ResponseHead {
            len,
            status,
            framing,
            reusable,
        })
    }

    /// Writes the response header in `conn.out` and the body after it, as the backend sends
    /// it; says how many body bytes went out and whether the backend connection ended
    /// exactly at the end of the response.
    async fn relay_body(
        &self,
        up: &mut TcpStream,
        stream: &mut GuardedStream,
        conn: &mut Connection,
        framing: Framing,
    ) -> Result<Body, RelayError> {
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
                    Err(()) => {
                        let _ = self.write_client(stream, &conn.out).await;
                        return Err(RelayError::upstream(bytes, false, false));
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
                if !self.write_client(stream, &conn.out).await {
                    return Err(RelayError::client(bytes));
                }
                conn.out.clear();
                return Ok(Body {
                    bytes,
                    clean: conn.upstream_buf.is_empty(),
                });
            }
            if !conn.out.is_empty() {
                if !self.write_client(stream, &conn.out).await {
                    return Err(RelayError::client(bytes));
                }
                conn.out.clear();
            }
            match self.read_upstream(up, conn).await {
                Ok(0) if framing == Framing::UntilClose => {
                    conn.out.extend_from_slice(b"0\r\n\r\n");
                    if !self.write_client(stream, &conn.out).await {
                        return Err(RelayError::client(bytes));
                    }
                    conn.out.clear();
                    return Ok(Body {
                        bytes,
                        clean: false,
                    });
                }
                Ok(0) => return Err(RelayError::upstream(bytes, false, true)),
                Ok(_) => {}
                Err(e) => return Err(RelayError::upstream(bytes, e.timed_out, e.closed)),
            }
        }
    }

    /// Writes `bytes` to the client within the client timeout; false when it failed.
    async fn write_client(&self, stream: &mut GuardedStream, bytes: &[u8]) -> bool {
        let write = async {
            stream.write_all(bytes).await?;
            stream.flush().await
        };
        matches!(
            tokio::time::timeout(self.proxy.timeouts.client_idle, write).await,
            Ok(Ok(()))
        )
    }
}

// === request parsing ===

enum Read {
    Request(Request),
    Declined,
    Closed,
}

enum Parse {
    Request(Request),
    Partial,
    Declined,
}

/// A request header taken by the fast path, as offsets into its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Request {
    /// Length of the header, blank line included.
    len: usize,
    head: bool,
    target: Range<usize>,
    host: Range<usize>,
    /// The header lines, from the end of the request line to the blank line.
    lines: Range<usize>,
    /// The first `X-Forwarded-For` value, when it is one the backend can be told more of.
    forwarded_for: Option<Range<usize>>,
    /// `Connection: close`.
    close: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RequestKind {
    Host,
    Connection,
    ForwardedFor,
    ForwardedProto,
    ClientCert,
    Cookie,
    /// A header that changes framing or the protocol: Pingora's business.
    Decline,
    Other,
}

fn request_kind(name: &str) -> RequestKind {
    use RequestKind::*;
    let is = |n: &str| name.eq_ignore_ascii_case(n);
    match name.len() {
        2 if is("te") => Decline,
        4 if is("host") => Host,
        6 if is("cookie") => Cookie,
        6 if is("expect") => Decline,
        7 if is("upgrade") => Decline,
        10 if is("connection") => Connection,
        10 if is("keep-alive") => Decline,
        11 if is(CLIENT_DN_HEADER) => ClientCert,
        14 if is("content-length") => Decline,
        14 if is("http2-settings") => Decline,
        15 if is("x-forwarded-for") => ForwardedFor,
        15 if is(CLIENT_VERIFY_HEADER) => ClientCert,
        16 if is("proxy-connection") => Decline,
        17 if is("transfer-encoding") => Decline,
        17 if is("x-forwarded-proto") => ForwardedProto,
        _ => Other,
    }
}

/// Parses the request header at the start of `buf`; `skip` gets the header lines that are
/// not forwarded as they are, `cookies` the `Cookie` lines.
fn parse_request(
    buf: &[u8],
    https: bool,
    skip: &mut Vec<Range<usize>>,
    cookies: &mut Vec<(Range<usize>, Range<usize>)>,
) -> Parse {
    let mut headers = [httparse::EMPTY_HEADER; MAX_REQUEST_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    let len = match parsed.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parse::Partial,
        Err(_) => return Parse::Declined,
    };
    if parsed.version != Some(1) {
        return Parse::Declined;
    }
    let head = match parsed.method {
        Some("GET") => false,
        Some("HEAD") => true,
        _ => return Parse::Declined,
    };
    let Some(path) = parsed.path else {
        return Parse::Declined;
    };
    if !path.starts_with('/') || !path.bytes().all(target_byte) {
        return Parse::Declined;
    }
    // Bare line feeds are legal but read differently by some backends: Pingora rewrites
    // the header; here it would be copied as it is.
    let head_bytes = &buf[..len];
    if head_bytes
        .iter()
        .enumerate()
        .any(|(i, &b)| b == b'\n' && (i == 0 || head_bytes[i - 1] != b'\r'))
    {
        return Parse::Declined;
    }
    let base = buf.as_ptr() as usize;
    let at = |s: &[u8]| s.as_ptr() as usize - base;
    let span = |s: &[u8]| at(s)..at(s) + s.len();
    // The request line ends at the first line feed; the header lines at the blank line.
    let Some(line_end) = buf.iter().position(|&b| b == b'\n').map(|i| i + 1) else {
        return Parse::Declined;
    };
    let lines_end = len - 2;
    let mut host = None;
    let mut hosts = 0;
    let mut forwarded_for = None;
    let mut close = false;
    for h in parsed.headers.iter() {
        let start = at(h.name.as_bytes());
        let value_end = at(h.value) + h.value.len();
        let line = match buf[value_end..len].iter().position(|&b| b == b'\n') {
            Some(i) => start..value_end + i + 1,
            None => return Parse::Declined,
        };
        match request_kind(h.name) {
            RequestKind::Host => {
                hosts += 1;
                host = Some(span(h.value));
            }
            RequestKind::Connection => {
                let v = h.value.trim_ascii();
                if v.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if !v.eq_ignore_ascii_case(b"keep-alive") {
                    return Parse::Declined;
                }
                skip.push(line);
            }
            RequestKind::ForwardedFor => {
                // As `HttpProxy` does: the first value (when it is visible text) is extended.
                let v = h.value;
                if forwarded_for.is_none()
                    && !v.is_empty()
                    && v.iter().all(|&b| b == b'\t' || (b' '..=b'~').contains(&b))
                {
                    forwarded_for = Some(span(v));
                }
                skip.push(line);
            }
            RequestKind::ForwardedProto => skip.push(line),
            RequestKind::ClientCert if https => skip.push(line),
            RequestKind::Cookie => cookies.push((line, span(h.value))),
            RequestKind::Decline => return Parse::Declined,
            RequestKind::ClientCert | RequestKind::Other => {}
        }
    }
    let Some(host) = host.filter(|h| hosts == 1 && valid_host(&buf[h.clone()])) else {
        return Parse::Declined;
    };
    Parse::Request(Request {
        len,
        head,
        target: span(path.as_bytes()),
        host,
        lines: line_end.min(lines_end)..lines_end,
        forwarded_for,
        close,
    })
}

/// Bytes a request target may hold on this path: visible ASCII that `http::Uri` takes as
/// it is (anything else goes to Pingora, which percent-encodes it).
fn target_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~:/?[]@!$&'()*+,;=%".contains(&b)
}

/// Writes the request for the backend into `conn.out`: the request line with the target
/// (stripped of the route's prefix when `stripped` is given), the client's header lines
/// but those in `conn.skip` (and, on a cookie-sticky entry, the load balancer's cookie),
/// then `X-Forwarded-For`, `X-Forwarded-Proto` and the client-certificate headers.
fn build_request(
    conn: &mut Connection,
    head: &[u8],
    req: &Request,
    method: &str,
    stripped: Option<(&str, &str)>,
    sticky: bool,
    scheme: &str,
) {
    let out = &mut conn.out;
    out.clear();
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    match stripped {
        Some((slash, rest)) => {
            out.extend_from_slice(slash.as_bytes());
            out.extend_from_slice(rest.as_bytes());
        }
        None => out.extend_from_slice(&head[req.target.clone()]),
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut stripped_cookies = Vec::new();
    if sticky {
        for (line, value) in &conn.cookies {
            let v = &head[value.clone()];
            if sticky::find_cookie(v, COOKIE_NAME).is_some() {
                conn.skip.push(line.clone());
                if let Some(kept) = sticky::strip_cookie(v, COOKIE_NAME) {
                    stripped_cookies.push(kept);
                }
            }
        }
    }
    conn.skip.sort_unstable_by_key(|r| r.start);
    let mut pos = req.lines.start;
    for line in &conn.skip {
        if line.start >= pos {
            out.extend_from_slice(&head[pos..line.start]);
            pos = line.end;
        }
    }
    out.extend_from_slice(&head[pos..req.lines.end]);
    for kept in &stripped_cookies {
        header(out, "Cookie", kept);
    }
    if let Some(ip) = conn.client_ip {
        out.extend_from_slice(b"X-Forwarded-For: ");
        if let Some(prev) = &req.forwarded_for {
            out.extend_from_slice(&head[prev.clone()]);
            out.extend_from_slice(b", ");
        }
        let _ = write!(out, "{ip}\r\n");
    }
    header(out, "X-Forwarded-Proto", scheme.as_bytes());
    if let Some((verify, dn)) = &conn.cert_headers {
        header(out, CLIENT_VERIFY_HEADER, verify.as_bytes());
        if let Some(dn) = dn {
            header(out, CLIENT_DN_HEADER, dn.as_bytes());
        }
    }
    out.extend_from_slice(b"\r\n");
}

// === response handling ===

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// No body (HEAD, 204, 304).
    Empty,
    Length(u64),
    /// Chunked: relayed as it comes, its end found by `Chunks`.
    Chunked,
    /// Ends when the backend closes: relayed chunked to the client, which stays open.
    UntilClose,
}

#[derive(Debug)]
struct ResponseHead {
    len: usize,
    status: u16,
    framing: Framing,
    /// The backend connection may serve another request once the body is read.
    reusable: bool,
}

enum Head {
    Partial,
    Invalid,
    /// A 1xx response of this length, to pass on before the final one.
    Informational(usize),
    Final(ResponseHead),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ResponseKind {
    ContentLength,
    TransferEncoding,
    Connection,
    /// Other hop-by-hop headers, not forwarded.
    HopByHop,
    Hsts,
    CacheControl,
    Date,
    Other,
}

fn response_kind(name: &str) -> ResponseKind {
    use ResponseKind::*;
    let is = |n: &str| name.eq_ignore_ascii_case(n);
    match name.len() {
        4 if is("date") => Date,
        10 if is("connection") => Connection,
        10 if is("keep-alive") => HopByHop,
        13 if is("cache-control") => CacheControl,
        14 if is("content-length") => ContentLength,
        16 if is("proxy-connection") => HopByHop,
        17 if is("transfer-encoding") => TransferEncoding,
        25 if is("strict-transport-security") => Hsts,
        _ => Other,
    }
}

fn parse_length(v: &[u8]) -> Option<u64> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    v.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

struct Body {
    bytes: u64,
    /// The backend sent nothing after the end of the response.
    clean: bool,
}

/// Why a try failed before the response header was complete.
#[derive(Debug, Clone, Copy)]
struct UpstreamError {
    timed_out: bool,
    closed: bool,
    /// An informational response already reached the client: nothing can be replayed.
    informed: bool,
    /// The client failed, not the backend (no ejection).
    client: bool,
}

impl UpstreamError {
    fn closed(informed: bool) -> Self {
        UpstreamError {
            timed_out: false,
            closed: true,
            informed,
            client: false,
        }
    }
    fn timed_out(informed: bool) -> Self {
        UpstreamError {
            timed_out: true,
            closed: false,
            informed,
            client: false,
        }
    }
    fn invalid(informed: bool) -> Self {
        UpstreamError {
            timed_out: false,
            closed: false,
            informed,
            client: false,
        }
    }
    /// The client went away while an informational response was written to it.
    fn client() -> Self {
        UpstreamError {
            timed_out: false,
            closed: true,
            informed: true,
            client: true,
        }
    }
}

/// A failure while relaying the body (the response header may have gone out).
struct RelayError {
    bytes: u64,
    upstream: bool,
    timed_out: bool,
    closed: bool,
}

impl RelayError {
    fn upstream(bytes: u64, timed_out: bool, closed: bool) -> Self {
        RelayError {
            bytes,
            upstream: true,
            timed_out,
            closed,
        }
    }
    fn client(bytes: u64) -> Self {
        RelayError {
            bytes,
            upstream: false,
            timed_out: false,
            closed: true,
        }
    }
}

/// Finds the end of a chunked body fed in pieces, counting its data bytes (RFC 9112 §7.1).
#[derive(Debug, Default)]
struct Chunks {
    state: ChunkState,
    size: u64,
    digits: u8,
    /// Bytes of the current size line, extension included.
    line: usize,
    data: u64,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    Extension,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    TrailerStart,
    Trailer,
    EndLf,
    Done,
}

/// Longest chunk-size line (with extensions) or trailer line accepted.
const MAX_CHUNK_LINE: usize = 4096;

impl Chunks {
    /// Feeds `bytes`; `Some(n)` when the body ends after the first `n` of them.
    fn feed(&mut self, bytes: &[u8]) -> Result<Option<usize>, ()> {
        use ChunkState::*;
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            match self.state {
                Size => match b {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        let d = (b as char).to_digit(16).ok_or(())?;
                        if self.digits >= 15 {
                            return Err(());
                        }
                        self.size = self.size * 16 + u64::from(d);
                        self.digits += 1;
                    }
                    b';' | b' ' | b'\t' if self.digits > 0 => self.state = Extension,
                    b'\r' if self.digits > 0 => self.state = SizeLf,
                    b'\n' if self.digits > 0 => self.end_size_line(),
                    _ => return Err(()),
                },
                Extension => match b {
                    b'\r' => self.state = SizeLf,
                    b'\n' => self.end_size_line(),
                    _ => {}
                },
                SizeLf if b == b'\n' => self.end_size_line(),
                Data => {
                    let n = usize::try_from(self.size)
                        .map_or(bytes.len() - i, |s| s.min(bytes.len() - i));
                    self.size -= n as u64;
                    self.data += n as u64;
                    i += n;
                    if self.size == 0 {
                        self.state = DataCr;
                    }
                    continue;
                }
                DataCr if b == b'\r' => self.state = DataLf,
                DataCr | DataLf if b == b'\n' => {
                    self.state = Size;
                    self.size = 0;
                    self.digits = 0;
                    self.line = 0;
                }
                TrailerStart => match b {
                    b'\r' => self.state = EndLf,
                    b'\n' => {
                        self.state = Done;
                        return Ok(Some(i + 1));
                    }
                    _ => self.state = Trailer,
                },
                Trailer => {
                    if b == b'\n' {
                        self.state = TrailerStart;
                        self.line = 0;
                    }
                }
                EndLf if b == b'\n' => {
                    self.state = Done;
                    return Ok(Some(i + 1));
                }
                Done => return Ok(Some(i)),
                _ => return Err(()),
            }
            if matches!(self.state, Size | Extension | SizeLf | Trailer) {
                self.line += 1;
                if self.line > MAX_CHUNK_LINE {
                    return Err(());
                }
            }
            i += 1;
        }
        Ok(None)
    }

    fn end_size_line(&mut self) {
        self.line = 0;
        self.state = if self.size == 0 {
            ChunkState::TrailerStart
        } else {
            ChunkState::Data
        };
    }
}

// === impl Pool ===

/// Idle connections to endpoints, newest last. Kept apart from Pingora's pool: each path
/// reuses its own. A task started with the first returned connection drops, once a second,
/// those idle for longer than `--server-timeout`, those the backend closed, and endpoints
/// with nothing left (including those no longer in the table), so a quiet proxy holds no
/// dead sockets.
#[derive(Default)]
struct Pool {
    idle: Mutex<HashMap<SocketAddr, Vec<(TcpStream, Instant)>>>,
    sweeper: std::sync::OnceLock<()>,
}

impl Pool {
    /// The most recently returned connection to `addr` that has been idle for less than
    /// `max_idle`.
    fn take(&self, addr: SocketAddr, max_idle: Duration) -> Option<TcpStream> {
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.get_mut(&addr)?;
        while let Some((up, since)) = list.pop() {
            if now.duration_since(since) < max_idle && idle_and_open(&up) {
                return Some(up);
            }
        }
        None
    }

    fn put(self: &Arc<Self>, addr: SocketAddr, up: TcpStream, max_idle: Duration) {
        {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            let list = idle.entry(addr).or_default();
            if list.len() < MAX_IDLE_PER_ENDPOINT {
                list.push((up, Instant::now()));
            }
        }
        self.sweeper.get_or_init(|| {
            let pool = Arc::downgrade(self);
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(SWEEP_EVERY).await;
                    let Some(pool) = pool.upgrade() else {
                        return;
                    };
                    pool.sweep(max_idle);
                }
            });
        });
    }

    fn sweep(&self, max_idle: Duration) {
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.retain(|_, list| {
            list.retain(|(up, since)| now.duration_since(*since) < max_idle && idle_and_open(up));
            !list.is_empty()
        });
    }

    #[cfg(test)]
    fn idle_count(&self) -> usize {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.values().map(Vec::len).sum()
    }
}

/// An idle backend connection is still usable when reading from it would block: the
/// backend has neither closed it nor sent anything unasked. Tokio answers from the readiness
/// it has already seen, so this costs no system call until the socket had an event.
fn idle_and_open(up: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(up.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

// === helpers ===

fn str_at(head: &[u8], r: Range<usize>) -> &str {
    // The target was checked to be ASCII when parsed.
    std::str::from_utf8(&head[r]).unwrap_or("/")
}

fn write_status(out: &mut Vec<u8>, status: u16, reason: &str) {
    let reason = if reason.is_empty() {
        StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("")
    } else {
        reason
    };
    let _ = write!(out, "HTTP/1.1 {status} {reason}\r\n");
}

fn header(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &str) -> (Parse, Vec<Range<usize>>) {
        let mut skip = Vec::new();
        let mut cookies = Vec::new();
        let p = parse_request(raw.as_bytes(), false, &mut skip, &mut cookies);
        (p, skip)
    }

    #[test]
    fn plain_gets_are_taken_and_everything_else_declined() {
        let (p, skip) = parse("GET /a?b HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n");
        let Parse::Request(r) = p else {
            panic!("not taken")
        };
        assert_eq!((r.target.clone(), r.head, r.close), (4..8, false, false));
        assert_eq!(skip.len(), 1);
        assert!(matches!(
            parse("GET / HTTP/1.1\r\nHost: x\r\n").0,
            Parse::Partial
        ));
        for declined in [
            "POST / HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET / HTTP/1.0\r\nHost: x\r\n\r\n",
            "GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET / HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n",
            "GET /{x} HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\nX-A: b\r\n\r\n",
            "GET / HTTP/1.1\nHost: x\n\n",
        ] {
            assert!(
                matches!(parse(declined).0, Parse::Declined),
                "{declined:?} was taken"
            );
        }
    }

    #[test]
    fn the_forwarded_request_changes_only_what_it_must() {
        let raw = "GET /svc/a?q=1 HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\
                   X-Forwarded-For: 10.0.0.1\r\nCookie: a=1; SERVERID=00aa; b=2\r\n\
                   X-Forwarded-Proto: https\r\nAccept: */*\r\n\r\n";
        let mut skip = Vec::new();
        let mut cookies = Vec::new();
        let Parse::Request(req) = parse_request(raw.as_bytes(), false, &mut skip, &mut cookies)
        else {
            panic!("not taken")
        };
        let mut conn = Connection {
            client: None,
            client_ip: Some("127.0.0.9".parse().unwrap()),
            fresh: true,
            buf: BytesMut::new(),
            upstream_buf: BytesMut::new(),
            out: Vec::new(),
            skip,
            cookies,
            cert_headers: None,
        };
        let target = str_at(raw.as_bytes(), req.target.clone());
        let strip = crate::table::matcher::Strip::of("/svc");
        build_request(
            &mut conn,
            raw.as_bytes(),
            &req,
            "GET",
            Some(strip.apply(target)),
            true,
            "http",
        );
        assert_eq!(
            String::from_utf8(conn.out).unwrap(),
            "GET /a?q=1 HTTP/1.1\r\nHost: x\r\nAccept: */*\r\nCookie: a=1; b=2\r\n\
             X-Forwarded-For: 10.0.0.1, 127.0.0.9\r\nX-Forwarded-Proto: http\r\n\r\n"
        );
    }

    fn chunked(pieces: &[&str]) -> Result<Option<usize>, ()> {
        let mut c = Chunks::default();
        let mut total = 0;
        for p in pieces {
            if let Some(n) = c.feed(p.as_bytes())? {
                return Ok(Some(total + n));
            }
            total += p.len();
        }
        Ok(None)
    }

    #[test]
    fn the_end_of_a_chunked_body_is_found_across_pieces() {
        let body = "4\r\nWiki\r\n5;ext=1\r\npedia\r\n0\r\n\r\nNEXT";
        assert_eq!(chunked(&[body]), Ok(Some(body.len() - 4)));
        let pieces: Vec<String> = body.chars().map(String::from).collect();
        let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
        assert_eq!(chunked(&refs), Ok(Some(body.len() - 4)));
        assert_eq!(
            chunked(&["0\r\nTrailer: x\r\n\r\n"]),
            Ok(Some("0\r\nTrailer: x\r\n\r\n".len()))
        );
        assert_eq!(chunked(&["4\r\nWik"]), Ok(None));
        assert_eq!(chunked(&["x\r\n"]), Err(()));
        assert_eq!(chunked(&["4\r\nWikiX\r\n"]), Err(()));
        assert_eq!(chunked(&["fffffffffffffffff\r\n"]), Err(()));
        let mut c = Chunks::default();
        assert_eq!(c.feed(b"3\r\nabc\r\n10\r\n"), Ok(None));
        assert_eq!(c.data, 3);
    }

    #[tokio::test]
    async fn the_pool_gives_back_live_connections_and_sweeps_the_rest() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let pool = Arc::new(Pool::default());
        let long = Duration::from_secs(60);
        let a = TcpStream::connect(addr).await.unwrap();
        let (server_a, _) = listener.accept().await.unwrap();
        let b = TcpStream::connect(addr).await.unwrap();
        let (_server_b, _) = listener.accept().await.unwrap();
        pool.put(addr, a, long);
        pool.put(addr, b, long);
        assert_eq!(pool.idle_count(), 2);
        // The backend closes the older one: the sweep drops it, the live one stays.
        drop(server_a);
        let swept = async {
            for _ in 0..100 {
                pool.sweep(long);
                if pool.idle_count() == 1 {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            false
        };
        assert!(swept.await, "the closed connection is still pooled");
        assert!(pool.take(addr, long).is_some());
        assert!(pool.take(addr, long).is_none());
        // Idle longer than allowed: neither taken nor kept.
        let c = TcpStream::connect(addr).await.unwrap();
        let (_server_c, _) = listener.accept().await.unwrap();
        pool.put(addr, c, long);
        tokio::time::sleep(Duration::from_millis(30)).await;
        pool.sweep(Duration::from_millis(10));
        assert_eq!(pool.idle_count(), 0);
    }

    mod forwarded {
        use super::*;
        use proptest::prelude::*;

        const NAMES: &[&str] = &[
            "Host",
            "host",
            "Connection",
            "X-Forwarded-For",
            "x-forwarded-proto",
            "Cookie",
            "Content-Length",
            "Transfer-Encoding",
            "transfer-encoding",
            "Upgrade",
            "X-Other",
            "Accept",
            "X-Client-Verify",
        ];
        const VALUES: &[&str] = &[
            "",
            "a.test",
            "close",
            "keep-alive",
            "Upgrade",
            "1.2.3.4",
            "a=1; SERVERID=00000000000000aa; b=2",
            "SERVERID=1",
            "chunked",
            "5",
            "x y",
            "a\tb",
            "caf\u{e9}",
        ];

        /// Method, target, headers (indexes into NAMES and VALUES), bare LF line endings. Most
        /// requests get one `Host: a.test` at a random place, so that many are taken.
        fn request() -> impl Strategy<Value = (String, String, Vec<(usize, usize)>, bool)> {
            (
                prop::sample::select(vec!["GET", "GET", "HEAD", "POST"]),
                prop::sample::select(vec!["/", "/a?b=1", "/svc/x", "/%41", "*", "/a b", "/{x}"]),
                prop::collection::vec((0..NAMES.len(), 0..VALUES.len()), 0..6),
                prop::option::weighted(0.9, any::<prop::sample::Index>()),
                prop::bool::weighted(0.1),
            )
                .prop_map(|(m, t, mut h, host_at, lf)| {
                    if let Some(at) = host_at {
                        h.insert(at.index(h.len() + 1), (0, 1));
                    }
                    (m.to_string(), t.to_string(), h, lf)
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1024))]

            /// Whatever the fast path takes, the backend gets one well-formed request: the
            /// same method and target, exactly one Host (the client's), no hop-by-hop or
            /// framing header, one X-Forwarded-For ending with the client, one
            /// X-Forwarded-Proto, and every other client header unchanged and in order.
            /// Anything with framing headers, a bad Host or a bare LF is declined.
            #[test]
            fn taken_requests_are_forwarded_whole_and_unambiguous(
                (method, target, headers, bare_lf) in request(),
                sticky in any::<bool>(),
            ) {
                let eol = if bare_lf { "\n" } else { "\r\n" };
                let mut raw = format!("{method} {target} HTTP/1.1{eol}");
                for (n, v) in &headers {
                    raw.push_str(&format!("{}: {}{eol}", NAMES[*n], VALUES[*v]));
                }
                raw.push_str(eol);
                let (mut skip, mut cookies) = (Vec::new(), Vec::new());
                let parsed = parse_request(raw.as_bytes(), true, &mut skip, &mut cookies);
                let framing = headers.iter().any(|(n, _)| {
                    let n = NAMES[*n].to_ascii_lowercase();
                    n == "content-length" || n == "transfer-encoding" || n == "upgrade"
                });
                let hosts: Vec<&str> = headers
                    .iter()
                    .filter(|(n, _)| NAMES[*n].eq_ignore_ascii_case("host"))
                    .map(|(_, v)| VALUES[*v])
                    .collect();
                let Parse::Request(req) = parsed else {
                    return Ok(());
                };
                TAKEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                prop_assert!(!framing && !bare_lf && hosts.len() == 1 && method != "POST");
                let mut conn = Connection {
                    client: None,
                    client_ip: Some("10.9.8.7".parse().unwrap()),
                    fresh: true,
                    buf: BytesMut::new(),
                    upstream_buf: BytesMut::new(),
                    out: Vec::new(),
                    skip,
                    cookies,
                    cert_headers: Some(("NONE", None)),
                };
                let head = raw.as_bytes();
                build_request(&mut conn, head, &req, &method, None, sticky, "https");
                let mut hs = [httparse::EMPTY_HEADER; 64];
                let mut out = httparse::Request::new(&mut hs);
                let n = out.parse(&conn.out);
                prop_assert_eq!(n, Ok(httparse::Status::Complete(conn.out.len())));
                prop_assert_eq!(out.method, Some(method.as_str()));
                prop_assert_eq!(out.path, Some(target.as_str()));
                let got: Vec<(String, String)> = out
                    .headers
                    .iter()
                    .map(|h| (h.name.to_ascii_lowercase(), String::from_utf8_lossy(h.value).into_owned()))
                    .collect();
                let count = |name: &str| got.iter().filter(|(n, _)| n == name).count();
                prop_assert_eq!(count("host"), 1);
                prop_assert_eq!(count("connection"), 0);
                prop_assert_eq!(count("x-forwarded-for"), 1);
                prop_assert_eq!(count("x-forwarded-proto"), 1);
                prop_assert_eq!(count("x-client-verify"), 1);
                let xff = &got.iter().find(|(n, _)| n == "x-forwarded-for").unwrap().1;
                prop_assert!(xff.ends_with("10.9.8.7"), "{}", xff);
                if sticky {
                    prop_assert!(got.iter().all(|(n, v)| n != "cookie" || !v.contains("SERVERID")));
                }
                let kept: Vec<(String, String)> = headers
                    .iter()
                    .map(|(n, v)| (NAMES[*n].to_ascii_lowercase(), VALUES[*v].to_string()))
                    .filter(|(n, v)| {
                        let replaced = matches!(
                            n.as_str(),
                            "connection" | "x-forwarded-for" | "x-forwarded-proto" | "x-client-verify"
                        );
                        let ours = sticky && n == "cookie" && v.contains("SERVERID");
                        !(replaced || ours)
                    })
                    .collect();
                let forwarded: Vec<(String, String)> = got
                    .iter()
                    .filter(|(n, v)| {
                        let added = matches!(
                            n.as_str(),
                            "x-forwarded-for" | "x-forwarded-proto" | "x-client-verify"
                        );
                        let rewritten = sticky && n == "cookie" && !kept.iter().any(|k| &k.1 == v);
                        !(added || rewritten)
                    })
                    .cloned()
                    .collect();
                prop_assert_eq!(forwarded, kept);
            }
        }

        static TAKEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

        /// The property above says nothing if nothing is taken: make sure a good share is.
        #[test]
        fn the_property_sees_taken_requests() {
            taken_requests_are_forwarded_whole_and_unambiguous();
            let taken = TAKEN.load(std::sync::atomic::Ordering::Relaxed);
            assert!(taken >= 100, "only {taken} of 1,024 requests were taken");
        }
    }

    #[test]
    fn lengths_must_be_plain_digits() {
        assert_eq!(parse_length(b" 42 "), Some(42));
        for bad in [&b""[..], b"-1", b"4 2", b"0x10", b"99999999999999999999"] {
            assert_eq!(parse_length(bad), None);
        }
    }
}

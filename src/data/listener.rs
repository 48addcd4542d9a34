//! Guards on client connections of the HTTP and TLS ports, in front of Pingora's HTTP
//! application: the connection limit (`--max-connections`), the TLS handshake (run here so that
//! failures are seen and counted, see `tls::HandshakeAcceptor`), and the request-header
//! deadline and size limit (`--request-header-timeout`, `--max-request-header-bytes`).
//!
//! Pingora reads a request header with a 60 s timeout per read and accepts up to 1 MiB of it,
//! both fixed, so a client trickling one byte a minute holds a connection forever. The guard
//! wraps the accepted stream instead: while a request header is being read it scans the bytes
//! for the blank line that ends it, and answers 408 (too slow) or 431 (too large) itself,
//! then closes. It also owns the HTTP/1 keep-alive loop (as Pingora's own `ServerApp` does) so
//! that it can re-arm the header guard between requests, once the previous request, body
//! included, is completely done, and before each request that goes to Pingora it has the header
//! read and checked whole (`intake`), so that switchyard, not Pingora, answers the ones that
//! are refused. Every refusal (the guard's 408 and 431 too) is answered as `decide` says,
//! counted and logged (`intake::Refusals`). HTTP/2 connections get the guard for their
//! preface only. On a `--proxy-protocol` frontend the PROXY header is read first, before TLS
//! and the header guard, and its client replaces the socket's peer in the stream's socket
//! digest, where every consumer reads the client address. This module does no routing and
//! knows nothing of the table.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use pingora::apps::{HttpPersistentSettings, HttpServerApp, ServerApp};
use pingora::protocols::http::ServerSession;
use pingora::protocols::tls::{SslDigest, TlsRef};
use pingora::protocols::{
    ALPN, GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, SocketDigest, Ssl,
    Stream, TimingDigest, UniqueID, UniqueIDType,
};
use pingora::server::ShutdownWatch;
use prometheus::IntCounter;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::data::fast::{FastPath, Served};
use crate::data::http2;
use crate::data::intake::{self, Intake, Refusals};
use crate::data::proxy_protocol;
use crate::data::tls::HandshakeAcceptor;
use crate::decide::cause::Rejection;
use crate::decide::target::valid_host;
use crate::ops::metrics::Metrics;

/// `--max-connections`, `--max-request-header-bytes`, `--request-header-timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_connections: usize,
    pub max_header_bytes: usize,
    pub header_timeout: Duration,
    /// Idle time allowed between two requests of a connection.
    pub keep_alive: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 10_000,
            max_header_bytes: 64 * 1024,
            header_timeout: Duration::from_secs(5),
            keep_alive: Duration::from_secs(60),
        }
    }
}

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// === impl ConnectionLimit ===

/// Client connections open on the frontends that share it. At the limit a new connection is
/// closed at once (Pingora has already accepted it; nothing is read or written), which keeps
/// memory and file descriptors bounded without queueing.
#[derive(Debug)]
pub struct ConnectionLimit {
    open: AtomicUsize,
    max: usize,
}

/// One admitted connection; frees its place when dropped.
pub struct Admitted(Arc<ConnectionLimit>);

impl ConnectionLimit {
    pub fn new(max: usize) -> Arc<ConnectionLimit> {
        Arc::new(ConnectionLimit {
            open: AtomicUsize::new(0),
            max: max.max(1),
        })
    }

    pub fn try_admit(self: &Arc<Self>) -> Option<Admitted> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Admitted(Arc::clone(self)))
    }

    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

// === header scanning ===

/// Finds the end of a request header: a line feed, an optional carriage return, a line feed
/// (`\r\n\r\n` and the bare-LF forms the parser also accepts). Blank lines before the request
/// line do not count, so they cannot switch the guard off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeaderEnd {
    /// 0: inside a line; 1: after LF; 2: after LF CR.
    state: u8,
    started: bool,
}

impl HeaderEnd {
    /// Feeds `bytes`; returns how many of them belong to the header when it ends among them.
    pub fn feed(&mut self, bytes: &[u8]) -> Option<usize> {
        for (i, &b) in bytes.iter().enumerate() {
            match b {
                b'\n' if self.started && self.state > 0 => return Some(i + 1),
                b'\n' => self.state = 1,
                b'\r' if self.state == 1 => self.state = 2,
                b'\r' => {}
                _ => {
                    self.started = true;
                    self.state = 0;
                }
            }
        }
        None
    }
}

// === impl GuardedStream ===

/// Counters of the guards' closes, resolved once per frontend, and how the frontend
/// answers and records a refused request.
#[derive(Clone)]
pub struct Counters {
    limit: IntCounter,
    timeout: IntCounter,
    too_large: IntCounter,
    refusals: Arc<Refusals>,
}

impl Counters {
    pub fn new(metrics: &Metrics, frontend: &str, refusals: Refusals) -> Counters {
        let c = |reason| metrics.data.downstream_rejected(frontend, reason);
        Counters {
            limit: c("connection_limit"),
            timeout: c("header_timeout"),
            too_large: c("header_too_large"),
            refusals: Arc::new(refusals),
        }
    }
}

enum Phase {
    /// Reading a request header; the deadline runs once armed.
    Header,
    /// Past the header (body, response, tunnel, HTTP/2 frames): no guard until re-armed.
    Body,
    /// Writing the refusal, then failing every read.
    Reject {
        response: Vec<u8>,
        written: usize,
    },
    Closed,
}

struct HeaderGuard {
    limits: Limits,
    counters: Counters,
    phase: Phase,
    deadline: Pin<Box<Sleep>>,
    armed: bool,
    read: usize,
    end: HeaderEnd,
    /// What the guard refused, until the connection's owner records it.
    rejected: Option<Rejection>,
}

impl HeaderGuard {
    fn arm(&mut self) {
        self.deadline
            .as_mut()
            .reset(Instant::now() + self.limits.header_timeout);
        self.armed = true;
    }

    fn reject(&mut self, r: Rejection) {
        if r == Rejection::HeaderTimeout {
            self.counters.timeout.inc();
        } else {
            self.counters.too_large.inc();
        }
        self.rejected = Some(r);
        self.phase = Phase::Reject {
            response: self.counters.refusals.answer(r),
            written: 0,
        };
    }
}

/// A client stream; with a header guard when it carries HTTP (above TLS on the TLS port),
/// a plain pass-through below TLS.
pub struct GuardedStream {
    inner: Stream,
    header: Option<Box<HeaderGuard>>,
    /// Bytes already read that the next reads hand out again (see `unread`).
    replay: Option<Bytes>,
}

impl fmt::Debug for GuardedStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardedStream")
            .field("inner", &self.inner)
            .field("guarded", &self.header.is_some())
            .finish()
    }
}

impl GuardedStream {
    /// No guard: lets a `Stream` be handed to code that wants a concrete `IO` type.
    pub fn plain(inner: Stream) -> GuardedStream {
        GuardedStream {
            inner,
            header: None,
            replay: None,
        }
    }

    /// Guards the first request header, whose deadline runs from now.
    pub fn guarded(inner: Stream, limits: Limits, counters: Counters) -> GuardedStream {
        let mut guard = HeaderGuard {
            limits,
            counters,
            phase: Phase::Header,
            deadline: Box::pin(tokio::time::sleep(limits.header_timeout)),
            armed: false,
            read: 0,
            end: HeaderEnd::default(),
            rejected: None,
        };
        guard.arm();
        GuardedStream {
            inner,
            header: Some(Box::new(guard)),
            replay: None,
        }
    }

    /// Guards the next request header on a kept-alive connection; its deadline runs from its
    /// first byte (waiting for it is the keep-alive timeout's business).
    pub fn rearm(&mut self) {
        if let Some(h) = &mut self.header {
            h.phase = Phase::Header;
            h.armed = false;
            h.read = 0;
            h.end = HeaderEnd::default();
        }
    }

    /// Puts back `bytes`, read from this stream as the start of a request header, so that the
    /// next reader (Pingora's HTTP/1 session, when `fast_path` declines a request) reads them
    /// first. The header guard scans them again as the start of a new header; its deadline
    /// keeps running from the header's first byte.
    ///
    /// They go in front of whatever put-back bytes were not read yet: a reader that took only
    /// part of them (the intake reads 8 KiB at a time, the fast path may have put back 16 KiB
    /// of header and body) puts back what it read, and the rest must still follow it.
    pub fn unread(&mut self, bytes: Bytes) {
        if let Some(h) = &mut self.header {
            h.phase = Phase::Header;
            h.read = 0;
            h.end = HeaderEnd::default();
        }
        self.replay = replayed(bytes, self.replay.take());
    }

    /// What the header guard refused (408, 431), once: the caller records it.
    pub fn take_rejection(&mut self) -> Option<Rejection> {
        self.header.as_mut().and_then(|h| h.rejected.take())
    }

    /// When the current request header's deadline started (its first byte, or the accept for
    /// a connection's first request).
    pub fn header_started(&self) -> Option<std::time::Instant> {
        let h = self.header.as_ref().filter(|h| h.armed)?;
        Some((h.deadline.deadline() - h.limits.header_timeout).into_std())
    }

    /// Writes the answer of a refusal the guard decided outside a read (a peek that timed
    /// out); does nothing otherwise.
    pub async fn finish_rejection(&mut self) {
        if self
            .header
            .as_ref()
            .is_some_and(|h| matches!(h.phase, Phase::Reject { .. }))
        {
            let _ = std::future::poll_fn(|cx| self.poll_reject(cx)).await;
        }
    }

    fn poll_reject(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some(h) = self.header.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        loop {
            match &mut h.phase {
                Phase::Reject { response, written } if *written < response.len() => {
                    let n =
                        ready!(Pin::new(&mut self.inner).poll_write(cx, &response[*written..]))?;
                    if n == 0 {
                        h.phase = Phase::Closed;
                    } else {
                        *written += n;
                    }
                }
                Phase::Reject { .. } => {
                    ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
                    h.phase = Phase::Closed;
                }
                _ => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "request header rejected by the guard",
                    )));
                }
            }
        }
    }
}

impl AsyncRead for GuardedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let Some(h) = this.header.as_mut() else {
            return read_from(&mut this.replay, &mut this.inner, cx, buf);
        };
        match h.phase {
            Phase::Header => {}
            Phase::Body => return read_from(&mut this.replay, &mut this.inner, cx, buf),
            Phase::Reject { .. } | Phase::Closed => return this.poll_reject(cx),
        }
        if h.armed && h.deadline.is_elapsed() {
            h.reject(Rejection::HeaderTimeout);
            return this.poll_reject(cx);
        }
        let before = buf.filled().len();
        match read_from(&mut this.replay, &mut this.inner, cx, buf) {
            Poll::Ready(Ok(())) => {
                let new = &buf.filled()[before..];
                if new.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                if !h.armed {
                    h.arm();
                }
                let (len, done) = match h.end.feed(new) {
                    Some(n) => (n, true),
                    None => (new.len(), false),
                };
                h.read += len;
                if h.read > h.limits.max_header_bytes {
                    buf.set_filled(before);
                    h.reject(Rejection::HeaderTooLarge);
                    return this.poll_reject(cx);
                }
                if done {
                    h.phase = Phase::Body;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                if h.armed && h.deadline.as_mut().poll(cx).is_ready() {
                    h.reject(Rejection::HeaderTimeout);
                    return this.poll_reject(cx);
                }
                Poll::Pending
            }
            other => other,
        }
    }
}

/// `front`, then what was still to be replayed.
fn replayed(front: Bytes, rest: Option<Bytes>) -> Option<Bytes> {
    match rest {
        Some(rest) if !rest.is_empty() => {
            let mut all = BytesMut::with_capacity(front.len() + rest.len());
            all.extend_from_slice(&front);
            all.extend_from_slice(&rest);
            Some(all.freeze())
        }
        _ => (!front.is_empty()).then_some(front),
    }
}

/// Reads the bytes put back first, then from the stream.
fn read_from(
    replay: &mut Option<Bytes>,
    inner: &mut Stream,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>> {
    if let Some(r) = replay {
        let n = r.len().min(buf.remaining());
        buf.put_slice(&r.split_to(n));
        if r.is_empty() {
            *replay = None;
        }
        return Poll::Ready(Ok(()));
    }
    Pin::new(inner).poll_read(cx, buf)
}

impl AsyncWrite for GuardedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[async_trait]
impl Shutdown for GuardedStream {
    async fn shutdown(&mut self) {
        self.inner.shutdown().await;
    }
}

impl UniqueID for GuardedStream {
    fn id(&self) -> UniqueIDType {
        self.inner.id()
    }
}

impl Ssl for GuardedStream {
    fn get_ssl(&self) -> Option<&TlsRef> {
        self.inner.get_ssl()
    }

    fn get_ssl_digest(&self) -> Option<Arc<SslDigest>> {
        self.inner.get_ssl_digest()
    }

    fn selected_alpn_proto(&self) -> Option<ALPN> {
        self.inner.selected_alpn_proto()
    }
}

impl GetTimingDigest for GuardedStream {
    fn get_timing_digest(&self) -> Vec<Option<TimingDigest>> {
        self.inner.get_timing_digest()
    }

    fn get_read_pending_time(&self) -> Duration {
        self.inner.get_read_pending_time()
    }

    fn get_write_pending_time(&self) -> Duration {
        self.inner.get_write_pending_time()
    }
}

impl GetProxyDigest for GuardedStream {
    fn get_proxy_digest(&self) -> Option<Arc<pingora::protocols::raw_connect::ProxyDigest>> {
        self.inner.get_proxy_digest()
    }
}

impl GetSocketDigest for GuardedStream {
    fn get_socket_digest(&self) -> Option<Arc<SocketDigest>> {
        self.inner.get_socket_digest()
    }

    fn set_socket_digest(&mut self, socket_digest: SocketDigest) {
        self.inner.set_socket_digest(socket_digest);
    }
}

#[async_trait]
impl Peek for GuardedStream {
    /// Pingora peeks for the HTTP/2 preface; the header deadline bounds the wait.
    async fn try_peek(&mut self, buf: &mut [u8]) -> io::Result<bool> {
        let deadline = self
            .header
            .as_ref()
            .filter(|h| h.armed && matches!(h.phase, Phase::Header))
            .map(|h| h.deadline.deadline());
        let Some(deadline) = deadline else {
            return self.inner.try_peek(buf).await;
        };
        match tokio::time::timeout_at(deadline, self.inner.try_peek(buf)).await {
            Ok(r) => r,
            Err(_) => {
                // A late header gets its 408 like any other (`finish_rejection` writes it).
                if let Some(h) = &mut self.header {
                    h.reject(Rejection::HeaderTimeout);
                }
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "request header timeout",
                ))
            }
        }
    }
}

// === impl Guard ===

/// The guarded frontend: admits the connection, runs the TLS handshake when configured,
/// then serves HTTP through the header guard.
pub struct Guard<A> {
    inner: Arc<A>,
    limits: Limits,
    limit: Arc<ConnectionLimit>,
    counters: Counters,
    tls: Option<HandshakeAcceptor>,
    fast: Option<Arc<FastPath>>,
    proxy_protocol: Option<proxy_protocol::Acceptor>,
}

impl<A> Guard<A> {
    pub fn new(inner: A, limits: Limits, limit: Arc<ConnectionLimit>, counters: Counters) -> Self {
        Guard {
            inner: Arc::new(inner),
            limits,
            limit,
            counters,
            tls: None,
            fast: None,
            proxy_protocol: None,
        }
    }

    /// Requires a PROXY protocol header on every accepted connection, ahead of TLS.
    pub fn with_proxy_protocol(mut self, acceptor: proxy_protocol::Acceptor) -> Self {
        self.proxy_protocol = Some(acceptor);
        self
    }

    /// Serves the HTTP/1 requests it takes through `fast` (see `http_proxy::FastPath`); the
    /// others go to the inner application.
    pub fn with_fast_path(mut self, fast: FastPath) -> Self {
        self.fast = Some(Arc::new(fast));
        self
    }

    /// Runs this TLS handshake on every accepted connection first.
    pub fn with_tls(mut self, tls: HandshakeAcceptor) -> Self {
        self.tls = Some(tls);
        self
    }
}

#[async_trait]
impl<A: HttpServerApp + Send + Sync + 'static> ServerApp for Guard<A> {
    async fn process_new(
        self: &Arc<Self>,
        stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let Some(_admitted) = self.limit.try_admit() else {
            self.counters.limit.inc();
            return None;
        };
        let stream = match &self.proxy_protocol {
            Some(pp) => with_proxied_client(stream, pp).await?,
            None => stream,
        };
        let stream: Stream = match &self.tls {
            Some(tls) => Box::new(tls.accept(GuardedStream::plain(stream)).await?),
            None => stream,
        };
        let mut stream = GuardedStream::guarded(stream, self.limits, self.counters.clone());
        let options = self.inner.server_options();
        let h2 = if stream.get_ssl_digest().is_some() {
            matches!(stream.selected_alpn_proto(), Some(ALPN::H2))
        } else if options.is_some_and(|o| o.h2c) {
            let mut buf = [0u8; H2_PREFACE.len()];
            // A failed peek (timeout, close) has consumed bytes: the connection is done.
            match stream.try_peek(&mut buf).await {
                Ok(full) => full && buf == H2_PREFACE,
                Err(_) => {
                    stream.finish_rejection().await;
                    self.record_guard_rejection(&mut stream, &[]);
                    stream.shutdown().await;
                    return None;
                }
            }
        } else {
            false
        };
        if h2 {
            // Streams go to the fast path first, when it is on.
            http2::serve(self.fast.as_ref(), &self.inner, Box::new(stream), shutdown).await;
            return None;
        }
        // HTTP/1, as Pingora's own loop does it, with the guard re-armed between requests;
        // the fast path, when on, takes each request first.
        let mut stream = Box::new(stream);
        let mut conn = self.fast.as_ref().map(|f| f.connection(&stream));
        let mut watch = shutdown.clone();
        let mut settings: Option<HttpPersistentSettings> = None;
        let mut fresh = true;
        loop {
            if let (Some(fast), Some(conn)) = (&self.fast, &mut conn) {
                match fast.serve(&mut stream, conn, &mut watch).await {
                    Served::Closed => {
                        self.record_guard_rejection(&mut stream, conn.pending());
                        // As Pingora ends a connection: TLS gets its close_notify.
                        stream.shutdown().await;
                        return None;
                    }
                    Served::Declined => {}
                }
                fresh = fresh && conn.is_fresh();
            }
            // Pingora's path: the header is read and checked whole first (see `intake`).
            let refusals = &self.counters.refusals;
            match intake::read_header(&mut stream, fresh, self.limits.keep_alive, &mut watch).await
            {
                Intake::Ready => {}
                Intake::Closed(partial) => {
                    self.record_guard_rejection(&mut stream, &partial);
                    stream.shutdown().await;
                    return None;
                }
                Intake::Refused(r, head) => {
                    refusals.refuse(&mut stream, r, &head).await;
                    return None;
                }
            }
            let mut session = ServerSession::new_http1(stream);
            match settings.take() {
                Some(s) => s.apply_to_session(&mut session),
                None => {
                    session.set_keepalive(if *shutdown.borrow() {
                        None
                    } else {
                        Some(self.limits.keep_alive.as_secs())
                    });
                    session.set_keepalive_reuses_remaining(
                        options.and_then(|o| o.keepalive_request_limit),
                    );
                }
            }
            let result = self.inner.process_new_http(session, shutdown).await?;
            let (reused, next) = result.consume();
            stream = reused.into_any().downcast::<GuardedStream>().ok()?;
            stream.rearm();
            settings = next;
            fresh = false;
            if let Some(conn) = &mut conn {
                FastPath::served_elsewhere(conn);
            }
        }
    }

    async fn cleanup(&self) {
        self.inner.http_cleanup().await;
    }
}

impl<A> Guard<A> {
    /// Records the 408 or 431 the header guard answered on `stream`, if it did (`head`: what
    /// had been read of the header).
    fn record_guard_rejection(&self, stream: &mut GuardedStream, head: &[u8]) {
        if let Some(r) = stream.take_rejection() {
            let started = stream
                .header_started()
                .unwrap_or_else(std::time::Instant::now);
            self.counters.refusals.record(r, started, stream, head);
        }
    }
}

/// Reads the PROXY header at the very start of `stream` and makes its client the stream's peer
/// address (Pingora's `client_addr`, the fast path, the access log and the decision core all
/// read it from the socket digest). `None`: the connection is to be closed (`pp` has counted
/// and logged why).
async fn with_proxied_client(mut stream: Stream, pp: &proxy_protocol::Acceptor) -> Option<Stream> {
    use std::os::unix::io::AsRawFd;
    // Pingora's TCP listener hands over an l4 stream with an inet peer; anything else (a Unix
    // socket) has no address to check or replace, and is closed.
    let digest = stream.get_socket_digest()?;
    let peer = digest.peer_addr().and_then(|a| a.as_inet()).copied()?;
    let client = pp.accept(&mut stream, peer).await?;
    if client != peer {
        // The digest is shared (`Arc`) and its cells are set once, so a new one replaces it,
        // for the same socket and local address.
        let l4 = stream
            .as_any()
            .downcast_ref::<pingora::protocols::l4::stream::Stream>()?;
        let proxied = SocketDigest::from_raw_fd(l4.as_raw_fd());
        let _ = proxied.peer_addr.set(Some(client.into()));
        let _ = proxied.local_addr.set(digest.local_addr().cloned());
        stream.set_socket_digest(proxied);
    }
    Some(stream)
}

// === request checks ===

/// What switchyard refuses beyond Pingora's own parser (which already refuses conflicting
/// `Content-Length`s, a non-chunked final `Transfer-Encoding`, `Transfer-Encoding` on HTTP/1.0,
/// duplicate `Host`s and control bytes): a request carrying both `Content-Length` and
/// `Transfer-Encoding` (Pingora drops the length and forwards; RFC 9112 allows refusing it, and
/// refusing leaves no framing for two parsers to disagree on), an HTTP/1.1 request without
/// `Host`, and a `Host` that is not a host name or address with an optional port (RFC 9112
/// §3.2 asks for 400 in both cases). `raw_header` is the header as received, read only when a
/// `Transfer-Encoding` is present, because Pingora has removed the `Content-Length` by then.
pub fn check_request(
    req: &pingora::http::RequestHeader,
    raw_header: impl FnOnce() -> bytes::Bytes,
) -> Result<(), Rejection> {
    use http::header::{HOST, TRANSFER_ENCODING};
    if req.headers.contains_key(TRANSFER_ENCODING) && has_content_length(&raw_header()) {
        return Err(Rejection::BadFraming);
    }
    let mut hosts = req.headers.get_all(HOST).iter();
    match (hosts.next(), hosts.next()) {
        (_, Some(_)) => Err(Rejection::BadHost),
        (None, None) if req.version == http::Version::HTTP_11 => Err(Rejection::BadHost),
        (None, None) => Ok(()),
        (Some(h), None) if valid_host(h.as_bytes()) => Ok(()),
        (Some(_), None) => Err(Rejection::BadHost),
    }
}

fn has_content_length(raw: &[u8]) -> bool {
    const NAME: &[u8] = b"\ncontent-length";
    raw.windows(NAME.len())
        .any(|w| w.eq_ignore_ascii_case(NAME))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_put_back_go_in_front_of_those_not_read_yet() {
        let b = |s: &'static str| Bytes::from_static(s.as_bytes());
        // A reader took "head+bo" of what the fast path put back, and puts it back: "dy" stays.
        assert_eq!(replayed(b("head+bo"), Some(b("dy"))), Some(b("head+body")));
        assert_eq!(replayed(b("head"), None), Some(b("head")));
        assert_eq!(replayed(b("head"), Some(Bytes::new())), Some(b("head")));
        assert_eq!(replayed(Bytes::new(), Some(b("dy"))), Some(b("dy")));
        assert_eq!(replayed(Bytes::new(), None), None);
    }

    fn end_of(chunks: &[&[u8]]) -> Option<usize> {
        let mut e = HeaderEnd::default();
        let mut total = 0;
        for c in chunks {
            if let Some(n) = e.feed(c) {
                return Some(total + n);
            }
            total += c.len();
        }
        None
    }

    #[test]
    fn header_end_is_found_across_chunks_and_line_endings() {
        assert_eq!(
            end_of(&[b"GET / HTTP/1.1\r\nHost: a\r\n\r\nbody"]),
            Some(27)
        );
        assert_eq!(
            end_of(&[b"GET / HTTP/1.1\r\nHost: a\r", b"\n", b"\r", b"\nx"]),
            Some(27)
        );
        assert_eq!(end_of(&[b"GET / HTTP/1.1\nHost: a\n\nbody"]), Some(24));
        assert_eq!(end_of(&[b"GET / HTTP/1.1\r\nHost: a\r\n"]), None);
        // Blank lines before the request line cannot end the guard early.
        assert_eq!(end_of(&[b"\r\n\r\n\n\n", b"GET"]), None);
        assert_eq!(end_of(&[H2_PREFACE]), Some(18));
    }

    #[test]
    fn requests_with_ambiguous_framing_or_host_are_refused() {
        use pingora::http::RequestHeader;
        let req = |version, headers: &[(&str, &[u8])]| {
            let mut r = RequestHeader::build("GET", b"/", None).unwrap();
            r.set_version(version);
            for (k, v) in headers {
                r.append_header(k.to_string(), *v).unwrap();
            }
            r
        };
        let v11 = http::Version::HTTP_11;
        let raw = |s: &'static str| move || bytes::Bytes::from_static(s.as_bytes());
        let ok = req(v11, &[("host", b"a.test:8080")]);
        assert_eq!(check_request(&ok, raw("")), Ok(()));
        let te = req(v11, &[("host", b"a"), ("transfer-encoding", b"chunked")]);
        assert_eq!(
            check_request(&te, raw("POST / HTTP/1.1\r\nHost: a\r\n")),
            Ok(())
        );
        assert!(check_request(&te, raw("POST / HTTP/1.1\r\nCONTENT-length: 4\r\n")).is_err());
        assert!(check_request(&te, raw("POST / HTTP/1.1\nContent-Length: 4\n")).is_err());
        assert!(check_request(&req(v11, &[]), raw("")).is_err());
        assert_eq!(
            check_request(&req(http::Version::HTTP_10, &[]), raw("")),
            Ok(())
        );
        assert_eq!(
            check_request(&req(http::Version::HTTP_2, &[]), raw("")),
            Ok(())
        );
        for bad in [
            &b"a b"[..],
            b"a/b",
            b"user@a",
            b"a:b:c",
            b"a:",
            b"[::1",
            b"a?b",
            b"a#b",
        ] {
            assert!(
                check_request(&req(v11, &[("host", bad)]), raw("")).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        for good in [
            &b""[..],
            b"a.test",
            b"A.Test.:80",
            b"127.0.0.1:1",
            b"[::1]:8080",
            b"xn--bcher-kva.example",
        ] {
            assert!(valid_host(good), "{}", String::from_utf8_lossy(good));
        }
        let two = req(v11, &[("host", b"a"), ("host", b"b")]);
        assert!(check_request(&two, raw("")).is_err());
    }

    #[test]
    fn the_limit_admits_up_to_max() {
        let limit = ConnectionLimit::new(2);
        let a = limit.try_admit();
        let b = limit.try_admit();
        assert!(a.is_some() && b.is_some());
        assert!(limit.try_admit().is_none());
        drop(a);
        assert_eq!(limit.open(), 1);
        assert!(limit.try_admit().is_some());
    }
}

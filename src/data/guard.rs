//! The guards on a client connection of the HTTP and TLS ports, as a stream type
//! (`GuardedStream`) every engine reads and writes through: the request-header deadline and
//! size limit (`--request-header-timeout`, `--max-request-header-bytes`), and the connection
//! limit (`--max-connections`, `ConnectionLimit`).
//!
//! Pingora reads a request header with a 60 s timeout per read and accepts up to 1 MiB of it,
//! both fixed, so a client trickling one byte a minute holds a connection forever. The guard
//! wraps the accepted stream instead: while a request header is being read it scans the bytes
//! for the blank line that ends it (`HeaderEnd`), and answers 408 (too slow) or 431 (too
//! large) itself, as `decide` says (`Refusals::answer`), then closes; the connection's owner
//! records the refusal (`take_rejection`). Bytes a reader took and did not use are put back
//! (`unread`) for the next. It reads no request and knows nothing of the table or the engines.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use pingora::protocols::tls::{SslDigest, TlsRef};
use pingora::protocols::{
    ALPN, GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, SocketDigest, Ssl,
    Stream, TimingDigest, UniqueID, UniqueIDType,
};
use prometheus::IntCounter;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::data::refusals::Refusals;
use crate::decide::cause::Rejection;
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

/// The first bytes of an HTTP/2 connection (RFC 9113 §3.4).
pub(crate) const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

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
    pub(crate) limit: IntCounter,
    timeout: IntCounter,
    too_large: IntCounter,
    pub(crate) refusals: Arc<Refusals>,
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

    /// The client's address, as the socket digest says (the PROXY header's client on a
    /// `--proxy-protocol` frontend).
    pub fn client(&self) -> Option<SocketAddr> {
        self.get_socket_digest()
            .and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).copied())
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

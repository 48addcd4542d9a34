//! The frontends' connection loop: admits a client connection (`guard::ConnectionLimit`),
//! reads a `--proxy-protocol` frontend's PROXY header (its client replaces the socket's peer
//! in the stream's socket digest, where every consumer reads the client address), relays a
//! TLS connection passed through unterminated (`passthrough`), runs the TLS
//! handshake (here, so that failures are seen and counted: `tls::HandshakeAcceptor`), wraps
//! the stream in its header guard (`guard::GuardedStream`), and hands it to an engine: an
//! HTTP/2 connection to `engine::http2`, HTTP/1 requests to the fast path first and, those it
//! declines, to Pingora's proxy once `intake` has read and checked their header whole. It owns
//! the HTTP/1 keep-alive loop (as Pingora's own `ServerApp` does) so that the header guard is
//! re-armed between requests, once the previous request, body included, is done. Every
//! refusal (the guard's 408 and 431 too) is answered as `decide` says, counted and logged
//! (`refusals::Refusals`). It only dispatches: no routing, no request policy, no table.

use std::sync::Arc;

use async_trait::async_trait;
use pingora::apps::{HttpPersistentSettings, HttpServerApp, ServerApp};
use pingora::protocols::http::ServerSession;
use pingora::protocols::{ALPN, Peek, Shutdown, SocketDigest, Ssl, Stream};
use pingora::server::ShutdownWatch;

use crate::data::engine::fast::FastPath;
use crate::data::engine::h1::Served;
use crate::data::engine::http2;
use crate::data::guard::{ConnectionLimit, Counters, GuardedStream, H2_PREFACE, Limits};
use crate::data::intake::{self, Intake};
use crate::data::passthrough::Passthrough;
use crate::data::tls::HandshakeAcceptor;
use crate::data::wire::proxy_protocol;

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
    passthrough: Option<Passthrough>,
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
            passthrough: None,
        }
    }

    /// Requires a PROXY protocol header on every accepted connection, ahead of TLS.
    pub fn with_proxy_protocol(mut self, acceptor: proxy_protocol::Acceptor) -> Self {
        self.proxy_protocol = Some(acceptor);
        self
    }

    /// Serves the HTTP/1 requests it takes through `fast` (see `engine::h1::FastPath`); the
    /// others go to the inner application.
    pub fn with_fast_path(mut self, fast: FastPath) -> Self {
        self.fast = Some(Arc::new(fast));
        self
    }

    /// Relays the connections whose TLS hello names a host passed through, before any
    /// handshake (`data::passthrough`).
    pub fn with_passthrough(mut self, passthrough: Passthrough) -> Self {
        self.passthrough = Some(passthrough);
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
        let (stream, asked) = match &self.passthrough {
            Some(p) => p.take(stream).await?,
            None => (stream, None),
        };
        let stream: Stream = match &self.tls {
            Some(tls) => Box::new(
                tls.accept(GuardedStream::plain(stream), asked.as_deref())
                    .await?,
            ),
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
                    intake::refuse(refusals, &mut stream, r, &head).await;
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
            self.counters
                .refusals
                .record(r, started, stream.client(), head);
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

//! The exchange's HTTP/1 upstream: one try with an `http`/`https` backend over the fast path's
//! own pool of HTTP/1.1 connections (`upstream::pool`; over TLS made by its own handshake, with
//! the bundle, client certificate, verification and session resumption `tls::BackendTls`
//! decides, as for Pingora's connector), and the relay of its response, framing checked
//! (`wire::h1::response`, `chunked`), to a front that takes HTTP/1 response bytes (`H1Client`:
//! the HTTP/1 connection itself, or an HTTP/2 stream that turns them into frames). It carries
//! requests without a body only (`GET`, `HEAD`); which try goes where, and what a failure
//! means, is the driver's (`data::exchange`) and `decide`'s. It never holds a lock across an
//! await.

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Buf;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::data::engine::fast::{Connection, Downstream, FastPath, READ_SIZE, write_client};
use crate::data::exchange::{Front, Tally, TryFailed, Upstream};
use crate::data::tls::TlsChoice;
use crate::data::upstream::pool::{Key, TlsUpstream, Upstream as Conn};
use crate::data::wire::h1::chunked::{ChunkError, Chunks};
use crate::data::wire::h1::response::{
    Framing, Head, MAX_RESPONSE_HEAD, ResponseHead, response_head,
};
use crate::decide::attempt::{Attempt, BodyKept, Sent};
use crate::decide::cause::Cause;
use crate::decide::edits::{Edits, response_edits};
use crate::decide::exchange::Opened;
use crate::ops::metrics::Resumed;
use crate::table::matcher::Strip;

/// A front whose response an HTTP/1 backend's bytes become: the HTTP/1 client connection, or
/// an HTTP/2 stream, which turns the same bytes into frames (`h2::Frames`).
pub(crate) trait H1Client: Front {
    type Down: Downstream;

    /// The front's buffers and where the response bytes go, borrowed apart.
    fn parts(&mut self) -> (&mut Connection, &mut Self::Down);

    /// A `HEAD` request: its response has no body.
    fn head_request(&self) -> bool;

    /// The client connection ends after this response (`Connection: close` goes with it).
    fn closing(&self) -> bool;

    /// Its request has no body, and a method this upstream carries (`GET`, `HEAD`).
    fn bodiless(&self) -> bool;

    /// Writes the request the backend gets into the connection's `out`: the target rewritten
    /// by `strip`, `edits` carried out. False when it cannot be written as this path writes
    /// HTTP/1 requests (the exchange is declined).
    fn write_request(&mut self, strip: Option<&Strip>, edits: &Edits<'_>) -> bool;
}

/// The HTTP/1 upstream of a fast path.
pub(crate) struct Http1<'f>(pub(crate) &'f FastPath);

impl<F: H1Client> Upstream<F> for Http1<'_> {
    type Call = ();
    /// The backend connection, its pool key, the response header, and whether an
    /// informational response went to the client before it.
    type Answered = (Conn, Key, ResponseHead, bool);

    fn takes(&self, front: &F, attempt: &Attempt) -> bool {
        // HTTP/2 to backends (h2c, h2, gRPC) is the relay's; a Gateway rule's filters are
        // carried out by Pingora's engine alone (one place applies them; this path stays lean).
        !attempt.backend_protocol().http2() && !attempt.rewrites() && front.bodiless()
    }

    fn prepare(
        &self,
        front: &mut F,
        attempt: &Attempt,
        _opened: &Opened,
        strip: Option<&Strip>,
        edits: &Edits<'_>,
        _started: Instant,
    ) -> Option<()> {
        if !front.write_request(strip, edits) {
            return None;
        }
        front.parts().0.server_timeout = attempt.server_timeout(self.0.proxy.timeouts.server_idle);
        Some(())
    }

    async fn try_once(
        &self,
        front: &mut F,
        _call: &mut Self::Call,
        attempt: &mut Attempt,
        addr: SocketAddr,
        tls: Option<(&TlsChoice, &str)>,
    ) -> Result<Self::Answered, TryFailed> {
        let fast = self.0;
        let (head_only, close) = (front.head_request(), front.closing());
        let (conn, stream) = front.parts();
        let (key, sni) = match tls {
            None => (Key::plain(addr), ""),
            Some((choice, sni)) => (Key::tls(addr, choice.key(), sni), sni),
        };
        let idle = fast.proxy.timeouts.server_idle;
        let (mut up, reused) = match fast.pool.take(&key, sni, idle) {
            Some(up) => (up, true),
            None => {
                let up = fast.connect(addr, tls, attempt).await;
                (up.map_err(TryFailed::unsent)?, false)
            }
        };
        attempt.connected(reused, Instant::now());
        conn.upstream_buf.clear();
        attempt.request_sent(Instant::now());
        // This upstream carries only `GET` and `HEAD`, without a body.
        let sent = |answered| Sent {
            idempotent: true,
            unprocessed: false,
            body: BodyKept::All,
            answered,
        };
        let send_timeout = attempt.send_timeout(fast.proxy.timeouts.server_idle);
        if let Err(cause) = fast.send(&mut up, &conn.out, send_timeout).await {
            return Err(TryFailed {
                cause,
                sent: sent(false),
            });
        }
        let edits = response_edits(&fast.proxy.fwd, attempt.set_cookie());
        match fast
            .read_response(&mut up, stream, conn, head_only, &edits, close)
            .await
        {
            Ok((resp, informed)) => Ok((up, key, resp, informed)),
            Err(x) => Err(TryFailed {
                cause: x.cause,
                sent: sent(x.informed),
            }),
        }
    }

    async fn relay(
        &self,
        front: &mut F,
        _call: &mut Self::Call,
        (mut up, key, resp, _): Self::Answered,
        _attempt: &mut Attempt,
        tally: &mut Tally,
    ) -> Result<bool, Cause> {
        let fast = self.0;
        // The response: its header is in `conn.head`, what followed it in `upstream_buf`;
        // the request in `out` is no longer needed.
        tally.status = resp.status;
        tally.upstream_status = Some(resp.status);
        let (conn, stream) = front.parts();
        std::mem::swap(&mut conn.out, &mut conn.head);
        match fast.relay_body(&mut up, stream, conn, resp.framing).await {
            Ok(body) => {
                tally.bytes_out = body.bytes;
                if resp.reusable && body.clean {
                    fast.pool.put(key, up, fast.proxy.timeouts.server_idle);
                }
                Ok(true)
            }
            Err(e) => {
                tally.bytes_out = e.bytes;
                Err(e.cause)
            }
        }
    }

    fn status(&self, (_, _, resp, _): &Self::Answered) -> u16 {
        resp.status
    }

    fn sent(&self, _call: &Self::Call, (_, _, _, informed): &Self::Answered) -> Sent {
        // This upstream carries only `GET` and `HEAD`, without a body.
        Sent {
            idempotent: true,
            unprocessed: false,
            body: BodyKept::All,
            answered: *informed,
        }
    }

    /// The backend connection is closed (its response is not read to its end); `out` still
    /// holds the request for the next try.
    fn discard(&self, _call: &mut Self::Call, answered: Self::Answered) {
        drop(answered);
    }

    // A response cut short ends the client connection: nothing more to write.
    fn broken(&self, _front: &mut F, _call: &mut Self::Call, _cause: Cause, _tally: &mut Tally) {}
}

/// Why a try failed before its response header was complete.
#[derive(Debug, Clone, Copy)]
struct Unanswered {
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

impl FastPath {
    /// Opens a connection to `addr`: TCP, then over TLS the handshake with `tls`'s choice and
    /// server name, each within the route's connect timeout (5 s, or its
    /// Ingress's `proxy-connect-timeout`), as Pingora's connector bounds each.
    pub(super) async fn connect(
        &self,
        addr: SocketAddr,
        tls: Option<(&TlsChoice, &str)>,
        attempt: &Attempt,
    ) -> Result<Conn, Cause> {
        let timeout = attempt.connect_timeout(self.proxy.timeouts.connect);
        let tcp = self.connect_tcp(addr, timeout).await?;
        match tls {
            None => Ok(Conn::Plain(tcp)),
            Some((choice, sni)) => self.handshake(tcp, choice, sni, attempt, timeout).await,
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
        timeout: std::time::Duration,
    ) -> Result<Conn, Cause> {
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
        match tokio::time::timeout(timeout, handshake).await {
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
                Ok(Conn::Tls(Box::new(TlsUpstream {
                    stream,
                    sni: sni.into(),
                })))
            }
        }
    }

    async fn connect_tcp(
        &self,
        addr: SocketAddr,
        timeout: std::time::Duration,
    ) -> Result<TcpStream, Cause> {
        let up = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
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
        up: &mut Conn,
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
    async fn read_upstream(&self, up: &mut Conn, conn: &mut Connection) -> Result<usize, Cause> {
        conn.upstream_buf.reserve(READ_SIZE);
        match tokio::time::timeout(conn.server_timeout, up.read_buf(&mut conn.upstream_buf)).await {
            Ok(Ok(n)) => Ok(n),
            Ok(Err(_)) => Err(Cause::UpstreamClosed),
            Err(_) => Err(Cause::UpstreamTimedOut),
        }
    }

    /// Reads the response header and writes the client's version of it into `conn.head`
    /// (`conn.out` keeps the request); says whether an informational response (1xx but 101)
    /// went to the client, as they do when they come.
    async fn read_response<D: Downstream>(
        &self,
        up: &mut Conn,
        stream: &mut D,
        conn: &mut Connection,
        head_request: bool,
        edits: &Edits<'_>,
        close: bool,
    ) -> Result<(ResponseHead, bool), Unanswered> {
        let mut informed = false;
        loop {
            if !conn.upstream_buf.is_empty() {
                conn.head.clear();
                let invalid = Unanswered {
                    cause: Cause::InvalidResponse,
                    informed,
                };
                match response_head(
                    &conn.upstream_buf,
                    head_request,
                    close,
                    edits,
                    &mut conn.head,
                ) {
                    Head::Partial if conn.upstream_buf.len() > MAX_RESPONSE_HEAD => {
                        return Err(invalid);
                    }
                    Head::Partial => {}
                    Head::Invalid => return Err(invalid),
                    Head::Informational(len) => {
                        let info = conn.upstream_buf.split_to(len);
                        if !write_client(stream, &info, self.proxy.timeouts.client_idle).await {
                            return Err(Unanswered {
                                cause: Cause::ClientGone,
                                informed: true,
                            });
                        }
                        informed = true;
                        continue;
                    }
                    Head::Final(resp) => {
                        conn.upstream_buf.advance(resp.len);
                        return Ok((resp, informed));
                    }
                }
            }
            match self.read_upstream(up, conn).await {
                Ok(0) => {
                    return Err(Unanswered {
                        cause: Cause::UpstreamClosed,
                        informed,
                    });
                }
                Ok(_) => {}
                Err(cause) => return Err(Unanswered { cause, informed }),
            }
        }
    }

    /// Writes the response header in `conn.out` and the body after it, as the backend sends
    /// it; says how many body bytes went out and whether the backend connection ended
    /// exactly at the end of the response.
    async fn relay_body<D: Downstream>(
        &self,
        up: &mut Conn,
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
                        let _ =
                            write_client(stream, &conn.out, self.proxy.timeouts.client_idle).await;
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
        if !write_client(stream, &conn.out, self.proxy.timeouts.client_idle).await {
            return Err(Relay {
                bytes,
                cause: Cause::ClientGone,
            });
        }
        conn.out.clear();
        Ok(())
    }
}

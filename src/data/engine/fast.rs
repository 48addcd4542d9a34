//! The fast path of one frontend (`FastPath`: its context, its HTTP/1 and HTTP/2 upstream
//! pools) and what its fronts (`h1`, `h2`) and upstreams (`h1_upstream`, `relay`) share: the
//! per-connection state (`Connection`: the client's addresses and the buffers reused by every
//! request on it) and where response bytes go (`Downstream`). It decides nothing and does no
//! I/O of its own beyond a bounded write to the client.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use bytes::BytesMut;
use pingora::protocols::tls::SslDigest;
use pingora::protocols::{GetSocketDigest, SocketDigest, Ssl};
use tokio::io::AsyncWriteExt;

use crate::data::frontend::HttpProxy;
use crate::data::guard::GuardedStream;
use crate::data::upstream::h2_pool::H2Pool;
use crate::data::upstream::pool::Pool;
use crate::data::wire::h1::request::Field;
use crate::decide::edits::ip_text;

/// Room made in a read buffer before each read.
pub(super) const READ_SIZE: usize = 16 * 1024;

/// The fast path of one frontend.
pub struct FastPath {
    pub(super) proxy: HttpProxy,
    pub(super) pool: Arc<Pool>,
    /// HTTP/2 connections to `h2c`/`grpc` endpoints (`relay`).
    pub(super) h2_pool: Arc<H2Pool>,
}

/// Per client connection: buffers reused by every request on it.
pub struct Connection {
    pub(super) client: Option<SocketAddr>,
    pub(super) client_ip: Option<IpAddr>,
    /// The address the client connected to, read when routes pick by it
    /// (`HttpProxy::reads_local`).
    pub(super) local: Option<SocketAddr>,
    /// `client_ip` as text, formatted once for the forwarding fields of every request.
    pub(super) client_ip_text: Option<Arc<str>>,
    /// No request has been served yet (the header deadline, not the keep-alive timeout,
    /// bounds the wait for the first).
    pub(super) fresh: bool,
    /// Bytes read from the client and not used yet.
    pub(super) buf: BytesMut,
    /// Bytes read from the backend and not forwarded yet.
    pub(super) upstream_buf: BytesMut,
    /// What is written next, to the backend or to the client.
    pub(super) out: Vec<u8>,
    /// The backend's response header as the client gets it, until the relay writes it:
    /// `out` keeps the request meanwhile, for another endpoint to be sent it.
    pub(super) head: Vec<u8>,
    /// The header lines of the current request.
    pub(super) fields: Vec<Field>,
    /// The connection's TLS digest (its verified client certificate, for the request edits).
    pub(super) ssl: Option<Arc<SslDigest>>,
    /// The current request's wait for its endpoint (`--server-timeout`, or its route's).
    pub(super) server_timeout: std::time::Duration,
}

impl Connection {
    /// Gives back the buffers of a connection gone idle (nothing pending: `buf` is empty);
    /// the next request grows them again.
    pub(super) fn release(&mut self) {
        debug_assert!(self.buf.is_empty());
        self.buf = BytesMut::new();
        self.upstream_buf = BytesMut::new();
        self.out = Vec::new();
        self.head = Vec::new();
        self.fields = Vec::new();
    }

    /// The bytes of heap this connection's buffers hold (their capacities).
    #[cfg(test)]
    pub(super) fn buffered(&self) -> usize {
        self.buf.capacity()
            + self.upstream_buf.capacity()
            + self.out.capacity()
            + self.head.capacity()
            + self.fields.capacity() * std::mem::size_of::<Field>()
    }

    /// The client's address, and the address it connected to when routes pick by it (the
    /// exchange's `Front::addresses`, for either front).
    pub(super) fn addresses(&self) -> (Option<IpAddr>, Option<SocketAddr>) {
        (self.client_ip, self.local)
    }

    /// What backends may hear of the client (the exchange's `Front::identity`).
    pub(super) fn identity(&self) -> (Option<Arc<str>>, Option<Arc<SslDigest>>) {
        (self.client_ip_text.clone(), self.ssl.clone())
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
        let mut conn = self.connection_of(
            stream.get_socket_digest().as_deref(),
            stream.get_ssl_digest(),
        );
        conn.out.reserve(1024);
        conn
    }

    /// The state of a client connection with these digests (an HTTP/2 stream gets its own).
    pub(super) fn connection_of(
        &self,
        socket: Option<&SocketDigest>,
        ssl: Option<Arc<SslDigest>>,
    ) -> Connection {
        let client = socket.and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).copied());
        let local = socket
            .filter(|_| self.proxy.reads_local())
            .and_then(|d| d.local_addr().and_then(|a| a.as_inet()).copied());
        Connection {
            client,
            client_ip: client.map(|a| a.ip()),
            local,
            client_ip_text: client.map(|a| Arc::from(ip_text(a.ip()))),
            fresh: true,
            // Both grow at their first read (`reserve(READ_SIZE)`), not before.
            buf: BytesMut::new(),
            upstream_buf: BytesMut::new(),
            out: Vec::new(),
            head: Vec::new(),
            fields: Vec::new(),
            ssl,
            server_timeout: self.proxy.timeouts.server_idle,
        }
    }
}

/// Writes `bytes` to the client within `timeout` (the client timeout); false when it failed.
pub(super) async fn write_client<D: Downstream>(
    stream: &mut D,
    bytes: &[u8],
    timeout: std::time::Duration,
) -> bool {
    matches!(
        tokio::time::timeout(timeout, stream.send(bytes)).await,
        Ok(true)
    )
}

/// Where the fast path's response goes: the HTTP/1 client connection, or one HTTP/2 stream
/// (`h2::Frames`), which takes the same HTTP/1 bytes and sends them as HTTP/2 frames. Either
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

//! The streams of the fast path's own HTTP/2 server connection (`data::engine::http2`) that the fast
//! path does not serve, carried to Pingora's proxy as they came: over an HTTP/2 connection
//! inside the process (a pipe, `tokio::io::duplex`), which Pingora's own connection loop
//! serves as it serves a client's, through `InProcess`, an I/O type that reports the client
//! connection's address, TLS and PROXY protocol digests as its own. So Pingora sees the
//! client's request, address and certificate, and answers, logs and counts it as before; this
//! side only moves frames: the request's header as it came, its body and trailers, the
//! response's header, body and trailers, resets both ways, each direction as fast as the
//! other end takes it (flow control end to end). The connection is made with the first such
//! stream of a client connection and ends with it. Nothing here looks at a request.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use h2::Reason;
use pingora::http::RequestHeader;
use pingora::protocols::raw_connect::ProxyDigest;
use pingora::protocols::tls::SslDigest;
use pingora::protocols::{
    ALPN, Digest, GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, SocketDigest,
    Ssl, TimingDigest, UniqueID, UniqueIDType,
};
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};

use crate::data::engine::client_stream::ClientStream;
use crate::data::wire::h2::conn::{self, Error, RequestBlock, SendRequest, Stream};

/// The pipe's buffer each way, and the windows this side opens to Pingora's answers.
const PIPE: usize = 256 * 1024;
const WINDOW: u32 = 1 << 20;

/// One client connection's way to Pingora (see the module).
pub struct Bridge {
    send: OnceLock<SendRequest>,
    /// Serves Pingora's end of a new pipe (its connection loop, on a task of its own).
    start: Box<dyn Fn(InProcess) + Send + Sync>,
    digest: Arc<Digest>,
    id: UniqueIDType,
}

impl Bridge {
    /// A bridge for the client connection with `digest` and `id`; `start` serves Pingora's
    /// end of the pipe when the first stream comes.
    pub fn new(
        digest: Arc<Digest>,
        id: UniqueIDType,
        start: impl Fn(InProcess) + Send + Sync + 'static,
    ) -> Bridge {
        Bridge {
            send: OnceLock::new(),
            start: Box::new(start),
            digest,
            id,
        }
    }

    fn connection(&self) -> &SendRequest {
        self.send.get_or_init(|| {
            let (ours, theirs) = tokio::io::duplex(PIPE);
            (self.start)(InProcess {
                io: theirs,
                digest: Arc::clone(&self.digest),
                id: self.id,
            });
            let (send, conn) = conn::handshake(ours, WINDOW, WINDOW);
            tokio::spawn(conn.run());
            send
        })
    }

    /// Carries one stream to Pingora and its answer back, until both are done or either end
    /// resets it.
    pub async fn carry(&self, client: ClientStream) {
        let (header, client) = client.into_parts();
        let block = verbatim(&header, self.digest.ssl_digest.is_some());
        drop(header);
        let end = client.is_end_stream();
        let Ok(upstream) = self.connection().send_request(&block, end).await else {
            // Not processed: the client may send it again (RFC 9113 §8.7).
            client.send_reset(Reason::REFUSED_STREAM);
            return;
        };
        let response = forward_response(&client, &upstream);
        if end {
            response.await;
            return;
        }
        // The request's rest goes on while the response comes; the response's end ends both
        // (what is left of the request is not wanted: dropping the streams resets it).
        let request = async {
            let _ = forward_request(&client, &upstream).await;
            std::future::pending::<()>().await;
        };
        tokio::select! {
            () = response => {}
            () = request => {}
        }
    }
}

impl Drop for Bridge {
    /// The client connection is over: so is the one to Pingora, once its streams are done.
    fn drop(&mut self) {
        if let Some(send) = self.send.get() {
            send.close();
        }
    }
}

/// The request's header block as the client sent it. A request without `:authority` (its
/// host in `host`) had its scheme dropped by `http`: the connection's says it.
fn verbatim(header: &RequestHeader, tls: bool) -> RequestBlock {
    let uri = &header.uri;
    let authority = uri.authority().map(|a| a.as_str().as_bytes());
    let mut block = if header.method == http::Method::CONNECT {
        RequestBlock::connect(authority.unwrap_or_default())
    } else {
        let scheme = uri
            .scheme_str()
            .unwrap_or(if tls { "https" } else { "http" });
        let path = uri.path_and_query().map_or("/", |pq| pq.as_str());
        RequestBlock::new(
            header.method.as_str().as_bytes(),
            scheme.as_bytes(),
            path.as_bytes(),
            authority,
        )
    };
    for (name, value) in header.headers.iter() {
        block.field(
            name.as_str().as_bytes(),
            value.as_bytes(),
            value.is_sensitive(),
        );
    }
    block
}

/// The client's body and trailers to Pingora, as Pingora takes them; `Err` once either side
/// failed (the other is then reset).
async fn forward_request(client: &Stream, upstream: &Stream) -> Result<(), ()> {
    loop {
        match client.data().await {
            Some(Ok(data)) => {
                let n = data.len();
                upstream.send_data(data, false).await.map_err(drop)?;
                // Passed on: the client may send as much more.
                client.release_capacity(n);
            }
            Some(Err(_)) => {
                upstream.send_reset(Reason::CANCEL);
                return Err(());
            }
            None => break,
        }
    }
    match client.trailers().await {
        Ok(Some(trailers)) => upstream.send_trailers(&trailers).map_err(drop),
        Ok(None) => upstream.send_end().map_err(drop),
        Err(_) => {
            upstream.send_reset(Reason::CANCEL);
            Err(())
        }
    }
}

/// Pingora's answer to the client: header, body as the client takes it, trailers or end.
async fn forward_response(client: &Stream, upstream: &Stream) {
    let head = match upstream.response().await {
        Ok(head) => head,
        Err(e) => return client.send_reset(passed_on(e)),
    };
    let end = upstream.is_end_stream();
    if client.send_response(&head, end).is_err() {
        return upstream.send_reset(Reason::CANCEL);
    }
    if end {
        return;
    }
    loop {
        match upstream.data().await {
            Some(Ok(data)) => {
                let n = data.len();
                if client.send_data(data, false).await.is_err() {
                    return upstream.send_reset(Reason::CANCEL);
                }
                upstream.release_capacity(n);
            }
            Some(Err(e)) => return client.send_reset(passed_on(e)),
            None => break,
        }
    }
    let ended = match upstream.trailers().await {
        Ok(Some(trailers)) => client.send_trailers(&trailers),
        Ok(None) => client.send_end(),
        Err(e) => return client.send_reset(passed_on(e)),
    };
    if ended.is_err() {
        upstream.send_reset(Reason::CANCEL);
    }
}

/// The reset the client gets when Pingora's side of its stream fails: Pingora's own reason
/// when it reset the stream, else `INTERNAL_ERROR`.
fn passed_on(e: Error) -> Reason {
    match e {
        Error::Reset {
            reason,
            remote: true,
        } => reason,
        _ => Reason::INTERNAL_ERROR,
    }
}

/// Pingora's end of the pipe: the client connection's digests as its own.
pub struct InProcess {
    io: DuplexStream,
    digest: Arc<Digest>,
    id: UniqueIDType,
}

impl fmt::Debug for InProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InProcess").field("id", &self.id).finish()
    }
}

impl AsyncRead for InProcess {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for InProcess {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[async_trait]
impl Shutdown for InProcess {
    async fn shutdown(&mut self) {
        let _ = tokio::io::AsyncWriteExt::shutdown(&mut self.io).await;
    }
}

impl UniqueID for InProcess {
    fn id(&self) -> UniqueIDType {
        self.id
    }
}

impl Ssl for InProcess {
    fn get_ssl_digest(&self) -> Option<Arc<SslDigest>> {
        self.digest.ssl_digest.clone()
    }

    fn selected_alpn_proto(&self) -> Option<ALPN> {
        self.digest.ssl_digest.as_ref().map(|_| ALPN::H2)
    }
}

impl GetTimingDigest for InProcess {
    fn get_timing_digest(&self) -> Vec<Option<TimingDigest>> {
        self.digest.timing_digest.clone()
    }

    fn get_read_pending_time(&self) -> Duration {
        Duration::ZERO
    }
}

impl GetProxyDigest for InProcess {
    fn get_proxy_digest(&self) -> Option<Arc<ProxyDigest>> {
        self.digest.proxy_digest.clone()
    }
}

impl GetSocketDigest for InProcess {
    fn get_socket_digest(&self) -> Option<Arc<SocketDigest>> {
        self.digest.socket_digest.clone()
    }
}

#[async_trait]
impl Peek for InProcess {}

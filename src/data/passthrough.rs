//! TLS passthrough on the TLS port (ingress-nginx's `ssl-passthrough`): before the handshake,
//! the client's hello is peeked at (never consumed) and its server name read by rustls's own
//! parser (`rustls::server::Acceptor`, no home-made one); a name the table passes through
//! (`table::passthrough`) has its connection relayed whole — hello included — to an endpoint
//! the decision core picks, as a TCP frontend's are; any other connection goes on to the
//! handshake untouched — with, when the name belongs to a Gateway listener that verifies
//! client certificates, that listener's validation for the handshake to ask for. Only looked
//! at while the table passes some host through or has such a listener, so the TLS port pays
//! nothing otherwise. It must not terminate TLS or read anything past the hello.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pingora::protocols::Stream;
use prometheus::IntCounter;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::data::frontend::HttpProxy;
use crate::decide::attempt::{Attempt, Failure, Route};
use crate::decide::cause::Cause;
use crate::ops::metrics::Metrics;
use crate::table::client_validation::ClientValidation;

/// A TLS record's header: type, version, length.
const RECORD_HEADER: usize = 5;

/// The longest hello record read (a record holds at most 16 KiB, plus its expansion).
const MAX_RECORD: usize = (16 << 10) + 256;

/// What the relay reads at once, each way.
const CHUNK: usize = 16 << 10;

/// What the handshake after the hello asks of the client: the client validation of the Gateway
/// listener the server name belongs to (`None`: the TLS port's own).
pub type Asked = Option<Arc<ClientValidation>>;

/// The TLS port's passthrough: the table, how endpoints are picked and waited for, and the
/// connections counted by result (`switchyard_passthrough_connections_total`).
pub struct Passthrough {
    proxy: HttpProxy,
    /// How long a client may take to send its hello.
    hello_timeout: Duration,
    relayed: IntCounter,
    unavailable: IntCounter,
    failed: IntCounter,
}

impl Passthrough {
    pub fn new(proxy: HttpProxy, metrics: &Metrics, hello_timeout: Duration) -> Passthrough {
        Passthrough {
            proxy,
            hello_timeout,
            relayed: metrics.data.passthrough_connections("relayed"),
            unavailable: metrics.data.passthrough_connections("unavailable"),
            failed: metrics.data.passthrough_connections("failed"),
        }
    }

    /// Relays `stream` if its hello names a host passed through (`None`: done with it, relayed
    /// or closed); else hands it back for the handshake, with the client validation of the
    /// Gateway listener its server name belongs to, if that listener verifies clients.
    pub async fn take(&self, mut stream: Stream) -> Option<(Stream, Asked)> {
        let table = self.proxy.table.load();
        // Passed through on switchyard's own TLS port alone, not on a listener's own port.
        let some_passed = !table.passthrough.is_empty() || !table.streams.passthrough.is_empty();
        let passes = some_passed && !self.proxy.by_local_port;
        if !passes && table.client_validation.is_empty() {
            return Some((stream, None));
        }
        let name = match tokio::time::timeout(self.hello_timeout, server_name(&mut stream)).await {
            Ok(Ok(name)) => name,
            // The hello never came whole (its bytes read so far are lost): the handshake
            // would fail the same way.
            _ => return None,
        };
        let digest = stream.get_socket_digest();
        let peer = digest
            .as_ref()
            .and_then(|d| d.peer_addr().and_then(|a| a.as_inet().copied()));
        let local_addr = digest
            .as_ref()
            .and_then(|d| d.local_addr().and_then(|a| a.as_inet().copied()));
        let local = local_addr.map(|a| a.ip().to_canonical());
        let port = local_addr
            .filter(|_| self.proxy.by_local_port)
            .map(|a| a.port());
        // No server name: the listener without a hostname, if one verifies clients.
        let asked = table
            .client_validation((local, port), name.as_deref().map(str::as_bytes))
            .cloned();
        let Some(name) = name.filter(|_| passes) else {
            return Some((stream, asked));
        };
        let mut attempt = Attempt::new(peer.map(|a| a.ip()));
        let policy = &self.proxy.policy;
        match attempt.route_passthrough(table, &name, local, policy, Instant::now()) {
            Ok(Route::Proxy { .. }) => {}
            Ok(Route::NotFound) => return Some((stream, asked)),
            _ => {
                self.unavailable.inc();
                return None;
            }
        }
        let timeouts = &self.proxy.timeouts;
        loop {
            let Some(addr) = attempt.next(Instant::now()) else {
                self.unavailable.inc();
                return None;
            };
            let cause = match tokio::time::timeout(timeouts.connect, TcpStream::connect(addr)).await
            {
                Ok(Ok(upstream)) => {
                    attempt.connected(false, Instant::now());
                    let _ = upstream.set_nodelay(true);
                    self.relayed.inc();
                    let (from_client, to_client) = relay(stream, upstream, timeouts.tunnel).await;
                    if let Some(t) = attempt.totals() {
                        t.bytes_in.fetch_add(from_client, Ordering::Relaxed);
                        t.bytes_out.fetch_add(to_client, Ordering::Relaxed);
                    }
                    tracing::debug!(%name, endpoint = %addr, from_client, to_client, "passthrough connection ended");
                    attempt.finish();
                    return None;
                }
                Err(_) => Cause::ConnectTimedOut,
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    Cause::ConnectRefused
                }
                Ok(Err(_)) => Cause::ConnectFailed,
            };
            tracing::debug!(%name, endpoint = %addr, %cause, "passthrough connect failed");
            let failure = Failure {
                cause,
                replayable: true,
            };
            if !attempt.failed(failure, policy, Instant::now()).retry {
                self.failed.inc();
                return None;
            }
        }
    }
}

/// The server name of the client hello at the head of `stream`, peeked (the stream still
/// starts with it); `None` when the stream does not start with a hello rustls reads whole
/// from its first record, or names no server.
async fn server_name(stream: &mut Stream) -> std::io::Result<Option<String>> {
    let mut head = [0u8; RECORD_HEADER];
    if !stream.try_peek(&mut head).await? {
        return Ok(None);
    }
    // A handshake record.
    if head[0] != 0x16 {
        return Ok(None);
    }
    let len = usize::from(u16::from_be_bytes([head[3], head[4]]));
    if len > MAX_RECORD {
        return Ok(None);
    }
    let mut record = vec![0u8; RECORD_HEADER + len];
    if !stream.try_peek(&mut record).await? {
        return Ok(None);
    }
    Ok(hello_server_name(&record))
}

/// Reads the TLS record at the head of `stream` (consumed: the caller sends it on first) and
/// the server name of the client hello it holds (`None`: not a hello rustls reads whole from
/// its first record, or one that names no server). For sockets of switchyard's own (a
/// Gateway TLS listener's port), where nothing else reads the stream.
pub async fn read_hello<R>(stream: &mut R) -> std::io::Result<(Vec<u8>, Option<String>)>
where
    R: AsyncRead + Unpin,
{
    let mut record = vec![0u8; RECORD_HEADER];
    stream.read_exact(&mut record).await?;
    let len = usize::from(u16::from_be_bytes([record[3], record[4]]));
    if record[0] != 0x16 || len > MAX_RECORD {
        return Ok((record, None));
    }
    record.resize(RECORD_HEADER + len, 0);
    stream.read_exact(&mut record[RECORD_HEADER..]).await?;
    let name = hello_server_name(&record);
    Ok((record, name))
}

/// The server name a record holding a client hello names, read by rustls.
pub fn hello_server_name(record: &[u8]) -> Option<String> {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut bytes = record;
    acceptor.read_tls(&mut bytes).ok()?;
    let accepted = acceptor.accept().ok()??;
    accepted
        .client_hello()
        .server_name()
        .map(str::to_ascii_lowercase)
}

/// Copies bytes both ways until both sides have ended theirs, or nothing moved either way for
/// `idle`; each end is passed on as a half-close. The bytes from and to the client.
async fn relay<C>(client: C, upstream: TcpStream, idle: Duration) -> (u64, u64)
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let started = Instant::now();
    let last = Arc::new(AtomicU64::new(0));
    let (client_r, client_w) = tokio::io::split(client);
    let (up_r, up_w) = upstream.into_split();
    tokio::join!(
        pump(client_r, up_w, &last, started, idle),
        pump(up_r, client_w, &last, started, idle),
    )
}

async fn pump<R, W>(mut r: R, mut w: W, last: &AtomicU64, started: Instant, idle: Duration) -> u64
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0u64;
    let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    loop {
        match tokio::time::timeout(idle, r.read(&mut buf)).await {
            // Quiet this way: the connection is idle only if the other way is too.
            Err(_) => {
                let quiet = millis(started.elapsed()).saturating_sub(last.load(Ordering::Relaxed));
                if quiet >= millis(idle) {
                    break;
                }
            }
            Ok(Ok(0) | Err(_)) => break,
            Ok(Ok(n)) => {
                // Pingora's stream buffers writes: each read is passed on at once.
                if w.write_all(&buf[..n]).await.is_err() || w.flush().await.is_err() {
                    break;
                }
                total += n as u64;
                last.store(millis(started.elapsed()), Ordering::Relaxed);
            }
        }
    }
    let _ = w.shutdown().await;
    total
}

//! Raw TCP frontends (`--tcp-services`, and Gateway TCP and TLS listeners): a listener per
//! port (per Gateway address) that the table lists, opened and
//! closed at runtime as tables are swapped, forwarding bytes to an endpoint chosen the way the
//! HTTP data plane chooses one (`Entry::choose`: the entry's algorithm, health, client-IP
//! affinity, passive marks, in-flight counting).
//!
//! The shared reconciler (`ports`) polls the table (the table module stays free of tokio) and
//! makes the set of open listeners match it. Every accepted connection is a task of its own (without work
//! stealing, placed on one of the service's threads at random) that keeps the endpoint it
//! connected to: neither a table swap nor its listener closing cuts it; only its peers or the
//! idle (tunnel) timeout end it. Metrics and the access log are recorded once per connection,
//! when it closes. On a `--proxy-protocol` port the PROXY header is read first and
//! its client is the connection's client from then on; an entry with `send_proxy` tells its
//! endpoint that client in a PROXY v2 header. A Gateway TLS listener's connection is routed by
//! its hello's server name, then relayed whole (Passthrough) or terminated first with the
//! listener's certificates (Terminate: the hello read again by the handshake, `Rewind`). This module must not know about Kubernetes or
//! translation, and reads the table only through `TableReader`.

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::data::Timeouts;
use crate::data::engine::ports::{At, Ports, reconcile, socket_addr};
use crate::data::passthrough::read_hello;
use crate::data::tls::Terminators;
use crate::data::wire::proxy_protocol;
use crate::decide::attempt::{Attempt, Failure, Policy, Route};
use crate::decide::cause::Cause;
use crate::ops::access_log::{AccessLog, TcpRecord};
use crate::ops::lifecycle::Lifecycle;
use crate::ops::metrics::{Metrics, TcpFrontendMetrics};
use crate::table::stream::StreamServe;
use crate::table::{Frontend, RoutingTable, TableReader};

/// Bytes buffered per direction of a connection.
const BUFFER: usize = 16 * 1024;

/// The TCP frontends, as one Pingora background service.
pub struct TcpFrontends {
    bind: IpAddr,
    conn: Arc<ConnSettings>,
}

/// What every connection needs.
#[derive(Clone)]
struct ConnSettings {
    table: TableReader,
    timeouts: Timeouts,
    /// Tries, passive ejection and `--health-fail-open`, as for HTTP.
    policy: Policy,
    /// Counts open connections, so a graceful shutdown waits for them (up to its grace).
    lifecycle: Arc<Lifecycle>,
    metrics: Arc<Metrics>,
    access_log: Arc<AccessLog>,
    /// Which ports expect a PROXY header first (`--proxy-protocol`), from whom.
    proxy_protocol: proxy_protocol::Settings,
    /// `--work-stealing false`: each connection is placed on one of the service's threads.
    spread: bool,
    /// The acceptors of Gateway TLS listeners that terminate.
    terminators: Arc<Terminators>,
}

impl TcpFrontends {
    pub fn new(table: TableReader, bind: IpAddr, timeouts: Timeouts, tries: usize) -> Self {
        TcpFrontends {
            conn: Arc::new(ConnSettings {
                table,
                timeouts,
                policy: Policy::new(tries, timeouts.passive_down, true),
                lifecycle: Lifecycle::new(),
                metrics: Arc::new(Metrics::new()),
                access_log: Arc::new(AccessLog::off()),
                proxy_protocol: proxy_protocol::Settings::default(),
                spread: false,
                terminators: Arc::new(Terminators::default()),
            }),
            bind,
        }
    }

    /// Counts this frontend's connections in `lifecycle`.
    pub fn with_lifecycle(mut self, lifecycle: Arc<Lifecycle>) -> Self {
        Arc::make_mut(&mut self.conn).lifecycle = lifecycle;
        self
    }

    /// `--health-fail-open`: when every endpoint is marked down, use them all (default) rather
    /// than refuse the connection.
    pub fn with_fail_open(mut self, fail_open: bool) -> Self {
        Arc::make_mut(&mut self.conn).policy.fail_open = fail_open;
        self
    }

    /// `--proxy-protocol`: the ports it names (`Settings::tcp`) read a PROXY header first.
    pub fn with_proxy_protocol(mut self, settings: proxy_protocol::Settings) -> Self {
        Arc::make_mut(&mut self.conn).proxy_protocol = settings;
        self
    }

    /// `--work-stealing false`: Pingora's per-thread runtimes, where a task stays on the thread
    /// that spawned it. Without this every connection of every port would stay on the one
    /// thread that runs the accept loops; with it each is placed on one of the service's
    /// threads at random and its socket registered there, as Pingora places an HTTP
    /// connection. (With work stealing tokio spreads them itself.)
    pub fn with_spread(mut self, spread: bool) -> Self {
        Arc::make_mut(&mut self.conn).spread = spread;
        self
    }

    /// Records into `metrics` and `access_log` (without this, into a private registry and no
    /// log).
    pub fn with_observability(mut self, metrics: Arc<Metrics>, access_log: Arc<AccessLog>) -> Self {
        let c = Arc::make_mut(&mut self.conn);
        c.metrics = metrics;
        c.access_log = access_log;
        self
    }
}

/// The ports that should be listening, each with what it serves (for logs): every TCP
/// frontend whose entry has endpoints (an entry without endpoints gets no listener, so
/// clients are refused at once: the TCP form of 503), and every Gateway TCP or TLS listener
/// with a route.
fn wanted(table: &RoutingTable) -> BTreeMap<At, String> {
    let services = table.tcp.iter().filter_map(|f| {
        let e = table.entry(f.entry)?;
        (!e.endpoints.is_empty()).then(|| ((None, f.port), e.key.to_string()))
    });
    let gateways = table.streams.ports.iter().map(|p| {
        let what = match p.serve {
            StreamServe::Tcp(_) => "Gateway TCP listener",
            StreamServe::Tls(_) => "Gateway TLS listener",
        };
        ((p.address, p.port), what.to_string())
    });
    // A `--tcp-services` port first: translate refuses a Gateway listener on one.
    let mut out = BTreeMap::new();
    for (at, what) in services.chain(gateways) {
        out.entry(at).or_insert(what);
    }
    out
}

#[async_trait]
impl Ports for TcpFrontends {
    type What = String;
    const NOUN: &'static str = "TCP frontend";

    fn wanted(&self, table: &RoutingTable) -> BTreeMap<At, String> {
        wanted(table)
    }

    async fn open(
        &self,
        at: At,
        _: &String,
        stop: oneshot::Receiver<()>,
    ) -> io::Result<JoinHandle<()>> {
        // A port that stays but changes Service keeps its listener (`reopens`' default): it
        // serves whatever the table says at each accept.
        let listener = TcpListener::bind(socket_addr(self.bind, at)).await?;
        Ok(tokio::spawn(accept_loop(
            listener,
            at,
            Arc::clone(&self.conn),
            stop,
        )))
    }
}

#[async_trait]
impl BackgroundService for TcpFrontends {
    async fn start(&self, shutdown: ShutdownWatch) {
        reconcile(self, &self.conn.table, shutdown).await;
    }
}

async fn accept_loop(
    listener: TcpListener,
    (address, port): At,
    conn: Arc<ConnSettings>,
    mut stop: oneshot::Receiver<()>,
) {
    let frontend: Arc<str> = Frontend::Tcp(port).label().into();
    let metrics = conn.metrics.data.tcp_frontend(&frontend);
    let proxy_protocol = conn.proxy_protocol.tcp(port).then(|| {
        proxy_protocol::Acceptor::new(
            &conn.metrics,
            &frontend,
            conn.proxy_protocol.clone(),
            conn.timeouts.request_headers,
        )
    });
    loop {
        tokio::select! {
            // Fires when the sender is dropped: the port left the table.
            _ = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let accepted = Accepted {
                        address,
                        port,
                        peer,
                        frontend: Arc::clone(&frontend),
                        metrics: metrics.clone(),
                        proxy_protocol: proxy_protocol.clone(),
                    };
                    if conn.spread {
                        spread(stream, accepted, Arc::clone(&conn));
                    } else {
                        tokio::spawn(serve(stream, accepted, Arc::clone(&conn)));
                    }
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::debug!(port, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
}

/// Serves `stream` on a thread of the service's runtime picked at random (Pingora's per-thread
/// runtimes: `pingora_runtime::current_handle`), its socket moved to that thread's reactor so
/// that its readiness is not relayed from the accepting thread.
fn spread(stream: TcpStream, accepted: Accepted, conn: Arc<ConnSettings>) {
    let stream = match stream.into_std() {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(port = accepted.port, error = %e, "cannot move the connection");
            return;
        }
    };
    pingora_runtime::current_handle().spawn(async move {
        match TcpStream::from_std(stream) {
            Ok(stream) => serve(stream, accepted, conn).await,
            Err(e) => {
                tracing::debug!(port = accepted.port, error = %e, "cannot move the connection")
            }
        }
    });
}

/// One accepted client connection and its listener's handles.
struct Accepted {
    /// The Gateway address it was opened on (`None`: the bind address).
    address: Option<IpAddr>,
    port: u16,
    peer: SocketAddr,
    /// `tcp:PORT`.
    frontend: Arc<str>,
    metrics: TcpFrontendMetrics,
    /// Set on a `--proxy-protocol` port.
    proxy_protocol: Option<proxy_protocol::Acceptor>,
}

/// How a connection went, for the access log.
#[derive(Default)]
struct Outcome {
    endpoint: Option<SocketAddr>,
    connect: Option<Duration>,
    bytes: Bytes,
    error: Option<&'static str>,
}

/// One client connection: the attempt picks an endpoint (retrying failed connects on
/// others), then the bytes are relayed and recorded.
async fn serve(mut client: TcpStream, mut accepted: Accepted, conn: Arc<ConnSettings>) {
    let _active = conn.lifecycle.enter();
    let _open = accepted.metrics.accepted();
    let started = Instant::now();
    if let Some(pp) = &accepted.proxy_protocol {
        // The header's client is the one balanced on (source, affinity) and logged.
        match pp.accept(&mut client, accepted.peer).await {
            Some(client) => accepted.peer = client,
            None => return,
        }
    }
    // The table of the moment of accept is kept for this connection's whole life.
    let table = conn.table.load();
    let service = accepted.address.is_none()
        && table
            .tcp
            .binary_search_by_key(&accepted.port, |f| f.port)
            .is_ok();
    let tls = !service
        && matches!(
            table.streams.port(accepted.address, accepted.port),
            Some(StreamServe::Tls(_))
        );
    // A Gateway TLS listener's connections go by the server name of their hello, read here
    // and sent on ahead of the rest.
    let (hello, name) = if tls {
        let read = tokio::time::timeout(conn.timeouts.request_headers, read_hello(&mut client));
        match read.await {
            Ok(Ok(read)) => read,
            _ => return,
        }
    } else {
        (Vec::new(), None)
    };
    // A TLS listener in Terminate mode: its certificates, to terminate with once routed.
    let terminate = table
        .streams
        .terminate(accepted.address, accepted.port, name.as_deref())
        .filter(|_| tls)
        .cloned();
    let mut attempt = Attempt::new(Some(accepted.peer.ip()));
    let routed = if service {
        attempt.route_tcp(table, accepted.port, &conn.policy, started)
    } else {
        let at = (accepted.address, accepted.port);
        attempt.route_stream(table, at, name.as_deref(), &conn.policy, started)
    };
    match routed {
        Ok(Route::Proxy { .. } | Route::Unavailable) => {}
        Ok(
            Route::NotFound
            | Route::Healthz
            | Route::Forbidden
            | Route::Limited
            | Route::Misdirected
            | Route::BadCertificate
            | Route::Unauthorized { .. }
            | Route::Preflight { .. }
            | Route::Redirect { .. }
            | Route::Moved { .. }
            | Route::Fail(_),
        ) => return,
        Err(e) => {
            tracing::warn!(port = accepted.port, error = %e, "cannot route");
            return;
        }
    }
    let local = client.local_addr().ok();
    // Small writes of interactive protocols must not wait for Nagle.
    let _ = client.set_nodelay(true);
    let (client, hello) = match terminate {
        None => (Client::Plain(client), hello),
        Some(certificates) => {
            // Never passed through: without an acceptor (no certificate loads) it is closed.
            let Some(acceptor) = conn.terminators.acceptor(&certificates) else {
                return;
            };
            let handshake = acceptor.accept(Rewind::new(hello, client));
            match tokio::time::timeout(conn.timeouts.request_headers, handshake).await {
                Ok(Ok(tls)) => (Client::Tls(Box::new(tls)), Vec::new()),
                Ok(Err(e)) => {
                    tracing::debug!(port = accepted.port, error = %e, "TLS listener handshake failed");
                    return;
                }
                Err(_) => return,
            }
        }
    };
    let outcome =
        connect_and_relay(client, (accepted.peer, local), &hello, &mut attempt, &conn).await;
    let (Some(table), Some(entry)) = (attempt.table(), attempt.entry()) else {
        return;
    };
    accepted
        .metrics
        .add_bytes(outcome.bytes.from_client, outcome.bytes.to_client);
    if outcome.endpoint.is_some()
        && let Some(t) = attempt.totals()
    {
        t.bytes_in
            .fetch_add(outcome.bytes.from_client, Ordering::Relaxed);
        t.bytes_out
            .fetch_add(outcome.bytes.to_client, Ordering::Relaxed);
    }
    tracing::debug!(port = accepted.port, endpoint = ?outcome.endpoint, error = ?outcome.error, "TCP connection ended");
    if conn.access_log.enabled() {
        conn.access_log.tcp(&TcpRecord {
            timestamp: SystemTime::now(),
            client: Some(accepted.peer),
            frontend: &accepted.frontend,
            entry: &entry.name,
            endpoint: outcome.endpoint,
            bytes_in: outcome.bytes.from_client,
            bytes_out: outcome.bytes.to_client,
            duration: started.elapsed(),
            connect: outcome.connect,
            generation: table.generation,
            retries: u32::try_from(attempt.tries().saturating_sub(1)).unwrap_or(0),
            error: outcome.error,
        });
    }
}

/// Connects to the endpoint the attempt picks (trying others as it says) and relays;
/// `first` (a hello already read) goes to the endpoint ahead of the client's other bytes.
async fn connect_and_relay(
    client: Client,
    (peer, local): (SocketAddr, Option<SocketAddr>),
    first: &[u8],
    attempt: &mut Attempt,
    conn: &ConnSettings,
) -> Outcome {
    let mut outcome = Outcome::default();
    // `lb.send-proxy-protocol: v2`: the endpoint learns the client (the PROXY one, when a
    // balancer sent one) from a header ahead of the client's bytes.
    let send_proxy = attempt.entry().is_some_and(|e| e.upstream.send_proxy);
    let header = match local {
        Some(local) if send_proxy => Some(proxy_protocol::v2_header(peer, local)),
        _ => None,
    };
    loop {
        let Some(addr) = attempt.next(Instant::now()) else {
            outcome.error.get_or_insert("no endpoint");
            return outcome;
        };
        let connect = tokio::time::timeout(conn.timeouts.connect, TcpStream::connect(addr)).await;
        let cause = match connect {
            Ok(Ok(mut upstream)) => {
                attempt.connected(false, Instant::now());
                outcome.endpoint = Some(addr);
                outcome.connect = attempt.connect_time();
                outcome.error = None;
                let ahead = header.iter().map(Vec::as_slice).chain(Some(first));
                for bytes in ahead.filter(|b| !b.is_empty()) {
                    if let Err(e) = upstream.write_all(bytes).await {
                        outcome.error = Ended::Error(e.kind()).error();
                        attempt.finish();
                        return outcome;
                    }
                }
                let _ = upstream.set_nodelay(true);
                let idle = conn.timeouts.tunnel;
                let (ended, mut bytes) = match client {
                    Client::Plain(client) => relay(client, upstream, idle).await,
                    Client::Tls(tls) => {
                        let (r, w) = tokio::io::split(tls);
                        relay_halves((r, w), upstream, idle).await
                    }
                };
                bytes.from_client += first.len() as u64;
                outcome.bytes = bytes;
                outcome.error = ended.error();
                attempt.finish();
                return outcome;
            }
            Err(_) => Cause::ConnectTimedOut,
            Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => Cause::ConnectRefused,
            Ok(Err(_)) => Cause::ConnectFailed,
        };
        tracing::debug!(endpoint = %addr, %cause, "TCP connect failed");
        outcome.error = Some(cause.phrase());
        let failure = Failure {
            cause,
            replayable: true,
        };
        let verdict = attempt.failed(failure, &conn.policy, Instant::now());
        if let (Some(table), Some(id), Some(entry)) =
            (attempt.table(), attempt.entry_id(), attempt.entry())
        {
            conn.metrics.data.count_failure(
                table.generation,
                id as usize,
                &entry.name,
                verdict.ejected,
                verdict.retry,
            );
        }
        if !verdict.retry {
            return outcome;
        }
    }
}

/// Why a relay ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// Both sides closed their half.
    Closed,
    /// No byte in either direction for the idle timeout.
    Idle,
    /// A read or write failed (reset, broken pipe).
    Error(io::ErrorKind),
}

impl Ended {
    /// The access log's short phrase (a bounded set).
    fn error(&self) -> Option<&'static str> {
        match self {
            Ended::Closed => None,
            Ended::Idle => Some("idle timeout"),
            Ended::Error(io::ErrorKind::ConnectionReset) => Some("connection reset"),
            Ended::Error(io::ErrorKind::BrokenPipe) => Some("broken pipe"),
            Ended::Error(_) => Some("i/o error"),
        }
    }
}

/// Bytes a relay copied.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Bytes {
    from_client: u64,
    to_client: u64,
}

/// Copies bytes both ways until both sides have closed, one fails, or nothing moves for
/// `idle`. An EOF on one side is passed on as a half-close (FIN) to the other, whose direction
/// keeps flowing.
async fn relay(mut client: TcpStream, upstream: TcpStream, idle: Duration) -> (Ended, Bytes) {
    relay_halves(client.split(), upstream, idle).await
}

/// `relay` from a client's two halves (a TCP stream's, borrowed; or a terminated TLS
/// stream's).
async fn relay_halves<R, W>(
    (client_r, client_w): (R, W),
    mut upstream: TcpStream,
    idle: Duration,
) -> (Ended, Bytes)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let origin = Instant::now();
    let last_activity = AtomicU64::new(0);
    let (from_client, to_client) = (AtomicU64::new(0), AtomicU64::new(0));
    let (upstream_r, upstream_w) = upstream.split();
    let ended = {
        let mut up = pin!(pump(
            client_r,
            upstream_w,
            &from_client,
            &last_activity,
            origin
        ));
        let mut down = pin!(pump(
            upstream_r,
            client_w,
            &to_client,
            &last_activity,
            origin
        ));
        // One timer for the whole relay, moved only when it fires early: re-arming it on every
        // wake-up would register and cancel a timer per read, the main cost of a busy relay.
        let mut deadline = pin!(tokio::time::sleep_until((origin + idle).into()));
        let (mut up_done, mut down_done) = (false, false);
        loop {
            if up_done && down_done {
                break Ended::Closed;
            }
            tokio::select! {
                r = &mut up, if !up_done => match r {
                    Ok(()) => up_done = true,
                    Err(e) => break Ended::Error(e.kind()),
                },
                r = &mut down, if !down_done => match r {
                    Ok(()) => down_done = true,
                    Err(e) => break Ended::Error(e.kind()),
                },
                () = &mut deadline => {
                    let last = Duration::from_millis(last_activity.load(Ordering::Relaxed));
                    if origin.elapsed() >= last + idle {
                        break Ended::Idle;
                    }
                    deadline.as_mut().reset((origin + last + idle).into());
                }
            }
        }
    };
    let bytes = Bytes {
        from_client: from_client.load(Ordering::Relaxed),
        to_client: to_client.load(Ordering::Relaxed),
    };
    (ended, bytes)
}

/// A client connection as relayed: as accepted, or terminated (a TLS listener in Terminate
/// mode), its hello read again by the handshake.
enum Client {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<Rewind<TcpStream>>>),
}

/// A stream whose first bytes, already read, are given again before the rest: the hello a
/// TLS listener read to choose its route, for the handshake that follows.
struct Rewind<S> {
    first: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S> Rewind<S> {
    fn new(first: Vec<u8>, inner: S) -> Rewind<S> {
        Rewind {
            first,
            at: 0,
            inner,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(rest) = this.first.get(this.at..).filter(|r| !r.is_empty()) {
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            this.at += n;
            if this.at == this.first.len() {
                this.first = Vec::new();
                this.at = 0;
            }
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// One direction: read until EOF, then half-close the writer.
async fn pump<R, W>(
    mut from: R,
    mut to: W,
    copied: &AtomicU64,
    last_activity: &AtomicU64,
    origin: Instant,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; BUFFER];
    loop {
        let n = from.read(&mut buf).await?;
        last_activity.store(
            u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        if n == 0 {
            return to.shutdown().await;
        }
        to.write_all(&buf[..n]).await?;
        copied.fetch_add(n as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (b, _) = l.accept().await.unwrap();
        (a, b)
    }

    #[tokio::test]
    async fn rewind_gives_the_bytes_read_again_then_the_rest() {
        let (mut client, accepted) = pair().await;
        client.write_all(b" world").await.unwrap();
        client.shutdown().await.unwrap();
        let mut r = Rewind::new(b"hello".to_vec(), accepted);
        // A small buffer takes the first bytes in pieces.
        let mut piece = [0u8; 3];
        let n = r.read(&mut piece).await.unwrap();
        assert_eq!(&piece[..n], b"hel");
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"lo world");
        // Writes go to the stream.
        r.write_all(b"back").await.unwrap();
        r.shutdown().await.unwrap();
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"back");
    }

    #[tokio::test]
    async fn relay_passes_half_closes_both_ways() {
        // client <-> (c_in | relay | u_out) <-> upstream
        let (mut client, c_in) = pair().await;
        let (u_out, mut upstream) = pair().await;
        let relay = tokio::spawn(relay(c_in, u_out, Duration::from_secs(10)));
        client.write_all(b"request").await.unwrap();
        client.shutdown().await.unwrap();
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), upstream.read_to_end(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, b"request");
        // The client's half-close did not close the other direction.
        upstream.write_all(b"response").await.unwrap();
        upstream.shutdown().await.unwrap();
        let mut back = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut back))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(back, b"response");
        let ended = tokio::time::timeout(Duration::from_secs(5), relay)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(ended.0, Ended::Closed);
        assert_eq!(
            ended.1,
            Bytes {
                from_client: 7,
                to_client: 8
            }
        );
    }

    #[tokio::test]
    async fn relay_times_out_when_idle() {
        let (mut client, c_in) = pair().await;
        let (u_out, _upstream) = pair().await;
        let started = Instant::now();
        let relay = tokio::spawn(relay(c_in, u_out, Duration::from_millis(300)));
        let ended = tokio::time::timeout(Duration::from_secs(5), relay)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(ended.0, Ended::Idle);
        assert!(started.elapsed() >= Duration::from_millis(300));
        // The client sees the connection closed.
        let mut buf = [0u8; 1];
        let n = tokio::time::timeout(Duration::from_secs(5), client.read(&mut buf))
            .await
            .unwrap()
            .unwrap_or(0);
        assert_eq!(n, 0);
    }

    #[tokio::test]
    async fn traffic_keeps_a_relay_alive() {
        let (mut client, c_in) = pair().await;
        let (u_out, mut upstream) = pair().await;
        let relay = tokio::spawn(relay(c_in, u_out, Duration::from_millis(400)));
        let mut buf = [0u8; 4];
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            client.write_all(b"ping").await.unwrap();
            upstream.read_exact(&mut buf).await.unwrap();
        }
        assert!(
            !relay.is_finished(),
            "1 s of traffic outlived a 400 ms idle timeout"
        );
        relay.abort();
    }
}

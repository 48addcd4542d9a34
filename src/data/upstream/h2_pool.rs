//! HTTP/2 connections of the fast path to `h2c`/`grpc` endpoints, and over TLS to `h2`/`grpcs`
//! ones (`relay` uses them): streams share few connections per endpoint address and, over
//! TLS, per what the connection was verified with and the server name it sent (`pool::Key`).
//! A connection takes streams up to the fewer of the backend's `SETTINGS_MAX_CONCURRENT_STREAMS`
//! and `H2_STREAMS_PER_CONNECTION`; past that another is opened, up to
//! `MAX_CONNECTIONS_PER_ENDPOINT`, after which streams wait on the least busy one (its
//! connection queues them: `wire::h2::conn`). Streams are packed: a new one goes to the busiest
//! connection with room, and one that comes while a connection is being opened waits for it
//! rather than opening its own, so a burst of streams does not open a connection each. Few
//! connections carrying many streams write their frames together (one send for many), where many
//! half-idle ones would each send their own. Each connection is driven by its own task, which
//! ends it after `--server-timeout` without a stream; one that ended (GOAWAY, an error, idle)
//! is never handed out again. The pool is keyed by address, not by table, so a table swap
//! keeps it; a rotated CA bundle is a new key, so connections verified under the old one take
//! no new streams. Without work stealing each thread has connections of its own (the bound
//! is then per thread), so that no stream is served across threads. Knows nothing of
//! requests; never holds its lock across an await.

use std::collections::HashMap;
#[cfg(test)]
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::data::wire::h2::conn::{self, SendRequest};
use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;

use crate::data::upstream::pool::{Key, Upstream};
use crate::data::wire::h2::active::{Active, Busy};
use crate::data::wire::h2::batch::Batched;

/// Streams switchyard opens on one HTTP/2 connection to an endpoint before opening another
/// (the common server default for concurrent streams).
pub(crate) const H2_STREAMS_PER_CONNECTION: usize = 100;

/// Connections opened to one endpoint before streams queue on the open ones.
const MAX_CONNECTIONS_PER_ENDPOINT: usize = 16;

/// Flow-control windows offered to a backend: large enough that a stream of messages is not
/// paced by window updates on a fast network (HTTP/2's default of 64 KiB is per round trip).
const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 8 << 20;

/// One HTTP/2 connection to an endpoint.
struct Conn {
    send: SendRequest,
    /// Its streams in flight (the idle timeout runs while there are none).
    active: Arc<Active>,
    /// The connection ended, or a stream on it failed as a connection does (GOAWAY).
    closed: AtomicBool,
    /// Over TLS, the server name it sent and verified (`Key` holds only its hash); empty in
    /// clear.
    sni: Box<str>,
}

impl Conn {
    /// Streams it takes before another connection is opened.
    fn room(&self) -> usize {
        self.send
            .current_max_send_streams()
            .min(H2_STREAMS_PER_CONNECTION)
    }

    fn usable(&self) -> bool {
        !self.closed.load(Ordering::Relaxed)
    }
}

/// A stream's hold on its connection: counted busy until dropped.
pub struct Lease {
    conn: Arc<Conn>,
    _busy: Busy,
}

impl Lease {
    fn on(conn: &Arc<Conn>) -> Lease {
        Lease {
            _busy: conn.active.start(),
            conn: Arc::clone(conn),
        }
    }

    /// The connection is not to be used for new streams (the backend said GOAWAY, or the
    /// connection broke).
    pub fn retire(&self) {
        self.conn.closed.store(true, Ordering::Relaxed);
    }
}

/// The endpoints' connections.
pub struct H2Pool {
    /// aHash, as the HTTP/1 pool: looked up on every stream, keyed by the table's endpoints.
    endpoints: Mutex<HashMap<Share, Endpoint, ahash::RandomState>>,
    /// Each thread has connections of its own (`per_thread`).
    per_thread: bool,
}

/// An endpoint's connections as one thread sees them: the thread's number (`thread_number`)
/// with `per_thread`, else 0 for every thread.
type Share = (Key, u32);

/// This thread's number, from 1 in the order threads first ask.
fn thread_number() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    thread_local! {
        static NUMBER: u32 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    NUMBER.with(|n| *n)
}

#[derive(Default)]
struct Endpoint {
    conns: Vec<Arc<Conn>>,
    /// Connections being opened (counted against the bound).
    opening: usize,
    /// Streams waiting for a connection being opened (`Found::Wait`).
    waiting: usize,
    /// Woken when a connection being opened is open or has failed.
    settled: Arc<Notify>,
}

impl Endpoint {
    /// Nothing open, opening or waiting: the endpoint may be forgotten.
    fn unused(&self) -> bool {
        self.conns.is_empty() && self.opening == 0 && self.waiting == 0
    }
}

/// What `H2Pool::reserve` found.
enum Found {
    Open(SendRequest, Lease),
    /// Wait for a connection being opened (counted in `waiting` by a `Waiting`).
    Wait(OwnedNotified),
    Connect,
}

impl H2Pool {
    /// With `per_thread` (Pingora's per-thread runtimes, `--work-stealing false`) each thread's
    /// streams take connections of that thread's own: a connection's task runs on the thread
    /// that opened it, and a stream of another thread would wake it, and be woken by it, across
    /// threads at every request and response (as HAProxy keeps its idle connections per
    /// thread). The bound of connections per endpoint is then per thread.
    pub fn new(per_thread: bool) -> H2Pool {
        H2Pool {
            endpoints: Mutex::default(),
            per_thread,
        }
    }

    /// A stream's sender on a connection to `key` (over TLS, one that sent `sni`) and its
    /// lease; `true` when the connection was already open. `connect` opens the connection
    /// (the fast path's TCP connect, and over TLS its handshake, with their timeouts and
    /// errors); a wait for a connection another stream is opening is bounded by
    /// `open_timeout`, after which the stream opens its own.
    pub async fn stream<F>(
        self: &Arc<Self>,
        key: Key,
        sni: &str,
        idle_timeout: Duration,
        open_timeout: Duration,
        connect: impl FnOnce() -> F,
    ) -> Result<(SendRequest, Lease, bool), PoolError>
    where
        F: Future<Output = Result<Upstream, crate::decide::cause::Cause>>,
    {
        let key = (key, if self.per_thread { thread_number() } else { 0 });
        let mut may_wait = true;
        loop {
            match self.reserve(key, sni, may_wait) {
                Found::Open(send, lease) => return Ok((send, lease, true)),
                Found::Connect => break,
                Found::Wait(settled) => {
                    // Counted in `waiting` until this wait ends, also when the future is
                    // dropped. Once only: a stream whose connection failed or is slow opens
                    // its own.
                    let _waiting = Waiting { pool: self, key };
                    let _ = tokio::time::timeout(open_timeout, settled).await;
                    may_wait = false;
                }
            }
        }
        // Counted in `opening` until settled, also when this future is dropped mid-connect
        // (the client reset the stream, the call's deadline passed).
        let mut opening = Opening {
            pool: self,
            key,
            opened: None,
        };
        // Boxed: the connect and handshake futures (a TLS handshake's is kilobytes) would
        // otherwise be part of every stream's state, moved with it on each call, while most
        // streams take an open connection.
        let opened = Box::pin(async {
            let tcp = connect().await.map_err(PoolError::Connect)?;
            // Streams are served by their own tasks: their frames go out together. The
            // preface is queued, not awaited (as with `h2`): a backend that does not speak
            // HTTP/2 fails the first stream.
            Ok(conn::handshake(
                Batched::new(tcp),
                STREAM_WINDOW,
                CONNECTION_WINDOW,
            ))
        })
        .await;
        let (send, connection) = match opened {
            Ok(pair) => pair,
            Err(e) => {
                drop(opening);
                return Err(e);
            }
        };
        let conn = Arc::new(Conn {
            send: send.clone(),
            active: Arc::default(),
            closed: AtomicBool::new(false),
            sni: sni.into(),
        });
        let lease = Lease::on(&conn);
        // In the pool, and the streams waiting for it woken.
        opening.opened = Some(Arc::clone(&conn));
        drop(opening);
        let pool = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut connection = std::pin::pin!(connection.run());
            tokio::select! {
                _ = &mut connection => {}
                () = conn.active.idle_for(idle_timeout) => {}
            }
            // Closed, and gone from the pool, before its socket is (at the end of this task):
            // a stream starting once the backend saw the connection end never gets it.
            conn.closed.store(true, Ordering::Relaxed);
            // Gone from the pool, and the endpoint with it once it has no connection left (an
            // endpoint no longer in the table leaves nothing behind).
            if let Some(pool) = pool.upgrade() {
                let mut endpoints = pool.endpoints.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(endpoint) = endpoints.get_mut(&key) {
                    endpoint.conns.retain(|c| !Arc::ptr_eq(c, &conn));
                    if endpoint.unused() {
                        endpoints.remove(&key);
                    }
                }
            }
        });
        Ok((send, lease, false))
    }

    /// The busiest connection with room for a stream; else, with `may_wait`, a wait for a
    /// connection being opened that is not yet promised to as many streams as it takes; else
    /// the duty to open one (counted in `opening`); past the bound, the least busy connection.
    fn reserve(&self, key: Share, sni: &str, may_wait: bool) -> Found {
        let mut endpoints = self.endpoints.lock().unwrap_or_else(|e| e.into_inner());
        let endpoint = endpoints.entry(key).or_default();
        endpoint.conns.retain(|c| c.usable());
        // Two names of one hash (never seen) would share the bound, not connections.
        let named = |c: &&Arc<Conn>| sni.is_empty() || *c.sni == *sni;
        let busiest = endpoint
            .conns
            .iter()
            .filter(named)
            .filter(|c| c.active.count() < c.room())
            .max_by_key(|c| c.active.count());
        if let Some(conn) = busiest {
            return Found::Open(conn.send.clone(), Lease::on(conn));
        }
        if may_wait && endpoint.waiting < endpoint.opening * H2_STREAMS_PER_CONNECTION {
            endpoint.waiting += 1;
            return Found::Wait(Arc::clone(&endpoint.settled).notified_owned());
        }
        if endpoint.conns.len() + endpoint.opening < MAX_CONNECTIONS_PER_ENDPOINT {
            endpoint.opening += 1;
            return Found::Connect;
        }
        let least = endpoint
            .conns
            .iter()
            .filter(named)
            .min_by_key(|c| c.active.count());
        match least {
            Some(conn) => Found::Open(conn.send.clone(), Lease::on(conn)),
            None => {
                endpoint.opening += 1;
                Found::Connect
            }
        }
    }

    /// Connections to `addr` being opened (tests).
    #[cfg(test)]
    fn opening(&self, addr: SocketAddr) -> Option<usize> {
        let endpoints = self.endpoints.lock().unwrap_or_else(|e| e.into_inner());
        endpoints.get(&(Key::plain(addr), 0)).map(|e| e.opening)
    }

    /// Open connections to `addr` (tests and the stats of a test).
    #[cfg(test)]
    fn open(&self, addr: SocketAddr) -> usize {
        let endpoints = self.endpoints.lock().unwrap_or_else(|e| e.into_inner());
        endpoints
            .get(&(Key::plain(addr), 0))
            .map_or(0, |e| e.conns.iter().filter(|c| c.usable()).count())
    }
}

/// A connection being opened to `key`, counted in its endpoint's `opening` (by `reserve`)
/// until dropped; then `opened`, if it was, joins the pool, and the streams waiting for it
/// are woken (to take it, or to open their own if it failed).
struct Opening<'p> {
    pool: &'p H2Pool,
    key: Share,
    opened: Option<Arc<Conn>>,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        let mut endpoints = self
            .pool
            .endpoints
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let endpoint = endpoints.entry(self.key).or_default();
        endpoint.opening = endpoint.opening.saturating_sub(1);
        endpoint.conns.extend(self.opened.take());
        endpoint.settled.notify_waiters();
        if endpoint.unused() {
            endpoints.remove(&self.key);
        }
    }
}

/// A stream waiting for a connection being opened to `key`, counted in its endpoint's
/// `waiting` (by `reserve`) until dropped.
struct Waiting<'p> {
    pool: &'p H2Pool,
    key: Share,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut endpoints = self
            .pool
            .endpoints
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(endpoint) = endpoints.get_mut(&self.key) {
            endpoint.waiting = endpoint.waiting.saturating_sub(1);
            if endpoint.unused() {
                endpoints.remove(&self.key);
            }
        }
    }
}

/// Why no connection could be had.
#[derive(Debug, Clone, Copy, thiserror::Error)]
pub enum PoolError {
    #[error("cannot connect: {0:?}")]
    Connect(crate::decide::cause::Cause),
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use crate::data::wire::h2::conn::RequestBlock;

    use super::*;

    /// A backend that accepts HTTP/2 connections with `max` concurrent streams and holds every
    /// stream open; returns its address and the number of connections it accepted.
    async fn holding_backend(max: u32) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(async move {
                    let mut conn = h2::server::Builder::new()
                        .max_concurrent_streams(max)
                        .handshake::<_, Bytes>(tcp)
                        .await
                        .unwrap();
                    let mut held = Vec::new();
                    while let Some(Ok(stream)) = conn.accept().await {
                        held.push(stream);
                    }
                });
            }
        });
        (addr, accepted)
    }

    #[tokio::test]
    async fn streams_share_a_connection_up_to_the_backends_limit() {
        let (addr, accepted) = holding_backend(2).await;
        let pool = Arc::new(H2Pool::new(false));
        let mut leases = Vec::new();
        for i in 0..5 {
            let (send, lease, reused) = stream_to(&pool, addr, 2).await;
            let req = RequestBlock::from(
                &http::Request::post(format!("http://{addr}/"))
                    .body(())
                    .unwrap(),
            );
            let body = send.send_request(&req, false).await.unwrap();
            assert_eq!(reused, i % 2 == 1, "stream {i}");
            leases.push((lease, body));
        }
        assert_eq!(pool.open(addr), 3);
        assert_eq!(accepted.load(Ordering::Relaxed), 3);

        // A retired connection is not handed out again.
        leases[0].0.retire();
        drop(leases.drain(..2));
        assert_eq!(pool.open(addr), 2);
    }

    /// With `per_thread`, a stream on another thread does not take the first thread's
    /// connection but opens its own (each thread a runtime of its own, as Pingora's per-thread
    /// runtimes are); without, it shares it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn each_thread_has_connections_of_its_own_when_asked() {
        for per_thread in [true, false] {
            let (addr, accepted) = holding_backend(100).await;
            let pool = Arc::new(H2Pool::new(per_thread));
            // Both threads' runtimes live until both have their stream (a connection's task
            // ends with its runtime).
            let opened = Arc::new(std::sync::Barrier::new(2));
            let done = Arc::new(std::sync::Barrier::new(2));
            let on_thread = |first: bool| {
                let (pool, opened, done) = (Arc::clone(&pool), opened.clone(), done.clone());
                std::thread::spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    if !first {
                        opened.wait();
                    }
                    let (_send, _lease, reused) = rt.block_on(stream_to(&pool, addr, 100));
                    if first {
                        opened.wait();
                    }
                    done.wait();
                    reused
                })
            };
            let (first, second) = (on_thread(true), on_thread(false));
            assert!(
                !first.join().unwrap(),
                "the first stream opens a connection"
            );
            let reused = second.join().unwrap();
            assert_eq!(reused, !per_thread, "per_thread: {per_thread}");
            let connections = if per_thread { 2 } else { 1 };
            assert_eq!(accepted.load(Ordering::Relaxed), connections);
        }
    }

    /// A connection to `addr` for the pool (a plain TCP connect, after `delay`).
    async fn connect_after(
        addr: SocketAddr,
        delay: Duration,
    ) -> Result<Upstream, crate::decide::cause::Cause> {
        tokio::time::sleep(delay).await;
        tokio::net::TcpStream::connect(addr)
            .await
            .map(Upstream::Plain)
            .map_err(|_| crate::decide::cause::Cause::ConnectFailed)
    }

    /// A stream from `pool` to the backend at `addr`, whose stream limit is `max`: on a new
    /// connection, once the backend's SETTINGS (which come after the handshake) say so.
    async fn stream_to(
        pool: &Arc<H2Pool>,
        addr: SocketAddr,
        max: usize,
    ) -> (SendRequest, Lease, bool) {
        let second = Duration::from_secs(5);
        let (send, lease, reused) = pool
            .stream(Key::plain(addr), "", second, second, || {
                connect_after(addr, Duration::ZERO)
            })
            .await
            .unwrap();
        if !reused {
            settled(send.clone(), max).await;
        }
        (send, lease, reused)
    }

    /// Waits until the connection of `send` has the backend's stream limit `max`.
    async fn settled(send: SendRequest, max: usize) {
        for _ in 0..100 {
            if send.current_max_send_streams() == max {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no SETTINGS from the backend");
    }

    #[tokio::test]
    async fn streams_that_come_while_a_connection_opens_wait_for_it() {
        let (addr, accepted) = holding_backend(100).await;
        let pool = Arc::new(H2Pool::new(false));
        let second = Duration::from_secs(5);
        // Ten streams at once, while the first connection takes 50 ms to open.
        let streams: Vec<_> = (0..10)
            .map(|_| {
                let pool = Arc::clone(&pool);
                tokio::spawn(async move {
                    let (_, lease, reused) = pool
                        .stream(Key::plain(addr), "", second, second, || {
                            connect_after(addr, Duration::from_millis(50))
                        })
                        .await
                        .unwrap();
                    (lease, reused)
                })
            })
            .collect();
        let mut opened = 0;
        let mut leases = Vec::new();
        for s in streams {
            let (lease, reused) = s.await.unwrap();
            opened += usize::from(!reused);
            leases.push(lease);
        }
        assert_eq!(opened, 1, "one stream opened the connection");
        assert_eq!(accepted.load(Ordering::Relaxed), 1);
        assert_eq!(pool.open(addr), 1);
        assert!(leases.iter().all(|l| Arc::ptr_eq(&l.conn, &leases[0].conn)));
        drop(leases);
        let endpoints = pool.endpoints.lock().unwrap();
        let endpoint = &endpoints[&(Key::plain(addr), 0)];
        assert_eq!((endpoint.opening, endpoint.waiting), (0, 0));
    }

    #[tokio::test]
    async fn a_new_stream_goes_to_the_busiest_connection_with_room() {
        let (addr, _) = holding_backend(3).await;
        let pool = Arc::new(H2Pool::new(false));
        let mut leases = Vec::new();
        for _ in 0..4 {
            leases.push(stream_to(&pool, addr, 3).await.1);
        }
        // Three streams on the first connection (full), one on the second.
        let (first, second_conn) = (Arc::clone(&leases[0].conn), Arc::clone(&leases[3].conn));
        assert!(!Arc::ptr_eq(&first, &second_conn));
        // One of the first ends: both have room, the first is the busier (2 against 1).
        leases.remove(0);
        let (_, lease, reused) = stream_to(&pool, addr, 3).await;
        assert!(reused);
        assert!(
            Arc::ptr_eq(&lease.conn, &first),
            "packed onto the busier connection"
        );
    }

    #[tokio::test]
    async fn a_connect_given_up_leaves_nothing_counted() {
        let pool = Arc::new(H2Pool::new(false));
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let second = Duration::from_secs(5);
        // The stream's future dropped while its connection is being opened (a client reset,
        // a deadline), as the relay's task is.
        let given_up = tokio::time::timeout(
            Duration::from_millis(20),
            pool.stream(Key::plain(addr), "", second, second, || {
                std::future::pending::<Result<Upstream, crate::decide::cause::Cause>>()
            }),
        )
        .await;
        assert!(given_up.is_err());
        assert_eq!(
            pool.opening(addr),
            None,
            "the endpoint is gone, nothing counted"
        );

        // A connect that fails settles its count too.
        let failed = pool
            .stream(Key::plain(addr), "", second, second, || async {
                Err(crate::decide::cause::Cause::ConnectFailed)
            })
            .await;
        assert!(matches!(failed, Err(PoolError::Connect(_))));
        assert_eq!(pool.opening(addr), None);
    }
}

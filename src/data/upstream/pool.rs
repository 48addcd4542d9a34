//! Idle upstream connections of the fast path — plain TCP, or TLS (`Upstream`) — per endpoint
//! address and, for TLS, per what the connection was verified with, with a sweeper that drops
//! the stale ones. Knows nothing of requests; never holds its lock across an await.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::data::tls::ConfigKey;

/// Idle connections kept per endpoint.
const MAX_IDLE_PER_ENDPOINT: usize = 128;
/// How often the pool drops connections idle for longer than `--server-timeout` or closed.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// A connection to an endpoint: HTTP/1 in clear, or over TLS (`https` backends).
pub enum Upstream {
    Plain(TcpStream),
    Tls(Box<TlsUpstream>),
}

/// A TLS connection and the server name it sent and verified.
pub struct TlsUpstream {
    pub stream: TlsStream<TcpStream>,
    pub sni: Box<str>,
}

/// Where a pooled connection may be reused: the endpoint, and for TLS what it was verified
/// with (bundle version, client certificate version, verification) and a hash of the server
/// name (the name itself is compared on `Pool::take`). A rotated bundle is a new `ConfigKey`,
/// so connections verified under the old one are never handed out for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    pub addr: SocketAddr,
    pub tls: Option<(ConfigKey, u64)>,
}

impl Key {
    pub fn plain(addr: SocketAddr) -> Key {
        Key { addr, tls: None }
    }

    pub fn tls(addr: SocketAddr, config: ConfigKey, sni: &str) -> Key {
        // Fixed seeds: the hash only spreads names, `take` compares them.
        const HASHER: ahash::RandomState = ahash::RandomState::with_seeds(1, 2, 3, 4);
        Key {
            addr,
            tls: Some((config, HASHER.hash_one(sni))),
        }
    }
}

/// Each endpoint's idle connections, newest last, with when each was returned.
type IdleMap = HashMap<Key, Vec<(Upstream, Instant)>, ahash::RandomState>;

/// Idle connections to endpoints, newest last. Kept apart from Pingora's pool: each path
/// reuses its own. A task started with the first returned connection drops, once a second,
/// those idle for longer than `--server-timeout`, those the backend closed, and endpoints
/// with nothing left (including those no longer in the table), so a quiet proxy holds no
/// dead sockets.
#[derive(Default)]
pub struct Pool {
    /// aHash, not SipHash: the map is looked up twice a request (`take`, `put`), and its keys
    /// are the table's endpoints, not what clients send.
    idle: Mutex<IdleMap>,
    sweeper: std::sync::OnceLock<()>,
}

impl Pool {
    /// The most recently returned connection for `key` (over TLS: with server name `sni`)
    /// that has been idle for less than `max_idle`.
    pub fn take(&self, key: &Key, sni: &str, max_idle: Duration) -> Option<Upstream> {
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.get_mut(key)?;
        while let Some((mut up, since)) = list.pop() {
            let same_name = match &up {
                Upstream::Plain(_) => true,
                Upstream::Tls(t) => *t.sni == *sni,
            };
            if same_name && now.duration_since(since) < max_idle && idle_and_open(&mut up) {
                return Some(up);
            }
        }
        None
    }

    pub fn put(self: &Arc<Self>, key: Key, up: Upstream, max_idle: Duration) {
        {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            let list = idle.entry(key).or_default();
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

    pub fn sweep(&self, max_idle: Duration) {
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.retain(|_, list| {
            list.retain_mut(|(up, since)| {
                now.duration_since(*since) < max_idle && idle_and_open(up)
            });
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
/// it has already seen, so this costs no system call until the socket had an event. A TLS
/// connection is read through rustls (a raw read would take bytes from the TLS stream): a
/// late session ticket is taken in and yields nothing, a `close_notify` or the end of the
/// stream reads as closed.
fn idle_and_open(up: &mut Upstream) -> bool {
    match up {
        Upstream::Plain(s) => {
            let mut byte = [0u8; 1];
            matches!(s.try_read(&mut byte), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
        }
        Upstream::Tls(t) => {
            let mut byte = [0u8; 1];
            let mut buf = ReadBuf::new(&mut byte);
            // Nobody waits on this poll: a later read by a request registers its own waker.
            let mut cx = Context::from_waker(Waker::noop());
            Pin::new(&mut t.stream)
                .poll_read(&mut cx, &mut buf)
                .is_pending()
        }
    }
}

// === impl Upstream ===

impl Upstream {
    /// The TCP connection underneath.
    fn tcp(&self) -> &TcpStream {
        match self {
            Upstream::Plain(s) => s,
            Upstream::Tls(t) => t.stream.get_ref().0,
        }
    }

    /// The local address of the connection (tests tell connections apart by it).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp().local_addr()
    }
}

impl AsyncRead for Upstream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Upstream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Upstream::Tls(t) => Pin::new(&mut t.stream).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Upstream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Upstream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Upstream::Tls(t) => Pin::new(&mut t.stream).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Upstream::Plain(s) => Pin::new(s).poll_flush(cx),
            Upstream::Tls(t) => Pin::new(&mut t.stream).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Upstream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Upstream::Tls(t) => Pin::new(&mut t.stream).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_pool_gives_back_live_connections_and_sweeps_the_rest() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let key = Key::plain(addr);
        let pool = Arc::new(Pool::default());
        let long = Duration::from_secs(60);
        let a = TcpStream::connect(addr).await.unwrap();
        let (server_a, _) = listener.accept().await.unwrap();
        let b = TcpStream::connect(addr).await.unwrap();
        let (_server_b, _) = listener.accept().await.unwrap();
        pool.put(key, Upstream::Plain(a), long);
        pool.put(key, Upstream::Plain(b), long);
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
        assert!(pool.take(&key, "", long).is_some());
        assert!(pool.take(&key, "", long).is_none());
        // Idle longer than allowed: neither taken nor kept.
        let c = TcpStream::connect(addr).await.unwrap();
        let (_server_c, _) = listener.accept().await.unwrap();
        pool.put(key, Upstream::Plain(c), long);
        tokio::time::sleep(Duration::from_millis(30)).await;
        pool.sweep(Duration::from_millis(10));
        assert_eq!(pool.idle_count(), 0);
    }

    /// A TLS server on 127.0.0.1 for `localhost` that completes each handshake and keeps the
    /// connection until the test drops its end (the returned receiver gives them).
    async fn tls_server() -> (
        SocketAddr,
        tokio::sync::mpsc::UnboundedReceiver<tokio_rustls::server::TlsStream<TcpStream>>,
    ) {
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let key =
            rustls::pki_types::PrivateKeyDer::try_from(ck.signing_key.serialize_der()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![ck.cert.der().clone()], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    let _ = tx.send(tls);
                }
            }
        });
        (addr, rx)
    }

    #[tokio::test]
    async fn tls_connections_are_reused_under_their_own_key_and_swept_once_closed() {
        use crate::table::upstream::{BackendProtocol, Upstream as Settings};
        let (addr, mut accepted) = tls_server().await;
        // Verification skipped (the server's certificate is self-signed): a choice of its own.
        let backend_tls = crate::data::tls::BackendTls::new(None, None);
        let settings = |verify| Settings {
            protocol: BackendProtocol::Https,
            sni: "localhost".into(),
            verify,
            ..Settings::default()
        };
        let choice = backend_tls.choose(&settings(false)).unwrap();
        let config = backend_tls.client_config(&choice).unwrap();
        let connect = || async {
            let tcp = TcpStream::connect(addr).await.unwrap();
            let name = choice.server_name("localhost").unwrap();
            let stream = tokio_rustls::TlsConnector::from(Arc::clone(&config))
                .connect(name, tcp)
                .await
                .unwrap();
            Upstream::Tls(Box::new(TlsUpstream {
                stream,
                sni: "localhost".into(),
            }))
        };
        let pool = Arc::new(Pool::default());
        let long = Duration::from_secs(60);
        let key = Key::tls(addr, choice.key(), "localhost");
        let verified = backend_tls.choose(&settings(true)).unwrap();
        let other_config = Key::tls(addr, verified.key(), "localhost");

        let a = connect().await;
        let server_a = accepted.recv().await.unwrap();
        let local_a = a.local_addr().unwrap();
        pool.put(key, a, long);
        assert!(
            pool.take(&Key::plain(addr), "", long).is_none(),
            "not plain"
        );
        assert!(
            pool.take(&other_config, "localhost", long).is_none(),
            "not for another bundle, certificate or verification"
        );
        let a = pool.take(&key, "localhost", long).expect("reused");
        assert_eq!(a.local_addr().unwrap(), local_a);
        // Another name under the same key (a hash collision) is never handed out.
        pool.put(key, a, long);
        assert!(pool.take(&key, "other.example", long).is_none());
        assert_eq!(pool.idle_count(), 0);
        drop(server_a);

        // The backend closes an idle connection: the sweep drops it.
        let b = connect().await;
        let server_b = accepted.recv().await.unwrap();
        pool.put(key, b, long);
        pool.sweep(long);
        assert_eq!(pool.idle_count(), 1, "open and idle: kept");
        drop(server_b);
        let swept = async {
            for _ in 0..100 {
                pool.sweep(long);
                if pool.idle_count() == 0 {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            false
        };
        assert!(swept.await, "the closed TLS connection is still pooled");
    }
}

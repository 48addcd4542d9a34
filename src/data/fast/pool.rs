//! Idle upstream connections of the fast path, per endpoint address, with a sweeper that
//! drops the stale ones. Knows nothing of requests; never holds its lock across an await.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

/// Idle connections kept per endpoint.
const MAX_IDLE_PER_ENDPOINT: usize = 128;
/// How often the pool drops connections idle for longer than `--server-timeout` or closed.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Idle connections to endpoints, newest last. Kept apart from Pingora's pool: each path
/// reuses its own. A task started with the first returned connection drops, once a second,
/// those idle for longer than `--server-timeout`, those the backend closed, and endpoints
/// with nothing left (including those no longer in the table), so a quiet proxy holds no
/// dead sockets.
#[derive(Default)]
pub struct Pool {
    idle: Mutex<HashMap<SocketAddr, Vec<(TcpStream, Instant)>>>,
    sweeper: std::sync::OnceLock<()>,
}

impl Pool {
    /// The most recently returned connection to `addr` that has been idle for less than
    /// `max_idle`.
    pub fn take(&self, addr: SocketAddr, max_idle: Duration) -> Option<TcpStream> {
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.get_mut(&addr)?;
        while let Some((up, since)) = list.pop() {
            if now.duration_since(since) < max_idle && idle_and_open(&up) {
                return Some(up);
            }
        }
        None
    }

    pub fn put(self: &Arc<Self>, addr: SocketAddr, up: TcpStream, max_idle: Duration) {
        {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            let list = idle.entry(addr).or_default();
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
            list.retain(|(up, since)| now.duration_since(*since) < max_idle && idle_and_open(up));
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
/// it has already seen, so this costs no system call until the socket had an event.
fn idle_and_open(up: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(up.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_pool_gives_back_live_connections_and_sweeps_the_rest() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let pool = Arc::new(Pool::default());
        let long = Duration::from_secs(60);
        let a = TcpStream::connect(addr).await.unwrap();
        let (server_a, _) = listener.accept().await.unwrap();
        let b = TcpStream::connect(addr).await.unwrap();
        let (_server_b, _) = listener.accept().await.unwrap();
        pool.put(addr, a, long);
        pool.put(addr, b, long);
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
        assert!(pool.take(addr, long).is_some());
        assert!(pool.take(addr, long).is_none());
        // Idle longer than allowed: neither taken nor kept.
        let c = TcpStream::connect(addr).await.unwrap();
        let (_server_c, _) = listener.accept().await.unwrap();
        pool.put(addr, c, long);
        tokio::time::sleep(Duration::from_millis(30)).await;
        pool.sweep(Duration::from_millis(10));
        assert_eq!(pool.idle_count(), 0);
    }
}

//! HTTP/2 client connections: the loop that accepts their streams, in place of Pingora's
//! (`pingora::apps::ServerApp::process_new`), so that the fast path can take the streams it
//! serves (`fast::h2`) and hand the others to Pingora's proxy, and so that the work a
//! connection starts is bounded. Pingora's rules for the connection are kept: its request
//! checks (`HttpSession::from_h2_conn`, with the same budget of refused streams), the stream
//! and header-list limits of its `H2Options`, graceful shutdown with GOAWAY, and the idle
//! timeout. This module decides nothing about requests and knows nothing of the table.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use pingora::apps::HttpServerApp;
use pingora::protocols::http::ServerSession;
use pingora::protocols::http::v2::server::{self, H2Accept, HttpSession};
use pingora::protocols::{Digest, Stream};
use pingora::server::ShutdownWatch;
use tokio::sync::Notify;

use crate::data::fast::FastPath;

/// Streams refused by Pingora's request checks before the connection is closed (Pingora's
/// own loop allows as many; its constant is private).
const MAX_MALFORMED_STREAMS: usize = 32;

/// Streams of one connection being served at once. HTTP/2 limits a client to 100 open streams
/// (Pingora's `SETTINGS_MAX_CONCURRENT_STREAMS`), but a stream the client resets is closed for
/// HTTP/2 at once while its work here goes on: without this bound, opening and resetting
/// streams ("rapid reset", CVE-2023-44487) would start backend requests without limit. Twice
/// the HTTP/2 limit, so that a client keeping within it is never refused.
const MAX_STREAMS_IN_FLIGHT: usize = 200;

/// Serves one HTTP/2 client connection (TLS with ALPN `h2`, or h2c with prior knowledge)
/// until it ends: taken streams through `fast`, the others through `app`.
pub async fn serve<A>(
    fast: Option<&Arc<FastPath>>,
    app: &Arc<A>,
    stream: Stream,
    shutdown: &ShutdownWatch,
) where
    A: HttpServerApp + Send + Sync + 'static,
{
    let digest = Arc::new(Digest {
        ssl_digest: stream.get_ssl_digest(),
        timing_digest: stream.get_timing_digest(),
        proxy_digest: stream.get_proxy_digest(),
        socket_digest: stream.get_socket_digest(),
    });
    let Ok(mut conn) = server::handshake(stream, app.h2_options()).await else {
        return;
    };
    let idle_timeout = app.server_options().and_then(|o| o.h2_idle_timeout);
    let active = Arc::new(Active::default());
    let mut watch = shutdown.clone();
    let mut draining = false;
    let mut malformed = 0;
    // Made once for the connection, not once per stream: made at every stream's turn of the
    // loop, each registered a waiter (and the idle wait, with no stream in flight, a timer).
    let changed = watch.changed();
    let idle = active.idle_for(idle_timeout.unwrap_or_default());
    tokio::pin!(changed, idle);
    loop {
        // `from_h2_conn` drives the whole connection (it writes what the streams queued).
        let next = if draining {
            HttpSession::from_h2_conn(&mut conn, digest.clone()).await
        } else {
            tokio::select! {
                biased;
                _ = &mut changed => {
                    conn.graceful_shutdown();
                    draining = true;
                    continue;
                }
                next = HttpSession::from_h2_conn(&mut conn, digest.clone()) => next,
                () = &mut idle, if idle_timeout.is_some() => {
                    return;
                }
            }
        };
        let mut session = match next {
            Err(_) | Ok(None) => return,
            Ok(Some(H2Accept::Rejected)) => {
                malformed += 1;
                if malformed > MAX_MALFORMED_STREAMS {
                    return;
                }
                continue;
            }
            // Boxed once: the stream's exchanges hand it on, and each move of the 536 bytes
            // was a copy.
            Ok(Some(H2Accept::Session(session))) => Box::new(session),
        };
        if active.count.load(Ordering::Relaxed) >= MAX_STREAMS_IN_FLIGHT {
            // Not processed: a client may retry it (RFC 9113 §8.7).
            session.shutdown_with_reason(h2::Reason::REFUSED_STREAM);
            continue;
        }
        let busy = active.start();
        let fast = fast.cloned();
        let app = app.clone();
        let shutdown = shutdown.clone();
        let digest = digest.clone();
        // The exchanges are boxed so that the task stays small (`serve_stream` boxes its own),
        // and the task itself too: tokio copies a task's future whole into its cell and again
        // at each change of stage, which for this one (the 536-byte session and the state
        // around it) cost 1.7k instructions per stream, 1.9 % of a relayed gRPC call.
        tokio::spawn(Box::pin(async move {
            let _busy = busy;
            let session = match &fast {
                Some(fast) => fast.serve_stream(session, &digest).await,
                None => Some(session),
            };
            if let Some(session) = session {
                Box::pin(app.process_new_http(ServerSession::new_http2(*session), &shutdown)).await;
            }
        }));
    }
}

/// The streams in flight on a connection, so that its idle timeout runs only while there are
/// none (a client's here, a backend's in `fast::h2_pool`).
#[derive(Default)]
pub(crate) struct Active {
    count: AtomicUsize,
    /// Woken when the last stream in flight ends.
    idle: Notify,
}

/// One stream in flight (see `Active`).
pub(crate) struct Busy(Arc<Active>);

impl Active {
    pub(crate) fn start(self: &Arc<Self>) -> Busy {
        self.count.fetch_add(1, Ordering::Relaxed);
        Busy(self.clone())
    }

    /// Streams in flight now.
    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Returns once no stream has been in flight for `timeout`. Right also when made once and
    /// awaited across many streams (as `serve` and the pool's connection task do): a stream
    /// that comes and goes during the wait starts it again from its end.
    pub(crate) async fn idle_for(&self, timeout: Duration) {
        loop {
            while self.count.load(Ordering::Relaxed) != 0 {
                self.idle.notified().await;
            }
            let quiet = tokio::time::sleep(timeout);
            tokio::pin!(quiet);
            loop {
                tokio::select! {
                    () = &mut quiet => break,
                    // The last stream in flight ended (one came and went): quiet from now.
                    () = self.idle.notified() => {
                        quiet.as_mut().reset(tokio::time::Instant::now() + timeout);
                    }
                }
            }
            if self.count.load(Ordering::Relaxed) == 0 {
                return;
            }
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.0.idle.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The idle wait is made once per connection (`serve`, and the pool's connection task), so
    /// it must count from the last stream's end, not from when it began.
    #[tokio::test(start_paused = true)]
    async fn a_stream_that_comes_and_goes_during_the_idle_wait_restarts_it() {
        let active = Arc::new(Active::default());
        let started = tokio::time::Instant::now();
        let idle = active.idle_for(Duration::from_secs(10));
        tokio::pin!(idle);
        // Idle from the start: 4 s in, a stream comes and goes within a second.
        tokio::select! {
            () = &mut idle => panic!("idle before any timeout"),
            () = tokio::time::sleep(Duration::from_secs(4)) => {}
        }
        let busy = active.start();
        tokio::select! {
            () = &mut idle => panic!("idle with a stream in flight"),
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        drop(busy);
        idle.await;
        // Not at 10 s (the first wait's end) but 10 s after the stream ended.
        assert_eq!(started.elapsed().as_secs(), 15);
    }
}

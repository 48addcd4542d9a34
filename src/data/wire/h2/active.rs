//! The streams in flight on an HTTP/2 connection of the fast path's (a client's in
//! `engine::http2`, a backend's in `upstream::h2_pool`), so that the connection's idle timeout
//! runs only while there are none. It counts and waits; it reads and writes nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// The streams in flight on a connection, so that its idle timeout runs only while there are
/// none (a client's in `engine::http2`, a backend's in `upstream::h2_pool`).
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

//! Process lifecycle: readiness while shutting down, and the graceful-shutdown sequence.
//!
//! On SIGTERM the pod turns not-ready at once, keeps serving for `--shutdown-delay` so that the
//! endpoint removal can spread through the cluster, then stops accepting and lets in-flight work
//! drain for at most `--shutdown-grace`, exiting as soon as nothing is in flight. SIGINT exits
//! fast. Work in flight is counted with `Active` guards held by the data plane. This module
//! must not know about routing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora::server::{ShutdownSignal, ShutdownSignalWatch};
use tokio::signal::unix::{SignalKind, signal};

/// How often the drain watcher looks at the in-flight count.
const DRAIN_POLL: Duration = Duration::from_millis(50);

/// Shared shutdown state.
#[derive(Debug)]
pub struct Lifecycle {
    shutting_down: AtomicBool,
    active: AtomicUsize,
    /// Turns true with `shutting_down`, for tasks that act on it at once (the leader
    /// election releases its Lease at SIGTERM, not after the shutdown delay).
    stopping: tokio::sync::watch::Sender<bool>,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            shutting_down: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            stopping: tokio::sync::watch::Sender::new(false),
        }
    }
}

impl Lifecycle {
    pub fn new() -> Arc<Lifecycle> {
        Arc::new(Lifecycle::default())
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// Requests (or TCP connections) in flight now.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Acquire)
    }

    /// Counts one unit of work in flight until the guard drops.
    pub fn enter(self: &Arc<Self>) -> Active {
        self.active.fetch_add(1, Ordering::AcqRel);
        Active(Arc::clone(self))
    }

    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
        self.stopping.send_replace(true);
    }

    /// True once shutdown has begun (SIGTERM), without polling.
    pub fn stopping(&self) -> tokio::sync::watch::Receiver<bool> {
        self.stopping.subscribe()
    }
}

/// One unit of work in flight.
#[derive(Debug)]
pub struct Active(Arc<Lifecycle>);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The signal handling given to Pingora's `Server::run`.
pub struct Signals {
    pub lifecycle: Arc<Lifecycle>,
    pub delay: Duration,
    pub grace: Duration,
}

#[async_trait]
impl ShutdownSignalWatch for Signals {
    async fn recv(&self) -> ShutdownSignal {
        let (Ok(mut term), Ok(mut int), Ok(mut quit)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::quit()),
        ) else {
            tracing::error!("cannot install signal handlers; shutting down");
            return ShutdownSignal::FastShutdown;
        };
        tokio::select! {
            _ = int.recv() => {
                tracing::info!("SIGINT: fast shutdown");
                return ShutdownSignal::FastShutdown;
            }
            _ = quit.recv() => {
                tracing::info!("SIGQUIT: fast shutdown");
                return ShutdownSignal::FastShutdown;
            }
            _ = term.recv() => {}
        }
        self.lifecycle.begin_shutdown();
        tracing::info!(delay = ?self.delay, "SIGTERM: not ready; serving on while endpoint removal spreads");
        tokio::select! {
            _ = tokio::time::sleep(self.delay) => {}
            _ = int.recv() => return ShutdownSignal::FastShutdown,
        }
        tracing::info!(grace = ?self.grace, active = self.lifecycle.active(), "closing listeners, draining");
        spawn_drain_watch(Arc::clone(&self.lifecycle), self.grace);
        ShutdownSignal::GracefulTerminate
    }
}

/// Pingora waits out its whole grace period; this exits as soon as nothing is in flight (or
/// when the grace period ends).
fn spawn_drain_watch(lifecycle: Arc<Lifecycle>, grace: Duration) {
    let started = Instant::now();
    let spawned = std::thread::Builder::new()
        .name("drain-watch".into())
        .spawn(move || {
            // Let the listeners close first so no new work sneaks in after a zero reading.
            std::thread::sleep(DRAIN_POLL * 2);
            while lifecycle.active() > 0 && started.elapsed() < grace {
                std::thread::sleep(DRAIN_POLL);
            }
            tracing::info!(
                active = lifecycle.active(),
                drained_in = ?started.elapsed(),
                "drain finished; exiting"
            );
            std::process::exit(0);
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the drain watcher; Pingora's grace period applies");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn active_guards_count_and_shutdown_flag() {
        let l = Lifecycle::new();
        let a = l.enter();
        let b = l.enter();
        assert_eq!(l.active(), 2);
        drop(a);
        assert_eq!(l.active(), 1);
        drop(b);
        assert_eq!(l.active(), 0);
        assert!(!l.is_shutting_down());
        let stopping = l.stopping();
        assert!(!*stopping.borrow());
        l.begin_shutdown();
        assert!(l.is_shutting_down());
        assert!(*stopping.borrow());
    }
}

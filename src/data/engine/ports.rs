//! The reconciler every engine that opens ports at runtime shares (`reconcile`): the TCP
//! frontends, the Gateway UDP listeners and the Gateway listeners' own HTTP ports. It polls the
//! table (the table module stays free of tokio), and on a swap — or when a port that could not
//! be bound is due again — makes the set of open ports match what the engine wants: ports gone
//! are closed (their serving task stopped and waited for, so the port is free again), new ones
//! bound, a port whose kind changed reopened. A port that cannot be bound is warned about once
//! per episode and retried every `BIND_RETRY`. It must not know what a port serves: the engine
//! says (`Ports`).

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::table::{RoutingTable, TableReader};

/// How often the table is checked for a swap.
const POLL_INTERVAL: Duration = Duration::from_millis(150);

/// How long a port that could not be bound waits before the next try.
pub(super) const BIND_RETRY: Duration = Duration::from_secs(5);

/// Where a socket is bound: a Gateway's own address (`None`: the bind address) and port.
pub(super) type At = (Option<IpAddr>, u16);

/// The socket address of `at` where `bind` is the bind address (`--bind-address`).
pub(super) fn socket_addr(bind: IpAddr, (address, port): At) -> SocketAddr {
    SocketAddr::new(address.unwrap_or(bind), port)
}

/// An engine's ports.
#[async_trait]
pub(super) trait Ports: Send + Sync {
    /// What a port serves, for logs, and to tell when it must be reopened.
    type What: Clone + fmt::Display + Send + Sync;

    /// "TCP frontend", "UDP listener", ...: what the logs call one port.
    const NOUN: &'static str;

    /// The ports the table wants open, each with what it serves.
    fn wanted(&self, table: &RoutingTable) -> BTreeMap<At, Self::What>;

    /// Whether a port open for `old` must be reopened to serve `new` (else it keeps its
    /// socket and only its `What` changes, which is the default: the serving task reads the
    /// table for each connection or flow).
    fn reopens(&self, _old: &Self::What, _new: &Self::What) -> bool {
        false
    }

    /// Binds `at` and serves it until `stop` fires (or is dropped); the bind error otherwise.
    async fn open(
        &self,
        at: At,
        what: &Self::What,
        stop: oneshot::Receiver<()>,
    ) -> io::Result<JoinHandle<()>>;
}

/// An open port and the task that serves it.
struct Open<W> {
    what: W,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl<W> Open<W> {
    /// Stops the task and waits until it has dropped the socket, so the port is free again
    /// when this returns (a port re-added at once can bind it).
    async fn close(self) {
        drop(self.stop);
        let _ = tokio::time::timeout(Duration::from_secs(1), self.task).await;
    }
}

/// Keeps `ports`'s ports as `table` says until `shutdown`, then closes them all.
pub(super) async fn reconcile<P: Ports>(
    ports: &P,
    table: &TableReader,
    mut shutdown: ShutdownWatch,
) {
    let mut open: BTreeMap<At, Open<P::What>> = BTreeMap::new();
    let mut failed: BTreeMap<At, Instant> = BTreeMap::new();
    let mut last: Option<Arc<RoutingTable>> = None;
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            _ = tokio::time::sleep(POLL_INTERVAL) => {}
        }
        if !table.is_published() {
            continue;
        }
        let now = table.load();
        let swapped = last.as_ref().is_none_or(|l| !Arc::ptr_eq(l, &now));
        let retry_due = failed.values().any(|at| at.elapsed() >= BIND_RETRY);
        if !swapped && !retry_due {
            continue;
        }
        let wanted = ports.wanted(&now);
        // Gone, or to be reopened for what it serves now.
        let closing: Vec<At> = open
            .iter()
            .filter(|(at, o)| wanted.get(at).is_none_or(|w| ports.reopens(&o.what, w)))
            .map(|(at, _)| *at)
            .collect();
        for at in closing {
            if let Some(o) = open.remove(&at) {
                tracing::info!(port = at.1, address = ?at.0, what = %o.what, "{} closed", P::NOUN);
                o.close().await;
            }
        }
        // A port that stays keeps its socket: it serves whatever the table says.
        for (at, o) in open.iter_mut() {
            if let Some(what) = wanted.get(at) {
                o.what.clone_from(what);
            }
        }
        failed.retain(|at, _| wanted.contains_key(at));
        for (&at, what) in &wanted {
            let retry_later = failed.get(&at).is_some_and(|t| t.elapsed() < BIND_RETRY);
            if open.contains_key(&at) || retry_later {
                continue;
            }
            let (stop, stopped) = oneshot::channel();
            match ports.open(at, what, stopped).await {
                Ok(task) => {
                    tracing::info!(port = at.1, address = ?at.0, what = %what, "{} open", P::NOUN);
                    failed.remove(&at);
                    let what = what.clone();
                    open.insert(at, Open { what, stop, task });
                }
                Err(e) => {
                    // Once per episode: the retries stay quiet until it works or goes away.
                    if !failed.contains_key(&at) {
                        tracing::warn!(
                            port = at.1,
                            address = ?at.0,
                            what = %what,
                            error = %e,
                            "cannot listen for a {}; retrying every {}s",
                            P::NOUN,
                            BIND_RETRY.as_secs()
                        );
                    }
                    failed.insert(at, Instant::now());
                }
            }
        }
        last = Some(now);
    }
    for (_, o) in open {
        o.close().await;
    }
}

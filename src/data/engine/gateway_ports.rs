//! Gateway HTTP and HTTPS listeners on ports of their own (`GatewayPorts`): a TCP listener per
//! port the table lists (`GatewayRoutes::ported`, on the Gateway's own address with
//! `--gateway-addresses`), opened and closed at runtime as tables are swapped (a reconciler,
//! as the TCP frontends'), each accepted connection handed whole to the HTTP or HTTPS
//! application switchyard's own ports use — the same guard, TLS handshake, fast path and
//! Pingora fallback — built to route by the connection's local port, so that a port's
//! requests see its listeners' routes alone. Pingora's listening services are fixed at
//! startup; this is the seam that lets a table open ports. It must not know about Kubernetes
//! or translation, and reads the table only through `TableReader`.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora::apps::ServerApp;
use pingora::protocols::l4::stream::Stream as L4Stream;
use pingora::protocols::{GetSocketDigest, SocketDigest};
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::table::{RoutingTable, TableReader};

/// How often the table is checked for a swap.
const POLL_INTERVAL: Duration = Duration::from_millis(150);

/// How long a port that could not be bound waits before the next try.
const BIND_RETRY: Duration = Duration::from_secs(5);

/// Where a listener is bound: a Gateway's own address (`None`: the bind address) and port.
type At = (Option<IpAddr>, u16);

/// The Gateway listeners' own ports, as one Pingora background service.
pub struct GatewayPorts<A> {
    table: TableReader,
    bind: IpAddr,
    http: Arc<A>,
    /// `None`: no TLS port is configured, so HTTPS listeners' ports are not opened.
    https: Option<Arc<A>>,
}

impl<A> GatewayPorts<A> {
    pub fn new(table: TableReader, bind: IpAddr, http: A, https: Option<A>) -> Self {
        GatewayPorts {
            table,
            bind,
            http: Arc::new(http),
            https: https.map(Arc::new),
        }
    }
}

/// The ports that should be open, and whether each is HTTPS.
fn wanted(table: &RoutingTable) -> Vec<(At, bool)> {
    table
        .gateway
        .ported
        .iter()
        .map(|p| ((p.address, p.port), p.https))
        .collect()
}

/// An open listener and the task that accepts on it.
struct Open {
    https: bool,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

#[async_trait]
impl<A: ServerApp + Send + Sync + 'static> BackgroundService for GatewayPorts<A> {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut open: BTreeMap<At, Open> = BTreeMap::new();
        let mut failed: BTreeMap<At, Instant> = BTreeMap::new();
        let mut last: Option<Arc<RoutingTable>> = None;
        loop {
            tokio::select! {
                _ = shutdown.changed() => break,
                _ = tokio::time::sleep(POLL_INTERVAL) => {}
            }
            if !self.table.is_published() {
                continue;
            }
            let table = self.table.load();
            let swapped = last.as_ref().is_none_or(|l| !Arc::ptr_eq(l, &table));
            let retry_due = failed.values().any(|at| at.elapsed() >= BIND_RETRY);
            if !swapped && !retry_due {
                continue;
            }
            let wanted = wanted(&table);
            // Gone, or now of the other protocol: closed (a changed one opens again below).
            let gone: Vec<At> = open
                .iter()
                .filter(|(at, o)| !wanted.contains(&(**at, o.https)))
                .map(|(at, _)| *at)
                .collect();
            for at in gone {
                if let Some(o) = open.remove(&at) {
                    tracing::info!(port = at.1, address = ?at.0, "Gateway listener port closed");
                    drop(o.stop);
                    let _ = tokio::time::timeout(Duration::from_secs(1), o.task).await;
                }
            }
            failed.retain(|at, _| wanted.iter().any(|(w, _)| w == at));
            for (at, https) in wanted {
                let retry_later = failed.get(&at).is_some_and(|t| t.elapsed() < BIND_RETRY);
                if open.contains_key(&at) || retry_later {
                    continue;
                }
                let app = if https {
                    match &self.https {
                        Some(app) => Arc::clone(app),
                        None => continue,
                    }
                } else {
                    Arc::clone(&self.http)
                };
                let (address, port) = at;
                let addr = SocketAddr::new(address.unwrap_or(self.bind), port);
                match TcpListener::bind(addr).await {
                    Ok(listener) => {
                        tracing::info!(port, ?address, https, "Gateway listener port open");
                        let (stop, stopped) = oneshot::channel();
                        let accept = accept(listener, app, shutdown.clone(), stopped);
                        let task = tokio::spawn(accept);
                        failed.remove(&at);
                        open.insert(at, Open { https, stop, task });
                    }
                    Err(e) => {
                        if !failed.contains_key(&at) {
                            tracing::warn!(
                                port,
                                ?address,
                                error = %e,
                                "cannot listen for a Gateway listener; retrying every {}s",
                                BIND_RETRY.as_secs()
                            );
                        }
                        failed.insert(at, Instant::now());
                    }
                }
            }
            last = Some(table);
        }
        for (_, o) in open {
            drop(o.stop);
            let _ = tokio::time::timeout(Duration::from_secs(1), o.task).await;
        }
    }
}

/// Accepts until `stop` fires (or is dropped), each connection served by `app` in a task of
/// its own, as Pingora's listening service serves one.
async fn accept<A: ServerApp + Send + Sync + 'static>(
    listener: TcpListener,
    app: Arc<A>,
    shutdown: ShutdownWatch,
    mut stop: oneshot::Receiver<()>,
) {
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => accepted,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                tracing::debug!(error = %e, "accept failed on a Gateway listener port");
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let fd = tcp.as_raw_fd();
        let mut stream = L4Stream::from(tcp);
        stream.set_socket_digest(SocketDigest::from_raw_fd(fd));
        let (app, shutdown) = (Arc::clone(&app), shutdown.clone());
        tokio::spawn(async move {
            let mut next: Option<pingora::protocols::Stream> = Some(Box::new(stream));
            while let Some(stream) = next.take() {
                if *shutdown.borrow() {
                    return;
                }
                next = app.process_new(stream, &shutdown).await;
            }
        });
    }
}

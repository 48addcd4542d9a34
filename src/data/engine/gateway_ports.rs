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
use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use pingora::apps::ServerApp;
use pingora::protocols::l4::stream::Stream as L4Stream;
use pingora::protocols::{GetSocketDigest, SocketDigest};
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::data::engine::ports::{At, Ports, reconcile, socket_addr};
use crate::table::{RoutingTable, TableReader};

/// The Gateway listeners' own ports, as one Pingora background service.
pub struct GatewayPorts<A> {
    table: TableReader,
    bind: IpAddr,
    http: Arc<A>,
    /// `None`: no TLS port is configured, so HTTPS listeners' ports are not opened.
    https: Option<Arc<A>>,
    /// The server's shutdown, which the connections' applications watch (set at start).
    shutdown: OnceLock<ShutdownWatch>,
    /// `--work-stealing false`: each connection is placed on one of the service's threads
    /// (as the TCP frontends place theirs), not kept on the accepting one.
    spread: bool,
}

impl<A> GatewayPorts<A> {
    pub fn new(table: TableReader, bind: IpAddr, http: A, https: Option<A>) -> Self {
        GatewayPorts {
            table,
            bind,
            http: Arc::new(http),
            https: https.map(Arc::new),
            shutdown: OnceLock::new(),
            spread: false,
        }
    }

    /// `--work-stealing false`: Pingora's per-thread runtimes, where a task stays on the thread
    /// that spawned it; each connection is then placed on one of the service's threads at
    /// random, its socket registered there.
    pub fn with_spread(mut self, spread: bool) -> Self {
        self.spread = spread;
        self
    }

    fn set_shutdown(&self, shutdown: ShutdownWatch) {
        let _ = self.shutdown.set(shutdown);
    }

    /// The server's shutdown (before start, one that never fires).
    fn shutdown(&self) -> ShutdownWatch {
        self.shutdown
            .get()
            .cloned()
            .unwrap_or_else(|| tokio::sync::watch::channel(false).1)
    }
}

/// A port's protocol, for logs and to reopen a port whose listeners change protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Protocol {
    https: bool,
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.https { "HTTPS" } else { "HTTP" })
    }
}

#[async_trait]
impl<A: ServerApp + Send + Sync + 'static> Ports for GatewayPorts<A> {
    type What = Protocol;
    const NOUN: &'static str = "Gateway listener port";

    /// Every port of the table's, but HTTPS ones while no TLS port is configured.
    fn wanted(&self, table: &RoutingTable) -> BTreeMap<At, Protocol> {
        table
            .gateway
            .ported
            .iter()
            .filter(|p| !p.https || self.https.is_some())
            .map(|p| ((p.address, p.port), Protocol { https: p.https }))
            .collect()
    }

    fn reopens(&self, old: &Protocol, new: &Protocol) -> bool {
        old != new
    }

    async fn open(
        &self,
        at: At,
        protocol: &Protocol,
        stop: oneshot::Receiver<()>,
    ) -> io::Result<JoinHandle<()>> {
        let app = match (&self.https, protocol.https) {
            (Some(app), true) => Arc::clone(app),
            (None, true) => return Err(io::Error::other("no TLS port is configured")),
            (_, false) => Arc::clone(&self.http),
        };
        let listener = TcpListener::bind(socket_addr(self.bind, at)).await?;
        let accepting = Accepting {
            app,
            shutdown: self.shutdown(),
            spread: self.spread,
        };
        Ok(tokio::spawn(accept(listener, accepting, stop)))
    }
}

#[async_trait]
impl<A: ServerApp + Send + Sync + 'static> BackgroundService for GatewayPorts<A> {
    async fn start(&self, shutdown: ShutdownWatch) {
        self.set_shutdown(shutdown.clone());
        reconcile(self, &self.table, shutdown).await;
    }
}

/// What an accept loop hands each connection to, and where.
struct Accepting<A> {
    app: Arc<A>,
    shutdown: ShutdownWatch,
    spread: bool,
}

/// Accepts until `stop` fires (or is dropped), each connection served by the application in
/// a task of its own, as Pingora's listening service serves one.
async fn accept<A: ServerApp + Send + Sync + 'static>(
    listener: TcpListener,
    to: Accepting<A>,
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
        let (app, shutdown) = (Arc::clone(&to.app), to.shutdown.clone());
        if !to.spread {
            tokio::spawn(serve(tcp, app, shutdown));
            continue;
        }
        // Registered again on the thread it is placed on.
        let tcp = match tcp.into_std() {
            Ok(tcp) => tcp,
            Err(e) => {
                tracing::debug!(error = %e, "cannot move a connection");
                continue;
            }
        };
        pingora_runtime::current_handle().spawn(async move {
            match tokio::net::TcpStream::from_std(tcp) {
                Ok(tcp) => serve(tcp, app, shutdown).await,
                Err(e) => tracing::debug!(error = %e, "cannot move a connection"),
            }
        });
    }
}

/// One connection, served by `app` until it is done with it.
async fn serve<A: ServerApp + Send + Sync + 'static>(
    tcp: tokio::net::TcpStream,
    app: Arc<A>,
    shutdown: ShutdownWatch,
) {
    let fd = tcp.as_raw_fd();
    let mut stream = L4Stream::from(tcp);
    stream.set_socket_digest(SocketDigest::from_raw_fd(fd));
    let mut next: Option<pingora::protocols::Stream> = Some(Box::new(stream));
    while let Some(stream) = next.take() {
        if *shutdown.borrow() {
            return;
        }
        next = app.process_new(stream, &shutdown).await;
    }
}

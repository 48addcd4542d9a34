//! Gateway UDP listeners (UDPRoute): a socket per UDP port the table lists, opened and closed
//! at runtime as tables are swapped (a reconciler, as the TCP frontends'), relaying datagrams
//! per client flow. A flow is a client's address and port: its first datagram picks an
//! endpoint (`decide::datagram`), a socket connected to that endpoint is made for it, every
//! datagram of the client goes there, and every datagram the endpoint sends back goes to the
//! client from the listener's socket. A flow ends after `--udp-idle-timeout` without a
//! datagram either way, or when its endpoint refuses (ICMP port unreachable); the client's
//! next datagram starts a new one. An ended flow writes one access-log line (`kind=udp`).
//!
//! Bounded: at most `--udp-max-flows` flows per port (a new client past it has its datagrams
//! dropped, counted, until a flow ends); one datagram buffer per port and one per worker
//! thread for the endpoints' answers, never one per flow; a send that would block is dropped
//! and counted (UDP may lose datagrams; nothing is queued for a flow). A table swap leaves
//! every flow on its endpoint; a port that leaves the table closes its socket and its flows.
//! This module must not know about Kubernetes or translation, and reads the table only
//! through `TableReader`; which endpoint a flow gets is the decision core's.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::data::engine::ports::{At, Ports, reconcile, socket_addr};
use crate::decide::datagram::flow_backend;
use crate::ops::access_log::{AccessLog, TcpRecord};
use crate::ops::metrics::{Metrics, UdpFrontendMetrics};
use crate::table::{RoutingTable, TableReader};

/// How long a new flow's first datagram may wait for its socket.
const FIRST_SEND: Duration = Duration::from_millis(100);

/// The largest UDP payload.
const DATAGRAM: usize = 65_535;

thread_local! {
    /// The endpoints' answers are read here, one at a time per thread, and sent on at once.
    static ANSWER: RefCell<Vec<u8>> = RefCell::new(vec![0; DATAGRAM]);
}

/// `--udp-idle-timeout`, `--udp-max-flows`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpSettings {
    pub idle: Duration,
    pub max_flows: usize,
}

impl Default for UdpSettings {
    fn default() -> Self {
        UdpSettings {
            idle: Duration::from_secs(60),
            max_flows: 16_384,
        }
    }
}

/// The UDP listeners, as one Pingora background service.
pub struct UdpFrontends {
    table: TableReader,
    bind: IpAddr,
    settings: UdpSettings,
    metrics: Arc<Metrics>,
    access_log: Arc<AccessLog>,
}

impl UdpFrontends {
    pub fn new(
        table: TableReader,
        bind: IpAddr,
        settings: UdpSettings,
        metrics: Arc<Metrics>,
    ) -> Self {
        UdpFrontends {
            table,
            bind,
            settings,
            metrics,
            access_log: Arc::new(AccessLog::off()),
        }
    }

    /// Records each flow in `access_log` when it ends (without this, in no log).
    pub fn with_access_log(mut self, access_log: Arc<AccessLog>) -> Self {
        self.access_log = access_log;
        self
    }
}

#[async_trait]
impl Ports for UdpFrontends {
    /// For logs: the frontend label.
    type What = String;
    const NOUN: &'static str = "Gateway UDP listener";

    /// Every UDP port the table lists, named by its frontend label.
    fn wanted(&self, table: &RoutingTable) -> BTreeMap<At, String> {
        table
            .streams
            .udp
            .iter()
            .map(|p| ((p.address, p.port), format!("udp:{}", p.port)))
            .collect()
    }

    async fn open(
        &self,
        at: At,
        frontend: &String,
        stop: oneshot::Receiver<()>,
    ) -> io::Result<JoinHandle<()>> {
        let socket = UdpSocket::bind(socket_addr(self.bind, at)).await?;
        let port_task = Port {
            socket: Arc::new(socket),
            at,
            table: self.table.clone(),
            settings: self.settings,
            metrics: self.metrics.data.udp_frontend(frontend),
            access_log: Arc::clone(&self.access_log),
            frontend: frontend.clone(),
        };
        Ok(tokio::spawn(port_task.serve(stop)))
    }
}

#[async_trait]
impl BackgroundService for UdpFrontends {
    async fn start(&self, shutdown: ShutdownWatch) {
        reconcile(self, &self.table, shutdown).await;
    }
}

/// One UDP listener.
struct Port {
    socket: Arc<UdpSocket>,
    at: At,
    table: TableReader,
    settings: UdpSettings,
    metrics: UdpFrontendMetrics,
    access_log: Arc<AccessLog>,
    /// `udp:PORT`, as metrics and the access log name it.
    frontend: String,
}

/// One client's flow.
struct Flow {
    /// Tells apart a flow from the one after it of the same client, when the first's end
    /// arrives late.
    id: u64,
    upstream: Arc<UdpSocket>,
    /// When a datagram last went either way (milliseconds since the port opened).
    last: Arc<AtomicU64>,
    task: JoinHandle<()>,
    /// What the access log says of it when it ends.
    record: FlowRecord,
}

/// A flow's access-log facts: where it went and how much it carried.
struct FlowRecord {
    endpoint: SocketAddr,
    /// The Service port (`namespace/name:port`).
    service: Box<str>,
    started: Instant,
    generation: u64,
    bytes_in: u64,
    /// Counted by the flow's way back.
    bytes_out: Arc<AtomicU64>,
}

impl Port {
    /// Reads the clients' datagrams until `stop` fires (or is dropped), starting and ending
    /// flows.
    async fn serve(self, mut stop: oneshot::Receiver<()>) {
        let origin = Instant::now();
        let mut flows: HashMap<SocketAddr, Flow> = HashMap::new();
        let (ended_tx, mut ended) = mpsc::unbounded_channel::<(SocketAddr, u64)>();
        let mut next_id = 0u64;
        let mut buf = vec![0u8; DATAGRAM];
        loop {
            tokio::select! {
                _ = &mut stop => break,
                Some((client, id)) = ended.recv() => {
                    if flows.get(&client).is_some_and(|f| f.id == id)
                        && let Some(f) = flows.remove(&client)
                    {
                        self.metrics.flows.dec();
                        self.log(client, &f.record);
                    }
                }
                read = self.socket.recv_from(&mut buf) => {
                    let (n, client) = match read {
                        Ok(read) => read,
                        Err(e) => {
                            // An ICMP error for an earlier answer, and the like: not this
                            // socket's end.
                            tracing::debug!(port = self.at.1, error = %e, "UDP receive failed");
                            continue;
                        }
                    };
                    self.metrics.datagrams_in.inc();
                    self.metrics.bytes_in.inc_by(n as u64);
                    let now = millis(origin.elapsed());
                    let new = !flows.contains_key(&client);
                    if new {
                        if flows.len() >= self.settings.max_flows {
                            self.metrics.dropped_full.inc();
                            continue;
                        }
                        let Some((upstream, record)) = self.open_flow(client).await else {
                            self.metrics.dropped_no_backend.inc();
                            continue;
                        };
                        next_id += 1;
                        let last = Arc::new(AtomicU64::new(now));
                        let answers = Answers {
                            upstream: Arc::clone(&upstream),
                            listener: Arc::clone(&self.socket),
                            client,
                            last: Arc::clone(&last),
                            origin,
                            idle: self.settings.idle,
                            metrics: self.metrics.clone(),
                            bytes_out: Arc::clone(&record.bytes_out),
                        };
                        let task = tokio::spawn(answers.relay(ended_tx.clone(), next_id));
                        self.metrics.flows.inc();
                        let flow = Flow { id: next_id, upstream, last, task, record };
                        flows.insert(client, flow);
                    }
                    let Some(flow) = flows.get_mut(&client) else {
                        continue;
                    };
                    flow.last.store(now, Ordering::Relaxed);
                    flow.record.bytes_in += n as u64;
                    // A new socket is not known writable yet (tokio learns it from the
                    // reactor): its first datagram waits for that, bounded; later ones never
                    // wait.
                    let sent = if new {
                        let first = flow.upstream.send(&buf[..n]);
                        matches!(
                            tokio::time::timeout(FIRST_SEND, first).await,
                            Ok(Ok(_))
                        )
                    } else {
                        flow.upstream.try_send(&buf[..n]).is_ok()
                    };
                    if !sent {
                        self.metrics.dropped_send.inc();
                    }
                }
            }
        }
        for (client, f) in flows.drain() {
            f.task.abort();
            self.metrics.flows.dec();
            self.log(client, &f.record);
        }
    }

    /// The access-log record of `client`'s flow, now that it has ended.
    fn log(&self, client: SocketAddr, r: &FlowRecord) {
        if !self.access_log.enabled() {
            return;
        }
        self.access_log.udp(&TcpRecord {
            timestamp: SystemTime::now(),
            client: Some(client),
            frontend: &self.frontend,
            entry: &r.service,
            endpoint: Some(r.endpoint),
            bytes_in: r.bytes_in,
            bytes_out: r.bytes_out.load(Ordering::Relaxed),
            duration: r.started.elapsed(),
            connect: None,
            generation: r.generation,
            retries: 0,
            error: None,
        });
    }

    /// A socket connected to the endpoint a new flow from `client` goes to; `None`: none
    /// takes it (or the socket could not be made).
    async fn open_flow(&self, client: SocketAddr) -> Option<(Arc<UdpSocket>, FlowRecord)> {
        let table = self.table.load();
        let (backend, endpoint) =
            flow_backend(table.streams.udp_port(self.at.0, self.at.1)?, client)?;
        let record = FlowRecord {
            endpoint,
            service: backend.service.clone(),
            started: Instant::now(),
            generation: table.generation,
            bytes_in: 0,
            bytes_out: Arc::new(AtomicU64::new(0)),
        };
        let any: IpAddr = match endpoint {
            SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
            SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
        };
        let socket = match UdpSocket::bind(SocketAddr::new(any, 0)).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(%endpoint, error = %e, "cannot open a UDP socket for a flow");
                return None;
            }
        };
        if let Err(e) = socket.connect(endpoint).await {
            tracing::debug!(%endpoint, error = %e, "cannot connect a UDP flow");
            return None;
        }
        Some((Arc::new(socket), record))
    }
}

/// A flow's way back: the endpoint's datagrams to the client.
struct Answers {
    upstream: Arc<UdpSocket>,
    listener: Arc<UdpSocket>,
    client: SocketAddr,
    last: Arc<AtomicU64>,
    origin: Instant,
    idle: Duration,
    metrics: UdpFrontendMetrics,
    /// The flow's bytes to the client, for its access-log record.
    bytes_out: Arc<AtomicU64>,
}

impl Answers {
    /// Relays until the flow has been idle for `idle` (either way) or its endpoint refuses;
    /// then says so on `ended`.
    async fn relay(self, ended: mpsc::UnboundedSender<(SocketAddr, u64)>, id: u64) {
        loop {
            let quiet =
                millis(self.origin.elapsed()).saturating_sub(self.last.load(Ordering::Relaxed));
            let left = self.idle.saturating_sub(Duration::from_millis(quiet));
            if left.is_zero() {
                break;
            }
            tokio::select! {
                ready = self.upstream.readable() => {
                    if ready.is_err() || !self.answer() {
                        break;
                    }
                }
                _ = tokio::time::sleep(left) => {}
            }
        }
        let _ = ended.send((self.client, id));
    }

    /// Sends the endpoint's datagram at hand (if any) to the client; `false`: the endpoint
    /// refused (nothing listens there any more) and the flow ends.
    fn answer(&self) -> bool {
        ANSWER.with(|buf| {
            let mut buf = buf.borrow_mut();
            match self.upstream.try_recv(&mut buf) {
                Ok(n) => {
                    self.metrics.datagrams_out.inc();
                    self.metrics.bytes_out.inc_by(n as u64);
                    self.bytes_out.fetch_add(n as u64, Ordering::Relaxed);
                    if self.listener.try_send_to(&buf[..n], self.client).is_err() {
                        self.metrics.dropped_send.inc();
                    }
                    self.last
                        .store(millis(self.origin.elapsed()), Ordering::Relaxed);
                    true
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => true,
                Err(e) => {
                    tracing::debug!(client = %self.client, error = %e, "UDP flow's endpoint refused");
                    false
                }
            }
        })
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

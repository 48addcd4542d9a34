//! Prometheus metrics: one `Metrics` value holding one registry, created at startup and shared
//! by `Arc`. Label sets are bounded: warning reasons, resource kinds, frontends, status
//! classes, entry names (series dropped when the entry leaves the table) and endpoint
//! addresses (produced at scrape time from the live table, so they vanish with the endpoint);
//! never paths or client addresses.
//!
//! The request path records through per-entry handles (`with_entry`) resolved on the entry's
//! first request and kept while the entry stays in the table, so after that request it does
//! not hash label strings; an entry nobody calls costs one empty slot and renders no series. This module knows only `prometheus`, `arc-swap`, jemalloc's
//! statistics and `decide::grpc::Ending` (the bounded gRPC code label); the modules that
//! observe things call its methods.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use prometheus::core::Collector;
use prometheus::proto::MetricFamily;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::decide::grpc::Ending;

/// Every metric of the control plane.
/// The `result` label values of `switchyard_mirror_requests_total`.
pub const MIRROR_RESULTS: [&str; 4] = ["sent", "failed", "skipped", "dropped"];

/// The `result` label values of `switchyard_passthrough_connections_total`.
pub const PASSTHROUGH_RESULTS: [&str; 3] = ["relayed", "unavailable", "failed"];

/// The `result` label values of `switchyard_external_auth_requests_total`.
pub const EXTERNAL_AUTH_RESULTS: [&str; 3] = ["allowed", "denied", "failed"];

pub struct Metrics {
    registry: Registry,
    /// The `process_*` series, unprefixed as every exporter names them (the prometheus crate's
    /// process collector).
    process: Registry,
    /// The endpoint series, written at each scrape (`register_endpoints`).
    endpoints: OnceLock<EndpointSeries>,
    pub table_generation: IntGauge,
    pub table_swaps_total: IntCounter,
    pub table_build_seconds: Histogram,
    /// From the first watch event of a batch to the table built from it being live.
    pub propagation_latency_seconds: Histogram,
    pub translate_warnings_total: IntCounterVec,
    /// Always 1; its labels say what is running.
    pub build_info: IntGaugeVec,
    pub watch_errors_total: IntCounterVec,
    pub relists_total: IntCounterVec,
    pub kube_events_total: IntCounterVec,
    /// Ingresses by what switchyard does with them (`INGRESS_STATES`), as of the last build.
    pub ingresses: IntGaugeVec,
    /// 1 while this replica holds the leader-election Lease (`control::lease`).
    pub leader: IntGauge,
    /// Ingress and Gateway API status writes by the leader, by result (`STATUS_WRITE_RESULTS`).
    pub status_writes_total: IntCounterVec,
    /// Bytes the process has allocated and not freed (jemalloc's `stats.allocated`), read at
    /// scrape time. It shows whether memory grows with table generations without RSS's noise
    /// (pages kept for reuse, purging that lags). 0 where jemalloc is not the global allocator
    /// (the library used without the `switchyard` binary).
    pub heap_allocated_bytes: IntGauge,
    /// The data plane's metrics (requests, connections, health, TCP, TLS).
    pub data: DataMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// `switchyard_build_info{version, commit, pingora} 1`, as Prometheus exporters do.
fn build_info() -> IntGaugeVec {
    let g = IntGaugeVec::new(
        Opts::new("build_info", "Always 1: the running build, in its labels"),
        &["version", "commit", "pingora"],
    )
    .unwrap_or_else(|_| unreachable_metric());
    g.with_label_values(&[
        env!("CARGO_PKG_VERSION"),
        env!("SWITCHYARD_GIT_COMMIT"),
        env!("SWITCHYARD_PINGORA_VERSION"),
    ])
    .set(1);
    g
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new_custom(Some("switchyard".into()), None).unwrap_or_default();
        let fast_buckets = vec![
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
        ];
        let latency_buckets = vec![
            0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 1.5, 2.5, 5.0, 10.0,
        ];
        let m = Metrics {
            table_generation: IntGauge::new(
                "table_generation",
                "Generation of the routing table now serving",
            )
            .unwrap_or_else(|_| unreachable_metric()),
            table_swaps_total: IntCounter::new("table_swaps_total", "Routing tables swapped in")
                .unwrap_or_else(|_| unreachable_metric()),
            table_build_seconds: Histogram::with_opts(
                HistogramOpts::new(
                    "table_build_seconds",
                    "Time to translate objects into a routing table",
                )
                .buckets(fast_buckets),
            )
            .unwrap_or_else(|_| unreachable_metric()),
            propagation_latency_seconds: Histogram::with_opts(
                HistogramOpts::new(
                    "propagation_latency_seconds",
                    "Time from a watch event arriving to the table that includes it being live",
                )
                .buckets(latency_buckets),
            )
            .unwrap_or_else(|_| unreachable_metric()),
            translate_warnings_total: IntCounterVec::new(
                Opts::new(
                    "translate_warnings_total",
                    "Warnings raised while translating, by reason",
                ),
                &["reason"],
            )
            .unwrap_or_else(|_| unreachable_metric()),
            watch_errors_total: IntCounterVec::new(
                Opts::new(
                    "watch_errors_total",
                    "Errors of the Kubernetes watch, by resource",
                ),
                &["resource"],
            )
            .unwrap_or_else(|_| unreachable_metric()),
            relists_total: IntCounterVec::new(
                Opts::new(
                    "relists_total",
                    "Full re-lists of a watched resource after the first",
                ),
                &["resource"],
            )
            .unwrap_or_else(|_| unreachable_metric()),
            kube_events_total: IntCounterVec::new(
                Opts::new(
                    "kube_events_total",
                    "Kubernetes Events about Services, by outcome",
                ),
                &["outcome"],
            )
            .unwrap_or_else(|_| unreachable_metric()),
            ingresses: IntGaugeVec::new(
                Opts::new(
                    "ingresses",
                    "Ingresses by what switchyard does with them: served, or left to another \
                     controller (other_class), as of the last table built",
                ),
                &["state"],
            )
            .unwrap_or_else(|_| unreachable_metric()),
            leader: IntGauge::new(
                "leader",
                "1 while this replica holds the leader-election Lease (writes status and Events)",
            )
            .unwrap_or_else(|_| unreachable_metric()),
            status_writes_total: IntCounterVec::new(
                Opts::new(
                    "status_writes_total",
                    "Ingress and Gateway API status writes by the leader, by result",
                ),
                &["result"],
            )
            .unwrap_or_else(|_| unreachable_metric()),
            build_info: build_info(),
            heap_allocated_bytes: IntGauge::new(
                "heap_allocated_bytes",
                "Heap bytes allocated and not yet freed (jemalloc stats.allocated)",
            )
            .unwrap_or_else(|_| unreachable_metric()),
            data: DataMetrics::new(&registry),
            registry,
            process: Registry::new(),
            endpoints: OnceLock::new(),
        };
        // The prometheus crate's own collector (`procfs`): the Go client's names and meanings,
        // so that dashboards built for those work unchanged. Linux only; elsewhere, none.
        register(
            &m.process,
            Box::new(prometheus::process_collector::ProcessCollector::for_self()),
        );
        let collectors: [Box<dyn prometheus::core::Collector>; 10] = [
            Box::new(m.build_info.clone()),
            Box::new(m.table_generation.clone()),
            Box::new(m.table_swaps_total.clone()),
            Box::new(m.table_build_seconds.clone()),
            Box::new(m.propagation_latency_seconds.clone()),
            Box::new(m.translate_warnings_total.clone()),
            Box::new(m.watch_errors_total.clone()),
            Box::new(m.relists_total.clone()),
            Box::new(m.kube_events_total.clone()),
            Box::new(m.heap_allocated_bytes.clone()),
        ];
        for c in collectors {
            if let Err(e) = m.registry.register(c) {
                tracing::error!(error = %e, "metric registration failed");
            }
        }
        // Leader election and the status writer; every result's series from 0.
        for result in STATUS_WRITE_RESULTS {
            m.status_writes_total.with_label_values(&[result]);
        }
        for state in INGRESS_STATES {
            m.ingresses.with_label_values(&[state]);
        }
        for c in [
            Box::new(m.leader.clone()) as Box<dyn Collector>,
            Box::new(m.status_writes_total.clone()),
            Box::new(m.ingresses.clone()),
        ] {
            if let Err(e) = m.registry.register(c) {
                tracing::error!(error = %e, "metric registration failed");
            }
        }
        m
    }

    /// The registry in Prometheus text format.
    pub fn render(&self) -> String {
        self.heap_allocated_bytes.set(heap_allocated());
        let mut out = Vec::new();
        let mut families = self.registry.gather();
        families.extend(self.process.gather());
        if let Err(e) = TextEncoder::new().encode(&families, &mut out) {
            tracing::error!(error = %e, "encoding metrics failed");
        }
        drop(families);
        if let Some(endpoints) = self.endpoints.get() {
            endpoints.write(&mut out);
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

/// The `state` label values of `ingresses`: served by switchyard, or of another class.
pub const INGRESS_STATES: [&str; 2] = ["served", "other_class"];

/// The `result` label values of `status_writes_total`: written, answered 409 (the Ingress
/// changed since it was read; retried from the next version), 404 (deleted meanwhile), or
/// failed otherwise.
pub const STATUS_WRITE_RESULTS: [&str; 4] = ["written", "conflict", "not_found", "failed"];

/// jemalloc's count of allocated bytes; its statistics are cached until the epoch advances.
fn heap_allocated() -> i64 {
    let _ = tikv_jemalloc_ctl::epoch::advance();
    tikv_jemalloc_ctl::stats::allocated::read()
        .ok()
        .and_then(|b| i64::try_from(b).ok())
        .unwrap_or(0)
}

// === data plane ===

/// The `class` label values of `http_requests_total`, indexed by `status_class`.
pub const STATUS_CLASSES: [&str; 6] = ["1xx", "2xx", "3xx", "4xx", "5xx", "other"];

/// Index into `STATUS_CLASSES` for an HTTP status (0: no response was written).
pub fn status_class(status: u16) -> usize {
    match status {
        100..=599 => usize::from(status / 100) - 1,
        _ => 5,
    }
}

/// The statuses that `http_responses_total` counts under their own `code`: the ones an alert
/// or a dashboard tells apart (a 502 is not a 504). Any other status is counted by its class.
pub const EXACT_CODES: [u16; 20] = [
    101, 200, 201, 204, 301, 302, 304, 400, 401, 403, 404, 405, 408, 413, 429, 499, 500, 502, 503,
    504,
];

/// The `code` label values of `http_responses_total`, indexed by `response_code`: the
/// `EXACT_CODES`, then `1xx_other` ... `5xx_other` for the other statuses of each class, then
/// `other` for no response (0) or a status outside 100-599. Bounded: 26 series per entry at
/// most.
pub const RESPONSE_CODES: [&str; 26] = [
    "101",
    "200",
    "201",
    "204",
    "301",
    "302",
    "304",
    "400",
    "401",
    "403",
    "404",
    "405",
    "408",
    "413",
    "429",
    "499",
    "500",
    "502",
    "503",
    "504",
    "1xx_other",
    "2xx_other",
    "3xx_other",
    "4xx_other",
    "5xx_other",
    "other",
];

/// Index into `RESPONSE_CODES` for an HTTP status (0: no response was written). A scan of 20
/// integers: no label string is looked at on the request path.
pub fn response_code(status: u16) -> usize {
    match EXACT_CODES.iter().position(|&c| c == status) {
        Some(i) => i,
        None => EXACT_CODES.len() + status_class(status),
    }
}

/// The codes whose series an entry's first response creates at 0, so that `rate()` and
/// `increase()` see the first of each: the server errors, which is what alerts watch. The
/// other codes' series appear with their first use (born at 1).
const EAGER_CODES: [u16; 4] = [500, 502, 503, 504];

/// Why a TLS handshake failed: the bounded `reason` label of `tls_handshake_failures_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFailure {
    /// No certificate for the requested server name (or no SNI and no default certificate).
    NoCertificate,
    /// The client certificate was missing or did not verify against `--ssl-ca-cert`.
    BadClientCertificate,
    /// A protocol error: no common version or cipher suite, a malformed message, not TLS.
    Protocol,
    /// The handshake did not finish in time.
    Timeout,
    /// The connection failed or closed during the handshake.
    Io,
    Other,
}

impl TlsFailure {
    pub const ALL: [TlsFailure; 6] = [
        TlsFailure::NoCertificate,
        TlsFailure::BadClientCertificate,
        TlsFailure::Protocol,
        TlsFailure::Timeout,
        TlsFailure::Io,
        TlsFailure::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TlsFailure::NoCertificate => "no_certificate",
            TlsFailure::BadClientCertificate => "bad_client_certificate",
            TlsFailure::Protocol => "protocol",
            TlsFailure::Timeout => "timeout",
            TlsFailure::Io => "io",
            TlsFailure::Other => "other",
        }
    }
}

/// The handles of one entry's series, resolved on the entry's first request (or failure) so
/// that later requests record without hashing label strings.
pub struct EntryMetrics {
    requests: [IntCounter; 6],
    /// `http_responses_total` of this entry, by `response_code`: each resolved on the code's
    /// first use (`EAGER_CODES` and `5xx_other` with the entry's handles).
    responses: [OnceLock<IntCounter>; RESPONSE_CODES.len()],
    responses_vec: IntCounterVec,
    pub duration: Histogram,
    pub connect: Histogram,
    /// From the request header going to the endpoint to its response header arriving.
    pub response: Histogram,
    pub request_bytes: IntCounter,
    pub response_bytes: IntCounter,
    pub retries: IntCounter,
    pub ejections: IntCounter,
    pub tls_failures: IntCounter,
    /// `grpc_responses_total` of this entry, by `Ending::index`: resolved on the entry's first
    /// gRPC call, so entries that never see one carry no gRPC series.
    grpc: OnceLock<Vec<IntCounter>>,
    /// To resolve `grpc` (the vector and this entry's name).
    grpc_vec: IntCounterVec,
    name: Box<str>,
    /// `upstream_tls_handshakes_total` (by `Resumed::index`) and
    /// `upstream_tls_handshake_duration_seconds` of this entry: each resolved on its first use,
    /// so entries in clear carry no TLS series and an engine's entries only the `resumed`
    /// values it reports.
    tls_counts: [OnceLock<IntCounter>; 3],
    tls_duration: OnceLock<Histogram>,
    tls_vecs: (IntCounterVec, HistogramVec),
}

/// Whether an upstream TLS handshake resumed an earlier session: the bounded `resumed` label
/// of `upstream_tls_handshakes_total`. The fast path knows (rustls says); Pingora's engine does
/// not expose it (`Unknown`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resumed {
    Yes,
    No,
    Unknown,
}

impl Resumed {
    pub fn as_str(self) -> &'static str {
        match self {
            Resumed::Yes => "true",
            Resumed::No => "false",
            Resumed::Unknown => "unknown",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl EntryMetrics {
    /// The request counter for a response status.
    pub fn requests(&self, status: u16) -> &IntCounter {
        &self.requests[status_class(status)]
    }

    /// Counts a response of this entry in `http_responses_total` by its `code` (0: none was
    /// written). Only a code's first use in the entry hashes its labels.
    pub fn response(&self, status: u16) {
        let i = response_code(status);
        let (Some(slot), Some(code)) = (self.responses.get(i), RESPONSE_CODES.get(i)) else {
            return;
        };
        slot.get_or_init(|| {
            self.responses_vec
                .with_label_values(&[self.name.as_ref(), code])
        })
        .inc();
    }

    /// Counts a completed TLS handshake with an endpoint of this entry, and its duration.
    pub fn tls_handshake(&self, took: std::time::Duration, resumed: Resumed) {
        let count = self.tls_counts[resumed.index()].get_or_init(|| {
            self.tls_vecs
                .0
                .with_label_values(&[self.name.as_ref(), resumed.as_str()])
        });
        count.inc();
        let duration = self
            .tls_duration
            .get_or_init(|| self.tls_vecs.1.with_label_values(&[self.name.as_ref()]));
        duration.observe(took.as_secs_f64());
    }

    /// Counts a gRPC call of this entry that ended with `ending`. The first one creates the
    /// series of every code at 0, so a `rate()` sees the first of each.
    pub fn grpc_response(&self, ending: Ending) {
        let by_code = self.grpc.get_or_init(|| {
            Ending::all()
                .map(|e| {
                    self.grpc_vec
                        .with_label_values(&[self.name.as_ref(), e.as_str()])
                })
                .collect()
        });
        if let Some(c) = by_code.get(ending.index()) {
            c.inc();
        }
    }
}

/// One entry's handles: empty until the entry's first request, then filled once. An entry
/// that stays in the table keeps its slot across swaps. Boxed so that an empty slot is
/// 16 bytes: a filled one held 14 series with their label pairs, histogram buckets and the
/// vectors' maps, about 5.7 KB by massif (57 MB for 10,000 entries resolved up front), before
/// the five server-error series of `http_responses_total` and its 26 slots (416 bytes) were
/// added (not measured again).
type EntrySlot = OnceLock<Box<EntryMetrics>>;

/// Per-entry slots of one table generation, indexed by entry id.
struct EntryView {
    generation: u64,
    slots: Vec<Arc<EntrySlot>>,
    by_name: HashMap<Box<str>, usize>,
}

/// One endpoint of one entry, as a scrape sees it (borrowed from the table: a scrape of
/// 100,000 endpoints copies no name).
#[derive(Debug, Clone, Copy)]
pub struct EndpointSample<'a> {
    pub entry: &'a str,
    pub endpoint: SocketAddr,
    /// Requests (HTTP) or connections (TCP) in flight.
    pub in_flight: u32,
    /// Takes new traffic as far as health goes (active checks and passive marks).
    pub up: bool,
}

/// Where the per-endpoint and per-entry endpoint series come from at scrape time: the live
/// table. Reading them from the table means an endpoint's series disappear exactly when the
/// endpoint leaves it.
pub trait EndpointSource: Send + Sync {
    /// Calls `f` for every endpoint, the endpoints of one entry one after another.
    fn visit(&self, f: &mut dyn FnMut(EndpointSample<'_>));
}

/// A UDP frontend's handles (see `DataMetrics::udp_frontend`).
#[derive(Clone)]
pub struct UdpFrontendMetrics {
    pub datagrams_in: IntCounter,
    pub datagrams_out: IntCounter,
    pub bytes_in: IntCounter,
    pub bytes_out: IntCounter,
    /// Flows held now.
    pub flows: IntGauge,
    /// Dropped: a new client past `--udp-max-flows`.
    pub dropped_full: IntCounter,
    /// Dropped: no endpoint takes the client (a share that does not resolve, none ready),
    /// or its socket to the endpoint could not be made.
    pub dropped_no_backend: IntCounter,
    /// Dropped: a socket's send buffer was full, or the send failed.
    pub dropped_send: IntCounter,
}

/// A TCP frontend's handles (see `DataMetrics::tcp_frontend`).
#[derive(Clone)]
pub struct TcpFrontendMetrics {
    connections: IntCounter,
    open: IntGauge,
    received: IntCounter,
    sent: IntCounter,
}

impl TcpFrontendMetrics {
    /// Counts an accepted connection; it is open in `downstream_open_connections` until the
    /// returned guard drops.
    pub fn accepted(&self) -> OpenConnection {
        self.connections.inc();
        OpenConnection::new(self.open.clone())
    }

    /// Adds copied bytes (as they flow, or once at close).
    pub fn add_bytes(&self, from_client: u64, to_client: u64) {
        self.received.inc_by(from_client);
        self.sent.inc_by(to_client);
    }
}

/// One open downstream connection; decrements its frontend's gauge on drop.
pub struct OpenConnection(IntGauge);

impl OpenConnection {
    pub fn new(gauge: IntGauge) -> OpenConnection {
        gauge.inc();
        OpenConnection(gauge)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Every metric of the data plane.
pub struct DataMetrics {
    pub http_requests_total: IntCounterVec,
    pub http_responses_total: IntCounterVec,
    pub http_unmatched_requests_total: IntCounterVec,
    pub http_request_duration_seconds: HistogramVec,
    pub upstream_connect_duration_seconds: HistogramVec,
    pub upstream_response_duration_seconds: HistogramVec,
    pub http_request_bytes_total: IntCounterVec,
    pub http_response_bytes_total: IntCounterVec,
    pub http_retries_total: IntCounterVec,
    pub passive_ejections_total: IntCounterVec,
    pub upstream_tls_failures_total: IntCounterVec,
    pub grpc_responses_total: IntCounterVec,
    pub upstream_tls_handshakes_total: IntCounterVec,
    pub upstream_tls_handshake_duration_seconds: HistogramVec,
    pub downstream_open_connections: IntGaugeVec,
    pub health_checks_total: IntCounterVec,
    pub health_transitions_total: IntCounterVec,
    pub tcp_connections_total: IntCounterVec,
    pub tcp_received_bytes_total: IntCounterVec,
    pub tcp_sent_bytes_total: IntCounterVec,
    pub udp_datagrams_total: IntCounterVec,
    pub udp_bytes_total: IntCounterVec,
    pub udp_flows: IntGaugeVec,
    pub udp_dropped_total: IntCounterVec,
    pub tls_handshakes_total: IntCounterVec,
    pub tls_handshake_failures_total: IntCounterVec,
    pub tls_certificate_not_after_seconds: IntGaugeVec,
    pub tls_secret_errors_total: IntCounter,
    pub downstream_rejected_connections_total: IntCounterVec,
    pub proxy_protocol_rejected_total: IntCounterVec,
    /// Copies of requests sent to Gateway `RequestMirror` backends, by result.
    pub mirror_requests_total: IntCounterVec,
    pub external_auth_requests_total: IntCounterVec,
    pub passthrough_connections_total: IntCounterVec,
    pub http_rejected_requests_total: IntCounterVec,
    pub access_log_dropped_total: IntCounter,
    view: ArcSwap<EntryView>,
    /// A request created series for an entry outside the current view (see `with_entry`).
    strays: AtomicBool,
}

fn register(registry: &Registry, c: Box<dyn Collector>) {
    if let Err(e) = registry.register(c) {
        tracing::error!(error = %e, "metric registration failed");
    }
}

fn counter_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let v =
        IntCounterVec::new(Opts::new(name, help), labels).unwrap_or_else(|_| unreachable_metric());
    register(registry, Box::new(v.clone()));
    v
}

fn gauge_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let v =
        IntGaugeVec::new(Opts::new(name, help), labels).unwrap_or_else(|_| unreachable_metric());
    register(registry, Box::new(v.clone()));
    v
}

fn histogram_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    buckets: &[f64],
    labels: &[&str],
) -> HistogramVec {
    let v = HistogramVec::new(
        HistogramOpts::new(name, help).buckets(buckets.to_vec()),
        labels,
    )
    .unwrap_or_else(|_| unreachable_metric());
    register(registry, Box::new(v.clone()));
    v
}

impl DataMetrics {
    fn new(r: &Registry) -> DataMetrics {
        // From 100 µs: a proxied request's median is under a millisecond.
        let request_buckets = [
            0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
            2.5, 5.0, 10.0, 30.0, 60.0,
        ];
        let connect_buckets = [
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
        ];
        let dropped = IntCounter::new(
            "access_log_dropped_total",
            "Access-log lines dropped because stdout could not keep up",
        )
        .unwrap_or_else(|_| unreachable_metric());
        register(r, Box::new(dropped.clone()));
        let secret_errors = IntCounter::new(
            "tls_secret_errors_total",
            "Certificates from Secrets that did not load (their hosts get the default certificate)",
        )
        .unwrap_or_else(|_| unreachable_metric());
        register(r, Box::new(secret_errors.clone()));
        DataMetrics {
            tls_secret_errors_total: secret_errors,
            http_requests_total: counter_vec(
                r,
                "http_requests_total",
                "HTTP requests that matched a route, by entry and status class",
                &["entry", "class"],
            ),
            http_responses_total: counter_vec(
                r,
                "http_responses_total",
                "HTTP requests that matched a route, by entry and status code (the common codes \
                 exact, others as 1xx_other ... 5xx_other, other: no response)",
                &["entry", "code"],
            ),
            http_unmatched_requests_total: counter_vec(
                r,
                "http_unmatched_requests_total",
                "HTTP requests that matched no route (answered --default-return-code)",
                &["frontend"],
            ),
            http_request_duration_seconds: histogram_vec(
                r,
                "http_request_duration_seconds",
                "Time from a request's header being read to its response being sent, by entry",
                &request_buckets,
                &["entry"],
            ),
            upstream_connect_duration_seconds: histogram_vec(
                r,
                "upstream_connect_duration_seconds",
                "Time to open a new connection to an endpoint (reused connections are not counted), by entry",
                &connect_buckets,
                &["entry"],
            ),
            upstream_response_duration_seconds: histogram_vec(
                r,
                "upstream_response_duration_seconds",
                "Time from sending a request's header to an endpoint to receiving its response header, by entry",
                &request_buckets,
                &["entry"],
            ),
            http_request_bytes_total: counter_vec(
                r,
                "http_request_bytes_total",
                "Request body bytes received from clients, by entry",
                &["entry"],
            ),
            http_response_bytes_total: counter_vec(
                r,
                "http_response_bytes_total",
                "Response body bytes sent to clients, by entry",
                &["entry"],
            ),
            http_retries_total: counter_vec(
                r,
                "http_retries_total",
                "Requests sent to another endpoint after a failed connect, by entry",
                &["entry"],
            ),
            passive_ejections_total: counter_vec(
                r,
                "passive_ejections_total",
                "Endpoints taken out of rotation for a while after a failed connect, by entry",
                &["entry"],
            ),
            upstream_tls_failures_total: counter_vec(
                r,
                "upstream_tls_failures_total",
                "TLS handshakes with endpoints that failed (untrusted or misnamed certificate), \
                 by entry",
                &["entry"],
            ),
            upstream_tls_handshakes_total: counter_vec(
                r,
                "upstream_tls_handshakes_total",
                "TLS handshakes completed with endpoints (new connections; pooled ones are \
                 reused without one), by entry and whether an earlier session was resumed \
                 (true, false; unknown through Pingora's engine, which does not say)",
                &["entry", "resumed"],
            ),
            upstream_tls_handshake_duration_seconds: histogram_vec(
                r,
                "upstream_tls_handshake_duration_seconds",
                "Time of each completed TLS handshake with an endpoint, by entry",
                &connect_buckets,
                &["entry"],
            ),
            grpc_responses_total: counter_vec(
                r,
                "grpc_responses_total",
                "gRPC calls by entry and how they ended: the grpc-status the client got (header \
                 or trailer), or none",
                &["entry", "code"],
            ),
            downstream_open_connections: gauge_vec(
                r,
                "downstream_open_connections",
                "Client connections open now, by frontend",
                &["frontend"],
            ),
            health_checks_total: counter_vec(
                r,
                "health_checks_total",
                "Active health checks run, by result (passed, failed)",
                &["result"],
            ),
            health_transitions_total: counter_vec(
                r,
                "health_transitions_total",
                "Endpoints marked up or down by active health checks, by new state",
                &["state"],
            ),
            tcp_connections_total: counter_vec(
                r,
                "tcp_connections_total",
                "Connections accepted by a raw TCP frontend",
                &["frontend"],
            ),
            tcp_received_bytes_total: counter_vec(
                r,
                "tcp_received_bytes_total",
                "Bytes received from clients by a raw TCP frontend",
                &["frontend"],
            ),
            tcp_sent_bytes_total: counter_vec(
                r,
                "tcp_sent_bytes_total",
                "Bytes sent to clients by a raw TCP frontend",
                &["frontend"],
            ),
            udp_datagrams_total: counter_vec(
                r,
                "udp_datagrams_total",
                "Datagrams relayed by a Gateway UDP listener, by direction (in: from clients)",
                &["frontend", "direction"],
            ),
            udp_bytes_total: counter_vec(
                r,
                "udp_bytes_total",
                "Bytes of the datagrams relayed by a Gateway UDP listener, by direction",
                &["frontend", "direction"],
            ),
            udp_flows: gauge_vec(
                r,
                "udp_flows",
                "Client flows a Gateway UDP listener holds now",
                &["frontend"],
            ),
            udp_dropped_total: counter_vec(
                r,
                "udp_dropped_total",
                "Datagrams a Gateway UDP listener dropped, by reason",
                &["frontend", "reason"],
            ),
            tls_handshakes_total: counter_vec(
                r,
                "tls_handshakes_total",
                "Completed TLS handshakes, by frontend",
                &["frontend"],
            ),
            tls_handshake_failures_total: counter_vec(
                r,
                "tls_handshake_failures_total",
                "Failed TLS handshakes, by frontend and reason",
                &["frontend", "reason"],
            ),
            tls_certificate_not_after_seconds: gauge_vec(
                r,
                "tls_certificate_not_after_seconds",
                "Expiry (notAfter) of each served certificate, as a Unix time",
                &["certificate"],
            ),
            downstream_rejected_connections_total: counter_vec(
                r,
                "downstream_rejected_connections_total",
                "Client connections closed by a guard, by frontend and reason (connection_limit, header_timeout, header_too_large)",
                &["frontend", "reason"],
            ),
            proxy_protocol_rejected_total: counter_vec(
                r,
                "proxy_protocol_rejected_total",
                "Client connections closed on a --proxy-protocol frontend for want of a valid PROXY header from a trusted peer, by frontend and reason",
                &["frontend", "reason"],
            ),
            mirror_requests_total: {
                let v = counter_vec(
                    r,
                    "mirror_requests_total",
                    "Copies of requests for Gateway RequestMirror backends, by result (sent, failed, skipped: a request with a body or a backend not spoken to in HTTP/1 clear, dropped: too many in flight)",
                    &["result"],
                );
                for result in MIRROR_RESULTS {
                    v.with_label_values(&[result]);
                }
                v
            },
            external_auth_requests_total: {
                let v = counter_vec(
                    r,
                    "external_auth_requests_total",
                    "Subrequests of an Ingress's external authentication (auth-url), by result (allowed: a 2xx answer, denied: 401 or 403, failed: no answer or another status, the request answered 500)",
                    &["result"],
                );
                for result in EXTERNAL_AUTH_RESULTS {
                    v.with_label_values(&[result]);
                }
                v
            },
            passthrough_connections_total: {
                let v = counter_vec(
                    r,
                    "passthrough_connections_total",
                    "TLS connections on the TLS port relayed unterminated (ssl-passthrough) by result (relayed: connected to an endpoint, unavailable: no endpoint takes them, failed: every endpoint tried failed to connect)",
                    &["result"],
                );
                for result in PASSTHROUGH_RESULTS {
                    v.with_label_values(&[result]);
                }
                v
            },
            http_rejected_requests_total: counter_vec(
                r,
                "http_rejected_requests_total",
                "HTTP requests refused before routing (answered 400, 405, 408 or 431 and closed), by frontend and reason",
                &["frontend", "reason"],
            ),
            access_log_dropped_total: dropped,
            view: ArcSwap::from_pointee(EntryView {
                generation: 0,
                slots: Vec::new(),
                by_name: HashMap::new(),
            }),
            strays: AtomicBool::new(false),
        }
    }

    fn resolve(&self, entry: &str) -> EntryMetrics {
        EntryMetrics {
            requests: STATUS_CLASSES
                .map(|class| self.http_requests_total.with_label_values(&[entry, class])),
            responses: std::array::from_fn(|i| {
                let eager =
                    EAGER_CODES.iter().any(|&c| response_code(c) == i) || i == response_code(599);
                match RESPONSE_CODES.get(i) {
                    Some(code) if eager => {
                        OnceLock::from(self.http_responses_total.with_label_values(&[entry, code]))
                    }
                    _ => OnceLock::new(),
                }
            }),
            responses_vec: self.http_responses_total.clone(),
            duration: self
                .http_request_duration_seconds
                .with_label_values(&[entry]),
            connect: self
                .upstream_connect_duration_seconds
                .with_label_values(&[entry]),
            response: self
                .upstream_response_duration_seconds
                .with_label_values(&[entry]),
            request_bytes: self.http_request_bytes_total.with_label_values(&[entry]),
            response_bytes: self.http_response_bytes_total.with_label_values(&[entry]),
            retries: self.http_retries_total.with_label_values(&[entry]),
            ejections: self.passive_ejections_total.with_label_values(&[entry]),
            tls_failures: self.upstream_tls_failures_total.with_label_values(&[entry]),
            grpc: OnceLock::new(),
            grpc_vec: self.grpc_responses_total.clone(),
            name: entry.into(),
            tls_counts: [OnceLock::new(), OnceLock::new(), OnceLock::new()],
            tls_duration: OnceLock::new(),
            tls_vecs: (
                self.upstream_tls_handshakes_total.clone(),
                self.upstream_tls_handshake_duration_seconds.clone(),
            ),
        }
    }

    /// After a table swap: the slots of table `generation`, whose entries are `names` in
    /// entry-id order, and drops the series of entries that are gone. A new entry gets an
    /// empty slot (its series appear with its first request); an entry that stays keeps its
    /// slot and handles, so a swap that only moves endpoints costs one name lookup per entry.
    pub fn set_entries(&self, generation: u64, names: &[&str]) {
        let old = self.view.load_full();
        let slots = names
            .iter()
            .map(
                |n| match old.by_name.get(*n).and_then(|&i| old.slots.get(i)) {
                    Some(h) => Arc::clone(h),
                    None => Arc::new(EntrySlot::new()),
                },
            )
            .collect();
        let by_name = names
            .iter()
            .enumerate()
            .map(|(i, n)| (Box::<str>::from(*n), i))
            .collect();
        self.view.store(Arc::new(EntryView {
            generation,
            slots,
            by_name,
        }));
        let keep: HashSet<&str> = names.iter().copied().collect();
        let removed = old.by_name.keys().any(|n| !keep.contains(&**n));
        if removed || self.strays.swap(false, Ordering::Relaxed) {
            self.drop_entries_except(&keep);
        }
    }

    /// Removes every per-entry series whose entry is not in `keep` (including series a late
    /// request of an older table re-created).
    fn drop_entries_except(&self, keep: &HashSet<&str>) {
        fn stale(families: Vec<MetricFamily>, keep: &HashSet<&str>) -> Vec<Vec<(String, String)>> {
            let mut out = Vec::new();
            for mf in &families {
                for m in mf.get_metric() {
                    let labels: Vec<(String, String)> = m
                        .get_label()
                        .iter()
                        .map(|l| (l.name().to_string(), l.value().to_string()))
                        .collect();
                    let gone = labels
                        .iter()
                        .any(|(k, v)| k == "entry" && !keep.contains(v.as_str()));
                    if gone {
                        out.push(labels);
                    }
                }
            }
            out
        }
        fn remove<C: Collector>(
            collector: &C,
            keep: &HashSet<&str>,
            remove: impl Fn(&HashMap<&str, &str>),
        ) {
            for labels in stale(collector.collect(), keep) {
                let map: HashMap<&str, &str> = labels
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                remove(&map);
            }
        }
        for v in [
            &self.http_requests_total,
            &self.http_responses_total,
            &self.grpc_responses_total,
        ] {
            remove(v, keep, |l| {
                let _ = v.remove(l);
            });
        }
        for v in [
            &self.http_request_bytes_total,
            &self.http_response_bytes_total,
            &self.http_retries_total,
            &self.passive_ejections_total,
            &self.upstream_tls_failures_total,
            &self.upstream_tls_handshakes_total,
        ] {
            remove(v, keep, |l| {
                let _ = v.remove(l);
            });
        }
        for v in [
            &self.http_request_duration_seconds,
            &self.upstream_connect_duration_seconds,
            &self.upstream_response_duration_seconds,
            &self.upstream_tls_handshake_duration_seconds,
        ] {
            remove(v, keep, |l| {
                let _ = v.remove(l);
            });
        }
    }

    /// Runs `f` with the handles of entry `id` of table `generation` (named `name`). The
    /// entry's slot in the current view is found by id (by name for a request still holding
    /// an older or newer table) and filled on the entry's first request: only that request
    /// hashes labels and allocates.
    pub fn with_entry<R>(
        &self,
        generation: u64,
        id: usize,
        name: &str,
        f: impl FnOnce(&EntryMetrics) -> R,
    ) -> R {
        self.with_entry_in(&self.view.load(), generation, id, name, f)
    }

    /// `with_entry` against `view`, which a swap may already have replaced.
    fn with_entry_in<R>(
        &self,
        view: &EntryView,
        generation: u64,
        id: usize,
        name: &str,
        f: impl FnOnce(&EntryMetrics) -> R,
    ) -> R {
        let slot = match view.slots.get(id) {
            Some(s) if view.generation == generation => Some(s),
            _ => view.by_name.get(name).and_then(|&i| view.slots.get(i)),
        };
        if let Some(slot) = slot {
            let h = slot.get_or_init(|| {
                let h = Box::new(self.resolve(name));
                // A swap since `view` was loaded may have removed this entry and swept its
                // series before these existed: have the next swap sweep again.
                if self.view.load().generation != view.generation {
                    self.strays.store(true, Ordering::Relaxed);
                }
                h
            });
            return f(h);
        }
        // An entry of an older table that is gone, or of a newer one not in the view yet: count
        // it, and have the next swap sweep the series if the entry is gone by then.
        self.strays.store(true, Ordering::Relaxed);
        f(&self.resolve(name))
    }

    /// Counts a failed try of entry `id`: its endpoint newly ejected, and/or a retry.
    pub fn count_failure(
        &self,
        generation: u64,
        id: usize,
        name: &str,
        ejected: bool,
        retry: bool,
    ) {
        self.with_entry(generation, id, name, |h| {
            if ejected {
                h.ejections.inc();
            }
            if retry {
                h.retries.inc();
            }
        });
    }

    /// Counts a failed TLS handshake with an endpoint of entry `id` of table `generation`.
    pub fn count_tls_failure(&self, generation: u64, id: usize, name: &str) {
        self.with_entry(generation, id, name, |h| h.tls_failures.inc());
    }

    /// The open-connections gauge of a frontend (`http`, `https`, `tcp:PORT`).
    pub fn open_connections(&self, frontend: &str) -> IntGauge {
        self.downstream_open_connections
            .with_label_values(&[frontend])
    }

    /// The unmatched-requests counter of a frontend.
    pub fn unmatched(&self, frontend: &str) -> IntCounter {
        self.http_unmatched_requests_total
            .with_label_values(&[frontend])
    }

    /// The handles of a UDP frontend (`udp:PORT`); resolve once per listener. Every series
    /// exists from 0.
    pub fn udp_frontend(&self, frontend: &str) -> UdpFrontendMetrics {
        let dropped = |reason: &str| {
            self.udp_dropped_total
                .with_label_values(&[frontend, reason])
        };
        UdpFrontendMetrics {
            datagrams_in: self
                .udp_datagrams_total
                .with_label_values(&[frontend, "in"]),
            datagrams_out: self
                .udp_datagrams_total
                .with_label_values(&[frontend, "out"]),
            bytes_in: self.udp_bytes_total.with_label_values(&[frontend, "in"]),
            bytes_out: self.udp_bytes_total.with_label_values(&[frontend, "out"]),
            flows: self.udp_flows.with_label_values(&[frontend]),
            dropped_full: dropped("flows_full"),
            dropped_no_backend: dropped("no_backend"),
            dropped_send: dropped("send_failed"),
        }
    }

    /// The handles of a TCP frontend (`tcp:PORT`); resolve once per listener.
    pub fn tcp_frontend(&self, frontend: &str) -> TcpFrontendMetrics {
        TcpFrontendMetrics {
            connections: self.tcp_connections_total.with_label_values(&[frontend]),
            open: self.open_connections(frontend),
            received: self.tcp_received_bytes_total.with_label_values(&[frontend]),
            sent: self.tcp_sent_bytes_total.with_label_values(&[frontend]),
        }
    }

    /// Counts one completed TLS handshake on `frontend`.
    pub fn tls_handshake_ok(&self, frontend: &str) {
        self.tls_handshakes_total
            .with_label_values(&[frontend])
            .inc();
    }

    /// The counter of client connections a guard closed on `frontend` for `reason`
    /// (`connection_limit`, `header_timeout`, `header_too_large`); resolve once per listener.
    pub fn downstream_rejected(&self, frontend: &str, reason: &str) -> IntCounter {
        self.downstream_rejected_connections_total
            .with_label_values(&[frontend, reason])
    }

    /// The counter of mirrored requests with `result` (one of `MIRROR_RESULTS`).
    pub fn mirror_requests(&self, result: &str) -> IntCounter {
        self.mirror_requests_total.with_label_values(&[result])
    }

    /// The counter of passed-through TLS connections that ended in `result`
    /// (`PASSTHROUGH_RESULTS`); resolve once.
    pub fn passthrough_connections(&self, result: &str) -> IntCounter {
        self.passthrough_connections_total
            .with_label_values(&[result])
    }

    /// The counter of external authentication subrequests that ended in `result`
    /// (`EXTERNAL_AUTH_RESULTS`); resolve once.
    pub fn external_auth_requests(&self, result: &str) -> IntCounter {
        self.external_auth_requests_total
            .with_label_values(&[result])
    }

    /// The counter of connections a `--proxy-protocol` frontend closed for `reason`
    /// (`proxy_protocol::Reason`); resolve once per listener.
    pub fn proxy_protocol_rejected(&self, frontend: &str, reason: &str) -> IntCounter {
        self.proxy_protocol_rejected_total
            .with_label_values(&[frontend, reason])
    }

    /// The counter of requests refused on `frontend` for `reason` (a `Rejection` label);
    /// resolve once per frontend.
    pub fn rejected(&self, frontend: &str, reason: &str) -> IntCounter {
        self.http_rejected_requests_total
            .with_label_values(&[frontend, reason])
    }

    /// Counts one failed TLS handshake on `frontend`.
    pub fn tls_handshake_failed(&self, frontend: &str, reason: TlsFailure) {
        self.tls_handshake_failures_total
            .with_label_values(&[frontend, reason.as_str()])
            .inc();
    }

    /// Publishes the certificates served now (name, notAfter as Unix seconds), replacing the
    /// previous set: certificates no longer served lose their series.
    pub fn set_certificates(&self, certificates: &[(&str, i64)]) {
        self.tls_certificate_not_after_seconds.reset();
        for (name, not_after) in certificates {
            self.tls_certificate_not_after_seconds
                .with_label_values(&[name])
                .set(*not_after);
        }
    }

    /// Counts one active health check.
    pub fn health_check(&self, passed: bool) {
        let result = if passed { "passed" } else { "failed" };
        self.health_checks_total.with_label_values(&[result]).inc();
    }

    /// Counts one endpoint marked up or down by active checks.
    pub fn health_transition(&self, up: bool) {
        let state = if up { "up" } else { "down" };
        self.health_transitions_total
            .with_label_values(&[state])
            .inc();
    }
}

/// The endpoint series, written straight into the scrape's text from the live table
/// (`write_endpoint_series`): per entry always (`entry_endpoints`, `entry_endpoints_up`,
/// `entry_in_flight`), per endpoint (`endpoint_in_flight`, `endpoint_up`) unless
/// `--metrics-endpoint-series=false`. Nothing is kept between scrapes, and no protobuf family
/// is built: at 10,000 Services × 10 endpoints those cost 85 MiB of RSS and 3.3 s (debug build)
/// per scrape, for a 15 MiB body (benches/scale.py --scrape).
struct EndpointSeries {
    source: Box<dyn EndpointSource>,
    per_endpoint: bool,
}

impl Metrics {
    /// Adds the endpoint series, read from `source` at every scrape; the per-endpoint ones only
    /// with `per_endpoint`. Call once (later calls are ignored).
    pub fn register_endpoints(&self, source: Box<dyn EndpointSource>, per_endpoint: bool) {
        let _ = self.endpoints.set(EndpointSeries {
            source,
            per_endpoint,
        });
    }
}

const ENDPOINT_IN_FLIGHT: (&str, &str) = (
    "switchyard_endpoint_in_flight",
    "Requests (HTTP) or connections (TCP) in flight to an endpoint",
);
const ENDPOINT_UP: (&str, &str) = (
    "switchyard_endpoint_up",
    "1 when an endpoint takes new traffic as far as health goes (active checks and passive marks), else 0",
);
const ENTRY_ENDPOINTS: (&str, &str) = (
    "switchyard_entry_endpoints",
    "Endpoints of an entry in the routing table",
);
const ENTRY_ENDPOINTS_UP: (&str, &str) = (
    "switchyard_entry_endpoints_up",
    "Endpoints of an entry that take new traffic as far as health goes",
);
const ENTRY_IN_FLIGHT: (&str, &str) = (
    "switchyard_entry_in_flight",
    "Requests (HTTP) or connections (TCP) in flight to an entry's endpoints",
);

fn push_header(out: &mut Vec<u8>, (name, help): (&str, &str)) {
    use std::io::Write;
    let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n");
}

/// A label value as the text format quotes it: backslash, double quote and newline escaped.
fn push_label_value(out: &mut Vec<u8>, v: &str) {
    for b in v.bytes() {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\n' => out.extend_from_slice(b"\\n"),
            b => out.push(b),
        }
    }
}

fn push_endpoint_line(out: &mut Vec<u8>, name: &str, s: &EndpointSample<'_>, value: u32) {
    use std::io::Write;
    // Labels sorted by name, as the registry's encoder writes them.
    let _ = write!(out, "{name}{{endpoint=\"{}\",entry=\"", s.endpoint);
    push_label_value(out, s.entry);
    let _ = writeln!(out, "\"}} {value}");
}

fn push_entry_line(out: &mut Vec<u8>, name: &str, entry: &str, value: u64) {
    use std::io::Write;
    let _ = write!(out, "{name}{{entry=\"");
    push_label_value(out, entry);
    let _ = writeln!(out, "\"}} {value}");
}

/// Per-entry sums while the visit goes through one entry's endpoints.
#[derive(Default)]
struct EntrySums {
    endpoints: u64,
    up: u64,
    in_flight: u64,
}

impl EndpointSeries {
    /// Appends the endpoint families to a scrape's text.
    fn write(&self, out: &mut Vec<u8>) {
        if self.per_endpoint {
            // Room for both per-endpoint families at once: growing a 15 MiB buffer by doubling
            // would hold the old and the new copy together, twice the body at the peak.
            let mut room = 0;
            self.source.visit(&mut |s| room += 2 * (s.entry.len() + 96));
            out.reserve(room);
        }
        // The per-entry families are small (three lines an entry): built aside, appended after.
        let mut counts = Vec::new();
        let mut ups = Vec::new();
        let mut flights = Vec::new();
        push_header(&mut counts, ENTRY_ENDPOINTS);
        push_header(&mut ups, ENTRY_ENDPOINTS_UP);
        push_header(&mut flights, ENTRY_IN_FLIGHT);
        let mut current: Option<String> = None;
        let mut sums = EntrySums::default();
        let mut flush = |entry: &str, sums: &EntrySums| {
            push_entry_line(&mut counts, ENTRY_ENDPOINTS.0, entry, sums.endpoints);
            push_entry_line(&mut ups, ENTRY_ENDPOINTS_UP.0, entry, sums.up);
            push_entry_line(&mut flights, ENTRY_IN_FLIGHT.0, entry, sums.in_flight);
        };
        if self.per_endpoint {
            push_header(out, ENDPOINT_IN_FLIGHT);
        }
        self.source.visit(&mut |s| {
            if current.as_deref() != Some(s.entry) {
                if let Some(done) = current.as_deref() {
                    flush(done, &sums);
                }
                current = Some(s.entry.to_string());
                sums = EntrySums::default();
            }
            sums.endpoints += 1;
            sums.up += u64::from(s.up);
            sums.in_flight += u64::from(s.in_flight);
            if self.per_endpoint {
                push_endpoint_line(out, ENDPOINT_IN_FLIGHT.0, &s, s.in_flight);
            }
        });
        if let Some(done) = current.as_deref() {
            flush(done, &sums);
        }
        if self.per_endpoint {
            // A second walk for the second family: each family's lines are contiguous.
            push_header(out, ENDPOINT_UP);
            self.source.visit(&mut |s| {
                push_endpoint_line(out, ENDPOINT_UP.0, &s, u32::from(s.up));
            });
        }
        out.extend_from_slice(&counts);
        out.extend_from_slice(&ups);
        out.extend_from_slice(&flights);
    }
}

/// Metric constructors only fail on invalid names or label sets, which are constants here; a
/// test below builds every metric, so this is never reached at run time.
#[track_caller]
fn unreachable_metric<T>() -> T {
    panic!("invalid metric definition")
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn metrics_build_and_render_with_conventional_names() {
        let m = Metrics::new();
        m.table_swaps_total.inc();
        m.translate_warnings_total
            .with_label_values(&["InvalidAnnotation"])
            .inc();
        m.propagation_latency_seconds.observe(0.1);
        let text = m.render();
        assert!(text.contains("switchyard_table_swaps_total 1"), "{text}");
        assert!(
            text.contains("switchyard_translate_warnings_total{reason=\"InvalidAnnotation\"} 1")
        );
        assert!(text.contains("switchyard_propagation_latency_seconds_count 1"));
    }

    #[test]
    fn entry_handles_follow_the_table_and_gone_entries_lose_their_series() {
        let m = Metrics::new();
        m.data.set_entries(1, &["web", "api"]);
        m.data.with_entry(1, 0, "web", |h| h.requests(200).inc());
        m.data.with_entry(1, 1, "api", |h| h.requests(503).inc());
        // A request that still holds another generation is counted by name.
        m.data.with_entry(7, 5, "web", |h| h.requests(404).inc());
        let text = m.render();
        assert!(text.contains(r#"switchyard_http_requests_total{class="2xx",entry="web"} 1"#));
        assert!(text.contains(r#"switchyard_http_requests_total{class="4xx",entry="web"} 1"#));
        assert!(text.contains(r#"switchyard_http_requests_total{class="5xx",entry="api"} 1"#));
        m.data.set_entries(2, &["web"]);
        let text = m.render();
        assert!(!text.contains(r#"entry="api""#), "{text}");
        assert!(text.contains(r#"switchyard_http_requests_total{class="2xx",entry="web"} 1"#));
        // A late request of generation 1 re-creates `api`; the next swap sweeps it even though
        // it removes no entry itself.
        m.data.with_entry(1, 1, "api", |h| h.requests(200).inc());
        assert!(m.render().contains(r#"entry="api""#));
        m.data.set_entries(3, &["web"]);
        assert!(!m.render().contains(r#"entry="api""#));
        assert!(
            m.render()
                .contains(r#"switchyard_http_requests_total{class="2xx",entry="web"} 1"#)
        );
    }

    #[test]
    fn an_entry_without_traffic_renders_no_series_and_holds_no_handles() {
        let m = Metrics::new();
        m.data.set_entries(1, &["web", "idle"]);
        let text = m.render();
        assert!(
            !text.contains("entry="),
            "no per-entry series before traffic:\n{text}"
        );
        assert!(m.data.view.load().slots.iter().all(|s| s.get().is_none()));
        m.data.with_entry(1, 0, "web", |h| h.requests(200).inc());
        let text = m.render();
        assert!(text.contains(r#"switchyard_http_requests_total{class="2xx",entry="web"} 1"#));
        // The first request creates every class at 0, so a rate() sees the next of each.
        assert!(text.contains(r#"switchyard_http_requests_total{class="5xx",entry="web"} 0"#));
        assert!(text.contains(r#"switchyard_http_request_duration_seconds_count{entry="web"} 0"#));
        assert!(!text.contains(r#"entry="idle""#), "{text}");
        let view = m.data.view.load();
        assert!(view.slots[0].get().is_some() && view.slots[1].get().is_none());
        // An entry that stays keeps its filled slot; one that moves keeps it under its new id.
        let web = Arc::clone(&view.slots[0]);
        drop(view);
        m.data.set_entries(2, &["new", "web", "idle"]);
        let view = m.data.view.load();
        assert!(Arc::ptr_eq(&view.slots[1], &web));
        assert!(view.slots[0].get().is_none() && view.slots[2].get().is_none());
        assert_eq!(std::mem::size_of::<EntrySlot>(), 16);
    }

    #[test]
    fn a_first_request_racing_the_swap_that_removed_its_entry_is_swept_by_the_next() {
        let m = Metrics::new();
        m.data.set_entries(1, &["web", "api"]);
        // A request loaded the view of generation 1, then the swap removed `api` before the
        // request filled `api`'s slot: its series are created after that swap's sweep.
        let before = m.data.view.load_full();
        m.data.set_entries(2, &["web"]);
        m.data
            .with_entry_in(&before, 1, 1, "api", |h| h.requests(200).inc());
        assert!(m.render().contains(r#"entry="api""#));
        // The next swap removes no entry itself, but sweeps them.
        m.data.set_entries(3, &["web"]);
        assert!(!m.render().contains(r#"entry="api""#), "{}", m.render());
    }

    #[test]
    fn grpc_codes_appear_with_the_first_call_and_go_with_the_entry() {
        let m = Metrics::new();
        m.data.set_entries(1, &["web", "rpc"]);
        m.data
            .with_entry(1, 1, "rpc", |h| h.grpc_response(Ending::of(Some(b"5"))));
        let text = m.render();
        assert!(
            text.contains(r#"switchyard_grpc_responses_total{code="NOT_FOUND",entry="rpc"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"switchyard_grpc_responses_total{code="none",entry="rpc"} 0"#));
        assert_eq!(
            text.matches("switchyard_grpc_responses_total{").count(),
            Ending::COUNT,
            "18 series for the one gRPC entry, none for web"
        );
        m.data.set_entries(2, &["web"]);
        assert!(!m.render().contains("switchyard_grpc_responses_total{"));
    }

    #[test]
    fn tls_handshake_series_appear_with_the_first_handshake() {
        let m = Metrics::new();
        m.data.set_entries(1, &["clear", "tls"]);
        m.data.with_entry(1, 1, "tls", |h| {
            h.tls_handshake(std::time::Duration::from_millis(3), Resumed::No)
        });
        m.data.with_entry(1, 1, "tls", |h| {
            h.tls_handshake(std::time::Duration::from_millis(1), Resumed::Yes)
        });
        let text = m.render();
        assert!(text.contains(
            r#"switchyard_upstream_tls_handshakes_total{entry="tls",resumed="false"} 1"#
        ));
        assert!(
            text.contains(
                r#"switchyard_upstream_tls_handshakes_total{entry="tls",resumed="true"} 1"#
            )
        );
        assert!(
            !text.contains(r#"resumed="unknown""#),
            "only the values reported"
        );
        assert!(text.contains(
            r#"switchyard_upstream_tls_handshake_duration_seconds_count{entry="tls"} 2"#
        ));
        assert!(
            !text.contains(r#"switchyard_upstream_tls_handshakes_total{entry="clear"}"#),
            "no TLS series for an entry in clear"
        );
        m.data.set_entries(2, &["clear"]);
        assert!(
            !m.render().contains(r#"entry="tls""#),
            "gone with the entry"
        );
    }

    #[test]
    fn response_codes_are_exact_for_the_common_ones_and_bounded_for_the_rest() {
        for (i, c) in EXACT_CODES.iter().enumerate() {
            assert_eq!(
                RESPONSE_CODES[i],
                c.to_string(),
                "labels in the order of the codes"
            );
            assert_eq!(response_code(*c), i);
        }
        let label = |s: u16| RESPONSE_CODES[response_code(s)];
        assert_eq!(label(502), "502");
        assert_eq!(label(504), "504");
        assert_eq!(label(100), "1xx_other");
        assert_eq!(label(206), "2xx_other");
        assert_eq!(label(308), "3xx_other");
        assert_eq!(label(418), "4xx_other");
        assert_eq!(label(599), "5xx_other");
        assert_eq!(label(0), "other");
        assert_eq!(label(600), "other");
        let distinct: HashSet<&str> = (0..=1000).map(label).collect();
        assert_eq!(
            distinct.len(),
            RESPONSE_CODES.len(),
            "every label reachable, none else"
        );
    }

    #[test]
    fn response_code_series_the_server_errors_from_0_the_others_on_first_use() {
        let m = Metrics::new();
        m.data.set_entries(1, &["web"]);
        let series = |text: &str| {
            text.lines()
                .filter(|l| l.starts_with("switchyard_http_responses_total{"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert!(
            series(&m.render()).is_empty(),
            "nothing before the first request"
        );
        m.data.with_entry(1, 0, "web", |h| {
            h.response(200);
            h.response(200);
            h.response(418);
            h.response(0);
        });
        let text = m.render();
        for (code, n) in [
            ("200", 2),
            ("4xx_other", 1),
            ("other", 1),
            ("500", 0),
            ("502", 0),
            ("503", 0),
            ("504", 0),
            ("5xx_other", 0),
        ] {
            let line =
                format!(r#"switchyard_http_responses_total{{code="{code}",entry="web"}} {n}"#);
            assert!(text.contains(&line), "{line} in {text}");
        }
        assert_eq!(series(&text).len(), 8, "no other code: {:?}", series(&text));
        m.data.set_entries(2, &["api"]);
        assert!(series(&m.render()).is_empty(), "gone with the entry");
    }

    #[test]
    fn status_classes() {
        assert_eq!(STATUS_CLASSES[status_class(101)], "1xx");
        assert_eq!(STATUS_CLASSES[status_class(204)], "2xx");
        assert_eq!(STATUS_CLASSES[status_class(599)], "5xx");
        assert_eq!(STATUS_CLASSES[status_class(0)], "other");
        assert_eq!(STATUS_CLASSES[status_class(600)], "other");
    }

    /// (entry, endpoint, in flight, up) rows, entry by entry.
    struct Fixed(Mutex<Vec<(&'static str, &'static str, u32, bool)>>);
    impl EndpointSource for Fixed {
        fn visit(&self, f: &mut dyn FnMut(EndpointSample<'_>)) {
            for (entry, endpoint, in_flight, up) in self.0.lock().unwrap().iter() {
                f(EndpointSample {
                    entry,
                    endpoint: endpoint.parse().unwrap(),
                    in_flight: *in_flight,
                    up: *up,
                });
            }
        }
    }
    struct Shared(Arc<Fixed>);
    impl EndpointSource for Shared {
        fn visit(&self, f: &mut dyn FnMut(EndpointSample<'_>)) {
            self.0.visit(f)
        }
    }

    #[test]
    fn endpoint_series_come_and_go_with_the_source() {
        let m = Metrics::new();
        let samples = Arc::new(Fixed(Mutex::new(vec![
            ("web", "10.0.0.1:80", 3, true),
            ("web", "10.0.0.2:80", 1, false),
            ("a\"b", "10.0.0.3:80", 0, true),
        ])));
        m.register_endpoints(Box::new(Shared(Arc::clone(&samples))), true);
        let text = m.render();
        for want in [
            r#"switchyard_endpoint_in_flight{endpoint="10.0.0.1:80",entry="web"} 3"#,
            r#"switchyard_endpoint_up{endpoint="10.0.0.1:80",entry="web"} 1"#,
            r#"switchyard_endpoint_up{endpoint="10.0.0.2:80",entry="web"} 0"#,
            r#"switchyard_entry_endpoints{entry="web"} 2"#,
            r#"switchyard_entry_endpoints_up{entry="web"} 1"#,
            r#"switchyard_entry_in_flight{entry="web"} 4"#,
            // A label value is escaped as the text format wants.
            r#"switchyard_entry_endpoints{entry="a\"b"} 1"#,
        ] {
            assert!(text.contains(want), "missing {want}:\n{text}");
        }
        samples.0.lock().unwrap().clear();
        let text = m.render();
        assert!(!text.contains("10.0.0.1:80"));
        assert!(!text.contains(r#"entry="web""#), "{text}");
    }

    /// The text is what Prometheus parses: each family once, its HELP and TYPE first, its lines
    /// together; and without per-endpoint series only the per-entry ones.
    #[test]
    fn endpoint_families_are_contiguous_and_per_endpoint_series_can_be_off() {
        let rows = vec![
            ("web", "10.0.0.1:80", 0, true),
            ("web", "10.0.0.2:80", 0, true),
            ("api", "10.0.1.1:80", 2, true),
        ];
        let m = Metrics::new();
        m.register_endpoints(Box::new(Fixed(Mutex::new(rows.clone()))), true);
        let text = m.render();
        let mut seen: Vec<String> = Vec::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap_or("").to_string();
            if seen.last() != Some(&name) {
                assert!(!seen.contains(&name), "{name} is split:\n{text}");
                seen.push(name);
            }
        }
        for family in [
            "switchyard_endpoint_in_flight",
            "switchyard_endpoint_up",
            "switchyard_entry_endpoints",
        ] {
            let help = format!("# HELP {family} ");
            let ty = format!("# TYPE {family} gauge");
            assert_eq!(text.matches(&help).count(), 1, "{family}");
            let first = text.find(&format!("\n{family}{{")).unwrap();
            assert!(text.find(&ty).unwrap() < first, "{family}");
        }
        let m = Metrics::new();
        m.register_endpoints(Box::new(Fixed(Mutex::new(rows))), false);
        let text = m.render();
        assert!(!text.contains("switchyard_endpoint_"), "{text}");
        assert!(text.contains(r#"switchyard_entry_in_flight{entry="api"} 2"#));
        assert!(text.contains(r#"switchyard_entry_endpoints_up{entry="web"} 2"#));
    }

    #[test]
    fn tcp_and_tls_recorders() {
        let m = Metrics::new();
        let tcp = m.data.tcp_frontend("tcp:3306");
        let conn = tcp.accepted();
        tcp.add_bytes(10, 20);
        assert!(
            m.render()
                .contains(r#"switchyard_downstream_open_connections{frontend="tcp:3306"} 1"#)
        );
        drop(conn);
        m.data.tls_handshake_ok("https");
        m.data
            .tls_handshake_failed("https", TlsFailure::NoCertificate);
        m.data.set_certificates(&[("a.example.com", 1_900_000_000)]);
        m.data.set_certificates(&[("b.example.com", 1_900_000_001)]);
        let text = m.render();
        for want in [
            r#"switchyard_downstream_open_connections{frontend="tcp:3306"} 0"#,
            r#"switchyard_tcp_connections_total{frontend="tcp:3306"} 1"#,
            r#"switchyard_tcp_received_bytes_total{frontend="tcp:3306"} 10"#,
            r#"switchyard_tcp_sent_bytes_total{frontend="tcp:3306"} 20"#,
            r#"switchyard_tls_handshakes_total{frontend="https"} 1"#,
            r#"switchyard_tls_handshake_failures_total{frontend="https",reason="no_certificate"} 1"#,
            r#"switchyard_tls_certificate_not_after_seconds{certificate="b.example.com"} 1900000001"#,
        ] {
            assert!(text.contains(want), "missing {want}:\n{text}");
        }
        assert!(!text.contains("a.example.com"));
    }
}

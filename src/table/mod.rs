//! The routing table: one immutable value that says, for every frontend, which requests go to
//! which entry and which endpoints serve it; held in a single `ArcSwap` split into a
//! `TableWriter` (control side) and a `TableReader` (data side).
//!
//! Per-endpoint state (in-flight count, passive-health mark, active checks) and per-entry
//! state (round-robin cursor, client-IP affinity pins, the stats page's totals of each of its
//! endpoints) live behind `Shared`, which the translator carries from the
//! previous table by key, so counters survive a rebuild. `Shared` is not part of a table's
//! identity: two tables that route the same way compare equal, and an equal rebuild is not
//! swapped in. This module must not know about Kubernetes, Pingora or tokio.

pub mod auth;
pub mod balance;
pub mod cert_auth;
pub mod cidr;
pub mod client_validation;
pub mod external_auth;
pub mod gateway;
pub mod hash_key;
pub mod location;
pub mod matcher;
pub mod passthrough;
pub mod pattern;
pub mod policy;
pub mod rate_limit;
pub mod shared;
pub mod sticky;
pub mod stream;
pub mod upstream;

pub use shared::{EntryId, Shared};

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use serde::Serialize;
use serde_json::{Value, json};

use crate::table::balance::{Algorithm, Candidate};
use crate::table::matcher::{PathRules, Router};
use crate::table::sticky::AffinityTable;

/// Identifies the Service port an entry came from; the key that carries entry state over.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct EntryKey {
    pub namespace: String,
    pub service: String,
    pub port: u16,
}

impl fmt::Display for EntryKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}:{}", self.namespace, self.service, self.port)
    }
}

/// Which listener serves an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Frontend {
    /// The plain HTTP port.
    Http,
    /// The TLS port (`lb.sslTerm: "true"`).
    Https,
    /// A raw TCP port of its own (`--tcp-services`).
    Tcp(u16),
}

impl Frontend {
    /// The metric label and stats-page name: `http`, `https`, `tcp:PORT`.
    pub fn label(&self) -> String {
        match self {
            Frontend::Http => "http".into(),
            Frontend::Https => "https".into(),
            Frontend::Tcp(port) => format!("tcp:{port}"),
        }
    }
}

/// One balanced destination: a Service port and its endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `svc` for port 80, else `svc:port`; `ns/` in front outside the home namespace.
    pub name: Box<str>,
    pub key: EntryKey,
    pub frontend: Frontend,
    pub algorithm: Algorithm,
    /// Insert and honour the `SERVERID` cookie.
    pub cookie_sticky: bool,
    /// Client-IP affinity with this idle timeout.
    pub client_ip_affinity: Option<Duration>,
    /// Per-endpoint connection limit (`first` uses it to move on).
    pub maxconn: Option<u32>,
    /// Sorted by address, deduplicated; only endpoints that take new traffic.
    pub endpoints: Vec<Endpoint>,
    /// Active health-check settings from annotations (`None` fields: the flags' defaults).
    pub check: CheckSpec,
    /// How the endpoints are spoken to (HTTP/1 or HTTP/2, clear or TLS).
    pub upstream: upstream::Upstream,
    pub state: Shared<EntryState>,
}

/// Per-Service active health-check settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckSpec {
    /// `lb.check-interval`; zero turns checks off for this Service.
    pub interval: Option<Duration>,
    /// `lb.check-path`: an HTTP GET of this path (2xx/3xx passes) instead of a TCP connect,
    /// in the protocol the endpoints speak (HTTP/1 or HTTP/2, clear or TLS).
    pub path: Option<Box<str>>,
    /// `lb.check-grpc`: the gRPC health-checking protocol (`grpc.health.v1.Health/Check`) for
    /// this service name (empty: the server as a whole), for HTTP/2 backends; SERVING passes.
    pub grpc: Option<Box<str>>,
}

/// How active health checks gate one request's choice of endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthGate {
    /// Endpoints that checks marked down get no new traffic.
    SkipDown,
    /// Every endpoint that takes new sessions is down and fail-open is on: ignore the checks.
    FailOpen,
    /// Every endpoint that takes new sessions is down and fail-open is off: none is eligible.
    Closed,
}

/// Per-entry runtime state.
#[derive(Debug)]
pub struct EntryState {
    pub cursor: AtomicUsize,
    /// Made on first use: an affinity table is 16 locked shards (about 1 KiB), and most
    /// entries never pin a client, so building one per entry dominated large table builds.
    pub affinity: LazyLock<AffinityTable>,
    /// This entry's traffic to each of its endpoints (the stats page). Per entry, not per
    /// address: two Services on one address each see their own traffic.
    pub totals: EndpointTotals,
    /// Requests of this entry that no endpoint served: answered by switchyard itself (503
    /// when none is ready, 502/504 when every try failed before an endpoint was kept). The
    /// stats page adds them to the entry's row, as HAProxy counts a backend's own answers.
    pub own_answers: Totals,
}

impl Default for EntryState {
    fn default() -> Self {
        EntryState {
            cursor: AtomicUsize::new(0),
            affinity: LazyLock::new(AffinityTable::default),
            totals: EndpointTotals::default(),
            own_answers: Totals::default(),
        }
    }
}

/// An entry's `Totals` by endpoint address, sorted. Read on every request without a lock; an
/// address gets its totals at its first session (a copy-on-write insert, once per endpoint
/// of the entry), and addresses the entry no longer has are dropped at the next insert.
#[derive(Debug)]
pub struct EndpointTotals(ArcSwap<Vec<(SocketAddr, Arc<Totals>)>>);

impl Default for EndpointTotals {
    fn default() -> Self {
        EndpointTotals(ArcSwap::from_pointee(Vec::new()))
    }
}

impl EndpointTotals {
    /// The totals of `addr`, if it had a session yet.
    pub fn get(&self, addr: &SocketAddr) -> Option<Arc<Totals>> {
        let v = self.0.load();
        let i = v.binary_search_by(|(a, _)| a.cmp(addr)).ok()?;
        v.get(i).map(|(_, t)| Arc::clone(t))
    }

    /// The totals of `addr`, made when missing; `live` are the entry's endpoints now, whose
    /// totals an insert keeps.
    pub fn get_or_insert(&self, addr: SocketAddr, live: &[Endpoint]) -> Arc<Totals> {
        if let Some(t) = self.get(&addr) {
            return t;
        }
        let fresh = Arc::new(Totals::default());
        let mut out = Arc::clone(&fresh);
        self.0.rcu(|old| {
            let mut v: Vec<(SocketAddr, Arc<Totals>)> = old
                .iter()
                .filter(|(a, _)| live.iter().any(|e| e.addr == *a))
                .cloned()
                .collect();
            match v.binary_search_by(|(a, _)| a.cmp(&addr)) {
                Ok(i) => {
                    if let Some((_, t)) = v.get(i) {
                        out = Arc::clone(t);
                    }
                }
                Err(i) => {
                    out = Arc::clone(&fresh);
                    v.insert(i, (addr, Arc::clone(&fresh)));
                }
            }
            v
        });
        out
    }
}

impl RoutingTable {
    /// A table of one entry reached on the plain port by the path `prefix` (removed from the
    /// target when `strip`), under an Ingress `policy` when given, for module tests.
    #[cfg(test)]
    pub(crate) fn fixture(
        entry: Entry,
        prefix: &str,
        strip: bool,
        policy: Option<policy::RoutePolicy>,
    ) -> Arc<RoutingTable> {
        let mut rules = matcher::PathRules::default();
        rules.insert(matcher::PathRule {
            prefix: prefix.into(),
            strip,
            ignore_case: false,
            exact: false,
            regex: None,
            policy: policy.is_some().then_some(0),
            target: 0,
        });
        let mut http = Router {
            any_host: rules,
            ..Router::default()
        };
        http.finish();
        Arc::new(RoutingTable {
            entries: vec![Arc::new(entry)],
            http: Arc::new(http),
            policies: Arc::new(policy.into_iter().collect()),
            ..Default::default()
        })
    }
}

impl Entry {
    /// A plain HTTP entry in `default` on port 80 over `addrs`, for module tests.
    #[cfg(test)]
    pub(crate) fn fixture(name: &str, frontend: Frontend, addrs: &[&str]) -> Entry {
        Entry {
            name: name.into(),
            key: EntryKey {
                namespace: "default".into(),
                service: name.into(),
                port: 80,
            },
            frontend,
            algorithm: Algorithm::RoundRobin,
            cookie_sticky: false,
            client_ip_affinity: None,
            maxconn: None,
            endpoints: addrs
                .iter()
                .filter_map(|a| a.parse().ok())
                .map(|a| Endpoint::new(a, Shared::default()))
                .collect(),
            check: CheckSpec::default(),
            upstream: upstream::Upstream::default(),
            state: Shared::default(),
        }
    }

    /// The endpoint whose cookie id is `id`.
    pub fn endpoint_by_cookie(&self, value: &[u8]) -> Option<usize> {
        let id = crate::table::sticky::parse_cookie_id(value)?;
        self.endpoints.iter().position(|e| e.cookie_id == id)
    }

    /// The endpoint at `addr`.
    pub fn endpoint_by_addr(&self, addr: &SocketAddr) -> Option<usize> {
        self.endpoints.binary_search_by(|e| e.addr.cmp(addr)).ok()
    }

    // === selection: one definition shared by the data plane and `explain` ===

    /// The health gate for a request now: usually `SkipDown`; when every endpoint that takes
    /// new sessions is marked down, `FailOpen` or `Closed` as configured.
    pub fn health_gate(&self, fail_open: bool) -> HealthGate {
        let mut any_new = false;
        for e in &self.endpoints {
            if e.takes_new() {
                if e.state.health.is_up() {
                    return HealthGate::SkipDown;
                }
                any_new = true;
            }
        }
        match (any_new, fail_open) {
            (false, _) => HealthGate::SkipDown,
            (true, true) => HealthGate::FailOpen,
            (true, false) => HealthGate::Closed,
        }
    }

    /// Whether a client pinned (cookie or affinity) to endpoint `i` may stay there.
    pub fn pin_allowed(&self, i: usize, now: Instant, gate: HealthGate) -> bool {
        let s = &self.endpoints[i].state;
        !s.is_down(now) && (gate == HealthGate::FailOpen || s.health.is_up())
    }

    /// Whether endpoint `i` may take a new session under `gate` (ignoring passive marks).
    pub fn eligible(&self, i: usize, gate: HealthGate) -> bool {
        let e = &self.endpoints[i];
        e.takes_new()
            && match gate {
                HealthGate::SkipDown => e.state.health.is_up(),
                HealthGate::FailOpen => true,
                HealthGate::Closed => false,
            }
    }

    /// The endpoint for a new session, skipping `tried`: the algorithm's pick among eligible
    /// endpoints that are not passively marked down, else among all eligible ones (the marks
    /// are a guess, so one is tried anyway).
    pub fn choose(
        &self,
        pick: &crate::table::balance::Pick<'_>,
        gate: HealthGate,
        now: Instant,
        tried: &[usize],
    ) -> Option<usize> {
        let eps = &self.endpoints;
        let fresh = |i: usize| !tried.contains(&i) && self.eligible(i, gate);
        crate::table::balance::pick(eps, pick, |i| fresh(i) && !eps[i].state.is_down(now))
            .or_else(|| crate::table::balance::pick(eps, pick, fresh))
    }
}

/// One backend address of an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub addr: SocketAddr,
    /// The opaque `SERVERID` value for this endpoint (written as 16 hex digits).
    pub cookie_id: u64,
    /// Stable hash of the address (`source` balancing).
    pub hash: u64,
    /// Terminating but still serving: no new sessions, only requests pinned to it by cookie or
    /// client-IP affinity (drain-aware stickiness).
    pub draining: bool,
    pub state: Shared<EndpointState>,
}

impl Endpoint {
    pub fn new(addr: SocketAddr, state: Shared<EndpointState>) -> Self {
        Endpoint {
            cookie_id: crate::table::sticky::cookie_id(&addr),
            hash: crate::table::sticky::addr_hash(&addr),
            draining: false,
            addr,
            state,
        }
    }

    /// Whether new sessions may start here.
    pub fn takes_new(&self) -> bool {
        !self.draining
    }
}

impl Candidate for Endpoint {
    fn in_flight(&self) -> u32 {
        self.state.in_flight.load(Ordering::Relaxed)
    }
    fn hash_key(&self) -> u64 {
        self.hash
    }
}

/// Live counters of one endpoint address, shared by every entry that uses the address and
/// carried across table generations.
#[derive(Debug, Default)]
pub struct EndpointState {
    pub in_flight: AtomicU32,
    /// Passive health: milliseconds since `clock_origin()` until which the endpoint gets no new
    /// traffic (0: never marked).
    down_until_ms: AtomicU64,
    /// Active health checks (written by the checker only).
    pub health: HealthState,
}

/// Running totals of one endpoint of one entry (the stats page reads them; Prometheus gets
/// per-entry counters instead, whose labels are bounded).
#[derive(Debug, Default)]
pub struct Totals {
    /// Sessions started (HTTP: tries, connect failures included; TCP: connections).
    pub sessions: AtomicU64,
    /// Requests (TCP: connections) of this entry in flight to the endpoint now.
    pub in_flight: AtomicU32,
    /// Highest in-flight count seen.
    pub max_in_flight: AtomicU32,
    /// Sessions started per second.
    pub rate: Rate,
    /// Responses by status class, indexed like `ops::metrics::STATUS_CLASSES` (1xx..5xx,
    /// other: none written).
    pub responses: [AtomicU64; 6],
    /// Body bytes received from clients for this endpoint.
    pub bytes_in: AtomicU64,
    /// Body bytes sent to clients from this endpoint.
    pub bytes_out: AtomicU64,
    /// Failed connects.
    pub connect_errors: AtomicU64,
    /// Requests that failed after connecting (upstream or proxy error).
    pub response_errors: AtomicU64,
}

/// Events per second: the count of the last whole second (HAProxy's `rate` is the same idea
/// with a sliding window). Racing writers may lose a count at a second's turn: fine for a
/// stats page, and no lock on the request path.
#[derive(Debug, Default)]
pub struct Rate {
    /// The second (since `clock_origin`) that `current` counts.
    second: AtomicU64,
    current: AtomicU64,
    previous: AtomicU64,
    max: AtomicU64,
}

impl Rate {
    /// Counts one event at `now`.
    pub fn tick(&self, now: Instant) {
        let s = millis_since_origin(now) / 1000;
        let old = self.second.load(Ordering::Relaxed);
        if old != s
            && self
                .second
                .compare_exchange(old, s, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let done = self.current.swap(0, Ordering::Relaxed);
            self.max.fetch_max(done, Ordering::Relaxed);
            let prev = if s == old + 1 { done } else { 0 };
            self.previous.store(prev, Ordering::Relaxed);
        }
        self.current.fetch_add(1, Ordering::Relaxed);
    }

    /// Events in the last whole second before `now`.
    pub fn per_second(&self, now: Instant) -> u64 {
        let s = millis_since_origin(now) / 1000;
        let at = self.second.load(Ordering::Relaxed);
        if at == s {
            self.previous.load(Ordering::Relaxed)
        } else if at + 1 == s {
            self.current.load(Ordering::Relaxed)
        } else {
            0
        }
    }

    /// The highest `per_second` seen.
    pub fn max(&self, now: Instant) -> u64 {
        self.max.load(Ordering::Relaxed).max(self.per_second(now))
    }
}

/// `grpc.health.v1.HealthCheckResponse.ServingStatus.SERVING`.
const SERVING: u8 = 1;

/// The result of one active check, in HAProxy's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckResult {
    /// Not checked yet.
    None,
    /// TCP connect succeeded (`L4OK`).
    Connected,
    /// HTTP check answered this status (`L7OK` for 2xx/3xx, else `L7STS`).
    Status(u16),
    /// Connect refused or failed (`L4CON`).
    ConnectFailed,
    /// No answer within the timeout (`L4TOUT`).
    Timeout,
    /// Connected, but the answer was not HTTP (`L7RSP`).
    BadResponse,
    /// TCP connect and TLS handshake succeeded, endpoint certificate verified (`L6OK`).
    Handshaken,
    /// The TLS handshake failed: untrusted or misnamed certificate, no common protocol
    /// (`L6RSP`).
    TlsFailed,
    /// A gRPC health check answered this serving status (`grpc.health.v1`: 0 UNKNOWN,
    /// 1 SERVING, 2 NOT_SERVING, 3 SERVICE_UNKNOWN); SERVING passes (`L7OK SERVING`, else
    /// `L7STS NOT_SERVING`, ...).
    Serving(u8),
    /// A gRPC health check call failed with this `grpc-status` (`L7STS grpc-12`): the server
    /// does not implement the health service, or errored.
    GrpcFailed(u8),
}

impl CheckResult {
    pub fn passed(self) -> bool {
        match self {
            CheckResult::Connected | CheckResult::Handshaken => true,
            CheckResult::Status(s) => (200..400).contains(&s),
            CheckResult::Serving(s) => s == SERVING,
            _ => false,
        }
    }

    /// HAProxy's short code, with the HTTP status when there is one.
    pub fn code(self) -> String {
        match self {
            CheckResult::None => "-".into(),
            CheckResult::Connected => "L4OK".into(),
            CheckResult::Status(s) if self.passed() => format!("L7OK {s}"),
            CheckResult::Status(s) => format!("L7STS {s}"),
            CheckResult::ConnectFailed => "L4CON".into(),
            CheckResult::Timeout => "L4TOUT".into(),
            CheckResult::BadResponse => "L7RSP".into(),
            CheckResult::Handshaken => "L6OK".into(),
            CheckResult::TlsFailed => "L6RSP".into(),
            CheckResult::Serving(s) => {
                let name = match s {
                    SERVING => "SERVING",
                    2 => "NOT_SERVING",
                    3 => "SERVICE_UNKNOWN",
                    _ => "UNKNOWN",
                };
                let level = if self.passed() { "L7OK" } else { "L7STS" };
                format!("{level} {name}")
            }
            CheckResult::GrpcFailed(code) => format!("L7STS grpc-{code}"),
        }
    }

    fn pack(self) -> u32 {
        match self {
            CheckResult::None => 0,
            CheckResult::Connected => 1,
            CheckResult::Status(s) => 2 | (u32::from(s) << 8),
            CheckResult::ConnectFailed => 3,
            CheckResult::Timeout => 4,
            CheckResult::BadResponse => 5,
            CheckResult::Handshaken => 6,
            CheckResult::TlsFailed => 7,
            CheckResult::Serving(s) => 8 | (u32::from(s) << 8),
            CheckResult::GrpcFailed(c) => 9 | (u32::from(c) << 8),
        }
    }

    fn unpack(v: u32) -> CheckResult {
        match v & 0xff {
            1 => CheckResult::Connected,
            2 => CheckResult::Status(u16::try_from(v >> 8).unwrap_or(0)),
            3 => CheckResult::ConnectFailed,
            4 => CheckResult::Timeout,
            5 => CheckResult::BadResponse,
            6 => CheckResult::Handshaken,
            7 => CheckResult::TlsFailed,
            8 => CheckResult::Serving(u8::try_from(v >> 8).unwrap_or(0)),
            9 => CheckResult::GrpcFailed(u8::try_from(v >> 8).unwrap_or(0)),
            _ => CheckResult::None,
        }
    }
}

/// Active health of one endpoint address: starts up (Kubernetes already found it ready), goes
/// down after `fall` failed checks in a row and up again after `rise` passed ones.
#[derive(Debug, Default)]
pub struct HealthState {
    down: AtomicBool,
    passes: AtomicU32,
    failures: AtomicU32,
    last: AtomicU32,
    checks: AtomicU64,
    /// Failed checks in all (HAProxy `chkfail`).
    failed: AtomicU64,
    /// Transitions to down (HAProxy `chkdown`).
    downs: AtomicU64,
    /// The last check: when it ended (ms since `clock_origin`, 0: none) and how long it took.
    last_at_ms: AtomicU64,
    last_duration_us: AtomicU64,
    /// The last up/down transition (ms since `clock_origin`, 0: none since start).
    changed_at_ms: AtomicU64,
    /// Time spent down before the current state (ms).
    down_ms: AtomicU64,
}

/// What the stats page shows of an address's active health.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HealthView {
    pub failed_checks: u64,
    pub downs: u64,
    /// Age and duration of the last check, when there was one.
    pub last_check_age: Option<Duration>,
    pub last_check_duration: Option<Duration>,
    /// Time in the current state (since start when it never changed).
    pub in_state: Duration,
    /// Time spent down in all, the current down period included.
    pub downtime: Duration,
}

impl HealthState {
    pub fn is_up(&self) -> bool {
        !self.down.load(Ordering::Relaxed)
    }

    pub fn last(&self) -> CheckResult {
        CheckResult::unpack(self.last.load(Ordering::Relaxed))
    }

    /// Checks run so far.
    pub fn checks(&self) -> u64 {
        self.checks.load(Ordering::Relaxed)
    }

    /// Notes when the check just recorded ended and how long it took.
    pub fn timed(&self, ended: Instant, took: Duration) {
        self.last_at_ms
            .store(millis_since_origin(ended).max(1), Ordering::Relaxed);
        self.last_duration_us.store(
            u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// Counters and times for the stats page, at `now`.
    pub fn view(&self, now: Instant) -> HealthView {
        let now_ms = millis_since_origin(now);
        let ms = |v: u64| Duration::from_millis(v);
        let last_at = self.last_at_ms.load(Ordering::Relaxed);
        let changed = self.changed_at_ms.load(Ordering::Relaxed);
        let in_state = ms(now_ms.saturating_sub(changed));
        let mut downtime = ms(self.down_ms.load(Ordering::Relaxed));
        if !self.is_up() {
            downtime += in_state;
        }
        HealthView {
            failed_checks: self.failed.load(Ordering::Relaxed),
            downs: self.downs.load(Ordering::Relaxed),
            last_check_age: (last_at > 0).then(|| ms(now_ms.saturating_sub(last_at))),
            last_check_duration: (last_at > 0)
                .then(|| Duration::from_micros(self.last_duration_us.load(Ordering::Relaxed))),
            in_state,
            downtime,
        }
    }

    /// Notes an up/down transition now.
    fn changed(&self, to_up: bool) {
        let now = millis_since_origin(Instant::now()).max(1);
        let since = self.changed_at_ms.swap(now, Ordering::Relaxed);
        if to_up {
            self.down_ms
                .fetch_add(now.saturating_sub(since), Ordering::Relaxed);
        } else {
            self.downs.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records one check (one writer per address: the checker); returns the new state when it
    /// changed (`Some(true)`: rose, `Some(false)`: fell).
    pub fn record(&self, result: CheckResult, rise: u32, fall: u32) -> Option<bool> {
        self.last.store(result.pack(), Ordering::Relaxed);
        self.checks.fetch_add(1, Ordering::Relaxed);
        let up = self.is_up();
        if result.passed() {
            self.failures.store(0, Ordering::Relaxed);
            let n = self.passes.load(Ordering::Relaxed).saturating_add(1);
            self.passes.store(n, Ordering::Relaxed);
            if !up && n >= rise.max(1) {
                self.down.store(false, Ordering::Relaxed);
                self.changed(true);
                return Some(true);
            }
        } else {
            self.failed.fetch_add(1, Ordering::Relaxed);
            self.passes.store(0, Ordering::Relaxed);
            let n = self.failures.load(Ordering::Relaxed).saturating_add(1);
            self.failures.store(n, Ordering::Relaxed);
            if up && n >= fall.max(1) {
                self.down.store(true, Ordering::Relaxed);
                self.changed(false);
                return Some(false);
            }
        }
        None
    }
}

/// The monotonic origin that `down_until_ms` counts from.
fn clock_origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

fn millis_since_origin(t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(clock_origin()).as_millis()).unwrap_or(u64::MAX)
}

impl EndpointState {
    /// Marks the endpoint down for `period` from `now` (a failed connect).
    pub fn mark_down(&self, now: Instant, period: Duration) {
        let until = millis_since_origin(now + period).max(1);
        self.down_until_ms.store(until, Ordering::Relaxed);
    }

    /// Whether a passive-health mark keeps the endpoint out at `now`.
    pub fn is_down(&self, now: Instant) -> bool {
        let until = self.down_until_ms.load(Ordering::Relaxed);
        until != 0 && millis_since_origin(now) < until
    }

    /// Counts one request in flight until the guard drops: at this address (for balancing)
    /// and in `totals`, its entry's totals for the address (for the stats page).
    pub fn enter(self: &Arc<Self>, totals: Arc<Totals>, now: Instant) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let n = totals.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        totals.sessions.fetch_add(1, Ordering::Relaxed);
        totals.rate.tick(now);
        // Read first: the common case writes nothing more to the shared line.
        if n > totals.max_in_flight.load(Ordering::Relaxed) {
            totals.max_in_flight.fetch_max(n, Ordering::Relaxed);
        }
        InFlight(Arc::clone(self), totals)
    }

    /// Whether new traffic may come here as far as health goes (active and passive).
    pub fn is_up(&self, now: Instant) -> bool {
        self.health.is_up() && !self.is_down(now)
    }
}

/// Decrements an endpoint's in-flight counts on drop, whatever way the request ends.
#[derive(Debug)]
pub struct InFlight(Arc<EndpointState>, Arc<Totals>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.1.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A TCP frontend: a port of its own that forwards raw bytes to an entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TcpFrontend {
    pub port: u16,
    pub entry: EntryId,
}

/// The whole routing state, built by `translate` and never mutated after.
///
/// Entries and routers sit behind `Arc`s so that a rebuild in which most Services did not
/// change shares them with the previous table instead of copying them.
#[derive(Debug, Clone, Default)]
pub struct RoutingTable {
    /// Counts tables swapped in, set by the pipeline as it publishes (0 until then); not part
    /// of equality.
    pub generation: u64,
    pub entries: Vec<Arc<Entry>>,
    /// Routes on the plain HTTP port.
    pub http: Arc<Router<EntryId>>,
    /// Routes on the TLS port.
    pub https: Arc<Router<EntryId>>,
    /// Raw TCP frontends, sorted by port.
    pub tcp: Vec<TcpFrontend>,
    /// What Ingresses add to the requests of their rules; a path rule names one by index.
    pub policies: Arc<Vec<policy::RoutePolicy>>,
    /// Certificates from Secrets and the hosts they serve, for the TLS port (the TLS side
    /// loads them; the request path never reads them).
    pub certificates: Arc<Vec<SecretCert>>,
    /// Gateway API routes, consulted before `http` and `https`.
    pub gateway: Arc<gateway::GatewayRoutes>,
    /// Hosts whose TLS connections are relayed unterminated (`ssl-passthrough`).
    pub passthrough: Arc<Vec<passthrough::Passthrough>>,
    /// Gateway API TCP and TLS listeners and their routes.
    pub streams: Arc<stream::Streams>,
    /// The Gateway HTTPS listeners that verify client certificates.
    pub client_validation: Arc<client_validation::ClientValidations>,
}

impl PartialEq for RoutingTable {
    fn eq(&self, other: &Self) -> bool {
        // `Arc<T: Eq>` compares pointers first, so shared parts cost nothing to compare.
        self.entries == other.entries
            && self.http == other.http
            && self.https == other.https
            && self.tcp == other.tcp
            && self.policies == other.policies
            && self.certificates == other.certificates
            && self.gateway == other.gateway
            && self.passthrough == other.passthrough
            && self.streams == other.streams
            && self.client_validation == other.client_validation
    }
}

/// A certificate and key from a `kubernetes.io/tls` Secret, and the host names an Ingress
/// or a Gateway listener serves it for on the TLS port (empty: the names in the certificate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretCert {
    /// `namespace/name` of the Secret.
    pub secret: Box<str>,
    /// The local address of the Gateway whose listeners serve it (`--gateway-addresses`):
    /// only handshakes to that address see it. `None`: handshakes to every address.
    pub address: Option<std::net::IpAddr>,
    /// Lower case; `*.example.com` for a wildcard.
    pub hosts: Vec<Box<str>>,
    /// The certificate chain and then the key, in PEM, as one bundle.
    pub pem: Arc<[u8]>,
}
impl Eq for RoutingTable {}

impl RoutingTable {
    pub fn entry(&self, id: EntryId) -> Option<&Entry> {
        self.entries.get(id as usize).map(|e| &**e)
    }

    pub fn router(&self, frontend: Frontend) -> Option<&Router<EntryId>> {
        match frontend {
            Frontend::Http => Some(&*self.http),
            Frontend::Https => Some(&*self.https),
            Frontend::Tcp(_) => None,
        }
    }

    /// What the Gateway HTTPS listener that takes `host` on a connection to `local` asks of
    /// its clients' certificates (`None`: nothing).
    #[inline]
    pub fn client_validation(
        &self,
        local: (Option<IpAddr>, Option<u16>),
        host: Option<&[u8]>,
    ) -> Option<&Arc<client_validation::ClientValidation>> {
        self.client_validation.of(&self.gateway, local, host)
    }

    /// A stable, sorted JSON rendering for `--dry-run` and debugging: routes name their entry,
    /// maps are ordered, runtime state is left out.
    pub fn to_json(&self) -> Value {
        let name = |id: &EntryId| {
            self.entry(*id)
                .map(|e| e.name.to_string())
                .unwrap_or_default()
        };
        let rules = |r: &PathRules<EntryId>| -> Value {
            // Keyed as written: `-i /p` for a prefix that ignores case, `= /p` for a whole path.
            let m: BTreeMap<String, Value> = r
                .iter()
                .map(|rule| {
                    let key = match (rule.exact, rule.ignore_case) {
                        (true, _) => format!("= {}", rule.prefix),
                        (false, true) => format!("-i {}", rule.prefix),
                        (false, false) => rule.prefix.to_string(),
                    };
                    let mut v = json!({ "entry": name(&rule.target), "strip_prefix": rule.strip });
                    if let Some(p) = rule.policy.and_then(|p| self.policies.get(p as usize)) {
                        v["policy"] = json!(p);
                    }
                    (key, v)
                })
                .collect();
            json!(m)
        };
        let router = |r: &Router<EntryId>| -> Value {
            let exact: BTreeMap<&str, Value> =
                r.exact.iter().map(|(h, p)| (&**h, rules(p))).collect();
            let wildcard: BTreeMap<String, Value> = r
                .wildcard
                .iter()
                .map(|(s, p)| (format!("*{s}"), rules(p)))
                .collect();
            let one_label: BTreeMap<String, Value> = r
                .one_label
                .iter()
                .map(|(s, p)| (format!("*{s}"), rules(p)))
                .collect();
            let mut v = json!({ "hosts": exact, "wildcard_hosts": wildcard, "any_host": rules(&r.any_host) });
            if !one_label.is_empty() {
                v["one_label_wildcard_hosts"] = json!(one_label);
            }
            v
        };
        let entries: BTreeMap<&str, Value> = self
            .entries
            .iter()
            .map(|e| {
                (
                    &*e.name,
                    json!({
                        "service": format!("{}/{}", e.key.namespace, e.key.service),
                        "port": e.key.port,
                        "frontend": e.frontend,
                        "algorithm": e.algorithm,
                        "cookie_sticky": e.cookie_sticky,
                        "client_ip_affinity_seconds": e.client_ip_affinity.map(|d| d.as_secs()),
                        "maxconn": e.maxconn,
                        "check_interval_ms": e.check.interval.map(|d| d.as_millis() as u64),
                        "check_path": e.check.path.as_deref(),
                        "backend_protocol": e.upstream.protocol,
                        "backend_tls": e.upstream.protocol.tls().then(|| json!({
                            "sni": &*e.upstream.sni,
                            "verify": e.upstream.verify,
                        })),
                        "send_proxy_protocol": e.upstream.send_proxy.then_some("v2"),
                        "endpoints": e.endpoints.iter().map(|ep| json!({
                            "address": ep.addr.to_string(),
                            "cookie_id": crate::table::sticky::format_cookie_id(ep.cookie_id),
                            "draining": ep.draining,
                        })).collect::<Vec<_>>(),
                    }),
                )
            })
            .collect();
        let tcp: BTreeMap<String, Value> = self
            .tcp
            .iter()
            .map(|t| (t.port.to_string(), json!({ "entry": name(&t.entry) })))
            .collect();
        let mut v = json!({
            "generation": self.generation,
            "entries": entries,
            "http": router(&self.http),
            "https": router(&self.https),
            "tcp": tcp,
            "certificates": self.certificates.iter().map(|c| json!({
                "secret": &*c.secret,
                "address": c.address,
                "hosts": c.hosts.iter().map(|h| &**h).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        });
        if !self.gateway.is_empty() {
            // Backends name their entries by index; the entries are listed above.
            v["gateway"] = serde_json::to_value(&*self.gateway).unwrap_or(Value::Null);
        }
        if !self.client_validation.is_empty() {
            let listeners =
                self.client_validation
                    .listeners
                    .iter()
                    .map(|((address, port, host), v)| {
                        json!({
                            "address": address,
                            "port": port,
                            "hostname": if host.is_empty() { "*" } else { host },
                            "listener": &*v.origin,
                            "insecure_fallback": v.insecure_fallback,
                            "ca": format!("{} bytes of PEM", v.ca.len()),
                        })
                    });
            v["client_validation"] = Value::Array(listeners.collect());
        }
        v
    }
}

/// Creates the one handle pair around an initial (empty, unpublished) table.
pub fn handle(initial: RoutingTable) -> (TableWriter, TableReader) {
    let swap = Arc::new(ArcSwap::from_pointee(initial));
    let published = Arc::new(AtomicBool::new(false));
    (
        TableWriter {
            swap: Arc::clone(&swap),
            published: Arc::clone(&published),
        },
        TableReader { swap, published },
    )
}

/// The control side: the only thing that stores a table.
#[derive(Debug)]
pub struct TableWriter {
    swap: Arc<ArcSwap<RoutingTable>>,
    published: Arc<AtomicBool>,
}

impl TableWriter {
    /// The table serving now (the `previous` input of the next translation).
    pub fn current(&self) -> Arc<RoutingTable> {
        self.swap.load_full()
    }

    /// Swaps `table` in unless it routes exactly like the current one. Either way the first
    /// call opens the readiness latch. Returns whether a swap happened.
    pub fn publish(&self, table: RoutingTable) -> bool {
        self.publish_shared(Arc::new(table))
    }

    /// `publish` for a table the caller keeps a handle on (the pipeline keeps the table it
    /// built last, swapped in or not, as the base of the next incremental build).
    pub fn publish_shared(&self, table: Arc<RoutingTable>) -> bool {
        let swapped = if self.published.load(Ordering::Acquire) && **self.swap.load() == *table {
            false
        } else {
            self.swap.store(table);
            true
        };
        self.published.store(true, Ordering::Release);
        swapped
    }

    pub fn reader(&self) -> TableReader {
        TableReader {
            swap: Arc::clone(&self.swap),
            published: Arc::clone(&self.published),
        }
    }
}

/// The data side: cheap to clone, loads the current table.
#[derive(Debug, Clone)]
pub struct TableReader {
    swap: Arc<ArcSwap<RoutingTable>>,
    published: Arc<AtomicBool>,
}

impl TableReader {
    /// The current table; hold the `Arc` for the whole request, never a guard across an await.
    pub fn load(&self) -> Arc<RoutingTable> {
        self.swap.load_full()
    }

    /// Whether the first complete table has been published.
    pub fn is_published(&self) -> bool {
        self.published.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(addr: &str) -> Endpoint {
        Endpoint::new(addr.parse().unwrap(), Shared::default())
    }

    fn entry(eps: Vec<Endpoint>) -> Entry {
        Entry {
            endpoints: eps,
            ..Entry::fixture("svc", Frontend::Http, &[])
        }
    }

    #[test]
    fn tls_and_grpc_check_results_keep_their_codes() {
        for (r, code, passed) in [
            (CheckResult::Handshaken, "L6OK", true),
            (CheckResult::TlsFailed, "L6RSP", false),
            (CheckResult::Serving(1), "L7OK SERVING", true),
            (CheckResult::Serving(2), "L7STS NOT_SERVING", false),
            (CheckResult::Serving(3), "L7STS SERVICE_UNKNOWN", false),
            (CheckResult::Serving(0), "L7STS UNKNOWN", false),
            (CheckResult::GrpcFailed(12), "L7STS grpc-12", false),
        ] {
            assert_eq!((r.code().as_str(), r.passed()), (code, passed), "{r:?}");
            assert_eq!(CheckResult::unpack(r.pack()), r, "stored and read back");
        }
    }

    #[test]
    fn equality_ignores_runtime_state_and_generation() {
        let a = RoutingTable {
            generation: 1,
            entries: vec![Arc::new(entry(vec![ep("10.0.0.1:80")]))],
            ..Default::default()
        };
        let b = RoutingTable {
            generation: 2,
            entries: vec![Arc::new(entry(vec![ep("10.0.0.1:80")]))],
            ..Default::default()
        };
        assert_eq!(a, b);
        let c = RoutingTable {
            entries: vec![Arc::new(entry(vec![ep("10.0.0.2:80")]))],
            ..Default::default()
        };
        assert_ne!(a, c);
    }

    #[test]
    fn publish_skips_equal_tables_and_latches_ready() {
        let (w, r) = handle(RoutingTable::default());
        assert!(!r.is_published());
        assert!(
            w.publish(RoutingTable::default()),
            "first publish always swaps"
        );
        assert!(r.is_published());
        assert!(!w.publish(RoutingTable::default()));
        let t = RoutingTable {
            entries: vec![Arc::new(entry(vec![]))],
            ..Default::default()
        };
        assert!(w.publish(t));
        assert_eq!(r.load().entries.len(), 1);
    }

    #[test]
    fn in_flight_guard_counts() {
        let s = Arc::new(EndpointState::default());
        let t = Arc::new(Totals::default());
        let now = Instant::now();
        let g1 = s.enter(Arc::clone(&t), now);
        let g2 = s.enter(Arc::new(Totals::default()), now);
        assert_eq!(s.in_flight.load(Ordering::Relaxed), 2);
        assert_eq!(t.in_flight.load(Ordering::Relaxed), 1);
        drop(g1);
        drop(g2);
        assert_eq!(s.in_flight.load(Ordering::Relaxed), 0);
        assert_eq!(t.in_flight.load(Ordering::Relaxed), 0);
        assert_eq!(t.sessions.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn totals_are_per_entry_and_follow_the_entrys_endpoints() {
        let a = ep("10.0.0.1:80");
        let b = ep("10.0.0.2:80");
        let one = EndpointTotals::default();
        let other = EndpointTotals::default();
        let t = one.get_or_insert(a.addr, &[a.clone(), b.clone()]);
        t.sessions.fetch_add(1, Ordering::Relaxed);
        assert!(Arc::ptr_eq(
            &t,
            &one.get_or_insert(a.addr, std::slice::from_ref(&a))
        ));
        assert!(
            other.get(&a.addr).is_none(),
            "another entry's totals are its own"
        );
        one.get_or_insert(b.addr, std::slice::from_ref(&b));
        assert!(
            one.get(&a.addr).is_none(),
            "an address the entry lost is dropped"
        );
    }

    #[test]
    fn rate_counts_the_last_whole_second() {
        let r = Rate::default();
        let t0 = clock_origin() + Duration::from_secs(100);
        for _ in 0..5 {
            r.tick(t0);
        }
        assert_eq!(r.per_second(t0 + Duration::from_millis(1500)), 5);
        r.tick(t0 + Duration::from_millis(1100));
        assert_eq!(r.per_second(t0 + Duration::from_millis(1200)), 5);
        assert_eq!(r.per_second(t0 + Duration::from_secs(5)), 0);
        assert_eq!(r.max(t0 + Duration::from_secs(5)), 5);
    }

    #[test]
    fn passive_health_mark_expires() {
        let s = EndpointState::default();
        let now = Instant::now();
        assert!(!s.is_down(now));
        s.mark_down(now, Duration::from_secs(2));
        assert!(s.is_down(now + Duration::from_secs(1)));
        assert!(!s.is_down(now + Duration::from_secs(3)));
    }

    #[test]
    fn active_health_falls_and_rises_on_streaks() {
        let h = HealthState::default();
        assert!(h.is_up(), "starts up");
        assert_eq!(h.record(CheckResult::ConnectFailed, 2, 3), None);
        assert_eq!(h.record(CheckResult::Timeout, 2, 3), None);
        assert_eq!(
            h.record(CheckResult::Connected, 2, 3),
            None,
            "streak broken"
        );
        for _ in 0..2 {
            assert_eq!(h.record(CheckResult::ConnectFailed, 2, 3), None);
        }
        assert_eq!(h.record(CheckResult::Status(503), 2, 3), Some(false));
        assert!(!h.is_up());
        assert_eq!(h.last().code(), "L7STS 503");
        assert_eq!(h.record(CheckResult::Status(302), 2, 3), None);
        assert_eq!(h.record(CheckResult::Status(200), 2, 3), Some(true));
        assert!(h.is_up());
        assert_eq!(h.checks(), 8);
        let v = h.view(Instant::now());
        assert_eq!((v.failed_checks, v.downs), (5, 1));
        assert_eq!(v.last_check_age, None);
        h.timed(Instant::now(), Duration::from_millis(3));
        let v = h.view(Instant::now());
        assert_eq!(v.last_check_duration, Some(Duration::from_millis(3)));
    }

    #[test]
    fn choose_skips_down_endpoints_and_fails_open_when_all_are_down() {
        let e = entry(vec![ep("10.0.0.1:80"), ep("10.0.0.2:80")]);
        let down = |i: usize| {
            for _ in 0..3 {
                e.endpoints[i]
                    .state
                    .health
                    .record(CheckResult::ConnectFailed, 2, 3);
            }
        };
        let cursor = std::sync::atomic::AtomicUsize::new(0);
        let pick = crate::table::balance::Pick {
            algorithm: Algorithm::RoundRobin,
            cursor: &cursor,
            client_hash: 0,
            maxconn: None,
        };
        let now = Instant::now();
        down(0);
        let gate = e.health_gate(true);
        assert_eq!(gate, HealthGate::SkipDown);
        for _ in 0..4 {
            assert_eq!(e.choose(&pick, gate, now, &[]), Some(1));
        }
        assert!(
            !e.pin_allowed(0, now, gate),
            "a pin to a down endpoint is re-pinned"
        );
        down(1);
        assert_eq!(e.health_gate(false), HealthGate::Closed);
        assert_eq!(e.choose(&pick, HealthGate::Closed, now, &[]), None);
        let gate = e.health_gate(true);
        assert_eq!(gate, HealthGate::FailOpen);
        let picked: std::collections::BTreeSet<_> = (0..4)
            .filter_map(|_| e.choose(&pick, gate, now, &[]))
            .collect();
        assert_eq!(picked.len(), 2, "fail-open spreads over all endpoints");
        assert!(e.pin_allowed(0, now, gate));
    }
}

//! One frontend's context, which every engine carries for its requests: the routing table's
//! reader, the frontend (plain or TLS port), its forwarding settings and pages, the decision
//! core's policy, timeouts, the backend TLS material, mirrors, external authentication's counters, the recorder, and the lifecycle
//! a graceful shutdown waits on. Built once per frontend at startup (`app`); the engines only
//! read it. No request passes through here.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use pingora::protocols::tls::SslDigest;

use crate::data::Timeouts;
use crate::data::external_auth::AuthCalls;
use crate::data::mirror::Mirrors;
use crate::data::record::Recorder;
use crate::data::tls;
use crate::decide::attempt::{Attempt, Policy};
use crate::decide::edits::Forwarding;
use crate::decide::error_page::ErrorPage;
use crate::decide::exchange::Desk;
use crate::decide::reply::Pages;
use crate::ops::access_log::AccessLog;
use crate::ops::lifecycle::{Active, Lifecycle};
use crate::ops::metrics::Metrics;
use crate::table::{Frontend, RoutingTable, TableReader};

/// One frontend's context: its settings, shared by every engine (Pingora's hooks and the fast
/// path's).
#[derive(Clone)]
pub struct HttpProxy {
    pub(crate) table: TableReader,
    pub(crate) frontend: Frontend,
    pub(crate) fwd: Arc<Forwarding>,
    pub(crate) policy: Policy,
    pub(crate) timeouts: Timeouts,
    /// The pages this frontend answers with itself.
    pub(crate) pages: Pages,
    lifecycle: Arc<Lifecycle>,
    pub(crate) recorder: Recorder,
    /// The CA bundles TLS backends are verified against and the client certificates shown to
    /// them, as loaded now (rotated by `BackendTlsWatcher`).
    pub(crate) backend_tls: Arc<tls::BackendTls>,
    /// Copies of requests for Gateway `RequestMirror` backends.
    pub(crate) mirrors: Arc<Mirrors>,
    /// External authentication's subrequests, counted.
    pub(crate) auth_calls: Arc<AuthCalls>,
    /// `--gateway-addresses` is set: a request's route depends on the address the client
    /// connected to, so the connection's local address is read (a `getsockname` per
    /// connection, spared otherwise).
    pub(crate) by_local_address: bool,
    /// Serves Gateway listeners' ports of their own: a request's routes are those of the
    /// listeners of the port the client connected to (its local address read too).
    pub(crate) by_local_port: bool,
}

impl HttpProxy {
    pub fn new(
        table: TableReader,
        frontend: Frontend,
        timeouts: Timeouts,
        tries: usize,
        not_found: ErrorPage,
    ) -> Self {
        let fwd = if frontend == Frontend::Https {
            Forwarding::tls(None, false)
        } else {
            Forwarding::plain()
        };
        let metrics = Arc::new(Metrics::new());
        HttpProxy {
            mirrors: Arc::new(Mirrors::new(&metrics)),
            auth_calls: Arc::new(AuthCalls::new(&metrics)),
            table,
            frontend,
            fwd: Arc::new(fwd),
            policy: Policy::new(tries, timeouts.passive_down, true),
            timeouts,
            pages: Pages::new(not_found),
            lifecycle: Lifecycle::new(),
            recorder: Recorder::new(frontend, metrics, Arc::new(AccessLog::off())),
            backend_tls: Arc::new(tls::BackendTls::new(None, None)),
            by_local_address: false,
            by_local_port: false,
        }
    }

    /// Whether a request's route depends on the address its connection was made to (so the
    /// engines read the socket's local address; a `getsockname` spared otherwise).
    pub(crate) fn reads_local(&self) -> bool {
        self.by_local_address || self.by_local_port
    }

    /// The attempt of one request on a connection from `client` to `local` with TLS digest
    /// `ssl`: what routing is told of the connection, decided here for every engine. The
    /// local address only where routes pick by it, the port only on Gateway listeners' own
    /// ports, the CA the client's certificate proved only while some listener verifies
    /// clients (`table`'s).
    pub(crate) fn attempt(
        &self,
        table: &RoutingTable,
        client: Option<IpAddr>,
        local: Option<SocketAddr>,
        ssl: Option<&SslDigest>,
    ) -> Attempt {
        let mut attempt = Attempt::new(client);
        if self.reads_local() {
            attempt.set_local_ip(local.map(|a| a.ip()));
            if self.by_local_port {
                attempt.set_local_port(local.map(|a| a.port()));
            }
        }
        if !table.client_validation.is_empty() {
            attempt.set_client_ca(tls::client_ca(ssl));
            if !table.client_validation.ingress_hosts.is_empty() {
                attempt.set_client_subject(tls::ingress_subject(ssl));
            }
        }
        attempt
    }

    /// `--gateway-addresses`: route by the connection's local address too (Gateways with an
    /// address of their own).
    pub fn with_local_addresses(mut self, on: bool) -> Self {
        self.by_local_address = on;
        self
    }

    /// Serves the ports Gateway HTTP and HTTPS listeners have of their own: routes by the
    /// connection's local port (and address).
    pub fn with_gateway_ports(mut self) -> Self {
        self.by_local_port = true;
        self
    }

    /// Verifies TLS backends against `backend_tls`'s bundles and presents its client
    /// certificates (without this, Pingora's default roots and no client certificate).
    pub fn with_backend_tls(mut self, backend_tls: Arc<tls::BackendTls>) -> Self {
        self.backend_tls = backend_tls;
        self
    }

    /// Counts this proxy's requests in `lifecycle`, so a graceful shutdown waits for them.
    pub fn with_lifecycle(mut self, lifecycle: Arc<Lifecycle>) -> Self {
        self.lifecycle = lifecycle;
        self
    }

    /// Records into `metrics` and `access_log` (without this, into a private registry and no
    /// log).
    pub fn with_observability(mut self, metrics: Arc<Metrics>, access_log: Arc<AccessLog>) -> Self {
        self.mirrors = Arc::new(Mirrors::new(&metrics));
        self.auth_calls = Arc::new(AuthCalls::new(&metrics));
        self.recorder = Recorder::new(self.frontend, metrics, access_log);
        self
    }

    /// `--health-fail-open`: when every endpoint is marked down, use them all (default) rather
    /// than answer 503.
    pub fn with_fail_open(mut self, fail_open: bool) -> Self {
        self.policy.fail_open = fail_open;
        self
    }

    /// `--traffic-healthz`: answer an unrouted `GET /healthz` with `200 ok`.
    pub fn with_traffic_healthz(mut self, on: bool) -> Self {
        self.policy.traffic_healthz = on;
        self
    }

    /// `--limit-status-code`: the status of requests a route's request limits refuse.
    pub fn with_limit_status(mut self, status: u16) -> Self {
        self.pages.limited = ErrorPage::limited(status);
        self
    }

    /// The TLS port plain-HTTP requests of TLS routes are redirected to (`None`: no TLS port).
    pub fn with_https_port(mut self, port: Option<u16>) -> Self {
        self.policy.https_port = port;
        self
    }

    /// The TLS port's forwarding settings (HSTS, client-certificate headers).
    pub fn with_forwarding(mut self, fwd: Forwarding) -> Self {
        self.fwd = Arc::new(fwd);
        self
    }

    /// What `decide::exchange` reads of this frontend.
    pub(crate) fn desk(&self) -> Desk<'_> {
        Desk {
            frontend: self.frontend,
            policy: &self.policy,
            pages: &self.pages,
            fwd: &self.fwd,
        }
    }

    /// Keeps a graceful shutdown waiting until the returned guard is dropped.
    pub(crate) fn enter(&self) -> Active {
        self.lifecycle.enter()
    }
}

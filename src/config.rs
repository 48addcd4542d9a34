//! Command-line flags (clap, each with an environment variable) and their validation into a
//! plain `Config`.
//!
//! External forms are parsed here, at the edge: `--tcp-services` into `TcpService`s, the
//! algorithm into `Algorithm`, URLs into `ErrorPageSource`. Nothing here does I/O beyond what
//! clap does; loading files is the job of the modules that use them.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::control::status::{Address, Publish};
use crate::control::translate::{Options, ServiceRoutes, TcpService};
use crate::data::Timeouts;
use crate::data::tls::{ClientVerify, TlsOptions};
use crate::data::wire::proxy_protocol;
use crate::ops::health::HealthChecks;
use crate::table::balance::Algorithm;

/// `--version`: the crate version, the git commit it was built from and the Pingora version
/// (build.rs; `unknown` when built outside a git checkout).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SWITCHYARD_GIT_COMMIT"),
    ", pingora ",
    env!("SWITCHYARD_PINGORA_VERSION"),
    ")"
);

/// How `--ingress-nginx-report` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    /// A table a person reads.
    Text,
    /// JSON a program reads.
    Json,
}

/// Whom an Ingress's request limits count for (`--limit-scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LimitScope {
    /// Each replica enforces the whole limit (ingress-nginx's `limit_req`).
    #[default]
    Replica,
    /// Each replica enforces its share: the limit divided by the ready replicas.
    Cluster,
}

/// How switchyard's own log lines (stderr) are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines; coloured only when stderr is a terminal and NO_COLOR is unset.
    #[default]
    Text,
    /// One JSON object per line: timestamp, level, target, fields (with the message), spans.
    Json,
}

/// A Kubernetes service load balancer: one immutable routing table, swapped atomically, served
/// by an embedded Pingora proxy.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "switchyard",
    version = VERSION,
    about,
    max_term_width = 100,
    after_help = "DURATION: a number with a unit, or several summed: 500ms, 30s, 5m, 2h, 1h30m \
                  (at most a week).\nEvery flag also reads SWITCHYARD_<FLAG> (--kubeconfig: \
                  KUBECONFIG)."
)]
pub struct Args {
    /// Kubernetes manifests (YAML or JSON, multi-document or `kind: List`) holding Services and
    /// EndpointSlices (or v1 Endpoints); a file or a directory. Repeatable. Files are watched
    /// and edits applied live. Without it, the cluster's Services and EndpointSlices are
    /// watched. Takes precedence over --kubeconfig.
    #[arg(
        long = "manifests",
        value_name = "PATH",
        env = "SWITCHYARD_MANIFESTS",
        value_delimiter = ','
    )]
    pub manifests: Vec<PathBuf>,

    /// Run the bundled example: two demo backends on 127.0.0.1:9001 and :9002 and
    /// examples/demo.yaml, served on --http-port (default 8080 in this mode).
    #[arg(long, env = "SWITCHYARD_DEMO")]
    pub demo: bool,

    /// Build the table once from the source, print it as sorted JSON on stdout, exit.
    #[arg(long = "dry-run", visible_alias = "dry", env = "SWITCHYARD_DRY_RUN")]
    pub dry_run: bool,

    /// With --dry-run: instead of the table, explain where a request for HOST/PATH goes (route,
    /// precedence, entry, endpoint, stickiness) as JSON. `/PATH` means no Host header;
    /// an `https://` prefix asks about the TLS frontend.
    #[arg(
        long,
        value_name = "HOST/PATH",
        requires = "dry_run",
        env = "SWITCHYARD_EXPLAIN"
    )]
    pub explain: Option<String>,

    /// With --dry-run: instead of the table, list as JSON the plain-HTTP requests the original
    /// service-loadbalancer would have answered differently for these Services
    /// (docs/migration.md).
    #[arg(
        long,
        requires = "dry_run",
        conflicts_with = "explain",
        env = "SWITCHYARD_MIGRATION_PREVIEW"
    )]
    pub migration_preview: bool,

    /// With --dry-run: instead of the table, report each Ingress's ingress-nginx annotations:
    /// served as ingress-nginx does, served with a stated difference, ignored, or refused (the
    /// Ingress not served), as a table (`text`) or `json`. Exits 1 if an Ingress is refused
    /// (docs/ingress.md#migrating-from-ingress-nginx).
    #[arg(
        long,
        value_name = "FORMAT",
        num_args = 0..=1,
        default_missing_value = "text",
        requires = "dry_run",
        conflicts_with_all = ["explain", "migration_preview"],
        env = "SWITCHYARD_INGRESS_NGINX_REPORT"
    )]
    pub ingress_nginx_report: Option<ReportFormat>,

    /// Address the listeners bind to.
    #[arg(
        long,
        value_name = "IP",
        default_value = "0.0.0.0",
        env = "SWITCHYARD_BIND_ADDRESS"
    )]
    pub bind_address: IpAddr,

    /// Port for plain HTTP services [default: 80; 8080 with --demo].
    #[arg(long, value_name = "PORT", env = "SWITCHYARD_HTTP_PORT")]
    pub http_port: Option<u16>,

    /// Port of the admin server: /healthz (liveness), /readyz (ready after the first table),
    /// /metrics (Prometheus) and /explain?host=H&path=P (where a request would go, and why).
    #[arg(
        long,
        value_name = "PORT",
        default_value_t = 8081,
        env = "SWITCHYARD_ADMIN_PORT"
    )]
    pub admin_port: u16,

    /// Port of the stats page (HTML, auto-refreshing; `?csv` and `?json` give the same data);
    /// 0 turns it off.
    #[arg(
        long,
        value_name = "PORT",
        default_value_t = 1936,
        env = "SWITCHYARD_STATS_PORT"
    )]
    pub stats_port: u16,

    /// Export the per-endpoint series of /metrics (endpoint_in_flight, endpoint_up: two per
    /// endpoint). The per-entry ones (entry_endpoints, entry_endpoints_up, entry_in_flight) are
    /// always there; `false` keeps a scrape of a large cluster small (10,000 Services × 10
    /// endpoints: 15 MiB a scrape with them).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set,
          env = "SWITCHYARD_METRICS_ENDPOINT_SERIES")]
    pub metrics_endpoint_series: bool,

    /// One structured line per request (and per TCP connection) on stdout: `json` or
    /// `logfmt`. Off when absent.
    #[arg(long, value_name = "FORMAT", value_parser = parse_access_log,
          env = "SWITCHYARD_ACCESS_LOG")]
    pub access_log: Option<crate::ops::access_log::Format>,

    /// Active health checks: how often each endpoint is checked (TCP connect, or HTTP GET with
    /// the lb.check-path annotation); 0 turns checks off except for Services whose
    /// lb.check-interval annotation asks for them.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration,
          env = "SWITCHYARD_CHECK_INTERVAL")]
    pub check_interval: Duration,

    /// Active health checks: how long one check may take before it counts as failed.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration,
          env = "SWITCHYARD_CHECK_TIMEOUT")]
    pub check_timeout: Duration,

    /// Active health checks: passed checks in a row that bring a down endpoint back.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=100),
          env = "SWITCHYARD_CHECK_RISE")]
    pub check_rise: u32,

    /// Active health checks: failed checks in a row that take an endpoint out.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100),
          env = "SWITCHYARD_CHECK_FALL")]
    pub check_fall: u32,

    /// When every endpoint of an entry is marked down by health checks, send traffic to all of
    /// them anyway (the checks may be what is broken); `false` answers 503 instead.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set,
          env = "SWITCHYARD_HEALTH_FAIL_OPEN")]
    pub health_fail_open: bool,

    /// Default balance algorithm for Services without a valid lb.algorithm annotation.
    #[arg(long, value_name = "ALGORITHM", default_value = "roundrobin", value_parser = parse_algorithm,
          env = "SWITCHYARD_BALANCE_ALGORITHM")]
    pub balance_algorithm: Algorithm,

    /// Status code for requests that match no route.
    #[arg(long, value_name = "CODE", default_value_t = 404, value_parser = clap::value_parser!(u16).range(200..=599),
          env = "SWITCHYARD_DEFAULT_RETURN_CODE")]
    pub default_return_code: u16,

    /// Status code for requests an Ingress's request limits refuse (`limit-rps`, `limit-rpm`,
    /// `limit-connections`): 503 as ingress-nginx's `limit-req-status-code`, or 429.
    #[arg(long, value_name = "CODE", default_value_t = 503, value_parser = clap::value_parser!(u16).range(400..=599),
          env = "SWITCHYARD_LIMIT_STATUS_CODE")]
    pub limit_status_code: u16,

    /// Whom an Ingress's `limit-rps`, `limit-rpm` and `limit-connections` count for:
    /// `replica`, each replica the whole limit (as ingress-nginx, whose users multiply by the
    /// replica count by hand); `cluster`, each replica its share, the limit divided by the
    /// ready endpoints of --limit-peers (rounded up), recounted as replicas come and go.
    #[arg(long, value_name = "SCOPE", value_enum, default_value_t = LimitScope::Replica,
          env = "SWITCHYARD_LIMIT_SCOPE")]
    pub limit_scope: LimitScope,

    /// The Service whose ready endpoints are switchyard's replicas (`namespace/name`), for
    /// --limit-scope cluster; default: --publish-service.
    #[arg(long, value_name = "NS/NAME", value_parser = parse_publish_service,
          env = "SWITCHYARD_LIMIT_PEERS")]
    pub limit_peers: Option<(String, String)>,

    /// Body for unmatched requests: a file:// or http(s):// URL, loaded once at startup (the URL
    /// must answer 200). A failed load is a warning and the built-in page is used.
    #[arg(long, value_name = "URL", env = "SWITCHYARD_ERROR_PAGE")]
    pub error_page: Option<String>,

    /// Serve only this Service (`name`, or `namespace/name`).
    #[arg(long, value_name = "NAME", env = "SWITCHYARD_TARGET_SERVICE")]
    pub target_service: Option<String>,

    /// Also serve `default/kubernetes`, the API server's own Service (skipped by default).
    #[arg(long, env = "SWITCHYARD_SERVE_KUBERNETES_SERVICE")]
    pub serve_kubernetes_service: bool,

    /// Which Services get routes of their own (the path route `/<name>`, or their `lb.host` /
    /// `lb.aclMatch` routes) on the public ports: `annotated` only those that ask
    /// (`serviceloadbalancer/lb.expose: "true"`, `lb.host` or `lb.aclMatch`); `namespace` also
    /// every Service of the home namespace (--namespace, else `default`: the original
    /// service-loadbalancer's mode); `all` every Service of every namespace. Ingresses, Gateway
    /// routes and --tcp-services reach any Service whatever this says.
    #[arg(long, value_name = "MODE", default_value = "annotated", value_parser = parse_service_routes,
          env = "SWITCHYARD_SERVICE_ROUTES")]
    pub service_routes: ServiceRoutes,

    /// Forward to the Service's clusterIP:port instead of its endpoints (kube-proxy balances).
    #[arg(long, env = "SWITCHYARD_FORWARD_SERVICES")]
    pub forward_services: bool,

    /// The controller name of switchyard's IngressClasses: Ingresses whose class has this
    /// `spec.controller` are served.
    #[arg(long, value_name = "NAME", default_value = crate::control::translate::DEFAULT_CONTROLLER_NAME,
          env = "SWITCHYARD_CONTROLLER_NAME")]
    pub controller_name: String,

    /// Also serve Ingresses that name no IngressClass (without this, only when one of
    /// switchyard's classes is the cluster's default).
    #[arg(long, env = "SWITCHYARD_WATCH_INGRESS_WITHOUT_CLASS")]
    pub watch_ingress_without_class: bool,

    /// Serve ingress-nginx's `ssl-passthrough: "true"`: the TLS connections of such an
    /// Ingress's hosts are relayed unterminated to its backend. Without this (as in
    /// ingress-nginx), such an Ingress is not served (its routes answer 403), never served
    /// with TLS terminated that its backend meant to terminate.
    #[arg(long, env = "SWITCHYARD_ENABLE_SSL_PASSTHROUGH")]
    pub enable_ssl_passthrough: bool,

    /// The controller name of switchyard's GatewayClasses: Gateways of a class whose
    /// `spec.controllerName` is this are served, with the HTTPRoutes attached to them.
    #[arg(long, value_name = "NAME", default_value = crate::control::translate::DEFAULT_GATEWAY_CONTROLLER_NAME,
          env = "SWITCHYARD_GATEWAY_CONTROLLER_NAME")]
    pub gateway_controller_name: String,

    /// The Gateway listener port served on the HTTP port: an `HTTP` listener with this `port`
    /// is switchyard's plain HTTP frontend [default: --http-port]. A Service in front of
    /// switchyard that maps port 80 to another port is the reason to set it.
    #[arg(long, value_name = "PORT", env = "SWITCHYARD_GATEWAY_HTTP_PORT")]
    pub gateway_http_port: Option<u16>,

    /// The Gateway listener port served on the TLS port: an `HTTPS` listener with this `port`
    /// is switchyard's TLS frontend [default: --https-port].
    #[arg(long, value_name = "PORT", env = "SWITCHYARD_GATEWAY_HTTPS_PORT")]
    pub gateway_https_port: Option<u16>,

    /// Local IP addresses to give Gateways (e.g. `10.0.0.10,10.0.0.11`): a Gateway gets
    /// those its `spec.addresses` names, or else a free one (oldest Gateway first), and keeps
    /// them; connections to its addresses see only that Gateway's listeners, routes and
    /// certificates, on the HTTP and the TLS port. Each address is also listened on when
    /// --bind-address is a specific one. Without it every Gateway is served on every address.
    #[arg(
        long,
        value_name = "IPS",
        value_delimiter = ',',
        env = "SWITCHYARD_GATEWAY_ADDRESSES"
    )]
    pub gateway_addresses: Vec<IpAddr>,

    /// Watch only the `kubernetes.io/tls` Secrets (and the `Opaque` ones with an htpasswd
    /// `auth` key, for basic authentication) with these labels (a Kubernetes label selector,
    /// e.g. `switchyard.io/tls=true`), so other Secrets are never sent to switchyard or kept
    /// in its memory.
    #[arg(
        long,
        value_name = "SELECTOR",
        env = "SWITCHYARD_SECRET_LABEL_SELECTOR"
    )]
    pub secret_label_selector: Option<String>,

    /// Watch only the ConfigMaps with these labels (a Kubernetes label selector, e.g.
    /// `switchyard.io/ca=true`) for the CA bundles Services name with
    /// lb.backend-ca-configmap. Only each ConfigMap's `ca.crt` is kept in memory, and those
    /// without one not at all [default: every ConfigMap switchyard may read].
    #[arg(
        long,
        value_name = "SELECTOR",
        env = "SWITCHYARD_CONFIGMAP_LABEL_SELECTOR"
    )]
    pub configmap_label_selector: Option<String>,

    /// Comma-separated `name:port` or `namespace/name:port` Service ports to serve as raw TCP
    /// frontends, each on --bind-address:<port>, opened and closed as the Services come and go.
    #[arg(long, value_name = "LIST", value_parser = parse_tcp_service, value_delimiter = ',',
          env = "SWITCHYARD_TCP_SERVICES")]
    pub tcp_services: Vec<TcpService>,

    /// Frontends whose clients come through a load balancer that sends the PROXY protocol (v1
    /// or v2) first: comma-separated `http`, `https`, `tcp` (every TCP frontend), `tcp:PORT`,
    /// or `all`. The header's client address is the one logged, forwarded and balanced on; a
    /// connection without a valid header is closed.
    #[arg(long, value_name = "LIST", value_delimiter = ',',
          value_parser = parse_proxy_frontend, env = "SWITCHYARD_PROXY_PROTOCOL")]
    pub proxy_protocol: Vec<proxy_protocol::FrontendSel>,

    /// With --proxy-protocol: the only peers (comma-separated CIDRs or addresses) allowed to
    /// send a PROXY header; connections from others are closed [default: any peer].
    #[arg(long, value_name = "CIDRS", value_delimiter = ',', value_parser = parse_cidr,
          requires = "proxy_protocol", env = "SWITCHYARD_PROXY_PROTOCOL_TRUSTED")]
    pub proxy_protocol_trusted: Vec<proxy_protocol::Cidr>,

    /// Port of the TLS frontend (Ingress and Gateway Secrets, lb.sslTerm Services). Opened with
    /// --ssl-cert, and in a cluster without it (a generated self-signed certificate is then
    /// the default); 0 keeps it closed.
    #[arg(
        long,
        value_name = "PORT",
        default_value_t = 443,
        env = "SWITCHYARD_HTTPS_PORT"
    )]
    pub https_port: u16,

    /// PEM file holding a certificate chain and its key (HAProxy style), or a directory of
    /// such files chosen by SNI. Watched: changes apply to new handshakes.
    #[arg(long, value_name = "PATH", env = "SWITCHYARD_SSL_CERT")]
    pub ssl_cert: Option<PathBuf>,

    /// The certificate for clients without SNI or with an unknown name: a PEM file, or a file
    /// name in the --ssl-cert directory [default: the first file in sorted order].
    #[arg(long, value_name = "PATH", env = "SWITCHYARD_SSL_DEFAULT_CERT")]
    pub ssl_default_cert: Option<PathBuf>,

    /// CA bundle (PEM) to verify client certificates against; turns on mTLS. Watched.
    #[arg(long, value_name = "PATH", env = "SWITCHYARD_SSL_CA_CERT")]
    pub ssl_ca_cert: Option<PathBuf>,

    /// CA bundle (PEM) that TLS backends' certificates are verified against (Services whose
    /// appProtocol or lb.backend-protocol is https, h2 or grpcs) [default: the system's roots].
    #[arg(long, value_name = "PATH", env = "SWITCHYARD_BACKEND_CA_FILE")]
    pub backend_ca_file: Option<PathBuf>,

    /// Client certificate chain (PEM) presented to TLS backends that ask for one (mutual TLS),
    /// unless a Service names its own; with --backend-client-key.
    #[arg(
        long,
        value_name = "PATH",
        env = "SWITCHYARD_BACKEND_CLIENT_CERT",
        requires = "backend_client_key"
    )]
    pub backend_client_cert: Option<PathBuf>,

    /// The private key (PEM) of --backend-client-cert.
    #[arg(
        long,
        value_name = "PATH",
        env = "SWITCHYARD_BACKEND_CLIENT_KEY",
        requires = "backend_client_cert"
    )]
    pub backend_client_key: Option<PathBuf>,

    /// With --ssl-ca-cert: `required` fails handshakes without a valid client certificate;
    /// `optional` lets them through with X-Client-Verify: NONE.
    #[arg(long, value_name = "MODE", default_value = "required", value_parser = parse_verify,
          env = "SWITCHYARD_SSL_VERIFY")]
    pub ssl_verify: ClientVerify,

    /// max-age of the Strict-Transport-Security header on TLS responses (0: no header).
    #[arg(long, value_name = "SECONDS", default_value_t = crate::data::tls::DEFAULT_HSTS_MAX_AGE,
          env = "SWITCHYARD_HSTS_MAX_AGE")]
    pub hsts_max_age: u64,

    /// Idle timeout of raw TCP connections and upgraded (WebSocket) tunnels.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_timeout,
          env = "SWITCHYARD_TUNNEL_TIMEOUT")]
    pub tunnel_timeout: Duration,

    /// Idle timeout of a Gateway UDP listener's client flow: with no datagram either way for
    /// this long, the flow and its socket to the endpoint are closed.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_timeout,
          env = "SWITCHYARD_UDP_IDLE_TIMEOUT")]
    pub udp_idle_timeout: Duration,

    /// The most client flows one Gateway UDP listener holds; a new client past it has its
    /// datagrams dropped (counted) until a flow ends.
    #[arg(long, value_name = "N", default_value_t = 16_384,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000),
          env = "SWITCHYARD_UDP_MAX_FLOWS")]
    pub udp_max_flows: u32,

    /// How long a backend may take to start its response, and at most between two reads of
    /// it (HAProxy `timeout server`); past it the request fails with 504 Gateway Timeout.
    #[arg(long, value_name = "DURATION", default_value = "50s", value_parser = parse_timeout,
          env = "SWITCHYARD_SERVER_TIMEOUT")]
    pub server_timeout: Duration,

    /// The cluster watcher's maximum wait (default 1s): how long a change may wait for a
    /// build while a storm of changes is being coalesced. Hidden and without an environment
    /// variable: only the churn tests lower it, to turn nearly every API change into a swap.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, hide = true)]
    pub watch_max_wait: Option<Duration>,

    /// A client must send a whole request header within this time (counted from the
    /// connection's accept for its first request, from the first byte for later ones), and
    /// finish a TLS handshake within it; otherwise it gets 408 and is disconnected.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_timeout,
          env = "SWITCHYARD_REQUEST_HEADER_TIMEOUT")]
    pub request_header_timeout: Duration,

    /// How long a client connection may sit idle between requests (HTTP/1 keep-alive, and an
    /// HTTP/2 connection with no open stream) before it is closed (HAProxy `timeout
    /// http-keep-alive`). Whole seconds, at least one.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_keep_alive,
          env = "SWITCHYARD_KEEP_ALIVE_TIMEOUT")]
    pub keep_alive_timeout: Duration,

    /// Longest request header (request line and header fields) on the HTTP and TLS ports; a
    /// longer one gets 431 and the connection is closed.
    #[arg(long, value_name = "BYTES", default_value_t = 65536,
          value_parser = clap::value_parser!(u32).range(1024..=1_048_575),
          env = "SWITCHYARD_MAX_REQUEST_HEADER_BYTES")]
    pub max_request_header_bytes: u32,

    /// Most client connections open at once on the HTTP and TLS ports together (and Gateway
    /// listeners' own HTTP and HTTPS ports); a connection beyond it is closed at once, without
    /// a response, and counted.
    #[arg(long, value_name = "N", default_value_t = 10000,
          value_parser = clap::value_parser!(u32).range(1..),
          env = "SWITCHYARD_MAX_CONNECTIONS")]
    pub max_connections: u32,

    /// Address the admin server (/healthz, /readyz, /metrics, /explain) binds to [default:
    /// --bind-address, itself 0.0.0.0]; kubelet probes and Prometheus need the pod IP.
    #[arg(long, value_name = "IP", env = "SWITCHYARD_ADMIN_BIND_ADDRESS")]
    pub admin_bind_address: Option<IpAddr>,

    /// Address the stats page binds to. It lists every backend address, so it stays on
    /// loopback unless asked (`0.0.0.0` opens it; the original served it on *:1936).
    #[arg(
        long,
        value_name = "IP",
        default_value = "127.0.0.1",
        env = "SWITCHYARD_STATS_BIND_ADDRESS"
    )]
    pub stats_bind_address: IpAddr,

    /// Answer /explain to clients that are not on loopback too (it shows routes, entries and
    /// backend addresses; off by default, `kubectl port-forward` reaches it as loopback).
    #[arg(long, env = "SWITCHYARD_EXPOSE_EXPLAIN")]
    pub expose_explain: bool,

    /// Serve only Services of this namespace (absent: all namespaces). Entries of Services in
    /// this namespace (or in `default` when absent) are named without a `namespace/` prefix.
    #[arg(long, value_name = "NS", env = "SWITCHYARD_NAMESPACE")]
    pub namespace: Option<String>,

    /// Kubeconfig file for the cluster watch (takes precedence over the in-cluster service
    /// account).
    #[arg(long, value_name = "PATH", env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Use the in-cluster service account for the cluster watch when no kubeconfig is given;
    /// `false` reads ~/.kube/config instead.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set,
          env = "SWITCHYARD_USE_KUBERNETES_CLUSTER_SERVICE")]
    pub use_kubernetes_cluster_service: bool,

    /// On SIGTERM: how long to keep serving while not ready, so endpoint removal can spread.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration,
          env = "SWITCHYARD_SHUTDOWN_DELAY")]
    pub shutdown_delay: Duration,

    /// On SIGTERM, after the delay: the longest in-flight requests may drain before exit.
    #[arg(long, value_name = "DURATION", default_value = "20s", value_parser = parse_duration,
          env = "SWITCHYARD_SHUTDOWN_GRACE")]
    pub shutdown_grace: Duration,

    /// Format of switchyard's own log lines on stderr: `text` (coloured only on a terminal,
    /// never with NO_COLOR set) or `json` (one object per line). RUST_LOG sets the levels
    /// (`debug` at most in a release build: `trace` is compiled out).
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = LogFormat::Text,
          env = "SWITCHYARD_LOG_FORMAT")]
    pub log_format: LogFormat,

    /// Worker threads of the data plane (0: one per core).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        env = "SWITCHYARD_THREADS"
    )]
    pub threads: usize,

    /// `false` (the default): one single-threaded runtime per thread, each client connection
    /// (HTTP or raw TCP) placed on one at random and kept there with all it starts (its socket
    /// served by that thread's reactor), and each thread with HTTP/2 connections to backends of
    /// its own, as HAProxy and Envoy pin a connection to a thread. `true`: tokio's
    /// work-stealing scheduler, whose threads share the work; measured on one thread and two,
    /// it took 11-63 % more CPU per HTTP/2 request (docs/performance-notebook.md). It may still serve
    /// better a machine with many more cores than busy connections (not measured).
    #[arg(long, value_name = "BOOL", default_value_t = false, action = clap::ArgAction::Set,
          env = "SWITCHYARD_WORK_STEALING")]
    pub work_stealing: bool,

    /// Serve plain GET and HEAD requests without a body (HTTP/1.1, and HTTP/2 streams) to
    /// HTTP/1.1 backends, in clear or over TLS (`https`), and every HTTP/2 client's stream to
    /// HTTP/2 backends (h2c/gRPC, and h2/grpcs over TLS), on switchyard's own lean path, with
    /// the same routing, retries, TLS verification, metrics and logs; `false` sends every
    /// request through Pingora's proxy.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set,
          env = "SWITCHYARD_FAST_PATH")]
    pub fast_path: bool,

    /// Answer `GET /healthz` on the traffic ports with `200 ok` when no Service claims that
    /// path, as the original's default backend did (external load balancers probe it).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set,
          env = "SWITCHYARD_TRAFFIC_HEALTHZ")]
    pub traffic_healthz: bool,

    /// Elect one leader among the replicas through a coordination.k8s.io Lease in the pod's
    /// namespace (POD_NAMESPACE): only it writes Ingress and Gateway API status and Events. Every replica
    /// serves traffic either way. `false`: this replica writes them (one replica only).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set,
          env = "SWITCHYARD_LEADER_ELECT")]
    pub leader_elect: bool,

    /// Name of the leader-election Lease.
    #[arg(long, value_name = "NAME", default_value = crate::control::lease::DEFAULT_ELECTION_ID,
          env = "SWITCHYARD_ELECTION_ID")]
    pub election_id: String,

    /// How long a leader's Lease holds without renewal (3s to 5m, default 15s): a killed leader
    /// (SIGKILL, a lost node) is replaced after about this long. The renew deadline is 2/3 of
    /// it and the retry period 2/15, so they stay in client-go's order (lease > renew > retry).
    #[arg(long, value_name = "DURATION", value_parser = parse_lease_duration,
          env = "SWITCHYARD_ELECTION_LEASE_DURATION")]
    pub election_lease_duration: Option<Duration>,

    /// Set status.loadBalancer.ingress of served Ingresses to this Service's addresses
    /// (`namespace/name`): its load balancer's, its externalIPs or its clusterIP, by type.
    #[arg(long, value_name = "NS/NAME", value_parser = parse_publish_service,
          conflicts_with = "publish_status_address", env = "SWITCHYARD_PUBLISH_SERVICE")]
    pub publish_service: Option<(String, String)>,

    /// Set status.loadBalancer.ingress of served Ingresses to these IPs or host names
    /// (comma-separated).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        env = "SWITCHYARD_PUBLISH_STATUS_ADDRESS"
    )]
    pub publish_status_address: Vec<String>,
}

/// A DURATION flag: `250ms`, `30s`, `5m`, `2h`, `1h30m` (humantime, the syntax annotations use
/// too), at most a week. A bare number is still read as seconds, as it was before units.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_digit() || c == '.') {
        let secs: f64 = s
            .parse()
            .map_err(|_| format!("{s:?} is not a duration like 500ms, 30s, 5m or 2h"))?;
        let max = crate::control::translate::MAX_DURATION.as_secs_f64();
        if !secs.is_finite() || secs > max {
            return Err(format!("{s:?} is longer than a week"));
        }
        return Ok(Duration::from_secs_f64(secs));
    }
    crate::control::translate::parse_duration(s)
}

/// A duration that must not be zero (a zero timeout would fail every request at once).
fn parse_timeout(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err(format!("{s:?}: a timeout must be above zero")),
        d => Ok(d),
    }
}

/// A lease shorter than 3 s renews every 400 ms or faster, and one API-server hiccup costs
/// the leadership; one longer than 5 minutes leaves status unwritten that long after a crash.
fn parse_lease_duration(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d < Duration::from_secs(3) || d > Duration::from_secs(300) => {
            Err(format!("{s:?}: the lease duration is between 3s and 5m"))
        }
        d => Ok(d),
    }
}

/// Pingora counts the keep-alive timeout in whole seconds.
fn parse_keep_alive(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d < Duration::from_secs(1) || d.subsec_nanos() != 0 => Err(format!(
            "{s:?}: the keep-alive timeout is whole seconds, at least 1s"
        )),
        d => Ok(d),
    }
}

fn parse_access_log(s: &str) -> Result<crate::ops::access_log::Format, String> {
    s.parse()
}

fn parse_verify(s: &str) -> Result<ClientVerify, String> {
    s.parse()
}

fn parse_algorithm(s: &str) -> Result<Algorithm, String> {
    s.parse::<Algorithm>().map_err(|e| e.to_string())
}

fn parse_service_routes(s: &str) -> Result<ServiceRoutes, String> {
    s.parse()
}

fn parse_proxy_frontend(s: &str) -> Result<proxy_protocol::FrontendSel, String> {
    s.parse()
}

fn parse_cidr(s: &str) -> Result<proxy_protocol::Cidr, String> {
    s.parse()
        .map_err(|e: crate::table::cidr::CidrError| e.to_string())
}

fn parse_publish_service(s: &str) -> Result<(String, String), String> {
    match s.trim().split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_string(), name.to_string()))
        }
        _ => Err(format!("{s:?} is not namespace/name")),
    }
}

fn parse_tcp_service(s: &str) -> Result<TcpService, String> {
    let (svc, port) = s
        .trim()
        .rsplit_once(':')
        .ok_or_else(|| format!("{s:?} is not name:port or namespace/name:port"))?;
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("{s:?}: port must be 1-65535"))?;
    let (namespace, name) = match svc.split_once('/') {
        Some((ns, name)) => (Some(ns.to_string()), name),
        None => (None, svc),
    };
    if name.is_empty() || namespace.as_deref() == Some("") {
        return Err(format!("{s:?}: empty service or namespace name"));
    }
    Ok(TcpService {
        namespace,
        name: name.to_string(),
        port,
    })
}

/// Where the routing objects come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Files and directories, watched.
    Manifests(Vec<PathBuf>),
    /// The Kubernetes API (the cluster watcher).
    Cluster {
        kubeconfig: Option<PathBuf>,
        in_cluster: bool,
    },
}

/// Validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub source: Source,
    /// `--log-format`; read by main, which sets up logging.
    pub log_format: LogFormat,
    pub demo: bool,
    pub dry_run: bool,
    pub bind_address: IpAddr,
    /// `--admin-bind-address`: the admin server.
    pub admin_bind_address: IpAddr,
    /// `--stats-bind-address`: the stats page.
    pub stats_bind_address: IpAddr,
    /// `--expose-explain`: /explain for non-loopback clients too.
    pub expose_explain: bool,
    pub http_port: u16,
    pub admin_port: u16,
    pub https_port: u16,
    /// `--max-connections`, `--max-request-header-bytes` (with `timeouts.request_headers`).
    pub downstream: crate::data::guard::Limits,
    /// TLS termination; `None` without `--ssl-cert` (the TLS port is not opened).
    pub tls: Option<TlsOptions>,
    /// 0: no stats page.
    pub stats_port: u16,
    /// `--metrics-endpoint-series`: per-endpoint series in /metrics.
    pub metrics_endpoint_series: bool,
    /// `--explain HOST/PATH` (with `--dry-run`).
    pub explain: Option<String>,
    /// `--migration-preview`.
    pub migration_preview: bool,
    /// `--ingress-nginx-report`.
    pub ingress_nginx_report: Option<ReportFormat>,
    pub access_log: Option<crate::ops::access_log::Format>,
    pub health: HealthChecks,
    pub default_return_code: u16,
    /// `--limit-status-code`.
    pub limit_status_code: u16,
    pub error_page: Option<String>,
    pub translate: Options,
    pub timeouts: Timeouts,
    /// `--udp-idle-timeout`, `--udp-max-flows`: Gateway UDP listeners' flows.
    pub udp: crate::data::engine::udp::UdpSettings,
    /// Tries per request on connect failure (HAProxy `retries 3` + `option redispatch`).
    pub connect_tries: usize,
    pub threads: usize,
    /// `--work-stealing`.
    pub work_stealing: bool,
    /// `--fast-path`.
    pub fast_path: bool,
    /// `--traffic-healthz`.
    pub traffic_healthz: bool,
    /// `--proxy-protocol`, `--proxy-protocol-trusted`.
    pub proxy_protocol: proxy_protocol::Settings,
    /// `--backend-ca-file`: checked to hold a PEM certificate.
    pub backend_ca_file: Option<PathBuf>,
    /// `--backend-client-cert` and `--backend-client-key`: checked to hold a PEM certificate
    /// and a PEM private key.
    pub backend_client_cert: Option<(PathBuf, PathBuf)>,
    pub shutdown_delay: Duration,
    pub shutdown_grace: Duration,
    /// `--secret-label-selector`: the TLS (and basic-authentication) Secrets watched.
    pub secret_label_selector: Option<String>,
    /// `--configmap-label-selector`: the ConfigMaps watched.
    pub configmap_label_selector: Option<String>,
    /// The cluster watcher's maximum wait, when the hidden flag overrides it.
    pub watch_max_wait: Option<Duration>,
    /// Leader election (`--leader-elect`, cluster source only): `None` when off.
    pub election: Option<Election>,
    /// Where Ingress status addresses come from; `None`: no status is written.
    pub publish: Option<Publish>,
}

/// The leader election's settings; the identity and namespace are the pod's, read at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Election {
    /// `--election-id`: the Lease's name.
    pub id: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// A configuration that parsed but cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "--limit-scope cluster counts the replicas by the ready endpoints of their Service: set \
         --limit-peers NAMESPACE/NAME (or --publish-service)"
    )]
    LimitPeers,
    #[error("--http-port and --admin-port are both {0}; each listener needs its own port")]
    PortClash(u16),
    #[error("--stats-port {0} is also the HTTP or admin port; each listener needs its own port")]
    StatsPortClash(u16),
    #[error(
        "--https-port {0} is also the HTTP, admin or stats port; each listener needs its own port"
    )]
    HttpsPortClash(u16),
    #[error("{0} needs --ssl-cert")]
    NeedsSslCert(&'static str),
    #[error("--https-port 0 turns the TLS port off, and --ssl-cert needs it")]
    TlsPortOff,
    #[error("--proxy-protocol tcp:{0}: no --tcp-services entry has port {0}")]
    ProxyProtocolPort(u16),
    #[error("--backend-ca-file {0}: {1}")]
    BackendCa(String, String),
    #[error(
        "{0} needs the cluster source (it writes Ingress status through the API server), not --manifests"
    )]
    NeedsCluster(&'static str),
    #[error("{0} {1}: {2}")]
    BackendClientCert(&'static str, String, String),
    #[error(
        "--publish-status-address {0}: neither an IP address nor a DNS name (lowercase RFC 1123: \
         labels of a-z, 0-9 and inner '-', dot-separated)"
    )]
    PublishAddress(String),
    #[error("--gateway-addresses {0}: a Gateway's address must be a specific address, not {0}")]
    GatewayAddress(IpAddr),
    #[error("--manifests {0}: no such file or directory")]
    NoManifests(String),
    #[error("--demo: cannot write the bundled manifest: {0}")]
    Demo(String),
}

impl Config {
    /// Checks that the sources exist: a `--manifests` path that does not is a bad flag (one
    /// line, exit 2), not a process left unready for ever. Apart from `from_args`, whose
    /// checks need no file system.
    pub fn check_sources(&self) -> Result<(), ConfigError> {
        if let Source::Manifests(paths) = &self.source
            && let Some(missing) = paths.iter().find(|p| !p.exists())
        {
            return Err(ConfigError::NoManifests(missing.display().to_string()));
        }
        Ok(())
    }

    pub fn from_args(args: Args) -> Result<Config, ConfigError> {
        let mut manifests = args.manifests;
        if args.demo && manifests.is_empty() {
            manifests
                .push(crate::demo::manifest_path().map_err(|e| ConfigError::Demo(e.to_string()))?);
        }
        // `KUBECONFIG` is often set in a shell; explicit manifests still win over it.
        let source = if manifests.is_empty() {
            Source::Cluster {
                kubeconfig: args.kubeconfig,
                in_cluster: args.use_kubernetes_cluster_service,
            }
        } else {
            Source::Manifests(manifests)
        };
        let cluster = matches!(source, Source::Cluster { .. });
        // In the order given (free ones are handed out in it), each once; an IPv4-mapped
        // IPv6 address is the IPv4 one, as sockets report it.
        let mut gateway_addresses: Vec<IpAddr> = Vec::new();
        for ip in args.gateway_addresses.iter().map(IpAddr::to_canonical) {
            if ip.is_unspecified() {
                return Err(ConfigError::GatewayAddress(ip));
            }
            if !gateway_addresses.contains(&ip) {
                gateway_addresses.push(ip);
            }
        }
        let limit_peers = match args.limit_scope {
            LimitScope::Replica => None,
            LimitScope::Cluster => Some(
                args.limit_peers
                    .clone()
                    .or_else(|| args.publish_service.clone())
                    .ok_or(ConfigError::LimitPeers)?,
            ),
        };
        let publish = match (args.publish_service, args.publish_status_address) {
            (Some((namespace, name)), _) => Some(Publish::Service { namespace, name }),
            (None, list) if !list.is_empty() => {
                let mut published = Vec::new();
                for a in list.iter().filter(|a| !a.trim().is_empty()) {
                    let address = Address::parse(a);
                    // Refused here rather than by the API server at every status write.
                    if !address.is_valid() {
                        return Err(ConfigError::PublishAddress(a.trim().to_string()));
                    }
                    published.push(address);
                }
                Some(Publish::Static(published))
            }
            _ => None,
        };
        if publish.is_some() && !cluster {
            return Err(ConfigError::NeedsCluster(match publish {
                Some(Publish::Service { .. }) => "--publish-service",
                _ => "--publish-status-address",
            }));
        }
        let http_port = args.http_port.unwrap_or(if args.demo { 8080 } else { 80 });
        if http_port == args.admin_port {
            return Err(ConfigError::PortClash(http_port));
        }
        if args.stats_port != 0
            && (args.stats_port == http_port || args.stats_port == args.admin_port)
        {
            return Err(ConfigError::StatsPortClash(args.stats_port));
        }
        let hsts_max_age = (args.hsts_max_age > 0).then_some(args.hsts_max_age);
        let tls = match args.ssl_cert {
            Some(_) if args.https_port == 0 => return Err(ConfigError::TlsPortOff),
            Some(cert) => Some(TlsOptions {
                cert: Some(cert),
                default_cert: args.ssl_default_cert,
                client_ca: args.ssl_ca_cert,
                verify: args.ssl_verify,
                hsts_max_age,
            }),
            None if args.ssl_ca_cert.is_some() => {
                return Err(ConfigError::NeedsSslCert("--ssl-ca-cert"));
            }
            None if args.ssl_default_cert.is_some() => {
                return Err(ConfigError::NeedsSslCert("--ssl-default-cert"));
            }
            // In a cluster, Ingress and Gateway Secrets may come at any time: the TLS port is
            // open, with a generated default certificate, unless --https-port 0 turns it off.
            None if cluster && args.https_port != 0 => Some(TlsOptions {
                cert: None,
                default_cert: None,
                client_ca: None,
                verify: args.ssl_verify,
                hsts_max_age,
            }),
            None => None,
        };
        let tls_port = tls.is_some();
        let others = [http_port, args.admin_port, args.stats_port];
        if tls.is_some() && others.contains(&args.https_port) {
            return Err(ConfigError::HttpsPortClash(args.https_port));
        }
        let mut proxy = proxy_protocol::Settings {
            trusted: args.proxy_protocol_trusted,
            ..Default::default()
        };
        for sel in args.proxy_protocol {
            match sel {
                // A typo here would leave a port open to forged or missing headers unnoticed.
                proxy_protocol::FrontendSel::Tcp(Some(port))
                    if !args.tcp_services.iter().any(|t| t.port == port) =>
                {
                    return Err(ConfigError::ProxyProtocolPort(port));
                }
                proxy_protocol::FrontendSel::Https if tls.is_none() => {
                    return Err(ConfigError::NeedsSslCert("--proxy-protocol https"));
                }
                _ => {}
            }
            proxy.select(sel);
        }
        let threads = if args.threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            args.threads
        };
        Ok(Config {
            source,
            log_format: args.log_format,
            demo: args.demo,
            dry_run: args.dry_run,
            bind_address: args.bind_address,
            admin_bind_address: args.admin_bind_address.unwrap_or(args.bind_address),
            stats_bind_address: args.stats_bind_address,
            expose_explain: args.expose_explain,
            downstream: crate::data::guard::Limits {
                max_connections: args.max_connections as usize,
                max_header_bytes: args.max_request_header_bytes as usize,
                header_timeout: args.request_header_timeout,
                keep_alive: args.keep_alive_timeout,
            },
            http_port,
            admin_port: args.admin_port,
            https_port: args.https_port,
            tls,
            stats_port: args.stats_port,
            metrics_endpoint_series: args.metrics_endpoint_series,
            explain: args.explain,
            migration_preview: args.migration_preview,
            ingress_nginx_report: args.ingress_nginx_report,
            access_log: args.access_log,
            health: HealthChecks {
                interval: args.check_interval,
                timeout: args.check_timeout,
                rise: args.check_rise,
                fall: args.check_fall,
                fail_open: args.health_fail_open,
            },
            default_return_code: args.default_return_code,
            limit_status_code: args.limit_status_code,
            error_page: args.error_page,
            translate: Options {
                default_algorithm: args.balance_algorithm,
                target_service: args.target_service,
                forward_services: args.forward_services,
                tcp_services: args.tcp_services,
                home_namespace: args.namespace.clone().unwrap_or_else(|| "default".into()),
                only_namespace: args.namespace,
                service_routes: args.service_routes,
                serve_kubernetes_service: args.serve_kubernetes_service,
                controller_name: args.controller_name,
                watch_ingress_without_class: args.watch_ingress_without_class,
                ssl_passthrough: args.enable_ssl_passthrough,
                limit_peers,
                gateway_controller_name: args.gateway_controller_name,
                gateway_http_port: args.gateway_http_port.unwrap_or(http_port),
                gateway_https_port: args.gateway_https_port.unwrap_or(args.https_port),
                gateway_addresses,
                tls_port,
                own_ports: [http_port, args.admin_port, args.stats_port]
                    .into_iter()
                    .chain(tls_port.then_some(args.https_port))
                    .filter(|p| *p != 0)
                    .collect(),
            },
            timeouts: Timeouts {
                tunnel: args.tunnel_timeout,
                server_idle: args.server_timeout,
                request_headers: args.request_header_timeout,
                keep_alive: args.keep_alive_timeout,
                ..Timeouts::default()
            },
            udp: crate::data::engine::udp::UdpSettings {
                idle: args.udp_idle_timeout,
                max_flows: args.udp_max_flows as usize,
            },
            connect_tries: 3,
            threads,
            work_stealing: args.work_stealing,
            fast_path: args.fast_path,
            traffic_healthz: args.traffic_healthz,
            proxy_protocol: proxy,
            backend_ca_file: args
                .backend_ca_file
                .map(|p| check_ca_file(&p).map(|()| p))
                .transpose()?,
            backend_client_cert: match (args.backend_client_cert, args.backend_client_key) {
                (Some(cert), Some(key)) => {
                    check_pem(&cert, "--backend-client-cert", "CERTIFICATE")?;
                    check_pem(&key, "--backend-client-key", "PRIVATE KEY")?;
                    Some((cert, key))
                }
                // clap requires both or neither.
                _ => None,
            },
            shutdown_delay: args.shutdown_delay,
            shutdown_grace: args.shutdown_grace,
            watch_max_wait: args.watch_max_wait,
            secret_label_selector: args.secret_label_selector,
            configmap_label_selector: args.configmap_label_selector,
            election: (cluster && args.leader_elect).then(|| {
                let lease = args
                    .election_lease_duration
                    .unwrap_or(crate::control::lease::LEASE_DURATION);
                Election {
                    id: args.election_id,
                    lease_duration: lease,
                    renew_deadline: lease * 2 / 3,
                    retry_period: lease * 2 / 15,
                }
            }),
            publish,
        })
    }
}

/// A CA bundle must be readable and hold at least one PEM certificate: Pingora would
/// otherwise fail on the first TLS connection to a backend, far from the cause.
fn check_ca_file(path: &std::path::Path) -> Result<(), ConfigError> {
    let bad = |why: String| ConfigError::BackendCa(path.display().to_string(), why);
    let pem = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    if !pem.contains("-----BEGIN CERTIFICATE-----") {
        return Err(bad("holds no PEM certificate".into()));
    }
    Ok(())
}

/// A client certificate or key file must be readable and hold a PEM block of its kind (any
/// `... PRIVATE KEY` for a key), so a typo fails at startup, not at the first handshake.
fn check_pem(path: &std::path::Path, flag: &'static str, kind: &str) -> Result<(), ConfigError> {
    let bad = |why: String| ConfigError::BackendClientCert(flag, path.display().to_string(), why);
    let pem = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let found = pem
        .lines()
        .any(|l| l.starts_with("-----BEGIN ") && l.trim_end().ends_with(&format!("{kind}-----")));
    if !found {
        return Err(bad(format!("holds no PEM {kind}")));
    }
    Ok(())
}

/// `--help` in groups, each flag under one heading (a test checks none is left out).
const HEADINGS: &[(&str, &[&str])] = &[
    (
        "Sources and cluster",
        &[
            "manifests",
            "demo",
            "dry_run",
            "explain",
            "migration_preview",
            "ingress_nginx_report",
            "kubeconfig",
            "use_kubernetes_cluster_service",
            "namespace",
            "target_service",
            "serve_kubernetes_service",
            "service_routes",
            "forward_services",
        ],
    ),
    (
        "Ingress",
        &[
            "controller_name",
            "watch_ingress_without_class",
            "enable_ssl_passthrough",
            "secret_label_selector",
        ],
    ),
    (
        "Gateway API",
        &[
            "gateway_controller_name",
            "gateway_http_port",
            "gateway_https_port",
            "gateway_addresses",
        ],
    ),
    (
        "Replicas and Ingress status",
        &[
            "leader_elect",
            "election_id",
            "election_lease_duration",
            "publish_service",
            "publish_status_address",
        ],
    ),
    (
        "Traffic",
        &[
            "bind_address",
            "http_port",
            "tcp_services",
            "proxy_protocol",
            "proxy_protocol_trusted",
            "balance_algorithm",
            "default_return_code",
            "limit_status_code",
            "limit_scope",
            "limit_peers",
            "error_page",
            "traffic_healthz",
            "fast_path",
            "threads",
            "work_stealing",
        ],
    ),
    (
        "TLS",
        &[
            "https_port",
            "ssl_cert",
            "ssl_default_cert",
            "ssl_ca_cert",
            "ssl_verify",
            "backend_ca_file",
            "configmap_label_selector",
            "backend_client_cert",
            "backend_client_key",
            "hsts_max_age",
        ],
    ),
    (
        "Health checks",
        &[
            "check_interval",
            "check_timeout",
            "check_rise",
            "check_fall",
            "health_fail_open",
        ],
    ),
    (
        "Limits and timeouts",
        &[
            "request_header_timeout",
            "keep_alive_timeout",
            "max_request_header_bytes",
            "max_connections",
            "server_timeout",
            "tunnel_timeout",
            "udp_idle_timeout",
            "udp_max_flows",
            "shutdown_delay",
            "shutdown_grace",
        ],
    ),
    (
        "Admin and logs",
        &[
            "admin_port",
            "admin_bind_address",
            "stats_port",
            "metrics_endpoint_series",
            "stats_bind_address",
            "expose_explain",
            "access_log",
            "log_format",
        ],
    ),
];

/// The flags `-h` shows: what a first run needs. `--help` shows every flag.
const SHORT_HELP: &[&str] = &[
    "manifests",
    "demo",
    "dry_run",
    "explain",
    "kubeconfig",
    "namespace",
    "service_routes",
    "http_port",
    "https_port",
    "ssl_cert",
    "leader_elect",
    "publish_service",
    "admin_port",
    "stats_port",
    "access_log",
    "log_format",
];

/// A flag's help up to the end of its first sentence: its one line in `-h`.
fn first_sentence(help: &str) -> String {
    let end = help
        .match_indices(". ")
        .map(|(i, _)| i + 1)
        .chain(help.find(" ["))
        .min()
        .unwrap_or(help.len());
    help[..end].trim_end_matches(['.', ':', ';']).to_string()
}

/// The command line: `Args` with its flags grouped under headings for `--help`; `-h` is a
/// summary of the flags a first run needs, each in its first sentence.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    let mut cmd = Args::command();
    for (heading, ids) in HEADINGS {
        for id in *ids {
            cmd = cmd.mut_arg(*id, |a| a.help_heading(*heading));
        }
    }
    let ids: Vec<String> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && a.get_long().is_some_and(|l| l != "help" && l != "version"))
        .map(|a| a.get_id().to_string())
        .collect();
    let all = ids.len();
    for id in &ids {
        cmd = cmd.mut_arg(id.as_str(), |a| {
            let full = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            let short = first_sentence(&full);
            a.long_help(full)
                .help(short)
                .hide_short_help(!SHORT_HELP.contains(&id.as_str()))
        });
    }
    cmd.after_help(format!(
        "{} of {all} flags shown; `switchyard --help` lists them all, with their \
         environment variables (docs/operations.md#flags)",
        SHORT_HELP.len()
    ))
}

/// Parses the process's arguments (and `SWITCHYARD_*` variables) through [`command`].
pub fn parse_args() -> Result<Args, clap::Error> {
    parse_from(std::env::args_os())
}

pub(crate) fn parse_from<I, T>(args: I) -> Result<Args, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::FromArgMatches;
    let matches = command().try_get_matches_from(args)?;
    Args::from_arg_matches(&matches)
}

/// A command-line error as one line: clap's first line, completed with what it puts on the
/// lines below it (the missing flag, a "did you mean"), each once.
pub fn error_line(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue};
    let rendered = e.to_string();
    let first = rendered
        .lines()
        .next()
        .unwrap_or("invalid arguments")
        .trim_start_matches("error: ")
        .trim_end_matches(':');
    let names = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => vec![s.clone()],
        Some(ContextValue::Strings(v)) => v.clone(),
        _ => Vec::new(),
    };
    let mut line = first.to_string();
    let missing = names(ContextKind::InvalidArg);
    if e.kind() == clap::error::ErrorKind::MissingRequiredArgument && !missing.is_empty() {
        line.push_str(": ");
        line.push_str(&missing.join(", "));
    }
    // A value not among the accepted ones: say which are (clap writes them on a later line).
    let valid = names(ContextKind::ValidValue);
    if e.kind() == clap::error::ErrorKind::InvalidValue && !valid.is_empty() {
        line.push_str(" (one of: ");
        line.push_str(&valid.join(", "));
        line.push(')');
    }
    let suggested = names(ContextKind::SuggestedArg);
    if !suggested.is_empty() {
        let quoted: Vec<String> = suggested.iter().map(|s| format!("'{s}'")).collect();
        line.push_str("; did you mean ");
        line.push_str(&quoted.join(" or "));
        line.push('?');
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        parse_from(std::iter::once("switchyard").chain(args.iter().copied()))
    }

    /// `-h` is a summary (a screen or so, the flags a first run needs, one sentence each);
    /// `--help` has every flag in full.
    #[test]
    fn short_help_is_a_summary_and_long_help_is_whole() {
        let short = command().term_width(100).render_help().to_string();
        let long = command().term_width(100).render_long_help().to_string();
        assert!(
            short.lines().count() <= 80,
            "{} lines:\n{short}",
            short.lines().count()
        );
        let cmd = command();
        for id in SHORT_HELP {
            let arg = cmd.get_arguments().find(|a| a.get_id() == *id);
            let long_name = arg
                .and_then(|a| a.get_long())
                .unwrap_or_else(|| panic!("{id}"));
            assert!(short.contains(&format!("--{long_name}")), "{id} not in -h");
        }
        for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
            if let Some(l) = arg.get_long() {
                assert!(long.contains(&format!("--{l}")), "--{l} not in --help");
            }
        }
        assert!(short.contains("switchyard --help"), "{short}");
        // The long help keeps what the short one cuts.
        assert!(long.contains("Files are watched and"), "{long}");
        assert!(!short.contains("Files are watched and"), "{short}");
        assert_eq!(first_sentence("One. Two [env: X]"), "One");
        assert_eq!(
            first_sentence("Port for plain HTTP [env: X]"),
            "Port for plain HTTP"
        );
    }

    #[test]
    fn every_visible_flag_is_under_a_heading_and_help_is_wrapped() {
        let cmd = command();
        let loose: Vec<&str> = cmd
            .get_arguments()
            .filter(|a| !a.is_hide_set() && a.get_help_heading().is_none())
            .filter_map(|a| a.get_long())
            .filter(|l| !["help", "version"].contains(l))
            .collect();
        assert!(loose.is_empty(), "flags without a heading: {loose:?}");
        let help = command().term_width(100).render_long_help().to_string();
        let widest = help.lines().map(|l| l.chars().count()).max().unwrap_or(0);
        assert!(widest <= 100, "a help line is {widest} columns wide");
        for (heading, _) in HEADINGS {
            assert!(help.contains(&format!("{heading}:")), "{heading}");
        }
    }

    #[test]
    fn a_bad_flag_is_one_line_that_names_what_is_wrong() {
        let e = parse(&["--manifest", "x"]).unwrap_err();
        let line = error_line(&e);
        assert!(
            line.contains("'--manifest'") && line.contains("did you mean '--manifests'?"),
            "{line}"
        );
        let e = parse(&["--explain", "/x"]).unwrap_err();
        let line = error_line(&e);
        assert!(line.contains("--dry-run"), "names the missing flag: {line}");
        for e in [
            parse(&["--manifest", "x"]).unwrap_err(),
            parse(&["--explain", "/x"]).unwrap_err(),
            parse(&["--http-port", "x"]).unwrap_err(),
        ] {
            assert!(!error_line(&e).contains('\n'));
        }
    }

    /// Every visible flag reads `SWITCHYARD_<FLAG>` (docs/operations.md says so); `--kubeconfig`
    /// reads the conventional `KUBECONFIG` instead.
    #[test]
    fn every_flag_has_its_environment_variable() {
        let cmd = command();
        let mut missing = Vec::new();
        for arg in cmd.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if arg.is_hide_set() || ["help", "version"].contains(&long) {
                continue;
            }
            let want = if long == "kubeconfig" {
                "KUBECONFIG".to_string()
            } else {
                format!("SWITCHYARD_{}", long.replace('-', "_").to_ascii_uppercase())
            };
            if arg.get_env().and_then(|e| e.to_str()) != Some(want.as_str()) {
                missing.push(format!("--{long} (want {want}, has {:?})", arg.get_env()));
            }
        }
        assert!(
            missing.is_empty(),
            "flags without their variable: {missing:#?}"
        );
    }

    /// `--limit-scope cluster` shares limits among the ready endpoints of --limit-peers, or
    /// of --publish-service; without either it cannot count the replicas.
    #[test]
    fn limit_scope_needs_a_service_of_replicas() {
        let peers = |args: &[&str]| {
            Config::from_args(parse(args).unwrap()).map(|c| c.translate.limit_peers)
        };
        assert_eq!(peers(&["--manifests=m"]).unwrap(), None);
        assert_eq!(
            peers(&[
                "--manifests=m",
                "--limit-scope=cluster",
                "--limit-peers=sw/lb"
            ])
            .unwrap(),
            Some(("sw".into(), "lb".into()))
        );
        assert_eq!(
            peers(&[
                "--kubeconfig=/k",
                "--limit-scope=cluster",
                "--publish-service=sw/pub"
            ])
            .unwrap(),
            Some(("sw".into(), "pub".into()))
        );
        assert!(matches!(
            peers(&["--manifests=m", "--limit-scope=cluster"]),
            Err(ConfigError::LimitPeers)
        ));
        // Each replica the whole limit: the peers are not read.
        assert_eq!(
            peers(&["--manifests=m", "--limit-peers=sw/lb"]).unwrap(),
            None
        );
    }

    #[test]
    fn election_and_publish_flags() {
        let c = Config::from_args(parse(&["--kubeconfig=/k"]).unwrap()).unwrap();
        let e = c.election.unwrap();
        assert_eq!(e.id, "switchyard-leader");
        assert_eq!(
            (e.lease_duration, e.renew_deadline, e.retry_period),
            (
                Duration::from_secs(15),
                Duration::from_secs(10),
                Duration::from_secs(2)
            )
        );
        assert_eq!(c.publish, None);
        let c = Config::from_args(
            parse(&[
                "--kubeconfig=/k",
                "--leader-elect=false",
                "--publish-service=sw/lb",
            ])
            .unwrap(),
        )
        .unwrap();
        assert_eq!(c.election, None);
        assert_eq!(
            c.publish,
            Some(Publish::Service {
                namespace: "sw".into(),
                name: "lb".into()
            })
        );
        let c = Config::from_args(
            parse(&[
                "--kubeconfig=/k",
                "--publish-status-address=203.0.113.7,lb.example.com",
            ])
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            c.publish,
            Some(Publish::Static(vec![
                Address::Ip("203.0.113.7".into()),
                Address::Hostname("lb.example.com".into())
            ]))
        );
        // Host names as the API server takes them in a status (lower case), or refused at
        // start: one it refuses failed every Ingress's and Gateway's status write.
        let c = Config::from_args(
            parse(&["--kubeconfig=/k", "--publish-status-address=LB.Example.com"]).unwrap(),
        )
        .unwrap();
        assert_eq!(
            c.publish,
            Some(Publish::Static(vec![Address::Hostname(
                "lb.example.com".into()
            )]))
        );
        assert!(matches!(
            Config::from_args(
                parse(&["--kubeconfig=/k", "--publish-status-address=1.2.3.4,lb_1.example"])
                    .unwrap()
            ),
            Err(ConfigError::PublishAddress(a)) if a == "lb_1.example"
        ));
        // Offline mode has no API server: no election, and publishing is a mistake.
        let c = Config::from_args(parse(&["--manifests=m"]).unwrap()).unwrap();
        assert_eq!(c.election, None);
        assert!(matches!(
            Config::from_args(
                parse(&["--manifests=m", "--publish-status-address=1.2.3.4"]).unwrap()
            ),
            Err(ConfigError::NeedsCluster("--publish-status-address"))
        ));
        let e = parse(&["--publish-service=a/b", "--publish-status-address=1.2.3.4"]).unwrap_err();
        let line = error_line(&e);
        assert!(
            line.contains("cannot be used with") && !line.contains('\n'),
            "{line}"
        );
        assert!(parse(&["--publish-service=lb"]).is_err());
        assert!(parse(&["--publish-service=a/b/c"]).is_err());
        let c =
            Config::from_args(parse(&["--kubeconfig=/k", "--election-lease-duration=3s"]).unwrap())
                .unwrap();
        let e = c.election.unwrap();
        assert_eq!(e.renew_deadline, Duration::from_secs(2));
        assert_eq!(e.retry_period, Duration::from_millis(400));
        assert!(e.lease_duration > e.renew_deadline && e.renew_deadline > e.retry_period);
        for bad in ["2s", "500ms", "6m", "0s"] {
            let flag = format!("--election-lease-duration={bad}");
            let e = parse(&["--kubeconfig=/k", &flag]).unwrap_err();
            assert!(error_line(&e).contains("between 3s and 5m"), "{bad}: {e}");
        }
    }

    #[test]
    fn tcp_services_parse() {
        let a = parse(&["--tcp-services", "mysql:3306,db/pg:5432"]).unwrap();
        assert_eq!(a.tcp_services.len(), 2);
        assert_eq!(a.tcp_services[1].namespace.as_deref(), Some("db"));
        assert!(parse(&["--tcp-services", "mysql"]).is_err());
        assert!(parse(&["--tcp-services", "mysql:0"]).is_err());
        assert!(parse(&["--tcp-services", "/x:1"]).is_err());
    }

    #[test]
    fn proxy_protocol_flags_parse_and_are_checked() {
        let config = |args: &[&str]| Config::from_args(parse(args).unwrap());
        let c = config(&[
            "--manifests",
            "x",
            "--tcp-services",
            "pg:5432",
            "--proxy-protocol",
            "http,tcp:5432",
            "--proxy-protocol-trusted",
            "10.0.0.0/8,192.0.2.1",
        ])
        .unwrap();
        let pp = &c.proxy_protocol;
        assert!(pp.http && !pp.https && pp.tcp(5432) && !pp.tcp(80));
        assert_eq!(pp.trusted.len(), 2);
        assert!(!config(&["--manifests", "x"]).unwrap().proxy_protocol.any());
        // A port that is no TCP frontend, and https without a TLS port, are mistakes.
        assert!(matches!(
            config(&["--manifests", "x", "--proxy-protocol", "tcp:5433"]),
            Err(ConfigError::ProxyProtocolPort(5433))
        ));
        assert!(config(&["--manifests", "x", "--proxy-protocol", "https"]).is_err());
        assert!(config(&["--manifests", "x", "--proxy-protocol", "all"]).is_ok());
        for bad in [
            &["--proxy-protocol", "udp"][..],
            &["--proxy-protocol", "tcp:0"],
            &[
                "--proxy-protocol",
                "http",
                "--proxy-protocol-trusted",
                "10.0.0.0/40",
            ],
            // Trusting peers without asking for the protocol anywhere means nothing.
            &["--proxy-protocol-trusted", "10.0.0.0/8"],
        ] {
            let e = parse(bad).unwrap_err();
            assert!(!error_line(&e).contains('\n'), "{bad:?}");
        }
    }

    #[test]
    fn bad_values_are_rejected() {
        assert!(parse(&["--balance-algorithm", "bogus"]).is_err());
        assert!(parse(&["--default-return-code", "99"]).is_err());
        assert!(parse(&["--http-port", "70000"]).is_err());
        assert!(parse(&["--bind-address", "nope"]).is_err());
        assert!(parse(&["--keep-alive-timeout", "500ms"]).is_err());
        assert!(parse(&["--keep-alive-timeout", "1500ms"]).is_err());
        assert!(parse(&["--keep-alive-timeout", "0s"]).is_err());
        let c = Config::from_args(parse(&["--manifests=m", "--keep-alive-timeout=2m"]).unwrap());
        let c = c.unwrap();
        assert_eq!(c.timeouts.keep_alive, Duration::from_secs(120));
        assert_eq!(c.downstream.keep_alive, Duration::from_secs(120));
    }

    #[test]
    fn defaults_follow_the_original() {
        let c = Config::from_args(parse(&["--manifests", "x.yaml"]).unwrap()).unwrap();
        assert_eq!(c.http_port, 80);
        assert_eq!(c.admin_port, 8081);
        assert_eq!(c.default_return_code, 404);
        assert_eq!(c.translate.default_algorithm, Algorithm::RoundRobin);
        assert_eq!(c.timeouts.connect, Duration::from_secs(5));
        assert_eq!(c.timeouts.server_idle, Duration::from_secs(50));
        assert_eq!(c.watch_max_wait, None);
        assert_eq!(c.stats_port, 1936);
        assert_eq!(c.health, HealthChecks::default());
        assert_eq!(c.access_log, None);
    }

    #[test]
    fn observability_flags_parse() {
        let c = Config::from_args(
            parse(&[
                "--manifests=m",
                "--access-log=logfmt",
                "--check-interval=500ms",
                "--check-rise=1",
                "--health-fail-open=false",
                "--stats-port=0",
            ])
            .unwrap(),
        )
        .unwrap();
        assert_eq!(c.access_log, Some(crate::ops::access_log::Format::Logfmt));
        assert_eq!(c.health.interval, Duration::from_millis(500));
        assert_eq!(c.health.rise, 1);
        assert!(!c.health.fail_open);
        assert_eq!(c.stats_port, 0);
        assert!(parse(&["--access-log=xml"]).is_err());
        assert!(parse(&["--check-fall=0"]).is_err());
        assert!(
            parse(&["--explain=a/b"]).is_err(),
            "--explain needs --dry-run"
        );
        assert!(parse(&["--dry-run", "--explain=a/b"]).is_ok());
        assert!(matches!(
            Config::from_args(parse(&["--manifests=m", "--stats-port=8081"]).unwrap()),
            Err(ConfigError::StatsPortClash(8081))
        ));
    }

    #[test]
    fn demo_defaults_to_port_8080_and_the_bundled_manifest() {
        let c = Config::from_args(parse(&["--demo"]).unwrap()).unwrap();
        assert_eq!(c.http_port, 8080);
        assert_eq!(
            c.source,
            Source::Manifests(vec![PathBuf::from(crate::demo::MANIFEST_PATH)])
        );
    }

    #[test]
    fn without_manifests_the_cluster_is_watched() {
        let c = Config::from_args(parse(&["--kubeconfig", "/k"]).unwrap()).unwrap();
        assert_eq!(
            c.source,
            Source::Cluster {
                kubeconfig: Some(PathBuf::from("/k")),
                in_cluster: true
            }
        );
        let c =
            Config::from_args(parse(&["--kubeconfig", "/k", "--manifests", "m"]).unwrap()).unwrap();
        assert_eq!(c.source, Source::Manifests(vec![PathBuf::from("m")]));
        assert!(matches!(
            Config::from_args(
                parse(&["--manifests", "m", "--http-port", "9", "--admin-port", "9"]).unwrap()
            ),
            Err(ConfigError::PortClash(9))
        ));
    }

    #[test]
    fn gateway_addresses_parse() {
        let c = Config::from_args(
            parse(&[
                "--manifests",
                "m",
                "--gateway-addresses",
                "127.0.0.3,::ffff:127.0.0.2,127.0.0.3",
            ])
            .unwrap(),
        )
        .unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            c.translate.gateway_addresses,
            [ip("127.0.0.3"), ip("127.0.0.2")]
        );
        let none = Config::from_args(parse(&["--manifests", "m"]).unwrap()).unwrap();
        assert!(none.translate.gateway_addresses.is_empty());
        assert!(matches!(
            Config::from_args(
                parse(&["--manifests", "m", "--gateway-addresses", "0.0.0.0"]).unwrap()
            ),
            Err(ConfigError::GatewayAddress(_))
        ));
        assert!(parse(&["--gateway-addresses", "nope"]).is_err());
    }

    #[test]
    fn tls_flags() {
        let c = Config::from_args(parse(&["--manifests", "x"]).unwrap()).unwrap();
        assert_eq!(c.tls, None);
        assert_eq!(c.https_port, 443);
        assert_eq!(c.timeouts.tunnel, Duration::from_secs(3600));
        let a = parse(&[
            "--manifests",
            "x",
            "--ssl-cert",
            "certs/",
            "--ssl-ca-cert",
            "ca.pem",
            "--ssl-verify",
            "optional",
            "--hsts-max-age",
            "0",
            "--tunnel-timeout",
            "60",
        ])
        .unwrap();
        let c = Config::from_args(a).unwrap();
        let tls = c.tls.unwrap();
        assert_eq!(tls.verify, ClientVerify::Optional);
        assert_eq!(tls.hsts_max_age, None);
        assert_eq!(tls.client_ca, Some(PathBuf::from("ca.pem")));
        assert_eq!(c.timeouts.tunnel, Duration::from_secs(60));
        assert!(parse(&["--ssl-verify", "sometimes"]).is_err());
        assert!(parse(&["--tunnel-timeout", "0"]).is_err());
        let a = parse(&["--manifests", "x", "--ssl-ca-cert", "ca.pem"]).unwrap();
        assert!(matches!(
            Config::from_args(a),
            Err(ConfigError::NeedsSslCert("--ssl-ca-cert"))
        ));
        let a = parse(&[
            "--manifests",
            "x",
            "--ssl-cert",
            "c",
            "--https-port",
            "8081",
        ])
        .unwrap();
        assert!(matches!(
            Config::from_args(a),
            Err(ConfigError::HttpsPortClash(8081))
        ));
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_duration("8days").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5parsecs").is_err());
        assert!(parse_duration("").is_err());
        let c = Config::from_args(
            parse(&[
                "--manifests=m",
                "--shutdown-grace=2h",
                "--tunnel-timeout=1h",
            ])
            .unwrap(),
        )
        .unwrap();
        assert_eq!(c.shutdown_grace, Duration::from_secs(7200));
        assert_eq!(c.timeouts.tunnel, Duration::from_secs(3600));
        assert!(parse(&["--server-timeout", "0s"]).is_err());
        let c = Config::from_args(parse(&["--manifests=m"]).unwrap()).unwrap();
        assert_eq!(c.admin_bind_address, IpAddr::from([0, 0, 0, 0]));
        assert_eq!(c.downstream, crate::data::guard::Limits::default());
        assert_eq!(c.timeouts.request_headers, Duration::from_secs(5));
        let c = Config::from_args(
            parse(&[
                "--manifests=m",
                "--bind-address=0.0.0.0",
                "--admin-bind-address=127.0.0.1",
                "--request-header-timeout=1500ms",
                "--max-request-header-bytes=4096",
                "--max-connections=3",
            ])
            .unwrap(),
        )
        .unwrap();
        assert_eq!(c.admin_bind_address, IpAddr::from([127, 0, 0, 1]));
        assert_eq!(c.bind_address, IpAddr::from([0, 0, 0, 0]));
        assert_eq!(c.downstream.max_header_bytes, 4096);
        assert_eq!(c.downstream.max_connections, 3);
        assert_eq!(c.timeouts.request_headers, Duration::from_millis(1500));
        assert!(parse(&["--max-request-header-bytes=100"]).is_err());
        assert!(parse(&["--max-connections=0"]).is_err());
        assert!(parse(&["--request-header-timeout=0"]).is_err());
        let c = Config::from_args(parse(&["--manifests=m", "--server-timeout=1500ms"]).unwrap())
            .unwrap();
        assert_eq!(c.timeouts.server_idle, Duration::from_millis(1500));
    }
}

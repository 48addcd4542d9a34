//! `run`: builds the server and wires the sources, the table, the engines and the ops
//! services together. The only reader of `Config`: every other module gets its own options.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use pingora::apps::{HttpServerOptions, ServerApp};
use pingora::listeners::{L4BufferSettings, ListenerConfig};
use pingora::server::configuration::ServerConf;
use pingora::server::{RunArgs, Server, ShutdownWatch};
use pingora::services::background::{BackgroundService, background_service};
use pingora::services::listening::Service as ListeningService;

use crate::config::{Config, Source};
use crate::control::pipeline::Pipeline;
use crate::control::{gateway_status, lease, manifests, status, translate, watch};
use crate::data::engine::pingora::CountConnections;
use crate::data::engine::tcp as tcp_proxy;
use crate::data::tls::{self, HandshakeAcceptor};
use crate::data::{frontend, guard, listener};
use crate::decide::edits::Forwarding;
use crate::decide::error_page::ErrorPage;
use crate::decide::explain;
use crate::demo;
use crate::ops::access_log::AccessLog;
use crate::ops::lifecycle::{Lifecycle, Signals};
use crate::ops::metrics::Metrics;
use crate::ops::{admin, health, stats};
use crate::table;
use crate::table::{Frontend, RoutingTable, TableReader};

/// Why the load balancer could not start.
///
/// The rule for this and every error it wraps (`ManifestError`, `TlsError`, ...): a Display
/// is complete on its own, cause included, since runtime warnings print it alone. The one
/// line `main` prints is [`error_line`], which adds only the causes not already said.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Manifest(#[from] manifests::ManifestError),
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        addr: SocketAddr,
        what: &'static str,
        source: std::io::Error,
    },
    #[error("TLS: {0}")]
    Tls(#[from] tls::TlsError),
    #[error("Kubernetes client configuration: {0}")]
    KubeConfig(String),
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("starting a runtime: {0}")]
    Runtime(std::io::Error),
    #[error("writing the table: {0}")]
    Output(std::io::Error),
    #[error("starting the access log: {0}")]
    AccessLog(std::io::Error),
    #[error("--explain: {0}")]
    Explain(String),
    #[error("{0} Ingress(es) would not be served: see the report")]
    Refused(usize),
}

/// One line for an error and its causes, each cause said once: a link of the `source()` chain
/// whose text the line already holds (most of ours put their cause in their Display) is left
/// out; one a library hides (a connect error under a client error) is appended.
pub fn error_line(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        next = cause.source();
    }
    line
}

/// Runs switchyard until it is told to stop (or, with `--dry-run`, prints the table and returns).
pub fn run(config: Config) -> Result<(), RunError> {
    // One short-lived runtime for startup work: loading the kubeconfig and the error page.
    let startup = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RunError::Runtime)?;
    let kube_config = match &config.source {
        Source::Cluster {
            kubeconfig,
            in_cluster,
        } => Some(startup.block_on(kube_config(kubeconfig.as_deref(), *in_cluster))?),
        Source::Manifests(_) => None,
    };
    if config.dry_run {
        return startup.block_on(dry_run(&config, kube_config));
    }
    let http_addr = SocketAddr::new(config.bind_address, config.http_port);
    let admin_addr = SocketAddr::new(config.admin_bind_address, config.admin_port);
    check_bind(http_addr, "--http-port")?;
    check_bind(admin_addr, "--admin-port")?;
    for ip in gateway_listen_addresses(&config) {
        check_bind(SocketAddr::new(ip, config.http_port), "--gateway-addresses")?;
    }
    let https_addr = SocketAddr::new(config.bind_address, config.https_port);
    let tls = match &config.tls {
        Some(options) => {
            check_bind(https_addr, "--https-port")?;
            for ip in gateway_listen_addresses(&config) {
                check_bind(
                    SocketAddr::new(ip, config.https_port),
                    "--gateway-addresses",
                )?;
            }
            Some(tls::Tls::load(options)?)
        }
        None => None,
    };
    let stats_addr = (config.stats_port != 0)
        .then(|| SocketAddr::new(config.stats_bind_address, config.stats_port));
    if let Some(addr) = stats_addr {
        check_bind(addr, "--stats-port")?;
    }
    let not_found = startup.block_on(crate::ops::page_loader::load_or_builtin(
        config.error_page.as_deref(),
        config.default_return_code,
    ));
    drop(startup);

    let metrics = Arc::new(Metrics::new());
    let lifecycle = Lifecycle::new();
    let (writer, reader) = table::handle(RoutingTable::default());
    metrics.register_endpoints(
        Box::new(stats::TableEndpoints(reader.clone())),
        config.metrics_endpoint_series,
    );
    let access_log = Arc::new(
        AccessLog::start(
            config.access_log,
            metrics.data.access_log_dropped_total.clone(),
        )
        .map_err(RunError::AccessLog)?,
    );
    let mut pipeline = Pipeline::new(writer, config.translate.clone(), Arc::clone(&metrics));
    // The served Ingresses go from the pipeline to the status writer (cluster source only).
    let served = match (&config.source, &config.publish) {
        (Source::Cluster { .. }, Some(_)) => {
            let (tx, rx) = tokio::sync::watch::channel(status::Served::default());
            pipeline = pipeline.with_served(tx);
            Some(rx)
        }
        _ => None,
    };
    // The Gateway API status translate decides goes to its writer (cluster source only; with
    // or without --publish-*: conditions are owed to every object of our classes).
    let gateway_status = match &config.source {
        Source::Cluster { .. } => {
            let (tx, rx) = tokio::sync::watch::channel(gateway_status::Desired::default());
            pipeline = pipeline.with_gateway_status(tx);
            Some(rx)
        }
        Source::Manifests(_) => None,
    };

    let mut conf = ServerConf {
        threads: config.threads,
        work_stealing: config.work_stealing,
        max_retries: config.connect_tries.max(1),
        // Pingora's connector verifies TLS backends against this bundle (else the system's).
        ca_file: config
            .backend_ca_file
            .as_ref()
            .map(|p| p.display().to_string()),
        ..Default::default()
    };
    // Our signal handler has already waited out --shutdown-delay and its drain watcher exits
    // as soon as nothing is in flight; Pingora's grace period is only the upper bound.
    conf.grace_period_seconds = Some(config.shutdown_grace.as_secs().max(1));
    conf.graceful_shutdown_timeout_seconds = Some(1);
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();

    // One connection limit for both HTTP frontends, as HAProxy's global maxconn.
    let limit = guard::ConnectionLimit::new(config.downstream.max_connections);
    let server_conf = Arc::clone(&server.configuration);
    // The backend CA bundles, followed on disk: the proxies and the health checks verify TLS
    // endpoints against what is loaded now.
    let backend_tls = Arc::new(crate::data::tls::BackendTls::new(
        config.backend_ca_file.clone(),
        config.backend_client_cert.clone(),
    ));
    let shared = HttpShared {
        backend_tls: &backend_tls,
        server_conf: &server_conf,
        config: &config,
        table: &reader,
        lifecycle: &lifecycle,
        metrics: &metrics,
        access_log: &access_log,
        limit: &limit,
        not_found: &not_found,
    };
    server.add_service(http_service(
        &shared,
        HttpListener {
            frontend: Frontend::Http,
            addr: http_addr,
            forwarding: None,
            tls: None,
            h2c: true,
            gateway_ports: false,
        },
    ));

    let tls = tls.map(|t| t.with_metrics(Arc::clone(&metrics)));
    if let Some(tls) = &tls {
        // Ingresses' TLS Secrets: loaded into the TLS port's store with each table.
        let mut secrets = tls.secret_certs();
        pipeline.on_swap(move |table| {
            secrets.sync(table.certificates.iter().map(|c| tls::SecretPem {
                secret: &c.secret,
                hosts: &c.hosts,
                pem: &c.pem,
                address: c.address,
            }));
        });
    }
    if let Some(tls) = &tls {
        // A plain TCP listener: the guard runs the handshake itself, with a deadline and
        // failure metrics.
        server.add_service(http_service(
            &shared,
            HttpListener {
                frontend: Frontend::Https,
                addr: https_addr,
                forwarding: Some(tls.forwarding()),
                tls: Some(
                    tls.acceptor(config.downstream.header_timeout)?
                        .with_local_addresses(!config.translate.gateway_addresses.is_empty()),
                ),
                h2c: false,
                gateway_ports: false,
            },
        ));
        server.add_service(background_service("certificates", tls.watcher()));
    }
    // Always: Gateway HTTP and HTTPS listeners on ports of their own may come with any
    // table; their connections go to applications of their own, which route by local port.
    {
        let (_, http) = http_app(
            &shared,
            HttpListener {
                frontend: Frontend::Http,
                addr: http_addr,
                forwarding: None,
                tls: None,
                h2c: true,
                gateway_ports: true,
            },
        );
        let https = match &tls {
            Some(tls) => Some(
                http_app(
                    &shared,
                    HttpListener {
                        frontend: Frontend::Https,
                        addr: https_addr,
                        forwarding: Some(tls.forwarding()),
                        tls: Some(
                            tls.acceptor(config.downstream.header_timeout)?
                                .with_local_addresses(
                                    !config.translate.gateway_addresses.is_empty(),
                                ),
                        ),
                        h2c: false,
                        gateway_ports: true,
                    },
                )
                .1,
            ),
            None => None,
        };
        let ports = crate::data::engine::gateway_ports::GatewayPorts::new(
            reader.clone(),
            config.bind_address,
            http,
            https,
        )
        .with_spread(!config.work_stealing);
        let mut ports = background_service("gateway listener ports", ports);
        ports.threads = Some(config.threads);
        server.add_service(ports);
    }
    // Always: Gateway TCP and TLS listeners may come with any table, as `--tcp-services`
    // ports with their Services.
    {
        let frontends = tcp_proxy::TcpFrontends::new(
            reader.clone(),
            config.bind_address,
            config.timeouts,
            config.connect_tries,
        )
        .with_lifecycle(Arc::clone(&lifecycle))
        .with_fail_open(config.health.fail_open)
        .with_proxy_protocol(config.proxy_protocol.clone())
        .with_spread(!config.work_stealing)
        .with_observability(Arc::clone(&metrics), Arc::clone(&access_log));
        let mut tcp = background_service("tcp frontends", frontends);
        // Background services get one thread by default; TCP relaying is data-plane work.
        tcp.threads = Some(config.threads);
        server.add_service(tcp);
        let udp = crate::data::engine::udp::UdpFrontends::new(
            reader.clone(),
            config.bind_address,
            config.udp,
            Arc::clone(&metrics),
        )
        .with_access_log(Arc::clone(&access_log));
        let mut udp = background_service("udp frontends", udp);
        udp.threads = Some(config.threads);
        server.add_service(udp);
    }

    let admin_app = admin::Admin {
        table: reader.clone(),
        lifecycle: Arc::clone(&lifecycle),
        metrics: Arc::clone(&metrics),
        policy: explain_policy(&config),
        expose_explain: config.expose_explain,
    };
    let mut admin = ListeningService::new("admin".into(), admin_app);
    admin.add_tcp(&admin_addr.to_string());
    server.add_service(admin);

    if let Some(addr) = stats_addr {
        let page = stats::StatsPage {
            table: reader.clone(),
            metrics: Arc::clone(&metrics),
            listeners: stats::Listeners {
                bind: config.bind_address,
                http_port: config.http_port,
                https_port: tls.as_ref().map(|_| config.https_port),
            },
            started: std::time::Instant::now(),
        };
        let mut stats_service = ListeningService::new("stats".into(), page);
        stats_service.add_tcp(&addr.to_string());
        server.add_service(stats_service);
    }
    server.add_service(background_service(
        "health checks",
        health::Checker {
            table: reader.clone(),
            config: config.health,
            metrics: Arc::clone(&metrics),
            // The proxy's own connector settings (`--backend-ca-file`): checks trust what
            // traffic trusts.
            connector: Arc::new(pingora::connectors::http::Connector::new(Some(
                pingora::connectors::ConnectorOptions::from_server_conf(&server_conf),
            ))),
            tls: Arc::clone(&backend_tls) as Arc<dyn health::PeerTls>,
        },
    ));
    server.add_service(background_service(
        "backend CA bundles",
        crate::data::tls::BackendTlsWatcher {
            tls: backend_tls,
            table: reader.clone(),
        },
    ));

    match (&config.source, kube_config) {
        (Source::Manifests(paths), _) => server.add_service(background_service(
            "manifests",
            ManifestSource {
                paths: paths.clone(),
                pipeline: Mutex::new(Some(pipeline)),
            },
        )),
        (Source::Cluster { .. }, Some(kube_config)) => server.add_service(background_service(
            "cluster watch",
            ClusterWatch {
                config: kube_config,
                namespace: config.translate.only_namespace.clone(),
                coalesce: watch::Coalesce {
                    max_wait: config
                        .watch_max_wait
                        .unwrap_or(watch::Coalesce::default().max_wait),
                },
                metrics,
                pipeline: Mutex::new(Some(pipeline)),
                secret_labels: config.secret_label_selector.clone(),
                configmap_labels: config.configmap_label_selector.clone(),
                election: config.election.clone(),
                status: config.publish.clone().zip(served),
                gateway_status: gateway_status
                    .map(|rx| (config.translate.gateway_controller_name.clone(), rx)),
                stopping: lifecycle.stopping(),
            },
        )),
        (Source::Cluster { .. }, None) => {
            return Err(RunError::KubeConfig("no client configuration".into()));
        }
    };
    if config.demo {
        server.add_service(background_service("demo backends", demo::DemoBackends));
    }
    if config.proxy_protocol.any() && config.proxy_protocol.trusted.is_empty() {
        tracing::warn!(
            "--proxy-protocol without --proxy-protocol-trusted: any peer that reaches these \
             frontends can claim any client address; restrict them to the load balancer"
        );
    }
    tracing::info!(http = %http_addr, admin = %admin_addr,
        https = %tls.as_ref().map_or("off".to_string(), |_| https_addr.to_string()),
        "switchyard starting");
    server.run(RunArgs {
        shutdown_signal: Box::new(Signals {
            lifecycle,
            delay: config.shutdown_delay,
            grace: config.shutdown_grace,
        }),
    });
    Ok(())
}

/// What the plain and the TLS HTTP frontend share.
struct HttpShared<'a> {
    server_conf: &'a Arc<ServerConf>,
    config: &'a Config,
    table: &'a TableReader,
    lifecycle: &'a Arc<Lifecycle>,
    metrics: &'a Arc<Metrics>,
    access_log: &'a Arc<AccessLog>,
    /// The connection limit both HTTP frontends count against.
    limit: &'a Arc<guard::ConnectionLimit>,
    not_found: &'a ErrorPage,
    backend_tls: &'a Arc<crate::data::tls::BackendTls>,
}

/// What sets one HTTP frontend apart from the other.
struct HttpListener {
    frontend: Frontend,
    addr: SocketAddr,
    /// The TLS port's forwarding settings; `None` keeps the frontend's default.
    forwarding: Option<Forwarding>,
    /// The handshake the guard runs on each accepted connection; `None`: plain TCP.
    tls: Option<HandshakeAcceptor>,
    /// Accept HTTP/2 without TLS (prior knowledge).
    h2c: bool,
    /// Serves the ports Gateway listeners have of their own (`GatewayPorts`), routing by the
    /// connection's local port.
    gateway_ports: bool,
}

/// The settings `/explain` and `--dry-run --explain` decide with, as the HTTP engines do.
fn explain_policy(config: &Config) -> crate::decide::attempt::Policy {
    crate::decide::attempt::Policy::new(1, std::time::Duration::ZERO, config.health.fail_open)
        .with_traffic_healthz(config.traffic_healthz)
        .with_https_port(config.tls.as_ref().map(|_| config.https_port))
}

/// One HTTP frontend: the proxy (and the fast path when `--fast-path` is on), Pingora's HTTP
/// app, the connection guard and counter, and a TCP listener on `listener.addr`.
fn http_service(
    shared: &HttpShared<'_>,
    listener: HttpListener,
) -> ListeningService<impl ServerApp + Send + Sync + 'static> {
    let addr = listener.addr;
    let listener_tls = listener.tls.is_some();
    let (label, counted) = http_app(shared, listener);
    let mut service = ListeningService::new(label, counted);
    let gateways = gateway_listen_addresses(shared.config);
    for addr in std::iter::once(addr).chain(
        gateways
            .into_iter()
            .map(|ip| SocketAddr::new(ip, addr.port())),
    ) {
        service
            .add_listener(ListenerConfig::tcp(addr.to_string()).l4_buffer(l4_buffer(listener_tls)));
    }
    service
}

/// One HTTP frontend's application, as `http_service` listens with it and as the Gateway
/// listeners' own ports (`GatewayPorts`) hand their connections to it: its label and app.
fn http_app(
    shared: &HttpShared<'_>,
    listener: HttpListener,
) -> (String, impl ServerApp + Send + Sync + 'static) {
    let config = shared.config;
    let label = listener.frontend.label();
    let mut proxy = frontend::HttpProxy::new(
        shared.table.clone(),
        listener.frontend,
        config.timeouts,
        config.connect_tries,
        shared.not_found.clone(),
    )
    .with_lifecycle(Arc::clone(shared.lifecycle))
    .with_observability(Arc::clone(shared.metrics), Arc::clone(shared.access_log))
    .with_fail_open(config.health.fail_open)
    .with_traffic_healthz(config.traffic_healthz)
    .with_limit_status(config.limit_status_code)
    .with_https_port(config.tls.as_ref().map(|_| config.https_port))
    .with_local_addresses(!config.translate.gateway_addresses.is_empty())
    .with_backend_tls(Arc::clone(shared.backend_tls));
    if listener.gateway_ports {
        proxy = proxy.with_gateway_ports();
    }
    if let Some(forwarding) = listener.forwarding {
        proxy = proxy.with_forwarding(forwarding);
    }
    let fast = config
        .fast_path
        .then(|| crate::data::engine::fast::FastPath::new(proxy.clone(), !config.work_stealing));
    // How the guard answers and records the requests it refuses, as this proxy would.
    let refusals = crate::data::refusals::Refusals::new(&proxy);
    let proxy_for_passthrough = proxy.clone();
    let mut app = pingora::proxy::http_proxy(shared.server_conf, proxy);
    let mut options = HttpServerOptions::default();
    options.h2c = listener.h2c;
    // The HTTP/1 keep-alive idle bound, for HTTP/2 connections with no stream open (Pingora
    // otherwise keeps them for as long as the client wants).
    options.h2_idle_timeout = Some(config.timeouts.keep_alive);
    app.server_options = Some(options);
    let mut guarded = listener::Guard::new(
        app,
        config.downstream,
        Arc::clone(shared.limit),
        guard::Counters::new(shared.metrics, &label, refusals),
    );
    let pp = &config.proxy_protocol;
    let proxied = match listener.frontend {
        Frontend::Http => pp.http,
        Frontend::Https => pp.https,
        Frontend::Tcp(port) => pp.tcp(port),
    };
    if proxied {
        guarded = guarded.with_proxy_protocol(crate::data::wire::proxy_protocol::Acceptor::new(
            shared.metrics,
            &label,
            pp.clone(),
            config.downstream.header_timeout,
        ));
    }
    if let Some(tls) = listener.tls {
        guarded = guarded
            .with_passthrough(crate::data::passthrough::Passthrough::new(
                proxy_for_passthrough,
                shared.metrics,
                config.downstream.header_timeout,
            ))
            .with_tls(tls);
    }
    if let Some(fast) = fast {
        guarded = guarded.with_fast_path(fast);
    }
    let counted = CountConnections::new(guarded, shared.metrics.data.open_connections(&label));
    (label, counted)
}

/// The Gateways' own addresses (`--gateway-addresses`) that the HTTP and TLS ports must also
/// listen on: those --bind-address does not take already (an unspecified address takes every
/// address of its family, and `::` IPv4 ones too, dual-stack being Linux's default).
fn gateway_listen_addresses(config: &Config) -> Vec<std::net::IpAddr> {
    let bind = config.bind_address;
    config
        .translate
        .gateway_addresses
        .iter()
        .copied()
        .filter(|ip| {
            let covered = *ip == bind
                || (bind.is_unspecified() && (bind.is_ipv6() || ip.is_ipv4() == bind.is_ipv4()));
            !covered
        })
        .collect()
}

/// The L4 buffers of an HTTP listener. In clear, no read buffer: the fast path, Pingora's
/// HTTP/1 session and the HTTP/2 codec each read into buffers of their own, so Pingora's
/// default 64 KiB one (allocated zeroed at accept, held for the connection's life) only
/// added a copy and up to 64 KiB per idle connection. Over TLS it stays: rustls reads
/// 4 KiB at a time, and the buffer turns those into one read of the socket per TLS record.
fn l4_buffer(tls: bool) -> L4BufferSettings {
    if tls {
        L4BufferSettings::default()
    } else {
        L4BufferSettings::default().read(0)
    }
}

/// The client configuration: an explicit kubeconfig, else the in-cluster service account, else
/// the default kubeconfig (`--use-kubernetes-cluster-service=false`).
async fn kube_config(
    kubeconfig: Option<&Path>,
    in_cluster: bool,
) -> Result<kube::Config, RunError> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let options = KubeConfigOptions::default();
    let mut config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| RunError::KubeConfig(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| RunError::KubeConfig(format!("{}: {e}", path.display())))
        }
        None if in_cluster => kube::Config::incluster().map_err(|e| {
            RunError::KubeConfig(format!(
                "not running in a cluster ({e}); pass --manifests PATH, --kubeconfig PATH or \
                 --use-kubernetes-cluster-service=false"
            ))
        }),
        None => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| RunError::KubeConfig(e.to_string())),
    }?;
    // The API server's audit log and its priority-and-fairness rules tell clients apart by
    // User-Agent; kube-client sends none of its own.
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(USER_AGENT),
    ));
    Ok(config)
}

/// What switchyard calls itself to the API server.
pub const USER_AGENT: &str = concat!("switchyard/", env!("CARGO_PKG_VERSION"));

async fn dry_run(config: &Config, kube_config: Option<kube::Config>) -> Result<(), RunError> {
    let objects = match (&config.source, kube_config) {
        (Source::Manifests(paths), _) => manifests::load(paths)?,
        (Source::Cluster { .. }, Some(kc)) => {
            let client = kube::Client::try_from(kc)?;
            watch::snapshot(&client, config.translate.only_namespace.as_deref()).await?
        }
        (Source::Cluster { .. }, None) => {
            return Err(RunError::KubeConfig("no client configuration".into()));
        }
    };
    for note in &objects.unread {
        tracing::warn!("{note}");
    }
    let (services, slices) = (&objects.services, &objects.slices);
    let refs = objects.ingress_refs();
    let (built, warnings) =
        translate::translate_with(services, slices, refs.inputs(), &config.translate, None);
    let mut table = built.table;
    // Generations count published tables; this one is shown as the first would be.
    table.generation = 1;
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    // Ingresses of other controllers: not warnings (they are not switchyard's), but a user
    // wondering why nothing is served should see them.
    let served = built.memo.served_ingresses();
    for ing in &objects.ingresses {
        let key = (
            ing.metadata.namespace.clone().unwrap_or_default(),
            ing.metadata.name.clone().unwrap_or_default(),
        );
        let warned = warnings.iter().any(|w| {
            w.object.kind == "Ingress" && (&w.object.namespace, &w.object.name) == (&key.0, &key.1)
        });
        let outside = config
            .translate
            .only_namespace
            .as_ref()
            .is_some_and(|ns| *ns != key.0);
        if served.contains(&key) || warned || outside {
            continue;
        }
        let class = translate::ingress_class_of(ing);
        eprintln!(
            "skipped: Ingress {}/{}: {}, not one of switchyard's (--controller-name {})",
            key.0,
            key.1,
            class.map_or("no class and no default class".to_string(), |c| format!(
                "class {c}"
            )),
            config.translate.controller_name
        );
    }
    if let Some(format) = config.ingress_nginx_report {
        let ingresses: Vec<_> = objects.ingresses.iter().collect();
        let served = built.memo.served_ingresses();
        let ours = |ns: &str, name: &str| {
            served.contains(&(ns.to_string(), name.to_string()))
                || warnings.iter().any(|w| {
                    w.object.kind == "Ingress" && w.object.namespace == ns && w.object.name == name
                })
        };
        let report = translate::nginx::Report::of(&ingresses, &warnings, ours);
        let text = match format {
            crate::config::ReportFormat::Text => report.to_text(),
            crate::config::ReportFormat::Json => {
                serde_json::to_string_pretty(&report).map_err(|e| RunError::Output(e.into()))?
            }
        };
        use std::io::Write;
        writeln!(std::io::stdout().lock(), "{text}").map_err(RunError::Output)?;
        return match report.refused {
            0 => Ok(()),
            n => Err(RunError::Refused(n)),
        };
    }
    let json = match &config.explain {
        None if config.migration_preview => {
            serde_json::to_string_pretty(&translate::migration_preview(
                services,
                &table,
                config.default_return_code,
                config.traffic_healthz,
            ))
        }
        None => serde_json::to_string_pretty(&table.to_json()),
        Some(target) => {
            let q = explain::Query::from_target(target).map_err(RunError::Explain)?;
            let x = explain::explain(
                &std::sync::Arc::new(table),
                &q,
                std::time::Instant::now(),
                &explain_policy(config),
            );
            // The struct's own field order reads top-down: request, route, entry, decision.
            serde_json::to_string_pretty(&x)
        }
    }
    .map_err(|e| RunError::Output(e.into()))?;
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{json}").map_err(RunError::Output)
}

/// Fails early, with the flag's name, when a listener cannot be bound (Pingora would panic).
fn check_bind(addr: SocketAddr, what: &'static str) -> Result<(), RunError> {
    std::net::TcpListener::bind(addr)
        .map(drop)
        .map_err(|source| RunError::Bind { addr, what, source })
}

/// The manifest watcher as a Pingora background service.
struct ManifestSource {
    paths: Vec<PathBuf>,
    /// Taken by the one `start` call.
    pipeline: Mutex<Option<Pipeline>>,
}

#[async_trait]
impl BackgroundService for ManifestSource {
    async fn start(&self, shutdown: ShutdownWatch) {
        let pipeline = self
            .pipeline
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(pipeline) = pipeline {
            manifests::watch(self.paths.clone(), pipeline, shutdown).await;
        }
    }
}

/// The cluster watcher as a Pingora background service (the client is created inside its
/// runtime, which kube's connection pool needs).
struct ClusterWatch {
    config: kube::Config,
    namespace: Option<String>,
    coalesce: watch::Coalesce,
    metrics: Arc<Metrics>,
    pipeline: Mutex<Option<Pipeline>>,
    /// `--secret-label-selector`.
    secret_labels: Option<String>,
    /// `--configmap-label-selector`.
    configmap_labels: Option<String>,
    /// `--leader-elect`: `None` when off.
    election: Option<crate::config::Election>,
    /// Where status addresses come from, and the served Ingresses; `None`: no status.
    status: Option<(
        status::Publish,
        tokio::sync::watch::Receiver<status::Served>,
    )>,
    /// `--gateway-controller-name` and the Gateway API status from the pipeline.
    gateway_status: Option<(
        String,
        tokio::sync::watch::Receiver<gateway_status::Desired>,
    )>,
    /// True at SIGTERM: the elector releases its Lease then, not after the shutdown delay.
    stopping: tokio::sync::watch::Receiver<bool>,
}

impl ClusterWatch {
    /// Starts the leader election and the status writer, as configured; the leadership
    /// receiver when there is an election.
    fn start_replica_duties(
        &self,
        client: &kube::Client,
    ) -> Option<tokio::sync::watch::Receiver<bool>> {
        let leader = self.election.as_ref().map(|e| {
            let election = lease::Election {
                lease_duration: e.lease_duration,
                renew_deadline: e.renew_deadline,
                retry_period: e.retry_period,
                ..lease::Election::new(&e.id, &lease::own_namespace(), &lease::identity())
            };
            lease::spawn(
                client.clone(),
                election,
                Arc::clone(&self.metrics),
                self.stopping.clone(),
            )
        });
        if let Some((publish, served)) = &self.status {
            status::StatusWriter {
                client: client.clone(),
                namespace: self.namespace.clone(),
                publish: publish.clone(),
                served: served.clone(),
                // Without an election this replica is the only writer.
                leader: leader
                    .clone()
                    .unwrap_or_else(|| tokio::sync::watch::channel(true).1),
                limits: status::Limits::default(),
                metrics: Arc::clone(&self.metrics),
            }
            .spawn(self.stopping.clone());
        }
        if let Some((controller_name, desired)) = &self.gateway_status {
            gateway_status::GatewayStatusWriter {
                client: client.clone(),
                namespace: self.namespace.clone(),
                controller_name: controller_name.clone(),
                publish: self.status.as_ref().map(|(publish, _)| publish.clone()),
                desired: desired.clone(),
                leader: leader
                    .clone()
                    .unwrap_or_else(|| tokio::sync::watch::channel(true).1),
                limits: status::Limits::default(),
                metrics: Arc::clone(&self.metrics),
            }
            .spawn(self.stopping.clone());
        }
        leader
    }
}

#[async_trait]
impl BackgroundService for ClusterWatch {
    async fn start(&self, shutdown: ShutdownWatch) {
        let Some(pipeline) = self
            .pipeline
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        else {
            return;
        };
        let client = match kube::Client::try_from(self.config.clone()) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "cannot create the Kubernetes client; nothing will be served");
                return;
            }
        };
        let leader = self.start_replica_duties(&client);
        watch::ClusterSource {
            client,
            namespace: self.namespace.clone(),
            coalesce: self.coalesce,
            pipeline,
            metrics: Arc::clone(&self.metrics),
            events: true,
            leader,
            secret_labels: self.secret_labels.clone(),
            configmap_labels: self.configmap_labels.clone(),
        }
        .run(shutdown)
        .await;
    }
}

/// One field of a text log line, as logfmt parsers read it: the message bare, every other
/// value quoted when it holds a space, a quote, an `=` or nothing (`object=Ingress shop/web`
/// split into two fields before). The `log.*` fields of records from the `log` crate (Pingora's)
/// are their metadata, already in the line's target.
pub fn logfmt_field(
    w: &mut tracing_subscriber::fmt::format::Writer<'_>,
    field: &tracing::field::Field,
    value: &dyn std::fmt::Debug,
) -> std::fmt::Result {
    let name = field.name();
    if name.starts_with("log.") {
        return Ok(());
    }
    let text = format!("{value:?}");
    if name == "message" {
        return w.write_str(&text);
    }
    let name = name.strip_prefix("r#").unwrap_or(name);
    write!(w, "{name}={}", logfmt_value(&text))
}

/// The JSON log line: one object with `timestamp` (RFC 3339, UTC), `level`, `target`,
/// `message` and the event's own fields at the top level, as log pipelines index them.
/// tracing-subscriber's JSON formatter kept the `log.file` / `log.module_path` fields of
/// records from the `log` crate (Pingora's: `"log.file":"vendor/..."`), as strings get past its
/// filter; here every `log.*` field is left out (the target already says where it came from).
pub struct JsonLine;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for JsonLine
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let meta = event.metadata();
        let mut line = serde_json::Map::new();
        line.insert(
            "timestamp".into(),
            crate::ops::access_log::rfc3339(std::time::SystemTime::now()).into(),
        );
        line.insert("level".into(), meta.level().as_str().into());
        line.insert("target".into(), meta.target().into());
        event.record(&mut JsonFields(&mut line));
        writeln!(writer, "{}", serde_json::Value::Object(line))
    }
}

/// An event's fields into a JSON object: numbers and booleans as such, the rest as text.
struct JsonFields<'a>(&'a mut serde_json::Map<String, serde_json::Value>);

impl JsonFields<'_> {
    fn put(&mut self, field: &tracing::field::Field, value: serde_json::Value) {
        let name = field.name();
        // A `log` record's own target (the event's is "log"); its other metadata is dropped.
        if name == "log.target" {
            self.0.insert("target".into(), value);
            return;
        }
        if name.starts_with("log.") {
            return;
        }
        let name = name.strip_prefix("r#").unwrap_or(name);
        self.0.insert(name.to_string(), value);
    }
}

impl tracing::field::Visit for JsonFields<'_> {
    fn record_f64(&mut self, field: &tracing::field::Field, value: f64) {
        self.put(field, value.into());
    }
    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        self.put(field, value.into());
    }
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.put(field, value.into());
    }
    fn record_bool(&mut self, field: &tracing::field::Field, value: bool) {
        self.put(field, value.into());
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.put(field, value.into());
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.put(field, format!("{value:?}").into());
    }
}

/// `text` as a logfmt value: as is when `Debug` already quoted it (a `&str` field), else as the
/// access log writes its values (`push_logfmt_value`).
fn logfmt_value(text: &str) -> std::borrow::Cow<'_, str> {
    if text.len() >= 2 && text.starts_with('"') && text.ends_with('"') {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 2);
    crate::ops::access_log::push_logfmt_value(&mut out, text);
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn logfmt_values_with_spaces_are_quoted() {
        assert_eq!(
            logfmt_value("Ingress shop/rewrite"),
            "\"Ingress shop/rewrite\""
        );
        assert_eq!(logfmt_value("shop/rewrite"), "shop/rewrite");
        assert_eq!(logfmt_value("\"already quoted\""), "\"already quoted\"");
        assert_eq!(logfmt_value(""), "\"\"");
        assert_eq!(logfmt_value("a=b"), "\"a=b\"");
        assert_eq!(logfmt_value("say \"hi\" \\"), "\"say \\\"hi\\\" \\\\\"");
        assert_eq!(logfmt_value("two\nlines"), "\"two\\nlines\"");
    }

    use super::*;

    #[test]
    fn http_listeners_in_clear_have_no_l4_read_buffer() {
        assert_eq!(l4_buffer(false).read_capacity(), 0);
        assert_eq!(
            l4_buffer(true).read_capacity(),
            pingora::listeners::DEFAULT_L4_READ_BUFFER_SIZE
        );
    }

    #[test]
    fn gateway_addresses_are_listened_on_unless_the_bind_address_takes_them() {
        let config = |bind: &str| {
            let mut args = vec!["--manifests", "m", "--bind-address", bind];
            args.extend(["--gateway-addresses", "127.0.0.1,127.0.0.2,::1"]);
            let args = crate::config::parse_from(std::iter::once("switchyard").chain(args));
            Config::from_args(args.unwrap()).unwrap()
        };
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        assert_eq!(
            gateway_listen_addresses(&config("127.0.0.1")),
            [ip("127.0.0.2"), ip("::1")]
        );
        assert_eq!(gateway_listen_addresses(&config("0.0.0.0")), [ip("::1")]);
        assert!(gateway_listen_addresses(&config("::")).is_empty());
    }

    #[test]
    fn error_line_says_each_cause_once() {
        let io = || std::io::Error::from(std::io::ErrorKind::AddrInUse);
        let e = RunError::Bind {
            addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            what: "--http-port",
            source: io(),
        };
        let line = error_line(&e);
        assert_eq!(line.matches(&io().to_string()).count(), 1, "{line}");
        let e = RunError::from(tls::TlsError::Read {
            flag: "--ssl-cert",
            path: "/nope.pem".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        });
        let line = error_line(&e);
        assert_eq!(line.matches("not found").count(), 1, "{line}");
        assert!(line.starts_with("TLS: --ssl-cert /nope.pem"), "{line}");
    }
}

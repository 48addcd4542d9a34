//! switchyard: a Kubernetes service load balancer.
//!
//! Crate map (data flows one way, top to bottom):
//! - `config`: command-line flags -> validated `Config`.
//! - `manifests`: the offline source (Kubernetes YAML/JSON files), watched; feeds `pipeline`.
//! - `pipeline`: translate, skip if equal, swap once, log warnings; shared by every source.
//! - `translate`: PURE (Services, EndpointSlices, options, previous table) -> (table, warnings).
//! - `table`: the immutable `RoutingTable` and its one `ArcSwap` (writer / reader halves).
//! - `matcher`, `balance`, `sticky`: pure host/path matching, endpoint selection, stickiness.
//! - `http_proxy`: the Pingora data plane; lookups only.
//! - `admin`: `/healthz` and `/readyz`.
//! - `error_page`: the body for unmatched requests, loaded once at startup.
//! - `demo`: two tiny backends for the bundled example.
//!
//! `run` wires them: one Pingora server with the HTTP proxy service, the admin service and the
//! source as a background service.

pub mod admin;
pub mod balance;
pub mod config;
pub mod demo;
pub mod error_page;
pub mod http_proxy;
pub mod manifests;
pub mod matcher;
pub mod pipeline;
pub mod sticky;
pub mod table;
pub mod translate;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Mutex;

use async_trait::async_trait;
use pingora::apps::HttpServerOptions;
use pingora::server::configuration::ServerConf;
use pingora::server::{Server, ShutdownWatch};
use pingora::services::background::{BackgroundService, background_service};
use pingora::services::listening::Service as ListeningService;

use crate::config::{Config, Source};
use crate::error_page::ErrorPage;
use crate::pipeline::Pipeline;
use crate::table::{Frontend, RoutingTable};

/// Why the load balancer could not start.
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
    #[error("the cluster watcher is not implemented yet; use --manifests")]
    ClusterUnsupported,
    #[error("starting a runtime: {0}")]
    Runtime(std::io::Error),
    #[error("writing the table: {0}")]
    Output(std::io::Error),
}

/// Runs switchyard until it is told to stop (or, with `--dry-run`, prints the table and returns).
pub fn run(config: Config) -> Result<(), RunError> {
    let Source::Manifests(paths) = &config.source else {
        return Err(RunError::ClusterUnsupported);
    };
    if config.dry_run {
        return dry_run(paths, &config);
    }
    let http_addr = SocketAddr::new(config.bind_address, config.http_port);
    let admin_addr = SocketAddr::new(config.bind_address, config.admin_port);
    check_bind(http_addr, "--http-port")?;
    check_bind(admin_addr, "--admin-port")?;

    let not_found = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RunError::Runtime)?
        .block_on(ErrorPage::load_or_builtin(
            config.error_page.as_deref(),
            config.default_return_code,
        ));

    let (writer, reader) = table::handle(RoutingTable::default());

    let mut conf = ServerConf {
        threads: config.threads,
        max_retries: config.connect_tries.max(1),
        ..Default::default()
    };
    // Connection-draining on SIGTERM belongs to the cluster issue; until then stop promptly.
    conf.grace_period_seconds = Some(0);
    conf.graceful_shutdown_timeout_seconds = Some(5);
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();

    let proxy = http_proxy::HttpProxy::new(
        reader.clone(),
        Frontend::Http,
        config.timeouts,
        config.connect_tries,
        not_found,
    );
    let mut http =
        pingora::proxy::http_proxy_service_with_name(&server.configuration, proxy, "http");
    http.add_tcp(&http_addr.to_string());
    if let Some(app) = http.app_logic_mut() {
        let mut options = HttpServerOptions::default();
        options.h2c = true;
        app.server_options = Some(options);
    }
    server.add_service(http);

    let mut admin = ListeningService::new("admin".into(), admin::Admin { table: reader });
    admin.add_tcp(&admin_addr.to_string());
    server.add_service(admin);

    server.add_service(background_service(
        "manifests",
        ManifestSource {
            paths: paths.clone(),
            pipeline: Mutex::new(Some(Pipeline::new(writer, config.translate.clone()))),
        },
    ));
    if config.demo {
        server.add_service(background_service("demo backends", demo::DemoBackends));
    }
    tracing::info!(http = %http_addr, admin = %admin_addr, "switchyard starting");
    server.run(Default::default());
    Ok(())
}

fn dry_run(paths: &[PathBuf], config: &Config) -> Result<(), RunError> {
    let objects = manifests::load(paths)?;
    let (table, warnings) =
        translate::translate(&objects.services, &objects.slices, &config.translate, None);
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    let json =
        serde_json::to_string_pretty(&table.to_json()).map_err(|e| RunError::Output(e.into()))?;
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

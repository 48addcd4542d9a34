//! Shared helpers for the end-to-end tests: the one test backend ([`Backend`], in
//! `backend.rs`), manifest builders, a switchyard subprocess guard, small HTTP client helpers,
//! and the bounded waits ([`eventually`], [`poll`], [`poll_blocking`]) that every test uses
//! instead of fixed sleeps.
//!
//! Everything listens on / talks to 127.0.0.1 only, and every wait or loop is
//! bounded in time.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

mod backend;

// Each test binary uses its own part of it.
#[allow(unused_imports)]
pub use backend::{Backend, BackendBuilder, Behaviour, Fault, Script, Seen, Transport};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// Upper bound for a single HTTP exchange made by the helpers.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// Ports
// ---------------------------------------------------------------------------

/// A free port, kept from everyone else for the rest of this test process: a socket bound to
/// it with `SO_REUSEADDR` that never listens stays open. The kernel then hands the port to no
/// other `bind(0)` or outgoing connection (another test's backend took one "free a moment ago"
/// and answered in switchyard's place), while a listener that sets `SO_REUSEADDR` itself (std,
/// tokio, Pingora, switchyard) can still bind and listen on it; a connect to it is refused
/// until one does.
pub fn free_port() -> u16 {
    static HELD: Mutex<Vec<tokio::net::TcpSocket>> = Mutex::new(Vec::new());
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_reuseaddr(true).expect("SO_REUSEADDR");
    socket
        .bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind 127.0.0.1:0");
    let port = socket.local_addr().expect("local_addr").port();
    HELD.lock().unwrap_or_else(|e| e.into_inner()).push(socket);
    port
}

/// Whether a socket listens on `port` (any local address), from `/proc/net/tcp`; read
/// without connecting, so that no connection is counted by the server. True where the file
/// does not exist (not Linux): the caller then learns it from its first connect.
pub fn listening(port: u16) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return true;
    };
    table.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let local = f.get(1).and_then(|a| a.split_once(':'));
        f.get(3) == Some(&"0A")
            && local.and_then(|(_, p)| u16::from_str_radix(p, 16).ok()) == Some(port)
    })
}

/// Whether process `pid` itself listens on `port` (any local address): a listening socket in
/// `/proc/net/tcp` whose inode is one of the process's descriptors. Unlike [`listening`], not
/// fooled by another process (another test's backend) that took a [`free_port`] first. True
/// where `/proc/net/tcp` does not exist (not Linux), as with [`listening`].
pub fn listens(pid: u32, port: u16) -> bool {
    let Some(sockets) = sockets_on_port(port) else {
        return true;
    };
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|target| sockets.get(&*target.to_string_lossy()) == Some(&true))
    })
}

/// The TCP sockets on local `port` in `/proc/net/tcp` (any process): each as its descriptors'
/// link target (`socket:[INODE]`), and whether it is listening. `None` where the file does not
/// exist (not Linux).
fn sockets_on_port(port: u16) -> Option<std::collections::HashMap<String, bool>> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let mut sockets = std::collections::HashMap::new();
    for l in table.lines().skip(1) {
        let f: Vec<&str> = l.split_whitespace().collect();
        let local = f.get(1).and_then(|a| a.split_once(':'));
        if local.and_then(|(_, p)| u16::from_str_radix(p, 16).ok()) != Some(port) {
            continue;
        }
        if let (Some(state), Some(inode)) = (f.get(3), f.get(9)) {
            sockets.insert(format!("socket:[{inode}]"), *state == "0A");
        }
    }
    Some(sockets)
}

/// For the sockets of process `pid` on local TCP `port` (from /proc/net/tcp and /proc/PID/fd):
/// the epoll instance (an fd number of it) each is registered in, from the epolls' fdinfo. The
/// first list is the listening socket's, the second the accepted connections' (one entry per
/// epoll a socket is in; none if it is in none). Without work stealing each runtime thread has an
/// epoll of its own, so this shows which thread's reactor serves a connection's readiness.
pub fn epolls_of_port(pid: u32, port: u16) -> (Vec<u32>, Vec<u32>) {
    let ours = sockets_on_port(port).unwrap_or_default();
    let mut listening = std::collections::HashSet::new();
    let mut accepted = std::collections::HashSet::new();
    let mut epolls = Vec::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let Ok(n) = fd.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(target) = std::fs::read_link(fd.path()) else {
            continue;
        };
        let target = target.to_string_lossy().into_owned();
        match ours.get(&target) {
            Some(true) => {
                listening.insert(n);
            }
            Some(false) => {
                accepted.insert(n);
            }
            None if target == "anon_inode:[eventpoll]" => epolls.push(n),
            None => {}
        }
    }
    // An epoll instance can be open under two fds (mio duplicates a runtime's): the same
    // registrations under each, counted once, under the lower fd.
    let mut instances: std::collections::BTreeMap<Vec<u32>, u32> = Default::default();
    for epoll in epolls {
        let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{epoll}"));
        let mut targets: Vec<u32> = info
            .unwrap_or_default()
            .lines()
            .filter_map(|line| {
                line.strip_prefix("tfd:")
                    .and_then(|r| r.split_whitespace().next())
                    .and_then(|n| n.parse::<u32>().ok())
            })
            .collect();
        targets.sort_unstable();
        let first = instances.entry(targets).or_insert(epoll);
        *first = (*first).min(epoll);
    }
    let (mut of_listener, mut of_accepted) = (Vec::new(), Vec::new());
    for (targets, epoll) in instances {
        for fd in targets {
            if listening.contains(&fd) {
                of_listener.push(epoll);
            } else if accepted.contains(&fd) {
                of_accepted.push(epoll);
            }
        }
    }
    (of_listener, of_accepted)
}

/// A port that refuses every connection for as long as this value lives: the socket is bound
/// but never listens, so no other test can take the port (as one can a [`free_port`] that is
/// merely "free a moment ago") and a connect to it is answered with a reset.
pub struct DeadPort {
    _socket: tokio::net::TcpSocket,
    pub port: u16,
}

impl DeadPort {
    pub fn new() -> DeadPort {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind("127.0.0.1:0".parse().expect("addr"))
            .expect("bind 127.0.0.1:0");
        let port = socket.local_addr().expect("local_addr").port();
        DeadPort {
            _socket: socket,
            port,
        }
    }
}

// ---------------------------------------------------------------------------
// Manifest builders
// ---------------------------------------------------------------------------

pub const ANN_HOST: &str = "serviceloadbalancer/lb.host";
pub const ANN_ACL: &str = "serviceloadbalancer/lb.aclMatch";
pub const ANN_ALGO: &str = "serviceloadbalancer/lb.algorithm";
pub const ANN_STICKY: &str = "serviceloadbalancer/lb.cookie-sticky-session";
pub const ANN_MAXCONN: &str = "serviceloadbalancer/lb.maxconn";

/// A v1 Service with one port. `port_name == ""` means an unnamed port.
#[derive(Clone, Debug)]
pub struct Svc {
    name: String,
    ns: Option<String>,
    annotations: BTreeMap<String, String>,
    ports: Vec<(String, u16)>,
    udp_ports: Vec<(String, u16)>,
    affinity: Option<String>,
    app_protocol: Option<String>,
}

/// `svc(name, port)`: a Service with a single unnamed TCP port.
pub fn svc(name: &str, port: u16) -> Svc {
    Svc {
        name: name.into(),
        ns: None,
        annotations: BTreeMap::new(),
        ports: vec![(String::new(), port)],
        udp_ports: vec![],
        affinity: None,
        app_protocol: None,
    }
}

impl Svc {
    pub fn ns(mut self, ns: &str) -> Self {
        self.ns = Some(ns.into());
        self
    }
    pub fn ann(mut self, k: &str, v: &str) -> Self {
        self.annotations.insert(k.into(), v.into());
        self
    }
    pub fn host(self, h: &str) -> Self {
        self.ann(ANN_HOST, h)
    }
    pub fn acl(self, paths: &str) -> Self {
        self.ann(ANN_ACL, paths)
    }
    pub fn algo(self, a: &str) -> Self {
        self.ann(ANN_ALGO, a)
    }
    pub fn sticky(self) -> Self {
        self.ann(ANN_STICKY, "true")
    }
    /// Every TCP port's `appProtocol`.
    pub fn app_protocol(mut self, p: &str) -> Self {
        self.app_protocol = Some(p.into());
        self
    }
    pub fn client_ip_affinity(mut self) -> Self {
        self.affinity = Some("ClientIP".into());
        self
    }
    /// Replace the port list with named ports.
    pub fn named_ports(mut self, ports: &[(&str, u16)]) -> Self {
        self.ports = ports.iter().map(|(n, p)| (n.to_string(), *p)).collect();
        self
    }
    /// Add a named UDP port (switchyard must not turn it into an entry).
    pub fn udp_port(mut self, name: &str, port: u16) -> Self {
        self.udp_ports.push((name.into(), port));
        self
    }
    pub fn to_value(&self) -> Value {
        let tcp = self.ports.iter().map(|(n, p)| (n, p, "TCP"));
        let udp = self.udp_ports.iter().map(|(n, p)| (n, p, "UDP"));
        let ports: Vec<Value> = tcp
            .chain(udp)
            .map(|(n, p, proto)| {
                let mut v = json!({"port": p, "targetPort": p, "protocol": proto});
                if let (Some(app), "TCP") = (&self.app_protocol, proto) {
                    v["appProtocol"] = json!(app);
                }
                if !n.is_empty() {
                    v["name"] = json!(n);
                }
                v
            })
            .collect();
        let mut meta = json!({"name": self.name});
        if let Some(ns) = &self.ns {
            meta["namespace"] = json!(ns);
        }
        if !self.annotations.is_empty() {
            meta["annotations"] = json!(self.annotations);
        }
        let mut spec = json!({"type": "ClusterIP", "clusterIP": "10.96.0.10", "ports": ports});
        if let Some(a) = &self.affinity {
            spec["sessionAffinity"] = json!(a);
            spec["sessionAffinityConfig"] = json!({"clientIP": {"timeoutSeconds": 10800}});
        } else {
            spec["sessionAffinity"] = json!("None");
        }
        json!({"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec})
    }
}

impl From<Svc> for Value {
    fn from(s: Svc) -> Value {
        s.to_value()
    }
}

/// switchyard's IngressClass (`spec.controller` is the default `--controller-name`).
pub fn ingress_class(name: &str, default: bool) -> Value {
    let mut meta = json!({"name": name});
    if default {
        meta["annotations"] = json!({"ingressclass.kubernetes.io/is-default-class": "true"});
    }
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IngressClass",
        "metadata": meta,
        "spec": {"controller": "switchyard.io/ingress-controller"}
    })
}

/// A `networking.k8s.io/v1` Ingress in `default`, built rule by rule.
#[derive(Clone)]
pub struct Ing {
    name: String,
    class: Option<String>,
    annotations: BTreeMap<String, String>,
    rules: Vec<Value>,
    tls: Vec<Value>,
    default_backend: Option<Value>,
    namespace: String,
    created: Option<String>,
}

/// An Ingress of class `switchyard`, in `default`.
pub fn ing(name: &str) -> Ing {
    Ing {
        namespace: "default".into(),
        name: name.into(),
        class: Some("switchyard".into()),
        annotations: BTreeMap::new(),
        rules: Vec::new(),
        tls: Vec::new(),
        default_backend: None,
        created: None,
    }
}

fn ingress_backend(svc: &str, port: u16) -> Value {
    json!({"service": {"name": svc, "port": {"number": port}}})
}

impl Ing {
    pub fn ns(mut self, ns: &str) -> Self {
        self.namespace = ns.into();
        self
    }
    pub fn class(mut self, c: Option<&str>) -> Self {
        self.class = c.map(Into::into);
        self
    }
    pub fn ann(mut self, k: &str, v: &str) -> Self {
        self.annotations.insert(k.into(), v.into());
        self
    }
    /// A rule for `host` (or any host) with `(path, pathType, service, port)` paths.
    pub fn rule(mut self, host: Option<&str>, paths: &[(&str, &str, &str, u16)]) -> Self {
        let paths: Vec<Value> = paths
            .iter()
            .map(|(p, t, svc, port)| json!({"path": p, "pathType": t, "backend": ingress_backend(svc, *port)}))
            .collect();
        let mut r = json!({"http": {"paths": paths}});
        if let Some(h) = host {
            r["host"] = json!(h);
        }
        self.rules.push(r);
        self
    }
    pub fn tls(mut self, hosts: &[&str], secret: &str) -> Self {
        self.tls.push(json!({"hosts": hosts, "secretName": secret}));
        self
    }
    pub fn default_backend(mut self, svc: &str, port: u16) -> Self {
        self.default_backend = Some(ingress_backend(svc, port));
        self
    }
    /// `metadata.creationTimestamp` (RFC 3339): the older Ingress wins a conflict.
    pub fn created(mut self, at: &str) -> Self {
        self.created = Some(at.into());
        self
    }
}

impl From<Ing> for Value {
    fn from(i: Ing) -> Value {
        let mut spec = json!({"rules": i.rules});
        if let Some(c) = i.class {
            spec["ingressClassName"] = json!(c);
        }
        if !i.tls.is_empty() {
            spec["tls"] = json!(i.tls);
        }
        if let Some(b) = i.default_backend {
            spec["defaultBackend"] = b;
        }
        let mut meta = json!({"name": i.name, "namespace": i.namespace});
        if let Some(at) = i.created {
            meta["creationTimestamp"] = json!(at);
        }
        if !i.annotations.is_empty() {
            meta["annotations"] = json!(i.annotations);
        }
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta, "spec": spec})
    }
}

/// A `kubernetes.io/tls` Secret in `default` (PEM through `stringData`).
pub fn tls_secret(name: &str, cert_pem: &str, key_pem: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "default"},
        "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": cert_pem, "tls.key": key_pem}
    })
}

/// `slice(svc, port_name, port)`: an EndpointSlice in `default` with one
/// ready endpoint 127.0.0.1 and one port. `port_name == ""` = unnamed port.
pub fn slice(svc: &str, port_name: &str, port: u16) -> Value {
    slice_ns("default", svc, port_name, port)
}

pub fn slice_ns(ns: &str, svc: &str, port_name: &str, port: u16) -> Value {
    let mut p = json!({"port": port, "protocol": "TCP"});
    if !port_name.is_empty() {
        p["name"] = json!(port_name);
    }
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": format!("{svc}-{port}"),
            "namespace": ns,
            "labels": {"kubernetes.io/service-name": svc},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
        "ports": [p],
    })
}

/// One EndpointSlice per backend for an unnamed-port Service in `default`.
pub fn slices(svc: &str, backends: &[&Backend]) -> Vec<Value> {
    backends.iter().map(|b| slice(svc, "", b.port)).collect()
}

/// Render objects as a multi-document YAML stream (each document is JSON,
/// which is valid YAML).
pub fn multi_doc(objs: &[Value]) -> String {
    let docs: Vec<String> = objs
        .iter()
        .map(|o| serde_json::to_string_pretty(o).expect("json"))
        .collect();
    format!("---\n{}\n", docs.join("\n---\n"))
}

/// Render objects as one `kind: List` JSON document.
pub fn list_doc(objs: &[Value]) -> String {
    serde_json::to_string_pretty(&json!({"apiVersion": "v1", "kind": "List", "items": objs}))
        .expect("json")
}

/// Replace `path` atomically: write a temp file in the same directory, rename.
pub fn write_atomic(path: &Path, contents: &str) {
    let dir = path.parent().expect("manifest dir");
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("m")
    ));
    std::fs::write(&tmp, contents).expect("write temp manifest");
    std::fs::rename(&tmp, path).expect("rename manifest");
}

// ---------------------------------------------------------------------------
// switchyard subprocess
// ---------------------------------------------------------------------------

/// The binary under test: this build's, or `SWITCHYARD_TEST_BIN` (a release build, when a
/// suite's printed figures should describe what users run).
pub fn bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var("SWITCHYARD_TEST_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_switchyard").to_string())
    })
}

/// How the manifests are laid out on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `<tmp>/manifests.yaml`, multi-document YAML.
    YamlFile,
    /// `<tmp>/manifests.json`, one `kind: List`.
    JsonFile,
    /// `--manifests <tmp>/manifests.d`, objects in `manifests.d/base.yaml`.
    Dir,
}

pub struct SwitchyardBuilder {
    objs: Vec<Value>,
    args: Vec<String>,
    layout: Layout,
    every_service_routed: bool,
}

/// The suites' Services are written as the original service-loadbalancer's were, reached by
/// their path route `/<name>` without an annotation; the default `--service-routes annotated`
/// routes only the Services that ask. So every switchyard the suites start routes every
/// Service (`SWITCHYARD_SERVICE_ROUTES=all`, which a `--service-routes` flag overrides), but
/// for those started with `SwitchyardBuilder::service_routes_default`.
pub const EVERY_SERVICE_ROUTED: (&str, &str) = ("SWITCHYARD_SERVICE_ROUTES", "all");

pub fn switchyard(objs: Vec<Value>) -> SwitchyardBuilder {
    SwitchyardBuilder {
        objs,
        args: vec![],
        layout: Layout::YamlFile,
        every_service_routed: true,
    }
}

impl SwitchyardBuilder {
    pub fn arg(mut self, a: &str) -> Self {
        self.args.push(a.into());
        self
    }
    pub fn args(mut self, a: &[&str]) -> Self {
        self.args.extend(a.iter().map(|s| s.to_string()));
        self
    }
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }
    /// Leaves `--service-routes` at the binary's default (see `EVERY_SERVICE_ROUTED`).
    pub fn service_routes_default(mut self) -> Self {
        self.every_service_routed = false;
        self
    }
    /// Write the manifests (see [`Layout`]), start the binary and wait
    /// (≤ 20 s) until `/readyz` answers 200.
    pub async fn start(self) -> Switchyard {
        let dir = tempfile::tempdir().expect("tempdir");
        let manifest = match self.layout {
            Layout::YamlFile => dir.path().join("manifests.yaml"),
            Layout::JsonFile => dir.path().join("manifests.json"),
            Layout::Dir => {
                let d = dir.path().join("manifests.d");
                std::fs::create_dir(&d).expect("mkdir manifests.d");
                d
            }
        };
        write_layout(self.layout, &manifest, &self.objs);
        let env = self.every_service_routed.then_some(EVERY_SERVICE_ROUTED);
        Switchyard::spawn(dir, manifest, self.args, self.layout, env).await
    }
}

fn write_layout(layout: Layout, manifest: &Path, objs: &[Value]) {
    match layout {
        Layout::YamlFile => write_atomic(manifest, &multi_doc(objs)),
        Layout::JsonFile => write_atomic(manifest, &list_doc(objs)),
        Layout::Dir => write_atomic(&manifest.join("base.yaml"), &multi_doc(objs)),
    }
}

/// A running switchyard; killed on drop.
pub struct Switchyard {
    pub child: Child,
    pub http_port: u16,
    pub admin_port: u16,
    /// The stats page (`--stats-port`, a free port per process).
    pub stats_port: u16,
    /// The `--manifests` argument (a file, or a directory for `Layout::Dir`).
    pub manifest: PathBuf,
    pub layout: Layout,
    pub stderr_path: PathBuf,
    pub dir: tempfile::TempDir,
}

impl Switchyard {
    async fn spawn(
        dir: tempfile::TempDir,
        manifest: PathBuf,
        extra: Vec<String>,
        layout: Layout,
        env: Option<(&str, &str)>,
    ) -> Switchyard {
        // Ports are picked by bind-and-drop, so another process may grab one
        // before switchyard binds it: retry a failed start (at most 3 times).
        let mut last_err = String::new();
        let mut dir = Some(dir);
        for attempt in 0..3 {
            let http_port = free_port();
            let mut admin_port = free_port();
            while admin_port == http_port {
                admin_port = free_port();
            }
            let mut stats_port = free_port();
            while stats_port == http_port || stats_port == admin_port {
                stats_port = free_port();
            }
            let stderr_path = dir
                .as_ref()
                .unwrap()
                .path()
                .join(format!("switchyard.{attempt}.stderr"));
            let stdout_path = dir
                .as_ref()
                .unwrap()
                .path()
                .join(format!("switchyard.{attempt}.stdout"));
            let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
            let stdout = std::fs::File::create(&stdout_path).expect("stdout file");
            let child = Command::new(bin())
                .arg("--manifests")
                .arg(&manifest)
                .args(["--bind-address", "127.0.0.1"])
                .args(["--http-port", &http_port.to_string()])
                .args(["--admin-port", &admin_port.to_string()])
                .args(["--stats-port", &stats_port.to_string()])
                .args(&extra)
                .envs(env)
                .env("RUST_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(Stdio::from(stdout))
                .stderr(Stdio::from(stderr))
                .spawn()
                .expect("spawn switchyard");
            let mut sy = Switchyard {
                child,
                http_port,
                admin_port,
                stats_port,
                manifest: manifest.clone(),
                layout,
                stderr_path,
                dir: dir.take().unwrap(),
            };
            match sy.wait_ready(Duration::from_secs(20)).await {
                Ok(()) => return sy,
                Err((early, msg)) => {
                    last_err = msg;
                    if !early {
                        panic!("{last_err}");
                    }
                    // Take the temp dir back and try again with fresh ports.
                    let _ = sy.child.kill();
                    let _ = sy.child.wait();
                    let placeholder = tempfile::tempdir().expect("tempdir");
                    dir = Some(std::mem::replace(&mut sy.dir, placeholder));
                }
            }
        }
        panic!("switchyard did not start after 3 attempts; last: {last_err}");
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Err((exited_early, message)).
    async fn wait_ready(&mut self, limit: Duration) -> Result<(), (bool, String)> {
        let (admin, http, pid) = (self.admin_port, self.http_port, self.child.id());
        let last = std::cell::RefCell::new(String::from("no attempt"));
        let child = &mut self.child;
        let outcome = poll(limit, Duration::from_millis(100), || {
            let exited = child.try_wait().ok().flatten();
            let last = &last;
            async move {
                if let Some(status) = exited {
                    return Some(Err(status));
                }
                match try_request(admin, "GET", "/readyz", &[]).await {
                    // Ready means a table is live; the traffic listener binds on its own
                    // schedule, and a test's first request must not meet a refused connect
                    // (nor another process that took the port).
                    Ok(r) if r.status == 200 && listens(pid, http) => return Some(Ok(())),
                    Ok(r) if r.status == 200 => {
                        *last.borrow_mut() = format!("ready, but nothing listens on {http}")
                    }
                    Ok(r) => *last.borrow_mut() = format!("status {}", r.status),
                    Err(e) => *last.borrow_mut() = e,
                }
                None
            }
        })
        .await;
        match outcome {
            Some(Ok(())) => Ok(()),
            Some(Err(status)) => Err((
                true,
                format!(
                    "switchyard exited early with {status}; stderr:\n{}",
                    self.stderr()
                ),
            )),
            None => Err((
                false,
                format!(
                    "switchyard /readyz not 200 within {limit:?} (last: {}); stderr:\n{}",
                    last.borrow(),
                    self.stderr()
                ),
            )),
        }
    }

    /// Replace the manifest file atomically with new objects.
    /// Replace the manifests atomically (temp file + rename) with new
    /// objects, in the layout the process was started with.
    pub fn rewrite(&self, objs: &[Value]) {
        write_layout(self.layout, &self.manifest, objs);
    }

    /// Replace the manifest file (or `base.yaml` in a directory) with raw text.
    pub fn rewrite_raw(&self, contents: &str) {
        match self.layout {
            Layout::Dir => write_atomic(&self.manifest.join("base.yaml"), contents),
            _ => write_atomic(&self.manifest, contents),
        }
    }

    /// Directory layout only: add or replace another file in the directory.
    pub fn write_dir_file(&self, name: &str, objs: &[Value]) {
        assert_eq!(self.layout, Layout::Dir, "write_dir_file needs Layout::Dir");
        write_atomic(&self.manifest.join(name), &multi_doc(objs));
    }

    pub async fn get(&self, path: &str) -> Resp {
        get(self.http_port, path, &[]).await
    }

    pub async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Resp {
        get(self.http_port, path, headers).await
    }

    pub async fn get_host(&self, host: &str, path: &str) -> Resp {
        get(self.http_port, path, &[("host", host)]).await
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{}", self.http_port, path)
    }
}

impl Drop for Switchyard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run the binary to completion with the given args (bounded to 30 s).
pub fn run_to_exit(args: &[&str]) -> std::process::Output {
    run_to_exit_with(args, &[])
}

/// `run_to_exit` with the environment controlled: no `NO_COLOR` from the caller's shell,
/// `RUST_LOG=warn`, plus `env`.
pub fn run_to_exit_with(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .env_remove("NO_COLOR")
        .env(EVERY_SERVICE_ROUTED.0, EVERY_SERVICE_ROUTED.1)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn switchyard");
    let exited = poll_blocking(Duration::from_secs(30), Duration::from_millis(50), || {
        child.try_wait().expect("try_wait")
    });
    if exited.is_none() {
        let _ = child.kill();
        let out = child.wait_with_output().expect("wait");
        panic!(
            "switchyard {args:?} did not exit within 30 s; stderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    child.wait_with_output().expect("wait_with_output")
}

// ---------------------------------------------------------------------------
// HTTP client helpers
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: String,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.body))
    }
    /// Name of the backend that answered (None if the body is not ours).
    pub fn backend(&self) -> Option<String> {
        serde_json::from_str::<Value>(&self.body)
            .ok()?
            .get("backend")?
            .as_str()
            .map(str::to_string)
    }
    /// Path + query the backend saw.
    pub fn uri(&self) -> String {
        self.json()["uri"].as_str().unwrap_or_default().to_string()
    }
    /// A request header as the backend saw it.
    pub fn seen_header(&self, name: &str) -> Option<String> {
        self.json()["headers"][name.to_ascii_lowercase()]
            .as_str()
            .map(str::to_string)
    }
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    }
    pub fn header_all(&self, name: &str) -> Vec<String> {
        self.headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect()
    }
}

/// One request over a fresh connection; panics on transport errors.
pub async fn get(port: u16, path: &str, headers: &[(&str, &str)]) -> Resp {
    try_request(port, "GET", path, headers)
        .await
        .unwrap_or_else(|e| panic!("GET {path} {headers:?} failed: {e}"))
}

/// One request over a fresh TCP connection (closed afterwards). A `host`
/// entry in `headers` overrides the default `Host: 127.0.0.1:<port>`.
pub async fn try_request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Resp, String> {
    let fut = async {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        let conn_task = tokio::spawn(conn);
        let req = build_request(port, method, path, headers)?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| format!("send: {e}"))?;
        let r = read_resp(resp).await;
        conn_task.abort();
        r
    };
    tokio::time::timeout(REQUEST_TIMEOUT, fut)
        .await
        .map_err(|_| format!("timeout after {REQUEST_TIMEOUT:?}"))?
}

fn build_request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Request<Empty<Bytes>>, String> {
    let mut b = Request::builder().method(method).uri(path);
    let has_host = headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host"));
    if !has_host {
        b = b.header(http::header::HOST, format!("127.0.0.1:{port}"));
    }
    for (k, v) in headers {
        b = b.header(*k, HeaderValue::from_str(v).map_err(|e| e.to_string())?);
    }
    b.body(Empty::new()).map_err(|e| format!("request: {e}"))
}

async fn read_resp(resp: Response<Incoming>) -> Result<Resp, String> {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    Ok(Resp {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// A single client connection that is reused for every request (no
/// reconnects: if the server closes it, the next request fails).
pub struct OneConn {
    port: u16,
    sender: hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    task: JoinHandle<()>,
}

impl OneConn {
    pub async fn open(port: u16) -> OneConn {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        Self::over(port, stream).await
    }

    /// HTTP/1.1 over an already connected stream (a TLS one, say); `port` only makes the
    /// default `Host`.
    pub async fn over<T>(port: u16, io: T) -> OneConn
    where
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .expect("handshake");
        let task = tokio::spawn(async move {
            let _ = conn.await;
        });
        OneConn { port, sender, task }
    }

    /// Whether the connection can carry another request (the server has not closed it).
    pub fn is_open(&self) -> bool {
        !self.sender.is_closed()
    }

    pub async fn get(&mut self, path: &str, headers: &[(&str, &str)]) -> Result<Resp, String> {
        self.request("GET", path, headers).await
    }

    /// Any method, without a body.
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<Resp, String> {
        let fut = async {
            self.sender
                .ready()
                .await
                .map_err(|e| format!("connection not reusable: {e}"))?;
            let req = build_request(self.port, method, path, headers)?;
            let resp = self
                .sender
                .send_request(req)
                .await
                .map_err(|e| format!("send: {e}"))?;
            read_resp(resp).await
        };
        tokio::time::timeout(REQUEST_TIMEOUT, fut)
            .await
            .map_err(|_| "timeout".to_string())?
    }
}

impl Drop for OneConn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A pooled keep-alive client (hyper-util legacy client).
pub type PooledClient = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Empty<Bytes>,
>;

pub fn pooled_client() -> PooledClient {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build_http()
}

pub async fn pooled_get(client: &PooledClient, url: &str) -> Result<Resp, String> {
    let fut = async {
        let req = Request::get(url)
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        let resp = client.request(req).await.map_err(|e| format!("{e:?}"))?;
        read_resp(resp).await
    };
    tokio::time::timeout(REQUEST_TIMEOUT, fut)
        .await
        .map_err(|_| "timeout".to_string())?
}

/// Polls `f` every 100 ms until it returns true or `limit` passes; whether it did.
pub async fn eventually<F, Fut>(limit: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    poll(limit, Duration::from_millis(100), || {
        let fut = f();
        async move { fut.await.then_some(()) }
    })
    .await
    .is_some()
}

/// Calls `f` every `every` until it returns `Some` or `limit` passes (at least once); the
/// value, or `None` past the limit.
pub async fn poll<T, F, Fut>(limit: Duration, every: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        // The poll interval of a bounded wait on a condition.
        tokio::time::sleep(every).await;
    }
}

/// [`poll`] for code off the runtime (a child process's exit, say): blocks the thread.
pub fn poll_blocking<T>(
    limit: Duration,
    every: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        // The poll interval of a bounded wait on a condition.
        std::thread::sleep(every);
    }
}

/// Count answering backends for `n` sequential requests (fresh connection
/// each); panics on any non-200.
pub async fn spread(sy: &Switchyard, path: &str, n: usize) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for i in 0..n {
        let r = sy.get(path).await;
        assert_eq!(r.status, 200, "request #{i} to {path}: {r:?}");
        let b = r.backend().unwrap_or_else(|| panic!("no backend in {r:?}"));
        *counts.entry(b).or_insert(0) += 1;
    }
    counts
}

// ---------------------------------------------------------------------------
// Observability helpers (issue 5)
// ---------------------------------------------------------------------------

impl Switchyard {
    /// Whether switchyard itself listens on `port` (see [`listens`]).
    pub fn listens(&self, port: u16) -> bool {
        listens(self.child.id(), port)
    }

    /// What the process wrote to stdout so far (access log lines).
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(self.stderr_path.with_extension("stdout")).unwrap_or_default()
    }

    /// GET on the admin port.
    pub async fn admin(&self, path: &str) -> Resp {
        get(self.admin_port, path, &[]).await
    }

    /// GET on the stats port.
    pub async fn stats(&self, path: &str) -> Resp {
        get(self.stats_port, path, &[]).await
    }
}

// ---------------------------------------------------------------------------
// Assertions and starts shared by the end-to-end suites
// ---------------------------------------------------------------------------

/// Assert that `path` (with optional Host) reaches backend `b` and that the
/// backend saw `uri`.
pub async fn expect_route(sy: &Switchyard, host: Option<&str>, path: &str, b: &Backend, uri: &str) {
    let r = match host {
        Some(h) => sy.get_host(h, path).await,
        None => sy.get(path).await,
    };
    assert_eq!(r.status, 200, "host={host:?} path={path}: {r:?}");
    assert_eq!(
        r.backend().as_deref(),
        Some(b.name.as_str()),
        "host={host:?} path={path} went to the wrong backend: {r:?}"
    );
    assert_eq!(
        r.uri(),
        uri,
        "host={host:?} path={path}: backend saw the wrong URI"
    );
}

/// A switchyard on `objs` with `--fast-path engine` (`"true"`: the fast path with Pingora
/// behind it; `"false"`: Pingora's engine alone) and `extra` flags.
pub async fn switchyard_on(objs: Vec<Value>, engine: &str, extra: &[&str]) -> Switchyard {
    switchyard(objs)
        .args(&["--fast-path", engine])
        .args(extra)
        .start()
        .await
}

/// Both HTTP engines, as `--fast-path` values.
pub const ENGINES: [&str; 2] = ["true", "false"];

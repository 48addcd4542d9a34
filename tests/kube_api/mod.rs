//! An in-process fake Kubernetes API server, over real HTTP on 127.0.0.1, for Services,
//! EndpointSlices and Events: list with `resourceVersion`, watch streams of
//! ADDED/MODIFIED/DELETED with bookmarks, and a 410 Gone (as a watch `ERROR` event, the way the
//! API server sends it) for a watch that starts before the compacted history, which forces the
//! client to re-list. Tests drive it (`apply`, `delete`, `break_watches`) and read back what
//! clients did (`lists`, `events`).
//!
//! Like a real API server it refuses EndpointSlices with loopback, unspecified or link-local
//! addresses (a 422 `Invalid`, here a panic in `apply` with the real message), so a test that
//! needs no connection uses documentation addresses (`192.0.2.0/24`). switchyard can only reach
//! this machine's test backends on 127.0.0.1, so the tests that proxy to them start the fake with
//! `start_reaching_local_backends`: the one place it accepts what a cluster never would.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, mpsc, watch};

type Body = BoxBody<Bytes, Infallible>;

/// The two watched kinds, with their URL pieces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Service,
    EndpointSlice,
}

impl Kind {
    fn api_version(self) -> &'static str {
        match self {
            Kind::Service => "v1",
            Kind::EndpointSlice => "discovery.k8s.io/v1",
        }
    }
    fn name(self) -> &'static str {
        match self {
            Kind::Service => "Service",
            Kind::EndpointSlice => "EndpointSlice",
        }
    }
    fn from_value(v: &Value) -> Kind {
        match v["kind"].as_str() {
            Some("Service") => Kind::Service,
            Some("EndpointSlice") => Kind::EndpointSlice,
            other => panic!("fake API serves Services and EndpointSlices, not {other:?}"),
        }
    }
}

#[derive(Default)]
struct State {
    rv: u64,
    objects: BTreeMap<(Kind, String, String), Value>,
    /// (resourceVersion, type, kind, object) for every change.
    log: Vec<(u64, &'static str, Kind, Value)>,
    /// Watches that start from a resourceVersion below this get 410 Gone.
    compacted_below: u64,
    lists: BTreeMap<Kind, u32>,
    events: Vec<Value>,
    /// While set, list requests for this kind wait (to observe readiness before a full list).
    hold_lists: Option<Kind>,
    /// Bumped by `break_watches`, under the same lock as the log, so a watch never sends an
    /// event recorded after it was broken.
    epoch: u64,
    /// While set, every list and watch request is answered with this status (a real API
    /// server answers 403 while it boots, 503 while etcd is away), as a `Status` object.
    failing: Option<u16>,
    /// List and watch requests per kind, answered or not.
    attempts: BTreeMap<Kind, u32>,
    /// Accept EndpointSlices with 127.0.0.1 (`start_reaching_local_backends`).
    allow_loopback: bool,
}

/// A running fake API server.
pub struct FakeApi {
    pub port: u16,
    state: Arc<Mutex<State>>,
    changed: broadcast::Sender<()>,
    /// Bumping this closes every open watch stream.
    kill: watch::Sender<u64>,
    release: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeApi {
    /// A fake that validates EndpointSlice addresses as a real API server does.
    pub async fn start() -> FakeApi {
        FakeApi::start_with(false).await
    }

    /// A fake that also accepts 127.0.0.1 in EndpointSlices, which a real API server refuses:
    /// for tests whose switchyard must reach backends on this machine.
    pub async fn start_reaching_local_backends() -> FakeApi {
        FakeApi::start_with(true).await
    }

    async fn start_with(allow_loopback: bool) -> FakeApi {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State {
            rv: 100,
            allow_loopback,
            ..Default::default()
        }));
        let (changed, _) = broadcast::channel(1024);
        let (kill, _) = watch::channel(0u64);
        let (release, _) = watch::channel(0u64);
        let ctx = Ctx {
            state: state.clone(),
            changed: changed.clone(),
            kill: kill.subscribe(),
            release: release.subscribe(),
        };
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let ctx = ctx.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| {
                        let ctx = ctx.clone();
                        async move { Ok::<_, Infallible>(handle(ctx, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        FakeApi {
            port,
            state,
            changed,
            kill,
            release,
            task,
        }
    }

    /// Creates or replaces an object (ADDED or MODIFIED), stamping resourceVersion and uid.
    /// Panics with the real API server's 422 message on an EndpointSlice address it refuses.
    pub fn apply(&self, mut obj: Value) {
        let kind = Kind::from_value(&obj);
        let mut st = self.state.lock().unwrap();
        if kind == Kind::EndpointSlice
            && !st.allow_loopback
            && let Some(why) = invalid_endpoint_address(&obj)
        {
            drop(st);
            panic!("422 Invalid: {why}");
        }
        st.rv += 1;
        let rv = st.rv;
        if obj["metadata"]["namespace"].is_null() {
            obj["metadata"]["namespace"] = json!("default");
        }
        let ns = obj["metadata"]["namespace"].as_str().unwrap().to_string();
        let name = obj["metadata"]["name"].as_str().unwrap().to_string();
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        obj["metadata"]["uid"] = json!(format!("uid-{}-{ns}-{name}", kind.name()));
        let key = (kind, ns, name);
        let ty = if st.objects.contains_key(&key) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        st.objects.insert(key, obj.clone());
        st.log.push((rv, ty, kind, obj));
        drop(st);
        let _ = self.changed.send(());
    }

    pub fn delete(&self, kind: Kind, ns: &str, name: &str) {
        let mut st = self.state.lock().unwrap();
        let Some(mut obj) = st.objects.remove(&(kind, ns.to_string(), name.to_string())) else {
            return;
        };
        st.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(st.rv.to_string());
        let rv = st.rv;
        st.log.push((rv, "DELETED", kind, obj));
        drop(st);
        let _ = self.changed.send(());
    }

    /// Closes every open watch. With `compact`, the history so far is forgotten, so a client
    /// that resumes from its last resourceVersion gets 410 Gone and has to re-list.
    pub fn break_watches(&self, compact: bool) {
        {
            let mut st = self.state.lock().unwrap();
            if compact {
                // As etcd's compaction, a new revision: every version a client saw is now
                // too old to resume from, and a list from here on gives one that is not.
                st.rv += 1;
                st.compacted_below = st.rv;
            }
            st.epoch += 1;
        }
        self.kill.send_modify(|n| *n += 1);
    }

    /// Answers every list and watch with `status` (`None`: serve again). With a status, open
    /// watches are closed too, as when the API server goes away.
    pub fn fail_requests(&self, status: Option<u16>) {
        self.state.lock().unwrap().failing = status;
        if status.is_some() {
            self.break_watches(false);
        }
    }

    /// List and watch requests for `kind` so far, failed ones included.
    pub fn attempts(&self, kind: Kind) -> u32 {
        self.state
            .lock()
            .unwrap()
            .attempts
            .get(&kind)
            .copied()
            .unwrap_or(0)
    }

    /// Makes list requests for `kind` wait until `release_lists`.
    pub fn hold_lists(&self, kind: Kind) {
        self.state.lock().unwrap().hold_lists = Some(kind);
    }

    pub fn release_lists(&self) {
        self.state.lock().unwrap().hold_lists = None;
        self.release.send_modify(|n| *n += 1);
    }

    pub fn lists(&self, kind: Kind) -> u32 {
        self.state
            .lock()
            .unwrap()
            .lists
            .get(&kind)
            .copied()
            .unwrap_or(0)
    }

    /// Event objects clients created or patched.
    pub fn events(&self) -> Vec<Value> {
        self.state.lock().unwrap().events.clone()
    }

    /// A kubeconfig that points at this server over plain HTTP.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\n\
             clusters:\n- name: fake\n  cluster:\n    server: http://127.0.0.1:{}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\n\
             users:\n- name: fake\n  user:\n    token: fake-token\n",
            self.port
        );
        std::fs::write(&path, text).unwrap();
        path
    }
}

#[derive(Clone)]
struct Ctx {
    state: Arc<Mutex<State>>,
    changed: broadcast::Sender<()>,
    kill: watch::Receiver<u64>,
    release: watch::Receiver<u64>,
}

fn full(status: StatusCode, body: Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())).boxed())
        .unwrap()
}

/// `(kind, namespace)` for a collection path, or `None`.
fn route(path: &str) -> Option<(Kind, Option<String>)> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match parts.as_slice() {
        ["api", "v1", "services"] => Some((Kind::Service, None)),
        ["api", "v1", "namespaces", ns, "services"] => Some((Kind::Service, Some(ns.to_string()))),
        ["apis", "discovery.k8s.io", "v1", "endpointslices"] => Some((Kind::EndpointSlice, None)),
        [
            "apis",
            "discovery.k8s.io",
            "v1",
            "namespaces",
            ns,
            "endpointslices",
        ] => Some((Kind::EndpointSlice, Some(ns.to_string()))),
        _ => None,
    }
}

fn query(req: &Request<Incoming>) -> BTreeMap<String, String> {
    req.uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn handle(ctx: Ctx, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    if path.starts_with("/apis/events.k8s.io/v1/namespaces/") && path.contains("/events") {
        let method = req.method().clone();
        let body = req
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let mut v: Value =
            serde_json::from_slice(&body).unwrap_or(json!({"raw": String::from_utf8_lossy(&body)}));
        v["_method"] = json!(method.as_str());
        ctx.state.lock().unwrap().events.push(v.clone());
        let status = if method == Method::POST {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        return full(status, v);
    }
    let Some((kind, ns)) = route(&path) else {
        return full(
            StatusCode::NOT_FOUND,
            json!({"kind": "Status", "code": 404, "message": path}),
        );
    };
    let q = query(&req);
    let failing = {
        let mut st = ctx.state.lock().unwrap();
        *st.attempts.entry(kind).or_default() += 1;
        st.failing
    };
    if let Some(code) = failing {
        let status = StatusCode::from_u16(code).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
        let reason = if code == 403 {
            "Forbidden"
        } else {
            "ServiceUnavailable"
        };
        return full(
            status,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": format!("fake outage ({code})"), "reason": reason, "code": code}),
        );
    }
    if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
        return watch_stream(ctx, kind, ns, &q);
    }
    // A held list waits for release (bounded so a forgotten release cannot hang a test).
    let mut release = ctx.release.clone();
    let held = ctx.state.lock().unwrap().hold_lists == Some(kind);
    if held {
        let _ = tokio::time::timeout(Duration::from_secs(30), release.changed()).await;
    }
    let mut st = ctx.state.lock().unwrap();
    *st.lists.entry(kind).or_default() += 1;
    let items: Vec<Value> = st
        .objects
        .iter()
        .filter(|((k, n, _), _)| *k == kind && ns.as_ref().is_none_or(|ns| ns == n))
        .map(|(_, v)| v.clone())
        .collect();
    full(
        StatusCode::OK,
        json!({
            "apiVersion": kind.api_version(),
            "kind": format!("{}List", kind.name()),
            "metadata": {"resourceVersion": st.rv.to_string()},
            "items": items,
        }),
    )
}

fn watch_stream(
    ctx: Ctx,
    kind: Kind,
    ns: Option<String>,
    q: &BTreeMap<String, String>,
) -> Response<Body> {
    let from: u64 = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(290), Duration::from_secs);
    let bookmarks = q.get("allowWatchBookmarks").is_some_and(|v| v == "true");
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let mut changed = ctx.changed.subscribe();
    let mut kill = ctx.kill.clone();
    kill.mark_unchanged();
    let state = ctx.state.clone();
    tokio::spawn(async move {
        let line = |v: Value| Bytes::from(format!("{v}\n"));
        let (compacted_below, epoch) = {
            let st = state.lock().unwrap();
            (st.compacted_below, st.epoch)
        };
        if from < compacted_below {
            let gone = json!({"type": "ERROR", "object": {
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "too old resource version", "reason": "Expired", "code": 410}});
            let _ = tx.send(line(gone)).await;
            return;
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let mut sent = from;
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            // A broken watch sends nothing more, even events that were already queued.
            if kill.has_changed().unwrap_or(true) {
                return;
            }
            let pending: Vec<(u64, Value)> = {
                let st = state.lock().unwrap();
                if st.epoch != epoch {
                    return;
                }
                st.log
                    .iter()
                    .filter(|(rv, _, k, obj)| {
                        *rv > sent
                            && *k == kind
                            && ns
                                .as_ref()
                                .is_none_or(|ns| obj["metadata"]["namespace"] == *ns)
                    })
                    .map(|(rv, ty, _, obj)| (*rv, json!({"type": ty, "object": obj})))
                    .collect()
            };
            if let Some((rv, _)) = pending.last() {
                sent = *rv;
            }
            let pending = pending.into_iter().map(|(_, ev)| ev);
            for ev in pending {
                if tx.send(line(ev)).await.is_err() {
                    return;
                }
            }
            tokio::select! {
                biased;
                _ = kill.changed() => return,
                _ = changed.recv() => {}
                _ = tokio::time::sleep_until(deadline) => return,
                _ = tick.tick() => {
                    if bookmarks {
                        // A bookmark promises every event up to its version was sent: only
                        // what this stream has delivered qualifies.
                        if state.lock().unwrap().epoch != epoch {
                            return;
                        }
                        let rv = sent;
                        let bm = json!({"type": "BOOKMARK", "object": {
                            "kind": kind.name(), "apiVersion": kind.api_version(),
                            "metadata": {"resourceVersion": rv.to_string()}}});
                        if tx.send(line(bm)).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .unwrap()
}

/// What a real API server says of the first address of `slice` it refuses (apiserver's
/// `ValidateEndpointIP`), if any.
pub fn invalid_endpoint_address(slice: &Value) -> Option<String> {
    let name = slice["metadata"]["name"].as_str().unwrap_or("");
    let endpoints = slice["endpoints"].as_array()?;
    for (i, ep) in endpoints.iter().enumerate() {
        for (j, a) in ep["addresses"].as_array()?.iter().enumerate() {
            let Some(Ok(ip)) = a.as_str().map(str::parse::<std::net::IpAddr>) else {
                continue;
            };
            let why = if ip.is_unspecified() {
                "may not be unspecified (0.0.0.0)"
            } else if ip.is_loopback() {
                "may not be in the loopback range (127.0.0.0/8, ::1/128)"
            } else if match ip {
                std::net::IpAddr::V4(v4) => v4.is_link_local(),
                std::net::IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
            } {
                "may not be in the link-local range (169.254.0.0/16, fe80::/10)"
            } else {
                continue;
            };
            return Some(format!(
                "EndpointSlice.discovery.k8s.io \"{name}\" is invalid: \
                 endpoints[{i}].addresses[{j}]: Invalid value: \"{ip}\": {why}"
            ));
        }
    }
    None
}

/// A Service with one named port `http` (port 80) and optional annotations.
pub fn service(name: &str, annotations: &[(&str, &str)]) -> Value {
    let ann: BTreeMap<&str, &str> = annotations.iter().copied().collect();
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "default", "annotations": ann},
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}], "clusterIP": "10.96.0.1"},
    })
}

/// An EndpointSlice of `svc` named `name` with the given endpoints on 127.0.0.1: (port,
/// ready, serving, terminating). Every endpoint is its own port, so each slice has one
/// endpoint per port; pass one endpoint per slice. Only a fake started with
/// `start_reaching_local_backends` takes it.
pub fn slice(
    svc: &str,
    name: &str,
    port: u16,
    ready: bool,
    serving: bool,
    terminating: bool,
) -> Value {
    slice_at(svc, name, "127.0.0.1", port, ready, serving, terminating)
}

/// `slice` with the endpoint at `address`.
pub fn slice_at(
    svc: &str,
    name: &str,
    address: &str,
    port: u16,
    ready: bool,
    serving: bool,
    terminating: bool,
) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "default", "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address],
                       "conditions": {"ready": ready, "serving": serving, "terminating": terminating}}],
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
    })
}

/// A switchyard process watching a fake API through a kubeconfig, on free 127.0.0.1 ports with
/// the stats page off; killed on drop. Test files add the helpers they need with `impl`.
pub struct Watching {
    pub child: Child,
    pub http_port: u16,
    pub admin_port: u16,
    pub dir: tempfile::TempDir,
}

impl Drop for Watching {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl FakeApi {
    /// Starts switchyard against this server with `extra` flags and `RUST_LOG=rust_log`.
    pub fn spawn_switchyard(&self, extra: &[&str], rust_log: &str) -> Watching {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = self.kubeconfig(dir.path());
        let http_port = crate::common::free_port();
        let mut admin_port = crate::common::free_port();
        while admin_port == http_port {
            admin_port = crate::common::free_port();
        }
        let child = Command::new(crate::common::bin())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--bind-address", "127.0.0.1"])
            .args(["--http-port", &http_port.to_string()])
            .args(["--admin-port", &admin_port.to_string()])
            .args(["--stats-port", "0"])
            .args(extra)
            .env("RUST_LOG", rust_log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.path().join("stderr")).unwrap(),
            ))
            .spawn()
            .unwrap();
        Watching {
            child,
            http_port,
            admin_port,
            dir,
        }
    }
}

impl Watching {
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }
}

//! An in-process fake Kubernetes API server, over real HTTP on 127.0.0.1, for Services,
//! EndpointSlices, Ingresses, IngressClasses, Secrets, ConfigMaps, Leases, Events, Namespaces
//! and the Gateway API's GatewayClasses, Gateways, ListenerSets, HTTPRoutes, GRPCRoutes,
//! TCPRoutes, TLSRoutes, UDPRoutes, BackendTLSPolicies (`gateway.networking.k8s.io/v1`;
//! ListenerSet, GRPCRoute, TCPRoute, TLSRoute, UDPRoute and BackendTLSPolicy at `v1` alone, as
//! their standard CRDs) and ReferenceGrants
//! (`v1beta1`, also served as `v1`, as the v1.6 CRDs do): list with
//! `resourceVersion` (and `fieldSelector` / `labelSelector` equality terms), watch streams of
//! ADDED/MODIFIED/DELETED with bookmarks, and a 410 Gone (as a watch `ERROR` event, the way the
//! API server sends it) for a watch that starts before the compacted history, which forces the
//! client to re-list. Tests drive it (`apply`, `delete`, `break_watches`) and read back what
//! clients did (`lists`, `events`, `writes`, `status_writes`, `object`).
//!
//! Clients write objects as they would to a real server: `POST` a collection (409
//! `AlreadyExists` when the name is taken), `GET`/`PUT`/`PATCH`/`DELETE` an object (404
//! `NotFound` when absent), and `GET`/`PUT`/`PATCH` an Ingress's `/status` subresource, which
//! changes only the status (as the main resource changes everything but it). A `PUT` or a merge
//! patch naming a `metadata.resourceVersion` other than the current one gets 409 `Conflict` with
//! the real `Status` body: that is what makes a Lease a lock. Merge patches
//! (`application/merge-patch+json`; strategic merge is applied the same way, which is exact for
//! the fields used here) are supported; JSON patch and server-side apply answer 415.
//!
//! Like a real API server it refuses EndpointSlices with loopback, unspecified or link-local
//! addresses (a 422 `Invalid`, here a panic in `apply` with the real message), so a test that
//! needs no connection uses documentation addresses (`192.0.2.0/24`). switchyard can only reach
//! this machine's test backends on 127.0.0.1, so the tests that proxy to them start the fake with
//! `start_reaching_local_backends`: the one place it accepts what a cluster never would.
//!
//! The Gateway API kinds behave as CRDs with a status subresource do: the `default`s of the
//! v1.6.1 CRD schemas (`tests/data/gateway-api/crd/`) are applied to what is stored (a route's
//! parentRef gets its group and kind, a rule without matches `PathPrefix /`),
//! `metadata.generation` starts at 1 and grows when anything but metadata and status changes, and
//! `set_gateway_api_installed(false)` answers every `/apis/gateway.networking.k8s.io/...`
//! request 404 NotFound (and deletes the objects, ending open watches), as a cluster without
//! the CRDs, or whose CRDs were just deleted, does; `set_kind_installed(kind, false)` does the
//! same for one kind, as a cluster with older CRDs (before v1.5, no TCPRoute, TLSRoute or
//! UDPRoute at `v1`; before v1.6, no ListenerSet) does.
//!
//! A Service's `clusterIP` must be in the fake's service range, 10.96.0.0/16 (as `start.sh`
//! configures the real one; it refused the 10.0.0.10 the shared builder used).
//! `events.k8s.io/v1` Events are checked as the real server (v1.32, `../shared/kube`) checks
//! them: a create needs a name (taken once: 409), `eventTime`, `reportingController`,
//! `reportingInstance`, `action` and `reason`, and a note of at most 1 kB (422 otherwise); a
//! patch of one is answered with the merged Event, 404 when there is none of that name.
//! Every request's User-Agent is kept (`user_agents`): the real server logs it for audits.
//! A Gateway API status whose `conditions` list names one `type` twice is a 422, as the CRDs'
//! list-map keys make it on the real server. Every Gateway API kind's status is checked against
//! its CRD's schema as the real server checks it (required fields, `maxItems` — at most 16
//! addresses of a Gateway, 16 ancestors of a policy, 32 parents of a route, 1 to 8 conditions
//! each; at most 64 listeners —, lengths, enums, patterns, date-times), and a Gateway's
//! addresses against its rules beyond the structure (an `IPAddress` is an IP, a `Hostname` a
//! lowercase DNS name): a 422 with the server's wording. An Ingress's status host names must be
//! lowercase RFC 1123 subdomains, as the core API's validation has them; a ListenerSet's
//! `status.listeners` is a list map keyed by `name`, so one that names a listener twice is a 422
//! too.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
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

/// The kinds served, with their URL pieces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Service,
    EndpointSlice,
    Ingress,
    IngressClass,
    Secret,
    ConfigMap,
    Lease,
    Namespace,
    GatewayClass,
    Gateway,
    ListenerSet,
    HTTPRoute,
    GRPCRoute,
    TCPRoute,
    TLSRoute,
    UDPRoute,
    BackendTLSPolicy,
    ReferenceGrant,
}

/// The Gateway API's group.
pub const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";

impl Kind {
    const ALL: [Kind; 18] = [
        Kind::Service,
        Kind::EndpointSlice,
        Kind::Ingress,
        Kind::IngressClass,
        Kind::Secret,
        Kind::ConfigMap,
        Kind::Lease,
        Kind::Namespace,
        Kind::GatewayClass,
        Kind::Gateway,
        Kind::ListenerSet,
        Kind::HTTPRoute,
        Kind::GRPCRoute,
        Kind::TCPRoute,
        Kind::TLSRoute,
        Kind::UDPRoute,
        Kind::BackendTLSPolicy,
        Kind::ReferenceGrant,
    ];
    fn group(self) -> &'static str {
        match self {
            Kind::Service | Kind::Secret | Kind::ConfigMap | Kind::Namespace => "",
            Kind::EndpointSlice => "discovery.k8s.io",
            Kind::Ingress | Kind::IngressClass => "networking.k8s.io",
            Kind::Lease => "coordination.k8s.io",
            Kind::GatewayClass
            | Kind::Gateway
            | Kind::ListenerSet
            | Kind::HTTPRoute
            | Kind::GRPCRoute
            | Kind::TCPRoute
            | Kind::TLSRoute
            | Kind::UDPRoute
            | Kind::BackendTLSPolicy
            | Kind::ReferenceGrant => GATEWAY_GROUP,
        }
    }
    /// The storage version, which objects are kept at.
    fn api_version(self) -> &'static str {
        match self {
            Kind::Service | Kind::Secret | Kind::ConfigMap | Kind::Namespace => "v1",
            Kind::EndpointSlice => "discovery.k8s.io/v1",
            Kind::Ingress | Kind::IngressClass => "networking.k8s.io/v1",
            Kind::Lease => "coordination.k8s.io/v1",
            Kind::GatewayClass
            | Kind::Gateway
            | Kind::ListenerSet
            | Kind::HTTPRoute
            | Kind::GRPCRoute
            | Kind::TCPRoute
            | Kind::TLSRoute
            | Kind::UDPRoute
            | Kind::BackendTLSPolicy => "gateway.networking.k8s.io/v1",
            Kind::ReferenceGrant => "gateway.networking.k8s.io/v1beta1",
        }
    }
    /// Versions served besides `v1` (the v1.6 standard CRDs serve each Gateway API kind at
    /// both, but ListenerSet, GRPCRoute, TCPRoute, TLSRoute, UDPRoute and BackendTLSPolicy at
    /// `v1` alone (ListenerSet's CRD declares no other version):
    /// their older versions (UDPRoute's `v1alpha2`, BackendTLSPolicy's `v1alpha3`) are declared
    /// `served: false`, which a real server answers 404).
    fn serves(self, version: &str) -> bool {
        version == "v1"
            || (self.is_gateway_api()
                && !matches!(
                    self,
                    Kind::ListenerSet
                        | Kind::GRPCRoute
                        | Kind::TCPRoute
                        | Kind::TLSRoute
                        | Kind::UDPRoute
                        | Kind::BackendTLSPolicy
                )
                && version == "v1beta1")
    }
    pub fn is_gateway_api(self) -> bool {
        self.group() == GATEWAY_GROUP
    }
    fn name(self) -> &'static str {
        match self {
            Kind::Service => "Service",
            Kind::EndpointSlice => "EndpointSlice",
            Kind::Ingress => "Ingress",
            Kind::IngressClass => "IngressClass",
            Kind::Secret => "Secret",
            Kind::ConfigMap => "ConfigMap",
            Kind::Lease => "Lease",
            Kind::Namespace => "Namespace",
            Kind::GatewayClass => "GatewayClass",
            Kind::Gateway => "Gateway",
            Kind::ListenerSet => "ListenerSet",
            Kind::HTTPRoute => "HTTPRoute",
            Kind::GRPCRoute => "GRPCRoute",
            Kind::TCPRoute => "TCPRoute",
            Kind::TLSRoute => "TLSRoute",
            Kind::UDPRoute => "UDPRoute",
            Kind::BackendTLSPolicy => "BackendTLSPolicy",
            Kind::ReferenceGrant => "ReferenceGrant",
        }
    }
    fn plural(self) -> &'static str {
        match self {
            Kind::Service => "services",
            Kind::EndpointSlice => "endpointslices",
            Kind::Ingress => "ingresses",
            Kind::IngressClass => "ingressclasses",
            Kind::Secret => "secrets",
            Kind::ConfigMap => "configmaps",
            Kind::Lease => "leases",
            Kind::Namespace => "namespaces",
            Kind::GatewayClass => "gatewayclasses",
            Kind::Gateway => "gateways",
            Kind::ListenerSet => "listenersets",
            Kind::HTTPRoute => "httproutes",
            Kind::GRPCRoute => "grpcroutes",
            Kind::TCPRoute => "tcproutes",
            Kind::TLSRoute => "tlsroutes",
            Kind::UDPRoute => "udproutes",
            Kind::BackendTLSPolicy => "backendtlspolicies",
            Kind::ReferenceGrant => "referencegrants",
        }
    }
    /// `leases.coordination.k8s.io`, as the API server names a resource in messages.
    fn qualified(self) -> String {
        match self.group() {
            "" => self.plural().to_string(),
            g => format!("{}.{g}", self.plural()),
        }
    }
    fn cluster_scoped(self) -> bool {
        matches!(
            self,
            Kind::IngressClass | Kind::Namespace | Kind::GatewayClass
        )
    }
    /// Has a `/status` subresource (writes to the main resource keep the status).
    fn has_status(self) -> bool {
        matches!(
            self,
            Kind::Service
                | Kind::Ingress
                | Kind::GatewayClass
                | Kind::Gateway
                | Kind::ListenerSet
                | Kind::HTTPRoute
                | Kind::GRPCRoute
                | Kind::TCPRoute
                | Kind::TLSRoute
                | Kind::UDPRoute
                | Kind::BackendTLSPolicy
        )
    }
    fn from_value(v: &Value) -> Kind {
        let kind = v["kind"].as_str();
        Kind::ALL
            .into_iter()
            .find(|k| Some(k.name()) == kind)
            .unwrap_or_else(|| panic!("fake API does not serve {kind:?}"))
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
    /// Every User-Agent a request came with ("" for none): a real server logs it per request.
    user_agents: BTreeSet<String>,
    /// Every field manager a write named ("" for none).
    field_managers: BTreeSet<String>,
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
    /// Successful client writes (create, update, patch, delete) per kind, status included.
    writes: BTreeMap<Kind, u32>,
    /// Successful writes of the `/status` subresource, per (kind, namespace, name).
    status_writes: BTreeMap<(Kind, String, String), u32>,
    /// Write requests to `/status` per kind, answered or not, no-ops included (each costs the
    /// API server as much as a change).
    status_requests: BTreeMap<Kind, u32>,
    /// The Gateway API CRDs are not installed: their paths answer 404.
    gateway_api_absent: bool,
    /// Gateway API kinds whose CRD alone is not installed (older CRDs): their paths answer 404.
    kinds_absent: BTreeSet<Kind>,
    /// Requests answered 404 because the Gateway API is not installed, per kind.
    absent_answers: BTreeMap<Kind, u32>,
    /// Kinds the client's RBAC does not grant: every request for them is answered 403.
    forbidden: std::collections::BTreeSet<Kind>,
}

impl State {
    /// Stores `obj` under a new resourceVersion and logs the change; returns what was stored.
    fn store(&mut self, kind: Kind, mut obj: Value) -> Value {
        self.rv += 1;
        let rv = self.rv;
        if kind.cluster_scoped() {
            if let Some(m) = obj["metadata"].as_object_mut() {
                m.remove("namespace");
            }
        } else if obj["metadata"]["namespace"].is_null() {
            obj["metadata"]["namespace"] = json!("default");
        }
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let name = obj["metadata"]["name"].as_str().unwrap().to_string();
        obj["apiVersion"] = json!(kind.api_version());
        obj["kind"] = json!(kind.name());
        if kind == Kind::Namespace {
            // The API server labels every Namespace with its name (since Kubernetes 1.22).
            obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
        }
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        obj["metadata"]["uid"] = json!(format!("uid-{}-{ns}-{name}", kind.name()));
        let key = (kind, ns, name);
        let old = self.objects.get(&key);
        if kind.is_gateway_api() {
            apply_defaults(&mut obj, crd_schema(kind));
            // As for a CRD with a status subresource: generation counts changes of anything but
            // metadata and status.
            let spec_of = |v: &Value| {
                let mut v = v.clone();
                if let Some(m) = v.as_object_mut() {
                    m.remove("metadata");
                    m.remove("status");
                }
                v
            };
            let generation = match old {
                None => 1,
                Some(old) => {
                    let g = old["metadata"]["generation"].as_i64().unwrap_or(1);
                    if spec_of(old) == spec_of(&obj) {
                        g
                    } else {
                        g + 1
                    }
                }
            };
            obj["metadata"]["generation"] = json!(generation);
        }
        let ty = if old.is_some() { "MODIFIED" } else { "ADDED" };
        self.objects.insert(key, obj.clone());
        self.log.push((rv, ty, kind, obj.clone()));
        obj
    }

    fn remove(&mut self, kind: Kind, ns: &str, name: &str) -> Option<Value> {
        let mut obj = self
            .objects
            .remove(&(kind, ns.to_string(), name.to_string()))?;
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        let rv = self.rv;
        self.log.push((rv, "DELETED", kind, obj.clone()));
        Some(obj)
    }
}

/// The `openAPIV3Schema` of a Gateway API kind's storage version, from the copied CRDs.
fn crd_schema(kind: Kind) -> &'static Value {
    static SCHEMAS: std::sync::OnceLock<BTreeMap<&'static str, Value>> = std::sync::OnceLock::new();
    let schemas = SCHEMAS.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gateway-api/crd");
        [
            "gatewayclasses",
            "gateways",
            "listenersets",
            "httproutes",
            "grpcroutes",
            "tcproutes",
            "tlsroutes",
            "udproutes",
            "backendtlspolicies",
            "referencegrants",
        ]
        .into_iter()
        .map(|plural| {
            let file = dir.join(format!("gateway.networking.k8s.io_{plural}.yaml"));
            let crd: Value =
                serde_yaml_ng::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
            let storage = crd["spec"]["versions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["storage"] == json!(true))
                .unwrap()["schema"]["openAPIV3Schema"]
                .clone();
            (plural, storage)
        })
        .collect()
    });
    &schemas[kind.plural()]
}

/// Structural defaulting as the API server does it for a CRD: an absent property with a
/// `default` gets it, and defaults inside present (or just defaulted) objects and list items
/// apply in turn.
fn apply_defaults(value: &mut Value, schema: &Value) {
    match value {
        Value::Object(map) => {
            let Some(props) = schema["properties"].as_object() else {
                if let Some(extra) = schema.get("additionalProperties") {
                    for v in map.values_mut() {
                        apply_defaults(v, extra);
                    }
                }
                return;
            };
            for (name, sub) in props {
                if let Some(default) = sub.get("default").filter(|_| !map.contains_key(name)) {
                    map.insert(name.clone(), default.clone());
                }
                if let Some(v) = map.get_mut(name) {
                    apply_defaults(v, sub);
                }
            }
        }
        Value::Array(items) => {
            for v in items {
                apply_defaults(v, &schema["items"]);
            }
        }
        _ => {}
    }
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

    /// Creates or replaces an object (ADDED or MODIFIED), stamping resourceVersion and uid,
    /// status included (as a controller with every permission would). Panics with the real API
    /// server's 422 message on an EndpointSlice address it refuses.
    pub fn apply(&self, obj: Value) {
        self.apply_all(vec![obj]);
    }

    /// `apply` for many objects under one lock and one wake-up (thousands of Ingresses).
    pub fn apply_all(&self, objs: Vec<Value>) {
        let mut st = self.state.lock().unwrap();
        for mut obj in objs {
            let kind = Kind::from_value(&obj);
            if kind.is_gateway_api() && (st.gateway_api_absent || st.kinds_absent.contains(&kind)) {
                // What `kubectl apply` says of a kind whose CRD is not installed.
                drop(st);
                panic!(
                    "no matches for kind {:?} in version {:?}: ensure CRDs are installed first",
                    kind.name(),
                    kind.api_version()
                );
            }
            let version = obj["apiVersion"].as_str().unwrap_or_default();
            let version = version.rsplit('/').next().unwrap_or_default();
            if kind.is_gateway_api() && !kind.serves(version) {
                // A version the CRD declares `served: false` (TCPRoute's and UDPRoute's
                // v1alpha2) or not at all.
                drop(st);
                panic!(
                    "no matches for kind {:?} in version \"{GATEWAY_GROUP}/{version}\"",
                    kind.name()
                );
            }
            if kind.is_gateway_api() && obj.get("status").is_none() {
                // `kubectl apply` of a manifest never touches the status controllers wrote.
                let key = (
                    kind,
                    if kind.cluster_scoped() {
                        String::new()
                    } else {
                        obj["metadata"]["namespace"]
                            .as_str()
                            .unwrap_or("default")
                            .to_string()
                    },
                    obj["metadata"]["name"].as_str().unwrap_or("").to_string(),
                );
                if let Some(status) = st.objects.get(&key).and_then(|o| o.get("status")) {
                    obj["status"] = status.clone();
                }
            }
            if kind == Kind::Secret
                && let Some(Value::Object(strings)) =
                    obj.as_object_mut().and_then(|o| o.remove("stringData"))
            {
                // As the API server does: `stringData` is merged into `data`, base64-encoded,
                // and never stored.
                for (k, v) in strings {
                    let bytes = v.as_str().unwrap_or_default().as_bytes().to_vec();
                    obj["data"][k] = serde_json::to_value(k8s_openapi::ByteString(bytes)).unwrap();
                }
            }
            if kind == Kind::EndpointSlice
                && !st.allow_loopback
                && let Some(why) = invalid_endpoint_address(&obj)
            {
                drop(st);
                panic!("422 Invalid: {why}");
            }
            if kind == Kind::Service
                && let Some(why) = invalid_cluster_ip(&obj)
            {
                drop(st);
                panic!("422 Invalid: {why}");
            }
            st.store(kind, obj);
        }
        drop(st);
        let _ = self.changed.send(());
    }

    pub fn delete(&self, kind: Kind, ns: &str, name: &str) {
        let removed = self.state.lock().unwrap().remove(kind, ns, name);
        if removed.is_some() {
            let _ = self.changed.send(());
        }
    }

    /// The stored object (`ns` is ignored for cluster-scoped kinds).
    pub fn object(&self, kind: Kind, ns: &str, name: &str) -> Option<Value> {
        let ns = if kind.cluster_scoped() { "" } else { ns };
        self.state
            .lock()
            .unwrap()
            .objects
            .get(&(kind, ns.to_string(), name.to_string()))
            .cloned()
    }

    /// Every stored object of `kind`.
    pub fn objects(&self, kind: Kind) -> Vec<Value> {
        let st = self.state.lock().unwrap();
        st.objects
            .iter()
            .filter(|((k, _, _), _)| *k == kind)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Successful client writes of `kind` (create, update, patch, delete; status included).
    pub fn writes(&self, kind: Kind) -> u32 {
        let st = self.state.lock().unwrap();
        st.writes.get(&kind).copied().unwrap_or(0)
    }

    /// Successful `/status` writes of `kind`, in all, and of the busiest object.
    pub fn status_writes(&self, kind: Kind) -> (u32, u32) {
        let st = self.state.lock().unwrap();
        let per: Vec<u32> = st
            .status_writes
            .iter()
            .filter(|((k, _, _), _)| *k == kind)
            .map(|(_, n)| *n)
            .collect();
        (per.iter().sum(), per.iter().copied().max().unwrap_or(0))
    }

    /// Write requests to the `/status` of `kind`, whatever their outcome (no-ops included).
    pub fn status_requests(&self, kind: Kind) -> u32 {
        let st = self.state.lock().unwrap();
        st.status_requests.get(&kind).copied().unwrap_or(0)
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

    /// Installs (`true`) or removes the Gateway API CRDs. Removing them deletes every object of
    /// their kinds (watchers see DELETED, then their watch ends) and answers every request to
    /// `/apis/gateway.networking.k8s.io/...` with 404 until they are installed again.
    pub fn set_gateway_api_installed(&self, installed: bool) {
        {
            let mut st = self.state.lock().unwrap();
            st.gateway_api_absent = !installed;
            if !installed {
                let keys: Vec<(Kind, String, String)> = st
                    .objects
                    .keys()
                    .filter(|(k, _, _)| k.is_gateway_api())
                    .cloned()
                    .collect();
                for (k, ns, name) in keys {
                    st.remove(k, &ns, &name);
                }
            }
        }
        let _ = self.changed.send(());
        if !installed {
            self.break_watches(false);
        }
    }

    /// Installs (`true`) or removes one Gateway API kind's CRD, as `set_gateway_api_installed`
    /// does for all of them: a cluster with CRDs older than v1.5 serves no TCPRoute, TLSRoute or
    /// UDPRoute at `v1` (older than v1.6, no ListenerSet), and answers their paths 404 while the
    /// other kinds are served.
    pub fn set_kind_installed(&self, kind: Kind, installed: bool) {
        assert!(kind.is_gateway_api(), "{kind:?} is not a CRD");
        {
            let mut st = self.state.lock().unwrap();
            if installed {
                st.kinds_absent.remove(&kind);
            } else {
                st.kinds_absent.insert(kind);
                let keys: Vec<(Kind, String, String)> = st
                    .objects
                    .keys()
                    .filter(|(k, _, _)| *k == kind)
                    .cloned()
                    .collect();
                for (k, ns, name) in keys {
                    st.remove(k, &ns, &name);
                }
            }
        }
        let _ = self.changed.send(());
        if !installed {
            self.break_watches(false);
        }
    }

    /// Answers every request for `kind` 403 Forbidden from now on, as an API server does for a
    /// ServiceAccount whose role lacks the resource.
    pub fn forbid(&self, kind: Kind) {
        self.state.lock().unwrap().forbidden.insert(kind);
    }

    /// Requests for `kind` answered 404 because the Gateway API, or that kind's CRD, was not
    /// installed.
    pub fn absent_answers(&self, kind: Kind) -> u32 {
        let st = self.state.lock().unwrap();
        st.absent_answers.get(&kind).copied().unwrap_or(0)
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

    /// Every field manager writes named, "" for a write without one.
    pub fn field_managers(&self) -> Vec<String> {
        self.state
            .lock()
            .unwrap()
            .field_managers
            .iter()
            .cloned()
            .collect()
    }

    /// Every User-Agent requests came with, "" for a request without one.
    pub fn user_agents(&self) -> Vec<String> {
        self.state
            .lock()
            .unwrap()
            .user_agents
            .iter()
            .cloned()
            .collect()
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

/// What a request path names: a collection (no name) or an object, maybe a subresource.
struct Target {
    kind: Kind,
    /// The apiVersion the request names (`gateway.networking.k8s.io/v1beta1`): objects are
    /// answered in it, as the API server converts them.
    api_version: String,
    ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

fn route(path: &str) -> Option<Target> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let (ns, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
        _ => (None, rest),
    };
    let (plural, name, sub) = match rest {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(name.to_string()), None),
        [plural, name, sub] => (*plural, Some(name.to_string()), Some(sub.to_string())),
        _ => return None,
    };
    let kind = Kind::ALL
        .into_iter()
        .find(|k| k.plural() == plural && k.group() == group && k.serves(version))?;
    // A namespaced object is only addressed inside its namespace, a cluster-scoped one never.
    if kind.cluster_scoped() == ns.is_some() && (name.is_some() || kind.cluster_scoped()) {
        return None;
    }
    Some(Target {
        kind,
        api_version: if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        },
        ns,
        name,
        sub,
    })
}

/// `obj` as a request in `api_version` sees it (the schemas of the served versions are equal).
fn in_version(mut obj: Value, api_version: &str) -> Value {
    obj["apiVersion"] = json!(api_version);
    obj
}

fn query(req: &Request<Incoming>) -> BTreeMap<String, String> {
    req.uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), percent_decode(v)))
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(v) => {
                        out.push(v);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The string at a dotted field path (`metadata.name`, `type`), `""` when absent.
fn field<'a>(obj: &'a Value, path: &str) -> &'a str {
    path.split('.')
        .try_fold(obj, |v, k| v.get(k))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Whether `obj` passes the request's `fieldSelector` and `labelSelector` (equality terms:
/// `k=v`, `k==v`, `k!=v`; for labels also `k` and `!k`). `Err`: a term the fake cannot judge,
/// answered 400 as a real server answers a bad selector.
fn selected(obj: &Value, q: &BTreeMap<String, String>) -> Result<bool, String> {
    let terms = |s: Option<&String>| -> Vec<String> {
        s.map(|s| {
            s.split(',')
                .filter(|t| !t.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
    };
    for t in terms(q.get("fieldSelector")) {
        let ok = if let Some((k, v)) = t.split_once("!=") {
            field(obj, k) != v
        } else if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
            field(obj, k) == v
        } else {
            return Err(format!("invalid field selector {t:?}"));
        };
        if !ok {
            return Ok(false);
        }
    }
    let labels = &obj["metadata"]["labels"];
    for t in terms(q.get("labelSelector")) {
        if t.contains('(') || t.contains(' ') {
            return Err(format!(
                "the fake does not judge set-based selectors: {t:?}"
            ));
        }
        let ok = if let Some((k, v)) = t.split_once("!=") {
            labels[k].as_str() != Some(v)
        } else if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
            labels[k].as_str() == Some(v)
        } else if let Some(k) = t.strip_prefix('!') {
            labels.get(k).is_none()
        } else {
            labels.get(t.as_str()).is_some()
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A `Status` failure, as the API server writes one.
fn status(code: u16, reason: &str, message: String) -> Response<Body> {
    full(
        StatusCode::from_u16(code).unwrap(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

fn not_found(kind: Kind, name: &str) -> Response<Body> {
    status(
        404,
        "NotFound",
        format!("{} \"{name}\" not found", kind.qualified()),
    )
}

/// RFC 7386 JSON merge patch.
fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            let t = target.as_object_mut().unwrap();
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// Creates, reads, replaces, patches or deletes one object (or its `/status`).
async fn object_request(ctx: &Ctx, req: Request<Incoming>, t: Target) -> Response<Body> {
    let method = req.method().clone();
    if method != Method::GET {
        // The field manager a write names (`managedFields` on a real server), "" for none.
        let manager = query(&req).get("fieldManager").cloned().unwrap_or_default();
        ctx.state.lock().unwrap().field_managers.insert(manager);
    }
    let content_type = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let parsed = || -> Result<Value, String> {
        serde_json::from_slice(&body).map_err(|e| format!("invalid JSON body: {e}"))
    };
    let kind = t.kind;
    let version = t.api_version.clone();
    let ns = t.ns.clone().unwrap_or_default();
    let status_sub = match t.sub.as_deref() {
        None => false,
        Some("status") if kind.has_status() => true,
        Some(other) => return status(404, "NotFound", format!("no subresource {other:?}")),
    };
    let Some(name) = t.name.clone() else {
        // POST to a collection: create.
        if method != Method::POST {
            return status(405, "MethodNotAllowed", format!("{method} on a collection"));
        }
        let mut obj = match parsed() {
            Ok(v) => v,
            Err(why) => return status(400, "BadRequest", why),
        };
        let Some(name) = obj["metadata"]["name"].as_str().map(str::to_string) else {
            return status(422, "Invalid", "metadata.name: Required value".into());
        };
        if !kind.cluster_scoped() {
            obj["metadata"]["namespace"] = json!(ns);
        }
        let stored = {
            let mut st = ctx.state.lock().unwrap();
            if st.objects.contains_key(&(kind, ns.clone(), name.clone())) {
                return status(
                    409,
                    "AlreadyExists",
                    format!("{} \"{name}\" already exists", kind.qualified()),
                );
            }
            *st.writes.entry(kind).or_default() += 1;
            st.store(kind, obj)
        };
        let _ = ctx.changed.send(());
        return full(StatusCode::CREATED, in_version(stored, &version));
    };
    let key = (kind, ns.clone(), name.clone());
    if method == Method::GET {
        return match ctx.state.lock().unwrap().objects.get(&key) {
            Some(obj) => full(StatusCode::OK, in_version(obj.clone(), &version)),
            None => not_found(kind, &name),
        };
    }
    if method == Method::DELETE && !status_sub {
        let removed = {
            let mut st = ctx.state.lock().unwrap();
            let r = st.remove(kind, &ns, &name);
            if r.is_some() {
                *st.writes.entry(kind).or_default() += 1;
            }
            r
        };
        return match removed {
            Some(obj) => {
                let _ = ctx.changed.send(());
                full(StatusCode::OK, in_version(obj, &version))
            }
            None => not_found(kind, &name),
        };
    }
    let incoming = match parsed() {
        Ok(v) => v,
        Err(why) => return status(400, "BadRequest", why),
    };
    let stored = {
        let mut st = ctx.state.lock().unwrap();
        if status_sub {
            *st.status_requests.entry(kind).or_default() += 1;
        }
        let Some(current) = st.objects.get(&key).cloned() else {
            return not_found(kind, &name);
        };
        // A resourceVersion in the body is a precondition (PUT and merge patch alike).
        let wanted = incoming["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("");
        if !wanted.is_empty() && current["metadata"]["resourceVersion"].as_str() != Some(wanted) {
            return status(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": the object has been \
                     modified; please apply your changes to the latest version and try again",
                    kind.qualified()
                ),
            );
        }
        let candidate = if method == Method::PUT {
            incoming
        } else if method == Method::PATCH {
            let ct = content_type.split(';').next().unwrap_or("").trim();
            if ct != "application/merge-patch+json"
                && ct != "application/strategic-merge-patch+json"
            {
                return status(
                    415,
                    "UnsupportedMediaType",
                    format!("the fake applies merge patches only, not {ct:?}"),
                );
            }
            let mut obj = current.clone();
            merge_patch(&mut obj, &incoming);
            obj
        } else {
            return status(405, "MethodNotAllowed", format!("{method} on an object"));
        };
        if candidate["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n != name)
        {
            return status(400, "BadRequest", "the name in the body differs".into());
        }
        // The status subresource changes the status only; the main resource everything else.
        let next = if status_sub {
            let mut obj = current.clone();
            obj["status"] = candidate["status"].clone();
            obj
        } else if kind.has_status() {
            let mut obj = candidate;
            obj["status"] = current["status"].clone();
            obj
        } else {
            candidate
        };
        let mut next = next;
        next["metadata"]["name"] = json!(name);
        // The Gateway API CRDs declare every `conditions` list a map keyed by `type`
        // (x-kubernetes-list-map-keys): the real server refuses one that names a type twice.
        if kind.is_gateway_api()
            && let Some(why) = duplicate_condition(&next["status"], "status")
        {
            return status(422, "Invalid", format!("{name:?} is invalid: {why}"));
        }
        // A ListenerSet's `status.listeners` is a list map keyed by `name`.
        if kind == Kind::ListenerSet
            && let Some(why) = duplicate_listener(&next["status"])
        {
            return status(422, "Invalid", format!("{name:?} is invalid: {why}"));
        }
        // Every Gateway API kind's status is checked against its CRD's schema, as the real
        // server checks every write of a CRD's object (a Gateway's addresses also against the
        // rules its schema states beside the structure: `oneOf` and CEL).
        if kind.is_gateway_api() && status_sub {
            let mut errors = Vec::new();
            schema_errors(
                &next["status"],
                &crd_schema(kind)["properties"]["status"],
                "status",
                &mut errors,
            );
            if kind == Kind::Gateway {
                errors.extend(gateway_address_errors(&next["status"]));
            }
            if !errors.is_empty() {
                return status(
                    422,
                    "Invalid",
                    format!(
                        "{} {name:?} is invalid: [{}]",
                        kind.qualified(),
                        errors.join(", ")
                    ),
                );
            }
        }
        // An Ingress's status host names are lowercase RFC 1123 subdomains (core validation).
        if kind == Kind::Ingress
            && status_sub
            && let Some(why) = ingress_status_error(&next["status"])
        {
            return status(
                422,
                "Invalid",
                format!("Ingress.networking.k8s.io {name:?} is invalid: {why}"),
            );
        }
        if next == current {
            // A no-op write stores nothing new (as a real server: same resourceVersion).
            return full(StatusCode::OK, in_version(current, &version));
        }
        *st.writes.entry(kind).or_default() += 1;
        if status_sub {
            *st.status_writes.entry(key.clone()).or_default() += 1;
        }
        st.store(kind, next)
    };
    let _ = ctx.changed.send(());
    full(StatusCode::OK, in_version(stored, &version))
}

/// What a CRD's structural schema refuses in `value` (at `path`), in the API server's words:
/// types, `required`, `minItems`/`maxItems`, `minLength`/`maxLength`, `enum`, `pattern`,
/// `minimum` and `format: date-time`. (CEL rules and list-map keys are not judged here.)
fn schema_errors(value: &Value, schema: &Value, path: &str, out: &mut Vec<String>) {
    let ty = schema["type"].as_str().unwrap_or("");
    let actual = match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    if !ty.is_empty() && ty != actual && !(ty == "number" && actual == "integer") {
        out.push(format!(
            "{path}: Invalid value: \"{actual}\": {path} in body must be of type {ty}: \"{actual}\""
        ));
        return;
    }
    match value {
        Value::Object(map) => {
            for r in schema["required"].as_array().into_iter().flatten() {
                let r = r.as_str().unwrap_or_default();
                if !map.contains_key(r) {
                    out.push(format!("{path}.{r}: Required value"));
                }
            }
            if let Some(props) = schema["properties"].as_object() {
                for (k, v) in map {
                    if let Some(sub) = props.get(k) {
                        schema_errors(v, sub, &format!("{path}.{k}"), out);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(max) = schema["maxItems"].as_u64()
                && items.len() as u64 > max
            {
                out.push(format!(
                    "{path}: Too many: {}: must have at most {max} items",
                    items.len()
                ));
            }
            if let Some(min) = schema["minItems"].as_u64()
                && (items.len() as u64) < min
            {
                out.push(format!(
                    "{path}: Invalid value: {}: {path} in body should have at least {min} items",
                    items.len()
                ));
            }
            for (i, v) in items.iter().enumerate() {
                schema_errors(v, &schema["items"], &format!("{path}[{i}]"), out);
            }
        }
        Value::String(v) => {
            if let Some(max) = schema["maxLength"].as_u64()
                && v.chars().count() as u64 > max
            {
                out.push(format!(
                    "{path}: Too long: may not be more than {max} bytes"
                ));
            }
            if let Some(min) = schema["minLength"].as_u64()
                && (v.chars().count() as u64) < min
            {
                out.push(format!(
                    "{path}: Invalid value: {v:?}: {path} in body should be at least {min} chars long"
                ));
            }
            if let Some(allowed) = schema["enum"].as_array()
                && !allowed.contains(value)
            {
                let list: Vec<String> = allowed.iter().map(|a| a.to_string()).collect();
                out.push(format!(
                    "{path}: Unsupported value: {v:?}: supported values: {}",
                    list.join(", ")
                ));
            }
            if let Some(p) = schema["pattern"].as_str()
                && !regex::Regex::new(p).unwrap().is_match(v)
            {
                out.push(format!(
                    "{path}: Invalid value: {v:?}: {path} in body should match '{p}'"
                ));
            }
            if schema["format"] == "date-time" && v.parse::<k8s_openapi::jiff::Timestamp>().is_err()
            {
                out.push(format!(
                    "{path}: Invalid value: {v:?}: {path} in body must be of type date-time: {v:?}"
                ));
            }
        }
        Value::Number(n) => {
            if let (Some(min), Some(v)) = (schema["minimum"].as_i64(), n.as_i64())
                && v < min
            {
                out.push(format!(
                    "{path}: Invalid value: {v}: {path} in body should be greater than or equal to {min}"
                ));
            }
        }
        _ => {}
    }
}

/// A lowercase RFC 1123 subdomain (`[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`,
/// at most 253 characters), as the API server's `IsDNS1123Subdomain`; with `wildcard`, `*.` may
/// lead (the Gateway's Hostname addresses).
fn dns1123_subdomain(name: &str, wildcard: bool) -> bool {
    let name = if wildcard {
        name.strip_prefix("*.").unwrap_or(name)
    } else {
        name
    };
    let label = |l: &str| {
        !l.is_empty()
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    name.len() <= 253 && name.split('.').all(label)
}

/// What the Gateway CRD refuses in `status.addresses` beyond its structure, in the API
/// server's words: an `IPAddress` whose value is no IP (`oneOf` with `format: ipv4/ipv6`), a
/// `Hostname` that is not a lowercase DNS name (its CEL rule).
fn gateway_address_errors(status: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for (i, a) in status["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let value = a["value"].as_str().unwrap_or_default();
        let ty = a["type"].as_str().unwrap_or("IPAddress");
        if ty == "IPAddress" && value.parse::<std::net::IpAddr>().is_err() {
            out.push(format!(
                "status.addresses[{i}]: Invalid value: \"object\": must validate one and only \
                 one schema (oneOf). Found none valid"
            ));
        }
        if ty == "Hostname" && !dns1123_subdomain(value, true) {
            out.push(format!(
                "status.addresses[{i}]: Invalid value: \"object\": Hostname value must only \
                 contain valid characters (matching \
                 ^(\\*\\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$)"
            ));
        }
    }
    out
}

/// What the core API refuses in an Ingress's `status.loadBalancer.ingress`: an `ip` that is no
/// IP, a `hostname` that is an IP or not a lowercase RFC 1123 subdomain.
fn ingress_status_error(status: &Value) -> Option<String> {
    let list = status["loadBalancer"]["ingress"].as_array()?;
    list.iter().enumerate().find_map(|(i, a)| {
        if let Some(ip) = a["ip"].as_str()
            && ip.parse::<std::net::IpAddr>().is_err()
        {
            return Some(format!(
                "status.loadBalancer.ingress[{i}].ip: Invalid value: {ip:?}: must be a valid IP address"
            ));
        }
        let host = a["hostname"].as_str()?;
        if host.parse::<std::net::IpAddr>().is_ok() {
            return Some(format!(
                "status.loadBalancer.ingress[{i}].hostname: Invalid value: {host:?}: must be a DNS name, not an IP address"
            ));
        }
        (!dns1123_subdomain(host, false)).then(|| {
            format!(
                "status.loadBalancer.ingress[{i}].hostname: Invalid value: {host:?}: a lowercase \
                 RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or \
                 '.', and must start and end with an alphanumeric character"
            )
        })
    })
}

/// The first `conditions` list under `value` (at `path`) with two entries of one `type`, as
/// the real server words it (`status.listeners[0].conditions[4]: Duplicate value: ...`).
fn duplicate_condition(value: &Value, path: &str) -> Option<String> {
    match value {
        Value::Object(m) => m.iter().find_map(|(k, v)| {
            let here = format!("{path}.{k}");
            if k == "conditions"
                && let Some(list) = v.as_array()
            {
                let mut seen = BTreeSet::new();
                for (i, c) in list.iter().enumerate() {
                    let t = c["type"].as_str().unwrap_or_default();
                    if !seen.insert(t) {
                        return Some(format!(
                            "{here}[{i}]: Duplicate value: map[string]interface {{}}{{\"type\":{t:?}}}"
                        ));
                    }
                }
            }
            duplicate_condition(v, &here)
        }),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, v)| duplicate_condition(v, &format!("{path}[{i}]"))),
        _ => None,
    }
}

/// A ListenerSet status whose `listeners` name one listener twice, in the API server's words
/// (the CRD keys that list by `name`).
fn duplicate_listener(status: &Value) -> Option<String> {
    let list = status["listeners"].as_array()?;
    let mut seen = BTreeSet::new();
    list.iter().enumerate().find_map(|(i, l)| {
        let n = l["name"].as_str().unwrap_or_default();
        (!seen.insert(n)).then(|| {
            format!(
                "status.listeners[{i}]: Duplicate value: map[string]interface {{}}{{\"name\":{n:?}}}"
            )
        })
    })
}

async fn handle(ctx: Ctx, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let agent = req
        .headers()
        .get(hyper::header::USER_AGENT)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    ctx.state.lock().unwrap().user_agents.insert(agent);
    if path == "/readyz" {
        // While `fail_requests` holds, the server is as one booting or without etcd: not ready.
        return match ctx.state.lock().unwrap().failing {
            Some(_) => Response::builder()
                .status(StatusCode::INTERNAL_SERVER_ERROR)
                .body(
                    Full::new(Bytes::from_static(
                        b"[-]etcd failed: reason withheld\nreadyz check failed\n",
                    ))
                    .boxed(),
                )
                .unwrap(),
            None => Response::builder()
                .status(StatusCode::OK)
                .body(Full::new(Bytes::from_static(b"ok")).boxed())
                .unwrap(),
        };
    }
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
        let mut st = ctx.state.lock().unwrap();
        if method == Method::POST {
            // As a real server: the fields events.k8s.io/v1 requires, a note of at most 1 kB,
            // and a name taken once (409 AlreadyExists).
            let name = v["metadata"]["name"].as_str().unwrap_or("").to_string();
            for field in [
                "eventTime",
                "reportingController",
                "reportingInstance",
                "action",
                "reason",
            ] {
                if v[field].is_null() {
                    return status(
                        422,
                        "Invalid",
                        format!(
                            "Event.events.k8s.io \"{name}\" is invalid: {field}: Required value"
                        ),
                    );
                }
            }
            if v["note"].as_str().is_some_and(|n| n.len() > 1024) {
                return status(
                    422,
                    "Invalid",
                    format!("Event.events.k8s.io \"{name}\" is invalid: note: Too long"),
                );
            }
            if name.is_empty() {
                return status(422, "Invalid", "metadata.name: Required value".into());
            }
            let taken = st
                .events
                .iter()
                .any(|e| e["_method"] == "POST" && e["metadata"]["name"] == name.as_str());
            if taken {
                return status(
                    409,
                    "AlreadyExists",
                    format!("events.events.k8s.io \"{name}\" already exists"),
                );
            }
            v["_method"] = json!("POST");
            st.events.push(v.clone());
            return full(StatusCode::CREATED, v);
        }
        // A patch of an Event: 404 when there is none of that name, else the merged Event (as
        // a real server answers; the patch body alone was answered before).
        let name = path.rsplit('/').next().unwrap_or("").to_string();
        let Some(mut merged) = st
            .events
            .iter()
            .rev()
            .find(|e| e["_method"] == "POST" && e["metadata"]["name"] == name.as_str())
            .cloned()
        else {
            return status(
                404,
                "NotFound",
                format!("events.events.k8s.io \"{name}\" not found"),
            );
        };
        merge_patch(&mut merged, &v);
        v["_name"] = json!(name);
        v["_method"] = json!(method.as_str());
        st.events.push(v);
        return full(StatusCode::OK, merged);
    }
    let absent = {
        let mut st = ctx.state.lock().unwrap();
        let target = route(&path);
        let absent = (st.gateway_api_absent
            && path.starts_with(&format!("/apis/{GATEWAY_GROUP}/")))
            || target
                .as_ref()
                .is_some_and(|t| st.kinds_absent.contains(&t.kind));
        if let Some(t) = target.filter(|_| absent) {
            *st.absent_answers.entry(t.kind).or_default() += 1;
        }
        absent
    };
    if absent {
        // What a real API server answers for a group it does not serve.
        return status(
            404,
            "NotFound",
            "the server could not find the requested resource".into(),
        );
    }
    let Some(target) = route(&path) else {
        return full(
            StatusCode::NOT_FOUND,
            json!({"kind": "Status", "code": 404, "message": path}),
        );
    };
    if ctx.state.lock().unwrap().forbidden.contains(&target.kind) {
        *ctx.state
            .lock()
            .unwrap()
            .attempts
            .entry(target.kind)
            .or_default() += 1;
        return status(
            403,
            "Forbidden",
            format!(
                "{} is forbidden: User \"system:serviceaccount:test:switchyard\" cannot {} \
                 resource \"{}\" in API group \"{}\"",
                target.kind.qualified(),
                req.method().as_str().to_lowercase(),
                target.kind.plural(),
                target.kind.group()
            ),
        );
    }
    let q = query(&req);
    let collection_read = target.name.is_none() && req.method() == Method::GET;
    let failing = {
        let mut st = ctx.state.lock().unwrap();
        if collection_read {
            *st.attempts.entry(target.kind).or_default() += 1;
        }
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
    if !collection_read {
        return object_request(&ctx, req, target).await;
    }
    let (kind, ns, version) = (target.kind, target.ns, target.api_version);
    if let Err(why) = selected(&json!({}), &q) {
        return status(400, "BadRequest", why);
    }
    if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
        return watch_stream(ctx, kind, ns, version, &q);
    }
    // A held list waits for release (bounded so a forgotten release cannot hang a test).
    let mut release = ctx.release.clone();
    let held = ctx.state.lock().unwrap().hold_lists == Some(kind);
    if held {
        let _ = tokio::time::timeout(Duration::from_secs(30), release.changed()).await;
    }
    // Paged as the API server pages (`limit`, then `continue`): a client that asks for pages
    // of 500 (kube's watcher does) never gets one list of everything. The token is the
    // offset of the next page; a list is counted once, at its first page.
    let limit = q
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|&l| l > 0);
    let offset = match q.get("continue").filter(|c| !c.is_empty()) {
        None => 0,
        Some(c) => match c.parse::<usize>() {
            Ok(o) => o,
            Err(_) => return status(400, "BadRequest", format!("invalid continue token {c:?}")),
        },
    };
    let mut st = ctx.state.lock().unwrap();
    if offset == 0 {
        *st.lists.entry(kind).or_default() += 1;
    }
    let matching = st
        .objects
        .iter()
        .filter(|((k, n, _), _)| *k == kind && ns.as_ref().is_none_or(|ns| ns == n))
        .filter(|(_, v)| selected(v, &q).unwrap_or(false));
    let mut items: Vec<Value> = matching
        .skip(offset)
        .take(limit.map_or(usize::MAX, |l| l + 1))
        .map(|(_, v)| in_version(v.clone(), &version))
        .collect();
    let mut metadata = json!({"resourceVersion": st.rv.to_string()});
    if let Some(l) = limit
        && items.len() > l
    {
        items.truncate(l);
        metadata["continue"] = json!((offset + l).to_string());
    }
    full(
        StatusCode::OK,
        json!({
            "apiVersion": version,
            "kind": format!("{}List", kind.name()),
            "metadata": metadata,
            "items": items,
        }),
    )
}

fn watch_stream(
    ctx: Ctx,
    kind: Kind,
    ns: Option<String>,
    version: String,
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
    let q = q.clone();
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
                // The log is in resourceVersion order: skip what was sent without scanning it
                // (tens of thousands of entries, 1,000 changes a second in the storm figures).
                let start = st.log.partition_point(|(rv, ..)| *rv <= sent);
                st.log[start..]
                    .iter()
                    .filter(|(_, _, k, obj)| {
                        *k == kind
                            && ns
                                .as_ref()
                                .is_none_or(|ns| obj["metadata"]["namespace"] == *ns)
                            && selected(obj, &q).unwrap_or(false)
                    })
                    .map(|(rv, ty, _, obj)| {
                        (
                            *rv,
                            json!({"type": ty, "object": in_version(obj.clone(), &version)}),
                        )
                    })
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
                            "kind": kind.name(), "apiVersion": version,
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

/// The service IP range of the fake, as `../shared/kube/start.sh` configures the real server
/// (`--service-cluster-ip-range=10.96.0.0/16`).
pub const SERVICE_CIDR: ([u8; 2], &str) = ([10, 96], "10.96.0.0/16");

/// What a real API server says of a Service whose `clusterIP` is outside its service range
/// (found by the real-API tier: the fake took any address), if it is.
pub fn invalid_cluster_ip(service: &Value) -> Option<String> {
    let name = service["metadata"]["name"].as_str().unwrap_or("");
    let ip = service["spec"]["clusterIP"].as_str()?;
    if ip.is_empty() || ip == "None" {
        return None;
    }
    let inside = match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(v4)) => v4.octets()[..2] == SERVICE_CIDR.0,
        _ => false,
    };
    (!inside).then(|| {
        format!(
            "Service \"{name}\" is invalid: spec.clusterIPs: Invalid value: [\"{ip}\"]: failed \
             to allocate IP {ip}: the provided IP ({ip}) is not in the valid range. The range of \
             valid IPs is {}",
            SERVICE_CIDR.1
        )
    })
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
    /// The TLS port (open in a cluster without --ssl-cert, with a generated certificate).
    pub https_port: u16,
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
        // In a cluster the TLS port opens without --ssl-cert: each instance gets its own,
        // unless the test chose one.
        let chosen = extra
            .iter()
            .position(|a| *a == "--https-port")
            .and_then(|i| extra.get(i + 1))
            .and_then(|p| p.parse().ok());
        let mut https_port = chosen.unwrap_or_else(crate::common::free_port);
        while chosen.is_none() && (https_port == http_port || https_port == admin_port) {
            https_port = crate::common::free_port();
        }
        let own_https = chosen
            .is_none()
            .then(|| ["--https-port".to_string(), https_port.to_string()]);
        let child = Command::new(crate::common::bin())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--bind-address", "127.0.0.1"])
            .args(["--http-port", &http_port.to_string()])
            .args(["--admin-port", &admin_port.to_string()])
            .args(["--stats-port", "0"])
            .args(own_https.iter().flatten())
            .args(extra)
            .env(
                crate::common::EVERY_SERVICE_ROUTED.0,
                crate::common::EVERY_SERVICE_ROUTED.1,
            )
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
            https_port,
            dir,
        }
    }
}

impl Watching {
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }
}

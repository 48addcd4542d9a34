//! The cluster source: watches Services and `discovery.k8s.io/v1` EndpointSlices (and
//! Ingresses, IngressClasses, `kubernetes.io/tls` Secrets, the `Opaque` Secrets and the
//! ConfigMaps that hold an htpasswd `auth` or a `ca.crt` (that key alone is kept), the Gateway API's GatewayClasses, Gateways, HTTPRoutes,
//! GRPCRoutes, TCPRoutes, TLSRoutes and ReferenceGrants, and Namespaces), keeps one store of each,
//! coalesces events, and publishes through the same `Pipeline` as the offline source.
//!
//! It consumes raw watcher events so that deletes and re-lists are never lost: a re-list fills a
//! side buffer that replaces the store whole at `InitDone`, so a half-listed store is never
//! translated. Nothing is published until both stores have completed their first list. A
//! change on an idle pipeline is built at once, changes that come faster than builds are
//! coalesced (`control::coalesce`), and what is already buffered is read before each build;
//! the keys they touched go with the stores to the build as its change set, so a rebuild redoes
//! only the Services they affect (a list, first or re-list, makes the next build a full one). Watch errors back off and retry (a
//! 410 Gone makes the watcher re-list) while the last good table keeps serving. Warnings about
//! Services and Ingresses become Kubernetes Events (`control::events`). The Gateway API is optional: where its CRDs
//! are not installed (a list answers 404) one warning says so, the Gateway stores count as
//! empty so Services and Ingresses keep being served, and each kind's list is tried again every
//! `GATEWAY_API_RETRY`, so CRDs installed later are picked up without a restart. This module must
//! not touch the data plane.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ObjectReference, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch_stream};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::control::coalesce::Coalescer;
use crate::control::events;
use crate::control::pipeline::Pipeline;
use crate::control::retry::{GATEWAY_API_RETRY, HEALTH, backed_off, is_not_found};
use crate::control::translate::gateway::api::{
    BackendTLSPolicy, GRPCRoute, Gateway, GatewayClass, HTTPRoute, ListenerSet, ReferenceGrant,
    TCPRoute, TLSRoute, UDPRoute,
};
use crate::control::translate::{
    Changes, GatewayRefs, IngressRefs, ObjectRef, Warning, WarningReason,
};
use crate::ops::metrics::Metrics;
use crate::table::upstream::CA_KEY;

/// Annotation that `kubectl apply` stores: large and useless to routing, so dropped.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

pub use crate::control::coalesce::Coalesce;

/// Rounds of reading what is buffered (one item of each watch stream a round) before a build
/// at most: it must end even when a storm keeps the streams ready (it also stops once the
/// first change has waited `max_wait`).
const DRAIN_MAX: usize = 10_000;

/// What the cluster source needs.
pub struct ClusterSource {
    pub client: Client,
    /// Watch one namespace; `None` for all.
    pub namespace: Option<String>,
    pub coalesce: Coalesce,
    pub pipeline: Pipeline,
    pub metrics: Arc<Metrics>,
    /// Publish Events about Services (off in tests that do not want them).
    pub events: bool,
    /// Leadership (`control::lease`): Events about objects are not per replica, so only the
    /// leader publishes them. `None`: no election, this replica publishes.
    pub leader: Option<tokio::sync::watch::Receiver<bool>>,
    /// `--secret-label-selector`: only TLS Secrets with these labels are watched.
    pub secret_labels: Option<String>,
    /// `--configmap-label-selector`: only ConfigMaps with these labels are watched.
    pub configmap_labels: Option<String>,
}

/// One watched resource's objects by (namespace, name), with the re-list buffer, and what
/// changed since the last build.
struct Store<K> {
    live: BTreeMap<(String, String), K>,
    relist: Option<BTreeMap<(String, String), K>>,
    /// The first complete list has arrived.
    synced: bool,
    lists: u64,
    /// Keys added, modified or deleted since `take_changes`.
    changed: BTreeSet<(String, String)>,
    /// The live set was replaced whole since `take_changes` (a list): changes are unknown.
    replaced: bool,
    /// The watch failed and has not answered since (one warning per outage, not per retry).
    down: bool,
    /// The resource does not exist on the API server (a Gateway API CRD not installed): the
    /// store is empty and usable, and the kind is looked for again every `GATEWAY_API_RETRY`.
    absent: bool,
    /// A kind whose status switchyard writes (Ingresses, the Gateway API's): an update that
    /// moves only its status and resourceVersion is kept but is no change, so the echo of a
    /// status write does not cost a build (each such echo used to queue a route change behind
    /// one).
    status_blind: bool,
}

impl<K: Resource + Serialize> Store<K> {
    /// A store whose every update is a change (Services and EndpointSlices, whose versions
    /// the incremental build compares; Secrets, ConfigMaps, Namespaces, which have no status).
    fn new() -> Self {
        Store {
            live: BTreeMap::new(),
            relist: None,
            synced: false,
            lists: 0,
            changed: BTreeSet::new(),
            replaced: false,
            down: false,
            absent: false,
            status_blind: false,
        }
    }

    /// A store of a kind whose status switchyard writes (see `status_blind`).
    fn status_blind() -> Self {
        Store {
            status_blind: true,
            ..Self::new()
        }
    }

    /// What changed since the last call: the keys, or `None` when the store was replaced whole
    /// (a re-list after a 410 Gone sends no deletes, so only a full build is safe then).
    fn take_changes(&mut self) -> Option<BTreeSet<(String, String)>> {
        let changed = std::mem::take(&mut self.changed);
        (!std::mem::take(&mut self.replaced)).then_some(changed)
    }

    fn key(obj: &K) -> (String, String) {
        (obj.namespace().unwrap_or_default(), obj.name_any())
    }

    /// Ready to be translated: listed, or (for the Ingress side, which a cluster without
    /// the RBAC for it may never list) failing, so Services keep being served meanwhile.
    fn usable(&self) -> bool {
        self.synced || self.down || self.absent
    }

    /// The API server says the resource does not exist: nothing of it can be served (a CRD
    /// deleted while watched takes its objects with it). Returns whether the live set changed.
    fn set_absent(&mut self) -> bool {
        self.absent = true;
        self.relist = None;
        if self.live.is_empty() {
            return false;
        }
        self.live.clear();
        self.replaced = true;
        true
    }

    /// Applies one event; returns whether the live set changed.
    fn apply(&mut self, event: Event<K>) -> bool {
        match event {
            Event::Init => {
                self.relist = Some(BTreeMap::new());
                false
            }
            Event::InitApply(obj) => {
                let key = Self::key(&obj);
                self.relist
                    .get_or_insert_with(BTreeMap::new)
                    .insert(key, obj);
                false
            }
            Event::InitDone => {
                self.live = self.relist.take().unwrap_or_default();
                self.synced = true;
                self.lists += 1;
                self.replaced = true;
                true
            }
            Event::Apply(obj) => {
                let key = Self::key(&obj);
                let same = self.status_blind
                    && (self.live.get(&key)).is_some_and(|old| same_but_status(old, &obj));
                if !same {
                    self.changed.insert(key.clone());
                }
                self.live.insert(key, obj);
                !same
            }
            Event::Delete(obj) => {
                let key = Self::key(&obj);
                let gone = self.live.remove(&key).is_some();
                if gone {
                    self.changed.insert(key);
                }
                gone
            }
        }
    }
}

/// Whether `new` differs from `old` only in what a status write changes: the status and the
/// resourceVersion (routing reads neither; the status writers watch statuses themselves).
/// Compared as JSON: generic over every kind, and only asked on an update of a known object.
fn same_but_status<K: Serialize>(old: &K, new: &K) -> bool {
    let without_status = |o: &K| {
        let mut v = serde_json::to_value(o).ok()?;
        let map = v.as_object_mut()?;
        map.remove("status");
        if let Some(meta) = map.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            meta.remove("resourceVersion");
        }
        Some(v)
    };
    match (without_status(old), without_status(new)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// Drops what routing never reads, to keep the stores small.
fn slim<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(ann) = meta.annotations.as_mut() {
        ann.remove(LAST_APPLIED);
    }
}

fn stream<K>(
    client: &Client,
    namespace: Option<&str>,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
    K::DynamicType: Default,
{
    stream_with(client, namespace, watcher::Config::default())
}

fn stream_with<K>(
    client: &Client,
    namespace: Option<&str>,
    config: watcher::Config,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
    K::DynamicType: Default,
{
    let api: Api<K> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    backed_off(watch_stream(api, config).modify(slim), None)
}

/// A namespaced Gateway API kind: a 404 (CRD not installed) is retried every
/// `GATEWAY_API_RETRY`, not at the usual backoff.
fn gateway_stream<K>(
    client: &Client,
    namespace: Option<&str>,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
    K::DynamicType: Default,
{
    let api: Api<K> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let config = watcher::Config::default();
    backed_off(
        watch_stream(api, config).modify(slim),
        Some(GATEWAY_API_RETRY),
    )
}

/// Only Secrets that can hold an Ingress's certificate are watched (the API server filters):
/// a cluster's other Secrets, often thousands, are never sent, stored or parsed.
const TLS_SECRETS: &str = "type=kubernetes.io/tls";

/// The Secrets an Ingress's basic authentication names (ingress-nginx's `auth-secret`,
/// made by `kubectl create secret generic NAME --from-file=auth`) and its client CA bundle
/// (`auth-tls-secret`, `--from-file=ca.crt`) are `Opaque`: those are watched too, each cut
/// down to its `auth` and `ca.crt` keys as it arrives, and one without either is not kept (as
/// the ConfigMaps are, below).
const OPAQUE_SECRETS: &str = "type=Opaque";

/// The key of an `Opaque` Secret that holds an htpasswd file.
const AUTH_KEY: &str = "auth";

/// Secrets per page of the `Opaque` Secrets' list.
const OPAQUE_PAGE: u32 = 50;

fn auth_secret_stream(
    client: &Client,
    namespace: Option<&str>,
    config: watcher::Config,
) -> impl Stream<Item = Result<Event<Secret>, watcher::Error>> + Send {
    let api: Api<Secret> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let cut = watch_stream(api, config)
        .modify(slim_auth_secret)
        .filter_map(|ev| std::future::ready(only_auth_secrets(ev)));
    backed_off(cut, None)
}

/// Drops all of a Secret but its name, labels, `auth` and `ca.crt`.
fn slim_auth_secret(s: &mut Secret) {
    slim(s);
    s.metadata.annotations = None;
    s.string_data = None;
    if let Some(d) = s.data.as_mut() {
        d.retain(|k, _| k == AUTH_KEY || k == CA_KEY);
    }
}

fn holds_auth(s: &Secret) -> bool {
    s.data.as_ref().is_some_and(|d| !d.is_empty())
}

/// A (slimmed) Secret event as the store should see it: one without `auth` is left out of a
/// list and deleted by a change.
fn only_auth_secrets(
    ev: Result<Event<Secret>, watcher::Error>,
) -> Option<Result<Event<Secret>, watcher::Error>> {
    match ev {
        Ok(Event::InitApply(s)) if !holds_auth(&s) => None,
        Ok(Event::Apply(s)) if !holds_auth(&s) => Some(Ok(Event::Delete(s))),
        ev => Some(ev),
    }
}

/// ConfigMaps, for the CA bundles Services name (`lb.backend-ca-configmap`). A cluster's
/// ConfigMaps are many and hold whole configuration files, so each is cut down to its
/// `ca.crt` as it arrives, and one without it is not kept at all: it is never listed into the
/// store, and a change that removes the key is a delete (so unrelated ConfigMaps never cause a
/// rebuild either).
fn config_map_stream(
    client: &Client,
    namespace: Option<&str>,
    config: watcher::Config,
) -> impl Stream<Item = Result<Event<ConfigMap>, watcher::Error>> + Send {
    let api: Api<ConfigMap> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let cut = watch_stream(api, config)
        .modify(slim_config_map)
        .filter_map(|ev| std::future::ready(only_ca_config_maps(ev)));
    backed_off(cut, None)
}

/// Drops all of a ConfigMap but its name, labels and `ca.crt`.
fn slim_config_map(cm: &mut ConfigMap) {
    slim(cm);
    cm.metadata.annotations = None;
    cm.metadata.owner_references = None;
    if let Some(d) = cm.data.as_mut() {
        d.retain(|k, _| k == CA_KEY);
    }
    if let Some(d) = cm.binary_data.as_mut() {
        d.retain(|k, _| k == CA_KEY);
    }
}

fn holds_ca(cm: &ConfigMap) -> bool {
    cm.data.as_ref().is_some_and(|d| !d.is_empty())
        || cm.binary_data.as_ref().is_some_and(|d| !d.is_empty())
}

/// A (slimmed) ConfigMap event as the store should see it: one without `ca.crt` is left out
/// of a list and deleted by a change.
fn only_ca_config_maps(
    ev: Result<Event<ConfigMap>, watcher::Error>,
) -> Option<Result<Event<ConfigMap>, watcher::Error>> {
    match ev {
        Ok(Event::InitApply(cm)) if !holds_ca(&cm) => None,
        Ok(Event::Apply(cm)) if !holds_ca(&cm) => Some(Ok(Event::Delete(cm))),
        ev => Some(ev),
    }
}

/// A cluster-scoped kind (IngressClass, GatewayClass, Namespace); `absent_retry` as in
/// `backed_off`.
fn cluster_stream<K>(
    client: &Client,
    absent_retry: Option<Duration>,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send
where
    K: Resource<Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::all(client.clone());
    backed_off(
        watch_stream(api, watcher::Config::default()).modify(slim),
        absent_retry,
    )
}

/// TCPRoute, TLSRoute and UDPRoute, whose `v1` came later than the other kinds':
/// their absence is told apart from the Gateway API's (`ClusterSource::on_gateway_event`).
fn is_stream_route(resource: &str) -> bool {
    matches!(
        resource,
        "tcproutes" | "tlsroutes" | "udproutes" | "listenersets"
    )
}

/// The `resource` label of every watch `ClusterSource::run` keeps.
const WATCHED: [&str; 18] = [
    "services",
    "endpointslices",
    "ingresses",
    "ingressclasses",
    "secrets",
    "authsecrets",
    "configmaps",
    "gatewayclasses",
    "gateways",
    "httproutes",
    "grpcroutes",
    "tcproutes",
    "tlsroutes",
    "udproutes",
    "listenersets",
    "backendtlspolicies",
    "referencegrants",
    "namespaces",
];

impl ClusterSource {
    /// Runs until `shutdown` turns true.
    pub async fn run(mut self, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let ns = self.namespace.as_deref();
        let mut services = Box::pin(stream::<Service>(&self.client, ns));
        let mut slices = Box::pin(stream::<EndpointSlice>(&self.client, ns));
        let mut ingresses = Box::pin(stream::<Ingress>(&self.client, ns));
        let mut classes = Box::pin(cluster_stream::<IngressClass>(&self.client, None));
        let mut gw_classes = Box::pin(cluster_stream::<GatewayClass>(
            &self.client,
            Some(GATEWAY_API_RETRY),
        ));
        let mut gateways = Box::pin(gateway_stream::<Gateway>(&self.client, ns));
        let mut routes = Box::pin(gateway_stream::<HTTPRoute>(&self.client, ns));
        let mut grpc_routes = Box::pin(gateway_stream::<GRPCRoute>(&self.client, ns));
        let mut tcp_routes = Box::pin(gateway_stream::<TCPRoute>(&self.client, ns));
        let mut tls_routes = Box::pin(gateway_stream::<TLSRoute>(&self.client, ns));
        let mut udp_routes = Box::pin(gateway_stream::<UDPRoute>(&self.client, ns));
        let mut listener_sets = Box::pin(gateway_stream::<ListenerSet>(&self.client, ns));
        let mut tls_policies = Box::pin(gateway_stream::<BackendTLSPolicy>(&self.client, ns));
        let mut grants = Box::pin(gateway_stream::<ReferenceGrant>(&self.client, ns));
        // Namespaces exist on every API server; a 403 (a namespaced install without the
        // ClusterRole for them) leaves the store usable and empty, as for Ingresses.
        let mut namespaces = Box::pin(cluster_stream::<Namespace>(&self.client, None));
        let mut secret_watch = watcher::Config::default().fields(TLS_SECRETS);
        if let Some(labels) = &self.secret_labels {
            secret_watch = secret_watch.labels(labels);
        }
        // Small pages: a cluster's Opaque Secrets are many and large, and each page is held
        // whole while it is cut down (pages of 500 kept megabytes resident at 10,000 Secrets).
        let mut auth_watch = watcher::Config::default()
            .fields(OPAQUE_SECRETS)
            .page_size(OPAQUE_PAGE);
        if let Some(labels) = &self.secret_labels {
            auth_watch = auth_watch.labels(labels);
        }
        let mut secrets = Box::pin(stream_with::<Secret>(&self.client, ns, secret_watch));
        let mut auth_secrets = Box::pin(auth_secret_stream(&self.client, ns, auth_watch));
        // ConfigMaps may be forbidden (RBAC without them): a 403 leaves the store usable and
        // empty, one warning, and a Service naming one has its TLS fail closed.
        let mut cm_watch = watcher::Config::default();
        if let Some(labels) = &self.configmap_labels {
            cm_watch = cm_watch.labels(labels);
        }
        let mut config_maps = Box::pin(config_map_stream(&self.client, ns, cm_watch));
        let mut svc_store: Store<Service> = Store::new();
        let mut eps_store: Store<EndpointSlice> = Store::new();
        let mut ing_store: Store<Ingress> = Store::status_blind();
        let mut class_store: Store<IngressClass> = Store::new();
        let mut secret_store: Store<Secret> = Store::new();
        let mut auth_store: Store<Secret> = Store::new();
        let mut cm_store: Store<ConfigMap> = Store::new();
        let mut gw_class_store: Store<GatewayClass> = Store::status_blind();
        let mut gw_store: Store<Gateway> = Store::status_blind();
        let mut route_store: Store<HTTPRoute> = Store::status_blind();
        let mut grpc_store: Store<GRPCRoute> = Store::status_blind();
        let mut tcp_store: Store<TCPRoute> = Store::status_blind();
        let mut tls_store: Store<TLSRoute> = Store::status_blind();
        let mut udp_store: Store<UDPRoute> = Store::status_blind();
        let mut set_store: Store<ListenerSet> = Store::status_blind();
        let mut policy_store: Store<BackendTLSPolicy> = Store::status_blind();
        let mut grant_store: Store<ReferenceGrant> = Store::new();
        let mut ns_store: Store<Namespace> = Store::new();
        // A Gateway API list answered 404 and no Gateway API list has completed since: the
        // one warning about missing CRDs was logged.
        let mut gateway_api_absent = false;
        // The same for TCPRoute and TLSRoute, whose v1 came later (Gateway API v1.5): a
        // cluster with older CRDs serves the other kinds without them.
        let mut stream_routes_absent = false;
        let mut policies_absent = false;
        // Backed-off watches wake at once when the API server is ready again.
        HEALTH.start_probe(self.client.clone());
        let events = self.events.then(|| {
            events::spawn(
                self.client.clone(),
                Arc::clone(&self.metrics),
                self.leader.clone(),
            )
        });
        // Every resource's error and re-list counters exist from the start at 0, so that an
        // alert on their rate has a series before the first error (they appeared only then).
        for resource in WATCHED {
            self.metrics
                .watch_errors_total
                .with_label_values(&[resource]);
            self.metrics.relists_total.with_label_values(&[resource]);
        }
        let mut coalescer = Coalescer::new(self.coalesce);
        loop {
            let ready = svc_store.synced
                && eps_store.synced
                && ing_store.usable()
                && class_store.usable()
                && secret_store.usable()
                && auth_store.usable()
                && cm_store.usable()
                && gw_class_store.usable()
                && gw_store.usable()
                && route_store.usable()
                && grpc_store.usable()
                && tcp_store.usable()
                && tls_store.usable()
                && udp_store.usable()
                && set_store.usable()
                && policy_store.usable()
                && grant_store.usable()
                && ns_store.usable();
            let due = if ready { coalescer.due() } else { None };
            if due.is_none_or(|d| d > Instant::now()) {
                let sleep = async {
                    match due {
                        Some(d) => tokio::time::sleep_until(d.into()).await,
                        None => std::future::pending().await,
                    }
                };
                // Each branch does one thing and goes round again: the build happens at the
                // top once it is due, so a storm that keeps the streams ready cannot starve it.
                tokio::select! {
                    ev = services.next() => {
                        if self.on_event(ev, "services", &mut svc_store) {
                            coalescer.changed(Instant::now());
                        }
                    }
                    ev = slices.next() => {
                        if self.on_event(ev, "endpointslices", &mut eps_store) {
                            coalescer.changed(Instant::now());
                        }
                    }
                    ev = ingresses.next() => {
                        if self.on_event(ev, "ingresses", &mut ing_store) {
                            coalescer.changed(Instant::now());
                        }
                    }
                    ev = classes.next() => {
                        if self.on_event(ev, "ingressclasses", &mut class_store) {
                            coalescer.changed(Instant::now());
                        }
                    }
                    ev = secrets.next() => {
                        if self.on_event(ev, "secrets", &mut secret_store) {
                            coalescer.changed(Instant::now());
                        }
                    }
                    ev = auth_secrets.next() => {
                        if self.on_event(ev, "authsecrets", &mut auth_store) {
                            coalescer.changed(Instant::now());
                        }
                    }
                    ev = config_maps.next() => {
                        if self.on_event(ev, "configmaps", &mut cm_store) {
                            coalescer.changed(Instant::now());
                        }
                    }
                    ev = gw_classes.next() => {
                        if self.on_gateway_event(ev, "gatewayclasses", &mut gw_class_store, &mut gateway_api_absent) {
                            coalescer.changed(Instant::now());
                        }
                    }
                    ev = gateways.next() => {
                        if self.on_gateway_event(ev, "gateways", &mut gw_store, &mut gateway_api_absent) {
                            coalescer.changed(Instant::now());
                        }
                    }
                    ev = routes.next() => {
                        if self.on_gateway_event(ev, "httproutes", &mut route_store, &mut gateway_api_absent) {
                            coalescer.changed(Instant::now());
                        }
                    }
                    ev = grpc_routes.next() => {
                        if self.on_gateway_event(ev, "grpcroutes", &mut grpc_store, &mut gateway_api_absent) {
                            coalescer.changed(Instant::now());
                        }
                    }
                    ev = tcp_routes.next() => {
                        if self.on_gateway_event(ev, "tcproutes", &mut tcp_store, &mut stream_routes_absent) {
                            coalescer.changed(Instant::now());
                        }
                    }
                    ev = tls_routes.next() => {
                        if self.on_gateway_event(ev, "tlsroutes", &mut tls_store, &mut stream_routes_absent) {
                            coalescer.changed(Instant::now());
                        }
                    }
                    ev = udp_routes.next() => {
                        if self.on_gateway_event(ev, "udproutes", &mut udp_store, &mut stream_routes_absent) {
                            coalescer.changed(Instant::now());
                        }
                    }
                    ev = listener_sets.next() => {
                        if self.on_gateway_event(ev, "listenersets", &mut set_store, &mut stream_routes_absent) {
                            coalescer.changed(Instant::now());
                        }
                    }
                    ev = tls_policies.next() => {
                        if self.on_gateway_event(ev, "backendtlspolicies", &mut policy_store, &mut policies_absent) {
                            coalescer.changed(Instant::now());
                        }
                    }
                    ev = grants.next() => {
                        if self.on_gateway_event(ev, "referencegrants", &mut grant_store, &mut gateway_api_absent) {
                            coalescer.changed(Instant::now());
                        }
                    }
                    ev = namespaces.next() => {
                        if self.on_event(ev, "namespaces", &mut ns_store) {
                            coalescer.changed(Instant::now());
                        }
                    }
                    _ = sleep => {}
                    _ = shutdown.changed() => {
                        if *shutdown.borrow() {
                            return;
                        }
                    }
                }
                continue;
            }
            // Due. First read what the streams already hold (a burst written together, or
            // what came during the last build): one build for all of it, not one per event.
            // Bounded by count, and by the first change's maximum wait.
            let overdue = coalescer.overdue_at();
            for _ in 0..DRAIN_MAX {
                let read = [
                    self.read_ready(&mut services, "services", &mut svc_store, &mut coalescer),
                    self.read_ready(
                        &mut slices,
                        "endpointslices",
                        &mut eps_store,
                        &mut coalescer,
                    ),
                    self.read_ready(&mut ingresses, "ingresses", &mut ing_store, &mut coalescer),
                    self.read_ready(
                        &mut classes,
                        "ingressclasses",
                        &mut class_store,
                        &mut coalescer,
                    ),
                    self.read_ready(&mut secrets, "secrets", &mut secret_store, &mut coalescer),
                    self.read_ready(
                        &mut auth_secrets,
                        "authsecrets",
                        &mut auth_store,
                        &mut coalescer,
                    ),
                    self.read_ready(
                        &mut config_maps,
                        "configmaps",
                        &mut cm_store,
                        &mut coalescer,
                    ),
                    self.read_ready(&mut namespaces, "namespaces", &mut ns_store, &mut coalescer),
                    self.read_ready_gateway(
                        &mut gw_classes,
                        "gatewayclasses",
                        &mut gw_class_store,
                        &mut gateway_api_absent,
                        &mut coalescer,
                    ),
                    self.read_ready_gateway(
                        &mut gateways,
                        "gateways",
                        &mut gw_store,
                        &mut gateway_api_absent,
                        &mut coalescer,
                    ),
                    self.read_ready_gateway(
                        &mut routes,
                        "httproutes",
                        &mut route_store,
                        &mut gateway_api_absent,
                        &mut coalescer,
                    ),
                    self.read_ready_gateway(
                        &mut grpc_routes,
                        "grpcroutes",
                        &mut grpc_store,
                        &mut gateway_api_absent,
                        &mut coalescer,
                    ),
                    self.read_ready_gateway(
                        &mut tcp_routes,
                        "tcproutes",
                        &mut tcp_store,
                        &mut stream_routes_absent,
                        &mut coalescer,
                    ),
                    self.read_ready_gateway(
                        &mut tls_routes,
                        "tlsroutes",
                        &mut tls_store,
                        &mut stream_routes_absent,
                        &mut coalescer,
                    ),
                    self.read_ready_gateway(
                        &mut udp_routes,
                        "udproutes",
                        &mut udp_store,
                        &mut stream_routes_absent,
                        &mut coalescer,
                    ),
                    self.read_ready_gateway(
                        &mut listener_sets,
                        "listenersets",
                        &mut set_store,
                        &mut stream_routes_absent,
                        &mut coalescer,
                    ),
                    self.read_ready_gateway(
                        &mut tls_policies,
                        "backendtlspolicies",
                        &mut policy_store,
                        &mut policies_absent,
                        &mut coalescer,
                    ),
                    self.read_ready_gateway(
                        &mut grants,
                        "referencegrants",
                        &mut grant_store,
                        &mut gateway_api_absent,
                        &mut coalescer,
                    ),
                ];
                if !read.contains(&true) || overdue.is_some_and(|o| Instant::now() >= o) {
                    break;
                }
            }
            let started = Instant::now();
            let first = coalescer.start();
            // Every store's changes are taken, so none carries stale keys over. Any change on
            // the Ingress side makes the build a full one; one on the Gateway API side alone
            // redoes only its routes.
            let ingress = [
                ing_store.take_changes().is_none_or(|c| !c.is_empty()),
                class_store.take_changes().is_none_or(|c| !c.is_empty()),
                secret_store.take_changes().is_none_or(|c| !c.is_empty()),
                auth_store.take_changes().is_none_or(|c| !c.is_empty()),
                cm_store.take_changes().is_none_or(|c| !c.is_empty()),
                // A policy changes how entries speak to their endpoints: a full build.
                policy_store.take_changes().is_none_or(|c| !c.is_empty()),
            ]
            .contains(&true);
            let gateway = [
                gw_class_store.take_changes().is_none_or(|c| !c.is_empty()),
                gw_store.take_changes().is_none_or(|c| !c.is_empty()),
                route_store.take_changes().is_none_or(|c| !c.is_empty()),
                grpc_store.take_changes().is_none_or(|c| !c.is_empty()),
                tcp_store.take_changes().is_none_or(|c| !c.is_empty()),
                tls_store.take_changes().is_none_or(|c| !c.is_empty()),
                udp_store.take_changes().is_none_or(|c| !c.is_empty()),
                set_store.take_changes().is_none_or(|c| !c.is_empty()),
                grant_store.take_changes().is_none_or(|c| !c.is_empty()),
                ns_store.take_changes().is_none_or(|c| !c.is_empty()),
            ]
            .contains(&true);
            let changes = match (svc_store.take_changes(), eps_store.take_changes()) {
                (Some(services), Some(slices)) => Some(Changes {
                    services,
                    slices,
                    ingress,
                    gateway,
                }),
                _ => None,
            };
            let refs = IngressRefs::of(
                ing_store.live.values(),
                class_store.live.values(),
                secret_store.live.values().chain(auth_store.live.values()),
            )
            .with_config_maps(cm_store.live.values())
            .with_gateway(GatewayRefs {
                classes: gw_class_store.live.values().collect(),
                gateways: gw_store.live.values().collect(),
                routes: route_store.live.values().collect(),
                grpc_routes: grpc_store.live.values().collect(),
                tcp_routes: tcp_store.live.values().collect(),
                tls_routes: tls_store.live.values().collect(),
                udp_routes: udp_store.live.values().collect(),
                listener_sets: set_store.live.values().collect(),
                backend_tls_policies: policy_store.live.values().collect(),
                grants: grant_store.live.values().collect(),
                namespaces: ns_store.live.values().collect(),
            });
            let applied = self.pipeline.apply_changes(
                &svc_store.live,
                &eps_store.live,
                refs.inputs(),
                changes.as_ref(),
            );
            let live = Instant::now();
            if let Some(first) = first {
                let latency = live.saturating_duration_since(first);
                self.metrics
                    .propagation_latency_seconds
                    .observe(latency.as_secs_f64());
                tracing::debug!(
                    latency_ms = latency.as_secs_f64() * 1e3,
                    generation = applied.generation,
                    "watch event to live table"
                );
            }
            if let Some(tx) = &events {
                let warned = applied.new_warnings.iter().filter_map(|w| {
                    warning_reference(&svc_store, &ing_store, w)
                        .map(|r| events::Report::Warning(w.clone(), r))
                });
                let resolved = applied.resolved.iter().filter_map(|o| {
                    object_reference(&svc_store, &ing_store, o).map(events::Report::Resolved)
                });
                for report in warned.chain(resolved) {
                    // Never block publishing on the API server: drop when full.
                    if tx.try_send(report).is_err() {
                        self.metrics
                            .kube_events_total
                            .with_label_values(&["dropped"])
                            .inc();
                    }
                }
            }
            coalescer.built(started, Instant::now());
        }
    }

    /// `on_event` for a Gateway API kind: a 404 means its CRD is not installed, which is
    /// logged once for the kinds that share `absent`, not as a failing watch; the store is
    /// empty and usable until a list answers. TCPRoute and TLSRoute (their own `absent`) say
    /// so apart and at `info`: CRDs older than v1.5 lack them and serve the rest, a lasting,
    /// normal state that is not "the Gateway API is not installed".
    fn on_gateway_event<K: Resource + Serialize>(
        &self,
        ev: Option<Result<Event<K>, watcher::Error>>,
        resource: &str,
        store: &mut Store<K>,
        absent: &mut bool,
    ) -> bool {
        match ev {
            Some(Err(e)) if is_not_found(&e) => {
                if !*absent {
                    *absent = true;
                    if resource == "backendtlspolicies" {
                        tracing::info!(
                            resource,
                            retry_s = GATEWAY_API_RETRY.as_secs(),
                            "the BackendTLSPolicy CRD (v1, Gateway API v1.4 and later) is not installed; serving the other kinds without it, and looking for it again periodically"
                        );
                    } else if is_stream_route(resource) {
                        tracing::info!(
                            resource,
                            retry_s = GATEWAY_API_RETRY.as_secs(),
                            "the TCPRoute, TLSRoute, UDPRoute and ListenerSet CRDs (v1, Gateway API v1.5 and later) are not installed; serving the other kinds without them, and looking for them again periodically"
                        );
                    } else {
                        tracing::warn!(
                            resource,
                            retry_s = GATEWAY_API_RETRY.as_secs(),
                            "the Gateway API CRDs are not installed; serving Services and Ingresses, and looking for them again periodically"
                        );
                    }
                } else {
                    tracing::debug!(resource, error = %e, "Gateway API kind still not served");
                }
                store.set_absent()
            }
            ev => {
                // A list completed, or a resumed watch answered (the CRD came back while the
                // watcher was between lists): the kind is served again.
                let answered = matches!(
                    ev,
                    Some(Ok(Event::InitDone | Event::Apply(_) | Event::Delete(_)))
                );
                if store.absent && answered {
                    store.absent = false;
                    if std::mem::take(absent) {
                        if is_stream_route(resource) {
                            tracing::info!(
                                resource,
                                "the TCPRoute, TLSRoute, UDPRoute and ListenerSet CRDs are installed; watching them"
                            );
                        } else {
                            tracing::info!(
                                resource,
                                "the Gateway API CRDs are installed; watching them"
                            );
                        }
                    }
                }
                self.on_event(ev, resource, store)
            }
        }
    }

    /// Reads one item of a watch stream if it is there already, without waiting; returns
    /// whether there was one.
    fn read_ready<K: Resource + Serialize, S>(
        &self,
        stream: &mut S,
        resource: &str,
        store: &mut Store<K>,
        coalescer: &mut Coalescer,
    ) -> bool
    where
        S: Stream<Item = Result<Event<K>, watcher::Error>> + Unpin,
    {
        // A stream that ended (`Some(None)`) has nothing to read: the select loop reports it.
        let Some(Some(item)) = stream.next().now_or_never() else {
            return false;
        };
        if self.on_event(Some(item), resource, store) {
            coalescer.changed(Instant::now());
        }
        true
    }

    /// `read_ready` for a Gateway API kind (a 404 is its CRD missing, see `on_gateway_event`).
    fn read_ready_gateway<K: Resource + Serialize, S>(
        &self,
        stream: &mut S,
        resource: &str,
        store: &mut Store<K>,
        absent: &mut bool,
        coalescer: &mut Coalescer,
    ) -> bool
    where
        S: Stream<Item = Result<Event<K>, watcher::Error>> + Unpin,
    {
        let Some(Some(item)) = stream.next().now_or_never() else {
            return false;
        };
        if self.on_gateway_event(Some(item), resource, store, absent) {
            coalescer.changed(Instant::now());
        }
        true
    }

    /// Handles one item of a watch stream; returns whether the store changed.
    fn on_event<K: Resource + Serialize>(
        &self,
        ev: Option<Result<Event<K>, watcher::Error>>,
        resource: &str,
        store: &mut Store<K>,
    ) -> bool {
        match ev {
            Some(Ok(event)) => {
                if store.down && !matches!(event, Event::Init | Event::InitApply(_)) {
                    store.down = false;
                    tracing::warn!(resource, "watching again");
                }
                let was_listed = store.lists;
                let changed = store.apply(event);
                if store.lists > 1 && store.lists != was_listed {
                    self.metrics
                        .relists_total
                        .with_label_values(&[resource])
                        .inc();
                    tracing::info!(resource, objects = store.live.len(), "re-listed");
                } else if store.lists == 1 && was_listed == 0 {
                    tracing::info!(resource, objects = store.live.len(), "first list complete");
                }
                changed
            }
            Some(Err(e)) => {
                self.metrics
                    .watch_errors_total
                    .with_label_values(&[resource])
                    .inc();
                // One warning when the watch goes down, not one per retry; the count is in
                // switchyard_watch_errors_total and each retry at debug.
                if store.down {
                    tracing::debug!(resource, error = %e, "watch error; backing off");
                } else {
                    store.down = true;
                    tracing::warn!(resource, error = %e,
                        "cannot watch; retrying with backoff, the last table keeps serving");
                }
                false
            }
            None => {
                tracing::error!(resource, "watch stream ended");
                false
            }
        }
    }
}

/// The reference an Event about a warning is attached to: the Service or Ingress it is
/// about (an Ingress's every warning; a Service's annotation and conflict warnings).
fn warning_reference(
    services: &Store<Service>,
    ingresses: &Store<Ingress>,
    w: &Warning,
) -> Option<ObjectReference> {
    if w.object.kind == "Service"
        && !matches!(
            w.reason,
            WarningReason::InvalidAnnotation | WarningReason::RouteConflict
        )
    {
        return None;
    }
    object_reference(services, ingresses, &w.object)
}

/// The reference to the current version of a Service or Ingress in the stores; `None` for
/// other kinds and objects that are gone.
fn object_reference(
    services: &Store<Service>,
    ingresses: &Store<Ingress>,
    object: &ObjectRef,
) -> Option<ObjectReference> {
    let key = (object.namespace.clone(), object.name.clone());
    let (mut reference, version) = match object.kind {
        "Service" => {
            let svc = services.live.get(&key)?;
            (svc.object_ref(&()), svc.metadata.resource_version.clone())
        }
        "Ingress" => {
            let ing = ingresses.live.get(&key)?;
            (ing.object_ref(&()), ing.metadata.resource_version.clone())
        }
        _ => return None,
    };
    // Each version of the object is its own Event (`events::event_name`), so a changed
    // annotation's new message is a new Event rather than a higher count on the old one.
    reference.resource_version = version;
    Some(reference)
}

/// Lists the routing objects once (for `--dry-run` against a cluster). Services and
/// EndpointSlices must list; the Ingress side is left empty, with a warning, where it cannot.
pub async fn snapshot(
    client: &Client,
    namespace: Option<&str>,
) -> Result<crate::control::objects::Objects, kube::Error> {
    fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
    async fn optional<K: Clone + DeserializeOwned + std::fmt::Debug>(
        what: &str,
        list: impl std::future::Future<Output = Result<kube::core::ObjectList<K>, kube::Error>>,
    ) -> Vec<K> {
        list.await.map(|l| l.items).unwrap_or_else(|e| {
            tracing::warn!(resource = what, error = %e, "cannot list; left out");
            Vec::new()
        })
    }
    let lp = kube::api::ListParams::default();
    let services = api::<Service>(client, namespace).list(&lp).await?.items;
    let slices = api::<EndpointSlice>(client, namespace)
        .list(&lp)
        .await?
        .items;
    let ingresses = optional("ingresses", api::<Ingress>(client, namespace).list(&lp)).await;
    let classes = optional(
        "ingressclasses",
        Api::<IngressClass>::all(client.clone()).list(&lp),
    )
    .await;
    let tls = kube::api::ListParams::default().fields(TLS_SECRETS);
    let mut secrets = optional("secrets", api::<Secret>(client, namespace).list(&tls)).await;
    let opaque = kube::api::ListParams::default().fields(OPAQUE_SECRETS);
    let mut auth = optional("secrets", api::<Secret>(client, namespace).list(&opaque)).await;
    auth.iter_mut().for_each(slim_auth_secret);
    auth.retain(holds_auth);
    secrets.extend(auth);
    let mut config_maps =
        optional("configmaps", api::<ConfigMap>(client, namespace).list(&lp)).await;
    config_maps.iter_mut().for_each(slim_config_map);
    config_maps.retain(holds_ca);
    // The Gateway API kinds: a 404 means their CRDs are not installed, said once for the four
    // (each kind's raw 404 was printed before); other failures are said per kind.
    fn gateway_kind<K>(
        what: &str,
        listed: Result<kube::core::ObjectList<K>, kube::Error>,
        crds_absent: &mut bool,
    ) -> Vec<K>
    where
        K: Clone + DeserializeOwned,
    {
        match listed {
            Ok(list) => list.items,
            Err(kube::Error::Api(status)) if status.code == 404 => {
                *crds_absent = true;
                Vec::new()
            }
            Err(e) => {
                tracing::warn!(resource = what, error = %e, "cannot list; left out");
                Vec::new()
            }
        }
    }
    let mut crds_absent = false;
    let gateway_classes = gateway_kind(
        "gatewayclasses",
        Api::<GatewayClass>::all(client.clone()).list(&lp).await,
        &mut crds_absent,
    );
    let gateways = gateway_kind(
        "gateways",
        api::<Gateway>(client, namespace).list(&lp).await,
        &mut crds_absent,
    );
    let http_routes = gateway_kind(
        "httproutes",
        api::<HTTPRoute>(client, namespace).list(&lp).await,
        &mut crds_absent,
    );
    let grpc_routes = gateway_kind(
        "grpcroutes",
        api::<GRPCRoute>(client, namespace).list(&lp).await,
        &mut crds_absent,
    );
    // Their CRDs' v1 came later than the other kinds': a cluster without them still lists
    // the rest (their absence is not "the Gateway API CRDs are not installed").
    let mut stream_absent = false;
    let tcp_routes = gateway_kind(
        "tcproutes",
        api::<TCPRoute>(client, namespace).list(&lp).await,
        &mut stream_absent,
    );
    let tls_routes = gateway_kind(
        "tlsroutes",
        api::<TLSRoute>(client, namespace).list(&lp).await,
        &mut stream_absent,
    );
    let udp_routes = gateway_kind(
        "udproutes",
        api::<UDPRoute>(client, namespace).list(&lp).await,
        &mut stream_absent,
    );
    let listener_sets = gateway_kind(
        "listenersets",
        api::<ListenerSet>(client, namespace).list(&lp).await,
        &mut stream_absent,
    );
    if stream_absent {
        tracing::info!(
            "the TCPRoute, TLSRoute, UDPRoute and ListenerSet CRDs (v1) are not installed; none listed"
        );
    }
    let mut policies_absent = false;
    let backend_tls_policies = gateway_kind(
        "backendtlspolicies",
        api::<BackendTLSPolicy>(client, namespace).list(&lp).await,
        &mut policies_absent,
    );
    if policies_absent {
        tracing::info!("the BackendTLSPolicy CRD (v1) is not installed; none listed");
    }
    let reference_grants = gateway_kind(
        "referencegrants",
        api::<ReferenceGrant>(client, namespace).list(&lp).await,
        &mut crds_absent,
    );
    if crds_absent {
        tracing::warn!("the Gateway API CRDs are not installed; no Gateway API objects listed");
    }
    Ok(crate::control::objects::Objects {
        services,
        slices,
        ingresses,
        classes,
        secrets,
        config_maps,
        gateway_classes,
        gateways,
        http_routes,
        grpc_routes,
        tcp_routes,
        tls_routes,
        udp_routes,
        listener_sets,
        backend_tls_policies,
        reference_grants,
        namespaces: optional(
            "namespaces",
            Api::<Namespace>::all(client.clone()).list(&lp),
        )
        .await,
        // The API server checked every field against its schema.
        unread: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn svc(name: &str) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn relist_replaces_the_store_only_when_done() {
        let mut s: Store<Service> = Store::new();
        assert!(!s.apply(Event::Init));
        assert!(!s.apply(Event::InitApply(svc("a"))));
        assert!(!s.synced, "not synced before InitDone");
        assert!(s.apply(Event::InitDone));
        assert!(s.synced);
        assert!(s.apply(Event::Apply(svc("b"))));
        assert_eq!(s.live.len(), 2);
        // A re-list without `a`: the live set keeps both until the re-list completes, then
        // loses the deleted object even though no Delete event was seen.
        s.apply(Event::Init);
        s.apply(Event::InitApply(svc("b")));
        assert_eq!(s.live.len(), 2);
        s.apply(Event::InitDone);
        assert_eq!(
            s.live.keys().map(|k| k.1.as_str()).collect::<Vec<_>>(),
            ["b"]
        );
        assert_eq!(s.lists, 2);
        assert!(s.apply(Event::Delete(svc("b"))));
        assert!(
            !s.apply(Event::Delete(svc("b"))),
            "deleting twice changes nothing"
        );
    }

    #[test]
    fn a_status_write_coming_back_is_no_change_where_status_is_ours() {
        use k8s_openapi::api::networking::v1::{
            IngressLoadBalancerIngress, IngressLoadBalancerStatus, IngressStatus,
        };
        let ing = |version: &str, ip: Option<&str>, annotation: Option<&str>| Ingress {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                resource_version: Some(version.into()),
                annotations: annotation.map(|a| [("a".to_string(), a.to_string())].into()),
                ..Default::default()
            },
            status: ip.map(|ip| IngressStatus {
                load_balancer: Some(IngressLoadBalancerStatus {
                    ingress: Some(vec![IngressLoadBalancerIngress {
                        ip: Some(ip.into()),
                        ..Default::default()
                    }]),
                }),
            }),
            ..Default::default()
        };
        let mut s: Store<Ingress> = Store::status_blind();
        s.apply(Event::Init);
        s.apply(Event::InitApply(ing("1", None, None)));
        s.apply(Event::InitDone);
        s.take_changes();
        assert!(!s.apply(Event::Apply(ing("2", Some("192.0.2.1"), None))));
        assert_eq!(s.take_changes(), Some(BTreeSet::new()));
        let kept = &s.live[&("default".to_string(), "web".to_string())];
        assert_eq!(kept.metadata.resource_version.as_deref(), Some("2"));
        assert!(
            s.apply(Event::Apply(ing("3", Some("192.0.2.1"), Some("x")))),
            "an annotation is read by routing"
        );
        assert!(s.apply(Event::Apply(ing("4", None, Some("y")))));
        // A kind whose versions the incremental build compares: every update is a change.
        let mut services: Store<Service> = Store::new();
        services.apply(Event::Apply(svc("a")));
        assert!(services.apply(Event::Apply(svc("a"))));
    }

    #[test]
    fn changes_are_keys_since_the_last_take_and_unknown_after_a_list() {
        let mut s: Store<Service> = Store::new();
        s.apply(Event::Init);
        s.apply(Event::InitApply(svc("a")));
        s.apply(Event::InitDone);
        assert_eq!(s.take_changes(), None, "the first list: a full build");
        s.apply(Event::Apply(svc("b")));
        s.apply(Event::Delete(svc("a")));
        s.apply(Event::Delete(svc("zz")));
        let keys = |names: &[&str]| -> Option<BTreeSet<(String, String)>> {
            Some(
                names
                    .iter()
                    .map(|n| ("default".to_string(), n.to_string()))
                    .collect(),
            )
        };
        assert_eq!(s.take_changes(), keys(&["a", "b"]));
        assert_eq!(s.take_changes(), keys(&[]));
        s.apply(Event::Apply(svc("c")));
        s.apply(Event::Init);
        s.apply(Event::InitDone);
        assert_eq!(s.take_changes(), None, "a re-list: a full build");
        assert_eq!(s.take_changes(), keys(&[]));
    }

    #[test]
    fn slim_drops_managed_fields_and_last_applied() {
        let mut s = svc("a");
        s.metadata.managed_fields = Some(vec![Default::default()]);
        s.metadata.annotations = Some(BTreeMap::from([
            (LAST_APPLIED.to_string(), "{...}".to_string()),
            (
                "serviceloadbalancer/lb.host".to_string(),
                "x.com".to_string(),
            ),
        ]));
        slim(&mut s);
        assert!(s.metadata.managed_fields.is_none());
        assert_eq!(s.metadata.annotations.unwrap().len(), 1);
    }

    #[test]
    fn an_absent_kind_is_usable_and_empty() {
        let mut s: Store<Service> = Store::new();
        assert!(!s.usable());
        assert!(!s.set_absent(), "nothing was there");
        assert!(s.usable(), "no CRD: served as empty");
        s.absent = false;
        s.apply(Event::Init);
        s.apply(Event::InitApply(svc("a")));
        s.apply(Event::InitDone);
        s.take_changes();
        // A CRD deleted while watched: its objects go with it, and the next build is full.
        assert!(s.set_absent());
        assert!(s.live.is_empty());
        assert_eq!(s.take_changes(), None);
    }
}

//! The Gateway API status writer: writes what translate decided (`Memo::gateway_status`) to
//! the GatewayClasses, Gateways, ListenerSets, HTTPRoutes, GRPCRoutes, TCPRoutes, TLSRoutes,
//! UDPRoutes and BackendTLSPolicies switchyard serves. GatewayClasses get their conditions;
//! Gateways their conditions, listeners and `addresses` (those of `--publish-service` /
//! `--publish-status-address`, as Ingresses get, typed `IPAddress` or `Hostname`);
//! ListenerSets whose parent is one of our Gateways their conditions and listeners; the five
//! kinds of route the `status.parents` entries whose `controllerName` is ours, and
//! BackendTLSPolicies the `status.ancestors` entries whose `controllerName` is ours, beside
//! other controllers' entries, which are kept. Only the leader writes (`control::lease`).
//!
//! It runs the same loop as the Ingress writer (`control::status_writer`): while leading it
//! watches the nine kinds (status only matters) so that an object already right costs no
//! request, batches changes for `Limits::coalesce`, and writes merge patches of the `status`
//! subresource at most `Limits::concurrency` at once and `Limits::per_second` a second. It is
//! separate because it runs without any `--publish-*` flag (conditions are owed to every
//! object of our classes) and reads the Gateway API, which may not be installed, or installed
//! without some kinds (ListenerSet reached `v1` in v1.6, TCPRoute, TLSRoute and UDPRoute in
//! v1.5, BackendTLSPolicy in v1.4: older CRDs do not serve them): a kind answered 404 is not listed, so nothing of it
//! is written while the others are, and it is looked for again quietly, as the cluster source
//! does.
//!
//! A condition's `lastTransitionTime` is kept when its status did not change and set to now
//! when it did (translate has no clock). A route's or a policy's write carries the
//! `resourceVersion` it was decided on, so a race with another controller writing its own
//! entry fails with 409 and is decided again, instead of erasing that entry; so does a
//! ListenerSet's, whose whole status is ours, so that a write decided on an older spec (a
//! listener since renamed) fails instead of landing. A policy's
//! entries are keyed by `ancestorRef` and `controllerName` together (the spec's map key), and
//! its list holds at most 16: when other controllers' entries leave less room than we have
//! ancestors, ours are cut to fit (the spec: a full list gets no further entries). The
//! decision is the pure [`plan`]. This module must not touch the routing table or the data
//! plane.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::api::Patch;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

use crate::control::retry::{GATEWAY_API_RETRY, Outage, backed_off, is_not_found};
pub use crate::control::status_writer::Key;
use crate::control::status_writer::{Address, Limits, Publish, Side, Writer};
use crate::control::translate::gateway::api::{
    BackendTLSPolicy, Condition, GRPCRoute, Gateway, GatewayAddress, GatewayApiStatus,
    GatewayClass, GatewayClassStatus, GatewayStatus, HTTPRoute, ListenerSet, ListenerSetStatus,
    ListenerStatus, PolicyAncestorStatus, PolicyStatus, RouteParentStatus, RouteStatus, TCPRoute,
    TLSRoute, UDPRoute,
};
use crate::ops::metrics::Metrics;

/// What translate decided, as the pipeline publishes it.
pub type Desired = Arc<GatewayApiStatus>;

/// One object's status as last seen, with the version it was seen at.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Seen<S> {
    pub status: S,
    pub resource_version: Option<String>,
}

/// What the writer knows of the cluster's current statuses: `None` for a kind not listed yet.
/// Borrowed from the writer's views, so deciding costs no copy of thousands of statuses.
#[derive(Debug, Clone, Copy, Default)]
pub struct Current<'a> {
    pub classes: Option<&'a BTreeMap<Key, Seen<GatewayClassStatus>>>,
    pub gateways: Option<&'a BTreeMap<Key, Seen<GatewayStatus>>>,
    pub listener_sets: Option<&'a BTreeMap<Key, Seen<ListenerSetStatus>>>,
    pub routes: Option<&'a BTreeMap<Key, Seen<RouteStatus>>>,
    pub grpc_routes: Option<&'a BTreeMap<Key, Seen<RouteStatus>>>,
    pub tcp_routes: Option<&'a BTreeMap<Key, Seen<RouteStatus>>>,
    pub tls_routes: Option<&'a BTreeMap<Key, Seen<RouteStatus>>>,
    pub udp_routes: Option<&'a BTreeMap<Key, Seen<RouteStatus>>>,
    pub backend_tls_policies: Option<&'a BTreeMap<Key, Seen<PolicyStatus>>>,
}

/// One status write: the whole `status` to set.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    Class(Key, GatewayClassStatus),
    Gateway(Key, GatewayStatus),
    /// A ListenerSet's whole `status`, with the version decided on (a precondition: a write
    /// decided on an older spec fails with 409 and is decided again).
    ListenerSet(Key, ListenerSetStatus, Option<String>),
    /// With the version decided on (a precondition: other controllers' entries are kept).
    Route(Key, RouteStatus, Option<String>),
    /// The same for a GRPCRoute, a TCPRoute, a TLSRoute and a UDPRoute.
    GrpcRoute(Key, RouteStatus, Option<String>),
    TcpRoute(Key, RouteStatus, Option<String>),
    TlsRoute(Key, RouteStatus, Option<String>),
    UdpRoute(Key, RouteStatus, Option<String>),
    /// A BackendTLSPolicy's whole `status`, with the version decided on (a precondition, as
    /// for routes: other controllers' ancestors are kept).
    BackendTlsPolicy(Key, PolicyStatus, Option<String>),
}

impl Write {
    fn key(&self) -> &Key {
        match self {
            Write::Class(k, _)
            | Write::Gateway(k, _)
            | Write::ListenerSet(k, _, _)
            | Write::Route(k, _, _)
            | Write::GrpcRoute(k, _, _)
            | Write::TcpRoute(k, _, _)
            | Write::TlsRoute(k, _, _)
            | Write::UdpRoute(k, _, _)
            | Write::BackendTlsPolicy(k, _, _) => k,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Write::Class(..) => "GatewayClass",
            Write::Gateway(..) => "Gateway",
            Write::ListenerSet(..) => "ListenerSet",
            Write::Route(..) => "HTTPRoute",
            Write::GrpcRoute(..) => "GRPCRoute",
            Write::TcpRoute(..) => "TCPRoute",
            Write::TlsRoute(..) => "TLSRoute",
            Write::UdpRoute(..) => "UDPRoute",
            Write::BackendTlsPolicy(..) => "BackendTLSPolicy",
        }
    }
}

/// `desired` with each condition's `lastTransitionTime` taken from the current condition of
/// the same type when its status is unchanged, else `now`.
pub fn merge_conditions(desired: &[Condition], current: &[Condition], now: &str) -> Vec<Condition> {
    desired
        .iter()
        .map(|d| {
            let kept = current
                .iter()
                .find(|c| c.type_ == d.type_ && c.status == d.status)
                .and_then(|c| c.last_transition_time.clone());
            Condition {
                last_transition_time: Some(kept.unwrap_or_else(|| now.to_string())),
                ..d.clone()
            }
        })
        .collect()
}

/// `desired` listeners with each one's conditions merged with those of the current listener of
/// the same name (`merge_conditions`).
fn merge_listeners(
    desired: &[ListenerStatus],
    current: &[ListenerStatus],
    now: &str,
) -> Vec<ListenerStatus> {
    desired
        .iter()
        .map(|l| {
            let old = current
                .iter()
                .find(|o| o.name == l.name)
                .map_or(&[][..], |o| &o.conditions[..]);
            ListenerStatus {
                conditions: merge_conditions(&l.conditions, old, now),
                ..l.clone()
            }
        })
        .collect()
}

/// A published address as a Gateway's `status.addresses` item.
pub fn gateway_address(a: &Address) -> GatewayAddress {
    match a {
        Address::Ip(ip) => GatewayAddress {
            type_: Some("IPAddress".into()),
            value: ip.clone(),
        },
        Address::Hostname(h) => GatewayAddress {
            type_: Some("Hostname".into()),
            value: h.clone(),
        },
    }
}

/// The writes that bring the listed objects to `desired`: a class or Gateway of ours whose
/// status differs gets `desired` (addresses from `addresses`, times merged), and so does a
/// ListenerSet of one of our Gateways (without addresses); a route gets our
/// parents' entries replaced by `desired`'s (none when it is no longer ours) and others' kept;
/// a BackendTLSPolicy the same for its ancestors. Objects not listed yet, and kinds not listed
/// yet, are skipped: their turn comes with the watch. Nothing is written where the result
/// equals what is there.
pub fn plan(
    desired: &GatewayApiStatus,
    addresses: &[Address],
    controller: &str,
    current: &Current<'_>,
    now: &str,
) -> Vec<Write> {
    let mut out = Vec::new();
    if let Some(classes) = current.classes {
        for (name, want) in &desired.classes {
            let key = (String::new(), name.clone());
            let Some(seen) = classes.get(&key) else {
                continue;
            };
            let next = GatewayClassStatus {
                conditions: merge_conditions(&want.conditions, &seen.status.conditions, now),
            };
            if next != seen.status {
                out.push(Write::Class(key, next));
            }
        }
    }
    if let Some(gateways) = current.gateways {
        for (key, want) in &desired.gateways {
            let Some(seen) = gateways.get(key) else {
                continue;
            };
            let listeners = merge_listeners(&want.listeners, &seen.status.listeners, now);
            // With --gateway-addresses each Gateway has its own (or none). The CRD takes at
            // most 16: the API server refuses a longer list, and with it the whole status.
            let mut published: Vec<GatewayAddress> = if desired.own_addresses {
                want.addresses.clone()
            } else {
                addresses.iter().map(gateway_address).collect()
            };
            published.truncate(MAX_ADDRESSES);
            let next = GatewayStatus {
                addresses: published,
                conditions: merge_conditions(&want.conditions, &seen.status.conditions, now),
                listeners,
                attached_listener_sets: want.attached_listener_sets,
            };
            if next != seen.status {
                out.push(Write::Gateway(key.clone(), next));
            }
        }
    }
    if let Some(sets) = current.listener_sets {
        for (key, want) in &desired.listener_sets {
            let Some(seen) = sets.get(key) else {
                continue;
            };
            let next = ListenerSetStatus {
                conditions: merge_conditions(&want.conditions, &seen.status.conditions, now),
                listeners: merge_listeners(&want.listeners, &seen.status.listeners, now),
            };
            if next != seen.status {
                out.push(Write::ListenerSet(
                    key.clone(),
                    next,
                    seen.resource_version.clone(),
                ));
            }
        }
    }
    type RouteWrite = fn(Key, RouteStatus, Option<String>) -> Write;
    let route_kinds: [(_, _, RouteWrite); 5] = [
        (current.routes, &desired.http_routes, Write::Route),
        (current.grpc_routes, &desired.grpc_routes, Write::GrpcRoute),
        (current.tcp_routes, &desired.tcp_routes, Write::TcpRoute),
        (current.tls_routes, &desired.tls_routes, Write::TlsRoute),
        (current.udp_routes, &desired.udp_routes, Write::UdpRoute),
    ];
    for (routes, want, write) in route_kinds {
        if let Some(routes) = routes {
            plan_routes(want, routes, controller, now, write, &mut out);
        }
    }
    if let Some(policies) = current.backend_tls_policies {
        plan_policies(
            &desired.backend_tls_policies,
            policies,
            controller,
            now,
            &mut out,
        );
    }
    out
}

/// The spec's bound on a Gateway's `status.addresses` (the CRD's `maxItems`): the first 16 of
/// the published addresses (IPs first, then host names) are written. A longer list was a 422
/// for the whole status from a real API server, retried for ever (`--publish-status-address`
/// with 17 addresses, or a `--publish-service` LoadBalancer with as many).
pub const MAX_ADDRESSES: usize = 16;

/// The spec's bound on a policy's `status.ancestors` (the CRD's `maxItems`).
const MAX_ANCESTORS: usize = 16;

/// The writes of BackendTLSPolicies: our ancestors' entries replaced by `desired`'s (none when
/// no route of ours reaches the policy any more), matched by `ancestorRef` and
/// `controllerName`; other controllers' kept, in their order, ahead of ours. Ours fill what
/// room theirs leave of the 16 (a full list gets no further entries).
fn plan_policies(
    desired: &BTreeMap<Key, PolicyStatus>,
    policies: &BTreeMap<Key, Seen<PolicyStatus>>,
    controller: &str,
    now: &str,
    out: &mut Vec<Write>,
) {
    let empty = PolicyStatus::default();
    for (key, seen) in policies {
        let want = desired.get(key).unwrap_or(&empty);
        let has_ours = seen
            .status
            .ancestors
            .iter()
            .any(|a| a.controller_name == controller);
        if want.ancestors.is_empty() && !has_ours {
            continue;
        }
        let mut ancestors: Vec<PolicyAncestorStatus> = seen
            .status
            .ancestors
            .iter()
            .filter(|a| a.controller_name != controller)
            .cloned()
            .collect();
        let room = MAX_ANCESTORS.saturating_sub(ancestors.len());
        for a in want.ancestors.iter().take(room) {
            let old = seen
                .status
                .ancestors
                .iter()
                .find(|o| o.controller_name == controller && o.ancestor_ref == a.ancestor_ref)
                .map_or(&[][..], |o| &o.conditions[..]);
            ancestors.push(PolicyAncestorStatus {
                conditions: merge_conditions(&a.conditions, old, now),
                controller_name: controller.to_string(),
                ..a.clone()
            });
        }
        let next = PolicyStatus { ancestors };
        if next != seen.status {
            out.push(Write::BackendTlsPolicy(
                key.clone(),
                next,
                seen.resource_version.clone(),
            ));
        }
    }
}

/// The writes of one kind of route: our parents' entries replaced by `desired`'s (none when
/// it is no longer ours), other controllers' kept.
fn plan_routes(
    desired: &BTreeMap<Key, Arc<RouteStatus>>,
    routes: &BTreeMap<Key, Seen<RouteStatus>>,
    controller: &str,
    now: &str,
    write: fn(Key, RouteStatus, Option<String>) -> Write,
    out: &mut Vec<Write>,
) {
    {
        let empty = RouteStatus::default();
        for (key, seen) in routes {
            let want = desired.get(key).map_or(&empty, |s| &**s);
            let has_ours = seen
                .status
                .parents
                .iter()
                .any(|p| p.controller_name == controller);
            if want.parents.is_empty() && !has_ours {
                continue;
            }
            let mut parents: Vec<RouteParentStatus> = seen
                .status
                .parents
                .iter()
                .filter(|p| p.controller_name != controller)
                .cloned()
                .collect();
            for p in &want.parents {
                let old = seen
                    .status
                    .parents
                    .iter()
                    .find(|o| o.controller_name == controller && o.parent_ref == p.parent_ref)
                    .map_or(&[][..], |o| &o.conditions[..]);
                parents.push(RouteParentStatus {
                    conditions: merge_conditions(&p.conditions, old, now),
                    controller_name: controller.to_string(),
                    ..p.clone()
                });
            }
            let next = RouteStatus { parents };
            if next != seen.status {
                out.push(write(key.clone(), next, seen.resource_version.clone()));
            }
        }
    }
}

/// Now, as a Kubernetes `metav1.Time` (RFC 3339, whole seconds, UTC).
fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Everything the Gateway API status writer needs.
pub struct GatewayStatusWriter {
    pub client: Client,
    /// The namespace watched (`--namespace`), `None` for all.
    pub namespace: Option<String>,
    /// `--gateway-controller-name`: our entries of a route's `status.parents`.
    pub controller_name: String,
    /// Where `status.addresses` of Gateways come from; `None`: no addresses.
    pub publish: Option<Publish>,
    /// What translate decided, as the pipeline publishes it after each build.
    pub desired: watch::Receiver<Desired>,
    /// Leadership (`control::lease`); constant `true` without election.
    pub leader: watch::Receiver<bool>,
    pub limits: Limits,
    pub metrics: Arc<Metrics>,
}

/// A kind's statuses as the watch tells them, with the re-list buffer.
struct View<S> {
    live: BTreeMap<Key, Seen<S>>,
    relist: Option<BTreeMap<Key, Seen<S>>>,
    synced: bool,
    /// One warning per outage of this kind's watch, not one per retry.
    outage: Outage,
}

impl<S> Default for View<S> {
    fn default() -> Self {
        View {
            live: BTreeMap::new(),
            relist: None,
            synced: false,
            outage: Outage::default(),
        }
    }
}

impl<S: PartialEq + Clone> View<S> {
    /// Applies one watch event; returns whether a known status changed.
    fn apply<K: kube::Resource>(
        &mut self,
        kind: &str,
        ev: Result<Event<K>, watcher::Error>,
        status: impl Fn(&K) -> S,
    ) -> bool {
        let key = |o: &K| (o.namespace().unwrap_or_default(), o.name_any());
        let seen = |o: &K| Seen {
            status: status(o),
            resource_version: o.meta().resource_version.clone(),
        };
        if ev.is_ok() && self.outage.worked() {
            tracing::info!(kind, "status: watching again");
        }
        match ev {
            Ok(Event::Init) => {
                self.relist = Some(BTreeMap::new());
                false
            }
            Ok(Event::InitApply(o)) => {
                self.relist
                    .get_or_insert_with(BTreeMap::new)
                    .insert(key(&o), seen(&o));
                false
            }
            Ok(Event::InitDone) => {
                self.live = self.relist.take().unwrap_or_default();
                self.synced = true;
                true
            }
            Ok(Event::Apply(o)) => {
                let s = seen(&o);
                let old = self.live.insert(key(&o), s.clone());
                old.is_none_or(|o| o.status != s.status)
            }
            Ok(Event::Delete(o)) => self.live.remove(&key(&o)).is_some(),
            // A kind whose CRD is not installed (or no longer: deleted while watched): nothing
            // to write to, so it is not listed until a list answers again, and what was seen of
            // it is forgotten rather than planned against. Quiet: the cluster source says it
            // once, and older CRDs without some kinds are a normal, lasting state.
            Err(e) if is_not_found(&e) => {
                tracing::debug!(kind, "status: Gateway API kind not served");
                let forgot = self.synced;
                self.live.clear();
                self.relist = None;
                self.synced = false;
                forgot
            }
            Err(e) => {
                if self.outage.failed() {
                    tracing::warn!(kind, error = %e, "status: cannot watch; retrying with backoff");
                } else {
                    tracing::debug!(kind, error = %e, "status: watch error; backing off");
                }
                false
            }
        }
    }
}

#[derive(Default)]
struct Views {
    classes: View<GatewayClassStatus>,
    gateways: View<GatewayStatus>,
    listener_sets: View<ListenerSetStatus>,
    routes: View<RouteStatus>,
    grpc_routes: View<RouteStatus>,
    tcp_routes: View<RouteStatus>,
    tls_routes: View<RouteStatus>,
    udp_routes: View<RouteStatus>,
    backend_tls_policies: View<PolicyStatus>,
}

impl Views {
    fn current(&self) -> Current<'_> {
        fn listed<S>(v: &View<S>) -> Option<&BTreeMap<Key, Seen<S>>> {
            v.synced.then_some(&v.live)
        }
        Current {
            classes: listed(&self.classes),
            gateways: listed(&self.gateways),
            listener_sets: listed(&self.listener_sets),
            routes: listed(&self.routes),
            grpc_routes: listed(&self.grpc_routes),
            tcp_routes: listed(&self.tcp_routes),
            tls_routes: listed(&self.tls_routes),
            udp_routes: listed(&self.udp_routes),
            backend_tls_policies: listed(&self.backend_tls_policies),
        }
    }
}

impl GatewayStatusWriter {
    /// Runs in a task of its own until `stop` turns true.
    pub fn spawn(self, stop: watch::Receiver<bool>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.run(stop))
    }

    pub async fn run(self, stop: watch::Receiver<bool>) {
        let writer = Writer {
            side: Kinds {
                namespace: self.namespace,
                controller_name: self.controller_name,
            },
            client: self.client,
            publish: self.publish,
            desired: self.desired,
            leader: self.leader,
            limits: self.limits,
            metrics: self.metrics,
        };
        writer.run(stop).await
    }
}

/// The Gateway API side of the status writer.
struct Kinds {
    namespace: Option<String>,
    controller_name: String,
}

/// An event of one of the nine watches.
enum KindEvent {
    Class(Result<Event<GatewayClass>, watcher::Error>),
    /// Boxed: a Gateway is the largest object watched here.
    Gateway(Box<Result<Event<Gateway>, watcher::Error>>),
    ListenerSet(Result<Event<ListenerSet>, watcher::Error>),
    Route(Result<Event<HTTPRoute>, watcher::Error>),
    GrpcRoute(Result<Event<GRPCRoute>, watcher::Error>),
    TcpRoute(Result<Event<TCPRoute>, watcher::Error>),
    TlsRoute(Result<Event<TLSRoute>, watcher::Error>),
    UdpRoute(Result<Event<UDPRoute>, watcher::Error>),
    BackendTlsPolicy(Result<Event<BackendTLSPolicy>, watcher::Error>),
}

impl Side for Kinds {
    type Desired = Desired;
    type Event = KindEvent;
    type View = Views;
    type Write = Write;

    const UPDATED: &'static str = "status: Gateway API status updated";

    fn watches(&self, client: &Client) -> Vec<BoxStream<'static, KindEvent>> {
        fn namespaced<K>(client: &Client, ns: Option<&str>) -> Watched<K>
        where
            K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
                + Clone
                + serde::de::DeserializeOwned
                + std::fmt::Debug
                + Send
                + 'static,
            K::DynamicType: Default,
        {
            let api: Api<K> = match ns {
                Some(ns) => Api::namespaced(client.clone(), ns),
                None => Api::all(client.clone()),
            };
            gateway_api_backoff(watcher::watcher(api, watcher::Config::default()))
        }
        let ns = self.namespace.as_deref();
        let classes: Api<GatewayClass> = Api::all(client.clone());
        vec![
            gateway_api_backoff(watcher::watcher(classes, watcher::Config::default()))
                .map(KindEvent::Class)
                .boxed(),
            namespaced(client, ns)
                .map(|ev| KindEvent::Gateway(Box::new(ev)))
                .boxed(),
            namespaced(client, ns).map(KindEvent::ListenerSet).boxed(),
            namespaced(client, ns).map(KindEvent::Route).boxed(),
            namespaced(client, ns).map(KindEvent::GrpcRoute).boxed(),
            namespaced(client, ns).map(KindEvent::TcpRoute).boxed(),
            namespaced(client, ns).map(KindEvent::TlsRoute).boxed(),
            namespaced(client, ns).map(KindEvent::UdpRoute).boxed(),
            namespaced(client, ns)
                .map(KindEvent::BackendTlsPolicy)
                .boxed(),
        ]
    }

    fn apply(views: &mut Views, ev: KindEvent) -> bool {
        match ev {
            KindEvent::Class(ev) => {
                views
                    .classes
                    .apply("gatewayclasses", ev, |c: &GatewayClass| {
                        c.status.clone().unwrap_or_default()
                    })
            }
            KindEvent::Gateway(ev) => views.gateways.apply("gateways", *ev, |g: &Gateway| {
                g.status.clone().unwrap_or_default()
            }),
            KindEvent::ListenerSet(ev) => {
                views
                    .listener_sets
                    .apply("listenersets", ev, |s: &ListenerSet| {
                        s.status.clone().unwrap_or_default()
                    })
            }
            KindEvent::Route(ev) => views.routes.apply("httproutes", ev, |r: &HTTPRoute| {
                r.status.clone().unwrap_or_default()
            }),
            KindEvent::GrpcRoute(ev) => {
                views.grpc_routes.apply("grpcroutes", ev, |r: &GRPCRoute| {
                    r.status.clone().unwrap_or_default()
                })
            }
            KindEvent::TcpRoute(ev) => views.tcp_routes.apply("tcproutes", ev, |r: &TCPRoute| {
                r.status.clone().unwrap_or_default()
            }),
            KindEvent::TlsRoute(ev) => views.tls_routes.apply("tlsroutes", ev, |r: &TLSRoute| {
                r.status.clone().unwrap_or_default()
            }),
            KindEvent::UdpRoute(ev) => views.udp_routes.apply("udproutes", ev, |r: &UDPRoute| {
                r.status.clone().unwrap_or_default()
            }),
            KindEvent::BackendTlsPolicy(ev) => views.backend_tls_policies.apply(
                "backendtlspolicies",
                ev,
                |p: &BackendTLSPolicy| p.status.clone().unwrap_or_default(),
            ),
        }
    }

    fn plan(
        &mut self,
        desired: &Desired,
        addresses: &[Address],
        views: &Views,
    ) -> Option<Vec<Write>> {
        Some(plan(
            desired,
            addresses,
            &self.controller_name,
            &views.current(),
            &now_rfc3339(),
        ))
    }

    /// One merge patch of the status subresource; the new resourceVersion.
    async fn write(&self, client: &Client, w: &Write) -> Result<Option<String>, kube::Error> {
        let pp = crate::control::patch_params();
        // A merge patch replaces lists whole, so each list written is the complete one.
        match w {
            Write::Class((_, name), s) => {
                let api: Api<GatewayClass> = Api::all(client.clone());
                let patch = json!({ "status": s });
                let o = api.patch_status(name, &pp, &Patch::Merge(&patch)).await?;
                Ok(o.metadata.resource_version)
            }
            Write::Gateway((ns, name), s) => {
                let api: Api<Gateway> = Api::namespaced(client.clone(), ns);
                let patch = gateway_patch(s);
                let o = api.patch_status(name, &pp, &Patch::Merge(&patch)).await?;
                Ok(o.metadata.resource_version)
            }
            Write::ListenerSet(k, s, rv) => patch_versioned::<ListenerSet>(client, k, s, rv).await,
            Write::Route(k, s, rv) => patch_versioned::<HTTPRoute>(client, k, s, rv).await,
            Write::GrpcRoute(k, s, rv) => patch_versioned::<GRPCRoute>(client, k, s, rv).await,
            Write::TcpRoute(k, s, rv) => patch_versioned::<TCPRoute>(client, k, s, rv).await,
            Write::TlsRoute(k, s, rv) => patch_versioned::<TLSRoute>(client, k, s, rv).await,
            Write::UdpRoute(k, s, rv) => patch_versioned::<UDPRoute>(client, k, s, rv).await,
            Write::BackendTlsPolicy(k, s, rv) => {
                patch_versioned::<BackendTLSPolicy>(client, k, s, rv).await
            }
        }
    }

    fn record(views: &mut Views, w: &Write, rv: Option<String>) {
        record(views, w, rv)
    }

    fn warn_failed(w: &Write, e: &kube::Error) {
        let (ns, name) = w.key();
        tracing::warn!(kind = w.kind(), namespace = %ns, name = %name, error = %e,
            "status: write failed; retrying");
    }
}

/// The merge patch of a Gateway's status: the whole status, and `attachedListenerSets: null`
/// when the Gateway allows no ListenerSet. A merge patch keeps what it does not name, so
/// leaving the count out (as serde does with `None`) kept the last one on the API server: a
/// Gateway whose `allowedListeners` were removed still said `attachedListenerSets: 1`, and
/// the writer, which notes what it wrote, never saw it.
fn gateway_patch(s: &GatewayStatus) -> serde_json::Value {
    let mut patch = json!({ "status": s });
    if s.attached_listener_sets.is_none() {
        patch["status"]["attachedListenerSets"] = serde_json::Value::Null;
    }
    patch
}

/// One merge patch of a route's (a policy's, a ListenerSet's) status subresource, with the version it was
/// decided on as a precondition (other controllers' entries are kept); the new
/// resourceVersion.
async fn patch_versioned<K>(
    client: &Client,
    (ns, name): &Key,
    status: &impl serde::Serialize,
    rv: &Option<String>,
) -> Result<Option<String>, kube::Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let patch = versioned_patch(status, rv);
    let pp = crate::control::patch_params();
    let o = api.patch_status(name, &pp, &Patch::Merge(&patch)).await?;
    Ok(o.meta().resource_version.clone())
}

/// The merge patch of a versioned status write: the whole `status` (a merge patch replaces
/// lists, so each list is the complete one) and `metadata.resourceVersion`, which the API
/// server takes as a precondition (409 when the object changed since).
fn versioned_patch(status: &impl serde::Serialize, rv: &Option<String>) -> serde_json::Value {
    json!({ "metadata": { "resourceVersion": rv }, "status": status })
}

type Watched<K> = BoxStream<'static, Result<Event<K>, watcher::Error>>;

/// The cluster source's retry policy for a Gateway API watch: a missing CRD (404) is looked
/// for again every `GATEWAY_API_RETRY`, other failures back off as every watch does.
fn gateway_api_backoff<K: Send + 'static>(
    inner: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
) -> Watched<K> {
    backed_off(inner, Some(GATEWAY_API_RETRY)).boxed()
}

/// Notes a successful write in the views.
fn record(views: &mut Views, w: &Write, rv: Option<String>) {
    fn set<S: Clone>(view: &mut View<S>, key: &Key, status: &S, rv: Option<String>) {
        if let Some(seen) = view.live.get_mut(key) {
            seen.status = status.clone();
            seen.resource_version = rv;
        }
    }
    match w {
        Write::Class(k, s) => set(&mut views.classes, k, s, rv),
        Write::Gateway(k, s) => set(&mut views.gateways, k, s, rv),
        Write::ListenerSet(k, s, _) => set(&mut views.listener_sets, k, s, rv),
        Write::Route(k, s, _) => set(&mut views.routes, k, s, rv),
        Write::GrpcRoute(k, s, _) => set(&mut views.grpc_routes, k, s, rv),
        Write::TcpRoute(k, s, _) => set(&mut views.tcp_routes, k, s, rv),
        Write::TlsRoute(k, s, _) => set(&mut views.tls_routes, k, s, rv),
        Write::UdpRoute(k, s, _) => set(&mut views.udp_routes, k, s, rv),
        Write::BackendTlsPolicy(k, s, _) => set(&mut views.backend_tls_policies, k, s, rv),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::translate::gateway::api::{ParentReference, RouteGroupKind};

    const OURS: &str = "switchyard.io/gateway-controller";
    const THEIRS: &str = "example.com/other";
    const NOW: &str = "2026-12-01T16:00:00Z";
    const BEFORE: &str = "2026-11-30T08:00:00Z";

    fn cond(type_: &str, ok: bool, gen_: i64, at: Option<&str>) -> Condition {
        Condition {
            last_transition_time: at.map(Into::into),
            ..Condition::new(
                type_,
                ok,
                if ok { type_ } else { "Invalid" },
                "",
                Some(gen_),
            )
        }
    }

    fn k(ns: &str, n: &str) -> Key {
        (ns.to_string(), n.to_string())
    }

    fn seen<S>(status: S, rv: &str) -> Seen<S> {
        Seen {
            status,
            resource_version: Some(rv.into()),
        }
    }

    fn parent(name: &str, controller: &str, conditions: Vec<Condition>) -> RouteParentStatus {
        RouteParentStatus {
            parent_ref: ParentReference {
                name: name.into(),
                ..Default::default()
            },
            controller_name: controller.into(),
            conditions,
        }
    }

    #[test]
    fn unchanged_conditions_keep_their_time_and_changed_ones_get_now() {
        let current = [
            cond("Accepted", true, 1, Some(BEFORE)),
            cond("Programmed", false, 1, Some(BEFORE)),
        ];
        let desired = [
            cond("Accepted", true, 2, None),
            cond("Programmed", true, 2, None),
        ];
        let merged = merge_conditions(&desired, &current, NOW);
        assert_eq!(merged[0].last_transition_time.as_deref(), Some(BEFORE));
        assert_eq!(
            merged[0].observed_generation,
            Some(2),
            "the rest is translate's"
        );
        assert_eq!(merged[1].last_transition_time.as_deref(), Some(NOW));
        assert_eq!(
            merge_conditions(&desired, &[], NOW)[0]
                .last_transition_time
                .as_deref(),
            Some(NOW)
        );
    }

    #[test]
    fn classes_and_gateways_are_written_only_when_they_differ() {
        let desired = GatewayApiStatus {
            classes: BTreeMap::from([
                (
                    "a".to_string(),
                    GatewayClassStatus {
                        conditions: vec![cond("Accepted", true, 1, None)],
                    },
                ),
                (
                    "b".to_string(),
                    GatewayClassStatus {
                        conditions: vec![cond("Accepted", true, 1, None)],
                    },
                ),
                ("unlisted".to_string(), GatewayClassStatus::default()),
            ]),
            gateways: BTreeMap::from([(
                k("ns", "gw"),
                GatewayStatus {
                    addresses: vec![],
                    conditions: vec![cond("Programmed", true, 3, None)],
                    listeners: vec![ListenerStatus {
                        name: "http".into(),
                        supported_kinds: vec![RouteGroupKind {
                            group: None,
                            kind: "HTTPRoute".into(),
                        }],
                        attached_routes: 2,
                        conditions: vec![cond("Accepted", true, 3, None)],
                    }],
                    attached_listener_sets: None,
                },
            )]),
            own_addresses: false,
            ..Default::default()
        };
        let addresses = [
            Address::parse("203.0.113.7"),
            Address::parse("lb.example.com"),
        ];
        let right_gateway = GatewayStatus {
            addresses: addresses.iter().map(gateway_address).collect(),
            conditions: vec![cond("Programmed", true, 3, Some(BEFORE))],
            listeners: vec![ListenerStatus {
                conditions: vec![cond("Accepted", true, 3, Some(BEFORE))],
                ..desired.gateways[&k("ns", "gw")].listeners[0].clone()
            }],
            attached_listener_sets: None,
        };
        let classes = BTreeMap::from([
            (
                k("", "a"),
                seen(
                    GatewayClassStatus {
                        conditions: vec![cond("Accepted", true, 1, Some(BEFORE))],
                    },
                    "1",
                ),
            ),
            (
                k("", "b"),
                seen(
                    GatewayClassStatus {
                        conditions: vec![cond("Accepted", false, 1, Some(BEFORE))],
                    },
                    "2",
                ),
            ),
        ]);
        let gateways = BTreeMap::from([(k("ns", "gw"), seen(right_gateway.clone(), "3"))]);
        let current = Current {
            classes: Some(&classes),
            gateways: Some(&gateways),
            ..Default::default()
        };
        let w = plan(&desired, &addresses, OURS, &current, NOW);
        assert_eq!(
            w,
            vec![Write::Class(
                k("", "b"),
                GatewayClassStatus {
                    conditions: vec![cond("Accepted", true, 1, Some(NOW))]
                }
            )],
            "a and the Gateway are right already; unlisted is not known yet"
        );
        assert_eq!(
            right_gateway.addresses[0].type_.as_deref(),
            Some("IPAddress")
        );
        assert_eq!(
            right_gateway.addresses[1].type_.as_deref(),
            Some("Hostname")
        );
        // A new address, or one more attached route, rewrites the Gateway.
        let w = plan(&desired, &addresses[..1], OURS, &current, NOW);
        assert!(
            matches!(&w[1], Write::Gateway(key, s) if *key == k("ns", "gw") && s.addresses.len() == 1)
        );
        // Nothing listed yet: nothing written.
        assert!(plan(&desired, &addresses, OURS, &Current::default(), NOW).is_empty());
        // With --gateway-addresses the Gateway's own address is written, not the published
        // ones; a Gateway that got none shows none.
        let own = |addresses: Vec<GatewayAddress>| {
            let mut d = desired.clone();
            d.own_addresses = true;
            d.gateways.get_mut(&k("ns", "gw")).unwrap().addresses = addresses;
            d
        };
        let mine = GatewayAddress {
            type_: Some("IPAddress".into()),
            value: "127.0.0.2".into(),
        };
        let w = plan(&own(vec![mine.clone()]), &addresses, OURS, &current, NOW);
        assert!(
            matches!(&w[1], Write::Gateway(_, s) if s.addresses == vec![mine.clone()]),
            "{w:?}"
        );
        let w = plan(&own(vec![]), &addresses, OURS, &current, NOW);
        assert!(
            matches!(&w[1], Write::Gateway(_, s) if s.addresses.is_empty()),
            "{w:?}"
        );
    }

    /// The CRD takes at most 16 addresses (a real API server refused 18 with `Too many: 18:
    /// must have at most 16 items`, and the whole status with them): the first 16 published
    /// are written, and a Gateway that holds them is not written again.
    #[test]
    fn a_gateway_gets_at_most_sixteen_addresses() {
        let desired = GatewayApiStatus {
            gateways: BTreeMap::from([(
                k("ns", "gw"),
                GatewayStatus {
                    conditions: vec![cond("Programmed", true, 1, None)],
                    ..Default::default()
                },
            )]),
            ..Default::default()
        };
        let addresses: Vec<Address> = (1..=20)
            .map(|i| Address::parse(&format!("192.0.2.{i}")))
            .chain([Address::parse("lb.example.com")])
            .collect();
        let gateways = BTreeMap::from([(k("ns", "gw"), seen(GatewayStatus::default(), "1"))]);
        let current = Current {
            gateways: Some(&gateways),
            ..Default::default()
        };
        let w = plan(&desired, &addresses, OURS, &current, NOW);
        let [Write::Gateway(_, written)] = &w[..] else {
            panic!("one Gateway write expected: {w:?}");
        };
        assert_eq!(written.addresses.len(), MAX_ADDRESSES);
        assert_eq!(written.addresses[15].value, "192.0.2.16");
        let settled = BTreeMap::from([(k("ns", "gw"), seen(written.clone(), "2"))]);
        let current = Current {
            gateways: Some(&settled),
            ..Default::default()
        };
        assert!(plan(&desired, &addresses, OURS, &current, NOW).is_empty());
        // Its own addresses (--gateway-addresses) are held to the same bound.
        let mut own = desired.clone();
        own.own_addresses = true;
        own.gateways.get_mut(&k("ns", "gw")).unwrap().addresses =
            addresses.iter().map(gateway_address).collect();
        let w = plan(&own, &[], OURS, &current, NOW);
        assert!(w.is_empty(), "{w:?}");
    }

    /// A merge patch keeps what it does not name: a Gateway that allows no ListenerSet names
    /// its count null (RFC 7386: removed), so that one it had goes; one that allows them names
    /// its count.
    #[test]
    fn a_gateway_patch_removes_a_count_of_listener_sets_it_no_longer_has() {
        let none = gateway_patch(&GatewayStatus::default());
        assert!(none["status"]["attachedListenerSets"].is_null());
        assert!(
            none["status"]
                .as_object()
                .unwrap()
                .contains_key("attachedListenerSets")
        );
        let one = gateway_patch(&GatewayStatus {
            attached_listener_sets: Some(1),
            ..Default::default()
        });
        assert_eq!(one["status"]["attachedListenerSets"], 1);
    }

    #[test]
    fn routes_get_our_parents_and_keep_other_controllers() {
        let desired = GatewayApiStatus {
            http_routes: BTreeMap::from([(
                k("ns", "r"),
                Arc::new(RouteStatus {
                    parents: vec![parent("gw", OURS, vec![cond("Accepted", true, 2, None)])],
                }),
            )]),
            ..Default::default()
        };
        let theirs = parent(
            "istio-gw",
            THEIRS,
            vec![cond("Accepted", true, 1, Some(BEFORE))],
        );
        let routes = BTreeMap::from([
            (
                k("ns", "r"),
                seen(
                    RouteStatus {
                        parents: vec![
                            theirs.clone(),
                            parent("gw", OURS, vec![cond("Accepted", true, 1, Some(BEFORE))]),
                            parent(
                                "old-gw",
                                OURS,
                                vec![cond("Accepted", true, 1, Some(BEFORE))],
                            ),
                        ],
                    },
                    "7",
                ),
            ),
            // No longer ours: our entry goes, theirs stays.
            (
                k("ns", "gone"),
                seen(
                    RouteStatus {
                        parents: vec![theirs.clone(), parent("gw", OURS, vec![])],
                    },
                    "8",
                ),
            ),
            // Never ours: untouched.
            (
                k("ns", "other"),
                seen(
                    RouteStatus {
                        parents: vec![theirs.clone()],
                    },
                    "9",
                ),
            ),
        ]);
        let current = Current {
            routes: Some(&routes),
            grpc_routes: None,
            ..Default::default()
        };
        let w = plan(&desired, &[], OURS, &current, NOW);
        assert_eq!(
            w,
            vec![
                Write::Route(
                    k("ns", "gone"),
                    RouteStatus {
                        parents: vec![theirs.clone()]
                    },
                    Some("8".into())
                ),
                Write::Route(
                    k("ns", "r"),
                    RouteStatus {
                        parents: vec![
                            theirs,
                            parent("gw", OURS, vec![cond("Accepted", true, 2, Some(BEFORE))]),
                        ]
                    },
                    Some("7".into())
                ),
            ]
        );
        // Applied, the plan is empty: nothing changed, nothing written.
        let mut after = routes.clone();
        for write in &w {
            if let Write::Route(key, s, _) = write {
                after.get_mut(key).unwrap().status = s.clone();
            }
        }
        let after = Current {
            routes: Some(&after),
            grpc_routes: None,
            ..Default::default()
        };
        assert!(plan(&desired, &[], OURS, &after, "2026-12-02T00:00:00Z").is_empty());
    }

    /// A TCPRoute and a TLSRoute get our parents' entries as the other routes do, each written
    /// as its own kind (an HTTPRoute of the same name is another object); a kind the API server
    /// does not serve (older CRDs) is not listed and nothing of it is planned, while the other
    /// kinds are.
    #[test]
    fn tcp_and_tls_routes_are_written_as_their_kinds_and_skipped_where_not_served() {
        let ours = |generation| {
            Arc::new(RouteStatus {
                parents: vec![parent(
                    "gw",
                    OURS,
                    vec![cond("Accepted", true, generation, None)],
                )],
            })
        };
        let desired = GatewayApiStatus {
            http_routes: BTreeMap::from([(k("ns", "r"), ours(1))]),
            tcp_routes: BTreeMap::from([(k("ns", "r"), ours(2))]),
            tls_routes: BTreeMap::from([(k("ns", "r"), ours(3))]),
            ..Default::default()
        };
        let theirs = parent(
            "other-gw",
            THEIRS,
            vec![cond("Accepted", true, 1, Some(BEFORE))],
        );
        let listed = |rv: &str| {
            BTreeMap::from([(
                k("ns", "r"),
                seen(
                    RouteStatus {
                        parents: vec![theirs.clone()],
                    },
                    rv,
                ),
            )])
        };
        let (http, tcp, tls) = (listed("1"), listed("2"), listed("3"));
        let written = |generation| RouteStatus {
            parents: vec![
                theirs.clone(),
                parent(
                    "gw",
                    OURS,
                    vec![cond("Accepted", true, generation, Some(NOW))],
                ),
            ],
        };
        let all = Current {
            routes: Some(&http),
            tcp_routes: Some(&tcp),
            tls_routes: Some(&tls),
            ..Default::default()
        };
        assert_eq!(
            plan(&desired, &[], OURS, &all, NOW),
            vec![
                Write::Route(k("ns", "r"), written(1), Some("1".into())),
                Write::TcpRoute(k("ns", "r"), written(2), Some("2".into())),
                Write::TlsRoute(k("ns", "r"), written(3), Some("3".into())),
            ]
        );
        let w = Write::TlsRoute(k("ns", "r"), written(3), None);
        assert_eq!((w.kind(), w.key()), ("TLSRoute", &k("ns", "r")));
        // Older CRDs: TCPRoutes and TLSRoutes are not served, the HTTPRoute is still written.
        let old_crds = Current {
            routes: Some(&http),
            ..Default::default()
        };
        assert_eq!(
            plan(&desired, &[], OURS, &old_crds, NOW),
            vec![Write::Route(k("ns", "r"), written(1), Some("1".into()))]
        );
    }

    /// A UDPRoute gets our parents' entries as a TCPRoute does, beside another controller's,
    /// written as its own kind (a TCPRoute of the same name is another object); with older CRDs
    /// it is not listed and nothing of it is planned, while the TCPRoute still is.
    #[test]
    fn udp_routes_are_written_as_their_kind_and_skipped_where_not_served() {
        let ours = |generation| {
            Arc::new(RouteStatus {
                parents: vec![parent(
                    "gw",
                    OURS,
                    vec![cond("Accepted", true, generation, None)],
                )],
            })
        };
        let desired = GatewayApiStatus {
            tcp_routes: BTreeMap::from([(k("ns", "r"), ours(1))]),
            udp_routes: BTreeMap::from([(k("ns", "r"), ours(2))]),
            ..Default::default()
        };
        let theirs = parent(
            "other-gw",
            THEIRS,
            vec![cond("Accepted", true, 1, Some(BEFORE))],
        );
        let listed = |rv: &str| {
            BTreeMap::from([(
                k("ns", "r"),
                seen(
                    RouteStatus {
                        parents: vec![theirs.clone()],
                    },
                    rv,
                ),
            )])
        };
        let (tcp, udp) = (listed("1"), listed("2"));
        let written = |generation| RouteStatus {
            parents: vec![
                theirs.clone(),
                parent(
                    "gw",
                    OURS,
                    vec![cond("Accepted", true, generation, Some(NOW))],
                ),
            ],
        };
        let all = Current {
            tcp_routes: Some(&tcp),
            udp_routes: Some(&udp),
            ..Default::default()
        };
        assert_eq!(
            plan(&desired, &[], OURS, &all, NOW),
            vec![
                Write::TcpRoute(k("ns", "r"), written(1), Some("1".into())),
                Write::UdpRoute(k("ns", "r"), written(2), Some("2".into())),
            ]
        );
        let w = Write::UdpRoute(k("ns", "r"), written(2), None);
        assert_eq!((w.kind(), w.key()), ("UDPRoute", &k("ns", "r")));
        // Once written, nothing more to do.
        let udp_after = BTreeMap::from([(k("ns", "r"), seen(written(2), "3"))]);
        let after = Current {
            udp_routes: Some(&udp_after),
            ..Default::default()
        };
        assert!(plan(&desired, &[], OURS, &after, "2026-12-02T00:00:00Z").is_empty());
        // No longer ours: our entry is taken out, theirs kept.
        let gone = GatewayApiStatus::default();
        assert_eq!(
            plan(&gone, &[], OURS, &after, NOW),
            vec![Write::UdpRoute(
                k("ns", "r"),
                RouteStatus {
                    parents: vec![theirs.clone()],
                },
                Some("3".into())
            )]
        );
        // Older CRDs: UDPRoutes are not served, the TCPRoute is still written.
        let old_crds = Current {
            tcp_routes: Some(&tcp),
            ..Default::default()
        };
        assert_eq!(
            plan(&desired, &[], OURS, &old_crds, NOW),
            vec![Write::TcpRoute(k("ns", "r"), written(1), Some("1".into()))]
        );
    }

    /// A UDPRoute's view is filled from the route's own status, and unlisted by a 404 as any
    /// kind's.
    #[test]
    fn a_udp_route_view_follows_its_watch_and_a_404() {
        let not_found = || {
            let status = kube::core::Status::failure("not found", "NotFound").with_code(404);
            watcher::Error::InitialListFailed(kube::Error::Api(status.boxed()))
        };
        let mut route = UDPRoute {
            metadata: kube::api::ObjectMeta {
                name: Some("dns".into()),
                namespace: Some("ns".into()),
                resource_version: Some("7".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let theirs = RouteStatus {
            parents: vec![parent("gw", THEIRS, vec![])],
        };
        route.status = Some(theirs.clone());
        let mut views = Views::default();
        assert!(views.current().udp_routes.is_none(), "not listed yet");
        Kinds::apply(&mut views, KindEvent::UdpRoute(Ok(Event::Init)));
        Kinds::apply(&mut views, KindEvent::UdpRoute(Ok(Event::InitApply(route))));
        assert!(Kinds::apply(
            &mut views,
            KindEvent::UdpRoute(Ok(Event::InitDone))
        ));
        assert_eq!(
            views.current().udp_routes,
            Some(&BTreeMap::from([(k("ns", "dns"), seen(theirs, "7"))]))
        );
        assert!(views.current().tcp_routes.is_none(), "another kind's view");
        assert!(Kinds::apply(
            &mut views,
            KindEvent::UdpRoute(Err(not_found()))
        ));
        assert!(views.current().udp_routes.is_none(), "unlisted by a 404");
    }

    /// A ListenerSet of one of our Gateways gets its whole status (conditions and listeners),
    /// with the time of an unchanged condition kept, as a Gateway's, and the version it was
    /// decided on; a set not listed is skipped; with older CRDs (no ListenerSet served) the
    /// Gateway is still written.
    #[test]
    fn listener_sets_get_their_status_and_are_skipped_where_not_served() {
        let listener = |attached, at: Option<&str>| ListenerStatus {
            name: "extra".into(),
            supported_kinds: vec![RouteGroupKind {
                group: None,
                kind: "HTTPRoute".into(),
            }],
            attached_routes: attached,
            conditions: vec![cond("Programmed", true, 2, at)],
        };
        let set_status = |attached, at: Option<&str>| ListenerSetStatus {
            conditions: vec![
                cond("Accepted", true, 2, at),
                cond("Programmed", true, 2, at),
            ],
            listeners: vec![listener(attached, at)],
        };
        let gateway = GatewayStatus {
            conditions: vec![cond("Programmed", true, 1, None)],
            attached_listener_sets: Some(1),
            ..Default::default()
        };
        let desired = GatewayApiStatus {
            gateways: BTreeMap::from([(k("infra", "gw"), gateway)]),
            listener_sets: BTreeMap::from([
                (k("apps", "set"), set_status(1, None)),
                (k("apps", "unlisted"), set_status(0, None)),
            ]),
            ..Default::default()
        };
        let gateways = BTreeMap::from([(k("infra", "gw"), seen(GatewayStatus::default(), "1"))]);
        // Listed with last write's conditions, no route attached then.
        let sets = BTreeMap::from([(k("apps", "set"), seen(set_status(0, Some(BEFORE)), "4"))]);
        let all = Current {
            gateways: Some(&gateways),
            listener_sets: Some(&sets),
            ..Default::default()
        };
        let w = plan(&desired, &[], OURS, &all, NOW);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(matches!(&w[0], Write::Gateway(key, s)
            if *key == k("infra", "gw") && s.attached_listener_sets == Some(1)));
        assert_eq!(
            w[1],
            Write::ListenerSet(
                k("apps", "set"),
                set_status(1, Some(BEFORE)),
                Some("4".into())
            ),
            "one more route attached; unchanged conditions keep their time"
        );
        assert_eq!(
            (w[1].kind(), w[1].key()),
            ("ListenerSet", &k("apps", "set"))
        );
        // A changed condition gets now.
        let mut rejected = desired.clone();
        rejected.listener_sets.insert(
            k("apps", "set"),
            ListenerSetStatus {
                conditions: vec![cond("Accepted", false, 2, None)],
                listeners: vec![],
            },
        );
        let w = plan(&rejected, &[], OURS, &all, NOW);
        assert!(
            matches!(&w[1], Write::ListenerSet(_, s, _)
                if s.conditions[0].last_transition_time.as_deref() == Some(NOW)
                    && s.listeners.is_empty()),
            "{w:?}"
        );
        // Once written, nothing more to do for the set.
        let sets_after =
            BTreeMap::from([(k("apps", "set"), seen(set_status(1, Some(BEFORE)), "5"))]);
        let after = Current {
            listener_sets: Some(&sets_after),
            ..Default::default()
        };
        assert!(plan(&desired, &[], OURS, &after, "2026-12-02T00:00:00Z").is_empty());
        // Older CRDs: ListenerSets are not served, the Gateway is still written.
        let old_crds = Current {
            gateways: Some(&gateways),
            ..Default::default()
        };
        let w = plan(&desired, &[], OURS, &old_crds, NOW);
        assert!(matches!(&w[..], [Write::Gateway(..)]), "{w:?}");
    }

    /// A ListenerSet's view is filled from the set's own status, a write is noted in it, and a
    /// 404 unlists it as any kind's.
    #[test]
    fn a_listener_set_view_follows_its_watch_its_writes_and_a_404() {
        let not_found = || {
            let status = kube::core::Status::failure("not found", "NotFound").with_code(404);
            watcher::Error::InitialListFailed(kube::Error::Api(status.boxed()))
        };
        let set = ListenerSet {
            metadata: kube::api::ObjectMeta {
                name: Some("set".into()),
                namespace: Some("apps".into()),
                resource_version: Some("7".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let mut views = Views::default();
        assert!(views.current().listener_sets.is_none(), "not listed yet");
        Kinds::apply(&mut views, KindEvent::ListenerSet(Ok(Event::Init)));
        Kinds::apply(
            &mut views,
            KindEvent::ListenerSet(Ok(Event::InitApply(set))),
        );
        assert!(Kinds::apply(
            &mut views,
            KindEvent::ListenerSet(Ok(Event::InitDone))
        ));
        assert_eq!(
            views.current().listener_sets,
            Some(&BTreeMap::from([(
                k("apps", "set"),
                seen(ListenerSetStatus::default(), "7")
            )]))
        );
        assert!(views.current().gateways.is_none(), "another kind's view");
        let written = ListenerSetStatus {
            conditions: vec![cond("Accepted", true, 1, Some(NOW))],
            listeners: vec![],
        };
        record(
            &mut views,
            &Write::ListenerSet(k("apps", "set"), written.clone(), Some("7".into())),
            Some("8".into()),
        );
        assert_eq!(
            views.current().listener_sets.map(|s| &s[&k("apps", "set")]),
            Some(&seen(written, "8"))
        );
        assert!(Kinds::apply(
            &mut views,
            KindEvent::ListenerSet(Err(not_found()))
        ));
        assert!(views.current().listener_sets.is_none(), "unlisted by a 404");
    }

    /// A 404 (the kind's CRD not installed, or deleted while watched) unlists the kind: what
    /// was seen of it is not planned against until a list answers again.
    #[test]
    fn a_kind_answered_404_is_no_longer_listed() {
        let not_found = || {
            let status = kube::core::Status::failure("not found", "NotFound").with_code(404);
            watcher::Error::InitialListFailed(kube::Error::Api(status.boxed()))
        };
        let route = |name: &str| TCPRoute {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                resource_version: Some("5".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let status = |r: &TCPRoute| r.status.clone().unwrap_or_default();
        let mut view = View::<RouteStatus>::default();
        assert!(!view.apply("tcproutes", Err(not_found()), status));
        assert!(!view.synced, "never listed");
        view.apply("tcproutes", Ok(Event::Init), status);
        view.apply("tcproutes", Ok(Event::InitApply(route("a"))), status);
        assert!(view.apply("tcproutes", Ok(Event::InitDone), status));
        assert!(view.synced && view.live.contains_key(&k("ns", "a")));
        assert!(view.apply("tcproutes", Err(not_found()), status));
        assert!(!view.synced && view.live.is_empty(), "forgotten");
        assert!(!view.apply("tcproutes", Err(not_found()), status));
    }

    fn gateway_ref(name: &str) -> ParentReference {
        ParentReference {
            group: Some(crate::control::translate::gateway::api::GROUP.into()),
            kind: Some("Gateway".into()),
            namespace: Some("infra".into()),
            name: name.into(),
            ..Default::default()
        }
    }

    fn ancestor(gw: &str, controller: &str, conditions: Vec<Condition>) -> PolicyAncestorStatus {
        PolicyAncestorStatus {
            ancestor_ref: gateway_ref(gw),
            controller_name: controller.into(),
            conditions,
        }
    }

    /// A BackendTLSPolicy gets our ancestors' entries as a route gets its parents': matched by
    /// ancestorRef and controllerName together (another controller's entry for the same
    /// Gateway is another entry, kept), times kept where the status did not change, an
    /// ancestor no longer reached dropped, and a policy no route of ours reaches any more
    /// losing our entries only. Written as its own kind, with the version it was decided on.
    #[test]
    fn backend_tls_policies_get_our_ancestors_and_keep_other_controllers() {
        let desired = GatewayApiStatus {
            backend_tls_policies: BTreeMap::from([
                (
                    k("ns", "p"),
                    PolicyStatus {
                        ancestors: vec![ancestor(
                            "gw",
                            OURS,
                            vec![
                                cond("Accepted", true, 2, None),
                                cond("ResolvedRefs", false, 2, None),
                            ],
                        )],
                    },
                ),
                // Read, but no route of ours reaches its Service now.
                (k("ns", "gone"), PolicyStatus::default()),
                (k("ns", "other"), PolicyStatus::default()),
            ]),
            ..Default::default()
        };
        // Theirs names the same Gateway: the key is the pair, so it is not ours to replace.
        let theirs = ancestor("gw", THEIRS, vec![cond("Accepted", true, 1, Some(BEFORE))]);
        let policies = BTreeMap::from([
            (
                k("ns", "p"),
                seen(
                    PolicyStatus {
                        ancestors: vec![
                            ancestor(
                                "old-gw",
                                OURS,
                                vec![cond("Accepted", true, 1, Some(BEFORE))],
                            ),
                            theirs.clone(),
                            ancestor(
                                "gw",
                                OURS,
                                vec![
                                    cond("Accepted", true, 1, Some(BEFORE)),
                                    cond("ResolvedRefs", true, 1, Some(BEFORE)),
                                ],
                            ),
                        ],
                    },
                    "4",
                ),
            ),
            (
                k("ns", "gone"),
                seen(
                    PolicyStatus {
                        ancestors: vec![
                            theirs.clone(),
                            ancestor("gw", OURS, vec![cond("Accepted", true, 1, Some(BEFORE))]),
                        ],
                    },
                    "5",
                ),
            ),
            (
                k("ns", "other"),
                seen(
                    PolicyStatus {
                        ancestors: vec![theirs.clone()],
                    },
                    "6",
                ),
            ),
        ]);
        let current = Current {
            backend_tls_policies: Some(&policies),
            ..Default::default()
        };
        let w = plan(&desired, &[], OURS, &current, NOW);
        assert_eq!(
            w,
            vec![
                Write::BackendTlsPolicy(
                    k("ns", "gone"),
                    PolicyStatus {
                        ancestors: vec![theirs.clone()]
                    },
                    Some("5".into())
                ),
                Write::BackendTlsPolicy(
                    k("ns", "p"),
                    PolicyStatus {
                        ancestors: vec![
                            theirs.clone(),
                            ancestor(
                                "gw",
                                OURS,
                                vec![
                                    cond("Accepted", true, 2, Some(BEFORE)),
                                    cond("ResolvedRefs", false, 2, Some(NOW)),
                                ],
                            ),
                        ]
                    },
                    Some("4".into())
                ),
            ]
        );
        assert_eq!(w[0].kind(), "BackendTLSPolicy");
        // Applied, the plan is empty.
        let mut after = policies.clone();
        for write in &w {
            if let Write::BackendTlsPolicy(key, s, _) = write {
                after.get_mut(key).unwrap().status = s.clone();
            }
        }
        let after = Current {
            backend_tls_policies: Some(&after),
            ..Default::default()
        };
        assert!(plan(&desired, &[], OURS, &after, "2026-12-02T00:00:00Z").is_empty());
        // Not listed (no CRD, or not yet): nothing planned, the routes' kinds unaffected.
        assert!(plan(&desired, &[], OURS, &Current::default(), NOW).is_empty());
    }

    /// The CRD holds at most 16 ancestors: other controllers' entries are kept, ours fill the
    /// room left (a full list gets no further entries), so the write is never refused.
    #[test]
    fn a_policys_ancestors_stay_within_sixteen() {
        let ok = || vec![cond("Accepted", true, 1, None)];
        let desired = GatewayApiStatus {
            backend_tls_policies: BTreeMap::from([(
                k("ns", "p"),
                PolicyStatus {
                    ancestors: (0..4)
                        .map(|i| ancestor(&format!("gw-{i}"), OURS, ok()))
                        .collect(),
                },
            )]),
            ..Default::default()
        };
        let theirs: Vec<PolicyAncestorStatus> = (0..14)
            .map(|i| ancestor(&format!("their-{i}"), THEIRS, ok()))
            .collect();
        let policies = BTreeMap::from([(
            k("ns", "p"),
            seen(
                PolicyStatus {
                    ancestors: theirs.clone(),
                },
                "1",
            ),
        )]);
        let current = Current {
            backend_tls_policies: Some(&policies),
            ..Default::default()
        };
        let w = plan(&desired, &[], OURS, &current, NOW);
        let [Write::BackendTlsPolicy(_, s, _)] = &w[..] else {
            panic!("one write expected: {w:?}");
        };
        assert_eq!(s.ancestors.len(), 16);
        assert_eq!(s.ancestors[..14], theirs[..], "theirs kept, first");
        let ours: Vec<&str> = s.ancestors[14..]
            .iter()
            .map(|a| a.ancestor_ref.name.as_str())
            .collect();
        assert_eq!(ours, ["gw-0", "gw-1"]);
    }

    /// A policy's write is a merge patch of its whole status with the version decided on as
    /// a precondition, as a route's is.
    #[test]
    fn a_policy_write_is_a_versioned_merge_patch_of_the_whole_status() {
        let status = PolicyStatus {
            ancestors: vec![ancestor(
                "gw",
                OURS,
                vec![cond("Accepted", true, 1, Some(NOW))],
            )],
        };
        let patch = versioned_patch(&status, &Some("9".into()));
        assert_eq!(patch["metadata"], json!({"resourceVersion": "9"}));
        let a = &patch["status"]["ancestors"][0];
        assert_eq!(
            a["ancestorRef"],
            json!({"group": "gateway.networking.k8s.io", "kind": "Gateway",
                   "namespace": "infra", "name": "gw"})
        );
        assert_eq!(a["controllerName"], OURS);
        assert_eq!(a["conditions"][0]["lastTransitionTime"], NOW);
    }

    #[test]
    fn the_time_is_a_kubernetes_time() {
        let t = now_rfc3339();
        assert_eq!(t.len(), "2026-12-01T16:00:00Z".len(), "{t}");
        assert!(t.ends_with('Z') && t.as_bytes()[10] == b'T', "{t}");
    }
}

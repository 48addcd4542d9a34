//! What a Gateway build keeps of each HTTPRoute's translation for the next one: the route's
//! status, the places it attached to, its rules and their candidates, the listeners it was
//! counted on and its warnings, with the inputs they came from (the route itself, the listeners
//! of the Gateways it names, its namespace's labels, the ReferenceGrants of the namespaces its
//! backends are in). A Gateway-only build takes a route's output from here when none of those
//! changed and translates only the others again; the routers are then assembled from the
//! outputs, sharing the previous table's host levels that no route translated again touches
//! (`assemble.rs`). Held to what a full build gives by the equality tests in
//! `translate/tests/gateway.rs`.
//!
//! Pure like the rest of translate: owned by the memo, never by the table, and it must not
//! change what a build gives, only how much work it takes. The Services a route names are not
//! among the inputs checked here: the cache is used only with the entry index it was made
//! with (the same `Arc`), and any Service change is a full build that makes a new index.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::api::{HTTPRoute, HTTPRouteFilter, HTTPRouteSpec, ReferenceGrant, ReferenceGrantSpec};
use super::view::{Allowed, ListenerView, Matched, Place, RouteKind};
use crate::control::translate::inputs::meta_key;
use crate::control::translate::view::*;
use crate::table::gateway::GatewayRule;
use crate::table::matcher::HostPattern;
use crate::table::pattern::PatternError;

/// The most failed patterns a Gateway-only build carries over without having asked for them
/// (those of routes it did not translate again); a full build keeps only those it asked for.
/// Bounds what a stream of routes with distinct bad patterns can hold between full builds.
const MAX_CARRIED_FAILURES: usize = 4_096;

/// One build's route outputs and the inputs they were judged by.
pub(crate) struct RouteCache {
    /// The entry index the cached rules' entry ids refer to.
    pub(super) index: Arc<EntryIndex>,
    /// By (namespace, name), in that order: every route the build looked at.
    pub(super) routes: Vec<Arc<CachedRoute>>,
    /// Our Gateways' listeners as routes saw them, by Gateway key.
    pub(super) gateways: BTreeMap<ObjectKey, Vec<ListenerSig>>,
    /// Namespace labels (a namespace without labels is absent).
    pub(super) namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// ReferenceGrants by the namespace they grant into, sorted by name.
    pub(super) grants: BTreeMap<String, Vec<(String, ReferenceGrantSpec)>>,
    /// Regular expressions that did not compile, by source: not tried again.
    pub(super) failed: HashMap<Box<str>, PatternError>,
    /// Routes translated by the build that made this (the others were taken from the cache).
    pub(crate) compiled: usize,
    /// Host levels of the Gateway routers that build made (the others it shared with the
    /// previous table).
    pub(crate) levels_made: usize,
    /// That build took every route's output from the cache, on unchanged listeners: it left
    /// the Gateway routers and the routes' status unassembled, to be shared with the
    /// previous table and memo, which they would equal.
    pub(crate) same_routes: bool,
    /// Patterns that failed to compile in that build (not those known to fail).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) failures_compiled: usize,
}

/// One route's translation and the route it came from.
pub(super) struct CachedRoute {
    /// HTTPRoute or GRPCRoute (whose `spec` is the HTTPRoute it means).
    pub(super) kind: RouteKind,
    pub(super) key: ObjectKey,
    spec: HTTPRouteSpec,
    generation: Option<i64>,
    created: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    pub(super) output: RouteOutput,
}

/// What translating one route gives, before the routers are assembled.
pub(super) struct RouteOutput {
    /// Its parents' status; `None`: it names no Gateway of ours (nothing else is set).
    pub(super) parents: Option<Arc<super::api::RouteStatus>>,
    /// Its creation time as its candidates rank by.
    pub(super) created: String,
    /// Where its candidates go (empty: nowhere, but its rules are still in the table).
    pub(super) places: Vec<Place>,
    /// Its rules, shared by the table's candidates.
    pub(super) rules: Vec<Arc<GatewayRule>>,
    /// Per rule of `rules`, its index in the route and its matches.
    pub(super) made: Vec<(usize, Vec<Matched>)>,
    /// The listeners it is counted on: Gateway key and listener index.
    pub(super) attached: Vec<(ObjectKey, usize)>,
    pub(super) warnings: Vec<Warning>,
}

/// A listener as a route's attachment reads it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ListenerSig {
    name: String,
    /// The ListenerSet it comes from: routes reach it through that set alone.
    set: Option<(String, String)>,
    https: bool,
    /// The Gateway's own addresses: routes attached to it land in each one's routers.
    addresses: Vec<IpAddr>,
    port: i32,
    hostname: Option<HostPattern>,
    usable: bool,
    kinds: Vec<RouteKind>,
    namespaces: AllowedSig,
}

#[derive(Debug, Clone, PartialEq)]
enum AllowedSig {
    Same,
    All,
    Selector(LabelSelector),
}

impl ListenerSig {
    pub(super) fn of(v: &ListenerView<'_>) -> Self {
        ListenerSig {
            name: v.name.to_string(),
            set: v.set.map(|(ns, name)| (ns.to_string(), name.to_string())),
            https: v.https,
            addresses: v.addresses.clone(),
            port: v.port,
            hostname: v.hostname.clone(),
            usable: v.usable,
            kinds: v.kinds.clone(),
            namespaces: match &v.namespaces {
                Allowed::Same => AllowedSig::Same,
                Allowed::All => AllowedSig::All,
                Allowed::Selector(s) => AllowedSig::Selector((*s).clone()),
            },
        }
    }
}

/// What changed among the inputs routes read, since the cache was made.
#[derive(Default)]
pub(super) struct Changed {
    /// Gateways whose listeners changed (added or gone included).
    pub(super) gateways: Vec<ObjectKey>,
    namespaces: Vec<String>,
    grants: Vec<String>,
}

/// The inputs besides the routes, as this build sees them.
pub(super) struct Context {
    pub(super) gateways: BTreeMap<ObjectKey, Vec<ListenerSig>>,
    pub(super) namespaces: BTreeMap<String, BTreeMap<String, String>>,
    pub(super) grants: BTreeMap<String, Vec<(String, ReferenceGrantSpec)>>,
}

impl Context {
    pub(super) fn new(
        gateways: BTreeMap<ObjectKey, Vec<ListenerSig>>,
        namespace_labels: &HashMap<&str, &BTreeMap<String, String>>,
        grants: &[&ReferenceGrant],
    ) -> Self {
        let namespaces = namespace_labels
            .iter()
            .filter(|(_, l)| !l.is_empty())
            .map(|(n, l)| (n.to_string(), (*l).clone()))
            .collect();
        let mut by_ns: BTreeMap<String, Vec<(String, ReferenceGrantSpec)>> = BTreeMap::new();
        for g in grants {
            let (ns, name) = meta_key(&g.metadata.namespace, &g.metadata.name);
            by_ns
                .entry(ns.to_string())
                .or_default()
                .push((name.to_string(), g.spec.clone()));
        }
        for list in by_ns.values_mut() {
            // Order does not matter to `Grants::allows`; sorted, a reordered input is no change.
            list.sort_by(|a, b| a.0.cmp(&b.0));
        }
        Context {
            gateways,
            namespaces,
            grants: by_ns,
        }
    }
}

impl RouteCache {
    /// Whether this cache may serve a build whose entries are `index`.
    pub(super) fn serves(&self, index: &Arc<EntryIndex>) -> bool {
        Arc::ptr_eq(&self.index, index)
    }

    /// What differs between the inputs this cache was made from and `now`.
    pub(super) fn changed(&self, now: &Context) -> Changed {
        Changed {
            gateways: differing(&self.gateways, &now.gateways),
            namespaces: differing(&self.namespaces, &now.namespaces),
            grants: differing(&self.grants, &now.grants),
        }
    }

    /// The failures to carry into the next cache besides those asked for this build.
    pub(super) fn carried_failures(&self) -> impl Iterator<Item = (&Box<str>, &PatternError)> {
        self.failed.iter().take(MAX_CARRIED_FAILURES)
    }
}

/// Keys whose values differ between `a` and `b`, including those in one only.
fn differing<K: Ord + Clone, V: PartialEq>(a: &BTreeMap<K, V>, b: &BTreeMap<K, V>) -> Vec<K> {
    let mut out: Vec<K> = a
        .iter()
        .filter(|(k, v)| b.get(*k) != Some(*v))
        .map(|(k, _)| k.clone())
        .collect();
    out.extend(b.keys().filter(|k| !a.contains_key(*k)).cloned());
    out
}

impl CachedRoute {
    pub(super) fn new(
        route: &HTTPRoute,
        kind: RouteKind,
        key: ObjectKey,
        output: RouteOutput,
    ) -> Self {
        CachedRoute {
            kind,
            key,
            spec: route.spec.clone(),
            generation: route.metadata.generation,
            created: route.metadata.creation_timestamp.clone(),
            output,
        }
    }

    /// Whether this output is what translating `route` again would give, with `changed`.
    pub(super) fn still_valid(&self, route: &HTTPRoute, ns: &str, changed: &Changed) -> bool {
        if self.generation != route.metadata.generation
            || self.created != route.metadata.creation_timestamp
            || self.spec != route.spec
        {
            return false;
        }
        // A ListenerSet's Gateway is not named by the route: any change to a Gateway may be
        // its set's (sets are few; such routes are redone).
        let through_set = route
            .spec
            .parent_refs
            .iter()
            .any(|p| p.kind.as_deref() == Some("ListenerSet"));
        if through_set && !changed.gateways.is_empty() {
            return false;
        }
        // The Gateways its parentRefs name, whatever their group and kind (a superset).
        if !changed.gateways.is_empty()
            && route.spec.parent_refs.iter().any(|p| {
                let gw_ns = p.namespace.as_deref().unwrap_or(ns);
                changed
                    .gateways
                    .iter()
                    .any(|(n, name)| n == gw_ns && *name == p.name)
            })
        {
            return false;
        }
        // Its namespace's labels, which a listener's selector may read.
        if changed.namespaces.iter().any(|n| n == ns) {
            return false;
        }
        // The grants of every other namespace its backends and mirrors name.
        changed.grants.is_empty()
            || !foreign_namespaces(&route.spec, ns).any(|n| changed.grants.iter().any(|g| g == n))
    }
}

/// Namespaces other than `ns` that a route's backendRefs and mirror filters name.
fn foreign_namespaces<'r>(spec: &'r HTTPRouteSpec, ns: &'r str) -> impl Iterator<Item = &'r str> {
    let mirrors = |filters: &'r [HTTPRouteFilter]| {
        filters
            .iter()
            .filter_map(|f| f.request_mirror.as_ref())
            .filter_map(|m| m.backend_ref.namespace.as_deref())
    };
    spec.rules
        .iter()
        .flatten()
        .flat_map(move |r| {
            let backends = r.backend_refs.iter().flat_map(move |b| {
                b.backend
                    .namespace
                    .as_deref()
                    .into_iter()
                    .chain(mirrors(&b.filters))
            });
            mirrors(&r.filters).chain(backends)
        })
        .filter(move |n| *n != ns)
}

//! What a build remembers of its inputs (`Memo`, kept by the pipeline beside the table) for
//! the next, incremental one, and a build's result with it (`Built`). Plain data and its
//! fingerprints: it must not build or rebuild anything itself (`build`, `incremental` do).

use std::collections::BTreeSet;
use std::sync::Arc;

use super::gateway::api::GatewayApiStatus;
use super::gateway::cache::RouteCache;
use super::view::*;
use crate::table::RoutingTable;

/// What a table remembers of its inputs, so that the next build can redo only the Services a
/// change set touches: per Service (in build order, which is key order) the versions and keys
/// of its objects and the entries and warnings it gave, and which Service each EndpointSlice
/// feeds. The big parts sit behind `Arc`s and are shared by successive memos until they change.
/// Owned by the pipeline next to the table it describes, never inside it: the data plane has
/// no use for it.
pub struct Memo {
    pub(super) options: u64,
    /// Every object had a namespace and a name and no key came twice, so the keys of a change
    /// set name the same objects as this memo; otherwise only full builds follow.
    pub(super) keyed: bool,
    pub(super) services: Vec<Arc<ServiceMemo>>,
    /// EndpointSlice key -> index in `services` of the Service it feeds.
    pub(super) owner: Arc<HashMap<Arc<ObjectKey>, u32>>,
    /// EndpointSlices that feed no Service (no label, or no such Service).
    pub(super) unused: Arc<BTreeSet<ObjectKey>>,
    /// EndpointSlices whose address type is not served; each has a warning in `input_warnings`.
    pub(super) unserved: Arc<BTreeSet<ObjectKey>>,
    /// EndpointSlices in the input.
    pub(super) slice_count: usize,
    /// Warnings about the input as a whole (unserved slices, duplicates).
    pub(super) input_warnings: Vec<Warning>,
    /// Warnings about Ingresses, their classes and Secrets (any change to those is a full
    /// build, so they stand until the next one).
    pub(super) ingress_warnings: Vec<Warning>,
    /// The Ingresses this table serves (for their status).
    pub(super) served_ingresses: Arc<BTreeSet<ObjectKey>>,
    /// Ingresses of another class (left to other controllers).
    pub(super) other_class_ingresses: usize,
    /// The status of the Gateway API objects this table serves (any change to those is a
    /// full build, so it stands until the next one).
    pub(super) gateway_status: Arc<GatewayApiStatus>,
    /// The warnings of the Gateway API objects (also in `ingress_warnings`), which a
    /// Gateway-only build replaces.
    pub(super) gateway_warnings: Arc<Vec<Warning>>,
    /// The certificates Ingresses named, to which a Gateway-only build adds its listeners'.
    pub(super) ingress_certificates: Arc<Certificates>,
    /// Entry ids by key, when the build had Gateway API objects (a Gateway-only build needs
    /// it; without it the build is a full one).
    pub(super) entry_index: Option<Arc<EntryIndex>>,
    /// Each HTTPRoute's translation as the last Gateway build made it, and the inputs it was
    /// judged by (a Gateway-only build redoes only the routes whose inputs changed).
    pub(super) gateway_cache: Option<Arc<RouteCache>>,
    /// Services with entries that only an Ingress's backend made (their endpoints are redone
    /// by a full build only).
    pub(super) ingress_only: Arc<BTreeSet<ObjectKey>>,
    /// Conflict warnings, which depend on the Services only.
    pub(super) route_warnings: Vec<Warning>,
    /// All of the above and the Services' own, as the build returned them: an incremental
    /// build whose redone Services warn as before returns these without visiting every
    /// Service.
    pub(super) all_warnings: Arc<Vec<Warning>>,
}

pub(super) struct ServiceMemo {
    pub(super) key: ObjectKey,
    /// Of the Service object; `None` when it has no resourceVersion.
    pub(super) version: Option<u64>,
    /// Its EndpointSlices, sorted by key, with their versions.
    pub(super) slices: Vec<(Arc<ObjectKey>, Option<u64>)>,
    /// Its entries are `first..first + count` of the table.
    pub(super) first: usize,
    pub(super) count: usize,
    /// Warnings raised while translating this Service (annotations, endpoints).
    pub(super) warnings: Vec<Warning>,
}

/// What `full` learnt about its input besides the Services.
pub(super) struct MemoInputs {
    pub(super) input_warnings: Vec<Warning>,
    pub(super) unused: Vec<ObjectKey>,
    pub(super) unserved: BTreeSet<ObjectKey>,
    pub(super) slice_count: usize,
    pub(super) ingress_warnings: Vec<Warning>,
    pub(super) gateway_warnings: Arc<Vec<Warning>>,
    pub(super) ingress_certificates: Arc<Certificates>,
}

impl Memo {
    /// The index of the Service `(ns, name)` in build order.
    pub(super) fn slot(&self, ns: &str, name: &str) -> Option<u32> {
        let i = self
            .services
            .binary_search_by(|m| (m.key.0.as_str(), m.key.1.as_str()).cmp(&(ns, name)))
            .ok()?;
        u32::try_from(i).ok()
    }

    /// The Ingresses (namespace, name) the table of this build serves.
    pub fn served_ingresses(&self) -> &Arc<BTreeSet<ObjectKey>> {
        &self.served_ingresses
    }

    /// How many Ingresses this build left to other controllers (their class is not ours).
    pub fn other_class_ingresses(&self) -> usize {
        self.other_class_ingresses
    }

    /// What the Gateway API objects' status should say, as of this table.
    pub fn gateway_status(&self) -> &Arc<GatewayApiStatus> {
        &self.gateway_status
    }

    /// Forgets what the last Gateway build kept of each route: the next Gateway-only build
    /// translates every route again, as builds did before routes were kept (benches compare
    /// the two).
    pub fn forget_gateway_routes(&mut self) {
        self.gateway_cache = None;
    }

    /// How many HTTPRoutes the Gateway build of this memo translated (the others it took
    /// from the previous build); `None` when it had no Gateway API objects.
    pub fn gateway_routes_translated(&self) -> Option<usize> {
        self.gateway_cache.as_ref().map(|c| c.compiled)
    }

    /// How many host levels of the Gateway routers the build of this memo made (the others
    /// it shared with the previous table); `None` when it had no Gateway API objects.
    pub fn gateway_levels_made(&self) -> Option<usize> {
        self.gateway_cache.as_ref().map(|c| c.levels_made)
    }

    /// All warnings of the table this memo describes, sorted as a build returns them.
    pub(super) fn collect_warnings(&self) -> Vec<Warning> {
        let mut w = self.input_warnings.clone();
        w.extend(self.ingress_warnings.iter().cloned());
        w.extend(self.route_warnings.iter().cloned());
        for m in &self.services {
            w.extend(m.warnings.iter().cloned());
        }
        w.sort();
        w.dedup();
        w
    }
}

/// Fingerprints only ever meet fingerprints of the same process, so a fixed-seed aHash will do
/// (several times faster than SipHash on these short strings).
pub(super) fn hash_one<T: std::hash::Hash>(t: &T) -> u64 {
    ahash::RandomState::with_seeds(0x5357, 0x4954, 0x4348, 0x5944).hash_one(t)
}

pub(super) fn options_fingerprint(options: &Options) -> u64 {
    hash_one(&format!("{options:?}"))
}

pub(super) fn version_fingerprint(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<u64> {
    let rv = meta.resource_version.as_deref()?;
    Some(hash_one(&(rv, meta.uid.as_deref())))
}

/// A table and what the next incremental build needs to know of the inputs it came from.
pub struct Built {
    pub table: RoutingTable,
    pub memo: Memo,
}

impl Built {
    /// This build as the next one's `previous`.
    pub fn previous(&self) -> Previous<'_> {
        Previous {
            table: &self.table,
            memo: Some(&self.memo),
        }
    }
}

/// What a build starts from: the table before (its per-endpoint state is carried over by key)
/// and, when it has one, the memo of the build that made it (for incremental builds).
#[derive(Clone, Copy)]
pub struct Previous<'a> {
    pub table: &'a RoutingTable,
    pub memo: Option<&'a Memo>,
}

//! PURE translation: (Services, EndpointSlices, options, previous table[, change set]) ->
//! (RoutingTable, warnings).
//!
//! This is the whole of the routing policy, and the only place that reads Kubernetes objects.
//! It is deterministic (the same objects in any order give the same table and warnings), it
//! never fails as a whole (a bad object yields a warning and a default for that object alone),
//! and it carries runtime state over from the previous table by key. Given what changed since
//! the previous table (a `Changes`, just another input), it redoes only the Services that the
//! change touches and shares the rest by `Arc`; the result is the table a full build would
//! give (a property test holds it to that). It must not do I/O: no async, no client, no clock,
//! no logging; the caller logs the warnings it returns.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};

/// aHash keyed per process: fast, and object names chosen by tenants cannot aim at collisions.
type HashMap<K, V> = std::collections::HashMap<K, V, ahash::RandomState>;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;

use crate::table::balance::Algorithm;
use crate::table::matcher::{
    HostPattern, PathRule, PathRules, Router, validate_host, validate_prefix,
};
use crate::table::{
    CheckSpec, Endpoint, EndpointState, Entry, EntryId, EntryKey, EntryState, Frontend,
    RoutingTable, Shared, TcpFrontend,
};

/// Annotation keys, as the original named them.
pub mod annotation {
    pub const ALGORITHM: &str = "serviceloadbalancer/lb.algorithm";
    pub const HOST: &str = "serviceloadbalancer/lb.host";
    pub const SSL_TERM: &str = "serviceloadbalancer/lb.sslTerm";
    pub const ACL_MATCH: &str = "serviceloadbalancer/lb.aclMatch";
    pub const COOKIE_STICKY: &str = "serviceloadbalancer/lb.cookie-sticky-session";
    pub const MAXCONN: &str = "serviceloadbalancer/lb.maxconn";
    pub const CHECK_INTERVAL: &str = "serviceloadbalancer/lb.check-interval";
    pub const CHECK_PATH: &str = "serviceloadbalancer/lb.check-path";
}

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Client-IP affinity timeout when the Service does not set one (the Kubernetes default).
pub const DEFAULT_AFFINITY_TIMEOUT: Duration = Duration::from_secs(10_800);

/// Longest annotation value we accept; longer ones are a warning.
const MAX_ANNOTATION_LEN: usize = 4096;

/// How to translate; built from flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// `--balance-algorithm`: for Services without a valid `lb.algorithm`.
    pub default_algorithm: Algorithm,
    /// `--target-service`: keep only this Service (`name` in any namespace, or `ns/name`).
    pub target_service: Option<String>,
    /// `--forward-services`: the single endpoint is `clusterIP:port`.
    pub forward_services: bool,
    /// `--tcp-services`: these Service ports become raw TCP frontends.
    pub tcp_services: Vec<TcpService>,
    /// Entries of Services in this namespace are named without a `ns/` prefix.
    pub home_namespace: String,
    /// `--namespace`: serve only Services of this namespace.
    pub only_namespace: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            default_algorithm: Algorithm::RoundRobin,
            target_service: None,
            forward_services: false,
            tcp_services: Vec::new(),
            home_namespace: "default".into(),
            only_namespace: None,
        }
    }
}

/// One `--tcp-services` item: `name:port` or `ns/name:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpService {
    pub namespace: Option<String>,
    pub name: String,
    pub port: u16,
}

impl TcpService {
    fn matches(&self, namespace: &str, name: &str, port: u16) -> bool {
        self.name == name
            && self.port == port
            && self.namespace.as_deref().is_none_or(|n| n == namespace)
    }
}

/// The object a warning is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ObjectRef {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// Why a warning was raised; a bounded set, usable as a metric label and an Event reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum WarningReason {
    /// An annotation value was invalid; its default applies.
    InvalidAnnotation,
    /// Two routes claimed the same host and path (or TCP port); the lower key won.
    RouteConflict,
    /// A Service or port was deliberately not served (UDP, LoadBalancer, ExternalName).
    Skipped,
    /// A field of an object could not be used (bad address, missing name).
    InvalidObject,
    /// The same object appeared twice in the input.
    DuplicateObject,
}

impl WarningReason {
    pub fn as_str(self) -> &'static str {
        match self {
            WarningReason::InvalidAnnotation => "InvalidAnnotation",
            WarningReason::RouteConflict => "RouteConflict",
            WarningReason::Skipped => "Skipped",
            WarningReason::InvalidObject => "InvalidObject",
            WarningReason::DuplicateObject => "DuplicateObject",
        }
    }
}

/// Something the user should know about one object; the rest of the table is unaffected.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Warning {
    pub object: ObjectRef,
    pub reason: WarningReason,
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}",
            self.object,
            self.reason.as_str(),
            self.message
        )
    }
}

/// An object's key as the cluster source's stores hold it: (namespace, name).
pub type ObjectKey = (String, String);

/// Objects by key, as the cluster source keeps them.
pub type Store<K> = BTreeMap<ObjectKey, K>;

/// The keys of the Services and EndpointSlices that were added, modified or deleted since the
/// previous table was built, as the source saw them.
///
/// It is a hint, guarded where that is cheap: a key told in vain costs a look, a Service add or
/// delete, or an EndpointSlice add or delete, that was not told is caught by counting; only a
/// modification that was not told goes unseen, so a source that cannot vouch for its change
/// set passes none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    pub services: BTreeSet<ObjectKey>,
    pub slices: BTreeSet<ObjectKey>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.services.is_empty() && self.slices.is_empty()
    }
}

/// Builds the routing table from whole snapshots, in full; state is carried over from
/// `previous` by key. Never fails; see the module doc for its guarantees.
///
/// Objects are taken by anything that borrows them (`&[Service]`, or `&[&Service]` from a
/// watcher's store), so a rebuild never clones the world.
pub fn translate<S: Borrow<Service>, E: Borrow<EndpointSlice>>(
    services: &[S],
    slices: &[E],
    options: &Options,
    previous: Option<&RoutingTable>,
) -> (RoutingTable, Vec<Warning>) {
    let (built, warnings) = full(
        services.iter().map(Borrow::borrow),
        slices.iter().map(Borrow::borrow),
        options,
        previous,
    );
    (built.table, warnings)
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

/// Builds the routing table from keyed stores and what changed since `previous` was built.
///
/// With a change set, only the Services whose EndpointSlices changed are translated again and
/// everything else is shared with `previous` by `Arc`; the result equals a full build of the
/// stores. Without one (first build, a re-list), or when the change set touches what an
/// incremental build cannot redo alone (a Service added, changed or removed; options; slices
/// of an address type we do not serve), this is a full build.
pub fn translate_changes(
    services: &Store<Service>,
    slices: &Store<EndpointSlice>,
    changes: Option<&Changes>,
    options: &Options,
    previous: Option<Previous<'_>>,
) -> (Built, Vec<Warning>) {
    if let (Some(changes), Some(prev)) = (changes, previous)
        && let Some(memo) = prev.memo
        && let Some(done) = incremental(services, slices, changes, options, prev.table, memo)
    {
        return done;
    }
    full(
        services.values(),
        slices.values(),
        options,
        previous.map(|p| p.table),
    )
}

fn full<'a>(
    services: impl Iterator<Item = &'a Service>,
    slices: impl Iterator<Item = &'a EndpointSlice>,
    options: &Options,
    previous: Option<&RoutingTable>,
) -> (Built, Vec<Warning>) {
    let mut input_warnings = Vec::new();
    let mut index = index_slices(slices, &mut input_warnings);
    let (services, sorted) = dedup_services(services, &mut input_warnings);
    let mut b = Builder::new(options, previous);
    // Sized up front: growing maps of hundreds of thousands of addresses rehashes them often.
    b.prev_endpoints.reserve(index.addresses);
    b.entries.reserve(services.len() * 2);
    b.keyed = index.keyed && sorted;
    b.warnings = input_warnings;
    let input_warnings_len = b.warnings.len();
    for svc in services {
        let before = b.warnings.len();
        let first = b.entries.len();
        let key = meta_key(&svc.metadata.namespace, &svc.metadata.name);
        let svc_slices = index.by_service.remove(&key).unwrap_or_default();
        b.add_service(svc, &svc_slices);
        b.remember(svc, &svc_slices, first, before);
    }
    // What is left belongs to no Service: an incremental build needs to know these keys exist.
    for slice in index.by_service.into_values().flatten() {
        let (ns, name) = meta_key(&slice.metadata.namespace, &slice.metadata.name);
        index.unused.push((ns.to_string(), name.to_string()));
    }
    let inputs = MemoInputs {
        input_warnings: b.warnings[..input_warnings_len].to_vec(),
        unused: index.unused,
        unserved: index.unserved,
        slice_count: index.count,
    };
    b.finish(inputs)
}

// === incremental rebuilds ===

/// What a table remembers of its inputs, so that the next build can redo only the Services a
/// change set touches: per Service (in build order, which is key order) the versions and keys
/// of its objects and the entries and warnings it gave, and which Service each EndpointSlice
/// feeds. The big parts sit behind `Arc`s and are shared by successive memos until they change.
/// Owned by the pipeline next to the table it describes, never inside it: the data plane has
/// no use for it.
pub struct Memo {
    options: u64,
    /// Every object had a namespace and a name and no key came twice, so the keys of a change
    /// set name the same objects as this memo; otherwise only full builds follow.
    keyed: bool,
    services: Vec<Arc<ServiceMemo>>,
    /// EndpointSlice key -> index in `services` of the Service it feeds.
    owner: Arc<HashMap<Arc<ObjectKey>, u32>>,
    /// EndpointSlices that feed no Service (no label, or no such Service).
    unused: Arc<BTreeSet<ObjectKey>>,
    /// EndpointSlices whose address type is not served; each has a warning in `input_warnings`.
    unserved: Arc<BTreeSet<ObjectKey>>,
    /// EndpointSlices in the input.
    slice_count: usize,
    /// Warnings about the input as a whole (unserved slices, duplicates).
    input_warnings: Vec<Warning>,
    /// Conflict warnings, which depend on the Services only.
    route_warnings: Vec<Warning>,
    /// All of the above and the Services' own, as the build returned them: an incremental
    /// build whose redone Services warn as before returns these without visiting every
    /// Service.
    all_warnings: Arc<Vec<Warning>>,
}

struct ServiceMemo {
    key: ObjectKey,
    /// Of the Service object; `None` when it has no resourceVersion.
    version: Option<u64>,
    /// Its EndpointSlices, sorted by key, with their versions.
    slices: Vec<(Arc<ObjectKey>, Option<u64>)>,
    /// Its entries are `first..first + count` of the table.
    first: usize,
    count: usize,
    /// Warnings raised while translating this Service (annotations, endpoints).
    warnings: Vec<Warning>,
}

/// What `full` learnt about its input besides the Services.
struct MemoInputs {
    input_warnings: Vec<Warning>,
    unused: Vec<ObjectKey>,
    unserved: BTreeSet<ObjectKey>,
    slice_count: usize,
}

impl Memo {
    /// The index of the Service `(ns, name)` in build order.
    fn slot(&self, ns: &str, name: &str) -> Option<u32> {
        let i = self
            .services
            .binary_search_by(|m| (m.key.0.as_str(), m.key.1.as_str()).cmp(&(ns, name)))
            .ok()?;
        u32::try_from(i).ok()
    }

    /// All warnings of the table this memo describes, sorted as a build returns them.
    fn collect_warnings(&self) -> Vec<Warning> {
        let mut w = self.input_warnings.clone();
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
fn hash_one<T: std::hash::Hash>(t: &T) -> u64 {
    ahash::RandomState::with_seeds(0x5357, 0x4954, 0x4348, 0x5944).hash_one(t)
}

fn options_fingerprint(options: &Options) -> u64 {
    hash_one(&format!("{options:?}"))
}

fn version_fingerprint(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<u64> {
    let rv = meta.resource_version.as_deref()?;
    Some(hash_one(&(rv, meta.uid.as_deref())))
}

/// The Service an EndpointSlice names, if any.
fn slice_service(slice: &EndpointSlice) -> Option<&str> {
    let labels = slice.metadata.labels.as_ref()?;
    labels.get(SERVICE_NAME_LABEL).map(String::as_str)
}

fn served_address_type(slice: &EndpointSlice) -> bool {
    matches!(slice.address_type.as_str(), "IPv4" | "IPv6")
}

/// Redoes the Services whose EndpointSlices `changes` touches and shares the rest of `prev`.
/// `None`: do a full build (no usable memo, a Service changed, or a guard tripped).
fn incremental(
    services: &Store<Service>,
    slices: &Store<EndpointSlice>,
    changes: &Changes,
    options: &Options,
    prev: &RoutingTable,
    memo: &Memo,
) -> Option<(Built, Vec<Warning>)> {
    if !memo.keyed || memo.options != options_fingerprint(options) {
        return None;
    }
    // Adding, changing or removing a Service moves entry ids and routes: a full build. A
    // Service told in vain (same version) is fine; one added or removed untold is caught here.
    if services.len() != memo.services.len() {
        return None;
    }
    for key in &changes.services {
        let m = &memo.services[memo.slot(&key.0, &key.1)? as usize];
        let version = version_fingerprint(&services.get(key)?.metadata);
        if version.is_none() || version != m.version {
            return None;
        }
    }

    // Each told slice: which Service it fed, which it feeds now.
    let mut count = memo.slice_count;
    let mut affected: BTreeSet<u32> = BTreeSet::new();
    let mut now_feeds: Vec<(&ObjectKey, u32)> = Vec::new();
    let mut moved = false;
    let mut unused_now: Vec<(&ObjectKey, bool)> = Vec::new();
    for key in &changes.slices {
        if key.0.is_empty() || key.1.is_empty() || memo.unserved.contains(key) {
            return None;
        }
        let old = memo.owner.get(key).copied();
        let was_unused = old.is_none() && memo.unused.contains(key);
        let now = slices.get(key);
        let new = match now.and_then(|s| slice_service(s).map(|svc| (s, svc))) {
            None => None,
            Some((s, svc)) => {
                if !served_address_type(s) {
                    return None;
                }
                memo.slot(&key.0, svc)
            }
        };
        if old.is_some() || was_unused {
            count -= 1;
        }
        if now.is_some() {
            count += 1;
        }
        let unused_after = now.is_some() && new.is_none();
        if unused_after != was_unused {
            unused_now.push((key, unused_after));
        }
        if let Some(n) = new {
            now_feeds.push((key, n));
        }
        match (old, new) {
            (None, None) => {}
            (Some(o), Some(n)) if o == n => {
                // Same Service: nothing to redo unless the version moved (or is unknown).
                let m = &memo.services[o as usize];
                let remembered = m
                    .slices
                    .binary_search_by(|(k, _)| (**k).cmp(key))
                    .ok()
                    .map(|i| m.slices[i].1);
                let version = now.and_then(|s| version_fingerprint(&s.metadata));
                if version.is_none() || remembered != Some(version) {
                    affected.insert(o);
                }
            }
            (o, n) => {
                moved = true;
                affected.extend(o);
                affected.extend(n);
            }
        }
    }
    // An EndpointSlice added or removed untold would leave the count off.
    if count != slices.len() {
        return None;
    }

    let owner = if moved {
        let mut o = (*memo.owner).clone();
        for key in &changes.slices {
            o.remove(key);
        }
        for (key, n) in &now_feeds {
            o.insert(Arc::new((*key).clone()), *n);
        }
        Arc::new(o)
    } else {
        Arc::clone(&memo.owner)
    };
    let unused = if unused_now.is_empty() {
        Arc::clone(&memo.unused)
    } else {
        let mut u = (*memo.unused).clone();
        for (key, present) in unused_now {
            if present {
                u.insert(key.clone());
            } else {
                u.remove(key);
            }
        }
        Arc::new(u)
    };

    let mut entries = prev.entries.clone();
    let mut memos = memo.services.clone();
    let mut warnings_changed = false;
    for &slot in &affected {
        let m = &memo.services[slot as usize];
        let svc = services.get(&m.key)?;
        let mut keys: Vec<Arc<ObjectKey>> = m
            .slices
            .iter()
            .filter(|(k, _)| !changes.slices.contains(&**k))
            .map(|(k, _)| Arc::clone(k))
            .collect();
        keys.extend(now_feeds.iter().filter(|(_, n)| *n == slot).map(|(k, _)| {
            owner
                .get_key_value(*k)
                .map_or_else(|| Arc::new((*k).clone()), |(k, _)| Arc::clone(k))
        }));
        keys.sort();
        let objects: Vec<&EndpointSlice> = keys
            .iter()
            .map(|k| slices.get(&**k))
            .collect::<Option<_>>()?;
        // The Service is unchanged, so it yields the same entries in the same order and the
        // routes still point at them; only their endpoints are built again. Endpoint state is
        // looked up among this Service's previous entries (an address new to the Service
        // starts fresh; the health checker copes with one address having several states).
        let own = prev.entries.get(m.first..m.first + m.count)?;
        let mut b = Builder::new_scoped(options, own);
        b.add_service(svc, &objects);
        if b.entries.len() != m.count {
            return None;
        }
        warnings_changed |= b.warnings != m.warnings;
        for (i, e) in b.entries.into_iter().enumerate() {
            entries[m.first + i] = Arc::new(e);
        }
        memos[slot as usize] = Arc::new(ServiceMemo {
            key: m.key.clone(),
            version: m.version,
            slices: keys
                .into_iter()
                .zip(&objects)
                .map(|(k, s)| (k, version_fingerprint(&s.metadata)))
                .collect(),
            first: m.first,
            count: m.count,
            warnings: b.warnings,
        });
    }
    let mut next = Memo {
        options: memo.options,
        keyed: true,
        services: memos,
        owner,
        unused,
        unserved: Arc::clone(&memo.unserved),
        slice_count: count,
        input_warnings: memo.input_warnings.clone(),
        route_warnings: memo.route_warnings.clone(),
        all_warnings: Arc::clone(&memo.all_warnings),
    };
    if warnings_changed {
        next.all_warnings = Arc::new(next.collect_warnings());
    }
    let warnings = next.all_warnings.to_vec();
    let table = RoutingTable {
        generation: 0,
        entries,
        http: Arc::clone(&prev.http),
        https: Arc::clone(&prev.https),
        tcp: prev.tcp.clone(),
    };
    Some((Built { table, memo: next }, warnings))
}

fn meta_key<'a>(namespace: &'a Option<String>, name: &'a Option<String>) -> (&'a str, &'a str) {
    (
        namespace
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or("default"),
        name.as_deref().unwrap_or(""),
    )
}

fn object(kind: &'static str, namespace: &str, name: &str) -> ObjectRef {
    ObjectRef {
        kind,
        namespace: namespace.to_string(),
        name: name.to_string(),
    }
}

/// Sorts Services by key and keeps one per key, chosen by content so that input order does
/// not matter. Also says whether every key was there and came once.
fn dedup_services<'a>(
    services: impl Iterator<Item = &'a Service>,
    warnings: &mut Vec<Warning>,
) -> (Vec<&'a Service>, bool) {
    let before = warnings.len();
    let services = dedup_services_inner(services.collect(), warnings);
    (services, warnings.len() == before)
}

fn dedup_services_inner<'a>(
    services: Vec<&'a Service>,
    warnings: &mut Vec<Warning>,
) -> Vec<&'a Service> {
    // The cluster source hands its store over sorted by key and without duplicates: keep that
    // order as it is instead of sorting it again.
    fn key(s: &Service) -> (&str, &str) {
        meta_key(&s.metadata.namespace, &s.metadata.name)
    }
    if services.iter().all(|s| !key(s).1.is_empty())
        && services.windows(2).all(|w| key(w[0]) < key(w[1]))
    {
        return services;
    }
    let mut by_key: BTreeMap<(&str, &str), Vec<&Service>> = BTreeMap::new();
    for svc in services {
        let (ns, name) = key(svc);
        if name.is_empty() {
            warnings.push(Warning {
                object: object("Service", ns, "<unnamed>"),
                reason: WarningReason::InvalidObject,
                message: "Service has no metadata.name; ignored".into(),
            });
            continue;
        }
        by_key.entry((ns, name)).or_default().push(svc);
    }
    by_key
        .into_iter()
        .map(|((ns, name), mut group)| {
            if group.len() > 1 {
                group.sort_by_cached_key(|s| serde_json::to_string(s).unwrap_or_default());
                group.dedup_by(|a, b| a == b);
                if group.len() > 1 {
                    warnings.push(Warning {
                        object: object("Service", ns, name),
                        reason: WarningReason::DuplicateObject,
                        message: format!(
                            "{} different definitions of this Service; using one chosen by content",
                            group.len()
                        ),
                    });
                }
            }
            group[group.len() - 1]
        })
        .collect()
}

/// EndpointSlices by the Service they feed, and what else a memo needs to know about them.
struct SliceIndex<'a> {
    /// By (namespace, Service name).
    by_service: HashMap<(&'a str, &'a str), Vec<&'a EndpointSlice>>,
    /// Slices without a Service label.
    unused: Vec<ObjectKey>,
    /// Slices of an address type that is not served (each with a warning).
    unserved: BTreeSet<ObjectKey>,
    count: usize,
    /// Endpoint addresses listed, to size maps by.
    addresses: usize,
    /// Every slice had a namespace and a name.
    keyed: bool,
}

fn index_slices<'a>(
    slices: impl Iterator<Item = &'a EndpointSlice>,
    warnings: &mut Vec<Warning>,
) -> SliceIndex<'a> {
    let mut index = SliceIndex {
        by_service: HashMap::default(),
        unused: Vec::new(),
        unserved: BTreeSet::new(),
        count: 0,
        addresses: 0,
        keyed: true,
    };
    for slice in slices {
        index.count += 1;
        let meta = &slice.metadata;
        index.keyed &= meta.namespace.as_deref().is_some_and(|n| !n.is_empty())
            && meta.name.as_deref().is_some_and(|n| !n.is_empty());
        let (ns, slice_name) = meta_key(&meta.namespace, &meta.name);
        let Some(svc) = slice_service(slice) else {
            index.unused.push((ns.to_string(), slice_name.to_string()));
            continue;
        };
        if served_address_type(slice) {
            index.addresses += slice
                .endpoints
                .as_ref()
                .map_or(0, |e| e.iter().map(|e| e.addresses.len()).sum::<usize>());
            index.by_service.entry((ns, svc)).or_default().push(slice);
        } else {
            index
                .unserved
                .insert((ns.to_string(), slice_name.to_string()));
            warnings.push(Warning {
                object: object("EndpointSlice", ns, slice_name),
                reason: WarningReason::Skipped,
                message: format!(
                    "addressType {:?} is not served (only IPv4 and IPv6)",
                    slice.address_type
                ),
            });
        }
    }
    index
}

/// Parsed annotations and spec settings of one Service.
struct Settings {
    algorithm: Algorithm,
    host: Option<HostPattern>,
    acl: Vec<String>,
    ssl_term: bool,
    cookie_sticky: bool,
    maxconn: Option<u32>,
    affinity: Option<Duration>,
    check: CheckSpec,
}

/// Longest check interval accepted, and the shortest non-zero one (the original's `inter 5`
/// meant 5 ms, a check storm; a unit is required so that cannot happen by accident).
const CHECK_INTERVAL_RANGE: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(3600));

/// `lb.check-interval`: `0` (off), or a number with `ms`, `s` or `m` between 100 ms and 1 h.
fn parse_check_interval(v: &str) -> Result<Duration, &'static str> {
    let v = v.trim();
    if v == "0" {
        return Ok(Duration::ZERO);
    }
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| "is not a duration like 5s or 500ms")?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        "" => return Err("needs a unit (ms, s or m)"),
        _ => return Err("has an unknown unit (use ms, s or m)"),
    };
    let (min, max) = CHECK_INTERVAL_RANGE;
    if d.is_zero() {
        Ok(d)
    } else if d < min || d > max {
        Err("must be 0 (off) or between 100ms and 60m")
    } else {
        Ok(d)
    }
}

/// `lb.check-path`: an absolute path (query allowed) of visible ASCII, at most 1 KiB.
fn validate_check_path(v: &str) -> Result<(), &'static str> {
    if !v.starts_with('/') {
        return Err("must start with '/'");
    }
    if v.len() > 1024 {
        return Err("is longer than 1024 characters");
    }
    if !v.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("may only hold visible ASCII characters");
    }
    Ok(())
}

/// Go's `strconv.ParseBool`, which the original used.
fn parse_bool(v: &str) -> Option<bool> {
    match v.trim() {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// A shortened, escaped rendering of a bad value for a warning message.
fn show(v: &str) -> String {
    let short: String = v.chars().take(80).collect();
    let ellipsis = if short.len() < v.len() { "…" } else { "" };
    format!("{short:?}{ellipsis}")
}

/// Reads one Service's annotations, turning bad values into warnings.
struct Annotations<'a> {
    map: Option<&'a BTreeMap<String, String>>,
    who: &'a ObjectRef,
    warnings: &'a mut Vec<Warning>,
}

impl<'a> Annotations<'a> {
    fn warn(&mut self, key: &str, value: &str, why: &str) {
        self.warnings.push(Warning {
            object: self.who.clone(),
            reason: WarningReason::InvalidAnnotation,
            message: format!("{key}: {} {why}", show(value)),
        });
    }

    fn get(&mut self, key: &str) -> Option<&'a str> {
        let v = self.map?.get(key)?;
        if v.len() > MAX_ANNOTATION_LEN {
            self.warn(key, v, "is too long; ignored");
            return None;
        }
        Some(v.as_str())
    }

    fn flag(&mut self, key: &str) -> bool {
        let Some(v) = self.get(key) else {
            return false;
        };
        parse_bool(v).unwrap_or_else(|| {
            self.warn(key, v, "is not a boolean; using false");
            false
        })
    }
}

fn settings(
    svc: &Service,
    options: &Options,
    who: &ObjectRef,
    warnings: &mut Vec<Warning>,
) -> Settings {
    let mut ann = Annotations {
        map: svc.metadata.annotations.as_ref(),
        who,
        warnings,
    };
    let algorithm = match ann.get(annotation::ALGORITHM) {
        None => options.default_algorithm,
        Some(v) => v.parse::<Algorithm>().unwrap_or_else(|_| {
            let why = format!(
                "is not roundrobin, leastconn, first or source; using {}",
                options.default_algorithm
            );
            ann.warn(annotation::ALGORITHM, v, &why);
            options.default_algorithm
        }),
    };
    let host = ann
        .get(annotation::HOST)
        .and_then(|v| match validate_host(v) {
            Ok(h) => Some(h),
            Err(why) => {
                ann.warn(
                    annotation::HOST,
                    v,
                    &format!("is not a valid host ({why}); host rule ignored"),
                );
                None
            }
        });
    let mut acl = BTreeSet::new();
    for p in ann
        .get(annotation::ACL_MATCH)
        .unwrap_or("")
        .split_ascii_whitespace()
    {
        match validate_prefix(p) {
            Ok(()) => {
                acl.insert(p.to_string());
            }
            Err(why) => ann.warn(
                annotation::ACL_MATCH,
                p,
                &format!("is not a valid path prefix ({why}); ignored"),
            ),
        }
    }
    let acl: Vec<String> = acl.into_iter().collect();
    let ssl_term = ann.flag(annotation::SSL_TERM);
    let cookie_sticky = ann.flag(annotation::COOKIE_STICKY);
    let maxconn = ann
        .get(annotation::MAXCONN)
        .and_then(|v| match v.trim().parse::<u32>() {
            Ok(n) if n > 0 => Some(n),
            _ => {
                ann.warn(
                    annotation::MAXCONN,
                    v,
                    "is not a positive integer; no limit",
                );
                None
            }
        });
    let interval =
        ann.get(annotation::CHECK_INTERVAL)
            .and_then(|v| match parse_check_interval(v) {
                Ok(d) => Some(d),
                Err(why) => {
                    ann.warn(
                        annotation::CHECK_INTERVAL,
                        v,
                        &format!("{why}; using the default interval"),
                    );
                    None
                }
            });
    let path = ann
        .get(annotation::CHECK_PATH)
        .and_then(|v| match validate_check_path(v.trim()) {
            Ok(()) => Some(v.trim().into()),
            Err(why) => {
                ann.warn(
                    annotation::CHECK_PATH,
                    v,
                    &format!("{why}; using a TCP connect check"),
                );
                None
            }
        });
    let check = CheckSpec { interval, path };

    let spec = svc.spec.as_ref();
    let affinity = match spec.and_then(|s| s.session_affinity.as_deref()) {
        Some("ClientIP") => {
            let t = spec
                .and_then(|s| s.session_affinity_config.as_ref())
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds);
            Some(match t {
                Some(secs) if secs > 0 => Duration::from_secs(secs.unsigned_abs().into()),
                Some(secs) => {
                    warnings.push(Warning {
                        object: who.clone(),
                        reason: WarningReason::InvalidObject,
                        message: format!(
                            "sessionAffinityConfig.clientIP.timeoutSeconds {secs} is not positive; using {}",
                            DEFAULT_AFFINITY_TIMEOUT.as_secs()
                        ),
                    });
                    DEFAULT_AFFINITY_TIMEOUT
                }
                None => DEFAULT_AFFINITY_TIMEOUT,
            })
        }
        _ => None,
    };
    Settings {
        algorithm,
        host,
        acl,
        ssl_term,
        cookie_sticky,
        maxconn,
        affinity,
        check,
    }
}

/// Where a route lives: frontend, host level, prefix.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct RouteKey {
    frontend: Frontend,
    host: Option<HostPattern>,
    prefix: String,
}

/// A claim on a route key; the entry's `EntryKey` orders claims when several collide.
struct RouteClaim {
    entry: EntryId,
    strip: bool,
}

struct Builder<'a> {
    options: &'a Options,
    prev_endpoints: HashMap<SocketAddr, Shared<EndpointState>>,
    prev_entries: HashMap<EntryKey, Shared<EntryState>>,
    entries: Vec<Entry>,
    // Hash maps: the order routes are inserted in does not matter (conflicts are resolved by
    // entry key, warnings sorted at the end), and tens of thousands of long, alike prefixes make
    // an ordered map spend its time in string comparisons.
    routes: HashMap<RouteKey, Vec<RouteClaim>>,
    tcp: BTreeMap<u16, Vec<EntryId>>,
    warnings: Vec<Warning>,
    memo: Vec<Arc<ServiceMemo>>,
    /// EndpointSlice key -> index in `memo` of its Service.
    owner: HashMap<Arc<ObjectKey>, u32>,
    /// See `Memo::keyed`.
    keyed: bool,
}

impl<'a> Builder<'a> {
    fn new(options: &'a Options, previous: Option<&RoutingTable>) -> Self {
        let mut prev_endpoints = HashMap::default();
        let mut prev_entries = HashMap::default();
        if let Some(prev) = previous {
            for e in &prev.entries {
                prev_entries.insert(e.key.clone(), e.state.clone());
                for ep in &e.endpoints {
                    prev_endpoints.insert(ep.addr, ep.state.clone());
                }
            }
        }
        Builder {
            options,
            prev_endpoints,
            prev_entries,
            entries: Vec::new(),
            routes: HashMap::default(),
            tcp: BTreeMap::new(),
            warnings: Vec::new(),
            memo: Vec::new(),
            owner: HashMap::default(),
            keyed: false,
        }
    }

    /// A builder for one Service whose state comes from its own previous entries only.
    fn new_scoped(options: &'a Options, prev_entries: &[Arc<Entry>]) -> Self {
        let mut b = Builder::new(options, None);
        for e in prev_entries {
            b.prev_entries.insert(e.key.clone(), e.state.clone());
            for ep in &e.endpoints {
                b.prev_endpoints.insert(ep.addr, ep.state.clone());
            }
        }
        b
    }

    /// Records what `svc` contributed (entries from `first`, warnings from `warnings_before`).
    fn remember(
        &mut self,
        svc: &Service,
        slices: &[&EndpointSlice],
        first: usize,
        warnings_before: usize,
    ) {
        let (ns, name) = meta_key(&svc.metadata.namespace, &svc.metadata.name);
        self.keyed &= svc
            .metadata
            .namespace
            .as_deref()
            .is_some_and(|n| !n.is_empty());
        let slot = u32::try_from(self.memo.len()).unwrap_or(u32::MAX);
        let mut keys = Vec::with_capacity(slices.len());
        for s in slices {
            let (sns, sname) = meta_key(&s.metadata.namespace, &s.metadata.name);
            let key = Arc::new((sns.to_string(), sname.to_string()));
            // The same slice key twice: keys no longer name one object each.
            self.keyed &= self.owner.insert(Arc::clone(&key), slot).is_none();
            keys.push((key, version_fingerprint(&s.metadata)));
        }
        keys.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        self.memo.push(Arc::new(ServiceMemo {
            key: (ns.to_string(), name.to_string()),
            version: version_fingerprint(&svc.metadata),
            slices: keys,
            first,
            count: self.entries.len() - first,
            warnings: self.warnings[warnings_before..].to_vec(),
        }));
    }

    fn skip(&mut self, who: &ObjectRef, message: String) {
        self.warnings.push(Warning {
            object: who.clone(),
            reason: WarningReason::Skipped,
            message,
        });
    }

    fn add_service(&mut self, svc: &Service, slices: &[&EndpointSlice]) {
        let (ns, name) = meta_key(&svc.metadata.namespace, &svc.metadata.name);
        if self
            .options
            .only_namespace
            .as_deref()
            .is_some_and(|only| only != ns)
        {
            return;
        }
        if let Some(target) = &self.options.target_service {
            let wanted = match target.split_once('/') {
                Some((tns, tname)) => tns == ns && tname == name,
                None => target == name,
            };
            if !wanted {
                return;
            }
        }
        let who = object("Service", ns, name);
        let spec = svc.spec.as_ref();
        match spec.and_then(|s| s.type_.as_deref()) {
            Some("LoadBalancer") => {
                return self.skip(&who, "type LoadBalancer already has a load balancer".into());
            }
            Some("ExternalName") => {
                return self.skip(&who, "type ExternalName has no endpoints to balance".into());
            }
            _ => {}
        }
        let settings = settings(svc, self.options, &who, &mut self.warnings);
        for sp in spec.and_then(|s| s.ports.as_deref()).unwrap_or(&[]) {
            let protocol = sp.protocol.as_deref().unwrap_or("TCP");
            if protocol != "TCP" {
                self.skip(
                    &who,
                    format!("port {} is {protocol}; only TCP is served", sp.port),
                );
                continue;
            }
            let Ok(port) = u16::try_from(sp.port) else {
                self.warnings.push(Warning {
                    object: who.clone(),
                    reason: WarningReason::InvalidObject,
                    message: format!("port {} is out of range", sp.port),
                });
                continue;
            };
            self.add_port(svc, &who, &settings, sp, port, slices);
        }
    }

    fn add_port(
        &mut self,
        svc: &Service,
        who: &ObjectRef,
        s: &Settings,
        sp: &ServicePort,
        port: u16,
        slices: &[&EndpointSlice],
    ) {
        let (ns, name) = (who.namespace.as_str(), who.name.as_str());
        let key = EntryKey {
            namespace: ns.to_string(),
            service: name.to_string(),
            port,
        };
        let addrs = if self.options.forward_services {
            self.cluster_ip_endpoint(svc, who, port)
                .into_iter()
                .map(|a| (a, false))
                .collect()
        } else {
            endpoint_addrs(sp, slices, &mut self.warnings)
        };
        let endpoints = addrs
            .into_iter()
            .map(|(addr, draining)| {
                // Inserting a new address's state makes every entry of this build that uses the
                // address share it, as later builds do (health checks rely on one per address).
                let state = self.prev_endpoints.entry(addr).or_default().clone();
                Endpoint {
                    draining,
                    ..Endpoint::new(addr, state)
                }
            })
            .collect();
        let entry_name = entry_name(
            (ns != self.options.home_namespace).then_some(ns),
            name,
            port,
        );
        let is_tcp = self
            .options
            .tcp_services
            .iter()
            .any(|t| t.matches(ns, name, port));
        let frontend = if is_tcp {
            Frontend::Tcp(port)
        } else if s.ssl_term {
            Frontend::Https
        } else {
            Frontend::Http
        };
        let id = EntryId::try_from(self.entries.len()).unwrap_or(EntryId::MAX);
        // Routes first, so that the name and key move into the entry instead of being copied.
        if is_tcp {
            self.tcp.entry(port).or_default().push(id);
        } else {
            let prefixes: Vec<(String, bool)> = match (&s.host, s.acl.is_empty()) {
                (_, false) => s.acl.iter().map(|p| (p.clone(), false)).collect(),
                (Some(_), true) => vec![("/".into(), false)],
                (None, true) => {
                    let mut prefix = String::with_capacity(entry_name.len() + 1);
                    prefix.push('/');
                    prefix.push_str(&entry_name);
                    vec![(prefix, true)]
                }
            };
            for (prefix, strip) in prefixes {
                let rk = RouteKey {
                    frontend,
                    host: s.host.clone(),
                    prefix,
                };
                self.routes
                    .entry(rk)
                    .or_default()
                    .push(RouteClaim { entry: id, strip });
            }
        }
        self.entries.push(Entry {
            name: entry_name.into(),
            state: self.prev_entries.get(&key).cloned().unwrap_or_default(),
            key,
            frontend,
            algorithm: s.algorithm,
            // Cookies are an HTTP feature; on a TCP frontend client-IP affinity is what applies.
            cookie_sticky: s.cookie_sticky && !is_tcp,
            client_ip_affinity: s.affinity,
            maxconn: s.maxconn,
            endpoints,
            check: s.check.clone(),
        });
    }

    fn cluster_ip_endpoint(
        &mut self,
        svc: &Service,
        who: &ObjectRef,
        port: u16,
    ) -> Vec<SocketAddr> {
        let ip = svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref());
        match ip.map(str::parse::<IpAddr>) {
            Some(Ok(ip)) => vec![SocketAddr::new(ip, port)],
            _ => {
                self.warnings.push(Warning {
                    object: who.clone(),
                    reason: WarningReason::InvalidObject,
                    message: format!(
                        "--forward-services needs a clusterIP, found {}; no endpoints",
                        show(ip.unwrap_or(""))
                    ),
                });
                Vec::new()
            }
        }
    }

    fn finish(mut self, inputs: MemoInputs) -> (Built, Vec<Warning>) {
        let route_warnings_from = self.warnings.len();
        let mut http = Router::default();
        let mut https = Router::default();
        // Wildcard suffix -> index in its router's list, so building stays linear.
        let mut wildcard_at: HashMap<(Frontend, String), usize> = HashMap::default();
        let routes = std::mem::take(&mut self.routes);
        let entries = &self.entries;
        let key_of = |id: EntryId| &entries[id as usize].key;
        for (rk, mut claims) in routes {
            if claims.len() > 1 {
                claims.sort_by(|a, b| key_of(a.entry).cmp(key_of(b.entry)));
            }
            let winner = &claims[0];
            for loser in &claims[1..] {
                let (lk, wk) = (key_of(loser.entry), key_of(winner.entry));
                self.warnings.push(Warning {
                    object: object("Service", &lk.namespace, &lk.service),
                    reason: WarningReason::RouteConflict,
                    message: format!(
                        "port {} claims {}{} which {wk} also claims; {wk} wins",
                        lk.port,
                        describe_host(&rk.host),
                        rk.prefix,
                    ),
                });
            }
            let router = if rk.frontend == Frontend::Https {
                &mut https
            } else {
                &mut http
            };
            let rules: &mut PathRules<EntryId> = match &rk.host {
                None => &mut router.any_host,
                Some(HostPattern::Exact(h)) => router.exact.entry(h.as_str().into()).or_default(),
                Some(HostPattern::Wildcard(suffix)) => {
                    let i = *wildcard_at
                        .entry((rk.frontend, suffix.clone()))
                        .or_insert_with(|| {
                            router
                                .wildcard
                                .push((suffix.as_str().into(), PathRules::default()));
                            router.wildcard.len() - 1
                        });
                    &mut router.wildcard[i].1
                }
            };
            rules.insert(PathRule {
                prefix: rk.prefix.into(),
                strip: winner.strip,
                target: winner.entry,
            });
        }
        http.finish();
        https.finish();

        let mut tcp = Vec::new();
        for (port, mut claims) in std::mem::take(&mut self.tcp) {
            claims.sort_by(|a, b| key_of(*a).cmp(key_of(*b)));
            let wk = key_of(claims[0]);
            for loser in &claims[1..] {
                let lk = key_of(*loser);
                self.warnings.push(Warning {
                    object: object("Service", &lk.namespace, &lk.service),
                    reason: WarningReason::RouteConflict,
                    message: format!("TCP port {port} is also claimed by {wk}; {wk} wins"),
                });
            }
            tcp.push(TcpFrontend {
                port,
                entry: claims[0],
            });
        }

        let mut unused: BTreeSet<ObjectKey> = inputs.unused.into_iter().collect();
        // A key both unused and fed came twice; the count catches the other repeats.
        let unused_len = unused.len();
        unused.retain(|k| !self.owner.contains_key(k) && !inputs.unserved.contains(k));
        let keyed = self.keyed
            && unused.len() == unused_len
            && unused.len() + self.owner.len() + inputs.unserved.len() == inputs.slice_count;
        let route_warnings = self.warnings[route_warnings_from..].to_vec();
        self.warnings.sort();
        self.warnings.dedup();
        let memo = Memo {
            options: options_fingerprint(self.options),
            keyed,
            services: std::mem::take(&mut self.memo),
            owner: Arc::new(std::mem::take(&mut self.owner)),
            unused: Arc::new(unused),
            unserved: Arc::new(inputs.unserved),
            slice_count: inputs.slice_count,
            input_warnings: inputs.input_warnings,
            route_warnings,
            all_warnings: Arc::new(self.warnings.clone()),
        };
        let table = RoutingTable {
            generation: 0,
            entries: self.entries.into_iter().map(Arc::new).collect(),
            http: Arc::new(http),
            https: Arc::new(https),
            tcp,
        };
        (Built { table, memo }, self.warnings)
    }
}

/// An entry's name: `svc` for port 80, else `svc:port`, with `ns/` in front when `ns` is
/// given. Built by hand at its exact length (it becomes a `Box<str>` without reallocating):
/// `format!` here was a tenth of a large build.
fn entry_name(ns: Option<&str>, name: &str, port: u16) -> String {
    let mut digits = [0u8; 5];
    let mut at = digits.len();
    let mut n = port;
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let digits = &digits[at..];
    let port_len = if port == 80 { 0 } else { 1 + digits.len() };
    let mut s = String::with_capacity(ns.map_or(0, |n| n.len() + 1) + name.len() + port_len);
    if let Some(ns) = ns {
        s.push_str(ns);
        s.push('/');
    }
    s.push_str(name);
    if port != 80 {
        s.push(':');
        s.extend(digits.iter().map(|&d| char::from(d)));
    }
    s
}

fn describe_host(host: &Option<HostPattern>) -> String {
    match host {
        None => String::new(),
        Some(HostPattern::Exact(h)) => h.clone(),
        Some(HostPattern::Wildcard(s)) => format!("*{s}"),
    }
}

/// The endpoint addresses of one Service port, from its EndpointSlices, sorted and
/// deduplicated, each with whether it is draining: ready endpoints take new traffic; endpoints
/// that are not ready but `serving` and `terminating` only keep their sticky clients; all others
/// are left out. An address listed both ways counts as ready.
fn endpoint_addrs(
    sp: &ServicePort,
    slices: &[&EndpointSlice],
    warnings: &mut Vec<Warning>,
) -> Vec<(SocketAddr, bool)> {
    let want_name = sp.name.as_deref().unwrap_or("");
    let target_number = match &sp.target_port {
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(_)) => None,
        None => Some(sp.port),
    };
    // A handful per port: a sorted Vec beats a map, and (addr, false) sorts before (addr, true),
    // so after dedup by address the ready flavour of a doubly listed address is the one kept.
    let mut out: Vec<(SocketAddr, bool)> = Vec::new();
    for slice in slices {
        let ports = slice.ports.as_deref().unwrap_or(&[]);
        let by_name = ports
            .iter()
            .find(|p| p.name.as_deref().unwrap_or("") == want_name);
        // An unnamed Service port may meet a hand-written slice whose port is named: fall back
        // to the number.
        let matched = by_name.or_else(|| {
            (want_name.is_empty())
                .then(|| {
                    ports
                        .iter()
                        .find(|p| p.port.is_some() && p.port == target_number)
                })
                .flatten()
        });
        // A slice without a matching port has no endpoints for this Service port; a matching
        // port without a number means the target port itself.
        let Some(matched) = matched else {
            continue;
        };
        if matched.protocol.as_deref().is_some_and(|pr| pr != "TCP") {
            continue;
        }
        let Some(Ok(number)) = matched.port.or(target_number).map(u16::try_from) else {
            continue;
        };
        for ep in slice.endpoints.as_deref().unwrap_or(&[]) {
            // Unset conditions mean ready, and serving when ready (the API's documented meaning).
            let c = ep.conditions.as_ref();
            let ready = c.and_then(|c| c.ready) != Some(false);
            let serving = c.and_then(|c| c.serving).unwrap_or(ready);
            let terminating = c.and_then(|c| c.terminating).unwrap_or(false);
            let draining = match (ready, serving && terminating) {
                (true, _) => false,
                (false, true) => true,
                (false, false) => continue,
            };
            for a in &ep.addresses {
                match a.parse::<IpAddr>() {
                    Ok(ip) => {
                        out.push((SocketAddr::new(ip, number), draining));
                    }
                    Err(_) => {
                        let (ns, name) = meta_key(&slice.metadata.namespace, &slice.metadata.name);
                        warnings.push(Warning {
                            object: object("EndpointSlice", ns, name),
                            reason: WarningReason::InvalidObject,
                            message: format!("address {} is not an IP address; skipped", show(a)),
                        });
                    }
                }
            }
        }
    }
    out.sort_unstable();
    out.dedup_by_key(|(addr, _)| *addr);
    out
}

#[cfg(test)]
mod tests;

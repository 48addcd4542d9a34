//! Incremental rebuilds: what a build remembers of its inputs (`Memo`, kept by the pipeline
//! beside the table), and the rebuild that redoes only the Services a change set touches and
//! shares the rest by `Arc`. Its result must equal a full build; a property test holds it to
//! that. Pure, like the rest of translate.

use super::*;

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
    pub(super) gateway_cache: Option<Arc<gateway::RouteCache>>,
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

/// The Service an EndpointSlice names, if any.
pub(super) fn slice_service(slice: &EndpointSlice) -> Option<&str> {
    let labels = slice.metadata.labels.as_ref()?;
    labels.get(SERVICE_NAME_LABEL).map(String::as_str)
}

pub(super) fn served_address_type(slice: &EndpointSlice) -> bool {
    matches!(slice.address_type.as_str(), "IPv4" | "IPv6")
}

/// Redoes the Services whose EndpointSlices `changes` touches and shares the rest of `prev`.
/// `None`: do a full build (no usable memo, a Service changed, or a guard tripped).
pub(super) fn incremental(
    services: &Store<Service>,
    slices: &Store<EndpointSlice>,
    ingress: IngressInputs<'_>,
    changes: &Changes,
    options: &Options,
    prev: &RoutingTable,
    memo: &Memo,
) -> Option<(Built, Vec<Warning>)> {
    if !memo.keyed
        || memo.options != options_fingerprint(options)
        || changes.ingress
        || changes.gateway
    {
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
        if memo.ingress_only.contains(&m.key) {
            return None;
        }
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
        // A Secret or ConfigMap change makes the build a full one, so these resolve as they
        // did for the previous table.
        b.trust = Trust::new(ingress.secrets, ingress.config_maps);
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
        ingress_warnings: memo.ingress_warnings.clone(),
        route_warnings: memo.route_warnings.clone(),
        all_warnings: Arc::clone(&memo.all_warnings),
        served_ingresses: Arc::clone(&memo.served_ingresses),
        other_class_ingresses: memo.other_class_ingresses,
        gateway_status: Arc::clone(&memo.gateway_status),
        gateway_warnings: Arc::clone(&memo.gateway_warnings),
        ingress_certificates: Arc::clone(&memo.ingress_certificates),
        entry_index: memo.entry_index.clone(),
        gateway_cache: memo.gateway_cache.clone(),
        ingress_only: Arc::clone(&memo.ingress_only),
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
        policies: Arc::clone(&prev.policies),
        certificates: Arc::clone(&prev.certificates),
        gateway: Arc::clone(&prev.gateway),
    };
    Some((Built { table, memo: next }, warnings))
}

//! Incremental rebuilds: from what a build remembers of its inputs (`memo.rs`), the rebuild
//! that redoes only the Services a change set touches and shares the rest by `Arc`. Its result must equal a full build; a property test holds it to
//! that. Pure, like the rest of translate.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::build::Builder;
use super::inputs::{served_address_type, slice_service};
use super::memo::{Built, Memo, ServiceMemo, options_fingerprint, version_fingerprint};
use super::trust::Trust;
use super::view::*;
use crate::table::RoutingTable;

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
    // UDPRoutes' endpoints are read from slices by the Gateway build, which this one skips.
    if !memo.keyed
        || memo.options != options_fingerprint(options)
        || changes.ingress
        || changes.gateway
        || !prev.streams.udp.is_empty()
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
        // The replicas that share request limits may have changed: the Ingresses' limits
        // are redone (`--limit-scope cluster`; any slice of their Service's namespace).
        if options
            .limit_peers
            .as_ref()
            .is_some_and(|(ns, _)| *ns == key.0)
        {
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
        passthrough: Arc::clone(&prev.passthrough),
        streams: Arc::clone(&prev.streams),
        client_validation: Arc::clone(&prev.client_validation),
    };
    Some((Built { table, memo: next }, warnings))
}

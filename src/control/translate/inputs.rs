//! The inputs as translate reads them: Services deduplicated and sorted by key, EndpointSlices
//! indexed by the Service they feed, object keys. Pure.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::view::*;

pub(super) fn meta_key<'a>(
    namespace: &'a Option<String>,
    name: &'a Option<String>,
) -> (&'a str, &'a str) {
    (
        namespace
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or("default"),
        name.as_deref().unwrap_or(""),
    )
}

pub(super) fn object(kind: &'static str, namespace: &str, name: &str) -> ObjectRef {
    ObjectRef {
        kind,
        namespace: namespace.to_string(),
        name: name.to_string(),
    }
}

/// Sorts Services by key and keeps one per key, chosen by content so that input order does
/// not matter. Also says whether every key was there and came once.
pub(super) fn dedup_services<'a>(
    services: impl Iterator<Item = &'a Service>,
    warnings: &mut Vec<Warning>,
) -> (Vec<&'a Service>, bool) {
    let before = warnings.len();
    let services = dedup_services_inner(services.collect(), warnings);
    (services, warnings.len() == before)
}

pub(super) fn dedup_services_inner<'a>(
    services: Vec<&'a Service>,
    warnings: &mut Vec<Warning>,
) -> Vec<&'a Service> {
    // The cluster source hands its store over sorted by key and without duplicates: keep that
    // order as it is instead of sorting it again.
    pub(super) fn key(s: &Service) -> (&str, &str) {
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
pub(super) struct SliceIndex<'a> {
    /// By (namespace, Service name).
    pub(super) by_service: HashMap<(&'a str, &'a str), Vec<&'a EndpointSlice>>,
    /// Slices without a Service label.
    pub(super) unused: Vec<ObjectKey>,
    /// Slices of an address type that is not served (each with a warning).
    pub(super) unserved: BTreeSet<ObjectKey>,
    pub(super) count: usize,
    /// Endpoint addresses listed, to size maps by.
    pub(super) addresses: usize,
    /// Every slice had a namespace and a name.
    pub(super) keyed: bool,
}

pub(super) fn index_slices<'a>(
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

/// The Service an EndpointSlice names, if any.
pub(super) fn slice_service(slice: &EndpointSlice) -> Option<&str> {
    let labels = slice.metadata.labels.as_ref()?;
    labels.get(SERVICE_NAME_LABEL).map(String::as_str)
}

pub(super) fn served_address_type(slice: &EndpointSlice) -> bool {
    matches!(slice.address_type.as_str(), "IPv4" | "IPv6")
}

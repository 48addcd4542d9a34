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
//!
//! Here: the entry points, and the module list. `view` holds the types every part shares
//! (options, warnings, inputs), `inputs` reads the objects, `annotations` a Service's
//! settings, `endpoints` a port's endpoints, `ingress` the Ingresses (classes, rules, TLS
//! Secrets, their annotations), `build` the full build, `memo` what a build remembers for the
//! next, `incremental` the rebuild from a change set. The parts name each other, never this
//! module.

use std::borrow::Borrow;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

mod annotations;
mod build;
mod endpoints;
pub mod gateway;
mod incremental;
mod ingress;
mod inputs;
mod memo;
pub mod nginx;
mod original;
mod trust;
mod view;

pub use self::annotations::{MAX_DURATION, parse_duration};
pub use self::ingress::{class_of as ingress_class_of, ingress_annotation};
pub use self::memo::{Built, Memo, Previous};
pub use self::original::{Difference, Outcome, migration_preview};
pub use self::view::{
    Changes, DEFAULT_AFFINITY_TIMEOUT, DEFAULT_CONTROLLER_NAME, DEFAULT_GATEWAY_CONTROLLER_NAME,
    GatewayInputs, GatewayRefs, IngressInputs, IngressRefs, ObjectKey, ObjectRef, Options,
    SERVICE_NAME_LABEL, ServiceRoutes, Store, TcpService, Warning, WarningReason, annotation,
};
use self::{build::*, incremental::*, inputs::*, memo::*, trust::*, view::*};
use crate::table::RoutingTable;

// What the tests beside this module (`tests.rs`, `use super::*`) name besides the above.
#[cfg(test)]
use {
    crate::table::balance::Algorithm,
    crate::table::upstream::CaBundle,
    crate::table::{CheckSpec, Endpoint, Entry, Frontend},
    std::time::Duration,
};

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
    let (built, warnings) = translate_with(
        services,
        slices,
        IngressInputs::default(),
        options,
        previous,
    );
    (built.table, warnings)
}

/// `translate` with Ingresses too, keeping the memo (which names the Ingresses served).
pub fn translate_with<S: Borrow<Service>, E: Borrow<EndpointSlice>>(
    services: &[S],
    slices: &[E],
    ingress: IngressInputs<'_>,
    options: &Options,
    previous: Option<&RoutingTable>,
) -> (Built, Vec<Warning>) {
    full(
        services.iter().map(Borrow::borrow),
        slices.iter().map(Borrow::borrow),
        ingress,
        options,
        previous,
        None,
    )
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
    ingress: IngressInputs<'_>,
    changes: Option<&Changes>,
    options: &Options,
    previous: Option<Previous<'_>>,
) -> (Built, Vec<Warning>) {
    if let (Some(changes), Some(prev)) = (changes, previous)
        && let Some(memo) = prev.memo
    {
        let gateway_only = changes.gateway
            && !changes.ingress
            && changes.services.is_empty()
            && changes.slices.is_empty();
        let done = if gateway_only {
            gateway::rebuild(services, ingress, options, prev.table, memo)
        } else {
            incremental(
                services, slices, ingress, changes, options, prev.table, memo,
            )
        };
        if let Some(done) = done {
            return done;
        }
    }
    full(
        services.values(),
        slices.values(),
        ingress,
        options,
        previous.map(|p| p.table),
        previous.and_then(|p| p.memo),
    )
}

fn full<'a>(
    services: impl Iterator<Item = &'a Service>,
    slices: impl Iterator<Item = &'a EndpointSlice>,
    ingress: IngressInputs<'_>,
    options: &Options,
    previous: Option<&RoutingTable>,
    memo: Option<&Memo>,
) -> (Built, Vec<Warning>) {
    let mut input_warnings = Vec::new();
    let mut index = index_slices(slices, &mut input_warnings);
    let (services, sorted) = dedup_services(services, &mut input_warnings);
    let mut b = Builder::new(options, previous);
    b.trust = Trust::new(ingress.secrets, ingress.config_maps);
    b.fresh_states = previous.is_none();
    if previous.is_some() {
        // Sized up front: growing maps of hundreds of thousands of addresses rehashes them
        // often.
        b.prev_endpoints.reserve(index.addresses);
    }
    b.entries.reserve(services.len() * 2);
    b.keyed = index.keyed && sorted;
    b.backend_tls = gateway::backend_tls::BackendTlsPolicies::read(
        ingress.gateway.backend_tls_policies,
        &mut b.trust,
        &mut input_warnings,
    );
    b.warnings = input_warnings;
    let input_warnings_len = b.warnings.len();
    // Services an Ingress may name, and the slices of those that got no entry of their own.
    let mut by_key: HashMap<(&str, &str), (&Service, Vec<&EndpointSlice>)> = HashMap::default();
    let with_ingresses = !ingress.ingresses.is_empty() || !ingress.gateway.is_empty();
    // UDPRoutes' Services: their UDP ports are read from the slices, entry or not.
    let udp_backends = gateway::udp_backend_services(ingress.gateway.udp_routes);
    // `--limit-scope cluster`: the replicas sharing the Ingresses' request limits.
    if let Some((ns, name)) = &options.limit_peers {
        let slices = index.by_service.get(&(ns.as_str(), name.as_str()));
        b.replicas = slices.map_or(1, |s| ingress::ready_endpoints(s)).max(1);
    }
    for svc in services {
        let before = b.warnings.len();
        let first = b.entries.len();
        let key = meta_key(&svc.metadata.namespace, &svc.metadata.name);
        let svc_slices = index.by_service.remove(&key).unwrap_or_default();
        b.add_service(svc, &svc_slices);
        b.remember(svc, &svc_slices, first, before);
        if with_ingresses {
            let kept = if b.entries.len() == first || udp_backends.contains(&key) {
                svc_slices
            } else {
                Vec::new()
            };
            by_key.insert(key, (svc, kept));
        }
    }
    let ingress_from = b.warnings.len();
    b.add_ingresses(ingress, &by_key);
    let ingress_certificates = Arc::new(b.certificates.clone());
    let gateway_from = b.warnings.len();
    b.add_gateways(
        ingress.gateway,
        ingress.secrets,
        &by_key,
        previous.map(|p| &*p.gateway),
        memo.and_then(|m| m.gateway_cache.as_deref()),
    );
    let ingress_warnings = b.warnings[ingress_from..].to_vec();
    let gateway_warnings = Arc::new(b.warnings[gateway_from..].to_vec());
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
        ingress_warnings,
        gateway_warnings,
        ingress_certificates,
    };
    b.finish(inputs)
}

#[cfg(test)]
mod tests;

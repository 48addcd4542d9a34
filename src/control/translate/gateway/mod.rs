//! Gateway API: GatewayClasses claimed by `--gateway-controller-name`, their Gateways'
//! listeners, the HTTPRoutes and GRPCRoutes attached to them and the ReferenceGrants that let
//! a route or a listener name an object in another namespace, turned into routes of the table
//! and into the status each object should show. Pure, like the rest of translate.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::view::*;
use crate::control::translate::build::{Builder, secret_certs};
use crate::control::translate::gateway::api::GatewayApiStatus;
use crate::control::translate::inputs::meta_key;
use crate::control::translate::memo::{Built, Memo, options_fingerprint};
use crate::control::translate::trust::Trust;
use crate::table::RoutingTable;
use crate::table::client_validation::ClientValidations;
use backend_tls::BackendTlsPolicies;

mod address;
pub mod api;
mod assemble;
mod attach;
pub(super) mod backend_tls;
mod build;
pub(super) mod cache;
mod classes;
mod grpc;
mod listeners;
mod rules;
mod status;
mod streams;
mod view;

/// The Services (namespace, name) UDPRoutes name as backends: their slices are kept for the
/// Gateway build, which reads their UDP ports' endpoints.
pub(super) fn udp_backend_services<'a>(
    routes: &[&'a api::UDPRoute],
) -> BTreeSet<(&'a str, &'a str)> {
    routes
        .iter()
        .flat_map(|r| {
            let (ns, _) = meta_key(&r.metadata.namespace, &r.metadata.name);
            r.spec
                .rules
                .iter()
                .flat_map(|rule| &rule.backend_refs)
                .map(move |b| {
                    (
                        b.backend.namespace.as_deref().unwrap_or(ns),
                        b.backend.name.as_str(),
                    )
                })
        })
        .collect()
}

/// The build after a change to Gateway API objects or Namespaces alone: the Gateway routes,
/// their certificates and status are redone, everything else is shared with `prev`. Only
/// the HTTPRoutes whose inputs changed are translated again; the others' output comes from
/// the memo's cache (`cache.rs`), and the routers are assembled from all of them. The result
/// is the table a full build would give (tests hold it to that along random changes).
/// `None`: do a full build (no usable memo, or a backend that needs an entry the previous
/// table lacks).
pub(super) fn rebuild(
    services: &Store<Service>,
    inputs: IngressInputs<'_>,
    options: &Options,
    prev: &RoutingTable,
    memo: &Memo,
) -> Option<(Built, Vec<Warning>)> {
    // A UDPRoute's endpoints come from slices, which this build does not read.
    if !memo.keyed
        || memo.options != options_fingerprint(options)
        || !inputs.gateway.udp_routes.is_empty()
    {
        return None;
    }
    let index = memo.entry_index.clone()?;
    let mut b = Builder::new(options, None);
    b.frozen = Some((index, &prev.entries));
    // For the policies' status; their warnings are the full build's, kept in the memo.
    b.trust = Trust::new(inputs.secrets, inputs.config_maps);
    b.backend_tls = BackendTlsPolicies::read(
        inputs.gateway.backend_tls_policies,
        &mut b.trust,
        &mut Vec::new(),
    );
    b.certificates = (*memo.ingress_certificates).clone();
    let by_key: HashMap<(&str, &str), (&Service, Vec<&EndpointSlice>)> = services
        .values()
        .map(|s| {
            (
                meta_key(&s.metadata.namespace, &s.metadata.name),
                (s, Vec::new()),
            )
        })
        .collect();
    b.add_gateways(
        inputs.gateway,
        inputs.secrets,
        &by_key,
        Some(&prev.gateway),
        memo.gateway_cache.as_deref(),
    );
    if b.needs_full {
        return None;
    }
    let gateway_warnings = Arc::new(std::mem::take(&mut b.warnings));
    let replace = |list: &[Warning]| -> Vec<Warning> {
        let old: BTreeSet<&Warning> = memo.gateway_warnings.iter().collect();
        let mut out: Vec<Warning> = list.iter().filter(|w| !old.contains(w)).cloned().collect();
        out.extend(gateway_warnings.iter().cloned());
        out
    };
    // Nothing of the routes changed: their routers and status are the previous build's.
    let same_routes = b.gateway_cache.as_ref().is_some_and(|c| c.same_routes);
    let gateway_status = if same_routes {
        let prev = &memo.gateway_status;
        if prev.classes == b.gateway_status.classes
            && prev.gateways == b.gateway_status.gateways
            && prev.tcp_routes == b.gateway_status.tcp_routes
            && prev.tls_routes == b.gateway_status.tls_routes
            && prev.backend_tls_policies == b.gateway_status.backend_tls_policies
        {
            Arc::clone(prev)
        } else {
            Arc::new(GatewayApiStatus {
                http_routes: prev.http_routes.clone(),
                grpc_routes: prev.grpc_routes.clone(),
                ..std::mem::take(&mut b.gateway_status)
            })
        }
    } else {
        Arc::new(std::mem::take(&mut b.gateway_status))
    };
    let mut all = replace(&memo.all_warnings);
    all.sort();
    all.dedup();
    let next = Memo {
        options: memo.options,
        keyed: memo.keyed,
        services: memo.services.clone(),
        owner: Arc::clone(&memo.owner),
        unused: Arc::clone(&memo.unused),
        unserved: Arc::clone(&memo.unserved),
        slice_count: memo.slice_count,
        input_warnings: memo.input_warnings.clone(),
        ingress_warnings: replace(&memo.ingress_warnings),
        route_warnings: memo.route_warnings.clone(),
        all_warnings: Arc::new(all.clone()),
        served_ingresses: Arc::clone(&memo.served_ingresses),
        other_class_ingresses: memo.other_class_ingresses,
        gateway_status,
        gateway_warnings,
        ingress_certificates: Arc::clone(&memo.ingress_certificates),
        entry_index: memo.entry_index.clone(),
        gateway_cache: b.gateway_cache.take(),
        ingress_only: Arc::clone(&memo.ingress_only),
    };
    let table = RoutingTable {
        generation: 0,
        entries: prev.entries.clone(),
        http: Arc::clone(&prev.http),
        https: Arc::clone(&prev.https),
        tcp: prev.tcp.clone(),
        policies: Arc::clone(&prev.policies),
        certificates: Arc::new(secret_certs(
            std::mem::take(&mut b.certificates),
            std::mem::take(&mut b.address_certificates),
        )),
        gateway: if same_routes {
            Arc::clone(&prev.gateway)
        } else {
            Arc::new(std::mem::take(&mut b.gateway_routes))
        },
        passthrough: Arc::clone(&prev.passthrough),
        streams: Arc::new(std::mem::take(&mut b.streams)),
        // The Ingress hosts' are the previous table's: no Ingress changed.
        client_validation: Arc::new(
            ClientValidations::new(std::mem::take(&mut b.client_validations))
                .with_ingress_hosts(prev.client_validation.ingress_hosts.clone()),
        ),
    };
    Some((Built { table, memo: next }, all))
}

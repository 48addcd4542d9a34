//! The Gateway API build, phase by phase: GatewayClasses claimed (`classes.rs`), Gateways'
//! listeners checked and given addresses and certificates (`listeners.rs`), HTTPRoutes
//! attached to the listeners that accept them (`attach.rs`), their rules turned into
//! candidates of the table's Gateway routers (`rules.rs`), and the Gateways' status
//! (`status.rs`), over the shared view of `view.rs`. This file runs the phases in order and
//! holds what joins them: each route is translated on its own (`translate_route`) into an
//! output that the memo's cache keeps (`cache.rs`); the routers are then assembled from the
//! routes' outputs (`assemble.rs`), which in a Gateway-only build makes again only the host
//! levels that the routes it translated touch. Pure; it must not decide a phase's details.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::address::Outcome;
use super::api::*;
use super::attach::{count_attached, namespace_labels};
use super::cache::{self, CachedRoute, RouteCache, RouteOutput};
use super::classes::claim_classes;
use super::grpc::as_http_route;
use super::listeners::{Given, give_addresses};
use super::rules::PatternSource;
use super::streams::streams;
use super::view::{Gateways, Grants, RouteInputs, RouteKind, created_at, listener_key, sorted};
use crate::control::translate::build::Builder;
use crate::control::translate::gateway::assemble;
use crate::control::translate::inputs::{meta_key, object};
use crate::control::translate::view::*;
use crate::table::gateway::{AddressRoutes, GatewayRoutes, ListenerHosts, PortRoutes};
use crate::table::matcher::SharedRouter;
use crate::table::{EntryId, EntryKey};

/// The routes' outputs of one build.
struct Routes {
    outputs: Vec<Arc<CachedRoute>>,
    /// How many were translated (the others came from the cache).
    translated: usize,
    /// Every output is the previous build's, on the same listeners.
    same: bool,
    /// The entries by key, with those the routes added.
    entry_ids: HashMap<EntryKey, EntryId>,
}

impl<'a> Builder<'a> {
    /// Adds the routes of every HTTPRoute attached to one of our Gateways, and decides the
    /// status of our GatewayClasses, their Gateways and those routes.
    pub(crate) fn add_gateways(
        &mut self,
        inputs: GatewayInputs<'_>,
        secrets: &[&Secret],
        services: &HashMap<(&str, &str), (&Service, Vec<&EndpointSlice>)>,
        previous: Option<&GatewayRoutes>,
        previous_cache: Option<&RouteCache>,
    ) {
        if inputs.is_empty() {
            return;
        }
        let mut status = GatewayApiStatus::default();
        let ours = &self.options.gateway_controller_name;
        let classes = claim_classes(inputs.classes, ours, &mut status);
        let grants = Grants::of(inputs.grants);
        let namespace_labels = namespace_labels(inputs.namespaces);
        let mut gateways = self.our_gateways(
            inputs.gateways,
            (inputs.listener_sets, &namespace_labels),
            &classes,
            &grants,
            secrets,
            &mut status,
        );
        let addresses = give_addresses(&self.options.gateway_addresses, &mut gateways, previous);
        self.claim_stream_ports(&mut gateways);
        // Validations first: a listener they refuse has no certificates placed.
        self.place_validations(&mut gateways);
        self.place_certificates(&mut gateways);
        // The inputs routes read besides themselves, and what changed of them since the
        // previous build's cache.
        let context = route_context(&gateways, &namespace_labels, inputs.grants);
        // Only a Gateway-only build takes routes from the cache: its entries are the ones the
        // cached rules name (a full build may number them otherwise).
        let reusable = match (&self.frozen, previous_cache) {
            (Some((index, _)), Some(c)) if c.serves(index) => Some(c),
            _ => None,
        };
        let mut compiled = PatternSource::new(previous, previous_cache);
        let given = RouteInputs {
            gateways: &gateways,
            namespace_labels: &namespace_labels,
            grants: &grants,
            services,
        };
        // GRPCRoutes as the HTTPRoutes they mean, after the HTTPRoutes: each kind in key
        // order, as the cache walks them.
        let grpc: Vec<HTTPRoute> = inputs
            .grpc_routes
            .iter()
            .map(|g| as_http_route(g))
            .collect();
        let grpc: Vec<&HTTPRoute> = grpc.iter().collect();
        let all: Vec<(RouteKind, &HTTPRoute)> = sorted(inputs.routes, |r| &r.metadata)
            .into_iter()
            .map(|r| (RouteKind::Http, r))
            .chain(
                sorted(&grpc, |r| &r.metadata)
                    .into_iter()
                    .map(|r| (RouteKind::Grpc, r)),
            )
            .collect();
        let mut routes = self.translate_routes(&all, reusable, &context, &given, &mut compiled);
        let claims = self.add_streams(inputs, &given, &mut routes.entry_ids, &mut status);
        count_attached(
            &routes.outputs,
            &mut gateways,
            (!routes.same).then_some(&mut status),
        );
        self.streams = streams(claims, &mut gateways, self.options.gateway_https_port);
        let levels_made = self.make_routers(&gateways, &addresses, &routes, reusable, previous);
        self.keep_routes(routes, context, compiled, reusable, levels_made);
        status.backend_tls_policies = self.backend_tls.statuses(&inputs, &gateways, ours);
        self.gateway_statuses(gateways, &addresses, &mut status);
        status.own_addresses = !self.options.gateway_addresses.is_empty();
        self.gateway_status = status;
    }

    /// Every route's output, from the cache where its inputs did not change (`reusable`),
    /// else translated.
    fn translate_routes(
        &mut self,
        routes: &[(RouteKind, &HTTPRoute)],
        reusable: Option<&RouteCache>,
        context: &cache::Context,
        given: &RouteInputs<'_, '_>,
        compiled: &mut PatternSource<'_>,
    ) -> Routes {
        let changed = reusable.map(|c| c.changed(context)).unwrap_or_default();
        let mut entry_ids = self.entry_ids();
        let mut outputs: Vec<Arc<CachedRoute>> = Vec::with_capacity(routes.len());
        // Both in key order: walked side by side.
        let mut cached = reusable
            .map_or(&[][..], |c| c.routes.as_slice())
            .iter()
            .peekable();
        let mut translated = 0;
        for &(kind, route) in routes {
            let (ns, name) = meta_key(&route.metadata.namespace, &route.metadata.name);
            if name.is_empty() {
                continue;
            }
            let mut hit = None;
            while let Some(c) = cached.peek() {
                match (c.kind, c.key.0.as_str(), c.key.1.as_str()).cmp(&(kind, ns, name)) {
                    Ordering::Less => {
                        cached.next();
                    }
                    Ordering::Equal => {
                        hit = cached.next();
                        break;
                    }
                    Ordering::Greater => break,
                }
            }
            if let Some(c) = hit.filter(|c| c.still_valid(route, ns, &changed)) {
                self.warnings.extend(c.output.warnings.iter().cloned());
                outputs.push(Arc::clone(c));
                continue;
            }
            translated += 1;
            let before = self.warnings.len();
            let mut output =
                self.translate_route(route, kind, (ns, name), given, &mut entry_ids, compiled);
            output.warnings = self.warnings[before..].to_vec();
            outputs.push(Arc::new(CachedRoute::new(
                route,
                kind,
                (ns.to_string(), name.to_string()),
                output,
            )));
        }
        // Every output as the previous build had it, on the same listeners (a write that left
        // every spec alone: status, labels nothing selects): the routers and the routes'
        // status would come out as they are in the previous table and memo, which the caller
        // shares instead of assembling them again (`RouteCache::same_routes`).
        let same_routes = reusable.is_some_and(|c| {
            translated == 0
                && changed.gateways.is_empty()
                && c.routes.len() == outputs.len()
                && c.routes
                    .iter()
                    .zip(&outputs)
                    .all(|(a, b)| Arc::ptr_eq(a, b))
        });
        Routes {
            outputs,
            translated,
            same: same_routes,
            entry_ids,
        }
    }

    /// Translates one HTTPRoute (or GRPCRoute, as the HTTPRoute it means) on its own: its
    /// parents' status, where it attached, its
    /// rules and their matches (a candidate's `rule` indexes the route's own rules), the
    /// listeners it is counted on. Warnings go to `self.warnings` as ever; resolving a
    /// backend may add an entry (or, in a Gateway-only build, ask for a full one).
    fn translate_route(
        &mut self,
        route: &HTTPRoute,
        kind: RouteKind,
        (ns, name): (&str, &str),
        given: &RouteInputs<'_, '_>,
        entry_ids: &mut HashMap<EntryKey, EntryId>,
        compiled: &mut PatternSource<'_>,
    ) -> RouteOutput {
        let mut out = RouteOutput {
            parents: None,
            created: String::new(),
            places: Vec::new(),
            rules: Vec::new(),
            made: Vec::new(),
            attached: Vec::new(),
            warnings: Vec::new(),
        };
        let who = object(kind.name(), ns, name);
        let (mut parents, mut places) =
            self.attach_parents(route, kind, ns, given, &mut out.attached);
        if parents.is_empty() {
            return out;
        }
        // The rules, once per route; their candidates go to every place it attached to.
        out.created = created_at(&route.metadata);
        let served = self.serve_rules(&who, route, given, entry_ids, compiled, &mut out);
        let generation = route.metadata.generation;
        self.rule_conditions(&who, generation, served, &mut parents, &mut places);
        out.parents = Some(Arc::new(RouteStatus { parents }));
        out.places = places.into_iter().collect();
        out
    }

    /// The table's Gateway routers: the listeners' host levels, then the routes' outputs
    /// assembled into them (unless they are the previous build's); how many host levels it
    /// made.
    fn make_routers(
        &mut self,
        gateways: &Gateways<'_>,
        addresses: &BTreeMap<(&str, &str), Given>,
        made: &Routes,
        reusable: Option<&RouteCache>,
        previous: Option<&GatewayRoutes>,
    ) -> usize {
        let (outputs, same_routes) = (&made.outputs, made.same);
        let mut routes = GatewayRoutes {
            http_port: self.options.gateway_http_port,
            https_port: self.options.gateway_https_port,
            addressed: addresses
                .iter()
                .flat_map(|((ns, name), a)| {
                    let ips = match &a.outcome {
                        Outcome::Addresses(ips) => ips.as_slice(),
                        _ => &[],
                    };
                    ips.iter().map(|ip| AddressRoutes::new(*ip, ns, name))
                })
                .collect(),
            ..GatewayRoutes::default()
        };
        // Looked up by binary search (`GatewayRoutes::frontend_mut`, `lookup_at`).
        routes.addressed.sort_by_key(|a| a.address);
        // The ports HTTP and HTTPS listeners have of their own (each port one Gateway's,
        // `claim_stream_ports`), on each of its addresses or the bind address.
        for ((ns, name), (_, listeners, _)) in gateways {
            for l in listeners.iter().filter(|l| l.usable) {
                let Some(port) = l.own_port else {
                    continue;
                };
                let addresses: Vec<Option<std::net::IpAddr>> = if l.addresses.is_empty() {
                    vec![None]
                } else {
                    l.addresses.iter().map(|a| Some(*a)).collect()
                };
                for address in addresses {
                    if routes.at_port(address, port).is_none() {
                        routes.ported.push(PortRoutes {
                            address,
                            port,
                            https: l.https,
                            gateway: ((*ns).into(), (*name).into()),
                            router: SharedRouter::default(),
                            hosts: ListenerHosts::default(),
                        });
                        routes.ported.sort_by_key(|p| (p.address, p.port));
                    }
                }
            }
        }
        let mut levels_made = 0;
        if !same_routes {
            // The listeners' hostnames first: candidates carry their listener's id.
            for (_, listeners, _) in gateways.values() {
                for l in listeners.iter().filter(|l| l.usable) {
                    for at in l.frontends() {
                        let Some((_, hosts)) = routes.frontend_mut(at) else {
                            continue;
                        };
                        let (name, wildcard) = listener_key(l.hostname.as_ref());
                        hosts.add(name, wildcard);
                    }
                }
            }
            routes.http_hosts.finish();
            routes.https_hosts.finish();
            for a in &mut routes.addressed {
                a.http_hosts.finish();
                a.https_hosts.finish();
            }
            for p in &mut routes.ported {
                p.hosts.finish();
            }
            // The previous table's host levels are shared when its routes' outputs are the
            // ones this build started from.
            let shared = match (reusable, previous) {
                (Some(c), Some(table)) => Some(assemble::Previous {
                    routes: &c.routes,
                    table,
                }),
                _ => None,
            };
            levels_made = assemble::assemble(outputs, &mut routes, shared);
        }
        self.gateway_routes = routes;
        levels_made
    }

    /// Keeps this build's routes for the next one (`RouteCache`), and the entry index.
    fn keep_routes(
        &mut self,
        routes: Routes,
        context: cache::Context,
        compiled: PatternSource<'_>,
        reusable: Option<&RouteCache>,
        levels_made: usize,
    ) {
        let Routes {
            outputs,
            translated,
            same: same_routes,
            entry_ids,
        } = routes;
        let index = match &self.frozen {
            Some((index, _)) => Arc::clone(index),
            None => {
                let index = Arc::new(entry_ids);
                self.entry_index = Some(Arc::clone(&index));
                index
            }
        };
        let failures_compiled = compiled.failures_compiled;
        let mut failed = compiled.failed;
        if let Some(c) = reusable {
            // The failures of routes taken from the cache, which this build did not ask for.
            for (source, e) in c.carried_failures() {
                failed.entry(source.clone()).or_insert_with(|| e.clone());
            }
        }
        self.gateway_cache = Some(Arc::new(RouteCache {
            index,
            routes: outputs,
            gateways: context.gateways,
            namespaces: context.namespaces,
            grants: context.grants,
            failed,
            compiled: translated,
            levels_made,
            failures_compiled,
            same_routes,
        }));
    }

    pub(super) fn warn_gateway(&mut self, who: &ObjectRef, message: String) {
        self.warnings.push(Warning {
            object: who.clone(),
            reason: WarningReason::InvalidObject,
            message,
        });
    }
}

/// What routes read besides themselves, as the cache compares it: our Gateways' listeners,
/// the namespaces' labels and the ReferenceGrants.
fn route_context(
    gateways: &Gateways<'_>,
    namespace_labels: &HashMap<&str, &BTreeMap<String, String>>,
    grants: &[&ReferenceGrant],
) -> cache::Context {
    cache::Context::new(
        gateways
            .iter()
            .map(|((ns, name), (_, views, _))| {
                (
                    (ns.to_string(), name.to_string()),
                    views.iter().map(cache::ListenerSig::of).collect(),
                )
            })
            .collect(),
        namespace_labels,
        grants,
    )
}

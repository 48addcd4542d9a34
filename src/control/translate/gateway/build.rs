//! The Gateway API build: GatewayClasses claimed, Gateways' listeners checked, HTTPRoutes
//! attached to the listeners that accept them, their rules turned into candidates of the
//! table's Gateway routers, and the status of every object decided on the way. Pure.
//! Each route is translated on its own (`translate_route`) into an output that the memo's
//! cache keeps (`cache.rs`); the routers are then assembled from the routes' outputs
//! (`assemble.rs`), which in a Gateway-only build makes again only the host levels that the
//! routes it translated touch.

use std::cmp::Ordering;
use std::net::IpAddr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::control::translate::ingress::secret_pem;

use super::address::{self, Ask, Claim, Outcome};
use super::api::*;
use super::cache::{self, CachedRoute, RouteCache, RouteOutput};
use super::*;
use crate::table::gateway::{
    Action, AddressRoutes, Backend, Backends, FrontendKey, GatewayRule, HeaderFilter, Mirror,
    PathRewrite, Redirect, ValueMatch,
};
use crate::table::pattern::{Pattern, PatternError, Patterns};

const HTTP_ROUTE: &str = "HTTPRoute";

/// The most regular expressions (path, header and query patterns together) one HTTPRoute's
/// served rules may hold: with each bounded by `Pattern::SIZE_LIMIT`, one route can take at
/// most this many times that. A rule that would go beyond is dropped.
const MAX_ROUTE_PATTERNS: usize = 64;

/// One listener of one of our Gateways, as routes see it.
pub(super) struct ListenerView<'g> {
    gateway: (&'g str, &'g str),
    pub(super) name: &'g str,
    pub(super) https: bool,
    /// The Gateway's own addresses (`--gateway-addresses`); empty: a shared Gateway.
    pub(super) addresses: Vec<IpAddr>,
    pub(super) port: i32,
    /// Lower case; `None`: any host.
    pub(super) hostname: Option<HostPattern>,
    /// Routes may attach (the listener is accepted and takes HTTPRoutes).
    pub(super) usable: bool,
    pub(super) namespaces: Allowed<'g>,
    attached: i32,
    /// An HTTPS listener's certificates (its `certificateRefs`, resolved): placed once every
    /// Gateway's address is known (`place_certificates`).
    certificates: ListenerCertificates,
}

/// An HTTPS listener's certificates: each Secret's key and PEM bundle.
type ListenerCertificates = Vec<(ObjectKey, Arc<[u8]>)>;

/// Which listener has a hostname's certificate in the shared address space.
struct Holder<'g> {
    gateway: (&'g str, &'g str),
    listener: &'g str,
    /// Its `certificateRefs`, resolved.
    secrets: Vec<ObjectKey>,
}

/// Our Gateways by key: each with its listeners as routes see them and their status.
type Gateways<'g> =
    BTreeMap<(&'g str, &'g str), (&'g Gateway, Vec<ListenerView<'g>>, Vec<ListenerStatus>)>;

pub(super) enum Allowed<'g> {
    Same,
    All,
    Selector(&'g LabelSelector),
}

/// Where a route's rules go: a frontend and a host level, for requests of one listener
/// (its hostname).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Place {
    pub(super) at: FrontendKey,
    pub(super) host: Option<HostPattern>,
    pub(super) listener: Option<HostPattern>,
}

/// How a match's path is compared; a regular expression ranks after every exact path and
/// prefix of its host level (`PathRules::lookup_where`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum PathKind {
    Exact,
    Prefix,
    Regex,
}

impl ListenerView<'_> {
    /// The frontends its routes go to: one per address of its Gateway, or the shared one.
    pub(super) fn frontends(&self) -> impl Iterator<Item = FrontendKey> + '_ {
        let shared = self.addresses.is_empty().then_some(None);
        let https = self.https;
        shared
            .into_iter()
            .chain(self.addresses.iter().map(|ip| Some(*ip)))
            .map(move |address| FrontendKey { address, https })
    }
}

impl Matched {
    /// How many regular expressions it holds.
    fn patterns(&self) -> usize {
        usize::from(self.pattern.is_some())
            + self.headers.iter().filter(|h| h.regex.is_some()).count()
            + self.query.iter().filter(|q| q.regex.is_some()).count()
    }
}

/// One match of a rule: a candidate but for its rule (its route's rule of the same place in
/// `RouteOutput::made`) and its listener's id.
pub(super) struct Matched {
    /// Its index in the rule's matches.
    pub(super) index: usize,
    /// The path, prefix or pattern source.
    pub(super) key: Box<str>,
    pub(super) kind: PathKind,
    /// The compiled path pattern (`PathKind::Regex`).
    pub(super) pattern: Option<Box<Pattern>>,
    pub(super) method: Option<Box<str>>,
    /// Header names in lower case.
    pub(super) headers: Box<[ValueMatch]>,
    pub(super) query: Box<[ValueMatch]>,
}

/// Why one rule cannot be served: the route's `Accepted` reason when no rule is left
/// (`UnsupportedValue`, or `IncompatibleFilters` for filters the spec says may not be
/// combined), and what the status says.
struct Invalid {
    reason: &'static str,
    message: String,
}

impl Invalid {
    fn unsupported(message: String) -> Self {
        Invalid {
            reason: "UnsupportedValue",
            message,
        }
    }
}

/// Why a backend reference cannot be used (the `ResolvedRefs` reasons).
struct Unresolved {
    reason: &'static str,
    message: String,
}

impl<'a> Builder<'a> {
    /// Adds the routes of every HTTPRoute attached to one of our Gateways, and decides the
    /// status of our GatewayClasses, their Gateways and those routes.
    pub(in crate::control::translate) fn add_gateways(
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
        let mut compiled = PatternSource {
            previous,
            known: None,
            failed_before: previous_cache.map(|c| &c.failed),
            failed: HashMap::default(),
            failures_compiled: 0,
        };
        let ours = self.options.gateway_controller_name.clone();
        let mut status = GatewayApiStatus::default();
        let mut classes: BTreeSet<&str> = BTreeSet::new();
        for class in sorted(inputs.classes, |c| &c.metadata) {
            if class.spec.controller_name != ours {
                continue;
            }
            let Some(name) = class.metadata.name.as_deref() else {
                continue;
            };
            classes.insert(name);
            let generation = class.metadata.generation;
            status.classes.insert(
                name.to_string(),
                GatewayClassStatus {
                    conditions: vec![
                        Condition::new(
                            "Accepted",
                            true,
                            "Accepted",
                            "claimed by switchyard",
                            generation,
                        ),
                        Condition::new(
                            "SupportedVersion",
                            true,
                            "SupportedVersion",
                            "Gateway API v1 standard channel",
                            generation,
                        ),
                    ],
                },
            );
        }
        let grants = Grants::of(inputs.grants);
        let namespace_labels: HashMap<&str, &BTreeMap<String, String>> = inputs
            .namespaces
            .iter()
            .filter_map(|n| Some((n.metadata.name.as_deref()?, n.metadata.labels.as_ref()?)))
            .collect();
        let secrets: HashMap<(&str, &str), &Secret> = secrets
            .iter()
            .map(|s| (meta_key(&s.metadata.namespace, &s.metadata.name), *s))
            .collect();

        // Listeners of our Gateways, by Gateway key.
        let mut gateways: Gateways<'_> = BTreeMap::new();
        for gw in sorted(inputs.gateways, |g| &g.metadata) {
            let (ns, name) = meta_key(&gw.metadata.namespace, &gw.metadata.name);
            if name.is_empty()
                || !classes.contains(gw.spec.gateway_class_name.as_str())
                || self.outside_namespace(ns)
            {
                continue;
            }
            let (mut views, mut statuses) =
                self.gateway_listeners(gw, (ns, name), &grants, &secrets);
            if gw
                .spec
                .infrastructure
                .as_ref()
                .is_some_and(|i| i.parameters_ref.is_some())
            {
                // A refused Gateway serves nothing (its condition says why).
                unserve(
                    &mut views,
                    &mut statuses,
                    "the Gateway is not accepted",
                    gw.metadata.generation,
                );
            }
            gateways.insert((ns, name), (gw, views, statuses));
        }
        let addresses = give_addresses(&self.options.gateway_addresses, &mut gateways, previous);
        self.place_certificates(&mut gateways);

        // The inputs routes read besides themselves, and what changed of them since the
        // previous build's cache.
        let context = cache::Context::new(
            gateways
                .iter()
                .map(|((ns, name), (_, views, _))| {
                    (
                        (ns.to_string(), name.to_string()),
                        views.iter().map(cache::ListenerSig::of).collect(),
                    )
                })
                .collect(),
            &namespace_labels,
            inputs.grants,
        );
        // Only a Gateway-only build takes routes from the cache: its entries are the ones the
        // cached rules name (a full build may number them otherwise).
        let reusable = match (&self.frozen, previous_cache) {
            (Some((index, _)), Some(c)) if c.serves(index) => Some(c),
            _ => None,
        };
        let changed = reusable.map(|c| c.changed(&context)).unwrap_or_default();
        let mut entry_ids = self.entry_ids();
        let mut outputs: Vec<Arc<CachedRoute>> = Vec::with_capacity(inputs.routes.len());
        // Both in key order: walked side by side.
        let mut cached = reusable
            .map_or(&[][..], |c| c.routes.as_slice())
            .iter()
            .peekable();
        let mut translated = 0;
        for route in sorted(inputs.routes, |r| &r.metadata) {
            let (ns, name) = meta_key(&route.metadata.namespace, &route.metadata.name);
            if name.is_empty() {
                continue;
            }
            let mut hit = None;
            while let Some(c) = cached.peek() {
                match (c.key.0.as_str(), c.key.1.as_str()).cmp(&(ns, name)) {
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
            let mut output = self.translate_route(
                route,
                (ns, name),
                &gateways,
                &namespace_labels,
                &grants,
                services,
                &mut entry_ids,
                &mut compiled,
            );
            output.warnings = self.warnings[before..].to_vec();
            outputs.push(Arc::new(CachedRoute::new(
                route,
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
        // The routes' outputs assembled: status, attached counts, rules, then the routers.
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
        // Routes counted per listener, by Gateway key and listener index; the routes' status.
        let mut attached: BTreeMap<(&str, &str), Vec<i32>> = BTreeMap::new();
        for c in &outputs {
            let o = &c.output;
            for ((gw_ns, gw_name), at) in &o.attached {
                let counts = attached
                    .entry((gw_ns.as_str(), gw_name.as_str()))
                    .or_default();
                if counts.len() <= *at {
                    counts.resize(at + 1, 0);
                }
                counts[*at] += 1;
            }
            if same_routes {
                continue;
            }
            if let Some(route) = &o.parents {
                status.http_routes.insert(c.key.clone(), Arc::clone(route));
            }
        }
        for (key, (_, views, _)) in gateways.iter_mut() {
            if let Some(counts) = attached.get(key) {
                for (v, n) in views.iter_mut().zip(counts) {
                    v.attached += n;
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
            // The previous table's host levels are shared when its routes' outputs are the
            // ones this build started from.
            let shared = match (reusable, previous) {
                (Some(c), Some(table)) => Some(assemble::Previous {
                    routes: &c.routes,
                    table,
                }),
                _ => None,
            };
            levels_made = assemble::assemble(&outputs, &mut routes, shared);
        }
        self.gateway_routes = routes;
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

        for ((ns, name), (gw, listeners, statuses)) in gateways {
            let generation = gw.metadata.generation;
            let given = addresses.get(&(ns, name));
            // Listeners unusable for want of an address count as they were before.
            let (any_usable, all_usable) = match given {
                Some(g) => (g.any_usable, g.all_usable),
                None => (
                    listeners.iter().any(|l| l.usable),
                    listeners.iter().all(|l| l.usable),
                ),
            };
            let outcome = given.map(|g| &g.outcome);
            if let Some(
                Outcome::Unsupported(why) | Outcome::NotUsable(why) | Outcome::NotAssigned(why),
            ) = outcome
            {
                // Offline there is no status to read: the log says it too.
                let who = object("Gateway", ns, name);
                self.warn_gateway(&who, format!("not served: {why}"));
            }
            let mut conditions = Vec::new();
            if let Some(p) = gw
                .spec
                .infrastructure
                .as_ref()
                .and_then(|i| i.parameters_ref.as_ref())
            {
                // No parameters kind is switchyard's: the Gateway is refused, not served.
                conditions.push(Condition::new(
                    "Accepted",
                    false,
                    "InvalidParameters",
                    format!(
                        "infrastructure.parametersRef {} {}: switchyard takes no parameters",
                        p.kind, p.name
                    ),
                    generation,
                ));
                conditions.push(Condition::new(
                    "Programmed",
                    false,
                    "Invalid",
                    "the Gateway is not accepted",
                    generation,
                ));
            } else if let Some(Outcome::Unsupported(why)) = outcome {
                conditions.push(Condition::new(
                    "Accepted",
                    false,
                    "UnsupportedAddress",
                    why.clone(),
                    generation,
                ));
                conditions.push(Condition::new(
                    "Programmed",
                    false,
                    "AddressNotUsable",
                    why.clone(),
                    generation,
                ));
            } else if given.is_none() && !gw.spec.addresses.is_empty() {
                conditions.push(Condition::new(
                    "Accepted",
                    false,
                    "UnsupportedAddress",
                    "switchyard takes its addresses from --publish-service or \
                     --publish-status-address; spec.addresses is not supported",
                    generation,
                ));
                conditions.push(Condition::new(
                    "Programmed",
                    false,
                    "AddressNotUsable",
                    "spec.addresses is not supported",
                    generation,
                ));
            } else {
                let conflicted = statuses.iter().any(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Conflicted" && c.status == "True")
                });
                let (reason, message) = if all_usable && !conflicted {
                    ("Accepted", "accepted")
                } else {
                    ("ListenersNotValid", "some listeners are not valid")
                };
                conditions.push(Condition::new(
                    "Accepted",
                    any_usable || listeners.is_empty(),
                    reason,
                    message,
                    generation,
                ));
                conditions.push(if let Some(Outcome::NotUsable(why)) = outcome {
                    Condition::new(
                        "Programmed",
                        false,
                        "AddressNotUsable",
                        why.clone(),
                        generation,
                    )
                } else if let Some(Outcome::NotAssigned(why)) = outcome {
                    Condition::new(
                        "Programmed",
                        false,
                        "AddressNotAssigned",
                        why.clone(),
                        generation,
                    )
                } else if any_usable {
                    Condition::new("Programmed", true, "Programmed", "serving", generation)
                } else {
                    Condition::new(
                        "Programmed",
                        false,
                        "Invalid",
                        "no listener can be served",
                        generation,
                    )
                });
            }
            let listeners = listeners
                .iter()
                .zip(statuses)
                .map(|(l, mut s)| {
                    s.attached_routes = l.attached;
                    s
                })
                .collect();
            status.gateways.insert(
                (ns.to_string(), name.to_string()),
                GatewayStatus {
                    addresses: match outcome {
                        Some(Outcome::Addresses(ips)) => ips
                            .iter()
                            .map(|ip| GatewayAddress {
                                type_: Some("IPAddress".into()),
                                value: ip.to_string(),
                            })
                            .collect(),
                        _ => Vec::new(),
                    },
                    conditions,
                    listeners,
                },
            );
        }
        status.own_addresses = !self.options.gateway_addresses.is_empty();
        self.gateway_status = status;
    }

    /// Translates one HTTPRoute on its own: its parents' status, where it attached, its
    /// rules and their matches (a candidate's `rule` indexes the route's own rules), the
    /// listeners it is counted on. Warnings go to `self.warnings` as ever; resolving a
    /// backend may add an entry (or, in a Gateway-only build, ask for a full one).
    #[allow(clippy::too_many_arguments)]
    fn translate_route(
        &mut self,
        route: &HTTPRoute,
        (ns, name): (&str, &str),
        gateways: &Gateways<'_>,
        namespace_labels: &HashMap<&str, &BTreeMap<String, String>>,
        grants: &Grants<'_>,
        services: &HashMap<(&str, &str), (&Service, Vec<&EndpointSlice>)>,
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
        let who = object(HTTP_ROUTE, ns, name);
        let generation = route.metadata.generation;
        let mut parents: Vec<RouteParentStatus> = Vec::new();
        let mut places: BTreeSet<Place> = BTreeSet::new();
        let mut attached_here = Vec::new();
        for parent in &route.spec.parent_refs {
            let group = parent.group.as_deref().unwrap_or(GROUP);
            let kind = parent.kind.as_deref().unwrap_or("Gateway");
            if group != GROUP || kind != "Gateway" {
                continue;
            }
            let gw_ns = parent.namespace.as_deref().unwrap_or(ns);
            let Some(((key_ns, key_name), (_, listeners, _))) =
                gateways.get_key_value(&(gw_ns, parent.name.as_str()))
            else {
                continue;
            };
            if parents.iter().any(|p| p.parent_ref == *parent) {
                continue;
            }
            let accepted = attach(
                route,
                ns,
                parent,
                listeners,
                namespace_labels,
                &mut places,
                &mut attached_here,
            );
            for at in attached_here.drain(..) {
                out.attached
                    .push(((key_ns.to_string(), key_name.to_string()), at));
            }
            let cond = match accepted {
                Ok(()) => Condition::new("Accepted", true, "Accepted", "accepted", generation),
                Err((reason, message)) => {
                    Condition::new("Accepted", false, reason, message, generation)
                }
            };
            parents.push(RouteParentStatus {
                parent_ref: parent.clone(),
                controller_name: self.options.gateway_controller_name.clone(),
                conditions: vec![cond],
            });
        }
        if parents.is_empty() {
            return out;
        }
        // The rules, once per route; their candidates go to every place it attached to.
        out.created = route
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default();
        let mut resolved: Result<(), Unresolved> = Ok(());
        let default_rule = [HTTPRouteRule::default()];
        let route_rules = route.spec.rules.as_deref().unwrap_or(&default_rule);
        let mut made: Vec<(usize, Vec<Matched>)> = Vec::new();
        // Rules that cannot be served (an invalid regular expression, a filter switchyard
        // does not offer, filters the spec says may not be combined): each is dropped
        // alone, as the spec's `PartiallyInvalid` condition describes, and the route's
        // other rules serve. The reason is the first dropped rule's.
        let mut dropped: Vec<Invalid> = Vec::new();
        let mut route_patterns = 0;
        for (ri, rule) in route_rules.iter().enumerate() {
            let at = |i: Invalid| Invalid {
                reason: i.reason,
                message: format!("Rule {ri}: {}", i.message),
            };
            let matched = match self.rule_matches(&who, rule, compiled) {
                Ok(m) => m,
                Err(why) => {
                    dropped.push(at(Invalid::unsupported(why)));
                    continue;
                }
            };
            if let Some(why) = incompatible_filters(rule) {
                dropped.push(at(Invalid {
                    reason: "IncompatibleFilters",
                    message: why,
                }));
                continue;
            }
            let patterns_here: usize = matched.iter().map(Matched::patterns).sum();
            if route_patterns + patterns_here > MAX_ROUTE_PATTERNS {
                dropped.push(at(Invalid::unsupported(format!(
                    "the route would hold more than {MAX_ROUTE_PATTERNS} regular expressions"
                ))));
                continue;
            }
            match self.gateway_rule(&who, rule, ri, grants, services, entry_ids) {
                Ok((r, unresolved)) => {
                    route_patterns += patterns_here;
                    if let (Ok(()), Some(u)) = (&resolved, unresolved) {
                        resolved = Err(u);
                    }
                    made.push((ri, matched));
                    out.rules.push(Arc::new(r));
                }
                Err(why) => dropped.push(at(Invalid::unsupported(why))),
            }
        }
        let mut partially = None;
        if let Some(first) = dropped.first() {
            let reason = first.reason;
            let why = format!(
                "Dropped {}",
                dropped
                    .iter()
                    .map(|d| d.message.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            if made.is_empty() {
                // Every rule is invalid: the route is.
                self.warn_gateway(&who, format!("{why}; the route is not served"));
                for p in &mut parents {
                    p.conditions[0] =
                        Condition::new("Accepted", false, reason, why.clone(), generation);
                }
                places.clear();
            } else {
                self.warn_gateway(&who, format!("{why}; the other rules serve"));
                // The spec's one reason for it, whatever the rules' causes (the message
                // says each).
                partially = Some(Condition::new(
                    "PartiallyInvalid",
                    true,
                    "UnsupportedValue",
                    why,
                    generation,
                ));
            }
        }
        let refs = match &resolved {
            Ok(()) => Condition::new("ResolvedRefs", true, "ResolvedRefs", "resolved", generation),
            Err(u) => {
                self.warn_gateway(&who, u.message.clone());
                Condition::new(
                    "ResolvedRefs",
                    false,
                    u.reason,
                    u.message.clone(),
                    generation,
                )
            }
        };
        for p in &mut parents {
            p.conditions.push(refs.clone());
            // Only on a route that is accepted (the spec: never on a refused one).
            if let Some(c) = &partially
                && p.conditions[0].status == "True"
            {
                p.conditions.push(c.clone());
            }
        }
        out.parents = Some(Arc::new(RouteStatus { parents }));
        out.places = places.into_iter().collect();
        out.made = made;
        out
    }

    /// Checks a Gateway's listeners, records their status (but for the attached-route count)
    /// and their certificates.
    fn gateway_listeners<'g>(
        &mut self,
        gw: &'g Gateway,
        (ns, name): (&'g str, &'g str),
        grants: &Grants<'_>,
        secrets: &HashMap<(&str, &str), &Secret>,
    ) -> (Vec<ListenerView<'g>>, Vec<ListenerStatus>) {
        let who = object("Gateway", ns, name);
        let generation = gw.metadata.generation;
        let mut views = Vec::new();
        let mut statuses = Vec::new();
        // (port, hostname) taken by the listeners so far, and each port's protocol.
        let mut seen: BTreeMap<(i32, String), usize> = BTreeMap::new();
        let mut protocols: BTreeMap<i32, &str> = BTreeMap::new();
        for l in &gw.spec.listeners {
            let mut accepted: Result<(), (&str, String)> = Ok(());
            let mut conflicted: Option<(&str, String)> = None;
            let mut refs: Result<(), (&str, String)> = Ok(());
            let https = match l.protocol.as_str() {
                "HTTP" => false,
                "HTTPS" => true,
                other => {
                    accepted = Err((
                        "UnsupportedProtocol",
                        format!("protocol {other} is not served (HTTP and HTTPS are)"),
                    ));
                    false
                }
            };
            let served_port = if https {
                self.options.gateway_https_port
            } else {
                self.options.gateway_http_port
            };
            if accepted.is_ok() && l.port != i32::from(served_port) {
                accepted = Err((
                    "PortUnavailable",
                    format!(
                        "port {} is not served: {} listeners are served on port {served_port} \
                         (--gateway-{}-port)",
                        l.port,
                        l.protocol,
                        if https { "https" } else { "http" }
                    ),
                ));
            }
            let hostname = match l.hostname.as_deref().filter(|h| !h.is_empty()) {
                None => None,
                Some(h) => match gateway_host(h) {
                    Ok(p) => Some(p),
                    Err(why) => {
                        accepted = Err(("UnsupportedValue", format!("hostname {} {why}", show(h))));
                        None
                    }
                },
            };
            let host_key = l.hostname.clone().unwrap_or_default().to_ascii_lowercase();
            match protocols.get(&l.port) {
                Some(p) if *p != l.protocol => {
                    conflicted = Some((
                        "ProtocolConflict",
                        format!("port {} has another protocol", l.port),
                    ));
                }
                _ => {
                    protocols.insert(l.port, &l.protocol);
                }
            }
            if conflicted.is_none() {
                if let Some(&first) = seen.get(&(l.port, host_key.clone())) {
                    conflicted = Some((
                        "HostnameConflict",
                        format!("same port and hostname as listener #{first}"),
                    ));
                } else {
                    seen.insert((l.port, host_key), views.len());
                }
            }
            // Kinds: HTTPRoute is the one this listener can take.
            let allowed = l.allowed_routes.as_ref();
            let kinds = allowed.map(|a| a.kinds.as_slice()).unwrap_or(&[]);
            let mut supported = Vec::new();
            let http_route = RouteGroupKind {
                group: Some(GROUP.into()),
                kind: HTTP_ROUTE.into(),
            };
            if !matches!(l.protocol.as_str(), "HTTP" | "HTTPS") {
                // A listener of a protocol not served supports no kind of route.
            } else if kinds.is_empty() {
                supported.push(http_route.clone());
            } else {
                for k in kinds {
                    if k.group.as_deref().unwrap_or(GROUP) == GROUP && k.kind == HTTP_ROUTE {
                        if !supported.contains(&http_route) {
                            supported.push(http_route.clone());
                        }
                    } else {
                        refs = Err((
                            "InvalidRouteKinds",
                            format!("route kind {} is not supported", k.kind),
                        ));
                    }
                }
            }
            // Client-certificate validation is not carried out yet: a listener asked to verify
            // clients is not served, so that none is served without a valid certificate. With
            // `AllowInsecureFallback` the spec lets clients without one in: served, and said.
            let mut not_served = false;
            if let Some(v) = gw
                .spec
                .tls
                .as_ref()
                .and_then(|t| t.frontend.as_ref())
                .and_then(|f| f.validation_on(l.port))
                .filter(|_| https && accepted.is_ok())
            {
                if v.mode.as_deref() == Some("AllowInsecureFallback") {
                    self.warn_gateway(
                        &who,
                        format!(
                            "listener {}: spec.tls.frontend's client-certificate validation \
                             (AllowInsecureFallback) is not carried out: clients are not asked \
                             for a certificate",
                            l.name
                        ),
                    );
                } else {
                    not_served = true;
                    accepted = Err((
                        "UnsupportedValue",
                        format!(
                            "spec.tls.frontend asks to verify client certificates on port {}, \
                             which switchyard does not carry out yet; not served, so that no \
                             client is served without a valid certificate",
                            l.port
                        ),
                    ));
                }
            }
            let mut certificates = Vec::new();
            if https && accepted.is_ok() {
                match Self::listener_certificates(&who, l, grants, secrets) {
                    Ok(c) => certificates = c,
                    Err(e) => refs = Err(e),
                }
            }
            let namespaces = match allowed
                .and_then(|a| a.namespaces.as_ref())
                .map(|n| (n.from.as_deref().unwrap_or("Same"), n.selector.as_ref()))
            {
                None | Some(("Same", _)) => Allowed::Same,
                Some(("All", _)) => Allowed::All,
                Some(("Selector", Some(sel))) => Allowed::Selector(sel),
                Some((other, _)) => {
                    accepted = Err((
                        "UnsupportedValue",
                        format!(
                            "allowedRoutes.namespaces.from {} (or a missing selector)",
                            show(other)
                        ),
                    ));
                    Allowed::Same
                }
            };
            let usable = accepted.is_ok() && conflicted.is_none() && !supported.is_empty();
            let programmed = usable && refs.is_ok();
            let mut conditions = vec![
                match &accepted {
                    Ok(()) => Condition::new("Accepted", true, "Accepted", "accepted", generation),
                    Err((r, m)) => Condition::new("Accepted", false, r, m.clone(), generation),
                },
                match &conflicted {
                    None => Condition::new(
                        "Conflicted",
                        false,
                        "NoConflicts",
                        "no conflicts",
                        generation,
                    ),
                    Some((r, m)) => Condition::new("Conflicted", true, r, m.clone(), generation),
                },
                match &refs {
                    Ok(()) => {
                        Condition::new("ResolvedRefs", true, "ResolvedRefs", "resolved", generation)
                    }
                    Err((r, m)) => Condition::new("ResolvedRefs", false, r, m.clone(), generation),
                },
            ];
            conditions.push(if programmed {
                Condition::new("Programmed", true, "Programmed", "serving", generation)
            } else {
                Condition::new(
                    "Programmed",
                    false,
                    "Invalid",
                    "not served as configured",
                    generation,
                )
            });
            for c in &conditions {
                if c.status == "False" && c.type_ != "Conflicted" && c.type_ != "Programmed" {
                    let message = format!("listener {}: {}", l.name, c.message);
                    if not_served && c.type_ == "Accepted" {
                        self.warnings.push(Warning {
                            object: who.clone(),
                            reason: WarningReason::NotServed,
                            message,
                        });
                    } else {
                        self.warn_gateway(&who, message);
                    }
                }
            }
            statuses.push(ListenerStatus {
                name: l.name.clone(),
                supported_kinds: supported,
                attached_routes: 0,
                conditions,
            });
            views.push(ListenerView {
                gateway: (ns, name),
                name: &l.name,
                https,
                addresses: Vec::new(),
                port: l.port,
                hostname,
                usable,
                namespaces,
                attached: 0,
                certificates,
            });
        }
        (views, statuses)
    }

    /// Loads the certificates of the served HTTPS listeners into the table, for SNI by the
    /// listener's hostname (or, without one, by the names in the certificate): those of a
    /// Gateway with an address of its own for handshakes to that address, the others for
    /// every address. Two Gateways of the shared address space whose listeners give one
    /// hostname different certificates conflict: the oldest Gateway's (then by namespace and
    /// name, as routes rank) is served, and the other listener says `Conflicted: True`
    /// (`HostnameConflict`) and a warning names both. Its routes stay served, as they are on
    /// the HTTP port, where such listeners share their host levels.
    fn place_certificates(&mut self, gateways: &mut Gateways<'_>) {
        let mut order: Vec<(String, (&str, &str))> = gateways
            .iter()
            .map(|(&key, (gw, _, _))| (created(gw), key))
            .collect();
        order.sort();
        // The shared address space: hostname -> the Gateway, listener and Secrets that have it.
        let mut claimed: HashMap<String, Holder<'_>> = HashMap::default();
        for (_, key) in &order {
            let Some((gw, views, statuses)) = gateways.get_mut(key) else {
                continue;
            };
            let generation = gw.metadata.generation;
            for (l, st) in views.iter().zip(statuses.iter_mut()) {
                if !l.usable || l.certificates.is_empty() {
                    continue;
                }
                let host = match &l.hostname {
                    None => "*".to_string(),
                    Some(HostPattern::Exact(n)) => n.clone(),
                    Some(HostPattern::Wildcard(s) | HostPattern::OneLabel(s)) => format!("*{s}"),
                };
                if l.addresses.is_empty() {
                    let refs: Vec<ObjectKey> =
                        l.certificates.iter().map(|(k, _)| k.clone()).collect();
                    // Without a hostname the certificate's own names are served: which of
                    // two such certificates a name gets is the store's order.
                    match claimed.get(&host) {
                        Some(h) if host != "*" && h.secrets != refs => {
                            let message = format!(
                                "hostname {host} on the TLS port is also listener {} of \
                                 Gateway {}/{}, older (or first by namespace and name), whose \
                                 certificateRefs are served for it; this listener's are not",
                                h.listener, h.gateway.0, h.gateway.1
                            );
                            let who = object("Gateway", key.0, key.1);
                            self.warn_gateway(&who, format!("listener {}: {message}", l.name));
                            for c in st.conditions.iter_mut() {
                                if c.type_ == "Conflicted" {
                                    *c = Condition::new(
                                        "Conflicted",
                                        true,
                                        "HostnameConflict",
                                        message.clone(),
                                        generation,
                                    );
                                }
                            }
                            continue;
                        }
                        Some(_) => {}
                        None => {
                            claimed.insert(
                                host.clone(),
                                Holder {
                                    gateway: *key,
                                    listener: l.name,
                                    secrets: refs,
                                },
                            );
                        }
                    }
                    add_certificates(&mut self.certificates, &l.certificates, &host);
                }
                // A Gateway with addresses of its own has its certificates on each of them.
                for ip in &l.addresses {
                    let certs = self.address_certificates.entry(*ip).or_default();
                    add_certificates(certs, &l.certificates, &host);
                }
            }
        }
    }

    /// An HTTPS listener's certificates, by Secret, or why they cannot be served.
    fn listener_certificates(
        who: &ObjectRef,
        l: &Listener,
        grants: &Grants<'_>,
        secrets: &HashMap<(&str, &str), &Secret>,
    ) -> Result<ListenerCertificates, (&'static str, String)> {
        let Some(tls) = l.tls.as_ref() else {
            return Err((
                "InvalidCertificateRef",
                "an HTTPS listener needs tls.certificateRefs".into(),
            ));
        };
        if tls.mode.as_deref().is_some_and(|m| m != "Terminate") {
            return Err((
                "InvalidTLSConfiguration",
                "only tls.mode Terminate is served".into(),
            ));
        }
        if tls.certificate_refs.is_empty() {
            return Err((
                "InvalidCertificateRef",
                "tls.certificateRefs is empty".into(),
            ));
        }
        let mut out = Vec::with_capacity(tls.certificate_refs.len());
        for r in &tls.certificate_refs {
            let group = r.group.as_deref().unwrap_or("");
            let kind = r.kind.as_deref().unwrap_or("Secret");
            if !(group.is_empty() || group == "core") || kind != "Secret" {
                return Err((
                    "InvalidCertificateRef",
                    format!("certificateRef {kind} {} is not a Secret", r.name),
                ));
            }
            let ns = r.namespace.as_deref().unwrap_or(&who.namespace);
            if ns != who.namespace
                && !grants.allows(("Gateway", &who.namespace), ("", "Secret", ns, &r.name))
            {
                return Err((
                    "RefNotPermitted",
                    format!(
                        "Secret {ns}/{} is in another namespace and no ReferenceGrant allows it",
                        r.name
                    ),
                ));
            }
            let Some(secret) = secrets.get(&(ns, r.name.as_str())) else {
                return Err((
                    "InvalidCertificateRef",
                    format!(
                        "Secret {ns}/{} does not exist (or is not kubernetes.io/tls)",
                        r.name
                    ),
                ));
            };
            let pem = secret_pem(secret).map_err(|why| {
                (
                    "InvalidCertificateRef",
                    format!("Secret {ns}/{} {why}", r.name),
                )
            })?;
            out.push(((ns.to_string(), r.name.clone()), pem));
        }
        Ok(out)
    }

    /// One rule's table form, and the first of its backends (or filters) that does not
    /// resolve. `Err`: a filter or value switchyard does not offer (the rule is then
    /// dropped); checked before any backend is resolved, so a dropped rule makes no entry.
    fn gateway_rule(
        &mut self,
        who: &ObjectRef,
        rule: &HTTPRouteRule,
        index: usize,
        grants: &Grants<'_>,
        services: &HashMap<(&str, &str), (&Service, Vec<&EndpointSlice>)>,
        entry_ids: &mut HashMap<EntryKey, EntryId>,
    ) -> Result<(GatewayRule, Option<Unresolved>), String> {
        let mut out = GatewayRule::answering(
            format!("{}/{} rule {index}", who.namespace, who.name).into(),
            500,
        );
        let mut redirect = None;
        let mut unresolved = None;
        let mut mirrors = Vec::new();
        let mut extension = None;
        for f in &rule.filters {
            match filter(f, &mut out.request_headers, &mut out.response_headers)? {
                Some(Filtered::Redirect(r)) => redirect = Some(r),
                Some(Filtered::Rewrite(host, path)) => {
                    out.rewrite_host = host;
                    out.rewrite_path = path;
                }
                Some(Filtered::Mirror(to, numerator, denominator)) => {
                    mirrors.push((to, numerator, denominator));
                }
                Some(Filtered::Extension(why)) => {
                    extension.get_or_insert(why);
                }
                None => {}
            }
        }
        if let Some(t) = &rule.timeouts {
            out.request_timeout = t
                .request
                .as_deref()
                .map(gateway_duration)
                .transpose()?
                .flatten();
            out.backend_timeout = t
                .backend_request
                .as_deref()
                .map(gateway_duration)
                .transpose()?
                .flatten();
        }
        // Each backendRef's filters, read before any backend is resolved.
        let mut backend_filters = Vec::with_capacity(rule.backend_refs.len());
        for b in &rule.backend_refs {
            let mut request_headers = HeaderFilter::default();
            let mut response_headers = HeaderFilter::default();
            let mut extension = None;
            for f in &b.filters {
                match filter(f, &mut request_headers, &mut response_headers)? {
                    None => {}
                    Some(Filtered::Extension(why)) => {
                        extension.get_or_insert(why);
                    }
                    Some(_) => {
                        return Err(format!(
                            "filter {} on a backendRef is not supported",
                            f.type_
                        ));
                    }
                }
            }
            backend_filters.push((request_headers, response_headers, extension));
        }
        if let Some(message) = extension {
            // The spec: a filter that cannot be resolved is never skipped; the requests it
            // would have processed get an error. So the rule stays (a broader rule must not
            // take its requests without the filter) and answers 500, doing nothing else.
            let failed = GatewayRule::answering(out.origin, 500);
            let u = Unresolved {
                reason: "InvalidKind",
                message,
            };
            return Ok((failed, Some(u)));
        }
        for (to, numerator, denominator) in mirrors {
            match self.gateway_backend(who, &to, grants, services, entry_ids) {
                Ok(entry) => out.mirrors.push(Mirror {
                    entry,
                    numerator,
                    denominator,
                    turn: Shared::default(),
                }),
                Err(u) => {
                    unresolved.get_or_insert(u);
                }
            }
        }
        if let Some(r) = redirect {
            out.action = Action::Redirect(r);
            return Ok((out, unresolved));
        }
        let mut backends = Vec::new();
        for (b, (request_headers, response_headers, extension)) in
            rule.backend_refs.iter().zip(backend_filters)
        {
            let weight = u64::try_from(b.weight.unwrap_or(1)).unwrap_or(0);
            let entry = match extension {
                // Its share is answered 500, as for a backend that does not resolve.
                Some(message) => {
                    unresolved.get_or_insert(Unresolved {
                        reason: "InvalidKind",
                        message,
                    });
                    None
                }
                None => match self.gateway_backend(who, &b.backend, grants, services, entry_ids) {
                    Ok(id) => Some(id),
                    Err(u) => {
                        unresolved.get_or_insert(u);
                        None
                    }
                },
            };
            backends.push(Backend {
                entry,
                weight,
                request_headers,
                response_headers,
            });
        }
        let total: u64 = backends.iter().map(|b| b.weight).sum();
        if total > 0 {
            out.action = Action::Backends(Backends {
                backends: backends.into_boxed_slice(),
                total,
                turn: Shared::default(),
            });
        }
        Ok((out, unresolved))
    }

    /// The entry a backendRef names.
    fn gateway_backend(
        &mut self,
        who: &ObjectRef,
        r: &BackendObjectReference,
        grants: &Grants<'_>,
        services: &HashMap<(&str, &str), (&Service, Vec<&EndpointSlice>)>,
        entry_ids: &mut HashMap<EntryKey, EntryId>,
    ) -> Result<EntryId, Unresolved> {
        let group = r.group.as_deref().unwrap_or("");
        let kind = r.kind.as_deref().unwrap_or("Service");
        if !(group.is_empty() || group == "core") || kind != "Service" {
            return Err(Unresolved {
                reason: "InvalidKind",
                message: format!("backendRef {kind} {} is not a Service", r.name),
            });
        }
        let ns = r.namespace.as_deref().unwrap_or(&who.namespace);
        if ns != who.namespace
            && !grants.allows((HTTP_ROUTE, &who.namespace), ("", "Service", ns, &r.name))
        {
            return Err(Unresolved {
                reason: "RefNotPermitted",
                message: format!(
                    "backend Service {ns}/{} is in another namespace and no ReferenceGrant allows it",
                    r.name
                ),
            });
        }
        let not_found = |message: String| Unresolved {
            reason: "BackendNotFound",
            message,
        };
        let Some((svc, slices)) = services.get(&(ns, r.name.as_str())) else {
            return Err(not_found(format!(
                "backend Service {ns}/{} does not exist",
                r.name
            )));
        };
        let Some(port) = r.port.and_then(|p| u16::try_from(p).ok()) else {
            return Err(not_found(format!(
                "backendRef to Service {ns}/{} has no port",
                r.name
            )));
        };
        let sp = svc
            .spec
            .as_ref()
            .and_then(|s| s.ports.as_deref())
            .unwrap_or(&[])
            .iter()
            .find(|sp| {
                sp.port == i32::from(port) && sp.protocol.as_deref().is_none_or(|p| p == "TCP")
            });
        let Some(sp) = sp else {
            return Err(not_found(format!(
                "backend Service {ns}/{} has no TCP port {port}",
                r.name
            )));
        };
        self.port_entry(svc, slices, sp, port, entry_ids)
            .ok_or_else(|| {
                not_found(format!(
                    "backend {ns}/{}:{port} is a raw TCP frontend",
                    r.name
                ))
            })
    }

    /// A rule's matches as the table takes them (their rule id left to set); `Err`: the rule
    /// cannot be served (a regular expression that does not compile or is too large, or
    /// `ReplacePrefixMatch` with a regular-expression path, which has no prefix to replace).
    fn rule_matches(
        &mut self,
        who: &ObjectRef,
        rule: &HTTPRouteRule,
        compiled: &mut PatternSource<'_>,
    ) -> Result<Vec<Matched>, String> {
        let default_match = [HTTPRouteMatch::default()];
        let matches = match rule.matches.as_deref() {
            None | Some([]) => &default_match[..],
            Some(m) => m,
        };
        let mut out = Vec::with_capacity(matches.len());
        for (index, m) in matches.iter().enumerate() {
            if let Some(m) = self.candidate(who, m, index, compiled)? {
                out.push(m);
            }
        }
        if out.iter().any(|m| m.kind == PathKind::Regex) && replaces_prefix(rule) {
            return Err("ReplacePrefixMatch needs a PathPrefix match, \
                        not a RegularExpression path"
                .into());
        }
        Ok(out)
    }

    /// A match's path key and its candidate; `Ok(None)` (with a warning) for a match
    /// switchyard does not serve; `Err` for a regular expression that cannot be used (its
    /// rule is dropped).
    fn candidate(
        &mut self,
        who: &ObjectRef,
        m: &HTTPRouteMatch,
        index: usize,
        compiled: &mut PatternSource<'_>,
    ) -> Result<Option<Matched>, String> {
        let path_type = m
            .path
            .as_ref()
            .and_then(|p| p.type_.as_deref())
            .unwrap_or("PathPrefix");
        let value = m
            .path
            .as_ref()
            .and_then(|p| p.value.as_deref())
            .unwrap_or("/");
        let skip = |b: &mut Self, why: String| {
            b.warn_gateway(who, format!("{why}; that match is not served"));
            Ok(None)
        };
        // A pattern is any string; exact paths and prefixes are checked as paths.
        if path_type != "RegularExpression"
            && let Err(why) = validate_prefix(value)
        {
            return skip(self, format!("path {} {why}", show(value)));
        }
        let (key, kind, pattern) = match path_type {
            "RegularExpression" => {
                let p = compiled
                    .get(value)
                    .map_err(|e| format!("path regular expression {} {e}", show(value)))?;
                (value, PathKind::Regex, Some(Box::new(p)))
            }
            "Exact" => (value, PathKind::Exact, None),
            "PathPrefix" => (
                match value.trim_end_matches('/') {
                    "" => "/",
                    t => t,
                },
                PathKind::Prefix,
                None,
            ),
            other => {
                return skip(self, format!("path type {} is not supported", show(other)));
            }
        };
        // Header names are case-insensitive (stored folded), query names are not.
        let headers = match value_matches(&m.headers, true, "header", compiled) {
            Ok(v) => v,
            Err(Unusable::Type(why)) => return skip(self, why),
            Err(Unusable::Pattern(why)) => return Err(why),
        };
        let query = match value_matches(&m.query_params, false, "query parameter", compiled) {
            Ok(v) => v,
            Err(Unusable::Type(why)) => return skip(self, why),
            Err(Unusable::Pattern(why)) => return Err(why),
        };
        Ok(Some(Matched {
            index,
            key: key.into(),
            kind,
            pattern,
            method: m.method.as_deref().map(Into::into),
            headers,
            query,
        }))
    }

    fn warn_gateway(&mut self, who: &ObjectRef, message: String) {
        self.warnings.push(Warning {
            object: who.clone(),
            reason: WarningReason::InvalidObject,
            message,
        });
    }
}

/// Attaches `route` to the listeners of `parent` that accept it, recording where its rules
/// go and the listeners it counts on (by index); `Err` with the `Accepted` reason when none
/// does.
fn attach<'g>(
    route: &HTTPRoute,
    route_ns: &str,
    parent: &ParentReference,
    listeners: &[ListenerView<'g>],
    namespace_labels: &HashMap<&str, &BTreeMap<String, String>>,
    places: &mut BTreeSet<Place>,
    attached: &mut Vec<usize>,
) -> Result<(), (&'static str, String)> {
    let mut named = false;
    let mut allowed_any = false;
    let mut host_any = false;
    for (at, l) in listeners.iter().enumerate() {
        if parent.section_name.as_deref().is_some_and(|s| s != l.name)
            || parent.port.is_some_and(|p| p != l.port)
        {
            continue;
        }
        named = true;
        if !l.usable {
            continue;
        }
        let allowed = match &l.namespaces {
            Allowed::All => true,
            Allowed::Same => route_ns == l.gateway.0,
            Allowed::Selector(sel) => selects(sel, namespace_labels.get(route_ns).copied()),
        };
        if !allowed {
            continue;
        }
        allowed_any = true;
        let hosts = intersect(l.hostname.as_ref(), &route.spec.hostnames);
        if hosts.is_empty() {
            continue;
        }
        host_any = true;
        attached.push(at);
        for host in hosts {
            for at in l.frontends() {
                places.insert(Place {
                    at,
                    host: host.clone(),
                    listener: l.hostname.clone(),
                });
            }
        }
    }
    if !named {
        Err((
            "NoMatchingParent",
            "no listener of this Gateway matches sectionName and port".into(),
        ))
    } else if !allowed_any {
        Err((
            "NotAllowedByListeners",
            "no listener allows routes from this namespace".into(),
        ))
    } else if !host_any {
        Err((
            "NoMatchingListenerHostname",
            "no hostname of the route matches a listener's".into(),
        ))
    } else {
        Ok(())
    }
}

/// The host levels a route with `hostnames` gets on a listener with `listener` hostname:
/// each route hostname the listener's takes (the more specific of the two), or the
/// listener's own when the route names none. Empty: none intersect. `[None]`: any host.
fn intersect(listener: Option<&HostPattern>, hostnames: &[String]) -> Vec<Option<HostPattern>> {
    let route: Vec<HostPattern> = hostnames
        .iter()
        .filter_map(|h| gateway_host(h).ok())
        .collect();
    if hostnames.is_empty() {
        return vec![listener.cloned()];
    }
    let Some(l) = listener else {
        return route.into_iter().map(Some).collect();
    };
    let mut out = Vec::new();
    for r in route {
        let pick = match (l, &r) {
            (HostPattern::Exact(a), HostPattern::Exact(b)) => (a == b).then(|| l.clone()),
            (HostPattern::Exact(a), HostPattern::Wildcard(s)) => {
                a.ends_with(s.as_str()).then(|| l.clone())
            }
            (HostPattern::Wildcard(s), HostPattern::Exact(b)) => {
                b.ends_with(s.as_str()).then(|| r.clone())
            }
            (HostPattern::Wildcard(a), HostPattern::Wildcard(b)) => {
                if b.ends_with(a.as_str()) {
                    Some(r.clone())
                } else if a.ends_with(b.as_str()) {
                    Some(l.clone())
                } else {
                    None
                }
            }
            _ => None,
        };
        if let Some(p) = pick
            && !out.contains(&Some(p.clone()))
        {
            out.push(Some(p));
        }
    }
    out
}

/// The regular expressions of one build: the previous table's, reused by source (indexed
/// on the first pattern asked for, so a build without any walks nothing), and those
/// compiled so far; and those known not to compile (the previous build's failures, and
/// this one's), which are not tried again: a failure depends on the source alone.
struct PatternSource<'p> {
    previous: Option<&'p GatewayRoutes>,
    known: Option<Patterns>,
    failed_before: Option<&'p HashMap<Box<str>, PatternError>>,
    /// Failures asked for in this build, for the next one.
    failed: HashMap<Box<str>, PatternError>,
    /// Patterns that failed to compile in this build.
    failures_compiled: usize,
}

impl PatternSource<'_> {
    fn get(&mut self, source: &str) -> Result<Pattern, PatternError> {
        if let Some(e) = self.failed.get(source) {
            return Err(e.clone());
        }
        if let Some(e) = self.failed_before.and_then(|f| f.get(source)) {
            self.failed.insert(source.into(), e.clone());
            return Err(e.clone());
        }
        let previous = self.previous;
        let got = self
            .known
            .get_or_insert_with(|| {
                Patterns::from_previous(previous.into_iter().flat_map(|g| g.patterns()))
            })
            .get(source);
        if let Err(e) = &got {
            self.failures_compiled += 1;
            self.failed.insert(source.into(), e.clone());
        }
        got
    }
}

/// Why a header or query match cannot be served.
enum Unusable {
    /// A match type switchyard does not know: that match is skipped.
    Type(String),
    /// A regular expression that does not compile or is too large: its rule is dropped.
    Pattern(String),
}

/// Header or query matches as the table holds them (`what` names them in messages).
fn value_matches(
    list: &[HTTPHeaderMatch],
    fold: bool,
    what: &str,
    compiled: &mut PatternSource<'_>,
) -> Result<Box<[ValueMatch]>, Unusable> {
    list.iter()
        .map(|m| {
            let regex = match m.type_.as_deref() {
                None | Some("Exact") => None,
                Some("RegularExpression") => {
                    Some(Box::new(compiled.get(&m.value).map_err(|e| {
                        Unusable::Pattern(format!(
                            "{what} {} regular expression {} {e}",
                            show(&m.name),
                            show(&m.value)
                        ))
                    })?))
                }
                Some(other) => {
                    return Err(Unusable::Type(format!(
                        "{what} match type {} is not supported",
                        show(other)
                    )));
                }
            };
            Ok(ValueMatch {
                name: if fold {
                    m.name.to_ascii_lowercase().into()
                } else {
                    m.name.as_str().into()
                },
                value: m.value.as_str().into(),
                regex,
            })
        })
        .collect()
}

/// Filters the spec says a rule may not hold together (the CRD's validations, which an API
/// server enforces but `--manifests` files and older CRDs do not): `RequestRedirect` with
/// `URLRewrite` or with `backendRefs`, and any filter but `RequestMirror` and `ExtensionRef`
/// twice, in the rule's list or in one backendRef's. `None`: compatible.
fn incompatible_filters(rule: &HTTPRouteRule) -> Option<String> {
    let repeated = |filters: &[HTTPRouteFilter]| {
        filters.iter().enumerate().find_map(|(i, f)| {
            let once = !matches!(f.type_.as_str(), "RequestMirror" | "ExtensionRef");
            (once && filters[..i].iter().any(|g| g.type_ == f.type_))
                .then(|| format!("filter {} may not be repeated", f.type_))
        })
    };
    let has = |t: &str| rule.filters.iter().any(|f| f.type_ == t);
    if has("RequestRedirect") && has("URLRewrite") {
        return Some("RequestRedirect and URLRewrite filters may not be combined".into());
    }
    if has("RequestRedirect") && !rule.backend_refs.is_empty() {
        return Some("a RequestRedirect filter may not be used together with backendRefs".into());
    }
    repeated(&rule.filters).or_else(|| {
        rule.backend_refs
            .iter()
            .find_map(|b| repeated(&b.filters).map(|why| format!("{why} (on a backendRef)")))
    })
}

/// Whether a rule's rewrite or redirect replaces the matched prefix.
fn replaces_prefix(rule: &HTTPRouteRule) -> bool {
    rule.filters.iter().any(|f| {
        let path = f
            .url_rewrite
            .as_ref()
            .and_then(|r| r.path.as_ref())
            .into_iter()
            .chain(f.request_redirect.as_ref().and_then(|r| r.path.as_ref()));
        path.into_iter().any(|p| p.type_ == "ReplacePrefixMatch")
    })
}

/// Adds a listener's certificates to `to`, for its hostname `host` (`*`: none).
fn add_certificates(to: &mut Certificates, certificates: &ListenerCertificates, host: &str) {
    for ((ns, name), pem) in certificates {
        to.entry((ns.clone(), name.clone()))
            .or_insert_with(|| (BTreeSet::new(), Arc::clone(pem)))
            .0
            .insert(host.to_string());
    }
}

/// A Gateway's `metadata.creationTimestamp` as text that sorts by time; empty when unknown.
fn created(gw: &Gateway) -> String {
    gw.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default()
}

/// What `--gateway-addresses` gave one Gateway, and how usable its listeners were before.
struct Given {
    outcome: Outcome,
    any_usable: bool,
    all_usable: bool,
}

/// Gives each served Gateway an address of `pool` (none when it is empty: every Gateway is
/// shared), keeping the addresses of `previous`: a Gateway with one serves its listeners on
/// it alone; a Gateway that gets none serves nothing (its status says why).
#[allow(clippy::type_complexity)]
fn give_addresses<'g>(
    pool: &[IpAddr],
    gateways: &mut BTreeMap<
        (&'g str, &'g str),
        (&'g Gateway, Vec<ListenerView<'g>>, Vec<ListenerStatus>),
    >,
    previous: Option<&GatewayRoutes>,
) -> BTreeMap<(&'g str, &'g str), Given> {
    if pool.is_empty() {
        return BTreeMap::new();
    }
    let mut before: HashMap<(&str, &str), Vec<IpAddr>> = HashMap::default();
    for (ns, name, ip) in previous.into_iter().flat_map(GatewayRoutes::assigned) {
        before.entry((ns, name)).or_default().push(ip);
    }
    let claims: Vec<Claim<'g>> = gateways
        .iter()
        // A Gateway refused for its parameters is not served: it takes no address.
        .filter(|(_, (gw, _, _))| {
            gw.spec
                .infrastructure
                .as_ref()
                .is_none_or(|i| i.parameters_ref.is_none())
        })
        .map(|(&(ns, name), (gw, _, _))| Claim {
            namespace: ns,
            name,
            created: created(gw),
            ask: Ask::of(
                gw.spec
                    .addresses
                    .iter()
                    .map(|a| (a.type_.as_deref(), a.value.as_str())),
            ),
            previous: match before.get(&(ns, name)) {
                Some(ips) => ips.clone(),
                // After a restart: the addresses its status shows.
                None => gw
                    .status
                    .iter()
                    .flat_map(|s| &s.addresses)
                    .filter(|a| a.type_.as_deref().unwrap_or("IPAddress") == "IPAddress")
                    .filter_map(|a| a.value.parse().ok())
                    .collect(),
            },
        })
        .collect();
    let outcomes = address::assign(pool, &claims);
    let mut out = BTreeMap::new();
    for (key, outcome) in outcomes {
        let Some((gw, views, statuses)) = gateways.get_mut(&key) else {
            continue;
        };
        let given = Given {
            any_usable: views.iter().any(|l| l.usable),
            all_usable: views.iter().all(|l| l.usable),
            outcome,
        };
        match &given.outcome {
            Outcome::Addresses(ips) => {
                for v in views.iter_mut() {
                    v.addresses.clone_from(ips);
                }
            }
            _ => {
                // Not served anywhere: a shared frontend is not its to take.
                unserve(
                    views,
                    statuses,
                    "the Gateway has no address",
                    gw.metadata.generation,
                );
            }
        }
        out.insert(key, given);
    }
    out
}

/// A Gateway that serves nothing: its listeners take no routes and say they are not
/// programmed, for `why`.
fn unserve(
    views: &mut [ListenerView<'_>],
    statuses: &mut [ListenerStatus],
    why: &str,
    generation: Option<i64>,
) {
    for v in views.iter_mut() {
        v.usable = false;
    }
    for c in statuses.iter_mut().flat_map(|s| s.conditions.iter_mut()) {
        if c.type_ == "Programmed" {
            *c = Condition::new("Programmed", false, "Invalid", why, generation);
        }
    }
}

/// A listener's hostname as `ListenerHosts` keys it: the name (or the wildcard's suffix) and
/// whether it is a wildcard.
pub(super) fn listener_key(hostname: Option<&HostPattern>) -> (Option<&str>, bool) {
    match hostname {
        None => (None, false),
        Some(HostPattern::Exact(h)) => (Some(h), false),
        Some(HostPattern::Wildcard(s) | HostPattern::OneLabel(s)) => (Some(s), true),
    }
}

/// A Gateway API hostname: a DNS name, or `*.` and one; no port.
fn gateway_host(h: &str) -> Result<HostPattern, &'static str> {
    if h.contains(':') {
        return Err("has a port, which a Gateway API hostname may not");
    }
    validate_host(h)
}

/// Whether `sel` selects a namespace with `labels` (none known: only an empty selector).
fn selects(sel: &LabelSelector, labels: Option<&BTreeMap<String, String>>) -> bool {
    let empty = BTreeMap::new();
    let labels = labels.unwrap_or(&empty);
    let by_labels = sel
        .match_labels
        .as_ref()
        .is_none_or(|m| m.iter().all(|(k, v)| labels.get(k) == Some(v)));
    let by_expressions = sel
        .match_expressions
        .as_deref()
        .unwrap_or(&[])
        .iter()
        .all(|e| {
            let values = e.values.as_deref().unwrap_or(&[]);
            let value = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => value.is_none_or(|v| !values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        });
    by_labels && by_expressions
}

/// What a filter asks beyond header changes.
enum Filtered {
    Redirect(Redirect),
    Rewrite(Option<Arc<str>>, Option<PathRewrite>),
    /// A backend and the share of requests it gets a copy of (numerator, denominator).
    Mirror(BackendObjectReference, u64, u64),
    /// An `ExtensionRef`, which switchyard never resolves: why, for `ResolvedRefs`.
    Extension(String),
}

/// Reads one filter: header modifiers into `req` / `resp`; a redirect, a rewrite, a mirror
/// or an extension returned; `Err` for a filter switchyard does not offer.
fn filter(
    f: &HTTPRouteFilter,
    req: &mut HeaderFilter,
    resp: &mut HeaderFilter,
) -> Result<Option<Filtered>, String> {
    let headers = |into: &mut HeaderFilter, h: &Option<HTTPHeaderFilter>| {
        if let Some(h) = h {
            let lower = |n: &str| -> Box<str> { n.to_ascii_lowercase().into() };
            into.set.extend(
                h.set
                    .iter()
                    .map(|x| (lower(&x.name), x.value.as_str().into())),
            );
            into.add.extend(
                h.add
                    .iter()
                    .map(|x| (lower(&x.name), x.value.as_str().into())),
            );
            into.remove.extend(h.remove.iter().map(|n| lower(n)));
        }
    };
    match f.type_.as_str() {
        "RequestHeaderModifier" => headers(req, &f.request_header_modifier),
        "ResponseHeaderModifier" => headers(resp, &f.response_header_modifier),
        "RequestRedirect" => {
            let Some(r) = &f.request_redirect else {
                return Err("RequestRedirect filter without requestRedirect".into());
            };
            let status = match r.status_code.unwrap_or(302) {
                s @ (301 | 302 | 303 | 307 | 308) => s as u16,
                other => return Err(format!("redirect status {other} is not supported")),
            };
            return Ok(Some(Filtered::Redirect(Redirect {
                scheme: r.scheme.as_deref().map(|s| s.to_ascii_lowercase().into()),
                hostname: r.hostname.as_deref().map(Into::into),
                port: r.port.and_then(|p| u16::try_from(p).ok()),
                path: r.path.as_ref().map(path_modifier).transpose()?,
                status,
            })));
        }
        "URLRewrite" => {
            let Some(r) = &f.url_rewrite else {
                return Err("URLRewrite filter without urlRewrite".into());
            };
            return Ok(Some(Filtered::Rewrite(
                r.hostname.as_deref().map(Arc::from),
                r.path.as_ref().map(path_modifier).transpose()?,
            )));
        }
        "RequestMirror" => {
            let Some(m) = &f.request_mirror else {
                return Err("RequestMirror filter without requestMirror".into());
            };
            let (numerator, denominator) = match (m.percent, &m.fraction) {
                (Some(p), _) => (p, 100),
                (None, Some(f)) => (f.numerator, f.denominator.unwrap_or(100)),
                (None, None) => (100, 100),
            };
            let share = |v: i32| u64::try_from(v).ok();
            let (Some(numerator), Some(denominator)) = (share(numerator), share(denominator))
            else {
                return Err("RequestMirror share is negative".into());
            };
            if denominator == 0 {
                return Err("RequestMirror fraction has denominator 0".into());
            }
            return Ok(Some(Filtered::Mirror(
                m.backend_ref.clone(),
                numerator.min(denominator),
                denominator,
            )));
        }
        "ExtensionRef" => {
            let Some(e) = &f.extension_ref else {
                return Err("ExtensionRef filter without extensionRef".into());
            };
            return Ok(Some(Filtered::Extension(format!(
                "filter ExtensionRef {} {}/{}: switchyard resolves no extension, its requests \
                 are answered 500",
                show(&e.group),
                e.kind,
                e.name
            ))));
        }
        other => return Err(format!("filter {other} is not supported")),
    }
    Ok(None)
}

fn path_modifier(p: &HTTPPathModifier) -> Result<PathRewrite, String> {
    match (
        p.type_.as_str(),
        &p.replace_full_path,
        &p.replace_prefix_match,
    ) {
        ("ReplaceFullPath", Some(v), _) => Ok(PathRewrite::Full(Arc::from(v.as_str()))),
        ("ReplacePrefixMatch", _, Some(v)) => Ok(PathRewrite::Prefix(Arc::from(v.as_str()))),
        (t, _, _) => Err(format!("path modifier {} without its value", show(t))),
    }
}

/// A Gateway API duration (`1h2m3s4ms`: up to four parts); `None` for zero (no timeout).
fn gateway_duration(v: &str) -> Result<Option<Duration>, String> {
    let bad = || format!("timeout {} is not a Gateway API duration", show(v));
    let mut total = Duration::ZERO;
    let mut rest = v;
    let mut parts = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 5 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (Duration::from_millis(n), 2)
        } else if rest.starts_with('h') {
            (Duration::from_secs(n * 3600), 1)
        } else if rest.starts_with('m') {
            (Duration::from_secs(n * 60), 1)
        } else if rest.starts_with('s') {
            (Duration::from_secs(n), 1)
        } else {
            return Err(bad());
        };
        total += unit;
        rest = &rest[len..];
        parts += 1;
    }
    if parts == 0 || parts > 4 {
        return Err(bad());
    }
    Ok((!total.is_zero()).then_some(total))
}

/// ReferenceGrants by the namespace they grant into.
struct Grants<'a>(HashMap<&'a str, Vec<&'a ReferenceGrant>>);

impl<'a> Grants<'a> {
    fn of(grants: &[&'a ReferenceGrant]) -> Self {
        let mut by_ns: HashMap<&str, Vec<&ReferenceGrant>> = HashMap::default();
        for g in grants {
            let (ns, _) = meta_key(&g.metadata.namespace, &g.metadata.name);
            by_ns.entry(ns).or_default().push(*g);
        }
        Grants(by_ns)
    }

    /// Whether a `from` object (kind, namespace) may name `to` (group, kind, namespace, name).
    fn allows(
        &self,
        (from_kind, from_ns): (&str, &str),
        (group, kind, ns, name): (&str, &str, &str, &str),
    ) -> bool {
        self.0.get(ns).is_some_and(|gs| {
            gs.iter().any(|g| {
                g.spec
                    .from
                    .iter()
                    .any(|f| f.group == GROUP && f.kind == from_kind && f.namespace == from_ns)
                    && g.spec.to.iter().any(|t| {
                        (t.group == group || (t.group == "core" && group.is_empty()))
                            && t.kind == kind
                            && t.name.as_deref().is_none_or(|n| n.is_empty() || n == name)
                    })
            })
        })
    }
}

/// `items` sorted by namespace and name, one per key (the same objects in any order give
/// the same table).
fn sorted<'i, T>(items: &[&'i T], meta: impl Fn(&T) -> &ObjectMeta) -> Vec<&'i T> {
    // Borrowed keys: a build sorts every route, and allocating their keys was a visible part
    // of a build that translates one.
    let key = |t: &'i T| {
        let m = meta(t);
        meta_key(&m.namespace, &m.name)
    };
    let mut v = items.to_vec();
    // Stable: of objects with one key, the first in the input stays.
    v.sort_by(|a, b| key(a).cmp(&key(b)));
    v.dedup_by(|a, b| key(a) == key(b));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_follow_the_gateway_api_format() {
        assert_eq!(gateway_duration("10s"), Ok(Some(Duration::from_secs(10))));
        assert_eq!(
            gateway_duration("1h2m3s4ms"),
            Ok(Some(Duration::from_millis(3_723_004)))
        );
        assert_eq!(
            gateway_duration("500ms"),
            Ok(Some(Duration::from_millis(500)))
        );
        assert_eq!(gateway_duration("0s"), Ok(None));
        assert!(gateway_duration("1.5s").is_err());
        assert!(gateway_duration("10").is_err());
        assert!(gateway_duration("1h1m1s1ms1h").is_err());
    }

    #[test]
    fn hostnames_intersect_as_the_spec_says() {
        let h = |s: &str| gateway_host(s).ok();
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // No listener hostname: the route's own.
        assert_eq!(intersect(None, &names(&["a.com"])), vec![h("a.com")]);
        assert_eq!(intersect(None, &[]), vec![None]);
        // A wildcard listener takes the route's more specific names.
        let l = h("*.example.com");
        assert_eq!(
            intersect(
                l.as_ref(),
                &names(&["foo.example.com", "other.org", "*.bar.example.com"])
            ),
            vec![h("foo.example.com"), h("*.bar.example.com")]
        );
        // A route wildcard over an exact listener: the listener's name.
        assert_eq!(
            intersect(h("very.specific.com").as_ref(), &names(&["*.specific.com"])),
            vec![h("very.specific.com")]
        );
        assert_eq!(intersect(h("a.com").as_ref(), &names(&["b.com"])), vec![]);
        assert_eq!(intersect(l.as_ref(), &[]), vec![l.clone()]);
    }
}

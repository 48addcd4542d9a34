//! The Gateway build's third phase: a route attached to its parents, the listeners of our
//! Gateways that accept it (section and port, allowed namespaces, intersecting hostnames),
//! with each parent's `Accepted` condition and the places its rules go; then the routes
//! counted on each listener. It must not read a route's rules or backends.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::api::*;
use super::cache::CachedRoute;
use super::view::{Allowed, Gateways, ListenerView, Place, RouteInputs, RouteKind, gateway_host};
use crate::control::translate::build::Builder;
use crate::control::translate::view::*;
use crate::table::matcher::HostPattern;

impl Builder<'_> {
    /// The route's parents that are our Gateways, each with its `Accepted` condition, and
    /// where its rules go; the listeners it counts on go to `attached` (by Gateway key and
    /// listener index).
    pub(super) fn attach_parents(
        &self,
        route: &HTTPRoute,
        route_kind: RouteKind,
        ns: &str,
        given: &RouteInputs<'_, '_>,
        attached: &mut Vec<(ObjectKey, usize)>,
    ) -> (Vec<RouteParentStatus>, BTreeSet<Place>) {
        let generation = route.metadata.generation;
        let mut parents: Vec<RouteParentStatus> = Vec::new();
        let mut places: BTreeSet<Place> = BTreeSet::new();
        let mut attached_here = Vec::new();
        for parent in &route.spec.parent_refs {
            let group = parent.group.as_deref().unwrap_or(GROUP);
            let kind = parent.kind.as_deref().unwrap_or("Gateway");
            let parent_ns = parent.namespace.as_deref().unwrap_or(ns);
            let (found, set) = match (group == GROUP, kind) {
                (true, "Gateway") => (
                    given
                        .gateways
                        .get_key_value(&(parent_ns, parent.name.as_str())),
                    None,
                ),
                // A ListenerSet's listeners are its Gateway's, taken through it alone.
                (true, "ListenerSet") => {
                    let set = (parent_ns, parent.name.as_str());
                    let gw = given
                        .gateways
                        .iter()
                        .find(|(_, (_, views, _))| views.iter().any(|v| v.set == Some(set)));
                    (gw, Some(set))
                }
                _ => continue,
            };
            let Some(((key_ns, key_name), (_, listeners, _))) = found else {
                continue;
            };
            if parents.iter().any(|p| p.parent_ref == *parent) {
                continue;
            }
            let accepted = attach(
                (route, route_kind),
                ns,
                (parent, set),
                listeners,
                given.namespace_labels,
                &mut places,
                &mut attached_here,
            );
            for at in attached_here.drain(..) {
                attached.push(((key_ns.to_string(), key_name.to_string()), at));
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
        (parents, places)
    }
}

/// Counts the routes attached to each listener of `gateways`, and puts each route's parents'
/// status in `status` (`None`: the previous build's stands).
pub(super) fn count_attached(
    outputs: &[Arc<CachedRoute>],
    gateways: &mut Gateways<'_>,
    mut status: Option<&mut GatewayApiStatus>,
) {
    let mut attached: BTreeMap<(&str, &str), Vec<i32>> = BTreeMap::new();
    for c in outputs {
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
        if let (Some(status), Some(route)) = (status.as_deref_mut(), &o.parents) {
            let by_key = match c.kind {
                RouteKind::Http => &mut status.http_routes,
                RouteKind::Grpc => &mut status.grpc_routes,
                RouteKind::Tcp => &mut status.tcp_routes,
                RouteKind::Tls => &mut status.tls_routes,
                RouteKind::Udp => &mut status.udp_routes,
            };
            by_key.insert(c.key.clone(), Arc::clone(route));
        }
    }
    for (key, (_, views, _)) in gateways.iter_mut() {
        if let Some(counts) = attached.get(key) {
            for (v, n) in views.iter_mut().zip(counts) {
                v.attached += n;
            }
        }
    }
}

/// Namespaces' labels by name.
pub(super) type NamespaceLabels<'n> = HashMap<&'n str, &'n BTreeMap<String, String>>;

/// Namespaces' labels by name, for `allowedRoutes.namespaces.selector` (and
/// `allowedListeners`').
pub(super) fn namespace_labels<'n>(namespaces: &[&'n Namespace]) -> NamespaceLabels<'n> {
    namespaces
        .iter()
        .filter_map(|n| Some((n.metadata.name.as_deref()?, n.metadata.labels.as_ref()?)))
        .collect()
}

/// Attaches `route` (of `kind`) to the listeners of `parent` (those of ListenerSet `set`, or
/// the Gateway's own) that accept it, recording where
/// its rules go and the listeners it counts on (by index); `Err` with the `Accepted` reason
/// when none does.
fn attach<'g>(
    (route, kind): (&HTTPRoute, RouteKind),
    route_ns: &str,
    (parent, set): (&ParentReference, Option<(&str, &str)>),
    listeners: &[ListenerView<'g>],
    namespace_labels: &HashMap<&str, &BTreeMap<String, String>>,
    places: &mut BTreeSet<Place>,
    attached: &mut Vec<usize>,
) -> Result<(), (&'static str, String)> {
    let mut named = false;
    let mut allowed_any = false;
    let mut host_any = false;
    for (at, l) in listeners.iter().enumerate() {
        // A parentRef to the Gateway takes its own listeners; one to a ListenerSet, that
        // set's.
        if l.set != set {
            continue;
        }
        if parent.section_name.as_deref().is_some_and(|s| s != l.name)
            || parent.port.is_some_and(|p| p != l.port)
        {
            continue;
        }
        named = true;
        if !l.usable {
            continue;
        }
        // A listener that does not take the route's kind (`allowedRoutes.kinds`) is as one
        // that does not take its namespace: the spec's `NotAllowedByListeners`.
        let allowed = l.kinds.contains(&kind)
            && match &l.namespaces {
                Allowed::All => true,
                // A ListenerSet's listener takes its own namespace's routes.
                Allowed::Same => route_ns == l.set.map_or(l.gateway.0, |(set_ns, _)| set_ns),
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
            "no listener allows routes of this kind from this namespace".into(),
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
pub(super) fn intersect(
    listener: Option<&HostPattern>,
    hostnames: &[String],
) -> Vec<Option<HostPattern>> {
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

/// Whether `sel` selects a namespace with `labels` (none known: only an empty selector).
pub(super) fn selects(sel: &LabelSelector, labels: Option<&BTreeMap<String, String>>) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

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

//! The Gateway routers assembled from the routes' translations (`cache::RouteOutput`): every
//! rule of the routes, and per host level of each frontend its path rules with their
//! candidates in the spec's precedence order. A Gateway-only build makes again only the host
//! levels that a route it translated (or dropped) had or now has, on frontends whose
//! listeners kept their hostnames (a candidate carries its listener's id), and shares every
//! other level (`Arc`) with the previous table: a level's contents come from the routes placed
//! on it alone, so an untouched one is what a cold build would make.
//!
//! Pure like the rest of translate. It must not change what a build gives, only how much of
//! it is made again: held to a cold build by `translate/tests/gateway`.

use std::cmp::{Ordering, Reverse};
use std::collections::BTreeMap;
use std::sync::Arc;

use super::cache::CachedRoute;
use super::view::{Matched, PathKind, listener_key};
use crate::control::translate::view::*;
use crate::table::gateway::{
    Candidate, Candidates, FrontendKey, GatewayLevel, GatewayRoutes, GatewayRule,
};
use crate::table::matcher::{HostPattern, PathRule, PathRules, SharedRouter};
use crate::table::pattern::Pattern;

/// Where the rules of a place go in its frontend's router: the host-less level, an exact
/// host, or a wildcard suffix (a Gateway wildcard and a one-label one share the suffix's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Slot<'h> {
    Any,
    Exact(&'h str),
    Suffix(&'h str),
}

impl<'h> Slot<'h> {
    fn of(host: Option<&'h HostPattern>) -> Self {
        match host {
            None => Slot::Any,
            Some(HostPattern::Exact(h)) => Slot::Exact(h),
            Some(HostPattern::Wildcard(s) | HostPattern::OneLabel(s)) => Slot::Suffix(s),
        }
    }
}

/// One host level of one frontend.
type LevelKey<'h> = (FrontendKey, Slot<'h>);

/// The spec's precedence among candidates of one path: a method, more headers, more query
/// parameters, the oldest route, its namespace/name (as its place among the routes sorted
/// by key), then rule and match order.
type Rank<'o> = (
    Reverse<bool>,
    Reverse<usize>,
    Reverse<usize>,
    &'o str,
    usize,
    usize,
    usize,
);

/// A candidate waiting for its precedence rank, borrowed from its route's output.
struct Pending<'o> {
    /// The hostname of the listener it serves.
    listener: Option<&'o HostPattern>,
    rank: Rank<'o>,
    matched: &'o Matched,
    rule: &'o Arc<GatewayRule>,
}

/// The build whose table the next one shares host levels with: its routes' outputs (in key
/// order, as the cache keeps them) and its Gateway routes, made from them.
#[derive(Clone, Copy)]
pub(super) struct Previous<'p> {
    pub(super) routes: &'p [Arc<CachedRoute>],
    pub(super) table: &'p GatewayRoutes,
}

/// What must be made again: these host levels, and every level of these frontends (new,
/// given to another Gateway, or whose listeners' hostnames, and so ids, changed).
struct Dirty<'h> {
    levels: HashSet<LevelKey<'h>>,
    frontends: Vec<FrontendKey>,
}

impl Dirty<'_> {
    fn wants(&self, at: FrontendKey, host: Option<&HostPattern>) -> bool {
        self.frontends.contains(&at) || self.levels.contains(&(at, Slot::of(host)))
    }
}

/// Fills `routes` (its addresses, ports and listener hosts set, hosts finished) with the
/// rules and routers of `outputs`, sharing what it can with `previous`. Returns how many host
/// levels it made.
pub(super) fn assemble(
    outputs: &[Arc<CachedRoute>],
    routes: &mut GatewayRoutes,
    previous: Option<Previous<'_>>,
) -> usize {
    let frontends = frontends(routes);
    let dirty = previous.map(|p| dirty(p, outputs, routes, &frontends));
    #[allow(clippy::type_complexity)]
    let mut pending: BTreeMap<
        ((FrontendKey, Option<&HostPattern>), &str, PathKind),
        Vec<Pending<'_>>,
    > = BTreeMap::new();
    // Path patterns by source.
    let mut patterns: HashMap<&str, &Pattern> = HashMap::default();
    let mut rules: Vec<Arc<GatewayRule>> = Vec::new();
    for (pos, c) in outputs.iter().enumerate() {
        let o = &c.output;
        if o.parents.is_none() {
            continue;
        }
        // A route's rules are in the table even when it attached nowhere.
        rules.extend(o.rules.iter().cloned());
        for place in &o.places {
            if dirty
                .as_ref()
                .is_some_and(|d| !d.wants(place.at, place.host.as_ref()))
            {
                continue;
            }
            for ((ri, matched), rule) in o.made.iter().zip(&o.rules) {
                for m in matched {
                    if let Some(p) = &m.pattern {
                        patterns.entry(&m.key).or_insert(p);
                    }
                    pending
                        .entry(((place.at, place.host.as_ref()), &*m.key, m.kind))
                        .or_default()
                        .push(Pending {
                            listener: place.listener.as_ref(),
                            // Routes are in key order: `pos` ranks as their keys do.
                            rank: (
                                Reverse(m.method.is_some()),
                                Reverse(m.headers.len()),
                                Reverse(m.query.len()),
                                o.created.as_str(),
                                pos,
                                *ri,
                                m.index,
                            ),
                            matched: m,
                            rule,
                        });
                }
            }
        }
    }
    routes.rules = rules;

    let mut levels: BTreeMap<LevelKey<'_>, PathRules<Candidates>> = BTreeMap::new();
    // Regular expressions are tried in their insertion order: collected, then inserted
    // longest source first (as Istio orders them), then by the rank of their best candidate.
    #[allow(clippy::type_complexity)]
    let mut regex_rules: Vec<(
        (Reverse<usize>, Rank<'_>),
        LevelKey<'_>,
        PathRule<Candidates>,
    )> = Vec::new();
    for (((at, host), key, kind), mut list) in pending {
        list.sort_by(|a, b| a.rank.cmp(&b.rank));
        let best = list.first().map(|p| p.rank);
        let hosts = routes.hosts(at);
        let candidates: Candidates = list
            .into_iter()
            .map(|p| {
                let (name, wildcard) = listener_key(p.listener);
                Candidate {
                    method: p.matched.method.clone(),
                    headers: p.matched.headers.clone(),
                    query: p.matched.query.clone(),
                    rule: Arc::clone(p.rule),
                    listener: hosts.id(name, wildcard).unwrap_or(u32::MAX),
                }
            })
            .collect();
        let rule = PathRule {
            regex: match kind {
                PathKind::Regex => patterns.get(key).map(|p| Box::new((*p).clone())),
                _ => None,
            },
            prefix: key.into(),
            strip: false,
            ignore_case: false,
            exact: kind == PathKind::Exact,
            policy: None,
            target: candidates,
        };
        let level = (at, Slot::of(host));
        match (kind, best) {
            (PathKind::Regex, Some(best)) => {
                regex_rules.push(((Reverse(rule.prefix.len()), best), level, rule));
            }
            _ => levels.entry(level).or_default().insert(rule),
        }
    }
    regex_rules.sort_by(|a, b| a.0.cmp(&b.0));
    for (_, level, rule) in regex_rules {
        levels.entry(level).or_default().insert(rule);
    }
    let made = levels.len();

    // Each frontend's router: the previous one's, its changed levels replaced, or all new.
    let mut levels = levels.into_iter().peekable();
    for at in frontends {
        let shared = match (&previous, &dirty) {
            (Some(p), Some(d)) if !d.frontends.contains(&at) => router_of(p.table, at),
            _ => None,
        };
        let mut router = shared.cloned().unwrap_or_default();
        if shared.is_some()
            && let Some(d) = &dirty
        {
            for (_, slot) in d.levels.iter().filter(|(f, _)| *f == at) {
                put(&mut router, *slot, None);
            }
        }
        // Levels come in frontend order, as `frontends` gives them.
        while let Some(((f, slot), rules)) = levels.next_if(|((f, _), _)| *f <= at) {
            if f == at {
                put(&mut router, slot, Some(Arc::new(rules)));
            }
        }
        router.finish();
        if let Some((r, _)) = routes.frontend_mut(at) {
            *r = router;
        }
    }
    made
}

/// Every frontend of `routes`, sorted: the shared ones, then each Gateway address's.
fn frontends(routes: &GatewayRoutes) -> Vec<FrontendKey> {
    let mut all: Vec<FrontendKey> = [None]
        .into_iter()
        .chain(routes.addressed.iter().map(|a| Some(a.address)))
        .flat_map(|address| {
            [false, true].map(|https| FrontendKey {
                address,
                https,
                port: None,
            })
        })
        .chain(routes.ported.iter().map(|p| FrontendKey {
            address: p.address,
            https: p.https,
            port: Some(p.port),
        }))
        .collect();
    all.sort();
    all
}

fn router_of(g: &GatewayRoutes, at: FrontendKey) -> Option<&SharedRouter<Candidates>> {
    if let Some(port) = at.port {
        return g.at_port(at.address, port).map(|p| &p.router);
    }
    match at.address {
        None if at.https => Some(&g.https),
        None => Some(&g.http),
        Some(ip) => g
            .at_address(ip)
            .map(|a| if at.https { &a.https } else { &a.http }),
    }
}

/// Sets (`Some`) or removes (`None`) one host level of a router.
fn put(router: &mut SharedRouter<Candidates>, slot: Slot<'_>, level: Option<GatewayLevel>) {
    match (slot, level) {
        (Slot::Any, level) => router.any_host = level.unwrap_or_default(),
        (Slot::Exact(h), Some(level)) => {
            router.exact.insert(h.into(), level);
        }
        (Slot::Exact(h), None) => {
            router.exact.remove(h);
        }
        (Slot::Suffix(s), level) => {
            let at = router.wildcard.iter().position(|(k, _)| **k == *s);
            match (at, level) {
                (Some(i), Some(level)) => router.wildcard[i].1 = level,
                (Some(i), None) => {
                    router.wildcard.remove(i);
                }
                (None, Some(level)) => router.wildcard.push((s.into(), level)),
                (None, None) => {}
            }
        }
    }
}

/// The host levels that the routes translated or dropped since `previous` had or now have,
/// and the frontends whose levels all change.
fn dirty<'h>(
    previous: Previous<'h>,
    outputs: &'h [Arc<CachedRoute>],
    routes: &GatewayRoutes,
    frontends: &[FrontendKey],
) -> Dirty<'h> {
    let mut levels: HashSet<LevelKey<'h>> = HashSet::default();
    let mut touch = |c: &'h CachedRoute| {
        for p in &c.output.places {
            levels.insert((p.at, Slot::of(p.host.as_ref())));
        }
    };
    // Both in key order: walked side by side.
    let (old, new) = (previous.routes, outputs);
    let (mut i, mut j) = (0, 0);
    loop {
        match (old.get(i), new.get(j)) {
            (Some(a), Some(b)) if Arc::ptr_eq(a, b) => (i, j) = (i + 1, j + 1),
            (Some(a), Some(b)) => match a.key.cmp(&b.key) {
                Ordering::Less => {
                    touch(a);
                    i += 1;
                }
                Ordering::Greater => {
                    touch(b);
                    j += 1;
                }
                Ordering::Equal => {
                    touch(a);
                    touch(b);
                    (i, j) = (i + 1, j + 1);
                }
            },
            (Some(a), None) => {
                touch(a);
                i += 1;
            }
            (None, Some(b)) => {
                touch(b);
                j += 1;
            }
            (None, None) => break,
        }
    }
    let frontends = frontends
        .iter()
        .copied()
        .filter(|&at| {
            let same_gateway = match (at.address, at.port) {
                (address, Some(port)) => match (
                    previous.table.at_port(address, port),
                    routes.at_port(address, port),
                ) {
                    (Some(a), Some(b)) => a.gateway == b.gateway && a.https == b.https,
                    _ => false,
                },
                (None, None) => true,
                (Some(ip), None) => match (previous.table.at_address(ip), routes.at_address(ip)) {
                    (Some(a), Some(b)) => a.gateway == b.gateway,
                    _ => false,
                },
            };
            !same_gateway || previous.table.hosts(at) != routes.hosts(at)
        })
        .collect();
    Dirty { levels, frontends }
}

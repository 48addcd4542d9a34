//! The Gateway build's stream phase: the ports of TCP, TLS (passthrough) and UDP listeners
//! given to one Gateway each, then TCPRoutes, TLSRoutes and UDPRoutes attached to those listeners as every
//! route attaches (`attach.rs`), their backends resolved as every route's (`rules.rs`), their
//! status, and the table's `Streams`: a TCP listener's connections go to the oldest attached
//! route's backends (the others are accepted and counted, not served: the spec's conflict
//! rule), a TLS listener's by server name to the oldest route that names it. Pure; it must
//! not touch HTTP routes or their routers.

use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::api::*;
use super::attach::intersect;
use super::rules::{BackendFilters, Unresolved, backend_port};
use super::view::{Gateways, RouteInputs, RouteKind, StreamListener, created, created_at, sorted};
use crate::control::translate::build::Builder;
use crate::control::translate::endpoints::endpoint_addrs_of;
use crate::control::translate::inputs::{meta_key, object};
use crate::control::translate::view::*;
use crate::table::gateway::Backends;
use crate::table::matcher::HostPattern;
use crate::table::shared::Shared;
use crate::table::stream::{
    SniRoute, StreamPort, StreamServe, Streams, UdpBackend, UdpBackends, UdpPort,
};
use crate::table::{EntryId, EntryKey};

/// A TCPRoute or TLSRoute, as this phase reads either.
struct StreamRoute<'r> {
    kind: RouteKind,
    meta: &'r ObjectMeta,
    spec: &'r StreamRouteSpec,
}

/// What one route gives one listener it attached to.
pub(super) struct Claim {
    /// The route's age, namespace and name: of the claims on a listener (or on one of its
    /// server names), the first in this order is served.
    rank: (String, String, String),
    /// The server names it takes there (`None`: any).
    hosts: Vec<Option<HostPattern>>,
    to: To,
}

/// A stream route's backends: entries for connections, endpoints for UDP flows.
#[derive(Clone)]
enum To {
    Connections(Backends),
    Flows(UdpBackends),
}

/// The claims on each listener, by Gateway key and listener index.
pub(super) type Claims = BTreeMap<(ObjectKey, usize), Vec<Claim>>;

impl Builder<'_> {
    /// Gives each port of a TCP or TLS listener to one Gateway, the oldest (then by namespace
    /// and name): a port is opened once, so another Gateway's stream listener on it is
    /// refused (`PortUnavailable`, naming the owner). TLS listeners on the TLS port are not
    /// claimed: they share it by server name, with every Gateway and with termination.
    pub(super) fn claim_stream_ports(&mut self, gateways: &mut Gateways<'_>) {
        let mut order: Vec<(String, (&str, &str))> = gateways
            .iter()
            .map(|(&key, (gw, _, _))| (created(gw), key))
            .collect();
        order.sort();
        let tls_port = i32::from(self.options.gateway_https_port);
        // By (UDP, port): UDP ports are apart from TCP's.
        let mut owners: BTreeMap<(bool, i32), (String, String)> = BTreeMap::new();
        for (_, key) in order {
            let Some((gw, views, statuses)) = gateways.get_mut(&key) else {
                continue;
            };
            let generation = gw.metadata.generation;
            for (l, st) in views.iter_mut().zip(statuses.iter_mut()) {
                let shares = l.stream == Some(StreamListener::Tls) && l.port == tls_port;
                // HTTP and HTTPS listeners claim their port only when it is one of their own.
                let own = l.stream.is_some() || l.own_port.is_some();
                if !own || !l.usable || shares {
                    continue;
                }
                let udp = l.stream == Some(StreamListener::Udp);
                let owner = owners
                    .entry((udp, l.port))
                    .or_insert_with(|| (key.0.to_string(), key.1.to_string()));
                if (owner.0.as_str(), owner.1.as_str()) == key {
                    continue;
                }
                let message = format!(
                    "port {} is opened for Gateway {}/{} (older, or first by namespace and \
                     name); a port serves one Gateway's listeners",
                    l.port, owner.0, owner.1
                );
                l.usable = false;
                for c in st.conditions.iter_mut() {
                    match c.type_.as_str() {
                        "Accepted" => {
                            *c = Condition::new(
                                "Accepted",
                                false,
                                "PortUnavailable",
                                message.clone(),
                                generation,
                            );
                        }
                        "Programmed" => {
                            *c = Condition::new(
                                "Programmed",
                                false,
                                "Invalid",
                                "not served as configured",
                                generation,
                            );
                        }
                        _ => {}
                    }
                }
                let who = object("Gateway", key.0, key.1);
                self.warn_gateway(&who, format!("listener {}: {message}", l.name));
            }
        }
    }

    /// Attaches the TCPRoutes and TLSRoutes, writes their status, counts them on their
    /// listeners, and builds the table's `streams`. Backends may add entries (`entry_ids`),
    /// as HTTPRoutes' do.
    pub(super) fn add_streams(
        &mut self,
        inputs: GatewayInputs<'_>,
        given: &RouteInputs<'_, '_>,
        entry_ids: &mut HashMap<EntryKey, EntryId>,
        status: &mut GatewayApiStatus,
    ) -> Claims {
        let routes = sorted(inputs.tcp_routes, |r| &r.metadata)
            .into_iter()
            .map(|r| StreamRoute {
                kind: RouteKind::Tcp,
                meta: &r.metadata,
                spec: &r.spec,
            })
            .chain(
                sorted(inputs.tls_routes, |r| &r.metadata)
                    .into_iter()
                    .map(|r| StreamRoute {
                        kind: RouteKind::Tls,
                        meta: &r.metadata,
                        spec: &r.spec,
                    }),
            )
            .chain(
                sorted(inputs.udp_routes, |r| &r.metadata)
                    .into_iter()
                    .map(|r| StreamRoute {
                        kind: RouteKind::Udp,
                        meta: &r.metadata,
                        spec: &r.spec,
                    }),
            );
        let mut claims = Claims::new();
        for r in routes {
            let (ns, name) = meta_key(&r.meta.namespace, &r.meta.name);
            if name.is_empty() {
                continue;
            }
            let who = object(r.kind.name(), ns, name);
            // Attached as the HTTPRoute it would be without rules: parents, sections, ports,
            // allowed kinds and namespaces, hostnames.
            let shell = HTTPRoute {
                metadata: ObjectMeta {
                    generation: r.meta.generation,
                    ..ObjectMeta::default()
                },
                spec: HTTPRouteSpec {
                    parent_refs: r.spec.parent_refs.clone(),
                    hostnames: r.spec.hostnames.clone(),
                    rules: None,
                },
                status: None,
            };
            let mut attached = Vec::new();
            let (mut parents, _) = self.attach_parents(&shell, r.kind, ns, given, &mut attached);
            if parents.is_empty() {
                continue;
            }
            let (to, unresolved) = if r.kind == RouteKind::Udp {
                let (to, unresolved) = self.udp_backends(&who, r.spec, given);
                (To::Flows(to), unresolved)
            } else {
                let (to, unresolved) = self.stream_backends(&who, r.spec, given, entry_ids);
                (To::Connections(to), unresolved)
            };
            let generation = r.meta.generation;
            let refs = match unresolved {
                None => {
                    Condition::new("ResolvedRefs", true, "ResolvedRefs", "resolved", generation)
                }
                Some(u) => {
                    self.warn_gateway(
                        &who,
                        format!("{}; its share of the connections is refused", u.message),
                    );
                    Condition::new("ResolvedRefs", false, u.reason, u.message, generation)
                }
            };
            for p in &mut parents {
                p.conditions.push(refs.clone());
            }
            let map = match r.kind {
                RouteKind::Tls => &mut status.tls_routes,
                RouteKind::Udp => &mut status.udp_routes,
                _ => &mut status.tcp_routes,
            };
            map.insert(
                (ns.to_string(), name.to_string()),
                Arc::new(RouteStatus { parents }),
            );
            let rank = (created_at(r.meta), ns.to_string(), name.to_string());
            for ((gw_ns, gw_name), at) in attached {
                let listener = given
                    .gateways
                    .get(&(gw_ns.as_str(), gw_name.as_str()))
                    .and_then(|(_, views, _)| views.get(at));
                let Some(l) = listener else {
                    continue;
                };
                let hosts = intersect(l.hostname.as_ref(), &r.spec.hostnames);
                claims
                    .entry(((gw_ns, gw_name), at))
                    .or_default()
                    .push(Claim {
                        rank: rank.clone(),
                        hosts,
                        to: to.clone(),
                    });
            }
        }
        claims
    }

    /// A stream route's backends by weight (its one rule's), and the first that does not
    /// resolve: its share of the connections is refused, as the spec asks.
    fn stream_backends(
        &mut self,
        who: &ObjectRef,
        spec: &StreamRouteSpec,
        given: &RouteInputs<'_, '_>,
        entry_ids: &mut HashMap<EntryKey, EntryId>,
    ) -> (Backends, Option<Unresolved>) {
        self.one_rule(who, spec);
        // Resolved as an HTTPRoute rule's backends without filters are.
        let rule = HTTPRouteRule {
            backend_refs: spec
                .rules
                .first()
                .map_or(&[][..], |r| &r.backend_refs)
                .iter()
                .map(|b| HTTPBackendRef {
                    backend: b.backend.clone(),
                    weight: b.weight,
                    filters: Vec::new(),
                })
                .collect(),
            ..HTTPRouteRule::default()
        };
        let filters = vec![BackendFilters::default(); rule.backend_refs.len()];
        let mut unresolved = None;
        let backends = self.rule_backends(who, &rule, filters, given, entry_ids, &mut unresolved);
        let total = backends.iter().map(|b| b.weight).sum();
        let to = Backends {
            backends: backends.into_boxed_slice(),
            total,
            turn: Shared::default(),
        };
        (to, unresolved)
    }

    /// A UDPRoute's backends by weight, each a Service's UDP port with its ready endpoints
    /// (from its EndpointSlices: a UDP port is no entry), and the first that does not resolve.
    fn udp_backends(
        &mut self,
        who: &ObjectRef,
        spec: &StreamRouteSpec,
        given: &RouteInputs<'_, '_>,
    ) -> (UdpBackends, Option<Unresolved>) {
        self.one_rule(who, spec);
        let mut unresolved = None;
        let mut backends = Vec::new();
        for b in spec.rules.first().map_or(&[][..], |r| &r.backend_refs) {
            let weight = u64::try_from(b.weight.unwrap_or(1)).unwrap_or(0);
            let r = &b.backend;
            let ns = r.namespace.as_deref().unwrap_or(&who.namespace);
            let endpoints = match self.udp_endpoints(who, r, given) {
                Ok(e) => e,
                Err(u) => {
                    unresolved.get_or_insert(u);
                    Arc::from([])
                }
            };
            backends.push(UdpBackend {
                service: format!("{ns}/{}:{}", r.name, r.port.unwrap_or(0)).into(),
                weight,
                endpoints,
            });
        }
        let total = backends.iter().map(|b| b.weight).sum();
        let to = UdpBackends {
            backends: backends.into_boxed_slice(),
            total,
        };
        (to, unresolved)
    }

    /// The ready endpoints of the UDP Service port a backendRef names.
    fn udp_endpoints(
        &mut self,
        who: &ObjectRef,
        r: &BackendObjectReference,
        given: &RouteInputs<'_, '_>,
    ) -> Result<Arc<[SocketAddr]>, Unresolved> {
        let (_, slices, sp, _) = backend_port(who, r, given.grants, given.services, "UDP")?;
        let addrs = endpoint_addrs_of(sp, slices, "UDP", &mut self.warnings);
        // Draining endpoints keep no flows: a UDP flow has no end to wait for.
        Ok(addrs
            .into_iter()
            .filter(|(_, draining)| !draining)
            .map(|(a, _)| a)
            .collect())
    }

    /// Warns of a stream route without exactly one rule (the CRDs' bound; files are not
    /// held to it): none refuses its traffic, of several the first is served.
    fn one_rule(&mut self, who: &ObjectRef, spec: &StreamRouteSpec) {
        if spec.rules.len() != 1 {
            // The CRDs hold a route to one rule; files are not checked by them.
            self.warn_gateway(
                who,
                format!(
                    "has {} rules; a {} has exactly one{}",
                    spec.rules.len(),
                    who.kind,
                    if spec.rules.is_empty() {
                        ": its connections are refused"
                    } else {
                        ": the first is served"
                    }
                ),
            );
        }
    }
}

/// Counts the stream routes on their listeners, and the table's `Streams` from the claims:
/// per TCP listener (on each of its Gateway's addresses, or the bind address) the oldest
/// route's backends; per TLS port each server name to the oldest route that takes it, on
/// the TLS port itself ahead of the handshake.
pub(super) fn streams(mut claims: Claims, gateways: &mut Gateways<'_>, tls_port: u16) -> Streams {
    let mut streams = Streams::default();
    // TLS names by port (`None`: the TLS port's passthrough), each with its rank.
    type Port = Option<(Option<IpAddr>, u16)>;
    /// A claim on a TLS port, the address it is seen at, and the certificates its listener
    /// terminates with (`None`: passed through).
    type Named<'c> = (&'c Claim, Option<IpAddr>, &'c Option<Arc<[Arc<[u8]>]>>);
    let mut names: BTreeMap<Port, Vec<Named<'_>>> = BTreeMap::new();
    let mut taken = Vec::new();
    for ((ns, name), (_, views, _)) in gateways.iter_mut() {
        for (at, l) in views.iter_mut().enumerate() {
            let key = ((ns.to_string(), name.to_string()), at);
            let Some(mut c) = claims.remove(&key) else {
                continue;
            };
            l.attached += i32::try_from(c.len()).unwrap_or(i32::MAX);
            let port = u16::try_from(l.port).ok();
            let (Some(kind), Some(port), true) = (l.stream, port, l.usable) else {
                continue;
            };
            c.sort_by(|a, b| a.rank.cmp(&b.rank));
            let addresses: Vec<Option<IpAddr>> = if l.addresses.is_empty() {
                vec![None]
            } else {
                l.addresses.iter().map(|a| Some(*a)).collect()
            };
            let terminate: Option<Arc<[Arc<[u8]>]>> = l.terminate.then(|| {
                l.certificates
                    .iter()
                    .map(|(_, pem)| Arc::clone(pem))
                    .collect()
            });
            taken.push((kind, port, addresses, c, terminate));
        }
    }
    for (kind, port, addresses, c, terminate) in &taken {
        for &address in addresses {
            match kind {
                StreamListener::Tcp => {
                    if let Some(To::Connections(to)) = c.first().map(|c| &c.to) {
                        streams.ports.push(StreamPort {
                            address,
                            port: *port,
                            serve: StreamServe::Tcp(to.clone()),
                        });
                    }
                }
                StreamListener::Udp => {
                    if let Some(To::Flows(to)) = c.first().map(|c| &c.to) {
                        streams.udp.push(UdpPort {
                            address,
                            port: *port,
                            to: to.clone(),
                        });
                    }
                }
                StreamListener::Tls => {
                    let at = (*port != tls_port).then_some((address, *port));
                    names
                        .entry(at)
                        .or_default()
                        .extend(c.iter().map(|claim| (claim, address, terminate)));
                }
            }
        }
    }
    for (at, mut claims) in names {
        claims.sort_by(|a, b| a.0.rank.cmp(&b.0.rank));
        let mut routes: Vec<SniRoute> = Vec::new();
        // The names already taken on this port: the oldest claim keeps each (a set, not a
        // scan of `routes`, which made a build quadratic in TLSRoutes).
        let mut taken = HashSet::new();
        for (claim, address, terminate) in claims {
            // On a port of its own the address is the port's; on the TLS port each
            // route says whose connections it takes.
            let address = if at.is_none() { address } else { None };
            let To::Connections(to) = &claim.to else {
                continue;
            };
            for host in &claim.hosts {
                if taken.insert((host, address)) {
                    routes.push(SniRoute {
                        host: host.clone(),
                        address,
                        to: to.clone(),
                        terminate: terminate.clone(),
                    });
                }
            }
        }
        match at {
            None => streams.passthrough = routes,
            Some((address, port)) => streams.ports.push(StreamPort {
                address,
                port,
                serve: StreamServe::Tls(routes),
            }),
        }
    }
    streams.ports.sort_by_key(|p| (p.address, p.port));
    streams.udp.sort_by_key(|p| (p.address, p.port));
    streams
}

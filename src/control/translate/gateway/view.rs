//! The Gateway build's shared view: one listener as routes see it, our Gateways with their
//! listeners, where a route's rules go (`Place`) and one match of a rule (`Matched`), the
//! ReferenceGrants by namespace, and the small readers every phase needs (object order, a
//! Gateway's age, a listener's hostname). Plain data and pure helpers: it must not decide
//! status, warn, or build any part of the table.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use super::api::*;
use crate::control::translate::inputs::meta_key;
use crate::control::translate::view::*;
use crate::table::client_validation::ClientValidation;
use crate::table::gateway::{FrontendKey, ValueMatch};
use crate::table::matcher::{HostPattern, validate_host};
use crate::table::pattern::Pattern;

/// The kinds of route a listener takes.
pub(super) const HTTP_ROUTE: &str = "HTTPRoute";
pub(super) const GRPC_ROUTE: &str = "GRPCRoute";
pub(super) const TCP_ROUTE: &str = "TCPRoute";
pub(super) const TLS_ROUTE: &str = "TLSRoute";
pub(super) const UDP_ROUTE: &str = "UDPRoute";

/// A route's kind. A GRPCRoute is translated as the HTTPRoute it means (`grpc.rs`); its kind
/// decides the listeners that take it, the ReferenceGrants that let it name a backend, its
/// backends' protocol and where its status goes. HTTPRoutes sort first. TCPRoutes and
/// TLSRoutes attach as the others do, to the stream listeners (`streams.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum RouteKind {
    Http,
    Grpc,
    Tcp,
    Tls,
    Udp,
}

impl RouteKind {
    pub(super) fn name(self) -> &'static str {
        match self {
            RouteKind::Http => HTTP_ROUTE,
            RouteKind::Grpc => GRPC_ROUTE,
            RouteKind::Tcp => TCP_ROUTE,
            RouteKind::Tls => TLS_ROUTE,
            RouteKind::Udp => UDP_ROUTE,
        }
    }
}

/// One listener of one of our Gateways, as routes see it.
pub(super) struct ListenerView<'g> {
    pub(super) gateway: (&'g str, &'g str),
    pub(super) name: &'g str,
    pub(super) https: bool,
    /// A TCP or TLS (passthrough) listener: its routes are streams, not HTTP routes.
    pub(super) stream: Option<StreamListener>,
    /// The ListenerSet (namespace, name) it comes from; `None`: the Gateway's own. Routes
    /// attach to it through a parentRef to that ListenerSet, not to the Gateway.
    pub(super) set: Option<(&'g str, &'g str)>,
    /// The `observedGeneration` of its conditions: its ListenerSet's, or its Gateway's.
    pub(super) generation: Option<i64>,
    /// The Gateway's own addresses (`--gateway-addresses`); empty: a shared Gateway.
    pub(super) addresses: Vec<IpAddr>,
    pub(super) port: i32,
    /// An HTTP or HTTPS listener on a port of its own (not the Gateway HTTP or HTTPS port):
    /// that port, opened for it.
    pub(super) own_port: Option<u16>,
    /// Lower case; `None`: any host.
    pub(super) hostname: Option<HostPattern>,
    /// Routes may attach (the listener is accepted and takes some kind of route).
    pub(super) usable: bool,
    /// The kinds of route it takes (its `supportedKinds`).
    pub(super) kinds: Vec<RouteKind>,
    pub(super) namespaces: Allowed<'g>,
    pub(super) attached: i32,
    /// An HTTPS listener's certificates (its `certificateRefs`, resolved): placed once every
    /// Gateway's address is known (`place_certificates`).
    pub(super) certificates: ListenerCertificates,
    /// A TLS listener in Terminate mode: its connections are terminated with `certificates`
    /// (none resolved: every handshake fails), then relayed as TCP.
    pub(super) terminate: bool,
    /// An HTTPS listener's client-certificate validation (`spec.tls.frontend`), placed with
    /// its certificates (`place_validations`).
    pub(super) validation: Option<Arc<ClientValidation>>,
}

/// The protocols of listeners whose routes are streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StreamListener {
    Tcp,
    /// `protocol: TLS`, `tls.mode: Passthrough`.
    Tls,
    Udp,
}

/// An HTTPS listener's certificates: each Secret's key and PEM bundle.
pub(super) type ListenerCertificates = Vec<(ObjectKey, Arc<[u8]>)>;

/// Our Gateways by key: each with its listeners as routes see them and their status.
pub(super) type Gateways<'g> =
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
    /// The HTTP frontends its routes go to: one per address of its Gateway, or the shared
    /// one; none for a stream listener.
    pub(super) fn frontends(&self) -> impl Iterator<Item = FrontendKey> + '_ {
        let http = self.stream.is_none();
        let shared = (http && self.addresses.is_empty()).then_some(None);
        let https = self.https;
        shared
            .into_iter()
            .chain(
                self.addresses
                    .iter()
                    .filter(move |_| http)
                    .map(|ip| Some(*ip)),
            )
            .map(move |address| FrontendKey {
                address,
                https,
                port: self.own_port,
            })
    }
}

impl Matched {
    /// How many regular expressions it holds.
    pub(super) fn patterns(&self) -> usize {
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

/// A `Programmed` condition: `True` (serving), or `False` (`Invalid`) for `otherwise`.
pub(super) fn programmed(serving: bool, otherwise: &str, generation: Option<i64>) -> Condition {
    if serving {
        Condition::new("Programmed", true, "Programmed", "serving", generation)
    } else {
        Condition::new("Programmed", false, "Invalid", otherwise, generation)
    }
}

/// A Gateway's `metadata.creationTimestamp` as text that sorts by time; empty when unknown.
pub(super) fn created(gw: &Gateway) -> String {
    created_at(&gw.metadata)
}

/// An object's `metadata.creationTimestamp` as text that sorts by time (whole seconds, as
/// the API server stamps them); empty when unknown. Of two objects that compete, the older
/// wins: routes, ListenerSets, policies.
pub(super) fn created_at(meta: &ObjectMeta) -> String {
    meta.creation_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default()
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
pub(super) fn gateway_host(h: &str) -> Result<HostPattern, &'static str> {
    if h.contains(':') {
        return Err("has a port, which a Gateway API hostname may not");
    }
    validate_host(h)
}

/// ReferenceGrants by the namespace they grant into.
pub(super) struct Grants<'a>(HashMap<&'a str, Vec<&'a ReferenceGrant>>);

impl<'a> Grants<'a> {
    pub(super) fn of(grants: &[&'a ReferenceGrant]) -> Self {
        let mut by_ns: HashMap<&str, Vec<&ReferenceGrant>> = HashMap::default();
        for g in grants {
            let (ns, _) = meta_key(&g.metadata.namespace, &g.metadata.name);
            by_ns.entry(ns).or_default().push(*g);
        }
        Grants(by_ns)
    }

    /// Whether a `from` object (kind, namespace) may name `to` (group, kind, namespace, name).
    pub(super) fn allows(
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
pub(super) fn sorted<'i, T>(items: &[&'i T], meta: impl Fn(&T) -> &ObjectMeta) -> Vec<&'i T> {
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

/// What translating a route reads besides the route.
pub(super) struct RouteInputs<'a, 'g> {
    pub(super) gateways: &'a Gateways<'g>,
    pub(super) namespace_labels: &'a HashMap<&'g str, &'g BTreeMap<String, String>>,
    pub(super) grants: &'a Grants<'g>,
    pub(super) services: &'a HashMap<(&'a str, &'a str), (&'a Service, Vec<&'a EndpointSlice>)>,
}

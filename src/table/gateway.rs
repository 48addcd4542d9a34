//! Gateway API routes as the table holds them: per frontend a router from (host, path) to a
//! list of candidates in the spec's precedence order, each with the method, header and query
//! conditions a request must meet, and the rule it leads to — its backends and weights, or a
//! redirect, or an error — with the filters the rule applies. Data and pure matching only;
//! the decision core (`decide::gateway`) turns a match into what a request gets. No
//! Kubernetes, Pingora or tokio.
//!
//! Unlike Service and Ingress routes, a host level that a Gateway route claims is final: a
//! request whose host a listener's routes cover never falls through to a less specific host
//! (listener isolation), and gets 404 when no candidate matches.
//!
//! A Gateway with an address of its own (`--gateway-addresses`) has routers and listener hosts
//! of its own (`AddressRoutes`): a connection to that address sees only them, a connection to
//! any other address only the shared ones (Gateways without an address).

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;

use crate::table::balance::{Share, spread};
use crate::table::matcher::{HostLevel, PathRule, PathRules, SharedRouter, normalize_host};
use crate::table::pattern::Pattern;
use crate::table::policy::Cors;
use crate::table::shared::{EntryId, Shared};

/// The candidates of one routed (host, path), most precedent first: a path rule's target.
/// Shared, like the host level that holds it, by the tables that have it unchanged.
pub type Candidates = Arc<[Candidate]>;

/// One host level of a Gateway router: the path rules of one host, with their candidates.
pub type GatewayLevel = Arc<PathRules<Candidates>>;

/// What a request offers to a candidate's conditions; each engine implements it over its own
/// request representation.
pub trait RequestView {
    fn method(&self) -> &[u8];
    /// The first value of header `name` (given in lower case).
    fn header(&self, name: &str) -> Option<&[u8]>;
    /// The query string, without the `?`.
    fn query(&self) -> Option<&str>;
    /// The value of cookie `name`. This default reads the first `Cookie` field only; a view
    /// whose request may carry several (HTTP/2 splits them) reads them all.
    fn cookie(&self, name: &str) -> Option<&[u8]> {
        self.header("cookie")
            .and_then(|h| crate::table::sticky::find_cookie(h, name))
    }
}

/// A request with nothing but a method and the URL's query (`/explain`, tests).
pub struct BareRequest<'a> {
    pub method: &'a [u8],
    pub query: Option<&'a str>,
}

impl BareRequest<'_> {
    /// A `GET` without a query.
    pub const GET: BareRequest<'static> = BareRequest {
        method: b"GET",
        query: None,
    };
}

impl RequestView for BareRequest<'_> {
    fn method(&self) -> &[u8] {
        self.method
    }
    fn header(&self, _: &str) -> Option<&[u8]> {
        None
    }
    fn query(&self) -> Option<&str> {
        self.query
    }
}

/// The Gateway API routes of both HTTP frontends.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GatewayRoutes {
    /// Routes of the HTTP listeners served on the plain port.
    pub http: SharedRouter<Candidates>,
    /// Routes of the HTTPS listeners served on the TLS port.
    pub https: SharedRouter<Candidates>,
    /// Every rule of the routes, in route order (a route's rules are here even when it
    /// attached nowhere); candidates hold their own.
    pub rules: Vec<Arc<GatewayRule>>,
    /// The listener port a redirect without a port and scheme keeps, per frontend.
    pub http_port: u16,
    pub https_port: u16,
    /// The hosts the listeners of each frontend take, routes or not: a request for one of
    /// them is the Gateway's (404 when no route matches), never a Service's or an Ingress's.
    pub http_hosts: ListenerHosts,
    pub https_hosts: ListenerHosts,
    /// The Gateways with an address of their own, sorted by address: the routers and
    /// listener hosts a connection to that address sees instead of the shared ones above.
    /// Also the assignment the next build keeps (`assigned`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub addressed: Vec<AddressRoutes>,
    /// HTTP and HTTPS listeners on ports of their own, sorted by (address, port).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ported: Vec<PortRoutes>,
}

/// Where a listener's routes go: the plain or the TLS frontend, of the shared Gateways
/// (`address: None`) or of the Gateway that has this address; on switchyard's own HTTP or
/// TLS port (`port: None`), or on a port of the listener's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FrontendKey {
    pub address: Option<IpAddr>,
    pub https: bool,
    pub port: Option<u16>,
}

/// HTTP or HTTPS listeners on a port of their own (not the Gateway HTTP or HTTPS port): the
/// port is opened for them (on their Gateway's own address, with `--gateway-addresses`) and
/// its connections see these routes and hosts alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PortRoutes {
    /// The Gateway's own address; `None`: the bind address.
    pub address: Option<IpAddr>,
    pub port: u16,
    /// Its listeners terminate TLS (HTTPS).
    pub https: bool,
    /// The Gateway (namespace, name) whose port it is.
    pub gateway: (Box<str>, Box<str>),
    pub router: SharedRouter<Candidates>,
    pub hosts: ListenerHosts,
}

/// A Gateway with an address of its own: its listeners' routes and hosts, on both frontends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AddressRoutes {
    pub address: IpAddr,
    /// The Gateway's namespace and name.
    pub gateway: (Box<str>, Box<str>),
    pub http: SharedRouter<Candidates>,
    pub https: SharedRouter<Candidates>,
    pub http_hosts: ListenerHosts,
    pub https_hosts: ListenerHosts,
}

impl AddressRoutes {
    pub fn new(address: IpAddr, namespace: &str, name: &str) -> AddressRoutes {
        AddressRoutes {
            address: address.to_canonical(),
            gateway: (namespace.into(), name.into()),
            http: SharedRouter::default(),
            https: SharedRouter::default(),
            http_hosts: ListenerHosts::default(),
            https_hosts: ListenerHosts::default(),
        }
    }
}

/// The hostnames of a frontend's listeners, each with the id its routes' candidates carry.
/// A request belongs to the most specific listener that takes its host (an exact name, then
/// the longest wildcard, then a listener without a hostname) and only that listener's routes
/// may answer it: listener isolation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ListenerHosts {
    /// A listener without a hostname takes every host (its id is `ANY_LISTENER`).
    pub any: bool,
    /// Sorted; the name at index `i` has id `1 + i`.
    pub exact: Vec<Box<str>>,
    /// Suffixes with their leading dot (`.example.com`), longest first; the one at index `j`
    /// has id `1 + exact.len() + j`.
    pub wildcard: Vec<Box<str>>,
}

/// The listener id of a listener without a hostname.
pub const ANY_LISTENER: u32 = 0;

impl ListenerHosts {
    pub fn is_empty(&self) -> bool {
        !self.any && self.exact.is_empty() && self.wildcard.is_empty()
    }

    /// Adds a listener's hostname (`None`: none), keeping the order ids follow; call
    /// `finish` after the last.
    pub fn add(&mut self, hostname: Option<&str>, wildcard: bool) {
        match (hostname, wildcard) {
            (None, _) => self.any = true,
            (Some(h), false) => self.exact.push(h.into()),
            (Some(s), true) => self.wildcard.push(s.into()),
        }
    }

    pub fn finish(&mut self) {
        self.exact.sort();
        self.exact.dedup();
        self.wildcard
            .sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        self.wildcard.dedup();
    }

    /// The id of the listener a request for `hostname` (`None`: any) or with this wildcard
    /// suffix belongs to, as `add` was given it.
    pub fn id(&self, hostname: Option<&str>, wildcard: bool) -> Option<u32> {
        let at = |i: usize| u32::try_from(i).ok();
        match (hostname, wildcard) {
            (None, _) => self.any.then_some(ANY_LISTENER),
            (Some(h), false) => at(1 + self.exact.binary_search_by(|e| (**e).cmp(h)).ok()?),
            (Some(s), true) => {
                at(1 + self.exact.len() + self.wildcard.iter().position(|w| **w == *s)?)
            }
        }
    }

    /// The hostname key of listener `id` (`""`: the listener without a hostname; a wildcard's
    /// suffix keeps its dot), as `ClientValidations` keys listeners.
    pub fn key(&self, id: u32) -> Option<&str> {
        let i = usize::try_from(id).ok()?;
        match i {
            0 => self.any.then_some(""),
            i if i <= self.exact.len() => self.exact.get(i - 1).map(|n| &**n),
            i => self.wildcard.get(i - 1 - self.exact.len()).map(|s| &**s),
        }
    }

    /// The id of the listener that takes `host`, if any does.
    #[inline]
    pub fn owner(&self, host: Option<&[u8]>) -> Option<u32> {
        let mut buf = [0u8; 255];
        if let Some(h) = host.and_then(|h| normalize_host(h, &mut buf)) {
            let name = h.name();
            if let Ok(i) = self.exact.binary_search_by(|e| (**e).cmp(name)) {
                return u32::try_from(1 + i).ok();
            }
            if let Some(j) = self
                .wildcard
                .iter()
                .position(|s| name.len() > s.len() && name.ends_with(&**s))
            {
                return u32::try_from(1 + self.exact.len() + j).ok();
            }
        }
        self.any.then_some(ANY_LISTENER)
    }
}

impl GatewayRoutes {
    /// Every compiled regular expression the routes hold (path, header and query patterns;
    /// a pattern used twice is listed twice), for the next build to reuse.
    pub fn patterns(&self) -> impl Iterator<Item = &Pattern> {
        let own = self.addressed.iter().flat_map(|a| [&a.http, &a.https]);
        let paths = [&self.http, &self.https]
            .into_iter()
            .chain(own)
            .flat_map(|r| {
                r.exact
                    .values()
                    .chain(r.wildcard.iter().map(|(_, rules)| rules))
                    .chain(r.one_label.values())
                    .chain(std::iter::once(&r.any_host))
                    .flat_map(|rules| rules.rules().iter())
            });
        paths.flat_map(|rule| {
            let values = rule.target.iter().flat_map(|c| {
                c.headers
                    .iter()
                    .chain(c.query.iter())
                    .filter_map(|m| m.regex.as_deref())
            });
            rule.regex.as_deref().into_iter().chain(values)
        })
    }

    /// The listener port of a frontend, which a redirect without a port or scheme keeps: a
    /// port of the listeners' own (`port`), or the Gateway HTTP or HTTPS port.
    pub fn listener_port(&self, https: bool, port: Option<u16>) -> u16 {
        match port {
            Some(port) => port,
            None if https => self.https_port,
            None => self.http_port,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
            && self.http_hosts.is_empty()
            && self.https_hosts.is_empty()
            && self.addressed.is_empty()
            && self.ported.is_empty()
    }

    /// The Gateway that has address `ip`, if one does.
    pub fn at_address(&self, ip: IpAddr) -> Option<&AddressRoutes> {
        let ip = ip.to_canonical();
        self.addressed
            .binary_search_by(|a| a.address.cmp(&ip))
            .ok()
            .and_then(|i| self.addressed.get(i))
    }

    /// Each Gateway's address: (namespace, name, address).
    pub fn assigned(&self) -> impl Iterator<Item = (&str, &str, IpAddr)> {
        self.addressed
            .iter()
            .map(|a| (&*a.gateway.0, &*a.gateway.1, a.address))
    }

    /// The router and listener hosts of a frontend, to build (`None`: an address no Gateway
    /// has).
    pub fn frontend_mut(
        &mut self,
        at: FrontendKey,
    ) -> Option<(&mut SharedRouter<Candidates>, &mut ListenerHosts)> {
        if let Some(port) = at.port {
            let i = self.port_index(at.address, port)?;
            let p = self.ported.get_mut(i)?;
            return Some((&mut p.router, &mut p.hosts));
        }
        match at.address {
            None if at.https => Some((&mut self.https, &mut self.https_hosts)),
            None => Some((&mut self.http, &mut self.http_hosts)),
            Some(ip) => {
                let i = self
                    .addressed
                    .binary_search_by(|a| a.address.cmp(&ip))
                    .ok()?;
                let a = self.addressed.get_mut(i)?;
                Some(if at.https {
                    (&mut a.https, &mut a.https_hosts)
                } else {
                    (&mut a.http, &mut a.http_hosts)
                })
            }
        }
    }

    /// The listener hosts of a frontend (empty for an address no Gateway has).
    pub fn hosts(&self, at: FrontendKey) -> &ListenerHosts {
        static NONE: ListenerHosts = ListenerHosts {
            any: false,
            exact: Vec::new(),
            wildcard: Vec::new(),
        };
        if let Some(port) = at.port {
            return self.at_port(at.address, port).map_or(&NONE, |p| &p.hosts);
        }
        match at.address {
            None => self.main_frontend(None, at.https).2,
            Some(ip) => match self.at_address(ip) {
                Some(a) if at.https => &a.https_hosts,
                Some(a) => &a.http_hosts,
                None => &NONE,
            },
        }
    }

    /// The listeners of `port`, opened on `address` (`None`: the bind address).
    pub fn at_port(&self, address: Option<IpAddr>, port: u16) -> Option<&PortRoutes> {
        self.ported.get(self.port_index(address, port)?)
    }

    /// Where the listeners of `port` on `address` are in `ported` (sorted by both).
    fn port_index(&self, address: Option<IpAddr>, port: u16) -> Option<usize> {
        self.ported
            .binary_search_by(|p| (p.address, p.port).cmp(&(address, port)))
            .ok()
    }

    /// The listeners on a port of their own that a connection to `local`:`port` was made
    /// to: its Gateway's address's, else the bind address's.
    #[inline]
    fn ported_at(&self, local: Option<IpAddr>, port: u16) -> Option<&PortRoutes> {
        local
            .map(|ip| ip.to_canonical())
            .and_then(|ip| self.at_port(Some(ip), port))
            .or_else(|| self.at_port(None, port))
    }

    /// The frontend a connection to `local` sees, with its router and listener hosts: the
    /// listeners' on its port when it was made to a port of theirs (`port`: set only for
    /// such connections), else its Gateway's when one has that address, else the shared
    /// one. `None`: a port of their own that no listener has (any more).
    #[inline]
    fn frontend(
        &self,
        local: Option<IpAddr>,
        port: Option<u16>,
        https: bool,
    ) -> Option<(FrontendKey, &SharedRouter<Candidates>, &ListenerHosts)> {
        if let Some(port) = port {
            // A port of their own answers for its listeners alone.
            let p = self.ported_at(local, port)?;
            let at = FrontendKey {
                address: p.address,
                https: p.https,
                port: Some(port),
            };
            return Some((at, &p.router, &p.hosts));
        }
        Some(self.main_frontend(local, https))
    }

    /// `frontend` for a connection to switchyard's own HTTP or TLS port.
    #[inline]
    fn main_frontend(
        &self,
        local: Option<IpAddr>,
        https: bool,
    ) -> (FrontendKey, &SharedRouter<Candidates>, &ListenerHosts) {
        let own = local
            .filter(|_| !self.addressed.is_empty())
            .and_then(|ip| self.at_address(ip));
        let at = FrontendKey {
            address: own.map(|a| a.address),
            https,
            port: None,
        };
        match (own, https) {
            (Some(a), true) => (at, &a.https, &a.https_hosts),
            (Some(a), false) => (at, &a.http, &a.http_hosts),
            (None, true) => (at, &self.https, &self.https_hosts),
            (None, false) => (at, &self.http, &self.http_hosts),
        }
    }

    /// The HTTPS listener that takes `host` on a connection to `local` (its address, and its
    /// port when it is a listener's own): its frontend's address (`None`: the shared
    /// frontend) and port, and its hostname key (`ListenerHosts::key`).
    #[inline]
    pub fn https_listener(
        &self,
        (local, port): (Option<IpAddr>, Option<u16>),
        host: Option<&[u8]>,
    ) -> Option<(Option<IpAddr>, Option<u16>, &str)> {
        let (at, _, hosts) = self.frontend(local, port, true)?;
        Some((at.address, at.port, hosts.key(hosts.owner(host)?)?))
    }

    /// The candidate `req` meets on the most specific host level that the shared Gateways'
    /// routes claim for `host`, with the path rule it came through.
    #[inline]
    pub fn lookup<'r>(
        &'r self,
        https: bool,
        host: Option<&[u8]>,
        path: &str,
        req: &impl RequestView,
    ) -> GatewayMatch<'r> {
        self.lookup_at((None, None), https, host, path, req)
    }

    /// `lookup` for a connection to `local` (its local address): the routes of the Gateway
    /// that has that address, or the shared ones.
    #[inline]
    pub fn lookup_at<'r>(
        &'r self,
        (local, port): (Option<IpAddr>, Option<u16>),
        https: bool,
        host: Option<&[u8]>,
        path: &str,
        req: &impl RequestView,
    ) -> GatewayMatch<'r> {
        // A port of the listeners' own serves them alone: what they do not take is 404.
        // Elsewhere, a host no listener takes is left to the Service and Ingress routes.
        let untaken = if port.is_some() {
            GatewayMatch::NoRoute
        } else {
            GatewayMatch::NotTaken
        };
        let Some((_, router, hosts)) = self.frontend(local, port, https) else {
            return untaken;
        };
        // Every route is on a listener: without listeners there is nothing to do (and no
        // host to normalize).
        if hosts.is_empty() {
            return untaken;
        }
        let Some(owner) = hosts.owner(host) else {
            return untaken;
        };
        // Host levels from the most specific; only candidates of the owning listener count.
        // The candidate is kept as the path rules are tried, not looked for twice.
        let mut chosen = None;
        let found = router.walk(host, |_, rules| {
            rules.lookup_where(path, |rule| {
                chosen = pick(&rule.target, owner, req);
                chosen.is_some()
            })
        });
        match (found, chosen) {
            (Some(rule), Some(c)) => GatewayMatch::Matched(rule, c),
            _ => GatewayMatch::NoRoute,
        }
    }
}

/// The first of `list` that a request of listener `owner` meets.
#[inline]
fn pick<'r>(list: &'r Candidates, owner: u32, req: &impl RequestView) -> Option<&'r Candidate> {
    list.iter().find(|c| c.listener == owner && c.matches(req))
}

/// What the Gateway routes say of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatewayMatch<'r> {
    /// This candidate, reached through this path rule.
    Matched(&'r PathRule<Candidates>, &'r Candidate),
    /// A listener takes the host but no route matches: 404.
    NoRoute,
    /// No listener takes the host: the Service and Ingress routes decide.
    NotTaken,
}

/// One match of one rule: the conditions beyond host and path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Candidate {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<Box<str>>,
    /// Header names in lower case; every one must match.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub headers: Box<[ValueMatch]>,
    /// Query parameter names as written (compared exactly); every one must match.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub query: Box<[ValueMatch]>,
    /// The rule it leads to (shown by its origin).
    #[serde(serialize_with = "rule_origin")]
    pub rule: Arc<GatewayRule>,
    /// The listener whose route this is (`ListenerHosts` id): a request belonging to another
    /// listener never meets it.
    pub listener: u32,
}

/// A header or query parameter that must have this exact value, or whose whole value must
/// match a regular expression (`RegularExpression`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ValueMatch {
    pub name: Box<str>,
    /// The exact value, or the pattern's source.
    pub value: Box<str>,
    /// `RegularExpression`: the compiled `value`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub regex: Option<Box<Pattern>>,
}

impl ValueMatch {
    /// Whether a request's value meets this match.
    #[inline]
    pub fn accepts(&self, value: &[u8]) -> bool {
        match &self.regex {
            Some(p) => p.is_match_bytes(value),
            None => value == self.value.as_bytes(),
        }
    }
}

impl Candidate {
    pub fn matches(&self, req: &impl RequestView) -> bool {
        if let Some(m) = &self.method
            && m.as_bytes() != req.method()
        {
            return false;
        }
        self.headers
            .iter()
            .all(|h| req.header(&h.name).is_some_and(|v| h.accepts(v)))
            && (self.query.is_empty() || {
                let q = req.query().unwrap_or("");
                self.query
                    .iter()
                    .all(|m| query_value(q, &m.name).is_some_and(|v| m.accepts(v.as_bytes())))
            })
    }
}

/// The first value of parameter `name` in `query` (`a=1&b=2`), not percent-decoded.
fn query_value<'q>(query: &'q str, name: &str) -> Option<&'q str> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then_some(v)
    })
}

fn rule_origin<S: serde::Serializer>(rule: &Arc<GatewayRule>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&rule.origin)
}

/// What a rule does with the requests it matches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GatewayRule {
    /// `namespace/route` and the rule's index, for `/explain` and logs.
    pub origin: Box<str>,
    pub action: Action,
    /// Applied to the request before any backend's own.
    #[serde(skip_serializing_if = "HeaderFilter::is_empty")]
    pub request_headers: HeaderFilter,
    #[serde(skip_serializing_if = "HeaderFilter::is_empty")]
    pub response_headers: HeaderFilter,
    /// `URLRewrite`: the Host the backend sees.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewrite_host: Option<Arc<str>>,
    /// The `CORS` filter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cors: Option<Arc<Cors>>,
    /// `URLRewrite`: the path the backend sees.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewrite_path: Option<PathRewrite>,
    /// `RequestMirror`: copies of the requests go to these backends too.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mirrors: Vec<Mirror>,
    /// `timeouts.request`: the whole exchange, from the request to the end of the response.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_timeout: Option<Duration>,
    /// `timeouts.backendRequest`: one try, from sending to the backend to its response.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_timeout: Option<Duration>,
}

impl GatewayRule {
    /// A rule that answers `status` and does nothing else (no filter, no timeout).
    pub fn answering(origin: Box<str>, status: u16) -> GatewayRule {
        GatewayRule {
            origin,
            action: Action::Fail(status),
            request_headers: HeaderFilter::default(),
            response_headers: HeaderFilter::default(),
            rewrite_host: None,
            cors: None,
            rewrite_path: None,
            mirrors: Vec::new(),
            request_timeout: None,
            backend_timeout: None,
        }
    }

    /// Whether an engine must change the request or response beyond what every route gets.
    pub fn rewrites(&self) -> bool {
        !self.request_headers.is_empty()
            || !self.response_headers.is_empty()
            || self.rewrite_host.is_some()
            || self.rewrite_path.is_some()
            || !self.mirrors.is_empty()
            || self.request_timeout.is_some()
            || self.backend_timeout.is_some()
            || matches!(&self.action, Action::Backends(b) if b.backends.iter().any(|b| {
                !b.request_headers.is_empty() || !b.response_headers.is_empty()
            }))
    }
}

/// A backend that gets a copy of a share of the rule's requests; its answer is dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mirror {
    pub entry: EntryId,
    /// The share mirrored.
    #[serde(flatten)]
    pub share: Share,
}

impl Mirror {
    /// Whether this request is one of the share to copy.
    pub fn due(&self) -> bool {
        self.share.due()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Action {
    /// Share the requests among these backends by weight.
    Backends(Backends),
    /// Answer a redirect.
    Redirect(Redirect),
    /// Answer this status: 500 for a rule whose backends cannot be used.
    Fail(u16),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Backends {
    pub backends: Box<[Backend]>,
    /// Sum of the weights (more than 0).
    pub total: u64,
    /// Requests shared so far (not part of equality: a rebuild starts it again).
    #[serde(skip)]
    pub turn: Shared<AtomicU64>,
}

impl Backends {
    /// The backend for the next request: each gets its weight's share, spread so that a
    /// short run of requests already sees every backend in proportion.
    pub fn next(&self) -> Option<(usize, &Backend)> {
        self.at(self.turn.fetch_add(1, Ordering::Relaxed))
    }

    /// The backend `next` would give, without taking the turn (`/explain`).
    pub fn peek(&self) -> Option<(usize, &Backend)> {
        self.at(self.turn.load(Ordering::Relaxed))
    }

    fn at(&self, n: u64) -> Option<(usize, &Backend)> {
        let mut at = spread(n, self.total);
        self.backends.iter().enumerate().find(|(_, b)| {
            if at < b.weight {
                true
            } else {
                at -= b.weight;
                false
            }
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Backend {
    /// `None`: a reference that does not resolve; its share of the requests answers 500.
    pub entry: Option<EntryId>,
    pub weight: u64,
    #[serde(skip_serializing_if = "HeaderFilter::is_empty")]
    pub request_headers: HeaderFilter,
    #[serde(skip_serializing_if = "HeaderFilter::is_empty")]
    pub response_headers: HeaderFilter,
}

/// `RequestHeaderModifier` / `ResponseHeaderModifier`: names in lower case.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HeaderFilter {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub set: Vec<(Box<str>, Box<str>)>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub add: Vec<(Box<str>, Box<str>)>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<Box<str>>,
}

impl HeaderFilter {
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.add.is_empty() && self.remove.is_empty()
    }
}

/// A new path: the whole of it, or the matched prefix replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum PathRewrite {
    Full(Arc<str>),
    Prefix(Arc<str>),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Redirect {
    /// `http` or `https`; `None`: the request's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheme: Option<Box<str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<Box<str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathRewrite>,
    /// 301, 302 (the default), 303, 307 or 308.
    pub status: u16,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::matcher::{PathRule, PathRules};

    struct Req {
        method: &'static str,
        headers: Vec<(&'static str, &'static str)>,
        query: Option<&'static str>,
    }

    impl RequestView for Req {
        fn method(&self) -> &[u8] {
            self.method.as_bytes()
        }
        fn header(&self, name: &str) -> Option<&[u8]> {
            self.headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_bytes())
        }
        fn query(&self) -> Option<&str> {
            self.query
        }
    }

    fn get() -> Req {
        Req {
            method: "GET",
            headers: vec![],
            query: None,
        }
    }

    fn cand(rule: u32) -> Candidate {
        Candidate {
            method: None,
            headers: Box::new([]),
            query: Box::new([]),
            rule: Arc::new(GatewayRule::answering(rule.to_string().into(), 500)),
            listener: ANY_LISTENER,
        }
    }

    fn vm(name: &str, value: &str) -> ValueMatch {
        ValueMatch {
            name: name.into(),
            value: value.into(),
            regex: None,
        }
    }

    fn vm_re(name: &str, pattern: &str) -> ValueMatch {
        ValueMatch {
            regex: Some(Box::new(Pattern::new(pattern).unwrap())),
            ..vm(name, pattern)
        }
    }

    /// The rule a candidate leads to, as `cand` numbered it.
    fn number(c: &Candidate) -> u32 {
        c.rule.origin.parse().unwrap()
    }

    fn regex_rule<const N: usize>(pattern: &str, target: [Candidate; N]) -> PathRule<Candidates> {
        PathRule {
            regex: Some(Box::new(Pattern::new(pattern).unwrap())),
            ..rule(pattern, false, target)
        }
    }

    fn rule<const N: usize>(
        prefix: &str,
        exact: bool,
        target: [Candidate; N],
    ) -> PathRule<Candidates> {
        PathRule {
            prefix: prefix.into(),
            strip: false,
            ignore_case: false,
            exact,
            regex: None,
            policy: None,
            target: target.into_iter().collect(),
        }
    }

    fn routes() -> GatewayRoutes {
        let mut g = GatewayRoutes::default();
        // example.com: /v2 (header version: two first), /; any host: /.
        let with_header = Candidate {
            headers: Box::new([vm("version", "two")]),
            ..cand(9)
        };
        let mut ex = PathRules::default();
        ex.insert(rule("/v2", false, [cand(0)]));
        ex.insert(rule("/", false, [with_header, cand(1)]));
        g.http.exact.insert("example.com".into(), Arc::new(ex));
        Arc::make_mut(&mut g.http.any_host).insert(rule("/", false, [cand(2)]));
        g.http_hosts.any = true;
        g
    }

    fn rule_of(g: &GatewayRoutes, host: &str, path: &str, req: &Req) -> Result<Option<u32>, ()> {
        match g.lookup(false, Some(host.as_bytes()), path, req) {
            GatewayMatch::Matched(_, c) => Ok(Some(number(c))),
            GatewayMatch::NoRoute => Err(()),
            GatewayMatch::NotTaken => Ok(None),
        }
    }

    #[test]
    fn conditions_pick_among_candidates_of_one_path() {
        let g = routes();
        assert_eq!(rule_of(&g, "example.com", "/v2/x", &get()), Ok(Some(0)));
        assert_eq!(rule_of(&g, "example.com", "/", &get()), Ok(Some(1)));
        let two = Req {
            headers: vec![("Version", "two")],
            ..get()
        };
        assert_eq!(rule_of(&g, "example.com", "/", &two), Ok(Some(9)));
        assert_eq!(rule_of(&g, "other.net", "/", &two), Ok(Some(2)));
    }

    #[test]
    fn a_request_belongs_to_its_most_specific_listener() {
        let mut g = routes();
        // A listener for iso.example.com (id 1) with one route; a route of the host-less
        // listener names the same host.
        g.http_hosts.add(Some("iso.example.com"), false);
        g.http_hosts.finish();
        let iso = g.http_hosts.id(Some("iso.example.com"), false).unwrap();
        assert_eq!(g.http_hosts.owner(Some(b"ISO.example.com:80")), Some(iso));
        assert_eq!(g.http_hosts.owner(Some(b"other.org")), Some(ANY_LISTENER));
        let mut only = PathRules::default();
        let iso_only = Candidate {
            listener: iso,
            ..cand(7)
        };
        only.insert(rule("/only", true, [iso_only]));
        only.insert(rule("/any", false, [cand(8)]));
        g.http
            .exact
            .insert("iso.example.com".into(), Arc::new(only));
        assert_eq!(rule_of(&g, "iso.example.com", "/only", &get()), Ok(Some(7)));
        // The host-less listener's routes never answer a request of the iso listener, at
        // this host level or a less specific one.
        assert_eq!(rule_of(&g, "iso.example.com", "/any", &get()), Err(()));
        assert_eq!(rule_of(&g, "iso.example.com", "/", &get()), Err(()));
        assert_eq!(rule_of(&g, "other.org", "/", &get()), Ok(Some(2)));
        // No Gateway route on the TLS side: the others decide.
        assert_eq!(
            g.lookup(true, Some(b"example.com"), "/", &get()),
            GatewayMatch::NotTaken
        );
    }

    #[test]
    fn a_gateways_own_address_sees_only_its_routes() {
        let mut g = routes();
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        // The Gateway at .3 takes every host on the plain port and sends / to rule 5; the one
        // at .2 has no listener on it.
        let mut three = AddressRoutes::new(ip("127.0.0.3"), "ns", "three");
        Arc::make_mut(&mut three.http.any_host).insert(rule("/", false, [cand(5)]));
        three.http_hosts.any = true;
        g.addressed = vec![AddressRoutes::new(ip("127.0.0.2"), "ns", "two"), three];
        let at = |local: &str, https: bool, host: &str| match g.lookup_at(
            (Some(ip(local)), None),
            https,
            Some(host.as_bytes()),
            "/",
            &get(),
        ) {
            GatewayMatch::Matched(_, c) => Ok(Some(number(c))),
            GatewayMatch::NoRoute => Err(()),
            GatewayMatch::NotTaken => Ok(None),
        };
        assert_eq!(at("127.0.0.3", false, "example.com"), Ok(Some(5)));
        // IPv4-mapped, as a dual-stack socket reports it.
        assert_eq!(at("::ffff:127.0.0.3", false, "other.net"), Ok(Some(5)));
        // Its TLS side has no listener: the Service and Ingress routes decide.
        assert_eq!(at("127.0.0.3", true, "example.com"), Ok(None));
        // The Gateway at .2 has no listener: nothing of the shared Gateways reaches it.
        assert_eq!(at("127.0.0.2", false, "example.com"), Ok(None));
        // Any other address sees the shared Gateways, as does no address.
        assert_eq!(at("127.0.0.1", false, "example.com"), Ok(Some(1)));
        assert_eq!(rule_of(&g, "example.com", "/", &get()), Ok(Some(1)));
        assert_eq!(
            g.assigned().collect::<Vec<_>>(),
            [
                ("ns", "two", ip("127.0.0.2")),
                ("ns", "three", ip("127.0.0.3"))
            ]
        );
        assert!(
            !GatewayRoutes {
                addressed: vec![AddressRoutes::new(ip("127.0.0.2"), "ns", "two")],
                ..GatewayRoutes::default()
            }
            .is_empty()
        );
    }

    #[test]
    fn unmet_conditions_fall_to_a_shorter_prefix() {
        let mut g = GatewayRoutes::default();
        let post_only = Candidate {
            method: Some("POST".into()),
            ..cand(0)
        };
        let q = Candidate {
            query: Box::new([vm("animal", "whale")]),
            ..cand(1)
        };
        let mut rules = PathRules::default();
        rules.insert(rule("/a", false, [post_only]));
        rules.insert(rule("/", false, [q]));
        g.http.any_host = Arc::new(rules);
        g.http_hosts.any = true;
        let post = Req {
            method: "POST",
            ..get()
        };
        assert_eq!(rule_of(&g, "h", "/a", &post), Ok(Some(0)));
        assert_eq!(rule_of(&g, "h", "/a", &get()), Err(()));
        let whale = Req {
            query: Some("x=1&animal=whale"),
            ..get()
        };
        assert_eq!(rule_of(&g, "h", "/a", &whale), Ok(Some(1)));
        let dolphin = Req {
            query: Some("animal=dolphin"),
            ..get()
        };
        assert_eq!(rule_of(&g, "h", "/a", &dolphin), Err(()));
    }

    #[test]
    fn regular_expressions_rank_after_exact_and_prefix_paths() {
        let mut g = GatewayRoutes::default();
        let post_only = Candidate {
            method: Some("POST".into()),
            ..cand(10)
        };
        let mut rules = PathRules::default();
        // Inserted in precedence order: the longer pattern first.
        rules.insert(regex_rule("/v[0-9]+/users/[a-z]+", [cand(0)]));
        rules.insert(regex_rule("/v[0-9]+/.*", [post_only, cand(1)]));
        rules.insert(rule("/v1/users/exact", true, [cand(2)]));
        rules.insert(rule("/v2", false, [cand(3)]));
        g.http.any_host = Arc::new(rules);
        g.http_hosts.any = true;
        assert_eq!(rule_of(&g, "h", "/v1/users/exact", &get()), Ok(Some(2)));
        assert_eq!(rule_of(&g, "h", "/v1/users/bob", &get()), Ok(Some(0)));
        assert_eq!(rule_of(&g, "h", "/v1/other", &get()), Ok(Some(1)));
        let post = Req {
            method: "POST",
            ..get()
        };
        assert_eq!(rule_of(&g, "h", "/v1/other", &post), Ok(Some(10)));
        // A prefix beats every pattern, however long: /v2/users/bob is /v2's.
        assert_eq!(rule_of(&g, "h", "/v2/users/bob", &get()), Ok(Some(3)));
        // The whole path must match: not a part of it.
        assert_eq!(rule_of(&g, "h", "/api/v1/users/bob", &get()), Err(()));
        assert_eq!(rule_of(&g, "h", "/v1", &get()), Err(()));
        // A pattern that does not match gives way to the next one.
        assert_eq!(rule_of(&g, "h", "/v1/users/bob1", &get()), Ok(Some(1)));
    }

    #[test]
    fn header_and_query_patterns_match_whole_values() {
        let mut g = GatewayRoutes::default();
        let re = Candidate {
            headers: Box::new([vm_re("version", "v[0-9]+"), vm("env", "prod")]),
            query: Box::new([vm_re("id", "[0-9]{1,3}")]),
            ..cand(1)
        };
        Arc::make_mut(&mut g.http.any_host).insert(rule("/", false, [re, cand(0)]));
        g.http_hosts.any = true;
        let req = |version: &'static str, query: &'static str| Req {
            headers: vec![("Version", version), ("env", "prod")],
            query: Some(query),
            ..get()
        };
        assert_eq!(rule_of(&g, "h", "/", &req("v12", "id=7")), Ok(Some(1)));
        assert_eq!(
            rule_of(&g, "h", "/", &req("v12", "x=1&id=123")),
            Ok(Some(1))
        );
        // Whole values only; an absent or empty value does not match.
        assert_eq!(rule_of(&g, "h", "/", &req("v12x", "id=7")), Ok(Some(0)));
        assert_eq!(rule_of(&g, "h", "/", &req("v12", "id=1234")), Ok(Some(0)));
        assert_eq!(rule_of(&g, "h", "/", &req("v12", "id=")), Ok(Some(0)));
        assert_eq!(rule_of(&g, "h", "/", &req("v12", "other=1")), Ok(Some(0)));
        let no_header = Req {
            query: Some("id=7"),
            ..get()
        };
        assert_eq!(rule_of(&g, "h", "/", &no_header), Ok(Some(0)));
    }

    #[test]
    fn weights_share_every_run_of_requests() {
        let b = |entry, weight| Backend {
            entry: Some(entry),
            weight,
            request_headers: HeaderFilter::default(),
            response_headers: HeaderFilter::default(),
        };
        let backends = Backends {
            backends: Box::new([b(0, 7), b(1, 0), b(2, 3)]),
            total: 10,
            turn: Shared::default(),
        };
        let mut counts = [0u32; 3];
        for _ in 0..1000 {
            let e = backends.next().and_then(|(_, b)| b.entry).unwrap() as usize;
            counts[e] += 1;
        }
        assert_eq!(counts, [700, 0, 300]);
        // A short run is already spread: 10 turns give exactly 7 and 3.
        let mut first = [0u32; 3];
        for _ in 0..10 {
            first[backends.next().and_then(|(_, b)| b.entry).unwrap() as usize] += 1;
        }
        assert_eq!(first, [7, 0, 3]);
    }

    #[test]
    fn a_mirror_copies_its_share() {
        let m = |numerator, denominator| Mirror {
            entry: 0,
            share: Share::new(numerator, denominator),
        };
        let count = |m: &Mirror| (0..200).filter(|_| m.due()).count();
        assert_eq!(count(&m(1, 1)), 200);
        assert_eq!(count(&m(0, 100)), 0);
        assert_eq!(count(&m(20, 100)), 40);
        assert_eq!(count(&m(1, 3)), 67);
    }
}

//! Gateway API streams: the TCP, TLS (passthrough) and UDP listeners of Gateways and the
//! TCPRoutes, TLSRoutes and UDPRoutes attached to them. A TCP listener's connections go to its
//! route's backends by weight; a TLS listener's by the server name of the client's hello,
//! relayed unterminated (Passthrough) or terminated with the listener's certificates first
//! (Terminate, on a port of its own); a UDP listener's datagrams by client flow to endpoints this table
//! lists itself (a UDP Service port is no entry: entries are TCP).
//! TLS listeners on the TLS port itself share it with termination: their names are relayed
//! before any handshake (`passthrough`). Data only: the TCP frontends open the ports
//! (`data::engine::tcp`), the TLS port reads the names (`data::passthrough`), the decision core
//! picks the backend. No Kubernetes, Pingora or tokio.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use crate::table::gateway::Backends;
use crate::table::matcher::HostPattern;
use crate::table::passthrough::by_server_name;

/// The Gateways' stream listeners with routes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Streams {
    /// Ports of their own, sorted by address and port.
    pub ports: Vec<StreamPort>,
    /// TLS listeners on the TLS port: names relayed before the handshake, ahead of
    /// `ssl-passthrough` Ingresses.
    pub passthrough: Vec<SniRoute>,
    /// UDP ports, sorted by address and port.
    pub udp: Vec<UdpPort>,
}

/// One UDP port a Gateway listens on, and the oldest attached route's backends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpPort {
    pub address: Option<IpAddr>,
    pub port: u16,
    pub to: UdpBackends,
}

/// A UDPRoute's backends by weight.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UdpBackends {
    pub backends: Box<[UdpBackend]>,
    /// Sum of the weights (0: every flow refused).
    pub total: u64,
}

/// One Service port of a UDPRoute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpBackend {
    /// `namespace/name:port`, for logs.
    pub service: Box<str>,
    pub weight: u64,
    /// Its ready endpoints, sorted; empty for a reference that does not resolve (its share
    /// of the flows is refused).
    pub endpoints: Arc<[SocketAddr]>,
}

/// One port a Gateway listens on for raw connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamPort {
    /// The Gateway's own address (`--gateway-addresses`): the port is opened on it alone.
    /// `None`: on the bind address, as `--tcp-services` ports.
    pub address: Option<IpAddr>,
    pub port: u16,
    pub serve: StreamServe,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamServe {
    /// A TCP listener: its route's backends take every connection.
    Tcp(Backends),
    /// TLS listeners in passthrough mode: by the hello's server name; a name none takes is
    /// closed.
    Tls(Vec<SniRoute>),
}

/// The connections whose hello names `host` (`None`: any name, or none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SniRoute {
    pub host: Option<HostPattern>,
    /// On the TLS port: the Gateway's own address, whose connections alone it takes.
    pub address: Option<IpAddr>,
    pub to: Backends,
    /// A TLS listener in Terminate mode: the connection is terminated with these
    /// certificates (PEM chain and key, chosen by server name; none: every handshake fails),
    /// and its plaintext relayed. `None`: passed through unterminated.
    pub terminate: Option<Arc<[Arc<[u8]>]>>,
}

impl Streams {
    pub fn is_empty(&self) -> bool {
        self.ports.is_empty() && self.passthrough.is_empty() && self.udp.is_empty()
    }

    /// The backends of the UDP port opened on `address` (`None`: the bind address).
    pub fn udp_port(&self, address: Option<IpAddr>, port: u16) -> Option<&UdpBackends> {
        self.udp
            .binary_search_by(|p| (p.address, p.port).cmp(&(address, port)))
            .ok()
            .map(|i| &self.udp[i].to)
    }

    /// The certificates a connection to a TLS listener's own port, naming `name`, is
    /// terminated with (`None`: it is passed through, or not taken).
    pub fn terminate(
        &self,
        address: Option<IpAddr>,
        port: u16,
        name: Option<&str>,
    ) -> Option<&Arc<[Arc<[u8]>]>> {
        match self.port(address, port)? {
            StreamServe::Tls(routes) => sni_route_of(routes, name, None)?.terminate.as_ref(),
            StreamServe::Tcp(_) => None,
        }
    }

    /// What the port opened on `address` (`None`: the bind address) serves.
    pub fn port(&self, address: Option<IpAddr>, port: u16) -> Option<&StreamServe> {
        self.ports
            .binary_search_by(|p| (p.address, p.port).cmp(&(address, port)))
            .ok()
            .map(|i| &self.ports[i].serve)
    }
}

/// The backends the connections naming `name` go to, among `routes` seen from a connection
/// to `local`: an exact name first, then the longest wildcard, then a route for any name.
pub fn sni_route<'t>(
    routes: &'t [SniRoute],
    name: Option<&str>,
    local: Option<IpAddr>,
) -> Option<&'t Backends> {
    sni_route_of(routes, name, local).map(|r| &r.to)
}

/// The route of the connections naming `name` (as `sni_route`), with how it is served.
pub fn sni_route_of<'t>(
    routes: &'t [SniRoute],
    name: Option<&str>,
    local: Option<IpAddr>,
) -> Option<&'t SniRoute> {
    let seen = || {
        routes
            .iter()
            .filter(move |r| r.address.is_none_or(|a| Some(a) == local))
    };
    name.and_then(|name| by_server_name(seen().map(|r| (r.host.as_ref(), r)), name))
        .or_else(|| seen().find(|r| r.host.is_none()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::gateway::Backend;
    use crate::table::shared::Shared;

    fn to(entry: u32) -> Backends {
        Backends {
            backends: vec![Backend {
                entry: Some(entry),
                weight: 1,
                request_headers: Default::default(),
                response_headers: Default::default(),
            }]
            .into_boxed_slice(),
            total: 1,
            turn: Shared::default(),
        }
    }

    fn entry(b: Option<&Backends>) -> Option<u32> {
        b.and_then(|b| b.peek()).and_then(|(_, b)| b.entry)
    }

    #[test]
    fn names_pick_exact_then_wildcard_then_any() {
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let routes = [
            SniRoute {
                host: None,
                address: None,
                to: to(1),
                terminate: None,
            },
            SniRoute {
                host: Some(HostPattern::Wildcard(".example.com".into())),
                address: None,
                to: to(2),
                terminate: None,
            },
            SniRoute {
                host: Some(HostPattern::Exact("abc.example.com".into())),
                address: None,
                to: to(3),
                terminate: None,
            },
            SniRoute {
                host: Some(HostPattern::Exact("own.example.com".into())),
                address: Some(a),
                to: to(4),
                terminate: None,
            },
        ];
        assert_eq!(
            entry(sni_route(&routes, Some("abc.example.com"), None)),
            Some(3)
        );
        assert_eq!(
            entry(sni_route(&routes, Some("x.y.example.com"), None)),
            Some(2)
        );
        assert_eq!(entry(sni_route(&routes, Some("other.org"), None)), Some(1));
        assert_eq!(entry(sni_route(&routes, None, None)), Some(1));
        // A Gateway's own address sees its routes; others do not.
        assert_eq!(
            entry(sni_route(&routes, Some("own.example.com"), Some(a))),
            Some(4)
        );
        assert_eq!(
            entry(sni_route(&routes, Some("own.example.com"), None)),
            Some(2)
        );
        assert_eq!(
            entry(sni_route(&routes[1..3], Some("other.org"), None)),
            None
        );
    }

    #[test]
    fn ports_are_found_by_address_and_port() {
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let port = |address, port, e| StreamPort {
            address,
            port,
            serve: StreamServe::Tcp(to(e)),
        };
        let s = Streams {
            ports: vec![
                port(None, 9000, 1),
                port(None, 9300, 2),
                port(Some(a), 9000, 3),
            ],
            passthrough: Vec::new(),
            udp: Vec::new(),
        };
        let e = |serve: Option<&StreamServe>| match serve {
            Some(StreamServe::Tcp(b)) => entry(Some(b)),
            _ => None,
        };
        assert_eq!(e(s.port(None, 9300)), Some(2));
        assert_eq!(e(s.port(Some(a), 9000)), Some(3));
        assert_eq!(e(s.port(None, 9001)), None);
    }
}

//! Where a UDP flow goes: a new client flow of a Gateway UDP listener is given one endpoint for
//! its whole life, chosen from its route's backends by weight and then among the backend's
//! endpoints, both by a hash of the client's address and port. So a client whose flow expired
//! and comes back lands on the same endpoint while the table is unchanged, and a changed
//! endpoint list moves only the clients of the endpoints that went (rendezvous hashing). Pure:
//! no sockets, no clock.

use std::net::SocketAddr;

use crate::table::balance::{fnv1a, mix64, rendezvous};
use crate::table::stream::{UdpBackend, UdpBackends};

/// The endpoint a new flow from `client` goes to, with the backend (the Service port) it
/// belongs to; `None`: the share of a backend that does not resolve (or has no endpoint), or
/// no weight at all: the flow is refused.
pub fn flow_backend(to: &UdpBackends, client: SocketAddr) -> Option<(&UdpBackend, SocketAddr)> {
    if to.total == 0 {
        return None;
    }
    let h = address_hash(client);
    let mut at = h % to.total;
    let backend = to.backends.iter().find(|b| {
        if at < b.weight {
            true
        } else {
            at -= b.weight;
            false
        }
    })?;
    let endpoint = backend
        .endpoints
        .iter()
        .max_by_key(|e| rendezvous(h, address_hash(**e)))
        .copied()?;
    Some((backend, endpoint))
}

/// A hash of an address and port that every replica computes alike.
fn address_hash(a: SocketAddr) -> u64 {
    let mut bytes = [0u8; 18];
    let ip = match a.ip() {
        std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        std::net::IpAddr::V6(v6) => v6.octets(),
    };
    bytes[..16].copy_from_slice(&ip);
    bytes[16..].copy_from_slice(&a.port().to_be_bytes());
    // FNV's low bits follow the last bytes (the port) too closely for a modulo: mixed.
    mix64(fnv1a(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::stream::UdpBackend;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    fn backend(name: &str, weight: u64, endpoints: &[&str]) -> UdpBackend {
        UdpBackend {
            service: name.into(),
            weight,
            endpoints: endpoints
                .iter()
                .map(|e| e.parse().unwrap())
                .collect::<Vec<_>>()
                .into(),
        }
    }

    fn flow_endpoint(to: &UdpBackends, client: SocketAddr) -> Option<SocketAddr> {
        flow_backend(to, client).map(|(_, endpoint)| endpoint)
    }

    fn client(i: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, (i >> 8) as u8, i as u8], 40000 + i))
    }

    #[test]
    fn flows_share_by_weight_and_keep_their_endpoint() {
        let to = UdpBackends {
            backends: vec![
                backend("a", 3, &["127.0.0.1:1", "127.0.0.1:2"]),
                backend("b", 1, &["127.0.0.1:3"]),
                backend("zero", 0, &["127.0.0.1:4"]),
            ]
            .into_boxed_slice(),
            total: 4,
        };
        let mut seen: BTreeMap<SocketAddr, usize> = BTreeMap::new();
        for i in 0..4000 {
            let e = flow_endpoint(&to, client(i)).unwrap();
            assert_eq!(flow_endpoint(&to, client(i)), Some(e), "stable per client");
            *seen.entry(e).or_default() += 1;
        }
        let port = |p: u16| seen.get(&SocketAddr::from(([127, 0, 0, 1], p))).copied();
        assert_eq!(port(4), None, "weight 0 takes none");
        let (a, b) = (port(1).unwrap() + port(2).unwrap(), port(3).unwrap());
        // 3:1 within a few percent over 4,000 clients.
        assert!(
            (2800..3200).contains(&a) && (800..1200).contains(&b),
            "{seen:?}"
        );
        assert!(
            port(1).unwrap() > 1000 && port(2).unwrap() > 1000,
            "{seen:?}"
        );
    }

    #[test]
    fn an_endpoint_gone_moves_only_its_clients() {
        let full = UdpBackends {
            backends: vec![backend(
                "a",
                1,
                &["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"],
            )]
            .into_boxed_slice(),
            total: 1,
        };
        let less = UdpBackends {
            backends: vec![backend("a", 1, &["127.0.0.1:1", "127.0.0.1:2"])].into_boxed_slice(),
            total: 1,
        };
        let gone: SocketAddr = "127.0.0.1:3".parse().unwrap();
        for i in 0..500 {
            let before = flow_endpoint(&full, client(i)).unwrap();
            let after = flow_endpoint(&less, client(i)).unwrap();
            if before != gone {
                assert_eq!(before, after);
            }
        }
    }

    #[test]
    fn unresolved_shares_and_no_weight_are_refused() {
        let to = UdpBackends {
            backends: vec![backend("missing", 1, &[])].into_boxed_slice(),
            total: 1,
        };
        assert_eq!(flow_endpoint(&to, client(1)), None);
        assert_eq!(flow_endpoint(&UdpBackends::default(), client(1)), None);
        let _ = Arc::new(0);
    }
}

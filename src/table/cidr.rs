//! An IP network in CIDR notation (`10.0.0.0/8`, `2001:db8::/32`, or one address), as
//! source-range rules name them: parsed when a table is built, tested on the request path
//! with a few integer operations and no allocation. Pure: no Kubernetes, Pingora or tokio.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// A network: an address and how many of its leading bits matter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cidr {
    /// The address with the bits past `prefix` cleared.
    addr: IpAddr,
    prefix: u8,
}

/// Why a CIDR was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    #[error("{0:?} is not an IP address")]
    Address(String),
    #[error("prefix length {0:?} is not a number from 0 to {1}")]
    Prefix(String, u8),
}

impl Cidr {
    /// Whether `ip` lies in this network. An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, as a
    /// dual-stack socket reports IPv4 clients) is compared as the IPv4 address it carries.
    #[inline]
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                mask32(u32::from(ip), self.prefix) == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                mask128(u128::from(ip), self.prefix) == u128::from(net)
            }
            _ => false,
        }
    }
}

fn mask32(v: u32, prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        v & (u32::MAX << (32 - u32::from(prefix.min(32))))
    }
}

fn mask128(v: u128, prefix: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        v & (u128::MAX << (128 - u32::from(prefix.min(128))))
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    /// `a.b.c.d/n`, `v6/n` or a single address (a /32 or /128). Host bits past the prefix
    /// are cleared, as `ip route` and Kubernetes accept them (`10.1.2.3/8` is `10.0.0.0/8`).
    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        let s = s.trim();
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| CidrError::Address(addr.to_string()))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => Some(p)
                .filter(|p| !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|p| p.parse::<u8>().ok())
                .filter(|&n| n <= max)
                .ok_or_else(|| CidrError::Prefix(p.to_string(), max))?,
        };
        let addr = match addr {
            IpAddr::V4(v4) => IpAddr::V4(mask32(u32::from(v4), prefix).into()),
            IpAddr::V6(v6) => IpAddr::V6(mask128(u128::from(v6), prefix).into()),
        };
        Ok(Cidr { addr, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl serde::Serialize for Cidr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn networks_contain_their_addresses_only() {
        let net: Cidr = "10.1.2.3/8".parse().unwrap();
        assert_eq!(net.to_string(), "10.0.0.0/8");
        assert!(net.contains(ip("10.255.0.1")));
        assert!(!net.contains(ip("11.0.0.1")));
        assert!(net.contains(ip("::ffff:10.9.9.9")), "IPv4-mapped IPv6");
        assert!(!net.contains(ip("2001:db8::1")));
        let one: Cidr = "192.168.1.7".parse().unwrap();
        assert!(one.contains(ip("192.168.1.7")) && !one.contains(ip("192.168.1.8")));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("8.8.8.8")));
        let v6: Cidr = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains(ip("2001:db8:ffff::1")) && !v6.contains(ip("2001:db9::1")));
        assert!(!v6.contains(ip("10.0.0.1")));
    }

    #[test]
    fn bad_networks_say_why() {
        assert!(matches!(
            "10.0.0.0/33".parse::<Cidr>(),
            Err(CidrError::Prefix(..))
        ));
        assert!(matches!(
            "::/129".parse::<Cidr>(),
            Err(CidrError::Prefix(..))
        ));
        assert!(matches!(
            "example.com/8".parse::<Cidr>(),
            Err(CidrError::Address(_))
        ));
        assert!(matches!(
            "10.0.0.0/x".parse::<Cidr>(),
            Err(CidrError::Prefix(..))
        ));
    }
}

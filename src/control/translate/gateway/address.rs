//! Which Gateway gets which address of `--gateway-addresses`: a Gateway that asks for one in
//! `spec.addresses` gets it when the pool holds it and no other Gateway has it, a Gateway
//! that asks for none gets a free one. Deterministic (oldest Gateway first, then namespace and
//! name; pool addresses in the order given) and stable: a Gateway keeps the address it had
//! (`previous`), so a new Gateway never moves an older one's. Pure: no I/O, no table; build.rs
//! applies the outcome.

use std::collections::BTreeMap;
use std::net::IpAddr;

/// What a Gateway's `spec.addresses` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Ask {
    /// No address, or an `IPAddress` without a value: any free one.
    Any,
    /// This `IPAddress`.
    Ip(IpAddr),
    /// An `IPAddress` value that is not an IP address (only files skip the CRD's validation).
    Unparsable(String),
    /// An address type other than `IPAddress`.
    Unsupported(String),
    /// More than one address: switchyard gives a Gateway one.
    Several,
}

impl Ask {
    /// From `spec.addresses` as (type, value) pairs.
    pub(super) fn of<'a>(addresses: impl IntoIterator<Item = (Option<&'a str>, &'a str)>) -> Ask {
        let mut asked = addresses.into_iter();
        let Some((type_, value)) = asked.next() else {
            return Ask::Any;
        };
        if asked.next().is_some() {
            return Ask::Several;
        }
        match type_.unwrap_or("IPAddress") {
            "IPAddress" if value.is_empty() => Ask::Any,
            "IPAddress" => match value.parse::<IpAddr>() {
                Ok(ip) => Ask::Ip(ip.to_canonical()),
                Err(_) => Ask::Unparsable(value.to_string()),
            },
            other => Ask::Unsupported(other.to_string()),
        }
    }
}

/// One Gateway to give an address to.
#[derive(Debug, Clone)]
pub(super) struct Claim<'g> {
    pub namespace: &'g str,
    pub name: &'g str,
    /// `metadata.creationTimestamp` as text (RFC 3339 sorts by time); empty when unknown.
    pub created: String,
    pub ask: Ask,
    /// The address it had: in the previous table, or else in its own `status.addresses`
    /// (which outlives a restart).
    pub previous: Option<IpAddr>,
}

/// What a Gateway got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Outcome {
    Address(IpAddr),
    /// `Accepted: False`, `UnsupportedAddress`.
    Unsupported(String),
    /// `Programmed: False`, `AddressNotUsable`: the address asked for cannot be used.
    NotUsable(String),
    /// `Programmed: False`, `AddressNotAssigned`: no address was free.
    NotAssigned(String),
}

/// Gives each claim its outcome, keyed by (namespace, name). `pool` is in the order its free
/// addresses are handed out.
pub(super) fn assign<'g>(
    pool: &[IpAddr],
    claims: &[Claim<'g>],
) -> BTreeMap<(&'g str, &'g str), Outcome> {
    let in_pool = |ip: &IpAddr| pool.contains(ip);
    let mut order: Vec<&Claim<'g>> = claims.iter().collect();
    order.sort_by(|a, b| (&a.created, a.namespace, a.name).cmp(&(&b.created, b.namespace, b.name)));
    // Address -> the Gateway that has it.
    let mut taken: BTreeMap<IpAddr, (&str, &str)> = BTreeMap::new();
    let mut out = BTreeMap::new();
    let key = |c: &Claim<'g>| (c.namespace, c.name);
    // Asks that no address can meet.
    for c in &order {
        let refused = match &c.ask {
            Ask::Any | Ask::Ip(_) => continue,
            Ask::Unsupported(t) => {
                Outcome::Unsupported(format!("address type {t} is not supported (IPAddress is)"))
            }
            Ask::Unparsable(v) => Outcome::NotUsable(format!("{v:?} is not an IP address")),
            Ask::Several => {
                Outcome::NotUsable("switchyard gives a Gateway one address, not several".into())
            }
        };
        out.insert(key(c), refused);
    }
    // Every Gateway keeps the address it has, oldest first, when it still asks for it.
    for c in &order {
        let Some(prev) = c.previous.map(|p| p.to_canonical()) else {
            continue;
        };
        let keeps = match c.ask {
            Ask::Any => true,
            Ask::Ip(ip) => ip == prev,
            _ => false,
        };
        if keeps && in_pool(&prev) && !taken.contains_key(&prev) {
            taken.insert(prev, key(c));
            out.insert(key(c), Outcome::Address(prev));
        }
    }
    // Then the addresses asked for by name, oldest first.
    for c in &order {
        let Ask::Ip(ip) = c.ask else { continue };
        if out.contains_key(&key(c)) {
            continue;
        }
        let outcome = if !in_pool(&ip) {
            Outcome::NotUsable(format!("{ip} is not one of --gateway-addresses"))
        } else if let Some((ns, name)) = taken.get(&ip) {
            Outcome::NotUsable(format!("{ip} is taken by Gateway {ns}/{name}"))
        } else {
            taken.insert(ip, key(c));
            Outcome::Address(ip)
        };
        out.insert(key(c), outcome);
    }
    // Then any free address, oldest first, in the pool's order.
    for c in &order {
        if out.contains_key(&key(c)) {
            continue;
        }
        let outcome = match pool.iter().find(|ip| !taken.contains_key(ip)) {
            Some(&ip) => {
                taken.insert(ip, key(c));
                Outcome::Address(ip)
            }
            None => Outcome::NotAssigned(format!(
                "every address of --gateway-addresses ({}) is taken",
                pool.len()
            )),
        };
        out.insert(key(c), outcome);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn pool() -> Vec<IpAddr> {
        ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
            .into_iter()
            .map(ip)
            .collect()
    }

    fn claim<'a>(ns: &'a str, name: &'a str, created: &str, ask: Ask) -> Claim<'a> {
        Claim {
            namespace: ns,
            name,
            created: created.into(),
            ask,
            previous: None,
        }
    }

    fn got<'a>(out: &BTreeMap<(&'a str, &'a str), Outcome>, name: &'a str) -> Outcome {
        out[&("ns", name)].clone()
    }

    #[test]
    fn the_oldest_first_then_by_name_in_the_pools_order() {
        let claims = [
            claim("ns", "b", "2024-01-01T00:00:00Z", Ask::Any),
            claim("ns", "young", "2025-01-01T00:00:00Z", Ask::Any),
            claim("ns", "a", "2024-01-01T00:00:00Z", Ask::Any),
        ];
        let out = assign(&pool(), &claims);
        assert_eq!(got(&out, "a"), Outcome::Address(ip("127.0.0.2")));
        assert_eq!(got(&out, "b"), Outcome::Address(ip("127.0.0.3")));
        assert_eq!(got(&out, "young"), Outcome::Address(ip("127.0.0.4")));
        // The claims' order does not matter.
        let mut reversed = claims.to_vec();
        reversed.reverse();
        assert_eq!(assign(&pool(), &reversed), out);
    }

    #[test]
    fn a_gateway_keeps_its_address_when_an_older_one_comes() {
        // b had .2; a, older, comes later: b keeps .2 and a gets the next free one.
        let mut b = claim("ns", "b", "2024-06-01T00:00:00Z", Ask::Any);
        b.previous = Some(ip("127.0.0.2"));
        let a = claim("ns", "a", "2024-01-01T00:00:00Z", Ask::Any);
        let out = assign(&pool(), &[a, b.clone()]);
        assert_eq!(got(&out, "b"), Outcome::Address(ip("127.0.0.2")));
        assert_eq!(got(&out, "a"), Outcome::Address(ip("127.0.0.3")));
        // An address asked for by name that another Gateway has is not taken from it.
        let c = claim("ns", "c", "2020-01-01T00:00:00Z", Ask::Ip(ip("127.0.0.2")));
        let out = assign(&pool(), &[c, b]);
        assert_eq!(got(&out, "b"), Outcome::Address(ip("127.0.0.2")));
        assert_eq!(
            got(&out, "c"),
            Outcome::NotUsable("127.0.0.2 is taken by Gateway ns/b".into())
        );
    }

    #[test]
    fn an_address_asked_for_is_given_before_free_ones() {
        let claims = [
            claim("ns", "a", "1", Ask::Any),
            claim("ns", "b", "2", Ask::Ip(ip("127.0.0.2"))),
            claim("ns", "c", "3", Ask::Ip(ip("127.0.0.2"))),
            claim("ns", "d", "4", Ask::Ip(ip("10.0.0.1"))),
        ];
        let out = assign(&pool(), &claims);
        assert_eq!(got(&out, "b"), Outcome::Address(ip("127.0.0.2")));
        assert_eq!(got(&out, "a"), Outcome::Address(ip("127.0.0.3")));
        assert_eq!(
            got(&out, "c"),
            Outcome::NotUsable("127.0.0.2 is taken by Gateway ns/b".into())
        );
        assert_eq!(
            got(&out, "d"),
            Outcome::NotUsable("10.0.0.1 is not one of --gateway-addresses".into())
        );
    }

    #[test]
    fn an_exhausted_pool_assigns_nothing_more() {
        let claims: Vec<Claim> = ["a", "b", "c", "d"]
            .into_iter()
            .map(|n| claim("ns", n, "", Ask::Any))
            .collect();
        let out = assign(&pool(), &claims);
        assert_eq!(got(&out, "c"), Outcome::Address(ip("127.0.0.4")));
        assert!(matches!(got(&out, "d"), Outcome::NotAssigned(_)));
        assert!(matches!(
            assign(&[], &claims[..1])[&("ns", "a")],
            Outcome::NotAssigned(_)
        ));
    }

    #[test]
    fn what_spec_addresses_asks_for() {
        assert_eq!(Ask::of([]), Ask::Any);
        assert_eq!(Ask::of([(None, "")]), Ask::Any);
        assert_eq!(
            Ask::of([(Some("IPAddress"), "127.0.0.2")]),
            Ask::Ip(ip("127.0.0.2"))
        );
        // An IPv4-mapped IPv6 address is the IPv4 one (as a dual-stack socket reports it).
        assert_eq!(
            Ask::of([(None, "::ffff:127.0.0.2")]),
            Ask::Ip(ip("127.0.0.2"))
        );
        assert_eq!(
            Ask::of([(Some("Hostname"), "gw.example.com")]),
            Ask::Unsupported("Hostname".into())
        );
        assert_eq!(Ask::of([(None, "nope")]), Ask::Unparsable("nope".into()));
        assert_eq!(
            Ask::of([(None, "127.0.0.2"), (None, "127.0.0.3")]),
            Ask::Several
        );
        let claims = [
            claim("ns", "a", "", Ask::Unsupported("Hostname".into())),
            claim("ns", "b", "", Ask::Several),
        ];
        let out = assign(&pool(), &claims);
        assert!(matches!(got(&out, "a"), Outcome::Unsupported(_)));
        assert!(matches!(got(&out, "b"), Outcome::NotUsable(_)));
    }
}

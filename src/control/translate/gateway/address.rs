//! Which Gateway gets which addresses of `--gateway-addresses`: a Gateway that asks for some
//! in `spec.addresses` gets all of them when the pool holds each and no other Gateway has any
//! (else none: one refused address refuses the Gateway), a Gateway that asks for none gets a
//! free one. Deterministic (oldest Gateway first, then namespace and name; pool addresses in
//! the order given) and stable: a Gateway keeps the addresses it had (`previous`), so a new
//! Gateway never moves an older one's. Pure: no I/O, no table; build.rs applies the outcome.

use std::collections::BTreeMap;
use std::net::IpAddr;

/// What a Gateway's `spec.addresses` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Ask {
    /// No address, or one `IPAddress` without a value: any free one.
    Any,
    /// These `IPAddress`es (one or more, in the order written, without repeats).
    Ips(Vec<IpAddr>),
    /// An `IPAddress` value that is not an IP address (only files skip the CRD's validation).
    Unparsable(String),
    /// An address type other than `IPAddress`.
    Unsupported(String),
    /// An `IPAddress` without a value among several: "any" beside named ones is not served.
    AnyAmongSeveral,
}

impl Ask {
    /// From `spec.addresses` as (type, value) pairs.
    pub(super) fn of<'a>(addresses: impl IntoIterator<Item = (Option<&'a str>, &'a str)>) -> Ask {
        let asked: Vec<(Option<&str>, &str)> = addresses.into_iter().collect();
        if let [(type_, "")] = asked[..]
            && type_.unwrap_or("IPAddress") == "IPAddress"
        {
            return Ask::Any;
        }
        let mut ips = Vec::with_capacity(asked.len());
        for (type_, value) in asked {
            match type_.unwrap_or("IPAddress") {
                "IPAddress" if value.is_empty() => return Ask::AnyAmongSeveral,
                "IPAddress" => match value.parse::<IpAddr>() {
                    Ok(ip) => {
                        let ip = ip.to_canonical();
                        if !ips.contains(&ip) {
                            ips.push(ip);
                        }
                    }
                    Err(_) => return Ask::Unparsable(value.to_string()),
                },
                other => return Ask::Unsupported(other.to_string()),
            }
        }
        if ips.is_empty() {
            Ask::Any
        } else {
            Ask::Ips(ips)
        }
    }
}

/// One Gateway to give addresses to.
#[derive(Debug, Clone)]
pub(super) struct Claim<'g> {
    pub namespace: &'g str,
    pub name: &'g str,
    /// `metadata.creationTimestamp` as text (RFC 3339 sorts by time); empty when unknown.
    pub created: String,
    pub ask: Ask,
    /// The addresses it had: in the previous table, or else in its own `status.addresses`
    /// (which outlives a restart).
    pub previous: Vec<IpAddr>,
}

/// What a Gateway got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Outcome {
    /// These addresses (one or more), each serving all of its listeners.
    Addresses(Vec<IpAddr>),
    /// `Accepted: False`, `UnsupportedAddress`.
    Unsupported(String),
    /// `Programmed: False`, `AddressNotUsable`: an address asked for cannot be used.
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
            Ask::Any | Ask::Ips(_) => continue,
            Ask::Unsupported(t) => {
                Outcome::Unsupported(format!("address type {t} is not supported (IPAddress is)"))
            }
            Ask::Unparsable(v) => Outcome::NotUsable(format!("{v:?} is not an IP address")),
            Ask::AnyAmongSeveral => Outcome::NotUsable(
                "an IPAddress without a value among several: name every address, or ask for one \
                 without a value"
                    .into(),
            ),
        };
        out.insert(key(c), refused);
    }
    // Every Gateway keeps the addresses it has, oldest first, when it still asks for them.
    for c in &order {
        let previous: Vec<IpAddr> = c.previous.iter().map(|p| p.to_canonical()).collect();
        let keeps: Vec<IpAddr> = match &c.ask {
            // One of them: a Gateway that asks for any gets one address.
            Ask::Any => previous
                .iter()
                .copied()
                .filter(|p| in_pool(p) && !taken.contains_key(p))
                .take(1)
                .collect(),
            Ask::Ips(ips) if ips.iter().all(|ip| previous.contains(ip)) => ips.clone(),
            _ => continue,
        };
        if !keeps.is_empty()
            && keeps
                .iter()
                .all(|ip| in_pool(ip) && !taken.contains_key(ip))
        {
            for ip in &keeps {
                taken.insert(*ip, key(c));
            }
            out.insert(key(c), Outcome::Addresses(keeps));
        }
    }
    // Then the addresses asked for by name, oldest first: all of a Gateway's, or none.
    for c in &order {
        let Ask::Ips(ips) = &c.ask else { continue };
        if out.contains_key(&key(c)) {
            continue;
        }
        let refused = ips.iter().find_map(|ip| {
            if !in_pool(ip) {
                Some(format!("{ip} is not one of --gateway-addresses"))
            } else {
                taken
                    .get(ip)
                    .map(|(ns, name)| format!("{ip} is taken by Gateway {ns}/{name}"))
            }
        });
        let outcome = match refused {
            Some(why) => Outcome::NotUsable(why),
            None => {
                for ip in ips {
                    taken.insert(*ip, key(c));
                }
                Outcome::Addresses(ips.clone())
            }
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
                Outcome::Addresses(vec![ip])
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
            previous: Vec::new(),
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
        assert_eq!(got(&out, "a"), Outcome::Addresses(vec![ip("127.0.0.2")]));
        assert_eq!(got(&out, "b"), Outcome::Addresses(vec![ip("127.0.0.3")]));
        assert_eq!(
            got(&out, "young"),
            Outcome::Addresses(vec![ip("127.0.0.4")])
        );
        // The claims' order does not matter.
        let mut reversed = claims.to_vec();
        reversed.reverse();
        assert_eq!(assign(&pool(), &reversed), out);
    }

    #[test]
    fn a_gateway_keeps_its_address_when_an_older_one_comes() {
        // b had .2; a, older, comes later: b keeps .2 and a gets the next free one.
        let mut b = claim("ns", "b", "2024-06-01T00:00:00Z", Ask::Any);
        b.previous = vec![ip("127.0.0.2")];
        let a = claim("ns", "a", "2024-01-01T00:00:00Z", Ask::Any);
        let out = assign(&pool(), &[a, b.clone()]);
        assert_eq!(got(&out, "b"), Outcome::Addresses(vec![ip("127.0.0.2")]));
        assert_eq!(got(&out, "a"), Outcome::Addresses(vec![ip("127.0.0.3")]));
        // An address asked for by name that another Gateway has is not taken from it.
        let c = claim(
            "ns",
            "c",
            "2020-01-01T00:00:00Z",
            Ask::Ips(vec![ip("127.0.0.2")]),
        );
        let out = assign(&pool(), &[c, b]);
        assert_eq!(got(&out, "b"), Outcome::Addresses(vec![ip("127.0.0.2")]));
        assert_eq!(
            got(&out, "c"),
            Outcome::NotUsable("127.0.0.2 is taken by Gateway ns/b".into())
        );
    }

    #[test]
    fn an_address_asked_for_is_given_before_free_ones() {
        let claims = [
            claim("ns", "a", "1", Ask::Any),
            claim("ns", "b", "2", Ask::Ips(vec![ip("127.0.0.2")])),
            claim("ns", "c", "3", Ask::Ips(vec![ip("127.0.0.2")])),
            claim("ns", "d", "4", Ask::Ips(vec![ip("10.0.0.1")])),
        ];
        let out = assign(&pool(), &claims);
        assert_eq!(got(&out, "b"), Outcome::Addresses(vec![ip("127.0.0.2")]));
        assert_eq!(got(&out, "a"), Outcome::Addresses(vec![ip("127.0.0.3")]));
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
        assert_eq!(got(&out, "c"), Outcome::Addresses(vec![ip("127.0.0.4")]));
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
            Ask::Ips(vec![ip("127.0.0.2")])
        );
        // An IPv4-mapped IPv6 address is the IPv4 one (as a dual-stack socket reports it).
        assert_eq!(
            Ask::of([(None, "::ffff:127.0.0.2")]),
            Ask::Ips(vec![ip("127.0.0.2")])
        );
        assert_eq!(
            Ask::of([(Some("Hostname"), "gw.example.com")]),
            Ask::Unsupported("Hostname".into())
        );
        assert_eq!(Ask::of([(None, "nope")]), Ask::Unparsable("nope".into()));
        // Several, in the order written, a repeat once.
        assert_eq!(
            Ask::of([
                (None, "127.0.0.3"),
                (None, "127.0.0.2"),
                (None, "127.0.0.3")
            ]),
            Ask::Ips(vec![ip("127.0.0.3"), ip("127.0.0.2")])
        );
        assert_eq!(
            Ask::of([(None, "127.0.0.2"), (None, "")]),
            Ask::AnyAmongSeveral
        );
        assert_eq!(
            Ask::of([(None, "127.0.0.2"), (Some("Hostname"), "h")]),
            Ask::Unsupported("Hostname".into())
        );
        let claims = [
            claim("ns", "a", "", Ask::Unsupported("Hostname".into())),
            claim("ns", "b", "", Ask::AnyAmongSeveral),
        ];
        let out = assign(&pool(), &claims);
        assert!(matches!(got(&out, "a"), Outcome::Unsupported(_)));
        assert!(matches!(got(&out, "b"), Outcome::NotUsable(_)));
    }

    #[test]
    fn a_gateway_gets_every_address_it_asks_for_or_none() {
        let two = || Ask::Ips(vec![ip("127.0.0.3"), ip("127.0.0.2")]);
        let claims = [
            claim("ns", "a", "1", two()),
            claim("ns", "b", "2", Ask::Any),
            // One of its addresses is a's: it gets neither.
            claim(
                "ns",
                "c",
                "3",
                Ask::Ips(vec![ip("127.0.0.4"), ip("127.0.0.2")]),
            ),
            // One is outside the pool: the same.
            claim(
                "ns",
                "d",
                "4",
                Ask::Ips(vec![ip("127.0.0.4"), ip("10.0.0.1")]),
            ),
        ];
        let out = assign(&pool(), &claims);
        assert_eq!(
            got(&out, "a"),
            Outcome::Addresses(vec![ip("127.0.0.3"), ip("127.0.0.2")])
        );
        assert_eq!(got(&out, "b"), Outcome::Addresses(vec![ip("127.0.0.4")]));
        assert_eq!(
            got(&out, "c"),
            Outcome::NotUsable("127.0.0.2 is taken by Gateway ns/a".into())
        );
        assert_eq!(
            got(&out, "d"),
            Outcome::NotUsable("10.0.0.1 is not one of --gateway-addresses".into())
        );
        // A Gateway that had them keeps them against an older one that comes to ask for one.
        let mut a = claim("ns", "a", "5", two());
        a.previous = vec![ip("127.0.0.2"), ip("127.0.0.3")];
        let older = claim("ns", "z", "0", Ask::Ips(vec![ip("127.0.0.2")]));
        let out = assign(&pool(), &[older, a.clone()]);
        assert_eq!(
            got(&out, "a"),
            Outcome::Addresses(vec![ip("127.0.0.3"), ip("127.0.0.2")])
        );
        assert_eq!(
            got(&out, "z"),
            Outcome::NotUsable("127.0.0.2 is taken by Gateway ns/a".into())
        );
        // Asking for one more address than it had: all of them are asked for again, and a
        // Gateway that asks for any keeps one of those it had.
        a.ask = Ask::Ips(vec![ip("127.0.0.2"), ip("127.0.0.3"), ip("127.0.0.4")]);
        assert_eq!(
            assign(&pool(), std::slice::from_ref(&a))[&("ns", "a")],
            Outcome::Addresses(vec![ip("127.0.0.2"), ip("127.0.0.3"), ip("127.0.0.4")])
        );
        a.ask = Ask::Any;
        assert_eq!(
            assign(&pool(), &[a])[&("ns", "a")],
            Outcome::Addresses(vec![ip("127.0.0.2")])
        );
    }
}

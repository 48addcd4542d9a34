//! The hash of a request's `upstream-hash-by` key (`table::hash_key`): its parts filled in from
//! the request and hashed as they are read (FNV-1a, nothing allocated), for `balance`'s
//! rendezvous pick. Pure: no I/O, no clock. No Kubernetes, Pingora or tokio.

use std::net::IpAddr;

use crate::table::gateway::RequestView;
use crate::table::hash_key::{HashKey, KeyPart};

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// What a key reads of a request beyond its fields.
pub struct Keyed<'a> {
    pub client: Option<IpAddr>,
    pub host: Option<&'a [u8]>,
    pub path: &'a str,
}

/// The hash of `key` for the request `req`: a part the request lacks counts as empty, as in
/// nginx.
pub fn key_hash(key: &HashKey, req: &impl RequestView, k: &Keyed<'_>) -> u64 {
    let mut h = FNV_OFFSET;
    key_bytes(key, req, k, |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(FNV_PRIME);
        }
    });
    h
}

/// `key` filled in from the request, handed to `eat` piece by piece (the pieces, joined, are
/// nginx's text of the key): a part the request lacks is empty, as in nginx.
pub fn key_bytes(key: &HashKey, req: &impl RequestView, k: &Keyed<'_>, mut eat: impl FnMut(&[u8])) {
    for part in key.parts.iter() {
        match part {
            KeyPart::Text(t) => eat(t.as_bytes()),
            KeyPart::RemoteAddr => match k.client {
                Some(IpAddr::V4(v4)) => eat(&v4.octets()),
                Some(IpAddr::V6(v6)) => eat(&v6.octets()),
                None => {}
            },
            KeyPart::Host => {
                let host = k.host.unwrap_or_default();
                let name = match host.iter().rposition(|&b| b == b':') {
                    Some(i) if host[i + 1..].iter().all(u8::is_ascii_digit) => &host[..i],
                    _ => host,
                };
                for &b in name {
                    eat(&[b.to_ascii_lowercase()]);
                }
            }
            KeyPart::RequestUri => {
                eat(k.path.as_bytes());
                if let Some(q) = req.query() {
                    eat(b"?");
                    eat(q.as_bytes());
                }
            }
            KeyPart::Uri => eat(k.path.as_bytes()),
            KeyPart::Args => eat(req.query().unwrap_or_default().as_bytes()),
            KeyPart::Header(name) => eat(req.header(name).unwrap_or_default()),
            KeyPart::Cookie(name) => eat(req.cookie(name).unwrap_or_default()),
            KeyPart::Arg(name) => eat(arg(req.query(), name).unwrap_or_default().as_bytes()),
        }
    }
}

/// The first value of query parameter `name` (not percent-decoded), as nginx's `$arg_`.
fn arg<'q>(query: Option<&'q str>, name: &str) -> Option<&'q str> {
    query?.split('&').find_map(|kv| {
        kv.split_once('=')
            .filter(|(k, _)| *k == name)
            .map(|(_, v)| v)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::table::gateway::BareRequest;

    #[test]
    fn the_same_parts_hash_the_same_and_others_differently() {
        let key = HashKey::parse("$request_uri").unwrap();
        let at = |path: &'static str, query: Option<&'static str>| {
            let req = BareRequest {
                method: b"GET",
                query,
            };
            let k = Keyed {
                client: None,
                host: Some(b"a.test"),
                path,
            };
            key_hash(&key, &req, &k)
        };
        assert_eq!(at("/a", Some("x=1")), at("/a", Some("x=1")));
        assert_ne!(at("/a", Some("x=1")), at("/a", Some("x=2")));
        assert_ne!(at("/a", None), at("/b", None));
        assert_eq!(arg(Some("a=1&id=7&id=8"), "id"), Some("7"));
        assert_eq!(arg(Some("a=1"), "id"), None);
    }
}

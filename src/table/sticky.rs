//! Session stickiness: the `SERVERID` cookie (HAProxy `cookie SERVERID insert indirect nocache`)
//! and client-IP affinity with an idle expiry.
//!
//! Cookie values are derived from the endpoint's address with a stable hash, never from an
//! index, so scaling a service does not remap existing sessions and every replica of the load
//! balancer agrees. The affinity table is owned by an entry and carried across table swaps by
//! the translator. This module must not know about Kubernetes, Pingora or tokio.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::table::balance::{fnv1a, mix64};

/// The cookie name the original used.
pub const COOKIE_NAME: &str = "SERVERID";

/// Length of a cookie id: 16 hex digits.
pub const COOKIE_ID_LEN: usize = 16;

/// A stable 64-bit identity of an endpoint address: FNV-1a over the IP octets and the port,
/// the same in every process and build (no allocation: tables hold hundreds of thousands).
pub fn addr_hash(addr: &SocketAddr) -> u64 {
    let mut buf = [0u8; 18];
    let n = match addr.ip() {
        IpAddr::V4(v4) => {
            buf[..4].copy_from_slice(&v4.octets());
            4
        }
        IpAddr::V6(v6) => {
            buf[..16].copy_from_slice(&v6.octets());
            16
        }
    };
    buf[n..n + 2].copy_from_slice(&addr.port().to_be_bytes());
    fnv1a(&buf[..n + 2])
}

/// The opaque, stable cookie id of an endpoint.
pub fn cookie_id(addr: &SocketAddr) -> u64 {
    // A fixed salt keeps the id from being a bare FNV of the address.
    mix64(addr_hash(addr) ^ 0x5357_4954_4348_5944)
}

/// A cookie id as it appears in the cookie: 16 lower-case hex digits.
pub fn format_cookie_id(id: u64) -> String {
    format!("{id:016x}")
}

/// The id in a cookie value, if it is one (exactly 16 lower-case hex digits).
pub fn parse_cookie_id(value: &[u8]) -> Option<u64> {
    if value.len() != COOKIE_ID_LEN
        || !value
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(value).ok()?, 16).ok()
}

/// The value of cookie `name` in one `Cookie` header value, if present.
pub fn find_cookie<'a>(header: &'a [u8], name: &str) -> Option<&'a [u8]> {
    header
        .split(|&b| b == b';')
        .map(trim_ascii)
        .find_map(|pair| {
            let eq = pair.iter().position(|&b| b == b'=')?;
            (trim_ascii(&pair[..eq]) == name.as_bytes()).then(|| trim_ascii(&pair[eq + 1..]))
        })
}

/// The `Cookie` header value without cookie `name` (`None` when nothing else is left).
/// Used to forward the request without the load balancer's own cookie ("indirect").
pub fn strip_cookie(header: &[u8], name: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(header.len());
    for pair in header.split(|&b| b == b';').map(trim_ascii) {
        if pair.is_empty() {
            continue;
        }
        let is_ours = pair
            .iter()
            .position(|&b| b == b'=')
            .is_some_and(|eq| trim_ascii(&pair[..eq]) == name.as_bytes());
        if is_ours {
            continue;
        }
        if !out.is_empty() {
            out.extend_from_slice(b"; ");
        }
        out.extend_from_slice(pair);
    }
    (!out.is_empty()).then_some(out)
}

/// The `Set-Cookie` value that pins a client to the endpoint with `id`.
pub fn set_cookie_value(id: u64) -> String {
    format!("{COOKIE_NAME}={id:016x}; Path=/; HttpOnly")
}

/// An Ingress's cookie affinity (ingress-nginx's `affinity: cookie` and its
/// `session-cookie-*` settings): the cookie that pins a client to an endpoint of the route,
/// which, unlike `SERVERID`, the backend sees too (as with ingress-nginx).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CookieAffinity {
    /// `session-cookie-name` (`INGRESSCOOKIE`).
    pub name: Box<str>,
    /// `session-cookie-path`; `None`: the route's path (`/` for a regular expression).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<Box<str>>,
    /// `session-cookie-max-age`, else `session-cookie-expires`, in seconds; `None`: a
    /// session cookie.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_age: Option<u64>,
    /// `session-cookie-samesite` (`None`, `Lax`, `Strict`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samesite: Option<Box<str>>,
    /// `session-cookie-secure`: `Secure` even over plain HTTP (over TLS it always is).
    pub secure: bool,
    /// `session-cookie-domain`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<Box<str>>,
    /// `affinity-mode: balanced` (ingress-nginx's default): the cookie holds a session key
    /// and the endpoint is the key's by consistent hashing, so endpoints added take about
    /// their share of sessions; `persistent`: the cookie names the endpoint.
    pub balanced: bool,
}

impl CookieAffinity {
    /// The `Set-Cookie` value pinning a client to the endpoint with `id`, on a route of
    /// `path`, over TLS or not.
    pub fn set_cookie_value(&self, id: u64, path: &str, https: bool) -> String {
        let mut v = format!(
            "{}={id:016x}; Path={}",
            self.name,
            self.path.as_deref().unwrap_or(path)
        );
        if let Some(age) = self.max_age {
            v.push_str(&format!("; Max-Age={age}"));
        }
        if let Some(domain) = &self.domain {
            v.push_str(&format!("; Domain={domain}"));
        }
        if let Some(samesite) = &self.samesite {
            v.push_str(&format!("; SameSite={samesite}"));
        }
        if https || self.secure {
            v.push_str("; Secure");
        }
        v.push_str("; HttpOnly");
        v
    }
}

fn trim_ascii(s: &[u8]) -> &[u8] {
    s.trim_ascii()
}

/// A stable hash of a client address, for `source` balancing and affinity sharding.
pub fn client_hash(ip: &IpAddr) -> u64 {
    match ip {
        IpAddr::V4(v4) => mix64(u64::from(u32::from(*v4))),
        IpAddr::V6(v6) => {
            let bits = u128::from(*v6);
            mix64((bits as u64) ^ mix64((bits >> 64) as u64))
        }
    }
}

const SHARDS: usize = 16;

/// Client IP -> endpoint, expiring after an idle timeout. Sharded so that concurrent requests
/// rarely contend; a lock is held only for one map operation, never across an await.
#[derive(Debug)]
pub struct AffinityTable {
    shards: [Mutex<Shard>; SHARDS],
    max_per_shard: usize,
}

#[derive(Debug, Default)]
struct Shard {
    map: HashMap<IpAddr, Pin>,
    /// When the shard grows past this, expired pins are swept first.
    sweep_at: usize,
}

#[derive(Debug, Clone, Copy)]
struct Pin {
    endpoint: SocketAddr,
    last_seen: Instant,
}

impl Default for AffinityTable {
    fn default() -> Self {
        Self::with_capacity(1 << 20)
    }
}

impl AffinityTable {
    /// A table that holds at most about `max_entries` clients; past that, new clients are not
    /// pinned (they are still served) until old pins expire.
    pub fn with_capacity(max_entries: usize) -> Self {
        Self {
            shards: std::array::from_fn(|_| Mutex::new(Shard::default())),
            max_per_shard: (max_entries / SHARDS).max(1),
        }
    }

    fn shard(&self, ip: &IpAddr) -> &Mutex<Shard> {
        &self.shards[(client_hash(ip) as usize) % SHARDS]
    }

    /// The endpoint `ip` is pinned to, if the pin has not been idle for `timeout`; refreshes it.
    pub fn get(&self, ip: &IpAddr, now: Instant, timeout: Duration) -> Option<SocketAddr> {
        let mut shard = self.shard(ip).lock().unwrap_or_else(|e| e.into_inner());
        let pin = shard.map.get_mut(ip)?;
        if now.saturating_duration_since(pin.last_seen) > timeout {
            shard.map.remove(ip);
            return None;
        }
        pin.last_seen = now;
        Some(pin.endpoint)
    }

    /// Like `get`, but changes nothing (no refresh, no expiry): for explaining a decision.
    pub fn peek(&self, ip: &IpAddr, now: Instant, timeout: Duration) -> Option<SocketAddr> {
        let shard = self.shard(ip).lock().unwrap_or_else(|e| e.into_inner());
        let pin = shard.map.get(ip)?;
        (now.saturating_duration_since(pin.last_seen) <= timeout).then_some(pin.endpoint)
    }

    /// Pins `ip` to `endpoint`.
    pub fn set(&self, ip: IpAddr, endpoint: SocketAddr, now: Instant, timeout: Duration) {
        let mut shard = self.shard(&ip).lock().unwrap_or_else(|e| e.into_inner());
        if shard.map.len() >= shard.sweep_at.max(64) {
            shard
                .map
                .retain(|_, pin| now.saturating_duration_since(pin.last_seen) <= timeout);
            shard.sweep_at = shard.map.len() * 2;
        }
        if shard.map.len() >= self.max_per_shard && !shard.map.contains_key(&ip) {
            return;
        }
        shard.map.insert(
            ip,
            Pin {
                endpoint,
                last_seen: now,
            },
        );
    }

    /// Removes the pin of `ip` (its endpoint went away or is down).
    pub fn forget(&self, ip: &IpAddr) {
        let mut shard = self.shard(ip).lock().unwrap_or_else(|e| e.into_inner());
        shard.map.remove(ip);
    }

    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).map.len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_id_is_stable_and_opaque() {
        let a: SocketAddr = "10.0.0.1:8080".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:8080".parse().unwrap();
        assert_eq!(cookie_id(&a), cookie_id(&a));
        assert_ne!(cookie_id(&a), cookie_id(&b));
        let text = format_cookie_id(cookie_id(&a));
        assert_eq!(text.len(), COOKIE_ID_LEN);
        assert_eq!(parse_cookie_id(text.as_bytes()), Some(cookie_id(&a)));
        // Pinned: replicas and restarts must agree on this value forever.
        assert_eq!(
            text,
            format_cookie_id(mix64(addr_hash(&a) ^ 0x5357_4954_4348_5944))
        );
        assert_ne!(addr_hash(&a), addr_hash(&"10.0.0.1:8081".parse().unwrap()));
        for bad in [
            &b"0123"[..],
            b"0123456789ABCDEF",
            b"0123456789abcdeg",
            b"0123456789abcdef0",
        ] {
            assert_eq!(parse_cookie_id(bad), None);
        }
    }

    #[test]
    fn finds_cookie_among_others() {
        assert_eq!(
            find_cookie(b"a=1; SERVERID=abc; b=2", "SERVERID"),
            Some(&b"abc"[..])
        );
        assert_eq!(find_cookie(b"SERVERID=abc", "SERVERID"), Some(&b"abc"[..]));
        assert_eq!(find_cookie(b"XSERVERID=abc", "SERVERID"), None);
        assert_eq!(find_cookie(b"a=1;b", "SERVERID"), None);
        assert_eq!(find_cookie(b"", "SERVERID"), None);
    }

    #[test]
    fn strips_only_our_cookie() {
        assert_eq!(
            strip_cookie(b"a=1; SERVERID=abc; b=2", "SERVERID").as_deref(),
            Some(&b"a=1; b=2"[..])
        );
        assert_eq!(strip_cookie(b"SERVERID=abc", "SERVERID"), None);
        assert_eq!(
            strip_cookie(b"a=1;;SERVERID=x;", "SERVERID").as_deref(),
            Some(&b"a=1"[..])
        );
    }

    #[test]
    fn set_cookie_has_path_and_httponly() {
        assert_eq!(
            set_cookie_value(0xab),
            "SERVERID=00000000000000ab; Path=/; HttpOnly"
        );
    }

    #[test]
    fn affinity_expires_when_idle() {
        let t = AffinityTable::with_capacity(1024);
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let ep: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let now = Instant::now();
        let timeout = Duration::from_secs(10);
        t.set(ip, ep, now, timeout);
        assert_eq!(t.get(&ip, now + Duration::from_secs(9), timeout), Some(ep));
        // The hit refreshed the pin, so 9 s later it is still there.
        assert_eq!(t.get(&ip, now + Duration::from_secs(18), timeout), Some(ep));
        assert_eq!(t.get(&ip, now + Duration::from_secs(40), timeout), None);
        assert!(t.is_empty());
    }

    #[test]
    fn affinity_is_bounded() {
        let t = AffinityTable::with_capacity(SHARDS * 4);
        let ep: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let now = Instant::now();
        for i in 0..1000u32 {
            t.set(
                IpAddr::from(i.to_be_bytes()),
                ep,
                now,
                Duration::from_secs(60),
            );
        }
        assert!(t.len() <= SHARDS * 4);
    }
}

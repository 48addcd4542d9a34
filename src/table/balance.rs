//! Endpoint selection: `roundrobin`, `leastconn`, `first` and `source`, pure over a slice of
//! candidates and their live counters.
//!
//! The caller says which candidates are usable (ready, not ejected, not already tried); this
//! module only decides among them. It must not know about Kubernetes, Pingora or tokio, and it
//! never allocates.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use serde::Serialize;

use crate::table::shared::Shared;

/// A load-balancing algorithm, named as HAProxy names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    #[default]
    RoundRobin,
    LeastConn,
    First,
    Source,
}

impl Algorithm {
    pub const ALL: [Algorithm; 4] = [
        Algorithm::RoundRobin,
        Algorithm::LeastConn,
        Algorithm::First,
        Algorithm::Source,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::RoundRobin => "roundrobin",
            Algorithm::LeastConn => "leastconn",
            Algorithm::First => "first",
            Algorithm::Source => "source",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error for an algorithm name that is not one of the four.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown balance algorithm {0:?} (expected roundrobin, leastconn, first or source)")]
pub struct UnknownAlgorithm(pub String);

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.as_str() == s.trim())
            .ok_or_else(|| UnknownAlgorithm(s.chars().take(64).collect()))
    }
}

/// What the selector needs to know about one endpoint.
pub trait Candidate {
    /// Requests currently in flight to this endpoint.
    fn in_flight(&self) -> u32;
    /// A stable identity for hashing (`source`); the same endpoint keeps the same key.
    fn hash_key(&self) -> u64;
}

/// Per-pick inputs besides the candidates.
pub struct Pick<'a> {
    pub algorithm: Algorithm,
    /// The entry's rotating counter (roundrobin position, leastconn tie-break).
    pub cursor: &'a AtomicUsize,
    /// Hash of the client address, for `source`.
    pub client_hash: u64,
    /// Connection limit per endpoint for `first` (`None`: unlimited).
    pub maxconn: Option<u32>,
}

/// Chooses an index into `cands` among those for which `usable(i)` holds.
pub fn pick<C: Candidate>(
    cands: &[C],
    p: &Pick<'_>,
    usable: impl Fn(usize) -> bool,
) -> Option<usize> {
    let n = cands.len();
    if n == 0 {
        return None;
    }
    match p.algorithm {
        Algorithm::RoundRobin => {
            let start = p.cursor.fetch_add(1, Ordering::Relaxed) % n;
            (0..n).map(|k| (start + k) % n).find(|&i| usable(i))
        }
        Algorithm::LeastConn => {
            // Rotating the scan start spreads ties instead of piling them on index 0.
            let start = p.cursor.fetch_add(1, Ordering::Relaxed) % n;
            (0..n)
                .map(|k| (start + k) % n)
                .filter(|&i| usable(i))
                .min_by_key(|&i| cands[i].in_flight())
        }
        Algorithm::First => {
            let limit = p.maxconn.unwrap_or(u32::MAX);
            (0..n)
                .filter(|&i| usable(i))
                .find(|&i| cands[i].in_flight() < limit)
                // Every endpoint is at its limit: we do not queue, so take the least loaded.
                .or_else(|| {
                    (0..n)
                        .filter(|&i| usable(i))
                        .min_by_key(|&i| cands[i].in_flight())
                })
        }
        Algorithm::Source => (0..n)
            .filter(|&i| usable(i))
            .max_by_key(|&i| rendezvous(p.client_hash, cands[i].hash_key())),
    }
}

/// Rendezvous (highest random weight) score: adding an endpoint moves only the clients whose
/// new top score belongs to it, about 1/N of them.
pub(crate) fn rendezvous(client: u64, endpoint: u64) -> u64 {
    mix64(client ^ endpoint.rotate_left(32) ^ 0x9E37_79B9_7F4A_7C15)
}

/// SplitMix64's finaliser: a cheap, well-distributed 64-bit mix.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a over bytes: stable across processes and builds, unlike `std`'s hasher, so that every
/// replica of the load balancer derives the same values.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// `numerator` of every `denominator` requests (a mirror's copies, a canary's weight),
/// spread as weights are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Share {
    pub numerator: u64,
    pub denominator: u64,
    /// Requests counted so far (not part of equality: a rebuild starts it again).
    #[serde(skip)]
    pub turn: Shared<AtomicU64>,
}

impl Share {
    pub fn new(numerator: u64, denominator: u64) -> Share {
        Share {
            numerator,
            denominator,
            turn: Shared::default(),
        }
    }

    /// Whether this request is one of the share.
    pub fn due(&self) -> bool {
        if self.numerator >= self.denominator {
            return true;
        }
        if self.numerator == 0 {
            return false;
        }
        let n = self.turn.fetch_add(1, Ordering::Relaxed);
        spread(n, self.denominator) < self.numerator
    }
}

/// Turn `n` mapped into `0..total` so that every run of `total` turns takes each value once,
/// in a scattered order.
pub(crate) fn spread(n: u64, total: u64) -> u64 {
    // Multiplying by a prime that no total reaches permutes each run of `total` turns (the
    // largest prime below 2^32: totals are sums of at most 16 weights of at most 1,000,000,
    // and the product fits in 64 bits).
    const PRIME: u64 = 4_294_967_291;
    let total = total.clamp(1, PRIME - 1);
    (n % total) * PRIME % total
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    struct C {
        load: u32,
        key: u64,
    }
    impl Candidate for C {
        fn in_flight(&self) -> u32 {
            self.load
        }
        fn hash_key(&self) -> u64 {
            self.key
        }
    }

    fn cands(loads: &[u32]) -> Vec<C> {
        loads
            .iter()
            .enumerate()
            .map(|(i, &load)| C {
                load,
                key: fnv1a(format!("10.0.0.{i}:80").as_bytes()),
            })
            .collect()
    }

    fn p(algorithm: Algorithm, cursor: &AtomicUsize) -> Pick<'_> {
        Pick {
            algorithm,
            cursor,
            client_hash: 0,
            maxconn: None,
        }
    }

    #[test]
    fn parse_names() {
        assert_eq!("leastconn".parse::<Algorithm>(), Ok(Algorithm::LeastConn));
        assert!("LeastConn ".parse::<Algorithm>().is_err());
        assert!("bogus".parse::<Algorithm>().is_err());
    }

    #[test]
    fn roundrobin_skips_unusable() {
        let c = cands(&[0, 0, 0]);
        let cur = AtomicUsize::new(0);
        let picks: Vec<_> = (0..4)
            .map(|_| pick(&c, &p(Algorithm::RoundRobin, &cur), |i| i != 1))
            .collect();
        assert!(picks.iter().all(|&i| i == Some(0) || i == Some(2)));
        assert_eq!(pick(&c, &p(Algorithm::RoundRobin, &cur), |_| false), None);
    }

    #[test]
    fn leastconn_takes_least_loaded() {
        let c = cands(&[5, 1, 3]);
        let cur = AtomicUsize::new(0);
        for _ in 0..5 {
            assert_eq!(pick(&c, &p(Algorithm::LeastConn, &cur), |_| true), Some(1));
        }
    }

    #[test]
    fn first_respects_maxconn() {
        let c = cands(&[2, 0, 0]);
        let cur = AtomicUsize::new(0);
        let mut pk = p(Algorithm::First, &cur);
        assert_eq!(
            pick(&c, &pk, |_| true),
            Some(0),
            "unlimited: always the first"
        );
        pk.maxconn = Some(2);
        assert_eq!(pick(&c, &pk, |_| true), Some(1), "first is full");
        let full = cands(&[2, 3, 2]);
        assert_eq!(
            pick(&full, &pk, |_| true),
            Some(0),
            "all full: least loaded"
        );
    }

    #[test]
    fn source_is_deterministic() {
        let c = cands(&[0; 5]);
        let cur = AtomicUsize::new(0);
        let mut pk = p(Algorithm::Source, &cur);
        pk.client_hash = mix64(42);
        let first = pick(&c, &pk, |_| true);
        for _ in 0..10 {
            assert_eq!(pick(&c, &pk, |_| true), first);
        }
    }

    proptest! {
        /// Round-robin over N usable endpoints gives each exactly k picks in k*N picks.
        #[test]
        fn roundrobin_is_fair(n in 1usize..20, rounds in 1usize..20, start in 0usize..1000) {
            let c = cands(&vec![0; n]);
            let cur = AtomicUsize::new(start);
            let mut counts = vec![0usize; n];
            for _ in 0..n * rounds {
                let i = pick(&c, &p(Algorithm::RoundRobin, &cur), |_| true).unwrap();
                counts[i] += 1;
            }
            prop_assert!(counts.iter().all(|&k| k == rounds));
        }

        /// With the endpoint set unchanged the source hash never moves a client; adding one
        /// endpoint to N moves about 1/(N+1) of clients, and only onto the new endpoint.
        #[test]
        fn source_moves_few_clients(n in 2usize..12, salt in any::<u64>()) {
            let before = cands(&vec![0; n]);
            let mut after = cands(&vec![0; n]);
            after.push(C { load: 0, key: fnv1a(format!("10.9.9.9:{salt}").as_bytes()) });
            let cur = AtomicUsize::new(0);
            let clients = 4000u64;
            let mut moved = 0u64;
            for c in 0..clients {
                let mut pk = p(Algorithm::Source, &cur);
                pk.client_hash = mix64(c.wrapping_add(salt));
                let a = pick(&before, &pk, |_| true).unwrap();
                prop_assert_eq!(pick(&before, &pk, |_| true).unwrap(), a);
                let b = pick(&after, &pk, |_| true).unwrap();
                if a != b {
                    prop_assert_eq!(b, n, "a client moved to an old endpoint");
                    moved += 1;
                }
            }
            let expected = clients as f64 / (n as f64 + 1.0);
            prop_assert!((moved as f64) < expected * 1.5 + 40.0, "moved {moved}, expected about {expected}");
        }
    }
}

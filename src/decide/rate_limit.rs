//! Whether an Ingress's request limits (`table::rate_limit`) admit one more request from a
//! client address, as ingress-nginx's `limit_req ... burst=N nodelay` and `limit_conn` do:
//! a leaky bucket per address that drains at the rate and takes `rate × burst multiplier`
//! requests beyond it at once, and a count of requests in progress. Written once for every
//! engine; the answer is `503`, as ingress-nginx's default. Pure apart from the limit's counts
//! (a mutex held for one lookup, never across an await). No Kubernetes, Pingora or tokio.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use crate::table::rate_limit::{Bucket, Buckets, LimitState, MAX_CLIENTS, RateLimit};

/// Which limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limited {
    /// `limit-rps` or `limit-rpm`.
    Rate,
    /// `limit-connections`.
    Connections,
}

/// A request in progress under `limit-connections`: counted until dropped.
#[derive(Debug)]
pub struct InProgress {
    state: Arc<LimitState>,
    ip: IpAddr,
}

impl Drop for InProgress {
    fn drop(&mut self) {
        if let Ok(mut counts) = self.state.in_flight.lock()
            && let Some(n) = counts.get_mut(&self.ip)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

/// Admits a request from `client` at `now`, or says which limit refuses it. A request admitted
/// under `limit-connections` holds the returned [`InProgress`] until it ends. A client of no
/// address, or of an allowed network, is never limited.
pub fn admit(
    limit: &RateLimit,
    client: Option<IpAddr>,
    now: Instant,
) -> Result<Option<InProgress>, Limited> {
    let Some(ip) = client else {
        return Ok(None);
    };
    if limit.allow.iter().any(|c| c.contains(ip)) {
        return Ok(None);
    }
    let state = &limit.state.0;
    let epoch = *state.epoch.get_or_init(|| now);
    let ms = u64::try_from(now.saturating_duration_since(epoch).as_millis()).unwrap_or(u64::MAX);
    let second = limit
        .rps
        .map(|r| per_second(u64::from(r), limit.burst_multiplier, 1));
    let minute = limit
        .rpm
        .map(|r| per_second(u64::from(r), limit.burst_multiplier, 60));
    if (second.is_some() || minute.is_some()) && !take(state, ip, second, minute, ms) {
        return Err(Limited::Rate);
    }
    let Some(max) = limit.connections else {
        return Ok(None);
    };
    let Ok(mut counts) = state.in_flight.lock() else {
        return Ok(None);
    };
    if counts.len() >= MAX_CLIENTS && !counts.contains_key(&ip) {
        return Err(Limited::Connections);
    }
    let n = counts.entry(ip).or_insert(0);
    if *n >= max {
        return Err(Limited::Connections);
    }
    *n += 1;
    Ok(Some(InProgress {
        state: Arc::clone(state),
        ip,
    }))
}

/// A rate as nginx keeps it: thousandths of a request per second, and the burst in
/// thousandths of a request.
#[derive(Debug, Clone, Copy)]
struct Rate {
    milli_per_second: u64,
    burst: u64,
}

/// `requests` per `seconds`, with `requests × multiplier` at once.
fn per_second(requests: u64, multiplier: u32, seconds: u64) -> Rate {
    Rate {
        milli_per_second: requests.saturating_mul(1000) / seconds,
        burst: requests
            .saturating_mul(u64::from(multiplier))
            .saturating_mul(1000),
    }
}

/// nginx's `ngx_http_limit_req_lookup`: the excess drained by the time passed, plus this
/// request; more than the burst refuses it. `None`: refused.
fn drained(b: Bucket, rate: Rate, ms: u64) -> Option<Bucket> {
    let elapsed = ms.saturating_sub(b.last);
    let drain = rate.milli_per_second.saturating_mul(elapsed) / 1000;
    let excess = b.excess.saturating_sub(drain).saturating_add(1000);
    (excess <= rate.burst).then_some(Bucket { excess, last: ms })
}

/// Counts a request of `ip` against both buckets; false (and nothing counted) when either
/// refuses it, or when the limit counts too many addresses to take a new one.
fn take(
    state: &LimitState,
    ip: IpAddr,
    second: Option<Rate>,
    minute: Option<Rate>,
    ms: u64,
) -> bool {
    let Ok(mut buckets) = state.buckets.lock() else {
        return true;
    };
    let known = buckets.get(&ip).copied();
    if known.is_none() && buckets.len() >= MAX_CLIENTS {
        forget_drained(&mut buckets, second, minute, ms);
        if buckets.len() >= MAX_CLIENTS {
            return false;
        }
    }
    // A new address starts empty, as nginx's new node: its first request always passes.
    let b = known.unwrap_or_default();
    let next = |bucket: Bucket, rate: Option<Rate>| match rate {
        Some(rate) if known.is_some() => drained(bucket, rate, ms),
        Some(_) => Some(Bucket {
            excess: 1000,
            last: ms,
        }),
        None => Some(bucket),
    };
    let (Some(s), Some(m)) = (next(b.second, second), next(b.minute, minute)) else {
        return false;
    };
    buckets.insert(
        ip,
        Buckets {
            second: s,
            minute: m,
        },
    );
    true
}

/// Drops the addresses whose every bucket has drained by `ms`: they are as if new.
fn forget_drained(
    buckets: &mut HashMap<IpAddr, Buckets>,
    second: Option<Rate>,
    minute: Option<Rate>,
    ms: u64,
) {
    let empty = |b: Bucket, rate: Option<Rate>| {
        rate.is_none_or(|r| {
            r.milli_per_second.saturating_mul(ms.saturating_sub(b.last)) / 1000 >= b.excess
        })
    };
    buckets.retain(|_, b| !(empty(b.second, second) && empty(b.minute, minute)));
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use super::*;
    use crate::table::cidr::Cidr;

    fn limit(rps: Option<u32>, rpm: Option<u32>, connections: Option<u32>) -> RateLimit {
        RateLimit {
            rps,
            rpm,
            burst_multiplier: 5,
            connections,
            allow: vec!["10.9.0.0/16".parse::<Cidr>().unwrap()],
            replicas: 1,
            state: Default::default(),
        }
    }

    /// How many of `n` requests at `at` are admitted.
    fn admitted(l: &RateLimit, ip: &str, at: Instant, n: usize) -> usize {
        let ip = Some(ip.parse().unwrap());
        (0..n).filter(|_| admit(l, ip, at).is_ok()).count()
    }

    #[test]
    fn a_burst_of_rate_times_multiplier_then_the_rate_as_nginx() {
        let l = limit(Some(2), None, None);
        let t0 = Instant::now();
        // burst = 2 × 5 = 10: ten at once, the eleventh refused.
        assert_eq!(admitted(&l, "192.0.2.1", t0, 20), 10);
        // Another address has its own bucket; an allowed network is never limited.
        assert_eq!(admitted(&l, "192.0.2.2", t0, 11), 10);
        assert_eq!(admitted(&l, "10.9.1.1", t0, 100), 100);
        // Half a second drains one request at 2 r/s; a second drains two.
        assert_eq!(
            admitted(&l, "192.0.2.1", t0 + Duration::from_millis(500), 5),
            1
        );
        assert_eq!(
            admitted(&l, "192.0.2.1", t0 + Duration::from_millis(1500), 5),
            2
        );
        // Long idle: the whole burst again.
        assert_eq!(
            admitted(&l, "192.0.2.1", t0 + Duration::from_secs(60), 20),
            10
        );
        assert_eq!(admit(&l, None, t0).map(|g| g.is_none()), Ok(true));
    }

    #[test]
    fn a_request_either_limit_refuses_is_counted_by_neither() {
        // 60 per minute (burst 300 per minute) and 100 per second (burst 500): the minute's
        // burst ends first, and the second's bucket is not charged for what it refused.
        let l = limit(Some(100), Some(60), None);
        let t0 = Instant::now();
        assert_eq!(admitted(&l, "192.0.2.9", t0, 400), 300);
        let b = l.state.0.buckets.lock().unwrap()[&"192.0.2.9".parse().unwrap()];
        assert_eq!(b.second.excess, 300_000);
        assert_eq!(b.minute.excess, 300_000);
        // One second drains one request of the minute's.
        assert_eq!(admitted(&l, "192.0.2.9", t0 + Duration::from_secs(1), 5), 1);
    }

    #[test]
    fn connections_are_counted_while_in_progress() {
        let l = limit(None, None, Some(2));
        let t0 = Instant::now();
        let ip = Some("192.0.2.5".parse().unwrap());
        let a = admit(&l, ip, t0).unwrap();
        let b = admit(&l, ip, t0).unwrap();
        assert!(a.is_some() && b.is_some());
        assert_eq!(admit(&l, ip, t0).unwrap_err(), Limited::Connections);
        drop(a);
        let c = admit(&l, ip, t0).unwrap();
        drop((b, c));
        assert!(l.state.0.in_flight.lock().unwrap().is_empty());
    }

    #[test]
    fn a_full_table_forgets_drained_addresses_before_refusing_new_ones() {
        let l = limit(Some(1000), None, None);
        let t0 = Instant::now();
        {
            let mut b = l.state.0.buckets.lock().unwrap();
            for i in 0..MAX_CLIENTS {
                let ip = IpAddr::from(u32::try_from(i).unwrap().to_be_bytes());
                b.insert(
                    ip,
                    Buckets {
                        second: Bucket {
                            excess: 1000,
                            last: 0,
                        },
                        minute: Bucket::default(),
                    },
                );
            }
        }
        let _ = l.state.0.epoch.set(t0);
        // Still full at once: a new address is refused, a known one is not.
        assert_eq!(admitted(&l, "192.0.2.7", t0, 1), 0);
        assert_eq!(admitted(&l, "0.0.0.1", t0, 1), 1);
        // A second later everyone has drained: they are forgotten, the new one counted.
        assert_eq!(admitted(&l, "192.0.2.7", t0 + Duration::from_secs(1), 1), 1);
        assert!(l.state.0.buckets.lock().unwrap().len() < 10);
    }
}

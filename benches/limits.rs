//! Question: what does an Ingress's request policy cost per request in the decision core:
//! ingress-nginx's `limit-rps` (one client's bucket looked up, drained and counted, in a limit
//! counting 10,000 clients), `limit-connections` (counted in, and out when the request ends),
//! and `upstream-hash-by` (a key of `$host$request_uri` hashed)?
//!
//! Run: `cargo bench --bench limits` (add `-- --quick` for a fast pass).
//!
//! Last result (2026-12-07 13:49, 2-vCPU sandbox VM, otherwise idle, release profile,
//! `--quick`, medians): limit-rps with 10,000 clients counted 68 ns; limit-connections in and
//! out 103 ns (two lock round trips); an upstream-hash-by key of `$host$request_uri` 73 ns.
//! For scale: lookup + pick of an Ingress route on a 10,000-Ingress table is 74 ns
//! (`benches/translate.rs`); a whole HTTP/1 keep-alive request through switchyard is about
//! 22,000 user-space instructions (`benches/instructions.py`, docs/performance.md).

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use switchyard::decide::hash_key::{Keyed, key_hash};
use switchyard::decide::rate_limit::admit;
use switchyard::table::gateway::BareRequest;
use switchyard::table::hash_key::HashKey;
use switchyard::table::rate_limit::RateLimit;

const CLIENTS: u32 = 10_000;

fn client(i: u32) -> Option<IpAddr> {
    Some(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)))
}

fn limit(rps: Option<u32>, connections: Option<u32>) -> RateLimit {
    RateLimit {
        rps,
        rpm: None,
        burst_multiplier: 5,
        connections,
        allow: Vec::new(),
        replicas: 1,
        state: Default::default(),
    }
}

fn bench_limits(c: &mut Criterion) {
    let mut g = c.benchmark_group("limits");
    // A rate high enough that nothing is refused: the cost of counting, not of refusing.
    let rps = limit(Some(1_000_000), None);
    let start = Instant::now();
    for i in 0..CLIENTS {
        let _ = admit(&rps, client(i), start);
    }
    let mut i = 0u32;
    let mut now = start;
    g.bench_function("limit_rps_10000_clients", |b| {
        b.iter(|| {
            i = (i + 7919) % CLIENTS;
            now += Duration::from_micros(10);
            black_box(admit(&rps, black_box(client(i)), now).is_ok())
        })
    });
    let conns = limit(None, Some(1_000));
    g.bench_function("limit_connections_in_and_out", |b| {
        b.iter(|| {
            i = (i + 7919) % CLIENTS;
            drop(black_box(admit(&conns, black_box(client(i)), start)))
        })
    });
    let key = HashKey::parse("$host$request_uri").unwrap_or_else(|e| panic!("{e}"));
    let req = BareRequest {
        method: b"GET",
        query: Some("id=12345&page=2"),
    };
    g.bench_function("upstream_hash_by_host_request_uri", |b| {
        b.iter(|| {
            let k = Keyed {
                client: client(1),
                host: Some(b"shop.example.com"),
                path: "/catalogue/items/42",
            };
            black_box(key_hash(&key, black_box(&req), &k))
        })
    });
    g.finish();
}

criterion_group!(benches, bench_limits);
criterion_main!(benches);

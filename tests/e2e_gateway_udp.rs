//! Gateway API UDP listeners end to end, offline (`--manifests`): real UDP sockets on
//! 127.0.0.1, a switchyard subprocess, UDP echo backends behind Services' UDP ports. A
//! UDPRoute's client flows are shared by weight and each keeps its endpoint; flows end after
//! `--udp-idle-timeout`; past `--udp-max-flows` new clients are dropped and counted; the port
//! closes with its route. Every wait is bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

/// A UDP backend that answers every datagram with `<name>:<datagram>`.
struct Echo {
    port: u16,
    task: JoinHandle<()>,
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn echo(name: &'static str) -> Echo {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let port = socket.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        let mut buf = vec![0u8; 2048];
        // Bounded: at most this many datagrams (the tests send far fewer).
        for _ in 0..100_000 {
            let Ok((n, from)) = socket.recv_from(&mut buf).await else {
                continue;
            };
            let mut answer = format!("{name}:").into_bytes();
            answer.extend_from_slice(&buf[..n]);
            let _ = socket.send_to(&answer, from).await;
        }
    });
    Echo { port, task }
}

fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A Service `name` with UDP port 5353, its one endpoint the echo's port.
fn udp_service(name: &str, e: &Echo) -> Vec<Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"clusterIP": "10.96.0.20",
                "ports": [{"name": "dns", "port": 5353, "protocol": "UDP"}]}}),
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{name}-1"), "namespace": "default",
                "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
            "ports": [{"name": "dns", "port": e.port, "protocol": "UDP"}]}),
    ]
}

fn world(port: u16, a: &Echo, b: &Echo, with_route: bool) -> Vec<Value> {
    let mut v = vec![
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": "sy"},
            "spec": {"controllerName": "switchyard.io/gateway-controller"}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": "default"},
            "spec": {"gatewayClassName": "sy",
                "listeners": [{"name": "dns", "port": port, "protocol": "UDP"}]}}),
    ];
    if with_route {
        v.push(
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "UDPRoute",
            "metadata": {"name": "dns", "namespace": "default"},
            "spec": {"parentRefs": [{"name": "gw"}],
                "rules": [{"backendRefs": [{"name": "a", "port": 5353, "weight": 1},
                    {"name": "b", "port": 5353, "weight": 1}]}]}}),
        );
    }
    v.extend(udp_service("a", a));
    v.extend(udp_service("b", b));
    v
}

/// A client socket's answer to `msg`, if one comes within half a second.
async fn ask(client: &UdpSocket, port: u16, msg: &str) -> Option<String> {
    client
        .send_to(msg.as_bytes(), ("127.0.0.1", port))
        .await
        .ok()?;
    let mut buf = vec![0u8; 2048];
    let (n, _) = tokio::time::timeout(Duration::from_millis(500), client.recv_from(&mut buf))
        .await
        .ok()?
        .ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

async fn clients(n: usize) -> Vec<UdpSocket> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    }
    v
}

/// A metric's value on the admin port (0 when absent).
async fn metric(sy: &Switchyard, line_start: &str) -> f64 {
    let m = get(sy.admin_port, "/metrics", &[]).await.body;
    m.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_flows_are_shared_by_weight_keep_their_endpoint_and_expire() {
    let (a, b) = (echo("a").await, echo("b").await);
    let port = free_udp_port();
    let sy = switchyard(world(port, &a, &b, true))
        .args(&[
            "--udp-idle-timeout",
            "3s",
            "--udp-max-flows",
            "50",
            "--access-log",
            "json",
        ])
        .start()
        .await;
    let probe = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            ask(&probe, port, "probe").await.is_some()
        })
        .await,
        "the UDP listener never answered:\n{}",
        sy.stderr()
    );
    // 40 more clients, 3 datagrams each: every answer of a client from one backend, both
    // backends in use.
    let many = clients(40).await;
    let mut by_backend: BTreeMap<String, usize> = BTreeMap::new();
    for (i, c) in many.iter().enumerate() {
        let mut seen = Vec::new();
        for j in 0..3 {
            let msg = format!("c{i}-{j}");
            let Some(answer) = ask(c, port, &msg).await else {
                panic!("no answer to client {i} datagram {j}:\n{}", sy.stderr());
            };
            let (backend, echoed) = answer.split_once(':').unwrap();
            assert_eq!(echoed, msg);
            seen.push(backend.to_string());
        }
        seen.dedup();
        assert_eq!(seen.len(), 1, "client {i} moved: {seen:?}");
        *by_backend.entry(seen.remove(0)).or_default() += 1;
    }
    assert_eq!(by_backend.len(), 2, "{by_backend:?}");
    assert!(by_backend.values().all(|n| *n >= 8), "{by_backend:?}");
    let frontend = format!("frontend=\"udp:{port}\"");
    let flows = format!("switchyard_udp_flows{{{frontend}}}");
    assert_eq!(metric(&sy, &flows).await, 41.0);
    // Past --udp-max-flows (50): 41 held, 20 new clients, 9 of them get no flow.
    // All sent at once, then the answers read, so that no held flow expires meanwhile.
    let more = clients(20).await;
    for c in &more {
        c.send_to(b"more", ("127.0.0.1", port)).await.unwrap();
    }
    let mut answered = 0;
    for c in &more {
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_millis(200), c.recv_from(&mut buf));
        if matches!(read.await, Ok(Ok(_))) {
            answered += 1;
        }
    }
    assert_eq!(answered, 9);
    let full = format!("switchyard_udp_dropped_total{{{frontend},reason=\"flows_full\"}}");
    assert_eq!(metric(&sy, &full).await, 11.0);
    // Idle for over 3 s: every flow ends.
    assert!(
        eventually(Duration::from_secs(10), || async {
            metric(&sy, &flows).await == 0.0
        })
        .await,
        "flows never expired"
    );
    // In: 120 + 20 + the probe's; out: 120 + 9 + the probe's answer.
    let datagrams = |direction: &str| {
        format!("switchyard_udp_datagrams_total{{direction=\"{direction}\",{frontend}}}")
    };
    assert!(metric(&sy, &datagrams("in")).await >= 141.0);
    assert!(metric(&sy, &datagrams("out")).await >= 130.0);
    // Each ended flow is one access-log line: the 40 clients' (3 datagrams of 5 bytes or so
    // each way) among them, each with its endpoint and Service port.
    let flows_logged = || {
        sy.stdout()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["kind"] == "udp" && v["frontend"] == format!("udp:{port}"))
            .collect::<Vec<Value>>()
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            flows_logged().len() >= 50
        })
        .await,
        "{} flows logged",
        flows_logged().len()
    );
    let logged = flows_logged();
    for v in &logged {
        assert!(
            v["entry"]
                .as_str()
                .is_some_and(|e| e.starts_with("default/")),
            "{v}"
        );
        assert!(
            v["endpoint"]
                .as_str()
                .is_some_and(|e| e.starts_with("127.0.0.1:")),
            "{v}"
        );
        assert!(v["bytes_in"].as_u64() >= Some(4), "{v}");
    }
    assert!(
        logged
            .iter()
            .filter(|v| v["bytes_out"].as_u64() >= Some(15))
            .count()
            >= 40,
        "{logged:?}"
    );
    // The route goes: the port closes (the kernel refuses the next datagrams).
    sy.rewrite(&world(port, &a, &b, false));
    assert!(
        eventually(Duration::from_secs(10), || async {
            let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            ask(&c, port, "gone?").await.is_none()
        })
        .await,
        "the port still answers without a route"
    );
}

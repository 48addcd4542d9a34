//! UDP echo pods and upstream's UDP client. Each Deployment of the upstream manifests that
//! sets `UDP_ECHO_SERVER` becomes a UDP socket on 127.0.0.1 answering as echo-basic's
//! `udpechoserver`: every datagram (read into 1024 bytes) is answered, to its sender, with
//! one JSON object `{"request": <the datagram>, "namespace", "ingress", "service", "pod"}`
//! (`service` is the Deployment's `SERVICE_NAME`, `ingress` its unset `INGRESS_NAME`). Every
//! datagram a pod answers is recorded ([`Pod::seen`]: the datagram as `path`, `UDP` as
//! `method`).
//!
//! The client is `conformance/utils/udp` and the helpers of upstream's UDPRoute cases: a
//! probe is one datagram from a new socket (a new flow for the Gateway), one answer read
//! within 2 s ([`send_once`]); [`eventually_echo`] polls it until the answer comes from the
//! expected Service and namespace (`ExpectEchoResponseFromBackend`);
//! [`weighted_distribution`] is `UDPRouteWeightedRouting`'s count of 500 probes by the
//! Deployment that answered; [`silence`] is what a datagram that must reach no backend gets.
//!
//! Bounded: a pod answers at most [`MAX_DATAGRAMS`]; every read waits at most [`PROBE_TIMEOUT`];
//! the polls end after [`MAX_TIME`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::net::UdpSocket;

use super::echo::{Echoed, Pod};

/// The most datagrams one pod answers (UDPRouteWeightedRouting's worst case, ten runs of
/// 500, is far below).
const MAX_DATAGRAMS: usize = 100_000;
/// udpechoserver's read buffer.
const READ_BUFFER: usize = 1024;
/// The deadline upstream sets on each probe's socket.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a poll for an answer lasts (upstream: `DefaultTestTimeout`, 60 s, or
/// `MaxTimeToConsistency`, 30 s).
pub const MAX_TIME: Duration = Duration::from_secs(15);
/// `ExpectEchoResponseFromBackend`'s probe.
pub const PROBE: &str = "gateway-api-conformance-udp-echo";
/// `udpEchoSendOnce`'s probe.
pub const WEIGHT_PROBE: &str = "gateway-api-conformance-udp-weight\n";

/// Starts a UDP echo pod of Deployment `deployment`, named `name` in `namespace`, whose
/// `SERVICE_NAME` is `service`, on a free UDP port of 127.0.0.1.
pub async fn start_pod(deployment: &str, name: &str, namespace: &str, service: &str) -> Pod {
    let socket = UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("bind UDP echo pod");
    let port = socket.local_addr().expect("local_addr").port();
    let seen: Arc<Mutex<Vec<Echoed>>> = Arc::default();
    let record = seen.clone();
    let context = (namespace.to_string(), service.to_string(), name.to_string());
    let task = tokio::spawn(async move {
        let mut buf = vec![0u8; READ_BUFFER];
        for _ in 0..MAX_DATAGRAMS {
            let Ok((n, from)) = socket.recv_from(&mut buf).await else {
                continue;
            };
            let request = String::from_utf8_lossy(&buf[..n]).into_owned();
            let (namespace, service, pod) = &context;
            let answer = json!({
                "request": request,
                "namespace": namespace,
                "ingress": "",
                "service": service,
                "pod": pod,
            });
            record.lock().expect("seen lock").push(Echoed {
                path: request,
                method: "UDP".to_string(),
            });
            let _ = socket.send_to(answer.to_string().as_bytes(), from).await;
        }
    });
    Pod::serving(deployment, name, namespace, port, seen, task)
}

/// One probe: `payload` from a new socket connected to `127.0.0.1:port`, the answer read
/// within [`PROBE_TIMEOUT`] and decoded (the echo's JSON).
pub async fn send_once(port: u16, payload: &str) -> Result<Value, String> {
    let socket = UdpSocket::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("bind: {e}"))?;
    socket
        .connect(("127.0.0.1", port))
        .await
        .map_err(|e| format!("dialing UDP 127.0.0.1:{port}: {e}"))?;
    socket
        .send(payload.as_bytes())
        .await
        .map_err(|e| format!("writing UDP probe: {e}"))?;
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(PROBE_TIMEOUT, socket.recv(&mut buf))
        .await
        .map_err(|_| "reading UDP echo response: timeout".to_string())?
        .map_err(|e| format!("reading UDP echo response: {e}"))?;
    serde_json::from_slice(&buf[..n]).map_err(|e| {
        format!(
            "decoding UDP echo response {:?}: {e}",
            String::from_utf8_lossy(&buf[..n])
        )
    })
}

/// `udpEchoSendOnce`: the pod that answered [`WEIGHT_PROBE`].
pub async fn pod_once(port: u16) -> Result<String, String> {
    let answer = send_once(port, WEIGHT_PROBE).await?;
    match answer["pod"].as_str() {
        Some(pod) if !pod.is_empty() => Ok(pod.to_string()),
        _ => Err(format!("UDP echo response missing pod name: {answer}")),
    }
}

/// What a probe must come back with: the echo's `service` and `namespace` (None: any).
#[derive(Debug, Clone, Copy)]
pub struct Expected {
    pub service: Option<&'static str>,
    pub namespace: Option<&'static str>,
}

/// `ExpectEchoResponseFromBackend`: [`PROBE`] on a new socket, every second, until an answer
/// echoes it from the expected Service and namespace, within [`MAX_TIME`]; the misses
/// otherwise.
pub async fn eventually_echo(port: u16, exp: Expected) -> Result<Value, String> {
    let deadline = tokio::time::Instant::now() + MAX_TIME;
    let mut misses = Vec::new();
    loop {
        let attempt = send_once(port, PROBE).await.and_then(|a| {
            let field = |k: &str| a[k].as_str().unwrap_or("").to_string();
            if field("request") != PROBE {
                return Err(format!("the echo's request is {:?}", field("request")));
            }
            if let Some(s) = exp.service.filter(|s| field("service") != *s) {
                return Err(format!(
                    "UDP echo response service={:?} did not match expected {s:?} (pod {:?})",
                    field("service"),
                    field("pod")
                ));
            }
            if let Some(ns) = exp.namespace.filter(|ns| field("namespace") != *ns) {
                return Err(format!(
                    "UDP echo response namespace={:?} did not match expected {ns:?} (pod {:?})",
                    field("namespace"),
                    field("pod")
                ));
            }
            Ok(a)
        });
        match attempt {
            Ok(a) => return Ok(a),
            Err(e) => misses.push(e),
        }
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    misses.dedup();
    Err(format!(
        "UDP echo probe never succeeded against 127.0.0.1:{port} with {exp:?}: {}",
        misses.join("; ")
    ))
}

/// The Deployment part of a pod name `<deployment>-<replicaset hash>-<pod suffix>`
/// (upstream's `extractBackendName`).
pub fn deployment_of(pod: &str) -> &str {
    super::tcp::deployment_of(pod)
}

/// `UDPRouteWeightedRouting`'s check: 500 probes, 10 at a time, each on a new socket and
/// counted by the Deployment that answered; a Deployment not in `weights`, or a probe
/// without an answer, fails the run; each share must be within `tolerance` of its weight,
/// and a backend of weight 0 must get none.
pub async fn weighted_distribution(
    port: u16,
    weights: &[(&str, f64)],
    tolerance: f64,
) -> Result<(), String> {
    use futures_util::StreamExt;
    const TOTAL: usize = 500;
    const CONCURRENT: usize = 10;
    let answers: Vec<Result<String, String>> = futures_util::stream::iter(0..TOTAL)
        .map(|_| pod_once(port))
        .buffer_unordered(CONCURRENT)
        .collect()
        .await;
    let mut seen: std::collections::BTreeMap<String, usize> = Default::default();
    for a in answers {
        let pod = a.map_err(|e| format!("error while sending UDP probes: {e}"))?;
        let backend = deployment_of(&pod).to_string();
        if !weights.iter().any(|(b, _)| *b == backend) {
            return Err(format!(
                "response from unexpected backend {backend:?} (pod {pod:?})"
            ));
        }
        *seen.entry(backend).or_default() += 1;
    }
    let errs: Vec<String> = weights
        .iter()
        .filter_map(|(b, want)| {
            let n = seen.get(*b).copied().unwrap_or(0);
            let got = n as f64 / TOTAL as f64;
            if *want == 0.0 && n > 0 {
                return Some(format!("backend {b:?} (weight 0) got {n} probes"));
            }
            ((got - want).abs() > tolerance).then(|| {
                format!(
                    "backend {b:?} got {:.2}% of traffic; expected {:.2}% (+/- {:.2}%)",
                    got * 100.0,
                    want * 100.0,
                    tolerance * 100.0
                )
            })
        })
        .collect();
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs.join("; "))
    }
}

/// How a datagram that must reach no backend went unanswered.
#[derive(Debug, PartialEq, Eq)]
pub enum Silence {
    /// Nothing has the port: the kernel refused the datagram (ICMP port unreachable, read as
    /// `ECONNREFUSED` on the connected socket).
    NotListening,
    /// Something has the port and answered nothing within [`PROBE_TIMEOUT`].
    Dropped,
}

/// One datagram (`payload`, from a new socket) that must get no answer: how it went
/// unanswered; an answer is an error.
pub async fn silence(port: u16, payload: &[u8]) -> Result<Silence, String> {
    let socket = UdpSocket::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("bind: {e}"))?;
    socket
        .connect(("127.0.0.1", port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    socket
        .send(payload)
        .await
        .map_err(|e| format!("send: {e}"))?;
    let mut buf = vec![0u8; 4096];
    match tokio::time::timeout(PROBE_TIMEOUT, socket.recv(&mut buf)).await {
        Err(_) => Ok(Silence::Dropped),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Ok(Silence::NotListening)
        }
        Ok(Err(e)) => Err(format!("read: {e}")),
        Ok(Ok(n)) => Err(format!(
            "127.0.0.1:{port} answered {:?}",
            String::from_utf8_lossy(&buf[..n])
        )),
    }
}

//! Active health checks: a Pingora background service that, on its own schedule, opens a TCP
//! connection to every distinct endpoint address of the current table (or sends an HTTP GET
//! when the Service sets `lb.check-path`, where 2xx/3xx passes, or asks the gRPC health service
//! when it sets `lb.check-grpc`, where SERVING passes) and records the result in the
//! endpoint's `HealthState`, which the data plane reads when it picks an endpoint.
//!
//! A check speaks the endpoint's protocol: HTTP/1 in clear on its own; HTTP/2, and anything
//! over TLS, through a Pingora connector built from the same server configuration as the
//! proxy's (so the same `--backend-ca-file`, server name and verification): a TLS backend whose
//! certificate the proxy would refuse fails its checks too (`L6RSP`), even a bare connect.
//!
//! The state lives in the table's per-address `EndpointState`, so it survives table swaps.
//! Checks run with bounded concurrency, each bounded by the check timeout; the loop takes a
//! new table's endpoints at most once a second (however often tables are swapped), updating
//! its schedule in place, finds what is due in a heap (`schedule`), and stops on shutdown. This module only reads the
//! table; it must not route, and it must not know about Kubernetes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use bytes::{BufMut, Bytes, BytesMut};
use pingora::connectors::http::Connector;
use pingora::http::RequestHeader;
use pingora::prelude::HttpPeer;
use pingora::protocols::http::client::HttpSession;
use pingora::{Error, ErrorType};

use crate::ops::metrics::Metrics;
use crate::table::upstream::{BackendProtocol, Upstream};
use crate::table::{CheckResult, EndpointState, Shared, TableReader};

mod schedule;
use schedule::Schedule;
pub use schedule::Target;

/// Active health-check settings (the flags; Services refine them by annotation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthChecks {
    /// Zero: only Services that ask by annotation are checked.
    pub interval: Duration,
    pub timeout: Duration,
    pub rise: u32,
    pub fall: u32,
    pub fail_open: bool,
}

impl Default for HealthChecks {
    fn default() -> Self {
        HealthChecks {
            interval: Duration::from_secs(5),
            timeout: Duration::from_secs(2),
            rise: 2,
            fall: 3,
            fail_open: true,
        }
    }
}

/// Most checks in flight at once.
const MAX_CONCURRENT: usize = 64;
/// Longest the loop sleeps before looking at the table again.
const MAX_IDLE: Duration = Duration::from_millis(250);
/// Shortest sleep, so a burst of due checks cannot spin the loop.
const MIN_IDLE: Duration = Duration::from_millis(10);
/// Most often a new table's endpoints are taken: a new endpoint is first checked within about
/// this and `MAX_IDLE` (given a free slot), and a storm of swaps costs one pass over the
/// table's endpoints a second, not one per swap.
const RETARGET_EVERY: Duration = Duration::from_secs(1);
/// Bytes read looking for the HTTP status line.
const STATUS_LINE_MAX: usize = 1024;
/// Most bytes of a gRPC health answer read (it is a few bytes; anything longer is not one).
const GRPC_ANSWER_MAX: usize = 4096;
/// The gRPC health-checking protocol's method.
const GRPC_HEALTH_CHECK: &str = "/grpc.health.v1.Health/Check";

impl Target {
    /// HTTP GET this path; `None`: TCP connect.
    pub fn path(&self) -> Option<&str> {
        self.entry.check.path.as_deref()
    }

    /// Ask the gRPC health service about this service name (over HTTP/2; before `path`).
    pub fn grpc(&self) -> Option<&str> {
        self.entry.check.grpc.as_deref()
    }

    /// How to speak to the address.
    pub fn upstream(&self) -> &Upstream {
        &self.entry.upstream
    }

    /// Every state the address has.
    pub fn states(&self) -> impl Iterator<Item = &Shared<EndpointState>> {
        std::iter::once(&self.state).chain(&self.others)
    }
}

/// The distinct addresses of `table` to check, with their settings (see
/// `Schedule::retarget`), in no particular order. The checker keeps them in its schedule;
/// this list is for tests.
#[cfg(test)]
fn targets(table: &crate::table::RoutingTable, default_interval: Duration) -> Vec<Target> {
    let mut schedule = Schedule::default();
    schedule.retarget(table, default_interval, Instant::now());
    schedule.targets().cloned().collect()
}

/// Runs one check of `addr` within `timeout`.
pub async fn check(addr: SocketAddr, path: Option<&str>, timeout: Duration) -> CheckResult {
    tokio::time::timeout(timeout, check_unbounded(addr, path))
        .await
        .unwrap_or(CheckResult::Timeout)
}

/// The TLS material the data plane adds to a backend peer (the CA bundle as loaded now, the
/// client certificate, whether to verify; see `data::tls::BackendTls::choose`), so that checks
/// trust exactly what traffic trusts.
pub trait PeerTls: Send + Sync {
    /// Sets `peer`'s TLS material and verification for `u`; an error when what `u` needs is
    /// not loaded.
    fn configure(&self, u: &Upstream, peer: &mut HttpPeer) -> Result<(), String>;
}

/// Runs `t`'s check within `timeout`: HTTP/1 in clear on a bare socket, anything else through
/// `connector` (Pingora's, as the proxy connects) with `tls`'s material.
pub async fn check_target(
    t: &Target,
    connector: &Connector,
    tls: &dyn PeerTls,
    timeout: Duration,
) -> CheckResult {
    let u = t.upstream();
    if u.protocol == BackendProtocol::Http && t.grpc().is_none() {
        return check(t.addr, t.path(), timeout).await;
    }
    tokio::time::timeout(timeout, check_with(t, connector, tls, timeout))
        .await
        .unwrap_or(CheckResult::Timeout)
}

/// The peer a check connects to: what the proxy's `upstream_peer` builds for traffic.
fn peer(addr: SocketAddr, u: &Upstream, timeout: Duration) -> HttpPeer {
    let sni = if u.protocol.tls() {
        u.sni.to_string()
    } else {
        String::new()
    };
    let mut peer = HttpPeer::new(addr, u.protocol.tls(), sni);
    let o = &mut peer.options;
    if u.protocol.http2() {
        o.set_http_version(2, 2);
    } else {
        o.set_http_version(1, 1);
    }
    o.connection_timeout = Some(timeout);
    o.read_timeout = Some(timeout);
    o.write_timeout = Some(timeout);
    peer
}

/// The check result of a Pingora error.
fn failed(e: &Error) -> CheckResult {
    match e.etype() {
        ErrorType::ConnectRefused
        | ErrorType::ConnectNoRoute
        | ErrorType::ConnectError
        | ErrorType::SocketError
        | ErrorType::BindError => CheckResult::ConnectFailed,
        ErrorType::ConnectTimedout | ErrorType::ReadTimedout | ErrorType::WriteTimedout => {
            CheckResult::Timeout
        }
        ErrorType::TLSHandshakeFailure
        | ErrorType::TLSHandshakeTimedout
        | ErrorType::InvalidCert
        | ErrorType::TLSWantX509Lookup
        | ErrorType::HandshakeError => CheckResult::TlsFailed,
        _ => CheckResult::BadResponse,
    }
}

async fn check_with(
    t: &Target,
    connector: &Connector,
    tls: &dyn PeerTls,
    timeout: Duration,
) -> CheckResult {
    let u = t.upstream();
    let mut peer = peer(t.addr, u, timeout);
    if tls.configure(u, &mut peer).is_err() {
        // The Service's CA bundle is not loaded: traffic's handshakes fail the same way.
        return CheckResult::TlsFailed;
    }
    let mut session = match connector.get_http_session(&peer).await {
        Ok((s, _)) => s,
        Err(e) => return failed(&e),
    };
    let result = match (t.grpc(), t.path()) {
        (Some(service), _) if u.protocol.http2() => grpc_check(&mut session, u, service).await,
        (_, Some(path)) => http_check(&mut session, u, path).await,
        // A bare connect: for TLS the handshake, verification included, is the check.
        _ if u.protocol.tls() => Ok(CheckResult::Handshaken),
        _ => Ok(CheckResult::Connected),
    };
    session.shutdown().await;
    result.unwrap_or_else(|e| failed(&e))
}

/// The `:authority` / `Host` of a check: the server name over TLS, else the address.
fn authority(u: &Upstream, session: &HttpSession) -> String {
    if u.protocol.tls() {
        return u.sni.to_string();
    }
    session
        .server_addr()
        .map(ToString::to_string)
        .unwrap_or_default()
}

async fn http_check(
    session: &mut HttpSession,
    u: &Upstream,
    path: &str,
) -> pingora::Result<CheckResult> {
    let mut req = RequestHeader::build("GET", path.as_bytes(), None)?;
    req.insert_header("host", authority(u, session))?;
    req.insert_header("user-agent", "switchyard-health-check")?;
    req.insert_header("accept", "*/*")?;
    session.write_request_header(Box::new(req)).await?;
    session.finish_request_body().await?;
    session.read_response_header().await?;
    Ok(session
        .response_header()
        .map_or(CheckResult::BadResponse, |r| {
            CheckResult::Status(r.status.as_u16())
        }))
}

/// `grpc.health.v1.HealthCheckRequest { service }` in one gRPC message frame.
fn grpc_health_request(service: &str) -> Bytes {
    // Field 1, length-delimited; the name is at most 256 bytes (`lb.check-grpc`), so its
    // length is a varint of one or two bytes.
    let mut msg = BytesMut::with_capacity(service.len() + 3);
    if !service.is_empty() {
        msg.put_u8(0x0a);
        let mut n = service.len();
        while n >= 0x80 {
            msg.put_u8((n as u8 & 0x7f) | 0x80);
            n >>= 7;
        }
        msg.put_u8(n as u8);
        msg.put_slice(service.as_bytes());
    }
    let mut frame = BytesMut::with_capacity(msg.len() + 5);
    frame.put_u8(0);
    frame.put_u32(u32::try_from(msg.len()).unwrap_or(u32::MAX));
    frame.put_slice(&msg);
    frame.freeze()
}

/// The serving status in a `grpc.health.v1.HealthCheckResponse` frame (field 1, a varint);
/// a message without it is UNKNOWN (0), as protobuf reads a missing field.
fn grpc_serving_status(frame: &[u8]) -> Option<u8> {
    let (&compressed, rest) = frame.split_first()?;
    if compressed != 0 || rest.len() < 4 {
        return None;
    }
    let (len, msg) = rest.split_at(4);
    let len = usize::try_from(u32::from_be_bytes(len.try_into().ok()?)).ok()?;
    let msg = msg.get(..len)?;
    let mut i = 0;
    while i < msg.len() {
        let key = msg[i];
        i += 1;
        let value = *msg.get(i)?;
        i += 1;
        match key {
            // Field 1, varint; every defined status fits one byte.
            0x08 if value < 0x80 => return Some(value),
            // Another varint field of one byte: skip it.
            k if k & 0x07 == 0 && value < 0x80 => {}
            _ => return None,
        }
    }
    Some(0)
}

async fn grpc_check(
    session: &mut HttpSession,
    u: &Upstream,
    service: &str,
) -> pingora::Result<CheckResult> {
    let mut req = RequestHeader::build("POST", GRPC_HEALTH_CHECK.as_bytes(), None)?;
    req.insert_header("host", authority(u, session))?;
    req.insert_header("content-type", "application/grpc")?;
    req.insert_header("te", "trailers")?;
    req.insert_header("user-agent", "switchyard-health-check")?;
    session.write_request_header(Box::new(req)).await?;
    session
        .write_request_body(grpc_health_request(service), true)
        .await?;
    session.read_response_header().await?;
    let header_status = session
        .response_header()
        .and_then(|r| r.headers.get("grpc-status").cloned());
    let mut body = BytesMut::new();
    // Bounded: stops at the answer's end or at GRPC_ANSWER_MAX bytes.
    while body.len() < GRPC_ANSWER_MAX {
        match session.read_response_body().await? {
            Some(b) => body.extend_from_slice(&b),
            None => break,
        }
    }
    let trailer_status = match session {
        HttpSession::H2(h2) if header_status.is_none() => h2
            .read_trailers()
            .await?
            .and_then(|t| t.get("grpc-status").cloned()),
        _ => None,
    };
    let status = header_status
        .or(trailer_status)
        .and_then(|v| v.to_str().ok()?.trim().parse::<u8>().ok());
    Ok(match status {
        Some(0) => {
            grpc_serving_status(&body).map_or(CheckResult::BadResponse, CheckResult::Serving)
        }
        Some(code) => CheckResult::GrpcFailed(code),
        None => CheckResult::BadResponse,
    })
}

async fn check_unbounded(addr: SocketAddr, path: Option<&str>) -> CheckResult {
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return CheckResult::ConnectFailed;
    };
    let Some(path) = path else {
        return CheckResult::Connected;
    };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: switchyard-health-check\r\n\
         Accept: */*\r\nConnection: close\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).await.is_err() {
        return CheckResult::BadResponse;
    }
    let mut buf = [0u8; STATUS_LINE_MAX];
    let mut n = 0;
    while n < buf.len() && !buf[..n].contains(&b'\n') {
        match stream.read(&mut buf[n..]).await {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    parse_status(&buf[..n]).map_or(CheckResult::BadResponse, CheckResult::Status)
}

/// The status code of an HTTP/1.x status line.
fn parse_status(head: &[u8]) -> Option<u16> {
    let rest = head.strip_prefix(b"HTTP/1.")?;
    let code = rest.get(2..5)?;
    if rest.get(1) != Some(&b' ') || !code.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(code).ok()?.parse().ok()
}

/// The checker as a Pingora background service.
pub struct Checker {
    pub table: TableReader,
    pub config: HealthChecks,
    pub metrics: Arc<Metrics>,
    /// For checks over HTTP/2 or TLS: built from the proxy's server configuration, so checks
    /// trust what traffic trusts.
    pub connector: Arc<Connector>,
    /// The CA bundles as loaded now, as the proxy uses them.
    pub tls: Arc<dyn PeerTls>,
}

#[async_trait]
impl BackgroundService for Checker {
    async fn start(&self, shutdown: ShutdownWatch) {
        self.run(shutdown).await;
    }
}

impl Checker {
    /// Checks until shutdown.
    pub async fn run(&self, mut shutdown: ShutdownWatch) {
        let mut generation = None;
        let mut retargeted: Option<Instant> = None;
        let mut schedule = Schedule::default();
        let mut running: JoinSet<(Target, (CheckResult, Duration))> = JoinSet::new();
        let timeout = self.config.timeout;
        while !*shutdown.borrow() {
            let now = Instant::now();
            // A new table's targets, at most once per `RETARGET_EVERY`: under a storm of
            // table swaps the checker's work stays bounded, not proportional to the swaps.
            if retargeted.is_none_or(|at| now.duration_since(at) >= RETARGET_EVERY) {
                let table = self.table.load();
                if generation != Some(table.generation) {
                    generation = Some(table.generation);
                    retargeted = Some(now);
                    schedule.retarget(&table, self.config.interval, now);
                }
            }
            while running.len() < MAX_CONCURRENT {
                let Some(t) = schedule.take_due(now) else {
                    break;
                };
                let connector = Arc::clone(&self.connector);
                let tls = Arc::clone(&self.tls);
                running.spawn(async move {
                    let started = Instant::now();
                    let result = check_target(&t, &connector, tls.as_ref(), timeout).await;
                    (t, (result, started.elapsed()))
                });
            }
            // Asleep until the next check is due, a check ends, or it is time to look at the
            // table again; with every slot busy, only an ending check frees one.
            let idle = if running.len() >= MAX_CONCURRENT {
                MAX_IDLE
            } else {
                schedule
                    .next_due()
                    .map_or(MAX_IDLE, |d| d.saturating_duration_since(now))
                    .clamp(MIN_IDLE, MAX_IDLE)
            };
            tokio::select! {
                _ = shutdown.changed() => break,
                _ = tokio::time::sleep(idle) => {}
                Some(done) = running.join_next(), if !running.is_empty() => {
                    if let Ok((t, result)) = done {
                        schedule.finished(t.addr);
                        self.record(&t, result);
                    }
                }
            }
            while let Some(done) = running.try_join_next() {
                if let Ok((t, result)) = done {
                    schedule.finished(t.addr);
                    self.record(&t, result);
                }
            }
        }
        running.shutdown().await;
    }

    fn record(&self, t: &Target, (result, took): (CheckResult, Duration)) {
        self.metrics.data.health_check(result.passed());
        let mut changed = None;
        let ended = Instant::now();
        for state in t.states() {
            let c = state
                .health
                .record(result, self.config.rise, self.config.fall);
            state.health.timed(ended, took);
            changed = changed.or(c);
        }
        let Some(up) = changed else {
            return;
        };
        self.metrics.data.health_transition(up);
        let check = result.code();
        if up {
            tracing::info!(endpoint = %t.addr, entry = %t.entry.name, %check, "endpoint up: active health checks pass again");
        } else {
            tracing::warn!(endpoint = %t.addr, entry = %t.entry.name, %check, "endpoint down: active health checks fail; it gets no new traffic");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{CheckSpec, Entry, Frontend, RoutingTable};

    fn entry(name: &str, addrs: &[&str], check: CheckSpec) -> Entry {
        Entry {
            check,
            ..Entry::fixture(name, Frontend::Http, addrs)
        }
    }

    #[test]
    fn targets_are_distinct_addresses_with_the_strictest_settings() {
        let table = RoutingTable {
            entries: vec![
                entry("a", &["10.0.0.1:80", "10.0.0.2:80"], CheckSpec::default()),
                entry(
                    "b",
                    &["10.0.0.2:80"],
                    CheckSpec {
                        interval: Some(Duration::from_secs(1)),
                        path: Some("/healthz".into()),
                        grpc: None,
                    },
                ),
                entry(
                    "off",
                    &["10.0.0.3:80"],
                    CheckSpec {
                        interval: Some(Duration::ZERO),
                        path: None,
                        grpc: None,
                    },
                ),
            ]
            .into_iter()
            .map(std::sync::Arc::new)
            .collect(),
            ..Default::default()
        };
        let mut t = targets(&table, Duration::from_secs(5));
        t.sort_by_key(|t| t.addr);
        let got: Vec<_> = t
            .iter()
            .map(|t| (t.addr.to_string(), t.interval, t.path()))
            .collect();
        assert_eq!(
            got,
            [
                ("10.0.0.1:80".to_string(), Duration::from_secs(5), None),
                (
                    "10.0.0.2:80".to_string(),
                    Duration::from_secs(1),
                    Some("/healthz")
                ),
            ]
        );
        assert!(
            targets(&table, Duration::ZERO).len() == 1,
            "flag off: only b"
        );
    }

    #[test]
    fn grpc_health_messages() {
        assert_eq!(&grpc_health_request("")[..], &[0, 0, 0, 0, 0]);
        assert_eq!(
            &grpc_health_request("a.B")[..],
            &[0, 0, 0, 0, 5, 0x0a, 3, b'a', b'.', b'B']
        );
        let long = "x".repeat(200);
        let frame = grpc_health_request(&long);
        assert_eq!(&frame[..8], &[0, 0, 0, 0, 203, 0x0a, 0xc8, 0x01]);
        assert_eq!(grpc_serving_status(&[0, 0, 0, 0, 2, 0x08, 1]), Some(1));
        assert_eq!(grpc_serving_status(&[0, 0, 0, 0, 2, 0x08, 2]), Some(2));
        assert_eq!(
            grpc_serving_status(&[0, 0, 0, 0, 0]),
            Some(0),
            "default: UNKNOWN"
        );
        assert_eq!(
            grpc_serving_status(&[1, 0, 0, 0, 2, 0x08, 1]),
            None,
            "compressed"
        );
        assert_eq!(
            grpc_serving_status(&[0, 0, 0, 0, 9, 0x08, 1]),
            None,
            "cut short"
        );
        assert_eq!(grpc_serving_status(&[]), None);
    }

    #[test]
    fn status_lines() {
        assert_eq!(parse_status(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(
            parse_status(b"HTTP/1.0 503 Service Unavailable\r\n"),
            Some(503)
        );
        assert_eq!(parse_status(b"HTTP/1.1 20"), None);
        assert_eq!(parse_status(b"SSH-2.0-OpenSSH\r\n"), None);
        assert_eq!(parse_status(b""), None);
    }

    #[tokio::test]
    async fn tcp_and_http_checks_against_real_sockets() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            for status in ["200 OK", "302 Found", "500 Oops"] {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf).await;
                let resp = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
                let _ = s.write_all(resp.as_bytes()).await;
            }
        });
        let t = Duration::from_secs(2);
        assert_eq!(check(addr, Some("/h"), t).await, CheckResult::Status(200));
        assert_eq!(check(addr, Some("/h"), t).await, CheckResult::Status(302));
        assert_eq!(check(addr, Some("/h"), t).await, CheckResult::Status(500));
        server.await.unwrap();
        // Nobody listens any more.
        assert_eq!(check(addr, None, t).await, CheckResult::ConnectFailed);

        // A listener that accepts but never answers: the HTTP check times out.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let silent_addr = silent.local_addr().unwrap();
        assert_eq!(check(silent_addr, None, t).await, CheckResult::Connected);
        assert_eq!(
            check(silent_addr, Some("/"), Duration::from_millis(200)).await,
            CheckResult::Timeout
        );
        drop(silent);
    }
}

//! The PROXY protocol (HAProxy's, versions 1 and 2) on client connections that come through a
//! trusted load balancer in front (AWS NLB, HAProxy): the header it sends first names the real
//! client, which then replaces the socket's peer for every consumer (X-Forwarded-For, access
//! logs, `source` balancing, client-IP affinity).
//!
//! Three layers: `parse`, a pure function over the bytes received so far that says either how
//! many more bytes it needs at least or where the header ends (no I/O, no tokio; fuzzed);
//! `read_header`, which reads exactly those bytes and never one past the header, because what
//! follows is the client's TLS ClientHello or HTTP request; and `Acceptor`, one frontend's
//! policy (trusted peers, deadline, counters). A connection without a valid header, or from a
//! peer outside the trusted ranges, is closed by the caller. This module routes nothing and
//! knows nothing of HTTP or TLS.

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prometheus::IntCounter;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::ops::metrics::Metrics;
pub use crate::table::cidr::Cidr;

/// Longest v1 header, CRLF included (the specification's bound).
pub const V1_MAX: usize = 107;

/// Shortest v1 header: `PROXY UNKNOWN\r\n`.
const V1_MIN: usize = 15;

/// The v2 signature, the first 12 bytes of every v2 header.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// The fixed part of a v2 header: signature, version/command, family/transport, length.
const V2_FIXED: usize = 16;

/// Longest v2 address block (addresses and TLVs) accepted. The specification allows 64 KiB;
/// real senders put 12 or 36 bytes of addresses and a few TLVs (an AWS VPC endpoint id, a TLS
/// summary), well under this, and the bound keeps a hostile length from holding memory.
pub const V2_MAX_BODY: usize = 2048;

// === parse ===

/// Which version a header was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// A complete header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub version: Version,
    /// Its length in bytes: what follows it belongs to the client's protocol.
    pub len: usize,
    /// The client, as the sender saw it; `None` for v2 `LOCAL` (the balancer's own health
    /// check), v1 `UNKNOWN` and address families other than IPv4/IPv6, where the socket's peer
    /// is kept.
    pub source: Option<SocketAddr>,
    /// The address the client connected to (informational).
    pub destination: Option<SocketAddr>,
}

/// What `parse` made of the bytes so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// Not complete: at least `need` more bytes are needed, and reading up to `need` never
    /// reads past the header.
    Incomplete {
        need: usize,
    },
    Done(Header),
}

/// Why a header is refused. `reason` gives the bounded metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    #[error("no PROXY protocol signature")]
    NotProxy,
    #[error("PROXY v1 line longer than {V1_MAX} bytes")]
    V1TooLong,
    #[error("malformed PROXY v1 line: {0}")]
    V1Malformed(&'static str),
    #[error("unsupported PROXY v2 version {0}")]
    V2Version(u8),
    #[error("unknown PROXY v2 command {0}")]
    V2Command(u8),
    #[error("unsupported PROXY v2 family/transport {0:#04x}")]
    V2Family(u8),
    #[error("PROXY v2 address block of {0} bytes (at most {V2_MAX_BODY})")]
    V2TooLong(usize),
    #[error("PROXY v2 address block of {0} bytes is too short for its family")]
    V2Short(usize),
}

impl ProxyError {
    /// The metric label: `not_proxy` (the client spoke something else first) or `invalid`.
    pub fn reason(&self) -> Reason {
        match self {
            ProxyError::NotProxy => Reason::NotProxy,
            _ => Reason::Invalid,
        }
    }
}

/// Parses the start of a connection, `buf` being every byte received so far. Never looks
/// past the end of the header; bytes after it (when a caller has them) are ignored.
pub fn parse(buf: &[u8]) -> Result<Parsed, ProxyError> {
    match buf.first() {
        None => Ok(Parsed::Incomplete { need: V1_MIN }),
        Some(b'\r') => parse_v2(buf),
        Some(_) => parse_v1(buf),
    }
}

fn incomplete(have: usize, at_least: usize) -> Parsed {
    Parsed::Incomplete {
        need: at_least.saturating_sub(have).max(1),
    }
}

fn parse_v1(buf: &[u8]) -> Result<Parsed, ProxyError> {
    const PREFIX: &[u8] = b"PROXY ";
    let k = buf.len().min(PREFIX.len());
    if buf[..k] != PREFIX[..k] {
        return Err(ProxyError::NotProxy);
    }
    let window = &buf[..buf.len().min(V1_MAX)];
    let Some(lf) = window.iter().position(|&b| b == b'\n') else {
        if let Some(cr) = window.iter().position(|&b| b == b'\r')
            && cr + 1 < window.len()
        {
            return Err(ProxyError::V1Malformed("CR not followed by LF"));
        }
        if window.len() >= V1_MAX {
            return Err(ProxyError::V1TooLong);
        }
        // The shortest line the protocol word allows, so that the first reads are not a byte
        // each: `PROXY TCP4 0.0.0.0 0.0.0.0 0 0\r\n` is 32 bytes, its TCP6 form 22.
        let at_least = if window.starts_with(b"PROXY TCP4 ") {
            32
        } else if window.starts_with(b"PROXY TCP6 ") {
            22
        } else {
            V1_MIN
        };
        return Ok(incomplete(window.len(), at_least));
    };
    let len = lf + 1;
    let line = window[..lf]
        .strip_suffix(b"\r")
        .ok_or(ProxyError::V1Malformed("line does not end with CRLF"))?;
    // A CR inside the line is refused whatever the protocol word (even UNKNOWN, whose rest
    // is otherwise ignored), as it is while the line is still arriving: the verdict must not
    // depend on how the bytes were split.
    if line.contains(&b'\r') {
        return Err(ProxyError::V1Malformed("CR not followed by LF"));
    }
    let line = std::str::from_utf8(&line[PREFIX.len()..])
        .map_err(|_| ProxyError::V1Malformed("not ASCII"))?;
    let mut fields = line.split(' ');
    let (source, destination) = match fields.next() {
        // The rest of an UNKNOWN line is to be ignored.
        Some("UNKNOWN") => (None, None),
        Some(proto @ ("TCP4" | "TCP6")) => {
            let v4 = proto == "TCP4";
            let mut next = || {
                fields
                    .next()
                    .ok_or(ProxyError::V1Malformed("missing field"))
            };
            let (src, dst) = (v1_ip(next()?, v4)?, v1_ip(next()?, v4)?);
            let (sport, dport) = (v1_port(next()?)?, v1_port(next()?)?);
            if fields.next().is_some() {
                return Err(ProxyError::V1Malformed("extra field"));
            }
            (
                Some(SocketAddr::new(src, sport)),
                Some(SocketAddr::new(dst, dport)),
            )
        }
        _ => return Err(ProxyError::V1Malformed("unknown protocol")),
    };
    Ok(Parsed::Done(Header {
        version: Version::V1,
        len,
        source,
        destination,
    }))
}

fn v1_ip(s: &str, v4: bool) -> Result<IpAddr, ProxyError> {
    let bad = ProxyError::V1Malformed("bad address");
    if v4 {
        Ipv4Addr::from_str(s).map(IpAddr::V4).map_err(|_| bad)
    } else {
        Ipv6Addr::from_str(s).map(IpAddr::V6).map_err(|_| bad)
    }
}

fn v1_port(s: &str) -> Result<u16, ProxyError> {
    // Digits only (`u16::from_str` takes a `+`), no leading zero, as the specification says.
    let ok = !s.is_empty()
        && s.len() <= 5
        && s.bytes().all(|b| b.is_ascii_digit())
        && (s == "0" || !s.starts_with('0'));
    ok.then(|| s.parse().ok())
        .flatten()
        .ok_or(ProxyError::V1Malformed("bad port"))
}

fn parse_v2(buf: &[u8]) -> Result<Parsed, ProxyError> {
    let k = buf.len().min(V2_SIGNATURE.len());
    if buf[..k] != V2_SIGNATURE[..k] {
        return Err(ProxyError::NotProxy);
    }
    if buf.len() < V2_FIXED {
        return Ok(incomplete(buf.len(), V2_FIXED));
    }
    let (version, command) = (buf[12] >> 4, buf[12] & 0x0f);
    if version != 2 {
        return Err(ProxyError::V2Version(version));
    }
    let local = match command {
        0 => true,
        1 => false,
        c => return Err(ProxyError::V2Command(c)),
    };
    let family = buf[13];
    let body = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if body > V2_MAX_BODY {
        return Err(ProxyError::V2TooLong(body));
    }
    let len = V2_FIXED + body;
    if buf.len() < len {
        return Ok(incomplete(buf.len(), len));
    }
    let block = &buf[V2_FIXED..len];
    // High nibble: 0 UNSPEC, 1 INET, 2 INET6, 3 UNIX; low: 0 UNSPEC, 1 STREAM, 2 DGRAM.
    let addresses = match family {
        0x11 => {
            let a = block.get(..12).ok_or(ProxyError::V2Short(body))?;
            let ip = |i: usize| IpAddr::from([a[i], a[i + 1], a[i + 2], a[i + 3]]);
            let port = |i: usize| u16::from_be_bytes([a[i], a[i + 1]]);
            Some((
                SocketAddr::new(ip(0), port(8)),
                SocketAddr::new(ip(4), port(10)),
            ))
        }
        0x21 => {
            let a = block.get(..36).ok_or(ProxyError::V2Short(body))?;
            let ip = |i: usize| {
                let mut o = [0u8; 16];
                o.copy_from_slice(&a[i..i + 16]);
                IpAddr::from(o)
            };
            let port = |i: usize| u16::from_be_bytes([a[i], a[i + 1]]);
            Some((
                SocketAddr::new(ip(0), port(32)),
                SocketAddr::new(ip(16), port(34)),
            ))
        }
        // Unspecified, or UNIX sockets: nothing usable as a client IP; the socket's peer stays.
        0x00 | 0x30..=0x32 => None,
        // With LOCAL the family is to be ignored.
        _ if local => None,
        // IPv4/IPv6 over datagrams or an unspecified transport, or an unknown family.
        f => return Err(ProxyError::V2Family(f)),
    };
    // LOCAL: the balancer speaking for itself (a health check); its addresses, if any, are
    // not a client's.
    let (source, destination) = match addresses {
        Some((s, d)) if !local => (Some(s), Some(d)),
        _ => (None, None),
    };
    Ok(Parsed::Done(Header {
        version: Version::V2,
        len,
        source,
        destination,
    }))
}

/// A v2 `PROXY` header for a TCP connection from `source` to `destination` (both of one
/// family; a mixed pair is sent as IPv6 with the IPv4 one mapped).
pub fn v2_header(source: SocketAddr, destination: SocketAddr) -> Vec<u8> {
    let mut out = Vec::with_capacity(V2_FIXED + 36);
    out.extend_from_slice(&V2_SIGNATURE);
    out.push(0x21);
    match (source.ip(), destination.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out.push(0x11);
            out.extend_from_slice(&12u16.to_be_bytes());
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
        }
        (s, d) => {
            let v6 = |ip: IpAddr| match ip {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            out.push(0x21);
            out.extend_from_slice(&36u16.to_be_bytes());
            out.extend_from_slice(&v6(s).octets());
            out.extend_from_slice(&v6(d).octets());
        }
    }
    out.extend_from_slice(&source.port().to_be_bytes());
    out.extend_from_slice(&destination.port().to_be_bytes());
    out
}

// === Settings ===

/// `--proxy-protocol` and `--proxy-protocol-trusted`: which frontends expect a header, and
/// from which peers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    pub http: bool,
    pub https: bool,
    /// Every TCP frontend.
    pub tcp_all: bool,
    pub tcp_ports: BTreeSet<u16>,
    /// Empty: any peer may send a header (the flag was not given).
    pub trusted: Vec<Cidr>,
}

impl Settings {
    pub fn tcp(&self, port: u16) -> bool {
        self.tcp_all || self.tcp_ports.contains(&port)
    }

    pub fn any(&self) -> bool {
        self.http || self.https || self.tcp_all || !self.tcp_ports.is_empty()
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        self.trusted.is_empty() || self.trusted.iter().any(|c| c.contains(ip))
    }
}

/// One item of `--proxy-protocol`: `http`, `https`, `tcp` (every TCP frontend), `tcp:PORT`,
/// or `all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrontendSel {
    All,
    Http,
    Https,
    Tcp(Option<u16>),
}

impl FromStr for FrontendSel {
    type Err = String;

    fn from_str(s: &str) -> Result<FrontendSel, String> {
        Ok(match s.trim() {
            "all" => FrontendSel::All,
            "http" => FrontendSel::Http,
            "https" => FrontendSel::Https,
            "tcp" => FrontendSel::Tcp(None),
            other => {
                let port = other
                    .strip_prefix("tcp:")
                    .and_then(|p| p.parse::<u16>().ok())
                    .filter(|p| *p > 0)
                    .ok_or_else(|| format!("{other:?} is not http, https, tcp, tcp:PORT or all"))?;
                FrontendSel::Tcp(Some(port))
            }
        })
    }
}

impl Settings {
    /// Adds one `--proxy-protocol` item.
    pub fn select(&mut self, sel: FrontendSel) {
        match sel {
            FrontendSel::All => {
                self.http = true;
                self.https = true;
                self.tcp_all = true;
            }
            FrontendSel::Http => self.http = true,
            FrontendSel::Https => self.https = true,
            FrontendSel::Tcp(None) => self.tcp_all = true,
            FrontendSel::Tcp(Some(p)) => {
                self.tcp_ports.insert(p);
            }
        }
    }
}

// === read_header ===

/// Why a connection on a PROXY protocol frontend was closed: the metric's `reason` label.
/// Declared in `Reason::ALL` order, so `reason as usize` indexes per-reason tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    /// The peer is outside `--proxy-protocol-trusted`.
    Untrusted,
    /// The first bytes were not a PROXY header (a client that bypassed the balancer).
    NotProxy,
    /// A PROXY header that does not parse or is not supported.
    Invalid,
    /// No complete header within `--request-header-timeout`.
    Timeout,
    /// The peer closed (or reset) the connection in the middle of the header.
    Closed,
}

impl Reason {
    pub const ALL: [Reason; 5] = [
        Reason::Untrusted,
        Reason::NotProxy,
        Reason::Invalid,
        Reason::Timeout,
        Reason::Closed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Untrusted => "untrusted",
            Reason::NotProxy => "not_proxy",
            Reason::Invalid => "invalid",
            Reason::Timeout => "timeout",
            Reason::Closed => "closed",
        }
    }
}

/// How reading a header failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Header(#[from] ProxyError),
    #[error("no complete PROXY header within {0:?}")]
    Timeout(Duration),
    /// `got`: how many bytes had arrived; 0 is a connection opened and closed without a word
    /// (a TCP health check), which is not refused but simply ends.
    #[error("connection closed after {got} bytes of a PROXY header")]
    Closed { got: usize },
    #[error("reading a PROXY header: {0}")]
    Io(std::io::Error),
}

impl ReadError {
    pub fn reason(&self) -> Reason {
        match self {
            ReadError::Header(e) => e.reason(),
            ReadError::Timeout(_) => Reason::Timeout,
            ReadError::Closed { .. } | ReadError::Io(_) => Reason::Closed,
        }
    }
}

/// Reads one header from `io` within `timeout`: exactly its bytes, so the next read of `io`
/// returns the first byte after it.
pub async fn read_header<R: AsyncRead + Unpin>(
    io: &mut R,
    timeout: Duration,
) -> Result<Header, ReadError> {
    let read = async {
        let mut buf = Vec::with_capacity(64);
        // Each round reads at least one byte or ends, and the header is bounded, so the loop
        // is too.
        loop {
            let need = match parse(&buf)? {
                Parsed::Done(h) => return Ok(h),
                Parsed::Incomplete { need } => need,
            };
            let have = buf.len();
            buf.resize(have + need, 0);
            let n = io.read(&mut buf[have..]).await.map_err(ReadError::Io)?;
            buf.truncate(have + n);
            if n == 0 {
                return Err(ReadError::Closed { got: have });
            }
        }
    };
    tokio::time::timeout(timeout, read)
        .await
        .map_err(|_| ReadError::Timeout(timeout))?
}

// === impl Acceptor ===

/// One frontend's PROXY protocol policy: who is trusted, how long a header may take, and the
/// counters of refused connections.
#[derive(Clone)]
pub struct Acceptor {
    inner: Arc<AcceptorInner>,
}

struct AcceptorInner {
    frontend: String,
    settings: Settings,
    timeout: Duration,
    /// By `Reason` (in `Reason::ALL` order), with whether it was logged at warn yet.
    refused: Vec<(IntCounter, AtomicBool)>,
}

impl Acceptor {
    pub fn new(metrics: &Metrics, frontend: &str, settings: Settings, timeout: Duration) -> Self {
        let refused = Reason::ALL
            .iter()
            .map(|r| {
                (
                    metrics.data.proxy_protocol_rejected(frontend, r.as_str()),
                    AtomicBool::new(false),
                )
            })
            .collect();
        Acceptor {
            inner: Arc::new(AcceptorInner {
                frontend: frontend.to_string(),
                settings,
                timeout,
                refused,
            }),
        }
    }

    /// Checks `peer` and reads the header from `io`; returns the client address every consumer
    /// should see (`peer` itself for LOCAL / UNKNOWN headers), or `None` when the connection is
    /// to be closed (counted and logged here).
    pub async fn accept<R: AsyncRead + Unpin>(
        &self,
        io: &mut R,
        peer: SocketAddr,
    ) -> Option<SocketAddr> {
        let me = &self.inner;
        if !me.settings.trusts(peer.ip()) {
            self.refuse(
                Reason::Untrusted,
                peer,
                &"peer outside --proxy-protocol-trusted",
            );
            return None;
        }
        match read_header(io, me.timeout).await {
            Ok(h) => Some(h.source.unwrap_or(peer)),
            // Opened and closed without a byte: a balancer's TCP health check, not a refusal.
            Err(ReadError::Closed { got: 0 }) => None,
            Err(e) => {
                self.refuse(e.reason(), peer, &e);
                None
            }
        }
    }

    fn refuse(&self, reason: Reason, peer: SocketAddr, why: &dyn fmt::Display) {
        let me = &self.inner;
        let Some((counter, warned)) = me.refused.get(reason as usize) else {
            return;
        };
        counter.inc();
        // Once per frontend and reason at warn (a misconfigured balancer shows at once), then
        // at debug: a scan of the port must not flood the log.
        if warned.swap(true, Ordering::Relaxed) {
            tracing::debug!(frontend = %me.frontend, %peer, reason = reason.as_str(), error = %why,
                "PROXY protocol: connection refused");
        } else {
            tracing::warn!(frontend = %me.frontend, %peer, reason = reason.as_str(), error = %why,
                "PROXY protocol: connection refused (further ones of this reason are logged at debug)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(buf: &[u8]) -> Header {
        match parse(buf) {
            Ok(Parsed::Done(h)) => h,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
        }
    }

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn v2(cmd: u8, fam: u8, body: &[u8]) -> Vec<u8> {
        let mut v = V2_SIGNATURE.to_vec();
        v.push(0x20 | cmd);
        v.push(fam);
        v.extend_from_slice(&u16::try_from(body.len()).unwrap().to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    /// Feeds `input` the way `read_header` does, at most `chunk` bytes per read, and checks it
    /// never asks for a byte past the header.
    fn feed(input: &[u8], chunk: usize) -> Result<Header, ProxyError> {
        let mut buf = Vec::new();
        loop {
            match parse(&buf)? {
                Parsed::Done(h) => {
                    assert_eq!(h.len, buf.len(), "read exactly the header");
                    return Ok(h);
                }
                Parsed::Incomplete { need } => {
                    assert!(need >= 1);
                    let from = buf.len();
                    let to = (from + need.min(chunk)).min(input.len());
                    assert!(to > from, "wants bytes past the input: {need}");
                    buf.extend_from_slice(&input[from..to]);
                }
            }
        }
    }

    /// Found by the fuzz target: a bare CR inside an UNKNOWN line was refused while the line
    /// arrived and accepted once whole.
    #[test]
    fn a_cr_inside_a_v1_line_is_refused_whole_or_in_pieces() {
        let line = b"PROXY UNKNOWN x\r y\r\n";
        assert!(parse(line).is_err());
        assert!(parse(&line[..17]).is_err());
        assert!(matches!(
            parse(b"PROXY UNKNOWN x y\r\n"),
            Ok(Parsed::Done(_))
        ));
    }

    #[test]
    fn v1_headers_parse_and_stop_at_their_end() {
        let h = done(b"PROXY TCP4 203.0.113.7 10.0.0.1 51234 443\r\nGET / HTTP/1.1\r\n");
        assert_eq!(h.version, Version::V1);
        assert_eq!(h.len, 43);
        assert_eq!(h.source, Some(sa("203.0.113.7:51234")));
        assert_eq!(h.destination, Some(sa("10.0.0.1:443")));
        let h = done(b"PROXY TCP6 2001:db8::1 ::1 1 65535\r\n");
        assert_eq!(h.source, Some(sa("[2001:db8::1]:1")));
        let h = done(b"PROXY UNKNOWN\r\n");
        assert_eq!((h.len, h.source), (15, None));
        let h = done(b"PROXY UNKNOWN ffff::1 ::1 9 9\r\n\x16\x03\x01");
        assert_eq!(h.source, None);
    }

    #[test]
    fn v1_garbage_is_refused() {
        for bad in [
            &b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n"[..],
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n",
            b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n",
            b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n",
            b"PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 1.2.3.4\r5.6.7.8 1 2\r\n",
        ] {
            assert!(
                matches!(parse(bad), Err(ProxyError::V1Malformed(_))),
                "{:?}: {:?}",
                String::from_utf8_lossy(bad),
                parse(bad)
            );
        }
        assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Err(ProxyError::NotProxy));
        assert_eq!(parse(b"PROXX"), Err(ProxyError::NotProxy));
        assert_eq!(parse(b"\x16\x03\x01"), Err(ProxyError::NotProxy));
        let long = [b"PROXY UNKNOWN ".as_slice(), &[b'a'; 100]].concat();
        assert_eq!(parse(&long), Err(ProxyError::V1TooLong));
    }

    #[test]
    fn v2_headers_parse() {
        let mut body = vec![203, 0, 113, 7, 10, 0, 0, 1];
        body.extend_from_slice(&51234u16.to_be_bytes());
        body.extend_from_slice(&443u16.to_be_bytes());
        // A TLV after the addresses (AWS puts its VPC endpoint id there) is skipped.
        body.extend_from_slice(&[0xEA, 0x00, 0x03, b'v', b'p', b'c']);
        let mut input = v2(1, 0x11, &body);
        let len = input.len();
        input.extend_from_slice(b"GET / HTTP/1.1\r\n");
        let h = done(&input);
        assert_eq!(h.version, Version::V2);
        assert_eq!(h.len, len);
        assert_eq!(h.source, Some(sa("203.0.113.7:51234")));
        assert_eq!(h.destination, Some(sa("10.0.0.1:443")));

        let h = done(&v2_header(sa("[2001:db8::7]:4000"), sa("[::1]:443")));
        assert_eq!(h.source, Some(sa("[2001:db8::7]:4000")));
        let h = done(&v2_header(sa("192.0.2.1:1"), sa("[::1]:443")));
        assert_eq!(h.source, Some(sa("[::ffff:192.0.2.1]:1")));

        // LOCAL (a health check of the balancer), UNSPEC and UNIX keep the socket's peer.
        assert_eq!(done(&v2(0, 0x00, &[])).source, None);
        assert_eq!(done(&v2(0, 0x11, &body)).source, None);
        assert_eq!(done(&v2(1, 0x00, &[])).source, None);
        assert_eq!(done(&v2(1, 0x31, &[0; 216])).source, None);
    }

    #[test]
    fn v2_garbage_is_refused() {
        let mut bad_version = v2(1, 0x11, &[0; 12]);
        bad_version[12] = 0x11;
        assert_eq!(parse(&bad_version), Err(ProxyError::V2Version(1)));
        assert_eq!(parse(&v2(2, 0x11, &[0; 12])), Err(ProxyError::V2Command(2)));
        assert_eq!(
            parse(&v2(1, 0x12, &[0; 12])),
            Err(ProxyError::V2Family(0x12))
        );
        assert_eq!(
            parse(&v2(1, 0x41, &[0; 12])),
            Err(ProxyError::V2Family(0x41))
        );
        assert_eq!(parse(&v2(1, 0x11, &[0; 11])), Err(ProxyError::V2Short(11)));
        assert_eq!(parse(&v2(1, 0x21, &[0; 12])), Err(ProxyError::V2Short(12)));
        let mut huge = V2_SIGNATURE.to_vec();
        huge.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
        assert_eq!(parse(&huge), Err(ProxyError::V2TooLong(65535)));
        assert_eq!(parse(b"\r\n\r\nX"), Err(ProxyError::NotProxy));
        assert_eq!(parse(b"\r\n"), Ok(Parsed::Incomplete { need: 14 }));
    }

    #[test]
    fn byte_at_a_time_arrival_never_reads_past_the_header() {
        let mut inputs: Vec<Vec<u8>> = vec![
            b"PROXY TCP4 203.0.113.7 10.0.0.1 51234 443\r\n".to_vec(),
            b"PROXY TCP6 2001:db8::1 ::1 1 2\r\n".to_vec(),
            b"PROXY TCP4 1.1.1.1 1.1.1.1 1 1\r\n".to_vec(),
            b"PROXY TCP6 :: :: 0 0\r\n".to_vec(),
            b"PROXY UNKNOWN\r\n".to_vec(),
            v2_header(sa("203.0.113.7:1"), sa("10.0.0.1:2")),
            v2(0, 0x00, &[]),
        ];
        inputs.push([b"PROXY UNKNOWN ".as_slice(), &[b'x'; 90], b"\r\n"].concat());
        for input in &inputs {
            let whole = feed(input, usize::MAX).unwrap();
            for chunk in [1, 2, 3, 7] {
                assert_eq!(feed(input, chunk).unwrap(), whole);
            }
        }
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// Inputs near the grammar: a v1 line of protocol-ish characters, or a v2 header with
        /// a plausible version, command, family and length over random bytes; then anything.
        fn near_header() -> impl Strategy<Value = Vec<u8>> {
            let v1 = (
                prop::sample::select(vec!["TCP4 ", "TCP6 ", "UNKNOWN", "TCP4", ""]),
                prop::collection::vec(prop::sample::select(b"0123456789.:af \r\n".to_vec()), 0..80),
            )
                .prop_map(|(proto, rest)| [b"PROXY ".as_slice(), proto.as_bytes(), &rest].concat());
            let v2 = (
                prop::sample::select(vec![0x20u8, 0x21, 0x22, 0x11]),
                prop::sample::select(vec![0x00u8, 0x11, 0x21, 0x31, 0x12, 0x51]),
                0u16..64,
                prop::collection::vec(any::<u8>(), 0..80),
            )
                .prop_map(|(vc, fam, len, rest)| {
                    let mut h = V2_SIGNATURE.to_vec();
                    h.extend_from_slice(&[vc, fam]);
                    h.extend_from_slice(&len.to_be_bytes());
                    h.extend_from_slice(&rest);
                    h
                });
            (
                prop_oneof![v1, v2],
                prop::collection::vec(any::<u8>(), 0..8),
            )
                .prop_map(|(h, tail)| [h, tail].concat())
        }

        proptest! {
            /// Read as `read_header` reads (at most `need` at a time, in chunks of 1..=5
            /// bytes), the verdict is the whole input's, and a header ends exactly where the
            /// reads stopped.
            #[test]
            fn incremental_reads_agree_with_the_whole(data in near_header(), chunk in 1usize..6) {
                let whole = parse(&data);
                let mut have = 0;
                let incremental = loop {
                    match parse(&data[..have]) {
                        Ok(Parsed::Incomplete { need }) if have < data.len() => {
                            have = (have + need.min(chunk)).min(data.len());
                        }
                        Ok(Parsed::Incomplete { .. }) => break None,
                        other => break Some(other),
                    }
                };
                match incremental {
                    Some(Ok(Parsed::Done(h))) => {
                        prop_assert_eq!(h.len, have);
                        prop_assert_eq!(Ok(Parsed::Done(h)), whole);
                    }
                    Some(Err(_)) => prop_assert!(whole.is_err(), "{:?}", whole),
                    _ => prop_assert!(!matches!(whole, Ok(Parsed::Done(_)))),
                }
            }
        }
    }

    #[tokio::test]
    async fn read_header_leaves_what_follows_and_bounds_time() {
        let (mut client, mut server) = tokio::io::duplex(256);
        use tokio::io::AsyncWriteExt;
        let writer = tokio::spawn(async move {
            for b in b"PROXY TCP4 198.51.100.2 10.0.0.1 4000 80\r\nGET" {
                client.write_all(&[*b]).await.unwrap();
                tokio::task::yield_now().await;
            }
            client
        });
        let h = read_header(&mut server, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(h.source, Some(sa("198.51.100.2:4000")));
        let _client = writer.await.unwrap();
        let mut rest = [0u8; 3];
        server.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"GET");

        let (_silent, mut server) = tokio::io::duplex(64);
        let e = read_header(&mut server, Duration::from_millis(50))
            .await
            .unwrap_err();
        assert_eq!(e.reason(), Reason::Timeout);

        let (client, mut server) = tokio::io::duplex(64);
        drop(client);
        let e = read_header(&mut server, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(matches!(e, ReadError::Closed { got: 0 }), "{e:?}");
    }

    #[test]
    fn reasons_index_their_table() {
        for (i, r) in Reason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i, "{r:?}");
        }
    }

    #[test]
    fn frontend_selections_parse() {
        let mut s = Settings::default();
        for item in ["http", "tcp:5432"] {
            s.select(item.parse().unwrap());
        }
        assert!(s.http && !s.https && s.tcp(5432) && !s.tcp(5433));
        let mut all = Settings::default();
        all.select("all".parse().unwrap());
        assert!(all.http && all.https && all.tcp(1));
        for bad in ["tcp:0", "tcp:x", "udp", "HTTP", "tcp:70000", ""] {
            assert!(bad.parse::<FrontendSel>().is_err(), "{bad}");
        }
    }
}

//! CoreDNS pods: each Deployment of the upstream manifests whose container runs a `coredns`
//! image (the base manifests' `coredns`, behind the Service port `udp-dns`, UDP 53) becomes a
//! DNS responder on a UDP socket of 127.0.0.1 that answers as the base manifests' Corefile
//! makes CoreDNS answer:
//!
//! ```text
//! .:53          { forward . 8.8.8.8 9.9.9.9 ... }
//! foo.bar.com:53 { whoami }
//! ```
//!
//! - a query for a name in `foo.bar.com` is answered by `whoami`: `NOERROR`, authoritative,
//!   the question echoed, no answer records, and in the additional section the client's
//!   address (an `A` record of the query's name) and its port (an `SRV` record
//!   `_udp.<name>`), TTL 0;
//! - any other name would be forwarded to 8.8.8.8, which is not reachable offline: answered
//!   `SERVFAIL`, as CoreDNS answers when its upstreams fail;
//! - a message that is not one query of one question is answered `FORMERR` when its header
//!   reads, else dropped.
//!
//! Upstream's UDPRoute case (`conformance/tests/udproute-simple.go`) sends `foo.bar.com. A`
//! through the Gateway with miekg/dns's `dns.Exchange` and passes when an answer with the
//! query's ID comes back; [`query`] is that client, and reads what the answer says (the
//! rcode, the address and port `whoami` saw) so the tests can check more than upstream does.
//! Every query a pod answers is recorded ([`Pod::seen`]: the name as `path`, the type as
//! `method`).
//!
//! No DNS crate: a header, one question, and two resource records are a few dozen lines of
//! byte handling. Bounded: a pod answers at most [`MAX_DATAGRAMS`]; a name has at most 127
//! labels and follows at most 16 compression pointers; [`query`] waits at most
//! [`QUERY_TIMEOUT`].

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::UdpSocket;

use super::echo::{Echoed, Pod};

/// The zone the Corefile serves with `whoami`.
pub const WHOAMI_ZONE: &str = "foo.bar.com";
/// The most datagrams one pod answers.
const MAX_DATAGRAMS: usize = 100_000;
/// miekg/dns's default read timeout for `dns.Exchange`.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

pub const TYPE_A: u16 = 1;
pub const TYPE_AAAA: u16 = 28;
pub const TYPE_SRV: u16 = 33;
const CLASS_IN: u16 = 1;

pub const NOERROR: u8 = 0;
pub const FORMERR: u8 = 1;
pub const SERVFAIL: u8 = 2;

/// Starts a CoreDNS pod of Deployment `deployment`, named `name` in `namespace`, on a free
/// UDP port of 127.0.0.1 (the pod's port 53).
pub async fn start_pod(deployment: &str, name: &str, namespace: &str) -> Pod {
    let socket = UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("bind CoreDNS pod");
    let port = socket.local_addr().expect("local_addr").port();
    let seen: Arc<Mutex<Vec<Echoed>>> = Arc::default();
    let record = seen.clone();
    let task = tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        for _ in 0..MAX_DATAGRAMS {
            let Ok((n, from)) = socket.recv_from(&mut buf).await else {
                continue;
            };
            let Some((answer, asked)) = respond(&buf[..n], from) else {
                continue;
            };
            if let Some((qname, qtype)) = asked {
                record.lock().expect("seen lock").push(Echoed {
                    path: qname,
                    method: type_name(qtype),
                });
            }
            let _ = socket.send_to(&answer, from).await;
        }
    });
    Pod::serving(deployment, name, namespace, port, seen, task)
}

fn type_name(t: u16) -> String {
    match t {
        TYPE_A => "A".to_string(),
        TYPE_AAAA => "AAAA".to_string(),
        TYPE_SRV => "SRV".to_string(),
        t => format!("TYPE{t}"),
    }
}

/// The question a query asked: its name and type.
type Question = (String, u16);

/// The answer to one datagram from `client`, and the question it asked (None for a
/// `FORMERR`); None when not even the header reads.
fn respond(msg: &[u8], client: SocketAddr) -> Option<(Vec<u8>, Option<Question>)> {
    let header = msg.get(..12)?;
    let (id, flags) = (be16(header, 0)?, be16(header, 2)?);
    let is_query = flags & 0x8000 == 0 && (flags >> 11) & 0xf == 0;
    let question = (is_query && be16(header, 4) == Some(1))
        .then(|| read_name(msg, 12))
        .flatten()
        .and_then(|(qname, at)| Some((qname, be16(msg, at)?, be16(msg, at + 2)?)));
    // QR, the opcode and RD of the query.
    let mut out_flags = 0x8000 | (flags & 0x7900);
    let Some((qname, qtype, qclass)) = question else {
        out_flags |= u16::from(FORMERR);
        let mut out = Vec::with_capacity(12);
        for v in [id, out_flags, 0, 0, 0, 0] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        return Some((out, None));
    };
    let lower = qname.to_ascii_lowercase();
    let in_zone = lower == WHOAMI_ZONE || lower.ends_with(&format!(".{WHOAMI_ZONE}"));
    let mut additional: Vec<Vec<u8>> = Vec::new();
    if in_zone {
        // whoami: authoritative, the client's address and port in the additional section.
        out_flags |= 0x0400;
        let (rtype, addr) = match client.ip() {
            IpAddr::V4(a) => (TYPE_A, a.octets().to_vec()),
            IpAddr::V6(a) => (TYPE_AAAA, a.octets().to_vec()),
        };
        additional.push(record(&qname, rtype, &addr));
        let mut srv = Vec::new();
        srv.extend_from_slice(&0u16.to_be_bytes()); // priority
        srv.extend_from_slice(&0u16.to_be_bytes()); // weight
        srv.extend_from_slice(&client.port().to_be_bytes());
        srv.extend_from_slice(&encode_name(&qname));
        additional.push(record(&format!("_udp.{qname}"), TYPE_SRV, &srv));
    } else {
        // forward . 8.8.8.8 9.9.9.9: no upstream offline. Recursion available, as CoreDNS says.
        out_flags |= 0x0080 | u16::from(SERVFAIL);
    }
    let mut out = Vec::with_capacity(512);
    for v in [id, out_flags, 1, 0, 0, additional.len() as u16] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out.extend_from_slice(&encode_name(&qname));
    out.extend_from_slice(&qtype.to_be_bytes());
    out.extend_from_slice(&qclass.to_be_bytes());
    for rr in additional {
        out.extend_from_slice(&rr);
    }
    Some((out, Some((qname, qtype))))
}

/// A resource record of class IN, TTL 0.
fn record(name: &str, rtype: u16, rdata: &[u8]) -> Vec<u8> {
    let mut rr = encode_name(name);
    rr.extend_from_slice(&rtype.to_be_bytes());
    rr.extend_from_slice(&CLASS_IN.to_be_bytes());
    rr.extend_from_slice(&0u32.to_be_bytes());
    rr.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    rr.extend_from_slice(rdata);
    rr
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// `name` in wire form, without compression (`foo.bar.com` and `foo.bar.com.` alike).
fn encode_name(name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len() + 2);
    for label in name
        .trim_end_matches('.')
        .split('.')
        .filter(|l| !l.is_empty())
    {
        let label = &label.as_bytes()[..label.len().min(63)];
        out.push(label.len() as u8);
        out.extend_from_slice(label);
    }
    out.push(0);
    out
}

/// The name at `at` of `msg` (dotted, no trailing dot; `""` for the root) and the offset
/// just past it, following compression pointers (at most 16) and at most 127 labels.
fn read_name(msg: &[u8], at: usize) -> Option<(String, usize)> {
    let (mut labels, mut pos, mut end, mut jumps) = (Vec::new(), at, None, 0);
    loop {
        let len = *msg.get(pos)?;
        match len {
            0 => break,
            l if l & 0xc0 == 0xc0 => {
                jumps += 1;
                if jumps > 16 {
                    return None;
                }
                end.get_or_insert(pos + 2);
                pos = usize::from(be16(msg, pos)? & 0x3fff);
            }
            l if l & 0xc0 == 0 => {
                let label = msg.get(pos + 1..pos + 1 + usize::from(l))?;
                labels.push(String::from_utf8_lossy(label).into_owned());
                if labels.len() > 127 {
                    return None;
                }
                pos += 1 + usize::from(l);
            }
            _ => return None,
        }
    }
    Some((labels.join("."), end.unwrap_or(pos + 1)))
}

// === the client: miekg/dns's dns.Exchange ===

/// A query ID: a counter started from the clock (no random crate; IDs only need to differ
/// between the queries in flight).
fn next_id() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u16)
        .unwrap_or(0);
    NEXT.fetch_add(1, Ordering::Relaxed).wrapping_add(clock)
}

/// What an answer to [`query`] said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub rcode: u8,
    pub authoritative: bool,
    /// The address of an `A`/`AAAA` record of the additional section (`whoami`'s view of the
    /// client).
    pub client_ip: Option<IpAddr>,
    /// The port of an `SRV` record of the additional section (`whoami`'s).
    pub client_port: Option<u16>,
}

/// One query of `name` type `qtype` (recursion desired, as miekg's `SetQuestion`) from a new
/// UDP socket to `ip:port`, as `dns.Exchange` makes it: the answer must come within
/// [`QUERY_TIMEOUT`] with the query's ID, as an answer (QR), to the same question. A
/// connected socket's ICMP refusal is reported as such.
pub async fn query(ip: &str, port: u16, name: &str, qtype: u16) -> Result<Answer, String> {
    let id = next_id();
    let mut msg = Vec::with_capacity(64);
    for v in [id, 0x0100, 1, 0, 0, 0] {
        msg.extend_from_slice(&v.to_be_bytes());
    }
    msg.extend_from_slice(&encode_name(name));
    msg.extend_from_slice(&qtype.to_be_bytes());
    msg.extend_from_slice(&CLASS_IN.to_be_bytes());
    let socket = UdpSocket::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("bind: {e}"))?;
    socket
        .connect((ip, port))
        .await
        .map_err(|e| format!("connect {ip}:{port}: {e}"))?;
    socket.send(&msg).await.map_err(|e| format!("send: {e}"))?;
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(QUERY_TIMEOUT, socket.recv(&mut buf))
        .await
        .map_err(|_| format!("no answer from {ip}:{port} within {QUERY_TIMEOUT:?}"))?
        .map_err(|e| format!("read from {ip}:{port}: {e}"))?;
    parse_answer(&buf[..n], id, name, qtype)
}

/// Reads an answer to query `id` for `name`/`qtype` (miekg's checks: ID, then what parses).
fn parse_answer(msg: &[u8], id: u16, name: &str, qtype: u16) -> Result<Answer, String> {
    let short = || format!("short answer ({} bytes)", msg.len());
    let got_id = be16(msg, 0).ok_or_else(short)?;
    if got_id != id {
        return Err(format!(
            "answer ID {got_id} for query ID {id} (dns: id mismatch)"
        ));
    }
    let flags = be16(msg, 2).ok_or_else(short)?;
    if flags & 0x8000 == 0 {
        return Err("the answer is not a response (QR unset)".to_string());
    }
    let counts: Vec<u16> = (0..4)
        .map(|i| be16(msg, 4 + 2 * i).ok_or_else(short))
        .collect::<Result<_, _>>()?;
    let mut at = 12;
    if counts[0] != 1 {
        return Err(format!("{} questions in the answer", counts[0]));
    }
    let (qname, after) = read_name(msg, at).ok_or("the question does not parse")?;
    let (got_type, _) = (be16(msg, after), be16(msg, after + 2).ok_or_else(short)?);
    if !qname.eq_ignore_ascii_case(name.trim_end_matches('.')) || got_type != Some(qtype) {
        return Err(format!(
            "the answer is to {qname:?} type {got_type:?}, not {name:?} type {qtype}"
        ));
    }
    at = after + 4;
    let mut answer = Answer {
        rcode: (flags & 0xf) as u8,
        authoritative: flags & 0x0400 != 0,
        client_ip: None,
        client_port: None,
    };
    let records = usize::from(counts[1]) + usize::from(counts[2]) + usize::from(counts[3]);
    for i in 0..records {
        let (_, after) = read_name(msg, at).ok_or_else(|| format!("record {i} does not parse"))?;
        let rtype = be16(msg, after).ok_or_else(short)?;
        let len = usize::from(be16(msg, after + 8).ok_or_else(short)?);
        let rdata = msg.get(after + 10..after + 10 + len).ok_or_else(short)?;
        let additional = i >= usize::from(counts[1]) + usize::from(counts[2]);
        if additional {
            match (rtype, rdata.len()) {
                (TYPE_A, 4) => {
                    answer.client_ip = Some(IpAddr::from(<[u8; 4]>::try_from(rdata).unwrap()));
                }
                (TYPE_AAAA, 16) => {
                    answer.client_ip = Some(IpAddr::from(<[u8; 16]>::try_from(rdata).unwrap()));
                }
                (TYPE_SRV, n) if n >= 6 => answer.client_port = be16(rdata, 4),
                _ => {}
            }
        }
        at = after + 10 + len;
    }
    Ok(answer)
}

//! Hostile input against a real switchyard process on 127.0.0.1: request smuggling and malformed
//! requests written byte for byte on raw sockets, with a raw TCP backend that records every
//! byte it is sent (so the test sees exactly what was forwarded, not what a parser made of
//! it); slowloris and the connection limit; broken TLS handshakes and their metrics; admin
//! paths on the traffic port; hostile manifests through the real binary. Every wait is bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod tls_client;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a client waits for an answer to one hostile request.
const ANSWER_WAIT: Duration = Duration::from_secs(3);

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// What makes a forwarded request ambiguous: anything two HTTP parsers could frame or read
/// differently. Returns the problems found in one upstream connection's bytes.
fn ambiguities(bytes: &[u8]) -> Vec<String> {
    let mut problems = Vec::new();
    if find(bytes, b"smuggled").is_some() {
        problems.push("the smuggled request reached the backend".into());
    }
    let Some(end) = find(bytes, b"\r\n\r\n") else {
        problems.push("no complete CRLF header".into());
        return problems;
    };
    let head = &bytes[..end + 2];
    for (i, &b) in head.iter().enumerate() {
        if b == b'\n' && (i == 0 || head[i - 1] != b'\r') {
            problems.push("bare LF in the header".into());
        }
        if b == b'\r' && head.get(i + 1) != Some(&b'\n') {
            problems.push("bare CR in the header".into());
        }
        if (b < 0x20 && b != b'\r' && b != b'\n' && b != b'\t') || b == 0x7f {
            problems.push(format!("control byte {b:#04x} in the header"));
        }
    }
    let text = String::from_utf8_lossy(head).to_ascii_lowercase();
    let mut lines = text.split("\r\n");
    let _request_line = lines.next();
    let mut cl = Vec::new();
    let mut te = Vec::new();
    for line in lines.filter(|l| !l.is_empty()) {
        if line.starts_with(' ') || line.starts_with('\t') {
            problems.push("obs-fold continuation line".into());
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            problems.push(format!("header line without a colon: {line:?}"));
            continue;
        };
        if name != name.trim() {
            problems.push(format!("whitespace around a header name: {name:?}"));
        }
        match name {
            "content-length" => cl.push(value.trim().to_string()),
            "transfer-encoding" => te.push(value.trim().to_string()),
            "host" if value.trim().contains(' ') => problems.push(format!("bad host {value:?}")),
            _ => {}
        }
    }
    if !cl.is_empty() && !te.is_empty() {
        problems.push("both Content-Length and Transfer-Encoding".into());
    }
    if cl.len() > 1 {
        problems.push(format!("{} Content-Length headers", cl.len()));
    }
    if cl
        .iter()
        .any(|v| v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()))
    {
        problems.push(format!("non-numeric Content-Length {cl:?}"));
    }
    if te.len() > 1 || te.iter().any(|v| v != "chunked") {
        problems.push(format!(
            "Transfer-Encoding other than one `chunked`: {te:?}"
        ));
    }
    problems
}

// ---------------------------------------------------------------------------
// A raw client
// ---------------------------------------------------------------------------

/// What the client saw: the status of the first response (if any) and whether the connection
/// was closed by the other side before `ANSWER_WAIT`.
#[derive(Debug)]
struct Answer {
    status: Option<u16>,
    closed: bool,
}

async fn send_raw(port: u16, bytes: &[u8]) -> Answer {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    // The bytes may be refused part way: a failed write is part of the answer.
    let _ = s.write_all(bytes).await;
    read_answer(&mut s, ANSWER_WAIT).await
}

async fn read_answer(s: &mut TcpStream, wait: Duration) -> Answer {
    let deadline = tokio::time::Instant::now() + wait;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let mut closed = false;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                closed = true;
                break;
            }
            Ok(Ok(n)) => {
                got.extend_from_slice(&buf[..n]);
                // A whole response with its Content-Length body is enough.
                if let Some(end) = find(&got, b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
                    let len = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if got.len() >= end + 4 + len {
                        break;
                    }
                }
            }
            Err(_) => break,
        }
    }
    let status = std::str::from_utf8(&got)
        .ok()
        .and_then(|t| t.strip_prefix("HTTP/1.1 "))
        .and_then(|t| t.get(..3))
        .and_then(|c| c.parse().ok());
    Answer { status, closed }
}

/// A backend that records every byte it is sent, one request per connection
/// ([`Behaviour::RecordOnce`]): what was forwarded, not what a parser made of it.
async fn recorder() -> Backend {
    Backend::builder("raw")
        .behaviour(Behaviour::RecordOnce)
        .start()
        .await
}

fn raw_objs(backend: &Backend) -> Vec<Value> {
    vec![svc("raw", 80).into(), slice("raw", "", backend.port)]
}

async fn metric(sy: &Switchyard, name_and_labels: &str) -> f64 {
    let text = sy.admin("/metrics").await.body;
    text.lines()
        .find_map(|l| l.strip_prefix(name_and_labels))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

// ---------------------------------------------------------------------------
// Request smuggling and malformed requests
// ---------------------------------------------------------------------------

/// What must happen to a hostile request.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Want {
    /// 400/431 or the connection closed, and nothing at all reaches the backend.
    Rejected,
    /// May be forwarded, but only in an unambiguous form (checked on the backend's bytes).
    Unambiguous,
    /// A bad body: the client gets 400, the header (already streamed) and the good part of the
    /// body may have reached the backend, never the rest.
    Truncated,
}

fn cases() -> Vec<(&'static str, Vec<u8>, Want)> {
    use Want::*;
    let smuggled = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
    let post = |headers: &str, body: &str| {
        format!("POST /raw/ HTTP/1.1\r\nHost: example.test\r\n{headers}\r\n{body}").into_bytes()
    };
    let big = "a".repeat(70 * 1024);
    vec![
        ("CL and TE", post("Content-Length: 4\r\nTransfer-Encoding: chunked\r\n", &format!("0\r\n\r\n{smuggled}")), Rejected),
        ("TE and CL", post("Transfer-Encoding: chunked\r\nContent-Length: 40\r\n", &format!("0\r\n\r\n{smuggled}")), Rejected),
        ("duplicate CL, same", post("Content-Length: 4\r\nContent-Length: 4\r\n", "abcd"), Unambiguous),
        ("duplicate CL, conflicting", post("Content-Length: 4\r\nContent-Length: 40\r\n", &format!("abcd{smuggled}")), Rejected),
        ("CL list", post("Content-Length: 4, 40\r\n", &format!("abcd{smuggled}")), Rejected),
        ("CL negative", post("Content-Length: -1\r\n", smuggled), Rejected),
        ("CL with plus", post("Content-Length: +4\r\n", "abcd"), Rejected),
        ("CL hex", post("Content-Length: 0x4\r\n", "abcd"), Rejected),
        ("CL huge", post("Content-Length: 99999999999999999999999\r\n", "abcd"), Rejected),
        ("TE xchunked", post("Transfer-Encoding: xchunked\r\n", &format!("0\r\n\r\n{smuggled}")), Rejected),
        ("TE chunked, identity", post("Transfer-Encoding: chunked, identity\r\n", &format!("0\r\n\r\n{smuggled}")), Rejected),
        ("TE identity", post("Transfer-Encoding: identity\r\n", &format!("0\r\n\r\n{smuggled}")), Rejected),
        ("TE twice", post("Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n", &format!("0\r\n\r\n{smuggled}")), Rejected),
        ("TE space before colon", post("Transfer-Encoding : chunked\r\n", &format!("0\r\n\r\n{smuggled}")), Rejected),
        ("TE leading space (obs-fold)", post("X: y\r\n Transfer-Encoding: chunked\r\n", &format!("0\r\n\r\n{smuggled}")), Rejected),
        ("TE tab before value", post("Transfer-Encoding:\tchunked\r\n", "0\r\n\r\n"), Unambiguous),
        ("TE vertical tab", post("Transfer-Encoding:\x0bchunked\r\n", &format!("0\r\n\r\n{smuggled}")), Rejected),
        ("TE upper case", post("Transfer-Encoding: CHUNKED\r\n", "0\r\n\r\n"), Unambiguous),
        ("TE on HTTP/1.0", format!("POST /raw/ HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}").into_bytes(), Rejected),
        ("chunk size not hex", post("Transfer-Encoding: chunked\r\n", &format!("zz\r\nabcd\r\n0\r\n\r\n{smuggled}")), Truncated),
        ("chunk size negative", post("Transfer-Encoding: chunked\r\n", &format!("-1\r\nabcd\r\n0\r\n\r\n{smuggled}")), Truncated),
        ("chunk size 0x prefix", post("Transfer-Encoding: chunked\r\n", &format!("0x4\r\nabcd\r\n0\r\n\r\n{smuggled}")), Truncated),
        ("chunk size overflow", post("Transfer-Encoding: chunked\r\n", &format!("fffffffffffffffffff\r\nabcd\r\n0\r\n\r\n{smuggled}")), Truncated),
        ("chunk without CRLF", post("Transfer-Encoding: chunked\r\n", &format!("4\r\nabcdXX0\r\n\r\n{smuggled}")), Truncated),
        ("bare LF line endings", b"GET /raw/ HTTP/1.1\nHost: example.test\nX-A: b\n\n".to_vec(), Unambiguous),
        ("bare CR in a value", post("X-A: a\rb\r\nContent-Length: 0\r\n", ""), Rejected),
        ("NUL in a value", post("X-A: a\0b\r\nContent-Length: 0\r\n", ""), Rejected),
        ("control byte in a value", post("X-A: a\x01b\r\nContent-Length: 0\r\n", ""), Rejected),
        ("DEL in a value", post("X-A: a\x7fb\r\nContent-Length: 0\r\n", ""), Rejected),
        ("NUL in a name", post("X-\0A: b\r\nContent-Length: 0\r\n", ""), Rejected),
        ("space in a name", post("X A: b\r\nContent-Length: 0\r\n", ""), Rejected),
        ("no colon", post("X-A b\r\nContent-Length: 0\r\n", ""), Rejected),
        // Pingora percent-encodes bytes that are illegal in a target (`/%00`): unambiguous.
        ("NUL in the target", b"GET /raw/\0 HTTP/1.1\r\nHost: example.test\r\n\r\n".to_vec(), Unambiguous),
        ("bad version", b"GET /raw/ HTTP/9.9\r\nHost: example.test\r\n\r\n".to_vec(), Rejected),
        ("garbage request line", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 garbage\r\n\r\n".to_vec(), Rejected),
        ("over-long request line", format!("GET /raw/{big} HTTP/1.1\r\nHost: example.test\r\n\r\n").into_bytes(), Rejected),
        ("over-long header", format!("GET /raw/ HTTP/1.1\r\nHost: example.test\r\nX-Big: {big}\r\n\r\n").into_bytes(), Rejected),
        ("many headers", format!("GET /raw/ HTTP/1.1\r\nHost: example.test\r\n{}\r\n", "X-A: b\r\n".repeat(300)).into_bytes(), Rejected),
        ("Host with a space", b"GET /raw/ HTTP/1.1\r\nHost: a b\r\n\r\n".to_vec(), Rejected),
        ("Host twice", b"GET /raw/ HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n".to_vec(), Rejected),
        ("Host empty on HTTP/1.1", b"GET /raw/ HTTP/1.1\r\nHost: \r\nX-Pad: padding\r\n\r\n".to_vec(), Unambiguous),
        ("Host missing on HTTP/1.1", b"GET /raw/ HTTP/1.1\r\nX-Padding: 1234567\r\n\r\n".to_vec(), Rejected),
        ("Host with a slash", b"GET /raw/ HTTP/1.1\r\nHost: a.test/evil\r\n\r\n".to_vec(), Rejected),
        ("Host with a control byte", b"GET /raw/ HTTP/1.1\r\nHost: a\x01.test\r\n\r\n".to_vec(), Rejected),
    ]
}

#[tokio::test]
async fn smuggling_and_malformed_requests_are_refused_or_forwarded_unambiguously() {
    let backend = recorder().await;
    let sy = switchyard(raw_objs(&backend))
        .args(&["--request-header-timeout", "1s"])
        .start()
        .await;

    // The fixture works: a clean request is forwarded whole.
    let ok = send_raw(
        sy.http_port,
        b"GET /raw/ok HTTP/1.1\r\nHost: example.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(ok.status, Some(200), "{ok:?}; stderr:\n{}", sy.stderr());
    assert_eq!(backend.used_connections().len(), 1);
    assert!(ambiguities(&backend.used_connections()[0]).is_empty());

    let mut failures = Vec::new();
    let mut outcomes = Vec::new();
    for (name, bytes, want) in cases() {
        let before = backend.received().len();
        let answer = send_raw(sy.http_port, &bytes).await;
        // Not a wait for an event but a quiet window: a forwarded request arrives whole within
        // it (the recorder reads on 100 ms past a head), and so would a second, smuggled one
        // sent on after the client had its answer; that nothing more came cannot be awaited.
        tokio::time::sleep(Duration::from_millis(150)).await;
        let got = backend.received();
        // Pingora may open an upstream connection and then refuse the request: an empty
        // connection carried nothing.
        let forwarded: Vec<&Vec<u8>> = got[before..].iter().filter(|c| !c.is_empty()).collect();
        let refused = matches!(answer.status, Some(400 | 408 | 411 | 413 | 431 | 501 | 505))
            || (answer.status.is_none() && answer.closed);
        outcomes.push(format!(
            "{name}: status {:?}, closed {}, forwarded {:?}",
            answer.status,
            answer.closed,
            forwarded
                .iter()
                .map(|f| String::from_utf8_lossy(&f[..f.len().min(80)]).into_owned())
                .collect::<Vec<_>>()
        ));
        for f in &forwarded {
            for p in ambiguities(f) {
                failures.push(format!("{name}: {p}: {:?}", String::from_utf8_lossy(f)));
            }
        }
        if want == Want::Truncated && !refused {
            failures.push(format!("{name}: wanted a refusal, got {answer:?}"));
        }
        if want == Want::Rejected && (!refused || !forwarded.is_empty()) {
            failures.push(format!(
                "{name}: wanted a refusal with nothing forwarded, got {answer:?} and {} forwarded",
                forwarded.len()
            ));
        }
    }
    eprintln!("{}", outcomes.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        !sy.stderr().contains("panicked"),
        "a panic:\n{}",
        sy.stderr()
    );
    // Still serving.
    let ok = send_raw(
        sy.http_port,
        b"GET /raw/ok HTTP/1.1\r\nHost: example.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(ok.status, Some(200));
}

// ---------------------------------------------------------------------------
// Header size, slowloris, connection limit
// ---------------------------------------------------------------------------

fn get_with_header_bytes(total: usize) -> Vec<u8> {
    let head =
        "GET /raw/big HTTP/1.1\r\nHost: example.test\r\nConnection: close\r\nX-Big: \r\n\r\n";
    let pad = total.saturating_sub(head.len());
    format!(
        "GET /raw/big HTTP/1.1\r\nHost: example.test\r\nConnection: close\r\nX-Big: {}\r\n\r\n",
        "b".repeat(pad)
    )
    .into_bytes()
}

#[tokio::test]
async fn request_header_size_limit_is_the_flag() {
    let backend = recorder().await;
    let sy = switchyard(raw_objs(&backend)).start().await;
    // Default 64 KiB: just under passes, just over is 431 and reaches nothing.
    let a = send_raw(sy.http_port, &get_with_header_bytes(64 * 1024)).await;
    assert_eq!(a.status, Some(200), "{a:?}");
    let a = send_raw(sy.http_port, &get_with_header_bytes(64 * 1024 + 1)).await;
    assert_eq!(a.status, Some(431), "{a:?}");
    assert_eq!(backend.used_connections().len(), 1);
    drop(sy);

    let sy = switchyard(raw_objs(&backend))
        .args(&["--max-request-header-bytes", "4096"])
        .start()
        .await;
    let a = send_raw(sy.http_port, &get_with_header_bytes(4096)).await;
    assert_eq!(a.status, Some(200), "{a:?}");
    // Byte by byte in one write or many: the limit counts bytes, not reads.
    let a = send_raw(sy.http_port, &get_with_header_bytes(4097)).await;
    assert_eq!(a.status, Some(431), "{a:?}");
    assert_eq!(backend.used_connections().len(), 2);
    assert_eq!(
        metric(
            &sy,
            "switchyard_downstream_rejected_connections_total{frontend=\"http\",reason=\"header_too_large\"}"
        )
        .await,
        1.0
    );
}

/// Opens a connection and trickles `bytes` one at a time every `gap` until the server closes
/// it or `limit` passes; returns (bytes sent, what the server answered, closed by the server).
async fn trickle(port: u16, bytes: &[u8], gap: Duration, limit: Duration) -> (usize, Answer) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let start = Instant::now();
    let mut sent = 0;
    let mut buf = [0u8; 1024];
    let mut got = Vec::new();
    while start.elapsed() < limit && sent < bytes.len() {
        if s.write_all(&bytes[sent..=sent]).await.is_err() {
            break;
        }
        sent += 1;
        match tokio::time::timeout(gap, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                return (sent, answer_of(&got, true));
            }
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
    }
    let rest = read_answer(&mut s, Duration::from_secs(2)).await;
    if got.is_empty() {
        (sent, rest)
    } else {
        (sent, answer_of(&got, rest.closed))
    }
}

fn answer_of(got: &[u8], closed: bool) -> Answer {
    Answer {
        status: std::str::from_utf8(got)
            .ok()
            .and_then(|t| t.strip_prefix("HTTP/1.1 "))
            .and_then(|t| t.get(..3))
            .and_then(|c| c.parse().ok()),
        closed,
    }
}

#[tokio::test]
async fn slowloris_is_cut_at_the_header_timeout_and_others_are_served() {
    let backend = Backend::start("b").await;
    let sy = switchyard(vec![svc("app", 80).into(), slice("app", "", backend.port)])
        .args(&["--request-header-timeout", "1s"])
        .start()
        .await;
    let request = b"GET /app/ HTTP/1.1\r\nHost: example.test\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let mut lorises = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let port = sy.http_port;
        lorises.spawn(async move {
            trickle(
                port,
                request,
                Duration::from_millis(100),
                Duration::from_secs(8),
            )
            .await
        });
    }
    // While they trickle (every one of them open in switchyard), normal clients are answered.
    let trickling = eventually(Duration::from_secs(5), || async {
        metric(
            &sy,
            r#"switchyard_downstream_open_connections{frontend="http"}"#,
        )
        .await
            >= 50.0
    })
    .await;
    assert!(trickling, "the 50 slowloris connections were not all open");
    for _ in 0..5 {
        let r = sy.get("/app/x").await;
        assert_eq!(r.status, 200, "{r:?}");
    }
    let mut cut = 0;
    while let Some(r) = lorises.join_next().await {
        let (sent, answer) = r.unwrap();
        // 1 s at 10 bytes/s is far less than the request: every one must have been cut,
        // with 408 (or a bare close if the answer raced the close).
        assert!(
            sent < request.len(),
            "a slowloris sent its whole header ({sent} bytes)"
        );
        assert!(
            answer.status == Some(408) || (answer.status.is_none() && answer.closed),
            "{answer:?}"
        );
        cut += 1;
    }
    assert_eq!(cut, 50);
    assert_eq!(
        backend.count(),
        5,
        "no trickled request reached the backend"
    );
    assert!(
        metric(
            &sy,
            "switchyard_downstream_rejected_connections_total{frontend=\"http\",reason=\"header_timeout\"}"
        )
        .await
            >= 50.0
    );

    // A kept-alive connection's second request is guarded too.
    let mut s = TcpStream::connect(("127.0.0.1", sy.http_port))
        .await
        .unwrap();
    s.write_all(b"GET /app/1 HTTP/1.1\r\nHost: example.test\r\n\r\n")
        .await
        .unwrap();
    let first = read_answer(&mut s, ANSWER_WAIT).await;
    assert_eq!(first.status, Some(200), "{first:?}");
    let start = Instant::now();
    let mut cut_second = false;
    for b in b"GET /app/2 HTTP/1.1\r\nHost: example.test\r\nX-Slow: aaaaaaaaaaaaaaa\r\n\r\n" {
        if s.write_all(&[*b]).await.is_err() {
            cut_second = true;
            break;
        }
        let mut buf = [0u8; 512];
        match tokio::time::timeout(Duration::from_millis(100), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                cut_second = true;
                break;
            }
            Ok(Ok(n)) => {
                assert!(buf[..n].starts_with(b"HTTP/1.1 408"), "{:?}", &buf[..n]);
                cut_second = true;
                break;
            }
            Err(_) => {}
        }
        assert!(start.elapsed() < Duration::from_secs(8));
    }
    assert!(cut_second, "the second request was not cut");
}

#[tokio::test]
async fn the_connection_limit_bounds_idle_connections() {
    let backend = Backend::start("b").await;
    let sy = switchyard(vec![svc("app", 80).into(), slice("app", "", backend.port)])
        .args(&["--max-connections", "20", "--request-header-timeout", "30s"])
        .start()
        .await;
    let mut idle = Vec::new();
    for _ in 0..20 {
        idle.push(
            TcpStream::connect(("127.0.0.1", sy.http_port))
                .await
                .unwrap(),
        );
    }
    // Let the server accept all of them before the next one arrives.
    let admitted = eventually(Duration::from_secs(5), || async {
        metric(
            &sy,
            "switchyard_downstream_open_connections{frontend=\"http\"}",
        )
        .await
            >= 20.0
    })
    .await;
    assert!(admitted);
    // The 21st is closed at once, without an answer.
    let mut extra = TcpStream::connect(("127.0.0.1", sy.http_port))
        .await
        .unwrap();
    let _ = extra
        .write_all(b"GET /app/ HTTP/1.1\r\nHost: example.test\r\n\r\n")
        .await;
    let a = read_answer(&mut extra, ANSWER_WAIT).await;
    assert!(a.closed && a.status.is_none(), "{a:?}");
    assert_eq!(
        metric(
            &sy,
            "switchyard_downstream_rejected_connections_total{frontend=\"http\",reason=\"connection_limit\"}"
        )
        .await,
        1.0
    );
    assert_eq!(backend.count(), 0);
    // Freed places are taken again.
    drop(idle);
    let served = eventually(Duration::from_secs(5), || async {
        try_request(sy.http_port, "GET", "/app/", &[])
            .await
            .is_ok_and(|r| r.status == 200)
    })
    .await;
    assert!(served);
}

/// Reads until the peer closes; how long that took, or `None` past `limit`.
async fn closed_within(s: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(limit, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return start.elapsed(),
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
}

#[tokio::test]
async fn idle_connections_close_at_the_keep_alive_timeout_http1_and_http2() {
    let backend = Backend::start("b").await;
    let sy = switchyard(vec![svc("app", 80).into(), slice("app", "", backend.port)])
        .args(&["--keep-alive-timeout", "1s"])
        .start()
        .await;
    // HTTP/1: one request answered, then nothing.
    let mut h1 = TcpStream::connect(("127.0.0.1", sy.http_port))
        .await
        .unwrap();
    h1.write_all(b"GET /app/ HTTP/1.1\r\nHost: example.test\r\n\r\n")
        .await
        .unwrap();
    let a = read_answer(&mut h1, ANSWER_WAIT).await;
    assert_eq!(a.status, Some(200), "{a:?}");
    let t = closed_within(&mut h1, Duration::from_secs(10)).await;
    assert!(
        t.is_some_and(|t| t < Duration::from_secs(5)),
        "HTTP/1: {t:?}"
    );
    // HTTP/2 (h2c): the preface and an empty SETTINGS frame, then no stream at all.
    let mut h2 = TcpStream::connect(("127.0.0.1", sy.http_port))
        .await
        .unwrap();
    h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    let t = closed_within(&mut h2, Duration::from_secs(10)).await;
    assert!(
        t.is_some_and(|t| t >= Duration::from_millis(900) && t < Duration::from_secs(5)),
        "HTTP/2: {t:?}"
    );
    // Busy connections are not cut: requests 400 ms apart for 2 s on one connection.
    let mut busy = TcpStream::connect(("127.0.0.1", sy.http_port))
        .await
        .unwrap();
    for _ in 0..5 {
        busy.write_all(b"GET /app/ HTTP/1.1\r\nHost: example.test\r\n\r\n")
            .await
            .unwrap();
        let a = read_answer(&mut busy, ANSWER_WAIT).await;
        assert_eq!(a.status, Some(200), "{a:?}");
        // The idle gap under test (shorter than the timeout), not a wait.
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
}

// ---------------------------------------------------------------------------
// TLS
// ---------------------------------------------------------------------------

use tls_client::{Ca, Leaf};

fn client_config(cert: Option<&Leaf>) -> Arc<rustls::ClientConfig> {
    Arc::new(tls_client::client_config(cert))
}

/// One GET over a fresh TLS connection; an error when the handshake or the first read fails
/// (with TLS 1.3 a rejected client certificate shows on the first read).
async fn tls_get(port: u16, cert: Option<&Leaf>) -> Result<u16, String> {
    let fut = async {
        let tcp = TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| e.to_string())?;
        let name = rustls::pki_types::ServerName::try_from("a.test").unwrap();
        let mut tls = tokio_rustls::TlsConnector::from(client_config(cert))
            .connect(name, tcp)
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        tls.write_all(b"GET /secure/ HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
            .await
            .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        tls.read_to_end(&mut out)
            .await
            .map_err(|e| format!("read: {e}"))?;
        answer_of(&out, true)
            .status
            .ok_or_else(|| "no status".to_string())
    };
    tokio::time::timeout(ANSWER_WAIT, fut)
        .await
        .map_err(|_| "timeout".to_string())?
}

/// The first bytes a TLS client sends: a real ClientHello.
fn client_hello() -> Vec<u8> {
    let name = rustls::pki_types::ServerName::try_from("a.test").unwrap();
    let mut conn = rustls::ClientConnection::new(client_config(None), name).unwrap();
    let mut out = Vec::new();
    conn.write_tls(&mut out).unwrap();
    out
}

async fn failures(sy: &Switchyard, reason: &str) -> f64 {
    metric(
        sy,
        &format!(
            "switchyard_tls_handshake_failures_total{{frontend=\"https\",reason=\"{reason}\"}}"
        ),
    )
    .await
}

#[tokio::test]
async fn broken_tls_handshakes_are_rejected_counted_and_harmless() {
    let server_ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let other_ca = Ca::new("other CA");
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("a.pem");
    let ca = dir.path().join("clients.pem");
    let server = server_ca.server(&["a.test"]);
    std::fs::write(&cert, server.bundle()).unwrap();
    std::fs::write(&ca, &client_ca.pem).unwrap();
    let backend = Backend::start("secure").await;
    let port = free_port();
    let objs = vec![
        svc("secure", 80)
            .ann("serviceloadbalancer/lb.sslTerm", "true")
            .into(),
        slice("secure", "", backend.port),
    ];
    let sy = switchyard(objs)
        .args(&["--https-port", &port.to_string()])
        .args(&["--ssl-cert", cert.to_str().unwrap()])
        .args(&["--ssl-ca-cert", ca.to_str().unwrap()])
        .args(&["--request-header-timeout", "1s"])
        .start()
        .await;
    let good = client_ca.client("t");
    let up = eventually(Duration::from_secs(10), || async {
        tls_get(port, Some(&good)).await == Ok(200)
    })
    .await;
    assert!(up, "the TLS port does not serve; stderr:\n{}", sy.stderr());
    let served = backend.count();

    // Garbage instead of a ClientHello: plain HTTP, then random-looking bytes.
    let a = send_raw(port, b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n").await;
    assert!(a.closed && a.status.is_none(), "{a:?}");
    let garbage: Vec<u8> = (0u32..600)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let a = send_raw(port, &garbage).await;
    assert!(a.closed && a.status.is_none(), "{a:?}");
    // A truncated ClientHello, then the client hangs up.
    let hello = client_hello();
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(&hello[..hello.len() / 2]).await.unwrap();
    drop(s);
    // A truncated ClientHello, then silence: cut at the handshake timeout (1 s).
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(&hello[..hello.len() / 2]).await.unwrap();
    let a = read_answer(&mut s, Duration::from_secs(5)).await;
    assert!(a.closed, "a stalled handshake was not cut: {a:?}");
    // Client certificates: none, another CA's, an expired one.
    let foreign = other_ca.client("t");
    let expired = client_ca.expired_client("t");
    for (what, c) in [
        ("none", None),
        ("another CA", Some(&foreign)),
        ("expired", Some(&expired)),
    ] {
        let r = tls_get(port, c).await;
        assert!(r.is_err(), "client certificate {what} got through: {r:?}");
    }
    assert_eq!(
        backend.count(),
        served,
        "a rejected client reached the backend"
    );

    let counted = eventually(Duration::from_secs(5), || async {
        failures(&sy, "protocol").await >= 2.0
            && failures(&sy, "io").await >= 1.0
            && failures(&sy, "timeout").await >= 1.0
            && failures(&sy, "bad_client_certificate").await >= 3.0
    })
    .await;
    let metrics = sy.admin("/metrics").await.body;
    assert!(
        counted,
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("tls_handshake"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Renegotiation: a TLS 1.2 client asks for it (openssl s_client's `R`); rustls refuses
    // it, and the server stays well.
    if let Some(out) = renegotiate(port, &dir, &good) {
        assert!(
            !out.contains("Verify return code: 0 (ok)\n---\nread R BLOCK")
                && out.contains("RENEGOTIATING"),
            "{out}"
        );
        assert!(
            out.to_ascii_lowercase().contains("no renegotiation"),
            "{out}"
        );
    }
    // Through all of it: good clients are served and nothing panicked.
    assert_eq!(tls_get(port, Some(&good)).await, Ok(200));
    assert!(!sy.stderr().contains("panicked"), "{}", sy.stderr());
}

/// Runs `openssl s_client -tls1_2` and asks it to renegotiate; `None` without openssl (the
/// Debian image has it; the test says so rather than failing elsewhere).
fn renegotiate(port: u16, dir: &tempfile::TempDir, cert: &Leaf) -> Option<String> {
    use std::io::{Read, Write};
    use std::process::{Command, Stdio};
    let cert_path = dir.path().join("good-client.crt");
    let key_path = dir.path().join("good-client.key");
    std::fs::write(&cert_path, &cert.cert_pem).unwrap();
    std::fs::write(&key_path, &cert.key_pem).unwrap();
    let mut child = match Command::new("openssl")
        .args([
            "s_client",
            "-tls1_2",
            "-connect",
            &format!("127.0.0.1:{port}"),
        ])
        .args(["-servername", "a.test"])
        .arg("-cert")
        .arg(&cert_path)
        .arg("-key")
        .arg(&key_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("SKIPPED renegotiation: no openssl ({e})");
            return None;
        }
    };
    // What s_client writes, read as it comes so that each step waits for the last one's answer.
    let drain = |from: Option<Box<dyn std::io::Read + Send>>| {
        let text = Arc::new(Mutex::new(String::new()));
        let into = Arc::clone(&text);
        let reader = std::thread::spawn(move || {
            let Some(mut from) = from else { return };
            let mut buf = [0u8; 4096];
            while let Ok(n) = from.read(&mut buf) {
                if n == 0 {
                    break;
                }
                into.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        (text, reader)
    };
    let (stdout, out_reader) = drain(child.stdout.take().map(|o| Box::new(o) as _));
    let (stderr, err_reader) = drain(child.stderr.take().map(|e| Box::new(e) as _));
    let said = |what: &str| {
        let all = format!("{}{}", stdout.lock().unwrap(), stderr.lock().unwrap());
        all.to_ascii_lowercase().contains(what)
    };
    let mut stdin = child.stdin.take().unwrap();
    // The handshake is done once s_client prints its verdict on the certificate.
    let mut exited = || child.try_wait().ok().flatten().is_some();
    poll_blocking(Duration::from_secs(5), Duration::from_millis(50), || {
        (said("verify return code") || exited()).then_some(())
    });
    let _ = stdin.write_all(b"R\n");
    // The server has answered the renegotiation once s_client reports the refusal (or ends).
    poll_blocking(Duration::from_secs(5), Duration::from_millis(50), || {
        (said("no renegotiation") || exited()).then_some(())
    });
    drop(stdin);
    poll_blocking(Duration::from_secs(5), Duration::from_millis(50), || {
        exited().then_some(())
    });
    let _ = child.kill();
    let _ = child.wait();
    let _ = (out_reader.join(), err_reader.join());
    let out = format!("{}{}", stdout.lock().unwrap(), stderr.lock().unwrap());
    Some(out)
}

// ---------------------------------------------------------------------------
// Security posture: admin paths and where admin listens
// ---------------------------------------------------------------------------

/// The IPv4 addresses listening on `port`, from /proc/net/tcp (Linux).
fn listening_on(port: u16) -> Vec<String> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (addr, p) = f.get(1)?.split_once(':')?;
            (f.get(3) == Some(&"0A") && u16::from_str_radix(p, 16).ok()? == port).then(|| {
                let n = u32::from_str_radix(addr, 16).unwrap_or(0);
                std::net::Ipv4Addr::from(n.swap_bytes()).to_string()
            })
        })
        .collect()
}

#[tokio::test]
async fn admin_paths_are_not_served_on_the_traffic_port_and_admin_binds_where_told() {
    let backend = Backend::start("b").await;
    let sy = switchyard(vec![svc("app", 80).into(), slice("app", "", backend.port)])
        .args(&["--admin-bind-address", "127.0.0.1"])
        .start()
        .await;
    for path in [
        "/metrics",
        "/readyz",
        "/explain?host=a&path=/app",
        "/;csv",
        "/?json",
    ] {
        let r = sy.get(path).await;
        assert_eq!(r.status, 404, "{path} on the traffic port: {r:?}");
        assert!(!r.body.contains("switchyard_"), "{path}: {}", r.body);
    }
    // `/healthz` on the traffic port is the original's default-backend answer (`200 ok`,
    // `--traffic-healthz`), never the admin server's.
    let r = sy.get("/healthz").await;
    assert_eq!((r.status, r.body.as_str()), (200, "ok"), "{r:?}");
    assert_eq!(sy.admin("/metrics").await.status, 200);
    assert_eq!(
        sy.get("/app/metrics").await.status,
        200,
        "routing still applies"
    );
    assert_eq!(backend.last().map(|s| s.uri), Some("/metrics".to_string()));
    assert_eq!(listening_on(sy.admin_port), ["127.0.0.1"]);
    assert_eq!(listening_on(sy.stats_port), ["127.0.0.1"]);
    assert_eq!(listening_on(sy.http_port), ["127.0.0.1"]);
    let help = std::process::Command::new(bin())
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in [
        "--admin-bind-address",
        "--request-header-timeout",
        "--max-request-header-bytes",
        "--max-connections",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help");
    }
}

// ---------------------------------------------------------------------------
// Hostile manifests through the real binary
// ---------------------------------------------------------------------------

/// Services whose annotations and fields try everything a text template would have let
/// through: newlines, quotes, huge values, unknown algorithms, out-of-range numbers, invalid
/// hosts and paths.
fn hostile_services() -> Vec<Value> {
    let long = "x".repeat(100_000);
    let values: Vec<(&str, String)> = vec![
        (
            "serviceloadbalancer/lb.host",
            "good.test\n  server evil 1.2.3.4:80".into(),
        ),
        ("serviceloadbalancer/lb.host", "good.test".into()),
        ("serviceloadbalancer/lb.host", "\"quoted\".test".into()),
        ("serviceloadbalancer/lb.host", long.clone()),
        ("serviceloadbalancer/lb.host", "*.*.test".into()),
        ("serviceloadbalancer/lb.host", "a b.test".into()),
        ("serviceloadbalancer/lb.aclMatch", "/good/\n/evil".into()),
        (
            "serviceloadbalancer/lb.aclMatch",
            "relative /x?y /#z /\u{0}".into(),
        ),
        ("serviceloadbalancer/lb.aclMatch", "/".into()),
        ("serviceloadbalancer/lb.aclMatch", format!("/{long}")),
        (
            "serviceloadbalancer/lb.algorithm",
            "roundrobin\nbalance first".into(),
        ),
        ("serviceloadbalancer/lb.algorithm", "' OR 1=1".into()),
        ("serviceloadbalancer/lb.maxconn", "-1".into()),
        (
            "serviceloadbalancer/lb.maxconn",
            "99999999999999999999999".into(),
        ),
        (
            "serviceloadbalancer/lb.cookie-sticky-session",
            "yes please".into(),
        ),
        ("serviceloadbalancer/lb.sslTerm", "\"true\"".into()),
        ("serviceloadbalancer/lb.check-interval", "-5s".into()),
        ("serviceloadbalancer/lb.check-interval", "1e400s".into()),
        (
            "serviceloadbalancer/lb.check-path",
            "http://evil/\r\nx".into(),
        ),
    ];
    let mut objs = Vec::new();
    for (i, (k, v)) in values.into_iter().enumerate() {
        let name = format!("hostile-{i}");
        objs.push(svc(&name, 80).ann(k, &v).into());
        objs.push(slice(&name, "", 9));
    }
    // Malformed objects next to them.
    objs.push(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "no-spec"}}));
    objs.push(
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "bad-ports"},
        "spec": {"ports": [{"port": -80}, {"port": 70000}, {"port": 0}]}}),
    );
    objs.push(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "x".repeat(300), "namespace": "../etc"},
        "spec": {"ports": [{"port": 80}]}}));
    objs
}

#[tokio::test]
async fn hostile_manifests_warn_and_leave_the_good_service_alone() {
    let backend = Backend::start("good").await;
    let good = vec![
        svc("good", 80).host("good.test").into(),
        slice("good", "", backend.port),
    ];
    let dry = |objs: &[Value]| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.yaml");
        std::fs::write(&path, multi_doc(objs)).unwrap();
        let out = run_to_exit(&["--manifests", path.to_str().unwrap(), "--dry-run"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let table: Value = serde_json::from_slice(&out.stdout).unwrap();
        (table, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (alone, _) = dry(&good);
    let mut all = hostile_services();
    all.extend(good.iter().cloned());
    let (mixed, warnings) = dry(&all);
    assert!(!warnings.contains("panicked"), "{warnings}");
    assert!(warnings.matches("warning").count() >= 15, "{warnings}");
    // The good Service's entry and its routes are the same as when it is alone.
    // (`hostile-1` claims the same host: the conflict goes to `good`, the lower name.)
    let good_part = |t: &Value| {
        (
            t["entries"]["good"].clone(),
            t["http"]["hosts"]["good.test"].clone(),
        )
    };
    assert!(good_part(&alone).0.is_object(), "{alone}");
    assert_eq!(good_part(&alone), good_part(&mixed), "{warnings}");
    // Live: the process serves the good host while the hostile objects are loaded.
    let sy = switchyard(all).start().await;
    let r = sy.get_host("good.test", "/anything").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.backend().as_deref(), Some("good"));
    assert!(!sy.stderr().contains("panicked"));
}

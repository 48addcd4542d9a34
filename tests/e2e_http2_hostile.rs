//! Hostile HTTP/2 clients against a real switchyard process on 127.0.0.1, on both engines (the
//! fast path serves HTTP/2 connections on its own; `--fast-path=false` leaves them to Pingora's
//! loop): rapid reset (CVE-2023-44487), a CONTINUATION flood (CVE-2024-27316 and kin), a
//! SETTINGS flood, more streams than the connection allows, and requests Pingora's checks
//! refuse. The frames are written by hand (h2c with prior knowledge on the HTTP port) so that a
//! client can do what no library client would. Each case checks that the attack is bounded and
//! that another client is still served meanwhile. Every loop is bounded in count and time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;
use switchyard::data::wire::hpack::Decoder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const GOAWAY: u8 = 7;
const CONTINUATION: u8 = 9;
const END_STREAM: u8 = 1;
const END_HEADERS: u8 = 4;
const CANCEL: u32 = 8;
const REFUSED_STREAM: u32 = 7;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// HPACK for `GET http://h2.test<path>`: indexed `:method GET` and `:scheme http`, literal
/// `:path` and `:authority` with indexed names, no Huffman coding.
fn get_block(path: &str) -> Vec<u8> {
    let mut b = vec![0x82, 0x86, 0x04, path.len() as u8];
    b.extend_from_slice(path.as_bytes());
    b.extend_from_slice(&[0x01, 7]);
    b.extend_from_slice(b"h2.test");
    b
}

/// A literal header field (new name, without indexing) of `n` value bytes (n < 127).
fn junk_field(n: usize) -> Vec<u8> {
    let mut b = vec![0x00, 5];
    b.extend_from_slice(b"x-pad");
    b.push(n as u8);
    b.extend(std::iter::repeat_n(b'a', n));
    b
}

/// What the server sent on a connection, read until it closed or `within` ran out.
#[derive(Debug, Default)]
struct Heard {
    goaway: Option<u32>,
    resets: Vec<(u32, u32)>,
    /// Streams that got a response header.
    responses: usize,
    /// Each response header's stream and `:status`.
    answers: Vec<(u32, String)>,
    /// The server's `SETTINGS_MAX_CONCURRENT_STREAMS`, if it sent one.
    max_streams: Option<u32>,
    closed: bool,
}

/// Reads frames off `r` until the connection closes, a GOAWAY came, or `within` passed.
async fn listen(mut r: tokio::net::tcp::OwnedReadHalf, within: Duration) -> Heard {
    let mut heard = Heard::default();
    // The server's blocks may name what its earlier ones entered in the table (`h2` enters a
    // `:status` the static table lacks).
    let mut decoder = Decoder::new(4096);
    let mut buf = Vec::new();
    let end = Instant::now() + within;
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        while buf.len() >= 9 {
            let len = (buf[0] as usize) << 16 | (buf[1] as usize) << 8 | buf[2] as usize;
            if buf.len() < 9 + len {
                break;
            }
            let (kind, stream) = (buf[3], u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]));
            let p = &buf[9..9 + len];
            match kind {
                HEADERS => {
                    heard.responses += 1;
                    // Whole in one frame: the answers here are a few fields.
                    assert_ne!(
                        buf[4] & END_HEADERS,
                        0,
                        "a response header in CONTINUATIONs"
                    );
                    let mut status = String::new();
                    let block = bytes::Bytes::copy_from_slice(p);
                    decoder
                        .decode(&block, |f| {
                            if f.name == ":status" {
                                status = String::from_utf8_lossy(&f.value).into_owned();
                            }
                        })
                        .expect("the server's header block decodes");
                    heard.answers.push((stream, status));
                }
                RST_STREAM if len >= 4 => {
                    heard
                        .resets
                        .push((stream, u32::from_be_bytes([p[0], p[1], p[2], p[3]])));
                }
                SETTINGS => {
                    for s in p.chunks_exact(6) {
                        if u16::from_be_bytes([s[0], s[1]]) == 3 {
                            heard.max_streams = Some(u32::from_be_bytes([s[2], s[3], s[4], s[5]]));
                        }
                    }
                }
                GOAWAY if len >= 8 => {
                    heard.goaway = Some(u32::from_be_bytes([p[4], p[5], p[6], p[7]]));
                }
                _ => {}
            }
            buf.drain(..9 + len);
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() || heard.goaway.is_some() {
            return heard;
        }
        match tokio::time::timeout(left, r.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                heard.closed = true;
                return heard;
            }
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Err(_) => return heard,
        }
    }
}

/// An h2c connection with the preface and an empty SETTINGS written.
async fn open(port: u16) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut hello = PREFACE.to_vec();
    hello.extend(frame(SETTINGS, 0, 0, &[]));
    s.write_all(&hello).await.unwrap();
    s
}

/// A well-behaved HTTP/2 client's `GET`: its status, within 5 s.
async fn polite_get(port: u16) -> Result<u16, String> {
    let stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = http::Request::get("http://h2.test/h2/fine")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    match tokio::time::timeout(Duration::from_secs(5), sender.send_request(req)).await {
        Ok(Ok(resp)) => Ok(resp.status().as_u16()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timeout".into()),
    }
}

const ENGINES: [&[&str]; 2] = [&[], &["--fast-path", "false"]];

fn world(backend: &Backend) -> Vec<Value> {
    vec![svc("h2", 80).into(), slice("h2", "", backend.port)]
}

/// Rapid reset: a client opens 1,000 streams and resets each soon after. HTTP/2 counts a reset
/// stream as closed, so its limit of 100 open streams does not hold the work back; switchyard
/// must, or every reset stream becomes a backend request held open. With a backend that takes
/// 3 s to answer, the requests in flight to it (`switchyard_endpoint_in_flight`, sampled
/// throughout) stay within 200 of one connection: the fast path refuses streams past that
/// (`REFUSED_STREAM`) while it waits for the backend; Pingora's path gives a reset stream's
/// request up. A polite client is served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_reset_is_bounded_and_others_are_served() {
    for engine in ENGINES {
        let slow = Backend::builder("slow")
            .behaviour(Behaviour::Plain)
            .delay(Duration::from_secs(3))
            .start()
            .await;
        let sy = switchyard(world(&slow)).args(engine).start().await;
        let admin = sy.admin_port;
        let sampler = tokio::spawn(async move {
            let mut most = 0u64;
            let end = Instant::now() + Duration::from_millis(3500);
            while Instant::now() < end {
                let text = get(admin, "/metrics", &[]).await.body;
                let now: u64 = text
                    .lines()
                    .filter(|l| l.starts_with("switchyard_endpoint_in_flight{"))
                    .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                    .map(|v| v as u64)
                    .sum();
                most = most.max(now);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            most
        });
        let (r, mut w) = open(sy.http_port).await.into_split();
        let heard = tokio::spawn(listen(r, Duration::from_secs(4)));
        // In rounds of 50: the streams are opened, left long enough to be accepted (a reset
        // before that is h2's own business: too many and it ends the connection), then reset.
        'rounds: for round in 0..20u32 {
            let ids: Vec<u32> = (0..50).map(|i| 2 * (round * 50 + i) + 1).collect();
            let opened: Vec<u8> = ids
                .iter()
                .flat_map(|&id| frame(HEADERS, END_STREAM | END_HEADERS, id, &get_block("/h2/r")))
                .collect();
            let reset: Vec<u8> = ids
                .iter()
                .flat_map(|&id| frame(RST_STREAM, 0, id, &CANCEL.to_be_bytes()))
                .collect();
            for bytes in [opened, reset] {
                if w.write_all(&bytes).await.is_err() {
                    break 'rounds;
                }
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let polite = polite_get(sy.http_port).await;
        let heard = heard.await.unwrap();
        let most = sampler.await.unwrap();
        assert!(
            most > 0 && most <= 201,
            "{engine:?}: {most} requests in flight to the backend at once"
        );
        assert_eq!(polite, Ok(200), "{engine:?}: {heard:?}");
        if engine.is_empty() {
            let refused = heard.resets.iter().any(|&(_, r)| r == REFUSED_STREAM);
            assert!(
                refused || heard.goaway.is_some() || heard.closed,
                "{engine:?}: the attacker was neither refused nor cut off: {heard:?}"
            );
        }
    }
}

/// CONTINUATION flood: a header block that never ends, 16 KiB at a time. The connection is
/// closed once the block passes the header-list limit (64 KiB), long before the 32 MiB the
/// client would send, and a polite client is served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continuation_flood_is_cut_off() {
    let backend = Backend::start("h2").await;
    for engine in ENGINES {
        let sy = switchyard(world(&backend)).args(engine).start().await;
        let (r, mut w) = open(sy.http_port).await.into_split();
        let heard = tokio::spawn(listen(r, Duration::from_secs(10)));
        let mut block = get_block("/h2/c");
        block.extend(junk_field(100));
        w.write_all(&frame(HEADERS, END_STREAM, 1, &block))
            .await
            .unwrap();
        let piece: Vec<u8> = (0..160).flat_map(|_| junk_field(100)).collect();
        let cont = frame(CONTINUATION, 0, 1, &piece);
        let mut sent = 0usize;
        let started = Instant::now();
        while sent < 32 << 20 && started.elapsed() < Duration::from_secs(10) {
            match tokio::time::timeout(Duration::from_secs(2), w.write_all(&cont)).await {
                Ok(Ok(())) => sent += cont.len(),
                _ => break,
            }
        }
        let heard = heard.await.unwrap();
        assert!(
            heard.goaway.is_some() || heard.closed,
            "{engine:?}: still open after {sent} bytes: {heard:?}"
        );
        assert!(sent < 32 << 20, "{engine:?}: the whole flood was read");
        assert_eq!(heard.responses, 0, "{engine:?}");
        assert_eq!(polite_get(sy.http_port).await, Ok(200), "{engine:?}");
    }
}

/// SETTINGS flood: up to 200,000 SETTINGS frames (3 MB) from a client that never reads the
/// acknowledgements. RSS grows by less than 32 MiB over the flood (a server keeping 170 bytes
/// or more per unacknowledged frame would fail this; the `h2` crate holds one pending
/// acknowledgement and reads no further until it is written), and a polite client is served
/// meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settings_flood_costs_no_memory() {
    let backend = Backend::start("h2").await;
    for engine in ENGINES {
        let sy = switchyard(world(&backend)).args(engine).start().await;
        let before = rss_kib(sy.child.id());
        let mut s = open(sy.http_port).await;
        let one = frame(SETTINGS, 0, 0, &[0, 4, 0, 1, 0, 0]);
        let batch: Vec<u8> = (0..1000).flat_map(|_| one.clone()).collect();
        let started = Instant::now();
        let mut sent = 0;
        while sent < 200 && started.elapsed() < Duration::from_secs(10) {
            match tokio::time::timeout(Duration::from_secs(1), s.write_all(&batch)).await {
                Ok(Ok(())) => sent += 1,
                _ => break,
            }
        }
        assert_eq!(polite_get(sy.http_port).await, Ok(200), "{engine:?}");
        let after = rss_kib(sy.child.id());
        assert!(
            after < before + 32 * 1024,
            "{engine:?}: RSS grew from {before} KiB to {after} KiB over {sent}k SETTINGS"
        );
        drop(s);
    }
}

/// More streams than the connection allows: switchyard announces 100 concurrent streams and
/// refuses the ones past it, so a client opening 150 against a slow backend gets at most 100
/// to the backend and REFUSED_STREAM for the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_past_the_limit_are_refused() {
    for engine in ENGINES {
        let slow = Backend::builder("slow")
            .behaviour(Behaviour::Plain)
            .delay(Duration::from_secs(2))
            .start()
            .await;
        let sy = switchyard(world(&slow)).args(engine).start().await;
        let (r, mut w) = open(sy.http_port).await.into_split();
        let heard = tokio::spawn(listen(r, Duration::from_secs(4)));
        let mut all = Vec::new();
        for i in 0..150u32 {
            all.extend(frame(
                HEADERS,
                END_STREAM | END_HEADERS,
                2 * i + 1,
                &get_block("/h2/s"),
            ));
        }
        w.write_all(&all).await.unwrap();
        let heard = heard.await.unwrap();
        assert_eq!(heard.max_streams, Some(100), "{engine:?}");
        let refused = heard
            .resets
            .iter()
            .filter(|&&(_, r)| r == REFUSED_STREAM)
            .count();
        assert!(slow.count() <= 100, "{engine:?}: {}", slow.count());
        assert!(refused >= 50, "{engine:?}: {heard:?}");
        assert_eq!(heard.responses, 100, "{engine:?}: {heard:?}");
        drop(w);
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// A literal field with a new name, without indexing, no Huffman coding (short name and value).
fn field(name: &str, value: &str) -> Vec<u8> {
    let mut b = vec![0x00, name.len() as u8];
    b.extend_from_slice(name.as_bytes());
    b.push(value.len() as u8);
    b.extend_from_slice(value.as_bytes());
    b
}

/// Requests Pingora refuses before serving them (`check_h2_request`, and `h2`'s own checks)
/// are refused the same way by the fast path's own connection, which serves streams before
/// Pingora sees them: a target with a space and a request without `:path` reset
/// (`PROTOCOL_ERROR`), two different `content-length`s reset, a `host` other than the
/// `:authority` answered 400, a header list past 64 KiB answered 431 (and reset if its body
/// was to come); a good request on the same connection is answered 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_refused_alike_by_both_engines() {
    let backend = Backend::start("h2").await;
    let mut heard_by_engine = Vec::new();
    for engine in ENGINES {
        let sy = switchyard(world(&backend)).args(engine).start().await;
        let (r, mut w) = open(sy.http_port).await.into_split();
        let heard = tokio::spawn(listen(r, Duration::from_secs(3)));
        let open_end = END_STREAM | END_HEADERS;
        let mut wire = frame(HEADERS, open_end, 1, &get_block("/h2/a b"));
        let mut lengths = get_block("/h2/l");
        lengths.extend(field("content-length", "3"));
        lengths.extend(field("content-length", "4"));
        wire.extend(frame(HEADERS, END_HEADERS, 3, &lengths));
        let mut host = get_block("/h2/h");
        host.extend(field("host", "other.test"));
        wire.extend(frame(HEADERS, open_end, 5, &host));
        // `:method GET`, `:scheme http`, `:authority h2.test`: no `:path`.
        let mut pathless = vec![0x82, 0x86, 0x01, 7];
        pathless.extend_from_slice(b"h2.test");
        wire.extend(frame(HEADERS, open_end, 7, &pathless));
        // A 4 KB field entered in the table, then named 17 more times by index: 18 x 4,037
        // bytes as HTTP/2 counts them, past the 65,536 both engines allow. Then the same field
        // 18 times by index, on a request whose body was to come.
        let mut big = get_block("/h2/big");
        big.extend_from_slice(&[0x40, 5]);
        big.extend_from_slice(b"x-big");
        // The value's length, 4000, on a 7-bit prefix: 127, then 3873 in 7-bit groups.
        big.extend_from_slice(&[0x7f, 0xa1, 0x1e]);
        big.extend(std::iter::repeat_n(b'v', 4000));
        big.extend([0xbe; 17]);
        wire.extend(frame(HEADERS, open_end, 9, &big));
        let mut again = get_block("/h2/big");
        again.extend([0xbe; 18]);
        wire.extend(frame(HEADERS, END_HEADERS, 11, &again));
        wire.extend(frame(HEADERS, open_end, 13, &get_block("/h2/fine")));
        w.write_all(&wire).await.unwrap();
        let mut heard = heard.await.unwrap();
        heard.resets.sort_unstable();
        heard.answers.sort_unstable();
        let protocol_error = 1;
        assert_eq!(
            heard.resets,
            [
                (1, protocol_error),
                (3, protocol_error),
                (7, protocol_error),
                (11, protocol_error)
            ],
            "{engine:?}: {heard:?}"
        );
        assert_eq!(
            heard.answers,
            [(5, "400"), (9, "431"), (11, "431"), (13, "200")].map(|(s, a)| (s, a.into())),
            "{engine:?}: {heard:?}"
        );
        assert_eq!(heard.goaway, None, "{engine:?}");
        heard_by_engine.push((heard.resets, heard.answers));
        drop(w);
    }
    assert_eq!(heard_by_engine[0], heard_by_engine[1], "the engines agree");
}

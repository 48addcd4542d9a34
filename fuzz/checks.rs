//! The invariants of the HTTP/1 fast path's wire code, written once and used twice: by the
//! cargo-fuzz targets in `fuzz/fuzz_targets/` (`http_request`, `http_response`, `chunked`,
//! `http1_differential`) and by `tests/fuzz_corpus.rs`, which replays `fuzz/corpus/<target>/`
//! through them in `cargo test`. Each `check_*` takes the fuzzer's bytes and panics on a
//! violation. `check_pingora_trailers` checks Pingora's HTTP/1 body reader instead (the copy in
//! `vendor/`, where switchyard added trailers); `check_hpack` the HPACK decoder and encoder
//! (`switchyard::data::wire::hpack`); `check_h2_client` the fast path's HTTP/2 connection to a
//! backend, reading what a backend sends (`switchyard::data::wire::h2::conn`), and
//! `check_h2_server` the same connection's server role, reading what a client sends. Only
//! `switchyard`, `pingora`, `tokio`, `http`, `httparse`, `bytes` and `std` are used, each a
//! dependency of both crates, so this file compiles in both.
//!
//! Input layout: the first byte holds flags (which frontend, client IP, stickiness, …), the
//! rest is the wire data. An empty input checks nothing.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::Range;

use switchyard::data::wire::h1::chunked::Chunks;
use switchyard::data::wire::h1::request::{Field, MAX_REQUEST_HEADERS, Parse, Request};
use switchyard::data::wire::h1::request::{build_request, parse_request};
use switchyard::data::wire::h1::response::{Framing, Head, MAX_RESPONSE_HEADERS, response_head};
use switchyard::data::wire::h2::conn as h2_conn;
use switchyard::data::wire::hpack::{Decoder, Encoder, huffman};
use switchyard::decide::edits::{
    ASSERTED, ClientCert, Forwarding, Hidden, StickyCookie, request_edits, response_edits,
};
use switchyard::decide::target::valid_host;
use switchyard::table::sticky::{COOKIE_NAME, find_cookie, strip_cookie};

/// The verified client certificate's subject, when the flags ask for one.
const SUBJECT: &str = "CN=fuzz client,O=Example";

/// A header as httparse sees it: name and value, owned.
type Header = (String, Vec<u8>);

fn is(name: &str, want: &str) -> bool {
    name.eq_ignore_ascii_case(want)
}

fn values<'a>(headers: &'a [Header], name: &str) -> Vec<&'a [u8]> {
    headers
        .iter()
        .filter(|(n, _)| is(n, name))
        .map(|(_, v)| v.as_slice())
        .collect()
}

fn owned(headers: &[httparse::Header<'_>]) -> Vec<Header> {
    headers
        .iter()
        .map(|h| (h.name.to_owned(), h.value.to_vec()))
        .collect()
}

fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every line feed is part of a CRLF.
fn crlf_only(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .enumerate()
        .all(|(i, &b)| b != b'\n' || (i > 0 && bytes[i - 1] == b'\r'))
}

// ---------------------------------------------------------------------------------------------
// Requests

/// What the flags byte says about the frontend and the client.
struct Client {
    fwd: Forwarding,
    ip: Option<IpAddr>,
    sticky: bool,
    verified: bool,
    /// switchyard's basic authentication admitted the request: its `Authorization` is not
    /// forwarded.
    authenticated: bool,
}

fn client(flags: u8) -> Client {
    let fwd = if flags & 2 != 0 {
        Forwarding::tls(Some(15_768_000), flags & 4 != 0)
    } else {
        Forwarding::plain()
    };
    let ip = match (flags >> 4) & 3 {
        0 => None,
        1 => Some(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7))),
        2 => Some(IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1))),
        _ => Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
    };
    Client {
        fwd,
        ip,
        sticky: flags & 1 != 0,
        verified: flags & 8 != 0,
        authenticated: flags & 64 != 0,
    }
}

/// A request head as httparse reads it.
struct RefRequest {
    len: usize,
    method: String,
    path: String,
    version: u8,
    headers: Vec<Header>,
}

enum RefParse {
    Complete(RefRequest),
    Partial,
    Invalid(httparse::Error),
}

fn httparse_request(buf: &[u8], max_headers: usize) -> RefParse {
    let mut headers = vec![httparse::EMPTY_HEADER; max_headers];
    let mut r = httparse::Request::new(&mut headers);
    match r.parse(buf) {
        Ok(httparse::Status::Complete(len)) => RefParse::Complete(RefRequest {
            len,
            method: r.method.unwrap_or_default().to_owned(),
            path: r.path.unwrap_or_default().to_owned(),
            version: r.version.unwrap_or(255),
            headers: owned(r.headers),
        }),
        Ok(httparse::Status::Partial) => RefParse::Partial,
        Err(e) => RefParse::Invalid(e),
    }
}

/// `http_request`: the fast path's verdict on arbitrary bytes, and for a taken request the
/// bytes the backend gets (see `check_built`). A partial head completed in a few ways must
/// not panic either (and is checked the same way when taken).
pub fn check_request(data: &[u8]) {
    let Some((&flags, buf)) = data.split_first() else {
        return;
    };
    let mut fields = Vec::new();
    match parse_request(buf, &mut fields) {
        Parse::Declined => {}
        Parse::Request(req) => check_built(flags, buf, &req, &fields),
        Parse::Partial => {
            for tail in [
                &b"\r\n\r\n"[..],
                b"\r\n",
                b"\n\r\n",
                b"\r\nHost: example.com\r\n\r\n",
            ] {
                let mut more = buf.to_vec();
                more.extend_from_slice(tail);
                if let Parse::Request(req) = parse_request(&more, &mut fields) {
                    check_built(flags, &more, &req, &fields);
                }
            }
        }
    }
}

/// A request the fast path took, built for the backend with `request_edits`: it must parse as
/// exactly one complete request with the client's method, target and Host; framing and
/// hop-by-hop fields gone; one X-Forwarded-For ending with the client; one X-Forwarded-Proto;
/// the client-certificate fields only as switchyard asserts them; no SERVERID cookie when
/// sticky; every other field forwarded once, unchanged, in order.
fn check_built(flags: u8, buf: &[u8], req: &Request, fields: &[Field]) {
    let c = client(flags);
    let cert = if c.verified {
        ClientCert::verified(SUBJECT)
    } else {
        ClientCert::Absent
    };
    let ip_text = c.ip.map(|ip| ip.to_string());
    let hidden = Hidden {
        sticky_cookie: c.sticky,
        authorization: c.authenticated,
        forwarded_prefix: None,
        // A Gateway listener's verification asserts the same fields `--ssl-ca-cert` does
        // (`fwd.client_cert_headers`), which the flags already cover.
        client_cert: false,
        ingress_cert: None,
    };
    let edits = request_edits(&c.fwd, ip_text.as_deref(), hidden, || cert);
    let mut out = Vec::new();
    build_request(&mut out, buf, req, fields, None, &edits);
    let ctx = || format!("input {:?}\noutput {:?}", show(buf), show(&out));

    assert!(req.len <= buf.len(), "len past the input: {}", ctx());
    let RefParse::Complete(input) = httparse_request(buf, MAX_REQUEST_HEADERS) else {
        panic!("taken, but httparse does not parse the input: {}", ctx());
    };
    assert_eq!(input.len, req.len, "header length: {}", ctx());
    let output = match httparse_request(&out, MAX_REQUEST_HEADERS + 16) {
        RefParse::Complete(o) => o,
        RefParse::Partial => panic!("output is partial: {}", ctx()),
        RefParse::Invalid(e) => panic!("output does not parse ({e}): {}", ctx()),
    };
    assert_eq!(
        output.len,
        out.len(),
        "output is not one request: {}",
        ctx()
    );
    assert!(crlf_only(&out), "bare LF in output: {}", ctx());
    assert!(
        out.starts_with(req.method().as_bytes()),
        "output starts with something else than its method: {}",
        ctx()
    );
    assert_eq!(output.version, 1, "{}", ctx());
    assert_eq!(output.method, input.method, "method: {}", ctx());
    assert_eq!(output.method, req.method(), "method: {}", ctx());
    assert_eq!(output.path, input.path, "target: {}", ctx());
    assert_eq!(
        output.path.as_bytes(),
        &buf[req.target.clone()],
        "{}",
        ctx()
    );

    let (inh, outh) = (&input.headers, &output.headers);
    assert_eq!(values(inh, "host"), [&buf[req.host.clone()]], "{}", ctx());
    assert_eq!(values(outh, "host"), values(inh, "host"), "host: {}", ctx());
    for gone in [
        "connection",
        "content-length",
        "transfer-encoding",
        "keep-alive",
        "proxy-connection",
        "upgrade",
        "te",
    ] {
        assert!(values(outh, gone).is_empty(), "{gone} forwarded: {}", ctx());
    }
    if let Some(ip) = c.ip {
        let xff = values(outh, "x-forwarded-for");
        let ip = ip.to_string();
        let real_ip = ip.clone();
        let want = match values(inh, "x-forwarded-for").first() {
            Some(first)
                if !first.is_empty()
                    && first
                        .iter()
                        .all(|&b| b == b'\t' || (b' '..=b'~').contains(&b)) =>
            {
                format!("{}, {ip}", show(first)).into_bytes()
            }
            _ => ip.into_bytes(),
        };
        assert_eq!(xff, [want.as_slice()], "x-forwarded-for: {}", ctx());
        assert_eq!(
            values(outh, "x-real-ip"),
            [real_ip.as_bytes()],
            "x-real-ip: {}",
            ctx()
        );
    } else {
        assert!(
            values(outh, "x-real-ip").is_empty(),
            "client's x-real-ip forwarded: {}",
            ctx()
        );
    }
    assert_eq!(
        values(outh, "x-forwarded-proto"),
        [c.fwd.scheme.as_bytes()],
        "x-forwarded-proto: {}",
        ctx()
    );
    let (verify, dn) = (values(outh, "x-client-verify"), values(outh, "x-client-dn"));
    if c.fwd.client_cert_headers && c.verified {
        assert_eq!(verify, [&b"SUCCESS"[..]], "{}", ctx());
        assert_eq!(dn, [SUBJECT.as_bytes()], "{}", ctx());
    } else if c.fwd.client_cert_headers {
        assert_eq!(verify, [&b"NONE"[..]], "{}", ctx());
        assert!(dn.is_empty(), "client's x-client-dn forwarded: {}", ctx());
    } else {
        assert!(
            verify.is_empty(),
            "client's x-client-verify forwarded: {}",
            ctx()
        );
        assert!(dn.is_empty(), "client's x-client-dn forwarded: {}", ctx());
    }
    if c.sticky {
        let mut want: Vec<Vec<u8>> = Vec::new();
        for v in values(inh, "cookie") {
            if find_cookie(v, COOKIE_NAME).is_none() {
                want.push(v.to_vec());
            } else if let Some(kept) = strip_cookie(v, COOKIE_NAME) {
                want.push(kept);
            }
        }
        let mut got: Vec<Vec<u8>> = values(outh, "cookie").iter().map(|v| v.to_vec()).collect();
        for v in &got {
            assert!(
                find_cookie(v, COOKIE_NAME).is_none(),
                "SERVERID forwarded: {}",
                ctx()
            );
        }
        want.sort();
        got.sort();
        assert_eq!(got, want, "cookies: {}", ctx());
    }
    // Every field no edit touches: forwarded exactly once, unchanged, in order.
    let edited = |n: &str| {
        is(n, "connection")
            || ASSERTED.iter().any(|e| is(n, e))
            || (c.ip.is_some() && is(n, "x-forwarded-for"))
            || (c.sticky && is(n, "cookie"))
            || (c.authenticated && is(n, "authorization"))
    };
    if c.authenticated {
        assert!(
            !outh.iter().any(|(n, _)| is(n, "authorization")),
            "authorization forwarded: {}",
            ctx()
        );
    }
    let kept_in: Vec<&Header> = inh.iter().filter(|(n, _)| !edited(n)).collect();
    let kept_out: Vec<&Header> = outh.iter().filter(|(n, _)| !edited(n)).collect();
    assert_eq!(kept_out, kept_in, "forwarded fields: {}", ctx());
}

/// What the fast path must make of a request head, worked out from httparse's view alone
/// (method, target and fields) and the fast path's documented policy.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Partial,
    Declined,
    Take {
        len: usize,
        head: bool,
        target: Range<usize>,
        host: Range<usize>,
        close: bool,
    },
}

fn reference_request(buf: &[u8]) -> Verdict {
    // Generous: the field limit is a policy applied below, not a parse error.
    let mut headers = vec![httparse::EMPTY_HEADER; 4 * MAX_REQUEST_HEADERS];
    let mut r = httparse::Request::new(&mut headers);
    let len = match r.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Verdict::Partial,
        Err(_) => return Verdict::Declined,
    };
    let (Some(method), Some(path), Some(1)) = (r.method, r.path, r.version) else {
        return Verdict::Declined;
    };
    let head = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Verdict::Declined,
    };
    let target_ok = path.starts_with('/')
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~:/?[]@!$&'()*+,;=%".contains(&b))
        // Paths with dot-segments are normalised on Pingora's path, never taken here.
        && !path
            .split('?')
            .next()
            .unwrap_or("")
            .split('/')
            .any(|seg| {
                let decoded = seg.to_ascii_lowercase().replace("%2e", ".");
                decoded == "." || decoded == ".."
            });
    if !target_ok || !crlf_only(&buf[..len]) || r.headers.len() > MAX_REQUEST_HEADERS {
        return Verdict::Declined;
    }
    let offset = |s: &[u8]| s.as_ptr() as usize - buf.as_ptr() as usize;
    let mut hosts = Vec::new();
    let mut close = false;
    for h in r.headers.iter() {
        let n = h.name;
        let framing_or_protocol = [
            "content-length",
            "transfer-encoding",
            "te",
            "upgrade",
            "expect",
            "keep-alive",
            "proxy-connection",
            "http2-settings",
        ];
        if framing_or_protocol.iter().any(|f| is(n, f)) {
            return Verdict::Declined;
        }
        if is(n, "host") {
            hosts.push(offset(h.value)..offset(h.value) + h.value.len());
        }
        if is(n, "connection") {
            match h.value.trim_ascii().to_ascii_lowercase().as_slice() {
                b"close" => close = true,
                b"keep-alive" => {}
                _ => return Verdict::Declined,
            }
        }
    }
    match hosts.as_slice() {
        [host] if valid_host(&buf[host.clone()]) => Verdict::Take {
            len,
            head,
            target: offset(path.as_bytes())..offset(path.as_bytes()) + path.len(),
            host: host.clone(),
            close,
        },
        _ => Verdict::Declined,
    }
}

/// The request half of `http1_differential`: the fast path's verdict equals the one worked
/// out from httparse's view; a taken request's fields are httparse's fields (each line once,
/// whole), and the request built from it passes `check_built`.
fn differential_request(flags: u8, buf: &[u8]) {
    let mut fields = Vec::new();
    let fast = parse_request(buf, &mut fields);
    let reference = reference_request(buf);
    let ctx = || format!("input {:?}", show(buf));
    match (&fast, &reference) {
        (Parse::Partial, Verdict::Partial) | (Parse::Declined, Verdict::Declined) => {}
        // The fast path's field limit: more than MAX_REQUEST_HEADERS fields are declined
        // before the head is complete.
        (Parse::Declined, Verdict::Partial) => assert!(
            matches!(
                httparse_request(buf, MAX_REQUEST_HEADERS),
                RefParse::Invalid(httparse::Error::TooManyHeaders)
            ),
            "declined a partial head httparse reads: {}",
            ctx()
        ),
        (
            Parse::Request(req),
            Verdict::Take {
                len,
                head,
                target,
                host,
                close,
            },
        ) => {
            assert_eq!(
                (req.len, req.head, &req.target, &req.host, req.close),
                (*len, *head, target, host, *close),
                "{}",
                ctx()
            );
            let RefParse::Complete(r) = httparse_request(buf, MAX_REQUEST_HEADERS) else {
                panic!("taken, but httparse does not parse it: {}", ctx());
            };
            assert_eq!(fields.len(), r.headers.len(), "fields: {}", ctx());
            let mut next_line = None;
            for (f, (name, value)) in fields.iter().zip(&r.headers) {
                assert_eq!(&buf[f.name.clone()], name.as_bytes(), "{}", ctx());
                assert_eq!(&buf[f.value.clone()], value.as_slice(), "{}", ctx());
                let line = &buf[f.line.clone()];
                assert!(line.starts_with(name.as_bytes()), "{}", ctx());
                assert!(line.ends_with(b"\r\n"), "{}", ctx());
                assert_eq!(f.hop, is(name, "connection"), "{}", ctx());
                // Lines are contiguous and end at the blank line.
                if let Some(at) = next_line {
                    assert_eq!(f.line.start, at, "field lines not contiguous: {}", ctx());
                }
                next_line = Some(f.line.end);
            }
            if let Some(end) = next_line {
                assert_eq!(&buf[end..req.len], b"\r\n", "{}", ctx());
            }
            check_built(flags, buf, req, &fields);
        }
        _ => panic!("fast path {fast:?}, reference {reference:?}: {}", ctx()),
    }
}

// ---------------------------------------------------------------------------------------------
// Responses

/// `http_response`: a backend's response head through `response_head`. Flags: bit 0 a HEAD
/// request, bit 1 the client connection closes, bit 2 a stickiness cookie to set (its id in
/// the high bits), bit 3 the TLS frontend (HSTS). On a final head, the client's version parses
/// as one complete response with the same status, its framing restated exactly once and
/// consistently; `len` is httparse's own length of the input; 1xx (not 101) only as
/// informational.
pub fn check_response(data: &[u8]) {
    let Some((&flags, buf)) = data.split_first() else {
        return;
    };
    let head_request = flags & 1 != 0;
    let close = flags & 2 != 0;
    let set_cookie = (flags & 4 != 0).then_some(StickyCookie {
        id: u64::from(flags >> 4),
        affinity: None,
    });
    let fwd = if flags & 8 != 0 {
        Forwarding::tls(Some(600), false)
    } else {
        Forwarding::plain()
    };
    let edits = response_edits(&fwd, set_cookie);
    let mut out = Vec::new();
    let verdict = response_head(buf, head_request, close, &edits, &mut out);
    let ctx = || format!("input {:?}\noutput {:?}", show(buf), show(&out));

    let mut headers = vec![httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
    let mut reference = httparse::Response::new(&mut headers);
    let parsed = reference.parse(buf);
    let ref_headers = owned(reference.headers);
    match verdict {
        Head::Partial => assert!(
            matches!(parsed, Ok(httparse::Status::Partial)),
            "partial, httparse says {parsed:?}: {}",
            ctx()
        ),
        Head::Invalid => {}
        Head::Informational(len) => {
            assert_eq!(parsed, Ok(httparse::Status::Complete(len)), "{}", ctx());
            let code = reference.code.unwrap_or(0);
            assert!((100..200).contains(&code) && code != 101, "{}", ctx());
        }
        Head::Final(head) => {
            assert!(head.len <= buf.len(), "{}", ctx());
            assert_eq!(
                parsed,
                Ok(httparse::Status::Complete(head.len)),
                "{}",
                ctx()
            );
            assert_eq!(reference.code, Some(head.status), "{}", ctx());
            assert!((200..=599).contains(&head.status), "{}", ctx());

            let mut out_headers = vec![httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS + 16];
            let mut o = httparse::Response::new(&mut out_headers);
            let n = match o.parse(&out) {
                Ok(httparse::Status::Complete(n)) => n,
                other => panic!("output parses as {other:?}: {}", ctx()),
            };
            assert_eq!(n, out.len(), "output is not one head: {}", ctx());
            assert!(crlf_only(&out), "bare LF in output: {}", ctx());
            assert_eq!(
                (o.version, o.code),
                (Some(1), Some(head.status)),
                "{}",
                ctx()
            );
            let oh = owned(o.headers);

            let lengths = values(&oh, "content-length");
            assert!(lengths.len() <= 1, "content-length twice: {}", ctx());
            let codings = values(&oh, "transfer-encoding");
            let restated_chunked = matches!(head.framing, Framing::Chunked | Framing::UntilClose);
            if restated_chunked {
                assert_eq!(codings, [&b"chunked"[..]], "{}", ctx());
                assert!(lengths.is_empty(), "length beside chunked: {}", ctx());
            } else {
                assert!(codings.is_empty(), "transfer-encoding forwarded: {}", ctx());
            }
            match head.framing {
                Framing::Length(len) => {
                    let stated: Vec<Option<u64>> = lengths.iter().map(|v| decimal(v)).collect();
                    assert_eq!(stated, [Some(len)], "content-length: {}", ctx());
                }
                Framing::Empty => {
                    let no_body = head_request || head.status == 204 || head.status == 304;
                    assert!(no_body, "empty framing for a body: {}", ctx());
                    assert!(lengths.iter().all(|v| decimal(v).is_some()), "{}", ctx());
                }
                Framing::Chunked => {
                    let chunked = values(&ref_headers, "transfer-encoding");
                    assert_eq!(chunked.len(), 1, "{}", ctx());
                    assert!(
                        chunked[0].trim_ascii().eq_ignore_ascii_case(b"chunked"),
                        "{}",
                        ctx()
                    );
                }
                Framing::UntilClose => assert!(!head.reusable, "{}", ctx()),
            }
            for gone in ["keep-alive", "proxy-connection"] {
                assert!(values(&oh, gone).is_empty(), "{gone} forwarded: {}", ctx());
            }
            let connection = values(&oh, "connection");
            if close {
                assert_eq!(connection, [&b"close"[..]], "{}", ctx());
            } else {
                assert!(connection.is_empty(), "connection forwarded: {}", ctx());
            }
            assert!(!values(&oh, "date").is_empty(), "no date: {}", ctx());
            if let Some(id) = set_cookie {
                let theirs = values(&ref_headers, "set-cookie").len();
                assert_eq!(values(&oh, "set-cookie").len(), theirs + 1, "{}", ctx());
                let cc = values(&oh, "cache-control");
                assert_eq!(cc.len(), 1, "cache-control: {}", ctx());
                assert!(
                    cc[0].ends_with(b"no-cache=\"set-cookie\""),
                    "{id:?}: {}",
                    ctx()
                );
            }
            if fwd.hsts.is_some() {
                assert!(
                    !values(&oh, "strict-transport-security").is_empty(),
                    "{}",
                    ctx()
                );
            }
        }
    }
}

/// A Content-Length value: decimal digits only (surrounding whitespace aside), no overflow.
fn decimal(v: &[u8]) -> Option<u64> {
    let v = v.trim_ascii();
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    v.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

// ---------------------------------------------------------------------------------------------
// Chunked bodies

/// Feeds `pieces` in order: `Ok(Some(end))` as an offset into their concatenation.
fn feed_pieces(pieces: &[&[u8]]) -> (Result<Option<usize>, ()>, u64) {
    let mut c = Chunks::default();
    let mut total = 0;
    for p in pieces {
        match c.feed(p) {
            Ok(Some(n)) => {
                assert!(n <= p.len(), "end past the piece");
                return (Ok(Some(total + n)), c.data);
            }
            Ok(None) => total += p.len(),
            Err(_) => return (Err(()), c.data),
        }
    }
    (Ok(None), c.data)
}

/// `chunked`: the first byte is how many split points follow (`% 8`), each two bytes (an
/// offset modulo the body's length + 1); the rest is a chunked body. Fed whole or split there,
/// `Chunks` gives the same verdict, the same end and the same data count.
pub fn check_chunked(data: &[u8]) {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = usize::from(n % 8).min(rest.len() / 2);
    let (points, body) = rest.split_at(2 * n);
    let mut cuts: Vec<usize> = points
        .chunks_exact(2)
        .map(|p| usize::from(u16::from_le_bytes([p[0], p[1]])) % (body.len() + 1))
        .collect();
    cuts.sort_unstable();
    let mut pieces = Vec::new();
    let mut at = 0;
    for cut in cuts {
        pieces.push(&body[at..cut]);
        at = cut;
    }
    pieces.push(&body[at..]);
    let whole = feed_pieces(&[body]);
    let split = feed_pieces(&pieces);
    let ctx = || {
        format!(
            "body {:?} cut {:?}",
            show(body),
            pieces.iter().map(|p| p.len()).collect::<Vec<_>>()
        )
    };
    assert_eq!(whole.0, split.0, "verdict: {}", ctx());
    if whole.0.is_ok() {
        assert_eq!(whole.1, split.1, "data count: {}", ctx());
    }
    // One byte at a time, too.
    let bytes: Vec<&[u8]> = body.chunks(1).collect();
    let single = feed_pieces(&bytes);
    assert_eq!(whole.0, single.0, "verdict byte by byte: {}", ctx());
    if whole.0.is_ok() {
        assert_eq!(whole.1, single.1, "data count byte by byte: {}", ctx());
    }
}

/// What a reference decoder makes of a chunked body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    /// Ends after this many bytes, with this many data bytes.
    End {
        at: usize,
        data: u64,
    },
    Incomplete,
    Malformed,
}

/// Strict reference (RFC 9112 §7.1), built on httparse: each size line through
/// `httparse::parse_chunk_size` (which takes any bytes in an extension), CRLF after each
/// chunk's data, the trailer section through `httparse::parse_headers`. Two corrections to
/// httparse, which RFC 9112 requires: a size has at least one digit (httparse reads an empty
/// size line as 0), and a size line ends at its first LF (httparse reads on through one in an
/// extension). Only a well-formed end counts here; `Incomplete` vs `Malformed` is not
/// compared.
///
/// Also says whether the body stays within `Chunks`' two limits (allowed divergences 4 and 5
/// of `lenient_chunked`): no size line or trailer line longer than `CHUNKS_MAX_LINE`, no size
/// with more than `CHUNKS_MAX_DIGITS` digits.
fn strict_chunked(buf: &[u8]) -> (Body, bool) {
    let mut within = true;
    (strict_body(buf, &mut within), within)
}

fn strict_body(buf: &[u8], within: &mut bool) -> Body {
    let mut pos = 0;
    let mut data = 0u64;
    loop {
        let rest = &buf[pos..];
        let Some(lf) = rest.iter().position(|&b| b == b'\n') else {
            return Body::Incomplete;
        };
        let line = &rest[..=lf];
        if !rest.first().is_some_and(u8::is_ascii_hexdigit) || !line.ends_with(b"\r\n") {
            return Body::Malformed;
        }
        let size = match httparse::parse_chunk_size(line) {
            Ok(httparse::Status::Complete((n, size))) if n == line.len() => size,
            _ => return Body::Malformed,
        };
        let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
        if line.len() - 1 > CHUNKS_MAX_LINE || digits > CHUNKS_MAX_DIGITS {
            *within = false;
        }
        pos += line.len();
        if size == 0 {
            let mut trailers = [httparse::EMPTY_HEADER; 64];
            return match httparse::parse_headers(&buf[pos..], &mut trailers) {
                Ok(httparse::Status::Complete((n, _))) => {
                    let section = &buf[pos..pos + n];
                    if section
                        .split(|&b| b == b'\n')
                        .any(|l| l.len() > CHUNKS_MAX_LINE)
                    {
                        *within = false;
                    }
                    Body::End { at: pos + n, data }
                }
                Ok(httparse::Status::Partial) => Body::Incomplete,
                Err(_) => Body::Malformed,
            };
        }
        let Some(end) = usize::try_from(size).ok().and_then(|s| pos.checked_add(s)) else {
            return Body::Incomplete;
        };
        if buf.len() < end.saturating_add(2) {
            return Body::Incomplete;
        }
        if &buf[end..end + 2] != b"\r\n" {
            return Body::Malformed;
        }
        data += size;
        pos = end + 2;
    }
}

/// The longest size or trailer line `Chunks` takes (its bytes before the LF).
const CHUNKS_MAX_LINE: usize = 4096;
/// The most hex digits `Chunks` takes in a size (leading zeros count).
const CHUNKS_MAX_DIGITS: usize = 15;

/// Lenient reference: the strict grammar plus the leniencies `Chunks` has on purpose, each
/// one an **allowed divergence** from `strict_chunked`:
/// 1. a bare LF ends any line (size line, after data, trailer line, the last line): RFC 9112
///    §2.2 lets a recipient take one;
/// 2. after a size, a space, tab or `;` starts an extension that is not checked (`1 x` too;
///    httparse only takes whitespace before a `;`); no CR but the one before the LF;
/// 3. trailer lines are not checked as fields: any line not starting with CR;
/// 4. (stricter) a size has at most 15 digits, leading zeros included (httparse: 16);
/// 5. (stricter) a size or trailer line is at most 4096 bytes before its LF.
///
/// Written line by line, independently of `Chunks`' byte-at-a-time state machine, and
/// compared with it exactly: same end, same data count, and `Incomplete` vs `Malformed` too.
fn lenient_chunked(buf: &[u8]) -> Body {
    let mut pos = 0;
    let mut data = 0u64;
    // A line starting at `pos`: `Ok(Some(content))` without its LF (and a CR before it),
    // `Ok(None)` when its LF has not come yet but the part seen is fine so far.
    let line = |pos: usize, ok: &dyn Fn(&[u8]) -> bool| -> Result<Option<(Vec<u8>, usize)>, ()> {
        let rest = &buf[pos..];
        match rest.iter().position(|&b| b == b'\n') {
            Some(lf) => {
                if lf > CHUNKS_MAX_LINE {
                    return Err(());
                }
                let raw = &rest[..lf];
                let content = raw.strip_suffix(b"\r").unwrap_or(raw);
                if ok(raw) {
                    Ok(Some((content.to_vec(), lf + 1)))
                } else {
                    Err(())
                }
            }
            None => {
                if rest.len() > CHUNKS_MAX_LINE {
                    return Err(());
                }
                // The part seen so far (a CR may be its last byte, its LF yet to come).
                if ok(rest) { Ok(None) } else { Err(()) }
            }
        }
    };
    // `ok` gets a line's bytes before its LF, the CR included.
    let size_line = |raw: &[u8]| {
        let l = raw.strip_suffix(b"\r").unwrap_or(raw);
        let digits = l.iter().take_while(|b| b.is_ascii_hexdigit()).count();
        let after = &l[digits..];
        !l.contains(&b'\r')
            && digits <= CHUNKS_MAX_DIGITS
            && (digits > 0 || raw.is_empty())
            && (after.is_empty() || b" \t;".contains(&after[0]))
    };
    loop {
        let (content, n) = match line(pos, &size_line) {
            Err(()) => return Body::Malformed,
            Ok(None) => return Body::Incomplete,
            Ok(Some(l)) => l,
        };
        let digits = content.iter().take_while(|b| b.is_ascii_hexdigit()).count();
        if digits == 0 {
            return Body::Malformed;
        }
        let size = content[..digits].iter().fold(0u64, |s, &d| {
            s * 16 + u64::from((d as char).to_digit(16).unwrap_or(0))
        });
        pos += n;
        if size == 0 {
            // Trailer lines, then an empty one.
            let trailer = |raw: &[u8]| !raw.starts_with(b"\r") || raw == b"\r";
            loop {
                match line(pos, &trailer) {
                    Err(()) => return Body::Malformed,
                    Ok(None) => return Body::Incomplete,
                    Ok(Some((content, n))) => {
                        pos += n;
                        if content.is_empty() {
                            return Body::End { at: pos, data };
                        }
                    }
                }
            }
        }
        let Some(end) = usize::try_from(size).ok().and_then(|s| pos.checked_add(s)) else {
            return Body::Incomplete;
        };
        if buf.len() <= end {
            return Body::Incomplete;
        }
        pos = end;
        data += size;
        match &buf[pos..] {
            [b'\n', ..] => pos += 1,
            [b'\r', b'\n', ..] => pos += 2,
            [b'\r'] => return Body::Incomplete,
            _ => return Body::Malformed,
        }
    }
}

fn chunks_verdict(buf: &[u8]) -> Body {
    let mut c = Chunks::default();
    match c.feed(buf) {
        Ok(Some(at)) => Body::End { at, data: c.data },
        Ok(None) => Body::Incomplete,
        Err(_) => Body::Malformed,
    }
}

/// The body half of `http1_differential`.
fn differential_chunked(buf: &[u8]) {
    let chunks = chunks_verdict(buf);
    let (strict, within_limits) = strict_chunked(buf);
    let lenient = lenient_chunked(buf);
    let ctx = || format!("body {:?}", show(buf));
    // Chunks against the lenient reference: exactly.
    assert_eq!(chunks, lenient, "Chunks vs lenient reference: {}", ctx());
    // A well-formed end (strict) is found by both, at the same place with the same data —
    // but for the two deliberate limits (allowed divergences 4 and 5), where Chunks refuses.
    if let Body::End { .. } = strict {
        if within_limits {
            assert_eq!(chunks, strict, "Chunks vs strict reference: {}", ctx());
            assert_eq!(lenient, strict, "lenient vs strict reference: {}", ctx());
        } else {
            assert_eq!(chunks, Body::Malformed, "{}", ctx());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Differential

/// `http1_differential`: the same bytes (after the flags byte) as a request head, as a
/// response head and as a chunked body, each against a reference: httparse and the fast
/// path's documented policy for requests, httparse's parse length for responses, and the
/// strict and lenient reference decoders above for chunked bodies.
pub fn check_differential(data: &[u8]) {
    let Some((&flags, buf)) = data.split_first() else {
        return;
    };
    differential_request(flags, buf);
    check_response(data);
    differential_chunked(buf);
}

// === PROXY protocol ===

/// The PROXY protocol parser (`data::wire::proxy_protocol::parse`) on any bytes: no panic; a header
/// it accepts is accepted the same from exactly its own bytes; fed the way the listener reads
/// (never more than `need` bytes at a time) it asks for no byte past the header and reaches the
/// same verdict; lengths stay within the protocol's bounds; a v2 header it writes reads back.
pub fn check_proxy_protocol(data: &[u8]) {
    use switchyard::data::wire::proxy_protocol::{
        Parsed, V1_MAX, V2_MAX_BODY, V2_SIGNATURE, Version, parse, v2_header,
    };
    let whole = parse(data);
    if let Ok(Parsed::Done(h)) = &whole {
        assert!(h.len <= data.len(), "header longer than the input");
        match h.version {
            Version::V1 => assert!(h.len <= V1_MAX && data.starts_with(b"PROXY ")),
            Version::V2 => assert!(h.len <= 16 + V2_MAX_BODY && data.starts_with(&V2_SIGNATURE)),
        }
        assert_eq!(
            parse(&data[..h.len]),
            whole,
            "verdict changed without the bytes after it"
        );
    }
    // Incremental: one `need` at a time, as `read_header` reads.
    let mut have = 0;
    let incremental = loop {
        match parse(&data[..have]) {
            Ok(Parsed::Incomplete { need }) => {
                assert!(need >= 1, "asks for nothing");
                if have == data.len() {
                    break None;
                }
                have = (have + need).min(data.len());
            }
            other => break Some(other),
        }
    };
    match (incremental, &whole) {
        (Some(Ok(Parsed::Done(h))), _) => {
            assert_eq!(h.len, have, "read past the header");
            assert_eq!(Ok(Parsed::Done(h)), whole);
        }
        (Some(Err(_)), _) => assert!(whole.is_err(), "refused early, accepted whole: {whole:?}"),
        // Ran out of input: the whole input is no complete header either.
        (None, _) => assert!(!matches!(whole, Ok(Parsed::Done(_))), "missed a header"),
        (Some(Ok(Parsed::Incomplete { .. })), _) => unreachable!(),
    }
    // What switchyard writes to a backend reads back as the same client.
    if data.len() >= 12 {
        let ip = |b: &[u8]| -> IpAddr {
            if b[0] & 1 == 0 {
                IpAddr::V4(Ipv4Addr::new(b[1], b[2], b[3], b[4]))
            } else {
                IpAddr::V6(Ipv6Addr::from([b[1]; 16]))
            }
        };
        let port = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
        let source = std::net::SocketAddr::new(ip(&data[0..5]), port(&data[10..12]));
        let dest = std::net::SocketAddr::new(ip(&data[5..10]), port(&data[8..10]));
        let Ok(Parsed::Done(h)) = parse(&v2_header(source, dest)) else {
            panic!("v2_header({source}, {dest}) does not parse");
        };
        let canonical = |a: std::net::SocketAddr| (a.ip().to_canonical(), a.port());
        assert_eq!(h.source.map(canonical), Some(canonical(source)));
        assert_eq!(h.destination.map(canonical), Some(canonical(dest)));
    }
}

// === Pingora's chunked body reader with trailers ===

/// `pingora_trailers`: Pingora's HTTP/1 body reader (the vendored copy, which now keeps a
/// chunked body's trailers: vendor/README.md) reading a request. The first byte seeds the
/// sizes of the pieces the bytes arrive in; the rest is the body of a fixed chunked `POST`.
/// Read whole or piece by piece, the body must be read the same: its data, its trailers, or
/// its refusal. A field that frames a message or belongs to one connection is never among the
/// trailers. Pingora's own tests of this reader are not in the copy (vendor/README.md).
pub fn check_pingora_trailers(data: &[u8]) {
    let Some((&seed, body)) = data.split_first() else {
        return;
    };
    let mut wire = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    wire.extend_from_slice(body);
    let whole = read_chunked_request(&wire, None);
    let pieces = read_chunked_request(&wire, Some(seed));
    assert_eq!(whole, pieces, "read whole and in pieces (seed {seed})");
    if let Ok((_, Some(trailers))) = &whole {
        for (name, _) in trailers {
            let name = http::HeaderName::from_bytes(name.as_bytes()).expect("a parsed name");
            assert!(
                pingora::protocols::http::v1::is_trailer_field(&name),
                "{name} kept as a trailer"
            );
        }
    }
}

/// What Pingora's server session read of a request's body: data and trailers, or a refusal.
type BodyRead = Result<(Vec<u8>, Option<Vec<(String, Vec<u8>)>>), ()>;

/// Reads `wire` (a whole request) through Pingora's HTTP/1 server session, the bytes arriving
/// whole or, with a seed, in pieces of 1 to 16 bytes.
fn read_chunked_request(wire: &[u8], seed: Option<u8>) -> BodyRead {
    use pingora::protocols::http::v1::server::HttpSession;
    use tokio::io::AsyncWriteExt;
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let write = async move {
            let mut rest = wire;
            let mut state = seed.map(u32::from);
            while !rest.is_empty() {
                let n = match state.as_mut() {
                    None => rest.len(),
                    Some(s) => {
                        *s = s.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                        (((*s >> 16) % 16) as usize + 1).min(rest.len())
                    }
                };
                if client.write_all(&rest[..n]).await.is_err() {
                    return;
                }
                rest = &rest[n..];
                // Let the reader take this piece before the next is written.
                tokio::task::yield_now().await;
            }
            // Dropping the client ends the stream.
        };
        let read = async {
            let mut session = HttpSession::new(Box::new(server));
            session.read_request().await.map_err(drop)?;
            let mut body = Vec::new();
            while let Some(bytes) = session.read_body_bytes().await.map_err(drop)? {
                body.extend_from_slice(&bytes);
            }
            let trailers = session.request_trailers().map(|t| {
                t.iter()
                    .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
                    .collect()
            });
            Ok((body, trailers))
        };
        let ((), read) = tokio::join!(write, read);
        read
    })
}

/// HPACK: the first byte picks our table limit (0, 64, 256 or 4096 bytes), the rest is header
/// blocks parted at each 0xfe byte, decoded in turn on one connection's decoder until one is
/// refused. Decoding never panics; every block decoded, encoded again by switchyard's encoder
/// and decoded on a second connection, gives the same fields; any bytes go through the Huffman
/// code and come back.
pub fn check_hpack(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let limit = [0, 64, 256, 4096][usize::from(flags & 3)];
    let mut decoder = Decoder::new(limit);
    let mut encoder = Encoder::new();
    let mut again = Decoder::new(4096);
    for block in rest.split(|&b| b == 0xfe) {
        let mut fields = Vec::new();
        let decoded = decoder.decode(&block.to_vec().into(), |f| {
            fields.push((f.name.to_vec(), f.value.to_vec(), f.sensitive))
        });
        if decoded.is_err() {
            break;
        }
        let mut out = Vec::new();
        encoder.encode(
            fields.iter().map(|(n, v, s)| (&n[..], &v[..], *s)),
            &mut out,
        );
        let mut back = Vec::new();
        again
            .decode(&out.into(), |f| {
                back.push((f.name.to_vec(), f.value.to_vec(), f.sensitive))
            })
            .expect("an encoded block decodes");
        assert_eq!(back, fields, "{block:02x?}");
    }
    let mut coded = Vec::new();
    huffman::encode(rest, &mut coded);
    assert_eq!(coded.len(), huffman::encoded_len(rest));
    let mut decoded = Vec::new();
    huffman::decode(&coded, &mut decoded).expect("a coded string decodes");
    assert_eq!(decoded, rest);
    let _ = huffman::decode(rest, &mut Vec::new());
}

/// The fast path's HTTP/2 client connection, fed any bytes as its backend's: the first byte's
/// bits say whether a valid SETTINGS frame comes first (as it must for anything else to be
/// read), whether the request has a body, and whether a second stream is open. Nothing panics,
/// every call on a stream returns once the backend's bytes are all read and its side closed,
/// the connection's task ends, and no stream gets more body than the backend sent.
pub fn check_h2_client(data: &[u8]) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some((&flags, wire)) = data.split_first() else {
        return;
    };
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().build() else {
        return;
    };
    rt.block_on(async {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (send, conn) = h2_conn::handshake(ours, 1 << 16, 1 << 20);
        let driver = tokio::spawn(conn.run());
        let (mut from_us, mut to_us) = tokio::io::split(theirs);
        // What the connection writes is read and dropped, so that its writes never wait.
        let drain = tokio::spawn(async move {
            let mut buf = vec![0u8; 1 << 14];
            while matches!(from_us.read(&mut buf).await, Ok(n) if n > 0) {}
        });
        let request = h2_conn::RequestBlock::from(
            &http::Request::post("http://backend/svc/Method")
                .body(())
                .unwrap(),
        );
        let streams = [
            send.send_request(&request, flags & 2 == 0).await.ok(),
            if flags & 4 != 0 {
                send.send_request(&request, true).await.ok()
            } else {
                None
            },
        ];
        let backend = async move {
            if flags & 1 != 0 {
                let _ = to_us.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await;
            }
            let _ = to_us.write_all(wire).await;
            // The backend closes its side once all is written.
            let _ = to_us.shutdown().await;
            drop(to_us);
        };
        let reading = async {
            let mut body = 0usize;
            for stream in streams.iter().flatten() {
                if flags & 2 != 0 {
                    let _ = stream
                        .send_data(bytes::Bytes::from_static(b"message"), true)
                        .await;
                }
                if stream.response().await.is_ok() {
                    while let Some(Ok(chunk)) = stream.data().await {
                        body += chunk.len();
                        stream.release_capacity(chunk.len());
                    }
                    let _ = stream.trailers().await;
                }
            }
            body
        };
        let ((), body) = tokio::join!(backend, reading);
        assert!(
            body <= wire.len(),
            "{body} bytes of body from {} sent",
            wire.len()
        );
        drop(streams);
        drop(send);
        drain.abort();
        let _ = driver.await;
    });
}

/// The fast path's HTTP/2 server connection, fed any bytes as its client's: a server's bytes
/// come from anyone who can connect. The first byte's bits say whether the client's preface
/// and an empty SETTINGS frame come first (as they must for anything else to be read as
/// frames), whether a request is answered with a header, a body and trailers or with a header
/// alone, whether the server shuts down gracefully once it has taken a request, whether every
/// second request is dropped unanswered (a reset), whether the server's stream window is small
/// enough for the fuzzer's bytes to fill it, whether the client closes its side as soon as its
/// bytes are written (the requests not yet taken are then never served) or once the server has
/// nothing left to do, and whether the bytes come whole or in pieces of 1 to 16 bytes. Four
/// streams at most, so that more are refused; every request is served in a task of its own, as
/// a relay would. Nothing panics; the accept loop and every call on a stream return once the
/// client's bytes are all read and its side closed; the connection's task ends; a request taken
/// holds no field HTTP/2 forbids, and a body ended cleanly is as long as its `content-length`
/// says; the requests together get no more body than the client sent.
pub fn check_h2_server(data: &[u8]) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some((&flags, wire)) = data.split_first() else {
        return;
    };
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().build() else {
        return;
    };
    rt.block_on(async {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let settings = h2_conn::ServerSettings {
            max_streams: 4,
            stream_window: if flags & 16 != 0 { 1024 } else { 1 << 16 },
            connection_window: 1 << 20,
            max_header_list: 64 * 1024,
        };
        let (incoming, conn) = h2_conn::accept(ours, settings);
        let driver = tokio::spawn(conn.run());
        let (mut from_us, mut to_us) = tokio::io::split(theirs);
        // Bumped by whatever the server does that the client can see (bytes written, requests
        // taken, body read), so that the client can tell when it has nothing left to do.
        let progress = Arc::new(AtomicUsize::new(0));
        // What the connection writes is read and dropped, so that its writes never wait.
        let drain = tokio::spawn({
            let progress = Arc::clone(&progress);
            async move {
                let mut buf = vec![0u8; 1 << 14];
                while let Ok(n @ 1..) = from_us.read(&mut buf).await {
                    progress.fetch_add(n, Ordering::Relaxed);
                }
            }
        });
        let client = async {
            let mut bytes = Vec::with_capacity(33 + wire.len());
            if flags & 1 != 0 {
                bytes.extend_from_slice(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
                bytes.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
            }
            bytes.extend_from_slice(wire);
            let mut rest = &bytes[..];
            let mut seed = u32::from(flags);
            while !rest.is_empty() {
                let n = if flags & 64 != 0 {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    (((seed >> 16) % 16) as usize + 1).min(rest.len())
                } else {
                    rest.len()
                };
                if to_us.write_all(&rest[..n]).await.is_err() {
                    break;
                }
                rest = &rest[n..];
                if !rest.is_empty() {
                    // Let the connection read this piece before the next is written.
                    tokio::task::yield_now().await;
                }
            }
            if flags & 32 == 0 {
                // Until the server has nothing left to do: a round of yields in which nothing
                // the client can see happened.
                let mut seen = usize::MAX;
                while progress.load(Ordering::Relaxed) != seen {
                    seen = progress.load(Ordering::Relaxed);
                    for _ in 0..4 {
                        tokio::task::yield_now().await;
                    }
                }
            }
            // The client closes its side once all is written.
            let _ = to_us.shutdown().await;
            drop(to_us);
        };
        let serving = async {
            let mut served = tokio::task::JoinSet::new();
            let mut taken = 0usize;
            while let Some((request, stream)) = incoming.accept().await {
                taken += 1;
                progress.fetch_add(1, Ordering::Relaxed);
                if taken == 1 && flags & 4 != 0 {
                    incoming.graceful_shutdown();
                }
                if flags & 8 != 0 && taken.is_multiple_of(2) {
                    drop(stream);
                    continue;
                }
                let progress = Arc::clone(&progress);
                served.spawn(serve_h2_request(request, stream, flags & 2 != 0, progress));
            }
            let mut body = 0usize;
            while let Some(done) = served.join_next().await {
                match done {
                    Ok(n) => body += n,
                    Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                    Err(e) => panic!("a request's task did not finish: {e}"),
                }
            }
            body
        };
        let ((), body) = tokio::join!(client, serving);
        assert!(
            body <= wire.len(),
            "{body} bytes of body from {} sent",
            wire.len()
        );
        drop(incoming);
        drain.abort();
        let _ = driver.await;
    });
}

/// One request as `check_h2_server` serves it: its body read to the end (each piece's window
/// given back), its trailers, then the response, `full` with a body and trailers. Returns the
/// body's length.
async fn serve_h2_request(
    request: http::Request<()>,
    stream: h2_conn::Stream,
    full: bool,
    progress: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> usize {
    use std::sync::atomic::Ordering;
    assert_eq!(request.version(), http::Version::HTTP_2);
    for (name, value) in request.headers() {
        assert!(
            !matches!(
                name.as_str(),
                "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade"
            ),
            "{name} accepted"
        );
        assert!(
            name != http::header::TE || value == "trailers",
            "te: {value:?} accepted"
        );
    }
    let mut body = 0usize;
    let ended = loop {
        match stream.data().await {
            Some(Ok(chunk)) => {
                body += chunk.len();
                progress.fetch_add(1, Ordering::Relaxed);
                stream.release_capacity(chunk.len());
            }
            Some(Err(_)) => break false,
            None => break true,
        }
    };
    let length = request
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if let (true, Some(length)) = (ended, length) {
        assert_eq!(
            body as u64, length,
            "a body ended cleanly, against its content-length"
        );
    }
    let _ = stream.trailers().await;
    let mut head = http::Response::new(());
    head.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    if full {
        if stream.send_response(&head, false).is_ok() {
            let _ = stream
                .send_data(bytes::Bytes::from_static(b"message"), false)
                .await;
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
            let _ = stream.send_trailers(&trailers);
        }
    } else {
        let _ = stream.send_response(&head, true);
    }
    progress.fetch_add(1, Ordering::Relaxed);
    body
}

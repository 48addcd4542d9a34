//! What the fast path takes and what the backend gets: hand-written cases and a property over
//! generated requests (1,024 cases), all pure.

use super::*;
use crate::decide::edits::{ClientCert, Forwarding, Hidden, request_edits};

fn parse(raw: &str) -> (Parse, Vec<Field>) {
    let mut fields = Vec::new();
    let p = parse_request(raw.as_bytes(), &mut fields);
    (p, fields)
}

#[test]
fn plain_gets_are_taken_and_everything_else_declined() {
    let (p, fields) = parse("GET /a?b HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n");
    let Parse::Request(r) = p else {
        panic!("not taken")
    };
    assert_eq!((r.target.clone(), r.head, r.close), (4..8, false, false));
    assert_eq!(fields.len(), 2);
    assert!(matches!(
        parse("GET / HTTP/1.1\r\nHost: x\r\n").0,
        Parse::Partial
    ));
    for declined in [
        "POST / HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET / HTTP/1.0\r\nHost: x\r\n\r\n",
        "GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET / HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n",
        "GET /{x} HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\nX-A: b\r\n\r\n",
        "GET / HTTP/1.1\nHost: x\n\n",
    ] {
        assert!(
            matches!(parse(declined).0, Parse::Declined),
            "{declined:?} was taken"
        );
    }
}

#[test]
fn the_forwarded_request_changes_only_what_it_must() {
    let raw = "GET /svc/a?q=1 HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\
               X-Forwarded-For: 10.0.0.1\r\nCookie: a=1; SERVERID=00aa; b=2\r\n\
               Authorization: Basic YTpi\r\nX-Forwarded-Prefix: /forged\r\n\
               X-Forwarded-Proto: https\r\nAccept: */*\r\n\r\n";
    let (Parse::Request(req), fields) = parse(raw) else {
        panic!("not taken")
    };
    let target = str_at(raw.as_bytes(), req.target.clone());
    let strip = crate::table::matcher::Strip::of("/svc");
    let fwd = Forwarding::plain();
    // Sticky, and authenticated by switchyard: neither its cookie nor the credentials pass;
    // the route's prefix replaces the client's.
    let hidden = Hidden {
        sticky_cookie: true,
        authorization: true,
        forwarded_prefix: Some("/svc"),
        client_cert: false,
        ingress_cert: None,
    };
    let edits = request_edits(&fwd, Some("127.0.0.9"), hidden, || ClientCert::Absent);
    let mut out = Vec::new();
    build_request(
        &mut out,
        raw.as_bytes(),
        &req,
        &fields,
        Some(strip.apply(target)),
        &edits,
    );
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "GET /a?q=1 HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\
         x-forwarded-for: 10.0.0.1, 127.0.0.9\r\nx-real-ip: 127.0.0.9\r\ncookie: a=1; b=2\r\n\
         x-forwarded-proto: http\r\nx-forwarded-prefix: /svc\r\n\r\n"
    );
}

/// An HTTP/2 client's request reaches an HTTP/1 backend as an HTTP/1 client's does: the same
/// edits, `Host` from `:authority`, split `cookie` fields joined (RFC 9113 §8.2.3) before the
/// load balancer's cookie is taken out; what an HTTP/1 client's request would be declined for
/// is declined here too.
#[test]
fn an_http2_request_is_written_as_the_http1_one_would_be() {
    let mut fields = http::HeaderMap::new();
    for (name, value) in [
        ("accept", "*/*"),
        ("x-forwarded-for", "10.0.0.1"),
        ("cookie", "a=1"),
        ("x-forwarded-proto", "https"),
        ("cookie", "SERVERID=00aa; b=2"),
    ] {
        fields.append(
            http::HeaderName::from_static(name),
            http::HeaderValue::from_static(value),
        );
    }
    let fwd = Forwarding::plain();
    let hidden = Hidden {
        sticky_cookie: true,
        ..Hidden::default()
    };
    let edits = request_edits(&fwd, Some("127.0.0.9"), hidden, || ClientCert::Absent);
    let strip = crate::table::matcher::Strip::of("/svc");
    let mut out = Vec::new();
    let target = strip.apply("/svc/a?q=1");
    assert!(build_request_from_fields(
        &mut out,
        "GET",
        target,
        Some("x"),
        &fields,
        &edits
    ));
    assert_eq!(
        String::from_utf8(out.clone()).unwrap(),
        "GET /a?q=1 HTTP/1.1\r\nhost: x\r\naccept: */*\r\n\
         x-forwarded-for: 10.0.0.1, 127.0.0.9\r\nx-real-ip: 127.0.0.9\r\ncookie: a=1; b=2\r\n\
         x-forwarded-proto: http\r\n\r\n"
    );
    // The same request from an HTTP/1 client: the same fields, in the same order.
    let raw = "GET /svc/a?q=1 HTTP/1.1\r\nhost: x\r\naccept: */*\r\n\
               x-forwarded-for: 10.0.0.1\r\nx-forwarded-proto: https\r\n\
               cookie: a=1; SERVERID=00aa; b=2\r\n\r\n";
    let (Parse::Request(req), parsed) = parse(raw) else {
        panic!("not taken")
    };
    let mut h1 = Vec::new();
    let target = str_at(raw.as_bytes(), req.target.clone());
    build_request(
        &mut h1,
        raw.as_bytes(),
        &req,
        &parsed,
        Some(strip.apply(target)),
        &edits,
    );
    let mut a: Vec<_> = out.split(|&b| b == b'\n').collect();
    let mut b: Vec<_> = h1.split(|&b| b == b'\n').collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);
    for declined in [
        "content-length",
        "expect",
        "connection",
        "transfer-encoding",
        "upgrade",
    ] {
        let mut f = fields.clone();
        f.insert(
            http::HeaderName::from_static(declined),
            http::HeaderValue::from_static("0"),
        );
        assert!(
            !build_request_from_fields(&mut out, "GET", ("", "/"), Some("x"), &f, &edits),
            "{declined}"
        );
    }
}

/// RFC 9112 §2.2: empty lines before the request line are ignored, never forwarded, and the
/// request line is sent once (the fast path once sent it a second time as a header line).
#[test]
fn empty_lines_before_the_request_are_dropped() {
    for raw in [
        "\r\nGET /a HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n",
        "\r\n\r\nGET /a HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n",
    ] {
        let (Parse::Request(req), fields) = parse(raw) else {
            panic!("{raw:?} not taken")
        };
        assert_eq!(req.len, raw.len());
        let fwd = Forwarding::plain();
        let edits = request_edits(&fwd, None, Hidden::default(), || ClientCert::Absent);
        let mut out = Vec::new();
        build_request(&mut out, raw.as_bytes(), &req, &fields, None, &edits);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET /a HTTP/1.1\r\nHost: x\r\nAccept: */*\r\nx-forwarded-proto: http\r\n\r\n"
        );
    }
}

mod forwarded {
    use super::*;
    use proptest::prelude::*;

    const NAMES: &[&str] = &[
        "Host",
        "host",
        "Connection",
        "X-Forwarded-For",
        "x-forwarded-proto",
        "Cookie",
        "Content-Length",
        "Transfer-Encoding",
        "transfer-encoding",
        "Upgrade",
        "X-Other",
        "Accept",
        "X-Client-Verify",
    ];
    const VALUES: &[&str] = &[
        "",
        "a.test",
        "close",
        "keep-alive",
        "Upgrade",
        "1.2.3.4",
        "a=1; SERVERID=00000000000000aa; b=2",
        "SERVERID=1",
        "chunked",
        "5",
        "x y",
        "a\tb",
        "caf\u{e9}",
    ];

    /// Method, target, headers (indexes into NAMES and VALUES), bare LF line endings. Most
    /// requests get one `Host: a.test` at a random place, so that many are taken.
    fn request() -> impl Strategy<Value = (String, String, Vec<(usize, usize)>, bool)> {
        (
            prop::sample::select(vec!["GET", "GET", "HEAD", "POST"]),
            prop::sample::select(vec!["/", "/a?b=1", "/svc/x", "/%41", "*", "/a b", "/{x}"]),
            prop::collection::vec((0..NAMES.len(), 0..VALUES.len()), 0..6),
            prop::option::weighted(0.9, any::<prop::sample::Index>()),
            prop::bool::weighted(0.1),
        )
            .prop_map(|(m, t, mut h, host_at, lf)| {
                if let Some(at) = host_at {
                    h.insert(at.index(h.len() + 1), (0, 1));
                }
                (m.to_string(), t.to_string(), h, lf)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// Whatever the fast path takes, the backend gets one well-formed request: the
        /// same method and target, exactly one Host (the client's), no hop-by-hop or
        /// framing header, one X-Forwarded-For ending with the client, one
        /// X-Forwarded-Proto, and every other client header unchanged and in order.
        /// Anything with framing headers, a bad Host or a bare LF is declined.
        #[test]
        fn taken_requests_are_forwarded_whole_and_unambiguous(
            (method, target, headers, bare_lf) in request(),
            sticky in any::<bool>(),
        ) {
            let eol = if bare_lf { "\n" } else { "\r\n" };
            let mut raw = format!("{method} {target} HTTP/1.1{eol}");
            for (n, v) in &headers {
                raw.push_str(&format!("{}: {}{eol}", NAMES[*n], VALUES[*v]));
            }
            raw.push_str(eol);
            let (parsed, fields) = parse(&raw);
            let framing = headers.iter().any(|(n, _)| {
                let n = NAMES[*n].to_ascii_lowercase();
                n == "content-length" || n == "transfer-encoding" || n == "upgrade"
            });
            let hosts: Vec<&str> = headers
                .iter()
                .filter(|(n, _)| NAMES[*n].eq_ignore_ascii_case("host"))
                .map(|(_, v)| VALUES[*v])
                .collect();
            let Parse::Request(req) = parsed else {
                return Ok(());
            };
            TAKEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            prop_assert!(!framing && !bare_lf && hosts.len() == 1 && method != "POST");
            let head = raw.as_bytes();
            let fwd = Forwarding::tls(None, true);
            let edits = request_edits(
                &fwd,
                Some("10.9.8.7"),
                Hidden {
                    sticky_cookie: sticky,
                    ..Hidden::default()
                },
                || ClientCert::Absent,
            );
            let mut built = Vec::new();
            build_request(&mut built, head, &req, &fields, None, &edits);
            let mut hs = [httparse::EMPTY_HEADER; 64];
            let mut out = httparse::Request::new(&mut hs);
            let n = out.parse(&built);
            prop_assert_eq!(n, Ok(httparse::Status::Complete(built.len())));
            prop_assert_eq!(out.method, Some(method.as_str()));
            prop_assert_eq!(out.path, Some(target.as_str()));
            let got: Vec<(String, String)> = out
                .headers
                .iter()
                .map(|h| (h.name.to_ascii_lowercase(), String::from_utf8_lossy(h.value).into_owned()))
                .collect();
            let count = |name: &str| got.iter().filter(|(n, _)| n == name).count();
            prop_assert_eq!(count("host"), 1);
            prop_assert_eq!(count("connection"), 0);
            prop_assert_eq!(count("x-forwarded-for"), 1);
            prop_assert_eq!(count("x-forwarded-proto"), 1);
            prop_assert_eq!(count("x-client-verify"), 1);
            let xff = &got.iter().find(|(n, _)| n == "x-forwarded-for").unwrap().1;
            prop_assert!(xff.ends_with("10.9.8.7"), "{}", xff);
            if sticky {
                prop_assert!(got.iter().all(|(n, v)| n != "cookie" || !v.contains("SERVERID")));
            }
            let kept: Vec<(String, String)> = headers
                .iter()
                .map(|(n, v)| (NAMES[*n].to_ascii_lowercase(), VALUES[*v].to_string()))
                .filter(|(n, v)| {
                    let replaced = matches!(
                        n.as_str(),
                        "connection" | "x-forwarded-for" | "x-forwarded-proto" | "x-real-ip"
                        | "x-client-verify"
                    );
                    let ours = sticky && n == "cookie" && v.contains("SERVERID");
                    !(replaced || ours)
                })
                .collect();
            let forwarded: Vec<(String, String)> = got
                .iter()
                .filter(|(n, v)| {
                    let added = matches!(
                        n.as_str(),
                        "x-forwarded-for" | "x-forwarded-proto" | "x-real-ip" | "x-client-verify"
                    );
                    let rewritten = sticky && n == "cookie" && !kept.iter().any(|k| &k.1 == v);
                    !(added || rewritten)
                })
                .cloned()
                .collect();
            prop_assert_eq!(forwarded, kept);
        }
    }

    static TAKEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    /// The property above says nothing if nothing is taken: make sure a good share is.
    #[test]
    fn the_property_sees_taken_requests() {
        taken_requests_are_forwarded_whole_and_unambiguous();
        let taken = TAKEN.load(std::sync::atomic::Ordering::Relaxed);
        assert!(taken >= 100, "only {taken} of 1,024 requests were taken");
    }
}

//! Requests refused before routing, and absolute-form request targets, on both HTTP engines
//! (`--fast-path true` and `false`), through raw sockets against the real binary.
//!
//! Every refusal (400, 405, 408, 431) is switchyard's own answer (no `Server: Pingora`), writes
//! one access-log line and counts in `switchyard_http_rejected_requests_total{frontend,reason}`,
//! and nothing reaches a backend. An absolute-form target (`GET http://h/p HTTP/1.1`) is routed
//! on its own authority whatever `Host` says (RFC 9112 §3.2.2), and the backend gets that
//! authority as `Host`. Every wait is bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Both engines: the fast path first takes what it can, Pingora's path everything.
const ENGINES: [&str; 2] = ["true", "false"];

/// Writes `request` on a new connection and reads until the server closes it (at most 5 s).
async fn exchange(port: u16, request: &[u8]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    // The server may answer and close before it has read everything (an oversize header).
    let _ = s.write_all(request).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// The value of one series in `/metrics` (0 when absent).
async fn metric(sy: &Switchyard, series: &str) -> f64 {
    let text = sy.admin("/metrics").await.body;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// The access-log lines (JSON) written so far.
fn log_lines(sy: &Switchyard) -> Vec<Value> {
    sy.stdout()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_requests_are_switchyards_answers_logged_and_counted() {
    let b = Backend::start("b").await;
    let mut world: Vec<Value> = vec![svc("web", 80).into()];
    world.extend(slices("web", &[&b]));
    // 10,000 fields in 60,000 bytes: under the 64 KiB header limit.
    let many_fields = "a: b\r\n".repeat(10_000);
    let long_field = "a".repeat(70 * 1024);
    let cases: Vec<(&str, u16, Vec<u8>)> = vec![
        (
            "too_many_headers",
            431,
            format!("GET /web/a HTTP/1.1\r\nHost: a\r\n{many_fields}\r\n").into_bytes(),
        ),
        (
            "bad_request",
            400,
            b"GET /web/a HTTP/1.1\r\nHost: a\r\nX-Bad: a\x01b\r\n\r\n".to_vec(),
        ),
        (
            "header_too_large",
            431,
            format!("GET /web/a HTTP/1.1\r\nHost: a\r\nX-Long: {long_field}\r\n\r\n").into_bytes(),
        ),
        (
            "bad_host",
            400,
            b"GET /web/a HTTP/1.1\r\nAccept: */*\r\n\r\n".to_vec(),
        ),
        (
            "bad_framing",
            400,
            b"POST /web/a HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx"
                .to_vec(),
        ),
        (
            "method_not_allowed",
            405,
            b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n".to_vec(),
        ),
        // Half a header, then silence past --request-header-timeout.
        ("header_timeout", 408, b"GET /web/a HTTP/1.1\r\nHo".to_vec()),
    ];
    for fast in ENGINES {
        let before = b.count();
        let sy = switchyard(world.clone())
            .args(&[
                "--fast-path",
                fast,
                "--access-log",
                "json",
                "--request-header-timeout",
                "1s",
            ])
            .start()
            .await;
        for (reason, status, request) in &cases {
            let answer = exchange(sy.http_port, request).await;
            assert!(
                answer.starts_with(&format!("HTTP/1.1 {status} ")),
                "fast path {fast}, {reason}: {answer:?}"
            );
            assert!(
                !answer.to_ascii_lowercase().contains("pingora"),
                "fast path {fast}, {reason}: {answer:?}"
            );
            assert!(
                answer.to_ascii_lowercase().contains("connection: close"),
                "fast path {fast}, {reason}: {answer:?}"
            );
        }
        // A good request still goes through, and none of the refused ones did.
        assert_eq!(sy.get("/web/ok").await.status, 200);
        assert_eq!(
            b.count(),
            before + 1,
            "fast path {fast}: a refused request reached the backend"
        );
        for (reason, status, _) in &cases {
            let series = format!(
                "switchyard_http_rejected_requests_total{{frontend=\"http\",reason=\"{reason}\"}}"
            );
            assert_eq!(
                metric(&sy, &series).await,
                1.0,
                "fast path {fast}: {series}"
            );
            let ok = eventually(Duration::from_secs(3), || async {
                log_lines(&sy)
                    .iter()
                    .filter(|l| l["error"] == *reason && l["status"] == *status)
                    .count()
                    == 1
            })
            .await;
            assert!(ok, "fast path {fast}, {reason}: log:\n{}", sy.stdout());
        }
        // A body that breaks after routing: refused too, and counted for its entry.
        let answer = exchange(
            sy.http_port,
            b"POST /web/a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n\r\n",
        )
        .await;
        assert!(
            answer.starts_with("HTTP/1.1 400 "),
            "fast path {fast}: {answer:?}"
        );
        assert!(
            !answer.to_ascii_lowercase().contains("pingora"),
            "{answer:?}"
        );
        let series =
            "switchyard_http_rejected_requests_total{frontend=\"http\",reason=\"bad_body\"}";
        assert_eq!(metric(&sy, series).await, 1.0, "fast path {fast}: {series}");
        let ok = eventually(Duration::from_secs(3), || async {
            log_lines(&sy)
                .iter()
                .any(|l| l["error"] == "bad_body" && l["status"] == 400 && l["entry"] == "web")
        })
        .await;
        assert!(ok, "fast path {fast}: log:\n{}", sy.stdout());
        // Refusals are not unmatched requests.
        assert_eq!(
            metric(
                &sy,
                "switchyard_http_unmatched_requests_total{frontend=\"http\"}"
            )
            .await,
            0.0
        );
        let line = log_lines(&sy)
            .into_iter()
            .find(|l| l["error"] == "bad_request")
            .unwrap();
        assert_eq!(line["method"], "GET");
        assert_eq!(line["path"], "/web/a");
        assert_eq!(line["frontend"], "http");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absolute_form_targets_route_on_their_authority() {
    let a = Backend::start("a").await;
    let other = Backend::start("other").await;
    let mut world: Vec<Value> = vec![
        svc("a", 80).host("a.test").into(),
        svc("other", 80).host("other.test").into(),
    ];
    world.extend(slices("a", &[&a]));
    world.extend(slices("other", &[&other]));
    for fast in ENGINES {
        let sy = switchyard(world.clone())
            .args(&["--fast-path", fast])
            .start()
            .await;
        for (host_line, version) in [
            ("Host: a.test\r\n", "HTTP/1.1"),
            ("Host: other.test\r\n", "HTTP/1.1"),
            ("", "HTTP/1.1"),
            ("host: other.test:8080\r\n", "HTTP/1.0"),
        ] {
            let request = format!(
                "GET http://a.test/p/x?q=1 {version}\r\n{host_line}Connection: close\r\n\r\n"
            );
            let answer = exchange(sy.http_port, request.as_bytes()).await;
            assert!(
                answer.starts_with(&format!("{version} 200 "))
                    || answer.starts_with("HTTP/1.1 200 "),
                "fast path {fast}, {host_line:?}: {answer:?}"
            );
            let seen = a.last().expect("the request reached a.test's backend");
            assert_eq!(seen.uri, "/p/x?q=1", "fast path {fast}, {host_line:?}");
            assert_eq!(
                seen.header("host").as_deref(),
                Some("a.test"),
                "fast path {fast}, {host_line:?}"
            );
        }
        assert_eq!(other.count(), 0, "fast path {fast}: Host was not ignored");
        // A target authority with user information is refused, whatever Host says.
        let answer = exchange(
            sy.http_port,
            b"GET http://u@a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 400 "), "{answer:?}");
    }
}

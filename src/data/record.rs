//! Counting a finished HTTP request once, for either HTTP engine: its entry's metrics, its
//! endpoint's totals and one access-log line, through handles resolved ahead. Decides
//! nothing: the attempt already says what happened.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime};

use prometheus::IntCounter;

use crate::decide::attempt::{Attempt, Verdict};
use crate::decide::cause::Rejection;
use crate::decide::grpc::Ending;
use crate::ops::access_log::{AccessLog, HttpRecord};
use crate::ops::metrics::{Metrics, Resumed, status_class};
use crate::table::Frontend;

/// What the recorder needs to know of a finished request.
pub struct Finished<'a> {
    /// 0 when no response was written.
    pub status: u16,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub failed: bool,
    pub client: Option<SocketAddr>,
    pub host: &'a [u8],
    pub method: &'a str,
    pub path: &'a str,
    /// Refused (counted in `http_rejected_requests_total`; before routing, not as unmatched).
    pub rejected: Option<Rejection>,
    /// For a gRPC request, how the call ended (`grpc_responses_total`, the log's
    /// `grpc_status`); `None` for any other request.
    pub grpc: Option<Ending>,
    /// The client's protocol: `HTTP/1.0`, `HTTP/1.1` or `HTTP/2.0`.
    pub protocol: &'static str,
    /// The client's `User-Agent`, `Referer` and `X-Request-Id` fields, as sent. Borrowed from
    /// the request header: nothing is copied unless the access log is on.
    pub user_agent: Option<&'a [u8]>,
    pub referer: Option<&'a [u8]>,
    pub request_id: Option<&'a [u8]>,
    /// The status the endpoint answered; `None` when switchyard answered itself.
    pub upstream_status: Option<u16>,
    /// The target the endpoint got when a route rewrote it (prefix stripped or replaced, dot
    /// segments removed), in the two pieces `Strip::apply` gives (the query, if any, at the
    /// end of the second); `None` when it is the client's.
    pub forwarded: Option<(&'a str, &'a str)>,
}

impl<'a> Finished<'a> {
    /// What the access log needs of the request's fields, with the defaults for everything
    /// else: what a driver that knows only those starts from.
    pub fn new(
        client: Option<SocketAddr>,
        protocol: &'static str,
        host: &'a [u8],
        method: &'a str,
        path: &'a str,
    ) -> Finished<'a> {
        Finished {
            status: 0,
            bytes_in: 0,
            bytes_out: 0,
            failed: false,
            client,
            host,
            method,
            path,
            rejected: None,
            grpc: None,
            protocol,
            user_agent: None,
            referer: None,
            request_id: None,
            upstream_status: None,
            forwarded: None,
        }
    }

    /// Fills the client's fields the access log names, each found by `get` (a lookup by
    /// lower-case field name). Callers call it only when `Recorder::logs`: with the log off,
    /// no field is looked up.
    pub fn fields(&mut self, get: impl Fn(&str) -> Option<&'a [u8]>) {
        self.user_agent = get("user-agent");
        self.referer = get("referer");
        self.request_id = get("x-request-id");
    }
}

/// The longest `User-Agent`, `Referer` or `X-Request-Id` value logged, in bytes: a client
/// decides their length, the log line should not grow without bound.
const FIELD_MAX: usize = 512;

/// A request field as log text: at most `FIELD_MAX` bytes, lossy UTF-8.
fn field_text(v: Option<&[u8]>) -> Option<std::borrow::Cow<'_, str>> {
    v.map(|v| String::from_utf8_lossy(&v[..v.len().min(FIELD_MAX)]))
}

/// The path that `forwarded` says the endpoint got, when it differs from `path`.
fn forwarded_path(forwarded: Option<(&str, &str)>, path: &str) -> Option<String> {
    let (head, rest) = forwarded?;
    let rest = rest.split_once('?').map_or(rest, |(p, _)| p);
    let mut out = String::with_capacity(head.len() + rest.len() + 1);
    out.push_str(head);
    out.push_str(rest);
    if out.is_empty() {
        out.push('/');
    }
    (out != path).then_some(out)
}

/// One frontend's metrics and access log.
#[derive(Clone)]
pub struct Recorder {
    metrics: Arc<Metrics>,
    access_log: Arc<AccessLog>,
    /// `http_unmatched_requests_total` of this frontend, resolved once.
    unmatched: IntCounter,
    /// `http_rejected_requests_total` of this frontend, by `Rejection::index`.
    rejected: Arc<[IntCounter]>,
    /// The frontend's metric label (`http`, `https`).
    label: String,
}

impl Recorder {
    pub fn new(frontend: Frontend, metrics: Arc<Metrics>, access_log: Arc<AccessLog>) -> Self {
        let label = frontend.label();
        Recorder {
            unmatched: metrics.data.unmatched(&label),
            // Every reason from 0, so a rate() sees the first one.
            rejected: Rejection::ALL
                .iter()
                .map(|r| metrics.data.rejected(&label, r.as_str()))
                .collect(),
            metrics,
            access_log,
            label,
        }
    }

    /// Whether requests are written to the access log: a driver fills the fields only the log
    /// reads (`Finished::fields`) only then.
    pub fn logs(&self) -> bool {
        self.access_log.enabled()
    }

    /// Counts a failed try that was the endpoint's fault: an ejection, a retry, or a
    /// failure given up on.
    pub fn failure(&self, a: &Attempt, v: &Verdict) {
        if !v.endpoint_fault {
            return;
        }
        if let (Some(table), Some(id), Some(entry)) = (a.table(), a.entry_id(), a.entry()) {
            self.metrics.data.count_failure(
                table.generation,
                id as usize,
                &entry.name,
                v.ejected,
                v.retry,
            );
        }
    }

    /// Counts a failed TLS handshake with the current endpoint of `a`'s entry.
    pub fn tls_failure(&self, a: &Attempt) {
        if let (Some(table), Some(id), Some(entry)) = (a.table(), a.entry_id(), a.entry()) {
            self.metrics
                .data
                .count_tls_failure(table.generation, id as usize, &entry.name);
        }
    }

    /// Counts a completed TLS handshake with the current endpoint of `a`'s entry.
    pub fn tls_handshake(&self, a: &Attempt, took: std::time::Duration, resumed: Resumed) {
        if let (Some(table), Some(id), Some(entry)) = (a.table(), a.entry_id(), a.entry()) {
            self.metrics
                .data
                .with_entry(table.generation, id as usize, &entry.name, |h| {
                    h.tls_handshake(took, resumed)
                });
        }
    }

    /// Counts a finished request in the metrics and the access log, once.
    pub fn finished(&self, a: &mut Attempt, started: Instant, f: &Finished<'_>) {
        a.finish();
        let duration = started.elapsed();
        let mut endpoint = None;
        match (a.table(), a.entry_id()) {
            (Some(table), Some(id)) => {
                let Some(entry) = table.entry(id) else {
                    return;
                };
                self.metrics
                    .data
                    .with_entry(table.generation, id as usize, &entry.name, |h| {
                        h.requests(f.status).inc();
                        h.response(f.status);
                        h.duration.observe(duration.as_secs_f64());
                        if let Some(c) = a.connect_time() {
                            h.connect.observe(c.as_secs_f64());
                        }
                        if let Some(r) = a.response_time() {
                            h.response.observe(r.as_secs_f64());
                        }
                        h.request_bytes.inc_by(f.bytes_in);
                        h.response_bytes.inc_by(f.bytes_out);
                        if let Some(g) = f.grpc {
                            h.grpc_response(g);
                        }
                    });
                if let Some(ep) = a.current().and_then(|i| entry.endpoints.get(i)) {
                    if let Some(t) = a.totals() {
                        t.bytes_in.fetch_add(f.bytes_in, Ordering::Relaxed);
                        t.bytes_out.fetch_add(f.bytes_out, Ordering::Relaxed);
                        if let Some(c) = t.responses.get(status_class(f.status)) {
                            c.fetch_add(1, Ordering::Relaxed);
                        }
                        if f.failed && !a.connect_failed() {
                            t.response_errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    endpoint = Some(ep.addr);
                } else {
                    let own = &entry.state.own_answers;
                    own.bytes_out.fetch_add(f.bytes_out, Ordering::Relaxed);
                    if let Some(c) = own.responses.get(status_class(f.status)) {
                        c.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            _ if f.rejected.is_none() => self.unmatched.inc(),
            _ => {}
        }
        // A refusal after routing (a malformed body) counts for its entry too.
        if let Some(c) = f.rejected.and_then(|r| self.rejected.get(r.index())) {
            c.inc();
        }
        if !self.access_log.enabled() {
            return;
        }
        let host = String::from_utf8_lossy(&f.host[..f.host.len().min(255)]);
        let entry = a.entry().map_or("", |e| &e.name);
        let user_agent = field_text(f.user_agent);
        // Without its query, as the path: a query often carries credentials.
        let referer = field_text(
            f.referer
                .map(|r| &r[..r.iter().position(|&b| b == b'?').unwrap_or(r.len())]),
        );
        let request_id = field_text(f.request_id);
        // Only a request that had an endpoint went anywhere (not a 503 without endpoints).
        let upstream_path = endpoint.and_then(|_| forwarded_path(f.forwarded, f.path));
        self.access_log.http(&HttpRecord {
            timestamp: SystemTime::now(),
            protocol: f.protocol,
            user_agent: user_agent.as_deref(),
            referer: referer.as_deref(),
            request_id: request_id.as_deref(),
            upstream_status: f.upstream_status,
            upstream_path: upstream_path.as_deref(),
            client: f.client,
            frontend: &self.label,
            host: &host,
            method: f.method,
            path: f.path,
            status: f.status,
            entry,
            endpoint,
            bytes_in: f.bytes_in,
            bytes_out: f.bytes_out,
            duration,
            connect: a.connect_time(),
            generation: a.table().map_or(0, |t| t.generation),
            retries: u32::try_from(a.tries().saturating_sub(1)).unwrap_or(0),
            error: f.rejected.map(Rejection::as_str),
            grpc_status: f.grpc.map(Ending::as_str),
        });
    }

    /// Counts a request refused before it had a route (see `Rejection`), with one access-log
    /// line. `head` is what was read of its header: the method and path are taken from its
    /// request line when they are plain text, and left empty otherwise.
    pub fn rejected(
        &self,
        r: Rejection,
        started: Instant,
        client: Option<SocketAddr>,
        head: &[u8],
    ) {
        let (method, path, protocol) = request_line(head);
        let mut attempt = Attempt::new(None);
        self.finished(
            &mut attempt,
            started,
            &Finished {
                status: r.status(),
                failed: true,
                rejected: Some(r),
                ..Finished::new(client, protocol, b"", method, path)
            },
        );
    }
}

/// The method and the path (without query) of a request line, when both are short printable
/// ASCII; empty strings otherwise (a refused request may be any bytes at all). And its
/// protocol, `HTTP/1.0` or `HTTP/1.1` (the latter for anything else: a refused header is read
/// as HTTP/1.1 is).
fn request_line(head: &[u8]) -> (&str, &str, &'static str) {
    let start = head
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(head.len());
    let line = &head[start..];
    let line = &line[..line.iter().position(|&b| b == b'\n').unwrap_or(line.len())];
    let mut words = line.split(|&b| b == b' ');
    fn plain(w: &[u8], max: usize) -> Option<&str> {
        (!w.is_empty() && w.len() <= max && w.iter().all(u8::is_ascii_graphic))
            .then(|| std::str::from_utf8(w).ok())
            .flatten()
    }
    let method = words.next().and_then(|w| plain(w, 16)).unwrap_or("");
    let path = words
        .next()
        .map(|w| &w[..w.iter().position(|&b| b == b'?').unwrap_or(w.len())])
        .and_then(|w| plain(w, 2048))
        .unwrap_or("");
    let protocol = match words.next().map(<[u8]>::trim_ascii_end) {
        Some(b"HTTP/1.0") => "HTTP/1.0",
        _ => "HTTP/1.1",
    };
    (method, path, protocol)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_of_refused_requests_are_read_only_when_plain() {
        let h11 = "HTTP/1.1";
        assert_eq!(
            request_line(b"\r\nGET /a?b HTTP/1.1\r\nx"),
            ("GET", "/a", h11)
        );
        assert_eq!(request_line(b"GET /\x00 HTTP/1.1\r\n"), ("GET", "", h11));
        assert_eq!(
            request_line(b"GET / HTTP/1.0\r\n"),
            ("GET", "/", "HTTP/1.0")
        );
        assert_eq!(request_line(b""), ("", "", h11));
        assert_eq!(request_line(b"\x01\x02"), ("", "", h11));
    }

    #[test]
    fn the_forwarded_path_is_logged_only_when_it_differs() {
        assert_eq!(forwarded_path(None, "/a"), None);
        assert_eq!(forwarded_path(Some(("", "/a?q=1")), "/a"), None);
        assert_eq!(
            forwarded_path(Some(("", "/b?q=1")), "/web/b").as_deref(),
            Some("/b")
        );
        assert_eq!(
            forwarded_path(Some(("/new", "/b")), "/old/b").as_deref(),
            Some("/new/b")
        );
        assert_eq!(
            forwarded_path(Some(("/", "")), "/web").as_deref(),
            Some("/")
        );
        assert_eq!(
            forwarded_path(Some(("", "?q")), "/web").as_deref(),
            Some("/")
        );
    }

    #[test]
    fn request_fields_are_bounded_in_the_log() {
        let long = vec![b'a'; 2 * FIELD_MAX];
        assert_eq!(field_text(Some(&long)).map(|t| t.len()), Some(FIELD_MAX));
        assert_eq!(field_text(None), None);
        assert_eq!(field_text(Some(b"curl/8")).as_deref(), Some("curl/8"));
    }
}

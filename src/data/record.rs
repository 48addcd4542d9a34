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
        self.access_log.http(&HttpRecord {
            time: SystemTime::now(),
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
        let (method, path) = request_line(head);
        let mut attempt = Attempt::new(None);
        self.finished(
            &mut attempt,
            started,
            &Finished {
                status: r.status(),
                bytes_in: 0,
                bytes_out: 0,
                failed: true,
                client,
                host: b"",
                method,
                path,
                rejected: Some(r),
                grpc: None,
            },
        );
    }
}

/// The method and the path (without query) of a request line, when both are short printable
/// ASCII; empty strings otherwise (a refused request may be any bytes at all).
fn request_line(head: &[u8]) -> (&str, &str) {
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
    (method, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_of_refused_requests_are_read_only_when_plain() {
        assert_eq!(request_line(b"\r\nGET /a?b HTTP/1.1\r\nx"), ("GET", "/a"));
        assert_eq!(request_line(b"GET /\x00 HTTP/1.1\r\n"), ("GET", ""));
        assert_eq!(request_line(b""), ("", ""));
        assert_eq!(request_line(b"\x01\x02"), ("", ""));
    }
}

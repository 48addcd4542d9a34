//! Counting a finished HTTP request once, for either HTTP engine: its entry's metrics, its
//! endpoint's totals and one access-log line, through handles resolved ahead. Decides
//! nothing: the attempt already says what happened.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime};

use prometheus::IntCounter;

use crate::decide::attempt::{Attempt, Verdict};
use crate::ops::access_log::{AccessLog, HttpRecord};
use crate::ops::metrics::Metrics;
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
}

/// One frontend's metrics and access log.
#[derive(Clone)]
pub struct Recorder {
    metrics: Arc<Metrics>,
    access_log: Arc<AccessLog>,
    /// `http_unmatched_requests_total` of this frontend, resolved once.
    unmatched: IntCounter,
    /// The frontend's metric label (`http`, `https`).
    label: String,
}

impl Recorder {
    pub fn new(frontend: Frontend, metrics: Arc<Metrics>, access_log: Arc<AccessLog>) -> Self {
        let label = frontend.label();
        Recorder {
            unmatched: metrics.data.unmatched(&label),
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
                        h.request_bytes.inc_by(f.bytes_in);
                        h.response_bytes.inc_by(f.bytes_out);
                    });
                if let Some(ep) = a.current().and_then(|i| entry.endpoints.get(i)) {
                    let t = &ep.state.totals;
                    t.bytes_in.fetch_add(f.bytes_in, Ordering::Relaxed);
                    t.bytes_out.fetch_add(f.bytes_out, Ordering::Relaxed);
                    if f.failed && !a.connect_failed() {
                        t.response_errors.fetch_add(1, Ordering::Relaxed);
                    }
                    endpoint = Some(ep.addr);
                }
            }
            _ => self.unmatched.inc(),
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
        });
    }
}

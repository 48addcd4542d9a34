//! Access logs: one structured line per HTTP request and per TCP connection, on stdout, in
//! JSON or logfmt (`--access-log`), off by default.
//!
//! The data plane formats a line into a `String` and hands it to a bounded queue; one thread
//! writes the queue to stdout. So no request ever waits on stdout or holds a lock across an
//! await, and when stdout cannot keep up lines are dropped and counted
//! (`switchyard_access_log_dropped_total`) rather than slowing the proxy. When the log is off,
//! `enabled()` is false and callers build nothing. This module must not touch routing.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus::IntCounter;
use serde::Serialize;

/// Lines waiting for the writer thread before new ones are dropped.
const QUEUE_LINES: usize = 16_384;

/// The line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Logfmt,
}

impl FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "json" => Ok(Format::Json),
            "logfmt" => Ok(Format::Logfmt),
            other => Err(format!("{other:?} is not json or logfmt")),
        }
    }
}

/// One finished HTTP request.
#[derive(Debug, Clone, Serialize)]
pub struct HttpRecord<'a> {
    /// When the request finished (RFC 3339, UTC, milliseconds); named as in switchyard's own
    /// log, so one pipeline parses both.
    #[serde(serialize_with = "ser_time")]
    pub timestamp: SystemTime,
    pub client: Option<SocketAddr>,
    pub frontend: &'a str,
    /// The client's protocol: `HTTP/1.0`, `HTTP/1.1`, `HTTP/2.0`.
    pub protocol: &'a str,
    pub host: &'a str,
    pub method: &'a str,
    /// The path without the query (queries often carry credentials).
    pub path: &'a str,
    /// The path the endpoint got, when a route rewrote it (without the query); absent
    /// otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_path: Option<&'a str>,
    /// 0 when no response was written (the client went away).
    pub status: u16,
    /// The status the endpoint answered; absent when switchyard answered itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_status: Option<u16>,
    /// Empty when no route matched.
    pub entry: &'a str,
    pub endpoint: Option<SocketAddr>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    #[serde(rename = "duration_ms", serialize_with = "ser_ms")]
    pub duration: Duration,
    /// Time to open a new upstream connection; absent when a pooled one was reused.
    #[serde(rename = "connect_ms", serialize_with = "ser_opt_ms")]
    pub connect: Option<Duration>,
    pub generation: u64,
    pub retries: u32,
    /// The client's `X-Request-Id`, `User-Agent` and `Referer` (the latter without its query),
    /// each cut at 512 bytes; absent when the client sent none. Switchyard generates no
    /// request id of its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub referer: Option<&'a str>,
    /// Why the request was refused before routing (a `reason` label of
    /// `http_rejected_requests_total`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<&'a str>,
    /// How a gRPC call ended (`OK`, `NOT_FOUND`, ..., `none` when no `grpc-status` came);
    /// absent for other requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc_status: Option<&'a str>,
}

/// One closed TCP connection.
#[derive(Debug, Clone, Serialize)]
pub struct TcpRecord<'a> {
    #[serde(serialize_with = "ser_time")]
    pub timestamp: SystemTime,
    pub client: Option<SocketAddr>,
    /// `tcp:PORT`.
    pub frontend: &'a str,
    pub entry: &'a str,
    pub endpoint: Option<SocketAddr>,
    /// Bytes received from the client.
    pub bytes_in: u64,
    /// Bytes sent to the client.
    pub bytes_out: u64,
    #[serde(rename = "duration_ms", serialize_with = "ser_ms")]
    pub duration: Duration,
    #[serde(rename = "connect_ms", serialize_with = "ser_opt_ms")]
    pub connect: Option<Duration>,
    pub generation: u64,
    pub retries: u32,
    /// Why the connection ended badly, if it did (a short fixed phrase).
    pub error: Option<&'a str>,
}

fn ser_time<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&rfc3339(*t))
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

fn ser_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(ms(*d))
}

fn ser_opt_ms<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64(ms(*d)),
        None => s.serialize_none(),
    }
}

/// The access log: off, or a queue feeding the stdout writer thread.
pub struct AccessLog {
    format: Option<Format>,
    tx: Option<SyncSender<String>>,
    dropped: IntCounter,
}

impl AccessLog {
    /// A log that records nothing.
    pub fn off() -> AccessLog {
        AccessLog {
            format: None,
            tx: None,
            dropped: IntCounter::new("unused", "unused").unwrap_or_else(|_| unreachable()),
        }
    }

    /// Starts the writer thread for `format` (or returns `off()` for `None`).
    pub fn start(format: Option<Format>, dropped: IntCounter) -> std::io::Result<AccessLog> {
        let Some(format) = format else {
            return Ok(AccessLog::off());
        };
        let (tx, rx) = sync_channel(QUEUE_LINES);
        std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || write_lines(rx, std::io::stdout()))?;
        Ok(AccessLog {
            format: Some(format),
            tx: Some(tx),
            dropped,
        })
    }

    /// Whether lines are written; callers skip building records when not.
    pub fn enabled(&self) -> bool {
        self.tx.is_some()
    }

    /// Logs one HTTP request.
    pub fn http(&self, r: &HttpRecord<'_>) {
        if let Some(format) = self.format {
            self.send(format_http(format, r));
        }
    }

    /// Logs one TCP connection at close.
    pub fn tcp(&self, r: &TcpRecord<'_>) {
        if let Some(format) = self.format {
            self.send(format_tcp(format, r));
        }
    }

    /// A UDP flow, once it has ended: a TCP connection's fields (bytes each way, the
    /// endpoint, how long it lasted), with `kind` `udp`.
    pub fn udp(&self, r: &TcpRecord<'_>) {
        if let Some(format) = self.format {
            self.send(format_stream(format, "udp", r));
        }
    }

    fn send(&self, line: String) {
        let Some(tx) = &self.tx else {
            return;
        };
        match tx.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => self.dropped.inc(),
            Err(TrySendError::Disconnected(_)) => self.dropped.inc(),
        }
    }
}

#[track_caller]
fn unreachable<T>() -> T {
    panic!("constant metric definition is valid")
}

/// The writer thread: batches what is queued, flushes when the queue is empty, ends when every
/// sender is gone.
fn write_lines(rx: Receiver<String>, out: impl std::io::Write) {
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, out);
    while let Ok(line) = rx.recv() {
        let mut ok = out.write_all(line.as_bytes()).is_ok();
        while let Ok(line) = rx.try_recv() {
            ok &= out.write_all(line.as_bytes()).is_ok();
        }
        ok &= out.flush().is_ok();
        if !ok {
            // stdout is gone (closed pipe): keep draining so senders never block.
            continue;
        }
    }
}

/// One line (with its newline) for an HTTP request.
pub fn format_http(format: Format, r: &HttpRecord<'_>) -> String {
    match format {
        Format::Json => json_line("http", r),
        Format::Logfmt => {
            let mut l = Logfmt::new();
            l.str("timestamp", &rfc3339(r.timestamp));
            l.str("kind", "http");
            l.opt_addr("client", r.client);
            l.str("frontend", r.frontend);
            l.str("protocol", r.protocol);
            l.str("host", r.host);
            l.str("method", r.method);
            l.str("path", r.path);
            if let Some(p) = r.upstream_path {
                l.str("upstream_path", p);
            }
            l.num("status", r.status);
            if let Some(s) = r.upstream_status {
                l.num("upstream_status", s);
            }
            l.str("entry", r.entry);
            l.opt_addr("endpoint", r.endpoint);
            l.num("bytes_in", r.bytes_in);
            l.num("bytes_out", r.bytes_out);
            l.num("duration_ms", ms(r.duration));
            l.opt_ms("connect_ms", r.connect);
            l.num("generation", r.generation);
            l.num("retries", r.retries);
            for (k, v) in [
                ("request_id", r.request_id),
                ("user_agent", r.user_agent),
                ("referer", r.referer),
            ] {
                if let Some(v) = v {
                    l.str(k, v);
                }
            }
            if let Some(e) = r.error {
                l.str("error", e);
            }
            if let Some(g) = r.grpc_status {
                l.str("grpc_status", g);
            }
            l.finish()
        }
    }
}

/// One line (with its newline) for a TCP connection.
pub fn format_tcp(format: Format, r: &TcpRecord<'_>) -> String {
    format_stream(format, "tcp", r)
}

/// A TCP connection's (`kind` `tcp`) or a UDP flow's (`udp`) line.
fn format_stream(format: Format, kind: &'static str, r: &TcpRecord<'_>) -> String {
    match format {
        Format::Json => json_line(kind, r),
        Format::Logfmt => {
            let mut l = Logfmt::new();
            l.str("timestamp", &rfc3339(r.timestamp));
            l.str("kind", kind);
            l.opt_addr("client", r.client);
            l.str("frontend", r.frontend);
            l.str("entry", r.entry);
            l.opt_addr("endpoint", r.endpoint);
            l.num("bytes_in", r.bytes_in);
            l.num("bytes_out", r.bytes_out);
            l.num("duration_ms", ms(r.duration));
            l.opt_ms("connect_ms", r.connect);
            l.num("generation", r.generation);
            l.num("retries", r.retries);
            if let Some(e) = r.error {
                l.str("error", e);
            }
            l.finish()
        }
    }
}

/// A record with its kind (`http`, `tcp`) in front.
#[derive(Serialize)]
struct Tagged<'a, T> {
    kind: &'static str,
    #[serde(flatten)]
    record: &'a T,
}

fn json_line<T: Serialize>(kind: &'static str, record: &T) -> String {
    let mut s = serde_json::to_string(&Tagged { kind, record })
        .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    s.push('\n');
    s
}

/// Appends `v` as a logfmt value: bare when a parser reads it whole, else quoted with quotes,
/// backslashes and control characters escaped. The access log's lines and switchyard's own text
/// log (the binary's field formatter) both write values with it.
pub fn push_logfmt_value(out: &mut String, v: &str) {
    let plain = !v.is_empty()
        && v.bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'=' && b != b'\\');
    if plain {
        out.push_str(v);
        return;
    }
    out.push('"');
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:04x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A logfmt line builder: `key=value`, values quoted when they need it.
struct Logfmt(String);

impl Logfmt {
    fn new() -> Self {
        Logfmt(String::with_capacity(256))
    }

    fn key(&mut self, k: &str) {
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        self.0.push_str(k);
        self.0.push('=');
    }

    fn str(&mut self, k: &str, v: &str) {
        self.key(k);
        push_logfmt_value(&mut self.0, v);
    }

    fn num(&mut self, k: &str, v: impl std::fmt::Display) {
        self.key(k);
        let _ = write!(self.0, "{v}");
    }

    fn opt_addr(&mut self, k: &str, v: Option<SocketAddr>) {
        match v {
            Some(a) => self.num(k, a),
            None => self.str(k, ""),
        }
    }

    fn opt_ms(&mut self, k: &str, v: Option<Duration>) {
        match v {
            Some(d) => self.num(k, ms(d)),
            None => self.str(k, ""),
        }
    }

    fn finish(mut self) -> String {
        self.0.push('\n');
        self.0
    }
}

/// `2024-05-01T12:34:56.789Z` (UTC, milliseconds), without a date library.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> HttpRecord<'static> {
        HttpRecord {
            timestamp: UNIX_EPOCH + Duration::from_millis(1_714_566_896_789),
            client: Some("127.0.0.1:5555".parse().unwrap()),
            frontend: "http",
            protocol: "HTTP/1.1",
            host: "shop.example.com",
            method: "GET",
            path: "/a \"b\"",
            upstream_path: None,
            status: 200,
            upstream_status: Some(200),
            entry: "web",
            endpoint: Some("10.0.0.1:80".parse().unwrap()),
            bytes_in: 0,
            bytes_out: 42,
            duration: Duration::from_micros(1500),
            connect: None,
            generation: 3,
            retries: 1,
            request_id: None,
            user_agent: None,
            referer: None,
            error: None,
            grpc_status: None,
        }
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_millis(1_714_566_896_789)),
            "2024-05-01T12:34:56.789Z"
        );
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00.000Z"
        );
    }

    #[test]
    fn json_lines_hold_every_field() {
        let line = format_http(Format::Json, &record());
        assert!(line.ends_with('\n'));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["timestamp"], "2024-05-01T12:34:56.789Z");
        assert_eq!(v["protocol"], "HTTP/1.1");
        assert_eq!(v["upstream_status"], 200);
        for absent in [
            "upstream_path",
            "request_id",
            "user_agent",
            "referer",
            "time",
        ] {
            assert!(v.get(absent).is_none(), "{absent} in {line}");
        }
        assert_eq!(v["kind"], "http");
        assert_eq!(v["client"], "127.0.0.1:5555");
        assert_eq!(v["path"], "/a \"b\"");
        assert_eq!(v["endpoint"], "10.0.0.1:80");
        assert_eq!(v["duration_ms"], 1.5);
        assert_eq!(v["connect_ms"], serde_json::Value::Null);
        assert_eq!(v["generation"], 3);
        assert_eq!(v["retries"], 1);
    }

    #[test]
    fn logfmt_quotes_what_needs_it() {
        let line = format_http(Format::Logfmt, &record());
        assert_eq!(
            line,
            "timestamp=2024-05-01T12:34:56.789Z kind=http client=127.0.0.1:5555 frontend=http \
             protocol=HTTP/1.1 host=shop.example.com method=GET path=\"/a \\\"b\\\"\" \
             status=200 upstream_status=200 entry=web endpoint=10.0.0.1:80 bytes_in=0 \
             bytes_out=42 duration_ms=1.5 connect_ms=\"\" generation=3 retries=1\n"
        );
    }

    #[test]
    fn request_fields_and_the_rewritten_path_when_present() {
        let r = HttpRecord {
            protocol: "HTTP/2.0",
            upstream_path: Some("/b"),
            upstream_status: None,
            request_id: Some("abc-1"),
            user_agent: Some("curl/8.0 (x)"),
            referer: Some("https://a.example/p"),
            ..record()
        };
        let line = format_http(Format::Logfmt, &r);
        assert!(
            line.contains(" protocol=HTTP/2.0 host=shop.example.com "),
            "{line}"
        );
        assert!(
            line.contains(" upstream_path=/b status=200 entry=web "),
            "{line}"
        );
        assert!(!line.contains("upstream_status"), "{line}");
        assert!(
            line.ends_with(
                " retries=1 request_id=abc-1 user_agent=\"curl/8.0 (x)\" \
                 referer=https://a.example/p\n"
            ),
            "{line}"
        );
        let v: serde_json::Value = serde_json::from_str(&format_http(Format::Json, &r)).unwrap();
        assert_eq!(v["protocol"], "HTTP/2.0");
        assert_eq!(v["upstream_path"], "/b");
        assert!(v.get("upstream_status").is_none());
        assert_eq!(v["request_id"], "abc-1");
        assert_eq!(v["user_agent"], "curl/8.0 (x)");
        assert_eq!(v["referer"], "https://a.example/p");
    }

    #[test]
    fn grpc_calls_carry_their_status() {
        let r = HttpRecord {
            grpc_status: Some("NOT_FOUND"),
            ..record()
        };
        assert!(format_http(Format::Logfmt, &r).ends_with(" retries=1 grpc_status=NOT_FOUND\n"));
        let v: serde_json::Value = serde_json::from_str(&format_http(Format::Json, &r)).unwrap();
        assert_eq!(v["grpc_status"], "NOT_FOUND");
        let v: serde_json::Value =
            serde_json::from_str(&format_http(Format::Json, &record())).unwrap();
        assert!(v.get("grpc_status").is_none(), "absent for other requests");
    }

    #[test]
    fn tcp_lines() {
        let r = TcpRecord {
            timestamp: UNIX_EPOCH,
            client: None,
            frontend: "tcp:3306",
            entry: "db:3306",
            endpoint: None,
            bytes_in: 1,
            bytes_out: 2,
            duration: Duration::from_secs(1),
            connect: Some(Duration::from_millis(2)),
            generation: 1,
            retries: 0,
            error: Some("no endpoint"),
        };
        let line = format_tcp(Format::Logfmt, &r);
        assert!(line.contains("frontend=tcp:3306 entry=db:3306 endpoint=\"\""));
        assert!(line.contains("connect_ms=2 generation=1 retries=0 error=\"no endpoint\""));
        let v: serde_json::Value = serde_json::from_str(&format_tcp(Format::Json, &r)).unwrap();
        assert_eq!(v["error"], "no endpoint");
    }

    #[test]
    fn off_builds_nothing_and_full_queue_drops() {
        assert!(!AccessLog::off().enabled());
        let (tx, _rx) = sync_channel(1);
        let dropped = IntCounter::new("d", "d").unwrap();
        let log = AccessLog {
            format: Some(Format::Json),
            tx: Some(tx),
            dropped: dropped.clone(),
        };
        log.http(&record());
        log.http(&record());
        assert_eq!(dropped.get(), 1);
    }

    #[test]
    fn writer_writes_every_queued_line() {
        let (tx, rx) = sync_channel(8);
        for i in 0..3 {
            tx.send(format!("{i}\n")).unwrap();
        }
        drop(tx);
        let mut out = Vec::new();
        write_lines(rx, &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), "0\n1\n2\n");
    }
}

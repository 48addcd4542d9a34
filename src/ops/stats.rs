//! The stats page on `--stats-port`, in the spirit of HAProxy's: one section per frontend
//! (HTTP, TLS, each TCP port), one table per entry, one row per endpoint with its state,
//! sessions, bytes, errors and last health check; plain HTML that refreshes itself, no
//! JavaScript. `?csv` and `?json` give the same rows. Also the scrape-time source of the
//! per-endpoint Prometheus series (`TableEndpoints`).
//!
//! Everything is read from the live table (counters in each endpoint's shared state) and the
//! metrics registry at request time; nothing is stored here. It must not change routing state
//! and must not know about Kubernetes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use async_trait::async_trait;
use http::{HeaderValue, Response, StatusCode};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use serde::Serialize;

use crate::decide::explain::endpoint_state;
use crate::ops::metrics::{EndpointSample, EndpointSource, Metrics};
use crate::table::{Entry, Frontend, RoutingTable, TableReader};

/// Seconds between automatic refreshes of the HTML page.
pub const REFRESH_SECONDS: u32 = 5;

/// The columns of a row, in CSV order.
pub const COLUMNS: [&str; 14] = [
    "type",
    "frontend",
    "entry",
    "endpoint",
    "state",
    "cur",
    "max",
    "total",
    "bytes_in",
    "bytes_out",
    "connect_errors",
    "response_errors",
    "last_check",
    "generation",
];

/// One line of the page: a frontend, an entry (totals of its endpoints) or an endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    /// `frontend`, `entry` or `endpoint`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub frontend: String,
    pub entry: String,
    pub endpoint: String,
    /// Endpoints: `up`, `down`, `ejected`, `draining`. Entries: `up` while one endpoint takes
    /// traffic, else `down`. Frontends: `open`.
    pub state: String,
    /// In flight now (frontends: open client connections).
    pub cur: u64,
    pub max: u64,
    /// Sessions so far (frontends: requests that matched no route).
    pub total: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub connect_errors: u64,
    pub response_errors: u64,
    pub last_check: String,
    pub generation: u64,
}

impl Row {
    fn cells(&self) -> [String; 14] {
        [
            self.kind.to_string(),
            self.frontend.clone(),
            self.entry.clone(),
            self.endpoint.clone(),
            self.state.clone(),
            self.cur.to_string(),
            self.max.to_string(),
            self.total.to_string(),
            self.bytes_in.to_string(),
            self.bytes_out.to_string(),
            self.connect_errors.to_string(),
            self.response_errors.to_string(),
            self.last_check.clone(),
            self.generation.to_string(),
        ]
    }
}

/// Where the listeners are, for headings.
#[derive(Debug, Clone)]
pub struct Listeners {
    pub bind: IpAddr,
    pub http_port: u16,
    /// The TLS port, when a TLS listener runs.
    pub https_port: Option<u16>,
}

/// Everything the page shows, read once per request.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    pub generation: u64,
    pub uptime_seconds: u64,
    pub rows: Vec<Row>,
    /// Frontend -> listening address, for headings.
    #[serde(skip)]
    pub addresses: BTreeMap<String, String>,
    /// Entry -> one line about it (service, algorithm, endpoints up, check), for captions.
    #[serde(skip)]
    pub entry_info: BTreeMap<String, String>,
}

/// Frontends to show: HTTP always, TLS when it listens or has entries, each TCP port.
fn frontends(table: &RoutingTable, listeners: &Listeners) -> Vec<Frontend> {
    let mut out = vec![Frontend::Http];
    if listeners.https_port.is_some() || table.entries.iter().any(|e| e.frontend == Frontend::Https)
    {
        out.push(Frontend::Https);
    }
    let mut tcp: Vec<u16> = table.tcp.iter().map(|t| t.port).collect();
    tcp.sort_unstable();
    tcp.dedup();
    out.extend(tcp.into_iter().map(Frontend::Tcp));
    out
}

fn endpoint_row(fe: &str, entry: &Entry, i: usize, now: Instant, generation: u64) -> Row {
    let e = &entry.endpoints[i];
    let s = &e.state;
    let t = &s.totals;
    Row {
        kind: "endpoint",
        frontend: fe.to_string(),
        entry: entry.name.to_string(),
        endpoint: e.addr.to_string(),
        state: endpoint_state(entry, i, now).to_string(),
        cur: u64::from(s.in_flight.load(Ordering::Relaxed)),
        max: u64::from(t.max_in_flight.load(Ordering::Relaxed)),
        total: t.sessions.load(Ordering::Relaxed),
        bytes_in: t.bytes_in.load(Ordering::Relaxed),
        bytes_out: t.bytes_out.load(Ordering::Relaxed),
        connect_errors: t.connect_errors.load(Ordering::Relaxed),
        response_errors: t.response_errors.load(Ordering::Relaxed),
        last_check: s.health.last().code(),
        generation,
    }
}

/// Reads the rows: per frontend, its row, then per entry (by name) its totals row followed by
/// its endpoint rows.
pub fn snapshot(
    table: &RoutingTable,
    metrics: &Metrics,
    listeners: &Listeners,
    started: Instant,
) -> Snapshot {
    let now = Instant::now();
    let generation = table.generation;
    let mut rows = Vec::new();
    let mut addresses = BTreeMap::new();
    let mut entry_info = BTreeMap::new();
    for fe in frontends(table, listeners) {
        let label = fe.label();
        let port = match fe {
            Frontend::Http => Some(listeners.http_port),
            Frontend::Https => listeners.https_port,
            Frontend::Tcp(p) => Some(p),
        };
        if let Some(port) = port {
            addresses.insert(
                label.clone(),
                SocketAddr::new(listeners.bind, port).to_string(),
            );
        }
        let open = metrics.data.open_connections(&label).get();
        let unmatched = match fe {
            Frontend::Tcp(_) => 0,
            _ => metrics.data.unmatched(&label).get(),
        };
        rows.push(Row {
            kind: "frontend",
            frontend: label.clone(),
            entry: String::new(),
            endpoint: String::new(),
            state: "open".into(),
            cur: u64::try_from(open).unwrap_or(0),
            max: 0,
            total: unmatched,
            bytes_in: 0,
            bytes_out: 0,
            connect_errors: 0,
            response_errors: 0,
            last_check: String::new(),
            generation,
        });
        let mut entries: Vec<&Entry> = table
            .entries
            .iter()
            .map(|e| &**e)
            .filter(|e| e.frontend == fe)
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        for entry in entries {
            let eps: Vec<Row> = (0..entry.endpoints.len())
                .map(|i| endpoint_row(&label, entry, i, now, generation))
                .collect();
            let up = eps.iter().filter(|r| r.state == "up").count();
            let state = if up > 0 {
                "up"
            } else if eps.iter().any(|r| r.state == "draining") {
                "draining"
            } else {
                "down"
            };
            let check = match (&entry.check.path, entry.check.interval) {
                (_, Some(d)) if d.is_zero() => "checks off".to_string(),
                (Some(p), _) => format!("check GET {p}"),
                (None, _) => "check TCP connect".to_string(),
            };
            entry_info.insert(
                entry.name.to_string(),
                format!(
                    "{}/{}:{} · {} · {up}/{} up · {check}",
                    entry.key.namespace,
                    entry.key.service,
                    entry.key.port,
                    entry.algorithm,
                    eps.len()
                ),
            );
            rows.push(Row {
                kind: "entry",
                frontend: label.clone(),
                entry: entry.name.to_string(),
                endpoint: String::new(),
                state: state.into(),
                cur: eps.iter().map(|r| r.cur).sum(),
                max: eps.iter().map(|r| r.max).max().unwrap_or(0),
                total: eps.iter().map(|r| r.total).sum(),
                bytes_in: eps.iter().map(|r| r.bytes_in).sum(),
                bytes_out: eps.iter().map(|r| r.bytes_out).sum(),
                connect_errors: eps.iter().map(|r| r.connect_errors).sum(),
                response_errors: eps.iter().map(|r| r.response_errors).sum(),
                last_check: String::new(),
                generation,
            });
            rows.extend(eps);
        }
    }
    Snapshot {
        generation,
        uptime_seconds: started.elapsed().as_secs(),
        rows,
        addresses,
        entry_info,
    }
}

// === renderings ===

/// CSV: a header line, then one line per row.
pub fn to_csv(s: &Snapshot) -> String {
    let mut out = COLUMNS.join(",");
    out.push('\n');
    for row in &s.rows {
        let cells: Vec<String> = row.cells().iter().map(|c| csv_cell(c)).collect();
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

fn csv_cell(c: &str) -> String {
    if c.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", c.replace('"', "\"\""))
    } else {
        c.to_string()
    }
}

pub fn to_json(s: &Snapshot) -> String {
    serde_json::to_string_pretty(s).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "\
body{font-family:Helvetica,Arial,sans-serif;font-size:13px;margin:12px;color:#000;background:#fff}
h1{font-size:20px;margin:0 0 4px}h1 span{color:#666;font-weight:normal;font-size:14px}
h2{font-size:15px;margin:18px 0 4px;padding:3px 6px;background:#20407a;color:#fff}
h2 small{font-weight:normal;color:#cde}
p.meta{margin:2px 0 8px;color:#333}
table{border-collapse:collapse;margin:6px 0 12px;width:1000px;table-layout:fixed}
caption small{font-weight:normal;color:#555;margin-left:8px}
th.name,td.c-endpoint{width:210px}th.check,td.c-last_check{width:110px}
caption{text-align:left;font-weight:bold;padding:4px 0}
th,td{border:1px solid #999;padding:2px 6px;text-align:right;white-space:nowrap}
th{background:#dde4ee}td.c-endpoint,th.name{text-align:left}
tr.entry td{background:#eef;font-weight:bold}
tr.up td.c-state{background:#b8f0b0}tr.down td.c-state{background:#ff9a9a}
tr.ejected td.c-state{background:#ffd090}tr.draining td.c-state{background:#a8c8f8}
tr.endpoint.down td{color:#800}
ul.legend{list-style:none;padding:0;margin:4px 0}ul.legend li{display:inline-block;margin-right:10px}
ul.legend span{display:inline-block;width:14px;height:10px;border:1px solid #777;margin-right:3px}
a{color:#20407a}";

/// The HTML page.
pub fn to_html(s: &Snapshot) -> String {
    let mut h = String::with_capacity(4096 + s.rows.len() * 400);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <title>switchyard stats</title><style>{STYLE}</style></head><body>\n\
         <h1>switchyard stats <span>table generation <b id=\"generation\">{}</b> · up {} s · \
         refreshes every {REFRESH_SECONDS} s</span></h1>\n\
         <p class=\"meta\"><a href=\"?csv\">CSV</a> · <a href=\"?json\">JSON</a> · \
         cur = requests (TCP: connections) in flight; total = sessions started; errors = failed \
         connects / failed responses</p>\n\
         <ul class=\"legend\"><li><span style=\"background:#b8f0b0\"></span>up</li>\
         <li><span style=\"background:#ff9a9a\"></span>down (health checks)</li>\
         <li><span style=\"background:#ffd090\"></span>ejected (failed connect)</li>\
         <li><span style=\"background:#a8c8f8\"></span>draining</li></ul>\n",
        s.generation, s.uptime_seconds
    );
    let header = "<tr><th class=\"name\">Endpoint</th><th>State</th><th>Cur</th><th>Max</th>\
                  <th>Total</th><th>Bytes in</th><th>Bytes out</th><th>Conn err</th>\
                  <th>Resp err</th><th class=\"check\">Last check</th></tr>";
    let mut in_table = false;
    let mut in_section = false;
    for row in &s.rows {
        match row.kind {
            "frontend" => {
                if in_table {
                    h.push_str("</table>\n");
                    in_table = false;
                }
                if in_section {
                    h.push_str("</section>\n");
                }
                in_section = true;
                let _ = write!(
                    h,
                    "<section class=\"frontend\" data-frontend=\"{fe}\">\
                     <h2>Frontend {fe} <small>{addr}</small></h2>\n<p class=\"meta\">open \
                     connections <b class=\"open\">{}</b> · unmatched requests \
                     <b class=\"unmatched\">{}</b></p>\n",
                    row.cur,
                    row.total,
                    fe = esc(&row.frontend),
                    addr = esc(s.addresses.get(&row.frontend).map_or("", String::as_str)),
                );
            }
            "entry" => {
                if in_table {
                    h.push_str("</table>\n");
                }
                in_table = true;
                let _ = write!(
                    h,
                    "<table class=\"entry\" data-entry=\"{e}\"><caption>Entry {e} \
                     <small>{info}</small></caption>\n{header}\n\
                     <tr class=\"entry {state}\">{cells}</tr>\n",
                    e = esc(&row.entry),
                    info = esc(s.entry_info.get(&row.entry).map_or("", String::as_str)),
                    state = esc(&row.state),
                    cells = cells_html(row, "total"),
                );
            }
            _ => {
                let _ = writeln!(
                    h,
                    "<tr class=\"endpoint {state}\" data-entry=\"{e}\" data-endpoint=\"{a}\">{cells}</tr>",
                    state = esc(&row.state),
                    e = esc(&row.entry),
                    a = esc(&row.endpoint),
                    cells = cells_html(row, &row.endpoint),
                );
            }
        }
    }
    if in_table {
        h.push_str("</table>\n");
    }
    if in_section {
        h.push_str("</section>\n");
    }
    if s.rows.iter().all(|r| r.kind != "entry") {
        h.push_str("<p>No entries in the routing table.</p>\n");
    }
    h.push_str("</body></html>\n");
    h
}

fn cells_html(row: &Row, name: &str) -> String {
    let mut c = String::new();
    let _ = write!(
        c,
        "<td class=\"c-endpoint\">{}</td><td class=\"c-state\">{}</td><td class=\"c-cur\">{}</td>\
         <td class=\"c-max\">{}</td><td class=\"c-total\">{}</td><td class=\"c-bytes_in\">{}</td>\
         <td class=\"c-bytes_out\">{}</td><td class=\"c-connect_errors\">{}</td>\
         <td class=\"c-response_errors\">{}</td><td class=\"c-last_check\">{}</td>",
        esc(name),
        esc(&row.state),
        row.cur,
        row.max,
        row.total,
        row.bytes_in,
        row.bytes_out,
        row.connect_errors,
        row.response_errors,
        esc(&row.last_check),
    );
    c
}

// === the server ===

/// The stats application (a Pingora `ServeHttp` on `--stats-port`).
pub struct StatsPage {
    pub table: TableReader,
    pub metrics: Arc<Metrics>,
    pub listeners: Listeners,
    pub started: Instant,
}

/// Which rendering a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Html,
    Csv,
    Json,
}

/// `?csv`, `;csv` (HAProxy's spelling) and `?json`; anything else is HTML.
pub fn format_of(path_and_query: &str) -> Format {
    let tail = path_and_query
        .rsplit_once(['?', ';'])
        .map_or("", |(_, t)| t);
    let first = tail.split('&').next().unwrap_or("");
    match first.split('=').next().unwrap_or("") {
        "csv" => Format::Csv,
        "json" => Format::Json,
        _ => Format::Html,
    }
}

impl StatsPage {
    /// Content type and body for a request target.
    pub fn answer(&self, path_and_query: &str) -> (&'static str, String) {
        let table = self.table.load();
        let snap = snapshot(&table, &self.metrics, &self.listeners, self.started);
        match format_of(path_and_query) {
            Format::Csv => ("text/csv; charset=utf-8", to_csv(&snap)),
            Format::Json => ("application/json", to_json(&snap)),
            Format::Html => ("text/html; charset=utf-8", to_html(&snap)),
        }
    }
}

#[async_trait]
impl ServeHttp for StatsPage {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let target = session
            .req_header()
            .uri
            .path_and_query()
            .map_or("/", |pq| pq.as_str())
            .to_string();
        let (content_type, body) = self.answer(&target);
        let len = body.len();
        let mut resp = Response::new(body.into_bytes());
        *resp.status_mut() = StatusCode::OK;
        let headers = resp.headers_mut();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static(content_type),
        );
        headers.insert(
            http::header::CACHE_CONTROL,
            HeaderValue::from_static("no-cache"),
        );
        headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(len));
        resp
    }
}

/// The per-endpoint Prometheus series, read from the live table at scrape time.
pub struct TableEndpoints(pub TableReader);

impl EndpointSource for TableEndpoints {
    fn endpoint_samples(&self) -> Vec<EndpointSample> {
        let table = self.0.load();
        let now = Instant::now();
        let mut out = Vec::new();
        for entry in &table.entries {
            for e in &entry.endpoints {
                out.push(EndpointSample {
                    entry: entry.name.to_string(),
                    endpoint: e.addr.to_string(),
                    in_flight: e.state.in_flight.load(Ordering::Relaxed),
                    up: e.state.is_up(now),
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{CheckResult, TcpFrontend};

    fn entry(name: &str, frontend: Frontend, addrs: &[&str]) -> Entry {
        Entry::fixture(name, frontend, addrs)
    }

    fn table() -> RoutingTable {
        let web = entry("web", Frontend::Http, &["10.0.0.1:80", "10.0.0.2:80"]);
        for _ in 0..3 {
            web.endpoints[1]
                .state
                .health
                .record(CheckResult::ConnectFailed, 2, 3);
        }
        let g = web.endpoints[0].state.0.enter();
        drop(g);
        let mut db = entry("db:5432", Frontend::Tcp(5432), &["10.0.0.7:5432"]);
        db.endpoints[0].draining = true;
        RoutingTable {
            generation: 9,
            entries: [web, db, entry("empty", Frontend::Http, &[])]
                .into_iter()
                .map(std::sync::Arc::new)
                .collect(),
            tcp: vec![TcpFrontend {
                port: 5432,
                entry: 1,
            }],
            ..Default::default()
        }
    }

    fn snap() -> Snapshot {
        let listeners = Listeners {
            bind: "127.0.0.1".parse().unwrap(),
            http_port: 80,
            https_port: None,
        };
        snapshot(&table(), &Metrics::new(), &listeners, Instant::now())
    }

    #[test]
    fn rows_follow_frontends_entries_and_endpoints() {
        let s = snap();
        let got: Vec<(&str, &str, &str, &str)> = s
            .rows
            .iter()
            .map(|r| {
                (
                    r.kind,
                    r.entry.as_str(),
                    r.endpoint.as_str(),
                    r.state.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("frontend", "", "", "open"),
                ("entry", "empty", "", "down"),
                ("entry", "web", "", "up"),
                ("endpoint", "web", "10.0.0.1:80", "up"),
                ("endpoint", "web", "10.0.0.2:80", "down"),
                ("frontend", "", "", "open"),
                ("entry", "db:5432", "", "draining"),
                ("endpoint", "db:5432", "10.0.0.7:5432", "draining"),
            ]
        );
        assert_eq!(s.rows[3].total, 1, "one session started");
        assert_eq!(s.rows[3].max, 1);
        assert_eq!(s.rows[4].last_check, "L4CON");
        assert_eq!(s.rows[5].frontend, "tcp:5432");
        assert!(s.rows.iter().all(|r| r.generation == 9));
    }

    #[test]
    fn csv_json_and_html_carry_the_same_rows() {
        let s = snap();
        let csv = to_csv(&s);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], COLUMNS.join(","));
        assert_eq!(lines.len(), s.rows.len() + 1);
        assert_eq!(
            lines[5],
            "endpoint,http,web,10.0.0.2:80,down,0,0,0,0,0,0,0,L4CON,9"
        );
        let json: serde_json::Value = serde_json::from_str(&to_json(&s)).unwrap();
        assert_eq!(json["rows"][4]["state"], "down");
        assert_eq!(json["rows"][4]["type"], "endpoint");
        let html = to_html(&s);
        assert!(html.contains("<meta http-equiv=\"refresh\""));
        assert!(!html.contains("<script"));
        assert_eq!(html.matches("<tr class=\"endpoint ").count(), 3);
        assert!(html.contains(
            "<tr class=\"endpoint down\" data-entry=\"web\" data-endpoint=\"10.0.0.2:80\">"
        ));
        assert!(html.contains("data-frontend=\"tcp:5432\""));
    }

    #[test]
    fn formats_from_the_query() {
        assert_eq!(format_of("/"), Format::Html);
        assert_eq!(format_of("/?csv"), Format::Csv);
        assert_eq!(format_of("/;csv"), Format::Csv);
        assert_eq!(format_of("/stats?json"), Format::Json);
        assert_eq!(format_of("/?json=1"), Format::Json);
        assert_eq!(format_of("/?other"), Format::Html);
    }

    #[test]
    fn escaping() {
        assert_eq!(
            esc("<a href='x'>&\""),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;"
        );
        assert_eq!(csv_cell("a,b"), "\"a,b\"");
        assert_eq!(csv_cell("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}

//! The stats page on `--stats-port`, in the spirit of HAProxy's: one section per frontend
//! (HTTP, TLS, each TCP port), one table per entry, one row per endpoint with its state,
//! sessions, rate, bytes, errors, responses by class and active health (last check, its
//! duration and age, failed checks, transitions to down, time in the current state,
//! downtime); plain HTML that refreshes itself, no JavaScript. `?json` gives the same rows;
//! `?csv` gives them in HAProxy's `show stat` layout (`# pxname,svname,…`, the documented 2.x
//! column order, empty where switchyard has no such thing) so tools written for HAProxy read
//! it. Also the scrape-time source of the per-endpoint Prometheus series (`TableEndpoints`).
//!
//! Traffic counters are the entry's own for each endpoint (`EntryState::totals`), so two
//! Services on one address each show their own traffic; health is per address, shared. All
//! is read from the live table and the metrics registry at request time; nothing is stored
//! here. It must not change routing state and must not know about Kubernetes.

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

use crate::decide::cause::Rejection;
use crate::decide::explain::endpoint_state;
use crate::ops::metrics::{EndpointSample, EndpointSource, Metrics};
use crate::table::{CheckResult, Entry, Frontend, RoutingTable, TableReader, Totals};

/// Seconds between automatic refreshes of the HTML page.
pub const REFRESH_SECONDS: u32 = 5;

/// One line of the page: a frontend, an entry (totals of its endpoints) or an endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
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
    /// Sessions in the last whole second, and the most seen.
    pub rate: u64,
    pub rate_max: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub connect_errors: u64,
    pub response_errors: u64,
    /// Frontends: requests refused before routing (HAProxy `ereq`).
    pub request_errors: u64,
    /// Responses by class: 1xx, 2xx, 3xx, 4xx, 5xx, other (none written).
    pub hrsp_1xx: u64,
    pub hrsp_2xx: u64,
    pub hrsp_3xx: u64,
    pub hrsp_4xx: u64,
    pub hrsp_5xx: u64,
    pub hrsp_other: u64,
    pub last_check: String,
    /// Duration of the last check in ms and seconds since it ended (empty: none yet).
    pub check_ms: String,
    pub check_age_s: String,
    /// Failed checks, and transitions to down.
    pub check_failures: u64,
    pub check_downs: u64,
    /// Seconds in the current health state (since start when it never changed).
    pub since_s: u64,
    /// Seconds down in all.
    pub downtime_s: u64,
    /// The entry's balance algorithm (empty on frontend rows).
    pub algorithm: String,
    /// How the entry's endpoints are spoken to: `http`, `h2c`, `https` or `h2` (empty on
    /// frontend rows and TCP entries). Not in the CSV: HAProxy's layout has no such column.
    pub protocol: String,
    pub generation: u64,
}

/// The HTML table's columns after the name: (CSS class = `Row` field, heading).
const HTML_COLUMNS: [(&str, &str); 25] = [
    ("state", "State"),
    ("cur", "Cur"),
    ("max", "Max"),
    ("total", "Total"),
    ("rate", "Rate"),
    ("rate_max", "Rmax"),
    ("bytes_in", "Bytes in"),
    ("bytes_out", "Bytes out"),
    ("connect_errors", "Conn err"),
    ("response_errors", "Resp err"),
    ("hrsp_1xx", "1xx"),
    ("hrsp_2xx", "2xx"),
    ("hrsp_3xx", "3xx"),
    ("hrsp_4xx", "4xx"),
    ("hrsp_5xx", "5xx"),
    ("hrsp_other", "Other"),
    ("last_check", "Last chk"),
    ("check_ms", "Chk ms"),
    ("check_age_s", "Chk age s"),
    ("check_failures", "Chk fail"),
    ("check_downs", "Chk down"),
    ("since_s", "Since s"),
    ("downtime_s", "Down s"),
    ("algorithm", "Algo"),
    ("protocol", "Proto"),
];

impl Row {
    /// The value of an `HTML_COLUMNS` cell.
    fn cell(&self, name: &str) -> String {
        let n = |v: u64| v.to_string();
        match name {
            "state" => self.state.clone(),
            "cur" => n(self.cur),
            "max" => n(self.max),
            "total" => n(self.total),
            "rate" => n(self.rate),
            "rate_max" => n(self.rate_max),
            "bytes_in" => n(self.bytes_in),
            "bytes_out" => n(self.bytes_out),
            "connect_errors" => n(self.connect_errors),
            "response_errors" => n(self.response_errors),
            "hrsp_1xx" => n(self.hrsp_1xx),
            "hrsp_2xx" => n(self.hrsp_2xx),
            "hrsp_3xx" => n(self.hrsp_3xx),
            "hrsp_4xx" => n(self.hrsp_4xx),
            "hrsp_5xx" => n(self.hrsp_5xx),
            "hrsp_other" => n(self.hrsp_other),
            "last_check" => self.last_check.clone(),
            "check_ms" => self.check_ms.clone(),
            "check_age_s" => self.check_age_s.clone(),
            "check_failures" => n(self.check_failures),
            "check_downs" => n(self.check_downs),
            "since_s" => n(self.since_s),
            "downtime_s" => n(self.downtime_s),
            "algorithm" => self.algorithm.clone(),
            "protocol" => self.protocol.clone(),
            _ => String::new(),
        }
    }

    fn add(&mut self, r: &Row) {
        self.cur += r.cur;
        self.max = self.max.max(r.max);
        self.total += r.total;
        self.rate += r.rate;
        self.rate_max = self.rate_max.max(r.rate_max);
        self.bytes_in += r.bytes_in;
        self.bytes_out += r.bytes_out;
        self.connect_errors += r.connect_errors;
        self.response_errors += r.response_errors;
        self.hrsp_1xx += r.hrsp_1xx;
        self.hrsp_2xx += r.hrsp_2xx;
        self.hrsp_3xx += r.hrsp_3xx;
        self.hrsp_4xx += r.hrsp_4xx;
        self.hrsp_5xx += r.hrsp_5xx;
        self.hrsp_other += r.hrsp_other;
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

/// Frontends to show: HTTP always, TLS when it listens or has entries, each TCP port (of
/// `--tcp-services` and of Gateway TCP and TLS listeners).
fn frontends(table: &RoutingTable, listeners: &Listeners) -> Vec<Frontend> {
    let mut out = vec![Frontend::Http];
    if listeners.https_port.is_some() || table.entries.iter().any(|e| e.frontend == Frontend::Https)
    {
        out.push(Frontend::Https);
    }
    let gateway = table.streams.ports.iter().map(|p| p.port);
    let mut tcp: Vec<u16> = table.tcp.iter().map(|t| t.port).chain(gateway).collect();
    tcp.sort_unstable();
    tcp.dedup();
    out.extend(tcp.into_iter().map(Frontend::Tcp));
    out
}

/// The `protocol` cell of an entry's rows: empty for a TCP entry (bytes are relayed as they
/// are), else the backend protocol.
fn protocol(entry: &Entry) -> String {
    match entry.frontend {
        Frontend::Tcp(_) => String::new(),
        _ => entry.upstream.protocol.label().to_string(),
    }
}

/// The caption's words for how an entry's endpoints are spoken to: the protocol, and over TLS
/// the server name verified (or that nothing is).
fn protocol_caption(entry: &Entry) -> String {
    let u = &entry.upstream;
    match (entry.frontend, u.protocol.tls(), u.verify) {
        (Frontend::Tcp(_), _, _) => "tcp".to_string(),
        (_, false, _) => u.protocol.label().to_string(),
        (_, true, true) => format!("{} to {}", u.protocol.label(), u.sni),
        (_, true, false) => format!("{} to {}, unverified", u.protocol.label(), u.sni),
    }
}

fn endpoint_row(fe: &str, entry: &Entry, i: usize, now: Instant, generation: u64) -> Row {
    let e = &entry.endpoints[i];
    let s = &e.state;
    let h = s.health.view(now);
    let checked = s.health.last() != CheckResult::None;
    let mut row = Row {
        kind: "endpoint",
        frontend: fe.to_string(),
        entry: entry.name.to_string(),
        endpoint: e.addr.to_string(),
        state: endpoint_state(entry, i, now).to_string(),
        last_check: s.health.last().code(),
        check_ms: h
            .last_check_duration
            .filter(|_| checked)
            .map(|d| format!("{:.1}", d.as_secs_f64() * 1000.0))
            .unwrap_or_default(),
        check_age_s: h
            .last_check_age
            .filter(|_| checked)
            .map(|d| d.as_secs().to_string())
            .unwrap_or_default(),
        check_failures: h.failed_checks,
        check_downs: h.downs,
        since_s: h.in_state.as_secs(),
        downtime_s: h.downtime.as_secs(),
        algorithm: entry.algorithm.as_str().to_string(),
        protocol: protocol(entry),
        generation,
        ..Row::default()
    };
    if let Some(t) = entry.state.totals.get(&e.addr) {
        fill_traffic(&mut row, &t, now);
    }
    row
}

/// The traffic counters of one endpoint of one entry.
fn fill_traffic(row: &mut Row, t: &Totals, now: Instant) {
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    row.cur = u64::from(t.in_flight.load(Ordering::Relaxed));
    row.max = u64::from(t.max_in_flight.load(Ordering::Relaxed));
    row.total = get(&t.sessions);
    row.rate = t.rate.per_second(now);
    row.rate_max = t.rate.max(now);
    row.bytes_in = get(&t.bytes_in);
    row.bytes_out = get(&t.bytes_out);
    row.connect_errors = get(&t.connect_errors);
    row.response_errors = get(&t.response_errors);
    let [r1, r2, r3, r4, r5, other] = &t.responses;
    row.hrsp_1xx = get(r1);
    row.hrsp_2xx = get(r2);
    row.hrsp_3xx = get(r3);
    row.hrsp_4xx = get(r4);
    row.hrsp_5xx = get(r5);
    row.hrsp_other = get(other);
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
        let (unmatched, refused) = match fe {
            Frontend::Tcp(_) => (0, 0),
            _ => (
                metrics.data.unmatched(&label).get(),
                Rejection::ALL
                    .iter()
                    .map(|r| metrics.data.rejected(&label, r.as_str()).get())
                    .sum(),
            ),
        };
        rows.push(Row {
            kind: "frontend",
            frontend: label.clone(),
            state: "open".into(),
            cur: u64::try_from(open).unwrap_or(0),
            total: unmatched,
            request_errors: refused,
            generation,
            ..Row::default()
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
                    "{}/{}:{} · {} · {} · {up}/{} up · {check}",
                    entry.key.namespace,
                    entry.key.service,
                    entry.key.port,
                    entry.algorithm,
                    protocol_caption(entry),
                    eps.len()
                ),
            );
            let mut totals = Row {
                kind: "entry",
                frontend: label.clone(),
                entry: entry.name.to_string(),
                state: state.into(),
                algorithm: entry.algorithm.as_str().to_string(),
                protocol: protocol(entry),
                generation,
                ..Row::default()
            };
            for r in &eps {
                totals.add(r);
            }
            // What switchyard answered itself for the entry (503 with no ready endpoint).
            let mut own = Row::default();
            fill_traffic(&mut own, &entry.state.own_answers, now);
            totals.add(&own);
            rows.push(totals);
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

/// HAProxy's `show stat` columns, in the documented 2.x order (management guide, "CSV
/// format"), up to `uweight`.
pub const HAPROXY_COLUMNS: [&str; 100] = [
    "pxname",
    "svname",
    "qcur",
    "qmax",
    "scur",
    "smax",
    "slim",
    "stot",
    "bin",
    "bout",
    "dreq",
    "dresp",
    "ereq",
    "econ",
    "eresp",
    "wretr",
    "wredis",
    "status",
    "weight",
    "act",
    "bck",
    "chkfail",
    "chkdown",
    "lastchg",
    "downtime",
    "qlimit",
    "pid",
    "iid",
    "sid",
    "throttle",
    "lbtot",
    "tracked",
    "type",
    "rate",
    "rate_lim",
    "rate_max",
    "check_status",
    "check_code",
    "check_duration",
    "hrsp_1xx",
    "hrsp_2xx",
    "hrsp_3xx",
    "hrsp_4xx",
    "hrsp_5xx",
    "hrsp_other",
    "hanafail",
    "req_rate",
    "req_rate_max",
    "req_tot",
    "cli_abrt",
    "srv_abrt",
    "comp_in",
    "comp_out",
    "comp_byp",
    "comp_rsp",
    "lastsess",
    "last_chk",
    "last_agt",
    "qtime",
    "ctime",
    "rtime",
    "ttime",
    "agent_status",
    "agent_code",
    "agent_duration",
    "check_desc",
    "agent_desc",
    "check_rise",
    "check_fall",
    "check_health",
    "agent_rise",
    "agent_fall",
    "agent_health",
    "addr",
    "cookie",
    "mode",
    "algo",
    "conn_rate",
    "conn_rate_max",
    "conn_tot",
    "intercepted",
    "dcon",
    "dses",
    "wrew",
    "connect",
    "reuse",
    "cache_lookups",
    "cache_hits",
    "srv_icur",
    "src_ilim",
    "qtime_max",
    "ctime_max",
    "rtime_max",
    "ttime_max",
    "eint",
    "idle_conn_cur",
    "safe_conn_cur",
    "used_conn_cur",
    "need_conn_est",
    "uweight",
];

/// HAProxy's word for a state.
fn haproxy_status(row: &Row) -> &'static str {
    match (row.kind, row.state.as_str()) {
        ("frontend", _) => "OPEN",
        (_, "up") => "UP",
        (_, "draining") => "DRAIN",
        // Ejected after a failed connect: HAProxy's `observe layer4` marks such a server down.
        _ => "DOWN",
    }
}

/// One row in HAProxy's layout (`HAPROXY_COLUMNS` order), what switchyard has filled in.
fn haproxy_cells(row: &Row) -> Vec<String> {
    let mut cells = vec![String::new(); HAPROXY_COLUMNS.len()];
    let mut set = |name: &str, v: String| {
        if let Some(i) = HAPROXY_COLUMNS.iter().position(|c| *c == name)
            && let Some(c) = cells.get_mut(i)
        {
            *c = v;
        }
    };
    let n = |v: u64| v.to_string();
    let (pxname, svname, kind) = match row.kind {
        "frontend" => (row.frontend.clone(), "FRONTEND".to_string(), 0),
        "entry" => (row.entry.clone(), "BACKEND".to_string(), 1),
        _ => (row.entry.clone(), row.endpoint.clone(), 2),
    };
    set("pxname", pxname);
    set("svname", svname);
    set("scur", n(row.cur));
    set("status", haproxy_status(row).to_string());
    set("type", n(kind));
    let mode = if row.frontend.starts_with("tcp:") {
        "tcp"
    } else {
        "http"
    };
    set("mode", mode.to_string());
    if kind == 0 {
        set("ereq", n(row.request_errors));
        return cells;
    }
    for (name, v) in [
        ("qcur", 0),
        ("qmax", 0),
        ("smax", row.max),
        ("stot", row.total),
        ("lbtot", row.total),
        ("bin", row.bytes_in),
        ("bout", row.bytes_out),
        ("econ", row.connect_errors),
        ("eresp", row.response_errors),
        ("rate", row.rate),
        ("rate_max", row.rate_max),
        ("hrsp_1xx", row.hrsp_1xx),
        ("hrsp_2xx", row.hrsp_2xx),
        ("hrsp_3xx", row.hrsp_3xx),
        ("hrsp_4xx", row.hrsp_4xx),
        ("hrsp_5xx", row.hrsp_5xx),
        ("hrsp_other", row.hrsp_other),
    ] {
        set(name, n(v));
    }
    set("algo", row.algorithm.clone());
    if kind == 1 {
        return cells;
    }
    set("weight", "1".into());
    set("act", "1".into());
    set("bck", "0".into());
    set("chkfail", n(row.check_failures));
    set("chkdown", n(row.check_downs));
    set("lastchg", n(row.since_s));
    set("downtime", n(row.downtime_s));
    set("addr", row.endpoint.clone());
    // "L7OK 200" is status L7OK, code 200.
    let (status, code) = row
        .last_check
        .split_once(' ')
        .unwrap_or((row.last_check.as_str(), ""));
    if status != "-" {
        set("check_status", status.to_string());
        set("check_code", code.to_string());
        set("last_chk", row.last_check.clone());
    }
    // HAProxy gives the check duration in whole milliseconds.
    if let Ok(ms) = row.check_ms.parse::<f64>() {
        set("check_duration", format!("{}", ms.round() as u64));
    }
    cells
}

/// CSV in HAProxy's `show stat` layout: a `# `-prefixed header line, then one line per row
/// (frontends as `FRONTEND`, entries as `BACKEND`, endpoints by address).
pub fn to_csv(s: &Snapshot) -> String {
    let mut out = format!("# {}\n", HAPROXY_COLUMNS.join(","));
    for row in &s.rows {
        let cells: Vec<String> = haproxy_cells(row).iter().map(|c| csv_cell(c)).collect();
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
table{border-collapse:collapse;margin:6px 0 12px;table-layout:auto}
caption small{font-weight:normal;color:#555;margin-left:8px}
th.name,td.c-endpoint{width:210px}th.check,td.c-last_check{width:110px}
caption{text-align:left;font-weight:bold;padding:4px 0}
th,td{border:1px solid #999;padding:2px 4px;text-align:right;white-space:nowrap;font-size:12px}
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
         cur = requests (TCP: connections) in flight; total = sessions started; rate = sessions \
         in the last second; errors = failed connects / failed responses; check ms / age s = the \
         last check's duration and age; since s = time in the current health state</p>\n\
         <ul class=\"legend\"><li><span style=\"background:#b8f0b0\"></span>up</li>\
         <li><span style=\"background:#ff9a9a\"></span>down (health checks)</li>\
         <li><span style=\"background:#ffd090\"></span>ejected (failed connect)</li>\
         <li><span style=\"background:#a8c8f8\"></span>draining</li></ul>\n",
        s.generation, s.uptime_seconds
    );
    let mut header = String::from("<tr><th class=\"name\">Endpoint</th>");
    for (_, title) in HTML_COLUMNS {
        let _ = write!(header, "<th>{title}</th>");
    }
    header.push_str("</tr>");
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
                     <b class=\"unmatched\">{}</b> · refused requests \
                     <b class=\"refused\">{}</b></p>\n",
                    row.cur,
                    row.total,
                    row.request_errors,
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
    let mut c = format!("<td class=\"c-endpoint\">{}</td>", esc(name));
    for (class, _) in HTML_COLUMNS {
        let _ = write!(c, "<td class=\"c-{class}\">{}</td>", esc(&row.cell(class)));
    }
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
    fn visit(&self, f: &mut dyn FnMut(EndpointSample<'_>)) {
        let table = self.0.load();
        let now = Instant::now();
        for entry in &table.entries {
            for e in &entry.endpoints {
                f(EndpointSample {
                    entry: &entry.name,
                    endpoint: e.addr,
                    in_flight: e.state.in_flight.load(Ordering::Relaxed),
                    up: e.state.is_up(now),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::TcpFrontend;

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
        let totals = web
            .state
            .totals
            .get_or_insert(web.endpoints[0].addr, &web.endpoints);
        let g = web.endpoints[0].state.0.enter(totals, Instant::now());
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
    fn rows_and_captions_show_the_backend_protocol() {
        use crate::table::upstream::{BackendProtocol, Upstream};
        let mut t = table();
        let mut web = (*t.entries[0]).clone();
        web.upstream = Upstream {
            protocol: BackendProtocol::H2,
            sni: "web.default.svc".into(),
            verify: true,
            ca_file: None,
            ca_bundle: None,
            client_cert: None,
            send_proxy: false,
            subject_alt_names: None,
        };
        t.entries[0] = Arc::new(web);
        let listeners = Listeners {
            bind: "127.0.0.1".parse().unwrap(),
            http_port: 80,
            https_port: None,
        };
        let s = snapshot(&t, &Metrics::new(), &listeners, Instant::now());
        let proto = |entry: &str, kind: &str| {
            s.rows
                .iter()
                .find(|r| r.entry == entry && r.kind == kind)
                .map(|r| r.protocol.as_str())
        };
        assert_eq!(proto("web", "entry"), Some("h2"));
        assert_eq!(proto("web", "endpoint"), Some("h2"));
        assert_eq!(proto("empty", "entry"), Some("http"));
        assert_eq!(proto("db:5432", "entry"), Some(""), "bytes, no protocol");
        assert!(s.entry_info["web"].contains(" · h2 to web.default.svc · "));
        assert!(s.entry_info["empty"].contains(" · http · "));
        let html = to_html(&s);
        assert!(html.contains("<th>Proto</th>"));
        assert!(html.contains("<td class=\"c-protocol\">h2</td>"), "{html}");
        let json: serde_json::Value = serde_json::from_str(&to_json(&s)).unwrap();
        assert!(
            json["rows"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["protocol"] == "h2")
        );
    }

    #[test]
    fn two_entries_on_one_address_count_their_own_traffic() {
        let web = entry("web", Frontend::Http, &["10.0.0.1:80"]);
        let api = entry("api", Frontend::Http, &["10.0.0.1:80"]);
        // One address, one shared health state: as the translator builds it.
        let api = Entry {
            endpoints: web.endpoints.clone(),
            ..api
        };
        let t = web
            .state
            .totals
            .get_or_insert(web.endpoints[0].addr, &web.endpoints);
        for _ in 0..3 {
            drop(
                web.endpoints[0]
                    .state
                    .0
                    .enter(Arc::clone(&t), Instant::now()),
            );
        }
        let table = RoutingTable {
            generation: 1,
            entries: vec![Arc::new(web), Arc::new(api)],
            ..Default::default()
        };
        let listeners = Listeners {
            bind: "127.0.0.1".parse().unwrap(),
            http_port: 80,
            https_port: None,
        };
        let s = snapshot(&table, &Metrics::new(), &listeners, Instant::now());
        let total = |e: &str| {
            s.rows
                .iter()
                .find(|r| r.kind == "endpoint" && r.entry == e)
                .map(|r| r.total)
        };
        assert_eq!(total("web"), Some(3));
        assert_eq!(total("api"), Some(0));
    }

    #[test]
    fn csv_is_haproxys_show_stat_layout() {
        let s = snap();
        let csv = to_csv(&s);
        let lines: Vec<&str> = csv.lines().collect();
        assert!(lines[0].starts_with(
            "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,\
             wretr,wredis,status,weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,\
             sid,throttle,lbtot,tracked,type,rate,rate_lim,rate_max,check_status,check_code,\
             check_duration,hrsp_1xx,"
        ));
        assert!(lines[0].ends_with(",need_conn_est,uweight"));
        assert_eq!(lines.len(), s.rows.len() + 1);
        let header: Vec<&str> = lines[0].trim_start_matches("# ").split(',').collect();
        let row = |i: usize| -> std::collections::HashMap<&str, &str> {
            header.iter().copied().zip(lines[i].split(',')).collect()
        };
        let fe = row(1);
        assert_eq!(
            (fe["pxname"], fe["svname"], fe["status"], fe["type"]),
            ("http", "FRONTEND", "OPEN", "0")
        );
        let be = row(3);
        assert_eq!(
            (be["pxname"], be["svname"], be["type"], be["stot"]),
            ("web", "BACKEND", "1", "1")
        );
        let down = row(5);
        assert_eq!(down["pxname"], "web");
        assert_eq!(down["svname"], "10.0.0.2:80");
        assert_eq!(down["status"], "DOWN");
        assert_eq!(down["check_status"], "L4CON");
        assert_eq!(down["chkfail"], "3");
        assert_eq!(down["chkdown"], "1");
        assert_eq!(down["addr"], "10.0.0.2:80");
        assert_eq!(down["type"], "2");
        assert_eq!(
            down["qlimit"], "",
            "what switchyard does not have stays empty"
        );
        assert_eq!(row(8)["status"], "DRAIN");
        assert_eq!(row(8)["mode"], "tcp");
    }

    #[test]
    fn csv_json_and_html_carry_the_same_rows() {
        let s = snap();
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

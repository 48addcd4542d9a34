//! End-to-end tests of observability and operations (issue 5): Prometheus metrics after known
//! traffic, endpoint series removal, metric naming conventions, active health checks (TCP and
//! HTTP, fail-open), the stats page rendered by headless Chromium, access logs, and `/explain`
//! against the route the data plane really takes. Everything on 127.0.0.1; every wait bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const ANN_CHECK_INTERVAL: &str = "serviceloadbalancer/lb.check-interval";
const ANN_CHECK_PATH: &str = "serviceloadbalancer/lb.check-path";

fn objs(svcs: Vec<Svc>, slices: Vec<Vec<Value>>) -> Vec<Value> {
    let mut v: Vec<Value> = svcs.into_iter().map(Value::from).collect();
    v.extend(slices.into_iter().flatten());
    v
}

fn ep(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

// === metrics helpers ===

/// Prometheus text -> `name{labels}` (as printed, labels sorted) -> value.
fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

async fn metrics(sy: &Switchyard) -> (String, BTreeMap<String, f64>) {
    let r = sy.admin("/metrics").await;
    assert_eq!(r.status, 200);
    let map = parse_metrics(&r.body);
    (r.body, map)
}

fn value(m: &BTreeMap<String, f64>, key: &str) -> f64 {
    *m.get(key).unwrap_or_else(|| {
        let near: Vec<&String> = m
            .keys()
            .filter(|k| k.starts_with(key.split('{').next().unwrap_or("")))
            .collect();
        panic!("no sample {key}; samples of that name: {near:?}")
    })
}

// === stats helpers ===

/// The endpoint rows of `?json`: (entry, endpoint) -> row.
async fn stats_rows(sy: &Switchyard) -> BTreeMap<(String, String), Value> {
    let r = sy.stats("/?json").await;
    assert_eq!(r.status, 200, "{r:?}");
    r.json()["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|row| row["type"] == "endpoint")
        .map(|row| {
            (
                (
                    row["entry"].as_str().unwrap().to_string(),
                    row["endpoint"].as_str().unwrap().to_string(),
                ),
                row.clone(),
            )
        })
        .collect()
}

async fn endpoint_state(sy: &Switchyard, entry: &str, port: u16) -> Option<(String, String)> {
    let rows = stats_rows(sy).await;
    let row = rows.get(&(entry.to_string(), ep(port)))?;
    Some((
        row["state"].as_str()?.to_string(),
        row["last_check"].as_str()?.to_string(),
    ))
}

// 1 ---------------------------------------------------------------------------

/// After a known sequence of requests the counters and histograms hold exactly what happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_after_a_known_sequence_of_requests() {
    let b1 = Backend::start("b1").await;
    let b2 = Backend::start("b2").await;
    let live = Backend::start("live").await;
    let dead_guard = DeadPort::new();
    let dead_port = dead_guard.port;
    let sy = switchyard(objs(
        vec![svc("web", 80), svc("empty", 80), svc("flaky", 80)],
        vec![
            slices("web", &[&b1, &b2]),
            vec![slice("flaky", "", dead_port), slice("flaky", "", live.port)],
        ],
    ))
    // Passive health only here: the active checker must not take the dead endpoint out first.
    .args(&["--check-interval", "0"])
    .start()
    .await;

    let mut response_bytes = 0usize;
    for i in 0..4 {
        let r = sy.get(&format!("/web/x{i}")).await;
        assert_eq!(r.status, 200, "{r:?}");
        response_bytes += r.body.len();
    }
    // A request with a 5-byte body, over a raw connection.
    let mut s = TcpStream::connect(("127.0.0.1", sy.http_port))
        .await
        .unwrap();
    s.write_all(
        b"POST /web/p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
    )
    .await
    .unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(REQUEST_TIMEOUT, s.read_to_end(&mut raw))
        .await
        .unwrap()
        .unwrap();
    let raw = String::from_utf8_lossy(&raw);
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    let (_, body) = raw.split_once("\r\n\r\n").unwrap();
    response_bytes += body.len();
    for _ in 0..3 {
        assert_eq!(sy.get("/nope").await.status, 404);
    }
    assert_eq!(sy.get("/empty").await.status, 503);
    for _ in 0..4 {
        let r = sy.get("/flaky").await;
        assert_eq!(r.status, 200, "a failed connect is retried: {r:?}");
        assert_eq!(r.backend().as_deref(), Some("live"));
    }

    // The stats page counts the 503 switchyard answered for the entry without endpoints, as
    // the metrics do (it showed 0).
    let page = sy.stats("/?json").await.json();
    let empty = page["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["type"] == "entry" && row["entry"] == "empty")
        .cloned()
        .unwrap_or_default();
    assert_eq!(empty["hrsp_5xx"], 1, "{empty}");

    let (_, m) = metrics(&sy).await;
    let web = |name: &str| value(&m, &format!("switchyard_{name}{{entry=\"web\"}}"));
    assert_eq!(
        value(
            &m,
            r#"switchyard_http_requests_total{class="2xx",entry="web"}"#
        ),
        5.0
    );
    assert_eq!(
        value(
            &m,
            r#"switchyard_http_requests_total{class="5xx",entry="empty"}"#
        ),
        1.0
    );
    assert_eq!(
        value(
            &m,
            r#"switchyard_http_requests_total{class="4xx",entry="web"}"#
        ),
        0.0
    );
    assert_eq!(
        value(
            &m,
            r#"switchyard_http_unmatched_requests_total{frontend="http"}"#
        ),
        3.0
    );
    assert_eq!(web("http_request_duration_seconds_count"), 5.0);
    assert!(web("http_request_duration_seconds_sum") > 0.0);
    assert_eq!(
        value(
            &m,
            r#"switchyard_http_request_duration_seconds_bucket{entry="web",le="+Inf"}"#
        ),
        5.0
    );
    let connects = web("upstream_connect_duration_seconds_count");
    assert!(
        (1.0..=5.0).contains(&connects),
        "new upstream connections: {connects}"
    );
    assert_eq!(web("http_request_bytes_total"), 5.0);
    assert_eq!(web("http_response_bytes_total"), response_bytes as f64);
    let flaky = |name: &str| value(&m, &format!("switchyard_{name}{{entry=\"flaky\"}}"));
    assert!(
        flaky("http_retries_total") >= 1.0,
        "the dead endpoint was tried"
    );
    assert_eq!(
        flaky("http_retries_total"),
        flaky("passive_ejections_total"),
        "every try of the dead endpoint ejects it and retries"
    );
    assert_eq!(
        value(
            &m,
            r#"switchyard_http_requests_total{class="2xx",entry="flaky"}"#
        ),
        4.0
    );
    // The same requests by exact code: the server errors' series from 0 with the entry's first
    // request, any other code with its first use.
    let code = |entry: &str, code: &str| {
        value(
            &m,
            &format!(r#"switchyard_http_responses_total{{code="{code}",entry="{entry}"}}"#),
        )
    };
    assert_eq!(code("web", "200"), 5.0);
    assert_eq!(code("flaky", "200"), 4.0);
    assert_eq!(code("empty", "503"), 1.0);
    for c in ["500", "502", "504", "5xx_other"] {
        assert_eq!(code("web", c), 0.0, "{c}");
        assert_eq!(code("empty", c), 0.0, "{c}");
    }
    assert_eq!(code("web", "503"), 0.0);
    assert!(
        !m.contains_key(r#"switchyard_http_responses_total{code="404",entry="web"}"#),
        "a code never answered has no series"
    );
    let by_code: f64 = m
        .iter()
        .filter(|(k, _)| k.starts_with("switchyard_http_responses_total{"))
        .map(|(_, v)| v)
        .sum();
    let by_class: f64 = m
        .iter()
        .filter(|(k, _)| k.starts_with("switchyard_http_requests_total{"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(by_code, by_class, "every counted request has one code");
    assert_eq!(by_code, 10.0);
    for b in [&b1, &b2] {
        let labels = format!("{{endpoint=\"{}\",entry=\"web\"}}", ep(b.port));
        assert_eq!(
            value(&m, &format!("switchyard_endpoint_in_flight{labels}")),
            0.0
        );
        assert_eq!(value(&m, &format!("switchyard_endpoint_up{labels}")), 1.0);
    }
    // The dead endpoint has its series too (its `up` depends on the 5 s ejection still running
    // at scrape time, so only its presence is checked here).
    let dead = format!("{{endpoint=\"{}\",entry=\"flaky\"}}", ep(dead_port));
    assert_eq!(
        value(&m, &format!("switchyard_endpoint_in_flight{dead}")),
        0.0
    );

    // The stats page counts the same traffic per endpoint.
    let rows = stats_rows(&sy).await;
    let sessions: u64 = [&b1, &b2]
        .iter()
        .map(|b| {
            rows[&("web".to_string(), ep(b.port))]["total"]
                .as_u64()
                .unwrap()
        })
        .sum();
    assert_eq!(sessions, 5);
    let out: u64 = [&b1, &b2]
        .iter()
        .map(|b| {
            rows[&("web".to_string(), ep(b.port))]["bytes_out"]
                .as_u64()
                .unwrap()
        })
        .sum();
    assert_eq!(out, response_bytes as u64);
    assert!(
        rows[&("flaky".to_string(), ep(dead_port))]["connect_errors"]
            .as_u64()
            .unwrap()
            >= 1
    );

    // Open client connections, by frontend.
    let open = |m: &BTreeMap<String, f64>| {
        value(
            m,
            r#"switchyard_downstream_open_connections{frontend="http"}"#,
        )
    };
    let mut conn = OneConn::open(sy.http_port).await;
    assert_eq!(conn.get("/web", &[]).await.unwrap().status, 200);
    assert!(
        eventually(Duration::from_secs(10), || async {
            open(&metrics(&sy).await.1) == 1.0
        })
        .await,
        "one client connection open"
    );
    drop(conn);
    assert!(
        eventually(Duration::from_secs(10), || async {
            open(&metrics(&sy).await.1) == 0.0
        })
        .await,
        "closed"
    );

    // The access log is off by default: nothing on stdout.
    assert_eq!(sy.stdout(), "");
}

// 2 ---------------------------------------------------------------------------

/// An endpoint (or entry) that leaves the table takes its series with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_removed_from_the_table_removes_its_series() {
    let b1 = Backend::start("b1").await;
    let b2 = Backend::start("b2").await;
    let b3 = Backend::start("b3").await;
    let sy = switchyard(objs(
        vec![svc("web", 80), svc("gone", 80)],
        vec![slices("web", &[&b1, &b2]), slices("gone", &[&b3])],
    ))
    .start()
    .await;
    assert_eq!(sy.get("/gone").await.status, 200);
    let (text, _) = metrics(&sy).await;
    assert!(
        text.contains(&format!("endpoint=\"{}\"", ep(b2.port))),
        "{text}"
    );
    assert!(text.contains("entry=\"gone\""));

    sy.rewrite(&objs(vec![svc("web", 80)], vec![slices("web", &[&b1])]));
    let b2_series = format!("endpoint=\"{}\"", ep(b2.port));
    let gone = eventually(Duration::from_secs(10), || async {
        let (text, _) = metrics(&sy).await;
        !text.contains(&b2_series) && !text.contains("entry=\"gone\"")
    })
    .await;
    let (text, _) = metrics(&sy).await;
    assert!(
        gone,
        "series of removed endpoint/entry still there:\n{text}"
    );
    assert!(
        text.contains(&format!(
            "switchyard_endpoint_up{{endpoint=\"{}\",entry=\"web\"}} 1",
            ep(b1.port)
        )),
        "the remaining endpoint keeps its series:\n{text}"
    );
    assert!(
        text.contains("switchyard_entry_endpoints{entry=\"web\"} 1"),
        "{text}"
    );
}

/// `--metrics-endpoint-series=false`: no series per endpoint, the per-entry ones still there
/// and counting what the table holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_endpoint_series_can_be_turned_off() {
    let b1 = Backend::start("b1").await;
    let b2 = Backend::start("b2").await;
    let sy = switchyard(objs(vec![svc("web", 80)], vec![slices("web", &[&b1, &b2])]))
        .args(&["--metrics-endpoint-series=false"])
        .start()
        .await;
    assert_eq!(sy.get("/web").await.status, 200);
    let (text, m) = metrics(&sy).await;
    assert!(!text.contains("switchyard_endpoint_"), "{text}");
    assert!(!text.contains(&ep(b1.port)), "{text}");
    assert_eq!(value(&m, r#"switchyard_entry_endpoints{entry="web"}"#), 2.0);
    assert_eq!(
        value(&m, r#"switchyard_entry_endpoints_up{entry="web"}"#),
        2.0
    );
    assert_eq!(value(&m, r#"switchyard_entry_in_flight{entry="web"}"#), 0.0);
}

// 3 ---------------------------------------------------------------------------

/// Metric names follow Prometheus conventions, labels are bounded, and every exposed metric is
/// documented in the metrics table of docs/operations.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metric_names_follow_prometheus_conventions() {
    let b1 = Backend::start("b1").await;
    let sy = switchyard(objs(vec![svc("web", 80)], vec![slices("web", &[&b1])]))
        .args(&["--check-interval", "200ms"])
        .start()
        .await;
    assert_eq!(sy.get("/web").await.status, 200);
    assert_eq!(sy.get("/nope").await.status, 404);
    assert!(
        eventually(Duration::from_secs(10), || async {
            metrics(&sy)
                .await
                .0
                .contains("switchyard_health_checks_total")
        })
        .await
    );
    let (text, _) = metrics(&sy).await;

    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut helps: BTreeSet<String> = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            types.insert(name.to_string(), kind.to_string());
        } else if let Some(rest) = line.strip_prefix("# HELP ") {
            helps.insert(rest.split(' ').next().unwrap().to_string());
        }
    }
    assert!(types.len() >= 15, "too few families: {types:?}");
    for name in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_threads",
        "process_start_time_seconds",
        "switchyard_upstream_response_duration_seconds",
    ] {
        assert!(types.contains_key(name), "{name} missing: {types:?}");
    }
    let metrics_doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md"))
            .unwrap();
    let mut problems = Vec::new();
    for (name, kind) in &types {
        let ok_chars = name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        // `process_*` are the standard process metrics, named as every exporter does.
        if !(name.starts_with("switchyard_") || name.starts_with("process_")) || !ok_chars {
            problems.push(format!("{name}: not switchyard_[a-z0-9_] or process_*"));
        }
        if !helps.contains(name) {
            problems.push(format!("{name}: no HELP"));
        }
        match kind.as_str() {
            "counter" if !name.ends_with("_total") => {
                problems.push(format!("{name}: counter without _total"))
            }
            "gauge" | "histogram" if name.ends_with("_total") => {
                problems.push(format!("{name}: {kind} ending in _total"))
            }
            "histogram" if !(name.ends_with("_seconds") || name.ends_with("_bytes")) => {
                problems.push(format!("{name}: histogram without a unit suffix"))
            }
            "counter" | "gauge" | "histogram" => {}
            other => problems.push(format!("{name}: unexpected type {other}")),
        }
        if (name.contains("duration") || name.contains("latency")) && !name.ends_with("_seconds") {
            problems.push(format!("{name}: a time without _seconds"));
        }
        if name.contains("bytes") && !(name.ends_with("_bytes") || name.ends_with("_bytes_total")) {
            problems.push(format!("{name}: bytes not at the end"));
        }
        if !metrics_doc.contains(&format!("`{name}`")) {
            problems.push(format!(
                "{name}: not in the metrics table of docs/operations.md"
            ));
        }
    }
    // Every sample belongs to a declared family, and no label can explode.
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name = line.split(['{', ' ']).next().unwrap();
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| types.get(*f).is_some_and(|k| k == "histogram"))
            })
            .unwrap_or(name);
        if !types.contains_key(family) {
            problems.push(format!("sample of undeclared family: {line}"));
        }
        if let Some(labels) = line.split_once('{').map(|(_, l)| l) {
            for pair in labels.split("\",") {
                let key = pair.split('=').next().unwrap_or("");
                if ["path", "client", "ip", "url", "host"].contains(&key) {
                    problems.push(format!("unbounded label {key}: {line}"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// 4 ---------------------------------------------------------------------------

/// Killing a backend marks it down within interval × fall (plus scheduling slack); traffic
/// avoids it without a single failed connect; bringing it back brings it up after rise checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_take_a_dead_backend_out_and_bring_it_back() {
    let b1 = Backend::start("b1").await;
    let mut b2 = Backend::start("b2").await;
    let interval = Duration::from_millis(300);
    let sy = switchyard(objs(
        vec![svc("web", 80), svc("cart", 80).sticky()],
        vec![slices("web", &[&b1, &b2]), slices("cart", &[&b1, &b2])],
    ))
    .args(&["--check-interval", "300ms", "--check-timeout", "500ms"])
    .start()
    .await;
    let up_and_checked = |port: u16| {
        let sy = &sy;
        async move { endpoint_state(sy, "web", port).await == Some(("up".into(), "L4OK".into())) }
    };
    assert!(
        eventually(Duration::from_secs(10), || async {
            up_and_checked(b1.port).await && up_and_checked(b2.port).await
        })
        .await,
        "both endpoints checked and up: {:?}",
        stats_rows(&sy).await
    );

    // A client pinned to b2 by its SERVERID cookie.
    let mut pinned_to_b2 = None;
    for _ in 0..4 {
        let r = sy.get("/cart").await;
        if r.backend().as_deref() == Some("b2") {
            let c = r.header("set-cookie").unwrap();
            pinned_to_b2 = Some(c.split(';').next().unwrap().to_string());
            break;
        }
    }
    let cookie = pinned_to_b2.expect("round-robin reaches b2 within 4 requests");
    let r = sy.get_with("/cart", &[("cookie", &cookie)]).await;
    assert_eq!(r.backend().as_deref(), Some("b2"));

    let port2 = b2.port;
    b2.stop().await;
    let stopped = Instant::now();
    // interval × fall, with room for a slow machine (a check may have just run, and each
    // failing connect is refused at once on 127.0.0.1).
    let limit = interval * 3 * 4 + Duration::from_secs(3);
    let down = eventually(limit, || async {
        endpoint_state(&sy, "web", port2).await == Some(("down".into(), "L4CON".into()))
    })
    .await;
    assert!(
        down,
        "not marked down within {limit:?}: {:?}",
        endpoint_state(&sy, "web", port2).await
    );
    eprintln!(
        "marked down {:?} after the backend stopped",
        stopped.elapsed()
    );
    let (_, m) = metrics(&sy).await;
    assert_eq!(
        value(
            &m,
            &format!(
                "switchyard_endpoint_up{{endpoint=\"{}\",entry=\"web\"}}",
                ep(port2)
            )
        ),
        0.0
    );

    let counts = spread(&sy, "/web", 10).await;
    assert_eq!(
        counts,
        BTreeMap::from([("b1".to_string(), 10)]),
        "traffic avoids it"
    );
    let (_, m) = metrics(&sy).await;
    assert_eq!(
        m.get(r#"switchyard_passive_ejections_total{entry="web"}"#)
            .copied()
            .unwrap_or(0.0),
        0.0,
        "no request ever failed to connect: the active check kept traffic away"
    );
    assert!(value(&m, r#"switchyard_health_transitions_total{state="down"}"#) >= 1.0);
    let r = sy.get_with("/cart", &[("cookie", &cookie)]).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.backend().as_deref(),
        Some("b1"),
        "the sticky client is re-pinned"
    );
    assert!(
        r.header("set-cookie").is_some_and(|c| c != cookie),
        "with a new cookie: {r:?}"
    );

    let _b2 = Backend::builder("b2").port(port2).start().await;
    let back = eventually(Duration::from_secs(10), || up_and_checked(port2)).await;
    assert!(back, "back up after rise checks");
    let counts = spread(&sy, "/web", 10).await;
    assert_eq!(counts.get("b2"), Some(&5), "traffic returns: {counts:?}");
    let (_, m) = metrics(&sy).await;
    assert!(value(&m, r#"switchyard_health_transitions_total{state="up"}"#) >= 1.0);
}

// 5 ---------------------------------------------------------------------------

/// A backend whose `/health` answers a settable status ([`Backend::set_health`]).
async fn with_health(name: &str) -> Backend {
    Backend::builder(name).health("/health").start().await
}

/// The `lb.check-path` annotation switches to an HTTP check (2xx/3xx pass); when every
/// endpoint fails, fail-open (the default) still sends traffic to all of them, and
/// `--health-fail-open=false` answers 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_checks_and_fail_open() {
    let h1 = with_health("h1").await;
    let h2 = with_health("h2").await;
    let world = || {
        objs(
            vec![
                svc("app", 80)
                    .ann(ANN_CHECK_PATH, "/health")
                    .ann(ANN_CHECK_INTERVAL, "200ms"),
            ],
            vec![vec![slice("app", "", h1.port), slice("app", "", h2.port)]],
        )
    };
    // The flag turns default checks off: only the annotation asks for them.
    let open = switchyard(world())
        .args(&["--check-interval", "0", "--check-timeout", "500ms"])
        .start()
        .await;
    let closed = switchyard(world())
        .args(&[
            "--check-interval",
            "0",
            "--check-timeout",
            "500ms",
            "--health-fail-open=false",
        ])
        .start()
        .await;
    let (p1, p2) = (h1.port, h2.port);
    let both = BTreeMap::from([("h1".to_string(), 5), ("h2".to_string(), 5)]);

    assert!(
        wait_states(&[&open, &closed], "app", &[p1, p2], |s, c| s == "up"
            && c == "L7OK 200")
        .await,
        "{:?}",
        stats_rows(&open).await
    );
    assert_eq!(spread(&open, "/app", 10).await, both);

    h1.set_health(500);
    assert!(
        wait_states(&[&open, &closed], "app", &[p1], |s, c| s == "down"
            && c == "L7STS 500")
        .await,
        "{:?}",
        stats_rows(&open).await
    );
    assert_eq!(
        spread(&open, "/app", 10).await,
        BTreeMap::from([("h2".to_string(), 10)]),
        "a down endpoint gets no new traffic"
    );

    h2.set_health(503);
    assert!(
        wait_states(&[&open, &closed], "app", &[p1, p2], |s, _| s == "down").await,
        "{:?}",
        stats_rows(&open).await
    );
    assert_eq!(
        spread(&open, "/app", 10).await,
        both,
        "fail-open: every endpoint is down, so traffic goes to all of them"
    );
    let x = open.admin("/explain?path=/app").await.json();
    assert_eq!(x["entry"]["health_gate"], "fail_open", "{x}");
    for _ in 0..3 {
        assert_eq!(
            closed.get("/app").await.status,
            503,
            "fail-open off: all down answers 503"
        );
    }
    let x = closed.admin("/explain?path=/app").await.json();
    assert_eq!(x["outcome"], "unavailable", "{x}");

    h1.set_health(200);
    h2.set_health(204);
    assert!(
        wait_states(&[&open, &closed], "app", &[p1, p2], |s, _| s == "up").await,
        "{:?}",
        stats_rows(&closed).await
    );
    assert_eq!(
        closed.get("/app").await.status,
        200,
        "recovered endpoints take traffic again"
    );
    assert_eq!(spread(&open, "/app", 10).await, both);
}

/// Waits (10 s at most) until every endpoint `ports` of `entry`, on every process, has a state
/// and last check for which `want` holds.
async fn wait_states(
    sys: &[&Switchyard],
    entry: &str,
    ports: &[u16],
    want: impl Fn(&str, &str) -> bool,
) -> bool {
    eventually(Duration::from_secs(10), || async {
        for sy in sys {
            for &p in ports {
                match endpoint_state(sy, entry, p).await {
                    Some((s, c)) if want(&s, &c) => {}
                    _ => return false,
                }
            }
        }
        true
    })
    .await
}

// 6 ---------------------------------------------------------------------------

/// The Chromium binary, or a clear failure.
fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("CHROMIUM") {
        return PathBuf::from(p);
    }
    let names = [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ];
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for n in names {
            let candidate = dir.join(n);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "headless Chromium is required to test the stats page, but none of {names:?} is in \
         PATH (or set CHROMIUM=/path/to/chrome). Install it: `apt-get install -y chromium` \
         (.ci/run does this)."
    );
}

/// Runs headless Chromium with `extra` args against `url`; returns stdout. Bounded to 90 s.
fn run_chromium(extra: &[String], url: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    let done = poll_blocking(Duration::from_secs(90), Duration::from_millis(100), || {
        child.try_wait().unwrap()
    });
    if done.is_none() {
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        panic!(
            "chromium did not finish within 90 s; stderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "chromium failed ({}); stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Endpoint rows of the rendered DOM: (entry, endpoint) -> column -> text.
fn dom_rows(dom: &str) -> BTreeMap<(String, String), BTreeMap<String, String>> {
    let attr = |tag: &str, name: &str| -> String {
        let key = format!("{name}=\"");
        let start = tag.find(&key).map(|i| i + key.len()).unwrap_or(0);
        tag[start..].split('"').next().unwrap_or("").to_string()
    };
    let mut out = BTreeMap::new();
    for chunk in dom.split("<tr class=\"endpoint ").skip(1) {
        let row = chunk.split("</tr>").next().unwrap();
        let (tag, cells_html) = row.split_once('>').unwrap();
        let mut cells = BTreeMap::new();
        cells.insert(
            "class".to_string(),
            tag.split('"').next().unwrap().to_string(),
        );
        for cell in cells_html.split("<td class=\"c-").skip(1) {
            let (name, rest) = cell.split_once("\">").unwrap();
            let text = rest.split("</td>").next().unwrap();
            cells.insert(name.to_string(), text.to_string());
        }
        out.insert((attr(tag, "data-entry"), attr(tag, "data-endpoint")), cells);
    }
    out
}

/// Headless Chromium renders the stats page with one row per endpoint in the expected state;
/// `?json` carries exactly the same data and `?csv` the same in HAProxy's `show stat` layout.
/// Two entries on one address (`web`, `web2`) each show their own traffic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_page_renders_in_headless_chromium() {
    let chrome = chromium(); // fail first, and clearly, when it is missing
    let b1 = Backend::start("b1").await;
    let b2 = Backend::start("b2").await;
    let b3 = Backend::start("b3").await;
    let b4 = Backend::start("b4").await;
    let dead_guard = DeadPort::new();
    let dead = dead_guard.port;
    let tcp_port = free_port();
    let draining = json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "drain-1", "namespace": "default",
                     "labels": {"kubernetes.io/service-name": "drain"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["127.0.0.1"],
                       "conditions": {"ready": false, "serving": true, "terminating": true}}],
        "ports": [{"port": b3.port, "protocol": "TCP"}],
    });
    let sy = switchyard(objs(
        vec![
            svc("web", 80),
            svc("api", 80).host("api.example.com"),
            svc("drain", 80),
            svc("empty", 80),
            svc("db", tcp_port),
            svc("web2", 80),
        ],
        vec![
            vec![slice("web", "", b1.port), slice("web", "", dead)],
            vec![slice("web2", "", b1.port)],
            slices("api", &[&b2]),
            vec![draining],
            slices("db", &[&b4]),
        ],
    ))
    .args(&[
        "--check-interval",
        "200ms",
        "--tcp-services",
        &format!("db:{tcp_port}"),
    ])
    .start()
    .await;
    for _ in 0..3 {
        assert_eq!(sy.get("/web").await.status, 200);
    }
    assert_eq!(sy.get_host("api.example.com", "/x").await.status, 200);
    let expected: BTreeMap<(String, String), &str> = [
        (("web", b1.port), "up"),
        (("web", dead), "down"),
        (("web2", b1.port), "up"),
        (("api", b2.port), "up"),
        (("drain", b3.port), "draining"),
        ((&*format!("db:{tcp_port}"), b4.port), "up"),
    ]
    .into_iter()
    .map(|((e, p), s)| ((e.to_string(), ep(p)), s))
    .collect();
    let settled = eventually(Duration::from_secs(15), || async {
        let rows = stats_rows(&sy).await;
        expected.iter().all(|(k, s)| {
            rows.get(k)
                .is_some_and(|r| r["state"] == *s && r["last_check"] != "-")
        })
    })
    .await;
    assert!(settled, "states never settled: {:?}", stats_rows(&sy).await);

    let url = format!("http://127.0.0.1:{}/", sy.stats_port);
    let dom = tokio::task::spawn_blocking({
        let url = url.clone();
        move || run_chromium(&["--dump-dom".to_string()], &url)
    })
    .await
    .unwrap();
    assert!(
        dom.contains("<meta http-equiv=\"refresh\""),
        "auto-refresh: {dom}"
    );
    assert!(!dom.contains("<script"), "no JavaScript");
    let html_rows = dom_rows(&dom);
    let got: BTreeMap<(String, String), String> = html_rows
        .iter()
        .map(|(k, cells)| (k.clone(), cells["state"].clone()))
        .collect();
    let want: BTreeMap<(String, String), String> = expected
        .iter()
        .map(|(k, s)| (k.clone(), s.to_string()))
        .collect();
    assert_eq!(got, want, "rendered rows:\n{dom}");
    for (k, cells) in &html_rows {
        assert_eq!(cells["class"], cells["state"], "{k:?}: row colour class");
        assert_eq!(cells["endpoint"], k.1);
    }
    let sections: Vec<&str> = dom
        .split("data-frontend=\"")
        .skip(1)
        .map(|s| s.split('"').next().unwrap())
        .collect();
    assert_eq!(sections, ["http".to_string(), format!("tcp:{tcp_port}")]);
    for entry in ["web", "web2", "api", "drain", "empty"] {
        assert!(
            dom.contains(&format!(
                "data-entry=\"{entry}\"><caption>Entry {entry} <small>"
            )),
            "a table for entry {entry}"
        );
    }

    // The same data as JSON, and as CSV in HAProxy's layout (HTML column -> HAProxy column).
    // Time-dependent columns (rate, ages, the dead endpoint's growing failure count) are only
    // checked for presence: the three fetches are not one instant.
    let columns = [
        ("state", "status"),
        ("cur", "scur"),
        ("max", "smax"),
        ("total", "stot"),
        ("bytes_in", "bin"),
        ("bytes_out", "bout"),
        ("connect_errors", "econ"),
        ("response_errors", "eresp"),
        ("hrsp_1xx", "hrsp_1xx"),
        ("hrsp_2xx", "hrsp_2xx"),
        ("hrsp_3xx", "hrsp_3xx"),
        ("hrsp_4xx", "hrsp_4xx"),
        ("hrsp_5xx", "hrsp_5xx"),
        ("hrsp_other", "hrsp_other"),
        ("last_check", "last_chk"),
        ("algorithm", "algo"),
    ];
    let json_rows = stats_rows(&sy).await;
    let csv = sy.stats("/?csv").await;
    assert_eq!(csv.status, 200);
    assert!(csv.header("content-type").unwrap().starts_with("text/csv"));
    let mut lines = csv.body.lines();
    let header_line = lines.next().unwrap();
    assert!(
        header_line.starts_with(
            "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,\
             wretr,wredis,status,weight,act,bck,chkfail,chkdown,lastchg,downtime,"
        ),
        "{header_line}"
    );
    let header: Vec<&str> = header_line.trim_start_matches("# ").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let csv_rows: BTreeMap<(String, String), Vec<String>> = lines
        .map(|l| l.split(',').map(str::to_string).collect::<Vec<_>>())
        .filter(|cells| cells[col("type")] == "2")
        .map(|cells| {
            (
                (cells[col("pxname")].clone(), cells[col("svname")].clone()),
                cells,
            )
        })
        .collect();
    assert_eq!(
        csv_rows.keys().collect::<Vec<_>>(),
        html_rows.keys().collect::<Vec<_>>()
    );
    assert_eq!(
        json_rows.keys().collect::<Vec<_>>(),
        html_rows.keys().collect::<Vec<_>>()
    );
    for (k, cells) in &html_rows {
        for (c, hc) in columns {
            let json_v = match &json_rows[k][c] {
                Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            let csv_v = &csv_rows[k][col(hc)];
            let html_v = match c {
                "state" => match cells[c].as_str() {
                    "up" => "UP",
                    "draining" => "DRAIN",
                    _ => "DOWN",
                }
                .to_string(),
                "last_check" if cells[c] == "-" => String::new(),
                _ => cells[c].clone(),
            };
            assert_eq!(&html_v, csv_v, "{k:?} {c}: HTML vs CSV {hc}");
            assert_eq!(cells[c], json_v, "{k:?} {c}: HTML vs JSON");
        }
        for c in [
            "rate",
            "rate_max",
            "check_ms",
            "check_age_s",
            "check_failures",
            "check_downs",
            "since_s",
            "downtime_s",
        ] {
            assert!(cells.contains_key(c), "{k:?}: HTML column {c}");
            assert!(json_rows[k].get(c).is_some(), "{k:?}: JSON field {c}");
        }
        // The backend protocol: HTML and JSON agree (HAProxy's CSV has no such column); TCP
        // entries have none.
        let want = if k.0.starts_with("db:") { "" } else { "http" };
        assert_eq!(cells["protocol"], want, "{k:?}: HTML protocol");
        assert_eq!(json_rows[k]["protocol"], want, "{k:?}: JSON protocol");
    }
    // Checked endpoints show the last check's duration and age; the dead one its failures.
    let dead_row = &json_rows[&("web".to_string(), ep(dead))];
    assert!(
        dead_row["check_failures"].as_u64().unwrap() >= 3,
        "{dead_row}"
    );
    assert_eq!(dead_row["check_downs"], 1, "{dead_row}");
    assert_ne!(dead_row["check_ms"], "", "{dead_row}");
    assert_ne!(csv_rows[&("web".to_string(), ep(dead))][col("chkdown")], "");
    // web2 shares b1's address (and its health) but not web's traffic.
    let web_b1 = &json_rows[&("web".to_string(), ep(b1.port))];
    let web2_b1 = &json_rows[&("web2".to_string(), ep(b1.port))];
    assert_eq!(web_b1["hrsp_2xx"], 3, "{web_b1}");
    assert_eq!(
        web2_b1["total"], 0,
        "traffic of web shown on web2: {web2_b1}"
    );
    assert_eq!(web2_b1["hrsp_2xx"], 0, "{web2_b1}");
    let web_total: u64 = ["web"]
        .iter()
        .flat_map(|e| html_rows.iter().filter(move |(k, _)| k.0 == *e))
        .map(|(_, c)| c["total"].parse::<u64>().unwrap())
        .sum();
    assert!(web_total >= 3, "the requests show up: {web_total}");

    // A screenshot renders too (kept in docs/ when asked for).
    let shot_dir = tempfile::tempdir().unwrap();
    let shot = shot_dir.path().join("stats.png");
    let arg = format!("--screenshot={}", shot.display());
    tokio::task::spawn_blocking({
        let url = url.clone();
        move || {
            run_chromium(
                &[
                    arg,
                    "--window-size=1400,900".into(),
                    "--hide-scrollbars".into(),
                ],
                &url,
            )
        }
    })
    .await
    .unwrap();
    let png = std::fs::read(&shot).expect("screenshot written");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "a real image"
    );
    if let Some(keep) = std::env::var_os("SWITCHYARD_STATS_SCREENSHOT") {
        std::fs::write(&keep, &png).unwrap();
    }
    let _ = chrome;
}

// 7 ---------------------------------------------------------------------------

/// One request through `curl` (which speaks HTTP/1.0 and HTTP/2 in clear with prior
/// knowledge, as the suites' own clients do not), with `args` before the URL; its status.
async fn curl(args: &[&str], url: String) -> u16 {
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--max-time",
        "10",
    ])
    .args(args)
    .arg(url);
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .expect("curl runs (.ci/run installs it)");
    assert!(out.status.success(), "curl: {out:?}");
    String::from_utf8_lossy(&out.stdout).parse().unwrap()
}

/// One structured line per request on stdout, JSON or logfmt: the client's protocol, the
/// status the endpoint answered, the path it got when the route rewrote it, and the client's
/// request id, user agent and referer (the latter without its query), through every way a
/// request is served: HTTP/1.1 and HTTP/2 on either engine (CI runs this suite again with
/// `SWITCHYARD_FAST_PATH=false`), HTTP/1.0 (Pingora's), an HTTP/2 backend (the fast path's
/// relay, or Pingora's), and switchyard's own answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_log_lines_on_stdout() {
    let b1 = Backend::start("b1").await;
    let h2b = Backend::builder("h2b")
        .transport(Transport::H2c)
        .start()
        .await;
    let world = objs(
        vec![
            svc("web", 80),
            svc("empty", 80),
            svc("h2b", 80).app_protocol("h2c"),
        ],
        vec![slices("web", &[&b1]), slices("h2b", &[&h2b])],
    );
    let sy = switchyard(world.clone())
        .args(&["--access-log", "json"])
        .start()
        .await;
    let r = sy
        .get_with(
            "/web/a/b?secret=1",
            &[
                ("host", "Shop.Example.com"),
                ("user-agent", "probe/1.0 (e2e)"),
                ("referer", "https://ref.example/page?token=secret"),
                ("x-request-id", "req-42"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.uri(), "/a/b?secret=1", "the route strips its prefix");
    assert_eq!(sy.get("/nope").await.status, 404);
    assert_eq!(sy.get("/empty").await.status, 503);
    let url = |path: &str| sy.url(path);
    assert_eq!(
        curl(&["--http1.0", "-A", "old/1"], url("/web/ten")).await,
        200
    );
    assert_eq!(
        curl(
            &[
                "--http2-prior-knowledge",
                "-A",
                "h2-client/2",
                "-H",
                "X-Request-Id: h2-7",
            ],
            url("/web/two?x=1"),
        )
        .await,
        200
    );
    assert_eq!(
        curl(&["--http2-prior-knowledge"], url("/h2b/relayed")).await,
        200
    );
    assert_eq!(curl(&["--http1.1"], url("/h2b/over-h1")).await, 200);
    let lines = || {
        sy.stdout()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .collect::<Vec<_>>()
    };
    assert!(
        eventually(Duration::from_secs(10), || async { lines().len() >= 7 }).await,
        "stdout: {}",
        sy.stdout()
    );
    let all = lines();
    let by_path = |path: &str| {
        all.iter()
            .find(|l| l["path"] == path)
            .unwrap_or_else(|| panic!("no line for {path}: {all:?}"))
    };
    let hit = by_path("/web/a/b");
    assert_eq!(hit["kind"], "http");
    assert_eq!(hit["entry"], "web");
    assert_eq!(hit["host"], "Shop.Example.com");
    assert_eq!(hit["method"], "GET");
    assert_eq!(hit["path"], "/web/a/b", "no query string in the log");
    assert_eq!(hit["upstream_path"], "/a/b", "the path the endpoint got");
    assert_eq!(hit["status"], 200);
    assert_eq!(hit["upstream_status"], 200);
    assert_eq!(hit["protocol"], "HTTP/1.1");
    assert_eq!(hit["request_id"], "req-42");
    assert_eq!(hit["user_agent"], "probe/1.0 (e2e)");
    assert_eq!(
        hit["referer"], "https://ref.example/page",
        "no query string in the referer either"
    );
    assert_eq!(hit["frontend"], "http");
    assert_eq!(hit["endpoint"], ep(b1.port));
    assert_eq!(hit["retries"], 0);
    assert!(hit["generation"].as_u64().unwrap() >= 1);
    assert!(hit["bytes_out"].as_u64().unwrap() > 0);
    assert!(hit["duration_ms"].as_f64().unwrap() >= 0.0);
    assert!(hit["client"].as_str().unwrap().starts_with("127.0.0.1:"));
    assert!(hit["timestamp"].as_str().unwrap().ends_with('Z'));
    assert!(hit.get("time").is_none(), "renamed to timestamp: {hit}");

    let miss = by_path("/nope");
    assert_eq!(miss["entry"], "");
    assert_eq!(miss["endpoint"], Value::Null);
    assert_eq!(miss["status"], 404);
    assert_eq!(miss["protocol"], "HTTP/1.1");
    // Switchyard answered: no endpoint status; no rewrite; the client sent no such fields.
    for absent in [
        "upstream_status",
        "upstream_path",
        "request_id",
        "user_agent",
        "referer",
    ] {
        assert!(miss.get(absent).is_none(), "{absent}: {miss}");
    }
    let empty = by_path("/empty");
    assert_eq!(empty["status"], 503);
    assert_eq!(empty["entry"], "empty");
    assert!(empty.get("upstream_status").is_none(), "{empty}");
    assert!(
        empty.get("upstream_path").is_none(),
        "not sent anywhere: {empty}"
    );

    let ten = by_path("/web/ten");
    assert_eq!(ten["protocol"], "HTTP/1.0");
    assert_eq!(ten["user_agent"], "old/1");
    assert_eq!(ten["upstream_status"], 200);
    assert_eq!(ten["upstream_path"], "/ten");

    let two = by_path("/web/two");
    assert_eq!(two["protocol"], "HTTP/2.0");
    assert_eq!(two["request_id"], "h2-7");
    assert_eq!(two["user_agent"], "h2-client/2");
    assert_eq!(two["upstream_status"], 200);
    assert_eq!(two["upstream_path"], "/two");
    assert!(two.get("referer").is_none(), "{two}");

    for (path, protocol, forwarded) in [
        ("/h2b/relayed", "HTTP/2.0", "/relayed"),
        ("/h2b/over-h1", "HTTP/1.1", "/over-h1"),
    ] {
        let l = by_path(path);
        assert_eq!(l["entry"], "h2b", "{l}");
        assert_eq!(l["protocol"], protocol, "{l}");
        assert_eq!(l["upstream_status"], 200, "{l}");
        assert_eq!(l["upstream_path"], forwarded, "{l}");
        assert!(
            l["user_agent"].as_str().unwrap().starts_with("curl/"),
            "{l}"
        );
    }

    let sy = switchyard(world)
        .args(&["--access-log", "logfmt"])
        .start()
        .await;
    assert_eq!(sy.get("/web").await.status, 200);
    assert_eq!(
        curl(
            &[
                "--http2-prior-knowledge",
                "-A",
                "two words",
                "-e",
                "https://ref.example/r?q=1",
                "-H",
                "X-Request-Id: lf-1",
            ],
            sy.url("/web/lf"),
        )
        .await,
        200
    );
    assert_eq!(sy.get("/empty").await.status, 503);
    assert!(
        eventually(Duration::from_secs(10), || async {
            sy.stdout().lines().count() >= 3
        })
        .await,
        "logfmt lines: {}",
        sy.stdout()
    );
    let out = sy.stdout();
    let line = |needle: &str| {
        out.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle}: {out}"))
    };
    let plain = line(" path=/web ");
    assert!(plain.starts_with("timestamp="), "{plain}");
    assert!(plain.contains(" kind=http client=127.0.0.1:"), "{plain}");
    assert!(
        plain.contains(" frontend=http protocol=HTTP/1.1 host="),
        "{plain}"
    );
    assert!(
        plain.contains(" path=/web upstream_path=/ status=200 upstream_status=200 entry=web "),
        "{plain}"
    );
    assert!(
        plain.contains(&format!(" endpoint={} ", ep(b1.port))),
        "{plain}"
    );
    let two = line(" path=/web/lf ");
    assert!(two.contains(" protocol=HTTP/2.0 "), "{two}");
    assert!(
        two.contains(" upstream_path=/lf status=200 upstream_status=200 "),
        "{two}"
    );
    assert!(
        two.contains(" request_id=lf-1 user_agent=\"two words\" referer=https://ref.example/r"),
        "{two}"
    );
    let own = line(" path=/empty ");
    assert!(own.contains(" status=503 entry=empty "), "{own}");
    assert!(!own.contains("upstream_status"), "{own}");
}

// 8 ---------------------------------------------------------------------------

/// (Host, path, expected (entry, precedence level) or no route).
type Case = (
    Option<&'static str>,
    &'static str,
    Option<(&'static str, &'static str)>,
);

/// For a set of requests, `/explain` names the route, entry, endpoint and forwarded path that
/// the data plane then really takes; `--dry-run --explain` answers the same offline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_matches_the_route_the_data_plane_takes() {
    let b1 = Backend::start("b1").await;
    let b2 = Backend::start("b2").await;
    let b3 = Backend::start("b3").await;
    let b4 = Backend::start("b4").await;
    let names: BTreeMap<String, String> = [&b1, &b2, &b3, &b4]
        .iter()
        .map(|b| (ep(b.port), b.name.clone()))
        .collect();
    let world = objs(
        vec![
            svc("web", 80),
            svc("shop", 80).host("shop.example.com").acl("/api"),
            svc("wild", 80).host("*.example.com"),
            svc("cart", 80).sticky(),
        ],
        vec![
            slices("web", &[&b1, &b2]),
            slices("shop", &[&b3]),
            slices("wild", &[&b4]),
            slices("cart", &[&b1, &b2]),
        ],
    );
    let sy = switchyard(world.clone()).start().await;
    let cases: [Case; 8] = [
        (None, "/web/a?x=1", Some(("web", "any_host"))),
        (None, "/web", Some(("web", "any_host"))),
        (
            Some("shop.example.com"),
            "/api/v1",
            Some(("shop", "exact_host")),
        ),
        // The exact host has no rule for this path: it falls through to the wildcard.
        (
            Some("SHOP.example.com:80"),
            "/other",
            Some(("wild", "wildcard_host")),
        ),
        (
            Some("a.b.example.com"),
            "/",
            Some(("wild", "wildcard_host")),
        ),
        // The wildcard needs at least one label; this falls through to the host-less routes.
        (Some("example.com"), "/web/z", Some(("web", "any_host"))),
        (Some("x.org"), "/nothing", None),
        (None, "/cart/c", Some(("cart", "any_host"))),
    ];
    for round in 0..3 {
        for (host, path, want) in cases {
            let mut q = format!("path={}", path.replace('?', "%3F").replace('=', "%3D"));
            if let Some(h) = host {
                q.push_str(&format!("&host={h}"));
            }
            let x = sy.admin(&format!("/explain?{q}")).await;
            assert_eq!(x.status, 200, "{x:?}");
            assert_eq!(
                x.header("content-type").as_deref(),
                Some("application/json")
            );
            let x = x.json();
            let r = match host {
                Some(h) => sy.get_host(h, path).await,
                None => sy.get(path).await,
            };
            let Some((entry, level)) = want else {
                assert_eq!(x["outcome"], "no_route", "{x}");
                assert_eq!(r.status, 404);
                continue;
            };
            assert_eq!(x["outcome"], "proxy", "{x}");
            assert_eq!(x["entry"]["name"], entry, "{host:?} {path}: {x}");
            assert_eq!(x["route"]["level"], level, "{host:?} {path}: {x}");
            assert_eq!(r.status, 200, "{r:?}");
            let predicted = names[x["endpoint"].as_str().unwrap()].as_str();
            assert_eq!(
                r.backend().as_deref(),
                Some(predicted),
                "round {round}, {host:?} {path}: explain said {x}"
            );
            assert_eq!(
                r.uri(),
                x["route"]["forwarded_path"].as_str().unwrap(),
                "{host:?} {path}: forwarded path"
            );
            assert!(x["generation"].as_u64().unwrap() >= 1);
            if entry == "cart" {
                assert_eq!(
                    r.header("set-cookie").as_deref(),
                    x["set_cookie"].as_str(),
                    "the cookie explain predicted"
                );
            }
        }
    }

    // Stickiness: a SERVERID cookie pins, and explain says so.
    let r = sy.get("/cart").await;
    let cookie = r
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    for _ in 0..3 {
        let x = sy
            .admin(&format!(
                "/explain?path=/cart&cookie={}",
                cookie.replace('=', "%3D")
            ))
            .await
            .json();
        assert_eq!(x["stickiness"]["mode"], "cookie");
        let pinned = x["stickiness"]["pinned"].as_str().unwrap();
        assert_eq!(x["endpoint"], pinned, "{x}");
        let r = sy.get_with("/cart", &[("cookie", &cookie)]).await;
        assert_eq!(r.backend().as_deref(), Some(names[pinned].as_str()));
        assert_eq!(x["set_cookie"], Value::Null);
    }
    assert_eq!(sy.admin("/explain?path=nope").await.status, 400);

    // Offline: the same answer from the manifest alone.
    let file = sy.dir.path().join("offline.yaml");
    std::fs::write(&file, multi_doc(&world)).unwrap();
    let out = tokio::task::spawn_blocking(move || {
        run_to_exit(&[
            "--dry-run",
            "--manifests",
            file.to_str().unwrap(),
            "--explain",
            "SHOP.example.com/api/v1?x=1",
        ])
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let x: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(x["route"]["level"], "exact_host", "{x}");
    assert_eq!(x["entry"]["name"], "shop");
    assert_eq!(x["endpoint"], ep(b3.port));
    assert_eq!(x["route"]["forwarded_path"], "/api/v1?x=1");
    assert!(
        x["precedence"][0]["note"]
            .as_str()
            .unwrap()
            .contains("/api")
    );
}

/// The stats page lists every backend address: it binds to loopback by default even when the
/// admin server (probes, metrics) is on every address, as a pod's must be. The original served
/// it on *:1936 (docs/operations.md says so). Whether it is on the wildcard shows without
/// leaving loopback: 127.0.0.2 on its port can be bound only when it is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stats_page_stays_on_loopback_when_the_admin_server_is_open() {
    let b = Backend::start("b").await;
    let mut objs = vec![Value::from(svc("web", 80))];
    objs.extend(slices("web", &[&b]));
    let sy = switchyard(objs)
        .args(&["--admin-bind-address", "0.0.0.0"])
        .start()
        .await;
    assert_eq!(sy.admin("/readyz").await.status, 200);
    assert_eq!(sy.stats("/").await.status, 200);
    let beside = std::net::TcpListener::bind(("127.0.0.2", sy.stats_port));
    assert!(
        beside.is_ok(),
        "the stats page is bound to every address: {beside:?}"
    );
    // /explain answers loopback clients (the unit test covers the others).
    assert_eq!(sy.admin("/explain?path=/web").await.status, 200);
}

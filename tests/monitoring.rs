//! Keeps the monitoring kit (`deploy/monitoring/`) true to the code: every `switchyard_*` and
//! `process_*` metric the dashboard and the alerts name is one switchyard exposes, as
//! docs/operations.md's metrics table lists them (another test, in e2e_observability.rs, checks
//! that every exposed metric is in that table), with `_bucket`, `_sum` and `_count` only on
//! histograms; the plain rules file and the `PrometheusRule` hold the same groups; and, when
//! `promtool` is on PATH, Prometheus itself checks the rules and runs their unit tests.
//! Reads files only: no switchyard is started.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn kit(file: &str) -> PathBuf {
    root().join("deploy/monitoring").join(file)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every document of a YAML file, as JSON values.
fn yaml_docs(path: &Path) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(&read(path))
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .filter(|v| !v.is_null())
        .collect()
}

/// The metrics table of docs/operations.md: name -> type.
fn documented() -> BTreeMap<String, String> {
    let doc = read(&root().join("docs/operations.md"));
    let table: BTreeMap<String, String> = doc
        .lines()
        .filter_map(|l| {
            let mut cells = l.strip_prefix("| `")?.split('|');
            let name = cells.next()?.trim().strip_suffix('`')?;
            let kind = cells.next()?.trim();
            (name.starts_with("switchyard_") || name.starts_with("process_"))
                .then(|| (name.to_string(), kind.to_string()))
        })
        .collect();
    assert!(
        table.len() > 40,
        "the metrics table of docs/operations.md was not found: {table:?}"
    );
    table
}

/// Every `switchyard_*` or `process_*` name in a PromQL expression (or any text).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = expr.as_bytes();
    let name_byte = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
    let mut i = 0;
    while i < bytes.len() {
        let starts = (i == 0 || !name_byte(bytes[i - 1]))
            && (expr[i..].starts_with("switchyard_") || expr[i..].starts_with("process_"));
        if starts {
            let end = (i..bytes.len())
                .find(|&j| !name_byte(bytes[j]))
                .unwrap_or(bytes.len());
            names.insert(expr[i..end].to_string());
            i = end;
        } else {
            i += 1;
        }
    }
    names
}

/// The problems with a name used in `place`: not documented, or a histogram's series of a
/// metric that is not a histogram.
fn check_name(name: &str, place: &str, doc: &BTreeMap<String, String>, problems: &mut Vec<String>) {
    if doc.contains_key(name) {
        return;
    }
    let family = ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|s| name.strip_suffix(s));
    match family.map(|f| (f, doc.get(f))) {
        Some((_, Some(kind))) if kind == "histogram" => {}
        Some((f, Some(kind))) => {
            problems.push(format!("{place}: {name}: {f} is a {kind}, not a histogram"))
        }
        _ => problems.push(format!(
            "{place}: {name} is not in docs/operations.md's metrics table"
        )),
    }
}

/// Every string under `v` whose key is `expr`, `query` or `definition` (Grafana's targets and
/// variables); `key` is the key `v` is under.
fn strings<'v>(v: &'v Value, key: Option<&str>, out: &mut Vec<&'v str>) {
    match v {
        Value::String(s) if matches!(key, Some("expr" | "query" | "definition")) => out.push(s),
        Value::Array(a) => a.iter().for_each(|x| strings(x, key, out)),
        Value::Object(o) => o.iter().for_each(|(k, x)| strings(x, Some(k), out)),
        _ => {}
    }
}

fn rules_file() -> Value {
    let docs = yaml_docs(&kit("rules.yaml"));
    assert_eq!(docs.len(), 1, "rules.yaml is one document");
    docs.into_iter().next().unwrap()
}

fn prometheus_rule() -> Value {
    let docs = yaml_docs(&kit("prometheusrule.yaml"));
    assert_eq!(docs.len(), 1, "prometheusrule.yaml is one document");
    let doc = docs.into_iter().next().unwrap();
    assert_eq!(doc["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(doc["kind"], "PrometheusRule");
    doc
}

/// (group, alert, expr) of every rule of a rules file's `groups`.
fn rules(groups: &Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for g in groups.as_array().expect("groups is a list") {
        for r in g["rules"].as_array().expect("a group has rules") {
            let name = r["alert"].as_str().or(r["record"].as_str()).unwrap();
            out.push((
                g["name"].as_str().unwrap().to_string(),
                name.to_string(),
                r["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    out
}

#[test]
fn the_two_rule_files_hold_the_same_rules() {
    let plain = rules_file();
    let operator = prometheus_rule();
    assert_eq!(
        plain["groups"], operator["spec"]["groups"],
        "rules.yaml and prometheusrule.yaml differ"
    );
    let all = rules(&plain["groups"]);
    let names: BTreeSet<&str> = all.iter().map(|(_, a, _)| a.as_str()).collect();
    assert_eq!(names.len(), all.len(), "alert names are unique");
    // What the kit promises to watch (deploy/monitoring/README.md).
    for alert in [
        "SwitchyardHigh5xxRatio",
        "SwitchyardNoEndpointsUp",
        "SwitchyardCertificateExpiringSoon",
        "SwitchyardWatchErrors",
        "SwitchyardNoTable",
        "SwitchyardNoLeader",
    ] {
        assert!(names.contains(alert), "{alert} missing: {names:?}");
    }
    for r in plain["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
    {
        let alert = r["alert"].as_str().unwrap_or_default();
        assert!(
            r["labels"]["severity"].is_string(),
            "{alert}: no severity label"
        );
        assert!(
            r["annotations"]["summary"].is_string(),
            "{alert}: no summary"
        );
    }
}

#[test]
fn every_metric_the_rules_use_is_documented() {
    let doc = documented();
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    for (group, alert, expr) in rules(&rules_file()["groups"]) {
        let names = metric_names(&expr);
        assert!(!names.is_empty() || expr.contains("up{"), "{alert}: {expr}");
        for name in names {
            check_name(
                &name,
                &format!("rules.yaml {group}/{alert}"),
                &doc,
                &mut problems,
            );
            used.insert(name);
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    for name in [
        "switchyard_http_requests_total",
        "switchyard_http_responses_total",
        "switchyard_entry_endpoints_up",
        "switchyard_tls_certificate_not_after_seconds",
        "switchyard_watch_errors_total",
        "switchyard_table_generation",
        "switchyard_leader",
    ] {
        assert!(used.contains(name), "no alert uses {name}: {used:?}");
    }
}

#[test]
fn every_metric_the_dashboard_uses_is_documented() {
    let dash: Value = serde_json::from_str(&read(&kit("dashboard.json"))).unwrap();
    let doc = documented();
    let panels = dash["panels"].as_array().unwrap();
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    let mut ids = BTreeSet::new();
    for p in panels {
        let title = p["title"].as_str().unwrap_or_default();
        assert!(ids.insert(p["id"].as_u64().unwrap()), "{title}: id twice");
        assert!(p["gridPos"]["w"].as_u64().is_some(), "{title}: no gridPos");
        if p["type"] == "row" {
            continue;
        }
        let targets = p["targets"].as_array().map_or(&[][..], Vec::as_slice);
        assert!(!targets.is_empty(), "{title}: no query");
        for t in targets {
            let expr = t["expr"].as_str().unwrap_or_default();
            assert!(!metric_names(expr).is_empty(), "{title}: {expr:?}");
        }
    }
    let mut exprs = Vec::new();
    strings(&dash, None, &mut exprs);
    for expr in &exprs {
        for name in metric_names(expr) {
            check_name(
                &name,
                &format!("dashboard.json {expr}"),
                &doc,
                &mut problems,
            );
            used.insert(name);
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // What the dashboard promises to show (deploy/monitoring/README.md).
    for name in [
        "switchyard_http_requests_total",
        "switchyard_http_responses_total",
        "switchyard_http_request_duration_seconds_bucket",
        "switchyard_entry_endpoints_up",
        "switchyard_tls_certificate_not_after_seconds",
        "switchyard_watch_errors_total",
        "switchyard_table_generation",
        "switchyard_table_swaps_total",
        "switchyard_leader",
    ] {
        assert!(used.contains(name), "the dashboard does not use {name}");
    }
}

#[test]
fn metric_names_are_read_whole_from_expressions() {
    let names = metric_names(
        "histogram_quantile(0.99, sum by (le) (rate(switchyard_a_bucket{x=\"switchyard_b\"}[5m]))) \
         / process_cpu_seconds_total and my_switchyard_c",
    );
    let want: BTreeSet<String> = [
        "switchyard_a_bucket",
        "switchyard_b",
        "process_cpu_seconds_total",
    ]
    .map(String::from)
    .into();
    assert_eq!(names, want);
    let doc: BTreeMap<String, String> = [
        ("switchyard_h_seconds", "histogram"),
        ("switchyard_c_total", "counter"),
    ]
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .into();
    let mut problems = Vec::new();
    check_name("switchyard_h_seconds_bucket", "t", &doc, &mut problems);
    check_name("switchyard_c_total", "t", &doc, &mut problems);
    assert!(problems.is_empty(), "{problems:?}");
    check_name("switchyard_c_total_count", "t", &doc, &mut problems);
    check_name("switchyard_gone", "t", &doc, &mut problems);
    assert_eq!(problems.len(), 2, "{problems:?}");
}

/// `promtool check rules` and `promtool test rules` on the kit, when promtool is installed
/// (Debian's `prometheus` package; `.ci/run` installs it).
#[test]
fn promtool_accepts_the_rules_and_their_tests_pass() {
    let found = Command::new("promtool").arg("--version").output();
    if !found.is_ok_and(|o| o.status.success()) {
        println!("skipped: promtool is not on PATH (apt-get install prometheus)");
        return;
    }
    for args in [
        ["check", "rules", "rules.yaml"],
        ["test", "rules", "rules_test.yaml"],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(kit(""))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {}: {}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

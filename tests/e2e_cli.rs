//! What users hit first, at the command line: log lines on a pipe, error lines, duration
//! flags, `--version`. Each test runs the real binary to its exit.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;
use serde_json::Value;

/// A manifest with one Service whose lb.algorithm is bogus: a dry run succeeds with a warning.
fn manifest_with_a_warning(dir: &tempfile::TempDir) -> String {
    let path = dir.path().join("m.yaml");
    let objs: Vec<Value> = vec![svc("web", 80).algo("bogus").into(), slice("web", "", 8080)];
    std::fs::write(&path, multi_doc(&objs)).unwrap();
    path.to_str().unwrap().to_string()
}

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    run_to_exit_with(args, env)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Starts switchyard serving the manifest on free loopback ports with stderr going to a file
/// (not a terminal), waits for its first table swap, kills it, returns what it logged.
fn serve_briefly(manifest: &str, extra: &[&str], env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stderr");
    let (http, admin) = (free_port().to_string(), free_port().to_string());
    let mut cmd = Command::new(bin());
    cmd.args([
        "--manifests",
        manifest,
        "--bind-address=127.0.0.1",
        "--stats-port=0",
    ])
    .args(["--http-port", &http, "--admin-port", &admin])
    .args(extra)
    .env_remove("NO_COLOR")
    .env("RUST_LOG", "info")
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).unwrap());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn switchyard");
    // Until the first swap is logged, or the process has ended (its log is then complete).
    poll_blocking(Duration::from_secs(30), Duration::from_millis(50), || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        (text.contains("table swapped") || child.try_wait().unwrap().is_some()).then_some(())
    });
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.contains("table swapped"),
        "no table swap logged: {text}"
    );
    text
}

#[test]
fn logs_on_a_pipe_have_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest_with_a_warning(&dir);
    let err = serve_briefly(&m, &[], &[]);
    assert!(
        !err.contains('\x1b'),
        "colour codes off a terminal: {err:?}"
    );
}

#[test]
fn text_logs_quote_values_with_spaces_and_round_build_times() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest_with_a_warning(&dir);
    let err = serve_briefly(&m, &[], &[]);
    // A logfmt parser reads object="Service default/web" as one field (it split at the space).
    assert!(
        err.contains("object=\"Service default/web\""),
        "object not quoted: {err}"
    );
    let swap = err
        .lines()
        .find(|l| l.contains("routing table swapped"))
        .unwrap_or_default();
    let build_ms = swap
        .split(' ')
        .find_map(|f| f.strip_prefix("build_ms="))
        .unwrap_or_else(|| panic!("no build_ms: {swap}"));
    let decimals = build_ms.split('.').nth(1).map_or(0, str::len);
    assert!(decimals <= 2, "build_ms={build_ms}: {swap}");
}

#[test]
fn log_format_json_writes_one_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest_with_a_warning(&dir);
    // With Pingora's own info lines (records of the `log` crate) let through too.
    let pingora = serve_briefly(
        &m,
        &["--log-format", "json"],
        &[("RUST_LOG", "info,pingora_core=info")],
    );
    assert!(
        pingora.lines().any(|l| l.contains(r#""target":"pingora"#)),
        "no Pingora line: {pingora}"
    );
    for err in [
        serve_briefly(&m, &["--log-format", "json"], &[]),
        serve_briefly(&m, &[], &[("SWITCHYARD_LOG_FORMAT", "json")]),
        pingora,
    ] {
        for line in err.lines() {
            let v: Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"));
            for key in ["timestamp", "level", "target"] {
                assert!(v.get(key).is_some(), "no {key}: {line}");
            }
            // The event's fields beside timestamp and level, not nested under "fields".
            assert!(v["message"].is_string(), "no message: {line}");
            assert!(v.get("fields").is_none(), "nested fields: {line}");
            // No metadata of `log` records (log.file, log.module_path), and no Rust debug
            // forms of options or lists.
            let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
            assert!(!keys.iter().any(|k| k.starts_with("log.")), "{line}");
            assert!(
                !line.contains(r#""None""#) && !line.contains(r#""Some("#),
                "{line}"
            );
            if v["message"] == "routing table swapped" {
                assert!(
                    v["build_ms"].is_number() && v["entries"].is_number(),
                    "{line}"
                );
            }
        }
        let warned = err
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["level"] == "WARN" && v["object"].is_string());
        assert_eq!(
            warned.as_ref().map(|v| v["object"].clone()),
            Some(Value::from("Service default/web")),
            "the warning's object as a top-level field: {err}"
        );
    }
    let out = run(&["--log-format", "yaml"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn a_port_in_use_is_said_once() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest_with_a_warning(&dir);
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port().to_string();
    let admin = free_port().to_string();
    let out = run(
        &[
            "--manifests",
            &m,
            "--bind-address",
            "127.0.0.1",
            "--http-port",
            &port,
            "--admin-port",
            &admin,
            "--stats-port",
            "0",
        ],
        &[],
    );
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    let cause = "Address already in use";
    let line = err
        .lines()
        .find(|l| l.contains("cannot listen"))
        .unwrap_or("");
    assert!(line.contains("--http-port"), "{err}");
    assert_eq!(line.matches(&cause).count(), 1, "{line}");
    drop(held);
}

/// With a specific --bind-address, the HTTP port also listens on each `--gateway-addresses`
/// address: one the machine does not have stops startup with one line naming the flag (and
/// an unspecified one is refused as a flag error, exit 2).
#[test]
fn a_gateway_address_that_cannot_be_listened_on_stops_startup() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest_with_a_warning(&dir);
    let (http, admin) = (free_port().to_string(), free_port().to_string());
    let args = |pool: &'static str| {
        vec![
            "--manifests".to_string(),
            m.clone(),
            "--bind-address".into(),
            "127.0.0.1".into(),
            "--http-port".into(),
            http.clone(),
            "--admin-port".into(),
            admin.clone(),
            "--stats-port".into(),
            "0".into(),
            "--gateway-addresses".into(),
            pool.into(),
        ]
    };
    // 192.0.2.1 (TEST-NET-1) is no address of this machine.
    let owned = args("127.0.0.2,192.0.2.1");
    let out = run(&strs(&owned), &[]);
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("cannot listen"))
        .unwrap_or("");
    assert!(
        line.contains("--gateway-addresses") && line.contains("192.0.2.1"),
        "{err}"
    );
    let owned = args("0.0.0.0");
    let out = run(&strs(&owned), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--gateway-addresses 0.0.0.0"));
}

#[test]
fn a_missing_certificate_is_said_once() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest_with_a_warning(&dir);
    let cert = dir.path().join("nope.pem");
    let out = run(
        &[
            "--manifests",
            &m,
            "--bind-address=127.0.0.1",
            "--stats-port=0",
            "--http-port",
            &free_port().to_string(),
            "--admin-port",
            &free_port().to_string(),
            "--https-port",
            &free_port().to_string(),
            "--ssl-cert",
            cert.to_str().unwrap(),
        ],
        &[],
    );
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    let line = err.lines().find(|l| l.contains("nope.pem")).unwrap_or("");
    assert_eq!(
        line.matches("No such file or directory").count(),
        1,
        "{err}"
    );
}

#[test]
fn durations_take_units_up_to_hours() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest_with_a_warning(&dir);
    let out = run(
        &[
            "--manifests",
            &m,
            "--dry-run",
            "--shutdown-grace",
            "2h",
            "--tunnel-timeout",
            "1h",
            "--check-interval",
            "1m30s",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run(
        &[
            "--manifests",
            &m,
            "--dry-run",
            "--server-timeout",
            "5parsecs",
        ],
        &[],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("5parsecs"), "{err}");
}

/// The two status-address sources exclude each other, and offline mode has neither: one line
/// and exit status 2 each, the environment variable as much as the flag.
#[test]
fn publish_flags_are_one_source_and_need_the_cluster() {
    let out = run(
        &[
            "--kubeconfig=/nonexistent",
            "--publish-service=switchyard/switchyard",
            "--publish-status-address=203.0.113.7",
        ],
        &[],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
    let out = run(
        &[
            "--manifests=/nonexistent",
            "--publish-service=switchyard/switchyard",
        ],
        &[],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("--publish-service needs the cluster source"),
        "{err}"
    );
    let out = run(
        &["--manifests=/nonexistent"],
        &[("SWITCHYARD_PUBLISH_SERVICE", "no-slash")],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not namespace/name"), "{err}");
}

#[test]
fn dry_run_reads_its_environment_variable() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest_with_a_warning(&dir);
    // Were the variable ignored, switchyard would serve (on free ports) until killed.
    let (http, admin) = (free_port().to_string(), free_port().to_string());
    let out = run(
        &[
            "--manifests",
            &m,
            "--bind-address=127.0.0.1",
            "--http-port",
            &http,
            "--admin-port",
            &admin,
            "--stats-port=0",
        ],
        &[("SWITCHYARD_DRY_RUN", "true")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let table: Value = serde_json::from_slice(&out.stdout).expect("the table on stdout");
    assert!(table.is_object(), "{table}");
}

#[test]
fn version_names_the_commit_and_pingora() {
    let out = run_to_exit(&["--version"]);
    assert!(out.status.success());
    let v = String::from_utf8_lossy(&out.stdout);
    assert!(v.starts_with("switchyard 0."), "{v}");
    assert!(v.contains("(commit "), "{v}");
    assert!(v.contains(", pingora 0."), "{v}");
    // While Pingora's crates are the copies in vendor/ (vendor/README.md), the version says so.
    let vendored = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("vendor/pingora-core")
        .exists();
    assert_eq!(v.contains("+vendored)"), vendored, "{v}");
    assert_eq!(v.lines().count(), 1, "{v}");
}

/// On a terminal (util-linux `script` gives one; skipped without it) the text format is
/// coloured, unless NO_COLOR is set to anything non-empty.
#[test]
fn no_color_turns_colour_off_on_a_terminal() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("no `script` here: skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let m = manifest_with_a_warning(&dir);
    let on_a_tty = |no_color: &str| {
        let line = format!(
            "timeout -s KILL 3 {} --manifests {m} --bind-address 127.0.0.1 --stats-port 0 \
             --http-port {} --admin-port {}",
            bin(),
            free_port(),
            free_port()
        );
        let out = Command::new("script")
            .args(["-qec", &line, "/dev/null"])
            .env("NO_COLOR", no_color)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .output()
            .expect("script");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let coloured = on_a_tty("");
    assert!(
        coloured.contains("\x1b["),
        "no colour on a terminal: {coloured:?}"
    );
    let plain = on_a_tty("1");
    assert!(plain.contains("INFO"), "{plain:?}");
    assert!(
        !plain.contains('\x1b'),
        "colour despite NO_COLOR: {plain:?}"
    );
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// A `--manifests` path that does not exist is a bad flag: one line naming it, exit 2, at
/// once (it used to leave the process running, unready for ever). A manifest with a misspelt
/// field or kind is served, and the log names what was not read.
#[test]
fn a_missing_manifest_is_a_bad_flag_and_typos_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("nope.yaml");
    let out = run(&["--manifests", gone.to_str().unwrap()], &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("--manifests") && err.contains("nope.yaml") && err.contains("no such file"),
        "{err}"
    );
    let m = dir.path().join("typos.yaml");
    std::fs::write(
        &m,
        "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  prots: [{port: 80}]\n\
         ---\napiVersion: v1\nkind: Servce\nmetadata: {name: x}\n",
    )
    .unwrap();
    let out = run(&["--dry-run", "--manifests", m.to_str().unwrap()], &[]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("Service default/web: spec.prots: not a field switchyard knows"),
        "{err}"
    );
    assert!(
        err.contains("kind Servce") && err.contains("did you mean Service?"),
        "{err}"
    );
}

/// `--dry-run` lists the Ingresses it does not serve because they are another controller's,
/// so a user moving from ingress-nginx sees why nothing is served (issue 41, item 3).
#[test]
fn dry_run_lists_ingresses_of_other_classes() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("m.yaml");
    let objs: Vec<Value> = vec![
        svc("web", 80).into(),
        ingress_class("switchyard", false),
        ing("mine")
            .rule(Some("a.test"), &[("/", "Prefix", "web", 80)])
            .into(),
        ing("theirs")
            .class(Some("nginx"))
            .rule(Some("b.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    ];
    std::fs::write(&m, multi_doc(&objs)).unwrap();
    let out = run(&["--dry-run", "--manifests", m.to_str().unwrap()], &[]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("skipped: Ingress default/theirs: class nginx, not one of switchyard's"),
        "{err}"
    );
    assert!(!err.contains("default/mine"), "{err}");
}

/// `--ingress-nginx-report` is what a team runs before switching from ingress-nginx: each
/// Ingress's nginx annotations with what switchyard does with them, the translation's warnings
/// beside them, as a table or JSON, and exit 1 when an Ingress would not be served.
#[test]
fn the_ingress_nginx_report_says_what_each_annotation_gets() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("m.yaml");
    let nginx = |k: &str| format!("nginx.ingress.kubernetes.io/{k}");
    let objs: Vec<Value> = vec![
        svc("web", 80).into(),
        ingress_class("switchyard", false),
        ing("admin")
            .ann(&nginx("auth-type"), "digest")
            .ann(&nginx("proxy-body-size"), "8m")
            .rule(Some("a.test"), &[("/", "Prefix", "web", 80)])
            .into(),
        ing("web")
            .ann(&nginx("proxy-read-timeout"), "soon")
            .ann(&nginx("limit-rate"), "5")
            .rule(Some("b.test"), &[("/", "Prefix", "web", 80)])
            .into(),
    ];
    std::fs::write(&m, multi_doc(&objs)).unwrap();
    let m = m.to_str().unwrap();
    let out = run(
        &["--dry-run", "--manifests", m, "--ingress-nginx-report"],
        &[],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    for line in [
        "Ingress default/admin: NOT SERVED",
        "refused  nginx.ingress.kubernetes.io/auth-type",
        "served   nginx.ingress.kubernetes.io/proxy-body-size",
        "ignored  nginx.ingress.kubernetes.io/limit-rate",
        "ignored  nginx.ingress.kubernetes.io/proxy-read-timeout",
        "2 Ingress(es) with ingress-nginx annotations, 1 not served",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
    assert!(stderr(&out).contains("1 Ingress(es) would not be served"));
    let out = run(
        &["--dry-run", "--manifests", m, "--ingress-nginx-report=json"],
        &[],
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["refused"], 1);
    let web = &json["ingresses"][1];
    assert_eq!(web["name"], "web");
    assert_eq!(web["annotations"][0]["verdict"], "ignored");
    assert!(web["warnings"][0].as_str().unwrap().contains("limit-rate"));
    // Nothing refused: exit 0.
    std::fs::write(
        dir.path().join("ok.yaml"),
        multi_doc(&[
            svc("web", 80).into(),
            ingress_class("switchyard", false),
            ing("x")
                .ann(&nginx("ssl-redirect"), "false")
                .rule(Some("c.test"), &[("/", "Prefix", "web", 80)])
                .into(),
        ]),
    )
    .unwrap();
    let ok = dir.path().join("ok.yaml");
    let out = run(
        &[
            "--dry-run",
            "--manifests",
            ok.to_str().unwrap(),
            "--ingress-nginx-report",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
}

/// Bad values say what is accepted, once, and name the flag (issue 41, item 11).
#[test]
fn bad_values_say_what_is_accepted() {
    let out = run(&["--log-format", "yaml"], &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("(one of: text, json)"), "{err}");
    let out = run(&["--manifests", "/tmp", "--server-timeout", "5x"], &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!err.contains("months") && !err.contains("years"), "{err}");
    assert!(err.contains("1h30m"), "{err}");
}

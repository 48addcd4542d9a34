//! End-to-end: a Service's backend CA bundle from the `ca.crt` of a Secret
//! (`lb.backend-ca-secret`) or a ConfigMap (`lb.backend-ca-configmap`), through the fake API
//! server and through `--manifests`, with a real TLS backend on 127.0.0.1. The right CA
//! verifies (200); the object rotated to another CA makes new connections fail (502, counted
//! in `switchyard_upstream_tls_failures_total`); a reference that does not resolve is a
//! warning (an Event on the Service in a cluster) and fails closed, never falling back to
//! `--backend-ca-file`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod kube_api;
mod tls_client;

use std::time::Duration;

use common::{Backend, Transport, eventually, poll, try_request};
use kube_api::{FakeApi, Kind, Watching};
use serde_json::{Value, json};
use tls_client::{Ca, server_config};

const SECRET: &str = "serviceloadbalancer/lb.backend-ca-secret";
const CONFIGMAP: &str = "serviceloadbalancer/lb.backend-ca-configmap";

/// A TLS backend whose certificate for `web.default.svc` the returned CA issued.
async fn tls_backend() -> (Backend, Ca) {
    let ca = Ca::new("backend CA");
    let leaf = ca.server(&["web.default.svc"]);
    let b = Backend::builder("tls")
        .transport(Transport::Tls(server_config(&leaf, &[b"http/1.1"])))
        .start()
        .await;
    (b, ca)
}

/// Service `default/web`, port 80 over TLS (`appProtocol: https`), with `annotations`.
fn web(annotations: &[(&str, &str)]) -> Value {
    let ann: serde_json::Map<String, Value> = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "default", "annotations": ann},
        "spec": {"ports": [{"name": "https", "port": 80, "protocol": "TCP", "appProtocol": "https"}],
                 "clusterIP": "10.96.0.1"},
    })
}

fn web_slice(port: u16) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-1", "namespace": "default",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    })
}

/// A `kubernetes.io/tls` Secret as cert-manager writes one: `ca.crt` beside the pair.
fn ca_secret(name: &str, ca: &Ca) -> Value {
    let leaf = ca.server(&["unused.test"]);
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": "default"},
        "type": "kubernetes.io/tls",
        "stringData": {"ca.crt": ca.pem, "tls.crt": leaf.cert_pem, "tls.key": leaf.key_pem},
    })
}

/// A ConfigMap as trust-manager writes one, with an unrelated key beside `ca.crt`.
fn ca_config_map(name: &str, ca: &Ca) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"ca.crt": ca.pem, "app.properties": "x=1\n"},
    })
}

async fn status(port: u16) -> Option<u16> {
    try_request(port, "GET", "/web/a", &[])
        .await
        .ok()
        .map(|r| r.status)
}

async fn until(port: u16, want: u16) -> bool {
    eventually(Duration::from_secs(15), || async {
        status(port).await == Some(want)
    })
    .await
}

async fn admin(port: u16, path: &str) -> String {
    try_request(port, "GET", path, &[]).await.unwrap().body
}

async fn tls_failures(admin_port: u16) -> f64 {
    admin(admin_port, "/metrics")
        .await
        .lines()
        .find(|l| l.starts_with("switchyard_upstream_tls_failures_total{entry=\"web\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

async fn explain_ca(admin_port: u16) -> Value {
    let x: Value = serde_json::from_str(&admin(admin_port, "/explain?path=/web/a").await).unwrap();
    x["entry"]["backend_ca_object"].clone()
}

/// The right CA, rotated to a wrong one, and back: each version verifies new connections.
async fn rotates(w: &Watching, api: &FakeApi, object: impl Fn(&Ca) -> Value, right: &Ca) {
    assert!(until(w.http_port, 200).await, "never 200:\n{}", w.stderr());
    let before = tls_failures(w.admin_port).await;
    api.apply(object(&Ca::new("another CA")));
    assert!(
        until(w.http_port, 502).await,
        "rotated to the wrong CA, still not refused:\n{}",
        w.stderr()
    );
    assert!(tls_failures(w.admin_port).await > before, "counted");
    api.apply(object(right));
    assert!(until(w.http_port, 200).await, "rotated back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secrets_ca_crt_verifies_the_backend_and_rotates() {
    let (b, right) = tls_backend().await;
    let api = FakeApi::start_reaching_local_backends().await;
    api.apply_all(vec![
        web(&[(SECRET, "web-ca")]),
        web_slice(b.port),
        ca_secret("web-ca", &right),
    ]);
    // The flag's bundle is the wrong CA: the Secret's, not it, is used.
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("flag.pem");
    std::fs::write(&flag, Ca::new("flag CA").pem).unwrap();
    let w = api.spawn_switchyard(&["--backend-ca-file", flag.to_str().unwrap()], "warn");
    rotates(&w, &api, |ca| ca_secret("web-ca", ca), &right).await;
    assert_eq!(
        explain_ca(w.admin_port).await,
        json!({"kind": "Secret", "namespace": "default", "name": "web-ca", "key": "ca.crt",
               "resolved": true})
    );
    assert!(b.count() > 0);

    // Deleted: unresolved, a warning, and refused rather than the flag's bundle.
    api.delete(Kind::Secret, "default", "web-ca");
    assert!(until(w.http_port, 502).await);
    assert_eq!(explain_ca(w.admin_port).await["resolved"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_maps_ca_crt_verifies_and_a_missing_one_fails_closed_with_an_event() {
    let (b, right) = tls_backend().await;
    let api = FakeApi::start_reaching_local_backends().await;
    let mut svc = web(&[(CONFIGMAP, "web-trust")]);
    svc["metadata"]["uid"] = json!("uid-web");
    api.apply_all(vec![svc, web_slice(b.port)]);
    let w = api.spawn_switchyard(&[], "warn");
    // Not there yet: refused, and an Event on the Service says why.
    assert!(until(w.http_port, 502).await, "{}", w.stderr());
    let evented = eventually(Duration::from_secs(10), || async {
        api.events().iter().any(|e| {
            e["regarding"]["kind"] == "Service"
                && e["regarding"]["name"] == "web"
                && e["note"]
                    .as_str()
                    .is_some_and(|n| n.contains("ConfigMap default/\"web-trust\""))
        })
    })
    .await;
    assert!(evented, "no Event on the Service: {:?}", api.events());
    assert_eq!(b.count(), 0, "nothing reached the backend unverified");
    assert!(
        w.stderr().contains("lb.backend-ca-configmap"),
        "{}",
        w.stderr()
    );

    api.apply(ca_config_map("web-trust", &right));
    rotates(&w, &api, |ca| ca_config_map("web-trust", ca), &right).await;
    assert_eq!(explain_ca(w.admin_port).await["kind"], "ConfigMap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_config_maps_are_one_warning_and_the_rest_is_served() {
    let (b, right) = tls_backend().await;
    let plain = Backend::start("plain").await;
    let api = FakeApi::start_reaching_local_backends().await;
    api.forbid(Kind::ConfigMap);
    api.apply_all(vec![
        web(&[(CONFIGMAP, "web-trust")]),
        web_slice(b.port),
        ca_config_map("web-trust", &right),
        kube_api::service("plain", &[]),
        kube_api::slice("plain", "plain-1", plain.port, true, true, false),
    ]);
    let w = api.spawn_switchyard(&[], "warn");
    let served = eventually(Duration::from_secs(15), || async {
        try_request(w.http_port, "GET", "/plain/x", &[])
            .await
            .is_ok_and(|r| r.status == 200)
    })
    .await;
    assert!(served, "{}", w.stderr());
    assert_eq!(status(w.http_port).await, Some(502), "fails closed");
    // Retried with backoff meanwhile, but warned about once.
    let tried = poll(
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async { (api.attempts(Kind::ConfigMap) >= 3).then_some(()) },
    )
    .await;
    assert!(tried.is_some());
    let stderr = w.stderr();
    let warned = stderr
        .lines()
        .filter(|l| l.contains("cannot watch") && l.contains("configmaps"))
        .count();
    assert_eq!(warned, 1, "{stderr}");
}

async fn offline_until(sy: &common::Switchyard, want: u16) -> bool {
    poll(
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async { (sy.get("/web/a").await.status == want).then_some(()) },
    )
    .await
    .is_some()
}

/// Offline: the same annotations read Secrets and ConfigMaps from the manifest files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offline_manifests_resolve_secrets_and_config_maps_the_same_way() {
    let (b, right) = tls_backend().await;
    let wrong = Ca::new("another CA");
    let with = |svc: Value, objs: &[Value]| {
        let mut v = vec![svc, web_slice(b.port)];
        v.extend_from_slice(objs);
        v
    };
    let sy = common::switchyard_on(
        with(web(&[(SECRET, "web-ca")]), &[ca_secret("web-ca", &right)]),
        "true",
        &[],
    )
    .await;
    assert_eq!(sy.get("/web/a").await.status, 200, "{}", sy.stderr());
    sy.rewrite(&with(
        web(&[(SECRET, "web-ca")]),
        &[ca_secret("web-ca", &wrong)],
    ));
    assert!(offline_until(&sy, 502).await, "rotated to the wrong CA");
    sy.rewrite(&with(
        web(&[(CONFIGMAP, "web-trust")]),
        &[ca_config_map("web-trust", &right)],
    ));
    assert!(offline_until(&sy, 200).await, "from a ConfigMap");
    sy.rewrite(&with(web(&[(CONFIGMAP, "web-trust")]), &[]));
    assert!(offline_until(&sy, 502).await, "missing: fails closed");
    assert!(
        sy.stderr().contains("lb.backend-ca-configmap"),
        "warned: {}",
        sy.stderr()
    );
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// 10,000 ConfigMaps without `ca.crt` (2 KiB of configuration each, 20 MiB in all) beside the
/// one a Service names: they are listed (ConfigMaps have no field to select them by), but cut
/// down as they arrive and not kept, so once the list has passed (the fake answers it in one
/// page, where a real API server pages it by 500) switchyard's memory is what it is without
/// them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_unrelated_config_maps_cost_no_memory() {
    let (b, right) = tls_backend().await;
    let start = |unrelated: bool| {
        let (port, right) = (b.port, &right);
        async move {
            let api = FakeApi::start_reaching_local_backends().await;
            let mut objs = vec![
                web(&[(CONFIGMAP, "web-trust")]),
                web_slice(port),
                ca_config_map("web-trust", right),
            ];
            if unrelated {
                let blob = "x".repeat(2048);
                for i in 0..10_000 {
                    objs.push(json!({
                        "apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("app-{i}"), "namespace": "default"},
                        "data": {"app.properties": blob},
                    }));
                }
            }
            api.apply_all(objs);
            let w = api.spawn_switchyard(&[], "warn");
            assert!(until(w.http_port, 200).await, "{}", w.stderr());
            (api, w)
        }
    };
    let without = {
        let (_api, w) = start(false).await;
        // Settled: the same figure twice, 500 ms apart (bounded).
        let mut last = 0;
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = rss_kib(w.child.id());
            if now.abs_diff(last) < 256 {
                break;
            }
            last = now;
        }
        last
    };
    let (_api, w) = start(true).await;
    // 10,000 x 2 KiB kept would be about 20 MiB more; allow 6 MiB. jemalloc gives the list's
    // passage back within about 10 s.
    let (mut peak, mut with) = (0, 0);
    let settled = poll(Duration::from_secs(40), Duration::from_millis(500), || {
        with = rss_kib(w.child.id());
        peak = peak.max(with);
        std::future::ready((with < without + 6 * 1024).then_some(()))
    })
    .await;
    println!(
        "RSS without unrelated ConfigMaps {without} KiB; with 10,000: {with} KiB settled, \
         {peak} KiB at most while sampled"
    );
    assert!(
        settled.is_some(),
        "unrelated ConfigMaps cost memory: {without} KiB -> {with} KiB"
    );
}

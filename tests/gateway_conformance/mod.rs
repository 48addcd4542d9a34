//! The harness of the Gateway API conformance cases (tests/e2e_gateway_conformance.rs): the
//! upstream manifests (tests/data/gateway-api, v1.6.1) loaded as upstream applies them, the
//! base manifests' Deployments turned into echo-basic pods on 127.0.0.1 ([`echo`]), each
//! selector Service given EndpointSlices to its pods, the TLS Secrets upstream creates at setup
//! generated here, switchyard started on all of it (offline, or through the fake API server:
//! the including test crate's `SOURCE`), and upstream's
//! `ExpectedResponse` checked the way `conformance/utils/http/http.go` checks it ([`expect`]).
//!
//! Nothing here reads /work/shared: a user's clone holds the copies under tests/data.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod echo;
pub mod expect;
pub mod grpc;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::TcpStream;

use crate::common::{Switchyard, eventually, free_port, switchyard};
use crate::kube_api::{FakeApi, Kind, Watching};
use echo::Pod;

/// The name substituted for upstream's `{GATEWAY_CLASS_NAME}`.
pub const GATEWAY_CLASS: &str = "switchyard-conformance";
/// switchyard's default `--gateway-controller-name`.
pub const CONTROLLER: &str = "switchyard.io/gateway-controller";
/// upstream's `InfrastructureNamespace`, `AppBackendNamespace`, web backend namespace.
pub const INFRA: &str = "gateway-conformance-infra";
pub const APP: &str = "gateway-conformance-app-backend";
pub const WEB: &str = "gateway-conformance-web-backend";

/// At most this many pods per Deployment (upstream's base manifests ask for 1 or 2).
const MAX_REPLICAS: u64 = 2;

/// A certificate and key made at setup, as upstream's `MustCreateSelfSignedCertSecret`.
pub struct SelfSigned {
    pub der: Vec<u8>,
    pub cert_pem: String,
    pub key_pem: String,
}

/// The TLS Secrets upstream's suite creates before any test (`suite.go`, `Setup`): namespace,
/// name, hosts.
const SETUP_SECRETS: [(&str, &str, &[&str]); 3] = [
    (WEB, "certificate", &["*"]),
    (INFRA, "tls-validity-checks-certificate", &["*", "*.org"]),
    (
        INFRA,
        "tls-passthrough-checks-certificate",
        &["abc.example.com"],
    ),
];

/// One conformance run: switchyard on the base manifests plus one case's, with its pods.
/// Where switchyard reads the cases' objects from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `--manifests` files.
    Manifests,
    /// The fake API server, watched as a cluster.
    Cluster,
}

/// A switchyard serving a case, from either source.
pub struct Running {
    pub http_port: u16,
    process: Process,
    /// The flags it was started with beyond the source and its own ports.
    args: Vec<String>,
}

enum Process {
    Offline(Switchyard),
    // The API server outlives the switchyard watching it (fields drop in order).
    Cluster(Watching, FakeApi),
}

impl Running {
    pub fn stderr(&self) -> String {
        match &self.process {
            Process::Offline(sy) => sy.stderr(),
            Process::Cluster(w, _) => w.stderr(),
        }
    }
}

pub struct Suite {
    pub sy: Running,
    pub pods: Vec<Pod>,
    /// The TLS port (`--https-port`), serving the Gateways' port-443 listeners.
    pub https_port: u16,
    /// The setup Secrets by (namespace, name).
    pub secrets: BTreeMap<(String, String), SelfSigned>,
    _certs: tempfile::TempDir,
}

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/gateway-api/conformance")
}

/// The YAML documents of one upstream manifest file (`base/manifests.yaml`, or `<case>.yaml`
/// for upstream's `conformance/tests/<case>.yaml`), with `{GATEWAY_CLASS_NAME}` substituted as
/// upstream's applier does.
pub fn load(rel: &str) -> Vec<Value> {
    let path = data_dir().join(rel);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .replace("{GATEWAY_CLASS_NAME}", GATEWAY_CLASS);
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{rel}: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

fn self_signed(hosts: &[&str]) -> SelfSigned {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params =
        rcgen::CertificateParams::new(hosts.iter().map(|h| h.to_string()).collect::<Vec<_>>())
            .expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "Kubernetes Gateway API");
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        hosts.first().copied().unwrap_or(""),
    );
    let cert = params.self_signed(&key).expect("self-signed");
    SelfSigned {
        der: cert.der().to_vec(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

fn labels_match(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .is_some_and(|sel| !sel.is_empty() && sel.iter().all(|(k, v)| labels.get(k) == Some(v)))
}

/// Whether a Deployment's containers set `GRPC_ECHO_SERVER` (upstream's gRPC backends).
fn grpc_echo(deployment: &Value) -> bool {
    deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["env"].as_array())
        .flatten()
        .any(|e| e["name"] == "GRPC_ECHO_SERVER")
}

/// The objects switchyard is given and the pods behind them, from upstream manifest files.
pub struct World {
    pub objects: Vec<Value>,
    pub pods: Vec<Pod>,
    pub secrets: BTreeMap<(String, String), SelfSigned>,
}

/// Turns upstream manifests into what switchyard reads offline: every Deployment becomes
/// pods (and is left out), every Service with a selector gets one EndpointSlice per pod it
/// selects, our GatewayClass and the setup Secrets are added.
pub async fn world(files: &[&str]) -> World {
    let mut docs: Vec<Value> = files.iter().flat_map(|f| load(f)).collect();
    let mut pods: Vec<Pod> = Vec::new();
    let mut pod_labels: Vec<Value> = Vec::new();
    for d in docs.iter().filter(|d| d["kind"] == "Deployment") {
        let ns = str_at(d, &["metadata", "namespace"]).unwrap_or("default");
        let name = str_at(d, &["metadata", "name"]).expect("Deployment name");
        let replicas = d["spec"]["replicas"]
            .as_u64()
            .unwrap_or(1)
            .clamp(1, MAX_REPLICAS);
        for i in 0..replicas {
            // `<deployment>-<replicaset hash>-<pod suffix>`, as upstream's weight helper
            // (extractBackendName) and the `Backend` prefix check expect.
            let pod_name = format!("{name}-5d8f9c7b6-p{i}x");
            // echo-basic serves gRPC instead of HTTP when GRPC_ECHO_SERVER is set.
            let pod = if grpc_echo(d) {
                grpc::start_pod(name, &pod_name, ns).await
            } else {
                Pod::start(name, &pod_name, ns).await
            };
            pods.push(pod);
            pod_labels.push(d["spec"]["template"]["metadata"]["labels"].clone());
        }
    }
    let mut slices = Vec::new();
    for svc in docs.iter().filter(|d| d["kind"] == "Service") {
        let ns = str_at(svc, &["metadata", "namespace"]).unwrap_or("default");
        let name = str_at(svc, &["metadata", "name"]).expect("Service name");
        let selector = &svc["spec"]["selector"];
        for (pod, labels) in pods.iter().zip(&pod_labels) {
            if pod.namespace != ns || !labels_match(selector, labels) {
                continue;
            }
            slices.push(pod_slice(svc, ns, name, pod));
        }
    }
    docs.retain(|d| !matches!(d["kind"].as_str(), Some("Deployment" | "ConfigMap")));
    docs.extend(slices);
    docs.push(json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "GatewayClass",
        "metadata": {"name": GATEWAY_CLASS},
        "spec": {"controllerName": CONTROLLER},
    }));
    let mut secrets = BTreeMap::new();
    for (ns, name, hosts) in SETUP_SECRETS {
        let cert = self_signed(hosts);
        docs.push(json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": ns},
            "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": cert.cert_pem, "tls.key": cert.key_pem},
        }));
        secrets.insert((ns.to_string(), name.to_string()), cert);
    }
    World {
        objects: docs,
        pods,
        secrets,
    }
}

/// The EndpointSlice of one pod of a Service: every Service port (its name and appProtocol)
/// on the pod's one echo port.
fn pod_slice(svc: &Value, ns: &str, name: &str, pod: &Pod) -> Value {
    let ports: Vec<Value> = svc["spec"]["ports"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    let mut port = json!({"port": pod.port, "protocol": "TCP"});
                    if let Some(n) = p["name"].as_str() {
                        port["name"] = json!(n);
                    }
                    if let Some(a) = p["appProtocol"].as_str() {
                        port["appProtocol"] = json!(a);
                    }
                    port
                })
                .collect()
        })
        .unwrap_or_default();
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": format!("{name}-{}", pod.name),
            "namespace": ns,
            "labels": {"kubernetes.io/service-name": name},
        },
        "addressType": "IPv4",
        "endpoints": [{
            "addresses": ["127.0.0.1"],
            "conditions": {"ready": true, "serving": true, "terminating": false},
            "targetRef": {"kind": "Pod", "name": pod.name, "namespace": ns},
        }],
        "ports": ports,
    })
}

/// Starts switchyard on the base manifests plus `case` files (upstream's `tests/`), Gateway
/// listeners on port 80 served on its HTTP port and on port 443 on its TLS port.
pub async fn start(case: &[&str]) -> Suite {
    let mut files = vec!["base/manifests.yaml".to_string()];
    files.extend(case.iter().map(|c| c.to_string()));
    let files: Vec<&str> = files.iter().map(String::as_str).collect();
    start_world(world(&files).await).await
}

/// [`start`] with `--gateway-addresses` set to `pool`: each Gateway gets an address of its
/// own, which [`Suite::gateway_address`] reads as upstream does.
pub async fn start_addressed(case: &[&str], pool: &[&str]) -> Suite {
    let mut files = vec!["base/manifests.yaml".to_string()];
    files.extend(case.iter().map(|c| c.to_string()));
    let files: Vec<&str> = files.iter().map(String::as_str).collect();
    let pool = pool.join(",");
    start_world_with(world(&files).await, &["--gateway-addresses", &pool]).await
}

/// [`start`] on objects already built (a case that edits them first).
pub async fn start_world(world: World) -> Suite {
    start_world_with(world, &[]).await
}

/// [`start_world`] with more flags.
pub async fn start_world_with(world: World, extra: &[&str]) -> Suite {
    let certs = tempfile::tempdir().expect("tempdir");
    // The TLS port needs a default certificate (`--ssl-cert`); the Gateways' listeners bring
    // their own from Secrets.
    let default = self_signed(&["default.switchyard.invalid"]);
    let default_file = certs.path().join("default.pem");
    std::fs::write(
        &default_file,
        format!("{}{}", default.cert_pem, default.key_pem),
    )
    .expect("write default cert");
    let args_with = |https_port: u16| -> Vec<String> {
        let mut args: Vec<String> = [
            "--gateway-http-port",
            "80",
            "--gateway-https-port",
            "443",
            "--https-port",
            &https_port.to_string(),
            "--ssl-cert",
            default_file.to_str().expect("utf-8 path"),
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        args.extend(extra.iter().map(|a| a.to_string()));
        args
    };
    let mut https_port = free_port();
    let sy = match crate::SOURCE {
        Source::Manifests => {
            let owned = args_with(https_port);
            let args: Vec<&str> = owned.iter().map(String::as_str).collect();
            let sy = switchyard(world.objects).args(&args).start().await;
            Running {
                http_port: sy.http_port,
                process: Process::Offline(sy),
                args: owned,
            }
        }
        Source::Cluster => {
            let api = FakeApi::start_reaching_local_backends().await;
            api.apply_all(world.objects);
            // Ports are picked by bind-and-drop, so another test may take one before
            // switchyard binds it: a start that exits at once is tried again with fresh
            // ports (at most 3 times).
            let mut tries = 0;
            loop {
                tries += 1;
                let owned = args_with(https_port);
                let args: Vec<&str> = owned.iter().map(String::as_str).collect();
                let mut w = api.spawn_switchyard(&args, "info");
                let mut exited = false;
                let ready = eventually(Duration::from_secs(20), || {
                    exited = exited || w.child.try_wait().ok().flatten().is_some();
                    let (admin, gone) = (w.admin_port, exited);
                    async move {
                        gone || crate::common::try_request(admin, "GET", "/readyz", &[])
                            .await
                            .is_ok_and(|r| r.status == 200)
                    }
                })
                .await;
                if ready && !exited {
                    break Running {
                        http_port: w.http_port,
                        process: Process::Cluster(w, api),
                        args: owned,
                    };
                }
                assert!(
                    exited && tries < 3,
                    "switchyard never became ready:\n{}",
                    w.stderr()
                );
                https_port = free_port();
            }
        }
    };
    let up = eventually(Duration::from_secs(10), || async {
        TcpStream::connect(("127.0.0.1", https_port)).await.is_ok()
    })
    .await;
    assert!(up, "the TLS port never opened:\n{}", sy.stderr());
    Suite {
        sy,
        pods: world.pods,
        https_port,
        secrets: world.secrets,
        _certs: certs,
    }
}

impl Suite {
    /// The setup Secret `ns/name`.
    pub fn secret(&self, ns: &str, name: &str) -> &SelfSigned {
        self.secrets
            .get(&(ns.to_string(), name.to_string()))
            .unwrap_or_else(|| panic!("no setup Secret {ns}/{name}"))
    }

    /// The address of Gateway `ns/name`, as upstream's `GatewayAndHTTPRoutesMustBeAccepted`
    /// reads it: the first of its `status.addresses`. Through the fake API server that is the
    /// status switchyard wrote; offline no status is written, so it is the `--dry-run` table
    /// of the same files and flags (`gateway.addressed`), the assignment that status reports.
    pub async fn gateway_address(&self, ns: &str, name: &str) -> IpAddr {
        match &self.sy.process {
            Process::Cluster(_, api) => {
                let deadline = std::time::Instant::now() + Duration::from_secs(20);
                loop {
                    let found = api.object(Kind::Gateway, ns, name).and_then(|g| {
                        g["status"]["addresses"][0]["value"]
                            .as_str()
                            .and_then(|v| v.parse().ok())
                    });
                    if let Some(ip) = found {
                        return ip;
                    }
                    assert!(
                        std::time::Instant::now() < deadline,
                        "Gateway {ns}/{name} never got status.addresses:\n{}",
                        self.sy.stderr()
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            Process::Offline(sy) => {
                let out = std::process::Command::new(crate::common::bin())
                    .arg("--dry-run")
                    .arg("--manifests")
                    .arg(&sy.manifest)
                    .args(&self.sy.args)
                    .output()
                    .expect("run --dry-run");
                assert!(out.status.success(), "--dry-run failed: {out:?}");
                let table: Value = serde_json::from_slice(&out.stdout).expect("dry-run JSON");
                table["gateway"]["addressed"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|a| a["gateway"] == json!([ns, name]))
                    .and_then(|a| a["address"].as_str()?.parse().ok())
                    .unwrap_or_else(|| panic!("Gateway {ns}/{name} has no address: {table}"))
            }
        }
    }

    /// The pods of Deployment `ns/name`.
    pub fn pods_of(&self, ns: &str, name: &str) -> Vec<&Pod> {
        self.pods
            .iter()
            .filter(|p| p.namespace == ns && p.deployment == name)
            .collect()
    }
}

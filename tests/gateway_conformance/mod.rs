//! The harness of the Gateway API conformance cases (tests/e2e_gateway_conformance.rs): the
//! upstream manifests (tests/data/gateway-api, v1.6.1) loaded as upstream applies them, the
//! base manifests' Deployments turned into echo-basic pods on 127.0.0.1 ([`echo`]; the gRPC
//! ones [`grpc`], the TCP echo ones [`tcp`], the UDP echo ones [`udp`], TLS where the Deployment
//! mounts a setup Secret; the CoreDNS one a DNS responder, [`dns`]), each selector Service given
//! EndpointSlices to its pods (each port with the Service port's protocol), the TLS Secrets upstream creates at setup
//! generated here, switchyard started on all of it (offline, or through the fake API server:
//! the including test crate's `SOURCE`), and upstream's
//! `ExpectedResponse` checked the way `conformance/utils/http/http.go` checks it ([`expect`]).
//!
//! Nothing here reads /work/shared: a user's clone holds the copies under tests/data.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod dns;
pub mod echo;
pub mod expect;
pub mod grpc;
pub mod tcp;
pub mod udp;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
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

/// The self-signed TLS Secrets upstream's suite creates before any test (`suite.go`,
/// `Setup`): namespace, name, hosts.
const SETUP_SECRETS: [(&str, &str, &[&str]); 4] = [
    (WEB, "certificate", &["*"]),
    (INFRA, "tls-validity-checks-certificate", &["*", "*.org"]),
    (
        INFRA,
        "tls-passthrough-checks-certificate",
        &["abc.example.com"],
    ),
    (
        APP,
        "tls-passthrough-checks-certificate",
        &["abc.example.com"],
    ),
];

/// The Secrets `Setup` signs with the CA of ConfigMap `tls-checks-ca-certificate`: namespace,
/// name, DNS names, URIs. `tls-checks-certificate` is what the base manifests' `tls-backend` and
/// `tls-backend-2` serve; `tls-terminate-checks-certificate` is named by TLS listeners in
/// `mode: Terminate`.
const SETUP_CA_SECRETS: [(&str, &str, &[&str], &[&str]); 2] = [
    (
        INFRA,
        "tls-checks-certificate",
        &["abc.example.com", "other.example.com"],
        &["spiffe://abc.example.com/test-identity"],
    ),
    (
        INFRA,
        "tls-terminate-checks-certificate",
        &["tls.example.com"],
        &[],
    ),
];

/// The client-certificate CAs `Setup` creates for the frontend client-certificate validation
/// cases (`spec.tls.frontend`): ConfigMap (`ca.crt`) and the client-certificate Secret it
/// signed, both in the infra namespace. Each CA signs only its own client certificate, so
/// the per-port client's certificate is of another CA than the default's, and back.
pub const SETUP_CLIENT_CAS: [(&str, &str); 2] = [
    (
        "tls-validity-checks-ca-certificate",
        "tls-validity-checks-client-certificate",
    ),
    (
        "tls-validity-checks-per-port-ca-certificate",
        "tls-validity-checks-per-port-client-certificate",
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
    /// The certificate of `--ssl-cert` (what the TLS port presents for a name nothing takes).
    pub default_cert: Vec<u8>,
    /// The objects switchyard was started on (offline: [`Suite::rewrite`] edits them).
    pub objects: Vec<Value>,
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

/// A CA certificate and the Secrets it signed, as `Setup`'s `MustCreateCACertConfigMap` and
/// `MustCreateCASignedCertSecret`: the CA's PEM and each leaf.
fn ca_signed(leaves: &[(&[&str], &[&str])]) -> (String, Vec<SelfSigned>) {
    let ca_key = rcgen::KeyPair::generate().expect("CA key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::OrganizationName, "Kubernetes Gateway API");
    ca.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let ca_pem = ca.self_signed(&ca_key).expect("CA").pem();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let signed = leaves
        .iter()
        .map(|(dns, uris)| {
            let key = rcgen::KeyPair::generate().expect("key");
            let mut params = rcgen::CertificateParams::new(
                dns.iter().map(|h| h.to_string()).collect::<Vec<_>>(),
            )
            .expect("params");
            for uri in *uris {
                params.subject_alt_names.push(rcgen::SanType::URI(
                    rcgen::string::Ia5String::try_from(*uri).expect("URI SAN"),
                ));
            }
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, "Kubernetes Gateway API");
            params.distinguished_name.push(
                rcgen::DnType::CommonName,
                dns.first().copied().unwrap_or(""),
            );
            let cert = params.signed_by(&key, &issuer).expect("CA-signed");
            SelfSigned {
                der: cert.der().to_vec(),
                cert_pem: cert.pem(),
                key_pem: key.serialize_pem(),
            }
        })
        .collect();
    (ca_pem, signed)
}

/// A CA of its own and one client certificate it signed (`CN=<cn>`, extended key usage
/// clientAuth), as `Setup` makes the client-certificate CAs: the CA's PEM and the leaf.
fn client_ca(cn: &str) -> (String, SelfSigned) {
    let ca_key = rcgen::KeyPair::generate().expect("CA key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::OrganizationName, "Kubernetes Gateway API");
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, format!("{cn} CA"));
    ca.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca_pem = ca.self_signed(&ca_key).expect("CA").pem();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "Kubernetes Gateway API");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &issuer).expect("client certificate");
    (
        ca_pem,
        SelfSigned {
            der: cert.der().to_vec(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        },
    )
}

/// The value of env `name` in a Deployment's containers, if one sets it.
fn env_of<'a>(deployment: &'a Value, name: &str) -> Option<&'a Value> {
    deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["env"].as_array())
        .flatten()
        .find(|e| e["name"] == name)
}

/// Whether a Deployment's containers run a CoreDNS image (the base manifests' `coredns`).
fn coredns(deployment: &Value) -> bool {
    deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["image"].as_str())
        .any(|i| i.contains("/coredns/coredns:") || i.starts_with("coredns/coredns:"))
}

/// Whether a Deployment's containers set `GRPC_ECHO_SERVER` (upstream's gRPC backends).
fn grpc_echo(deployment: &Value) -> bool {
    env_of(deployment, "GRPC_ECHO_SERVER").is_some()
}

/// The server configuration of a Deployment that asks echo-basic for TLS (both `cert` and
/// `key` env set, as echo-basic and its TCP server each name them) with the certificate of
/// the setup Secret it mounts; None when it asks for none (or mounts no Secret we made).
fn pod_tls(
    deployment: &Value,
    ns: &str,
    cert: &str,
    key: &str,
    secrets: &BTreeMap<(String, String), SelfSigned>,
) -> Option<Arc<rustls::ServerConfig>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    env_of(deployment, cert)?;
    env_of(deployment, key)?;
    let secret = deployment["spec"]["template"]["spec"]["volumes"]
        .as_array()?
        .iter()
        .find_map(|v| v["secret"]["secretName"].as_str())?;
    let leaf = secrets.get(&(ns.to_string(), secret.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(leaf.der.clone())],
            PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).expect("pod key"),
        )
        .expect("pod certificate");
    Some(Arc::new(config))
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
    // The base manifests' ConfigMap (CoreDNS's Corefile) is not switchyard's; a case's (a
    // BackendTLSPolicy's CA reference) is kept.
    let mut docs: Vec<Value> = files
        .iter()
        .flat_map(|f| {
            load(f)
                .into_iter()
                .filter(move |d| !(f.starts_with("base/") && d["kind"] == "ConfigMap"))
        })
        .collect();
    let mut secrets = BTreeMap::new();
    for (ns, name, hosts) in SETUP_SECRETS {
        secrets.insert((ns.to_string(), name.to_string()), self_signed(hosts));
    }
    let leaves: Vec<(&[&str], &[&str])> = SETUP_CA_SECRETS
        .iter()
        .map(|(_, _, dns, uris)| (*dns, *uris))
        .collect();
    let (ca_pem, signed) = ca_signed(&leaves);
    for ((ns, name, _, _), cert) in SETUP_CA_SECRETS.iter().zip(signed) {
        secrets.insert((ns.to_string(), name.to_string()), cert);
    }
    // The CA's ConfigMap (`ca.crt`), which the BackendTLSPolicy cases name, and
    // `mismatch-ca-certificate`, a CA that signed nothing (`Setup` makes it so that a policy
    // naming it fails validation).
    let (mismatch_ca_pem, _) = ca_signed(&[]);
    let mut ca_maps = vec![
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "tls-checks-ca-certificate", "namespace": INFRA},
            "data": {"ca.crt": ca_pem},
        }),
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "mismatch-ca-certificate", "namespace": INFRA},
            "data": {"ca.crt": mismatch_ca_pem},
        }),
    ];
    for (config_map, secret) in SETUP_CLIENT_CAS {
        let (ca_pem, client) = client_ca(secret);
        secrets.insert((INFRA.to_string(), secret.to_string()), client);
        ca_maps.push(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": config_map, "namespace": INFRA},
            "data": {"ca.crt": ca_pem},
        }));
    }
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
            // echo-basic's TCP server when TCP_ECHO_SERVER is set (TLS with
            // TLS_SERVER_CERT and TLS_SERVER_PRIV_KEY); its HTTP server otherwise (HTTPS too
            // with TLS_SERVER_CERT and TLS_SERVER_PRIVKEY). Its UDP echo when
            // UDP_ECHO_SERVER is set. A CoreDNS image answers DNS.
            let service = env_of(d, "SERVICE_NAME")
                .and_then(|e| e["value"].as_str())
                .unwrap_or("");
            let pod = if grpc_echo(d) {
                grpc::start_pod(name, &pod_name, ns).await
            } else if coredns(d) {
                dns::start_pod(name, &pod_name, ns).await
            } else if env_of(d, "UDP_ECHO_SERVER").is_some() {
                udp::start_pod(name, &pod_name, ns, service).await
            } else if env_of(d, "TCP_ECHO_SERVER").is_some() {
                let tls = pod_tls(d, ns, "TLS_SERVER_CERT", "TLS_SERVER_PRIV_KEY", &secrets);
                tcp::start_pod(name, &pod_name, ns, service, tls).await
            } else {
                let tls = pod_tls(d, ns, "TLS_SERVER_CERT", "TLS_SERVER_PRIVKEY", &secrets);
                Pod::start_tls(name, &pod_name, ns, tls).await
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
    docs.retain(|d| d["kind"] != "Deployment");
    docs.extend(slices);
    docs.extend(ca_maps);
    docs.push(json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "GatewayClass",
        "metadata": {"name": GATEWAY_CLASS},
        "spec": {"controllerName": CONTROLLER},
    }));
    for ((ns, name), cert) in &secrets {
        docs.push(json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": ns},
            "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": cert.cert_pem, "tls.key": cert.key_pem},
        }));
    }
    World {
        objects: docs,
        pods,
        secrets,
    }
}

/// The EndpointSlice of one pod of a Service: every Service port (its name, protocol and
/// appProtocol) on the pod's port for its `targetPort` (the TLS port for 8443 when the pod
/// serves TLS, the one echo port otherwise: a UDP pod's socket for a UDP port).
fn pod_slice(svc: &Value, ns: &str, name: &str, pod: &Pod) -> Value {
    let ports: Vec<Value> = svc["spec"]["ports"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    let target = p["targetPort"]
                        .as_u64()
                        .or_else(|| p["port"].as_u64())
                        .and_then(|t| u16::try_from(t).ok())
                        .unwrap_or(0);
                    let protocol = p["protocol"].as_str().unwrap_or("TCP");
                    let mut port = json!({"port": pod.port_for(target), "protocol": protocol});
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
            let sy = switchyard(world.objects.clone()).args(&args).start().await;
            Running {
                http_port: sy.http_port,
                process: Process::Offline(sy),
                args: owned,
            }
        }
        Source::Cluster => {
            let api = FakeApi::start_reaching_local_backends().await;
            api.apply_all(world.objects.clone());
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
        default_cert: default.der,
        objects: world.objects,
        _certs: certs,
    }
}

impl Suite {
    /// Offline only: replaces the `--manifests` file with `objects` (as upstream's suite
    /// applies or deletes an object during a case) and waits (at most 10 s) until switchyard
    /// has built a table from it (`switchyard_table_build_seconds_count` grew; a table equal
    /// to the one serving is built but not swapped in, so swaps would not tell).
    pub async fn rewrite(&self, objects: &[Value]) {
        let Process::Offline(sy) = &self.sy.process else {
            panic!("Suite::rewrite is for the offline source");
        };
        let before = table_builds(sy.admin_port).await;
        sy.rewrite(objects);
        let built = eventually(Duration::from_secs(10), || async {
            table_builds(sy.admin_port).await > before
        })
        .await;
        assert!(built, "no table built after the rewrite:\n{}", sy.stderr());
    }

    /// Through the fake API server only: creates or replaces `objects` (as upstream's suite
    /// applies them during a case) and waits (at most 10 s) until switchyard has built a table
    /// after that, as [`Suite::rewrite`] does offline.
    pub async fn apply(&self, objects: Vec<Value>) {
        let Process::Cluster(w, api) = &self.sy.process else {
            panic!("Suite::apply is for the fake API server");
        };
        let before = table_builds(w.admin_port).await;
        api.apply_all(objects);
        let built = eventually(Duration::from_secs(10), || async {
            table_builds(w.admin_port).await > before
        })
        .await;
        assert!(built, "no table built after the change:\n{}", w.stderr());
    }

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

    /// Whether switchyard writes status here (through the fake API server; offline nothing
    /// writes status).
    pub fn writes_status(&self) -> bool {
        matches!(self.sy.process, Process::Cluster(..))
    }

    /// upstream's `GatewayMustHaveCondition`: the Gateway's conditions hold `want`.
    pub async fn gateway_must_have(&self, ns: &str, gw: &str, want: &[Cond<'_>]) {
        self.status_must_hold(
            Kind::Gateway,
            ns,
            gw,
            &format!("Gateway {ns}/{gw}"),
            want,
            |s| Some(&s["conditions"]),
        )
        .await;
    }

    /// upstream's `GatewayListenerMustHaveConditions`: listener `listener`'s conditions hold
    /// `want`.
    pub async fn listener_must_have(&self, ns: &str, gw: &str, listener: &str, want: &[Cond<'_>]) {
        let what = format!("listener {listener} of Gateway {ns}/{gw}");
        self.status_must_hold(Kind::Gateway, ns, gw, &what, want, |s| {
            s["listeners"]
                .as_array()?
                .iter()
                .find(|l| l["name"] == listener)
                .map(|l| &l["conditions"])
        })
        .await;
    }

    /// upstream's `GatewayStatusMustHaveListeners`, for one field: listener `listener` of
    /// Gateway `ns/gw` counts `n` attached routes (within the consistency limit).
    pub async fn listener_attached_must_be(&self, ns: &str, gw: &str, listener: &str, n: i64) {
        let Process::Cluster(_, api) = &self.sy.process else {
            panic!("status is written only through the fake API server");
        };
        let deadline = std::time::Instant::now() + expect::MAX_TIME_TO_CONSISTENCY;
        loop {
            let status = api
                .object(Kind::Gateway, ns, gw)
                .map(|o| o["status"].clone())
                .unwrap_or(Value::Null);
            let attached = status["listeners"]
                .as_array()
                .and_then(|ls| ls.iter().find(|l| l["name"] == listener))
                .and_then(|l| l["attachedRoutes"].as_i64());
            if attached == Some(n) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "listener {listener} of Gateway {ns}/{gw}: attachedRoutes {attached:?}, not {n}: \
                 {status}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// The conditions of HTTPRoute `ns/route`'s parent status for Gateway `gw` hold `want`
    /// (upstream's `GatewayAndRoutesMustBeAccepted` and
    /// `HTTPRouteMustHaveResolvedRefsConditionsTrue`, route side).
    pub async fn route_parent_must_have(&self, ns: &str, route: &str, gw: &str, want: &[Cond<'_>]) {
        let what = format!("HTTPRoute {ns}/{route} parent {gw}");
        self.status_must_hold(Kind::HTTPRoute, ns, route, &what, want, |s| {
            s["parents"]
                .as_array()?
                .iter()
                .find(|p| p["parentRef"]["name"] == gw)
                .map(|p| &p["conditions"])
        })
        .await;
    }

    /// upstream's `BackendTLSPolicyMustHaveCondition`: the conditions of BackendTLSPolicy
    /// `ns/policy`'s ancestor entry for Gateway `gw` (of its namespace) hold `want`.
    pub async fn policy_must_have(&self, ns: &str, policy: &str, gw: &str, want: &[Cond<'_>]) {
        let what = format!("BackendTLSPolicy {ns}/{policy} ancestor {gw}");
        self.status_must_hold(Kind::BackendTLSPolicy, ns, policy, &what, want, |s| {
            s["ancestors"]
                .as_array()?
                .iter()
                .find(|a| {
                    a["ancestorRef"]["name"] == gw
                        && a["ancestorRef"]["namespace"].as_str().unwrap_or(ns) == ns
                        && a["controllerName"] == CONTROLLER
                })
                .map(|a| &a["conditions"])
        })
        .await;
    }

    /// upstream's `BackendTLSPolicyMustHaveLatestConditions`: BackendTLSPolicy `ns/policy` as
    /// stored now has ancestors, and every condition of each has the policy's generation as
    /// its `observedGeneration`. Returns that generation.
    pub fn policy_has_latest_conditions(&self, ns: &str, policy: &str) -> i64 {
        let api = self
            .api()
            .expect("status is written only through the fake API server");
        let p = api
            .object(Kind::BackendTLSPolicy, ns, policy)
            .unwrap_or_else(|| panic!("no BackendTLSPolicy {ns}/{policy}"));
        let generation = p["metadata"]["generation"].as_i64().expect("generation");
        let ancestors = p["status"]["ancestors"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            !ancestors.is_empty(),
            "BackendTLSPolicy {ns}/{policy} has no ancestors: {:#}",
            p["status"]
        );
        for a in &ancestors {
            for c in a["conditions"].as_array().into_iter().flatten() {
                assert_eq!(
                    c["observedGeneration"].as_i64(),
                    Some(generation),
                    "BackendTLSPolicy {ns}/{policy}: condition {} of ancestor {} is not of \
                     generation {generation}",
                    c["type"],
                    a["ancestorRef"]["name"]
                );
            }
        }
        generation
    }

    /// The fake API server, when switchyard watches one.
    pub fn api(&self) -> Option<&FakeApi> {
        match &self.sy.process {
            Process::Cluster(_, api) => Some(api),
            Process::Offline(_) => None,
        }
    }

    /// Polls (within the consistency limit) until the conditions `pick` finds in object
    /// `ns/name`'s status hold `want`; panics with the last status seen. Through the fake API
    /// server only.
    async fn status_must_hold(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
        what: &str,
        want: &[Cond<'_>],
        pick: impl Fn(&Value) -> Option<&Value>,
    ) {
        let Process::Cluster(_, api) = &self.sy.process else {
            panic!("status is written only through the fake API server");
        };
        let deadline = std::time::Instant::now() + expect::MAX_TIME_TO_CONSISTENCY;
        loop {
            let status = api
                .object(kind, ns, name)
                .map(|o| o["status"].clone())
                .unwrap_or(Value::Null);
            let outcome = match pick(&status) {
                Some(conds) => conditions_hold(conds, want),
                None => Err("not in status".to_string()),
            };
            match outcome {
                Ok(()) => return,
                Err(e) if std::time::Instant::now() >= deadline => panic!(
                    "{what}: {e}\nstatus: {status:#}\nswitchyard stderr:\n{}",
                    self.sy.stderr()
                ),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
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

/// An expected status condition: type, status (`"True"`/`"False"`), reason (`""`: any, as
/// upstream leaves it empty).
pub type Cond<'a> = (&'a str, &'a str, &'a str);

/// Every `want` condition is among `conds` (a `conditions` array) with its status and, when
/// one is expected, its reason.
fn conditions_hold(conds: &Value, want: &[Cond<'_>]) -> Result<(), String> {
    let conds = conds.as_array().ok_or("no conditions")?;
    for (type_, status, reason) in want {
        let Some(c) = conds.iter().find(|c| c["type"] == *type_) else {
            return Err(format!("no {type_} condition"));
        };
        if c["status"] != *status || (!reason.is_empty() && c["reason"] != *reason) {
            return Err(format!(
                "{type_}: expected {status}{}, got {} ({})",
                if reason.is_empty() {
                    String::new()
                } else {
                    format!(" ({reason})")
                },
                c["status"],
                c["reason"]
            ));
        }
    }
    Ok(())
}

/// `switchyard_table_build_seconds_count` from the admin port's /metrics (0 when unreadable).
async fn table_builds(admin_port: u16) -> f64 {
    let Ok(r) = crate::common::try_request(admin_port, "GET", "/metrics", &[]).await else {
        return 0.0;
    };
    r.body
        .lines()
        .filter_map(|l| l.strip_prefix("switchyard_table_build_seconds_count "))
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .sum()
}

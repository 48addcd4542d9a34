//! End-to-end tests against a real Kubernetes API server (kube-apiserver v1.32 + etcd from
//! `../shared/kube`, beside the clone): switchyard runs outside the cluster as a new user would
//! run it, with the RBAC of `deploy/` applied unchanged and a token of its ServiceAccount, and
//! serves real HTTP backends that live in a network namespace the tests make (a real API server
//! refuses loopback EndpointSlice addresses). Checked through real sockets and kubectl: Service
//! annotation routes following EndpointSlices, Ingress status, Gateway API status (every
//! standard-channel kind, as the API server holds it after the CRDs' schemas, CEL rules and
//! the status subresource had their say, and TCP traffic through a Gateway TCP listener),
//! leader election with a killed and a stopped leader, an API server restart, RBAC sufficiency
//! (no 403 in switchyard's log) and Events.
//!
//! Without `../shared/kube` (a user's clone) every test prints why it is skipped and passes.
//! With it, the tests need root (network namespaces) and run one at a time against one API
//! server started for the whole binary; a watchdog process stops it and deletes the network
//! namespace when this test process exits, however it exits.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use common::{free_port, poll_blocking};
use serde_json::{Value, json};

/// The real API server's scripts, where CI and the development machine have them.
const KUBE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/kube");
const GATEWAY_CRDS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/gateway-api/config/crd/standard"
);
const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy");

/// How long a change may take to show (routing, status, Events) before a test fails.
const CHANGE: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(100);

const ANN_HOST: &str = "serviceloadbalancer/lb.host";
const ANN_ALGO: &str = "serviceloadbalancer/lb.algorithm";
const ANN_MAXCONN: &str = "serviceloadbalancer/lb.maxconn";
const GATEWAY_CONTROLLER: &str = "switchyard.io/gateway-controller";

// === the shared cluster ===

/// The API server, the ServiceAccount's kubeconfig and the backends' network namespace, shared
/// by every test of this binary. The tests hold its lock while they run: one API server restart
/// or leader election at a time, and no two switchyards writing one Ingress's status.
struct Cluster {
    dir: PathBuf,
    admin: PathBuf,
    /// switchyard's kubeconfig: the API server's URL and CA, a token of switchyard/switchyard.
    service_account: PathBuf,
    url: String,
    netns: String,
    /// The network namespace's subnet: 10.210.`subnet`.0/24, .1 outside, .2 and .3 inside.
    subnet: u8,
}

/// The cluster, locked for the calling test; `None` (after one line saying why) where
/// `../shared/kube` is absent.
fn cluster(test: &str) -> Option<MutexGuard<'static, Cluster>> {
    static CLUSTER: OnceLock<Option<Mutex<Cluster>>> = OnceLock::new();
    if !Path::new(KUBE).join("start.sh").exists() {
        println!("{test}: skipped, no real API server here ({KUBE}/start.sh is absent)");
        return None;
    }
    // A failed setup fails every test, once (not one retry per test).
    let c = CLUSTER.get_or_init(|| {
        std::panic::catch_unwind(Cluster::start)
            .ok()
            .map(Mutex::new)
    });
    let c = c
        .as_ref()
        .expect("the real API server's setup failed (see the first test's panic)");
    Some(c.lock().unwrap_or_else(|e| e.into_inner()))
}

impl Cluster {
    fn start() -> Cluster {
        let t = Instant::now();
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("swy-rt-{pid}"));
        let _ = std::fs::remove_dir_all(&dir);
        let subnet = u8::try_from(pid % 200 + 20).unwrap();
        let netns = format!("swy-rt-{pid}");
        let (veth_out, veth_in) = (format!("swyrt{pid}o"), format!("swyrt{pid}i"));
        // Stops the API server and removes the network namespace once this process is gone
        // (a panic, a kill, or the end of the run), in its own session so a ^C spares it.
        let stop = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; {KUBE}/stop.sh {dir}; \
             ip netns pids {netns} 2>/dev/null | xargs -r kill -9; ip netns del {netns}; \
             ip link del {veth_out} 2>/dev/null; rm -rf {dir}",
            dir = dir.display()
        );
        let forked = Command::new("setsid")
            .args(["--fork", "sh", "-c", &stop])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("spawn the watchdog");
        assert!(forked.success(), "setsid --fork: {forked}");

        let out = Command::new(format!("{KUBE}/start.sh"))
            .arg(&dir)
            .output()
            .expect("run start.sh");
        assert!(
            out.status.success(),
            "start.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let printed = String::from_utf8_lossy(&out.stdout).into_owned();
        let var = |name: &str| {
            printed
                .split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{name}=")))
                .unwrap_or_else(|| panic!("{name} not in start.sh's output {printed:?}"))
                .to_string()
        };
        let admin = PathBuf::from(var("KUBECONFIG"));
        let url = var("KUBE_API_URL");

        // The network namespace of the backends.
        let ip = |args: &str| {
            let out = Command::new("ip")
                .args(args.split_whitespace())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "ip {args}: {} (these tests need root for network namespaces)",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let _ = Command::new("ip").args(["netns", "del", &netns]).output();
        let _ = Command::new("ip").args(["link", "del", &veth_out]).output();
        ip(&format!("netns add {netns}"));
        ip(&format!(
            "link add {veth_out} type veth peer name {veth_in}"
        ));
        ip(&format!("link set {veth_in} netns {netns}"));
        ip(&format!("addr add 10.210.{subnet}.1/24 dev {veth_out}"));
        ip(&format!("link set {veth_out} up"));
        for a in [2, 3] {
            ip(&format!(
                "netns exec {netns} ip addr add 10.210.{subnet}.{a}/24 dev {veth_in}"
            ));
        }
        ip(&format!("netns exec {netns} ip link set {veth_in} up"));
        ip(&format!("netns exec {netns} ip link set lo up"));

        let mut c = Cluster {
            service_account: dir.join("switchyard.kubeconfig"),
            dir,
            admin,
            url,
            netns,
            subnet,
        };
        // As a new user: deploy/ unchanged (the namespace, RBAC, leader election, the
        // IngressClass; the Deployment and its Service are inert without a kubelet), applied
        // server-side so that the API server checks every field against its schema.
        c.kubectl(&["apply", "--server-side", "-k", DEPLOY], None)
            .expect("apply --server-side -k deploy/");
        c.kubectl(&["apply", "--server-side", "-f", GATEWAY_CRDS], None)
            .expect("install the Gateway API CRDs");
        c.kubectl(
            &[
                "wait",
                "--for=condition=established",
                "--timeout=30s",
                "crd",
                "--all",
            ],
            None,
        )
        .expect("CRDs established");
        c.write_service_account_kubeconfig();
        println!(
            "real API server {} ready with deploy/ applied in {:.1} s",
            c.url,
            t.elapsed().as_secs_f64()
        );
        c
    }

    /// A kubeconfig with the API server's URL and CA and a fresh token of switchyard's
    /// ServiceAccount (nothing mints one on this server but the TokenRequest API).
    fn write_service_account_kubeconfig(&mut self) {
        let token = self
            .kubectl(
                &[
                    "create",
                    "token",
                    "switchyard",
                    "-n",
                    "switchyard",
                    "--duration=1h",
                ],
                None,
            )
            .expect("create token");
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster: {{server: \"{url}\", \
             certificate-authority: \"{ca}\"}}\nusers:\n- name: switchyard\n  user: {{token: \"{token}\"}}\n\
             contexts:\n- name: test\n  context: {{cluster: test, user: switchyard}}\n\
             current-context: test\n",
            url = self.url,
            ca = self.dir.join("pki/ca.crt").display(),
            token = token.trim()
        );
        std::fs::write(&self.service_account, kubeconfig).unwrap();
    }

    /// kubectl as cluster-admin; its stdout, or its stderr as the error.
    fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.admin)
            .arg("--request-timeout=15s")
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl on PATH");
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
        }
        let out = child.wait_with_output().unwrap();
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    fn apply(&self, objs: &[Value]) {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": objs});
        self.kubectl(&["apply", "-f", "-"], Some(&list.to_string()))
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// `kubectl get -o json`, or `Value::Null` when it fails (absent, say).
    fn get(&self, args: &[&str]) -> Value {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        self.kubectl(&a, None)
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or(Value::Null)
    }

    /// A namespace for one test (namespaces never finish deleting here: its objects are
    /// deleted when the guard drops).
    fn namespace(&self, name: &str) -> Namespace<'_> {
        if let Err(e) = self.kubectl(&["create", "namespace", name], None) {
            assert!(e.contains("AlreadyExists"), "{e}");
        }
        Namespace {
            cluster: self,
            name: name.to_string(),
        }
    }

    /// Inside address `.2` or `.3` of the backends' network namespace.
    fn backend_ip(&self, host: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 210, self.subnet, host)
    }

    /// A real HTTP backend in the network namespace on `ip:port`, answering every request
    /// with `"<name> served <path>"`.
    fn backend(&self, name: &str, ip: Ipv4Addr, port: u16) -> Proc {
        const SERVER: &str = r#"
import sys, http.server
name, ip, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = f"{name} served {self.path}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer((ip, port), H).serve_forever()
"#;
        let child = Command::new("ip")
            .args(["netns", "exec", &self.netns, "python3", "-c", SERVER, name])
            .arg(ip.to_string())
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3");
        let p = Proc { child };
        let addr = SocketAddr::from((ip, port));
        let up = poll_blocking(Duration::from_secs(10), POLL, || {
            http_get(addr, "probe", "/").ok().filter(|r| r.0 == 200)
        });
        assert!(up.is_some(), "backend {name} on {addr} never answered");
        p
    }

    /// switchyard with the ServiceAccount's kubeconfig, on free loopback ports, `extra` flags;
    /// ready (its /readyz answers 200) when returned.
    fn switchyard(&self, name: &str, extra: &[&str]) -> Switchyard {
        let log = tempfile::tempdir().unwrap();
        let (http, https, admin) = (free_port(), free_port(), free_port());
        let child = Command::new(common::bin())
            .arg("--kubeconfig")
            .arg(&self.service_account)
            .args(["--bind-address", "127.0.0.1", "--stats-port", "0"])
            .args(["--http-port", &http.to_string()])
            .args(["--https-port", &https.to_string()])
            .args(["--admin-port", &admin.to_string()])
            .args(["--shutdown-delay", "0s", "--shutdown-grace", "2s"])
            .args(extra)
            .env_remove("SWITCHYARD_SERVICE_ROUTES")
            .env("RUST_LOG", "info")
            .env("POD_NAMESPACE", "switchyard")
            .env("POD_NAME", name)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(log.path().join("stderr")).unwrap(),
            ))
            .spawn()
            .unwrap();
        let sy = Switchyard {
            proc: Proc { child },
            http,
            admin,
            log,
        };
        let ready = poll_blocking(Duration::from_secs(30), POLL, || {
            http_get(sy.admin_addr(), "localhost", "/readyz")
                .ok()
                .filter(|r| r.0 == 200)
        });
        assert!(
            ready.is_some(),
            "switchyard {name} never ready:\n{}",
            sy.stderr()
        );
        sy
    }

    fn apiserver_pid(&self) -> u32 {
        std::fs::read_to_string(self.dir.join("apiserver.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// Stops kube-apiserver `pid`: SIGTERM, and SIGKILL when it is still there after 10 s (it
    /// can take longer than that to drain its watches); whether it is gone.
    fn stop_apiserver(&self, pid: u32) -> bool {
        let gone = || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // Gone, or a zombie (state Z after the command name).
            (stat.is_empty()
                || stat
                    .rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z')))
            .then_some(())
        };
        for (signal, wait) in [("-TERM", 10), ("-KILL", 5)] {
            let _ = Command::new("kill")
                .args([signal, &pid.to_string()])
                .status();
            if poll_blocking(Duration::from_secs(wait), POLL, gone).is_some() {
                println!("kube-apiserver stopped by {signal}");
                return true;
            }
        }
        false
    }

    /// Starts kube-apiserver again with the arguments it had (`argv`, from /proc), its output
    /// appended to its log and its pid where stop.sh reads it.
    fn relaunch_apiserver(&self, argv: &[String]) {
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.join("apiserver.log"))
            .unwrap();
        let server = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("restart kube-apiserver");
        std::fs::write(self.dir.join("apiserver.pid"), server.id().to_string()).unwrap();
        // stop.sh stops it (through the pid file), not this handle.
        drop(server);
    }

    /// Whether the API server answers /readyz.
    fn ready(&self) -> bool {
        self.kubectl(&["get", "--raw", "/readyz"], None).is_ok()
    }
}

/// One test's namespace; its objects are deleted on drop.
struct Namespace<'a> {
    cluster: &'a Cluster,
    name: String,
}

impl Drop for Namespace<'_> {
    fn drop(&mut self) {
        let _ = self.cluster.kubectl(
            &[
                "delete",
                "ingresses,httproutes,grpcroutes,tcproutes,tlsroutes,udproutes,backendtlspolicies,\
                 listenersets,gateways,services,endpointslices,configmaps",
                "--all",
                "-n",
                &self.name,
                "--wait=false",
            ],
            None,
        );
    }
}

/// A child process killed (SIGKILL) and reaped on drop.
struct Proc {
    child: Child,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Switchyard {
    proc: Proc,
    http: u16,
    admin: u16,
    log: tempfile::TempDir,
}

impl Switchyard {
    fn stderr(&self) -> String {
        std::fs::read_to_string(self.log.path().join("stderr")).unwrap_or_default()
    }
    fn http_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.http))
    }
    fn admin_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.admin))
    }
    /// `GET path` with `Host: host` through switchyard: (status, body).
    fn get(&self, host: &str, path: &str) -> Result<(u16, String), String> {
        http_get(self.http_addr(), host, path)
    }
    fn metrics(&self) -> String {
        http_get(self.admin_addr(), "localhost", "/metrics")
            .map(|r| r.1)
            .unwrap_or_default()
    }
    fn leads(&self) -> bool {
        self.metrics().lines().any(|l| l == "switchyard_leader 1")
    }
    /// The sum of a counter's series (every label set).
    fn counter(&self, name: &str) -> u64 {
        self.metrics()
            .lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }
    /// Waits until a request for `host` is answered 200 by backend `name`; how long it took.
    fn wait_backend(&self, host: &str, name: &str) -> Duration {
        let t = Instant::now();
        let mut last = String::new();
        let seen = poll_blocking(CHANGE, Duration::from_millis(50), || {
            let r = self.get(host, "/");
            last = format!("{r:?}");
            r.ok()
                .filter(|(s, b)| *s == 200 && b.starts_with(&format!("{name} ")))
        });
        assert!(
            seen.is_some(),
            "{host} never reached {name}; last answer {last}\n{}",
            tail(&self.stderr())
        );
        t.elapsed()
    }
    /// Sends SIGTERM (`kill -TERM`) and waits for the exit, bounded.
    fn terminate(&mut self) {
        let pid = self.proc.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let exited = poll_blocking(Duration::from_secs(15), POLL, || {
            self.proc.child.try_wait().ok().flatten()
        });
        assert!(exited.is_some(), "switchyard did not exit on SIGTERM");
    }
}

/// Whether a log line tells of a refusal: `Forbidden`, or 403 as a number of its own (not
/// part of a port or a duration).
fn refused(line: &str) -> bool {
    let digit = |c: Option<char>| c.is_some_and(|c| c.is_ascii_digit());
    line.contains("orbidden")
        || line.match_indices("403").any(|(i, _)| {
            !digit(line[..i].chars().next_back()) && !digit(line[i + 3..].chars().next())
        })
}

/// RBAC sufficiency: switchyard's log names no 403 / Forbidden (deploy/ grants all it uses).
fn assert_no_forbidden(what: &str, log: &str) {
    let bad: Vec<&str> = log.lines().filter(|l| refused(l)).collect();
    assert!(
        bad.is_empty(),
        "{what}: switchyard was refused with deploy/'s RBAC:\n{}",
        bad.join("\n")
    );
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// One HTTP/1.1 request on a fresh connection (5 s bounds): status and body.
fn http_get(addr: SocketAddr, host: &str, path: &str) -> Result<(u16, String), String> {
    let limit = Duration::from_secs(5);
    let mut s = TcpStream::connect_timeout(&addr, limit).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(limit)).unwrap();
    s.set_write_timeout(Some(limit)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no response head")?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad status line in {head:?}"))?;
    Ok((status, body.to_string()))
}

// === objects ===

/// A Service with one named TCP port `http` (80 -> `target`).
fn service(ns: &str, name: &str, target: u16, annotations: &[(&str, &str)]) -> Value {
    let ann: serde_json::Map<String, Value> = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns, "annotations": ann},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": target, "protocol": "TCP"}]},
    })
}

/// The EndpointSlice `<svc>-1` of Service `svc` with ready endpoints `ips` on port `port`.
fn slice(ns: &str, svc: &str, ips: &[Ipv4Addr], port: u16) -> Value {
    let endpoints: Vec<Value> = ips
        .iter()
        .map(|ip| json!({"addresses": [ip.to_string()], "conditions": {"ready": true}}))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{svc}-1"), "namespace": ns,
                     "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
    })
}

fn ingress(ns: &str, name: &str, class: &str, host: &str, svc: &str) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"ingressClassName": class, "rules": [{"host": host, "http": {"paths": [
            {"path": "/", "pathType": "Prefix",
             "backend": {"service": {"name": svc, "port": {"number": 80}}}}]}}]},
    })
}

/// The addresses in an Ingress's `status.loadBalancer.ingress`.
fn ingress_status(c: &Cluster, ns: &str, name: &str) -> Vec<String> {
    c.get(&["ingress", name, "-n", ns])["status"]["loadBalancer"]["ingress"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter_map(|i| i["ip"].as_str().or(i["hostname"].as_str()))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn wait_ingress_status(c: &Cluster, sy: &Switchyard, ns: &str, name: &str, want: &[&str]) {
    let t = Instant::now();
    let mut last = Vec::new();
    let ok = poll_blocking(CHANGE, POLL, || {
        last = ingress_status(c, ns, name);
        (last == want).then_some(())
    });
    assert!(
        ok.is_some(),
        "Ingress {ns}/{name} status {last:?}, want {want:?}\n{}",
        tail(&sy.stderr())
    );
    println!(
        "Ingress {ns}/{name} status {want:?} after {:.1} s",
        t.elapsed().as_secs_f64()
    );
}

/// Whether `conditions` (a status's list) has `type` with status `True`.
fn condition_true(conditions: &Value, kind: &str) -> bool {
    conditions
        .as_array()
        .is_some_and(|l| l.iter().any(|c| c["type"] == kind && c["status"] == "True"))
}

// === the tests ===

/// `--service-routes annotated` (the default): a Service with `lb.host` is routed to the
/// addresses of its EndpointSlice in the network namespace, and a change of the slice (another
/// address, then both) is followed.
#[test]
fn annotated_service_reaches_netns_backends_and_follows_its_endpoint_slice() {
    let Some(c) = cluster("annotated_service") else {
        return;
    };
    let ns = c.namespace("rt-svc");
    let port = free_port();
    let (a, b) = (c.backend_ip(2), c.backend_ip(3));
    let _ba = c.backend("a", a, port);
    let _bb = c.backend("b", b, port);
    let host = "web.rt-svc.test";
    c.apply(&[
        service(&ns.name, "web", port, &[(ANN_HOST, host)]),
        service(&ns.name, "quiet", port, &[]),
        slice(&ns.name, "web", &[a], port),
        slice(&ns.name, "quiet", &[a], port),
    ]);
    let sy = c.switchyard("sy-svc", &["--leader-elect=false"]);
    sy.wait_backend(host, "a");
    // A Service that does not ask is not routed (its path route /quiet would be, with `all`).
    assert_eq!(sy.get("other.test", "/quiet").unwrap().0, 404);

    c.apply(&[slice(&ns.name, "web", &[b], port)]);
    let took = sy.wait_backend(host, "b");
    println!("slice change followed in {} ms", took.as_millis());
    for _ in 0..5 {
        assert!(sy.get(host, "/").unwrap().1.starts_with("b "));
    }
    c.apply(&[slice(&ns.name, "web", &[a, b], port)]);
    let mut seen = std::collections::BTreeSet::new();
    let both = poll_blocking(CHANGE, Duration::from_millis(20), || {
        let (_, body) = sy.get(host, "/").ok()?;
        seen.insert(body.split(' ').next()?.to_string());
        (seen.len() == 2).then_some(())
    });
    assert!(both.is_some(), "only {seen:?} answered with both endpoints");
    assert_no_forbidden("annotated_service", &sy.stderr());
}

/// An Ingress of class `switchyard` (deploy/ingressclass.yaml) is served and its
/// status.loadBalancer gets `--publish-status-address`; moved to a class that is not
/// switchyard's, it is no longer served and its status is cleared. The same when the
/// IngressClass of another Ingress (one of switchyard's, made by the test) is deleted.
#[test]
fn ingress_is_served_and_its_status_written_then_cleared() {
    let Some(c) = cluster("ingress_status") else {
        return;
    };
    let ns = c.namespace("rt-ing");
    let port = free_port();
    let _web = c.backend("web", c.backend_ip(2), port);
    let host = "shop.rt-ing.test";
    let class = json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
                       "metadata": {"name": "rt-class"},
                       "spec": {"controller": "switchyard.io/ingress-controller"}});
    c.apply(&[
        service(&ns.name, "web", port, &[]),
        slice(&ns.name, "web", &[c.backend_ip(2)], port),
        ingress(&ns.name, "shop", "switchyard", host, "web"),
        class,
        ingress(&ns.name, "cafe", "rt-class", "cafe.rt-ing.test", "web"),
    ]);
    let sy = c.switchyard(
        "sy-ing",
        &[
            "--leader-elect=false",
            "--publish-status-address",
            "192.0.2.10",
        ],
    );
    sy.wait_backend(host, "web");
    sy.wait_backend("cafe.rt-ing.test", "web");
    wait_ingress_status(&c, &sy, &ns.name, "shop", &["192.0.2.10"]);
    wait_ingress_status(&c, &sy, &ns.name, "cafe", &["192.0.2.10"]);

    c.apply(&[ingress(&ns.name, "shop", "not-ours", host, "web")]);
    wait_ingress_status(&c, &sy, &ns.name, "shop", &[]);
    let gone = poll_blocking(CHANGE, POLL, || {
        sy.get(host, "/").ok().filter(|r| r.0 == 404)
    });
    assert!(
        gone.is_some(),
        "{host} still served after its class changed"
    );

    c.kubectl(&["delete", "ingressclass", "rt-class"], None)
        .unwrap_or_else(|e| panic!("{e}"));
    wait_ingress_status(&c, &sy, &ns.name, "cafe", &[]);
    let gone = poll_blocking(CHANGE, POLL, || {
        sy.get("cafe.rt-ing.test", "/").ok().filter(|r| r.0 == 404)
    });
    assert!(
        gone.is_some(),
        "cafe still served after its class was deleted"
    );
    assert_no_forbidden("ingress_status", &sy.stderr());
}

/// The Gateway API on the real CRDs: a GatewayClass of switchyard's controller is Accepted, its
/// Gateway Accepted and Programmed, an HTTPRoute Accepted with ResolvedRefs, and its traffic
/// reaches the backend; a GRPCRoute to an h2c Service beside it is Accepted with ResolvedRefs
/// too (its status written through the real CRD's schema and RBAC).
#[test]
fn gateway_api_status_is_written_and_the_route_is_served() {
    let Some(c) = cluster("gateway_api") else {
        return;
    };
    let ns = c.namespace("rt-gw");
    let port = free_port();
    let _web = c.backend("web", c.backend_ip(3), port);
    let host = "gw.rt-gw.test";
    let class = "switchyard-rt";
    c.apply(&[
        service(&ns.name, "web", port, &[]),
        slice(&ns.name, "web", &[c.backend_ip(3)], port),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
               "metadata": {"name": class},
               "spec": {"controllerName": GATEWAY_CONTROLLER}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
               "metadata": {"name": "gw", "namespace": ns.name},
               "spec": {"gatewayClassName": class,
                        "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}]}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
               "metadata": {"name": "route", "namespace": ns.name},
               "spec": {"parentRefs": [{"name": "gw"}], "hostnames": [host],
                        "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}}),
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "grpc", "namespace": ns.name},
               "spec": {"ports": [{"port": 8080, "appProtocol": "kubernetes.io/h2c"}]}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GRPCRoute",
               "metadata": {"name": "grpc-route", "namespace": ns.name},
               "spec": {"parentRefs": [{"name": "gw"}], "hostnames": ["grpc.rt-gw.test"],
                        "rules": [{"matches": [{"method": {"service": "a.B"}}],
                                   "backendRefs": [{"name": "grpc", "port": 8080}]}]}}),
    ]);
    let sy = c.switchyard(
        "sy-gw",
        &[
            "--leader-elect=false",
            "--gateway-http-port",
            "80",
            "--publish-status-address",
            "127.0.0.1",
        ],
    );
    sy.wait_backend(host, "web");
    let mut last = String::new();
    let ok = poll_blocking(CHANGE, Duration::from_millis(200), || {
        let gc = c.get(&["gatewayclass", class]);
        let gw = c.get(&["gateway", "gw", "-n", &ns.name]);
        let rt = c.get(&["httproute", "route", "-n", &ns.name]);
        let parent = &rt["status"]["parents"][0];
        let grpc = c.get(&["grpcroute", "grpc-route", "-n", &ns.name]);
        let grpc_parent = &grpc["status"]["parents"][0];
        let checks = [
            gw["status"]["listeners"][0]["attachedRoutes"] == 2,
            parent["parentRef"]["name"] == "gw",
            condition_true(&gc["status"]["conditions"], "Accepted"),
            condition_true(&gw["status"]["conditions"], "Accepted"),
            condition_true(&gw["status"]["conditions"], "Programmed"),
            parent["controllerName"] == GATEWAY_CONTROLLER,
            condition_true(&parent["conditions"], "Accepted"),
            condition_true(&parent["conditions"], "ResolvedRefs"),
            grpc_parent["controllerName"] == GATEWAY_CONTROLLER,
            condition_true(&grpc_parent["conditions"], "Accepted"),
            condition_true(&grpc_parent["conditions"], "ResolvedRefs"),
        ];
        last = format!(
            "checks {checks:?}\nclass {}\ngateway {}\nroute {}\ngrpc route {}",
            gc["status"], gw["status"], rt["status"], grpc["status"]
        );
        checks.iter().all(|&b| b).then_some(())
    });
    assert!(
        ok.is_some(),
        "Gateway API status not as expected: {last}\n{}",
        tail(&sy.stderr())
    );
    let gw = c.get(&["gateway", "gw", "-n", &ns.name]);
    println!("Gateway addresses {}", gw["status"]["addresses"]);
    let _ = c.kubectl(&["delete", "gatewayclass", class, "--wait=false"], None);
    assert_no_forbidden("gateway_api", &sy.stderr());
}

/// Gateway API kinds beyond HTTPRoute, as the real API server holds them.
mod kinds {
    use super::*;

    pub const GROUP: &str = "gateway.networking.k8s.io";

    /// `(type, status, reason)`; an empty reason matches any.
    pub type Cond<'a> = (&'a str, &'a str, &'a str);

    /// Problems with `conditions`: each of `want` present, and every condition of
    /// `generation` (the object's).
    pub fn conditions(
        what: &str,
        conditions: &Value,
        generation: &Value,
        want: &[Cond<'_>],
    ) -> Vec<String> {
        let list = conditions.as_array().cloned().unwrap_or_default();
        let mut out = Vec::new();
        for (ty, status, reason) in want {
            let found = list.iter().any(|c| {
                c["type"] == *ty
                    && c["status"] == *status
                    && (reason.is_empty() || c["reason"] == *reason)
            });
            if !found {
                out.push(format!(
                    "{what}: no {ty}={status} ({reason}) in {conditions}"
                ));
            }
        }
        for c in &list {
            if c["observedGeneration"] != *generation {
                out.push(format!(
                    "{what}: {} observedGeneration {}, generation {generation}",
                    c["type"], c["observedGeneration"]
                ));
            }
        }
        out
    }

    /// Problems with a route's `status.parents`: exactly one, ours, naming `parent` (kind,
    /// name, section), Accepted and ResolvedRefs of the route's generation.
    pub fn route(what: &str, r: &Value, parent: (&str, &str, Option<&str>)) -> Vec<String> {
        let parents = r["status"]["parents"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let [p] = &parents[..] else {
            return vec![format!("{what}: expected one parent, got {}", r["status"])];
        };
        let mut out = Vec::new();
        let (kind, name, section) = parent;
        let section_ok = section.is_none_or(|s| p["parentRef"]["sectionName"] == s);
        if p["controllerName"] != GATEWAY_CONTROLLER
            || p["parentRef"]["name"] != name
            || p["parentRef"]["kind"] != kind
            || p["parentRef"]["group"] != GROUP
            || !section_ok
        {
            out.push(format!("{what}: parent {p} is not ours for {parent:?}"));
        }
        out.extend(conditions(
            what,
            &p["conditions"],
            &r["metadata"]["generation"],
            &[
                ("Accepted", "True", "Accepted"),
                ("ResolvedRefs", "True", "ResolvedRefs"),
            ],
        ));
        out
    }

    /// Problems with listener `name` of a Gateway's or ListenerSet's `status.listeners`:
    /// present, supporting exactly `kinds` (of the Gateway API group), `attached` routes,
    /// Accepted, ResolvedRefs and Programmed, not Conflicted, of the object's generation.
    pub fn listener(
        what: &str,
        obj: &Value,
        name: &str,
        kinds: &[&str],
        attached: i64,
    ) -> Vec<String> {
        let listeners = obj["status"]["listeners"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let Some(l) = listeners.iter().find(|l| l["name"] == name) else {
            return vec![format!("{what}: no listener {name} in {}", obj["status"])];
        };
        let mut out = Vec::new();
        let want: Vec<Value> = kinds
            .iter()
            .map(|k| json!({"group": GROUP, "kind": k}))
            .collect();
        let mut got = l["supportedKinds"].as_array().cloned().unwrap_or_default();
        got.sort_by_key(|k| k["kind"].as_str().map(str::to_string));
        if got != want {
            out.push(format!(
                "{what} {name}: supportedKinds {got:?}, want {want:?}"
            ));
        }
        if l["attachedRoutes"] != attached {
            out.push(format!(
                "{what} {name}: attachedRoutes {}, want {attached}",
                l["attachedRoutes"]
            ));
        }
        out.extend(conditions(
            &format!("{what} {name}"),
            &l["conditions"],
            &obj["metadata"]["generation"],
            &[
                ("Accepted", "True", "Accepted"),
                ("ResolvedRefs", "True", "ResolvedRefs"),
                ("Programmed", "True", "Programmed"),
                ("Conflicted", "False", ""),
            ],
        ));
        out
    }

    /// Problems with a BackendTLSPolicy's `status.ancestors`: exactly one, ours, the Gateway
    /// `gw` of namespace `ns`, with `accepted` and `resolved` of the policy's generation.
    pub fn policy(
        what: &str,
        p: &Value,
        (ns, gw): (&str, &str),
        accepted: Cond<'_>,
        resolved: Cond<'_>,
    ) -> Vec<String> {
        let ancestors = p["status"]["ancestors"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let [a] = &ancestors[..] else {
            return vec![format!(
                "{what}: expected one ancestor, got {}",
                p["status"]
            )];
        };
        let mut out = Vec::new();
        let gateway = json!({"group": GROUP, "kind": "Gateway", "namespace": ns, "name": gw});
        if a["controllerName"] != GATEWAY_CONTROLLER || a["ancestorRef"] != gateway {
            out.push(format!("{what}: ancestor {a} is not ours for {gateway}"));
        }
        out.extend(conditions(
            what,
            &a["conditions"],
            &p["metadata"]["generation"],
            &[accepted, resolved],
        ));
        out
    }
}

/// Every standard-channel kind beside HTTPRoute on the real CRDs, with switchyard leading
/// (leader election on): one Gateway with an HTTP, a TCP, a TLS (Passthrough) and a UDP
/// listener, each on a port of its own, taking ListenerSets of its namespace; a GRPCRoute, a
/// TCPRoute, a TLSRoute and a UDPRoute on their listeners; a ListenerSet with an HTTP listener
/// and an HTTPRoute attached through it; a BackendTLSPolicy whose CA ConfigMap exists and one
/// whose does not. What the API server holds after switchyard wrote it (through the CRDs'
/// schemas, CEL rules and the status subresource): each route's one parent, ours, Accepted
/// and ResolvedRefs of its generation; each Gateway listener's supported kinds, attached
/// routes and conditions, and the set in `attachedListenerSets`; the set Accepted and
/// Programmed, its listener counting its route; each policy's Gateway ancestor, Accepted and
/// ResolvedRefs, or not with the reasons the spec gives (NoValidCACertificate,
/// InvalidCACertificateRef); once the Gateway stops taking ListenerSets, its count goes and
/// the set is NotAllowed. Published are 18 addresses, one a host name in capitals: the
/// Gateway holds 16 (its CRD's bound), an Ingress beside it all, the name in lower case (each
/// was a 422 for every status write). Traffic: a TCP connection to the TCP listener's port and
/// an HTTP request through the ListenerSet's listener reach the backend in the network
/// namespace.
#[test]
fn every_standard_kind_gets_its_status_held_by_the_api_server_and_a_tcp_route_is_served() {
    let Some(c) = cluster("gateway_api_kinds") else {
        return;
    };
    let t = Instant::now();
    let ns = c.namespace("rt-kinds");
    let n = ns.name.as_str();
    let port = free_port();
    let _web = c.backend("web", c.backend_ip(2), port);
    let class = "switchyard-rt-kinds";
    let (tcp_port, tls_port) = (free_port(), free_port());
    let udp_port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let ca = rcgen::generate_simple_self_signed(vec!["secure.rt-kinds.test".to_string()]).unwrap();
    let gateway_parent = |section: &str| json!([{"name": "gw", "sectionName": section}]);
    let https_service = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": n},
               "spec": {"ports": [{"name": "https", "port": 443, "protocol": "TCP"}]}})
    };
    let policy = |name: &str, service: &str, config_map: &str| {
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "BackendTLSPolicy",
               "metadata": {"name": name, "namespace": n},
               "spec": {"targetRefs": [{"group": "", "kind": "Service", "name": service}],
                        "validation": {"hostname": format!("{service}.rt-kinds.test"),
                                       "caCertificateRefs": [{"group": "", "kind": "ConfigMap",
                                                              "name": config_map}]}}})
    };
    let http_route = |name: &str, parent: Value, host: &str, service: &str, port: u16| {
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
               "metadata": {"name": name, "namespace": n},
               "spec": {"parentRefs": parent, "hostnames": [host],
                        "rules": [{"backendRefs": [{"name": service, "port": port}]}]}})
    };
    let stream_route = |kind: &str, section: &str, service: &str, port: u16| {
        let mut spec = json!({"parentRefs": gateway_parent(section),
                              "rules": [{"backendRefs": [{"name": service, "port": port}]}]});
        if kind == "TLSRoute" {
            spec["hostnames"] = json!(["pass.tls.rt-kinds.test"]);
        }
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": kind,
               "metadata": {"name": kind.to_lowercase(), "namespace": n}, "spec": spec})
    };
    c.apply(&[
        service(n, "web", port, &[]),
        slice(n, "web", &[c.backend_ip(2)], port),
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "grpc", "namespace": n},
               "spec": {"ports": [{"port": 8080, "appProtocol": "kubernetes.io/h2c"}]}}),
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "dns", "namespace": n},
               "spec": {"ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}}),
        https_service("secure"),
        https_service("insecure"),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "secure-ca", "namespace": n},
               "data": {"ca.crt": ca.cert.pem()}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
               "metadata": {"name": class},
               "spec": {"controllerName": GATEWAY_CONTROLLER}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
               "metadata": {"name": "gw", "namespace": n},
               "spec": {"gatewayClassName": class,
                        "allowedListeners": {"namespaces": {"from": "Same"}},
                        "listeners": [
                            {"name": "http", "protocol": "HTTP", "port": 80},
                            {"name": "tcp", "protocol": "TCP", "port": tcp_port,
                             "allowedRoutes": {"kinds": [{"kind": "TCPRoute"}]}},
                            {"name": "tls", "protocol": "TLS", "port": tls_port,
                             "hostname": "*.tls.rt-kinds.test",
                             "tls": {"mode": "Passthrough"}},
                            {"name": "udp", "protocol": "UDP", "port": udp_port}]}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
               "metadata": {"name": "team", "namespace": n},
               "spec": {"parentRef": {"name": "gw"},
                        "listeners": [{"name": "team", "protocol": "HTTP", "port": 80,
                                       "hostname": "team.rt-kinds.test"}]}}),
        http_route(
            "through-set",
            json!([{"group": kinds::GROUP, "kind": "ListenerSet", "name": "team"}]),
            "team.rt-kinds.test",
            "web",
            80,
        ),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GRPCRoute",
               "metadata": {"name": "grpcroute", "namespace": n},
               "spec": {"parentRefs": gateway_parent("http"),
                        "hostnames": ["grpc.rt-kinds.test"],
                        "rules": [{"matches": [{"method": {"service": "a.B"}}],
                                   "backendRefs": [{"name": "grpc", "port": 8080}]}]}}),
        stream_route("TCPRoute", "tcp", "web", 80),
        stream_route("TLSRoute", "tls", "web", 80),
        stream_route("UDPRoute", "udp", "dns", 53),
        http_route(
            "secure",
            gateway_parent("http"),
            "secure.rt-kinds.test",
            "secure",
            443,
        ),
        http_route(
            "insecure",
            gateway_parent("http"),
            "insecure.rt-kinds.test",
            "insecure",
            443,
        ),
        policy("secure-tls", "secure", "secure-ca"),
        policy("missing-ca", "insecure", "no-such-ca"),
        ingress(n, "shop", "switchyard", "shop.rt-kinds.test", "web"),
    ]);
    // 18 addresses, one a host name in capitals: the CRD takes 16 of a Gateway, the API
    // server host names in lower case only.
    let published: Vec<String> = ["127.0.0.1".to_string(), "LB.Example.com".to_string()]
        .into_iter()
        .chain((1..=16).map(|i| format!("192.0.2.{i}")))
        .collect();
    let sy = c.switchyard(
        "sy-kinds",
        &[
            "--election-lease-duration",
            "3s",
            "--gateway-http-port",
            "80",
            "--publish-status-address",
            &published.join(","),
        ],
    );
    let leads = poll_blocking(CHANGE, POLL, || sy.leads().then_some(()));
    assert!(
        leads.is_some(),
        "switchyard never led:\n{}",
        tail(&sy.stderr())
    );

    let mut last = Vec::new();
    let ok = poll_blocking(CHANGE, Duration::from_millis(250), || {
        let get = |kind: &str, name: &str| c.get(&[kind, name, "-n", n]);
        let gw = get("gateway", "gw");
        let set = get("listenerset", "team");
        let mut p = Vec::new();
        p.extend(kinds::conditions(
            "gateway",
            &gw["status"]["conditions"],
            &gw["metadata"]["generation"],
            &[
                ("Accepted", "True", "Accepted"),
                ("Programmed", "True", "Programmed"),
            ],
        ));
        for (name, kinds, attached) in [
            ("http", &["GRPCRoute", "HTTPRoute"][..], 3),
            ("tcp", &["TCPRoute"][..], 1),
            ("tls", &["TLSRoute"][..], 1),
            ("udp", &["UDPRoute"][..], 1),
        ] {
            p.extend(kinds::listener(
                "gateway listener",
                &gw,
                name,
                kinds,
                attached,
            ));
        }
        if gw["status"]["listeners"].as_array().map(Vec::len) != Some(4) {
            p.push(format!(
                "gateway: want its 4 listeners alone: {}",
                gw["status"]
            ));
        }
        let addresses = gw["status"]["addresses"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if addresses.len() != 16 || addresses.iter().any(|a| a["type"] != "IPAddress") {
            p.push(format!(
                "gateway: want the first 16 addresses, the IPs: {}",
                gw["status"]["addresses"]
            ));
        }
        let ingress = ingress_status(&c, n, "shop");
        if ingress.len() != 18 || !ingress.iter().any(|a| a == "lb.example.com") {
            p.push(format!(
                "ingress: want the 18 addresses, the name in lower case: {ingress:?}"
            ));
        }
        if gw["status"]["attachedListenerSets"] != 1 {
            p.push(format!(
                "gateway: attachedListenerSets {}, want 1",
                gw["status"]["attachedListenerSets"]
            ));
        }
        p.extend(kinds::conditions(
            "listenerset",
            &set["status"]["conditions"],
            &set["metadata"]["generation"],
            &[
                ("Accepted", "True", "Accepted"),
                ("Programmed", "True", "Programmed"),
            ],
        ));
        p.extend(kinds::listener(
            "listenerset listener",
            &set,
            "team",
            &["GRPCRoute", "HTTPRoute"],
            1,
        ));
        for (kind, name, parent) in [
            ("grpcroute", "grpcroute", ("Gateway", "gw", Some("http"))),
            ("tcproute", "tcproute", ("Gateway", "gw", Some("tcp"))),
            ("tlsroute", "tlsroute", ("Gateway", "gw", Some("tls"))),
            ("udproute", "udproute", ("Gateway", "gw", Some("udp"))),
            ("httproute", "through-set", ("ListenerSet", "team", None)),
            ("httproute", "secure", ("Gateway", "gw", Some("http"))),
        ] {
            p.extend(kinds::route(
                &format!("{kind} {name}"),
                &get(kind, name),
                parent,
            ));
        }
        p.extend(kinds::policy(
            "backendtlspolicy secure-tls",
            &get("backendtlspolicy", "secure-tls"),
            (n, "gw"),
            ("Accepted", "True", "Accepted"),
            ("ResolvedRefs", "True", "ResolvedRefs"),
        ));
        p.extend(kinds::policy(
            "backendtlspolicy missing-ca",
            &get("backendtlspolicy", "missing-ca"),
            (n, "gw"),
            ("Accepted", "False", "NoValidCACertificate"),
            ("ResolvedRefs", "False", "InvalidCACertificateRef"),
        ));
        last = p;
        last.is_empty().then_some(())
    });
    assert!(
        ok.is_some(),
        "the API server holds other statuses than expected:\n{}\n{}",
        last.join("\n"),
        tail(&sy.stderr())
    );
    println!(
        "every kind's status as expected {:.1} s after the start",
        t.elapsed().as_secs_f64()
    );
    // Settled: what the API server holds (its defaults and normalisation applied) is what
    // switchyard wants, so nothing is written again; and nothing was refused.
    let writes = |result: &str| {
        let series = format!("switchyard_status_writes_total{{result=\"{result}\"}} ");
        sy.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(&series)?.parse::<f64>().ok())
            .unwrap_or(0.0) as u64
    };
    let settled = writes("written");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        (writes("written"), writes("failed")),
        (settled, 0),
        "status written again after it settled, or refused\n{}",
        tail(&sy.stderr())
    );

    // Traffic: the TCP listener relays to the backend in the network namespace; the
    // ListenerSet's listener routes by its host name.
    let tcp = SocketAddr::from(([127, 0, 0, 1], tcp_port));
    let mut answer = String::new();
    let relayed = poll_blocking(CHANGE, POLL, || {
        let r = http_get(tcp, "anything", "/through-tcp");
        answer = format!("{r:?}");
        r.ok()
            .filter(|(s, b)| *s == 200 && b == "web served /through-tcp\n")
    });
    assert!(
        relayed.is_some(),
        "the TCP listener on {tcp} never relayed to web: {answer}\n{}",
        tail(&sy.stderr())
    );
    sy.wait_backend("team.rt-kinds.test", "web");

    // The Gateway stops taking ListenerSets: its count goes (a merge patch that left it out
    // kept it), the set is NotAllowed.
    c.kubectl(
        &[
            "patch",
            "gateway",
            "gw",
            "-n",
            n,
            "--type=json",
            "-p",
            r#"[{"op": "remove", "path": "/spec/allowedListeners"}]"#,
        ],
        None,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut last = String::new();
    let closed = poll_blocking(CHANGE, Duration::from_millis(250), || {
        let gw = c.get(&["gateway", "gw", "-n", n]);
        let set = c.get(&["listenerset", "team", "-n", n]);
        last = format!("gateway {}\nset {}", gw["status"], set["status"]);
        let set_refused = set["status"]["conditions"].as_array().is_some_and(|l| {
            l.iter()
                .any(|c| c["type"] == "Accepted" && c["reason"] == "NotAllowed")
        });
        (gw["status"].get("attachedListenerSets").is_none() && set_refused).then_some(())
    });
    assert!(
        closed.is_some(),
        "a Gateway that allows no ListenerSet still counts one, or its set is not NotAllowed: \
         {last}\n{}",
        tail(&sy.stderr())
    );
    let log = sy.stderr();
    assert!(!log.contains("write failed"), "{}", tail(&log));
    let _ = c.kubectl(&["delete", "gatewayclass", class, "--wait=false"], None);
    assert_no_forbidden("gateway_api_kinds", &log);
    println!("gateway_api_kinds took {:.1} s", t.elapsed().as_secs_f64());
}

/// Two replicas with leader election (deploy/leader-election.yaml's Lease, a 3 s lease): the
/// leader is killed (SIGKILL, no release) and the other takes over and writes a new Ingress's
/// status; then a fresh replica joins, the leader is stopped (SIGTERM) and the fresh one takes
/// over.
#[test]
fn a_killed_and_a_stopped_leader_are_replaced_and_status_is_still_written() {
    let Some(c) = cluster("leader_election") else {
        return;
    };
    let ns = c.namespace("rt-lead");
    let port = free_port();
    let _web = c.backend("web", c.backend_ip(2), port);
    c.apply(&[
        service(&ns.name, "web", port, &[]),
        slice(&ns.name, "web", &[c.backend_ip(2)], port),
        ingress(&ns.name, "one", "switchyard", "one.rt-lead.test", "web"),
    ]);
    let args = [
        "--election-lease-duration",
        "3s",
        "--publish-status-address",
        "192.0.2.20",
    ];
    let mut replicas = vec![
        Some(c.switchyard("sy-lead-1", &args)),
        Some(c.switchyard("sy-lead-2", &args)),
    ];
    wait_ingress_status(
        &c,
        replicas[0].as_ref().unwrap(),
        &ns.name,
        "one",
        &["192.0.2.20"],
    );
    let leader = |rs: &[Option<Switchyard>]| {
        poll_blocking(CHANGE, POLL, || {
            rs.iter()
                .position(|r| r.as_ref().is_some_and(Switchyard::leads))
        })
    };
    let holder = || {
        c.get(&["lease", "switchyard-leader", "-n", "switchyard"])["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let first = leader(&replicas).expect("no leader");
    assert_eq!(holder(), format!("sy-lead-{}", first + 1));
    let mut logs = String::new();

    // SIGKILL: the lease is not released; the other replica takes it when it runs out.
    let t = Instant::now();
    let killed = replicas[first].take().unwrap();
    logs.push_str(&killed.stderr());
    drop(killed);
    c.apply(&[ingress(
        &ns.name,
        "two",
        "switchyard",
        "two.rt-lead.test",
        "web",
    )]);
    let second = 1 - first;
    wait_ingress_status(
        &c,
        replicas[second].as_ref().unwrap(),
        &ns.name,
        "two",
        &["192.0.2.20"],
    );
    println!(
        "killed leader replaced, new Ingress's status written after {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(holder(), format!("sy-lead-{}", second + 1));
    assert_eq!(leader(&replicas), Some(second));

    // SIGTERM: the leader releases the lease on its way out; a fresh replica takes it.
    replicas.push(Some(c.switchyard("sy-lead-3", &args)));
    let mut stopped = replicas[second].take().unwrap();
    let t = Instant::now();
    stopped.terminate();
    logs.push_str(&stopped.stderr());
    c.apply(&[ingress(
        &ns.name,
        "three",
        "switchyard",
        "three.rt-lead.test",
        "web",
    )]);
    wait_ingress_status(
        &c,
        replicas[2].as_ref().unwrap(),
        &ns.name,
        "three",
        &["192.0.2.20"],
    );
    println!(
        "stopped leader replaced, new Ingress's status written after {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(holder(), "sy-lead-3");
    let third = replicas[2].as_ref().unwrap();
    assert_eq!(third.get("three.rt-lead.test", "/").unwrap().0, 200);
    logs.push_str(&third.stderr());
    assert_no_forbidden("leader_election", &logs);
}

/// kube-apiserver restarted (etcd kept): switchyard keeps serving from its table through the
/// outage (no failed request) and follows a change made after the restart. A resumed watch
/// whose resourceVersion the new server's watch cache no longer has gets 410 Expired and
/// re-lists; whether the server answered a given watch with 410 or with events is its choice,
/// and this server has no `etcdctl` to force a compaction, so the re-lists are printed, not
/// required. 403s are allowed only in the window from the stop to 5 s after /readyz (the
/// server refuses while its RBAC caches fill).
#[test]
fn an_api_server_restart_drops_no_request_and_later_changes_are_followed() {
    let Some(c) = cluster("api_restart") else {
        return;
    };
    let ns = c.namespace("rt-restart");
    let port = free_port();
    let (a, b) = (c.backend_ip(2), c.backend_ip(3));
    let _ba = c.backend("a", a, port);
    let _bb = c.backend("b", b, port);
    let host = "web.rt-restart.test";
    c.apply(&[
        service(&ns.name, "web", port, &[(ANN_HOST, host)]),
        slice(&ns.name, "web", &[a], port),
    ]);
    let sy = Arc::new(c.switchyard("sy-restart", &["--leader-elect=false"]));
    sy.wait_backend(host, "a");
    // Moves etcd's revision past anything switchyard watches, so a resumed watch is behind.
    for i in 0..3 {
        let _ = c.kubectl(
            &[
                "create",
                "serviceaccount",
                &format!("bump-{i}"),
                "-n",
                &ns.name,
            ],
            None,
        );
    }
    let relists_before = sy.counter("switchyard_relists_total");

    let stop = Arc::new(AtomicBool::new(false));
    let (sent, failed) = (
        Arc::new(AtomicU32::new(0)),
        Arc::new(Mutex::new(Vec::new())),
    );
    let client = {
        let (sy, stop, sent, failed) = (sy.clone(), stop.clone(), sent.clone(), failed.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                sent.fetch_add(1, Ordering::Relaxed);
                match sy.get(host, "/") {
                    Ok((200, _)) => {}
                    other => failed.lock().unwrap().push(format!("{other:?}")),
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };

    let log_before = sy.stderr().len();
    let pid = c.apiserver_pid();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let argv: Vec<String> = cmdline
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let t = Instant::now();
    let stopped = c.stop_apiserver(pid);
    std::thread::sleep(Duration::from_secs(2));
    c.relaunch_apiserver(&argv);
    assert!(
        stopped,
        "kube-apiserver {pid} did not stop, even on SIGKILL"
    );
    let up = poll_blocking(Duration::from_secs(60), Duration::from_millis(250), || {
        c.ready().then_some(())
    });
    assert!(
        up.is_some(),
        "kube-apiserver not ready again after a restart"
    );
    println!(
        "kube-apiserver down and up again in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    std::thread::sleep(Duration::from_secs(5));
    let log_after = sy.stderr().len();

    let t = Instant::now();
    c.apply(&[slice(&ns.name, "web", &[b], port)]);
    sy.wait_backend(host, "b");
    println!(
        "a change after the restart followed in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    stop.store(true, Ordering::Relaxed);
    client.join().unwrap();
    let failed = failed.lock().unwrap().clone();
    let relists_after = sy.counter("switchyard_relists_total");
    let log = sy.stderr();
    let window: Vec<&str> = log[log_before..log_after]
        .lines()
        .filter(|l| refused(l))
        .collect();
    let refused_in_window = window.len();
    if let Some(first) = window.first() {
        println!("first refusal while the server restarted: {first}");
    }
    println!(
        "{} requests through the restart, {} failed; re-lists {relists_before} -> \
         {relists_after}; watch errors {}; {refused_in_window} log lines with 403 while the \
         server restarted",
        sent.load(Ordering::Relaxed),
        failed.len(),
        sy.counter("switchyard_watch_errors_total")
    );
    assert!(
        failed.is_empty(),
        "requests failed through the restart: {failed:?}"
    );
    // The new server's watch cache starts at etcd's current revision, behind which the
    // ServiceAccounts above moved every resumed watch: 410 Expired, then a re-list.
    assert!(
        relists_after > relists_before,
        "no re-list after the restart (410 Expired on resumed watches expected)\n{}",
        tail(&sy.stderr())
    );
    assert_no_forbidden("api_restart, before the restart", &log[..log_before]);
    assert_no_forbidden("api_restart, after the restart", &log[log_after..]);
}

/// Two warnings of one reason about one Service (a bad `lb.algorithm` and a bad `lb.maxconn`)
/// are two Warning Events, each with its own note; once the Service is fixed a Normal
/// `WarningsResolved` Event says so.
#[test]
fn two_warnings_of_one_service_are_two_events_and_a_fix_is_announced() {
    let Some(c) = cluster("events") else {
        return;
    };
    let ns = c.namespace("rt-ev");
    let port = free_port();
    let _web = c.backend("web", c.backend_ip(2), port);
    let host = "bad.rt-ev.test";
    c.apply(&[
        service(
            &ns.name,
            "bad",
            port,
            &[(ANN_HOST, host), (ANN_ALGO, "nope"), (ANN_MAXCONN, "-1")],
        ),
        slice(&ns.name, "bad", &[c.backend_ip(2)], port),
    ]);
    let sy = c.switchyard("sy-ev", &["--leader-elect=false"]);
    sy.wait_backend(host, "web");
    let events = || -> Vec<Value> {
        c.get(&["events.events.k8s.io", "-n", &ns.name])["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e["regarding"]["name"] == "bad")
            .collect()
    };
    let notes = |events: &[Value], kind: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["type"] == kind)
            .filter_map(|e| e["note"].as_str().map(str::to_string))
            .collect()
    };
    let (mut last, mut seen) = (Vec::new(), Vec::new());
    let both = poll_blocking(CHANGE, Duration::from_millis(250), || {
        seen = events();
        last = notes(&seen, "Warning");
        (last.iter().any(|n| n.contains("lb.algorithm"))
            && last.iter().any(|n| n.contains("lb.maxconn")))
        .then_some(())
    });
    assert!(
        both.is_some(),
        "want two Warning Events (lb.algorithm, lb.maxconn) about Service bad; notes {last:?}, \
         Events {:#}",
        Value::from(seen)
    );

    c.apply(&[service(&ns.name, "bad", port, &[(ANN_HOST, host)])]);
    let resolved = poll_blocking(CHANGE, Duration::from_millis(250), || {
        seen = events();
        seen.iter()
            .any(|e| e["type"] == "Normal" && e["reason"] == "WarningsResolved")
            .then_some(())
    });
    assert!(
        resolved.is_some(),
        "no Normal WarningsResolved Event about Service bad; have {:#}",
        Value::from(seen)
    );
    assert_no_forbidden("events", &sy.stderr());
}

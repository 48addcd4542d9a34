//! echo-basic pods: each Deployment of the upstream manifests (but the gRPC ones, `grpc.rs`,
//! the TCP echo ones, `tcp.rs`, the UDP echo ones, `udp.rs`, and CoreDNS, `dns.rs`)
//! becomes real HTTP/1.1 servers on 127.0.0.1 that answer like upstream's `conformance/echo-basic/echo-basic.go`: a JSON body
//! with `path` (the request target as received, query included), `host`, `method`, `proto`,
//! `headers` (name -> values, `Host` excluded, names in Go's canonical form), `namespace`,
//! `ingress`, `service`, `pod` (and over TLS `tls.serverName`, the SNI the pod was reached with);
//! `Content-Type: application/json`; the response headers asked for
//! in `X-Echo-Set-Header` (`name:value,name:value`, values of one name joined by `,`); a
//! `?delay=<Go duration>` held before answering; `/health` and `/status/NNN` as upstream.
//!
//! A Deployment that sets `TLS_SERVER_CERT` and `TLS_SERVER_PRIVKEY` (upstream's `tls-backend`s)
//! also serves the same answers over TLS on a second port (echo-basic's `HTTPS_PORT`, 8443 in
//! the pod), with the certificate of the Secret the Deployment mounts ([`Pod::start_tls`]).
//!
//! Every request is recorded (upstream reads the pod's log line "Echoing back request made to
//! <path>" to find mirrored requests; the tests read the record instead). Dropping the pod
//! stops its listener and every connection it serves.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The longest `?delay=` a pod honours, and the longest one connection is served.
const MAX_DELAY: Duration = Duration::from_secs(30);
const CONNECTION_LIFETIME: Duration = Duration::from_secs(120);
/// The most connections one pod accepts (HTTPRouteWeight's worst case, ten runs of 500
/// requests on fresh connections, is far below).
const MAX_CONNECTIONS: usize = 1_000_000;

/// One request as a pod received it.
#[derive(Clone, Debug)]
pub struct Echoed {
    /// The request target, query included (Go's `RequestURI`).
    pub path: String,
    pub method: String,
}

/// One running echo-basic pod.
pub struct Pod {
    pub name: String,
    pub namespace: String,
    /// The Deployment it belongs to.
    pub deployment: String,
    pub port: u16,
    /// The port serving TLS, for the pod's container port [`TLS_CONTAINER_PORT`], if any.
    pub tls_port: Option<u16>,
    seen: Arc<Mutex<Vec<Echoed>>>,
    task: JoinHandle<()>,
}

/// The container port of echo-basic's TLS listener (`HTTPS_PORT`, and the TCP echo's
/// `TLS_PORT`), which the base manifests' Services name as `targetPort`.
pub const TLS_CONTAINER_PORT: u16 = 8443;

impl Pod {
    /// Starts a pod named `name` in `namespace` on a free port of 127.0.0.1.
    pub async fn start(deployment: &str, name: &str, namespace: &str) -> Pod {
        Pod::start_tls(deployment, name, namespace, None).await
    }

    /// [`Pod::start`], also answering over TLS with `tls` on a second port ([`Pod::tls_port`]).
    pub async fn start_tls(
        deployment: &str,
        name: &str,
        namespace: &str,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> Pod {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind echo pod");
        let port = listener.local_addr().expect("local_addr").port();
        let seen: Arc<Mutex<Vec<Echoed>>> = Arc::default();
        let ctx = Arc::new(Context {
            namespace: namespace.to_string(),
            pod: name.to_string(),
            seen: seen.clone(),
        });
        let mut tls_listener = None;
        if let Some(config) = tls {
            let l = TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind echo pod (TLS)");
            tls_listener = Some((l, tokio_rustls::TlsAcceptor::from(config)));
        }
        let tls_port = tls_listener
            .as_ref()
            .map(|(l, _)| l.local_addr().expect("local_addr").port());
        let task = tokio::spawn(async move {
            match tls_listener {
                Some((l, acceptor)) => {
                    tokio::join!(
                        serve(listener, ctx.clone(), None),
                        serve(l, ctx, Some(acceptor))
                    );
                }
                None => serve(listener, ctx, None).await,
            }
        });
        Pod {
            name: name.to_string(),
            namespace: namespace.to_string(),
            deployment: deployment.to_string(),
            port,
            tls_port,
            seen,
            task,
        }
    }

    /// A pod whose server is another module's (the gRPC echo of `grpc.rs`), recording into
    /// `seen`; stopped, as every pod, when dropped.
    pub fn serving(
        deployment: &str,
        name: &str,
        namespace: &str,
        port: u16,
        seen: Arc<Mutex<Vec<Echoed>>>,
        task: JoinHandle<()>,
    ) -> Pod {
        Pod {
            name: name.to_string(),
            namespace: namespace.to_string(),
            deployment: deployment.to_string(),
            port,
            tls_port: None,
            seen,
            task,
        }
    }

    /// This pod with a TLS port too (a server of another module listening on two ports).
    pub fn with_tls_port(mut self, tls_port: Option<u16>) -> Pod {
        self.tls_port = tls_port;
        self
    }

    /// The port on 127.0.0.1 serving the pod's container port `target` (a Service's
    /// `targetPort`): the TLS port for [`TLS_CONTAINER_PORT`] when the pod has one, else the
    /// one echo port.
    pub fn port_for(&self, target: u16) -> u16 {
        match self.tls_port {
            Some(tls) if target == TLS_CONTAINER_PORT => tls,
            _ => self.port,
        }
    }

    /// Every request this pod answered so far.
    pub fn seen(&self) -> Vec<Echoed> {
        self.seen.lock().expect("seen lock").clone()
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Accepts on `listener` (through `tls` when given) until the pod is dropped or has accepted
/// MAX_CONNECTIONS; each connection is bounded in time.
async fn serve(listener: TcpListener, ctx: Arc<Context>, tls: Option<tokio_rustls::TlsAcceptor>) {
    for _ in 0..MAX_CONNECTIONS {
        let Ok((stream, _)) = listener.accept().await else {
            // A failed accept (out of descriptors, say) is retried after a pause.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let ctx = ctx.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            // The connection's server name (echo-basic's `tls.serverName`), over TLS.
            let service = |sni: Option<String>| {
                service_fn(move |req| {
                    let (ctx, sni) = (ctx.clone(), sni.clone());
                    async move { Ok::<_, Infallible>(ctx.answer(req, sni).await) }
                })
            };
            let builder = hyper::server::conn::http1::Builder::new();
            let _ = tokio::time::timeout(CONNECTION_LIFETIME, async move {
                match tls {
                    Some(acceptor) => {
                        if let Ok(stream) = acceptor.accept(stream).await {
                            let sni = stream.get_ref().1.server_name().map(str::to_string);
                            let _ = builder
                                .serve_connection(
                                    TokioIo::new(stream),
                                    service(Some(sni.unwrap_or_default())),
                                )
                                .await;
                        }
                    }
                    None => {
                        let _ = builder
                            .serve_connection(TokioIo::new(stream), service(None))
                            .await;
                    }
                }
            })
            .await;
        });
    }
}

struct Context {
    namespace: String,
    pod: String,
    seen: Arc<Mutex<Vec<Echoed>>>,
}

impl Context {
    /// `sni`: the connection's server name when it is TLS (`None`: clear).
    async fn answer(&self, req: Request<Incoming>, sni: Option<String>) -> Response<Full<Bytes>> {
        let (parts, body) = req.into_parts();
        // Read (and drop) the body, bounded like the rest.
        let _ = tokio::time::timeout(MAX_DELAY, body.collect()).await;
        let target = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".to_string());
        let path_only = parts.uri.path();
        if path_only == "/health" {
            return plain(StatusCode::OK, "OK");
        }
        if let Some(code) = path_only.strip_prefix("/status/") {
            let status = code
                .parse::<u16>()
                .ok()
                .filter(|_| code.len() == 3)
                .and_then(|c| StatusCode::from_u16(c).ok())
                .unwrap_or(StatusCode::BAD_REQUEST);
            return plain(status, "");
        }
        self.seen.lock().expect("seen lock").push(Echoed {
            path: target.clone(),
            method: parts.method.to_string(),
        });
        if let Some(delay) = query_param(parts.uri.query(), "delay") {
            match go_duration(&delay) {
                Some(d) => tokio::time::sleep(d.min(MAX_DELAY)).await,
                None => {
                    return json_response(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        json!({"message": format!("time: invalid duration \"{delay}\"")}),
                        &[],
                    );
                }
            }
        }
        let mut headers: Map<String, Value> = Map::new();
        let mut set_headers: Vec<(String, String)> = Vec::new();
        for (name, value) in &parts.headers {
            if name == http::header::HOST {
                continue;
            }
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            if name.as_str() == "x-echo-set-header" {
                for kv in value.split(',') {
                    let (k, v) = kv.trim().split_once(':').unwrap_or((kv.trim(), ""));
                    if k.is_empty() {
                        continue;
                    }
                    match set_headers.iter_mut().find(|(n, _)| n == k) {
                        Some((_, prev)) => {
                            prev.push(',');
                            prev.push_str(v.trim());
                        }
                        None => set_headers.push((k.to_string(), v.to_string())),
                    }
                }
            }
            let entry = headers
                .entry(canonical(name.as_str()))
                .or_insert_with(|| Value::Array(vec![]));
            if let Value::Array(values) = entry {
                values.push(Value::String(value));
            }
        }
        let host = parts
            .headers
            .get(http::header::HOST)
            .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned())
            .or_else(|| parts.uri.authority().map(|a| a.to_string()))
            .unwrap_or_default();
        let proto = match parts.version {
            http::Version::HTTP_10 => "HTTP/1.0",
            http::Version::HTTP_2 => "HTTP/2.0",
            _ => "HTTP/1.1",
        };
        let mut body = json!({
            "path": target,
            "host": host,
            "method": parts.method.as_str(),
            "proto": proto,
            "headers": headers,
            "namespace": self.namespace,
            "ingress": "",
            "service": "",
            "pod": self.pod,
            "sni": "",
        });
        // echo-basic's `tls` object, when the request came over TLS (upstream's
        // `CapturedRequest.TLS`: the server name the backend saw).
        if let Some(sni) = sni {
            body["tls"] = json!({"serverName": sni});
        }
        json_response(StatusCode::OK, body, &set_headers)
    }
}

fn plain(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r
}

fn json_response(
    status: StatusCode,
    body: Value,
    set_headers: &[(String, String)],
) -> Response<Full<Bytes>> {
    let text = serde_json::to_string_pretty(&body).expect("json");
    let mut b = Response::builder().status(status);
    for (k, v) in set_headers {
        b = b.header(k.as_str(), v.as_str());
    }
    b.header("content-type", "application/json")
        .header("x-content-type-options", "nosniff")
        .body(Full::new(Bytes::from(text)))
        .unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR, "bad echo header"))
}

/// Go's `http.CanonicalHeaderKey`: `x-header-set` -> `X-Header-Set`.
pub fn canonical(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut c = part.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + &c.as_str().to_ascii_lowercase(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join("-")
}

fn query_param(query: Option<&str>, key: &str) -> Option<String> {
    query?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == key).then(|| v.to_string())
    })
}

/// The subset of Go's `time.ParseDuration` the conformance cases use: `<number><unit>` with
/// units ns, us, ms, s, m, h (several terms allowed, e.g. `1m30s`).
pub fn go_duration(s: &str) -> Option<Duration> {
    let mut rest = s;
    let mut total = Duration::ZERO;
    if rest.is_empty() {
        return None;
    }
    // Each pass consumes one `<number><unit>` term; a term is at least two bytes.
    for _ in 0..s.len() {
        if rest.is_empty() {
            return Some(total);
        }
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let n: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += Duration::from_secs_f64(n * scale);
    }
    rest.is_empty().then_some(total)
}

//! The gRPC side of the conformance harness: echo-basic's gRPC server
//! (`conformance/echo-basic/grpc` upstream, run when a Deployment sets `GRPC_ECHO_SERVER`) as
//! real pods on 127.0.0.1, and upstream's gRPC client checks (`conformance/utils/grpc`).
//!
//! A pod serves `gateway_api_conformance.echo_basic.grpcecho.GrpcEcho` over HTTP/2 in clear
//! (h2c, prior knowledge): `Echo` and `EchoTwo` answer an `EchoResponse` whose assertions hold
//! the fully qualified method, the request headers, the `:authority` and the pod's namespace
//! and name; `EchoThree` (intentionally unimplemented upstream) and every other method answer
//! UNIMPLEMENTED. Messages are declared by hand from upstream's `grpcecho.proto` (no protoc).
//!
//! The client sends one unary call per attempt to switchyard's HTTP port over h2c, with the
//! `:authority` and metadata asked for, and compares as upstream's `compareResponse`: the
//! status code; on OK the fully qualified method, the namespace and the pod-name prefix.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tonic::codegen::http::uri::PathAndQuery;
use tonic::server::UnaryService;
use tonic::{Code, Status};

use super::echo::{Echoed, Pod};

/// The echo service, as upstream's client names it.
pub const SERVICE: &str = "gateway_api_conformance.echo_basic.grpcecho.GrpcEcho";

/// upstream's `TimeoutConfig` defaults the HTTP expectations use too (here 10 s, not 30).
const MAX_TIME_TO_CONSISTENCY: Duration = Duration::from_secs(10);
const REQUIRED_CONSECUTIVE_SUCCESSES: usize = 3;
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

// === messages (grpcecho.proto) ===

#[derive(Clone, PartialEq, prost::Message)]
pub struct Header {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Context {
    #[prost(string, tag = "1")]
    pub namespace: String,
    #[prost(string, tag = "2")]
    pub ingress: String,
    #[prost(string, tag = "3")]
    pub service_name: String,
    #[prost(string, tag = "4")]
    pub pod: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Assertions {
    #[prost(string, tag = "1")]
    pub fully_qualified_method: String,
    #[prost(message, repeated, tag = "2")]
    pub headers: Vec<Header>,
    #[prost(string, tag = "3")]
    pub authority: String,
    #[prost(message, optional, tag = "4")]
    pub context: Option<Context>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct EchoRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct EchoResponse {
    #[prost(message, optional, tag = "1")]
    pub assertions: Option<Assertions>,
    #[prost(message, optional, tag = "2")]
    pub request: Option<EchoRequest>,
}

type Codec = tonic_prost::ProstCodec<EchoResponse, EchoRequest>;
type ClientCodec = tonic_prost::ProstCodec<EchoRequest, EchoResponse>;

// === the pod ===

/// What one call's answer says of the request, taken before the codec reads the body.
struct Echo {
    assertions: Assertions,
}

impl UnaryService<EchoRequest> for Echo {
    type Response = EchoResponse;
    type Future =
        Pin<Box<dyn Future<Output = Result<tonic::Response<EchoResponse>, Status>> + Send>>;

    fn call(&mut self, req: tonic::Request<EchoRequest>) -> Self::Future {
        let assertions = self.assertions.clone();
        Box::pin(async move {
            Ok(tonic::Response::new(EchoResponse {
                assertions: Some(assertions),
                request: Some(req.into_inner()),
            }))
        })
    }
}

async fn answer(
    req: http::Request<hyper::body::Incoming>,
    namespace: Arc<str>,
    pod: Arc<str>,
    seen: Arc<Mutex<Vec<Echoed>>>,
) -> Result<http::Response<tonic::body::Body>, Infallible> {
    let path = req.uri().path().to_string();
    seen.lock().expect("seen lock").push(Echoed {
        path: path.clone(),
        method: req.method().to_string(),
    });
    let method = path.strip_prefix(&format!("/{SERVICE}/"));
    if !matches!(method, Some("Echo" | "EchoTwo")) {
        return Ok(Status::unimplemented(format!("unknown method {path}")).into_http());
    }
    let assertions = Assertions {
        fully_qualified_method: path.clone(),
        headers: req
            .headers()
            .iter()
            .map(|(k, v)| Header {
                key: k.to_string(),
                value: String::from_utf8_lossy(v.as_bytes()).into_owned(),
            })
            .collect(),
        authority: req
            .uri()
            .authority()
            .map(|a| a.to_string())
            .unwrap_or_default(),
        context: Some(Context {
            namespace: namespace.to_string(),
            ingress: String::new(),
            service_name: String::new(),
            pod: pod.to_string(),
        }),
    };
    let mut grpc = tonic::server::Grpc::new(Codec::default());
    Ok(grpc.unary(Echo { assertions }, req).await)
}

/// Starts a gRPC echo pod named `name` in `namespace` on a free port of 127.0.0.1.
pub async fn start_pod(deployment: &str, name: &str, namespace: &str) -> Pod {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind gRPC echo pod");
    let port = listener.local_addr().expect("local_addr").port();
    let seen: Arc<Mutex<Vec<Echoed>>> = Arc::default();
    let (ns, pod): (Arc<str>, Arc<str>) = (namespace.into(), name.into());
    let recorded = Arc::clone(&seen);
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let (ns, pod, seen) = (Arc::clone(&ns), Arc::clone(&pod), Arc::clone(&recorded));
            conns.spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    answer(req, Arc::clone(&ns), Arc::clone(&pod), Arc::clone(&seen))
                });
                let h2 =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
                let io = hyper_util::rt::TokioIo::new(tcp);
                let _ = h2.serve_connection(io, svc).await;
            });
            // Reap finished connections so the set stays small.
            while conns.try_join_next().is_some() {}
        }
    });
    Pod::serving(deployment, name, namespace, port, seen, task)
}

// === the client ===

/// One expectation, as upstream's `grpc.ExpectedResponse`.
#[derive(Clone, Debug)]
pub struct Exp {
    /// `Echo`, `EchoTwo` or `EchoThree`.
    pub method: &'static str,
    pub authority: Option<&'static str>,
    pub metadata: Vec<(&'static str, &'static str)>,
    pub code: Code,
    /// The pod-name prefix (the Deployment) that must answer an OK call.
    pub backend: Option<&'static str>,
    pub namespace: Option<&'static str>,
}

/// A call of `method` (`Echo`, `EchoTwo`, `EchoThree`) expected to answer OK.
pub fn call(method: &'static str) -> Exp {
    Exp {
        method,
        authority: None,
        metadata: Vec::new(),
        code: Code::Ok,
        backend: None,
        namespace: None,
    }
}

impl Exp {
    pub fn authority(mut self, a: &'static str) -> Self {
        self.authority = Some(a);
        self
    }
    pub fn metadata(mut self, kv: &[(&'static str, &'static str)]) -> Self {
        self.metadata = kv.to_vec();
        self
    }
    pub fn code(mut self, c: Code) -> Self {
        self.code = c;
        self
    }
    pub fn to(mut self, backend: &'static str, ns: &'static str) -> Self {
        self.backend = Some(backend);
        self.namespace = Some(ns);
        self
    }
    pub fn ns(mut self, ns: &'static str) -> Self {
        self.namespace = Some(ns);
        self
    }

    /// upstream's `GetTestCaseName`.
    pub fn name(&self, i: usize) -> String {
        let headers = if self.metadata.is_empty() {
            String::new()
        } else {
            let mut kv: Vec<String> = self
                .metadata
                .iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect();
            kv.sort();
            format!(" with headers '{{{}}}'", kv.join(","))
        };
        let req = format!(
            "{i} request to '{}/{SERVICE}/{}'{headers}",
            self.authority.unwrap_or(""),
            self.method
        );
        match self.backend {
            Some(b) => format!("{req} should go to {b}"),
            None => format!("{req} should receive a {:?}", self.code),
        }
    }
}

/// A channel to switchyard's HTTP port over h2c, whose calls carry `authority` (default: the
/// address) as upstream's `grpc.WithAuthority`.
pub async fn channel(
    port: u16,
    authority: Option<&str>,
) -> Result<tonic::transport::Channel, String> {
    let mut endpoint = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .map_err(|e| e.to_string())?
        .timeout(CALL_TIMEOUT)
        .connect_timeout(CALL_TIMEOUT);
    if let Some(a) = authority {
        endpoint = endpoint.origin(format!("http://{a}").parse().map_err(|e| format!("{e}"))?);
    }
    endpoint
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))
}

/// One call on `channel`: its status code and, when OK, the answer.
pub async fn send(
    channel: tonic::transport::Channel,
    exp: &Exp,
) -> Result<(Code, Option<EchoResponse>), String> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.map_err(|e| format!("not ready: {e}"))?;
    let mut req = tonic::Request::new(EchoRequest {});
    for (k, v) in &exp.metadata {
        // grpc-go lower-cases metadata keys, as HTTP/2 requires.
        let key: tonic::metadata::MetadataKey<tonic::metadata::Ascii> =
            k.to_ascii_lowercase().parse().map_err(|e| format!("{e}"))?;
        req.metadata_mut()
            .insert(key, v.parse().map_err(|e| format!("{e}"))?);
    }
    let path =
        PathAndQuery::try_from(format!("/{SERVICE}/{}", exp.method)).map_err(|e| e.to_string())?;
    match grpc.unary(req, path, ClientCodec::default()).await {
        Ok(r) => Ok((Code::Ok, Some(r.into_inner()))),
        Err(s) => Ok((s.code(), None)),
    }
}

/// upstream's `compareResponse`.
pub fn compare(exp: &Exp, code: Code, resp: Option<&EchoResponse>) -> Result<(), String> {
    if code != exp.code {
        return Err(format!(
            "expected status code to be {:?}, but got {code:?}",
            exp.code
        ));
    }
    if code != Code::Ok {
        return Ok(());
    }
    let a = resp.and_then(|r| r.assertions.clone()).unwrap_or_default();
    let want = format!("/{SERVICE}/{}", exp.method);
    if a.fully_qualified_method != want {
        return Err(format!(
            "expected path to be {want}, got {}",
            a.fully_qualified_method
        ));
    }
    let ctx = a.context.unwrap_or_default();
    if let Some(ns) = exp.namespace
        && ns != ctx.namespace
    {
        return Err(format!(
            "expected namespace to be {ns}, got {}",
            ctx.namespace
        ));
    }
    if let Some(b) = exp.backend
        && !ctx.pod.starts_with(b)
    {
        return Err(format!(
            "expected pod name to start with {b}, got {}",
            ctx.pod
        ));
    }
    Ok(())
}

/// upstream's `MakeRequestAndExpectEventuallyConsistentResponse`: 3 answers in a row as
/// expected within the limit (a miss retried after 1 s), on one connection kept while it
/// works (upstream's client keeps its `ClientConn`).
pub async fn eventually_consistent(port: u16, exp: &Exp) -> Result<(), String> {
    let deadline = Instant::now() + MAX_TIME_TO_CONSISTENCY;
    let mut successes = 0;
    let mut last = String::from("no attempt");
    let mut conn = None;
    while Instant::now() < deadline {
        let outcome = async {
            let ch = match &conn {
                Some(c) => c,
                None => conn.insert(channel(port, exp.authority).await?),
            };
            let (code, resp) = send(ch.clone(), exp).await?;
            compare(exp, code, resp.as_ref())
        }
        .await;
        match outcome {
            Ok(()) => {
                successes += 1;
                if successes >= REQUIRED_CONSECUTIVE_SUCCESSES {
                    return Ok(());
                }
            }
            Err(e) => {
                successes = 0;
                last = e;
                conn = None;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    Err(format!(
        "not consistent within {MAX_TIME_TO_CONSISTENCY:?}; last: {last}"
    ))
}

/// Runs every expectation at once (upstream's parallel subtests) and panics with each that
/// did not hold, and switchyard's stderr.
pub async fn run_all(port: u16, stderr: impl Fn() -> String, case: &str, cases: &[Exp]) {
    let outcomes = futures::future::join_all(cases.iter().enumerate().map(|(i, exp)| async move {
        eventually_consistent(port, exp)
            .await
            .map_err(|e| format!("{case}/{}: {e}", exp.name(i)))
    }))
    .await;
    let failures: Vec<String> = outcomes.into_iter().filter_map(Result::err).collect();
    assert!(
        failures.is_empty(),
        "{} of {} expectations failed:\n{}\n--- switchyard stderr ---\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n"),
        stderr()
    );
}

/// upstream's `testGRPCDistribution`: 500 calls, 10 at a time on one connection, each
/// answered OK by a pod of one of `weights`' Deployments, whose shares must be within 5
/// points of the weights (and only the Deployments weighted above 0 answered).
pub async fn weighted_distribution(
    port: u16,
    exp: &Exp,
    weights: &[(&str, f64)],
) -> Result<(), String> {
    const TOTAL: usize = 500;
    const CONCURRENT: usize = 10;
    const TOLERANCE: f64 = 0.05;
    let ch = channel(port, exp.authority).await?;
    let counts: Mutex<Vec<usize>> = Mutex::new(vec![0; weights.len()]);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let worker = || async {
        while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < TOTAL {
            let (code, resp) = send(ch.clone(), exp).await?;
            if code != Code::Ok {
                return Err(format!("expected OK response, got {code:?}"));
            }
            let pod = resp
                .and_then(|r| r.assertions?.context)
                .map(|c| c.pod)
                .unwrap_or_default();
            let Some(i) = weights.iter().position(|(d, _)| pod.starts_with(d)) else {
                return Err(format!("request was handled by an unexpected pod {pod:?}"));
            };
            counts.lock().expect("counts")[i] += 1;
        }
        Ok::<(), String>(())
    };
    let results = futures::future::join_all((0..CONCURRENT).map(|_| worker())).await;
    if let Some(e) = results.into_iter().find_map(Result::err) {
        return Err(format!("error while sending requests: {e}"));
    }
    let counts = counts.into_inner().expect("counts");
    let mut errs = Vec::new();
    let hit = counts.iter().filter(|c| **c > 0).count();
    let wanted = weights.iter().filter(|(_, w)| *w > 0.0).count();
    if hit != wanted {
        errs.push(format!(
            "expected only {wanted} backends to receive traffic"
        ));
    }
    for ((d, want), got) in weights.iter().zip(&counts) {
        let got = *got as f64 / TOTAL as f64;
        if (got - want).abs() > TOLERANCE {
            errs.push(format!(
                "backend {d:?} weighted traffic of {got} not within tolerance {want} (+/-{TOLERANCE})"
            ));
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        errs.sort();
        Err(errs.join("; "))
    }
}

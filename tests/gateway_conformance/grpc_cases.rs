// The GRPCRoute conformance cases, shared by tests/e2e_gateway_grpc.rs (offline,
// `--manifests`) and tests/e2e_gateway_grpc_cluster.rs (through the fake API server), which
// include this file after defining `SOURCE`. Not a module: the tests must be the including
// crate's. Each is upstream's `conformance/tests/grpcroute-*.go` (v1.6.1): its manifests, its
// calls and its expectations, over h2c to switchyard's HTTP port (the Gateways' port-80
// listeners), answered by gRPC echo-basic pods.

use gateway_conformance::grpc::{
    Exp, call, eventually_consistent, run_all, weighted_distribution,
};
use gateway_conformance::{INFRA, Suite, start};
use tonic::Code;

const V1: &str = "grpc-infra-backend-v1";
const V2: &str = "grpc-infra-backend-v2";
const V3: &str = "grpc-infra-backend-v3";

async fn check(s: &Suite, case: &str, cases: &[Exp]) {
    run_all(s.sy.http_port, || s.sy.stderr(), case, cases).await;
}

/// GRPCExactMethodMatching
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_exact_method_matching() {
    let s = start(&["grpcroute-exact-method-matching.yaml"]).await;
    check(
        &s,
        "GRPCExactMethodMatching",
        &[
            call("Echo").to(V1, INFRA),
            call("EchoTwo").to(V2, INFRA),
            call("EchoThree").code(Code::Unimplemented),
        ],
    )
    .await;
}

/// GRPCRouteHeaderMatching
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_route_header_matching() {
    let s = start(&["grpcroute-header-matching.yaml"]).await;
    let h = |kv: &[(&'static str, &'static str)]| call("Echo").metadata(kv);
    check(
        &s,
        "GRPCRouteHeaderMatching",
        &[
            h(&[("Version", "one")]).to(V1, INFRA),
            h(&[("Version", "two")]).to(V2, INFRA),
            h(&[("Version", "two"), ("Color", "orange")]).to(V1, INFRA),
            h(&[("Version", "two"), ("Color", "blue")]).to(V2, INFRA),
            h(&[("Color", "orange")]).code(Code::Unimplemented),
            h(&[("Some-Other-Header", "one")]).code(Code::Unimplemented),
            h(&[("Color", "blue")]).to(V1, INFRA),
            h(&[("Color", "green")]).to(V1, INFRA),
            h(&[("Color", "red")]).to(V2, INFRA),
            h(&[("Color", "yellow")]).to(V2, INFRA),
            h(&[("Color", "purple")]).code(Code::Unimplemented),
        ],
    )
    .await;
}

/// GRPCRouteListenerHostnameMatching
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_route_listener_hostname_matching() {
    let s = start(&["grpcroute-listener-hostname-matching.yaml"]).await;
    let at = |a: &'static str| call("Echo").authority(a);
    check(
        &s,
        "GRPCRouteListenerHostnameMatching",
        &[
            at("bar.com").to(V1, INFRA),
            at("foo.bar.com").to(V2, INFRA),
            at("baz.bar.com").to(V3, INFRA),
            at("boo.bar.com").to(V3, INFRA),
            at("multiple.prefixes.bar.com").to(V3, INFRA),
            at("multiple.prefixes.foo.com").to(V3, INFRA),
            at("foo.com").code(Code::Unimplemented),
            at("no.matching.host").code(Code::Unimplemented),
        ],
    )
    .await;
}

/// GRPCRouteWeight
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_route_weight() {
    let s = start(&["grpcroute-weight.yaml"]).await;
    let port = s.sy.http_port;
    let exp = call("Echo").ns(INFRA);
    // Assert the call succeeds before the distribution check.
    eventually_consistent(port, &exp)
        .await
        .unwrap_or_else(|e| panic!("GRPCRouteWeight: {e}\n{}", s.sy.stderr()));
    let weights = [(V1, 0.7), (V2, 0.3), (V3, 0.0)];
    let mut misses = Vec::new();
    // upstream: up to 10 distribution runs, the first that holds passes.
    for attempt in 1..=10 {
        match weighted_distribution(port, &exp, &weights).await {
            Ok(()) => return,
            Err(e) => misses.push(format!("({attempt}/10) {e}")),
        }
    }
    panic!(
        "GRPCRouteWeight: weighted distribution tests failed:\n{}\n{}",
        misses.join("\n"),
        s.sy.stderr()
    );
}

/// GRPCRouteNamedRule (extended feature GRPCRouteNamedRouteRule: a rule's `name` is read
/// and routes as an unnamed rule would)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_route_named_rule() {
    let s = start(&["grpcroute-named-rule.yaml"]).await;
    check(
        &s,
        "GRPCRouteNamedRule",
        &[call("Echo").to(V1, INFRA), call("EchoTwo").to(V2, INFRA)],
    )
    .await;
}

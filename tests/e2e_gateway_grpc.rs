//! Gateway API conformance, GRPCRoute traffic, offline: one test per upstream GRPCRoute case
//! (kubernetes-sigs/gateway-api v1.6.1, `conformance/tests/grpcroute-*.go`), on the same
//! manifests (tests/data/gateway-api, copied unchanged), with real gRPC calls over h2c to
//! switchyard (`--manifests`) and gRPC echo-basic pods on 127.0.0.1 behind it
//! (tests/gateway_conformance/grpc.rs). The same cases run through the fake API server in
//! tests/e2e_gateway_grpc_cluster.rs (tests/gateway_conformance/grpc_cases.rs holds them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod gateway_conformance;
mod kube_api;
mod tls_client;

/// Where switchyard reads the objects from.
const SOURCE: gateway_conformance::Source = gateway_conformance::Source::Manifests;

include!("gateway_conformance/grpc_cases.rs");

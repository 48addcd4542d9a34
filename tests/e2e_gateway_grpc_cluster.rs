//! Gateway API conformance, GRPCRoute traffic, through the fake API server: the cases of
//! tests/e2e_gateway_grpc.rs (tests/gateway_conformance/grpc_cases.rs), with the same
//! manifests and expectations, the GRPCRoutes served by the in-repo fake API server
//! (tests/kube_api, their v1.6.1 CRD's defaults applied) and watched by switchyard as in a
//! cluster.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod gateway_conformance;
mod kube_api;
mod tls_client;

/// Where switchyard reads the objects from.
const SOURCE: gateway_conformance::Source = gateway_conformance::Source::Cluster;

include!("gateway_conformance/grpc_cases.rs");

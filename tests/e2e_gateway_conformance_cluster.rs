//! Gateway API conformance, traffic part, through the fake API server: the cases of
//! tests/e2e_gateway_conformance.rs (tests/gateway_conformance/cases.rs), with the same
//! manifests and expectations, the objects served by the in-repo fake API server
//! (tests/kube_api) and watched by switchyard as in a cluster. The fake accepts the echo
//! pods' 127.0.0.1 addresses in EndpointSlices, which a real API server would refuse: the
//! backends must be reachable on this machine. Here switchyard writes status, so the frontend
//! client-certificate cases also check the listener, Gateway and route conditions upstream's
//! Go tests wait for.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod gateway_conformance;
mod kube_api;
mod tls_client;

/// Where switchyard reads the objects from.
const SOURCE: gateway_conformance::Source = gateway_conformance::Source::Cluster;

include!("gateway_conformance/cases.rs");

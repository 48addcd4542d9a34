//! Gateway API conformance, traffic part, offline: one test per upstream GATEWAY-HTTP case
//! (kubernetes-sigs/gateway-api v1.6.1, `conformance/tests/<case>.go`), on the same manifests
//! (tests/data/gateway-api, copied unchanged) and with the same requests and expectations,
//! checked the way upstream checks them (tests/gateway_conformance/expect.rs: 3 consistent
//! answers in a row, the echo's JSON, redirects, absent headers, the weighted distribution).
//! switchyard reads the manifests with `--manifests`; the base manifests' Deployments are real
//! echo-basic pods on 127.0.0.1 (tests/gateway_conformance/echo.rs). The same cases run
//! through the fake API server in tests/e2e_gateway_conformance_cluster.rs
//! (tests/gateway_conformance/cases.rs holds them).
//!
//! Gateways' port-80 listeners are served on switchyard's HTTP port and port-443 listeners on
//! its TLS port (`--gateway-http-port 80 --gateway-https-port 443`). Status conditions are the
//! status suite's (tests/e2e_gateway_status.rs); a case that waits for `Accepted` and then
//! sends traffic is checked here for its traffic. docs/gateway-conformance.md lists every
//! upstream case and where it stands.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod gateway_conformance;
mod kube_api;
mod tls_client;

/// Where switchyard reads the objects from.
const SOURCE: gateway_conformance::Source = gateway_conformance::Source::Manifests;

include!("gateway_conformance/cases.rs");

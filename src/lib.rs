//! switchyard: a Kubernetes service load balancer.
//!
//! Crate map, by wing; data flows one way, top to bottom:
//! - `config`: command-line flags -> validated `Config`; `app`: `run`, the only reader of it.
//! - `control`: the sources (cluster watch, manifest files) and the pipeline that feeds them
//!   through the PURE `translate` and swaps the result in once. Names no data plane.
//! - `table`: the immutable `RoutingTable`, its entries and endpoints, and the pure matcher,
//!   balance and sticky rules it is read with.
//! - `decide`: the decision core every engine applies (route, pin, pick, retry, eject, header
//!   edits, error pages, explain). Free of Pingora, tokio and Kubernetes.
//! - `data`: the engines (Pingora's HTTP proxy, the HTTP/1 fast path, the TCP relay) and the
//!   client-connection guards and TLS they run behind. Names no Kubernetes type.
//! - `ops`: admin endpoints, metrics, stats page, health checks, access log, lifecycle.
//! - `demo`: two tiny backends for the bundled example.

pub mod app;
pub mod config;
pub mod control;
pub mod data;
pub mod decide;
pub mod demo;
pub mod ops;
pub mod table;

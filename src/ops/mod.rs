//! Operating it: admin endpoints, the Prometheus registry, the stats page, active health
//! checks, the access log and the shutdown lifecycle. Reads the table; never writes it.

pub mod access_log;
pub mod admin;
pub mod health;
pub mod lifecycle;
pub mod metrics;
pub mod page_loader;
pub mod stats;

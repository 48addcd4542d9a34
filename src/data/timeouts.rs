//! The data plane's timeouts (the original HAProxy template's values by default). Set by
//! `config`, read by the engines.

use std::time::Duration;

/// Timeouts of the HTTP data plane; the original HAProxy template's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    pub request_headers: Duration,
    pub client_idle: Duration,
    pub server_idle: Duration,
    pub keep_alive: Duration,
    pub tunnel: Duration,
    /// How long a failed connect keeps an endpoint out of rotation.
    pub passive_down: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            request_headers: Duration::from_secs(5),
            client_idle: Duration::from_secs(50),
            server_idle: Duration::from_secs(50),
            keep_alive: Duration::from_secs(60),
            tunnel: Duration::from_secs(3600),
            passive_down: Duration::from_secs(5),
        }
    }
}

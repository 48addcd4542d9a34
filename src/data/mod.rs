//! The engines: Pingora's HTTP proxy, the HTTP/1 fast path and the TCP relay, behind the
//! client-connection guards and TLS. Each applies the decisions of `decide` to its own wire
//! representation and holds no request policy of its own; nothing here names a Kubernetes
//! type.

pub mod fast;
pub mod hpack;
pub mod http2;
pub mod intake;
pub mod listener;
pub mod mirror;
pub mod proxy;
pub mod proxy_protocol;
pub mod record;
pub mod tcp;
pub mod tls;
pub mod wire;

mod timeouts;

pub use timeouts::Timeouts;

//! The decision core: what happens to a request, written once and applied by every engine
//! (Pingora's HTTP proxy, the fast path, the TCP relay) and by `/explain`. Route, pin, pick,
//! retry or give up, eject, the header edits and the error pages are decided here as data; an
//! engine only carries them out. Nothing here names Pingora, tokio or Kubernetes, and nothing
//! here does I/O.

pub mod attempt;
pub mod auth;
pub mod cause;
pub mod datagram;
pub mod edits;
pub mod error_page;
pub mod exchange;
pub mod explain;
pub mod external_auth;
pub mod gateway;
pub mod grpc;
pub mod hash_key;
pub mod location;
pub mod rate_limit;
pub mod reply;
pub mod target;
pub mod validity;

//! Connections to backends, kept for reuse: the fast path's HTTP/1 pool (`pool`, clear or TLS,
//! keyed by address and TLS choice), its HTTP/2 pool (`h2_pool`, streams multiplexed on few
//! connections) and the request body kept for a further try (`kept_body`). They hold
//! connections and bytes; which endpoint a request goes to, and whether a try may be replayed,
//! is `decide`'s. Nothing here names an engine or the frontend.

pub mod h2_pool;
pub mod kept_body;
pub mod pool;

//! The fast path's HTTP/2: the connection in both roles (`conn`: frames, flow control, the
//! stream state machine, HPACK through `wire::hpack`; fuzzed as `h2_server` and `h2_client`),
//! the count of a connection's streams in flight that its idle timeout waits on (`active`),
//! and the writer that batches a connection's frames per scheduler pass (`batch`). It knows
//! nothing of routes, tables or engines: a stream is a header block, a body and trailers.

pub mod active;
pub mod batch;
pub mod conn;

//! HPACK (RFC 7541), the header compression of HTTP/2: a decoder that keeps the dynamic table
//! a peer's encoder fills, and an encoder that, as HAProxy's does, uses the static table only.
//! These are the first part of an HTTP/2 codec leaner than the `h2` crate, for the relay's two
//! legs (issue #17: `h2`'s HPACK, stream store and frame queues are most of the instructions a
//! relayed gRPC call costs beyond HAProxy's); the relay still speaks through `h2`. Pure byte
//! work: no I/O, no allocation but the decoded strings, nothing that can panic on input
//! (fuzzed: `fuzz/fuzz_targets/hpack.rs`).

mod decoder;
mod encoder;
pub mod huffman;
mod table;

pub use decoder::{DecodeError, Decoder, Field};
pub use encoder::Encoder;

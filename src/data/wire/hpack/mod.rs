//! HPACK (RFC 7541), the header compression of HTTP/2: a decoder that keeps the dynamic table
//! a peer's encoder fills, and an encoder that, as HAProxy's does, uses the static table only.
//! Part of an HTTP/2 codec leaner than the `h2` crate (issue #17: `h2`'s HPACK, stream store
//! and frame queues were most of the instructions a relayed gRPC call cost beyond HAProxy's):
//! the fast path's HTTP/2 connections, to backends and from clients, code their header blocks
//! with it (`data::wire::h2::conn`). Pure byte work:
//! no I/O, no allocation but the decoded strings, nothing that can panic on input (fuzzed:
//! `fuzz/fuzz_targets/hpack.rs`).

mod decoder;
mod encoder;
pub mod huffman;
mod table;

pub use decoder::{DecodeError, Decoder, Field};
pub use encoder::{Encoder, field, field_named, field_written};

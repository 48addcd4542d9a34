//! HTTP/1 in place: the request head (`request`, which also writes the head a backend gets
//! with `decide`'s edits carried out), the response head (`response`, which also writes
//! switchyard's own answers) and chunked bodies (`chunked`). Pure byte work over buffers the
//! caller owns: no I/O, no policy; a byte sequence it is not sure of is declined, never
//! guessed at (fuzzed: `fuzz/fuzz_targets/http_*.rs`, `chunked.rs`).

pub mod chunked;
pub mod request;
pub mod response;

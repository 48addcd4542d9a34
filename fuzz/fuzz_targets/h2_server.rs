//! See fuzz/checks.rs (`check_h2_server`): the invariants live there, shared with
//! tests/fuzz_corpus.rs.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check_h2_server(data));

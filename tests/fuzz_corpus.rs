//! The fuzz targets' corpora as regression tests: every file in `fuzz/corpus/<target>/` goes
//! through the same check the target runs (`fuzz/checks.rs`), so a crash once found and kept
//! in a corpus stays fixed without a nightly toolchain or cargo-fuzz.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../fuzz/checks.rs"]
mod checks;

use std::path::Path;

/// Runs `check` on every file of `fuzz/corpus/<target>/`; returns how many there were.
fn replay(target: &str, check: fn(&[u8])) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    for file in &files {
        let data = std::fs::read(file).unwrap();
        if let Err(panic) = std::panic::catch_unwind(|| check(&data)) {
            let why = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("?");
            panic!("{target}: {} fails: {why}", file.display());
        }
    }
    files.len()
}

#[test]
fn http_request_corpus() {
    assert!(replay("http_request", checks::check_request) > 0);
}

#[test]
fn http_response_corpus() {
    assert!(replay("http_response", checks::check_response) > 0);
}

#[test]
fn chunked_corpus() {
    assert!(replay("chunked", checks::check_chunked) > 0);
}

#[test]
fn http1_differential_corpus() {
    assert!(replay("http1_differential", checks::check_differential) > 0);
}

#[test]
fn proxy_protocol_corpus() {
    assert!(replay("proxy_protocol", checks::check_proxy_protocol) > 0);
}

#[test]
fn pingora_trailers_corpus() {
    assert!(replay("pingora_trailers", checks::check_pingora_trailers) > 0);
}

#[test]
fn hpack_corpus() {
    assert!(replay("hpack", checks::check_hpack) > 0);
}

#[test]
fn h2_client_corpus() {
    assert!(replay("h2_client", checks::check_h2_client) > 0);
}

#[test]
fn h2_server_corpus() {
    assert!(replay("h2_server", checks::check_h2_server) > 0);
}

//! How one frontend refuses a request before any engine serves it: the answer, as `decide`
//! says (`Rejection`, `error_page::rejection_answer`), written as HTTP/1 bytes, and its count
//! and access-log line (`record::Recorder`). The header guard (`guard`), the intake and the
//! listener share it. It reads and writes no stream itself.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use crate::data::frontend::HttpProxy;
use crate::data::record::Recorder;
use crate::data::wire::h1::response::write_answer;
use crate::decide::cause::Rejection;
use crate::decide::edits::Forwarding;
use crate::decide::error_page::rejection_answer;

/// What one frontend needs to refuse a request: its forwarding settings (for the answer's
/// fields) and its recorder.
pub struct Refusals {
    pub fwd: Arc<Forwarding>,
    pub recorder: Recorder,
}

impl Refusals {
    pub fn new(proxy: &HttpProxy) -> Refusals {
        Refusals {
            fwd: Arc::clone(&proxy.fwd),
            recorder: proxy.recorder.clone(),
        }
    }

    /// The whole answer to `r`, as bytes (it closes the connection).
    pub fn answer(&self, r: Rejection) -> Vec<u8> {
        let mut out = Vec::with_capacity(160);
        write_answer(&mut out, &rejection_answer(r, &self.fwd), true);
        out
    }

    /// Counts `r` and writes its access-log line. `client`: the connection's client;
    /// `head`: what was read of the header.
    pub fn record(&self, r: Rejection, started: Instant, client: Option<SocketAddr>, head: &[u8]) {
        self.recorder.rejected(r, started, client, head);
    }
}

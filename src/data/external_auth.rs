//! The subrequest of external authentication (ingress-nginx's `auth-url`), carried: the
//! client's request line and fields without its body, with the edits every request gets and
//! the fields `decide::external_auth` writes, sent over HTTP/1.1 in clear with
//! `Connection: close` to the endpoint the attempt picked; the answer's status and fields read
//! (at most 16 KiB of them), its body left unread. What the answer means is the decision
//! core's; this only moves bytes, bounded in time (the route's connect and response waits),
//! and counts the outcome. It never holds a lock across an await.

use std::net::SocketAddr;
use std::time::Duration;

use pingora::http::RequestHeader;
use prometheus::IntCounter;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::data::wire::fields::{is_connection_field, named_by_connection};
use crate::data::wire::h1::request::Lines;
use crate::decide::edits::{Edits, Seen};
use crate::decide::external_auth::{AuthAnswer, Denial, Verdict, replaced};
use crate::ops::metrics::Metrics;

/// The most bytes of the answer's status line and fields read.
const MAX_HEAD: usize = 16 << 10;

/// The most fields of an answer read.
const MAX_FIELDS: usize = 64;

/// The subrequests' outcomes, counted (`switchyard_external_auth_requests_total`).
pub struct AuthCalls {
    allowed: IntCounter,
    denied: IntCounter,
    failed: IntCounter,
}

impl AuthCalls {
    pub fn new(metrics: &Metrics) -> AuthCalls {
        AuthCalls {
            allowed: metrics.data.external_auth_requests("allowed"),
            denied: metrics.data.external_auth_requests("denied"),
            failed: metrics.data.external_auth_requests("failed"),
        }
    }

    /// Sends `head` to `addr` and reads the answer's header: `None` when there is none (no
    /// connection within `connect`, no complete header within `answer`, or not HTTP/1).
    pub async fn ask(
        &self,
        addr: Option<SocketAddr>,
        head: &[u8],
        connect: Duration,
        answer: Duration,
    ) -> Option<AuthAnswer> {
        let addr = addr?;
        let mut stream = tokio::time::timeout(connect, TcpStream::connect(addr))
            .await
            .ok()?
            .ok()?;
        let _ = stream.set_nodelay(true);
        tokio::time::timeout(answer, exchange(&mut stream, head))
            .await
            .ok()
            .flatten()
    }

    /// Counts how a subrequest ended.
    pub fn count(&self, verdict: &Verdict) {
        match verdict {
            Verdict::Allowed(_) => self.allowed.inc(),
            Verdict::Denied(Denial::Failed) => self.failed.inc(),
            Verdict::Denied(_) => self.denied.inc(),
        }
    }
}

async fn exchange(stream: &mut TcpStream, head: &[u8]) -> Option<AuthAnswer> {
    stream.write_all(head).await.ok()?;
    let mut buf = Vec::with_capacity(1024);
    loop {
        if buf.len() >= MAX_HEAD {
            return None;
        }
        let mut chunk = [0u8; 4096];
        let room = (MAX_HEAD - buf.len()).min(chunk.len());
        let n = stream.read(&mut chunk[..room]).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
        let mut resp = httparse::Response::new(&mut fields);
        match resp.parse(&buf) {
            Ok(httparse::Status::Complete(_)) => {
                let status = resp.code?;
                // An interim answer (100 Continue) is not the answer; the subrequest has no
                // body, so none should come.
                if (100..200).contains(&status) {
                    return None;
                }
                return Some(AuthAnswer {
                    status,
                    fields: resp
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_ascii_lowercase().into_boxed_str(),
                                Box::from(h.value),
                            )
                        })
                        .collect(),
                });
            }
            Ok(httparse::Status::Partial) => {}
            Err(_) => return None,
        }
    }
}

/// The subrequest's head: `method path` of the authentication URL, the client's fields but
/// its connection's, its body framing and those switchyard writes (`replaced`), with `edits`
/// (every request's) carried out, then `set` (`decide::external_auth::subrequest_fields`).
pub fn subrequest_head(
    method: &str,
    path: &str,
    req: &RequestHeader,
    edits: &Edits<'_>,
    set: &[(&'static str, Box<str>)],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let connection = || {
        req.headers
            .get_all(http::header::CONNECTION)
            .iter()
            .map(http::HeaderValue::as_bytes)
    };
    let mut seen = Seen::default();
    for (name, value) in &req.headers {
        let n = name.as_str().as_bytes();
        if is_connection_field(n) || replaced(n) || named_by_connection(n, connection()) {
            continue;
        }
        if let Some(edit) = edits.touching(n)
            && !seen.field(edit, value.as_bytes())
        {
            continue;
        }
        line(&mut out, n, value.as_bytes());
    }
    seen.additions(edits, &mut Lines(&mut out));
    for (name, value) in set {
        line(&mut out, name.as_bytes(), value.as_bytes());
    }
    out.extend_from_slice(b"connection: close\r\n\r\n");
    out
}

fn line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

//! Fire-and-forget copies of requests for a Gateway rule's `RequestMirror` backends (the
//! decision core says which endpoints get one). A copy is the request line and header as the
//! client sent them, over HTTP/1.1 in clear with `Connection: close`; its answer is read and
//! dropped. Nothing about a copy — a refused connection, a slow or dead mirror — ever touches
//! the client's request: each copy is its own task, bounded in time and in number. It must not
//! decide anything (no routing, no picking) and holds no table.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pingora::http::RequestHeader;
use prometheus::IntCounter;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use crate::ops::metrics::Metrics;
use crate::table::upstream::BackendProtocol;

/// Copies in flight at most; past this, a copy is dropped (counted) rather than queued.
const MAX_IN_FLIGHT: usize = 1024;

/// The longest a copy may take, connect to close.
const COPY_TIMEOUT: Duration = Duration::from_secs(10);

/// Fields that belong to the client's connection or framing, not to the copy.
const NOT_COPIED: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
];

pub struct Mirrors {
    slots: Arc<Semaphore>,
    sent: IntCounter,
    failed: IntCounter,
    skipped: IntCounter,
    dropped: IntCounter,
}

impl Mirrors {
    pub fn new(metrics: &Metrics) -> Mirrors {
        Mirrors {
            slots: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            sent: metrics.data.mirror_requests("sent"),
            failed: metrics.data.mirror_requests("failed"),
            skipped: metrics.data.mirror_requests("skipped"),
            dropped: metrics.data.mirror_requests("dropped"),
        }
    }

    /// Sends a copy of `req` to each of `targets`, in the background.
    pub fn send(&self, targets: Vec<(SocketAddr, BackendProtocol)>, req: &RequestHeader) {
        // A body would have to be held back from the backend until the copy took it: copies
        // are made of requests without one.
        let has_body = req.headers.contains_key(http::header::TRANSFER_ENCODING)
            || req
                .headers
                .get(http::header::CONTENT_LENGTH)
                .is_some_and(|v| v.as_bytes() != b"0");
        let head = copy_of(req);
        for (addr, protocol) in targets {
            if has_body || protocol != BackendProtocol::Http {
                self.skipped.inc();
                continue;
            }
            let Ok(permit) = Arc::clone(&self.slots).try_acquire_owned() else {
                self.dropped.inc();
                continue;
            };
            let head = head.clone();
            let (sent, failed) = (self.sent.clone(), self.failed.clone());
            tokio::spawn(async move {
                let _permit = permit;
                match tokio::time::timeout(COPY_TIMEOUT, deliver(addr, &head)).await {
                    Ok(Ok(())) => sent.inc(),
                    _ => failed.inc(),
                }
            });
        }
    }
}

/// The request line and fields of the copy.
fn copy_of(req: &RequestHeader) -> Arc<[u8]> {
    let pq = req.uri.path_and_query().map_or("/", |pq| pq.as_str());
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(req.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(pq.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if !req.headers.contains_key(http::header::HOST)
        && let Some(a) = req.uri.authority()
    {
        out.extend_from_slice(b"host: ");
        out.extend_from_slice(a.as_str().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    for (name, value) in &req.headers {
        if NOT_COPIED.contains(&name.as_str()) {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"connection: close\r\n\r\n");
    out.into()
}

async fn deliver(addr: SocketAddr, head: &[u8]) -> std::io::Result<()> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(head).await?;
    // The answer is read to the end so the mirror is not reset mid-reply, then dropped.
    tokio::io::copy(&mut stream, &mut tokio::io::sink()).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_keeps_the_request_and_drops_its_framing() {
        let mut req = RequestHeader::build("GET", b"/mirror?x=1", None).unwrap();
        req.insert_header("Host", "example.com").unwrap();
        req.insert_header("X-Keep", "yes").unwrap();
        req.insert_header("Connection", "keep-alive").unwrap();
        let copy = String::from_utf8(copy_of(&req).to_vec()).unwrap();
        assert!(copy.starts_with("GET /mirror?x=1 HTTP/1.1\r\n"), "{copy}");
        assert!(copy.contains("host: example.com\r\n"));
        assert!(copy.contains("x-keep: yes\r\n"));
        assert!(!copy.contains("keep-alive"));
        assert!(copy.ends_with("connection: close\r\n\r\n"));
    }
}

//! Fire-and-forget copies of requests for a Gateway rule's `RequestMirror` backends (the
//! decision core says which endpoints get one). A copy is the request line and header as the
//! client sent them with `decide::edits`' request edits carried out as for any request (the
//! forwarding fields, the asserted fields removed, the load balancer's cookie out), over
//! HTTP/1.1 in clear with `Connection: close`, and the body as it is
//! read (`content-length` kept when the client sent one, else chunked); its answer is read and
//! dropped. Nothing about a copy — a refused connection, a slow or dead mirror — ever touches
//! the client's request: each copy is its own task, bounded in time and in number, and its
//! body arrives through a bounded queue that the request never waits on (a copy that falls
//! behind, or would pass the bytes all copies may hold, is abandoned). It must not decide
//! anything (no routing, no picking) and holds no table.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use pingora::http::RequestHeader;
use prometheus::IntCounter;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::data::wire::fields::{is_connection_field, named_by_connection};
use crate::data::wire::h1::request::Lines;
use crate::decide::edits::{Edits, Seen};
use crate::ops::metrics::Metrics;
use crate::table::upstream::BackendProtocol;

/// Copies in flight at most; past this, a copy is dropped (counted) rather than queued.
const MAX_IN_FLIGHT: usize = 1024;

/// The longest a copy may take, connect to close.
const COPY_TIMEOUT: Duration = Duration::from_secs(10);

/// Body bytes queued for copies, all copies together: past it, a copy is abandoned rather
/// than let a slow mirror hold the client's body in memory.
const BODY_BUDGET: usize = 32 << 20;

/// Body chunks queued for one copy (one more place is kept for the end).
const QUEUED_CHUNKS: usize = 64;

/// Whether a field of the client's request stays off the copy: the connection's own (`wire`,
/// and those its `Connection` names), and the framing, which the copy states for itself
/// (`content-length`; `trailer`, as trailers are not copied).
fn not_copied(name: &http::HeaderName, req: &RequestHeader) -> bool {
    let name = name.as_str().as_bytes();
    is_connection_field(name)
        || name == b"content-length"
        || name == b"trailer"
        || named_by_connection(
            name,
            req.headers
                .get_all(http::header::CONNECTION)
                .iter()
                .map(http::HeaderValue::as_bytes),
        )
}

pub struct Mirrors {
    slots: Arc<Semaphore>,
    /// Body bytes queued for copies (`BODY_BUDGET`).
    body_budget: Arc<Semaphore>,
    sent: IntCounter,
    failed: IntCounter,
    skipped: IntCounter,
    dropped: IntCounter,
}

impl Mirrors {
    pub fn new(metrics: &Metrics) -> Mirrors {
        Mirrors {
            slots: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            body_budget: Arc::new(Semaphore::new(BODY_BUDGET)),
            sent: metrics.data.mirror_requests("sent"),
            failed: metrics.data.mirror_requests("failed"),
            skipped: metrics.data.mirror_requests("skipped"),
            dropped: metrics.data.mirror_requests("dropped"),
        }
    }

    /// Sends a copy of `req` to each of `targets`, in the background. A request with a body
    /// (`has_body`) gets its copies' bodies from the returned [`BodyCopies`], fed as the body is
    /// read; `None` when no copy waits for one.
    pub fn send(
        &self,
        targets: Vec<(SocketAddr, BackendProtocol)>,
        req: &RequestHeader,
        edits: &Edits<'_>,
        has_body: bool,
    ) -> Option<BodyCopies> {
        let framing = framing(req, has_body);
        let head = copy_of(req, edits, framing);
        let mut bodies = Vec::new();
        for (addr, protocol) in targets {
            if protocol != BackendProtocol::Http {
                self.skipped.inc();
                continue;
            }
            let Ok(permit) = Arc::clone(&self.slots).try_acquire_owned() else {
                self.dropped.inc();
                continue;
            };
            let head = head.clone();
            let (sent, failed) = (self.sent.clone(), self.failed.clone());
            let body = (framing != Framing::None).then(|| {
                let (tx, rx) = mpsc::channel(QUEUED_CHUNKS + 1);
                bodies.push(tx);
                rx
            });
            tokio::spawn(async move {
                let _permit = permit;
                let copy = deliver(addr, &head, framing, body);
                match tokio::time::timeout(COPY_TIMEOUT, copy).await {
                    Ok(Ok(())) => sent.inc(),
                    _ => failed.inc(),
                }
            });
        }
        (!bodies.is_empty()).then(|| BodyCopies {
            copies: bodies,
            budget: Arc::clone(&self.body_budget),
        })
    }
}

/// How a copy's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    None,
    /// The client's `content-length`, copied.
    Length,
    Chunked,
}

fn framing(req: &RequestHeader, has_body: bool) -> Framing {
    if !has_body {
        Framing::None
    } else if req.headers.contains_key(http::header::CONTENT_LENGTH)
        && !req.headers.contains_key(http::header::TRANSFER_ENCODING)
    {
        Framing::Length
    } else {
        Framing::Chunked
    }
}

/// One piece of a copy's body: a chunk (holding its share of the byte budget until written),
/// or the end.
enum Piece {
    Data(Bytes, OwnedSemaphorePermit),
    End,
}

/// The copies of one request whose body is still to be read: each chunk the client sends is
/// queued to every copy. A copy whose queue is full, or that would pass the byte budget, is
/// abandoned there (its connection is dropped mid-body and counted `failed`); the request
/// never waits for one.
pub struct BodyCopies {
    copies: Vec<mpsc::Sender<Piece>>,
    budget: Arc<Semaphore>,
}

impl BodyCopies {
    /// Queues `chunk` to every copy still going; with `end`, ends them.
    pub fn feed(&mut self, chunk: Option<&Bytes>, end: bool) {
        if let Some(chunk) = chunk.filter(|c| !c.is_empty()) {
            let budget = &self.budget;
            self.copies.retain(|tx| {
                // The last place of the queue is the end's.
                if tx.capacity() <= 1 {
                    return false;
                }
                let Ok(n) = u32::try_from(chunk.len()) else {
                    return false;
                };
                let Ok(permit) = Arc::clone(budget).try_acquire_many_owned(n) else {
                    return false;
                };
                tx.try_send(Piece::Data(chunk.clone(), permit)).is_ok()
            });
        }
        if end {
            for tx in self.copies.drain(..) {
                let _ = tx.try_send(Piece::End);
            }
        }
    }
}

/// The request line and fields of the copy, with `edits` carried out as for the request
/// itself, framed for its body.
fn copy_of(req: &RequestHeader, edits: &Edits<'_>, framing: Framing) -> Arc<[u8]> {
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
    let mut seen = Seen::default();
    for (name, value) in &req.headers {
        if not_copied(name, req) {
            continue;
        }
        if let Some(edit) = edits.touching(name.as_str().as_bytes())
            && !seen.field(edit, value.as_bytes())
        {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    seen.additions(edits, &mut Lines(&mut out));
    match framing {
        Framing::None => {}
        Framing::Length => {
            if let Some(n) = req.headers.get(http::header::CONTENT_LENGTH) {
                out.extend_from_slice(b"content-length: ");
                out.extend_from_slice(n.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
        }
        Framing::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    out.extend_from_slice(b"connection: close\r\n\r\n");
    out.into()
}

async fn deliver(
    addr: SocketAddr,
    head: &[u8],
    framing: Framing,
    body: Option<mpsc::Receiver<Piece>>,
) -> std::io::Result<()> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(head).await?;
    if let Some(mut body) = body {
        loop {
            match body.recv().await {
                Some(Piece::Data(chunk, _budget)) => {
                    if framing == Framing::Chunked {
                        let size = format!("{:x}\r\n", chunk.len());
                        stream.write_all(size.as_bytes()).await?;
                        stream.write_all(&chunk).await?;
                        stream.write_all(b"\r\n").await?;
                    } else {
                        stream.write_all(&chunk).await?;
                    }
                }
                Some(Piece::End) => break,
                // Abandoned: the mirror gets a cut-off request, not a wrong one.
                None => return Err(std::io::Error::other("the copy's body was abandoned")),
            }
        }
        if framing == Framing::Chunked {
            stream.write_all(b"0\r\n\r\n").await?;
        }
    }
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
        let copy = String::from_utf8(copy_of(&req, &Edits::new(), Framing::None).to_vec()).unwrap();
        assert!(copy.starts_with("GET /mirror?x=1 HTTP/1.1\r\n"), "{copy}");
        assert!(copy.contains("host: example.com\r\n"));
        assert!(copy.contains("x-keep: yes\r\n"));
        assert!(!copy.contains("keep-alive"));
        assert!(copy.ends_with("connection: close\r\n\r\n"));
    }

    /// A copy is the request as the backend gets it: the forwarding fields written, the
    /// fields only switchyard asserts taken from the client, the load balancer's cookie out.
    #[test]
    fn a_copy_gets_the_request_edits_every_request_gets() {
        use crate::decide::edits::{ClientCert, Forwarding, request_edits};
        let mut req = RequestHeader::build("GET", b"/m", None).unwrap();
        req.insert_header("Host", "example.com").unwrap();
        req.insert_header("X-Forwarded-For", "198.51.100.7")
            .unwrap();
        req.insert_header("X-Client-Verify", "SUCCESS").unwrap();
        let cookie = format!("a=1; {}=xyz", crate::table::sticky::COOKIE_NAME);
        req.insert_header("Cookie", cookie).unwrap();
        let fwd = Forwarding::plain();
        let edits = request_edits(
            &fwd,
            Some("192.0.2.1"),
            crate::decide::edits::Hidden {
                sticky_cookie: true,
                ..Default::default()
            },
            || ClientCert::Absent,
        );
        let copy = String::from_utf8(copy_of(&req, &edits, Framing::None).to_vec()).unwrap();
        assert!(
            copy.contains("x-forwarded-for: 198.51.100.7, 192.0.2.1\r\n"),
            "{copy}"
        );
        assert!(copy.contains("x-real-ip: 192.0.2.1\r\n"), "{copy}");
        assert!(copy.contains("x-forwarded-proto: http\r\n"), "{copy}");
        assert!(
            !copy.to_ascii_lowercase().contains("x-client-verify"),
            "{copy}"
        );
        assert!(copy.contains("cookie: a=1\r\n"), "{copy}");
        assert_eq!(copy.matches("198.51.100.7").count(), 1, "{copy}");
    }

    #[test]
    fn a_body_is_framed_as_the_client_framed_it_or_chunked() {
        let mut req = RequestHeader::build("POST", b"/up", None).unwrap();
        req.insert_header("Host", "example.com").unwrap();
        assert_eq!(framing(&req, false), Framing::None);
        // HTTP/2 without a length: chunked.
        assert_eq!(framing(&req, true), Framing::Chunked);
        req.insert_header("Content-Length", "5").unwrap();
        assert_eq!(framing(&req, true), Framing::Length);
        let copy =
            String::from_utf8(copy_of(&req, &Edits::new(), Framing::Length).to_vec()).unwrap();
        assert!(copy.contains("content-length: 5\r\n"), "{copy}");
        assert_eq!(copy.matches("content-length").count(), 1, "{copy}");
        req.insert_header("Transfer-Encoding", "chunked").unwrap();
        assert_eq!(framing(&req, true), Framing::Chunked);
        let copy =
            String::from_utf8(copy_of(&req, &Edits::new(), Framing::Chunked).to_vec()).unwrap();
        assert!(copy.contains("transfer-encoding: chunked\r\n"), "{copy}");
        assert!(!copy.contains("content-length"), "{copy}");
    }

    /// A mirror on a real socket: what it read, once the copy closed.
    async fn mirror_reading() -> (SocketAddr, tokio::task::JoinHandle<Vec<u8>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let read = tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            // Until the copy's end: the chunked terminator, or the 5-byte body after the head.
            let limit = Duration::from_secs(5);
            let _ = tokio::time::timeout(limit, async {
                let mut buf = [0u8; 4096];
                loop {
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&got);
                    if text.ends_with("0\r\n\r\n") || text.ends_with("hello") {
                        break;
                    }
                }
            })
            .await;
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
            got
        });
        (addr, read)
    }

    #[tokio::test]
    async fn a_body_reaches_the_mirror_as_it_is_fed() {
        let metrics = Metrics::new();
        let mirrors = Mirrors::new(&metrics);
        let mut req = RequestHeader::build("POST", b"/up", None).unwrap();
        req.insert_header("Host", "example.com").unwrap();
        for (length, want) in [
            (true, "content-length: 5\r\nconnection: close\r\n\r\nhello"),
            (
                false,
                "chunked\r\nconnection: close\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n",
            ),
        ] {
            let mut req = req.clone();
            if length {
                req.insert_header("Content-Length", "5").unwrap();
            }
            let (addr, read) = mirror_reading().await;
            let mut body = mirrors
                .send(
                    vec![(addr, BackendProtocol::Http)],
                    &req,
                    &Edits::new(),
                    true,
                )
                .expect("a copy waits for the body");
            body.feed(Some(&Bytes::from_static(b"hel")), false);
            body.feed(None, false);
            body.feed(Some(&Bytes::from_static(b"lo")), true);
            let got = String::from_utf8(read.await.unwrap()).unwrap();
            assert!(got.starts_with("POST /up HTTP/1.1\r\n"), "{got}");
            assert!(got.ends_with(want), "{got}");
        }
    }

    #[test]
    fn a_copy_that_falls_behind_is_abandoned_and_the_request_never_waits() {
        let (tx, _rx) = mpsc::channel(QUEUED_CHUNKS + 1);
        let (tx2, _rx2) = mpsc::channel(QUEUED_CHUNKS + 1);
        let mut copies = BodyCopies {
            copies: vec![tx],
            budget: Arc::new(Semaphore::new(BODY_BUDGET)),
        };
        let chunk = Bytes::from_static(b"x");
        for _ in 0..QUEUED_CHUNKS {
            copies.feed(Some(&chunk), false);
        }
        assert_eq!(copies.copies.len(), 1, "a full queue less the end's place");
        copies.feed(Some(&chunk), false);
        assert!(copies.copies.is_empty(), "one more chunk abandons the copy");
        // The byte budget, shared by all copies: a chunk past it abandons the copy too.
        let mut copies = BodyCopies {
            copies: vec![tx2],
            budget: Arc::new(Semaphore::new(4)),
        };
        copies.feed(Some(&Bytes::from_static(b"1234")), false);
        assert_eq!(copies.copies.len(), 1);
        copies.feed(Some(&Bytes::from_static(b"5")), false);
        assert!(copies.copies.is_empty());
    }
}

//! The HTTP/1 front of the fast path: serves the plain keep-alive requests that make up most
//! traffic (`GET` and `HEAD`, HTTP/1.1, origin-form target, no body, no upgrade) without
//! Pingora's per-request machinery, and hands every other request to Pingora's proxy untouched.
//!
//! Pingora's HTTP/1 path costs about three times HAProxy's user-space instructions per
//! request (case-preserving header maps, boxed hooks, a channel and a pool-watcher task per
//! request); the kernel work is the same. This front parses each request header once in place
//! (`wire::h1::request`) and hands it, as the exchange's `Front`, to the one request driver
//! (`data::exchange`), which carries it over the HTTP/1 upstream (`h1_upstream`): every
//! decision — route, stickiness, pick, retry, ejection, header edits, answers — is `decide`'s,
//! the same the Pingora hooks apply. What the parser is not sure of (a header it does not
//! handle, a parse error, a method with a body), or what the driver declines once routed, is
//! put back on the stream before a byte goes upstream, and Pingora serves the request,
//! refusing what it must. It reads and writes its wire only, and never holds a lock across an
//! await.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use pingora::protocols::tls::SslDigest;
use pingora::server::ShutdownWatch;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::data::engine::fast::{Connection, Downstream, FastPath, READ_SIZE, write_client};
use crate::data::engine::h1_upstream::{H1Client, Http1};
use crate::data::exchange::{self, Driven, Front, Opening, Tally};
use crate::data::guard::GuardedStream;
use crate::data::record::{Finished, Recorder};
use crate::data::wire::h1::request::{Field, Parse, Request, build_request, parse_request, str_at};
use crate::data::wire::h1::response::write_answer;
use crate::decide::attempt::{Attempt, RouteError};
use crate::decide::edits::Edits;
use crate::decide::error_page::Answer;
use crate::decide::exchange::{self as opening, Desk, Opened};
use crate::table::RoutingTable;
use crate::table::gateway::RequestView;
use crate::table::matcher::Strip;

/// How long a kept-alive connection waits for its next request holding its buffers; past
/// this it gives them back (`Connection::release`) and waits on `IDLE_READ` bytes of room, so
/// that an idle connection costs its sockets and a few small structures, not 2 × 16 KiB of
/// read buffers and a write buffer. A busy connection (requests under a second apart) keeps
/// them; an idle one pays one more read for a next request longer than `IDLE_READ`.
const IDLE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Room for the first read after a connection went idle (`IDLE_AFTER`): most request headers
/// fit; a longer one is read on into `READ_SIZE` more.
const IDLE_READ: usize = 1024;

/// How a connection left the fast path.
#[derive(Debug, PartialEq, Eq)]
pub enum Served {
    /// The connection is done (closed by either side, timed out, or answered with a close).
    Closed,
    /// The next request is not for the fast path; its bytes were put back on the stream.
    Declined,
}

/// Waits (at most `keep_alive`, and not past shutdown) for the next request on a kept-alive
/// connection, reading its first bytes into `conn.buf`; `None` when the wait ended without
/// one. Past `IDLE_AFTER` the connection's buffers are given back (`Connection::release`).
async fn wait_request(
    stream: &mut GuardedStream,
    conn: &mut Connection,
    shutdown: &mut ShutdownWatch,
    keep_alive: std::time::Duration,
) -> Option<std::io::Result<usize>> {
    let deadline = tokio::time::Instant::now() + keep_alive;
    let mut release = Some(deadline.min(tokio::time::Instant::now() + IDLE_AFTER));
    loop {
        let until = release.unwrap_or(deadline);
        // `read_buf` is cancel safe: a read not finished when a timer fires consumed nothing.
        tokio::select! {
            biased;
            r = stream.read_buf(&mut conn.buf) => return Some(r),
            _ = shutdown.changed() => return None,
            _ = tokio::time::sleep_until(until) => {
                release.take()?;
                conn.release();
                conn.buf.reserve(IDLE_READ);
            }
        }
    }
}

enum Read {
    Request(Request),
    Declined,
    Closed,
}

impl FastPath {
    /// Marks a request served on `conn` by the other path.
    pub fn served_elsewhere(conn: &mut Connection) {
        conn.fresh = false;
    }

    /// Serves requests on `stream` until the connection ends or a request is declined.
    pub async fn serve(
        &self,
        stream: &mut GuardedStream,
        conn: &mut Connection,
        shutdown: &mut ShutdownWatch,
    ) -> Served {
        loop {
            let req = match self.read_request(stream, conn, shutdown).await {
                Read::Request(req) => req,
                Read::Closed => return Served::Closed,
                Read::Declined => {
                    stream.unread(conn.buf.split().freeze());
                    return Served::Declined;
                }
            };
            let head = conn.buf.split_to(req.len).freeze();
            let close = req.close || *shutdown.borrow();
            let mut front = H1Front {
                stream: &mut *stream,
                conn: &mut *conn,
                head: &head,
                req: &req,
                target: str_at(&head, req.target.clone()),
                close,
                client_idle: self.proxy.timeouts.client_idle,
            };
            let driven = match exchange::open(&self.proxy, &mut front).await {
                Opening::Ended(driven) => driven,
                Opening::Proxy(x) => x.carry(&mut front, &Http1(self)).await,
            };
            let Driven::Done { keep } = driven else {
                // Declined once routed (a backend this path does not speak to): the request
                // goes back in front of what followed it, for Pingora.
                let mut all = BytesMut::with_capacity(head.len() + conn.buf.len());
                all.extend_from_slice(&head);
                all.extend_from_slice(&conn.buf);
                conn.buf.clear();
                stream.unread(all.freeze());
                return Served::Declined;
            };
            conn.fresh = false;
            if !keep || close {
                let _ = stream.flush().await;
                return Served::Closed;
            }
            stream.rearm();
        }
    }

    /// Reads until a whole request header is in `conn.buf` and says whether it is one for
    /// this path. Waiting for a request after the first is bounded by the keep-alive timeout
    /// and ends at shutdown; once a byte came, the header guard bounds the rest.
    async fn read_request(
        &self,
        stream: &mut GuardedStream,
        conn: &mut Connection,
        shutdown: &mut ShutdownWatch,
    ) -> Read {
        loop {
            if !conn.buf.is_empty() {
                match parse_request(&conn.buf, &mut conn.fields) {
                    Parse::Request(req) => return Read::Request(req),
                    Parse::Declined => return Read::Declined,
                    Parse::Partial => {}
                }
            }
            conn.buf.reserve(READ_SIZE);
            let read = if conn.buf.is_empty() && !conn.fresh {
                if *shutdown.borrow() {
                    return Read::Closed;
                }
                match wait_request(stream, conn, shutdown, self.proxy.timeouts.keep_alive).await {
                    Some(r) => r,
                    None => return Read::Closed,
                }
            } else {
                stream.read_buf(&mut conn.buf).await
            };
            match read {
                // A request cut short: Pingora answers it as it always has.
                Ok(0) if !conn.buf.is_empty() => return Read::Declined,
                Ok(0) | Err(_) => return Read::Closed,
                Ok(_) => {}
            }
        }
    }
}

/// One request of an HTTP/1 client connection, as the exchange's front: its header, parsed
/// in place (`parse_request`), and the connection it answers on.
struct H1Front<'s, D> {
    stream: &'s mut D,
    conn: &'s mut Connection,
    head: &'s Bytes,
    req: &'s Request,
    /// The request's target, as text (`parse_request` checked it), read once.
    target: &'s str,
    /// The connection ends after this request.
    close: bool,
    client_idle: std::time::Duration,
}

impl<D: Downstream> Front for H1Front<'_, D> {
    fn addresses(&self) -> (Option<IpAddr>, Option<SocketAddr>) {
        self.conn.addresses()
    }

    fn identity(&self) -> (Option<Arc<str>>, Option<Arc<SslDigest>>) {
        self.conn.identity()
    }

    // This path takes GET and HEAD without a body only: never a gRPC call.
    fn grpc(&self) -> bool {
        false
    }

    fn open(
        &self,
        attempt: &mut Attempt,
        desk: Desk<'_>,
        table: Arc<RoutingTable>,
        started: Instant,
    ) -> Result<Opened, RouteError> {
        let (head, fields) = (self.head, &self.conn.fields);
        let target = self.target;
        let cookies = fields
            .iter()
            .filter(|f| head[f.name.clone()].eq_ignore_ascii_case(b"cookie"))
            .map(|f| &head[f.value.clone()]);
        let view = FastView {
            head,
            fields,
            method: self.req.method().as_bytes(),
            query: target.split_once('?').map(|(_, q)| q),
        };
        let asked = opening::Request {
            host: Some(&head[self.req.host.clone()]),
            path: target.split_once('?').map_or(target, |(p, _)| p),
            path_and_query: target,
            view: &view,
            cookies,
            grpc: false,
            grpc_timeout: None,
            content_length: None,
        };
        opening::open(attempt, table, desk, asked, started)
    }

    fn asked(&self) -> (&[u8], &str) {
        (&self.head[self.req.host.clone()], self.target)
    }

    async fn answer(
        &mut self,
        answer: &Answer<'_>,
        _body: Option<Bytes>,
        close: bool,
        tally: &mut Tally,
    ) -> bool {
        let body = if self.req.head { &[][..] } else { answer.body };
        let out = &mut self.conn.out;
        write_answer(out, answer, close || self.close);
        out.extend_from_slice(body);
        tally.status = answer.status;
        tally.bytes_out = body.len() as u64;
        let ok = write_client(self.stream, out, self.client_idle).await;
        tally.failed |= !ok;
        ok && !close
    }

    fn record(
        &self,
        recorder: &Recorder,
        attempt: &mut Attempt,
        started: Instant,
        tally: &Tally,
        strip: Option<&Strip>,
    ) {
        let (head, target) = (self.head, self.target);
        let path = target.split_once('?').map_or(target, |(p, _)| p);
        let host = &head[self.req.host.clone()];
        let mut fin = Finished::new(self.conn.client, D::PROTOCOL, host, self.req.method(), path);
        if recorder.logs() {
            fin.fields(|name| field_value(head, &self.conn.fields, name));
        }
        fin.status = tally.status;
        fin.upstream_status = tally.upstream_status;
        fin.failed = tally.failed;
        fin.bytes_out = tally.bytes_out;
        fin.forwarded = strip.map(|s| s.apply(target));
        recorder.finished(attempt, started, &fin);
    }
}

impl<D: Downstream> H1Client for H1Front<'_, D> {
    type Down = D;

    fn parts(&mut self) -> (&mut Connection, &mut D) {
        (self.conn, self.stream)
    }

    fn head_request(&self) -> bool {
        self.req.head
    }

    fn closing(&self) -> bool {
        self.close
    }

    fn bodiless(&self) -> bool {
        true
    }

    fn write_request(&mut self, strip: Option<&Strip>, edits: &Edits<'_>) -> bool {
        let target = self.target;
        let forwarded = strip.map(|s| s.apply(target));
        let conn = &mut *self.conn;
        build_request(
            &mut conn.out,
            self.head,
            self.req,
            &conn.fields,
            forwarded,
            edits,
        );
        true
    }
}

/// The value of the first of the request's `fields` named `name` (case ignored), in `head`.
fn field_value<'h>(head: &'h [u8], fields: &[Field], name: &str) -> Option<&'h [u8]> {
    fields
        .iter()
        .find(|f| head[f.name.clone()].eq_ignore_ascii_case(name.as_bytes()))
        .map(|f| &head[f.value.clone()])
}

/// The fast path's request as a Gateway route's conditions read it.
struct FastView<'a> {
    head: &'a Bytes,
    fields: &'a [Field],
    method: &'a [u8],
    query: Option<&'a str>,
}

impl RequestView for FastView<'_> {
    fn method(&self) -> &[u8] {
        self.method
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|f| self.head[f.name.clone()].eq_ignore_ascii_case(name.as_bytes()))
            .map(|f| &self.head[f.value.clone()])
    }

    fn cookie(&self, name: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .filter(|f| self.head[f.name.clone()].eq_ignore_ascii_case(b"cookie"))
            .find_map(|f| crate::table::sticky::find_cookie(&self.head[f.value.clone()], name))
    }

    fn query(&self) -> Option<&str> {
        self.query
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::AsyncWriteExt;
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    /// A connection that served a request, with the buffers that request grew.
    fn served_connection() -> Connection {
        Connection {
            client: None,
            client_ip: None,
            local: None,
            client_ip_text: None,
            fresh: false,
            buf: BytesMut::with_capacity(READ_SIZE),
            upstream_buf: BytesMut::with_capacity(READ_SIZE),
            out: Vec::with_capacity(READ_SIZE),
            head: Vec::new(),
            fields: Vec::with_capacity(16),
            ssl: None,
            server_timeout: Duration::from_secs(60),
        }
    }

    #[tokio::test]
    async fn an_idle_connection_gives_its_buffers_back_and_reads_on() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let l4 = pingora::protocols::l4::stream::Stream::from(server);
        let mut stream = GuardedStream::plain(Box::new(l4));
        let (_shutdown_tx, mut shutdown) = tokio::sync::watch::channel(false);
        let keep_alive = Duration::from_secs(60);
        let mut conn = served_connection();
        let held = conn.buffered();
        assert!(held >= 3 * READ_SIZE);

        // Busy: the next request within IDLE_AFTER is read into the buffers as they are.
        client.write_all(b"GET /a HTTP/1.1\r\n\r\n").await.unwrap();
        let n = wait_request(&mut stream, &mut conn, &mut shutdown, keep_alive).await;
        assert_eq!(n.unwrap().unwrap(), 19);
        assert_eq!(conn.buffered(), held, "kept while busy");
        conn.buf.clear();

        // Idle past IDLE_AFTER: given back; the request after is read into IDLE_READ bytes
        // of room, and the rest of a longer one on the next read.
        let started = Instant::now();
        let long = format!("GET /b HTTP/1.1\r\nx: {}\r\n\r\n", "y".repeat(2000));
        let long_len = long.len();
        let writer = tokio::spawn(async move {
            tokio::time::sleep(IDLE_AFTER + Duration::from_millis(300)).await;
            client.write_all(long.as_bytes()).await.unwrap();
            client
        });
        let n = wait_request(&mut stream, &mut conn, &mut shutdown, keep_alive).await;
        assert!(started.elapsed() >= IDLE_AFTER);
        let n = n.unwrap().unwrap();
        assert!(n > 0 && n <= IDLE_READ, "{n}");
        assert!(
            conn.buffered() < 2 * IDLE_READ,
            "{} bytes held after going idle",
            conn.buffered()
        );
        assert!(conn.upstream_buf.capacity() == 0 && conn.out.capacity() == 0);
        assert!(conn.head.capacity() == 0);
        let client = writer.await.unwrap();
        let mut total = n;
        while total < long_len {
            conn.buf.reserve(READ_SIZE);
            total += stream.read_buf(&mut conn.buf).await.unwrap();
        }
        assert_eq!(total, long_len);

        // The keep-alive timeout still ends the wait.
        let started = Instant::now();
        let mut conn = served_connection();
        let waited = wait_request(
            &mut stream,
            &mut conn,
            &mut shutdown,
            Duration::from_millis(200),
        )
        .await;
        assert!(waited.is_none() && started.elapsed() < IDLE_AFTER);
        drop(client);
    }
}

//! The fast path's HTTP/2 front: each stream the connection loop (`data::engine::http2`) offers
//! is read into the exchange's protocol-neutral request straight from its header (no HTTP/1
//! text is made of it) and driven by `data::exchange`, to an HTTP/1 backend (`h1_upstream`,
//! for streams without a body) or an HTTP/2 one (`relay`); a stream neither carries, or one
//! whose header Pingora would refuse or rewrite, is handed back untouched for Pingora.
//!
//! Pingora's HTTP/2 path costs several times HAProxy's CPU per request (a session, a task and
//! a channel per stream, an HTTP/1 upstream session with its own pool watcher, case-preserving
//! header maps). For an HTTP/1 backend the request's header is written once as the backend
//! gets it (`build_request_from_fields`: `Host` from `:authority`, split `cookie` fields
//! joined as RFC 9113 §8.2.3 says, declining what `parse_request` declines of an HTTP/1
//! client); the response, which that upstream makes as HTTP/1 bytes, is turned into HTTP/2
//! frames by `Frames`. switchyard's own answers are written as a header and one DATA frame.
//! It routes nothing itself and never holds a lock across an await.

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use http::HeaderValue;
use pingora::http::ResponseHeader;
use pingora::protocols::Digest;
use pingora::protocols::tls::SslDigest;

use crate::data::engine::client_stream::ClientStream;
use crate::data::engine::fast::{Connection, Downstream, FastPath};
use crate::data::engine::h1_upstream::{H1Client, Http1};
use crate::data::engine::relay::{H2Client, Http2, ending_in};
use crate::data::exchange::{self, Driven, Front, Opening, Tally};
use crate::data::headers::{PingoraView, apply, check_request, exchange_request, grpc_of, host_of};
use crate::data::record::{Finished, Recorder};
use crate::data::wire::fields::parse_length;
use crate::data::wire::h1::chunked::Chunks;
use crate::data::wire::h1::request::{build_request_from_fields, plain_target};
use crate::data::wire::h1::response::MAX_RESPONSE_HEADERS;
use crate::decide::attempt::{Attempt, RouteError};
use crate::decide::edits::Edits;
use crate::decide::error_page::Answer;
use crate::decide::exchange::{self as opening, Desk, Opened};
use crate::decide::grpc::Ending;
use crate::decide::target::{normalize_path, valid_host};
use crate::table::RoutingTable;
use crate::table::matcher::Strip;

impl FastPath {
    /// Serves one HTTP/2 stream if this path carries it; otherwise hands it back untouched
    /// (nothing written) for Pingora. Small itself (a stream's task holds it unboxed): the
    /// exchange is boxed, so a stream carries only the state of the upstream it takes.
    pub async fn serve_stream(
        &self,
        session: Box<ClientStream>,
        digest: &Digest,
    ) -> Option<Box<ClientStream>> {
        let mut front = match H2Front::new(self, session, digest) {
            Ok(front) => front,
            Err(session) => return Some(session),
        };
        let driven = Box::pin(async {
            match exchange::open(&self.proxy, &mut front).await {
                Opening::Ended(driven) => driven,
                Opening::Proxy(x) if x.attempt().backend_protocol().http2() => {
                    x.carry(&mut front, &Http2(self)).await
                }
                Opening::Proxy(x) => x.carry(&mut front, &Http1(self)).await,
            }
        })
        .await;
        match driven {
            Driven::Declined => Some(front.frames.session),
            Driven::Done { .. } => None,
        }
    }
}

/// One HTTP/2 stream as the exchange's front.
pub(super) struct H2Front {
    /// The stream, written through as the response comes.
    pub(super) frames: Frames,
    /// The client's addresses, and the buffers of an exchange with an HTTP/1 backend.
    conn: Connection,
    grpc: bool,
    client_idle: std::time::Duration,
}

impl H2Front {
    /// The front of a stream this path may serve; the stream back when its header is one
    /// Pingora would refuse (its answer is its own) or rewrite (a path it normalises).
    fn new(
        fast: &FastPath,
        session: Box<ClientStream>,
        digest: &Digest,
    ) -> Result<H2Front, Box<ClientStream>> {
        let req = session.req_header();
        if check_request(req, || session.raw_h1_header()).is_err()
            || req.uri.scheme().is_none()
            || req.uri.authority().is_none()
            || matches!(normalize_path(req.uri.path()), Cow::Owned(_))
        {
            return Err(session);
        }
        let grpc = grpc_of(req);
        let head_request = req.method == http::Method::HEAD;
        Ok(H2Front {
            conn: fast.connection_of(digest.socket_digest.as_deref(), digest.ssl_digest.clone()),
            grpc,
            client_idle: fast.proxy.timeouts.client_idle,
            frames: Frames {
                session,
                head_request,
                state: State::Head,
            },
        })
    }

    fn path_and_query(&self) -> &str {
        let req = self.frames.session.req_header();
        req.uri.path_and_query().map_or("/", |pq| pq.as_str())
    }
}

impl Front for H2Front {
    fn addresses(&self) -> (Option<IpAddr>, Option<SocketAddr>) {
        self.conn.addresses()
    }

    fn identity(&self) -> (Option<Arc<str>>, Option<Arc<SslDigest>>) {
        self.conn.identity()
    }

    fn grpc(&self) -> bool {
        self.grpc
    }

    /// A stream whose body is still coming is answered by Pingora's engine, which reads it.
    fn may_answer(&self) -> bool {
        self.frames.session.is_body_done()
    }

    fn open(
        &self,
        attempt: &mut Attempt,
        desk: Desk<'_>,
        table: Arc<RoutingTable>,
        started: Instant,
    ) -> Result<Opened, RouteError> {
        let req = self.frames.session.req_header();
        let view = PingoraView(req);
        let asked = exchange_request(req, &view, req.uri.path(), self.path_and_query(), self.grpc);
        opening::open(attempt, table, desk, asked, started)
    }

    fn asked(&self) -> (&[u8], &str) {
        let req = self.frames.session.req_header();
        (host_of(req).unwrap_or_default(), self.path_and_query())
    }

    async fn answer(
        &mut self,
        answer: &Answer<'_>,
        body: Option<Bytes>,
        _close: bool,
        tally: &mut Tally,
    ) -> bool {
        let Ok(mut header) =
            ResponseHeader::build(answer.status, Some(answer.fields.iter().count()))
        else {
            return false;
        };
        if apply(&mut header, &answer.fields).is_err() {
            return false;
        }
        if self.grpc {
            tally.grpc = ending_in(&header);
        }
        let body = if self.frames.head_request {
            Bytes::new()
        } else {
            body.unwrap_or_else(|| Bytes::copy_from_slice(answer.body))
        };
        tally.status = answer.status;
        let session = &mut self.frames.session;
        session.set_write_timeout(self.client_idle);
        let end = body.is_empty();
        if session
            .write_response_header(Box::new(header), end)
            .is_err()
        {
            tally.status = 0;
            tally.failed = true;
            return false;
        }
        if !end && session.write_body(body, true).await.is_err() {
            tally.failed = true;
            return false;
        }
        true
    }

    fn record(
        &self,
        recorder: &Recorder,
        attempt: &mut Attempt,
        started: Instant,
        tally: &Tally,
        strip: Option<&Strip>,
    ) {
        let session = &self.frames.session;
        let req = session.req_header();
        let mut fin = Finished {
            status: tally.status,
            bytes_in: session.body_bytes_read() as u64,
            bytes_out: session.body_bytes_sent() as u64,
            failed: tally.failed,
            grpc: self.grpc.then(|| tally.grpc.unwrap_or(Ending::NONE)),
            upstream_status: tally.upstream_status,
            forwarded: strip.map(|s| s.apply(self.path_and_query())),
            // The client's stream: this front serves HTTP/2 clients only.
            ..Finished::new(
                self.conn.client,
                "HTTP/2.0",
                host_of(req).unwrap_or_default(),
                req.method.as_str(),
                req.uri.path(),
            )
        };
        if recorder.logs() {
            fin.fields(|name| req.headers.get(name).map(HeaderValue::as_bytes));
        }
        recorder.finished(attempt, started, &fin);
    }
}

impl H2Client for H2Front {
    fn session(&mut self) -> &mut ClientStream {
        &mut self.frames.session
    }
}

impl H1Client for H2Front {
    type Down = Frames;

    fn parts(&mut self) -> (&mut Connection, &mut Frames) {
        (&mut self.conn, &mut self.frames)
    }

    fn head_request(&self) -> bool {
        self.frames.head_request
    }

    // An HTTP/2 stream never closes its connection: the other streams go on.
    fn closing(&self) -> bool {
        false
    }

    fn bodiless(&self) -> bool {
        let session = &self.frames.session;
        let method = &session.req_header().method;
        session.is_body_done() && (method == http::Method::GET || method == http::Method::HEAD)
    }

    fn write_request(&mut self, strip: Option<&Strip>, edits: &Edits<'_>) -> bool {
        let req = self.frames.session.req_header();
        let Some(pq) = req.uri.path_and_query().map(|pq| pq.as_str()) else {
            return false;
        };
        if !plain_target(pq) || !host_of(req).is_some_and(valid_host) {
            return false;
        }
        let target = strip.map_or(("", pq), |s| s.apply(pq));
        build_request_from_fields(
            &mut self.conn.out,
            req.method.as_str(),
            target,
            req.uri.authority().map(|a| a.as_str()),
            &req.headers,
            edits,
        )
    }
}

/// One HTTP/2 stream as the fast path's client: the HTTP/1 response bytes it is given become
/// a response header and DATA frames, the last one ending the stream.
pub(super) struct Frames {
    session: Box<ClientStream>,
    head_request: bool,
    state: State,
}

/// What `Frames` expects next.
enum State {
    /// The response header (informational ones are dropped: Pingora's HTTP/2 session cannot
    /// send them either).
    Head,
    /// Body bytes left of a `Content-Length` body.
    Length(u64),
    /// A chunked body (the fast path's client framing for chunked and close-delimited ones).
    Chunked(Chunks),
    /// The stream has ended.
    Done,
}

impl Downstream for Frames {
    const PROTOCOL: &'static str = "HTTP/2.0";

    async fn send(&mut self, bytes: &[u8]) -> bool {
        let mut body = bytes;
        if matches!(self.state, State::Head) {
            match self.head(bytes) {
                Ok(Some(n)) => body = &bytes[n..],
                Ok(None) => return true,
                Err(()) => return false,
            }
        }
        match &mut self.state {
            State::Head | State::Done => true,
            State::Length(left) => {
                let n = usize::try_from(*left).map_or(body.len(), |l| l.min(body.len()));
                *left -= n as u64;
                let end = *left == 0;
                if end {
                    self.state = State::Done;
                } else if n == 0 {
                    return true;
                }
                self.data(Bytes::copy_from_slice(&body[..n]), end).await
            }
            State::Chunked(chunks) => {
                let mut data = BytesMut::new();
                let end = match chunks.feed_data(body, |r| data.extend_from_slice(&body[r])) {
                    Ok(end) => end.is_some(),
                    Err(_) => return false,
                };
                if end {
                    self.state = State::Done;
                } else if data.is_empty() {
                    return true;
                }
                self.data(data.freeze(), end).await
            }
        }
    }
}

impl Frames {
    /// Sends the response header at the start of `bytes`; `Some(n)`: its length, `None`: an
    /// informational head, dropped.
    fn head(&mut self, bytes: &[u8]) -> Result<Option<usize>, ()> {
        let mut fields = [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
        let mut parsed = httparse::Response::new(&mut fields);
        let Ok(httparse::Status::Complete(len)) = parsed.parse(bytes) else {
            return Err(());
        };
        let status = parsed.code.ok_or(())?;
        if (100..200).contains(&status) {
            return Ok(None);
        }
        let mut header =
            ResponseHeader::build_no_case(status, Some(parsed.headers.len())).map_err(|_| ())?;
        let mut state = State::Length(0);
        for f in parsed.headers.iter() {
            if f.name.eq_ignore_ascii_case("transfer-encoding") {
                state = State::Chunked(Chunks::default());
            } else if f.name.eq_ignore_ascii_case("content-length") {
                state = State::Length(parse_length(f.value).ok_or(())?);
            }
            // The connection's own fields go (Pingora's `write_response_header` drops them too).
            let name = http::HeaderName::from_bytes(f.name.as_bytes()).map_err(|_| ())?;
            header.append_header(name, f.value).map_err(|_| ())?;
        }
        let bodiless = self.head_request || status == 204 || status == 304;
        if bodiless || matches!(state, State::Length(0)) {
            state = State::Done;
        }
        let end = matches!(state, State::Done);
        self.session
            .write_response_header(Box::new(header), end)
            .map_err(|_| ())?;
        self.state = state;
        Ok(Some(len))
    }

    async fn data(&mut self, data: Bytes, end: bool) -> bool {
        self.session.write_body(data, end).await.is_ok()
    }
}

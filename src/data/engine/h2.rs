//! The fast path for HTTP/2 clients: each plain `GET` or `HEAD` stream without a body that
//! the connection loop (`data::engine::http2`) offers is served by the HTTP/1 fast path's own exchange
//! with the backend (its pool, its `decide` calls, its recording); a stream whose route leads
//! to an HTTP/2 backend goes to `relay`; any other stream is handed back untouched for
//! Pingora's proxy.
//!
//! Pingora's HTTP/2 path costs several times HAProxy's CPU per request (a session, a task and a
//! channel per stream, an HTTP/1 upstream session with its own pool watcher, case-preserving
//! header maps). A taken stream's request is written once as the HTTP/1 header the backend gets
//! (`h1_head`; HTTP/2's split `cookie` fields joined as RFC 9113 §8.2.3 says) and checked by the
//! same `parse_request` as an HTTP/1 client's, so the two engines cannot drift on what they
//! take; the response, which the fast path makes as HTTP/1 bytes, is turned into HTTP/2 frames
//! by `Reply`. It routes nothing itself and never holds a lock across an await.

use bytes::{Bytes, BytesMut};
use pingora::http::ResponseHeader;
use pingora::protocols::Digest;

use crate::data::engine::client_stream::ClientStream;
use crate::data::engine::h1::{Downstream, FastPath};
use crate::data::wire::fields::parse_length;
use crate::data::wire::h1::chunked::Chunks;
use crate::data::wire::h1::request::{Parse, parse_request};
use crate::data::wire::h1::response::MAX_RESPONSE_HEADERS;

impl FastPath {
    /// Serves one HTTP/2 stream if it is one for this path; otherwise hands it back untouched
    /// (nothing written) for Pingora. Small itself (a stream's task holds it unboxed): each
    /// way of serving is boxed, so a stream carries only the state of the one it takes.
    pub async fn serve_stream(
        &self,
        session: Box<ClientStream>,
        digest: &Digest,
    ) -> Option<Box<ClientStream>> {
        let session = if session.is_body_done() {
            Box::pin(self.serve_without_body(session, digest)).await?
        } else {
            session
        };
        Box::pin(self.relay_h2(session, digest)).await
    }

    /// A stream without a body through the HTTP/1 fast path's exchange; handed back untouched
    /// if that path does not take it.
    async fn serve_without_body(
        &self,
        mut session: Box<ClientStream>,
        digest: &Digest,
    ) -> Option<Box<ClientStream>> {
        let mut head = Vec::with_capacity(512);
        if h1_head(&session, &mut head) {
            let head = Bytes::from(head);
            let mut conn =
                self.connection_of(digest.socket_digest.as_deref(), digest.ssl_digest.clone());
            if let Parse::Request(req) = parse_request(&head, &mut conn.fields) {
                let mut reply = Reply {
                    session: &mut session,
                    head_request: req.head,
                    state: State::Head,
                };
                // An HTTP/2 stream never closes its connection: the other streams go on.
                // A response cut short leaves the stream open: dropping it resets it
                // (RST_STREAM).
                if self
                    .proxy_request(&mut reply, &mut conn, &head, &req, false)
                    .await
                    .is_some()
                {
                    return None;
                }
                // Declined once routed (an HTTP/2 backend, Gateway filters): nothing was
                // written.
            }
        }
        Some(session)
    }
}

/// Writes the HTTP/1 request header of an HTTP/2 stream's request into `out`: the request
/// line, `Host` from `:authority`, the fields as they came, split `cookie` fields joined into
/// one. False for a request this path does not take (a method other than `GET` and `HEAD`, no
/// origin-form path, a field that cannot be written as an HTTP/1 line).
fn h1_head(session: &ClientStream, out: &mut Vec<u8>) -> bool {
    let req = session.req_header();
    let method = req.method.as_str();
    if method != "GET" && method != "HEAD" {
        return false;
    }
    let Some(target) = req.uri.path_and_query() else {
        return false;
    };
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_str().as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    // `:authority` is the host (RFC 9113 §8.3.1); Pingora refused a `host` that disagrees.
    let authority = req.uri.authority();
    if let Some(a) = authority {
        out.extend_from_slice(b"host: ");
        out.extend_from_slice(a.as_str().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let mut cookies = 0;
    for (name, value) in req.headers.iter() {
        if name == http::header::COOKIE {
            cookies += 1;
            continue;
        }
        if authority.is_some() && name == http::header::HOST {
            continue;
        }
        let value = value.as_bytes();
        if value.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0) {
            return false;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    if cookies > 0 {
        out.extend_from_slice(b"cookie: ");
        for (i, value) in req.headers.get_all(http::header::COOKIE).iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(b"; ");
            }
            out.extend_from_slice(value.as_bytes());
        }
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    true
}

/// One HTTP/2 stream as the fast path's client: the HTTP/1 response bytes it is given become
/// a response header and DATA frames, the last one ending the stream.
struct Reply<'a> {
    session: &'a mut ClientStream,
    head_request: bool,
    state: State,
}

/// What `Reply` expects next.
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

impl Downstream for Reply<'_> {
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

impl Reply<'_> {
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

//! The exchange's HTTP/2 upstream, the relay: a stream from an HTTP/2 client whose route leads
//! to an `h2c`/`grpc` backend, or over TLS to an `h2`/`grpcs` one, is carried over the fast
//! path's HTTP/2 connections (`h2_pool`; over TLS made by the fast path's handshake, so with the
//! bundle, client certificate, verification and session resumption `tls::BackendTls` decides,
//! as for `https` backends), frame by frame — request header, body, trailers and end; response
//! header, body and trailers; resets both ways — instead of through Pingora's proxy (a session,
//! a task and channels per stream). The sequence (route, answers, tries, edits, record) is the
//! driver's (`data::exchange`); this module only carries one try (`try_h2`) and relays one
//! response on the HTTP/2 wire: the request's header block coded once from the client's fields
//! with the edits carried out as they pass (`edits::Seen`), the call's deadline
//! (`grpc::timeout`, `grpc::blame`) on every wait, a broken gRPC call ended with its status in
//! trailers. A route with Gateway filters or a body limit is not taken (Pingora's). It never
//! holds a lock across an await.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Uri};
use pingora::http::{RequestHeader, ResponseHeader};
use tokio::time::Sleep;

use crate::data::engine::client_stream::{ClientGone, ClientStream};
use crate::data::engine::fast::FastPath;
use crate::data::exchange::{Front, Tally, TryFailed, Upstream};
use crate::data::headers::{GRPC_STATUS_NAME, apply, grpc_trailers, keep_origin, stripped_target};
use crate::data::tls::TlsChoice;
use crate::data::upstream::h2_pool::{Lease, PoolError};
use crate::data::upstream::kept_body::KeptBody;
use crate::data::upstream::pool::Key;
use crate::data::wire::h2::conn::{self, RequestBlock, Stream};
use crate::decide::attempt::{Attempt, BodyKept, Sent};
use crate::decide::cause::Cause;
use crate::decide::edits::{Edits, Seen, Sink, response_edits};
use crate::decide::error_page::failure_answer;
use crate::decide::exchange::Opened;
use crate::decide::grpc::{self, Ending};
use crate::table::matcher::Strip;

/// One stream's state across its tries.
pub(crate) struct Call {
    /// The request's header block, coded once for every try.
    request: RequestBlock,
    grpc: bool,
    /// The call's deadline (`grpc-timeout`, a Gateway rule's request timeout), from when the
    /// stream arrived.
    deadline: Option<Instant>,
    /// The wait for each thing from the endpoint (`--server-timeout`, or the route's).
    server_timeout: Duration,
    /// The wait for each write of the request to the endpoint (`proxy-send-timeout`, else
    /// `server_timeout`).
    send_timeout: Duration,
    /// The client's request body has ended (or there was none).
    body_done: bool,
    /// Some of the request body (or its trailers) went to an endpoint.
    body_sent: bool,
    /// What went of it, for a further try.
    kept: KeptBody,
    /// The request's method is idempotent (`GET`, `PUT`, ...).
    idempotent: bool,
    /// The backend's stream of the response being relayed, reset if it breaks.
    relaying: Option<Stream>,
    /// The one timer of the call's waits on the endpoint, moved to each wait's limit
    /// (`timer`, `timer_at`). A timer made for each wait was registered with tokio's timer
    /// wheel and taken out again whenever the wait was not over at once; this one is
    /// registered once, and a later limit only moves its expiry.
    timer: Pin<Box<Sleep>>,
}

impl Call {
    /// When the current wait on the endpoint gives up: `server_timeout` from now, or the
    /// deadline if sooner.
    fn limit(&self) -> tokio::time::Instant {
        self.limit_of(self.server_timeout)
    }

    /// `wait` from now, or the deadline if sooner.
    fn limit_of(&self, wait: Duration) -> tokio::time::Instant {
        let now = Instant::now();
        let at = self.deadline.map_or(now + wait, |d| d.min(now + wait));
        tokio::time::Instant::from_std(at)
    }

    fn blame(&self, cause: Cause) -> Cause {
        grpc::blame(cause, self.deadline, Instant::now())
    }

    /// The call's timer, set to go off at `at`.
    fn timer_at(&mut self, at: tokio::time::Instant) -> Pin<&mut Sleep> {
        self.timer.as_mut().reset(at);
        self.timer.as_mut()
    }

    /// The call's timer, set to go off at the current wait's limit (`limit`).
    fn timer(&mut self) -> Pin<&mut Sleep> {
        let at = self.limit();
        self.timer_at(at)
    }

    /// The call's timer, set for one write of the request (`send_timeout`): a backend that
    /// stops granting flow-control window is given up on then.
    fn send_timer(&mut self) -> Pin<&mut Sleep> {
        let at = self.limit_of(self.send_timeout);
        self.timer_at(at)
    }
}

/// What `wait` gives, or `None` if `timer` goes off first (it is not polled, so not
/// registered, when `wait` is ready at once).
async fn within<F: Future>(timer: Pin<&mut Sleep>, wait: F) -> Option<F::Output> {
    tokio::select! {
        biased;
        out = wait => Some(out),
        () = timer => None,
    }
}

/// A further try's request body: what was kept of it (`KeptBody`), then, if the client has
/// ended it, its end with the trailers if it sent any (the session keeps them).
async fn resend_body(
    session: &mut ClientStream,
    call: &mut Call,
    to_backend: &Stream,
) -> Result<(), Cause> {
    let trailers = if call.body_done {
        session
            .read_request_trailers()
            .await
            .map_err(|_| Cause::ClientGone)?
    } else {
        None
    };
    let body = call.kept.body();
    let end = call.body_done && trailers.is_none();
    if !body.is_empty() || end {
        send(to_backend, body, end, call.send_timer()).await?;
    }
    match trailers {
        Some(trailers) => to_backend
            .send_trailers(&trailers)
            .map_err(|_| Cause::UpstreamClosed),
        None => Ok(()),
    }
}

/// Sends `data` (the body's end with it if `end`) on the backend's stream, waiting for its
/// flow-control window until `timer` goes off (the backend then timed out: it did not take
/// the body in time).
async fn send(
    to_backend: &Stream,
    data: Bytes,
    end: bool,
    timer: Pin<&mut Sleep>,
) -> Result<(), Cause> {
    match within(timer, to_backend.send_data(data, end)).await {
        Some(Ok(())) => Ok(()),
        Some(Err(_)) => Err(Cause::UpstreamClosed),
        None => Err(Cause::UpstreamTimedOut),
    }
}

/// Why a try ended before its response header.
struct Broken {
    cause: Cause,
    /// The backend did not process the stream: it was never sent, or the backend refused it
    /// (`REFUSED_STREAM`, or past a GOAWAY's last stream; RFC 9113 §8.7).
    unprocessed: bool,
}

/// A front whose request and response an HTTP/2 backend's stream carries frame by frame: an
/// HTTP/2 client's stream (`h2::H2Front`).
pub(crate) trait H2Client: Front {
    /// The client's stream.
    fn session(&mut self) -> &mut ClientStream;
}

/// The HTTP/2 upstream of a fast path: the relay (see the module).
pub(crate) struct Http2<'f>(pub(crate) &'f FastPath);

impl<F: H2Client> Upstream<F> for Http2<'_> {
    type Call = Call;
    /// The response's header, the backend's stream, and the lease that keeps the backend
    /// connection counted busy until the stream ends.
    type Answered = (http::Response<()>, Stream, Lease);

    fn takes(&self, _front: &F, attempt: &Attempt) -> bool {
        // Gateway filters and a body limit are Pingora's to carry out.
        attempt.backend_protocol().http2() && !attempt.rewrites() && attempt.body_allowed(u64::MAX)
    }

    fn prepare(
        &self,
        front: &mut F,
        attempt: &Attempt,
        opened: &Opened,
        strip: Option<&Strip>,
        edits: &Edits<'_>,
        started: Instant,
    ) -> Option<Call> {
        let proxy = &self.0.proxy;
        let session = front.session();
        let req = session.req_header();
        // The target the backend gets: the route's prefix stripped or replaced, as on
        // Pingora's path.
        let rewrite = match strip {
            Some(strip) => {
                let pq = req.uri.path_and_query().map_or("/", |pq| pq.as_str());
                let target = stripped_target(strip, pq).ok()?;
                Some(keep_origin(&req.uri, target))
            }
            None => None,
        };
        let request = request_block(req, rewrite.as_ref(), edits);
        let idempotent = req.method.is_idempotent();
        let body_done = session.is_body_done();
        session.set_write_timeout(proxy.timeouts.client_idle);
        Some(Call {
            request,
            grpc: front.grpc(),
            deadline: opened.deadline,
            server_timeout: attempt.server_timeout(proxy.timeouts.server_idle),
            send_timeout: attempt.send_timeout(proxy.timeouts.server_idle),
            body_done,
            body_sent: false,
            kept: KeptBody::default(),
            idempotent,
            relaying: None,
            // Set before each wait (`Call::timer`); made here, it is not registered until
            // one waits on it.
            timer: Box::pin(tokio::time::sleep_until(started.into())),
        })
    }

    /// One try: a stream to `addr` (over TLS with `tls`), the request's header, and the
    /// request body as the client sends it until the response header comes.
    async fn try_once(
        &self,
        front: &mut F,
        call: &mut Self::Call,
        attempt: &mut Attempt,
        addr: SocketAddr,
        tls: Option<(&TlsChoice, &str)>,
    ) -> Result<Self::Answered, TryFailed> {
        let fast = self.0;
        let broken = match fast.try_h2(front.session(), call, attempt, addr, tls).await {
            Ok(answered) => return Ok(answered),
            Err(broken) => broken,
        };
        // Every body is kept (up to 64 KiB), as on Pingora's path: an idempotent request's
        // may go again, and so may one the backend refused unprocessed.
        let body = if call.kept.whole() {
            BodyKept::All
        } else {
            BodyKept::Partly
        };
        Err(TryFailed {
            cause: call.blame(broken.cause),
            sent: Sent {
                idempotent: call.idempotent,
                unprocessed: broken.unprocessed,
                body,
                // A try fails here before its response header.
                answered: false,
            },
        })
    }

    fn status(&self, (resp, _, _): &Self::Answered) -> u16 {
        resp.status().as_u16()
    }

    fn sent(&self, call: &Self::Call, _answered: &Self::Answered) -> Sent {
        Sent {
            idempotent: call.idempotent,
            unprocessed: false,
            body: if call.kept.whole() {
                BodyKept::All
            } else {
                BodyKept::Partly
            },
            // Interim responses are passed over, never relayed.
            answered: false,
        }
    }

    /// The backend's stream is reset (its response is not read); the connection stays, and
    /// its lease ends with the stream.
    fn discard(&self, _call: &mut Self::Call, (_, stream, lease): Self::Answered) {
        stream.send_reset(h2::Reason::CANCEL);
        drop((stream, lease));
    }

    async fn relay(
        &self,
        front: &mut F,
        call: &mut Self::Call,
        (resp, stream, lease): Self::Answered,
        attempt: &mut Attempt,
        tally: &mut Tally,
    ) -> Result<bool, Cause> {
        let fast = self.0;
        let (parts, ()) = resp.into_parts();
        let mut header = ResponseHeader::from(parts);
        let edits = response_edits(&fast.proxy.fwd, attempt.set_cookie());
        if apply(&mut header, &edits).is_err() {
            stream.send_reset(h2::Reason::CANCEL);
            let answer = failure_answer(Cause::Internal.status().unwrap_or(500), &fast.proxy.fwd);
            front.answer(&answer, None, true, tally).await;
            tally.failed = true;
            return Ok(false);
        }
        tally.status = header.status.as_u16();
        tally.upstream_status = Some(tally.status);
        if call.grpc {
            // A trailers-only answer has the status in its header.
            tally.grpc = ending_in(&header);
        }
        let end = stream.is_end_stream();
        let session = front.session();
        if session
            .write_response_header(Box::new(header), end)
            .is_err()
        {
            stream.send_reset(h2::Reason::CANCEL);
            tally.failed = true;
            return Ok(false);
        }
        if end {
            return Ok(true);
        }
        match fast
            .relay_response(session, call, &lease, &stream, tally)
            .await
        {
            Ok(()) => Ok(true),
            Err(cause) => {
                call.relaying = Some(stream);
                Err(call.blame(cause))
            }
        }
    }

    fn broken(&self, front: &mut F, call: &mut Call, cause: Cause, tally: &mut Tally) {
        if let Some(stream) = call.relaying.take() {
            stream.send_reset(h2::Reason::CANCEL);
        }
        if cause == Cause::ClientGone {
            return;
        }
        let session = front.session();
        match cause.status() {
            // A gRPC call broken mid-stream still ends as gRPC says (as on Pingora's path):
            // its status in trailers after the messages already sent.
            Some(code) if call.grpc => {
                let (trailers, ending) = grpc_trailers(code);
                if session.write_trailers(trailers).is_ok() {
                    tally.grpc = Some(ending);
                }
            }
            _ => session.shutdown_with_reason(h2::Reason::INTERNAL_ERROR),
        }
    }
}

impl FastPath {
    /// One try's wire: a stream to `addr` (over TLS with `tls`), the call's request header,
    /// the request body as the client sends it until the response header comes.
    async fn try_h2(
        &self,
        session: &mut ClientStream,
        call: &mut Call,
        attempt: &mut Attempt,
        addr: SocketAddr,
        tls: Option<(&TlsChoice, &str)>,
    ) -> Result<(http::Response<()>, Stream, Lease), Broken> {
        let connect_timeout = attempt.connect_timeout(self.proxy.timeouts.connect);
        let connect_timeout = match call.deadline {
            Some(d) => connect_timeout.min(d.saturating_duration_since(Instant::now())),
            None => connect_timeout,
        };
        let (key, sni) = match tls {
            None => (Key::plain(addr), ""),
            Some((choice, sni)) => (Key::tls(addr, choice.key(), sni), sni),
        };
        let connecting: &Attempt = attempt;
        let got = self
            .h2_pool
            .stream(
                key,
                sni,
                self.proxy.timeouts.server_idle,
                connect_timeout,
                || async move {
                    let connect = self.connect(addr, tls, connecting);
                    match tokio::time::timeout(connect_timeout, connect).await {
                        Ok(r) => r,
                        Err(_) => Err(Cause::ConnectTimedOut),
                    }
                },
            )
            .await;
        let (send, lease, reused) = match got {
            Ok(x) => x,
            Err(PoolError::Connect(cause)) => {
                return Err(Broken {
                    cause,
                    unprocessed: true,
                });
            }
        };
        attempt.connected(reused, Instant::now());
        attempt.request_sent(Instant::now());
        let limit = call.limit();
        let end = call.body_done && !call.body_sent;
        call.timer.as_mut().reset(limit);
        let sent = within(call.timer.as_mut(), send.send_request(&call.request, end)).await;
        let stream = match sent {
            Some(Ok(stream)) => stream,
            Some(Err(_)) => {
                lease.retire();
                return Err(Broken {
                    cause: Cause::UpstreamClosed,
                    unprocessed: true,
                });
            }
            None => {
                return Err(Broken {
                    cause: Cause::UpstreamTimedOut,
                    unprocessed: true,
                });
            }
        };
        if call.body_sent {
            // Sent again (`Sent::replayable` allowed it: all of the body that went is kept).
            if let Err(cause) = resend_body(session, call, &stream).await {
                return Err(Broken {
                    cause,
                    unprocessed: false,
                });
            }
        }
        loop {
            tokio::select! {
                r = stream.response() => {
                    return match r {
                        Ok(resp) => Ok((resp, stream, lease)),
                        Err(e) => {
                            if e.ends_connection() {
                                lease.retire();
                            }
                            Err(upstream_broken(&e))
                        }
                    };
                }
                chunk = session.read_body_or_idle(call.body_done) => {
                    let last = session.is_body_done();
                    let forwarded = self.forward_body(session, chunk, last, call, &stream);
                    if let Err(cause) = forwarded.await {
                        return Err(Broken { cause, unprocessed: false });
                    }
                }
                () = call.timer_at(limit) => {
                    stream.send_reset(h2::Reason::CANCEL);
                    return Err(Broken { cause: Cause::UpstreamTimedOut, unprocessed: false });
                }
            }
        }
    }

    /// Forwards what the client sent next (`chunk`, from `session`'s `read_body_or_idle`;
    /// `last`: the client's body ended with it) to the backend: the body, then its end with the
    /// client's trailers if it sent any.
    async fn forward_body(
        &self,
        session: &mut ClientStream,
        chunk: Result<Option<Bytes>, ClientGone>,
        last: bool,
        call: &mut Call,
        to_backend: &Stream,
    ) -> Result<(), Cause> {
        match chunk {
            Ok(Some(data)) => {
                call.body_sent = true;
                call.body_done = last;
                call.kept.keep(&data);
                send(to_backend, data, last, call.send_timer()).await
            }
            Ok(None) => {
                call.body_done = true;
                // The body's end: the trailers, if the client sent any, are already in hand.
                match session.read_request_trailers().await {
                    Ok(Some(trailers)) => {
                        // The session keeps them: a further try sends them again.
                        call.body_sent = true;
                        to_backend
                            .send_trailers(&trailers)
                            .map_err(|_| Cause::UpstreamClosed)
                    }
                    Ok(None) => send(to_backend, Bytes::new(), true, call.send_timer()).await,
                    Err(_) => {
                        to_backend.send_reset(h2::Reason::CANCEL);
                        Err(Cause::ClientGone)
                    }
                }
            }
            // The client reset the stream or went away: so does the backend's stream.
            Err(_) => {
                to_backend.send_reset(h2::Reason::CANCEL);
                Err(Cause::ClientGone)
            }
        }
    }

    /// Relays the response body and trailers, and what is left of the request body.
    async fn relay_response(
        &self,
        session: &mut ClientStream,
        call: &mut Call,
        lease: &Lease,
        stream: &Stream,
        tally: &mut Tally,
    ) -> Result<(), Cause> {
        loop {
            tokio::select! {
                data = stream.data() => match data {
                    Some(Ok(data)) => {
                        let n = data.len();
                        session
                            .write_body(data, false)
                            .await
                            .map_err(|_| Cause::ClientGone)?;
                        // The backend may send more once the client took this.
                        stream.release_capacity(n);
                    }
                    Some(Err(e)) => {
                        if e.ends_connection() {
                            lease.retire();
                        }
                        return Err(Cause::ResponseTruncated);
                    }
                    None => break,
                },
                chunk = session.read_body_or_idle(call.body_done) => {
                    let last = session.is_body_done();
                    self.forward_body(session, chunk, last, call, stream).await?;
                }
                () = call.timer() => return Err(Cause::UpstreamTimedOut),
            }
        }
        let trailers = within(call.timer(), stream.trailers()).await;
        match trailers {
            Some(Ok(Some(trailers))) => {
                if call.grpc {
                    tally.grpc = Some(Ending::of(
                        trailers.get(&GRPC_STATUS_NAME).map(HeaderValue::as_bytes),
                    ));
                }
                session
                    .write_trailers(trailers)
                    .map_err(|_| Cause::ClientGone)
            }
            Some(Ok(None)) => session.finish().map_err(|_| Cause::ClientGone),
            Some(Err(e)) => {
                if e.ends_connection() {
                    lease.retire();
                }
                Err(Cause::ResponseTruncated)
            }
            None => Err(Cause::UpstreamTimedOut),
        }
    }
}

/// The request's header block for the backend: the client's method, the target (the route's
/// rewrite, or the client's), the client's fields with `edits` carried out as they pass
/// (`Seen`), coded straight from the client's header: no copy of its map is made and edited.
fn request_block(client: &RequestHeader, target: Option<&Uri>, edits: &Edits<'_>) -> RequestBlock {
    let uri = target.unwrap_or(&client.uri);
    let mut block = RequestBlock::new(
        client.method.as_str().as_bytes(),
        uri.scheme_str().unwrap_or("http").as_bytes(),
        uri.path_and_query()
            .map_or("/", |pq| pq.as_str())
            .as_bytes(),
        uri.authority().map(|a| a.as_str().as_bytes()),
    );
    let mut seen = Seen::default();
    for (name, value) in &client.headers {
        let name = name.as_str().as_bytes();
        let keep = match edits.touching(name) {
            None => true,
            Some(edit) => seen.field(edit, value.as_bytes()),
        };
        if keep {
            block.field(name, value.as_bytes(), value.is_sensitive());
        }
    }
    seen.additions(edits, &mut block);
    block
}

impl Sink for RequestBlock {
    fn add(&mut self, name: &'static str, value: impl FnOnce(&mut Vec<u8>)) {
        self.field_written(name.as_bytes(), value);
    }
}

/// How a gRPC answer whose header carries its status ("trailers-only") ended; `None` when
/// the status is left to the trailers.
pub(super) fn ending_in(header: &ResponseHeader) -> Option<Ending> {
    header
        .headers
        .get(&GRPC_STATUS_NAME)
        .map(|v| Ending::of(Some(v.as_bytes())))
}

/// What a stream error before the response header means: a closed connection, and whether
/// the backend processed the stream (`Error::unprocessed`, read as `h2_unprocessed` reads an
/// `h2` error on Pingora's path).
fn upstream_broken(e: &conn::Error) -> Broken {
    Broken {
        cause: Cause::UpstreamClosed,
        unprocessed: e.unprocessed(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use bytes::Bytes;

    use super::*;
    use crate::data::wire::hpack::Decoder;
    use crate::decide::edits::{ClientCert, Forwarding, Hidden, request_edits};

    /// The relay's request block and Pingora's header, each carrying out the same edits on the
    /// same client request, give the backend the same fields: the two carriers of `Edits`
    /// (`Seen` as the fields pass, `apply` on a map) cannot drift.
    #[test]
    fn the_block_carries_the_edits_as_pingoras_header_does() {
        let fwd = Forwarding::tls(Some(60), true);
        // As an HTTP/2 client's request comes: its target whole (the relay takes no other).
        let mut client = RequestHeader::build("POST", b"/", None).unwrap();
        client.set_uri(Uri::from_static("https://grpc.test/svc/Method?x=1"));
        for (name, value) in [
            ("x-forwarded-for", "203.0.113.7"),
            ("x-real-ip", "192.0.2.66"),
            ("x-client-verify", "SUCCESS"),
            ("cookie", "a=1; SERVERID=00000000000000ab; b=2"),
            ("cookie", "c=3"),
            ("te", "trailers"),
            ("content-type", "application/grpc"),
            ("x-forwarded-for", "198.51.100.1"),
        ] {
            client.append_header(name, value).unwrap();
        }
        for cert in [ClientCert::Absent, ClientCert::verified("/CN=alice")] {
            for sticky in [false, true] {
                let hidden = Hidden {
                    sticky_cookie: sticky,
                    ..Hidden::default()
                };
                let edits = request_edits(&fwd, Some("127.0.0.1"), hidden, || cert);
                let block = request_block(&client, None, &edits);
                let mut got = Vec::new();
                Decoder::new(4096)
                    .decode(&Bytes::copy_from_slice(block.bytes()), |f| {
                        got.push((f.name.to_vec(), f.value.to_vec()))
                    })
                    .unwrap();
                let pseudo: Vec<_> = got.drain(..4).collect();
                assert_eq!(
                    pseudo,
                    [
                        (b":method".to_vec(), b"POST".to_vec()),
                        (b":scheme".to_vec(), b"https".to_vec()),
                        (b":path".to_vec(), b"/svc/Method?x=1".to_vec()),
                        (b":authority".to_vec(), b"grpc.test".to_vec()),
                    ]
                );
                let mut pingora = client.clone();
                apply(&mut pingora, &edits).unwrap();
                let mut want: Vec<_> = pingora
                    .headers
                    .iter()
                    .map(|(n, v)| (n.as_str().as_bytes().to_vec(), v.as_bytes().to_vec()))
                    .collect();
                got.sort();
                want.sort();
                assert_eq!(got, want, "sticky {sticky}, {cert:?}");
            }
        }
    }
}

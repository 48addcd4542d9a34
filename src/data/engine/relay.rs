//! The fast path's HTTP/2 to HTTP/2 relay: a stream from an HTTP/2 client whose route leads to an
//! `h2c`/`grpc` backend, or over TLS to an `h2`/`grpcs` one, is carried over the fast path's HTTP/2
//! connections (`h2_pool`; over TLS made by the fast path's handshake, so with the bundle, client
//! certificate, verification and session resumption `tls::BackendTls` decides, as for `https`
//! backends), frame by frame — request header, body, trailers and end; response header, body and
//! trailers; resets both ways — instead of through Pingora's proxy (a session, a task and
//! channels per stream). Every decision is `decide`'s, made by the same calls the Pingora hooks
//! make: the route, the endpoint of each try and the verdict on a failure (`Attempt`), the header
//! edits (`request_edits`, carried out by `edits::Seen` as the backend's header block is coded
//! from the client's fields, as the HTTP/1 fast path writes its heads; `response_edits`), the
//! call's deadline (`grpc::timeout`, `grpc::blame`), switchyard's own answers
//! (`failure_answer`, `grpc_answer`, `grpc_status`); recording is `record::Recorder`'s. A
//! stream this relay does not carry (a request Pingora would refuse, a path Pingora would
//! normalise, a route to an HTTP/1 backend, a TLS backend without a server name, a route with
//! Gateway filters or a body limit, any answer other than proxying) is handed back before a
//! byte is written. It never holds a lock across an await.

use std::borrow::Cow;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Uri};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::protocols::Digest;
use tokio::time::Sleep;

use crate::data::engine::client_stream::{ClientGone, ClientStream};
use crate::data::engine::h1::{FastPath, tls_entry};
use crate::data::exchange::{NoResponse, TryFailed, after_failure, next_endpoint};
use crate::data::headers::{
    GRPC_STATUS_NAME, PingoraView, apply, exchange_request, grpc_of, grpc_trailers, host_of,
    keep_origin, stripped_target,
};
use crate::data::record::Finished;
use crate::data::tls::{self, TlsChoice};
use crate::data::upstream::h2_pool::{Lease, PoolError};
use crate::data::upstream::kept_body::KeptBody;
use crate::data::upstream::pool::Key;
use crate::data::wire::h2::conn::{self, RequestBlock, Stream};
use crate::decide::attempt::{Attempt, BodyKept, Failure, Sent};
use crate::decide::cause::Cause;
use crate::decide::edits::{Edits, Seen, Sink, ip_text, request_edits, response_edits};
use crate::decide::error_page::{failure_answer, grpc_answer};
use crate::decide::exchange;
use crate::decide::grpc::{self, Ending};
use crate::decide::reply::Reply;
use crate::decide::target::normalize_path;

/// One stream's state across its tries.
struct Call<'t> {
    started: Instant,
    grpc: bool,
    /// The call's deadline (`grpc-timeout`), from when the stream arrived.
    deadline: Option<Instant>,
    /// The wait for each thing from the endpoint (`--server-timeout`, or the route's).
    server_timeout: Duration,
    /// The client's request body has ended (or there was none).
    body_done: bool,
    /// Some of the request body (or its trailers) went to an endpoint.
    body_sent: bool,
    /// What went of it, for a further try.
    kept: KeptBody,
    /// The request's method is idempotent (`GET`, `PUT`, ...).
    idempotent: bool,
    /// The HTTP status the client got (0: none).
    status: u16,
    /// The status of the backend's response header; `None` when switchyard answered itself.
    upstream_status: Option<u16>,
    failed: bool,
    /// How the gRPC call ended, as the client was told.
    ending: Option<Ending>,
    /// The one timer of the call's waits on the endpoint, moved to each wait's limit
    /// (`timer`, `timer_at`). A timer made for each wait was registered with tokio's timer
    /// wheel and taken out again whenever the wait was not over at once; this one is
    /// registered once, and a later limit only moves its expiry.
    timer: Pin<&'t mut Sleep>,
}

impl Call<'_> {
    /// When the current wait on the endpoint gives up: `server_timeout` from now, or the
    /// deadline if sooner.
    fn limit(&self) -> tokio::time::Instant {
        let now = Instant::now();
        let at = self.deadline.map_or(now + self.server_timeout, |d| {
            d.min(now + self.server_timeout)
        });
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
    call: &mut Call<'_>,
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
        send(to_backend, body, end, call.timer()).await?;
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

impl FastPath {
    /// Serves one HTTP/2 stream whose route leads to an `h2c`/`grpc` or `h2`/`grpcs` backend;
    /// hands any other back untouched (nothing written) for Pingora.
    pub(super) async fn relay_h2(
        &self,
        mut session: Box<ClientStream>,
        digest: &Digest,
    ) -> Option<Box<ClientStream>> {
        let started = Instant::now();
        let mut attempt;
        let grpc;
        let client;
        let rewrite;
        let deadline;
        {
            let req = session.req_header();
            // What Pingora would refuse (its answer is its own) or rewrite stays Pingora's.
            if crate::data::headers::check_request(req, || session.raw_h1_header()).is_err()
                || req.uri.scheme().is_none()
                || req.uri.authority().is_none()
            {
                return Some(session);
            }
            let path = normalize_path(req.uri.path());
            if matches!(path, Cow::Owned(_)) {
                return Some(session);
            }
            grpc = grpc_of(req);
            let socket = digest.socket_digest.as_deref();
            client = socket.and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).copied());
            attempt = Attempt::new(client.map(|a| a.ip()));
            if self.proxy.by_local_address {
                attempt.set_local_ip(
                    socket
                        .and_then(|d| d.local_addr().and_then(|a| a.as_inet()))
                        .map(|a| a.ip()),
                );
            }
            let pq = req.uri.path_and_query().map_or("/", |pq| pq.as_str());
            let view = PingoraView(req);
            let desk = self.proxy.desk();
            let asked = exchange_request(req, &view, &path, pq, grpc);
            let table = self.proxy.table.load();
            let Ok(opened) = exchange::open(&mut attempt, table, desk, asked, started) else {
                return Some(session);
            };
            // The target the backend gets: the route's prefix stripped or replaced, as on
            // Pingora's path; any answer of switchyard's own is Pingora's to write.
            let mut location = String::new();
            rewrite = match opened.reply(host_of(req).unwrap_or_default(), pq, desk, &mut location)
            {
                Reply::Proxy { strip: Some(strip) } => match stripped_target(strip, pq) {
                    Ok(target) => Some(keep_origin(&req.uri, target)),
                    Err(_) => return Some(session),
                },
                Reply::Proxy { strip: None } => None,
                Reply::Answer { .. } => return Some(session),
            };
            let taken = attempt.backend_protocol().http2()
                && !attempt.rewrites()
                && attempt.body_allowed(u64::MAX);
            if !taken {
                return Some(session);
            }
            deadline = opened.deadline;
        }
        let Ok(tls_entry) = tls_entry(&attempt) else {
            return Some(session);
        };
        let _active = self.proxy.enter();
        // Set before each wait (`Call::timer`); made here, it is not registered until one
        // waits on it.
        let timer = std::pin::pin!(tokio::time::sleep_until(started.into()));
        let mut call = Call {
            started,
            grpc,
            deadline,
            server_timeout: attempt.server_timeout(self.proxy.timeouts.server_idle),
            body_done: session.is_body_done(),
            body_sent: false,
            kept: KeptBody::default(),
            idempotent: session.req_header().method.is_idempotent(),
            status: 0,
            upstream_status: None,
            failed: false,
            ending: None,
            timer,
        };
        session.set_write_timeout(self.proxy.timeouts.client_idle);

        // The session keeps the client's header as it came: the access log names its target.
        // What the block is made from is not kept across the awaits below (the stream's
        // future, copied when boxed, would carry it).
        let request = {
            let client_ip = client.map(|a| ip_text(a.ip()));
            let edits = request_edits(
                &self.proxy.fwd,
                client_ip.as_deref(),
                attempt.cookie_sticky(),
                || tls::client_cert(digest.ssl_digest.as_deref()),
            );
            request_block(session.req_header(), rewrite.as_ref(), &edits)
        };
        // Over TLS: how each connection is made (chosen once for the call).
        let tls = match tls_entry.as_deref().map(|e| &e.upstream) {
            None => None,
            Some(u) => match self.proxy.backend_tls.choose(u) {
                Ok(choice) => Some((choice, &*u.sni)),
                Err(e) => {
                    // A Service's own bundle or client certificate is not loaded: refused as an
                    // untrusted certificate would be, as on the other paths; not the endpoint's
                    // fault, so no ejection and no other endpoint.
                    tracing::debug!(error = %e, "backend TLS not loaded");
                    self.proxy.recorder.tls_failure(&attempt);
                    self.answer(
                        &mut session,
                        &mut call,
                        Cause::UpstreamTls.status().unwrap_or(502),
                    );
                    self.record(&session, &mut attempt, &call, client, rewrite.as_ref());
                    return None;
                }
            },
        };
        let tls = tls.as_ref().map(|(choice, sni)| (choice, *sni));
        self.exchange(&mut session, &request, &mut attempt, &mut call, tls)
            .await;
        self.record(&session, &mut attempt, &call, client, rewrite.as_ref());
        None
    }

    /// The tries, then the relay of the response that came; over TLS, each new connection made
    /// with `tls`'s choice and server name. `request` is the request's header block, coded
    /// once for every try.
    async fn exchange(
        &self,
        session: &mut ClientStream,
        request: &RequestBlock,
        attempt: &mut Attempt,
        call: &mut Call<'_>,
        tls: Option<(&TlsChoice, &str)>,
    ) {
        let policy = &self.proxy.policy;
        // The lease keeps the backend connection counted busy until the stream ends.
        let (resp, stream, lease) = loop {
            let addr = match next_endpoint(attempt) {
                Ok(addr) => addr,
                Err(end) => return self.call_ended(session, call, end),
            };
            let broken = match self
                .try_once(session, request, attempt, call, addr, tls)
                .await
            {
                Ok(pair) => {
                    attempt.response_started(Instant::now());
                    break pair;
                }
                Err(b) => b,
            };
            // Every body is kept (up to 64 KiB), as on Pingora's path: an idempotent request's
            // may go again, and so may one the backend refused unprocessed.
            let body = if call.kept.whole() {
                BodyKept::All
            } else {
                BodyKept::Partly
            };
            let failed = TryFailed {
                cause: call.blame(broken.cause),
                sent: Sent {
                    idempotent: call.idempotent,
                    unprocessed: broken.unprocessed,
                    body,
                    // A try fails here before its response header.
                    answered: false,
                },
            };
            if let Some(end) = after_failure(&self.proxy.recorder, policy, attempt, failed) {
                return self.call_ended(session, call, end);
            }
        };
        // The response.
        let (parts, ()) = resp.into_parts();
        let mut header = ResponseHeader::from(parts);
        if apply(
            &mut header,
            &response_edits(&self.proxy.fwd, attempt.set_cookie()),
        )
        .is_err()
        {
            stream.send_reset(h2::Reason::CANCEL);
            self.answer(session, call, Cause::Internal.status().unwrap_or(500));
            return;
        }
        call.status = header.status.as_u16();
        call.upstream_status = Some(call.status);
        if call.grpc {
            // A trailers-only answer has the status in its header.
            call.ending = ending_in(&header);
        }
        let end = stream.is_end_stream();
        if session
            .write_response_header(Box::new(header), end)
            .is_err()
        {
            stream.send_reset(h2::Reason::CANCEL);
            call.failed = true;
            return;
        }
        if end {
            return;
        }
        if let Err(cause) = self.relay_response(session, call, &lease, &stream).await {
            call.failed = true;
            let cause = call.blame(cause);
            let verdict = attempt.failed(
                Failure {
                    cause,
                    replayable: false,
                },
                policy,
                Instant::now(),
            );
            self.proxy.recorder.failure(attempt, &verdict);
            stream.send_reset(h2::Reason::CANCEL);
            if cause == Cause::ClientGone {
                return;
            }
            match cause.status() {
                // A gRPC call broken mid-stream still ends as gRPC says (as on Pingora's path):
                // its status in trailers after the messages already sent.
                Some(code) if call.grpc => {
                    let (trailers, ending) = grpc_trailers(code);
                    if session.write_trailers(trailers).is_ok() {
                        call.ending = Some(ending);
                    }
                }
                _ => session.shutdown_with_reason(h2::Reason::INTERNAL_ERROR),
            }
        }
    }

    /// Ends a call whose tries gave no response: answered with a status, or (the client gone)
    /// only counted failed.
    fn call_ended(&self, session: &mut ClientStream, call: &mut Call<'_>, end: NoResponse) {
        match end {
            NoResponse::Answer(status) => self.answer(session, call, status),
            NoResponse::Gone => call.failed = true,
        }
    }

    /// One try: a stream to `addr` (over TLS with `tls`), `request`'s header, and the request
    /// body as the client sends it until the response header comes.
    async fn try_once(
        &self,
        session: &mut ClientStream,
        request: &RequestBlock,
        attempt: &mut Attempt,
        call: &mut Call<'_>,
        addr: SocketAddr,
        tls: Option<(&TlsChoice, &str)>,
    ) -> Result<(http::Response<()>, Stream, Lease), Broken> {
        let connect_timeout = match call.deadline {
            Some(d) => self
                .proxy
                .timeouts
                .connect
                .min(d.saturating_duration_since(Instant::now())),
            None => self.proxy.timeouts.connect,
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
        let sent = within(call.timer_at(limit), send.send_request(request, end)).await;
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
        call: &mut Call<'_>,
        to_backend: &Stream,
    ) -> Result<(), Cause> {
        match chunk {
            Ok(Some(data)) => {
                call.body_sent = true;
                call.body_done = last;
                call.kept.keep(&data);
                send(to_backend, data, last, call.timer()).await
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
                    Ok(None) => send(to_backend, Bytes::new(), true, call.timer()).await,
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
        call: &mut Call<'_>,
        lease: &Lease,
        stream: &Stream,
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
                    call.ending = Some(Ending::of(
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

    /// Answers the stream with switchyard's own `status` (a gRPC status for a gRPC call), as
    /// the whole response.
    fn answer(&self, session: &mut ClientStream, call: &mut Call<'_>, status: u16) {
        call.failed = true;
        let answer = if call.grpc {
            grpc_answer(status, &self.proxy.fwd)
        } else {
            failure_answer(status, &self.proxy.fwd)
        };
        let Ok(mut header) =
            ResponseHeader::build(answer.status, Some(answer.fields.iter().count()))
        else {
            return;
        };
        if apply(&mut header, &answer.fields).is_err() {
            return;
        }
        if call.grpc {
            call.ending = ending_in(&header);
        }
        call.status = answer.status;
        if session
            .write_response_header(Box::new(header), true)
            .is_err()
        {
            call.status = 0;
        }
    }

    /// Counts the call once; `rewrite` is the target the backend got when the route rewrote
    /// it.
    fn record(
        &self,
        session: &ClientStream,
        attempt: &mut Attempt,
        call: &Call<'_>,
        client: Option<SocketAddr>,
        rewrite: Option<&Uri>,
    ) {
        let req = session.req_header();
        let mut fin = Finished {
            status: call.status,
            bytes_in: session.body_bytes_read() as u64,
            bytes_out: session.body_bytes_sent() as u64,
            failed: call.failed,
            grpc: call.grpc.then(|| call.ending.unwrap_or(Ending::NONE)),
            upstream_status: call.upstream_status,
            forwarded: rewrite.map(|u| ("", u.path())),
            // The client's stream: this path serves HTTP/2 clients only.
            ..Finished::new(
                client,
                "HTTP/2.0",
                host_of(req).unwrap_or_default(),
                req.method.as_str(),
                req.uri.path(),
            )
        };
        if self.proxy.recorder.logs() {
            fin.fields(|name| req.headers.get(name).map(HeaderValue::as_bytes));
        }
        self.proxy.recorder.finished(attempt, call.started, &fin);
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
fn ending_in(header: &ResponseHeader) -> Option<Ending> {
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
    use crate::decide::edits::{ClientCert, Forwarding};

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
        for cert in [
            ClientCert::Absent,
            ClientCert::Verified {
                subject: "/CN=alice",
            },
        ] {
            for sticky in [false, true] {
                let edits = request_edits(&fwd, Some("127.0.0.1"), sticky, || cert);
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

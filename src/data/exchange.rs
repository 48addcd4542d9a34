//! The one request driver every fast-path front feeds (the HTTP/1 connection, an HTTP/2
//! stream; later HTTP/3): prelude -> route and reply (`decide::exchange`) -> backend TLS choice
//! -> the request as the backend gets it (`decide::edits`) -> tries -> the response -> record.
//! A front (`Front`) only reads its wire into a protocol-neutral request and writes answers
//! back; an upstream (`Upstream`: HTTP/1 to `http`/`https` backends, HTTP/2 to `h2c`/`grpc`
//! ones) only carries one try and relays one response on its wire. The steps between them,
//! and their order, are written here once: a new request policy is added in `decide/` and
//! reaches every front and upstream through this sequence. Between tries the attempt's
//! verdict is applied (`after_failure`): another endpoint, or the cause's status, or nothing
//! when the client is gone or has part of an answer. Pingora's engine, behind its fallback
//! seam (`engine::pingora`), drives its own hooks with the same `decide` calls; an exchange an
//! upstream or a front declines before a byte is written goes there. It never holds a lock
//! across an await.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use pingora::protocols::tls::SslDigest;

use crate::data::frontend::HttpProxy;
use crate::data::record::Recorder;
use crate::data::tls::{self, TlsChoice};
use crate::decide::attempt::{Attempt, BodyKept, Failure, Policy, Route, RouteError, Sent};
use crate::decide::cause::Cause;
use crate::decide::edits::{Edits, request_edits};
use crate::decide::error_page::{Answer, failure_answer, grpc_answer};
use crate::decide::exchange::{Desk, Opened};
use crate::decide::grpc::Ending;
use crate::decide::reply::Reply;
use crate::ops::lifecycle::Active;
use crate::table::matcher::Strip;
use crate::table::{Entry, RoutingTable};

/// How one try failed: why, and what it had done (whether its request may go again, whether
/// the client already has part of an answer).
pub(crate) struct TryFailed {
    pub cause: Cause,
    pub sent: Sent,
}

impl TryFailed {
    /// Failed before a byte of the request went: it may go to another endpoint.
    pub(crate) fn unsent(cause: Cause) -> TryFailed {
        TryFailed {
            cause,
            sent: Sent {
                idempotent: true,
                unprocessed: true,
                body: BodyKept::All,
                answered: false,
            },
        }
    }
}

/// How the tries ended without a response to relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoResponse {
    /// switchyard answers the client with this status (no endpoint left, or the last try's
    /// cause).
    Answer(u16),
    /// Nothing is answered: the client is gone, or already has part of an answer.
    Gone,
}

/// The endpoint of the next try, or the answer when none is left.
pub(crate) fn next_endpoint(attempt: &mut Attempt) -> Result<SocketAddr, NoResponse> {
    attempt.next(Instant::now()).ok_or(NoResponse::Answer(503))
}

/// What follows a failed try: `None`, another try (`next_endpoint`); else how the exchange
/// ends. The attempt's verdict is counted by `recorder`.
pub(crate) fn after_failure(
    recorder: &Recorder,
    policy: &Policy,
    attempt: &mut Attempt,
    failed: TryFailed,
) -> Option<NoResponse> {
    let failure = Failure {
        cause: failed.cause,
        replayable: failed.sent.replayable(),
    };
    let verdict = attempt.failed(failure, policy, Instant::now());
    recorder.failure(attempt, &verdict);
    if failed.cause == Cause::UpstreamTls {
        recorder.tls_failure(attempt);
    }
    if verdict.retry {
        return None;
    }
    Some(match failed.cause.status() {
        Some(status) if !failed.sent.answered => NoResponse::Answer(status),
        _ => NoResponse::Gone,
    })
}

/// What the record of an exchange learns as the driver goes.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// The status the client got (0: none was written).
    pub status: u16,
    /// The status of the backend's response header; `None` when switchyard answered.
    pub upstream_status: Option<u16>,
    pub failed: bool,
    /// Response body bytes relayed to the client.
    pub bytes_out: u64,
    /// For a gRPC call, how it ended as the client was told.
    pub grpc: Option<Ending>,
}

/// How a driven exchange left its front.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Driven {
    /// Nothing was written: the front hands the request on to Pingora's engine.
    Declined,
    /// Done; `keep`: the client connection may serve another request.
    Done { keep: bool },
}

/// A client's side of an exchange, as one protocol front reads and writes it.
pub(crate) trait Front {
    /// The client's address, and the address it connected to when routes pick by it
    /// (`HttpProxy::reads_local`).
    fn addresses(&self) -> (Option<IpAddr>, Option<SocketAddr>);

    /// What backends may hear of the client: its address as text (for the forwarding
    /// fields) and the connection's TLS digest (its verified certificate). Shared, not
    /// borrowed: the request's edits outlive the borrow of the front the upstream writes
    /// through.
    fn identity(&self) -> (Option<Arc<str>>, Option<Arc<SslDigest>>);

    /// The request speaks gRPC: switchyard's own failures are gRPC statuses.
    fn grpc(&self) -> bool;

    /// Whether switchyard may write its own answer here (else the exchange is declined).
    fn may_answer(&self) -> bool {
        true
    }

    /// Routes the request: the protocol-neutral request made of what the front read, opened
    /// by `decide::exchange::open`.
    fn open(
        &self,
        attempt: &mut Attempt,
        desk: Desk<'_>,
        table: Arc<RoutingTable>,
        started: Instant,
    ) -> Result<Opened, RouteError>;

    /// The host and the path and query a reply names (a redirect to HTTPS does).
    fn asked(&self) -> (&[u8], &str);

    /// Writes switchyard's own answer as the whole response (`body`: `answer.body` as shared
    /// bytes when there are some); `close`: the client connection ends after it where the
    /// protocol has one. Notes the status and bytes in `tally`; false when the client is gone
    /// or the connection must end.
    async fn answer(
        &mut self,
        answer: &Answer<'_>,
        body: Option<Bytes>,
        close: bool,
        tally: &mut Tally,
    ) -> bool;

    /// Counts the exchange once (`strip`: the route's rewrite of the target, if any).
    fn record(
        &self,
        recorder: &Recorder,
        attempt: &mut Attempt,
        started: Instant,
        tally: &Tally,
        strip: Option<&Strip>,
    );
}

/// The backend's side of an exchange over one wire protocol: one try, one response relayed.
pub(crate) trait Upstream<F: Front> {
    /// One exchange's state across its tries (its request as the backend gets it, its timer).
    type Call;
    /// What a try that got a response header holds for the relay.
    type Answered;

    /// Whether this upstream carries the routed exchange with `front`.
    fn takes(&self, front: &F, attempt: &Attempt) -> bool;

    /// The exchange's call: its request written for the backend with `edits` carried out,
    /// the target rewritten by `strip`; `None` when the request cannot be carried this way
    /// (nothing was written: the exchange is declined).
    fn prepare(
        &self,
        front: &mut F,
        attempt: &Attempt,
        opened: &Opened,
        strip: Option<&Strip>,
        edits: &Edits<'_>,
        started: Instant,
    ) -> Option<Self::Call>;

    /// One try at `addr` (over TLS with `tls`'s choice and server name): the request sent,
    /// the response header read.
    async fn try_once(
        &self,
        front: &mut F,
        call: &mut Self::Call,
        attempt: &mut Attempt,
        addr: SocketAddr,
        tls: Option<(&TlsChoice, &str)>,
    ) -> Result<Self::Answered, TryFailed>;

    /// The status of the response whose header `answered` holds.
    fn status(&self, answered: &Self::Answered) -> u16;

    /// What a try that got the response header `answered` holds had sent, for whether its
    /// request may go again.
    fn sent(&self, call: &Self::Call, answered: &Self::Answered) -> Sent;

    /// Drops a response that is not relayed (the request goes to another endpoint): its
    /// connection or stream is not used again.
    fn discard(&self, call: &mut Self::Call, answered: Self::Answered);

    /// Relays the response whose header `answered` holds, with the response edits carried
    /// out; `Ok(keep)`, or the cause of a failure once part of it may have gone out.
    async fn relay(
        &self,
        front: &mut F,
        call: &mut Self::Call,
        answered: Self::Answered,
        attempt: &mut Attempt,
        tally: &mut Tally,
    ) -> Result<bool, Cause>;

    /// The wire's end of a response broken by `cause` (the attempt counted it already).
    fn broken(&self, front: &mut F, call: &mut Self::Call, cause: Cause, tally: &mut Tally);
}

/// An entry spoken to over TLS has no server name: Pingora's connector has its own rule for
/// that (no SNI), so the fast path leaves such requests to it.
pub(crate) struct NoServerName;

/// Over TLS, the routed entry, whose connection settings (server name, bundle, client
/// certificate, verification) every try uses, held apart from the attempt, which the tries
/// borrow mutably; `None` in clear. The same rule for HTTP/1 (`https`) and HTTP/2 (`h2`)
/// backends.
pub(crate) fn tls_entry(attempt: &Attempt) -> Result<Option<Arc<Entry>>, NoServerName> {
    if !attempt.backend_protocol().tls() {
        return Ok(None);
    }
    let entry = attempt
        .table()
        .zip(attempt.entry_id())
        .and_then(|(t, id)| t.entries.get(id as usize));
    match entry {
        Some(e) if !e.upstream.sni.is_empty() => Ok(Some(Arc::clone(e))),
        _ => Err(NoServerName),
    }
}

/// How an exchange goes on once opened.
// Moved once, from `open` to `carry`, on the stack; boxed it would cost an allocation per
// request.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Opening<'p> {
    /// Answered (or declined) already.
    Ended(Driven),
    /// Routed to be proxied: an upstream carries it (`Exchange::carry`).
    Proxy(Exchange<'p>),
}

/// An exchange routed to be proxied, before an upstream carries it.
pub(crate) struct Exchange<'p> {
    proxy: &'p HttpProxy,
    _active: Active,
    started: Instant,
    attempt: Attempt,
    opened: Opened,
    tally: Tally,
}

/// Opens an exchange for the request `front` read: routed, and answered by switchyard when
/// the route says so (a page, a redirect, a Gateway status, a failure).
pub(crate) async fn open<'p, F: Front>(proxy: &'p HttpProxy, front: &mut F) -> Opening<'p> {
    let active = proxy.enter();
    let started = Instant::now();
    let (client, local) = front.addresses();
    let table = proxy.table.load();
    let mut attempt = proxy.attempt(&table, client, local, front.identity().1.as_deref());
    let desk = proxy.desk();
    let mut tally = Tally::default();
    let opened = match front.open(&mut attempt, desk, table, started) {
        Ok(opened) if matches!(opened.route, Route::Proxy { .. }) => {
            return Opening::Proxy(Exchange {
                proxy,
                _active: active,
                started,
                attempt,
                opened,
                tally,
            });
        }
        _ if !front.may_answer() => return Opening::Ended(Driven::Declined),
        Ok(opened) => opened,
        Err(e) => {
            tracing::warn!(error = %e, "cannot route");
            let status = Cause::Internal.status().unwrap_or(500);
            let keep = fail(proxy, front, status, &mut tally).await;
            front.record(&proxy.recorder, &mut attempt, started, &tally, None);
            return Opening::Ended(Driven::Done { keep });
        }
    };
    let mut location = String::new();
    let (host, path_and_query) = front.asked();
    let keep = match opened.reply(host, path_and_query, desk, &mut location) {
        Reply::Answer {
            answer,
            body,
            close,
        } => front.answer(&answer, Some(body), close, &mut tally).await,
        // Not a proxied route: `reply` answers it.
        Reply::Proxy { .. } => fail(proxy, front, 500, &mut tally).await,
    };
    front.record(&proxy.recorder, &mut attempt, started, &tally, None);
    Opening::Ended(Driven::Done { keep })
}

impl Exchange<'_> {
    /// The routed attempt (which backend protocol the route speaks picks the upstream).
    pub(crate) fn attempt(&self) -> &Attempt {
        &self.attempt
    }

    /// Carries the exchange over `up`: the backend TLS choice, the request as the backend gets
    /// it, the tries, the response, the record. Declined, with nothing written, when `up`
    /// does not carry it.
    pub(crate) async fn carry<F: Front, U: Upstream<F>>(self, front: &mut F, up: &U) -> Driven {
        let Exchange {
            proxy,
            _active,
            started,
            mut attempt,
            opened,
            mut tally,
        } = self;
        if !up.takes(front, &attempt) {
            return Driven::Declined;
        }
        let Ok(tls_entry) = tls_entry(&attempt) else {
            return Driven::Declined;
        };
        let desk = proxy.desk();
        let mut location = String::new();
        let (host, path_and_query) = front.asked();
        let strip = match opened.reply(host, path_and_query, desk, &mut location) {
            Reply::Proxy { strip } => strip,
            // A body announced past the route's limit: refused before it is read.
            Reply::Answer {
                answer,
                body,
                close,
            } => {
                let keep = front.answer(&answer, Some(body), close, &mut tally).await;
                front.record(&proxy.recorder, &mut attempt, started, &tally, None);
                return Driven::Done { keep };
            }
        };
        // Over TLS: how each connection is made, chosen once for the exchange.
        let tls = match tls_entry.as_deref().map(|e| &e.upstream) {
            None => None,
            Some(u) => match proxy.backend_tls.choose(u) {
                Ok(choice) => Some((choice, &*u.sni)),
                Err(e) => {
                    // A Service's own bundle or client certificate is not loaded (the watcher
                    // warned why): refused as an untrusted certificate would be, and counted as
                    // one; not the endpoint's fault, so no ejection and no other endpoint.
                    tracing::debug!(error = %e, "backend TLS not loaded");
                    proxy.recorder.tls_failure(&attempt);
                    let status = Cause::UpstreamTls.status().unwrap_or(502);
                    let keep = fail(proxy, front, status, &mut tally).await;
                    front.record(&proxy.recorder, &mut attempt, started, &tally, strip);
                    return Driven::Done { keep };
                }
            },
        };
        let tls = tls.as_ref().map(|(choice, sni)| (choice, *sni));
        let call = {
            let (client_ip, ssl) = front.identity();
            let edits = request_edits(&proxy.fwd, client_ip.as_deref(), attempt.hidden(), || {
                tls::client_cert(ssl.as_deref())
            });
            up.prepare(front, &attempt, &opened, strip, &edits, started)
        };
        let Some(mut call) = call else {
            return Driven::Declined;
        };

        let answered = loop {
            let failed = match next_endpoint(&mut attempt) {
                Err(end) => break Err(end),
                Ok(addr) => match up.try_once(front, &mut call, &mut attempt, addr, tls).await {
                    Ok(answered) => {
                        // A status the route sends elsewhere (`proxy-next-upstream http_*`).
                        let (status, sent) = (up.status(&answered), up.sent(&call, &answered));
                        let policy = &proxy.policy;
                        match attempt.answered(status, sent, policy, Instant::now()) {
                            Some(verdict) => {
                                proxy.recorder.failure(&attempt, &verdict);
                                up.discard(&mut call, answered);
                                continue;
                            }
                            None => {
                                attempt.response_started(Instant::now());
                                break Ok(answered);
                            }
                        }
                    }
                    Err(failed) => failed,
                },
            };
            let recorder = &proxy.recorder;
            if let Some(end) = after_failure(recorder, &proxy.policy, &mut attempt, failed) {
                break Err(end);
            }
        };
        let answered = match answered {
            Ok(answered) => answered,
            Err(end) => {
                let parts = (&mut attempt, started, &mut tally);
                return ended(proxy, front, parts, end, strip).await;
            }
        };
        let relayed = up
            .relay(front, &mut call, answered, &mut attempt, &mut tally)
            .await;
        let keep = match relayed {
            Ok(keep) => keep,
            Err(cause) => {
                tally.failed = true;
                let failure = Failure {
                    cause,
                    replayable: false,
                };
                let verdict = attempt.failed(failure, &proxy.policy, Instant::now());
                proxy.recorder.failure(&attempt, &verdict);
                up.broken(front, &mut call, cause, &mut tally);
                false
            }
        };
        front.record(&proxy.recorder, &mut attempt, started, &tally, strip);
        Driven::Done { keep }
    }
}

/// Ends an exchange whose tries gave no response: answered with a status and the connection
/// closed, or (the client gone, or part of an answer written) only closed.
async fn ended<F: Front>(
    proxy: &HttpProxy,
    front: &mut F,
    (attempt, started, tally): (&mut Attempt, Instant, &mut Tally),
    end: NoResponse,
    strip: Option<&Strip>,
) -> Driven {
    match end {
        NoResponse::Answer(status) => {
            fail(proxy, front, status, tally).await;
        }
        NoResponse::Gone => tally.failed = true,
    }
    front.record(&proxy.recorder, attempt, started, tally, strip);
    Driven::Done { keep: false }
}

/// Answers with switchyard's failure `status` (a gRPC status to a gRPC call), ending the
/// client connection (as Pingora does after its own error responses); counted failed.
async fn fail<F: Front>(proxy: &HttpProxy, front: &mut F, status: u16, tally: &mut Tally) -> bool {
    let answer = if front.grpc() {
        grpc_answer(status, &proxy.fwd)
    } else {
        failure_answer(status, &proxy.fwd)
    };
    front.answer(&answer, None, true, tally).await;
    tally.failed = true;
    false
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::ops::access_log::AccessLog;
    use crate::ops::metrics::Metrics;
    use crate::table::{Entry, Frontend, RoutingTable};

    /// An attempt routed to an entry of two endpoints, and what a try at each can end with.
    fn routed() -> (Attempt, Recorder, Policy) {
        let addrs = ["192.0.2.10:80", "192.0.2.11:80"];
        let entry = Entry::fixture("web", Frontend::Http, &addrs);
        let table = RoutingTable::fixture(entry, "/", false, None);
        let policy = Policy::new(3, Duration::from_secs(5), true);
        let mut attempt = Attempt::new(None);
        let cookies = std::iter::empty();
        attempt
            .route(
                table,
                Frontend::Http,
                None,
                "/",
                cookies,
                &policy,
                Instant::now(),
            )
            .unwrap();
        let recorder = Recorder::new(
            Frontend::Http,
            Arc::new(Metrics::new()),
            Arc::new(AccessLog::off()),
        );
        (attempt, recorder, policy)
    }

    #[test]
    fn a_refused_connect_tries_the_other_endpoint_then_answers_its_status() {
        let (mut attempt, recorder, policy) = routed();
        let refused = || TryFailed::unsent(Cause::ConnectRefused);
        next_endpoint(&mut attempt).unwrap();
        assert_eq!(
            after_failure(&recorder, &policy, &mut attempt, refused()),
            None
        );
        next_endpoint(&mut attempt).unwrap();
        assert_eq!(
            after_failure(&recorder, &policy, &mut attempt, refused()),
            Some(NoResponse::Answer(503))
        );
    }

    #[test]
    fn a_try_that_answered_part_or_lost_its_client_ends_without_an_answer() {
        let sent = |answered| Sent {
            idempotent: true,
            unprocessed: false,
            body: BodyKept::All,
            answered,
        };
        let (mut attempt, recorder, policy) = routed();
        next_endpoint(&mut attempt).unwrap();
        let cut = TryFailed {
            cause: Cause::ResponseTruncated,
            sent: sent(true),
        };
        assert_eq!(
            after_failure(&recorder, &policy, &mut attempt, cut),
            Some(NoResponse::Gone)
        );
        let (mut attempt, recorder, policy) = routed();
        next_endpoint(&mut attempt).unwrap();
        let gone = TryFailed {
            cause: Cause::ClientGone,
            sent: sent(false),
        };
        assert_eq!(
            after_failure(&recorder, &policy, &mut attempt, gone),
            Some(NoResponse::Gone)
        );
        // A timeout is not replayed (the endpoint may be working on it): 504.
        let (mut attempt, recorder, policy) = routed();
        next_endpoint(&mut attempt).unwrap();
        let slow = TryFailed {
            cause: Cause::UpstreamTimedOut,
            sent: sent(false),
        };
        assert_eq!(
            after_failure(&recorder, &policy, &mut attempt, slow),
            Some(NoResponse::Answer(504))
        );
    }
}

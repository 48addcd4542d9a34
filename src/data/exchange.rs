//! The tries of an exchange, written once for the engines that drive their own (the fast
//! path's HTTP/1 exchange, which HTTP/2 GETs share, and the HTTP/2 relay): an endpoint from
//! the attempt (`next_endpoint`), one try through the engine's own wire, and on a failure
//! (`after_failure`) the attempt's verdict — try another endpoint, or give up with the status
//! the cause answers, or with nothing when the client is gone or has part of an answer —
//! counted by the recorder. (A loop taking the try as an async closure would be one function,
//! but its future is not `Send` for every lifetime, which a spawned stream task needs.) What a try does on the wire is the engine's; whether and where it goes again
//! is `decide::attempt`'s, applied here. Pingora's engine drives its tries through its own
//! hooks (`fail_to_connect`, `error_while_proxy`), asking the same `Attempt`. It never holds
//! a lock across an await.

use std::net::SocketAddr;
use std::time::Instant;

use crate::data::record::Recorder;
use crate::decide::attempt::{Attempt, BodyKept, Failure, Policy, Sent};
use crate::decide::cause::Cause;

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

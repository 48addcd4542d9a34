//! Why a try failed, as a closed set every engine maps its own errors into (Pingora's error
//! types, the fast path's and the TCP relay's socket results), and the one place that says
//! which status each failure answers. It must not name an engine's error type.

/// The side of the proxy a failure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Upstream,
    /// switchyard itself (a table that names a missing entry, an unbuildable header).
    Internal,
}

/// Why a try failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Cause {
    #[error("the endpoint refused the connection")]
    ConnectRefused,
    #[error("connecting to the endpoint timed out")]
    ConnectTimedOut,
    #[error("cannot connect to the endpoint")]
    ConnectFailed,
    #[error("the endpoint closed or reset the connection")]
    UpstreamClosed,
    /// Closed or reset after the response header went out: never stale, never replayed.
    #[error("the endpoint closed the connection in the middle of a response")]
    ResponseTruncated,
    #[error("the endpoint did not answer within --server-timeout")]
    UpstreamTimedOut,
    #[error("the endpoint sent an invalid response")]
    InvalidResponse,
    /// A switched-protocol tunnel (101) ended abruptly: says nothing of the endpoint's health.
    #[error("the tunnel ended abruptly")]
    TunnelEnded,
    #[error("the client closed or reset the connection")]
    ClientGone,
    #[error("the client sent an invalid request")]
    BadRequest,
    #[error("internal error")]
    Internal,
}

impl Cause {
    pub fn side(self) -> Side {
        match self {
            Cause::ConnectRefused
            | Cause::ConnectTimedOut
            | Cause::ConnectFailed
            | Cause::UpstreamClosed
            | Cause::ResponseTruncated
            | Cause::UpstreamTimedOut
            | Cause::InvalidResponse
            | Cause::TunnelEnded => Side::Upstream,
            Cause::ClientGone | Cause::BadRequest => Side::Client,
            Cause::Internal => Side::Internal,
        }
    }

    /// The upstream connection was never opened: nothing was sent, so any method may go to
    /// another endpoint.
    pub fn before_connect(self) -> bool {
        matches!(
            self,
            Cause::ConnectRefused | Cause::ConnectTimedOut | Cause::ConnectFailed
        )
    }

    /// The answer when this failure ends a request before a response header went out, in
    /// HAProxy's terms: no connection to any endpoint is 503 (`sC`/`SC`), no response within
    /// --server-timeout 504 (`sH`), a connection closed before a complete response header,
    /// or an invalid one, 502 (`SH`/`PH`). `None`: the client is gone, nobody to answer.
    pub fn status(self) -> Option<u16> {
        match self {
            Cause::ConnectRefused | Cause::ConnectTimedOut | Cause::ConnectFailed => Some(503),
            Cause::UpstreamTimedOut => Some(504),
            Cause::UpstreamClosed
            | Cause::ResponseTruncated
            | Cause::InvalidResponse
            | Cause::TunnelEnded => Some(502),
            Cause::ClientGone => None,
            Cause::BadRequest => Some(400),
            Cause::Internal => Some(500),
        }
    }

    /// The access log's short phrase (a bounded set; a refused connect is one that failed).
    pub fn phrase(self) -> &'static str {
        match self {
            Cause::ConnectRefused | Cause::ConnectFailed => "connect failed",
            Cause::ConnectTimedOut => "connect timeout",
            Cause::UpstreamClosed => "upstream closed",
            Cause::ResponseTruncated => "response truncated",
            Cause::UpstreamTimedOut => "upstream timeout",
            Cause::InvalidResponse => "invalid response",
            Cause::TunnelEnded => "tunnel ended",
            Cause::ClientGone => "client gone",
            Cause::BadRequest => "bad request",
            Cause::Internal => "internal error",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_failures_answer_503_timeouts_504_broken_responses_502() {
        for c in [
            Cause::ConnectRefused,
            Cause::ConnectTimedOut,
            Cause::ConnectFailed,
        ] {
            assert_eq!(c.status(), Some(503));
            assert!(c.before_connect());
            assert_eq!(c.side(), Side::Upstream);
        }
        assert_eq!(Cause::UpstreamTimedOut.status(), Some(504));
        assert_eq!(Cause::UpstreamClosed.status(), Some(502));
        assert_eq!(Cause::InvalidResponse.status(), Some(502));
        assert_eq!(Cause::ClientGone.status(), None);
        assert_eq!(Cause::ClientGone.side(), Side::Client);
        assert!(!Cause::UpstreamClosed.before_connect());
        assert_eq!(Cause::ConnectRefused.phrase(), "connect failed");
        assert_eq!(Cause::ConnectTimedOut.phrase(), "connect timeout");
    }
}

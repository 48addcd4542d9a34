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
    /// TLS to the endpoint failed: its certificate is not trusted (`--backend-ca-file`) or
    /// not for the name sent, or no protocol in common. Nothing was sent.
    #[error("the TLS handshake with the endpoint failed")]
    UpstreamTls,
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
    /// A gRPC call's own deadline (`grpc-timeout`) passed: the client's time budget ran out,
    /// which says nothing of the endpoint's health.
    #[error("the call's deadline passed")]
    DeadlinePassed,
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
            | Cause::UpstreamTls
            | Cause::UpstreamClosed
            | Cause::ResponseTruncated
            | Cause::UpstreamTimedOut
            | Cause::InvalidResponse
            | Cause::TunnelEnded => Side::Upstream,
            Cause::ClientGone | Cause::BadRequest | Cause::DeadlinePassed => Side::Client,
            Cause::Internal => Side::Internal,
        }
    }

    /// The upstream connection was never opened: nothing was sent, so any method may go to
    /// another endpoint.
    pub fn before_connect(self) -> bool {
        matches!(
            self,
            Cause::ConnectRefused
                | Cause::ConnectTimedOut
                | Cause::ConnectFailed
                | Cause::UpstreamTls
        )
    }

    /// The answer when this failure ends a request before a response header went out, in
    /// HAProxy's terms: no connection to any endpoint is 503 (`sC`/`SC`), no response within
    /// --server-timeout 504 (`sH`), a connection closed before a complete response header,
    /// or an invalid one, 502 (`SH`/`PH`). `None`: the client is gone, nobody to answer.
    pub fn status(self) -> Option<u16> {
        match self {
            Cause::ConnectRefused | Cause::ConnectTimedOut | Cause::ConnectFailed => Some(503),
            Cause::UpstreamTimedOut | Cause::DeadlinePassed => Some(504),
            Cause::UpstreamClosed
            | Cause::ResponseTruncated
            | Cause::InvalidResponse
            | Cause::UpstreamTls
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
            Cause::UpstreamTls => "upstream tls failed",
            Cause::UpstreamClosed => "upstream closed",
            Cause::ResponseTruncated => "response truncated",
            Cause::UpstreamTimedOut => "upstream timeout",
            Cause::DeadlinePassed => "deadline passed",
            Cause::InvalidResponse => "invalid response",
            Cause::TunnelEnded => "tunnel ended",
            Cause::ClientGone => "client gone",
            Cause::BadRequest => "bad request",
            Cause::Internal => "internal error",
        }
    }
}

/// Why a request was refused (before it could be routed, but for a body that breaks): the
/// bounded `reason` label of `http_rejected_requests_total`, and the one place that says what
/// each refusal answers.
/// Every engine (the header guard, the fast path, the Pingora path) maps what it saw into
/// this set and answers `status()` with `error_page::rejection_answer`, then closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// A request line or header field that does not parse (a control byte, a space in a
    /// name, a bad version).
    #[error("malformed request header")]
    BadRequest,
    /// More header fields than the parser holds.
    #[error("too many header fields")]
    TooManyHeaders,
    /// Longer than `--max-request-header-bytes`.
    #[error("request header too large")]
    HeaderTooLarge,
    /// Not complete within `--request-header-timeout`.
    #[error("request header timeout")]
    HeaderTimeout,
    /// `Host` missing on HTTP/1.1, repeated, invalid, or an authority with user information.
    #[error("missing, repeated or invalid Host")]
    BadHost,
    /// Message framing two parsers could read differently: `Content-Length` with
    /// `Transfer-Encoding`, conflicting or invalid lengths, a final coding other than chunked.
    #[error("ambiguous message framing")]
    BadFraming,
    /// `CONNECT`: switchyard is not a forward proxy.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// A request body whose framing breaks after the header was routed (a bad chunk size):
    /// what was read before it may have been streamed to the endpoint already.
    #[error("malformed request body")]
    BadBody,
}

impl Rejection {
    pub const ALL: [Rejection; 8] = [
        Rejection::BadRequest,
        Rejection::TooManyHeaders,
        Rejection::HeaderTooLarge,
        Rejection::HeaderTimeout,
        Rejection::BadHost,
        Rejection::BadFraming,
        Rejection::MethodNotAllowed,
        Rejection::BadBody,
    ];

    /// The answer. Too many fields is "too large" as a whole (RFC 6585 §5), so 431 like an
    /// oversize header; a late header 408 (RFC 9110 §15.5.9); `CONNECT` 405; the rest 400.
    pub fn status(self) -> u16 {
        match self {
            Rejection::TooManyHeaders | Rejection::HeaderTooLarge => 431,
            Rejection::HeaderTimeout => 408,
            Rejection::MethodNotAllowed => 405,
            Rejection::BadRequest
            | Rejection::BadHost
            | Rejection::BadFraming
            | Rejection::BadBody => 400,
        }
    }

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Rejection::BadRequest => "bad_request",
            Rejection::TooManyHeaders => "too_many_headers",
            Rejection::HeaderTooLarge => "header_too_large",
            Rejection::HeaderTimeout => "header_timeout",
            Rejection::BadHost => "bad_host",
            Rejection::BadFraming => "bad_framing",
            Rejection::MethodNotAllowed => "method_not_allowed",
            Rejection::BadBody => "bad_body",
        }
    }

    /// Index into `ALL` (for handles resolved once per frontend).
    pub fn index(self) -> usize {
        self as usize
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
        // The client's own deadline answers like a timeout but is the client's budget.
        assert_eq!(Cause::DeadlinePassed.status(), Some(504));
        assert_eq!(Cause::DeadlinePassed.side(), Side::Client);
    }

    #[test]
    fn rejections_answer_400_408_431_405_with_distinct_labels() {
        let labels: std::collections::HashSet<_> =
            Rejection::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(labels.len(), Rejection::ALL.len());
        for (i, r) in Rejection::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
        assert_eq!(Rejection::TooManyHeaders.status(), 431);
        assert_eq!(Rejection::HeaderTooLarge.status(), 431);
        assert_eq!(Rejection::HeaderTimeout.status(), 408);
        assert_eq!(Rejection::BadHost.status(), 400);
        assert_eq!(Rejection::MethodNotAllowed.status(), 405);
    }
}

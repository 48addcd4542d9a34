//! gRPC's own request rules, pure: the `grpc-timeout` header read as the request's deadline
//! (gRPC over HTTP/2: `TimeoutValue TimeoutUnit`, at most 8 digits, units `H M S m u n`), and
//! how a call ended (`Ending`: its `grpc-status`, one of 18 bounded values for metrics and
//! logs). The answers to gRPC requests are `error_page::grpc_answer`. No I/O here.

use std::time::{Duration, Instant};

use crate::decide::cause::Cause;

/// Engines' timers may fire a hair before the instant asked for (Pingora's round to 10 ms):
/// a deadline this close counts as passed.
pub const DEADLINE_SLACK: Duration = Duration::from_millis(5);

/// Whether a call's deadline (from `grpc-timeout`, or a Gateway rule's request timeout) has
/// passed at `now`.
pub fn deadline_passed(deadline: Option<Instant>, now: Instant) -> bool {
    deadline.is_some_and(|d| now + DEADLINE_SLACK >= d)
}

/// `cause`, unless the call's own deadline has passed: a timeout then is the client's budget
/// running out, not the endpoint's fault (no ejection, no retry, DEADLINE_EXCEEDED).
pub fn blame(cause: Cause, deadline: Option<Instant>, now: Instant) -> Cause {
    match cause {
        Cause::UpstreamTimedOut | Cause::ConnectTimedOut if deadline_passed(deadline, now) => {
            Cause::DeadlinePassed
        }
        c => c,
    }
}

/// `grpc-timeout`: the time the client gives the call, or `None` when the header is absent or
/// malformed (the call then has no deadline of its own, as the gRPC spec says for a bad value).
pub fn timeout(value: Option<&[u8]>) -> Option<Duration> {
    let v = value?;
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
    Some(match unit {
        b"H" => Duration::from_secs(n.saturating_mul(3600)),
        b"M" => Duration::from_secs(n.saturating_mul(60)),
        b"S" => Duration::from_secs(n),
        b"m" => Duration::from_millis(n),
        b"u" => Duration::from_micros(n),
        b"n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The 17 gRPC status codes, by number (`grpc-status`), as the spec names them.
const CODES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// UNKNOWN's number: what a status outside the 17 codes is read as.
const UNKNOWN: u8 = 2;

/// How a gRPC call ended, as the client was told: one of the 17 status codes, or `none` when
/// the response carried no `grpc-status` (the stream broke, or the backend is not gRPC). A
/// bounded label (the `code` of `grpc_responses_total`, the access log's `grpc_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ending(u8);

impl Ending {
    /// No `grpc-status` was seen.
    pub const NONE: Ending = Ending(17);
    /// How many values there are: every index is below this.
    pub const COUNT: usize = 18;

    /// From a `grpc-status` value (header or trailer). A value that is not a known code counts
    /// as UNKNOWN, as the spec tells clients to read it.
    pub fn of(grpc_status: Option<&[u8]>) -> Ending {
        let Some(v) = grpc_status else {
            return Ending::NONE;
        };
        let code = std::str::from_utf8(v)
            .ok()
            .and_then(|s| s.trim().parse::<u8>().ok())
            .filter(|&c| usize::from(c) < CODES.len());
        Ending::code(code.unwrap_or(UNKNOWN))
    }

    /// A code switchyard sent itself (UNKNOWN if out of range).
    pub fn code(code: u8) -> Ending {
        Ending(if usize::from(code) < CODES.len() {
            code
        } else {
            UNKNOWN
        })
    }

    /// 0..=16 for a code, 17 for none.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }

    /// Every value, by index.
    pub fn all() -> impl Iterator<Item = Ending> {
        (0..Self::COUNT as u8).map(Ending)
    }

    /// `OK`, `NOT_FOUND`, ..., or `none`.
    pub fn as_str(self) -> &'static str {
        CODES.get(self.index()).copied().unwrap_or("none")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endings_are_bounded() {
        assert_eq!(Ending::of(Some(b"0")).as_str(), "OK");
        assert_eq!(Ending::of(Some(b"5")).as_str(), "NOT_FOUND");
        assert_eq!(Ending::of(Some(b"16")).as_str(), "UNAUTHENTICATED");
        for odd in [&b"17"[..], b"300", b"-1", b"x", b""] {
            assert_eq!(Ending::of(Some(odd)).as_str(), "UNKNOWN", "{odd:?}");
        }
        assert_eq!(Ending::of(None), Ending::NONE);
        assert_eq!(Ending::NONE.as_str(), "none");
        assert_eq!(Ending::code(4).as_str(), "DEADLINE_EXCEEDED");
        assert_eq!(Ending::code(99).as_str(), "UNKNOWN");
        let all: Vec<&str> = Ending::all().map(Ending::as_str).collect();
        assert_eq!(all.len(), Ending::COUNT);
        assert_eq!((all[4], all[17]), ("DEADLINE_EXCEEDED", "none"));
        assert!(Ending::all().enumerate().all(|(i, e)| e.index() == i));
    }

    #[test]
    fn a_timeout_past_the_deadline_is_the_clients() {
        let now = Instant::now();
        let past = Some(now);
        let later = now.checked_add(Duration::from_secs(1));
        assert_eq!(
            blame(Cause::UpstreamTimedOut, past, now),
            Cause::DeadlinePassed
        );
        assert_eq!(
            blame(Cause::ConnectTimedOut, past, now),
            Cause::DeadlinePassed
        );
        assert_eq!(
            blame(Cause::UpstreamTimedOut, later, now),
            Cause::UpstreamTimedOut
        );
        assert_eq!(
            blame(Cause::UpstreamTimedOut, None, now),
            Cause::UpstreamTimedOut
        );
        assert_eq!(
            blame(Cause::UpstreamClosed, past, now),
            Cause::UpstreamClosed
        );
    }

    #[test]
    fn grpc_timeout_values() {
        let t = |v: &str| timeout(Some(v.as_bytes()));
        assert_eq!(t("300m"), Some(Duration::from_millis(300)));
        assert_eq!(t("5S"), Some(Duration::from_secs(5)));
        assert_eq!(t("2M"), Some(Duration::from_secs(120)));
        assert_eq!(t("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(t("99999999n"), Some(Duration::from_nanos(99_999_999)));
        assert_eq!(t("10u"), Some(Duration::from_micros(10)));
        for bad in ["", "m", "123456789m", "5s", "-1S", "1.5S", "5"] {
            assert_eq!(t(bad), None, "{bad}");
        }
        assert_eq!(timeout(None), None);
    }
}

//! Whether a request may be served at all, asked by every front before routing (the HTTP/1
//! intake ahead of Pingora, Pingora's own HTTP/2 streams, the fast path's relay): what
//! switchyard refuses beyond what a protocol parser already refuses (Pingora's refuses
//! conflicting `Content-Length`s, a non-chunked final `Transfer-Encoding`, `Transfer-Encoding`
//! on HTTP/1.0, duplicate `Host`s and control bytes; the fast path's declines them). The
//! engines hand over what they read from their own representation (`Head`); the verdict and
//! the `Rejection` it names are written here once. Pure: no I/O, no allocation.

use crate::decide::cause::Rejection;
use crate::decide::target::valid_host;

/// What the verdict reads of a request's head, however the engine holds it.
pub struct Head<H, L> {
    /// HTTP/1.1 (where RFC 9112 requires `Host`); not HTTP/1.0 or HTTP/2.
    pub http11: bool,
    /// A `Transfer-Encoding` field is present.
    pub transfer_encoding: bool,
    /// Whether a `Content-Length` field was received; asked only when `transfer_encoding`
    /// (an engine may have to look at the raw header for it: Pingora drops the field).
    pub content_length: L,
    /// Every `Host` field's value, in order.
    pub hosts: H,
}

/// The verdict: a request carrying both `Content-Length` and `Transfer-Encoding` (Pingora
/// drops the length and forwards; RFC 9112 §6.3 allows refusing it, and refusing leaves no
/// framing for two parsers to disagree on), an HTTP/1.1 request without `Host`, more than
/// one `Host`, and a `Host` that is not a host name or address with an optional port (RFC
/// 9112 §3.2 asks for 400 in each case) are refused.
pub fn check<'h, H, L>(head: Head<H, L>) -> Result<(), Rejection>
where
    H: IntoIterator<Item = &'h [u8]>,
    L: FnOnce() -> bool,
{
    if head.transfer_encoding && (head.content_length)() {
        return Err(Rejection::BadFraming);
    }
    let mut hosts = head.hosts.into_iter();
    match (hosts.next(), hosts.next()) {
        (_, Some(_)) => Err(Rejection::BadHost),
        (None, None) if head.http11 => Err(Rejection::BadHost),
        (None, None) => Ok(()),
        (Some(h), None) if valid_host(h) => Ok(()),
        (Some(_), None) => Err(Rejection::BadHost),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(http11: bool, te: bool, cl: bool, hosts: &[&[u8]]) -> Result<(), Rejection> {
        check(Head {
            http11,
            transfer_encoding: te,
            content_length: || cl,
            hosts: hosts.iter().copied(),
        })
    }

    #[test]
    fn requests_with_ambiguous_framing_or_host_are_refused() {
        assert_eq!(verdict(true, false, false, &[b"a.test:8080"]), Ok(()));
        assert_eq!(verdict(true, true, false, &[b"a"]), Ok(()));
        assert_eq!(verdict(true, false, true, &[b"a"]), Ok(()));
        assert_eq!(
            verdict(true, true, true, &[b"a"]),
            Err(Rejection::BadFraming)
        );
        assert_eq!(verdict(true, false, false, &[]), Err(Rejection::BadHost));
        // HTTP/1.0 and HTTP/2 (`:authority`) need no `Host`.
        assert_eq!(verdict(false, false, false, &[]), Ok(()));
        assert_eq!(
            verdict(true, false, false, &[b"a", b"b"]),
            Err(Rejection::BadHost)
        );
        for bad in [
            &b"a b"[..],
            b"a/b",
            b"user@a",
            b"a:b:c",
            b"a:",
            b"[::1",
            b"a?b",
            b"a#b",
        ] {
            assert_eq!(
                verdict(true, false, false, &[bad]),
                Err(Rejection::BadHost),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        for good in [
            &b""[..],
            b"a.test",
            b"A.Test.:80",
            b"127.0.0.1:1",
            b"[::1]:8080",
            b"xn--bcher-kva.example",
        ] {
            assert!(valid_host(good), "{}", String::from_utf8_lossy(good));
        }
    }

    /// The framing check reads the raw header only when it must.
    #[test]
    fn content_length_is_looked_for_only_with_transfer_encoding() {
        let asked = std::cell::Cell::new(false);
        let head = Head {
            http11: true,
            transfer_encoding: false,
            content_length: || {
                asked.set(true);
                true
            },
            hosts: [&b"a"[..]],
        };
        assert_eq!(check(head), Ok(()));
        assert!(!asked.get());
    }
}

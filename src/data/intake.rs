//! The HTTP/1 request header on its way to Pingora's proxy: read whole by switchyard first,
//! so that a request Pingora's parser would refuse is refused here instead, with switchyard's
//! answer, an access-log line and `http_rejected_requests_total`.
//!
//! Pingora reads the header inside `HttpProxy::process_new_http` and, when it does not parse,
//! writes its own `400` (naming itself in `Server: Pingora`) and closes, with no hook for the
//! application (`handle_new_request` in pingora-proxy). So the header is read here, checked with
//! Pingora's own parser over the bytes in memory (the verdict is exactly the one Pingora would
//! reach, not a second parser's guess), plus switchyard's checks (`decide::validity`),
//! and only a header that passes is put back on the stream for Pingora's session to read.
//! A target in absolute form is rewritten first as `decide::target` says (RFC 9112 §3.2.2:
//! origin form, `Host` from the target's authority), because Pingora refuses a `Host` that
//! differs from the authority. Which status a refusal answers is `decide`'s (`Rejection`,
//! `error_page::rejection_answer`). This module routes nothing.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use pingora::protocols::Shutdown;
use pingora::protocols::http::ServerSession;
use pingora::server::ShutdownWatch;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::data::guard::{GuardedStream, HeaderEnd};
use crate::data::headers::check_request;
use crate::data::refusals::Refusals;
use crate::decide::cause::Rejection;
use crate::decide::target::{TargetForm, target_form};

/// Room made in the buffer before each read.
const READ_SIZE: usize = 8 * 1024;

/// How long writing a refusal may take before the connection is dropped anyway.
const ANSWER_WRITE: Duration = Duration::from_secs(5);

/// Answers `r` on `stream`, records it and closes the connection.
pub async fn refuse(refusals: &Refusals, stream: &mut GuardedStream, r: Rejection, head: &[u8]) {
    let started = stream.header_started().unwrap_or_else(Instant::now);
    let answer = refusals.answer(r);
    let write = async {
        stream.write_all(&answer).await?;
        stream.flush().await
    };
    let _ = tokio::time::timeout(ANSWER_WRITE, write).await;
    refusals.record(r, started, stream.client(), head);
    // As Pingora ends a connection: TLS gets its close_notify.
    Shutdown::shutdown(stream).await;
}

/// How reading a request header for Pingora's path ended.
pub enum Intake {
    /// A whole header that passed, put back on the stream: Pingora's session reads it next.
    Ready,
    /// The connection is done: closed by the client, idle past `--keep-alive-timeout`, shut
    /// down, or refused by the header guard (`GuardedStream::take_rejection` says; the bytes
    /// are what had been read of the header).
    Closed(BytesMut),
    /// Refused: answer, record and close (`Refusals::refuse`); the bytes are the header.
    Refused(Rejection, Bytes),
}

/// Reads the next request header from `stream` and checks it. `fresh`: no request has been
/// served on the connection yet, so the header guard's deadline bounds the wait; later ones
/// wait at most `keep_alive` and not past shutdown.
pub async fn read_header(
    stream: &mut GuardedStream,
    fresh: bool,
    keep_alive: Duration,
    shutdown: &mut ShutdownWatch,
) -> Intake {
    let mut buf = BytesMut::new();
    let mut end = HeaderEnd::default();
    let header_len = loop {
        buf.reserve(READ_SIZE);
        let before = buf.len();
        let read = if buf.is_empty() && !fresh {
            if *shutdown.borrow() {
                return Intake::Closed(buf);
            }
            tokio::select! {
                biased;
                r = stream.read_buf(&mut buf) => r,
                _ = shutdown.changed() => return Intake::Closed(buf),
                _ = tokio::time::sleep(keep_alive) => return Intake::Closed(buf),
            }
        } else {
            stream.read_buf(&mut buf).await
        };
        match read {
            Ok(0) | Err(_) => return Intake::Closed(buf),
            Ok(_) => {}
        }
        if let Some(n) = end.feed(&buf[before..]) {
            break before + n;
        }
    };
    let rest = buf.split_off(header_len);
    let received = buf.freeze();
    let head = match rewrite_absolute_form(&received) {
        None => received.clone(),
        Some(Ok(rewritten)) => Bytes::from(rewritten),
        Some(Err(r)) => return Intake::Refused(r, received),
    };
    if let Err(r) = check(&head).await {
        return Intake::Refused(r, received);
    }
    if rest.is_empty() {
        // The usual case: nothing followed the header yet, so it goes back without a copy.
        stream.unread(head);
    } else {
        let mut again = BytesMut::with_capacity(head.len() + rest.len());
        again.extend_from_slice(&head);
        again.extend_from_slice(&rest);
        stream.unread(again.freeze());
    }
    Intake::Ready
}

/// Pingora's verdict on `head` (its HTTP/1 parser and request validation, run over the bytes
/// in memory), then switchyard's own checks.
async fn check(head: &Bytes) -> Result<(), Rejection> {
    let mut probe = ServerSession::new_http1(Box::new(std::io::Cursor::new(head.to_vec())));
    match probe.read_request().await {
        Ok(true) => {}
        // Parsers disagree on where the header ends: Pingora reads it as it would anyway.
        Ok(false) => return Ok(()),
        Err(e) => return Err(rejection_of(&e)),
    }
    let req = probe.req_header();
    if req.method == http::Method::CONNECT {
        return Err(Rejection::MethodNotAllowed);
    }
    check_request(req, || head.clone())
}

/// The `Rejection` of an error of Pingora's request parser. Its errors are one type
/// (`InvalidHTTPHeader`) told apart by cause (httparse's error) and message; anything not
/// recognised is a plain bad request.
fn rejection_of(e: &pingora::Error) -> Rejection {
    if let Some(p) = e.root_cause().downcast_ref::<httparse::Error>() {
        return match p {
            httparse::Error::TooManyHeaders => Rejection::TooManyHeaders,
            _ => Rejection::BadRequest,
        };
    }
    let what = e.context.as_ref().map(|c| c.as_str()).unwrap_or_default();
    if what.contains("larger than") {
        Rejection::HeaderTooLarge
    } else if what.contains("Host") || what.contains("authority") || what.contains("userinfo") {
        Rejection::BadHost
    } else if what.contains("Content-Length") || what.contains("Transfer-Encoding") {
        Rejection::BadFraming
    } else {
        Rejection::BadRequest
    }
}

/// `head` with an absolute-form target rewritten as `decide::target::target_form` says: the
/// target in origin form, every received `Host` line dropped and `Host: <authority>` after
/// the request line; the other lines are kept byte for byte. `None`: not absolute form, or a
/// header this does not rewrite (folded lines, a request line that is not three words), which
/// Pingora then reads as it is.
pub fn rewrite_absolute_form(head: &[u8]) -> Option<Result<Vec<u8>, Rejection>> {
    let start = head.iter().position(|&b| b != b'\r' && b != b'\n')?;
    let line_end = start + head[start..].iter().position(|&b| b == b'\n')?;
    let line = head[start..line_end]
        .strip_suffix(b"\r")
        .unwrap_or(&head[start..line_end]);
    let mut words = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return None;
    };
    let target = std::str::from_utf8(target).ok()?;
    let (authority, origin) = match target_form(target) {
        TargetForm::Origin => return None,
        TargetForm::Invalid => return Some(Err(Rejection::BadHost)),
        TargetForm::Absolute { authority, origin } => (authority, origin),
    };
    let mut out = Vec::with_capacity(head.len());
    for part in [
        method,
        b" ",
        origin.as_bytes(),
        b" ",
        version,
        b"\r\nHost: ",
    ] {
        out.extend_from_slice(part);
    }
    out.extend_from_slice(authority.as_bytes());
    out.extend_from_slice(b"\r\n");
    let mut rest = &head[line_end + 1..];
    while !rest.is_empty() {
        let len = rest
            .iter()
            .position(|&b| b == b'\n')
            .map_or(rest.len(), |i| i + 1);
        let (field, next) = rest.split_at(len);
        if matches!(field.first(), Some(b' ' | b'\t')) {
            return None;
        }
        let name = &field[..field.iter().position(|&b| b == b':').unwrap_or(0)];
        if !name.eq_ignore_ascii_case(b"host") {
            out.extend_from_slice(field);
        }
        rest = next;
    }
    Some(Ok(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(head: &str) -> Option<Result<String, Rejection>> {
        rewrite_absolute_form(head.as_bytes())
            .map(|r| r.map(|v| String::from_utf8(v).unwrap_or_default()))
    }

    #[test]
    fn absolute_form_is_rewritten_to_origin_form_with_the_targets_host() {
        assert_eq!(rewritten("GET /p HTTP/1.1\r\nHost: a\r\n\r\n"), None);
        assert_eq!(
            rewritten("GET http://a.test/p/x?q HTTP/1.1\r\nHost: other\r\nX: 1\r\nhOsT: b\r\n\r\n"),
            Some(Ok(
                "GET /p/x?q HTTP/1.1\r\nHost: a.test\r\nX: 1\r\n\r\n".to_string()
            ))
        );
        assert_eq!(
            rewritten("\r\nGET http://a.test HTTP/1.0\nAccept: */*\n\n"),
            Some(Ok(
                "GET / HTTP/1.0\r\nHost: a.test\r\nAccept: */*\n\n".to_string()
            ))
        );
        assert_eq!(
            rewritten("GET http://u@a.test/ HTTP/1.1\r\n\r\n"),
            Some(Err(Rejection::BadHost))
        );
        // Folded lines are Pingora's to refuse.
        assert_eq!(
            rewritten("GET http://a/ HTTP/1.1\r\nHost: b\r\n c\r\n\r\n"),
            None
        );
    }

    async fn verdict(h: &str) -> Result<(), Rejection> {
        check(&Bytes::from(h.to_string())).await
    }

    #[tokio::test]
    async fn pingoras_verdicts_become_rejections() {
        assert_eq!(verdict("GET / HTTP/1.1\r\nHost: a\r\n\r\n").await, Ok(()));
        let many: String = (0..300).map(|i| format!("x{i}: y\r\n")).collect();
        assert_eq!(
            verdict(&format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n")).await,
            Err(Rejection::TooManyHeaders)
        );
        assert_eq!(
            verdict("GET / HTTP/1.1\r\nHost: a\r\nX: \x01\r\n\r\n").await,
            Err(Rejection::BadRequest)
        );
        assert_eq!(
            verdict("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n").await,
            Err(Rejection::BadHost)
        );
        assert_eq!(
            verdict("GET / HTTP/1.1\r\n\r\n").await,
            Err(Rejection::BadHost)
        );
        assert_eq!(
            verdict("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")
                .await,
            Err(Rejection::BadFraming)
        );
        assert_eq!(
            verdict("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n")
                .await,
            Err(Rejection::BadFraming)
        );
        assert_eq!(
            verdict("CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n").await,
            Err(Rejection::MethodNotAllowed)
        );
    }
}

//! The fast path's response side: a backend's response header parsed and checked (status,
//! framing, reuse) and rewritten for the client in one pass: hop-by-hop fields dropped, the
//! framing restated, `decide`'s edits carried out. Framing it is not sure of is invalid (a
//! 502), never guessed at. Pure: no I/O.

use std::io::Write as _;

use http::StatusCode;
use pingora::protocols::http::date::get_cached_date;

use crate::data::wire::fields::{is_connection_field, named_by_connection, parse_length};
use crate::data::wire::h1::request::Lines;
use crate::decide::edits::{Edit, Edits, Seen};
use crate::decide::error_page::Answer;

/// Most headers a backend's response may have.
pub const MAX_RESPONSE_HEADERS: usize = 256;
/// Largest response header accepted from a backend.
pub const MAX_RESPONSE_HEAD: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (HEAD, 204, 304).
    Empty,
    Length(u64),
    /// Chunked: relayed as it comes, its end found by `Chunks`.
    Chunked,
    /// Ends when the backend closes: relayed chunked to the client, which stays open.
    UntilClose,
}

#[derive(Debug)]
pub struct ResponseHead {
    pub len: usize,
    pub status: u16,
    pub framing: Framing,
    /// The backend connection may serve another request once the body is read.
    pub reusable: bool,
}

pub enum Head {
    Partial,
    Invalid,
    /// A 1xx response of this length, to pass on before the final one.
    Informational(usize),
    Final(ResponseHead),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ResponseKind {
    ContentLength,
    TransferEncoding,
    Connection,
    /// Other hop-by-hop headers, not forwarded.
    HopByHop,
    Date,
    Other,
}

fn response_kind(name: &str) -> ResponseKind {
    use ResponseKind::*;
    let is = |n: &str| name.eq_ignore_ascii_case(n);
    match name.len() {
        4 if is("date") => Date,
        10 if is("connection") => Connection,
        14 if is("content-length") => ContentLength,
        17 if is("transfer-encoding") => TransferEncoding,
        _ if is_connection_field(name.as_bytes()) => HopByHop,
        _ => Other,
    }
}

/// Parses the response header at the start of `buf` and writes the client's version of it
/// into `out`: hop-by-hop headers dropped, the framing restated, a missing `Date` added,
/// `edits` carried out (`close`: the client connection ends after this response).
pub fn response_head(
    buf: &[u8],
    head_request: bool,
    close: bool,
    edits: &Edits<'_>,
    out: &mut Vec<u8>,
) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Head::Partial,
        Err(_) => return Head::Invalid,
    };
    let (Some(status), Some(version)) = (resp.code, resp.version) else {
        return Head::Invalid;
    };
    if status == 101 || !(100..=599).contains(&status) {
        return Head::Invalid;
    }
    if status < 200 {
        return Head::Informational(len);
    }
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut other_coding = false;
    let mut upstream_close = version == 0;
    // A `Connection` value names a field other than `close` and `keep-alive` (rare: only
    // then is each field looked up among them).
    let mut names_fields = false;
    for h in resp.headers.iter() {
        match response_kind(h.name) {
            ResponseKind::ContentLength => {
                let Some(n) = parse_length(h.value) else {
                    return Head::Invalid;
                };
                if length.is_some_and(|l| l != n) {
                    return Head::Invalid;
                }
                length = Some(n);
            }
            ResponseKind::TransferEncoding => {
                if !chunked
                    && !other_coding
                    && h.value.trim_ascii().eq_ignore_ascii_case(b"chunked")
                {
                    chunked = true;
                } else {
                    other_coding = true;
                }
            }
            ResponseKind::Connection => {
                for token in h.value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                    if token.eq_ignore_ascii_case(b"close") {
                        upstream_close = true;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") {
                        upstream_close &= version != 0;
                    } else if !token.is_empty() {
                        // A field it names is the connection's: left out below. Such a
                        // backend connection is not reused.
                        upstream_close = true;
                        names_fields = true;
                    }
                }
            }
            ResponseKind::Date | ResponseKind::HopByHop | ResponseKind::Other => {}
        }
    }
    let framing = if head_request || status == 204 || status == 304 {
        Framing::Empty
    } else if chunked && !other_coding {
        Framing::Chunked
    } else if other_coding {
        Framing::UntilClose
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        Framing::UntilClose
    };
    // A length beside a transfer coding is ignored (RFC 9112 §6.3), but such a backend
    // connection is not trusted with another request.
    let ambiguous = length.is_some() && (chunked || other_coding);
    let reusable = !upstream_close && !ambiguous && framing != Framing::UntilClose;

    write_status(out, status, resp.reason.unwrap_or(""));
    let mut seen = Seen::default();
    let mut wrote_length = false;
    // Whether a Date went out: the backend's may be named by its `Connection` or removed by
    // an edit, and the client still gets one.
    let mut wrote_date = false;
    for h in resp.headers.iter() {
        let kind = response_kind(h.name);
        match kind {
            ResponseKind::ContentLength => {
                if matches!(framing, Framing::Length(_) | Framing::Empty) && !wrote_length {
                    wrote_length = true;
                    header(out, h.name, h.value);
                }
            }
            ResponseKind::TransferEncoding | ResponseKind::Connection | ResponseKind::HopByHop => {}
            ResponseKind::Date | ResponseKind::Other
                if names_fields
                    && named_by_connection(h.name.as_bytes(), connection_values(resp.headers)) => {}
            ResponseKind::Date | ResponseKind::Other => {
                let keep = match edits.touching(h.name.as_bytes()) {
                    None => true,
                    Some(edit) => seen.field(edit, h.value),
                };
                if keep {
                    wrote_date |= kind == ResponseKind::Date;
                    header(out, h.name, h.value);
                }
            }
        }
    }
    if !wrote_date {
        // RFC 9110 §6.6.1: a recipient with a clock adds the Date an origin left out.
        header(out, "Date", get_cached_date().as_bytes());
    }
    if matches!(framing, Framing::Chunked | Framing::UntilClose) {
        out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    }
    seen.additions(edits, &mut Lines(out));
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Head::Final(ResponseHead {
        len,
        status,
        framing,
        reusable,
    })
}

/// The values of the `Connection` fields among `headers`.
fn connection_values<'h>(
    headers: &'h [httparse::Header<'_>],
) -> impl Iterator<Item = &'h [u8]> + 'h {
    headers
        .iter()
        .filter(|h| response_kind(h.name) == ResponseKind::Connection)
        .map(|h| h.value)
}

pub fn write_status(out: &mut Vec<u8>, status: u16, reason: &str) {
    let reason = if reason.is_empty() {
        StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("")
    } else {
        reason
    };
    out.extend_from_slice(b"HTTP/1.1 ");
    // Three digits (RFC 9110 §15), written without `fmt` (a few hundred instructions on every
    // response).
    if (100..1000).contains(&status) {
        let digit = |d: u16| b'0' + (d % 10) as u8;
        out.extend_from_slice(&[digit(status / 100), digit(status / 10), digit(status)]);
    } else {
        let _ = write!(out, "{status}");
    }
    out.push(b' ');
    out.extend_from_slice(reason.as_bytes());
    out.extend_from_slice(b"\r\n");
}

pub fn header(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Writes an answer's status line and fields into `out` (the body is the caller's).
pub fn write_answer(out: &mut Vec<u8>, a: &Answer<'_>, close: bool) {
    out.clear();
    write_status(out, a.status, "");
    for edit in a.fields.iter() {
        if let Edit::Add(name, v) | Edit::AddIfAbsent(name, v) = *edit {
            let _ = write!(out, "{name}: ");
            v.write_to(out);
            out.extend_from_slice(b"\r\n");
        }
    }
    // RFC 9110 §6.6.1, as Pingora does for every response it writes.
    out.extend_from_slice(b"Date: ");
    out.extend_from_slice(get_cached_date().as_bytes());
    out.extend_from_slice(b"\r\n");
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_name_their_reason() {
        let line = |status, reason| {
            let mut out = Vec::new();
            write_status(&mut out, status, reason);
            String::from_utf8(out).unwrap_or_default()
        };
        assert_eq!(line(200, ""), "HTTP/1.1 200 OK\r\n");
        assert_eq!(line(404, "Nope"), "HTTP/1.1 404 Nope\r\n");
        assert_eq!(line(103, ""), "HTTP/1.1 103 Early Hints\r\n");
        assert_eq!(line(599, ""), "HTTP/1.1 599 \r\n");
        assert_eq!(line(999, "x"), "HTTP/1.1 999 x\r\n");
        assert_eq!(line(1000, "x"), "HTTP/1.1 1000 x\r\n");
    }

    fn rewritten(response: &str) -> String {
        let mut out = Vec::new();
        let edits = Edits::default();
        let Head::Final(_) = response_head(response.as_bytes(), false, false, &edits, &mut out)
        else {
            panic!("not a final head: {response:?}");
        };
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn fields_of_the_connection_are_not_passed_on() {
        let out = rewritten(
            "HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Hop\r\nx-hop: 1\r\n\
             Keep-Alive: timeout=5\r\nUpgrade: h2c\r\nTE: trailers\r\nx-kept: 2\r\n\
             Content-Length: 0\r\n\r\n",
        )
        .to_ascii_lowercase();
        for gone in ["x-hop:", "keep-alive:", "upgrade:", "te:", "connection:"] {
            assert!(
                !out.lines().any(|l| l.starts_with(gone)),
                "{gone} passed on: {out}"
            );
        }
        assert!(
            out.contains("x-kept: 2\r\n") && out.contains("content-length: 0\r\n"),
            "{out}"
        );
    }

    #[test]
    fn a_date_the_backend_sent_for_its_connection_only_is_replaced() {
        // Found by the http_response fuzz target: a `Connection` naming `Date` left the
        // client with none.
        let out = rewritten(
            "HTTP/1.1 200 OK\r\nConnection: Date\r\nDate: Mon, 07 Dec 2026 06:00:00 GMT\r\n\
             Content-Length: 0\r\n\r\n",
        )
        .to_ascii_lowercase();
        let dates = out.lines().filter(|l| l.starts_with("date:")).count();
        assert_eq!(dates, 1, "{out}");
        assert!(!out.contains("06:00:00"), "{out}");
    }
}

//! The fast path's request side: which requests it takes (plain HTTP/1.1 `GET` and `HEAD` in
//! origin form, exactly one valid `Host`, CRLF line endings, no body, no upgrade, no framing
//! header), parsed once in place with `httparse`, and the bytes the backend gets: the client's
//! own header lines with `decide`'s edits carried out. Anything it is not sure of is declined,
//! never guessed at: Pingora then serves the request, refusing what it must. Pure: no I/O.

use std::ops::Range;

use crate::data::wire::fields::is_connection_field;
use crate::decide::edits::{Edits, Seen, Sink};
use crate::decide::target::{has_dot_segment, valid_host};

/// Most headers a request may have here (Pingora takes the rest and refuses what it must).
pub const MAX_REQUEST_HEADERS: usize = 96;

/// What `parse_request` made of the bytes at the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parse {
    Request(Request),
    /// A request header that is not complete yet.
    Partial,
    /// Not for the fast path.
    Declined,
}

/// A request header taken by the fast path, as offsets into its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Length of the header, blank line included (and any empty lines before the request
    /// line, which are not forwarded: RFC 9112 §2.2).
    pub len: usize,
    /// `HEAD` (else `GET`).
    pub head: bool,
    pub target: Range<usize>,
    pub host: Range<usize>,
    /// `Connection: close`.
    pub close: bool,
}

impl Request {
    pub fn method(&self) -> &'static str {
        if self.head { "HEAD" } else { "GET" }
    }
}

/// One header line of a taken request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The whole line, CRLF included.
    pub line: Range<usize>,
    pub name: Range<usize>,
    pub value: Range<usize>,
    /// A hop-by-hop field of this connection (`Connection`): never forwarded.
    pub hop: bool,
}

/// What a header name means to this engine (its own capabilities, not request policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Host,
    Connection,
    /// A header that changes framing or the protocol: Pingora's business.
    Decline,
    Other,
}

fn kind(name: &str) -> Kind {
    let is = |n: &str| name.eq_ignore_ascii_case(n);
    match name.len() {
        4 if is("host") => Kind::Host,
        10 if is("connection") => Kind::Connection,
        // A body or an expectation, or any other field of the connection (`wire`).
        6 if is("expect") => Kind::Decline,
        14 if is("content-length") => Kind::Decline,
        _ if is_connection_field(name.as_bytes()) => Kind::Decline,
        _ => Kind::Other,
    }
}

/// Parses the request header at the start of `buf`; `fields` gets its header lines.
pub fn parse_request(buf: &[u8], fields: &mut Vec<Field>) -> Parse {
    fields.clear();
    let mut headers = [httparse::EMPTY_HEADER; MAX_REQUEST_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    let len = match parsed.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parse::Partial,
        Err(_) => return Parse::Declined,
    };
    if parsed.version != Some(1) {
        return Parse::Declined;
    }
    let (head, method) = match parsed.method {
        Some(m @ "GET") => (false, m),
        Some(m @ "HEAD") => (true, m),
        _ => return Parse::Declined,
    };
    let Some(path) = parsed.path.filter(|p| plain_target(p)) else {
        return Parse::Declined;
    };
    // Bare line feeds are legal but read differently by some backends: Pingora rewrites
    // the header; here it would be copied as it is.
    let head_bytes = &buf[..len];
    if head_bytes
        .iter()
        .enumerate()
        .any(|(i, &b)| b == b'\n' && (i == 0 || head_bytes[i - 1] != b'\r'))
    {
        return Parse::Declined;
    }
    let base = buf.as_ptr() as usize;
    let at = |s: &[u8]| s.as_ptr() as usize - base;
    let span = |s: &[u8]| at(s)..at(s) + s.len();
    // The request line starts at the method: httparse skips the empty lines a client may
    // send before it (RFC 9112 §2.2), and so must the copy.
    let line_start = at(method.as_bytes());
    let Some(line_end) = buf[line_start..len]
        .iter()
        .position(|&b| b == b'\n')
        .map(|i| line_start + i + 1)
    else {
        return Parse::Declined;
    };
    let mut host = None;
    let mut hosts = 0;
    let mut close = false;
    for h in parsed.headers.iter() {
        let start = at(h.name.as_bytes());
        let value_end = at(h.value) + h.value.len();
        let line = match buf[value_end..len].iter().position(|&b| b == b'\n') {
            Some(i) => start..value_end + i + 1,
            None => return Parse::Declined,
        };
        let mut hop = false;
        match kind(h.name) {
            Kind::Host => {
                hosts += 1;
                host = Some(span(h.value));
            }
            Kind::Connection => {
                let v = h.value.trim_ascii();
                if v.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if !v.eq_ignore_ascii_case(b"keep-alive") {
                    return Parse::Declined;
                }
                hop = true;
            }
            Kind::Decline => return Parse::Declined,
            Kind::Other => {}
        }
        fields.push(Field {
            line,
            name: span(h.name.as_bytes()),
            value: span(h.value),
            hop,
        });
    }
    let Some(host) = host.filter(|h| hosts == 1 && valid_host(&buf[h.clone()])) else {
        return Parse::Declined;
    };
    if fields.first().is_some_and(|f| f.line.start != line_end) {
        return Parse::Declined;
    }
    Parse::Request(Request {
        len,
        head,
        target: span(path.as_bytes()),
        host,
        close,
    })
}

/// A target this path forwards as it is: origin form, bytes `http::Uri` takes unchanged, no
/// dot-segment. A path with dot-segments is normalised before it is routed and forwarded;
/// Pingora's path does that (`decide::target`), so such a request is declined here.
pub fn plain_target(target: &str) -> bool {
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    target.starts_with('/') && target.bytes().all(target_byte) && !has_dot_segment(path)
}

/// Bytes a request target may hold on this path: visible ASCII that `http::Uri` takes as
/// it is (anything else goes to Pingora, which percent-encodes it).
fn target_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~:/?[]@!$&'()*+,;=%".contains(&b)
}

/// The text at `r` of a head whose bytes `parse_request` checked.
pub fn str_at(head: &[u8], r: Range<usize>) -> &str {
    std::str::from_utf8(&head[r]).unwrap_or("/")
}

/// Writes the request for the backend into `out`: the request line with `target` (the
/// client's, or the route's stripped one as `(slash, rest)`), the client's header lines with
/// `edits` carried out, hop-by-hop lines dropped.
pub fn build_request(
    out: &mut Vec<u8>,
    head: &[u8],
    req: &Request,
    fields: &[Field],
    target: Option<(&str, &str)>,
    edits: &Edits<'_>,
) {
    out.clear();
    out.extend_from_slice(req.method().as_bytes());
    out.push(b' ');
    match target {
        Some((slash, rest)) => {
            out.extend_from_slice(slash.as_bytes());
            out.extend_from_slice(rest.as_bytes());
        }
        None => out.extend_from_slice(&head[req.target.clone()]),
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut seen = Seen::default();
    // Runs of lines kept as they are go out in one copy.
    let mut run: Option<Range<usize>> = None;
    for f in fields {
        let name = &head[f.name.clone()];
        let value = &head[f.value.clone()];
        let keep = !f.hop
            && match edits.touching(name) {
                None => true,
                Some(edit) => seen.field(edit, value),
            };
        if keep {
            match &mut run {
                Some(r) if r.end == f.line.start => r.end = f.line.end,
                _ => {
                    if let Some(r) = run.take() {
                        out.extend_from_slice(&head[r]);
                    }
                    run = Some(f.line.clone());
                }
            }
        }
    }
    if let Some(r) = run {
        out.extend_from_slice(&head[r]);
    }
    seen.additions(edits, &mut Lines(out));
    out.extend_from_slice(b"\r\n");
}

/// Writes the request header an HTTP/1 backend gets for an HTTP/2 client's request into
/// `out`: the request line (`target`: the client's, or the route's stripped one as
/// `(slash, rest)`), `Host` from `:authority` (RFC 9113 §8.3.1; a `host` field then goes), the
/// fields as they came with `edits` carried out, split `cookie` fields joined into one
/// (RFC 9113 §8.2.3). False, with `out` to be discarded, for a request this path does not
/// carry (as `parse_request` declines them): a field that changes framing or names the
/// connection, or one that cannot be written as an HTTP/1 line. The caller checks the
/// client's target (`plain_target`).
pub fn build_request_from_fields(
    out: &mut Vec<u8>,
    method: &str,
    target: (&str, &str),
    authority: Option<&str>,
    fields: &http::HeaderMap,
    edits: &Edits<'_>,
) -> bool {
    out.clear();
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.0.as_bytes());
    out.extend_from_slice(target.1.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if let Some(a) = authority {
        Lines(out).add("host", |o| o.extend_from_slice(a.as_bytes()));
    }
    let cookies = fields.get_all(http::header::COOKIE);
    let joined: Vec<u8>;
    let cookie: Option<&[u8]> = match (cookies.iter().next(), cookies.iter().nth(1)) {
        (None, _) => None,
        (Some(one), None) => Some(one.as_bytes()),
        (Some(_), Some(_)) => {
            joined = cookies
                .iter()
                .enumerate()
                .fold(Vec::new(), |mut j, (i, v)| {
                    if i > 0 {
                        j.extend_from_slice(b"; ");
                    }
                    j.extend_from_slice(v.as_bytes());
                    j
                });
            Some(&joined)
        }
    };
    let mut seen = Seen::default();
    for (name, value) in fields {
        if name == http::header::COOKIE || (authority.is_some() && name == http::header::HOST) {
            continue;
        }
        let (name, value) = (name.as_str(), value.as_bytes());
        if kind(name) != Kind::Other && kind(name) != Kind::Host
            || value.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0)
        {
            return false;
        }
        let keep = match edits.touching(name.as_bytes()) {
            None => true,
            Some(edit) => seen.field(edit, value),
        };
        if keep {
            line(out, name.as_bytes(), value);
        }
    }
    if let Some(value) = cookie {
        let keep = match edits.touching(b"cookie") {
            None => true,
            Some(edit) => seen.field(edit, value),
        };
        if keep {
            line(out, b"cookie", value);
        }
    }
    seen.additions(edits, &mut Lines(out));
    out.extend_from_slice(b"\r\n");
    true
}

fn line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// HTTP/1 header lines: the fast path's requests and responses, the mirror's copies.
pub struct Lines<'o>(pub &'o mut Vec<u8>);

impl Sink for Lines<'_> {
    fn add(&mut self, name: &'static str, value: impl FnOnce(&mut Vec<u8>)) {
        self.0.extend_from_slice(name.as_bytes());
        self.0.extend_from_slice(b": ");
        value(self.0);
        self.0.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests;

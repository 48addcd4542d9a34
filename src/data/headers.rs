//! Requests and responses as `http` header maps — Pingora's `RequestHeader` and
//! `ResponseHeader`, which the fast path's HTTP/2 client streams present too — for the two
//! engines that hold them (Pingora's and the relay): `decide`'s edits carried out on a map
//! (`apply`), the request as a Gateway route's conditions read it (`PingoraView`), its host,
//! its target after a prefix strip, gRPC's trailers, and the validity verdict asked of
//! `decide::validity`. It decides nothing and holds no state.

use http::header::{CONTENT_LENGTH, CONTENT_TYPE, COOKIE, HOST};
use http::{HeaderName, HeaderValue, Uri};
use pingora::Result;
use pingora::http::{RequestHeader, ResponseHeader};

use crate::data::wire::fields::{names_content_length, parse_length};
use crate::decide::cause::Rejection;
use crate::decide::edits::{Edit, Edits, GRPC_STATUS};
use crate::decide::error_page::is_grpc;
use crate::decide::exchange;
use crate::decide::gateway::HeaderOp;
use crate::decide::grpc::Ending;
use crate::decide::validity;
use crate::table::gateway::RequestView;
use crate::table::sticky::{self, COOKIE_NAME};

// === what Pingora's engine and the relay read and write alike ===

/// A request's protocol as the access log names it.
pub(crate) fn protocol_name(v: http::Version) -> &'static str {
    match v {
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_2 => "HTTP/2.0",
        http::Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}

/// The request's host: its `host` field, else `:authority`.
pub(crate) fn host_of(req: &RequestHeader) -> Option<&[u8]> {
    req.headers
        .get(HOST)
        .map(HeaderValue::as_bytes)
        .or_else(|| req.uri.authority().map(|a| a.as_str().as_bytes()))
}

/// The target (path and query) that `pq` becomes with the route's prefix stripped or
/// replaced.
pub(crate) fn stripped_target(
    strip: &crate::table::matcher::Strip,
    pq: &str,
) -> std::result::Result<Uri, http::uri::InvalidUri> {
    let (slash, rest) = strip.apply(pq);
    if slash.is_empty() {
        Uri::try_from(rest)
    } else {
        Uri::try_from(format!("{slash}{rest}"))
    }
}

/// `target` (a path and query) as an HTTP/2 request's target, whose `:scheme` and
/// `:authority` it keeps from `from`: an HTTP/2 upstream reads the backend's `:authority`
/// from them when there is no `host`, so only the path and query change.
pub(crate) fn keep_origin(from: &Uri, target: Uri) -> Uri {
    match (from.scheme(), from.authority()) {
        (Some(scheme), Some(authority)) => {
            let mut parts = target.clone().into_parts();
            parts.scheme = Some(scheme.clone());
            parts.authority = Some(authority.clone());
            Uri::from_parts(parts).unwrap_or(target)
        }
        _ => target,
    }
}

/// The trailers that end a gRPC call broken mid-stream as gRPC says (its status after the
/// messages already sent), for switchyard's own `code`, and how the call ended.
pub(crate) fn grpc_trailers(code: u16) -> (http::HeaderMap, Ending) {
    let (status, message) = crate::decide::error_page::grpc_status(code);
    let mut trailers = http::HeaderMap::new();
    trailers.insert(GRPC_STATUS, HeaderValue::from(u16::from(status)));
    trailers.insert("grpc-message", HeaderValue::from_static(message));
    (trailers, Ending::code(status))
}

// === applying edits to header maps ===

/// Pingora's request and response headers, as far as `apply` needs them.
pub(crate) trait Fields {
    fn map(&self) -> &http::HeaderMap;
    fn insert(&mut self, name: &'static str, value: Vec<u8>) -> Result<()>;
    fn append(&mut self, name: &'static str, value: Vec<u8>) -> Result<()>;
    fn remove(&mut self, name: &'static str);
    /// A Gateway rule's header operation (names come from the route, not from code).
    fn apply_op(&mut self, op: HeaderOp<'_>) -> Result<()>;
}

macro_rules! impl_fields {
    ($t:ty) => {
        impl Fields for $t {
            fn map(&self) -> &http::HeaderMap {
                &self.headers
            }
            fn insert(&mut self, name: &'static str, value: Vec<u8>) -> Result<()> {
                self.insert_header(name, value).map(drop)
            }
            fn append(&mut self, name: &'static str, value: Vec<u8>) -> Result<()> {
                self.append_header(name, value).map(drop)
            }
            fn remove(&mut self, name: &'static str) {
                self.remove_header(name);
            }
            fn apply_op(&mut self, op: HeaderOp<'_>) -> Result<()> {
                match op {
                    HeaderOp::Set(n, v) => self.insert_header(n.to_string(), v).map(drop),
                    HeaderOp::Add(n, v) => self.append_header(n.to_string(), v).map(drop),
                    HeaderOp::Remove(n) => {
                        self.remove_header(n);
                        Ok(())
                    }
                }
            }
        }
    };
}
impl_fields!(RequestHeader);
impl_fields!(ResponseHeader);

/// The gRPC fields both engines look up on every call, made once: `http` parses a `&str` name
/// at each lookup.
pub(crate) static GRPC_STATUS_NAME: HeaderName = HeaderName::from_static(GRPC_STATUS);
pub(crate) static GRPC_TIMEOUT_NAME: HeaderName = HeaderName::from_static("grpc-timeout");

/// The first value of the field `name` (lower case, as the edits' names are), found by
/// comparing it with the names present: `http` parses a `&str` name before each lookup, which
/// costs more than these comparisons for the few fields a message has (1.7k of the 88k
/// instructions of a relayed gRPC call).
fn first<'m>(map: &'m http::HeaderMap, name: &str) -> Option<&'m HeaderValue> {
    map.iter().find(|(k, _)| k.as_str() == name).map(|(_, v)| v)
}

/// Carries out `edits` on a header map, in order, as each edit says (`Edit::keeps_existing`,
/// `writes`, `write_value`).
pub(crate) fn apply(fields: &mut impl Fields, edits: &Edits<'_>) -> Result<()> {
    for edit in edits.iter() {
        if *edit == Edit::StripCookie {
            strip_our_cookie(fields)?;
            continue;
        }
        let name = edit.name();
        // `Add` reads nothing: most edits are, and the lookup is skipped.
        let prev = edit
            .touches()
            .and_then(|n| first(fields.map(), n))
            .map(HeaderValue::as_bytes);
        let present = prev.is_some();
        let value = edit.writes(present).then(|| {
            let mut v = Vec::with_capacity(64);
            edit.write_value(prev, &mut v);
            v
        });
        match (value, edit.keeps_existing()) {
            (Some(v), true) => fields.append(name, v)?,
            (Some(v), false) => fields.insert(name, v)?,
            // Most messages have none of the fields removed (Pingora's removal parses the name
            // before it finds nothing).
            (None, false) if present => fields.remove(name),
            (None, _) => {}
        }
    }
    Ok(())
}

/// Joins several `cookie` fields into one, separated by "; " (RFC 9113 §8.2.3).
pub(crate) fn join_cookies(req: &mut RequestHeader) -> Result<()> {
    let mut values = req.headers.get_all(COOKIE).iter();
    let (Some(first), Some(_)) = (values.next(), values.next()) else {
        return Ok(());
    };
    let mut joined = first.as_bytes().to_vec();
    for v in req.headers.get_all(COOKIE).iter().skip(1) {
        joined.extend_from_slice(b"; ");
        joined.extend_from_slice(v.as_bytes());
    }
    req.insert_header(COOKIE, joined)?;
    Ok(())
}

/// Removes the load balancer's cookie from the forwarded request ("indirect" mode), keeping
/// every other cookie.
fn strip_our_cookie(req: &mut impl Fields) -> Result<()> {
    let has_ours = req
        .map()
        .get_all(COOKIE)
        .iter()
        .any(|v| sticky::find_cookie(v.as_bytes(), COOKIE_NAME).is_some());
    if !has_ours {
        return Ok(());
    }
    let kept: Vec<Vec<u8>> = req
        .map()
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| sticky::strip_cookie(v.as_bytes(), COOKIE_NAME))
        .collect();
    req.remove("cookie");
    for v in kept {
        req.append("cookie", v)?;
    }
    Ok(())
}

/// Pingora's request header as a Gateway route's conditions read it.
pub(crate) struct PingoraView<'a>(pub(crate) &'a RequestHeader);

impl RequestView for PingoraView<'_> {
    fn method(&self) -> &[u8] {
        self.0.method.as_str().as_bytes()
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        self.0.headers.get(name).map(HeaderValue::as_bytes)
    }

    fn cookie(&self, name: &str) -> Option<&[u8]> {
        self.0
            .headers
            .get_all(COOKIE)
            .iter()
            .find_map(|v| crate::table::sticky::find_cookie(v.as_bytes(), name))
    }

    fn query(&self) -> Option<&str> {
        self.0.uri.query()
    }
}

// === what decide::exchange reads ===

/// Whether `req` is a gRPC call (its content type).
pub(crate) fn grpc_of(req: &RequestHeader) -> bool {
    is_grpc(req.headers.get(CONTENT_TYPE).map(HeaderValue::as_bytes))
}

/// `req` as `decide::exchange` opens it: `path` is the path routed on, `path_and_query` the
/// target forwarded, `grpc` what `grpc_of` said.
pub(crate) fn exchange_request<'r>(
    req: &'r RequestHeader,
    view: &'r PingoraView<'r>,
    path: &'r str,
    path_and_query: &'r str,
    grpc: bool,
) -> exchange::Request<'r, PingoraView<'r>, impl Iterator<Item = &'r [u8]> + use<'r>> {
    exchange::Request {
        host: host_of(req),
        path,
        path_and_query,
        view,
        cookies: req
            .headers
            .get_all(COOKIE)
            .iter()
            .map(HeaderValue::as_bytes),
        grpc,
        grpc_timeout: req
            .headers
            .get(&GRPC_TIMEOUT_NAME)
            .map(HeaderValue::as_bytes),
        content_length: req
            .headers
            .get(CONTENT_LENGTH)
            .and_then(|v| parse_length(v.as_bytes())),
    }
}

// === request checks ===

/// `decide::validity`'s verdict on a request header as Pingora holds it (Pingora's parser has
/// already refused what it refuses). `raw_header` is the header as received, read only when a
/// `Transfer-Encoding` is present, because Pingora has removed the `Content-Length` by then.
pub fn check_request(
    req: &RequestHeader,
    raw_header: impl FnOnce() -> bytes::Bytes,
) -> std::result::Result<(), Rejection> {
    validity::check(validity::Head {
        http11: req.version == http::Version::HTTP_11,
        transfer_encoding: req.headers.contains_key(http::header::TRANSFER_ENCODING),
        content_length: || names_content_length(&raw_header()),
        hosts: req.headers.get_all(HOST).iter().map(HeaderValue::as_bytes),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::decide::edits::{ClientCert, Forwarding, Hidden, request_edits};

    /// A value that is no valid field is refused on Pingora's header.
    #[test]
    fn an_invalid_value_is_refused() {
        let fwd = Forwarding::tls(None, true);
        let cert = ClientCert::verified("/CN=a\nb");
        let edits = request_edits(&fwd, None, Hidden::default(), || cert);
        let mut pingora = RequestHeader::build("GET", b"/", None).unwrap();
        assert!(apply(&mut pingora, &edits).is_err());
    }
}

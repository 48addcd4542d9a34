//! The page served for requests that match no route (`--default-return-code`, `--error-page`)
//! and for entries without endpoints (503).
//!
//! The pages and the answers switchyard writes itself, as data for the engines: status, fields
//! and body. Loading `--error-page` is `ops::page_loader`'s (startup I/O); nothing here does I/O.

use bytes::Bytes;

use crate::decide::cause::Rejection;
use crate::decide::edits::{
    Edit, Edits, Forwarding, LOCATION, Value, answer_fields, grpc_answer_fields,
};

/// A fixed response: status, content type and body.
#[derive(Debug, Clone)]
pub struct ErrorPage {
    pub status: u16,
    pub content_type: String,
    pub body: Bytes,
}

impl ErrorPage {
    /// The built-in page for `status`.
    pub fn builtin(status: u16) -> ErrorPage {
        let reason = http::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("Error");
        let detail = match status {
            404 => "No route matches this host and path.",
            403 => "This route does not serve your address.",
            401 => "This route asks for a user name and password.",
            421 => {
                "This host asks for a client certificate this connection did not present: \
                 connect again naming this host (SNI), with a certificate it trusts."
            }
            503 => {
                "No endpoint can serve this request: its Service has no ready endpoint, or does not exist."
            }
            _ => "The load balancer could not serve this request.",
        };
        let body = format!(
            "<!DOCTYPE html>\n<html><head><title>{status} {reason}</title></head>\n\
             <body><h1>{status} {reason}</h1><p>{detail}</p><hr><p>switchyard</p></body></html>\n"
        );
        ErrorPage {
            status,
            content_type: "text/html; charset=utf-8".into(),
            body: Bytes::from(body),
        }
    }
}

impl ErrorPage {
    /// The page of a request a route's request limits refuse, with `status`.
    pub fn limited(status: u16) -> ErrorPage {
        let reason = http::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("Error");
        let body = format!(
            "<!DOCTYPE html>\n<html><head><title>{status} {reason}</title></head>\n\
             <body><h1>{status} {reason}</h1><p>Too many requests from your address for this \
             route; try again later.</p><hr><p>switchyard</p></body></html>\n"
        );
        ErrorPage {
            status,
            content_type: "text/html; charset=utf-8".into(),
            body: Bytes::from(body),
        }
    }

    /// `200 ok` in plain text: the traffic port's `/healthz` (`--traffic-healthz`), as the
    /// original's default backend answered it.
    pub fn healthz() -> ErrorPage {
        ErrorPage {
            status: 200,
            content_type: "text/plain; charset=utf-8".into(),
            body: Bytes::from_static(b"ok"),
        }
    }
}

/// An answer switchyard writes itself: status, fields and body.
#[derive(Debug, Clone, Copy)]
pub struct Answer<'a> {
    pub status: u16,
    pub fields: Edits<'a>,
    pub body: &'a [u8],
}

impl ErrorPage {
    /// This page as an answer on a frontend with `fwd`'s settings.
    pub fn answer<'a>(&'a self, fwd: &'a Forwarding) -> Answer<'a> {
        Answer {
            status: self.status,
            fields: answer_fields(fwd, Some(&self.content_type), self.body.len(), "no-cache"),
            body: &self.body,
        }
    }
}

/// A redirect to `location` (plain HTTP to HTTPS): an empty body, never cached.
pub fn redirect_answer<'a>(status: u16, location: &'a str, fwd: &'a Forwarding) -> Answer<'a> {
    let mut fields = answer_fields(fwd, None, 0, "no-cache");
    fields.push(Edit::Add(LOCATION, Value::Text(location)));
    Answer {
        status,
        fields,
        body: b"",
    }
}

/// The answer to a request that could not be proxied (`status` from `Cause::status`): an
/// empty body, never cached. The connection is closed after it.
pub fn failure_answer(status: u16, fwd: &Forwarding) -> Answer<'_> {
    Answer {
        status,
        fields: answer_fields(fwd, None, 0, "private, no-store"),
        body: b"",
    }
}

/// Whether a request speaks gRPC (`content-type: application/grpc`, with or without a
/// `+proto`-like suffix): switchyard's own answers to it are then gRPC statuses, which a gRPC
/// client can read, rather than pages it cannot.
pub fn is_grpc(content_type: Option<&[u8]>) -> bool {
    const GRPC: &[u8] = b"application/grpc";
    content_type.is_some_and(|ct| {
        ct.len() >= GRPC.len()
            && ct[..GRPC.len()].eq_ignore_ascii_case(GRPC)
            && matches!(ct.get(GRPC.len()), None | Some(b'+' | b';'))
    })
}

/// The gRPC status (code and message) of switchyard's own answer with HTTP `status`: the gRPC
/// project's HTTP-to-gRPC mapping (404 UNIMPLEMENTED, 502/503 UNAVAILABLE, ...), except 504,
/// which switchyard answers only when the backend timed out: DEADLINE_EXCEEDED.
pub fn grpc_status(status: u16) -> (u8, &'static str) {
    match status {
        400 => (13, "bad request"),
        401 => (16, "unauthenticated"),
        403 => (7, "permission denied"),
        404 => (12, "no route for this method"),
        429 | 502 | 503 => (14, "no endpoint available"),
        504 => (4, "the backend timed out"),
        500 => (13, "internal error"),
        _ => (2, "unknown error"),
    }
}

/// switchyard's answer `status` to a gRPC request, as gRPC's "trailers-only" response: HTTP
/// 200, `application/grpc`, the status in `grpc-status` / `grpc-message`, no body.
pub fn grpc_answer(status: u16, fwd: &Forwarding) -> Answer<'_> {
    let (code, message) = grpc_status(status);
    Answer {
        status: 200,
        fields: grpc_answer_fields(fwd, code, message),
        body: b"",
    }
}

/// The answer to a request refused before routing (`Rejection::status`): empty, never
/// cached, and the connection is closed after it, by every engine alike.
pub fn rejection_answer(r: Rejection, fwd: &Forwarding) -> Answer<'_> {
    failure_answer(r.status(), fwd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::edits::{Edit, Value};

    #[test]
    fn builtin_page_names_the_status() {
        let p = ErrorPage::builtin(404);
        assert_eq!(p.status, 404);
        assert!(
            std::str::from_utf8(&p.body)
                .unwrap()
                .contains("404 Not Found")
        );
    }

    #[test]
    fn answers_carry_length_no_cache_and_hsts_on_the_tls_port() {
        let p = ErrorPage::builtin(503);
        let tls = Forwarding::tls(Some(5), false);
        let a = p.answer(&tls);
        let fields: Vec<_> = a.fields.iter().copied().collect();
        assert!(fields.contains(&Edit::Add(
            "content-length",
            Value::Number(p.body.len() as u64)
        )));
        assert!(fields.contains(&Edit::Add(
            "strict-transport-security",
            Value::Text("max-age=5")
        )));
        let plain = Forwarding::plain();
        let f = failure_answer(502, &plain);
        assert_eq!(f.body, b"");
        assert_eq!(f.fields.iter().count(), 2);
    }

    #[test]
    fn grpc_requests_get_grpc_statuses() {
        use crate::decide::edits::{Edit, GRPC_STATUS, Value};
        assert!(is_grpc(Some(b"application/grpc")));
        assert!(is_grpc(Some(b"application/grpc+proto")));
        assert!(is_grpc(Some(b"Application/GRPC")));
        assert!(!is_grpc(Some(b"application/json")) && !is_grpc(None));
        assert!(!is_grpc(Some(b"application/grpcx")) && !is_grpc(Some(b"application/grp")));
        let fwd = Forwarding::plain();
        let a = grpc_answer(404, &fwd);
        assert_eq!((a.status, a.body.len()), (200, 0));
        let fields: Vec<_> = a.fields.iter().collect();
        assert!(fields.contains(&&Edit::Add(GRPC_STATUS, Value::Number(12))));
        assert_eq!(grpc_status(503).0, 14);
        assert_eq!(grpc_status(504).0, 4);
    }
}

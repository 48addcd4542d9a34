//! What a request is answered, once routing has decided: proxied (its target stripped or not)
//! or answered by switchyard itself — a page (404, 403, 503, `/healthz`), a redirect, a
//! Gateway rule's status — and in which form: a gRPC client gets a gRPC status it can read,
//! not a page. Every engine asks here and only writes the answer in its wire format, so the
//! engines cannot answer one route two ways (they had two copies, and only one knew gRPC).
//! Pure: no I/O.

use bytes::Bytes;

use crate::decide::attempt::{Route, https_location};
use crate::decide::edits::{self, Edit, Forwarding, Value, WWW_AUTHENTICATE, preflight_fields};
use crate::decide::error_page::{Answer, ErrorPage, failure_answer, grpc_answer, redirect_answer};
use crate::table::matcher::Strip;

/// The pages a frontend answers with itself.
#[derive(Debug, Clone)]
pub struct Pages {
    /// No route (`--default-return-code`, `--error-page`).
    pub not_found: ErrorPage,
    /// No endpoint takes the client.
    pub unavailable: ErrorPage,
    /// A route's source ranges refuse the client.
    pub forbidden: ErrorPage,
    /// A route's basic authentication does not admit the request.
    pub unauthorized: ErrorPage,
    /// A route's request limits refuse the client now (`--limit-status-code`).
    pub limited: ErrorPage,
    /// The host's listener verifies client certificates and this connection proved none to it.
    pub misdirected: ErrorPage,
    /// The host is an Ingress's that requires a valid client certificate and none was shown.
    pub bad_certificate: ErrorPage,
    /// `200 ok` for an unrouted `/healthz` (`--traffic-healthz`).
    pub healthz: ErrorPage,
}

impl Pages {
    /// The built-in pages, with `not_found` for unrouted requests.
    pub fn new(not_found: ErrorPage) -> Pages {
        Pages {
            not_found,
            unavailable: ErrorPage::builtin(503),
            forbidden: ErrorPage::builtin(403),
            unauthorized: ErrorPage::builtin(401),
            limited: ErrorPage::limited(503),
            misdirected: ErrorPage::builtin(421),
            bad_certificate: ErrorPage::builtin(400),
            healthz: ErrorPage::healthz(),
        }
    }
}

/// What an engine does with a routed request.
// Lives on the stack for one request and is matched at once; boxing the answer would allocate
// for every page and redirect.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Reply<'a> {
    /// Proxy it, its target's matched prefix removed or replaced when `strip` says so.
    Proxy { strip: Option<&'a Strip> },
    /// Answer it with this; `body` is `answer.body` as shared bytes (a page's, not copied);
    /// `close`: the client connection ends after it (a failure).
    Answer {
        answer: Answer<'a>,
        body: Bytes,
        close: bool,
    },
}

/// The request as `reply` needs it.
#[derive(Debug, Clone, Copy)]
pub struct Asked<'a> {
    /// The Host (or `:authority`) the client sent, for a redirect to HTTPS.
    pub host: &'a [u8],
    /// Its path and query as forwarded (dot-segments removed).
    pub path_and_query: &'a str,
    /// It speaks gRPC (`decide::error_page::is_grpc`).
    pub grpc: bool,
}

/// The reply to `route` for `asked` on a frontend with `pages` and `fwd`. `location` holds a
/// redirect's target, which the answer borrows.
pub fn reply<'a>(
    route: &'a Route,
    asked: Asked<'_>,
    pages: &'a Pages,
    fwd: &'a Forwarding,
    location: &'a mut String,
) -> Reply<'a> {
    let page = |page: &'a ErrorPage| {
        if asked.grpc {
            empty(grpc_answer(page.status, fwd), false)
        } else {
            Reply::Answer {
                answer: page.answer(fwd),
                body: page.body.clone(),
                close: false,
            }
        }
    };
    match route {
        Route::Proxy { strip } => Reply::Proxy {
            strip: strip.as_ref(),
        },
        Route::NotFound => page(&pages.not_found),
        Route::Unavailable => page(&pages.unavailable),
        Route::Forbidden => page(&pages.forbidden),
        Route::Limited => page(&pages.limited),
        Route::Misdirected => page(&pages.misdirected),
        Route::BadCertificate => page(&pages.bad_certificate),
        Route::Preflight {
            cors,
            origin,
            methods,
            headers,
        } => {
            let asked = edits::Asked {
                methods: methods.as_deref(),
                headers: headers.as_deref(),
            };
            empty(
                Answer {
                    status: cors.preflight_status(),
                    fields: preflight_fields(fwd, cors, origin, asked),
                    body: b"",
                },
                false,
            )
        }
        Route::Unauthorized { .. } if asked.grpc => empty(grpc_answer(401, fwd), false),
        Route::Unauthorized { challenge } => {
            let mut answer = pages.unauthorized.answer(fwd);
            if let Some(challenge) = challenge {
                answer
                    .fields
                    .push(Edit::Add(WWW_AUTHENTICATE, Value::Text(challenge)));
            }
            Reply::Answer {
                answer,
                body: pages.unauthorized.body.clone(),
                close: false,
            }
        }
        // A health probe is not a gRPC call, whatever it says it is.
        Route::Healthz => Reply::Answer {
            answer: pages.healthz.answer(fwd),
            body: pages.healthz.body.clone(),
            close: false,
        },
        &Route::Redirect { status, https_port } => {
            *location = https_location(asked.host, asked.path_and_query, https_port);
            empty(redirect_answer(status, location, fwd), false)
        }
        Route::Moved { status, location } => empty(redirect_answer(*status, location, fwd), false),
        &Route::Fail(status) if asked.grpc => empty(grpc_answer(status, fwd), true),
        &Route::Fail(status) => empty(failure_answer(status, fwd), true),
    }
}

/// An answer without a body.
fn empty(answer: Answer<'_>, close: bool) -> Reply<'_> {
    Reply::Answer {
        answer,
        body: Bytes::new(),
        close,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::edits::{Edit, GRPC_STATUS};

    fn asked(grpc: bool) -> Asked<'static> {
        Asked {
            host: b"shop.test",
            path_and_query: "/cart?x=1",
            grpc,
        }
    }

    fn answered(route: &Route, grpc: bool) -> (u16, bool, bool) {
        let pages = Pages::new(ErrorPage::builtin(404));
        let fwd = Forwarding::plain();
        let mut location = String::new();
        match reply(route, asked(grpc), &pages, &fwd, &mut location) {
            Reply::Proxy { .. } => panic!("{route:?} proxied"),
            Reply::Answer { answer, close, .. } => {
                let grpc_status = answer
                    .fields
                    .iter()
                    .any(|e| matches!(e, Edit::Add(name, _) if *name == GRPC_STATUS));
                (answer.status, close, grpc_status)
            }
        }
    }

    #[test]
    fn pages_and_failures_answer_grpc_clients_in_grpc() {
        for (route, status) in [
            (Route::NotFound, 404),
            (Route::Unavailable, 503),
            (Route::Forbidden, 403),
            (Route::Limited, 503),
            (Route::Misdirected, 421),
            (Route::BadCertificate, 400),
            (
                Route::Unauthorized {
                    challenge: Some("Basic realm=\"x\"".into()),
                },
                401,
            ),
            (Route::Fail(500), 500),
        ] {
            let (got, close, grpc) = answered(&route, false);
            assert_eq!((got, grpc), (status, false), "{route:?}");
            assert_eq!(close, matches!(route, Route::Fail(_)), "{route:?}");
            let (got, _, grpc) = answered(&route, true);
            assert_eq!(got, 200, "{route:?}: a gRPC status rides a 200");
            assert!(grpc, "{route:?}");
        }
        // A probe of /healthz is answered as one, even with a gRPC content type.
        assert_eq!(answered(&Route::Healthz, true), (200, false, false));
    }

    #[test]
    fn redirects_name_their_location() {
        let pages = Pages::new(ErrorPage::builtin(404));
        let fwd = Forwarding::plain();
        let mut location = String::new();
        let route = Route::Redirect {
            status: 308,
            https_port: 8443,
        };
        let Reply::Answer { answer, close, .. } =
            reply(&route, asked(false), &pages, &fwd, &mut location)
        else {
            panic!("proxied");
        };
        assert_eq!((answer.status, close), (308, false));
        assert_eq!(location, "https://shop.test:8443/cart?x=1");
        let moved = Route::Moved {
            status: 301,
            location: "https://elsewhere.test/".into(),
        };
        let mut unused = String::new();
        let Reply::Answer { answer, .. } = reply(&moved, asked(true), &pages, &fwd, &mut unused)
        else {
            panic!("proxied");
        };
        assert_eq!(answer.status, 301);
        assert!(matches!(
            reply(
                &Route::Proxy { strip: None },
                asked(false),
                &pages,
                &fwd,
                &mut unused
            ),
            Reply::Proxy { strip: None }
        ));
    }
}

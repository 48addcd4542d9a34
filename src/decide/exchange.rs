//! The opening of every HTTP exchange, whatever front it came through (Pingora's hooks, the
//! fast path's HTTP/1 loop, its HTTP/2 streams and relay): the route, the reply, the call's
//! deadline and the announced body's verdict, decided once from what the front read
//! (`Request`). Each engine used to build this itself, with an eight-argument `route_request`
//! in three places and the deadline and body limit in one of them only. What an engine can
//! carry (HTTP/1 or HTTP/2 to the backend, Gateway filters) stays the engine's business; what
//! the request gets is decided here. Pure: no I/O, no clock (the caller passes the time the
//! request arrived), no allocation beyond a redirect's location.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use crate::decide::attempt::{Attempt, Policy, Route, RouteError};
use crate::decide::edits::Forwarding;
use crate::decide::error_page::{failure_answer, grpc_answer};
use crate::decide::grpc;
use crate::decide::reply::{Asked, Pages, Reply, reply};
use crate::table::gateway::RequestView;
use crate::table::{Frontend, RoutingTable};

/// A request as a front hands it over: what routing, the reply and the exchange's limits
/// read, however the front holds it.
pub struct Request<'r, V, C> {
    /// The `Host` field, else `:authority`.
    pub host: Option<&'r [u8]>,
    /// The path routed on (dot-segments removed, as forwarded).
    pub path: &'r str,
    /// The path and query as forwarded (for a redirect to HTTPS).
    pub path_and_query: &'r str,
    /// The request as a Gateway route's conditions read it.
    pub view: &'r V,
    /// Every `cookie` field's value.
    pub cookies: C,
    /// Its content type says gRPC (`error_page::is_grpc`): switchyard's own answers are gRPC
    /// statuses, and `grpc-timeout` is its deadline.
    pub grpc: bool,
    /// Its `grpc-timeout` field, read when `grpc`.
    pub grpc_timeout: Option<&'r [u8]>,
    /// The body length it announced (`content-length`).
    pub content_length: Option<u64>,
}

/// What a frontend's exchanges read of its settings.
#[derive(Clone, Copy)]
pub struct Desk<'d> {
    pub frontend: Frontend,
    pub policy: &'d Policy,
    pub pages: &'d Pages,
    pub fwd: &'d Forwarding,
}

/// How an exchange goes on: its route, its deadline, and (`reply`) what the client gets.
#[derive(Debug)]
pub struct Opened {
    pub route: Route,
    /// No wait of the exchange outlives this: the earlier of a gRPC call's `grpc-timeout` and
    /// its Gateway rule's `timeouts.request`, from when the request arrived.
    pub deadline: Option<Instant>,
    grpc: bool,
    /// The announced body is larger than the route allows (`proxy-body-size`).
    too_large: bool,
}

/// Routes `req` for `attempt` on the frontend `desk` describes, and decides what follows: the
/// deadline, and whether an announced body is refused before it is read. `started`: when the
/// request's header had been read.
pub fn open<'c, V: RequestView>(
    attempt: &mut Attempt,
    table: Arc<RoutingTable>,
    desk: Desk<'_>,
    req: Request<'_, V, impl Iterator<Item = &'c [u8]>>,
    started: Instant,
) -> Result<Opened, RouteError> {
    let route = attempt.route_request(
        table,
        desk.frontend,
        req.host,
        req.path,
        req.view,
        req.cookies,
        desk.policy,
        started,
    )?;
    let call = req
        .grpc
        .then(|| grpc::timeout(req.grpc_timeout))
        .flatten()
        .and_then(|t| started.checked_add(t));
    let rule = attempt
        .gateway_rule()
        .and_then(|(r, _)| r.request_timeout)
        .and_then(|t| started.checked_add(t));
    let deadline = match (call, rule) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let too_large = matches!(route, Route::Proxy { .. })
        && req
            .content_length
            .is_some_and(|len| !attempt.body_allowed(len));
    Ok(Opened {
        route,
        deadline,
        grpc: req.grpc,
        too_large,
    })
}

impl Opened {
    /// What the client gets: proxied, or switchyard's own answer (a page, a redirect, a
    /// Gateway status, a failure; in gRPC form for a gRPC call), or `413` for a body announced
    /// too large, which ends the connection. `host` and `path_and_query` are the request's
    /// (a redirect to HTTPS names them); `location` holds a redirect's target, which the
    /// answer borrows.
    pub fn reply<'a>(
        &'a self,
        host: &[u8],
        path_and_query: &str,
        desk: Desk<'a>,
        location: &'a mut String,
    ) -> Reply<'a> {
        if self.too_large {
            let answer = if self.grpc {
                grpc_answer(413, desk.fwd)
            } else {
                failure_answer(413, desk.fwd)
            };
            return Reply::Answer {
                answer,
                body: Bytes::new(),
                close: true,
            };
        }
        let asked = Asked {
            host,
            path_and_query,
            grpc: self.grpc,
        };
        reply(&self.route, asked, desk.pages, desk.fwd, location)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use super::*;
    use crate::decide::edits::{Edit, GRPC_STATUS};
    use crate::decide::error_page::ErrorPage;
    use crate::table::Entry;
    use crate::table::gateway::BareRequest;
    use crate::table::policy::RoutePolicy;

    /// `/small` -> entry 0 with a 5-byte body limit; nothing else.
    fn table() -> Arc<RoutingTable> {
        let mut policy = RoutePolicy::of("ns/small");
        policy.max_body = Some(5);
        let entry = Entry::fixture("small", Frontend::Http, &["192.0.2.10:80"]);
        RoutingTable::fixture(entry, "/small", false, Some(policy))
    }

    struct Case {
        path: &'static str,
        grpc: bool,
        length: Option<u64>,
    }

    /// The status and connection close of the reply, whether it is in gRPC form, and the
    /// deadline's distance from the start; `None` for a proxied request.
    fn opened(case: &Case) -> (Option<(u16, bool, bool)>, Option<Duration>) {
        let policy = Policy::new(3, Duration::from_secs(10), true);
        let pages = Pages::new(ErrorPage::builtin(404));
        let fwd = Forwarding::plain();
        let desk = Desk {
            frontend: Frontend::Http,
            policy: &policy,
            pages: &pages,
            fwd: &fwd,
        };
        let started = Instant::now();
        let mut attempt = Attempt::new(None);
        let req = Request {
            host: Some(b"a.test"),
            path: case.path,
            path_and_query: case.path,
            view: &BareRequest::GET,
            cookies: std::iter::empty(),
            grpc: case.grpc,
            grpc_timeout: Some(b"5S"),
            content_length: case.length,
        };
        let opened = open(&mut attempt, table(), desk, req, started).unwrap();
        let deadline = opened.deadline.map(|d| d - started);
        let mut location = String::new();
        let reply = match opened.reply(b"a.test", case.path, desk, &mut location) {
            Reply::Proxy { .. } => None,
            Reply::Answer { answer, close, .. } => {
                let grpc = answer
                    .fields
                    .iter()
                    .any(|e| matches!(e, Edit::Add(name, _) if *name == GRPC_STATUS));
                Some((answer.status, close, grpc))
            }
        };
        (reply, deadline)
    }

    #[test]
    fn an_unrouted_request_gets_the_not_found_page_in_its_own_form() {
        let plain = Case {
            path: "/elsewhere",
            grpc: false,
            length: Some(10),
        };
        // A plain request's grpc-timeout is not read.
        assert_eq!(opened(&plain), (Some((404, false, false)), None));
        let call = Case {
            grpc: true,
            ..plain
        };
        assert_eq!(
            opened(&call),
            (Some((200, false, true)), Some(Duration::from_secs(5)))
        );
    }

    #[test]
    fn a_body_announced_past_the_routes_limit_is_refused_before_it_is_read() {
        let fits = Case {
            path: "/small",
            grpc: false,
            length: Some(5),
        };
        assert_eq!(opened(&fits), (None, None));
        let unannounced = Case {
            length: None,
            ..fits
        };
        assert_eq!(opened(&unannounced), (None, None));
        let large = Case {
            length: Some(6),
            ..fits
        };
        assert_eq!(opened(&large), (Some((413, true, false)), None));
        let call = Case {
            grpc: true,
            ..large
        };
        assert_eq!(
            opened(&call),
            (Some((200, true, true)), Some(Duration::from_secs(5)))
        );
    }
}

//! External authentication as ingress-nginx carries it out (`auth-url`, nginx's
//! `auth_request`): what the subrequest to the authentication service says beyond the
//! client's own fields, and what its answer means — a `2xx` lets the request through with the
//! answer's `auth-response-headers` set on it, a `401` is passed on (or becomes a redirect to
//! `auth-signin`), a `403` is passed on, anything else, or no answer, is a `500`; and which
//! answers are given again without asking (`auth-cache-key`, `auth-cache-duration`). Written
//! once; an engine only carries the subrequest (`data::external_auth`). Pure: no I/O; the
//! clock is the caller's (`now`). No Kubernetes, Pingora or tokio.

use std::sync::Arc;
use std::time::Instant;

use crate::decide::edits::{CONTENT_LENGTH, HOST, SET_COOKIE, WWW_AUTHENTICATE};
use crate::decide::gateway::HeaderOp;
use crate::decide::hash_key::{Keyed, key_bytes};
use crate::decide::location::fill_location;
use crate::table::external_auth::{AuthCache, CACHE_MAX, ExternalAuth};
use crate::table::gateway::RequestView;

/// The URL the client asked for, as the service sees it: `$scheme://$http_host$request_uri`.
pub const X_ORIGINAL_URL: &str = "x-original-url";
pub const X_ORIGINAL_METHOD: &str = "x-original-method";
/// ingress-nginx's mark on its subrequests, kept: services written for it may look for it.
pub const X_SENT_FROM: &str = "x-sent-from";
pub const X_AUTH_REQUEST_REDIRECT: &str = "x-auth-request-redirect";

/// The subrequest's fields switchyard writes itself, in order (the client's own fields of these
/// names are not passed on: `replaced`).
pub fn subrequest_fields<'a>(
    auth: &'a ExternalAuth,
    https: bool,
    host: &str,
    method: &'a str,
    request_uri: &'a str,
) -> [(&'static str, Box<str>); 5] {
    let scheme = if https { "https" } else { "http" };
    let redirect = auth.request_redirect.as_deref().unwrap_or(request_uri);
    [
        (HOST, auth.host.clone()),
        (
            X_ORIGINAL_URL,
            format!("{scheme}://{host}{request_uri}").into(),
        ),
        (X_ORIGINAL_METHOD, method.into()),
        (X_SENT_FROM, "nginx-ingress-controller".into()),
        (X_AUTH_REQUEST_REDIRECT, redirect.into()),
    ]
}

/// Whether a client's field (lower case) is left off the subrequest because switchyard
/// writes it (`subrequest_fields`) or because the subrequest has no body (nginx's
/// `proxy_pass_request_body off`: no length, no `Expect`, no trailers). Connection fields are
/// the wire's business and left off there.
pub fn replaced(name: &[u8]) -> bool {
    [
        HOST,
        X_ORIGINAL_URL,
        X_ORIGINAL_METHOD,
        X_SENT_FROM,
        X_AUTH_REQUEST_REDIRECT,
        CONTENT_LENGTH,
        "expect",
        "trailer",
    ]
    .iter()
    .any(|n| name.eq_ignore_ascii_case(n.as_bytes()))
}

pub use crate::table::external_auth::AuthAnswer;

/// The values of field `name` (lower case) of `answer` that are text.
fn text<'a>(answer: &'a AuthAnswer, name: &'a str) -> impl Iterator<Item = &'a str> {
    answer
        .fields
        .iter()
        .filter(move |(n, _)| &**n == name)
        .filter_map(|(_, v)| std::str::from_utf8(v).ok())
}

/// The cache key of a request: the SHA-1 digest of `auth-cache-key` filled in from it (as
/// nginx's `proxy_cache_key` is the filled-in text). A digest, not a fast hash: two keys
/// that collide would hand one client's answer to another.
pub fn cache_key(cache: &AuthCache, req: &impl RequestView, k: &Keyed<'_>) -> [u8; 20] {
    use sha1::Digest as _;
    let mut h = sha1::Sha1::new();
    key_bytes(&cache.key, req, k, |b| h.update(b));
    h.finalize().into()
}

/// The answer kept for `key`, if one is and has not expired at `now`.
pub fn cached(cache: &AuthCache, key: &[u8; 20], now: Instant) -> Option<Arc<AuthAnswer>> {
    let kept = cache.kept.0.lock().ok()?;
    kept.get(key)
        .filter(|(until, _)| *until > now)
        .map(|(_, a)| Arc::clone(a))
}

/// Keeps `answer` for `key` as long as its status is kept (`auth-cache-duration`), within
/// `CACHE_MAX` answers.
pub fn keep(cache: &AuthCache, key: [u8; 20], answer: &AuthAnswer, now: Instant) {
    let Some(d) = cache.duration(answer.status) else {
        return;
    };
    let Ok(mut kept) = cache.kept.0.lock() else {
        return;
    };
    if kept.len() >= CACHE_MAX && !kept.contains_key(&key) {
        kept.retain(|_, (until, _)| *until > now);
        if kept.len() >= CACHE_MAX {
            kept.clear();
        }
    }
    kept.insert(key, (now + d, Arc::new(answer.clone())));
}

/// What becomes of a request once its service answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Proxied, with these changes.
    Allowed(Granted),
    /// Answered by switchyard instead.
    Denied(Denial),
}

/// How a refused request is answered (`Route::from` names the answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// `401`, with the service's `WWW-Authenticate` if it gave one.
    Unauthorized(Option<Arc<str>>),
    /// `302` to sign in, at this location.
    SignIn(String),
    /// `403`.
    Forbidden,
    /// `500`: the service could not be asked, or answered what it may not.
    Failed,
}

/// What an allowing answer gives the exchange.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Granted {
    /// Fields set on the request to the backend: the answer's value, or `None` when it had
    /// none (the client's own is removed).
    pub fields: Vec<(Box<str>, Option<Box<str>>)>,
    /// The answer's `Set-Cookie` values, for the client's response.
    pub cookies: Vec<Box<str>>,
    /// The cookies go with every response, not only with a success or a redirect.
    pub always_set_cookie: bool,
}

impl Granted {
    /// The request's header operations (after every route's edits).
    pub fn request_ops(&self) -> impl Iterator<Item = HeaderOp<'_>> {
        self.fields.iter().map(|(name, value)| match value {
            Some(v) => HeaderOp::Set(name, v),
            None => HeaderOp::Remove(name),
        })
    }

    /// The response's header operations for a response of `status`: the service's cookies,
    /// as nginx's `add_header` adds them (only to `200`, `201`, `204`, `206`, `301`-`304`,
    /// `307`, `308` unless `auth-always-set-cookie`).
    pub fn response_ops(&self, status: u16) -> impl Iterator<Item = HeaderOp<'_>> {
        let due = self.always_set_cookie
            || matches!(status, 200 | 201 | 204 | 206 | 301..=304 | 307 | 308);
        self.cookies
            .iter()
            .filter(move |_| due)
            .map(|c| HeaderOp::Add(SET_COOKIE, c))
    }
}

/// The request whose service answered `answer` (`None`: no answer — the service could not be
/// reached, timed out or answered something that is not HTTP). `https`, `host`, `path`,
/// `query`: the client's request, for a redirect to sign in.
pub fn verdict(
    auth: &ExternalAuth,
    answer: Option<&AuthAnswer>,
    https: bool,
    host: Option<&[u8]>,
    path: &str,
    query: Option<&str>,
) -> Verdict {
    let Some(answer) = answer else {
        return Verdict::Denied(Denial::Failed);
    };
    match answer.status {
        200..=299 => {
            let fields = auth
                .response_headers
                .iter()
                .map(|name| {
                    let value = text(answer, name).next().map(|v| Box::from(v.trim()));
                    (name.clone(), value)
                })
                .collect();
            Verdict::Allowed(Granted {
                fields,
                cookies: text(answer, SET_COOKIE).map(Box::from).collect(),
                always_set_cookie: auth.always_set_cookie,
            })
        }
        401 => match &auth.signin {
            Some(signin) => Verdict::Denied(Denial::SignIn(fill_location(
                signin, https, host, path, query,
            ))),
            None => Verdict::Denied(Denial::Unauthorized(
                text(answer, WWW_AUTHENTICATE).next().map(Arc::from),
            )),
        },
        403 => Verdict::Denied(Denial::Forbidden),
        _ => Verdict::Denied(Denial::Failed),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::table::external_auth::{AuthTarget, signin_with_redirect};
    use crate::table::policy::Location;

    fn auth(signin: Option<&str>) -> ExternalAuth {
        ExternalAuth {
            url: "http://authn.auth.svc/check".into(),
            target: AuthTarget::Address("127.0.0.1:9".parse().unwrap()),
            host: "authn.auth.svc".into(),
            path: "/check".into(),
            method: "GET".into(),
            signin: signin.map(|s| Location::parse(&signin_with_redirect(s, "")).unwrap()),
            response_headers: vec!["x-user".into(), "x-groups".into()].into(),
            request_redirect: None,
            always_set_cookie: false,
            cache: None,
        }
    }

    struct Req(Option<&'static str>);

    impl RequestView for Req {
        fn method(&self) -> &[u8] {
            b"GET"
        }
        fn header(&self, name: &str) -> Option<&[u8]> {
            (name == "authorization").then_some(self.0?.as_bytes())
        }
        fn cookie(&self, _: &str) -> Option<&[u8]> {
            None
        }
        fn query(&self) -> Option<&str> {
            None
        }
    }

    #[test]
    fn answers_are_kept_per_key_for_their_status_s_duration() {
        use crate::table::hash_key::HashKey;
        use std::time::Duration;
        let cache = AuthCache {
            key: HashKey::parse("$http_authorization").unwrap(),
            durations: Box::new([(Some(Box::from([200].as_slice())), Duration::from_secs(60))]),
            kept: Default::default(),
        };
        let keyed = Keyed {
            client: None,
            host: Some(b"a.test"),
            path: "/",
        };
        let (alice, bob) = (Req(Some("Bearer alice")), Req(Some("Bearer bob")));
        let (ka, kb) = (
            cache_key(&cache, &alice, &keyed),
            cache_key(&cache, &bob, &keyed),
        );
        assert_ne!(ka, kb);
        assert_eq!(ka, cache_key(&cache, &alice, &keyed));
        let now = Instant::now();
        keep(&cache, ka, &answer(200, &[("x-user", "alice")]), now);
        keep(&cache, kb, &answer(403, &[]), now);
        assert_eq!(cached(&cache, &ka, now).unwrap().status, 200);
        // A status not named is not kept; a kept answer expires.
        assert!(cached(&cache, &kb, now).is_none());
        assert!(cached(&cache, &ka, now + Duration::from_secs(61)).is_none());
        // Bounded: past CACHE_MAX the expired go, then all.
        for i in 0..CACHE_MAX as u32 + 1 {
            let mut k = [0u8; 20];
            k[..4].copy_from_slice(&i.to_be_bytes());
            keep(&cache, k, &answer(200, &[]), now);
        }
        assert!(cache.kept.0.lock().unwrap().len() <= CACHE_MAX);
    }

    fn answer(status: u16, fields: &[(&str, &str)]) -> AuthAnswer {
        AuthAnswer {
            status,
            fields: fields
                .iter()
                .map(|(n, v)| (Box::from(*n), Box::from(v.as_bytes())))
                .collect(),
        }
    }

    fn decide(a: &ExternalAuth, answer: Option<&AuthAnswer>) -> Verdict {
        verdict(a, answer, true, Some(b"app.test"), "/a b", Some("x=1"))
    }

    #[test]
    fn an_allowing_answer_vouches_for_its_fields_and_no_client_does() {
        let a = auth(None);
        let ok = answer(
            200,
            &[
                ("x-user", "ann"),
                ("set-cookie", "s=1"),
                ("set-cookie", "t=2"),
            ],
        );
        let Verdict::Allowed(g) = decide(&a, Some(&ok)) else {
            panic!("not allowed")
        };
        let ops: Vec<_> = g.request_ops().collect();
        // x-groups is not in the answer: the client's own is removed.
        assert_eq!(
            ops,
            [HeaderOp::Set("x-user", "ann"), HeaderOp::Remove("x-groups")]
        );
        assert_eq!(g.response_ops(200).count(), 2);
        assert_eq!(g.response_ops(500).count(), 0);
        let always = Granted {
            always_set_cookie: true,
            ..g
        };
        assert_eq!(always.response_ops(500).count(), 2);
        assert!(matches!(
            decide(&a, Some(&answer(204, &[]))),
            Verdict::Allowed(_)
        ));
    }

    #[test]
    fn denials_as_nginx_auth_request_gives_them() {
        let a = auth(None);
        assert_eq!(
            decide(&a, Some(&answer(401, &[("www-authenticate", "Bearer")]))),
            Verdict::Denied(Denial::Unauthorized(Some("Bearer".into())))
        );
        assert_eq!(
            decide(&a, Some(&answer(401, &[]))),
            Verdict::Denied(Denial::Unauthorized(None))
        );
        assert_eq!(
            decide(&a, Some(&answer(403, &[]))),
            Verdict::Denied(Denial::Forbidden)
        );
        for status in [302, 404, 500, 503] {
            assert_eq!(
                decide(&a, Some(&answer(status, &[]))),
                Verdict::Denied(Denial::Failed),
                "{status}"
            );
        }
        assert_eq!(decide(&a, None), Verdict::Denied(Denial::Failed));
        // With auth-signin, a 401 sends the client to sign in, back to where it was going.
        let s = auth(Some("https://login.test/start"));
        assert_eq!(
            decide(&s, Some(&answer(401, &[]))),
            Verdict::Denied(Denial::SignIn(
                "https://login.test/start?rd=https://app.test%2Fa%20b%3Fx%3D1".into()
            ))
        );
        assert_eq!(
            decide(&s, Some(&answer(403, &[]))),
            Verdict::Denied(Denial::Forbidden)
        );
    }

    #[test]
    fn the_subrequest_says_what_was_asked_for() {
        let a = auth(None);
        let fields = subrequest_fields(&a, false, "app.test:8080", "POST", "/p?q=1");
        let get = |n: &str| {
            fields
                .iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.to_string())
        };
        assert_eq!(get(HOST).as_deref(), Some("authn.auth.svc"));
        assert_eq!(
            get(X_ORIGINAL_URL).as_deref(),
            Some("http://app.test:8080/p?q=1")
        );
        assert_eq!(get(X_ORIGINAL_METHOD).as_deref(), Some("POST"));
        assert_eq!(get(X_AUTH_REQUEST_REDIRECT).as_deref(), Some("/p?q=1"));
        for name in ["Host", "content-length", "X-Original-URL", "expect"] {
            assert!(replaced(name.as_bytes()), "{name}");
        }
        for name in ["cookie", "authorization", "x-user"] {
            assert!(!replaced(name.as_bytes()), "{name}");
        }
    }
}

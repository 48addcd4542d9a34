//! What an Ingress adds to the requests of its rules (`RoutePolicy`): a path rewrite, the
//! redirect of plain HTTP to HTTPS, and source ranges. Data only, built by translate and read
//! by the decision core, which alone decides what a request gets from it. Pure: no Kubernetes,
//! Pingora or tokio.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::table::auth::BasicAuth;
use crate::table::balance::Share;
use crate::table::cidr::Cidr;
use crate::table::external_auth::ExternalAuth;
use crate::table::hash_key::HashKey;
pub use crate::table::location::{Location, Part};
use crate::table::pattern::Pattern;
use crate::table::rate_limit::RateLimit;
use crate::table::shared::EntryId;
use crate::table::sticky::CookieAffinity;
use crate::table::upstream::BackendProtocol;

/// Index of a policy in `RoutingTable::policies`.
pub type PolicyId = u32;

/// One Ingress's settings for the routes it made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RoutePolicy {
    /// The Ingress that made it (`namespace/name`), for `/explain` and logs.
    pub origin: Box<str>,
    /// Replaces the matched path (`switchyard.io/rewrite-target`): `/` strips it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<Arc<str>>,
    /// Replaces the whole path, the query kept (ingress-nginx's `rewrite-target`, nginx's
    /// `rewrite "(?i)path" target break;`): `$1`..`$9` are the groups of the route's
    /// regular-expression path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewrite_path: Option<Location>,
    /// On the plain HTTP port, answer a redirect to HTTPS with this status instead of
    /// proxying (hosts in the Ingress's `spec.tls`, unless `switchyard.io/ssl-redirect` is
    /// "false"; or any host when it is "true").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub https_redirect: Option<u16>,
    /// Only clients in these networks are served (`switchyard.io/allowlist-source-range`);
    /// empty: any client.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<Cidr>,
    /// Clients in these networks are refused (`switchyard.io/denylist-source-range`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<Cidr>,
    /// How these routes' requests reach the endpoints (`switchyard.io/backend-protocol`),
    /// instead of the Service port's protocol; server name and verification stay the
    /// Service's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<BackendProtocol>,
    /// The wait for the endpoint's response header and between reads of its body
    /// (`switchyard.io/proxy-read-timeout`), instead of `--server-timeout`.
    #[serde(skip_serializing_if = "Option::is_none", with = "millis")]
    pub server_timeout: Option<Duration>,
    /// The wait for a connection to the endpoint, each of TCP and a TLS handshake
    /// (`switchyard.io/proxy-connect-timeout`), instead of the default 5 s.
    #[serde(skip_serializing_if = "Option::is_none", with = "millis")]
    pub connect_timeout: Option<Duration>,
    /// The wait for each write of the request to the endpoint
    /// (`switchyard.io/proxy-send-timeout`), instead of the read timeout.
    #[serde(skip_serializing_if = "Option::is_none", with = "millis")]
    pub send_timeout: Option<Duration>,
    /// Longest request body, in bytes (`switchyard.io/proxy-body-size`); a longer one is
    /// answered 413 and not sent on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_body: Option<u64>,
    /// Every request is answered with a redirect to this location instead of proxied
    /// (`switchyard.io/permanent-redirect`, `temporal-redirect`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redirect: Option<Redirect>,
    /// A request for `/` itself is answered `302` to this path on the same scheme and host
    /// (`switchyard.io/app-root`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app_root: Option<Arc<str>>,
    /// ingress-nginx's canary Ingress for this route: some requests go to its backend.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canary: Option<Arc<Canary>>,
    /// The `Host` the endpoints get (`switchyard.io/upstream-vhost`), instead of the
    /// client's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_vhost: Option<Arc<str>>,
    /// `X-Forwarded-Prefix` for the endpoints (`switchyard.io/x-forwarded-prefix`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forwarded_prefix: Option<Arc<str>>,
    /// Cross-origin requests (ingress-nginx's `enable-cors`): preflights answered here, the
    /// responses to allowed origins given the `Access-Control-*` fields.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cors: Option<Arc<Cors>>,
    /// Only requests with a user's credentials are served (ingress-nginx's `auth-type:
    /// basic`); others get 401.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<Arc<BasicAuth>>,
    /// The entry that answers instead when the route's own has no endpoint to take the
    /// request (ingress-nginx's `default-backend` annotation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<EntryId>,
    /// ingress-nginx's `custom-http-errors`: an endpoint's response of one of these statuses
    /// is not relayed; the request goes to `fallback` (the `default-backend`) instead, told
    /// why (`X-Code`, ...), and its answer is the response.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub custom_errors: Option<Arc<[u16]>>,
    /// The Ingress verifies client certificates (`auth-tls-*`): over plain HTTP, where none
    /// can be shown, its routes judge a request as one without (over TLS the host's
    /// verification, `RoutingTable::client_validation`, judges it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cert: Option<Arc<crate::table::cert_auth::IngressCertAuth>>,
    /// ingress-nginx's external authentication (`auth-url`): each request proxied only once
    /// the service allows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_auth: Option<Arc<ExternalAuth>>,
    /// Requests per client address (ingress-nginx's `limit-rps`, `limit-rpm`,
    /// `limit-connections`): past them, 503.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<Arc<RateLimit>>,
    /// A cookie pins each client to an endpoint of the route (ingress-nginx's
    /// `affinity: cookie`), whatever the Service's own stickiness.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Arc<CookieAffinity>>,
    /// The endpoint is picked by the hash of this key of the request (ingress-nginx's
    /// `upstream-hash-by`), whatever the Service's algorithm.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash_by: Option<Arc<HashKey>>,
    /// When a failed request goes to another endpoint (ingress-nginx's `proxy-next-upstream`
    /// and `proxy-next-upstream-tries`), instead of `--retries`' rule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<Retry>,
}

/// An Ingress's retry rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Retry {
    /// Endpoints one request may try: 1, no retry; past the most switchyard tries
    /// (`decide::attempt::MAX_TRIES`), that many.
    pub tries: usize,
    /// A request whose endpoint did not answer in time goes to another too (`timeout`), when
    /// it may be sent again.
    pub on_timeout: bool,
    /// No other endpoint is tried once this long has passed since the first was
    /// (`proxy-next-upstream-timeout`; `None`: no limit, nginx's `0`).
    #[serde(
        skip_serializing_if = "Option::is_none",
        with = "crate::table::policy::secs"
    )]
    pub within: Option<Duration>,
    /// A response of one of these statuses is not relayed: the request goes to another
    /// endpoint, when it may be sent again (`http_500`, `http_502`, ...).
    pub on_status: RetryStatuses,
    /// A request that is not idempotent may be sent again too (`non_idempotent`).
    pub non_idempotent: bool,
}

/// The response statuses `proxy-next-upstream` can name, as a set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetryStatuses(u8);

impl RetryStatuses {
    /// nginx's `http_*` cases, in bit order.
    pub const NAMED: [u16; 7] = [500, 502, 503, 504, 403, 404, 429];

    /// With `status`, if `proxy-next-upstream` can name it (false: it cannot).
    pub fn insert(&mut self, status: u16) -> bool {
        match Self::NAMED.iter().position(|&s| s == status) {
            Some(i) => {
                self.0 |= 1 << i;
                true
            }
            None => false,
        }
    }

    pub fn contains(self, status: u16) -> bool {
        Self::NAMED
            .iter()
            .position(|&s| s == status)
            .is_some_and(|i| self.0 & (1 << i) != 0)
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl Serialize for RetryStatuses {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let named: Vec<u16> = Self::NAMED
            .iter()
            .copied()
            .filter(|&st| self.contains(st))
            .collect();
        named.serialize(s)
    }
}

/// An optional duration as whole seconds in the table's JSON.
pub(crate) mod secs {
    use std::time::Duration;

    use serde::Serializer;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_u64(d.as_secs()),
            None => s.serialize_none(),
        }
    }
}

/// Cross-origin resource sharing, as ingress-nginx (`enable-cors` and the `cors-allow-*`
/// annotations) or the Gateway API's `CORS` filter asks for it ([`CorsFlavor`]): a request
/// whose `Origin` is allowed gets the fields below on its response, and a preflight from one
/// is answered by switchyard with them, never proxied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cors {
    pub flavor: CorsFlavor,
    pub origins: Origins,
    /// `Access-Control-Allow-Methods`, as written.
    pub methods: Box<str>,
    /// `Access-Control-Allow-Headers`, as written.
    pub headers: Box<str>,
    /// `Access-Control-Expose-Headers` (none when empty).
    pub expose: Box<str>,
    /// `Access-Control-Allow-Credentials: true`.
    pub credentials: bool,
    /// `Access-Control-Max-Age`, in seconds (digits).
    pub max_age: Box<str>,
}

/// Whose CORS rules apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CorsFlavor {
    /// ingress-nginx's: any `OPTIONS` request from an allowed origin is a preflight,
    /// answered `204`; the origin `*` allows every request, with or without an `Origin`, as
    /// `*`; a wildcard stands for one label; `*` methods or headers are sent as written.
    Nginx,
    /// The Gateway API's (as Envoy does it): a preflight is an `OPTIONS` request with
    /// `Access-Control-Request-Method`, answered `200`; only a request with an `Origin` is a
    /// CORS one, and its origin is echoed (also for `*`); a wildcard stands for any number of
    /// labels; `*` methods or headers answer a preflight with those it asks for.
    Gateway,
}

/// The origins a `Cors` allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Origins {
    /// `*`.
    Any,
    /// Each an origin, lower case (`https://app.example.com`, `http://localhost:3000`), or one
    /// whose host's first label is `*` (`https://*.example.com`: exactly one label there).
    List(Vec<Box<str>>),
}

/// The `Access-Control-Allow-Origin` a request gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowOrigin {
    Any,
    /// The request's own `Origin`, which a listed origin matched.
    Echo(Box<str>),
}

impl AllowOrigin {
    pub fn text(&self) -> &str {
        match self {
            AllowOrigin::Any => "*",
            AllowOrigin::Echo(o) => o,
        }
    }
}

impl Cors {
    /// The origin a request with `origin` (its `Origin` field) is allowed as, if it is.
    pub fn allow(&self, origin: Option<&[u8]>) -> Option<AllowOrigin> {
        if self.flavor == CorsFlavor::Nginx && self.origins == Origins::Any {
            return Some(AllowOrigin::Any);
        }
        let origin = std::str::from_utf8(origin?).ok()?.trim();
        let list = match &self.origins {
            Origins::Any => return Some(AllowOrigin::Echo(origin.into())),
            Origins::List(list) => list,
        };
        let lower = origin.to_ascii_lowercase();
        let any_labels = self.flavor == CorsFlavor::Gateway;
        list.iter()
            .any(|allowed| origin_matches(allowed, &lower, any_labels))
            .then(|| AllowOrigin::Echo(origin.into()))
    }

    /// Whether a request of `method` that carries `request_method` (its
    /// `Access-Control-Request-Method`) is a preflight.
    pub fn preflight(&self, method: &[u8], request_method: Option<&[u8]>) -> bool {
        method == b"OPTIONS" && (self.flavor == CorsFlavor::Nginx || request_method.is_some())
    }

    /// The status a preflight is answered with.
    pub fn preflight_status(&self) -> u16 {
        match self.flavor {
            CorsFlavor::Nginx => 204,
            CorsFlavor::Gateway => 200,
        }
    }

    /// What a preflight answers for allowed `listed` (methods or headers) when the request
    /// asked for `asked`: the list, or, for a Gateway's `*`, what was asked (a `*` would not
    /// do for a request with credentials).
    pub fn answer_for<'a>(&self, listed: &'a str, asked: Option<&'a str>) -> &'a str {
        match (self.flavor, listed, asked) {
            (CorsFlavor::Gateway, "*", Some(a)) if !a.trim().is_empty() => a.trim(),
            _ => listed,
        }
    }

    /// Reads one allowed origin as ingress-nginx's `cors-allow-origin` writes it.
    pub fn parse_origin(v: &str) -> Result<Box<str>, &'static str> {
        let v = v.trim().trim_end_matches('/').to_ascii_lowercase();
        let (scheme, rest) = v.split_once("://").ok_or("is not scheme://host[:port]")?;
        if scheme.is_empty()
            || !scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
        {
            return Err("has no valid scheme");
        }
        let host = rest.strip_prefix("*.").unwrap_or(rest);
        let ok = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-.:[]_".contains(&b));
        if !ok {
            return Err("is not scheme://host[:port] (a wildcard only as *. before the host)");
        }
        Ok(v.into())
    }
}

/// Whether `origin` (lower case) is `allowed`: the same, or, for `scheme://*.rest`, the scheme,
/// one label of letters, digits and `-` (or, with `any_labels`, any number of them), then
/// `.rest`.
fn origin_matches(allowed: &str, origin: &str, any_labels: bool) -> bool {
    let Some((scheme, rest)) = allowed.split_once("://*.") else {
        return allowed == origin;
    };
    let Some(host) = origin
        .strip_prefix(scheme)
        .and_then(|o| o.strip_prefix("://"))
    else {
        return false;
    };
    let Some(labels) = host.strip_suffix(rest).and_then(|h| h.strip_suffix('.')) else {
        return false;
    };
    !labels.is_empty()
        && (any_labels || !labels.contains('.'))
        && labels
            .split('.')
            .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
}

/// A canary Ingress's backend for one route of its main Ingress, and which requests it takes
/// (ingress-nginx's `canary-by-header`, `-header-value`, `-header-pattern`,
/// `canary-by-cookie`, `canary-weight`, `canary-weight-total`). The main route's policy
/// (source ranges, redirects, timeouts) governs the canary's requests too, as in
/// ingress-nginx, where the canary is an alternative backend of the main location.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Canary {
    /// The canary Ingress (`namespace/name`).
    pub origin: Box<str>,
    pub entry: EntryId,
    /// `canary-by-header`, lower case.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header: Option<Box<str>>,
    /// `canary-by-header-value`: the header's value that chooses the canary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header_value: Option<Box<str>>,
    /// `canary-by-header-pattern`, searched for in the header's value (without a
    /// `header_value`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header_pattern: Option<Pattern>,
    /// `canary-by-cookie`: the cookie whose value `always` / `never` decides.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cookie: Option<Box<str>>,
    /// `canary-weight` of `canary-weight-total` (100 unless more): the share of the other
    /// requests.
    pub weight: Share,
}

/// Whether the canary takes a request, in ingress-nginx's order: the header (`always`,
/// `never`, or its value or pattern), then the cookie (`always`, `never`), then the weight.
/// `header` and `cookie` give the request's value of a name.
pub fn canary_takes<'r>(
    c: &Canary,
    header: impl FnOnce(&str) -> Option<&'r [u8]>,
    cookie: impl FnOnce(&str) -> Option<&'r [u8]>,
) -> bool {
    if let Some(v) = c.header.as_deref().and_then(header) {
        if let Some(want) = &c.header_value {
            if v == want.as_bytes() {
                return true;
            }
        } else if let Some(p) = &c.header_pattern {
            if p.is_match_bytes(v) {
                return true;
            }
        } else if v == b"always" {
            return true;
        } else if v == b"never" {
            return false;
        }
    }
    match c.cookie.as_deref().and_then(cookie) {
        Some(b"always") => true,
        Some(b"never") => false,
        _ => c.weight.due(),
    }
}

/// A redirect every request of a route gets.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Redirect {
    /// A 3xx status.
    pub status: u16,
    /// The `Location` field: a URL or an absolute path, with the request's parts where the
    /// annotation named nginx's variables.
    pub location: Location,
}

/// Durations as whole milliseconds in the table's JSON.
mod millis {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            None => s.serialize_none(),
        }
    }
}

impl RoutePolicy {
    /// The policy of Ingress `origin` that changes nothing (each setting then set apart).
    pub fn of(origin: &str) -> RoutePolicy {
        RoutePolicy {
            origin: origin.into(),
            rewrite: None,
            rewrite_path: None,
            https_redirect: None,
            allow: Vec::new(),
            deny: Vec::new(),
            protocol: None,
            server_timeout: None,
            connect_timeout: None,
            send_timeout: None,
            max_body: None,
            redirect: None,
            app_root: None,
            canary: None,
            upstream_vhost: None,
            forwarded_prefix: None,
            cors: None,
            basic_auth: None,
            client_cert: None,
            fallback: None,
            custom_errors: None,
            external_auth: None,
            rate_limit: None,
            affinity: None,
            hash_by: None,
            retry: None,
        }
    }

    /// Whether a client at `ip` may use the routes of this policy: not in a denied network,
    /// and in an allowed one when there are any. A request whose address is unknown is
    /// refused where a list applies (never the case for a socket, but the rule must not fail
    /// open).
    pub fn admits(&self, ip: Option<IpAddr>) -> bool {
        if self.allow.is_empty() && self.deny.is_empty() {
            return true;
        }
        let Some(ip) = ip else {
            return false;
        };
        !self.deny.iter().any(|n| n.contains(ip))
            && (self.allow.is_empty() || self.allow.iter().any(|n| n.contains(ip)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A location is split at the variables switchyard fills in; anything it cannot make is
    /// refused, never passed on with a `$` left in it.
    #[test]
    fn a_location_names_only_variables_switchyard_fills_in() {
        let l = Location::parse(" https://new.test${request_uri} ").unwrap();
        assert_eq!(&*l.text, "https://new.test${request_uri}");
        assert_eq!(
            &*l.parts,
            [Part::Text("https://new.test".into()), Part::RequestUri]
        );
        let l = Location::parse("$scheme://$host/m$is_args$args").unwrap();
        assert_eq!(l.parts.len(), 6);
        assert!(Location::parse("/elsewhere").is_ok());
        for bad in [
            "",
            "new.test/x",
            "//new.test/x",
            "ftp://x/",
            "https://x/$remote_addr",
            "https://x/${uri",
            "https://x/a b",
            "$host/x",
        ] {
            assert!(Location::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_rewrite_target_is_a_path_with_groups() {
        let l = Location::rewrite("/$2").unwrap();
        assert_eq!(&*l.parts, [Part::Text("/".into()), Part::Group(2)]);
        let l = Location::rewrite("$1/x?y=${host}").unwrap();
        assert_eq!(l.parts[0], Part::Group(1));
        assert!(Location::rewrite("/").is_ok());
        for bad in [
            "",
            "x/$1",
            "//x",
            "https://x/$1",
            "/$0",
            "/$10",
            "/$remote_addr",
        ] {
            assert!(Location::rewrite(bad).is_err(), "{bad}");
        }
        // A redirect location never takes groups.
        assert!(Location::parse("/$1").is_err());
    }

    /// ingress-nginx's balancer.lua order: header, then cookie, then weight.
    #[test]
    fn a_canary_takes_requests_as_ingress_nginx_does() {
        let canary = |weight: u64| Canary {
            origin: "default/canary".into(),
            entry: 1,
            header: Some("x-canary".into()),
            header_value: None,
            header_pattern: None,
            cookie: Some("canary".into()),
            weight: Share::new(weight, 100),
        };
        let takes = |c: &Canary, h: Option<&'static str>, k: Option<&'static str>| {
            canary_takes(c, |_| h.map(str::as_bytes), |_| k.map(str::as_bytes))
        };
        let c = canary(0);
        assert!(takes(&c, Some("always"), Some("never")), "the header first");
        assert!(!takes(&c, Some("never"), Some("always")));
        assert!(takes(&c, Some("other"), Some("always")), "then the cookie");
        assert!(!takes(&c, None, Some("never")));
        assert!(!takes(&c, None, None), "weight 0");
        let all = canary(100);
        assert!(!takes(&all, Some("never"), None));
        assert!(takes(&all, None, Some("other")));
        let half = canary(50);
        assert_eq!((0..100).filter(|_| takes(&half, None, None)).count(), 50);
        // With a value, only that value chooses it; `always` is a value like any other.
        let valued = Canary {
            header_value: Some("v2".into()),
            ..canary(0)
        };
        assert!(takes(&valued, Some("v2"), None));
        assert!(!takes(&valued, Some("always"), None));
        let patterned = Canary {
            header_pattern: Some(Pattern::search("^(beta|canary)").unwrap()),
            ..canary(0)
        };
        assert!(takes(&patterned, Some("beta-7"), None));
        assert!(!takes(&patterned, Some("stable"), None));
    }

    #[test]
    fn cors_allows_listed_origins_and_one_label_wildcards() {
        let list = [
            "https://app.example.com",
            "https://*.example.org",
            "http://localhost:3000",
        ]
        .iter()
        .map(|o| Cors::parse_origin(o).unwrap())
        .collect();
        let cors = Cors {
            flavor: CorsFlavor::Nginx,
            origins: Origins::List(list),
            methods: "GET".into(),
            headers: "Content-Type".into(),
            expose: "".into(),
            credentials: true,
            max_age: "60".into(),
        };
        let allow = |o: &str| cors.allow(Some(o.as_bytes())).map(|a| a.text().to_string());
        assert_eq!(
            allow("https://app.example.com").as_deref(),
            Some("https://app.example.com")
        );
        assert_eq!(
            allow("HTTPS://App.Example.com").as_deref(),
            Some("HTTPS://App.Example.com")
        );
        assert_eq!(
            allow("https://a.example.org").as_deref(),
            Some("https://a.example.org")
        );
        assert_eq!(
            allow("http://localhost:3000").as_deref(),
            Some("http://localhost:3000")
        );
        for refused in [
            "https://evil.com",
            "http://app.example.com",
            "https://example.org",
            "https://a.b.example.org",
            "https://evilexample.org",
            "http://localhost:3001",
            "null",
        ] {
            assert_eq!(allow(refused), None, "{refused}");
        }
        assert_eq!(cors.allow(None), None);
        let gateway = Cors {
            flavor: CorsFlavor::Gateway,
            ..cors.clone()
        };
        // The Gateway's wildcard takes any number of labels.
        assert_eq!(
            gateway
                .allow(Some(b"https://a.b.example.org"))
                .map(|a| a.text().to_string()),
            Some("https://a.b.example.org".into())
        );
        assert_eq!(gateway.allow(Some(b"https://example.org")), None);
        let any = Cors {
            origins: Origins::Any,
            ..cors
        };
        assert_eq!(any.allow(None), Some(AllowOrigin::Any));
        // A Gateway's `*` echoes the origin, and only a request with one is a CORS one.
        let any = Cors {
            flavor: CorsFlavor::Gateway,
            ..any
        };
        assert_eq!(any.allow(None), None);
        assert_eq!(
            any.allow(Some(b"https://x.test:8443")),
            Some(AllowOrigin::Echo("https://x.test:8443".into()))
        );
        assert!(any.preflight(b"OPTIONS", Some(b"PUT")) && !any.preflight(b"OPTIONS", None));
        assert_eq!(any.answer_for("*", Some("PUT")), "PUT");
        assert_eq!(any.answer_for("GET, PUT", Some("PUT")), "GET, PUT");
        for bad in [
            "example.com",
            "https://",
            "https://a b",
            "https://x.*.com",
            "://x",
        ] {
            assert!(Cors::parse_origin(bad).is_err(), "{bad}");
        }
        assert_eq!(
            &*Cors::parse_origin("https://A.com/").unwrap(),
            "https://a.com"
        );
    }

    fn policy(allow: &[&str], deny: &[&str]) -> RoutePolicy {
        RoutePolicy {
            allow: allow.iter().map(|s| s.parse().unwrap()).collect(),
            deny: deny.iter().map(|s| s.parse().unwrap()).collect(),
            ..RoutePolicy::of("default/web")
        }
    }

    #[test]
    fn source_ranges_admit_and_refuse() {
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        let open = policy(&[], &[]);
        assert!(open.admits(ip("1.2.3.4")) && open.admits(None));
        let allow = policy(&["10.0.0.0/8"], &[]);
        assert!(allow.admits(ip("10.1.1.1")));
        assert!(!allow.admits(ip("192.168.0.1")));
        assert!(!allow.admits(None));
        let both = policy(&["10.0.0.0/8"], &["10.9.0.0/16"]);
        assert!(both.admits(ip("10.1.1.1")));
        assert!(!both.admits(ip("10.9.1.1")), "deny beats allow");
        let deny = policy(&[], &["127.0.0.0/8"]);
        assert!(!deny.admits(ip("127.0.0.1")) && deny.admits(ip("8.8.8.8")));
    }
}

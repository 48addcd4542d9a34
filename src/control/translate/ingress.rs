//! Ingresses (`networking.k8s.io/v1`) as routes: which ones switchyard serves (by their
//! IngressClass), their rules by host and path type, their default backend, the TLS Secrets
//! they name, and the `switchyard.io/` annotations that become a route policy. The Ingress
//! spec's rules, not the annotations' dialect: a `*.` host matches exactly one label, `Prefix`
//! is element-wise, `Exact` is the whole path. Each bad part of an Ingress is a warning about
//! that Ingress alone. Pure: no I/O, no clock, no logging.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Secret, Service, ServicePort};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, Ingress, IngressBackend, IngressClass, IngressServiceBackend, IngressTLS,
    ServiceBackendPort,
};

use self::ingress_annotation as ia;
use super::annotations::{MAX_DURATION, nearest_key, parse_bool, parse_duration, show};
use super::build::{Builder, IngressRef, RouteClaim, RouteKey, describe_host, entry_name};
use super::inputs::{meta_key, object};
use super::nginx;
use super::view::*;
use crate::table::auth::BasicAuth;
use crate::table::balance::Share;
use crate::table::cert_auth::{IngressCertAuth, VerifyClient};
use crate::table::cidr::Cidr;
use crate::table::client_validation::ClientValidation;
use crate::table::external_auth::{
    AuthCache, AuthHost, AuthTarget, AuthUrl, CacheDurations, ExternalAuth, signin_with_redirect,
};
use crate::table::hash_key::HashKey;
use crate::table::matcher::{HostPattern, validate_host, validate_prefix};
use crate::table::passthrough::Passthrough;
use crate::table::pattern::{Flavor, Pattern};
use crate::table::policy::{
    Canary, Cors, CorsFlavor, Location, Origins, Redirect, Retry, RetryStatuses, RoutePolicy,
};
use crate::table::rate_limit::RateLimit;
use crate::table::sticky::CookieAffinity;
use crate::table::upstream::{BackendProtocol, CA_KEY, Upstream};
use crate::table::{CheckSpec, Entry, EntryId, EntryKey, Frontend};

/// The annotation that makes an IngressClass the cluster's default.
const DEFAULT_CLASS_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";

/// The class annotation that predates `spec.ingressClassName`, still written by older tools.
const LEGACY_CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";

/// Per-Ingress annotation keys.
pub mod ingress_annotation {
    /// The prefix every key below shares; an unknown key under it is a warning.
    pub const PREFIX: &str = "switchyard.io/";
    /// `"false"`: plain HTTP to hosts in `spec.tls` is proxied, not redirected.
    pub const SSL_REDIRECT: &str = "switchyard.io/ssl-redirect";
    /// `"true"`: redirect plain HTTP to HTTPS for every host of the Ingress, TLS or not.
    pub const FORCE_SSL_REDIRECT: &str = "switchyard.io/force-ssl-redirect";
    /// Replaces the matched path: `/` strips it, `/v2` puts `/v2` in its place.
    pub const REWRITE_TARGET: &str = "switchyard.io/rewrite-target";
    /// Comma-separated CIDRs: only clients in them are served (others get 403).
    pub const ALLOWLIST_SOURCE_RANGE: &str = "switchyard.io/allowlist-source-range";
    /// Comma-separated CIDRs: clients in them get 403.
    pub const DENYLIST_SOURCE_RANGE: &str = "switchyard.io/denylist-source-range";
    /// `HTTP`, `HTTPS`, `H2C`, `GRPC`, `GRPCS` (any case): how the routes' requests reach
    /// the endpoints, instead of the Service port's `appProtocol`.
    pub const BACKEND_PROTOCOL: &str = "switchyard.io/backend-protocol";
    /// Seconds (`60`) or a duration (`90s`): the wait for the endpoint's response.
    pub const PROXY_READ_TIMEOUT: &str = "switchyard.io/proxy-read-timeout";
    /// Seconds (`5`) or a duration (`500ms`): the wait for each connection to an endpoint.
    pub const PROXY_CONNECT_TIMEOUT: &str = "switchyard.io/proxy-connect-timeout";
    /// Seconds (`60`) or a duration (`90s`): the wait for each write of the request to an
    /// endpoint (one that stops reading), instead of the read timeout.
    pub const PROXY_SEND_TIMEOUT: &str = "switchyard.io/proxy-send-timeout";
    /// Bytes, or with a unit `k`, `m`, `g` (`8m`); `0`: no limit. A longer body gets 413.
    pub const PROXY_BODY_SIZE: &str = "switchyard.io/proxy-body-size";
    /// A URL (or an absolute path): every request is redirected there, `301` unless
    /// `permanent-redirect-code` says another 3xx.
    pub const PERMANENT_REDIRECT: &str = "switchyard.io/permanent-redirect";
    pub const PERMANENT_REDIRECT_CODE: &str = "switchyard.io/permanent-redirect-code";
    /// As `permanent-redirect`, with `302` unless `temporal-redirect-code` says another 3xx;
    /// `permanent-redirect` wins when both are set.
    pub const TEMPORAL_REDIRECT: &str = "switchyard.io/temporal-redirect";
    pub const TEMPORAL_REDIRECT_CODE: &str = "switchyard.io/temporal-redirect-code";
    /// A path: a request for `/` is redirected (`302`) to it on the same scheme and host.
    pub const APP_ROOT: &str = "switchyard.io/app-root";
    /// Hosts, comma- or space-separated: each is served the first rule host's paths, unless
    /// a rule of any Ingress names it.
    pub const SERVER_ALIAS: &str = "switchyard.io/server-alias";
    /// `"true"`: `www.` + a rule host (or the host without `www.`) redirects to it (`308`),
    /// unless a rule of any Ingress names it.
    pub const FROM_TO_WWW_REDIRECT: &str = "switchyard.io/from-to-www-redirect";
    /// A host name (and port): the `Host` the endpoints get instead of the client's.
    pub const UPSTREAM_VHOST: &str = "switchyard.io/upstream-vhost";
    /// A value (`/api`): sent to the endpoints as `X-Forwarded-Prefix`.
    pub const X_FORWARDED_PREFIX: &str = "switchyard.io/x-forwarded-prefix";
    /// Every key switchyard reads.
    pub const KNOWN: [&str; 19] = [
        UPSTREAM_VHOST,
        X_FORWARDED_PREFIX,
        PROXY_CONNECT_TIMEOUT,
        PROXY_SEND_TIMEOUT,
        SERVER_ALIAS,
        FROM_TO_WWW_REDIRECT,
        PERMANENT_REDIRECT,
        PERMANENT_REDIRECT_CODE,
        TEMPORAL_REDIRECT,
        TEMPORAL_REDIRECT_CODE,
        APP_ROOT,
        SSL_REDIRECT,
        FORCE_SSL_REDIRECT,
        REWRITE_TARGET,
        ALLOWLIST_SOURCE_RANGE,
        DENYLIST_SOURCE_RANGE,
        BACKEND_PROTOCOL,
        PROXY_READ_TIMEOUT,
        PROXY_BODY_SIZE,
    ];
    /// ingress-nginx's prefix: these are read where switchyard has the same feature (see
    /// `NGINX_ALIASES`), and warned about otherwise.
    pub const NGINX_PREFIX: &str = "nginx.ingress.kubernetes.io/";
    /// ingress-nginx's `rewrite-target`, with ingress-nginx's meaning (not switchyard's own
    /// key's): the host's paths become regular expressions and the whole path is replaced,
    /// `$1`..`$9` filled in from the path's groups. switchyard's key wins when both are set.
    pub const NGINX_REWRITE_TARGET: &str = "nginx.ingress.kubernetes.io/rewrite-target";
    /// `"true"`: every path of the Ingress's hosts, whichever Ingress declares it, is a
    /// case-insensitive regular expression matched from the start of the path (nginx's
    /// `location ~* "^path"`), the longest first.
    pub const NGINX_USE_REGEX: &str = "nginx.ingress.kubernetes.io/use-regex";
    /// `"true"`: the Ingress is a canary: its backends take some requests of the routes of
    /// another Ingress with the same hosts and paths (`canary-by-header`, `-header-value`,
    /// `-header-pattern`, `canary-by-cookie`, `canary-weight`, `-weight-total` say which).
    pub const NGINX_CANARY: &str = "nginx.ingress.kubernetes.io/canary";
    pub const NGINX_CANARY_BY_HEADER: &str = "nginx.ingress.kubernetes.io/canary-by-header";
    pub const NGINX_CANARY_BY_HEADER_VALUE: &str =
        "nginx.ingress.kubernetes.io/canary-by-header-value";
    pub const NGINX_CANARY_BY_HEADER_PATTERN: &str =
        "nginx.ingress.kubernetes.io/canary-by-header-pattern";
    pub const NGINX_CANARY_BY_COOKIE: &str = "nginx.ingress.kubernetes.io/canary-by-cookie";
    pub const NGINX_CANARY_WEIGHT: &str = "nginx.ingress.kubernetes.io/canary-weight";
    pub const NGINX_CANARY_WEIGHT_TOTAL: &str = "nginx.ingress.kubernetes.io/canary-weight-total";
    /// `basic`: the routes serve only requests with the credentials of a user of
    /// `auth-secret` (the htpasswd file in its key `auth`); `auth-realm` names the realm.
    pub const NGINX_AUTH_TYPE: &str = "nginx.ingress.kubernetes.io/auth-type";
    pub const NGINX_AUTH_SECRET: &str = "nginx.ingress.kubernetes.io/auth-secret";
    pub const NGINX_AUTH_REALM: &str = "nginx.ingress.kubernetes.io/auth-realm";
    /// Client certificates per host (`namespace/name` of a Secret with `ca.crt`), and how
    /// they are asked for, checked and told (`auth-tls-verify-client`, `-verify-depth`,
    /// `-error-page`, `-pass-certificate-to-upstream`, `-match-cn`).
    pub const NGINX_AUTH_TLS_SECRET: &str = "nginx.ingress.kubernetes.io/auth-tls-secret";
    /// A Service of the Ingress's namespace that answers its routes' requests when their own
    /// Service has no endpoint to take them (its first port).
    pub const NGINX_DEFAULT_BACKEND: &str = "nginx.ingress.kubernetes.io/default-backend";
    /// Statuses (comma-separated) of the Ingress's endpoints' responses that its default
    /// backend answers instead, told why (`X-Code`, `X-Original-URI`, ...).
    pub const NGINX_CUSTOM_HTTP_ERRORS: &str = "nginx.ingress.kubernetes.io/custom-http-errors";
    pub const NGINX_AUTH_TLS_VERIFY_CLIENT: &str =
        "nginx.ingress.kubernetes.io/auth-tls-verify-client";
    pub const NGINX_AUTH_TLS_VERIFY_DEPTH: &str =
        "nginx.ingress.kubernetes.io/auth-tls-verify-depth";
    pub const NGINX_AUTH_TLS_ERROR_PAGE: &str = "nginx.ingress.kubernetes.io/auth-tls-error-page";
    pub const NGINX_AUTH_TLS_PASS_CERTIFICATE: &str =
        "nginx.ingress.kubernetes.io/auth-tls-pass-certificate-to-upstream";
    pub const NGINX_AUTH_TLS_MATCH_CN: &str = "nginx.ingress.kubernetes.io/auth-tls-match-cn";
    /// External authentication: each request is proxied only once a subrequest to this URL
    /// is answered `2xx` (`auth-method`, `auth-signin`, `auth-signin-redirect-param`,
    /// `auth-response-headers`, `auth-request-redirect`, `auth-always-set-cookie` shape it).
    /// Requests per client address: per second, per minute (each with
    /// `limit-burst-multiplier` times as many at once, 5 by default), in progress at once;
    /// networks never limited (`limit-allowlist`, or its old name `limit-whitelist`).
    pub const NGINX_LIMIT_RPS: &str = "nginx.ingress.kubernetes.io/limit-rps";
    pub const NGINX_LIMIT_RPM: &str = "nginx.ingress.kubernetes.io/limit-rpm";
    pub const NGINX_LIMIT_CONNECTIONS: &str = "nginx.ingress.kubernetes.io/limit-connections";
    pub const NGINX_LIMIT_BURST_MULTIPLIER: &str =
        "nginx.ingress.kubernetes.io/limit-burst-multiplier";
    pub const NGINX_LIMIT_ALLOWLIST: &str = "nginx.ingress.kubernetes.io/limit-allowlist";
    pub const NGINX_LIMIT_WHITELIST: &str = "nginx.ingress.kubernetes.io/limit-whitelist";
    /// `cookie`: a cookie pins each client to an endpoint (`session-cookie-*` shape it).
    pub const NGINX_AFFINITY: &str = "nginx.ingress.kubernetes.io/affinity";
    pub const NGINX_SESSION_COOKIE_NAME: &str = "nginx.ingress.kubernetes.io/session-cookie-name";
    /// `balanced` (the default) or `persistent`: whether endpoints added take a share of the
    /// sessions.
    pub const NGINX_AFFINITY_MODE: &str = "nginx.ingress.kubernetes.io/affinity-mode";
    pub const NGINX_SESSION_COOKIE_PATH: &str = "nginx.ingress.kubernetes.io/session-cookie-path";
    pub const NGINX_SESSION_COOKIE_MAX_AGE: &str =
        "nginx.ingress.kubernetes.io/session-cookie-max-age";
    pub const NGINX_SESSION_COOKIE_EXPIRES: &str =
        "nginx.ingress.kubernetes.io/session-cookie-expires";
    pub const NGINX_SESSION_COOKIE_SAMESITE: &str =
        "nginx.ingress.kubernetes.io/session-cookie-samesite";
    pub const NGINX_SESSION_COOKIE_SECURE: &str =
        "nginx.ingress.kubernetes.io/session-cookie-secure";
    pub const NGINX_SESSION_COOKIE_DOMAIN: &str =
        "nginx.ingress.kubernetes.io/session-cookie-domain";
    /// When a failed request is sent to another endpoint (`error`, `timeout`, `off`, ...),
    /// and how many endpoints one request may try in all (`0`: as many as there are).
    pub const NGINX_PROXY_NEXT_UPSTREAM: &str = "nginx.ingress.kubernetes.io/proxy-next-upstream";
    pub const NGINX_PROXY_NEXT_UPSTREAM_TRIES: &str =
        "nginx.ingress.kubernetes.io/proxy-next-upstream-tries";
    /// No other endpoint is tried once this long has passed since the first (seconds, or a
    /// duration; `0`: no limit).
    pub const NGINX_PROXY_NEXT_UPSTREAM_TIMEOUT: &str =
        "nginx.ingress.kubernetes.io/proxy-next-upstream-timeout";
    /// The endpoint is picked by the hash of this key (nginx variables) of each request.
    pub const NGINX_UPSTREAM_HASH_BY: &str = "nginx.ingress.kubernetes.io/upstream-hash-by";
    /// `"true"`: the TLS connections of the Ingress's hosts are relayed unterminated.
    pub const NGINX_SSL_PASSTHROUGH: &str = "nginx.ingress.kubernetes.io/ssl-passthrough";
    pub const NGINX_AUTH_URL: &str = "nginx.ingress.kubernetes.io/auth-url";
    pub const NGINX_AUTH_METHOD: &str = "nginx.ingress.kubernetes.io/auth-method";
    pub const NGINX_AUTH_SIGNIN: &str = "nginx.ingress.kubernetes.io/auth-signin";
    pub const NGINX_AUTH_SIGNIN_REDIRECT_PARAM: &str =
        "nginx.ingress.kubernetes.io/auth-signin-redirect-param";
    pub const NGINX_AUTH_RESPONSE_HEADERS: &str =
        "nginx.ingress.kubernetes.io/auth-response-headers";
    pub const NGINX_AUTH_REQUEST_REDIRECT: &str =
        "nginx.ingress.kubernetes.io/auth-request-redirect";
    /// Answers of the external authentication kept per key (`$http_authorization`, ...) for
    /// as long as `auth-cache-duration` says by status (`200 202 401 5m` by default).
    pub const NGINX_AUTH_CACHE_KEY: &str = "nginx.ingress.kubernetes.io/auth-cache-key";
    pub const NGINX_AUTH_CACHE_DURATION: &str = "nginx.ingress.kubernetes.io/auth-cache-duration";
    pub const NGINX_AUTH_ALWAYS_SET_COOKIE: &str =
        "nginx.ingress.kubernetes.io/auth-always-set-cookie";
    /// `"true"`: cross-origin requests are answered as ingress-nginx's CORS does, with the
    /// `cors-allow-origin`, `-methods`, `-headers`, `-credentials`, `cors-expose-headers` and
    /// `cors-max-age` below (each with ingress-nginx's default).
    pub const NGINX_ENABLE_CORS: &str = "nginx.ingress.kubernetes.io/enable-cors";
    pub const NGINX_CORS_ALLOW_ORIGIN: &str = "nginx.ingress.kubernetes.io/cors-allow-origin";
    pub const NGINX_CORS_ALLOW_METHODS: &str = "nginx.ingress.kubernetes.io/cors-allow-methods";
    pub const NGINX_CORS_ALLOW_HEADERS: &str = "nginx.ingress.kubernetes.io/cors-allow-headers";
    pub const NGINX_CORS_EXPOSE_HEADERS: &str = "nginx.ingress.kubernetes.io/cors-expose-headers";
    pub const NGINX_CORS_ALLOW_CREDENTIALS: &str =
        "nginx.ingress.kubernetes.io/cors-allow-credentials";
    pub const NGINX_CORS_MAX_AGE: &str = "nginx.ingress.kubernetes.io/cors-max-age";
    /// ingress-nginx keys switchyard honours as its own (same meaning, same values).
    pub const NGINX_ALIASES: [(&str, &str); 19] = [
        ("nginx.ingress.kubernetes.io/upstream-vhost", UPSTREAM_VHOST),
        (
            "nginx.ingress.kubernetes.io/x-forwarded-prefix",
            X_FORWARDED_PREFIX,
        ),
        (
            "nginx.ingress.kubernetes.io/proxy-connect-timeout",
            PROXY_CONNECT_TIMEOUT,
        ),
        (
            "nginx.ingress.kubernetes.io/proxy-send-timeout",
            PROXY_SEND_TIMEOUT,
        ),
        ("nginx.ingress.kubernetes.io/server-alias", SERVER_ALIAS),
        (
            "nginx.ingress.kubernetes.io/from-to-www-redirect",
            FROM_TO_WWW_REDIRECT,
        ),
        (
            "nginx.ingress.kubernetes.io/permanent-redirect",
            PERMANENT_REDIRECT,
        ),
        (
            "nginx.ingress.kubernetes.io/permanent-redirect-code",
            PERMANENT_REDIRECT_CODE,
        ),
        (
            "nginx.ingress.kubernetes.io/temporal-redirect",
            TEMPORAL_REDIRECT,
        ),
        (
            "nginx.ingress.kubernetes.io/temporal-redirect-code",
            TEMPORAL_REDIRECT_CODE,
        ),
        ("nginx.ingress.kubernetes.io/app-root", APP_ROOT),
        (
            "nginx.ingress.kubernetes.io/backend-protocol",
            BACKEND_PROTOCOL,
        ),
        (
            "nginx.ingress.kubernetes.io/proxy-read-timeout",
            PROXY_READ_TIMEOUT,
        ),
        (
            "nginx.ingress.kubernetes.io/proxy-body-size",
            PROXY_BODY_SIZE,
        ),
        ("nginx.ingress.kubernetes.io/ssl-redirect", SSL_REDIRECT),
        (
            "nginx.ingress.kubernetes.io/force-ssl-redirect",
            FORCE_SSL_REDIRECT,
        ),
        (
            "nginx.ingress.kubernetes.io/whitelist-source-range",
            ALLOWLIST_SOURCE_RANGE,
        ),
        (
            "nginx.ingress.kubernetes.io/allowlist-source-range",
            ALLOWLIST_SOURCE_RANGE,
        ),
        (
            "nginx.ingress.kubernetes.io/denylist-source-range",
            DENYLIST_SOURCE_RANGE,
        ),
    ];
}

/// The status of `from-to-www-redirect`'s redirect (ingress-nginx's `http-redirect-code`
/// default).
const WWW_REDIRECT_STATUS: u16 = 308;

/// The status of a plain-HTTP request redirected to HTTPS (ingress-nginx's default): 308
/// keeps the method and body, which a 301 would let a client turn into a GET.
const HTTPS_REDIRECT_STATUS: u16 = 308;

/// The longest regular-expression path taken, in bytes (as a prefix may be).
const MAX_REGEX_PATH: usize = 1024;

/// How an Ingress path is matched.
enum IngressPath<'p> {
    /// Element-wise, the trailing slash trimmed.
    Prefix(&'p str),
    /// The whole path.
    Exact(&'p str),
    /// nginx's `location ~* "^path"`: the host asks for regular expressions.
    Regex(Pattern),
}

impl IngressPath<'_> {
    /// The route key this path claims on `frontend` and `host`.
    fn key(&self, frontend: Frontend, host: Option<HostPattern>) -> RouteKey {
        let (prefix, exact, regex) = match self {
            IngressPath::Prefix(p) => (*p, false, false),
            IngressPath::Exact(p) => (*p, true, false),
            IngressPath::Regex(p) => (p.as_str(), false, true),
        };
        RouteKey {
            frontend,
            host,
            prefix: prefix.to_string(),
            ignore_case: false,
            exact,
            regex,
        }
    }
}

/// A canary Ingress's `canary-by-*` and `canary-weight*` annotations, read.
struct CanaryRule {
    header: Option<Box<str>>,
    header_value: Option<Box<str>>,
    header_pattern: Option<Pattern>,
    cookie: Option<Box<str>>,
    weight: u64,
    total: u64,
}

/// An Ingress's annotations, read.
#[derive(Debug, Default)]
struct IngressSettings {
    ssl_redirect: bool,
    force_ssl_redirect: bool,
    rewrite: Option<Arc<str>>,
    allow: Vec<Cidr>,
    deny: Vec<Cidr>,
    protocol: Option<BackendProtocol>,
    server_timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
    send_timeout: Option<Duration>,
    max_body: Option<u64>,
    redirect: Option<Redirect>,
    app_root: Option<Arc<str>>,
    /// `server-alias`: more hosts for the first rule host's paths.
    aliases: Vec<HostPattern>,
    from_to_www: bool,
    /// ingress-nginx's `rewrite-target`.
    rewrite_path: Option<Location>,
    /// ingress-nginx's `auth-type: basic`.
    basic_auth: Option<Arc<BasicAuth>>,
    /// ingress-nginx's `auth-url` and its companions.
    external_auth: Option<Arc<ExternalAuth>>,
    /// ingress-nginx's `limit-rps`, `limit-rpm`, `limit-connections`.
    rate_limit: Option<Arc<RateLimit>>,
    /// ingress-nginx's `affinity: cookie`.
    affinity: Option<Arc<CookieAffinity>>,
    /// ingress-nginx's `upstream-hash-by`.
    hash_by: Option<Arc<HashKey>>,
    /// ingress-nginx's `proxy-next-upstream` and `-tries`.
    retry: Option<Retry>,
    upstream_vhost: Option<Arc<str>>,
    forwarded_prefix: Option<Arc<str>>,
    /// ingress-nginx's `enable-cors` and its settings.
    cors: Option<Arc<Cors>>,
}

/// Who an Ingress's routes serve.
enum Access {
    /// Whoever the source ranges admit (and the external authentication, if any, allows).
    Open(Option<Arc<ExternalAuth>>),
    /// Those, with a user's credentials (and the external authentication's leave).
    Basic(Arc<BasicAuth>, Option<Arc<ExternalAuth>>),
    /// No one: it asks for what switchyard does not carry out (403 on its routes).
    Refused,
}

/// ingress-nginx's CORS defaults (its `cors-allow-methods`, `-headers`, `cors-max-age`).
const CORS_METHODS: &str = "GET, PUT, POST, DELETE, PATCH, OPTIONS";
const CORS_HEADERS: &str = "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,\
                            Cache-Control,Content-Type,Range,Authorization";
const CORS_MAX_AGE: &str = "1728000";

/// The key of an `auth-file` Secret that holds the htpasswd file.
const AUTH_FILE_KEY: &str = "auth";

impl<'a> Builder<'a> {
    /// Adds the routes of every Ingress switchyard serves; `services` are the Services by key
    /// with, for those that got no entry of their own, their EndpointSlices.
    pub(super) fn add_ingresses(
        &mut self,
        inputs: IngressInputs<'_>,
        services: &HashMap<(&str, &str), (&Service, Vec<&EndpointSlice>)>,
    ) {
        if inputs.ingresses.is_empty() {
            return;
        }
        let (classes, default_class) = self.claimed_classes(inputs.classes);
        let secrets: HashMap<(&str, &str), &Secret> = inputs
            .secrets
            .iter()
            .map(|s| (meta_key(&s.metadata.namespace, &s.metadata.name), *s))
            .collect();
        // Key order, one per key: the same objects in any order give the same table.
        let mut ingresses: Vec<&Ingress> = inputs.ingresses.to_vec();
        ingresses.sort_by(|a, b| {
            meta_key(&a.metadata.namespace, &a.metadata.name)
                .cmp(&meta_key(&b.metadata.namespace, &b.metadata.name))
        });
        ingresses.dedup_by(|a, b| {
            meta_key(&a.metadata.namespace, &a.metadata.name)
                == meta_key(&b.metadata.namespace, &b.metadata.name)
        });
        let mut entry_ids = self.entry_ids();
        ingresses.retain(|ing| {
            let (ns, name) = meta_key(&ing.metadata.namespace, &ing.metadata.name);
            if name.is_empty() || self.outside_namespace(ns) {
                return false;
            }
            if !self.is_ours(ing, &classes, default_class) {
                self.other_class_ingresses += 1;
                return false;
            }
            true
        });
        self.regex_hosts = regex_hosts(&ingresses);
        for ing in ingresses {
            let (ns, name) = meta_key(&ing.metadata.namespace, &ing.metadata.name);
            let who = object("Ingress", ns, name);
            let annotations = ing.metadata.annotations.as_ref();
            let mut refused = annotations.map(nginx::refusing).unwrap_or_default();
            // Passthrough needs its flag, as in ingress-nginx; without it the Ingress is
            // refused rather than served with TLS terminated that its backend meant to.
            if !self.options.ssl_passthrough
                && annotations
                    .and_then(|a| a.get(ia::NGINX_SSL_PASSTHROUGH))
                    .and_then(|v| parse_bool(v))
                    == Some(true)
            {
                refused.push(ia::NGINX_SSL_PASSTHROUGH);
            }
            if let Some(map) = annotations.filter(|a| is_canary(a)) {
                // A canary never claims a path: it joins its main Ingress's routes in
                // `finish`, so that it can never serve as the main one. Its requests pass the
                // main route's checks only, so one that asks for authentication of its own
                // (which ingress-nginx ignores) is not served rather than served open.
                let mut refused = refused;
                for key in [
                    ia::NGINX_AUTH_TYPE,
                    ia::NGINX_AUTH_SECRET,
                    ia::NGINX_AUTH_URL,
                    ia::NGINX_AUTH_TLS_SECRET,
                ] {
                    let asks = match key {
                        ia::NGINX_AUTH_TLS_SECRET => map.contains_key(key) && !tls_auth_off(map),
                        _ => map.contains_key(key),
                    };
                    if asks && !refused.contains(&key) {
                        refused.push(key);
                    }
                }
                if refused.is_empty() {
                    self.add_canary(ing, services, &mut entry_ids);
                } else {
                    self.warnings.push(Warning {
                        object: who,
                        reason: WarningReason::NotServed,
                        message: format!(
                            "a canary that carries {} (which restrict access in a way \
                             switchyard does not carry out yet: {}) is not served; its main \
                             Ingress keeps all the traffic",
                            refused.join(", "),
                            refusal_notes(&refused, annotations),
                        ),
                    });
                }
                continue;
            }
            // Basic authentication whose users cannot be read fails closed, as a refusal.
            let basic = match refused.is_empty() {
                true => annotations.map_or(Ok(None), |a| self.basic_auth(ns, a, &secrets)),
                false => Ok(None),
            };
            // So does external authentication that cannot be asked.
            let external = match refused.is_empty() {
                true => annotations.map_or(Ok(None), |a| {
                    self.external_auth(&who, a, services, &mut entry_ids)
                }),
                false => Ok(None),
            };
            // And client certificates that cannot be verified as asked.
            let client_cert = match refused.is_empty() {
                true => {
                    annotations.map_or(Ok(None), |a| self.client_cert_auth(&who, ing, a, &secrets))
                }
                false => Ok(None),
            };
            let client_cert = match client_cert {
                Ok(c) => c,
                Err(why) => {
                    self.warnings.push(Warning {
                        object: who.clone(),
                        reason: WarningReason::NotServed,
                        message: format!(
                            "{why}; not served: its routes answer 403 to every client until \
                             its clients' certificates can be verified"
                        ),
                    });
                    let refused = Access::Refused;
                    self.add_ingress(ing, &secrets, services, &mut entry_ids, refused, None);
                    continue;
                }
            };
            let external = match external {
                Ok(external) => external,
                Err(why) => {
                    self.warnings.push(Warning {
                        object: who.clone(),
                        reason: WarningReason::NotServed,
                        message: format!(
                            "{why}; not served: its routes answer 403 to every client until \
                             its external authentication can be asked"
                        ),
                    });
                    let refused = Access::Refused;
                    self.add_ingress(ing, &secrets, services, &mut entry_ids, refused, None);
                    continue;
                }
            };
            let access = match (refused.is_empty(), basic) {
                (true, Ok(None)) => Access::Open(external),
                (true, Ok(Some(auth))) => Access::Basic(auth, external),
                (true, Err(why)) => {
                    self.warnings.push(Warning {
                        object: who.clone(),
                        reason: WarningReason::NotServed,
                        message: format!(
                            "auth-type is basic and {why}; not served: its routes answer 403 \
                             to every client until its users can be read"
                        ),
                    });
                    Access::Refused
                }
                (false, _) => Access::Refused,
            };
            if !matches!(access, Access::Refused) {
                self.served_ingresses
                    .insert((ns.to_string(), name.to_string()));
            } else if !refused.is_empty() {
                // Its paths stay claimed, refused to everyone: left unclaimed, a request for a
                // protected path would fall through to a shorter prefix and be served open.
                self.warnings.push(Warning {
                    object: who,
                    reason: WarningReason::NotServed,
                    message: format!(
                        "{} restrict{} access in a way switchyard does not carry out yet ({}); \
                         not served: its routes answer 403 to every client",
                        refused.join(", "),
                        if refused.len() == 1 { "s" } else { "" },
                        refusal_notes(&refused, annotations),
                    ),
                });
            }
            self.add_ingress(ing, &secrets, services, &mut entry_ids, access, client_cert);
        }
    }

    /// `custom-http-errors`: the statuses (300-599) the Ingress's default backend answers
    /// instead of its endpoints. Without a default backend (switchyard has no global one) or
    /// with a value that is not such a list, warned about and `None`.
    fn custom_errors(&mut self, who: &ObjectRef, v: &str, fallback: bool) -> Option<Arc<[u16]>> {
        let codes: Result<Vec<u16>, _> = v
            .split(',')
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(|c| {
                c.parse::<u16>()
                    .ok()
                    .filter(|n| (300..=599).contains(n))
                    .ok_or(c)
            })
            .collect();
        let why = match (&codes, fallback) {
            (Err(c), _) => format!("{} is not a status of 300-599", show(c)),
            (Ok(c), _) if c.is_empty() => "names no status".to_string(),
            (Ok(_), false) => "needs default-backend on the Ingress (switchyard has no \
                               global default backend)"
                .to_string(),
            (Ok(c), true) => return Some(c.as_slice().into()),
        };
        self.warn_ingress(
            who,
            format!("custom-http-errors: {why}; the endpoints' answers are relayed"),
        );
        None
    }

    /// The entry of `default-backend`'s Service (of the Ingress's namespace, its first port):
    /// `None`, warned, when it names none.
    fn fallback(
        &mut self,
        who: &ObjectRef,
        name: &str,
        services: &HashMap<(&str, &str), (&Service, Vec<&EndpointSlice>)>,
        entry_ids: &mut HashMap<EntryKey, EntryId>,
    ) -> Option<EntryId> {
        let port = services
            .get(&(who.namespace.as_str(), name))
            .and_then(|(svc, _)| svc.spec.as_ref()?.ports.as_ref()?.first().map(|p| p.port));
        let Some(port) = port else {
            self.warn_ingress(
                who,
                format!(
                    "default-backend: Service {}/{} does not exist or has no port; requests \
                     no endpoint takes are answered 503",
                    who.namespace,
                    show(name)
                ),
            );
            return None;
        };
        let backend = IngressBackend {
            service: Some(IngressServiceBackend {
                name: name.to_string(),
                port: Some(ServiceBackendPort {
                    number: Some(port),
                    name: None,
                }),
            }),
            resource: None,
        };
        self.ingress_backend(who, &backend, services, entry_ids)
    }

    /// An Ingress's client-certificate verification (ingress-nginx's `auth-tls-*`): `None`
    /// without it (or with `auth-tls-verify-client: off`); `Err` when it cannot be carried out
    /// as asked (the Secret missing, in another namespace, without a CA certificate in
    /// `ca.crt`; a `match-cn` that does not compile; a rule without a host, whose
    /// certificate no server name would ask for). Other bad values are warned about and read
    /// as nginx's defaults.
    fn client_cert_auth(
        &mut self,
        who: &ObjectRef,
        ing: &Ingress,
        map: &BTreeMap<String, String>,
        secrets: &HashMap<(&str, &str), &Secret>,
    ) -> Result<Option<Arc<ClientValidation>>, String> {
        use rustls_pki_types::CertificateDer;
        use rustls_pki_types::pem::PemObject;
        let Some(named) = map.get(ia::NGINX_AUTH_TLS_SECRET) else {
            return Ok(None);
        };
        if tls_auth_off(map) {
            return Ok(None);
        }
        let ns = who.namespace.as_str();
        let verify = match map.get(ia::NGINX_AUTH_TLS_VERIFY_CLIENT).map(|v| v.trim()) {
            None | Some("") => VerifyClient::On,
            Some(v) => VerifyClient::parse(v).unwrap_or_else(|| {
                self.warn_ingress(
                    who,
                    format!(
                        "auth-tls-verify-client: {} is not on, off, optional or \
                         optional_no_ca; read as on",
                        show(v)
                    ),
                );
                VerifyClient::On
            }),
        };
        let spec = ing.spec.as_ref();
        let hostless = spec.is_some_and(|s| {
            s.default_backend.is_some()
                || s.rules
                    .as_deref()
                    .unwrap_or(&[])
                    .iter()
                    .any(|r| r.host.as_deref().is_none_or(str::is_empty))
        });
        if hostless {
            return Err(
                "auth-tls-secret on a rule without a host (or with a default backend): \
                        a client certificate is asked for by server name, and no name leads \
                        there"
                    .into(),
            );
        }
        let named = named.trim();
        let (secret_ns, secret) = named.split_once('/').unwrap_or((ns, named));
        if secret_ns != ns {
            return Err(format!(
                "auth-tls-secret names {named}, in another namespace; only the Ingress's own \
                 namespace is read"
            ));
        }
        let ca = secrets
            .get(&(secret_ns, secret))
            .and_then(|s| s.data.as_ref())
            .and_then(|d| d.get(CA_KEY))
            .ok_or_else(|| format!("Secret {ns}/{secret} does not exist or has no key ca.crt"))?;
        let certificates = CertificateDer::pem_slice_iter(&ca.0)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("Secret {ns}/{secret}'s ca.crt is not PEM ({e})"))?;
        if certificates.is_empty() {
            return Err(format!(
                "Secret {ns}/{secret}'s ca.crt holds no CERTIFICATE"
            ));
        }
        let depth = match map.get(ia::NGINX_AUTH_TLS_VERIFY_DEPTH).map(|v| v.trim()) {
            None | Some("") => 1,
            Some(v) => match v.parse::<u8>() {
                Ok(d) if d > 0 => d,
                _ => {
                    self.warn_ingress(
                        who,
                        format!(
                            "auth-tls-verify-depth: {} is not 1..255; read as 1",
                            show(v)
                        ),
                    );
                    1
                }
            },
        };
        let error_page = map
            .get(ia::NGINX_AUTH_TLS_ERROR_PAGE)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
            .and_then(|v| {
                let usable =
                    (v.starts_with("http://") || v.starts_with("https://") || v.starts_with('/'))
                        && v.bytes().all(|b| b.is_ascii_graphic());
                if !usable {
                    self.warn_ingress(
                        who,
                        format!(
                            "auth-tls-error-page: {} is not an http(s) URL or an absolute \
                             path; a client without a valid certificate is answered 400",
                            show(v)
                        ),
                    );
                }
                usable.then(|| v.into())
            });
        let match_cn =
            match map.get(ia::NGINX_AUTH_TLS_MATCH_CN).map(|v| v.trim()) {
                None | Some("") => None,
                Some(v) => Some(Pattern::search(v).map_err(|why| {
                    format!("auth-tls-match-cn {} cannot be used ({why})", show(v))
                })?),
            };
        let pass_certificate = map
            .get(ia::NGINX_AUTH_TLS_PASS_CERTIFICATE)
            .and_then(|v| parse_bool(v))
            == Some(true);
        Ok(Some(Arc::new(ClientValidation {
            ca: Arc::from(ca.0.as_slice()),
            insecure_fallback: false,
            origin: format!("{ns}/{}", who.name).into(),
            ingress: Some(IngressCertAuth {
                verify,
                depth,
                error_page,
                pass_certificate,
                match_cn,
            }),
        })))
    }

    /// Asks for `host`'s clients' certificates as `v` says, unless an Ingress before this one
    /// did (which is told of the other's, which does not apply).
    fn verify_host(&mut self, who: &ObjectRef, host: &HostPattern, v: &Arc<ClientValidation>) {
        let key: Box<str> = match host {
            HostPattern::Exact(h) => h.as_str().into(),
            HostPattern::OneLabel(suffix) | HostPattern::Wildcard(suffix) => {
                format!("*{suffix}").into()
            }
        };
        let earlier = self
            .ingress_client_validations
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, e)| Arc::clone(e));
        match earlier {
            None => self.ingress_client_validations.push((key, Arc::clone(v))),
            Some(e) if e.ca == v.ca && e.ingress == v.ingress => {}
            Some(e) => self.warn_ingress(
                who,
                format!(
                    "host {key}: {} verifies its clients' certificates otherwise, and the \
                     first Ingress's verification is the host's (as nginx's server's is)",
                    e.origin
                ),
            ),
        }
    }

    /// The users of an Ingress's basic authentication (ingress-nginx's `auth-type: basic`,
    /// `auth-secret`, `auth-realm`): `None` without it; `Err` when they cannot be read (the
    /// Secret missing, in another namespace, without an `auth` key, or holding no user whose
    /// hash switchyard checks). Lines that cannot be read are warned about.
    fn basic_auth(
        &mut self,
        ns: &str,
        map: &BTreeMap<String, String>,
        secrets: &HashMap<(&str, &str), &Secret>,
    ) -> Result<Option<Arc<BasicAuth>>, String> {
        if map.get(ia::NGINX_AUTH_TYPE).map(|v| v.trim()) != Some("basic") {
            return Ok(None);
        }
        let named = map
            .get(ia::NGINX_AUTH_SECRET)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
            .ok_or("auth-secret names no Secret")?;
        let (secret_ns, secret) = named.split_once('/').unwrap_or((ns, named));
        if secret_ns != ns {
            return Err(format!(
                "auth-secret names {named}, in another namespace; only the Ingress's own \
                 namespace is read"
            ));
        }
        let text = secrets
            .get(&(secret_ns, secret))
            .and_then(|s| s.data.as_ref())
            .and_then(|d| d.get(AUTH_FILE_KEY))
            .ok_or_else(|| format!("Secret {ns}/{secret} does not exist or has no key auth"))?;
        let text = std::str::from_utf8(&text.0)
            .map_err(|_| format!("Secret {ns}/{secret}'s auth is not text"))?;
        let realm = map.get(ia::NGINX_AUTH_REALM).map_or("", |r| r.trim());
        let (auth, bad) = BasicAuth::from_htpasswd(realm, text);
        if !bad.is_empty() {
            let who = object("Secret", ns, secret);
            self.warnings.push(Warning {
                object: who,
                reason: WarningReason::InvalidObject,
                message: format!("auth: {}; those users cannot sign in", bad.join("; ")),
            });
        }
        if auth.users.is_empty() {
            return Err(format!(
                "Secret {ns}/{secret}'s auth holds no user switchyard can check"
            ));
        }
        Ok(Some(Arc::new(auth)))
    }

    /// An Ingress's external authentication (ingress-nginx's `auth-url` and its companions):
    /// `None` without it; `Err` when it cannot be asked as written (a method that is not
    /// one). A URL switchyard cannot reach refuses the Ingress before this (`nginx::support`);
    /// a Service it names that does not exist leaves the routes answering 500 until it does,
    /// as ingress-nginx's do. A bad `auth-signin` or response field name is warned about and
    /// left out: the `401` is passed on, and the field is never taken from the client.
    fn external_auth(
        &mut self,
        who: &ObjectRef,
        map: &BTreeMap<String, String>,
        services: &HashMap<(&str, &str), (&Service, Vec<&EndpointSlice>)>,
        entry_ids: &mut HashMap<EntryKey, EntryId>,
    ) -> Result<Option<Arc<ExternalAuth>>, String> {
        let Some(url) = map.get(ia::NGINX_AUTH_URL) else {
            return Ok(None);
        };
        let parsed = AuthUrl::parse(url)
            .map_err(|why| format!("auth-url {} cannot be asked: {why}", show(url)))?;
        let method = match map.get(ia::NGINX_AUTH_METHOD).map(|m| m.trim()) {
            None | Some("") => "GET",
            Some(
                m @ ("GET" | "HEAD" | "POST" | "PUT" | "PATCH" | "DELETE" | "OPTIONS" | "TRACE"),
            ) => m,
            Some(other) => {
                return Err(format!("auth-method {} is not an HTTP method", show(other)));
            }
        };
        let target = match &parsed.to {
            AuthHost::Address(addr) => AuthTarget::Address(*addr),
            AuthHost::Service {
                namespace,
                name,
                port,
            } => {
                let found = services
                    .get(&(&**namespace, &**name))
                    .and_then(|(svc, slices)| {
                        let ports = svc.spec.as_ref().and_then(|s| s.ports.as_deref());
                        let sp = ports?.iter().find(|sp| {
                            sp.port == i32::from(*port)
                                && sp.protocol.as_deref().is_none_or(|p| p == "TCP")
                        })?;
                        self.port_entry(svc, slices, sp, *port, entry_ids)
                    });
                match found {
                    Some(id) => AuthTarget::Entry(id),
                    None => {
                        self.warn_ingress(
                            who,
                            format!(
                                "auth-url names Service {namespace}/{name} port {port}, which \
                                 does not exist (or is not an HTTP port of it); every request \
                                 is answered 500 until it does"
                            ),
                        );
                        AuthTarget::Entry(self.empty_entry(namespace, name, *port, entry_ids))
                    }
                }
            }
        };
        let signin = map.get(ia::NGINX_AUTH_SIGNIN).and_then(|s| {
            let param = map
                .get(ia::NGINX_AUTH_SIGNIN_REDIRECT_PARAM)
                .map_or("", |p| p.as_str());
            match Location::parse(&signin_with_redirect(s, param)) {
                Ok(l) => Some(l),
                Err(why) => {
                    self.warn_ingress(
                        who,
                        format!(
                            "auth-signin {} {why}; a client the service refuses gets its 401",
                            show(s)
                        ),
                    );
                    None
                }
            }
        });
        let mut response_headers: Vec<Box<str>> = Vec::new();
        for name in map
            .get(ia::NGINX_AUTH_RESPONSE_HEADERS)
            .map_or("", |v| v.as_str())
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
        {
            if http::HeaderName::from_bytes(name.as_bytes()).is_ok() {
                let lower = name.to_ascii_lowercase().into_boxed_str();
                if !response_headers.contains(&lower) {
                    response_headers.push(lower);
                }
            } else {
                self.warn_ingress(
                    who,
                    format!(
                        "auth-response-headers: {} is not a field name; left out",
                        show(name)
                    ),
                );
            }
        }
        let request_redirect = map
            .get(ia::NGINX_AUTH_REQUEST_REDIRECT)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty() && v.bytes().all(|b| (0x21..0x7f).contains(&b)))
            .map(Box::from);
        Ok(Some(Arc::new(ExternalAuth {
            url: url.trim().into(),
            target,
            host: parsed.host,
            path: parsed.path,
            method: method.into(),
            signin,
            response_headers: response_headers.into(),
            request_redirect,
            always_set_cookie: map
                .get(ia::NGINX_AUTH_ALWAYS_SET_COOKIE)
                .and_then(|v| parse_bool(v))
                .unwrap_or(false),
            cache: self.auth_cache(who, map),
        })))
    }

    /// `auth-cache-key` and `auth-cache-duration` (ingress-nginx's, read only with a key):
    /// `None` without a key. A key or duration that cannot be read is warned about and
    /// nothing is kept: every request is asked, never another's answer given.
    fn auth_cache(&mut self, who: &ObjectRef, map: &BTreeMap<String, String>) -> Option<AuthCache> {
        let key = map
            .get(ia::NGINX_AUTH_CACHE_KEY)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())?;
        let key = match HashKey::parse(key) {
            Ok(k) => k,
            Err(why) => {
                self.warn_ingress(
                    who,
                    format!("auth-cache-key: {} {why}; answers are not kept", show(key)),
                );
                return None;
            }
        };
        let durations = match map.get(ia::NGINX_AUTH_CACHE_DURATION).map(|v| v.trim()) {
            None | Some("") => AuthCache::default_durations(),
            Some(v) => match cache_durations(v) {
                Ok(d) => d,
                Err(why) => {
                    self.warn_ingress(
                        who,
                        format!(
                            "auth-cache-duration: {} {why}; answers are not kept",
                            show(v)
                        ),
                    );
                    return None;
                }
            },
        };
        Some(AuthCache {
            key,
            durations,
            kept: Default::default(),
        })
    }

    /// The IngressClasses whose controller is switchyard's, and whether one is the default.
    fn claimed_classes<'c>(&self, classes: &[&'c IngressClass]) -> (BTreeSet<&'c str>, bool) {
        let mut claimed = BTreeSet::new();
        let mut default = false;
        for class in classes {
            let ours = class.spec.as_ref().and_then(|s| s.controller.as_deref())
                == Some(self.options.controller_name.as_str());
            if !ours {
                continue;
            }
            if let Some(name) = class.metadata.name.as_deref() {
                claimed.insert(name);
            }
            default |= class
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION))
                .is_some_and(|v| v == "true");
        }
        (claimed, default)
    }

    /// Whether switchyard serves `ing`: its class is one of ours, or it names none and one of
    /// ours is the default (or `--watch-ingress-without-class`).
    fn is_ours(&self, ing: &Ingress, classes: &BTreeSet<&str>, default_class: bool) -> bool {
        match class_of(ing) {
            Some(class) => classes.contains(class),
            None => default_class || self.options.watch_ingress_without_class,
        }
    }

    fn add_ingress(
        &mut self,
        ing: &Ingress,
        secrets: &HashMap<(&str, &str), &Secret>,
        services: &HashMap<(&str, &str), (&Service, Vec<&EndpointSlice>)>,
        entry_ids: &mut HashMap<EntryKey, EntryId>,
        access: Access,
        client_cert: Option<Arc<ClientValidation>>,
    ) {
        let (ns, name) = meta_key(&ing.metadata.namespace, &ing.metadata.name);
        let who = object("Ingress", ns, name);
        let refused = matches!(access, Access::Refused);
        let cert_policy = client_cert
            .as_ref()
            .and_then(|v| v.ingress.clone())
            .map(Arc::new);
        let mut settings = self.ingress_settings(ing, &who, refused);
        if refused {
            settings.allow.clear();
            settings.deny = every_address();
        }
        match access {
            Access::Basic(auth, external) => {
                settings.basic_auth = Some(auth);
                settings.external_auth = external;
            }
            Access::Open(external) => settings.external_auth = external,
            Access::Refused => {}
        }
        if let Some(map) = ing.metadata.annotations.as_ref() {
            settings.cors = self.cors(&who, map);
            settings.rate_limit = self.rate_limit(&who, map);
            settings.affinity = self.affinity(&who, map);
            settings.retry = self.retry(&who, map);
            settings.hash_by = map.get(ia::NGINX_UPSTREAM_HASH_BY).and_then(|v| {
                HashKey::parse(v)
                    .map_err(|why| {
                        self.warnings.push(Warning {
                            object: who.clone(),
                            reason: WarningReason::InvalidAnnotation,
                            message: format!(
                                "upstream-hash-by: {} {why}; the Service's algorithm picks",
                                show(v)
                            ),
                        });
                    })
                    .ok()
                    .map(Arc::new)
            });
        }
        let fallback = ing
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ia::NGINX_DEFAULT_BACKEND))
            .and_then(|name| self.fallback(&who, name.trim(), services, entry_ids));
        let custom_errors = ing
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ia::NGINX_CUSTOM_HTTP_ERRORS))
            .and_then(|v| self.custom_errors(&who, v, fallback.is_some()));
        let me = Arc::new(ingress_ref(ing));
        let Some(spec) = ing.spec.as_ref() else {
            return;
        };
        let tls_hosts = self.ingress_tls(&who, spec.tls.as_deref().unwrap_or(&[]), secrets);
        // Up to two policies per Ingress: for hosts redirected to HTTPS, and for the others.
        let mut policy_ids: [Option<u32>; 2] = [None, None];
        let mut policy_for = |b: &mut Builder<'_>, redirect: bool| -> Option<u32> {
            let slot = usize::from(redirect);
            if policy_ids[slot].is_none() {
                let id = u32::try_from(b.policies.len()).unwrap_or(u32::MAX);
                b.policies.push(RoutePolicy {
                    rewrite: settings.rewrite.clone(),
                    rewrite_path: settings.rewrite_path.clone(),
                    basic_auth: settings.basic_auth.clone(),
                    client_cert: cert_policy.clone(),
                    fallback,
                    custom_errors: custom_errors.clone(),
                    external_auth: settings.external_auth.clone(),
                    rate_limit: settings.rate_limit.clone(),
                    affinity: settings.affinity.clone(),
                    hash_by: settings.hash_by.clone(),
                    retry: settings.retry,
                    upstream_vhost: settings.upstream_vhost.clone(),
                    forwarded_prefix: settings.forwarded_prefix.clone(),
                    cors: settings.cors.clone(),
                    https_redirect: redirect.then_some(HTTPS_REDIRECT_STATUS),
                    allow: settings.allow.clone(),
                    deny: settings.deny.clone(),
                    protocol: settings.protocol,
                    server_timeout: settings.server_timeout,
                    connect_timeout: settings.connect_timeout,
                    send_timeout: settings.send_timeout,
                    max_body: settings.max_body,
                    redirect: settings.redirect.clone(),
                    app_root: settings.app_root.clone(),
                    ..RoutePolicy::of(&format!("{ns}/{name}"))
                });
                policy_ids[slot] = Some(id);
            }
            policy_ids[slot]
        };
        if let Some(backend) = &spec.default_backend
            && let Some(entry) = self.ingress_backend(&who, backend, services, entry_ids)
        {
            let policy = policy_for(self, settings.force_ssl_redirect);
            let path = match self.regex_hosts.contains(&None) {
                true => self.regex_path(&who, "/"),
                false => Some(IngressPath::Prefix("/")),
            };
            if let Some(path) = path {
                self.claim(&me, None, &path, (entry, policy), false);
            }
        }
        let passthrough = ing
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ia::NGINX_SSL_PASSTHROUGH))
            .and_then(|v| parse_bool(v))
            == Some(true)
            && !refused;
        // The first rule host (by `server-alias`'s reading): its paths are the aliases' too.
        let first_host = spec
            .rules
            .as_deref()
            .unwrap_or(&[])
            .iter()
            .find_map(|r| r.host.as_deref().filter(|h| !h.is_empty()))
            .and_then(|h| ingress_host(h).ok());
        for rule in spec.rules.as_deref().unwrap_or(&[]) {
            let mut first_entry = None;
            let host = match rule.host.as_deref().filter(|h| !h.is_empty()) {
                None => None,
                Some(h) => match ingress_host(h) {
                    Ok(pattern) => Some(pattern),
                    Err(why) => {
                        self.warn_ingress(
                            &who,
                            format!("rule host {} {why}; rule skipped", show(h)),
                        );
                        continue;
                    }
                },
            };
            if let (Some(v), Some(h)) = (&client_cert, &host) {
                self.verify_host(&who, h, v);
                if host == first_host {
                    for alias in settings.aliases.clone() {
                        self.verify_host(&who, &alias, v);
                    }
                }
            }
            let redirect = settings.force_ssl_redirect
                || (settings.ssl_redirect && host.as_ref().is_some_and(|h| covers(&tls_hosts, h)));
            let Some(http) = &rule.http else {
                continue;
            };
            let regex = self.regex_hosts.contains(&host);
            for p in &http.paths {
                let Some(claimed) = self.ingress_path(&who, regex, p) else {
                    continue;
                };
                let Some(entry) = self.ingress_backend(&who, &p.backend, services, entry_ids)
                else {
                    continue;
                };
                let policy = policy_for(self, redirect);
                self.claim(&me, host.clone(), &claimed, (entry, policy), false);
                // `server-alias`: the first rule host's paths, on each alias too (the same
                // nginx server, so the same locations).
                if host.is_some() && host == first_host {
                    for alias in &settings.aliases {
                        let target = (entry, policy);
                        self.claim(&me, Some(alias.clone()), &claimed, target, true);
                    }
                }
                first_entry.get_or_insert(entry);
            }
            if passthrough {
                self.pass_through(&who, host.as_ref(), first_entry);
            }
            // `from-to-www-redirect`: the host with or without `www.` redirects to this one.
            if settings.from_to_www
                && let (Some(HostPattern::Exact(h)), Some(entry)) = (&host, first_entry)
            {
                let other = match h.strip_prefix("www.") {
                    Some(bare) => bare.to_string(),
                    None => format!("www.{h}"),
                };
                let location = Location::parse(&format!("$scheme://{h}$request_uri"));
                if let (Ok(location), Ok(other)) = (location, ingress_host(&other)) {
                    let id = u32::try_from(self.policies.len()).unwrap_or(u32::MAX);
                    self.policies.push(RoutePolicy {
                        allow: settings.allow.clone(),
                        deny: settings.deny.clone(),
                        redirect: Some(Redirect {
                            status: WWW_REDIRECT_STATUS,
                            location,
                        }),
                        ..RoutePolicy::of(&format!("{ns}/{name}"))
                    });
                    let path = IngressPath::Prefix("/");
                    self.claim(&me, Some(other), &path, (entry, Some(id)), true);
                }
            }
        }
    }

    /// A canary Ingress: for each of its paths, its backend and its rule, offered to the
    /// main Ingress's route of the same host and path (`finish` joins them). Its other
    /// annotations are its main's, as in ingress-nginx.
    fn add_canary(
        &mut self,
        ing: &Ingress,
        services: &HashMap<(&str, &str), (&Service, Vec<&EndpointSlice>)>,
        entry_ids: &mut HashMap<EntryKey, EntryId>,
    ) {
        let (ns, name) = meta_key(&ing.metadata.namespace, &ing.metadata.name);
        let who = object("Ingress", ns, name);
        let empty = BTreeMap::new();
        let map = ing.metadata.annotations.as_ref().unwrap_or(&empty);
        let rule = self.canary_rule(&who, map);
        let me = Arc::new(ingress_ref(ing));
        let origin: Box<str> = format!("{ns}/{name}").into();
        let Some(spec) = ing.spec.as_ref() else {
            return;
        };
        if spec.default_backend.is_some() {
            self.warn_ingress(
                &who,
                "a canary's defaultBackend is not served: a canary takes requests of its main \
                 Ingress's rules only"
                    .into(),
            );
        }
        for r in spec.rules.as_deref().unwrap_or(&[]) {
            let host = match r.host.as_deref().filter(|h| !h.is_empty()) {
                None => None,
                Some(h) => match ingress_host(h) {
                    Ok(pattern) => Some(pattern),
                    Err(why) => {
                        self.warn_ingress(
                            &who,
                            format!("rule host {} {why}; rule skipped", show(h)),
                        );
                        continue;
                    }
                },
            };
            let regex = self.regex_hosts.contains(&host);
            for p in r.http.iter().flat_map(|h| &h.paths) {
                let Some(path) = self.ingress_path(&who, regex, p) else {
                    continue;
                };
                let Some(entry) = self.ingress_backend(&who, &p.backend, services, entry_ids)
                else {
                    continue;
                };
                let canary = Arc::new(Canary {
                    origin: origin.clone(),
                    entry,
                    header: rule.header.clone(),
                    header_value: rule.header_value.clone(),
                    header_pattern: rule.header_pattern.clone(),
                    cookie: rule.cookie.clone(),
                    weight: Share::new(rule.weight, rule.total),
                });
                for frontend in [Frontend::Http, Frontend::Https] {
                    self.canaries
                        .entry(path.key(frontend, host.clone()))
                        .or_default()
                        .push((Arc::clone(&me), Arc::clone(&canary)));
                }
            }
        }
    }

    /// ingress-nginx's CORS annotations, read (`None` unless `enable-cors` is true); a value
    /// that cannot be read is warned about and ingress-nginx's default takes its place.
    /// ingress-nginx's request limits per client address, if the Ingress sets any; the
    /// previous table's when unchanged (so that its counts go on). A value that is not a
    /// positive number is warned about and that limit left unset; an allowed network that
    /// cannot be read is warned about and left out (its clients are limited).
    fn rate_limit(
        &mut self,
        who: &ObjectRef,
        map: &BTreeMap<String, String>,
    ) -> Option<Arc<RateLimit>> {
        let mut number = |key: &str| -> Option<u32> {
            let v = map.get(key)?.trim();
            match v.parse::<u32>() {
                Ok(0) => None,
                Ok(n) => Some(n),
                Err(_) => {
                    self.warnings.push(Warning {
                        object: who.clone(),
                        reason: WarningReason::InvalidAnnotation,
                        message: format!(
                            "{}: {} is not a positive whole number; not limited by it",
                            key.trim_start_matches(ia::NGINX_PREFIX),
                            show(v)
                        ),
                    });
                    None
                }
            }
        };
        // With `--limit-scope cluster`, this replica's share of each (at least 1).
        let replicas = self.replicas;
        let share = |n: Option<u32>| n.map(|n| n.div_ceil(replicas).max(1));
        let rps = share(number(ia::NGINX_LIMIT_RPS));
        let rpm = share(number(ia::NGINX_LIMIT_RPM));
        let connections = share(number(ia::NGINX_LIMIT_CONNECTIONS));
        let burst_multiplier = number(ia::NGINX_LIMIT_BURST_MULTIPLIER).unwrap_or(5);
        if rps.is_none() && rpm.is_none() && connections.is_none() {
            return None;
        }
        let listed = map
            .get(ia::NGINX_LIMIT_ALLOWLIST)
            .or_else(|| map.get(ia::NGINX_LIMIT_WHITELIST))
            .map_or("", |v| v.as_str());
        let mut allow = Vec::new();
        for net in listed.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match net.parse::<Cidr>() {
                Ok(c) => allow.push(c),
                Err(e) => self.warnings.push(Warning {
                    object: who.clone(),
                    reason: WarningReason::InvalidAnnotation,
                    message: format!("limit-allowlist: {e}; its clients are limited"),
                }),
            }
        }
        let limit = RateLimit {
            rps,
            rpm,
            burst_multiplier,
            connections,
            allow,
            replicas,
            state: Default::default(),
        };
        let origin = format!("{}/{}", who.namespace, who.name);
        match self.prev_limits.get(origin.as_str()) {
            Some(prev) if **prev == limit => Some(Arc::clone(prev)),
            _ => Some(Arc::new(limit)),
        }
    }

    /// ingress-nginx's retry rule, if the Ingress sets one: `proxy-next-upstream` (`error`
    /// and `timeout` carried out, `off` no retry; the `http_*` and `non_idempotent` cases are
    /// not, warned) and `proxy-next-upstream-tries` (ingress-nginx's 3 when only the cases are
    /// set; `0`: the most switchyard tries).
    fn retry(&mut self, who: &ObjectRef, map: &BTreeMap<String, String>) -> Option<Retry> {
        let cases = map.get(ia::NGINX_PROXY_NEXT_UPSTREAM).map(|v| v.trim());
        let tries = map
            .get(ia::NGINX_PROXY_NEXT_UPSTREAM_TRIES)
            .map(|v| v.trim());
        let within = map
            .get(ia::NGINX_PROXY_NEXT_UPSTREAM_TIMEOUT)
            .map(|v| v.trim());
        if cases.is_none() && tries.is_none() && within.is_none() {
            return None;
        }
        let mut retry = Retry {
            tries: 3,
            on_timeout: true,
            within: None,
            on_status: RetryStatuses::default(),
            non_idempotent: false,
        };
        match within {
            None | Some("0") => {}
            Some(v) => match read_timeout(v) {
                Ok(d) => retry.within = Some(d),
                Err(why) => self.warn_ingress(
                    who,
                    format!("proxy-next-upstream-timeout: {} {why}; no limit", show(v)),
                ),
            },
        }
        if let Some(t) = tries {
            match t.parse::<usize>() {
                // The decision core bounds it to the most it tries.
                Ok(0) => retry.tries = usize::MAX,
                Ok(n) => retry.tries = n,
                Err(_) => self.warnings.push(Warning {
                    object: who.clone(),
                    reason: WarningReason::InvalidAnnotation,
                    message: format!(
                        "proxy-next-upstream-tries: {} is not a number; 3 tries",
                        show(t)
                    ),
                }),
            }
        }
        if let Some(cases) = cases {
            let words: Vec<&str> = cases.split_whitespace().collect();
            if words.contains(&"off") {
                retry.tries = 1;
            }
            retry.on_timeout = words.contains(&"timeout");
            retry.non_idempotent = words.contains(&"non_idempotent");
            let mut not_done = Vec::new();
            for w in words {
                let status = w.strip_prefix("http_").and_then(|n| n.parse::<u16>().ok());
                match (w, status) {
                    ("error" | "timeout" | "off" | "invalid_header" | "non_idempotent", _) => {}
                    (_, Some(status)) if retry.on_status.insert(status) => {}
                    _ => not_done.push(w),
                }
            }
            if !not_done.is_empty() {
                self.warnings.push(Warning {
                    object: who.clone(),
                    reason: WarningReason::InvalidAnnotation,
                    message: format!(
                        "proxy-next-upstream: {} is not one of nginx's cases (error, timeout, \
                         invalid_header, http_500, http_502, http_503, http_504, http_403, \
                         http_404, http_429, non_idempotent, off); left out",
                        not_done.join(", ")
                    ),
                });
            }
        }
        Some(retry)
    }

    /// ingress-nginx's cookie affinity, if the Ingress asks for it (`affinity: cookie`). A
    /// setting that cannot be read is warned about and left at its default.
    fn affinity(
        &mut self,
        who: &ObjectRef,
        map: &BTreeMap<String, String>,
    ) -> Option<Arc<CookieAffinity>> {
        let kind = map.get(ia::NGINX_AFFINITY)?.trim();
        if kind != "cookie" {
            self.warn_ingress(
                who,
                format!(
                    "affinity {} is not cookie (the only kind there is); no affinity",
                    show(kind)
                ),
            );
            return None;
        }
        let mut warn = |key: &str, v: &str, why: &str| {
            self.warnings.push(Warning {
                object: who.clone(),
                reason: WarningReason::InvalidAnnotation,
                message: format!(
                    "{}: {} {why}; its default is used",
                    key.trim_start_matches(ia::NGINX_PREFIX),
                    show(v)
                ),
            });
        };
        let get = |key: &str| map.get(key).map(|v| v.trim()).filter(|v| !v.is_empty());
        // Cookie names and attribute values are tokens and paths of visible characters
        // without `;`, `,` or spaces: nothing a value could add to the field.
        let plain = |v: &str| {
            v.bytes()
                .all(|b| (0x21..0x7f).contains(&b) && !b";,\"".contains(&b))
        };
        let mut text = |key: &str, ok: &dyn Fn(&str) -> bool| -> Option<Box<str>> {
            let v = get(key)?;
            if ok(v) {
                Some(v.into())
            } else {
                warn(key, v, "cannot be written in a cookie");
                None
            }
        };
        let name = text(ia::NGINX_SESSION_COOKIE_NAME, &|v| {
            plain(v) && !v.contains('=')
        })
        .unwrap_or_else(|| "INGRESSCOOKIE".into());
        let path = text(ia::NGINX_SESSION_COOKIE_PATH, &|v| {
            plain(v) && v.starts_with('/')
        });
        let domain = text(ia::NGINX_SESSION_COOKIE_DOMAIN, &plain);
        let samesite = text(ia::NGINX_SESSION_COOKIE_SAMESITE, &|v| {
            ["None", "Lax", "Strict"]
                .iter()
                .any(|s| s.eq_ignore_ascii_case(v))
        })
        .and_then(|v| {
            ["None", "Lax", "Strict"]
                .into_iter()
                .find(|s| s.eq_ignore_ascii_case(&v))
                .map(Box::from)
        });
        let mut seconds = |key: &str| -> Option<u64> {
            let v = get(key)?;
            match v.parse::<u64>() {
                Ok(n) => Some(n),
                Err(_) => {
                    warn(key, v, "is not a number of seconds");
                    None
                }
            }
        };
        let max_age = seconds(ia::NGINX_SESSION_COOKIE_MAX_AGE)
            .or_else(|| seconds(ia::NGINX_SESSION_COOKIE_EXPIRES));
        let secure = get(ia::NGINX_SESSION_COOKIE_SECURE).and_then(parse_bool) == Some(true);
        let balanced = match get(ia::NGINX_AFFINITY_MODE) {
            None | Some("balanced") => true,
            Some("persistent") => false,
            Some(v) => {
                warn(
                    ia::NGINX_AFFINITY_MODE,
                    v,
                    "is neither balanced nor persistent",
                );
                true
            }
        };
        Some(Arc::new(CookieAffinity {
            name,
            path,
            max_age,
            samesite,
            secure,
            domain,
            balanced,
        }))
    }

    /// `ssl-passthrough`: the TLS connections of `host` go unterminated to `entry` (its rule's
    /// first path's). A rule without a host names no server and is warned about; a host
    /// another Ingress passes through already keeps the first one's.
    fn pass_through(
        &mut self,
        who: &ObjectRef,
        host: Option<&HostPattern>,
        entry: Option<EntryId>,
    ) {
        let (Some(host), Some(entry)) = (host, entry) else {
            if host.is_none() {
                self.warn_ingress(
                    who,
                    "ssl-passthrough: a rule without a host names no server; its TLS \
                     connections are not passed through"
                        .into(),
                );
            }
            return;
        };
        if self.passthrough.iter().any(|p| &p.host == host) {
            self.warn_ingress(
                who,
                format!(
                    "ssl-passthrough: {} is passed through by another Ingress already; \
                     that one keeps it",
                    describe_host(&Some(host.clone()))
                ),
            );
            return;
        }
        self.passthrough.push(Passthrough {
            host: host.clone(),
            entry,
        });
    }

    fn cors(&mut self, who: &ObjectRef, map: &BTreeMap<String, String>) -> Option<Arc<Cors>> {
        if map.get(ia::NGINX_ENABLE_CORS).and_then(|v| parse_bool(v)) != Some(true) {
            return None;
        }
        let mut bad = |key: &str, v: &str, why: &str| {
            self.warnings.push(Warning {
                object: who.clone(),
                reason: WarningReason::InvalidAnnotation,
                message: format!("{key}: {} {why}", show(v)),
            });
        };
        let get = |key: &str| map.get(key).map(|v| v.trim()).filter(|v| !v.is_empty());
        let listed = |v: &str, word: fn(u8) -> bool| {
            v.split(',')
                .map(str::trim)
                .all(|item| !item.is_empty() && item.bytes().all(word))
        };
        let mut text = |key: &str, default: &str, word: fn(u8) -> bool, star: bool| -> Box<str> {
            match get(key) {
                None => default.into(),
                Some(v) if (star && v == "*") || listed(v, word) => v.into(),
                Some(v) => {
                    bad(
                        key,
                        v,
                        "is not a comma-separated list of names; the default applies",
                    );
                    default.into()
                }
            }
        };
        let methods = text(
            ia::NGINX_CORS_ALLOW_METHODS,
            CORS_METHODS,
            |b| b.is_ascii_alphabetic(),
            false,
        );
        let header_char = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
        let headers = text(
            ia::NGINX_CORS_ALLOW_HEADERS,
            CORS_HEADERS,
            header_char,
            true,
        );
        let expose = text(ia::NGINX_CORS_EXPOSE_HEADERS, "", header_char, true);
        let credentials = match get(ia::NGINX_CORS_ALLOW_CREDENTIALS) {
            None => true,
            Some(v) => parse_bool(v).unwrap_or_else(|| {
                bad(
                    ia::NGINX_CORS_ALLOW_CREDENTIALS,
                    v,
                    "is not true or false; true applies",
                );
                true
            }),
        };
        let max_age: Box<str> = match get(ia::NGINX_CORS_MAX_AGE) {
            None => CORS_MAX_AGE.into(),
            Some(v) if v.len() <= 10 && v.bytes().all(|b| b.is_ascii_digit()) => v.into(),
            Some(v) => {
                bad(
                    ia::NGINX_CORS_MAX_AGE,
                    v,
                    "is not a number of seconds; 1728000 applies",
                );
                CORS_MAX_AGE.into()
            }
        };
        let origins = match get(ia::NGINX_CORS_ALLOW_ORIGIN) {
            None => Origins::Any,
            Some(v) if v.split(',').any(|o| o.trim() == "*") => Origins::Any,
            Some(v) => {
                let mut list = Vec::new();
                for item in v.split(',').map(str::trim).filter(|o| !o.is_empty()) {
                    match Cors::parse_origin(item) {
                        Ok(o) => list.push(o),
                        Err(why) => bad(
                            ia::NGINX_CORS_ALLOW_ORIGIN,
                            item,
                            &format!("{why}; left out"),
                        ),
                    }
                }
                // None valid: no origin is allowed (never all of them).
                Origins::List(list)
            }
        };
        Some(Arc::new(Cors {
            flavor: CorsFlavor::Nginx,
            origins,
            methods,
            headers,
            expose,
            credentials,
            max_age,
        }))
    }

    /// A canary's `canary-by-*` and `canary-weight*` annotations, read; a value that cannot
    /// be read is warned about and takes nothing to the canary.
    fn canary_rule(&mut self, who: &ObjectRef, map: &BTreeMap<String, String>) -> CanaryRule {
        let text = |key: &str| {
            map.get(key)
                .map(|v| v.trim())
                .filter(|v| !v.is_empty())
                .map(Box::<str>::from)
        };
        let mut rule = CanaryRule {
            header: text(ia::NGINX_CANARY_BY_HEADER).map(|h| h.to_ascii_lowercase().into()),
            header_value: text(ia::NGINX_CANARY_BY_HEADER_VALUE),
            header_pattern: None,
            cookie: text(ia::NGINX_CANARY_BY_COOKIE),
            weight: 0,
            total: 100,
        };
        let bad = |b: &mut Self, key: &str, v: &str, why: String| {
            b.warnings.push(Warning {
                object: who.clone(),
                reason: WarningReason::InvalidAnnotation,
                message: format!("{key}: {} {why}", show(v)),
            });
        };
        if let Some(h) = rule.header.as_deref()
            && !h
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.!#$%&'*+^`|~".contains(&b))
        {
            bad(
                self,
                ia::NGINX_CANARY_BY_HEADER,
                h,
                "is not a header name; no request has it".into(),
            );
        }
        if let Some(v) = text(ia::NGINX_CANARY_BY_HEADER_PATTERN)
            && rule.header_value.is_none()
        {
            match self.patterns.get_as(&v, Flavor::Search) {
                Ok(p) => rule.header_pattern = Some(p),
                Err(e) => bad(
                    self,
                    ia::NGINX_CANARY_BY_HEADER_PATTERN,
                    &v,
                    format!("{e}; it never matches"),
                ),
            }
        }
        if let Some(v) = map.get(ia::NGINX_CANARY_WEIGHT_TOTAL) {
            match v.trim().parse::<u64>() {
                Ok(n) if (1..=1_000_000).contains(&n) => rule.total = n,
                _ => bad(
                    self,
                    ia::NGINX_CANARY_WEIGHT_TOTAL,
                    v,
                    "is not a whole number from 1 to 1000000; 100 applies".into(),
                ),
            }
        }
        if let Some(v) = map.get(ia::NGINX_CANARY_WEIGHT) {
            match v.trim().parse::<u64>() {
                Ok(n) => rule.weight = n.min(rule.total),
                Err(_) => bad(
                    self,
                    ia::NGINX_CANARY_WEIGHT,
                    v,
                    "is not a whole number; 0 applies (no request by weight)".into(),
                ),
            }
        }
        rule
    }

    /// Claims `prefix` on `host` for `entry` on both HTTP frontends (an Ingress is served on
    /// the plain port and the TLS port alike).
    fn claim(
        &mut self,
        me: &Arc<IngressRef>,
        host: Option<HostPattern>,
        path: &IngressPath<'_>,
        (entry, policy): (EntryId, Option<u32>),
        alias: bool,
    ) {
        for frontend in [Frontend::Http, Frontend::Https] {
            let rk = path.key(frontend, host.clone());
            self.routes.entry(rk).or_default().push(RouteClaim {
                entry,
                strip: false,
                ingress: Some(Arc::clone(me)),
                policy,
                alias,
                pattern: match path {
                    IngressPath::Regex(p) => Some(p.clone()),
                    _ => None,
                },
            });
        }
    }

    /// How path `p` of a rule is matched: as nginx's `~* "^path"` when its host's paths are
    /// regular expressions (`regex`), else by its type. A path that cannot be is warned
    /// about and skipped (`None`).
    fn ingress_path<'p>(
        &mut self,
        who: &ObjectRef,
        regex: bool,
        p: &'p HTTPIngressPath,
    ) -> Option<IngressPath<'p>> {
        let path = p.path.as_deref().unwrap_or("/");
        let exact = match p.path_type.as_str() {
            "Exact" => true,
            "Prefix" | "ImplementationSpecific" => false,
            other => {
                self.warn_ingress(
                    who,
                    format!(
                        "path {} has pathType {} (Exact, Prefix or ImplementationSpecific); \
                         path skipped",
                        show(path),
                        show(other)
                    ),
                );
                return None;
            }
        };
        if regex {
            // Every path of the host, Exact too, is nginx's `~* "^path"`.
            return self.regex_path(who, path);
        }
        if let Err(why) = validate_prefix(path) {
            self.warn_ingress(who, format!("path {} {why}; path skipped", show(path)));
            return None;
        }
        if looks_like_regex(path) {
            self.warn_ingress(
                who,
                format!(
                    "path {} looks like a regular expression, which it is only with \
                     ingress-nginx's use-regex or rewrite-target on an Ingress of its host; it \
                     is matched as a literal prefix",
                    show(path)
                ),
            );
        }
        Some(if exact {
            IngressPath::Exact(path)
        } else {
            // Prefix matching is element-wise and ignores a trailing slash (the spec: `/foo/`
            // matches `/foo`).
            IngressPath::Prefix(match path.trim_end_matches('/') {
                "" => "/",
                trimmed => trimmed,
            })
        })
    }

    /// An ingress-nginx regular-expression path (`location ~* "^path"`), compiled; a path
    /// that is not one is warned about and skipped, never matched as something else.
    fn regex_path<'p>(&mut self, who: &ObjectRef, path: &'p str) -> Option<IngressPath<'p>> {
        let why = if !path.starts_with('/') {
            "does not start with /".to_string()
        } else if path.len() > MAX_REGEX_PATH {
            format!("is longer than {MAX_REGEX_PATH} bytes")
        } else if path.bytes().any(|b| !(0x21..0x7f).contains(&b)) {
            "holds a space, a control character or a byte that is not ASCII".to_string()
        } else {
            match self.patterns.get_as(path, Flavor::Location) {
                Ok(p) => return Some(IngressPath::Regex(p)),
                Err(e) => e.to_string(),
            }
        };
        self.warn_ingress(
            who,
            format!(
                "path {} is a regular expression here (ingress-nginx's use-regex or \
                 rewrite-target on an Ingress of its host) and {why}; path skipped",
                show(path)
            ),
        );
        None
    }

    fn warn_ingress(&mut self, who: &ObjectRef, message: String) {
        self.warnings.push(Warning {
            object: who.clone(),
            reason: WarningReason::InvalidObject,
            message,
        });
    }

    /// Reads the Ingress's `switchyard.io/` annotations (and the ingress-nginx ones that mean
    /// the same); warns about unknown switchyard keys and, once, about the ingress-nginx keys
    /// that have no equivalent here.
    fn ingress_settings(
        &mut self,
        ing: &Ingress,
        who: &ObjectRef,
        refused: bool,
    ) -> IngressSettings {
        let mut s = IngressSettings {
            ssl_redirect: true,
            ..IngressSettings::default()
        };
        let Some(map) = ing.metadata.annotations.as_ref() else {
            return s;
        };
        let mut unsupported = Vec::new();
        let mut values: BTreeMap<&str, (&str, &str)> = BTreeMap::new();
        for (k, v) in map {
            if let Some(&(_, ours)) = ia::NGINX_ALIASES.iter().find(|(nginx, _)| nginx == k) {
                // switchyard's own key wins over its ingress-nginx alias.
                values.entry(ours).or_insert((k.as_str(), v.as_str()));
            } else if ia::KNOWN.contains(&k.as_str()) {
                values.insert(ours_key(k), (k.as_str(), v.as_str()));
            } else if k == ia::NGINX_REWRITE_TARGET || k == ia::NGINX_USE_REGEX {
                values.insert(k.as_str(), (k.as_str(), v.as_str()));
            } else if k.starts_with(ia::PREFIX) {
                let hint = nearest_key(k, ia::PREFIX, "", &ia::KNOWN)
                    .map(|n| format!("; did you mean {n}?"))
                    .unwrap_or_default();
                self.warnings.push(Warning {
                    object: who.clone(),
                    reason: WarningReason::InvalidAnnotation,
                    message: format!("unknown annotation {k}; ignored{hint}"),
                });
            } else if k.starts_with(ia::NGINX_PREFIX)
                && matches!(nginx::support(k, v, map), nginx::Support::Ignored(_))
                && !(refused && k[ia::NGINX_PREFIX.len()..].starts_with("auth-"))
            {
                // Served ones (also those that differ in detail, as docs/ingress.md says) are
                // carried out, refused ones warned about as the Ingress is refused. (An
                // Ingress refused for its authentication is warned about once for it.)
                unsupported.push(k.as_str());
            }
        }
        if !unsupported.is_empty() {
            self.warnings.push(Warning {
                object: who.clone(),
                reason: WarningReason::InvalidAnnotation,
                message: format!(
                    "ingress-nginx annotation(s) switchyard does not support: {}; ignored \
                     (docs/ingress.md lists what each maps to)",
                    unsupported.join(", ")
                ),
            });
        }
        let mut bad = |key: &str, v: &str, why: String| {
            self.warnings.push(Warning {
                object: who.clone(),
                reason: WarningReason::InvalidAnnotation,
                message: format!("{key}: {} {why}", show(v)),
            });
        };
        let codes: BTreeMap<&str, (&str, &str)> = values
            .iter()
            .filter(|(ours, _)| {
                **ours == ia::PERMANENT_REDIRECT_CODE || **ours == ia::TEMPORAL_REDIRECT_CODE
            })
            .map(|(ours, kv)| (*ours, *kv))
            .collect();
        let own_rewrite = values.contains_key(ia::REWRITE_TARGET);
        for (ours, (key, v)) in values {
            match ours {
                ia::NGINX_USE_REGEX if parse_bool(v).is_none() => {
                    bad(key, v, "is not true or false; false applies".into());
                }
                ia::NGINX_REWRITE_TARGET if own_rewrite || v.trim().is_empty() => {}
                ia::NGINX_REWRITE_TARGET => match Location::rewrite(v) {
                    Ok(target) => s.rewrite_path = Some(target),
                    // The paths still become regular expressions (`asks_for_regex`), as
                    // ingress-nginx's do; only the rewrite is left out.
                    Err(why) => bad(key, v, format!("{why}; no rewrite")),
                },
                ia::SSL_REDIRECT | ia::FORCE_SSL_REDIRECT => match v.trim() {
                    "true" | "false" => {
                        let on = v.trim() == "true";
                        if ours == ia::SSL_REDIRECT {
                            s.ssl_redirect = on;
                        } else {
                            s.force_ssl_redirect = on;
                        }
                    }
                    _ => bad(key, v, "is not \"true\" or \"false\"; default used".into()),
                },
                ia::REWRITE_TARGET => {
                    if v.contains('$') {
                        bad(
                            key,
                            v,
                            format!(
                                "uses capture groups ({}), which switchyard's key does not \
                                 fill in (it replaces the matched prefix); ingress-nginx's \
                                 rewrite-target does, on regular-expression paths; ignored",
                                capture_groups(v)
                            ),
                        );
                    } else if let Err(why) = validate_prefix(v.trim()) {
                        bad(key, v, format!("{why}; ignored"));
                    } else {
                        s.rewrite = Some(v.trim().into());
                    }
                }
                ia::ALLOWLIST_SOURCE_RANGE | ia::DENYLIST_SOURCE_RANGE => {
                    let mut nets = Vec::new();
                    for item in v.split(',').map(str::trim).filter(|i| !i.is_empty()) {
                        match item.parse::<Cidr>() {
                            Ok(n) => nets.push(n),
                            Err(e) => bad(key, item, format!("{e}; left out")),
                        }
                    }
                    if ours == ia::ALLOWLIST_SOURCE_RANGE {
                        if nets.is_empty() && !v.trim().is_empty() {
                            // Every range was bad: fail closed rather than serve everyone.
                            bad(
                                key,
                                v,
                                "has no valid range; the routes refuse every client".into(),
                            );
                            s.deny.extend(every_address());
                        }
                        s.allow = nets;
                    } else {
                        s.deny.extend(nets);
                    }
                }
                ia::BACKEND_PROTOCOL => match BackendProtocol::parse(v) {
                    Some(p) => s.protocol = Some(p),
                    None => bad(
                        key,
                        v,
                        "is not HTTP, HTTPS, H2C, H2, GRPC or GRPCS; the Service's protocol applies"
                            .into(),
                    ),
                },
                ia::PROXY_READ_TIMEOUT => match read_timeout(v) {
                    Ok(d) => s.server_timeout = Some(d),
                    Err(why) => bad(key, v, format!("{why}; --server-timeout applies")),
                },
                ia::PROXY_CONNECT_TIMEOUT => match read_timeout(v) {
                    Ok(d) => s.connect_timeout = Some(d),
                    Err(why) => bad(key, v, format!("{why}; the default 5 s applies")),
                },
                ia::PROXY_SEND_TIMEOUT => match read_timeout(v) {
                    Ok(d) => s.send_timeout = Some(d),
                    Err(why) => bad(key, v, format!("{why}; the read timeout bounds writes")),
                },
                ia::PROXY_BODY_SIZE => match body_size(v) {
                    Ok(n) => s.max_body = n,
                    // A limit that cannot be read is not dropped: no body is taken until the
                    // value is fixed (a GET without one is served).
                    Err(why) => {
                        bad(
                            key,
                            v,
                            format!("{why}; no request body is accepted until it is fixed (413)"),
                        );
                        s.max_body = Some(0);
                    }
                },
                ia::SERVER_ALIAS => {
                    for h in v.split([',', ' ']).map(str::trim).filter(|h| !h.is_empty()) {
                        match ingress_host(h) {
                            Ok(p) if !s.aliases.contains(&p) => s.aliases.push(p),
                            Ok(_) => {}
                            Err(why) => bad(key, h, format!("{why}; left out")),
                        }
                    }
                }
                ia::UPSTREAM_VHOST => match validate_host(v.trim()) {
                    Ok(HostPattern::Exact(_)) => s.upstream_vhost = Some(v.trim().into()),
                    Ok(_) => bad(key, v, "is a wildcard, not a host; the client's Host is sent".into()),
                    Err(why) => bad(key, v, format!("{why}; the client's Host is sent")),
                },
                ia::X_FORWARDED_PREFIX => {
                    let v = v.trim();
                    if v.is_empty() || v.bytes().any(|b| !(0x20..0x7f).contains(&b)) {
                        bad(key, v, "is not a header value of visible characters; not sent".into());
                    } else {
                        s.forwarded_prefix = Some(v.into());
                    }
                }
                ia::FROM_TO_WWW_REDIRECT => match parse_bool(v) {
                    Some(b) => s.from_to_www = b,
                    None => bad(key, v, "is not true or false; false applies".into()),
                },
                ia::APP_ROOT => match validate_prefix(v.trim()) {
                    Ok(()) if v.trim() != "/" => s.app_root = Some(v.trim().into()),
                    Ok(()) => bad(key, v, "is / itself; ignored".into()),
                    Err(why) => bad(key, v, format!("{why}; ignored")),
                },
                ia::PERMANENT_REDIRECT | ia::TEMPORAL_REDIRECT => {
                    let permanent = ours == ia::PERMANENT_REDIRECT;
                    // permanent-redirect wins, as in ingress-nginx (the map is in key order:
                    // permanent comes first).
                    if !permanent && s.redirect.is_some() {
                        continue;
                    }
                    let (code_key, default) = if permanent {
                        (ia::PERMANENT_REDIRECT_CODE, 301)
                    } else {
                        (ia::TEMPORAL_REDIRECT_CODE, 302)
                    };
                    let status = match codes.get(code_key) {
                        None => default,
                        Some(&(ck, cv)) => match cv.trim().parse::<u16>() {
                            Ok(c) if (300..=308).contains(&c) => c,
                            _ => {
                                bad(ck, cv, format!("is not a status from 300 to 308; {default} applies"));
                                default
                            }
                        },
                    };
                    match Location::parse(v) {
                        Ok(location) => s.redirect = Some(Redirect { status, location }),
                        Err(why) => bad(key, v, format!("{why}; no redirect")),
                    }
                }
                _ => {}
            }
        }
        s
    }

    /// Resolves the Secrets of `spec.tls` into certificates for their hosts; returns the
    /// hosts TLS covers. A missing or unusable Secret is a warning; its hosts then get the
    /// default certificate.
    fn ingress_tls(
        &mut self,
        who: &ObjectRef,
        tls: &[IngressTLS],
        secrets: &HashMap<(&str, &str), &Secret>,
    ) -> Vec<HostPattern> {
        let mut covered = Vec::new();
        if !tls.is_empty() && !self.options.tls_port {
            self.warn_ingress(
                who,
                "spec.tls cannot be served: no TLS port is open (start switchyard with \
                 --ssl-cert, or in a cluster without --https-port 0); its hosts are served \
                 over plain HTTP only"
                    .to_string(),
            );
        }
        for t in tls {
            let hosts: Vec<HostPattern> = t
                .hosts
                .as_deref()
                .unwrap_or(&[])
                .iter()
                .filter_map(|h| ingress_host(h).ok())
                .collect();
            covered.extend(hosts.iter().cloned());
            let Some(secret_name) = t.secret_name.as_deref().filter(|n| !n.is_empty()) else {
                continue;
            };
            let ns = who.namespace.as_str();
            let Some(secret) = secrets.get(&(ns, secret_name)) else {
                self.warn_ingress(
                    who,
                    format!(
                        "TLS Secret {ns}/{secret_name} does not exist (or is not of type \
                         kubernetes.io/tls); its hosts get the default certificate"
                    ),
                );
                continue;
            };
            match secret_pem(secret) {
                Ok(pem) => {
                    let slot = self
                        .certificates
                        .entry((ns.to_string(), secret_name.to_string()))
                        .or_insert_with(|| (BTreeSet::new(), pem));
                    slot.0.extend(hosts.iter().map(|h| match h {
                        HostPattern::Exact(n) => n.clone(),
                        HostPattern::Wildcard(s) | HostPattern::OneLabel(s) => format!("*{s}"),
                    }));
                }
                Err(why) => self.warn_ingress(
                    who,
                    format!(
                        "TLS Secret {ns}/{secret_name} {why}; its hosts get the default certificate"
                    ),
                ),
            }
        }
        covered
    }

    /// The entry an Ingress backend names, made when the Service has none of its own (a
    /// type LoadBalancer Service, or one the Service-annotation mode leaves out). `None`, with
    /// a warning, for a backend that cannot be served.
    fn ingress_backend(
        &mut self,
        who: &ObjectRef,
        backend: &IngressBackend,
        services: &HashMap<(&str, &str), (&Service, Vec<&EndpointSlice>)>,
        entry_ids: &mut HashMap<EntryKey, EntryId>,
    ) -> Option<EntryId> {
        let ns = who.namespace.clone();
        let Some(sb) = &backend.service else {
            let kind = backend
                .resource
                .as_ref()
                .map_or("<none>".to_string(), |r| r.kind.clone());
            self.warn_ingress(
                who,
                format!("backend is a {kind} resource, not a Service; skipped"),
            );
            return None;
        };
        let port = sb.port.as_ref();
        // What an unresolved backend's empty entry is keyed by (0 for a port given by name).
        let given = port
            .and_then(|p| p.number)
            .and_then(|n| u16::try_from(n).ok())
            .unwrap_or(0);
        let Some((svc, slices)) = services.get(&(ns.as_str(), sb.name.as_str())) else {
            // The route stays, and answers 503 until the Service exists (as ingress-nginx).
            self.warn_ingress(
                who,
                format!(
                    "backend Service {ns}/{} does not exist; its routes answer 503",
                    sb.name
                ),
            );
            return Some(self.empty_entry(&ns, &sb.name, given, entry_ids));
        };
        let ports = svc
            .spec
            .as_ref()
            .and_then(|s| s.ports.as_deref())
            .unwrap_or(&[]);
        let sp = ports.iter().find(|sp| match port {
            Some(p) => match (&p.name, p.number) {
                (Some(n), _) if !n.is_empty() => sp.name.as_deref() == Some(n.as_str()),
                (_, Some(num)) => sp.port == num,
                _ => false,
            },
            // No port: the Service's only port.
            None => ports.len() == 1,
        });
        let Some(sp) = sp else {
            let wanted = port.map_or("(none given)".to_string(), |p| {
                p.name
                    .clone()
                    .filter(|n| !n.is_empty())
                    .or(p.number.map(|n| n.to_string()))
                    .unwrap_or_default()
            });
            self.warn_ingress(
                who,
                format!(
                    "backend Service {ns}/{} has no port {wanted}; its routes answer 503",
                    sb.name
                ),
            );
            return Some(self.empty_entry(&ns, &sb.name, given, entry_ids));
        };
        let number = u16::try_from(sp.port).ok()?;
        if sp.protocol.as_deref().is_some_and(|p| p != "TCP") {
            self.warn_ingress(
                who,
                format!(
                    "backend Service {ns}/{} port {number} is not TCP; skipped",
                    sb.name
                ),
            );
            return None;
        }
        match self.port_entry(svc, slices, sp, number, entry_ids) {
            Some(id) => Some(id),
            None => {
                self.warn_ingress(
                    who,
                    format!(
                        "backend {ns}/{}:{number} is a raw TCP frontend (--tcp-services); skipped",
                        sb.name
                    ),
                );
                None
            }
        }
    }

    /// The entry of Service port `sp` (number `number`), made without routes when the
    /// Service has none of its own for it; `None` when the port is a raw TCP frontend.
    pub(super) fn port_entry(
        &mut self,
        svc: &Service,
        slices: &[&EndpointSlice],
        sp: &ServicePort,
        number: u16,
        entry_ids: &mut HashMap<EntryKey, EntryId>,
    ) -> Option<EntryId> {
        let (ns, name) = meta_key(&svc.metadata.namespace, &svc.metadata.name);
        let key = EntryKey {
            namespace: ns.to_string(),
            service: name.to_string(),
            port: number,
        };
        if let Some(&id) = entry_ids.get(&key) {
            let e = &self.entries[id as usize];
            return (!matches!(e.frontend, Frontend::Tcp(_))).then_some(id);
        }
        if let Some((index, entries)) = &self.frozen {
            // A Gateway-only build shares the previous entries and may not add one.
            return match index.get(&key) {
                Some(&id) => entries
                    .get(id as usize)
                    .filter(|e| !matches!(e.frontend, Frontend::Tcp(_)))
                    .map(|_| id),
                None => {
                    self.needs_full = true;
                    None
                }
            };
        }
        let svc_who = object("Service", ns, name);
        let settings = self.service_settings(svc, &svc_who);
        let id = EntryId::try_from(self.entries.len()).unwrap_or(EntryId::MAX);
        self.add_port(svc, &svc_who, &settings, sp, number, slices, false);
        self.ingress_only.insert((ns.to_string(), name.to_string()));
        entry_ids.insert(key, id);
        Some(id)
    }

    /// An entry with no endpoints for a backend that does not resolve: its routes answer 503.
    pub(super) fn empty_entry(
        &mut self,
        ns: &str,
        service: &str,
        port: u16,
        entry_ids: &mut HashMap<EntryKey, EntryId>,
    ) -> EntryId {
        let key = EntryKey {
            namespace: ns.to_string(),
            service: service.to_string(),
            port,
        };
        if let Some(&id) = entry_ids.get(&key) {
            return id;
        }
        let id = EntryId::try_from(self.entries.len()).unwrap_or(EntryId::MAX);
        let home = ns == self.options.home_namespace;
        self.entries.push(Entry {
            name: entry_name((!home).then_some(ns), service, port).into(),
            state: self.prev_entries.get(&key).cloned().unwrap_or_default(),
            key: key.clone(),
            frontend: Frontend::Http,
            algorithm: self.options.default_algorithm,
            cookie_sticky: false,
            client_ip_affinity: None,
            maxconn: None,
            endpoints: Vec::new(),
            check: CheckSpec::default(),
            upstream: Upstream::default(),
        });
        self.ingress_only
            .insert((ns.to_string(), service.to_string()));
        entry_ids.insert(key, id);
        id
    }
}

/// The hosts (`None`: rules without one) whose paths are regular expressions: those of a
/// rule of an Ingress that asks for it (`asks_for_regex`). A canary asks for nothing: it is
/// not served.
fn regex_hosts(ingresses: &[&Ingress]) -> HashSet<Option<HostPattern>> {
    let mut hosts = HashSet::new();
    for ing in ingresses {
        let Some(a) = ing.metadata.annotations.as_ref() else {
            continue;
        };
        if !asks_for_regex(a) || is_canary(a) {
            continue;
        }
        let rules = ing.spec.as_ref().and_then(|s| s.rules.as_deref());
        for rule in rules.unwrap_or(&[]) {
            match rule.host.as_deref().filter(|h| !h.is_empty()) {
                None => {
                    hosts.insert(None);
                }
                Some(h) => {
                    if let Ok(p) = ingress_host(h) {
                        hosts.insert(Some(p));
                    }
                }
            }
        }
        if ing
            .spec
            .as_ref()
            .is_some_and(|s| s.default_backend.is_some())
        {
            hosts.insert(None);
        }
    }
    hosts
}

/// Whether an Ingress makes its hosts' paths regular expressions, as ingress-nginx's
/// `use-regex: "true"` and its `rewrite-target` do (for every Ingress of those hosts).
fn asks_for_regex(annotations: &BTreeMap<String, String>) -> bool {
    let use_regex = annotations
        .get(ia::NGINX_USE_REGEX)
        .and_then(|v| parse_bool(v))
        .unwrap_or(false);
    let rewrite = !annotations.contains_key(ia::REWRITE_TARGET)
        && annotations
            .get(ia::NGINX_REWRITE_TARGET)
            .is_some_and(|v| !v.trim().is_empty());
    use_regex || rewrite
}

/// The capture groups a rewrite target names (`$1, $2`), as written, for a warning.
fn capture_groups(v: &str) -> String {
    let mut groups: Vec<&str> = Vec::new();
    for (i, _) in v.match_indices('$') {
        let digits = v[i + 1..]
            .find(|c: char| !c.is_ascii_digit())
            .map_or(&v[i..], |n| &v[i..i + 1 + n]);
        if digits.len() > 1 && !groups.contains(&digits) {
            groups.push(digits);
        }
    }
    if groups.is_empty() {
        "$".into()
    } else {
        groups.join(", ")
    }
}

/// Whether an Ingress path holds what only a regular expression means (groups, classes,
/// repetition, alternation, anchors), as ingress-nginx's `use-regex` paths do. A `.` alone
/// is left out: literal paths hold dots (`/v1.2/`, `/favicon.ico`).
fn looks_like_regex(path: &str) -> bool {
    path.contains(['(', ')', '[', ']', '*', '+', '|', '^', '$', '{', '}', '\\'])
}

/// The IngressClass an Ingress names: `spec.ingressClassName`, else the older annotation.
pub fn class_of(ing: &Ingress) -> Option<&str> {
    ing.spec
        .as_ref()
        .and_then(|s| s.ingress_class_name.as_deref())
        .or_else(|| {
            ing.metadata
                .annotations
                .as_ref()?
                .get(LEGACY_CLASS_ANNOTATION)
                .map(String::as_str)
        })
}

/// Every IPv4 and IPv6 client, as deny ranges: routes that refuse everyone.
fn every_address() -> Vec<Cidr> {
    ["0.0.0.0/0", "::/0"]
        .iter()
        .filter_map(|n| n.parse::<Cidr>().ok())
        .collect()
}

/// An Ingress as its claims name it.
fn ingress_ref(ing: &Ingress) -> IngressRef {
    let (ns, name) = meta_key(&ing.metadata.namespace, &ing.metadata.name);
    IngressRef {
        created: ing
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string()),
        namespace: ns.to_string(),
        name: name.to_string(),
    }
}

/// Whether an Ingress is a canary of another (`canary: "true"`, read as ingress-nginx reads a
/// boolean).
/// The ready endpoints of a Service's slices (each address once): the replicas behind it.
/// An endpoint without a `ready` condition is ready, as Kubernetes reads it.
pub(super) fn ready_endpoints(slices: &[&EndpointSlice]) -> u32 {
    let ready: HashSet<&str> = slices
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .flat_map(|e| e.addresses.iter().map(String::as_str))
        .collect();
    u32::try_from(ready.len()).unwrap_or(u32::MAX)
}

/// `auth-cache-duration` as nginx's `proxy_cache_valid` reads each of its comma-separated
/// entries: status codes (or `any`) then a time; no code is `200 301 302`, as nginx's.
pub(super) fn cache_durations(v: &str) -> Result<CacheDurations, String> {
    let mut out = Vec::new();
    for entry in v.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let words: Vec<&str> = entry.split_whitespace().collect();
        let Some((time, codes)) = words.split_last() else {
            continue;
        };
        let d = parse_duration(time)?;
        let codes = match codes {
            [] => Some(Box::from([200, 301, 302].as_slice())),
            ["any"] => None,
            codes => Some(
                codes
                    .iter()
                    .map(|c| match c.parse::<u16>() {
                        Ok(n) if (100..=599).contains(&n) => Ok(n),
                        _ => Err(format!("has {c:?}, which is not a status code or any")),
                    })
                    .collect::<Result<Box<[u16]>, String>>()?,
            ),
        };
        out.push((codes, d));
    }
    if out.is_empty() {
        return Err("names no duration".into());
    }
    Ok(out.into())
}

/// `auth-tls-verify-client: off`: no client certificate is asked for.
fn tls_auth_off(map: &BTreeMap<String, String>) -> bool {
    map.get(ia::NGINX_AUTH_TLS_VERIFY_CLIENT)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("off"))
}

fn is_canary(map: &BTreeMap<String, String>) -> bool {
    map.get(ia::NGINX_CANARY)
        .and_then(|v| parse_bool(v))
        .unwrap_or(false)
}

/// Why each of `refused` refuses its Ingress, once per reason (the catalogue's notes).
fn refusal_notes(refused: &[&str], all: Option<&BTreeMap<String, String>>) -> String {
    let mut notes: Vec<&str> = Vec::new();
    let empty = BTreeMap::new();
    let all = all.unwrap_or(&empty);
    for key in refused {
        let value = all.get(*key).map_or("", String::as_str);
        let note = match *key {
            ia::NGINX_SSL_PASSTHROUGH => {
                "TLS passthrough is served with --enable-ssl-passthrough only (as in \
                 ingress-nginx)"
            }
            _ => nginx::support(key, value, all).note(),
        };
        if !notes.contains(&note) {
            notes.push(note);
        }
    }
    notes.join("; ")
}

/// switchyard's key for a known one (the keys are `&'static`).
fn ours_key(k: &str) -> &'static str {
    ia::KNOWN.iter().copied().find(|&x| x == k).unwrap_or("")
}

/// `proxy-read-timeout`: whole seconds as ingress-nginx writes them (`60`), or a duration
/// (`90s`, `2m`); more than zero.
fn read_timeout(v: &str) -> Result<Duration, String> {
    let v = v.trim();
    let d = match v.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => parse_duration(v)?,
    };
    if d.is_zero() || d > MAX_DURATION {
        return Err("must be more than 0 and at most a week".into());
    }
    Ok(d)
}

/// `proxy-body-size` as ingress-nginx reads it: bytes, or a number with `k`, `m` or `g`
/// (powers of 1024, any case); `0` is no limit (`None`).
fn body_size(v: &str) -> Result<Option<u64>, &'static str> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (digits, unit) = v.split_at(split);
    if digits.is_empty() {
        return Err("is not a size like 1048576, 512k, 8m or 1g");
    }
    // nginx's units (`8m`); the ways people also write them (`8mb`, `8MiB`) mean the same.
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return Err("has a unit other than k, m or g"),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| "is not a size like 1048576, 512k, 8m or 1g")?;
    let bytes = n
        .checked_shl(shift)
        .filter(|b| b >> shift == n)
        .ok_or("is too large")?;
    Ok((bytes > 0).then_some(bytes))
}

/// An Ingress rule's host: a DNS name, or `*.` and a name, which matches exactly one label.
/// No port (the spec forbids one) and no IP address.
fn ingress_host(h: &str) -> Result<HostPattern, &'static str> {
    if h.contains(':') {
        return Err("has a port, which an Ingress host may not");
    }
    if h.parse::<IpAddr>().is_ok() {
        return Err("is an IP address, which an Ingress host may not be");
    }
    match validate_host(h)? {
        HostPattern::Wildcard(suffix) => Ok(HostPattern::OneLabel(suffix)),
        exact => Ok(exact),
    }
}

/// Whether the TLS hosts `tls` cover the rule host `host` (the same name, or a one-label
/// wildcard over it).
fn covers(tls: &[HostPattern], host: &HostPattern) -> bool {
    tls.iter().any(|t| {
        t == host
            || matches!((t, host), (HostPattern::OneLabel(s), HostPattern::Exact(h))
                if h.len() > s.len() && h.ends_with(s.as_str()) && !h[..h.len() - s.len()].contains('.'))
    })
}

/// The certificate chain and key of a `kubernetes.io/tls` Secret as one PEM bundle, or why
/// it cannot be used. The blocks are checked as PEM here; whether the key fits the
/// certificate is the TLS side's check as it loads them (logged and counted there).
pub(super) fn secret_pem(secret: &Secret) -> Result<Arc<[u8]>, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    if secret.type_.as_deref() != Some("kubernetes.io/tls") {
        return Err(format!(
            "is of type {}, not kubernetes.io/tls",
            show(secret.type_.as_deref().unwrap_or("Opaque"))
        ));
    }
    let data = secret.data.as_ref();
    let field = |k: &str| data.and_then(|d| d.get(k)).map(|b| b.0.as_slice());
    let (Some(crt), Some(key)) = (field("tls.crt"), field("tls.key")) else {
        return Err("lacks tls.crt or tls.key".into());
    };
    let chain = CertificateDer::pem_slice_iter(crt)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("has a bad tls.crt ({e})"))?;
    if chain.is_empty() {
        return Err("has no CERTIFICATE in tls.crt".into());
    }
    PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("has a bad tls.key ({e})"))?;
    let mut pem = Vec::with_capacity(crt.len() + key.len() + 1);
    pem.extend_from_slice(crt);
    if !crt.ends_with(b"\n") {
        pem.push(b'\n');
    }
    pem.extend_from_slice(key);
    Ok(pem.into())
}

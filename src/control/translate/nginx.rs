//! ingress-nginx's annotations — every key its annotations page lists — and what switchyard does
//! with each: the one catalogue that the Ingress translation (which keys refuse an Ingress),
//! the migration report (`--dry-run --ingress-nginx-report`) and docs/ingress.md read, so the
//! three cannot disagree (tests hold the translation and the page to it). Pure: no I/O, no
//! clock; it decides nothing about a request.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::api::networking::v1::Ingress;
use serde::Serialize;

use super::annotations::parse_bool;
use super::view::{Warning, WarningReason};
use crate::table::external_auth::AuthUrl;

/// ingress-nginx's annotation prefix.
pub const PREFIX: &str = "nginx.ingress.kubernetes.io/";

/// What switchyard does with an annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", content = "note", rename_all = "kebab-case")]
pub enum Support {
    /// Served with ingress-nginx's meaning and values.
    Served,
    /// Served, with the difference the note states.
    Differs(&'static str),
    /// Not carried out: the Ingress is served without it (warned). The note says what to do
    /// instead.
    Ignored(&'static str),
    /// It restricts who is served, or hands the connection to the backend, and is not carried
    /// out: the Ingress is not served (warned; its routes answer 403, or, for a canary, its
    /// main Ingress keeps all the traffic), never served open.
    Refused(&'static str),
}

impl Support {
    pub fn word(&self) -> &'static str {
        match self {
            Support::Served => "served",
            Support::Differs(_) => "differs",
            Support::Ignored(_) => "ignored",
            Support::Refused(_) => "refused",
        }
    }

    pub fn note(&self) -> &'static str {
        match self {
            Support::Served => "",
            Support::Differs(n) | Support::Ignored(n) | Support::Refused(n) => n,
        }
    }
}

const DIGEST: &str = "digest authentication is not carried out (basic is)";
const AUTH_ALONE: &str = "auth-secret without auth-type: basic: ingress-nginx would serve \
                          the Ingress open; switchyard does not guess which authentication \
                          was meant";
const AUTH_MAP: &str = "auth-map Secrets (a key per user) are not read yet; auth-file (the \
                        htpasswd file in the key auth) is";
const EXT_AUTH: &str = "served for an http:// URL of a Service (<name>.<namespace>.svc, its \
                        port) or of an IP address, as ingress-nginx's auth_request: the \
                        client's fields without its body, X-Original-URL, X-Original-Method, \
                        X-Auth-Request-Redirect; 2xx lets the request through, 401 and 403 are \
                        passed on, anything else is a 500. Each subrequest goes over a new \
                        connection; every request is asked unless auth-cache-key keeps \
                        answers";
const EXT_AUTH_WITH: &str = "read only with auth-url";
const EXT_AUTH_CACHE: &str = "answers are kept per route (at most 4096, forgotten at the next \
                              table build) under the key filled in as upstream-hash-by fills \
                              its in ($remote_addr, $host, $request_uri, $uri, $args, \
                              $http_NAME, $cookie_NAME, $arg_NAME); a key with another variable \
                              ($remote_user) is warned about and nothing is kept";
const EXT_AUTH_KEEPALIVE: &str = "each subrequest goes over a new connection";
const TLS_AUTH: &str = "served per host on the TLS port, as nginx's ssl_verify_client is per \
                        server: the Secret's ca.crt (the Ingress's own namespace), every path of \
                        the host verified, whichever Ingress routes it; no certificate where one \
                        is required is 400 (or the error page), ssl-client-verify, \
                        ssl-client-subject-dn and ssl-client-issuer-dn go to the backend. Over \
                        plain HTTP, where none can be shown, the Ingress's own routes are judged \
                        as a connection without one (nginx serves them unverified); a rule \
                        without a host or a default backend refuses the Ingress (its \
                        certificate would be asked for by no server name)";
const TLS_AUTH_WITH: &str = "read only with auth-tls-secret";
const CANARY_WITH: &str = "read only on a canary Ingress (canary: \"true\")";
const AFFINITY_WITH: &str = "read only with affinity: cookie";
const REDIRECT_AS_WRITTEN: &str = "an http(s) URL or an absolute path; $scheme, $host, \
                                   $http_host, $request_uri, $escaped_request_uri, $uri, $args \
                                   and $is_args are filled in, any other variable refuses the \
                                   value (warned, no redirect)";
const CORS_WITH: &str = "read only with enable-cors: \"true\"";
const GLOBAL_LIMIT: &str = "no memcached: limit-rps, limit-rpm and limit-connections count per \
                            replica, or with --limit-scope cluster each replica enforces its \
                            share of them";
const BANDWIDTH: &str = "response bandwidth is not limited";
const BUFFERING: &str = "switchyard streams bodies and never buffers them to disk: nothing to \
                         set";
const SNIPPET: &str = "nginx configuration is never executed";
const TRACING: &str = "no tracing export; the access log carries X-Request-Id";
const BACKEND_TLS: &str = "the Service annotations serviceloadbalancer/lb.backend-ca-secret, \
                           lb.backend-sni and lb.backend-client-cert set the backend's TLS; \
                           certificates are verified unless lb.backend-insecure-skip-verify";
const FIREWALL: &str = "no web application firewall";
const MIRROR: &str = "an HTTPRoute RequestMirror filter mirrors requests";

/// Every annotation of ingress-nginx's annotations page (without the prefix), with what
/// switchyard does with it whatever its value (`support` refines a few by value).
pub const CATALOG: &[(&str, Support)] = &[
    (
        "affinity",
        Support::Differs(
            "cookie: a client stays on its endpoint while that endpoint serves (the cookie \
             holds a session key, or with affinity-mode persistent switchyard's id of the \
             endpoint); when it is gone or fails, the client is moved (persistent: and given \
             a new cookie)",
        ),
    ),
    (
        "affinity-canary-behavior",
        Support::Ignored(
            "a canary's requests are chosen before the endpoint: sticky to the main route's",
        ),
    ),
    (
        "affinity-mode",
        Support::Differs(
            "balanced (the default): the cookie holds a session key (16 hex digits) and the \
             endpoint is the key's by rendezvous hashing, so an endpoint added takes about its \
             share of sessions and no other moves; a cookie of ingress-nginx's is not a key \
             (its client gets a new one); persistent: the cookie names the endpoint",
        ),
    ),
    ("allowlist-source-range", Support::Served),
    ("app-root", Support::Served),
    ("auth-always-set-cookie", Support::Served),
    ("auth-cache-duration", Support::Served),
    ("auth-cache-key", Support::Differs(EXT_AUTH_CACHE)),
    ("auth-keepalive", Support::Ignored(EXT_AUTH_KEEPALIVE)),
    (
        "auth-keepalive-requests",
        Support::Ignored(EXT_AUTH_KEEPALIVE),
    ),
    (
        "auth-keepalive-share-vars",
        Support::Ignored(EXT_AUTH_KEEPALIVE),
    ),
    (
        "auth-keepalive-timeout",
        Support::Ignored(EXT_AUTH_KEEPALIVE),
    ),
    ("auth-method", Support::Served),
    (
        "auth-proxy-set-headers",
        Support::Ignored(
            "ConfigMaps of fields for the subrequest are not read: the service gets the \
             client's fields and switchyard's",
        ),
    ),
    ("auth-realm", Support::Served),
    ("auth-request-redirect", Support::Served),
    (
        "auth-response-headers",
        Support::Differs(
            "the named fields of an allowing answer are set on the request; one the answer \
             lacks is removed from it (ingress-nginx sends it empty), so a client never \
             supplies it",
        ),
    ),
    ("auth-secret", Support::Served),
    ("auth-secret-type", Support::Served),
    (
        "auth-signin",
        Support::Differs(
            "a 401 of the service is answered 302 to it, with the redirect parameter added as \
             ingress-nginx adds it; $scheme, $host, $http_host, $request_uri, \
             $escaped_request_uri, $uri, $args and $is_args are filled in, other variables \
             make it warned about and left out (the 401 is passed on)",
        ),
    ),
    ("auth-signin-redirect-param", Support::Served),
    ("auth-snippet", Support::Ignored(SNIPPET)),
    ("auth-tls-error-page", Support::Served),
    (
        "auth-tls-match-cn",
        Support::Differs(
            "searched for in the RFC 2253 subject as nginx does (403 where it is not found), \
             in RE2's dialect (the regex crate's) rather than PCRE's; one that does not \
             compile refuses the Ingress",
        ),
    ),
    ("auth-tls-pass-certificate-to-upstream", Support::Served),
    ("auth-tls-secret", Support::Differs(TLS_AUTH)),
    (
        "auth-tls-verify-client",
        Support::Differs(
            "on, optional, optional_no_ca and off as nginx's ssl_verify_client; any other \
             value is warned about and read as on",
        ),
    ),
    (
        "auth-tls-verify-depth",
        Support::Differs(
            "the chain is built with at most depth - 1 of the intermediates the client sends, \
             in the order it sends them (nginx's depth, for clients that send their chain in \
             order); 0 or not a number is warned about and read as 1",
        ),
    ),
    (
        "auth-type",
        Support::Differs(
            "basic is served as ingress-nginx does (htpasswd hashes bcrypt, $apr1$, $1$, \
             {SHA}, {SSHA}, {PLAIN}; DES and $5$/$6$ crypt are not: such a user cannot sign \
             in), and the checked Authorization field is not passed to the backend; digest \
             refuses the Ingress",
        ),
    ),
    ("auth-url", Support::Differs(EXT_AUTH)),
    (
        "backend-protocol",
        Support::Differs(
            "HTTP, HTTPS, GRPC and GRPCS as ingress-nginx (and H2C, H2); AJP, FCGI and \
             AUTO_HTTP are not served: warned, the Service's protocol applies",
        ),
    ),
    (
        "canary",
        Support::Differs(
            "served as ingress-nginx does (the canary takes requests of its main Ingress's \
             routes with the same host and path; without one it is not served), except that \
             a canary carrying an annotation that refuses an Ingress (authentication, client \
             certificates) is not served at all, rather than inheriting its main's",
        ),
    ),
    ("canary-by-cookie", Support::Served),
    ("canary-by-header", Support::Served),
    (
        "canary-by-header-pattern",
        Support::Differs(
            "searched for in the header's value as ingress-nginx does, in RE2's dialect \
             (the regex crate's) rather than PCRE's; one that does not compile is warned \
             about and never matches",
        ),
    ),
    ("canary-by-header-value", Support::Served),
    ("canary-weight", Support::Served),
    ("canary-weight-total", Support::Served),
    ("client-body-buffer-size", Support::Ignored(BUFFERING)),
    ("configuration-snippet", Support::Ignored(SNIPPET)),
    (
        "connection-proxy-header",
        Support::Ignored(
            "the Connection field of requests to backends is switchyard's (keep-alive)",
        ),
    ),
    ("cors-allow-credentials", Support::Served),
    ("cors-allow-headers", Support::Served),
    ("cors-allow-methods", Support::Served),
    ("cors-allow-origin", Support::Served),
    ("cors-expose-headers", Support::Served),
    ("cors-max-age", Support::Served),
    (
        "custom-headers",
        Support::Ignored("an HTTPRoute ResponseHeaderModifier filter sets response fields"),
    ),
    (
        "custom-http-errors",
        Support::Differs(
            "with default-backend on the Ingress (switchyard has no global default backend): \
             an endpoint's response of a listed status is dropped and the request sent to the \
             default backend at /, with X-Code, X-Format, X-Original-URI, X-Namespace, \
             X-Ingress-Name, X-Service-Name and X-Service-Port, its answer relayed; \
             switchyard's own failures (503 without endpoints, 502, 504) are not sent there",
        ),
    ),
    (
        "default-backend",
        Support::Differs(
            "a Service of the Ingress's namespace (its first port) takes the requests of the \
             Ingress's routes when their own Service has no endpoint to take them, as \
             ingress-nginx's, and answers its custom-http-errors",
        ),
    ),
    ("denylist-source-range", Support::Served),
    (
        "disable-proxy-intercept-errors",
        Support::Ignored("backend errors always pass through"),
    ),
    (
        "enable-access-log",
        Support::Ignored("the access log (--access-log) covers every route"),
    ),
    ("enable-cors", Support::Served),
    (
        "enable-global-auth",
        Support::Ignored("switchyard has no global external authentication"),
    ),
    (
        "enable-influxdb",
        Support::Ignored("metrics are Prometheus's, on the admin port"),
    ),
    ("enable-modsecurity", Support::Ignored(FIREWALL)),
    ("enable-opentelemetry", Support::Ignored(TRACING)),
    ("enable-opentracing", Support::Ignored(TRACING)),
    ("enable-owasp-core-rules", Support::Ignored(FIREWALL)),
    (
        "enable-rewrite-log",
        Support::Ignored("--explain shows how a request is routed and rewritten"),
    ),
    ("force-ssl-redirect", Support::Served),
    ("from-to-www-redirect", Support::Served),
    ("global-rate-limit", Support::Ignored(GLOBAL_LIMIT)),
    (
        "global-rate-limit-ignored-cidrs",
        Support::Ignored(GLOBAL_LIMIT),
    ),
    ("global-rate-limit-key", Support::Ignored(GLOBAL_LIMIT)),
    ("global-rate-limit-window", Support::Ignored(GLOBAL_LIMIT)),
    (
        "http2-push-preload",
        Support::Ignored("HTTP/2 server push is not offered (browsers dropped it)"),
    ),
    (
        "influxdb-host",
        Support::Ignored("metrics are Prometheus's, on the admin port"),
    ),
    (
        "influxdb-measurement",
        Support::Ignored("metrics are Prometheus's, on the admin port"),
    ),
    (
        "influxdb-port",
        Support::Ignored("metrics are Prometheus's, on the admin port"),
    ),
    (
        "influxdb-server-name",
        Support::Ignored("metrics are Prometheus's, on the admin port"),
    ),
    ("limit-allowlist", Support::Served),
    ("limit-burst-multiplier", Support::Served),
    ("limit-connections", Support::Served),
    ("limit-rate", Support::Ignored(BANDWIDTH)),
    ("limit-rate-after", Support::Ignored(BANDWIDTH)),
    ("limit-rpm", Support::Served),
    ("limit-rps", Support::Served),
    ("limit-whitelist", Support::Served),
    (
        "load-balance",
        Support::Ignored(
            "the Service annotation serviceloadbalancer/lb.algorithm picks the algorithm (roundrobin, leastconn, source, ...)",
        ),
    ),
    ("mirror-host", Support::Ignored(MIRROR)),
    ("mirror-request-body", Support::Ignored(MIRROR)),
    ("mirror-target", Support::Ignored(MIRROR)),
    ("modsecurity-snippet", Support::Ignored(SNIPPET)),
    ("modsecurity-transaction-id", Support::Ignored(FIREWALL)),
    ("opentelemetry-operation-name", Support::Ignored(TRACING)),
    (
        "opentelemetry-trust-incoming-span",
        Support::Ignored(TRACING),
    ),
    ("opentracing-trust-incoming-span", Support::Ignored(TRACING)),
    ("permanent-redirect", Support::Differs(REDIRECT_AS_WRITTEN)),
    ("permanent-redirect-code", Support::Served),
    (
        "preserve-trailing-slash",
        Support::Ignored("redirects to HTTPS keep the path as it came"),
    ),
    ("proxy-body-size", Support::Served),
    ("proxy-buffer-size", Support::Ignored(BUFFERING)),
    ("proxy-buffering", Support::Ignored(BUFFERING)),
    ("proxy-buffers-number", Support::Ignored(BUFFERING)),
    ("proxy-busy-buffers-size", Support::Ignored(BUFFERING)),
    ("proxy-connect-timeout", Support::Served),
    (
        "proxy-cookie-domain",
        Support::Ignored("Set-Cookie fields pass through unchanged"),
    ),
    (
        "proxy-cookie-path",
        Support::Ignored("Set-Cookie fields pass through unchanged"),
    ),
    (
        "proxy-http-version",
        Support::Ignored("HTTP/1.1 to HTTP backends always (backend-protocol picks HTTP/2)"),
    ),
    ("proxy-max-temp-file-size", Support::Ignored(BUFFERING)),
    (
        "proxy-next-upstream",
        Support::Differs(
            "every case as nginx (a request that may be sent again: idempotent, or any with \
             non_idempotent, its body still held); a response of an http_* status is dropped \
             for another endpoint but on the last try, whose answer is relayed; the endpoint \
             is not marked down for a status",
        ),
    ),
    ("proxy-next-upstream-timeout", Support::Served),
    (
        "proxy-next-upstream-tries",
        Support::Differs("0 is the most switchyard tries (8), not unlimited"),
    ),
    ("proxy-read-timeout", Support::Served),
    (
        "proxy-redirect-from",
        Support::Ignored("Location fields pass through unchanged"),
    ),
    (
        "proxy-redirect-to",
        Support::Ignored("Location fields pass through unchanged"),
    ),
    ("proxy-request-buffering", Support::Ignored(BUFFERING)),
    ("proxy-send-timeout", Support::Served),
    ("proxy-ssl-ciphers", Support::Ignored(BACKEND_TLS)),
    ("proxy-ssl-name", Support::Ignored(BACKEND_TLS)),
    ("proxy-ssl-protocols", Support::Ignored(BACKEND_TLS)),
    ("proxy-ssl-secret", Support::Ignored(BACKEND_TLS)),
    ("proxy-ssl-server-name", Support::Ignored(BACKEND_TLS)),
    ("proxy-ssl-verify", Support::Ignored(BACKEND_TLS)),
    ("proxy-ssl-verify-depth", Support::Ignored(BACKEND_TLS)),
    ("rewrite-target", Support::Served),
    (
        "satisfy",
        Support::Differs(
            "always all: a client must pass both the source ranges and the authentication, \
             also where any would let one of them do",
        ),
    ),
    (
        "server-alias",
        Support::Differs(
            "the first rule host's paths are served on each alias too (as nginx's \
             server_name); an alias another Ingress routes itself stays that Ingress's",
        ),
    ),
    ("server-snippet", Support::Ignored(SNIPPET)),
    (
        "service-upstream",
        Support::Ignored("switchyard balances over the Service's endpoints itself"),
    ),
    (
        "session-cookie-change-on-failure",
        Support::Differs(
            "always: a request retried on another endpoint gets that endpoint's cookie",
        ),
    ),
    (
        "session-cookie-conditional-samesite-none",
        Support::Ignored("SameSite=None is sent to every client, whatever its user agent"),
    ),
    ("session-cookie-domain", Support::Served),
    (
        "session-cookie-expires",
        Support::Differs("sent as Max-Age (the same lifetime), not as an Expires date"),
    ),
    ("session-cookie-max-age", Support::Served),
    ("session-cookie-name", Support::Served),
    ("session-cookie-path", Support::Served),
    ("session-cookie-samesite", Support::Served),
    ("session-cookie-secure", Support::Served),
    (
        "ssl-ciphers",
        Support::Ignored("switchyard's TLS settings apply to every host"),
    ),
    (
        "ssl-passthrough",
        Support::Differs(
            "with --enable-ssl-passthrough (as ingress-nginx), the TLS connections of the \
             Ingress's hosts (by the client hello's server name) are relayed unterminated to \
             the first path's Service, its plain-HTTP routes served as usual; without the \
             flag the Ingress is not served (ingress-nginx would terminate its TLS)",
        ),
    ),
    (
        "ssl-prefer-server-ciphers",
        Support::Ignored("switchyard's TLS settings apply to every host"),
    ),
    ("ssl-redirect", Support::Served),
    ("stream-snippet", Support::Ignored(SNIPPET)),
    ("temporal-redirect", Support::Differs(REDIRECT_AS_WRITTEN)),
    ("temporal-redirect-code", Support::Served),
    (
        "upstream-hash-by",
        Support::Differs(
            "consistent hashing of the key (rendezvous, as the Service algorithm source does by \
             address): the same key keeps its endpoint while it serves; $remote_addr, $host, \
             $request_uri, $uri, $args, $http_NAME, $cookie_NAME and $arg_NAME are filled in, \
             another variable is warned about and the Service's algorithm picks",
        ),
    ),
    (
        "upstream-hash-by-subset",
        Support::Ignored("subsets are not made: upstream-hash-by spreads keys over every endpoint"),
    ),
    (
        "upstream-hash-by-subset-size",
        Support::Ignored("subsets are not made: upstream-hash-by spreads keys over every endpoint"),
    ),
    ("upstream-vhost", Support::Served),
    ("use-regex", Support::Served),
    ("whitelist-source-range", Support::Served),
    ("x-forwarded-prefix", Support::Served),
];

/// What a served annotation with a value switchyard cannot read gets.
const BAD_VALUE: &str = "its value is not valid here (see the warning): the default applies";

/// What an annotation not in the catalogue gets.
const UNKNOWN: Support = Support::Ignored("not an annotation of ingress-nginx's annotations page");

/// What switchyard does with `key` (its whole name) set to `value` on an Ingress whose
/// annotations are `all`. A few verdicts depend on values: `canary: "false"` asks for
/// nothing switchyard does not do; `ssl-passthrough` refuses only
/// when true; `auth-tls-secret` asks for no client certificate when `auth-tls-verify-client`
/// is `off`.
pub fn support(key: &str, value: &str, all: &BTreeMap<String, String>) -> Support {
    let Some(short) = key.strip_prefix(PREFIX) else {
        return UNKNOWN;
    };
    match short {
        "canary" if parse_bool(value) != Some(true) => Support::Served,
        k if k.starts_with("canary-")
            && all
                .get(&format!("{PREFIX}canary"))
                .and_then(|v| parse_bool(v))
                != Some(true) =>
        {
            Support::Ignored(CANARY_WITH)
        }
        "ssl-passthrough" if parse_bool(value) != Some(true) => {
            Support::Ignored("not true: no passthrough asked for")
        }
        k if k.starts_with("cors-")
            && all
                .get(&format!("{PREFIX}enable-cors"))
                .and_then(|v| parse_bool(v))
                != Some(true) =>
        {
            Support::Ignored(CORS_WITH)
        }
        "auth-type" => match value.trim() {
            "basic" => CATALOG
                .iter()
                .find(|(k, _)| *k == short)
                .map_or(UNKNOWN, |(_, s)| *s),
            "digest" => Support::Refused(DIGEST),
            _ => Support::Refused("neither basic nor digest: which users may pass is unknown"),
        },
        "auth-secret" if !all.contains_key(&format!("{PREFIX}auth-type")) => {
            Support::Refused(AUTH_ALONE)
        }
        "auth-secret-type" if value.trim() == "auth-map" => Support::Refused(AUTH_MAP),
        "auth-secret-type" if value.trim() != "auth-file" => {
            Support::Refused("neither auth-file nor auth-map")
        }
        "auth-url" => match AuthUrl::parse(value) {
            Ok(_) => Support::Differs(EXT_AUTH),
            Err(why) => Support::Refused(why),
        },
        k if (k.starts_with("session-cookie-") || k.starts_with("affinity-"))
            && all.get(&format!("{PREFIX}affinity")).map(|v| v.trim()) != Some("cookie") =>
        {
            Support::Ignored(AFFINITY_WITH)
        }
        k if EXT_AUTH_KEYS.contains(&k) && !all.contains_key(&format!("{PREFIX}auth-url")) => {
            Support::Ignored(EXT_AUTH_WITH)
        }
        "auth-tls-secret"
            if all
                .get(&format!("{PREFIX}auth-tls-verify-client"))
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("off")) =>
        {
            Support::Ignored("auth-tls-verify-client is off: no client certificate is asked for")
        }
        k if k.starts_with("auth-tls-")
            && k != "auth-tls-secret"
            && !all.contains_key(&format!("{PREFIX}auth-tls-secret")) =>
        {
            Support::Ignored(TLS_AUTH_WITH)
        }
        _ => CATALOG
            .iter()
            .find(|(k, _)| *k == short)
            .map_or(UNKNOWN, |(_, s)| *s),
    }
}

/// The companions of `auth-url`, read only with it.
const EXT_AUTH_KEYS: [&str; 13] = [
    "auth-always-set-cookie",
    "auth-cache-duration",
    "auth-cache-key",
    "auth-keepalive",
    "auth-keepalive-requests",
    "auth-keepalive-share-vars",
    "auth-keepalive-timeout",
    "auth-method",
    "auth-proxy-set-headers",
    "auth-request-redirect",
    "auth-response-headers",
    "auth-signin",
    "auth-signin-redirect-param",
];

/// The keys of `all` that refuse their Ingress (`Support::Refused`).
pub(super) fn refusing(all: &BTreeMap<String, String>) -> Vec<&str> {
    all.iter()
        .filter(|(k, v)| matches!(support(k, v, all), Support::Refused(_)))
        .map(|(k, _)| k.as_str())
        .collect()
}

/// The migration report: every Ingress that carries an ingress-nginx annotation, each of its
/// annotations with what switchyard does with it, and what the translation warned about it.
#[derive(Debug, Serialize)]
pub struct Report {
    pub ingresses: Vec<IngressReport>,
    /// Ingresses with at least one refused annotation (not served).
    pub refused: usize,
}

/// One Ingress of the report.
#[derive(Debug, Serialize)]
pub struct IngressReport {
    pub namespace: String,
    pub name: String,
    /// Its class is one switchyard serves (else the verdicts say what would happen if it
    /// were, e.g. with `--controller-name k8s.io/ingress-nginx`).
    pub ours: bool,
    pub annotations: Vec<AnnotationReport>,
    /// What switchyard's translation said of this Ingress (bad values, refusals).
    pub warnings: Vec<String>,
    /// It would not be served: an annotation is refused, or the translation found it cannot
    /// be served safely (a basic authentication Secret it cannot read, a canary without a
    /// main Ingress).
    pub not_served: bool,
}

/// One annotation of an Ingress in the report.
#[derive(Debug, Serialize)]
pub struct AnnotationReport {
    pub key: String,
    pub value: String,
    #[serde(flatten)]
    pub support: Support,
}

impl Report {
    /// The report on `ingresses`, with the `warnings` the translation of the same objects gave;
    /// `ours` says whether switchyard serves an Ingress's class (by namespace and name). An
    /// annotation switchyard serves whose value the translation warned about is ignored.
    pub fn of(
        ingresses: &[&Ingress],
        warnings: &[Warning],
        ours: impl Fn(&str, &str) -> bool,
    ) -> Report {
        let mut out: Vec<IngressReport> = Vec::new();
        for ing in ingresses {
            let Some(all) = ing.metadata.annotations.as_ref() else {
                continue;
            };
            if !all.keys().any(|k| k.starts_with(PREFIX)) {
                continue;
            }
            let namespace = ing.metadata.namespace.clone().unwrap_or_default();
            let name = ing.metadata.name.clone().unwrap_or_default();
            let about: Vec<&Warning> = warnings
                .iter()
                .filter(|w| {
                    w.object.kind == "Ingress"
                        && w.object.namespace == namespace
                        && w.object.name == name
                })
                .collect();
            let not_served = about.iter().any(|w| w.reason == WarningReason::NotServed);
            let warnings: Vec<String> = about.iter().map(|w| w.message.clone()).collect();
            let annotations = all
                .iter()
                .filter(|(k, _)| k.starts_with(PREFIX))
                .map(|(k, v)| {
                    let mut support = support(k, v, all);
                    let bad_value = warnings.iter().any(|w| {
                        w.strip_prefix(k.as_str())
                            .is_some_and(|r| r.starts_with(':'))
                    });
                    if bad_value && matches!(support, Support::Served | Support::Differs(_)) {
                        support = Support::Ignored(BAD_VALUE);
                    }
                    AnnotationReport {
                        key: k.clone(),
                        value: v.clone(),
                        support,
                    }
                })
                .collect::<Vec<AnnotationReport>>();
            let refused = annotations
                .iter()
                .any(|a| matches!(a.support, Support::Refused(_)));
            out.push(IngressReport {
                ours: ours(&namespace, &name),
                namespace,
                name,
                annotations,
                warnings,
                not_served: refused || not_served,
            });
        }
        out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        let refused = out.iter().filter(|i| i.not_served).count();
        Report {
            ingresses: out,
            refused,
        }
    }

    /// The report as a table a person reads: per Ingress, one line per annotation.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for ing in &self.ingresses {
            let refused = ing.not_served;
            let _ = writeln!(
                out,
                "Ingress {}/{}{}{}",
                ing.namespace,
                ing.name,
                if refused { ": NOT SERVED" } else { "" },
                if ing.ours {
                    ""
                } else {
                    " (its class is not switchyard's: as it would be served with \
                     --controller-name naming its controller)"
                }
            );
            let width = ing
                .annotations
                .iter()
                .map(|a| a.key.len())
                .max()
                .unwrap_or(0);
            for a in &ing.annotations {
                let note = a.support.note();
                let _ = writeln!(
                    out,
                    "  {:<8} {:<width$}  {}{}",
                    a.support.word(),
                    a.key,
                    show_value(&a.value),
                    if note.is_empty() {
                        String::new()
                    } else {
                        format!("  ({note})")
                    },
                );
            }
            for w in &ing.warnings {
                let _ = writeln!(out, "  warning: {w}");
            }
        }
        let _ = write!(
            out,
            "{} Ingress(es) with ingress-nginx annotations, {} not served",
            self.ingresses.len(),
            self.refused
        );
        out
    }
}

/// A value as the table shows it: quoted, cut at 60 characters, one line.
fn show_value(v: &str) -> String {
    let one_line: String = v
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match one_line.char_indices().nth(60) {
        Some((i, _)) => format!("{:?}", format!("{}...", &one_line[..i])),
        None => format!("{one_line:?}"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (format!("{PREFIX}{k}"), (*v).to_string()))
            .collect()
    }

    /// docs/ingress.md's table of every annotation, as the catalogue makes it.
    fn markdown() -> String {
        let mut out =
            String::from("| ingress-nginx annotation | switchyard | note |\n|---|---|---|\n");
        for (key, support) in CATALOG {
            let _ = writeln!(out, "| `{key}` | {} | {} |", support.word(), support.note());
        }
        out
    }

    /// The page users read is the catalogue the translation and the report use.
    #[test]
    fn docs_ingress_md_lists_the_catalogue() {
        let page = include_str!("../../../docs/ingress.md");
        let start = "<!-- nginx-annotations: generated from src/control/translate/nginx.rs -->\n";
        let end = "<!-- end of nginx-annotations -->";
        let table = page
            .split_once(start)
            .and_then(|(_, rest)| rest.split_once(end))
            .map(|(t, _)| t);
        let want = markdown();
        if table != Some(want.as_str()) {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/target/nginx-annotations.md");
            let _ = std::fs::write(path, &want);
            panic!("docs/ingress.md's annotation table is not the catalogue's: {path} has it");
        }
    }

    #[test]
    fn the_catalogue_is_sorted_and_names_each_key_once() {
        let keys: Vec<&str> = CATALOG.iter().map(|(k, _)| *k).collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(keys, sorted);
        assert!(keys.len() > 120, "{}", keys.len());
    }

    /// An ingress-nginx key switchyard reads as its own is never listed as ignored.
    #[test]
    fn the_keys_read_as_switchyard_s_own_are_served() {
        use super::super::ingress::ingress_annotation as ia;
        for (nginx, _) in ia::NGINX_ALIASES {
            let short = nginx.strip_prefix(PREFIX).unwrap();
            let support = CATALOG.iter().find(|(k, _)| *k == short).map(|(_, s)| *s);
            assert!(
                matches!(support, Some(Support::Served | Support::Differs(_))),
                "{short}: {support:?}"
            );
        }
    }

    /// What restricts access and is not carried out refuses its Ingress, never lets it be
    /// served open; values that ask for nothing do not.
    #[test]
    fn access_restricting_annotations_refuse_their_ingress() {
        for (k, v) in [
            ("auth-type", "digest"),
            ("auth-type", "ldap"),
            ("auth-secret", "users"),
            ("auth-secret-type", "auth-map"),
            ("auth-url", "http://auth/"),
            ("auth-url", "https://$host/oauth2/auth"),
        ] {
            let all = map(&[(k, v)]);
            assert_eq!(refusing(&all), [format!("{PREFIX}{k}")], "{k}");
        }
        let off = map(&[
            ("auth-tls-secret", "ns/ca"),
            ("auth-tls-verify-client", "off"),
        ]);
        assert!(refusing(&off).is_empty());
        // Client certificates per host are served; their companions are read only with it.
        let tls = map(&[
            ("auth-tls-secret", "ns/ca"),
            ("auth-tls-verify-client", "optional"),
        ]);
        assert!(refusing(&tls).is_empty());
        let depth = format!("{PREFIX}auth-tls-verify-depth");
        assert_eq!(
            support(&depth, "2", &map(&[("auth-tls-verify-depth", "2")])),
            Support::Ignored(TLS_AUTH_WITH)
        );
        // Served: passthrough (the backend verifies its clients), external authentication it
        // can reach.
        assert!(refusing(&map(&[("ssl-passthrough", "true")])).is_empty());
        assert!(refusing(&map(&[("ssl-passthrough", "false")])).is_empty());
        assert!(refusing(&map(&[("auth-url", "http://authn.auth.svc/check")])).is_empty());
        // Basic authentication is served.
        let basic = map(&[
            ("auth-type", "basic"),
            ("auth-secret", "users"),
            ("auth-secret-type", "auth-file"),
            ("auth-realm", "Staff"),
        ]);
        assert!(refusing(&basic).is_empty());
        // A canary is served; its keys are read only on one.
        let canary = map(&[("canary", "true"), ("canary-weight", "10")]);
        assert!(refusing(&canary).is_empty());
        let key = format!("{PREFIX}canary");
        assert!(matches!(
            support(&key, "true", &canary),
            Support::Differs(_)
        ));
        let weight = format!("{PREFIX}canary-weight");
        assert_eq!(support(&weight, "10", &canary), Support::Served);
        let main = map(&[("canary-weight", "10")]);
        assert_eq!(support(&weight, "10", &main), Support::Ignored(CANARY_WITH));
    }

    #[test]
    fn the_report_lists_each_annotation_and_counts_the_refused() {
        let mut refused = Ingress::default();
        refused.metadata.namespace = Some("shop".into());
        refused.metadata.name = Some("admin".into());
        refused.metadata.annotations = Some(map(&[
            ("auth-type", "digest"),
            ("proxy-body-size", "8m"),
            ("limit-rate", "5"),
        ]));
        let mut plain = Ingress::default();
        plain.metadata.namespace = Some("shop".into());
        plain.metadata.name = Some("web".into());
        plain.metadata.annotations = Some(
            [("other/key".to_string(), "x".to_string())]
                .into_iter()
                .collect(),
        );
        let report = Report::of(&[&plain, &refused], &[], |_, _| true);
        assert_eq!(report.refused, 1);
        assert_eq!(report.ingresses.len(), 1);
        let words: Vec<&str> = report.ingresses[0]
            .annotations
            .iter()
            .map(|a| a.support.word())
            .collect();
        assert_eq!(words, ["refused", "ignored", "served"]);
        let text = report.to_text();
        assert!(text.contains("Ingress shop/admin: NOT SERVED"), "{text}");
        assert!(text.contains("1 not served"), "{text}");
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["ingresses"][0]["annotations"][0]["verdict"], "refused");

        // Served annotations, but the translation could not serve it safely: not served.
        let mut lost = Ingress::default();
        lost.metadata.namespace = Some("shop".into());
        lost.metadata.name = Some("lost".into());
        lost.metadata.annotations = Some(map(&[("auth-type", "basic"), ("auth-secret", "gone")]));
        let why = Warning {
            object: super::super::inputs::object("Ingress", "shop", "lost"),
            reason: WarningReason::NotServed,
            message: "auth-type is basic and Secret shop/gone does not exist".into(),
        };
        let report = Report::of(&[&lost], &[why], |_, _| true);
        assert_eq!(report.refused, 1);
        assert!(report.to_text().contains("Ingress shop/lost: NOT SERVED"));
    }
}

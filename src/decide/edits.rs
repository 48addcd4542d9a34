//! The header rules, written once as data: what switchyard changes in a request before it goes
//! upstream, in a response before it goes back, and which fields its own answers carry. Each
//! engine only applies an `Edits` list to its representation: Pingora to its header maps
//! (`data::engine::pingora::apply`); the fast path's HTTP/1 heads and its HTTP/2 relay's request blocks,
//! written as the fields pass, through the one carrier here (`Seen`, into a `Sink`). A new
//! header rule is a line here, and every engine follows. Nothing here touches a header map or
//! a socket.

use std::io::Write as _;

use crate::table::policy::{AllowOrigin, Cors};
use crate::table::sticky::{self, CookieAffinity};

pub const X_FORWARDED_FOR: &str = "x-forwarded-for";
pub const X_FORWARDED_PROTO: &str = "x-forwarded-proto";
/// The client's address alone (ingress-nginx sets it; many backends read it rather than parse
/// `X-Forwarded-For`).
pub const X_REAL_IP: &str = "x-real-ip";
/// The client-certificate verification result, for backends (the TLS port with
/// `--ssl-ca-cert`): `SUCCESS` or `NONE`.
pub const CLIENT_VERIFY_HEADER: &str = "x-client-verify";
/// The verified client certificate's subject, RFC 4514 style.
pub const CLIENT_DN_HEADER: &str = "x-client-dn";
/// What ingress-nginx tells the backends of an Ingress host that verifies client certificates
/// (`auth-tls-*`): `SUCCESS`, `NONE` or `FAILED:why`; the subject and issuer (RFC 2253); and
/// with `auth-tls-pass-certificate-to-upstream`, the certificate (PEM, percent-encoded).
pub const SSL_CLIENT_VERIFY: &str = "ssl-client-verify";
pub const SSL_CLIENT_SUBJECT_DN: &str = "ssl-client-subject-dn";
pub const SSL_CLIENT_ISSUER_DN: &str = "ssl-client-issuer-dn";
pub const SSL_CLIENT_CERT: &str = "ssl-client-cert";
pub const STRICT_TRANSPORT_SECURITY: &str = "strict-transport-security";
pub const SET_COOKIE: &str = "set-cookie";
pub const CACHE_CONTROL: &str = "cache-control";
pub const CONTENT_TYPE: &str = "content-type";
pub const CONTENT_LENGTH: &str = "content-length";
pub const COOKIE: &str = "cookie";
pub const GRPC_STATUS: &str = "grpc-status";
pub const GRPC_MESSAGE: &str = "grpc-message";
pub const LOCATION: &str = "location";
pub const AUTHORIZATION: &str = "authorization";
pub const ORIGIN: &str = "origin";
pub const ACCESS_CONTROL_REQUEST_METHOD: &str = "access-control-request-method";
pub const ACCESS_CONTROL_REQUEST_HEADERS: &str = "access-control-request-headers";
pub const ACCESS_CONTROL_ALLOW_ORIGIN: &str = "access-control-allow-origin";
pub const ACCESS_CONTROL_ALLOW_CREDENTIALS: &str = "access-control-allow-credentials";
pub const ACCESS_CONTROL_ALLOW_METHODS: &str = "access-control-allow-methods";
pub const ACCESS_CONTROL_ALLOW_HEADERS: &str = "access-control-allow-headers";
pub const ACCESS_CONTROL_EXPOSE_HEADERS: &str = "access-control-expose-headers";
pub const ACCESS_CONTROL_MAX_AGE: &str = "access-control-max-age";
pub const HOST: &str = "host";
/// The path prefix the backend is mounted under (ingress-nginx's `x-forwarded-prefix`).
pub const X_FORWARDED_PREFIX: &str = "x-forwarded-prefix";
pub const WWW_AUTHENTICATE: &str = "www-authenticate";

/// What the route changes in the request's forwarding beyond what every request gets: what
/// of the client's request the backend must not see, and the prefix it is told it is mounted
/// under.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hidden<'a> {
    /// The load balancer's stickiness cookie (the route is cookie-sticky).
    pub sticky_cookie: bool,
    /// The credentials switchyard checked itself (an Ingress's basic authentication): they
    /// are switchyard's, not the backend's.
    pub authorization: bool,
    /// `X-Forwarded-Prefix` (an Ingress's `x-forwarded-prefix`), replacing the client's.
    pub forwarded_prefix: Option<&'a str>,
    /// The host's Gateway listener verifies client certificates: the backend is told the
    /// result, as the TLS port with `--ssl-ca-cert` tells it.
    pub client_cert: bool,
    /// The host is an Ingress's that verifies client certificates: the backend is told as
    /// ingress-nginx tells it (`ssl-client-*`, the client's own copies replaced), the
    /// certificate too when this is true (`auth-tls-pass-certificate-to-upstream`).
    pub ingress_cert: Option<bool>,
}

/// Request fields switchyard asserts itself. A client's own copies are removed on every
/// frontend, so that no client can tell a backend what only switchyard may (a backend that
/// also serves an mTLS route trusts `x-client-verify`).
pub const ASSERTED: [&str; 4] = [
    X_FORWARDED_PROTO,
    X_REAL_IP,
    CLIENT_VERIFY_HEADER,
    CLIENT_DN_HEADER,
];

/// Most edits one list holds.
const MAX_EDITS: usize = 16;

/// A frontend's forwarding settings, fixed at startup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forwarding {
    /// `X-Forwarded-Proto`: `http` or `https`.
    pub scheme: &'static str,
    /// `Strict-Transport-Security` for every response (the TLS port with `--hsts-max-age`).
    pub hsts: Option<String>,
    /// Tell backends the client-certificate result (the TLS port with `--ssl-ca-cert`).
    pub client_cert_headers: bool,
}

impl Forwarding {
    pub fn plain() -> Forwarding {
        Forwarding {
            scheme: "http",
            hsts: None,
            client_cert_headers: false,
        }
    }

    /// The TLS port: `hsts_max_age` seconds of HSTS when given.
    pub fn tls(hsts_max_age: Option<u64>, client_cert_headers: bool) -> Forwarding {
        Forwarding {
            scheme: "https",
            hsts: hsts_max_age.map(|s| format!("max-age={s}")),
            client_cert_headers,
        }
    }
}

/// What the client proved with a certificate on this connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientCert<'a> {
    /// None presented (or the port does not ask).
    Absent,
    /// Verified (against `--ssl-ca-cert`, a listener's or an Ingress host's bundle): its
    /// subject in OpenSSL's one-line form, and as an Ingress host's backend is told of it
    /// (RFC 2253 subject and issuer, the escaped PEM; empty elsewhere).
    Verified {
        subject: &'a str,
        dn: &'a str,
        issuer: &'a str,
        escaped: &'a str,
    },
    /// Presented on an Ingress host's connection and not verified (`auth-tls-verify-client:
    /// optional_no_ca` serves it): `FAILED:why`, and the same as `Verified`.
    Failed {
        reason: &'a str,
        dn: &'a str,
        issuer: &'a str,
        escaped: &'a str,
    },
}

impl<'a> ClientCert<'a> {
    /// A certificate verified outside an Ingress host: only its subject is told.
    pub fn verified(subject: &'a str) -> ClientCert<'a> {
        ClientCert::Verified {
            subject,
            dn: "",
            issuer: "",
            escaped: "",
        }
    }
}

/// A field value, rendered by `write_to`. An address comes as text: an engine formats its
/// client's once per connection, not once per field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    Text(&'a str),
    Number(u64),
    /// The stickiness cookie for an endpoint (`Set-Cookie` value).
    Cookie(StickyCookie<'a>),
}

/// The cookie that pins a client to the endpoint with `id`: `SERVERID`, or an Ingress's cookie
/// affinity (with the route's path and whether the request came over TLS).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StickyCookie<'a> {
    pub id: u64,
    pub affinity: Option<(&'a CookieAffinity, &'a str, bool)>,
}

impl StickyCookie<'_> {
    /// The `Set-Cookie` value.
    pub fn value(&self) -> String {
        match self.affinity {
            Some((a, path, https)) => a.set_cookie_value(self.id, path, https),
            None => sticky::set_cookie_value(self.id),
        }
    }
}

impl Value<'_> {
    pub fn write_to(&self, out: &mut Vec<u8>) {
        match self {
            Value::Text(t) => out.extend_from_slice(t.as_bytes()),
            Value::Number(n) => {
                let _ = write!(out, "{n}");
            }
            Value::Cookie(c) => out.extend_from_slice(c.value().as_bytes()),
        }
    }

    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(32);
        self.write_to(&mut v);
        v
    }
}

/// One change to a message's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edit<'a> {
    /// Remove every field of this name.
    Remove(&'static str),
    /// Add one field (after the message's own).
    Add(&'static str, Value<'a>),
    /// Add one field unless the message already has one of this name.
    AddIfAbsent(&'static str, Value<'a>),
    /// One field: the first existing value (when it is visible text) with `, value` added,
    /// or `value` alone; every other field of the name is dropped.
    Extend(&'static str, Value<'a>),
    /// One field of this value; the message's own of the name are dropped.
    Set(&'static str, Value<'a>),
    /// The load balancer's cookie removed from every `Cookie` field ("indirect" mode), fields
    /// left empty dropped, every other cookie kept.
    StripCookie,
    /// `Cache-Control`: one field, the first value with `no-cache="set-cookie"` added (a
    /// shared cache must not hand the load balancer's cookie to other clients).
    NoCacheSetCookie,
}

impl Edit<'_> {
    /// The field this edit writes or removes (`StripCookie` rewrites each `Cookie` field in
    /// place instead: `sticky::strip_cookie`).
    pub fn name(&self) -> &'static str {
        match self {
            Edit::Remove(n)
            | Edit::Add(n, _)
            | Edit::AddIfAbsent(n, _)
            | Edit::Extend(n, _)
            | Edit::Set(n, _) => n,
            Edit::StripCookie => COOKIE,
            Edit::NoCacheSetCookie => CACHE_CONTROL,
        }
    }

    /// Whether the message's own fields of `name` stay: an edit that does not keep them drops
    /// them all, writing its one field (`write_value`) in their place if `writes` says so.
    pub fn keeps_existing(&self) -> bool {
        matches!(self, Edit::Add(..) | Edit::AddIfAbsent(..))
    }

    /// Whether the edit writes a field of `name`, the message having one already (`present`)
    /// or not. The one reading of each edit that every engine carries out.
    pub fn writes(&self, present: bool) -> bool {
        match self {
            Edit::Remove(_) | Edit::StripCookie => false,
            Edit::AddIfAbsent(..) => !present,
            Edit::Add(..) | Edit::Extend(..) | Edit::Set(..) | Edit::NoCacheSetCookie => true,
        }
    }

    /// Writes the value of the field the edit writes (when `writes`) at the end of `out`, from
    /// the first value of `name` the message has (`prev`).
    pub fn write_value(&self, prev: Option<&[u8]>, out: &mut Vec<u8>) {
        match self {
            Edit::Add(_, v) | Edit::AddIfAbsent(_, v) | Edit::Set(_, v) => v.write_to(out),
            Edit::Extend(_, v) => extend_into(out, prev, v),
            Edit::NoCacheSetCookie => no_cache_set_cookie_into(out, prev),
            Edit::Remove(_) | Edit::StripCookie => {}
        }
    }

    /// The field name whose existing values this edit reads or replaces (`Add` touches none).
    pub fn touches(&self) -> Option<&'static str> {
        match self {
            Edit::Remove(n) | Edit::AddIfAbsent(n, _) | Edit::Extend(n, _) | Edit::Set(n, _) => {
                Some(n)
            }
            Edit::StripCookie => Some(COOKIE),
            Edit::NoCacheSetCookie => Some(CACHE_CONTROL),
            Edit::Add(..) => None,
        }
    }
}

/// An ordered list of edits, without allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edits<'a> {
    list: [Option<Edit<'a>>; MAX_EDITS],
    len: usize,
    /// Bit n set: some edit touches a field name of n bytes (n < 64), so most fields are
    /// passed over without a comparison.
    lengths: u64,
}

impl<'a> Edits<'a> {
    pub fn new() -> Edits<'a> {
        Edits {
            list: [None; MAX_EDITS],
            len: 0,
            lengths: 0,
        }
    }

    pub(crate) fn push(&mut self, e: Edit<'a>) {
        // The lists below are fixed by code, never by input: a longer one is a bug a test
        // catches (`request_edits_fit`).
        debug_assert!(self.len < MAX_EDITS, "edit list too long");
        if let Some(slot) = self.list.get_mut(self.len) {
            if let Some(n) = e.touches() {
                self.lengths |= 1u64.checked_shl(n.len() as u32).unwrap_or(0);
            }
            *slot = Some(e);
            self.len += 1;
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Edit<'a>> {
        self.list[..self.len].iter().flatten()
    }

    /// The edit that reads or replaces fields named `name` (ASCII case-insensitive).
    pub fn touching(&self, name: &[u8]) -> Option<&Edit<'a>> {
        if name.len() >= 64 || self.lengths & (1 << name.len()) == 0 {
            return None;
        }
        self.iter().find(|e| {
            e.touches()
                .is_some_and(|n| n.len() == name.len() && n.as_bytes().eq_ignore_ascii_case(name))
        })
    }
}

impl Default for Edits<'_> {
    fn default() -> Self {
        Edits::new()
    }
}

/// The request as a backend gets it: asserted fields removed, the client appended to
/// `X-Forwarded-For` and named in `X-Real-IP`, the stickiness cookie hidden, the scheme and,
/// where the frontend tells backends (`Forwarding::client_cert_headers`), the
/// client-certificate result asserted. `cert` reads the connection's certificate; it is asked
/// only then, so no engine decides for itself when the certificate matters.
// Inlined: the list (some 850 bytes) is then built where the caller keeps it, not copied out.
#[inline]
pub fn request_edits<'a>(
    fwd: &'a Forwarding,
    client_ip: Option<&'a str>,
    hidden: Hidden<'a>,
    cert: impl FnOnce() -> ClientCert<'a>,
) -> Edits<'a> {
    let mut e = Edits::new();
    for name in ASSERTED {
        e.push(Edit::Remove(name));
    }
    if hidden.authorization {
        e.push(Edit::Remove(AUTHORIZATION));
    }
    let cookie_sticky = hidden.sticky_cookie;
    if let Some(ip) = client_ip {
        e.push(Edit::Extend(X_FORWARDED_FOR, Value::Text(ip)));
        e.push(Edit::Add(X_REAL_IP, Value::Text(ip)));
    }
    if cookie_sticky {
        e.push(Edit::StripCookie);
    }
    e.push(Edit::Add(X_FORWARDED_PROTO, Value::Text(fwd.scheme)));
    if let Some(prefix) = hidden.forwarded_prefix {
        e.push(Edit::Set(X_FORWARDED_PREFIX, Value::Text(prefix)));
    }
    let told = fwd.client_cert_headers || hidden.client_cert;
    if !told && hidden.ingress_cert.is_none() {
        return e;
    }
    let cert = cert();
    if told {
        match cert {
            ClientCert::Verified { subject, .. } => {
                e.push(Edit::Add(CLIENT_VERIFY_HEADER, Value::Text("SUCCESS")));
                e.push(Edit::Add(CLIENT_DN_HEADER, Value::Text(subject)));
            }
            ClientCert::Absent | ClientCert::Failed { .. } => {
                e.push(Edit::Add(CLIENT_VERIFY_HEADER, Value::Text("NONE")))
            }
        }
    }
    if let Some(pass) = hidden.ingress_cert {
        // nginx sends each (`proxy_set_header`), empty where it has nothing.
        let (verify, dn, issuer, escaped) = match cert {
            ClientCert::Absent => ("NONE", "", "", ""),
            ClientCert::Verified {
                dn,
                issuer,
                escaped,
                ..
            } => ("SUCCESS", dn, issuer, escaped),
            ClientCert::Failed {
                reason,
                dn,
                issuer,
                escaped,
            } => (reason, dn, issuer, escaped),
        };
        e.push(Edit::Set(SSL_CLIENT_VERIFY, Value::Text(verify)));
        e.push(Edit::Set(SSL_CLIENT_SUBJECT_DN, Value::Text(dn)));
        e.push(Edit::Set(SSL_CLIENT_ISSUER_DN, Value::Text(issuer)));
        e.push(match pass {
            true => Edit::Set(SSL_CLIENT_CERT, Value::Text(escaped)),
            false => Edit::Remove(SSL_CLIENT_CERT),
        });
    }
    e
}

/// A client's address as `X-Forwarded-For` and `X-Real-IP` carry it, the same text as its
/// `Display`. An IPv4 address is written digit by digit: `Display` pads each octet through
/// `core::fmt`, 1.6k instructions an address, 2 % of a relayed gRPC call (the fast path's
/// HTTP/2 streams format it once each).
pub fn ip_text(ip: std::net::IpAddr) -> String {
    let std::net::IpAddr::V4(v4) = ip else {
        return ip.to_string();
    };
    let mut out = String::with_capacity(15);
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        if octet >= 100 {
            out.push(char::from(b'0' + octet / 100));
        }
        if octet >= 10 {
            out.push(char::from(b'0' + octet / 10 % 10));
        }
        out.push(char::from(b'0' + octet % 10));
    }
    out
}

/// A backend's response as the client gets it: the stickiness cookie when one is due
/// (`set_cookie`, from `Attempt::set_cookie`), HSTS unless the backend set its own (it may
/// want `includeSubDomains` or `preload`).
pub fn response_edits<'a>(fwd: &'a Forwarding, set_cookie: Option<StickyCookie<'a>>) -> Edits<'a> {
    let mut e = Edits::new();
    if let Some(c) = set_cookie {
        e.push(Edit::Add(SET_COOKIE, Value::Cookie(c)));
        e.push(Edit::NoCacheSetCookie);
    }
    if let Some(h) = &fwd.hsts {
        e.push(Edit::AddIfAbsent(STRICT_TRANSPORT_SECURITY, Value::Text(h)));
    }
    e
}

/// The fields of an answer switchyard writes itself (an error page, or a failure with an
/// empty body): content type and length, no caching, HSTS on the TLS port.
pub fn answer_fields<'a>(
    fwd: &'a Forwarding,
    content_type: Option<&'a str>,
    body_len: usize,
    cache_control: &'static str,
) -> Edits<'a> {
    let mut e = Edits::new();
    if let Some(ct) = content_type {
        e.push(Edit::Add(CONTENT_TYPE, Value::Text(ct)));
    }
    e.push(Edit::Add(CONTENT_LENGTH, Value::Number(body_len as u64)));
    e.push(Edit::Add(CACHE_CONTROL, Value::Text(cache_control)));
    if let Some(h) = &fwd.hsts {
        e.push(Edit::Add(STRICT_TRANSPORT_SECURITY, Value::Text(h)));
    }
    e
}

/// The `Access-Control-*` fields a request from `origin` gets on a route with `cors`, in
/// ingress-nginx's order: on its response (replacing the backend's) and on a preflight's
/// `204`. The one list both use.
pub fn cors_fields<'a>(
    cors: &'a Cors,
    origin: &'a AllowOrigin,
    asked: Asked<'a>,
) -> impl Iterator<Item = (&'static str, &'a str)> {
    let methods = cors.answer_for(&cors.methods, asked.methods);
    let headers = cors.answer_for(&cors.headers, asked.headers);
    [
        Some((ACCESS_CONTROL_ALLOW_ORIGIN, origin.text())),
        cors.credentials
            .then_some((ACCESS_CONTROL_ALLOW_CREDENTIALS, "true")),
        (!methods.is_empty()).then_some((ACCESS_CONTROL_ALLOW_METHODS, methods)),
        (!headers.is_empty()).then_some((ACCESS_CONTROL_ALLOW_HEADERS, headers)),
        (!cors.expose.is_empty()).then_some((ACCESS_CONTROL_EXPOSE_HEADERS, &*cors.expose)),
        Some((ACCESS_CONTROL_MAX_AGE, &*cors.max_age)),
    ]
    .into_iter()
    .flatten()
}

/// What a preflight asked for (`Access-Control-Request-Method`, `-Headers`); nothing for
/// another request.
#[derive(Debug, Clone, Copy, Default)]
pub struct Asked<'a> {
    pub methods: Option<&'a str>,
    pub headers: Option<&'a str>,
}

/// A preflight's answer: no body, the CORS fields (with ingress-nginx's `Content-Type`).
pub fn preflight_fields<'a>(
    fwd: &'a Forwarding,
    cors: &'a Cors,
    origin: &'a AllowOrigin,
    asked: Asked<'a>,
) -> Edits<'a> {
    let mut e = Edits::new();
    for (name, value) in cors_fields(cors, origin, asked) {
        e.push(Edit::Add(name, Value::Text(value)));
    }
    e.push(Edit::Add(
        CONTENT_TYPE,
        Value::Text("text/plain charset=UTF-8"),
    ));
    e.push(Edit::Add(CONTENT_LENGTH, Value::Number(0)));
    if let Some(h) = &fwd.hsts {
        e.push(Edit::Add(STRICT_TRANSPORT_SECURITY, Value::Text(h)));
    }
    e
}

/// The fields of switchyard's own answer to a gRPC request: an empty `application/grpc` body,
/// never cached, and the status in `grpc-status` / `grpc-message` ("trailers-only").
pub fn grpc_answer_fields<'a>(fwd: &'a Forwarding, code: u8, message: &'static str) -> Edits<'a> {
    let mut e = answer_fields(fwd, Some("application/grpc"), 0, "private, no-store");
    e.push(Edit::Add(GRPC_STATUS, Value::Number(u64::from(code))));
    e.push(Edit::Add(GRPC_MESSAGE, Value::Text(message)));
    e
}

/// `Cache-Control` with `no-cache="set-cookie"` added to `prev`, at the end of `out`.
fn no_cache_set_cookie_into(out: &mut Vec<u8>, prev: Option<&[u8]>) {
    if let Some(p) = prev.filter(|p| !p.is_empty() && std::str::from_utf8(p).is_ok()) {
        out.extend_from_slice(p);
        out.extend_from_slice(b", ");
    }
    out.extend_from_slice(b"no-cache=\"set-cookie\"");
}

/// The `Extend` result at the end of `out`: `prev, value` when `prev` is visible text, else
/// `value` alone.
fn extend_into(out: &mut Vec<u8>, prev: Option<&[u8]>, value: &Value<'_>) {
    if let Some(p) = prev.filter(|p| extendable(p)) {
        out.extend_from_slice(p);
        out.extend_from_slice(b", ");
    }
    value.write_to(out);
}

/// A value `Extend` keeps: non-empty visible ASCII text (tabs allowed).
pub fn extendable(v: &[u8]) -> bool {
    !v.is_empty() && v.iter().all(|&b| b == b'\t' || (b' '..=b'~').contains(&b))
}

/// Where an engine writes a message's fields as it carries out `Edits` in one pass over them
/// (`Seen`): HTTP/1 lines, or an HTTP/2 header block.
pub trait Sink {
    /// Adds one field named `name`, its value written by `value` at the end of the buffer.
    fn add(&mut self, name: &'static str, value: impl FnOnce(&mut Vec<u8>));
}

/// The one carrier of `Edits` over a message's fields as they pass, for the engines that write
/// the message rather than edit a map (the fast path's HTTP/1 heads, the HTTP/2 relay's request
/// block): each field an edit touches goes through `field`, which says whether it stays; then
/// `additions` writes the fields the edits add, from what the existing ones told them. What
/// the existing fields told the edits that read them is kept here.
#[derive(Default)]
pub struct Seen<'v> {
    /// The first value of the field an `Extend` or `NoCacheSetCookie` reads.
    first: [Option<&'v [u8]>; 2],
    /// Names an `AddIfAbsent` found.
    present: [Option<&'static str>; 2],
    /// The `Cookie` values `StripCookie` kept, once the load balancer's cookie was taken out.
    kept_cookies: Vec<Vec<u8>>,
}

impl<'v> Seen<'v> {
    /// One field `edit` touches (`Edits::touching`); says whether it is kept as it is.
    pub fn field(&mut self, edit: &Edit<'_>, value: &'v [u8]) -> bool {
        match *edit {
            Edit::StripCookie => {
                if sticky::find_cookie(value, sticky::COOKIE_NAME).is_none() {
                    return true;
                }
                if let Some(kept) = sticky::strip_cookie(value, sticky::COOKIE_NAME) {
                    self.kept_cookies.push(kept);
                }
                false
            }
            Edit::AddIfAbsent(name, _) => {
                if let Some(slot) = self
                    .present
                    .iter_mut()
                    .find(|s| s.is_none_or(|n| n == name))
                {
                    *slot = Some(name);
                }
                true
            }
            _ => {
                if let Some(slot) = Self::slot(edit) {
                    self.first[slot].get_or_insert(value);
                }
                edit.keeps_existing()
            }
        }
    }

    /// Which of `first` keeps the first value an edit reads.
    fn slot(edit: &Edit<'_>) -> Option<usize> {
        match edit {
            Edit::Extend(..) => Some(0),
            Edit::NoCacheSetCookie => Some(1),
            _ => None,
        }
    }

    /// Writes the fields the edits add into `sink`, in their order.
    pub fn additions(&self, edits: &Edits<'_>, sink: &mut impl Sink) {
        for edit in edits.iter() {
            if *edit == Edit::StripCookie {
                for kept in &self.kept_cookies {
                    sink.add(COOKIE, |out| out.extend_from_slice(kept));
                }
                continue;
            }
            let present = match *edit {
                Edit::AddIfAbsent(name, _) => self.present.contains(&Some(name)),
                _ => false,
            };
            let prev = Self::slot(edit).and_then(|slot| self.first[slot]);
            if edit.writes(present || prev.is_some()) {
                sink.add(edit.name(), |out| edit.write_value(prev, out));
            }
        }
    }
}

/// A certificate in PEM, percent-encoded as nginx's `$ssl_client_escaped_cert` (everything
/// but letters, digits and `-._~`).
pub fn escaped_pem(der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::with_capacity(b64.len() + b64.len() / 64 + 64);
    pem.push_str("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    let mut out = String::with_capacity(pem.len() * 5 / 4);
    for b in pem.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(b"0123456789ABCDEF"[usize::from(b >> 4)]));
            out.push(char::from(b"0123456789ABCDEF"[usize::from(b & 15)]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether backends hear of the client certificate is decided here alone: a frontend that
    /// does not tell them never has the connection's certificate read.
    #[test]
    fn the_certificate_is_read_only_where_backends_are_told() {
        let read = std::cell::Cell::new(0);
        let cert = || {
            read.set(read.get() + 1);
            ClientCert::verified("/CN=a")
        };
        let plain_fwd = Forwarding::plain();
        let plain = request_edits(&plain_fwd, Some("192.0.2.1"), Hidden::default(), cert);
        assert_eq!(read.get(), 0);
        assert_eq!(
            plain.touching(CLIENT_VERIFY_HEADER.as_bytes()),
            Some(&Edit::Remove(CLIENT_VERIFY_HEADER))
        );
        let told = Forwarding::tls(None, true);
        let e = request_edits(&told, Some("192.0.2.1"), Hidden::default(), cert);
        assert_eq!(read.get(), 1);
        assert!(
            e.iter()
                .any(|x| *x == Edit::Add(CLIENT_DN_HEADER, Value::Text("/CN=a")))
        );
    }

    #[test]
    fn every_frontend_removes_the_fields_switchyard_asserts() {
        let plain = Forwarding::plain();
        let e = request_edits(&plain, None, Hidden::default(), || ClientCert::Absent);
        for name in ASSERTED {
            assert_eq!(e.touching(name.as_bytes()), Some(&Edit::Remove(name)));
            assert_eq!(
                e.touching(name.to_ascii_uppercase().as_bytes()),
                Some(&Edit::Remove(name))
            );
        }
        assert!(e.touching(b"x-forwarded-host").is_none());
    }

    #[test]
    fn a_listener_that_verifies_clients_tells_the_backend_without_ssl_ca_cert() {
        let fwd = Forwarding::tls(None, false);
        let verified = || ClientCert::verified("CN=a");
        let e = request_edits(&fwd, None, Hidden::default(), verified);
        assert_eq!(
            e.touching(CLIENT_VERIFY_HEADER.as_bytes()),
            Some(&Edit::Remove(CLIENT_VERIFY_HEADER))
        );
        let listener = Hidden {
            client_cert: true,
            ..Hidden::default()
        };
        let e = request_edits(&fwd, None, listener, verified);
        assert!(
            e.iter()
                .any(|x| *x == Edit::Add(CLIENT_VERIFY_HEADER, Value::Text("SUCCESS")))
                && e.iter()
                    .any(|x| *x == Edit::Add(CLIENT_DN_HEADER, Value::Text("CN=a")))
        );
        let e = request_edits(&fwd, None, listener, || ClientCert::Absent);
        assert!(
            e.iter()
                .any(|x| *x == Edit::Add(CLIENT_VERIFY_HEADER, Value::Text("NONE")))
        );
    }

    #[test]
    fn an_ingress_host_that_verifies_clients_tells_the_backend_as_ingress_nginx() {
        let fwd = Forwarding::tls(None, false);
        let hidden = |pass| Hidden {
            ingress_cert: Some(pass),
            ..Hidden::default()
        };
        let set = |e: &Edits<'_>, name: &str| match e.touching(name.as_bytes()) {
            Some(Edit::Set(_, Value::Text(v))) => Some(v.to_string()),
            _ => None,
        };
        let good = || ClientCert::Verified {
            subject: "/CN=a",
            dn: "CN=a",
            issuer: "CN=ca",
            escaped: "-----BEGIN%20",
        };
        let e = request_edits(&fwd, None, hidden(true), good);
        assert_eq!(set(&e, SSL_CLIENT_VERIFY).as_deref(), Some("SUCCESS"));
        assert_eq!(set(&e, SSL_CLIENT_SUBJECT_DN).as_deref(), Some("CN=a"));
        assert_eq!(set(&e, SSL_CLIENT_ISSUER_DN).as_deref(), Some("CN=ca"));
        assert_eq!(set(&e, "SSL-Client-Cert").as_deref(), Some("-----BEGIN%20"));
        // Not passed on: the client's own copy is still removed.
        let e = request_edits(&fwd, None, hidden(false), good);
        assert_eq!(
            e.touching(SSL_CLIENT_CERT.as_bytes()),
            Some(&Edit::Remove(SSL_CLIENT_CERT))
        );
        // The x-client-* fields are the TLS port's and listeners' alone.
        assert_eq!(
            e.touching(CLIENT_VERIFY_HEADER.as_bytes()),
            Some(&Edit::Remove(CLIENT_VERIFY_HEADER))
        );
        let failed = || ClientCert::Failed {
            reason: "FAILED:unknown issuer",
            dn: "CN=m",
            issuer: "CN=x",
            escaped: "",
        };
        let e = request_edits(&fwd, None, hidden(false), failed);
        assert_eq!(
            set(&e, SSL_CLIENT_VERIFY).as_deref(),
            Some("FAILED:unknown issuer")
        );
        let e = request_edits(&fwd, None, hidden(false), || ClientCert::Absent);
        assert_eq!(set(&e, SSL_CLIENT_VERIFY).as_deref(), Some("NONE"));
        assert_eq!(set(&e, SSL_CLIENT_SUBJECT_DN).as_deref(), Some(""));
    }

    #[test]
    fn a_certificate_is_escaped_as_nginx_escapes_it() {
        let escaped = escaped_pem(&[0xfb, 0xff, 0x00, 0x10]);
        assert_eq!(
            escaped,
            "-----BEGIN%20CERTIFICATE-----%0A%2B%2F8AEA%3D%3D%0A-----END%20CERTIFICATE-----%0A"
        );
    }

    #[test]
    fn request_edits_fit() {
        let tls = Forwarding::tls(Some(10), true);
        let e = request_edits(
            &tls,
            Some("192.0.2.1"),
            Hidden {
                sticky_cookie: true,
                authorization: true,
                forwarded_prefix: Some("/api"),
                client_cert: true,
                ingress_cert: Some(true),
            },
            || ClientCert::verified("CN=a"),
        );
        let n = e.iter().count();
        // Every edit a request can get: a longer list panics in debug builds (found by the
        // http_request fuzz target when `Hidden::authorization` came), and loses the last
        // edit in release ones.
        assert_eq!(n, ASSERTED.len() + 1 + 2 + 1 + 1 + 1 + 2 + 4);
        assert_eq!(n, MAX_EDITS);
        assert_eq!(
            e.touching(b"Authorization"),
            Some(&Edit::Remove(AUTHORIZATION))
        );
        assert_eq!(
            e.touching(b"X-Forwarded-For"),
            Some(&Edit::Extend(X_FORWARDED_FOR, Value::Text("192.0.2.1")))
        );
        assert_eq!(e.touching(b"cookie"), Some(&Edit::StripCookie));
    }

    #[test]
    fn response_edits_add_the_cookie_and_hsts_only_when_due() {
        let plain = Forwarding::plain();
        assert_eq!(response_edits(&plain, None).iter().count(), 0);
        let tls = Forwarding::tls(Some(60), false);
        let e = response_edits(
            &tls,
            Some(StickyCookie {
                id: 7,
                affinity: None,
            }),
        );
        assert_eq!(e.touching(b"Cache-Control"), Some(&Edit::NoCacheSetCookie));
        assert_eq!(
            e.touching(b"strict-transport-security"),
            Some(&Edit::AddIfAbsent(
                STRICT_TRANSPORT_SECURITY,
                Value::Text("max-age=60")
            ))
        );
    }

    #[test]
    fn extend_keeps_only_visible_text() {
        let ip = Value::Text("10.0.0.1");
        let extended = |prev: Option<&[u8]>| written(Edit::Extend(X_FORWARDED_FOR, ip), prev);
        assert_eq!(extended(Some(b"1.2.3.4")), b"1.2.3.4, 10.0.0.1");
        assert_eq!(extended(Some(b"")), b"10.0.0.1");
        assert_eq!(extended(Some(b"a\x01b")), b"10.0.0.1");
        assert_eq!(extended(None), b"10.0.0.1");
        assert_eq!(
            written(Edit::NoCacheSetCookie, Some(b"max-age=5")),
            b"max-age=5, no-cache=\"set-cookie\""
        );
        assert_eq!(
            written(Edit::NoCacheSetCookie, None),
            b"no-cache=\"set-cookie\""
        );
    }

    fn written(edit: Edit<'_>, prev: Option<&[u8]>) -> Vec<u8> {
        let mut out = Vec::new();
        edit.write_value(prev, &mut out);
        out
    }

    /// What each edit does with the message's own fields of its name, and whether it writes
    /// one, with and without one there.
    #[test]
    fn each_edit_keeps_drops_and_writes_as_it_says() {
        let v = Value::Text("v");
        for (edit, keeps, writes_absent, writes_present) in [
            (Edit::Remove("x"), false, false, false),
            (Edit::Add("x", v), true, true, true),
            (Edit::AddIfAbsent("x", v), true, true, false),
            (Edit::Extend("x", v), false, true, true),
            (Edit::NoCacheSetCookie, false, true, true),
        ] {
            assert_eq!(edit.keeps_existing(), keeps, "{edit:?}");
            assert_eq!(edit.writes(false), writes_absent, "{edit:?}");
            assert_eq!(edit.writes(true), writes_present, "{edit:?}");
        }
        assert_eq!(written(Edit::AddIfAbsent("x", v), None), b"v");
        assert_eq!(Edit::NoCacheSetCookie.name(), CACHE_CONTROL);
    }

    /// The text is `Display`'s, for every value of each octet and for IPv6.
    #[test]
    fn ip_text_is_display() {
        use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
        for octet in 0..=255u8 {
            for pos in 0..4 {
                let mut o = [1, 20, 255, 7];
                o[pos] = octet;
                let ip = IpAddr::V4(Ipv4Addr::from(o));
                assert_eq!(ip_text(ip), ip.to_string());
            }
        }
        for ip in [
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V4(Ipv4Addr::BROADCAST),
            IpAddr::V6(Ipv6Addr::LOCALHOST),
            IpAddr::V6("2001:db8::7:1".parse().unwrap()),
            IpAddr::V6("::ffff:192.0.2.1".parse().unwrap()),
        ] {
            assert_eq!(ip_text(ip), ip.to_string());
        }
    }
}

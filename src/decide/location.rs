//! Fills a location or rewrite target (`table::location`) in with a request's parts: the
//! scheme, host, path and query, the groups of the route's regular-expression path. Pure:
//! no I/O, no clock; it only writes the string it is given.

use crate::table::location::{Location, Part};
use crate::table::pattern::Groups;

/// `location` with the request's parts filled in (no groups: a redirect's location, not a
/// rewrite target).
pub(crate) fn fill_location(
    location: &Location,
    https: bool,
    host: Option<&[u8]>,
    path: &str,
    query: Option<&str>,
) -> String {
    let vars = Vars::new(https, host, path, query, None);
    let mut out = String::with_capacity(location.text.len() + path.len());
    expand(&location.parts, &vars, &mut out);
    out
}

/// The request's parts a location or rewrite target names.
pub(crate) struct Vars<'a> {
    pub(crate) scheme: &'a str,
    pub(crate) http_host: &'a str,
    pub(crate) path: &'a str,
    pub(crate) query: Option<&'a str>,
    /// The groups of the route's regular-expression path (rewrite targets only).
    pub(crate) groups: Option<Groups<'a>>,
}

impl<'a> Vars<'a> {
    /// The parts of a request over TLS or not, to `host`, of `path` and `query`.
    pub(crate) fn new(
        https: bool,
        host: Option<&'a [u8]>,
        path: &'a str,
        query: Option<&'a str>,
        groups: Option<Groups<'a>>,
    ) -> Vars<'a> {
        Vars {
            scheme: if https { "https" } else { "http" },
            http_host: host
                .and_then(|h| std::str::from_utf8(h).ok())
                .unwrap_or_default(),
            path,
            query,
            groups,
        }
    }
}

/// Writes `parts` with the request's parts filled in.
pub(crate) fn expand(parts: &[Part], v: &Vars<'_>, out: &mut String) {
    for part in parts {
        match part {
            Part::Text(t) => out.push_str(t),
            Part::Scheme => out.push_str(v.scheme),
            Part::HttpHost => out.push_str(v.http_host),
            Part::Host => {
                let name = v
                    .http_host
                    .rsplit_once(':')
                    .map_or(v.http_host, |(h, port)| {
                        if port.bytes().all(|b| b.is_ascii_digit()) {
                            h
                        } else {
                            v.http_host
                        }
                    });
                out.extend(name.chars().map(|c| c.to_ascii_lowercase()));
            }
            Part::RequestUri => {
                out.push_str(v.path);
                if let Some(q) = v.query {
                    out.push('?');
                    out.push_str(q);
                }
            }
            Part::EscapedRequestUri => {
                escape_into(v.path, out);
                if let Some(q) = v.query {
                    out.push_str("%3F");
                    escape_into(q, out);
                }
            }
            Part::Uri => out.push_str(v.path),
            Part::Args => out.push_str(v.query.unwrap_or_default()),
            Part::IsArgs => {
                if v.query.is_some_and(|q| !q.is_empty()) {
                    out.push('?');
                }
            }
            Part::Group(n) => {
                if let Some(g) = &v.groups {
                    out.push_str(g.get(usize::from(*n)));
                }
            }
        }
    }
}

/// Percent-encodes `s` into `out`: every byte but letters, digits and `-._~`, as
/// ingress-nginx's `$escaped_request_uri` (`set_escape_uri`).
fn escape_into(s: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        }
    }
}

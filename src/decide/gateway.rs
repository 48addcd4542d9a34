//! What a Gateway API rule does to a request, decided once for every engine: where a
//! `RequestRedirect` points, and the header operations of `RequestHeaderModifier` and
//! `ResponseHeaderModifier` in the order they apply (the rule's, then its backend's). An
//! engine only carries the operations out on its own header map. No I/O, no engine types.

use crate::table::gateway::{Backend, GatewayRule, HeaderFilter, PathRewrite, Redirect};
use crate::table::matcher::Strip;

/// One change to a header map; names are lower case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderOp<'a> {
    /// Replace every field of this name by one with this value.
    Set(&'a str, &'a str),
    /// Add a field (after any of the same name).
    Add(&'a str, &'a str),
    Remove(&'a str),
}

fn ops(f: &HeaderFilter) -> impl Iterator<Item = HeaderOp<'_>> {
    // The spec's order within one filter: set, add, remove.
    f.set
        .iter()
        .map(|(n, v)| HeaderOp::Set(n, v))
        .chain(f.add.iter().map(|(n, v)| HeaderOp::Add(n, v)))
        .chain(f.remove.iter().map(|n| HeaderOp::Remove(n)))
}

/// What the request gets before it goes to `backend`.
pub fn request_ops<'a>(
    rule: &'a GatewayRule,
    backend: &'a Backend,
) -> impl Iterator<Item = HeaderOp<'a>> {
    ops(&rule.request_headers).chain(ops(&backend.request_headers))
}

/// What the response gets before it goes to the client.
pub fn response_ops<'a>(
    rule: &'a GatewayRule,
    backend: &'a Backend,
) -> impl Iterator<Item = HeaderOp<'a>> {
    ops(&rule.response_headers).chain(ops(&backend.response_headers))
}

/// The `Location` of a redirect: the filter's scheme, host, port and path where it gives
/// them, the request's otherwise. A port is written unless it is the scheme's own; when the
/// filter names a scheme but no port, the port is that scheme's own, else the listener's.
pub fn location(
    r: &Redirect,
    https: bool,
    host: &[u8],
    path: &str,
    query: Option<&str>,
    matched_prefix: &str,
    listener_port: u16,
) -> String {
    let scheme = r
        .scheme
        .as_deref()
        .unwrap_or(if https { "https" } else { "http" });
    let well_known = if scheme == "https" { 443 } else { 80 };
    let port = r.port.unwrap_or(if r.scheme.is_some() {
        well_known
    } else {
        listener_port
    });
    let request_host = String::from_utf8_lossy(host);
    let name = match r.hostname.as_deref() {
        Some(h) => h.to_string(),
        None => match request_host.rfind(':') {
            Some(i) if !request_host[i..].contains(']') => request_host[..i].to_string(),
            _ => request_host.to_string(),
        },
    };
    let new_path = match &r.path {
        None => path.to_string(),
        Some(PathRewrite::Full(p)) => p.to_string(),
        Some(PathRewrite::Prefix(p)) => {
            let strip = Strip::replace(matched_prefix, p.clone());
            let (head, rest) = strip.apply(path);
            format!("{head}{rest}")
        }
    };
    let mut out = format!("{scheme}://{name}");
    if port != well_known {
        out.push(':');
        out.push_str(&port.to_string());
    }
    out.push_str(&new_path);
    if let Some(q) = query.filter(|q| !q.is_empty()) {
        out.push('?');
        out.push_str(q);
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn redirect() -> Redirect {
        Redirect {
            scheme: None,
            hostname: None,
            port: None,
            path: None,
            status: 302,
        }
    }

    #[test]
    fn a_redirect_keeps_what_the_filter_does_not_name() {
        let r = redirect();
        assert_eq!(
            location(&r, false, b"example.com:8080", "/a", Some("q=1"), "/", 80),
            "http://example.com/a?q=1"
        );
        let host = Redirect {
            hostname: Some("example.org".into()),
            ..redirect()
        };
        assert_eq!(
            location(&host, false, b"x", "/", None, "/", 80),
            "http://example.org/"
        );
        // A listener on another port keeps it.
        assert_eq!(
            location(&r, false, b"x", "/", None, "/", 8080),
            "http://x:8080/"
        );
    }

    #[test]
    fn scheme_and_port_follow_the_spec() {
        let https = Redirect {
            scheme: Some("https".into()),
            ..redirect()
        };
        assert_eq!(
            location(&https, false, b"x", "/p", None, "/", 80),
            "https://x/p"
        );
        let https_8443 = Redirect {
            port: Some(8443),
            ..https.clone()
        };
        assert_eq!(
            location(&https_8443, false, b"x", "/p", None, "/", 80),
            "https://x:8443/p"
        );
        let port_only = Redirect {
            port: Some(8083),
            ..redirect()
        };
        assert_eq!(
            location(&port_only, false, b"x", "/", None, "/", 80),
            "http://x:8083/"
        );
        let http_on_tls = Redirect {
            scheme: Some("http".into()),
            ..redirect()
        };
        assert_eq!(
            location(&http_on_tls, true, b"x", "/", None, "/", 443),
            "http://x/"
        );
    }

    #[test]
    fn redirect_paths_replace_the_whole_or_the_prefix() {
        let full = Redirect {
            path: Some(PathRewrite::Full(Arc::from("/one"))),
            ..redirect()
        };
        assert_eq!(
            location(&full, false, b"x", "/full/path/original", None, "/full", 80),
            "http://x/one"
        );
        let prefix = Redirect {
            path: Some(PathRewrite::Prefix(Arc::from("/prefix"))),
            ..redirect()
        };
        assert_eq!(
            location(&prefix, false, b"x", "/original-prefix/lemon", None, "/original-prefix", 80),
            "http://x/prefix/lemon"
        );
        let strip = Redirect {
            path: Some(PathRewrite::Prefix(Arc::from("/"))),
            ..redirect()
        };
        assert_eq!(
            location(&strip, false, b"x", "/strip-prefix/three", None, "/strip-prefix", 80),
            "http://x/three"
        );
        assert_eq!(
            location(&strip, false, b"x", "/strip-prefix", None, "/strip-prefix", 80),
            "http://x/"
        );
    }
}

//! A location or target as an Ingress writes it (`permanent-redirect`, `rewrite-target`,
//! `auth-signin`), split once at the nginx variables it names so that a request only fills
//! them in (`decide::location`). Data only: no request is read here. No Kubernetes, Pingora
//! or tokio.

use std::sync::Arc;

/// A redirect's location as written, split at the nginx variables it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub text: Arc<str>,
    pub parts: Arc<[Part]>,
}

impl serde::Serialize for Location {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

/// A piece of a redirect's location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Text(Box<str>),
    /// `$scheme`: `http` or `https`.
    Scheme,
    /// `$host`: the request's host, without a port, lower case.
    Host,
    /// `$http_host`: the `Host` field as sent.
    HttpHost,
    /// `$request_uri`: the path and query.
    RequestUri,
    /// `$escaped_request_uri` (ingress-nginx's): the path and query percent-encoded, every
    /// byte but letters, digits and `-._~` (a URL's query parameter).
    EscapedRequestUri,
    /// `$uri`: the path.
    Uri,
    /// `$args`: the query, without `?`.
    Args,
    /// `$is_args`: `?` when there is a query, else nothing.
    IsArgs,
    /// `$1`..`$9`: a group of the route's regular-expression path (a rewrite target only).
    Group(u8),
}

impl Location {
    /// Reads `v`: an absolute `http`/`https` URL or an absolute path, one line of visible
    /// characters, in which `$scheme`, `$host`, `$http_host`, `$request_uri`,
    /// `$escaped_request_uri`, `$uri`, `$args` and `$is_args` (also as `${name}`) stand for
    /// the request's parts. Any other `$` is an
    /// error: a location that cannot be made is never guessed at.
    pub fn parse(v: &str) -> Result<Location, String> {
        Self::parse_with(v, false)
    }

    /// Reads a rewrite target: an absolute path (or one that starts with a group, `$1/x`)
    /// with the same variables and `$1`..`$9`, the groups of the route's path.
    pub fn rewrite(v: &str) -> Result<Location, String> {
        let l = Self::parse_with(v, true)?;
        match l.parts.first() {
            Some(Part::Text(t)) if t.starts_with('/') && !t.starts_with("//") => Ok(l),
            Some(Part::Group(_)) => Ok(l),
            _ => Err("is not an absolute path (or one that starts with $1..$9)".into()),
        }
    }

    fn parse_with(v: &str, groups: bool) -> Result<Location, String> {
        let v = v.trim();
        if v.is_empty() || v.bytes().any(|b| !(0x21..0x7f).contains(&b)) {
            return Err("is not a URL of visible characters without spaces".into());
        }
        let mut parts = Vec::new();
        let mut sample = String::new();
        for piece in pieces(v)? {
            let name = match piece {
                Piece::Text(t) => {
                    parts.push(Part::Text(t.into()));
                    sample.push_str(t);
                    continue;
                }
                Piece::Var(name) => name,
            };
            let (part, example) = match name {
                "scheme" => (Part::Scheme, "https"),
                "host" => (Part::Host, "example.com"),
                "http_host" => (Part::HttpHost, "example.com"),
                "request_uri" => (Part::RequestUri, "/a?b"),
                "escaped_request_uri" => (Part::EscapedRequestUri, "%2Fa%3Fb"),
                "uri" => (Part::Uri, "/a"),
                "args" => (Part::Args, "b"),
                "is_args" => (Part::IsArgs, "?"),
                digit
                    if groups && digit.len() == 1 && matches!(digit.as_bytes()[0], b'1'..=b'9') =>
                {
                    (Part::Group(digit.as_bytes()[0] - b'0'), "x")
                }
                other => {
                    return Err(format!(
                        "names ${other}, which switchyard does not fill in (it fills in \
                         $scheme, $host, $http_host, $request_uri, $escaped_request_uri, \
                         $uri, $args, $is_args{})",
                        if groups { ", $1..$9" } else { "" }
                    ));
                }
            };
            parts.push(part);
            sample.push_str(example);
        }
        let path = sample.starts_with('/') && !sample.starts_with("//");
        // A rewrite target is checked by `rewrite`, on its parts.
        if !path && !groups {
            let uri: http::Uri = sample.parse().map_err(|_| "is not a URL".to_string())?;
            if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.authority().is_none() {
                return Err("is neither an http(s) URL nor an absolute path".into());
            }
        }
        Ok(Location {
            text: v.into(),
            parts: parts.into(),
        })
    }
}

/// A piece of a template that names nginx variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    Text(&'a str),
    /// `$name` or `${name}`: the name.
    Var(&'a str),
}

/// Splits `v` at its variables (`$name`, a name of letters, digits and `_`, or `${name}`).
pub fn pieces(v: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut out = Vec::new();
    let mut rest = v;
    while let Some(at) = rest.find('$') {
        if at > 0 {
            out.push(Piece::Text(&rest[..at]));
        }
        let after = &rest[at + 1..];
        let (name, len) = match after.strip_prefix('{') {
            Some(inner) => match inner.find('}') {
                Some(end) => (&inner[..end], end + 2),
                None => return Err("has a ${ without its }".into()),
            },
            None => {
                let end = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..end], end)
            }
        };
        out.push(Piece::Var(name));
        rest = &after[len..];
    }
    if !rest.is_empty() {
        out.push(Piece::Text(rest));
    }
    Ok(out)
}

//! The request target as switchyard routes and forwards it: the path with its dot-segments
//! removed (RFC 3986 §5.2.4), `%2e` read as `.` for that purpose only. The path that is matched
//! is the path that is forwarded, so `/api/../admin` can neither step out of an `/api` route
//! nor reach a backend in a form the route did not see. Encoded slashes (`%2F`) are not
//! separators and stay as they are, and so do empty segments (`//`).
//!
//! A target in absolute form (`GET http://h/p HTTP/1.1`, RFC 9112 §3.2.2) is routed on its own
//! authority, whatever `Host` says or whether it is there at all, and forwarded in origin form
//! with `Host` set to that authority, so routing and the backend see the same host. Pure: no I/O.

use std::borrow::Cow;

/// Whether `path` has a segment that normalising would remove (the cheap test the fast path
/// makes on every request; `normalize_path` is only called when it says yes).
pub fn has_dot_segment(path: &str) -> bool {
    // A dot-segment starts the path or follows a slash, with `.` or `%` (`%2e`). Most paths,
    // dotted gRPC method names among them, have no such place and are not split at all.
    let b = path.as_bytes();
    let dotted_at = |i: usize| matches!(b.get(i), Some(b'.' | b'%'));
    (dotted_at(0)
        || b.iter()
            .enumerate()
            .any(|(i, &c)| c == b'/' && dotted_at(i + 1)))
        && path.split('/').any(is_dot_segment)
}

/// `path` with its dot-segments removed; borrowed when there were none. A `..` above the root
/// is dropped, and a path ending in a dot-segment keeps its trailing slash.
pub fn normalize_path(path: &str) -> Cow<'_, str> {
    if !has_dot_segment(path) {
        return Cow::Borrowed(path);
    }
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let last = segments.len().saturating_sub(1);
    for (i, seg) in segments.iter().enumerate() {
        match dots(seg) {
            Some(1) => {}
            Some(_) => {
                out.pop();
            }
            None => out.push(seg),
        }
        // "/a/." and "/a/.." end in a directory: keep the slash.
        if i == last && dots(seg).is_some() {
            out.push("");
        }
    }
    let mut s = String::with_capacity(path.len());
    for seg in &out {
        s.push('/');
        s.push_str(seg);
    }
    if s.is_empty() {
        s.push('/');
    }
    Cow::Owned(s)
}

fn is_dot_segment(seg: &str) -> bool {
    dots(seg).is_some()
}

/// `Some(1)` for `.`, `Some(2)` for `..` (each dot plain or `%2e`, any case).
fn dots(seg: &str) -> Option<u8> {
    let b = seg.as_bytes();
    let mut n = 0u8;
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'.' {
            i += 1;
        } else if b.len() - i >= 3 && b[i] == b'%' && b[i + 1] == b'2' && (b[i + 2] | 0x20) == b'e'
        {
            i += 3;
        } else {
            return None;
        }
        n += 1;
        if n > 2 {
            return None;
        }
    }
    (n > 0).then_some(n)
}

/// What a request target says about its host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetForm<'a> {
    /// Origin form (`/p?q`) or anything else that is not absolute: `Host` names the host.
    Origin,
    /// Absolute form with a usable authority: route on `authority`, forward `origin` (the
    /// path and query, `/` when empty) with `Host: authority`; the received `Host` is ignored.
    Absolute {
        authority: &'a str,
        origin: Cow<'a, str>,
    },
    /// Absolute form that cannot be honoured: another scheme, an empty or invalid authority,
    /// user information (RFC 9110 §4.2.4). Answered 400.
    Invalid,
}

/// Classifies a request target (RFC 9112 §3.2). `http` and `https`, in any case, are the
/// schemes a gateway serves; a fragment is not part of a request target.
pub fn target_form(target: &str) -> TargetForm<'_> {
    if target.starts_with('/') || target == "*" {
        return TargetForm::Origin;
    }
    let Some((scheme, rest)) = target.split_once("://") else {
        return TargetForm::Origin;
    };
    if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
        return if scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
        {
            TargetForm::Invalid
        } else {
            TargetForm::Origin
        };
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.is_empty() || tail.contains('#') || !valid_host(authority.as_bytes()) {
        return TargetForm::Invalid;
    }
    let origin = match tail.as_bytes().first() {
        None => Cow::Borrowed("/"),
        Some(b'?') => Cow::Owned(format!("/{tail}")),
        Some(_) => Cow::Borrowed(tail),
    };
    TargetForm::Absolute { authority, origin }
}

/// `uri-host [":" port]` without user information, or empty (allowed in `Host` when the target
/// has no authority, RFC 9112 §3.2).
pub fn valid_host(h: &[u8]) -> bool {
    // The port, when there is one, is digits (`http` parses it lazily and takes `h:x`).
    let port = match h.iter().rposition(|&b| b == b':') {
        Some(i) if !h[i..].contains(&b']') => h.get(i + 1..),
        _ => None,
    };
    let name = match port {
        Some(p) => &h[..h.len() - p.len() - 1],
        None => h,
    };
    h.is_empty()
        || (!h.contains(&b'@')
            && port.is_none_or(|p| !p.is_empty() && p.iter().all(u8::is_ascii_digit))
            && (plain_name(name) || http::uri::Authority::try_from(h).is_ok()))
}

/// A host name of unreserved characters only (letters, digits, `-._~`), as nearly every
/// `Host` is: `http`'s authority parser takes each such name, so it is spared (a few hundred
/// instructions a request); anything else (IP literals, sub-delims, percent signs) is left to it.
fn plain_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_what_the_authority_parser_takes() {
        let samples = [
            "example.com",
            "a",
            "A-b_c~d.e",
            "x.example:8080",
            "-",
            ".",
            "~",
            "_",
            "1.2.3.4",
            "ex ample",
            "ex%41mple",
            "[::1]",
            "[::1]:80",
            "a:b:c",
            "h:",
            "a@b",
            "!$&'()*+,;=",
        ];
        for h in samples {
            let name = h.rsplit_once(':').map_or(h, |(n, _)| n).as_bytes();
            if plain_name(name) {
                assert!(
                    http::uri::Authority::try_from(h.as_bytes()).is_ok() || h.ends_with(':'),
                    "{h}"
                );
            }
            let port_ok = h.rsplit_once(':').is_none_or(|(_, p)| {
                h.contains('[') || (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            });
            let parsed =
                !h.contains('@') && port_ok && http::uri::Authority::try_from(h.as_bytes()).is_ok();
            assert_eq!(valid_host(h.as_bytes()), parsed, "{h}");
        }
    }

    #[test]
    fn absolute_form_targets_name_their_host() {
        let abs = |a: &'static str, o: &'static str| TargetForm::Absolute {
            authority: a,
            origin: Cow::Borrowed(o),
        };
        assert_eq!(target_form("/p/x"), TargetForm::Origin);
        assert_eq!(target_form("*"), TargetForm::Origin);
        assert_eq!(target_form("http://h/p/x"), abs("h", "/p/x"));
        assert_eq!(target_form("HTTP://h:8080/p?q=1"), abs("h:8080", "/p?q=1"));
        assert_eq!(target_form("https://h"), abs("h", "/"));
        assert_eq!(target_form("http://[::1]:80/"), abs("[::1]:80", "/"));
        assert_eq!(
            target_form("http://h?q"),
            TargetForm::Absolute {
                authority: "h",
                origin: Cow::Owned("/?q".into())
            }
        );
        for bad in [
            "http:///p",
            "http://user@h/p",
            "http://h h/p",
            "http://h:x/p",
            "ftp://h/p",
            "http://h/p#f",
        ] {
            assert_eq!(target_form(bad), TargetForm::Invalid, "{bad}");
        }
    }

    #[test]
    fn dot_segments_are_removed_and_nothing_else_changes() {
        for (input, want) in [
            ("/", "/"),
            ("/a/b", "/a/b"),
            ("/api/../admin", "/admin"),
            ("/raw/../web/x", "/web/x"),
            ("/a/./b", "/a/b"),
            ("/a/b/..", "/a/"),
            ("/a/b/.", "/a/b/"),
            ("/..", "/"),
            ("/../../etc/passwd", "/etc/passwd"),
            ("/api/%2e%2e/admin", "/admin"),
            ("/api/%2E./admin", "/admin"),
            ("/api/.%2e/admin", "/admin"),
            ("/a/%2e/b", "/a/b"),
            ("/a/.../b", "/a/.../b"),
            ("/a/..b/c", "/a/..b/c"),
            ("/a%2F..%2Fb", "/a%2F..%2Fb"),
            ("/a//b/../c", "/a//c"),
            ("/.well-known/x", "/.well-known/x"),
        ] {
            assert_eq!(normalize_path(input), want, "{input}");
            assert_eq!(
                has_dot_segment(input),
                matches!(normalize_path(input), Cow::Owned(_)),
                "{input}"
            );
        }
    }

    /// The quick test that skips splitting says the same as splitting, for every path of up to
    /// six bytes made of the bytes that matter.
    #[test]
    fn the_quick_test_agrees_with_splitting_every_path() {
        const BYTES: &[u8] = b"/.%2eEa";
        let mut paths = vec![String::new()];
        for _ in 0..6 {
            let longer: Vec<String> = paths
                .iter()
                .flat_map(|p| BYTES.iter().map(move |&b| format!("{p}{}", b as char)))
                .collect();
            for path in &longer {
                let split = path.split('/').any(is_dot_segment);
                assert_eq!(has_dot_segment(path), split, "{path:?}");
            }
            paths = longer;
        }
        assert_eq!(paths.len(), BYTES.len().pow(6));
    }
}

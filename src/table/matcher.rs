//! Host and path matching: a pure, ranked lookup from (host, path) to a route target.
//!
//! Precedence is by specificity, never by name: an exact host beats a wildcard host (longest
//! wildcard suffix first), which beats the host-less rules; within one host the longest path
//! prefix wins. Prefixes match on a path-segment boundary (`/svc-1` never catches `/svc-10`),
//! so a lookup is one hash probe per segment of the request path, not a scan over all rules.
//! A host whose rules do not match the path falls through to the next, less specific, level.
//!
//! This module must not know about Kubernetes, Pingora or tokio; it works on plain strings.

use std::collections::HashMap as StdHashMap;

/// aHash: several times faster than SipHash on short keys like host names, and still keyed per
/// process, so request headers cannot be used to aim at colliding buckets.
type HashMap<K, V> = StdHashMap<K, V, ahash::RandomState>;

use serde::Serialize;

/// Longest host name we normalise on the stack (RFC 1035 limits names to 253 octets).
const MAX_HOST_LEN: usize = 255;

/// One path rule: where a matching request goes and whether the prefix is removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathRule<T> {
    /// The prefix as written (`/svc`, `/api/`); stored for stripping and for display.
    pub prefix: Box<str>,
    /// Strip the prefix before forwarding (`/svc/a` -> `/a`).
    pub strip: bool,
    pub target: T,
}

/// The path rules of one host level, keyed by prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct PathRules<T> {
    rules: HashMap<Box<str>, PathRule<T>>,
}

impl<T> Default for PathRules<T> {
    fn default() -> Self {
        Self {
            rules: HashMap::default(),
        }
    }
}

impl<T> PathRules<T> {
    pub fn insert(&mut self, rule: PathRule<T>) {
        self.rules.insert(rule.prefix.clone(), rule);
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &PathRule<T>> {
        self.rules.values()
    }

    /// The rule with the longest prefix that matches `path` on a segment boundary.
    ///
    /// Candidates are every prefix of `path` that ends just before or just after a `/`, and the
    /// whole path; they are probed from the longest down, so the first hit is the best one.
    pub fn lookup(&self, path: &str) -> Option<&PathRule<T>> {
        if self.rules.is_empty() {
            return None;
        }
        if let Some(rule) = self.rules.get(path) {
            return Some(rule);
        }
        let bytes = path.as_bytes();
        let mut end = bytes.len();
        while let Some(slash) = bytes[..end].iter().rposition(|&b| b == b'/') {
            // "/a/b/c": try "/a/b/" then "/a/b", then "/a/" and "/a", then "/".
            if slash + 1 < bytes.len()
                && let Some(rule) = self.rules.get(&path[..=slash])
            {
                return Some(rule);
            }
            if slash > 0
                && let Some(rule) = self.rules.get(&path[..slash])
            {
                return Some(rule);
            }
            end = slash;
        }
        None
    }
}

/// Whether `prefix` matches `path` under the same rule `PathRules::lookup` applies.
///
/// Exposed for tests and for tools that explain a match; the data plane uses `lookup`.
pub fn prefix_matches(prefix: &str, path: &str) -> bool {
    if !path.starts_with(prefix) {
        return false;
    }
    if prefix.ends_with('/') || path.len() == prefix.len() {
        return true;
    }
    path.as_bytes()[prefix.len()] == b'/'
}

/// The request target after removing `prefix`: `/svc` -> `/`, `/svc/a?b` -> `/a?b`,
/// `/svc?x` -> `/?x`. `path_and_query` must start with `prefix`.
pub fn strip_prefix(path_and_query: &str, prefix: &str) -> String {
    let (slash, rest) = Strip::of(prefix).apply(path_and_query);
    let mut out = String::with_capacity(slash.len() + rest.len());
    out.push_str(slash);
    out.push_str(rest);
    out
}

/// A prefix to remove, reduced to what removing it needs, so that the data plane can write
/// the stripped target in two pieces without building it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Strip {
    len: usize,
    keep_slash: bool,
}

impl Strip {
    pub fn of(prefix: &str) -> Strip {
        Strip {
            len: prefix.len(),
            keep_slash: prefix.ends_with('/'),
        }
    }

    /// The stripped target as a leading `"/"` (or nothing) and the rest of `path_and_query`.
    pub fn apply(self, path_and_query: &str) -> (&'static str, &str) {
        let rest = path_and_query.get(self.len..).unwrap_or("");
        if rest.starts_with('/') {
            ("", rest)
        } else if self.keep_slash || !rest.is_empty() {
            ("/", rest)
        } else {
            ("/", "")
        }
    }
}

/// All routes of one frontend: exact hosts, wildcard hosts, and host-less rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Router<T> {
    /// Lower-case host -> its rules.
    pub exact: HashMap<Box<str>, PathRules<T>>,
    /// `*.example.com` stored as the suffix `.example.com`, longest first.
    pub wildcard: Vec<(Box<str>, PathRules<T>)>,
    /// Rules that apply to any host.
    pub any_host: PathRules<T>,
}

impl<T> Default for Router<T> {
    fn default() -> Self {
        Self {
            exact: HashMap::default(),
            wildcard: Vec::new(),
            any_host: PathRules::default(),
        }
    }
}

impl<T> Router<T> {
    /// Sorts the wildcard list into precedence order; call once after building.
    pub fn finish(&mut self) {
        self.wildcard
            .sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
    }

    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcard.is_empty() && self.any_host.is_empty()
    }

    /// Finds the route for a request. `host` is the raw Host header or `:authority` (any case,
    /// optional port); `path` is the path without the query.
    pub fn lookup(&self, host: Option<&[u8]>, path: &str) -> Option<&PathRule<T>> {
        let mut buf = [0u8; MAX_HOST_LEN];
        if let Some(host) = host.and_then(|h| normalize_host(h, &mut buf)) {
            if let Some(rule) = self.exact.get(host).and_then(|rules| rules.lookup(path)) {
                return Some(rule);
            }
            for (suffix, rules) in &self.wildcard {
                if host.len() > suffix.len()
                    && host.ends_with(&**suffix)
                    && let Some(rule) = rules.lookup(path)
                {
                    return Some(rule);
                }
            }
        }
        self.any_host.lookup(path)
    }
}

/// Lower-cases `raw` into `buf`, dropping a port and a trailing dot. `None` for a host that is
/// empty, too long or not valid UTF-8; such a request is matched by host-less rules only.
pub fn normalize_host<'b>(raw: &[u8], buf: &'b mut [u8; MAX_HOST_LEN]) -> Option<&'b str> {
    let host = if raw.first() == Some(&b'[') {
        // IPv6 literal: keep the brackets, drop what follows `]`.
        let close = raw.iter().position(|&b| b == b']')?;
        &raw[..=close]
    } else {
        match raw.iter().rposition(|&b| b == b':') {
            Some(colon) => &raw[..colon],
            None => raw,
        }
    };
    let host = host.strip_suffix(b".").unwrap_or(host);
    if host.is_empty() || host.len() > MAX_HOST_LEN {
        return None;
    }
    let out = &mut buf[..host.len()];
    for (dst, src) in out.iter_mut().zip(host) {
        *dst = src.to_ascii_lowercase();
    }
    std::str::from_utf8(out).ok()
}

/// Checks a host name from configuration: DNS labels of `[a-z0-9-]` (any case), optionally
/// led by `*.`; returns the lower-cased form, or why it is rejected.
pub fn validate_host(value: &str) -> Result<HostPattern, &'static str> {
    let value = value.trim();
    let (wildcard, name) = match value.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, value),
    };
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() {
        return Err("empty host name");
    }
    if name.len() > 253 {
        return Err("host name longer than 253 characters");
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err("host name label empty or longer than 63 characters");
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(
                "host name may only hold letters, digits, '-' and '.' (and a leading '*.')",
            );
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err("host name label starts or ends with '-'");
        }
    }
    let name = name.to_ascii_lowercase();
    Ok(if wildcard {
        HostPattern::Wildcard(format!(".{name}"))
    } else {
        HostPattern::Exact(name)
    })
}

/// A validated host rule.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HostPattern {
    Exact(String),
    /// The suffix with its leading dot, e.g. `.example.com` for `*.example.com`.
    Wildcard(String),
}

/// Checks a configured path prefix: it starts with `/` and holds only visible ASCII without
/// `?` or `#`.
pub fn validate_prefix(value: &str) -> Result<(), &'static str> {
    if !value.starts_with('/') {
        return Err("path prefix must start with '/'");
    }
    if value.len() > 1024 {
        return Err("path prefix longer than 1024 characters");
    }
    if !value
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b'?' && b != b'#')
    {
        return Err("path prefix may only hold visible ASCII characters without '?' or '#'");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(prefixes: &[(&str, u32)]) -> PathRules<u32> {
        let mut r = PathRules::default();
        for &(p, t) in prefixes {
            r.insert(PathRule {
                prefix: p.into(),
                strip: true,
                target: t,
            });
        }
        r
    }

    fn hit(r: &PathRules<u32>, path: &str) -> Option<u32> {
        r.lookup(path).map(|r| r.target)
    }

    #[test]
    fn segment_boundary() {
        let r = rules(&[("/svc-1", 1), ("/svc-10", 10)]);
        assert_eq!(hit(&r, "/svc-1"), Some(1));
        assert_eq!(hit(&r, "/svc-1/x"), Some(1));
        assert_eq!(hit(&r, "/svc-10"), Some(10));
        assert_eq!(hit(&r, "/svc-10/a/b"), Some(10));
        assert_eq!(hit(&r, "/svc-100"), None);
        assert_eq!(hit(&r, "/svc"), None);
    }

    #[test]
    fn longest_prefix_wins() {
        let r = rules(&[("/api", 1), ("/api/admin", 2), ("/", 0)]);
        assert_eq!(hit(&r, "/api/admin/x"), Some(2));
        assert_eq!(hit(&r, "/api/other"), Some(1));
        assert_eq!(hit(&r, "/elsewhere"), Some(0));
        assert_eq!(hit(&r, "/"), Some(0));
    }

    #[test]
    fn trailing_slash_prefix_is_plain_prefix() {
        let r = rules(&[("/static/", 1)]);
        assert_eq!(hit(&r, "/static/a.css"), Some(1));
        assert_eq!(hit(&r, "/static/"), Some(1));
        assert_eq!(hit(&r, "/static"), None);
    }

    #[test]
    fn prefix_matches_agrees_with_lookup() {
        for (prefix, path, want) in [
            ("/a", "/a", true),
            ("/a", "/a/", true),
            ("/a", "/ab", false),
            ("/a/", "/a/b", true),
            ("/", "/anything", true),
        ] {
            assert_eq!(prefix_matches(prefix, path), want, "{prefix} {path}");
            assert_eq!(
                rules(&[(prefix, 1)]).lookup(path).is_some(),
                want,
                "{prefix} {path}"
            );
        }
    }

    #[test]
    fn strip() {
        assert_eq!(strip_prefix("/svc", "/svc"), "/");
        assert_eq!(strip_prefix("/svc/", "/svc"), "/");
        assert_eq!(strip_prefix("/svc/a?b", "/svc"), "/a?b");
        assert_eq!(strip_prefix("/svc?x=1", "/svc"), "/?x=1");
        assert_eq!(strip_prefix("/static/a", "/static/"), "/a");
    }

    #[test]
    fn host_normalisation() {
        let mut buf = [0u8; MAX_HOST_LEN];
        assert_eq!(
            normalize_host(b"FOO.Example.com:8080", &mut buf),
            Some("foo.example.com")
        );
        let mut buf = [0u8; MAX_HOST_LEN];
        assert_eq!(
            normalize_host(b"foo.example.com.", &mut buf),
            Some("foo.example.com")
        );
        let mut buf = [0u8; MAX_HOST_LEN];
        assert_eq!(normalize_host(b"[::1]:80", &mut buf), Some("[::1]"));
        let mut buf = [0u8; MAX_HOST_LEN];
        assert_eq!(normalize_host(b"", &mut buf), None);
        let mut buf = [0u8; MAX_HOST_LEN];
        assert_eq!(normalize_host(&[b'a'; 300], &mut buf), None);
    }

    fn router() -> Router<u32> {
        let mut r = Router::default();
        r.exact.insert("foo.example.com".into(), rules(&[("/", 1)]));
        r.wildcard.push((".example.com".into(), rules(&[("/", 2)])));
        r.wildcard
            .push((".b.example.com".into(), rules(&[("/", 3)])));
        r.exact.insert("narrow.com".into(), rules(&[("/api", 4)]));
        r.any_host = rules(&[("/svc", 5)]);
        r.finish();
        r
    }

    #[test]
    fn exact_beats_wildcard_beats_any_host() {
        let r = router();
        let t = |h: &str, p: &str| r.lookup(Some(h.as_bytes()), p).map(|r| r.target);
        assert_eq!(t("FOO.example.com:80", "/svc"), Some(1));
        assert_eq!(t("a.example.com", "/svc"), Some(2));
        assert_eq!(
            t("a.b.example.com", "/x"),
            Some(3),
            "longest wildcard suffix wins"
        );
        assert_eq!(
            t("x.y.example.com", "/x"),
            Some(2),
            "wildcard matches several labels"
        );
        assert_eq!(
            t("example.com", "/svc"),
            Some(5),
            "wildcard needs at least one label"
        );
        assert_eq!(t("other.org", "/svc"), Some(5));
        assert_eq!(t("other.org", "/nope"), None);
    }

    #[test]
    fn narrowed_host_falls_through() {
        let r = router();
        let t = |h: &str, p: &str| r.lookup(Some(h.as_bytes()), p).map(|r| r.target);
        assert_eq!(t("narrow.com", "/api/x"), Some(4));
        assert_eq!(t("narrow.com", "/svc"), Some(5));
        assert_eq!(t("narrow.com", "/other"), None);
    }

    #[test]
    fn host_validation() {
        assert_eq!(
            validate_host("Foo.Com"),
            Ok(HostPattern::Exact("foo.com".into()))
        );
        assert_eq!(
            validate_host("*.example.com"),
            Ok(HostPattern::Wildcard(".example.com".into()))
        );
        assert!(validate_host("a b.com").is_err());
        assert!(validate_host("foo.com\nbackend x").is_err());
        assert!(validate_host("*.").is_err());
        assert!(validate_host("-a.com").is_err());
        assert!(validate_host(&"a".repeat(300)).is_err());
    }

    #[test]
    fn prefix_validation() {
        assert!(validate_prefix("/api").is_ok());
        assert!(validate_prefix("api").is_err());
        assert!(validate_prefix("/a b").is_err());
        assert!(validate_prefix("/a?b").is_err());
        assert!(validate_prefix("/a\n").is_err());
    }
}

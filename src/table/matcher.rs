//! Host and path matching: a pure, ranked lookup from (host, path) to a route target.
//!
//! Precedence is by specificity, never by name: an exact host beats a wildcard host (longest
//! wildcard suffix first), which beats the host-less rules; within one host the longest path
//! prefix wins. Prefixes match on a path-segment boundary (`/svc-1` never catches `/svc-10`),
//! so a lookup is one hash probe per segment of the request path, not a scan over all rules.
//! A host whose rules do not match the path falls through to the next, less specific, level.
//! A host rule may name a port (`shop.example.com:8080`): it matches only a Host that carries
//! that port, and ranks above the same name without a port; a Host without a port matches only
//! port-less rules. A prefix may ignore case (the annotations' `-i`): it is stored folded to
//! lower case and probed with the folded path, after the case-sensitive rules of each length.
//! Regular-expression rules (ingress-nginx's `use-regex` paths, the Gateway's
//! `RegularExpression` ones) are tried in their order after every other rule of the host
//! level, the first match winning, as nginx tries its regular-expression locations.
//!
//! This module must not know about Kubernetes, Pingora or tokio; it works on plain strings.

use std::collections::HashMap as StdHashMap;
use std::sync::Arc;

/// aHash: several times faster than SipHash on short keys like host names, and still keyed per
/// process, so request headers cannot be used to aim at colliding buckets.
type HashMap<K, V> = StdHashMap<K, V, ahash::RandomState>;

use serde::Serialize;

use crate::table::pattern::{Flavor, Pattern};

/// Longest host name we normalise on the stack (RFC 1035 limits names to 253 octets).
const MAX_HOST_LEN: usize = 255;

/// Longest configured prefix (`validate_prefix`); a case-insensitive probe folds at most one
/// byte more than this, on the stack.
const MAX_PREFIX_LEN: usize = 1024;

/// One path rule: where a matching request goes and whether the prefix is removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathRule<T> {
    /// The prefix as written (`/svc`, `/api/`), lower case when `ignore_case`; stored for
    /// stripping and for display.
    pub prefix: Box<str>,
    /// Strip the prefix before forwarding (`/svc/a` -> `/a`).
    pub strip: bool,
    /// Match the prefix without regard to ASCII case (`lb.aclMatch: "-i /api"`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub ignore_case: bool,
    /// Match the whole path only (an Ingress path of type `Exact`), never a path below it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub exact: bool,
    /// A Gateway `RegularExpression` path (the whole path must match) or an ingress-nginx
    /// regular-expression path (nginx's `~* "^path"`): `prefix` holds its source, for
    /// display. Boxed: every other rule pays one pointer for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub regex: Option<Box<Pattern>>,
    /// What an Ingress adds to requests of this rule (index into the table's policies).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<u32>,
    pub target: T,
}

/// The path rules of one host level, keyed by prefix: case-sensitive ones, and those that
/// ignore case keyed by their lower-case form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathRules<T> {
    rules: HashMap<Box<str>, PathRule<T>>,
    /// Boxed and absent until a rule ignores case (rare): a second inline map doubled the
    /// size of every host's rules, and the lookup bench paid for it in cache misses.
    folded: Option<Box<HashMap<Box<str>, PathRule<T>>>>,
    /// Whole-path rules (Ingress `Exact`), boxed and absent until there is one, for the same
    /// reason; probed before any prefix, which they beat.
    exact: Option<Box<HashMap<Box<str>, PathRule<T>>>>,
    /// Regular-expression rules in the order they were inserted, which is their precedence;
    /// absent until there is one. Tried after every whole-path and prefix rule. Boxed: one
    /// pointer rather than a `Vec`'s three on every host level, which seldom has one.
    #[allow(clippy::box_collection)]
    regex: Option<Box<Vec<PathRule<T>>>>,
}

impl<T> Default for PathRules<T> {
    fn default() -> Self {
        Self {
            rules: HashMap::default(),
            folded: None,
            exact: None,
            regex: None,
        }
    }
}

impl<T: Serialize> Serialize for PathRules<T> {
    /// One map keyed by prefix; a rule that ignores case is keyed `-i <prefix>`, as written
    /// in the annotation.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.len()))?;
        for rule in self.rules.values() {
            m.serialize_entry(&*rule.prefix, rule)?;
        }
        for rule in self.folded.iter().flat_map(|f| f.values()) {
            m.serialize_entry(&format!("-i {}", rule.prefix), rule)?;
        }
        for rule in self.exact.iter().flat_map(|f| f.values()) {
            m.serialize_entry(&format!("= {}", rule.prefix), rule)?;
        }
        for rule in self.regex.iter().flat_map(|r| r.iter()) {
            // nginx's modifiers: `~*` ignores case and matches from the start only.
            let modifier = match rule.regex.as_deref().map(Pattern::flavor) {
                Some(Flavor::Location) => "~*",
                _ => "~",
            };
            m.serialize_entry(&format!("{modifier} {}", rule.prefix), rule)?;
        }
        m.end()
    }
}

impl<T> PathRules<T> {
    /// Adds a rule; one of the same kind and prefix (or pattern) is replaced. Regular
    /// expressions are tried in the order of their first insertion.
    pub fn insert(&mut self, mut rule: PathRule<T>) {
        if rule.regex.is_some() {
            let list = self.regex.get_or_insert_with(Box::default);
            match list.iter_mut().find(|r| r.prefix == rule.prefix) {
                Some(r) => *r = rule,
                None => list.push(rule),
            }
        } else if rule.exact {
            self.exact
                .get_or_insert_with(Box::default)
                .insert(rule.prefix.clone(), rule);
        } else if rule.ignore_case {
            rule.prefix = rule.prefix.to_ascii_lowercase().into();
            self.folded
                .get_or_insert_with(Box::default)
                .insert(rule.prefix.clone(), rule);
        } else {
            self.rules.insert(rule.prefix.clone(), rule);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
            && self.folded.is_none()
            && self.exact.is_none()
            && self.regex.is_none()
    }

    pub fn len(&self) -> usize {
        self.rules.len()
            + self.folded.as_ref().map_or(0, |f| f.len())
            + self.exact.as_ref().map_or(0, |f| f.len())
            + self.regex.as_ref().map_or(0, |r| r.len())
    }

    pub fn iter(&self) -> impl Iterator<Item = &PathRule<T>> {
        self.rules
            .values()
            .chain(self.folded.iter().flat_map(|f| f.values()))
            .chain(self.exact.iter().flat_map(|f| f.values()))
            .chain(self.regex.iter().flat_map(|r| r.iter()))
    }

    /// The rule with the longest prefix that matches `path` on a segment boundary.
    ///
    /// Candidates are every prefix of `path` that ends just before or just after a `/`, and the
    /// whole path; they are probed from the longest down, so the first hit is the best one. At
    /// each length a case-sensitive rule is probed before one that ignores case. A whole-path
    /// rule (`exact`) for `path` beats them all. Regular-expression rules come last, in their
    /// order.
    #[inline]
    pub fn lookup(&self, path: &str) -> Option<&PathRule<T>> {
        if let Some(rule) = self.exact.as_deref().and_then(|e| e.get(path)) {
            return Some(rule);
        }
        self.lookup_prefix(path).or_else(|| {
            self.regex
                .as_deref()?
                .iter()
                .find(|r| r.regex.as_deref().is_some_and(|p| p.is_match(path)))
        })
    }

    /// The longest prefix rule for `path`, case-sensitive or folded.
    #[inline]
    fn lookup_prefix(&self, path: &str) -> Option<&PathRule<T>> {
        let Some(folded) = self.folded.as_deref() else {
            // The common case: no rule ignores case.
            if self.rules.is_empty() {
                return None;
            }
            return candidates(path, |end| self.rules.get(&path[..end]));
        };
        // The folded path; no prefix is longer than MAX_PREFIX_LEN, so a longer candidate
        // cannot match one and is not folded.
        let mut buf = [0u8; MAX_PREFIX_LEN + 1];
        let n = path.len().min(buf.len());
        for (dst, src) in buf[..n].iter_mut().zip(path.as_bytes()) {
            *dst = src.to_ascii_lowercase();
        }
        let lower = &buf[..n];
        candidates(path, |end| {
            if let Some(rule) = self.rules.get(&path[..end]) {
                return Some(rule);
            }
            // ASCII folding keeps UTF-8 valid; `end` is at a '/' or the end of `path`.
            let key = std::str::from_utf8(lower.get(..end)?).ok()?;
            folded.get(key)
        })
    }
}

impl<T> PathRules<T> {
    /// `lookup` over the rules that `accept` takes: the whole-path rule, then the longest
    /// prefix, then the regular expressions in their order, skipping a rule `accept` refuses
    /// (a Gateway route whose conditions the request does not meet gives way to a shorter
    /// prefix, then to a regular expression). A regular expression is tried only when no
    /// whole-path or prefix rule took the request. Case-folded rules are not consulted (no
    /// Gateway route ignores case).
    #[inline]
    pub fn lookup_where<'a>(
        &'a self,
        path: &str,
        mut accept: impl FnMut(&'a PathRule<T>) -> bool,
    ) -> Option<&'a PathRule<T>> {
        if let Some(rule) = self.exact.as_deref().and_then(|e| e.get(path))
            && accept(rule)
        {
            return Some(rule);
        }
        if !self.rules.is_empty()
            && let Some(rule) = candidates(path, |end| {
                self.rules.get(&path[..end]).filter(|r| accept(r))
            })
        {
            return Some(rule);
        }
        self.regex
            .as_deref()?
            .iter()
            .find(|r| r.regex.as_deref().is_some_and(|p| p.is_match(path)) && accept(r))
    }
}

/// Probes the prefixes of `path` that a rule may match, longest first: the whole path, then
/// each end just after and just before a `/` ("/a/b/c": "/a/b/c", "/a/b/", "/a/b", "/a/",
/// "/a", "/"). The first hit is the best.
#[inline]
fn candidates<'r, R>(path: &str, mut probe: impl FnMut(usize) -> Option<&'r R>) -> Option<&'r R> {
    if let Some(rule) = probe(path.len()) {
        return Some(rule);
    }
    let bytes = path.as_bytes();
    let mut end = bytes.len();
    while let Some(slash) = bytes[..end].iter().rposition(|&b| b == b'/') {
        if slash + 1 < bytes.len()
            && let Some(rule) = probe(slash + 1)
        {
            return Some(rule);
        }
        if slash > 0
            && let Some(rule) = probe(slash)
        {
            return Some(rule);
        }
        end = slash;
    }
    None
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
    let strip = Strip::of(prefix);
    let (slash, rest) = strip.apply(path_and_query);
    let mut out = String::with_capacity(slash.len() + rest.len());
    out.push_str(slash);
    out.push_str(rest);
    out
}

/// A prefix to remove, or to replace (an Ingress's rewrite target), reduced to what that
/// needs, so that the data plane can write the new target in two pieces without building it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Strip {
    len: usize,
    /// Replace the whole path (a Gateway `ReplaceFullPath`), keeping the query.
    full: bool,
    /// With `full`: `with` is the whole target, the query too (an ingress-nginx rewrite
    /// target that has a query of its own).
    target: bool,
    keep_slash: bool,
    /// What the prefix becomes; `None`: nothing (a path route's strip).
    with: Option<Arc<str>>,
}

impl Strip {
    pub fn of(prefix: &str) -> Strip {
        Strip {
            len: prefix.len(),
            full: false,
            target: false,
            keep_slash: prefix.ends_with('/'),
            with: None,
        }
    }

    /// Replaces `prefix` with `with` (`/new`: `/old/a?q` -> `/new/a?q`; `/`: a strip).
    pub fn replace(prefix: &str, with: Arc<str>) -> Strip {
        // A trailing slash of the prefix is left in the rest, so that the rest always starts
        // with '/' (or is empty, or the query) and the head can be joined to it.
        Strip {
            len: prefix.trim_end_matches('/').len(),
            full: false,
            target: false,
            keep_slash: false,
            with: Some(with),
        }
    }

    /// Replaces the whole path with `with`, keeping the query (`/new`: `/a/b?q` -> `/new?q`).
    pub fn full(with: Arc<str>) -> Strip {
        Strip {
            len: 0,
            full: true,
            target: false,
            keep_slash: false,
            with: Some(with),
        }
    }

    /// Replaces the whole target, path and query, with `with`.
    pub fn target(with: Arc<str>) -> Strip {
        Strip {
            target: true,
            ..Strip::full(with)
        }
    }

    /// The new target as a head (`"/"`, nothing, or the replacement) and the rest of
    /// `path_and_query`.
    pub fn apply<'s, 'p>(&'s self, path_and_query: &'p str) -> (&'s str, &'p str) {
        if self.full {
            let query = match path_and_query.find('?') {
                Some(q) if !self.target => &path_and_query[q..],
                _ => "",
            };
            return (self.with.as_deref().unwrap_or("/"), query);
        }
        let rest = path_and_query.get(self.len..).unwrap_or("");
        if let Some(with) = self.with.as_deref() {
            // One slash between the two, never two ("/new/" + "/a").
            return if rest.starts_with('/') {
                (with.strip_suffix('/').unwrap_or(with), rest)
            } else {
                (with, rest)
            };
        }
        if rest.starts_with('/') {
            ("", rest)
        } else if self.keep_slash || !rest.is_empty() {
            ("/", rest)
        } else {
            ("/", "")
        }
    }
}

/// All routes of one frontend: exact hosts, wildcard hosts, and host-less rules. `L` holds
/// one host level's rules: by value (`Router`), or shared between tables (`SharedRouter`,
/// the Gateway routes, whose builds keep the host levels a change did not touch).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HostRouter<L> {
    /// Lower-case host -> its rules.
    pub exact: HashMap<Box<str>, L>,
    /// `*.example.com` stored as the suffix `.example.com`, longest first.
    pub wildcard: Vec<(Box<str>, L)>,
    /// Ingress wildcards, which match exactly one label (`*.example.com` takes
    /// `a.example.com`, not `a.b.example.com`): keyed by the suffix `.example.com`, so a host
    /// is one probe with everything after its first label.
    pub one_label: HashMap<Box<str>, L>,
    /// Rules that apply to any host.
    pub any_host: L,
}

/// A router whose host levels are held by value.
pub type Router<T> = HostRouter<PathRules<T>>;

/// A router whose host levels are shared: an unchanged level is the previous table's.
pub type SharedRouter<T> = HostRouter<Arc<PathRules<T>>>;

/// How a router holds one host level's rules.
pub trait HostLevel {
    type Target;
    fn rules(&self) -> &PathRules<Self::Target>;
}

impl<T> HostLevel for PathRules<T> {
    type Target = T;
    #[inline]
    fn rules(&self) -> &PathRules<T> {
        self
    }
}

impl<T> HostLevel for Arc<PathRules<T>> {
    type Target = T;
    #[inline]
    fn rules(&self) -> &PathRules<T> {
        self
    }
}

impl<L: HostLevel> HostRouter<L> {
    /// Sorts the wildcard list into precedence order; call once after building.
    pub fn finish(&mut self) {
        self.wildcard
            .sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
    }

    /// Every host level's rules, in no particular order.
    pub fn levels(&self) -> impl Iterator<Item = &PathRules<L::Target>> {
        self.exact
            .values()
            .chain(self.wildcard.iter().map(|(_, l)| l))
            .chain(self.one_label.values())
            .chain(std::iter::once(&self.any_host))
            .map(HostLevel::rules)
    }

    pub fn is_empty(&self) -> bool {
        self.exact.is_empty()
            && self.wildcard.is_empty()
            && self.one_label.is_empty()
            && self.any_host.rules().is_empty()
    }

    /// Finds the route for a request. `host` is the raw Host header or `:authority` (any case,
    /// optional port); `path` is the path without the query.
    #[inline]
    pub fn lookup(&self, host: Option<&[u8]>, path: &str) -> Option<&PathRule<L::Target>> {
        self.walk(host, |_, rules| rules.lookup(path))
    }

    /// Visits the host levels that apply to `host`, most specific first, until `visit`
    /// returns `Some`: the exact host with its port, the exact host, the one-label wildcard of
    /// its parent (the longest suffix a wildcard can have), the wildcard suffixes (longest
    /// first; a suffix with a port is compared with the host and its port), then the
    /// host-less rules. `lookup` is this walk; `/explain` describes the same walk.
    #[inline]
    pub fn walk<'r, R>(
        &'r self,
        host: Option<&[u8]>,
        mut visit: impl FnMut(Level<'r>, &'r PathRules<L::Target>) -> Option<R>,
    ) -> Option<R> {
        let mut buf = [0u8; MAX_HOST_LEN];
        if let Some(host) = host.and_then(|h| normalize_host(h, &mut buf)) {
            let (full, name) = (host.with_port, host.name());
            let has_port = full.len() != name.len();
            if has_port
                && let Some((key, rules)) = self.exact.get_key_value(full)
                && let Some(r) = visit(Level::ExactHost(key), rules.rules())
            {
                return Some(r);
            }
            if let Some((key, rules)) = self.exact.get_key_value(name)
                && let Some(r) = visit(Level::ExactHost(key), rules.rules())
            {
                return Some(r);
            }
            if !self.one_label.is_empty()
                && let Some(dot) = name.find('.')
                && let Some((key, rules)) = self.one_label.get_key_value(&name[dot..])
                && let Some(r) = visit(Level::OneLabelHost(key), rules.rules())
            {
                return Some(r);
            }
            for (suffix, rules) in &self.wildcard {
                let candidate = if has_port && suffix.contains(':') {
                    full
                } else {
                    name
                };
                if candidate.len() > suffix.len()
                    && candidate.ends_with(&**suffix)
                    && let Some(r) = visit(Level::WildcardHost(suffix), rules.rules())
                {
                    return Some(r);
                }
            }
        }
        visit(Level::AnyHost, self.any_host.rules())
    }
}

/// A host level of a lookup (see [`Router::walk`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level<'r> {
    /// An exact host, `name` or `name:port`.
    ExactHost(&'r str),
    /// A wildcard suffix with its leading dot (`.example.com`, `.example.com:8080`).
    WildcardHost(&'r str),
    /// An Ingress wildcard's suffix with its leading dot: one label before it.
    OneLabelHost(&'r str),
    AnyHost,
}

/// A Host value normalised for matching: lower case, without a trailing dot, with its port
/// when it had one (`shop.example.com:8080`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NormalHost<'b> {
    pub with_port: &'b str,
    name_len: usize,
}

impl<'b> NormalHost<'b> {
    /// The name alone (`shop.example.com`).
    pub fn name(&self) -> &'b str {
        &self.with_port[..self.name_len]
    }
}

/// Lower-cases `raw` into `buf`, dropping a trailing dot and keeping a port (digits only).
/// `None` for a host that is empty, too long, not valid UTF-8 or with a bad port; such a
/// request is matched by host-less rules only.
#[inline]
pub fn normalize_host<'b>(raw: &[u8], buf: &'b mut [u8; MAX_HOST_LEN]) -> Option<NormalHost<'b>> {
    let (host, port) = if raw.first() == Some(&b'[') {
        // IPv6 literal: keep the brackets; what follows `]` may be `:port`.
        let close = raw.iter().position(|&b| b == b']')?;
        let port = match &raw[close + 1..] {
            [] => None,
            [b':', port @ ..] => Some(port),
            _ => return None,
        };
        (&raw[..=close], port)
    } else {
        match raw.iter().rposition(|&b| b == b':') {
            Some(colon) => (&raw[..colon], Some(&raw[colon + 1..])),
            None => (raw, None),
        }
    };
    let host = host.strip_suffix(b".").unwrap_or(host);
    // An empty port (`host:`) is no port, as URI authority rules say; `:080` is port 80.
    let port = match port.filter(|p| !p.is_empty()) {
        None => None,
        Some(p) => Some(parse_port(p)?),
    };
    let mut digits = [0u8; 5];
    let digits = port.map_or(&[][..], |p| port_digits(p, &mut digits));
    let port_len = if port.is_some() { 1 + digits.len() } else { 0 };
    if host.is_empty() || host.len() + port_len > MAX_HOST_LEN {
        return None;
    }
    for (dst, src) in buf.iter_mut().zip(host) {
        *dst = src.to_ascii_lowercase();
    }
    if port.is_some() {
        buf[host.len()] = b':';
        buf[host.len() + 1..host.len() + port_len].copy_from_slice(digits);
    }
    let with_port = std::str::from_utf8(&buf[..host.len() + port_len]).ok()?;
    Some(NormalHost {
        with_port,
        name_len: host.len(),
    })
}

/// A port of 1 to 5 digits, at most 65535.
fn parse_port(p: &[u8]) -> Option<u16> {
    if p.is_empty() || p.len() > 5 || !p.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = p.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'));
    u16::try_from(n).ok()
}

/// `port` in decimal, without leading zeros, written into `buf` (no allocation: entry names
/// and Host keys are built with it on hot paths).
pub fn port_digits(port: u16, buf: &mut [u8; 5]) -> &[u8] {
    let mut at = buf.len();
    let mut n = port;
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[at..]
}

/// Checks a host name from configuration: DNS labels of `[a-z0-9-]` (any case), optionally
/// led by `*.` and followed by `:port`; returns the lower-cased form, or why it is rejected.
pub fn validate_host(value: &str) -> Result<HostPattern, &'static str> {
    let value = value.trim();
    let (value, port) = match value.rsplit_once(':') {
        Some((name, port)) => {
            let port = parse_port(port.as_bytes())
                .filter(|&p| p > 0)
                .ok_or("the port after ':' must be a number from 1 to 65535")?;
            (name, Some(port))
        }
        None => (value, None),
    };
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
                "host name may only hold letters, digits, '-' and '.' (and a leading '*.', a trailing ':port')",
            );
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err("host name label starts or ends with '-'");
        }
    }
    let mut key = name.to_ascii_lowercase();
    if let Some(port) = port {
        key.push(':');
        key.push_str(&port.to_string());
    }
    Ok(if wildcard {
        HostPattern::Wildcard(format!(".{key}"))
    } else {
        HostPattern::Exact(key)
    })
}

/// A validated host rule, as the router keys it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HostPattern {
    /// `name` or `name:port`, lower case.
    Exact(String),
    /// The suffix with its leading dot, e.g. `.example.com` for `*.example.com` (and
    /// `.example.com:8080` for `*.example.com:8080`).
    Wildcard(String),
    /// An Ingress wildcard: exactly one label before the suffix (`.example.com`), no port.
    OneLabel(String),
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
                ignore_case: false,
                exact: false,
                regex: None,
                policy: None,
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
        let n = |raw: &[u8]| {
            let mut buf = [0u8; MAX_HOST_LEN];
            normalize_host(raw, &mut buf).map(|h| (h.with_port.to_string(), h.name().to_string()))
        };
        let both = |a: &str, b: &str| Some((a.to_string(), b.to_string()));
        assert_eq!(
            n(b"FOO.Example.com:8080"),
            both("foo.example.com:8080", "foo.example.com")
        );
        assert_eq!(
            n(b"foo.example.com."),
            both("foo.example.com", "foo.example.com")
        );
        assert_eq!(
            n(b"foo.example.com.:080"),
            both("foo.example.com:80", "foo.example.com")
        );
        assert_eq!(
            n(b"foo.example.com:"),
            both("foo.example.com", "foo.example.com")
        );
        assert_eq!(n(b"[::1]:80"), both("[::1]:80", "[::1]"));
        assert_eq!(n(b"[::1]"), both("[::1]", "[::1]"));
        assert_eq!(n(b""), None);
        assert_eq!(n(&[b'a'; 300]), None);
        assert_eq!(n(b"a.com:99999"), None, "a port above 65535");
        assert_eq!(n(b"a.com:8o"), None, "a port that is not a number");
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
    fn a_host_rule_with_a_port_matches_only_that_port() {
        let mut r = Router::default();
        r.exact
            .insert("shop.example.com:8080".into(), rules(&[("/", 1)]));
        r.exact
            .insert("shop.example.com".into(), rules(&[("/", 2)]));
        r.exact
            .insert("only.example.com:81".into(), rules(&[("/", 3)]));
        r.wildcard
            .push((".example.com:8080".into(), rules(&[("/", 4)])));
        r.wildcard.push((".example.com".into(), rules(&[("/", 5)])));
        r.finish();
        let t = |h: &str| r.lookup(Some(h.as_bytes()), "/x").map(|r| r.target);
        assert_eq!(t("Shop.Example.com:8080"), Some(1), "port rule first");
        assert_eq!(
            t("shop.example.com:80"),
            Some(2),
            "port-less rule, any port"
        );
        assert_eq!(t("shop.example.com"), Some(2));
        assert_eq!(t("only.example.com:81"), Some(3));
        assert_eq!(
            t("only.example.com"),
            Some(5),
            "a Host without a port never matches a rule with one"
        );
        assert_eq!(t("a.example.com:8080"), Some(4));
        assert_eq!(t("a.example.com:9090"), Some(5));
        assert_eq!(t("a.example.com"), Some(5));
    }

    #[test]
    fn a_prefix_may_ignore_case() {
        let mut r = PathRules::default();
        r.insert(PathRule {
            prefix: "/Test".into(),
            strip: false,
            ignore_case: true,
            exact: false,
            regex: None,
            policy: None,
            target: 1,
        });
        r.insert(PathRule {
            prefix: "/test/exact".into(),
            strip: false,
            ignore_case: false,
            exact: false,
            regex: None,
            policy: None,
            target: 2,
        });
        r.insert(PathRule {
            prefix: "/other".into(),
            strip: false,
            ignore_case: true,
            exact: false,
            regex: None,
            policy: None,
            target: 3,
        });
        r.insert(PathRule {
            prefix: "/other".into(),
            strip: false,
            ignore_case: false,
            exact: false,
            regex: None,
            policy: None,
            target: 4,
        });
        assert_eq!(hit(&r, "/TEST/a"), Some(1));
        assert_eq!(hit(&r, "/test"), Some(1));
        assert_eq!(
            hit(&r, "/tEsT/exact"),
            Some(1),
            "the sensitive rule needs its case"
        );
        assert_eq!(hit(&r, "/test/exact/x"), Some(2), "longer prefix wins");
        assert_eq!(hit(&r, "/testing"), None, "still a segment boundary");
        assert_eq!(hit(&r, "/other/x"), Some(4), "sensitive before folded");
        assert_eq!(hit(&r, "/OTHER/x"), Some(3));
        let long = format!("/TEST/{}", "a".repeat(3000));
        assert_eq!(hit(&r, &long), Some(1), "a long path is folded far enough");
        assert_eq!(r.len(), 4);
        let json = serde_json::to_value(&r).unwrap();
        assert!(json.get("-i /test").is_some(), "{json}");
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
        assert_eq!(
            validate_host("Shop.Example.com:08080"),
            Ok(HostPattern::Exact("shop.example.com:8080".into()))
        );
        assert_eq!(
            validate_host("*.example.com:81"),
            Ok(HostPattern::Wildcard(".example.com:81".into()))
        );
        assert!(validate_host("a.com:0").is_err());
        assert!(validate_host("a.com:65536").is_err());
        assert!(validate_host("a.com:").is_err());
        assert!(validate_host("a.com:8080:1").is_err());
    }

    #[test]
    fn prefix_validation() {
        assert!(validate_prefix("/api").is_ok());
        assert!(validate_prefix("api").is_err());
        assert!(validate_prefix("/a b").is_err());
        assert!(validate_prefix("/a?b").is_err());
        assert!(validate_prefix("/a\n").is_err());
    }

    #[test]
    fn regular_expressions_come_after_exact_and_prefix_rules_in_order() {
        let re = |source: &str, target: u32| PathRule {
            prefix: source.into(),
            strip: false,
            ignore_case: false,
            exact: false,
            regex: Some(Box::new(Pattern::new(source).unwrap())),
            policy: None,
            target,
        };
        let mut r = rules(&[("/a", 1)]);
        r.insert(re("/b/[0-9]+", 2));
        r.insert(re("/.*", 3));
        // Re-inserting a pattern replaces its rule in place.
        r.insert(re("/b/[0-9]+", 4));
        assert_eq!(r.len(), 3);
        assert_eq!(r.iter().filter(|x| x.regex.is_some()).count(), 2);
        let hit = |path: &str| r.lookup_where(path, |_| true).map(|x| x.target);
        assert_eq!(hit("/a/1"), Some(1));
        assert_eq!(hit("/b/12"), Some(4));
        assert_eq!(hit("/b/x"), Some(3));
        // A refused rule gives way to the next pattern.
        assert_eq!(
            r.lookup_where("/b/12", |x| x.target != 4).map(|x| x.target),
            Some(3)
        );
        // Plain `lookup` (Services, Ingresses) tries them the same way.
        assert_eq!(r.lookup("/b/12").map(|x| x.target), Some(4));
        assert_eq!(r.lookup("/a/1").map(|x| x.target), Some(1));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["~ /b/[0-9]+"]["regex"], "/b/[0-9]+");
        // Only patterns: no prefix map to probe, still found.
        let mut only = PathRules::default();
        only.insert(re("/x+", 9));
        assert!(!only.is_empty());
        assert_eq!(
            only.lookup_where("/xxx", |_| true).map(|x| x.target),
            Some(9)
        );
    }

    /// ingress-nginx's path-priority example: the longest location first, case ignored,
    /// a location matching the start of the path.
    #[test]
    fn nginx_locations_are_tried_in_order_from_the_start_of_the_path() {
        let mut r = PathRules::default();
        for (source, target) in [("/foo/bar/(.+)", 3), ("/foo/bar/", 2), ("/foo/bar", 1)] {
            r.insert(PathRule {
                prefix: source.into(),
                strip: false,
                ignore_case: false,
                exact: false,
                regex: Some(Box::new(Pattern::location(source).unwrap())),
                policy: None,
                target,
            });
        }
        let hit = |path: &str| r.lookup(path).map(|x| x.target);
        assert_eq!(hit("/foo/bar/1"), Some(3));
        assert_eq!(hit("/foo/bar/"), Some(2));
        assert_eq!(hit("/foo/bar"), Some(1));
        assert_eq!(hit("/FOO/Barn"), Some(1));
        assert_eq!(hit("/foo"), None);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["~* /foo/bar/(.+)"]["regex"], "/foo/bar/(.+)");
    }

    #[test]
    fn exact_rules_match_the_whole_path_and_beat_prefixes() {
        let mut r = rules(&[("/foo", 1)]);
        r.insert(PathRule {
            prefix: "/foo".into(),
            strip: false,
            ignore_case: false,
            exact: true,
            regex: None,
            policy: None,
            target: 2,
        });
        assert_eq!(hit(&r, "/foo"), Some(2));
        assert_eq!(hit(&r, "/foo/"), Some(1));
        assert_eq!(hit(&r, "/foo/bar"), Some(1));
        assert_eq!(hit(&r, "/FOO"), None);
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn one_label_wildcards_take_exactly_one_label() {
        let mut router: Router<u32> = Router::default();
        router
            .one_label
            .insert(".example.com".into(), rules(&[("/", 1)]));
        router
            .wildcard
            .push((".example.com".into(), rules(&[("/", 2)])));
        router
            .exact
            .insert("a.example.com".into(), rules(&[("/", 3)]));
        router.finish();
        let at = |h: &str| router.lookup(Some(h.as_bytes()), "/").map(|r| r.target);
        assert_eq!(at("a.example.com"), Some(3), "exact first");
        assert_eq!(
            at("b.example.com"),
            Some(1),
            "one label beats the annotation wildcard"
        );
        assert_eq!(at("B.Example.COM.:80"), Some(1));
        assert_eq!(
            at("c.b.example.com"),
            Some(2),
            "deeper: only the annotation wildcard"
        );
        assert_eq!(at("example.com"), None);
    }

    #[test]
    fn a_replacement_takes_the_prefix_place_with_one_slash() {
        let with = |p: &str, w: &str, pq: &str| {
            let s = Strip::replace(p, w.into());
            let (head, rest) = s.apply(pq);
            format!("{head}{rest}")
        };
        assert_eq!(with("/app", "/", "/app/x?q"), "/x?q");
        assert_eq!(with("/app", "/", "/app"), "/");
        assert_eq!(with("/app", "/", "/app?q"), "/?q");
        assert_eq!(with("/app", "/v2", "/app/x"), "/v2/x");
        assert_eq!(with("/app", "/v2/", "/app/x"), "/v2/x");
        assert_eq!(with("/app", "/v2/", "/app"), "/v2/");
        assert_eq!(with("/", "/v2", "/a/b"), "/v2/a/b");
        assert_eq!(with("/", "/", "/a/b"), "/a/b");
        assert_eq!(with("/app/", "/v2", "/app/x"), "/v2/x");
    }
}

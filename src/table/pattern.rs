//! A regular expression as the table holds it: the Gateway API's `RegularExpression` path,
//! header and query-parameter matches, and ingress-nginx's regular-expression paths. The
//! dialect is the `regex` crate's (RE2-like: no look-around, no backreferences; ingress-nginx
//! asks for RE2 syntax too), so a match takes time linear in the value, whatever the pattern.
//! A Gateway pattern matches the whole value, never a part of it (as Envoy's `safe_regex`
//! does); an ingress-nginx path is nginx's `location ~* "^path"`: from the start of the path,
//! any case, the rest of the path free ([`Flavor`]). Compiled when the table is built, with its compiled form and its lazy DFA's cache
//! bounded ([`Pattern::SIZE_LIMIT`]) so that one hostile object cannot take the process's
//! memory; equal when the source is (two tables with the same patterns compare equal).
//! A build takes the previous table's compiled patterns by source ([`Patterns`]) rather
//! than compile them again.
//!
//! A search borrows a scratch cache from the `regex` crate's pool: the first search of a
//! thread builds it (an allocation), later ones reuse it. The pool only ever try-locks: under
//! contention it builds a throwaway cache rather than wait.
//! No Kubernetes, Pingora or tokio.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde::{Serialize, Serializer};

/// A compiled, whole-value regular expression and the source it came from. A clone shares
/// the compiled form (and its pool of search caches): a build reuses the previous table's
/// patterns rather than compile them again ([`Patterns`]).
#[derive(Clone)]
pub struct Pattern(Arc<Compiled>);

struct Compiled {
    source: Box<str>,
    flavor: Flavor,
    /// The limit it was compiled with; one compiled with another is not reused.
    size_limit: usize,
    regex: regex::Regex,
}

/// Why a pattern cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("is not a valid regular expression: {0}")]
    Syntax(String),
    #[error("compiles to more than {} bytes", Pattern::SIZE_LIMIT)]
    TooLarge,
}

/// How a pattern is anchored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flavor {
    /// The whole value, case as written (the Gateway API's matches).
    Whole,
    /// nginx's `location ~* "^path"` (ingress-nginx's `use-regex`): a match from the start
    /// of the path, ignoring case; what follows it is free.
    Location,
    /// A match anywhere in the value, case as written (ingress-nginx's
    /// `canary-by-header-pattern`, which `ngx.re.match` searches for).
    Search,
}

/// The groups of one match, for `$1`..`$9` in a rewrite.
pub struct Groups<'v>(regex::Captures<'v>);

impl<'v> Groups<'v> {
    /// Group `n` (0: the whole match); empty when it took no part in the match.
    pub fn get(&self, n: usize) -> &'v str {
        self.0.get(n).map_or("", |m| m.as_str())
    }
}

impl Pattern {
    /// The most a pattern may take once compiled, in bytes, and the most its lazy DFA's
    /// cache (one per searching thread) may grow to. The patterns routes use fit (the tests
    /// compile a few); one like `\w{50}` (a Unicode class repeated) does not.
    pub const SIZE_LIMIT: usize = 64 * 1024;

    /// Compiles `source` to match whole values.
    pub fn new(source: &str) -> Result<Pattern, PatternError> {
        Self::with_limit(source, Flavor::Whole, Self::SIZE_LIMIT)
    }

    /// Compiles `source` as nginx's `location ~* "^source"`.
    pub fn location(source: &str) -> Result<Pattern, PatternError> {
        Self::with_limit(source, Flavor::Location, Self::SIZE_LIMIT)
    }

    /// Compiles `source` to be searched for anywhere in a value.
    pub fn search(source: &str) -> Result<Pattern, PatternError> {
        Self::with_limit(source, Flavor::Search, Self::SIZE_LIMIT)
    }

    fn with_limit(
        source: &str,
        flavor: Flavor,
        size_limit: usize,
    ) -> Result<Pattern, PatternError> {
        let build = |p: &str| {
            regex::RegexBuilder::new(p)
                .size_limit(size_limit)
                .dfa_size_limit(size_limit)
                .build()
                .map_err(|e| match e {
                    regex::Error::CompiledTooBig(_) => PatternError::TooLarge,
                    other => PatternError::Syntax(compact(&other.to_string())),
                })
        };
        // The pattern alone first: a valid pattern is balanced, so the anchored form below
        // cannot be escaped (`a)|(b` would otherwise anchor only one side).
        build(source)?;
        let regex = match flavor {
            Flavor::Whole => build(&format!(r"\A(?:{source})\z"))?,
            // Leftmost-first from the start, as PCRE's backtracking finds it: the groups a
            // rewrite reads are the ones nginx would have.
            Flavor::Location => build(&format!(r"\A(?i:{source})"))?,
            Flavor::Search => build(source)?,
        };
        Ok(Pattern(Arc::new(Compiled {
            source: source.into(),
            flavor,
            size_limit,
            regex,
        })))
    }

    /// Whether both are one compiled pattern (a clone, or reused by a later build).
    pub fn shares(&self, other: &Pattern) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Whether `value` matches (the whole of it, or its start for a `Location`).
    #[inline]
    pub fn is_match(&self, value: &str) -> bool {
        self.0.regex.is_match(value)
    }

    /// The groups of `value`'s match, if it matches.
    pub fn groups<'v>(&self, value: &'v str) -> Option<Groups<'v>> {
        self.0.regex.captures(value).map(Groups)
    }

    /// How it is anchored.
    pub fn flavor(&self) -> Flavor {
        self.0.flavor
    }

    /// Whether the whole of `value` matches; bytes that are not UTF-8 never do.
    #[inline]
    pub fn is_match_bytes(&self, value: &[u8]) -> bool {
        std::str::from_utf8(value).is_ok_and(|v| self.is_match(v))
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.0.source
    }
}

/// The patterns of one build, by source: those of the previous table, reused as they are
/// (same source, same limit: the same compiled form), and those compiled so far. A build
/// with 10,000 routes compiles only the patterns that are new. One that does not compile is
/// not in any table: translate's memo keeps those by source, so that no build tries one again.
#[derive(Default)]
pub struct Patterns {
    /// By flavor (`Flavor as usize`), then source.
    known: [HashMap<Box<str>, Pattern>; 3],
}

impl Patterns {
    /// Starts from `previous` (a table's patterns, in any order, repeats allowed).
    pub fn from_previous<'p>(previous: impl IntoIterator<Item = &'p Pattern>) -> Self {
        let mut known: [HashMap<Box<str>, Pattern>; 3] = Default::default();
        for p in previous {
            let known = &mut known[p.0.flavor as usize];
            if p.0.size_limit == Pattern::SIZE_LIMIT && !known.contains_key(&*p.0.source) {
                known.insert(p.0.source.clone(), p.clone());
            }
        }
        Patterns { known }
    }

    /// `source` compiled to match whole values: the known pattern when there is one.
    pub fn get(&mut self, source: &str) -> Result<Pattern, PatternError> {
        self.get_as(source, Flavor::Whole)
    }

    /// `source` compiled as `flavor` says: the known pattern when there is one.
    pub fn get_as(&mut self, source: &str, flavor: Flavor) -> Result<Pattern, PatternError> {
        let known = &mut self.known[flavor as usize];
        if let Some(p) = known.get(source) {
            return Ok(p.clone());
        }
        let p = Pattern::with_limit(source, flavor, Pattern::SIZE_LIMIT)?;
        known.insert(source.into(), p.clone());
        Ok(p)
    }
}

/// The `regex` crate's message on one line (it points at the error over several).
fn compact(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.0.flavor == other.0.flavor && self.0.source == other.0.source
    }
}

impl Eq for Pattern {}

impl fmt::Debug for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pattern({:?})", self.0.source)
    }
}

impl Serialize for Pattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_matches_the_whole_value() {
        let p = Pattern::new("/v[0-9]+/.*").unwrap();
        assert!(p.is_match("/v2/users"));
        assert!(p.is_match("/v10/"));
        assert!(!p.is_match("/api/v2/users"));
        assert!(!p.is_match("/v2"));
        // An alternation is anchored as a whole.
        let p = Pattern::new("a|ab").unwrap();
        assert!(p.is_match("ab"));
        assert!(!p.is_match("abc"));
        // A pattern cannot break out of the anchoring group.
        assert!(matches!(
            Pattern::new("a)|(b"),
            Err(PatternError::Syntax(_))
        ));
        let p = Pattern::new("^x$").unwrap();
        assert!(p.is_match("x"));
        assert!(!p.is_match("x\n"));
        assert!(!p.is_match_bytes(b"\xff"));
        assert!(
            Pattern::new("\\x{ff}")
                .unwrap()
                .is_match_bytes("\u{ff}".as_bytes())
        );
    }

    #[test]
    fn invalid_and_oversized_patterns_are_refused() {
        let Err(PatternError::Syntax(why)) = Pattern::new("/(unclosed") else {
            panic!("accepted");
        };
        assert!(!why.contains('\n'), "{why}");
        assert!(matches!(
            Pattern::new("(?<=a)b"),
            Err(PatternError::Syntax(_))
        ));
        assert_eq!(Pattern::new(r"\w{50}").err(), Some(PatternError::TooLarge));
        assert_eq!(
            Pattern::new("a{100000}").err(),
            Some(PatternError::TooLarge)
        );
        // Typical route patterns fit.
        for p in [
            r"/api/v[0-9]+/users/[^/]+",
            r"/static/.*\.(css|js|png)",
            r"(?i)bearer [a-z0-9._-]+",
            r"\d{1,5}",
            r"[\w-]+",
            r"[a-zA-Z0-9_]{50}",
        ] {
            Pattern::new(p).unwrap();
        }
    }

    #[test]
    fn known_patterns_are_reused_not_compiled_again() {
        let old = Pattern::new("/a.*").unwrap();
        let mut known = Patterns::from_previous([&old, &old]);
        let again = known.get("/a.*").unwrap();
        assert!(again.shares(&old));
        // New ones are compiled once per build, errors are not kept.
        let b = known.get("/b.*").unwrap();
        assert!(!b.shares(&old));
        assert!(known.get("/b.*").unwrap().shares(&b));
        assert!(known.get("/(unclosed").is_err());
        // One compiled with another limit is not taken for this one.
        let larger = Pattern::with_limit("/a.*", Flavor::Whole, 2 * Pattern::SIZE_LIMIT).unwrap();
        let mut other = Patterns::from_previous([&larger]);
        assert!(!other.get("/a.*").unwrap().shares(&larger));
        // A fresh compile of the same source is equal, not shared.
        assert_eq!(Pattern::new("/a.*").unwrap(), old);
        assert!(!Pattern::new("/a.*").unwrap().shares(&old));
    }

    /// ingress-nginx's canonical rewrite: `location ~* "^/something(/|$)(.*)"`.
    #[test]
    fn a_location_matches_from_the_start_in_any_case_and_keeps_its_groups() {
        let p = Pattern::location("/something(/|$)(.*)").unwrap();
        for (path, two) in [
            ("/something", ""),
            ("/something/", ""),
            ("/something/new", "new"),
            ("/SomeThing/a/b", "a/b"),
        ] {
            let g = p.groups(path).unwrap_or_else(|| panic!("{path}"));
            assert_eq!(g.get(2), two, "{path}");
            assert_eq!(g.get(0), path);
        }
        assert!(!p.is_match("/somethingelse"));
        assert!(!p.is_match("/x/something/"));
        // Free after the match, unlike a whole-value pattern.
        let p = Pattern::location("/foo/bar").unwrap();
        assert!(p.is_match("/foo/bar/baz") && p.is_match("/FOO/BARN"));
        assert!(!Pattern::new("/foo/bar").unwrap().is_match("/foo/bar/baz"));
        assert_eq!(p.groups("/foo/bar/x").unwrap().get(7), "");
        // Same source, other flavor: neither equal nor reused.
        assert_ne!(p, Pattern::new("/foo/bar").unwrap());
        let mut known = Patterns::from_previous([&p]);
        assert!(
            known
                .get_as("/foo/bar", Flavor::Location)
                .unwrap()
                .shares(&p)
        );
        assert!(!known.get("/foo/bar").unwrap().shares(&p));
        assert!(Pattern::location("a)|(b").is_err());
        // Searched for anywhere, case as written.
        let p = Pattern::search("beta|canary").unwrap();
        assert!(p.is_match("x-canary-1") && p.is_match("beta"));
        assert!(!p.is_match("Canary"));
    }

    #[test]
    fn equal_by_source_and_shown_as_written() {
        let a = Pattern::new("/a.*").unwrap();
        assert_eq!(a, Pattern::new("/a.*").unwrap());
        assert_ne!(a, Pattern::new("/a.+").unwrap());
        assert_eq!(serde_json::to_string(&a).unwrap(), r#""/a.*""#);
        assert_eq!(a.as_str(), "/a.*");
    }
}

//! A regular expression as the table holds it: the Gateway API's `RegularExpression` path,
//! header and query-parameter matches. The dialect is the `regex` crate's (RE2-like: no
//! look-around, no backreferences), so a match takes time linear in the value, whatever the
//! pattern. A pattern matches the whole value, never a part of it (as Envoy's `safe_regex`
//! does). Compiled when the table is built, with its compiled form and its lazy DFA's cache
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

impl Pattern {
    /// The most a pattern may take once compiled, in bytes, and the most its lazy DFA's
    /// cache (one per searching thread) may grow to. The patterns routes use fit (the tests
    /// compile a few); one like `\w{50}` (a Unicode class repeated) does not.
    pub const SIZE_LIMIT: usize = 64 * 1024;

    /// Compiles `source` to match whole values.
    pub fn new(source: &str) -> Result<Pattern, PatternError> {
        Self::with_limit(source, Self::SIZE_LIMIT)
    }

    fn with_limit(source: &str, size_limit: usize) -> Result<Pattern, PatternError> {
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
        let regex = build(&format!(r"\A(?:{source})\z"))?;
        Ok(Pattern(Arc::new(Compiled {
            source: source.into(),
            size_limit,
            regex,
        })))
    }

    /// Whether both are one compiled pattern (a clone, or reused by a later build).
    pub fn shares(&self, other: &Pattern) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Whether the whole of `value` matches.
    #[inline]
    pub fn is_match(&self, value: &str) -> bool {
        self.0.regex.is_match(value)
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
    known: HashMap<Box<str>, Pattern>,
}

impl Patterns {
    /// Starts from `previous` (a table's patterns, in any order, repeats allowed).
    pub fn from_previous<'p>(previous: impl IntoIterator<Item = &'p Pattern>) -> Self {
        let mut known = HashMap::new();
        for p in previous {
            if p.0.size_limit == Pattern::SIZE_LIMIT && !known.contains_key(&*p.0.source) {
                known.insert(p.0.source.clone(), p.clone());
            }
        }
        Patterns { known }
    }

    /// `source` compiled to match whole values: the known pattern when there is one.
    pub fn get(&mut self, source: &str) -> Result<Pattern, PatternError> {
        if let Some(p) = self.known.get(source) {
            return Ok(p.clone());
        }
        let p = Pattern::new(source)?;
        self.known.insert(source.into(), p.clone());
        Ok(p)
    }
}

/// The `regex` crate's message on one line (it points at the error over several).
fn compact(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.0.source == other.0.source
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
        let larger = Pattern::with_limit("/a.*", 2 * Pattern::SIZE_LIMIT).unwrap();
        let mut other = Patterns::from_previous([&larger]);
        assert!(!other.get("/a.*").unwrap().shares(&larger));
        // A fresh compile of the same source is equal, not shared.
        assert_eq!(Pattern::new("/a.*").unwrap(), old);
        assert!(!Pattern::new("/a.*").unwrap().shares(&old));
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

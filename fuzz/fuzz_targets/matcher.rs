//! Host and path matching: arbitrary Host headers, rule prefixes and paths through the
//! matcher's pure functions; never a panic, and a strip keeps a path absolute.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::table::matcher::{
    PathRule, PathRules, normalize_host, prefix_matches, strip_prefix, validate_host,
    validate_prefix,
};

fuzz_target!(|data: &[u8]| {
    // host \0 prefix \0 path
    let mut parts = data.splitn(3, |&b| b == 0);
    let (Some(host), Some(prefix), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
        return;
    };
    let mut buf = [0u8; 255];
    let normalized = normalize_host(host, &mut buf).map(|h| h.with_port.to_string());
    let (Ok(prefix), Ok(path)) = (std::str::from_utf8(prefix), std::str::from_utf8(path)) else {
        return;
    };
    if let Some(h) = &normalized {
        let _ = validate_host(h);
    }
    if validate_prefix(prefix).is_ok() && path.starts_with('/') {
        // A prefix that ignores case matches exactly when its lower-case form matches the
        // lower-case path.
        let mut rules = PathRules::default();
        rules.insert(PathRule {
            prefix: prefix.into(),
            strip: false,
            ignore_case: true,
            exact: false,
            regex: None,
            policy: None,
            target: (),
        });
        let folded = prefix_matches(&prefix.to_ascii_lowercase(), &path.to_ascii_lowercase());
        assert_eq!(rules.lookup(path).is_some(), folded, "{prefix:?} {path:?}");
    }
    if validate_prefix(prefix).is_ok() && path.starts_with('/') && prefix_matches(prefix, path) {
        let stripped = strip_prefix(path, prefix);
        assert!(
            stripped.starts_with('/'),
            "{prefix:?} {path:?} -> {stripped:?}"
        );
    }
});

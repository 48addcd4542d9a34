//! Cookie parsing: arbitrary Cookie headers; finding, stripping and parsing the SERVERID
//! cookie never panics, and a stripped header no longer carries it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::table::sticky::{COOKIE_NAME, find_cookie, parse_cookie_id, strip_cookie};

fuzz_target!(|header: &[u8]| {
    if let Some(v) = find_cookie(header, COOKIE_NAME) {
        let _ = parse_cookie_id(v);
    }
    if let Some(rest) = strip_cookie(header, COOKIE_NAME) {
        assert!(
            find_cookie(&rest, COOKIE_NAME).is_none(),
            "{:?}",
            String::from_utf8_lossy(header)
        );
    }
});

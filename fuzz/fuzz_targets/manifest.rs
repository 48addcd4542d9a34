//! Manifest parsing: any bytes as a manifest file never panic, and whatever parses translates.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use switchyard::control::manifests::{Objects, parse_into};
use switchyard::control::translate::{Options, translate};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut objects = Objects::default();
    if parse_into(text, Path::new("fuzz.yaml"), &mut objects).is_ok() {
        let _ = translate(
            &objects.services,
            &objects.slices,
            &Options::default(),
            None,
        );
    }
});

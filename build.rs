//! Build facts for `--version`: the git commit of the checkout (`unknown` outside one, or
//! without git) and the Pingora version from Cargo.lock, marked `+vendored` while Pingora's
//! crates are the copies in vendor/ (their lock entries have no registry source). Never fails
//! the build.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

/// The `version` of the `[[package]] name = "pingora"` entry of Cargo.lock, with
/// `+vendored` when the `pingora-core` or `pingora-proxy` entry has no `source` (a path
/// dependency).
fn pingora_version() -> Option<String> {
    let lock = std::fs::read_to_string("Cargo.lock").ok()?;
    let mut version = None;
    let mut vendored = false;
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        match line.trim() {
            "name = \"pingora\"" => {
                let v = lines.next()?.trim().strip_prefix("version = \"")?;
                version = Some(v.trim_end_matches('"').to_string());
            }
            "name = \"pingora-core\"" | "name = \"pingora-proxy\"" => {
                let _version = lines.next();
                vendored |= !lines.next().is_some_and(|l| l.starts_with("source = "));
            }
            _ => {}
        }
    }
    version.map(|v| if vendored { v + "+vendored" } else { v })
}

fn main() {
    println!("cargo:rerun-if-changed=Cargo.lock");
    println!("cargo:rerun-if-changed=build.rs");
    // A new commit moves HEAD (or the branch it names); the reflog records both.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        for f in ["HEAD", "logs/HEAD"] {
            let p = std::path::Path::new(&dir).join(f);
            if p.exists() {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
    }
    let commit = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let pingora = pingora_version().unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=SWITCHYARD_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=SWITCHYARD_PINGORA_VERSION={pingora}");
}

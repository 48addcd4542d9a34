#!/usr/bin/env bash
# Rebuilds vendor/pingora-core from the published crate and vendor/pingora-core.patch, or checks
# that the committed copy is exactly that (vendor/README.md says why the copy exists):
#   scripts/vendor-pingora-core.sh           # check: exit 1 and the differences if any
#   scripts/vendor-pingora-core.sh --write   # replace vendor/pingora-core with crate + patch
#   scripts/vendor-pingora-core.sh --diff    # print the patch the copy carries now (to refresh
#                                            # vendor/pingora-core.patch after editing the copy)
# The crate comes from cargo's download cache if it is there, else from static.crates.io; its
# SHA-256 must be the one crates.io published (the checksum Cargo.lock had before the patch).
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.9.1
sha256=a535f47f65fdcb003f9e1df04cd18e614c128dfe9388acce3f211ae38ac14d68
mode="${1:-check}"
case "$mode" in
  check | --write | --diff) ;;
  *)
    echo "usage: scripts/vendor-pingora-core.sh [--write | --diff]" >&2
    exit 2
    ;;
esac

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
crate="$work/pingora-core-$version.crate"
cached="$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/"pingora-core-$version.crate" \
  2>/dev/null | head -1 || true)"
if [ -n "$cached" ]; then
  cp "$cached" "$crate"
else
  curl -sSfL -o "$crate" "https://static.crates.io/crates/pingora-core/pingora-core-$version.crate"
fi
echo "$sha256  $crate" | sha256sum --check --quiet
tar -xzf "$crate" -C "$work"
upstream="$work/pingora-core-$version"
# What the copy leaves out: the package's benches, examples and their manifest entries (they
# are not built for a dependency), its lock and the original manifest.
rm -rf "$upstream/benches" "$upstream/examples" "$upstream/Cargo.lock" \
  "$upstream/Cargo.toml.orig" "$upstream/.cargo_vcs_info.json"

case "$mode" in
  --diff)
    (cd "$work" && cp -r "$OLDPWD/vendor/pingora-core" patched &&
      diff -ruN "pingora-core-$version" patched) || true
    ;;
  --write)
    (cd "$upstream" && patch -p1 --quiet --no-backup-if-mismatch) < vendor/pingora-core.patch
    rm -rf vendor/pingora-core
    cp -r "$upstream" vendor/pingora-core
    echo "vendor/pingora-core: pingora-core $version with vendor/pingora-core.patch"
    ;;
  check)
    (cd "$upstream" && patch -p1 --quiet --no-backup-if-mismatch) < vendor/pingora-core.patch
    if diff -ruN "$upstream" vendor/pingora-core; then
      echo "vendor/pingora-core is pingora-core $version with vendor/pingora-core.patch"
    else
      echo "vendor/pingora-core differs from pingora-core $version with its patch (above)" >&2
      exit 1
    fi
    ;;
esac

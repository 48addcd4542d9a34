#!/usr/bin/env bash
# Rebuilds the copies of Pingora's crates in vendor/ from the published crates and their patches
# (vendor/<crate>.patch), or checks that the committed copies are exactly that (vendor/README.md
# says why the copies exist):
#   scripts/vendor-pingora.sh           # check: exit 1 and the differences if any
#   scripts/vendor-pingora.sh --write   # replace each vendor/<crate> with crate + patch
#   scripts/vendor-pingora.sh --diff    # rewrite each vendor/<crate>.patch from the copy as it
#                                       # is now (after editing the copy)
# Each crate comes from cargo's download cache if it is there, else from static.crates.io; its
# SHA-256 must be the one crates.io published (the checksum Cargo.lock had before the patch).
# Exit status: 0 same (or written), 1 a copy differs, 2 bad usage, 3 a crate cannot be fetched.
set -euo pipefail
cd "$(dirname "$0")/.."
# name version sha256
crates=(
  "pingora-core 0.9.1 a535f47f65fdcb003f9e1df04cd18e614c128dfe9388acce3f211ae38ac14d68"
  "pingora-proxy 0.9.1 8e3d5670490740405ecc8c6f75c3fcbce4d24f7adaffb355ca44550e7918e358"
)
mode="${1:-check}"
case "$mode" in
  check | --write | --diff) ;;
  *)
    echo "usage: scripts/vendor-pingora.sh [--write | --diff]" >&2
    exit 2
    ;;
esac

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
differs=0
for entry in "${crates[@]}"; do
  read -r name version sha256 <<< "$entry"
  crate="$work/$name-$version.crate"
  cached="$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/"$name-$version.crate" \
    2>/dev/null | head -1 || true)"
  if [ -n "$cached" ]; then
    cp "$cached" "$crate"
  else
    if ! curl -sSfL --max-time 60 -o "$crate" \
      "https://static.crates.io/crates/$name/$name-$version.crate"; then
      echo "cannot fetch $name $version (not in cargo's cache, static.crates.io unreachable)" >&2
      exit 3
    fi
  fi
  echo "$sha256  $crate" | sha256sum --check --quiet
  tar -xzf "$crate" -C "$work"
  upstream="$work/$name-$version"
  # What a copy leaves out: the package's benches, examples and their manifest entries, its
  # dev-dependencies (none is built for a dependency), its lock and the original manifest.
  rm -rf "$upstream/benches" "$upstream/examples" "$upstream/Cargo.lock" \
    "$upstream/Cargo.toml.orig" "$upstream/.cargo_vcs_info.json"
  case "$mode" in
    --diff)
      mkdir -p "$work/a" "$work/b"
      mv "$upstream" "$work/a/$name"
      cp -r "vendor/$name" "$work/b/$name"
      # Without the files' times, so that an unchanged copy gives an unchanged patch.
      (cd "$work" && diff -ruN "a/$name" "b/$name" || true) \
        | sed -E 's/^(---|\+\+\+) ([^\t]+)\t.*$/\1 \2/' > "vendor/$name.patch"
      echo "vendor/$name.patch: $(grep -c '^@@' "vendor/$name.patch") hunks"
      ;;
    --write)
      (cd "$upstream" && patch -p2 --quiet --no-backup-if-mismatch) < "vendor/$name.patch"
      rm -rf "vendor/$name"
      cp -r "$upstream" "vendor/$name"
      echo "vendor/$name: $name $version with vendor/$name.patch"
      ;;
    check)
      (cd "$upstream" && patch -p2 --quiet --no-backup-if-mismatch) < "vendor/$name.patch"
      if diff -ruN "$upstream" "vendor/$name"; then
        echo "vendor/$name is $name $version with vendor/$name.patch"
      else
        echo "vendor/$name differs from $name $version with its patch (above)" >&2
        differs=1
      fi
      ;;
  esac
done
exit "$differs"

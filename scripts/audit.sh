#!/usr/bin/env bash
# Checks Cargo.lock and fuzz/Cargo.lock against the RustSec advisory database with cargo-audit
# (installed from crates.io if missing). Fails on any vulnerability; unmaintained crates are
# listed as warnings (docs/security.md#dependency-audit says why each stays).
#   scripts/audit.sh                                  # ../shared/advisory-db if present, else fetch
#   AUDIT_DB=/path/to/advisory-db scripts/audit.sh    # an offline copy of the database
# Without a copy and without access to the database's git host, it says so and fails.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo-audit >/dev/null 2>&1; then
  cargo install --locked cargo-audit
fi
db="${AUDIT_DB:-}"
if [ -z "$db" ] && [ -d ../shared/advisory-db ]; then
  db="$(cd ../shared/advisory-db && pwd)"
fi
args=(audit)
if [ -n "$db" ]; then
  echo "advisory database: $db ($(cat "$db/SNAPSHOT" 2>/dev/null | head -1 || echo 'no SNAPSHOT file'))"
  args+=(--db "$db" --no-fetch)
fi
# cargo-audit skips packages without a registry source, so the copies of Pingora's crates in
# vendor/ (vendor/README.md: the published crates with small patches) would go unchecked: each
# lock is audited with those packages marked as the crates.io versions they are copies of.
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for lock in Cargo.lock fuzz/Cargo.lock; do
  [ -f "$lock" ] || continue
  echo "--- $lock"
  audited="$scratch/$(echo "$lock" | tr / _)"
  # After the entry's version line, unless a source follows already (not a copy).
  awk -v src='source = "registry+https://github.com/rust-lang/crates.io-index"' '
    pending && !/^source = / { print src }
    { pending = 0; print }
    /^name = "pingora-(core|proxy)"$/ { copy = 1; next }
    copy && /^version = / { pending = 1 }
    { copy = 0 }' "$lock" > "$audited"
  for name in pingora-core pingora-proxy; do
    if ! grep -A2 "^name = \"$name\"\$" "$audited" | grep -q '^source = "registry+'; then
      echo "audit.sh: no $name entry in $lock to mark (vendor/README.md)" >&2
      exit 1
    fi
  done
  cargo "${args[@]}" --file "$audited"
done

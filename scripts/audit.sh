#!/usr/bin/env bash
# Checks Cargo.lock against the RustSec advisory database with cargo-audit. Not part of CI's
# required path: the database is a git repository on GitHub, fetched at run time, which the
# development machines and CI here cannot reach. Where it is reachable:
#   scripts/audit.sh                 # installs cargo-audit from crates.io if missing
#   AUDIT_DB=/path/to/advisory-db scripts/audit.sh   # an offline copy of the database
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo-audit >/dev/null 2>&1; then
  cargo install --locked cargo-audit
fi
args=(audit --deny warnings)
if [ -n "${AUDIT_DB:-}" ]; then
  args+=(--db "$AUDIT_DB" --no-fetch)
fi
for lock in Cargo.lock fuzz/Cargo.lock; do
  [ -f "$lock" ] || continue
  echo "--- $lock"
  cargo "${args[@]}" --file "$lock"
done

#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for a bounded time each (default 60 s):
#   scripts/fuzz.sh            # all targets, 60 s each
#   scripts/fuzz.sh 10 cookies # one target, 10 s
# libFuzzer needs a nightly toolchain (`rustup toolchain install nightly`) and cargo-fuzz
# (`cargo install cargo-fuzz`). Not part of CI's required path. A crash leaves its input in
# fuzz/artifacts/<target>/; turn it into a regression test, then fix.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(manifest annotations matcher cookies)
fi
command -v cargo-fuzz >/dev/null || { echo "cargo-fuzz missing: cargo install cargo-fuzz" >&2; exit 2; }
rustup run nightly rustc --version >/dev/null 2>&1 || { echo "no nightly toolchain" >&2; exit 2; }
status=0
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  echo "--- $t: ${seconds}s"
  # -rss_limit_mb: translate builds whole tables; 2 GB leaves room for libFuzzer's own use.
  if ! cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$seconds" \
      -rss_limit_mb=2048 -print_final_stats=1 2>&1 | tee "/tmp/switchyard-fuzz-$t.log" \
      | grep -E "^(#[0-9]+.*DONE|stat::number_of_executed_units|SUMMARY|==[0-9]+==ERROR)|Done [0-9]+ runs|panicked"; then
    :
  fi
  if grep -qE "SUMMARY|panicked|==ERROR" "/tmp/switchyard-fuzz-$t.log"; then
    echo "!!! $t found a crash; see fuzz/artifacts/$t/" >&2
    status=1
  fi
done
exit $status

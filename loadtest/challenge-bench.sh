#!/usr/bin/env bash
# The proof-of-work measurement of docs/challenge.md, runnable again by anyone:
# the native solver (2 threads) and the server's verify cost (loadtest's challenge-bench),
# then headless Chromium (web/bench/challenge-bench.mjs) on the same challenges: in a Web
# Worker unthrottled, and on the page's main thread unthrottled and at 4x CPU throttling
# (DevTools throttling does not reach workers). Writes JSON lines to $OUT and prints the
# table (web/bench/table.mjs).
#
#   loadtest/challenge-bench.sh            # every candidate, COUNT challenges per difficulty
#   COUNT=10 loadtest/challenge-bench.sh sha256-wasm:18,20
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${COUNT:-20}
OUT=${OUT:-target/challenge-bench.jsonl}
TARGET=${CARGO_TARGET_DIR:-target}
mkdir -p "$(dirname "$OUT")"
cargo build --release --locked -p anteroom-loadtest --bin challenge-bench
[ -d web/node_modules ] || (cd web && npm ci --no-audit --no-fund)
# function:difficulties:extra parameters (the same for both sides)
CANDIDATES=("$@")
if [ ${#CANDIDATES[@]} -eq 0 ]; then
  CANDIDATES=(
    "sha256:14,16"
    "sha256-wasm:16,18,20"
    "argon2id:8,10:--argon2-m 64"
    "argon2id:6,7:--argon2-m 1024"
    "scrypt:6,7:--scrypt-log-n 10"
  )
fi
: > "$OUT"
for c in "${CANDIDATES[@]}"; do
  IFS=: read -r fn diffs extra <<< "$c"
  native_fn=$fn; [ "$fn" = sha256-wasm ] && native_fn=sha256
  verifies=2000; [ "$native_fn" = sha256 ] && verifies=1000000
  # shellcheck disable=SC2086
  "$TARGET/release/challenge-bench" --function "$native_fn" --difficulty "$diffs" --count "$COUNT" \
    --threads 2 --verifies "$verifies" $extra | sed "s/\"function\":\"$native_fn\"/\"function\":\"$fn\"/" >> "$OUT"
  # shellcheck disable=SC2086
  node web/bench/challenge-bench.mjs --function "$fn" --difficulty "$diffs" --count "$COUNT" \
    --where worker --throttle 1 $extra >> "$OUT"
  # shellcheck disable=SC2086
  node web/bench/challenge-bench.mjs --function "$fn" --difficulty "$diffs" --count "$COUNT" \
    --where main --throttle 1,4 $extra >> "$OUT"
done
node web/bench/table.mjs "$OUT"

#!/usr/bin/env bash
# Property-based test of the admin API against its own OpenAPI document, in
# `make test-api` (part of `make test`). A real target/debug/anteroom runs on loopback with
# a throwaway config and data_dir; schemathesis reads the document the server serves and
# sends generated requests, valid and invalid, to every operation with the admin token.
# Every check runs: no 5xx; every status, content type, header and body is the one the
# document gives; input the document forbids is refused (4xx) and input it allows is
# accepted; auth is not ignored. Any finding fails the script.
#
# The instance is throwaway, so destructive operations (pause, flush, bans) are fair game.
# The tester's address (127.0.0.1, only it) is in abuse.allow: its deliberately wrong tokens
# are not struck and it cannot ban itself, so it is never locked out (429, 403) part way
# through and the run is the same every time. scripts/schemathesis.toml holds the one
# exception to the checks' defaults, and why. The data
# generation is seeded (SEED, default below); the same seed replays the same requests.
#
# Needs: schemathesis in target/test-tools/schemathesis (scripts/test-tools.sh installs it),
# python3, curl. ANTEROOM_BIN overrides the binary (default target/debug/anteroom);
# MAX_EXAMPLES (default 40) bounds the cases per operation and phase.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=${ANTEROOM_BIN:-$ROOT/target/debug/anteroom}
ST=${SCHEMATHESIS:-$ROOT/target/test-tools/schemathesis/bin/schemathesis}
SEED=${SEED:-20240601}
MAX_EXAMPLES=${MAX_EXAMPLES:-40}
TOKEN=api-test-admin-token-0123456789
COOKIE_SECRET=$(printf '%064d' 7)

fail() {
  echo "scripts/api-test.sh: FAIL: $*" >&2
  [ -f "${tmp:-/nonexistent}/anteroom.log" ] && { echo "--- last lines of anteroom.log:" >&2; tail -n 20 "$tmp/anteroom.log" >&2; }
  exit 1
}
[ -x "$BIN" ] || fail "$BIN not found (cargo build first)"
[ -x "$ST" ] || fail "schemathesis not found at $ST (run scripts/test-tools.sh)"

tmp=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 124' TERM INT HUP
# Leave no ANTEROOM_* of the caller's environment in the way.
while read -r v; do unset "$v"; done < <(compgen -e | grep '^ANTEROOM_' || true)

read -r PORT ADMIN_PORT < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
# The room's origin is never reached: the admin API does not proxy.
cat >"$tmp/anteroom.yaml" <<YAML
listen: "127.0.0.1:$PORT"
admin_listen: "127.0.0.1:$ADMIN_PORT"
cookie_secret: "$COOKIE_SECRET"
admin_token: "$TOKEN"
data_dir: "$tmp/data"
abuse:
  allow: ["127.0.0.1"]
rooms:
  main:
    origin: http://127.0.0.1:9
    rate: 5
  second:
    origin: http://127.0.0.1:9
    match_host: second.example
YAML
"$BIN" --config "$tmp/anteroom.yaml" >"$tmp/anteroom.log" 2>&1 &
pid=$!
ADMIN=http://127.0.0.1:$ADMIN_PORT
deadline=$((SECONDS + 15))
until curl -fs -m 2 -o /dev/null -H "Authorization: Bearer $TOKEN" "$ADMIN/__anteroom/admin/api/rooms/main/stats"; do
  kill -0 "$pid" 2>/dev/null || fail "anteroom exited"
  [ "$SECONDS" -lt "$deadline" ] || fail "timed out waiting for anteroom's statistics"
  sleep 0.2
done

echo "== schemathesis $("$ST" --version | awk '{print $NF}') against $ADMIN (seed $SEED, $MAX_EXAMPLES examples)"
start=$SECONDS
status=0
"$ST" --no-color --config-file scripts/schemathesis.toml run "$ADMIN/__anteroom/admin/api/openapi.json" \
  --url "$ADMIN" \
  -H "Authorization: Bearer $TOKEN" \
  --checks all \
  --seed "$SEED" \
  --max-examples "$MAX_EXAMPLES" \
  --workers 1 \
  --request-timeout 10 \
  --generation-database none \
  --suppress-health-check all \
  --report ndjson --report-dir "$tmp/report" "$@" || status=$?
echo "== schemathesis finished in $((SECONDS - start)) s (exit $status)"
kill -0 "$pid" 2>/dev/null || fail "anteroom died during the run"
[ "$status" = 0 ] || fail "schemathesis found disagreements between the server and its OpenAPI document (above)"
echo "admin API: OK (every operation agrees with its OpenAPI document)"

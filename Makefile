# anteroom — the everyday commands. `make test` is the one the README and CI run.
CARGO ?= cargo
NPM ?= npm

.PHONY: build web test test-tools test-web test-browser test-plain test-deploy test-api test-site-bound check demo clean bench bench-smoke

## build: the front-end (web/ → web/dist, embedded), then the release binary
build: web
	$(CARGO) build --release --locked

## web: install the front-end's pinned dependencies and build web/dist
web:
	cd web && $(NPM) ci --no-audit --no-fund && $(NPM) run build

## test: every test — front-end type-check and unit tests, Rust unit / conformance / end to
## end (real Redis, a real Kafka-protocol broker) with the board built in, the browser tests
## in headless Chromium, and the plain page of a binary built without the front-end.
## Installs the services the tests start first (scripts/test-tools.sh).
test: test-tools web test-web
	$(CARGO) test --locked --all-targets
	$(MAKE) test-browser
	$(MAKE) test-deploy
	$(MAKE) test-api
	$(MAKE) test-plain
	$(MAKE) test-site-bound

## test-site-bound: against a real slow site (PHP-FPM, 4 children, 200 ms pages, behind
## nginx), with target/debug/anteroom in front (built first: the tests refuse a binary older
## than src/; the site, not the build, is the limit here): the honest ETA (case 4 of
## `anteroom-loadtest site-bound` with 200 visitors: ≥ 85 % within the range shown over two runs, no 5xx, on
## the embedded store and on two replicas sharing one Redis; the full-size embedded case holds ≥ 90 %)
## and closed-loop admission at a saturated door (`anteroom-loadtest adaptive-door`: the
## rate falls within 5 s of the slot wait passing the target, and rises once it clears).
test-site-bound: test-tools
	$(CARGO) build --locked --bin anteroom
	$(CARGO) test --locked -p anteroom-loadtest --test site_bound --test adaptive_door -- --nocapture --test-threads 1

## test-web: the control room's API types match src/admin/openapi.json (check:api-types),
## tsc --noEmit and the vitest unit tests
test-web:
	cd web && npm run --silent check:api-types && npx tsc --noEmit && npx vitest run --project unit

## test-browser: Chromium against target/debug/anteroom (built with web/dist)
test-browser:
	$(CARGO) build --locked
	cd web && ANTEROOM_BIN=../target/debug/anteroom npx vitest run --project browser

## test-plain: against a binary built without the front-end, the unit tests of the modules
## whose behaviour depends on it (the pages and assets, the admin page and status, the
## metrics' build info) and the core end-to-end and admin tests
test-plain:
	ANTEROOM_FRONTEND=off $(CARGO) test --locked --lib -- http:: admin:: metrics:: gate::
	ANTEROOM_FRONTEND=off $(CARGO) test --locked --test e2e -- core:: admin::

## test-deploy: the deployment kit (deploy/) with real promtool, systemd-analyze, hadolint,
## kubectl kustomize and kubernetes-validate, and a real Prometheus scraping
## target/debug/anteroom on loopback (deploy/test.sh)
test-deploy:
	$(CARGO) build --locked
	timeout 120 bash deploy/test.sh

## test-api: schemathesis (property-based) against target/debug/anteroom's admin API on
## loopback: every operation, valid and invalid input, must agree with the OpenAPI document
## the server serves (scripts/api-test.sh; seeded, bounded in time)
test-api:
	$(CARGO) build --locked
	timeout 240 bash scripts/api-test.sh

## test-tools: the real services end-to-end tests start (Kafka-protocol broker, …)
test-tools:
	bash scripts/test-tools.sh

## check: formatting, lints and the docs' links (private items included), as CI enforces them
check:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --locked --workspace --no-deps --document-private-items

## bench: every benchmark scenario at full size (about 20–25 minutes, site-bound's five
## cases included); writes BENCHMARKS.md
bench: test-tools
	$(CARGO) build --release --locked --workspace
	target/release/anteroom-loadtest all

## bench-smoke: every scenario at small scale (a few minutes); prints the table and
## writes BENCHMARKS-smoke.md
bench-smoke: test-tools
	$(CARGO) build --release --locked --workspace
	target/release/anteroom-loadtest all --smoke

## demo: the built-in demo on http://localhost:8080, with the split-flap board built in
demo: web
	$(CARGO) run --release --locked -- demo

clean:
	$(CARGO) clean
	rm -rf web/dist test-artifacts

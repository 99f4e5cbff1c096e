# anteroom — the everyday commands. `make test` is the one the README and CI run.
CARGO ?= cargo

.PHONY: build test test-tools check demo clean bench bench-smoke

## build: the release binary at target/release/anteroom
build:
	$(CARGO) build --release --locked

## test: every test — unit, store conformance, end to end (installs the test brokers first)
test: test-tools
	$(CARGO) test --locked --all-targets

## test-tools: the real services end-to-end tests start (Kafka-protocol broker, …)
test-tools:
	bash scripts/test-tools.sh

## check: formatting and lints, as CI enforces them
check:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings

## bench: every benchmark scenario at full size (about 10–15 minutes); writes BENCHMARKS.md
bench:
	$(CARGO) build --release --locked --workspace
	target/release/anteroom-loadtest all

## bench-smoke: every scenario at small scale (under three minutes); prints the table and
## writes BENCHMARKS-smoke.md
bench-smoke:
	$(CARGO) build --release --locked --workspace
	target/release/anteroom-loadtest all --smoke

## demo: the built-in demo on http://localhost:8080
demo:
	$(CARGO) run --release --locked -- demo

clean:
	$(CARGO) clean

# anteroom — the everyday commands. `make test` is the one the README and CI run.
CARGO ?= cargo

.PHONY: build test check demo clean

## build: the release binary at target/release/anteroom
build:
	$(CARGO) build --release --locked

## test: every test — unit, store conformance, end to end
test:
	$(CARGO) test --locked --all-targets

## check: formatting and lints, as CI enforces them
check:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --all-targets -- -D warnings

## demo: the built-in demo on http://localhost:8080
demo:
	$(CARGO) run --release --locked -- demo

clean:
	$(CARGO) clean

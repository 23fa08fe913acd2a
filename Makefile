# irqlab: `make reproduce` rebuilds every published figure; `make test` runs all tests.
# Works on a fresh clone: the venv, the Python deps (pinned) and the Rust
# extension are (re)built as needed.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
LOCKS := requirements/dev.lock requirements/dask.lock

.PHONY: setup reproduce test test-long clean

setup: $(VENV)/.deps-installed
	VIRTUAL_ENV=$(CURDIR)/$(VENV) $(BIN)/maturin develop --release

# Reinstall the pinned deps only when a lock file changes; maturin itself
# decides whether the Rust extension needs rebuilding.
$(VENV)/.deps-installed: $(LOCKS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check $(addprefix -r ,$(LOCKS))
	touch $@

reproduce: setup
	$(BIN)/irqlab reproduce

# The Python lint, format and type checks first: they take seconds and fail fast.
test: setup
	$(BIN)/ruff check python tests
	$(BIN)/ruff format --check python tests
	$(BIN)/mypy python/irqlab
	cargo fmt --all -- --check
	cargo clippy --workspace --release --all-targets -- -D warnings
	cargo test --workspace --release
	$(BIN)/pytest -q

# Not run by CI: longer property searches (Rust and Python), a million fuzzed
# scenarios, and the real-host tests 20 times in a row (they record this
# machine's interrupts).
test-long: setup
	IRQLAB_PROPTEST_CASES=4096 cargo test --workspace --release
	IRQLAB_FUZZ_CASES=1000000 cargo test --release -p irqlab-core --test fuzz_scenarios -- --nocapture
	IRQLAB_LONG=1 $(BIN)/pytest -q
	for i in $$(seq 20); do $(BIN)/pytest -q tests/test_host.py || exit 1; done

clean:
	rm -rf $(VENV) target irqlab-report

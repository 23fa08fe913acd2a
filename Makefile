# irqlab: `make reproduce` rebuilds every published figure; `make test` runs all tests.
# Works on a fresh clone: the venv, the Python deps (pinned) and the Rust
# extension are (re)built as needed.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
LOCKS := requirements/dev.lock requirements/dask.lock

.PHONY: setup reproduce test clean

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

test: setup
	cargo test --workspace --release
	$(BIN)/pytest -q

clean:
	rm -rf $(VENV) target irqlab-report

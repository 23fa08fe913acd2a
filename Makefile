# irqlab: `make reproduce` rebuilds every published figure; `make test` runs all tests.
# Works on a fresh clone: the venv, the Python deps (pinned) and the Rust
# extension are (re)built as needed.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
LOCKS := requirements/dev.lock requirements/dask.lock requirements/ray.lock
# uv installs the locks: it fetches and unpacks in parallel (15 s on a fresh
# machine here, where pip took 71 s for the same pins); pinned in its own lock.
# Bytecode is compiled at install, as pip does: where PYTHONDONTWRITEBYTECODE is
# set (it is on these machines) Python never caches it, and every `irqlab` the
# tests start would compile its imports again (0.64 s for `irqlab --help`, 0.29 s
# compiled). The project's own modules are compiled by `setup` for the same reason.
# `--system-certs`: the platform's trust store, as pip uses, where uv's own roots
# fail behind a TLS-inspecting proxy whose CA only the system knows (as here,
# unless SSL_CERT_FILE names the bundle).
BOOTSTRAP := requirements/bootstrap.lock
# uv reads its own settings, not pip's: where a host points pip at a mirror, a
# wheel directory or no index at all (this kind sets PIP_FIND_LINKS), uv is
# pointed there too, unless its own variable is set. pip's lists are
# space-separated; UV_FIND_LINKS is comma-separated.
comma := ,
empty :=
space := $(empty) $(empty)
# $(call uv_var,NAME,VALUE): NAME='VALUE' for uv, unless VALUE is empty or NAME is set.
uv_var = $(if $(and $(2),$(if $($(1)),,1)),$(1)='$(2)')
UV_FROM_PIP := $(call uv_var,UV_DEFAULT_INDEX,$(PIP_INDEX_URL)) \
	$(call uv_var,UV_EXTRA_INDEX_URL,$(PIP_EXTRA_INDEX_URL)) \
	$(call uv_var,UV_FIND_LINKS,$(subst $(space),$(comma),$(strip $(PIP_FIND_LINKS)))) \
	$(call uv_var,UV_NO_INDEX,$(if $(filter 1 true yes on,$(PIP_NO_INDEX)),1))

.PHONY: setup browser reproduce test test-long clean

# The last step builds matplotlib's font cache once: on a fresh HOME, when that
# takes over 5 s, matplotlib says so on stderr in the first report, which tests
# that read stderr as one line would take for an error (a review; a cold build
# took 6.9 s here under load).
setup: browser $(VENV)/.deps-installed
	VIRTUAL_ENV=$(CURDIR)/$(VENV) $(BIN)/maturin develop --release
	$(BIN)/python -m compileall -q python/irqlab
	$(BIN)/python -c "import matplotlib.font_manager"

# Headless Chromium and its WebDriver (Debian's packages) for the browser test of
# the HTML reports (tests/test_report_browser.py). Nothing happens when both are
# on PATH; otherwise apt-get installs them, which needs root (CI is root).
browser:
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then \
		if [ "$$(id -u)" != 0 ]; then \
			echo "make browser: chromium and chromedriver are missing and apt-get needs root:" \
				"run 'sudo make browser' (or apt-get install chromium chromium-driver)" >&2; \
			exit 1; \
		fi; \
		echo "make browser: installing chromium and chromium-driver (apt-get)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	fi

# Reinstall the pinned deps only when a lock file or this file (the install's
# flags) changes; maturin itself decides whether the extension needs rebuilding.
$(VENV)/.deps-installed: $(BOOTSTRAP) $(LOCKS) Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r $(BOOTSTRAP)
	$(strip env $(UV_FROM_PIP)) $(BIN)/uv pip install --quiet --compile-bytecode --system-certs --python $(BIN)/python $(addprefix -r ,$(LOCKS))
	touch $@

reproduce: setup
	$(BIN)/irqlab reproduce

# Under CI the Rust property tests draw from a fixed seed, as Hypothesis's "ci"
# profile derandomizes the Python ones: a submission is judged on its own change,
# not on whether this run happened to draw a rare case (a local run, and
# `make test-long`, search from a new seed each time; PROPTEST_RNG_SEED=N replays one).
PROPTEST_ENV := $(if $(CI),PROPTEST_RNG_SEED=$(or $(PROPTEST_RNG_SEED),20261127),)

# The Python tests run on every core (pytest-xdist), a test file to a worker, so a
# file's module fixtures are built once; the bundled report, which several files
# read, is built once for all workers (tests/conftest.py). On this 2-core kind that
# took the suite from 544 s to 325 s. PYTEST_WORKERS= runs them in one process.
# Every test that records through tracefs is in tests/test_host.py (one worker):
# some of them check that no recorder's instance or mount is left behind, so keep
# --dist loadfile. `nproc`, not xdist's `logical`: psutil's count ignores the
# CPUs a container or taskset allows.
PYTEST_WORKERS ?= -n $(shell nproc) --dist loadfile

# The Python lint, format and type checks first: they take seconds and fail fast.
test: setup
	$(BIN)/ruff check python tests
	$(BIN)/ruff format --check python tests
	$(BIN)/mypy python/irqlab
	$(BIN)/python -m mypy.stubtest irqlab._core
	cargo fmt --all -- --check
	cargo clippy --workspace --release --all-targets -- -D warnings
	$(PROPTEST_ENV) cargo test --workspace --profile test-opt
	$(BIN)/pytest -q $(PYTEST_WORKERS)

# Not run by CI: longer property searches (Rust and Python), a million fuzzed
# scenarios, and the real-host tests 20 times in a row (they record this
# machine's interrupts).
test-long: setup
	# 40x every property test's cases: those with a count of their own through
	# IRQLAB_PROPTEST_FACTOR, those on proptest's default (256) through PROPTEST_CASES.
	IRQLAB_PROPTEST_FACTOR=40 PROPTEST_CASES=10240 cargo test --workspace --profile test-opt
	IRQLAB_FUZZ_CASES=1000000 cargo test --profile test-opt -p irqlab-core --test fuzz_scenarios -- --nocapture
	IRQLAB_LONG=1 $(BIN)/pytest -q $(PYTEST_WORKERS)
	for i in $$(seq 20); do $(BIN)/pytest -q tests/test_host.py || exit 1; done

clean:
	rm -rf $(VENV) target irqlab-report

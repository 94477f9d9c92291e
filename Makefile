# Set-up and checks on a fresh machine: `make venv` then `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: venv test lint typecheck check serve demo bench bench-smoke clean kube-binaries kube-control-plane kube-test fgdsim-binary

$(BIN)/toposched: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

venv: $(BIN)/toposched

# The Kubernetes suites run against a real control plane built from Go modules (tools/kube);
# with Go on the machine, `make test` builds it first where it is missing (once per machine,
# about 15 minutes on 2 cores). Without Go those suites skip and say how to run them.
test: venv
	@if command -v go >/dev/null 2>&1; then $(MAKE) --no-print-directory kube-binaries; fi
	$(BIN)/pytest

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: venv
	$(BIN)/mypy

check: lint typecheck test

# The main job: the server on this machine's GPUs (an emulated DGX-1 where NVML finds none),
# SQLite and logs under $$TOPOSCHED_DATA_DIR (default ~/.local/share/toposched), port 8080.
# One person's server: jobs run as whoever runs it, so that the README's tour runs this
# checkout's examples with this venv's Python wherever they are; a server shared by teams runs
# `toposched serve` as root, each team's jobs as an account of its own (docs/server.md).
serve: venv
	$(BIN)/toposched serve --job-accounts server $(ARGS)

demo: venv
	$(BIN)/toposched demo

bench: venv
	$(BIN)/python benchmarks/placement.py
	$(BIN)/python benchmarks/scheduler.py
	$(BIN)/python benchmarks/perfmodel.py
	$(BIN)/python benchmarks/api_load.py

# Every benchmarks/*.py script with --smoke (tiny sizes, seconds each), as CI runs them; a
# script that fails fails this. kube_bind.py runs on the real control plane, built first where
# Go is (as `make test` does) and failing with how to build it where not.
bench-smoke: venv
	@if command -v go >/dev/null 2>&1; then $(MAKE) --no-print-directory kube-binaries; fi
	$(BIN)/python benchmarks/smoke.py

# etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kubectl (v1.37) built from
# their Go modules into ~/.cache/toposched/kube (or $$TOPOSCHED_KUBE_CACHE), where missing.
kube-binaries: venv
	$(BIN)/python -m tools.kube build

# FGD's own simulator (simon) built from its Go module into ~/.cache/toposched/fgdsim (or
# $$TOPOSCHED_FGDSIM_CACHE), where missing; fails saying why where it cannot be had
# (docs/simulator.md, "FGD's own simulator").
fgdsim-binary: venv
	$(BIN)/python benchmarks/fgd_peer.py --build

# A control plane on 127.0.0.1 for people: prints `export KUBECONFIG=...`, runs until Ctrl-C
# (ARGS="--scheduler" runs kube-scheduler too, ARGS="--dir D" keeps its state in D).
kube-control-plane: kube-binaries
	$(BIN)/python -m tools.kube up $(ARGS)

# tests/kube and tests/agent against the real control plane; a skipped test fails the run.
kube-test: kube-binaries
	TOPOSCHED_KUBE_STRICT=1 $(BIN)/pytest tests/kube tests/agent

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache .ruff_cache .grimp_cache .import_linter_cache

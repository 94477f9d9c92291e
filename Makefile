# Set-up and checks on a fresh machine: `make venv` then `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: venv test lint typecheck check serve demo bench clean

$(BIN)/toposched: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

venv: $(BIN)/toposched

test: venv
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
serve: venv
	$(BIN)/toposched serve $(ARGS)

demo: venv
	$(BIN)/toposched demo

bench: venv
	$(BIN)/python benchmarks/placement.py
	$(BIN)/python benchmarks/scheduler.py
	$(BIN)/python benchmarks/perfmodel.py
	$(BIN)/python benchmarks/api_load.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache .ruff_cache .grimp_cache .import_linter_cache

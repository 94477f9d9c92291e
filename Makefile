# Set-up and checks on a fresh machine: `make venv` then `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: venv test lint typecheck check demo bench clean

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

typecheck: venv
	$(BIN)/mypy

check: lint typecheck test

demo: venv
	$(BIN)/toposched demo

bench: venv
	$(BIN)/python benchmarks/placement.py
	$(BIN)/python benchmarks/scheduler.py
	$(BIN)/python benchmarks/perfmodel.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache .ruff_cache

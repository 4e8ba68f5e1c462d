# The two Quick start commands: `make demo` and `make test`. Each installs what it needs first
# (a virtualenv in .venv with the package and its dev tools; the pinned npm servers in node_modules).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY_STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed

.PHONY: install demo test lint typecheck format clean conformance inspector

install: $(PY_STAMP) $(NODE_STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(PY_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

demo: install
	$(BIN)/python scripts/debug_executor.py

test: install
	$(BIN)/python -m pytest

# Checks from outside, with Node 22 and the pinned tools installed into .tools/ (not part of `make test`:
# they need npm on first use and start the server over HTTP).
conformance: install
	$(BIN)/python scripts/conformance.py

inspector: install
	$(BIN)/python scripts/inspector_check.py

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/basedpyright

typecheck: install
	$(BIN)/basedpyright

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) node_modules .pytest_cache .ruff_cache .tools

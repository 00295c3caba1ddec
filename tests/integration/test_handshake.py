"""Real client libraries complete the ApiVersions handshake and a Metadata request."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from tests.support.broker_process import BrokerProcess

pytestmark = pytest.mark.integration


def test_kafka_python_handshake_and_metadata(broker: BrokerProcess) -> None:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        cluster = admin.describe_cluster()
    finally:
        admin.close()
    assert cluster["cluster_id"] == "kcoord-cluster"
    assert cluster["controller_id"] == 0
    assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [
        (0, "127.0.0.1", broker.port)
    ]


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_confluent_kafka_negotiates_flexible_api_versions(broker: BrokerProcess) -> None:
    from confluent_kafka.admin import AdminClient

    capture = _Capture()
    logger = logging.getLogger("test.rdkafka")
    logger.addHandler(capture)
    logger.setLevel(logging.DEBUG)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "debug": "protocol", "logger": logger})
    metadata = admin.list_topics(timeout=15)
    assert metadata.cluster_id == "kcoord-cluster"
    assert metadata.controller_id == 0
    assert {b.id: (b.host, b.port) for b in metadata.brokers.values()} == {0: ("127.0.0.1", broker.port)}
    # librdkafka hands its log lines to the logger only from poll().
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any("MetadataResponse" in m for m in capture.messages):
        admin.poll(0.1)
    # librdkafka speaks ApiVersions v3 (flexible, KIP-511) and gets a v3 answer back.
    assert any("Sent ApiVersionRequest (v3" in m for m in capture.messages), capture.messages[:20]
    assert any("Received ApiVersionResponse (v3" in m for m in capture.messages)
    assert any("Received MetadataResponse (v12" in m for m in capture.messages)
    assert "malformed" not in broker.log()


def test_aiokafka_handshake_and_metadata(broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaClient

    async def main() -> set[tuple[int, str, int]]:
        client = AIOKafkaClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
        await client.bootstrap()
        try:
            return {(b.nodeId, b.host, b.port) for b in client.cluster.brokers()}
        finally:
            await client.close()

    assert asyncio.run(asyncio.wait_for(main(), 30)) == {(0, "127.0.0.1", broker.port)}

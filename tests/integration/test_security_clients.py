"""Real clients over TLS and SASL, with the authorizer on: each produces, consumes in a group
and commits through the settings it would use against Apache Kafka.

kafka-python, confluent-kafka (librdkafka), aiokafka and kafkajs, each over SASL_SSL with
SCRAM-SHA-512, SASL_PLAINTEXT with PLAIN, and SSL with a client certificate (the
principal mapped from the certificate by ``ssl.principal.mapping.rules``). The users hold
only the ACLs they need: ALL on the ``sec-`` topics and groups.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from admin.client import AdminClient
from admin.security import ClientSecurity
from security.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from tests.integration.test_kafkajs import node, run_script  # noqa: F401  (a fixture)
from tests.support.broker_process import BrokerProcess
from tests.support.security import (
    ADMIN,
    ADMIN_PASSWORD,
    ALICE,
    ALICE_PASSWORD,
    Certificates,
    make_certificates,
    secure_settings,
    users_file,
)

pytestmark = pytest.mark.integration

CERT_PRINCIPAL = "User:alice-cert"  # CN=alice-cert,O=kcoord tests through the mapping rule
PROTOCOLS = ("SASL_SSL", "SASL_PLAINTEXT", "SSL")
COUNT = 3


def admin_security(certs: Certificates) -> ClientSecurity:
    return ClientSecurity("SASL_SSL", "SCRAM-SHA-512", ADMIN, ADMIN_PASSWORD, cafile=str(certs.ca))


def grant(admin: AdminClient, principal: str, *bindings: tuple[ResourceType, str, PatternType, AclOperation]) -> None:
    creations = [{"resource_type": int(rtype), "resource_name": name, "resource_pattern_type": int(pattern),
                  "principal": principal, "host": "*", "operation": int(op),
                  "permission_type": int(AclPermissionType.ALLOW)} for rtype, name, pattern, op in bindings]
    _, reply = admin.any_broker().request(30, {"creations": creations})
    assert all(r.error_code == 0 for r in reply.results), reply


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Certificates]]:
    tmp = tmp_path_factory.mktemp("secure")
    certs = make_certificates(tmp / "certs")
    settings = secure_settings(certs, users_file(tmp), authorizer=True,
                               **{"ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/,DEFAULT",
                                  "super.users": f"User:{ADMIN}"})
    broker = BrokerProcess(tmp / "data", settings).start()
    try:
        with AdminClient(broker.address("SASL_SSL"), security=admin_security(certs)) as admin:
            for principal in (f"User:{ALICE}", CERT_PRINCIPAL):
                grant(admin, principal,
                      (ResourceType.TOPIC, "sec-", PatternType.PREFIXED, AclOperation.ALL),
                      (ResourceType.GROUP, "sec-", PatternType.PREFIXED, AclOperation.ALL),
                      (ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, AclOperation.IDEMPOTENT_WRITE))
        yield broker, certs
    finally:
        broker.stop()


def committed(broker: BrokerProcess, certs: Certificates, group: str, topic: str) -> int:
    with AdminClient(broker.address("SASL_SSL"), security=admin_security(certs)) as admin:
        offsets = admin.fetch_offsets(group, [(topic, 0)])
    return offsets[(topic, 0)].offset if (topic, 0) in offsets else -1


# ---------------------------------------------------------------------- kafka-python


def kafka_python_options(protocol: str, certs: Certificates) -> dict[str, Any]:
    if protocol == "SASL_SSL":
        return {"security_protocol": protocol, "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": ALICE,
                "sasl_plain_password": ALICE_PASSWORD, "ssl_cafile": str(certs.ca)}
    if protocol == "SASL_PLAINTEXT":
        return {"security_protocol": protocol, "sasl_mechanism": "PLAIN", "sasl_plain_username": ALICE,
                "sasl_plain_password": ALICE_PASSWORD}
    return {"security_protocol": "SSL", "ssl_cafile": str(certs.ca), "ssl_certfile": str(certs.client_cert),
            "ssl_keyfile": str(certs.client_key)}


def run_kafka_python(bootstrap: str, options: dict[str, Any], topic: str, group: str) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, **options)
    for i in range(COUNT):
        producer.send(topic, f"kp-{i}".encode(), partition=0).get(timeout=20)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, **options)
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < COUNT and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            values += [r.value for r in records]
    consumer.commit()
    consumer.close()
    return values


# ---------------------------------------------------------------------- confluent-kafka


def confluent_options(protocol: str, certs: Certificates) -> dict[str, Any]:
    if protocol == "SASL_SSL":
        return {"security.protocol": protocol, "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": ALICE,
                "sasl.password": ALICE_PASSWORD, "ssl.ca.location": str(certs.ca)}
    if protocol == "SASL_PLAINTEXT":
        return {"security.protocol": protocol, "sasl.mechanism": "PLAIN", "sasl.username": ALICE,
                "sasl.password": ALICE_PASSWORD}
    return {"security.protocol": "SSL", "ssl.ca.location": str(certs.ca),
            "ssl.certificate.location": str(certs.client_cert), "ssl.key.location": str(certs.client_key)}


def run_confluent(bootstrap: str, options: dict[str, Any], topic: str, group: str) -> list[bytes]:
    from confluent_kafka import Consumer, Producer

    delivered: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, **options})
    for i in range(COUNT):
        producer.produce(topic, f"ck-{i}".encode(), partition=0, on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0 and delivered == [None] * COUNT, delivered
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, **options})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < COUNT and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    return values


# ---------------------------------------------------------------------- aiokafka


def run_aiokafka(bootstrap: str, protocol: str, certs: Certificates, topic: str, group: str) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    options: dict[str, Any] = {"security_protocol": protocol}
    if protocol != "SSL":
        options.update(sasl_mechanism="SCRAM-SHA-512" if protocol == "SASL_SSL" else "PLAIN",
                       sasl_plain_username=ALICE, sasl_plain_password=ALICE_PASSWORD)
    if protocol == "SASL_SSL":
        options["ssl_context"] = create_ssl_context(cafile=str(certs.ca))
    elif protocol == "SSL":
        options["ssl_context"] = create_ssl_context(cafile=str(certs.ca), certfile=str(certs.client_cert),
                                                    keyfile=str(certs.client_key))

    async def main() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **options)
        await producer.start()
        try:
            for i in range(COUNT):
                await producer.send_and_wait(topic, f"ak-{i}".encode(), partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                    enable_auto_commit=False, **options)
        await consumer.start()
        values: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                while len(values) < COUNT:
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        values += [r.value for r in records]
            await consumer.commit()
        finally:
            await consumer.stop()
        return values

    return asyncio.run(main())


# ---------------------------------------------------------------------- the cases


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka", "aiokafka"])
def test_python_clients_produce_consume_and_commit(secure: tuple[BrokerProcess, Certificates], client: str,
                                                   protocol: str) -> None:
    broker, certs = secure
    bootstrap = broker.address(protocol)
    tag = f"{client}-{protocol}".lower().replace("_", "-")
    topic, group = f"sec-{tag}", f"sec-{tag}-group"
    if client == "kafka-python":
        values = run_kafka_python(bootstrap, kafka_python_options(protocol, certs), topic, group)
    elif client == "confluent-kafka":
        values = run_confluent(bootstrap, confluent_options(protocol, certs), topic, group)
    else:
        values = run_aiokafka(bootstrap, protocol, certs, topic, group)
    assert len(values) == COUNT, values
    assert committed(broker, certs, group, topic) == COUNT


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_kafkajs_produces_consumes_and_commits(secure: tuple[BrokerProcess, Certificates], node: str,  # noqa: F811
                                               protocol: str) -> None:
    broker, certs = secure
    tag = f"kafkajs-{protocol}".lower().replace("_", "-")
    options: dict[str, Any] = {"topic": f"sec-{tag}", "group": f"sec-{tag}-group", "count": COUNT}
    if protocol in ("SASL_SSL", "SSL"):
        ssl: dict[str, Any] = {"ca": [Path(certs.ca).read_text()]}
        if protocol == "SSL":
            ssl.update(cert=Path(certs.client_cert).read_text(), key=Path(certs.client_key).read_text())
        options["ssl"] = ssl
    if protocol != "SSL":
        options["sasl"] = {"mechanism": "scram-sha-512" if protocol == "SASL_SSL" else "plain",
                           "username": ALICE, "password": ALICE_PASSWORD}
    # run_script points kafkajs at broker.bootstrap: give it this listener's address.
    view = BrokerProcess(broker.data_dir)
    host, _, port = broker.address(protocol).rpartition(":")
    view.host, view.port = host, int(port)
    view.lines = broker.lines
    result = run_script(node, "secure.js", view, timeout=60, **options)
    assert result["produced"] == COUNT and len(result["consumed"]) == COUNT
    assert result["committed"] == COUNT
    assert committed(broker, certs, options["group"], options["topic"]) == COUNT

"""ApiKey names every Kafka API, and every declared message carries the right one."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from protocol.api_keys import ApiKey
from protocol.messages import PAIRS, REQUESTS

SPEC_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "kafka-spec"


def kafka_style(api_name: str) -> str:
    """Kafka's constant name for an API: ConsumerGroupHeartbeat -> CONSUMER_GROUP_HEARTBEAT."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", api_name).upper()


def test_well_known_keys() -> None:
    assert ApiKey.PRODUCE == 0
    assert ApiKey.JOIN_GROUP == 11
    assert ApiKey.API_VERSIONS == 18
    assert ApiKey.CONSUMER_GROUP_HEARTBEAT == 68
    assert ApiKey.CONSUMER_GROUP_DESCRIBE == 69


def test_keys_are_dense_and_unaliased() -> None:
    """Kafka assigns ids without gaps and never reuses one, so neither may we."""
    assert [key.value for key in ApiKey] == list(range(len(ApiKey)))


@pytest.mark.parametrize(("request_message", "response_message"), PAIRS, ids=[r.name for r, _ in PAIRS])
def test_declared_messages_carry_their_api_key(request_message: object, response_message: object) -> None:
    for message in (request_message, response_message):
        key = message.api_key  # type: ignore[attr-defined]
        assert isinstance(key, ApiKey)
        name = message.name.removesuffix("Request").removesuffix("Response")  # type: ignore[attr-defined]
        assert key.name == kafka_style(name)


def test_requests_are_indexed_by_api_key() -> None:
    assert REQUESTS[ApiKey.OFFSET_COMMIT].name == "OffsetCommitRequest"
    assert REQUESTS[8] is REQUESTS[ApiKey.OFFSET_COMMIT]


def test_every_api_in_the_index_has_its_key() -> None:
    index = SPEC_DIR / "api-index.tsv"
    if not index.is_file():
        pytest.skip(f"Kafka spec not found at {index}")
    with index.open() as handle:
        rows = [(int(row["api_key"]), row["api"]) for row in csv.DictReader(handle, delimiter="\t")]
    assert rows
    for key, api in rows:
        assert ApiKey(key).name == kafka_style(api)

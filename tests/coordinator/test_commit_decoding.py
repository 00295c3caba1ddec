"""OffsetCommit bodies of every version, decoded into the typed request the rules read.

``decode_offset_commit`` builds its named tuples positionally (the commit path's cost), so
this checks each field by name against what the wire said, version by version.
"""

from __future__ import annotations

import pytest

from broker.coordinator.api import BINDINGS
from broker.coordinator.requests import ClientInfo, CommitPartition, CommitTopic, OffsetCommitRequest
from protocol.api_keys import ApiKey
from protocol.codec import decode_request, encode_request
from protocol.messages import REQUESTS

MESSAGE = REQUESTS[ApiKey.OFFSET_COMMIT]


def wire_body(version: int) -> dict[str, object]:
    body: dict[str, object] = {"group_id": "g", "topics": [
        {"name": "t1", "partitions": [
            {"partition_index": 0, "committed_offset": 10, "committed_leader_epoch": 3,
             "commit_timestamp": 1234, "committed_metadata": "meta"},
            {"partition_index": 4, "committed_offset": 0, "committed_leader_epoch": -1,
             "commit_timestamp": -1, "committed_metadata": None},
        ]},
        {"name": "t2", "partitions": [
            {"partition_index": 1, "committed_offset": 99, "committed_leader_epoch": 0,
             "commit_timestamp": 5, "committed_metadata": ""},
        ]},
    ]}
    if version >= 1:
        body.update(generation_id_or_member_epoch=7, member_id="m-1")
    if 2 <= version <= 4:
        body["retention_time_ms"] = 60_000
    if version >= 7:
        body["group_instance_id"] = "static-1"
    return body


@pytest.mark.parametrize("version", range(MESSAGE.min_version, MESSAGE.max_version + 1))
def test_every_field_of_every_version(version: int) -> None:
    request = decode_request(encode_request(ApiKey.OFFSET_COMMIT, version, 1, wire_body(version))[4:])
    typed = BINDINGS[ApiKey.OFFSET_COMMIT].decode(version, request.body, ClientInfo())

    epochs = version >= 6
    client_time = version == 1
    assert typed == OffsetCommitRequest(
        group_id="g",
        generation_id_or_member_epoch=7 if version >= 1 else -1,
        member_id="m-1" if version >= 1 else "",
        group_instance_id="static-1" if version >= 7 else None,
        retention_ms=60_000 if 2 <= version <= 4 else -1,
        topics=(
            CommitTopic(name="t1", partitions=(
                CommitPartition(partition=0, offset=10, leader_epoch=3 if epochs else -1, metadata="meta",
                                commit_timestamp=1234 if client_time else -1),
                CommitPartition(partition=4, offset=0, leader_epoch=-1, metadata="",
                                commit_timestamp=-1),
            )),
            CommitTopic(name="t2", partitions=(
                CommitPartition(partition=1, offset=99, leader_epoch=0 if epochs else -1, metadata="",
                                commit_timestamp=5 if client_time else -1),
            )),
        ),
        consumer_protocol_version=version >= 9,
        transactional=False,
    )
    assert typed.consumer_protocol_version is (version >= 9)
    assert typed.transactional is False

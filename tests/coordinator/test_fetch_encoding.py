"""OffsetFetch replies packed directly are the bytes the generic codec makes, at every version.

``offset_fetch_body`` skips the dicts and the schema-driven encoder for the reply a fetch
sends most; the generic path (``encode_offset_fetch`` through ``protocol.codec``) is the
reference it must match byte for byte, whatever the result holds.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.coordinator.api import BINDINGS, encode_offset_fetch
from broker.coordinator.packed import offset_fetch_body
from broker.coordinator.requests import FetchedGroup, FetchedPartition, OffsetFetchResult
from protocol.api_keys import ApiKey
from protocol.codec import decode_response, encode_response, encode_response_body, response_frame
from protocol.errors import ErrorCode
from protocol.messages import RESPONSES

MESSAGE = RESPONSES[ApiKey.OFFSET_FETCH]
VERSIONS = range(MESSAGE.min_version, MESSAGE.max_version + 1)

names = st.text(min_size=0, max_size=140)  # past 127 bytes a compact length takes two bytes
errors = st.sampled_from([ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNSTABLE_OFFSET_COMMIT,
                          ErrorCode.GROUP_AUTHORIZATION_FAILED])
partitions = st.builds(
    FetchedPartition,
    partition=st.integers(0, 2**31 - 1),
    offset=st.integers(-1, 2**63 - 1),
    leader_epoch=st.integers(-1, 2**31 - 1),
    metadata=st.one_of(st.none(), names),
    error=errors,
)
topics = st.lists(st.tuples(names, st.lists(partitions, max_size=4).map(tuple)), max_size=4).map(tuple)
groups = st.builds(FetchedGroup, group_id=names, topics=topics, error=errors)


def reference(version: int, result: OffsetFetchResult) -> bytes:
    return encode_response_body(ApiKey.OFFSET_FETCH, version, encode_offset_fetch(version, result))


@settings(max_examples=150, deadline=None)
@given(group=groups, more=st.lists(groups, max_size=3))
def test_same_bytes_as_the_generic_codec(group: FetchedGroup, more: list[FetchedGroup]) -> None:
    for version in VERSIONS:
        result = OffsetFetchResult((group, *more) if version >= 8 else (group,))
        assert offset_fetch_body(version, result) == reference(version, result), version


def test_many_topics_and_partitions_need_longer_lengths() -> None:
    """Arrays of 127 elements and more take a two-byte compact length (flexible versions)."""
    group = FetchedGroup("g", tuple(
        (f"topic-{t}", tuple(FetchedPartition(p, p * 10, 1, "m" * p) for p in range(200)))
        for t in range(130)))
    for version in VERSIONS:
        result = OffsetFetchResult((group,))
        assert offset_fetch_body(version, result) == reference(version, result), version


def test_the_coordinator_answers_with_it() -> None:
    """The binding carries the packed encoder, and a reply built from it decodes as the result."""
    binding = BINDINGS[ApiKey.OFFSET_FETCH]
    assert binding.encode_body is offset_fetch_body
    result = OffsetFetchResult((FetchedGroup("g", (("t", (FetchedPartition(0, 42, 3, "meta"),)),)),))
    for version in VERSIONS:
        frame = response_frame(ApiKey.OFFSET_FETCH, version, 7, offset_fetch_body(version, result))
        assert frame == encode_response(ApiKey.OFFSET_FETCH, version, 7, encode_offset_fetch(version, result))
        correlation_id, body = decode_response(ApiKey.OFFSET_FETCH, version, frame[4:])
        assert correlation_id == 7
        fetched = body.groups[0].topics[0] if version >= 8 else body.topics[0]
        assert (fetched.name, fetched.partitions[0].committed_offset) == ("t", 42)

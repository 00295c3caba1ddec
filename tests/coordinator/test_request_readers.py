"""OffsetCommit, OffsetFetch and ConsumerGroupHeartbeat bodies read straight from the frame give
what the generic path gives.

``read_offset_commit``, ``read_offset_fetch`` and ``read_consumer_group_heartbeat``
(``broker.coordinator.packed``) skip the generic decoder's ``Container`` per group, topic
and partition. Where one takes a body, its request equals what ``broker.coordinator.api``
decodes from the generic body; where it does not, the generic decoder runs, so malformed
bytes are refused exactly as before; and the generic body stays available, decoded on
demand, to whoever asks for it.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import example, given
from hypothesis import strategies as st

from broker.config import Config
from broker.context import BrokerContext
from broker.coordinator.api import (
    BINDINGS,
    decode_consumer_group_heartbeat,
    decode_offset_commit,
    decode_offset_fetch,
)
from broker.coordinator.packed import read_consumer_group_heartbeat, read_offset_commit, read_offset_fetch
from broker.coordinator.requests import ClientInfo
from broker.group_service import GroupService
from broker.handlers import groups
from broker.router import Router
from broker.slots import Slot
from protocol.api_keys import ApiKey
from protocol.codec import Request, TypedReader, decode_request, decode_response, encode_request
from protocol.errors import ProtocolError, UnsupportedRequest
from protocol.messages import REQUESTS

MESSAGE = REQUESTS[ApiKey.OFFSET_COMMIT]
VERSIONS = range(MESSAGE.min_version, MESSAGE.max_version + 1)
READERS: dict[int, TypedReader] = {ApiKey.OFFSET_COMMIT: read_offset_commit, ApiKey.OFFSET_FETCH: read_offset_fetch,
                                   ApiKey.CONSUMER_GROUP_HEARTBEAT: read_consumer_group_heartbeat}
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
# Mostly short; sometimes past 126 bytes, where a flexible version's length takes two bytes.
TEXT = st.one_of(st.text(max_size=12), st.text(min_size=60, max_size=140))


def _partition() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({
        "partition_index": INT32, "committed_offset": INT64, "committed_leader_epoch": INT32,
        "commit_timestamp": INT64, "committed_metadata": st.one_of(st.none(), TEXT)})


BODIES = st.fixed_dictionaries({
    "group_id": TEXT, "generation_id_or_member_epoch": INT32, "member_id": TEXT,
    "group_instance_id": st.one_of(st.none(), TEXT), "retention_time_ms": INT64,
    "topics": st.lists(st.fixed_dictionaries({"name": TEXT, "partitions": st.lists(_partition(), max_size=4)}),
                       max_size=3)})


def _frame(version: int, body: dict[str, Any]) -> bytes:
    return encode_request(ApiKey.OFFSET_COMMIT, version, 1, body, "client")[4:]


def _one_byte_lengths(body: dict[str, Any]) -> bool:
    """Whether every string of the body is under 127 bytes (its arrays are shorter than that)."""
    texts = [body["group_id"], body["member_id"], body["group_instance_id"] or ""]
    texts += [t["name"] for t in body["topics"]]
    texts += [p["committed_metadata"] or "" for t in body["topics"] for p in t["partitions"]]
    return all(len(text.encode()) < 127 for text in texts)


def _generic(frame: bytes, decode: Any = decode_offset_commit) -> Any:
    """The generic path's typed request, or the exception type it refuses the frame with."""
    try:
        request = decode_request(frame)
    except (ProtocolError, UnsupportedRequest) as exc:
        return type(exc)
    return decode(request.header.api_version, request.body, ClientInfo())


def _same_outcome(frame: bytes, decode: Any) -> None:
    """Read with the readers, ``frame`` is refused, or decoded, as the generic path does it."""
    generic = _generic(frame, decode)
    try:
        request = decode_request(frame, typed=READERS)
    except (ProtocolError, UnsupportedRequest) as exc:
        assert generic is type(exc), frame
        return
    assert not isinstance(generic, type), frame
    typed = request.typed or decode(request.header.api_version, request.body, ClientInfo())
    assert typed == generic, frame


def _damage(frame: bytes, data: Any) -> bytes:
    """``frame`` with one byte flipped, cut short, or with bytes put in, past its API key,
    version and correlation id."""
    damaged = bytearray(frame)
    start = data.draw(st.integers(8, len(damaged)))
    mutation = data.draw(st.sampled_from(["flip", "cut", "append"]))
    if mutation == "flip" and start < len(damaged):
        damaged[start] ^= data.draw(st.integers(1, 255))
    elif mutation == "cut":
        del damaged[start:]
    else:
        damaged[start:start] = data.draw(st.binary(min_size=1, max_size=4))
    return bytes(damaged)


def _reads_as_generic(frame: bytes, decode: Any, taken: bool) -> None:
    """What the reader gives for ``frame`` is what the generic path gives, and it reads the
    frame if ``taken`` (the shapes clients send are read, not handed back); the generic body
    stays there, decoded when asked for."""
    generic = decode_request(frame)
    request = decode_request(frame, typed=READERS)
    version = generic.header.api_version
    if request.typed is not None:
        assert request.typed == decode(version, generic.body, ClientInfo())
    if taken:
        assert request.typed is not None
    elif version < 6 and generic.header.api_key != ApiKey.CONSUMER_GROUP_HEARTBEAT:
        assert request.typed is None
    assert request.body == generic.body
    assert request == generic and request.header == generic.header


@given(version=st.sampled_from(VERSIONS), body=BODIES)
def test_what_it_reads_is_what_the_generic_path_gives(version: int, body: dict[str, Any]) -> None:
    _reads_as_generic(_frame(version, body), decode_offset_commit,
                      version >= 6 and (version < 8 or _one_byte_lengths(body)))


@given(version=st.sampled_from(range(6, MESSAGE.max_version + 1)), body=BODIES, data=st.data())
@example(version=8, body={"group_id": "g", "generation_id_or_member_epoch": 1, "member_id": "m",
                          "group_instance_id": None, "retention_time_ms": -1,
                          "topics": [{"name": "t", "partitions": []}]},
         data=None)
def test_damaged_bytes_are_refused_as_before(version: int, body: dict[str, Any], data: Any) -> None:
    frame = _frame(version, body)
    if data is None:  # a tagged field in the last byte: handed back, the generic path reads it
        _same_outcome(frame[:-1] + b"\x01\x00\x00", decode_offset_commit)
    else:
        _same_outcome(_damage(frame, data), decode_offset_commit)


@pytest.mark.parametrize("version", VERSIONS)
def test_malformed_bodies_are_refused_with_the_generic_error(version: int) -> None:
    frame = _frame(version, {"group_id": "g", "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": 5, "committed_metadata": "m"}]}]})
    cut = frame[:-6]
    with pytest.raises(ProtocolError) as generic:
        decode_request(cut)
    with pytest.raises(ProtocolError) as read:
        decode_request(cut, typed=READERS)
    assert str(read.value) == str(generic.value)


@pytest.mark.parametrize("field", ["group_instance_id", "committed_metadata"])
def test_a_negative_length_other_than_null_is_refused(field: str) -> None:
    """v7 strings have int16 lengths: -1 is null, -2 is malformed even where the rest reads."""
    body = {"group_id": "g", "member_id": "member", "group_instance_id": None, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5, "committed_metadata": None}]}]}
    frame = _frame(7, body)
    null = frame.index(b"\xff\xff", frame.index(b"member")) if field == "group_instance_id" else len(frame) - 2
    assert frame[null:null + 2] == b"\xff\xff"
    damaged = frame[:null] + b"\xff\xfe" + frame[null + 2:]
    assert _generic(damaged) is ProtocolError
    with pytest.raises(ProtocolError):
        decode_request(damaged, typed=READERS)


def test_a_request_with_its_body_decoded_compares_as_before() -> None:
    frame = _frame(7, {"group_id": "g", "topics": []})
    a, b = decode_request(frame, typed=READERS), decode_request(frame, typed=READERS)
    assert a.typed is not None and a == b and a == decode_request(frame)
    assert "OffsetCommitRequest" in repr(a) and "group_id" in repr(a)
    plain = Request(a.header, a.message, a.body)
    assert plain.typed is None and plain == a


# ---------------------------------------------------------------------- OffsetFetch

FETCH = REQUESTS[ApiKey.OFFSET_FETCH]
FETCH_VERSIONS = range(FETCH.min_version, FETCH.max_version + 1)
FETCH_TOPICS = st.lists(st.fixed_dictionaries({"name": TEXT, "partition_indexes": st.lists(INT32, max_size=5)}),
                        max_size=3)
FETCH_BODIES = st.fixed_dictionaries({
    "group_id": TEXT, "topics": st.one_of(st.none(), FETCH_TOPICS), "require_stable": st.booleans(),
    "groups": st.lists(st.fixed_dictionaries({
        "group_id": TEXT, "member_id": st.one_of(st.none(), TEXT), "member_epoch": INT32,
        "topics": st.one_of(st.none(), FETCH_TOPICS)}), max_size=3)})


def _fetch_frame(version: int, body: dict[str, Any]) -> bytes:
    if version < 2 and body["topics"] is None:  # all topics: from v2
        body = {**body, "topics": []}
    return encode_request(ApiKey.OFFSET_FETCH, version, 1, body, "client")[4:]


def _fetch_one_byte_lengths(version: int, body: dict[str, Any]) -> bool:
    groups = body["groups"] if version >= 8 else [{"group_id": body["group_id"], "topics": body["topics"]}]
    texts = [g["group_id"] for g in groups] + [g.get("member_id") or "" for g in groups if version >= 9]
    texts += [t["name"] for g in groups for t in g["topics"] or ()]
    return all(len(text.encode()) < 127 for text in texts)


@given(version=st.sampled_from(FETCH_VERSIONS), body=FETCH_BODIES)
def test_a_fetch_it_reads_is_what_the_generic_path_gives(version: int, body: dict[str, Any]) -> None:
    _reads_as_generic(_fetch_frame(version, body), decode_offset_fetch,
                      version >= 6 and _fetch_one_byte_lengths(version, body))


@given(version=st.sampled_from(range(6, FETCH.max_version + 1)), body=FETCH_BODIES, data=st.data())
def test_damaged_fetches_are_refused_as_before(version: int, body: dict[str, Any], data: Any) -> None:
    _same_outcome(_damage(_fetch_frame(version, body), data), decode_offset_fetch)


# ---------------------------------------------------------------------- ConsumerGroupHeartbeat

HEARTBEAT = REQUESTS[ApiKey.CONSUMER_GROUP_HEARTBEAT]
HEARTBEAT_VERSIONS = range(HEARTBEAT.min_version, HEARTBEAT.max_version + 1)
NULLABLE_TEXT = st.one_of(st.none(), TEXT)
HEARTBEAT_BODIES = st.fixed_dictionaries({
    "group_id": TEXT, "member_id": TEXT, "member_epoch": INT32, "instance_id": NULLABLE_TEXT,
    "rack_id": NULLABLE_TEXT, "rebalance_timeout_ms": INT32,
    "subscribed_topic_names": st.one_of(st.none(), st.lists(TEXT, max_size=3)),
    "subscribed_topic_regex": NULLABLE_TEXT, "server_assignor": NULLABLE_TEXT,
    "topic_partitions": st.one_of(st.none(), st.lists(st.fixed_dictionaries({
        "topic_id": st.uuids(), "partitions": st.lists(INT32, max_size=4)}), max_size=3))})
#: What a steady member sends: nothing changed, every nullable field null.
STEADY_HEARTBEAT = {"group_id": "g", "member_id": "m", "member_epoch": 4, "instance_id": None, "rack_id": None,
                    "rebalance_timeout_ms": -1, "subscribed_topic_names": None, "subscribed_topic_regex": None,
                    "server_assignor": None, "topic_partitions": None}
FULL_HEARTBEAT = {**STEADY_HEARTBEAT, "instance_id": "i", "rack_id": "r", "subscribed_topic_names": ["t", "u"],
                  "subscribed_topic_regex": "t.*", "server_assignor": "uniform",
                  "topic_partitions": [{"topic_id": uuid.UUID(int=7), "partitions": [0, 2]}]}


def _heartbeat_frame(version: int, body: dict[str, Any]) -> bytes:
    return encode_request(ApiKey.CONSUMER_GROUP_HEARTBEAT, version, 1, body, "client")[4:]


def _heartbeat_one_byte_lengths(version: int, body: dict[str, Any]) -> bool:
    texts = [body["group_id"], body["member_id"], body["instance_id"] or "", body["rack_id"] or "",
             body["server_assignor"] or "", *(body["subscribed_topic_names"] or ())]
    if version >= 1:
        texts.append(body["subscribed_topic_regex"] or "")
    return all(len(text.encode()) < 127 for text in texts)


@given(version=st.sampled_from(HEARTBEAT_VERSIONS), body=HEARTBEAT_BODIES)
@example(version=1, body=STEADY_HEARTBEAT)
@example(version=0, body=FULL_HEARTBEAT)
def test_a_consumer_group_heartbeat_it_reads_is_what_the_generic_path_gives(version: int,
                                                                            body: dict[str, Any]) -> None:
    _reads_as_generic(_heartbeat_frame(version, body), decode_consumer_group_heartbeat,
                      _heartbeat_one_byte_lengths(version, body))


def test_a_consumer_group_heartbeat_version_past_the_readers_is_left_to_the_generic_decoder() -> None:
    frame = _heartbeat_frame(1, FULL_HEARTBEAT)
    position = 8 + 2 + len(b"client") + 1  # header v2: key, version, correlation id, client id, no tags
    assert read_consumer_group_heartbeat(1, frame, position) == decode_consumer_group_heartbeat(
        1, decode_request(frame).body, ClientInfo())
    assert read_consumer_group_heartbeat(HEARTBEAT.max_version + 1, frame, position) is None


@given(version=st.sampled_from(HEARTBEAT_VERSIONS), body=HEARTBEAT_BODIES, data=st.data())
def test_damaged_consumer_group_heartbeats_are_refused_as_before(version: int, body: dict[str, Any],
                                                                  data: Any) -> None:
    _same_outcome(_damage(_heartbeat_frame(version, body), data), decode_consumer_group_heartbeat)


# ---------------------------------------------------------------------- every byte

#: Values each byte of a frame is set to in turn: one-byte and longer lengths, nulls, a tag.
BYTE_VALUES = (0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF)
COMMIT_SAMPLE = {"group_id": "g", "generation_id_or_member_epoch": 3, "member_id": "m", "group_instance_id": "i",
                 "topics": [{"name": "t", "partitions": [
                     {"partition_index": 1, "committed_offset": 9, "committed_leader_epoch": 2,
                      "committed_metadata": "md"},
                     {"partition_index": 2, "committed_offset": 5, "committed_metadata": None},
                     {"partition_index": 3, "committed_offset": 7, "committed_metadata": ""}]}]}
FETCH_SAMPLE = {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [1, 2]}], "require_stable": True,
                "groups": [{"group_id": "g", "member_id": "m", "member_epoch": 4,
                            "topics": [{"name": "t", "partition_indexes": [1]}]},
                           {"group_id": "h", "member_id": None, "topics": None}]}


@pytest.mark.parametrize("api, version", [(ApiKey.OFFSET_COMMIT, v) for v in range(6, MESSAGE.max_version + 1)]
                         + [(ApiKey.OFFSET_FETCH, v) for v in range(6, FETCH.max_version + 1)]
                         + [(ApiKey.CONSUMER_GROUP_HEARTBEAT, v) for v in HEARTBEAT_VERSIONS])
def test_every_byte_set_to_every_kind_of_value_and_every_cut(api: int, version: int) -> None:
    decode: Any
    if api == ApiKey.OFFSET_COMMIT:
        frame, decode = _frame(version, COMMIT_SAMPLE), decode_offset_commit
    elif api == ApiKey.OFFSET_FETCH:
        frame, decode = _fetch_frame(version, FETCH_SAMPLE), decode_offset_fetch
    else:
        frame, decode = _heartbeat_frame(version, FULL_HEARTBEAT), decode_consumer_group_heartbeat
    assert decode_request(frame, typed=READERS).typed is not None
    for position in range(8, len(frame)):
        for value in BYTE_VALUES:
            _same_outcome(frame[:position] + bytes((value,)) + frame[position + 1:], decode)
        _same_outcome(frame[:position], decode)


@pytest.mark.parametrize("version", [6, 7])
def test_every_two_bytes_set_to_a_classic_null(version: int) -> None:
    """Where a classic version's string length is an int16, -1 is null: two bytes no single
    byte's change makes. Every pair set to it in turn (a group id, member id or topic name
    may not be null; an instance id and metadata may)."""
    frame = _frame(version, COMMIT_SAMPLE)
    for position in range(8, len(frame) - 1):
        _same_outcome(frame[:position] + b"\xff\xff" + frame[position + 2:], decode_offset_commit)


# ---------------------------------------------------------------------- through the router


async def _commit(router: Router, body: dict[str, Any], version: int = 8) -> list[int]:
    outcome = router.route(_frame(version, body), "127.0.0.1:1")
    assert isinstance(outcome, Slot)
    with trio.fail_after(5):
        await outcome.event.wait()
    assert outcome.frame is not None
    reply = decode_response(ApiKey.OFFSET_COMMIT, version, outcome.frame[4:])[1]
    return [p.error_code for t in reply.topics for p in t.partitions]


def _router(tmp_path: Path) -> tuple[Router, GroupService]:
    config = Config({"offsets.topic.num.partitions": 1})
    service = GroupService.open(config, tmp_path)
    router = Router(BrokerContext(config=config, node_id=0, host="127.0.0.1", port=9092, cluster_id="c"))
    groups.register(router, service)
    return router, service


async def test_admin_commits_read_from_the_frame_are_still_audited(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    router, service = _router(tmp_path)
    admin = {"group_id": "billing", "generation_id_or_member_epoch": -1, "member_id": "", "topics": [
        {"name": "orders", "partitions": [{"partition_index": 0, "committed_offset": 17}]}]}
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        with caplog.at_level(logging.INFO, logger="kcoord.admin"):
            assert await _commit(router, admin) == [0]
            assert await _commit(router, {**admin, "topics": [
                {"name": "orders", "partitions": [{"partition_index": 0, "committed_offset": 3}]}]}, version=7) == [0]
        nursery.cancel_scope.cancel()
    lines = [r.getMessage() for r in caplog.records if r.name == "kcoord.admin"]
    assert [line.split("committed offsets of group ")[1] for line in lines] == ["billing: orders-0 - -> 17",
                                                                               "billing: orders-0 17 -> 3"]
    await service.close()


def test_the_reader_runs_only_where_nothing_reads_the_body_first(tmp_path: Path) -> None:
    router = Router(BrokerContext(config=Config({}), node_id=0, host="127.0.0.1", port=9092, cluster_id="c"))
    seen: list[Request] = []

    def handler(request: Request, peer: str) -> None:
        seen.append(request)

    binding = BINDINGS[ApiKey.OFFSET_COMMIT]
    router.register(ApiKey.OFFSET_COMMIT, handler, binding.read)
    frame = _frame(8, {"group_id": "g", "topics": []})
    router.route(frame, "127.0.0.1:1")
    assert seen[-1].typed is not None and seen[-1].typed.group_id == "g"

    router.routing = lambda request: None  # a cluster node reads the generic body to route
    router.route(frame, "127.0.0.1:1")
    assert seen[-1].typed is None and seen[-1].body.group_id == "g"

    router.routing = None
    router.register(ApiKey.OFFSET_COMMIT, handler)  # registered again without a reader: none runs
    router.route(frame, "127.0.0.1:1")
    assert seen[-1].typed is None

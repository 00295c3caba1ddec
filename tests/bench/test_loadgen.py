"""The bench's load generator: what it counts must be what the broker answered.

``bench.loadgen.pipelined`` keeps a window of requests in flight on one connection and
matches each reply to the oldest request. The unit tests drive it against a scripted peer
over an in-memory stream; the last one against the real broker, whose committed offset
shows that every request sent was answered and counted.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

from bench import loadgen
from bench.cluster_bench import COMMIT_ERROR
from tests.support.broker_process import BrokerProcess

_SIZE = struct.Struct(">i")


def _frame(correlation_id: int) -> bytes:
    """A request frame: size, api key, version, correlation id (all a scripted peer reads)."""
    return _SIZE.pack(8) + struct.pack(">hhi", 12, 3, correlation_id)


class Peer:
    """Answers every request it has read before reading more, in pieces cut at random.

    ``swap`` answers the first two requests of a read in the wrong order; ``mute_after``
    stops answering after that many requests; every third reply carries an error code.
    """

    def __init__(self, stream: trio.abc.Stream, seed: int, swap: bool = False, mute_after: int | None = None) -> None:
        self.stream = stream
        self.random = random.Random(seed)
        self.swap = swap
        self.mute_after = mute_after
        self.received = 0
        self.answered = 0
        self.most_in_flight = 0

    async def serve(self) -> None:
        try:
            await self._serve()
        except (trio.BrokenResourceError, trio.ClosedResourceError):  # the load generator closed its end
            pass

    async def _serve(self) -> None:
        buffer = bytearray()
        while True:
            data = await self.stream.receive_some(1 << 16)
            if not data:
                return
            buffer += data
            ids = []
            while len(buffer) >= 4 and len(buffer) >= 4 + _SIZE.unpack_from(buffer)[0]:
                end = 4 + _SIZE.unpack_from(buffer)[0]
                ids.append(struct.unpack_from(">i", buffer, 8)[0])
                del buffer[:end]
            self.received += len(ids)
            self.most_in_flight = max(self.most_in_flight, self.received - self.answered)
            if self.mute_after is not None and self.received > self.mute_after:
                continue
            if self.swap and len(ids) >= 2:
                ids[0], ids[1] = ids[1], ids[0]
            replies = b"".join(_SIZE.pack(6) + struct.pack(">ih", cid, 1 if cid % 3 == 0 else 0) for cid in ids)
            while replies:
                cut = self.random.randint(1, len(replies))
                await self.stream.send_all(replies[:cut])
                replies = replies[cut:]
            self.answered += len(ids)


def _opener(stream: trio.abc.Stream) -> Callable[[tuple[str, int]], Awaitable[trio.abc.Stream]]:
    async def open_(address: tuple[str, int]) -> trio.abc.Stream:
        return stream
    return open_


def _has_error(frame: bytes) -> bool:
    return frame[4:6] != b"\x00\x00"


@pytest.mark.parametrize("depth", [1, 3, 8])
@pytest.mark.parametrize("limit", [None, 13])
async def test_every_reply_is_counted_once_and_the_window_holds(depth: int, limit: int | None) -> None:
    # Without a limit the connection sends for 0.2 s; with one, that many requests, however long.
    client, server = trio.testing.memory_stream_pair()
    peer = Peer(server, seed=depth)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.serve)
        with trio.fail_after(10):
            result = await loadgen.pipelined(("peer", 0), _frame, 0.2 if limit is None else 60.0, depth,
                                             _has_error, opener=_opener(client), limit=limit)
        nursery.cancel_scope.cancel()
    assert result.requests == peer.received == peer.answered
    assert result.requests > depth if limit is None else result.requests == limit
    assert len(result.latencies) == result.requests
    assert result.errors == peer.received // 3
    assert peer.most_in_flight == (depth if limit is None else min(depth, limit))


async def test_a_reply_out_of_order_is_an_error() -> None:
    client, server = trio.testing.memory_stream_pair()
    peer = Peer(server, seed=1, swap=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.serve)
        with pytest.raises(ConnectionError, match="out of order"):
            await loadgen.pipelined(("peer", 0), _frame, 0.2, 8, opener=_opener(client))
        nursery.cancel_scope.cancel()


async def test_replies_that_never_come_are_waited_for_a_bounded_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loadgen, "DRAIN_SECONDS", 0.1)
    client, server = trio.testing.memory_stream_pair()
    peer = Peer(server, seed=2, mute_after=20)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.serve)
        with trio.fail_after(10):
            result = await loadgen.pipelined(("peer", 0), _frame, 0.05, 4, opener=_opener(client))
        nursery.cancel_scope.cancel()
    assert result.requests == peer.answered < peer.received


@pytest.mark.integration
def test_every_commit_sent_to_the_broker_is_answered_and_counted(broker: BrokerProcess) -> None:
    address = (broker.host, broker.port)
    trio.run(loadgen.create_topic, address, "bench", 1)
    factory = loadgen.commit_factory("loadgen-check", "bench", 1)
    result = trio.run(loadgen.pipelined, address, factory, 0.3, 8, COMMIT_ERROR)
    assert result.errors == 0
    assert result.requests == factory.counter > 8

    async def committed() -> int:
        conn = await loadgen.Connection.open(address)
        try:
            body = await conn.request(9, 7, {"group_id": "loadgen-check", "require_stable": False,
                                             "topics": [{"name": "bench", "partition_indexes": [0]}]})
        finally:
            await conn.aclose()
        return int(body.topics[0].partitions[0].committed_offset)

    assert trio.run(committed) == factory.counter


@pytest.mark.integration
def test_a_group_forms_and_its_full_generation_does_not_heartbeat(broker_factory: Callable[..., BrokerProcess],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``form_group`` ends with every member synced into one generation that holds all of
    them; a member of that generation waits for the rest rather than heartbeating (a client
    heartbeats every heartbeat.interval.ms), while members of an earlier, partial generation
    heartbeat to hear of the rebalance and rejoin."""
    broker = broker_factory({"group.initial.rebalance.delay.ms": 0})
    members = 40
    heartbeats: list[int] = []  # the generation of each heartbeat sent
    request = loadgen.Connection.request

    async def counting(self: loadgen.Connection, api_key: int, version: int, body: object) -> object:
        if api_key == 12:
            heartbeats.append(body["generation_id"])  # type: ignore[index]
        return await request(self, api_key, version, body)

    monkeypatch.setattr(loadgen.Connection, "request", counting)
    elapsed, formed = trio.run(loadgen.form_group, (broker.host, broker.port), "formed", members, 60.0)
    try:
        assert elapsed is not None
        assert len(formed) == members
        assert len({member_id for _, member_id, _ in formed}) == members
        generations = {generation for _, _, generation in formed}
        assert len(generations) == 1
        assert generations.pop() not in heartbeats
    finally:
        trio.run(loadgen.close_all, formed)

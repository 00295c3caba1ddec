"""A protocol-level load generator: raw frames over trio, pipelined to a set depth.

No client library sits in the way. Request frames are built from a template encoded once
with the project's own codec, then patched per request (correlation id, and for commits
strictly increasing offsets), so no two requests carry the same frame and a broker cannot
shortcut an unchanged commit.
"""

from __future__ import annotations

import collections
import struct
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from protocol.codec import decode_response, encode_request

_SIZE = struct.Struct(">i")
_CID_POS = 8  # size(4) + api_key(2) + api_version(2)
_SENTINEL = 0x5EED_0000_0000_0000
#: What ``pipelined`` asks of one read: its replies are small, and a larger ask costs the
#: allocation of that much for every read.
RECEIVE_BYTES = 1 << 16
#: How long ``pipelined`` waits, once its time is up, for the replies still in flight (and so
#: the longest a broker that stopped answering holds it beyond its time).
DRAIN_SECONDS = 30.0


@dataclass
class Result:
    requests: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    seconds: float = 0.0

    def merge(self, other: Result) -> None:
        self.requests += other.requests
        self.errors += other.errors
        self.latencies.extend(other.latencies)

    def percentile(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


#: Opens a connection to a broker: plain TCP by default; bench.security_bench passes one
#: that adds TLS and a SASL login.
Opener = Callable[[tuple[str, int]], Awaitable[trio.abc.Stream]]


async def open_plain(address: tuple[str, int]) -> trio.abc.Stream:
    return await trio.open_tcp_stream(*address)


async def read_frame(stream: trio.abc.Stream, buffer: bytearray) -> bytes:
    """The next size-prefixed frame; what follows it stays in ``buffer``.

    The pieces of a frame still to come are gathered and joined once: growing the buffer
    piece by piece would copy a large reply again and again (over TLS a piece is one
    16 KB record), and the client's copying would be measured as the broker's cost.
    """
    while len(buffer) < 4:
        buffer += await _receive(stream)
    end = 4 + _SIZE.unpack_from(buffer)[0]
    if len(buffer) < end:
        pieces: list[bytes | bytearray] = [bytes(buffer)]
        have = len(buffer)
        while have < end:
            piece = await _receive(stream)
            pieces.append(piece)
            have += len(piece)
        data = b"".join(pieces)
        buffer[:] = data[end:]
        return data[4:end]
    frame = bytes(buffer[4:end])
    del buffer[:end]
    return frame


async def _receive(stream: trio.abc.Stream, max_bytes: int = 1 << 20) -> bytes | bytearray:
    chunk = await stream.receive_some(max_bytes)
    if not chunk:
        raise ConnectionError("broker closed the connection")
    return chunk


class Connection:
    """One connection with its own receive buffer; request/response or pipelined."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.buffer = bytearray()
        self.correlation_id = 0

    @classmethod
    async def open(cls, address: tuple[str, int], opener: Opener = open_plain) -> Connection:
        return cls(await opener(address))

    async def request(self, api_key: int, version: int, body: Any) -> Any:
        self.correlation_id += 1
        await self.stream.send_all(encode_request(api_key, version, self.correlation_id, body, "kcoord-bench"))
        _, decoded = decode_response(api_key, version, await read_frame(self.stream, self.buffer))
        return decoded

    async def aclose(self) -> None:
        await self.stream.aclose()


class FrameFactory:
    """Patches a template frame: correlation id, and optional int64 slots that must grow."""

    def __init__(self, api_key: int, version: int, body: Any, sentinels: int = 0) -> None:
        template = encode_request(api_key, version, 0x7EADBEEF, body, "kcoord-bench")
        self.template = template
        self.slots = [template.index(struct.pack(">q", _SENTINEL + i)) for i in range(sentinels)]
        self.counter = 0

    def __call__(self, correlation_id: int) -> bytes:
        frame = bytearray(self.template)
        struct.pack_into(">i", frame, _CID_POS, correlation_id)
        self.counter += 1
        value = self.counter
        for pos in self.slots:
            struct.pack_into(">q", frame, pos, value)
        return bytes(frame)


def commit_factory(group: str, topic: str, partitions: int, version: int = 7) -> FrameFactory:
    body = {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "retention_time_ms": -1,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "committed_offset": _SENTINEL + p, "committed_leader_epoch": -1,
             "committed_metadata": ""} for p in range(partitions)]}],
    }
    return FrameFactory(8, version, body, sentinels=partitions)


def fetch_offsets_factory(group: str, topic: str, partitions: int, version: int = 7) -> FrameFactory:
    body = {"group_id": group, "topics": [{"name": topic, "partition_indexes": list(range(partitions))}],
            "require_stable": False}
    return FrameFactory(9, version, body)


async def pipelined(address: tuple[str, int], make_frame: Callable[[int], bytes], seconds: float,
                    depth: int, error_check: Callable[[bytes], bool] | None = None,
                    opener: Opener = open_plain, limit: int | None = None) -> Result:
    """Keep ``depth`` requests in flight on one connection for ``seconds``, or until ``limit``
    requests have been sent (then their replies are waited for, as at the end of ``seconds``).

    One task drives the connection: it sends, in one write, as many requests as the window
    has room for, then reads what has arrived and takes every complete reply out of it. A
    broker answers a connection's requests in the order they were sent (the Kafka protocol
    promises it), so a reply is matched to the oldest request in flight, and one whose
    correlation id differs is an error. It spends as little CPU per request as it can: it
    shares the machine's cores with the broker it measures, and a load generator that
    saturates its own core measures itself, not the broker.
    """
    result = Result()
    latencies = result.latencies
    in_flight: collections.deque[tuple[int, float]] = collections.deque()
    buffer = bytearray()
    clock = time.perf_counter
    correlation_id = 0
    stream = await opener(address)
    begin = clock()
    stop_sending = begin + seconds
    try:
        with trio.move_on_after(seconds + DRAIN_SECONDS):
            while True:
                now = clock()
                room = depth - len(in_flight) if limit is None else min(depth - len(in_flight), limit - correlation_id)
                if now < stop_sending and (limit is None or correlation_id < limit):
                    if room:
                        frames = []
                        for _ in range(room):
                            correlation_id += 1
                            frames.append(make_frame(correlation_id))
                            in_flight.append((correlation_id, now))
                        await stream.send_all(frames[0] if room == 1 else b"".join(frames))
                elif not in_flight:
                    break
                buffer += await _receive(stream, RECEIVE_BYTES)
                arrived = clock()
                have = len(buffer)
                start = 0
                while have - start >= 4:
                    end = start + 4 + _SIZE.unpack_from(buffer, start)[0]
                    if end > have:
                        break
                    if not in_flight:
                        raise ConnectionError("a reply to no request")
                    expected, sent = in_flight.popleft()
                    got = _SIZE.unpack_from(buffer, start + 4)[0]
                    if got != expected:
                        raise ConnectionError(f"a reply out of order: expected correlation id {expected}, got {got}")
                    latencies.append(arrived - sent)
                    if error_check is not None and error_check(bytes(buffer[start + 4:end])):
                        result.errors += 1
                    start = end
                if start:
                    del buffer[:start]
    finally:
        result.requests = len(latencies)
        result.seconds = clock() - begin
        await stream.aclose()
    return result


async def run_connections(address: tuple[str, int], factories: Sequence[Callable[[int], bytes]],
                          seconds: float, depth: int, opener: Opener = open_plain, limit: int | None = None,
                          error_check: Callable[[bytes], bool] | None = None) -> Result:
    """``pipelined`` on one connection per factory at once; ``limit``: requests per connection."""
    total = Result()

    async def one(factory: Callable[[int], bytes]) -> None:
        total.merge(await pipelined(address, factory, seconds, depth, error_check, opener, limit))

    begin = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for factory in factories:
            nursery.start_soon(one, factory)
    total.seconds = time.perf_counter() - begin
    return total


async def create_topic(address: tuple[str, int], name: str, partitions: int) -> None:
    conn = await Connection.open(address)
    try:
        await conn.request(19, 4, {"topics": [{"name": name, "num_partitions": partitions,
                                               "replication_factor": 1, "assignments": [], "configs": []}],
                                   "timeout_ms": 10000, "validate_only": False})
        for _ in range(100):  # wait until the topic shows in metadata
            body = await conn.request(3, 9, {"topics": [{"name": name}], "allow_auto_topic_creation": False})
            if body.topics and body.topics[0].error_code == 0 and len(body.topics[0].partitions) == partitions:
                return
            await trio.sleep(0.05)
        raise RuntimeError(f"topic {name} did not appear")
    finally:
        await conn.aclose()


async def close_all(members: list[tuple[Connection, str, int]]) -> None:
    """Close the connections of the members ``form_group`` or ``form_consumer_group`` returned."""
    for conn, _, _ in members:
        await conn.aclose()


async def form_group(address: tuple[str, int], group: str, members: int, limit: float,
                     session_timeout_ms: int = 60000, rebalance_timeout_ms: int = 10000,
                     ) -> tuple[float | None, list[tuple[Connection, str, int]]]:
    """N members join and sync one group (rejoining as rebalances demand).

    Returns the time until every member has synced the same generation with all N in it
    (None if that did not happen within ``limit`` seconds), and the members'
    (connection, member id, generation) for follow-up workloads.
    """
    conns = [await Connection.open(address) for _ in range(members)]
    state: dict[int, tuple[str, int]] = {}
    final = {"generation": -1}
    complete = trio.Event()
    join_body = {"group_id": group, "session_timeout_ms": session_timeout_ms,
                 "rebalance_timeout_ms": rebalance_timeout_ms, "group_instance_id": None,
                 "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b"\x00\x00"}]}

    async def member(i: int) -> None:
        conn = conns[i]
        member_id = ""
        while not complete.is_set():
            joined = await conn.request(11, 5, dict(join_body, member_id=member_id))
            if joined.error_code == 79:  # MEMBER_ID_REQUIRED
                member_id = joined.member_id
                continue
            if joined.error_code != 0:
                await trio.sleep(0.01)
                continue
            member_id = joined.member_id
            generation = joined.generation_id
            leader = joined.leader == member_id
            if leader and len(joined.members) == members:
                final["generation"] = generation  # known before any member of it syncs
            assignments = [{"member_id": m.member_id, "assignment": b""} for m in joined.members] if leader else []
            synced = await conn.request(14, 3, {"group_id": group, "generation_id": generation,
                                                "member_id": member_id, "group_instance_id": None,
                                                "assignments": assignments})
            if synced.error_code != 0:
                continue
            state[i] = (member_id, generation)
            while not complete.is_set():
                if len(state) == members and all(g == final["generation"] for _, g in state.values()):
                    complete.set()
                    return
                # A member of a generation that holds all N has nothing to learn from the
                # group until the rest sync: a client heartbeats every heartbeat.interval.ms
                # (3 s by default), not at once. Any other member heartbeats now, to hear of
                # the rebalance that takes the others in (and rejoin).
                if generation != final["generation"]:
                    beat = await conn.request(12, 3, {"group_id": group, "generation_id": generation,
                                                      "member_id": member_id, "group_instance_id": None})
                    if beat.error_code != 0:
                        break
                with trio.move_on_after(0.2):
                    await complete.wait()

    begin = time.perf_counter()
    elapsed: float | None = None
    async with trio.open_nursery() as nursery:
        for i in range(members):
            nursery.start_soon(member, i)
        with trio.move_on_after(limit):
            await complete.wait()
            elapsed = time.perf_counter() - begin
        nursery.cancel_scope.cancel()
    formed = [(conns[i], *state[i]) for i in range(members) if i in state] if elapsed is not None else []
    for conn in conns:
        if elapsed is None:
            await conn.aclose()
    return elapsed, formed


async def form_consumer_group(address: tuple[str, int], group: str, members: int, topic: str, limit: float,
                              create: bool = True) -> tuple[float | None, list[tuple[Connection, str, int]]]:
    """N KIP-848 members join one group with ConsumerGroupHeartbeat and reconcile.

    Each member heartbeats as a client does (reporting what it owns, so revocations are
    acknowledged), without waiting between heartbeats, until every member is at the same
    epoch and the topic's partitions are owned once each. Returns that time (None if not
    reached within ``limit``) and the members' (connection, member id, epoch).
    """
    conns = [await Connection.open(address) for _ in range(members)]
    ids = [f"bench-{i}-{uuid.uuid4().hex[:8]}" for i in range(members)]
    owned: dict[int, dict[Any, list[int]]] = {i: {} for i in range(members)}
    epochs: dict[int, int] = {}
    complete = trio.Event()
    total = {"partitions": -1}
    # Kept as replies arrive, so checking whether the group has settled costs the same for
    # 1,000 members as for 10 (recounting every member on every reply made the load
    # generator's own CPU grow with the square of the group, beside the broker's).
    members_at: collections.Counter[int] = collections.Counter()  # epoch -> members at it
    owners: collections.Counter[tuple[Any, int]] = collections.Counter()  # partition -> members claiming it
    claims = {"total": 0}

    def set_epoch(i: int, epoch: int) -> None:
        old = epochs.get(i)
        if old is not None:
            members_at[old] -= 1
            if not members_at[old]:
                del members_at[old]
        epochs[i] = epoch
        members_at[epoch] += 1

    def set_owned(i: int, parts: dict[Any, list[int]]) -> None:
        for t, ps in owned[i].items():
            for p in ps:
                owners[(t, p)] -= 1
                if not owners[(t, p)]:
                    del owners[(t, p)]
                claims["total"] -= 1
        owned[i] = parts
        for t, ps in parts.items():
            for p in ps:
                owners[(t, p)] += 1
                claims["total"] += 1

    def settled() -> bool:
        if len(epochs) < members or len(members_at) != 1:
            return False
        return claims["total"] == len(owners) == total["partitions"]

    async def member(i: int) -> None:
        conn = conns[i]
        member_id = ids[i]
        epoch = 0
        while not complete.is_set():
            body = {"group_id": group, "member_id": member_id, "member_epoch": epoch, "instance_id": None,
                    "rack_id": None, "rebalance_timeout_ms": 60000 if epoch == 0 else -1,
                    "subscribed_topic_names": [topic] if epoch == 0 else None, "subscribed_topic_regex": None,
                    "server_assignor": None,
                    "topic_partitions": [{"topic_id": t, "partitions": ps} for t, ps in owned[i].items()]}
            reply = await conn.request(68, 1, body)
            if reply.error_code != 0:
                epoch = 0
                set_owned(i, {})
                await trio.sleep(0.01)
                continue
            changed = reply.member_epoch != epoch or reply.assignment is not None
            epoch = reply.member_epoch
            set_epoch(i, epoch)
            if reply.assignment is not None:
                set_owned(i, {tp.topic_id: list(tp.partitions) for tp in reply.assignment.topic_partitions})
            if settled():
                complete.set()
                return
            if not changed:
                await trio.sleep(0.005)

    if create:  # a topic of one partition per member
        await create_topic(address, topic, members)
    total["partitions"] = members
    begin = time.perf_counter()
    elapsed: float | None = None
    async with trio.open_nursery() as nursery:
        for i in range(members):
            nursery.start_soon(member, i)
        with trio.move_on_after(limit):
            await complete.wait()
            elapsed = time.perf_counter() - begin
        nursery.cancel_scope.cancel()
    formed = [(conns[i], ids[i], epochs.get(i, 0)) for i in range(members)]
    if elapsed is None:
        for conn in conns:
            await conn.aclose()
        formed = []
    return elapsed, formed


def consumer_heartbeat_factory(group: str, member_id: str, epoch: int) -> FrameFactory:
    """A steady-state ConsumerGroupHeartbeat: nothing changed, nothing to report."""
    return FrameFactory(68, 1, {"group_id": group, "member_id": member_id, "member_epoch": epoch,
                                "instance_id": None, "rack_id": None, "rebalance_timeout_ms": -1,
                                "subscribed_topic_names": None, "subscribed_topic_regex": None,
                                "server_assignor": None, "topic_partitions": None})


def heartbeat_factory(group: str, member_id: str, generation: int) -> FrameFactory:
    return FrameFactory(12, 3, {"group_id": group, "generation_id": generation, "member_id": member_id,
                                "group_instance_id": None})


def error_code_at(offset: int) -> Callable[[bytes], bool]:
    """A check for responses whose first error code sits at a fixed byte offset."""
    return lambda frame: frame[offset : offset + 2] != b"\x00\x00"


def produce_factory(topic: str, partition: int, records: int, record_bytes: int, acks: int = -1) -> FrameFactory:
    """A Produce v8 request carrying one uncompressed batch of ``records`` values."""
    import os

    from protocol.records import build_records, encode_batch

    values = [(None, os.urandom(record_bytes)) for _ in range(records)]
    batch = encode_batch(build_records(values), base_timestamp=int(time.time() * 1000))
    body = {"transactional_id": None, "acks": acks, "timeout_ms": 30000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}
    return FrameFactory(0, 8, body)


async def fetch_everything(address: tuple[str, int], topic: str, partitions: int,
                           max_bytes: int = 8 << 20, opener: Opener = open_plain,
                           isolation_level: int = 0) -> tuple[int, int, float]:
    """Read every partition from offset 0 to its end: (bytes, records, seconds).

    With ``isolation_level`` 1 (read_committed) the end is the last stable offset."""
    from protocol.records import scan_batches

    conn = await Connection.open(address, opener)
    offsets = dict.fromkeys(range(partitions), 0)
    ends: dict[int, int] = {}
    total_bytes = total_records = 0
    begin = time.perf_counter()
    try:
        while True:
            wanted = [p for p in offsets if p not in ends or offsets[p] < ends[p]]
            if not wanted:
                break
            # As a consumer sends it (Tansu answers min_bytes=0 with no partitions at all).
            body = {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": max_bytes,
                    "isolation_level": isolation_level, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [],
                    "rack_id": "", "topics": [{"topic": topic, "partitions": [
                        {"partition": p, "current_leader_epoch": -1, "fetch_offset": offsets[p],
                         "log_start_offset": -1, "partition_max_bytes": max_bytes // max(1, len(wanted))}
                        for p in wanted]}]}
            reply = await conn.request(1, 11, body)
            if not reply.responses:
                raise RuntimeError("Fetch answered with no partitions")
            for part in reply.responses[0].partitions:
                ends[part.partition_index] = part.last_stable_offset if isolation_level else part.high_watermark
                data = part.records or b""
                batches, valid = scan_batches(data)
                total_bytes += valid
                for _, header in batches:
                    total_records += header.last_offset_delta + 1
                    offsets[part.partition_index] = header.base_offset + header.last_offset_delta + 1
    finally:
        await conn.aclose()
    return total_bytes, total_records, time.perf_counter() - begin


# ---------------------------------------------------------------- several processes

FactorySpec = tuple[str, tuple[Any, ...]]  # (factory function name in this module, its args)


def _build(spec: FactorySpec) -> Callable[[int], bytes]:
    name, args = spec
    factory: Callable[[int], bytes] = globals()[name](*args)
    return factory


def _worker(address: tuple[str, int], specs: list[FactorySpec], seconds: float, depth: int,
            results: Any) -> None:
    result = trio.run(run_connections, address, [_build(s) for s in specs], seconds, depth)
    results.put((result.requests, result.errors, result.latencies))


def run_processes(address: tuple[str, int], specs: Sequence[FactorySpec], seconds: float, depth: int,
                  processes: int) -> Result:
    """Spread connections over ``processes`` worker processes (one process: run in place).

    A single Python process can become the bottleneck against a fast broker; the
    connections are dealt round-robin to the workers and their results merged.
    """
    if processes <= 1:
        return trio.run(run_connections, address, [_build(s) for s in specs], seconds, depth)
    import multiprocessing

    context = multiprocessing.get_context("fork")
    results = context.Queue()
    shares = [list(specs[i::processes]) for i in range(processes)]
    workers = [context.Process(target=_worker, args=(address, share, seconds, depth, results))
               for share in shares if share]
    begin = time.perf_counter()
    for worker in workers:
        worker.start()
    total = Result()
    for _ in workers:
        requests, errors, latencies = results.get(timeout=seconds + 120)
        total.merge(Result(requests, errors, latencies))
    for worker in workers:
        worker.join(30)
    total.seconds = time.perf_counter() - begin
    return total

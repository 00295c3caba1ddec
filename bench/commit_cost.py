"""Broker CPU per OffsetCommit, in process: the request path without sockets or the event loop.

    python -m bench.commit_cost [--version 8] [--requests 4000] [--rounds 5] [--profile 100] [--cold]

Builds the broker as ``kcoord serve`` does (``Broker.open`` on a temporary data directory,
``log.flush.policy=os``: no fsync) and routes pre-encoded OffsetCommit frames through its
router: one group, a standalone commit (generation -1, no member), 1 partition and 100
partitions per request, every request with higher offsets than the one before (as
``bench.loadgen`` does), so none is an unchanged commit. Process CPU time is measured over
each round and the median of the rounds is printed, per request and per additional offset
((t100 - t1) / 99). At the end every partition's committed offset is read back through the
router (OffsetFetch) and checked against the last commit, and the records appended are
counted: every commit was applied and written to the log.

``--profile N`` runs cProfile over the N-partition workload instead and prints the top
functions.

``--instructions`` (with ``--fetch``: of OffsetFetch v7 instead of commits; with
``--heartbeat``: of the load generator's classic Heartbeat v3, by the one member of a
group; with ``--consumer-heartbeat``: of its steady ConsumerGroupHeartbeat v1, by the one
member of a KIP-848 group) counts the instructions the interpreter executes per request
instead, with valgrind (``cachegrind``, no cache simulation) over two runs of different
lengths: unlike CPU time, the count does not move with the machine's load or speed, so two
versions of the code compare on any machine (a run takes about a minute). valgrind must be
installed (Debian: ``apt-get install valgrind``).

``--cold`` times one-partition commits one at a time instead: right after one another, and
after other memory has been read (``cold_cost``), which is how a depth-1 request meets the
processor's caches on a live broker.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.loadgen import (
    FrameFactory,
    commit_factory,
    consumer_heartbeat_factory,
    fetch_offsets_factory,
    heartbeat_factory,
)
from broker.app import Broker
from broker.config import Config
from broker.context import BrokerContext
from broker.router import Router
from broker.slots import Slot
from protocol.api_keys import ApiKey
from protocol.codec import decode_response, encode_request

TOPIC = "bench"
PARTITIONS = 100
PEER = "127.0.0.1:50000"
FETCH_VERSION = 7  # the load generator's


@contextmanager
def in_process_broker() -> Iterator[tuple[Broker, Router]]:
    """A broker built as the server builds it, with one 100-partition topic, and its router."""
    with tempfile.TemporaryDirectory(prefix="kcoord-commit-cost-") as data_dir:
        config = Config({"log.flush.policy": "os", "offsets.topic.num.partitions": 1})
        broker = Broker.open(config, Path(data_dir))
        try:
            errors = broker.catalog.create(TOPIC, PARTITIONS, 1, {})
            assert int(errors[0]) == 0, errors
            ctx = BrokerContext(config=config, node_id=0, host="127.0.0.1", port=9092, cluster_id="bench")
            yield broker, broker.router(ctx)
        finally:
            broker.groups.log.close()
            broker.transactions.log.close()
            broker.catalog.close()


class Workload:
    """Pre-encoded commit frames of one group, each with offsets higher than the last."""

    def __init__(self, group: str, partitions: int, version: int) -> None:
        self.group = group
        self.partitions = partitions
        self.version = version
        self.factory: FrameFactory = commit_factory(group, TOPIC, partitions, version)
        self.correlation_id = 0

    def frames(self, count: int) -> list[bytes]:
        out = []
        for _ in range(count):
            self.correlation_id += 1
            out.append(self.factory(self.correlation_id)[4:])  # the router takes frames without the size
        return out

    @property
    def last_offset(self) -> int:
        return self.factory.counter


def answered(outcome: object) -> bytes:
    """The reply's frame of a request answered at once: the router's frame, or a set slot's."""
    if isinstance(outcome, Slot) and outcome.is_set():
        outcome = outcome.frame
    if type(outcome) is not bytes:
        raise AssertionError(f"not answered at once: {outcome!r}")
    return outcome


def run_round(router: Router, frames: list[bytes]) -> float:
    """Route every frame; process CPU seconds per request."""
    route = router.route
    started = time.process_time()
    for frame in frames:
        outcome = route(frame, PEER)
        if type(outcome) is not bytes and not (isinstance(outcome, Slot) and outcome.is_set()):
            raise AssertionError(f"not answered at once: {outcome!r}")
    return (time.process_time() - started) / len(frames)


def check_reply(frame: bytes, version: int, partitions: int) -> None:
    _, body = decode_response(ApiKey.OFFSET_COMMIT, version, frame[4:])
    codes = [p.error_code for t in body.topics for p in t.partitions]
    assert codes == [0] * partitions, codes


def read_back(broker: Broker, router: Router, workload: Workload) -> None:
    """Every partition's committed offset, fetched through the router, is the last one committed."""
    fetch = encode_request(ApiKey.OFFSET_FETCH, 7, 1, {
        "group_id": workload.group, "require_stable": False,
        "topics": [{"name": TOPIC, "partition_indexes": list(range(workload.partitions))}]}, "bench")
    _, body = decode_response(ApiKey.OFFSET_FETCH, 7, answered(router.route(fetch[4:], PEER))[4:])
    offsets = [p.committed_offset for t in body.topics for p in t.partitions]
    assert offsets == [workload.last_offset] * workload.partitions, (workload.group, offsets[:3])


def measure(version: int, requests: int, rounds: int) -> tuple[float, float]:
    """Median CPU seconds per request at 1 and at 100 partitions (rounds interleaved)."""
    with in_process_broker() as (broker, router):
        one = Workload("commit-cost-1", 1, version)
        hundred = Workload("commit-cost-100", PARTITIONS, version)
        many = max(1, requests // 10)
        # Warm-up: the groups exist, codecs are compiled, caches are filled.
        for workload in (one, hundred):
            frames = workload.frames(50)
            run_round(router, frames)
            check_reply(answered(router.route(workload.frames(1)[0], PEER)), version, workload.partitions)
        appended_before = broker.groups.records_appended
        t1: list[float] = []
        t100: list[float] = []
        for _ in range(rounds):
            t1.append(run_round(router, one.frames(requests)))
            t100.append(run_round(router, hundred.frames(many)))
        committed = rounds * (requests + many * PARTITIONS)
        assert broker.groups.records_appended - appended_before == committed, "every commit is written"
        read_back(broker, router, one)
        read_back(broker, router, hundred)
    return statistics.median(t1), statistics.median(t100)


#: Bytes of other memory read before a request by ``cold_cost``: more than a core's own cache
#: holds (1 MiB of L2 on the machine of docs/benchmarks.md), and more than every level holds
#: (its L3, 32 MiB, shared by the cores).
CLEARED_BYTES = (2 << 20, 64 << 20)


def cold_cost(version: int = 8, requests: int = 300, block: int = 50,
              cleared: tuple[int, ...] = CLEARED_BYTES) -> tuple[float, list[float]]:
    """Median CPU seconds of a one-partition OffsetCommit, timed one request at a time: one
    right after another (the request path stays in the processor's caches), and after each
    size in ``cleared`` of other memory has been read (as after other processes ran on the
    core), ``requests`` of each kind.

    The kinds take turns in blocks of ``block`` requests, so a machine whose speed drifts
    moves them alike. A live broker whose clients keep one request in flight takes each
    request after its client, and the other clients, have run on the same cores: these
    bound what that costs, apart from the sockets and the event loop.
    """
    buffers = [bytearray(b"\x02" * size) for size in cleared]  # written: real pages, not the zero page
    clock = time.process_time
    with in_process_broker() as (broker, router):
        workload = Workload("commit-cost-cold", 1, version)
        run_round(router, workload.frames(50))
        route = router.route
        warm: list[float] = []
        cold: list[list[float]] = [[] for _ in cleared]
        appended_before = broker.groups.records_appended
        for _ in range(max(1, requests // block)):
            for times, buffer in [(warm, None), *zip(cold, buffers, strict=True)]:
                for frame in workload.frames(block):
                    if buffer is not None:
                        buffer.find(b"\x01")  # reads every byte: none is 1
                    started = clock()
                    outcome = route(frame, PEER)
                    times.append(clock() - started)
                    answered(outcome)
        assert broker.groups.records_appended - appended_before == len(warm) * (1 + len(cleared))
        read_back(broker, router, workload)
    return statistics.median(warm), [statistics.median(times) for times in cold]


def profile(version: int, partitions: int, requests: int, top: int) -> None:
    with in_process_broker() as (broker, router):
        workload = Workload("commit-cost-profile", partitions, version)
        run_round(router, workload.frames(50))
        frames = workload.frames(requests)
        profiler = cProfile.Profile()
        profiler.enable()
        run_round(router, frames)
        profiler.disable()
        read_back(broker, router, workload)
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)


def _call(broker: Broker, router: Router, api_key: ApiKey, version: int, body: dict[str, object]) -> Any:
    """One request through the router, its reply decoded; a reply that waits for the group's
    timer (a join completing) gets it fired here."""
    outcome = router.route(encode_request(api_key, version, 1, body, "bench")[4:], PEER)
    if type(outcome) is bytes:  # answered at once
        return decode_response(api_key, version, outcome[4:])[1]
    assert isinstance(outcome, Slot)
    deadline = time.monotonic() + 10
    while not outcome.is_set():
        assert time.monotonic() < deadline, f"{api_key.name} not answered"
        time.sleep(0.001)
        service = broker.groups
        service.apply(service.coordinator.on_time(service.clock()))
    assert outcome.frame is not None
    return decode_response(api_key, version, outcome.frame[4:])[1]


def one_member_group(broker: Broker, router: Router, group: str) -> tuple[str, int]:
    """A classic group with one member, joined and synced through the router: (member id,
    generation). The join completes at the group's first timer, fired here."""
    join: dict[str, object] = {
        "group_id": group, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000, "member_id": "",
        "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}
    join["member_id"] = _call(broker, router, ApiKey.JOIN_GROUP, 5, join).member_id  # MEMBER_ID_REQUIRED first
    joined = _call(broker, router, ApiKey.JOIN_GROUP, 5, join)
    assert joined.error_code == 0, joined
    member_id = str(join["member_id"])
    synced = _call(broker, router, ApiKey.SYNC_GROUP, 3, {
        "group_id": group, "generation_id": joined.generation_id, "member_id": member_id,
        "assignments": [{"member_id": member_id, "assignment": b""}]})
    assert synced.error_code == 0, synced
    return member_id, joined.generation_id


def one_consumer_group_member(broker: Broker, router: Router, group: str) -> tuple[str, int]:
    """A KIP-848 consumer group with one member subscribed to the bench topic, joined with a
    ConsumerGroupHeartbeat v1 through the router: (member id, epoch)."""
    joined = _call(broker, router, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {
        "group_id": group, "member_id": "commit-cost-member", "member_epoch": 0, "instance_id": None,
        "rack_id": None, "rebalance_timeout_ms": 30000, "subscribed_topic_names": [TOPIC],
        "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []})
    assert joined.error_code == 0, joined
    return str(joined.member_id), int(joined.member_epoch)


def route_heartbeats(requests: int, consumer: bool = False) -> None:
    """Warm up, then route ``requests`` heartbeats of a one-member group, each answered at
    once with no error: the load generator's classic Heartbeat v3, or with ``consumer`` its
    steady ConsumerGroupHeartbeat v1 (nothing changed) in a KIP-848 group."""
    with in_process_broker() as (broker, router):
        if consumer:
            api_key, version = ApiKey.CONSUMER_GROUP_HEARTBEAT, 1
            member_id, epoch = one_consumer_group_member(broker, router, "commit-cost-consumer")
            factory = consumer_heartbeat_factory("commit-cost-consumer", member_id, epoch)
        else:
            api_key, version = ApiKey.HEARTBEAT, 3
            member_id, generation = one_member_group(broker, router, "commit-cost-heartbeat")
            factory = heartbeat_factory("commit-cost-heartbeat", member_id, generation)
        frames = [factory(i)[4:] for i in range(1, requests + 101)]
        run_round(router, frames[:100])
        run_round(router, frames[100:])
        reply = answered(router.route(frames[-1], PEER))
        assert decode_response(api_key, version, reply[4:])[1].error_code == 0


def route_only(version: int, partitions: int, requests: int, fetch: bool = False) -> None:
    """Warm up, then route ``requests`` commits (or, with ``fetch``, OffsetFetches of the
    offsets committed): what ``instructions`` runs under valgrind."""
    with in_process_broker() as (broker, router):
        workload = Workload("commit-cost-instructions", partitions, version)
        run_round(router, workload.frames(100))
        if not fetch:
            run_round(router, workload.frames(requests))
        else:
            factory = fetch_offsets_factory(workload.group, TOPIC, partitions, FETCH_VERSION)
            frames = [factory(i)[4:] for i in range(1, requests + 101)]
            run_round(router, frames[:100])
            run_round(router, frames[100:])
        read_back(broker, router, workload)


def valgrind_words() -> list[str]:
    """valgrind counting the instructions a process executes (cachegrind without its cache
    simulation), to put before its command; SystemExit if valgrind is not installed."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    return [valgrind, "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]


def instructions_counted(output: str) -> int:
    """The count of instructions valgrind printed as the process it ran exited."""
    found = re.search(r"I\s+refs:\s+([\d,]+)", output)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output: {output[-500:]}")
    return int(found.group(1).replace(",", ""))


def instructions(version: int, partitions: int, requests: int, fetch: bool = False,
                 heartbeat: bool = False, consumer_heartbeat: bool = False) -> float:
    """Instructions per request: the count of a run of ``requests`` less one of a tenth as
    many, over the difference (start-up, warm-up and read-back cancel out)."""
    valgrind = valgrind_words()
    env = dict(os.environ, PYTHONHASHSEED="0")  # the same dict layouts in both runs

    def count(n: int) -> int:
        done = subprocess.run(
            [*valgrind, sys.executable, "-m", "bench.commit_cost", "--version", str(version), "--route-only", str(n),
             "--partitions", str(partitions), *(["--fetch"] if fetch else []),
             *(["--heartbeat"] if heartbeat else []),
             *(["--consumer-heartbeat"] if consumer_heartbeat else [])],
            env=env, capture_output=True, text=True, check=True)
        return instructions_counted(done.stderr)

    few = max(1, requests // 10)
    return (count(requests) - count(few)) / (requests - few)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", type=int, default=8, help="OffsetCommit version (loadgen uses 7)")
    parser.add_argument("--requests", type=int, default=4000,
                        help="1-partition requests per round (a tenth as many 100-partition ones)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", type=int, metavar="PARTITIONS", help="cProfile this many partitions per request")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions per request with valgrind instead of timing")
    parser.add_argument("--partitions", type=int, default=1, help="partitions per request (--instructions)")
    parser.add_argument("--fetch", action="store_true",
                        help="with --instructions: OffsetFetch v7 of the committed offsets instead of commits")
    parser.add_argument("--heartbeat", action="store_true",
                        help="with --instructions: classic Heartbeat v3 of a one-member group instead of commits")
    parser.add_argument("--consumer-heartbeat", action="store_true",
                        help="with --instructions: steady ConsumerGroupHeartbeat v1 of a one-member KIP-848 group")
    parser.add_argument("--cold", action="store_true",
                        help="time one-partition commits one by one, warm and after other memory was read")
    parser.add_argument("--route-only", type=int, metavar="REQUESTS", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.route_only is not None:
        if args.heartbeat or args.consumer_heartbeat:
            route_heartbeats(args.route_only, consumer=args.consumer_heartbeat)
        else:
            route_only(args.version, args.partitions, args.route_only, args.fetch)
        return 0
    if args.instructions:
        requests = args.requests if args.partitions == 1 else max(20, args.requests // 10)
        per_request = instructions(args.version, args.partitions, requests, args.fetch, args.heartbeat,
                                   args.consumer_heartbeat)
        what = ("Heartbeat v3" if args.heartbeat else "ConsumerGroupHeartbeat v1" if args.consumer_heartbeat
                else f"OffsetFetch v{FETCH_VERSION}" if args.fetch else f"OffsetCommit v{args.version}")
        heartbeat = args.heartbeat or args.consumer_heartbeat
        shape = "" if heartbeat else f", {args.partitions} partition(s) per request"
        print(f"{what}{shape}: {per_request:,.0f} instructions per request (valgrind, in process)")
        return 0
    if args.cold:
        warm, cold = cold_cost(args.version)
        after = ", ".join(f"{t * 1e6:.1f} us after {size >> 20} MiB" for t, size in zip(cold, CLEARED_BYTES, strict=True))
        print(f"OffsetCommit v{args.version}, 1 partition, CPU per request timed alone: {warm * 1e6:.1f} us warm, {after}")
        return 0
    if args.profile:
        profile(args.version, args.profile, args.requests // 10 if args.profile > 1 else args.requests, args.top)
        return 0
    t1, t100 = measure(args.version, args.requests, args.rounds)
    per_offset = (t100 - t1) / (PARTITIONS - 1)
    print(f"OffsetCommit v{args.version}, median of {args.rounds} rounds: "
          f"{t1 * 1e6:.1f} us per 1-partition request, {t100 * 1e6:.1f} us per {PARTITIONS}-partition request, "
          f"{per_offset * 1e6:.2f} us per additional offset")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

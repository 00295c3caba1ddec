"""What a live broker executes per request: sockets, the event loop and sync rounds included.

    python -m bench.live_cost [--fetch] [--connections 1] [--depth 1] [--partitions 1]
                              [--requests 1000] [--bytecodes [--top 25]] [--set NAME=VALUE]

``python -m bench.commit_cost --instructions`` counts the request path alone, routed in
process. This starts the broker as ``bench.run`` does (``broker serve`` with
``log.flush.policy=durable``: every commit waits for its sync round) and drives it with the
load generator: ``connections`` connections, each sending ``requests`` OffsetCommits (or,
with ``--fetch``, OffsetFetches of an offset committed first) with ``depth`` in flight.
It runs twice, with ``requests`` and a fifth as many, and prints the difference over the
difference: start-up, connecting and shutting down cancel out.

By default the broker runs under valgrind (cachegrind without its cache simulation) and
the figure is machine instructions per request, which does not move with the machine's
speed (but see below on its load). ``--bytecodes`` runs it under a Python tracer instead and prints the
bytecodes and Python calls per request, by module and by function: how much of a request's
work is its own path and how much the connection's reads and writes, the group commit's
sync rounds and trio's loop. The tracer follows the event loop's thread only.

Under either the broker runs tens of times slower than it does alone, so the load
generator always has its window full: every read finds as many requests as the
connections have in flight, and the sync rounds are as full as they can be. At depth 1 on
one connection that is the load as it is; with more connections in flight the figures are
those of a broker that is the bottleneck, the fewest wake-ups and rounds per request.
Run it alone on the machine: at depth 1 the count depends on whether the broker finds the
next request before it goes back to trio's loop, which other work on the cores changes
(a one-partition OffsetFetch at one connection: 176k instructions alone, 112k to 139k
beside another valgrind run).
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import signal
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import trio

from bench import loadgen
from bench.brokers import Broker, start_kcoord
from bench.cluster_bench import COMMIT_ERROR
from bench.commit_cost import instructions_counted, valgrind_words
from bench.run import KCOORD_SETTINGS

TOPIC = "bench"
FETCH_VERSION = 7  # the load generator's
#: The longest a run may take: a broker under valgrind starts in tens of seconds.
RUN_SECONDS = 3600.0

Counts = collections.Counter[tuple[str, str]]


def _where(path: str) -> str:
    """A code object's file as printed: relative to the project, to site-packages, or its name."""
    _, packages, rest = path.partition("site-packages" + os.sep)
    if packages:
        return rest
    root = str(Path(__file__).resolve().parents[1]) + os.sep
    return path[len(root):] if path.startswith(root) else Path(path).name


def serve_traced(out: Path, argv: list[str]) -> int:
    """``broker serve`` (``argv``) with every bytecode counted by function; SIGUSR1 writes
    the counts to ``out`` as JSON and exits at once."""
    ops: Counts = collections.Counter()
    calls: Counts = collections.Counter()
    names: dict[Any, tuple[str, str]] = {}

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        code = frame.f_code
        key = names.get(code)
        if key is None:
            key = names[code] = (_where(code.co_filename), code.co_qualname)
        if event == "opcode":
            ops[key] += 1
        elif event == "call":
            calls[key] += 1
            frame.f_trace_opcodes = True
        return tracer

    def dump(signum: int, frame: FrameType | None) -> None:
        sys.settrace(None)
        out.write_text(json.dumps({"ops": [[*k, v] for k, v in ops.items()],
                                   "calls": [[*k, v] for k, v in calls.items()]}))
        os._exit(0)

    signal.signal(signal.SIGUSR1, dump)
    from broker.cli import main as broker_main

    sys.settrace(tracer)
    return broker_main(argv)


def _load(broker: Broker, fetch: bool, connections: int, depth: int, partitions: int, requests: int) -> None:
    """The measured load, checked: every request answered, and the broker's state as sent."""
    address = broker.address

    def run(factories: list[loadgen.FrameFactory], depth: int, limit: int,
            check: Callable[[bytes], bool] | None) -> loadgen.Result:
        return trio.run(functools.partial(loadgen.run_connections, address, factories, RUN_SECONDS, depth,
                                          limit=limit, error_check=check))

    trio.run(loadgen.create_topic, address, TOPIC, partitions)
    groups = [f"live-cost-{i}" for i in range(connections)]
    commits = [loadgen.commit_factory(g, TOPIC, partitions) for g in groups]
    if fetch:  # one commit per group first: the fetches find an offset
        run(commits, 1, 1, COMMIT_ERROR)
        result = run([loadgen.fetch_offsets_factory(g, TOPIC, partitions, FETCH_VERSION) for g in groups],
                     depth, requests, None)
    else:
        result = run(commits, depth, requests, COMMIT_ERROR)
    if result.requests != connections * requests or result.errors:
        raise RuntimeError(f"{result.requests} of {connections * requests} requests answered, {result.errors} errors")
    for group, commit in zip(groups, commits, strict=True):
        got = trio.run(_committed, address, group, partitions)
        if got != [commit.counter] * partitions:  # the load generator commits its count to every partition
            raise RuntimeError(f"group {group}: committed {got[:3]}..., the last commit sent {commit.counter}")


async def _committed(address: tuple[str, int], group: str, partitions: int) -> list[int]:
    conn = await loadgen.Connection.open(address)
    try:
        body = await conn.request(9, FETCH_VERSION, {
            "group_id": group, "require_stable": False,
            "topics": [{"name": TOPIC, "partition_indexes": list(range(partitions))}]})
    finally:
        await conn.aclose()
    if body.error_code:
        raise RuntimeError(f"OffsetFetch of {group}: error {body.error_code}")
    return [int(p.committed_offset) for p in body.topics[0].partitions]


def instructions(fetch: bool, connections: int, depth: int, partitions: int, requests: int,
                 settings: dict[str, object]) -> float:
    """Machine instructions per request, valgrind over the whole broker process."""
    valgrind = valgrind_words()
    env = dict(os.environ, PYTHONHASHSEED="0")  # the same dict layouts in both runs

    def count(n: int) -> int:
        broker = start_kcoord(settings, launcher=valgrind, env=env)
        try:
            _load(broker, fetch, connections, depth, partitions, n)
        finally:
            broker.stop(timeout=RUN_SECONDS)
        return instructions_counted("\n".join(broker.lines))

    few = max(1, requests // 5)
    return (count(requests) - count(few)) / ((requests - few) * connections)


def bytecodes(fetch: bool, connections: int, depth: int, partitions: int, requests: int,
              settings: dict[str, object]) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], float]]:
    """Bytecodes and Python calls per request, by ``(file, function)``, the tracer over the
    broker's event loop."""
    env = dict(os.environ, PYTHONHASHSEED="0")

    def count(n: int) -> tuple[Counts, Counts]:
        out = Path(tempfile.mkdtemp(prefix="kcoord-live-cost-")) / "counts.json"
        broker = start_kcoord(settings, entry=("-m", "bench.live_cost", "--traced-broker", str(out)), env=env)
        try:
            _load(broker, fetch, connections, depth, partitions, n)
            broker.proc.send_signal(signal.SIGUSR1)
            broker.proc.wait(RUN_SECONDS)
        finally:
            broker.stop()
        counted = json.loads(out.read_text())
        out.unlink()
        out.parent.rmdir()
        ops: Counts = collections.Counter({(f, name): v for f, name, v in counted["ops"]})
        calls: Counts = collections.Counter({(f, name): v for f, name, v in counted["calls"]})
        return ops, calls

    few = max(1, requests // 5)
    (ops_few, calls_few), (ops, calls) = count(few), count(requests)
    per = (requests - few) * connections
    return ({k: (v - ops_few[k]) / per for k, v in ops.items() if v != ops_few[k]},
            {k: (v - calls_few[k]) / per for k, v in calls.items() if v != calls_few[k]})


def print_bytecodes(ops: dict[tuple[str, str], float], calls: dict[tuple[str, str], float], top: int) -> None:
    print(f"{sum(ops.values()):,.0f} bytecodes and {sum(calls.values()):.1f} Python calls per request\n")
    by_file: dict[str, float] = collections.defaultdict(float)
    for (file, _), n in ops.items():
        by_file[file] += n
    print("by module (bytecodes per request):")
    for file, n in sorted(by_file.items(), key=lambda item: -item[1])[:top]:
        print(f"  {n:8.1f}  {file}")
    print("\nby function (bytecodes, calls per request):")
    for (file, name), n in sorted(ops.items(), key=lambda item: -item[1])[:top]:
        print(f"  {n:8.1f}  {calls.get((file, name), 0.0):5.2f}  {file}:{name}")


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["--traced-broker"]:
        return serve_traced(Path(args_in[1]), args_in[2:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fetch", action="store_true", help="OffsetFetch v7 instead of OffsetCommit v7")
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--depth", type=int, default=1, help="requests in flight per connection")
    parser.add_argument("--partitions", type=int, default=1, help="partitions per request")
    parser.add_argument("--requests", type=int, default=1000, help="requests per connection in the longer run")
    parser.add_argument("--bytecodes", action="store_true", help="count Python bytecodes by function instead")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a broker setting (e.g. log.flush.policy=os); repeatable")
    args = parser.parse_args(args_in)
    settings: dict[str, object] = {**KCOORD_SETTINGS, **dict(item.split("=", 1) for item in args.set)}
    what = (f"OffsetFetch v{FETCH_VERSION}" if args.fetch else "OffsetCommit v7") + \
        f", {args.partitions} partition(s) per request, {args.connections} connection(s), depth {args.depth}"
    if args.bytecodes:
        print(f"{what}, live broker under a tracer:")
        print_bytecodes(*bytecodes(args.fetch, args.connections, args.depth, args.partitions, args.requests,
                                   settings), args.top)
        return 0
    per_request = instructions(args.fetch, args.connections, args.depth, args.partitions, args.requests, settings)
    print(f"{what}: {per_request:,.0f} instructions per request (valgrind, live broker)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

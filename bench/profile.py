"""Where the broker's time goes: py-spy samples kcoord while the load generator runs.

    python -m bench.profile [--workload commit|heartbeat|fetch|join|consumer-join|consumer-heartbeat] [--seconds 8]
                            [--depth 8] [--connections 8] [--partitions 1] [--set log.flush.policy=os]

Prints the functions with the most samples (own time and total time), so the claims in
docs/benchmarks.md about what limits each figure can be checked. Uses py-spy
(installed with the dev extra) and permission to ptrace the broker (root, or the same user with
ptrace allowed).
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import trio

from bench import loadgen
from bench.brokers import start_kcoord


def _workload(name: str, address: tuple[str, int], seconds: float, depth: int = 8, connections: int = 8,
              partitions: int = 1) -> None:
    if name == "commit":
        trio.run(loadgen.create_topic, address, "bench", partitions)
        factories = [loadgen.commit_factory(f"profile-{i}", "bench", partitions) for i in range(connections)]
        trio.run(loadgen.run_connections, address, factories, seconds, depth)
    elif name == "fetch":
        trio.run(loadgen.create_topic, address, "bench", partitions)
        factories = [loadgen.fetch_offsets_factory(f"profile-{i}", "bench", partitions) for i in range(connections)]
        trio.run(loadgen.run_connections, address, factories, seconds, depth)
    elif name == "consumer-join":
        # KIP-848: 1,000 members join one group and reconcile, repeatedly for the whole window
        # (the topic is created before sampling starts: see main).
        deadline = time.monotonic() + seconds
        round_ = 0
        while time.monotonic() < deadline:
            elapsed, members = trio.run(loadgen.form_consumer_group, address, f"profile-cg-{round_}", 1000,
                                        "profile-cg", 60.0, False)
            print(f"1,000 members reconciled in {elapsed} s", file=sys.stderr)
            trio.run(loadgen.close_all, members)
            round_ += 1
    elif name == "join":
        # Classic: 1,000 members JoinGroup and SyncGroup one group, repeatedly for the whole window.
        deadline = time.monotonic() + seconds
        round_ = 0
        while time.monotonic() < deadline:
            elapsed, members = trio.run(loadgen.form_group, address, f"profile-join-{round_}", 1000, 60.0)
            print(f"1,000 members joined and synced in {elapsed} s", file=sys.stderr)
            trio.run(loadgen.close_all, members)
            round_ += 1
    elif name == "consumer-heartbeat":
        elapsed, members = trio.run(loadgen.form_consumer_group, address, "profile", 10, "profile-t", 30.0)
        assert elapsed is not None, "the group did not reconcile"
        factories = [loadgen.consumer_heartbeat_factory("profile", m, e) for _, m, e in members]
        trio.run(loadgen.run_connections, address, factories, seconds, depth)
    else:
        elapsed, members = trio.run(loadgen.form_group, address, "profile", 10, 30.0)
        assert elapsed is not None, "the group did not form"
        factories = [loadgen.heartbeat_factory("profile", m, g) for _, m, g in members]
        trio.run(loadgen.run_connections, address, factories, seconds, depth)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workload", choices=["commit", "heartbeat", "fetch", "join", "consumer-join", "consumer-heartbeat"],
                        default="commit")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--depth", type=int, default=8, help="requests in flight per connection")
    parser.add_argument("--connections", type=int, default=8, help="connections (commit and fetch)")
    parser.add_argument("--partitions", type=int, default=1, help="partitions per request (commit and fetch)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a broker setting (e.g. log.flush.policy=os); repeatable")
    args = parser.parse_args(argv)
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    settings: dict[str, object] = {"group.initial.rebalance.delay.ms": 0}
    settings.update(item.split("=", 1) for item in args.set)
    broker = start_kcoord(settings)
    if args.workload == "consumer-join":  # 1,000 partitions: created before sampling, not profiled
        trio.run(loadgen.create_topic, broker.address, "profile-cg", 1000)
    cpu_before = broker.cpu_seconds()
    out = Path(tempfile.mkdtemp()) / "profile.txt"
    try:
        recorder = subprocess.Popen([py_spy, "record", "--pid", str(broker.proc.pid), "--format", "raw",
                                     "--duration", str(int(args.seconds)), "--rate", "200",
                                     "--output", str(out), "--nonblocking"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        load = threading.Thread(target=_workload, args=(args.workload, broker.address, args.seconds + 1,
                                                         args.depth, args.connections, args.partitions))
        load.start()
        recorder.wait(args.seconds + 60)
        load.join()
        cpu = broker.cpu_seconds() - cpu_before
    finally:
        broker.stop()
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in out.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        count = int(count_text)
        frames = [f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0].rsplit("/", 1)[-1] + ")"
                  if " (" in f else f for f in stack.split(";")]
        samples += count
        own[frames[-1]] += count
        for frame in set(frames):
            total[frame] += count
    print(f"{samples} samples while kcoord served the {args.workload} workload "
          f"(depth {args.depth}; broker CPU {cpu:.2f} s, sampling included)\n")
    print("own time:")
    for frame, count in own.most_common(args.top):
        print(f"  {100 * count / samples:5.1f}%  {frame}")
    root = Path(__file__).resolve().parents[1]
    project_files = tuple(f"({path.name})" for package in ("broker", "protocol", "storage")
                          for path in (root / package).rglob("*.py"))
    print("\ntotal time (inclusive), project code:")
    shown = 0
    for frame, count in total.most_common():
        if frame.endswith(project_files) or "<compiled" in frame:
            print(f"  {100 * count / samples:5.1f}%  {frame}")
            shown += 1
            if shown == args.top:
                break
    return 0


if __name__ == "__main__":
    sys.exit(main())

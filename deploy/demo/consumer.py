"""Demo consumer group: two real clients, kafka-python and confluent-kafka, share a topic.

Both join one consumer group, read the records the demo producer wrote, and commit
synchronously after every batch they process, so a rebalance never hands over records that
were read but not committed. The program stops once the group has read N distinct records,
checks the group's committed offsets through the admin API, and prints one line
``summary {json}`` on standard output.

Configuration comes from the command line, with defaults from the environment (see
``ENVIRONMENT``). Exit codes: 0 all N records read and committed; 1 timeout, client error or
committed offsets behind what was read; 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from collections import Counter
from typing import Any

log = logging.getLogger("demo-consumer")

# Environment variable -> (option, default). The option wins over the variable.
ENVIRONMENT = {
    "DEMO_BOOTSTRAP_SERVERS": ("--bootstrap-server", "127.0.0.1:9092"),
    "DEMO_TOPIC": ("--topic", "demo"),
    "DEMO_GROUP": ("--group", "demo-group"),
    "DEMO_RECORDS": ("--records", "1000"),
    "DEMO_TIMEOUT_S": ("--timeout", "120"),
}


def _default(variable: str) -> str:
    return os.environ.get(variable, ENVIRONMENT[variable][1])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Consume N records with a kafka-python + confluent-kafka group.")
    parser.add_argument("--bootstrap-server", default=_default("DEMO_BOOTSTRAP_SERVERS"), metavar="HOST:PORT",
                        help="broker address (env DEMO_BOOTSTRAP_SERVERS)")
    parser.add_argument("--topic", default=_default("DEMO_TOPIC"), help="topic to read (env DEMO_TOPIC)")
    parser.add_argument("--group", default=_default("DEMO_GROUP"), help="consumer group id (env DEMO_GROUP)")
    parser.add_argument("--records", type=int, default=int(_default("DEMO_RECORDS")),
                        help="stop after this many distinct records (env DEMO_RECORDS)")
    parser.add_argument("--timeout", type=float, default=float(_default("DEMO_TIMEOUT_S")), metavar="SECONDS",
                        help="give up (exit 1) after this long (env DEMO_TIMEOUT_S)")
    return parser


class Tally:
    """What the whole group has read, shared by the member threads."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.done = threading.Event()
        self._lock = threading.Lock()
        self.seq_at: dict[tuple[int, int], int] = {}  # (partition, offset) -> seq
        self.redelivered = 0
        self.per_client: Counter[str] = Counter()
        self.partitions_read: dict[str, set[int]] = {}
        self._assignments: dict[str, list[int]] = {}

    def add(self, client: str, partition: int, offset: int, value: bytes) -> None:
        try:
            seq = int(json.loads(value)["seq"])
        except (ValueError, KeyError, TypeError):  # not written by the demo producer
            seq = -1
        with self._lock:
            if (partition, offset) in self.seq_at:
                self.redelivered += 1
            self.seq_at[(partition, offset)] = seq
            self.per_client[client] += 1
            self.partitions_read.setdefault(client, set()).add(partition)
            if len(self.seq_at) >= self.expected:
                self.done.set()

    def assigned(self, client: str, partitions: set[int]) -> None:
        """Log each change of a member's assignment."""
        with self._lock:
            if self._assignments.get(client, []) != sorted(partitions):
                log.info("%s assigned partitions %s", client, sorted(partitions))
            self._assignments[client] = sorted(partitions)

    def next_offsets(self) -> dict[int, int]:
        """Per partition, the offset after the last record read: what should be committed."""
        with self._lock:
            ends: dict[int, int] = {}
            for partition, offset in self.seq_at:
                ends[partition] = max(ends.get(partition, 0), offset + 1)
            return ends

    def summary(self) -> dict[str, Any]:
        with self._lock:
            seqs = Counter(self.seq_at.values())
            return {
                "records": self.expected,
                "unique": len(self.seq_at),
                "redelivered": self.redelivered,
                "missing_seqs": sum(1 for seq in range(self.expected) if seq not in seqs),
                "duplicate_seqs": sum(1 for n in seqs.values() if n > 1),
                "per_client": dict(sorted(self.per_client.items())),
                "partitions_read": {client: sorted(p) for client, p in sorted(self.partitions_read.items())},
            }


class Member(threading.Thread):
    """One group member: open, poll-process-commit until the group is done, close."""

    client = "?"

    def __init__(self, args: argparse.Namespace, tally: Tally) -> None:
        super().__init__(name=self.client, daemon=True)
        self.args = args
        self.tally = tally
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.open()
            try:
                while not self.tally.done.is_set():
                    self.poll_and_commit()
            finally:
                self.close()
        except Exception as exc:
            log.error("%s failed: %s: %s", self.client, type(exc).__name__, exc)
            self.error = exc

    def open(self) -> None:
        raise NotImplementedError

    def poll_and_commit(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class KafkaPythonMember(Member):
    client = "kafka-python"

    def open(self) -> None:
        from kafka import KafkaConsumer

        self.consumer = KafkaConsumer(
            self.args.topic, bootstrap_servers=self.args.bootstrap_server, group_id=self.args.group,
            client_id="demo-consumer-kafka-python", enable_auto_commit=False, auto_offset_reset="earliest",
        )
        # Learn the topic's partitions before the first poll joins the group: kafka-python
        # 3.0.12 can otherwise strand its first rejoin (docs/cluster.md, "Known client issues").
        self.consumer.partitions_for_topic(self.args.topic)

    def poll_and_commit(self) -> None:
        from kafka.errors import CommitFailedError

        batches = self.consumer.poll(timeout_ms=200)
        for records in batches.values():
            for record in records:
                self.tally.add(self.client, record.partition, record.offset, record.value)
        self.tally.assigned(self.client, {tp.partition for tp in self.consumer.assignment()})
        if batches:
            try:
                self.consumer.commit()
            except CommitFailedError as exc:  # the group rebalanced: these records may come again
                log.warning("%s commit failed: %s", self.client, exc)

    def close(self) -> None:
        self.consumer.close()


class ConfluentMember(Member):
    client = "confluent-kafka"

    def open(self) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer({
            "bootstrap.servers": self.args.bootstrap_server, "group.id": self.args.group,
            "client.id": "demo-consumer-confluent", "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        })
        self.consumer.subscribe(
            [self.args.topic],
            on_assign=lambda _, partitions: self.tally.assigned(self.client, {p.partition for p in partitions}),
            on_revoke=lambda _, partitions: self.tally.assigned(self.client, set()),
        )

    def poll_and_commit(self) -> None:
        from confluent_kafka import KafkaException

        messages = self.consumer.consume(num_messages=500, timeout=0.2)
        read = 0
        for message in messages:
            if message.error() is not None:
                log.warning("%s: %s", self.client, message.error())
                continue
            partition, offset, value = message.partition(), message.offset(), message.value()
            if partition is not None and offset is not None and value is not None:
                self.tally.add(self.client, partition, offset, value)
                read += 1
        if read:
            try:
                self.consumer.commit(asynchronous=False)
            except KafkaException as exc:  # the group rebalanced: these records may come again
                log.warning("%s commit failed: %s", self.client, exc)

    def close(self) -> None:
        self.consumer.close()


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets for the topic, as the admin API reports them."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="demo-consumer-admin")
    try:
        offsets = admin.list_group_offsets(group)[group]
    finally:
        admin.close()
    return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic}


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    if args.records < 1 or args.timeout <= 0:
        print("demo-consumer: --records must be >= 1 and --timeout > 0", file=sys.stderr)
        return 2
    tally = Tally(args.records)
    members: list[Member] = [KafkaPythonMember(args, tally), ConfluentMember(args, tally)]
    log.info("group %s: %s reading %d records from %s", args.group,
             " + ".join(m.client for m in members), args.records, args.topic)
    deadline = time.monotonic() + args.timeout
    for member in members:
        member.start()
    while not tally.done.wait(0.2):
        if time.monotonic() > deadline or any(not m.is_alive() for m in members):
            break
    timed_out = not tally.done.is_set() and time.monotonic() > deadline
    complete = tally.done.is_set()
    tally.done.set()  # stops every member's loop
    for member in members:
        member.join(timeout=30)
    stuck = [m.client for m in members if m.is_alive()]
    failed = [m.client for m in members if m.error is not None]

    summary: dict[str, Any] = {"group": args.group, "topic": args.topic, **tally.summary()}
    expected_commits = tally.next_offsets()
    try:
        committed = committed_offsets(args.bootstrap_server, args.group, args.topic)
    except Exception as exc:
        log.error("could not read committed offsets: %s: %s", type(exc).__name__, exc)
        committed = {}
    summary["committed"] = {str(p): committed[p] for p in sorted(committed)}
    summary["committed_ok"] = bool(committed) and all(
        committed.get(p, -1) >= end for p, end in expected_commits.items())
    print("summary " + json.dumps(summary, sort_keys=True), flush=True)

    problems = []
    if not complete:
        reason = f"timed out after {args.timeout:g}s" if timed_out else "a member stopped"
        problems.append(f"{reason} with {summary['unique']}/{args.records} records read")
    if stuck or failed:
        problems.append(f"members failed: {failed}, did not stop: {stuck}")
    if not summary["committed_ok"]:
        problems.append(f"committed offsets {committed} behind what was read {expected_commits}")
    if problems:
        log.error("; ".join(problems))
        return 1
    log.info("read %d records (%s), offsets committed", summary["unique"],
             ", ".join(f"{client}: {n}" for client, n in summary["per_client"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

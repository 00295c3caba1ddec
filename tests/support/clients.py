"""Real client-library consumers, each running its poll loop in its own thread.

Every consumer records its current assignment and every assignment change it sees, so
tests can wait (bounded) for a balanced group and check whether a rebalance happened.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any


def learn_partitions(consumer: Any, topics: list[str]) -> None:
    """Make a kafka-python consumer fetch its topics' partitions before its first poll joins.

    Otherwise its first JoinGroup can go out before it has metadata for a topic it just
    subscribed to: as leader it then assigns nothing, and rejoins once the metadata
    arrives. kafka-python 3.0.12 drives a join only while ``need_rejoin()`` is true, and
    that turns false as soon as the leader has assigned, so a ``poll()`` whose timeout runs
    out during that second join leaves its SyncGroup reply uncollected for good: the
    assignment is never applied, heartbeats stay off, and the broker expires the member.
    Short polls on a busy machine do run out. Knowing the partitions first, the leader
    assigns them in the first generation and there is no second join.
    """
    for topic in topics:
        consumer.partitions_for_topic(topic)


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class ConsumerThread:
    """Base: a consumer in a thread; subclasses implement _open/_poll/_close."""

    kind = "?"

    def __init__(self, bootstrap: str, group: str, topic: str, **options: Any) -> None:
        self.bootstrap = bootstrap
        self.group = group
        self.topic = topic
        self.options = options
        self.assignment: set[int] = set()
        self.assignments_seen: list[frozenset[int]] = []
        self.messages: list[tuple[int, int, bytes]] = []  # partition, offset, value
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._leave = True
        self._thread = threading.Thread(target=self._run, name=f"{self.kind}-consumer", daemon=True)

    def start(self) -> ConsumerThread:
        self._thread.start()
        return self

    def _set_assignment(self, partitions: set[int]) -> None:
        if partitions != self.assignment or not self.assignments_seen:
            self.assignment = set(partitions)
            self.assignments_seen.append(frozenset(partitions))

    def _run(self) -> None:
        try:
            self._open()
            while not self._stop.is_set():
                self._poll()
            self._close(self._leave)
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    def stop(self, leave: bool = True, timeout: float = 30) -> None:
        self._leave = leave
        self._stop.set()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"{self.kind} consumer did not stop"
        if self.error is not None:
            raise AssertionError(f"{self.kind} consumer failed: {self.error!r}") from self.error

    # subclass hooks
    def _open(self) -> None: ...
    def _poll(self) -> None: ...
    def _close(self, leave: bool) -> None: ...


class KafkaPythonConsumer(ConsumerThread):
    kind = "kafka-python"

    def _open(self) -> None:
        from kafka import KafkaConsumer

        self.consumer = KafkaConsumer(
            self.topic, bootstrap_servers=self.bootstrap, group_id=self.group,
            auto_offset_reset="earliest", session_timeout_ms=10000, heartbeat_interval_ms=500,
            **self.options,
        )
        learn_partitions(self.consumer, [self.topic])

    def _poll(self) -> None:
        from kafka.errors import KafkaConnectionError

        try:
            polled = self.consumer.poll(timeout_ms=100)
        except KafkaConnectionError:
            # While the broker is down, kafka-python 3.0's coordinator lookup lets the failed
            # metadata refresh out of poll() (ensure_coordinator_ready_async catches only its
            # timeout): an application polls again, and so does this one.
            return
        for _, records in polled.items():
            self.messages.extend((r.partition, r.offset, r.value) for r in records)
        self._set_assignment({tp.partition for tp in self.consumer.assignment()})

    def _close(self, leave: bool) -> None:
        self.consumer.close()


class ConfluentConsumer(ConsumerThread):
    kind = "confluent-kafka"

    def _open(self) -> None:
        from confluent_kafka import Consumer

        config = {
            "bootstrap.servers": self.bootstrap, "group.id": self.group, "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000, "heartbeat.interval.ms": 500,
            "topic.metadata.refresh.interval.ms": 1000,
        }
        config.update(self.options)
        self.consumer = Consumer(config)
        self.consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self._set_assignment({p.partition for p in partitions})

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        self._set_assignment(set())

    def _poll(self) -> None:
        message = self.consumer.poll(0.1)
        if message is not None and message.error() is None:
            self.messages.append((message.partition(), message.offset(), message.value()))

    def _close(self, leave: bool) -> None:
        self.consumer.close()


class AiokafkaConsumer(ConsumerThread):
    kind = "aiokafka"

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:
            self.error = exc

    async def _main(self) -> None:
        from aiokafka import AIOKafkaConsumer

        consumer = AIOKafkaConsumer(
            self.topic, bootstrap_servers=self.bootstrap, group_id=self.group,
            auto_offset_reset="earliest", session_timeout_ms=10000, heartbeat_interval_ms=500,
            **self.options,
        )
        await consumer.start()
        try:
            while not self._stop.is_set():
                batches = await consumer.getmany(timeout_ms=100)
                for _, records in batches.items():
                    self.messages.extend((r.partition, r.offset, r.value) for r in records)
                self._set_assignment({tp.partition for tp in consumer.assignment()})
        finally:
            await consumer.stop()


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()


def sizes(consumers: list[ConsumerThread]) -> list[int]:
    return sorted(len(c.assignment) for c in consumers)


def disjoint_cover(consumers: list[ConsumerThread], partitions: int) -> bool:
    seen: list[int] = []
    for c in consumers:
        seen.extend(c.assignment)
    return sorted(seen) == list(range(partitions))


class ConsumerProtocolConsumer(ConsumerThread):
    """A confluent-kafka (librdkafka) consumer on the KIP-848 protocol: ``group.protocol=consumer``.

    Rebalances are incremental: ``on_assign`` adds partitions and ``on_revoke`` removes just
    the ones taken away. Every change is kept with the time it happened (``ownership``), and
    every record with the time it arrived (``received``), so a test can check that no
    partition was ever consumed by two members at once. ``topic`` may be a regex ("^...").
    """

    kind = "confluent-kafka (consumer protocol)"

    def __init__(self, bootstrap: str, group: str, topic: str, **options: Any) -> None:
        super().__init__(bootstrap, group, topic, **options)
        self.ownership: list[tuple[float, str, frozenset[tuple[str, int]]]] = []  # time, "+"/"-", partitions
        self.owned: set[tuple[str, int]] = set()
        self.received: list[tuple[float, str, int, int]] = []  # time, topic, partition, offset
        self.revocations: list[frozenset[tuple[str, int]]] = []

    def _open(self) -> None:
        from confluent_kafka import Consumer

        config = {"bootstrap.servers": self.bootstrap, "group.id": self.group, "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 1000}
        config.update(self.options)
        self.consumer = Consumer(config)
        self.consumer.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._revoked,
                                on_lost=self._revoked)

    def _assigned(self, consumer: Any, partitions: list[Any]) -> None:
        added = frozenset((p.topic, p.partition) for p in partitions)
        self.owned |= added
        self.ownership.append((time.monotonic(), "+", added))
        self._set_assignment({p for _, p in self.owned})

    def _revoked(self, consumer: Any, partitions: list[Any]) -> None:
        removed = frozenset((p.topic, p.partition) for p in partitions)
        self.owned -= removed
        self.ownership.append((time.monotonic(), "-", removed))
        if removed:
            self.revocations.append(removed)
        self._set_assignment({p for _, p in self.owned})

    def _poll(self) -> None:
        message = self.consumer.poll(0.1)
        if message is not None and message.error() is None:
            self.received.append((time.monotonic(), message.topic(), message.partition(), message.offset()))
            self.messages.append((message.partition(), message.offset(), message.value()))

    def _close(self, leave: bool) -> None:
        self.consumer.close()


def ownership_intervals(consumer: ConsumerProtocolConsumer, until: float) -> dict[tuple[str, int], list[tuple[float, float]]]:
    """When the consumer owned each partition, from its own assign and revoke callbacks."""
    opened: dict[tuple[str, int], float] = {}
    out: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for at, sign, partitions in consumer.ownership:
        for tp in partitions:
            if sign == "+":
                opened.setdefault(tp, at)
            elif tp in opened:
                out.setdefault(tp, []).append((opened.pop(tp), at))
    for tp, at in opened.items():
        out.setdefault(tp, []).append((at, until))
    return out


def assert_never_owned_twice(consumers: list[ConsumerProtocolConsumer]) -> None:
    """No two members owned a partition at the same time, and each read a record only while owning it."""
    until = time.monotonic()
    intervals = [ownership_intervals(c, until) for c in consumers]
    partitions = {tp for owned in intervals for tp in owned}
    for tp in partitions:
        spans = sorted((start, end, i) for i, owned in enumerate(intervals) for start, end in owned.get(tp, []))
        for (s1, e1, i1), (s2, e2, i2) in itertools.pairwise(spans):
            assert i1 == i2 or e1 <= s2, f"{tp} owned by members {i1} and {i2} at once: {(s1, e1)} {(s2, e2)}"
    for c, owned in zip(consumers, intervals, strict=True):
        for at, topic, partition, _ in c.received:
            spans = owned.get((topic, partition), [])
            assert any(start <= at <= end for start, end in spans), \
                f"{c.kind} read {topic}-{partition} at {at} without owning it: {spans}"

"""Exactly-once test rigs: consume-transform-produce applications on real clients, and a killer.

Each application reads an input topic with a read_committed consumer in a group, writes
every record it reads to the output topic (same partition, same value) inside a producer
transaction, and commits the input offsets in the same transaction
(``send_offsets_to_transaction``). It handles errors the way each client's documentation
says an exactly-once application must: retry what is retriable, abort and rewind to the
committed offsets what must be aborted, and start a new producer (which fences the old one)
after a fatal error. The ``Killer`` SIGKILLs the broker whenever the application has
committed a few more transactions, at a random moment, and restarts it on the same port
and data directory. Everything waits on conditions with deadlines.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from tests.support.broker_process import BrokerProcess

#: librdkafka settings that make reconnecting to a restarted broker quick.
FAST_RECONNECT = {
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 500,
    "retry.backoff.ms": 50,
    "retry.backoff.max.ms": 500,
    "socket.connection.setup.timeout.ms": 5000,
    "topic.metadata.refresh.interval.ms": 2000,
    # When every broker is down, librdkafka >= 2.10 re-bootstraps and decommissions the brokers
    # it knew, and a group coordinator cached on a decommissioned broker hangs
    # send_offsets_to_transaction past its timeout (librdkafka issues #5511, #5456). A
    # single broker restarted on the same address needs no re-bootstrap.
    "metadata.recovery.strategy": "none",
}


def value_of(i: int) -> bytes:
    return b"%07d" % i


def seed(bootstrap: str, topic: str, partitions: int, count: int) -> dict[int, int]:
    """``count`` records spread over the partitions (acks=all); returns the end offset per partition."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5})
    ends = dict.fromkeys(range(partitions), 0)
    for i in range(count):
        producer.produce(topic, value=value_of(i), key=value_of(i), partition=i % partitions)
        ends[i % partitions] += 1
    assert producer.flush(30) == 0, "the input was not all acknowledged"
    return ends


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()]).values():
        future.result(30)


def read_committed(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 60) -> list[bytes]:
    """Every value a read_committed consumer gets from the start of ``topic`` (waits for ``expected``,
    then a quiet second more, so a duplicate past the expected count shows up too)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{random.random()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False, **FAST_RECONNECT})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    quiet_until: float | None = None
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
                quiet_until = None
            if len(values) >= expected:
                quiet_until = quiet_until or time.monotonic() + 1.0
                if time.monotonic() >= quiet_until:
                    break
    finally:
        consumer.close()
    return values


class Progress:
    """Committed transactions so far, for the killer to wait on."""

    def __init__(self) -> None:
        self.commits = 0
        self.aborts = 0
        self.restarts = 0  # producers recreated after a fatal error
        self.done = threading.Event()
        self._changed = threading.Condition()

    def committed(self) -> None:
        with self._changed:
            self.commits += 1
            self._changed.notify_all()

    def wait_for(self, commits: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.commits < commits and not self.done.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.2))
        return True


class Killer(threading.Thread):
    """SIGKILLs the broker ``kills`` times, each after 1-``every`` more committed transactions and a
    random pause (so the kill lands anywhere in the next transaction), restarting it each time."""

    def __init__(self, broker: BrokerProcess, progress: Progress, kills: int, seed: int, every: int = 3,
                 stall_timeout: float = 90) -> None:
        super().__init__(name="broker-killer", daemon=True)
        self.broker = broker
        self.progress = progress
        self.kills = kills
        self.rng = random.Random(seed)
        self.every = every
        self.stall_timeout = stall_timeout
        self.done = 0
        self.failure: str | None = None
        #: One line per kill: the committed transactions when it aimed, when it landed, and the restart.
        self.log: list[str] = []

    def run(self) -> None:
        try:
            for _ in range(self.kills):
                aimed = self.progress.commits
                target = aimed + self.rng.randint(1, self.every)
                if not self.progress.wait_for(target, self.stall_timeout):
                    self.failure = f"no progress to {target} commits within {self.stall_timeout}s"
                    return
                if self.progress.done.is_set():
                    self.log.append(f"the application finished at {self.progress.commits} commits")
                    return
                time.sleep(self.rng.uniform(0, 0.08))
                landed = self.progress.commits
                self.broker.kill()
                started = time.monotonic()
                self.broker.listen = f"{self.broker.host}:{self.broker.port}"
                self.broker.start(timeout=60)
                self.done += 1
                self.log.append(f"kill {self.done}: aimed at {aimed}+, landed at {landed} commits, "
                                f"restarted in {time.monotonic() - started:.1f}s")
        except BaseException as exc:  # reported by the test
            self.failure = f"{type(exc).__name__}: {exc}"


class ConfluentApp(threading.Thread):
    """The consume-transform-produce loop on confluent-kafka (librdkafka's transactional producer)."""

    def __init__(self, bootstrap: str, source: str, sink: str, ends: dict[int, int], *, group: str = "ctp",
                 transactional_id: str = "ctp-app", batch: int = 8, op_timeout: float = 10,
                 deadline: float = 150, instance_id: str | None = None) -> None:
        super().__init__(name="confluent-ctp", daemon=True)
        self.bootstrap, self.source, self.sink, self.ends = bootstrap, source, sink, ends
        self.group, self.transactional_id, self.batch = group, transactional_id, batch
        self.op_timeout = op_timeout
        self.deadline = time.monotonic() + deadline
        self.progress = Progress()
        self.error: BaseException | None = None
        self.log: list[str] = []
        self.extra: dict[str, Any] = {}
        #: A static member (KIP-345): a restarted application takes its place without a rebalance wait.
        self.instance_id = instance_id

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # surfaced by the test
            self.error = exc
        finally:
            self.progress.done.set()

    def _producer(self) -> Any:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.transactional_id,
                             "transaction.timeout.ms": 60000, "linger.ms": 2, **FAST_RECONNECT, **self.extra})
        self._retry(lambda: producer.init_transactions(self.op_timeout), "init_transactions")
        return producer

    def _retry(self, call: Callable[[], Any], what: str) -> Any:
        """Retry a call that failed with a retriable error (or timed out) until it works."""
        from confluent_kafka import KafkaException

        while True:
            self._check_deadline()
            try:
                return call()
            except KafkaException as exc:
                error = exc.args[0]
                if error.retriable() or error.code() in _TIMEOUTS or error.code() in _COORDINATOR_MOVED:
                    self.log.append(f"{what}: retry after {error.name()}")
                    time.sleep(0.1)
                    continue
                raise

    def _check_deadline(self) -> None:
        if time.monotonic() > self.deadline:
            raise TimeoutError(f"the application did not finish in time: {self.progress.commits} commits, "
                               f"last steps {self.log[-10:]}")

    def _run(self) -> None:
        from confluent_kafka import Consumer, KafkaException

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                             "isolation.level": "read_committed", "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", "session.timeout.ms": 45000, **FAST_RECONNECT,
                             **({"group.instance.id": self.instance_id} if self.instance_id else {})})
        consumer.subscribe([self.source])
        self.consumer = consumer
        producer = self._producer()
        try:
            while not self._finished(consumer):
                self._check_deadline()
                messages = [m for m in consumer.consume(self.batch, 0.5) if m.error() is None]
                if not messages:
                    continue
                try:
                    self._transact(producer, consumer, messages)
                    self.progress.committed()
                except KafkaException as exc:
                    error = exc.args[0]
                    self.log.append(f"transaction failed: {error.name()} fatal={error.fatal()} "
                                    f"abortable={error.txn_requires_abort()}")
                    if error.fatal():
                        self.progress.restarts += 1
                        producer = self._producer()
                    else:
                        self._abort(producer)
                    self._rewind(consumer)
        finally:
            consumer.close()

    def _transact(self, producer: Any, consumer: Any, messages: list[Any]) -> None:
        """One transaction: the records read, written out, and the input offsets committed with them."""
        producer.begin_transaction()
        for m in messages:
            producer.produce(self.sink, value=m.value(), key=m.key(), partition=m.partition())
        positions = consumer.position(consumer.assignment())
        self._retry(lambda: producer.send_offsets_to_transaction(
            positions, consumer.consumer_group_metadata(), self.op_timeout), "send_offsets")
        self._retry(lambda: producer.commit_transaction(self.op_timeout), "commit")

    def _abort(self, producer: Any) -> None:
        self._retry(lambda: producer.abort_transaction(self.op_timeout), "abort")
        self.progress.aborts += 1

    def _rewind(self, consumer: Any) -> None:
        """Back to the committed offsets: what the aborted transaction read is read again."""
        assignment = consumer.assignment()
        if not assignment:
            return
        for tp in self._retry(lambda: consumer.committed(assignment, self.op_timeout), "committed"):
            if tp.offset >= 0:
                consumer.seek(tp)
            else:
                tp.offset = -2  # OFFSET_BEGINNING
                consumer.seek(tp)

    def _finished(self, consumer: Any) -> bool:
        assignment = consumer.assignment()
        if len(assignment) != len(self.ends):
            return False
        positions = {tp.partition: tp.offset for tp in consumer.position(assignment)}
        unread = [tp for tp in assignment if positions.get(tp.partition, -1) < 0]
        if unread:
            # librdkafka has no position for a partition this instance has read nothing from
            # (a previous instance may have finished it): its committed offset says where it is.
            for tp in self._retry(lambda: consumer.committed(unread, self.op_timeout), "committed"):
                positions[tp.partition] = tp.offset
        return all(positions.get(p, -1) >= end for p, end in self.ends.items()) and self.progress.commits > 0


_TIMEOUTS = {-185, -192, -195}  # librdkafka's _TIMED_OUT, _TIMED_OUT_QUEUE, _TRANSPORT
#: COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: a cluster's coordinator
#: moved (librdkafka's consumer.committed() raises them as not retriable); asking again finds it.
_COORDINATOR_MOVED = {14, 15, 16}


class KafkaPythonApp(threading.Thread):
    """The same loop on kafka-python's transactional producer and read_committed consumer.

    kafka-python's transactional calls block until they are done (no timeout), so any
    failure is handled the one safe way: abort if the producer still can, else start a
    new producer (its InitProducerId fences the old one and aborts its transaction), and
    rewind the consumer to the committed offsets.
    """

    def __init__(self, bootstrap: str, source: str, sink: str, ends: dict[int, int], *, group: str = "ctp-kp",
                 transactional_id: str = "ctp-kp-app", batch: int = 8, deadline: float = 150) -> None:
        super().__init__(name="kafka-python-ctp", daemon=True)
        self.bootstrap, self.source, self.sink, self.ends = bootstrap, source, sink, ends
        self.group, self.transactional_id, self.batch = group, transactional_id, batch
        self.deadline = time.monotonic() + deadline
        self.progress = Progress()
        self.error: BaseException | None = None
        self.log: list[str] = []

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # surfaced by the test
            self.error = exc
        finally:
            self.progress.done.set()

    def _producer(self) -> Any:
        from kafka import KafkaProducer

        while True:
            self._check_deadline()
            producer = KafkaProducer(bootstrap_servers=self.bootstrap, transactional_id=self.transactional_id,
                                     transaction_timeout_ms=60000, linger_ms=2, retry_backoff_ms=50,
                                     reconnect_backoff_ms=50, reconnect_backoff_max_ms=500)
            try:
                producer.init_transactions()
                return producer
            except Exception as exc:
                self.log.append(f"init_transactions: {type(exc).__name__}: {exc}")
                producer.close(timeout=1)
                time.sleep(0.2)

    def _check_deadline(self) -> None:
        if time.monotonic() > self.deadline:
            raise TimeoutError(f"the application did not finish in time: {self.progress.commits} commits, "
                               f"last steps {self.log[-10:]}")

    def _run(self) -> None:
        from kafka import KafkaConsumer
        from kafka.structs import OffsetAndMetadata

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group,
                                 isolation_level="read_committed", enable_auto_commit=False,
                                 auto_offset_reset="earliest", session_timeout_ms=45000, retry_backoff_ms=50,
                                 reconnect_backoff_ms=50, reconnect_backoff_max_ms=500)
        consumer.subscribe([self.source])
        producer = self._producer()
        try:
            while not self._finished(consumer):
                self._check_deadline()
                try:
                    polled = consumer.poll(timeout_ms=500, max_records=self.batch)
                except Exception as exc:  # the broker is down: poll again
                    self.log.append(f"poll: {type(exc).__name__}")
                    time.sleep(0.1)
                    continue
                messages = [r for records in polled.values() for r in records]
                if not messages:
                    continue
                try:
                    producer.begin_transaction()
                    for r in messages:
                        producer.send(self.sink, value=r.value, key=r.key, partition=r.partition)
                    offsets = {tp: OffsetAndMetadata(consumer.position(tp), "", -1) for tp in consumer.assignment()}
                    producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
                    producer.commit_transaction()
                    self.progress.committed()
                except Exception as exc:
                    self.log.append(f"transaction failed: {type(exc).__name__}: {exc}")
                    producer = self._recover(producer)
                    self._rewind(consumer)
        finally:
            consumer.close()
            producer.close(timeout=5)

    def _recover(self, producer: Any) -> Any:
        try:
            producer.abort_transaction()
            self.progress.aborts += 1
            return producer
        except Exception as exc:
            self.log.append(f"abort failed: {type(exc).__name__}: {exc}; a new producer")
            producer.close(timeout=1)
            self.progress.restarts += 1
            return self._producer()

    def _rewind(self, consumer: Any) -> None:
        for tp in consumer.assignment():
            while True:
                self._check_deadline()
                try:
                    committed = consumer.committed(tp)
                    break
                except Exception as exc:
                    self.log.append(f"committed: {type(exc).__name__}")
                    time.sleep(0.1)
            if committed is None:
                consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, committed)

    def _finished(self, consumer: Any) -> bool:
        assignment = consumer.assignment()
        if len(assignment) != len(self.ends):
            return False
        try:
            positions = {tp.partition: consumer.position(tp) for tp in assignment}
        except Exception as exc:  # the broker is down: not known yet
            self.log.append(f"position: {type(exc).__name__}")
            return False
        return all(positions[p] >= end for p, end in self.ends.items()) and self.progress.commits > 0


class AiokafkaApp(KafkaPythonApp):
    """The same loop on aiokafka's transactional producer (asyncio, in this thread)."""

    def __init__(self, bootstrap: str, source: str, sink: str, ends: dict[int, int], *, group: str = "ctp-aio",
                 transactional_id: str = "ctp-aio-app", batch: int = 8, deadline: float = 150) -> None:
        super().__init__(bootstrap, source, sink, ends, group=group, transactional_id=transactional_id, batch=batch,
                         deadline=deadline)
        self.name = "aiokafka-ctp"

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _new_producer(self) -> Any:
        from aiokafka import AIOKafkaProducer

        while True:
            self._check_deadline()
            producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, transactional_id=self.transactional_id,
                                        transaction_timeout_ms=60000, linger_ms=2, retry_backoff_ms=50)
            try:
                await asyncio.wait_for(producer.start(), 20)  # InitProducerId
                return producer
            except Exception as exc:
                self.log.append(f"start: {type(exc).__name__}: {exc}")
                await producer.stop()
                await asyncio.sleep(0.2)

    async def _main(self) -> None:
        from aiokafka import AIOKafkaConsumer

        consumer = AIOKafkaConsumer(self.source, bootstrap_servers=self.bootstrap, group_id=self.group,
                                    isolation_level="read_committed", enable_auto_commit=False,
                                    auto_offset_reset="earliest", session_timeout_ms=45000, retry_backoff_ms=50)
        await consumer.start()
        producer = await self._new_producer()
        try:
            while not await self._done(consumer):
                self._check_deadline()
                try:
                    polled = await consumer.getmany(timeout_ms=500, max_records=self.batch)
                except Exception as exc:  # the broker is down: poll again
                    self.log.append(f"getmany: {type(exc).__name__}")
                    await asyncio.sleep(0.1)
                    continue
                messages = [r for records in polled.values() for r in records]
                if not messages:
                    continue
                try:
                    await asyncio.wait_for(self._transact(producer, consumer, messages), 30)
                    self.progress.committed()
                except Exception as exc:
                    self.log.append(f"transaction failed: {type(exc).__name__}: {exc}")
                    await producer.stop()
                    self.progress.restarts += 1
                    producer = await self._new_producer()  # fences the old one, aborting its transaction
                    await self._rewind_async(consumer)
        finally:
            await consumer.stop()
            await producer.stop()

    async def _transact(self, producer: Any, consumer: Any, messages: list[Any]) -> None:
        async with producer.transaction():
            for r in messages:
                await producer.send(self.sink, value=r.value, key=r.key, partition=r.partition)
            offsets = {tp: await consumer.position(tp) for tp in consumer.assignment()}
            await producer.send_offsets_to_transaction(offsets, self.group)

    async def _rewind_async(self, consumer: Any) -> None:
        for tp in consumer.assignment():
            while True:
                self._check_deadline()
                try:
                    committed = await consumer.committed(tp)
                    break
                except Exception as exc:
                    self.log.append(f"committed: {type(exc).__name__}")
                    await asyncio.sleep(0.1)
            if committed is None:
                await consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, committed)

    async def _done(self, consumer: Any) -> bool:
        assignment = consumer.assignment()
        if len(assignment) != len(self.ends) or not self.progress.commits:
            return False
        try:
            positions = {tp.partition: await consumer.position(tp) for tp in assignment}
        except Exception as exc:
            self.log.append(f"position: {type(exc).__name__}")
            return False
        return all(positions[p] >= end for p, end in self.ends.items())


def main(argv: list[str]) -> int:
    """``python -m tests.support.eos BOOTSTRAP SOURCE SINK ENDS``: the confluent-kafka application as a
    process of its own (a test SIGKILLs it mid-transaction); prints ``committed N`` after each commit."""
    import json
    import sys

    bootstrap, source, sink, ends_json = argv
    ends = {int(p): end for p, end in json.loads(ends_json).items()}
    app = ConfluentApp(bootstrap, source, sink, ends, instance_id="ctp-instance", deadline=120)
    app.start()
    printed = 0
    while app.is_alive() or printed < app.progress.commits:
        app.progress.wait_for(printed + 1, 0.2)
        while printed < app.progress.commits:
            printed += 1
            print(f"committed {printed}", flush=True)
    if app.error is not None:
        print(f"failed: {app.error!r}; steps {app.log[-15:]}", file=sys.stderr, flush=True)
        return 1
    print("finished", flush=True)
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))

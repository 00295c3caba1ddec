"""Transaction rows of ``make bench``: what exactly-once costs.

One kcoord (``log.flush.policy=durable``, the default). Measured:

- transactions/s of a confluent-kafka transactional producer, each transaction 10
  records of 100 bytes over 2 partitions plus one offset commit
  (``send_offsets_to_transaction``), committed one after the other (acks=-1; every
  commit waits for its markers to be durable);
- Fetch MB/s of a whole transactional topic from offset 0 (1 connection), with
  ``read_uncommitted`` beside ``read_committed`` (which stops at the last stable offset
  and collects aborted transactions).

``python -m bench.txn_bench`` prints the rows alone.
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial

import trio

from bench import loadgen
from bench.brokers import start_kcoord

READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def transactions_per_second(bootstrap: str, seconds: float) -> float:
    """Consume-transform-produce shaped transactions, back to back, for ``seconds``."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-txn-app"})
    metadata = consumer.consumer_group_metadata()
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "bench-txn", "linger.ms": 0,
                         "acks": "all"})
    producer.init_transactions(30)
    value = b"v" * 100
    count = 0
    begin = time.perf_counter()
    deadline = begin + seconds
    try:
        while time.perf_counter() < deadline:
            producer.begin_transaction()
            for i in range(10):
                producer.produce("bench-txn", value=value, partition=i % 2)
            producer.send_offsets_to_transaction([TopicPartition("bench-txn-in", 0, count + 1)], metadata, 30)
            producer.commit_transaction(30)
            count += 1
    finally:
        consumer.close()
    return count / (time.perf_counter() - begin)


def fill(bootstrap: str, topic: str, partitions: int, seconds: float) -> None:
    """Transactions of 100 records of 1 KiB per partition, for ``seconds``."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "bench-txn-fill", "linger.ms": 5,
                         "batch.size": 1 << 20})
    producer.init_transactions(30)
    value = b"x" * 1024
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        producer.begin_transaction()
        for i in range(100 * partitions):
            producer.produce(topic, value=value, partition=i % partitions)
        producer.commit_transaction(60)


def run(seconds: float = 3.0) -> list[str]:
    """The rows, as markdown lines for docs/benchmarks.md."""
    broker = start_kcoord({"group.initial.rebalance.delay.ms": 0, "log.flush.policy": "durable"})
    bootstrap = f"{broker.address[0]}:{broker.address[1]}"
    try:
        trio.run(loadgen.create_topic, broker.address, "bench-txn", 2)
        trio.run(loadgen.create_topic, broker.address, "bench-txn-in", 1)
        rate = transactions_per_second(bootstrap, seconds)
        trio.run(loadgen.create_topic, broker.address, "bench-txn-data", 4)
        fill(bootstrap, "bench-txn-data", 4, seconds)
        fetch = {}
        # A first read warms the page cache, so both isolation levels read from memory.
        trio.run(loadgen.fetch_everything, broker.address, "bench-txn-data", 4)
        for isolation in (READ_UNCOMMITTED, READ_COMMITTED):
            size, _, took = trio.run(partial(loadgen.fetch_everything, broker.address, "bench-txn-data", 4,
                                             isolation_level=isolation))
            fetch[isolation] = size / took / 1e6
    finally:
        broker.stop()
    return [
        "## Transactions",
        "",
        "`bench/txn_bench.py`: one kcoord, `log.flush.policy=durable`, a confluent-kafka transactional producer.",
        "",
        "| workload | result |",
        "|---|---|",
        f"| transactions/s (10 records of 100 B over 2 partitions + 1 offset commit, acks=-1, one at a time) "
        f"| {rate:,.1f} |",
        f"| Fetch MB/s read_uncommitted (1 conn, whole transactional topic from offset 0) "
        f"| {fetch[READ_UNCOMMITTED]:,.1f} |",
        f"| Fetch MB/s read_committed (same topic) | {fetch[READ_COMMITTED]:,.1f} |",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args(argv)
    print("\n".join(run(args.seconds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

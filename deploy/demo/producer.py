"""Demo producer: create a topic and write N numbered records to it with kafka-python.

Every record's value is JSON ``{"seq": i}`` for i in 0..N-1, keyed ``key-<i>``, so the
demo consumer can tell that it saw each record exactly once. Configuration comes from the
command line, with defaults from the environment (see ``ENVIRONMENT``).

Exit codes: 0 every record acknowledged; 1 the broker was unreachable, the topic could not
be created, or a record was not acknowledged within the timeout; 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections import Counter

log = logging.getLogger("demo-producer")

# Environment variable -> (option, default). The option wins over the variable.
ENVIRONMENT = {
    "DEMO_BOOTSTRAP_SERVERS": ("--bootstrap-server", "127.0.0.1:9092"),
    "DEMO_TOPIC": ("--topic", "demo"),
    "DEMO_PARTITIONS": ("--partitions", "3"),
    "DEMO_RECORDS": ("--records", "1000"),
    "DEMO_TIMEOUT_S": ("--timeout", "60"),
}


def _default(variable: str) -> str:
    return os.environ.get(variable, ENVIRONMENT[variable][1])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Create a topic and produce N numbered records to it.")
    parser.add_argument("--bootstrap-server", default=_default("DEMO_BOOTSTRAP_SERVERS"), metavar="HOST:PORT",
                        help="broker address (env DEMO_BOOTSTRAP_SERVERS)")
    parser.add_argument("--topic", default=_default("DEMO_TOPIC"), help="topic name (env DEMO_TOPIC)")
    parser.add_argument("--partitions", type=int, default=int(_default("DEMO_PARTITIONS")),
                        help="partitions of the topic if it is created (env DEMO_PARTITIONS)")
    parser.add_argument("--records", type=int, default=int(_default("DEMO_RECORDS")),
                        help="how many records to produce (env DEMO_RECORDS)")
    parser.add_argument("--timeout", type=float, default=float(_default("DEMO_TIMEOUT_S")), metavar="SECONDS",
                        help="give up after this long (env DEMO_TIMEOUT_S)")
    return parser


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create the topic; an existing topic is kept as it is."""
    from kafka import KafkaAdminClient
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="demo-producer-admin")
    try:
        admin.create_topics({topic: {"num_partitions": partitions, "replication_factor": 1}})
        log.info("created topic %s with %d partitions", topic, partitions)
    except TopicAlreadyExistsError:
        log.info("topic %s already exists; producing to it as it is", topic)
    finally:
        admin.close()


def produce(bootstrap: str, topic: str, records: int, deadline: float) -> Counter[int]:
    """Send the records, wait for every acknowledgement; records per partition."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="demo-producer", acks="all", linger_ms=5)
    per_partition: Counter[int] = Counter()
    try:
        futures = [
            producer.send(topic, key=f"key-{seq}".encode(), value=json.dumps({"seq": seq}).encode())
            for seq in range(records)
        ]
        producer.flush(timeout=max(0.0, deadline - time.monotonic()))
        for future in futures:
            metadata = future.get(timeout=max(0.1, deadline - time.monotonic()))
            per_partition[metadata.partition] += 1
    finally:
        producer.close(timeout=5)
    return per_partition


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    if args.records < 0 or args.partitions < 1 or args.timeout <= 0:
        print("demo-producer: --records must be >= 0, --partitions >= 1, --timeout > 0", file=sys.stderr)
        return 2
    deadline = time.monotonic() + args.timeout
    try:
        create_topic(args.bootstrap_server, args.topic, args.partitions)
        per_partition = produce(args.bootstrap_server, args.topic, args.records, deadline)
    except Exception as exc:  # any client error ends the demo with a reason and exit code 1
        log.error("failed: %s: %s", type(exc).__name__, exc)
        return 1
    summary = {"topic": args.topic, "records": sum(per_partition.values()),
               "per_partition": {str(p): n for p, n in sorted(per_partition.items())}}
    print("summary " + json.dumps(summary, sort_keys=True), flush=True)
    log.info("produced %d records to %s", summary["records"], args.topic)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Reading the data directory of a running broker while a client keeps committing."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from pipeline import history, jobs
from tests.pipeline.test_reader import planned_rows
from tests.support.broker_process import BrokerProcess
from tests.support.clients import create_topic, wait_until

pytestmark = pytest.mark.integration

SETTINGS = {
    "log.history.retention.ms": 86_400_000,
    "offsets.topic.segment.bytes": 2048,
    "log.cleaner.backoff.ms": 50,
    "log.cleaner.min.cleanable.ratio": 0.01,
    "offsets.topic.num.partitions": 2,
}
PARTITIONS = 3


class Committer(threading.Thread):
    """Commits offsets i, i, i for the three partitions, for i = 1, 2, ...; ``acked`` is the last acked i."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.acked = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        from kafka import KafkaConsumer, TopicPartition
        from kafka.structs import OffsetAndMetadata

        try:
            consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id="live", enable_auto_commit=False)
            partitions = [TopicPartition("live", p) for p in range(PARTITIONS)]
            consumer.assign(partitions)
            i = 0
            while not self.stop.is_set() and i < 1500:
                i += 1
                consumer.commit({tp: OffsetAndMetadata(i, "", -1) for tp in partitions})
                self.acked = i
            consumer.close()
        except BaseException as exc:
            self.error = exc


def commits_seen(rows: list[dict[str, Any]]) -> set[int]:
    return {r["offset"] for r in rows if r["kind"] == "commit"}


def test_reads_during_commits_see_every_acknowledged_commit(broker_factory: Any, spark: Any) -> None:
    broker: BrokerProcess = broker_factory(SETTINGS)
    create_topic(broker.bootstrap, "live", PARTITIONS)
    committer = Committer(broker.bootstrap)
    committer.start()
    data_dir = broker.data_dir
    try:
        wait_until(lambda: committer.acked >= 50 or committer.error is not None, 30, "the first commits")
        history_files = len(list((data_dir / "history").rglob("*.log")))
        reads = 0
        while reads < 8 and committer.is_alive():
            # let segments roll and the cleaner run between reads, so reads race with both
            target = committer.acked + 40

            def more(target: int = target) -> bool:
                return committer.acked >= target or not committer.is_alive()

            wait_until(more, 30, "more commits")
            acked_before = committer.acked
            rows = history.read_rows(data_dir, "live") if reads % 2 else planned_rows(data_dir)
            seen = commits_seen(rows)
            # every commit acknowledged before the read began is durable, so it is read
            assert set(range(1, acked_before + 1)) <= seen, reads
            reads += 1
        acked_before = committer.acked
        spark_rows = jobs.records(spark, str(data_dir), "live").select("offset", "kind").collect()
        assert set(range(1, acked_before + 1)) <= {r["offset"] for r in spark_rows if r["kind"] == "commit"}
        assert reads == 8, "the committer stopped before the reads were done"
        assert len(list((data_dir / "history").rglob("*.log"))) > history_files, "no clean while reading"
    finally:
        committer.stop.set()
        committer.join(30)
    assert committer.error is None, repr(committer.error)
    final = history.read_rows(data_dir, "live")
    assert commits_seen(final) == set(range(1, committer.acked + 1))
    assert [(r["coordinator_partition"], r["log_offset"], r["offset"]) for r in planned_rows(data_dir)] == [
        (r["coordinator_partition"], r["log_offset"], r["offset"]) for r in final]

"""Crash safety of committed offsets: SIGKILL the real broker while commits stream in.

Writers commit increasing offsets as fast as the broker acknowledges them and remember the
last ACKNOWLEDGED offset of every (group, partition). The broker is killed at a moment drawn
from a seeded RNG (expressed as "after N more acks", plus a small random delay, so the kill
lands at different points of the fsync cycle), restarted on the same data directory, and:

- every acknowledged offset is still there (committed >= last acked);
- nothing was invented (committed <= the largest offset ever sent) and each value still
  carries its own metadata (no torn or mixed-up record);
- across cycles no committed offset ever moves backward.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.clients import wait_until
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration

SEED = 0x5EED_0FF5
CYCLES = 30
GROUPS = ("crash-a", "crash-b", "crash-c")
TOPICS = {"crash-t": 4, "crash-u": 2}
PARTITIONS = [(t, p) for t, n in TOPICS.items() for p in range(n)]
Key = tuple[str, str, int]  # group, topic, partition


class Writer(threading.Thread):
    """Commits ever larger offsets for one group until its connection drops."""

    def __init__(self, broker: BrokerProcess, group: str, first_offset: int, seed: int) -> None:
        super().__init__(name=f"writer-{group}", daemon=True)
        self.host, self.port = broker.host, broker.port
        self.group = group
        self.next_offset = first_offset
        self.rng = random.Random(seed)
        self.acked: dict[tuple[str, int], int] = {}
        self.sent_max: dict[tuple[str, int], int] = {}
        self.acks = 0
        self.failure: str | None = None  # an error reply: never expected here
        self.dropped: BaseException | None = None

    def run(self) -> None:
        try:
            client = WireClient(self.host, self.port, timeout=10)
        except OSError as exc:  # killed before we connected
            self.dropped = exc
            return
        try:
            while True:
                self._commit_once(client)
                if self.failure is not None:
                    return
        except (OSError, ConnectionError, EOFError) as exc:  # the broker died under us
            self.dropped = exc
        finally:
            client.close()

    def _commit_once(self, client: WireClient) -> None:
        chosen = self.rng.sample(PARTITIONS, self.rng.randint(1, len(PARTITIONS)))
        offset = self.next_offset
        self.next_offset += 1
        version = self.rng.randint(2, 8)
        topics: dict[str, list[dict[str, Any]]] = {}
        for topic, partition in chosen:
            # record before sending: an unacknowledged commit may still have become durable
            self.sent_max[(topic, partition)] = offset
            topics.setdefault(topic, []).append({
                "partition_index": partition, "committed_offset": offset, "committed_leader_epoch": -1,
                "committed_metadata": f"{self.group}@{offset}"})
        body = client.request(8, version, {
            "group_id": self.group, "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "retention_time_ms": -1,
            "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]})
        codes = {(t.name, p.partition_index): p.error_code for t in body.topics for p in t.partitions}
        if codes != {tp: 0 for tp in chosen}:
            self.failure = f"commit v{version} of {self.group}@{offset} answered {codes}"
            return
        for tp in chosen:
            self.acked[tp] = offset
        self.acks += 1


def _committed(broker: BrokerProcess) -> dict[Key, tuple[int, str]]:
    with WireClient(broker.host, broker.port) as client:
        body = client.request(9, 8, {"require_stable": False,
                                     "groups": [{"group_id": g, "topics": None} for g in GROUPS]})
    out = {}
    for group in body.groups:
        assert group.error_code == 0
        for topic in group.topics:
            for p in topic.partitions:
                assert p.error_code == 0
                out[(group.group_id, topic.name, p.partition_index)] = (p.committed_offset, p.metadata)
    return out


def _wait_for_acks(writers: list[Writer], wanted: int, cycle: int) -> None:
    def reached() -> bool:
        if any(w.failure for w in writers) or not any(w.is_alive() for w in writers):
            return True  # nothing more will come; the checks after the kill report why
        return sum(w.acks for w in writers) >= wanted

    wait_until(reached, 20, f"{wanted} acks in cycle {cycle}")
    for w in writers:
        assert w.failure is None, w.failure
        assert w.is_alive(), f"{w.name} stopped before the kill: {w.dropped!r}"


def _start(data_dir: Path) -> BrokerProcess:
    return BrokerProcess(data_dir).start()


def test_acknowledged_offsets_survive_sigkill(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    data_dir = tmp_path / "data"
    broker = _start(data_dir)
    acked: dict[Key, int] = {}  # last acknowledged offset, over all cycles
    sent_max: dict[Key, int] = {}
    seen: dict[Key, int] = {}  # what the broker reported after the previous restart
    next_offset = {g: 0 for g in GROUPS}
    total_acks = 0
    try:
        with WireClient(broker.host, broker.port) as client:
            for topic, count in TOPICS.items():
                body = client.request(19, 4, {
                    "topics": [{"name": topic, "num_partitions": count, "replication_factor": 1,
                                "assignments": [], "configs": []}],
                    "timeout_ms": 5000, "validate_only": False})
                assert body.topics[0].error_code == 0

        for cycle in range(CYCLES):
            writers = [Writer(broker, g, next_offset[g], rng.getrandbits(32)) for g in GROUPS]
            for w in writers:
                w.start()
            # the kill moment: after a random number of acks (0 = at once), then a random jitter
            wanted = rng.choice([0, rng.randint(1, 20), rng.randint(20, 400)])
            _wait_for_acks(writers, wanted, cycle)
            time.sleep(rng.uniform(0, 0.03))
            broker.kill()
            for w in writers:
                w.join(15)
                assert not w.is_alive(), f"{w.name} hung after the kill"
                assert w.failure is None, w.failure
                total_acks += w.acks
                next_offset[w.group] = w.next_offset
                for (topic, partition), offset in w.acked.items():
                    acked[(w.group, topic, partition)] = offset
                for (topic, partition), offset in w.sent_max.items():
                    sent_max[(w.group, topic, partition)] = offset

            broker = _start(data_dir)
            committed = _committed(broker)
            for key, offset in acked.items():
                assert key in committed, f"cycle {cycle}: acknowledged {key}@{offset} lost entirely"
                assert committed[key][0] >= offset, (
                    f"cycle {cycle}: {key} acknowledged at {offset}, broker has {committed[key][0]}")
            for key, (offset, metadata) in committed.items():
                assert key in sent_max and offset <= sent_max[key], f"cycle {cycle}: {key}@{offset} never sent"
                assert metadata == f"{key[0]}@{offset}", f"cycle {cycle}: {key}@{offset} carries {metadata!r}"
                assert offset >= seen.get(key, -1), (
                    f"cycle {cycle}: {key} went back from {seen[key]} to {offset}")
                seen[key] = offset
            assert set(seen) >= set(acked)

        assert total_acks > CYCLES, f"only {total_acks} commits acknowledged in {CYCLES} cycles"
        # a graceful stop after the last crash recovery keeps everything too
        assert broker.stop() == 0, broker.log()
        broker = _start(data_dir)
        assert {k: v[0] for k, v in _committed(broker).items()} == seen
        assert broker.stop() == 0, broker.log()
    finally:
        broker.kill()

"""The data path announces every log start move and waits for the answer before making it.

Retention (in the maintenance worker thread) and DeleteRecords ask the ``log_start_guard``
first, with exactly the start they will move to; only when it returns does the start move.
A guard that refuses (the coordinator log cannot be written) keeps the start where it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from broker.config import Config
from broker.data_service import DataService
from broker.slots import Slot
from broker.topics import TopicCatalog
from protocol.codec import decode_request, decode_response, encode_request
from protocol.errors import ErrorCode

DAY = 86_400_000


class RecordingGuard:
    def __init__(self, catalog: TopicCatalog, refuse: bool = False) -> None:
        self.catalog = catalog
        self.refuse = refuse
        #: (topic, partition, new start, the log start the world could see when asked)
        self.calls: list[tuple[str, int, int, int]] = []

    async def before_log_start_moves(self, topic: str, partition: int, new_start: int) -> None:
        log = self.catalog.partition(topic, partition)
        assert log is not None
        self.calls.append((topic, partition, new_start, log.log_start_offset))
        await trio.sleep(0)
        if self.refuse:
            raise RuntimeError("the coordinator log cannot be written")

    def before_log_start_moves_blocking(self, topic: str, partition: int, new_start: int) -> None:
        trio.from_thread.run(self.before_log_start_moves, topic, partition, new_start)


def world(tmp_path: Path, refuse: bool = False) -> tuple[TopicCatalog, DataService, RecordingGuard]:
    config = Config({})
    catalog = TopicCatalog(tmp_path, config)
    assert catalog.create("t", 1, 1, {"segment.bytes": "1024", "retention.ms": str(7 * DAY)})[0] is ErrorCode.NONE
    data = DataService(catalog, lambda: 100 * DAY, durable=False)
    guard = RecordingGuard(catalog, refuse)
    data.log_start_guard = guard
    log = catalog.partition("t", 0)
    assert log is not None
    for i in range(40):
        log.append([(b"k", b"x" * 100)], 100 * DAY - (10 * DAY if i < 20 else 1000))
    return catalog, data, guard


def delete_records(offset: int) -> Any:
    body = {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "offset": offset}]}], "timeout_ms": 5000}
    return decode_request(encode_request(21, 2, 7, body)[4:])


async def test_retention_announces_the_start_it_will_move_to_before_moving_it(tmp_path: Path) -> None:
    catalog, data, guard = world(tmp_path)
    log = catalog.partition("t", 0)
    assert log is not None
    deleted = await trio.to_thread.run_sync(data.enforce_retention, 100 * DAY)
    assert deleted > 0
    ((topic, partition, new_start, visible),) = guard.calls
    assert (topic, partition, visible) == ("t", 0, 0)  # the start had not moved when the guard was asked
    assert log.log_start_offset == new_start > 0
    assert await trio.to_thread.run_sync(data.enforce_retention, 100 * DAY) == 0
    assert len(guard.calls) == 1  # nothing more to move, nothing announced
    catalog.close()


async def test_delete_records_waits_for_the_guard_then_answers_the_new_start(tmp_path: Path) -> None:
    catalog, data, guard = world(tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(data.run)
        slot = data.delete_records(delete_records(25), "peer")
        assert isinstance(slot, Slot)
        with trio.fail_after(10):
            await slot.event.wait()
        assert slot.frame is not None
        reply = decode_response(21, 2, slot.frame[4:])[1]
        assert [(p.error_code, p.low_watermark) for t in reply.topics for p in t.partitions] == [(0, 25)]
        assert guard.calls == [("t", 0, 25, 0)]
        nursery.cancel_scope.cancel()
    catalog.close()


async def test_a_refusing_guard_keeps_the_start_and_answers_a_storage_error(tmp_path: Path) -> None:
    catalog, data, _ = world(tmp_path, refuse=True)
    log = catalog.partition("t", 0)
    assert log is not None
    async with trio.open_nursery() as nursery:
        await nursery.start(data.run)
        slot = data.delete_records(delete_records(25), "peer")
        assert isinstance(slot, Slot)
        with trio.fail_after(10):
            await slot.event.wait()
        assert slot.frame is not None
        reply = decode_response(21, 2, slot.frame[4:])[1]
        assert [p.error_code for t in reply.topics for p in t.partitions] == [ErrorCode.KAFKA_STORAGE_ERROR]
        assert log.log_start_offset == 0
        nursery.cancel_scope.cancel()
    catalog.close()

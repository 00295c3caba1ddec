"""Idempotent producers: producer ids, and the per-partition sequence rules.

A producer id comes from InitProducerId. Ids are handed out from blocks whose end is
persisted before use, so a restart never reuses one. Each partition remembers, per
producer, its epoch and the sequence ranges of its last few batches; the state is rebuilt
at start-up from the batches in the log, so the rules hold across restarts.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from protocol.errors import ErrorCode
from storage.fs import REAL_FS, FileSystem
from storage.layout import producer_ids_file

INT32_MAX = 2147483647
RETAINED_BATCHES = 5  # as Kafka: the producer has at most 5 batches in flight
ID_BLOCK = 1000


class ProducerIds:
    """Allocates producer ids; the block end is fsynced before any id in it is used.

    ``allocate`` raises ``OSError`` if the block end cannot be written: no id of an
    unrecorded block is ever handed out.
    """

    def __init__(self, data_dir: Path, fs: FileSystem = REAL_FS) -> None:
        self.fs = fs
        self.path = producer_ids_file(data_dir)
        self._next = 0
        self._block_end = 0
        if fs.exists(self.path):
            self._next = self._block_end = int(json.loads(fs.read_bytes(self.path))["block_end"])

    def allocate(self) -> int:
        if self._next >= self._block_end:
            block_end = self._next + ID_BLOCK
            self.fs.write_atomically(self.path, json.dumps({"block_end": block_end}).encode())
            self._block_end = block_end
        producer_id = self._next
        self._next += 1
        return producer_id


@dataclass
class _Producer:
    epoch: int
    batches: deque[tuple[int, int, int, int]] = field(default_factory=lambda: deque(maxlen=RETAINED_BATCHES))
    # (first sequence, last sequence, base offset, last offset)

    @property
    def last_sequence(self) -> int:
        return self.batches[-1][1] if self.batches else -1


def _next_sequence(sequence: int) -> int:
    return 0 if sequence == INT32_MAX else sequence + 1


class ProducerStates:
    """One partition's idempotence state."""

    __slots__ = ("_producers",)

    def __init__(self) -> None:
        self._producers: dict[int, _Producer] = {}

    def check(self, producer_id: int, epoch: int, first_seq: int,
              count: int) -> tuple[ErrorCode, int | None]:
        """Validate a batch: (error, base offset of the original when it is a duplicate)."""
        state = self._producers.get(producer_id)
        if state is None:
            if first_seq != 0:
                return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, None
            return ErrorCode.NONE, None
        if epoch < state.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH, None
        if epoch > state.epoch:
            return (ErrorCode.NONE if first_seq == 0 else ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER), None
        last_seq = (first_seq + count - 1) % (INT32_MAX + 1)
        for seq_first, seq_last, base, _ in state.batches:
            if seq_first == first_seq and seq_last == last_seq:
                return ErrorCode.NONE, base
        if first_seq != _next_sequence(state.last_sequence):
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, None
        return ErrorCode.NONE, None

    def record(self, producer_id: int, epoch: int, first_seq: int, count: int, base_offset: int) -> None:
        state = self._producers.get(producer_id)
        if state is None or epoch != state.epoch:
            state = self._producers[producer_id] = _Producer(epoch)
        last_seq = (first_seq + count - 1) % (INT32_MAX + 1)
        state.batches.append((first_seq, last_seq, base_offset, base_offset + count - 1))

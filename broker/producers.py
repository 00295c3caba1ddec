"""Producer ids, for idempotent and transactional producers alike.

A producer id comes from InitProducerId (the transaction coordinator allocates the ids of
transactional ones). Ids are handed out from blocks whose end is persisted before use, so
a restart never reuses one. What each partition remembers of its producers (epochs,
sequences, open transactions) is ``storage.producer_state``.
"""

from __future__ import annotations

import json
from pathlib import Path

from storage.fs import REAL_FS, FileSystem
from storage.layout import producer_ids_file

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

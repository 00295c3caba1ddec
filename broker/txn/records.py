"""The transaction coordinator's record: one TransactionLogKey/Value in ``__transaction_state``."""

from __future__ import annotations

from dataclasses import dataclass

from broker.txn.state import TransactionMetadata
from protocol.transaction_log import TransactionLogEntry, decode_key, decode_value, encode_key, encode_value


@dataclass(frozen=True, slots=True)
class TransactionRecord:
    """A transactional id's new state; ``entry`` None is the tombstone of an expired id."""

    transactional_id: str
    entry: TransactionLogEntry | None

    @classmethod
    def of(cls, metadata: TransactionMetadata) -> TransactionRecord:
        return cls(metadata.transactional_id, metadata.entry())


def encode(record: TransactionRecord) -> tuple[bytes, bytes | None]:
    return encode_key(record.transactional_id), None if record.entry is None else encode_value(record.entry)


def decode(key: bytes, value: bytes | None) -> TransactionRecord | None:
    """A record read back from the log; None for a key version this coordinator does not know."""
    transactional_id = decode_key(key)
    if transactional_id is None:
        return None
    return TransactionRecord(transactional_id, None if value is None else decode_value(value))

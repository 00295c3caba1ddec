"""Copying a partition's log from its leader over the Kafka protocol: Fetch as a replica.

A node that is being added to a partition connects to the leader's inter-broker listener
and sends Fetch requests carrying its own node id as ``replica_id``, exactly as a Kafka
follower does. The leader answers from its log (``cluster.node``'s replica path), and the
batches go into a ``storage.replica_copy.LogCopy``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import trio

from protocol.api_keys import ApiKey
from protocol.codec import decode_response, encode_request
from protocol.errors import ProtocolError

FETCH_VERSION = 12
CLIENT_ID = "kcoord-replica"
_SIZE = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class Fetched:
    error: int
    high_watermark: int
    log_start_offset: int
    records: bytes
    #: KIP-279: the leader's (epoch, end offset) where this replica's log diverges from its own.
    diverging: tuple[int, int] | None = None


class ReplicaClient:
    """One connection from a replica to a leader; one request at a time."""

    def __init__(self, host: str, port: int, replica_id: int) -> None:
        self.host = host
        self.port = port
        self.replica_id = replica_id
        self._stream: trio.SocketStream | None = None
        self._correlation = 0
        self._buffer = bytearray()

    async def _connect(self) -> trio.SocketStream:
        if self._stream is None:
            self._stream = await trio.open_tcp_stream(self.host, self.port)
        return self._stream

    async def aclose(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def _receive_frame(self, stream: trio.SocketStream) -> bytes:
        while True:
            if len(self._buffer) >= 4:
                (size,) = _SIZE.unpack_from(self._buffer, 0)
                if len(self._buffer) >= 4 + size:
                    frame = bytes(self._buffer[4 : 4 + size])
                    del self._buffer[: 4 + size]
                    return frame
            data = await stream.receive_some(1 << 20)
            if not data:
                raise trio.BrokenResourceError("the leader closed the connection")
            self._buffer.extend(data)

    async def request(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        stream = await self._connect()
        self._correlation += 1
        try:
            await stream.send_all(encode_request(api_key, version, self._correlation, body, CLIENT_ID))
            frame = await self._receive_frame(stream)
            correlation, reply = decode_response(api_key, version, frame)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, ProtocolError):
            await self.aclose()
            self._buffer.clear()
            raise
        if correlation != self._correlation:
            await self.aclose()
            raise trio.BrokenResourceError(f"correlation id {correlation}, expected {self._correlation}")
        return reply

    async def fetch(self, topic: str, partition: int, offset: int, leader_epoch: int,
                    max_bytes: int = 1 << 20, last_fetched_epoch: int = -1, max_wait_ms: int = 0) -> Fetched:
        """One partition's fetch from ``offset``; with ``max_wait_ms``, the leader holds it until
        it has records (a follower's long poll), else it answers at once."""
        reply = await self.request(ApiKey.FETCH, FETCH_VERSION, {
            "replica_id": self.replica_id, "max_wait_ms": max_wait_ms, "min_bytes": 1 if max_wait_ms else 0,
            "max_bytes": max_bytes, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{
                "partition": partition, "current_leader_epoch": leader_epoch, "fetch_offset": offset,
                "last_fetched_epoch": last_fetched_epoch, "log_start_offset": -1,
                "partition_max_bytes": max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": "",
        })
        if reply.error_code:
            return Fetched(int(reply.error_code), -1, -1, b"")
        for topic_reply in reply.responses:
            for part in topic_reply.partitions:
                diverging = part.get("diverging_epoch")
                found = None
                if diverging is not None and (int(diverging.epoch) >= 0 or int(diverging.end_offset) >= 0):
                    found = (int(diverging.epoch), int(diverging.end_offset))
                return Fetched(int(part.error_code), int(part.high_watermark), int(part.log_start_offset),
                               bytes(part.records or b""), found)
        return Fetched(-1, -1, -1, b"")

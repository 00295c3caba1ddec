"""Fetch as a replica, over the Kafka protocol: how a follower (and a node copying a
partition it is being moved to) reads a leader's log.

The client connects to the leader's inter-broker listener, asks its ApiVersions once per
connection, and sends Fetch at the highest version both sides support, as a Kafka
follower's NetworkClient does: up to v14 its node id travels as ``replica_id``, from v15
in ``replica_state`` with its broker epoch (KIP-903), and from v13 the topic is named by
its id (KIP-516). The leader answers from its log (``cluster.node``'s replica path).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Any

import trio

from protocol.api_keys import ApiKey
from protocol.codec import decode_response, encode_request
from protocol.errors import ProtocolError
from protocol.messages import REQUESTS

#: The Fetch versions this client speaks: from v12 (diverging epochs, KIP-279) to the newest declared.
FETCH_VERSIONS = (12, REQUESTS[ApiKey.FETCH].max_version)
#: KIP-516: from this version a Fetch names its topics by id.
FETCH_BY_TOPIC_ID = 13
#: KIP-903: from this version the replica's id travels in ``replica_state``.
FETCH_REPLICA_STATE = 15
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

    def __init__(self, host: str, port: int, replica_id: int, replica_epoch: int = -1) -> None:
        self.host = host
        self.port = port
        self.replica_id = replica_id
        #: This node's broker epoch: the etcd revision of its registration (KIP-903's ReplicaEpoch).
        self.replica_epoch = replica_epoch
        #: The Fetch version for this connection, agreed through ApiVersions (None: not asked yet).
        self.fetch_version: int | None = None
        self._stream: trio.SocketStream | None = None
        self._correlation = 0
        self._buffer = bytearray()

    async def _connect(self) -> trio.SocketStream:
        if self._stream is None:
            self._stream = await trio.open_tcp_stream(self.host, self.port)
        return self._stream

    async def aclose(self) -> None:
        self.fetch_version = None
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

    async def negotiate(self) -> int:
        """The highest Fetch version this client and the leader both support (ApiVersions v0)."""
        if self.fetch_version is None:
            reply = await self.request(ApiKey.API_VERSIONS, 0, {})
            theirs = next(((int(a.min_version), int(a.max_version)) for a in reply.api_keys
                           if int(a.api_key) == ApiKey.FETCH), None)
            if reply.error_code or theirs is None or theirs[1] < FETCH_VERSIONS[0]:
                raise trio.BrokenResourceError(f"the leader serves Fetch {theirs}, a replica needs v12 or later")
            self.fetch_version = min(FETCH_VERSIONS[1], theirs[1])
        return self.fetch_version

    async def fetch(self, topic: str, partition: int, offset: int, leader_epoch: int,
                    max_bytes: int = 1 << 20, last_fetched_epoch: int = -1, max_wait_ms: int = 0,
                    topic_id: uuid.UUID | None = None) -> Fetched:
        """One partition's fetch from ``offset``; with ``max_wait_ms``, the leader holds it until
        it has records (a follower's long poll), else it answers at once."""
        version = await self.negotiate()
        if topic_id is None:
            version = min(version, FETCH_BY_TOPIC_ID - 1)
        body: dict[str, Any] = {
            "replica_id": self.replica_id, "max_wait_ms": max_wait_ms, "min_bytes": 1 if max_wait_ms else 0,
            "max_bytes": max_bytes, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "topic_id": topic_id, "partitions": [{
                "partition": partition, "current_leader_epoch": leader_epoch, "fetch_offset": offset,
                "last_fetched_epoch": last_fetched_epoch, "log_start_offset": -1,
                "partition_max_bytes": max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": "",
        }
        if version >= FETCH_REPLICA_STATE:
            body["replica_state"] = {"replica_id": self.replica_id, "replica_epoch": self.replica_epoch}
        reply = await self.request(ApiKey.FETCH, version, body)
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

"""The one module that speaks etcd: its v3 JSON gateway over httpx, under trio.

etcd's gRPC API is also served as JSON over HTTP (``/v3/kv/range``, ``/v3/kv/txn``,
``/v3/lease/grant``, ``/v3/watch``...): keys and values travel base64-encoded and 64-bit
integers as strings. Nothing outside this module sees that: callers get ``KeyValue``
objects, revisions and lease ids as ints, and ``EtcdUnavailable`` when no endpoint answers.
Several endpoints may be given; a request that cannot reach one tries the next.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

log = logging.getLogger("kcoord.cluster.etcd")
# httpx logs every request at INFO: the lease keep-alives alone would fill the broker log.
logging.getLogger("httpx").setLevel(logging.WARNING)

#: How long one request may take before the endpoint counts as unreachable.
REQUEST_TIMEOUT = 5.0


class EtcdUnavailable(Exception):
    """No endpoint answered (connection refused, timed out, or an HTTP error)."""


class EtcdError(Exception):
    """etcd answered with an error (a malformed request, a limit exceeded)."""


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int = 0


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """A put (``value`` set) or a delete (``value`` None) at ``revision``."""

    key: str
    value: bytes | None
    create_revision: int
    mod_revision: int
    lease: int = 0


@dataclass(frozen=True, slots=True)
class Compare:
    """One condition of a transaction: ``target`` of ``key`` equals ``value``.

    ``target`` is "MOD" (mod revision), "CREATE" (create revision; 0 means absent),
    "VERSION" or "VALUE".
    """

    key: str
    target: str
    value: int | bytes

    def encode(self) -> dict[str, Any]:
        field_name = {"MOD": "mod_revision", "CREATE": "create_revision", "VERSION": "version",
                      "VALUE": "value"}[self.target]
        value = _b64(self.value) if isinstance(self.value, bytes) else str(self.value)
        return {"key": _b64(self.key), "target": self.target, "result": "EQUAL", field_name: value}


@dataclass(frozen=True, slots=True)
class Put:
    key: str
    value: bytes
    lease: int = 0

    def encode(self) -> dict[str, Any]:
        body: dict[str, Any] = {"key": _b64(self.key), "value": _b64(self.value)}
        if self.lease:
            body["lease"] = str(self.lease)
        return {"request_put": body}


@dataclass(frozen=True, slots=True)
class Delete:
    key: str

    def encode(self) -> dict[str, Any]:
        return {"request_delete_range": {"key": _b64(self.key)}}


@dataclass(frozen=True, slots=True)
class DeletePrefix:
    """Every key starting with ``prefix``."""

    prefix: str

    def encode(self) -> dict[str, Any]:
        return {"request_delete_range": {"key": _b64(self.prefix), "range_end": _b64(prefix_end(self.prefix))}}


Operation = Put | Delete | DeletePrefix


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    revision: int


@dataclass
class Snapshot:
    """Every key under a prefix at one revision."""

    revision: int
    kvs: list[KeyValue] = field(default_factory=list)


def _b64(data: str | bytes) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode("ascii")


def _unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def prefix_end(prefix: str) -> str:
    """The range end that covers every key starting with ``prefix`` (etcd's "prefix" option)."""
    raw = prefix.encode()
    return (raw[:-1] + bytes([raw[-1] + 1])).decode()


def _kv(item: dict[str, Any]) -> KeyValue:
    return KeyValue(_unb64(item.get("key")).decode(), _unb64(item.get("value")),
                    int(item.get("create_revision", 0)), int(item.get("mod_revision", 0)),
                    int(item.get("version", 0)), int(item.get("lease", 0)))


class EtcdClient:
    """An etcd v3 client for one cluster of endpoints (``http://host:port``)."""

    def __init__(self, endpoints: Sequence[str], timeout: float = REQUEST_TIMEOUT) -> None:
        if not endpoints:
            raise ValueError("at least one etcd endpoint is needed")
        self.endpoints = [e if "://" in e else f"http://{e}" for e in endpoints]
        self._current = 0
        self.timeout = timeout
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(timeout), trust_env=False)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        last: Exception | None = None
        for attempt in range(len(self.endpoints)):
            endpoint = self.endpoints[(self._current + attempt) % len(self.endpoints)]
            try:
                response = await self._http.post(endpoint + path, content=json.dumps(body))
            except httpx.HTTPError as exc:
                last = exc
                continue
            if response.status_code >= 500:
                last = EtcdUnavailable(f"{endpoint}: HTTP {response.status_code}: {response.text[:200]}")
                continue
            self._current = (self._current + attempt) % len(self.endpoints)
            answer: dict[str, Any] = response.json()
            if response.status_code != 200 or ("error" in answer and "header" not in answer):
                raise EtcdError(f"{path}: {answer.get('message') or answer.get('error') or response.text[:200]}")
            return answer
        raise EtcdUnavailable(f"no etcd endpoint answered ({', '.join(self.endpoints)}): {last!r}")

    # ---------------------------------------------------------------- keys

    async def get_prefix(self, prefix: str) -> Snapshot:
        answer = await self._call("/v3/kv/range", {"key": _b64(prefix), "range_end": _b64(prefix_end(prefix))})
        return Snapshot(int(answer["header"]["revision"]), [_kv(kv) for kv in answer.get("kvs", [])])

    async def get(self, key: str) -> KeyValue | None:
        answer = await self._call("/v3/kv/range", {"key": _b64(key)})
        kvs = answer.get("kvs", [])
        return _kv(kvs[0]) if kvs else None

    async def put(self, key: str, value: bytes, lease: int = 0) -> int:
        """Write ``key``; returns the revision of the write."""
        answer = await self._call("/v3/kv/put", Put(key, value, lease).encode()["request_put"])
        return int(answer["header"]["revision"])

    async def delete(self, key: str) -> int:
        answer = await self._call("/v3/kv/deleterange", {"key": _b64(key)})
        return int(answer["header"]["revision"])

    async def txn(self, compare: Sequence[Compare], success: Sequence[Operation],
                  failure: Sequence[Operation] = ()) -> TxnResult:
        """All of ``success`` if every comparison holds, else all of ``failure``: atomically."""
        answer = await self._call("/v3/kv/txn", {
            "compare": [c.encode() for c in compare],
            "success": [op.encode() for op in success],
            "failure": [op.encode() for op in failure],
        })
        return TxnResult(bool(answer.get("succeeded", False)), int(answer["header"]["revision"]))

    # ---------------------------------------------------------------- leases

    async def grant(self, ttl_seconds: int) -> tuple[int, int]:
        """A new lease: ``(id, granted TTL in seconds)``."""
        answer = await self._call("/v3/lease/grant", {"TTL": str(ttl_seconds)})
        if answer.get("error"):
            raise EtcdError(f"lease grant: {answer['error']}")
        return int(answer["ID"]), int(answer["TTL"])

    async def keep_alive(self, lease: int) -> int:
        """Renew a lease once; its remaining TTL in seconds, 0 if etcd no longer has it."""
        answer = await self._call("/v3/lease/keepalive", {"ID": str(lease)})
        result = answer.get("result", answer)
        return int(result.get("TTL", 0))

    async def revoke(self, lease: int) -> None:
        """End a lease now: every key attached to it goes at once."""
        try:
            await self._call("/v3/lease/revoke", {"ID": str(lease)})
        except EtcdError:
            pass  # already gone

    # ---------------------------------------------------------------- watch

    async def watch(self, prefix: str, start_revision: int) -> AsyncIterator[list[WatchEvent]]:
        """Every change under ``prefix`` from ``start_revision`` on, in revision order, batch by batch.

        Ends with ``EtcdUnavailable`` when the stream breaks, and with ``EtcdError`` when the
        start revision was compacted away (the caller reads everything again).
        """
        body = {"create_request": {"key": _b64(prefix), "range_end": _b64(prefix_end(prefix)),
                                   "start_revision": str(start_revision)}}
        endpoint = self.endpoints[self._current]
        try:
            async with self._http.stream("POST", endpoint + "/v3/watch", content=json.dumps(body),
                                         timeout=httpx.Timeout(self.timeout, read=None)) as response:
                if response.status_code != 200:
                    raise EtcdUnavailable(f"{endpoint}: watch refused: HTTP {response.status_code}")
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    message = json.loads(line)
                    if "error" in message:
                        raise EtcdUnavailable(f"{endpoint}: watch: {message['error']}")
                    result = message.get("result", {})
                    if result.get("compact_revision") not in (None, "0"):
                        raise EtcdError(f"watch start revision {start_revision} was compacted")
                    if result.get("canceled"):
                        raise EtcdUnavailable(f"{endpoint}: watch canceled: {result.get('cancel_reason', '')}")
                    events = [_event(e) for e in result.get("events", [])]
                    if events:
                        yield events
        except httpx.HTTPError as exc:
            self._current = (self._current + 1) % len(self.endpoints)
            raise EtcdUnavailable(f"{endpoint}: watch stream broke: {exc}") from exc
        self._current = (self._current + 1) % len(self.endpoints)
        raise EtcdUnavailable(f"{endpoint}: watch stream ended")


def _event(raw: dict[str, Any]) -> WatchEvent:
    kv = raw.get("kv", {})
    deleted = raw.get("type") == "DELETE"
    return WatchEvent(_unb64(kv.get("key")).decode(), None if deleted else _unb64(kv.get("value")),
                      int(kv.get("create_revision", 0)), int(kv.get("mod_revision", 0)), int(kv.get("lease", 0)))

"""api_key -> handler, and the decision what to do with each frame.

The router is where a frame becomes a reply. It stays free of sockets: the connection
hands it bytes (and who sent them, a ``Session``) and gets back an ``Outcome``: bytes to
send, nothing to send, or "close".

With an authorizer configured, every request passes ``security.access.RULES`` before its
handler runs: the rule for its API may let it through, refuse it with Kafka's error reply,
narrow it to what the caller may touch (and amend the handler's reply), or close the
connection. An API without a rule is refused: there is no way around the table.

In a cluster, ``routing`` then decides the same way whether this node serves the request:
partitions it does not lead and groups it does not coordinate get Kafka's errors
(``cluster.routing``). A single node has no routing step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from broker.context import BrokerContext
from broker.fetch_topics import FIRST_VERSION_BY_ID, TopicNames, name_fetch_topics
from broker.handlers import cluster
from broker.metrics import ERROR_REASONS, ApiStats, Family, counter
from broker.slots import Slot
from protocol.api_keys import ApiKey
from protocol.codec import Request, TypedReader, decode_request, decode_response, encode_response, peek
from protocol.errors import ProtocolError, UnsupportedRequest
from protocol.messages import REQUESTS
from protocol.schema import Message
from security.access import RULES
from security.acl import AclOperation, ResourceType
from security.authorizer import Authorizer
from security.gate import Body, Decision, Drop, Gate, Narrow, Refuse, TopicDirectory
from security.principal import ANONYMOUS

log = logging.getLogger("kcoord.router")
request_log = logging.getLogger("kcoord.requests")

# A handler gets the request and the peer address; it returns a response body, None for
# no response, or a Slot that fills in later (parked or waiting for durability).
Handler = Callable[[Request, str], Any]

#: A plain int for ``route``'s comparison: an IntEnum member's lookup costs more than the test.
_FETCH = int(ApiKey.FETCH)

#: A cluster's routing step: the request's decision (None: this node serves it as it is).
Routing = Callable[[Request], Decision]


@dataclass(slots=True)
class Close:
    """Close the connection after flushing earlier replies; ``reason`` goes to the log."""

    reason: str


Outcome = bytes | None | Close | Slot


@dataclass(frozen=True, slots=True)
class Session:
    """Who sent a request: the authenticated principal, the client's address, the listener."""

    principal: str
    host: str
    listener: str = "PLAINTEXT"


ANONYMOUS_SESSION = Session(str(ANONYMOUS), "")

#: (API name, principal, host, what was denied): the audit log and the denial counters.
DenialHook = Callable[[str, str, str, list[tuple[AclOperation, ResourceType, str]]], None]


@dataclass
class Authorization:
    """What the router needs to enforce ACLs; absent when ``authorizer.class.name`` is empty."""

    authorizer: Authorizer
    topics: TopicDirectory
    on_denied: DenialHook
    auto_create: bool = True


def _frame_amend(api_key: int, version: int, amend: Callable[[Body], Body]) -> Callable[[bytes], bytes]:
    """Apply a body amendment to a reply that is already encoded (a Slot's frame)."""
    def apply(frame: bytes) -> bytes:
        correlation_id, body = decode_response(api_key, version, frame[4:])
        return encode_response(api_key, version, correlation_id, amend(body))
    return apply


def _then(first: Callable[[Body], Body], second: Callable[[Body], Body]) -> Callable[[Body], Body]:
    return lambda body: second(first(body))


class Router:
    """Routes decoded requests to handlers and advertises exactly what it can handle."""

    def __init__(self, ctx: BrokerContext, request_logging: bool = False, *,
                 authorization: Authorization | None = None, shares_stats_with: Router | None = None) -> None:
        self.ctx = ctx
        self.handlers: dict[int, Handler] = {}
        # Resolved per API at registration; the routers of several listeners share one set.
        self.api_stats: dict[int, ApiStats] = {} if shares_stats_with is None else shares_stats_with.api_stats
        self._served: dict[int, Message] | None = None
        #: Readers of a body straight into the handler's own request type, by API (``register``).
        self._readers: dict[int, TypedReader] = {}
        self.errors: dict[str, int] = (dict.fromkeys(ERROR_REASONS, 0) if shares_stats_with is None
                                       else shares_stats_with.errors)
        self.request_logging = request_logging  # one INFO line per request (--request-log)
        self.authorization = authorization
        self.routing: Routing | None = None
        #: Topic ids to names, for Fetch v13+ (set by the composition root, or a cluster node).
        self.topic_name: TopicNames = lambda _topic_id: None
        #: The session of the request being handled (handlers run synchronously inside route).
        self.session = ANONYMOUS_SESSION
        self.register(ApiKey.API_VERSIONS, lambda r, _: cluster.handle_api_versions(ctx, r, self.served))
        self.register(ApiKey.FIND_COORDINATOR, lambda r, _: cluster.handle_find_coordinator(ctx, r))

    def register(self, api_key: ApiKey, handler: Handler, read: TypedReader | None = None) -> None:
        """Route ``api_key`` to ``handler``. ``read``: a reader of its body straight into the
        handler's own request type (``protocol.codec.decode_request``), used while neither
        authorization nor cluster routing reads the generic body before the handler."""
        self.handlers[api_key] = handler
        self._served = None
        if read is None:
            self._readers.pop(api_key, None)
        else:
            self._readers[api_key] = read
        message = REQUESTS[api_key]
        if api_key not in self.api_stats:
            self.api_stats[api_key] = ApiStats(api_key, message.name.removesuffix("Request"), message.max_version)

    @property
    def served(self) -> dict[int, Message]:
        """The declared messages that have a handler: what ApiVersions advertises.

        Built once per registration change (every request consults it). Do not mutate.
        """
        if self._served is None:
            self._served = {key: REQUESTS[key] for key in self.handlers}
        return self._served

    def route(self, frame: bytes, peer: str, session: Session = ANONYMOUS_SESSION) -> Outcome:
        """Handle one request frame (without its size prefix)."""
        served = self._served
        if served is None:
            served = self.served
        try:
            request = decode_request(frame, served, self._readers
                                     if self.authorization is None and self.routing is None else None)
        except UnsupportedRequest as exc:
            self.errors["unsupported"] += 1
            if exc.api_key == ApiKey.API_VERSIONS:
                # KIP-511: answer with a v0 body so the client can step down.
                return encode_response(
                    ApiKey.API_VERSIONS, 0, exc.correlation_id,
                    cluster.unsupported_api_versions_body(self.served),
                )
            return Close(f"{exc} from {peer}")
        except ProtocolError as exc:
            self.errors["malformed"] += 1
            try:
                api_key, api_version, correlation_id = peek(frame)
                what = f"api_key={api_key} api_version={api_version} correlation_id={correlation_id}"
            except ProtocolError:
                what = "unreadable header"
            return Close(f"malformed request from {peer} ({what}): {exc}")
        header = request.header
        stats = self.api_stats[header.api_key]
        stats.requests[header.api_version] += 1
        started = perf_counter()
        amend: Callable[[Body], Body] | None = None
        named: Callable[[Body], Body] | None = None
        if header.api_key == _FETCH and header.api_version >= FIRST_VERSION_BY_ID:
            request, named = name_fetch_topics(request, self.topic_name)
        if self.authorization is not None:
            checked = self._authorize(request, session, stats.name)
            if isinstance(checked, Close):
                return checked
            if isinstance(checked, bytes):
                elapsed = perf_counter() - started
                stats.latency.observe(elapsed)
                if self.request_logging:
                    self.log_request(peer, header.client_id, stats.name, header.api_version,
                                     header.correlation_id, elapsed, checked)
                return checked
            if checked is not None:
                request, amend = checked
        if self.routing is not None:
            routed = self._route_in_cluster(request, amend)
            if isinstance(routed, Close):
                return routed
            if isinstance(routed, bytes):
                elapsed = perf_counter() - started
                stats.latency.observe(elapsed)
                if self.request_logging:
                    self.log_request(peer, header.client_id, stats.name, header.api_version,
                                     header.correlation_id, elapsed, routed)
                return routed
            request, amend = routed
        if named is not None:
            amend = named if amend is None else _then(amend, named)
        self.session = session
        try:
            body = self.handlers[header.api_key](request, peer)
        except Exception:
            # A bug, not bad input: log it loudly, drop this connection, keep serving others.
            self.errors["internal"] += 1
            log.exception("handler for api_key=%d v%d failed (request from %s)",
                          header.api_key, header.api_version, peer)
            return Close(f"internal error handling api_key={header.api_key}")
        if amend is not None and body is not None:
            if isinstance(body, Slot):
                body.amend = _frame_amend(header.api_key, header.api_version, amend)
            elif type(body) is bytes:
                body = _frame_amend(header.api_key, header.api_version, amend)(body)
            else:
                body = amend(body)
        if isinstance(body, Slot):
            body.started = started
            body.stats = stats
            if self.request_logging:
                body.client_id = header.client_id
            return body
        if type(body) is bytes:  # the reply's frame, ready
            reply: bytes | None = body
        else:
            reply = None if body is None else encode_response(
                header.api_key, header.api_version, header.correlation_id, body)
        elapsed = perf_counter() - started
        stats.latency.observe(elapsed)
        if self.request_logging:
            self.log_request(peer, header.client_id, stats.name, header.api_version, header.correlation_id,
                             elapsed, reply)
        return reply

    def _authorize(self, request: Request, session: Session, api: str
                   ) -> Close | bytes | tuple[Request, Callable[[Body], Body] | None] | None:
        """The rule of the request's API: a reply, a close, a narrowed request, or None (as is)."""
        auth = self.authorization
        assert auth is not None
        header = request.header
        rule = RULES.get(header.api_key)
        if rule is None:
            self.errors["internal"] += 1
            return Close(f"api_key={header.api_key} ({api}) has no authorization rule; refused")
        if rule.check is None:
            return None
        gate = Gate(auth.authorizer, session.principal, session.host, auth.topics, auth.auto_create)
        decision = rule.check(header.api_version, request.body, gate)
        if gate.denied:
            auth.on_denied(api, session.principal, session.host, gate.denied)
        if decision is None:
            return None
        if isinstance(decision, Refuse):
            return encode_response(header.api_key, header.api_version, header.correlation_id, decision.body)
        if isinstance(decision, Drop):
            return Close(decision.reason)
        return Request(header, request.message, decision.body), decision.amend

    def _route_in_cluster(self, request: Request, amend: Callable[[Body], Body] | None
                          ) -> Close | bytes | tuple[Request, Callable[[Body], Body] | None]:
        """The cluster's routing decision: a reply, a close, or the request (narrowed) and its amendment."""
        assert self.routing is not None
        decision = self.routing(request)
        if decision is None:
            return request, amend
        header = request.header
        if isinstance(decision, Refuse):
            body = decision.body if amend is None else amend(decision.body)
            return encode_response(header.api_key, header.api_version, header.correlation_id, body)
        if isinstance(decision, Drop):
            return Close(decision.reason)
        assert isinstance(decision, Narrow)
        routed = decision.amend
        if routed is None:
            combined = amend
        elif amend is None:
            combined = routed
        else:
            outer = amend
            combined = lambda body: outer(routed(body))  # noqa: E731
        return Request(header, request.message, decision.body), combined

    def finished(self, slot: Slot, peer: str) -> None:
        """A parked or durable-wait reply is ready to send: time it (and log it)."""
        stats = slot.stats
        if stats is None:
            return
        elapsed = perf_counter() - slot.started
        stats.latency.observe(elapsed)
        if self.request_logging:
            self.log_request(peer, slot.client_id, stats.name, slot.version, slot.correlation_id,
                             elapsed, slot.frame)

    @staticmethod
    def log_request(peer: str, client_id: str | None, api: str, version: int, correlation_id: int,
                    elapsed: float, reply: bytes | None) -> None:
        request_log.info("request", extra={
            "peer": peer, "client_id": client_id, "api": api, "version": version,
            "correlation_id": correlation_id, "duration_ms": round(elapsed * 1000, 3),
            "reply_bytes": 0 if reply is None else len(reply),
        })

    def metrics(self) -> list[Family]:
        """Requests by API and version, their latency, and requests refused."""
        requests = counter("kcoord_requests_total", "Requests decoded, by API and version.")
        latency = Family("kcoord_request_duration_seconds", "histogram",
                         "Time from a request being decoded to its reply being ready to send, "
                         "durable wait included.")
        for stats in sorted(self.api_stats.values(), key=lambda s: s.api_key):
            for api_version, count in enumerate(stats.requests):
                if count:
                    requests.add(count, api=stats.name, version=api_version)
            if stats.latency.count:
                latency.add_histogram(stats.latency, api=stats.name)
        errors = counter("kcoord_request_errors_total",
                         "Requests refused: bad frame size, undecodable, unsupported API/version, handler failure.")
        for reason in ERROR_REASONS:
            errors.add(self.errors.get(reason, 0), reason=reason)
        return [requests, latency, errors]

"""The trio shell: listen, read frames, route them, write replies in request order.

Each named listener (``broker.listeners``) has its own sockets and router (so Metadata
answers with that listener's address); SSL and SASL_SSL connections first complete a TLS
handshake (``broker.tls``), and on SASL listeners every frame passes the connection's
``security.authenticator`` until it has logged in. ``max.connections.per.ip`` is enforced
at accept.

Every connection's socket is registered once in the broker's ``ReadPoller``
(``broker.poller``), whose task reads each ready socket once, routes every whole frame
and sends the replies that are ready at once, one write per read, straight to the
socket's descriptor. On TLS the same happens over ciphertext: each read is decrypted whole
and each send encrypted whole by the connection's ``TlsSession``. A reply that must wait
(a parked request, or one waiting for durability) is queued with every reply after it,
and the queue is sent in order as its head becomes ready, by whichever task set it (the
sync that made it durable, the request that completed it), so pipelining clients get
their replies in the order of their requests and no task is woken per request. Each
connection's own task does only what must be awaited: the TLS handshake, the bytes the
socket did not take at once, a failed login's delay and the end of the connection. A
bad frame (or TLS record) closes only its own connection. SIGINT/SIGTERM stops
accepting, lets in-flight requests finish (bounded by ``shutdown.grace.ms``) and returns.

A failed write or fsync of the logs, ``topics.json`` or the producer-id block stops the
broker at once (``Server.storage_failed``): one ERROR line names the file and the error,
no further reply is sent, and ``serve`` raises ``StorageFailure`` (the command exits 1).
Recovery at the next start decides what survived. Background storage work (compaction,
retention, history pruning) runs in one ``storage.maintenance`` scheduler.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import signal
import socket
import ssl
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from broker.app import Broker
from broker.config import Config, parse_host_port
from broker.config import parse_listeners as parse_config_listeners
from broker.context import BrokerContext
from broker.data_service import DataService
from broker.group_service import GroupService
from broker.listeners import ListenerSpec, parse_listeners, server_ssl_context
from broker.metrics import Collector, Family, collect, counter, gauge, kcoord_version
from broker.poller import ReadPoller
from broker.router import Close, Outcome, Router, Session
from broker.security_service import SecurityService
from broker.slots import Slot
from broker.tls import TlsSession
from broker.topics import TopicCatalog
from protocol.errors import ProtocolError
from protocol.frames import FrameDecoder
from security.authenticator import SaslAuthenticator, Step
from security.principal import ANONYMOUS, map_certificate_name, parse_mapping_rules, rfc2253
from storage.fs import REAL_FS, FileSystem
from storage.layout import lock_file

if TYPE_CHECKING:
    from broker.app import ClusterMembership
    from broker.http import ExtensionFactory

    #: Builds the cluster membership of this process from its configuration and data directory.
    ClusterFactory = Callable[[Config, Path], ClusterMembership]

log = logging.getLogger("kcoord.server")

RECEIVE_CHUNK = 65536
MAX_PIPELINE = 256  # queued replies per connection before we stop reading it
TLS_HANDSHAKE_TIMEOUT = 10.0  # seconds a client may take to finish its TLS handshake
TLS_WRITE_SLICE = 262144  # plaintext bytes encrypted per write of a large reply (16 TLS records)
#: How long the read poller may go on waiting in its own epoll, and running passes, while
#: a sync it started is in flight and trio has nothing to run (``broker.poller``): a
#: sync's completion usually comes well within it, and is then handled without a round
#: of trio's loop. trio's own descriptors wait for their round at most this long.
POLL_LINGER_SECONDS = 0.002


#: accept() errors that mean "out of descriptors or memory for now": retried after a pause.
ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
#: accept() errors about a connection that went away before it was taken: skipped.
IGNORABLE_ACCEPT_ERRNOS = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EPERM})
ACCEPT_RETRY_S = 0.1


ConnectionHandler = Callable[[trio.SocketStream], Awaitable[None]]


async def accept_connections(sock: trio.SocketListener, handler: ConnectionHandler, nursery: trio.Nursery) -> None:
    """Accept connections on one socket, taking every one already queued at each wake-up.

    trio's ``serve_listeners`` accepts one connection per scheduling round, and a round of
    a busy broker runs every connection that has a request in: a thousand clients
    connecting while others are active would wait seconds to be accepted. Like Kafka's
    Acceptor, this takes whatever the listen backlog holds: the first accept of a wake-up
    waits through trio, the rest come straight from the socket until it has none. Each
    connection runs ``handler`` in ``nursery`` and is closed after it.
    """
    backlog = socket.socket(fileno=os.dup(sock.socket.fileno()))
    backlog.setblocking(False)
    try:
        while True:
            try:
                stream = await sock.accept()
            except OSError as exc:
                if exc.errno not in ACCEPT_CAPACITY_ERRNOS:
                    raise
                log.error("accept failed: %s; retrying in %.1f s", os.strerror(exc.errno or 0), ACCEPT_RETRY_S)
                await trio.sleep(ACCEPT_RETRY_S)
                continue
            nursery.start_soon(_run_connection, handler, stream)
            while True:
                try:
                    raw, _ = backlog.accept()
                except (BlockingIOError, InterruptedError):
                    break
                except OSError as exc:
                    if exc.errno in IGNORABLE_ACCEPT_ERRNOS:
                        continue
                    break  # left to the next accept through trio, which handles or raises it
                nursery.start_soon(_run_connection, handler, trio.SocketStream(trio.socket.from_stdlib_socket(raw)))
    finally:
        backlog.close()


async def _run_connection(handler: ConnectionHandler, stream: trio.SocketStream) -> None:
    try:
        await handler(stream)
    finally:
        await trio.aclose_forcefully(stream)


def parse_listen(listen: str, what: str = "--listen") -> tuple[str, int]:
    """A HOST:PORT to bind (port 0: any); a ``ConfigError`` (a ``ValueError``) if it is not one."""
    return parse_host_port(listen, what)


def advertised(config: Config, host: str, port: int) -> tuple[str, int]:
    """The host and port clients of the --listen listener are told: advertised.listeners, else the bound one."""
    raw = config["advertised.listeners"]
    if raw:
        _, adv_host, adv_port = parse_config_listeners(raw, "advertised.listeners")[0]
        return adv_host, adv_port
    return _reachable(host), port


def _reachable(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


@dataclass
class Listener:
    """One named listener, once bound: its sockets, its router and its TLS context."""

    spec: ListenerSpec
    sockets: list[trio.SocketListener]
    bound: tuple[str, int] = ("", 0)
    advertised: tuple[str, int] = ("", 0)
    router: Router | None = None
    tls: ssl.SSLContext | None = field(default=None, repr=False)


def _overrides(text: str) -> dict[str, int]:
    """max.connections.per.ip.overrides: ``host:count,host:count``."""
    out: dict[str, int] = {}
    for item in text.split(","):
        if item.strip():
            host, _, count = item.strip().rpartition(":")
            out[host.strip("[]")] = int(count)
    return out


class ListenError(RuntimeError):
    """An address could not be bound; the message names it and the reason.

    ``configuration`` is true when the address itself is wrong (no such local address, a
    host name that does not resolve) rather than busy or forbidden.
    """

    def __init__(self, message: str, configuration: bool = False) -> None:
        super().__init__(message)
        self.configuration = configuration


def _listen_error(address: str, exc: OSError, purpose: str = "") -> ListenError:
    reason = "host name does not resolve" if isinstance(exc, socket.gaierror) else exc.strerror or str(exc)
    wrong = isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL
    return ListenError(f"cannot listen on {address}{purpose}: {reason}", configuration=wrong)


class StorageFailure(RuntimeError):
    """The broker cannot go on with its logs: a write or fsync failed (the ERROR line says
    which), or they could not be opened."""


@contextmanager
def lock_data_dir(data_dir: Path) -> Iterator[None]:
    """One broker per data directory: a second one would corrupt the log."""
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_file(data_dir), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"data directory {data_dir} is in use by another kcoord") from None
        yield
    finally:
        os.close(fd)


class Connection:
    """One client connection: read and answered on the ``ReadPoller``'s task (``on_readable``);
    a reply that waits is sent, in order, by whoever sets it (``_drain``); the connection's
    own task (``run``) does what must be awaited.

    On SSL listeners the TLS handshake comes first (a failure closes only this
    connection); on SASL listeners every frame goes to the connection's
    ``SaslAuthenticator`` until it has authenticated, and ApiVersions is the only request
    the router sees before that.
    """

    def __init__(self, server: Server, stream: trio.SocketStream, listener: Listener | None = None) -> None:
        self.server = server
        self.stream = stream
        self.listener = listener
        try:
            host, port = stream.socket.getpeername()[:2]
            self.peer = f"{host}:{port}"
            self.host = str(host)
        except OSError:
            self.peer = "unknown"
            self.host = ""
        self.decoder = FrameDecoder(max_size=server.config["socket.request.max.bytes"])
        #: Frames read and not handled yet (only while a delay holds the rest of a read).
        self._frames: deque[bytes] = deque()
        #: A failed login's step and frame, answered once ``connection.failed.authentication.delay.ms``
        #: has passed; reading is paused until then.
        self._delayed: tuple[bytes, Step] | None = None
        self._reading_done = False  # nothing more is read: the end, a close, or ``stop_reading``
        self._full = False  # reading paused until the queue has room again
        #: Replies not sent yet, in request order, from the first one that had to wait.
        self._queue: deque[bytes | Slot] = deque()
        #: Bytes the socket did not take at once; the connection's task sends them, and
        #: nothing else is sent before they are.
        self._backlog: bytes | memoryview | None = None
        self._broken: BaseException | None = None  # a read or write failed: the task ends the connection
        self._ended = False  # the connection is over: nothing more is written to its descriptor
        self._wake: trio.Event | None = None  # set to wake the connection's task
        self._closing = False  # reading ended: the task ends once the queue is empty
        #: The socket's descriptor, read and written directly.
        self._fd = stream.socket.fileno()
        #: The TLS session once its handshake is done (SSL and SASL_SSL listeners).
        self._tls: TlsSession | None = None
        #: Plaintext that came in with the end of the TLS handshake, read before the socket.
        self._early: bytes | memoryview | None = None
        name = listener.spec.name if listener is not None else "PLAINTEXT"
        self.session = Session(str(ANONYMOUS), self.host, name)
        self.authenticator: SaslAuthenticator | None = None
        self.router = listener.router if listener is not None and listener.router is not None else server.router
        if listener is not None and listener.spec.sasl:
            security = server.security
            self.authenticator = SaslAuthenticator(security.enabled_mechanisms, security.credential,
                                                   reauth_ms=server.config["connections.max.reauth.ms"])
            self.decoder.set_limits(server.config["sasl.server.max.receive.size"], min_size=0)

    def stop_reading(self) -> None:
        """Stop taking new requests; replies to the ones read go out before the connection ends."""
        self._finish_reading()

    async def _start_tls(self) -> bool:
        """The TLS handshake; on SSL listeners the principal is the client certificate's name.

        A failure (a plaintext client, an untrusted or missing certificate, a timeout)
        closes only this connection, after the alert that says why when there is one.
        """
        listener = self.listener
        assert listener is not None and listener.tls is not None and self._fd >= 0
        session = TlsSession(listener.tls)
        failure: str | None = None
        with trio.move_on_after(TLS_HANDSHAKE_TIMEOUT) as scope:
            try:
                while not session.handshake(await self._read_socket()):  # the client speaks first
                    await self._write_socket(session.take_output())
                await self._write_socket(session.take_output())  # the last flight, session tickets
                # A client may send its first request right behind its last handshake message
                # (TLS 1.3), so one read can hold both: that request waits in the session.
                early = session.decrypt(b"")
            except (OSError, trio.BrokenResourceError) as exc:  # ssl.SSLError is an OSError
                failure = f"failed: {exc}"
                self._write_nowait(session.take_output())
        if scope.cancelled_caught:
            failure = "timed out"
        if failure is not None:
            log.info("TLS handshake with %s on listener %s %s", self.peer, listener.spec.name, failure)
            self.server.tls_failures += 1
            return False
        self._tls = session
        self._early = early if early else None
        if listener.spec.protocol == "SSL":
            cert = session.peer_certificate()
            subject = cert.get("subject") if cert else None
            if subject:
                principal = map_certificate_name(self.server.mapping_rules, rfc2253(subject))
                self.session = Session(str(principal), self.host, listener.spec.name)
        return True

    async def run(self) -> None:
        """The connection's task: the TLS handshake, then whatever must be awaited.

        Requests are read and answered by ``on_readable`` on the server's ``ReadPoller``
        task; this task sends what the socket did not take at once, waits out a failed
        login's delay, and ends the connection once reading ended and every reply is out.
        """
        if self.listener is not None and self.listener.tls is not None and not await self._start_tls():
            with trio.CancelScope(shield=True):
                await self.stream.aclose()
            return
        poller = self.server.poller
        try:
            poller.add(self._fd, self.on_readable)
            early, self._early = self._early, None
            if early is not None:
                self._guarded(self._handle_data, early)
            await self._serve()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            # The peer went away, the socket broke or a TLS record was bad: only this connection ends.
            log.debug("connection %s ended: %s", self.peer, exc)
        finally:
            poller.remove(self._fd)
            self._end()
            if self._tls is not None:
                self._write_nowait(self._tls.close())
            with trio.CancelScope(shield=True):
                await self.stream.aclose()

    async def _serve(self) -> None:
        while True:
            broken = self._broken
            if broken is not None:
                if isinstance(broken, OSError):
                    raise broken
                return
            backlog = self._backlog
            if backlog is not None:
                await self.stream.send_all(backlog)
                self._backlog = None
                self._drain()
                continue
            delayed = self._delayed
            if delayed is not None:
                await trio.sleep(self.server.config["connection.failed.authentication.delay.ms"] / 1000)
                self._delayed = None
                self._guarded(self._resume_after_delay, delayed)
                continue
            if self._closing and (not self._queue or self.server.failure is not None):
                return
            self._wake = trio.Event()
            await self._wake.wait()

    def _login_done(self, failed: bool) -> None:
        auth = self.authenticator
        assert auth is not None
        mechanism = auth.mechanism_name or "none"
        self.server.security.login(mechanism, not failed)
        if failed:
            return
        if self.session.principal != str(auth.principal):
            self.session = Session(str(auth.principal), self.host, self.session.listener)
            log.debug("connection %s authenticated as %s (%s)", self.peer, auth.principal, mechanism)
        self.decoder.set_limits(self.server.config["socket.request.max.bytes"])

    # --- reading --------------------------------------------------------------------

    def on_readable(self) -> None:
        """The socket has bytes (or its end): read them once and handle every whole request.

        Called on the ``ReadPoller``'s task; never raises: a failure ends only this connection.
        """
        if not self._reading_done:
            self._guarded(self._read_once)

    def _guarded(self, step: Callable[..., None], *args: Any) -> None:
        try:
            step(*args)
        except Exception as exc:  # ssl.SSLError and socket errors are OSErrors
            if not isinstance(exc, OSError):
                log.exception("connection %s failed", self.peer)
            self._broken = exc
            self._finish_reading()

    def _read_once(self) -> None:
        if self.server.draining:
            self._finish_reading()
            return
        try:
            received = os.read(self._fd, RECEIVE_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        tls = self._tls
        if tls is not None and received:
            plain = tls.decrypt(received)
            if plain is None:  # close_notify
                received = b""
            elif not plain:  # part of a record: the rest comes with a later read
                return
            else:
                self._handle_data(plain)
                if tls.closed:  # close_notify came after those requests
                    self._finish_reading()
                return
        if not received:
            if self.decoder.buffered:
                log.warning("connection %s closed mid-frame (%d bytes pending)", self.peer, self.decoder.buffered)
            self._finish_reading()
            return
        self._handle_data(received)

    def _handle_data(self, data: bytes | bytearray | memoryview) -> None:
        self.server.bytes_in += len(data)
        try:
            frames = self.decoder.feed(data)
        except ProtocolError as exc:
            self.router.errors["frame"] += 1
            log.warning("closing connection %s: %s", self.peer, exc)
            self._finish_reading()
            return
        self._frames.extend(frames)
        self._handle_frames([])

    def _resume_after_delay(self, delayed: tuple[bytes, Step]) -> None:
        """A failed login's delay has passed: its reply, then the requests read behind it."""
        frame, step = delayed
        ready: list[bytes] = []
        outcome = self._after_login_step(frame, step, ready)
        if outcome == "close" or (outcome == "route" and self._route(frame, ready)):
            self._send_ready(ready)
            if self._queue:
                self._drain()
            self._finish_reading()
            return
        self._handle_frames(ready)
        if not self._reading_done and self._delayed is None and not self._full:
            self.server.poller.resume(self._fd)

    def _handle_frames(self, ready: list[bytes]) -> None:
        """Route the frames read, sending the replies ready at once in one write.

        A reply that must wait (a parked request, one waiting for durability) goes to the
        queue, and every reply after it too, so replies leave in request order.
        """
        frames = self._frames
        closing = False
        while frames:
            frame = frames.popleft()
            auth = self.authenticator
            if auth is not None:
                step = auth.receive(frame, int(trio.current_time() * 1000))
                if step.failure or step.authenticated:
                    self._login_done(step.failure)
                if step.failure:  # the reply waits: send what is ready, and read nothing meanwhile
                    self._send_ready(ready)
                    self._delayed = (frame, step)
                    self.server.poller.pause(self._fd)
                    self._wake_task()
                    return
                outcome = self._after_login_step(frame, step, ready)
                if outcome == "close":
                    closing = True
                    break
                if outcome == "skip":
                    continue
            if self._route(frame, ready):
                closing = True
                break
        self._send_ready(ready)
        queue = self._queue
        if queue:
            head = queue[0]
            if isinstance(head, Slot) and not head.is_set():
                head.on_ready = self._drain  # nothing goes before it: it sends the queue once set
            else:
                self._drain()
        if closing:
            frames.clear()
            self._finish_reading()
        elif len(queue) >= MAX_PIPELINE and not self._full:  # too many replies waiting: read on once they go
            self._full = True
            self.server.poller.pause(self._fd)

    def _route(self, frame: bytes, ready: list[bytes]) -> bool:
        """Hand one request to the router; True if the connection must close."""
        routed: Outcome = self.router.route(frame, self.peer, self.session)
        if isinstance(routed, Close):
            log.warning("closing connection %s: %s", self.peer, routed.reason)
            return True
        if routed is not None:
            self._add(routed, ready)
        return False

    def _after_login_step(self, frame: bytes, step: Step, ready: list[bytes]) -> str:
        """What a SASL step means for its frame: "route" it, "skip" it, or "close"."""
        if step.reply is not None:
            self._add(step.reply, ready)
        if step.close is not None:
            log.info("closing connection %s: %s", self.peer, step.close)
            return "close"
        return "route" if step.route else "skip"

    def _finish_reading(self) -> None:
        """Read no more: the connection ends once its queued replies are sent."""
        if self._reading_done:
            return
        self._reading_done = True
        self._frames.clear()
        self.server.poller.remove(self._fd)
        self._closing = True
        self._wake_task()

    def _add(self, outcome: bytes | Slot, ready: list[bytes]) -> None:
        """Queue a reply behind the ones still waiting, or take it for this read's send."""
        queue = self._queue
        if not queue and self._backlog is None:
            if type(outcome) is bytes:
                ready.append(outcome)
                return
            assert isinstance(outcome, Slot)
            if outcome.is_set():
                frame = self._frame_of(outcome)
                if frame is not None:
                    ready.append(frame)
                return
            queue.extend(ready)  # they go first, then the one that waits
            ready.clear()
        queue.append(outcome)

    def _frame_of(self, slot: Slot) -> bytes | None:
        """A ready slot's frame, amended if the authorization step asked; the request is timed."""
        if slot.frame is not None and slot.amend is not None:
            slot.frame = slot.amend(slot.frame)
        self.router.finished(slot, self.peer)
        return slot.frame

    # --- writing --------------------------------------------------------------------

    def _send_ready(self, ready: list[bytes]) -> None:
        if ready:
            payload = b"".join(ready) if len(ready) > 1 else ready[0]
            ready.clear()
            if self.server.failure is None:
                self._send_nowait(payload)

    def _drain(self) -> None:
        """Send the queue's ready replies now, in order, from whichever task made them ready.

        Called after a read whose queue starts with a ready reply, and by a queued slot as it
        is set (a sync returned, a parked request was answered): the first slot still waiting
        gets this method as its ``on_ready``, so a reply waiting for durability goes out from the
        task that released it, with no task woken per reply. What the socket does not take
        at once is the connection task's to send, and every later reply waits behind it.
        Never raises: a failed write ends only this connection.
        """
        if self._ended or self._backlog is not None or self._broken is not None:
            return
        if self.server.failure is not None:
            return  # the broker stopped on a storage failure: nothing more is sent
        queue = self._queue
        ready: list[bytes] = []
        try:
            while queue:
                head = queue[0]
                if type(head) is bytes:
                    ready.append(head)
                else:
                    assert isinstance(head, Slot)
                    if not head.is_set():
                        head.on_ready = self._drain
                        break
                    frame = self._frame_of(head)
                    if frame is not None:
                        ready.append(frame)
                queue.popleft()
            self._send_ready(ready)
        except Exception as exc:  # a bug in amending a reply, a TLS failure: this connection ends
            if not isinstance(exc, OSError):
                log.exception("writing to %s failed", self.peer)
            self._broken = exc
            self._finish_reading()
            return
        if self._full and len(queue) < MAX_PIPELINE:
            self._full = False
            if not self._reading_done and self._delayed is None:
                self.server.poller.resume(self._fd)
        if self._backlog is not None or (self._closing and not queue):
            self._wake_task()

    def _send_nowait(self, payload: bytes) -> None:
        """Write ``payload`` as far as the socket takes it; the rest becomes the backlog.

        On TLS a large payload is encrypted a slice at a time, so each record stays small.
        """
        self.server.bytes_out += len(payload)
        tls = self._tls
        if tls is not None:
            if len(payload) <= TLS_WRITE_SLICE:
                payload = tls.encrypt(payload)
            else:
                view = memoryview(payload)
                payload = b"".join(tls.encrypt(view[start:start + TLS_WRITE_SLICE])
                                   for start in range(0, len(payload), TLS_WRITE_SLICE))
        try:
            sent = os.write(self._fd, payload)
        except BlockingIOError:
            sent = 0
        if sent < len(payload):
            self._backlog = memoryview(payload)[sent:]
            self._wake_task()

    async def _read_socket(self) -> bytes:
        """One read of the socket (b"" at its end), for the TLS handshake."""
        fd = self._fd
        while True:
            await trio.lowlevel.wait_readable(fd)
            try:
                return os.read(fd, RECEIVE_CHUNK)
            except BlockingIOError:
                continue

    async def _write_socket(self, payload: bytes) -> None:
        """All of ``payload``, for the TLS handshake: straight to the socket if it takes it."""
        try:
            sent = os.write(self._fd, payload)
        except BlockingIOError:
            sent = 0
        if sent < len(payload):
            await self.stream.send_all(memoryview(payload)[sent:])

    def _write_nowait(self, payload: bytes) -> None:
        """What the socket takes of ``payload`` now, if anything (a TLS alert, close_notify)."""
        if payload:
            try:
                os.write(self._fd, payload)
            except OSError:
                pass

    def _wake_task(self) -> None:
        wake = self._wake
        if wake is not None:
            self._wake = None
            wake.set()

    def _end(self) -> None:
        """The connection is over: no slot set later may write to its (reused) descriptor."""
        self._ended = True
        for item in self._queue:
            if type(item) is not bytes:
                assert isinstance(item, Slot)
                item.on_ready = None


class Server:
    """Owns the listeners, the connections and the shutdown sequence of a ``Broker``."""

    def __init__(self, config: Config, host: str, port: int, data_dir: Path, fs: FileSystem = REAL_FS) -> None:
        self.config = config
        self.data_dir = data_dir
        self.fs = fs
        self.broker: Broker | None = None
        #: Set when a write or fsync failed: ``(what was being done, the error)``.
        self.failure: tuple[str, OSError] | None = None
        self._stop_scope: trio.CancelScope | None = None
        self.host = host
        self.port = port
        self.connections: set[Connection] = set()
        #: Reads every connection's socket (``broker.poller``); closed when serving ends.
        self.poller = ReadPoller(linger=POLL_LINGER_SECONDS)
        self.draining = False
        self.idle = trio.Event()
        self.accept_scope = trio.CancelScope()
        self.router: Router
        self.bound: tuple[str, int] | None = None
        #: The listeners (``listeners``, or one PLAINTEXT listener on host:port); checked here,
        #: before anything binds, so a bad setting is a ConfigError.
        self.specs = parse_listeners(config, (host, port))
        self.listeners: list[Listener] = []
        self.tls_contexts = {protocol: server_ssl_context(config, client_auth=protocol == "SSL")
                             for protocol in {s.protocol for s in self.specs if s.tls}}
        self.mapping_rules = parse_mapping_rules(config["ssl.principal.mapping.rules"])
        self.per_ip: dict[str, int] = {}
        self.max_per_ip = config["max.connections.per.ip"]
        self.max_per_ip_overrides = _overrides(config["max.connections.per.ip.overrides"])
        # Read at scrape time; plain ints, bumped where things happen.
        self.tls_failures = 0
        self.connections_refused = 0
        self.started_at = time.time()
        self.serving = False
        self.request_logging = False
        self.connections_accepted = 0
        self.connections_closed = 0
        self.bytes_in = 0
        self.bytes_out = 0

    # The services, for the shutdown path, the failure path and tests.
    @property
    def groups(self) -> GroupService | None:
        return None if self.broker is None else self.broker.groups

    @property
    def catalog(self) -> TopicCatalog | None:
        return None if self.broker is None else self.broker.catalog

    @property
    def data(self) -> DataService | None:
        return None if self.broker is None else self.broker.data

    @property
    def security(self) -> SecurityService:
        assert self.broker is not None
        return self.broker.security

    async def _handle(self, stream: trio.SocketStream, listener: Listener | None = None) -> None:
        connection = Connection(self, stream, listener)
        ip = connection.host
        limit = self.max_per_ip_overrides.get(ip, self.max_per_ip)
        if self.per_ip.get(ip, 0) >= limit:
            # max.connections.per.ip: the connection is closed as soon as it is accepted.
            self.connections_refused += 1
            log.info("closing connection %s: %s already has %d connections (max.connections.per.ip)",
                     connection.peer, ip, limit)
            with trio.CancelScope(shield=True):
                await stream.aclose()
            return
        self.per_ip[ip] = self.per_ip.get(ip, 0) + 1
        self.connections.add(connection)
        self.connections_accepted += 1
        try:
            await connection.run()
        finally:
            left = self.per_ip[ip] - 1
            if left:
                self.per_ip[ip] = left
            else:
                del self.per_ip[ip]
            self.connections.discard(connection)
            self.connections_closed += 1
            if self.draining and not self.connections:
                self.idle.set()

    async def bind(self) -> list[trio.SocketListener]:
        """Open every listener's sockets (OSError here means an address is unusable)."""
        if not self.listeners:
            for spec in self.specs:
                try:
                    sockets = await trio.open_tcp_listeners(spec.port, host=spec.host or None)
                except OSError as exc:
                    where = f"{spec.host}:{spec.port}" if ":" not in spec.host else f"[{spec.host}]:{spec.port}"
                    named = "" if spec.name == "PLAINTEXT" and not self.config["listeners"] else f" (listener {spec.name})"
                    raise _listen_error(where, exc, named) from None
                self.listeners.append(Listener(spec, sockets, tls=self.tls_contexts.get(spec.protocol)))
        return [s for listener in self.listeners for s in listener.sockets]

    async def serve(
        self,
        listeners: list[trio.SocketListener] | None = None,
        *,
        task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept and serve until ``shutdown()``; then drain and return.

        ``listeners`` are sockets from ``bind()`` (which is called here otherwise).
        """
        await self.bind()
        if self.broker is None:
            self.broker = Broker.open(self.config, self.data_dir, self.fs)
        broker = self.broker
        first: Router | None = None
        for listener in self.listeners:
            sockname = listener.sockets[0].socket.getsockname()
            listener.bound = (str(sockname[0]), int(sockname[1]))
            spec = listener.spec
            if spec.advertised_host is not None and spec.advertised_port is not None:
                listener.advertised = (spec.advertised_host, spec.advertised_port)
            else:
                listener.advertised = (_reachable(listener.bound[0]), listener.bound[1])
            ctx = BrokerContext(config=self.config, node_id=self.config["node.id"], host=listener.advertised[0],
                                port=listener.advertised[1], cluster_id=self.config["cluster.id"],
                                listener=spec.name, placement=broker.placement)
            listener.router = broker.router(ctx, request_logging=self.request_logging, shares_stats_with=first)
            first = first or listener.router
        assert first is not None
        self.router = first
        self.bound = self.listeners[0].bound
        broker.groups.on_storage_failure = self.storage_failed
        broker.data.on_storage_failure = self.storage_failed
        broker.catalog.on_storage_failure = self.storage_failed
        broker.security.on_storage_failure = self.storage_failed
        with trio.CancelScope() as self._stop_scope:
            async with trio.open_nursery() as background:
                await background.start(broker.run)
                self.serving = True
                for listener in self.listeners:
                    log.info("kcoord listening on %s:%d (advertised %s:%d) listener=%s protocol=%s",
                             *listener.bound, *listener.advertised, listener.spec.name, listener.spec.protocol)
                await self._serve_connections(task_status)
                self.serving = False
                await broker.close()
                background.cancel_scope.cancel()
        if self.failure is not None:
            self.serving = False
            broker.groups.log.close()  # closes files only: nothing more is written or fsynced
            broker.catalog.close()
            raise StorageFailure("stopped after a storage failure (see the error logged above)")
        log.info("kcoord stopped")

    def metrics(self) -> list[Family]:
        """This process and its connections."""
        return [
            gauge("kcoord_build_info", "Always 1; the version label says which kcoord is running.")
            .add(1, version=kcoord_version()),
            gauge("kcoord_start_time_seconds", "When the broker process started (Unix time).", self.started_at),
            gauge("kcoord_serving", "1 while the broker accepts Kafka connections, else 0.",
                  int(self.serving and not self.draining)),
            gauge("kcoord_connections", "Kafka client connections open now.", len(self.connections)),
            counter("kcoord_connections_accepted_total", "Kafka client connections accepted.",
                    self.connections_accepted),
            counter("kcoord_connections_closed_total", "Kafka client connections that ended, for any reason.",
                    self.connections_closed),
            counter("kcoord_received_bytes_total", "Bytes read from Kafka client connections.", self.bytes_in),
            counter("kcoord_sent_bytes_total", "Bytes written to Kafka client connections.", self.bytes_out),
            counter("kcoord_connections_refused_total",
                    "Connections closed at accept because their address had max.connections.per.ip open.",
                    self.connections_refused),
            counter("kcoord_tls_handshake_failures_total", "TLS handshakes that failed or timed out.",
                    self.tls_failures),
        ]

    def collect(self) -> list[Family]:
        """Every kcoord metric, from each part's own collector; parts not started yet are skipped."""
        collectors: list[Collector] = [self.metrics]
        if hasattr(self, "router"):
            collectors.append(self.router.metrics)
        if self.broker is not None:
            collectors += self.broker.collectors()
        return collect(collectors)

    def storage_failed(self, what: str, error: OSError) -> None:
        """A write or fsync failed: stop serving now, answer nothing more, let recovery judge.

        Called synchronously from where the failure happened (a handler, the flusher), so
        the code that called it must not release any reply afterwards; cancelling the
        server's scope stops every other task at its next checkpoint, and connections
        check ``failure`` before each send.
        """
        if self.failure is not None:
            return
        self.failure = (what, error)
        if self.broker is not None:
            self.broker.groups.stopped = True
            self.broker.data.stopped = True
            self.broker.catalog.stopped = True
            self.broker.security.stopped = True
        log.error("storage failure, stopping the broker: %s failed: %s", what, error)
        if self._stop_scope is not None:
            self._stop_scope.cancel()

    async def _serve_connections(self, task_status: trio.TaskStatus[tuple[str, int]]) -> None:
        assert self.bound is not None
        async with trio.open_nursery() as polling:
            if self.broker is not None:
                for commit in self.broker.group_commits():
                    if commit.flusher == "kernel":  # only these can run their syncs on the poller's task
                        self.poller.drive(commit)
            polling.start_soon(self.poller.run)
            await self._serve_connections_polled(task_status)
            polling.cancel_scope.cancel()

    async def _serve_connections_polled(self, task_status: trio.TaskStatus[tuple[str, int]]) -> None:
        assert self.bound is not None
        async with trio.open_nursery() as connections:
            with self.accept_scope:
                async with trio.open_nursery() as accepting:
                    for listener in self.listeners:
                        for sock in listener.sockets:
                            accepting.start_soon(accept_connections, sock,
                                                 partial(self._handle, listener=listener), connections)
                    task_status.started(self.bound)
            for listener in self.listeners:
                for sock in listener.sockets:
                    await sock.aclose()
            # Stop reading new requests everywhere; the queued replies still go out.
            self.draining = True
            for connection in list(self.connections):
                connection.stop_reading()
            if not self.connections:
                self.idle.set()
            grace = self.config["shutdown.grace.ms"] / 1000
            with trio.move_on_after(grace):
                await self.idle.wait()
            if self.connections:
                log.warning("%d connections still busy after %.1fs; closing them",
                            len(self.connections), grace)
                connections.cancel_scope.cancel()

    def shutdown(self) -> None:
        """Begin a graceful stop (idempotent)."""
        self.accept_scope.cancel()


async def run_server(config: Config, listen: str, data_dir: Path, *, http_listen: str | None = None,
                     http_extension: ExtensionFactory | None = None, request_logging: bool = False,
                     cluster: ClusterFactory | None = None) -> None:
    """Serve until SIGINT or SIGTERM, then stop gracefully and return.

    With ``http_listen``, the HTTP surface (``broker.http``: /metrics, /healthz and what
    ``http_extension`` adds) is served on that address in the same trio run. ``cluster``
    makes this process a node of a cluster (``cluster.etcd.endpoints``).
    """
    host, port = parse_listen(listen)
    server = Server(config, host, port, data_dir)
    server.request_logging = request_logging
    listeners = await server.bind()
    http_socket = None
    if http_listen is not None:
        from broker import http

        try:
            http_socket = http.bind(*parse_listen(http_listen, "--http-listen"))
        except OSError as exc:
            raise _listen_error(http_listen, exc, " for HTTP") from None
        http_host, http_port = http_socket.getsockname()[:2]
        log.info("kcoord http on %s:%d (/metrics, /healthz%s)", http_host, http_port,
                 ", the console at /" if http_extension is not None else "")
    # Load before the nursery so a corrupt log is one clear error, not an exception group.
    try:
        server.broker = Broker.open(config, data_dir, cluster=None if cluster is None else cluster(config, data_dir))
    except OSError as exc:
        raise StorageFailure(f"cannot open the logs in {data_dir}: {exc}") from exc
    async with trio.open_nursery() as nursery:

        async def watch_signals() -> None:
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    log.info("received %s, shutting down", signal.Signals(signum).name)
                    server.shutdown()
                    return

        async def serve_http(sock: socket.socket) -> None:
            from broker import http
            from broker.metrics import registry

            # The Kafka listener is bound (not yet serving): the console may connect to it.
            kafka_host, kafka_port = listeners[0].socket.getsockname()[:2]
            if kafka_host in ("0.0.0.0", "::"):
                kafka_host = "127.0.0.1" if kafka_host == "0.0.0.0" else "::1"
            context = http.HttpContext(
                bootstrap=f"[{kafka_host}]:{kafka_port}" if ":" in kafka_host else f"{kafka_host}:{kafka_port}",
                http_host=str(sock.getsockname()[0]), data_dir=data_dir, config=config,
                registry=registry(server.collect), healthy=lambda: server.serving and not server.draining,
                offsets_committed=lambda: server.groups.offsets_committed if server.groups is not None else 0,
                security_protocol=server.listeners[0].spec.protocol)
            extension = http_extension(context) if http_extension is not None else http.HttpExtension(())
            async with trio.open_nursery() as tasks:
                if extension.background is not None:
                    tasks.start_soon(extension.background)
                await http.serve(http.build_app(context, extension.routes), sock)

        nursery.start_soon(watch_signals)
        if http_socket is not None:
            nursery.start_soon(serve_http, http_socket)
        try:
            await server.serve(listeners)
        except StorageFailure as exc:
            stopped: StorageFailure | None = exc
        else:
            stopped = None
        nursery.cancel_scope.cancel()
    if stopped is not None:
        raise stopped

"""The trio shell: listen, read frames, route them, write replies in request order.

One task reads each connection and one writes it. The reader hands every frame to the
router and queues the outcome; the writer sends outcomes in the order the requests came,
so pipelining clients get their replies in order. A bad frame closes only its own
connection. SIGINT/SIGTERM stops accepting, lets in-flight requests finish (bounded by
``shutdown.grace.ms``) and returns.

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
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import trio

from broker.app import Broker
from broker.config import Config, parse_host_port, parse_listeners
from broker.context import BrokerContext
from broker.data_service import DataService
from broker.group_service import GroupService
from broker.metrics import Collector, Family, collect, counter, gauge, kcoord_version, render
from broker.metrics_http import MetricsEndpoint
from broker.router import Close, Outcome, Router
from broker.slots import Slot
from broker.topics import TopicCatalog
from protocol.errors import ProtocolError
from protocol.frames import FrameDecoder
from storage.fs import REAL_FS, FileSystem
from storage.layout import lock_file

log = logging.getLogger("kcoord.server")

RECEIVE_CHUNK = 65536
MAX_PIPELINE = 256  # queued replies per connection before we stop reading it


def parse_listen(listen: str, what: str = "--listen") -> tuple[str, int]:
    """A HOST:PORT to bind (port 0: any); a ``ConfigError`` (a ``ValueError``) if it is not one."""
    return parse_host_port(listen, what)


def advertised(config: Config, host: str, port: int) -> tuple[str, int]:
    """The host and port clients are told to use: advertised.listeners, else the bound one."""
    raw = config["advertised.listeners"]
    if raw:
        _, adv_host, adv_port = parse_listeners(raw, "advertised.listeners")[0]
        return adv_host, adv_port
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return host, port


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
    """One client connection: a reader task and a writer task joined by a queue."""

    def __init__(self, server: Server, stream: trio.SocketStream) -> None:
        self.server = server
        self.stream = stream
        try:
            host, port = stream.socket.getpeername()[:2]
            self.peer = f"{host}:{port}"
        except OSError:
            self.peer = "unknown"
        self.decoder = FrameDecoder(max_size=server.config["socket.request.max.bytes"])
        self.receive_scope: trio.CancelScope | None = None

    def stop_reading(self) -> None:
        """Stop taking new requests; only ever interrupts a wait for bytes."""
        if self.receive_scope is not None:
            self.receive_scope.cancel()

    async def run(self) -> None:
        send, receive = trio.open_memory_channel[bytes | Slot](MAX_PIPELINE)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write, receive)
                async with send:
                    await self._read(send)
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as group:
            # The peer went away (or the socket broke): only this connection ends.
            log.debug("connection %s ended: %s", self.peer, group.exceptions[0])
        finally:
            with trio.CancelScope(shield=True):
                await self.stream.aclose()

    async def _read(self, send: trio.MemorySendChannel[bytes | Slot]) -> None:
        router = self.server.router
        while not self.server.draining:
            with trio.CancelScope() as scope:
                self.receive_scope = scope
                data = await self.stream.receive_some(RECEIVE_CHUNK)
            self.receive_scope = None
            if scope.cancelled_caught:
                return
            if not data:
                if self.decoder.buffered:
                    log.warning("connection %s closed mid-frame (%d bytes pending)",
                                self.peer, self.decoder.buffered)
                return
            self.server.bytes_in += len(data)
            try:
                frames = self.decoder.feed(data)
            except ProtocolError as exc:
                router.errors["frame"] += 1
                log.warning("closing connection %s: %s", self.peer, exc)
                return
            for frame in frames:
                outcome: Outcome = router.route(frame, self.peer)
                if isinstance(outcome, Close):
                    log.warning("closing connection %s: %s", self.peer, outcome.reason)
                    return
                if outcome is not None:
                    await send.send(outcome)

    async def _write(self, receive: trio.MemoryReceiveChannel[bytes | Slot]) -> None:
        """Send replies in request order; replies already ready go out in one send.

        Nothing more is sent once the server has stopped on a storage failure.
        """
        server = self.server
        finished = server.router.finished  # times (and logs) replies that waited
        async with receive:
            async for item in receive:
                ready: list[bytes] = []
                while True:
                    if isinstance(item, Slot):
                        if not item.event.is_set():
                            if ready:  # flush what is ready before waiting on this one
                                if server.failure is not None:
                                    return
                                payload = b"".join(ready)
                                await self.stream.send_all(payload)
                                self.server.bytes_out += len(payload)
                                ready.clear()
                            await item.event.wait()
                        if item.frame is not None:
                            ready.append(item.frame)
                        finished(item, self.peer)
                    else:
                        ready.append(item)
                    try:
                        item = receive.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                if ready:
                    if server.failure is not None:
                        return
                    payload = b"".join(ready) if len(ready) > 1 else ready[0]
                    await self.stream.send_all(payload)
                    self.server.bytes_out += len(payload)


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
        self.draining = False
        self.idle = trio.Event()
        self.accept_scope = trio.CancelScope()
        self.router: Router
        self.bound: tuple[str, int] | None = None
        # Read at scrape time; plain ints, bumped where things happen.
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

    async def _handle(self, stream: trio.SocketStream) -> None:
        connection = Connection(self, stream)
        self.connections.add(connection)
        self.connections_accepted += 1
        try:
            await connection.run()
        finally:
            self.connections.discard(connection)
            self.connections_closed += 1
            if self.draining and not self.connections:
                self.idle.set()

    async def bind(self) -> list[trio.SocketListener]:
        """Open the listening sockets (OSError here means the address is unusable)."""
        return await trio.open_tcp_listeners(self.port, host=self.host)

    async def serve(
        self,
        listeners: list[trio.SocketListener] | None = None,
        *,
        task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept and serve until ``shutdown()``; then drain and return."""
        if listeners is None:
            listeners = await self.bind()
        sockname = listeners[0].socket.getsockname()
        bound_host, bound_port = str(sockname[0]), int(sockname[1])
        self.bound = (bound_host, bound_port)
        adv_host, adv_port = advertised(self.config, bound_host, bound_port)
        if self.broker is None:
            self.broker = Broker.open(self.config, self.data_dir, self.fs)
        broker = self.broker
        ctx = BrokerContext(config=self.config, node_id=self.config["node.id"], host=adv_host, port=adv_port,
                            cluster_id=self.config["cluster.id"])
        self.router = broker.router(ctx, request_logging=self.request_logging)
        broker.groups.on_storage_failure = self.storage_failed
        broker.data.on_storage_failure = self.storage_failed
        broker.catalog.on_storage_failure = self.storage_failed
        with trio.CancelScope() as self._stop_scope:
            async with trio.open_nursery() as background:
                await background.start(broker.run)
                self.serving = True
                log.info("kcoord listening on %s:%d (advertised %s:%d)",
                         bound_host, bound_port, adv_host, adv_port)
                await self._serve_connections(listeners, task_status)
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
        server's scope stops every other task at its next checkpoint, and the connection
        writers check ``failure`` before each send.
        """
        if self.failure is not None:
            return
        self.failure = (what, error)
        if self.broker is not None:
            self.broker.groups.stopped = True
            self.broker.data.stopped = True
            self.broker.catalog.stopped = True
        log.error("storage failure, stopping the broker: %s failed: %s", what, error)
        if self._stop_scope is not None:
            self._stop_scope.cancel()

    async def _serve_connections(
        self, listeners: list[trio.SocketListener], task_status: trio.TaskStatus[tuple[str, int]]
    ) -> None:
        assert self.bound is not None
        async with trio.open_nursery() as connections:
            with self.accept_scope:
                task_status.started(self.bound)
                await trio.serve_listeners(self._handle, listeners, handler_nursery=connections)
            for listener in listeners:
                await listener.aclose()
            # Stop reading new requests everywhere; writers flush what is queued.
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


async def run_server(config: Config, listen: str, data_dir: Path, *, metrics_listen: str | None = None,
                     request_logging: bool = False) -> None:
    """Serve until SIGINT or SIGTERM, then stop gracefully and return."""
    host, port = parse_listen(listen)
    server = Server(config, host, port, data_dir)
    server.request_logging = request_logging
    try:
        listeners = await server.bind()
    except OSError as exc:
        raise _listen_error(listen, exc) from None
    metrics: MetricsEndpoint | None = None
    if metrics_listen is not None:
        metrics = MetricsEndpoint(render=lambda: render(server.collect()),
                                  healthy=lambda: server.serving and not server.draining)
        try:
            metrics_host, metrics_port = await metrics.bind(*parse_listen(metrics_listen, "--metrics-listen"))
        except OSError as exc:
            raise _listen_error(metrics_listen, exc, " for metrics") from None
        log.info("kcoord metrics on %s:%d", metrics_host, metrics_port)
    # Load before the nursery so a corrupt log is one clear error, not an exception group.
    try:
        server.broker = Broker.open(config, data_dir)
    except OSError as exc:
        raise StorageFailure(f"cannot open the logs in {data_dir}: {exc}") from exc
    async with trio.open_nursery() as nursery:

        async def watch_signals() -> None:
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    log.info("received %s, shutting down", signal.Signals(signum).name)
                    server.shutdown()
                    return

        nursery.start_soon(watch_signals)
        if metrics is not None:
            nursery.start_soon(metrics.serve)
        try:
            await server.serve(listeners)
        except StorageFailure as exc:
            stopped: StorageFailure | None = exc
        else:
            stopped = None
        nursery.cancel_scope.cancel()
    if stopped is not None:
        raise stopped

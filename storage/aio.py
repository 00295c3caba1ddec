"""fdatasync without a thread: Linux native AIO, its completion signalled on an eventfd.

A sync handed to a thread costs the coordinator more than the fsync itself: the thread
must be woken, must take the GIL back from a busy event loop when its fsync returns, and
its result must cross back (a profile of one-partition commits showed the loop waiting
about 120 µs per round beyond the fsync's own time). The kernel can run the fdatasync
instead: ``io_submit`` with ``IOCB_CMD_FDSYNC`` (Linux 4.18 and later) queues it, and
``IOCB_FLAG_RESFD`` makes its completion readable on an eventfd, which trio waits for like
any socket. The event loop serves other requests meanwhile, and a disk that hangs holds
nothing but the sync itself.

Three system calls (``io_setup``, ``io_submit``, ``io_getevents``, plus ``io_destroy``)
are called through ``ctypes``: the PyPI bindings for AIO need the C library libaio from
the operating system, which a ``pip install`` cannot provide. ``AsyncDatasync.open``
returns None where AIO is not offered (another OS or architecture, a seccomp filter, the
system's ``fs.aio-max-nr`` used up); the caller then syncs in a thread as before.
"""

from __future__ import annotations

import ctypes
import errno as errnos
import logging
import os
import platform
import select
import sys
import tempfile
import threading

__all__ = ["AsyncDatasync", "available"]

log = logging.getLogger("kcoord.storage")

# System call numbers; both architectures are little-endian, which the iocb layout assumes.
_SYSCALLS = {
    "x86_64": (206, 207, 208, 209),  # io_setup, io_destroy, io_getevents, io_submit
    "aarch64": (0, 1, 4, 2),
}
_IOCB_CMD_FDSYNC = 3
_IOCB_FLAG_RESFD = 1 << 0
_EVENTS = 8  # completions the context holds; one sync per file is ever in flight


class _Iocb(ctypes.Structure):  # struct iocb, <linux/aio_abi.h>, little-endian
    _fields_ = [
        ("aio_data", ctypes.c_uint64),
        ("aio_key", ctypes.c_uint32),
        ("aio_rw_flags", ctypes.c_int32),
        ("aio_lio_opcode", ctypes.c_uint16),
        ("aio_reqprio", ctypes.c_int16),
        ("aio_fildes", ctypes.c_uint32),
        ("aio_buf", ctypes.c_uint64),
        ("aio_nbytes", ctypes.c_uint64),
        ("aio_offset", ctypes.c_int64),
        ("aio_reserved2", ctypes.c_uint64),
        ("aio_flags", ctypes.c_uint32),
        ("aio_resfd", ctypes.c_uint32),
    ]


class _IoEvent(ctypes.Structure):  # struct io_event
    _fields_ = [("data", ctypes.c_uint64), ("obj", ctypes.c_uint64), ("res", ctypes.c_int64),
                ("res2", ctypes.c_int64)]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux") or platform.machine() not in _SYSCALLS:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


class AsyncDatasync:
    """An AIO context that runs fdatasyncs and reports each one on ``fileno()``.

    One batch of syncs at a time: ``submit`` the files, wait until ``fileno()`` is
    readable, ``reap`` until every one has reported. Not thread-safe; owned by one task.
    """

    def __init__(self, libc: ctypes.CDLL, context: int, eventfd: int) -> None:
        self._libc = libc
        self._setup, self._destroy, self._getevents, self._submit = _SYSCALLS[platform.machine()]
        self._context = ctypes.c_ulong(context)
        self._eventfd = eventfd
        self._blocks = (_Iocb * _EVENTS)()
        for i, block in enumerate(self._blocks):
            block.aio_data = i
            block.aio_lio_opcode = _IOCB_CMD_FDSYNC
            block.aio_flags = _IOCB_FLAG_RESFD
            block.aio_resfd = eventfd
        pointer = ctypes.POINTER(_Iocb)
        self._pointers = (pointer * _EVENTS)(*(ctypes.pointer(block) for block in self._blocks))
        self._events = (_IoEvent * _EVENTS)()
        self._no_wait = _Timespec(0, 0)
        self._in_flight = 0
        self._closed = False

    @classmethod
    def open(cls) -> AsyncDatasync | None:
        """A new context, or None where the kernel does not offer AIO here (logged)."""
        libc = _libc()
        if libc is None:
            return None
        context = ctypes.c_ulong(0)
        if libc.syscall(_SYSCALLS[platform.machine()][0], _EVENTS, ctypes.byref(context)) != 0:
            code = ctypes.get_errno()
            log.info("asynchronous fdatasync unavailable (io_setup: %s); syncs run in a thread",
                     os.strerror(code))
            return None
        try:
            eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        except OSError as exc:
            libc.syscall(_SYSCALLS[platform.machine()][1], context)
            log.info("asynchronous fdatasync unavailable (eventfd: %s); syncs run in a thread", exc.strerror)
            return None
        return cls(libc, context.value, eventfd)

    def fileno(self) -> int:
        """Readable once a submitted sync has completed."""
        return self._eventfd

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def submit(self, fds: list[int]) -> None:
        """Queue one fdatasync per descriptor. ``OSError`` if the kernel refuses them (EINVAL:
        this kernel or file system has no asynchronous fsync); then nothing was queued."""
        if self._in_flight:
            raise RuntimeError("the previous syncs have not all been reaped")
        if not 0 < len(fds) <= _EVENTS:
            raise ValueError(f"between 1 and {_EVENTS} files per submit, got {len(fds)}")
        blocks = self._blocks
        for i, fd in enumerate(fds):
            blocks[i].aio_fildes = fd
        queued = self._libc.syscall(self._submit, self._context, len(fds), self._pointers)
        if queued < 0:
            code = ctypes.get_errno()
            raise OSError(code, f"io_submit: {os.strerror(code)}")
        self._in_flight = queued
        if queued < len(fds):  # only a prefix was queued: the rest cannot be, whatever the reason
            raise OSError(errnos.EAGAIN, f"io_submit queued {queued} of {len(fds)} syncs")

    def reap(self) -> list[tuple[int, int]]:
        """Completed syncs as (index in the submitted list, 0 or a negative errno); call when
        ``fileno()`` is readable. May return nothing if the wake-up was for earlier ones."""
        try:
            os.eventfd_read(self._eventfd)
        except BlockingIOError:
            return []
        got = self._libc.syscall(self._getevents, self._context, 0, _EVENTS, self._events,
                                 ctypes.byref(self._no_wait))
        if got < 0:
            code = ctypes.get_errno()
            raise OSError(code, f"io_getevents: {os.strerror(code)}")
        self._in_flight -= got
        events = self._events
        return [(events[i].data, events[i].res) for i in range(got)]

    def close(self) -> None:
        """Free the context, in a thread: ``io_destroy`` waits for syncs still in flight (the
        task waiting for them was cancelled) and, even with none, for the kernel's RCU grace
        periods, tens of milliseconds that a closing broker need not wait for."""
        if self._closed:
            return
        self._closed = True
        threading.Thread(target=self._free, name="kcoord-aio-close", daemon=True).start()

    def _free(self) -> None:
        self._libc.syscall(self._destroy, self._context)
        os.close(self._eventfd)


def available(directory: str | None = None) -> bool:
    """Whether the kernel runs an fdatasync asynchronously on a file in ``directory`` (the
    temporary one by default): one is run there."""
    kernel = AsyncDatasync.open()
    if kernel is None:
        return False
    try:
        with tempfile.TemporaryFile(dir=directory) as probe:
            probe.write(b"probe")
            probe.flush()
            try:
                kernel.submit([probe.fileno()])
            except OSError:
                return False
            results: list[tuple[int, int]] = []
            while kernel.in_flight and select.select([kernel.fileno()], [], [], 10.0)[0]:
                results += kernel.reap()
            return results == [(0, 0)]
    finally:
        kernel.close()

"""A ``FileSystem`` that fails on cue and can forget what was never made durable.

For tests of the paths real disks take rarely: a write or fsync that fails with ``EIO`` or
``ENOSPC``, a rename that never happens, a crash between two steps of a protocol. It does
the real work through ``RealFileSystem`` and keeps two things on the side:

- **faults**: rules that match an operation (and optionally a path) and make its Nth
  matching call (and following ones, up to ``times``) raise ``OSError`` with a chosen
  errno, or run a callback first (a hook to do something "in the middle" of an operation);
  a fault with ``crash=True`` also kills the filesystem: that call and every later one fail;
- **durability** (when built with a ``root``): what a crash would leave under ``root``. A
  file's contents are durable as of its last fsync; a directory's entries (files created,
  renamed or removed, subdirectories made) as of the directory's last fsync. Whatever was
  on disk when a directory was first touched counts as durable. ``crash()`` rewrites the
  tree under ``root`` to exactly that, the strictest outcome POSIX allows.

Operation names, for ``Fault.op``: ``open``, ``create``, ``read``, ``write``, ``pread``,
``fsync``, ``truncate``, ``fsync_dir``, ``rename``, ``unlink``, ``listdir``, ``mkdir``,
``remove_tree``, ``stat``; ``*`` matches any of them.
"""

from __future__ import annotations

import errno as errno_codes
import os
import shutil
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from storage.fs import REAL_FS, Buffer, File, FileSystem

__all__ = ["MUTATIONS", "OPERATIONS", "Fault", "FaultyFile", "FaultyFileSystem"]

OPERATIONS = frozenset({
    "open", "create", "read", "write", "pread", "fsync", "truncate", "fsync_dir", "rename", "unlink",
    "listdir", "mkdir", "remove_tree", "stat",
})
#: The operations that change what is on disk: where a crash can make a difference.
MUTATIONS = ("create", "write", "fsync", "truncate", "fsync_dir", "rename", "unlink", "mkdir", "remove_tree")


@dataclass
class Fault:
    """Which calls fail (or get a hook run before them), and how.

    A call matches when its operation is ``op`` (one name, several, or ``*``) and ``path``
    is None or a substring of the call's path (for a rename, the source). Counting 1, 2, ...
    over matching calls, calls ``nth`` to ``nth + times - 1`` fire (``times=None``: all from
    ``nth`` on). Firing runs ``action(path)`` if there is one, and otherwise raises
    ``OSError`` with ``errno``; with ``crash`` the filesystem is dead from then on.
    """

    op: str | tuple[str, ...]
    path: str | None = None
    nth: int = 1
    times: int | None = 1
    errno: int = errno_codes.EIO
    crash: bool = False
    action: Callable[[str], None] | None = None
    #: Matching calls seen so far, and how many of them fired.
    seen: int = 0
    fired: int = 0

    def __post_init__(self) -> None:
        ops = (self.op,) if isinstance(self.op, str) else self.op
        unknown = [op for op in ops if op != "*" and op not in OPERATIONS]
        if unknown:
            raise ValueError(f"unknown operations {unknown}; use {sorted(OPERATIONS)} or '*'")
        if self.nth < 1:
            raise ValueError("nth counts from 1")

    def matches(self, op: str, path: str) -> bool:
        if self.op != "*" and op != self.op and (isinstance(self.op, str) or op not in self.op):
            return False
        return self.path is None or self.path in path

    def due(self) -> bool:
        """Count one matching call; True if it is one of those that fire."""
        self.seen += 1
        if self.seen < self.nth or (self.times is not None and self.fired >= self.times):
            return False
        self.fired += 1
        return True


@dataclass(eq=False)
class _Node:
    """A file or directory as a crash sees it; shared by every name it has had."""

    is_dir: bool
    durable: bytes = b""  # a file's contents as of its last fsync


@dataclass
class _Directory:
    """A directory's entries now, and as of its last fsync."""

    live: dict[str, _Node] = field(default_factory=dict)
    durable: dict[str, _Node] = field(default_factory=dict)


class FaultyFileSystem(FileSystem):
    """Real files, plus the faults and the crash model described in the module docstring."""

    def __init__(self, root: Path | None = None, *, base: FileSystem = REAL_FS) -> None:
        self.base = base
        self.root = Path(os.path.abspath(root)) if root is not None else None
        self.faults: list[Fault] = []
        self.calls: Counter[str] = Counter()
        self.crashed = False
        self._lock = threading.RLock()
        self._dirs: dict[Path, _Directory] = {}

    # --- configuring ------------------------------------------------------------------------

    def inject(self, fault: Fault) -> Fault:
        with self._lock:
            self.faults.append(fault)
        return fault

    def fail(self, op: str | tuple[str, ...], *, path: str | None = None, nth: int = 1, times: int | None = 1,
             errno: int = errno_codes.EIO, crash: bool = False) -> Fault:
        """Make the ``nth`` matching call of ``op`` (and ``times - 1`` more) raise ``errno``."""
        return self.inject(Fault(op, path, nth, times, errno, crash))

    def before(self, op: str, action: Callable[[str], None], *, path: str | None = None, nth: int = 1,
               times: int | None = 1) -> Fault:
        """Run ``action(path)`` just before the ``nth`` matching call of ``op`` goes ahead."""
        return self.inject(Fault(op, path, nth, times, action=action))

    def clear(self) -> None:
        """Remove every fault (the crash model keeps tracking)."""
        with self._lock:
            self.faults.clear()

    # --- the gate every call passes ---------------------------------------------------------

    def _enter(self, op: str, path: Path | str) -> None:
        name = str(path)
        actions: list[Callable[[str], None]] = []
        with self._lock:
            self.calls[op] += 1
            if self.crashed:
                raise OSError(errno_codes.EIO, "the filesystem crashed (simulated)", name)
            for fault in self.faults:
                if not fault.matches(op, name) or not fault.due():
                    continue
                if fault.action is not None:
                    actions.append(fault.action)
                    continue
                if fault.crash:
                    self.crashed = True
                raise OSError(fault.errno, f"{os.strerror(fault.errno)} (injected into {op})", name)
        for action in actions:  # outside the lock: an action may use this filesystem itself
            action(name)

    # --- the durability model -------------------------------------------------------------------

    def _tracked(self, directory: Path) -> bool:
        return self.root is not None and (directory == self.root or self.root in directory.parents)

    def _directory(self, directory: Path) -> _Directory | None:
        """The model of ``directory``, taken from the disk the first time it is touched."""
        directory = Path(os.path.abspath(directory))
        if not self._tracked(directory):
            return None
        state = self._dirs.get(directory)
        if state is None:
            state = self._dirs[directory] = _Directory()
            if directory.is_dir():
                for name in os.listdir(directory):
                    child = directory / name
                    node = _Node(True) if child.is_dir() else _Node(False, child.read_bytes())
                    state.live[name] = state.durable[name] = node
        return state

    def _node(self, path: Path) -> _Node | None:
        path = Path(os.path.abspath(path))
        state = self._directory(path.parent)
        if state is None:
            return None
        node = state.live.get(path.name)
        if node is None and path.exists():  # put there behind the filesystem's back: durable
            node = _Node(True) if path.is_dir() else _Node(False, path.read_bytes())
            state.live[path.name] = state.durable[path.name] = node
        return node

    def crash(self) -> None:
        """Kill the filesystem and leave under ``root`` only what was durable."""
        if self.root is None:
            raise ValueError("crash() needs a FaultyFileSystem built with a root")
        with self._lock:
            self.crashed = True
            self._materialize(self.root)

    def _materialize(self, directory: Path) -> None:
        state = self._dirs.get(directory)
        if state is None:
            return  # never touched: what is on disk is what was durable
        directory.mkdir(exist_ok=True)
        for name in os.listdir(directory):
            if name not in state.durable:
                _remove(directory / name)
        for name, node in state.durable.items():
            path = directory / name
            if node.is_dir:
                if path.exists() and not path.is_dir():
                    path.unlink()
                self._materialize_dir(path)
            else:
                if path.is_dir():
                    shutil.rmtree(path)
                path.write_bytes(node.durable)

    def _materialize_dir(self, path: Path) -> None:
        path.mkdir(exist_ok=True)
        self._materialize(path)

    # --- FileSystem -------------------------------------------------------------------------------

    def open(self, path: Path, *, create: bool = False, append: bool = True) -> FaultyFile:
        path = Path(path)
        self._enter("create" if create else "open", path)
        with self._lock:
            state = self._directory(path.parent)  # before the file exists, if it is new
            node = None if create else self._node(path)
        inner = self.base.open(path, create=create, append=append)
        if create and state is not None:
            node = _Node(False)
            with self._lock:
                state.live[path.name] = node
        return FaultyFile(self, inner, node)

    def read_bytes(self, path: Path) -> bytes:
        self._enter("read", path)
        return self.base.read_bytes(path)

    def fsync_directory(self, path: Path) -> None:
        self._enter("fsync_dir", path)
        with self._lock:
            state = self._directory(Path(path))
            self.base.fsync_directory(path)
            if state is not None:
                state.durable = dict(state.live)

    def rename(self, source: Path, target: Path) -> None:
        source, target = Path(source), Path(target)
        self._enter("rename", source)
        with self._lock:
            node = self._node(source)
            self._directory(target.parent)  # snapshot the target's directory before it changes
            self.base.rename(source, target)
            old = self._directory(source.parent)
            if old is not None:
                old.live.pop(source.name, None)
            new = self._directory(target.parent)
            if new is not None and node is not None:
                new.live[target.name] = node

    def unlink(self, path: Path, *, missing_ok: bool = False) -> None:
        path = Path(path)
        self._enter("unlink", path)
        with self._lock:
            self._node(path)
            self.base.unlink(path, missing_ok=missing_ok)
            state = self._directory(path.parent)
            if state is not None:
                state.live.pop(path.name, None)

    def listdir(self, path: Path) -> list[str]:
        self._enter("listdir", path)
        with self._lock:
            self._directory(Path(path))
        return self.base.listdir(path)

    def mkdir(self, path: Path) -> None:
        path = Path(path)
        self._enter("mkdir", path)
        with self._lock:
            parent = self._directory(path.parent)
            self.base.mkdir(path)
            if parent is not None:
                parent.live[path.name] = _Node(True)
                self._dirs[Path(os.path.abspath(path))] = _Directory()

    def remove_tree(self, path: Path) -> None:
        path = Path(path)
        self._enter("remove_tree", path)
        with self._lock:
            self._node(path)
            if path.is_dir():
                for below, _, _ in os.walk(path):  # remember what a crash may bring back
                    self._directory(Path(below))
            self.base.remove_tree(path)
            state = self._directory(path.parent)
            if state is not None:
                state.live.pop(path.name, None)

    def stat(self, path: Path) -> os.stat_result:
        self._enter("stat", path)
        return self.base.stat(path)


class FaultyFile(File):
    """A real file whose calls pass the filesystem's gate; fsync records what became durable."""

    __slots__ = ("_fs", "inner", "node", "path")

    def __init__(self, fs: FaultyFileSystem, inner: File, node: _Node | None) -> None:
        self._fs = fs
        self.inner = inner
        self.node = node
        self.path = inner.path

    def write(self, data: Buffer) -> int:
        self._fs._enter("write", self.path)
        return self.inner.write(data)

    def pread(self, length: int, offset: int) -> bytes:
        self._fs._enter("pread", self.path)
        return self.inner.pread(length, offset)

    def pwrite(self, data: Buffer, offset: int) -> int:
        self._fs._enter("write", self.path)
        return self.inner.pwrite(data, offset)

    def fsync(self) -> None:
        self._sync(self.inner.fsync)

    def datasync(self) -> None:
        """Modelled as an fsync (and gated as one): the contents become durable."""
        self._sync(self.inner.datasync)

    def _sync(self, sync: Callable[[], None]) -> None:
        self._fs._enter("fsync", self.path)
        node = self.node
        if node is None:
            sync()
            return
        # What was written before the fsync began is what it guarantees; a write racing
        # with it may or may not be included, so the model leaves it out.
        contents = self.inner.pread(self.inner.size(), 0)
        sync()
        with self._fs._lock:
            node.durable = contents

    def truncate(self, size: int) -> None:
        self._fs._enter("truncate", self.path)
        self.inner.truncate(size)

    def size(self) -> int:
        return self.inner.size()

    def dup(self) -> FaultyFile:
        return FaultyFile(self._fs, self.inner.dup(), self.node)

    def close(self) -> None:
        self.inner.close()

    @property
    def closed(self) -> bool:
        return self.inner.closed


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()

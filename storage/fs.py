"""The file operations storage performs, behind one small interface.

Every byte the storage engine reads or writes goes through a ``FileSystem``: partition logs,
the coordinator log, the cleaner, history pruning, ``topics.json`` and the producer-id
block. ``RealFileSystem`` is a thin layer over ``os``; ``storage.faultfs`` has one that fails
chosen calls and can forget what was never fsynced, which is how the tests reach the error
and crash paths without patching ``os``.

Errors keep their ``errno`` and always name the file (``OSError.filename``), so the one
log line that stops a broker after a failed write or fsync says which file it was.
"""

from __future__ import annotations

import os
import shutil
import stat as stat_module
from abc import ABC, abstractmethod
from pathlib import Path

from storage.layout import temp_file

__all__ = ["REAL_FS", "Buffer", "File", "FileSystem", "RealFile", "RealFileSystem", "located"]

Buffer = bytes | bytearray | memoryview


def located(exc: OSError, path: Path | str) -> OSError:
    """``exc`` with ``path`` as its filename (os.write and os.fsync do not say which file)."""
    if exc.errno is None or exc.filename is not None:
        return exc
    return OSError(exc.errno, exc.strerror, str(path))


class File(ABC):
    """One open file: appended to, read at positions, fsynced, truncated."""

    __slots__ = ()

    path: Path

    @abstractmethod
    def write(self, data: Buffer) -> int:
        """Append ``data`` with one write call; returns the bytes written (may be short)."""

    @abstractmethod
    def pread(self, length: int, offset: int) -> bytes:
        """Up to ``length`` bytes at ``offset`` (fewer at the end of the file)."""

    @abstractmethod
    def pwrite(self, data: Buffer, offset: int) -> int:
        """Write ``data`` at ``offset`` with one call (a file opened with ``append=False``);
        returns the bytes written (may be short)."""

    @abstractmethod
    def fsync(self) -> None:
        """Make everything written so far durable."""

    @abstractmethod
    def datasync(self) -> None:
        """Make everything written so far durable, without the timestamps (``fdatasync``):
        cheaper than ``fsync`` when the writes did not change the file's size."""

    @abstractmethod
    def truncate(self, size: int) -> None:
        """Cut (or extend) the file to ``size`` bytes; not durable until ``fsync``."""

    @abstractmethod
    def size(self) -> int:
        """The file's size now."""

    @abstractmethod
    def dup(self) -> File:
        """A second handle on the same open file, closed independently."""

    @abstractmethod
    def close(self) -> None:
        """Release the handle (idempotent; never fails)."""

    @property
    @abstractmethod
    def closed(self) -> bool: ...

    def fileno(self) -> int | None:
        """The operating system's descriptor, for a sync the kernel runs on its own
        (``storage.aio``); None for a file that has none (a modelled one), or closed."""
        return None


class FileSystem(ABC):
    """The operations storage needs; paths are ``pathlib.Path``."""

    @abstractmethod
    def open(self, path: Path, *, create: bool = False, append: bool = True) -> File:
        """Open for reading and appending (or, with ``append=False``, writing at positions with
        ``pwrite``); ``create`` makes a new file and fails if it exists."""

    @abstractmethod
    def read_bytes(self, path: Path) -> bytes: ...

    @abstractmethod
    def fsync_directory(self, path: Path) -> None:
        """Make created, renamed or removed entries of ``path`` durable (a file fsync is not)."""

    @abstractmethod
    def rename(self, source: Path, target: Path) -> None:
        """Rename, replacing ``target`` if it exists (atomic on one filesystem)."""

    @abstractmethod
    def unlink(self, path: Path, *, missing_ok: bool = False) -> None: ...

    @abstractmethod
    def listdir(self, path: Path) -> list[str]: ...

    @abstractmethod
    def mkdir(self, path: Path) -> None:
        """Create one directory; its parent must exist (FileExistsError if it does)."""

    @abstractmethod
    def remove_tree(self, path: Path) -> None:
        """Delete a directory and everything in it; a missing directory is fine."""

    @abstractmethod
    def stat(self, path: Path) -> os.stat_result: ...

    # --- built from the operations above ---------------------------------------------------

    def exists(self, path: Path) -> bool:
        try:
            self.stat(path)
        except FileNotFoundError:
            return False
        return True

    def is_dir(self, path: Path) -> bool:
        try:
            return stat_module.S_ISDIR(self.stat(path).st_mode)
        except FileNotFoundError:
            return False

    def is_file(self, path: Path) -> bool:
        try:
            return stat_module.S_ISREG(self.stat(path).st_mode)
        except FileNotFoundError:
            return False

    def make_dirs(self, path: Path) -> bool:
        """Create ``path`` and missing parents, each made durable in its parent; True if created."""
        path = Path(path)
        if self.is_dir(path):
            return False
        self.make_dirs(path.parent)
        try:
            self.mkdir(path)
        except FileExistsError:
            return False
        self.fsync_directory(path.parent)
        return True

    def write_atomically(self, path: Path, data: bytes) -> None:
        """Replace ``path`` with ``data`` so a crash leaves the old or the new file, whole.

        Write ``<name>.tmp``, fsync it, rename it over ``path``, fsync the directory.
        """
        path = Path(path)
        tmp = temp_file(path)
        self.unlink(tmp, missing_ok=True)  # a stale one from a crash
        file = self.open(tmp, create=True)
        try:
            view = memoryview(data)
            while view:
                written = file.write(view)
                view = view[written:]
            file.fsync()
        finally:
            file.close()
        self.rename(tmp, path)
        self.fsync_directory(path.parent)


# --- the real one ---------------------------------------------------------------------------


class RealFile(File):
    """An ``os`` file descriptor (opened with O_APPEND unless asked not to); closed when dropped, if not before."""

    __slots__ = ("fd", "path")

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd

    def write(self, data: Buffer) -> int:
        try:
            return os.write(self.fd, data)
        except OSError as exc:
            raise located(exc, self.path) from None

    def pread(self, length: int, offset: int) -> bytes:
        try:
            return os.pread(self.fd, length, offset)
        except OSError as exc:
            raise located(exc, self.path) from None

    def fsync(self) -> None:
        try:
            os.fsync(self.fd)
        except OSError as exc:
            raise located(exc, self.path) from None

    def datasync(self) -> None:
        try:
            os.fdatasync(self.fd)
        except OSError as exc:
            raise located(exc, self.path) from None

    def pwrite(self, data: Buffer, offset: int) -> int:
        try:
            return os.pwrite(self.fd, data, offset)
        except OSError as exc:
            raise located(exc, self.path) from None

    def truncate(self, size: int) -> None:
        try:
            os.ftruncate(self.fd, size)
        except OSError as exc:
            raise located(exc, self.path) from None

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def fileno(self) -> int | None:
        return self.fd if self.fd >= 0 else None

    def dup(self) -> RealFile:
        if self.fd < 0:
            raise ValueError(f"{self.path}: file is closed")
        return RealFile(self.path, os.dup(self.fd))

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            try:
                os.close(fd)
            except OSError:
                pass

    @property
    def closed(self) -> bool:
        return self.fd < 0

    def __del__(self) -> None:
        # A segment the cleaner replaced is dropped, not closed (a reader may still hold it).
        try:
            self.close()
        except (AttributeError, TypeError):
            pass


class RealFileSystem(FileSystem):
    """The operating system's files, through ``os``."""

    def open(self, path: Path, *, create: bool = False, append: bool = True) -> RealFile:
        flags = os.O_RDWR | (os.O_APPEND if append else 0)
        if create:
            flags |= os.O_CREAT | os.O_EXCL
        return RealFile(Path(path), os.open(path, flags, 0o644))

    def read_bytes(self, path: Path) -> bytes:
        return Path(path).read_bytes()

    def fsync_directory(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        except OSError as exc:
            raise located(exc, path) from None
        finally:
            os.close(fd)

    def rename(self, source: Path, target: Path) -> None:
        os.replace(source, target)

    def unlink(self, path: Path, *, missing_ok: bool = False) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            if not missing_ok:
                raise

    def listdir(self, path: Path) -> list[str]:
        return os.listdir(path)

    def mkdir(self, path: Path) -> None:
        os.mkdir(path)

    def remove_tree(self, path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def stat(self, path: Path) -> os.stat_result:
        return os.stat(path)


#: The default everywhere a ``FileSystem`` is taken.
REAL_FS = RealFileSystem()

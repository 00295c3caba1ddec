"""The data directory as a whole: usable at all, and in a format this kcoord reads.

``prepare`` makes sure ``--data-dir`` is a writable directory (creating it if needed) and
says plainly what is wrong otherwise: a regular file, a path under a file, no permission.

``check_format`` reads ``format.json`` (``{"format_version": N}``). The files kcoord keeps
(``topics.json``, ``producer_ids.json``, ``__consumer_offsets.meta.json``, segment files)
change only together with ``FORMAT_VERSION``, and CHANGELOG.md says how; a data directory
written by a newer kcoord is refused at start-up instead of being misread. A directory
without the file is new, or was written by a kcoord from before the file existed (whose
files are format 1): either way the current version is written into it.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

from storage.fs import REAL_FS, FileSystem
from storage.layout import format_file

__all__ = ["FORMAT_VERSION", "DataDirError", "check_format", "prepare"]

#: The version of the data directory's files this kcoord writes and reads.
FORMAT_VERSION = 1


class DataDirError(Exception):
    """The data directory cannot be used; the message names it and says why."""


def prepare(data_dir: Path) -> None:
    """Create ``data_dir`` if needed; raise ``DataDirError`` unless it is a writable directory."""
    path = Path(data_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise DataDirError(f"data directory {path} is a file, not a directory") from None
    except NotADirectoryError:
        raise DataDirError(f"data directory {path} cannot be created: "
                           f"{_file_ancestor(path)} is a file, not a directory") from None
    except OSError as exc:
        raise DataDirError(f"data directory {path} cannot be created: {_reason(exc)}") from None
    if not path.is_dir():
        raise DataDirError(f"data directory {path} is not a directory")
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        raise DataDirError(f"data directory {path} is not writable by this user")


def check_format(data_dir: Path, fs: FileSystem = REAL_FS) -> int:
    """The directory's format version; refuse a newer one, stamp a directory without one."""
    path = format_file(data_dir)
    if not fs.exists(path):
        fs.write_atomically(path, _encode(FORMAT_VERSION))
        return FORMAT_VERSION
    try:
        document = json.loads(fs.read_bytes(path))
        version = document["format_version"]
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ValueError(version)
    except (ValueError, KeyError, TypeError):
        raise DataDirError(f"{path} is not a kcoord format file (expected {{\"format_version\": N}})") from None
    if version > FORMAT_VERSION:
        raise DataDirError(
            f"data directory {data_dir} holds data format {version}, written by a newer kcoord; "
            f"this kcoord reads format {FORMAT_VERSION} (see CHANGELOG.md): run the newer kcoord, "
            "or point --data-dir elsewhere")
    return version


def _encode(version: int) -> bytes:
    return (json.dumps({"format_version": version}) + "\n").encode()


def _file_ancestor(path: Path) -> Path:
    for parent in [path, *path.parents]:
        if parent.exists() and not parent.is_dir():
            return parent
    return path


def _reason(exc: OSError) -> str:
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return (exc.strerror or str(exc)).lower()

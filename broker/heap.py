"""How the broker's memory is managed: set once, as ``kcoord serve`` starts.

Two settings: the C heap's thresholds for large buffers (``keep_large_buffers``), and how
often Python's cyclic collector walks young objects (``collect_young_objects_less_often``).

**The C heap.**

A Fetch reply is a few large buffers (the records read from each partition, then the
encoded frame, up to ``fetch.max.bytes``). With glibc's defaults every buffer above the
dynamic mmap threshold is a fresh ``mmap``, and a free that leaves more than twice that
threshold unused at the top of the heap gives the memory back with ``brk``. Either way
the next reply of that size touches new pages, and the kernel faults and zeroes every
one of them: several thousand page faults per 8 MB reply, which cost more CPU than
reading and sending the records.

``keep_large_buffers`` fixes both thresholds (``mallopt``): buffers up to
``MMAP_THRESHOLD`` come from the heap, and up to ``TRIM_THRESHOLD`` of free memory stays
at its top for the next reply. Larger requests still get their own mapping, which goes
back to the system when freed. Nothing is changed where the heap is not glibc's, or when
the operator set any ``MALLOC_*`` tunable in the environment: theirs wins.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import platform
from collections.abc import Mapping

__all__ = [
    "MMAP_THRESHOLD", "TRIM_THRESHOLD", "YOUNG_COLLECTION_THRESHOLD", "collect_young_objects_less_often",
    "keep_large_buffers",
]

log = logging.getLogger("kcoord.broker")

#: glibc's largest allowed mmap threshold on 64-bit systems (half its heap size limit).
MMAP_THRESHOLD = 32 << 20
#: Free memory the heap keeps at its top instead of returning it: two large replies' worth.
TRIM_THRESHOLD = 64 << 20

#: Allocations (less frees) of container objects between two walks of the youngest
#: generation; Python's default is 700.
YOUNG_COLLECTION_THRESHOLD = 20_000

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def keep_large_buffers(environ: Mapping[str, str] = os.environ) -> bool:
    """Set the heap's thresholds; True if they were set, False if left as they were."""
    if platform.libc_ver()[0] != "glibc" or any(name.startswith("MALLOC_") for name in environ):
        return False
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if not (mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        log.debug("mallopt refused the heap thresholds; the C library's defaults stay")
        return False
    return True


def collect_young_objects_less_often() -> None:
    """Walk the youngest generation after 20,000 allocations instead of 700.

    A request's decoded body, its records and its reply are a few objects per partition,
    which all die when the reply is sent; reference counting frees them, and the cyclic
    collector finds nothing among them. With the default threshold a 100-partition
    OffsetCommit set off a walk of the youngest generation several times over, each one
    visiting the request's live objects: about a sixth of the broker's CPU for such a
    commit. The older generations' thresholds stay as they are.
    """
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, middle, oldest)

"""Size-prefixed framing: bytes in, whole frames out.

The size prefix is checked before a single byte of the frame is buffered, so a client
claiming a 2 GiB request costs us four bytes, not two gigabytes.
"""

from __future__ import annotations

import struct

from protocol.errors import ProtocolError

_SIZE = struct.Struct(">i")

DEFAULT_MAX_FRAME = 104857600  # socket.request.max.bytes
MIN_REQUEST_FRAME = 10  # api_key, api_version, correlation_id, client_id length


class FrameTooLarge(ProtocolError):
    """A size prefix above the configured limit."""


class FrameTooSmall(ProtocolError):
    """A size prefix too small to hold even a request header."""


class FrameDecoder:
    """Feed it bytes; it hands back complete frames (without their size prefix)."""

    __slots__ = ("_buffer", "_max_size", "_min_size", "_need")

    def __init__(self, max_size: int = DEFAULT_MAX_FRAME, min_size: int = MIN_REQUEST_FRAME) -> None:
        self._buffer = bytearray()
        self._max_size = max_size
        self._min_size = min_size
        self._need = -1  # size of the frame being collected, -1 while reading a prefix

    def set_limits(self, max_size: int, min_size: int = MIN_REQUEST_FRAME) -> None:
        """New bounds for the frames not yet started (SASL tokens before authentication are
        smaller than a request header, and bounded tighter than requests)."""
        self._max_size = max_size
        self._min_size = min_size

    @property
    def buffered(self) -> int:
        """Bytes held that do not yet form a whole frame."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add received bytes; return every frame they complete, in order."""
        if type(data) is bytes and self._need < 0 and not self._buffer:
            return self._feed_fresh(data)
        buf = self._buffer
        buf += data
        frames: list[bytes] = []
        pos = 0
        end = len(buf)
        while True:
            if self._need < 0:
                if end - pos < 4:
                    break
                size = self._checked(_SIZE.unpack_from(buf, pos)[0])
                self._need = size
                pos += 4
            if end - pos < self._need:
                break
            frames.append(bytes(buf[pos : pos + self._need]))
            pos += self._need
            self._need = -1
        if pos:
            del buf[:pos]
        return frames

    def _feed_fresh(self, data: bytes) -> list[bytes]:
        """``feed`` with nothing held from before (a read that starts at a frame, as most do):
        frames are sliced straight out of ``data``, and only an unfinished one is kept."""
        frames: list[bytes] = []
        pos = 0
        end = len(data)
        unpack = _SIZE.unpack_from
        while end - pos >= 4:
            size = self._checked(unpack(data, pos)[0])
            start = pos + 4
            pos = start + size
            if pos > end:  # the frame's rest comes with a later read
                self._need = size
                pos = start
                break
            frames.append(data[start:pos])
        if pos < end:
            self._buffer += memoryview(data)[pos:]
        return frames

    def _checked(self, size: int) -> int:
        """A size prefix, refused before any byte of its frame is kept."""
        if size > self._max_size:
            raise FrameTooLarge(f"frame of {size} bytes exceeds socket.request.max.bytes={self._max_size}")
        if size < self._min_size:
            raise FrameTooSmall(f"frame of {size} bytes is smaller than a request header")
        return size

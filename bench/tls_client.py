"""The load generator's TLS: a trio stream that decrypts every record of a socket read at once.

trio's ``SSLStream`` hands back one TLS record (at most 16 KB) per ``receive_some``, each
with a round through trio's scheduler; a client written in C (librdkafka, or the JVM's
SSLEngine loop) does not pay that, and in the security bench it made the Python client,
not the broker, the limit of the TLS rows. This stream reads the socket in large reads
and returns the plaintext of all the records a read completes, and encrypts each
``send_all`` in one call. The TLS itself is the same: ``ssl.SSLObject`` with the caller's
context, certificate and host name checked.

For the benchmarks only: one task may send while another receives, but data the session
must send on its own (a TLS 1.3 key update's answer) waits for the next ``send_all``.
"""

from __future__ import annotations

import ssl

import trio

READ_SIZE = 1 << 20


class TlsClientStream(trio.abc.Stream):
    def __init__(self, transport: trio.SocketStream, context: ssl.SSLContext, server_hostname: str) -> None:
        self.transport = transport
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_hostname=server_hostname)

    async def do_handshake(self) -> None:
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                await self._fill()
        await self._flush()

    async def _flush(self) -> None:
        data = self._outgoing.read()
        if data:
            await self.transport.send_all(data)

    async def _fill(self) -> bool:
        data = await self.transport.receive_some(READ_SIZE)
        if not data:
            self._incoming.write_eof()
            return False
        self._incoming.write(data)
        return True

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self._tls.write(data)
        await self._flush()

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """The plaintext of the records received so far, up to ``max_bytes`` (at least one
        record's worth unless the peer ended); b"" at the end."""
        limit = READ_SIZE if max_bytes is None else max_bytes
        while True:
            pieces: list[bytes] = []
            room = limit
            try:
                while room > 0:
                    piece = self._tls.read(room)
                    if not piece:  # close_notify
                        return b"".join(pieces)
                    pieces.append(piece)
                    room -= len(piece)
            except ssl.SSLWantReadError:
                pass
            if pieces:
                return b"".join(pieces)
            if not await self._fill():
                return b""

    async def aclose(self) -> None:
        await self.transport.aclose()

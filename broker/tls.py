"""One server-side TLS session as bytes in, bytes out: no socket, no trio.

``broker.server`` reads ciphertext straight off the socket and hands each read to
``decrypt``, which returns the plaintext of every whole TLS record in it at once; a batch
of replies goes through ``encrypt`` in one call and leaves in one write. So a TLS
connection costs one read and one write per batch of requests, as a plain one does,
instead of a trio round trip per record. Underneath is the stdlib's ``ssl.SSLObject``
over two ``ssl.MemoryBIO`` buffers, which is also what trio's ``SSLStream`` wraps.

The context decides what is accepted (TLS 1.2 and 1.3 only, client certificates:
``broker.listeners.server_ssl_context``); a failure is an ``ssl.SSLError``, after which
``take_output`` may hold an alert telling the peer why.
"""

from __future__ import annotations

import ssl
from typing import Any, cast

#: Room for what one TLS record can decrypt to beyond the ciphertext still queued (a
#: record OpenSSL has begun reading is held inside it, not in the incoming buffer).
RECORD_ROOM = 16384 + 2048


class TlsSession:
    """The TLS state of one accepted connection."""

    __slots__ = ("_incoming", "_outgoing", "_tls", "closed")

    def __init__(self, context: ssl.SSLContext) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        #: The peer sent close_notify: it will send nothing more.
        self.closed = False

    def handshake(self, received: bytes | bytearray) -> bool:
        """Feed what the peer sent during the handshake (``b""``: it closed); true once done.

        Either way ``take_output`` holds what must be sent next. Raises ``ssl.SSLError``
        when the handshake fails, including the peer closing before it finished.
        """
        if received:
            self._incoming.write(received)
        else:
            self._incoming.write_eof()
        try:
            self._tls.do_handshake()
        except ssl.SSLWantReadError:
            return False
        return True

    def decrypt(self, received: bytes | bytearray) -> memoryview | None:
        """The plaintext of every record ``received`` completes (empty if none: a partial
        record waits for the next read), with whatever earlier reads left undecrypted (the
        handshake's last read may hold the first request); None once the peer sent
        close_notify and nothing came before it.

        Raises ``ssl.SSLError`` on a record that does not decrypt or verify.
        """
        if self.closed:
            return None
        self._incoming.write(received)
        out = bytearray(self._incoming.pending + RECORD_ROOM)
        view = memoryview(out)
        read = self._tls.read
        size = len(out)
        pos = 0
        try:
            while True:
                if size - pos < RECORD_ROOM:  # about to run short: grow, then read on
                    view.release()
                    out.extend(bytes(RECORD_ROOM))
                    view = memoryview(out)
                    size = len(out)
                count = cast(int, read(size - pos, view[pos:]))  # with a buffer: a byte count
                if not count:  # close_notify
                    self.closed = True
                    return None if not pos else view[:pos]
                pos += count
        except ssl.SSLWantReadError:
            return view[:pos]

    def encrypt(self, payload: bytes | bytearray | memoryview) -> bytes:
        """``payload`` as TLS records, after anything the session already had to send."""
        if payload:
            self._tls.write(payload)
        return self._outgoing.read()

    def take_output(self) -> bytes:
        """What the session has to send now (handshake messages, an alert, close_notify)."""
        return self._outgoing.read()

    def close(self) -> bytes:
        """close_notify, to send before the socket closes (nothing if the session is broken)."""
        try:
            self._tls.unwrap()
        except (ssl.SSLError, ValueError):
            pass
        return self._outgoing.read()

    @property
    def version(self) -> str | None:
        """The negotiated protocol ("TLSv1.3"), once the handshake is done."""
        return self._tls.version()

    def peer_certificate(self) -> dict[str, Any] | None:
        """The client certificate, verified by the context, if the client presented one."""
        cert = self._tls.getpeercert()
        return dict(cert) if cert else None

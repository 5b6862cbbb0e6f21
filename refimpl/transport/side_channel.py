"""The TCP side channel between two ranks: a real socket (loopback for the ``sim`` transport), on
which the gate protocol writes its one-byte barriers and big-gate headers.

A barrier is one byte. A header is ds4's: magic "DS4B", layer, gate (the big-gate tag), the
big gate's number, its chunk count and the sender's granted receive depth, little-endian. A
read is framed by what the reader expects, as ds4 reads: a barrier reads one byte; a header read
looks at the first byte and, when it is not the magic's, reports the stray byte as it is.
"""

from __future__ import annotations

import contextlib
import socket
import struct

from verbspec.spec.gate.state import BIG_LAYER, BIG_MAGIC, HEADER_MAGIC
from verbspec.spec.gate.wire import TcpItem

HEADER = struct.Struct("<IIIQQI")       # magic, layer, gate, big-gate number, chunks, depth
BYTE, HEADER_KIND = "byte", "header"


def loopback_pair() -> tuple[socket.socket, socket.socket]:
    """Two ends of one TCP connection on 127.0.0.1 (both ranks in one process: tests)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        a = socket.create_connection(server.getsockname())
        b, _ = server.accept()
    return a, b


class SideChannelTimeout(TimeoutError):
    """A read found nothing within the timeout."""


class SideChannel:
    """One rank's end of the TCP side channel; every read waits at most ``timeout_s``."""

    def __init__(self, sock: socket.socket, timeout_s: float) -> None:
        self.sock = sock
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout_s = timeout_s

    def write(self, item: TcpItem) -> None:
        if item.kind == BYTE:
            data = bytes([item.value])
        else:
            data = HEADER.pack(HEADER_MAGIC, BIG_LAYER, BIG_MAGIC, item.value, item.chunks,
                               item.depth)
        self.sock.sendall(data)

    def read(self, kind: str) -> TcpItem | None:
        """The next item, framed as ``kind`` expects; None when the peer closed the socket.
        Raises SideChannelTimeout when nothing came in time."""
        first = self._exactly(1)
        if first is None:
            return None
        if kind == BYTE or first[0] != HEADER_MAGIC & 0xFF:
            return TcpItem(BYTE, first[0])
        rest = self._exactly(HEADER.size - 1)
        if rest is None:
            return None
        magic, _layer, _gate, number, chunks, depth = HEADER.unpack(first + rest)
        if magic != HEADER_MAGIC:
            return TcpItem(BYTE, first[0])
        return TcpItem(HEADER_KIND, number, chunks, depth)

    def write_bytes(self, data: bytes) -> None:
        """Raw bytes, for a protocol with framing of its own (a tagged endpoint's hello)."""
        self.sock.sendall(data)

    def read_bytes(self, n: int) -> bytes | None:
        """Exactly ``n`` raw bytes; None when the peer closed the socket first. Raises
        SideChannelTimeout when they did not come in time."""
        return self._exactly(n)

    def peer_closed(self) -> bool:
        """Whether the peer has closed its end (a peek that does not consume)."""
        try:
            self.sock.setblocking(False)
            try:
                data = self.sock.recv(1, socket.MSG_PEEK)
            finally:
                self.sock.setblocking(True)
        except BlockingIOError:
            return False
        except OSError:
            return True
        return data == b""

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()

    def _exactly(self, n: int) -> bytes | None:
        buf = b""
        self.sock.settimeout(self.timeout_s)
        try:
            while len(buf) < n:
                try:
                    chunk = self.sock.recv(n - len(buf))
                except TimeoutError:
                    raise SideChannelTimeout(
                        f"nothing read from the peer within {self.timeout_s * 1000:.0f} ms"
                    ) from None
                except (ConnectionResetError, BrokenPipeError):
                    return None
                if not chunk:
                    return None
                buf += chunk
        finally:
            self.sock.settimeout(None)
        return buf

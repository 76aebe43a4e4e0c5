"""Records on a stream socket: RecordHeader {u32 kind, u32 size, u64 tag} + payload.

Used for the handshake and for `tally-server status`; the hot path uses the
shared-memory rings instead.
"""
from __future__ import annotations

import socket

from . import RECORD_HEADER, ProtocolError

# A handshake record is small; anything larger is a confused or hostile peer.
MAX_SOCKET_RECORD = 16 << 20


def send_record(sock: socket.socket, kind: int, payload: bytes = b"", tag: int = 0) -> None:
    sock.sendall(RECORD_HEADER.pack(kind, len(payload), tag) + payload)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            raise ConnectionError(f"peer closed the connection after {got} of {n} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv_record(sock: socket.socket) -> tuple[int, int, bytes]:
    """Returns (kind, tag, payload). Raises ConnectionError on EOF and
    ProtocolError on an oversized record."""
    kind, size, tag = RECORD_HEADER.unpack(_recv_exact(sock, RECORD_HEADER.size))
    if size > MAX_SOCKET_RECORD:
        raise ProtocolError(f"record of {size} bytes exceeds the {MAX_SOCKET_RECORD}-byte socket limit")
    return kind, tag, _recv_exact(sock, size)

"""A proxy between a migrating job's source tally-server and its target that
stops at the handover, so a test can lose or delay the messages that decide
who serves the job (tests/test_e2e_migrate_handover.py).

It forwards one connection byte for byte, descriptors included, until the
source sends the byte carrying the job's socket and segment (SCM_RIGHTS); it
holds that byte, and the commit behind it, until the test says what happens:
forward them, or not. Independently the test may drop the target's answers,
or cut the source's side of the connection as a dead or unreachable target
would. When the target's side closes (the target died, or answered and hung
up), the source's side is closed too, as the target's own socket would be,
unless answers are being dropped: then the source waits for an answer that
does not come until the test cuts its side (as its timeout would end it).
"""
from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

from tally.protocol import RECORD_HEADER

CHUNK = 1 << 16


class HandoverProxy:
    def __init__(self, path: Path, upstream: Path):
        self.path = path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(1)
        self._upstream = upstream
        self._source: socket.socket | None = None
        self._target: socket.socket | None = None
        self.at_handover = threading.Event()
        self._decided = threading.Event()
        self._forward = False
        self._drop_replies = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    # ---- what the test decides --------------------------------------------------------
    def wait_handover(self, timeout: float = 120) -> None:
        assert self.at_handover.wait(timeout), "the source never handed the job's socket and segment over"

    def drop_replies(self) -> None:
        """From now on the target's answers reach nobody."""
        self._drop_replies.set()

    def forward_commit(self) -> None:
        """The held descriptors and the commit behind them go on to the target."""
        self._forward = True
        self._decided.set()

    def keep_commit(self) -> None:
        """The held descriptors are closed here and nothing more reaches the target."""
        self._decided.set()

    def cut_source(self) -> None:
        """The source's connection breaks (its next read sees the end)."""
        _close(self._source)

    # ---- forwarding -------------------------------------------------------------------
    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        self._source = conn
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        up.connect(str(self._upstream))
        self._target = up
        threading.Thread(target=self._back, daemon=True).start()
        try:
            self._forward_to_target(conn, up)
        except OSError:
            pass

    def _forward_to_target(self, conn: socket.socket, up: socket.socket) -> None:
        while True:
            data, fds, _flags, _addr = socket.recv_fds(conn, CHUNK, 4)
            if not data:
                return
            if not fds:
                up.sendall(data)
                continue
            # A read stops after the bytes that carry descriptors: they are the last byte.
            up.sendall(data[:-1])
            try:
                commit = _read_record(conn)        # the source sends it right behind them
                self.at_handover.set()
                self._decided.wait()
                if not self._forward:
                    return
                socket.send_fds(up, [data[-1:]], fds)
                up.sendall(commit)
            finally:
                for fd in fds:
                    os.close(fd)
            break
        while data := conn.recv(CHUNK):     # nothing is expected after the commit
            up.sendall(data)

    def _back(self) -> None:
        up = self._target
        try:
            while data := up.recv(CHUNK):
                if not self._drop_replies.is_set():
                    self._source.sendall(data)
        except OSError:
            pass
        # The target hung up (it died, or it answered and closed): so does the source's side,
        # unless answers are being lost, when the source waits until the test cuts it.
        if not self._drop_replies.is_set():
            _close(self._source)


def _read_record(conn: socket.socket) -> bytes:
    header = _read_exact(conn, RECORD_HEADER.size)
    _kind, size, _tag = RECORD_HEADER.unpack(header)
    return header + _read_exact(conn, size)


def _read_exact(conn: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = conn.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the source closed the connection before its commit")
        out += chunk
    return out


def _close(sock: socket.socket | None) -> None:
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass

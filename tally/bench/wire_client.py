"""A job's side of the wire protocol in Python (what client_preload does in C++):
the handshake over the server's socket, then requests on the shared-memory rings.
The tests speak to real servers with it, and `tally-bench fuzz` sends its
mutated requests through it."""
from __future__ import annotations

import os
import socket
from pathlib import Path

from tally import _core, protocol
from tally.protocol.framing import recv_record, send_record


class PyClient:
    def __init__(self, socket_path: Path, priority=protocol.Priority.BEST_EFFORT, quota: int = 0,
                 version: int = protocol.PROTOCOL_VERSION, program: str = "pytest", sm_percent: float = 0.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(str(socket_path))
        hello = protocol.codec("Hello").pack(protocol_version=version, pid=os.getpid(), priority=priority,
                                             memory_quota=quota, sm_percent=sm_percent, program=program)
        send_record(self.sock, protocol.codec("Hello").kind, hello)
        kind, _tag, payload = recv_record(self.sock)
        _expect(kind, "HelloReply")
        self.reply, _ = protocol.codec("HelloReply").unpack(payload)
        self.status = protocol.HandshakeStatus(self.reply["status"])
        self.segment = None
        self.device = None
        if self.status == protocol.HandshakeStatus.OK:
            kind, _tag, payload = recv_record(self.sock)
            _expect(kind, "DeviceInfo")
            self.device, _ = protocol.codec("DeviceInfo").unpack(payload)
            self.segment = _core.Segment.open(protocol.cstr(self.reply["segment_name"]))
        self._tag = 0

    @property
    def message(self) -> str:
        return protocol.cstr(self.reply["message"])

    def next_tag(self) -> int:
        self._tag += 1
        return self._tag

    def call(self, name: str, tail: bytes = b"", timeout: float = 10, **fields):
        """Synchronous request: returns (reply message name, fields, tail)."""
        tag = self.next_tag()
        c = protocol.codec(name)
        self.segment.request_ring.push(c.kind, tag, c.pack(tail, **fields))
        got = self.segment.completion_ring.pop(timeout)
        if got is None:
            raise TimeoutError(f"no reply to {name} within {timeout} s")
        kind, got_tag, payload = got
        if got_tag != tag:
            raise ConnectionError(f"reply to {name} has tag {got_tag}, expected {tag}")
        reply = protocol.BY_KIND[kind]
        fields, tail = reply.unpack(payload)
        return reply.message.name, fields, bytes(tail)

    def send(self, name: str, tail: bytes = b"", **fields) -> None:
        """Asynchronous request (tag 0)."""
        c = protocol.codec(name)
        self.segment.request_ring.push(c.kind, 0, c.pack(tail, **fields))

    def close(self):
        if self.segment is not None:
            self.segment.close()
        self.sock.close()


def _expect(kind: int, name: str) -> None:
    if kind != protocol.codec(name).kind:
        raise ConnectionError(f"expected {name} from the server, got record kind {kind}")

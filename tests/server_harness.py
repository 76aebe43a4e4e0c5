"""Start a real tally-server process for a test and speak its protocol from Python."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tally import _core, protocol
from tally.protocol.framing import recv_record, send_record


class ServerProcess:
    def __init__(self, socket_path: Path, backend: str = "null", extra_args: tuple[str, ...] = (),
                 command: list[str] | None = None, env: dict | None = None):
        """`command`: start this instead of tally-server (it must listen on socket_path)."""
        self.socket_path = Path(socket_path)
        self.log_path = self.socket_path.with_suffix(".log")
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            command or [sys.executable, "-m", "tally.cli.server_main", "--backend", backend,
                        "--socket", str(self.socket_path), *extra_args],
            stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 30
        while not self.socket_path.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"tally-server exited early:\n{self.log()}")
            if time.time() > deadline:
                raise RuntimeError(f"tally-server did not start:\n{self.log()}")
            time.sleep(0.02)

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()

    def stop(self, sig=signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


class PyClient:
    """A minimal client speaking the wire protocol (what client_preload does in C++)."""

    def __init__(self, socket_path: Path, priority=protocol.Priority.BEST_EFFORT, quota: int = 0,
                 version: int = protocol.PROTOCOL_VERSION, program: str = "pytest", sm_percent: float = 0.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(str(socket_path))
        hello = protocol.codec("Hello").pack(protocol_version=version, pid=os.getpid(), priority=priority,
                                             memory_quota=quota, sm_percent=sm_percent, program=program)
        send_record(self.sock, protocol.codec("Hello").kind, hello)
        kind, _tag, payload = recv_record(self.sock)
        assert kind == protocol.codec("HelloReply").kind
        self.reply, _ = protocol.codec("HelloReply").unpack(payload)
        self.status = protocol.HandshakeStatus(self.reply["status"])
        self.segment = None
        self.device = None
        if self.status == protocol.HandshakeStatus.OK:
            kind, _tag, payload = recv_record(self.sock)
            assert kind == protocol.codec("DeviceInfo").kind
            self.device, _ = protocol.codec("DeviceInfo").unpack(payload)
            self.segment = _core.Segment.open(protocol.cstr(self.reply["segment_name"]))
        self._tag = 0

    @property
    def message(self) -> str:
        return protocol.cstr(self.reply["message"])

    def call(self, name: str, tail: bytes = b"", timeout: float = 10, **fields):
        """Synchronous request: returns (reply message name, fields, tail)."""
        self._tag += 1
        c = protocol.codec(name)
        self.segment.request_ring.push(c.kind, self._tag, c.pack(tail, **fields))
        got = self.segment.completion_ring.pop(timeout)
        assert got is not None, f"no reply to {name} within {timeout} s"
        kind, tag, payload = got
        assert tag == self._tag
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

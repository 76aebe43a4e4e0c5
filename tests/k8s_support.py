"""Helpers for the Kubernetes tests: a node's folder of tally-servers (gpu<N>/server.sock)
and a device plugin running against the kubelet and API stand-ins. No tests live here."""
from __future__ import annotations

import socket
import threading
from pathlib import Path

import msgpack
from server_harness import ServerProcess

from tally import protocol
from tally.protocol.framing import recv_record, send_record


class HealthReportingServer:
    """Answers `tally-server status` on a GPU's socket with a top-level `health`
    record, the shape a tally-server with SysProbe reports (SysProbe is built on
    another branch; until it lands, this is how a test puts a GPU in the
    disabled/unhealthy states). Everything else about the status is a null-backend
    server's."""

    def __init__(self, path: Path, state: str):
        self.path = path
        self.state = state
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                try:
                    kind, tag, _ = recv_record(conn)
                except (ConnectionError, OSError):
                    continue
                if kind == protocol.codec("StatusRequest").kind:
                    status = {"server": {"memory_total": 40 << 30, "memory_free": 40 << 30, "backend": "null",
                                         "health": {"state": self.state, "reason": f"test: {self.state}"}},
                              "clients": []}
                    send_record(conn, protocol.codec("StatusReply").kind, msgpack.packb(status), tag)

    def close(self) -> None:
        self.sock.close()
        self.path.unlink(missing_ok=True)


def gpu_server(servers_dir: Path, index: int, backend: str = "null") -> ServerProcess:
    folder = servers_dir / f"gpu{index}"
    folder.mkdir(parents=True, exist_ok=True)
    return ServerProcess(folder / "server.sock", backend=backend)

"""The tally-servers of one node, one per GPU, and what state each is in.

A GPU's state comes from its server's status (`tally-server status --json`):
- no socket, or no answer within the timeout: `dead` (the device plugin marks
  every unit of that GPU Unhealthy and Allocate refuses it);
- a status whose server record has no `health` (tally-server --no-health): `healthy`;
- otherwise SysProbe's state: init | healthy | unhealthy | overlimit | disabled.

What a state means for the units the device plugin advertises is decided in one
place, `units_healthy`: a high-priority job may start on any GPU whose server
answers and is not disabled; a best-effort job only where SysProbe says healthy,
since in unhealthy/overlimit the server is evicting best-effort work and in init
it does not know yet.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from tally.cli.server_main import query_status

HEALTH_STATES = ("init", "healthy", "unhealthy", "overlimit", "disabled")
DEAD = "dead"
GPU_DIR = re.compile(r"^gpu(\d+)$")


@dataclass(frozen=True)
class GpuServer:
    """GPU `index` of this node and the socket of the tally-server that owns it."""

    index: int
    socket: Path


@dataclass
class GpuState:
    server: GpuServer
    state: str                              # a HEALTH_STATES entry or DEAD
    reason: str = ""                        # why, for logs and events
    status: dict = field(default_factory=dict)

    @property
    def memory_total(self) -> int:
        return int(self.status.get("server", {}).get("memory_total", 0))

    @property
    def memory_free(self) -> int:
        return int(self.status.get("server", {}).get("memory_free", 0))

    def clients(self, priority: str | None = None) -> list[dict]:
        return [c for c in self.status.get("clients", []) if priority is None or c.get("priority") == priority]


def units_healthy(state: str) -> tuple[bool, bool]:
    """(high-priority unit healthy, best-effort units healthy) for a GPU state."""
    if state in (DEAD, "disabled"):
        return False, False
    return True, state == "healthy"


def probe(server: GpuServer, timeout: float = 2.0) -> GpuState:
    if not server.socket.exists():
        return GpuState(server, DEAD, f"no tally-server socket at {server.socket}")
    try:
        status = query_status(server.socket, timeout=timeout)
    except (OSError, ConnectionError) as e:
        return GpuState(server, DEAD, f"the tally-server on {server.socket} does not answer ({e})")
    health = status.get("server", {}).get("health")
    if health is None:
        return GpuState(server, "healthy", "answers (no SysProbe health record)", status)
    state = health.get("state") if isinstance(health, dict) else None
    if state not in HEALTH_STATES:
        return GpuState(server, DEAD, f"the tally-server on {server.socket} reports an unknown health "
                                      f"state {state!r}", status)
    reason = str(health.get("reason", "")) if isinstance(health, dict) else ""
    return GpuState(server, state, reason or f"SysProbe: {state}", status)


def discover(servers_dir: Path) -> list[GpuServer]:
    """The GPUs under `servers_dir`: one folder gpu<N> per GPU holding server.sock
    (the layout the DaemonSet's tally-server containers create)."""
    found = []
    if servers_dir.is_dir():
        for entry in servers_dir.iterdir():
            m = GPU_DIR.match(entry.name)
            if m and entry.is_dir():
                found.append(GpuServer(int(m.group(1)), entry / "server.sock"))
    return sorted(found, key=lambda s: s.index)

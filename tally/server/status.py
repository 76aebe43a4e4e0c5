"""What `tally-server status` reports: one typed record, built here from the live
server and its sessions, and read by everything that shows it (the status
command's table, its --json output; metrics next).

On the wire (the StatusReply record) and in `status --json` the record is JSON:
{"server": {...}, "clients": [{...}, ...]}, with the keys below; tools, tests and
the cluster layer read those keys, so a field added here is a key added there.
The scheduler's counters are the executor's own dictionary, passed through.
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Protocol

from tally import protocol
from tally.protocol import Priority
from tally.protocol.errors import DeviceError
from tally.server import handover
from tally.server.c_allocator import allocator_stats
from tally.server.job import ServedJob
from tally.server.ports import ExecutorPort


@dataclass(frozen=True)
class ClientStatus:
    client_id: int
    pid: int
    program: str
    priority: Priority
    connected_s: float
    memory_used: int
    memory_peak: int
    memory_quota: int | None         # what the job asked for at handshake (None: nothing)
    allocations: int
    requests: int
    sync_requests: int
    errors: int
    protocol_errors: int
    requests_by_kind: dict[str, int]
    sm_percent: float | None = None      # its own SM share (asked, within the server's limit); None: whole device
    sm_granted: int | None = None        # SMs its launches are confined to now (dynamic SM moves it)
    # the quota in force: the job's own, the server's --be-memory-quota, or what the
    # operator set (None: no quota; the reserve for high-priority jobs still applies)
    memory_quota_bytes: int | None = None
    # "running" | "paused" | "suspended" (tally-server pause/suspend/resume) | "faulted" | "evicted"
    state: str = "running"
    suspended_bytes: int = 0         # its device memory held in host memory while suspended
    evicted: str | None = None       # why, once evicted (listed until its process exits)
    # Of `requests`, those the C++ data plane took without Python (docs/data-plane.md).
    requests_in_cpp: int = 0
    # Who serves its segment (tally/server/handover.py): "serving"; "handing over" while a
    # migration out of this server is deciding; "claimed" once migrated here, until its next request.
    segment_owner: str = "serving"
    # Where the PTX of its loaded modules came from, by module and by resolved kernel:
    # {"modules": {"image": n, "jit": n, "none": n}, "kernels": {...}, "jit_records_refused": n}
    # ("jit": a JIT compiler's, recorded by tally-run's capture; tally/jit/)
    ptx_sources: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        out = asdict(self)
        out["priority"] = protocol.priority_name(self.priority)
        return out

    @classmethod
    def from_json(cls, data: dict) -> ClientStatus:
        return cls(**{**_known(cls, data), "priority": protocol.parse_priority(data["priority"])})


@dataclass(frozen=True)
class ServerStatus:
    pid: int
    socket: str
    backend: str
    device: int
    device_name: str
    compute_capability: str          # "9.0"
    driver_version: int              # CUDA version the device reports, e.g. 13000
    policy: str
    be_transform: str
    graph_replay: str                # "units" or "nodes" (tally-server --graph-replay)
    scheduler: dict                  # the executor's counters, as it gives them
    uptime_s: float
    memory_free: int
    memory_total: int
    protocol_version: int
    dropped_connections: dict[str, int]
    clients_leaving: int             # jobs that left (no longer listed) whose release is under way
    clients: tuple[ClientStatus, ...]
    be_sm_percent: float | None = None   # tally-server --be-sm-percent
    dynamic_sm: bool = False             # --dynamic-sm
    be_util_target: float | None = None  # --be-util-target (compute control)
    sm_count: int = 0
    levers: dict = field(default_factory=dict)   # the dynamic share and the controller's hold now
    be_memory_quota_bytes: int | None = None   # a best-effort job's quota unless it asks less
    hp_memory_reserve_bytes: int = 0           # best-effort jobs never take this memory
    max_hp_jobs: int = 1                       # high-priority jobs allowed at once
    evictions: dict = field(default_factory=dict)   # jobs evicted, by cause (tally/server/eviction.py)
    health: dict | None = None                 # SysProbe's record (device_health.py); None: --no-health
    shutting_down: bool = False                # draining after SIGTERM/SIGINT: no job is admitted
    # device faults that poisoned the context (a GPU's), and the last one: at, code, error,
    # detail, caused_by (client ids), jobs_failed, state, recovery_s (tally/server/device_faults.py)
    device_faults: int = 0
    last_device_fault: dict | None = None
    # suspensions and resumes so far, and how long the last of each took (tally/server/suspend.py)
    mobility: dict = field(default_factory=dict)
    data_plane: str = "python"       # `tally-server --data-plane`
    # the C allocator's view of the server's own memory: from the system, in use, per
    # arena (tally/server/c_allocator.py); None where the C library cannot tell
    host_memory: dict | None = None

    def to_json(self) -> dict:
        server = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "clients"}
        return {"server": server, "clients": [c.to_json() for c in self.clients]}

    @classmethod
    def from_json(cls, data: dict) -> ServerStatus:
        clients = tuple(ClientStatus.from_json(c) for c in data["clients"])
        return cls(**{**_known(cls, data["server"]), "clients": clients})


def _known(cls, data: dict) -> dict:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


class StatusHost(Protocol):
    """What the status record reads of the server."""

    admitting: bool
    backend: Any
    config: Any
    counters: Any
    description: Any
    device_faults: Any
    dropped_connections: Any
    executor: ExecutorPort
    health: Any
    high_priority_jobs: Any
    levers: Any
    memory_limits: Any
    migrations: Any
    mobility: Any
    saved_memory: Any
    started_at: float


def client_status(server: StatusHost, session: ServedJob) -> ClientStatus:
    allocations, counters = session.client.allocations, session.counters
    life = session.life
    suspension = life.suspension
    try:
        _share, granted = server.executor.sm_share(session.client_id)
    except ValueError:          # leaving: the executor let it go already
        granted = None
    return ClientStatus(
        client_id=session.client_id,
        pid=session.pid,
        program=session.program,
        priority=session.priority,
        connected_s=round(time.time() - session.started_at, 3),
        memory_used=allocations.used_bytes,
        memory_peak=allocations.peak_bytes,
        memory_quota=allocations.memory.asked_bytes,
        allocations=len(allocations),
        requests=counters.requests,
        sync_requests=counters.sync_requests,
        errors=counters.errors,
        protocol_errors=counters.protocol_errors,
        requests_by_kind=dict(counters.by_kind),
        sm_percent=server.levers.share_of(session.client_id),
        sm_granted=granted,
        memory_quota_bytes=allocations.quota_bytes,
        state=life.shown,
        suspended_bytes=suspension.nbytes if suspension is not None else 0,
        evicted=life.evicted_reason,
        requests_in_cpp=session.data_plane.counts()[0],
        segment_owner=handover.describe(session.segment),
        ptx_sources=session.client.modules.ptx_sources(),
    )


def server_status(server: StatusHost, sessions: list[ServedJob], leaving: int) -> ServerStatus:
    """`sessions`: the clients still attached; `leaving`: how many more are being released."""
    d = server.description
    try:
        free, total = server.backend.mem_info()
    except DeviceError:         # a faulted context answers nothing until it is recreated
        free, total = 0, d.total_memory
    faults = server.device_faults
    return ServerStatus(
        pid=os.getpid(),
        socket=str(server.config.socket_path),
        backend=server.backend.kind,
        device=server.config.device,
        device_name=d.name,
        compute_capability="%d.%d" % d.compute_capability,
        driver_version=d.driver_version,
        policy=server.config.policy,
        be_transform=server.config.be_transform,
        graph_replay=server.config.graph_replay,
        scheduler=server.executor.counters(),
        uptime_s=round(time.time() - server.started_at, 3),
        memory_free=free,
        memory_total=total,
        protocol_version=protocol.PROTOCOL_VERSION,
        dropped_connections=server.dropped_connections.snapshot(),
        clients_leaving=leaving,
        clients=tuple(client_status(server, s) for s in sessions),
        be_sm_percent=server.config.be_sm_percent,
        dynamic_sm=server.config.dynamic_sm,
        be_util_target=server.config.be_util_target,
        sm_count=d.sm_count,
        levers=server.levers.describe(),
        be_memory_quota_bytes=server.memory_limits.policy.be_quota_bytes,
        hp_memory_reserve_bytes=server.memory_limits.policy.hp_reserve_bytes,
        max_hp_jobs=server.high_priority_jobs.max_jobs,
        evictions=dict(server.counters.evictions),
        health=server.health.describe() if server.health is not None else None,
        shutting_down=not server.admitting,
        device_faults=server.counters.device_faults,
        last_device_fault=faults.last.to_json() if faults is not None and faults.last is not None else None,
        mobility={**server.mobility.to_json(), **server.migrations.to_json(), **server.saved_memory.to_json()},
        data_plane=server.config.data_plane,
        host_memory=allocator_stats(),
    )

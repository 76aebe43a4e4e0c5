"""What a tally-server is told at start: one record of every setting
(`tally-server`'s flags, tally/cli/server_flags.py, fill it in) and the sizes of
each job's shared segment."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tally.backends.base import BackendTraits
from tally.cluster.health_config import HealthConfig
from tally.server.data_plane import default_data_plane
from tally.server.saved_memory import SavedMemoryPolicy


@dataclass
class SegmentSizes:
    """Bytes of one client's shared segment. The whole segment is committed when it
    is created (a full /dev/shm fails the handshake with a message instead of a
    crash later), so the arenas are sized for ~34 MiB per client: copies move in
    chunks of a quarter arena, which keeps them at memcpy speed."""
    request: int = 1 << 20
    completion: int = 1 << 18
    upload: int = 16 << 20
    download: int = 16 << 20


@dataclass
class ServerConfig:
    socket_path: Path
    device: int = 0
    segment_sizes: SegmentSizes = field(default_factory=SegmentSizes)
    policy: str = "priority"
    be_transform: str = "auto"
    graph_replay: str = "units"          # "nodes": every graph replay runs kernel by kernel
    turnaround_threshold_ms: float = 0.0316
    # How long a session thread spins on its request ring before sleeping on the
    # futex; a request after a longer gap pays a wake-up (10-40 us on the VM). None:
    # what the backend's traits say (session_spin_us). hp_spin_us: the same for
    # high-priority jobs' sessions (None: spin_us); inf keeps them polling while
    # their job runs on another CPU (docs/data-plane.md, "Waiting").
    spin_us: float | None = None
    hp_spin_us: float | None = None
    # How long a new connection may take to send its first record.
    handshake_timeout_s: float = 5.0
    # SM shares and compute control (share14; tally/server/levers.py)
    be_sm_percent: float | None = None   # a best-effort job's share by default, and its most
    dynamic_sm: bool = False             # best-effort jobs get 100% minus the high-priority activity
    be_sm_floor: float = 10.0            # ... never less than this, together
    be_util_target: float | None = None  # compute control: hold best-effort work over this U_GPU
    sample_period_ms: float = 50.0       # device samples for dynamic SM / compute control
    # Memory protection and high-priority jobs (tally/cluster/memory_limits.py,
    # high_priority_jobs.py): sizes in bytes (int) or percent of device memory (float).
    be_memory_quota: int | float | None = None
    hp_memory_reserve: int | float | None = None
    max_hp_jobs: int = 1
    # SysProbe (tally/server/device_health.py): on unless health is False; its config
    # (None: the defaults) and the file it came from (reloaded on SIGHUP).
    health: bool = True
    health_config: HealthConfig | None = None
    health_config_path: Path | None = None
    # Device samples from a recorded trace instead of the device (demos, tests);
    # replayed at the trace's own pace unless metrics_trace_realtime is False (then
    # one trace sample per sampler tick).
    metrics_trace: Path | None = None
    metrics_trace_realtime: bool = True
    # SIGTERM/SIGINT: how long the work on the device may take to finish (tally/server/drain.py)
    drain_timeout_s: float = 10.0
    # Time-slicing best-effort jobs whose memory does not fit together (tally/server/oversubscribe.py).
    oversubscribe: bool = False
    slice_seconds: float = 5.0
    # Where suspended jobs' device bytes wait (tally/server/saved_memory.py): the host memory
    # they may take, the directory beyond it, the buffers kept for the next suspension.
    saved_memory: SavedMemoryPolicy = field(default_factory=SavedMemoryPolicy)
    # Who takes requests off the jobs' rings (tally/server/data_plane.py): "cpp" or "python".
    data_plane: str = field(default_factory=default_data_plane)

    def session_spin_us(self, traits: BackendTraits, high_priority: bool = False) -> float:
        if high_priority and self.hp_spin_us is not None:
            return self.hp_spin_us
        if self.spin_us is not None:
            return self.spin_us
        return traits.session_spin_us

"""Server-wide event counters that no other record keeps (evictions by reason,
device faults, preemptions, kernels by how they ran). They live on the server
object as `server.counters`: whoever sees the event increments its counter, and
/metrics and `tally-server status` read them."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ServerCounters:
    evictions: dict[str, int] = field(default_factory=dict)      # by reason
    device_faults: int = 0
    preemptions: int = 0
    kernels: dict[str, int] = field(default_factory=lambda: {"whole": 0, "sliced": 0, "ptb": 0})

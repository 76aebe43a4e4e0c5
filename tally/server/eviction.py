"""Evicting jobs: `tally-server evict`, SysProbe's evictions, and the server's
shutdown all end a job's use of the device the same way.

What the job sees (Session.evict): an Evicted record naming the reason, then its
next driver call fails with CUDA_ERROR_DEVICE_UNAVAILABLE (cudart's
cudaErrorDevicesUnavailable) without reaching the server; its client library prints
the reason on the job's stderr and leaves it where tally-run looks, and tally-run
exits 75 (EX_TEMPFAIL: an orchestrator runs the job again elsewhere or later).
What the server does: its queued work is dropped, its running work finished or
preempted, its memory and driver objects freed, at once (on the session thread,
within a fraction of a second). The job stays listed in `status` (state
"evicted", with the reason) until its process exits.

Every eviction is counted in server.counters.evictions by cause: a few fixed
words (OPERATOR, OVERLIMIT, DEVICE_DISABLED, SHUTDOWN), so /metrics gets a label
of bounded cardinality; the free text goes to the job and the log.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

from tally import protocol
from tally.server.job import ServedJob

log = logging.getLogger("tally.server")

OPERATOR = "operator"              # tally-server evict
OVERLIMIT = "overlimit"            # SysProbe: the device stayed over a limit
DEVICE_DISABLED = "device_disabled"   # SysProbe: a fatal XID disabled the device
SHUTDOWN = "shutdown"              # the server was told to stop (SIGTERM/SIGINT)

# How long the caller waits for the session thread to free what the job held.
RELEASE_WAIT_S = 10.0

_count_lock = threading.Lock()


class EvictionHost(Protocol):
    counters: Any                      # ServerCounters: evictions by cause


def evict(server: EvictionHost, session: ServedJob, reason: str, cause: str, wait: bool = True) -> bool:
    """Evict one job; False when it was evicted already or is leaving anyway.
    With `wait`, returns once its work and memory are released (or RELEASE_WAIT_S
    passed: then the log says so and the release finishes on its own)."""
    held = session.client.allocations.used_bytes
    if not session.evict(reason):
        return False
    with _count_lock:
        evictions = server.counters.evictions
        evictions[cause] = evictions.get(cause, 0) + 1
    log.warning("client %d (pid %d, %s, %s) evicted [%s]: %s (%s)", session.client_id, session.pid,
                session.program, protocol.priority_name(session.priority), cause, reason,
                "its queued or running work dropped" if session.work_dropped_at_eviction else "it had no work left")
    if wait and not session.wait_released(RELEASE_WAIT_S):
        log.warning("client %d: its work and %d bytes of memory are still being released after %g s",
                    session.client_id, held, RELEASE_WAIT_S)
    return True

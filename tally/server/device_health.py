"""SysProbe in the server: the health state machine (tally.cluster.sysprobe) fed the
device's samples, answering handshakes, and its evictions carried out.

- Every sample (OnDeviceSample) goes to SysProbe; the actions it returns are
  carried out at once, on the sampler's thread: EvictBestEffort evicts that many
  best-effort jobs (all of them on a fatal XID) in its order, largest device
  memory first when memory is over its limit, newest first for heat or power
  (tally/cluster/health.py says why); the log names each job and the reason.
  RefuseBestEffort is logged: the refusing itself is SysProbe's admit.
- Handshakes (AdmitClient): high-priority jobs always; best-effort jobs only while
  the device is healthy (QUOTA_UNAVAILABLE with SysProbe's reason otherwise).
- `--health-config FILE` (TOML, tally.cluster.health_config), reloaded on SIGHUP
  (`reload`): a file that does not load leaves the config in force, and says why.
  Without a file: the documented defaults, except that on a device NVML does not
  measure (the emulator, sim and null backends, whose busy time is the host's CPU
  or a model) the utilization warning is out of reach, so a busy emulator never
  stops best-effort admissions; a file can set it.
- `describe()` is the status record's `health`: state, since_s, reason, the last
  transitions (at, from, to, cause), evictions, backoff_until_s. Times are unix
  times, mapped from the metrics source's clock by the latest sample; each
  transition also keeps `t`, its time in the source's clock (a trace's own).
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from tally import protocol
from tally.cluster.device_metrics import DeviceSample
from tally.cluster.health import EvictBestEffort, EvictionOrder, RefuseBestEffort, State
from tally.cluster.health_config import HealthConfig, HealthConfigError, load_health_config
from tally.cluster.sysprobe import SysProbe
from tally.scheduler.hooks import AdmissionRequest, Status
from tally.server import eviction
from tally.server.eviction import EvictionHost
from tally.server.job import SessionDirectory
from tally.server.lifecycle import JobState
from tally.units import format_bytes

log = logging.getLogger("tally.server")

TRANSITIONS_SHOWN = 10
ORDER_WHY = {
    EvictionOrder.LARGEST_MEMORY_FIRST: "largest device memory first: memory is over its limit, and the largest "
                                        "job frees the most with the fewest evictions",
    EvictionOrder.NEWEST_FIRST: "newest first: heat and power follow all the running work, and the newest job "
                                "loses the least work when it runs again elsewhere",
}


def default_health_config(nvml_metrics: bool) -> HealthConfig:
    """SysProbe's config without --health-config (see the module docstring)."""
    config = HealthConfig()
    if nvml_metrics:
        return config
    return replace(config, thresholds=replace(config.thresholds, gpu_util_percent=100.0),
                   source="defaults (the utilization warning is off: tally's own accounting measures this device)")


class HealthHost(EvictionHost, SessionDirectory, Protocol):
    levers: Any                        # SmLevers: the sample period follows the config's
    started_at: float


class DeviceHealth:
    def __init__(self, server: HealthHost, config: HealthConfig, config_path: Path | None = None):
        self.server = server
        self.probe = SysProbe(config)
        self.config_path = config_path
        self.evictions = 0                       # jobs SysProbe evicted
        self._wall_offset = time.time() - time.monotonic()   # unix time - source time, by the latest sample
        self._lock = threading.Lock()            # evictions: one sample's actions at a time

    # -- extension points (tally.scheduler.hooks) --

    def admit(self, request: AdmissionRequest) -> Status:
        return self.probe.admit(request)

    def on_sample(self, sample: DeviceSample) -> None:
        self._wall_offset = time.time() - sample.t
        with self._lock:
            self.probe.on_sample(sample)
            for action in self.probe.drain_actions():
                if isinstance(action, EvictBestEffort):
                    self._evict(action)
                elif isinstance(action, RefuseBestEffort):
                    log.warning("SysProbe: best-effort jobs are refused for %g s, until t=%g (%s)",
                                action.backoff_s, action.until, action.reason)

    # -- the server's side --

    def reload(self) -> bool:
        """SIGHUP: read --health-config again; False (and the reason logged) when it
        cannot be used, the config in force kept."""
        if self.config_path is None:
            log.info("SIGHUP: no --health-config file to reload; SysProbe keeps %s", self.probe.config.source)
            return False
        try:
            config = load_health_config(self.config_path)
        except HealthConfigError as e:
            log.error("SIGHUP: %s; SysProbe keeps the config it had (%s)", e, self.probe.config.source)
            return False
        self.probe.reload(config)
        self.server.levers.health_period_changed(config.timing.sample_interval_s)
        return True

    def describe(self) -> dict:
        h = self.probe.health
        transitions = self.probe.transitions()[-TRANSITIONS_SHOWN:]
        backoff = h.refuse_until if h.state is State.OVERLIMIT else None
        return {
            "state": h.state.value,
            "since_s": self._wall(h.entered_t) if h.entered_t is not None else self.server.started_at,
            "reason": h.reason,
            "transitions": [{"at": self._wall(tr.t), "t": tr.t, "from": tr.from_state.value,
                             "to": tr.to_state.value, "cause": tr.cause.text, "kind": tr.cause.kind}
                            for tr in transitions],
            "evictions": self.evictions,
            "backoff_until_s": None if backoff is None else self._wall(backoff),
            "config": self.probe.config.source,
        }

    def _wall(self, t: float) -> float:
        return round(t + self._wall_offset, 3)

    def _evict(self, action: EvictBestEffort) -> None:
        cause = eviction.DEVICE_DISABLED if self.probe.state is State.DISABLED else eviction.OVERLIMIT
        victims = self._victims(action)
        if not victims:
            log.info("SysProbe would evict a best-effort job (%s), but none is attached", action.reason)
            return
        for session in victims:
            log.warning("SysProbe evicts client %d (pid %d, %s, %s of device memory, attached %.0f s ago): %s",
                        session.client_id, session.pid, session.program,
                        format_bytes(session.client.allocations.used_bytes), time.time() - session.started_at,
                        ORDER_WHY[action.order] if action.count is not None else "every best-effort job")
            # The sampler must not wait for the release: the session thread does it at once.
            if eviction.evict(self.server, session, action.reason, cause, wait=False):
                self.evictions += 1

    def _victims(self, action: EvictBestEffort) -> list:
        jobs = [s for s in self.server.attached_sessions()
                if s.priority == protocol.Priority.BEST_EFFORT and s.life.state is not JobState.EVICTED]
        if action.order is EvictionOrder.LARGEST_MEMORY_FIRST:
            jobs.sort(key=lambda s: (s.client.allocations.used_bytes, s.client_id), reverse=True)
        else:
            jobs.sort(key=lambda s: (s.started_at, s.client_id), reverse=True)
        return jobs if action.count is None else jobs[:action.count]

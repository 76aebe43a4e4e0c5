"""Where the cluster layer plugs into the server: four small extension points.

In the shape of the Kubernetes scheduler framework: each extension point is a
Protocol with one method, a plugin implements the ones it needs, and the
server's wiring registers plugins explicitly from its flags (no discovery by
reflection). Every hook answers with a `Status` or nothing:

- AdmitClient.admit(request) -> Status: at handshake, before anything is made
  for the job. ALLOW, or DENY with a reason the job prints. First DENY wins.
- GateBestEffort.gate(unit, now) -> Status: before the executor starts a
  best-effort unit (a whole kernel, a slice, a PTB launch). ALLOW, or WAIT with
  `retry_after_s` (the executor asks again then, or at its next decision).
  Never called for high-priority work: no plugin can delay the online job.
  Called under the executor's lock, on its hot path: it must be cheap and
  must not block or call back into the executor.
- OnDeviceSample.on_sample(sample) -> None: every metrics period, with the
  device's latest DeviceSample. May change the plugin's own state (a share,
  a delay, a health state); never blocks.
- ObserveStatus.observe(status) -> None: after each status snapshot is built
  (for exporters); read-only.

Returning EVICT from admit or gate is not allowed; eviction is an action the
health plugin takes through the server, not an answer to a question.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Hashable, Protocol, runtime_checkable

from tally.cluster.device_metrics import DeviceSample


class Code(enum.Enum):
    ALLOW = "allow"
    WAIT = "wait"
    DENY = "deny"
    EVICT = "evict"


@dataclass(frozen=True)
class Status:
    code: Code = Code.ALLOW
    reason: str = ""
    retry_after_s: float | None = None     # WAIT only: when to ask again

    @property
    def allowed(self) -> bool:
        return self.code is Code.ALLOW


ALLOW = Status()


def wait(retry_after_s: float, reason: str) -> Status:
    return Status(Code.WAIT, reason, retry_after_s)


def deny(reason: str) -> Status:
    return Status(Code.DENY, reason)


@dataclass(frozen=True)
class AdmissionRequest:
    """What a job asks for at handshake (validated already)."""

    pid: int
    program: str
    high_priority: bool
    memory_quota_bytes: int | None
    sm_percent: float | None


@dataclass(frozen=True)
class BestEffortUnit:
    """A best-effort unit the executor is about to start."""

    client_id: Hashable
    kernel_id: int
    blocks: int


@runtime_checkable
class AdmitClient(Protocol):
    def admit(self, request: AdmissionRequest) -> Status: ...


@runtime_checkable
class GateBestEffort(Protocol):
    def gate(self, unit: BestEffortUnit, now: float) -> Status: ...


@runtime_checkable
class OnDeviceSample(Protocol):
    def on_sample(self, sample: DeviceSample) -> None: ...


@runtime_checkable
class ObserveStatus(Protocol):
    def observe(self, status) -> None: ...


@dataclass
class Hooks:
    """The plugins the server's wiring registered, by extension point, in order."""

    admit: list[AdmitClient] = field(default_factory=list)
    gate: list[GateBestEffort] = field(default_factory=list)
    on_sample: list[OnDeviceSample] = field(default_factory=list)
    observe: list[ObserveStatus] = field(default_factory=list)

    def register(self, plugin) -> None:
        """Add a plugin to every extension point it implements (at least one)."""
        points = [(AdmitClient, self.admit), (GateBestEffort, self.gate),
                  (OnDeviceSample, self.on_sample), (ObserveStatus, self.observe)]
        matched = [plugins for protocol, plugins in points if isinstance(plugin, protocol)]
        if not matched:
            raise TypeError(f"{type(plugin).__name__} implements no extension point of tally.scheduler.hooks")
        for plugins in matched:
            plugins.append(plugin)

    def admit_client(self, request: AdmissionRequest) -> Status:
        for plugin in self.admit:
            status = plugin.admit(request)
            if status.code is Code.EVICT:
                raise ValueError(f"{type(plugin).__name__}.admit returned EVICT, which admit may not return")
            if not status.allowed:
                return status
        return ALLOW

    def gate_best_effort(self, unit: BestEffortUnit, now: float) -> Status:
        """ALLOW, or the WAIT asking again soonest (every plugin must allow)."""
        soonest: Status | None = None
        for plugin in self.gate:
            status = plugin.gate(unit, now)
            if status.allowed:
                continue
            if status.code is not Code.WAIT or status.retry_after_s is None:
                raise ValueError(f"{type(plugin).__name__}.gate returned {status.code.name} without a retry "
                                 f"time; gates answer ALLOW or WAIT")
            if soonest is None or status.retry_after_s < soonest.retry_after_s:
                soonest = status
        return soonest or ALLOW

    def device_sample(self, sample: DeviceSample) -> None:
        for plugin in self.on_sample:
            plugin.on_sample(sample)

    def observe_status(self, status) -> None:
        for plugin in self.observe:
            plugin.observe(status)

"""Memory protection: how much device memory each job may hold.

Every allocation a job makes is checked against three limits, in this order,
and refused with CUDA_ERROR_OUT_OF_MEMORY and a sentence naming the one that
refused (the job's stderr and the server's log show it):

1. The job's quota: its own `tally-run --memory-quota`, or, for a best-effort
   job that asks none, the server's `--be-memory-quota`. A best-effort job may
   ask for less than the server's quota, never more: that is refused at
   handshake (MemoryLimits.admit), since a job that silently got less than it
   asked for would fail later in a way that looks like a full device. The
   operator may change a running job's quota (`tally-server set`), never below
   what the job holds: tally cannot take memory back from a running job.
2. The memory reserved for high-priority jobs (`--hp-memory-reserve`):
   best-effort jobs together never hold more than the memory that was free when
   the server started minus the reserve. The reserve holds whether or not a
   high-priority job is attached, so one that attaches after the best-effort
   jobs filled the device still finds its memory.
3. The device itself (a refusal the backend reports).

What counts: device allocations (cuMemAlloc, its pitch form, and the
stream-ordered pool's cuMemAllocAsync, which tally serves from device memory
too), managed memory, and the physical memory of cuMemCreate; an allocation another job
opened through IPC counts for its owner only. The checks are integer
comparisons under one lock: an allocation never waits for the device here.
cuMemGetInfo answers each job with its own view (JobMemory.view).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from tally.protocol.errors import CUDA_ERROR_OUT_OF_MEMORY, DeviceError
from tally.scheduler.hooks import ALLOW, AdmissionRequest, Status, deny
from tally.units import format_bytes


def to_bytes(amount: int | float | None, device_bytes: int) -> int | None:
    """Bytes for a flag's value: bytes as they are, a percentage (a float, as
    tally.units.parse_size returns it) of the device's memory."""
    if amount is None or isinstance(amount, int):
        return amount
    return max(1, int(device_bytes * amount / 100.0))


@dataclass(frozen=True)
class MemoryPolicy:
    """The server's memory flags, in bytes."""

    device_bytes: int                # the device's total memory
    usable_bytes: int                # what was free when the server started
    be_quota_bytes: int | None = None
    hp_reserve_bytes: int = 0

    @classmethod
    def from_flags(cls, device_bytes: int, usable_bytes: int, be_quota: int | float | None,
                   hp_reserve: int | float | None) -> MemoryPolicy:
        """Raises ValueError saying which flag asks for more than the device has."""
        quota, reserve = to_bytes(be_quota, device_bytes), to_bytes(hp_reserve, device_bytes) or 0
        for flag, value in (("--be-memory-quota", quota), ("--hp-memory-reserve", reserve)):
            if value is not None and value > device_bytes:
                raise ValueError(f"{flag} {format_bytes(value)} is more than the device has "
                                 f"({format_bytes(device_bytes)}); give a smaller size or a percentage")
        return cls(device_bytes, min(usable_bytes, device_bytes), quota, reserve)

    @property
    def best_effort_pool(self) -> int:
        """The most best-effort jobs may hold together."""
        return max(self.usable_bytes - self.hp_reserve_bytes, 0)


def quota_above_server(asked: int, be_quota: int) -> str:
    """Why a best-effort job asking for `asked` is refused (the server's answer and tally-run's)."""
    return (f"memory quota {format_bytes(asked)} is more than this server gives best-effort jobs "
            f"({format_bytes(be_quota)}, tally-server --be-memory-quota); ask for at most that, or for no quota")


def refusal(nbytes: int, why: str) -> DeviceError:
    return DeviceError(CUDA_ERROR_OUT_OF_MEMORY, f"allocation of {format_bytes(nbytes)} ({nbytes} bytes) refused: {why}")


class QuotaBelowUse(ValueError):
    """A new quota below what the job holds already."""


class MemoryLimits:
    """The server-wide side: the policy, what best-effort jobs hold together, and
    the handshake check (an AdmitClient plugin of tally.scheduler.hooks)."""

    def __init__(self, policy: MemoryPolicy):
        self.policy = policy
        self.lock = threading.Lock()     # every account's counts change under it
        self.best_effort_used = 0

    def admit(self, request: AdmissionRequest) -> Status:
        be_quota, asked = self.policy.be_quota_bytes, request.memory_quota_bytes
        if not request.high_priority and be_quota is not None and asked is not None and asked > be_quota:
            return deny(quota_above_server(asked, be_quota))
        return ALLOW

    def account(self, high_priority: bool, asked: int | None) -> JobMemory:
        """A new job's account: its quota is what it asked, else (best-effort) the server's default."""
        quota = asked if high_priority or asked is not None else self.policy.be_quota_bytes
        return JobMemory(self, best_effort=not high_priority, quota_bytes=quota, asked_bytes=asked)


class JobMemory:
    """One job's memory: its quota and what it holds, and for a best-effort job its
    share of the best-effort pool. Without `limits` (tests of the ownership table
    alone) only the quota applies."""

    def __init__(self, limits: MemoryLimits | None = None, best_effort: bool = False,
                 quota_bytes: int | None = None, asked_bytes: int | None = None):
        self._limits = limits
        self._lock = limits.lock if limits is not None else threading.Lock()
        self._pooled = best_effort and limits is not None
        self.quota_bytes = quota_bytes       # None: no quota of its own
        self.asked_bytes = asked_bytes       # what the job asked at handshake
        self.used_bytes = 0
        self.peak_bytes = 0

    def take(self, nbytes: int) -> None:
        """Count an allocation about to be made; raises OUT_OF_MEMORY naming the limit."""
        with self._lock:
            quota, used = self.quota_bytes, self.used_bytes
            if quota is not None and used + nbytes > quota:
                raise refusal(nbytes, f"this job's memory quota is {format_bytes(quota)}, "
                                      f"{format_bytes(used)} in use")
            if self._pooled:
                limits = self._limits
                pool, held = limits.policy.best_effort_pool, limits.best_effort_used
                if held + nbytes > pool:
                    raise refusal(nbytes, f"the memory reserved for high-priority jobs "
                                          f"({format_bytes(limits.policy.hp_reserve_bytes)}) leaves best-effort "
                                          f"jobs {format_bytes(pool - held)} (they hold {format_bytes(held)} of "
                                          f"{format_bytes(pool)})")
            self._count(nbytes)

    def take_back(self, nbytes: int) -> None:
        """Count memory without checks: what the job held a moment ago (a failed free)."""
        with self._lock:
            self._count(nbytes)

    def give(self, nbytes: int) -> None:
        with self._lock:
            self._count(-nbytes)

    def _count(self, delta: int) -> None:
        self.used_bytes += delta
        self.peak_bytes = max(self.peak_bytes, self.used_bytes)
        if self._pooled:
            self._limits.best_effort_used += delta

    def set_quota(self, quota_bytes: int) -> int | None:
        """The operator's new quota (future allocations); the old one. QuotaBelowUse
        when the job holds more already."""
        with self._lock:
            if quota_bytes < self.used_bytes:
                raise QuotaBelowUse(f"the job holds {format_bytes(self.used_bytes)} already, more than "
                                    f"{format_bytes(quota_bytes)}; give at least that (tally cannot take memory "
                                    f"back from a running job)")
            old, self.quota_bytes = self.quota_bytes, quota_bytes
            return old

    def view(self, device_free: int, device_total: int) -> tuple[int, int]:
        """(free, total) as cuMemGetInfo shows them to this job: the device's,
        narrowed by its quota and, for a best-effort job, by the reserve."""
        free, total = device_free, device_total
        with self._lock:
            if self.quota_bytes is not None:
                total = min(total, self.quota_bytes)
                free = min(free, self.quota_bytes - self.used_bytes)
            if self._pooled:
                pool = self._limits.policy.best_effort_pool
                total = min(total, pool)
                free = min(free, pool - self._limits.best_effort_used)
        return max(free, 0), total

"""The interface between the executor and a scheduling policy.

The executor owns queues, streams and the device; a policy only decides. After
every change (a kernel reaches the head of its stream's queue, a kernel or
slice finishes, a wake-up time passes) the executor shows the policy a
snapshot (SchedulerView) and applies the Schedule it returns. Five hooks:

- stream_priority(client) -> int: the backend stream priority (CUDA
  convention: lower is served first by the hardware) for every stream of that
  client. Called once per stream, when the stream is first used.
- starts_at_once(client) -> bool: True when every kernel of this client is
  started whole the moment it reaches the head of its queue, and starting it
  never changes another decision except preempting running preemptible units.
  While no unit is preemptible, the executor then starts such kernels without
  calling schedule() (the hot path of every high-priority launch).
- releases_at_once(client, view) -> bool: for a client whose kernels the
  policy does not start at once: True when it would start that client's next
  kernel, planned to run whole, right now and so on until high-priority work
  arrives or another client's kernel waits. The C++ data plane may then release
  such kernels itself (tally/scheduler/fast_lane.py: "best-effort release").
- schedule(view) -> Schedule: called whenever at least one kernel is waiting:
  which waiting kernels start now (whole, or
  `transform=True`: as slices / a PTB kernel, the executor and profiler decide
  which), which running units to preempt, and when to be asked again if nothing
  else happens (`wake_at`, absolute clock seconds). Contract: start only kernels
  listed in view.waiting, each at most once; preempt only units listed as
  preemptible; deterministic for a given view and policy state; never block,
  never call the executor. Kernels not started stay queued, and so does
  everything behind them on their stream.
- on_unit_finished(unit, now): a kernel, slice or PTB launch the policy
  started has completed on the device (for fairness accounting).

Policies are plain classes registered by name in tally.scheduler.policies.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Protocol

from tally.scheduler.run_mode import RunMode

HIGH = "high"
BEST_EFFORT = "best-effort"
PRIORITIES = (HIGH, BEST_EFFORT)
# CUDA stream priorities: lower numbers are served first; every GPU since
# Kepler supports at least [-1, 0] (cuCtxGetStreamPriorityRange).
HIGH_STREAM_PRIORITY = -1
NORMAL_STREAM_PRIORITY = 0


class PolicyError(RuntimeError):
    """A policy returned a decision that breaks its contract (a bug in the policy)."""


@dataclass(frozen=True)
class ClientView:
    client_id: Hashable
    priority: str                 # HIGH or BEST_EFFORT
    sm_percent: float | None


@dataclass(frozen=True)
class WaitingKernel:
    """A kernel at the head of its stream's queue, not running now."""

    kernel_id: int
    client_id: Hashable
    stream_key: Hashable
    priority: str
    name: str
    waiting_since: float          # when it reached the head of its queue
    partially_done: bool          # a transformed kernel that already ran some blocks
    stream_busy: bool             # earlier kernels of this stream are still running
    # a best-effort kernel that will run whole: its expected device time, once known
    # (tally/scheduler/whole_durations.py); None otherwise
    predicted_s: float | None = None


@dataclass(frozen=True)
class RunningUnit:
    """Something the policy started that has not completed: a whole kernel, one
    slice, or one PTB launch."""

    unit_id: int
    kernel_id: int
    client_id: Hashable
    stream_key: Hashable
    priority: str
    mode: RunMode
    preemptible: bool             # a PTB launch not yet asked to stop
    started_at: float
    predicted_s: float | None = None    # a whole best-effort kernel's expected device time, once known


@dataclass(frozen=True)
class SchedulerView:
    now: float
    clients: tuple[ClientView, ...]       # in the order they were added
    waiting: tuple[WaitingKernel, ...]
    running: tuple[RunningUnit, ...]
    # how much expected device time of best-effort work may be on the device at once:
    # the profiler's turnaround threshold, the most a high-priority kernel should wait
    batch_budget_s: float = 0.0


@dataclass(frozen=True)
class LaneRule:
    """What the C++ data plane may do with one job's kernels on a lane the executor
    granted, as the policy declares it (the plane applies it; it derives nothing).

    closes_best_effort_gate: each of the job's kernels closes the server's
        best-effort gate before it is issued (work that must not wait behind
        best-effort kernels); the executor opens it again.
    through_gate: the job's kernels go only while that gate is open, and only
        shapes the planner runs whole (a transformed kernel needs Python).
    one_unit_at_a_time: a kernel through the gate goes only when none of the job's
        earlier ones still runs (the policy's one best-effort unit at a time)...
    max_batch: ...or, above 1, while at most this many of the job's whole kernels
        of known device times run together, expected to take at most the batch
        budget (SchedulerView.batch_budget_s) in all: the policy's best-effort
        batches, which the plane then makes without Python."""
    closes_best_effort_gate: bool
    through_gate: bool
    one_unit_at_a_time: bool
    max_batch: int = 1


def gated_lane_rule(client: ClientView, starts_at_once: bool, max_batch: int = 1) -> LaneRule:
    """The rule of the policies in policies/: a high-priority job closes the gate; a
    job whose kernels the policy does not start at once goes through it, one
    kernel at a time or in batches of up to `max_batch`."""
    return LaneRule(closes_best_effort_gate=client.priority == HIGH, through_gate=not starts_at_once,
                    one_unit_at_a_time=not starts_at_once, max_batch=1 if starts_at_once else max_batch)


@dataclass(frozen=True)
class Start:
    kernel_id: int
    transform: bool = False


@dataclass
class Schedule:
    start: list[Start] = field(default_factory=list)
    preempt: list[int] = field(default_factory=list)   # unit ids
    wake_at: float | None = None


class SchedulingPolicy(Protocol):
    name: str

    def stream_priority(self, client: ClientView) -> int: ...

    def starts_at_once(self, client: ClientView) -> bool: ...

    def releases_at_once(self, client: ClientView, view: SchedulerView) -> bool: ...

    def lane_rule(self, client: ClientView) -> LaneRule: ...

    def schedule(self, view: SchedulerView) -> Schedule: ...

    def on_unit_finished(self, unit: RunningUnit, now: float) -> None: ...

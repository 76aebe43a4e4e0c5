"""The `sim` backend's SMs: which thread blocks run where and when.

Model
- The device has sm_count * SM_UNITS capacity units. A block of a kernel that
  fits R blocks per SM takes SM_UNITS // R units (exact for every R <= 32), so
  kernels of different occupancy share SMs. Per-SM fragmentation is ignored.
- A kernel run's resident blocks advance in synchronized waves of `task_ns`
  (one block's time): at each wave boundary the finished blocks' slots are
  handed out again, highest rank first. Rank = (stream priority, arrival order):
  higher-priority streams first, then launch order, the "left-over" policy of
  the hardware block scheduler (Pai et al., ASPLOS'13): a later kernel only gets
  what earlier ones leave over. Running blocks are never preempted.
- PTB kernels: `max_slots` workers loop over `total` tasks; before each task a
  worker reads the preempt flag from device memory and exits when it is set, so
  preemption latency is the remainder of the tasks in flight.
- Slots freed in the middle of a wave (by a kernel ending) are taken by waiting
  runs at once; a run that gains slots while it is running uses them from its
  own next boundary (waves stay synchronized; costs at most one block time).

Efficiency: a run gets an event only where something can change (its end, the
start of its last partial wave, and its next boundary while a higher-ranked run
waits for slots, new slots join it, or its preempt flag is set), so a long
kernel alone costs a handful of events, not one per wave. `eager=True` puts an
event on every boundary; the results must be identical (a test checks this).
"""
from __future__ import annotations

import math
from functools import reduce
from typing import Callable

from tally.backends.sim.loop import SimLoop, Timer

SM_UNITS = reduce(math.lcm, range(1, 33))


class KernelRun:
    """One launch on the device. `on_finish(started)` is called once, with the
    number of tasks that were started (all of them ran to completion)."""

    def __init__(self, *, rank: tuple[int, int], unit: int, task_ns: int, total: int,
                 max_slots: int, on_finish: Callable[[int], None],
                 flag_is_set: Callable[[], bool] | None = None):
        self.rank = rank
        self.unit = unit
        self.task_ns = max(1, task_ns)
        self.total = total
        self.max_slots = max(1, max_slots)
        self.on_finish = on_finish
        self.flag_is_set = flag_is_set          # PTB only
        self.started = 0          # tasks started, including the current wave
        self.slots = 0            # resident blocks; 0 = not resident
        self.joiners = 0          # slots reserved, joining at the next boundary
        self.phase = 0            # start (ns) of the wave that started last
        self.finished = False
        self.exhausted_workers = 0   # PTB workers that found no task left
        self._timer: Timer | None = None
        self._event_at: int | None = None

    @property
    def unstarted(self) -> int:
        return self.total - self.started

    def want(self) -> int:
        """Slots this run would use from its next wave on."""
        if self.flag_is_set is not None and self.flag_is_set():
            return 0
        return min(self.max_slots, self.unstarted)

    def extra_wanted(self) -> int:
        return max(0, self.want() - self.slots - self.joiners)

    def stopping(self) -> bool:
        return self.flag_is_set is not None and self.flag_is_set()

    # lazy wave arithmetic ---------------------------------------------------
    def natural_end(self) -> int:
        waves_left = -(-self.unstarted // self.slots)
        return self.phase + self.task_ns * (1 + waves_left)

    def last_wave_start(self) -> int:
        """Boundary at which the run starts wanting fewer slots than it holds."""
        return self.phase + self.task_ns * (self.unstarted // self.slots + 1)

    def next_boundary_from(self, t: int) -> int:
        """First boundary at or after t that has not been processed (a wave
        that started at t ends one task later)."""
        if t <= self.phase:
            return self.phase + self.task_ns
        return self.phase + self.task_ns * -(-(t - self.phase) // self.task_ns)

    def advance(self, now: int) -> None:
        """Catch up on the full waves that started at boundaries before `now`
        (nothing could change at them, or they would have had an event)."""
        if self.slots == 0 or now <= self.phase:
            return
        k = (now - self.phase - 1) // self.task_ns
        if k > 0:
            self.started += min(self.unstarted, k * self.slots)
            self.phase += k * self.task_ns

    def settle(self, boundary: int) -> None:
        """Account for every wave started after `phase` and before `boundary`;
        at `boundary` the wave in flight completes."""
        k = (boundary - self.phase) // self.task_ns
        if k >= 1:
            self.started += min(self.unstarted, (k - 1) * self.slots)
        self.phase = boundary


class SimDevice:
    def __init__(self, loop: SimLoop, sm_count: int, eager: bool = False):
        self.loop = loop
        self.capacity = sm_count * SM_UNITS
        self.used = 0
        self.eager = eager
        self.runs: list[KernelRun] = []
        self.events = 0           # run events processed (for the efficiency test)

    def add(self, run: KernelRun) -> None:
        """A kernel reached the device (after its launch overhead)."""
        if run.total <= 0 or run.stopping():
            self._finish(run)
            return
        self.runs.append(run)
        self._fill()
        self._replan()

    def flag_changed(self, run: KernelRun) -> None:
        """A PTB run's preempt flag was written: re-plan its next event."""
        if run.finished:
            return
        if run.slots == 0 and run.joiners == 0 and run.stopping():
            # Nothing in flight: the non-resident workers exit at once.
            self.runs.remove(run)
            self._finish(run)
            self._fill()
        self._replan()

    # internals ------------------------------------------------------------------
    def _finish(self, run: KernelRun) -> None:
        run.finished = True
        if run._timer is not None:
            run._timer.cancel()
        run.on_finish(run.started)

    def _fill(self) -> None:
        now = self.loop.now_ns
        for run in self.runs:
            run.advance(now)
        free = self.capacity - self.used
        for run in sorted(self.runs, key=lambda r: r.rank):
            extra = run.extra_wanted()
            if extra <= 0:
                continue
            n = min(extra, free // run.unit)
            if n <= 0:
                continue
            if run.slots == 0:
                run.slots = n
                run.phase = now
                run.started += n
            else:
                run.joiners += n
            free -= n * run.unit
            self.used += n * run.unit

    def _replan(self) -> None:
        now = self.loop.now_ns
        waiting = [r for r in self.runs if r.extra_wanted() > 0]
        best_waiting = min((r.rank for r in waiting), default=None)
        for run in self.runs:
            if run.slots == 0:
                self._set_event(run, None)
                continue
            at = min(run.natural_end(), run.last_wave_start())
            interesting = (self.eager or run.joiners > 0 or run.stopping()
                           or (best_waiting is not None and best_waiting < run.rank))
            if interesting:
                at = min(at, run.next_boundary_from(now))
            self._set_event(run, max(at, now))

    def _set_event(self, run: KernelRun, at: int | None) -> None:
        if at == run._event_at:
            return
        if run._timer is not None:
            run._timer.cancel()
            run._timer = None
        run._event_at = at
        if at is not None:
            run._timer = self.loop.schedule(at, self._on_boundaries, late=True)

    def _on_boundaries(self) -> None:
        """Every run with an event now completes its wave and gives its slots
        back together; then slots are handed out again by rank."""
        now = self.loop.now_ns
        batch = [r for r in self.runs if r._event_at == now]
        if not batch:
            return                     # another timer of this instant already did it
        self.events += 1
        finished = []
        for run in batch:
            if run._timer is not None:
                run._timer.cancel()
            run._timer = None
            run._event_at = None
            run.settle(now)
            self.used -= (run.slots + run.joiners) * run.unit
            if run.unstarted == 0 and run.flag_is_set is not None:
                # each resident PTB worker's last atomic add found no task left
                run.exhausted_workers = run.slots + run.joiners
            run.slots = run.joiners = 0
            if run.unstarted == 0 or run.stopping():
                self.runs.remove(run)
                finished.append(run)
        for run in finished:
            self._finish(run)
        self._fill()
        self._replan()

"""The high-priority queueing-delay histogram: its buckets, and what the executor
observes on the sim's virtual clock (exact times, so exact assertions)."""
from __future__ import annotations

import pytest
from test_scheduler_executor import Rig

from tally.scheduler.delay_histogram import DelayHistogram
from tally.scheduler.ops import HostCallback


def test_buckets_are_cumulative_and_a_bound_belongs_to_its_own_bucket():
    h = DelayHistogram((0.001, 0.01))
    for seconds in (0.0, 0.001, 0.002, 0.5):
        h.observe(seconds)
    snap = h.snapshot()
    assert snap["buckets"] == [[0.001, 2], [0.01, 3], ["+Inf", 4]]
    assert snap["count"] == 4 and snap["sum"] == pytest.approx(0.503)


@pytest.mark.parametrize("bounds", [(), (0.1, 0.1), (0.2, 0.1)])
def test_bounds_must_increase(bounds):
    with pytest.raises(ValueError, match="increasing"):
        DelayHistogram(bounds)


def test_high_priority_kernels_that_start_at_once_wait_zero_and_best_effort_ones_are_not_counted():
    rig = Rig()
    rig.ex.add_client("hp", "high")
    rig.ex.add_client("be")
    buf = rig.buffer(64)
    for _ in range(3):
        rig.ex.submit("be", 0, rig.launch("add_one", 64, buf))
        rig.ex.submit("hp", 0, rig.launch("hp_work", 8))
    rig.ex.synchronize_client("hp")
    rig.ex.synchronize_client("be")
    snap = rig.ex.counters()["hp_queueing_delay_s"]
    assert snap["count"] == 3 and snap["sum"] == 0.0
    assert snap["buckets"][0][1] == 3                # all in the smallest bucket


def test_a_high_priority_kernel_held_behind_a_time_slice_owner_waits_until_its_kernel_ends():
    # time-slice never interrupts a running kernel: the high-priority kernel, queued
    # while the best-effort job owns the device, starts when that kernel completes.
    rig = Rig(policy="time-slice")
    rig.ex.add_client("be")
    rig.ex.add_client("hp", "high")
    buf = rig.buffer(4000)
    be_done = []
    rig.ex.submit("be", 0, rig.launch("add_one", 4000, buf))
    rig.ex.submit("be", 0, HostCallback(lambda: be_done.append(rig.sim.now())))
    rig.sim.run_until(1e-4)
    queued_at = rig.sim.now()
    rig.ex.submit("hp", 0, rig.launch("hp_work", 8))
    rig.ex.synchronize_client("hp")
    rig.ex.synchronize_client("be")
    snap = rig.ex.counters()["hp_queueing_delay_s"]
    assert snap["count"] == 1
    assert be_done and be_done[0] > queued_at + 2e-4          # the kernel was long enough to matter
    assert snap["sum"] == pytest.approx(be_done[0] - queued_at, rel=1e-6, abs=1e-9)

"""Best-effort batches (tally/scheduler/policies/priority.py, whole_durations.py):
short whole best-effort kernels of one job may share the device up to the batch
budget instead of going one at a time, each paying a completion round trip. On
the sim backend (2 us launch overhead, 10 us host-callback latency per completion)
with a simulated clock, so the times compared here are the model's, not this
machine's."""
from __future__ import annotations

import struct

import pytest

from tally.backends.sim import SimBackend, sim_module_source
from tally.backends.sim.model import KernelCost
from tally.backends.sim.variants import SimVariantProvider
from tally.scheduler import Launch, StreamExecutor, make_policy
from tally.scheduler.profiler import DEFAULT_TURNAROUND_THRESHOLD_MS, TransparentProfiler
from tally.scheduler.whole_durations import WholeDurations


class Rig:
    """A sim device with a short kernel (one block of 2 us), a long one (one block of
    50 us) and a high-priority kernel; every block records (tag, argument, time)."""

    def __init__(self, threshold_ms: float = DEFAULT_TURNAROUND_THRESHOLD_MS):
        self.sim = SimBackend()
        self.ran: list[tuple[str, int, float]] = []
        names = {"short": 2.0, "long": 50.0, "hp": 5.0}
        for name, block_us in names.items():
            self.sim.define_kernel(name, (8,), KernelCost(block_us, 1), self._note(name))
        module = self.sim.module_load(sim_module_source(*names))
        self.fn = {n: self.sim.module_function(module, n) for n in names}
        profiler = TransparentProfiler(self.sim.describe().sm_count, threshold_ms)
        self.ex = StreamExecutor(self.sim, make_policy("priority"), SimVariantProvider(), profiler,
                                 clock=self.sim.clock)

    def _note(self, tag):
        def effect(mem, params, grid, block, blocks):
            (arg,) = struct.unpack_from("<Q", params)
            self.ran.append((tag, arg, self.sim.now()))
        return effect

    def submit(self, client, name, arg, stream=0):
        self.ex.submit(client, stream, Launch(self.fn[name], (1, 1, 1), (128, 1, 1), 0, struct.pack("<Q", arg)))

    def run_job(self, client, name, count, stream=0) -> float:
        """Submit `count` launches at once; the simulated seconds until the last ran."""
        start = self.sim.now()
        for i in range(count):
            self.submit(client, name, i, stream)
        self.ex.synchronize_stream(client, stream)
        return self.sim.now() - start


def test_short_best_effort_kernels_share_the_device_within_the_budget():
    batched, single = Rig(), Rig(threshold_ms=1e-6)     # a budget no kernel fits: one at a time
    for rig in (batched, single):
        rig.ex.add_client("be")
    t_batched = batched.run_job("be", "short", 400)
    t_single = single.run_job("be", "short", 400)
    for rig in (batched, single):
        assert [arg for _tag, arg, _t in rig.ran] == list(range(400))     # every kernel, in order
    c = batched.ex.counters()
    assert c["kernels_batched"] > 350 and c["clients"]["be"]["kernels_completed"] == 400, c
    assert single.ex.counters()["kernels_batched"] == 0
    # one at a time, each kernel waits for the previous one's completion round trip
    assert t_single / t_batched > 2.5, (t_single, t_batched)     # 5.6 ms against 1.9 ms in the model


def test_a_kernel_longer_than_the_budget_is_never_batched():
    rig = Rig()
    rig.ex.add_client("be")
    rig.run_job("be", "long", 40)
    assert rig.ex.counters()["kernels_batched"] == 0
    starts = [t for _tag, _arg, t in rig.ran]
    assert len(starts) == 40 and starts == sorted(starts)


def test_a_high_priority_kernel_waits_at_most_the_budget_behind_a_batch():
    rig = Rig()
    rig.ex.add_client("hp", "high")
    rig.ex.add_client("be")
    for i in range(2000):
        rig.submit("be", "short", i)
    rig.sim.run_until(2e-3)                 # the batches are under way: durations known
    assert rig.ex.counters()["kernels_batched"] > 0
    waits = []
    for i in range(5):
        at = rig.sim.now()
        rig.submit("hp", "hp", i)
        rig.ex.synchronize_stream("hp", 0)
        hp_done = max(t for tag, arg, t in rig.ran if tag == "hp" and arg == i)
        waits.append(hp_done - at)
        rig.sim.run_until(rig.sim.now() + 3e-4)     # the high-priority job goes idle; batches resume
    rig.ex.synchronize_stream("be", 0)
    assert len([1 for tag, *_ in rig.ran if tag == "short"]) == 2000
    # its own 5 us and a launch, plus at most the budget of best-effort work ahead of it
    bound = DEFAULT_TURNAROUND_THRESHOLD_MS / 1e3 + 5e-6 + 2 * 2e-6 + 1e-6
    assert max(waits) <= bound, (waits, bound)


def test_two_best_effort_jobs_both_progress_while_batched():
    rig = Rig()
    rig.ex.add_client("a")
    rig.ex.add_client("b")
    for i in range(600):
        rig.submit("a", "short", i)
        rig.submit("b", "short", 1000 + i)
    rig.sim.run_until(2e-3)
    a = sum(1 for _tag, arg, _t in rig.ran if arg < 1000)
    b = sum(1 for _tag, arg, _t in rig.ran if arg >= 1000)
    assert a > 50 and b > 50 and 0.5 < a / b < 2, (a, b)
    rig.ex.synchronize_stream("a", 0)
    rig.ex.synchronize_stream("b", 0)
    assert len(rig.ran) == 1200


def test_durations_leave_out_the_first_launch_and_age_out_a_slow_sample():
    d = WholeDurations(samples=2, resample_every=4)
    assert d.wants_sample("k") and d.predicted("k") is None
    d.observe("k", 1.0)                 # the first launch: lazy loading, compilation
    d.observe("k", 2e-6)
    assert d.predicted("k") is None and d.wants_sample("k")
    d.observe("k", 3e-6)
    assert d.predicted("k") == pytest.approx(3e-6)
    assert [d.wants_sample("k") for _ in range(8)] == [False, False, False, True] * 2
    # a job whose plane batches sends Python only the launches the plane wants timed
    assert d.wants_sample("k", for_plane=True) and [d.wants_sample("k") for _ in range(4)] == [False] * 3 + [True]
    d.observe("k", 9e-6)                # slower now: noticed at once
    assert d.predicted("k") == pytest.approx(9e-6)
    d.observe("k", 2e-6)
    d.observe("k", 2e-6)                # and forgotten once two newer samples came
    assert d.predicted("k") == pytest.approx(2e-6)
    with pytest.raises(ValueError):
        WholeDurations(samples=0)


def test_durations_keep_at_most_max_shapes():
    d = WholeDurations(samples=1, max_shapes=2)
    for key in ("a", "b", "c"):
        d.observe(key, 1.0)
        d.observe(key, 2e-6)
    assert d.predicted("a") is None and d.wants_sample("a")      # the oldest went
    assert d.predicted("b") == d.predicted("c") == pytest.approx(2e-6)

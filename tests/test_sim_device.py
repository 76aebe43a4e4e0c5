"""The sim's SM model: wave timing, left-over and priority block scheduling,
PTB preemption, and the lazy event planning matching the eager reference."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tally.backends.sim.device import SM_UNITS, KernelRun, SimDevice
from tally.backends.sim.loop import SimLoop


def _device(sm_count=4, eager=False):
    loop = SimLoop()
    return loop, SimDevice(loop, sm_count, eager=eager)


def _run(device, loop, *, rank, per_sm, task_ns, total, max_slots=None, done=None, flag=None, at=0):
    """Add a run at virtual time `at`; `done` collects (rank, finish time, started)."""
    def add():
        run = KernelRun(rank=rank, unit=SM_UNITS // per_sm, task_ns=task_ns, total=total,
                        max_slots=total if max_slots is None else max_slots,
                        on_finish=lambda started: done.append((rank, loop.now_ns, started)),
                        flag_is_set=flag)
        device.add(run)
    loop.schedule(at, add)


@pytest.mark.parametrize("blocks,per_sm,expected_waves", [(1, 1, 1), (4, 1, 1), (5, 1, 2), (16, 4, 1),
                                                          (17, 4, 2), (100, 2, 13)])
def test_kernel_alone_takes_whole_waves(blocks, per_sm, expected_waves):
    loop, device = _device(sm_count=4)
    done = []
    _run(device, loop, rank=(0, 1), per_sm=per_sm, task_ns=1000, total=blocks, done=done)
    while loop.step():
        pass
    assert done == [((0, 1), expected_waves * 1000, blocks)]
    assert expected_waves == math.ceil(blocks / (4 * per_sm))
    assert device.used == 0


def test_later_kernel_only_gets_leftovers_of_equal_priority():
    # 4 SMs x 1 block: A has 10 blocks (3 waves: 4, 4, 2). B (same priority,
    # later) can only start on the 2 slots A leaves free in its last wave.
    loop, device = _device(sm_count=4)
    done = []
    _run(device, loop, rank=(0, 1), per_sm=1, task_ns=1000, total=10, done=done)
    _run(device, loop, rank=(0, 2), per_sm=1, task_ns=500, total=2, done=done, at=100)
    while loop.step():
        pass
    assert done == [((0, 2), 2000 + 500, 2), ((0, 1), 3000, 10)]


def test_higher_priority_kernel_takes_slots_at_next_boundary():
    loop, device = _device(sm_count=4)
    done = []
    _run(device, loop, rank=(0, 1), per_sm=1, task_ns=1000, total=40, done=done)      # 10 waves
    _run(device, loop, rank=(-1, 2), per_sm=1, task_ns=300, total=4, done=done, at=2500)
    while loop.step():
        pass
    # the high-priority kernel waits only for the wave in flight (ends at 3000)
    assert done[0] == ((-1, 2), 3300, 4)
    # the best-effort kernel had given up all its slots; it resumes when they free
    assert done[1] == ((0, 1), 3300 + 7 * 1000, 40)


def test_kernels_of_different_occupancy_share_an_sm():
    loop, device = _device(sm_count=1)
    done = []
    _run(device, loop, rank=(0, 1), per_sm=2, task_ns=1000, total=1, done=done)      # half the SM
    _run(device, loop, rank=(0, 2), per_sm=4, task_ns=1000, total=2, done=done)      # two quarters
    _run(device, loop, rank=(0, 3), per_sm=4, task_ns=1000, total=1, done=done)      # no room left
    while loop.step():
        pass
    assert [t for _r, t, _n in done] == [1000, 1000, 2000]


def test_ptb_stops_after_tasks_in_flight_when_flag_is_set():
    loop, device = _device(sm_count=2)
    flag = {"set": False}
    done = []
    _run(device, loop, rank=(0, 1), per_sm=1, task_ns=1000, total=100, max_slots=2, done=done,
         flag=lambda: flag["set"])
    def preempt():
        flag["set"] = True
        device.flag_changed(device.runs[0])

    loop.schedule(10_500, preempt)
    while loop.step():
        pass
    # rounds of 2 tasks start at 0, 1000, ..., 10000; the flag is seen at 11000
    assert done == [((0, 1), 11_000, 22)]


def test_ptb_with_flag_already_set_runs_nothing():
    loop, device = _device()
    done = []
    _run(device, loop, rank=(0, 1), per_sm=1, task_ns=1000, total=10, max_slots=4, done=done,
         flag=lambda: True)
    while loop.step():
        pass
    assert done == [((0, 1), 0, 0)]


def test_long_kernel_alone_costs_few_events():
    loop, device = _device(sm_count=108)
    done = []
    _run(device, loop, rank=(0, 1), per_sm=2, task_ns=24_000, total=43_200, done=done)
    while loop.step():
        pass
    assert done[0][1] == 200 * 24_000
    assert device.events <= 2          # the end (and at most one last-wave boundary)


@st.composite
def _workloads(draw):
    kernels = []
    for i in range(draw(st.integers(1, 7))):
        total = draw(st.integers(1, 60))
        ptb = draw(st.booleans())
        kernels.append(dict(rank=(draw(st.sampled_from([-1, 0])), i + 1),
                            per_sm=draw(st.sampled_from([1, 2, 3, 4, 8])),
                            task_ns=draw(st.integers(1, 40)) * 100,
                            total=total,
                            max_slots=draw(st.integers(1, total)) if ptb else None,
                            preempt_at=draw(st.none() | st.integers(0, 300).map(lambda x: x * 50)) if ptb else None,
                            at=draw(st.integers(0, 50)) * 100))
    return kernels


def _simulate(kernels, eager):
    loop, device = _device(sm_count=3, eager=eager)
    done = []
    for k in kernels:
        k = dict(k)
        preempt_at = k.pop("preempt_at")
        if k["max_slots"] is None:
            _run(device, loop, done=done, **k)
            continue
        flag = {"set": False}
        runs = []

        def add(k=k, flag=flag, runs=runs):
            run = KernelRun(rank=k["rank"], unit=SM_UNITS // k["per_sm"], task_ns=k["task_ns"],
                            total=k["total"], max_slots=k["max_slots"],
                            on_finish=lambda started, r=k["rank"]: done.append((r, loop.now_ns, started)),
                            flag_is_set=lambda: flag["set"])
            runs.append(run)
            device.add(run)

        def preempt(flag=flag, runs=runs):
            flag["set"] = True
            if runs:
                device.flag_changed(runs[0])

        loop.schedule(k["at"], add)
        if preempt_at is not None:
            loop.schedule(preempt_at, preempt)
    while loop.step():
        pass
    assert device.used == 0
    return sorted(done)


@settings(max_examples=200, deadline=None)
@given(_workloads())
def test_lazy_planning_matches_eager_reference(kernels):
    lazy, eager = _simulate(kernels, False), _simulate(kernels, True)
    assert lazy == eager
    assert len(lazy) == len(kernels)

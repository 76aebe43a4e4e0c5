"""Each policy's decisions on hand-made scheduler views."""
from __future__ import annotations

import pytest

from tally.scheduler.policies import POLICIES, make_policy
from tally.scheduler.policy import (BEST_EFFORT, HIGH, HIGH_STREAM_PRIORITY, ClientView, RunningUnit,
                                    SchedulerView, WaitingKernel)
from tally.scheduler.run_mode import RunMode

HP = ClientView("hp", HIGH, None)
BE1 = ClientView("be1", BEST_EFFORT, None)
BE2 = ClientView("be2", BEST_EFFORT, None)


def waiting(kid, client, since=0.0, busy=False, predicted=None):
    return WaitingKernel(kid, client.client_id, 0, client.priority, f"k{kid}", since, False, busy, predicted)


def running(uid, client, mode=RunMode.WHOLE, preemptible=False, started=0.0, predicted=None):
    return RunningUnit(uid, 100 + uid, client.client_id, 0, client.priority, mode, preemptible, started, predicted)


def view(now=0.0, clients=(HP, BE1, BE2), waiting_=(), running_=(), budget=0.0):
    return SchedulerView(now, tuple(clients), tuple(waiting_), tuple(running_), budget)


def started(schedule):
    return [(s.kernel_id, s.transform) for s in schedule.start]


def test_registry_and_options():
    assert set(POLICIES) == {"fifo", "kernel-priority", "time-slice", "priority"}
    assert make_policy("time-slice", quantum_ms=5).quantum == pytest.approx(0.005)
    with pytest.raises(ValueError, match="choose one of"):
        make_policy("round-robin")
    with pytest.raises(ValueError, match="takes no option"):
        make_policy("fifo", quantum_ms=5)
    with pytest.raises(ValueError, match="quantum"):
        make_policy("time-slice", quantum_ms=0)


def test_fifo_starts_everything_whole_on_equal_streams():
    p = make_policy("fifo")
    s = p.schedule(view(waiting_=[waiting(1, HP), waiting(2, BE1, busy=True)], running_=[running(1, BE2)]))
    assert started(s) == [(1, False), (2, False)] and s.preempt == []
    assert p.stream_priority(HP) == p.stream_priority(BE1) == 0
    assert p.starts_at_once(BE1)


def test_kernel_priority_holds_best_effort_while_high_priority_is_busy():
    p = make_policy("kernel-priority")
    assert p.stream_priority(HP) == HIGH_STREAM_PRIORITY and p.stream_priority(BE1) == 0
    both = [waiting(1, HP), waiting(2, BE1)]
    assert started(p.schedule(view(waiting_=both))) == [(1, False)]
    assert started(p.schedule(view(waiting_=[waiting(2, BE1)], running_=[running(1, HP)]))) == []
    # idle high priority: one best-effort kernel per stream, whole, never preempted
    s = p.schedule(view(waiting_=[waiting(2, BE1), waiting(3, BE2, busy=True)], running_=[running(4, BE2)]))
    assert started(s) == [(2, False)] and s.preempt == []


def test_priority_preempts_best_effort_when_high_priority_work_arrives():
    p = make_policy("priority")
    s = p.schedule(view(waiting_=[waiting(1, HP), waiting(2, BE2)],
                        running_=[running(1, BE1, RunMode.PTB, preemptible=True), running(2, BE2, RunMode.SLICE)]))
    assert started(s) == [(1, False)]
    assert s.preempt == [1]                        # the slice just finishes; no new slice starts
    s = p.schedule(view(waiting_=[waiting(2, BE2)], running_=[running(3, HP)]))
    assert started(s) == [] and s.preempt == []


def test_priority_runs_one_transformed_best_effort_unit_when_idle():
    p = make_policy("priority", idle_grace_ms=0)
    s = p.schedule(view(waiting_=[waiting(5, BE2, since=1.0), waiting(4, BE1, since=2.0)]))
    assert started(s) == [(4, True)]               # equal service: the client that joined first
    assert started(p.schedule(view(waiting_=[waiting(5, BE2)], running_=[running(1, BE1, RunMode.SLICE)]))) == []


def test_priority_shares_idle_time_by_least_service():
    p = make_policy("priority", idle_grace_ms=0)
    p.schedule(view(waiting_=[waiting(1, BE1)]))
    p.on_unit_finished(running(1, BE1, RunMode.PTB, started=0.0), now=0.004)
    p.on_unit_finished(running(2, BE2, RunMode.PTB, started=0.004), now=0.005)
    s = p.schedule(view(now=0.005, waiting_=[waiting(3, BE1), waiting(4, BE2)]))
    assert started(s) == [(4, True)]               # be2 has had 1 ms, be1 4 ms
    # a late joiner starts level with the least-served member, not at zero
    be3 = ClientView("be3", BEST_EFFORT, None)
    p.schedule(view(clients=(HP, BE1, BE2, be3), waiting_=[waiting(5, be3)]))
    assert p.service["be3"] == pytest.approx(0.001)
    # members that left are forgotten
    p.schedule(view(clients=(HP, BE2), waiting_=[waiting(6, BE2)]))
    assert set(p.service) == {"be2"}


def test_priority_batches_short_whole_kernels_of_one_job_within_the_budget():
    p = make_policy("priority", idle_grace_ms=0)
    us = 1e-6
    batch = [running(1, BE1, predicted=10 * us), running(2, BE1, predicted=10 * us)]
    assert started(p.schedule(view(waiting_=[waiting(3, BE1, predicted=10 * us)], running_=batch,
                                   budget=30 * us))) == [(3, True)]
    # over the budget, a time not known, a running unit whose time is not known, a slice
    assert started(p.schedule(view(waiting_=[waiting(3, BE1, predicted=11 * us)], running_=batch,
                                   budget=30 * us))) == []
    assert started(p.schedule(view(waiting_=[waiting(3, BE1)], running_=batch, budget=1.0))) == []
    assert started(p.schedule(view(waiting_=[waiting(3, BE1, predicted=us)], budget=1.0,
                                   running_=[*batch, running(4, BE1)]))) == []
    assert started(p.schedule(view(waiting_=[waiting(3, BE1, predicted=us)], budget=1.0,
                                   running_=[running(4, BE1, RunMode.SLICE)]))) == []
    # another job's kernel is not added to this job's batch, nor this job's when the other is owed its turn
    assert started(p.schedule(view(waiting_=[waiting(3, BE2, predicted=us)], running_=batch, budget=1.0))) == []
    p.on_unit_finished(running(9, BE1, started=0.0), now=0.004)
    assert started(p.schedule(view(waiting_=[waiting(3, BE1, predicted=us), waiting(5, BE2, predicted=us)],
                                   running_=batch, budget=1.0))) == []
    # high-priority work ends every batch: it starts, nothing more joins
    s = p.schedule(view(waiting_=[waiting(6, HP), waiting(3, BE1, predicted=us)], running_=batch, budget=1.0))
    assert started(s) == [(6, False)]
    # at most MAX_BATCH units, however short
    from tally.scheduler.policies.priority import MAX_BATCH
    full = [running(10 + i, BE1, predicted=0.0) for i in range(MAX_BATCH)]
    assert started(p.schedule(view(waiting_=[waiting(3, BE1, predicted=0.0)], running_=full, budget=1.0))) == []


def test_priority_charges_a_batch_its_span_not_each_units_wait():
    p = make_policy("priority", idle_grace_ms=0)
    p.schedule(view(waiting_=[waiting(1, BE1)]))
    for uid in range(3):            # three units launched at 0, ending 1 ms apart
        p.on_unit_finished(running(uid, BE1, started=0.0, predicted=1e-3), now=(uid + 1) * 1e-3)
    assert p.service["be1"] == pytest.approx(3e-3)       # not 1 + 2 + 3 ms


def test_priority_waits_for_high_priority_to_stay_idle_for_the_grace_period():
    p = make_policy("priority", idle_grace_ms=0.05)
    p.on_unit_finished(running(1, HP, started=0.0), now=1.0)
    s = p.schedule(view(now=1.00002, waiting_=[waiting(2, BE1)]))
    assert started(s) == [] and s.wake_at == pytest.approx(1.00005)
    s = p.schedule(view(now=1.00005, waiting_=[waiting(2, BE1)]))
    assert started(s) == [(2, True)]
    with pytest.raises(ValueError, match="idle_grace_ms"):
        make_policy("priority", idle_grace_ms=-1)


def test_time_slice_gives_each_job_a_quantum_in_turn():
    p = make_policy("time-slice", quantum_ms=10)
    assert not p.starts_at_once(HP)
    w = [waiting(1, HP), waiting(2, BE1), waiting(3, BE2, busy=True)]
    s = p.schedule(view(now=0.0, waiting_=w))
    assert p.owner == "hp" and started(s) == [(1, False)] and s.wake_at == pytest.approx(0.010)
    # quantum over while the owner still runs a kernel: nothing new starts
    s = p.schedule(view(now=0.011, waiting_=w[1:], running_=[running(1, HP)]))
    assert started(s) == [] and p.owner == "hp"
    # owner drained: the next job in join order owns the GPU for a fresh quantum
    s = p.schedule(view(now=0.012, waiting_=w))
    assert p.owner == "be1" and started(s) == [(2, False)] and s.wake_at == pytest.approx(0.022)
    # a job with nothing to run gives the GPU up at once
    s = p.schedule(view(now=0.013, waiting_=[waiting(3, BE2)]))
    assert p.owner == "be2" and started(s) == [(3, False)]


def test_time_slice_starts_one_kernel_per_stream():
    p = make_policy("time-slice")
    s = p.schedule(view(clients=(BE1,), waiting_=[waiting(1, BE1, busy=True)], running_=[running(1, BE1)]))
    assert started(s) == []
    assert s.wake_at is None                        # nobody else to hand over to

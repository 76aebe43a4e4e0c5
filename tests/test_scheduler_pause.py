"""Pausing a client in the stream executor (tally-server pause/resume): nothing of
its work starts while it is paused, its running PTB kernels stop where they are,
other clients carry on, and after resume its results are exactly right."""
from __future__ import annotations

import numpy as np
import pytest

from tally.scheduler import ClientGone, MemcpyHtoD
from test_scheduler_executor import Rig, u32


def per_client(rig, client) -> dict:
    return rig.ex.counters()["clients"][client]


def test_a_paused_client_starts_nothing_and_loses_nothing():
    rig = Rig()
    rig.ex.add_client("be")
    buf = rig.buffer(1000)
    rig.ex.pause_client("be")
    rig.ex.submit("be", 0, MemcpyHtoD(buf, np.arange(1000, dtype=np.uint32).tobytes()))
    for name in ("add_one", "double"):
        rig.ex.submit("be", 0, rig.launch(name, 1000, buf))
    rig.sim.run_until(0.05)
    assert per_client(rig, "be")["ops_queued"] == 3 and per_client(rig, "be")["kernels"] == 0
    assert u32(rig.sim, buf, 3) == [0, 0, 0]                 # not even the copy went
    assert rig.ex.query_stream("be", 0) is False             # a synchronization would wait
    rig.ex.pause_client("be")                                # idempotent
    rig.ex.resume_client("be")
    rig.ex.synchronize_stream("be", 0)
    x = np.arange(1000, dtype=np.uint32)
    assert u32(rig.sim, buf, 1000) == ((x + 1) * 2).tolist()


def test_pausing_mid_kernel_stops_its_ptb_launch_and_resume_finishes_it_exactly():
    rig = Rig(be_transform="ptb")
    rig.ex.add_client("hp", "high")
    rig.ex.add_client("be")
    buf = rig.buffer(20000)
    rig.ex.submit("be", 0, MemcpyHtoD(buf, np.arange(20000, dtype=np.uint32).tobytes()))
    for name in ("add_one", "double", "add_one"):
        rig.ex.submit("be", 0, rig.launch(name, 20000, buf))
    rig.sim.run_until(2e-4)
    assert per_client(rig, "be")["kernels"] >= 1              # a PTB kernel is running
    rig.ex.pause_client("be")
    preempted = rig.ex.counters()["preemptions"]
    assert preempted >= 1
    rig.sim.run_until(rig.sim.now() + 1e-3)                  # the preemption lands
    done = per_client(rig, "be")["kernels_completed"]
    launches = rig.ex.counters()["ptb_launches"]
    # While it is paused the high-priority job runs and the paused one does not move.
    for _ in range(3):
        rig.ex.submit("hp", 0, rig.launch("hp_work", 1080))
    rig.ex.synchronize_stream("hp", 0)
    rig.sim.run_until(rig.sim.now() + 0.05)
    assert per_client(rig, "be")["kernels_completed"] == done
    assert rig.ex.counters()["ptb_launches"] == launches and rig.ex.counters()["units_in_flight"] == 0
    rig.ex.resume_client("be")
    rig.ex.synchronize_stream("be", 0)
    x = np.arange(20000, dtype=np.uint32)
    assert u32(rig.sim, buf, 20000) == ((x + 1) * 2 + 1).tolist()
    assert per_client(rig, "be")["kernels_completed"] == 3


def test_a_paused_client_that_leaves_is_removed_and_unknown_clients_are_refused():
    rig = Rig()
    rig.ex.add_client("be")
    buf = rig.buffer(100)
    rig.ex.pause_client("be")
    rig.ex.submit("be", 0, rig.launch("add_one", 100, buf))
    rig.ex.remove_client("be")                               # its held work is dropped; nothing waits forever
    assert rig.ex.counters()["ops_queued"] == 0
    with pytest.raises(ClientGone):
        rig.ex.pause_client("be")
    with pytest.raises(ClientGone):
        rig.ex.resume_client("nobody")

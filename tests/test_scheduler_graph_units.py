"""CUDA graph replays as units of work in the executor, on the sim backend: a
high-priority replay is one backend graph launch whose kernels honour its edges;
the priority policy runs a best-effort replay node by node, each kernel sliced or
preempted, exactly right; a high-priority replay is never held behind a whole
best-effort graph; the backend's executable is made once and destroyed with the
last reference to its graph; a refused replay is the job's next error only."""
from __future__ import annotations

import gc

import numpy as np
import pytest
from test_scheduler_executor import Rig, u32

from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.scheduler.ops import GraphReplay, Launch, ReplayGraph


def chain(rig, names, blocks, ptr) -> ReplayGraph:
    launches = tuple(rig.launch(name, blocks, ptr) for name in names)
    return ReplayGraph(launches, tuple((i, i + 1) for i in range(len(launches) - 1)), "chain")


def x_then(rig, buf, n) -> np.ndarray:
    x = np.arange(n, dtype=np.uint32)
    rig.sim.memory.write(buf, memoryview(x.tobytes()))
    return x


def test_a_high_priority_replay_is_one_graph_launch_made_once():
    rig = Rig()
    rig.ex.add_client("hp", "high")
    buf = rig.buffer(3000)
    x = x_then(rig, buf, 3000)
    graph = chain(rig, ("add_one", "double", "add_one"), 3000, buf)
    for _ in range(3):
        rig.ex.submit("hp", 0, GraphReplay(graph))
    rig.ex.synchronize_client("hp")
    for _ in range(3):
        x = (x + 1) * 2 + 1
    assert u32(rig.sim, buf, 3000) == x.tolist()
    c = rig.ex.counters()
    assert (c["graph_launches"], c["graph_nodes_replayed"], c["kernels"], c["kernels_whole"]) == (3, 0, 9, 9)
    assert c["clients"]["hp"]["graph_launches"] == 3 and c["clients"]["hp"]["kernels_completed"] == 9
    assert rig.ex.graphs.created == 1 and rig.ex.graphs.live == 1
    del graph
    gc.collect()
    assert rig.ex.graphs.live == 0          # the last reference went: its executable is destroyed


def test_graph_units_off_replays_node_by_node():
    rig = Rig(graph_units=False)
    rig.ex.add_client("hp", "high")
    buf = rig.buffer(100)
    x = x_then(rig, buf, 100)
    rig.ex.submit("hp", 0, GraphReplay(chain(rig, ("double", "add_one"), 100, buf)))
    rig.ex.synchronize_client("hp")
    assert u32(rig.sim, buf, 100) == (x * 2 + 1).tolist()
    c = rig.ex.counters()
    assert (c["graph_launches"], c["graph_nodes_replayed"], c["kernels"]) == (0, 2, 2)
    assert rig.ex.graphs.created == 0


@pytest.mark.parametrize("be_transform", ["slice", "ptb"])
def test_a_best_effort_replay_runs_node_by_node_preempted_and_exact(be_transform):
    rig = Rig(be_transform=be_transform)
    rig.ex.add_client("hp", "high")
    rig.ex.add_client("be")
    rig.keep_hp_busy(until_s=0.05)
    buf = rig.buffer(5000)
    x = x_then(rig, buf, 5000)
    rig.ex.submit("be", 0, GraphReplay(chain(rig, ("add_one", "double", "add_one", "double"), 5000, buf)))
    rig.ex.synchronize_stream("be", 0)
    assert u32(rig.sim, buf, 5000) == (((x + 1) * 2 + 1) * 2).tolist()
    c = rig.ex.counters()
    assert (c["graph_launches"], c["graph_nodes_replayed"]) == (0, 4)
    assert c["clients"]["be"]["graph_nodes_replayed"] == 4
    if be_transform == "slice":
        assert c["kernels_sliced"] == 4 and c["slice_launches"] > 20
    else:
        assert c["kernels_ptb"] == 4 and c["preemptions"] > 5


def finish_time(rig, client) -> float:
    rig.ex.synchronize_client(client)
    return rig.sim.now()


def test_a_high_priority_replay_is_not_held_behind_a_best_effort_graph():
    # A best-effort graph of 20 kernels of ~1 ms each is running when the high-priority
    # replay arrives: the replay waits for at most one slice or PTB task, not the graph.
    rig = Rig()
    rig.ex.add_client("hp", "high")
    rig.ex.add_client("be")
    be_buf, hp_buf = rig.buffer(100_000), rig.buffer(216)
    rig.ex.submit("be", 0, GraphReplay(chain(rig, ["add_one"] * 20, 100_000, be_buf)))
    rig.sim.run_until(3e-3)
    arrived = rig.sim.now()
    rig.ex.submit("hp", 0, GraphReplay(chain(rig, ("hp_work", "hp_work"), 216, hp_buf)))
    hp_latency = finish_time(rig, "hp") - arrived
    be_done = finish_time(rig, "be")
    assert u32(rig.sim, be_buf, 100_000) == [20] * 100_000
    # alone: two kernels of one 20 us wave each, plus launch overheads (~45 us); a
    # slice or PTB task of the best-effort kernel ahead of it is of the same order
    assert hp_latency < 0.5e-3, hp_latency
    assert be_done > arrived + 10e-3         # the best-effort graph was far from done when it came


def test_a_refused_replay_is_the_jobs_next_error_and_the_executor_carries_on():
    rig = Rig()
    rig.ex.add_client("hp", "high")
    buf = rig.buffer(10)
    bad = Launch(rig.fn["add_one"], (10, 1, 1), (128, 1, 1), 0, b"\0" * 4)   # 4 parameter bytes of 8
    rig.ex.submit("hp", 0, GraphReplay(ReplayGraph((rig.launch("add_one", 10, buf), bad), ((0, 1),))))
    with pytest.raises(DeviceError) as e:
        rig.ex.synchronize_client("hp")
    assert e.value.code == CUDA_ERROR_INVALID_VALUE
    rig.ex.submit("hp", 0, GraphReplay(chain(rig, ("add_one",), 10, buf)))
    rig.ex.synchronize_client("hp")
    assert u32(rig.sim, buf, 10) == [1] * 10


def test_malformed_graphs_are_refused_when_made():
    rig = Rig()
    with pytest.raises(ValueError, match="at least one node"):
        ReplayGraph(())
    one = rig.launch("add_one", 1)
    with pytest.raises(ValueError, match="does not run forward"):
        ReplayGraph((one, one), ((1, 0),))
    with pytest.raises(ValueError, match="grid must be"):
        ReplayGraph((one, Launch(rig.fn["add_one"], (0, 1, 1), (1, 1, 1), 0, b"")))
    rig.ex.add_client("hp", "high")
    with pytest.raises(ValueError, match="must be a ReplayGraph"):
        rig.ex.submit("hp", 0, GraphReplay((one,)))
    assert rig.ex.counters()["ops_submitted"] == 0


def test_sim_graph_launch_pays_one_host_call_and_short_node_gaps():
    # The sim's model: stream launches pay a host call each (here longer than a kernel,
    # so the host sets the pace) and the launch overhead; a graph replay pays one host
    # call, and its later kernels start a graph node's overhead after the previous one.
    def elapsed(graph_units: bool) -> float:
        rig = Rig(graph_units=graph_units)
        rig.sim.host_launch_us = 20.0
        rig.ex.add_client("hp", "high")
        buf = rig.buffer(1)
        rig.ex.submit("hp", 0, GraphReplay(chain(rig, ["add_one"] * 50, 1, buf)))
        return finish_time(rig, "hp")
    gpu = Rig().sim.gpu
    per_node = 50 * 20.0 + gpu.launch_overhead_us + 10.0
    as_unit = 20.0 + gpu.launch_overhead_us + 10.0 + 49 * (gpu.graph_node_overhead_us + 10.0)
    # (plus what a synchronization takes to learn of the end: the completion's host
    # callback, 10 us, and the event records around it)
    assert elapsed(False) * 1e6 == pytest.approx(per_node, abs=40)
    assert elapsed(True) * 1e6 == pytest.approx(as_unit, abs=40)

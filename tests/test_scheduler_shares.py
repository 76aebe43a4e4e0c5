"""The executor's levers on best-effort jobs, on the sim: SM shares confine every
launch of a job (and move at kernel boundaries when changed), a paused job's work
is held without losing anything, the cluster layer's gate delays best-effort units
and never high-priority ones, and the executor's own SM activity accounting."""
from __future__ import annotations

import struct
from dataclasses import replace

import numpy as np
import pytest

from tally.backends.sim import SimBackend, sim_module_source
from tally.backends.sim.model import KernelCost
from tally.backends.sim.variants import SimVariantProvider
from tally.cluster.executor_source import ExecutorActivitySource
from tally.scheduler import HostCallback, Launch, MemcpyDtoH, StreamExecutor, make_policy
from tally.scheduler.hooks import ALLOW, Hooks, wait


def add_one(mem, params, grid, block, blocks):
    (ptr,) = struct.unpack_from("<Q", params)
    mem.view(ptr + 4 * blocks.start, 4 * len(blocks)).view(np.uint32)[:] += 1


class Rig:
    """A100 on the sim (108 SMs); `work` blocks take 10 us, one per SM at a time."""

    def __init__(self, policy="priority", be_transform="none", hooks=None):
        self.sim = SimBackend()
        self.sim.define_kernel("work", (8,), KernelCost(10.0, 1), add_one)
        module = self.sim.module_load(sim_module_source("work"))
        self.fn = self.sim.module_function(module, "work")
        self.ex = StreamExecutor(self.sim, make_policy(policy), SimVariantProvider(), clock=self.sim.clock,
                                 be_transform=be_transform, hooks=hooks)
        self.scratch = self.sim.mem_alloc(4 * 300_000)

    def launch(self, blocks, ptr=None):
        return Launch(self.fn, (blocks, 1, 1), (128, 1, 1), 0, struct.pack("<Q", ptr or self.scratch))

    def timed(self, client, blocks, ptr=None) -> list[float]:
        """Submit one kernel; the list gets the time its stream reached a host
        callback behind it (the sim's launch overhead is 2 us, a callback 10 us)."""
        done: list[float] = []
        self.ex.submit(client, 0, self.launch(blocks, ptr))
        self.ex.submit(client, 0, HostCallback(lambda: done.append(self.sim.now())))
        return done


def u32(sim, ptr, n):
    return np.frombuffer(sim.memory.read(ptr, 4 * n), np.uint32).tolist()


def test_a_share_confines_every_launch_to_its_sms():
    rig = Rig(policy="fifo")
    rig.ex.add_client("whole")
    rig.ex.add_client("quarter", sm_percent=25)
    assert rig.ex.sm_share("quarter") == (25, 27) and rig.ex.sm_share("whole") == (None, 108)
    whole = rig.timed("whole", 1080)            # 10 waves of 108 blocks: 100 us (+ 12 us)
    rig.ex.synchronize_client("whole")
    start = rig.sim.now()
    quarter = rig.timed("quarter", 1080)        # 27 SMs: 40 waves: 400 us (+ 12 us)
    rig.ex.synchronize_client("quarter")
    assert whole[0] == pytest.approx(112e-6, abs=2e-6)
    assert quarter[0] - start == pytest.approx(412e-6, abs=4e-6)
    assert rig.ex.counters()["clients"]["quarter"]["sm_granted"] == 27


def test_a_cooperative_launch_may_use_every_sm():
    # Its grid was sized for the whole device (the occupancy calculator times the SMs): on
    # the share's 27 SMs its blocks could not all be resident at once.
    rig = Rig(policy="fifo")
    rig.ex.add_client("quarter", sm_percent=25)
    done: list[float] = []
    rig.ex.submit("quarter", 0, replace(rig.launch(1080), cooperative=True))
    rig.ex.submit("quarter", 0, HostCallback(lambda: done.append(rig.sim.now())))
    rig.ex.synchronize_client("quarter")
    assert done[0] == pytest.approx(112e-6, abs=2e-6)      # 10 waves of 108 blocks, as the whole device
    plain = rig.timed("quarter", 1080)                     # the share's 27 SMs again: 40 waves
    start = done[0]
    rig.ex.synchronize_client("quarter")
    assert plain[0] - start == pytest.approx(412e-6, abs=4e-6)


def test_a_new_share_applies_from_the_next_kernel_on():
    rig = Rig(policy="fifo")
    rig.ex.add_client("be", sm_percent=10)      # 10 SMs
    buf = rig.sim.mem_alloc(4 * 1080)
    first = rig.timed("be", 1080, buf)          # queued with a cap of 10 SMs: 108 waves
    rig.sim.run_until(5e-6)                     # it reached the device
    assert rig.ex.set_sm_percent("be", 50) == 54
    second = rig.timed("be", 1080, buf)         # 54 SMs: 20 waves
    assert rig.ex.set_sm_percent("be", None) == 108
    third = rig.timed("be", 1080, buf)          # the whole device: 10 waves
    rig.ex.synchronize_client("be")
    assert first[0] == pytest.approx(1092e-6, abs=3e-6)
    assert second[0] - first[0] == pytest.approx(212e-6, abs=5e-6)
    assert third[0] - second[0] == pytest.approx(112e-6, abs=5e-6)
    assert u32(rig.sim, buf, 1080) == [3] * 1080


@pytest.mark.parametrize("bad", [0, -5, 101, float("nan"), float("inf"), "25"])
def test_a_share_outside_the_device_is_refused(bad):
    rig = Rig()
    rig.ex.add_client("be")
    with pytest.raises(ValueError, match="sm_percent must be in"):
        rig.ex.set_sm_percent("be", bad)
    with pytest.raises(ValueError, match="sm_percent must be in"):
        rig.ex.add_client("other", sm_percent=bad)
    assert rig.ex.sm_share("be") == (None, 108)          # nothing changed


def test_ptb_workers_follow_the_granted_sms():
    rig = Rig(be_transform="ptb")
    rig.ex.add_client("be", sm_percent=20)                # 21 SMs
    buf = rig.sim.mem_alloc(4 * 5000)
    for _ in range(4):
        rig.ex.submit("be", 0, rig.launch(5000, buf))
    rig.ex.synchronize_client("be")
    assert u32(rig.sim, buf, 5000) == [4] * 5000
    measured = rig.ex.profiler.measurements("work|5000x1x1|128x1x1|0")
    assert measured and all(c.size <= 21 for c in measured if c.kind.name == "PTB")


def test_a_paused_job_holds_its_work_loses_nothing_and_resumes():
    rig = Rig(be_transform="auto")
    rig.ex.add_client("hp", "high")
    rig.ex.add_client("be")
    buf = rig.sim.mem_alloc(4 * 2000)
    out = bytearray(4 * 2000)
    rig.ex.pause_client("be")
    assert rig.ex.is_paused("be") and rig.ex.counters()["clients"]["be"]["paused"]
    for _ in range(3):
        rig.ex.submit("be", 0, rig.launch(2000, buf))
    rig.ex.submit("be", 0, MemcpyDtoH(memoryview(out), buf, len(out)))
    hp_done = rig.timed("hp", 1080)
    rig.sim.run_until(0.01)
    assert hp_done and hp_done[0] == pytest.approx(112e-6, abs=2e-6)     # high priority runs as alone
    clients = rig.ex.counters()["clients"]
    assert clients["be"]["kernels"] == 0 and clients["be"]["ops_queued"] == 4
    assert not rig.ex.query_stream("be", 0)                 # a synchronization would wait
    rig.ex.resume_client("be")
    rig.ex.synchronize_client("be")
    assert np.frombuffer(out, np.uint32).tolist() == [3] * 2000


def test_pausing_stops_a_running_ptb_kernel_where_it_is():
    rig = Rig(be_transform="ptb")
    rig.ex.add_client("be")
    buf = rig.sim.mem_alloc(4 * 200_000)
    rig.ex.submit("be", 0, rig.launch(200_000, buf))
    rig.sim.run_until(2e-3)
    assert rig.ex.counters()["ptb_launches"] >= 1
    rig.ex.pause_client("be")
    rig.sim.run_until(5e-3)
    c = rig.ex.counters()
    assert c["preemptions"] >= 1 and c["units_in_flight"] == 0
    launches = c["ptb_launches"]
    rig.sim.run_until(20e-3)
    assert rig.ex.counters()["ptb_launches"] == launches      # nothing started while paused
    rig.ex.resume_client("be")
    rig.ex.synchronize_client("be")
    assert u32(rig.sim, buf, 200_000) == [1] * 200_000


class HeldGate:
    """A gate plugin that holds every best-effort unit until opened, and records
    what it was asked (the executor must never ask for high-priority work)."""

    def __init__(self):
        self.open = False
        self.asked: list = []

    def gate(self, unit, now):
        self.asked.append(unit.client_id)
        return ALLOW if self.open else wait(50e-6, "held by the test")


@pytest.mark.parametrize("policy", ["priority", "fifo"])
def test_a_held_gate_delays_best_effort_work_and_never_high_priority_work(policy):
    gate = HeldGate()
    hooks = Hooks()
    hooks.register(gate)
    rig = Rig(policy=policy, hooks=hooks)
    rig.ex.add_client("hp", "high")
    rig.ex.add_client("be")
    buf = rig.sim.mem_alloc(4 * 1080)
    be_done = rig.timed("be", 1080, buf)
    rig.sim.run_until(1e-3)
    hp_start = rig.sim.now()
    hp_done = rig.timed("hp", 1080)
    rig.sim.run_until(3e-3)
    assert hp_done[0] - hp_start == pytest.approx(112e-6, abs=2e-6)   # as on an idle device
    assert not be_done and set(gate.asked) == {"be"} and len(gate.asked) > 5   # asked again and again
    gate.open = True
    opened = rig.sim.now()
    rig.ex.synchronize_client("be")
    assert opened < be_done[0] <= opened + 50e-6 + 115e-6    # the next retry starts it
    assert u32(rig.sim, buf, 1080) == [1] * 1080


def test_the_activity_account_sees_high_priority_and_best_effort_sms():
    rig = Rig(policy="fifo")
    rig.ex.add_client("hp", "high")
    rig.ex.add_client("be", sm_percent=25)
    source = ExecutorActivitySource(rig.ex, rig.sim.mem_info)
    for _ in range(10):
        rig.ex.submit("hp", 0, rig.launch(1080))      # 10 x 100 us on 108 SMs
    rig.ex.synchronize_client("hp")
    hp_only = source.sample()
    assert hp_only.hp_sm_active_percent == pytest.approx(100.0, abs=3)
    assert hp_only.sm_active_percent == pytest.approx(100.0, abs=3)
    assert hp_only.memory_total_bytes == rig.sim.gpu.memory_bytes
    rig.sim.run_until(rig.sim.now() + 1e-3)               # idle
    idle = source.sample()
    assert idle.sm_active_percent == 0 and idle.gpu_util_percent == 0
    rig.ex.submit("be", 0, rig.launch(2700))              # 27 SMs for 1 ms
    rig.ex.synchronize_client("be")
    be_only = source.sample()
    assert be_only.hp_sm_active_percent == 0
    assert be_only.sm_active_percent == pytest.approx(25.0, abs=1.5)
    assert be_only.gpu_util_percent == pytest.approx(100.0, abs=1)

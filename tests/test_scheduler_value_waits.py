"""Stream waits on values and stream writes in the executor, on the sim backend
(virtual time) and the null backend: a wait holds its stream's later work in the
executor until another stream's write satisfies it, while other jobs' kernels
run; a wait nobody satisfies ends when its client is removed; what each
condition means (wrapping GEQ, EQ, AND, NOR) and which value releases it."""
from __future__ import annotations

import struct
import time

import numpy as np
import pytest

from tally.backends.null import NullBackend
from tally.backends.sim import SimBackend, sim_module_source
from tally.backends.sim.model import KernelCost
from tally.backends.stream_memory_ops import (WAIT_AND, WAIT_EQ, WAIT_GEQ, WAIT_NOR, satisfying_value,
                                              wait_satisfied)
from tally.scheduler import HostCallback, Launch, StreamExecutor, make_policy
from tally.scheduler.ops import StreamWaitValue, StreamWriteValue


def add_one(mem, params, grid, block, blocks):
    (ptr,) = struct.unpack_from("<Q", params)
    mem.view(ptr + 4 * blocks.start, 4 * len(blocks)).view(np.uint32)[:] += 1


def rig():
    sim = SimBackend()
    sim.define_kernel("add_one", (8,), KernelCost(10.0, 1), add_one)
    fn = sim.module_function(sim.module_load(sim_module_source("add_one")), "add_one")
    return sim, fn, StreamExecutor(sim, make_policy("priority"), clock=sim.clock)


def word(sim, ptr):
    return int(np.frombuffer(sim.memory.read(ptr, 4), np.uint32)[0])


def test_a_wait_holds_its_stream_until_another_stream_writes_and_others_run():
    sim, fn, ex = rig()
    ex.add_client("waiter", "high")
    ex.add_client("other")
    flag, out, other_out = sim.mem_alloc(8), sim.mem_alloc(4), sim.mem_alloc(4)
    ex.submit("waiter", 0, StreamWaitValue(flag, 2, 4, WAIT_GEQ))
    ex.submit("waiter", 0, Launch(fn, (1, 1, 1), (1, 1, 1), 0, struct.pack("<Q", out)))
    ex.submit("other", 0, Launch(fn, (1, 1, 1), (1, 1, 1), 0, struct.pack("<Q", other_out)))
    sim.run_until(0.01)
    assert word(sim, out) == 0 and word(sim, other_out) == 1     # held; the other job's kernel ran
    assert ex.counters()["ops_queued"] == 2                      # the wait and the kernel behind it
    ex.submit("waiter", 1, StreamWriteValue(flag, 1, 4))
    sim.run_until(0.02)
    assert word(sim, out) == 0                                   # 1 < 2: still held
    ex.submit("waiter", 1, StreamWriteValue(flag, 2, 4))
    sim.run_until(0.03)
    assert word(sim, out) == 1
    ex.synchronize_stream("waiter", 0)
    assert ex.counters()["ops_queued"] == 0


def test_removing_a_client_ends_a_wait_nobody_satisfies():
    sim, fn, ex = rig()
    ex.add_client("waiter")
    flag = sim.mem_alloc(4)
    ex.submit("waiter", 0, StreamWaitValue(flag, 1, 4, WAIT_EQ))
    sim.run_until(0.01)
    ex.remove_client("waiter")            # returns: the wait was released
    assert ex.counters()["clients"] == {}


def test_the_null_backend_accepts_waits_and_writes():
    ex = StreamExecutor(NullBackend(), make_policy("priority"))
    ex.add_client("a")
    ex.submit("a", 0, StreamWaitValue(0x1000, 7, 8, WAIT_NOR))
    ex.submit("a", 0, StreamWriteValue(0x1000, 7, 8))
    ex.synchronize_stream("a", 0)
    ex.close()


class PolledNull(NullBackend):
    """A backend whose waits the server polls (as the cuda backend's): the value is
    `self.value`, read by the poll."""
    value = 0
    polls = 0

    def stream_wait_value(self, stream, address, value, width, condition):
        def met() -> bool:
            self.polls += 1
            return wait_satisfied(self.value, value, width, condition)
        return met


def test_a_polled_wait_holds_the_work_behind_it_until_the_value_is_met():
    backend = PolledNull()
    ex = StreamExecutor(backend, make_policy("priority"))
    ex.add_client("a", "high")
    ran = []
    ex.submit("a", 0, StreamWaitValue(0x1000, 3, 4, WAIT_EQ))
    ex.submit("a", 0, HostCallback(lambda: ran.append(1)))
    time.sleep(0.05)
    assert ran == [] and backend.polls > 1 and not ex.query_stream("a", 0)
    backend.value = 3
    ex.synchronize_stream("a", 0)
    assert ran == [1]
    ex.submit("a", 0, StreamWaitValue(0x1000, 4, 4, WAIT_EQ))     # never met: removal ends its poll
    time.sleep(0.01)
    ex.remove_client("a")
    polls = backend.polls
    time.sleep(0.05)
    assert backend.polls <= polls + 1
    ex.close()


def test_malformed_operations_are_refused():
    _, _, ex = rig()
    ex.add_client("a")
    with pytest.raises(ValueError, match="aligned to 8 bytes"):
        ex.submit("a", 0, StreamWaitValue(0x1004, 1, 8, WAIT_EQ))
    with pytest.raises(ValueError, match="does not fit 4 bytes"):
        ex.submit("a", 0, StreamWriteValue(0x1000, 1 << 32, 4))
    with pytest.raises(ValueError, match="wait condition 7"):
        ex.submit("a", 0, StreamWaitValue(0x1000, 1, 4, 7))


@pytest.mark.parametrize("current,value,width,condition,met", [
    (5, 5, 4, WAIT_GEQ, True), (4, 5, 4, WAIT_GEQ, False),
    (0x00000002, 0xFFFFFFF0, 4, WAIT_GEQ, True),      # a counter that wrapped is past the value
    (0xFFFFFFF0, 0x00000002, 4, WAIT_GEQ, False),
    (1 << 32, 1, 8, WAIT_GEQ, True), (7, 7, 8, WAIT_EQ, True), (7, 8, 4, WAIT_EQ, False),
    (0b1010, 0b0010, 4, WAIT_AND, True), (0b1010, 0b0101, 4, WAIT_AND, False),
    (0xFFFFFFFE, 0x1, 4, WAIT_NOR, False), (0xFFFFFFFC, 0x1, 4, WAIT_NOR, True),
])
def test_conditions(current, value, width, condition, met):
    assert wait_satisfied(current, value, width, condition) is met


@pytest.mark.parametrize("value,width,condition", [
    (9, 4, WAIT_GEQ), (9, 8, WAIT_EQ), (0b100, 4, WAIT_AND), (0x1, 4, WAIT_NOR), (0, 8, WAIT_NOR)])
def test_the_release_value_satisfies_the_wait(value, width, condition):
    release = satisfying_value(value, width, condition)
    assert release is not None and wait_satisfied(release, value, width, condition)


def test_waits_no_value_satisfies_have_no_release_value():
    assert satisfying_value(0, 4, WAIT_AND) is None
    assert satisfying_value(0xFFFFFFFF, 4, WAIT_NOR) is None

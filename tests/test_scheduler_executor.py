"""The stream executor on the sim backend: stream order behind held kernels,
events across streams, asynchronous errors, client removal mid-flight, and
best-effort kernels that are sliced / preempted many times computing exactly
the right result."""
from __future__ import annotations

import struct
from dataclasses import replace

import numpy as np
import pytest

from tally.protocol.errors import CUDA_ERROR_ILLEGAL_ADDRESS, DeviceError
from tally.backends.sim import SimBackend, sim_module_source
from tally.backends.sim.model import KernelCost
from tally.backends.sim.variants import SimVariantProvider
from tally.scheduler import (ClientGone, EventRecord, GatedCallback, HostCallback, HostGate, Launch, MemcpyDtoD, MemcpyDtoH,
                             MemcpyHtoD, Memset, StreamExecutor, StreamWaitEvent, make_policy)
from tally.scheduler.policy import PolicyError, Schedule, Start
from tally.scheduler.run_mode import RunMode


def add_one(mem, params, grid, block, blocks):
    (ptr,) = struct.unpack_from("<Q", params)
    mem.view(ptr + 4 * blocks.start, 4 * len(blocks)).view(np.uint32)[:] += 1


def double(mem, params, grid, block, blocks):
    (ptr,) = struct.unpack_from("<Q", params)
    mem.view(ptr + 4 * blocks.start, 4 * len(blocks)).view(np.uint32)[:] *= 2


def fault(mem, params, grid, block, blocks):
    raise DeviceError(CUDA_ERROR_ILLEGAL_ADDRESS, "out of bounds")


class Rig:
    def __init__(self, policy="priority", be_transform="auto", **executor_args):
        self.sim = SimBackend()
        self.sim.define_kernel("add_one", (8,), KernelCost(10.0, 1), add_one)
        self.sim.define_kernel("double", (8,), KernelCost(10.0, 1), double)
        self.sim.define_kernel("fault", (8,), KernelCost(1.0), fault)
        self.sim.define_kernel("hp_work", (8,), KernelCost(20.0, 1))
        module = self.sim.module_load(sim_module_source("add_one", "double", "fault", "hp_work"))
        self.fn = {n: self.sim.module_function(module, n) for n in ("add_one", "double", "fault", "hp_work")}
        self.ex = StreamExecutor(self.sim, make_policy(policy), SimVariantProvider(), clock=self.sim.clock,
                                 be_transform=be_transform, **executor_args)

    def launch(self, name, blocks, ptr=0):
        return Launch(self.fn[name], (blocks, 1, 1), (128, 1, 1), 0, struct.pack("<Q", ptr))

    def buffer(self, n_u32):
        return self.sim.mem_alloc(4 * n_u32)

    def keep_hp_busy(self, until_s, period_s=1.2e-3, client="hp"):
        """A high-priority job that submits 1 ms of kernels every period_s
        (shorter than 1 ms: the GPU never goes idle before until_s)."""
        def burst():
            if self.sim.now() < until_s:
                for _ in range(5):
                    self.ex.submit(client, 0, self.launch("hp_work", 1080))
                self.sim.clock.call_at(self.sim.now() + period_s, burst)
        self.sim.clock.call_at(0.0, burst)


def u32(sim, ptr, n):
    return np.frombuffer(sim.memory.read(ptr, 4 * n), np.uint32).tolist()


def test_copy_behind_a_held_kernel_waits_for_it():
    rig = Rig()
    rig.ex.add_client("hp", "high")
    rig.ex.add_client("be")
    rig.keep_hp_busy(until_s=0.02, period_s=0.9e-3)
    rig.sim.run_until(1e-4)                      # the high-priority job is busy until 0.02 s
    buf = rig.buffer(2000)
    out = bytearray(8000)
    rig.ex.submit("be", 0, rig.launch("add_one", 2000, buf))
    rig.ex.submit("be", 0, MemcpyDtoH(memoryview(out), buf, 8000))
    rig.sim.run_until(5e-3)
    assert rig.ex.counters()["ops_queued"] == 2  # held while high-priority work runs
    assert bytes(out) == bytes(8000)
    rig.ex.synchronize_stream("be", 0)
    assert np.frombuffer(out, np.uint32).tolist() == [1] * 2000


@pytest.mark.parametrize("be_transform", ["auto", "slice", "ptb"])
def test_best_effort_kernels_preempted_many_times_compute_exact_results(be_transform):
    rig = Rig(be_transform=be_transform)
    rig.ex.add_client("hp", "high")
    rig.ex.add_client("be")
    rig.keep_hp_busy(until_s=0.05)
    buf = rig.buffer(5000)
    rig.ex.submit("be", 0, MemcpyHtoD(buf, np.arange(5000, dtype=np.uint32).tobytes()))
    for name in ("add_one", "double", "add_one", "double"):   # order matters: (x + 1) * 2 + 1) * 2
        rig.ex.submit("be", 0, rig.launch(name, 5000, buf))
    rig.ex.synchronize_stream("be", 0)
    x = np.arange(5000, dtype=np.uint32)
    assert u32(rig.sim, buf, 5000) == (((x + 1) * 2 + 1) * 2).tolist()
    c = rig.ex.counters()
    if be_transform == "slice":
        assert c["kernels_sliced"] == 4 and c["kernels_ptb"] == 0 and c["slice_launches"] > 20
    elif be_transform == "ptb":
        assert c["kernels_ptb"] == 4 and c["preemptions"] > 5 and c["ptb_launches"] > 9
    else:
        assert c["kernels_sliced"] + c["kernels_ptb"] == 4


@pytest.mark.parametrize("be_transform", ["auto", "slice", "ptb"])
def test_cooperative_best_effort_kernels_run_whole_next_to_high_priority_work(be_transform):
    # The same transformable kernels as above, launched cooperatively: their blocks may
    # wait for each other, so none is sliced, run as PTB or preempted, whatever the
    # transformation asked for.
    rig = Rig(be_transform=be_transform)
    rig.ex.add_client("hp", "high")
    rig.ex.add_client("be")
    rig.keep_hp_busy(until_s=0.05)
    buf = rig.buffer(5000)
    rig.ex.submit("be", 0, MemcpyHtoD(buf, np.arange(5000, dtype=np.uint32).tobytes()))
    for name in ("add_one", "double", "add_one", "double"):
        rig.ex.submit("be", 0, replace(rig.launch(name, 5000, buf), cooperative=True))
    rig.ex.synchronize_stream("be", 0)
    x = np.arange(5000, dtype=np.uint32)
    assert u32(rig.sim, buf, 5000) == (((x + 1) * 2 + 1) * 2).tolist()
    c = rig.ex.counters()
    assert c["kernels_cooperative"] == 4
    assert (c["kernels_sliced"], c["kernels_ptb"], c["preemptions"], c["untransformable"]) == (0, 0, 0, 0), c
    # Running whole for its own reason settles nothing for the same kernel launched otherwise.
    assert not rig.ex.runs_whole("be", rig.launch("add_one", 5000, buf))


def test_fifo_sends_everything_at_once_and_keeps_order():
    rig = Rig(policy="fifo")
    rig.ex.add_client("a")
    buf = rig.buffer(100)
    rig.ex.submit("a", 0, Memset(buf, 3, 4, 100))
    rig.ex.submit("a", 0, rig.launch("double", 100, buf))
    rig.ex.submit("a", 0, rig.launch("add_one", 100, buf))
    assert rig.ex.counters()["ops_queued"] == 0
    rig.ex.synchronize_client("a")
    assert u32(rig.sim, buf, 100) == [7] * 100


def test_stream_wait_event_between_streams_waits_for_the_held_record():
    rig = Rig()
    rig.ex.add_client("hp", "high")
    rig.ex.add_client("be")
    rig.keep_hp_busy(until_s=0.01, period_s=0.9e-3)
    rig.sim.run_until(1e-4)
    buf, copy = rig.buffer(1000), rig.buffer(1000)
    ready = rig.ex.event_create("be")
    rig.ex.submit("be", "a", rig.launch("add_one", 1000, buf))     # held: high priority is busy
    rig.ex.submit("be", "a", EventRecord(ready))
    rig.ex.submit("be", "b", StreamWaitEvent(ready))
    rig.ex.submit("be", "b", MemcpyDtoD(copy, buf, 4000))
    assert not rig.ex.event_query(ready)
    rig.ex.synchronize_stream("be", "b")
    assert u32(rig.sim, copy, 1000) == [1] * 1000
    assert rig.ex.event_query(ready)


def test_an_event_destroyed_right_after_the_wait_still_orders_the_streams():
    """CuPy's DLPack export records an event, makes the consumer's stream wait on it and
    destroys it at once; in CUDA the record and the wait still take effect."""
    rig = Rig()
    rig.ex.add_client("hp", "high")
    rig.ex.add_client("be")
    rig.keep_hp_busy(until_s=0.01, period_s=0.9e-3)
    rig.sim.run_until(1e-4)
    buf, copy = rig.buffer(1000), rig.buffer(1000)
    ready, unwaited = rig.ex.event_create("be"), rig.ex.event_create("be")
    rig.ex.submit("be", "a", rig.launch("add_one", 1000, buf))     # held: high priority is busy
    rig.ex.submit("be", "a", EventRecord(ready))
    rig.ex.submit("be", "a", EventRecord(unwaited))
    rig.ex.submit("be", "b", StreamWaitEvent(ready))
    rig.ex.event_destroy(ready)
    rig.ex.event_destroy(unwaited)
    rig.ex.submit("be", "b", MemcpyDtoD(copy, buf, 4000))
    with pytest.raises(ValueError, match="destroyed"):
        rig.ex.submit("be", "a", EventRecord(ready))
    rig.ex.synchronize_stream("be", "b")
    assert u32(rig.sim, copy, 1000) == [1] * 1000
    rig.ex.synchronize_client("be")
    # Nothing of either event is left once its wait ran: no record, no bookkeeping.
    assert not ready.records and not unwaited.records
    assert rig.ex._client("be").events == []


def test_wait_uses_the_record_submitted_before_it_not_a_later_one():
    rig = Rig(policy="fifo")
    rig.ex.add_client("a")
    buf = rig.buffer(1)
    ev = rig.ex.event_create("a")
    rig.ex.submit("a", "x", EventRecord(ev))                       # completes at once
    rig.ex.submit("a", "y", StreamWaitEvent(ev))
    rig.ex.submit("a", "x", rig.launch("add_one", 1, buf))
    rig.ex.submit("a", "x", EventRecord(ev))                       # later record, after the kernel
    seen = []
    rig.ex.submit("a", "y", HostCallback(lambda: seen.append(rig.sim.memory.read_u32(buf))))
    rig.ex.synchronize_client("a")
    assert seen == [0]                                              # y did not wait for the kernel


def test_event_synchronize_and_elapsed_time():
    rig = Rig(policy="fifo")
    rig.ex.add_client("a")
    start, end = rig.ex.event_create("a"), rig.ex.event_create("a")
    rig.ex.submit("a", 0, EventRecord(start))
    rig.ex.submit("a", 0, rig.launch("hp_work", 216))               # 2 waves of 20 us
    rig.ex.submit("a", 0, EventRecord(end))
    rig.ex.event_synchronize(end)
    assert rig.ex.event_elapsed_ms(start, end) == pytest.approx(0.002 + 0.040)


def test_kernel_error_is_reported_once_at_the_next_synchronization():
    rig = Rig(policy="fifo")
    rig.ex.add_client("a")
    rig.ex.submit("a", 0, rig.launch("fault", 1))
    rig.ex.submit("a", 1, rig.launch("add_one", 1, rig.buffer(1)))
    with pytest.raises(DeviceError) as e:
        rig.ex.synchronize_client("a")
    assert e.value.code == CUDA_ERROR_ILLEGAL_ADDRESS
    rig.ex.synchronize_client("a")
    rig.ex.synchronize_stream("a", 0)
    assert rig.ex.query_stream("a", 0)


def test_error_in_a_sliced_kernel_stops_its_remaining_slices():
    rig = Rig(be_transform="slice")
    rig.ex.add_client("be")
    buf = rig.buffer(1)
    rig.ex.submit("be", 0, rig.launch("fault", 5000))
    rig.ex.submit("be", 0, rig.launch("add_one", 1, buf))           # the stream carries on
    with pytest.raises(DeviceError):
        rig.ex.synchronize_stream("be", 0)
    assert rig.ex.counters()["slice_launches"] == 1
    assert u32(rig.sim, buf, 1) == [1]


def test_query_stream_reports_held_work_as_busy():
    rig = Rig()
    rig.ex.add_client("hp", "high")
    rig.ex.add_client("be")
    rig.keep_hp_busy(until_s=0.01, period_s=0.9e-3)
    rig.sim.run_until(1e-4)
    rig.ex.submit("be", 0, rig.launch("add_one", 10, rig.buffer(10)))
    assert not rig.ex.query_stream("be", 0)
    rig.ex.synchronize_stream("be", 0)
    assert rig.ex.query_stream("be", 0)
    assert rig.sim.now() > 0.009               # it ran only once the high-priority job went idle


def test_remove_client_mid_flight_frees_everything_and_others_carry_on():
    rig = Rig(be_transform="ptb")
    rig.ex.add_client("hp", "high")
    rig.ex.add_client("be1")
    rig.ex.add_client("be2")
    free_before = rig.sim.mem_info()[0]
    buf1, buf2 = rig.buffer(50_000), rig.buffer(3000)
    for _ in range(5):
        rig.ex.submit("be1", 0, rig.launch("add_one", 50_000, buf1))
        rig.ex.submit("be2", 0, rig.launch("add_one", 3000, buf2))
    rig.ex.submit("be1", 0, HostCallback(lambda: pytest.fail("dropped work must not run")))
    rig.sim.run_until(3e-3)
    assert rig.ex.counters()["units_in_flight"] == 1
    rig.ex.remove_client("be1")
    counters = rig.ex.counters()
    assert "be1" not in counters["clients"]
    rig.sim.mem_free(buf1)
    rig.ex.synchronize_client("be2")
    assert u32(rig.sim, buf2, 3000) == [5] * 3000
    with pytest.raises(ValueError, match="unknown client"):
        rig.ex.submit("be1", 0, rig.launch("add_one", 1))
    # the removed client's PTB state and streams are gone; only buf2 is still allocated
    assert rig.sim.mem_info()[0] == free_before - 4 * 3000 - 8     # be2's PTB state remains


def test_malformed_operations_and_unknown_clients_are_rejected_clearly():
    rig = Rig()
    with pytest.raises(ValueError, match="add_client"):
        rig.ex.submit("nobody", 0, rig.launch("add_one", 1))
    rig.ex.add_client("a")
    with pytest.raises(ValueError, match="already registered"):
        rig.ex.add_client("a")
    with pytest.raises(ValueError, match="priority"):
        rig.ex.add_client("b", "urgent")
    with pytest.raises(ValueError, match="grid"):
        rig.ex.submit("a", 0, Launch(rig.fn["add_one"], (0, 1, 1), (1, 1, 1), 0, bytes(8)))
    with pytest.raises(ValueError, match="element size"):
        rig.ex.submit("a", 0, Memset(0, 1, 3, 1))
    with pytest.raises(ValueError, match="not a stream operation"):
        rig.ex.submit("a", 0, "launch please")
    other = rig.ex.event_create("a")
    rig.ex.add_client("b")
    with pytest.raises(ValueError, match="belongs to client"):
        rig.ex.submit("b", 0, EventRecord(other))
    assert rig.ex.counters()["ops_submitted"] == 0


def test_a_policy_that_breaks_its_contract_is_reported():
    class StartsTwice:
        name = "broken"

        def stream_priority(self, client):
            return 0

        def starts_at_once(self, client):
            return False

        def schedule(self, view):
            return Schedule(start=[Start(k.kernel_id) for k in view.waiting] * 2)

        def on_unit_finished(self, unit, now):
            pass

    sim = SimBackend()
    sim.define_kernel("k", (8,), KernelCost(1.0))
    fn = sim.module_function(sim.module_load(sim_module_source("k")), "k")
    ex = StreamExecutor(sim, StartsTwice(), clock=sim.clock)
    ex.add_client("a")
    with pytest.raises(PolicyError, match="started kernel"):
        ex.submit("a", 0, Launch(fn, (1, 1, 1), (1, 1, 1), 0, bytes(8)))


def test_real_time_sim_with_client_threads():
    """`tally-server --backend sim`: the sim follows the wall clock, callbacks
    arrive on its thread, clients submit and synchronize from their own."""
    import threading

    sim = SimBackend(realtime=True)
    try:
        sim.define_kernel("add_one", (8,), KernelCost(20.0, 1), add_one)
        sim.define_kernel("hp_work", (8,), KernelCost(50.0, 1))
        module = sim.module_load(sim_module_source("add_one", "hp_work"))
        add, hp = (sim.module_function(module, n) for n in ("add_one", "hp_work"))
        ex = StreamExecutor(sim, make_policy("priority"), SimVariantProvider(), clock=sim.clock)
        ex.add_client("hp", "high")
        ex.add_client("be")
        buf = sim.mem_alloc(4 * 20_000)
        errors = []

        def high_priority():
            try:
                for _ in range(20):
                    for _ in range(3):
                        ex.submit("hp", 0, Launch(hp, (216, 1, 1), (128, 1, 1), 0, bytes(8)))
                    ex.synchronize_stream("hp", 0)
            except Exception as e:      # surfaced below
                errors.append(e)

        thread = threading.Thread(target=high_priority)
        thread.start()
        for _ in range(3):
            ex.submit("be", 0, Launch(add, (20_000, 1, 1), (128, 1, 1), 0, struct.pack("<Q", buf)))
        ex.synchronize_client("be")
        thread.join(timeout=30)
        assert not thread.is_alive() and errors == []
        assert u32(sim, buf, 20_000) == [3] * 20_000
        assert ex.counters()["units_in_flight"] == 0
        ex.close()
    finally:
        sim.close()


def test_a_wait_for_a_client_removed_meanwhile_ends_with_client_gone():
    """A job killed while it waits: the waiting thread is told its client is gone
    (never that its stream completed), and later calls naming the client are too."""
    import threading
    import time

    sim = SimBackend(realtime=True)
    try:
        ex = StreamExecutor(sim, make_policy("priority"), clock=sim.clock)
        ex.add_client("be")
        ex.submit("be", 0, GatedCallback(lambda: None, HostGate()))    # holds the stream: never opened
        outcome = []

        def wait():
            try:
                ex.synchronize_stream("be", 0)
                outcome.append("completed")
            except ClientGone:
                outcome.append("gone")

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.2)
        assert waiter.is_alive() and outcome == []
        ex.remove_client("be")
        waiter.join(timeout=10)
        assert outcome == ["gone"]
        for call in (lambda: ex.synchronize_stream("be", 0), lambda: ex.take_kernel_output("be", 0),
                     lambda: ex.submit("be", 0, HostCallback(lambda: None))):
            with pytest.raises(ClientGone, match="unknown client"):
                call()
        ex.close()
    finally:
        sim.close()


def test_sm_percent_caps_ptb_workers_and_none_runs_kernels_whole():
    rig = Rig(be_transform="ptb")
    rig.ex.add_client("be", sm_percent=25)
    buf = rig.buffer(5000)
    for _ in range(6):
        rig.ex.submit("be", 0, rig.launch("add_one", 5000, buf))
    rig.ex.synchronize_client("be")
    assert u32(rig.sim, buf, 5000) == [6] * 5000
    measured = rig.ex.profiler.measurements("add_one|5000x1x1|128x1x1|0")
    assert measured and all(c.kind is not RunMode.PTB or c.size <= 27 for c in measured)   # 25% of 108 SMs

    whole = Rig(be_transform="none")
    whole.ex.add_client("be")
    for _ in range(3):
        whole.ex.submit("be", 0, whole.launch("add_one", 5000, whole.buffer(5000)))
    whole.ex.synchronize_client("be")
    c = whole.ex.counters()
    assert (c["kernels_whole"], c["kernels_sliced"], c["kernels_ptb"], c["untransformable"]) == (3, 0, 0, 0)


def test_batched_completions_of_whole_kernels_are_exact():
    """High-priority whole kernels launched back to back ride on one watched
    completion (device_units.py). Every one of them must still complete, in
    order, no earlier than the device ran it, and a best-effort kernel may start
    only once the last of them has finished."""
    rig = Rig()
    ran: list[tuple[str, float]] = []

    def note(tag):
        def effect(mem, params, grid, block, blocks):
            ran.append((tag, rig.sim.now()))
        return effect

    rig.sim.define_kernel("hp_note", (8,), KernelCost(20.0, 1), note("hp"))
    rig.sim.define_kernel("be_note", (8,), KernelCost(10.0, 1), note("be"))
    module = rig.sim.module_load(sim_module_source("hp_note", "be_note"))
    hp_note, be_note = (rig.sim.module_function(module, n) for n in ("hp_note", "be_note"))
    rig.ex.add_client("hp", "high")
    rig.ex.add_client("be")
    hp_event = rig.ex.event_create("hp")
    for i in range(30):
        rig.ex.submit("hp", 0, Launch(hp_note, (1080, 1, 1), (128, 1, 1), 0, struct.pack("<Q", i)))
        if i == 14:
            rig.ex.submit("hp", 0, EventRecord(hp_event))
    rig.ex.submit("be", 0, Launch(be_note, (100, 1, 1), (128, 1, 1), 0, struct.pack("<Q", 0)))
    rig.ex.event_synchronize(hp_event)
    assert [tag for tag, _ in ran] == ["hp"] * 15            # the record waited for exactly 15 kernels
    rig.ex.synchronize_stream("hp", 0)
    assert rig.ex.counters()["clients"]["hp"]["kernels_completed"] == 30
    rig.ex.synchronize_stream("be", 0)
    hp_times = [t for tag, t in ran if tag == "hp"]
    be_times = [t for tag, t in ran if tag == "be"]
    assert len(hp_times) == 30 and hp_times == sorted(hp_times)
    assert be_times and min(be_times) > max(hp_times)
    c = rig.ex.counters()
    assert c["units_in_flight"] == 0 and c["clients"]["be"]["kernels_completed"] == 1
    assert all(not s.lane.riders and s.inflight == 0 for cl in rig.ex._clients.values() for s in cl.streams.values())


def test_gated_callback_holds_the_stream_in_the_executor_until_its_gate_opens():
    # A job's host function: the callback runs after the work before it, returns at
    # once, and the work behind it waits in the executor (not on a device thread).
    rig = Rig(policy="fifo")
    rig.ex.add_client("a")
    buf = rig.buffer(64)
    gate, seen = HostGate(), []
    rig.ex.submit("a", 0, rig.launch("add_one", 64, buf))
    rig.ex.submit("a", 0, GatedCallback(lambda: seen.append(u32(rig.sim, buf, 1)[0]), gate))
    rig.ex.submit("a", 0, rig.launch("double", 64, buf))
    rig.sim.run_until(1e-3)
    assert seen == [1]                                   # after the first kernel
    assert u32(rig.sim, buf, 64) == [1] * 64             # the second one is held
    assert rig.ex.counters()["ops_queued"] == 2
    assert not rig.ex.query_stream("a", 0)
    rig.ex.open_gate(gate)
    rig.ex.synchronize_client("a")
    assert u32(rig.sim, buf, 64) == [2] * 64
    # A gate opened before the stream reaches it lets the stream straight through.
    early = HostGate()
    rig.ex.open_gate(early)
    rig.ex.submit("a", 0, GatedCallback(lambda: seen.append("early"), early))
    rig.ex.submit("a", 0, rig.launch("add_one", 64, buf))
    rig.ex.synchronize_client("a")
    assert seen == [1, "early"] and u32(rig.sim, buf, 64) == [3] * 64


def test_a_record_released_later_unblocks_a_wait_on_a_stream_drained_before_it():
    # Stream "b" (made first, so drained first) waits on an event whose record sits
    # behind a gate on stream "a". Opening the gate dispatches the record; the same
    # pump must then let "b" go on, not leave it for some later pump.
    rig = Rig(policy="fifo")
    rig.ex.add_client("c")
    buf = rig.buffer(64)
    ev, gate = rig.ex.event_create("c"), HostGate()
    rig.ex.submit("c", "b", Memset(buf, 0, 4, 64))              # makes "b" the first stream
    rig.ex.submit("c", "a", GatedCallback(lambda: None, gate))
    rig.ex.submit("c", "a", EventRecord(ev))
    rig.ex.submit("c", "b", StreamWaitEvent(ev))
    rig.ex.submit("c", "b", rig.launch("add_one", 64, buf))
    rig.sim.run_until(1e-3)
    assert u32(rig.sim, buf, 64) == [0] * 64                     # held behind the gate
    rig.ex.open_gate(gate)
    rig.sim.run_until(2e-3)                                      # no other submission or completion
    assert u32(rig.sim, buf, 64) == [1] * 64
    assert rig.ex.counters()["ops_queued"] == 0


class _DestroyAwareBackend:
    """The null backend, except that synchronizing a destroyed stream fails as on
    a GPU (CUDA_ERROR_INVALID_HANDLE), and one synchronization can be held open."""

    def __init__(self):
        import threading

        from tally.backends.null import NullBackend
        self._null = NullBackend()
        self.destroyed: set[int] = set()
        self.hold = False
        self.entered, self.release = threading.Event(), threading.Event()

    def __getattr__(self, name):
        return getattr(self._null, name)

    def stream_synchronize(self, stream) -> None:
        if self.hold:
            self.hold = False
            self.entered.set()
            self.release.wait(10)
        if id(stream) in self.destroyed:
            raise DeviceError(400, "stream was destroyed")

    def stream_destroy(self, stream) -> None:
        self.destroyed.add(id(stream))


def test_a_stream_is_not_destroyed_while_another_thread_synchronizes_it():
    # Seen with the cuda backend: freeing memory drains every stream of the job on
    # one thread while cuStreamDestroy's release runs on another; the release used
    # to destroy the backend stream under the drain, whose sync then failed (400).
    import threading
    import time

    backend = _DestroyAwareBackend()
    ex = StreamExecutor(backend, make_policy("priority"))
    ex.add_client("job", "high")
    ptr = backend.mem_alloc(64)
    ex.submit("job", 7, Memset(ptr, 0, 1, 64))
    ex.synchronize_stream("job", 7)
    backend.hold = True
    errors = []

    def drain():
        try:
            ex.synchronize_stream("job", 7)
        except DeviceError as e:
            errors.append(e)

    draining = threading.Thread(target=drain)
    draining.start()
    assert backend.entered.wait(10)
    releasing = threading.Thread(target=ex.release_stream, args=("job", 7))
    releasing.start()
    time.sleep(0.2)
    assert backend.destroyed == set()          # the release waits for the drain's backend sync
    backend.release.set()
    draining.join(10)
    releasing.join(10)
    assert errors == [] and len(backend.destroyed) == 2      # the work and notify streams
    ex.synchronize_stream("job", 7)            # the key is gone: nothing to wait for, no error
    ex.remove_client("job")
    assert len(backend.destroyed) == 2         # not destroyed twice

"""The `sim` backend as a DeviceBackend: bytes really move, streams keep order,
events and errors behave as CUDA's do, transformed launches follow the launch
contract, and the discrete clock is deterministic."""
from __future__ import annotations

import struct
import time

import numpy as np
import pytest

from ptx_passes.launch_plan import PTB_STATE_BYTES
from tally.backends.base import ModuleSource
from tally.protocol.errors import (
    CUDA_ERROR_ILLEGAL_ADDRESS,
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_NOT_FOUND,
    CUDA_ERROR_NOT_READY,
    DeviceError,
)
from tally.backends.sim import SimBackend, sim_module_source
from tally.backends.sim.loop import SimDeadlock
from tally.backends.sim.model import A100_SXM4_40GB, KernelCost
from tally.backends.sim.variants import SimVariantProvider

PTX = """
.version 8.0
.target sm_80
.address_size 64
.global .align 4 .b8 table[64];
.visible .entry kp(
    .param .u8 kp_param_0,
    .param .align 8 .b8 kp_param_1[24],
    .param .align 16 .b8 kp_param_2[16],
    .param .u16 kp_param_3,
    .param .align 16 .b8 kp_param_4[20],
    .param .u64 kp_param_5,
    .param .u8 kp_param_6
)
{ ret; }
.visible .entry other(.param .u64 p0) { ret; }
"""


def add_one(mem, params, grid, block, blocks):
    """Original kernel: block b adds 1 to the b-th u32 of the buffer."""
    (ptr,) = struct.unpack_from("<Q", params)
    mem.view(ptr + 4 * blocks.start, 4 * len(blocks)).view(np.uint32)[:] += 1


def fault(mem, params, grid, block, blocks):
    raise DeviceError(CUDA_ERROR_ILLEGAL_ADDRESS, "kernel read out of bounds")


@pytest.fixture
def sim():
    backend = SimBackend()
    backend.define_kernel("add_one", (8,), KernelCost(block_time_us=10.0, max_blocks_per_sm=1), add_one)
    backend.define_kernel("fault", (8,), KernelCost(block_time_us=1.0), fault)
    return backend


def _fn(sim, name):
    return sim.module_function(sim.module_load(sim_module_source(name)), name)


def test_ptx_entries_and_globals_are_read():
    sim = SimBackend()
    module = sim.module_load(ModuleSource(original=b"", ptx=PTX))
    kp = sim.module_function(module, "kp")
    # the layout DESIGN.md measured for this signature
    assert [(p.offset, p.size) for p in kp.params] == [(0, 1), (8, 24), (32, 16), (48, 2), (64, 20),
                                                       (88, 8), (96, 1)]
    ptr, size = sim.module_global(module, "table")
    assert size == 64 and sim.memory.read(ptr, 64) == bytes(64)
    with pytest.raises(DeviceError) as e:
        sim.module_function(module, "missing")
    assert e.value.code == CUDA_ERROR_NOT_FOUND


def test_copies_move_bytes_in_stream_order(sim):
    s = sim.stream_create()
    a, b = sim.mem_alloc(16), sim.mem_alloc(16)
    out = bytearray(16)
    sim.memcpy_htod_async(a, memoryview(b"0123456789abcdef"), s)
    sim.memcpy_dtod_async(b, a, 16, s)
    sim.memset_async(b, 0x2A2A, 2, 2, s)
    sim.memcpy_dtoh_async(memoryview(out), b, s)
    assert out == bytes(16)                 # nothing ran yet: the discrete clock has not moved
    sim.stream_synchronize(s)
    assert bytes(out) == b"****456789abcdef"


def test_kernel_time_follows_the_wave_model(sim):
    s = sim.stream_create()
    buf = sim.mem_alloc(4 * 1000)
    sim.launch(_fn(sim, "add_one"), (1000, 1, 1), (128, 1, 1), 0, s, struct.pack("<Q", buf))
    sim.stream_synchronize(s)
    waves = -(-1000 // A100_SXM4_40GB.sm_count)          # one block per SM
    assert sim.loop.now_ns == int(A100_SXM4_40GB.launch_overhead_us * 1000) + waves * 10_000
    assert np.frombuffer(sim.memory.read(buf, 4000), np.uint32).tolist() == [1] * 1000


def test_sliced_and_ptb_launches_cover_exactly_their_blocks(sim):
    fn = _fn(sim, "add_one")
    variants = SimVariantProvider()
    sliced, ptb = variants.sliced(fn), variants.ptb(fn)
    s = sim.stream_create()
    grid = (10, 5, 1)
    buf = sim.mem_alloc(4 * 50)
    params = struct.pack("<Q", buf)
    for piece in sliced.plan.slices(grid, 3):
        sim.launch(sliced.function, (piece.count, 1, 1), (64, 1, 1), 0, s,
                   sliced.plan.params(params, grid, piece.block_offset))
    state = sim.mem_alloc(PTB_STATE_BYTES)
    sim.launch(ptb.function, (7, 1, 1), (64, 1, 1), 0, s, ptb.plan.params(params, grid, state))
    readback = bytearray(8)
    sim.memcpy_dtoh_async(memoryview(readback), state, s)
    sim.stream_synchronize(s)
    assert np.frombuffer(sim.memory.read(buf, 200), np.uint32).tolist() == [2] * 50
    assert ptb.plan.is_complete(bytes(readback), grid)


def test_ptb_preempted_and_resumed_runs_every_block_once(sim):
    fn = _fn(sim, "add_one")
    ptb = SimVariantProvider().ptb(fn)
    work, control = sim.stream_create(), sim.stream_create(priority=-1)
    grid = (5000, 1, 1)
    buf = sim.mem_alloc(4 * 5000)
    state = sim.mem_alloc(PTB_STATE_BYTES)
    params = ptb.plan.params(struct.pack("<Q", buf), grid, state)
    readback = bytearray(8)
    launches = 0
    while True:
        sim.memcpy_htod_async(state + 4, memoryview(bytes(4)), work)
        sim.launch(ptb.function, (108, 1, 1), (128, 1, 1), 0, work, params)
        sim.memcpy_dtoh_async(memoryview(readback), state, work)
        launches += 1
        sim.run_until(sim.now() + 30e-6)                         # let it run a little
        sim.memcpy_htod_async(state + 4, memoryview((1).to_bytes(4, "little")), control)
        sim.stream_synchronize(work)
        if ptb.plan.is_complete(bytes(readback), grid):
            break
    assert launches > 5
    assert np.frombuffer(sim.memory.read(buf, 20000), np.uint32).tolist() == [1] * 5000


def test_events_order_streams_and_time_them(sim):
    a, b = sim.stream_create(), sim.stream_create()
    start, end, done = sim.event_create(), sim.event_create(), sim.event_create(timing=False)
    buf = sim.mem_alloc(4 * 216)
    out = bytearray(4 * 216)
    sim.event_record(start, a)
    sim.launch(_fn(sim, "add_one"), (216, 1, 1), (128, 1, 1), 0, a, struct.pack("<Q", buf))
    sim.event_record(end, a)
    sim.event_record(done, a)
    sim.stream_wait_event(b, done)
    sim.memcpy_dtoh_async(memoryview(out), buf, b)       # must see the kernel's result
    assert not sim.event_query(end)
    with pytest.raises(DeviceError) as e:
        sim.event_elapsed_ms(start, end)
    assert e.value.code == CUDA_ERROR_NOT_READY
    sim.stream_synchronize(b)
    assert np.frombuffer(out, np.uint32).tolist() == [1] * 216
    assert sim.event_query(end)
    assert sim.event_elapsed_ms(start, end) == pytest.approx(0.002 + 2 * 0.010)


def test_wait_captures_the_record_made_before_it(sim):
    a, b, c = sim.stream_create(), sim.stream_create(), sim.stream_create()
    ev = sim.event_create()
    sim.event_record(ev, a)                      # completes at once
    sim.stream_wait_event(b, ev)                 # waits for that record only
    buf = sim.mem_alloc(4 * 108)
    sim.launch(_fn(sim, "add_one"), (108, 1, 1), (128, 1, 1), 0, c, struct.pack("<Q", buf))
    sim.event_record(ev, c)                      # a later record, pending for 12 us
    out = bytearray(4)
    sim.memcpy_dtoh_async(memoryview(out), buf, b)
    sim.stream_synchronize(b)
    assert bytes(out) == bytes(4)                # b did not wait for the later record


def test_kernel_error_is_raised_once_at_the_next_synchronization(sim):
    s, other = sim.stream_create(), sim.stream_create()
    sim.launch(_fn(sim, "fault"), (1, 1, 1), (32, 1, 1), 0, s, bytes(8))
    sim.stream_synchronize(other)                # other streams are unaffected
    with pytest.raises(DeviceError) as e:
        sim.stream_synchronize(s)
    assert e.value.code == CUDA_ERROR_ILLEGAL_ADDRESS
    sim.stream_synchronize(s)                    # reported once


def test_bad_arguments_fail_immediately(sim):
    s = sim.stream_create()
    fn = _fn(sim, "add_one")
    with pytest.raises(DeviceError) as e:
        sim.launch(fn, (1, 1, 1), (2048, 1, 1), 0, s, bytes(8))
    assert e.value.code == CUDA_ERROR_INVALID_VALUE and "threads" in e.value.message
    with pytest.raises(DeviceError):
        sim.launch(fn, (1, 1, 1), (32, 1, 1), 0, s, bytes(4))         # wrong parameter size
    with pytest.raises(DeviceError) as e:
        sim.memcpy_htod_async(0x1234, memoryview(b"x"), s)
    assert e.value.code == CUDA_ERROR_INVALID_VALUE
    with pytest.raises(DeviceError):
        sim.mem_free(0x1234)
    assert sim.stream_query(s)


def test_memory_accounting_and_out_of_memory(sim):
    free0, total = sim.mem_info()
    ptr = sim.mem_alloc(1 << 20)
    assert sim.mem_info() == (free0 - (1 << 20), total)
    sim.mem_free(ptr)
    assert sim.mem_info() == (free0, total)
    with pytest.raises(DeviceError):
        sim.mem_alloc(total + 1)


def test_host_callback_blocks_later_work_until_it_returns(sim):
    s = sim.stream_create()
    seen = []
    buf = sim.mem_alloc(4)
    sim.host_callback(s, lambda: seen.append(("callback", sim.now())))
    sim.memset_async(buf, 7, 4, 1, s)
    sim.host_callback(s, lambda: seen.append(("after", sim.memory.read_u32(buf))))
    sim.stream_synchronize(s)
    assert seen[0] == ("callback", pytest.approx(A100_SXM4_40GB.callback_latency_us / 1e6))
    assert seen[1] == ("after", 7)


def test_discrete_clock_is_deterministic():
    def program():
        backend = SimBackend()
        backend.define_kernel("add_one", (8,), KernelCost(block_time_us=3.0, max_blocks_per_sm=4), add_one)
        fn = _fn(backend, "add_one")
        streams = [backend.stream_create(priority=-(i % 2)) for i in range(4)]
        buf = backend.mem_alloc(4 * 5000)
        times = []
        for i, s in enumerate(streams):
            for k in range(5):
                backend.launch(fn, (1000 + 137 * i + k, 1, 1), (64 * (i + 1), 1, 1), 0, s,
                               struct.pack("<Q", buf))
            backend.host_callback(s, lambda i=i: times.append((i, backend.loop.now_ns)))
        backend.synchronize()
        return times, backend.memory.read(buf, 20000)

    assert program() == program()


def test_waiting_for_something_that_cannot_happen_is_reported(sim):
    s = sim.stream_create()
    ev = sim.event_create()
    sim.event_record(ev, s)
    ev.pending.add(99)                           # a record that will never run
    ev.record_gen = 99
    with pytest.raises(SimDeadlock):
        sim.event_synchronize(ev)


def test_realtime_mode_follows_the_wall_clock():
    backend = SimBackend(realtime=True)
    try:
        backend.define_kernel("slow", (8,), KernelCost(block_time_us=30_000.0))
        fn = _fn(backend, "slow")
        s = backend.stream_create()
        t0 = time.monotonic()
        backend.launch(fn, (1, 1, 1), (32, 1, 1), 0, s, bytes(8))
        assert not backend.stream_query(s)
        backend.stream_synchronize(s)
        elapsed = time.monotonic() - t0
        assert 0.025 <= elapsed < 1.0
        assert backend.now() >= 0.030
    finally:
        backend.close()


def test_realtime_waiters_wake_when_a_host_callback_finishes_last():
    # the callback's completion is not a loop event: it must still wake waiters
    backend = SimBackend(realtime=True)
    try:
        s = backend.stream_create()
        ran = []
        backend.host_callback(s, lambda: (time.sleep(0.05), ran.append(1)))
        t0 = time.monotonic()
        backend.stream_synchronize(s)
        assert ran == [1] and time.monotonic() - t0 < 2.0
    finally:
        backend.close()


def test_realtime_blocking_host_callbacks_do_not_hold_up_other_streams():
    import threading

    backend = SimBackend(realtime=True)
    try:
        a, b = backend.stream_create(), backend.stream_create()
        release = threading.Event()
        backend.host_callback(a, release.wait)         # a job's host function, not answered yet
        backend.host_callback(b, lambda: None)
        backend.stream_synchronize(b)                  # must not wait for stream a's callback
        assert not backend.stream_query(a)
        release.set()
        backend.stream_synchronize(a)
    finally:
        backend.close()


def test_kernel_costs_come_from_names():
    from tally.backends.sim.model import DEFAULT_KERNEL_COST, KernelCostTable

    table = KernelCostTable()
    assert not table.lookup("sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x32").transformable
    assert table.lookup("_ZN2at6native29vectorized_elementwise_kernelILi4E").block_time_us == 3.0
    assert table.lookup("my_kernel") == DEFAULT_KERNEL_COST
    mine = KernelCost(block_time_us=99.0)
    table.add("*gemm*", mine)                   # user entries win over the built-in patterns
    table.add("exact_name", KernelCost(block_time_us=1.0))
    assert table.lookup("ampere_sgemm_128x64_nn") == mine
    assert table.lookup("exact_name").block_time_us == 1.0

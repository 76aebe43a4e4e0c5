"""Streams, events, memory operations and modules of the emulator device:
in-order streams that run concurrently (a kernel spinning on a volatile flag
sees another stream's write), events with timing, cross-stream waits, host
callbacks, atomics from concurrent kernels, globals, printf, shutdown."""
from __future__ import annotations

import struct
import threading
import time

import numpy as np
import pytest
from ptx_corpus import CORPUS_DIR, compile_ptx

from tally.backends.base import ModuleSource
from tally.protocol.errors import (
    CUDA_ERROR_INVALID_HANDLE,
    CUDA_ERROR_LAUNCH_FAILED,
    CUDA_ERROR_NOT_READY,
    CUDA_ERROR_UNKNOWN,
    DeviceError,
)
from tally.backends.emulator import EmulatorBackend

KERNELS_PTX = """
.version 8.0
.target sm_80
.address_size 64

.visible .entry wait_for_flag(.param .u64 flag, .param .u64 out)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<3>;
	ld.param.u64 	%rd1, [flag];
	ld.param.u64 	%rd2, [out];
$L_spin:
	ld.volatile.global.u32 	%r1, [%rd1];
	setp.eq.u32 	%p1, %r1, 0;
	@%p1 bra 	$L_spin;
	st.global.u32 	[%rd2], %r1;
	ret;
}

.visible .entry add_one(.param .u64 counter)
{
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<2>;
	ld.param.u64 	%rd1, [counter];
	atom.global.add.u32 	%r1, [%rd1], 1;
	ret;
}
"""


@pytest.fixture(scope="module")
def backend():
    b = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=30)
    yield b
    b.close()


@pytest.fixture(scope="module")
def kernels(backend):
    return backend.module_load(ModuleSource(original=KERNELS_PTX.encode(), ptx=KERNELS_PTX))


def _read_u32(backend, ptr, stream, count=1) -> np.ndarray:
    out = np.zeros(count, np.uint32)
    backend.memcpy_dtoh_async(memoryview(out), ptr, stream)
    backend.stream_synchronize(stream)
    return out


def _gate_callback(gate: threading.Event):
    def wait():
        assert gate.wait(10), "test gate never opened"
    return wait


def test_describe_and_memory_info(backend):
    d = backend.describe()
    assert d.name == "tally emulator" and d.compute_capability == (9, 0) and d.sm_count == 8
    assert d.attributes[10] == 32                     # CU_DEVICE_ATTRIBUTE_WARP_SIZE
    assert d.attributes[16] == 8                      # MULTIPROCESSOR_COUNT
    free0, total = backend.mem_info()
    assert total == 16 << 30 and free0 <= total
    ptr = backend.mem_alloc(1 << 20)
    assert ptr % 256 == 0 and ptr >= 0x7F00_0000_0000
    assert backend.mem_info()[0] == free0 - (1 << 20)
    backend.mem_free(ptr)
    assert backend.mem_info()[0] == free0


def test_memset_widths_and_device_copies(backend):
    s = backend.stream_create()
    a, b = backend.mem_alloc(64), backend.mem_alloc(64)
    backend.memset_async(a, 0xAB, 1, 64, s)
    backend.memset_async(a + 16, 0x1234, 2, 8, s)
    backend.memset_async(a + 32, 0xDEADBEEF, 4, 4, s)
    backend.memcpy_dtod_async(b, a, 64, s)
    out = np.zeros(64, np.uint8)
    backend.memcpy_dtoh_async(memoryview(out), b, s)
    backend.stream_synchronize(s)
    want = np.full(64, 0xAB, np.uint8)
    want[16:32] = np.frombuffer(struct.pack("<8H", *[0x1234] * 8), np.uint8)
    want[32:48] = np.frombuffer(struct.pack("<4I", *[0xDEADBEEF] * 4), np.uint8)
    np.testing.assert_array_equal(out, want)
    backend.mem_free(a)
    backend.mem_free(b)
    backend.stream_destroy(s)


def test_stream_runs_operations_in_order(backend, kernels):
    s = backend.stream_create()
    counter = backend.mem_alloc(4)
    seen = []
    backend.memset_async(counter, 0, 4, 1, s)
    backend.launch(backend.module_function(kernels, "add_one"), (4, 1, 1), (256, 1, 1), 0, s,
                   struct.pack("<Q", counter))
    out = np.zeros(1, np.uint32)
    backend.memcpy_dtoh_async(memoryview(out), counter, s)
    backend.host_callback(s, lambda: seen.append(int(out[0])))
    backend.memset_async(counter, 7, 4, 1, s)
    backend.memcpy_dtoh_async(memoryview(out), counter, s)
    backend.stream_synchronize(s)
    assert seen == [1024] and out[0] == 7
    backend.mem_free(counter)
    backend.stream_destroy(s)


def test_streams_run_concurrently_and_volatile_loads_see_other_streams(backend, kernels):
    """A kernel spinning on a flag finishes only because another stream writes
    the flag while it runs (as a PTB kernel sees a preemption request)."""
    spinning, writer = backend.stream_create(), backend.stream_create()
    flag, out = backend.mem_alloc(4), backend.mem_alloc(4)
    backend.memset_async(flag, 0, 4, 1, spinning)
    backend.launch(backend.module_function(kernels, "wait_for_flag"), (1, 1, 1), (1, 1, 1), 0, spinning,
                   struct.pack("<QQ", flag, out))
    time.sleep(0.05)
    assert not backend.stream_query(spinning)            # still spinning
    backend.memcpy_htod_async(flag, memoryview(struct.pack("<I", 5)), writer)
    backend.stream_synchronize(writer)
    backend.stream_synchronize(spinning)
    assert _read_u32(backend, out, spinning)[0] == 5
    for p in (flag, out):
        backend.mem_free(p)
    backend.stream_destroy(spinning)
    backend.stream_destroy(writer)


def test_atomics_from_concurrent_kernels(backend, kernels):
    streams = [backend.stream_create() for _ in range(3)]
    counter = backend.mem_alloc(4)
    backend.memset_async(counter, 0, 4, 1, streams[0])
    backend.stream_synchronize(streams[0])
    fn = backend.module_function(kernels, "add_one")
    for s in streams:
        backend.launch(fn, (32, 1, 1), (256, 1, 1), 0, s, struct.pack("<Q", counter))
    backend.synchronize()
    assert _read_u32(backend, counter, streams[0])[0] == 3 * 32 * 256
    backend.mem_free(counter)
    for s in streams:
        backend.stream_destroy(s)


def test_events_record_query_synchronize_and_time(backend):
    s = backend.stream_create()
    start, end = backend.event_create(), backend.event_create()
    assert backend.event_query(start)                    # never recorded: complete
    gate = threading.Event()
    backend.event_record(start, s)
    backend.host_callback(s, _gate_callback(gate))
    backend.host_callback(s, lambda: time.sleep(0.05))
    backend.event_record(end, s)
    backend.event_synchronize(start)
    assert backend.event_query(start) and not backend.event_query(end)
    assert not backend.stream_query(s)
    with pytest.raises(DeviceError) as failure:
        backend.event_elapsed_ms(start, end)
    assert failure.value.code == CUDA_ERROR_NOT_READY
    gate.set()
    backend.event_synchronize(end)
    assert backend.event_query(end)
    elapsed = backend.event_elapsed_ms(start, end)
    assert 45 <= elapsed < 5000
    backend.stream_synchronize(s)
    assert backend.stream_query(s)
    backend.stream_destroy(s)


def test_event_timing_errors(backend):
    s = backend.stream_create()
    timed, untimed, unrecorded = backend.event_create(), backend.event_create(timing=False), backend.event_create()
    backend.event_record(timed, s)
    backend.event_record(untimed, s)
    backend.stream_synchronize(s)
    for a, b in ((timed, untimed), (timed, unrecorded)):
        with pytest.raises(DeviceError) as failure:
            backend.event_elapsed_ms(a, b)
        assert failure.value.code == CUDA_ERROR_INVALID_HANDLE
    backend.stream_destroy(s)


def test_stream_wait_event_orders_work_across_streams(backend):
    producer, consumer = backend.stream_create(), backend.stream_create()
    value = backend.mem_alloc(4)
    backend.memset_async(value, 0, 4, 1, producer)
    backend.stream_synchronize(producer)
    ready = backend.event_create()
    gate = threading.Event()
    backend.host_callback(producer, _gate_callback(gate))
    backend.memset_async(value, 7, 4, 1, producer)
    backend.event_record(ready, producer)
    backend.stream_wait_event(consumer, ready)
    out = np.zeros(1, np.uint32)
    backend.memcpy_dtoh_async(memoryview(out), value, consumer)
    time.sleep(0.05)
    assert not backend.stream_query(consumer)            # held by the event
    gate.set()
    backend.stream_synchronize(consumer)
    assert out[0] == 7
    # Waiting on an event never recorded does not block.
    backend.stream_wait_event(consumer, backend.event_create())
    backend.stream_synchronize(consumer)
    backend.mem_free(value)
    backend.stream_destroy(producer)
    backend.stream_destroy(consumer)


def test_wait_keeps_the_record_it_captured_when_the_event_is_recorded_again(backend):
    # cuStreamWaitEvent waits for the record current at the call; recording the
    # event again elsewhere (the executor reuses its internal events so) must not
    # release the wait when that later record completes first.
    held, other, waiter = backend.stream_create(), backend.stream_create(), backend.stream_create()
    value = backend.mem_alloc(4)
    backend.memset_async(value, 0, 4, 1, held)
    backend.stream_synchronize(held)
    event = backend.event_create(timing=False)
    gate = threading.Event()
    backend.host_callback(held, _gate_callback(gate))
    backend.memset_async(value, 7, 4, 1, held)
    backend.event_record(event, held)                    # record 1: behind the gate
    backend.stream_wait_event(waiter, event)             # captures record 1
    out = np.zeros(1, np.uint32)
    backend.memcpy_dtoh_async(memoryview(out), value, waiter)
    backend.event_record(event, other)                   # record 2: completes at once
    backend.stream_synchronize(other)
    assert backend.event_query(event)                    # the latest record is complete
    time.sleep(0.05)
    assert not backend.stream_query(waiter)              # still held by record 1
    gate.set()
    backend.stream_synchronize(waiter)
    assert out[0] == 7
    # And the other way round: the latest record is what queries and syncs see.
    gate2 = threading.Event()
    backend.event_record(event, other)
    backend.host_callback(held, _gate_callback(gate2))
    backend.event_record(event, held)
    backend.stream_synchronize(other)
    assert not backend.event_query(event)
    gate2.set()
    backend.event_synchronize(event)
    assert backend.event_query(event)
    backend.mem_free(value)
    for s in (held, other, waiter):
        backend.stream_destroy(s)


def test_failing_host_callback_is_reported_on_its_stream(backend):
    s = backend.stream_create()
    ran = []

    def boom():
        raise ValueError("callback exploded")
    backend.host_callback(s, boom)
    backend.host_callback(s, lambda: ran.append(True))
    with pytest.raises(DeviceError) as failure:
        backend.stream_synchronize(s)
    assert failure.value.code == CUDA_ERROR_UNKNOWN and "callback exploded" in failure.value.message
    assert ran == [True]
    backend.stream_synchronize(s)
    backend.stream_destroy(s)


def test_destroyed_stream_finishes_its_work(backend, kernels):
    s = backend.stream_create()
    counter = backend.mem_alloc(4)
    backend.memset_async(counter, 0, 4, 1, s)
    backend.launch(backend.module_function(kernels, "add_one"), (8, 1, 1), (128, 1, 1), 0, s,
                   struct.pack("<Q", counter))
    backend.stream_destroy(s)
    backend.synchronize()
    other = backend.stream_create()
    assert _read_u32(backend, counter, other)[0] == 1024
    backend.mem_free(counter)
    backend.stream_destroy(other)


def test_module_globals_and_constants(backend):
    ptx = compile_ptx(CORPUS_DIR / "device_global.cu", arch="sm_90")
    module = backend.module_load(ModuleSource(original=ptx.encode(), ptx=ptx))
    s = backend.stream_create()
    ptr, size = backend.module_global(module, "offsets_table")
    assert size == 32
    np.testing.assert_array_equal(_read_u32(backend, ptr, s, 8), [0, 1, 1, 2, 3, 5, 8, 13])
    scale_ptr, scale_size = backend.module_global(module, "scale_bits")
    assert scale_size == 8 and _read_u32(backend, scale_ptr, s, 2).tolist() == [3, 0]
    # The host changes a global; the kernel sees it (cuModuleGetGlobal + cuMemcpyHtoD).
    backend.memcpy_htod_async(scale_ptr, memoryview(struct.pack("<Q", 10)), s)
    n = 16
    x, out = backend.mem_alloc(4 * n), backend.mem_alloc(4 * n)
    backend.memset_async(x, 1, 4, n, s)
    backend.launch(backend.module_function(module, "use_globals"), (1, 1, 1), (32, 1, 1), 0, s,
                   struct.pack("<QQi", x, out, n))
    got = _read_u32(backend, out, s, n).view(np.int32)
    np.testing.assert_array_equal(got, 1 + np.array([0, 1, 1, 2, 3, 5, 8, 13] * 2) * 10)
    counter_ptr, _ = backend.module_global(module, "global_counter")
    assert _read_u32(backend, counter_ptr, s)[0] == n
    backend.module_unload(module)
    for p in (x, out):
        backend.mem_free(p)
    backend.stream_destroy(s)

    const_ptx = compile_ptx(CORPUS_DIR / "constant_array.cu", arch="sm_90")
    module = backend.module_load(ModuleSource(original=const_ptx.encode(), ptx=const_ptx))
    ptr, size = backend.module_global(module, "poly_coeffs")
    s = backend.stream_create()
    coeffs = np.zeros(4, np.float32)
    backend.memcpy_dtoh_async(memoryview(coeffs), ptr, s)
    backend.stream_synchronize(s)
    np.testing.assert_array_equal(coeffs, [1.0, -0.5, 0.25, 2.0])
    backend.module_unload(module)
    backend.stream_destroy(s)


def test_printf_goes_to_the_stream_buffer_and_stdout(capfd):
    backend = EmulatorBackend(printf_to_stdout=True)
    try:
        ptx = compile_ptx(CORPUS_DIR / "printf_kernel.cu", arch="sm_90")
        module = backend.module_load(ModuleSource(original=ptx.encode(), ptx=ptx))
        s = backend.stream_create()
        values, out = backend.mem_alloc(8), backend.mem_alloc(8)
        backend.memcpy_htod_async(values, memoryview(struct.pack("<ii", 41, -3)), s)
        backend.launch(backend.module_function(module, "print_values"), (2, 1, 1), (64, 1, 1), 0, s,
                       struct.pack("<QQ", values, out))
        backend.stream_synchronize(s)
        assert backend.take_printf(s) == "block 0 value 41\nblock 1 value -3\n"
        assert backend.take_printf(s) == ""
        assert "block 1 value -3" in capfd.readouterr().out
    finally:
        backend.close()


def test_close_ends_a_running_kernel(kernels):
    backend = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=600)
    module = backend.module_load(ModuleSource(original=KERNELS_PTX.encode(), ptx=KERNELS_PTX))
    s = backend.stream_create()
    flag, out = backend.mem_alloc(4), backend.mem_alloc(4)
    backend.launch(backend.module_function(module, "wait_for_flag"), (1, 1, 1), (1, 1, 1), 0, s,
                   struct.pack("<QQ", flag, out))
    time.sleep(0.05)
    started = time.monotonic()
    backend.close()
    assert time.monotonic() - started < 5
    with pytest.raises(DeviceError) as failure:
        backend.stream_synchronize(s)
    assert failure.value.code == CUDA_ERROR_LAUNCH_FAILED and "cancelled" in failure.value.message

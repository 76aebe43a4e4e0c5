"""The stream executor on the emulator, with the real PTX passes: a best-effort
kernel that is sliced or PTB-preempted many times (a high-priority job keeps
arriving) still computes exactly the right result, in stream order."""
from __future__ import annotations

import struct
import threading
import time

import numpy as np
import pytest
from ptx_corpus import CORPUS_DIR, compile_ptx

from tally.scheduler import Launch, MemcpyDtoH, MemcpyHtoD, StreamExecutor, make_policy
from tally.scheduler.profiler import TransparentProfiler

import tally.backends.emulator as emulator  # noqa: E402
from tally.server.client.modules import ModuleRegistry  # noqa: E402
from tally.backends.ptx_variants import PtxVariantProvider  # noqa: E402

N, BLOCK = 262144, 128               # saxpy: one element per thread, 2048 blocks (each kernel long enough
                                     # to be preempted by the high-priority job, on 8 workers)
ALPHAS = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0)


@pytest.fixture(scope="module")
def device():
    backend = emulator.EmulatorBackend(printf_to_stdout=False, launch_timeout_s=120)
    yield backend
    backend.close()


def _function(backend, variants, source, name):
    """Load a kernel the way the server does for a best-effort job: through the
    module registry, which loads the original and its variants as one module."""
    ptx = compile_ptx(CORPUS_DIR / source, arch="sm_90")
    registry = ModuleRegistry(backend, variants)
    module = registry.load(ptx.encode())
    return registry.function(module.module_id, name).backend_function


@pytest.mark.parametrize("be_transform", ["slice", "ptb"])
def test_preempted_best_effort_kernels_compute_exact_results(device, be_transform):
    variants = PtxVariantProvider()
    saxpy = _function(device, variants, "saxpy.cu", "saxpy")
    vector_add = _function(device, variants, "vector_add.cu", "vector_add")
    assert variants.sliced(saxpy) is not None and variants.ptb(saxpy) is not None
    ex = StreamExecutor(device, make_policy("priority", idle_grace_ms=0), variants,
                        TransparentProfiler(device.describe().sm_count), be_transform=be_transform)
    ex.add_client("hp", "high")
    ex.add_client("be")

    x = np.arange(N, dtype=np.float32)
    x_ptr, y_ptr = device.mem_alloc(4 * N), device.mem_alloc(4 * N)
    ex.submit("be", 0, MemcpyHtoD(x_ptr, x.tobytes()))
    ex.submit("be", 0, MemcpyHtoD(y_ptr, bytes(4 * N)))
    for alpha in ALPHAS:
        params = struct.pack("<ifQQ", N, alpha, x_ptr, y_ptr)
        ex.submit("be", 0, Launch(saxpy, (N // BLOCK, 1, 1), (BLOCK, 1, 1), 0, params))
    y = bytearray(4 * N)
    ex.submit("be", 0, MemcpyDtoH(memoryview(y), y_ptr, 4 * N))

    a, b, c = (device.mem_alloc(4 * 1024) for _ in range(3))
    stop = threading.Event()
    hp_errors = []

    def high_priority():
        try:
            while not stop.is_set():
                ex.submit("hp", 0, Launch(vector_add, (8, 1, 1), (128, 1, 1), 0,
                                          struct.pack("<QQQi", a, b, c, 1024)))
                ex.synchronize_stream("hp", 0)
                time.sleep(0.001)
        except Exception as e:       # reported by the assertion below
            hp_errors.append(e)

    thread = threading.Thread(target=high_priority)
    thread.start()
    try:
        ex.synchronize_stream("be", 0)
    finally:
        stop.set()
        thread.join(timeout=60)
    assert hp_errors == []
    np.testing.assert_array_equal(np.frombuffer(y, np.float32), x * sum(ALPHAS))
    counters = ex.counters()
    if be_transform == "slice":
        assert counters["kernels_sliced"] == len(ALPHAS)
        assert counters["slice_launches"] >= 2 * len(ALPHAS)
    else:
        assert counters["kernels_ptb"] == len(ALPHAS)
        # A preemption asked for while a PTB kernel's last blocks run finds nothing left to
        # stop (no relaunch follows): on a loaded host every request may land so.
        assert counters["preemptions"] >= 3 and counters["ptb_launches"] >= len(ALPHAS)
    ex.close()


def test_ptb_launch_waits_for_its_state_reset_while_its_event_is_reused(device):
    """A PTB launch waits (cuStreamWaitEvent) for its state-buffer reset on the
    control stream; the executor puts that event back in its pool at once and
    may record it again, e.g. as a high-priority kernel's end event. The launch
    must still wait for the reset: run on the previous kernel's counter it
    would skip every block. The control stream is held with a host callback to
    stand for a slow copy engine."""
    variants = PtxVariantProvider()
    saxpy = _function(device, variants, "saxpy.cu", "saxpy")
    vector_add = _function(device, variants, "vector_add.cu", "vector_add")
    ex = StreamExecutor(device, make_policy("priority", idle_grace_ms=0), variants,
                        TransparentProfiler(device.describe().sm_count), be_transform="ptb")
    ex.add_client("hp", "high")
    ex.add_client("be")
    x = np.arange(N, dtype=np.float32)
    x_ptr, y_ptr, hp_ptr = device.mem_alloc(4 * N), device.mem_alloc(4 * N), device.mem_alloc(4 * 1024)
    ex.submit("be", 0, MemcpyHtoD(x_ptr, x.tobytes()))
    ex.submit("be", 0, MemcpyHtoD(y_ptr, bytes(4 * N)))
    ex.submit("be", 0, Launch(saxpy, (N // BLOCK, 1, 1), (BLOCK, 1, 1), 0, struct.pack("<ifQQ", N, 1.0, x_ptr, y_ptr)))
    ex.synchronize_stream("be", 0)          # its PTB counter now says "all blocks done"

    gate = threading.Event()
    device.host_callback(ex.device._control(), gate.wait)
    half = N // 2
    ex.submit("be", 0, Launch(saxpy, (half // BLOCK, 1, 1), (BLOCK, 1, 1), 0,
                              struct.pack("<ifQQ", half, 2.0, x_ptr, y_ptr)))
    ex.submit("hp", 0, Launch(vector_add, (8, 1, 1), (128, 1, 1), 0, struct.pack("<QQQi", hp_ptr, hp_ptr, hp_ptr, 1024)))
    ex.synchronize_stream("hp", 0)
    time.sleep(0.2)
    gate.set()
    y = bytearray(4 * N)
    ex.submit("be", 0, MemcpyDtoH(memoryview(y), y_ptr, 4 * N))
    ex.synchronize_stream("be", 0)
    expected = x.copy()
    expected[:half] += 2.0 * x[:half]
    np.testing.assert_array_equal(np.frombuffer(y, np.float32), expected)
    assert ex.counters()["kernels_ptb"] == 2
    ex.close()


def test_no_memory_for_ptb_state_runs_the_kernel_whole_and_exact():
    """The executor's PTB state buffer (8 bytes per stream) is device memory too;
    when none is left the kernel runs untransformed instead of failing a job."""
    n = 4096
    small = emulator.EmulatorBackend(printf_to_stdout=False, total_memory=2 * 4 * n)
    try:
        variants = PtxVariantProvider()
        saxpy = _function(small, variants, "saxpy.cu", "saxpy")
        ex = StreamExecutor(small, make_policy("priority", idle_grace_ms=0), variants,
                            TransparentProfiler(small.describe().sm_count), be_transform="ptb")
        ex.add_client("be")
        x_ptr, y_ptr = small.mem_alloc(4 * n), small.mem_alloc(4 * n)     # all there is
        x = np.arange(n, dtype=np.float32)
        ex.submit("be", 0, MemcpyHtoD(x_ptr, x.tobytes()))
        ex.submit("be", 0, MemcpyHtoD(y_ptr, bytes(4 * n)))
        ex.submit("be", 0, Launch(saxpy, (n // BLOCK, 1, 1), (BLOCK, 1, 1), 0,
                                  struct.pack("<ifQQ", n, 2.0, x_ptr, y_ptr)))
        y = bytearray(4 * n)
        ex.submit("be", 0, MemcpyDtoH(memoryview(y), y_ptr, 4 * n))
        ex.synchronize_stream("be", 0)
        np.testing.assert_array_equal(np.frombuffer(y, np.float32), 2 * x)
        counters = ex.counters()
        assert counters["kernels_ptb"] == 0 and counters["kernels_whole"] == 1
        ex.close()
    finally:
        small.close()

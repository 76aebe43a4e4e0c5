"""Emulator speed: corpus kernels launched through EmulatorBackend (launch +
stream_synchronize, so stream and launch overheads are included), against
numpy computing the same result in the same run.

Workloads grow along one axis at a time, to show how time scales:
- threads: vector_add with 16 Ki, 64 Ki and 256 Ki threads (about 34 instructions each);
- instructions per thread: row_sum with rows of 8, 64 and 512 elements (4096 threads);
- shared memory, barriers and fma chains: matmul_tiled (64 and 128 square);
- barriers with divergence: reduce_sum (64 Ki elements); shuffles: warp_reduce (16 Ki);
- fixed cost: a one-thread kernel (read_counter) against a host callback round trip.

Target (issue 4): >= 5 million thread-instructions per second. A thread-instruction
is one instruction executed by one thread of a warp group (guarded-off lanes of the
group included, as a GPU issues them too).

Run: python -m pytest bench/bench_emulator.py --benchmark-only
"""
from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from ptx_corpus import CORPUS_DIR, compile_ptx

from tally.backends.base import ModuleSource
from tally.backends.emulator import EmulatorBackend
from timing import median_seconds  # noqa: E402

TARGET_THREAD_INSTRUCTIONS_PER_S = 5e6


class Device:
    def __init__(self):
        self.backend = EmulatorBackend(printf_to_stdout=False)
        self.stream = self.backend.stream_create()
        self._modules = {}

    def function(self, source: str, kernel: str):
        if source not in self._modules:
            ptx = compile_ptx(CORPUS_DIR / source, arch="sm_90")
            self._modules[source] = self.backend.module_load(ModuleSource(original=ptx.encode(), ptx=ptx))
        return self.backend.module_function(self._modules[source], kernel)

    def buffer(self, array: np.ndarray) -> int:
        ptr = self.backend.mem_alloc(max(array.nbytes, 4))
        self.backend.memcpy_htod_async(ptr, memoryview(np.ascontiguousarray(array)).cast("B"), self.stream)
        self.backend.stream_synchronize(self.stream)
        return ptr

    def launcher(self, fn, grid, block, params: bytes, shared: int = 0):
        def run():
            self.backend.launch(fn, grid, block, shared, self.stream, params)
            self.backend.stream_synchronize(self.stream)
        return run

    def thread_instructions(self, run) -> int:
        before = self.backend.stats["thread_instructions"]
        run()
        return self.backend.stats["thread_instructions"] - before


@pytest.fixture(scope="module")
def device():
    d = Device()
    yield d
    d.backend.close()


def _workload(device: Device, name: str, size: int):
    """(launch callable, numpy baseline callable, description)."""
    rng = np.random.default_rng(0)
    if name == "vector_add":
        a, b = rng.standard_normal(size).astype(np.float32), rng.standard_normal(size).astype(np.float32)
        ptrs = [device.buffer(a), device.buffer(b), device.buffer(np.zeros(size, np.float32))]
        fn = device.function("vector_add.cu", "vector_add")
        return (device.launcher(fn, ((size + 255) // 256, 1, 1), (256, 1, 1), struct.pack("<QQQi", *ptrs, size)),
                lambda: np.add(a, b), f"{size} threads")
    if name == "row_sum":
        n = 4096
        rows = rng.standard_normal((n, size)).astype(np.float32)
        ptrs = [device.buffer(rows), device.buffer(np.zeros(n, np.float32)), device.buffer(np.zeros(n, np.int32))]
        fn = device.function("unrolled_loop.cu", "row_sum")
        return (device.launcher(fn, (n // 256, 1, 1), (256, 1, 1), struct.pack("<QQQii", *ptrs, n, size)),
                lambda: rows.sum(axis=1), f"{n} threads, rows of {size}")
    if name == "matmul_tiled":
        A, B = (rng.standard_normal((size, size)).astype(np.float32) for _ in range(2))
        ptrs = [device.buffer(A), device.buffer(B), device.buffer(np.zeros((size, size), np.float32))]
        fn = device.function("matmul_tiled.cu", "matmul_tiled")
        return (device.launcher(fn, (size // 16, size // 16, 1), (16, 16, 1),
                                struct.pack("<QQQiii", *ptrs, size, size, size)),
                lambda: A @ B, f"{size}x{size}")
    if name == "reduce_sum":
        x = rng.standard_normal(size).astype(np.float32)
        blocks = size // 256
        ptrs = [device.buffer(x), device.buffer(np.zeros(blocks, np.float32))]
        fn = device.function("reduce_shared.cu", "reduce_sum")
        return (device.launcher(fn, (blocks, 1, 1), (256, 1, 1), struct.pack("<QQi", *ptrs, size)),
                lambda: x.reshape(blocks, 256).sum(axis=1), f"{size} elements")
    if name == "warp_reduce":
        x = rng.standard_normal(size).astype(np.float32)
        ptrs = [device.buffer(x)] + [device.buffer(np.zeros(n, np.float32)) for n in (size // 32, size // 32, size, size)]
        fn = device.function("warp_shuffle.cu", "warp_reduce")
        return (device.launcher(fn, (size // 128, 1, 1), (128, 1, 1), struct.pack("<5Q", *ptrs)),
                lambda: (x.reshape(-1, 32).sum(1), x.reshape(-1, 32).max(1), np.cumsum(x.reshape(-1, 32), 1)),
                f"{size} threads")
    raise ValueError(name)


WORKLOADS = [("vector_add", 1 << 14), ("vector_add", 1 << 16), ("vector_add", 1 << 18),
             ("row_sum", 8), ("row_sum", 64), ("row_sum", 512),
             ("matmul_tiled", 64), ("matmul_tiled", 128), ("reduce_sum", 1 << 16), ("warp_reduce", 1 << 14)]


@pytest.mark.parametrize("name,size", WORKLOADS, ids=[f"{n}-{s}" for n, s in WORKLOADS])
def test_kernel_throughput(benchmark, device, figures, name, size):
    run, baseline, what = _workload(device, name, size)
    instructions = device.thread_instructions(run)
    benchmark.pedantic(run, rounds=7, iterations=1, warmup_rounds=1)
    seconds = benchmark.stats["median"]
    numpy_seconds = median_seconds(baseline, repeat=7, min_time=0.05)
    rate = instructions / seconds
    figures.add("kernels (median of 7 launches, launch + synchronize)",
                f"{name:13s} {what:26s}: {seconds * 1e3:9.3f} ms, {instructions / 1e6:8.2f} M thread-instr, "
                f"{rate / 1e6:7.1f} M thread-instr/s ({1e9 / rate:5.2f} ns each); numpy {numpy_seconds * 1e3:8.3f} ms "
                f"-> emulator/numpy {seconds / numpy_seconds:8.1f}x")
    assert rate >= TARGET_THREAD_INSTRUCTIONS_PER_S, f"{rate / 1e6:.1f} M thread-instructions/s is under the target"


def test_launch_overhead(benchmark, device, figures):
    counter = device.buffer(np.zeros(1, np.int32))
    run = device.launcher(device.function("device_global.cu", "read_counter"), (1, 1, 1), (1, 1, 1),
                          struct.pack("<Q", counter))
    benchmark.pedantic(run, rounds=50, iterations=1, warmup_rounds=2)
    backend, stream = device.backend, device.stream

    def callback_round_trip():
        backend.host_callback(stream, lambda: None)
        backend.stream_synchronize(stream)
    baseline = median_seconds(callback_round_trip, repeat=7, min_time=0.05)
    figures.add("fixed cost", f"one-thread launch + synchronize: {benchmark.stats['median'] * 1e6:.1f} us; "
                f"host callback + synchronize (stream baseline): {baseline * 1e6:.1f} us")

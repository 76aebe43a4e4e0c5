"""Triton-generated PTX (tests/data/triton, committed) on the emulator: the
vector add and row softmax kernels match numpy; the tensor-core matmuls
(ldmatrix + mma.sync on sm_80, wgmma from shared-memory descriptors on sm_90a)
match numpy exactly on integer-valued data."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from ptx_corpus import TRITON_DIR

from tally.backends.base import ModuleSource
from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.backends.emulator import EmulatorBackend

ARCHS = ["sm_80", "sm_90"]


@pytest.fixture(scope="module")
def backend():
    b = EmulatorBackend(printf_to_stdout=False)
    yield b
    b.close()


def _load(backend, name):
    ptx = (TRITON_DIR / f"{name}.ptx").read_text()
    return backend.module_load(ModuleSource(original=ptx.encode(), ptx=ptx))


def _buffers(backend, stream, *arrays):
    ptrs = [backend.mem_alloc(a.nbytes) for a in arrays]
    for p, a in zip(ptrs, arrays):
        backend.memcpy_htod_async(p, memoryview(a).cast("B"), stream)
    return ptrs


def _params(fn, values, formats) -> bytes:
    assert len(fn.params) == len(values)
    out = bytearray(fn.param_bytes)
    for p, value, fmt in zip(fn.params, values, formats):
        struct.pack_into("<" + fmt, out, p.offset, value)
    return bytes(out)


@pytest.mark.parametrize("arch", ARCHS)
def test_triton_vector_add(backend, arch):
    n = 3000
    x, y = (np.random.default_rng(i).standard_normal(n).astype(np.float32) for i in (1, 2))
    s = backend.stream_create()
    px, py, pout = _buffers(backend, s, x, y, np.zeros(n, np.float32))
    fn = backend.module_function(_load(backend, f"vector_add.{arch}"), "vector_add")
    # (x, y, out, n, global scratch, profile scratch); BLOCK 1024 elements per program of 128 threads
    backend.launch(fn, (3, 1, 1), (128, 1, 1), 0, s, _params(fn, (px, py, pout, n, 0, 0), "QQQiQQ"))
    out = np.zeros(n, np.float32)
    backend.memcpy_dtoh_async(memoryview(out), pout, s)
    backend.stream_synchronize(s)
    np.testing.assert_array_equal(out, x + y)


@pytest.mark.parametrize("arch", ARCHS)
def test_triton_softmax(backend, arch):
    rows, cols = 5, 1000
    x = np.random.default_rng(3).standard_normal((rows, cols)).astype(np.float32) * 4
    s = backend.stream_create()
    pout, pin = _buffers(backend, s, np.zeros((rows, cols), np.float32), x)
    fn = backend.module_function(_load(backend, f"softmax.{arch}"), "softmax")
    backend.launch(fn, (rows, 1, 1), (128, 1, 1), 1024, s, _params(fn, (pout, pin, cols, cols, cols, 0, 0), "QQiiiQQ"))
    out = np.zeros((rows, cols), np.float32)
    backend.memcpy_dtoh_async(memoryview(out).cast("B"), pout, s)
    backend.stream_synchronize(s)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    # ex2.approx and the reduction order differ from numpy's: a few ulp.
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-5)


def test_required_block_shape_is_enforced(backend):
    fn = backend.module_function(_load(backend, "vector_add.sm_80"), "vector_add")   # .reqntid 128
    s = backend.stream_create()
    with pytest.raises(DeviceError) as failure:
        backend.launch(fn, (1, 1, 1), (256, 1, 1), 0, s, bytes(fn.param_bytes))
    assert failure.value.code == CUDA_ERROR_INVALID_VALUE and ".reqntid" in failure.value.message


@pytest.mark.parametrize("arch", ARCHS)
def test_triton_tensor_core_matmul(backend, arch):
    """tl.dot: ldmatrix + mma.sync on sm_80, wgmma from shared-memory descriptors on sm_90a;
    masked edges (M, N, K not multiples of the 64x64x32 tiles); fp16 out."""
    m, n, k = 96, 80, 70
    rng = np.random.default_rng(9)
    a = rng.integers(-3, 4, (m, k)).astype(np.float16)
    b = rng.integers(-3, 4, (k, n)).astype(np.float16)
    s = backend.stream_create()
    pa, pb, pc = _buffers(backend, s, a, b, np.zeros((m, n), np.float16))
    fn = backend.module_function(_load(backend, f"matmul.{arch}"), "matmul")
    grid = (-(-m // 64) * -(-n // 64), 1, 1)
    values = (pa, pb, pc, m, n, k, k, 1, n, 1, n, 1, 0, 0)
    backend.launch(fn, grid, (128, 1, 1), 48 * 1024, s, _params(fn, values, "QQQ" + "i" * 9 + "QQ"))
    out = np.zeros((m, n), np.float16)
    backend.memcpy_dtoh_async(memoryview(out).cast("B"), pc, s)
    backend.stream_synchronize(s)
    assert out.astype(np.int64).tolist() == (a.astype(np.int64) @ b.astype(np.int64)).tolist()

"""ldmatrix and stmatrix on the emulator (m8n8, .b16, .x1/.x2/.x4, with and without
.trans), against a numpy reference written from the PTX ISA's fragment layout: the
8 rows of matrix i come from the addresses lanes 8i..8i+7 give; lane t's register i
holds row t/4, columns 2(t%4) and 2(t%4)+1 (the low half first) of matrix i, or of
its transpose with .trans; stmatrix writes the same fragments back."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from ptx_corpus import compile_source_ptx

from tally.backends.base import ModuleSource
from tally.backends.emulator import EmulatorBackend

SOURCE = r"""#include <stdint.h>
// Four 8x8 matrices of 16-bit values m[i][r][c] = 1000 i + 10 r + c in shared memory,
// rows 16 bytes apart in the order the lanes name them (lane l names row l % 8 of
// matrix l / 8, rows of a matrix 32 bytes apart to show the addresses are used).
// out[lane * 8 + 2 j + h] = half h of register j (x4), then the same with .trans
// (out + 256), then .x1 and .x2 (out + 512: 1 + 2 registers per lane).
extern "C" __global__ void load(uint16_t* out) {
  __shared__ alignas(16) uint16_t m[4][8][16];
  unsigned lane = threadIdx.x;
  for (int i = lane; i < 4 * 8 * 16; i += 32) {
    int mi = i / 128, r = (i / 16) % 8, c = i % 16;
    m[mi][r][c] = c < 8 ? (uint16_t)(1000 * mi + 10 * r + c) : 0xffff;
  }
  __syncwarp();
  unsigned row = (unsigned)__cvta_generic_to_shared(&m[lane / 8][lane % 8][0]);
  unsigned r[4];
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(row));
  for (int j = 0; j < 4; ++j) { out[lane * 8 + 2 * j] = r[j] & 0xffff; out[lane * 8 + 2 * j + 1] = r[j] >> 16; }
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(row));
  for (int j = 0; j < 4; ++j) { out[256 + lane * 8 + 2 * j] = r[j] & 0xffff; out[256 + lane * 8 + 2 * j + 1] = r[j] >> 16; }
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(r[1]), "=r"(r[2]) : "r"(row));
  for (int j = 0; j < 3; ++j) { out[512 + lane * 6 + 2 * j] = r[j] & 0xffff; out[512 + lane * 6 + 2 * j + 1] = r[j] >> 16; }
}

// stmatrix .x4 (and .trans) of fragments built from the lane number: register j of
// lane t holds (1000 j + 10 (t/4) + 2 (t%4)) and that + 1. The four matrices land at
// the rows the lanes name; out = the shared matrices after each store.
extern "C" __global__ void store(uint16_t* out) {
  __shared__ alignas(16) uint16_t m[4][8][8];
  unsigned lane = threadIdx.x;
  unsigned r[4];
  for (int j = 0; j < 4; ++j) {
    unsigned v = 1000 * j + 10 * (lane / 4) + 2 * (lane % 4);
    r[j] = v | ((v + 1) << 16);
  }
  unsigned row = (unsigned)__cvta_generic_to_shared(&m[lane / 8][lane % 8][0]);
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
               :: "r"(row), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
  __syncwarp();
  for (int i = lane; i < 256; i += 32) out[i] = (&m[0][0][0])[i];
  __syncwarp();
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
               :: "r"(row), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
  __syncwarp();
  for (int i = lane; i < 256; i += 32) out[256 + i] = (&m[0][0][0])[i];
}
"""


@pytest.fixture(scope="module")
def device():
    ptx = compile_source_ptx("emulator_matrix_fragments.cu", SOURCE, "sm_90")
    backend = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=60)
    module = backend.module_load(ModuleSource(original=ptx.encode(), ptx=ptx))
    yield backend, module
    backend.close()


def run(device, kernel, n):
    backend, module = device
    s = backend.stream_create()
    out = np.zeros(n, np.uint16)
    ptr = backend.mem_alloc(out.nbytes)
    try:
        backend.launch(backend.module_function(module, kernel), (1, 1, 1), (32, 1, 1), 0, s, struct.pack("<Q", ptr))
        backend.memcpy_dtoh_async(memoryview(out).cast("B"), ptr, s)
        backend.stream_synchronize(s)
    finally:
        backend.mem_free(ptr)
        backend.stream_destroy(s)
    return out


def fragment(matrix: np.ndarray, lane: int) -> list[int]:
    """The two halves lane `lane` holds of an 8x8 matrix."""
    row, col = lane // 4, 2 * (lane % 4)
    return [int(matrix[row, col]), int(matrix[row, col + 1])]


def matrices() -> np.ndarray:
    i, r, c = np.meshgrid(np.arange(4), np.arange(8), np.arange(8), indexing="ij")
    return (1000 * i + 10 * r + c).astype(np.uint16)


def test_ldmatrix_gives_each_lane_its_fragment(device):
    out = run(device, "load", 512 + 32 * 6)
    m = matrices()
    want = [h for lane in range(32) for j in range(4) for h in fragment(m[j], lane)]
    want_trans = [h for lane in range(32) for j in range(4) for h in fragment(m[j].T, lane)]
    want_small = [h for lane in range(32) for j in (0, 0, 1) for h in fragment(m[j], lane)]
    assert out[:256].tolist() == want
    assert out[256:512].tolist() == want_trans
    assert out[512:].tolist() == want_small


def test_stmatrix_writes_the_fragments_back(device):
    out = run(device, "store", 512)
    m = matrices()
    assert out[:256].reshape(4, 8, 8).tolist() == m.tolist()
    assert out[256:].reshape(4, 8, 8).tolist() == np.transpose(m, (0, 2, 1)).tolist()

"""Regenerates the Triton PTX in this directory (no GPU needed).

Run with a Python that has triton installed (triton is not a dependency of tally):
    python -m venv /tmp/tritonenv && /tmp/tritonenv/bin/pip install triton==3.9.0
    /tmp/tritonenv/bin/python tests/data/triton/generate.py
It compiles each kernel below for an explicit target (GPUTarget("cuda", cc, 32)),
so no driver is queried, and writes <kernel>.sm_<cc>.ptx next to this file.
Triton is pointed at the toolkit's ptxas ($CUDA_HOME/bin/ptxas, CUDA 13.0 here), so
it emits the PTX ISA that ptxas supports (9.0) instead of the 8.8/9.4 of the ptxas
builds bundled with the wheel, and assembles its own output with it. The sm_90
output targets sm_90a (wgmma), which ptxas assembles only with -arch=sm_90a.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

# Triton 3.9 warns unless this is set; 1 is its current default (fused multiply-add on).
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
_PTXAS = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "ptxas")
os.environ.setdefault("TRITON_PTXAS_PATH", _PTXAS)
os.environ.setdefault("TRITON_PTXAS_BLACKWELL_PATH", _PTXAS)

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

HERE = Path(__file__).resolve().parent


@triton.jit
def vector_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # out[i] = x[i] + y[i] for i < n; grid = ceil(n / BLOCK), num_warps 4.
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
             mask=mask)


@triton.jit
def softmax(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    # Row-wise softmax of a (rows x n_cols) float32 matrix; grid = rows, BLOCK >= n_cols.
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=cols < n_cols, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * out_row_stride + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


@triton.jit
def matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
           stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # C = A @ B in fp16 with fp32 accumulation; grid = (ceil(M/BLOCK_M) * ceil(N/BLOCK_N),).
    pid = tl.program_id(0)
    grid_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // grid_n
    pid_n = pid % grid_n
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a_tile = tl.load(a, mask=(rm[:, None] < M) & (rk[None, :] < k_left), other=0.0)
        b_tile = tl.load(b, mask=(rk[:, None] < k_left) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a_tile, b_tile)
        a += BLOCK_K * stride_ak
        b += BLOCK_K * stride_bk
    c = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c, acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


KERNELS = [
    (vector_add, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                  "BLOCK": "constexpr"}, {"BLOCK": 1024}),
    (softmax, {"out_ptr": "*fp32", "in_ptr": "*fp32", "in_row_stride": "i32",
               "out_row_stride": "i32", "n_cols": "i32", "BLOCK": "constexpr"}, {"BLOCK": 1024}),
    (matmul, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32",
              "K": "i32", "stride_am": "i32", "stride_ak": "i32", "stride_bk": "i32",
              "stride_bn": "i32", "stride_cm": "i32", "stride_cn": "i32",
              "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr"},
     {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}),
]
CAPABILITIES = [80, 90]


def main() -> int:
    for fn, signature, constexprs in KERNELS:
        for cc in CAPABILITIES:
            src = ASTSource(fn, signature, constexprs=constexprs)
            compiled = triton.compile(src, target=GPUTarget("cuda", cc, 32))
            out = HERE / f"{fn.__name__}.sm_{cc}.ptx"
            out.write_text(compiled.asm["ptx"])
            print(f"wrote {out.relative_to(HERE.parent.parent.parent)} "
                  f"({len(compiled.asm['ptx'])} bytes, triton {triton.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Kernels in the style of Triton's tutorials (vector add, fused softmax, layer norm
forward, tiled matmul with tl.dot), written for tally's tests, run as a job runs
them: CUDA tensors filled and read back by copies, each result checked against
PyTorch on the CPU.

The matmul multiplies float32 with input_precision="ieee": Triton then builds
tl.dot from FMAs. matmul_f16 runs the same kernel on float16, which Triton puts on the
tensor cores: mma.sync for compute capability 8.x, wgmma for 9.0 (on small integers, so
the product is exact).

Prints one line per kernel, `<name> max_error=<e> seconds=<wall time of the
first call, compile included>`, and exits 0 when every error is within its bound."""
import sys
import time

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def softmax_kernel(out_ptr, in_ptr, row_stride, cols, BLOCK: tl.constexpr):
    # One program per row; the row fits one block, so max, exp and sum stay in registers.
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + row * row_stride + offsets, mask=offsets < cols, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * row_stride + offsets, e / tl.sum(e, axis=0), mask=offsets < cols)


@triton.jit
def layer_norm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, row_stride, cols, eps, BLOCK: tl.constexpr):
    # Walks the row in BLOCK-wide chunks twice (mean, then variance), as the tutorial
    # does for rows wider than one block, then normalizes a third time through.
    row = tl.program_id(0)
    x_ptr += row * row_stride
    y_ptr += row * row_stride
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offsets, mask=offsets < cols, other=0.0)
    mean = tl.sum(acc, axis=0) / cols
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        d = tl.where(offsets < cols, tl.load(x_ptr + offsets, mask=offsets < cols, other=0.0) - mean, 0.0)
        acc += d * d
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / cols + eps)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, cols, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        mask = offsets < cols
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
        y = (x - mean) * rstd * tl.load(w_ptr + offsets, mask=mask) + tl.load(b_ptr + offsets, mask=mask)
        tl.store(y_ptr + offsets, y, mask=mask)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                  PRECISION: tl.constexpr):
    # Grouped ordering of the output tiles (programs sharing rows of A run together), as in the tutorial.
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = pid // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    group_rows = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * tiles_n)) % group_rows
    pid_n = (pid % (GROUP_M * tiles_n)) // group_rows
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(a_ptr + rm[:, None] * stride_am + kk[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def vector_add():
    n = 3000
    x, y = torch.rand(n), torch.rand(n)
    out = torch.empty(n, device="cuda")
    add_kernel[(triton.cdiv(n, 1024),)](x.to("cuda"), y.to("cuda"), out, n, BLOCK=1024)
    return (out.cpu() - (x + y)).abs().max().item(), 0.0


def softmax():
    x = torch.randn(6, 781) * 3
    out = torch.empty(6, 781, device="cuda")
    softmax_kernel[(6,)](out, x.to("cuda"), x.stride(0), 781, BLOCK=1024)
    return (out.cpu() - torch.softmax(x.double(), dim=1)).abs().max().item(), 1e-6


def layer_norm():
    rows, cols, eps = 5, 700, 1e-5
    x, w, b = torch.randn(rows, cols) * 2 + 1, torch.rand(cols), torch.randn(cols)
    y = torch.empty(rows, cols, device="cuda")
    mean, rstd = torch.empty(rows, device="cuda"), torch.empty(rows, device="cuda")
    layer_norm_kernel[(rows,)](x.to("cuda"), y, w.to("cuda"), b.to("cuda"), mean, rstd, x.stride(0), cols, eps,
                               BLOCK=256)
    ref = torch.nn.functional.layer_norm(x.double(), (cols,), w.double(), b.double(), eps)
    errors = [(y.cpu() - ref).abs().max().item(), (mean.cpu() - x.double().mean(1)).abs().max().item()]
    return max(errors), 1e-5


def matmul():
    M, N, K = 70, 50, 40
    a, b = torch.randn(M, K), torch.randn(K, N)
    c = torch.empty(M, N, device="cuda")
    grid = (triton.cdiv(M, 32) * triton.cdiv(N, 32),)
    matmul_kernel[grid](a.to("cuda"), b.to("cuda"), c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1), BM=32, BN=32, BK=16, GROUP_M=2, PRECISION="ieee")
    return (c.cpu() - a.double() @ b.double()).abs().max().item(), 1e-4


def matmul_f16():
    M, N, K = 96, 80, 70
    a = torch.randint(-3, 4, (M, K)).half()
    b = torch.randint(-3, 4, (K, N)).half()
    c = torch.empty(M, N, device="cuda")
    grid = (triton.cdiv(M, 64) * triton.cdiv(N, 64),)
    # the same kernel; input_precision concerns float32 inputs only
    matmul_kernel[grid](a.to("cuda"), b.to("cuda"), c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1), BM=64, BN=64, BK=32, GROUP_M=1, PRECISION="tf32")
    return (c.cpu().double() - a.double() @ b.double()).abs().max().item(), 0.0


def main(names) -> int:
    # "wait" last: after the kernels, say "ready" and hold the connection until a line
    # on stdin, so a test can read the server's status while the job is still there.
    wait = "wait" in names
    names = [n for n in names if n != "wait"]
    torch.manual_seed(0)
    kernels = {"vector_add": vector_add, "softmax": softmax, "layer_norm": layer_norm, "matmul": matmul,
               "matmul_f16": matmul_f16}
    ok = True
    for name in names or kernels:
        start = time.monotonic()
        error, bound = kernels[name]()
        print(f"{name} max_error={error:.3g} seconds={time.monotonic() - start:.1f}", flush=True)
        ok = ok and error <= bound
    if wait:
        print("ready", flush=True)
        sys.stdin.readline()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

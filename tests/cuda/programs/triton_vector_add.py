"""Triton's vector-add tutorial kernel, unmodified, as a job runs it: CUDA tensors
filled and read back by copies, the result checked against the CPU's sum.
Prints `max_error=<e> n=<n>` and exits 0 when the sum is exact."""
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, x + y, mask=mask)


def main() -> int:
    n = 3000
    x = torch.rand(n, dtype=torch.float32)
    y = torch.rand(n, dtype=torch.float32)
    xd, yd = x.to("cuda"), y.to("cuda")
    out = torch.empty_like(xd)
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)
    add_kernel[grid](xd, yd, out, n, BLOCK_SIZE=1024)
    got = out.to("cpu")
    error = (got - (x + y)).abs().max().item()
    print(f"max_error={error} n={n}", flush=True)
    return 0 if error == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

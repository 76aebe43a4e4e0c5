"""A small model of pointwise ops and reductions, compiled with torch.compile
(Inductor, default mode), run as a job runs it: inputs copied to the device,
outputs copied back, checked against the same model run eagerly on the CPU.

Inductor turns it into Triton kernels only (no matmul, so no cuBLAS, whose
SASS-only kernels the emulator cannot run). Prints `max_error=<e> seconds=<first
call, compile included> kernels=<Triton kernels Inductor generated>` and exits 0
when the error is within float32 rounding."""
import sys
import time

import torch


class Model(torch.nn.Module):
    # LayerNorm (a row reduction), GELU and a residual (pointwise), then a softmax
    # (two row reductions) and an expectation (a row sum): Inductor fuses these into
    # a few kernels. Rows only (no column sums) and rows of 384: Inductor then has one
    # config per reduction kernel and benchmarks none: to choose among configs it
    # clears the L2 cache between runs with torch's own fill kernel (SASS only), which
    # the emulator cannot run.
    def __init__(self, width: int):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.scale = torch.nn.Parameter(torch.linspace(0.5, 1.5, width))

    def forward(self, x):
        h = torch.nn.functional.gelu(self.norm(x)) * self.scale + x
        return (torch.softmax(h, dim=-1) * h).sum(dim=-1), h.amax(dim=-1)


def main() -> int:
    torch.manual_seed(0)
    model = Model(384)
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 1.5)
        model.norm.bias.uniform_(-0.2, 0.2)
    x = torch.randn(12, 384)
    with torch.no_grad():
        expected = model(x)
        device_model = model.to("cuda")
        compiled = torch.compile(device_model)
        start = time.monotonic()
        got = [t.cpu() for t in compiled(x.to("cuda"))]
        seconds = time.monotonic() - start
    error = max((g - e).abs().max().item() for g, e in zip(got, expected))
    from torch._inductor import metrics
    print(f"max_error={error:.3g} seconds={seconds:.1f} kernels={metrics.generated_kernel_count}", flush=True)
    return 0 if error <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())

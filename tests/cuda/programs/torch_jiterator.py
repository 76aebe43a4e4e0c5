"""PyTorch's jiterator: an elementwise kernel written as a C++ string, compiled by
PyTorch at run time with NVRTC (for the device's own architecture: a cubin) and
launched over CUDA tensors that are filled and read by copies only (PyTorch's own
kernels ship as SASS, which the emulator cannot run). A second function with the same
code comes from PyTorch's kernel cache in this process. Prints one JSON line: the
results' mismatches against the CPU's, and the cubins PyTorch's cache folder holds."""
import json
import os
from pathlib import Path

import torch
from torch.cuda.jiterator import _create_jit_fn

CODE = "template <typename T> T fused(T x, T y, T alpha) { return -x * y + x - y + alpha; }"

fused = _create_jit_fn(CODE, alpha=1.0)
x_cpu = (torch.arange(5000, dtype=torch.float32) % 17) - 8   # small integers: exact either way
y_cpu = (torch.arange(5000, dtype=torch.float32) % 5) * 0.5
x, y = x_cpu.cuda(), y_cpu.cuda()
want = -x_cpu * y_cpu + x_cpu - y_cpu + 1.0
got = fused(x, y).cpu()
with_alpha = fused(x, y, alpha=3.0).cpu()
again = _create_jit_fn(CODE, alpha=1.0)(x, y).cpu()
torch.cuda.synchronize()
cache = Path(os.environ.get("PYTORCH_KERNEL_CACHE_PATH", Path.home() / ".cache" / "torch" / "kernels"))
print(json.dumps({
    "bad": int((got != want).sum()),
    "bad_alpha": int((with_alpha != want + 2.0).sum()),
    "bad_again": int((again != want).sum()),
    "cached_kernels": len([p for p in cache.iterdir() if p.is_file()]) if cache.is_dir() else 0,
}))

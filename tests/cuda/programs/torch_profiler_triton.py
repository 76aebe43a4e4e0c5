"""PyTorch's profiler (Kineto on CUPTI), unmodified, around a job's copies and a
Triton kernel: what a user who runs `torch.profiler` with CUDA activity sees.
Prints one line per device event (`device_event name=<name> us=<duration>`), the
Kineto trace's kernel and memcpy counts, and `max_error=<e>`; exits 0 when the sum
is exact."""
import json
import sys
import tempfile

import torch
import triton
import triton.language as tl
from torch.profiler import ProfilerActivity, profile, record_function


@triton.jit
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(output_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
             mask=mask)


def main() -> int:
    n = 3000
    x = torch.rand(n, dtype=torch.float32)
    y = torch.rand(n, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)
    xd, yd = x.to("cuda"), y.to("cuda")
    out = torch.empty_like(xd)
    add_kernel[grid](xd, yd, out, n, BLOCK_SIZE=1024)  # compiled outside the profiled region
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function("tally_add"):
            xd, yd = x.to("cuda"), y.to("cuda")
            add_kernel[grid](xd, yd, out, n, BLOCK_SIZE=1024)
            got = out.to("cpu")
        torch.cuda.synchronize()
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            print(f"device_event name={event.name} us={event.device_time:.3f}", flush=True)
    with tempfile.NamedTemporaryFile(suffix=".json") as trace:
        prof.export_chrome_trace(trace.name)
        events = json.load(open(trace.name)).get("traceEvents", [])
    kernels = [e for e in events if e.get("cat") == "kernel"]
    copies = [e for e in events if e.get("cat") == "gpu_memcpy"]
    linked_copies = [c for c in copies if c.get("args", {}).get("External id") is not None]
    print(f"trace kernels={len(kernels)} memcpy={len(copies)} copies_linked={len(linked_copies)}", flush=True)
    for k in kernels:
        print(f"trace_kernel name={k['name']} dur={k.get('dur')} grid={k.get('args', {}).get('grid')}", flush=True)
    error = (got - (x + y)).abs().max().item()
    print(f"max_error={error} n={n}", flush=True)
    return 0 if error == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

"""PyTorch (a CUDA build) under tally-run against the emulator: everything that
needs no kernel of PyTorch's own. PyTorch's wheels carry SASS only, and the
emulator runs PTX, so a PyTorch kernel must fail with CUDA's "no kernel image"
error and leave the job able to carry on. Prints one JSON line of results."""
import json
import threading

import torch

results = {}
results["available"] = torch.cuda.is_available()
results["device_count"] = torch.cuda.device_count()
results["name"] = torch.cuda.get_device_name(0)
results["capability"] = list(torch.cuda.get_device_capability(0))
free, total = torch.cuda.mem_get_info()
results["mem_info_ok"] = 0 < free <= total

# Pageable and pinned copies, both directions, on the default and a side stream.
host = torch.arange(1 << 20, dtype=torch.float32)
device = host.cuda()
results["pageable_roundtrip"] = torch.equal(device.cpu(), host)
pinned = torch.empty_like(host).pin_memory()
results["pinned"] = pinned.is_pinned()
side = torch.cuda.Stream()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
with torch.cuda.stream(side):
    start.record()
    copy = host.to("cuda", non_blocking=True)
    pinned.copy_(copy, non_blocking=True)
    end.record()
end.synchronize()
results["pinned_async_roundtrip"] = torch.equal(pinned, host)
results["elapsed_ms_ok"] = start.elapsed_time(end) >= 0
side.synchronize()
torch.cuda.synchronize()
results["allocated"] = torch.cuda.memory_allocated() >= 2 * host.numel() * 4
del device, copy
torch.cuda.empty_cache()
results["allocated_after_free"] = torch.cuda.memory_allocated()
# Device-to-device copy between two tensors is a cudaMemcpyAsync, not a kernel.
a = host.cuda()
b = torch.empty_like(a)
b.copy_(a)
results["device_to_device"] = torch.equal(b.cpu(), host)

# A CUDA graph (torch.cuda.graph) of a device-to-device copy, replayed with new input.
y = torch.empty_like(a)
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    y.copy_(a)  # warm-up outside the capture, as PyTorch asks
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    y.copy_(a)
replays_good = 0
for r in range(3):
    a.copy_(host + r)
    graph.replay()
    replays_good += torch.equal(y.cpu(), host + r)
results["graph_replays_good"] = replays_good
a.copy_(host)

# A Python thread (never calling torch.cuda.set_device) copies and synchronizes the
# device: the CUDA runtime makes no context current there through the driver, and
# torch.cuda.synchronize() failed with "invalid device context" until tally bound
# the primary context itself (docs/export-tables.md, "Worker threads").
worker_results = {}


def worker() -> None:
    try:
        w = torch.empty_like(a)
        w.copy_(a)
        torch.cuda.synchronize()
        worker_results["ok"] = torch.equal(w.cpu(), host)
    except Exception as e:  # noqa: BLE001 - reported in the JSON line
        worker_results["error"] = str(e).splitlines()[0]


thread = threading.Thread(target=worker)
thread.start()
thread.join()
results["worker_thread"] = worker_results

# A PyTorch kernel: refused with CUDA's error for a missing image, and the job goes on.
try:
    (a + 1).cpu()
    results["kernel_error"] = None
except Exception as e:  # torch.AcceleratorError in 2.15, RuntimeError before
    results["kernel_error"] = str(e).splitlines()[0]
results["after_kernel_error"] = torch.equal(a.cpu(), host)
results["blas_handle"] = torch.cuda.current_blas_handle() != 0
print(json.dumps(results))

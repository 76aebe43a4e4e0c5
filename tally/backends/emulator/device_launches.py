"""Kernels launched by kernels (CUDA dynamic parallelism) on the emulator.

A grid's `child<<<...>>>` calls come back from its launch as requests
(csrc/src/emulator/device_launch.cpp: the kernel, its shape, its parameter buffer in
the job's device heap, the device-side stream). They run here, on the parent's
stream thread, once the parent grid is done and before anything queued after it:
the parent grid is complete only when its children are, which is what CUDA
promises, and a parent cannot wait for a child (CUDA 12's device runtime has no
device-side synchronization), so no program can tell this order from a GPU's.

Order: launches into the per-grid streams (the NULL stream, fire-and-forget) in the
order the grid made them (block order, then each block's call order), each with
all of its own descendants; then the tail launches (cudaStreamTailLaunch), which
CUDA runs after the grid and all its other work. A child that fails fails its
parent's launch as CUDA reports it: the error of the stream the host launched on.
"""
from __future__ import annotations

from tally.protocol.errors import CUDA_ERROR_LAUNCH_FAILED, DeviceError

# CUDA's deepest nesting of device-side launches (the device runtime's limit).
MAX_NESTING_DEPTH = 24
# cudaStreamTailLaunch's handle (cuda_device_runtime_api.h).
TAIL_LAUNCH_STREAM = 0x3


def run_device_launches(backend, parent, stream, requests, heap, sm_cap: int | None, depth: int) -> None:
    """Runs `requests` (LaunchResult.device_launches of `parent`'s grid: (kernel index,
    grid, block, dynamic shared bytes, parameter buffer, stream) each), freeing every
    parameter buffer whether or not its launch runs."""
    ordered = [r for r in requests if r[5] != TAIL_LAUNCH_STREAM] + [r for r in requests if r[5] == TAIL_LAUNCH_STREAM]
    pending = [r[4] for r in ordered]
    try:
        for index, grid, block, shared_bytes, buffer, _ in ordered:
            child = parent.module.kernel_at(index)
            params = bytearray(child.param_bytes)
            if params:
                backend.read_device(params, buffer)
            heap.free(buffer)
            pending.remove(buffer)
            if depth + 1 > MAX_NESTING_DEPTH:
                raise DeviceError(CUDA_ERROR_LAUNCH_FAILED,
                                  f"kernel {parent.name} launched {child.name} from device code {depth + 1} launches "
                                  f"deep; CUDA allows at most {MAX_NESTING_DEPTH}")
            try:
                run = backend.checked_launch(child, grid, block, shared_bytes, bytes(params), sm_cap, depth=depth + 1)
            except DeviceError as e:
                raise DeviceError(e.code, f"kernel {parent.name} launched {child.name} from device code: {e}") from None
            run(stream)
    finally:
        for buffer in pending:
            heap.free(buffer)

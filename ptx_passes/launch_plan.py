"""How to launch a transformed kernel: the contract between the passes, the
scheduler and every backend, with no driver in it.

A pass appends its own parameters after the kernel's original ones, at an
8-byte aligned offset, so the host builds the new parameter buffer by copying
the job's buffer byte for byte and packing the extras behind it.

Sliced kernels run a contiguous range of the original grid's blocks, in
row-major (x fastest) linear order, as a 1-D launch of `count` blocks; the
kernel rebuilds %ctaid.{x,y,z} from (block_offset + %ctaid.x) and the original
grid, and %nctaid from the original grid. Any slice count works for 1-, 2- and
3-D grids.

PTB (persistent thread block) kernels run `workers` blocks that loop: check
the preempt flag, take the next task with an atomic add on the task counter,
run the original block `task` (same linear order), until the counter passes
the grid's block count. Host-side protocol:
- before the first launch: counter = 0, flag = 0 (one 8-byte state buffer);
- preempt: write flag = 1 (any stream), then wait for the kernel to finish;
  every task taken before that completes, none after it starts;
- resume: write flag = 0 and launch again with the same state buffer;
- the kernel is complete when the counter >= total_blocks (read it back).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

Dim3 = tuple[int, int, int]

EXTRA_PARAMS_ALIGN = 8
SLICE_EXTRA = struct.Struct("<IIII")      # block_offset, grid_x, grid_y, grid_z
PTB_EXTRA = struct.Struct("<QQIII")       # task_counter_ptr, preempt_flag_ptr, grid_x, grid_y, grid_z
PTB_STATE_BYTES = 8                       # u32 task counter, u32 preempt flag
PTB_FLAG_OFFSET = 4                       # byte offset of the flag inside the state buffer


# The passes keep block indices, offsets and the task counter in u32 registers.
MAX_TRANSFORMABLE_BLOCKS = 2**32 - 1


def total_blocks(grid: Dim3) -> int:
    return grid[0] * grid[1] * grid[2]


def transformable_grid(grid: Dim3) -> bool:
    """False when a grid is too large for the variants' 32-bit block bookkeeping;
    such a launch must run as the original kernel."""
    return 0 < total_blocks(grid) <= MAX_TRANSFORMABLE_BLOCKS


def extra_params_offset(original_param_bytes: int) -> int:
    a = EXTRA_PARAMS_ALIGN
    return (original_param_bytes + a - 1) // a * a


def _with_extras(original: bytes, original_param_bytes: int, extras: bytes) -> bytes:
    if len(original) != original_param_bytes:
        raise ValueError(f"parameter buffer is {len(original)} bytes, kernel takes {original_param_bytes}")
    pad = extra_params_offset(original_param_bytes) - original_param_bytes
    return bytes(original) + b"\0" * pad + extras


@dataclass(frozen=True)
class SliceLaunch:
    block_offset: int     # first original block (linear index) of this slice
    count: int            # number of blocks; launched as grid (count, 1, 1)


@dataclass(frozen=True)
class SlicedKernel:
    """A kernel transformed by the slicing pass."""

    name: str                   # entry name in the transformed module
    original_name: str
    original_param_bytes: int

    def slices(self, grid: Dim3, n_slices: int) -> list[SliceLaunch]:
        """Split the grid into at most n_slices contiguous, near-equal ranges."""
        total = total_blocks(grid)
        if total == 0:
            return []
        n = max(1, min(n_slices, total))
        base, extra = divmod(total, n)
        out, start = [], 0
        for i in range(n):
            count = base + (1 if i < extra else 0)
            out.append(SliceLaunch(start, count))
            start += count
        return out

    def params(self, original: bytes, grid: Dim3, block_offset: int) -> bytes:
        return _with_extras(original, self.original_param_bytes,
                            SLICE_EXTRA.pack(block_offset, *grid))


@dataclass(frozen=True)
class PTBKernel:
    """A kernel transformed by the PTB preemption pass."""

    name: str
    original_name: str
    original_param_bytes: int

    def params(self, original: bytes, grid: Dim3, state_ptr: int) -> bytes:
        return _with_extras(original, self.original_param_bytes,
                            PTB_EXTRA.pack(state_ptr, state_ptr + PTB_FLAG_OFFSET, *grid))

    @staticmethod
    def is_complete(state: bytes, grid: Dim3) -> bool:
        counter, _flag = struct.unpack_from("<II", state)
        return counter >= total_blocks(grid)

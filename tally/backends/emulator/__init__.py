"""The `emulator` device backend: PTX interpreted on the CPU, so CI runs real
nvcc-compiled CUDA programs without a GPU.

How it is built
- backend.py: EmulatorBackend, the DeviceBackend (memory, modules, streams,
  events, device printf per stream).
- module.py parses a module's PTX (ptx_passes) at load, allocates and initializes
  its .global/.const variables, and lowers each kernel at its first launch.
- lowering.py (+ context.py and one lowerer per family: lower_compute.py,
  lower_memory.py, lower_control.py, lower_mbarrier.py, lower_async_copy.py, lower_tensor_copy.py,
  lower_texture.py, ...) turns a kernel and the functions it calls into
  a `tally._core.emulator.Program`: an array of pre-decoded instructions (handler,
  operand slots, immediate, flags), run by the C++ interpreter in
  csrc/src/emulator/ with the GIL released.
- streams.py gives each stream a worker thread, so streams run concurrently.

Execution model (csrc/src/emulator/scheduler.cpp has the details)
- Blocks run one after another; a block's warps take turns (a slice of 16 Ki
  instructions each). A cooperative launch keeps every block of its grid resident
  at once (csrc/src/emulator/cooperative.cpp: each worker takes one more block per
  turn and gives the blocks it holds turns of 1 Ki instructions per warp), so
  blocks can wait for each other at a grid barrier; a warp runs the group of its lanes with the deepest call
  frame and the lowest pc, all 32 lanes in one loop per instruction. nvcc lays
  structured code out with join points after the code that leads to them, so
  this reconverges lanes at the immediate post-dominator; warp-synchronous
  instructions (shfl/vote/match/redux/elect.sync, bar.warp.sync) additionally
  wait for every live lane of their membermask.
- Barriers count threads; exited threads do not count. Live threads that can
  never all meet (waiting at different barrier instructions, or at barriers
  nobody else will reach) fail the launch instead of hanging.
- Memory is sequentially consistent between the host and all streams; global
  and generic accesses are relaxed atomic moves, atomics are real atomics.

Address spaces
- Device allocations: 0x7f00_0000_0000 up (256-byte aligned, a 256-byte unmapped
  guard after each); every global access is checked against live allocations.
- Generic windows: shared 0x7e00_0000_0000, local 0x7e01_0000_0000, kernel
  parameters 0x7e02_0000_0000 (4 GiB each); function pointers are
  0x7e03_0000_0000 + the function's index in its module.

Errors (DeviceError codes, all for the failing launch only)
- module PTX that does not parse: CUDA_ERROR_INVALID_PTX at module_load, with
  the parser's line and column; a cubin-only module: CUDA_ERROR_NO_BINARY_FOR_GPU;
- an instruction the emulator cannot run: CUDA_ERROR_ILLEGAL_INSTRUCTION at the
  kernel's launch, naming the instruction and its PTX line (the module's other
  kernels still run);
- out-of-range or freed addresses: CUDA_ERROR_ILLEGAL_ADDRESS; misaligned ones:
  CUDA_ERROR_MISALIGNED_ADDRESS (address, thread, block and PTX line named);
- divergent barriers, trap, call stack overflow, brx.idx past its table:
  CUDA_ERROR_LAUNCH_FAILED; time or instruction limit: CUDA_ERROR_LAUNCH_TIMEOUT;
- a failed device assert (__assertfail): CUDA_ERROR_ASSERT, with CUDA's message
  for each failing thread of the warp (LaunchResult.assert_output).

Reserved shared memory: a kernel that reads %reserved_smem_offset_* or
%aggr_smem_size (cooperative groups do, for tiles larger than a warp) gets a
1 KiB region after its own shared memory (slot 0 its first half, slot 1 the
second); WARP_SZ is the constant 32.

Tensor maps: `tensormap.replace` writes the field of the 128-byte map where the
emulator's own layout keeps it (csrc/src/emulator/tensor_map.h, the one place
that defines it; TMA copies are to read the same layout).

Kernel attributes (cuFuncGetAttribute) are read from the PTX: kernel_resources.py.

Grid-wide synchronization: a cooperative launch gets a grid workspace, whose
address %envreg1:%envreg2 read (CUDA C++'s grid.sync(); 0 in other launches, where
it traps), and the driver's cooperative-groups system calls that libcudadevrt's
grid sync (numba's) ends in are defined in PTX on it (grid_syscalls.py).

Device-side malloc/free (extern `malloc`/`free`, as nvcc and numba's NRT declare
them) allocate from the module's heap (csrc/src/emulator/device_heap.h): the
job's, which the server attaches (tally/server/client/device_heap.py), or the
driver's default 8 MiB when the backend runs on its own.

Arrive-wait barriers (mbarrier: init, arrive, arrive_drop, expect_tx,
complete_tx, test_wait, try_wait, with and without parity, pending_count, inval;
on a block's own barriers and, through .shared::cluster addresses, on another
block's of its cluster): csrc/src/emulator/ops_mbarrier.cpp. A try_wait that
finds its phase incomplete, and nanosleep, end the warp's turn so the warps it
waits for run (a producer warp and its consumers).

Bulk asynchronous copies (cp.async.bulk between global and shared memory and
between the blocks of a cluster, multicast, cp.reduce.async.bulk; Ampere's
cp.async.mbarrier.arrive): csrc/src/emulator/ops_bulk_copy.cpp. A copy happens
when it is issued; copies into shared memory then pay their bytes off on the
destination's mbarrier, so bulk groups have nothing left to wait for.

TMA tensor copies (cp.async.bulk.tensor, 1-5 D, loads with multicast, stores and
reductions; tile mode, interleaved maps in whole channel chunks, im2col loads and
im2col_no_offs stores): csrc/src/emulator/ops_tensor_copy.cpp, reading tally's tensor-map layout
(tensor_map.h; the maps come from cuTensorMapEncode*, tally/backends/tensor_maps.py):
the box lands densely in shared memory with the 32/64/128-byte swizzle patterns
applied to its addresses, elements outside the tensor read as zero (or NaN) and
are not stored.

Texture and surface objects (tex, tld4, suld.b, sust.b): csrc/src/emulator/ops_texture.cpp.
A CUtexObject is the device address of tally's descriptor (texture.h; the server
writes it, tally/backends/texture_objects.py), and each fetch is computed as CUDA's
programming guide defines texture fetching (lower_texture.py lists the forms).

Warp matrix functions (wmma.load/store/mma, nvcuda::wmma; ops_wmma.cpp): fragments in the
emulator's own layout (the PTX ISA leaves it to the implementation), multiplied with
mma.sync's arithmetic; f16, bf16, s8/u8, tf32 and f64 shapes (lower_wmma.py lists them).

Tensor cores: mma.sync (the m16n8 and m8n8 shapes of f16, bf16, tf32, f64, fp8 and
8/4-bit integers) and wgmma.mma_async (m64nNk*, A from a shared-memory descriptor or
registers, every swizzle, both majors) with its fence/commit/wait: ops_mma.cpp,
ops_wgmma.cpp, matrix_multiply.h (fragment layouts and the arithmetic: exact
products summed in a double, rounded once). wgmma multiplies when issued.

Not supported (each reported as above): textures and surfaces, Volta's m8n8k4 f16
mma, sparse and b1 mma/wgmma, ldmatrix/stmatrix other than m8n8 .b16, Blackwell's tensor
copy modes (im2col::w, gather4/scatter4) and swizzle atoms, vector registers, packed f16x2 atomics, video instructions, dynamic parallelism, and a
cooperative launch with clusters of more than one block.
"""
from tally.backends.emulator.backend import EmulatorBackend

__all__ = ["EmulatorBackend"]

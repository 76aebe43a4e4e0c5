"""Parameters of the `sim` backend's cost model: GPU presets and kernel costs.

Where the numbers come from:
- SM counts, threads and blocks per SM, memory sizes: NVIDIA's A100 and H100
  whitepapers (A100 SXM4: 108 SMs; H100 SXM5: 132 SMs; both 2048 resident
  threads and 32 resident blocks per SM, 1024 threads per block).
- Copy bandwidths: PCIe 4.0 x16 (A100) and 5.0 x16 (H100) nominal rates
  derated to what pinned copies reach in practice, HBM rates derated likewise.
  They only decide how long memcpys take; the scheduler's behaviour does not
  hinge on them.
- Launch overhead, copy latency and host-callback latency: assumed, of the
  order reported for recent GPUs (a few microseconds per dependent kernel,
  ~10 us per cuLaunchHostFunc round trip). Not measured here.
- Per-block times and occupancies of kernels are per kernel (`KernelCost`), set
  by whoever defines the kernel (tests, bench workloads); see
  tally/bench/workloads.py for the ones the co-location benchmark uses and why.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

GiB = 1 << 30


@dataclass(frozen=True)
class SimGPU:
    name: str
    sm_count: int
    memory_bytes: int
    compute_capability: tuple[int, int]
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    max_threads_per_block: int = 1024
    launch_overhead_us: float = 2.0      # stream head -> first block dispatchable
    # A CUDA graph's kernel node after the first: the previous node's end -> its first
    # block dispatchable. NVIDIA's "Getting Started with CUDA Graphs" (2019) measured a
    # short kernel at 3.8 us per kernel launched on a stream and 3.4 us in a graph (a
    # 2.9 us kernel): ~0.9 vs ~0.5 us of overhead per kernel.
    graph_node_overhead_us: float = 0.5
    callback_latency_us: float = 10.0    # stream reaches a host callback -> fn runs
    copy_latency_us: float = 5.0         # fixed part of every memcpy/memset
    htod_gb_per_s: float = 22.0
    dtoh_gb_per_s: float = 22.0
    dtod_gb_per_s: float = 1300.0


A100_SXM4_40GB = SimGPU("NVIDIA A100-SXM4-40GB (sim)", sm_count=108, memory_bytes=40 * GiB,
                        compute_capability=(8, 0))
H100_SXM5_80GB = SimGPU("NVIDIA H100 80GB HBM3 (sim)", sm_count=132, memory_bytes=80 * GiB,
                        compute_capability=(9, 0), htod_gb_per_s=45.0, dtoh_gb_per_s=45.0,
                        dtod_gb_per_s=2800.0)

GPU_PRESETS: dict[str, SimGPU] = {"a100": A100_SXM4_40GB, "h100": H100_SXM5_80GB}


@dataclass(frozen=True)
class KernelCost:
    """How long a kernel's thread blocks take on the simulated device.

    `block_time_us` is the run time of one block while the SM holds as many
    blocks as the kernel's occupancy allows (so a full wave of
    sm_count * resident_blocks_per_sm blocks takes block_time_us).
    `max_blocks_per_sm` is the occupancy limit from registers / shared memory
    (the thread limit is applied on top from the launch's block size).
    `transformable=False` models cubin-only kernels (cuBLAS/cuDNN): no PTX, so
    neither slicing nor PTB is possible.
    `ptb_task_overhead` is the extra time per PTB task (atomic add on the task
    counter, flag check, index reconstruction) as a fraction of a block's time;
    `slice_block_overhead` likewise for the offset arithmetic of sliced kernels.
    """

    block_time_us: float
    max_blocks_per_sm: int = 32
    transformable: bool = True
    ptb_task_overhead: float = 0.03
    slice_block_overhead: float = 0.0

    def __post_init__(self) -> None:
        if not self.block_time_us > 0:
            raise ValueError(f"block_time_us must be > 0, got {self.block_time_us}")
        if self.max_blocks_per_sm < 1:
            raise ValueError(f"max_blocks_per_sm must be >= 1, got {self.max_blocks_per_sm}")


DEFAULT_KERNEL_COST = KernelCost(block_time_us=5.0)


def resident_blocks_per_sm(gpu: SimGPU, cost: KernelCost, threads_per_block: int) -> int:
    """Blocks of one kernel an SM holds at once (warp-granular thread limit)."""
    warps = -(-threads_per_block // 32)
    by_threads = gpu.max_threads_per_sm // (warps * 32)
    return max(1, min(gpu.max_blocks_per_sm, cost.max_blocks_per_sm, by_threads))


# Costs by (mangled) name for kernels of real jobs run under `tally-server
# --backend sim`, first match wins. Assumed orders of magnitude, not
# measurements: GEMM and attention tiles are big (few blocks per SM, tens of
# microseconds), element-wise and normalization blocks are small and short;
# cuBLAS/cuDNN kernels ship as cubins only (not transformable).
LIBRARY_KERNEL_PATTERNS: tuple[tuple[str, KernelCost], ...] = (
    ("*flash*", KernelCost(40.0, 2)),
    ("*attention*", KernelCost(40.0, 2)),
    ("*cutlass*", KernelCost(24.0, 2)),
    ("*gemm*", KernelCost(24.0, 2, transformable=False)),      # cuBLAS: sm80_xmma_gemm_*, ampere_sgemm_*
    ("*conv*", KernelCost(20.0, 2, transformable=False)),      # cuDNN
    ("*softmax*", KernelCost(6.0, 8)),
    ("*norm*", KernelCost(6.0, 8)),
    ("*reduce*", KernelCost(8.0, 8)),
    ("*elementwise*", KernelCost(3.0, 8)),
)


@dataclass
class KernelCostTable:
    """Kernel name -> cost: exact names first, then shell-style patterns in the
    order they were added (starting with LIBRARY_KERNEL_PATTERNS), then the
    default."""

    exact: dict[str, KernelCost] = field(default_factory=dict)
    patterns: list[tuple[str, KernelCost]] = field(default_factory=lambda: list(LIBRARY_KERNEL_PATTERNS))
    default: KernelCost = DEFAULT_KERNEL_COST

    def add(self, name_or_pattern: str, cost: KernelCost) -> None:
        """Patterns added later take precedence over the built-in ones."""
        if any(ch in name_or_pattern for ch in "*?["):
            self.patterns.insert(0, (name_or_pattern, cost))
        else:
            self.exact[name_or_pattern] = cost

    def lookup(self, name: str) -> KernelCost:
        cost = self.exact.get(name)
        if cost is not None:
            return cost
        for pattern, cost in self.patterns:
            if fnmatch.fnmatchcase(name, pattern):
                return cost
        return self.default

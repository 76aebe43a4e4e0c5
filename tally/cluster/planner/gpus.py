"""The GPU types the planner knows and how each can be cut: MIG profiles with
their placement rules, and tally's SM shares.

MIG facts (the one place they are kept; everything else derives from them):
- Profiles, fraction of SMs and memory, instances per GPU: NVIDIA Multi-Instance
  GPU User Guide, "Supported MIG Profiles"
  (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html),
  tables for A100-SXM4-40GB (A100-SXM4-80GB: same slices, twice the memory per
  profile) and H100 80GB.
- Placements: where an instance of a profile may start and how many of the 8
  memory slices it covers, as NVML's nvmlDeviceGetGpuInstancePossiblePlacements
  reports them ({start}:size); the guide draws the same grid. Two instances may
  not share a memory slice, and a GPU has 7 compute slices.
- SMs per instance: the SM column of `nvidia-smi mig -lgip` (A100: 14 per slice,
  98 in a 7g, as in the output quoted in NVIDIA/mig-parted#97 and NVIDIA's NVML
  mock tables; H100: 16/32/60/64 as printed for the same GH100 die in
  NVIDIA/mig-parted#120, and all 132 SMs in a 7g, assumed). Only the sim-derived
  profiles use them.
- One rule the placement grid does not express: a 4g and a 3g instance never
  share a GPU (the grid alone would allow 4g@0 + 3g@4). MIG-serving (Tan et al.,
  "Serving DNN Models with Multi-Instance GPUs", 2021) lists it among MIG's
  partition rules; with it the A100 has the 18 distinct full layouts that paper
  counts, without it 19. We apply it to the H100 too, whose grid is the same.

Only the base profile of each compute size is listed (1g.5gb, not 1g.10gb or
1g.5gb+me): the planner chooses compute sizes; the media-engine and
double-memory variants cut the GPU no differently.
"""
from __future__ import annotations

from dataclasses import dataclass

from tally.cluster.planner.errors import PlanInputError

MIG = "mig"
SM_SHARE = "sm-share"
PARTITION_KINDS = (MIG, SM_SHARE)


@dataclass(frozen=True)
class MigProfile:
    slices: int                                   # compute slices: the 3 of "3g.20gb"
    memory_gb: int                                # the 20 of "3g.20gb"
    sms: int
    placements: tuple[tuple[int, int], ...]       # (first memory slice, memory slices covered)

    @property
    def partition(self) -> str:
        """The GPU-independent name profile tables use: "3g"."""
        return f"{self.slices}g"

    @property
    def name(self) -> str:
        return f"{self.slices}g.{self.memory_gb}gb"


@dataclass(frozen=True)
class GpuType:
    key: str                                      # what users write: "a100-40gb"
    name: str
    memory_gb: int
    sms: int                                      # the whole GPU without MIG
    sim_preset: str                               # tally.backends.sim.model.GPU_PRESETS key
    mig_profiles: tuple[MigProfile, ...]
    mig_exclusive: tuple[frozenset[int], ...]     # compute sizes that never share a GPU
    memory_slices: int = 8
    compute_slices: int = 7
    # SM shares are rounded down to a multiple of this many SMs. Assumed: green
    # contexts have a per-architecture minimum and alignment that the GPU path
    # will query (sm.minSmPartitionSize, sm.smCoscheduledAlignment).
    sm_share_alignment: int = 2

    def mig_profile(self, partition: str) -> MigProfile:
        for profile in self.mig_profiles:
            if profile.partition == partition:
                return profile
        raise PlanInputError(f"{self.key} has no MIG partition {partition!r}; it has "
                             + ", ".join(p.partition for p in self.mig_profiles))


def _a100_geometry(memory_per_slice_gb: int, name: str, key: str) -> GpuType:
    m = memory_per_slice_gb
    profiles = (
        MigProfile(1, m, 14, tuple((s, 1) for s in range(7))),
        MigProfile(2, 2 * m, 28, ((0, 2), (2, 2), (4, 2))),
        MigProfile(3, 4 * m, 42, ((0, 4), (4, 4))),
        MigProfile(4, 4 * m, 56, ((0, 4),)),
        MigProfile(7, 8 * m, 98, ((0, 8),)),
    )
    return GpuType(key, name, memory_gb=8 * m, sms=108, sim_preset="a100", mig_profiles=profiles,
                   mig_exclusive=(frozenset({4, 3}),))


def _h100_80gb() -> GpuType:
    profiles = (
        MigProfile(1, 10, 16, tuple((s, 1) for s in range(7))),
        MigProfile(2, 20, 32, ((0, 2), (2, 2), (4, 2))),
        MigProfile(3, 40, 60, ((0, 4), (4, 4))),
        MigProfile(4, 40, 64, ((0, 4),)),
        MigProfile(7, 80, 132, ((0, 8),)),
    )
    return GpuType("h100-80gb", "NVIDIA H100 80GB HBM3 (SXM5)", memory_gb=80, sms=132, sim_preset="h100",
                   mig_profiles=profiles, mig_exclusive=(frozenset({4, 3}),))


GPU_TYPES: dict[str, GpuType] = {g.key: g for g in (
    _a100_geometry(5, "NVIDIA A100-SXM4-40GB", "a100-40gb"),
    _a100_geometry(10, "NVIDIA A100-SXM4-80GB", "a100-80gb"),
    _h100_80gb(),
)}


def gpu_type(key: str) -> GpuType:
    gpu = GPU_TYPES.get(str(key).lower())
    if gpu is None:
        raise PlanInputError(f"unknown GPU type {key!r}; the planner knows {', '.join(GPU_TYPES)}")
    return gpu

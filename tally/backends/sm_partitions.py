"""How a device's SMs may be cut into partitions (green contexts): the rules the
server tells a job through cuDeviceGetDevResource, and what an SM cap really gets
on the cuda backend.

CUDA's driver API documents a guideline per compute capability (section "Green
Contexts"): 6.x and 7.x at least 2 SMs in multiples of 2, 8.x at least 4 in
multiples of 2, 9.0 and newer at least 8 in multiples of 8. On a GPU the driver's
own figures (cuDeviceGetDevResource: sm.minSmPartitionSize,
sm.smCoscheduledAlignment) win over the guideline; the other backends report the
guideline of the compute capability they present.
"""
from __future__ import annotations

from dataclasses import dataclass

from tally.backends.base import DeviceDescription


@dataclass(frozen=True)
class SmPartitionRules:
    minimum: int      # sm.minSmPartitionSize
    alignment: int    # sm.smCoscheduledAlignment

    def grant(self, requested: int, sm_count: int) -> int:
        """The SMs a cap of `requested` gets on a device of `sm_count` SMs: the whole
        device at or above it; else rounded down to the alignment (a share is an upper
        bound), never below the smallest partition."""
        if requested >= sm_count:
            return sm_count
        return min(sm_count, max(self.minimum, requested // self.alignment * self.alignment))


def guideline(compute_capability: tuple[int, int]) -> SmPartitionRules:
    major = compute_capability[0]
    if major >= 9:
        return SmPartitionRules(8, 8)
    if major == 8:
        return SmPartitionRules(4, 2)
    return SmPartitionRules(2, 2)


def rules_of(description: DeviceDescription) -> SmPartitionRules:
    """The device's own rules where its backend read them, else the guideline."""
    if description.sm_partition_min > 0 and description.sm_partition_alignment > 0:
        return SmPartitionRules(description.sm_partition_min, description.sm_partition_alignment)
    return guideline(description.compute_capability)

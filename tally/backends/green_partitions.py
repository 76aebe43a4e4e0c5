"""SM caps on a GPU, with green contexts (CUDA 12.4+), for the cuda backend.

A launch capped to N SMs runs in a partition: a green context holding N SMs
(rounded to the partition rules the driver reports), made the first time a cap
of that size is asked for and kept until the backend closes. The kernel goes to a
shadow stream of the partition, one per (stream, partition): the shadow stream
waits for an event recorded on the stream, runs the kernel, and the stream waits
for an event recorded after it. So stream order holds, and only that kernel is
confined: the stream's copies, events and uncapped kernels run where they did.
Kernels tally cannot rewrite (cubins) are confined like any other.

`GreenPartitions.open` says why green contexts cannot be used where they cannot
(a driver older than CUDA 12.4, a MIG instance, a driver that refuses them); the
backend then reports `confines_sms` False and the executor's fallback applies.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from tally.backends.sm_partitions import SmPartitionRules
from tally.protocol.errors import CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, DeviceError

from cuda.bindings import driver as cu

# Partitions kept at most. An H100 has 16 sizes below its 132 SMs in multiples of 8;
# past the bound a cap gets the largest partition made that is not larger than it.
MAX_PARTITIONS = 16
_GREEN_STREAM_CREATE = 12050      # cuGreenCtxStreamCreate (CUDA 12.5); 12.4 makes streams in the context
_GREEN_CONTEXTS = 12040


@dataclass(eq=False)
class _Partition:
    sm_count: int
    green: object                 # CUgreenCtx


@dataclass(eq=False)
class _Shadow:
    stream: object                # a stream of the partition's green context
    before: object                # recorded on the job's stream, waited for here
    after: object                 # recorded here after the kernel, waited for by the job's stream


class GreenPartitions:
    def __init__(self, device, sm_count: int, rules: SmPartitionRules, driver_version: int, check):
        self._device = device
        self.sm_count = sm_count
        self.rules = rules
        self._driver_version = driver_version
        self._check = check       # the backend's: raises DeviceError on a failed call
        self._lock = threading.Lock()
        self._partitions: dict[int, _Partition] = {}
        self._shadows: dict[tuple[int, int], _Shadow] = {}   # (stream handle, partition size) -> shadow

    @classmethod
    def open(cls, device, name: str, driver_version: int, check) -> tuple["GreenPartitions | None", str]:
        """The device's partitions, or None and why green contexts cannot be used."""
        if driver_version < _GREEN_CONTEXTS:
            return None, (f"the driver is CUDA {driver_version // 1000}.{driver_version % 1000 // 10}; "
                          f"green contexts need CUDA 12.4")
        if " MIG " in f" {name} ":
            return None, f"{name} is a MIG instance, where CUDA has no green contexts"
        try:
            resource = check(cu.cuDeviceGetDevResource(device, cu.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM))
            rules = SmPartitionRules(max(1, resource.sm.minSmPartitionSize),
                                     max(1, resource.sm.smCoscheduledAlignment))
            partitions = cls(device, resource.sm.smCount, rules, driver_version, check)
            partitions._partition(rules.minimum)     # the smallest: the driver makes green contexts
        except DeviceError as e:
            return None, f"the driver refused a green context ({e})"
        return partitions, ""

    def grant(self, requested_sms: int) -> int:
        return self.rules.grant(max(1, requested_sms), self.sm_count)

    def launch(self, stream, sm_cap: int, launch_on) -> None:
        """launch_on(s) launches the kernel on stream s: here on the stream's shadow in
        the partition of the cap, ordered between the stream's work before and after."""
        size = self.grant(sm_cap)
        if size >= self.sm_count:
            launch_on(stream)
            return
        check = self._check
        with self._lock:
            shadow = self._shadow(stream, self._partition(size))
            check(cu.cuEventRecord(shadow.before, stream))
            check(cu.cuStreamWaitEvent(shadow.stream, shadow.before, 0))
            launch_on(shadow.stream)
            check(cu.cuEventRecord(shadow.after, shadow.stream))
            check(cu.cuStreamWaitEvent(stream, shadow.after, 0))

    def forget_stream(self, stream) -> None:
        """Before the stream is destroyed: its shadows go too (CUDA frees a destroyed
        stream's and event's resources once their work is done)."""
        key = int(stream)
        with self._lock:
            for shadow_key in [k for k in self._shadows if k[0] == key]:
                self._destroy_shadow(self._shadows.pop(shadow_key))

    def close(self) -> None:
        with self._lock:
            for shadow in self._shadows.values():
                self._destroy_shadow(shadow)
            self._shadows.clear()
            for partition in self._partitions.values():
                cu.cuGreenCtxDestroy(partition.green)
            self._partitions.clear()

    # internals (with the lock held) ----------------------------------------------------
    def _partition(self, size: int) -> _Partition:
        partition = self._partitions.get(size)
        if partition is not None:
            return partition
        if len(self._partitions) >= MAX_PARTITIONS:
            return self._partitions[max(s for s in self._partitions if s <= size)]
        check, sm = self._check, cu.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM
        groups, count, _rest = check(cu.cuDevSmResourceSplitByCount(1, check(cu.cuDeviceGetDevResource(
            self._device, sm)), 0, size))
        if count < 1:
            raise DeviceError(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, f"no partition of {size} SMs")
        desc = check(cu.cuDevResourceGenerateDesc([groups[0]], 1))
        green = check(cu.cuGreenCtxCreate(desc, self._device, cu.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM))
        partition = self._partitions[size] = _Partition(groups[0].sm.smCount, green)
        return partition

    def _shadow(self, stream, partition: _Partition) -> _Shadow:
        key = (int(stream), partition.sm_count)
        shadow = self._shadows.get(key)
        if shadow is None:
            check = self._check
            priority = check(cu.cuStreamGetPriority(stream))
            no_timing = cu.CUevent_flags.CU_EVENT_DISABLE_TIMING
            shadow = self._shadows[key] = _Shadow(self._green_stream(partition, priority),
                                                  check(cu.cuEventCreate(no_timing)),
                                                  check(cu.cuEventCreate(no_timing)))
        return shadow

    def _green_stream(self, partition: _Partition, priority: int):
        check, flags = self._check, cu.CUstream_flags.CU_STREAM_NON_BLOCKING
        if self._driver_version >= _GREEN_STREAM_CREATE:
            return check(cu.cuGreenCtxStreamCreate(partition.green, flags, priority))
        # CUDA 12.4: a stream made while the green context is current belongs to it
        check(cu.cuCtxPushCurrent(check(cu.cuCtxFromGreenCtx(partition.green))))
        try:
            return check(cu.cuStreamCreateWithPriority(flags, priority))
        finally:
            cu.cuCtxPopCurrent()

    @staticmethod
    def _destroy_shadow(shadow: _Shadow) -> None:
        cu.cuStreamDestroy(shadow.stream)
        cu.cuEventDestroy(shadow.before)
        cu.cuEventDestroy(shadow.after)

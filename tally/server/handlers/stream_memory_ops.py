"""Stream memory operations: cuStreamWaitValue32/64 and cuStreamWriteValue32/64
(cuStreamBatchMemOp arrives as one of these per operation, in order).

The address must be memory the job owns (device memory, a module variable,
mapped virtual memory, an allocation it opened by IPC) or pinned host memory the
device reaches at that address, aligned to the width. A wait holds its stream
only (tally/scheduler/ops.py, StreamWaitValue); one that is never satisfied
ends when the job is evicted, leaves, or its process exits (ReleaseValueWaits).
"""
from __future__ import annotations

from tally.backends.stream_memory_ops import WAIT_CONDITIONS, WAIT_FLUSH, WRITE_NO_MEMORY_BARRIER
from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED, DeviceError
from tally.protocol.messages_generated import ReleaseValueWaits, StreamWaitValue, StreamWriteValue
from tally.scheduler import ops
from tally.server.job import Job


def _check_address(job: Job, address: int, width: int, what: str) -> None:
    if width not in (4, 8):
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{what}: width {width} (4 or 8 bytes)")
    if address % width:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                          f"{what} 0x{address:x} is not aligned to {width} bytes")
    if not job.client.regions.reachable(address, width):
        job.client.check_device_range(address, width, what)


def stream_wait_value(job: Job, msg: StreamWaitValue, tag: int) -> None:
    width, condition = msg.width, msg.condition
    if condition & WAIT_FLUSH:
        raise DeviceError(CUDA_ERROR_NOT_SUPPORTED, "CU_STREAM_WAIT_VALUE_FLUSH needs remote-write flushing, "
                          "which this device does not report (CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES is 0)")
    if condition not in WAIT_CONDITIONS:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"stream wait flags {condition:#x}: the condition must be "
                          "CU_STREAM_WAIT_VALUE_GEQ, EQ, AND or NOR")
    _check_address(job, msg.address, width, "stream wait value address")
    if msg.value >= 1 << (8 * width):
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"value {msg.value:#x} does not fit {width} bytes")
    job.client.streams.submit(msg.stream, ops.StreamWaitValue(msg.address, msg.value, width, condition))


def stream_write_value(job: Job, msg: StreamWriteValue, tag: int) -> None:
    width = msg.width
    if msg.flags & ~WRITE_NO_MEMORY_BARRIER:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"stream write flags {msg.flags:#x}: only "
                          "CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER (1) is defined")
    _check_address(job, msg.address, width, "stream write value address")
    if msg.value >= 1 << (8 * width):
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"value {msg.value:#x} does not fit {width} bytes")
    job.client.streams.submit(msg.stream, ops.StreamWriteValue(msg.address, msg.value, width))


def release_value_waits(job: Job, msg: ReleaseValueWaits, tag: int) -> None:
    """The job's process is exiting (its exit handlers run): a wait nobody will satisfy
    must not hold them (they unload modules, which waits for the job's work)."""
    job.client.executor.release_value_waits(job.client_id)


HANDLERS = {
    StreamWaitValue: stream_wait_value,
    StreamWriteValue: stream_write_value,
    ReleaseValueWaits: release_value_waits,
}

"""cuIpcGetMemHandle / cuIpcOpenMemHandle / cuIpcCloseMemHandle and
cuIpcGetEventHandle / cuIpcOpenEventHandle: what jobs export to each other
(tally/server/ipc_registry.py, one per server; what a job opened:
tally/server/client/ipc.py)."""
from __future__ import annotations

from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.protocol.messages_generated import (
    IpcCloseMemHandle,
    IpcGetEventHandle,
    IpcGetMemHandle,
    IpcHandleReply,
    IpcOpenEventHandle,
    IpcOpenMemHandle,
    IpcOpenMemReply,
)
from tally.server.client.sync import when_idle
from tally.server.dispatch import ANSWERS_ITSELF
from tally.server.job import Job


def ipc_get_mem_handle(job: Job, msg: IpcGetMemHandle, tag: int) -> IpcHandleReply:
    ptr = msg.dptr
    found = job.client.allocations.find(ptr)
    if found is None or found[0] != ptr:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"0x{ptr:x} is not the start of an allocation of this job")
    export_id, secret = job.services.ipc.export_memory(job.client_id, ptr, found[1])
    return IpcHandleReply(export_id=export_id, secret=secret)


def ipc_open_mem_handle(job: Job, msg: IpcOpenMemHandle, tag: int) -> IpcOpenMemReply:
    base, size = job.client.opened.open(msg.export_id, msg.secret)
    return IpcOpenMemReply(dptr=base, bytes=size)


def ipc_close_mem_handle(job: Job, msg: IpcCloseMemHandle, tag: int):
    base = msg.dptr
    if job.client.opened.close(base):
        # The owner freed it already; this job's queued work may still use it.
        when_idle(job.client, tag, lambda: job.backend.mem_free(base))
        return ANSWERS_ITSELF
    return None


def ipc_get_event_handle(job: Job, msg: IpcGetEventHandle, tag: int) -> IpcHandleReply:
    events = job.client.events
    if events.is_opened(msg.event):
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, "an event opened from another job cannot be exported again")
    export_id, secret = job.services.ipc.export_event(job.client_id, events.get(msg.event))
    return IpcHandleReply(export_id=export_id, secret=secret)


def ipc_open_event_handle(job: Job, msg: IpcOpenEventHandle, tag: int) -> None:
    events = job.client.events
    events.check_new(msg.event)
    events.add_opened(msg.event, job.services.ipc.open_event(job.client_id, msg.export_id, msg.secret))


HANDLERS = {
    IpcGetMemHandle: ipc_get_mem_handle,
    IpcOpenMemHandle: ipc_open_mem_handle,
    IpcCloseMemHandle: ipc_close_mem_handle,
    IpcGetEventHandle: ipc_get_event_handle,
    IpcOpenEventHandle: ipc_open_event_handle,
}

"""cuIpcGetMemHandle / cuIpcOpenMemHandle / cuIpcCloseMemHandle and
cuIpcGetEventHandle / cuIpcOpenEventHandle: what jobs export to each other
(tally.server.ipc.IpcRegistry, one per server)."""
from __future__ import annotations

from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.server.dispatch import handler
from tally.server.client.state import driver_state
from tally.server.client.sync import when_idle


@handler("IpcGetMemHandle")
def ipc_get_mem_handle(session, fields, tail, tag):
    ptr = fields["dptr"]
    found = session.allocations.find(ptr)
    if found is None or found[0] != ptr:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"0x{ptr:x} is not the start of an allocation of this job")
    export_id, secret = session.server.ipc.export_memory(session.client_id, ptr, found[1])
    session.reply("IpcHandleReply", tag, export_id=export_id, secret=secret)


@handler("IpcOpenMemHandle")
def ipc_open_mem_handle(session, fields, tail, tag):
    state = driver_state(session)
    base, size = session.server.ipc.open_memory(session.client_id, fields["export_id"], fields["secret"])
    state.imports[base] = size
    session.reply("IpcOpenMemReply", tag, dptr=base, bytes=size)


@handler("IpcCloseMemHandle")
def ipc_close_mem_handle(session, fields, tail, tag):
    state = driver_state(session)
    base = fields["dptr"]
    free_now = session.server.ipc.close_memory(session.client_id, base)
    if not any(b == base for b, _ in session.server.ipc.opened_by(session.client_id)):
        state.imports.pop(base, None)

    if free_now:   # the owner freed it already; this job's queued work may still use it
        when_idle(state, tag, lambda: session.backend.mem_free(base))
    elif tag:
        session.reply("Done", tag)


@handler("IpcGetEventHandle")
def ipc_get_event_handle(session, fields, tail, tag):
    state = driver_state(session)
    event_id = fields["event"]
    if event_id in state.imported_events:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, "an event opened from another job cannot be exported again")
    export_id, secret = session.server.ipc.export_event(session.client_id, state.event(event_id))
    session.reply("IpcHandleReply", tag, export_id=export_id, secret=secret)


@handler("IpcOpenEventHandle")
def ipc_open_event_handle(session, fields, tail, tag):
    state = driver_state(session)
    event_id = fields["event"]
    state.check_new_event_id(event_id)
    state.events[event_id] = session.server.ipc.open_event(session.client_id, fields["export_id"], fields["secret"])
    state.imported_events.add(event_id)
    if tag:
        session.reply("Done", tag)

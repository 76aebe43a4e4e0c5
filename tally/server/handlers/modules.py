"""Module and function requests: load images, resolve kernels and globals.

A function's reply carries everything the client needs to launch it without
asking again: its id, its parameter layout (offset and size of each parameter,
from the backend's Function) and its CU_FUNC_ATTRIBUTE_* values.
"""
from __future__ import annotations

import struct

from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.protocol.spec import FUNC_ATTRIBUTE_SLOTS
from tally.server.dispatch import handler
from tally.server.handlers.copies import take_upload
from tally.server.client.function_attributes import function_attributes
from tally.server.client.state import driver_state
from tally.server.client.sync import drain_quietly

PARAM_SLOT = struct.Struct("<II")
# A module image is held in memory while it loads; beyond this a client is confused.
MAX_IMAGE_BYTES = 1 << 30


@handler("StageBytes")
def stage_bytes(session, fields, tail, tag):
    state = driver_state(session)
    chunk = take_upload(session, fields["arena_offset"], fields["size"])
    if len(state.staging) + len(chunk) > MAX_IMAGE_BYTES:
        state.staging = bytearray()
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"staged bytes exceed {MAX_IMAGE_BYTES} bytes")
    state.staging += chunk
    if tag:
        session.reply("Done", tag)


@handler("ModuleLoad")
def module_load(session, fields, tail, tag):
    state = driver_state(session)
    if fields["staged"]:
        image, state.staging = bytes(state.staging), bytearray()
    else:
        image = bytes(tail)
    if len(image) != fields["size"]:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"module image of {fields['size']} bytes arrived "
                                                    f"with {len(image)}")
    module = state.modules.load(image)
    session.reply("ModuleLoadReply", tag, module=module.module_id)


@handler("ModuleUnload")
def module_unload(session, fields, tail, tag):
    state = driver_state(session)
    module = state.modules.detach(fields["module"])

    def unload_when_idle() -> None:
        # Launches of the module may still be queued (a best-effort job's are held
        # back by the scheduler): they run on its code and globals first, as on CUDA.
        drain_quietly(state, state.streams.keys())
        state.modules.release(module)
        if tag:
            session.reply("Done", tag)

    state.blocking.run(tag, unload_when_idle)


def _name(tail) -> str:
    try:
        name = bytes(tail).decode()
    except UnicodeDecodeError:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, "symbol name is not UTF-8") from None
    if not name or "\0" in name:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"bad symbol name {name!r}")
    return name


@handler("GetFunction")
def get_function(session, fields, tail, tag):
    state = driver_state(session)
    fn = state.modules.function(fields["module"], _name(tail))
    params = fn.params
    layout = b"".join(PARAM_SLOT.pack(p.offset, p.size) for p in params)
    total = max((p.offset + p.size for p in params), default=0)
    attributes = function_attributes(session.backend, fn)
    assert len(attributes) == FUNC_ATTRIBUTE_SLOTS
    session.reply("FunctionReply", tag, layout, function=fn.function_id, param_count=len(params),
                  param_total=total, attributes=attributes)


@handler("GetGlobal")
def get_global(session, fields, tail, tag):
    ptr, size = driver_state(session).modules.global_variable(fields["module"], _name(tail))
    session.reply("GlobalReply", tag, dptr=ptr, size=size)

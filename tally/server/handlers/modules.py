"""Module and function requests: load images, resolve kernels and globals.

A function's reply carries everything the client needs to launch it without
asking again: its id, its parameter layout (offset and size of each parameter,
from the backend's Function) and its CU_FUNC_ATTRIBUTE_* values.
"""
from __future__ import annotations

import struct

from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.protocol.messages_generated import (
    FunctionReply,
    GetFunction,
    GetGlobal,
    GlobalReply,
    ModuleLoad,
    ModuleLoadReply,
    ModuleUnload,
    StageBytes,
)
from tally.protocol.spec import FUNC_ATTRIBUTE_SLOTS
from tally.server.client.function_attributes import function_attributes
from tally.server.client.modules import MAX_IMAGE_BYTES
from tally.server.client.sync import drain_quietly
from tally.server.dispatch import ANSWERS_ITSELF, name_in_tail
from tally.server.job import Job

PARAM_SLOT = struct.Struct("<II")


def stage_bytes(job: Job, msg: StageBytes, tag: int) -> None:
    client = job.client
    chunk = job.take_upload(msg.arena_offset, msg.size)
    if len(client.staging) + len(chunk) > MAX_IMAGE_BYTES:
        client.staging = bytearray()
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"staged bytes exceed {MAX_IMAGE_BYTES} bytes")
    client.staging += chunk


def module_load(job: Job, msg: ModuleLoad, tag: int) -> ModuleLoadReply:
    client = job.client
    if msg.staged:
        image, client.staging = bytes(client.staging), bytearray()
    else:
        image = bytes(msg.tail)
    if len(image) != msg.size + msg.record_size:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"module image of {msg.size} bytes (and a JIT-capture record "
                                                    f"of {msg.record_size}) arrived with {len(image)}")
    image, record = image[:msg.size], image[msg.size:]
    return ModuleLoadReply(client.modules.load(image, record).module_id)


def module_unload(job: Job, msg: ModuleUnload, tag: int):
    client = job.client
    module = client.modules.detach(msg.module)
    release = client.blocking.owed(lambda: client.modules.release(module))

    def unload_when_idle() -> None:
        # Launches of the module may still be queued (a best-effort job's are held
        # back by the scheduler): they run on its code and globals first, as on CUDA.
        drain_quietly(client, client.streams.keys())
        release()

    client.blocking.run(tag, unload_when_idle)
    return ANSWERS_ITSELF


def get_function(job: Job, msg: GetFunction, tag: int) -> FunctionReply:
    fn = job.client.modules.function(msg.module, name_in_tail(msg.tail))
    params = fn.params
    layout = b"".join(PARAM_SLOT.pack(p.offset, p.size) for p in params)
    total = max((p.offset + p.size for p in params), default=0)
    attributes = function_attributes(job.backend, fn)
    assert len(attributes) == FUNC_ATTRIBUTE_SLOTS
    return FunctionReply(function=fn.function_id, param_count=len(params), param_total=total,
                         attributes=tuple(attributes), tail=layout)


def get_global(job: Job, msg: GetGlobal, tag: int) -> GlobalReply:
    ptr, size = job.client.modules.global_variable(msg.module, name_in_tail(msg.tail))
    return GlobalReply(dptr=ptr, size=size)


HANDLERS = {
    StageBytes: stage_bytes,
    ModuleLoad: module_load,
    ModuleUnload: module_unload,
    GetFunction: get_function,
    GetGlobal: get_global,
}

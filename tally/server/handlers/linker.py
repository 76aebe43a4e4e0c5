"""The JIT linker's requests (cuLinkAddData/AddFile/Complete/Destroy); a job's
link states, and why the server links, are in tally/server/client/linker.py."""
from __future__ import annotations

from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.protocol.messages_generated import LinkAdd, LinkComplete, LinkDestroy, LinkReply
from tally.server.client.linker import LinkResult, LinkState
from tally.server.dispatch import ANSWERS_ITSELF
from tally.server.job import Job


def link_add(job: Job, msg: LinkAdd, tag: int) -> None:
    client = job.client
    tail, name_size = msg.tail, msg.name_size
    if name_size > len(tail):
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"link input name of {name_size} bytes in a {len(tail)}-byte tail")
    name = bytes(tail[:name_size]).decode("utf-8", "replace") or f"input {msg.type}"
    if msg.staged:
        data, client.staging = bytes(client.staging), bytearray()
    else:
        data = bytes(tail[name_size:])
    if len(data) != msg.size or msg.record_size > len(data):
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{name}: link input of {msg.size} bytes (a record of "
                                                    f"{msg.record_size}) arrived with {len(data)}")
    record = data[len(data) - msg.record_size:] if msg.record_size else b""
    data = data[:len(data) - msg.record_size]
    link = client.links.setdefault(msg.link, LinkState())
    link.add(name, msg.type, data, job.backend.describe().compute_capability, record)


def link_complete(job: Job, msg: LinkComplete, tag: int):
    link = job.client.links.get(msg.link, LinkState())
    verbose = bool(msg.verbose)

    def complete():
        # Off the session thread: a large link takes a while, and the job's other threads go on.
        _send_result(job, tag, link.complete(verbose, msg.max_registers))
        return ANSWERS_ITSELF

    job.client.blocking.run(tag, complete)
    return ANSWERS_ITSELF


def _send_result(job: Job, tag: int, result: LinkResult) -> None:
    """The LinkReply, its image and logs back to back in one download-arena chunk."""
    info_bytes, error_bytes = result.info_log.encode(), result.error_log.encode()
    payload = result.image + info_bytes + error_bytes
    arena = job.download_arena
    if len(payload) > arena.capacity:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"the linked image ({len(result.image)} bytes) exceeds the "
                                                    f"download arena ({arena.capacity} bytes)")
    with job.client.download_lock:   # chunks reach the client in the order they were reserved
        offset = arena.reserve(len(payload)) if payload else 0
        if payload:
            arena.view(offset, len(payload))[:] = payload
        job.reply(tag, LinkReply(status=result.status, image_size=len(result.image),
                                     info_log_size=len(info_bytes), error_log_size=len(error_bytes),
                                     arena_offset=offset, size=len(payload)))


def link_destroy(job: Job, msg: LinkDestroy, tag: int) -> None:
    job.client.links.pop(msg.link, None)


HANDLERS = {LinkAdd: link_add, LinkComplete: link_complete, LinkDestroy: link_destroy}

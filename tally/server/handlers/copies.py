"""memcpy in every direction, 1-D and 2-D (rows of `width` bytes, `pitch` apart
on the device side, packed on the host side).

Where the host bytes live decides when a copy is done with them:
- inline tail or upload arena (pageable memory in the job): the server takes
  its own copy of the bytes at once and frees the arena chunk, so the job may
  reuse its buffer when the call returns, as CUDA allows for pageable memory;
- a pinned region: read or written in place when the stream gets there, so a
  synchronous copy is answered only after it ran;
- device to pageable host: the copy lands in a private buffer, then in a
  download-arena chunk the reply names (the client copies it out and releases it);
- a "device" destination that is mapped pinned memory (its device pointer): host
  memory, so a synchronous copy into it is answered only after it ran, as a copy to
  host memory is in CUDA.
"""
from __future__ import annotations

from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.protocol.messages_generated import MemcpyDtoD, MemcpyDtoH, MemcpyDtoHReply, MemcpyHtoD
from tally.protocol.spec import DEST_ARENA, DEST_PINNED, SOURCE_ARENA, SOURCE_INLINE, SOURCE_PINNED
from tally.scheduler import ops
from tally.server.client.sync import drain_quietly, wait_streams
from tally.server.dispatch import ANSWERS_ITSELF
from tally.server.job import Job


def _device_span(width: int, height: int, pitch: int, what: str) -> int:
    if height > 1 and pitch < width:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{what} pitch {pitch} is smaller than a row ({width} bytes)")
    return (height - 1) * pitch + width if width and height else 0


def _rows(width: int, height: int, pitch_a: int, pitch_b: int):
    """(offset on side a, offset on side b, bytes) of each contiguous piece of a
    copy of `height` rows of `width` bytes. A copy of zero-byte rows has none,
    however many rows it names (the fuzz test killed the server with a list of
    10**14 empty rows); rows come one at a time, as they can be many."""
    if width == 0 or height == 0:
        return []
    if height <= 1 or (pitch_a == width and pitch_b == width):
        return [(0, 0, width * height)]
    return ((r * pitch_a, r * pitch_b, width) for r in range(height))


def memcpy_htod(job: Job, msg: MemcpyHtoD, tag: int):
    client = job.client
    dst, width, height, pitch, stream = msg.dst, msg.width, msg.height, msg.dst_pitch, msg.stream
    nbytes = width * height
    source = msg.source
    if source == SOURCE_INLINE:
        if len(msg.tail) != nbytes:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"copy of {nbytes} bytes carries {len(msg.tail)}")
        data = msg.tail
    elif source == SOURCE_ARENA:
        data = job.take_upload(msg.arena_offset, nbytes)
    elif source == SOURCE_PINNED:
        data = client.regions.get(msg.region).span(msg.region_offset, nbytes, "copy source")
    else:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"unknown copy source kind {source}")
    into_host = client.check_device_range(dst, _device_span(width, height, pitch, "destination"), "copy destination")
    for dev_off, host_off, n in _rows(width, height, pitch, width):   # host rows are packed
        if n:
            client.streams.submit(stream, ops.MemcpyHtoD(dst + dev_off, data[host_off:host_off + n]))
    if tag and (source == SOURCE_PINNED or into_host):
        _answer_when_reached(client, tag, stream)
        return ANSWERS_ITSELF
    return None


def memcpy_dtoh(job: Job, msg: MemcpyDtoH, tag: int):
    client = job.client
    src, width, height, pitch, stream = msg.src, msg.width, msg.height, msg.src_pitch, msg.stream
    nbytes = width * height
    dest = msg.dest
    if dest not in (DEST_PINNED, DEST_ARENA):
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"unknown copy destination kind {dest}")
    client.check_device_range(src, _device_span(width, height, pitch, "source"), "copy source")
    if dest == DEST_PINNED:
        target = client.regions.get(msg.region).span(msg.region_offset, nbytes, "copy destination")
    else:
        if not tag:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, "a copy into the download arena must be synchronous")
        if nbytes > job.download_arena.capacity:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                              f"copy of {nbytes} bytes exceeds the download arena; send it in chunks")
        # Registered memory, not a bytearray: a GPU copies into pageable memory synchronously,
        # which would hold the executor (and every job) until this stream's work ended.
        staging = job.services.staging()
        target = staging.take(nbytes)
    try:
        for dev_off, host_off, n in _rows(width, height, pitch, width):
            if n:
                client.streams.submit(stream, ops.MemcpyDtoH(target[host_off:host_off + n], src + dev_off, n))
    except BaseException:
        if dest == DEST_ARENA:
            drain_quietly(client, [stream])   # rows already queued may still write it
            staging.give(target)
        raise
    if not tag:
        return None
    if dest == DEST_PINNED:
        _answer_when_reached(client, tag, stream)
        return ANSWERS_ITSELF

    def deliver():
        # The copy's own stream is enough: on the legacy stream it already waited
        # for the blocking streams' earlier work.
        try:
            wait_streams(client, [stream])
            arena = job.download_arena
            with client.download_lock:       # chunks reach the client in the order they were reserved
                offset = arena.reserve(nbytes) if nbytes else 0
                if nbytes:
                    arena.view(offset, nbytes)[:] = target
                job.reply(tag, MemcpyDtoHReply(arena_offset=offset, size=nbytes))
            return ANSWERS_ITSELF
        finally:
            staging.give(target)

    client.blocking.run(tag, deliver)
    return ANSWERS_ITSELF


def memcpy_dtod(job: Job, msg: MemcpyDtoD, tag: int):
    client = job.client
    dst, src, width, height = msg.dst, msg.src, msg.width, msg.height
    into_host = client.check_device_range(dst, _device_span(width, height, msg.dst_pitch, "destination"),
                                          "copy destination")
    client.check_device_range(src, _device_span(width, height, msg.src_pitch, "source"), "copy source")
    for dst_off, src_off, n in _rows(width, height, msg.dst_pitch, msg.src_pitch):
        if n:
            client.streams.submit(msg.stream, ops.MemcpyDtoD(dst + dst_off, src + src_off, n))
    if tag and into_host:
        _answer_when_reached(client, tag, msg.stream)
        return ANSWERS_ITSELF
    return None


def _answer_when_reached(client, tag: int, stream: int) -> None:
    """Answer once the stream ran the copy (a synchronous copy to or from pinned
    memory touches the job's buffer in place)."""
    client.blocking.run(tag, lambda: wait_streams(client, [stream]))


HANDLERS = {MemcpyHtoD: memcpy_htod, MemcpyDtoH: memcpy_dtoh, MemcpyDtoD: memcpy_dtod}

"""memcpy in every direction, 1-D and 2-D (rows of `width` bytes, `pitch` apart
on the device side, packed on the host side).

Where the host bytes live decides when a copy is done with them:
- inline tail or upload arena (pageable memory in the job): the server takes
  its own copy of the bytes at once and frees the arena chunk, so the job may
  reuse its buffer when the call returns, as CUDA allows for pageable memory;
- a pinned region: read or written in place when the stream gets there, so a
  synchronous copy is answered only after it ran;
- device to pageable host: the copy lands in a private buffer, then in a
  download-arena chunk the reply names (the client copies it out and releases it).
"""
from __future__ import annotations

from tally import _core

from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.protocol.spec import (
    DEST_ARENA,
    DEST_PINNED,
    SOURCE_ARENA,
    SOURCE_INLINE,
    SOURCE_PINNED,
)
from tally.scheduler.ops import MemcpyDtoD, MemcpyDtoH, MemcpyHtoD
from tally.server.dispatch import handler
from tally.server.client.state import driver_state
from tally.server.client.sync import drain_quietly, wait_streams


def take_upload(session, offset: int, nbytes: int) -> bytes:
    """A copy of an upload-arena chunk, which is released at once (chunks are
    released in the order the client named them, and it names them in order)."""
    arena = session.segment.upload
    if offset + nbytes > arena.capacity:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"upload chunk {offset}+{nbytes} lies outside the arena "
                                                    f"({arena.capacity} bytes)")
    try:
        return bytes(arena.view(offset, nbytes)) if nbytes else b""
    finally:
        try:
            arena.release(offset, nbytes)
        except _core.CorruptSegment as e:   # a chunk the client never reserved: its own arena's loss
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"upload chunk {offset}+{nbytes}: {e}") from None


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


@handler("MemcpyHtoD")
def memcpy_htod(session, fields, tail, tag):
    state = driver_state(session)
    dst, width, height, pitch, stream = (fields[k] for k in ("dst", "width", "height", "dst_pitch", "stream"))
    nbytes = width * height
    source = fields["source"]
    if source == SOURCE_INLINE:
        if len(tail) != nbytes:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"copy of {nbytes} bytes carries {len(tail)}")
        data = tail
    elif source == SOURCE_ARENA:
        data = take_upload(session, fields["arena_offset"], nbytes)
    elif source == SOURCE_PINNED:
        data = state.regions.get(fields["region"]).span(fields["region_offset"], nbytes, "copy source")
    else:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"unknown copy source kind {source}")
    state.check_device_range(dst, _device_span(width, height, pitch, "destination"), "copy destination")
    for dev_off, host_off, n in _rows(width, height, pitch, width):   # host rows are packed
        if n:
            state.streams.submit(stream, MemcpyHtoD(dst + dev_off, data[host_off:host_off + n]))
    if not tag:
        return
    if source == SOURCE_PINNED:
        _reply_when_reached(session, state, tag, stream)
    else:
        session.reply("Done", tag)


@handler("MemcpyDtoH")
def memcpy_dtoh(session, fields, tail, tag):
    state = driver_state(session)
    src, width, height, pitch, stream = (fields[k] for k in ("src", "width", "height", "src_pitch", "stream"))
    nbytes = width * height
    dest = fields["dest"]
    if dest not in (DEST_PINNED, DEST_ARENA):
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"unknown copy destination kind {dest}")
    state.check_device_range(src, _device_span(width, height, pitch, "source"), "copy source")
    if dest == DEST_PINNED:
        target = state.regions.get(fields["region"]).span(fields["region_offset"], nbytes, "copy destination")
    else:
        if not tag:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, "a copy into the download arena must be synchronous")
        if nbytes > session.segment.download.capacity:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                              f"copy of {nbytes} bytes exceeds the download arena; send it in chunks")
        # Registered memory, not a bytearray: a GPU copies into pageable memory synchronously,
        # which would hold the executor (and every job) until this stream's work ended.
        staging = session.server.staging
        target = staging.take(nbytes)
    try:
        for dev_off, host_off, n in _rows(width, height, pitch, width):
            if n:
                state.streams.submit(stream, MemcpyDtoH(target[host_off:host_off + n], src + dev_off, n))
    except BaseException:
        if dest == DEST_ARENA:
            drain_quietly(state, [stream])   # rows already queued may still write it
            staging.give(target)
        raise
    if not tag:
        return
    if dest == DEST_PINNED:
        _reply_when_reached(session, state, tag, stream)
        return

    def deliver() -> None:
        # The copy's own stream is enough: on the legacy stream it already waited
        # for the blocking streams' earlier work.
        try:
            wait_streams(state, [stream])
            arena = session.segment.download
            with state.download_lock:       # chunks reach the client in the order they were reserved
                offset = arena.reserve(nbytes) if nbytes else 0
                if nbytes:
                    arena.view(offset, nbytes)[:] = target
                session.reply("MemcpyDtoHReply", tag, arena_offset=offset, size=nbytes)
        finally:
            staging.give(target)

    state.blocking.run(tag, deliver)


@handler("MemcpyDtoD")
def memcpy_dtod(session, fields, tail, tag):
    state = driver_state(session)
    dst, src, width, height = fields["dst"], fields["src"], fields["width"], fields["height"]
    dst_pitch, src_pitch = fields["dst_pitch"], fields["src_pitch"]
    state.check_device_range(dst, _device_span(width, height, dst_pitch, "destination"), "copy destination")
    state.check_device_range(src, _device_span(width, height, src_pitch, "source"), "copy source")
    for dst_off, src_off, n in _rows(width, height, dst_pitch, src_pitch):
        if n:
            state.streams.submit(fields["stream"], MemcpyDtoD(dst + dst_off, src + src_off, n))
    if tag:
        session.reply("Done", tag)


def _reply_when_reached(session, state, tag: int, stream: int) -> None:
    """Answer once the stream ran the copy (a synchronous copy to or from pinned
    memory touches the job's buffer in place)."""
    def wait() -> None:
        wait_streams(state, [stream])
        session.reply("Done", tag)

    state.blocking.run(tag, wait)

"""A client's streams and CUDA's default-stream rules, on top of the executor.

The executor keeps every (client, stream) independent. CUDA adds one rule for
the legacy default stream (id 0): work on it waits for all earlier work on the
client's blocking streams, and work on a blocking stream waits for all earlier
work on the legacy stream (streams created with CU_STREAM_NON_BLOCKING are
exempt; per-thread default streams are blocking). The table enforces it with
executor events, only where work actually crossed, so a program that uses one
stream pays nothing.

A stream of a green context has an SM cap: the table puts it on every kernel
launched there, and the executor keeps the kernel to that many SMs (within the
job's share).

With the C++ data plane (tally/server/data_plane.py) the table also tells it, for
each stream id, whether the id names a stream and whether the rule needs a fence
before the stream's next operation: where it needs none, that operation may go to
the device from C++ (if the executor agrees, see tally/scheduler/fast_lane.py).
The legacy stream needs none while no blocking stream has unfenced work; a
blocking stream needs none once its work is already ordered after the legacy
stream's (it is "dirty"); a non-blocking stream never does. Legacy work issued in
C++ is counted here before the table decides anything else.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from tally.protocol.errors import CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.protocol.spec import PER_THREAD_STREAM_BIT
from tally.scheduler.ops import EventRecord, GraphReplay, Launch, StreamWaitEvent

LEGACY = 0
CU_STREAM_NON_BLOCKING = 0x1


@dataclass(eq=False)
class ClientStream:
    key: int
    flags: int = 0
    priority: int = 0
    waited_legacy_gen: int = 0     # legacy work this stream has been ordered behind
    fence: object = None           # executor event the legacy stream waits on
    sm_cap: int | None = None      # a green context's stream: its kernels run on at most this many SMs

    @property
    def blocking(self) -> bool:
        return not self.flags & CU_STREAM_NON_BLOCKING


class StreamTable:
    def __init__(self, executor, client_id: int, fast=None):
        self.executor = executor
        self.client_id = client_id
        self._fast = fast            # the C++ data plane's view of this table (fast_path.py), or None
        self._lock = threading.Lock()
        self._streams: dict[int, ClientStream] = {}
        self._dirty: dict[int, ClientStream] = {}   # blocking streams with work the legacy stream has not waited for
        self._legacy_gen = 0                        # legacy submissions so far
        self._legacy_fence = None
        self._legacy_fence_gen = 0
        self._releasing: set[int] = set()           # destroyed by the client, work still draining

    # ---- table ------------------------------------------------------------------

    def create(self, key: int, flags: int, priority: int, sm_cap: int | None = None) -> None:
        if key == LEGACY or key & PER_THREAD_STREAM_BIT:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"stream id {key:#x} is reserved for a default stream")
        if sm_cap is not None and sm_cap < 1:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"a green context's stream needs at least 1 SM, not {sm_cap}")
        with self._lock:
            if key in self._streams:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"stream id {key} already exists")
            self._count_fast_legacy_work()
            # Waited for nothing yet: its first operation follows the legacy stream's
            # work so far, however old (CUDA orders a blocking stream after every
            # earlier legacy operation, not only those since it was created).
            self._streams[key] = ClientStream(key, flags, priority, sm_cap=sm_cap)
            self._publish(key)

    def forget(self, key: int) -> None:
        """cuStreamDestroy: the id stops naming a stream; its work still runs, and
        still counts as earlier work for the legacy stream and for context-wide
        waits until `released(key)`."""
        if key == LEGACY or key & PER_THREAD_STREAM_BIT:
            raise DeviceError(CUDA_ERROR_INVALID_HANDLE, f"stream {key:#x} is a default stream; it cannot be destroyed")
        with self._lock:
            self._get(key)
            del self._streams[key]
            self._releasing.add(key)
            dirty = self._dirty.pop(key, None)
            if dirty is not None:
                self._fence_legacy(dirty)
                self._offer(key, LEGACY)
            self._publish(key, LEGACY)

    def released(self, key: int) -> None:
        """The destroyed stream's work has drained and the executor let it go."""
        with self._lock:
            self._releasing.discard(key)

    def describe(self) -> list[list]:
        """[id, flags, priority, SM cap] of the streams the job created (what a migration recreates)."""
        with self._lock:
            return [[s.key, s.flags, s.priority, s.sm_cap] for s in self._streams.values()]

    def keys(self) -> list[int]:
        """Every stream a context-wide wait covers, destroyed ones still draining included."""
        with self._lock:
            return [LEGACY, *self._streams, *self._releasing]

    def sync_keys(self, key: int) -> list[int]:
        """The executor streams a synchronization of `key` must wait for: the
        legacy stream is ordered after every blocking stream, so waiting for it
        means waiting for them too."""
        with self._lock:
            if key == LEGACY:
                return [LEGACY, *(k for k, s in self._streams.items() if s.blocking)]
            self._get(key)
            return [key]

    def _get(self, key: int) -> ClientStream:
        stream = self._streams.get(key)
        if stream is None:
            if key & PER_THREAD_STREAM_BIT:
                stream = self._streams[key] = ClientStream(key, 0, 0, 0)
            elif key != LEGACY:
                raise DeviceError(CUDA_ERROR_INVALID_HANDLE, f"stream {key} was never created or is destroyed")
        return stream

    # ---- submission -------------------------------------------------------------------

    def submit(self, key: int, op) -> None:
        """Queue `op` on the client's stream `key`, after whatever the default
        stream rules put before it."""
        ex, cid = self.executor, self.client_id
        with self._lock:
            self._count_fast_legacy_work()
            if key == LEGACY:
                fenced = list(self._dirty)
                for stream in self._dirty.values():
                    self._fence_legacy(stream)
                self._dirty.clear()
                self._legacy_gen += 1
                _submit(ex, cid, LEGACY, op)
                self._offer(LEGACY, *fenced)
                self._publish(LEGACY, *fenced)
                return
            stream = self._get(key)
            if stream.sm_cap is not None and type(op) in (Launch, GraphReplay):
                op = replace(op, sm_cap=stream.sm_cap)
            if stream.blocking:
                if stream.waited_legacy_gen != self._legacy_gen:
                    if self._legacy_fence is None:
                        self._legacy_fence = ex.event_create(cid, timing=False)
                    if self._legacy_fence_gen != self._legacy_gen:
                        ex.submit(cid, LEGACY, EventRecord(self._legacy_fence))
                        self._legacy_fence_gen = self._legacy_gen
                        self._offer(LEGACY)
                    ex.submit(cid, key, StreamWaitEvent(self._legacy_fence))
                    stream.waited_legacy_gen = self._legacy_gen
                self._dirty[key] = stream
            _submit(ex, cid, key, op)
            self._offer(key)
            self._publish(key, LEGACY)

    # ---- the C++ data plane's view ------------------------------------------------------

    def _count_fast_legacy_work(self) -> None:
        """Legacy work issued in C++ since the last look counts as legacy work here
        (only whether the count changed matters: blocking streams compare it)."""
        if self._fast is not None and self._fast.take_legacy_touched():
            self._legacy_gen += 1

    def _publish(self, *keys: int) -> None:
        """Tell the C++ plane whether each id names a stream and whether the rule
        needs a fence before its next operation."""
        if self._fast is None:
            return
        for key in keys:
            if key == LEGACY:
                self._fast.stream_rules(LEGACY, True, not self._dirty)
                continue
            stream = self._streams.get(key)
            self._fast.stream_rules(key, stream is not None,
                                    stream is not None and (not stream.blocking or key in self._dirty))

    def _offer(self, *keys: int) -> None:
        """The executor re-decides whether the C++ plane may issue on these streams."""
        if self._fast is None:
            return
        for key in keys:
            stream = self._streams.get(key)
            self.executor.offer_fast_lane(self.client_id, key, stream.sm_cap if stream is not None else None)


    def _fence_legacy(self, stream: ClientStream) -> None:
        """Order what the legacy stream runs from now on after `stream`'s work so far."""
        ex, cid = self.executor, self.client_id
        if stream.fence is None:
            stream.fence = ex.event_create(cid, timing=False)
        ex.submit(cid, stream.key, EventRecord(stream.fence))
        ex.submit(cid, LEGACY, StreamWaitEvent(stream.fence))


def _submit(executor, client_id: int, key: int, op) -> None:
    try:
        executor.submit(client_id, key, op)
    except ValueError as e:   # the executor's word for a malformed operation
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, str(e)) from None

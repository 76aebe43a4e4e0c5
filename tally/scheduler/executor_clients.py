"""The stream executor's clients: registering and removing a job, its SM share,
pausing and resuming its work, and waiting until it is idle (suspend, migration
and eviction wait through `wait_client_idle`).

A mixin of StreamExecutor (tally/scheduler/executor.py), which owns the state
these methods read and write under its lock.
"""
from __future__ import annotations

import math
import threading
import time
from typing import Hashable

from tally.protocol.errors import DeviceError
from tally.scheduler.executor_state import ClientState, OpItem
from tally.scheduler.ops import StreamWaitEvent, StreamWaitValue
from tally.scheduler.policy import PRIORITIES
from tally.scheduler.run_mode import PTB


class ClientControl:
    # What of StreamExecutor this part reads, writes or calls (its interface; a test
    # keeps the list true: tests/test_executor_parts.py).
    EXECUTOR_MEMBERS = ("_client", "_clients", "_cond", "_destroy_event", "_fast_lane_roles", "_in_flight", "_kernels",
                        "_lock", "_pump", "_retire", "backend", "clock", "device", "fast_lanes", "sm_count")

    def add_client(self, client_id: Hashable, priority: str = "best-effort",
                   sm_percent: float | None = None) -> None:
        if priority not in PRIORITIES:
            raise ValueError(f"client priority must be one of {', '.join(PRIORITIES)}, got {priority!r}")
        sm_cap = self._sm_cap(sm_percent)
        with self._lock:
            if client_id in self._clients:
                raise ValueError(f"client {client_id!r} is already registered")
            client = self._clients[client_id] = ClientState(client_id, priority, sm_percent, sm_cap)
            if self.fast_lanes.attached(client_id):
                self._fast_lane_roles(client)

    def set_sm_percent(self, client_id: Hashable, percent: float | None) -> int:
        """Change the client's SM share (None: the whole device) and return the SMs it
        was granted (the backend's sm_grant of its share's SMs). Its launches from
        now on carry the new cap; kernels already on the device keep theirs (a GPU
        cannot move a running kernel between partitions)."""
        sm_cap = self._sm_cap(percent)
        with self._lock:
            client = self._client(client_id)
            client.set_share(percent, sm_cap)
            self.fast_lanes.revoke_client(client_id)    # offered again with the new cap
            return self.sm_count if sm_cap is None else sm_cap

    def sm_share(self, client_id: Hashable) -> tuple[float | None, int]:
        """(the share the client has now, in percent or None, the SMs granted for it)."""
        with self._lock:
            client = self._client(client_id)
            return client.sm_percent, self.sm_count if client.sm_cap is None else client.sm_cap

    def is_paused(self, client_id: Hashable) -> bool:
        with self._lock:
            return self._client(client_id).paused

    def _sm_cap(self, percent: float | None) -> int | None:
        """The SMs granted for a share: the largest whole number of SMs within it (at
        least one), as the backend can grant it. None for the whole device."""
        if percent is None:
            return None
        if not (isinstance(percent, (int, float)) and math.isfinite(percent) and 0 < percent <= 100):
            raise ValueError(f"sm_percent must be in (0, 100], got {percent!r}")
        if percent >= 100:
            return None
        return self.backend.sm_grant(max(1, math.floor(self.sm_count * percent / 100 + 1e-9)))

    def sm_granted(self, client_id: Hashable) -> int | None:
        """The SMs the client's share grants (after the backend's rounding); None
        when it has no share (the whole device)."""
        with self._lock:
            return self._client(client_id).sm_cap

    def remove_client(self, client_id: Hashable) -> None:
        """Drop the client's queued operations, stop its running PTB kernels, wait
        for what is already on the device, then release its streams, events and
        PTB state. Its pending errors are discarded. Blocks until done."""
        with self._lock:
            client = self._client(client_id)
            client.removing = True
            self.fast_lanes.detach(client_id)
            for stream in client.streams.values():
                for item in stream.queue:
                    if isinstance(item, OpItem) and isinstance(item.op, StreamWaitEvent):
                        item.op.event.waiters[item.seq] -= 1
                stream.queue.clear()
                # A wait on a value the job never satisfies would hold its stream, and every
                # synchronization of it below, forever: it ends here (its job is leaving).
                if not stream.released:
                    self.backend.stream_release_waits(stream.backend_stream)
            for unit in list(self._in_flight.units.values()):
                if unit.task.stream.client is client and unit.mode is PTB and not unit.preempt_requested:
                    self._kernels.preempt(unit)
            self._pump()
            self.clock.wait_for(self._cond, lambda: all(s.inflight == 0 for s in client.streams.values()))
            if self._clients.get(client_id) is not client:
                return            # another thread removed it meanwhile (a session's close and close())
            del self._clients[client_id]
            streams = [stream for stream in client.streams.values() if self._retire(stream)]
            events = list(client.events)
        for stream in streams:
            try:
                self.backend.stream_synchronize(stream.backend_stream)
            except DeviceError:
                pass          # the client is gone; nobody is left to tell
            self.backend.stream_destroy(stream.backend_stream)
            self.device.close_lane(stream.lane, synchronize=True)
        with self._lock:
            for event in events:
                self._destroy_event(event)
            self._pump()

    def release_value_waits(self, client_id: Hashable) -> None:
        """The job's process is exiting: every wait on a value of its streams ends,
        queued or on the device, and the work behind it goes on (ops.StreamWaitValue),
        so what its exit waits for (module unloads) finishes. Later waits of the
        backend's streams end at once too."""
        with self._lock:
            client = self._clients.get(client_id)
            if client is None:
                return
            for stream in client.streams.values():
                if not stream.released:
                    self.backend.stream_release_waits(stream.backend_stream)
                for item in stream.queue:
                    if isinstance(item, OpItem) and isinstance(item.op, StreamWaitValue):
                        item.op.gate.opened = True
            self._pump()

    def pause_client(self, client_id: Hashable) -> None:
        """Hold the client's work: nothing of it starts (kernels, copies, records)
        until resume_client, and nothing is lost; its running PTB kernels are
        preempted (they resume where they stopped), other running units finish.
        Its synchronizations wait meanwhile. Idempotent."""
        with self._lock:
            client = self._client(client_id)
            client.paused = True
            self.fast_lanes.revoke_client(client_id)    # nothing of it reaches the device from C++ either
            for unit in list(self._in_flight.units.values()):
                if unit.task.stream.client is client and unit.mode is PTB and not unit.preempt_requested:
                    self._kernels.preempt(unit)
            self._pump()

    def client_has_work(self, client_id: Hashable) -> bool:
        """Whether some of the client's work is queued, on the device, or issued by
        its C++ data plane and not known to have completed (an eviction that finds
        none dropped nothing of the job's)."""
        with self._lock:
            client = self._clients.get(client_id)
            if client is None:
                return False
            return any(not s.drained for s in client.streams.values()) or self.fast_lanes.busy(client_id)

    def wait_client_idle(self, client_id: Hashable, timeout: float, drain: bool = False) -> bool:
        """For a client that submits nothing meanwhile: wait until none of its work
        is on the device (its running units ended, what went to its backend streams
        completed), and with `drain` until its queued work ran too (a paused client's
        stays queued). Errors found on the way stay on their streams for the job's
        next synchronization. False if that took longer than `timeout` seconds
        (e.g. a host function waits for the job)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            client = self._client(client_id)
            if drain and client.paused:
                raise ValueError(f"client {client_id!r} is paused: its queued work cannot drain")
            done = (lambda: all(s.drained for s in client.streams.values())) if drain else \
                (lambda: all(s.inflight == 0 for s in client.streams.values()))
            if not self.clock.wait_for(self._cond, done, timeout):
                return False
            streams = [s for s in client.streams.values() if not s.released]
            for stream in streams:
                stream.backend_syncs += 1
        try:
            for stream in streams:
                # A backend synchronization may wait forever (a host function held by the
                # job): it runs on a helper thread and the wait gives up at the deadline.
                done = threading.Event()
                found: list[DeviceError] = []

                def sync(bs=stream.backend_stream):
                    try:
                        self.backend.stream_synchronize(bs)
                    except DeviceError as e:
                        found.append(e)
                    finally:
                        done.set()
                threading.Thread(target=sync, daemon=True, name="tally-quiesce").start()
                if not done.wait(max(0.0, deadline - time.monotonic())):
                    return False
                if found:
                    with self._lock:
                        stream.errors.append(found[0])
            return True
        finally:
            with self._lock:
                for stream in streams:
                    stream.backend_syncs -= 1
                self._cond.notify_all()

    def pending_errors(self, client_id: Hashable) -> int:
        """Errors of the client's work it has not been told yet (its next synchronization will)."""
        with self._lock:
            return sum(len(s.errors) for s in self._client(client_id).streams.values())

    def resume_client(self, client_id: Hashable) -> None:
        """Let a paused client's work go on where it stopped. Idempotent."""
        with self._lock:
            self._client(client_id).paused = False
            self._pump()

"""The stream executor's side of device faults (a GPU's context-wide sticky
errors, tally/server/device_faults.py): naming the jobs that may have caused
one, finding the fault of a kernel that never completes, and ending all work
without the device once it is known.

A mixin of StreamExecutor (tally/scheduler/executor.py), which owns the state
these methods read and write under its lock.
"""
from __future__ import annotations

from typing import Hashable

from tally.protocol.errors import DeviceError
from tally.scheduler.executor_state import OpItem, StreamState
from tally.scheduler.ops import StreamWaitEvent


class FaultControl:
    # What of StreamExecutor this part reads, writes or calls (its interface; a test
    # keeps the list true: tests/test_executor_parts.py).
    EXECUTOR_MEMBERS = ("_abandoned", "_activity", "_backend_sync_ended", "_clients", "_cond", "_in_flight", "_lock",
                        "_seen", "backend", "clock", "device", "fast_lanes", "graphs", "policy")

    def suspects(self) -> list[Hashable]:
        """The clients whose kernels may have caused a fault seen now: those with a
        stream holding kernels that no clean synchronization has confirmed since
        they were launched (still running, or ended without the stream being
        synchronized since)."""
        with self._lock:
            return [c.client_id for c in self._clients.values()
                    if any(self._kernels_launched(s) > s.kernels_confirmed for s in c.streams.values())]

    def _kernels_launched(self, stream: StreamState) -> int:
        # the C++ data plane's launches on the stream count too (fast_lane.py)
        return stream.kernels_launched + self.fast_lanes.launches(stream)

    def check_running(self, started_before: float) -> None:
        """Query the backend streams of units running since before `started_before`
        (clock time); an error one reports goes through `device_errors` and stays
        for the stream's next synchronization. The watch of a context-wide backend
        calls this: a kernel that faulted there never completes, and its stream
        says why."""
        with self._lock:
            streams = {id(u.task.stream): u.task.stream for u in self._in_flight.units.values()
                       if u.started_at < started_before}.values()
            streams = [s for s in streams if not s.released and not s.client.removing]
            for stream in streams:
                stream.backend_syncs += 1       # keeps it from being destroyed meanwhile (_retire)
        for stream in streams:
            error = None
            try:
                self.backend.stream_query(stream.backend_stream)
            except DeviceError as e:
                error = self._seen(stream, e)
            with self._lock:
                self._backend_sync_ended(stream, error)

    def abandon(self, error: DeviceError) -> None:
        """The device lost every job's work (a context-wide fault): end every unit
        in flight and drop every queued operation without asking the device, and
        leave `error` for the next synchronization of every stream. Whoever waits
        wakes up. Clients stay registered until removed."""
        with self._lock:
            self._abandoned = error
            self.fast_lanes.revoke_all()       # (their planes are off already: session.fail_device)
            now = self.clock.now()
            for unit in list(self._in_flight.units.values()):
                stream = unit.task.stream
                self._in_flight.remove(unit)
                stream.inflight -= 1
                self._activity.completed(stream, unit.sms, now)
                unit.task.unit = None
                self.policy.on_unit_finished(unit.view(), now)
            for client in self._clients.values():
                for stream in client.streams.values():
                    for item in stream.queue:
                        if isinstance(item, OpItem) and isinstance(item.op, StreamWaitEvent):
                            item.op.event.waiters[item.seq] -= 1
                    stream.queue.clear()
                    stream.errors.clear()
                    stream.errors.append(error)
                    stream.confirm(self._kernels_launched(stream))
            self._cond.notify_all()

    def forget_device(self) -> None:
        """Once every client is removed after a fault: drop what the device layer
        made in the dead context (its control stream, pooled events, registered
        readback memory, graph executables) so that nothing of it is used in the next one."""
        with self._lock:
            self.device.forget()
            self.graphs.forget()
            self._abandoned = None

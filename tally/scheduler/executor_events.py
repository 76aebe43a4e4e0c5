"""The stream executor's events: a job's CUDA events, each record of which the
executor maps to a backend event once the record reaches the device.

A mixin of StreamExecutor (tally/scheduler/executor.py), which owns the state
these methods read and write under its lock.
"""
from __future__ import annotations

from typing import Hashable

from tally.protocol.errors import CUDA_ERROR_NOT_READY, DeviceError
from tally.scheduler.events import ExecutorEvent
from tally.scheduler.executor_state import ClientState


class EventControl:
    # What of StreamExecutor this part reads, writes or calls (its interface; a test
    # keeps the list true: tests/test_executor_parts.py).
    EXECUTOR_MEMBERS = ("_abandoned", "_client", "_clients", "_cond", "_lock", "backend", "clock")

    def event_create(self, client_id: Hashable, timing: bool = True) -> ExecutorEvent:
        with self._lock:
            client = self._client(client_id)
            event = ExecutorEvent(client_id, timing)
            client.events.append(event)
            return event

    def event_destroy(self, event: ExecutorEvent) -> None:
        """The job destroyed its event. As in CUDA, its records and the waits already
        queued on them still take effect (CuPy's DLPack export records an event, makes
        the consumer's stream wait and destroys it at once); each backend event goes
        when no queued wait needs it."""
        with self._lock:
            event.destroyed = True
            self._prune_records(event)
            self._cond.notify_all()

    def event_query(self, event: ExecutorEvent) -> bool:
        with self._lock:
            seq = event.submitted_seq
            if seq == 0:
                return True
            backend_event = event.records.get(seq)
            if backend_event is None:
                return False
        return self.backend.event_query(backend_event)

    def event_synchronize(self, event: ExecutorEvent) -> None:
        with self._lock:
            seq = event.submitted_seq
            if seq == 0:
                return
            self.clock.wait_for(self._cond, lambda: seq in event.records or event.destroyed
                                or self._abandoned is not None)
            if seq not in event.records and self._abandoned is not None:
                raise self._abandoned     # its record was dropped with the device's work
            backend_event = event.records.get(seq)
        if backend_event is not None:
            self.backend.event_synchronize(backend_event)

    def event_elapsed_ms(self, start: ExecutorEvent, end: ExecutorEvent) -> float:
        with self._lock:
            pair = [ev.records.get(ev.submitted_seq) for ev in (start, end)]
        if None in pair:
            raise DeviceError(CUDA_ERROR_NOT_READY, "an event has not been recorded on the device yet")
        return self.backend.event_elapsed_ms(*pair)

    def event_host_time(self, event: ExecutorEvent) -> float | None:
        """When the event's latest record was reached on the node's clock (None: never
        recorded here, not reached yet, or the backend's clock is its own)."""
        with self._lock:
            backend_event = event.records.get(event.submitted_seq)
        return None if backend_event is None else self.backend.event_host_time(backend_event)

    def _check_event(self, event: ExecutorEvent, client: ClientState) -> None:
        if not isinstance(event, ExecutorEvent) or event.destroyed:
            raise ValueError("event was destroyed or was not created by this executor")
        if event.client_id != client.client_id and not event.shared:
            raise ValueError(f"event belongs to client {event.client_id!r}, not {client.client_id!r}")

    def _destroy_event(self, event: ExecutorEvent) -> None:
        """Its job is gone and no work of it is queued: every backend event goes now."""
        event.destroyed = True
        for backend_event in event.records.values():
            self.backend.event_destroy(backend_event)
        event.records.clear()
        self._cond.notify_all()

    def _prune_records(self, event: ExecutorEvent) -> None:
        """Backend events of records that no queued wait needs: superseded ones, and once
        the job destroyed the event, the latest too (no query or sync can name it)."""
        for seq in [s for s in event.records
                    if (s != event.submitted_seq or event.destroyed) and event.waiters[s] <= 0]:
            self.backend.event_destroy(event.records.pop(seq))
            del event.waiters[seq]
        if event.destroyed and not any(n > 0 for n in event.waiters.values()):
            client = self._clients.get(event.client_id)
            if client is not None and event in client.events:
                client.events.remove(event)      # nothing of it is left to release

"""A job's events, named by ids the job picks: the ones it created (executor
events) and other jobs' interprocess events it opened under an id of its own,
which it may use and forget but not destroy."""
from __future__ import annotations

from tally.protocol.errors import CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.server.client.event_clock import event_time


class EventTable:
    def __init__(self, executor, client_id: int):
        self._executor = executor
        self._client_id = client_id
        self._events: dict[int, object] = {}      # client event id -> ExecutorEvent
        self._opened: set[int] = set()             # ids naming another job's event

    def create(self, event_id: int, timing: bool, recorded_elsewhere: float | None = None) -> None:
        """`recorded_elsewhere`: a migrated job's event, last recorded on its old server then
        (the node's clock), so elapsed times to events recorded here can be told."""
        self.check_new(event_id)
        event = self._executor.event_create(self._client_id, timing)
        event.recorded_elsewhere = recorded_elsewhere
        self._events[event_id] = event

    def add_opened(self, event_id: int, event) -> None:
        """Another job's exported event, opened under `event_id`."""
        self.check_new(event_id)
        self._events[event_id] = event
        self._opened.add(event_id)

    def get(self, event_id: int):
        try:
            return self._events[event_id]
        except KeyError:
            raise DeviceError(CUDA_ERROR_INVALID_HANDLE,
                              f"event {event_id} was never created or is destroyed") from None

    def find(self, event_id: int):
        """The event, or None where `event_id` names none."""
        return self._events.get(event_id)

    def is_opened(self, event_id: int) -> bool:
        return event_id in self._opened

    def destroy(self, event_id: int) -> None:
        event = self._events.pop(event_id, None)
        if event is None:
            raise DeviceError(CUDA_ERROR_INVALID_HANDLE, f"event {event_id} was never created or is destroyed")
        if event_id in self._opened:     # another job's event: only forget it here
            self._opened.discard(event_id)
        else:
            # Records still queued keep their place: the executor lets them complete.
            self._executor.event_destroy(event)

    def clear(self) -> None:
        """The job is gone and its work finished or stopped: destroy its own events."""
        for event_id, event in self._events.items():
            if event_id not in self._opened:    # another job's: theirs to destroy
                self._executor.event_destroy(event)
        self._events.clear()
        self._opened.clear()

    def has_opened(self) -> bool:
        return bool(self._opened)

    def describe(self) -> list[list]:
        """[event id, timing, when its last record was reached on the node's clock or None]
        of its own events (what a migration recreates; call once the job's work is done)."""
        return [[eid, bool(ev.timing), event_time(self._executor, ev) if ev.timing else None]
                for eid, ev in self._events.items() if eid not in self._opened]

    def check_new(self, event_id: int) -> None:
        if event_id in self._events:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"event id {event_id} already exists")

"""Elapsed time between two events when one of them was recorded on another
server: a migrated job's events are made again on its new server, and the
record they carried there is only a time (ExecutorEvent.recorded_elsewhere).

Such a time can be compared with one taken here only when both servers stamp
events with a clock they share. The emulator stamps them with
time.perf_counter(), CLOCK_MONOTONIC on Linux, which every process on the node
reads alike, so cuEventElapsedTime across a migration is exact there (and,
events being host-side, as fine-grained as the clock). A GPU stamps events with
its own clock, which another context cannot read, and the sim's clock is
virtual and per server: there the call fails with CUDA_ERROR_INVALID_HANDLE,
saying so (as CUDA does for events of two different contexts). Events recorded
after the migration time each other as usual.
"""
from __future__ import annotations

from tally.protocol.errors import CUDA_ERROR_INVALID_HANDLE, DeviceError


def event_time(executor, event) -> float | None:
    """When the event's latest record was reached, on the node's clock (None: unknown)."""
    if event.submitted_seq == 0:
        return event.recorded_elsewhere
    return executor.event_host_time(event)


def carried(event) -> bool:
    """Its only record was made on the job's old server."""
    return event.submitted_seq == 0 and event.recorded_elsewhere is not None


def elapsed_across_servers_ms(executor, start, end) -> float:
    """Milliseconds from `start` to `end` where at least one was recorded on another server."""
    times = [event_time(executor, ev) for ev in (start, end)]
    if None in times:
        raise DeviceError(CUDA_ERROR_INVALID_HANDLE,
                          "one event was recorded before this job migrated to this tally-server and the other "
                          "after, and this device stamps events with a clock of its own (only the emulator's "
                          "events share the node's clock); time events recorded on one side of the migration")
    return (times[1] - times[0]) * 1000.0

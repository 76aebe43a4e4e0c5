"""Events: created under ids the client picks, recorded and waited on in stream
order through the executor (tally/server/client/events.py holds a client's)."""
from __future__ import annotations

import math
import struct

from tally.protocol.errors import CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_READY, DeviceError
from tally.protocol.messages_generated import (
    ElapsedTimeReply,
    EventCreate,
    EventDestroy,
    EventElapsedTime,
    EventQuery,
    EventRecord,
    EventSynchronize,
    EventTimes,
    EventTimesReply,
    StreamWaitEvent,
)
from tally.scheduler import ops
from tally.server.client import event_clock
from tally.server.client.sync import forward_kernel_output
from tally.server.dispatch import ANSWERS_ITSELF
from tally.server.job import Job

CU_EVENT_DISABLE_TIMING = 0x2


def event_create(job: Job, msg: EventCreate, tag: int) -> None:
    job.client.events.create(msg.event, timing=not msg.flags & CU_EVENT_DISABLE_TIMING)


def event_destroy(job: Job, msg: EventDestroy, tag: int) -> None:
    job.client.events.destroy(msg.event)


def event_record(job: Job, msg: EventRecord, tag: int) -> None:
    client = job.client
    client.streams.submit(msg.stream, ops.EventRecord(client.events.get(msg.event)))


def stream_wait_event(job: Job, msg: StreamWaitEvent, tag: int) -> None:
    client = job.client
    client.streams.submit(msg.stream, ops.StreamWaitEvent(client.events.get(msg.event)))


def event_query(job: Job, msg: EventQuery, tag: int) -> None:
    client = job.client
    if not client.executor.event_query(client.events.get(msg.event)):
        raise DeviceError(CUDA_ERROR_NOT_READY, "the event's work is not complete")


def event_synchronize(job: Job, msg: EventSynchronize, tag: int):
    client = job.client
    event = client.events.get(msg.event)
    if client.executor.event_query(event):
        # A printf flush point in CUDA: what the job's finished kernels printed comes first.
        forward_kernel_output(client, client.streams.keys())
        return None

    def wait() -> None:
        client.executor.event_synchronize(event)
        forward_kernel_output(client, client.streams.keys())

    client.blocking.run(tag, wait)
    return ANSWERS_ITSELF


def event_elapsed_time(job: Job, msg: EventElapsedTime, tag: int) -> ElapsedTimeReply:
    client = job.client
    start, end = client.events.get(msg.start), client.events.get(msg.end)
    if not (start.timing and end.timing):
        raise DeviceError(CUDA_ERROR_INVALID_HANDLE, "an event was created with CU_EVENT_DISABLE_TIMING")
    if not all(ev.submitted_seq or event_clock.carried(ev) for ev in (start, end)):
        raise DeviceError(CUDA_ERROR_INVALID_HANDLE, "an event was never recorded")
    if not (client.executor.event_query(start) and client.executor.event_query(end)):
        raise DeviceError(CUDA_ERROR_NOT_READY, "an event has not completed")
    if event_clock.carried(start) or event_clock.carried(end):     # recorded before a migration
        return ElapsedTimeReply(event_clock.elapsed_across_servers_ms(client.executor, start, end))
    return ElapsedTimeReply(client.executor.event_elapsed_ms(start, end))


def _ms_since(client, reference, event_id: int) -> float:
    """One EventTimes entry: milliseconds from `reference`, NaN while not complete,
    +inf where the event cannot be timed."""
    event = client.events.find(event_id)
    if event is None or not event.timing or not (event.submitted_seq or event_clock.carried(event)):
        return math.inf
    try:
        if not client.executor.event_query(event):
            return math.nan
        if event_clock.carried(reference) or event_clock.carried(event):
            return event_clock.elapsed_across_servers_ms(client.executor, reference, event)
        return client.executor.event_elapsed_ms(reference, event)
    except DeviceError:
        return math.inf           # its stream failed: the work it follows never finished


def event_times(job: Job, msg: EventTimes, tag: int) -> EventTimesReply:
    client = job.client
    if len(msg.tail) != 8 * msg.count:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"EventTimes names {msg.count} events in {len(msg.tail)} bytes")
    reference = client.events.get(msg.reference)
    recorded = reference.submitted_seq or event_clock.carried(reference)
    if not (reference.timing and recorded and client.executor.event_query(reference)):
        raise DeviceError(CUDA_ERROR_INVALID_HANDLE, "the reference event has no completed timing record")
    ids = struct.unpack(f"<{msg.count}Q", msg.tail)
    times = [_ms_since(client, reference, i) for i in ids]
    return EventTimesReply(count=msg.count, tail=struct.pack(f"<{msg.count}d", *times))


HANDLERS = {
    EventCreate: event_create,
    EventDestroy: event_destroy,
    EventRecord: event_record,
    StreamWaitEvent: stream_wait_event,
    EventQuery: event_query,
    EventSynchronize: event_synchronize,
    EventElapsedTime: event_elapsed_time,
    EventTimes: event_times,
}

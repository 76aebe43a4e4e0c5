"""Events: created under ids the client picks, recorded and waited on in stream
order through the executor."""
from __future__ import annotations

from tally.protocol.errors import CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_NOT_READY, DeviceError
from tally.scheduler.ops import EventRecord, StreamWaitEvent
from tally.server.dispatch import handler
from tally.server.client.state import driver_state
from tally.server.client.sync import forward_kernel_output

CU_EVENT_DISABLE_TIMING = 0x2


@handler("EventCreate")
def event_create(session, fields, tail, tag):
    state = driver_state(session)
    event_id = fields["event"]
    state.check_new_event_id(event_id)
    timing = not fields["flags"] & CU_EVENT_DISABLE_TIMING
    state.events[event_id] = state.executor.event_create(state.client_id, timing)
    if tag:
        session.reply("Done", tag)


@handler("EventDestroy")
def event_destroy(session, fields, tail, tag):
    state = driver_state(session)
    event = state.events.pop(fields["event"], None)
    if event is None:
        raise DeviceError(CUDA_ERROR_INVALID_HANDLE, f"event {fields['event']} was never created or is destroyed")
    if fields["event"] in state.imported_events:    # another job's event: only forget it here
        state.imported_events.discard(fields["event"])
    else:
        # Records still queued keep their place: the executor lets them complete.
        state.executor.event_destroy(event)
    if tag:
        session.reply("Done", tag)


@handler("EventRecord")
def event_record(session, fields, tail, tag):
    state = driver_state(session)
    state.streams.submit(fields["stream"], EventRecord(state.event(fields["event"])))
    if tag:
        session.reply("Done", tag)


@handler("StreamWaitEvent")
def stream_wait_event(session, fields, tail, tag):
    state = driver_state(session)
    state.streams.submit(fields["stream"], StreamWaitEvent(state.event(fields["event"])))
    if tag:
        session.reply("Done", tag)


@handler("EventQuery")
def event_query(session, fields, tail, tag):
    state = driver_state(session)
    if not state.executor.event_query(state.event(fields["event"])):
        raise DeviceError(CUDA_ERROR_NOT_READY, "the event's work is not complete")
    session.reply("Done", tag)


@handler("EventSynchronize")
def event_synchronize(session, fields, tail, tag):
    state = driver_state(session)
    event = state.event(fields["event"])
    if state.executor.event_query(event):
        # A printf flush point in CUDA: what the job's finished kernels printed comes first.
        forward_kernel_output(state, state.streams.keys())
        session.reply("Done", tag)
        return

    def wait() -> None:
        state.executor.event_synchronize(event)
        forward_kernel_output(state, state.streams.keys())
        session.reply("Done", tag)

    state.blocking.run(tag, wait)


@handler("EventElapsedTime")
def event_elapsed_time(session, fields, tail, tag):
    state = driver_state(session)
    start, end = state.event(fields["start"]), state.event(fields["end"])
    if not (start.timing and end.timing):
        raise DeviceError(CUDA_ERROR_INVALID_HANDLE, "an event was created with CU_EVENT_DISABLE_TIMING")
    if not (start.submitted_seq and end.submitted_seq):
        raise DeviceError(CUDA_ERROR_INVALID_HANDLE, "an event was never recorded")
    if not (state.executor.event_query(start) and state.executor.event_query(end)):
        raise DeviceError(CUDA_ERROR_NOT_READY, "an event has not completed")
    session.reply("ElapsedTimeReply", tag, ms=state.executor.event_elapsed_ms(start, end))

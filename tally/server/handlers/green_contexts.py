"""Green contexts: the SMs a job may partition (its SM share, else the whole
device) and the streams of its green contexts, whose kernels keep to their SMs.
The client splits SM resources and makes the contexts itself
(client_preload/src/contexts/green_contexts.h); the server only hears of the
SM count of each green context's streams."""
from __future__ import annotations

from tally.backends.sm_partitions import rules_of
from tally.protocol.messages_generated import GreenStreamCreate, SmResourceQuery, SmResourceReply
from tally.server.job import Job


def sm_resource_query(job: Job, msg: SmResourceQuery, tag: int) -> SmResourceReply:
    client = job.client
    description = job.backend.describe()
    rules = rules_of(description)
    granted = client.executor.sm_granted(client.client_id)
    return SmResourceReply(sm_count=description.sm_count if granted is None else granted,
                           min_partition=rules.minimum, alignment=rules.alignment,
                           device_sm_count=description.sm_count)


def green_stream_create(job: Job, msg: GreenStreamCreate, tag: int) -> None:
    job.client.streams.create(msg.stream, msg.flags, msg.priority, sm_cap=msg.sm_count)


HANDLERS = {
    SmResourceQuery: sm_resource_query,
    GreenStreamCreate: green_stream_create,
}

"""Pinned host memory requests (tally/server/client/host_memory.py says how
regions work)."""
from __future__ import annotations

from tally.protocol.messages_generated import HostRegister, HostRegisterReply, HostUnregister
from tally.server.client.sync import when_idle
from tally.server.dispatch import ANSWERS_ITSELF, name_in_tail
from tally.server.job import Job


def host_register(job: Job, msg: HostRegister, tag: int) -> HostRegisterReply:
    region = job.client.regions.register(name_in_tail(msg.tail), msg.size, msg.address)
    return HostRegisterReply(region.region_id)


def host_unregister(job: Job, msg: HostUnregister, tag: int):
    client = job.client
    region = msg.region
    client.regions.get(region)          # an unknown region fails now, not after the wait
    # Unregistering memory a queued copy still reads is undefined on a GPU: the client's
    # work drains first (cuMemFreeHost and cuMemHostUnregister synchronize in CUDA too).
    when_idle(client, tag, lambda: client.regions.unregister(region))
    return ANSWERS_ITSELF


HANDLERS = {HostRegister: host_register, HostUnregister: host_unregister}

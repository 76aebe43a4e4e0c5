"""Pinned host memory requests (see host_memory.py for how regions work)."""
from __future__ import annotations

from tally.server.dispatch import handler
from tally.server.handlers.modules import _name
from tally.server.client.state import driver_state
from tally.server.client.sync import when_idle


@handler("HostRegister")
def host_register(session, fields, tail, tag):
    region = driver_state(session).regions.register(_name(tail), fields["size"], fields["address"])
    session.reply("HostRegisterReply", tag, region=region.region_id)


@handler("HostUnregister")
def host_unregister(session, fields, tail, tag):
    state = driver_state(session)
    region = fields["region"]
    state.regions.get(region)          # an unknown region fails now, not after the wait
    # Unregistering memory a queued copy still reads is undefined on a GPU: the client's
    # work drains first (cuMemFreeHost and cuMemHostUnregister synchronize in CUDA too).
    when_idle(state, tag, lambda: state.regions.unregister(region))

"""Pinned host memory requests (see host_memory.py for how regions work)."""
from __future__ import annotations

from tally.server.dispatch import handler
from tally.server.driver.modules import _name
from tally.server.driver.state import driver_state


@handler("HostRegister")
def host_register(session, fields, tail, tag):
    region = driver_state(session).regions.register(_name(tail), fields["size"])
    session.reply("HostRegisterReply", tag, region=region.region_id)


@handler("HostUnregister")
def host_unregister(session, fields, tail, tag):
    driver_state(session).regions.unregister(fields["region"])
    if tag:
        session.reply("Done", tag)

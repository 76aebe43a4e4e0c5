"""Texture and surface objects (cuTexObjectCreate/Destroy, cuSurfObjectCreate/Destroy).

The request is checked as the driver documents (tally/backends/texture_objects.py:
validate), then the memory an object reads must be the job's own
(client.check_device_range over every byte it can reach), so no texture reads
another job's memory; only then does the backend make the object. A destroy waits for the job's
queued work, which may still sample the object, as mem_free does.
"""
from __future__ import annotations

from tally.backends.texture_objects import TextureRequest, validate
from tally.protocol.messages_generated import TextureCreate, TextureDestroy, TextureReply
from tally.server.client.sync import when_idle
from tally.server.dispatch import ANSWERS_ITSELF
from tally.server.job import Job


def texture_create(job: Job, msg: TextureCreate, tag: int) -> TextureReply:
    req = TextureRequest.from_message(msg)
    validate(req)
    job.client.check_device_range(req.address, req.extent(), f"the memory of {req.what}'s resource")
    return TextureReply(handle=job.client.textures.create(req))


def texture_destroy(job: Job, msg: TextureDestroy, tag: int):
    client = job.client
    handle = msg.handle
    client.textures.take(handle)
    when_idle(client, tag, lambda: client.textures.release(handle))
    return ANSWERS_ITSELF


HANDLERS = {TextureCreate: texture_create, TextureDestroy: texture_destroy}

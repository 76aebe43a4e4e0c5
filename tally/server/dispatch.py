"""How a request reaches its handler, and how it is answered.

The session thread decodes each request into its typed message (one frozen
dataclass per message kind, tally/protocol/messages_generated.py) and calls the
handler that `tally.server.handlers.HANDLERS` lists for that kind:

    def mem_alloc(job: Job, msg: MemAlloc, tag: int) -> MemAllocReply: ...

`job` is the job the request came from, as tally/server/job.py's `Job` Protocol
describes it (what it created: `job.client`; the server-wide services its
requests use: `job.services`; its answers and deferred errors), `msg` the
request (`msg.bytes`, `msg.stream`, `msg.tail`...), `tag` the request's tag (0:
asynchronous). What the handler returns decides the answer:

- None: the request is done; a synchronous request gets Done.
- a reply message (MemAllocReply(dptr=...)): sent to a synchronous request.
- ANSWERS_ITSELF: the handler answers the request itself, no automatic Done:
  it handed the rest of its work to the session's blocking pool, which sends
  the answer (or the Error) once what it waits for is done (synchronization,
  frees that wait for queued work...), or the request gets no answer at all
  (Goodbye).

Asynchronous requests are never answered. A handler signals failure by raising
DeviceError (the job sees that CUresult) or ProtocolError (the message itself
was bad); the session turns either into the Error record of a synchronous
request or the deferred error of an asynchronous one.

Where things are: tally/server/handlers/<concept>.py holds the handlers of one
driver concept (memory, copies, host_memory, managed_memory, virtual_memory,
ipc, streams, events, host_functions, sync, modules, linker, launch,
connection, green_contexts), each module listing its own in a HANDLERS table that
handlers/__init__.py merges. What a job has created through them lives in
tally/server/client/ (ClientState, made by the session).
"""
from __future__ import annotations

from typing import Any, Callable

from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError


class _AnswersItself:
    def __repr__(self) -> str:
        return "ANSWERS_ITSELF"


ANSWERS_ITSELF = _AnswersItself()

# handler(job, message, tag) -> None | reply message | ANSWERS_ITSELF
Handler = Callable[[Any, Any, int], Any]


def name_in_tail(tail) -> str:
    """A name a request carries as its tail (a kernel or variable name, a
    shared-memory object's name): UTF-8, not empty, no NUL."""
    try:
        name = bytes(tail).decode()
    except UnicodeDecodeError:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, "symbol name is not UTF-8") from None
    if not name or "\0" in name:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"bad symbol name {name!r}")
    return name

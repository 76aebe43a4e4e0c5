"""The session's own messages, not driver calls: keep-alives and the goodbye."""
from __future__ import annotations

from tally.protocol.messages_generated import Goodbye, Notify, Ping, Pong
from tally.server.dispatch import ANSWERS_ITSELF
from tally.server.job import Job


def ping(job: Job, msg: Ping, tag: int) -> Pong:
    return Pong(msg.value)


def notify(job: Job, msg: Notify, tag: int) -> None:
    # One-way message: counted (the session's counters do that). A client that
    # tags it anyway waits for an answer, like after any other asynchronous request.
    return None


def goodbye(job: Job, msg: Goodbye, tag: int):
    job.request_close("client said goodbye")
    return ANSWERS_ITSELF     # the session ends: nobody is left to read an answer


HANDLERS = {Ping: ping, Notify: notify, Goodbye: goodbye}

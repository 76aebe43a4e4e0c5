"""Session-level messages that are not driver calls."""
from __future__ import annotations

from tally.server.dispatch import handler


@handler("Ping")
def ping(session, fields, tail, tag):
    session.reply("Pong", tag, value=fields["value"])


@handler("Notify")
def notify(session, fields, tail, tag):
    # One-way message: counted (the session's counters do that). A client that
    # tags it anyway waits for an answer, like after any other asynchronous request.
    if tag:
        session.reply("Done", tag)


@handler("Goodbye")
def goodbye(session, fields, tail, tag):
    session.request_close("client said goodbye")

"""Mutated first records on the server's socket, and what the server did with
each: refused it with a HelloReply naming why, hung up on it (a record that is
not a handshake at all), or accepted it (a strange but valid Hello). Silence is
the failure: a peer left waiting.

Operator requests (status, every control request the server takes:
tally/server/control.py's REQUESTS) and another server's migration offer are
first records too; they
are left out: each has its own answer, and a random pause or eviction would
stall the soak's own client rather than test the handshake.
"""
from __future__ import annotations

import os
import random
import socket
from pathlib import Path

from tally import protocol
from tally.protocol import RECORD_HEADER
from tally.protocol.framing import MAX_SOCKET_RECORD, recv_record
from tally.server import control

HELLO = protocol.codec("Hello")
REFUSED, HUNG_UP, ACCEPTED, SILENT = "refused", "hung up", "accepted", "silent"

# mutation -> what the server must do with it (None: refuse or accept, never silence)
EXPECTED = {
    "version": REFUSED, "priority": REFUSED, "pid": REFUSED, "sm-percent": REFUSED,
    "quota": None, "program": None, "garbage": None,
    "truncated": HUNG_UP, "wrong-kind": HUNG_UP, "short-frame": HUNG_UP, "oversize": HUNG_UP,
}
MUTATIONS = tuple(EXPECTED)


def _hello(**changes) -> bytes:
    fields = dict(protocol_version=protocol.PROTOCOL_VERSION, pid=os.getpid(),
                  priority=int(protocol.Priority.BEST_EFFORT), program="fuzz")
    fields.update(changes)
    return HELLO.pack(**fields)


def _not_a_first_record(rng: random.Random) -> int:
    first_records = ("StatusRequest", "DriverVersionQuery", "MigrateOffer")
    operator = {*control.REQUESTS, *(protocol.codec(n).kind for n in first_records if n in protocol.CODECS)}
    while True:
        kind = rng.randint(0, 300)
        if kind != HELLO.kind and kind not in operator:
            return kind


def frame(mutation: str, rng: random.Random) -> tuple[bytes, bool]:
    """The bytes to send, and whether to shut our side down after them."""
    if mutation == "version":
        version = rng.choice((0, protocol.PROTOCOL_VERSION + 1, rng.randint(0, (1 << 32) - 1)))
        if version == protocol.PROTOCOL_VERSION:
            version += 1
        payload = _hello(protocol_version=version)
    elif mutation == "priority":
        payload = _hello(priority=rng.randint(2, (1 << 32) - 1))
    elif mutation == "pid":
        payload = _hello(pid=0)
    elif mutation == "sm-percent":
        payload = _hello(sm_percent=rng.choice((float("nan"), float("inf"), -1.0, 100.5, 1e300)))
    elif mutation == "quota":
        payload = _hello(memory_quota=rng.choice((1, 1 << 40, (1 << 64) - 1)),
                         memory_quota_percent=rng.choice((0.0, -5.0, 150.0, float("nan"), 1e-9)))
    elif mutation == "program":
        payload = _hello(program=rng.randbytes(rng.randint(0, 64)))
    elif mutation == "garbage":
        payload = rng.randbytes(rng.randint(0, 2 * HELLO.struct.size))
    elif mutation == "truncated":
        payload = _hello()[:rng.randrange(4, HELLO.struct.size)]
    elif mutation == "wrong-kind":
        return RECORD_HEADER.pack(_not_a_first_record(rng), 16, 0) + rng.randbytes(16), False
    elif mutation == "short-frame":
        whole = _hello()
        return RECORD_HEADER.pack(HELLO.kind, len(whole), 0) + whole[:rng.randrange(len(whole))], True
    elif mutation == "oversize":
        return RECORD_HEADER.pack(HELLO.kind, MAX_SOCKET_RECORD + rng.randint(1, 1 << 20), 0), True
    else:
        raise ValueError(f"unknown handshake mutation {mutation!r}")
    return RECORD_HEADER.pack(HELLO.kind, len(payload), 0) + payload, False


def attempt(socket_path: Path, mutation: str, rng: random.Random, timeout: float = 30.0) -> str:
    """Send one mutated first record; what the server did (REFUSED, HUNG_UP, ACCEPTED or SILENT)."""
    data, shut = frame(mutation, rng)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(socket_path))
        sock.sendall(data)
        if shut:
            sock.shutdown(socket.SHUT_WR)
        try:
            kind, _tag, payload = recv_record(sock)
        except ConnectionError:
            return HUNG_UP
        except TimeoutError:
            return SILENT
        if kind != protocol.codec("HelloReply").kind:
            return f"answered with kind {kind}"
        reply, _ = protocol.codec("HelloReply").unpack(payload)
        if reply["status"] == protocol.HandshakeStatus.OK:
            return ACCEPTED       # closing the socket now ends the session it started
        return REFUSED if protocol.cstr(reply["message"]) else "refused without a reason"
    finally:
        sock.close()

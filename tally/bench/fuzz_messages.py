"""Requests with arbitrary field values and mutated records for the server's
rings, drawn from a random.Random (tests/test_server_fuzz.py passes hypothesis'
shrinkable one; `tally-bench fuzz` a seeded one).

Sizes are kept to a few MiB or made absurd (2**40 and up), so an accepted
request never makes the emulator touch gigabytes; addresses come from the
allocations the run itself made as well as from thin air.

Mutations of a well-formed request (MUTATIONS): its fields' values (it may be
accepted), a payload cut short, flipped bits, bytes appended (after a message
without a tail they are malformed; after one with a tail they only lengthen
it), and a kind no handler knows. A malformed record (Record.malformed) must be
answered with an Error.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from tally import protocol
from tally.protocol import spec
from tally.server.handlers import HANDLERS

# Goodbye ends the session on purpose; everything else must leave it usable.
GOODBYE = protocol.codec("Goodbye").kind
KINDS = sorted(protocol.BY_KIND[k].message.name for k in HANDLERS if k != GOODBYE)
SMALL_MAX = 64
SIZES = (0, 1, 3, 4, 8, 255, 256, 4096, 65536, 2 << 20, 4 << 20)
ABSURD = (1 << 40, 1 << 63, (1 << 64) - 1)
MAX_TAIL = 96

FIELDS, TRUNCATED, BIT_FLIPS, TRAILING, UNKNOWN_KIND = "fields", "truncated", "bit-flips", "trailing", "unknown-kind"
MUTATIONS = (FIELDS, TRUNCATED, BIT_FLIPS, TRAILING, UNKNOWN_KIND)


@dataclass(frozen=True)
class Record:
    """One request for the ring: what it is, and the bytes to push."""
    name: str              # the message it was built from ("" for an unknown kind)
    mutation: str
    kind: int
    payload: bytes
    fields: dict
    malformed: bool        # no handler may take it as a request


def value_for(f: spec.Field, rng: random.Random, addresses: list[int]):
    """A value for one field: small numbers, sizes, absurd values, or an address
    the run made (or near one)."""
    if f.type == "u8" and f.count > 1:
        return rng.randbytes(rng.randint(0, f.count))
    if f.type == "f64":
        def real() -> float:
            return rng.choice((0.0, -1.0, 1e300, -1e-300, rng.uniform(-1e6, 1e6)))
        return tuple(real() for _ in range(f.count)) if f.count > 1 else real()
    bits = spec.SCALARS[f.type][2] * 8
    signed = f.type.startswith("i")
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)

    def number() -> int:
        pick = rng.randrange(5) if f.count == 1 else rng.randrange(2)
        if pick == 0:
            return rng.randint(0, SMALL_MAX)
        if pick == 1:
            return rng.choice(SIZES)
        if pick == 2:
            return rng.choice(ABSURD)
        # drawn the same way whatever the run made (hypothesis replays draws)
        base = addresses[rng.randrange(64) % len(addresses)]
        return base if pick == 3 else base + rng.randint(0, 4096)

    if f.count > 1:                                   # grid and block dimensions
        return tuple(min(max(number(), lo), hi) for _ in range(f.count))
    return min(max(number(), lo), hi)


def request(name: str, rng: random.Random, addresses: list[int]) -> tuple[dict, bytes]:
    """Field values and a tail for message `name`."""
    message = protocol.codec(name).message
    fields = {f.name: value_for(f, rng, addresses) for f in message.fields}   # padding too: any bytes
    tail = rng.randbytes(rng.randint(0, MAX_TAIL)) if message.tail is not None else b""
    return fields, tail


def mutated(rng: random.Random, addresses: list[int], mutation: str | None = None) -> Record:
    """One record for the request ring: a request of a random kind, mutated one way."""
    mutation = mutation or rng.choice(MUTATIONS)
    name = rng.choice(KINDS)
    c = protocol.codec(name)
    fields, tail = request(name, rng, addresses)
    payload = c.pack(tail, **fields)
    kind = c.kind
    malformed = mutation in (TRUNCATED, UNKNOWN_KIND) or (mutation == TRAILING and c.message.tail is None)
    if mutation == TRUNCATED:
        payload = payload[:rng.randrange(c.struct.size)] if c.struct.size else payload
        if c.struct.size == 0:            # nothing to cut: a message with no fields is only its kind
            mutation, malformed = FIELDS, False
    elif mutation == BIT_FLIPS:
        data = bytearray(payload)
        for _ in range(rng.randint(1, 4)):
            if data:
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        payload = bytes(data)
    elif mutation == TRAILING:
        payload += rng.randbytes(rng.randint(1, 64))
    elif mutation == UNKNOWN_KIND:
        kind = rng.choice((0, *_unused_kinds(), rng.randint(1 << 10, (1 << 16) - 1)))
        name = ""
    return Record(name, mutation, kind, payload, fields, malformed)


def _unused_kinds() -> tuple[int, ...]:
    return tuple(k for k in range(1, 300) if k not in HANDLERS and k != GOODBYE)[:64]

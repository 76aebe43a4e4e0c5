"""Stream memory operations on the emulator: a wait on a value holds its
stream's thread (and so only that stream) by polling the memory; a write is one
more stream-ordered store.

A wait polls with a back-off from 20 us to 1 ms: a value written by a kernel or
a copy on another stream, or by another job through IPC, is seen within about
a millisecond, and a wait that is never satisfied costs the host next to
nothing. `EmulatorStream.release_waits` (its job is leaving) ends every wait of
the stream, present and future, so its thread can finish.
"""
from __future__ import annotations

import time

from tally.backends.stream_memory_ops import wait_satisfied

_FIRST_POLL_S = 20e-6
_LAST_POLL_S = 1e-3


def wait_op(read_value, value: int, width: int, condition: int, released):
    """The stream operation: returns once `read_value()` meets the condition or
    `released` (a threading.Event) is set."""
    def wait() -> None:
        pause = _FIRST_POLL_S
        while not wait_satisfied(read_value(), value, width, condition):
            if released.wait(pause):
                return
            pause = min(pause * 2, _LAST_POLL_S)
    return wait


def reader(memory_call, memory, address: int, width: int):
    """Reads the `width`-byte little-endian value at `address`."""
    buf = bytearray(width)

    def read() -> int:
        memory_call(memory.read, buf, address)
        return int.from_bytes(buf, "little")
    return read

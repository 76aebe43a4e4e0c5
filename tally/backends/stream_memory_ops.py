"""What a stream wait on a value means (cuStreamWaitValue32/64), in one place
for every backend: the emulator evaluates it, the cuda backend uses it to
release a wait its job left behind.

Conditions are CUstreamWaitValue_flags from cuda.h; values are unsigned
`width`-byte integers as they lie in memory (little-endian).
"""
from __future__ import annotations

WAIT_GEQ, WAIT_EQ, WAIT_AND, WAIT_NOR = 0, 1, 2, 3
WAIT_CONDITIONS = {WAIT_GEQ: "GEQ", WAIT_EQ: "EQ", WAIT_AND: "AND", WAIT_NOR: "NOR"}
WAIT_FLUSH = 1 << 30            # CU_STREAM_WAIT_VALUE_FLUSH: needs remote-write flushing, which no backend reports
WRITE_NO_MEMORY_BARRIER = 1     # CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER: a weaker ordering, always allowed


def wait_satisfied(current: int, value: int, width: int, condition: int) -> bool:
    """Whether `current` (the memory's value) ends a wait for `value`."""
    mask = (1 << (8 * width)) - 1
    current &= mask
    value &= mask
    if condition == WAIT_GEQ:
        # (int32_t)(*addr - value) >= 0: a wrapping comparison, as counters are compared
        return ((current - value) & mask) < 1 << (8 * width - 1)
    if condition == WAIT_EQ:
        return current == value
    if condition == WAIT_AND:
        return current & value != 0
    if condition == WAIT_NOR:
        return ~(current | value) & mask != 0
    raise ValueError(f"unknown wait condition {condition}")


def satisfying_value(value: int, width: int, condition: int) -> int | None:
    """A value that ends such a wait, or None when none can (AND with 0, NOR with
    all bits set): what a server writes to let a leaving job's stream go."""
    mask = (1 << (8 * width)) - 1
    value &= mask
    if condition in (WAIT_GEQ, WAIT_EQ):
        return value
    if condition == WAIT_AND:
        return value if value else None
    if condition == WAIT_NOR:
        return 0 if value != mask else None
    return None

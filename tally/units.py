"""Amounts of memory as people write them on a command line, and as tally prints them.

A bare number is refused: "40" could be 40 bytes or 40 GiB, and a job given
40 bytes fails in a way that looks like a full device. Sizes need a unit (B, K,
M, G, T; binary multiples, with or without "iB"), or are a percentage where
the caller allows one.
"""
from __future__ import annotations

import re

SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%|[kKmMgGtT](?:i?[bB])?|[bB])?\s*$")
MULTIPLES = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
UNITS_HELP = "a size with a unit (e.g. 8G, 512M, 1.5GiB, 4096B)"


class SizeError(ValueError):
    """A size that cannot be understood; the message says what is accepted."""


def parse_size(text: str, what: str = "size", allow_percent: bool = False) -> int | float:
    """Bytes (int) for '8G'/'512MiB'/'4096B'; a percentage (float in (0, 100]) for '50%'
    when allowed. Raises SizeError naming `what` and the accepted forms."""
    accepted = UNITS_HELP + (" or a percentage of device memory (e.g. 50%)" if allow_percent else "")
    m = SIZE.match(text)
    if not m:
        raise SizeError(f"{what} {text!r}: use {accepted}")
    value, unit = float(m.group(1)), m.group(2) or ""
    if not unit:
        n = m.group(1)
        raise SizeError(f"{what} {text!r} has no unit: write {n}B for bytes, or {n}M, {n}G"
                        + (f", {n}%" if allow_percent else "") + " (units: B, K, M, G, T"
                        + (", or % of device memory)" if allow_percent else ")"))
    if unit == "%":
        if not allow_percent:
            raise SizeError(f"{what} {text!r}: a percentage is not accepted here; use {UNITS_HELP}")
        if not 0 < value <= 100:
            raise SizeError(f"{what} {text!r}: a percentage must be in (0, 100]")
        return value
    nbytes = int(value * MULTIPLES[unit[0].lower()])
    if nbytes <= 0:
        raise SizeError(f"{what} {text!r} must be positive")
    return nbytes


def format_bytes(n: int) -> str:
    """'1.50 GiB', '64.0 MiB', '512 B': for messages people read."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"

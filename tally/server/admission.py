"""What a job asks for at handshake, checked before anything is created for it.

Every Hello field is validated here, so a malformed or hostile handshake is
refused with a status and a sentence (which the job prints) instead of
reaching the session with a value nothing downstream expects (an infinite
quota percentage once ended the handshake thread with an OverflowError).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tally import protocol
from tally.protocol.messages_generated import Hello
from tally.units import format_bytes


class Refused(Exception):
    """The handshake is refused; `status` is a protocol.HandshakeStatus."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Admission:
    priority: protocol.Priority
    quota_bytes: int | None      # None: no quota of its own
    program: str
    sm_percent: float | None = None      # its SM share; None: the whole device
    sm_percent_asked: float | None = None    # what the job asked, before the server's limit


def check_version(version: int) -> None:
    if version != protocol.PROTOCOL_VERSION:
        raise Refused(protocol.HandshakeStatus.VERSION_MISMATCH,
                      f"protocol version mismatch: client speaks v{version}, "
                      f"server v{protocol.PROTOCOL_VERSION}; use the tally-run/libcuda.so.1 of the "
                      f"same tally installation as the server")


def hello_version(payload: bytes) -> int:
    """The protocol version a Hello names (its first field), read before decoding it:
    another version's Hello may have another layout and not decode at all."""
    return int.from_bytes(payload[:4], "little") if len(payload) >= 4 else 0


def admit(hello: Hello, total_memory: int, *, be_sm_percent: float | None = None) -> Admission:
    """The job's admission from its Hello; raises Refused with the reason.
    `be_sm_percent` (tally-server --be-sm-percent): a best-effort job's share when
    it asks for none, and the most it may ask for."""
    bad = protocol.HandshakeStatus.BAD_REQUEST
    check_version(hello.protocol_version)
    try:
        priority = protocol.Priority(hello.priority)
    except ValueError:
        raise Refused(bad, f"unknown priority {hello.priority} (0 = high, 1 = best-effort)") from None
    if hello.pid <= 0:
        raise Refused(bad, f"pid {hello.pid} is not a process id")
    asked = _sm_percent(hello)
    share = asked
    if priority == protocol.Priority.BEST_EFFORT and be_sm_percent is not None:
        share = be_sm_percent if asked is None else min(asked, be_sm_percent)
    return Admission(priority, _quota_bytes(hello, total_memory), _program(hello), share, asked)


def _sm_percent(hello: Hello) -> float | None:
    percent = hello.sm_percent
    if percent == 0:
        return None
    if not math.isfinite(percent) or not 0 < percent <= 100:
        raise Refused(protocol.HandshakeStatus.BAD_REQUEST,
                      f"SM share {percent!r}% is not a percentage of the SMs in (0, 100]")
    return float(percent)


def _quota_bytes(hello: Hello, total_memory: int) -> int | None:
    nbytes, percent = hello.memory_quota, hello.memory_quota_percent
    bad = protocol.HandshakeStatus.BAD_REQUEST
    if nbytes and percent:
        raise Refused(bad, "memory quota given both in bytes and as a percentage; give one")
    if percent:
        if not math.isfinite(percent) or not 0 < percent <= 100:
            raise Refused(bad, f"memory quota {percent!r}% is not a percentage in (0, 100]")
        return max(1, int(total_memory * percent / 100.0))
    if nbytes:
        if nbytes > total_memory:
            raise Refused(protocol.HandshakeStatus.QUOTA_UNAVAILABLE,
                          f"memory quota {format_bytes(nbytes)} is more than the device has "
                          f"({format_bytes(total_memory)})")
        return int(nbytes)
    return None


def _program(hello: Hello) -> str:
    name = protocol.cstr(hello.program)
    name = "".join(ch if ch.isprintable() else "?" for ch in name)
    return name or f"pid {hello.pid}"

"""The wire protocol in Python, built from tally.protocol.spec.

The server reads and writes records through the typed messages of
`tally.protocol.messages_generated` (one frozen dataclass per message, generated
by tools/gen_protocol.py). `Codec` is the same protocol seen as dictionaries, for
tools and tests that build records field by field (padding included) from the
spec.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from . import messages_generated, spec
from .errors import ProtocolError  # noqa: F401  (re-exported)
from .spec import PROTOCOL_VERSION, SEGMENT_MAGIC  # noqa: F401  (re-exported)

RECORD_HEADER = struct.Struct("<IIQ")  # kind, payload size, tag


def _make_enum(e: spec.Enum) -> type[IntEnum]:
    return IntEnum(e.name, dict(e.values))


Priority = _make_enum(next(e for e in spec.ENUMS if e.name == "Priority"))
HandshakeStatus = _make_enum(next(e for e in spec.ENUMS if e.name == "HandshakeStatus"))
LaunchFlag = _make_enum(next(e for e in spec.ENUMS if e.name == "LaunchFlag"))
GraphNodeType = _make_enum(next(e for e in spec.ENUMS if e.name == "GraphNodeType"))

# How people spell a priority: `tally-run --priority`, `tally-server status` and its JSON.
# Inside the server a priority is always a Priority.
PRIORITY_NAMES = {Priority.HIGH: "high", Priority.BEST_EFFORT: "best-effort"}


def priority_name(priority: Priority) -> str:
    return PRIORITY_NAMES[priority]


def parse_priority(name: str) -> Priority:
    for priority, text in PRIORITY_NAMES.items():
        if text == name:
            return priority
    raise ValueError(f"unknown priority {name!r} (expected {' or '.join(PRIORITY_NAMES.values())})")


@dataclass(frozen=True)
class Codec:
    """One message kind as dictionaries: `pack(tail, **fields)` builds a payload
    from any field values (padding too, which tests use to send arbitrary bytes);
    `unpack(payload)` decodes through the message's class."""

    message: spec.Message
    struct: struct.Struct
    type: type                   # the message's class in messages_generated
    names: tuple[str, ...]       # the class's fields (no padding, no tail)

    @property
    def kind(self) -> int:
        return self.message.kind

    def pack(self, tail: bytes = b"", **values) -> bytes:
        args = []
        for f in self.message.fields:
            v = values.get(f.name, b"" if _is_bytes(f) else 0 if f.count == 1 else (0,) * f.count)
            if _is_bytes(f):
                if isinstance(v, str):
                    v = v.encode()
                if len(v) > f.count:
                    raise ProtocolError(f"{self.message.name}.{f.name}: {len(v)} bytes > {f.count}")
                args.append(v)
            elif f.count > 1:
                if len(v) != f.count:
                    raise ProtocolError(f"{self.message.name}.{f.name}: need {f.count} values")
                args.extend(v)
            else:
                args.append(v)
        if tail and self.message.tail is None:
            raise ProtocolError(f"{self.message.name} carries no tail")
        return self.struct.pack(*args) + tail

    def unpack(self, payload) -> tuple[dict, memoryview]:
        """Returns (fields, tail). Raises ProtocolError when the payload is short."""
        message = self.type.decode(payload)
        tail = message.tail if self.message.tail is not None else memoryview(b"")
        return {name: getattr(message, name) for name in self.names}, tail


def _is_bytes(f: spec.Field) -> bool:
    return f.type == "u8" and f.count > 1


def struct_format(message: spec.Message) -> str:
    fmt = "<"
    for f in message.fields:
        code = spec.SCALARS[f.type][1]
        fmt += f"{f.count}s" if _is_bytes(f) else (f"{f.count}{code}" if f.count > 1 else code)
    return fmt


def _build() -> dict[str, Codec]:
    codecs = {}
    for m in spec.MESSAGES:
        s = struct.Struct(struct_format(m))
        if s.size % 8:
            raise AssertionError(f"{m.name}: size {s.size} is not a multiple of 8; add padding")
        names = tuple(f.name for f in m.fields if not f.name.startswith("_pad"))
        codecs[m.name] = Codec(m, s, messages_generated.BY_KIND[m.kind], names)
    kinds = [m.kind for m in spec.MESSAGES]
    if len(set(kinds)) != len(kinds):
        raise AssertionError("duplicate message kinds in tally.protocol.spec")
    return codecs


CODECS: dict[str, Codec] = _build()
BY_KIND: dict[int, Codec] = {c.kind: c for c in CODECS.values()}


def codec(name: str) -> Codec:
    return CODECS[name]


def cstr(raw: bytes) -> str:
    """Decode a NUL-padded fixed byte field."""
    return raw.split(b"\0", 1)[0].decode(errors="replace")

"""Python codecs for the wire protocol, built from tally.protocol.spec."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from . import spec
from .spec import PROTOCOL_VERSION, SEGMENT_MAGIC  # noqa: F401  (re-exported)

RECORD_HEADER = struct.Struct("<IIQ")  # kind, payload size, tag


class ProtocolError(Exception):
    """A record that does not follow the protocol (bad kind, bad size, bad field)."""


def _make_enum(e: spec.Enum) -> type[IntEnum]:
    return IntEnum(e.name, dict(e.values))


Priority = _make_enum(next(e for e in spec.ENUMS if e.name == "Priority"))
HandshakeStatus = _make_enum(next(e for e in spec.ENUMS if e.name == "HandshakeStatus"))


@dataclass(frozen=True)
class Codec:
    """Encoder/decoder for one message kind."""

    message: spec.Message
    struct: struct.Struct
    names: tuple[str, ...]
    # Where each field's value sits in struct.unpack's tuple: (name, index, end);
    # end is None for a single value, else the field is raw[index:end]. Computed
    # once, so decoding (once per request: the server's hot path) is one pass.
    plan: tuple[tuple[str, int, int | None], ...] = ()

    @property
    def kind(self) -> int:
        return self.message.kind

    def pack(self, tail: bytes = b"", **values) -> bytes:
        args = []
        for f in self.message.fields:
            v = values.get(f.name, b"" if _is_bytes(f) else 0)
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
        if len(payload) < self.struct.size:
            raise ProtocolError(
                f"{self.message.name}: payload of {len(payload)} bytes, need {self.struct.size}")
        raw = self.struct.unpack_from(payload, 0)
        out = {name: raw[i] if end is None else raw[i:end] for name, i, end in self.plan}
        tail = memoryview(payload)[self.struct.size:]
        if self.message.tail is None and len(tail):
            raise ProtocolError(f"{self.message.name}: {len(tail)} unexpected trailing bytes")
        return out, tail


def _is_bytes(f: spec.Field) -> bool:
    return f.type == "u8" and f.count > 1


def struct_format(message: spec.Message) -> str:
    fmt = "<"
    for f in message.fields:
        code = spec.SCALARS[f.type][1]
        fmt += f"{f.count}s" if _is_bytes(f) else (f"{f.count}{code}" if f.count > 1 else code)
    return fmt


def _plan(message: spec.Message) -> tuple[tuple[str, int, int | None], ...]:
    plan, i = [], 0
    for f in message.fields:
        if f.count > 1 and not _is_bytes(f):
            plan.append((f.name, i, i + f.count))
            i += f.count
        else:
            plan.append((f.name, i, None))
            i += 1
    return tuple(plan)


def _build() -> dict[str, Codec]:
    codecs = {}
    for m in spec.MESSAGES:
        s = struct.Struct(struct_format(m))
        if s.size % 8:
            raise AssertionError(f"{m.name}: size {s.size} is not a multiple of 8; add padding")
        codecs[m.name] = Codec(m, s, tuple(f.name for f in m.fields), _plan(m))
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

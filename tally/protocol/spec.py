"""The wire protocol, once: every message kind and its fixed layout.

This module is pure data. `tools/gen_protocol.py` turns it into the C++ header
csrc/include/tally/protocol_generated.h (used by the server's C++ core and by the
client library) and `tally.protocol` turns it into Python codecs at import time.
A test fails when the committed header differs from a fresh generation, so the
two sides cannot drift.

Layout rules: little-endian, natural alignment, every struct a multiple of 8
bytes, padding written out as explicit `_pad*` fields so the C++ struct and the
Python format agree byte for byte. A message may end with a variable-length
`tail` of raw bytes (kernel parameters, names, small inline payloads).

Every record, on the rings and on the handshake socket, starts with a
RecordHeader {u32 kind, u32 size, u64 tag}: `size` counts the payload bytes after
the header, `tag` lets a reply name its request.
"""
from __future__ import annotations

from dataclasses import dataclass, field

PROTOCOL_VERSION = 1
# "TALY" in little-endian ASCII; first word of every shared segment header.
SEGMENT_MAGIC = 0x594C4154

# Slots in DeviceInfo.attributes (CU_DEVICE_ATTRIBUTE_MAX is 148 in CUDA 13.0).
ATTRIBUTE_SLOTS = 256

# Scalar types: name -> (C++ type, struct code, size)
SCALARS = {
    "u8": ("uint8_t", "B", 1),
    "u16": ("uint16_t", "H", 2),
    "u32": ("uint32_t", "I", 4),
    "u64": ("uint64_t", "Q", 8),
    "i32": ("int32_t", "i", 4),
    "i64": ("int64_t", "q", 8),
    "f64": ("double", "d", 8),
}


@dataclass(frozen=True)
class Field:
    name: str
    type: str          # a key of SCALARS
    count: int = 1     # > 1: fixed array (char/u8 arrays are bytes in Python)


@dataclass(frozen=True)
class Message:
    name: str          # CamelCase; the C++ struct is <name>Msg
    kind: int          # unique id on the wire
    doc: str
    fields: tuple[Field, ...] = ()
    tail: str | None = None  # description of trailing variable bytes, None if none


@dataclass(frozen=True)
class Enum:
    name: str
    doc: str
    values: tuple[tuple[str, int], ...] = field(default_factory=tuple)


def F(name: str, type_: str, count: int = 1) -> Field:
    return Field(name, type_, count)


ENUMS = (
    Enum("Priority", "Scheduling class a client asks for at handshake.",
         (("HIGH", 0), ("BEST_EFFORT", 1))),
    Enum("HandshakeStatus", "Server's answer to Hello.",
         (("OK", 0), ("VERSION_MISMATCH", 1), ("QUOTA_UNAVAILABLE", 2), ("SERVER_ERROR", 3))),
)

# Handshake and control messages travel on the unix socket; the rest on the rings.
MESSAGES = (
    Message("Hello", 1, "client -> server over the socket: first record of a connection",
            (F("protocol_version", "u32"), F("pid", "u32"), F("priority", "u32"), F("_pad0", "u32"),
             F("memory_quota", "u64"),  # bytes; 0 = no quota
             F("memory_quota_percent", "f64"),  # of device memory; 0 = unused
             F("program", "u8", 64))),  # argv[0] basename, NUL-padded, for status output
    Message("HelloReply", 2, "server -> client over the socket",
            (F("status", "u32"), F("protocol_version", "u32"), F("client_id", "u64"),
             F("segment_name", "u8", 64),  # NUL-padded POSIX shm name, e.g. /tally-123-1
             F("message", "u8", 192))),    # human-readable error when status != OK
    Message("DeviceInfo", 5, "server -> client over the socket, right after an OK HelloReply: "
            "the device snapshot the client answers attribute/name/UUID queries from",
            (F("driver_version", "i32"), F("cc_major", "i32"), F("cc_minor", "i32"), F("sm_count", "i32"),
             F("pci_domain", "i32"), F("pci_bus", "i32"), F("pci_device", "i32"), F("_pad0", "i32"),
             F("total_memory", "u64"),
             F("name", "u8", 256),        # NUL-padded
             F("uuid", "u8", 16),
             F("attributes", "i32", ATTRIBUTE_SLOTS))),  # indexed by CUdevice_attribute; 0 = unknown
    Message("StatusRequest", 3, "tool -> server over the socket: ask for a status report"),
    Message("StatusReply", 4, "server -> tool over the socket", tail="msgpack-encoded status dictionary"),
    Message("Ping", 16, "client -> server on the request ring: sync no-op, answered by Pong",
            (F("value", "u64"),)),
    Message("Pong", 17, "server -> client on the completion ring", (F("value", "u64"),)),
    Message("Notify", 18, "client -> server on the request ring: async no-op (benchmarks)",
            (F("value", "u64"),)),
    Message("Goodbye", 19, "client -> server: orderly disconnect; server frees everything"),
    Message("Error", 20, "server -> client on the completion ring: the request with this tag failed",
            (F("status", "u32"), F("_pad0", "u32")), tail="UTF-8 explanation"),
)

import subprocess
import sys
from pathlib import Path

import pytest

from tally import protocol
from tally.protocol import messages_generated, spec

ROOT = Path(__file__).resolve().parents[1]


def test_generated_header_and_messages_are_fresh():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_protocol.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_core_module_agrees_on_version():
    from tally import _core
    assert _core.PROTOCOL_VERSION == protocol.PROTOCOL_VERSION
    assert _core.SEGMENT_MAGIC == protocol.SEGMENT_MAGIC


def test_hello_roundtrip():
    c = protocol.codec("Hello")
    raw = c.pack(protocol_version=1, pid=42, priority=protocol.Priority.BEST_EFFORT,
                 memory_quota=1 << 30, program="train.py")
    fields, tail = c.unpack(raw)
    assert fields["pid"] == 42 and fields["memory_quota"] == 1 << 30
    assert protocol.cstr(fields["program"]) == "train.py"
    assert len(tail) == 0


def test_short_payload_is_a_protocol_error():
    with pytest.raises(protocol.ProtocolError, match="need 104"):
        protocol.codec("Hello").unpack(b"\0" * 10)


def test_unexpected_tail_is_rejected():
    with pytest.raises(protocol.ProtocolError, match="unexpected trailing"):
        protocol.codec("Ping").unpack(b"\0" * 16)


def _sample(f: spec.Field, i: int):
    """A value for field f that no other field of the message has."""
    if f.type == "u8" and f.count > 1:
        return bytes([i + 1]) * min(f.count, 3)
    if f.type == "f64":
        return tuple(i + k + 0.5 for k in range(f.count)) if f.count > 1 else i + 0.5
    return tuple(i * 10 + k for k in range(f.count)) if f.count > 1 else i + 1


@pytest.mark.parametrize("message", spec.MESSAGES, ids=lambda m: m.name)
def test_typed_message_and_spec_codec_agree_byte_for_byte(message):
    codec = protocol.codec(message.name)
    values = {f.name: _sample(f, i) for i, f in enumerate(message.fields) if not f.name.startswith("_pad")}
    tail = b"tail bytes" if message.tail is not None else b""
    payload = codec.pack(tail, **values)
    typed = messages_generated.BY_KIND[message.kind].decode(payload)
    assert type(typed).__name__ == message.name and typed.KIND == message.kind
    for name, value in values.items():
        got = getattr(typed, name)
        assert got == (value.ljust(len(got), b"\0") if isinstance(value, bytes) else value), name
    assert bytes(getattr(typed, "tail", b"")) == tail
    assert typed.encode() == payload
    # Padding is ignored when decoded and written as zero.
    pads = {f.name: 7 for f in message.fields if f.name.startswith("_pad")}
    if pads:
        padded = codec.pack(tail, **values, **pads)
        assert padded != payload and messages_generated.BY_KIND[message.kind].decode(padded) == typed


def test_typed_decode_refuses_short_and_overlong_payloads():
    Ping = messages_generated.Ping
    with pytest.raises(protocol.ProtocolError, match="Ping: payload of 2 bytes, need 8"):
        Ping.decode(b"\0\0")
    with pytest.raises(protocol.ProtocolError, match="Ping: 8 unexpected trailing bytes"):
        Ping.decode(b"\0" * 16)
    with pytest.raises(protocol.ProtocolError, match="LaunchKernel: payload of 40 bytes, need 64"):
        messages_generated.LaunchKernel.decode(b"\0" * 40)
    with pytest.raises(protocol.ProtocolError, match="grid: 2 values, need 3"):
        messages_generated.LaunchKernel(grid=(1, 1)).encode()
    with pytest.raises(protocol.ProtocolError, match="program: 65 bytes > 64"):
        messages_generated.Hello(program=b"x" * 65).encode()


def test_priority_names_are_the_command_line_spellings():
    assert [protocol.priority_name(p) for p in protocol.Priority] == ["high", "best-effort"]
    assert protocol.parse_priority("best-effort") is protocol.Priority.BEST_EFFORT
    with pytest.raises(ValueError, match="unknown priority 'low'"):
        protocol.parse_priority("low")

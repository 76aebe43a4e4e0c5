import subprocess
import sys
from pathlib import Path

import pytest

from tally import protocol

ROOT = Path(__file__).resolve().parents[1]


def test_generated_header_is_fresh():
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
    with pytest.raises(protocol.ProtocolError, match="need 96"):
        protocol.codec("Hello").unpack(b"\0" * 10)


def test_unexpected_tail_is_rejected():
    with pytest.raises(protocol.ProtocolError, match="unexpected trailing"):
        protocol.codec("Ping").unpack(b"\0" * 16)

"""The front door under bad input: every Hello field validated, crowds of idle or
dropped connections logged once per cause, stale shared memory reclaimed, and
`tally-server status` behaving in a pipe."""
import math
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tally import protocol
from tally.cli.server_main import query_status
from tally.protocol.framing import recv_record, send_record
from server_harness import PyClient, ServerProcess

HELLO = protocol.codec("Hello")
HELLO_REPLY = protocol.codec("HelloReply")
NULL_DEVICE_MEMORY = 80 << 30     # what the null backend reports


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = ServerProcess(tmp_path_factory.mktemp("admission") / "tally.sock", backend="null")
    yield s
    s.stop()


def hello(socket_path, **fields) -> tuple[int, str]:
    """Send a Hello with these fields; (status, message) of the answer."""
    values = dict(protocol_version=protocol.PROTOCOL_VERSION, pid=os.getpid(),
                  priority=protocol.Priority.BEST_EFFORT, program=b"pytest")
    values.update(fields)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(socket_path))
        send_record(sock, HELLO.kind, HELLO.pack(**values))
        kind, _, payload = recv_record(sock)
        assert kind == HELLO_REPLY.kind
        reply, _ = HELLO_REPLY.unpack(payload)
        return reply["status"], protocol.cstr(reply["message"])


BAD = protocol.HandshakeStatus.BAD_REQUEST


@pytest.mark.parametrize("fields, status, words", [
    (dict(memory_quota_percent=math.inf), BAD, "not a percentage"),
    (dict(memory_quota_percent=math.nan), BAD, "not a percentage"),
    (dict(memory_quota_percent=-5.0), BAD, "not a percentage"),
    (dict(memory_quota_percent=150.0), BAD, "not a percentage"),
    (dict(memory_quota=1 << 30, memory_quota_percent=50.0), BAD, "give one"),
    (dict(memory_quota=NULL_DEVICE_MEMORY + 1), protocol.HandshakeStatus.QUOTA_UNAVAILABLE,
     "more than the device has (80.00 GiB)"),
    (dict(priority=7), BAD, "unknown priority 7"),
    (dict(pid=0), BAD, "not a process id"),
    (dict(sm_percent=math.inf), BAD, "not a percentage of the SMs"),
    (dict(sm_percent=math.nan), BAD, "not a percentage of the SMs"),
    (dict(sm_percent=-25.0), BAD, "not a percentage of the SMs"),
    (dict(sm_percent=150.0), BAD, "not a percentage of the SMs"),
])
def test_each_bad_hello_field_is_refused_with_a_reason(server, fields, status, words):
    got, message = hello(server.socket_path, **fields)
    assert got == status, message
    assert words in message
    assert "Traceback" not in server.log()
    assert PyClient(server.socket_path).status == protocol.HandshakeStatus.OK   # the server carries on


def test_a_quota_percentage_is_a_share_of_the_device(server):
    c = PyClient(server.socket_path, program="quarter")
    c.close()
    status, _ = hello(server.socket_path, memory_quota_percent=25.0)
    assert status == protocol.HandshakeStatus.OK


def test_a_hello_of_the_previous_protocol_is_told_the_versions(server):
    """Version 1's Hello was 8 bytes shorter (no sm_percent): it cannot be decoded as
    today's, and is answered with the version mismatch, not dropped."""
    v1_hello = struct.pack("<IIIIQd64s", 1, os.getpid(), protocol.Priority.BEST_EFFORT, 0, 0, 0.0, b"old")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(server.socket_path))
        send_record(sock, HELLO.kind, v1_hello)
        kind, _, payload = recv_record(sock)
    reply, _ = HELLO_REPLY.unpack(payload)
    assert reply["status"] == protocol.HandshakeStatus.VERSION_MISMATCH
    assert f"client speaks v1, server v{protocol.PROTOCOL_VERSION}" in protocol.cstr(reply["message"])


def test_best_effort_shares_are_the_servers_default_and_never_above_it(tmp_path):
    s = ServerProcess(tmp_path / "shares.sock", backend="null", extra_args=("--be-sm-percent", "40", "--max-hp-jobs", "2"))
    try:
        none_asked = PyClient(s.socket_path, program="none-asked")
        less = PyClient(s.socket_path, program="less", sm_percent=25.0)
        more = PyClient(s.socket_path, program="more", sm_percent=90.0)
        high = PyClient(s.socket_path, priority=protocol.Priority.HIGH, program="online", sm_percent=90.0)
        whole = PyClient(s.socket_path, priority=protocol.Priority.HIGH, program="whole")
        status = query_status(s.socket_path)
        clients = {c["program"]: c for c in status["clients"]}
        # the null device has 132 SMs: 40% of them is 52.8, so 52 SMs (never more than the share)
        assert (clients["none-asked"]["sm_percent"], clients["none-asked"]["sm_granted"]) == (40.0, 52)
        assert (clients["less"]["sm_percent"], clients["less"]["sm_granted"]) == (25.0, 33)
        assert (clients["more"]["sm_percent"], clients["more"]["sm_granted"]) == (40.0, 52)
        assert (clients["online"]["sm_percent"], clients["online"]["sm_granted"]) == (90.0, 118)
        assert (clients["whole"]["sm_percent"], clients["whole"]["sm_granted"]) == (None, 132)
        assert status["server"]["be_sm_percent"] == 40.0 and status["server"]["sm_count"] == 132
        assert "asked for 90% of the SMs; best-effort jobs get at most 40%" in s.log()
        for c in (none_asked, less, more, high, whole):
            c.close()
    finally:
        s.stop()


hello_fields = st.fixed_dictionaries({
    "protocol_version": st.sampled_from([protocol.PROTOCOL_VERSION, 0, 2, 0xFFFFFFFF]),
    "pid": st.integers(0, 0xFFFFFFFF),
    "priority": st.integers(0, 0xFFFFFFFF),
    "memory_quota": st.integers(0, 0xFFFFFFFFFFFFFFFF),
    "memory_quota_percent": st.floats(allow_nan=True, allow_infinity=True),
    "sm_percent": st.floats(allow_nan=True, allow_infinity=True),
    "program": st.binary(max_size=64),
})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fields=hello_fields)
def test_fuzzed_hellos_are_answered_and_never_crash_the_handshake(server, fields):
    status, message = hello(server.socket_path, **fields)
    assert status in set(protocol.HandshakeStatus)
    if status != protocol.HandshakeStatus.OK:
        assert message, "a refusal must say why"
    assert "Traceback" not in server.log()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.integers(0, 0xFFFFFFFF), body=st.binary(max_size=200))
def test_fuzzed_first_records_are_dropped_quietly(server, kind, body):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(server.socket_path))
        sock.sendall(struct.pack("<IIQ", kind, len(body), 0) + body)
        sock.shutdown(socket.SHUT_WR)
        try:
            while sock.recv(4096):
                pass
        except OSError:
            pass
    assert "Traceback" not in server.log()
    assert query_status(server.socket_path)["server"]["pid"] == server.proc.pid


def test_crowds_of_idle_and_dropped_connections_log_once_per_cause(tmp_path):
    s = ServerProcess(tmp_path / "crowd.sock", backend="null")
    try:
        idle = []
        for _ in range(40):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(str(s.socket_path))
            idle.append(sock)
        for _ in range(40):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.connect(str(s.socket_path))
                sock.sendall(b"\x01\x00")      # half a record header, then gone
        deadline = time.time() + 30
        while time.time() < deadline:
            dropped = query_status(s.socket_path)["server"]["dropped_connections"]
            if dropped.get("sent nothing in time", 0) == 40 and dropped.get("connection lost", 0) == 40:
                break
            time.sleep(0.2)
        assert dropped == {"sent nothing in time": 40, "connection lost": 40}
        for sock in idle:
            sock.close()
        warnings = [line for line in s.log().splitlines() if "WARNING" in line]
        assert len(warnings) == 2, warnings
    finally:
        s.stop()


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_new_server_reclaims_what_a_killed_one_left_and_spares_the_living(tmp_path):
    first = ServerProcess(tmp_path / "first.sock", backend="null")
    jobs = [PyClient(first.socket_path, program=f"job{i}") for i in range(2)]   # attached, names kept
    names = [j.segment.name for j in jobs]
    assert all(os.path.exists("/dev/shm" + n) for n in names)
    first.stop(signal.SIGKILL)
    dead = _dead_pid()
    stale_pin = Path(f"/dev/shm/tally-pin-{dead}-3")
    stale_pin.write_bytes(b"x")
    live = Path(f"/dev/shm/tally-{os.getpid()}-999")      # this process is alive: never touched
    live.write_bytes(b"x")
    try:
        second = ServerProcess(tmp_path / "second.sock", backend="null")
        try:
            left = [n for n in os.listdir("/dev/shm") if n.startswith(f"tally-{first.proc.pid}-")]
            assert left == []
            assert not stale_pin.exists()
            assert live.exists()
        finally:
            second.stop()
    finally:
        live.unlink(missing_ok=True)
        for j in jobs:
            j.close()


def test_reclaiming_takes_exactly_the_names_of_dead_tally_processes(tmp_path, caplog):
    # (On a private directory: another tally-server starting on this machine may reclaim
    # /dev/shm names at any moment.)
    from tally.server.segments import reclaim_stale
    dead, alive = _dead_pid(), os.getpid()
    names = [f"tally-{dead}-1", f"tally-pin-{dead}-7", f"tally-{alive}-2", f"tally-pin-{alive}-3",
             "tally-notapid-1", f"other-{dead}-1"]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    with caplog.at_level("INFO", logger="tally.server"):
        reclaimed = reclaim_stale(tmp_path)
    assert sorted(reclaimed) == sorted(names[:2])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[2:])
    assert "left by tally processes that no longer run" in caplog.text


def test_status_into_a_closed_pipe_exits_quietly(server):
    read_end, write_end = os.pipe()
    os.close(read_end)                      # like `| head` that already quit
    r = subprocess.run([sys.executable, "-m", "tally.cli.server_main", "status", "--socket", str(server.socket_path)],
                       stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=30)
    os.close(write_end)
    assert r.returncode == 0
    assert r.stderr == ""

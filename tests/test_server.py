"""tally-server as a process: handshake, requests over the rings, status, death of clients."""
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tally import protocol
from tally.cli.server_main import format_status, query_status
from tally.server.status import ServerStatus
from server_harness import PyClient, ServerProcess


@pytest.fixture
def server(tmp_path):
    s = ServerProcess(tmp_path / "tally.sock", backend="null")
    yield s
    s.stop()


def wait_until(predicate, timeout=10.0, interval=0.02):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


@contextlib.contextmanager
def in_process_server(config):
    """A TallyServer on the null backend serving on a thread of this process (for
    tests that reach into its sessions); yields it and that thread."""
    from tally.backends.null import NullBackend
    from tally.server.server import TallyServer

    server = TallyServer(config, NullBackend())
    server.bind()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, thread
    finally:
        server.stop()
        thread.join(10)


def test_ping_round_trip_and_device_snapshot(server):
    c = PyClient(server.socket_path)
    assert c.status == protocol.HandshakeStatus.OK
    assert protocol.cstr(c.device["name"]) == "tally null device"
    assert c.device["attributes"][10] == 32  # CU_DEVICE_ATTRIBUTE_WARP_SIZE
    name, fields, _ = c.call("Ping", value=1234)
    assert (name, fields["value"]) == ("Pong", 1234)
    c.close()


def test_version_mismatch_is_a_clear_error(server):
    c = PyClient(server.socket_path, version=protocol.PROTOCOL_VERSION + 7)
    assert c.status == protocol.HandshakeStatus.VERSION_MISMATCH
    assert "protocol version mismatch" in c.message
    assert f"v{protocol.PROTOCOL_VERSION + 7}" in c.message


def test_unknown_and_malformed_requests_get_errors_and_the_session_goes_on(server):
    c = PyClient(server.socket_path)
    c._tag += 1
    c.segment.request_ring.push(9999, c._tag, b"junk")
    kind, tag, payload = c.segment.completion_ring.pop(5)
    fields, tail = protocol.codec("Error").unpack(payload)
    assert kind == protocol.codec("Error").kind and tag == c._tag
    assert "unknown message kind 9999" in bytes(tail).decode()
    c._tag += 1
    c.segment.request_ring.push(protocol.codec("Ping").kind, c._tag, b"\x01\x02")  # short payload
    kind, tag, payload = c.segment.completion_ring.pop(5)
    assert kind == protocol.codec("Error").kind
    assert "need 8" in bytes(protocol.codec("Error").unpack(payload)[1]).decode()
    assert c.call("Ping", value=7)[1]["value"] == 7
    c.close()


def test_status_lists_clients_with_priority_and_counters(server):
    hp = PyClient(server.socket_path, priority=protocol.Priority.HIGH, program="infer")
    be = PyClient(server.socket_path, priority=protocol.Priority.BEST_EFFORT, quota=1 << 30, program="train")
    for i in range(5):
        be.call("Ping", value=i)
    status = query_status(server.socket_path)
    clients = {c["program"]: c for c in status["clients"]}
    assert clients["infer"]["priority"] == "high"
    assert clients["train"]["priority"] == "best-effort"
    assert clients["train"]["memory_quota"] == 1 << 30
    assert clients["train"]["requests_by_kind"]["Ping"] == 5
    out = subprocess.run([sys.executable, "-m", "tally.cli.server_main", "status", "--socket",
                          str(server.socket_path)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "infer" in out.stdout and "best-effort" in out.stdout
    hp.close()
    be.close()


def test_status_record_reads_back_the_json_it_was_sent_as(server):
    be = PyClient(server.socket_path, priority=protocol.Priority.BEST_EFFORT, quota=1 << 30, program="train")
    assert be.call("MemAlloc", bytes=4096)[0] == "MemAllocReply"
    status = query_status(server.socket_path)
    # The keys tools, tests and the cluster layer read.
    assert list(status) == ["server", "clients"]
    assert list(status["server"]) == [
        "pid", "socket", "backend", "device", "device_name", "compute_capability", "driver_version", "policy",
        "be_transform", "graph_replay", "scheduler", "uptime_s", "memory_free", "memory_total", "protocol_version",
        "dropped_connections", "clients_leaving", "be_sm_percent", "dynamic_sm", "be_util_target", "sm_count",
        "levers", "be_memory_quota_bytes", "hp_memory_reserve_bytes", "max_hp_jobs", "evictions",
        "health", "shutting_down", "device_faults", "last_device_fault", "mobility", "data_plane",
        "host_memory"]
    assert list(status["clients"][0]) == [
        "client_id", "pid", "program", "priority", "connected_s", "memory_used", "memory_peak", "memory_quota",
        "allocations", "requests", "sync_requests", "errors", "protocol_errors", "requests_by_kind",
        "sm_percent", "sm_granted", "memory_quota_bytes", "state", "suspended_bytes", "evicted", "requests_in_cpp",
        "segment_owner", "ptx_sources"]
    assert status["clients"][0]["ptx_sources"] == {"modules": {"image": 0, "jit": 0, "none": 0},
                                                   "kernels": {"image": 0, "jit": 0, "none": 0},
                                                   "jit_records_refused": 0}
    record = ServerStatus.from_json(status)
    assert record.to_json() == status
    (client,) = record.clients
    assert client.priority is protocol.Priority.BEST_EFFORT
    assert (client.program, client.memory_used, client.memory_quota, client.allocations) == ("train", 4096, 1 << 30, 1)
    assert client.requests_by_kind == {"MemAlloc": 1}
    assert record.backend == "null" and record.memory_total - record.memory_free == 4096
    table = format_status(record)
    assert "best-effort" in table and "train" in table and f"socket {server.socket_path}" in table
    be.close()


def test_closed_client_is_forgotten_and_its_segment_removed(server):
    c = PyClient(server.socket_path)
    seg_name = c.segment.name
    c.close()
    assert not query_status(server.socket_path)["clients"]    # gone from status at once
    assert wait_until(lambda: not os.path.exists("/dev/shm" + seg_name))


def _server_maps(pid: int, segment_name: str) -> bool:
    paths = {f"/dev/shm{segment_name}", f"/dev/shm{segment_name} (deleted)"}
    with open(f"/proc/{pid}/maps") as f:
        return any(line.rstrip("\n").split(None, 5)[-1] in paths for line in f)


def test_a_closed_clients_segment_is_unmapped_from_the_server_at_once(server):
    """Not when Python's garbage collector gets to the closed session (reference
    cycles keep it): the chaos campaign's server kept dead jobs' segments mapped,
    megabytes of RSS each, until a full collection."""
    c = PyClient(server.socket_path)
    assert c.call("Ping", value=1)[0] == "Pong"
    name = c.segment.name
    assert _server_maps(server.proc.pid, name)
    c.close()
    assert wait_until(lambda: not query_status(server.socket_path)["clients"])
    assert wait_until(lambda: not _server_maps(server.proc.pid, name), timeout=5)


CHILD = r"""
import sys, time
sys.path.insert(0, {tests!r})
from server_harness import PyClient
c = PyClient({sock!r}, program="victim")
print(c.segment.name, flush=True)
while True:
    c.send("Notify", value=1)
"""


def test_sigkilled_client_leaves_the_server_serving_others(server, tmp_path):
    survivor = PyClient(server.socket_path, program="survivor")
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(tests=os.path.dirname(__file__),
                                                                  sock=str(server.socket_path))],
                             stdout=subprocess.PIPE, text=True)
    seg_name = child.stdout.readline().strip()
    assert seg_name.startswith("/tally-")
    assert wait_until(lambda: any(c["program"] == "victim" and c["requests"] > 100
                                  for c in query_status(server.socket_path)["clients"]))
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert wait_until(lambda: [c["program"] for c in query_status(server.socket_path)["clients"]] == ["survivor"])
    assert wait_until(lambda: not os.path.exists("/dev/shm" + seg_name))
    assert survivor.call("Ping", value=99)[1]["value"] == 99
    survivor.close()


def test_sigterm_shuts_down_cleanly_and_removes_segments(tmp_path):
    s = ServerProcess(tmp_path / "t.sock", backend="null")
    c = PyClient(s.socket_path)
    seg_name = c.segment.name
    assert s.stop(signal.SIGTERM) == 0
    assert not s.socket_path.exists()
    assert wait_until(lambda: not os.path.exists("/dev/shm" + seg_name))
    assert "stopped" in s.log()
    c.close()


def test_second_server_on_the_same_socket_is_refused(server):
    r = subprocess.run([sys.executable, "-m", "tally.cli.server_main", "--backend", "null", "--socket",
                        str(server.socket_path)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "already listening" in r.stderr


def test_a_segment_the_server_cannot_create_is_a_clear_refusal(tmp_path):
    from tally.server.server_config import SegmentSizes, ServerConfig

    # 3-byte rings cannot be made (capacities are powers of two); the same path
    # answers a full /dev/shm.
    config = ServerConfig(socket_path=tmp_path / "bad.sock", segment_sizes=SegmentSizes(request=3))
    with in_process_server(config):
        c = PyClient(config.socket_path)
        assert c.status == protocol.HandshakeStatus.SERVER_ERROR
        assert "cannot create this job's shared memory" in c.message
        c.close()
        ok = PyClient(config.socket_path, version=protocol.PROTOCOL_VERSION + 1)   # still answering
        assert ok.status == protocol.HandshakeStatus.VERSION_MISMATCH


def test_a_handshake_finishing_after_shutdown_is_refused_and_leaves_nothing(tmp_path):
    import socket

    from tally.protocol.framing import recv_record, send_record
    from tally.server.server_config import ServerConfig

    config = ServerConfig(socket_path=tmp_path / "late.sock")
    with in_process_server(config) as (server, thread):
        late = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        late.settimeout(10)
        late.connect(str(config.socket_path))
        time.sleep(0.3)                     # accepted: its handshake thread waits for Hello
    assert not thread.is_alive()
    hello = protocol.codec("Hello")
    send_record(late, hello.kind, hello.pack(protocol_version=protocol.PROTOCOL_VERSION, pid=os.getpid(),
                                             priority=protocol.Priority.HIGH, program="late"))
    try:
        _kind, _tag, payload = recv_record(late)
        reply, _ = protocol.codec("HelloReply").unpack(payload)
        status = protocol.HandshakeStatus(reply["status"])
        segment = protocol.cstr(reply["segment_name"])
    except ConnectionError:
        status, segment = None, ""           # dropped without an answer: also a refusal
    late.close()
    assert status != protocol.HandshakeStatus.OK
    assert server.sessions == {}
    assert wait_until(lambda: not any(n.startswith(f"tally-{os.getpid()}-") for n in os.listdir("/dev/shm"))), \
        f"segment {segment} left behind"


def test_a_second_close_returns_once_the_first_has_released_everything(tmp_path):
    """The job leaves and its own thread closes its session; the server's exit then
    closes it too and must not go on (closing the backend, ending the interpreter)
    while that first close is still releasing: it once did, and the process aborted
    with the job's thread inside C++. A close() from within the first one (a cleanup
    that asks again) returns at once."""
    from tally.server.server_config import ServerConfig

    config = ServerConfig(socket_path=tmp_path / "close.sock")
    with in_process_server(config) as (server, _thread):
        client = PyClient(config.socket_path)
        assert client.status == protocol.HandshakeStatus.OK
        session = next(iter(server.sessions.values()))
        released = threading.Event()
        cleanup_started = threading.Event()

        def slow_cleanup():
            cleanup_started.set()
            session.close()                 # from within the first close: returns at once
            time.sleep(0.5)
            released.set()

        session.add_cleanup(slow_cleanup)
        client.close()                      # the session's own thread closes it
        assert cleanup_started.wait(10)
        started = time.monotonic()
        session.close()                     # as the server's exit does
        assert released.is_set() and time.monotonic() - started < 10
        assert server.sessions == {}

        # The first close on another thread than the job's (as at the server's exit),
        # with a cleanup that asks again: that second ask does not wait for itself.
        client = PyClient(config.socket_path)
        session = next(iter(server.sessions.values()))
        again = []
        session.add_cleanup(lambda: again.append(session.close()))
        started = time.monotonic()
        session.request_close("the test")
        session.close()
        assert again == [None] and time.monotonic() - started < 10
        client.close()

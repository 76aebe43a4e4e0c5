"""The client's connection: handshake, environment, device snapshot, requests and
replies through the shared segment, and what happens when the server is missing,
refuses the job, or dies."""
from __future__ import annotations

import glob
import os
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tally import protocol
from tally.backends.device_attributes import synthetic_attributes
from tally.backends.null import NullBackend
from tally.protocol.framing import recv_record, send_record
from client_helpers import (LIB_DIR, CLIENT_LIBRARY, build_c, null_server, run_client,  # noqa: F401
                                 shared_null_server)

CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_DEVICE_UNAVAILABLE = 46
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_INVALID_DEVICE = 101


def tally_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("tally: ")]


def test_missing_server_fails_init_with_one_clear_line():
    run = run_client(build_c("connection.c"), "init", server="/nonexistent/tally-test/s.sock")
    assert run.returncode == 0
    assert run.value("init") == str(CUDA_ERROR_NO_DEVICE)
    assert run.value("init_again") == str(CUDA_ERROR_NO_DEVICE)
    assert run.value("count_rc") == f"{CUDA_ERROR_NO_DEVICE} count=-1"
    lines = tally_lines(run.stderr)
    assert len(lines) == 1, run.stderr
    assert "no tally-server answers at /nonexistent/tally-test/s.sock" in lines[0]
    assert "tally-server --socket /nonexistent/tally-test/s.sock" in lines[0]
    assert "tally-run --server" in lines[0]


def test_default_socket_follows_xdg_runtime_dir():
    with tempfile.TemporaryDirectory() as xdg:
        run = run_client(build_c("connection.c"), "init", env={"XDG_RUNTIME_DIR": xdg, "TALLY_SERVER": ""})
    assert f"no tally-server answers at {xdg}/tally/server.sock" in run.stderr


class RefusingServer:
    """Answers one Hello with a refusal and keeps what the client sent."""

    def __init__(self, status: int, message: str):
        self.dir = tempfile.mkdtemp(prefix="tally-fake-")
        self.path = os.path.join(self.dir, "s.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(1)
        self.listener.settimeout(30)
        self.hello = None
        self.status, self.message = status, message
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        conn, _ = self.listener.accept()
        with conn:
            kind, tag, payload = recv_record(conn)
            assert kind == protocol.codec("Hello").kind
            self.hello, _ = protocol.codec("Hello").unpack(payload)
            reply = protocol.codec("HelloReply")
            send_record(conn, reply.kind, reply.pack(status=self.status, protocol_version=protocol.PROTOCOL_VERSION,
                                                     message=self.message.encode()))

    def close(self):
        self.thread.join(timeout=30)
        self.listener.close()
        os.unlink(self.path)
        os.rmdir(self.dir)


@pytest.mark.parametrize("env, priority, quota_bytes, quota_percent", [
    ({}, protocol.Priority.BEST_EFFORT, 0, 0.0),
    ({"TALLY_PRIORITY": "high", "TALLY_MEMORY_QUOTA": "1073741824"}, protocol.Priority.HIGH, 1 << 30, 0.0),
    ({"TALLY_PRIORITY": "best-effort", "TALLY_MEMORY_QUOTA": "37.5%"}, protocol.Priority.BEST_EFFORT, 0, 37.5),
])
def test_hello_carries_the_environment_and_a_refusal_is_reported(env, priority, quota_bytes, quota_percent):
    fake = RefusingServer(protocol.HandshakeStatus.QUOTA_UNAVAILABLE, "only 2 GiB left; ask for less")
    try:
        prog = build_c("connection.c")
        run = run_client(prog, "init", server=fake.path, env=env)
    finally:
        fake.close()
    hello = fake.hello
    assert hello["protocol_version"] == protocol.PROTOCOL_VERSION
    assert hello["priority"] == priority
    assert hello["memory_quota"] == quota_bytes
    assert hello["memory_quota_percent"] == quota_percent
    assert protocol.cstr(hello["program"]) == prog.name  # argv[0] basename
    assert hello["pid"] > 0
    assert run.value("init") == str(CUDA_ERROR_NO_DEVICE)
    lines = tally_lines(run.stderr)
    assert len(lines) == 1 and "refused this job" in lines[0] and "only 2 GiB left; ask for less" in lines[0]


@pytest.mark.parametrize("env, share", [
    ({}, 0.0),
    ({"TALLY_SM_PERCENT": "25"}, 25.0),
    ({"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "40"}, 40.0),          # a job set up for MPS keeps its share
    ({"TALLY_SM_PERCENT": "12.5", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "40"}, 12.5),   # tally-run's wins
    ({"TALLY_SM_PERCENT": "", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100"}, 100.0),
])
def test_hello_carries_the_jobs_sm_share(env, share):
    fake = RefusingServer(protocol.HandshakeStatus.QUOTA_UNAVAILABLE, "refused")
    try:
        run_client(build_c("connection.c"), "init", server=fake.path, env=env)
    finally:
        fake.close()
    assert fake.hello["sm_percent"] == share


@pytest.mark.parametrize("env, mentions", [
    ({"TALLY_PRIORITY": "urgent"}, "TALLY_PRIORITY='urgent'"),
    ({"TALLY_SM_PERCENT": "0"}, "TALLY_SM_PERCENT='0'"),
    ({"TALLY_SM_PERCENT": "101"}, "TALLY_SM_PERCENT='101'"),
    ({"TALLY_SM_PERCENT": "25%"}, "TALLY_SM_PERCENT='25%'"),
    ({"TALLY_SM_PERCENT": "nan"}, "TALLY_SM_PERCENT='nan'"),
    ({"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "-3"}, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE='-3'"),
    ({"TALLY_MEMORY_QUOTA": "lots"}, "TALLY_MEMORY_QUOTA='lots'"),
    ({"TALLY_MEMORY_QUOTA": "0"}, "TALLY_MEMORY_QUOTA='0'"),
    ({"TALLY_MEMORY_QUOTA": "-5"}, "TALLY_MEMORY_QUOTA='-5'"),
    ({"TALLY_MEMORY_QUOTA": "150%"}, "TALLY_MEMORY_QUOTA='150%'"),
    ({"TALLY_MEMORY_QUOTA": "12x%"}, "TALLY_MEMORY_QUOTA='12x%'"),
])
def test_bad_environment_is_refused_before_connecting(env, mentions, shared_null_server):
    run = run_client(build_c("connection.c"), "init", server=shared_null_server.socket, env=env)
    assert run.value("init") == str(CUDA_ERROR_NO_DEVICE)
    lines = tally_lines(run.stderr)
    assert len(lines) == 1 and mentions in lines[0], run.stderr
    assert "tally-run" in lines[0]


def test_device_queries_answer_from_the_server_snapshot(shared_null_server):
    run = run_client(build_c("connection.c"), "devices", server=shared_null_server.socket)
    assert run.returncode == 0, run.stderr
    described = NullBackend().describe()
    assert run.value("before_init") == str(CUDA_ERROR_NOT_INITIALIZED)
    assert run.value("init") == "0"
    assert run.value("count") == "1"
    assert run.value("get_rc") == "0 dev=0"
    assert run.value("get_bad") == str(CUDA_ERROR_INVALID_DEVICE)
    assert run.value("name") == described.name
    assert run.value("name5") == described.name[:4]
    assert bytes.fromhex(run.value("uuid")) == described.uuid
    assert int(run.value("total")) == described.total_memory
    assert run.value("cc") == "%d.%d" % described.compute_capability
    assert run.value("pci_rc") == "0"
    assert run.value("pci") == "%04x:%02x:%02x.0" % (described.pci_domain, described.pci_bus, described.pci_device)
    assert run.value("by_bus_rc") == "0 dev=0"
    reported = {int(a): int(v) for a, v in (line.split() for line in run.lines("attr="))}
    expected = synthetic_attributes(described.compute_capability, described.sm_count)
    for attr, value in expected.items():
        assert reported[attr] == value, attr
    assert all(v == 0 for a, v in reported.items() if a not in expected)
    assert run.value("attr_bad") == str(CUDA_ERROR_INVALID_VALUE)
    assert run.value("attr_bad_dev") == str(CUDA_ERROR_INVALID_DEVICE)
    assert run.value("retain") == "0" and run.value("set_current") == "0"
    assert run.value("current_is_primary") == "1"
    assert run.value("ctx_device") == "0 dev=0"
    assert run.value("release") == "0"
    assert run.value("release_again") == "201"  # CUDA_ERROR_INVALID_CONTEXT: not retained any more


def test_synchronous_round_trips(shared_null_server):
    run = run_client(build_c("connection.c"), "ping", 200, server=shared_null_server.socket)
    assert run.value("ping") == "0 ok=200"


def test_replies_reach_the_thread_that_asked(shared_null_server):
    run = run_client(build_c("connection.c"), "threads", 8, 200, server=shared_null_server.socket, trace=False)
    assert run.value("threads_ok") == str(8 * 200), run.stderr


def test_asynchronous_requests_are_not_answered_and_keep_order(shared_null_server):
    run = run_client(build_c("connection.c"), "notify", 5000, server=shared_null_server.socket)
    assert run.value("notify_failed") == "0"
    assert run.value("ping_after") == "1"


def test_forked_child_cannot_use_the_parents_connection(shared_null_server):
    run = run_client(build_c("connection.c"), "fork", server=shared_null_server.socket)
    assert run.value("init") == "0"
    child = run.value("child_init")
    assert child == f"{CUDA_ERROR_NOT_INITIALIZED} child_ping={CUDA_ERROR_NOT_INITIALIZED} " \
                    f"child_count={CUDA_ERROR_NOT_INITIALIZED}"
    assert run.value("parent_ping") == "0"


def test_server_sees_the_job_leave_although_its_forked_child_lives_on(null_server):
    prog = build_c("connection.c")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}
    env.update(LD_LIBRARY_PATH=str(LIB_DIR), LD_PRELOAD=str(CLIENT_LIBRARY), TALLY_SERVER=null_server.socket)
    # The parent exits at once; its child keeps running for 5 s.
    proc = subprocess.Popen([str(prog), "fork", "5"], env=env, stdout=subprocess.PIPE, text=True)
    out = proc.stdout.readline() + proc.stdout.readline()
    assert "init=0" in out
    deadline = time.monotonic() + 4
    clients = None
    while time.monotonic() < deadline:
        clients = null_server.status()["clients"]
        if not clients:
            break
        time.sleep(0.05)
    assert clients == [], "the server still lists the job: the forked child kept its socket open"
    proc.wait(timeout=30)


def test_server_death_fails_later_calls_without_killing_the_job(null_server):
    prog = build_c("connection.c")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}
    env.update(LD_LIBRARY_PATH=str(LIB_DIR), LD_PRELOAD=str(CLIENT_LIBRARY), TALLY_SERVER=null_server.socket)
    proc = subprocess.Popen([str(prog), "ping-until-failure"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "init=0"
    assert proc.stdout.readline().strip() == "first_ping_ok"
    server_pid = null_server.proc.pid
    null_server.kill()
    out, err = proc.communicate(timeout=60)
    # A SIGKILLed server cannot remove its segments; do it for it.
    for leftover in glob.glob(f"/dev/shm/tally-{server_pid}-*"):
        Path(leftover).unlink()
    assert proc.returncode == 0
    assert f"failed={CUDA_ERROR_DEVICE_UNAVAILABLE}" in out
    assert f"again={CUDA_ERROR_DEVICE_UNAVAILABLE}" in out
    assert f"count_after={CUDA_ERROR_DEVICE_UNAVAILABLE}" in out
    lines = tally_lines(err)
    assert len(lines) == 1 and "lost tally-server" in lines[0], err

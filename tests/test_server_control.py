"""Operator control of running jobs over the server's socket (tally-server set,
pause, resume; tally/server/control.py), against a server on the null backend
with the protocol's own client as the job: what each command changes and
prints, and every bad input refused with its reason while the server and its
jobs carry on."""
from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from server_harness import PyClient, ServerProcess
from tally import protocol
from tally.cli.server_main import query_status
from tally.protocol.framing import recv_record, send_record
from tally.protocol.messages_generated import ClientPause, ClientSet, ControlReply

MIB = 1 << 20


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = ServerProcess(tmp_path_factory.mktemp("control") / "tally.sock", backend="null")
    yield s
    s.stop()


def tally_server(server, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tally.cli.server_main", *args, "--socket", str(server.socket_path)],
                          capture_output=True, text=True, timeout=60)


def client(server, client_id: int) -> dict:
    """The client's status (it is listed a moment after its handshake is answered)."""
    deadline = time.monotonic() + 10
    while True:
        found = [c for c in query_status(server.socket_path)["clients"] if c["client_id"] == client_id]
        if found or time.monotonic() > deadline:
            (status,) = found
            return status
        time.sleep(0.02)


def test_set_memory_quota_changes_the_limit_of_future_allocations(server):
    job = PyClient(server.socket_path, program="train")
    cid = job.reply["client_id"]
    assert job.call("MemAlloc", bytes=3 * MIB)[0] == "MemAllocReply"
    r = tally_server(server, "set", "--client", str(cid), "--memory-quota", "4M")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"client {cid} (train, best-effort): memory quota none -> 4.00 MiB"
    assert client(server, cid)["memory_quota_bytes"] == 4 * MIB
    assert job.call("MemGetInfo")[1] == {"free": MIB, "total": 4 * MIB}
    name, _, why = job.call("MemAlloc", bytes=2 * MIB)
    assert name == "Error" and "this job's memory quota is 4.00 MiB, 3.00 MiB in use" in why.decode()
    # below what it holds: refused, nothing changes
    r = tally_server(server, "set", "--client", str(cid), "--memory-quota", "2M")
    assert r.returncode == 2
    assert r.stderr.strip() == (f"tally-server set: client {cid} (train, best-effort): memory quota 2.00 MiB refused: "
                                f"the job holds 3.00 MiB already, more than 2.00 MiB; give at least that (tally "
                                f"cannot take memory back from a running job)")
    assert client(server, cid)["memory_quota_bytes"] == 4 * MIB
    # a percentage of device memory (the null backend's 80 GiB)
    r = tally_server(server, "set", "--client", str(cid), "--memory-quota", "1%")
    assert r.returncode == 0 and "memory quota 4.00 MiB -> 819.20 MiB" in r.stdout
    assert job.call("MemAlloc", bytes=2 * MIB)[0] == "MemAllocReply"
    job.close()


def test_pause_and_resume_show_in_status_and_say_what_changed(server):
    job = PyClient(server.socket_path, program="train")
    cid = job.reply["client_id"]
    r = tally_server(server, "pause", "--client", str(cid))
    assert r.returncode == 0 and r.stdout.startswith(f"client {cid} (train, best-effort) paused")
    assert client(server, cid)["state"] == "paused"
    assert "paused already; nothing changed" in tally_server(server, "pause", "--client", str(cid)).stdout
    table = tally_server(server, "status").stdout
    assert "paused" in table and "memory reserved for them 0 B" in table
    r = tally_server(server, "resume", "--client", str(cid))
    assert r.returncode == 0 and r.stdout.strip() == f"client {cid} (train, best-effort) resumed"
    assert client(server, cid)["state"] == "running"
    assert "not paused; nothing changed" in tally_server(server, "resume", "--client", str(cid)).stdout
    job.close()


def test_a_high_priority_job_is_paused_only_with_force(server):
    job = PyClient(server.socket_path, priority=protocol.Priority.HIGH, program="serve")
    cid = job.reply["client_id"]
    r = tally_server(server, "pause", "--client", str(cid))
    assert r.returncode == 2 and "is a high-priority job, the one tally protects" in r.stderr and "--force" in r.stderr
    assert client(server, cid)["state"] == "running"
    assert tally_server(server, "pause", "--client", str(cid), "--force").returncode == 0
    assert client(server, cid)["state"] == "paused"
    assert tally_server(server, "resume", "--client", str(cid)).returncode == 0
    job.close()


def test_set_sm_percent_changes_the_share(server):
    job = PyClient(server.socket_path, program="train")
    cid = job.reply["client_id"]
    try:
        r = tally_server(server, "set", "--client", str(cid), "--sm-percent", "25")
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(f"client {cid} (train, best-effort): SM share 25%")
        assert (client(server, cid)["sm_percent"], client(server, cid)["sm_granted"]) == (25.0, 33)  # of 132
    finally:
        job.close()


@pytest.mark.parametrize("command, words", [
    (("set", "--client", "999", "--memory-quota", "1G"), "no client 999 is attached (attached now: "),
    (("pause", "--client", "999"), "no client 999 is attached"),
    (("resume", "--client", "999"), "no client 999 is attached"),
    (("set", "--client", "ID"), "nothing to set: give --sm-percent and/or --memory-quota"),
    (("set", "--client", "abc", "--memory-quota", "1G"), "'abc' is not a client id"),
    (("pause", "--client", "0"), "'0' is not a client id"),
    (("resume",), "the following arguments are required: --client"),
    (("set", "--client", "ID", "--memory-quota", "40"), "has no unit: write 40B for bytes"),
    (("set", "--client", "ID", "--memory-quota", "200%"), "a percentage must be in (0, 100]"),
    (("set", "--client", "ID", "--memory-quota", "100G"), "memory quota 100.00 GiB is more than the device has"),
    (("set", "--client", "ID", "--sm-percent", "0"), "'0' is not a percentage in (0, 100]"),
    (("set", "--client", "ID", "--sm-percent", "nan"), "'nan' is not a percentage in (0, 100]"),
    (("set", "--client", "ID", "--sm-percent", "150"), "'150' is not a percentage in (0, 100]"),
])
def test_bad_requests_are_refused_with_the_reason_and_change_nothing(server, command, words):
    job = PyClient(server.socket_path, program="bystander")
    before = client(server, job.reply["client_id"])
    r = tally_server(server, *(str(job.reply["client_id"]) if arg == "ID" else arg for arg in command))
    assert r.returncode == 2 and words in r.stderr, r.stderr
    after = client(server, job.reply["client_id"])
    assert (after["memory_quota_bytes"], after["state"]) == (before["memory_quota_bytes"], before["state"])
    assert job.call("Ping", value=5)[1]["value"] == 5
    job.close()


def test_no_server_is_exit_status_1_with_how_to_start_one(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tally.cli.server_main", "pause", "--client", "1", "--socket",
                        str(tmp_path / "none.sock")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "no tally-server answers on" in r.stderr and "Start one with" in r.stderr


def test_a_malformed_control_request_is_answered_and_the_server_carries_on(server):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(server.socket_path))
        send_record(sock, ClientPause.KIND, b"\x01\x02")            # too short for a ClientPause
        kind, _, payload = recv_record(sock)
    reply = ControlReply.decode(payload)
    assert kind == ControlReply.KIND and reply.ok == 0 and "ClientPause" in bytes(reply.tail).decode()
    assert query_status(server.socket_path)["server"]["backend"] == "null"


@pytest.mark.parametrize("fields, words", [
    (dict(memory_quota=1 << 30, memory_quota_percent=10.0), "give one"),
    (dict(memory_quota_percent=float("inf")), "memory quota inf% is not a percentage in (0, 100]"),
    (dict(memory_quota_percent=-1.0), "memory quota -1.0% is not a percentage"),
    (dict(sm_percent=float("nan")), "SM share nan% is not a percentage in (0, 100]"),
    (dict(sm_percent=101.0), "SM share 101.0% is not a percentage"),
])
def test_the_server_checks_set_requests_itself(server, fields, words):
    """What a tool other than tally-server's command line may send."""
    job = PyClient(server.socket_path, program="target")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(server.socket_path))
        send_record(sock, ClientSet.KIND, ClientSet(client_id=job.reply["client_id"], **fields).encode())
        _, _, payload = recv_record(sock)
    reply = ControlReply.decode(payload)
    assert reply.ok == 0 and words in bytes(reply.tail).decode()
    assert client(server, job.reply["client_id"])["memory_quota_bytes"] is None
    job.close()

"""The server's admission of jobs under its memory flags and its high-priority
job count (tally/cluster/memory_limits.py, high_priority_jobs.py), through its
socket with the protocol's own client, on the null backend; and the flags' bad
values."""
from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from server_harness import PyClient, ServerProcess
from tally import protocol
from tally.cli.server_main import query_status
from tally.cluster.high_priority_jobs import AttachedJob, HighPriorityJobs, refusal
from tally.scheduler.hooks import AdmissionRequest, Code

MIB, GIB = 1 << 20, 1 << 30
NULL_DEVICE = 80 * GIB
HIGH, BEST_EFFORT = protocol.Priority.HIGH, protocol.Priority.BEST_EFFORT
QUOTA_UNAVAILABLE = protocol.HandshakeStatus.QUOTA_UNAVAILABLE
HP_REQUEST = AdmissionRequest(pid=1, program="serve", high_priority=True, memory_quota_bytes=None, sm_percent=None)


def wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_the_plugin_counts_attached_high_priority_jobs_only():
    attached: list[AttachedJob] = []
    plugin = HighPriorityJobs(2, lambda: attached)
    assert plugin.admit(HP_REQUEST).allowed
    attached += [AttachedJob(3, 100, "serve"), AttachedJob(4, 101, "serve-b")]
    status = plugin.admit(HP_REQUEST)
    assert status.code is Code.DENY
    assert status.reason == ("this server allows 2 high-priority jobs and runs client 3 (pid 100, serve) and 1 more; "
                             "run this job as --priority best-effort or raise tally-server --max-hp-jobs")
    best_effort = AdmissionRequest(pid=1, program="train", high_priority=False, memory_quota_bytes=None,
                                   sm_percent=None)
    assert plugin.admit(best_effort).allowed
    with pytest.raises(ValueError, match="at least 1"):
        HighPriorityJobs(0, lambda: [])


def test_the_refusal_fits_the_handshake_reply_whole():
    longest = refusal([AttachedJob(10 ** 9, 4194304, "x" * 63)] * 99, 99)
    assert len(longest.encode()) <= 191, len(longest)     # HelloReply.message keeps 191 bytes
    assert longest.endswith("raise tally-server --max-hp-jobs")


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    # null backend: 80 GiB; best-effort jobs share 80 - 79 = 1 GiB, and each gets 256 MiB unless it asks less
    s = ServerProcess(tmp_path_factory.mktemp("limits") / "tally.sock", backend="null",
                      extra_args=("--hp-memory-reserve", "79G", "--be-memory-quota", "256M"))
    yield s
    s.stop()


def clients_of(server) -> dict[int, dict]:
    return {c["client_id"]: c for c in query_status(server.socket_path)["clients"]}


def test_a_second_high_priority_job_is_refused_until_the_first_leaves(limited):
    first = PyClient(limited.socket_path, priority=HIGH, program="serve")
    second = PyClient(limited.socket_path, priority=HIGH, program="serve2")
    assert second.status == QUOTA_UNAVAILABLE
    first_id = first.reply["client_id"]
    assert second.message.startswith(f"this server allows one high-priority job and runs client {first_id} (pid ")
    assert "run this job as --priority best-effort" in second.message
    assert PyClient(limited.socket_path, priority=BEST_EFFORT).status == protocol.HandshakeStatus.OK
    assert "refused pid" in limited.log() and "allows one high-priority job" in limited.log()
    first.close()
    wait_until(lambda: all(c["priority"] != "high" for c in clients_of(limited).values()))
    third = PyClient(limited.socket_path, priority=HIGH, program="serve3")
    assert third.status == protocol.HandshakeStatus.OK, third.message
    third.close()


def test_high_priority_jobs_handshaking_at_once_get_one_place(limited):
    wait_until(lambda: all(c["priority"] != "high" for c in clients_of(limited).values()))
    results: list[PyClient] = []
    threads = [threading.Thread(target=lambda: results.append(PyClient(limited.socket_path, priority=HIGH)))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(c.status for c in results) == [protocol.HandshakeStatus.OK] + [QUOTA_UNAVAILABLE] * 5
    for c in results:
        c.close()


def test_best_effort_quotas_default_to_the_servers_and_may_only_be_lower(limited):
    default = PyClient(limited.socket_path, program="no-quota")
    lower = PyClient(limited.socket_path, quota=64 * MIB, program="lower")
    higher = PyClient(limited.socket_path, quota=512 * MIB, program="higher")
    assert higher.status == QUOTA_UNAVAILABLE
    assert higher.message == ("memory quota 512.00 MiB is more than this server gives best-effort jobs "
                              "(256.00 MiB, tally-server --be-memory-quota); ask for at most that, or for no quota")
    wait_until(lambda: {"no-quota", "lower"} <= {c["program"] for c in clients_of(limited).values()})
    got = {c["program"]: (c["memory_quota"], c["memory_quota_bytes"]) for c in clients_of(limited).values()}
    assert got["no-quota"] == (None, 256 * MIB) and got["lower"] == (64 * MIB, 64 * MIB)
    server = query_status(limited.socket_path)["server"]
    assert (server["be_memory_quota_bytes"], server["hp_memory_reserve_bytes"], server["max_hp_jobs"]) == \
        (256 * MIB, 79 * GIB, 1)
    # cuMemGetInfo: the job's quota is its total
    assert default.call("MemGetInfo")[1] == {"free": 256 * MIB, "total": 256 * MIB}
    default.close()
    lower.close()


def test_best_effort_jobs_stop_at_the_reserve_and_the_high_priority_job_does_not(limited):
    jobs = [PyClient(limited.socket_path, program=f"train{i}") for i in range(5)]
    for job in jobs[:4]:                                          # 4 x 256 MiB: the whole 1 GiB
        assert job.call("MemAlloc", bytes=256 * MIB)[0] == "MemAllocReply"
    name, fields, tail = jobs[4].call("MemAlloc", bytes=MIB)
    assert name == "Error" and fields["status"] == 2             # CUDA_ERROR_OUT_OF_MEMORY
    assert "the memory reserved for high-priority jobs (79.00 GiB) leaves best-effort jobs 0 B" in tail.decode()
    assert jobs[4].call("MemGetInfo")[1] == {"free": 0, "total": 256 * MIB}
    hp = PyClient(limited.socket_path, priority=HIGH, program="serve")
    assert hp.call("MemAlloc", bytes=8 * GIB)[0] == "MemAllocReply"
    jobs[0].close()                                               # its 256 MiB are best-effort memory again
    wait_until(lambda: jobs[4].call("MemAlloc", bytes=MIB)[0] == "MemAllocReply")
    for job in (*jobs[1:], hp):
        job.close()


@pytest.mark.parametrize("args, words", [
    (("--be-memory-quota", "100G"), "--be-memory-quota 100.00 GiB is more than the device has (80.00 GiB)"),
    (("--hp-memory-reserve", "40"), "has no unit: write 40B for bytes"),
    (("--hp-memory-reserve", "150%"), "a percentage must be in (0, 100]"),
    (("--max-hp-jobs", "0"), "'0' is not a whole number of at least 1"),
])
def test_bad_flag_values_stop_the_server_with_the_reason(tmp_path, args, words):
    r = subprocess.run([sys.executable, "-m", "tally.cli.server_main", "--backend", "null",
                        "--socket", str(tmp_path / "s.sock"), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and words in r.stderr, r.stderr
    assert not (tmp_path / "s.sock").exists()


def test_tally_run_predicts_the_servers_refusals_from_its_status():
    from tally.cli.run_main import server_refuses

    status = {"server": {"memory_total": 80 * GIB, "be_memory_quota_bytes": 8 * GIB, "max_hp_jobs": 1},
              "clients": [{"client_id": 4, "pid": 99, "program": "serve", "priority": "high"}]}
    assert server_refuses("high", None, status) == (
        "this server allows one high-priority job and runs client 4 (pid 99, serve); run this job as "
        "--priority best-effort or raise tally-server --max-hp-jobs")
    assert server_refuses("best-effort", str(8 * GIB), status) is None
    assert server_refuses("best-effort", "10%", status) is None              # 8 GiB of 80
    assert "more than this server gives best-effort jobs (8.00 GiB" in server_refuses("best-effort", "11%", status)
    assert server_refuses("best-effort", None, status) is None
    status["server"]["max_hp_jobs"] = 2
    assert server_refuses("high", None, status) is None
    # an older server's status, without these fields: nothing to predict
    assert server_refuses("best-effort", "1%", {"server": {"memory_total": GIB}, "clients": []}) is None

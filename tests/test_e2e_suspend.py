"""Suspending and resuming a running job end to end on the emulator
(`tally-server suspend` / `resume`): an nvcc-compiled job looping over a CUDA
graph, two streams and events is suspended mid-loop, its device memory leaves
the device (the server's free memory grows by exactly what it saved), it waits
without failing, and after resume it finishes with exact results; a job's
virtual memory comes back mapped at the same addresses with its bytes; a job
killed while suspended leaves nothing behind; refusals change nothing."""
from __future__ import annotations

import time

from e2e_helpers import build_cuda, build_driver_c, finish, idle, server, start_job, tally_server

MIB = 1 << 20
GRANULARITY = 2 << 20


def only_client(status: dict) -> dict:
    (client,) = status["clients"]
    return client


def suspend(server, cid: int, *flags: str) -> tuple[dict, dict]:
    """Suspend the client; the status before and after."""
    before = server.status()
    r = tally_server(server, "suspend", "--client", str(cid), *flags)
    assert r.returncode == 0 and "suspended" in r.stdout, r.stdout + r.stderr
    return before, server.status()


def test_suspend_mid_loop_frees_its_memory_and_resume_keeps_results_exact(nvcc, server):
    # "hold": the job loops freely (suspended wherever the suspension finds it) and waits
    # for a line only after its last round, so it is still there to be looked at after the
    # resume even when the suspension came late (on a loaded machine it once finished
    # between the resume and the status below).
    job = start_job(server.socket, build_cuda(nvcc, "suspended_job.cu"), "hold")
    assert job.stdout.readline().strip() == "looping"
    cid = only_client(server.status())["client_id"]
    before, after = suspend(server, cid)
    client = only_client(after)
    assert client["state"] == "suspended"
    saved = client["suspended_bytes"]
    # Its allocations (two arrays of 64 KiB and the 16 MiB ballast) and its module's globals.
    assert saved >= 16 * MIB + 2 * 64 * 1024 + 4 + 256 * 4
    # The device's free memory grows by what was saved (the emulator rounds each of
    # its 6 allocations up to 256 bytes).
    freed = after["server"]["memory_free"] - before["server"]["memory_free"]
    assert saved <= freed < saved + 6 * 256
    requests = client["requests"]
    time.sleep(1.0)                      # suspended: nothing of it runs, and it waits without failing
    later = only_client(server.status())
    assert job.poll() is None and later["requests"] == requests and later["state"] == "suspended"
    r = tally_server(server, "resume", "--client", str(cid))
    assert r.returncode == 0 and "restored at the same addresses" in r.stdout, r.stdout + r.stderr
    back = server.status()
    assert only_client(back)["state"] == "running" and only_client(back)["suspended_bytes"] == 0
    assert back["server"]["memory_free"] == before["server"]["memory_free"]
    assert back["server"]["mobility"]["suspensions"] == back["server"]["mobility"]["resumes"] == 1
    job.stdin.write("finish\n")
    job.stdin.flush()
    result = finish(job)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.value("wrong_a") == result.value("wrong_b") == result.value("wrong_ballast") == "0"
    assert result.ints("wrong_seen", "rounds") == [0, 400]


def test_virtual_memory_comes_back_mapped_at_its_address(server):
    owner = start_job(server.socket, build_driver_c("virtual_memory.c"), "owner")
    assert owner.stdout.readline().startswith("address=")
    cid = only_client(server.status())["client_id"]
    before, after = suspend(server, cid)
    assert only_client(after)["suspended_bytes"] == GRANULARITY       # its one physical chunk
    assert after["server"]["memory_free"] - before["server"]["memory_free"] == GRANULARITY
    assert tally_server(server, "resume", "--client", str(cid)).returncode == 0
    owner.stdin.write("check\n")
    owner.stdin.flush()
    result = finish(owner)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.value("intact") == "1"


def test_a_job_killed_while_suspended_leaves_nothing(nvcc, server):
    job = start_job(server.socket, build_cuda(nvcc, "suspended_job.cu"))
    assert job.stdout.readline().strip() == "looping"
    suspend(server, only_client(server.status())["client_id"])
    job.kill()
    job.wait(timeout=30)
    server.wait_for(idle, what="the suspended job's release")
    assert server.alive()
    assert server.status()["server"]["mobility"]["saved_host_bytes"] == 0     # its saved bytes went too


def test_refusals_change_nothing(nvcc, server):
    job = start_job(server.socket, build_cuda(nvcc, "suspended_job.cu"), "wait", priority="high")
    assert job.stdout.readline().strip() == "looping"
    cid = only_client(server.status())["client_id"]
    r = tally_server(server, "suspend", "--client", str(cid))
    assert r.returncode == 2 and "high-priority job" in r.stderr and "--force" in r.stderr
    assert only_client(server.status())["state"] == "running"
    unknown = tally_server(server, "suspend", "--client", str(cid + 7))
    assert unknown.returncode == 2 and f"no client {cid + 7} is attached" in unknown.stderr
    # With --force it is suspended; a second suspend and a second resume change nothing and say so.
    suspend(server, cid, "--force")
    again = tally_server(server, "suspend", "--client", str(cid), "--force")
    assert again.returncode == 0 and "suspended already" in again.stdout
    assert tally_server(server, "resume", "--client", str(cid)).returncode == 0
    twice = tally_server(server, "resume", "--client", str(cid))
    assert twice.returncode == 0 and "nothing changed" in twice.stdout
    job.stdin.write("go\n")
    job.stdin.flush()
    result = finish(job)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.ints("wrong_a", "wrong_b", "wrong_ballast", "wrong_seen", "rounds") == [0, 0, 0, 0, 400]

"""`tally-server evict` end to end on the emulator, with nvcc-compiled jobs under
tally-run: the evicted best-effort job's queued kernels are dropped and its memory
freed at once, its next driver calls fail with cudaErrorDevicesUnavailable, its
stderr and tally-run say why, and tally-run exits 75; the high-priority job, whose
kernels run meanwhile, finishes with exact results; nothing is left behind."""
from __future__ import annotations

from pathlib import Path

from e2e_helpers import build_cuda, finish, idle, run_job, server, start_job, tally_server

from tally.units import format_bytes

MIB = 1 << 20
EX_TEMPFAIL = 75
DEVICES_UNAVAILABLE = 46          # cudaErrorDevicesUnavailable / CUDA_ERROR_DEVICE_UNAVAILABLE
REASON = "node gpu-7 drained for maintenance"


def send_line(proc) -> None:
    proc.stdin.write("go\n")
    proc.stdin.flush()


def shm_left(server) -> list[str]:
    """The shared-memory names of this server's segments still in /dev/shm."""
    return [p.name for p in Path("/dev/shm").glob(f"tally-{server.process.proc.pid}-*")]


def client(status: dict, priority: str) -> dict:
    (found,) = [c for c in status["clients"] if c["priority"] == priority]
    return found


def test_evict_from_the_cli(nvcc, server):
    hp = start_job(server.socket, build_cuda(nvcc, "paused_job.cu"), priority="high")
    assert hp.stdout.readline().strip() == "ready"
    be = start_job(server.socket, build_cuda(nvcc, "evicted_job.cu"), 64, 16)
    assert be.stdout.readline().strip() == "queued", be.stderr.read()
    status = server.wait_for(lambda s: len(s["clients"]) == 2, what="both jobs to attach")
    victim = client(status, "best-effort")
    assert victim["memory_used"] >= 64 * MIB and victim["state"] == "running"
    used_before = status["server"]["memory_total"] - status["server"]["memory_free"]

    send_line(hp)                      # its kernels run while the other job is evicted
    assert hp.stdout.readline().strip() == "launched"
    r = tally_server(server, "evict", "--client", str(victim["client_id"]), "--reason", REASON)
    assert r.returncode == 0, r.stderr
    assert f"client {victim['client_id']} (evicted_job" in r.stdout and "evicted" in r.stdout
    assert f"its memory ({format_bytes(victim['memory_used'])}) freed" in r.stdout and REASON in r.stdout

    # Released at once, while its process still runs: listed as evicted, holding nothing.
    status = server.status()
    listed = client(status, "best-effort")
    assert (listed["state"], listed["evicted"], listed["memory_used"]) == ("evicted", REASON, 0)
    assert status["server"]["memory_total"] - status["server"]["memory_free"] <= used_before - 64 * MIB
    assert status["server"]["evictions"] == {"operator": 1}
    again = tally_server(server, "evict", "--client", str(victim["client_id"]), "--reason", "twice")
    assert again.returncode == 0 and "evicted already" in again.stdout

    send_line(be)
    evicted = finish(be)
    assert evicted.returncode == EX_TEMPFAIL, evicted.stdout + evicted.stderr
    assert evicted.stdout.split() == [f"launch={DEVICES_UNAVAILABLE}", f"sync={DEVICES_UNAVAILABLE}",
                                      f"malloc={DEVICES_UNAVAILABLE}"]
    assert f"tally: evicted by tally-server: {REASON}" in evicted.stderr
    assert evicted.stderr.splitlines()[-1] == f"tally-run: evicted by tally-server: {REASON}"

    done = finish(hp)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split() == ["synced", "wrong=0"]       # "launched" was read above
    status = server.wait_for(idle, what="every job's memory to be freed")
    assert status["server"]["evictions"] == {"operator": 1}
    assert shm_left(server) == []
    assert "evicted [operator]: " + REASON in server.process.log()


def test_evict_refusals(nvcc, server):
    hp = start_job(server.socket, build_cuda(nvcc, "paused_job.cu"), priority="high")
    assert hp.stdout.readline().strip() == "ready"
    cid = str(server.wait_for(lambda s: len(s["clients"]) == 1)["clients"][0]["client_id"])

    unknown = tally_server(server, "evict", "--client", "999", "--reason", "x")
    assert unknown.returncode == 2 and f"no client 999 is attached (attached now: {cid})" in unknown.stderr
    high = tally_server(server, "evict", "--client", cid, "--reason", "x")
    assert high.returncode == 2 and "high-priority job" in high.stderr and "--force" in high.stderr
    empty = tally_server(server, "evict", "--client", cid, "--reason", "  ")
    assert empty.returncode == 2 and "--reason is empty" in empty.stderr
    missing = tally_server(server, "evict", "--client", cid)
    assert missing.returncode == 2 and "--reason" in missing.stderr

    # The refused job was not touched: it runs on to exact results.
    send_line(hp)
    done = finish(hp)
    assert done.returncode == 0 and done.stdout.split() == ["launched", "synced", "wrong=0"], done.stderr
    assert server.status()["server"]["evictions"] == {}


def test_an_evicted_high_priority_job_makes_room_for_its_replacement(nvcc, server):
    # With --force the operator may evict the high-priority job; its replacement is admitted
    # at once (--max-hp-jobs 1), while the evicted process still runs.
    first = start_job(server.socket, build_cuda(nvcc, "paused_job.cu"), priority="high")
    assert first.stdout.readline().strip() == "ready"
    cid = str(server.wait_for(lambda s: len(s["clients"]) == 1)["clients"][0]["client_id"])
    r = tally_server(server, "evict", "--client", cid, "--reason", "moving the service", "--force")
    assert r.returncode == 0 and "(paused_job" in r.stdout and "high) evicted" in r.stdout, r.stderr
    replacement = run_job(server.socket, build_cuda(nvcc, "vector_add.cu"), 300, priority="high")
    assert replacement.returncode == 0 and replacement.ints("n", "wrong") == [300, 0], replacement.stderr
    send_line(first)
    evicted = finish(first)
    assert evicted.returncode == EX_TEMPFAIL
    assert evicted.stderr.splitlines()[-1] == "tally-run: evicted by tally-server: moving the service"
    server.wait_for(idle, what="every job's memory to be freed")


def test_evicting_a_suspended_job_lets_go_of_its_saved_memory(nvcc, server):
    job = start_job(server.socket, build_cuda(nvcc, "paused_job.cu"))
    assert job.stdout.readline().strip() == "ready"
    cid = str(server.wait_for(lambda s: len(s["clients"]) == 1)["clients"][0]["client_id"])
    suspended = tally_server(server, "suspend", "--client", cid)
    assert suspended.returncode == 0, suspended.stderr
    assert server.status()["clients"][0]["suspended_bytes"] > 0
    r = tally_server(server, "evict", "--client", cid, "--reason", "suspended too long")
    assert r.returncode == 0, r.stderr
    (listed,) = server.status()["clients"]
    assert (listed["state"], listed["suspended_bytes"], listed["memory_used"]) == ("evicted", 0, 0)
    refused = tally_server(server, "resume", "--client", cid)
    assert refused.returncode == 2 and "was evicted (suspended too long); it holds nothing" in refused.stderr
    send_line(job)                      # its calls fail now instead of waiting for a resume
    evicted = finish(job)
    assert evicted.returncode == EX_TEMPFAIL, evicted.stdout + evicted.stderr
    assert evicted.stderr.splitlines()[-1] == "tally-run: evicted by tally-server: suspended too long"
    server.wait_for(idle, what="every job's memory to be freed")


# ---- what tally-run exits with: did the job lose work? ------------------------------------

def evict_when_done(nvcc, server, mode: str):
    """A finished_job.cu in `mode`, evicted once its work is done; its Job and the server log."""
    job = start_job(server.socket, build_cuda(nvcc, "finished_job.cu"), mode)
    assert job.stdout.readline().strip() == "done ok=1", job.stderr.read()
    status = server.wait_for(lambda s: len(s["clients"]) == 1, what="the job to attach")
    cid = status["clients"][0]["client_id"]
    r = tally_server(server, "evict", "--client", str(cid), "--reason", REASON)
    assert r.returncode == 0, r.stderr
    send_line(job)
    return finish(job), server.process.log()


def test_a_job_evicted_after_its_work_keeps_its_exit_status(nvcc, server):
    """Nothing of its work was dropped and it only exits: tally-run exits 0, not 75,
    so an orchestrator does not run a finished job again."""
    done, log = evict_when_done(nvcc, server, "exit")
    assert done.value("free") == str(DEVICES_UNAVAILABLE)          # its release failed, harmlessly
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.splitlines()[-1] == (f"tally-run: evicted by tally-server after its work was done "
                                            f"({REASON}); the job exited 0")
    assert f"evicted [operator]: {REASON} (it had no work left)" in log


def test_a_job_that_asks_for_work_after_an_idle_eviction_is_reported_evicted(nvcc, server):
    """It ignores the failed launch and synchronization and exits 0, but its work
    was not done: tally-run reports the eviction (75)."""
    done, log = evict_when_done(nvcc, server, "more")
    assert (done.value("launch"), done.value("sync")) == (str(DEVICES_UNAVAILABLE), str(DEVICES_UNAVAILABLE))
    assert done.returncode == EX_TEMPFAIL, done.stdout + done.stderr
    assert done.stderr.splitlines()[-1] == f"tally-run: evicted by tally-server: {REASON}"
    assert "(it had no work left)" in log


def test_a_job_evicted_with_work_queued_is_told_its_work_was_dropped(nvcc, server):
    be = start_job(server.socket, build_cuda(nvcc, "evicted_job.cu"), 1, 16)
    assert be.stdout.readline().strip() == "queued", be.stderr.read()
    cid = server.wait_for(lambda s: len(s["clients"]) == 1, what="the job to attach")["clients"][0]["client_id"]
    assert tally_server(server, "evict", "--client", str(cid), "--reason", REASON).returncode == 0
    assert f"evicted [operator]: {REASON} (its queued or running work dropped)" in server.process.log()
    be.stdin.write("quit\n")          # it exits 0 at once, asking for nothing more
    be.stdin.flush()
    done = finish(be)
    assert done.returncode == EX_TEMPFAIL and done.stderr.splitlines()[-1] == \
        f"tally-run: evicted by tally-server: {REASON}", done.stderr

"""Graceful exit on the emulator with nvcc-compiled jobs under tally-run:
SIGTERM to the server stops admitting, lets the work on the device finish (up to
--drain-timeout), tells every job (tally-run exits 75 with the reason), releases
everything and exits 0; SIGTERM/SIGINT sent to tally-run reach a job in the middle
of a kernel, which dies without disturbing the high-priority job next to it."""
from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from e2e_helpers import build_cuda, emulator_server_process, finish, idle, run_job, server, start_job  # noqa: F401

EX_TEMPFAIL = 75
DEVICES_UNAVAILABLE = 46
SHUTDOWN = ("tally-run: evicted by tally-server: tally-server is shutting down (SIGTERM); run the job again once "
            "a tally-server runs")


def shm_left(pid: int) -> list[str]:
    return [p.name for p in Path("/dev/shm").glob(f"tally-{pid}-*")]


def stop(server, sig=signal.SIGTERM, timeout: float = 60) -> tuple[int, float]:
    """Signal the server; its exit status and how long it took to exit."""
    started = time.monotonic()
    server.process.proc.send_signal(sig)
    code = server.process.proc.wait(timeout)
    return code, time.monotonic() - started


def test_sigterm_with_two_jobs_running_tells_both_and_exits_0_within_the_drain_timeout(nvcc):
    server = emulator_server_process("--drain-timeout", "3")
    try:
        hp = start_job(server.socket, build_cuda(nvcc, "paused_job.cu"), priority="high")
        assert hp.stdout.readline().strip() == "ready"
        busy = start_job(server.socket, build_cuda(nvcc, "busy_loop.cu"), 400_000_000)   # minutes on the emulator
        assert busy.stdout.readline().strip() == "launched"
        server.wait_for(lambda s: len(s["clients"]) == 2, what="both jobs to attach")

        started = time.monotonic()
        server.process.proc.send_signal(signal.SIGTERM)
        # While it drains, a new job is told to come back later.
        server.wait_for(lambda s: s["server"]["shutting_down"], timeout=10, what="the drain to begin")
        late = run_job(server.socket, build_cuda(nvcc, "vector_add.cu"), 100)
        assert late.returncode == EX_TEMPFAIL, late.stdout + late.stderr
        assert late.stderr.strip() == ("tally-run: tally-server is shutting down; run the job again once a "
                                       "tally-server runs")
        code = server.process.proc.wait(60)
        took = time.monotonic() - started
        assert code == 0 and took < 3 + 7, (code, took)      # the drain deadline, plus releasing
        log = server.process.log()
        assert "SIGTERM: shutting down; admitting no more jobs, waiting up to 3 s" in log
        assert "still queued and 1 unit(s) on the device after 3." in log
        assert log.count("evicted [shutdown]: tally-server is shutting down (SIGTERM)") == 2
        # Its single-block kernel cannot be preempted: the process's exit ends it.
        assert "exiting without waiting for the work still on the device" in log
        assert log.rstrip().endswith("tally-server: stopped")
        assert shm_left(server.process.proc.pid) == []

        # Both jobs fail cleanly at their next driver call, and tally-run says why.
        busy_done = finish(busy)
        assert busy_done.returncode == EX_TEMPFAIL, busy_done.stdout + busy_done.stderr
        assert busy_done.value("finished") == str(DEVICES_UNAVAILABLE)
        assert busy_done.stderr.splitlines()[-1] == SHUTDOWN
        hp.stdin.write("go\n")
        hp.stdin.flush()
        hp_done = finish(hp)
        assert hp_done.returncode == EX_TEMPFAIL and hp_done.stderr.splitlines()[-1] == SHUTDOWN, hp_done.stderr
        assert "launched" not in hp_done.stdout.split()[1:] and "wrong=0" not in hp_done.stdout
    finally:
        server.stop()


def test_work_that_finishes_within_the_drain_timeout_finishes(nvcc):
    server = emulator_server_process("--drain-timeout", "60")
    try:
        job = start_job(server.socket, build_cuda(nvcc, "busy_loop.cu"), 3_000_000)     # about a second here
        assert job.stdout.readline().strip() == "launched"
        server.process.proc.send_signal(signal.SIGTERM)
        done = finish(job)
        # Its kernel ran to the end: the synchronize after it succeeded (the drain waits
        # for work the C++ data plane issued and for requests still in the job's ring).
        assert done.value("finished") == "0", done.stdout + done.stderr + server.process.log()
        # The job may still be attached, between that synchronize and its exit, when the
        # drain tells every job; its eviction then dropped nothing and it asked for
        # nothing more, so tally-run exits as the job did, 0, either way.
        assert done.returncode == 0, done.stdout + done.stderr
        assert server.process.proc.wait(60) == 0, server.process.log()
        log = server.process.log()
        if "evicted [shutdown]" in log:
            assert "(it had no work left)" in log and "after its work was done" in done.stderr, log
        assert "the work on the device finished in" in log, log
        assert "exiting without waiting" not in log
        assert shm_left(server.process.proc.pid) == []
    finally:
        server.stop()


def test_an_idle_server_exits_at_once(nvcc):
    server = emulator_server_process("--drain-timeout", "60")
    try:
        assert run_job(server.socket, build_cuda(nvcc, "vector_add.cu"), 100).returncode == 0
        code, took = stop(server, signal.SIGINT)
        assert code == 0 and took < 10, (code, took)
        assert "SIGINT: shutting down" in server.process.log()
    finally:
        server.stop()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_job_signalled_through_tally_run_mid_kernel_leaves_the_others_undisturbed(nvcc, server, sig):
    busy = start_job(server.socket, build_cuda(nvcc, "busy_loop.cu"), 40_000_000)
    assert busy.stdout.readline().strip() == "launched"
    server.wait_for(lambda s: any(c["memory_used"] >= 1 << 20 for c in s["clients"]), what="the busy job")
    bystander = start_job(server.socket, build_cuda(nvcc, "paused_job.cu"), priority="high")
    assert bystander.stdout.readline().strip() == "ready"
    bystander.stdin.write("go\n")
    bystander.stdin.flush()
    busy.send_signal(sig)                     # to tally-run, which hands it to the job
    assert busy.wait(30) == -sig
    done = finish(bystander)
    assert done.returncode == 0 and done.stdout.split() == ["launched", "synced", "wrong=0"], done.stderr
    server.wait_for(idle, timeout=120, what="the signalled job's memory to be freed")
    assert server.alive()

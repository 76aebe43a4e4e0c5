"""A job killed while it waits for the device, in each kind of wait tally answers
off the session thread: the server drops the job's work, ends the waiting request
quietly (no ERROR, no traceback in its log), frees what the job owned, and the
other jobs carry on.

Each victim's kernel is queued behind a bystander's kernel that runs until the test
lets it end (the scheduler runs one best-effort kernel at a time), so the victim is
removed while its wait is still blocked: the case where the waiting request outlives
its client."""
from __future__ import annotations

import re
import signal
import time

from e2e_helpers import build_cuda, finish, idle, run_job, server, start_job  # noqa: F401

WAITS = ["ctx", "stream", "event", "memcpy_pageable", "memcpy_pinned", "free", "free_host", "host_func"]
VICTIM_ITERATIONS = 1000
SERVER_ERRORS = re.compile(r"^tally-server (ERROR|CRITICAL)|Traceback", re.M)


def kill_while_waiting(server, program, wait: str) -> None:
    log_before = len(server.process.log())
    victim = start_job(server.socket, program, wait, VICTIM_ITERATIONS)
    assert victim.stdout.readline().strip() == "waiting", (wait, victim.stderr.read())
    time.sleep(0.3)               # the wait's request is at the server by now
    victim.send_signal(signal.SIGKILL)
    killed = finish(victim)
    assert killed.returncode == -signal.SIGKILL and "returned=" not in killed.stdout, (wait, killed.stdout)
    server.wait_for(lambda s: len(s["clients"]) == 1, what=f"the job killed in {wait} to be released")
    time.sleep(0.2)               # what its waiting request does after the release
    log = server.process.log()[log_before:]
    assert "disconnected" in log, wait
    assert not SERVER_ERRORS.search(log), (wait, log)
    assert " failed with " not in log, (wait, log)     # no failure is reported for a job that died


def test_jobs_killed_while_waiting(nvcc, server):
    bystander = start_job(server.socket, build_cuda(nvcc, "held_kernel.cu"))
    try:
        assert bystander.stdout.readline().strip() == "launched"
        victim_program = build_cuda(nvcc, "blocked_wait.cu")
        for wait in WAITS:
            kill_while_waiting(server, victim_program, wait)
    finally:
        # The bystander's kernel was still running, undisturbed; it ends when told.
        bystander.stdin.write("end\n")
        bystander.stdin.flush()
        done = finish(bystander)
    assert done.returncode == 0 and done.value("finished") == "0", done.stdout + done.stderr
    # The next job runs correctly, and nothing went wrong on the server.
    follower = run_job(server.socket, build_cuda(nvcc, "vector_add.cu"), 500)
    assert follower.returncode == 0, follower.stdout + follower.stderr
    assert follower.ints("n", "wrong", "roundtrip") == [500, 0, 500]
    server.wait_for(idle, what="every job's memory to be freed")
    assert not SERVER_ERRORS.search(server.process.log()), server.process.log()
    assert server.alive()

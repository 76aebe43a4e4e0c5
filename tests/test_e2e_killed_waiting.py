"""A job killed while it waits for the device, in each kind of wait tally answers
off the session thread: the server drops the job's work, ends the waiting request
quietly (no ERROR, no traceback in its log), frees what the job owned, and the
next job runs correctly."""
from __future__ import annotations

import signal
import time

import pytest
from test_e2e_helpers import build_cuda, emulator_server_process, finish, idle, run_job, start_job

WAITS = ["ctx", "stream", "event", "memcpy_pageable", "memcpy_pinned", "free", "free_host", "host_func"]
# About a second of emulated work (one block: it runs whole, and the server waits
# for it before releasing the killed job): still running when the job is killed.
SPIN_ITERATIONS = 8_000_000


@pytest.fixture(scope="module")
def server():
    server = emulator_server_process()
    yield server
    server.stop()


@pytest.mark.parametrize("wait", WAITS)
def test_job_killed_while_waiting(nvcc, server, wait):
    log_before = len(server.process.log())
    job = start_job(server.socket, build_cuda(nvcc, "blocked_wait.cu"), wait, SPIN_ITERATIONS)
    assert job.stdout.readline().strip() == "waiting", job.stderr.read()
    time.sleep(0.3)               # the wait's request is at the server by now
    job.send_signal(signal.SIGKILL)
    killed = finish(job)
    assert killed.returncode == -signal.SIGKILL and "returned=" not in killed.stdout, killed.stdout
    server.wait_for(idle, timeout=120, what="the killed job's work and memory to be released")

    follower = run_job(server.socket, build_cuda(nvcc, "vector_add.cu"), 500)
    assert follower.returncode == 0, follower.stdout + follower.stderr
    assert follower.ints("n", "wrong", "roundtrip") == [500, 0, 500]
    server.wait_for(idle, what="the following job to leave")
    log = server.process.log()[log_before:]
    assert "disconnected" in log
    assert "ERROR" not in log and "Traceback" not in log, log
    assert server.alive()

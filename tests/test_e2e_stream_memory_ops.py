"""Stream memory operations (cuStreamWaitValue32/64, cuStreamWriteValue32/64,
cuStreamBatchMemOp) through tally-run on the emulator, at both priorities: a
wait holds its own stream only (the job's other streams and other jobs carry
on), each condition at both widths, pinned host memory the CPU writes, batches;
bad input gets CUDA's code with the reason; a wait nobody satisfies ends when
its job is evicted or killed, and the server carries on."""
from __future__ import annotations

import os
import signal

import pytest

from tally import paths
from e2e_helpers import build_cuda, finish, idle, run_job, server, start_job, tally_server  # noqa: F401

CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_NOT_SUPPORTED = 801
EX_TEMPFAIL = 75


def program(nvcc):
    return build_cuda(nvcc, "stream_memory_ops.cu", flags=(f"-L{paths.LIB_DIR}", "-lcuda"))


@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_waits_hold_their_stream_only_and_writes_release_them(nvcc, server, priority):
    job = run_job(server.socket, program(nvcc), "basics", priority=priority)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.value("attributes") == "11111" and job.value("can_flush") == "0"
    assert job.ints("other_stream_ran", "held", "released") == [1, 1, 1]
    assert job.ints("geq32", "eq32", "and32", "nor32") == [1, 1, 1, 1]
    assert job.ints("geq64", "eq64", "and64", "nor64") == [1, 1, 1, 1]
    assert job.ints("host_wait_held", "host_wait_released", "batch_written", "still_usable") == [1, 1, 1, 1]
    assert job.ints("captured_root_is_mem_op", "captured_ran", "captured_params") == [1, 1, 1]
    assert job.ints("node_params", "node_ran", "exec_updated") == [1, 1, 1]
    for refused in ("foreign_address", "beyond_allocation", "misaligned", "bad_flags"):
        assert job.value(refused) == str(CUDA_ERROR_INVALID_VALUE), refused
    assert job.value("flush") == str(CUDA_ERROR_NOT_SUPPORTED)
    assert "stream wait value address 0x10+4 is not memory this client owns" in job.stderr
    assert "is not aligned to 8 bytes" in job.stderr
    assert "not supported" not in job.stderr.replace("CUDA_ERROR_NOT_SUPPORTED", "")
    server.wait_for(idle, what="the job's memory to be given back")


def waiting_job(nvcc, server, priority):
    job = start_job(server.socket, program(nvcc), "forever", priority=priority)
    assert job.stdout.readline().strip() == "waiting=1"
    (client,) = server.status()["clients"]
    return job, client["client_id"]


def test_a_wait_nobody_satisfies_ends_at_eviction_and_others_carry_on(nvcc, server):
    job, cid = waiting_job(nvcc, server, "high")
    other = run_job(server.socket, build_cuda(nvcc, "vector_add.cu"), priority="best-effort")
    assert other.returncode == 0 and "wrong=0" in other.stdout, other.stdout + other.stderr
    r = tally_server(server, "evict", "--client", str(cid), "--reason", "test", "--force")
    assert r.returncode == 0, r.stdout + r.stderr
    result = finish(job, timeout=60)
    assert result.returncode == EX_TEMPFAIL, result.stdout + result.stderr
    server.wait_for(idle, what="the evicted job's memory to be given back")


def test_a_job_killed_while_its_stream_waits_leaves_nothing(nvcc, server):
    job, _ = waiting_job(nvcc, server, "best-effort")
    os.kill(job.pid, signal.SIGKILL)
    job.wait(timeout=30)
    server.wait_for(idle, what="the killed job's memory and streams to be given back")
    after = run_job(server.socket, build_cuda(nvcc, "vector_add.cu"), priority="high")
    assert after.returncode == 0 and "wrong=0" in after.stdout, after.stdout + after.stderr


def test_a_job_that_exits_with_its_stream_waiting_leaves_nothing(nvcc, server):
    job = run_job(server.socket, program(nvcc), "exits", priority="high", timeout=60)
    assert job.returncode == 0 and job.value("waiting") == "1", job.stdout + job.stderr
    server.wait_for(idle, what="the exited job's memory and streams to be given back")

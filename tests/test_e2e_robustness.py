"""Jobs that fail, die, run side by side, or name memory that is not theirs, on a
tally-server with the emulator backend: the server and the other jobs carry on,
and nothing a job does touches another job's memory."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from e2e_helpers import (
    CUDA_ERROR_ILLEGAL_ADDRESS,
    CUDA_ERROR_INVALID_VALUE,
    build_cuda,
    build_driver_c,
    finish,
    idle,
    run_job,
    server,  # noqa: F401  (fixture)
    start_job,
)

CUDA_ERROR_OUT_OF_MEMORY = 2


def assert_vector_add_ok(job, n: int) -> None:
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("n", "wrong", "roundtrip") == [n, 0, n]


def test_illegal_address_is_the_jobs_error_only(nvcc, server):
    vector_add = build_cuda(nvcc, "vector_add.cu")
    bystander = start_job(server.socket, vector_add, 20000)
    job = run_job(server.socket, build_cuda(nvcc, "illegal_address.cu"))
    assert job.returncode == 0, job.stdout + job.stderr
    # The launch is accepted; the fault surfaces at the next synchronization.
    assert job.ints("malloc", "launch") == [0, 0]
    assert job.value("sync") == str(CUDA_ERROR_ILLEGAL_ADDRESS)
    assert job.value("name") == "cudaErrorIllegalAddress"
    assert_vector_add_ok(finish(bystander), 20000)
    assert server.alive()
    assert_vector_add_ok(run_job(server.socket, vector_add, 3000), 3000)
    server.wait_for(idle, what="every job's memory to be freed")


@pytest.mark.parametrize("jobs", [2, 4])
def test_jobs_at_once(nvcc, server, jobs):
    vector_add = build_cuda(nvcc, "vector_add.cu")
    modules = build_cuda(nvcc, "modules_main.cu", "modules_lib.cu")
    sizes = [1000 * (i + 1) for i in range(jobs)]
    running = [start_job(server.socket, vector_add, n) for n in sizes]
    running.append(start_job(server.socket, modules))
    results = [finish(p) for p in running]
    for n, job in zip(sizes, results):
        assert_vector_add_ok(job, n)
    assert results[-1].returncode == 0 and results[-1].ints("second_module", "launches_seen") == [1000, 2]
    status = server.wait_for(idle, what="every job's memory to be freed")
    assert status["server"]["scheduler"]["kernels"] >= jobs + 8


def test_job_killed_mid_kernel(nvcc, server):
    busy = start_job(server.socket, build_cuda(nvcc, "busy_loop.cu"), 40_000_000)
    assert busy.stdout.readline().strip() == "launched"
    status = server.wait_for(lambda s: any(c["memory_used"] >= 1 << 20 for c in s["clients"]),
                             what="the busy job's allocation")
    assert len(status["clients"]) == 1
    bystander = start_job(server.socket, build_cuda(nvcc, "vector_add.cu"), 7000)
    time.sleep(0.5)
    busy.send_signal(signal.SIGKILL)
    busy.wait(timeout=30)
    assert busy.returncode == -signal.SIGKILL
    assert_vector_add_ok(finish(bystander), 7000)
    # The server noticed, waited for what was already on the device, and freed
    # everything the killed job owned; `tally-server status` says so.
    server.wait_for(idle, timeout=120, what="the killed job's memory to be freed")
    cli = subprocess.run([sys.executable, "-m", "tally.cli.server_main", "status", "--socket", str(server.socket),
                          "--json"], capture_output=True, text=True, timeout=30, check=False)
    assert cli.returncode == 0, cli.stderr
    reported = json.loads(cli.stdout)
    assert reported["clients"] == []
    assert reported["server"]["memory_free"] == reported["server"]["memory_total"]
    assert server.alive()
    assert_vector_add_ok(run_job(server.socket, build_cuda(nvcc, "vector_add.cu"), 100), 100)


def test_memory_of_another_job_is_out_of_reach(server):
    program = build_driver_c("driver_api.c")
    owner = start_job(server.socket, program, "owner")
    line = owner.stdout.readline().strip()
    assert line.startswith("owner_ptr=0x"), line
    address = line.split("=")[1]
    intruder = run_job(server.socket, program, "intruder", address)
    assert intruder.returncode == 0, intruder.stdout + intruder.stderr
    for op in ("htod", "dtoh", "memset", "free", "unified", "async_sync"):
        assert intruder.value(f"intruder_{op}") == str(CUDA_ERROR_INVALID_VALUE), op
    # Asynchronous copies are accepted when made; the error comes once, at the next sync.
    assert intruder.ints("intruder_async_call", "intruder_sync_again") == [0, 0]
    owner.stdin.write("check\n")
    owner.stdin.flush()
    result = finish(owner)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.value("owner_intact") == "1"


def test_addresses_the_job_does_not_own(nvcc, server):
    from e2e_helpers import build_device_code

    ptx = build_device_code(nvcc, "driver_kernels.cu", "ptx")
    fatbin = build_device_code(nvcc, "driver_kernels.cu", "fatbin")
    job = run_job(server.socket, build_driver_c("driver_api.c"), "basics", ptx, fatbin)
    assert job.returncode == 0, job.stdout + job.stderr
    for prefix in ("random", "overrun"):
        for op in ("htod", "dtoh", "memset", "free", "unified", "async_sync"):
            assert job.value(f"{prefix}_{op}") == str(CUDA_ERROR_INVALID_VALUE), (prefix, op)
    assert job.ints("free_interior", "dtod_foreign_src", "use_after_free", "double_free") == \
        [CUDA_ERROR_INVALID_VALUE] * 4
    assert job.value("own_intact") == "1"


def test_memory_quota(server):
    job = run_job(server.socket, build_driver_c("driver_api.c"), "quota", quota="64M")
    assert job.returncode == 0, job.stdout + job.stderr
    total = 64 << 20
    assert job.ints("quota_total", "quota_free") == [total, total]
    assert job.ints("alloc_half", "alloc_too_much") == [0, CUDA_ERROR_OUT_OF_MEMORY]
    assert job.value("quota_free_after") == str(total - total // 2)
    assert job.value("alloc_after_free") == "0"


def test_job_dies_inside_its_host_function(nvcc, server):
    # The server holds the stream for the callback's answer, which never comes.
    job = run_job(server.socket, build_cuda(nvcc, "host_func_dies.cu"))
    assert job.returncode == -signal.SIGKILL
    assert "in_callback" in job.stdout and "unreachable" not in job.stdout
    server.wait_for(idle, what="the stream held for the dead job's callback to be released")
    assert server.alive()

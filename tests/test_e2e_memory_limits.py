"""Memory protection and the one high-priority job, end to end on the emulator:
real programs under the real tally-run against `tally-server
--hp-memory-reserve`. A best-effort job that declares no quota cannot allocate
into the reserve with any allocator (cuMemAlloc, cuMemCreate, managed memory,
the stream-ordered pool) and cuMemGetInfo shows it what the reserve leaves; a
high-priority job can;
a second high-priority job is refused with the reason, by tally-run and, for a
job started without it (as Kubernetes starts them), at handshake."""
from __future__ import annotations

import subprocess

import pytest

from e2e_helpers import build_driver_c, emulator_server_process, idle, job_env, run_job
from server_harness import PyClient
from tally import protocol
from tally.cli.run_main import job_environment

CUDA_ERROR_OUT_OF_MEMORY = 2
MIB = 1 << 20
# Of the emulator's 16 GiB, 16352 MiB are kept for high-priority jobs: best-effort jobs share 32 MiB.
RESERVE = "16352M"
BEST_EFFORT_MEMORY = 32 * MIB


@pytest.fixture(scope="module")
def reserved():
    server = emulator_server_process("--hp-memory-reserve", RESERVE)
    yield server
    server.stop()


def test_a_best_effort_job_without_a_quota_cannot_take_the_reserve(reserved):
    status = reserved.status()["server"]
    assert status["memory_free"] == status["memory_total"] == 16 << 30       # the pool below assumes it
    assert status["hp_memory_reserve_bytes"] == 16352 * MIB
    program = build_driver_c("memory_limits.c")
    job = run_job(reserved.socket, program, "try", "48")
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("plain", "virtual", "managed", "pooled") == [CUDA_ERROR_OUT_OF_MEMORY] * 4
    assert job.ints("info_free", "info_total") == [BEST_EFFORT_MEMORY, BEST_EFFORT_MEMORY]
    why = ("allocation of 48.00 MiB (50331648 bytes) refused: the memory reserved for high-priority jobs "
           "(15.97 GiB) leaves best-effort jobs 32.00 MiB (they hold 0 B of 32.00 MiB)")
    for request in ("MemAlloc", "MemCreate", "MemAllocManaged"):
        assert f"tally: {request} failed with CUDA_ERROR_OUT_OF_MEMORY (2): {why}" in job.stderr, request
        assert f"{request} failed with CUDA_ERROR_OUT_OF_MEMORY: {why}" in reserved.process.log()
    # Under what the reserve leaves, every allocator works.
    small = run_job(reserved.socket, program, "try", "16")
    assert small.returncode == 0, small.stdout + small.stderr
    assert small.ints("plain", "virtual", "managed", "pooled") == [0, 0, 0, 0]
    # The high-priority job may use the reserve, and sees the whole device.
    high = run_job(reserved.socket, program, "try", "48", priority="high")
    assert high.returncode == 0, high.stdout + high.stderr
    assert high.ints("plain", "virtual", "managed", "pooled") == [0, 0, 0, 0]
    assert high.ints("info_total") == [16 << 30]
    reserved.wait_for(idle, what="the jobs' memory to be given back")


def test_a_second_high_priority_job_is_refused_with_the_reason(reserved):
    program = build_driver_c("memory_limits.c")
    holder = PyClient(reserved.socket, priority=protocol.Priority.HIGH, program="serve")
    try:
        expected = (f"this server allows one high-priority job and runs client {holder.reply['client_id']} "
                    f"(pid ")
        job = run_job(reserved.socket, program, "try", "1", priority="high")
        assert job.returncode == 2 and job.stdout == ""
        assert job.stderr.startswith(f"tally-run: {expected}") and "--priority best-effort" in job.stderr
        # Started without tally-run, as Kubernetes' device plugin starts jobs: the handshake refuses
        # it, the client library prints why, and the job's cuInit fails (this program then exits 1).
        env = job_environment(job_env(), reserved.socket, "high", None)
        direct = subprocess.run([str(program), "try", "1"], env=env, capture_output=True, text=True, timeout=60)
        assert direct.returncode == 1 and "cuInit(0)" in direct.stdout and direct.stdout.strip().endswith(": 100")
        assert f"refused this job (status {int(protocol.HandshakeStatus.QUOTA_UNAVAILABLE)}): {expected}" \
            in direct.stderr
        # best-effort jobs still come in
        assert run_job(reserved.socket, program, "try", "1").returncode == 0
    finally:
        holder.close()
    reserved.wait_for(idle, what="the high-priority job to leave")
    assert run_job(reserved.socket, program, "try", "1", priority="high").returncode == 0


def test_tally_run_refuses_a_quota_above_the_servers_best_effort_quota():
    server = emulator_server_process("--be-memory-quota", "64M")
    try:
        program = build_driver_c("memory_limits.c")
        job = run_job(server.socket, program, "try", "1", quota="128M")
        assert job.returncode == 2
        assert job.stderr.strip() == ("tally-run: memory quota 128.00 MiB is more than this server gives best-effort "
                                      "jobs (64.00 MiB, tally-server --be-memory-quota); ask for at most that, or "
                                      "for no quota")
        # no quota asked: the server's; cuMemGetInfo shows it
        default = run_job(server.socket, program, "try", "96")
        assert default.ints("info_total", "plain") == [64 * MIB, CUDA_ERROR_OUT_OF_MEMORY]
        assert "this job's memory quota is 64.00 MiB, 0 B in use" in default.stderr
    finally:
        server.stop()

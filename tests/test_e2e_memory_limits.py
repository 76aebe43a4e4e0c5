"""Memory protection and the one high-priority job, end to end on the emulator:
real programs under the real tally-run against `tally-server
--hp-memory-reserve`. A best-effort job that declares no quota cannot allocate
into the reserve with any allocator (cuMemAlloc, cuMemCreate, managed memory,
the stream-ordered pool) and cuMemGetInfo shows it what the reserve leaves; a
high-priority job can;
a second high-priority job is refused with the reason, by tally-run and, for a
job started without it (as Kubernetes starts them), at handshake. Jobs filling
memory at once, one per allocator, never get past their quotas or into the
reserve, as status shows all along."""
from __future__ import annotations

import subprocess
import threading

import pytest

from e2e_helpers import build_driver_c, emulator_server_process, idle, job_command, job_env, run_job
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


ALLOCATORS = ("plain", "pooled", "virtual", "managed")
CHUNK_MIB = 2
BE_QUOTA = 12 * MIB            # each best-effort job's; five of them ask for more than the 32 MiB pool


def _within_limits(status: dict, seen: list[int]) -> None:
    """Every limit holds in this status snapshot; the best-effort total goes in `seen`."""
    best_effort = [c for c in status["clients"] if c["priority"] != "high" and c["program"] != "pytest"]
    for c in best_effort:
        assert c["memory_used"] <= BE_QUOTA, c
    total = sum(c["memory_used"] for c in best_effort)
    assert total <= BEST_EFFORT_MEMORY, status["clients"]
    seen.append(total)


def test_concurrent_jobs_with_every_allocator_never_exceed_quotas_or_the_reserve():
    """Five best-effort jobs (one per allocator, plus a second plain one) fill 2 MiB
    chunks at once against a 12 MiB quota each and a 32 MiB pool, next to a
    high-priority job allocating in the reserve. Status, polled all along by a
    thread, never shows a job over its quota nor best-effort jobs over the pool;
    once they stop the pool is exactly full (the limits refuse late, never early)."""
    server = emulator_server_process("--hp-memory-reserve", RESERVE, "--be-memory-quota", "12M")
    program = build_driver_c("memory_limits.c")
    seen: list[int] = []
    broken: list[BaseException] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            try:
                _within_limits(server.status(), seen)
            except BaseException as e:     # noqa: BLE001  (handed to the test's thread)
                broken.append(e)
                return

    def start(allocator: str, most: int, priority: str | None = None) -> subprocess.Popen:
        return subprocess.Popen(job_command(server.socket, program, "fill", allocator, CHUNK_MIB, most,
                                            priority=priority), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=job_env())

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    jobs = []
    try:
        jobs = [("high", start("plain", 24, "high")), *((a, start(a, 1000)) for a in (*ALLOCATORS, "plain"))]
        filled = []
        for allocator, job in jobs:
            line = job.stdout.readline()
            assert line.startswith("filled="), (allocator, line, job.stderr.read())
            filled.append((allocator, *(int(t.split("=")[1]) for t in line.split())))
        stop.set()
        poller.join(30)
        assert not broken, broken[0]
        _within_limits(server.status(), seen)
        # Every best-effort job stopped at its quota or at the pool's end, refused by the limit.
        best_effort = filled[1:]
        assert all(refused == CUDA_ERROR_OUT_OF_MEMORY for _, _, refused in best_effort), filled
        assert all(n * CHUNK_MIB * MIB <= BE_QUOTA for _, n, _ in best_effort), filled
        assert sum(n for _, n, _ in best_effort) * CHUNK_MIB * MIB == BEST_EFFORT_MEMORY, filled
        assert filled[0] == ("high", 24, 0)        # the reserve was there for it
        assert max(seen) == BEST_EFFORT_MEMORY and len(seen) > len(jobs)
        for allocator, job in jobs:
            out, err = job.communicate("free\n", timeout=120)
            assert job.returncode == 0 and "freed=" in out, (allocator, out, err)
        server.wait_for(idle, what="every chunk to be given back")
    finally:
        stop.set()
        for _, job in jobs:
            job.kill()
        server.stop()

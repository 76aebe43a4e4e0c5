"""Suspend-based time-slicing (`tally-server --oversubscribe --slice-seconds S`) on
the emulator: two best-effort jobs whose memory does not fit together (the
high-priority reserve leaves best-effort jobs 24 MiB; each holds ~16 MiB) both
finish with exact results, taking turns (the first is suspended so the second
can allocate, and they swap each slice); without --oversubscribe the second
one's allocation fails as before."""
from __future__ import annotations

from e2e_helpers import build_cuda, emulator_server_process, finish, idle, start_job

MIB = 1 << 20
DEVICE_MIB = 16 << 10          # the emulator's default device memory
BE_POOL_MIB = 24


def reserve_flag() -> str:
    return f"{DEVICE_MIB - BE_POOL_MIB}M"


def test_two_jobs_that_do_not_fit_together_both_finish(nvcc):
    server = emulator_server_process("--hp-memory-reserve", reserve_flag(), "--oversubscribe",
                                     "--slice-seconds", "1")
    try:
        program = build_cuda(nvcc, "suspended_job.cu")
        # The first holds its memory while it waits on stdin, so the second's ballast
        # cannot fit until the slicer suspends the first (whatever the machine's speed).
        first = start_job(server.socket, program, "wait")
        assert first.stdout.readline().strip() == "looping"
        second = finish(start_job(server.socket, program), timeout=300)
        first.stdin.write("go\n")
        first.stdin.flush()
        results = [second, finish(first, timeout=300)]
        for r in results:
            assert r.returncode == 0, r.stdout + r.stderr
            assert r.ints("wrong_a", "wrong_b", "wrong_ballast", "wrong_seen", "rounds") == [0, 0, 0, 0, 400]
        status = server.wait_for(idle, what="both jobs to leave")
        mobility = status["server"]["mobility"]
        assert mobility["suspensions"] >= 1 and mobility["resumes"] == mobility["suspensions"]
    finally:
        server.stop()


def test_without_oversubscribe_the_second_job_runs_out_of_memory(nvcc):
    server = emulator_server_process("--hp-memory-reserve", reserve_flag())
    try:
        program = build_cuda(nvcc, "suspended_job.cu")
        first = start_job(server.socket, program, "wait")
        assert first.stdout.readline().strip() == "looping"
        second = finish(start_job(server.socket, program))
        assert second.returncode == 1 and "cudaErrorMemoryAllocation" in second.stdout, second.stdout
        first.stdin.write("go\n")
        first.stdin.flush()
        assert finish(first).returncode == 0
    finally:
        server.stop()

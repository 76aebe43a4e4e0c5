"""Device printf reaches the job that printed it, not the server."""
from __future__ import annotations

from e2e_helpers import build_cuda, emulator_server, run_job  # noqa: F401  (fixture)


def test_kernel_printf_goes_to_the_jobs_stdout_in_order(nvcc, emulator_server):
    job = run_job(emulator_server.socket, build_cuda(nvcc, "kernel_printf.cu"))
    assert job.returncode == 0, job.stdout + job.stderr
    lines = job.stdout.splitlines()
    first = sorted(f"kernel 7: block {b} thread {t}" for b in (0, 1) for t in (0, 1))
    assert lines[0] == "host: before"
    assert sorted(lines[1:5]) == first
    assert lines[5] == "host: after sync=0"
    assert sorted(lines[6:8]) == ["kernel 8: block 0 thread 0", "kernel 8: block 0 thread 1"]
    assert lines[8:] == ["host: done sync=0"]
    assert "kernel 7" not in emulator_server.process.log()

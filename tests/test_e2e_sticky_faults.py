"""A kernel's fault is sticky for the job that caused it, as CUDA documents for
its context-corrupting errors: tally's driver fails every later call that reaches
the device with it, until the job resets its context (cudaDeviceReset), after
which it runs kernels again. On the emulator, where a fault ends only the launch
that caused it, the other jobs never notice (the cuda backend's context-wide
faults: tests/test_cuda_backend_faults.py)."""
from __future__ import annotations

from e2e_helpers import CUDA_ERROR_ILLEGAL_ADDRESS, build_cuda, finish, run_job, start_job, server  # noqa: F401

N = 2048


def test_a_fault_is_sticky_until_the_job_resets_its_context(nvcc, server):
    bystander = start_job(server.socket, build_cuda(nvcc, "vector_add.cu"), 20000)
    job = run_job(server.socket, build_cuda(nvcc, "sticky_fault.cu"), priority="best-effort")
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("before_good", "fault") == [N, CUDA_ERROR_ILLEGAL_ADDRESS]
    # every call that reaches the device after the fault returns it, without a new explanation
    assert job.ints("copy", "malloc", "launch") == [CUDA_ERROR_ILLEGAL_ADDRESS] * 3
    explained = [line for line in job.stderr.splitlines() if line.startswith("tally: ")]
    assert len(explained) == 1 and "CUDA_ERROR_ILLEGAL_ADDRESS (700): kernel _Z10write_wildPi failed" in explained[0]
    assert job.ints("reset", "after_good") == [0, N]
    other = finish(bystander)
    assert other.returncode == 0 and other.ints("wrong", "roundtrip") == [0, 20000], other.stdout + other.stderr
    status = server.status()["server"]
    assert (status["device_faults"], status["last_device_fault"]) == (0, None)

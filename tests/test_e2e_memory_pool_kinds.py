"""Managed and pinned host memory pools (CUDA 13), as cuda.core's ManagedMemoryResource and
PinnedMemoryResource use them, through tally-run on the emulator at both priorities
(tests/cuda/programs/memory_pool_kinds.cu): each kind's default pool and a created one hand
out memory that the CPU and a kernel both use (managed memory; pinned host memory the device
reaches at the same address), counted by the pool and freed in stream order; each kind's
current pool is its own; what cuda.h refuses is refused."""
from __future__ import annotations

import pytest
from e2e_helpers import build_cuda, emulator_server, idle, run_job  # noqa: F401  (fixture)

from tally import paths

CUDA_ERROR_INVALID_VALUE = 1
BYTES = 4096 * 4


@pytest.fixture(scope="module")
def program(nvcc):
    return build_cuda(nvcc, "memory_pool_kinds.cu", flags=(f"-L{paths.LIB_DIR}", "-lcuda"))


@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_managed_and_host_pools_hand_out_memory_cpu_and_kernels_share(emulator_server, program, priority):
    job = run_job(emulator_server.socket, program, priority=priority)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.value("defaults_differ") == "1" and job.value("bad") == "0", job.stdout
    for which in ("default", "created"):
        assert f"{which}: is_managed=1 owner_is_pool=1 used={BYTES} after_free=0" in job.stdout, job.stdout
    for which in ("host_default", "host_created"):
        assert f"{which}: is_managed=0 owner_is_pool=1 used={BYTES} after_free=0" in job.stdout, job.stdout
    assert job.value("host_default_differs") == "1" and job.value("host_current_is_created") == "1", job.stdout
    assert [job.value(k) for k in ("current_is_default", "current_is_created", "default_current_again")] == \
        ["1", "1", "1"], job.stdout
    assert job.value("refused") == ",".join([str(CUDA_ERROR_INVALID_VALUE)] * 4), job.stdout
    assert "a managed or host pool cannot be the device's current pool" in job.stderr
    emulator_server.wait_for(idle, what="the job's pool memory to be given back")

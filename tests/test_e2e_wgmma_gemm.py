"""A Hopper GEMM tile loop under tally-run on the emulator: tests/cuda/programs/
tma_wgmma_gemm.cu (a producer warpgroup loading 128-byte-swizzled A and B tiles with
TMA into a two-stage mbarrier ring, two consumer warpgroups multiplying with wgmma
from shared-memory descriptors, setmaxnreg, elect.sync) is exact at high priority,
and best effort next to a high-priority job: sliced, or whole with the reason logged
where PTB cannot apply (the producer warpgroup returns early)."""
from __future__ import annotations

import pytest
from e2e_helpers import best_effort_beside_inference, build_cuda, emulator_server, run_job  # noqa: F401


@pytest.fixture(scope="module")
def gemm(nvcc):
    return build_cuda(nvcc, "tma_wgmma_gemm.cu", flags=("-gencode", "arch=compute_90a,code=compute_90a"))


def test_gemm_at_high_priority(emulator_server, gemm):
    job = run_job(emulator_server.socket, gemm, 2, 256, priority="high")
    assert job.returncode == 0 and "gemm correct" in job.stdout, job.stdout + job.stderr


def test_gemm_refuses_a_bad_size_before_any_cuda_call(emulator_server, gemm):
    job = run_job(emulator_server.socket, gemm, 1, 100)
    assert job.returncode == 2 and "multiple of 128" in job.stdout


@pytest.mark.parametrize("mode", ["slice", "ptb"])
def test_gemm_best_effort_next_to_a_high_priority_job(nvcc, tmp_path, gemm, mode):
    run = best_effort_beside_inference(nvcc, tmp_path, mode, gemm, 4, 1024)
    assert "gemm correct" in run.best_effort, run.best_effort
    if mode == "slice":
        assert run.scheduler["kernels_sliced"] > 0 and run.scheduler["slice_launches"] > 0, run.scheduler
    else:
        assert run.scheduler["kernels_ptb"] == 0 and run.scheduler["untransformable"] > 0, run.scheduler
        assert "gemm14CUtensorMap_stS_Pf has no ptb variant" in run.log

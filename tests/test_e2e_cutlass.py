"""A CUTLASS 3 Hopper GEMM (and convolution) from outside under tally-run on the emulator:
tests/cuda/programs/cutlass_sm90_gemm.cu is CUTLASS's own warp-specialized kernel
(CollectiveBuilder: a TMA producer warpgroup with multicast across a 2x1x1 cluster,
mbarrier pipelines, a wgmma consumer warpgroup, a TMA epilogue), built from the
headers the nvidia-cutlass package ships (cutlass_headers.py) for sm_90a PTX. Its
descriptors, swizzles, barriers and cluster code are NVIDIA's, not tally's, so an
exact result checks the emulator's Hopper path against code neither side wrote."""
from __future__ import annotations

import pytest
from cutlass_headers import cutlass_include_dir
from e2e_helpers import best_effort_beside_inference, build_cuda, emulator_server, run_job  # noqa: F401


def build(nvcc, *defines: str, program: str = "cutlass_sm90_gemm.cu"):
    include = cutlass_include_dir()
    return build_cuda(nvcc, program,
                      flags=("-std=c++17", "--expt-relaxed-constexpr", "-gencode", "arch=compute_90a,code=compute_90a",
                             f"-I{include}", *defines))


@pytest.fixture(scope="module")
def gemm(nvcc):
    return build(nvcc)


@pytest.mark.parametrize("shape", [(), ("512", "256", "192")], ids=["one-cluster", "four-clusters"])
def test_cutlass_gemm_is_exact_at_high_priority(emulator_server, gemm, shape):
    job = run_job(emulator_server.socket, gemm, *shape, priority="high", timeout=600)
    assert job.returncode == 0 and "cutlass_sm90_gemm ok" in job.stdout, job.stdout + job.stderr


def test_cutlass_gemm_with_half_output(emulator_server, nvcc):
    """Half C and D: the epilogue stages D through shared memory with stmatrix."""
    job = run_job(emulator_server.socket, build(nvcc, "-DGEMM_HALF_OUTPUT"), priority="high", timeout=600)
    assert job.returncode == 0 and "cutlass_sm90_gemm ok" in job.stdout, job.stdout + job.stderr


def test_cutlass_gemm_best_effort_next_to_a_high_priority_job(nvcc, tmp_path, gemm):
    """Best effort beside the demo's inference job, with slicing on: the cluster kernel
    (multicast, remote mbarrier arrives, cluster barriers) is sliced on cluster boundaries
    and stays exact, and the high-priority job's results are exact too."""
    # 1024 x 256 x 192: 16 CTAs, more than the emulator's 8 SMs; 20 runs of it
    run = best_effort_beside_inference(nvcc, tmp_path, "slice", gemm, 1024, 256, 192, 20, timeout=600)
    assert "cutlass_sm90_gemm ok" in run.best_effort, run.best_effort
    # sliced on cluster boundaries, each slice launched with the 2-CTA clusters
    assert run.scheduler["kernels_sliced"] > 0 and run.scheduler["slice_launches"] > 0, run.scheduler


@pytest.fixture(scope="module")
def conv(nvcc):
    return build(nvcc, program="cutlass_sm90_conv.cu")


@pytest.mark.parametrize("shape", [(), ("1", "17", "17", "128", "64", "3", "3", "1", "2"),
                                   ("3", "9", "12", "64", "128", "5", "5", "2", "1")],
                         ids=["3x3-pad1", "stride2", "5x5-pad2-three-images"])
def test_cutlass_conv_is_exact_at_high_priority(emulator_server, conv, shape):
    """CUTLASS's Hopper implicit-GEMM convolution: its activation tiles come by TMA in
    im2col mode with CUTLASS's own corners and offsets (padding, stride, filter tap) and
    its epilogue stores with .im2col_no_offs: exact against the host's convolution."""
    job = run_job(emulator_server.socket, conv, *shape, priority="high", timeout=600)
    assert job.returncode == 0 and "cutlass_sm90_conv ok" in job.stdout, job.stdout + job.stderr

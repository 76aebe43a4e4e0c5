"""A CUTLASS 3 Hopper GEMM from outside under tally-run on the emulator:
tests/cuda/programs/cutlass_sm90_gemm.cu is CUTLASS's own warp-specialized kernel
(CollectiveBuilder: a TMA producer warpgroup with multicast across a 2x1x1 cluster,
mbarrier pipelines, a wgmma consumer warpgroup, a TMA epilogue), built from the
headers the nvidia-cutlass package ships (cutlass_headers.py) for sm_90a PTX. Its
descriptors, swizzles, barriers and cluster code are NVIDIA's, not tally's, so an
exact result checks the emulator's Hopper path against code neither side wrote."""
from __future__ import annotations

import subprocess
import sys

import pytest
from cutlass_headers import cutlass_include_dir
from e2e_helpers import build_cuda, emulator_server, run_job  # noqa: F401


def build(nvcc, *defines: str):
    include = cutlass_include_dir()
    return build_cuda(nvcc, "cutlass_sm90_gemm.cu",
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
    from server_harness import ServerProcess
    from tally.bench.demo import compile_example
    from tally.cli.server_main import query_status

    inference = compile_example(nvcc, "inference", tmp_path)
    server = ServerProcess(tmp_path / "s.sock", backend="emulator", extra_args=("--be-transform", "slice"))

    def start(priority, *argv):
        return subprocess.Popen([sys.executable, "-m", "tally.cli.run_main", "--server", str(server.socket_path),
                                 "--priority", priority, "--", *map(str, argv)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        be = start("best-effort", gemm, 1024, 256, 192, 20)   # 16 CTAs: more than the 8 SMs
        hp = start("high", inference, 100)
        hp_out, _ = hp.communicate(timeout=600)
        be_out, _ = be.communicate(timeout=600)
        assert hp.returncode == 0 and "results correct" in hp_out, hp_out
        assert be.returncode == 0 and "cutlass_sm90_gemm ok" in be_out, be_out
        scheduler = query_status(server.socket_path)["server"]["scheduler"]
        # sliced on cluster boundaries, each slice launched with the 2-CTA clusters
        assert scheduler["kernels_sliced"] > 0 and scheduler["slice_launches"] > 0, scheduler
    finally:
        server.stop()

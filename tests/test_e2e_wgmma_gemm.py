"""A Hopper GEMM tile loop under tally-run on the emulator: tests/cuda/programs/
tma_wgmma_gemm.cu (a producer warpgroup loading 128-byte-swizzled A and B tiles with
TMA into a two-stage mbarrier ring, two consumer warpgroups multiplying with wgmma
from shared-memory descriptors, setmaxnreg, elect.sync) is exact at high priority,
and best effort next to a high-priority job: sliced, or whole with the reason logged
where PTB cannot apply (the producer warpgroup returns early)."""
from __future__ import annotations

import subprocess
import sys

import pytest
from e2e_helpers import build_cuda, emulator_server, run_job  # noqa: F401


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
    from server_harness import ServerProcess
    from tally.bench.demo import compile_example
    from tally.cli.server_main import query_status

    inference = compile_example(nvcc, "inference", tmp_path)
    server = ServerProcess(tmp_path / "s.sock", backend="emulator", extra_args=("--be-transform", mode))

    def start(priority, *argv):
        return subprocess.Popen([sys.executable, "-m", "tally.cli.run_main", "--server", str(server.socket_path),
                                 "--priority", priority, "--", *map(str, argv)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        be = start("best-effort", gemm, 4, 1024)
        hp = start("high", inference, 100)
        hp_out, _ = hp.communicate(timeout=300)
        be_out, _ = be.communicate(timeout=300)
        assert hp.returncode == 0 and "results correct" in hp_out, hp_out
        assert be.returncode == 0 and "gemm correct" in be_out, be_out
        scheduler = query_status(server.socket_path)["server"]["scheduler"]
        if mode == "slice":
            assert scheduler["kernels_sliced"] > 0 and scheduler["slice_launches"] > 0, scheduler
        else:
            assert scheduler["kernels_ptb"] == 0 and scheduler["untransformable"] > 0, scheduler
            assert "gemm14CUtensorMap_stS_Pf has no ptb variant" in server.log()
    finally:
        server.stop()

"""Best-effort kernels really run transformed (sliced or PTB, preempted by a
high-priority job) through the whole server path, and still compute exactly
what the job expects. The programs are the demo's (tally/data/examples/)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from server_harness import ServerProcess
from tally.bench.demo import compile_example
from tally.cli.server_main import query_status


@pytest.fixture(scope="module")
def programs(nvcc, tmp_path_factory):
    out = tmp_path_factory.mktemp("demo-programs")
    return {name: compile_example(nvcc, name, out) for name in ("inference", "training")}


def _run(socket, priority, program, *args):
    return subprocess.Popen([sys.executable, "-m", "tally.cli.run_main", "--server", str(socket), "--priority",
                             priority, "--", str(program), *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.parametrize("mode,counter", [("ptb", "kernels_ptb"), ("slice", "kernels_sliced")])
def test_transformed_best_effort_job_next_to_high_priority_is_exact(tmp_path, programs, mode, counter):
    server = ServerProcess(tmp_path / "s.sock", backend="emulator", extra_args=("--be-transform", mode))
    try:
        be = _run(server.socket_path, "best-effort", programs["training"], 200)
        hp = _run(server.socket_path, "high", programs["inference"], 100)
        hp_out, _ = hp.communicate(timeout=300)
        be_out, _ = be.communicate(timeout=300)
        assert hp.returncode == 0 and "results correct" in hp_out, hp_out
        assert be.returncode == 0 and "results correct" in be_out, be_out
        scheduler = query_status(server.socket_path)["server"]["scheduler"]
        # Some of the 600 best-effort kernels ran transformed; none of the
        # high-priority ones did (they are counted as whole kernels).
        assert scheduler[counter] > 0, scheduler
        assert scheduler["kernels_whole"] >= 100, scheduler
        assert scheduler["untransformable"] == 0, scheduler
    finally:
        server.stop()

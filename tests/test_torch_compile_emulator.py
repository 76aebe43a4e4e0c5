"""torch.compile (Inductor, default mode) of a model of pointwise ops and row
reductions (tests/cuda/programs/torch_compile_pointwise.py) under tally-run on the
CPU emulator: Inductor's Triton kernels run only through JIT capture, and the
result matches the eager model on the CPU.

Opt-in (`pytest -m triton`, see tests/test_triton_emulator.py for the interpreter)."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest
from e2e_helpers import PROGRAMS, Server, job_env
from test_triton_emulator import triton_python

pytestmark = pytest.mark.triton


def test_inductor_kernels_run_on_the_emulator_and_match_eager(tmp_path):
    python = triton_python()
    server = Server("emulator", ("--emulate-cc", "8.0"))
    env = {**job_env(), "XDG_CACHE_HOME": str(tmp_path / "xdg"), "TRITON_CACHE_DIR": str(tmp_path / "triton"),
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    try:
        done = subprocess.run([sys.executable, "-m", "tally.cli.run_main", "--server", str(server.socket), "--",
                               python, str(PROGRAMS / "torch_compile_pointwise.py")],
                              capture_output=True, text=True, env=env, timeout=900)
        assert done.returncode == 0, done.stdout + done.stderr[-4000:]
        found = re.search(r"max_error=(\S+) seconds=\S+ kernels=(\d+)", done.stdout)
        assert found and float(found[1]) <= 1e-5 and int(found[2]) >= 1, done.stdout
        # every kernel the job ran was Inductor's, each one's PTX captured
        assert server.process.log().count("a cubin's PTX came from JIT capture") == int(found[2])
        assert "failed to load" not in server.process.log()
    finally:
        server.stop()

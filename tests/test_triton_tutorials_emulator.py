"""Tutorial-style Triton kernels (tests/cuda/programs/triton_tutorials.py: vector add,
fused softmax, layer norm forward, matmul with tl.dot in float32 and on the tensor
cores in float16) under tally-run on the CPU emulator at compute capability 8.0
(mma.sync), and the float16 matmul at 9.0 (wgmma), checked against PyTorch on the CPU. Their
cubins run only because JIT capture gave the server their PTX (status says
"jit"); at best effort the same kernels run as PTB variants.

Opt-in (`pytest -m triton`, see tests/test_triton_emulator.py for the interpreter)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from e2e_helpers import PROGRAMS, Server, job_env
from test_triton_emulator import triton_python

pytestmark = pytest.mark.triton
KERNELS = ("vector_add", "softmax", "layer_norm", "matmul", "matmul_f16")


@pytest.fixture(scope="module")
def server():
    # 8.0: tl.dot on float16 is mma.sync (9.0's wgmma: the test at the end). Two SMs:
    # the kernels' grids (3 to 6 blocks) exceed the SM count, so the profiler's first
    # candidate for each is a PTB launch with 2 workers (with 8 SMs they would run whole).
    server = Server("emulator", ("--emulate-cc", "8.0", "--emulate-sms", "2", "--be-transform", "ptb"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """(the job's python, its environment): one Triton cache and one record cache for the module."""
    home = tmp_path_factory.mktemp("triton-home")
    return triton_python(), {**job_env(), "XDG_CACHE_HOME": str(home / "xdg"), "TRITON_CACHE_DIR": str(home / "triton")}


def _command(server, python, *args, priority="high"):
    return [sys.executable, "-m", "tally.cli.run_main", "--server", str(server.socket), "--priority", priority, "--",
            python, str(PROGRAMS / "triton_tutorials.py"), *args]


def _errors(stdout: str) -> dict[str, float]:
    return {m[1]: float(m[2]) for m in re.finditer(r"^(\w+) max_error=(\S+) seconds=", stdout, re.M)}


def test_tutorial_kernels_match_the_cpu_and_their_ptx_came_from_jit_capture(server, job):
    python, env = job
    proc = subprocess.Popen(_command(server, python, *KERNELS, "wait"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.PIPE, text=True, env=env)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.strip() == "ready":
                break
        out = "".join(lines)
        assert set(_errors(out)) == set(KERNELS), out
        (client,) = [c for c in server.status()["clients"] if c["pid"] != os.getpid()]
        sources = client["ptx_sources"]
        # one module per kernel, every one with PTX from the JIT compiler, none from an image or without PTX
        assert sources["modules"]["jit"] == len(KERNELS), sources
        assert sources["modules"]["none"] == 0 and sources["jit_records_refused"] == 0, sources
    finally:
        proc.stdin.write("go\n")
        proc.stdin.flush()
        rest, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out + rest + err
    errors = _errors(out)
    assert errors["vector_add"] == 0.0
    assert errors["softmax"] <= 1e-6 and errors["layer_norm"] <= 1e-5 and errors["matmul"] <= 1e-4, errors
    assert errors["matmul_f16"] == 0.0


def test_best_effort_tutorial_kernels_run_as_ptb_variants(server, job):
    python, env = job
    before = server.status()["server"]["scheduler"]
    done = subprocess.run(_command(server, python, *KERNELS, priority="best-effort"), capture_output=True,
                          text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(_errors(done.stdout)) == set(KERNELS), done.stdout
    after = server.status()["server"]["scheduler"]
    # every one of the job's launches ran transformed; nothing refused the transform
    assert after["kernels_ptb"] - before["kernels_ptb"] >= len(KERNELS), (before, after)
    assert after["untransformable"] == before["untransformable"], (before, after)


def test_float16_matmul_on_hopper_is_wgmma_from_captured_ptx(job):
    """At compute capability 9.0 Triton compiles tl.dot to wgmma.mma_async from shared-memory
    descriptors; the job's cubin runs on the emulator from the PTX JIT capture recorded,
    exactly, at high priority and best effort."""
    python, env = job
    hopper = Server("emulator", ("--emulate-cc", "9.0", "--be-transform", "ptb"))
    try:
        for priority in ("high", "best-effort"):
            done = subprocess.run(_command(hopper, python, "matmul_f16", priority=priority), capture_output=True,
                                  text=True, env=env, timeout=900)
            assert done.returncode == 0, done.stdout + done.stderr
            assert _errors(done.stdout) == {"matmul_f16": 0.0}, done.stdout
        records = list((Path(env["XDG_CACHE_HOME"]) / "tally" / "jit-ptx").rglob("*"))
        assert any("wgmma.mma_async" in p.read_text(errors="ignore") for p in records if p.is_file()), records
    finally:
        hopper.stop()

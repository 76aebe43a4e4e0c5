"""JAX, unmodified, under tally-run on the CPU emulator: how far it gets.

Opt-in (`pytest -m jax`, JAX's interpreter in TALLY_JAX_PYTHON when it is not the
current one, e.g. a venv with `pip install "jax[cuda13]"`, about 4 GB of wheels).

JAX's CUDA backend needed three things of the driver beyond libcuda that tally
now gives a job: the NVIDIA device files (JAX tries CUDA only if /dev/nvidiactl or
/dev/nvidia0 exists; tally's libcuda reports them where the machine has none), a
private driver table CUPTI asks for when it starts (its plugin checks CUPTI's
version first; docs/export-tables.md) and NVML (XLA loads it before it makes its
CUDA client: tally/lib/libnvidia-ml.so.1). jax.devices() then lists the CUDA
device. XLA assembles its kernels to cubins; tally-run has it run the assembler
through tally-ptxas (tally/jit/job_env.py), so each cubin comes with its PTX and
the emulator runs the jitted function: the result is numpy's."""
from __future__ import annotations

import subprocess

import pytest
from e2e_helpers import job_command, python_that_imports, server  # noqa: F401

pytestmark = pytest.mark.jax

PROGRAM = """
import jax, jax.numpy as jnp
print("devices", jax.devices())
try:
    print("result", jax.jit(lambda v: v * 2 + 1)(jnp.arange(8.0)))
except Exception as e:
    print("jit failed:", type(e).__name__, str(e)[:200])
"""


def jax_python() -> str:
    return python_that_imports("TALLY_JAX_PYTHON", "jax_plugins.xla_cuda13", "pip install 'jax[cuda13]'")


def test_jax_sees_the_cuda_device_and_runs_a_jitted_function_on_the_emulator(server):
    python = jax_python()
    job = subprocess.run(job_command(server.socket, python, "-c", PROGRAM), capture_output=True, text=True,
                         timeout=600, check=False)
    assert job.returncode == 0, job.stdout + job.stderr
    assert "devices [CudaDevice(id=0)]" in job.stdout, job.stdout + job.stderr
    assert "result [ 1.  3.  5.  7.  9. 11. 13. 15.]" in job.stdout, job.stdout + job.stderr
    assert "a cubin's PTX came from JIT capture" in server.process.log()

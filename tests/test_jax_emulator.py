"""JAX, unmodified, under tally-run on the CPU emulator: how far it gets.

Opt-in (`pytest -m jax`, JAX's interpreter in TALLY_JAX_PYTHON when it is not the
current one, e.g. a venv with `pip install "jax[cuda13]"`, about 4 GB of wheels).

JAX's CUDA backend needed three things of the driver beyond libcuda that tally
now gives a job: the NVIDIA device files (JAX tries CUDA only if /dev/nvidiactl or
/dev/nvidia0 exists; tally's libcuda reports them where the machine has none), a
private driver table CUPTI asks for when it starts (its plugin checks CUPTI's
version first; docs/export-tables.md) and NVML (XLA loads it before it makes its
CUDA client: tally/lib/libnvidia-ml.so.1). jax.devices() then lists the CUDA
device, and a jitted function's kernel reaches the server. It does not run on the
emulator yet: XLA assembles its kernels to cubins itself, and the emulator runs
PTX only, which the job is told (CUDA_ERROR_NO_BINARY_FOR_GPU with the reason)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from e2e_helpers import job_command, server  # noqa: F401

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
    python = os.environ.get("TALLY_JAX_PYTHON", sys.executable)
    probe = subprocess.run([python, "-c", "import jax_plugins.xla_cuda13"], capture_output=True, text=True,
                           timeout=300, check=False)
    if probe.returncode != 0:
        pytest.skip(f"{python} cannot import JAX's CUDA plugin; set TALLY_JAX_PYTHON (pip install 'jax[cuda13]')")
    return python


def test_jax_sees_the_cuda_device_and_its_kernels_reach_the_server(server):
    python = jax_python()
    job = subprocess.run(job_command(server.socket, python, "-c", PROGRAM), capture_output=True, text=True,
                         timeout=600, check=False)
    assert job.returncode == 0, job.stdout + job.stderr
    assert "devices [CudaDevice(id=0)]" in job.stdout, job.stdout + job.stderr
    # the jitted function's module reached the server, as XLA's cubin, which the emulator cannot run
    assert "jit failed: JaxRuntimeError" in job.stdout
    assert "holds a cubin for sm_90" in server.process.log()

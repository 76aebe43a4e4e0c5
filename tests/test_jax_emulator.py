"""JAX under tally-run on the CPU emulator: how far its CUDA plugin gets.

Opt-in (`pytest -m jax`, JAX's interpreter in TALLY_JAX_PYTHON when it is not the
current one, e.g. a venv with `pip install "jax[cuda13]"`, about 4 GB of wheels).

JAX's CUDA plugin checks the versions of the CUDA libraries it loads before it
registers, CUPTI's among them. CUPTI 13.1 and newer ask the driver for a private
table (docs/export-tables.md: 7cb63f9b-...) as their library starts; tally
answered "not found", CUPTI failed with error 999 and the check raised "Unable to
load cuPTI", so JAX fell back to the CPU without the server ever seeing the job.
Tally now has that table (its slots refused with a logged reason), and the check
passes. What is not there yet: XLA's device enumeration then reports "No visible
GPU devices" (README, "What tally does not do")."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from e2e_helpers import job_command, server  # noqa: F401

pytestmark = pytest.mark.jax

CHECK = """
import jax_plugins.xla_cuda13 as plugin
plugin._load_nvidia_libraries()      # what plugin.initialize() does first
plugin._import_extensions()
plugin._check_cuda_versions(raise_on_first_error=True)
print("cuda versions ok")
"""


def jax_python() -> str:
    python = os.environ.get("TALLY_JAX_PYTHON", sys.executable)
    probe = subprocess.run([python, "-c", "import jax_plugins.xla_cuda13"], capture_output=True, text=True,
                           timeout=300, check=False)
    if probe.returncode != 0:
        pytest.skip(f"{python} cannot import JAX's CUDA plugin; set TALLY_JAX_PYTHON (pip install 'jax[cuda13]')")
    return python


def test_the_cuda_plugins_library_check_passes_cupti_included(server):
    python = jax_python()
    job = subprocess.run(job_command(server.socket, python, "-c", CHECK), capture_output=True, text=True,
                         timeout=600, check=False)
    assert job.returncode == 0 and "cuda versions ok" in job.stdout, job.stdout + job.stderr
    assert "Unable to load cuPTI" not in job.stderr

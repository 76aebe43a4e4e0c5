"""SIMD video instructions on the emulator (tests/cuda/programs/simd_video.cu): CUDA's
per-byte intrinsics that compile to vabsdiff4 (stereoDisparity's __usad4) and the other
4- and 2-way forms through inline PTX, each equal to its definition computed on the CPU."""
from __future__ import annotations

import pytest
from e2e_helpers import build_cuda, emulator_server, run_job  # noqa: F401

FORMS = ("vabsdiffu4", "vsadu4", "vabsdiffs4", "vsads4", "vadd4_sat", "vsub4_s_sat", "vavrg4", "vmin4_s",
         "vmax2_add", "vset4_lt", "vadd2_s_add", "vabsdiff2")


@pytest.mark.parametrize("priority", ["best-effort", "high"])
def test_every_form_equals_its_definition(nvcc, emulator_server, priority):
    job = run_job(emulator_server.socket, build_cuda(nvcc, "simd_video.cu"), priority=priority)
    assert job.returncode == 0, job.stdout + job.stderr
    assert {form: job.value(f"{form}_good") for form in FORMS} == {form: "512" for form in FORMS}

"""Warp matrix functions (nvcuda::wmma) on the emulator (tests/cuda/programs/wmma_gemm.cu):
every fragment type it runs (f16 in three shapes with f32 and f16 accumulators, bf16, u8,
f64, tf32 through cvt.rna.tf32.f32), from global and shared memory, row and column major,
with a fragment scaled element by element; each product equal to the CPU's."""
from __future__ import annotations

import pytest
from e2e_helpers import build_cuda, emulator_server, run_job  # noqa: F401

CASES = {"f16_m16n16k16": 256, "f16_m32n8k16_f16acc": 256, "f16_m8n32k16": 256, "bf16_m16n16k16": 256,
         "u8_m16n16k16": 256, "f64_m8n8k4": 64, "tf32_m16n16k8": 256, "f16_shared_col_major": 256}


@pytest.mark.parametrize("priority", ["best-effort", "high"])
def test_every_fragment_type_multiplies_exactly(nvcc, emulator_server, priority):
    program = build_cuda(nvcc, "wmma_gemm.cu", flags=("-gencode", "arch=compute_80,code=compute_80"))
    job = run_job(emulator_server.socket, program, priority=priority)
    assert job.returncode == 0 and job.value("done") == "1", job.stdout + job.stderr
    assert {case: job.value(f"{case}_good") for case in CASES} == {case: str(n) for case, n in CASES.items()}

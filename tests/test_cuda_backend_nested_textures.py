"""Texture objects through the cuda backend without a GPU: the nested cuda-backend
server (tests/test_cuda_backend_nested.py) makes each of the job's texture objects
with its driver's cuTexObjectCreate (tally/backends/cuda_textures.py) over the job's
memory, as a linear or pitch-2D resource; that driver is tally's libcuda in front of
an emulator server, which makes and samples them. The forms that need the driver's
own CUDA arrays are refused with the reason."""
from __future__ import annotations

from e2e_helpers import build_cuda, run_job
from test_cuda_backend_nested import cuda_server  # noqa: F401  (one nested cuda-backend server for the module)
from test_e2e_textures import EVERY_FETCH, INVALID_VALUE, NOT_SUPPORTED, check_fetches


def creations_forwarded(server) -> int:
    [nested] = server.under.status()["clients"]
    return nested["requests_by_kind"].get("TextureCreate", 0)


def test_linear_pitch_and_2d_array_textures_are_the_drivers(nvcc, cuda_server):
    program = build_cuda(nvcc, "textures.cu")
    before = creations_forwarded(cuda_server)
    job = run_job(cuda_server.socket, program, "flat", timeout=300)
    assert job.returncode == 0 and job.value("done") == "1", job.stdout + job.stderr
    check_fetches(job.stdout, EVERY_FETCH)
    assert job.value("foreign_memory") == str(INVALID_VALUE)
    # a 3-D array's texture and a surface need the driver's own arrays
    assert job.value("array_forms") == f"{NOT_SUPPORTED},{NOT_SUPPORTED}"
    # a 2-D array is sampled as pitch-2D memory: rows of 28 bytes miss the 32-byte alignment
    assert job.value("narrow_rows") == str(NOT_SUPPORTED)
    # the ten textures the job made, and only those, were made by the nested server's
    # driver (sRGB, foreign memory, the 3-D array's and the surfaces never reach it)
    assert creations_forwarded(cuda_server) - before == 10

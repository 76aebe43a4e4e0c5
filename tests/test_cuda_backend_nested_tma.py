"""TMA tensor maps through the cuda backend without a GPU: the nested cuda-backend
server (tests/test_cuda_backend_nested.py) encodes each of tests/cuda/programs/tma_copies.cu's
tensor maps with its driver's cuTensorMapEncodeTiled (tally/backends/cuda_tensor_maps.py), and
one of tma_im2col.cu's with cuTensorMapEncodeIm2col,
whose bytes the job's kernels then read; that driver is tally's libcuda in front of an
emulator server, which encodes and runs the copies. The driver's refusals reach the job."""
from __future__ import annotations

from e2e_helpers import build_cuda, run_job
from test_cuda_backend_nested import cuda_server  # noqa: F401  (one nested cuda-backend server for the module)
from test_e2e_tma import CUDA_ERROR_INVALID_VALUE, expected_shared, values


def encodes_forwarded(server) -> int:
    [nested] = server.under.status()["clients"]
    return nested["requests_by_kind"].get("TensorMapEncode", 0)


def test_tensor_maps_are_the_drivers_and_the_copies_run(nvcc, cuda_server):
    program = build_cuda(nvcc, "tma_copies.cu", flags=("-gencode", "arch=compute_90a,code=compute_90a"))
    before = encodes_forwarded(cuda_server)
    job = run_job(cuda_server.socket, program, "load", 3, 32, 8, 8, 16, timeout=300)
    assert values(job) == expected_shared(3, 32, 8, 8, 16).tolist()
    assert encodes_forwarded(cuda_server) - before == 1
    bad = run_job(cuda_server.socket, program, "bad", timeout=300)
    assert bad.returncode == 0, bad.stdout + bad.stderr
    # rank 6 never leaves the job's client; the other three reach the driver and are refused there
    assert bad.ints("misaligned", "box", "swizzle_span", "rank") == [CUDA_ERROR_INVALID_VALUE] * 4
    assert bad.ints("good") == [0]
    assert encodes_forwarded(cuda_server) - before == 1 + 4


def test_an_im2col_map_is_the_drivers_and_its_column_is_copied(nvcc, cuda_server):
    from test_e2e_tma_im2col import COLUMNS, expected_column, load
    program = build_cuda(nvcc, "tma_im2col.cu", flags=("-gencode", "arch=compute_90a,code=compute_90a"))
    before = encodes_forwarded(cuda_server)
    case = COLUMNS["a strided 3x3 filter tap, 64B swizzle"]
    assert load(cuda_server, program, *case, timeout=300) == expected_column(*case)
    assert encodes_forwarded(cuda_server) - before == 1

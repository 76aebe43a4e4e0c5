"""Features tally refuses on every backend, as a job sees them (emulator): their
device attributes read 0 whatever the GPU could do, the one call that would need
them answers CUDA_ERROR_NOT_SUPPORTED with the reason in the job's log, and the
job carries on. Also the attribute rewrite itself, on what a real H200 reports."""
from __future__ import annotations

from e2e_helpers import build_driver_c, run_job, server  # noqa: F401
from tally.backends.device_attributes import ATTRIBUTE_IDS, as_tally_provides

CUDA_ERROR_NOT_SUPPORTED = 801


def test_a_job_sees_refused_features_as_absent(server):
    job = run_job(server.socket, build_driver_c("refused_features.c"))
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("dma_buf", "gpu_direct_rdma", "multicast", "fabric") == [0, 0, 0, 0]
    assert job.ints("pool_handle_types", "posix_fd") == [1, 1]
    assert job.value("dma_buf_export") == str(CUDA_ERROR_NOT_SUPPORTED)
    assert job.value("fd") == "-1"
    assert job.value("after") == "7"
    assert "cuMemGetHandleForAddressRange" in job.stderr and "GPUDirect RDMA" in job.stderr


def test_a_real_gpus_answers_are_rewritten():
    ids = ATTRIBUTE_IDS
    # What an H200 with GPUDirect RDMA and NVLink multicast answers.
    real = {ids["DMA_BUF_SUPPORTED"]: 1, ids["GPU_DIRECT_RDMA_SUPPORTED"]: 1, ids["MULTICAST_SUPPORTED"]: 1,
            ids["HANDLE_TYPE_FABRIC_SUPPORTED"]: 1, ids["MEMPOOL_SUPPORTED_HANDLE_TYPES"]: 0x9,
            ids["MULTIPROCESSOR_COUNT"]: 132, ids["COOPERATIVE_LAUNCH"]: 1}
    seen = as_tally_provides(real)
    assert [seen[ids[n]] for n in ("DMA_BUF_SUPPORTED", "GPU_DIRECT_RDMA_SUPPORTED", "MULTICAST_SUPPORTED",
                                   "HANDLE_TYPE_FABRIC_SUPPORTED")] == [0, 0, 0, 0]
    assert seen[ids["MEMPOOL_SUPPORTED_HANDLE_TYPES"]] == 0x1        # POSIX file descriptors only
    assert seen[ids["MULTIPROCESSOR_COUNT"]] == 132 and seen[ids["COOPERATIVE_LAUNCH"]] == 1
    assert real[ids["DMA_BUF_SUPPORTED"]] == 1                        # the device's own answer is kept

"""Why a call failed reaches the user without a trace flag: the first failure of
each kind (request and error) prints one "tally:" line with the server's
explanation on the job's stderr, asynchronous errors included (at the
synchronizing call that returns them); repeats print nothing. The server logs
each kind once at INFO and counts the repeats."""
from __future__ import annotations

from e2e_helpers import CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_INVALID_VALUE, build_cuda, run_job, server  # noqa: F401


def test_first_failure_of_each_kind_is_explained_once(nvcc, server):
    job = run_job(server.socket, build_cuda(nvcc, "failure_reasons.cu"))
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("memcpy_0", "memcpy_1", "memcpy_2") == [CUDA_ERROR_INVALID_VALUE] * 3
    assert job.ints("memset_async_0", "sync_0", "memset_async_1", "sync_1") == [0, CUDA_ERROR_INVALID_VALUE] * 2
    assert job.value("kernel_fault") == str(CUDA_ERROR_ILLEGAL_ADDRESS)

    lines = [line for line in job.stderr.splitlines() if line.startswith("tally: ")]
    assert len(lines) == 3, job.stderr
    bad_copy, bad_memset, fault = lines
    assert bad_copy.startswith("tally: MemcpyDtoH failed with CUDA_ERROR_INVALID_VALUE (1): copy source "
                               "0x7f0000000000+256 is not memory this client owns")
    assert bad_memset.startswith("tally: StreamSynchronize failed with CUDA_ERROR_INVALID_VALUE (1): an earlier "
                                 "asynchronous Memset failed: memset destination 0x7f0000000000+256 is not memory "
                                 "this client owns")
    assert fault.startswith("tally: CtxSynchronize failed with CUDA_ERROR_ILLEGAL_ADDRESS (700): kernel "
                            "_Z10write_wildPi failed: illegal address 0x10")
    assert "by thread (0,0,0) of block (0,0,0)" in fault

    server.wait_for(lambda s: not s["clients"] and not s["server"]["clients_leaving"], what="the job to leave")
    log = server.process.log()
    logged = [line for line in log.splitlines() if " failed with " in line]
    assert [line.split(": ", 2)[1] for line in logged] == [
        "MemcpyDtoH failed with CUDA_ERROR_INVALID_VALUE", "Memset failed with CUDA_ERROR_INVALID_VALUE",
        "CtxSynchronize failed with CUDA_ERROR_ILLEGAL_ADDRESS"], log
    assert all(" INFO " in line for line in logged)
    assert "3 more failed requests not logged: MemcpyDtoH CUDA_ERROR_INVALID_VALUE x2, " \
           "Memset CUDA_ERROR_INVALID_VALUE x1" in log

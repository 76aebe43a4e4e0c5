"""Stream attributes end to end (stream_attributes.cu, built by nvcc at test time, under
tally-run on the emulator at both priorities): an access-policy window, the
synchronization policy and the priority are kept and read back (cudaStreamGetPriority
agrees), copied to another stream, set on the default stream and cleared; the stream's
kernels run under the window; a window larger than the device allows, a hit ratio
above 1 and a launch-only attribute are refused with cudaErrorInvalidValue, the
first with its reason in the job's log, and change nothing."""
from __future__ import annotations

import pytest
from e2e_helpers import build_cuda, emulator_server, run_job  # noqa: F401

CUDA_ERROR_INVALID_VALUE = 1
SYNC_POLICY_YIELD = 3            # cudaSyncPolicyYield
MAX_WINDOW = 134_213_632         # the emulated device's CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE


def check_stream_attributes_job(job) -> None:
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("max_window", "window_read_back", "sync_policy", "priority", "get_priority") == [
        MAX_WINDOW, 1, SYNC_POLICY_YIELD, -3, -3]
    assert job.ints("kernel_wrong") == [0]
    assert job.ints("copied_window", "copied_sync_policy", "copied_priority") == [1, SYNC_POLICY_YIELD, -3]
    assert job.ints("default_window", "default_cleared_bytes") == [1, 0]
    assert job.ints("too_large", "bad_ratio", "not_a_stream_attribute", "window_kept") == [
        CUDA_ERROR_INVALID_VALUE] * 3 + [1]
    assert "larger than the device's CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE" in job.stderr, job.stderr


@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_stream_attributes(nvcc, emulator_server, priority):
    check_stream_attributes_job(run_job(emulator_server.socket, build_cuda(nvcc, "stream_attributes.cu"),
                                        priority=priority))


def test_stream_attributes_with_per_thread_default_streams(nvcc, emulator_server):
    # nvcc --default-stream per-thread: cudart calls the _ptsz entry points, and stream 0
    # is the thread's own default stream, with attributes of its own
    program = build_cuda(nvcc, "stream_attributes.cu", flags=("--default-stream", "per-thread"))
    job = run_job(emulator_server.socket, program, env={"TALLY_CLIENT_TRACE": "1"})
    check_stream_attributes_job(job)
    for call in ("cuStreamSetAttribute_ptsz -> 0", "cuStreamGetAttribute_ptsz -> 0", "cuStreamCopyAttributes_ptsz -> 0"):
        assert f"tally-trace: {call}" in job.stderr, call
